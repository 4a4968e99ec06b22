"""User kernels: torch_tpu.kernels.c_kernel (C compiled with the system
compiler, run by the vTPU executor as a custom_call node of fused programs)
and Helion kernels on tpu tensors (reference mode)."""
import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import torch_tpu.sync as sync
from torch_tpu import _C
from torch_tpu import pjrt
from torch_tpu.execution_mode import EagerMode, eager_mode
from torch_tpu.kernels import CKernelCompileError, c_kernel
from torch_tpu.kernels import _c_kernel

from conftest import DEV

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))
import c_kernel_rmsnorm as ex  # noqa: E402

SCALE_SRC = r"""
#include <stdint.h>
void scale_{n}(const float *x, float *y, int64_t N) {{
  for (int64_t i = 0; i < N; i++) y[i] = {n}.0f * x[i];
}}
"""


@pytest.fixture(autouse=True)
def _private_kernel_cache(tmp_path_factory, monkeypatch):
    """Compiled kernels go to a per-session directory, not ~/.cache."""
    d = tmp_path_factory.getbasetemp() / "xdg"
    monkeypatch.delenv("TORCH_TPU_COMPILATION_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(d))


def rms_ref(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def scale_kernel(n):
    return c_kernel(f"scale_{n}", SCALE_SRC.format(n=n), "(float32[N] x) -> float32[N]")


def test_rmsnorm_matches_cpu_strict():
    k = ex.rmsnorm_kernel()
    torch.manual_seed(0)
    x, w = torch.randn(37, 100), torch.randn(100)
    y = k(x.to(DEV), w.to(DEV), 1e-5)
    assert y.device.type == "tpu" and y.dtype == torch.float32 and y.shape == (37, 100)
    torch.testing.assert_close(y.cpu(), rms_ref(x, w, 1e-5), rtol=1e-5, atol=1e-5)
    # a strided operand (transposed view) is handed to the kernel contiguous
    xt = torch.randn(100, 37)
    y = k(xt.to(DEV).t(), w.to(DEV), 1e-5)
    torch.testing.assert_close(y.cpu(), rms_ref(xt.t(), w, 1e-5), rtol=1e-5, atol=1e-5)


def test_kernel_is_one_node_of_a_fused_program():
    k = ex.rmsnorm_kernel()
    x, w = torch.randn(8, 64), torch.randn(64)
    xd, wd = x.to(DEV), w.to(DEV)
    torch.tpu.synchronize()
    runs0 = _C._c_kernel_runs()
    torch.tpu._reset_cache_stats()
    with eager_mode(EagerMode.DEFER_AND_FUSE):
        h = (xd * 2).relu()
        y = k(h, wd + 1, 1e-6) * 3 - h
        text = _C._dump_pending(0, 0)
        assert sync.pending_ops() == 6, text  # mul, relu, add, c_kernel, mul, sub
        out = y.cpu()
    s = torch.tpu._get_cache_stats()
    assert "custom_call(" in text, text
    assert s["programs_run"] == 1 and s["ops_recorded"] == 6, s
    assert s["c_kernels"]["runs"] == runs0 + 1, s
    hr = (x * 2).relu()
    torch.testing.assert_close(out, rms_ref(hr, w + 1, 1e-6) * 3 - hr, rtol=1e-5, atol=1e-5)


def test_program_cache_key_covers_the_kernel_and_not_scalars():
    k2, k3 = scale_kernel(2), scale_kernel(3)
    x = torch.arange(6, dtype=torch.float32)
    xd = x.to(DEV)
    for k, n in ((k2, 2), (k3, 3), (k2, 2)):  # same structure, different kernels
        with eager_mode(EagerMode.DEFER_AND_FUSE):
            out = (k(xd + 1) - 1).cpu()
        torch.testing.assert_close(out, n * (x + 1) - 1)
    # a changed scalar argument is a run-time input: the program is reused
    k = ex.rmsnorm_kernel()
    w = torch.ones(16, device=DEV)
    xs = torch.randn(4, 16)
    xd = xs.to(DEV)
    torch.tpu.synchronize()
    for i, eps in enumerate((1e-3, 1e-3, 0.5)):
        if i == 2:
            misses = torch.tpu._get_cache_stats()["misses"]
        with eager_mode(EagerMode.DEFER_AND_FUSE):
            out = (k(xd + 0, w, eps) * 2).cpu()
    assert torch.tpu._get_cache_stats()["misses"] == misses
    torch.testing.assert_close(out, 2 * rms_ref(xs, torch.ones(16), 0.5), rtol=1e-5, atol=1e-5)


def test_compiles_once_per_kernel():
    src = SCALE_SRC.format(n=5).replace("scale_5", "scale_once")
    before = _c_kernel.stats()["compiles"]
    a = c_kernel("scale_once", src, "(float32[N] x) -> float32[N]")
    b = c_kernel("scale_once", src, "(float32[N] x) -> float32[N]")
    assert a is b
    assert _c_kernel.stats()["compiles"] == before + 1
    stats = torch.tpu._get_cache_stats()["c_kernels"]
    assert stats["compiles"] >= 1 and stats["loads"] >= 1, stats
    torch.testing.assert_close(a(torch.ones(3, device=DEV)).cpu(), torch.full((3,), 5.0))


def test_disk_cache_survives_a_process_restart(tmp_path):
    code = textwrap.dedent("""
        import sys, torch, torch_tpu
        sys.path.insert(0, "examples")
        import c_kernel_rmsnorm as ex
        k = ex.rmsnorm_kernel()
        y = k(torch.ones(2, 8, device="tpu"), torch.ones(8, device="tpu"), 0.0)
        assert torch.allclose(y.cpu(), torch.ones(2, 8))
        s = torch.tpu._get_cache_stats()["c_kernels"]
        print("STATS", s["compiles"], s["disk_hits"], s["runs"])
    """)
    env = dict(os.environ, TORCH_TPU_COMPILATION_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               TORCH_TPU_LOCK_DIR=str(tmp_path / "locks"))
    outs = []
    for _ in range(2):
        r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stdout + r.stderr
        outs.append(r.stdout.split("STATS")[1].split())
    assert outs[0] == ["1", "0", "1"], outs
    assert outs[1] == ["0", "1", "1"], outs
    assert any(f.endswith(".so") for f in os.listdir(tmp_path / "cache" / "c_kernels"))


def test_compiler_errors_are_clear():
    with pytest.raises(CKernelCompileError, match=r"(?s)the C compiler failed.*error") as e:
        c_kernel("broken", "void broken(const float *x, float *y, long n) { y[0] = x[0] +; }",
                 "(float32[N] x) -> float32[N]")
    assert isinstance(e.value, RuntimeError)
    # a C prototype that does not match the signature fails to compile too
    with pytest.raises(CKernelCompileError, match="incompatible"):
        c_kernel("wrongproto", "void wrongproto(const double *x, double *y, long n) {}",
                 "(float32[N] x) -> float32[N]")


def test_parallel_rows_match_one_call():
    src = ex.RMSNORM_SRC.replace("rmsnorm", "rms_serial")
    serial = c_kernel("rms_serial", src, ex.RMSNORM_SIG)
    x, w = torch.randn(301, 64, device=DEV), torch.randn(64, device=DEV)
    par = ex.rmsnorm_kernel()  # parallel="N"
    assert torch.equal(par(x, w, 1e-6).cpu(), serial(x, w, 1e-6).cpu())
    with pytest.raises(ValueError, match="must be dimension 0 only"):
        c_kernel("rms_bad", src, "(float32[N,D] x, float32[D] w, float eps) -> float32[N,D]",
                 parallel="D")
    with pytest.raises(ValueError, match="not a size symbol"):
        c_kernel("rms_bad", src, ex.RMSNORM_SIG, parallel="K")


@pytest.mark.parametrize("sig, match", [
    ("float32[N] x -> float32[N]", "parentheses"),
    ("(float32[N] x)", "inputs"),
    ("(float33[N] x) -> float32[N]", "unknown dtype"),
    ("(float32[N] x) -> float32[M]", "no input dimension"),
    ("(float32[N] x) -> float32[N**2]", "only names"),
    ("(float32[N] x, float32[N] x) -> float32[N]", "repeated"),
    ("(bfloat16 s, float32[N] x) -> float32[N]", "scalars are not supported"),
])
def test_bad_signatures_raise_value_error(sig, match):
    with pytest.raises(ValueError, match=match):
        c_kernel("k", "void k(void) {}", sig)


def test_bad_inputs_raise_like_pytorch():
    k = ex.rmsnorm_kernel()
    x, w = torch.randn(4, 8, device=DEV), torch.randn(8, device=DEV)
    with pytest.raises(TypeError, match=r"takes 3 positional arguments .* 2 were given"):
        k(x, w)
    with pytest.raises(TypeError, match="argument 'w' must be Tensor, not float"):
        k(x, 1.0, 1e-6)
    with pytest.raises(TypeError, match="argument 'eps' must be float, not Tensor"):
        k(x, w, w)
    with pytest.raises(RuntimeError, match=r"argument 'x' to have dtype float32.*got dtype "
                                           r"float64"):
        k(x.double(), w, 1e-6)
    with pytest.raises(RuntimeError, match=r"argument 'w' to have 1 dimension\(s\) \[D\]"):
        k(x, w[None], 1e-6)
    with pytest.raises(RuntimeError, match=r"size mismatch for 'D'.*'x' has D = 8.*'w' has D = 7"):
        k(x, w[:7], 1e-6)
    with pytest.raises(RuntimeError, match="same device"):
        k(x, w.cpu(), 1e-6)
    with pytest.raises(RuntimeError, match="run on tpu tensors"):
        k(x.cpu(), w.cpu(), 1e-6)
    # the op itself (what torch.compile calls) checks in C with the same words
    with pytest.raises(RuntimeError, match=r"argument 'x' to have dtype float32"):
        k.op(x.double(), w, 1e-6)
    with pytest.raises(RuntimeError, match="same device"):
        k.op(x, w.cpu(), 1e-6)


MULTI_SRC = r"""
#include <stdint.h>
/* row sums and, per row, (argmax, count of positives) */
void stats(const float *x, int32_t k, float *s, int64_t *info, int64_t R, int64_t C) {
  for (int64_t i = 0; i < R; i++) {
    float acc = 0; int64_t best = 0, pos = 0;
    for (int64_t j = 0; j < C; j++) {
      float v = x[i * C + j];
      acc += v; pos += v > 0;
      if (v > x[i * C + best]) best = j;
    }
    s[i] = acc * (float)k;
    info[2 * i] = best; info[2 * i + 1] = pos;
  }
}
"""


def test_multiple_outputs_size_expressions_and_int_scalars():
    k = c_kernel("stats", MULTI_SRC,
                 "(float32[R,C] x, int32 k) -> (float32[R] s, int64[R*2] info)")
    x = torch.randn(5, 7)
    s, info = k(x.to(DEV), 3)
    torch.testing.assert_close(s.cpu(), x.sum(1) * 3, rtol=1e-5, atol=1e-5)
    want = torch.stack([x.argmax(1), (x > 0).sum(1)], 1).reshape(-1)
    assert info.dtype == torch.int64 and torch.equal(info.cpu(), want)
    with eager_mode(EagerMode.DEFER_AND_FUSE):  # both results in one program
        s2, info2 = k(x.to(DEV) * 1, 2)
        out = (s2.sum() + info2.sum()).cpu()
    torch.testing.assert_close(out, x.sum() * 2 + want.sum().float(), rtol=1e-4, atol=1e-4)


def test_torch_compile_one_program_and_fake_checks():
    k = ex.rmsnorm_kernel()
    w = torch.randn(32)
    wd = w.to(DEV)

    def f(x):
        return k(x * 2, wd, 1e-6).relu() + 1

    step = torch.compile(f, backend="tpu")
    torch.tpu._reset_cache_stats()
    x = torch.randn(6, 32)
    for _ in range(2):
        out = step(x.to(DEV))
    torch.testing.assert_close(out.cpu(), rms_ref(x * 2, w, 1e-6).relu() + 1, rtol=1e-5,
                               atol=1e-5)
    s = torch.tpu._get_cache_stats()
    assert s["captures"] == 1 and s["compile"]["replays"] >= 1, s
    # the fake implementation checks shapes at trace time
    bad = torch.compile(lambda x: k(x, wd, 1e-6), backend="tpu")
    with pytest.raises(RuntimeError, match="size mismatch for 'D'"):
        bad(torch.randn(3, 31, device=DEV))


@pytest.mark.skipif(pjrt.discover().get("cpu") is None, reason="xla-cpu-pjrt is not installed")
def test_pjrt_executor_raises_not_implemented_naming_the_kernel(tmp_path):
    code = textwrap.dedent("""
        import sys, torch, torch_tpu
        sys.path.insert(0, "examples")
        import c_kernel_rmsnorm as ex
        k = ex.rmsnorm_kernel()
        try:
            k(torch.ones(2, 8, device="tpu"), torch.ones(8, device="tpu"), 0.0).cpu()
            print("RAN")
        except NotImplementedError as e:
            print("NIE", e)
    """)
    env = dict(os.environ, TORCH_TPU_BACKEND="pjrt", TORCH_TPU_LOCK_DIR=str(tmp_path / "l"),
               TORCH_TPU_COMPILATION_CACHE_DIR=str(tmp_path / "c"),
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("TORCH_TPU_PJRT_FALLBACK", None)
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=600)
    assert "NIE" in r.stdout and "'rmsnorm'" in r.stdout and "PJRT" in r.stdout, \
        r.stdout + r.stderr


def test_llama_example_matches_cpu():
    pytest.importorskip("transformers")
    ex.main()


# ---- Helion ------------------------------------------------------------------

needs_helion = pytest.mark.skipif(importlib.util.find_spec("helion") is None,
                                  reason="helion is not installed")


@needs_helion
def test_helion_kernel_runs_on_tpu_through_fused_ops():
    import helion_kernels as hk

    x, w = torch.randn(24, 40), torch.randn(40)
    torch.testing.assert_close(hk.rms(x.to(DEV), w.to(DEV)).cpu(), rms_ref(x, w, 1e-6),
                               rtol=1e-5, atol=1e-5)
    x, w = torch.randn(20, 48), torch.randn(48)  # another shape: no repeated op sequence
    xd, wd = x.to(DEV), w.to(DEV)
    torch.tpu.synchronize()
    torch.tpu._reset_cache_stats()
    with eager_mode(EagerMode.DEFER_AND_FUSE):
        out = hk.add(hk.rms(xd, wd), xd).cpu()
    s = torch.tpu._get_cache_stats()
    assert s["programs_run"] == 1, s
    torch.testing.assert_close(out, rms_ref(x, w, 1e-6) + x, rtol=1e-5, atol=1e-5)
    # a Config's block size is honoured: 3 tiles of 8 rows, still one program
    torch.tpu._reset_cache_stats()
    with eager_mode(EagerMode.DEFER_AND_FUSE):
        out = hk.row_sum_tiled(xd).cpu()
    assert torch.tpu._get_cache_stats()["programs_run"] == 1
    torch.testing.assert_close(out, x.sum(-1), rtol=1e-5, atol=1e-5)


@needs_helion
def test_helion_kernel_under_torch_compile():
    import helion_kernels as hk

    x, w = torch.randn(16, 32), torch.randn(32)
    wd = w.to(DEV)
    step = torch.compile(lambda x: hk.add(hk.rms(x, wd), x) * 2, backend="tpu")
    torch.tpu._reset_cache_stats()
    for _ in range(2):
        out = step(x.to(DEV))
    torch.testing.assert_close(out.cpu(), (rms_ref(x, w, 1e-6) + x) * 2, rtol=1e-5, atol=1e-5)
    s = torch.tpu._get_cache_stats()
    assert s["captures"] >= 1, s

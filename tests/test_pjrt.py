"""The PJRT executor (TORCH_TPU_BACKEND=pjrt) through XLA:CPU (xla-cpu-pjrt).

The executor is chosen once per process, so every check runs in a child
process with the backend set; the parent (this pytest process) stays on
the vTPU. Skipped when the xla-cpu-pjrt plugin is not installed (`make test`
installs it)."""
import os
import subprocess
import sys
import tempfile
import textwrap

import pytest

from torch_tpu import pjrt

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CPU_PLUGIN = pjrt.discover().get("cpu")
needs_plugin = pytest.mark.skipif(CPU_PLUGIN is None, reason="xla-cpu-pjrt is not installed")


def run_child(code, **env):
    e = dict(os.environ)
    e.pop("TORCH_TPU_PJRT_PLUGIN", None)
    e.update({"PYTHONPATH": ROOT + os.pathsep + e.get("PYTHONPATH", ""),
              "TORCH_TPU_CPU_FALLBACK": "0",
              # its own chips: this pytest process may hold chip 0
              "TORCH_TPU_LOCK_DIR": tempfile.mkdtemp(prefix="torch_tpu_pjrt_locks_")})
    e.update(env)
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=e, cwd=ROOT,
                       capture_output=True, text=True, timeout=600)
    return p.returncode, p.stdout + p.stderr


@needs_plugin
def test_pjrt_matches_cpu_and_trains():
    """Matmul at every precision, an MLP and a small transformer block train
    with decreasing loss, Strict and Fused Eager, everything compiled by XLA."""
    rc, out = run_child("""
        import torch, torch_tpu
        import torch.nn as nn
        from torch_tpu import execution_mode as em
        assert torch_tpu.pjrt.executor() == "pjrt"
        name = torch.tpu.get_device_name()
        assert "PJRT" in name and "cpu" in name, name
        torch.manual_seed(0)
        a, b = torch.randn(33, 70), torch.randn(70, 17)
        for p in (torch.tpu.Precision.DEFAULT, torch.tpu.Precision.HIGH,
                  torch.tpu.Precision.HIGHEST):
            with torch.tpu.precision(p):
                got = (a.to("tpu") @ b.to("tpu")).cpu()
            # XLA:CPU computes f32 exactly at every precision
            torch.testing.assert_close(got, a @ b, rtol=1e-5, atol=1e-5)

        def train(model_fn, x, y, steps, mode, dev="tpu"):
            with em.eager_mode(mode):
                torch.manual_seed(1)
                m = model_fn().to(dev)
                opt = torch.optim.SGD(m.parameters(), lr=0.1)
                losses = []
                for _ in range(steps):
                    opt.zero_grad()
                    loss = nn.functional.mse_loss(m(x.to(dev)), y.to(dev))
                    loss.backward()
                    opt.step()
                    losses.append(loss.item())
            return losses

        x, y = torch.randn(64, 16), torch.randn(64, 4)
        mlp = lambda: nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))
        ref = train(mlp, x, y, 15, "DEFER_NEVER", "cpu")
        for mode in ("DEFER_NEVER", "DEFER_AND_FUSE"):
            l = train(mlp, x, y, 15, mode)
            assert l[-1] < 0.9 * l[0], (mode, l)
            torch.testing.assert_close(torch.tensor(l), torch.tensor(ref), rtol=1e-4, atol=1e-5)
        block = lambda: nn.Sequential(
            nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True),
            nn.Flatten(), nn.Linear(16 * 8, 4))
        xs = torch.randn(8, 8, 16)
        ys = torch.randn(8, 4)
        l = train(block, xs, ys, 10, "DEFER_AND_FUSE")
        ref = train(block, xs, ys, 10, "DEFER_NEVER", "cpu")
        assert l[-1] < 0.9 * l[0], l
        torch.testing.assert_close(torch.tensor(l), torch.tensor(ref), rtol=1e-3, atol=1e-4)
        # the vTPU's run-time checks hold on PJRT too
        t = torch.randn(10, 4).to("tpu")
        try:
            torch.nn.functional.embedding(torch.tensor([[1, 10]]).to("tpu"), t).cpu()
            raise SystemExit("no IndexError")
        except IndexError as e:
            assert "index out of range" in str(e), e
        s = torch_tpu.pjrt.stats()
        assert s["compiles"] > 0 and s["executions"] >= s["compiles"], s
        assert s["fallbacks"] == 0, s
        print("OK", s)
    """, TORCH_TPU_BACKEND="pjrt")
    assert rc == 0 and "OK" in out, out


@needs_plugin
def test_torch_compile_runs_through_pjrt():
    """torch.compile(backend="tpu") replays its captured programs through the
    same executor: a compiled MLP trains like the CPU model."""
    rc, out = run_child("""
        import torch, torch_tpu, torch.nn as nn
        def run(dev, compiled):
            torch.manual_seed(0)
            m = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4)).to(dev)
            opt = torch.optim.SGD(m.parameters(), lr=0.1)
            f = torch.compile(m, backend="tpu") if compiled else m
            g = torch.Generator().manual_seed(1)
            x, y = torch.randn(64, 16, generator=g), torch.randn(64, 4, generator=g)
            ls = []
            for _ in range(6):
                opt.zero_grad()
                loss = nn.functional.mse_loss(f(x.to(dev)), y.to(dev))
                loss.backward()
                opt.step()
                ls.append(loss.item())
            return ls
        got, ref = run("tpu", True), run("cpu", False)
        torch.testing.assert_close(torch.tensor(got), torch.tensor(ref), rtol=1e-4, atol=1e-5)
        assert got[-1] < got[0]
        s = torch_tpu.pjrt.stats()
        assert s["executions"] > 0 and s["fallbacks"] == 0, s
        print("OK", s)
    """, TORCH_TPU_BACKEND="pjrt")
    assert rc == 0 and "OK" in out, out


@needs_plugin
def test_unsupported_op_is_a_clear_error_or_a_counted_fallback():
    code = """
        import torch, torch_tpu
        a = torch.randn(4, 4) + 4 * torch.eye(4)
        try:
            lu, piv = torch.linalg.lu_factor(a.to("tpu"))
            lu.cpu()
            print("RAN", torch_tpu.pjrt.stats())
        except RuntimeError as e:
            print("ERR", e)
    """
    rc, out = run_child(code, TORCH_TPU_BACKEND="pjrt")
    assert "ERR" in out and "unsupported on PJRT: " in out, out
    rc, out = run_child(code, TORCH_TPU_BACKEND="pjrt", TORCH_TPU_PJRT_FALLBACK="vtpu")
    assert "RAN" in out and "'fallbacks': 0" not in out, out


def test_bad_plugin_fails_with_a_clear_message(tmp_path):
    rc, out = run_child("""
        import torch, torch_tpu
        try:
            torch.tpu.get_device_name()
        except RuntimeError as e:
            print("ERR", e)
    """, TORCH_TPU_BACKEND="pjrt", TORCH_TPU_PJRT_PLUGIN=str(tmp_path / "nope.so"))
    assert "ERR PJRT plugin" in out and "cannot load" in out, out


def test_libtpu_without_tpu_fails_with_a_clear_message(tmp_path):
    """The installed libtpu (or TORCH_TPU_TEST_LIBTPU, or a stand-in file
    named libtpu.so: the check runs before the library is loaded) on a
    machine without TPU device nodes fails at once with a clear message
    (the real libtpu otherwise retries the GCE metadata server for minutes)."""
    import glob

    if glob.glob("/dev/accel[0-9]*") or glob.glob("/dev/vfio/[0-9]*"):
        pytest.skip("this machine has TPU device nodes")
    path = pjrt.discover().get("tpu") or os.environ.get("TORCH_TPU_TEST_LIBTPU")
    if not path:
        path = str(tmp_path / "libtpu.so")
        open(path, "wb").close()
    rc, out = run_child("""
        import torch, torch_tpu
        try:
            print("NAME", torch.tpu.get_device_name())
        except RuntimeError as e:
            print("ERR", e)
    """, TORCH_TPU_BACKEND="pjrt", TORCH_TPU_PJRT_PLUGIN=path)
    assert "ERR PJRT plugin" in out and "no TPU on this machine" in out, out
    assert "libtpu runs only on a TPU VM" in out, out


def test_discovery_and_configure():
    found = pjrt.discover()
    assert set(found) <= {"tpu", "cuda", "cpu"}
    assert all(os.path.exists(p) for p in found.values())
    env = {"TORCH_TPU_BACKEND": "vtpu"}
    assert pjrt.configure(env) is None and "TORCH_TPU_PJRT_PLUGIN" not in env
    env = {"TORCH_TPU_BACKEND": "pjrt", "TORCH_TPU_PJRT_PLUGIN": "/x.so"}
    assert pjrt.configure(env) == "/x.so"
    env = {"TORCH_TPU_BACKEND": "pjrt"}
    got = pjrt.configure(env)
    want = found.get("tpu") or found.get("cuda") or found.get("cpu")
    assert got == want and env.get("TORCH_TPU_PJRT_PLUGIN") == want
    env = {}
    got = pjrt.configure(env)
    accel = found.get("tpu") or found.get("cuda")
    assert got == accel
    assert env.get("TORCH_TPU_BACKEND") == ("auto" if accel else None)


# OpInfo CI subset through XLA:CPU: one or two OpInfos per emitter family
# (elementwise, CHLO transcendental, compare/select, shape, reductions with
# regions, argmax, dot_general, convolution, pooling windows, gather/scatter,
# sort, cumulative ops, softmax/norms/losses, FFT, Cholesky, triangular
# solve, the Philox RNG). The full float32 sweep is `make opinfo-pjrt`.
PJRT_OPINFO_SUBSET = (
    "add mul div.no_rounding_mode pow atan2 exp tanh erf erfinv lgamma sigmoid where clamp "
    "eq isnan cat transpose flip nn.functional.pad.constant narrow sum mean amax prod argmax "
    "var std matmul bmm addmm einsum nn.functional.conv2d nn.functional.conv_transpose1d "
    "nn.functional.max_pool2d nn.functional.avg_pool2d gather scatter_add index_select "
    "index_add take_along_dim sort topk cumsum softmax log_softmax nn.functional.layer_norm "
    "nn.functional.cross_entropy nn.functional.embedding fft.rfft linalg.cholesky "
    "triangular_solve nn.functional.dropout rand_like"
).split()


@needs_plugin
def test_opinfo_subset_through_xla_cpu(tmp_path):
    out_json = tmp_path / "pjrt_opinfo.json"
    e = dict(os.environ, TORCH_TPU_BACKEND="pjrt",
             TORCH_TPU_LOCK_DIR=tempfile.mkdtemp(prefix="torch_tpu_pjrt_locks_"),
             PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    e.pop("TORCH_TPU_PJRT_PLUGIN", None)
    p = subprocess.run([sys.executable, "-m", "torch_tpu.ops", "--opinfo", "--dtypes", "float32",
                        "--budget", "30", "--ops", ",".join(PJRT_OPINFO_SUBSET),
                        "--json", str(out_json)],
                       env=e, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    import json

    res = json.loads(out_json.read_text())["results"]
    seen = {r["op"] for r in res}
    assert seen == set(PJRT_OPINFO_SUBSET), set(PJRT_OPINFO_SUBSET) - seen
    bad = {r["op"]: (r["counts"], r["examples"][:1]) for r in res
           if any(r["counts"].get(k) for k in ("fail", "unsupported", "error", "crash", "skipped"))}
    assert not bad, bad
    passed = sum(r["counts"].get("pass", 0) + r["counts"].get("random", 0) for r in res)
    assert passed >= 2 * len(PJRT_OPINFO_SUBSET)

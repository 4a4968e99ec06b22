"""Execution modes (Strict Eager async, Debug Eager blocking) and the CPU
fallback switch."""
import subprocess
import sys
import warnings

import pytest
import torch

import torch_tpu
from torch_tpu.execution_mode import EagerMode
from conftest import DEV


def _big_work():
    x = torch.randn(1024, 1024, device=DEV)
    torch.tpu.synchronize()
    ys = [x @ x for _ in range(4)]
    return ys


def test_strict_eager_is_async_and_synchronize_waits():
    # the suite also runs with TORCH_TPU_DEFER_AND_FUSE=1: select Strict here
    with torch_tpu.execution_mode.eager_mode(EagerMode.DEFER_NEVER):
        _strict_eager_is_async_and_synchronize_waits()


def _strict_eager_is_async_and_synchronize_waits():
    assert torch_tpu.execution_mode.get_eager_mode() is EagerMode.DEFER_NEVER
    ys = _big_work()  # queued; the calls return before the matmuls ran
    assert torch.tpu.current_stream().query() is False
    torch.tpu.synchronize()
    assert torch.tpu.current_stream().query() is True
    assert ys[-1].shape == (1024, 1024)


def test_debug_eager_blocks():
    prev = torch_tpu.execution_mode.get_eager_mode()
    with torch_tpu.execution_mode.eager_mode(EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING):
        assert torch_tpu.execution_mode.get_eager_mode() is EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING
        x = torch.randn(512, 512, device=DEV)
        y = x @ x
        assert torch.tpu.current_stream().query() is True
    assert torch_tpu.execution_mode.get_eager_mode() is prev


def test_launch_blocking_env():
    r = subprocess.run([sys.executable, "-c",
                        "import torch, torch_tpu; print(torch_tpu.execution_mode.get_eager_mode().name)"],
                       capture_output=True, text=True, env={**__import__('os').environ,
                                                            "TORCH_TPU_LAUNCH_BLOCKING": "1"})
    assert r.stdout.strip() == "DEFER_NEVER_AND_LAUNCH_BLOCKING", r.stderr


def test_defer_and_fuse_selectable():
    prev = torch_tpu.execution_mode.get_eager_mode()
    with torch_tpu.execution_mode.eager_mode(EagerMode.DEFER_AND_FUSE):
        assert torch_tpu.execution_mode.get_eager_mode() is EagerMode.DEFER_AND_FUSE
    assert torch_tpu.execution_mode.get_eager_mode() is prev


# An op with no native lowering (int8 weight-only quantized matmul), used to
# exercise the fallback machinery.
UNSUPPORTED = "aten::_weight_int8pack_mm"


def _unsupported_op(x):
    w = (torch.arange(15, device=x.device) % 7 - 3).to(torch.int8).view(5, 3)
    scales = torch.linspace(0.5, 1.5, 5, device=x.device)
    return torch._weight_int8pack_mm(x, w, scales)


def test_fallback_disabled_raises_not_implemented():
    x = torch.randn(4, 3, device=DEV)
    assert not torch_tpu.execution_mode.is_cpu_fallback_enabled()  # conftest
    with pytest.raises(NotImplementedError, match="_weight_int8pack_mm"):
        _unsupported_op(x)


def test_fallback_enabled_warns_once_and_counts():
    x = torch.randn(4, 3)
    with torch_tpu.execution_mode.cpu_fallback_mode(True):
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            before = torch.tpu.fallback_counts().get(UNSUPPORTED, 0)
            y = _unsupported_op(x.to(DEV))
            y2 = _unsupported_op(x.to(DEV))
        msgs = [str(m.message) for m in w if "_weight_int8pack_mm" in str(m.message)]
        assert len(msgs) == 1 and "not natively supported" in msgs[0]
        assert torch.tpu.fallback_counts()[UNSUPPORTED] == before + 2
        assert y.is_tpu
        torch.testing.assert_close(y.cpu(), _unsupported_op(x))
    assert not torch_tpu.execution_mode.is_cpu_fallback_enabled()
    assert UNSUPPORTED not in ["aten::" + n for n in torch.tpu.native_ops()]


def test_unboxed_kernels_lend_arguments():
    """Common signatures (tensors and scalars in, one tensor out or in
    place) reach the native path unboxed, their tensors lent without a
    reference (torch_tpu/csrc/kernels.cpp: Borrowed): no reference may be
    lost or kept, also when the op raises or falls back to the CPU."""
    torch.tpu.synchronize()
    mem = torch.tpu.memory_allocated()
    xc = torch.randn(64)
    x = xc.to(DEV)
    base = sys.getrefcount(x)
    ys = [x + 1.0, x * x, torch.exp(x), torch.sub(x, x, alpha=2), torch.where(x > 0, x, 0.5),
          torch.add(x, 2.0, alpha=3)]
    want = [xc + 1.0, xc * xc, torch.exp(xc), torch.sub(xc, xc, alpha=2), torch.where(xc > 0, xc, 0.5),
            torch.add(xc, 2.0, alpha=3)]
    assert x.add_(1.0) is x and x.mul_(x) is x
    assert sys.getrefcount(x) == base
    for y, w in zip(ys, want):
        torch.testing.assert_close(y.cpu(), w)
    torch.testing.assert_close(x.cpu(), (xc + 1.0) * (xc + 1.0))
    for _ in range(50):  # raised inside the native path, arguments lent
        with pytest.raises(RuntimeError, match="same device"):
            x + torch.randn(64)
    assert sys.getrefcount(x) == base
    a = torch.tensor([1, 2, 3, 7], dtype=torch.uint16)  # storage-only on tpu: eq falls back
    with torch_tpu.execution_mode.cpu_fallback_mode(True), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        at = a.to(DEV)
        ra = sys.getrefcount(at)
        for _ in range(20):
            r = torch.eq(at, at)
        assert sys.getrefcount(at) == ra and torch.equal(at.cpu(), a)
        ref_at = __import__("weakref").ref(at)
    assert r.is_tpu and torch.equal(r.cpu(), torch.ones(4, dtype=torch.bool))
    ref = __import__("weakref").ref(x)
    del ys, y, r, at, x
    assert ref() is None and ref_at() is None
    torch.tpu.synchronize()
    assert torch.tpu.memory_allocated() == mem


def test_native_op_list_command():
    r = subprocess.run([sys.executable, "-m", "torch_tpu.ops", "--list"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert lines[-1].endswith("native ATen overloads")
    n = int(lines[-1].split()[0])
    assert n == len(lines) - 1 and n >= 100
    assert "aten::mm" in lines and "aten::add.Tensor" in lines


def test_opinfo_command_needs_a_source_checkout(tmp_path):
    """The OpInfo harness is tools/opinfo.py of the checkout, not part of the
    package: `python -m torch_tpu.ops --opinfo` from a package without
    tools/ next to it (an installed wheel) stops with a clear error."""
    import os

    site = tmp_path / "site"
    site.mkdir()
    (site / "torch_tpu").symlink_to(os.path.dirname(torch_tpu.__file__))
    env = dict(os.environ, PYTHONPATH=str(site))
    r = subprocess.run([sys.executable, "-m", "torch_tpu.ops", "--opinfo"], capture_output=True,
                       text=True, env=env, cwd=tmp_path, timeout=300)
    assert r.returncode != 0
    assert "tools/opinfo.py" in r.stderr and "source checkout" in r.stderr, r.stderr
    assert str(site / "tools" / "opinfo.py") in r.stderr, r.stderr

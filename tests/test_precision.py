"""MXU numerics: DEFAULT / HIGH / HIGHEST bf16 passes (ARCHITECTURE §4), the
torch.set_float32_matmul_precision mapping, and autocast."""
import pytest
import torch

from conftest import DEV


def _split(x):
    """fp32 -> (hi, r1, r2) bf16 parts, as float64."""
    hi = x.to(torch.bfloat16)
    r1 = (x - hi.float()).to(torch.bfloat16)
    r2 = (x - hi.float() - r1.float()).to(torch.bfloat16)
    return hi.double(), r1.double(), r2.double()


def _emulate(a, b, passes):
    ah, a1, a2 = _split(a)
    bh, b1, b2 = _split(b)
    if passes == 1:
        return ah @ bh
    if passes == 3:
        return (ah @ b1 + a1 @ bh) + ah @ bh
    return (a1 @ b1 + a2 @ bh + ah @ b2 + a1 @ bh + ah @ b1) + ah @ bh


def _bound(a, b):
    """fp32 accumulation error bound for each element (generous constant)."""
    return 4 * a.shape[1] ** 0.5 * 2.0 ** -24 * (a.double().abs() @ b.double().abs()) + 1e-30


@pytest.mark.parametrize("prec,passes", [(torch.tpu.Precision.DEFAULT, 1),
                                         (torch.tpu.Precision.HIGH, 3),
                                         (torch.tpu.Precision.HIGHEST, 6)])
def test_passes_match_float64_emulation(prec, passes):
    torch.manual_seed(0)
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    with torch.tpu.precision(prec):
        got = (a.to(DEV) @ b.to(DEV)).cpu().double()
    ref = _emulate(a, b, passes)
    err = (got - ref).abs()
    assert (err <= _bound(a, b)).all(), err.max()
    exact = a.double() @ b.double()
    rel = ((got - exact).abs() / exact.abs().clamp_min(1e-3)).max().item()
    if passes == 1:
        assert rel > 1e-3  # visibly differs from fp32
    if passes == 6:
        torch.testing.assert_close(got.float(), a @ b, rtol=1e-5, atol=1e-4)  # fp32 accurate


def test_default_is_default_and_float32_matmul_precision_maps():
    prev = torch.get_float32_matmul_precision()
    with torch.tpu.precision("default"):
        assert torch.tpu.get_precision() == torch.tpu.Precision.DEFAULT
    try:
        torch.set_float32_matmul_precision("high")
        assert torch.tpu.get_precision() == torch.tpu.Precision.HIGH
        torch.set_float32_matmul_precision("medium")
        assert torch.tpu.get_precision() == torch.tpu.Precision.DEFAULT
        torch.set_float32_matmul_precision("highest")
        assert torch.tpu.get_precision() == torch.tpu.Precision.HIGHEST
    finally:
        torch.set_float32_matmul_precision(prev)


def test_fresh_process_default_precision():
    import subprocess, sys
    r = subprocess.run([sys.executable, "-c", "import torch, torch_tpu; print(torch.tpu.get_precision().name)"],
                       capture_output=True, text=True)
    assert r.stdout.strip() == "DEFAULT", r.stderr


def test_bf16_inputs_one_pass_fp32_accumulate():
    a, b = torch.randn(64, 300).bfloat16(), torch.randn(300, 32).bfloat16()
    got = (a.to(DEV) @ b.to(DEV)).cpu()
    assert got.dtype == torch.bfloat16
    ref = (a.double() @ b.double())
    torch.testing.assert_close(got.double(), ref, rtol=1e-2, atol=1e-2)


def test_autocast_bf16():
    lin = torch.nn.Linear(16, 8).to(DEV)
    x = torch.randn(4, 16, device=DEV)
    with torch.autocast("tpu", dtype=torch.bfloat16):
        y = lin(x)
        z = torch.exp(y)  # fp32 op under autocast
    assert y.dtype == torch.bfloat16 and z.dtype == torch.float32
    ref = torch.nn.functional.linear(x.cpu().bfloat16(), lin.weight.cpu().bfloat16(), lin.bias.cpu().bfloat16())
    torch.testing.assert_close(y.cpu().float(), ref.float(), rtol=2e-2, atol=2e-2)

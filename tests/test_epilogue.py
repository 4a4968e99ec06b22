"""GEMM epilogue fusion (runtime/src/exec/vtpu/epilogue.c): a matmul's bias add,
activation, scaling and residual add run on each finished GEMM block.
nn.Linear + GELU + residual forward/backward in Fused Eager equals Strict
Eager and CPU; results with the epilogue on and off are bit-identical; the
fusion really happens (the executor's counter moves)."""
import pytest
import torch

import torch_tpu
from torch_tpu.execution_mode import EagerMode, eager_mode

DEV = torch.device("tpu")


def epilogue_runs():
    return torch.tpu._get_fusion_stats()["epilogue"]


@pytest.fixture
def epilogue_switch():
    yield lambda on: torch.tpu._set_fusion("epilogue", on)
    torch.tpu.synchronize()
    torch.tpu._set_fusion("epilogue", None)


class Net(torch.nn.Module):
    def __init__(self, d=48, h=80):
        super().__init__()
        self.fc1 = torch.nn.Linear(d, h)
        self.fc2 = torch.nn.Linear(h, d)

    def forward(self, x):
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(x))) * 0.5


def run_step(mode, dev, x_cpu, make_x=None, dtype=torch.float32):
    """forward + backward of Net on dev; returns (out, x.grad, param grads),
    and the number of fused epilogues that ran."""
    torch.manual_seed(0)
    net = Net().to(dtype)
    net = net.to(dev)
    x = (make_x(x_cpu) if make_x else x_cpu).to(dev).detach().requires_grad_(True)
    r0 = epilogue_runs()
    with eager_mode(mode):
        out = net(x)
        (out.float() * out.float()).mean().backward()
        res = [out, x.grad] + [p.grad for p in net.parameters()]
        res = [r.cpu() for r in res]
    torch.tpu.synchronize()
    return res, epilogue_runs() - r0


@pytest.mark.parametrize("shape", [(37, 48), (3, 5, 48)])
def test_linear_gelu_residual_fused_strict_cpu(shape):
    x = torch.randn(*shape)
    cpu, _ = run_step(EagerMode.DEFER_NEVER, "cpu", x)
    strict, n_strict = run_step(EagerMode.DEFER_NEVER, DEV, x)
    fused, n_fused = run_step(EagerMode.DEFER_AND_FUSE, DEV, x)
    for a, b, c in zip(fused, strict, cpu):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(a, c, rtol=1e-4, atol=1e-5)
    assert n_strict >= 1  # addmm / linear: dot + bias in one lowering
    assert n_fused >= 2   # the recorded step: both layers' forward at least


@pytest.mark.parametrize("mode", [EagerMode.DEFER_NEVER, EagerMode.DEFER_AND_FUSE])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_epilogue_on_off_bit_identical(epilogue_switch, mode, dtype):
    x = torch.randn(70, 48).to(dtype)
    epilogue_switch(True)
    on, n_on = run_step(mode, DEV, x, dtype=dtype)
    epilogue_switch(False)
    off, n_off = run_step(mode, DEV, x, dtype=dtype)
    assert n_on >= 1 and n_off == 0
    for a, b in zip(on, off):
        assert torch.equal(a, b)
    cpu, _ = run_step(EagerMode.DEFER_NEVER, "cpu", x, dtype=dtype)
    tol = {torch.float32: 1e-4, torch.bfloat16: 5e-2, torch.float64: 1e-10}[dtype]
    for a, c in zip(on, cpu):
        torch.testing.assert_close(a, c, rtol=tol, atol=tol)


def test_noncontiguous_input():
    x = torch.randn(48, 37)
    make = lambda t: t.t()  # noqa: E731  (37, 48), transposed strides
    cpu, _ = run_step(EagerMode.DEFER_NEVER, "cpu", x, make)
    for mode in (EagerMode.DEFER_NEVER, EagerMode.DEFER_AND_FUSE):
        dev, n = run_step(mode, DEV, x, make)
        assert n >= 1
        for a, c in zip(dev, cpu):
            torch.testing.assert_close(a, c, rtol=1e-4, atol=1e-5)


def test_empty_input():
    x = torch.randn(0, 48)
    cpu, _ = run_step(EagerMode.DEFER_NEVER, "cpu", x)
    for mode in (EagerMode.DEFER_NEVER, EagerMode.DEFER_AND_FUSE):
        dev, _ = run_step(mode, DEV, x)
        for a, c in zip(dev, cpu):
            assert a.shape == c.shape
            torch.testing.assert_close(a, c, rtol=1e-4, atol=1e-5)


def test_addmm_inplace_and_raw_product_kept(epilogue_switch):
    """addmm_ writing over its own input, and a product also used raw."""
    torch.manual_seed(1)
    a, w, b = torch.randn(64, 64), torch.randn(64, 64), torch.randn(64)
    outs = {}
    for on in (1, 0):
        epilogue_switch(on)
        for mode in (EagerMode.DEFER_NEVER, EagerMode.DEFER_AND_FUSE):
            with eager_mode(mode):
                at = a.to(DEV)
                p = at @ w.to(DEV)
                y = torch.relu(p + b.to(DEV))
                at.addmm_(at, w.to(DEV), beta=0.5, alpha=2.0)
                outs[(on, mode)] = [t.cpu() for t in (p, y, at)]
    ref = [a @ w, torch.relu(a @ w + b), torch.addmm(a, a, w, beta=0.5, alpha=2.0)]
    for key, got in outs.items():
        for g, r, o in zip(got, ref, outs[(0, key[1])]):
            assert torch.equal(g, o), key
            torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-4)


def test_wrong_shapes_still_raise():
    lin = torch.nn.Linear(4, 3).to(DEV)
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        lin(torch.randn(2, 5, device=DEV))

"""bf16 operands of f32 DEFAULT-precision matmuls (runtime/src/exec/vtpu/rewrite.c):
in a program where a matmul operand is produced (or a weight is read by
several matmuls), the executor rounds it to bf16 once, where it is produced,
instead of inside every matmul. A Fused Eager MLP training step with the
rewrite on and off: same products (results within f32 accumulation error),
the rewrite counted only when on and only at DEFAULT precision, and the
step matches the float64 emulation of the DEFAULT pass."""
import pytest
import torch

import torch_tpu  # noqa: F401
from torch_tpu.execution_mode import EagerMode, eager_mode

DEV = torch.device("tpu")


def rewritten():
    return torch.tpu._get_fusion_stats()["bf16_operands"]


@pytest.fixture
def switch():
    def set_(on):
        torch.tpu.synchronize()
        torch.tpu._set_fusion("bf16_operands", on)
        torch.tpu._clear_compilation_cache()  # the switch applies when a program is planned
    yield set_
    set_(None)


def step(dev, x, mode=EagerMode.DEFER_AND_FUSE, prec=torch.tpu.Precision.DEFAULT):
    """forward + backward of a 2-layer GELU MLP; (loss, x.grad, param grads)."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(),
                              torch.nn.Linear(512, 256)).to(dev)
    xd = x.to(dev).requires_grad_(True)
    with eager_mode(mode), torch.tpu.precision(prec):  # (conftest makes HIGHEST the default)
        loss = net(xd).square().mean()
        loss.backward()
        res = [loss, xd.grad] + [p.grad for p in net.parameters()]
        res = [r.cpu() for r in res]
    torch.tpu.synchronize()
    return res


def test_mlp_step_on_off(switch):
    if "bf16 native" not in torch_tpu._C._mxu_info():
        pytest.skip("bf16 is not native on this host: the rewrite is off")
    x = torch.randn(512, 256)
    switch(True)
    r0 = rewritten()
    on = step(DEV, x)
    n_on = rewritten() - r0
    switch(False)
    r0 = rewritten()
    off = step(DEV, x)
    n_off = rewritten() - r0
    # forward: layer 2 (gelu output); backward: both weight gradients, the
    # input gradient of layer 2 (the weight read twice), layer 1's input grad
    assert n_on >= 4 and n_off == 0
    for a, b in zip(on, off):
        torch.testing.assert_close(a, b, rtol=2e-5, atol=1e-7)
    # against CPU float32: DEFAULT rounds the operands to bf16
    cpu = step("cpu", x, EagerMode.DEFER_NEVER)
    for a, c in zip(on, cpu):
        torch.testing.assert_close(a, c, rtol=3e-2, atol=3e-3)


def test_not_at_highest(switch):
    switch(True)
    r0 = rewritten()
    step(DEV, torch.randn(512, 256), prec=torch.tpu.Precision.HIGHEST)
    assert rewritten() == r0


def test_strict_lone_matmul_not_rewritten(switch):
    switch(True)
    a, b = torch.randn(512, 256), torch.randn(256, 512)
    r0 = rewritten()
    with eager_mode(EagerMode.DEFER_NEVER), torch.tpu.precision(torch.tpu.Precision.DEFAULT):
        got = (a.to(DEV) @ b.to(DEV).t().contiguous().t()).cpu()
    assert rewritten() == r0  # two parameters, one matmul: the MXU rounds them as it packs
    ref = a.to(torch.bfloat16).double() @ b.to(torch.bfloat16).double()
    torch.testing.assert_close(got.double(), ref, rtol=1e-5, atol=1e-5)


def test_unknown_switch_rejected():
    with pytest.raises(ValueError, match="bf16_operands"):
        torch.tpu._set_fusion("bf16_operand", True)


def test_transformer_layer_on_off(switch):
    """Attention (batched matmuls over sliced, transposed, reshaped q/k/v),
    layer norms and the MLP: a training step's loss and gradients agree
    with the rewrite on and off."""
    if "bf16 native" not in torch_tpu._C._mxu_info():
        pytest.skip("bf16 is not native on this host: the rewrite is off")
    x = torch.randn(4, 128, 128)

    def run():
        torch.manual_seed(0)
        layer = torch.nn.TransformerEncoderLayer(128, 4, dim_feedforward=512, dropout=0.0,
                                                 batch_first=True).to(DEV)
        xd = x.to(DEV)
        with eager_mode(EagerMode.DEFER_AND_FUSE), torch.tpu.precision(torch.tpu.Precision.DEFAULT):
            loss = layer(xd).square().mean()
            loss.backward()
            res = [loss.cpu()] + [p.grad.cpu() for p in layer.parameters()]
        torch.tpu.synchronize()
        return res

    switch(True)
    r0 = rewritten()
    on = run()
    assert rewritten() - r0 >= 8
    switch(False)
    off = run()
    for a, b in zip(on, off):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)

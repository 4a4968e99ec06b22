"""Reductions fused with their elementwise producers in Fused Eager
(runtime/src/exec/vtpu/reduce.c tpux__eval_region_reduce): a reduction whose
operand is an elementwise chain used by nothing else evaluates the chain
tile by tile inside its own loop. Results must match CPU, and match Strict
Eager (where the chain is materialised first) bit for bit."""
import pytest
import torch

from torch_tpu.execution_mode import EagerMode, eager_mode

DEV = torch.device("tpu")


def run_modes(fn, *cpu_args):
    """fn on CPU, in Strict Eager and in Fused Eager; returns the three."""
    ref = fn(*cpu_args)
    dev_args = [a.to(DEV) if isinstance(a, torch.Tensor) else a for a in cpu_args]
    torch.tpu.synchronize()
    strict = fn(*dev_args)
    strict = [t.cpu() for t in strict] if isinstance(strict, tuple) else strict.cpu()
    with eager_mode(EagerMode.DEFER_AND_FUSE):
        fused = fn(*dev_args)
        fused = [t.cpu() for t in fused] if isinstance(fused, tuple) else fused.cpu()
        torch.tpu.synchronize()
    return ref, strict, fused


def check(fn, *args, atol=None, rtol=None, exact=True):
    ref, strict, fused = run_modes(fn, *args)
    refs = ref if isinstance(ref, tuple) else (ref,)
    stricts = strict if isinstance(strict, list) else [strict]
    fuseds = fused if isinstance(fused, list) else [fused]
    for r, s, f in zip(refs, stricts, fuseds):
        torch.testing.assert_close(f, r, atol=atol, rtol=rtol, equal_nan=True)
        if exact:  # same per-element values, same accumulation order
            torch.testing.assert_close(f, s, atol=0, rtol=0, equal_nan=True)


REDS = {
    "sum": lambda y, d, k: y.sum(d, keepdim=k) if d is not None else y.sum(),
    "mean": lambda y, d, k: y.mean(d, keepdim=k) if d is not None else y.mean(),
    "amax": lambda y, d, k: y.amax(d, keepdim=k) if d is not None else y.amax(),
    "amin": lambda y, d, k: y.amin(d, keepdim=k) if d is not None else y.amin(),
    "prod": lambda y, d, k: y.prod(d, keepdim=k) if d is not None else y.prod(),
}


# prod takes one dim; keepdim needs a dim
CASES = [(r, d, k) for r in REDS for d in [-1, 0, 1, (0, 2), None] for k in (False, True)
         if not (r == "prod" and isinstance(d, tuple)) and not (d is None and k)]


@pytest.mark.parametrize("red,dim,keepdim", CASES)
def test_chain_then_reduce(red, dim, keepdim):
    torch.manual_seed(0)
    x = torch.randn(6, 33, 70)
    w = torch.randn(70)
    if red == "prod":
        x = x * 0.05
        fn = lambda x, w: REDS[red]((x * x + 1) * (w * 0.01 + 1), dim, keepdim)
    else:
        fn = lambda x, w: REDS[red]((x * x - w).sin() * 0.5, dim, keepdim)
    check(fn, x, w, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_dtypes(dtype):
    torch.manual_seed(1)
    x = torch.randn(40, 300).to(dtype)
    tol = {torch.bfloat16: 2e-2, torch.float16: 5e-3}.get(dtype, 1e-5)
    check(lambda x: (x * x).sum(-1), x, atol=tol * 10, rtol=tol)
    check(lambda x: (x - 1).abs().mean(0), x, atol=tol, rtol=tol)
    check(lambda x: (x * 2).exp().amax(), x, atol=tol, rtol=tol)
    # upcast: a bf16/f16 chain summed in float32
    check(lambda x: (x * x).float().sum(1), x, atol=tol * 10, rtol=tol)
    check(lambda x: (x * x).sum(1, dtype=torch.float32), x, atol=tol * 10, rtol=tol)


def test_integers():
    x = torch.randint(-50, 50, (30, 257), dtype=torch.int32)
    check(lambda x: (x * x + 3).sum(-1), x)
    check(lambda x: (x * 2 - 1).amax(0), x)
    check(lambda x: (x - 7).abs().sum(), x)
    b = torch.rand(30, 257) > 0.5
    check(lambda b: (b & b.logical_not()).any(1), b)
    check(lambda b: b.logical_not().all(0), b)


def test_non_contiguous_inputs():
    torch.manual_seed(2)
    x = torch.randn(70, 90)
    y = torch.randn(90, 70)
    check(lambda x, y: (x.t() * y).sum(-1), x, y, atol=1e-5, rtol=1e-5)
    check(lambda x, y: (x.t() * y).sum(0), x, y, atol=1e-5, rtol=1e-5)
    check(lambda x, y: (x.t() * y).sum(), x, y, atol=1e-4, rtol=1e-5)
    z = torch.randn(8, 50, 64)[:, ::2, 1::3]
    check(lambda z: (z * z).mean(-1), z, atol=1e-5, rtol=1e-5)
    check(lambda z: (z * z).mean((0, 1)), z, atol=1e-5, rtol=1e-5)


def test_empty():
    for shape, dim in [((0, 5), 1), ((0, 5), 0), ((4, 0), 1), ((4, 0), 0)]:
        x = torch.randn(shape)
        check(lambda x: (x * x + 1).sum(dim), x)
        check(lambda x: (x * x + 1).prod(dim), x)
        check(lambda x: (x * x + 1).amax(dim), x) if x.shape[dim] else None


def test_multi_output_and_shared_values():
    torch.manual_seed(3)
    x = torch.randn(64, 512)

    def f(x):
        y = x * 2 + 1          # stored: returned
        z = (y * y).sum(-1)    # y*y only feeds the sum
        return y, z

    check(f, x, atol=1e-4, rtol=1e-5)

    def g(x):
        e = (x - 0.5).exp()    # used by the sum and by the division
        return e / e.sum(-1, keepdim=True)

    check(g, x, atol=1e-6, rtol=1e-5)



def test_outer_windows_of_many_rows():
    # column sums (outer shape) run the region over windows of many reduced
    # rows: a remainder window, a stored operand and a transposed input
    torch.manual_seed(5)
    x, w = torch.randn(300, 2, 50), torch.randn(2, 50)
    check(lambda x, w: (x * w + 1).tanh().sum(0), x, w, atol=1e-4, rtol=1e-5)
    check(lambda x, w: (x * w + 1).tanh().sum((0, 1)), x, w, atol=1e-4, rtol=1e-5)

    def stored(x):
        y = x * 0.5 - 1        # returned too: written in place, folded hot
        return y, y.sum(0)

    check(stored, torch.randn(777, 130), atol=1e-4, rtol=1e-5)
    xt = torch.randn(90, 1100).t()  # [1100, 90] read strided
    check(lambda x: (x * x).sum(0), xt, atol=1e-4, rtol=1e-5)


def test_bias_gradient_of_wide_rows():
    # Linear's bias gradient after GELU backward: a fused plan takes whole
    # rows of 2500 columns per block (plain: tiles of 1024 columns), and
    # the 320 rows split into chunks of 64 (a [B*T, C] column sum with few
    # outputs runs on every thread): the same sums in Strict and Fused
    torch.manual_seed(7)
    g, h = torch.randn(4, 80, 2500), torch.randn(4, 80, 2500)
    gelu_bwd = lambda g, h: torch.ops.aten.gelu_backward(g, h).reshape(320, 2500).sum(0)
    r0 = torch.tpu._get_fusion_stats()["reduce"]
    check(gelu_bwd, g, h, atol=1e-3, rtol=1e-5)
    check(lambda g, h: (g * h).sum((0, 1)), g, h, atol=1e-3, rtol=1e-5)
    assert torch.tpu._get_fusion_stats()["reduce"] - r0 >= 2


def test_reduce_of_a_reshaped_value():
    # a bias gradient sums a [B*T, C] reshape of a [B, T, C] value: the
    # plan reduces the value itself (dims 0, 1), fused with its producer;
    # a reshape that splits a reduced dim from a kept one stays as it was
    torch.manual_seed(6)
    x, w = torch.randn(8, 16, 256), torch.randn(256)
    y = lambda x, w: (x * w).tanh()
    r0 = torch.tpu._get_fusion_stats()["reduce"]
    check(lambda x, w: y(x, w).reshape(128, 256).sum(0), x, w, atol=1e-4, rtol=1e-5)
    check(lambda x, w: y(x, w).reshape(8, 4096).amax(1), x, w, atol=0, rtol=0)
    assert torch.tpu._get_fusion_stats()["reduce"] - r0 >= 2  # (4 when the suite runs fused)
    check(lambda x, w: y(x, w).reshape(128, 256, 1).sum((0, 2)), x, w, atol=1e-4, rtol=1e-5)
    check(lambda x, w: y(x, w).reshape(2, 64, 256).sum(0), x, w, atol=1e-4, rtol=1e-5)

def test_training_patterns():
    torch.manual_seed(4)
    x = torch.randn(128, 256)
    # mse-like loss, grad-norm, layernorm pieces, softmax
    check(lambda x: (x - 0.25).square().mean(), x, atol=1e-6, rtol=1e-5)
    check(lambda x: (x * x).sum().sqrt(), x, atol=1e-5, rtol=1e-5)
    check(lambda x: torch.nn.functional.layer_norm(x, (256,)), x, atol=1e-5, rtol=1e-5)
    check(lambda x: torch.softmax(x, -1), x, atol=1e-6, rtol=1e-5)
    check(lambda x: torch.log_softmax(x, -1), x, atol=1e-5, rtol=1e-5)
    t = torch.randint(0, 256, (128,))
    check(lambda x, t: torch.nn.functional.cross_entropy(x, t), x, t, atol=1e-5, rtol=1e-5)


def test_layernorm_backward():
    torch.manual_seed(5)
    x = torch.randn(64, 384)
    w = torch.randn(384)
    b = torch.randn(384)

    def f(x, w, b):
        x = x.clone().requires_grad_()
        w = w.clone().requires_grad_()
        b = b.clone().requires_grad_()
        y = torch.nn.functional.layer_norm(x, (384,), w, b)
        (y * y).sum().backward()
        return x.grad, w.grad, b.grad

    check(f, x, w, b, atol=1e-3, rtol=1e-4)


def test_errors_unchanged():
    a = torch.tensor([[4, 6], [1, 2]], dtype=torch.int64)
    z = torch.tensor([[2, 0], [1, 1]], dtype=torch.int64)
    with pytest.raises(RuntimeError):
        (a // z).sum().item()
    with eager_mode(EagerMode.DEFER_AND_FUSE):
        with pytest.raises(RuntimeError):
            (a.to(DEV) // z.to(DEV)).sum(-1).cpu()
        torch.tpu.synchronize()


@pytest.mark.parametrize("on", [True, False])
def test_fusion_switch_and_counter(on):
    # the public switch and counter (torch.tpu._set_fusion/_get_fusion_stats):
    # the fused path runs only when on, and results are the same either way
    x = torch.randn(64, 512)
    ref = ((x - 0.5) * (x - 0.5)).sum(-1)
    xd = x.to(DEV)
    torch.tpu.synchronize()
    torch.tpu._set_fusion("reduce", on)
    try:
        r0 = torch.tpu._get_fusion_stats()["reduce"]
        with eager_mode(EagerMode.DEFER_AND_FUSE):
            got = ((xd - 0.5) * (xd - 0.5)).sum(-1).cpu()
        ran = torch.tpu._get_fusion_stats()["reduce"] - r0
    finally:
        torch.tpu._set_fusion("reduce", None)
    torch.testing.assert_close(got, ref)
    assert (ran >= 1) if on else (ran == 0), ran
    with pytest.raises(ValueError):
        torch.tpu._set_fusion("nope", True)

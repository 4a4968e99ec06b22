"""select_backward / slice_backward / select_scatter / slice_scatter as one
native op each (runtime/src/lower/view_scatter.c), against CPU; and what
they are for: the gradient of a view and a functionalized write through a
view no longer write part of a pending value, so Fused Eager does not flush
for them and torch.compile captures the backward of a layer that unbinds
its projections (nn.TransformerEncoderLayer) as one program."""
import pytest
import torch

from conftest import DEV, assert_close
from torch_tpu.execution_mode import EagerMode, eager_mode

aten = torch.ops.aten
DTYPES = [torch.float32, torch.bfloat16, torch.int64, torch.bool, torch.complex64]


def _rand(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g)
    if dtype == torch.complex64:
        return torch.complex(x, torch.randn(shape, generator=g))
    if dtype == torch.bool:
        return x > 0
    return (x * 4).to(dtype)


def _same(fn, *args):
    exp = fn(*args)
    got = fn(*[a.to(DEV) if isinstance(a, torch.Tensor) else a for a in args])
    assert got.device.type == "tpu"
    assert got.shape == exp.shape and got.dtype == exp.dtype
    assert_close(got, exp)


SELECTS = [((4, 5, 6), 0, 2), ((4, 5, 6), 1, -1), ((4, 5, 6), -1, 0), ((3,), 0, 2)]
SLICES = [((7, 5), 0, 1, 6, 2), ((7, 5), 1, -4, None, 1), ((7, 9), 1, None, 100, 3),
          ((7, 5), 0, 5, 2, 1), ((7, 5), 0, -100, 3, 4), ((6, 4, 3), 2, 0, 3, 5)]


def _slice_len(size, start, end, step):
    return len(range(size)[slice(start, end, step)])


@pytest.mark.parametrize("dtype", DTYPES)
def test_select_backward_and_scatter(dtype):
    for shape, dim, index in SELECTS:
        part = list(shape)
        del part[dim]
        src = _rand(part, dtype, 1)
        if dtype.is_floating_point or dtype.is_complex:
            _same(lambda g: aten.select_backward(g, list(shape), dim, index), src)
        _same(lambda x, s: torch.select_scatter(x, s, dim, index), _rand(shape, dtype), src)


@pytest.mark.parametrize("dtype", DTYPES)
def test_slice_backward_and_scatter(dtype):
    for shape, dim, start, end, step in SLICES:
        part = list(shape)
        part[dim] = _slice_len(shape[dim], start, end, step)
        src = _rand(part, dtype, 1)
        if dtype.is_floating_point or dtype.is_complex:
            _same(lambda g: aten.slice_backward(g, list(shape), dim,
                                                0 if start is None else start,
                                                2 ** 62 if end is None else end, step), src)
        _same(lambda x, s: torch.slice_scatter(x, s, dim, start, end, step),
              _rand(shape, dtype), src)


def test_noncontiguous_inputs_and_out():
    x = _rand((6, 8), torch.float32).t()          # (8, 6), transposed strides
    src = _rand((8, 12), torch.float32)[:, ::4]   # (8, 3), strided
    _same(lambda a, s: torch.slice_scatter(a, s, 1, 1, None, 2), x, src)
    out = torch.empty(8, 6, device=DEV)
    r = aten.slice_scatter.out(x.to(DEV), src.to(DEV), 1, 1, None, 2, out=out)
    assert r is out
    assert_close(out, torch.slice_scatter(x, src, 1, 1, None, 2))


def test_errors_match_cpu():
    x, s = _rand((4, 5), torch.float32), _rand((5,), torch.float32)
    for fn, args in [
        (lambda a, b: torch.select_scatter(a, b, 0, 4), (x, s)),        # index out of range
        (lambda a, b: torch.select_scatter(a, b, 0, -5), (x, s)),
        (lambda a, b: torch.select_scatter(a, b, 2, 0), (x, s)),        # bad dim
        (lambda a, b: torch.select_scatter(a, b, 1, 0), (x, s)),        # src size mismatch
        (lambda a, b: torch.slice_scatter(a, b[:3], 0, 0, 2), (x, s)),  # src size mismatch
        (lambda a, b: torch.slice_scatter(a, b, 0, 0, 2, 0), (x, s)),   # step 0
    ]:
        with pytest.raises(Exception) as ce:
            fn(*args)
        with pytest.raises(Exception) as te:
            fn(*[a.to(DEV) for a in args])
            torch.tpu.synchronize()
        assert type(te.value) is type(ce.value), (te.value, ce.value)
    # the device carries on
    _same(lambda a, b: torch.select_scatter(a, b, 0, 1), x, s)


def test_native_not_fallback():
    names = set(torch.tpu.native_ops())
    for n in ("select_backward", "slice_backward", "select_scatter", "slice_scatter"):
        assert n in names, n


def _encoder():
    torch.manual_seed(0)
    m = torch.nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, dropout=0.0,
                                         batch_first=True)
    x = torch.randn(2, 8, 32)
    return m, x


def _grads(m, x):
    loss = m(x).square().mean()
    loss.backward()
    return [loss.detach()] + [p.grad.clone() for p in m.parameters()]


def test_fused_eager_view_grads_do_not_flush():
    m, x = _encoder()
    exp = _grads(m, x)
    m = m.to(DEV)
    m.zero_grad(set_to_none=True)
    x = x.to(DEV)
    with eager_mode(EagerMode.DEFER_AND_FUSE):
        torch.tpu.synchronize()
        before = torch.tpu._get_cache_stats()["flushes"]["alias"]
        got = _grads(m, x)
        after = torch.tpu._get_cache_stats()["flushes"]["alias"]
        torch.tpu.synchronize()
    assert after == before, "a view's gradient flushed the pending graph"
    for g, e in zip(got, exp):
        assert_close(g, e, atol=1e-4, rtol=1e-4)


def test_compiled_encoder_backward_is_one_program():
    m, x = _encoder()
    exp = _grads(m, x)
    m = m.to(DEV)
    x = x.to(DEV)
    torch._dynamo.reset()
    torch.tpu._reset_cache_stats()
    step = torch.compile(lambda: _grads(m, x), backend="tpu")
    for _ in range(2):
        m.zero_grad(set_to_none=True)
        got = step()
    c = torch.tpu._get_cache_stats()["compile"]
    assert c.get("broken_captures", 0) == 0, c
    assert c.get("graphs_backward", 0) >= 1 and c.get("replays", 0) >= 1, c
    for g, e in zip(got, exp):
        assert_close(g, e, atol=1e-4, rtol=1e-4)

"""Data-dependent-shape ops (nonzero, masked_select, unique, ...) and the
scatter/index reductions of runtime/src/lower/dynamic.c, against CPU.
Run also with TORCH_TPU_DEFER_AND_FUSE=1 (Fused Eager)."""
import pytest
import torch

from conftest import DEV, assert_close

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64,
          torch.int64, torch.int32, torch.int8, torch.uint8, torch.bool]


def _sample(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-2, 3, shape, generator=g)
    if dtype == torch.bool:
        return x > 0
    if dtype == torch.uint8:
        return x.abs().to(dtype)
    return x.to(dtype)


def _check(fn, *cpu_args):
    exp = fn(*cpu_args)
    got = fn(*[a.to(DEV) if isinstance(a, torch.Tensor) else a for a in cpu_args])
    if isinstance(exp, (tuple, list)):
        assert len(exp) == len(got)
        for e, g in zip(exp, got):
            assert g.shape == e.shape
            assert_close(g, e, equal_nan=True)
    else:
        assert got.shape == exp.shape and got.dtype == exp.dtype
        assert_close(got, exp, equal_nan=True)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(7,), (3, 4), (2, 3, 5), (0,), (3, 0), ()])
def test_nonzero(dtype, shape):
    _check(torch.nonzero, _sample(shape, dtype))


def test_nonzero_noncontig_and_out():
    x = _sample((4, 6), torch.float32).t()[1:]
    _check(torch.nonzero, x)
    _check(lambda t: torch.nonzero(t, as_tuple=True), x)
    out = torch.empty(0, dtype=torch.long, device=DEV)
    torch.nonzero(x.to(DEV), out=out)
    assert_close(out, torch.nonzero(x))
    z = torch.tensor([0.0, -0.0, float("nan"), float("inf")])
    _check(torch.nonzero, z)


def test_nonzero_after_pending_work():
    x = torch.arange(-5, 5, dtype=torch.float32)
    d = x.to(DEV)
    y = (d * 2).relu()  # queued, maybe fused: nonzero must see its result
    assert_close(torch.nonzero(y), torch.nonzero((x * 2).relu()))


def test_scans_as_cpu_and_into_outputs():
    """cumsum runs as a cumulative reduce_window (a linear scan on the vTPU,
    floats accumulated in double like PyTorch CPU: the same bits), written
    straight into out= views and in place."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(37, 300, generator=g)
    for d in (0, 1, -1):
        assert torch.equal(x.to(DEV).cumsum(d).cpu(), x.cumsum(d))
    assert torch.equal(x.t().to(DEV).cumsum(1).cpu(), x.t().cumsum(1))       # strided lines
    assert torch.equal(x.to(DEV).t().cumsum(1).cpu(), x.t().cumsum(1))
    i = torch.randint(-9, 9, (5, 64, 3), generator=g)
    assert torch.equal(i.to(DEV).cumsum(1).cpu(), i.cumsum(1))
    assert torch.equal(i.int().to(DEV).cumsum(2).cpu(), i.int().cumsum(2))   # int32 -> int64
    big = torch.zeros(41, 300, device=DEV)
    torch.cumsum(x.to(DEV), 0, out=big[2:39])                                 # offset destination
    assert torch.equal(big.cpu()[2:39], x.cumsum(0))
    assert big.cpu()[:2].abs().sum() == 0 and big.cpu()[39:].abs().sum() == 0
    y = x.to(DEV)
    y.cumsum_(1)
    assert torch.equal(y.cpu(), x.cumsum(1))
    h = x.to(torch.bfloat16)
    assert_close(h.to(DEV).cumsum(1), h.cumsum(1))


def test_compaction_large_masks():
    """nonzero / boolean indexing on masks of ~50% density (the false
    elements' slots follow the true ones')."""
    g = torch.Generator().manual_seed(4)
    x = torch.randn(300, 301, generator=g)
    for m in (x > 0, x > 2.5, torch.zeros_like(x, dtype=torch.bool), torch.ones_like(x, dtype=torch.bool)):
        assert torch.equal(m.to(DEV).nonzero().cpu(), m.nonzero())
        assert torch.equal(x.to(DEV)[m.to(DEV)].cpu(), x[m])
        assert torch.equal(torch.masked_select(x.to(DEV), m.to(DEV)).cpu(), x[m])
    xi = (x * 3).to(torch.int16)
    assert torch.equal(xi.to(DEV).nonzero().cpu(), xi.nonzero())


@pytest.mark.parametrize("dtype", DTYPES)
def test_masked_select(dtype):
    x = _sample((3, 5), dtype)
    m = _sample((3, 5), torch.bool, seed=1)
    _check(torch.masked_select, x, m)
    _check(torch.masked_select, x, m[1])          # broadcast mask
    _check(torch.masked_select, x[:, :1], m)      # broadcast self
    _check(torch.masked_select, x.t(), m.t())     # non-contiguous
    _check(torch.masked_select, x[:0], m[:0])     # empty
    _check(torch.masked_select, x, torch.zeros_like(m))
    out = torch.empty(0, dtype=x.dtype, device=DEV)
    torch.masked_select(x.to(DEV), m.to(DEV), out=out)
    assert_close(out, torch.masked_select(x, m))


def test_bool_mask_index():
    x = torch.randn(4, 5)
    m = x > 0
    _check(lambda a, b: a[b], x, m)
    _check(lambda a, b: a[b], x, m[:, 0])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(9,), (3, 4), (0,), ()])
def test_unique(dtype, shape):
    x = _sample(shape, dtype)
    for flags in [(True, False, False), (True, True, True), (False, True, False)]:
        _check(lambda t: torch.ops.aten._unique2(t, *flags), x)
    _check(lambda t: torch.unique(t, return_inverse=True, return_counts=True), x)
    _check(lambda t: torch.unique(t.t() if t.dim() == 2 else t, return_inverse=True), x)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(11,), (3, 4), (0,), ()])
def test_unique_consecutive(dtype, shape):
    x = _sample(shape, dtype)
    for flags in [(False, False), (True, True), (True, False), (False, True)]:
        _check(lambda t: torch.unique_consecutive(
            t, return_inverse=flags[0], return_counts=flags[1]), x)
    if x.dim() == 2:
        _check(lambda t: torch.unique_consecutive(t.t(), return_inverse=True), x)
    if x.dim() == 1:
        _check(lambda t: torch.unique_consecutive(t, return_counts=True, dim=0), x)
    _check(lambda t: torch.unique_consecutive(t), torch.tensor([1.0, float("nan"), float("nan"), 2.0]))


SR_DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16,
             torch.int64, torch.int32, torch.uint8]


@pytest.mark.parametrize("dtype", SR_DTYPES)
@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce(dtype, reduce, include_self):
    g = torch.Generator().manual_seed(3)
    x = _sample((4, 5), dtype)
    src = _sample((6, 5), dtype, seed=2)
    for dim, idx in [(0, torch.randint(0, 4, (6, 3), generator=g)),
                     (1, torch.randint(0, 5, (2, 4), generator=g)),
                     (0, torch.zeros(0, 5, dtype=torch.long))]:
        _check(lambda s, i, t: s.scatter_reduce(dim, i, t, reduce, include_self=include_self),
               x, idx, src)
    # non-contiguous self, in place, out=
    _check(lambda s, i, t: s.t().scatter_reduce(1, i, t, reduce, include_self=include_self),
           x, torch.randint(0, 4, (5, 2), generator=g), src)
    i = torch.randint(0, 4, (6, 5), generator=g)
    exp = x.clone().scatter_reduce_(0, i, src, reduce, include_self=include_self)
    d = x.to(DEV)
    d.scatter_reduce_(0, i.to(DEV), src.to(DEV), reduce, include_self=include_self)
    assert_close(d, exp)


def test_scatter_reduce_errors():
    x = torch.zeros(3, device=DEV)
    with pytest.raises(RuntimeError):
        x.scatter_reduce(0, torch.tensor([5], device=DEV), torch.ones(1, device=DEV), "sum")


@pytest.mark.parametrize("dtype", SR_DTYPES)
@pytest.mark.parametrize("reduce", ["prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.filterwarnings("ignore:index_reduce")
def test_index_reduce(dtype, reduce, include_self):
    x = _sample((4, 5), dtype)
    src = _sample((4, 7), dtype, seed=5)
    idx = torch.tensor([0, 4, 2, 0, 4, 4, 1])
    _check(lambda s, i, t: s.index_reduce(1, i, t, reduce, include_self=include_self),
           x, idx, src)
    _check(lambda s, i, t: s.index_reduce(0, i, t, reduce, include_self=include_self),
           x, torch.tensor([0, 3, 0]), _sample((3, 5), dtype, seed=6))
    _check(lambda s, i, t: s.t().index_reduce(0, i, t, reduce, include_self=include_self),
           x, idx, src.t())
    _check(lambda s, i, t: s.index_reduce(0, i, t, reduce, include_self=include_self),
           x, idx[:0], _sample((0, 5), dtype))
    exp = x.clone().index_reduce_(1, idx, src, reduce, include_self=include_self)
    d = x.to(DEV)
    d.index_reduce_(1, idx.to(DEV), src.to(DEV), reduce, include_self=include_self)
    assert_close(d, exp)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16,
                                   torch.int64, torch.int32, torch.uint8])
@pytest.mark.parametrize("args", [(0, 3, 4, 2.0), (-2, 2, 5, 10.0), (0, 1, 1, 10.0),
                                  (1.5, -1.5, 7, 3.0), (0, 1, 0, 10.0)])
def test_logspace(dtype, args):
    start, end, steps, base = args
    try:
        exp = torch.logspace(start, end, steps, base=base, dtype=dtype)
    except RuntimeError:  # e.g. -1.5 to uint8: CPU raises, not covered
        pytest.skip("CPU raises")
    got = torch.logspace(start, end, steps, base=base, dtype=dtype, device=DEV)
    assert got.shape == exp.shape and got.dtype == exp.dtype
    assert_close(got, exp, rtol=1e-2 if dtype == torch.bfloat16 else 1.3e-6, atol=1e-5)


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64])
def test_polygamma(n, dtype):
    x = torch.tensor([0.3, 1.0, 2.5, 7.0, 30.0, -0.5, -2.0, 0.0, -1.7])
    if dtype == torch.int64:
        x = torch.tensor([1, 2, 5, 0, -3])
    if n == 1:  # trigamma at a negative integer pole: rounding noise of sin(pi x)
        x = x[(x > 0) | (x != x.floor())]
    x = x.to(dtype)
    exp = torch.polygamma(n, x)
    got = torch.polygamma(n, x.to(DEV))
    assert got.dtype == exp.dtype
    assert_close(got, exp, rtol=1e-5, atol=1e-5, equal_nan=True)
    assert_close(torch.polygamma(n, x.to(DEV)[::2]), torch.polygamma(n, x[::2]),
                 rtol=1e-5, atol=1e-5, equal_nan=True)
    if dtype != torch.int64:
        d = x.to(DEV)
        d.polygamma_(n)
        assert_close(d, x.clone().polygamma_(n), rtol=1e-5, atol=1e-5, equal_nan=True)


@pytest.mark.parametrize("reduce", ["sum", "prod", "amax", "amin"])
def test_scatter_reduce_bool_and_0dim(reduce):
    x = _sample((4, 3), torch.bool)
    src = _sample((5, 3), torch.bool, seed=4)
    idx = torch.tensor([[0, 1, 3], [3, 3, 0], [1, 1, 1], [2, 0, 3], [0, 0, 0]])
    for inc in (True, False):
        _check(lambda s, i, t: s.scatter_reduce(0, i, t, reduce, include_self=inc), x, idx, src)
        _check(lambda s, i, t: s.scatter_reduce(0, i, t, reduce, include_self=inc),
               torch.tensor(2.5), torch.tensor(0), torch.tensor(-1.5))

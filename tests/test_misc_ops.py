"""Sorting on the TPUIR_SORT node (sort/argsort/msort/topk/unique beyond the
old all-pairs caps) and the scans, mode, compaction, masked_scatter/put,
renorm, linalg_cross, histogram and segment_reduce lowerings (runtime/src/lower/
reduce.c, sort.c, index.c, linalg.c), against CPU:
non-contiguous, empty and error inputs included."""
import pytest
import torch

from conftest import DEV, assert_close

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64,
          torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool]


def _sample(shape, dtype, seed=0, lo=-3, hi=4):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        x = torch.randint(lo, hi, shape, generator=g).to(dtype) / 2
        return x
    x = torch.randint(lo, hi, shape, generator=g)
    if dtype == torch.bool:
        return x > 0
    if dtype == torch.uint8:
        return x.abs().to(dtype)
    return x.to(dtype)


def _tpu(a):
    return a.to(DEV) if isinstance(a, torch.Tensor) else a


def _check(fn, *cpu_args, **kw):
    exp = fn(*cpu_args, **kw)
    got = fn(*[_tpu(a) for a in cpu_args], **{k: _tpu(v) for k, v in kw.items()})
    if isinstance(exp, (tuple, list)):
        assert len(exp) == len(got)
        for e, g in zip(exp, got):
            assert g.shape == e.shape and g.dtype == e.dtype, (g.shape, e.shape, g.dtype, e.dtype)
            assert_close(g, e, equal_nan=True)
    else:
        assert got.shape == exp.shape and got.dtype == exp.dtype, (got.shape, exp.shape,
                                                                   got.dtype, exp.dtype)
        assert_close(got, exp, equal_nan=True)


def _raises_like(fn, *cpu_args, **kw):
    with pytest.raises(Exception) as ce:
        fn(*cpu_args, **kw)
    with pytest.raises(Exception) as te:
        fn(*[_tpu(a) for a in cpu_args], **{k: _tpu(v) for k, v in kw.items()})
        torch.tpu.synchronize()
    assert type(te.value) is type(ce.value), (te.value, ce.value)


# ---- sort ------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("desc", [False, True])
def test_sort_stable_dtypes(dtype, desc):
    x = _sample((4, 37), dtype)
    if dtype.is_floating_point:
        x[0, 3] = x[1, 5] = x[1, 6] = float("nan")
        x[2, 0], x[2, 1] = -0.0, 0.0
    for dim in (0, 1, -1):
        _check(lambda t: torch.sort(t, dim=dim, descending=desc, stable=True), x)


def test_sort_large_rows_noncontiguous_empty():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(50000, 8, generator=g).t()  # 8 rows of 50k, strided
    x[3, 100] = float("nan")
    _check(lambda t: torch.sort(t, dim=-1, stable=True), x)
    _check(lambda t: torch.argsort(t, dim=0, descending=True, stable=True), x[:, :3000])
    _check(torch.msort, x[:, :1000])
    _check(lambda t: torch.sort(t, dim=1), torch.empty(3, 0))
    _check(lambda t: torch.sort(t, dim=0), torch.empty(0, 4))
    _check(lambda t: torch.sort(t), torch.tensor(2.5))
    _raises_like(lambda t: torch.sort(t, dim=2), torch.randn(3, 4))


def test_topk_large_vocab():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(4, 50257, generator=g)
    xt = x.to(DEV)
    for k in (1, 50, 2000):
        for largest in (True, False):
            ev, _ = torch.topk(x, k, dim=-1, largest=largest)
            gv, gi = torch.topk(xt, k, dim=-1, largest=largest)
            assert_close(gv, ev)  # CPU's order of tied indices is unspecified
            assert_close(xt.gather(-1, gi), ev)
    _check(lambda t: torch.topk(t, 0), x)
    _raises_like(lambda t: torch.topk(t, 50258), x)


def test_unique_large_and_nan():
    g = torch.Generator().manual_seed(3)
    x = torch.randint(0, 1000, (20000,), generator=g).float()
    x[::997] = float("nan")
    for s in (True, False):
        ev, ei, ec = torch._unique2(x, s, True, True)
        gv, gi, gc = torch._unique2(x.to(DEV), s, True, True)
        assert_close(gv, ev, equal_nan=True)
        assert_close(gc, ec)
        # CPU's order among NaNs is unspecified: each NaN gets a slot of its own
        assert_close(gv[gi], x, equal_nan=True)
        assert gi.cpu()[x.isnan()].unique().numel() == int(x.isnan().sum())
    _check(lambda t: torch.unique(t, return_inverse=True, return_counts=True),
           torch.randint(0, 9, (40, 300), generator=g).t())
    _check(lambda t: torch.unique(t, return_inverse=True, return_counts=True), torch.empty(0))


# ---- scans, mode, compaction, histogram, ... and the lifted gaps -------------

def _nc(shape, dtype=torch.float32, seed=0):
    """Non-contiguous sample: the transpose of a contiguous tensor."""
    return _sample(tuple(reversed(shape)), dtype, seed).t() if len(shape) == 2 else \
        _sample(shape, dtype, seed)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool, torch.bfloat16])
def test_mode(dtype):
    x = _nc((6, 9), dtype)
    assert not x.is_contiguous()
    for dim in (0, 1):
        for keepdim in (False, True):
            _check(lambda t: torch.mode(t, dim, keepdim), x)
    _check(torch.mode, torch.tensor(3.0))
    _raises_like(lambda t: torch.mode(t, 0), torch.empty(0, 3))


def test_logcumsumexp():
    g = torch.Generator().manual_seed(4)
    x = (torch.randn(7, 5, generator=g) * 30).t()
    x[1, 2] = float("-inf")
    x[2, :] = float("-inf")
    x[3, 1] = float("inf")
    x[4, 3] = float("nan")
    for dim in (0, 1):
        _check(lambda t: torch.logcumsumexp(t, dim), x)
    _check(lambda t: torch.logcumsumexp(t, 0), torch.empty(0, 3))
    _raises_like(lambda t: torch.logcumsumexp(t, 2), x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.bool])
def test_cummax_cummin(dtype):
    x = _nc((5, 11), dtype)
    if dtype.is_floating_point:
        x[0, 3] = x[0, 7] = float("nan")
    for dim in (0, 1, -1):
        _check(lambda t: torch.cummax(t, dim), x)
        _check(lambda t: torch.cummin(t, dim), x)
    _check(lambda t: torch.cummax(t, 0), torch.empty(0, dtype=dtype))
    _check(lambda t: torch.cummin(t, 0), torch.tensor(1, dtype=dtype))


def test_nonzero_static_and_tri_indices():
    x = _nc((4, 6), torch.int64)
    for size in (0, 3, 30):
        _check(lambda t: torch.nonzero_static(t, size=size, fill_value=-5), x)
    _check(lambda t: torch.nonzero_static(t, size=4), torch.empty(0, 3))
    _check(lambda t: torch.nonzero_static(t, size=2), torch.tensor(2.0))
    for args in [(4, 3, 0), (3, 5, 1), (5, 3, -2), (0, 3, 0), (3, 3, 10), (3, 3, -10)]:
        for dt in (torch.int64, torch.int32):
            for f in (torch.tril_indices, torch.triu_indices):
                exp = f(*args, dtype=dt)
                got = f(*args, dtype=dt, device=DEV)
                assert got.dtype == exp.dtype
                assert_close(got, exp)
    with pytest.raises(RuntimeError):
        torch.tril_indices(-1, 3, device=DEV)


def test_masked_scatter_and_put():
    x = _nc((4, 5))
    m = _sample((4, 5), torch.bool, seed=1)
    src = torch.arange(40.0).reshape(8, 5)
    _check(lambda t, mm, s: t.masked_scatter(mm, s), x, m, src)
    _check(lambda t, mm, s: t.clone().masked_scatter_(mm, s), x, m[0], src)  # broadcast mask
    _check(lambda t, mm, s: t.masked_scatter(mm, s), torch.empty(0, 5), torch.empty(0, 5).bool(), src)
    _raises_like(lambda t, mm, s: t.masked_scatter(mm, s), x, torch.ones(4, 5, dtype=torch.bool),
                 torch.arange(3.0))
    _raises_like(lambda t, mm, s: t.masked_scatter(mm, s), x, m.long(), src)
    idx = torch.tensor([[0, -1], [7, 3]])
    _check(lambda t, i, s: t.put(i, s), x, idx, torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
    _check(lambda t, i, s: t.put(i, s, accumulate=True), x, torch.tensor([1, 1, 2]),
           torch.tensor([1.0, 2.0, 3.0]))
    _check(lambda t, i, s: t.put(i, s), x, torch.empty(0, dtype=torch.long), torch.empty(0))
    _raises_like(lambda t, i, s: t.put(i, s), x, torch.tensor([20]), torch.tensor([1.0]))
    _raises_like(lambda t, i, s: t.put(i, s), x, torch.tensor([-21]), torch.tensor([1.0]))
    _raises_like(lambda t, i, s: t.put(i, s), x, torch.tensor([1, 2]), torch.tensor([1.0]))


def test_renorm_cross():
    g = torch.Generator().manual_seed(5)
    x = torch.randn(6, 4, 3, generator=g).transpose(0, 2)
    for p, dim, mx in [(2, 0, 0.5), (1, 1, 2.0), (3.5, 2, 1.0), (float("inf"), -1, 0.3)]:
        _check(lambda t: torch.renorm(t, p, dim, mx), x)
    _check(lambda t: torch.renorm(t, 2, 0, 1.0), torch.empty(0, 3))
    _raises_like(lambda t: torch.renorm(t, -1, 0, 1.0), x)
    _raises_like(lambda t: torch.renorm(t, 2, 0, -1.0), x)
    a = torch.randn(3, 5, generator=g).t()
    b = torch.randn(5, 3, generator=g)
    _check(lambda u, v: torch.linalg.cross(u, v), a, b)
    _check(lambda u, v: torch.cross(u, v, dim=0), a.t(), b.t())
    _check(lambda u, v: torch.linalg.cross(u, v), a[:1], b)  # broadcast
    _check(lambda u, v: torch.linalg.cross(u, v), torch.empty(0, 3), torch.empty(0, 3))
    _check(lambda u, v: torch.linalg.cross(u, v), torch.tensor([[1, 2, 3]]), torch.tensor([[4, 5, 7]]))
    _raises_like(lambda u, v: torch.linalg.cross(u, v), torch.randn(2, 4), torch.randn(2, 4))


def test_histograms():
    g = torch.Generator().manual_seed(6)
    x = torch.randn(30, 4, generator=g).t()
    w = torch.rand(4, 30, generator=g)
    _check(lambda t: torch.histogram(t, bins=7), x)
    _check(lambda t, ww: torch.histogram(t, bins=5, range=(-1.0, 1.0), weight=ww, density=True), x, w)
    _check(lambda t, e: torch.histogram(t, bins=e), x, torch.tensor([-2.0, -0.5, 0.0, 0.3, 2.0]))
    _check(lambda t: torch.histogram(t, bins=3), torch.empty(0))
    _check(lambda t: torch.histogram(t, bins=3), torch.full((5,), 2.0))
    def flat_hdd(t, **kw):
        h, edges = torch.histogramdd(t, **kw)
        return (h, *edges)
    _check(lambda t: flat_hdd(t, bins=[3, 4]), torch.randn(40, 2, generator=g))
    _check(lambda t: flat_hdd(t, bins=[2, 3], range=[-1.0, 1.0, 0.0, 2.0], density=True),
           torch.randn(40, 2, generator=g))
    _check(lambda t: flat_hdd(t, bins=[2, 2]), torch.empty(0, 2))
    _raises_like(lambda t: torch.histogram(t, bins=3, range=(1.0, 0.0)), x)
    _raises_like(lambda t: torch.histogramdd(t, bins=[3]), torch.randn(10, 2))


def test_segment_reduce():
    g = torch.Generator().manual_seed(7)
    d = torch.randn(6, 3, generator=g)
    lengths = torch.tensor([2, 0, 3, 1])
    offsets = torch.tensor([0, 2, 2, 5, 6])
    for red in ("sum", "mean", "max", "min", "prod"):
        for init in (None, 1.5):
            _check(lambda t, l: torch.segment_reduce(t, red, lengths=l, initial=init), d, lengths)
            _check(lambda t, o: torch.segment_reduce(t, red, offsets=o, initial=init), d, offsets)
    d2 = torch.randn(6, 2, generator=g).t()  # non-contiguous, axis 1
    _check(lambda t, l: torch.segment_reduce(t, "sum", lengths=l, axis=1), d2,
           torch.tensor([[1, 2, 3], [0, 4, 2]]))
    _raises_like(lambda t, l: torch.segment_reduce(t, "foo", lengths=l), d, lengths)


def test_index_scatter_gaps():
    x0 = torch.tensor(2.0)
    _check(lambda t: t.index_fill(0, torch.tensor([0]), -1.0), x0)
    _check(lambda t: t.index_copy(0, torch.tensor([0]), torch.tensor(5.0)), x0)
    x = _nc((4, 5))
    idx = torch.tensor([[0, 1, 2], [3, 0, 1]])
    src = torch.arange(1.0, 7.0).reshape(2, 3)
    for red in ("add", "multiply"):
        _check(lambda t, i, s: t.scatter(0, i, s, reduce=red), x, idx, src)
        _check(lambda t, i: t.scatter(1, i, 2.5, reduce=red), x, idx)
    _raises_like(lambda t, i, s: t.scatter(0, i, s, reduce="foo"), x, idx, src)
    _raises_like(lambda t, i: t.scatter(0, i, 1.0), x, torch.tensor([[4]]))
    _raises_like(lambda t, i: t.scatter(0, i, 1.0), x, torch.tensor([4]))
    _check(lambda t, i, s: t.scatter_reduce(0, i, s, "amax"), x, idx.int(), src)
    _check(lambda t, i, s: t.scatter_reduce(1, i, s, "sum", include_self=False), x, idx.int(), src)
    seq = torch.tensor([[3.0, 1.0, 2.0, 5.0], [0.0, -1.0, 4.0, 2.0]])
    sorter = seq.argsort(dim=-1)
    vals = torch.tensor([[2.0, 6.0], [-2.0, 1.0]])
    for side in ("left", "right"):
        _check(lambda s, v, so: torch.searchsorted(s, v, side=side, sorter=so), seq, vals, sorter)
    _raises_like(lambda s, v, so: torch.searchsorted(s, v, sorter=so), seq, vals, sorter[:, :3])


def test_repeat_interleave_bincount():
    for rep in (torch.tensor([2, 0, 3, 1]), torch.tensor([0, 0]), torch.empty(0, dtype=torch.long),
                torch.tensor([1, 4], dtype=torch.int32)):
        _check(torch.repeat_interleave, rep)
    x = torch.arange(12.0).reshape(4, 3).t()
    _check(lambda t, r: torch.repeat_interleave(t, r, dim=1), x, torch.tensor([1, 0, 2, 3]))
    _check(lambda t, r: torch.repeat_interleave(t, r, dim=0, output_size=5), x, torch.tensor([2, 0, 3]))
    _raises_like(torch.repeat_interleave, torch.tensor([1, -1]))
    _raises_like(torch.repeat_interleave, torch.tensor([[1, 2]]))
    v = torch.tensor([1, 3, 3, 0, 7, 3])
    _check(torch.bincount, v)
    _check(lambda t: torch.bincount(t, minlength=10), v)
    _check(lambda t, w: torch.bincount(t, w), v, torch.arange(6.0))
    _check(lambda t, w: torch.bincount(t, w), v, torch.arange(6, dtype=torch.float64))
    _check(lambda t, w: torch.bincount(t, w), v, torch.arange(6))
    _check(lambda t: torch.bincount(t, minlength=3), torch.empty(0, dtype=torch.long))
    _check(torch.bincount, torch.arange(12, dtype=torch.uint8).reshape(3, 4).t()[0])  # strided
    _raises_like(torch.bincount, torch.tensor([1, -1]))
    _raises_like(torch.bincount, torch.tensor([[1]]))
    _raises_like(lambda t: torch.bincount(t, minlength=-1), v)
    _raises_like(lambda t, w: torch.bincount(t, w), v, torch.ones(2))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
def test_unique_dim(dtype):
    x = _sample((3, 25, 2), dtype, seed=8, lo=0, hi=2).transpose(0, 1)  # non-contiguous
    for dim in (0, 1, 2, -1):
        _check(lambda t: torch.unique(t, dim=dim, return_inverse=True, return_counts=True), x)
        _check(lambda t: torch.unique_consecutive(t, dim=dim, return_inverse=True,
                                                  return_counts=True), x)
    _check(lambda t: torch.unique(t, dim=1, return_inverse=True, return_counts=True),
           torch.empty(3, 0, dtype=dtype))
    _raises_like(lambda t: torch.unique(t, dim=0), torch.empty(0, 3, 0, dtype=dtype).transpose(0, 1))
    _raises_like(lambda t: torch.unique(t, dim=3), x)

"""Sorting on the TPUIR_SORT node (sort/argsort/msort/topk/unique beyond the
old all-pairs caps) and the ops of runtime/src/lower_misc.c, against CPU:
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

"""Special functions (torch.special.*, i0, sinc, igamma, nextafter, frexp,
gcd/lcm, the orthogonal polynomials) against PyTorch CPU: values for every
supported dtype, type promotion, non-contiguous / empty / 0-dim inputs,
Scalar overloads, out= and in-place variants, and the exception types of
bad input. The CPU fallback is disabled (conftest): everything here runs
natively."""
import pytest
import torch

from conftest import DEV, assert_close

S = torch.special


def _tpu(x):
    return x.to(DEV) if isinstance(x, torch.Tensor) else x


def check(fn, *args, rtol=None, atol=None, **kw):
    expected = fn(*args, **kw)
    actual = fn(*[_tpu(a) for a in args], **{k: _tpu(v) for k, v in kw.items()})
    if isinstance(expected, torch.Tensor):
        expected, actual = (expected,), (actual,)
    for e, a in zip(expected, actual):
        assert a.dtype == e.dtype, (a.dtype, e.dtype)
        assert a.shape == e.shape, (a.shape, e.shape)
        tol = {} if rtol is None else {"rtol": rtol, "atol": atol}
        assert_close(a, e, equal_nan=True, **tol)


def grid(lo, hi, n=257, dtype=torch.float32):
    return torch.linspace(lo, hi, n, dtype=torch.float64).to(dtype)


# name -> (fn, lo, hi, half supported)
UNARY = {
    "bessel_j0": (S.bessel_j0, -30, 30, False),
    "bessel_j1": (S.bessel_j1, -30, 30, False),
    "bessel_y0": (S.bessel_y0, -1, 30, False),
    "bessel_y1": (S.bessel_y1, -1, 30, False),
    "modified_bessel_i0": (S.modified_bessel_i0, -20, 20, False),
    "modified_bessel_i1": (S.modified_bessel_i1, -20, 20, False),
    "modified_bessel_k0": (S.modified_bessel_k0, -1, 20, False),
    "modified_bessel_k1": (S.modified_bessel_k1, -1, 20, False),
    "scaled_modified_bessel_k0": (S.scaled_modified_bessel_k0, -1, 20, False),
    "scaled_modified_bessel_k1": (S.scaled_modified_bessel_k1, -1, 20, False),
    "airy_ai": (S.airy_ai, -12, 12, False),
    "spherical_bessel_j0": (S.spherical_bessel_j0, -20, 20, False),
    "entr": (S.entr, -2, 10, True),
    "erfcx": (S.erfcx, -10, 60, False),
    "i0": (torch.i0, -20, 20, True),
    "i0e": (S.i0e, -20, 20, True),
    "i1": (S.i1, -20, 20, True),
    "i1e": (S.i1e, -20, 20, True),
    "log_ndtr": (S.log_ndtr, -20, 8, False),
    "ndtri": (S.ndtri, -0.1, 1.1, False),
    "sinc": (torch.sinc, -5, 5, True),
}


@pytest.mark.parametrize("name", sorted(UNARY))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_unary_values(name, dtype):
    fn, lo, hi, _ = UNARY[name]
    x = grid(lo, hi, dtype=dtype)
    x = torch.cat([x, torch.tensor([0.0, -0.0, float("inf"), float("-inf"), float("nan")],
                                   dtype=dtype)])
    check(fn, x)


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_half_and_ints(name):
    fn, lo, hi, half = UNARY[name]
    for dt in (torch.float16, torch.bfloat16):
        x = grid(lo, hi, 65, dtype=dt)
        if half:
            check(fn, x, rtol=2e-2 if dt == torch.bfloat16 else 2e-3, atol=1e-3)
        else:
            with pytest.raises(NotImplementedError):
                fn(x.to(DEV))
    # ints and bool promote to the default float dtype
    check(fn, torch.arange(-3, 9, dtype=torch.int32))
    check(fn, torch.tensor([True, False]))
    if name != "sinc":                       # complex: not implemented on CPU either
        with pytest.raises(NotImplementedError):
            fn(torch.ones(3, dtype=torch.complex64, device=DEV))


@pytest.mark.parametrize("name", ["bessel_j0", "i0", "erfcx", "sinc", "modified_bessel_k1"])
def test_unary_layouts_and_out(name):
    fn, lo, hi, _ = UNARY[name]
    base = grid(max(lo, 0.1), hi, 96).reshape(8, 12)
    check(fn, base.t())                      # non-contiguous
    check(fn, base[:, ::3])                  # strided
    check(fn, torch.empty(0, 4))             # empty
    check(fn, torch.tensor(1.25))            # 0-dim
    out_cpu = torch.empty(8, 12)
    out = out_cpu.to(DEV)
    r = fn(base.to(DEV), out=out)
    assert r is out
    assert_close(out, fn(base, out=out_cpu), equal_nan=True)
    # out= of another float dtype: computed in the input dtype, then cast
    out64 = torch.empty(8, 12, dtype=torch.float64, device=DEV)
    fn(base.to(DEV), out=out64)
    assert_close(out64, fn(base).double(), equal_nan=True)
    with pytest.raises(RuntimeError):        # float result into an int out=
        fn(base.to(DEV), out=torch.empty(8, 12, dtype=torch.int32, device=DEV))


def test_inplace_variants():
    x = grid(-3, 3, 24).reshape(4, 6)
    for op in ("i0_", "sinc_"):
        a, b = x.clone(), x.clone().to(DEV)
        getattr(a, op)()
        getattr(b, op)()
        assert_close(b, a)
    a = torch.arange(6, dtype=torch.int64).to(DEV)
    with pytest.raises(RuntimeError):        # float result into an int tensor
        a.i0_()


def test_fused_chain():
    # the special ops fuse with neighbouring elementwise ops
    x = grid(0.1, 5, 300)
    check(lambda t: S.i1e(t * 2 + 1) - S.bessel_j0(t).abs() * S.erfcx(-t), x)
    # ... and run as a GEMM epilogue
    a, b = grid(-1, 1, 64 * 48).reshape(64, 48), grid(-1, 1, 48 * 32).reshape(48, 32)
    check(lambda p, q: S.i0e(p @ q) * 2 + 1, a, b, rtol=1e-5, atol=1e-5)


# ---- binary ----------------------------------------------------------------

POLY = {
    "chebyshev_polynomial_t": S.chebyshev_polynomial_t,
    "chebyshev_polynomial_u": S.chebyshev_polynomial_u,
    "chebyshev_polynomial_v": S.chebyshev_polynomial_v,
    "chebyshev_polynomial_w": S.chebyshev_polynomial_w,
    "shifted_chebyshev_polynomial_t": S.shifted_chebyshev_polynomial_t,
    "shifted_chebyshev_polynomial_u": S.shifted_chebyshev_polynomial_u,
    "shifted_chebyshev_polynomial_v": S.shifted_chebyshev_polynomial_v,
    "shifted_chebyshev_polynomial_w": S.shifted_chebyshev_polynomial_w,
    "hermite_polynomial_h": S.hermite_polynomial_h,
    "hermite_polynomial_he": S.hermite_polynomial_he,
    "laguerre_polynomial_l": S.laguerre_polynomial_l,
    "legendre_polynomial_p": S.legendre_polynomial_p,
}


@pytest.mark.parametrize("name", sorted(POLY))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_polynomials(name, dtype):
    fn = POLY[name]
    x = torch.cat([grid(-1.5, 1.5, 61, dtype), torch.tensor([-1.0, 0.0, 0.5, 1.0], dtype=dtype)])
    n = torch.tensor([-2, 0, 1, 2, 3, 5, 7, 9, 12, 25, 60, 200], dtype=dtype)
    check(fn, x[:, None], n[None, :])        # broadcast, recurrences and closed forms
    check(fn, x, 4.0)                        # n_scalar overload
    check(fn, 0.25, n)                       # x_scalar overload
    check(fn, x, torch.tensor(3, dtype=torch.int64))  # int n promotes to x's dtype
    check(fn, torch.arange(-2, 3), torch.arange(5))   # ints -> float32
    check(fn, x[:64:2], torch.full_like(x, 6)[1::2])  # strided
    check(fn, torch.empty(0, 3, dtype=dtype), torch.empty(0, 3, dtype=dtype))
    nan_n = torch.tensor([float("nan"), float("inf"), 1e30], dtype=dtype)
    check(fn, torch.full((3,), 0.5, dtype=dtype), nan_n)
    out = torch.empty(65, 12, dtype=dtype, device=DEV)
    fn(x[:, None].to(DEV), n[None, :].to(DEV), out=out)
    assert_close(out, fn(x[:, None], n[None, :]), equal_nan=True)
    with pytest.raises(NotImplementedError):
        fn(x.half().to(DEV), n[:1].half().to(DEV))
    with pytest.raises(RuntimeError):        # shapes that do not broadcast
        fn(x.to(DEV), n.to(DEV))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_zeta_xlog1py(dtype):
    x = torch.tensor([1.0, 1.5, 2.0, 3.0, 4.5, 0.5, 2.0, 3.0, 10.0, 2.0], dtype=dtype)
    q = torch.tensor([1.0, 2.0, 0.5, -2.0, -2.5, 1.0, 30.0, 1e-3, 7.0, float("nan")], dtype=dtype)
    check(S.zeta, x, q)
    check(S.zeta, grid(1.01, 12, 40, dtype)[:, None], grid(0.1, 20, 7, dtype)[None, :])
    check(S.zeta, 2.0, q)                    # self_scalar
    check(S.zeta, x, 2.0)                    # other_scalar
    check(S.zeta, torch.arange(2, 6), torch.arange(1, 5))  # ints -> float32
    a = grid(-3, 3, 31, dtype)
    b = torch.cat([grid(-0.99, 10, 30, dtype), torch.tensor([float("nan")], dtype=dtype)])
    check(S.xlog1py, a, b)
    check(S.xlog1py, torch.zeros(3, dtype=dtype), torch.tensor([float("nan"), -1.0, 2.0], dtype=dtype))
    check(S.xlog1py, 2.0, b)
    check(S.xlog1py, a, 0.5)
    out = torch.empty(31, dtype=dtype, device=DEV)
    S.xlog1py(a.to(DEV), b.to(DEV), out=out)
    assert_close(out, S.xlog1py(a, b), equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_igamma(dtype):
    a = torch.tensor([0.5, 1.0, 2.5, 25.0, 30.0, 150.0, 250.0, 1000.0, 0.0, -1.0, 3.0, float("inf")],
                     dtype=dtype)
    x = torch.tensor([0.2, 3.0, 0.8, 27.0, 28.0, 160.0, 240.0, 990.0, 2.0, 1.0, 0.0, 5.0], dtype=dtype)
    for fn in (torch.igamma, torch.igammac):
        check(fn, a, x)
        check(fn, grid(0.1, 40, 37, dtype)[:, None], grid(0.05, 60, 11, dtype)[None, :])
        r = fn(a.to(DEV), x.to(DEV))
        assert r.dtype == dtype
    t = grid(0.5, 4, 12, dtype).reshape(3, 4)
    y, z = t.clone(), t.clone().to(DEV)
    y.igamma_(t * 0.7)
    z.igamma_((t * 0.7).to(DEV))
    assert_close(z, y)
    with pytest.raises(NotImplementedError):  # no int -> float promotion on CPU either
        torch.igamma(torch.arange(3).to(DEV), torch.arange(3).to(DEV))


def test_igamma_half_and_mixed():
    a = grid(0.1, 10, 40, torch.float16)
    x = grid(0.1, 12, 40, torch.bfloat16)
    check(torch.igamma, a, a.flip(0), rtol=2e-3, atol=1e-3)
    check(torch.igammac, x, x.flip(0), rtol=2e-2, atol=1e-2)
    check(torch.igamma, a, x.float())        # promotes to float32


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_nextafter(dtype):
    a = torch.tensor([0.0, -0.0, 1.0, 1.0, -2.5, 3.0, float("inf"), float("nan"), 1e-30, 7.0], dtype=dtype)
    b = torch.tensor([1.0, -1.0, 2.0, 0.0, -2.5, float("inf"), 0.0, 1.0, -1.0, float("nan")], dtype=dtype)
    check(torch.nextafter, a, b, rtol=0, atol=0)
    check(torch.nextafter, a[::2], b[1::2], rtol=0, atol=0)
    c = a.clone()
    d = a.clone().to(DEV)
    c.nextafter_(b)
    d.nextafter_(b.to(DEV))
    assert_close(d, c, rtol=0, atol=0, equal_nan=True)


def test_nextafter_errors():
    with pytest.raises(NotImplementedError):
        torch.nextafter(torch.arange(3).to(DEV), torch.arange(3).to(DEV))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_frexp(dtype):
    x = torch.tensor([0.0, -0.0, 1.0, -3.75, 1e-3, 600.0, 0.5, float("inf"), float("-inf"),
                      float("nan")], dtype=dtype)
    check(torch.frexp, x)
    check(torch.frexp, grid(-50, 50, 64, dtype).reshape(8, 8).t())
    check(torch.frexp, torch.empty(0, dtype=dtype))
    check(torch.frexp, torch.tensor(12.0, dtype=dtype))
    m = torch.empty(10, dtype=dtype, device=DEV)
    e = torch.empty(10, dtype=torch.int32, device=DEV)
    torch.frexp(x.to(DEV), out=(m, e))
    em, ee = torch.frexp(x)
    assert_close(m, em, equal_nan=True)
    assert_close(e, ee)


def test_frexp_errors():
    with pytest.raises(RuntimeError, match="floating-point"):
        torch.frexp(torch.arange(4).to(DEV))
    x = torch.ones(3, device=DEV)
    with pytest.raises(RuntimeError):
        torch.frexp(x, out=(torch.empty(3, dtype=torch.float64, device=DEV),
                            torch.empty(3, dtype=torch.int32, device=DEV)))
    with pytest.raises(RuntimeError):
        torch.frexp(x, out=(torch.empty(3, device=DEV),
                            torch.empty(3, dtype=torch.int64, device=DEV)))


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64])
def test_gcd_lcm(dtype):
    lo = 0 if dtype == torch.uint8 else -40
    a = torch.arange(lo, 41, 3).to(dtype)
    b = torch.arange(lo, 41, 7).to(dtype)
    for fn in (torch.gcd, torch.lcm):
        check(fn, a[:, None], b[None, :])
        check(fn, a[::2], a.flip(0)[::2])
        check(fn, torch.empty(0, dtype=dtype), torch.empty(0, dtype=dtype))
        check(fn, a, torch.tensor(6, dtype=dtype))
    if dtype != torch.uint8:
        m = torch.iinfo(dtype).min
        check(torch.gcd, torch.tensor([m, m, 5], dtype=dtype), torch.tensor([0, 4, m], dtype=dtype))
    t, u = a.clone(), a.clone().to(DEV)
    t.gcd_(torch.full_like(a, 12))
    u.gcd_(torch.full_like(a, 12).to(DEV))
    assert_close(u, t)
    out = torch.empty(a.shape, dtype=dtype, device=DEV)
    torch.lcm(a.to(DEV), a.flip(0).to(DEV), out=out)
    assert_close(out, torch.lcm(a, a.flip(0)))


def test_gcd_lcm_errors():
    x = torch.ones(3, device=DEV)
    with pytest.raises(NotImplementedError):
        torch.gcd(x, x)
    with pytest.raises(NotImplementedError):
        torch.lcm(torch.ones(3, dtype=torch.bool, device=DEV), torch.ones(3, dtype=torch.bool, device=DEV))
    # int8 and int64 mix promotes to int64
    check(torch.gcd, torch.arange(-5, 5, dtype=torch.int8), torch.arange(10, dtype=torch.int64))


def test_kaiser_window():
    for n, beta in ((1, 12.0), (10, 12.0), (33, 5.0)):
        e = torch.signal.windows.kaiser(n, beta=beta)
        a = torch.signal.windows.kaiser(n, beta=beta, device=DEV)
        assert_close(a, e)


def test_logit():
    x = torch.cat([grid(-0.5, 1.5, 41), torch.tensor([0.0, 1.0, float("nan")])])
    check(torch.logit, x)
    check(torch.logit, x, eps=0.1)
    check(torch.logit, x, eps=-1.0)
    check(torch.logit, torch.arange(-1, 3))              # ints -> float32
    check(torch.logit, x.double(), eps=1e-6)
    check(torch.logit, x.to(torch.bfloat16), rtol=2e-2, atol=1e-2)
    check(torch.logit, x.reshape(4, 11).t())
    check(torch.logit, torch.empty(0, 2))

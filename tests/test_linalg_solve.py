"""Dense factorizations and solves on the tpu device vs PyTorch CPU:
Cholesky, LU, QR, triangular solves, inv/solve/det/slogdet, lstsq,
matrix_exp (runtime/src/lower/linalg.c). CPU fallback is disabled by
conftest.py, so every call here runs natively."""
import pytest
import torch

DT = [torch.float32, torch.float64]


def tol(dt):
    return dict(rtol=1e-4, atol=1e-4) if dt == torch.float32 else dict(rtol=1e-9, atol=1e-9)


def close(a, b, dt, **kw):
    t = tol(dt)
    t.update(kw)
    if isinstance(a, (tuple, list)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            close(x, y, dt, **kw)
        return
    assert a.device.type == "tpu"
    assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, b.dtype, a.shape, b.shape)
    torch.testing.assert_close(a.cpu(), b, **t)


def spd(*shape, dt=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(*shape, generator=g, dtype=torch.float64)
    n = shape[-1]
    return (a @ a.mT + n * torch.eye(n, dtype=torch.float64)).to(dt)


def rnd(*shape, dt=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(dt)


def well(*shape, dt=torch.float64, seed=0):
    n = shape[-1]
    return (rnd(*shape, seed=seed) + 3 * torch.eye(n, dtype=torch.float64)).to(dt)


@pytest.mark.parametrize("dt", DT)
@pytest.mark.parametrize("upper", [False, True])
def test_cholesky(dt, upper):
    a = spd(3, 5, 5, dt=dt)
    close(torch.linalg.cholesky(a.to("tpu"), upper=upper), torch.linalg.cholesky(a, upper=upper), dt)
    L, info = torch.linalg.cholesky_ex(a.to("tpu"), upper=upper)
    assert info.dtype == torch.int32 and info.shape == (3,)
    assert info.cpu().eq(0).all()
    close(torch.cholesky(a.to("tpu"), upper=upper), torch.cholesky(a, upper=upper), dt)


def test_cholesky_noncontig_empty_info():
    a = spd(6, 6).mT[::1]  # transposed view (non-contiguous)
    at = spd(6, 6).to("tpu").mT
    assert not at.is_contiguous()
    close(torch.linalg.cholesky(at), torch.linalg.cholesky(a), torch.float64)
    e = torch.empty(0, 3, 3)
    close(torch.linalg.cholesky(e.to("tpu")), torch.linalg.cholesky(e), torch.float32)
    e = torch.empty(2, 0, 0)
    close(torch.linalg.cholesky(e.to("tpu")), torch.linalg.cholesky(e), torch.float32)
    bad = spd(3, 4, 4)
    bad[1, 2, 2] = -100.0
    _, info = torch.linalg.cholesky_ex(bad.to("tpu"))
    assert info.cpu().tolist() == torch.linalg.cholesky_ex(bad).info.tolist()


def test_cholesky_errors():
    bad = -torch.eye(3)
    with pytest.raises(torch.linalg.LinAlgError, match="positive-definite"):
        torch.linalg.cholesky(bad.to("tpu"))
    with pytest.raises(torch.linalg.LinAlgError, match="positive-definite"):
        torch.cholesky(bad.to("tpu"))
    with pytest.raises(RuntimeError, match="floating point"):
        torch.linalg.cholesky(torch.eye(3, dtype=torch.long).to("tpu"))
    with pytest.raises(RuntimeError, match="square"):
        torch.linalg.cholesky(torch.ones(2, 3).to("tpu"))
    with pytest.raises(RuntimeError, match="at least 2 dimensions"):
        torch.linalg.cholesky(torch.ones(3).to("tpu"))
    with pytest.raises(NotImplementedError):
        torch.linalg.cholesky(torch.eye(3, dtype=torch.float16).to("tpu"))


@pytest.mark.parametrize("dt", DT)
def test_cholesky_solve_inverse(dt):
    a = spd(2, 4, 4, dt=dt)
    b = rnd(2, 4, 3, dt=dt, seed=1)
    for upper in (False, True):
        L = torch.linalg.cholesky(a, upper=upper)
        close(torch.cholesky_solve(b.to("tpu"), L.to("tpu"), upper=upper),
              torch.cholesky_solve(b, L, upper=upper), dt)
        close(torch.cholesky_inverse(L.to("tpu"), upper=upper), torch.cholesky_inverse(L, upper=upper), dt)
    # broadcasting batch dims
    L = torch.linalg.cholesky(a[0])
    close(torch.cholesky_solve(b.to("tpu"), L.to("tpu")), torch.cholesky_solve(b, L), dt)


@pytest.mark.parametrize("dt", DT)
def test_triangular(dt):
    a = well(2, 4, 4, dt=dt)
    b = rnd(2, 4, 3, dt=dt, seed=2)
    for upper in (False, True):
        for left in (False, True):
            for unit in (False, True):
                bb = b if left else b.mT
                close(torch.linalg.solve_triangular(a.to("tpu"), bb.to("tpu"), upper=upper, left=left,
                                                    unitriangular=unit),
                      torch.linalg.solve_triangular(a, bb, upper=upper, left=left, unitriangular=unit), dt)
        for tr in (False, True):
            close(torch.triangular_solve(b.to("tpu"), a.to("tpu"), upper=upper, transpose=tr),
                  tuple(torch.triangular_solve(b, a, upper=upper, transpose=tr)), dt)
    # broadcast + non-contiguous B
    bt = rnd(3, 4, dt=dt).to("tpu").mT
    close(torch.linalg.solve_triangular(a.to("tpu"), bt, upper=True),
          torch.linalg.solve_triangular(a, bt.cpu(), upper=True), dt)
    with pytest.raises(RuntimeError):
        torch.linalg.solve_triangular(a.to("tpu"), rnd(2, 5, 3, dt=dt).to("tpu"), upper=True)
    with pytest.raises(NotImplementedError):
        torch.linalg.solve_triangular(torch.eye(3, dtype=torch.long).to("tpu"),
                                      torch.eye(3, dtype=torch.long).to("tpu"), upper=True)


@pytest.mark.parametrize("dt", DT)
@pytest.mark.parametrize("shape", [(5, 5), (2, 4, 6), (3, 6, 4), (0, 3, 3), (2, 0, 0)])
def test_lu_family(dt, shape):
    a = rnd(*shape, dt=dt)
    LU, piv, info = torch.linalg.lu_factor_ex(a.to("tpu"))
    rLU, rpiv, rinfo = torch.linalg.lu_factor_ex(a)
    close(LU, rLU, dt)
    assert piv.dtype == torch.int32 and piv.cpu().equal(rpiv)
    assert info.dtype == torch.int32 and info.cpu().equal(rinfo)
    close(torch.linalg.lu(a.to("tpu")), tuple(torch.linalg.lu(a)), dt)
    close(torch.lu_unpack(LU, piv), tuple(torch.lu_unpack(rLU, rpiv)), dt)
    close(torch.lu_unpack(LU, piv, unpack_data=False), tuple(torch.lu_unpack(rLU, rpiv, unpack_data=False)), dt)
    close(torch.lu_unpack(LU, piv, unpack_pivots=False), tuple(torch.lu_unpack(rLU, rpiv, unpack_pivots=False)), dt)


def test_lu_singular_info_and_bad_pivots():
    a = torch.tensor([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]])
    LU, piv, info = torch.linalg.lu_factor_ex(a.to("tpu"))
    rLU, rpiv, rinfo = torch.linalg.lu_factor_ex(a)
    assert info.item() == rinfo.item() != 0
    assert piv.cpu().equal(rpiv)
    with pytest.raises(RuntimeError, match="pivots passed to lu_unpack"):
        torch.lu_unpack(LU, piv + 5)
    with pytest.raises(NotImplementedError):
        torch.linalg.lu_factor(torch.eye(3, dtype=torch.long).to("tpu"))


@pytest.mark.parametrize("dt", DT)
def test_lu_solve(dt):
    a = well(2, 4, 4, dt=dt)
    b = rnd(2, 4, 3, dt=dt, seed=3)
    LU, piv = torch.linalg.lu_factor(a)
    tLU, tpiv = LU.to("tpu"), piv.to("tpu")
    for left in (True, False):
        for adj in (False, True):
            bb = b if left else b.mT
            close(torch.linalg.lu_solve(tLU, tpiv, bb.to("tpu"), left=left, adjoint=adj),
                  torch.linalg.lu_solve(LU, piv, bb, left=left, adjoint=adj), dt)
    close(torch.lu_solve(b.to("tpu"), tLU, tpiv), torch.lu_solve(b, LU, piv), dt)


@pytest.mark.parametrize("dt", DT)
def test_inv_solve_det(dt):
    a = well(3, 5, 5, dt=dt)
    b = rnd(3, 5, 2, dt=dt, seed=4)
    ta = a.to("tpu")
    close(torch.linalg.inv(ta), torch.linalg.inv(a), dt)
    inv, info = torch.linalg.inv_ex(ta)
    assert info.dtype == torch.int32 and info.shape == (3,)
    close(torch.linalg.solve(ta, b.to("tpu")), torch.linalg.solve(a, b), dt)
    close(torch.linalg.solve(ta, b.to("tpu")[..., 0]), torch.linalg.solve(a, b[..., 0]), dt)
    close(torch.linalg.solve(ta, b.mT.to("tpu"), left=False), torch.linalg.solve(a, b.mT, left=False), dt)
    close(torch.linalg.solve(ta[0], b.to("tpu")), torch.linalg.solve(a[0], b), dt)  # broadcast
    close(torch.linalg.det(ta), torch.linalg.det(a), dt)
    close(tuple(torch.linalg.slogdet(ta)), tuple(torch.linalg.slogdet(a)), dt)
    close(torch.logdet(spd(4, 4, dt=dt).to("tpu")), torch.logdet(spd(4, 4, dt=dt)), dt)
    close(torch.linalg.matrix_power(ta, -2), torch.linalg.matrix_power(a, -2), dt)
    # non-contiguous and empty
    close(torch.linalg.inv(ta.mT), torch.linalg.inv(a.mT), dt)
    e = torch.empty(0, 4, 4, dtype=dt)
    close(torch.linalg.inv(e.to("tpu")), torch.linalg.inv(e), dt)
    e = torch.empty(2, 0, 0, dtype=dt)
    close(torch.linalg.det(e.to("tpu")), torch.linalg.det(e), dt)


def test_singular_errors():
    s = torch.ones(3, 3)
    with pytest.raises(torch.linalg.LinAlgError):
        torch.linalg.inv(s.to("tpu"))
    with pytest.raises(torch.linalg.LinAlgError):
        torch.linalg.solve(s.to("tpu"), torch.ones(3, 1).to("tpu"))
    assert torch.linalg.det(s.to("tpu")).item() == 0.0
    sign, la = torch.linalg.slogdet(s.to("tpu"))
    assert sign.item() == 0.0 and la.item() == float("-inf")
    with pytest.raises(RuntimeError, match="floating point"):
        torch.linalg.inv(torch.eye(3, dtype=torch.long).to("tpu"))
    with pytest.raises(RuntimeError, match="Low precision"):
        torch.linalg.inv(torch.eye(3, dtype=torch.float16).to("tpu"))
    with pytest.raises(RuntimeError):
        torch.linalg.solve(torch.eye(3).to("tpu"), torch.ones(4, 1).to("tpu"))


@pytest.mark.parametrize("dt", DT)
@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (2, 4, 4), (0, 3, 2)])
def test_qr_family(dt, shape):
    a = rnd(*shape, dt=dt)
    ta = a.to("tpu")
    close(torch.geqrf(ta), tuple(torch.geqrf(a)), dt)
    for mode in ("reduced", "complete", "r"):
        close(torch.linalg.qr(ta, mode=mode), tuple(torch.linalg.qr(a, mode=mode)), dt)
    g, tau = torch.geqrf(a)
    if shape[-2] >= shape[-1]:
        close(torch.linalg.householder_product(g.to("tpu"), tau.to("tpu")),
              torch.linalg.householder_product(g, tau), dt)
    c = rnd(*shape[:-2], shape[-2], 2, dt=dt, seed=5)
    for tr in (False, True):
        close(torch.ormqr(g.to("tpu"), tau.to("tpu"), c.to("tpu"), transpose=tr),
              torch.ormqr(g, tau, c, transpose=tr), dt)


@pytest.mark.parametrize("dt", DT)
def test_lstsq(dt):
    for ms, bs in [((2, 6, 3), (2, 6, 2)), ((2, 3, 5), (2, 3, 1)), ((3, 5), (3, 2)), ((2, 6, 3), (2, 6))]:
        a, b = rnd(*ms, dt=dt), rnd(*bs, dt=dt, seed=6)
        for drv in ("gelsy", "gels"):
            r = torch.linalg.lstsq(a.to("tpu"), b.to("tpu"), driver=drv)
            e = torch.linalg.lstsq(a, b, driver=drv)
            close(r.solution, e.solution, dt)
            close(r.residuals, e.residuals, dt)
            assert r.rank.cpu().equal(e.rank)
    with pytest.raises(RuntimeError):
        torch.linalg.lstsq(torch.eye(3, dtype=torch.long).to("tpu"), torch.eye(3, dtype=torch.long).to("tpu"))


@pytest.mark.parametrize("dt", DT)
def test_matrix_exp(dt):
    for a in (rnd(4, 4, dt=dt), rnd(2, 3, 3, dt=dt) * 20, torch.zeros(1, 1, dtype=dt),
              torch.empty(0, 2, 2, dtype=dt)):
        close(torch.linalg.matrix_exp(a.to("tpu")), torch.linalg.matrix_exp(a), dt, rtol=1e-4 if dt == torch.float32 else 1e-8)
    a = rnd(4, 4, dt=dt)
    close(torch.linalg.matrix_exp(a.to("tpu").mT), torch.linalg.matrix_exp(a.mT), dt)


def test_out_variants():
    a = spd(3, 3)
    L = torch.empty(0, device="tpu", dtype=torch.float64)
    info = torch.empty(0, device="tpu", dtype=torch.int32)
    torch.linalg.cholesky_ex(a.to("tpu"), out=(L, info))
    close(L, torch.linalg.cholesky(a), torch.float64)
    assert info.shape == () and info.dtype == torch.int32
    o = torch.empty(0, device="tpu", dtype=torch.float64)
    torch.linalg.inv(a.to("tpu"), out=o)
    close(o, torch.linalg.inv(a), torch.float64)


@pytest.mark.parametrize("fn,make", [
    (lambda x: torch.linalg.cholesky(x @ x.mT + 4 * torch.eye(4, dtype=x.dtype, device=x.device)), lambda: rnd(4, 4)),
    (lambda x: torch.linalg.solve(x, torch.arange(8.0, dtype=x.dtype, device=x.device).reshape(4, 2)), lambda: well(4, 4)),
    (torch.linalg.inv, lambda: well(2, 4, 4)),
    (torch.linalg.det, lambda: well(3, 3)),
    (lambda x: torch.linalg.slogdet(x)[1], lambda: well(3, 3)),
    (lambda x: torch.linalg.qr(x)[1], lambda: rnd(5, 3)),
    (torch.linalg.matrix_exp, lambda: rnd(3, 3)),
])
def test_gradients(fn, make):
    a = make()
    x = a.clone().requires_grad_()
    y = fn(x)
    g = rnd(max(y.numel(), 1), seed=9).reshape(y.shape)
    (ga,) = torch.autograd.grad(y, x, g)
    xt = a.to("tpu").requires_grad_()
    yt = fn(xt)
    (gt,) = torch.autograd.grad(yt, xt, g.to("tpu"))
    close(gt, ga, torch.float64, rtol=1e-7, atol=1e-7)


@pytest.mark.parametrize("dt", DT)
def test_ldl(dt):
    # indefinite symmetric matrices exercise 2x2 Bunch-Kaufman pivots
    a = rnd(4, 6, 6, dt=dt, seed=11)
    a = a + a.mT
    a[1, 0, 0] = 0.0  # forces a 2x2 block at the start
    a[2] = torch.tensor([[0.0, 1, 2], [1, 0, 3], [2, 3, 0]], dtype=dt).repeat(2, 2)
    a[2] += 1e-3 * torch.eye(6, dtype=dt)
    LD, piv, info = torch.linalg.ldl_factor_ex(a.to("tpu"))
    rLD, rpiv, rinfo = torch.linalg.ldl_factor_ex(a)
    assert (rpiv < 0).any()
    assert piv.dtype == torch.int32 and piv.cpu().equal(rpiv)
    assert info.cpu().equal(rinfo)
    close(LD, rLD, dt, rtol=1e-3 if dt == torch.float32 else 1e-9)
    b = rnd(4, 6, 2, dt=dt, seed=12)
    close(torch.linalg.ldl_solve(rLD.to("tpu"), rpiv.to("tpu"), b.to("tpu")),
          torch.linalg.ldl_solve(rLD, rpiv, b), dt, rtol=1e-3 if dt == torch.float32 else 1e-9)
    # broadcast B over one factorization, empty, zero matrix (info)
    close(torch.linalg.ldl_solve(rLD[0].to("tpu"), rpiv[0].to("tpu"), b.to("tpu")),
          torch.linalg.ldl_solve(rLD[0], rpiv[0], b), dt)
    e = torch.empty(0, 2, 2, dtype=dt)
    close(torch.linalg.ldl_factor(e.to("tpu")), tuple(torch.linalg.ldl_factor(e)), dt)
    z = torch.zeros(3, 3, dtype=dt)
    r = torch.linalg.ldl_factor_ex(z.to("tpu"))
    assert r.info.item() == torch.linalg.ldl_factor_ex(z).info.item() == 1
    with pytest.raises(RuntimeError, match="floating point"):
        torch.linalg.ldl_factor(torch.eye(3, dtype=torch.long).to("tpu"))


def test_ormqr_errors():
    with pytest.raises(RuntimeError, match="at least 2 dimensions"):
        torch.ormqr(*(torch.randn((), device="tpu"),) * 3)
    with pytest.raises(RuntimeError, match=r"tau.shape\[-1\] must be equal"):
        torch.ormqr(torch.ones(5, 0, device="tpu"), torch.ones(5, device="tpu"), torch.ones(5, 5, device="tpu"))


def test_output_strides_match_cpu():
    """LAPACK-backed outputs are column-major on CPU; ours match."""
    A = spd(2, 4, 4)
    R = rnd(2, 5, 3)
    B = rnd(2, 4, 3, seed=1)
    LU, piv = torch.linalg.lu_factor(A)
    L = torch.linalg.cholesky(A)
    g, tau = torch.geqrf(R)
    cases = [
        lambda A, R, B, LU, piv, L, g, tau: torch.linalg.cholesky_ex(A),
        lambda A, R, B, LU, piv, L, g, tau: torch.cholesky_solve(B, L),
        lambda A, R, B, LU, piv, L, g, tau: torch.cholesky_inverse(L),
        lambda A, R, B, LU, piv, L, g, tau: torch.linalg.solve_triangular(A, B, upper=True),
        lambda A, R, B, LU, piv, L, g, tau: torch.linalg.lu_factor_ex(R),
        lambda A, R, B, LU, piv, L, g, tau: torch.linalg.lu(R),
        lambda A, R, B, LU, piv, L, g, tau: torch.linalg.lu_solve(LU, piv, B),
        lambda A, R, B, LU, piv, L, g, tau: torch.linalg.inv_ex(A),
        lambda A, R, B, LU, piv, L, g, tau: torch.ops.aten._linalg_solve_ex(A, B),
        lambda A, R, B, LU, piv, L, g, tau: torch.linalg.solve(A, B[..., 0]),
        lambda A, R, B, LU, piv, L, g, tau: torch.ops.aten._linalg_slogdet(A),
        lambda A, R, B, LU, piv, L, g, tau: torch.geqrf(R),
        lambda A, R, B, LU, piv, L, g, tau: torch.linalg.householder_product(g, tau),
        lambda A, R, B, LU, piv, L, g, tau: torch.linalg.qr(R, mode="complete"),
        lambda A, R, B, LU, piv, L, g, tau: torch.linalg.ldl_factor_ex(A),
        lambda A, R, B, LU, piv, L, g, tau: torch.linalg.matrix_exp(A),
    ]
    cpu = (A, R, B, LU, piv, L, g, tau)
    dev = tuple(t.to("tpu") for t in cpu)
    for f in cases:
        e, r = f(*cpu), f(*dev)
        e = e if isinstance(e, tuple) else (e,)
        r = r if isinstance(r, tuple) else (r,)
        for x, y in zip(r, e):
            assert x.shape == y.shape and x.stride() == y.stride(), (f, x.stride(), y.stride())
            torch.testing.assert_close(x.cpu(), y)
    # out= tensors resized by the op get the same layout as on CPU
    o = torch.empty(0, device="tpu", dtype=torch.float64)
    oc = torch.empty(0, dtype=torch.float64)
    torch.linalg.inv(A.to("tpu"), out=o)
    torch.linalg.inv(A, out=oc)
    assert o.stride() == oc.stride()


@pytest.mark.parametrize("dt", DT)
@pytest.mark.parametrize("drv", ["gelsd", "gelss"])
def test_lstsq_svd_drivers(dt, drv):
    a, b = rnd(2, 6, 3, dt=dt), rnd(2, 6, 2, dt=dt, seed=6)
    r = torch.linalg.lstsq(a.to("tpu"), b.to("tpu"), driver=drv)
    e = torch.linalg.lstsq(a, b, driver=drv)
    for x, y in zip(r, e):
        assert x.shape == y.shape and x.dtype == y.dtype
        torch.testing.assert_close(x.cpu(), y, **tol(dt))
    # rank-deficient (rank 2) and underdetermined: minimum-norm solution, rank
    d = rnd(5, 2, dt=dt) @ rnd(2, 4, dt=dt, seed=1)
    bd = rnd(5, 1, dt=dt, seed=2)
    r = torch.linalg.lstsq(d.to("tpu"), bd.to("tpu"), driver=drv)
    e = torch.linalg.lstsq(d, bd, driver=drv)
    close(r.solution, e.solution, dt)
    assert r.rank.item() == e.rank.item() == 2
    close(r.singular_values, e.singular_values, dt)
    u = rnd(3, 5, dt=dt)
    r = torch.linalg.lstsq(u.to("tpu"), bd[:3].to("tpu"), driver=drv)
    close(r.solution, torch.linalg.lstsq(u, bd[:3], driver=drv).solution, dt)


def test_ormqr_int_shape_error_first():
    # CPU reports the tau shape before the (unsupported) dtype
    with pytest.raises(RuntimeError, match=r"tau.shape\[-1\] must be equal"):
        torch.ormqr(torch.ones(5, 0, dtype=torch.long, device="tpu"), torch.ones(5, dtype=torch.long, device="tpu"),
                    torch.ones(5, 5, dtype=torch.long, device="tpu"))


def test_zero_dim_inputs_raise_like_cpu():
    z = torch.tensor(2.0)
    for f in (torch.linalg.cholesky, torch.linalg.inv, torch.linalg.det, torch.geqrf, torch.linalg.matrix_exp):
        with pytest.raises(RuntimeError) as ce:
            f(z)
        with pytest.raises(type(ce.value)):
            f(z.to("tpu"))

"""Spectral linear algebra on tpu vs PyTorch CPU (fallback disabled):
linalg.eigh / eigvalsh, linalg.svd / svdvals / torch.svd, and the
composites built on them (pinv, matrix_rank, cond, nuclear norm).

Eigenvectors and singular vectors are only defined up to sign (and up to a
rotation inside repeated eigenspaces), so the tests compare sign-invariant
quantities: values, reconstructions (U diag(S) Vh, V diag(w) V^T),
A V = V diag(w), orthonormality and |<u_tpu, u_cpu>| = 1 for distinct
values. Gradients are compared for well-conditioned inputs with distinct
spectra and gauge-invariant losses."""
import pytest
import torch

from conftest import DEV, assert_close

TOL = dict(rtol=1e-4, atol=1e-4)


def _rand(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=dtype)


def _sym(*shape, dtype=torch.float32, seed=0):
    a = _rand(*shape, dtype=dtype, seed=seed)
    return a + a.mT


def _eye_like(n, batch, dtype):
    return torch.eye(n, dtype=dtype).expand(*batch, n, n)


def _check_eigh(a_cpu, uplo="L", tol=TOL):
    w, v = torch.linalg.eigh(a_cpu.to(DEV), UPLO=uplo)
    wc, vc = torch.linalg.eigh(a_cpu, UPLO=uplo)
    assert w.device.type == "tpu" and v.device.type == "tpu"
    assert_close(w, wc, **tol)
    w, v = w.cpu(), v.cpu()
    n = a_cpu.shape[-1]
    sym = a_cpu.tril() + a_cpu.tril(-1).mT if uplo == "L" else a_cpu.triu() + a_cpu.triu(1).mT
    torch.testing.assert_close(sym @ v, v * w.unsqueeze(-2), **tol)
    torch.testing.assert_close(v.mT @ v, _eye_like(n, a_cpu.shape[:-2], a_cpu.dtype), **tol)
    # distinct eigenvalues: each eigenvector equals CPU's up to sign
    torch.testing.assert_close((v * vc).sum(-2).abs(), torch.ones_like(w), **tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(1, 1), (4, 4), (3, 6, 6), (2, 2, 5, 5)])
@pytest.mark.parametrize("uplo", ["L", "U"])
def test_eigh(shape, dtype, uplo):
    a = _rand(*shape, dtype=dtype, seed=len(shape))  # not symmetric: UPLO picks the triangle
    _check_eigh(a, uplo)


def test_eigh_noncontiguous():
    base = _sym(3, 5, 5, seed=3)
    a = base.to(DEV).mT[::2]  # strided batch, column-major matrices
    assert not a.is_contiguous()
    w = torch.linalg.eigvalsh(a)
    assert_close(w, torch.linalg.eigvalsh(base.mT[::2]), **TOL)
    _check_eigh(base.mT[::2].contiguous())


def test_eigh_empty():
    for shape in [(0, 0), (3, 0, 0), (0, 4, 4)]:
        a = torch.zeros(shape)
        w, v = torch.linalg.eigh(a.to(DEV))
        wc, vc = torch.linalg.eigh(a)
        assert w.shape == wc.shape and v.shape == vc.shape
        assert w.device.type == "tpu"


def test_eigvalsh_and_out():
    a = _sym(2, 4, 4, seed=5)
    assert_close(torch.linalg.eigvalsh(a.to(DEV)), torch.linalg.eigvalsh(a), **TOL)
    w = torch.empty(0, device=DEV)
    v = torch.empty(0, device=DEV)
    torch.linalg.eigh(a.to(DEV), out=(w, v))
    assert_close(w, torch.linalg.eigvalsh(a), **TOL)
    out = torch.empty(0, device=DEV)
    torch.linalg.eigvalsh(a.to(DEV), out=out)
    assert_close(out, torch.linalg.eigvalsh(a), **TOL)


def test_eigh_repeated_eigenvalues():
    q, _ = torch.linalg.qr(_rand(6, 6, dtype=torch.float64, seed=9))
    a = q @ torch.diag(torch.tensor([1.0, 1, 1, 2, 2, 3], dtype=torch.float64)) @ q.T
    w, v = torch.linalg.eigh(a.to(DEV))
    w, v = w.cpu(), v.cpu()
    torch.testing.assert_close(w, torch.tensor([1.0, 1, 1, 2, 2, 3], dtype=torch.float64))
    torch.testing.assert_close(v @ torch.diag(w) @ v.T, a)
    torch.testing.assert_close(v.T @ v, torch.eye(6, dtype=torch.float64))


def _check_svd(a_cpu, full_matrices, tol=TOL):
    u, s, vh = torch.linalg.svd(a_cpu.to(DEV), full_matrices=full_matrices)
    uc, sc, vhc = torch.linalg.svd(a_cpu, full_matrices=full_matrices)
    assert u.device.type == "tpu"
    assert u.shape == uc.shape and s.shape == sc.shape and vh.shape == vhc.shape
    assert_close(s, sc, **tol)
    u, s, vh = u.cpu(), s.cpu(), vh.cpu()
    k = s.shape[-1]
    rec = (u[..., :k] * s.unsqueeze(-2)) @ vh[..., :k, :]
    torch.testing.assert_close(rec, a_cpu, **tol)
    m, n = a_cpu.shape[-2:]
    batch = a_cpu.shape[:-2]
    torch.testing.assert_close(u.mT @ u, _eye_like(u.shape[-1], batch, a_cpu.dtype), **tol)
    torch.testing.assert_close(vh @ vh.mT, _eye_like(vh.shape[-2], batch, a_cpu.dtype), **tol)
    # distinct singular values: vectors equal CPU's up to sign
    torch.testing.assert_close((u[..., :k] * uc[..., :k]).sum(-2).abs(), torch.ones_like(s), **tol)
    torch.testing.assert_close((vh[..., :k, :] * vhc[..., :k, :]).sum(-1).abs(), torch.ones_like(s), **tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(1, 1), (5, 3), (3, 5), (4, 4), (2, 6, 2), (2, 3, 4, 7)])
@pytest.mark.parametrize("full_matrices", [True, False])
def test_svd(shape, dtype, full_matrices):
    _check_svd(_rand(*shape, dtype=dtype, seed=sum(shape)), full_matrices)


def test_svd_noncontiguous():
    base = _rand(2, 6, 4, seed=4)
    a = base.to(DEV).mT  # [2, 4, 6], column-major
    assert not a.is_contiguous()
    assert_close(torch.linalg.svdvals(a), torch.linalg.svdvals(base.mT), **TOL)
    assert_close(torch.linalg.svdvals(base.to(DEV)[:, ::2, 1:]),
                 torch.linalg.svdvals(base[:, ::2, 1:]), **TOL)
    _check_svd(base.mT.contiguous(), False)


@pytest.mark.parametrize("shape", [(0, 0), (3, 0), (0, 3), (2, 0, 4), (0, 3, 3)])
@pytest.mark.parametrize("full_matrices", [True, False])
def test_svd_empty(shape, full_matrices):
    a = torch.zeros(shape)
    u, s, vh = torch.linalg.svd(a.to(DEV), full_matrices=full_matrices)
    uc, sc, vhc = torch.linalg.svd(a, full_matrices=full_matrices)
    assert u.shape == uc.shape and s.shape == sc.shape and vh.shape == vhc.shape
    # the completed bases of an empty matrix are identities, like CPU
    assert_close(u, uc)
    assert_close(vh, vhc)


def test_svd_rank_deficient():
    x = _rand(6, 2, dtype=torch.float64, seed=1)
    a = x @ _rand(2, 5, dtype=torch.float64, seed=2)  # rank 2
    for full in (True, False):
        u, s, vh = torch.linalg.svd(a.to(DEV), full_matrices=full)
        u, s, vh = u.cpu(), s.cpu(), vh.cpu()
        torch.testing.assert_close(s, torch.linalg.svdvals(a), atol=1e-10, rtol=1e-10)
        k = s.shape[-1]
        torch.testing.assert_close((u[:, :k] * s) @ vh[:k], a)
        torch.testing.assert_close(u.T @ u, torch.eye(u.shape[1], dtype=a.dtype))
        torch.testing.assert_close(vh @ vh.T, torch.eye(vh.shape[0], dtype=a.dtype))
    assert torch.linalg.matrix_rank(a.to(DEV)).item() == 2
    z = torch.zeros(3, 4, device=DEV)
    u, s, vh = torch.linalg.svd(z)
    assert_close(s, torch.zeros(3))
    torch.testing.assert_close(u.cpu().T @ u.cpu(), torch.eye(3))
    torch.testing.assert_close(vh.cpu() @ vh.cpu().T, torch.eye(4))


def test_svd_variants():
    a = _rand(3, 5, 4, seed=8)
    assert_close(torch.linalg.svdvals(a.to(DEV)), torch.linalg.svdvals(a), **TOL)
    u, s, v = torch.svd(a.to(DEV))
    uc, sc, vc = torch.svd(a)
    assert_close(s, sc, **TOL)
    torch.testing.assert_close(u.cpu() @ torch.diag_embed(s.cpu()) @ v.cpu().mT, a, **TOL)
    u, s, v = torch.svd(a.to(DEV), compute_uv=False)
    assert_close(s, sc, **TOL)
    uo, so, vo = (torch.empty(0, device=DEV) for _ in range(3))
    torch.linalg.svd(a.to(DEV), full_matrices=False, out=(uo, so, vo))
    assert_close(so, sc, **TOL)
    torch.testing.assert_close(uo.cpu() @ torch.diag_embed(so.cpu()) @ vo.cpu(), a, **TOL)


def test_composites():
    a = _rand(2, 4, 3, seed=6)
    sq = _rand(3, 3, seed=7)
    h = _sym(4, 4, seed=12)
    for fn in [
        lambda x: torch.linalg.pinv(x),
        lambda x: torch.pinverse(x),
        lambda x: torch.linalg.matrix_norm(x, "nuc"),
        lambda x: torch.linalg.matrix_norm(x, 2),
        lambda x: torch.linalg.matrix_norm(x, -2),
        lambda x: torch.linalg.norm(x, "nuc", dim=(-2, -1)),
        lambda x: torch.linalg.matrix_rank(x),
    ]:
        assert_close(fn(a.to(DEV)), fn(a), **TOL)
    assert_close(torch.linalg.cond(sq.to(DEV)), torch.linalg.cond(sq), rtol=1e-3, atol=1e-3)
    assert_close(torch.linalg.pinv(h.to(DEV), hermitian=True),
                 torch.linalg.pinv(h, hermitian=True), **TOL)
    assert_close(torch.linalg.matrix_rank(h.to(DEV), hermitian=True),
                 torch.linalg.matrix_rank(h, hermitian=True))


def test_errors_like_cpu():
    cases = [
        (lambda d: torch.linalg.eigh(torch.ones(2, 3, device=d)), RuntimeError),
        (lambda d: torch.linalg.eigh(torch.ones(3, device=d)), RuntimeError),
        (lambda d: torch.linalg.eigh(torch.ones(3, 3, device=d), UPLO="X"), RuntimeError),
        (lambda d: torch.linalg.svd(torch.ones(3, device=d)), RuntimeError),
        (lambda d: torch.linalg.svd(torch.ones(3, 3, dtype=torch.long, device=d)), RuntimeError),
        (lambda d: torch.linalg.svdvals(torch.ones(3, 3, dtype=torch.int32, device=d)), RuntimeError),
        (lambda d: torch.linalg.eigvalsh(torch.ones(3, 3, dtype=torch.long, device=d)),
         NotImplementedError),
    ]
    for fn, exc in cases:
        with pytest.raises(exc) as e_cpu:
            fn("cpu")
        with pytest.raises(exc) as e_dev:
            fn(DEV)
        if exc is RuntimeError:  # NotImplementedError: strict mode says more
            assert str(e_cpu.value).split("\n")[0] == str(e_dev.value).split("\n")[0]


@pytest.mark.parametrize("batched", [False, True])
def test_nan_raises_linalg_error(batched):
    a = _sym(2, 3, 3, seed=2)
    a[1, 2, 0] = float("nan")
    if not batched:
        a = a[1]
    for fn in [torch.linalg.eigh, torch.linalg.eigvalsh, torch.linalg.svd, torch.linalg.svdvals]:
        with pytest.raises(torch.linalg.LinAlgError) as e_cpu:
            fn(a)
        with pytest.raises(torch.linalg.LinAlgError) as e_dev:
            fn(a.to(DEV))
        assert str(e_cpu.value).split("\n")[0] == str(e_dev.value).split("\n")[0]
    # the NaN sits in the lower triangle only: UPLO="U" never reads it
    w = torch.linalg.eigvalsh(a.to(DEV), UPLO="U")
    assert_close(w, torch.linalg.eigvalsh(a, UPLO="U"), **TOL)


def _grad(fn, a, tol=TOL):
    x_cpu = a.clone().requires_grad_(True)
    x_dev = a.to(DEV).requires_grad_(True)
    y_cpu, y_dev = fn(x_cpu), fn(x_dev)
    assert_close(y_dev, y_cpu.detach(), **tol)
    cot = _rand(*y_cpu.shape, dtype=y_cpu.dtype, seed=99)
    y_cpu.backward(cot)
    y_dev.backward(cot.to(DEV))
    assert_close(x_dev.grad, x_cpu.grad, **tol)


def test_gradients():
    a = _sym(2, 4, 4, dtype=torch.float64, seed=21)
    _grad(lambda x: torch.linalg.eigvalsh(x), a)
    # gauge-invariant functions of the eigenvectors
    _grad(lambda x: (lambda w, v: (v * v) * w.unsqueeze(-2))(*torch.linalg.eigh(x)), a)
    b = _rand(2, 5, 3, dtype=torch.float64, seed=22)
    _grad(lambda x: torch.linalg.svdvals(x), b)
    _grad(lambda x: (lambda u, s, vh: (u * s.unsqueeze(-2)) @ vh)(
        *torch.linalg.svd(x, full_matrices=False)), b)
    _grad(lambda x: (lambda u, s, vh: u.abs() + 0 * s.sum())(
        *torch.linalg.svd(x, full_matrices=False)), b)
    _grad(lambda x: torch.linalg.pinv(x), b)
    _grad(lambda x: torch.linalg.matrix_norm(x, "nuc"), b)
    c = _rand(4, 4, seed=23)  # float32
    _grad(lambda x: torch.linalg.svdvals(x), c, tol=dict(rtol=1e-3, atol=1e-3))


def test_fused_eager():
    from torch_tpu.execution_mode import EagerMode, eager_mode

    a = _rand(3, 5, 4, seed=31)
    h = _sym(2, 4, 4, seed=32)
    with eager_mode(EagerMode.DEFER_AND_FUSE):
        x = a.to(DEV) * 2 + 1  # fused producer, then the decomposition
        s = torch.linalg.svdvals(x)
        w = torch.linalg.eigvalsh(h.to(DEV) - 1)
        p = torch.linalg.pinv(x)
        assert_close(s, torch.linalg.svdvals(a * 2 + 1), **TOL)
        assert_close(w, torch.linalg.eigvalsh(h - 1), **TOL)
        assert_close(p, torch.linalg.pinv(a * 2 + 1), **TOL)
        bad = h.clone()
        bad[0, 1, 0] = float("nan")
        with pytest.raises(torch.linalg.LinAlgError):
            torch.linalg.eigvalsh(bad.to(DEV) + 0)

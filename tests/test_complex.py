"""Complex tensors and torch.fft on tpu vs PyTorch CPU (fallback disabled,
HIGHEST precision from conftest): transfers, printing, views that alias
device memory (view_as_real/view_as_complex, real/imag, conj), arithmetic,
reductions, matmul, complex/polar/angle, every torch.fft transform (incl.
odd/prime lengths, norms, non-contiguous and empty inputs), torch.stft,
error inputs."""
import pytest
import torch

from conftest import DEV, assert_close

TOL = dict(rtol=1e-5, atol=1e-5)


def _c(*shape, dtype=torch.cfloat, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.cfloat, torch.cdouble])
def test_round_trip_and_print(dtype):
    a = _c(3, 4, dtype=dtype)
    t = a.to(DEV)
    assert t.dtype == dtype and t.device.type == "tpu"
    assert torch.equal(t.cpu(), a)
    assert "j" in str(t) and "tpu" in str(t)
    assert t[1, 2].item() == a[1, 2].item()
    assert torch.equal(t.clone().cpu(), a)
    # real <-> complex conversions with torch semantics
    r = torch.randn(5).to(DEV)
    assert_close(r.to(dtype), torch.complex(r.cpu(), torch.zeros(5)).to(dtype))


def test_views_alias_device_memory():
    a = _c(4, 3)
    t = a.to(DEV)
    r = torch.view_as_real(t)
    assert r.shape == (4, 3, 2) and r.dtype == torch.float32
    assert r.data_ptr() == t.data_ptr()
    c = torch.view_as_complex(r)
    assert c.data_ptr() == t.data_ptr() and torch.equal(c.cpu(), a)
    re, im = t.real, t.imag
    assert re.data_ptr() == t.data_ptr()
    assert torch.equal(re.cpu(), a.real) and torch.equal(im.cpu(), a.imag)
    # writes through the real view land in the complex tensor
    r[..., 1].zero_()
    assert torch.equal(t.imag.cpu(), torch.zeros(4, 3))
    t.real.mul_(2)
    assert torch.equal(t.real.cpu(), 2 * a.real)
    # view_as_complex of a non-contiguous (but legal) view
    x = torch.randn(6, 4, 2)
    v = x.to(DEV)[::2]
    assert torch.equal(torch.view_as_complex(v).cpu(), torch.view_as_complex(x[::2]))


def test_conj_and_neg_views():
    a = _c(5)
    t = a.to(DEV)
    assert t.conj().is_conj()
    assert torch.equal(t.conj().cpu(), a.conj())
    assert torch.equal(t.conj().resolve_conj().cpu(), a.conj().resolve_conj())
    assert torch.equal(t.conj().imag.cpu(), -a.imag)
    assert torch.equal(torch.conj_physical(t).cpu(), torch.conj_physical(a))
    assert torch.equal(a.conj().to(DEV).cpu(), a.conj())  # host conj view -> device


def test_view_as_real_errors():
    with pytest.raises(RuntimeError):
        torch.view_as_real(torch.randn(3).to(DEV))
    with pytest.raises(RuntimeError):
        torch.view_as_complex(torch.randn(3, 3).to(DEV))
    with pytest.raises(RuntimeError):
        torch.view_as_complex(torch.randn(3, 2).to(DEV).t())


BIN = [
    lambda x, y: x + y, lambda x, y: x - y, lambda x, y: x * y, lambda x, y: x / y,
    lambda x, y: x == y, lambda x, y: x != y, lambda x, y: x * 2.5 - 1,
    lambda x, y: x + (1 - 2j), lambda x, y: x * y.real, lambda x, y: torch.where(y.real > 0, x, y),
]


@pytest.mark.parametrize("k", range(len(BIN)))
def test_binary(k):
    f = BIN[k]
    a, b = _c(3, 4, seed=1), _c(3, 4, seed=2)
    assert_close(f(a.to(DEV), b.to(DEV)), f(a, b), **TOL)


UN = [torch.abs, torch.sgn, torch.neg, torch.exp, torch.log, torch.sqrt, torch.sin, torch.cos,
      torch.tanh, torch.angle, torch.isnan, torch.reciprocal, torch.sigmoid,
      lambda x: x.sum(), lambda x: x.sum(1), lambda x: x.mean(0), lambda x: x.sum((0, 1))]


@pytest.mark.parametrize("k", range(len(UN)))
def test_unary_and_reductions(k):
    f = UN[k]
    a = _c(3, 4, seed=3)
    assert_close(f(a.to(DEV)), f(a), **TOL)


def test_matmul_cat_index_noncontiguous():
    a, b = _c(4, 6, seed=4), _c(6, 3, seed=5)
    ta, tb = a.to(DEV), b.to(DEV)
    assert_close(ta @ tb, a @ b, **TOL)
    assert_close(ta.t() @ ta[:, :4], a.t() @ a[:, :4], **TOL)
    assert_close(torch.bmm(ta[None], tb[None]), torch.bmm(a[None], b[None]), **TOL)
    assert_close(torch.vdot(ta[0], ta[1]), torch.vdot(a[0], a[1]), **TOL)
    assert_close(torch.cat([ta, ta * 2]), torch.cat([a, a * 2]))
    assert_close(ta[:, ::2].reshape(-1), a[:, ::2].reshape(-1))
    assert_close(ta.transpose(0, 1).contiguous(), a.transpose(0, 1).contiguous())
    idx = torch.tensor([3, 0, 2])
    assert_close(ta[idx.to(DEV)], a[idx])
    assert_close(ta.flip(0), a.flip(0))
    z = torch.zeros(2, 3, dtype=torch.cfloat, device=DEV)
    assert torch.equal(z.cpu(), torch.zeros(2, 3, dtype=torch.cfloat))
    z.fill_(1 + 2j)
    assert torch.equal(z.cpu(), torch.full((2, 3), 1 + 2j, dtype=torch.cfloat))


def test_complex_polar_angle():
    re, im = torch.randn(3, 4), torch.randn(4)
    assert_close(torch.complex(re.to(DEV), im.to(DEV)), torch.complex(re, im))
    ab, ang = torch.rand(5, dtype=torch.float64), torch.randn(5, dtype=torch.float64)
    assert_close(torch.polar(ab.to(DEV), ang.to(DEV)), torch.polar(ab, ang), **TOL)
    x = torch.tensor([-2.0, 0.0, 3.0, float("nan"), -0.0])
    assert_close(torch.angle(x.to(DEV)), torch.angle(x), equal_nan=True)
    i = torch.tensor([-3, 0, 4])
    assert_close(torch.angle(i.to(DEV)), torch.angle(i))
    with pytest.raises(RuntimeError):
        torch.complex(torch.ones(2, dtype=torch.int32).to(DEV), torch.ones(2, dtype=torch.int32).to(DEV))
    with pytest.raises(RuntimeError):
        torch.complex(torch.ones(2).to(DEV), torch.ones(2, dtype=torch.float64).to(DEV))


FFTS = [
    (torch.fft.fft, {}), (torch.fft.fft, dict(n=7, norm="ortho")), (torch.fft.ifft, dict(n=4)),
    (torch.fft.fft, dict(dim=0, norm="forward")), (torch.fft.rfft, {}), (torch.fft.rfft, dict(n=13)),
    (torch.fft.irfft, {}), (torch.fft.irfft, dict(n=9, norm="ortho")), (torch.fft.hfft, {}),
    (torch.fft.ihfft, {}), (torch.fft.fft2, {}), (torch.fft.ifft2, dict(s=(3, 5))),
    (torch.fft.fftn, dict(dim=(0, 2))), (torch.fft.ifftn, {}), (torch.fft.rfft2, {}),
    (torch.fft.irfft2, {}), (torch.fft.rfftn, dict(dim=(2, 0))), (torch.fft.irfftn, dict(s=(4, 6, 5))),
    (torch.fft.hfft2, {}), (torch.fft.ihfftn, {}),
]


@pytest.mark.parametrize("k", range(len(FFTS)))
@pytest.mark.parametrize("complex_in", [False, True])
def test_fft_vs_cpu(k, complex_in):
    f, kw = FFTS[k]
    if complex_in and f in (torch.fft.rfft, torch.fft.rfft2, torch.fft.rfftn, torch.fft.ihfft,
                            torch.fft.ihfftn):
        pytest.skip("real-input transform")
    x = _c(5, 6, 3, seed=k) if complex_in else torch.randn(5, 6, 3)
    assert_close(f(x.to(DEV), **kw), f(x, **kw), **TOL)


@pytest.mark.parametrize("n", [1, 2, 5, 7, 8, 12, 17, 64, 97])
def test_fft_lengths_double(n):
    x = _c(2, n, dtype=torch.cdouble)
    assert_close(torch.fft.fft(x.to(DEV)), torch.fft.fft(x), rtol=1e-10, atol=1e-10)
    r = torch.randn(3, n, dtype=torch.float64)
    assert_close(torch.fft.irfft(torch.fft.rfft(r.to(DEV)), n=n), r, rtol=1e-10, atol=1e-10)


def test_fft_noncontiguous_and_empty():
    x = torch.randn(8, 10)
    xt = x.to(DEV)
    assert_close(torch.fft.fft(xt.t()), torch.fft.fft(x.t()), **TOL)
    assert_close(torch.fft.rfft(xt[::2, 1::3]), torch.fft.rfft(x[::2, 1::3]), **TOL)
    c = _c(6, 4)
    assert_close(torch.fft.ifft(c.to(DEV)[:, ::2], dim=0), torch.fft.ifft(c[:, ::2], dim=0), **TOL)
    # empty batches (CPU's MKL rejects them; like CUDA the result is empty)
    out = torch.fft.fft(torch.randn(0, 8).to(DEV))
    assert out.shape == (0, 8) and out.dtype == torch.cfloat and out.device.type == "tpu"
    out = torch.fft.irfft(torch.zeros(0, 5, dtype=torch.cfloat).to(DEV))
    assert out.shape == (0, 8) and out.dtype == torch.float32
    out = torch.fft.rfft2(torch.randn(3, 0, 4, 6).to(DEV))
    assert out.shape == (3, 0, 4, 4)
    with pytest.raises(RuntimeError):
        torch.fft.fft(torch.randn(4).to(DEV), n=0)
    with pytest.raises(IndexError):
        torch.fft.fft(torch.randn(4).to(DEV), dim=3)


def test_fft_grad():
    x = torch.randn(4, 6, requires_grad=True)
    xd = x.detach().to(DEV).requires_grad_(True)
    torch.fft.rfft(x).abs().sum().backward()
    torch.fft.rfft(xd).abs().sum().backward()
    assert_close(xd.grad, x.grad, **TOL)


def test_stft():
    x = torch.randn(2, 200)
    w = torch.hann_window(32)
    ref = torch.stft(x, 32, hop_length=8, window=w, return_complex=True)
    out = torch.stft(x.to(DEV), 32, hop_length=8, window=w.to(DEV), return_complex=True)
    assert_close(out, ref, **TOL)
    ref = torch.stft(x, 20, hop_length=5, window=torch.ones(20), center=False,
                     onesided=False, normalized=True, return_complex=True)
    out = torch.stft(x.to(DEV), 20, hop_length=5, window=torch.ones(20).to(DEV), center=False,
                     onesided=False, normalized=True, return_complex=True)
    assert_close(out, ref, **TOL)


def test_pow_prod_masked_fill():
    a = _c(4, 5, seed=7)
    t = a.to(DEV)
    for f in [lambda x: x ** 2, lambda x: x ** (0.5 + 1j), lambda x: 2 ** x, lambda x: x.pow(x),
              lambda x: x.prod(0), lambda x: x.prod(), lambda x: x.masked_fill(x.real > 0, 1 + 1j)]:
        assert_close(f(t), f(a), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("ord", [2, 1, float("inf"), 0, 3.5])
def test_vector_norm(ord):
    a = _c(6, 8, seed=9)
    t = a.to(DEV)
    assert_close(torch.linalg.vector_norm(t, ord), torch.linalg.vector_norm(a, ord), **TOL)
    assert_close(torch.linalg.vector_norm(t.t(), ord, dim=1, keepdim=True),
                 torch.linalg.vector_norm(a.t(), ord, dim=1, keepdim=True), **TOL)


def test_randn_complex_on_device():
    r = torch.randn(20000, dtype=torch.cfloat, device=DEV)
    assert r.dtype == torch.cfloat and r.device.type == "tpu"
    re, im = r.real.cpu(), r.imag.cpu()
    assert abs(re.std().item() - 0.5 ** 0.5) < 0.03 and abs(im.std().item() - 0.5 ** 0.5) < 0.03
    assert abs(re.mean().item()) < 0.03 and abs(im.mean().item()) < 0.03
    assert abs(torch.corrcoef(torch.stack([re, im]))[0, 1].item()) < 0.05


def test_fused_eager_complex():
    from torch_tpu.execution_mode import EagerMode, eager_mode
    x, c = torch.randn(6, 8), _c(6, 8, seed=8)
    with eager_mode(EagerMode.DEFER_AND_FUSE):
        for _ in range(3):  # repeated steps hit the cached program
            xt, ct = x.to(DEV), c.to(DEV)
            y = torch.fft.rfft(xt * 2) + 1j
            z = (ct * ct.conj() + (2 - 1j)).sum(0)
            w = torch.fft.ifft2(ct, norm="ortho").abs()
            assert_close(y, torch.fft.rfft(x * 2) + 1j, **TOL)
            assert_close(z, (c * c.conj() + (2 - 1j)).sum(0), **TOL)
            assert_close(w, torch.fft.ifft2(c, norm="ortho").abs(), **TOL)


def test_unsupported_complex_op_is_not_native():
    # real-only lowerings never see complex inputs: no silent wrong result
    with pytest.raises(NotImplementedError):
        torch.maximum(_c(3).to(DEV), _c(3).to(DEV))

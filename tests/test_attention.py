"""Fused scaled dot-product attention: torch's "overrideable" SDPA backend on
the vTPU (one TPUIR_ATTENTION / ATTENTION_GRAD node per call), checked
against PyTorch CPU in float64, and the choice between it and the math
path."""
import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from conftest import DEV

FUSED, MATH = SDPBackend.OVERRIDEABLE.value, SDPBackend.MATH.value
ops = torch.ops.aten


def _qkv(B, H, Tq, Tk, E, Ev, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(B, H, Tq, E, generator=g).to(dtype),
            torch.randn(B, H, Tk, E, generator=g).to(dtype),
            torch.randn(B, H, Tk, Ev, generator=g).to(dtype))


def _ref(q, k, v, mask=None, causal=False, scale=None, grad=None):
    """CPU float64: output, and (q, k, v) gradients of sum(out * grad)."""
    r = [t.double().requires_grad_() for t in (q, k, v)]
    m = None if mask is None else (mask if mask.dtype == torch.bool else mask.double())
    o = F.scaled_dot_product_attention(*r, attn_mask=m, is_causal=causal, scale=scale)
    if grad is None:
        return o.detach(), None
    o.backward(grad.double())
    return o.detach(), [t.grad for t in r]


def _profiled(fn):
    with torch.tpu._executor_profile() as p:
        out = fn()
        torch.tpu.synchronize()
    return out, p.report(50)


CASES = [  # B, H, Tq, Tk, E, Ev, causal, mask
    (2, 3, 17, 23, 8, 5, False, None),
    (1, 2, 40, 40, 16, 16, True, None),
    (1, 2, 300, 300, 32, 32, True, None),  # several query blocks, causal key ranges
    (2, 2, 64, 9, 16, 16, True, None),     # more queries than keys
    (2, 3, 17, 23, 8, 5, False, "bool"),
    (2, 3, 17, 23, 8, 5, False, "float"),
]


def _mask(kind, B, Tq, Tk):
    g = torch.Generator().manual_seed(1)
    if kind == "bool":
        m = torch.rand(Tq, Tk, generator=g) > 0.3
        m[:, 0] = True  # no fully masked row
        return m
    if kind == "float":
        return torch.randn(B, 1, Tq, Tk, generator=g)
    return None


@pytest.mark.parametrize("B,H,Tq,Tk,E,Ev,causal,mask", CASES)
def test_forward_as_cpu(B, H, Tq, Tk, E, Ev, causal, mask):
    q, k, v = _qkv(B, H, Tq, Tk, E, Ev)
    m = _mask(mask, B, Tq, Tk)
    ref, _ = _ref(q, k, v, m, causal)
    qd, kd, vd = (t.to(DEV) for t in (q, k, v))
    assert torch._fused_sdp_choice(qd, kd, vd, m if m is None else m.to(DEV), 0.0, causal) == FUSED
    out, rep = _profiled(lambda: F.scaled_dot_product_attention(
        qd, kd, vd, attn_mask=None if m is None else m.to(DEV), is_causal=causal))
    assert " attention float32" in rep, rep  # the fused node ran, not the math path
    torch.testing.assert_close(out.cpu().double(), ref, atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("B,H,Tq,Tk,E,Ev,causal,mask", CASES)
def test_backward_as_cpu(B, H, Tq, Tk, E, Ev, causal, mask):
    """The backend's forward and backward ops, as autograd calls them."""
    q, k, v = _qkv(B, H, Tq, Tk, E, Ev)
    m = _mask(mask, B, Tq, Tk)
    go = torch.randn(B, H, Tq, Ev, generator=torch.Generator().manual_seed(2))
    ref, (gq, gk, gv) = _ref(q, k, v, m, causal, grad=go)
    qd, kd, vd = (t.to(DEV) for t in (q, k, v))
    bias = None
    if m is not None:  # the backend takes an additive bias
        b = m if m.dtype != torch.bool else torch.zeros(m.shape).masked_fill(~m, float("-inf"))
        bias = b.expand(B, H, Tq, Tk).to(DEV)
    res = ops._scaled_dot_product_fused_attention_overrideable(qd, kd, vd, bias, is_causal=causal)
    out, lse = res[0], res[1]
    assert lse.dtype == torch.float32 and lse.shape == (B, H, Tq)
    s = q.double() @ k.double().transpose(-1, -2) / E ** 0.5
    if m is not None:
        s = s + (b.double() if m.dtype != torch.bool else b.double())
    if causal:
        s = s.masked_fill(~torch.ones(Tq, Tk, dtype=torch.bool).tril(), float("-inf"))
    torch.testing.assert_close(lse.cpu().double(), s.logsumexp(-1), atol=2e-5, rtol=2e-5)
    grads, rep = _profiled(lambda: ops._scaled_dot_product_fused_attention_overrideable_backward(
        go.to(DEV), qd, kd, vd, bias, [True, True, True, False], out, lse, res[2], res[3], res[4],
        res[5], 0.0, causal, res[6], res[7]))
    assert "attention_grad" in rep, rep
    assert grads[3] is None
    for got, want in zip(grads[:3], (gq, gk, gv)):
        torch.testing.assert_close(got.cpu().double(), want, atol=5e-5, rtol=5e-5)


@pytest.mark.parametrize("causal,mask", [(True, None), (False, None), (False, "bool"),
                                         (False, "float")])
def test_training_through_autograd(causal, mask):
    """Training takes the fused kernel (forward and backward nodes) with or
    without the causal mask; a mask that needs no gradient is a bias."""
    q, k, v = _qkv(2, 4, 48, 40, 16, 16)
    go = torch.randn(2, 4, 48, 16)
    m = _mask(mask, 2, 48, 40)
    ref, rgrads = _ref(q, k, v, mask=m, causal=causal, grad=go)
    ts = [t.to(DEV).requires_grad_() for t in (q, k, v)]
    md = None if m is None else m.to(DEV)
    assert torch._fused_sdp_choice(*ts, md, 0.0, causal) == FUSED

    def step():
        out = F.scaled_dot_product_attention(*ts, attn_mask=md, is_causal=causal)
        out.backward(go.to(DEV))
        return out
    out, rep = _profiled(step)
    assert " attention float32" in rep and " attention_grad float32" in rep, rep
    torch.testing.assert_close(out.detach().cpu().double(), ref, atol=2e-5, rtol=2e-5)
    for t, want in zip(ts, rgrads):
        torch.testing.assert_close(t.grad.cpu().double(), want, atol=5e-5, rtol=5e-5)


def test_layouts_and_dtypes():
    # q/k/v as transposed views of [B, T, H, E] (what multi-head attention passes)
    x = torch.randn(2, 33, 4, 8)
    xd = x.to(DEV).transpose(1, 2)
    ref, _ = _ref(*(x.transpose(1, 2),) * 3, causal=True)
    out = F.scaled_dot_product_attention(xd, xd, xd, is_causal=True)
    torch.testing.assert_close(out.cpu().double(), ref, atol=2e-5, rtol=2e-5)
    # bf16 / f16 in, same dtype out, rounded like the math path on CPU
    for dt in (torch.bfloat16, torch.float16):
        q, k, v = _qkv(2, 2, 20, 31, 16, 8, dtype=dt)
        ref, _ = _ref(q, k, v, scale=0.3)
        out = F.scaled_dot_product_attention(*(t.to(DEV) for t in (q, k, v)), scale=0.3)
        assert out.dtype == dt
        torch.testing.assert_close(out.cpu().double(), ref, atol=2e-2, rtol=2e-2)


def test_default_precision_bf16_operands():
    """DEFAULT: bf16 products with f32 accumulation, as the math path's
    matmuls: the error is bf16-sized, close to the math path's own."""
    q, k, v = _qkv(2, 3, 64, 64, 32, 32)
    ref, _ = _ref(q, k, v, causal=True)
    qd, kd, vd = (t.to(DEV) for t in (q, k, v))
    with torch.tpu.precision(torch.tpu.Precision.DEFAULT):
        fused = F.scaled_dot_product_attention(qd, kd, vd, is_causal=True).cpu().double()
        with sdpa_kernel([SDPBackend.MATH]):
            math = F.scaled_dot_product_attention(qd, kd, vd, is_causal=True).cpu().double()
    ef, em = (fused - ref).abs().max().item(), (math - ref).abs().max().item()
    assert 1e-4 < ef < 5e-2 and ef < 4 * em, (ef, em)


def test_backend_choice():
    q, k, v = (t.to(DEV) for t in _qkv(1, 2, 8, 8, 4, 4))
    assert torch._fused_sdp_choice(q, k, v) == FUSED
    assert torch._fused_sdp_choice(q, k, v, None, 0.1) == MATH                      # dropout
    assert torch._fused_sdp_choice(q[0], k[0], v[0]) == MATH                        # 3-D
    m = torch.ones(8, 8, dtype=torch.bool, device=DEV)
    assert torch._fused_sdp_choice(q, k, v, m, 0.0, True) == MATH                   # mask + causal
    assert torch._fused_sdp_choice(q, k[:, :1].expand(1, 2, 8, 4).contiguous()[:, :1], v) == MATH
    assert torch._fused_sdp_choice(q, k.double(), v) == MATH                        # dtypes
    qg = q.clone().requires_grad_()
    assert torch._fused_sdp_choice(qg, k, v) == FUSED        # training
    assert torch._fused_sdp_choice(qg, k, v, None, 0.0, True) == FUSED
    assert torch._fused_sdp_choice(qg, k, v, m.float()) == FUSED  # a mask needing no gradient
    assert torch._fused_sdp_choice(qg, k, v, m.float().requires_grad_()) == MATH
    with sdpa_kernel([SDPBackend.MATH]):
        assert torch._fused_sdp_choice(q, k, v) == MATH
    # the math path still raises CPU's error for a mask with is_causal
    with pytest.raises(RuntimeError):
        F.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=True)


def test_bad_calls_raise_and_recover():
    q, k, v = (t.to(DEV) for t in _qkv(1, 2, 8, 8, 4, 4))
    with pytest.raises(RuntimeError, match="key"):
        ops._scaled_dot_product_fused_attention_overrideable(q, k[..., :3], v)
    with pytest.raises(RuntimeError, match="attn_mask"):
        ops._scaled_dot_product_fused_attention_overrideable(
            q, k, v, torch.zeros(3, 8, device=DEV))
    with pytest.raises(NotImplementedError):
        ops._scaled_dot_product_fused_attention_overrideable(q, k, v, dropout_p=0.5)
    out = F.scaled_dot_product_attention(q, k, v)  # the device carries on
    ref, _ = _ref(*(t.cpu() for t in (q, k, v)))
    torch.testing.assert_close(out.cpu().double(), ref, atol=2e-5, rtol=2e-5)


def test_multihead_attention_module():
    """nn.MultiheadAttention (need_weights=False) runs through the fused
    kernel without autograd, as a CUDA device's flash attention would (train
    mode: eval mode's fast path is aten::_native_multi_head_attention)."""
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(32, 4, batch_first=True)
    x = torch.randn(2, 19, 32)
    with torch.no_grad():
        ref = mha(x, x, x, need_weights=False)[0]
        mdev = mha.to(DEV)
        out, rep = _profiled(lambda: mdev(*(x.to(DEV),) * 3, need_weights=False)[0])
    assert " attention float32" in rep, rep
    torch.testing.assert_close(out.cpu(), ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("compiled", [False, True])
def test_results_in_the_inputs_layout(compiled):
    """The output has the query's dim order and each gradient its input's
    layout, as torch's meta functions (and CPU's / CUDA's kernels) give
    them: a model's `out.transpose(1, 2).view(B, T, C)` works, eager and
    under torch.compile (which also saves the kernel's RNG outputs for the
    backward, checking that they are tensors: device ones, so the forward
    and backward are each captured as one program)."""
    B, T, H, E = 2, 24, 4, 8
    C = H * E
    x = torch.randn(B, T, 3 * C)

    def f(x, causal):
        q, k, v = (t.view(B, T, H, E).transpose(1, 2) for t in x.split(C, dim=-1))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        return o.transpose(1, 2).view(B, T, C).square().sum()

    c0 = torch.tpu._get_cache_stats()["compile"]
    for causal in (False, True):
        xc = x.clone().requires_grad_()
        f(xc, causal).backward()
        xd = x.to(DEV).requires_grad_()
        run = torch.compile(f, backend="tpu") if compiled else f
        loss, rep = _profiled(lambda: run(xd, causal))
        loss.backward()
        if not compiled:
            assert " attention float32" in rep, rep
        torch.testing.assert_close(xd.grad.cpu(), xc.grad, atol=1e-4, rtol=1e-4)
    if compiled:
        c1 = torch.tpu._get_cache_stats()["compile"]
        assert c1.get("captures", 0) - c0.get("captures", 0) >= 4, c1
        assert c1.get("broken_captures", 0) == c0.get("broken_captures", 0), c1

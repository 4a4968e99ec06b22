"""torch.tpu.ops (TorchTPU's custom ops) against PyTorch CPU references."""
import math

import pytest
import torch
import torch.nn.functional as F

import torch_tpu  # noqa: F401
import torch_tpu.sync
from torch_tpu.execution_mode import EagerMode, eager_mode

from conftest import assert_close

ops = torch.tpu.ops
DEV = torch.device("tpu")


def _ragged_ref(lhs, rhs, sizes):
    m, n = lhs.shape[0], rhs.shape[2]
    out, s = [], 0
    for i, sz in enumerate(sizes):
        out.append(lhs[s:s + sz] @ rhs[i])
        s += sz
    out.append(lhs.new_zeros(m - s, n))
    return torch.cat(out)


@pytest.mark.parametrize("sizes", [[3, 0, 6, 7], [16, 0, 0, 0], [1, 2, 3, 4], [0, 0, 0, 0], [5, 5, 5, 1]])
def test_ragged_dot_forward_backward(sizes):
    torch.manual_seed(0)
    fb0 = torch.tpu.fallback_counts()
    m = 16
    lhs, rhs = torch.randn(m, 12), torch.randn(4, 12, 10)
    gs = torch.tensor(sizes, dtype=torch.int32)
    lc, rc = lhs.clone().requires_grad_(), rhs.clone().requires_grad_()
    ref = _ragged_ref(lc, rc, sizes)
    g = torch.randn_like(ref)
    ref.backward(g)
    lt, rt = lhs.to(DEV).requires_grad_(), rhs.to(DEV).requires_grad_()
    out = ops.ragged_dot(lt, rt, gs.to(DEV))
    out.backward(g.to(DEV))
    assert_close(out.detach(), ref.detach(), atol=1e-5, rtol=1e-5)
    assert_close(lt.grad, lc.grad, atol=1e-5, rtol=1e-5)
    assert_close(rt.grad, rc.grad, atol=1e-5, rtol=1e-5)
    wg = ops.ragged_dot_weight_grad(lhs.to(DEV), g.to(DEV), gs)
    assert_close(wg, rc.grad, atol=1e-5, rtol=1e-5)
    assert torch.tpu.fallback_counts() == fb0  # nothing ran on the CPU fallback


def test_ragged_dot_out_and_bf16_and_errors():
    torch.manual_seed(1)
    lhs, rhs = torch.randn(8, 4), torch.randn(2, 4, 3)
    out = torch.empty(8, 3, device=DEV)
    r = ops.ragged_dot(lhs.to(DEV), rhs.to(DEV), torch.tensor([5, 3]), out=out)
    assert r is out
    assert_close(out, _ragged_ref(lhs, rhs, [5, 3]), atol=1e-5, rtol=1e-5)
    lb, rb = lhs.bfloat16(), rhs.bfloat16()
    assert_close(ops.ragged_dot(lb.to(DEV), rb.to(DEV), torch.tensor([2, 6])),
                 _ragged_ref(lb.float(), rb.float(), [2, 6]).bfloat16(), atol=2e-2, rtol=2e-2)
    with pytest.raises(RuntimeError, match="sum to 9"):
        ops.ragged_dot(lhs.to(DEV), rhs.to(DEV), torch.tensor([5, 4]))
    with pytest.raises(RuntimeError, match="non-negative"):
        ops.ragged_dot(lhs.to(DEV), rhs.to(DEV), torch.tensor([-1, 4]))
    with pytest.raises(RuntimeError, match="shape"):
        ops.ragged_dot(lhs.to(DEV), rhs.to(DEV), torch.tensor([8]))
    with pytest.raises(RuntimeError, match="k="):
        ops.ragged_dot(lhs.to(DEV), torch.randn(2, 5, 3, device=DEV), torch.tensor([5, 3]))


class _MoE(torch.nn.Module):
    """Mixtral-style sparse MoE FFN: top-2 router, SwiGLU experts run as three
    ragged_dot calls over the tokens sorted by expert."""

    def __init__(self, d, hidden, n_experts, top_k=2):
        super().__init__()
        self.top_k, self.n = top_k, n_experts
        self.gate = torch.nn.Linear(d, n_experts, bias=False)
        self.w1 = torch.nn.Parameter(torch.randn(n_experts, d, hidden) / math.sqrt(d))
        self.w3 = torch.nn.Parameter(torch.randn(n_experts, d, hidden) / math.sqrt(d))
        self.w2 = torch.nn.Parameter(torch.randn(n_experts, hidden, d) / math.sqrt(hidden))

    def forward(self, x, grouped_mm):
        b, s, d = x.shape
        x = x.reshape(-1, d)
        probs = F.softmax(self.gate(x), dim=-1)
        w, idx = torch.topk(probs, self.top_k, dim=-1)
        w = w / w.sum(-1, keepdim=True)
        flat = idx.reshape(-1)
        order = torch.argsort(flat, stable=True)
        tok = order // self.top_k
        sizes = torch.bincount(flat, minlength=self.n)
        xs = x[tok]
        h = F.silu(grouped_mm(xs, self.w1, sizes)) * grouped_mm(xs, self.w3, sizes)
        y = grouped_mm(h, self.w2, sizes) * w.reshape(-1)[order].unsqueeze(1)
        out = torch.zeros_like(x).index_add(0, tok, y)
        return out.reshape(b, s, d)


def _cpu_grouped(x, w, sizes):
    return _ragged_ref(x, w, sizes.tolist())


def test_mixtral_moe_layer_trains():
    torch.manual_seed(0)
    d, hidden, n_exp = 16, 32, 4
    ref = _MoE(d, hidden, n_exp)
    dev = _MoE(d, hidden, n_exp)
    dev.load_state_dict(ref.state_dict())
    dev.to(DEV)
    x = torch.randn(2, 8, d)
    target = torch.randn(2, 8, d)
    opt_r = torch.optim.SGD(ref.parameters(), lr=0.5)
    opt_d = torch.optim.SGD(dev.parameters(), lr=0.5)
    xd, td = x.to(DEV), target.to(DEV)
    losses = []
    for _ in range(8):
        lr_ = F.mse_loss(ref(x, _cpu_grouped), target)
        opt_r.zero_grad()
        lr_.backward()
        opt_r.step()
        ld = F.mse_loss(dev(xd, ops.ragged_dot), td)
        opt_d.zero_grad()
        ld.backward()
        opt_d.step()
        losses.append(ld.item())
        assert abs(ld.item() - lr_.item()) < 1e-4 * max(1.0, lr_.item())
    assert losses[-1] < 0.9 * losses[0], losses
    for (n, p), q in zip(dev.named_parameters(), ref.parameters()):
        assert_close(p.detach(), q.detach(), atol=1e-4, rtol=1e-4, msg=n)


def _sdpa_ref(q, k, v, scale, causal, window):
    h, hk, s = q.shape[1], k.shape[1], q.shape[2]
    k = k.repeat_interleave(h // hk, 1)
    v = v.repeat_interleave(h // hk, 1)
    att = (q @ k.transpose(-1, -2)) * (scale if scale is not None else 1 / math.sqrt(q.shape[-1]))
    i = torch.arange(s)
    dist = i[:, None] - i[None, :]
    if window is not None:
        att = att.masked_fill(~((dist >= 0) & (dist <= window)), float("-inf"))
    elif causal:
        att = att.masked_fill(dist < 0, float("-inf"))
    return att.softmax(-1) @ v


@pytest.mark.parametrize("heads,kv_heads,causal,window,scale", [
    (4, 4, True, None, None), (4, 4, False, None, 0.3), (4, 2, True, None, None),
    (4, 1, True, None, None), (4, 2, True, 3, None), (2, 2, False, 0, 0.5)])
def test_splash_sdpa(heads, kv_heads, causal, window, scale):
    torch.manual_seed(0)
    q = torch.randn(2, heads, 16, 8)
    k = torch.randn(2, kv_heads, 16, 8)
    v = torch.randn(2, kv_heads, 16, 8)
    qc, kc, vc = (t.clone().requires_grad_() for t in (q, k, v))
    ref = _sdpa_ref(qc, kc, vc, scale, causal, window)
    g = torch.randn_like(ref)
    ref.backward(g)
    qt, kt, vt = (t.to(DEV).requires_grad_() for t in (q, k, v))
    out = ops.splash_sdpa(qt, kt, vt, scale=scale, is_causal=causal, local_window_size=window,
                          enable_gqa=heads != kv_heads)
    out.backward(g.to(DEV))
    assert_close(out.detach(), ref.detach(), atol=1e-5, rtol=1e-5)
    for a, b in ((qt, qc), (kt, kc), (vt, vc)):
        assert_close(a.grad, b.grad, atol=1e-5, rtol=1e-5)


def test_splash_sdpa_argument_errors():
    q = torch.randn(1, 4, 8, 8, device=DEV)
    k = torch.randn(1, 2, 8, 8, device=DEV)
    with pytest.raises(ValueError, match="enable_gqa"):
        ops.splash_sdpa(q, k, k)
    with pytest.raises(ValueError, match="enable_gqa"):
        ops.splash_sdpa(q, q, q, enable_gqa=True)
    with pytest.raises(ValueError, match="q_layout"):
        ops.splash_sdpa(q, q, q, q_layout="ROW")


@pytest.mark.parametrize("nd,shape,k,s,p,d,ceil", [
    (1, (2, 3, 11), [3], [2], [1], [1], False),
    (1, (3, 10), [2], [1], [0], [2], True),
    (2, (2, 3, 9, 8), [3, 2], [2, 1], [1, 0], [1, 1], True),
    (2, (3, 7, 7), [2, 2], [2, 2], [0, 0], [2, 1], False),
    (3, (1, 2, 5, 6, 7), [2, 3, 2], [1, 2, 2], [1, 1, 0], [1, 1, 1], False),
    (3, (2, 4, 5, 6), [2, 2, 2], [2, 2, 2], [0, 0, 0], [1, 1, 1], True)])
def test_max_pool_and_backward(nd, shape, k, s, p, d, ceil):
    torch.manual_seed(0)
    x = torch.randn(shape)
    fn = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[nd]
    xc = x.clone().requires_grad_()
    ref = fn(xc, k, s, p, d, ceil_mode=ceil)
    g = torch.randn_like(ref)
    ref.backward(g)
    fwd = getattr(ops, f"max_pool{nd}d")
    bwd = getattr(ops, f"max_pool{nd}d_backward")
    out = fwd(x.to(DEV), k, s, p, d, ceil)
    assert_close(out, ref.detach())
    assert_close(bwd(g.to(DEV), x.to(DEV), k, s, p, d, ceil), xc.grad)
    with pytest.raises(RuntimeError, match="sequence of"):
        fwd(x.to(DEV), k[0], s, p, d, ceil)


def test_optimization_barrier_splits_fused_programs():
    a = torch.randn(8, device=DEV)
    b = torch.randn(8, device=DEV)
    with eager_mode(EagerMode.DEFER_AND_FUSE):
        x = a * 2 + 1
        y = b.exp()
        assert torch_tpu.sync.pending_ops() > 0
        x2, y2 = ops.optimization_barrier([x, y])
        assert torch_tpu.sync.pending_ops() == 0  # everything before ran as its own program
        assert x2 is x and y2 is y
        z = (x2 * y2).sum()
        assert_close(z, ((a.cpu() * 2 + 1) * b.cpu().exp()).sum())
    assert ops.optimization_barrier([]) == []
    with pytest.raises(TypeError):
        ops.optimization_barrier(a)


def test_jagged_align_and_strip():
    torch.manual_seed(0)
    parts = [torch.randn(3, 4), torch.randn(6, 4), torch.randn(2, 4)]
    nt = torch.nested.nested_tensor([p.to(DEV) for p in parts], layout=torch.jagged)
    al = ops.align_jagged_to_multiple(nt, 8, padding_value=-1.0)
    assert al.values().shape == (16, 4)
    assert_close(al.values()[11:], torch.full((5, 4), -1.0))
    assert_close(al.offsets(), torch.tensor([0, 3, 9, 11]))
    assert_close(al.values()[:11], torch.cat(parts))
    assert ops.align_jagged_to_multiple(al, 8) is al
    st = ops.strip_jagged_padding(al)
    assert st.values().shape == (11, 4)
    assert_close(st.values(), torch.cat(parts))
    for got, want in zip(st.unbind(), parts):
        assert_close(got, want)
    st2 = ops.strip_jagged_padding(al, valid_tokens=11)
    assert st2.values().shape == (11, 4)
    with pytest.raises(TypeError):
        ops.strip_jagged_padding(torch.randn(3, device=DEV))


# ---- SparseCore family -------------------------------------------------------------------

PAD = 2**31 - 1  # SparseCore preprocessing's padding id


def _csr_batch():
    torch.manual_seed(0)
    table = torch.randn(10, 4)
    ids = torch.tensor([1, 3, 3, 7, PAD, 0, 9, PAD], dtype=torch.int32)
    sids = torch.tensor([0, 0, 1, 2, PAD, 3, 3, PAD], dtype=torch.int32)
    gains = torch.tensor([1.0, 0.5, 2.0, 1.0, 0.0, -1.0, 3.0, 0.0])
    rp = torch.tensor([4, 8], dtype=torch.int32)
    return rp, ids, sids, gains, table


def _ref_activations(ids, sids, gains, table, batch):
    out = torch.zeros(batch, table.shape[1])
    for i, s, g in zip(ids.tolist(), sids.tolist(), gains.tolist()):
        if i != PAD:
            out[s] += g * table[i]
    return out


def test_sparse_dense_matmul_and_grads():
    rp, ids, sids, gains, table = _csr_batch()
    B = 4
    ref = _ref_activations(ids, sids, gains, table, B)
    d = [t.to(DEV) for t in (rp, ids, sids, gains, table)]
    out = ops.sparse_dense_matmul(*d, B, 8, 8)
    assert_close(out, ref, atol=1e-6, rtol=1e-6)
    # gradient of sum(act * G) w.r.t. the table, by autograd on the CPU reference
    G = torch.randn(B, 4)
    tc = table.clone().requires_grad_()
    (_ref_activations(ids, sids, gains, tc, B) * G).sum().backward()
    grad = tc.grad
    touched = torch.zeros(10, dtype=torch.bool)
    touched[[1, 3, 7, 0, 9]] = True
    sgd = ops.sparse_dense_matmul_grad_with_sgd(*d, G.to(DEV), torch.tensor(0.1), B, 8, 8, "sgd")
    assert_close(sgd, table - 0.1 * grad, atol=1e-6, rtol=1e-6)
    acc = torch.full((10, 4), 0.1)
    t2, a2 = ops.sparse_dense_matmul_grad_with_adagrad(*d, acc.to(DEV), G.to(DEV), torch.tensor(0.5),
                                                       1e-8, B, 8, 8, "adagrad")
    acc_ref = acc + grad * grad
    assert_close(a2, acc_ref, atol=1e-6, rtol=1e-6)
    assert_close(t2, table - 0.5 * grad / (acc_ref.sqrt() + 1e-8), atol=1e-5, rtol=1e-5)
    racc = torch.full((10,), 0.1)
    t3, a3 = ops.sparse_dense_matmul_grad_with_adagrad(*d, racc.to(DEV), G.to(DEV), 0.5, 1e-8, B,
                                                       8, 8, "adagrad_rowwise")
    racc_ref = racc + torch.where(touched, (grad * grad).mean(1), torch.zeros(10))
    assert_close(a3, racc_ref, atol=1e-6, rtol=1e-6)
    m0, v0 = torch.full((10, 4), 0.2), torch.full((10, 4), 0.3)
    t4, m4, v4 = ops.sparse_dense_matmul_grad_with_adam(*d, m0.to(DEV), v0.to(DEV), G.to(DEV),
                                                        torch.tensor(0.01), 0.9, 0.99, 1e-8, B, 8,
                                                        8, "adam")
    tt = touched.unsqueeze(1)
    m_ref = torch.where(tt, 0.9 * m0 + 0.1 * grad, m0)
    v_ref = torch.where(tt, 0.99 * v0 + 0.01 * grad * grad, v0)
    assert_close(m4, m_ref, atol=1e-6, rtol=1e-6)
    assert_close(v4, v_ref, atol=1e-6, rtol=1e-6)
    assert_close(t4, table - torch.where(tt, 0.01 * m_ref / (v_ref.sqrt() + 1e-8), 0.0),
                 atol=1e-6, rtol=1e-6)
    assert torch.equal(m4.cpu()[2], m0[2])  # untouched row: lazy Adam leaves it alone
    with pytest.raises(ValueError, match="same length"):
        ops.sparse_dense_matmul(d[0], d[1], d[2][:3], d[3], d[4], B, 8, 8)


def test_sparse_unstack_stack_gather_iota():
    torch.manual_seed(0)
    stacked = torch.randn(7, 5)
    st = stacked.to(DEV).requires_grad_()
    parts = ops.sparse_dense_matmul_activation_unstack(st, [3, 4], [5, 2])
    assert_close(parts[0].detach(), stacked[:3, :5])
    assert_close(parts[1].detach(), stacked[3:7, :2])
    g0, g1 = torch.randn(3, 5), torch.randn(4, 2)
    (parts[0] * g0.to(DEV)).sum().add((parts[1] * g1.to(DEV)).sum()).backward()
    stacked_grad = ops.sparse_dense_matmul_gradient_stack([g0.to(DEV), g1.to(DEV)], 7, 5)
    ref = torch.zeros(7, 5)
    ref[:3, :5] = g0
    ref[3:7, :2] = g1
    assert_close(stacked_grad, ref)
    assert_close(st.grad, ref)  # the stack is unstack's backward
    operand = torch.randn(6, 3)
    idx = torch.tensor([5, 0, 0, 2, 3, 3])
    op_d = operand.to(DEV).requires_grad_()
    out = ops.sparse_gather(torch.tensor([0, 2, 4]), idx.to(DEV), op_d, 2)
    assert_close(out.detach(), operand[idx])
    go = torch.randn(6, 3)
    out.backward(go.to(DEV))
    ref_g = torch.zeros(6, 3).index_add(0, idx, go)
    assert_close(op_d.grad, ref_g)
    assert_close(ops.sparse_gather_backward(go.to(DEV), idx.to(DEV), torch.ones(6, 3, device=DEV)),
                 ref_g + 1)
    with pytest.raises(ValueError, match="len"):
        ops.sparse_gather(torch.tensor([0, 2]), idx.to(DEV), op_d, 2)
    rp = torch.tensor([0, 2, 2, 5], dtype=torch.int32)
    it = ops.sparse_iota(rp.to(DEV), 8, 4)
    assert it.dtype is torch.int32
    assert it.cpu().tolist() == [0, 1, 0, 1, 2, 0, 0, 0]
    with pytest.raises(NotImplementedError, match="SparseCore"):
        ops.sparse_map_row([], [], [], "module {}", [], 1, 0, 0, 0.5, 0)

"""Ragged (grouped) matmul for Mixture-of-Experts: rows of ``lhs`` are cut
into consecutive groups and group ``i`` is multiplied by ``rhs[i]``. Each
group is one tpu matmul (the MXU path, at the current ``torch.tpu.precision``);
empty groups cost nothing."""
import torch


def _sizes(group_sizes, g, m, fn):
    if not isinstance(group_sizes, torch.Tensor):
        group_sizes = torch.as_tensor(group_sizes)
    if group_sizes.dim() != 1 or group_sizes.numel() != g:
        raise RuntimeError(f"{fn}: group_sizes must have shape ({g},), got {tuple(group_sizes.shape)}")
    if group_sizes.dtype.is_floating_point or group_sizes.dtype.is_complex:
        raise RuntimeError(f"{fn}: group_sizes must be an integer tensor, got {group_sizes.dtype}")
    sizes = [int(v) for v in group_sizes.tolist()]  # host-side group bounds (one read)
    if any(v < 0 for v in sizes):
        raise RuntimeError(f"{fn}: group_sizes must be non-negative, got {sizes}")
    if sum(sizes) > m:
        raise RuntimeError(f"{fn}: group_sizes sum to {sum(sizes)} but lhs has {m} rows")
    return sizes


def _check(lhs, rhs):
    if lhs.dim() != 2 or rhs.dim() != 3:
        raise RuntimeError(f"ragged_dot: expected lhs (m, k) and rhs (g, k, n), got "
                           f"{tuple(lhs.shape)} and {tuple(rhs.shape)}")
    if lhs.shape[1] != rhs.shape[1]:
        raise RuntimeError(f"ragged_dot: lhs has k={lhs.shape[1]} but rhs has k={rhs.shape[1]}")
    if lhs.device != rhs.device:
        raise RuntimeError(f"ragged_dot: lhs is on {lhs.device} but rhs is on {rhs.device}")
    if lhs.dtype != rhs.dtype:
        raise RuntimeError(f"ragged_dot: lhs is {lhs.dtype} but rhs is {rhs.dtype}")


def _fwd(lhs, rhs, sizes):
    m, n = lhs.shape[0], rhs.shape[2]
    parts, start = [], 0
    for i, sz in enumerate(sizes):
        if sz:
            parts.append(torch.mm(lhs.narrow(0, start, sz), rhs[i]))
        start += sz
    if start < m or not parts:  # rows past the last group are zero (as in jax.lax.ragged_dot)
        parts.append(lhs.new_zeros((m - start, n)))
    return parts[0] if len(parts) == 1 else torch.cat(parts, 0)


def _wgrad(lhs, grad, sizes):
    k, n = lhs.shape[1], grad.shape[1]
    outs, start = [], 0
    for sz in sizes:
        if sz:
            outs.append(torch.mm(lhs.narrow(0, start, sz).t(), grad.narrow(0, start, sz)))
        else:
            outs.append(lhs.new_zeros((k, n)))
        start += sz
    return torch.stack(outs, 0)


class _RaggedDot(torch.autograd.Function):
    @staticmethod
    def forward(ctx, lhs, rhs, sizes):
        ctx.save_for_backward(lhs, rhs)
        ctx.sizes = sizes
        return _fwd(lhs, rhs, sizes)

    @staticmethod
    def backward(ctx, grad):
        lhs, rhs = ctx.saved_tensors
        gl = gr = None
        if ctx.needs_input_grad[0]:
            gl = _fwd(grad, rhs.transpose(1, 2), ctx.sizes)
        if ctx.needs_input_grad[1]:
            gr = _wgrad(lhs, grad, ctx.sizes)
        return gl, gr, None


def ragged_dot(lhs, rhs, group_sizes, *, out=None):
    """``result[s_i:e_i] = lhs[s_i:e_i] @ rhs[i]`` with ``s_i = sum(group_sizes[:i])``,
    ``e_i = s_i + group_sizes[i]``; ``lhs`` (m, k), ``rhs`` (g, k, n),
    ``group_sizes`` (g,) integers summing to at most m (rows past the last
    group are zero). Differentiable w.r.t. ``lhs`` and ``rhs`` when ``out`` is
    not given. ``group_sizes`` on the host avoids one device read."""
    _check(lhs, rhs)
    sizes = _sizes(group_sizes, rhs.shape[0], lhs.shape[0], "ragged_dot")
    if out is not None:
        with torch.no_grad():
            res = _fwd(lhs, rhs, sizes)
            if out.shape != res.shape:
                out.resize_(res.shape)
            return out.copy_(res)
    return _RaggedDot.apply(lhs, rhs, sizes)


def ragged_dot_weight_grad(lhs, grad_output, group_sizes):
    """Gradient of ``ragged_dot`` w.r.t. ``rhs``:
    ``result[i] = lhs[s_i:e_i].T @ grad_output[s_i:e_i]``, shape (g, k, n);
    zero for an empty group."""
    if lhs.dim() != 2 or grad_output.dim() != 2 or lhs.shape[0] != grad_output.shape[0]:
        raise RuntimeError(f"ragged_dot_weight_grad: expected lhs (m, k) and grad_output (m, n), "
                           f"got {tuple(lhs.shape)} and {tuple(grad_output.shape)}")
    if not isinstance(group_sizes, torch.Tensor):
        group_sizes = torch.as_tensor(group_sizes)
    sizes = _sizes(group_sizes, group_sizes.numel(), lhs.shape[0], "ragged_dot_weight_grad")
    return _wgrad(lhs, grad_output, sizes)

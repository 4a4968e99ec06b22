"""Max pooling without index outputs (TorchTPU's ``max_pool{1,2,3}d`` and
their ``_backward``). Arguments mean what they mean in
``torch.nn.functional.max_pool{1,2,3}d``, but every sequence has one element
per spatial dimension and nothing has a default. The gradient recomputes the
argmax positions from ``input``, so callers never hold an index tensor."""
import torch


def _check(nd, input, kernel_size, stride, padding, dilation):
    if not isinstance(input, torch.Tensor):
        raise TypeError(f"max_pool{nd}d: input must be a Tensor, got {type(input).__name__}")
    if input.dim() not in (nd + 1, nd + 2):
        raise RuntimeError(f"max_pool{nd}d: expected a {nd + 1}D or {nd + 2}D input, "
                           f"got {input.dim()}D")
    for name, v in (("kernel_size", kernel_size), ("stride", stride), ("padding", padding),
                    ("dilation", dilation)):
        if isinstance(v, int) or len(v) != nd:
            raise RuntimeError(f"max_pool{nd}d: {name} must be a sequence of {nd} ints, got {v!r}")
    return [list(map(int, v)) for v in (kernel_size, stride, padding, dilation)]


def _as2d(nd, t):
    # 1d pooling is 2d pooling over a height-1 image (as ATen does it).
    return t.unsqueeze(-2) if nd == 1 else t


def _params2d(nd, k, s, p, d):
    if nd == 1:
        return [1, k[0]], [1, s[0]], [0, p[0]], [1, d[0]]
    return k, s, p, d


def _forward(nd, input, kernel_size, stride, padding, dilation, ceil_mode):
    k, s, p, d = _check(nd, input, kernel_size, stride, padding, dilation)
    k, s, p, d = _params2d(nd, k, s, p, d)
    fn = torch.ops.aten.max_pool3d_with_indices if nd == 3 else torch.ops.aten.max_pool2d_with_indices
    out, _ = fn(_as2d(nd, input.detach()), k, s, p, d, bool(ceil_mode))
    return out.squeeze(-2) if nd == 1 else out


def _backward(nd, grad_output, input, kernel_size, stride, padding, dilation, ceil_mode):
    k, s, p, d = _check(nd, input, kernel_size, stride, padding, dilation)
    k, s, p, d = _params2d(nd, k, s, p, d)
    x = _as2d(nd, input.detach())
    if nd == 3:
        _, idx = torch.ops.aten.max_pool3d_with_indices(x, k, s, p, d, bool(ceil_mode))
        return torch.ops.aten.max_pool3d_with_indices_backward(
            grad_output, x, k, s, p, d, bool(ceil_mode), idx)
    _, idx = torch.ops.aten.max_pool2d_with_indices(x, k, s, p, d, bool(ceil_mode))
    g = torch.ops.aten.max_pool2d_with_indices_backward(
        _as2d(nd, grad_output), x, k, s, p, d, bool(ceil_mode), idx)
    return g.squeeze(-2) if nd == 1 else g


def max_pool1d(input, kernel_size, stride, padding, dilation, ceil_mode):
    """1D max pooling of ``(N, C, L)`` or ``(C, L)``; not differentiable (use
    ``max_pool1d_backward``)."""
    return _forward(1, input, kernel_size, stride, padding, dilation, ceil_mode)


def max_pool1d_backward(grad_output, input, kernel_size, stride, padding, dilation, ceil_mode):
    """Gradient of ``max_pool1d`` w.r.t. ``input`` (same shape as ``input``)."""
    return _backward(1, grad_output, input, kernel_size, stride, padding, dilation, ceil_mode)


def max_pool2d(input, kernel_size, stride, padding, dilation, ceil_mode):
    """2D max pooling of ``(N, C, H, W)`` or ``(C, H, W)``; not differentiable
    (use ``max_pool2d_backward``)."""
    return _forward(2, input, kernel_size, stride, padding, dilation, ceil_mode)


def max_pool2d_backward(grad_output, input, kernel_size, stride, padding, dilation, ceil_mode):
    """Gradient of ``max_pool2d`` w.r.t. ``input`` (same shape as ``input``)."""
    return _backward(2, grad_output, input, kernel_size, stride, padding, dilation, ceil_mode)


def max_pool3d(input, kernel_size, stride, padding, dilation, ceil_mode):
    """3D max pooling of ``(N, C, D, H, W)`` or ``(C, D, H, W)``; not
    differentiable (use ``max_pool3d_backward``)."""
    return _forward(3, input, kernel_size, stride, padding, dilation, ceil_mode)


def max_pool3d_backward(grad_output, input, kernel_size, stride, padding, dilation, ceil_mode):
    """Gradient of ``max_pool3d`` w.r.t. ``input`` (same shape as ``input``)."""
    return _backward(3, grad_output, input, kernel_size, stride, padding, dilation, ceil_mode)

"""TorchTPU's collective ops (``torch.tpu.ops.all_gather_dim``,
``reduce_scatter_dim``, ``send``, ``recv``, ``ragged_all_to_all``) over the
``tpu_dist`` backend. They run through PyTorch's functional collectives and
process-group calls, so the bytes move in the C collectives layer."""
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as fc

__all__ = ["all_gather_dim", "reduce_scatter_dim", "send", "recv", "ragged_all_to_all"]


def _group(group):
    if group is None:
        group = dist.group.WORLD
    if group is None:
        raise ValueError(
            "Default process group has not been initialized, please make sure to call init_process_group."
        )
    return group


def _wait(t):
    return t.wait() if isinstance(t, fc.AsyncCollectiveTensor) else t


def all_gather_dim(input, dim, group=None):  # noqa: A002 (TorchTPU's name)
    """All-gather `input` from every rank and concatenate along `dim`.
    No autograd (as in TorchTPU)."""
    if input.dim() == 0:
        raise ValueError("all_gather_dim: input must have at least one dimension")
    dim = dim % input.dim()
    return _wait(fc.all_gather_tensor(input.detach(), dim, _group(group)))


def reduce_scatter_dim(input, dim, group=None, reduce_op="sum"):  # noqa: A002
    """Reduce `input` across ranks and return this rank's chunk along `dim`
    (`input.size(dim)` must divide by the group size). reduce_op: "sum",
    "avg", "product", "min", "max"."""
    g = _group(group)
    dim = dim % input.dim()
    n = g.size()
    if input.size(dim) % n:
        raise ValueError(
            f"reduce_scatter_dim: input.size({dim}) = {input.size(dim)} is not divisible by the group size {n}"
        )
    op = {"product": "product", "prod": "product"}.get(reduce_op, reduce_op)
    return _wait(fc.reduce_scatter_tensor(input.detach(), op, dim, g))


def send(tensors, dst, tag):
    """Send `tensors` (a sequence, sent in order) to rank `dst` of the
    default process group; returns one Work covering all of them. Sends and
    receives between a pair of ranks match in the order they are issued;
    `tag` travels with each message and a receive whose tag differs raises a
    clear error (the transport does not reorder by tag)."""
    pg = dist.distributed_c10d._get_default_group()
    return pg.send(_tensor_list(tensors, "send"), int(dst), int(tag))


def recv(tensors, src, tag):
    """Receive into `tensors` (shapes and dtypes as sent) from rank `src` of
    the default process group; returns one Work (wait on it before reading
    `tensors`). See `send` for matching."""
    pg = dist.distributed_c10d._get_default_group()
    return pg.recv(_tensor_list(tensors, "recv"), int(src), int(tag))


def _tensor_list(tensors, what):
    ts = [tensors] if isinstance(tensors, torch.Tensor) else list(tensors)
    if not ts:
        raise ValueError(f"{what}: needs at least one tensor")
    return ts


def _ragged_plan(operand, output, input_offsets, send_sizes, output_offsets, recv_sizes, g):
    n = g.size()
    ins = [int(v) for v in input_offsets.cpu().tolist()]
    ss = [int(v) for v in send_sizes.cpu().tolist()]
    rs = [int(v) for v in recv_sizes.cpu().tolist()]
    oo = [int(v) for v in output_offsets.cpu().tolist()]
    if not (len(ins) == len(ss) == len(rs) == len(oo) == n):
        raise ValueError(f"ragged_all_to_all: offsets and sizes need {n} entries (the group size)")
    if operand.dim() == 0 or output.dim() == 0 or operand.shape[1:] != output.shape[1:]:
        raise ValueError(
            f"ragged_all_to_all: operand {tuple(operand.shape)} and output {tuple(output.shape)} "
            "need the same shape after dim 0"
        )
    if operand.dtype != output.dtype:
        raise TypeError(f"ragged_all_to_all: operand is {operand.dtype} but output is {output.dtype}")
    for j in range(n):
        if ss[j] < 0 or rs[j] < 0 or ins[j] < 0 or ins[j] + ss[j] > operand.shape[0]:
            raise ValueError(
                f"ragged_all_to_all: slice for rank {j} (offset {ins[j]}, size {ss[j]}) is outside "
                f"operand's {operand.shape[0]} rows"
            )
    # where each sender's rows land in my result: exchange the senders' offsets
    offs = torch.tensor(oo, dtype=torch.int64, device=operand.device)
    recv_offs = torch.empty_like(offs)
    dist.all_to_all_single(recv_offs, offs, group=g)
    ro = [int(v) for v in recv_offs.cpu().tolist()]
    for j in range(n):
        if rs[j] and (ro[j] < 0 or ro[j] + rs[j] > output.shape[0]):
            raise ValueError(
                f"ragged_all_to_all: rank {j} writes {rs[j]} rows at row {ro[j]} of an output with "
                f"{output.shape[0]} rows"
            )
    return ins, ss, ro, rs


def _ragged_exchange(src, starts, sizes, recv_sizes, g):
    """Rows src[starts[j]: + sizes[j]] go to rank j; returns the rows
    received from each rank (recv_sizes[j] rows), in rank order."""
    n = len(sizes)
    send_buf = torch.cat([src[starts[j]: starts[j] + sizes[j]] for j in range(n)])
    recv_buf = torch.empty((sum(recv_sizes),) + tuple(src.shape[1:]), dtype=src.dtype, device=src.device)
    dist.all_to_all_single(recv_buf, send_buf.contiguous(), list(recv_sizes), list(sizes), group=g)
    return recv_buf


def _scatter_rows(res, recv_buf, ro, rs):
    pos = 0
    for j in range(len(rs)):
        if rs[j]:
            res[ro[j]: ro[j] + rs[j]] = recv_buf[pos: pos + rs[j]]
        pos += rs[j]
    return res


class _RaggedAllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx, operand, output, g, ins, ss, ro, rs):
        recv_buf = _ragged_exchange(operand.detach(), ins, ss, rs, g)
        res = _scatter_rows(output.detach().clone(), recv_buf, ro, rs)
        ctx.plan = (g, ins, ss, ro, rs, operand.shape)
        return res

    @staticmethod
    def backward(ctx, grad):
        g, ins, ss, ro, rs, shape = ctx.plan
        grad = grad.contiguous()
        grad_operand = grad_output = None
        if ctx.needs_input_grad[0]:
            # the reverse exchange: the rows I received from rank j go back
            back = _ragged_exchange(grad, ro, rs, ss, g)
            grad_operand = torch.zeros(shape, dtype=grad.dtype, device=grad.device)
            _scatter_rows(grad_operand, back, ins, ss)
        if ctx.needs_input_grad[1]:
            # rows overwritten by received slices do not reach the result
            grad_output = _scatter_rows(grad.clone(), torch.zeros_like(grad[: sum(rs)]), ro, rs)
        return grad_operand, grad_output, None, None, None, None, None


def ragged_all_to_all(operand, output, input_offsets, send_sizes, output_offsets, recv_sizes,
                      process_group_name, *, out=None):
    """Send rows operand[input_offsets[j] : + send_sizes[j]] to rank j, which
    writes them at row output_offsets[j] (as given by the sender) of its
    result; recv_sizes[j] rows come from rank j (it must equal rank j's
    send_sizes[me]). Rows not received keep `output`'s values. Returns the
    result (`out` if given). Differentiable with respect to `operand` (and
    `output`) when `out` is not given, as in TorchTPU. `process_group_name`
    is a ProcessGroup's ``group_name`` (or the group itself)."""
    from torch.distributed.distributed_c10d import _resolve_process_group

    g = process_group_name if isinstance(process_group_name, dist.ProcessGroup) else \
        _resolve_process_group(process_group_name)
    ins, ss, ro, rs = _ragged_plan(operand, output, input_offsets, send_sizes, output_offsets,
                                   recv_sizes, g)
    if out is None:
        return _RaggedAllToAll.apply(operand, output, g, ins, ss, ro, rs)
    if out.shape != output.shape or out.dtype != output.dtype:
        raise ValueError(
            f"ragged_all_to_all: out {tuple(out.shape)} {out.dtype} must match output "
            f"{tuple(output.shape)} {output.dtype}"
        )
    with torch.no_grad():
        recv_buf = _ragged_exchange(operand, ins, ss, rs, g)
        if out is not output:
            out.copy_(output)
        return _scatter_rows(out, recv_buf, ro, rs)

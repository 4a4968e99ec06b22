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
    """Send `tensors` to rank `dst` of the default group; returns a Work."""
    pg = dist.distributed_c10d._get_default_group()
    return pg.send(list(tensors), dst, tag)


def recv(tensors, src, tag):
    """Receive into `tensors` from rank `src` of the default group; returns a
    Work (wait on it before reading `tensors`)."""
    pg = dist.distributed_c10d._get_default_group()
    return pg.recv(list(tensors), src, tag)


def ragged_all_to_all(operand, output, input_offsets, send_sizes, output_offsets, recv_sizes,
                      process_group_name, *, out=None):
    """Send rows operand[input_offsets[j] : + send_sizes[j]] to rank j, which
    writes them at row output_offsets[j] (as given by the sender) of its
    result; rows not received keep `output`'s values. Returns the result
    (`out` if given)."""
    from torch.distributed.distributed_c10d import _resolve_process_group

    g = _resolve_process_group(process_group_name)
    n = g.size()
    ins = input_offsets.cpu().tolist()
    ss = send_sizes.cpu().tolist()
    rs = recv_sizes.cpu().tolist()
    if len(ss) != n or len(rs) != n or len(ins) != n:
        raise ValueError(f"ragged_all_to_all: offsets and sizes need {n} entries (the group size)")
    # where my rows land on each receiver: exchange the senders' offsets
    offs = torch.tensor(output_offsets.cpu().tolist(), dtype=torch.int64, device=operand.device)
    recv_offs = torch.empty_like(offs)
    dist.all_to_all_single(recv_offs, offs, group=g)
    send_buf = torch.cat([operand[ins[j]: ins[j] + ss[j]] for j in range(n)])
    recv_buf = torch.empty((sum(rs),) + tuple(operand.shape[1:]), dtype=operand.dtype, device=operand.device)
    dist.all_to_all_single(recv_buf, send_buf, rs, ss, group=g)
    res = output.clone() if out is None else out
    if out is not None and out is not output:
        res.copy_(output)
    ro = recv_offs.cpu().tolist()
    pos = 0
    for j in range(n):
        if rs[j]:
            res[ro[j]: ro[j] + rs[j]] = recv_buf[pos: pos + rs[j]]
        pos += rs[j]
    return res

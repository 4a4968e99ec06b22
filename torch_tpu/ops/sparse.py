"""TorchTPU's SparseCore ops (used by TorchRec), computed by tpu ops.

On a TPU these run on the SparseCore units over inputs that SparseCore
preprocessing has laid out in partitions; the vTPU computes the same
results with gathers and scatter-adds. Conventions (where TorchTPU's
docstrings leave them open):

- Embedding lookups take the preprocessed CSR triple (``embedding_ids``,
  ``sample_ids``, ``gains``): entry ``i`` adds ``gains[i] *
  table[embedding_ids[i]]`` to sample ``sample_ids[i]``. Padding entries
  carry out-of-range ids (SparseCore preprocessing writes INT_MAX) and are
  skipped. ``row_pointers`` (partition boundaries) and the ``max_*``
  capacity hints are validated, not needed for the result.
- The table-updating backward ops update only the rows the batch touches
  (lazy Adam/Adagrad, as SparseCore does) and return new tensors.
- ``sparse_map_row`` runs an MLIR body on SparseCore; there is no
  SparseCore compiler here, so it raises NotImplementedError.
"""
import torch


def _check_ints(**kw):
    for k, v in kw.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"{k} must be a non-negative int, got {v!r}")


def _csr(row_pointers, embedding_ids, sample_ids, gains, table, batch, fn):
    for name, t in (("row_pointers", row_pointers), ("embedding_ids", embedding_ids),
                    ("sample_ids", sample_ids), ("gains", gains)):
        if not isinstance(t, torch.Tensor) or t.dim() != 1:
            raise ValueError(f"{fn}: {name} must be a 1-D tensor")
    if embedding_ids.dtype.is_floating_point or sample_ids.dtype.is_floating_point:
        raise TypeError(f"{fn}: embedding_ids and sample_ids must be integer tensors")
    n = embedding_ids.numel()
    if sample_ids.numel() != n or gains.numel() != n:
        raise ValueError(f"{fn}: embedding_ids, sample_ids and gains must have the same length, "
                         f"got {n}, {sample_ids.numel()}, {gains.numel()}")
    if table.dim() != 2:
        raise ValueError(f"{fn}: embedding_table must be 2-D, got {tuple(table.shape)}")
    dev = table.device
    ids, sids, g = embedding_ids.to(dev).long(), sample_ids.to(dev).long(), gains.to(dev)
    valid = (ids >= 0) & (ids < table.shape[0]) & (sids >= 0) & (sids < batch)
    zero = torch.zeros_like(ids)
    return (torch.where(valid, ids, zero), torch.where(valid, sids, zero),
            torch.where(valid, g, torch.zeros_like(g)).to(table.dtype))


def sparse_dense_matmul(row_pointers, embedding_ids, sample_ids, gains, embedding_table,
                        device_batch_size, max_ids_per_partition, max_unique_ids_per_partition):
    """Embedding lookup + combine: ``out[s] = sum_i gains[i] *
    table[embedding_ids[i]]`` over the entries with ``sample_ids[i] == s``;
    shape ``(device_batch_size, table.shape[1])``."""
    _check_ints(device_batch_size=device_batch_size, max_ids_per_partition=max_ids_per_partition,
                max_unique_ids_per_partition=max_unique_ids_per_partition)
    ids, sids, g = _csr(row_pointers, embedding_ids, sample_ids, gains, embedding_table,
                        device_batch_size, "sparse_dense_matmul")
    rows = embedding_table.index_select(0, ids) * g.unsqueeze(1)
    out = embedding_table.new_zeros((device_batch_size, embedding_table.shape[1]))
    return out.index_add(0, sids, rows)


def _table_grad(row_pointers, embedding_ids, sample_ids, gains, table, activations_grad, fn):
    batch = activations_grad.shape[0]
    ids, sids, g = _csr(row_pointers, embedding_ids, sample_ids, gains, table, batch, fn)
    if activations_grad.dim() != 2 or activations_grad.shape[1] != table.shape[1]:
        raise ValueError(f"{fn}: activations_grad must be (batch, {table.shape[1]}), got "
                         f"{tuple(activations_grad.shape)}")
    contrib = activations_grad.to(table.dtype).index_select(0, sids) * g.unsqueeze(1)
    grad = torch.zeros_like(table).index_add(0, ids, contrib)
    touched = torch.zeros(table.shape[0], dtype=table.dtype, device=table.device).index_add(
        0, ids, (g != 0).to(table.dtype)) > 0
    return grad, touched


def sparse_dense_matmul_grad_with_sgd(row_pointers, embedding_ids, sample_ids, gains,
                                      embedding_table, activations_grad, learning_rate,
                                      device_batch_size, max_ids_per_partition,
                                      max_unique_ids_per_partition, computation_name):
    """Backward of ``sparse_dense_matmul`` fused with SGD: the updated table
    ``table - learning_rate * dL/dtable``."""
    _check_ints(device_batch_size=device_batch_size, max_ids_per_partition=max_ids_per_partition,
                max_unique_ids_per_partition=max_unique_ids_per_partition)
    grad, _ = _table_grad(row_pointers, embedding_ids, sample_ids, gains, embedding_table,
                          activations_grad, "sparse_dense_matmul_grad_with_sgd")
    return embedding_table - torch.as_tensor(learning_rate, device=embedding_table.device) * grad


def sparse_dense_matmul_grad_with_adagrad(row_pointers, embedding_ids, sample_ids, gains,
                                          embedding_table, accumulator, activations_grad,
                                          learning_rate, epsilon, device_batch_size,
                                          max_ids_per_partition, max_unique_ids_per_partition,
                                          computation_name):
    """Backward fused with Adagrad on the touched rows: ``acc += g*g``
    (row-wise 1-D accumulator: ``acc += mean(g*g)`` per row), ``table -= lr *
    g / (sqrt(acc) + epsilon)``. Returns (table, accumulator)."""
    _check_ints(device_batch_size=device_batch_size, max_ids_per_partition=max_ids_per_partition,
                max_unique_ids_per_partition=max_unique_ids_per_partition)
    grad, touched = _table_grad(row_pointers, embedding_ids, sample_ids, gains, embedding_table,
                                activations_grad, "sparse_dense_matmul_grad_with_adagrad")
    lr = torch.as_tensor(learning_rate, device=embedding_table.device)
    if accumulator.dim() == 1:
        acc = accumulator + torch.where(touched, (grad * grad).mean(1), 0.0)
        denom = acc.sqrt().unsqueeze(1) + epsilon
    elif accumulator.shape == embedding_table.shape:
        acc = accumulator + torch.where(touched.unsqueeze(1), grad * grad, 0.0)
        denom = acc.sqrt() + epsilon
    else:
        raise ValueError("accumulator must be row-wise (1-D) or shaped like embedding_table, got "
                         f"{tuple(accumulator.shape)}")
    upd = torch.where(touched.unsqueeze(1), lr * grad / denom, 0.0)
    return embedding_table - upd, acc


def sparse_dense_matmul_grad_with_adam(row_pointers, embedding_ids, sample_ids, gains,
                                       embedding_table, momentum, velocity, activations_grad,
                                       alpha_t, beta_1, beta_2, epsilon, device_batch_size,
                                       max_ids_per_partition, max_unique_ids_per_partition,
                                       computation_name):
    """Backward fused with (lazy) Adam on the touched rows: ``m = b1 m + (1-b1)
    g``, ``v = b2 v + (1-b2) g^2``, ``table -= alpha_t * m / (sqrt(v) +
    epsilon)`` (``alpha_t``: the bias-corrected learning rate). Returns
    (table, momentum, velocity)."""
    _check_ints(device_batch_size=device_batch_size, max_ids_per_partition=max_ids_per_partition,
                max_unique_ids_per_partition=max_unique_ids_per_partition)
    grad, touched = _table_grad(row_pointers, embedding_ids, sample_ids, gains, embedding_table,
                                activations_grad, "sparse_dense_matmul_grad_with_adam")
    t = touched.unsqueeze(1)
    m = torch.where(t, beta_1 * momentum + (1 - beta_1) * grad, momentum)
    v = torch.where(t, beta_2 * velocity + (1 - beta_2) * grad * grad, velocity)
    a = torch.as_tensor(alpha_t, device=embedding_table.device)
    upd = torch.where(t, a * m / (v.sqrt() + epsilon), 0.0)
    return embedding_table - upd, m, v


def _layout(sizes, dims, what):
    sizes, dims = [int(b) for b in sizes], [int(d) for d in dims]
    if len(sizes) != len(dims):
        raise ValueError(f"{what}: {len(sizes)} batch sizes but {len(dims)} feature dims")
    return sizes, dims


def sparse_dense_matmul_activation_unstack(stacked_activations, per_feature_batch_sizes,
                                           per_feature_dims):
    """Split activations stacked along the batch dimension: feature ``i`` is
    ``stacked[o_i:o_i + b_i, :d_i]`` (``o_i`` = sum of the earlier batch
    sizes). Differentiable; the backward is
    ``sparse_dense_matmul_gradient_stack``."""
    sizes, dims = _layout(per_feature_batch_sizes, per_feature_dims,
                          "sparse_dense_matmul_activation_unstack")
    if sum(sizes) > stacked_activations.shape[0] or max(dims, default=0) > stacked_activations.shape[1]:
        raise ValueError(f"features ({sum(sizes)} rows, up to {max(dims, default=0)} dims) do not "
                         f"fit in stacked activations {tuple(stacked_activations.shape)}")
    out, off = [], 0
    for b, d in zip(sizes, dims):
        out.append(stacked_activations[off:off + b, :d])
        off += b
    return out


def sparse_dense_matmul_gradient_stack(unstacked_gradients, stacked_batch_size,
                                       stacked_feature_dim):
    """Inverse of ``..._activation_unstack``: a (stacked_batch_size,
    stacked_feature_dim) tensor with the gradients placed back, zeros
    elsewhere."""
    grads = list(unstacked_gradients)
    if not grads:
        raise ValueError("sparse_dense_matmul_gradient_stack: no gradients")
    out = grads[0].new_zeros((stacked_batch_size, stacked_feature_dim))
    off = 0
    for g in grads:
        if off + g.shape[0] > stacked_batch_size or g.shape[1] > stacked_feature_dim:
            raise ValueError(f"gradient {tuple(g.shape)} does not fit at row {off} of "
                             f"({stacked_batch_size}, {stacked_feature_dim})")
        out[off:off + g.shape[0], :g.shape[1]] = g
        off += g.shape[0]
    return out


class _SparseGather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, indices, operand):
        ctx.save_for_backward(indices)
        ctx.shape = operand.shape
        return operand.index_select(0, indices)

    @staticmethod
    def backward(ctx, grad):
        (indices,) = ctx.saved_tensors
        return None, sparse_gather_backward(grad, indices, grad.new_zeros(ctx.shape))


def sparse_gather(row_pointers, indices, operand, max_non_zeroes_per_row):
    """Rows ``operand[indices]`` (2-D, one per index; padded slots hold a
    valid index, as SparseCore's padding does). ``len(indices)`` must be
    ``len(row_pointers) * max_non_zeroes_per_row``. Differentiable w.r.t.
    ``operand`` (backward: ``sparse_gather_backward``)."""
    _check_ints(max_non_zeroes_per_row=max_non_zeroes_per_row)
    if indices.dim() != 1 or operand.dim() != 2:
        raise ValueError("sparse_gather: indices must be 1-D and operand 2-D")
    if indices.numel() != row_pointers.numel() * max_non_zeroes_per_row:
        raise ValueError(f"sparse_gather: len(indices) = {indices.numel()} != len(row_pointers) * "
                         f"max_non_zeroes_per_row = {row_pointers.numel() * max_non_zeroes_per_row}")
    return _SparseGather.apply(indices.to(operand.device).long(), operand)


def sparse_gather_backward(grad_output, indices, grad_operand):
    """``grad_operand`` plus ``grad_output`` rows scatter-added at ``indices``."""
    return grad_operand.index_add(0, indices.to(grad_operand.device).long(),
                                  grad_output.to(grad_operand.dtype))


def sparse_iota(row_pointers, max_non_zeroes, max_non_zeroes_per_row):
    """Position of each non-zero within its CSR row: for ``k <
    row_pointers[-1]``, ``k - row_pointers[r]`` where row ``r`` holds ``k``
    (standard CSR pointers, ``row_pointers[0] == 0``); 0 for the padding up
    to ``max_non_zeroes``. int32, length ``max_non_zeroes``."""
    _check_ints(max_non_zeroes=max_non_zeroes, max_non_zeroes_per_row=max_non_zeroes_per_row)
    if row_pointers.dim() != 1 or row_pointers.numel() < 1:
        raise ValueError("sparse_iota: row_pointers must be a non-empty 1-D tensor")
    rp = row_pointers.long()
    k = torch.arange(max_non_zeroes, device=rp.device)
    row = torch.searchsorted(rp, k, right=True) - 1
    start = rp.gather(0, row.clamp(0, rp.numel() - 1))
    pos = torch.where((k < rp[-1]) & (row >= 0), k - start, torch.zeros_like(k))
    return pos.clamp(max=max(max_non_zeroes_per_row - 1, 0)).to(torch.int32)


def sparse_map_row(csr_tensors, csr_lengths, dense_args, body_mlir, dummy_outputs,
                   max_non_zeroes_per_row, pad_value, max_pad_per_row, wait_threshold,
                   result_row_pointer_op_index):
    """Maps an MLIR row computation over CSR matrices on SparseCore."""
    raise NotImplementedError(
        "torch.tpu.ops.sparse_map_row compiles `body_mlir` for the TPU SparseCore with libtpu's "
        "MLIR toolchain; the vTPU has no SparseCore compiler, so this op is not available here")

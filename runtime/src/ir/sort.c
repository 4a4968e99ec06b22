/* ir/sort.c - IR builder for TPUIR_SORT (tpuir_sort): validation and shape
 * inference. The executor is exec/vtpu/sort.c.
 *
 * Node attribute layout (tpu_ir.h): dim = sorted dim, kind =
 * tpuir_sort_result, a[0] = descending (0/1); the result's size at dim is
 * the head length (the operand's size for a full sort). Unused attributes stay zero,
 * so tpuir_hash sees every attribute.
 */
#include "ir/internal.h"

/* Stable sort along dim (see tpu_ir.h). Returns the new value or an error. */
tpuir_val tpuir_sort(tpuir_graph *g, tpuir_val x, int dim, int descending,
                     int result) {
  return tpuir_sort_head(g, x, dim, descending, result, -1);
}

/* The first k entries of the stable sort along dim (k < 0: all). */
tpuir_val tpuir_sort_head(tpuir_graph *g, tpuir_val x, int dim, int descending,
                          int result, int64_t k) {
  const tpuir_node *xn = NULL;
  int rc = tpuir__operand(g, x, "sort", &xn);
  if (rc) return rc;
  if (result != TPUIR_SORT_VALUES && result != TPUIR_SORT_INDICES)
    return tpu_error(TPU_E_INVALID, "sort: result must be values or indices, got %d",
                     result);
  int r = xn->ndim;
  if (r == 0 ? dim != 0 : (dim < 0 || dim >= r))
    return tpu_error(TPU_E_INDEX,
                     "sort: dimension %d out of range (expected to be in range of [0, %d))",
                     dim, r ? r : 1);
  int64_t len = r ? xn->sizes[dim] : 1;
  if (k < 0) k = len;
  if (k > len)
    return tpu_error(TPU_E_INVALID, "sort: head of %lld entries from a dim of %lld",
                     (long long)k, (long long)len);
  if (r == 0 && k != 1)
    return tpu_error(TPU_E_INVALID, "sort: a rank-0 value keeps its one entry");
  int dtype = xn->dtype, ndim = xn->ndim;
  int64_t sizes[TPU_MAX_DIMS];
  for (int i = 0; i < ndim; i++) sizes[i] = xn->sizes[i];
  tpuir_node *nd = tpuir__new_node(g, TPUIR_SORT);
  if (!nd) return tpu_error(TPU_E_OOM, "sort: out of host memory");
  nd->dtype = result == TPUIR_SORT_INDICES ? TPU_I64 : dtype;
  nd->ndim = ndim;
  for (int i = 0; i < ndim; i++) nd->sizes[i] = sizes[i];
  if (ndim) nd->sizes[dim] = k;
  nd->dim = dim;
  nd->kind = result;
  nd->a[0] = descending != 0;
  nd->nin = 1;
  nd->in[0] = x;
  return tpuir__commit(g);
}

/* ir/spectral.c - IR builders for the spectral decompositions (tpuir_eigh,
 * tpuir_svd): validation and shape inference of their packed results.
 *
 * Packed layouts and node attributes: see tpu_ir.h ("spectral
 * decompositions"). Unused attribute entries stay zero, so tpuir_hash sees
 * every attribute (kind, dim, a[0]).
 */
#include "ir/internal.h"

static int float_matrix(const tpuir_graph *g, tpuir_val x, const char *nm,
                        const tpuir_node **out) {
  const tpuir_node *n = NULL;
  int rc = tpuir__operand(g, x, nm, &n);
  if (rc) return rc;
  if (!tpu_dtype_is_float(n->dtype))
    return tpu_error(TPU_E_TYPE, "%s: expected a floating point operand, got %s",
                     nm, tpu_dtype_name(n->dtype));
  if (n->ndim < 2)
    return tpu_error(TPU_E_INVALID,
                     "%s: the operand must have at least 2 dimensions, got %d",
                     nm, (int)n->ndim);
  *out = n;
  return TPU_OK;
}

/* Symmetric eigendecomposition, packed [..., 1 (+ n), n] (tpu_ir.h). */
tpuir_val tpuir_eigh(tpuir_graph *g, tpuir_val x, int lower, int compute_v,
                     int check_nan) {
  const tpuir_node *xn = NULL;
  int rc = float_matrix(g, x, "eigh", &xn);
  if (rc) return rc;
  int nd = xn->ndim;
  int64_t n = xn->sizes[nd - 1];
  if (xn->sizes[nd - 2] != n)
    return tpu_error(TPU_E_INVALID,
                     "eigh: expected square matrices, got %lld by %lld",
                     (long long)xn->sizes[nd - 2], (long long)n);
  int64_t sizes[TPU_MAX_DIMS];
  for (int i = 0; i < nd; i++) sizes[i] = xn->sizes[i];
  sizes[nd - 2] = compute_v ? n + 1 : 1;
  int dt = xn->dtype;
  tpuir_node *nn = tpuir__new_node(g, TPUIR_EIGH);
  if (!nn) return tpu_error(TPU_E_OOM, "eigh: out of host memory");
  nn->dtype = dt;
  nn->ndim = nd;
  for (int i = 0; i < nd; i++) nn->sizes[i] = sizes[i];
  nn->kind = lower ? 1 : 0;
  nn->dim = compute_v ? 1 : 0;
  nn->a[0] = check_nan ? 1 : 0;
  nn->nin = 1;
  nn->in[0] = x;
  return tpuir__commit(g);
}

/* Singular value decomposition, packed [..., P] (tpu_ir.h). */
tpuir_val tpuir_svd(tpuir_graph *g, tpuir_val x, int full_matrices,
                    int compute_uv, int check_nan) {
  const tpuir_node *xn = NULL;
  int rc = float_matrix(g, x, "svd", &xn);
  if (rc) return rc;
  int nd = xn->ndim;
  int64_t m = xn->sizes[nd - 2], n = xn->sizes[nd - 1];
  int64_t k = m < n ? m : n;
  int64_t uc = full_matrices ? m : k, vr = full_matrices ? n : k;
  int64_t p = k + (compute_uv ? m * uc + vr * n : 0);
  int64_t sizes[TPU_MAX_DIMS];
  for (int i = 0; i < nd - 2; i++) sizes[i] = xn->sizes[i];
  sizes[nd - 2] = p;
  int dt = xn->dtype;
  tpuir_node *nn = tpuir__new_node(g, TPUIR_SVD);
  if (!nn) return tpu_error(TPU_E_OOM, "svd: out of host memory");
  nn->dtype = dt;
  nn->ndim = nd - 1;
  for (int i = 0; i < nd - 1; i++) nn->sizes[i] = sizes[i];
  nn->kind = compute_uv ? 1 : 0;
  nn->dim = full_matrices ? 1 : 0;
  nn->a[0] = check_nan ? 1 : 0;
  nn->nin = 1;
  nn->in[0] = x;
  return tpuir__commit(g);
}

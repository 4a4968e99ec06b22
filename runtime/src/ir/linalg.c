/* ir/linalg.c - IR builders for dense linear algebra (tpu_ir.h section
 * "dense linear algebra"): CHOLESKY, TRIANGULAR_SOLVE, LU,
 * LU_PIVOTS_TO_PERM, GEQRF, HOUSEHOLDER_PRODUCT, LDL, LDL_SOLVE. Shape inference,
 * validation and the dump text of their attributes.
 *
 * Node attributes (the executor exec/vtpu/linalg.c relies on them):
 *   kind = flags (CHOLESKY: lower | check << 1; TRIANGULAR_SOLVE: left_side | lower << 1
 *          | unit_diagonal << 2 | transpose_a << 3), dim = result index
 *          (CHOLESKY, LU, GEQRF, LDL) or m (LU_PIVOTS_TO_PERM).
 * Both fields are part of tpuir_hash.
 */
#include <stdio.h>
#include <string.h>

#include "ir/internal.h"

/* float32/float64 operand of rank >= 2 */
static int matrix_operand(const tpuir_graph *g, tpuir_val v, const char *nm,
                          const tpuir_node **out) {
  int rc = tpuir__operand(g, v, nm, out);
  if (rc) return rc;
  const tpuir_node *n = *out;
  if (n->dtype != TPU_F32 && n->dtype != TPU_F64)
    return tpu_error(TPU_E_TYPE, "%s: expected a float32 or float64 operand, got %s",
                     nm, tpu_dtype_name(n->dtype));
  if (n->ndim < 2)
    return tpu_error(TPU_E_INVALID,
                     "%s: expected an operand of rank >= 2, got rank %d", nm,
                     (int)n->ndim);
  return TPU_OK;
}

/* matrix_operand of square matrices. */
static int square_operand(const tpuir_graph *g, tpuir_val v, const char *nm,
                          const tpuir_node **out) {
  int rc = matrix_operand(g, v, nm, out);
  if (rc) return rc;
  int64_t r = (*out)->sizes[(*out)->ndim - 2], c = (*out)->sizes[(*out)->ndim - 1];
  if (r != c)
    return tpu_error(TPU_E_INVALID, "%s: expected square matrices, got %lld x %lld", nm,
                     (long long)r, (long long)c);
  return TPU_OK;
}

static int same_batch(const tpuir_node *a, const tpuir_node *b, int bnd) {
  if (a->ndim - 2 < 0 || bnd < 0) return 0;
  for (int i = 0; i < a->ndim - 2; i++)
    if (a->sizes[i] != b->sizes[i]) return 0;
  return a->ndim - 2 == bnd;
}

/* Node with result dtype/shape = batch dims of x + the given tail. */
static tpuir_val make_node(tpuir_graph *g, int op, const tpuir_node *x,
                           int dtype, int ntail, const int64_t *tail,
                           int kind, int dim, int nin, tpuir_val in0,
                           tpuir_val in1, const char *nm) {
  int nb = x->ndim - 2;
  int64_t sizes[TPU_MAX_DIMS];
  for (int i = 0; i < nb; i++) sizes[i] = x->sizes[i];
  for (int i = 0; i < ntail; i++) sizes[nb + i] = tail[i];
  tpuir_node *nd = tpuir__new_node(g, op); /* x may move: copied above */
  if (!nd) return tpu_error(TPU_E_OOM, "%s: out of host memory", nm);
  nd->dtype = dtype;
  nd->ndim = nb + ntail;
  memcpy(nd->sizes, sizes, sizeof(int64_t) * (size_t)(nb + ntail));
  nd->kind = kind;
  nd->dim = dim;
  nd->nin = nin;
  nd->in[0] = in0;
  nd->in[1] = in1;
  return tpuir__commit(g);
}

/* Cholesky factor or info of x (tpu_ir.h). */
tpuir_val tpuir_cholesky(tpuir_graph *g, tpuir_val x, int lower, int result) {
  const char *nm = "cholesky";
  const tpuir_node *n = NULL;
  int rc = square_operand(g, x, nm, &n);
  if (rc) return rc;
  int64_t r = n->sizes[n->ndim - 2], c = r;
  if (result == TPUIR_CHOL_FACTOR) {
    int64_t t[2] = {r, c};
    return make_node(g, TPUIR_CHOLESKY, n, n->dtype, 2, t, lower & 3, result, 1, x, 0, nm);
  }
  if (result == TPUIR_CHOL_INFO)
    return make_node(g, TPUIR_CHOLESKY, n, TPU_I32, 0, NULL, lower & 3, result, 1, x, 0, nm);
  return tpu_error(TPU_E_INVALID, "cholesky: bad result index %d", result);
}

/* StableHLO triangular_solve (tpu_ir.h). */
tpuir_val tpuir_triangular_solve(tpuir_graph *g, tpuir_val a, tpuir_val b,
                                 int left_side, int lower, int unit_diagonal,
                                 int transpose_a) {
  const char *nm = "triangular_solve";
  const tpuir_node *na = NULL, *nb = NULL;
  int rc = matrix_operand(g, a, nm, &na);
  if (rc) return rc;
  if ((rc = matrix_operand(g, b, nm, &nb))) return rc;
  if (na->dtype != nb->dtype)
    return tpu_error(TPU_E_TYPE, "triangular_solve: operand dtypes differ (%s, %s)",
                     tpu_dtype_name(na->dtype), tpu_dtype_name(nb->dtype));
  if (!same_batch(na, nb, nb->ndim - 2))
    return tpu_error(TPU_E_INVALID, "triangular_solve: operands need the same batch dims");
  int64_t k = na->sizes[na->ndim - 1];
  int64_t m = nb->sizes[nb->ndim - 2], n = nb->sizes[nb->ndim - 1];
  if (na->sizes[na->ndim - 2] != k || k != (left_side ? m : n))
    return tpu_error(TPU_E_INVALID,
                     "triangular_solve: a must be square and match b (a %lld x %lld, "
                     "b %lld x %lld, left_side %d)",
                     (long long)na->sizes[na->ndim - 2], (long long)k, (long long)m,
                     (long long)n, left_side);
  int kind = (!!left_side) | (!!lower) << 1 | (!!unit_diagonal) << 2 | (!!transpose_a) << 3;
  int64_t t[2] = {m, n};
  return make_node(g, TPUIR_TRIANGULAR_SOLVE, nb, nb->dtype, 2, t, kind, 0, 2, a, b, nm);
}

/* LU factorization results (tpu_ir.h). */
tpuir_val tpuir_lu(tpuir_graph *g, tpuir_val x, int result) {
  const char *nm = "lu";
  const tpuir_node *n = NULL;
  int rc = matrix_operand(g, x, nm, &n);
  if (rc) return rc;
  int64_t m = n->sizes[n->ndim - 2], c = n->sizes[n->ndim - 1];
  int64_t k = m < c ? m : c;
  int64_t t[2] = {m, c};
  switch (result) {
  case TPUIR_LU_PACKED:
    return make_node(g, TPUIR_LU, n, n->dtype, 2, t, 0, result, 1, x, 0, nm);
  case TPUIR_LU_PIVOTS:
    return make_node(g, TPUIR_LU, n, TPU_I32, 1, &k, 0, result, 1, x, 0, nm);
  case TPUIR_LU_INFO:
    return make_node(g, TPUIR_LU, n, TPU_I32, 0, NULL, 0, result, 1, x, 0, nm);
  case TPUIR_LU_PERM:
    return make_node(g, TPUIR_LU, n, TPU_I32, 1, &m, 0, result, 1, x, 0, nm);
  default: return tpu_error(TPU_E_INVALID, "lu: bad result index %d", result);
  }
}

/* LAPACK pivots -> permutation (tpu_ir.h). */
tpuir_val tpuir_lu_pivots_to_perm(tpuir_graph *g, tpuir_val pivots, int64_t m) {
  const char *nm = "lu_pivots_to_permutation";
  const tpuir_node *n = NULL;
  int rc = tpuir__operand(g, pivots, nm, &n);
  if (rc) return rc;
  if (n->dtype != TPU_I32 && n->dtype != TPU_I64)
    return tpu_error(TPU_E_TYPE, "%s: pivots must be int32 or int64, got %s", nm,
                     tpu_dtype_name(n->dtype));
  if (n->ndim < 1)
    return tpu_error(TPU_E_INVALID, "%s: pivots must have rank >= 1", nm);
  if (m < 0 || m > INT32_MAX)
    return tpu_error(TPU_E_INVALID, "%s: bad row count %lld", nm, (long long)m);
  /* batch dims = all but the last: reuse make_node with a fake rank */
  int64_t sizes[TPU_MAX_DIMS];
  int nb = n->ndim - 1;
  for (int i = 0; i < nb; i++) sizes[i] = n->sizes[i];
  sizes[nb] = m;
  tpuir_node *nd = tpuir__new_node(g, TPUIR_LU_PIVOTS_TO_PERM);
  if (!nd) return tpu_error(TPU_E_OOM, "%s: out of host memory", nm);
  nd->dtype = TPU_I32;
  nd->ndim = nb + 1;
  memcpy(nd->sizes, sizes, sizeof(int64_t) * (size_t)(nb + 1));
  nd->dim = (int32_t)m;
  nd->nin = 1;
  nd->in[0] = pivots;
  return tpuir__commit(g);
}

/* Householder QR results (tpu_ir.h). */
tpuir_val tpuir_geqrf(tpuir_graph *g, tpuir_val x, int result) {
  const char *nm = "geqrf";
  const tpuir_node *n = NULL;
  int rc = matrix_operand(g, x, nm, &n);
  if (rc) return rc;
  int64_t m = n->sizes[n->ndim - 2], c = n->sizes[n->ndim - 1];
  int64_t k = m < c ? m : c;
  int64_t t[2] = {m, c};
  if (result == TPUIR_QR_PACKED)
    return make_node(g, TPUIR_GEQRF, n, n->dtype, 2, t, 0, result, 1, x, 0, nm);
  if (result == TPUIR_QR_TAU)
    return make_node(g, TPUIR_GEQRF, n, n->dtype, 1, &k, 0, result, 1, x, 0, nm);
  return tpu_error(TPU_E_INVALID, "geqrf: bad result index %d", result);
}

/* orgqr (tpu_ir.h). */
tpuir_val tpuir_householder_product(tpuir_graph *g, tpuir_val a, tpuir_val tau) {
  const char *nm = "householder_product";
  const tpuir_node *na = NULL, *nt = NULL;
  int rc = matrix_operand(g, a, nm, &na);
  if (rc) return rc;
  if ((rc = tpuir__operand(g, tau, nm, &nt))) return rc;
  if (nt->dtype != na->dtype)
    return tpu_error(TPU_E_TYPE, "%s: tau dtype %s differs from %s", nm,
                     tpu_dtype_name(nt->dtype), tpu_dtype_name(na->dtype));
  if (!same_batch(na, nt, nt->ndim - 1))
    return tpu_error(TPU_E_INVALID, "%s: a and tau need the same batch dims", nm);
  int64_t m = na->sizes[na->ndim - 2], n = na->sizes[na->ndim - 1];
  int64_t k = nt->sizes[nt->ndim - 1];
  if (m < n || k > n)
    return tpu_error(TPU_E_INVALID,
                     "%s: need rows >= columns >= reflectors (got %lld, %lld, %lld)",
                     nm, (long long)m, (long long)n, (long long)k);
  int64_t t[2] = {m, n};
  return make_node(g, TPUIR_HOUSEHOLDER_PRODUCT, na, na->dtype, 2, t, 0, 0, 2, a, tau, nm);
}

/* Bunch-Kaufman LDL^T results (tpu_ir.h). */
tpuir_val tpuir_ldl(tpuir_graph *g, tpuir_val x, int result) {
  const char *nm = "ldl";
  const tpuir_node *n = NULL;
  int rc = square_operand(g, x, nm, &n);
  if (rc) return rc;
  int64_t r = n->sizes[n->ndim - 2], c = r;
  int64_t t[2] = {r, c};
  switch (result) {
  case TPUIR_LDL_LD: return make_node(g, TPUIR_LDL, n, n->dtype, 2, t, 0, result, 1, x, 0, nm);
  case TPUIR_LDL_PIVOTS: return make_node(g, TPUIR_LDL, n, TPU_I32, 1, &r, 0, result, 1, x, 0, nm);
  case TPUIR_LDL_INFO: return make_node(g, TPUIR_LDL, n, TPU_I32, 0, NULL, 0, result, 1, x, 0, nm);
  default: return tpu_error(TPU_E_INVALID, "ldl: bad result index %d", result);
  }
}

/* sytrs (tpu_ir.h). */
tpuir_val tpuir_ldl_solve(tpuir_graph *g, tpuir_val ld, tpuir_val pivots, tpuir_val b) {
  const char *nm = "ldl_solve";
  const tpuir_node *nl = NULL, *np = NULL, *nb = NULL;
  int rc = matrix_operand(g, ld, nm, &nl);
  if (rc) return rc;
  if ((rc = matrix_operand(g, b, nm, &nb))) return rc;
  if ((rc = tpuir__operand(g, pivots, nm, &np))) return rc;
  if (nl->dtype != nb->dtype || np->dtype != TPU_I32)
    return tpu_error(TPU_E_TYPE, "%s: ld and b need one dtype, pivots int32", nm);
  int64_t n = nl->sizes[nl->ndim - 1];
  if (nl->sizes[nl->ndim - 2] != n || nb->sizes[nb->ndim - 2] != n ||
      np->sizes[np->ndim - 1] != n)
    return tpu_error(TPU_E_INVALID, "%s: shapes do not match", nm);
  if (!same_batch(nl, nb, nb->ndim - 2) || !same_batch(nl, np, np->ndim - 1))
    return tpu_error(TPU_E_INVALID, "%s: operands need the same batch dims", nm);
  int64_t t[2] = {n, nb->sizes[nb->ndim - 1]};
  int nbd = nb->ndim - 2;
  int64_t sizes[TPU_MAX_DIMS];
  for (int i = 0; i < nbd; i++) sizes[i] = nb->sizes[i];
  sizes[nbd] = t[0];
  sizes[nbd + 1] = t[1];
  int dt = nb->dtype;
  tpuir_node *nd = tpuir__new_node(g, TPUIR_LDL_SOLVE);
  if (!nd) return tpu_error(TPU_E_OOM, "%s: out of host memory", nm);
  nd->dtype = dt;
  nd->ndim = nbd + 2;
  memcpy(nd->sizes, sizes, sizeof(int64_t) * (size_t)(nbd + 2));
  nd->nin = 3;
  nd->in[0] = ld;
  nd->in[1] = pivots;
  nd->in[2] = b;
  return tpuir__commit(g);
}

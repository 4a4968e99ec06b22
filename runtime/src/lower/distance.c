/* lower/distance.c - pairwise distances: _pdist_forward / _pdist_backward
 * (the upper triangle of the row pairs of one matrix) and _cdist_forward /
 * _cdist_backward (all row pairs of two batched matrices), p-norms of row
 * differences with PyTorch's backward rules.
 */
#include <math.h>
#include <string.h>

#include "lower/internal.h"

enum { D_PDIST = 1, D_PDIST_BW, D_CDIST, D_CDIST_BW };

/* d(dist)/d(diff) for the p-norm (PyTorch's pdist/cdist backward rules),
 * dist broadcast against d. */
static tpuir_val pnorm_grad(tpulw__b *b, tpuir_val d, tpuir_val dist, double p) {
  tpulw__shape s = tpulw__info(b, d);
  tpuir_val zero = tpulw__const(b, s.dtype, 0);
  tpuir_val sg = tpulw__un(b, TPUIR_SIGN, d);
  tpuir_val dz = tpulw__bin_c(b, TPUIR_EQ, dist, 0);
  if (p == 0) return tpulw__full(b, s.dtype, s.ndim, s.sizes, 0);
  if (p == 1) return sg;
  if (p == 2) return tpulw__sel(b, dz, zero, tpulw__bin(b, TPUIR_DIV, d, dist));
  if (isinf(p))
    return tpulw__bin(b, TPUIR_MUL, sg, tpulw__convert(b, tpulw__bin(b, TPUIR_EQ, tpulw__un(b, TPUIR_ABS, d), tpulw__bcast(b, dist, s.ndim, s.sizes)), s.dtype));
  tpuir_val a = tpulw__un(b, TPUIR_ABS, d);
  tpuir_val r;
  if (p < 2) {
    r = tpulw__bin(b, TPUIR_DIV, tpulw__bin(b, TPUIR_MUL, sg, tpulw__bin_c(b, TPUIR_POW, a, p - 1)),
               tpulw__bin_c(b, TPUIR_POW, dist, p - 1));
    if (p < 1) r = tpulw__sel(b, tpulw__bin_c(b, TPUIR_EQ, d, 0), zero, r);
  } else {
    r = tpulw__bin(b, TPUIR_DIV, tpulw__bin(b, TPUIR_MUL, d, tpulw__bin_c(b, TPUIR_POW, a, p - 2)),
               tpulw__bin_c(b, TPUIR_POW, dist, p - 1));
  }
  return tpulw__sel(b, dz, zero, r);
}

/* pair indices (i, j), i < j, of the k-th pdist entry (row-major upper
 * triangle of n x n), as PyTorch computes them */
static int pdist_pairs(tpulw__b *b, int64_t n, int64_t P, tpuir_val *pi, tpuir_val *pj) {
  double n2 = (double)n - .5;
  tpuir_val k = tpuir_iota(b->g, TPU_F64, 1, &P, 0);
  tpuir_val t = tpulw__un(b, TPUIR_SQRT, tpulw__bin(b, TPUIR_SUB, tpulw__const(b, TPU_F64, n2 * n2 - 1),
                                            tpulw__bin_c(b, TPUIR_MUL, k, 2)));
  tpuir_val i = tpulw__convert(b, tpulw__bin(b, TPUIR_SUB, tpulw__const(b, TPU_F64, n2), t), TPU_I64);
  tpuir_val ki = tpulw__convert(b, k, TPU_I64);
  /* j = k - n*i + i*(i+1)/2 + i + 1 */
  tpuir_val j = tpulw__bin(b, TPUIR_SUB, ki, tpulw__bin_c(b, TPUIR_MUL, i, (double)n));
  j = tpulw__bin(b, TPUIR_ADD, j, tpulw__bin_c(b, TPUIR_DIV, tpulw__bin(b, TPUIR_MUL, i, tpulw__bin_c(b, TPUIR_ADD, i, 1)), 2));
  j = tpulw__bin_c(b, TPUIR_ADD, tpulw__bin(b, TPUIR_ADD, j, i), 1);
  *pi = i;
  *pj = j;
  return j < 0 ? j : TPU_OK;
}

static int pdist_fn(tpulw__b *b) {
  int bw = b->op == D_PDIST_BW;
  const tpulw_tensor *in = tpulw__tensor_arg(b, "self");
  int rc;
  if ((rc = tpulw__need_tpu(b, in))) return rc;
  const tpu_view *v = &in->view;
  double p = tpulw__float(b, "p", 2);
  if (v->ndim != 2)
    return tpu_error(TPU_E_INVALID, "pdist only supports 2D tensors, got: %dD", v->ndim);
  if (!tpu_dtype_is_float(v->dtype))
    return tpu_error(TPU_E_INVALID, "pdist only supports floating-point dtypes");
  if (!(p >= 0)) return tpu_error(TPU_E_INVALID, "pdist only supports non-negative p values");
  int dt = v->dtype, cdt = tpulw__opmath(dt);
  int64_t n = v->sizes[0], m = v->sizes[1], P = n * (n - 1) / 2;
  if (!bw && (P == 0 || m == 0)) return tpulw__result(b, tpulw__full(b, dt, 1, &P, 0));
  if (bw && (P == 0 || m == 0)) return tpulw__result(b, tpulw__full(b, dt, 2, v->sizes, 0));
  tpuir_val i, j;
  if ((rc = pdist_pairs(b, n, P, &i, &j)) < 0) return rc;
  tpuir_val x = tpulw__convert(b, tpulw__tensor(b, in), cdt);
  tpuir_val d = tpulw__bin(b, TPUIR_SUB, tpuir_index_select(b->g, x, 0, i), tpuir_index_select(b->g, x, 0, j));
  if (!bw) return tpulw__result_as(b, tpulw__pnorm_last(b, d, p), dt);
  const tpulw_tensor *gt = tpulw__tensor_arg(b, "grad"), *pt = tpulw__tensor_arg(b, "pdist");
  if ((rc = tpulw__need_tpu(b, gt)) || (rc = tpulw__need_tpu(b, pt))) return rc;
  if (gt->view.ndim != 1 || gt->view.sizes[0] != P || pt->view.ndim != 1 || pt->view.sizes[0] != P)
    return tpu_error(TPU_E_INVALID, "_pdist_backward: grad and pdist must have %lld elements", (long long)P);
  int64_t s2[2] = {P, 1};
  tpuir_val dist = tpulw__reshape(b, tpulw__convert(b, tpulw__tensor(b, pt), cdt), 2, s2);
  tpuir_val g = tpulw__reshape(b, tpulw__convert(b, tpulw__tensor(b, gt), cdt), 2, s2);
  tpuir_val gd = tpulw__bin(b, TPUIR_MUL, pnorm_grad(b, d, dist, p), g);
  tpuir_val r = tpuir_index_add(b->g, tpulw__full(b, cdt, 2, v->sizes, 0), 0, i, gd);
  r = tpuir_index_add(b->g, r, 0, j, tpulw__un(b, TPUIR_NEG, gd));
  return tpulw__result_as(b, r, dt);
}

static int cdist_fn(tpulw__b *b) {
  int bw = b->op == D_CDIST_BW;
  const tpulw_tensor *t1 = tpulw__tensor_arg(b, "x1"), *t2 = tpulw__tensor_arg(b, "x2");
  int rc;
  if ((rc = tpulw__need_tpu(b, t1)) || (rc = tpulw__need_tpu(b, t2))) return rc;
  const tpu_view *v1 = &t1->view, *v2 = &t2->view;
  double p = tpulw__float(b, "p", 2);
  if (!tpu_dtype_is_float(v1->dtype))
    return tpu_error(TPU_E_INVALID, "cdist only supports floating-point dtypes, X1 got: %s",
                     tpulw__torch_name(v1->dtype));
  if (!tpu_dtype_is_float(v2->dtype))
    return tpu_error(TPU_E_INVALID, "cdist only supports floating-point dtypes, X2 got: %s",
                     tpulw__torch_name(v2->dtype));
  if (v1->ndim < 2)
    return tpu_error(TPU_E_INVALID, "cdist only supports at least 2D tensors, X1 got: %dD", v1->ndim);
  if (v2->ndim < 2)
    return tpu_error(TPU_E_INVALID, "cdist only supports at least 2D tensors, X2 got: %dD", v2->ndim);
  if (v1->sizes[v1->ndim - 1] != v2->sizes[v2->ndim - 1])
    return tpu_error(TPU_E_INVALID, "X1 and X2 must have the same number of columns. X1: %lld X2: %lld",
                     (long long)v1->sizes[v1->ndim - 1], (long long)v2->sizes[v2->ndim - 1]);
  if (!(p >= 0)) return tpu_error(TPU_E_INVALID, "cdist only supports non-negative p values");
  if (v1->dtype != v2->dtype)
    return tpu_error(TPU_E_INVALID, "X1 and X2 must have the same dtype, but got %s and %s",
                     tpulw__torch_name(v1->dtype), tpulw__torch_name(v2->dtype));
  int dt = v1->dtype, cdt = tpulw__opmath(dt);
  int nb1 = v1->ndim - 2, nb2 = v2->ndim - 2;
  int nb = nb1 > nb2 ? nb1 : nb2;
  if (nb + 3 > TPU_MAX_DIMS) return tpu_error(TPU_E_UNSUPPORTED, "cdist: rank");
  int64_t bs[TPU_MAX_DIMS];
  for (int i = 0; i < nb; i++) {
    int i1 = i - (nb - nb1), i2 = i - (nb - nb2);
    int64_t a = i1 >= 0 ? v1->sizes[i1] : 1, c = i2 >= 0 ? v2->sizes[i2] : 1;
    if (a != c && a != 1 && c != 1)
      return tpu_error(TPU_E_INVALID, "The size of tensor a (%lld) must match the size of tensor b "
                       "(%lld) at non-singleton dimension %d", (long long)a, (long long)c, i);
    bs[i] = a == 1 ? c : a;
  }
  int64_t r1 = v1->sizes[v1->ndim - 2], r2 = v2->sizes[v2->ndim - 2], m = v1->sizes[v1->ndim - 1];
  int64_t s4[TPU_MAX_DIMS];
  for (int i = 0; i < nb; i++) s4[i] = bs[i];
  s4[nb] = r1;
  s4[nb + 1] = r2;
  s4[nb + 2] = m;
  int64_t dims1[TPU_MAX_DIMS], dims2[TPU_MAX_DIMS];
  tpuir_val x1 = tpulw__convert(b, tpulw__tensor(b, t1), cdt), x2 = tpulw__convert(b, tpulw__tensor(b, t2), cdt);
  /* x1 [b1.., r1, m] -> [b.., r1, 1, m] -> [b.., r1, r2, m] */
  int64_t e1[TPU_MAX_DIMS], e2[TPU_MAX_DIMS];
  for (int i = 0; i < nb; i++) {
    int i1 = i - (nb - nb1), i2 = i - (nb - nb2);
    e1[i] = i1 >= 0 ? v1->sizes[i1] : 1;
    e2[i] = i2 >= 0 ? v2->sizes[i2] : 1;
    dims1[i] = dims2[i] = i;
  }
  e1[nb] = r1; e1[nb + 1] = 1; e1[nb + 2] = m;
  e2[nb] = 1; e2[nb + 1] = r2; e2[nb + 2] = m;
  for (int i = nb; i < nb + 3; i++) dims1[i] = dims2[i] = i;
  tpuir_val a1 = tpuir_broadcast_in_dim(b->g, tpulw__reshape(b, x1, nb + 3, e1), nb + 3, s4, dims1);
  tpuir_val a2 = tpuir_broadcast_in_dim(b->g, tpulw__reshape(b, x2, nb + 3, e2), nb + 3, s4, dims2);
  tpuir_val d = tpulw__bin(b, TPUIR_SUB, a1, a2);
  LW_TRY(d);
  if (!bw) {
    if (m == 0) return tpulw__result(b, tpulw__full(b, dt, nb + 2, s4, 0));
    return tpulw__result_as(b, tpulw__pnorm_last(b, d, p), dt);
  }
  const tpulw_tensor *gt = tpulw__tensor_arg(b, "grad"), *ct = tpulw__tensor_arg(b, "cdist");
  if ((rc = tpulw__need_tpu(b, gt)) || (rc = tpulw__need_tpu(b, ct))) return rc;
  int64_t o3[TPU_MAX_DIMS];
  for (int i = 0; i < nb + 2; i++) o3[i] = s4[i];
  o3[nb + 2] = 1;
  int64_t gn = 1, want = 1;
  for (int i = 0; i < gt->view.ndim; i++) gn *= gt->view.sizes[i];
  for (int i = 0; i < nb + 2; i++) want *= s4[i];
  int64_t cn = 1;
  for (int i = 0; i < ct->view.ndim; i++) cn *= ct->view.sizes[i];
  if (gn != want || cn != want)
    return tpu_error(TPU_E_INVALID, "_cdist_backward: grad / cdist do not have the result's shape");
  int64_t gs[TPU_MAX_DIMS];
  for (int i = 0; i < nb + 1; i++) gs[i] = s4[i];
  gs[nb + 1] = m;
  if (m == 0 || want == 0) return tpulw__result(b, tpulw__full(b, dt, nb + 2, gs, 0));
  tpuir_val dist = tpulw__reshape(b, tpulw__convert(b, tpulw__tensor(b, ct), cdt), nb + 3, o3);
  tpuir_val g = tpulw__reshape(b, tpulw__convert(b, tpulw__tensor(b, gt), cdt), nb + 3, o3);
  tpuir_val gd = tpulw__bin(b, TPUIR_MUL, pnorm_grad(b, d, dist, p), g);
  return tpulw__result_as(b, tpulw__reduce_dims(b, TPUIR_RED_SUM, gd, 1u << (nb + 1), 0), dt);
}

#define R2(n, fn, code) {n, fn, code}, {n ".out", fn, code}

const tpulw__row tpulw__rows_distance[] = {
    R2("_pdist_forward", pdist_fn, D_PDIST),
    R2("_pdist_backward", pdist_fn, D_PDIST_BW),
    R2("_cdist_forward", cdist_fn, D_CDIST),
    R2("_cdist_backward", cdist_fn, D_CDIST_BW),
};
const int tpulw__nrows_distance = sizeof tpulw__rows_distance / sizeof tpulw__rows_distance[0];

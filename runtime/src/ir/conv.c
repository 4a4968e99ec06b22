/* ir/conv.c - IR builders for convolution and windowed reductions
 * (tpuir_convolution, tpuir_reduce_window, tpuir_window_argmax): shape
 * inference, validation and the dump text of their attributes.
 *
 * Node attribute layout (tpu_ir.h; the executor relies on it):
 *   CONVOLUTION    na = nsp, a = window strides, b = pad lo, c = pad hi,
 *                  d[0..nsp) = lhs dilation, d[8..8+nsp) = rhs dilation,
 *                  dim = feature_group_count, kind = precision
 *   REDUCE_WINDOW, WINDOW_ARGMAX
 *                  na = rank, a = window, b = strides, c[0..8) = pad lo,
 *                  c[8..16) = pad hi, d[0..8) = window dilation,
 *                  kind = reduce kind, dim = index_dims (argmax)
 * Unused attribute entries stay zero, so tpuir_hash sees every attribute.
 */
#include <stdio.h>
#include <string.h>

#include "ir/internal.h"

#define CONV_MAX_SP 3
#define WIN_MAX_RANK 8

/* Size of one windowed output dim (0 if the window does not fit). */
static int64_t window_out(int64_t in, int64_t base_dil, int64_t lo, int64_t hi,
                          int64_t win, int64_t dil, int64_t stride) {
  int64_t din = in > 0 ? (in - 1) * base_dil + 1 : 0;
  int64_t padded = lo + din + hi;
  int64_t dwin = (win - 1) * dil + 1;
  if (in == 0 || padded < dwin) return 0;
  return (padded - dwin) / stride + 1;
}

/* StableHLO convolution in PyTorch layouts (see tpu_ir.h). */
tpuir_val tpuir_convolution(tpuir_graph *g, tpuir_val lhs, tpuir_val rhs,
                            const int64_t *window_strides,
                            const int64_t *pad_lo, const int64_t *pad_hi,
                            const int64_t *lhs_dilation,
                            const int64_t *rhs_dilation,
                            int64_t feature_group_count, int precision) {
  const char *nm = "convolution";
  const tpuir_node *l = NULL, *r = NULL;
  int rc = tpuir__operand(g, lhs, nm, &l);
  if (rc) return rc;
  if ((rc = tpuir__operand(g, rhs, nm, &r))) return rc;
  if (l->dtype != r->dtype)
    return tpu_error(TPU_E_TYPE,
                     "convolution: input type (%s) and weight type (%s) should "
                     "be the same",
                     tpu_dtype_name(l->dtype), tpu_dtype_name(r->dtype));
  if (!tpu_dtype_is_float(l->dtype))
    return tpu_error(TPU_E_TYPE,
                     "convolution: needs floating point operands, got %s",
                     tpu_dtype_name(l->dtype));
  int rank = l->ndim, nsp = rank - 2;
  if (nsp < 1 || nsp > CONV_MAX_SP)
    return tpu_error(TPU_E_INVALID,
                     "convolution: expected a %d-%dD input (batch, channels, "
                     "1 to %d spatial dims), got rank %d",
                     3, 2 + CONV_MAX_SP, CONV_MAX_SP, rank);
  if (r->ndim != rank)
    return tpu_error(TPU_E_INVALID,
                     "convolution: weight of rank %d does not match input of "
                     "rank %d",
                     (int)r->ndim, rank);
  if (precision < TPU_PREC_DEFAULT || precision > TPU_PREC_FP32)
    return tpu_error(TPU_E_INVALID, "convolution: invalid precision %d", precision);
  int64_t G = feature_group_count;
  if (G < 1)
    return tpu_error(TPU_E_INVALID,
                     "convolution: feature_group_count must be positive, got %lld",
                     (long long)G);
  int64_t C = l->sizes[1], O = r->sizes[0], Cg = r->sizes[1];
  if (O % G != 0)
    return tpu_error(TPU_E_INVALID,
                     "convolution: output channels (%lld) must be divisible by "
                     "groups (%lld)",
                     (long long)O, (long long)G);
  if (Cg * G != C)
    return tpu_error(TPU_E_INVALID,
                     "convolution: expected input with %lld channels (weight "
                     "%lld x groups %lld), got %lld",
                     (long long)(Cg * G), (long long)Cg, (long long)G,
                     (long long)C);
  int64_t st[CONV_MAX_SP], lo[CONV_MAX_SP], hi[CONV_MAX_SP], ld[CONV_MAX_SP],
      rd[CONV_MAX_SP], os[CONV_MAX_SP];
  for (int i = 0; i < nsp; i++) {
    st[i] = window_strides ? window_strides[i] : 1;
    lo[i] = pad_lo ? pad_lo[i] : 0;
    hi[i] = pad_hi ? pad_hi[i] : 0;
    ld[i] = lhs_dilation ? lhs_dilation[i] : 1;
    rd[i] = rhs_dilation ? rhs_dilation[i] : 1;
    if (st[i] < 1 || ld[i] < 1 || rd[i] < 1)
      return tpu_error(TPU_E_INVALID,
                       "convolution: strides and dilations must be positive "
                       "(spatial dim %d: stride %lld, lhs_dilation %lld, "
                       "rhs_dilation %lld)",
                       i, (long long)st[i], (long long)ld[i], (long long)rd[i]);
    if (r->sizes[2 + i] < 1)
      return tpu_error(TPU_E_INVALID,
                       "convolution: kernel size must be positive, got %lld at "
                       "spatial dim %d",
                       (long long)r->sizes[2 + i], i);
    os[i] = window_out(l->sizes[2 + i], ld[i], lo[i], hi[i], r->sizes[2 + i],
                       rd[i], st[i]);
  }
  int dt = l->dtype;
  int64_t N = l->sizes[0];
  tpuir_node *nd = tpuir__new_node(g, TPUIR_CONVOLUTION);
  if (!nd) return tpu_error(TPU_E_OOM, "convolution: out of host memory");
  nd->dtype = dt;
  nd->ndim = rank;
  nd->sizes[0] = N;
  nd->sizes[1] = O;
  for (int i = 0; i < nsp; i++) {
    nd->sizes[2 + i] = os[i];
    nd->a[i] = st[i];
    nd->b[i] = lo[i];
    nd->c[i] = hi[i];
    nd->d[i] = ld[i];
    nd->d[8 + i] = rd[i];
  }
  nd->na = nsp;
  nd->dim = (int32_t)G;
  nd->kind = precision;
  nd->nin = 2;
  nd->in[0] = lhs;
  nd->in[1] = rhs;
  return tpuir__commit(g);
}

/* Shared validation of the window attributes; fills the result sizes. */
static int window_attrs(const char *nm, const tpuir_node *x,
                        const int64_t *window, const int64_t *strides,
                        const int64_t *pad_lo, const int64_t *pad_hi,
                        const int64_t *dilation, int64_t *w, int64_t *s,
                        int64_t *lo, int64_t *hi, int64_t *dl, int64_t *os) {
  int rank = x->ndim;
  if (rank > WIN_MAX_RANK)
    return tpu_error(TPU_E_INVALID, "%s: rank %d exceeds %d", nm, rank,
                     WIN_MAX_RANK);
  if (rank > 0 && !window)
    return tpu_error(TPU_E_INVALID, "%s: window is NULL", nm);
  if (x->dtype == TPU_BOOL)
    return tpu_error(TPU_E_TYPE, "%s: bool operands are not supported", nm);
  for (int i = 0; i < rank; i++) {
    w[i] = window[i];
    s[i] = strides ? strides[i] : 1;
    lo[i] = pad_lo ? pad_lo[i] : 0;
    hi[i] = pad_hi ? pad_hi[i] : 0;
    dl[i] = dilation ? dilation[i] : 1;
    if (w[i] < 1 || s[i] < 1 || dl[i] < 1)
      return tpu_error(TPU_E_INVALID,
                       "%s: window (%lld), stride (%lld) and dilation (%lld) "
                       "must be positive at dim %d",
                       nm, (long long)w[i], (long long)s[i], (long long)dl[i], i);
    if (lo[i] < 0 || hi[i] < 0)
      return tpu_error(TPU_E_INVALID, "%s: negative padding at dim %d", nm, i);
    os[i] = window_out(x->sizes[i], 1, lo[i], hi[i], w[i], dl[i], s[i]);
  }
  return TPU_OK;
}

static tpuir_val window_node(tpuir_graph *g, int op, int kind, tpuir_val x,
                             int dtype, int rank, const int64_t *w,
                             const int64_t *s, const int64_t *lo,
                             const int64_t *hi, const int64_t *dl,
                             const int64_t *os, int index_dims,
                             const char *nm) {
  tpuir_node *nd = tpuir__new_node(g, op);
  if (!nd) return tpu_error(TPU_E_OOM, "%s: out of host memory", nm);
  nd->dtype = dtype;
  nd->ndim = rank;
  for (int i = 0; i < rank; i++) {
    nd->sizes[i] = os[i];
    nd->a[i] = w[i];
    nd->b[i] = s[i];
    nd->c[i] = lo[i];
    nd->c[8 + i] = hi[i];
    nd->d[i] = dl[i];
  }
  nd->na = rank;
  nd->kind = kind;
  nd->dim = index_dims;
  nd->nin = 1;
  nd->in[0] = x;
  return tpuir__commit(g);
}

/* StableHLO reduce_window (SUM / MAX) over every dim of x. */
tpuir_val tpuir_reduce_window(tpuir_graph *g, int kind, tpuir_val x,
                              const int64_t *window, const int64_t *strides,
                              const int64_t *pad_lo, const int64_t *pad_hi,
                              const int64_t *dilation) {
  const char *nm = "reduce_window";
  const tpuir_node *xn = NULL;
  int rc = tpuir__operand(g, x, nm, &xn);
  if (rc) return rc;
  if (kind != TPUIR_RED_SUM && kind != TPUIR_RED_MAX)
    return tpu_error(TPU_E_INVALID, "reduce_window: kind must be sum or max, got %d",
                     kind);
  int64_t w[WIN_MAX_RANK], s[WIN_MAX_RANK], lo[WIN_MAX_RANK],
      hi[WIN_MAX_RANK], dl[WIN_MAX_RANK], os[WIN_MAX_RANK];
  if ((rc = window_attrs(nm, xn, window, strides, pad_lo, pad_hi, dilation, w,
                         s, lo, hi, dl, os)))
    return rc;
  return window_node(g, TPUIR_REDUCE_WINDOW, kind, x, xn->dtype, xn->ndim, w,
                     s, lo, hi, dl, os, 0, nm);
}

/* Max-pool indices (int64, row-major over the last index_dims dims). */
tpuir_val tpuir_window_argmax(tpuir_graph *g, tpuir_val x,
                              const int64_t *window, const int64_t *strides,
                              const int64_t *pad_lo, const int64_t *pad_hi,
                              const int64_t *dilation, int index_dims) {
  const char *nm = "window_argmax";
  const tpuir_node *xn = NULL;
  int rc = tpuir__operand(g, x, nm, &xn);
  if (rc) return rc;
  if (index_dims < 0 || index_dims > xn->ndim)
    return tpu_error(TPU_E_INVALID, "window_argmax: index_dims %d out of range "
                     "for rank %d", index_dims, (int)xn->ndim);
  int64_t w[WIN_MAX_RANK], s[WIN_MAX_RANK], lo[WIN_MAX_RANK],
      hi[WIN_MAX_RANK], dl[WIN_MAX_RANK], os[WIN_MAX_RANK];
  if ((rc = window_attrs(nm, xn, window, strides, pad_lo, pad_hi, dilation, w,
                         s, lo, hi, dl, os)))
    return rc;
  return window_node(g, TPUIR_WINDOW_ARGMAX, TPUIR_RED_MAX, x, TPU_I64,
                     xn->ndim, w, s, lo, hi, dl, os, index_dims, nm);
}

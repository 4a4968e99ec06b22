/* lower/nn.c - neural-network ops: softmax/log_softmax (+ backward),
 * layer norm, group norm backward and batch norm (+ backward). The losses
 * are in lower/loss.c.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "lower/internal.h"

enum {
  N_SOFTMAX = 1, N_LOG_SOFTMAX, N_SOFTMAX_BW, N_LOG_SOFTMAX_BW,
  N_BN_NATIVE, N_BN_LEGIT, N_BN_NO_STATS, N_BN_WITH_UPDATE,
  N_BN_BW_NATIVE, N_BN_BW
};

/* ---- softmax ------------------------------------------------------------ */

tpuir_val tpulw__softmax(tpulw__b *b, tpuir_val x, uint32_t m, int log) {
  tpuir_val sh = tpulw__bin(b, TPUIR_SUB, x, tpulw__reduce_dims(b, TPUIR_RED_MAX, x, m, 1));
  tpuir_val e = tpulw__un(b, TPUIR_EXP, sh);
  tpuir_val sum = tpulw__reduce_dims(b, TPUIR_RED_SUM, e, m, 1);
  return log ? tpulw__bin(b, TPUIR_SUB, sh, tpulw__un(b, TPUIR_LOG, sum))
             : tpulw__bin(b, TPUIR_DIV, e, sum);
}

static int softmax_fn(tpulw__b *b) {
  const tpulw_tensor *self = tpulw__tensor_arg(b, "self");
  if (!self) return tpu_error(TPU_E_UNSUPPORTED, "softmax: no self");
  int dt = self->view.dtype;
  int rc = tpulw__float_only(b, dt);
  if (rc < 0) return rc;
  int rdt = dt;
  if (tpulw__int(b, "half_to_float", 0) && (dt == TPU_F16 || dt == TPU_BF16)) rdt = TPU_F32;
  int cdt = tpulw__opmath(dt);
  tpuir_val x = tpulw__convert(b, tpulw__tensor(b, self), cdt);
  tpulw__shape s = tpulw__info(b, x);
  int dim;
  rc = tpulw__wrap_dim(tpulw__int(b, "dim", -1), s.ndim, &dim);
  if (rc < 0) return rc;
  if (tpulw__numel(&s) == 0) return tpulw__result_as(b, x, rdt);
  return tpulw__result_as(b, tpulw__softmax(b, x, s.ndim ? 1u << dim : 0, b->op == N_LOG_SOFTMAX),
                          rdt);
}

static int softmax_bw_fn(tpulw__b *b) {
  const tpulw_tensor *g = tpulw__tensor_arg(b, "grad_output");
  const tpulw_tensor *y = tpulw__tensor_arg(b, "output");
  if (!g || !y) return tpu_error(TPU_E_UNSUPPORTED, "softmax backward: missing operand");
  int dt = tpulw__dtype_arg(b, "input_dtype", g->view.dtype);
  int rc = tpulw__float_only(b, g->view.dtype);
  if (rc < 0) return rc;
  int cdt = tpulw__opmath(g->view.dtype);
  tpuir_val gv = tpulw__convert(b, tpulw__tensor(b, g), cdt);
  tpuir_val yv = tpulw__convert(b, tpulw__tensor(b, y), cdt);
  tpulw__shape s = tpulw__info(b, gv);
  int dim;
  rc = tpulw__wrap_dim(tpulw__int(b, "dim", -1), s.ndim, &dim);
  if (rc < 0) return rc;
  uint32_t m = s.ndim ? 1u << dim : 0;
  tpuir_val r;
  if (b->op == N_SOFTMAX_BW) {
    tpuir_val dot = tpulw__reduce_dims(b, TPUIR_RED_SUM, tpulw__bin(b, TPUIR_MUL, gv, yv), m, 1);
    r = tpulw__bin(b, TPUIR_MUL, yv, tpulw__bin(b, TPUIR_SUB, gv, dot));
  } else {
    tpuir_val gs = tpulw__reduce_dims(b, TPUIR_RED_SUM, gv, m, 1);
    r = tpulw__bin(b, TPUIR_SUB, gv, tpulw__bin(b, TPUIR_MUL, tpulw__un(b, TPUIR_EXP, yv), gs));
  }
  return tpulw__result_as(b, r, dt);
}

/* ---- layer norm --------------------------------------------------------- */

static int ln_axis(const tpulw__b *b, const tpulw_tensor *in, int *axis) {
  int n;
  int64_t scratch;
  const int64_t *ns = tpulw__ints(b, "normalized_shape", &n, &scratch);
  const tpu_view *v = &in->view;
  if (n <= 0)
    return tpu_error(TPU_E_INVALID,
                     "Expected normalized_shape to be at least 1-dimensional, i.e., containing "
                     "at least one element, but got normalized_shape = []");
  int ok = n <= v->ndim;
  for (int i = 0; ok && i < n; i++)
    if (v->sizes[v->ndim - n + i] != ns[i]) ok = 0;
  if (!ok) {
    char a[256], c[256];
    size_t k = 0, q = 0;
    a[0] = c[0] = 0;
    for (int i = 0; i < n && k < sizeof a; i++)
      k += (size_t)snprintf(a + k, sizeof a - k, "%s%lld", i ? ", " : "", (long long)ns[i]);
    for (int i = 0; i < v->ndim && q < sizeof c; i++)
      q += (size_t)snprintf(c + q, sizeof c - q, "%s%lld", i ? ", " : "", (long long)v->sizes[i]);
    return tpu_error(TPU_E_INVALID,
                     "Given normalized_shape=[%s], expected input with shape "
                     "[*, %s], but got input of size[%s]", a, a, c);
  }
  *axis = v->ndim - n;
  return TPU_OK;
}

static tpuir_val opt_param(tpulw__b *b, const char *name, int cdt) {
  const tpulw_tensor *t = tpulw__tensor_arg(b, name);
  if (!t) return -1000; /* absent */
  return tpulw__convert(b, tpulw__tensor(b, t), cdt);
}
#define ABSENT(v) ((v) == -1000)

tpuir_val tpulw__layer_norm(tpulw__b *b, tpuir_val x, int axis, const tpuir_val *w,
                           const tpuir_val *bias, double eps, tpuir_val *mean, tpuir_val *rstd) {
  if (x < 0) return x;
  tpulw__shape s = tpulw__info(b, x);
  uint32_t m = 0;
  int64_t n = 1;
  for (int d = axis; d < s.ndim; d++) {
    m |= 1u << d;
    n *= s.sizes[d];
  }
  tpuir_val mu = tpulw__bin_c(b, TPUIR_DIV, tpulw__reduce_dims(b, TPUIR_RED_SUM, x, m, 1), (double)n);
  tpuir_val d = tpulw__bin(b, TPUIR_SUB, x, mu);
  tpuir_val var = tpulw__bin_c(b, TPUIR_DIV, tpulw__reduce_dims(b, TPUIR_RED_SUM, tpulw__bin(b, TPUIR_MUL, d, d), m, 1),
                           (double)n);
  tpuir_val rs = tpulw__un(b, TPUIR_RSQRT, tpulw__bin_c(b, TPUIR_ADD, var, eps));
  tpuir_val y = tpulw__bin(b, TPUIR_MUL, d, rs);
  if (w) y = tpulw__bin(b, TPUIR_MUL, y, *w);
  if (bias) y = tpulw__bin(b, TPUIR_ADD, y, *bias);
  if (mean) *mean = mu;
  if (rstd) *rstd = rs;
  return y;
}

static int layer_norm_fn(tpulw__b *b) {
  const tpulw_tensor *in = tpulw__tensor_arg(b, "input");
  if (!in) return tpu_error(TPU_E_UNSUPPORTED, "layer_norm: no input");
  int dt = in->view.dtype;
  int rc = tpulw__float_only(b, dt);
  if (rc < 0) return rc;
  int axis;
  rc = ln_axis(b, in, &axis);
  if (rc < 0) return rc;
  const tpulw_tensor *w = tpulw__tensor_arg(b, "weight");
  int sdt = dt; /* dtype of mean/rstd */
  if ((dt == TPU_F16 || dt == TPU_BF16) && w && w->view.dtype == TPU_F32) sdt = TPU_F32;
  int cdt = tpulw__opmath(dt);
  tpuir_val x = tpulw__convert(b, tpulw__tensor(b, in), cdt);
  tpuir_val wv = opt_param(b, "weight", cdt), bv = opt_param(b, "bias", cdt), mean, rstd;
  tpuir_val y = tpulw__layer_norm(b, x, axis, ABSENT(wv) ? NULL : &wv, ABSENT(bv) ? NULL : &bv,
                                  tpulw__float(b, "eps", 1e-5), &mean, &rstd);
  if ((rc = tpulw__result_as(b, y, dt)) < 0) return rc;
  if ((rc = tpulw__result_as(b, mean, sdt)) < 0) return rc;
  return tpulw__result_as(b, rstd, sdt);
}

static int mask_bit(const tpulw__b *b, int i) {
  int n;
  int64_t scratch;
  const int64_t *mk = tpulw__ints(b, "output_mask", &n, &scratch);
  return (mk && i < n) ? mk[i] != 0 : 1;
}

static int layer_norm_bw_fn(tpulw__b *b) {
  const tpulw_tensor *go = tpulw__tensor_arg(b, "grad_out");
  const tpulw_tensor *in = tpulw__tensor_arg(b, "input");
  const tpulw_tensor *mt = tpulw__tensor_arg(b, "mean"), *rt = tpulw__tensor_arg(b, "rstd");
  if (!go || !in || !mt || !rt)
    return tpu_error(TPU_E_UNSUPPORTED, "layer_norm_backward: missing operand");
  int dt = in->view.dtype;
  int rc = tpulw__float_only(b, dt);
  if (rc < 0) return rc;
  int axis;
  rc = ln_axis(b, in, &axis);
  if (rc < 0) return rc;
  const tpulw_tensor *w = tpulw__tensor_arg(b, "weight");
  const tpulw_tensor *bs = tpulw__tensor_arg(b, "bias");
  int cdt = tpulw__opmath(dt);
  tpuir_val x = tpulw__convert(b, tpulw__tensor(b, in), cdt);
  tpuir_val g = tpulw__convert(b, tpulw__tensor(b, go), cdt);
  tpuir_val mean = tpulw__convert(b, tpulw__tensor(b, mt), cdt);
  tpuir_val rstd = tpulw__convert(b, tpulw__tensor(b, rt), cdt);
  tpulw__shape s = tpulw__info(b, x);
  uint32_t inner = 0, outer = 0;
  int64_t n = 1;
  for (int d = 0; d < s.ndim; d++) {
    if (d >= axis) {
      inner |= 1u << d;
      n *= s.sizes[d];
    } else {
      outer |= 1u << d;
    }
  }
  tpuir_val xhat = tpulw__bin(b, TPUIR_MUL, tpulw__bin(b, TPUIR_SUB, x, mean), rstd);
  tpuir_val gw = g;
  if (w) gw = tpulw__bin(b, TPUIR_MUL, g, tpulw__convert(b, tpulw__tensor(b, w), cdt));
  /* grad_input = rstd * (gw - mean(gw) - xhat * mean(gw * xhat)) */
  tpuir_val m1 = tpulw__bin_c(b, TPUIR_DIV, tpulw__reduce_dims(b, TPUIR_RED_SUM, gw, inner, 1), (double)n);
  tpuir_val m2 = tpulw__bin_c(b, TPUIR_DIV,
                          tpulw__reduce_dims(b, TPUIR_RED_SUM, tpulw__bin(b, TPUIR_MUL, gw, xhat), inner, 1),
                          (double)n);
  tpuir_val gi = tpulw__bin(b, TPUIR_MUL, rstd,
                        tpulw__bin(b, TPUIR_SUB, tpulw__bin(b, TPUIR_SUB, gw, m1),
                               tpulw__bin(b, TPUIR_MUL, xhat, m2)));
  if (!mask_bit(b, 0)) gi = tpulw__full(b, cdt, s.ndim, s.sizes, 0);
  if ((rc = tpulw__result_as(b, gi, dt)) < 0) return rc;
  int64_t ns[TPU_MAX_DIMS];
  int nn = s.ndim - axis;
  for (int i = 0; i < nn; i++) ns[i] = s.sizes[axis + i];
  int wdt = w ? w->view.dtype : dt, bdt = bs ? bs->view.dtype : wdt;
  tpuir_val gwt = mask_bit(b, 1)
                      ? tpulw__reduce_dims(b, TPUIR_RED_SUM, tpulw__bin(b, TPUIR_MUL, g, xhat), outer, 0)
                      : tpulw__full(b, cdt, nn, ns, 0);
  if ((rc = tpulw__result_as(b, tpulw__reshape(b, gwt, nn, ns), wdt)) < 0) return rc;
  tpuir_val gbt = mask_bit(b, 2) ? tpulw__reduce_dims(b, TPUIR_RED_SUM, g, outer, 0)
                                 : tpulw__full(b, cdt, nn, ns, 0);
  return tpulw__result_as(b, tpulw__reshape(b, gbt, nn, ns), bdt);
}

/* native_group_norm_backward: input [N, C, *] viewed as [N, G, C/G, HxW];
 * mean/rstd [N, G]; weight [C]. */
static int group_norm_bw_fn(tpulw__b *b) {
  const tpulw_tensor *go = tpulw__tensor_arg(b, "grad_out");
  const tpulw_tensor *in = tpulw__tensor_arg(b, "input");
  const tpulw_tensor *mt = tpulw__tensor_arg(b, "mean"), *rt = tpulw__tensor_arg(b, "rstd");
  if (!go || !in || !mt || !rt)
    return tpu_error(TPU_E_UNSUPPORTED, "native_group_norm_backward: missing operand");
  int dt = in->view.dtype;
  int rc = tpulw__float_only(b, dt);
  if (rc < 0) return rc;
  int64_t n = tpulw__int(b, "N", 0), c = tpulw__int(b, "C", 0), hw = tpulw__int(b, "HxW", 0);
  int64_t grp = tpulw__int(b, "group", 1);
  if (grp <= 0 || c % grp != 0 || n * c * hw != tpu_view_numel(&in->view))
    return tpu_error(TPU_E_INVALID, "native_group_norm_backward: bad N/C/HxW/group");
  const tpulw_tensor *w = tpulw__tensor_arg(b, "weight");
  int cdt = tpulw__opmath(dt);
  int64_t s4[4] = {n, grp, c / grp, hw}, s2[4] = {n, grp, 1, 1}, wc[4] = {1, grp, c / grp, 1};
  tpuir_val x = tpulw__reshape(b, tpulw__convert(b, tpulw__tensor(b, in), cdt), 4, s4);
  tpuir_val g = tpulw__reshape(b, tpulw__convert(b, tpulw__tensor(b, go), cdt), 4, s4);
  tpuir_val mean = tpulw__reshape(b, tpulw__convert(b, tpulw__tensor(b, mt), cdt), 4, s2);
  tpuir_val rstd = tpulw__reshape(b, tpulw__convert(b, tpulw__tensor(b, rt), cdt), 4, s2);
  tpuir_val xhat = tpulw__bin(b, TPUIR_MUL, tpulw__bin(b, TPUIR_SUB, x, mean), rstd);
  tpuir_val gw = g;
  if (w) gw = tpulw__bin(b, TPUIR_MUL, g, tpulw__reshape(b, tpulw__convert(b, tpulw__tensor(b, w), cdt), 4, wc));
  double cnt = (double)(c / grp * hw);
  uint32_t inner = (1u << 2) | (1u << 3);
  tpuir_val m1 = tpulw__bin_c(b, TPUIR_DIV, tpulw__reduce_dims(b, TPUIR_RED_SUM, gw, inner, 1), cnt);
  tpuir_val m2 = tpulw__bin_c(b, TPUIR_DIV,
                          tpulw__reduce_dims(b, TPUIR_RED_SUM, tpulw__bin(b, TPUIR_MUL, gw, xhat), inner, 1),
                          cnt);
  tpuir_val gi = tpulw__bin(b, TPUIR_MUL, rstd,
                        tpulw__bin(b, TPUIR_SUB, tpulw__bin(b, TPUIR_SUB, gw, m1),
                               tpulw__bin(b, TPUIR_MUL, xhat, m2)));
  if (!mask_bit(b, 0)) gi = tpulw__full(b, cdt, 4, s4, 0);
  gi = tpulw__reshape(b, gi, in->view.ndim, in->view.sizes);
  if ((rc = tpulw__result_as(b, gi, dt)) < 0) return rc;
  uint32_t outer = (1u << 0) | (1u << 3);
  int pdt = w ? w->view.dtype : dt;
  tpuir_val gwt = mask_bit(b, 1)
                      ? tpulw__reduce_dims(b, TPUIR_RED_SUM, tpulw__bin(b, TPUIR_MUL, g, xhat), outer, 0)
                      : tpulw__full(b, cdt, 1, &c, 0);
  if ((rc = tpulw__result_as(b, tpulw__reshape(b, gwt, 1, &c), pdt)) < 0) return rc;
  tpuir_val gbt = mask_bit(b, 2) ? tpulw__reduce_dims(b, TPUIR_RED_SUM, g, outer, 0)
                                 : tpulw__full(b, cdt, 1, &c, 0);
  return tpulw__result_as(b, tpulw__reshape(b, gbt, 1, &c), pdt);
}

/* ---- batch norm --------------------------------------------------------- */

/* per-channel [C] value -> shape [1, C, 1, ...] of rank nd */
static tpuir_val chan(tpulw__b *b, tpuir_val v, int nd) {
  tpulw__shape s = tpulw__info(b, v);
  int64_t sizes[TPU_MAX_DIMS];
  for (int d = 0; d < nd; d++) sizes[d] = 1;
  if (nd > 1) sizes[1] = s.sizes[0];
  return tpulw__reshape(b, v, nd, sizes);
}

static int batch_norm_fn(tpulw__b *b) {
  const tpulw_tensor *in = tpulw__tensor_arg(b, "input");
  if (!in) return tpu_error(TPU_E_UNSUPPORTED, "batch_norm: no input");
  int dt = in->view.dtype;
  int rc = tpulw__float_only(b, dt);
  if (rc < 0) return rc;
  if (in->view.ndim < 2)
    return tpu_error(TPU_E_UNSUPPORTED, "batch_norm: input of rank %d", in->view.ndim);
  int training = b->op == N_BN_WITH_UPDATE || b->op == N_BN_NO_STATS
                     ? 1 : (int)tpulw__int(b, "training", 0);
  const tpulw_tensor *rm = tpulw__tensor_arg(b, "running_mean");
  const tpulw_tensor *rv = tpulw__tensor_arg(b, "running_var");
  if (b->op == N_BN_NO_STATS) rm = rv = NULL;
  if (!training && (!rm || !rv))
    return tpu_error(TPU_E_INVALID, "running_mean must be defined in evaluation mode");
  double eps = tpulw__float(b, "eps", 1e-5), mom = tpulw__float(b, "momentum", 0.1);
  const tpulw_tensor *w = tpulw__tensor_arg(b, "weight");
  int sdt = dt;
  if ((dt == TPU_F16 || dt == TPU_BF16) && w && w->view.dtype == TPU_F32) sdt = TPU_F32;
  int cdt = tpulw__opmath(dt);
  tpuir_val x = tpulw__convert(b, tpulw__tensor(b, in), cdt);
  tpulw__shape s = tpulw__info(b, x);
  int nd = s.ndim;
  uint32_t m = tpulw__all_mask(nd) & ~2u;
  int64_t n = 1;
  for (int d = 0; d < nd; d++)
    if (d != 1) n *= s.sizes[d];
  tpuir_val mean, invstd, var = -1;
  if (training) {
    mean = tpulw__bin_c(b, TPUIR_DIV, tpulw__reduce_dims(b, TPUIR_RED_SUM, x, m, 0), (double)n);
    tpuir_val d = tpulw__bin(b, TPUIR_SUB, x, chan(b, mean, nd));
    var = tpulw__bin_c(b, TPUIR_DIV, tpulw__reduce_dims(b, TPUIR_RED_SUM, tpulw__bin(b, TPUIR_MUL, d, d), m, 0),
                   (double)n);
    invstd = tpulw__un(b, TPUIR_RSQRT, tpulw__bin_c(b, TPUIR_ADD, var, eps));
  } else {
    mean = tpulw__convert(b, tpulw__tensor(b, rm), cdt);
    invstd = tpulw__un(b, TPUIR_RSQRT,
                   tpulw__bin_c(b, TPUIR_ADD, tpulw__convert(b, tpulw__tensor(b, rv), cdt), eps));
  }
  tpuir_val y = tpulw__bin(b, TPUIR_MUL, tpulw__bin(b, TPUIR_SUB, x, chan(b, mean, nd)), chan(b, invstd, nd));
  tpuir_val wv = opt_param(b, "weight", cdt), bv = opt_param(b, "bias", cdt);
  if (!ABSENT(wv)) y = tpulw__bin(b, TPUIR_MUL, y, chan(b, wv, nd));
  if (!ABSENT(bv)) y = tpulw__bin(b, TPUIR_ADD, y, chan(b, bv, nd));
  if ((rc = tpulw__result_as(b, y, dt)) < 0) return rc;
  int64_t zero[1] = {0};
  if (training) {
    if ((rc = tpulw__result_as(b, mean, sdt)) < 0) return rc;
    if ((rc = tpulw__result_as(b, invstd, sdt)) < 0) return rc;
  } else {
    if ((rc = tpulw__result(b, tpulw__full(b, sdt, 1, zero, 0))) < 0) return rc;
    if ((rc = tpulw__result(b, tpulw__full(b, sdt, 1, zero, 0))) < 0) return rc;
  }
  if (b->op == N_BN_WITH_UPDATE)
    if ((rc = tpulw__result(b, tpulw__full(b, TPU_U8, 1, zero, 0))) < 0) return rc;
  if (training && rm && rv) { /* running stats, updated in place */
    tpuir_val rmv = tpulw__convert(b, tpulw__tensor(b, rm), cdt);
    tpuir_val rvv = tpulw__convert(b, tpulw__tensor(b, rv), cdt);
    double unb = n > 1 ? (double)n / (double)(n - 1) : INFINITY;
    tpuir_val nm = tpulw__bin(b, TPUIR_ADD, tpulw__bin_c(b, TPUIR_MUL, rmv, 1 - mom),
                          tpulw__bin_c(b, TPUIR_MUL, mean, mom));
    tpuir_val nv = tpulw__bin(b, TPUIR_ADD, tpulw__bin_c(b, TPUIR_MUL, rvv, 1 - mom),
                          tpulw__bin_c(b, TPUIR_MUL, tpulw__bin_c(b, TPUIR_MUL, var, unb), mom));
    if ((rc = tpulw__result_to(b, nm, "running_mean")) < 0) return rc;
    if ((rc = tpulw__result_to(b, nv, "running_var")) < 0) return rc;
  } else {
    tpulw__not_out(b, "running_mean");
    tpulw__not_out(b, "running_var");
  }
  return TPU_OK;
}

static int batch_norm_bw_fn(tpulw__b *b) {
  const tpulw_tensor *go = tpulw__tensor_arg(b, "grad_out");
  const tpulw_tensor *in = tpulw__tensor_arg(b, "input");
  if (!go || !in) return tpu_error(TPU_E_UNSUPPORTED, "batch_norm_backward: missing operand");
  int dt = in->view.dtype;
  int rc = tpulw__float_only(b, dt);
  if (rc < 0) return rc;
  if (in->view.ndim < 2) return tpu_error(TPU_E_UNSUPPORTED, "batch_norm_backward: rank");
  int train = (int)tpulw__int(b, b->op == N_BN_BW ? "update" : "train", 0);
  const char *sv_name = b->op == N_BN_BW ? "save_var" : "save_invstd";
  const tpulw_tensor *sm = tpulw__tensor_arg(b, "save_mean"), *si = tpulw__tensor_arg(b, sv_name);
  const tpulw_tensor *rm = tpulw__tensor_arg(b, "running_mean"), *rv = tpulw__tensor_arg(b, "running_var");
  const tpulw_tensor *w = tpulw__tensor_arg(b, "weight");
  double eps = tpulw__float(b, "eps", 1e-5);
  int cdt = tpulw__opmath(dt);
  tpuir_val x = tpulw__convert(b, tpulw__tensor(b, in), cdt);
  tpuir_val g = tpulw__convert(b, tpulw__tensor(b, go), cdt);
  tpulw__shape s = tpulw__info(b, x);
  int nd = s.ndim;
  uint32_t m = tpulw__all_mask(nd) & ~2u;
  int64_t n = 1;
  for (int d = 0; d < nd; d++)
    if (d != 1) n *= s.sizes[d];
  tpuir_val mean, invstd;
  if (train) {
    if (!sm || !si) return tpu_error(TPU_E_UNSUPPORTED, "batch_norm_backward: no saved stats");
    mean = tpulw__convert(b, tpulw__tensor(b, sm), cdt);
    invstd = tpulw__convert(b, tpulw__tensor(b, si), cdt);
  } else {
    if (!rm || !rv) return tpu_error(TPU_E_UNSUPPORTED, "batch_norm_backward: no running stats");
    mean = tpulw__convert(b, tpulw__tensor(b, rm), cdt);
    invstd = tpulw__un(b, TPUIR_RSQRT, tpulw__bin_c(b, TPUIR_ADD, tpulw__convert(b, tpulw__tensor(b, rv), cdt), eps));
  }
  tpuir_val wv = w ? tpulw__convert(b, tpulw__tensor(b, w), cdt) : tpulw__const(b, cdt, 1);
  tpuir_val xhat = tpulw__bin(b, TPUIR_MUL, tpulw__bin(b, TPUIR_SUB, x, chan(b, mean, nd)),
                          chan(b, invstd, nd));
  tpuir_val gsum = tpulw__reduce_dims(b, TPUIR_RED_SUM, g, m, 0);
  tpuir_val gx = tpulw__reduce_dims(b, TPUIR_RED_SUM, tpulw__bin(b, TPUIR_MUL, g, xhat), m, 0);
  tpuir_val scale = tpulw__bin(b, TPUIR_MUL, invstd, wv); /* [C] */
  if (!w) scale = invstd;
  tpuir_val gi;
  if (train) {
    tpuir_val t = tpulw__bin(b, TPUIR_SUB, g, chan(b, tpulw__bin_c(b, TPUIR_DIV, gsum, (double)n), nd));
    t = tpulw__bin(b, TPUIR_SUB, t, tpulw__bin(b, TPUIR_MUL, xhat,
                                       chan(b, tpulw__bin_c(b, TPUIR_DIV, gx, (double)n), nd)));
    gi = tpulw__bin(b, TPUIR_MUL, t, chan(b, scale, nd));
  } else {
    gi = tpulw__bin(b, TPUIR_MUL, g, chan(b, scale, nd));
  }
  if (!mask_bit(b, 0)) gi = tpulw__full(b, cdt, s.ndim, s.sizes, 0);
  if ((rc = tpulw__result_as(b, gi, dt)) < 0) return rc;
  int pdt = w ? w->view.dtype : dt;
  int64_t c[1] = {s.sizes[1]};
  if ((rc = tpulw__result_as(b, mask_bit(b, 1) ? gx : tpulw__full(b, cdt, 1, c, 0), pdt)) < 0) return rc;
  return tpulw__result_as(b, mask_bit(b, 2) ? gsum : tpulw__full(b, cdt, 1, c, 0), pdt);
}

const tpulw__row tpulw__rows_nn[] = {
    {"_softmax", softmax_fn, N_SOFTMAX}, {"_softmax.out", softmax_fn, N_SOFTMAX},
    {"_log_softmax", softmax_fn, N_LOG_SOFTMAX}, {"_log_softmax.out", softmax_fn, N_LOG_SOFTMAX},
    {"_softmax_backward_data", softmax_bw_fn, N_SOFTMAX_BW},
    {"_softmax_backward_data.out", softmax_bw_fn, N_SOFTMAX_BW},
    {"_log_softmax_backward_data", softmax_bw_fn, N_LOG_SOFTMAX_BW},
    {"_log_softmax_backward_data.out", softmax_bw_fn, N_LOG_SOFTMAX_BW},
    {"native_layer_norm", layer_norm_fn, 0}, {"native_layer_norm.out", layer_norm_fn, 0},
    {"native_layer_norm_backward", layer_norm_bw_fn, 0},
    {"native_layer_norm_backward.out", layer_norm_bw_fn, 0},
    {"native_group_norm_backward", group_norm_bw_fn, 0},
    {"native_group_norm_backward.out", group_norm_bw_fn, 0},
    {"native_batch_norm", batch_norm_fn, N_BN_NATIVE},
    {"native_batch_norm.out", batch_norm_fn, N_BN_NATIVE},
    {"_native_batch_norm_legit", batch_norm_fn, N_BN_LEGIT},
    {"_native_batch_norm_legit.out", batch_norm_fn, N_BN_LEGIT},
    {"_native_batch_norm_legit.no_stats", batch_norm_fn, N_BN_NO_STATS},
    {"_native_batch_norm_legit.no_stats_out", batch_norm_fn, N_BN_NO_STATS},
    {"_batch_norm_with_update", batch_norm_fn, N_BN_WITH_UPDATE},
    {"_batch_norm_with_update.out", batch_norm_fn, N_BN_WITH_UPDATE},
    {"native_batch_norm_backward", batch_norm_bw_fn, N_BN_BW_NATIVE},
    {"native_batch_norm_backward.out", batch_norm_bw_fn, N_BN_BW_NATIVE},
    {"batch_norm_backward", batch_norm_bw_fn, N_BN_BW},
};
const int tpulw__nrows_nn = sizeof tpulw__rows_nn / sizeof tpulw__rows_nn[0];

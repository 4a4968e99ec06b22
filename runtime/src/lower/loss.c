/* lower/loss.c - loss functions (+ backward): nll_loss / nll_loss2d,
 * mse / smooth_l1 / huber / binary_cross_entropy (pointwise, reduced with
 * reduction none / mean / sum), multi_margin_loss,
 * multilabel_margin_loss_forward, and _ctc_loss / _ctc_loss_backward
 * (int-list lengths; the alpha / beta recursions unrolled over time,
 * vectorized over batch and extended-target positions).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "lower/internal.h"

enum {
  L_MSE = 1, L_MSE_BW, L_SMOOTH_L1, L_SMOOTH_L1_BW, L_HUBER, L_HUBER_BW,
  L_BCE, L_BCE_BW, L_MULTI_MARGIN, L_MULTI_MARGIN_BW, L_MLML, L_MLML_BW
};

enum { RED_NONE = 0, RED_MEAN = 1, RED_SUM = 2 };

/* ---- nll_loss ----------------------------------------------------------- */

typedef struct nll_ctx {
  tpuir_val x;      /* [N, C, ...] in cdt */
  tpuir_val tgt;    /* target [N, ...] int64, ignored -> 0 */
  tpuir_val valid;  /* target != ignore_index */
  tpuir_val w;      /* per-element weight [N, ...] (0 where ignored) */
  int one_d;        /* self was [C] */
  int cdt, dt;
  tpulw__shape ts;      /* target shape (after the 1-D fix-up) */
} nll_ctx;

static int nll_setup(tpulw__b *b, nll_ctx *c) {
  const tpulw_tensor *self = tpulw__tensor_arg(b, "self");
  const tpulw_tensor *tg = tpulw__tensor_arg(b, "target");
  if (!self || !tg) return tpu_error(TPU_E_UNSUPPORTED, "nll_loss: missing operand");
  c->dt = self->view.dtype;
  int rc = tpulw__float_only(b, c->dt);
  if (rc < 0) return rc;
  int tdt = tg->view.dtype;
  if (tdt != TPU_I64 && tdt != TPU_U8)
    return tpu_error(TPU_E_INVALID, "expected scalar type Long but found %s",
                     tpulw__torch_name(tdt));
  c->cdt = tpulw__opmath(c->dt);
  tpuir_val x = tpulw__convert(b, tpulw__tensor(b, self), c->cdt);
  tpuir_val t = tpulw__convert(b, tpulw__tensor(b, tg), TPU_I64);
  tpulw__shape xs = tpulw__info(b, x), ts = tpulw__info(b, t);
  int is2d = strncmp(b->base, "nll_loss2d", 10) == 0;
  c->one_d = 0;
  if (!is2d && xs.ndim == 1) {
    if (ts.ndim != 0)
      return tpu_error(TPU_E_INVALID,
                       "0D or 1D target tensor expected, multi-target not supported");
    int64_t s2[2] = {1, xs.sizes[0]}, s1[1] = {1};
    x = tpulw__reshape(b, x, 2, s2);
    t = tpulw__reshape(b, t, 1, s1);
    c->one_d = 1;
    xs = tpulw__info(b, x);
    ts = tpulw__info(b, t);
  }
  if (!is2d && xs.ndim != 2)
    return tpu_error(TPU_E_INVALID, "input tensor should be 1D or 2D");
  if (is2d && xs.ndim != 4)
    return tpu_error(TPU_E_INVALID,
                     "only batches of spatial targets supported (4D tensors) but "
                     "got targets of dimension: %d", ts.ndim);
  if (ts.ndim != xs.ndim - 1 || ts.sizes[0] != xs.sizes[0])
    return tpu_error(TPU_E_INVALID,
                     "Expected input batch_size (%lld) to match target batch_size (%lld).",
                     (long long)xs.sizes[0], (long long)(ts.ndim ? ts.sizes[0] : 0));
  for (int d = 1; d < ts.ndim; d++)
    if (ts.sizes[d] != xs.sizes[d + 1])
      return tpu_error(TPU_E_INVALID, "size mismatch (got input: %lldx%lld, target: %lld)",
                       (long long)xs.sizes[0], (long long)xs.sizes[1], (long long)ts.sizes[0]);
  int64_t ignore = tpulw__int(b, "ignore_index", -100);
  c->valid = tpulw__bin(b, TPUIR_NE, t, tpulw__const(b, TPU_I64, ignore));
  c->tgt = tpulw__sel(b, c->valid, t, tpulw__const(b, TPU_I64, 0));
  const tpulw_tensor *wt = tpulw__tensor_arg(b, "weight");
  tpuir_val w;
  if (wt) {
    int64_t n = tpulw__numel(&ts);
    tpuir_val wv = tpulw__convert(b, tpulw__tensor(b, wt), c->cdt);
    w = tpulw__reshape(b, tpuir_index_select(b->g, wv, 0, tpulw__reshape(b, c->tgt, 1, &n)),
                   ts.ndim, ts.sizes);
  } else {
    w = tpulw__full(b, c->cdt, ts.ndim, ts.sizes, 1);
  }
  c->w = tpulw__sel(b, c->valid, w, tpulw__const(b, c->cdt, 0));
  c->x = x;
  c->ts = ts;
  b->sync = 1; /* target range check: IndexError at the call */
  b->err_remap = LW_ERR_NLL_TARGET;
  return TPU_OK;
}

static int nll_fn(tpulw__b *b) {
  nll_ctx c;
  int rc = nll_setup(b, &c);
  if (rc < 0) return rc;
  tpulw__shape xs = tpulw__info(b, c.x);
  /* picked[i, ...] = x[i, t[i, ...], ...] */
  int64_t isz[TPU_MAX_DIMS];
  isz[0] = xs.sizes[0];
  isz[1] = 1;
  for (int d = 1; d < c.ts.ndim; d++) isz[d + 1] = c.ts.sizes[d];
  tpuir_val idx = tpulw__reshape(b, c.tgt, xs.ndim, isz);
  tpuir_val picked = tpulw__reshape(b, tpuir_gather(b->g, c.x, 1, idx), c.ts.ndim, c.ts.sizes);
  tpuir_val loss = tpulw__un(b, TPUIR_NEG, tpulw__bin(b, TPUIR_MUL, picked, c.w));
  int red = (int)tpulw__int(b, "reduction", RED_MEAN);
  uint32_t m = tpulw__all_mask(c.ts.ndim);
  tpuir_val out, tw;
  if (red == RED_NONE) {
    out = loss;
    if (c.one_d) out = tpulw__reshape(b, out, 0, NULL);
    tw = tpulw__const(b, c.cdt, 0);
  } else {
    tw = tpulw__reduce_dims(b, TPUIR_RED_SUM, c.w, m, 0);
    out = tpulw__reduce_dims(b, TPUIR_RED_SUM, loss, m, 0);
    if (red == RED_MEAN) out = tpulw__bin(b, TPUIR_DIV, out, tw);
  }
  if ((rc = tpulw__result_as(b, out, c.dt)) < 0) return rc;
  return tpulw__result_as(b, tw, c.dt);
}

static int nll_bw_fn(tpulw__b *b) {
  nll_ctx c;
  int rc = nll_setup(b, &c);
  if (rc < 0) return rc;
  b->sync = 0; /* no gather here */
  const tpulw_tensor *go = tpulw__tensor_arg(b, "grad_output");
  if (!go) return tpu_error(TPU_E_UNSUPPORTED, "nll_loss_backward: no grad_output");
  tpulw__shape xs = tpulw__info(b, c.x);
  int red = (int)tpulw__int(b, "reduction", RED_MEAN);
  tpuir_val g = tpulw__convert(b, tpulw__tensor(b, go), c.cdt);
  if (red == RED_NONE) {
    g = tpulw__reshape(b, g, c.ts.ndim, c.ts.sizes);
  } else {
    g = tpulw__reshape(b, g, 0, NULL);
    if (red == RED_MEAN) {
      const tpulw_tensor *tw = tpulw__tensor_arg(b, "total_weight");
      if (!tw) return tpu_error(TPU_E_UNSUPPORTED, "nll_loss_backward: no total_weight");
      g = tpulw__bin(b, TPUIR_DIV, g, tpulw__reshape(b, tpulw__convert(b, tpulw__tensor(b, tw), c.cdt), 0, NULL));
    }
  }
  tpuir_val gw = tpulw__un(b, TPUIR_NEG, tpulw__bin(b, TPUIR_MUL, c.w, g)); /* [N, ...] */
  int64_t isz[TPU_MAX_DIMS];
  isz[0] = xs.sizes[0];
  isz[1] = 1;
  for (int d = 1; d < c.ts.ndim; d++) isz[d + 1] = c.ts.sizes[d];
  tpuir_val cls = tpuir_iota(b->g, TPU_I64, xs.ndim, xs.sizes, 1);
  tpuir_val hit = tpulw__bin(b, TPUIR_EQ, cls, tpulw__reshape(b, c.tgt, xs.ndim, isz));
  tpuir_val r = tpulw__sel(b, hit, tpulw__reshape(b, gw, xs.ndim, isz), tpulw__const(b, c.cdt, 0));
  if (c.one_d) r = tpulw__reshape(b, r, 1, &xs.sizes[1]);
  return tpulw__result_as(b, r, c.dt);
}

/* ---- pointwise losses --------------------------------------------------- */

static tpuir_val reduce_loss(tpulw__b *b, tpuir_val l, int red) {
  if (red == RED_NONE) return l;
  tpulw__shape s = tpulw__info(b, l);
  tpuir_val r = tpulw__reduce_dims(b, TPUIR_RED_SUM, l, tpulw__all_mask(s.ndim), 0);
  if (red == RED_MEAN) r = tpulw__bin_c(b, TPUIR_DIV, r, (double)tpulw__numel(&s));
  return r;
}

static int loss_fn(tpulw__b *b) {
  tpulw__opnd ops[2] = {tpulw__opnd_arg(b, "self"), tpulw__opnd_arg(b, "target")};
  if (ops[0].kind != LW_OPND_TENSOR || ops[1].kind != LW_OPND_TENSOR)
    return tpu_error(TPU_E_UNSUPPORTED, "%s: missing operand", b->base);
  int bw = b->op == L_MSE_BW || b->op == L_SMOOTH_L1_BW || b->op == L_HUBER_BW ||
           b->op == L_BCE_BW;
  tpulw__opnd go = tpulw__opnd_arg(b, "grad_output");
  int dt;
  if (b->op == L_BCE || b->op == L_BCE_BW) {
    dt = ops[0].t->view.dtype;
  } else if (bw && go.kind == LW_OPND_TENSOR) {
    tpulw__opnd o3[3] = {go, ops[0], ops[1]};
    dt = tpulw__result_type(3, o3);
  } else {
    dt = tpulw__result_type(2, ops);
  }
  int rc = tpulw__float_only(b, dt);
  if (rc < 0) return rc;
  int cdt = tpulw__opmath(dt);
  tpuir_val x = tpulw__opnd_val(b, &ops[0], cdt), y = tpulw__opnd_val(b, &ops[1], cdt);
  int red = (int)tpulw__int(b, "reduction", RED_MEAN);
  tpuir_val v[2] = {x, y};
  if ((rc = tpulw__bcast_all(b, 2, v)) < 0) return rc;
  x = v[0];
  y = v[1];
  tpulw__shape s = tpulw__info(b, x);
  tpuir_val d = tpulw__bin(b, TPUIR_SUB, x, y), ad = tpulw__un(b, TPUIR_ABS, d), r;
  tpuir_val zero = tpulw__const(b, cdt, 0);
  double beta = tpulw__float(b, "beta", 1.0), delta = tpulw__float(b, "delta", 1.0);
  if (b->op == L_HUBER && !(delta > 0))
    return tpu_error(TPU_E_INVALID, "huber_loss does not support non-positive values for delta.");
  switch (b->op) {
  case L_MSE: r = tpulw__bin(b, TPUIR_MUL, d, d); break;
  case L_SMOOTH_L1:
    if (beta == 0) r = ad;
    else
      r = tpulw__sel(b, tpulw__bin_c(b, TPUIR_LT, ad, beta),
                 tpulw__bin_c(b, TPUIR_DIV, tpulw__bin_c(b, TPUIR_MUL, tpulw__bin(b, TPUIR_MUL, ad, ad), 0.5), beta),
                 tpulw__bin_c(b, TPUIR_SUB, ad, 0.5 * beta));
    break;
  case L_HUBER:
    r = tpulw__sel(b, tpulw__bin_c(b, TPUIR_LT, ad, delta),
               tpulw__bin_c(b, TPUIR_MUL, tpulw__bin(b, TPUIR_MUL, ad, ad), 0.5),
               tpulw__bin_c(b, TPUIR_MUL, tpulw__bin_c(b, TPUIR_SUB, ad, 0.5 * delta), delta));
    break;
  case L_BCE: {
    tpuir_val lx = tpulw__bin_c(b, TPUIR_MAX, tpulw__un(b, TPUIR_LOG, x), -100);
    tpuir_val l1x = tpulw__bin_c(b, TPUIR_MAX,
                             tpulw__un(b, TPUIR_LOG, tpulw__bin(b, TPUIR_SUB, tpulw__const(b, cdt, 1), x)), -100);
    r = tpulw__bin(b, TPUIR_ADD, tpulw__bin(b, TPUIR_MUL, y, lx),
               tpulw__bin(b, TPUIR_MUL, tpulw__bin(b, TPUIR_SUB, tpulw__const(b, cdt, 1), y), l1x));
    r = tpulw__un(b, TPUIR_NEG, r);
    break;
  }
  /* backward: d(loss)/dx, then * grad (/N for mean) */
  case L_MSE_BW: r = tpulw__bin_c(b, TPUIR_MUL, d, 2.0); break;
  case L_SMOOTH_L1_BW: {
    tpuir_val sg = tpulw__sel(b, tpulw__bin(b, TPUIR_GT, d, zero), tpulw__const(b, cdt, 1),
                          tpulw__sel(b, tpulw__bin(b, TPUIR_LT, d, zero), tpulw__const(b, cdt, -1), zero));
    r = beta == 0 ? sg : tpulw__sel(b, tpulw__bin_c(b, TPUIR_LT, ad, beta), tpulw__bin_c(b, TPUIR_DIV, d, beta), sg);
    break;
  }
  case L_HUBER_BW:
    r = tpulw__bin_c(b, TPUIR_MIN, tpulw__bin_c(b, TPUIR_MAX, d, -delta), delta);
    break;
  case L_BCE_BW: {
    tpuir_val den = tpulw__bin_c(b, TPUIR_MAX,
                             tpulw__bin(b, TPUIR_MUL, tpulw__bin(b, TPUIR_SUB, tpulw__const(b, cdt, 1), x), x),
                             1e-12);
    r = tpulw__bin(b, TPUIR_DIV, d, den);
    break;
  }
  default: return tpu_error(TPU_E_INTERNAL, "loss_fn: bad op");
  }
  if (b->op == L_BCE || b->op == L_BCE_BW) {
    const tpulw_tensor *w = tpulw__tensor_arg(b, "weight");
    if (w) r = tpulw__bin(b, TPUIR_MUL, r, tpulw__convert(b, tpulw__tensor(b, w), cdt));
  }
  if (!bw) return tpulw__result_as(b, reduce_loss(b, r, red), dt);
  if (go.kind != LW_OPND_TENSOR) return tpu_error(TPU_E_UNSUPPORTED, "no grad_output");
  tpuir_val g = tpulw__opnd_val(b, &go, cdt);
  r = tpulw__bin(b, TPUIR_MUL, r, g);
  if (red == RED_MEAN) r = tpulw__bin_c(b, TPUIR_DIV, r, (double)tpulw__numel(&s));
  return tpulw__result_as(b, r, dt);
}

/* ---- multi_margin_loss --------------------------------------------------- */

static int margin_shape(const tpulw__b *b, const tpu_view *v, int64_t *nframe, int64_t *dim) {
  char s1[256];
  int nd = v->ndim;
  if (!((nd == 2 && v->sizes[1] != 0) || (nd == 1 && v->sizes[0] != 0) || nd == 0))
    return tpu_error(TPU_E_INVALID, "Expected non-empty vector or matrix with optional 0-dim "
                     "batch size, but got: [%s]", tpulw__fmt_list(s1, sizeof s1, nd, v->sizes));
  *nframe = nd <= 1 ? 1 : v->sizes[0];
  *dim = nd == 0 ? 1 : v->sizes[nd - 1];
  (void)b;
  return TPU_OK;
}

static int multi_margin_fn(tpulw__b *b) {
  int bw = b->op == L_MULTI_MARGIN_BW;
  const tpulw_tensor *in = tpulw__tensor_arg(b, "self"), *tg = tpulw__tensor_arg(b, "target");
  const tpulw_tensor *wt = tpulw__tensor_arg(b, "weight");
  int rc;
  if ((rc = tpulw__need_tpu(b, in)) || (rc = tpulw__need_tpu(b, tg))) return rc;
  if (wt && (rc = tpulw__need_tpu(b, wt))) return rc;
  const tpu_view *v = &in->view;
  int dt = v->dtype;
  if ((rc = tpulw__float_only(b, dt))) return rc;
  tpulw__scalar ps, ms;
  double p = tpulw__scalar_arg(b, "p", &ps) ? ps.f : 1, margin = tpulw__scalar_arg(b, "margin", &ms) ? ms.f : 1;
  int red = (int)tpulw__int(b, "reduction", RED_MEAN);
  char s1[256];
  if (p != 1 && p != 2) return tpu_error(TPU_E_INVALID, "only p == 1 and p == 2 supported");
  int64_t nframe = 0, dim = 0;
  if ((rc = margin_shape(b, v, &nframe, &dim))) return rc;
  const tpu_view *tv = &tg->view;
  int64_t tn = 1;
  for (int i = 0; i < tv->ndim; i++) tn *= tv->sizes[i];
  if (!(tv->ndim <= 1 && tn == nframe)) {
    char s3[256];
    return tpu_error(TPU_E_INVALID, "multi_margin_loss: target tensor should be 1-D with size equal "
                     "to the number of input samples (batch size). Expected target size [%lld], but "
                     "got [%s]. Input has shape [%s].", (long long)nframe,
                     tpulw__fmt_list(s1, sizeof s1, tv->ndim, tv->sizes),
                     tpulw__fmt_list(s3, sizeof s3, v->ndim, v->sizes));
  }
  if (wt) {
    int64_t wn = 1;
    for (int i = 0; i < wt->view.ndim; i++) wn *= wt->view.sizes[i];
    if (!(wt->view.ndim <= 1 && wn == dim))
      return tpu_error(TPU_E_INVALID, "inconsistent weight size, expected %lld but got [%s]",
                       (long long)dim, tpulw__fmt_list(s1, sizeof s1, wt->view.ndim, wt->view.sizes));
  }
  if (tv->dtype != TPU_I64)
    return tpu_error(TPU_E_INVALID, "expected scalar type Long but found %s", tpulw__torch_name(tv->dtype));
  int cdt = tpulw__opmath(dt);
  int64_t s2[2] = {nframe, dim}, s1n[2] = {nframe, 1};
  tpuir_val x = tpulw__reshape(b, tpulw__convert(b, tpulw__tensor(b, in), cdt), 2, s2);
  tpuir_val y = tpulw__reshape(b, tpulw__convert(b, tpulw__tensor(b, tg), TPU_I64), 2, s1n);
  tpuir_val xy = tpuir_gather(b->g, x, 1, y);
  tpuir_val notyv = tpulw__bin(b, TPUIR_NE, tpuir_iota(b->g, TPU_I64, 2, s2, 1), y);
  tpuir_val z = tpulw__bin(b, TPUIR_ADD, tpulw__bin(b, TPUIR_SUB, tpulw__const(b, cdt, margin), xy), x);
  tpuir_val pos = tpulw__bin(b, TPUIR_AND, tpulw__bin_c(b, TPUIR_GT, z, 0), notyv);
  tpuir_val zero = tpulw__const(b, cdt, 0);
  tpuir_val wy = -1;
  if (wt) {
    int64_t wd = dim;
    tpuir_val w = tpulw__reshape(b, tpulw__convert(b, tpulw__tensor(b, wt), cdt), 1, &wd);
    wy = tpulw__reshape(b, tpuir_index_select(b->g, w, 0, tpulw__reshape(b, y, 1, &nframe)), 2, s1n);
  }
  b->sync = 1;
  b->err_remap = LW_ERR_RUNTIME;
  int64_t outn = nframe;
  int out_nd = (red == RED_NONE && tv->ndim > 0) ? 1 : 0;
  if (!bw) {
    tpuir_val h = p == 1 ? z : tpulw__bin(b, TPUIR_MUL, z, z);
    if (wt) h = tpulw__bin(b, TPUIR_MUL, h, wy);
    h = tpulw__sel(b, pos, h, zero);
    tpuir_val l = tpulw__bin_c(b, TPUIR_DIV, tpulw__reduce_dims(b, TPUIR_RED_SUM, h, 2u, 0), (double)dim);
    if (red == RED_NONE) return tpulw__result_as(b, tpulw__reshape(b, l, out_nd, &outn), dt);
    tpuir_val sum = tpulw__reduce_dims(b, TPUIR_RED_SUM, l, 1u, 0);
    if (red == RED_MEAN) sum = tpulw__bin_c(b, TPUIR_DIV, sum, (double)nframe);
    return tpulw__result_as(b, sum, dt);
  }
  const tpulw_tensor *go = tpulw__tensor_arg(b, "grad_output");
  if ((rc = tpulw__need_tpu(b, go))) return rc;
  tpuir_val g = tpulw__convert(b, tpulw__tensor(b, go), cdt);
  double scale = red == RED_MEAN ? 1.0 / ((double)nframe * (double)dim) : 1.0 / (double)dim;
  if (red == RED_NONE) {
    int64_t gn = 1;
    for (int i = 0; i < go->view.ndim; i++) gn *= go->view.sizes[i];
    if (gn != nframe) return tpu_error(TPU_E_INVALID, "multi_margin_loss_backward: grad_output size");
    g = tpulw__reshape(b, g, 2, s1n);
  } else {
    g = tpulw__reshape(b, g, 0, NULL);
  }
  tpuir_val h = p == 1 ? tpulw__full(b, cdt, 2, s2, 1) : tpulw__bin_c(b, TPUIR_MUL, z, 2);
  if (wt) h = tpulw__bin(b, TPUIR_MUL, h, wy);
  h = tpulw__sel(b, pos, tpulw__bin_c(b, TPUIR_MUL, h, scale), zero);
  tpuir_val sumh = tpulw__reduce_dims(b, TPUIR_RED_SUM, h, 2u, 1);
  tpuir_val gi = tpulw__sel(b, notyv, h, tpulw__un(b, TPUIR_NEG, sumh));
  gi = tpulw__bin(b, TPUIR_MUL, gi, g);
  return tpulw__result_as(b, tpulw__reshape(b, gi, v->ndim, v->sizes), dt);
}

/* ---- multilabel_margin_loss ---------------------------------------------- */

static int mlml_fn(tpulw__b *b) {
  int bw = b->op == L_MLML_BW;
  const tpulw_tensor *in = tpulw__tensor_arg(b, "self"), *tg = tpulw__tensor_arg(b, "target");
  int rc;
  if ((rc = tpulw__need_tpu(b, in)) || (rc = tpulw__need_tpu(b, tg))) return rc;
  const tpu_view *v = &in->view, *tv = &tg->view;
  int dt = v->dtype;
  if ((rc = tpulw__float_only(b, dt))) return rc;
  int red = (int)tpulw__int(b, "reduction", RED_MEAN);
  char s1[256], s2c[256];
  int64_t nframe = 0, dim = 0;
  if ((rc = margin_shape(b, v, &nframe, &dim))) return rc;
  int64_t tn = 1;
  for (int i = 0; i < tv->ndim; i++) tn *= tv->sizes[i];
  int okt = v->ndim <= 1 ? (tv->ndim <= 1 && tn == dim)
                         : (tv->ndim == 2 && tv->sizes[0] == nframe && tv->sizes[1] == dim);
  if (!okt)
    return tpu_error(TPU_E_INVALID, "inconsistent target size: [%s] for input of size: [%s]",
                     tpulw__fmt_list(s1, sizeof s1, tv->ndim, tv->sizes),
                     tpulw__fmt_list(s2c, sizeof s2c, v->ndim, v->sizes));
  if (tv->dtype != TPU_I64)
    return tpu_error(TPU_E_INVALID, "expected scalar type Long but found %s", tpulw__torch_name(tv->dtype));
  int cdt = tpulw__opmath(dt);
  int64_t s2[2] = {nframe, dim}, s3[3] = {nframe, dim, dim};
  tpuir_val x = tpulw__reshape(b, tpulw__convert(b, tpulw__tensor(b, in), cdt), 2, s2);
  tpuir_val t = tpulw__reshape(b, tpulw__tensor(b, tg), 2, s2);
  /* valid[n,k] = k < first position of a negative target */
  tpuir_val kio = tpuir_iota(b->g, TPU_I64, 2, s2, 1);
  tpuir_val firstneg = tpulw__reduce_dims(b, TPUIR_RED_MIN,
                                      tpulw__sel(b, tpulw__bin_c(b, TPUIR_LT, t, 0), kio, tpulw__const(b, TPU_I64, (double)dim)),
                                      2u, 1);
  tpuir_val valid = tpulw__bin(b, TPUIR_LT, kio, firstneg);
  tpuir_val tc = tpulw__sel(b, valid, t, tpulw__const(b, TPU_I64, 0));
  /* is_target[n,i] = any_k valid[n,k] && t[n,k] == i  ([n,k,i]) */
  int64_t d01[2] = {0, 1};
  tpuir_val t3 = tpuir_broadcast_in_dim(b->g, tc, 3, s3, d01);
  tpuir_val v3 = tpuir_broadcast_in_dim(b->g, valid, 3, s3, d01);
  tpuir_val i3 = tpuir_iota(b->g, TPU_I64, 3, s3, 2);
  tpuir_val hit = tpulw__bin(b, TPUIR_AND, v3, tpulw__bin(b, TPUIR_EQ, t3, i3));
  tpuir_val ist = tpulw__reduce_dims(b, TPUIR_RED_OR, hit, 2u, 0); /* [n, i] bool */
  LW_TRY(ist);
  tpuir_val xt = tpuir_gather(b->g, x, 1, tc); /* [n, k] */
  b->sync = 1;
  b->err_remap = LW_ERR_RUNTIME;
  int64_t d02[2] = {0, 2};
  tpuir_val xt3 = tpuir_broadcast_in_dim(b->g, xt, 3, s3, d01);
  tpuir_val x3 = tpuir_broadcast_in_dim(b->g, x, 3, s3, d02);
  tpuir_val nt3 = tpuir_broadcast_in_dim(b->g, tpulw__un(b, TPUIR_NOT, ist), 3, s3, d02);
  tpuir_val z = tpulw__bin(b, TPUIR_ADD, tpulw__bin(b, TPUIR_SUB, tpulw__const(b, cdt, 1), xt3), x3);
  tpuir_val act = tpulw__bin(b, TPUIR_AND, tpulw__bin(b, TPUIR_AND, v3, nt3), tpulw__bin_c(b, TPUIR_GT, z, 0));
  tpuir_val zero = tpulw__const(b, cdt, 0);
  int64_t outn = nframe;
  if (!bw) {
    tpuir_val l = tpulw__reduce_dims(b, TPUIR_RED_SUM, tpulw__sel(b, act, z, zero), 6u, 0);
    l = tpulw__bin_c(b, TPUIR_DIV, l, (double)dim);
    tpuir_val out;
    if (red == RED_NONE) {
      out = v->ndim <= 1 ? tpulw__reshape(b, l, 0, NULL) : tpulw__reshape(b, l, 1, &outn);
    } else {
      out = tpulw__reduce_dims(b, TPUIR_RED_SUM, l, 1u, 0);
      if (red == RED_MEAN) out = tpulw__bin_c(b, TPUIR_DIV, out, (double)nframe);
    }
    if ((rc = tpulw__result_as(b, out, dt)) < 0) return rc;
    return tpulw__result_as(b, tpulw__reshape(b, tpulw__convert(b, ist, dt), tv->ndim, tv->sizes), dt);
  }
  const tpulw_tensor *go = tpulw__tensor_arg(b, "grad_output");
  if ((rc = tpulw__need_tpu(b, go))) return rc;
  tpuir_val g = tpulw__convert(b, tpulw__tensor(b, go), cdt);
  int64_t s1n[2] = {nframe, 1};
  if (red == RED_NONE && v->ndim == 2) g = tpulw__reshape(b, g, 2, s1n);
  else g = tpulw__reshape(b, g, 0, NULL);
  double scale = red == RED_MEAN ? 1.0 / ((double)nframe * (double)dim) : 1.0 / (double)dim;
  tpuir_val a = tpulw__convert(b, act, cdt);
  tpuir_val plus = tpulw__reduce_dims(b, TPUIR_RED_SUM, a, 2u, 0);  /* [n, i] */
  tpuir_val minus = tpulw__reduce_dims(b, TPUIR_RED_SUM, a, 4u, 0); /* [n, k] */
  tpuir_val gi = tpuir_scatter_add(b->g, plus, 1, tc, tpulw__un(b, TPUIR_NEG, minus));
  gi = tpulw__bin(b, TPUIR_MUL, tpulw__bin_c(b, TPUIR_MUL, gi, scale), g);
  return tpulw__result_as(b, tpulw__reshape(b, gi, v->ndim, v->sizes), dt);
}

/* ---- CTC loss (_ctc_loss / _ctc_loss_backward, int-list lengths) ------- */

/* int64 [n] vector of host values */
static tpuir_val host_vec(tpulw__b *b, int n, const int64_t *v) {
  if (n == 0) {
    int64_t z = 0;
    return tpulw__full(b, TPU_I64, 1, &z, 0);
  }
  tpuir_val parts[256];
  if (n > 256) return tpu_error(TPU_E_UNSUPPORTED, "ctc_loss: batch too large");
  int64_t one = 1;
  for (int i = 0; i < n; i++) parts[i] = tpulw__reshape(b, tpulw__const(b, TPU_I64, (double)v[i]), 1, &one);
  return n == 1 ? parts[0] : tpuir_concat(b->g, n, parts, 0);
}

/* logsumexp of k values (same shape), -inf safe like PyTorch's CTC code */
static tpuir_val lse(tpulw__b *b, int k, const tpuir_val *v) {
  tpuir_val m = v[0];
  for (int i = 1; i < k; i++) m = tpulw__bin(b, TPUIR_MAX, m, v[i]);
  tpulw__shape s = tpulw__info(b, m);
  m = tpulw__sel(b, tpulw__bin_c(b, TPUIR_EQ, m, -INFINITY), tpulw__const(b, s.dtype, 0), m);
  tpuir_val acc = -1;
  for (int i = 0; i < k; i++) {
    tpuir_val e = tpulw__un(b, TPUIR_EXP, tpulw__bin(b, TPUIR_SUB, v[i], m));
    acc = acc < 0 ? e : tpulw__bin(b, TPUIR_ADD, acc, e);
  }
  return tpulw__bin(b, TPUIR_ADD, tpulw__un(b, TPUIR_LOG, acc), m);
}

/* shift along dim 1 of [N, L] by k (> 0: towards higher s), filling -inf */
static tpuir_val shift1(tpulw__b *b, tpuir_val v, int k) {
  tpulw__shape s = tpulw__info(b, v);
  int64_t lo[2] = {0, k}, hi[2] = {0, -k}, in[2] = {0, 0};
  if (k > s.sizes[1] || -k > s.sizes[1]) return tpulw__full(b, s.dtype, 2, s.sizes, -INFINITY);
  return tpuir_pad(b->g, v, tpulw__const(b, s.dtype, -INFINITY), lo, hi, in);
}

#define CTC_MAXT 4096
static int ctc_fn(tpulw__b *b) {
  int bw = strstr(b->base, "_backward") != NULL;
  const tpulw_tensor *lpt = tpulw__tensor_arg(b, "log_probs"), *tgt = tpulw__tensor_arg(b, "targets");
  int rc;
  if ((rc = tpulw__need_tpu(b, lpt)) || (rc = tpulw__need_tpu(b, tgt))) return rc;
  const tpu_view *lv = &lpt->view, *tv = &tgt->view;
  int dt = lv->dtype;
  if ((rc = tpulw__float_only(b, dt))) return rc;
  int nil, ntl;
  int64_t sc1, sc2;
  const int64_t *il = tpulw__ints(b, "input_lengths", &nil, &sc1);
  const int64_t *tl = tpulw__ints(b, "target_lengths", &ntl, &sc2);
  if (!il || !tl) return tpu_error(TPU_E_UNSUPPORTED, "ctc_loss: lengths must be int lists");
  if (lv->ndim != 3) return tpu_error(TPU_E_INVALID, "ctc_loss: log_probs must be 3-D (T, N, C)");
  int64_t T = lv->sizes[0], N = lv->sizes[1], C = lv->sizes[2];
  int64_t blank = tpulw__int(b, "blank", 0);
  int zinf = (int)tpulw__int(b, "zero_infinity", 0);
  if (blank < 0 || blank >= C) return tpu_error(TPU_E_INVALID, "blank must be in label range");
  if (nil != N) return tpu_error(TPU_E_INVALID, "input_lengths must be of size batch_size");
  if (ntl != N) return tpu_error(TPU_E_INVALID, "target_lengths must be of size batch_size");
  if (tv->dtype != TPU_I64 && tv->dtype != TPU_I32)
    return tpu_error(TPU_E_UNSUPPORTED, "ctc_loss: targets dtype");
  int64_t maxS = 0, tsum = 0;
  for (int i = 0; i < N; i++) {
    if (tl[i] < 0)
      return tpu_error(TPU_E_INVALID, "Expected target_lengths to have value at least 0, but got "
                       "value %lld", (long long)tl[i]);
    if (il[i] < 0 || il[i] > T)
      return tpu_error(TPU_E_INVALID, "Expected input_lengths to have value at most %lld, but got "
                       "value %lld (while checking arguments for ctc_loss_cpu)", (long long)T, (long long)il[i]);
    if (tl[i] > maxS) maxS = tl[i];
    tsum += tl[i];
  }
  if (tv->ndim == 2) {
    if (tv->sizes[0] != N)
      return tpu_error(TPU_E_INVALID, "Expected tensor to have size %lld at dimension 0, but got "
                       "size %lld for argument #2 'targets' (while checking arguments for ctc_loss_cpu)",
                       (long long)N, (long long)tv->sizes[0]);
    if (tv->sizes[1] < maxS)
      return tpu_error(TPU_E_INVALID, "Expected tensor to have size at least %lld at dimension 1, "
                       "but got size %lld for argument #2 'targets' (while checking arguments for "
                       "ctc_loss_cpu)", (long long)maxS, (long long)tv->sizes[1]);
  } else if (tv->ndim == 1) {
    if (tv->sizes[0] < tsum)
      return tpu_error(TPU_E_INVALID, "Expected tensor to have size at least %lld at dimension 0, "
                       "but got size %lld for argument #2 'targets' (while checking arguments for "
                       "ctc_loss_cpu)", (long long)tsum, (long long)tv->sizes[0]);
  } else {
    return tpu_error(TPU_E_INVALID, "ctc_loss: targets must be 1-D or 2-D");
  }
  if (T > CTC_MAXT) return tpu_error(TPU_E_UNSUPPORTED, "ctc_loss: sequence too long");
  int64_t L = 2 * maxS + 1;
  int cdt = dt == TPU_F64 ? TPU_F64 : TPU_F32;
  int64_t nl[2] = {N, L}, n1[2] = {N, 1}, tnl[3] = {T, N, L};
  if (N == 0 || T == 0) {
    if (bw) return tpulw__result(b, tpulw__full(b, dt, 3, lv->sizes, 0));
    if ((rc = tpulw__result(b, tpulw__full(b, dt, 1, &N, 0))) < 0) return rc;
    int64_t ntl3[3] = {N, T, L};
    return tpulw__result(b, tpulw__full(b, dt, 3, ntl3, -INFINITY));
  }
  /* extended targets tprime [N, L] (blank at even s) */
  tpuir_val sio = tpuir_iota(b->g, TPU_I64, 2, nl, 1);
  tpuir_val half = tpulw__bin_c(b, TPUIR_DIV, sio, 2);
  tpuir_val tg = tpulw__convert(b, tpulw__tensor(b, tgt), TPU_I64);
  tpuir_val lab;
  if (tv->ndim == 2) {
    int64_t S = tv->sizes[1];
    if (S == 0) {
      lab = tpulw__full(b, TPU_I64, 2, nl, (double)blank);
    } else {
      lab = tpuir_gather(b->g, tg, 1, tpulw__bin_c(b, TPUIR_MIN, half, (double)(S - 1)));
    }
  } else {
    int64_t offs[256], o = 0;
    if (N > 256) return tpu_error(TPU_E_UNSUPPORTED, "ctc_loss: batch too large");
    for (int i = 0; i < N; i++) {
      offs[i] = o;
      o += tl[i];
    }
    int64_t tn = tv->sizes[0];
    if (tn == 0) {
      lab = tpulw__full(b, TPU_I64, 2, nl, (double)blank);
    } else {
      tpuir_val ov = tpulw__reshape(b, host_vec(b, (int)N, offs), 2, n1);
      tpuir_val fi = tpulw__bin_c(b, TPUIR_MIN, tpulw__bin(b, TPUIR_ADD, half, ov), (double)(tn - 1));
      int64_t nln = N * L;
      lab = tpulw__reshape(b, tpuir_index_select(b->g, tg, 0, tpulw__reshape(b, fi, 1, &nln)), 2, nl);
    }
  }
  tpuir_val tlv = tpulw__reshape(b, host_vec(b, (int)N, tl), 2, n1);
  tpuir_val ilv = tpulw__reshape(b, host_vec(b, (int)N, il), 2, n1);
  tpuir_val odd = tpulw__bin_c(b, TPUIR_EQ, tpulw__bin_c(b, TPUIR_REM, sio, 2), 1);
  tpuir_val svalid = tpulw__bin(b, TPUIR_LE, sio, tpulw__bin_c(b, TPUIR_MUL, tlv, 2)); /* s <= 2 tl */
  tpuir_val tprime = tpulw__sel(b, tpulw__bin(b, TPUIR_AND, odd, svalid), lab, tpulw__const(b, TPU_I64, (double)blank));
  b->sync = 1;
  b->err_remap = LW_ERR_RUNTIME;
  /* skip transition s-2 -> s allowed where tprime[s] != tprime[s-2] */
  int64_t lo2[2] = {0, 2}, hi2[2] = {0, -2}, z2[2] = {0, 0};
  tpuir_val tp2 = tpuir_pad(b->g, tprime, tpulw__const(b, TPU_I64, (double)blank), lo2, hi2, z2);
  tpuir_val skip = tpulw__bin(b, TPUIR_AND, tpulw__bin_c(b, TPUIR_GE, sio, 2), tpulw__bin(b, TPUIR_NE, tprime, tp2));
  tpuir_val lp = tpulw__convert(b, tpulw__tensor(b, lpt), cdt);
  int64_t d12[2] = {1, 2};
  tpuir_val lpg = tpuir_gather(b->g, lp, 2, tpuir_broadcast_in_dim(b->g, tprime, 3, tnl, d12)); /* [T,N,L] */
  LW_TRY(lpg);
  tpuir_val ninf = tpulw__const(b, cdt, -INFINITY);
  int64_t one3[3] = {1, 1, 1};
  #define LPG_T(t) tpulw__reshape(b, tpuir_slice(b->g, lpg, (int64_t[3]){(t), 0, 0}, (int64_t[3]){(t) + 1, N, L}, one3), 2, nl)
  if (!bw) {
    tpuir_val parts[CTC_MAXT];
    tpuir_val a = tpulw__sel(b, tpulw__bin(b, TPUIR_AND, tpulw__bin_c(b, TPUIR_LE, sio, 1), svalid), LPG_T(0), ninf);
    a = tpulw__sel(b, tpulw__bin_c(b, TPUIR_LT, ilv, 1), ninf, a);
    tpuir_val fin = a;
    int64_t n1l[3] = {N, 1, L};
    parts[0] = tpulw__reshape(b, a, 3, n1l);
    for (int64_t t = 1; t < T; t++) {
      tpuir_val v3[3] = {a, shift1(b, a, 1), tpulw__sel(b, skip, shift1(b, a, 2), ninf)};
      tpuir_val na = tpulw__bin(b, TPUIR_ADD, lse(b, 3, v3), LPG_T(t));
      na = tpulw__sel(b, svalid, na, ninf);
      tpuir_val live = tpulw__bin_c(b, TPUIR_GT, ilv, (double)t);
      a = tpulw__sel(b, live, na, ninf);
      fin = tpulw__sel(b, live, na, fin);
      parts[t] = tpulw__reshape(b, a, 3, n1l);
      LW_TRY(parts[t]);
    }
    /* nll = -logaddexp(alpha[2tl], alpha[2tl-1]) (tl == 0: -alpha[0]) */
    tpuir_val i1 = tpulw__bin_c(b, TPUIR_MUL, tlv, 2);
    tpuir_val i2 = tpulw__bin_c(b, TPUIR_MAX, tpulw__bin_c(b, TPUIR_SUB, i1, 1), 0);
    tpuir_val l1 = tpuir_gather(b->g, fin, 1, i1);
    tpuir_val l2 = tpulw__sel(b, tpulw__bin_c(b, TPUIR_GT, tlv, 0), tpuir_gather(b->g, fin, 1, i2), ninf);
    tpuir_val v2[2] = {l1, l2};
    tpuir_val nll = tpulw__un(b, TPUIR_NEG, tpulw__reshape(b, lse(b, 2, v2), 1, &N));
    tpuir_val la = T == 1 ? parts[0] : tpuir_concat(b->g, (int)T, parts, 1);
    if ((rc = tpulw__result_as(b, nll, dt)) < 0) return rc;
    return tpulw__result_as(b, la, dt);
  }
  const tpulw_tensor *gt = tpulw__tensor_arg(b, "grad"), *nt = tpulw__tensor_arg(b, "neg_log_likelihood");
  const tpulw_tensor *at = tpulw__tensor_arg(b, "log_alpha");
  if ((rc = tpulw__need_tpu(b, gt)) || (rc = tpulw__need_tpu(b, nt)) || (rc = tpulw__need_tpu(b, at))) return rc;
  const tpu_view *av = &at->view;
  if (av->ndim != 3 || av->sizes[0] != N || av->sizes[1] != T || av->sizes[2] != L)
    return tpu_error(TPU_E_INVALID, "_ctc_loss_backward: log_alpha has the wrong shape");
  int64_t gn = 1;
  for (int i = 0; i < gt->view.ndim; i++) gn *= gt->view.sizes[i];
  if (gn != N) return tpu_error(TPU_E_INVALID, "_ctc_loss_backward: grad must have batch_size elements");
  int64_t perm[3] = {1, 0, 2};
  tpuir_val la = tpuir_transpose(b->g, tpulw__convert(b, tpulw__tensor(b, at), cdt), perm); /* [T,N,L] */
  tpuir_val parts[CTC_MAXT];
  tpuir_val bt = -1;
  tpuir_val i1 = tpulw__bin_c(b, TPUIR_MUL, tlv, 2);
  tpuir_val endm = tpulw__bin(b, TPUIR_AND, tpulw__bin(b, TPUIR_GE, sio, tpulw__bin_c(b, TPUIR_SUB, i1, 1)), svalid);
  int64_t lom2[2] = {0, -2}, hip2[2] = {0, 2};
  tpuir_val skipb = tpuir_pad(b->g, skip, tpulw__const(b, TPU_BOOL, 0), lom2, hip2, z2); /* skip[s + 2] */
  int64_t t1l[3] = {1, N, L};
  for (int64_t t = T - 1; t >= 0; t--) {
    tpuir_val lpt_ = LPG_T(t);
    tpuir_val init = tpulw__sel(b, endm, lpt_, ninf);
    tpuir_val nb;
    if (bt < 0) {
      nb = tpulw__full(b, cdt, 2, nl, -INFINITY);
    } else {
      tpuir_val v3[3] = {bt, shift1(b, bt, -1), tpulw__sel(b, skipb, shift1(b, bt, -2), ninf)};
      nb = tpulw__sel(b, svalid, tpulw__bin(b, TPUIR_ADD, lse(b, 3, v3), lpt_), ninf);
    }
    tpuir_val last = tpulw__bin_c(b, TPUIR_EQ, ilv, (double)(t + 1));
    tpuir_val before = tpulw__bin_c(b, TPUIR_GT, ilv, (double)(t + 1));
    bt = tpulw__sel(b, last, init, tpulw__sel(b, before, nb, ninf));
    tpuir_val lat = tpulw__reshape(b, tpuir_slice(b->g, la, (int64_t[3]){t, 0, 0}, (int64_t[3]){t + 1, N, L}, one3), 2, nl);
    parts[t] = tpulw__reshape(b, tpulw__bin(b, TPUIR_ADD, lat, bt), 3, t1l);
    LW_TRY(parts[t]);
  }
  tpuir_val lcab = T == 1 ? parts[0] : tpuir_concat(b->g, (int)T, parts, 0); /* [T,N,L] */
  tpuir_val m = tpulw__reduce_dims(b, TPUIR_RED_MAX, lcab, 4u, 1);
  m = tpulw__sel(b, tpulw__bin_c(b, TPUIR_EQ, m, -INFINITY), tpulw__const(b, cdt, 0), m);
  tpuir_val ex = tpulw__un(b, TPUIR_EXP, tpulw__bin(b, TPUIR_SUB, lcab, m));
  tpuir_val sums = tpuir_scatter_add(b->g, tpulw__full(b, cdt, 3, lv->sizes, 0), 2,
                                     tpuir_broadcast_in_dim(b->g, tprime, 3, tnl, d12), ex);
  tpuir_val lsum = tpulw__bin(b, TPUIR_ADD, tpulw__un(b, TPUIR_LOG, sums), m);
  int64_t s1n1[3] = {1, N, 1};
  tpuir_val nll = tpulw__reshape(b, tpulw__convert(b, tpulw__tensor(b, nt), cdt), 3, s1n1);
  tpuir_val g = tpulw__reshape(b, tpulw__convert(b, tpulw__tensor(b, gt), cdt), 3, s1n1);
  tpuir_val res = tpulw__bin(b, TPUIR_SUB, tpulw__un(b, TPUIR_EXP, lp),
                         tpulw__un(b, TPUIR_EXP, tpulw__bin(b, TPUIR_SUB, tpulw__bin(b, TPUIR_ADD, lsum, nll), lp)));
  res = tpulw__bin(b, TPUIR_MUL, res, g);
  int64_t tn1[3] = {T, N, 1};
  tpuir_val live = tpulw__bin(b, TPUIR_LT, tpuir_iota(b->g, TPU_I64, 3, tn1, 0), tpulw__reshape(b, ilv, 3, s1n1));
  tpuir_val zero = tpulw__const(b, cdt, 0);
  res = tpulw__sel(b, live, res, zero);
  if (zinf) res = tpulw__sel(b, tpulw__bin_c(b, TPUIR_EQ, nll, INFINITY), zero, res);
  return tpulw__result_as(b, res, dt);
}

#define R2(n, fn, code) {n, fn, code}, {n ".out", fn, code}

const tpulw__row tpulw__rows_loss[] = {
    {"nll_loss_forward", nll_fn, 0}, {"nll_loss_forward.output", nll_fn, 0},
    {"nll_loss2d_forward", nll_fn, 0}, {"nll_loss2d_forward.output", nll_fn, 0},
    {"nll_loss_backward", nll_bw_fn, 0}, {"nll_loss_backward.grad_input", nll_bw_fn, 0},
    {"nll_loss2d_backward", nll_bw_fn, 0}, {"nll_loss2d_backward.grad_input", nll_bw_fn, 0},
    {"mse_loss", loss_fn, L_MSE}, {"mse_loss.out", loss_fn, L_MSE},
    {"mse_loss_backward", loss_fn, L_MSE_BW}, {"mse_loss_backward.grad_input", loss_fn, L_MSE_BW},
    {"smooth_l1_loss", loss_fn, L_SMOOTH_L1}, {"smooth_l1_loss.out", loss_fn, L_SMOOTH_L1},
    {"smooth_l1_loss_backward", loss_fn, L_SMOOTH_L1_BW},
    {"smooth_l1_loss_backward.grad_input", loss_fn, L_SMOOTH_L1_BW},
    {"huber_loss", loss_fn, L_HUBER}, {"huber_loss.out", loss_fn, L_HUBER},
    {"huber_loss_backward", loss_fn, L_HUBER_BW}, {"huber_loss_backward.out", loss_fn, L_HUBER_BW},
    {"binary_cross_entropy", loss_fn, L_BCE}, {"binary_cross_entropy.out", loss_fn, L_BCE},
    {"binary_cross_entropy_backward", loss_fn, L_BCE_BW},
    {"binary_cross_entropy_backward.grad_input", loss_fn, L_BCE_BW},
    R2("multi_margin_loss", multi_margin_fn, L_MULTI_MARGIN),
    {"multi_margin_loss_backward", multi_margin_fn, L_MULTI_MARGIN_BW},
    {"multi_margin_loss_backward.grad_input", multi_margin_fn, L_MULTI_MARGIN_BW},
    {"multilabel_margin_loss_forward", mlml_fn, L_MLML},
    {"multilabel_margin_loss_forward.output", mlml_fn, L_MLML},
    {"multilabel_margin_loss_backward", mlml_fn, L_MLML_BW},
    {"multilabel_margin_loss_backward.grad_input", mlml_fn, L_MLML_BW},
    R2("_ctc_loss", ctc_fn, 0),
    R2("_ctc_loss_backward", ctc_fn, 0),
};
const int tpulw__nrows_loss = sizeof tpulw__rows_loss / sizeof tpulw__rows_loss[0];

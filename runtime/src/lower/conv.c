/* lower/conv.c - convolution and pooling lowerings (row family
 * tpulw__rows_conv).
 *
 * Convolutions (convolution, _convolution, convolution_overrideable and
 * their .out forms; conv1d/2d/3d, conv_transpose*, padding="same" reach
 * them through PyTorch's composite ops) lower to tpuir_convolution with the
 * context's precision:
 *   forward           conv(x, w, stride, pad, dilation, groups) + bias
 *   transposed        conv(x, flip(swap(w)), lhs_dilation = stride,
 *                    pad = d*(k-1) - p (+ output_padding on the high side))
 *   convolution_backward (output_mask):
 *     grad_input      the transposed conv of grad_output with w (for a
 *                     transposed forward: a plain conv)
 *     grad_weight     a conv of input^T (channels as batch, batch as
 *                     features) with grad_output^T as kernel, window
 *                     stride = dilation, rhs dilation = stride; groups
 *                     through a (C/g, g*N) arrangement
 *     grad_bias       sum of grad_output over batch and space
 *   A masked-off result is returned as zeros of its shape (the glue always
 *   returns defined tensors; autograd ignores them).
 * Integer convolutions run in f64 and convert back (exact while partial
 * sums stay below 2^53).
 *
 * Pooling (2d and 3d; 1d comes through the 2d ops):
 *   max_pool*_with_indices         reduce_window MAX + window_argmax
 *   max_pool*_with_indices_backward scatter_add of grad into the flattened
 *                                   spatial dims at the indices
 *   avg_pool*                      reduce_window SUM / divisor (iota-built
 *                                   per-dim counts, PyTorch's rules for
 *                                   padding, ceil_mode, count_include_pad,
 *                                   divisor_override)
 *   avg_pool*_backward             pad (interior stride-1, edges k-1-p) +
 *                                   reduce_window SUM of grad / divisor
 *   _adaptive_avg_pool*(_backward) dot_general per spatial dim against an
 *                                   iota-built averaging matrix (fp32 exact)
 *   adaptive_max_pool* / fractional_max_pool* (+ backward), max_unpool*:
 *     windows with data- or shape-dependent bounds gather every window into
 *     a trailing axis of size K (the largest window; shorter windows repeat
 *     their last element, which changes neither the max nor the first-max /
 *     last-NaN index rule of PyTorch CPU) and reduce it with max / argmax.
 *     Their backward ops, like max_unpool, scatter-add into the flattened
 *     spatial plane.
 */
#include <stdio.h>
#include <string.h>

#include "lower/internal.h"

enum {
  C_CONV = 1, C_CONV_BW, P_MAX, P_MAX_BW, P_AVG, P_AVG_BW, P_ADAPT,
  P_ADAPT_BW, P_UNPOOL, P_ADAPT_MAX, P_ADAPT_MAX_BW, P_FRAC, P_FRAC_BW
};

#define MAXSP 3

static void fmt_sizes(char *buf, size_t cap, int nd, const int64_t *s) {
  size_t k = (size_t)snprintf(buf, cap, "[");
  for (int i = 0; i < nd && k < cap; i++)
    k += (size_t)snprintf(buf + k, cap - k, "%s%lld", i ? ", " : "", (long long)s[i]);
  if (k < cap) snprintf(buf + k, cap - k, "]");
}

static void fmt_x(char *buf, size_t cap, int n, const int64_t *s) {
  size_t k = 0;
  buf[0] = 0;
  for (int i = 0; i < n && k < cap; i++)
    k += (size_t)snprintf(buf + k, cap - k, "%s%lld", i ? " x " : "", (long long)s[i]);
}

/* int[] argument expanded to nsp entries (one value = all; empty or
 * absent = def). */
static int expand(const tpulw__b *b, const char *name, int nsp, int64_t def,
                  int64_t *out) {
  int n;
  int64_t scratch;
  const int64_t *v = tpulw__ints(b, name, &n, &scratch);
  if (!v || n == 0) {
    for (int i = 0; i < nsp; i++) out[i] = def;
    return TPU_OK;
  }
  if (n == 1) {
    for (int i = 0; i < nsp; i++) out[i] = v[0];
    return TPU_OK;
  }
  if (n != nsp)
    return tpu_error(TPU_E_INVALID,
                     "expected %s to be a single integer value or a list of %d "
                     "values to match the convolution dimensions, but got %s=[%d values]",
                     name, nsp, name, n);
  for (int i = 0; i < nsp; i++) out[i] = v[i];
  return TPU_OK;
}

/* ---- convolution helpers ---------------------------------------------- */

typedef struct cparams {
  int nsp;
  int64_t s[MAXSP], p[MAXSP], d[MAXSP], op[MAXSP];
  int64_t G;
  int transposed;
} cparams;

static int parse_conv(const tpulw__b *b, int nsp, cparams *c) {
  memset(c, 0, sizeof *c);
  c->nsp = nsp;
  int rc;
  if ((rc = expand(b, "stride", nsp, 1, c->s)) ||
      (rc = expand(b, "padding", nsp, 0, c->p)) ||
      (rc = expand(b, "dilation", nsp, 1, c->d)) ||
      (rc = expand(b, "output_padding", nsp, 0, c->op)))
    return rc;
  c->transposed = (int)tpulw__int(b, "transposed", 0);
  c->G = tpulw__int(b, "groups", 1);
  for (int i = 0; i < nsp; i++) {
    if (c->s[i] <= 0)
      return tpu_error(TPU_E_INVALID, "non-positive stride is not supported");
    if (c->p[i] < 0)
      return tpu_error(TPU_E_INVALID, "negative padding is not supported");
    if (c->d[i] <= 0)
      return tpu_error(TPU_E_INVALID, "dilation should be greater than zero");
    if (c->op[i] < 0)
      return tpu_error(TPU_E_INVALID, "negative output_padding is not supported");
  }
  if (c->G <= 0)
    return tpu_error(TPU_E_INVALID, "non-positive groups is not supported");
  if (c->transposed)
    for (int i = 0; i < nsp; i++)
      if (c->op[i] >= c->s[i] && c->op[i] >= c->d[i])
        return tpu_error(TPU_E_INVALID,
                         "output padding must be smaller than either stride or "
                         "dilation, but got output_padding %lld, stride %lld, "
                         "dilation %lld",
                         (long long)c->op[i], (long long)c->s[i], (long long)c->d[i]);
  return TPU_OK;
}

/* compute dtype of a conv on dtype dt (ints go through f64) */
static int conv_dtype(int dt) { return tpu_dtype_is_float(dt) ? dt : TPU_F64; }

static int prec_of(const tpulw__b *b) { return b->ctx->precision; }

static tpuir_val perm_spatial(tpulw__b *b, tpuir_val v, int a0, int a1) {
  if (v < 0) return v;
  tpulw__shape s = tpulw__info(b, v);
  int64_t perm[TPU_MAX_DIMS];
  for (int i = 0; i < s.ndim; i++) perm[i] = i;
  perm[a0] = a1;
  perm[a1] = a0;
  return tpuir_transpose(b->g, v, perm);
}

/* regular conv */
static tpuir_val fconv(tpulw__b *b, tpuir_val x, tpuir_val w, const cparams *c) {
  return tpuir_convolution(b->g, x, w, c->s, c->p, c->p, NULL, c->d, c->G,
                           prec_of(b));
}

/* transposed conv of x [N, Cin, I] with w [Cin, Og, k]: output padding op */
static tpuir_val tconv(tpulw__b *b, tpuir_val x, tpuir_val w, const cparams *c,
                       const int64_t *op) {
  if (x < 0) return x;
  if (w < 0) return w;
  tpulw__shape ws = tpulw__info(b, w);
  int nsp = c->nsp;
  int64_t G = c->G, Cg = ws.sizes[0] / G, Og = ws.sizes[1];
  tpuir_val wt;
  if (G == 1) {
    wt = perm_spatial(b, w, 0, 1);
  } else {
    int64_t s4[TPU_MAX_DIMS], perm[TPU_MAX_DIMS], s3[TPU_MAX_DIMS];
    s4[0] = G;
    s4[1] = Cg;
    s4[2] = Og;
    for (int i = 0; i < nsp; i++) s4[3 + i] = ws.sizes[2 + i];
    wt = tpulw__reshape(b, w, nsp + 3, s4);
    for (int i = 0; i < nsp + 3; i++) perm[i] = i;
    perm[1] = 2;
    perm[2] = 1;
    wt = wt < 0 ? wt : tpuir_transpose(b->g, wt, perm);
    s3[0] = G * Og;
    s3[1] = Cg;
    for (int i = 0; i < nsp; i++) s3[2 + i] = ws.sizes[2 + i];
    wt = tpulw__reshape(b, wt, nsp + 2, s3);
  }
  int64_t sp[MAXSP], lo[MAXSP], hi[MAXSP], one[MAXSP];
  for (int i = 0; i < nsp; i++) {
    sp[i] = 2 + i;
    lo[i] = c->d[i] * (ws.sizes[2 + i] - 1) - c->p[i];
    hi[i] = lo[i] + op[i];
    one[i] = 1;
  }
  wt = wt < 0 ? wt : tpuir_reverse(b->g, wt, nsp, sp);
  return tpuir_convolution(b->g, x, wt, one, lo, hi, c->s, c->d, G, prec_of(b));
}

/* weight gradient: x [N, C, I], gy [N, O, Q] -> [O, C/G, k] */
static tpuir_val wgrad(tpulw__b *b, tpuir_val x, tpuir_val gy, const cparams *c,
                       const int64_t *k) {
  if (x < 0) return x;
  if (gy < 0) return gy;
  tpulw__shape xs = tpulw__info(b, x), gs = tpulw__info(b, gy);
  int nsp = c->nsp;
  int64_t G = c->G, N = xs.sizes[0], Cg = xs.sizes[1] / G, Og = gs.sizes[1] / G;
  tpuir_val lhs, rhs;
  if (G == 1) {
    lhs = perm_spatial(b, x, 0, 1);
    rhs = perm_spatial(b, gy, 0, 1);
  } else {
    int64_t s4[TPU_MAX_DIMS], perm[TPU_MAX_DIMS], s3[TPU_MAX_DIMS];
    /* x [N, G, Cg, I] -> [Cg, G, N, I] -> [Cg, G*N, I] */
    s4[0] = N;
    s4[1] = G;
    s4[2] = Cg;
    for (int i = 0; i < nsp; i++) s4[3 + i] = xs.sizes[2 + i];
    for (int i = 0; i < nsp + 3; i++) perm[i] = i;
    perm[0] = 2;
    perm[2] = 0;
    lhs = tpulw__reshape(b, x, nsp + 3, s4);
    lhs = lhs < 0 ? lhs : tpuir_transpose(b->g, lhs, perm);
    s3[0] = Cg;
    s3[1] = G * N;
    for (int i = 0; i < nsp; i++) s3[2 + i] = xs.sizes[2 + i];
    lhs = tpulw__reshape(b, lhs, nsp + 2, s3);
    /* gy [N, G, Og, Q] -> [G, Og, N, Q] -> [G*Og, N, Q] */
    s4[0] = N;
    s4[1] = G;
    s4[2] = Og;
    for (int i = 0; i < nsp; i++) s4[3 + i] = gs.sizes[2 + i];
    perm[0] = 1;
    perm[1] = 2;
    perm[2] = 0;
    rhs = tpulw__reshape(b, gy, nsp + 3, s4);
    rhs = rhs < 0 ? rhs : tpuir_transpose(b->g, rhs, perm);
    s3[0] = G * Og;
    s3[1] = N;
    for (int i = 0; i < nsp; i++) s3[2 + i] = gs.sizes[2 + i];
    rhs = tpulw__reshape(b, rhs, nsp + 2, s3);
  }
  int64_t lo[MAXSP], hi[MAXSP];
  for (int i = 0; i < nsp; i++) {
    int64_t Q = gs.sizes[2 + i], I = xs.sizes[2 + i];
    lo[i] = c->p[i];
    hi[i] = (k[i] - 1) * c->d[i] + (Q > 0 ? (Q - 1) * c->s[i] + 1 : 1) - c->p[i] - I;
  }
  tpuir_val r = tpuir_convolution(b->g, lhs, rhs, c->d, lo, hi, NULL, c->s, G,
                                  prec_of(b));
  return perm_spatial(b, r, 0, 1);
}

/* bias [O] -> [1, O, 1...] broadcast to y */
static tpuir_val add_bias(tpulw__b *b, tpuir_val y, tpuir_val bias) {
  if (y < 0) return y;
  if (bias < 0) return bias;
  tpulw__shape s = tpulw__info(b, y);
  int64_t sz[TPU_MAX_DIMS];
  for (int i = 0; i < s.ndim; i++) sz[i] = 1;
  sz[1] = s.sizes[1];
  return tpulw__bin(b, TPUIR_ADD, y, tpulw__reshape(b, bias, s.ndim, sz));
}

static int conv_fn(tpulw__b *b) {
  const tpulw_tensor *in = tpulw__tensor_arg(b, "input"), *w = tpulw__tensor_arg(b, "weight");
  const tpulw_tensor *bias = tpulw__tensor_arg(b, "bias");
  if (!in || !w || in->device < 0 || w->device < 0 || (bias && bias->device < 0))
    return tpu_error(TPU_E_UNSUPPORTED, "%s: operands must be tpu tensors", b->base);
  b->out_rule = LW_OUT_SAME;
  const tpu_view *xv = &in->view, *wv = &w->view;
  char s1[160], s2[160], s3[160];
  int nd = wv->ndim;
  if (nd < 3 || nd > 2 + MAXSP)
    return tpu_error(TPU_E_UNSUPPORTED, "%s: %d-dimensional weight", b->base, nd);
  if (xv->ndim != nd) {
    fmt_sizes(s1, sizeof s1, nd, wv->sizes);
    fmt_sizes(s2, sizeof s2, xv->ndim, xv->sizes);
    return tpu_error(TPU_E_INVALID,
                     "Expected %d-dimensional input for %d-dimensional weight %s, "
                     "but got %d-dimensional input of size %s instead",
                     nd, nd, s1, xv->ndim, s2);
  }
  int dt = xv->dtype;
  if (wv->dtype != dt)
    return tpu_error(TPU_E_INVALID, "expected scalar type %s but found %s",
                     tpulw__torch_name(wv->dtype), tpulw__torch_name(dt));
  if (bias && bias->view.dtype != dt)
    return tpu_error(TPU_E_INVALID, "Input type (%s) and bias type (%s) should be the same",
                     tpu_dtype_name(dt), tpu_dtype_name(bias->view.dtype));
  if (dt == TPU_BOOL)
    return tpu_error(TPU_E_UNSUPPORTED, "convolution on bool tensors");
  int nsp = nd - 2;
  cparams c;
  int rc = parse_conv(b, nsp, &c);
  if (rc) return rc;
  int64_t C = xv->sizes[1];
  fmt_sizes(s1, sizeof s1, nd, wv->sizes);
  fmt_sizes(s2, sizeof s2, nd, xv->sizes);
  int64_t O; /* output channels */
  if (!c.transposed) {
    if (wv->sizes[0] % c.G)
      return tpu_error(TPU_E_INVALID,
                       "Given groups=%lld, expected weight to be divisible by %lld "
                       "at dimension 0, but got weight of size %s instead",
                       (long long)c.G, (long long)c.G, s1);
    if (wv->sizes[1] * c.G != C)
      return tpu_error(TPU_E_INVALID,
                       "Given groups=%lld, weight of size %s, expected input%s to "
                       "have %lld channels, but got %lld channels instead",
                       (long long)c.G, s1, s2, (long long)(wv->sizes[1] * c.G),
                       (long long)C);
    O = wv->sizes[0];
    /* kernel must fit the padded input */
    int64_t pin[MAXSP], ke[MAXSP];
    int bad = 0;
    for (int i = 0; i < nsp; i++) {
      pin[i] = xv->sizes[2 + i] + 2 * c.p[i];
      ke[i] = c.d[i] * (wv->sizes[2 + i] - 1) + 1;
      bad |= pin[i] < ke[i];
    }
    if (bad) {
      fmt_x(s1, sizeof s1, nsp, pin);
      fmt_x(s3, sizeof s3, nsp, ke);
      return tpu_error(TPU_E_INVALID,
                       "Calculated padded input size per channel: (%s). Kernel "
                       "size: (%s). Kernel size can't be greater than actual input size",
                       s1, s3);
    }
  } else {
    if (wv->sizes[0] != C)
      return tpu_error(TPU_E_INVALID,
                       "Given transposed=1, weight of size %s, expected input%s to "
                       "have %lld channels, but got %lld channels instead",
                       s1, s2, (long long)wv->sizes[0], (long long)C);
    if (C % c.G)
      return tpu_error(TPU_E_INVALID,
                       "Given groups=%lld, expected weight to be divisible by %lld "
                       "at dimension 0, but got weight of size %s instead",
                       (long long)c.G, (long long)c.G, s1);
    O = wv->sizes[1] * c.G;
    int64_t isz[MAXSP], osz[MAXSP];
    int bad = 0;
    for (int i = 0; i < nsp; i++) {
      isz[i] = xv->sizes[2 + i];
      osz[i] = (isz[i] - 1) * c.s[i] - 2 * c.p[i] + c.d[i] * (wv->sizes[2 + i] - 1) +
               c.op[i] + 1;
      bad |= osz[i] < 0; /* PyTorch CPU returns an empty result for 0 */
    }
    if (bad) {
      fmt_x(s1, sizeof s1, nsp, isz);
      fmt_x(s3, sizeof s3, nsp, osz);
      return tpu_error(TPU_E_INVALID,
                       "Given input size per channel: (%s). Calculated output "
                       "size per channel: (%s). Output size is too small",
                       s1, s3);
    }
  }
  if (bias && (bias->view.ndim != 1 || bias->view.sizes[0] != O)) {
    fmt_sizes(s3, sizeof s3, bias->view.ndim, bias->view.sizes);
    return tpu_error(TPU_E_INVALID,
                     "Given weight of size %s, expected bias to be 1-dimensional "
                     "with %lld elements, but got bias of size %s instead",
                     s1, (long long)O, s3);
  }
  int cdt = conv_dtype(dt);
  tpuir_val x = tpulw__convert(b, tpulw__tensor(b, in), cdt);
  tpuir_val wt = tpulw__convert(b, tpulw__tensor(b, w), cdt);
  tpuir_val y = c.transposed ? tconv(b, x, wt, &c, c.op) : fconv(b, x, wt, &c);
  if (bias) y = add_bias(b, y, tpulw__convert(b, tpulw__tensor(b, bias), cdt));
  return tpulw__result_as(b, y, dt);
}

static int mask_bit(const tpulw__b *b, int i) {
  int n;
  int64_t scratch;
  const int64_t *mk = tpulw__ints(b, "output_mask", &n, &scratch);
  return (mk && i < n) ? mk[i] != 0 : 1;
}

static int conv_bw_fn(tpulw__b *b) {
  const tpulw_tensor *go = tpulw__tensor_arg(b, "grad_output");
  const tpulw_tensor *in = tpulw__tensor_arg(b, "input"), *w = tpulw__tensor_arg(b, "weight");
  if (!go || !in || !w || go->device < 0 || in->device < 0 || w->device < 0)
    return tpu_error(TPU_E_UNSUPPORTED, "%s: operands must be tpu tensors", b->base);
  b->out_rule = LW_OUT_SAME;
  const tpu_view *xv = &in->view, *wv = &w->view, *gv = &go->view;
  int nd = wv->ndim, nsp = nd - 2;
  if (nd < 3 || nd > 2 + MAXSP || xv->ndim != nd || gv->ndim != nd)
    return tpu_error(TPU_E_INVALID,
                     "convolution_backward: expected input, weight and "
                     "grad_output of the same rank 3..5, got %d, %d, %d",
                     xv->ndim, nd, gv->ndim);
  int dt = xv->dtype;
  if (wv->dtype != dt || gv->dtype != dt)
    return tpu_error(TPU_E_INVALID, "expected scalar type %s but found %s",
                     tpulw__torch_name(dt),
                     tpulw__torch_name(wv->dtype != dt ? wv->dtype : gv->dtype));
  if (dt == TPU_BOOL)
    return tpu_error(TPU_E_UNSUPPORTED, "convolution on bool tensors");
  cparams c;
  int rc = parse_conv(b, nsp, &c);
  if (rc) return rc;
  int64_t C = xv->sizes[1];
  int64_t O = c.transposed ? wv->sizes[1] * c.G : wv->sizes[0];
  if (C % c.G || O % c.G || gv->sizes[1] != O || gv->sizes[0] != xv->sizes[0] ||
      (c.transposed ? wv->sizes[0] != C : wv->sizes[1] * c.G != C))
    return tpu_error(TPU_E_INVALID,
                     "convolution_backward: inconsistent shapes of grad_output, "
                     "input and weight");
  int cdt = conv_dtype(dt);
  tpuir_val gy = tpulw__convert(b, tpulw__tensor(b, go), cdt);
  tpuir_val x = mask_bit(b, 1) ? tpulw__convert(b, tpulw__tensor(b, in), cdt) : -1;
  tpuir_val wt = mask_bit(b, 0) ? tpulw__convert(b, tpulw__tensor(b, w), cdt) : -1;
  int64_t k[MAXSP];
  for (int i = 0; i < nsp; i++) k[i] = wv->sizes[2 + i];
  /* grad_input */
  tpuir_val gi;
  if (!mask_bit(b, 0)) {
    gi = tpulw__full(b, cdt, nd, xv->sizes, 0);
  } else if (!c.transposed) {
    int64_t r[MAXSP];
    for (int i = 0; i < nsp; i++) {
      int64_t I = xv->sizes[2 + i], Q = gv->sizes[2 + i];
      r[i] = I + 2 * c.p[i] - 1 - (Q - 1) * c.s[i] - c.d[i] * (k[i] - 1);
      if (Q == 0) r[i] = 0;
    }
    gi = tconv(b, gy, wt, &c, r);
  } else { /* plain conv; output_padding may exceed the stride (when below
              * the dilation): crop it on the high side */
    int64_t hi[MAXSP];
    for (int i = 0; i < nsp; i++) hi[i] = c.p[i] - c.op[i];
    gi = tpuir_convolution(b->g, gy, wt, c.s, c.p, hi, NULL, c.d, c.G, prec_of(b));
  }
  if ((rc = tpulw__result_as(b, gi, dt)) < 0) return rc;
  /* grad_weight */
  tpuir_val gw;
  if (!mask_bit(b, 1)) gw = tpulw__full(b, cdt, nd, wv->sizes, 0);
  else if (!c.transposed) gw = wgrad(b, x, gy, &c, k);
  else gw = wgrad(b, gy, x, &c, k);
  if ((rc = tpulw__result_as(b, gw, dt)) < 0) return rc;
  /* grad_bias */
  int64_t bs[1] = {O};
  tpuir_val gb;
  if (!mask_bit(b, 2)) {
    gb = tpulw__full(b, cdt, 1, bs, 0);
  } else {
    uint32_t m = 1u;
    for (int i = 0; i < nsp; i++) m |= 1u << (2 + i);
    int rdt = tpulw__opmath(cdt);
    gb = tpulw__convert(b, tpulw__reduce_dims(b, TPUIR_RED_SUM, tpulw__convert(b, gy, rdt), m, 0), cdt);
  }
  return tpulw__result_as(b, gb, dt);
}

/* ---- pooling ------------------------------------------------------------ */

typedef struct pparams {
  int nsp, lead; /* spatial dims, leading (batch/channel) dims */
  int64_t k[MAXSP], s[MAXSP], p[MAXSP], d[MAXSP];
  int64_t in[MAXSP], out[MAXSP];
  int ceil;
} pparams;

static int64_t pool_out(int64_t in, int64_t k, int64_t p, int64_t s, int64_t d,
                        int ceil) {
  int64_t num = in + 2 * p - d * (k - 1) - 1 + (ceil ? s - 1 : 0);
  int64_t o = (num >= 0 ? num / s : -((-num + s - 1) / s)) + 1;
  if (ceil && (o - 1) * s >= in + p) o--;
  return o;
}

/* kernel_size, stride (empty = kernel), padding, dilation; output sizes
 * with PyTorch's checks. x_nd is the input rank. */
static int parse_pool(const tpulw__b *b, const char *nm, int nsp, const tpu_view *x,
                      int with_dil, pparams *P) {
  memset(P, 0, sizeof *P);
  P->nsp = nsp;
  if (x->ndim != nsp + 1 && x->ndim != nsp + 2)
    return tpu_error(TPU_E_INVALID,
                     "%s: Expected %dD or %dD (batch mode) tensor for input, got "
                     "%dD", nm, nsp + 1, nsp + 2, x->ndim);
  P->lead = x->ndim - nsp;
  int n;
  int64_t scratch;
  const int64_t *ks = tpulw__ints(b, "kernel_size", &n, &scratch);
  if (!ks || (n != 1 && n != nsp))
    return tpu_error(TPU_E_INVALID,
                     "%s: kernel_size must either be a single int, or a tuple of %d ints",
                     nm, nsp);
  for (int i = 0; i < nsp; i++) P->k[i] = ks[n == 1 ? 0 : i];
  const int64_t *ss = tpulw__ints(b, "stride", &n, &scratch);
  if (!ss || n == 0) {
    for (int i = 0; i < nsp; i++) P->s[i] = P->k[i];
  } else if (n == 1 || n == nsp) {
    for (int i = 0; i < nsp; i++) P->s[i] = ss[n == 1 ? 0 : i];
  } else {
    return tpu_error(TPU_E_INVALID,
                     "%s: stride must either be omitted, a single int, or a tuple of %d ints",
                     nm, nsp);
  }
  int rc = expand(b, "padding", nsp, 0, P->p);
  if (rc) return rc;
  if (with_dil && (rc = expand(b, "dilation", nsp, 1, P->d))) return rc;
  if (!with_dil)
    for (int i = 0; i < nsp; i++) P->d[i] = 1;
  P->ceil = (int)tpulw__int(b, "ceil_mode", 0);
  for (int i = 0; i < nsp; i++) {
    if (P->k[i] <= 0)
      return tpu_error(TPU_E_INVALID,
                       "kernel size should be greater than zero, but got kH: %lld kW: %lld",
                       (long long)P->k[0], (long long)P->k[nsp - 1]);
    if (P->s[i] <= 0)
      return tpu_error(TPU_E_INVALID, "stride should be greater than zero, but got dH: "
                       "%lld dW: %lld", (long long)P->s[0], (long long)P->s[nsp - 1]);
    if (P->d[i] <= 0)
      return tpu_error(TPU_E_INVALID, "dilation should be greater than zero, but got "
                       "dilationH: %lld dilationW: %lld",
                       (long long)P->d[0], (long long)P->d[nsp - 1]);
    if (P->p[i] < 0 || P->p[i] > ((P->k[i] - 1) * P->d[i] + 1) / 2)
      return tpu_error(TPU_E_INVALID,
                       "pad should be at most half of effective kernel size, but "
                       "got pad=%lld, kernel_size=%lld and dilation=%lld",
                       (long long)P->p[i], (long long)P->k[i], (long long)P->d[i]);
  }
  int bad = 0;
  for (int i = 0; i < nsp; i++) {
    P->in[i] = x->sizes[P->lead + i];
    P->out[i] = pool_out(P->in[i], P->k[i], P->p[i], P->s[i], P->d[i], P->ceil);
    bad |= P->out[i] < 1;
  }
  if (bad) {
    char a[160], o[160];
    fmt_x(a, sizeof a, nsp, P->in);
    fmt_x(o, sizeof o, nsp, P->out);
    return tpu_error(TPU_E_INVALID,
                     "Given input size: (%s). Calculated output size: (%s). "
                     "Output size is too small", a, o);
  }
  return TPU_OK;
}

/* full-rank window attributes for a pooling (leading dims: window 1) */
static void pool_window(const pparams *P, int rank, int64_t *w, int64_t *s,
                        int64_t *lo, int64_t *hi, int64_t *dl) {
  for (int i = 0; i < rank; i++) {
    w[i] = s[i] = dl[i] = 1;
    lo[i] = hi[i] = 0;
  }
  for (int i = 0; i < P->nsp; i++) {
    int a = P->lead + i;
    w[a] = P->k[i];
    s[a] = P->s[i];
    dl[a] = P->d[i];
    lo[a] = P->p[i];
    int64_t need = (P->out[i] - 1) * P->s[i] + P->d[i] * (P->k[i] - 1) + 1 - P->in[i] - P->p[i];
    hi[a] = need > 0 ? need : 0;
  }
}

static int float_pool(const char *nm, int dt) {
  if (!tpu_dtype_is_float(dt))
    return tpu_error(TPU_E_UNSUPPORTED, "\"%s\" not implemented for '%s'", nm,
                     tpulw__torch_name(dt));
  return TPU_OK;
}

static int maxpool_fn(tpulw__b *b) {
  const tpulw_tensor *in = tpulw__tensor_arg(b, "self");
  if (!in || in->device < 0) return tpu_error(TPU_E_UNSUPPORTED, "max_pool: no tpu input");
  int nsp = strstr(b->base, "3d") ? 3 : 2;
  int rc = float_pool("max_pool", in->view.dtype);
  if (rc) return rc;
  if (nsp == 3 && (in->view.ndim == 4 || in->view.ndim == 5)) {
    const tpu_view *v = &in->view;
    for (int i = v->ndim - 4; i < v->ndim; i++)
      if (v->sizes[i] == 0) {
        char sh[256];
        size_t k = 0;
        sh[0] = 0;
        for (int j = 0; j < v->ndim && k < sizeof sh; j++)
          k += (size_t)snprintf(sh + k, sizeof sh - k, "%s%lld", j ? ", " : "",
                                (long long)v->sizes[j]);
        return tpu_error(TPU_E_INVALID,
                         "max_pool3d_with_indices_out_cpu_template(): Expected input's "
                         "non-batch dimensions to have positive length, but input has a shape "
                         "of [%s] and non-batch dimension 0 has length zero!", sh);
      }
  }
  pparams P;
  if ((rc = parse_pool(b, b->base, nsp, &in->view, 1, &P))) return rc;
  int rank = in->view.ndim;
  int64_t w[TPU_MAX_DIMS], s[TPU_MAX_DIMS], lo[TPU_MAX_DIMS], hi[TPU_MAX_DIMS],
      dl[TPU_MAX_DIMS];
  pool_window(&P, rank, w, s, lo, hi, dl);
  tpuir_val x = tpulw__tensor(b, in);
  tpuir_val v = tpuir_reduce_window(b->g, TPUIR_RED_MAX, x, w, s, lo, hi, dl);
  tpuir_val ix = tpuir_window_argmax(b->g, x, w, s, lo, hi, dl, nsp);
  if ((rc = tpulw__result(b, v)) < 0) return rc;
  return tpulw__result(b, ix);
}

static int maxpool_bw_fn(tpulw__b *b) {
  const tpulw_tensor *go = tpulw__tensor_arg(b, "grad_output"), *in = tpulw__tensor_arg(b, "self");
  const tpulw_tensor *ix = tpulw__tensor_arg(b, "indices");
  if (!go || !in || !ix || go->device < 0 || in->device < 0 || ix->device < 0)
    return tpu_error(TPU_E_UNSUPPORTED, "max_pool backward: operands must be tpu tensors");
  int nsp = strstr(b->base, "3d") ? 3 : 2;
  int dt = in->view.dtype;
  int rc = float_pool("max_pool_backward", dt);
  if (rc) return rc;
  if (go->view.dtype != dt)
    return tpu_error(TPU_E_INVALID, "expected scalar type %s but found %s",
                     tpulw__torch_name(dt), tpulw__torch_name(go->view.dtype));
  pparams P;
  if ((rc = parse_pool(b, b->base, nsp, &in->view, 1, &P))) return rc;
  const tpu_view *gv = &go->view, *iv = &ix->view;
  int rank = in->view.ndim, lead = P.lead;
  int ok = gv->ndim == rank && iv->ndim == rank;
  for (int i = 0; ok && i < rank; i++) {
    int64_t want = i < lead ? in->view.sizes[i] : P.out[i - lead];
    ok = gv->sizes[i] == want && iv->sizes[i] == want;
  }
  if (!ok)
    return tpu_error(TPU_E_INVALID,
                     "max_pool backward: grad_output / indices do not have the "
                     "pooled output's shape");
  /* base [lead..., prod(in)] zeros; scatter_add along the flat dim */
  int64_t flat_in = 1, flat_out = 1, bs[TPU_MAX_DIMS], gs[TPU_MAX_DIMS];
  for (int i = 0; i < nsp; i++) {
    flat_in *= P.in[i];
    flat_out *= P.out[i];
  }
  for (int i = 0; i < lead; i++) bs[i] = gs[i] = in->view.sizes[i];
  bs[lead] = flat_in;
  gs[lead] = flat_out;
  int cdt = tpulw__opmath(dt);
  tpuir_val g = tpulw__reshape(b, tpulw__convert(b, tpulw__tensor(b, go), cdt), lead + 1, gs);
  tpuir_val id = tpulw__reshape(b, tpulw__tensor(b, ix), lead + 1, gs);
  tpuir_val base = tpulw__full(b, cdt, lead + 1, bs, 0);
  /* indices come from max_pool*_with_indices: their range check reports
   * asynchronously (no launch-time synchronization) */
  tpuir_val r = tpuir_scatter_add(b->g, base, lead, id, g);
  return tpulw__result_as(b, tpulw__reshape(b, r, rank, in->view.sizes), dt);
}

/* per-output divisor of avg_pool, shape [1.., out...] in dtype cdt. Built
 * with arithmetic in cdt only (no int/bool temporaries next to a float
 * result in one fused region). */
static tpuir_val avg_divisor(tpulw__b *b, const pparams *P, int rank, int cip,
                             int cdt) {
  tpuir_val div = -1;
  for (int i = 0; i < P->nsp; i++) {
    int64_t o = P->out[i];
    int64_t sz1[1] = {o};
    tpuir_val q = tpuir_iota(b->g, cdt, 1, sz1, 0);
    tpuir_val start = tpulw__bin_c(b, TPUIR_SUB, tpulw__bin_c(b, TPUIR_MUL, q, (double)P->s[i]),
                               (double)P->p[i]);
    tpuir_val end = tpulw__bin_c(b, TPUIR_MIN, tpulw__bin_c(b, TPUIR_ADD, start, (double)P->k[i]),
                             (double)(P->in[i] + P->p[i]));
    tpuir_val cnt;
    if (cip) {
      cnt = tpulw__bin(b, TPUIR_SUB, end, start);
    } else {
      tpuir_val s0 = tpulw__bin_c(b, TPUIR_MAX, start, 0);
      tpuir_val e0 = tpulw__bin_c(b, TPUIR_MIN, end, (double)P->in[i]);
      cnt = tpulw__bin(b, TPUIR_SUB, e0, s0);
    }
    int64_t sz[TPU_MAX_DIMS];
    for (int d = 0; d < rank; d++) sz[d] = 1;
    sz[P->lead + i] = o;
    cnt = tpulw__reshape(b, cnt, rank, sz);
    div = i == 0 ? cnt : tpulw__bin(b, TPUIR_MUL, div, cnt);
  }
  return div;
}

static int avgpool_fn(tpulw__b *b) {
  int bw = b->op == P_AVG_BW;
  const tpulw_tensor *in = tpulw__tensor_arg(b, "self");
  const tpulw_tensor *go = bw ? tpulw__tensor_arg(b, "grad_output") : NULL;
  if (!in || in->device < 0 || (bw && (!go || go->device < 0)))
    return tpu_error(TPU_E_UNSUPPORTED, "avg_pool: operands must be tpu tensors");
  int nsp = strstr(b->base, "3d") ? 3 : 2;
  int dt = in->view.dtype;
  int rc;
  if (dt == TPU_BOOL || (bw && !tpu_dtype_is_float(dt)))
    return tpu_error(TPU_E_UNSUPPORTED, "\"avg_pool\" not implemented for '%s'",
                     tpulw__torch_name(dt));
  if (!tpu_dtype_is_float(dt) && dt != TPU_I64)
    return tpu_error(TPU_E_UNSUPPORTED, "\"avg_pool2d\" not implemented for '%s'",
                     tpulw__torch_name(dt));
  pparams P;
  if ((rc = parse_pool(b, b->base, nsp, &in->view, 0, &P))) return rc;
  int cip = (int)tpulw__int(b, "count_include_pad", 1);
  int64_t dov = 0;
  if (!tpulw__none(b, "divisor_override")) {
    dov = tpulw__int(b, "divisor_override", 0);
    if (dov == 0) return tpu_error(TPU_E_INVALID, "divisor must be not zero");
  }
  int rank = in->view.ndim;
  int64_t w[TPU_MAX_DIMS], s[TPU_MAX_DIMS], lo[TPU_MAX_DIMS], hi[TPU_MAX_DIMS],
      dl[TPU_MAX_DIMS];
  pool_window(&P, rank, w, s, lo, hi, dl);
  if (!tpu_dtype_is_float(dt)) { /* int64: sum, divide truncating (like CPU) */
    tpuir_val x = tpulw__convert(b, tpulw__tensor(b, in), TPU_I64);
    tpuir_val sum = tpuir_reduce_window(b->g, TPUIR_RED_SUM, x, w, s, lo, hi, dl);
    tpuir_val dv = dov ? tpulw__const(b, TPU_I64, (double)dov)
                       : avg_divisor(b, &P, rank, cip, TPU_I64);
    return tpulw__result_as(b, tpulw__bin(b, TPUIR_DIV, sum, dv), dt);
  }
  int cdt = tpulw__opmath(dt);
  tpuir_val dv = dov ? tpulw__const(b, cdt, (double)dov) : avg_divisor(b, &P, rank, cip, cdt);
  if (!bw) {
    tpuir_val x = tpulw__convert(b, tpulw__tensor(b, in), cdt);
    tpuir_val sum = tpuir_reduce_window(b->g, TPUIR_RED_SUM, x, w, s, lo, hi, dl);
    return tpulw__result_as(b, tpulw__bin(b, TPUIR_DIV, sum, dv), dt);
  }
  const tpu_view *gv = &go->view;
  int ok = gv->ndim == rank && gv->dtype == dt;
  for (int i = 0; ok && i < rank; i++)
    ok = gv->sizes[i] == (i < P.lead ? in->view.sizes[i] : P.out[i - P.lead]);
  if (!ok)
    return tpu_error(TPU_E_INVALID,
                     "avg_pool backward: grad_output does not have the pooled "
                     "output's shape/dtype");
  tpuir_val g = tpulw__bin(b, TPUIR_DIV, tpulw__convert(b, tpulw__tensor(b, go), cdt), dv);
  int64_t plo[TPU_MAX_DIMS], phi[TPU_MAX_DIMS], pin[TPU_MAX_DIMS], win[TPU_MAX_DIMS];
  for (int i = 0; i < rank; i++) {
    plo[i] = phi[i] = pin[i] = 0;
    win[i] = 1;
  }
  for (int i = 0; i < nsp; i++) {
    int a = P.lead + i;
    int64_t L = (P.out[i] - 1) * P.s[i] + 1;
    plo[a] = P.k[i] - 1 - P.p[i];
    phi[a] = P.in[i] + P.k[i] - 1 - plo[a] - L;
    pin[a] = P.s[i] - 1;
    win[a] = P.k[i];
  }
  tpuir_val zero = tpulw__const(b, cdt, 0);
  tpuir_val gp = tpuir_pad(b->g, g, zero, plo, phi, pin);
  tpuir_val r = tpuir_reduce_window(b->g, TPUIR_RED_SUM, gp, win, NULL, NULL, NULL, NULL);
  return tpulw__result_as(b, r, dt);
}

/* averaging matrix [out, in] (adaptive pooling) in float dtype cdt:
 * M[o, i] = [start(o) <= i < end(o)] / (end(o) - start(o)) with
 * start = floor(o * in / out), end = ceil((o + 1) * in / out) (exact in
 * cdt while o * in < 2^24). Float arithmetic only: the indicator is
 * clamp(i - start + 1, 0, 1) * clamp(end - i, 0, 1). */
static tpuir_val adapt_matrix(tpulw__b *b, int64_t out, int64_t in, int cdt) {
  int64_t sz[2] = {out, in};
  tpuir_val o = tpuir_iota(b->g, cdt, 2, sz, 0);
  tpuir_val i = tpuir_iota(b->g, cdt, 2, sz, 1);
  tpuir_val start = tpulw__un(b, TPUIR_FLOOR,
                          tpulw__bin_c(b, TPUIR_DIV, tpulw__bin_c(b, TPUIR_MUL, o, (double)in), (double)out));
  tpuir_val end = tpulw__un(b, TPUIR_CEIL,
                        tpulw__bin_c(b, TPUIR_DIV,
                                 tpulw__bin_c(b, TPUIR_MUL, tpulw__bin_c(b, TPUIR_ADD, o, 1), (double)in),
                                 (double)out));
  tpuir_val ge = tpulw__bin_c(b, TPUIR_MIN,
                          tpulw__bin_c(b, TPUIR_MAX, tpulw__bin_c(b, TPUIR_ADD, tpulw__bin(b, TPUIR_SUB, i, start), 1), 0), 1);
  tpuir_val lt = tpulw__bin_c(b, TPUIR_MIN, tpulw__bin_c(b, TPUIR_MAX, tpulw__bin(b, TPUIR_SUB, end, i), 0), 1);
  return tpulw__bin(b, TPUIR_DIV, tpulw__bin(b, TPUIR_MUL, ge, lt), tpulw__bin(b, TPUIR_SUB, end, start));
}

static int adapt_fn(tpulw__b *b) {
  int bw = b->op == P_ADAPT_BW;
  const tpulw_tensor *in = tpulw__tensor_arg(b, "self");
  const tpulw_tensor *go = bw ? tpulw__tensor_arg(b, "grad_output") : NULL;
  if (!in || in->device < 0 || (bw && (!go || go->device < 0)))
    return tpu_error(TPU_E_UNSUPPORTED, "adaptive_avg_pool: operands must be tpu tensors");
  int nsp = strstr(b->base, "3d") ? 3 : 2;
  int dt = in->view.dtype;
  int rc = float_pool("adaptive_avg_pool", dt);
  if (rc) return rc;
  const tpu_view *xv = &in->view;
  if (xv->ndim != nsp + 1 && xv->ndim != nsp + 2)
    return tpu_error(TPU_E_INVALID,
                     "adaptive_avg_pool%dd(): Expected %dD or %dD tensor, but got %dD",
                     nsp, nsp + 1, nsp + 2, xv->ndim);
  int lead = xv->ndim - nsp, rank = xv->ndim;
  for (int i = 1; i < lead; i++)
    if (xv->sizes[i] == 0)
      return tpu_error(TPU_E_INVALID,
                       "adaptive_avg_pool%dd(): Expected input to have non-zero "
                       "size for non-batch dimensions", nsp);
  for (int i = 0; i < nsp; i++)
    if (xv->sizes[lead + i] == 0)
      return tpu_error(TPU_E_INVALID,
                       "adaptive_avg_pool%dd(): Expected input to have non-zero "
                       "size for non-batch dimensions", nsp);
  int64_t osz[MAXSP];
  if (!bw) {
    int n;
    int64_t scratch;
    const int64_t *os = tpulw__ints(b, "output_size", &n, &scratch);
    if (!os || (n != nsp && n != 1))
      return tpu_error(TPU_E_INVALID, "adaptive_avg_pool%dd: output_size must be %d",
                       nsp, nsp);
    for (int i = 0; i < nsp; i++) {
      osz[i] = os[n == 1 ? 0 : i];
      if (osz[i] < 0)
        return tpu_error(TPU_E_INVALID, "adaptive_avg_pool%dd: elements of "
                         "output_size must be greater than or equal to 0", nsp);
    }
  } else {
    const tpu_view *gv = &go->view;
    if (gv->ndim != rank || gv->dtype != dt)
      return tpu_error(TPU_E_INVALID, "adaptive_avg_pool backward: grad_output rank/dtype");
    for (int i = 0; i < lead; i++)
      if (gv->sizes[i] != xv->sizes[i])
        return tpu_error(TPU_E_INVALID, "adaptive_avg_pool backward: grad_output shape");
    for (int i = 0; i < nsp; i++) osz[i] = gv->sizes[lead + i];
  }
  int cdt = dt == TPU_F64 ? TPU_F64 : TPU_F32;
  tpuir_val v = tpulw__convert(b, tpulw__tensor(b, bw ? go : in), cdt);
  for (int i = 0; i < nsp; i++) {
    int64_t in_i = xv->sizes[lead + i], out_i = osz[i];
    tpuir_val M = adapt_matrix(b, out_i, in_i, cdt);
    int64_t lc[1] = {lead}, rc1[1] = {bw ? 0 : 1};
    /* contracting the first remaining spatial dim appends the new one */
    v = tpuir_dot_general(b->g, v, M, 0, NULL, NULL, 1, lc, rc1, TPU_PREC_FP32, cdt);
  }
  return tpulw__result_as(b, v, dt);
}

/* Scatter-add grad [lead..., out...] into zeros [lead..., in...] at the flat
 * spatial positions idx (same shape as grad) over the last nsp dims. */
static tpuir_val flat_scatter(tpulw__b *b, tpuir_val grad, tpuir_val idx, int rank, int nsp,
                              const int64_t *in_sizes, int cdt) {
  tpulw__shape gs = tpulw__info(b, grad);
  int lead = rank - nsp;
  int64_t bs[TPU_MAX_DIMS], ss[TPU_MAX_DIMS];
  int64_t fin = 1, fout = 1;
  for (int i = 0; i < nsp; i++) {
    fin *= in_sizes[lead + i];
    fout *= gs.sizes[lead + i];
  }
  for (int i = 0; i < lead; i++) bs[i] = ss[i] = in_sizes[i];
  bs[lead] = fin;
  ss[lead] = fout;
  tpuir_val g = tpulw__reshape(b, tpulw__convert(b, grad, cdt), lead + 1, ss);
  tpuir_val id = tpulw__reshape(b, idx, lead + 1, ss);
  tpuir_val r = tpuir_scatter_add(b->g, tpulw__full(b, cdt, lead + 1, bs, 0), lead, id, g);
  return tpulw__reshape(b, r, rank, in_sizes);
}

/* ---- max_unpool ---------------------------------------------------------- */

static int unpool_fn(tpulw__b *b) {
  const tpulw_tensor *in = tpulw__tensor_arg(b, "self"), *ix = tpulw__tensor_arg(b, "indices");
  int rc;
  if ((rc = tpulw__need_tpu(b, in)) || (rc = tpulw__need_tpu(b, ix))) return rc;
  int nsp = tpulw__nsp_of(b);
  const tpu_view *v = &in->view, *iv = &ix->view;
  char s1[256], s2[256];
  int no;
  int64_t sc[3];
  const int64_t *os = tpulw__ints(b, "output_size", &no, &sc[0]);
  if (iv->dtype != TPU_I64)
    return tpu_error(TPU_E_INVALID, "elements in indices should be type int64 but got: %s",
                     tpulw__torch_name(iv->dtype));
  if (nsp == 2 && no != 2)
    return tpu_error(TPU_E_INVALID, "There should be exactly two elements (height, width) in "
                     "output_size, but got %d elements.", no);
  if (v->ndim != nsp + 1 && v->ndim != nsp + 2)
    return tpu_error(TPU_E_INVALID, "Input to max_unpooling%dd should be a %dd or %dd Tensor, "
                     "but got a tensor with %d dimensions.", nsp, nsp + 1, nsp + 2, v->ndim);
  if (nsp == 3) {
    int ns, np;
    const int64_t *st = tpulw__ints(b, "stride", &ns, &sc[1]);
    const int64_t *pd = tpulw__ints(b, "padding", &np, &sc[2]);
    (void)pd;
    if (no != 3)
      return tpu_error(TPU_E_INVALID, "There should be exactly three elements (depth, height, "
                       "width) in output_size, but got %d elements.", no);
    if (ns != 3)
      return tpu_error(TPU_E_INVALID, "There should be exactly three elements (depth, height, "
                       "width) in stride, but got: %d elements.", ns);
    if (np != 3)
      return tpu_error(TPU_E_INVALID, "There should be exactly three elements (depth, height, "
                       "width) in padding, but got: %d elements.", np);
    if (st[0] <= 0 || st[1] <= 0 || st[2] <= 0)
      return tpu_error(TPU_E_INVALID, "strides should be greater than zero, but got stride: "
                       "[%s]", tpulw__fmt_list(s1, sizeof s1, 3, st));
  }
  int same = iv->ndim == v->ndim;
  for (int i = 0; same && i < v->ndim; i++) same = iv->sizes[i] == v->sizes[i];
  if (!same)
    return tpu_error(TPU_E_INVALID, "Expected shape of indices to be same as that of the input "
                     "tensor ([%s]) but got indices tensor with shape: [%s]",
                     tpulw__fmt_list(s1, sizeof s1, v->ndim, v->sizes),
                     tpulw__fmt_list(s2, sizeof s2, iv->ndim, iv->sizes));
  for (int i = 1; i < v->ndim; i++)
    if (v->sizes[i] <= 0)
      return tpu_error(TPU_E_INVALID, "max_unpooling%dd_forward_out_cpu(): Expected input to "
                       "have non-zero size for non-batch dimensions, but got [%s] with "
                       "dimension %d being empty.", nsp, tpulw__fmt_list(s1, sizeof s1, v->ndim, v->sizes), i);
  int dt = v->dtype;
  if (dt == TPU_BOOL) return tpu_error(TPU_E_UNSUPPORTED, "max_unpool: bool");
  int rank = v->ndim, lead = rank - nsp;
  int64_t osz[TPU_MAX_DIMS];
  for (int i = 0; i < lead; i++) osz[i] = v->sizes[i];
  for (int i = 0; i < nsp; i++) {
    if (os[i] < 0) return tpu_error(TPU_E_INVALID, "max_unpool: negative output_size");
    osz[lead + i] = os[i];
  }
  int cdt = tpu_dtype_is_float(dt) ? tpulw__opmath(dt) : (dt == TPU_U8 ? TPU_I64 : dt);
  if (!tpu_dtype_is_float(dt)) cdt = TPU_I64;
  tpuir_val x = tpulw__convert(b, tpulw__tensor(b, in), cdt);
  tpuir_val id = tpulw__tensor(b, ix);
  /* assignment semantics: duplicate indices (overlapping pooling windows)
   * hold the same input element; sum / count gives it back */
  tpuir_val sum = flat_scatter(b, x, id, rank, nsp, osz, cdt);
  tpuir_val cnt = flat_scatter(b, tpulw__full(b, cdt, rank, v->sizes, 1), id, rank, nsp, osz, cdt);
  tpuir_val r = tpulw__bin(b, TPUIR_DIV, sum, tpulw__bin_c(b, TPUIR_MAX, cnt, 1));
  b->sync = 1;
  b->err_remap = LW_ERR_RUNTIME;
  return tpulw__result_as(b, r, dt);
}

/* ---- windowed max over gathered windows --------------------------------- */

/* x [lead..., in...] (rank), pos [lead'..., P, K] int64 flat positions in
 * the spatial plane (lead' = lead dims or all-1 to broadcast), P = prod
 * out: the op's two results, max value and its flat index, both of shape
 * [lead..., out...]. */
static int window_max(tpulw__b *b, tpuir_val x, tpuir_val pos, int rank, int nsp,
                      const int64_t *out) {
  tpulw__shape xs = tpulw__info(b, x);
  int lead = rank - nsp;
  int64_t fin = 1, P = 1;
  for (int i = 0; i < nsp; i++) {
    fin *= xs.sizes[lead + i];
    P *= out[i];
  }
  tpulw__shape ps = tpulw__info(b, pos);
  int64_t K = ps.sizes[ps.ndim - 1];
  int64_t fs[TPU_MAX_DIMS], gs[TPU_MAX_DIMS], ks[TPU_MAX_DIMS], os[TPU_MAX_DIMS];
  for (int i = 0; i < lead; i++) fs[i] = gs[i] = ks[i] = os[i] = xs.sizes[i];
  fs[lead] = fin;
  gs[lead] = P * K;
  ks[lead] = P;
  ks[lead + 1] = K;
  for (int i = 0; i < nsp; i++) os[lead + i] = out[i];
  tpuir_val pk = tpulw__bcast(b, pos, lead + 2, ks);
  tpuir_val xf = tpulw__reshape(b, x, lead + 1, fs);
  tpuir_val w = tpuir_gather(b->g, xf, lead, tpulw__reshape(b, pk, lead + 1, gs));
  w = tpulw__reshape(b, w, lead + 2, ks);
  LW_TRY(w);
  tpuir_val am = tpuir_argreduce(b->g, TPUIR_RED_MAX, w, lead + 1);
  LW_TRY(am);
  ks[lead + 1] = 1;
  tpuir_val am1 = tpulw__reshape(b, am, lead + 2, ks);
  int rc = tpulw__result(b, tpulw__reshape(b, tpuir_gather(b->g, w, lead + 1, am1), rank, os));
  if (rc < 0) return rc;
  return tpulw__result(b, tpulw__reshape(b, tpuir_gather(b->g, pk, lead + 1, am1), rank, os));
}

/* flat positions [P, K] (shape [1.., P, K] at rank lead + 2) from per-dim
 * window starts st[j] (int64 [s..., out_j], s = leading dims shared) and
 * window lengths: pos = sum_j clamp(st_j + k_j, st_j, st_j + len_j - 1) *
 * stride_j. st values may have leading batch dims `bl` (rank bl + 1). */
static tpuir_val window_pos(tpulw__b *b, int bl, const int64_t *bsz, int nsp, const tpuir_val *st,
                            const tpuir_val *len, const int64_t *out, const int64_t *kk,
                            const int64_t *in) {
  /* full index space [bl..., o_0, .., o_{n-1}, k_0, .., k_{n-1}] */
  int nd = bl + 2 * nsp;
  int64_t sz[TPU_MAX_DIMS * 2];
  if (nd > TPU_MAX_DIMS) return tpu_error(TPU_E_UNSUPPORTED, "window_pos: rank");
  for (int i = 0; i < bl; i++) sz[i] = bsz[i];
  for (int j = 0; j < nsp; j++) {
    sz[bl + j] = out[j];
    sz[bl + nsp + j] = kk[j];
  }
  tpuir_val pos = -1;
  int64_t stride = 1;
  for (int j = nsp - 1; j >= 0; j--) {
    int64_t dims[TPU_MAX_DIMS];
    for (int i = 0; i < bl; i++) dims[i] = i;
    dims[bl] = bl + j;
    tpuir_val s = tpuir_broadcast_in_dim(b->g, st[j], nd, sz, dims);
    tpuir_val l = tpuir_broadcast_in_dim(b->g, len[j], nd, sz, dims);
    tpuir_val k = tpuir_iota(b->g, TPU_I64, nd, sz, bl + nsp + j);
    tpuir_val lim = tpulw__bin_c(b, TPUIR_SUB, tpulw__bin(b, TPUIR_ADD, s, l), 1);
    tpuir_val p = tpulw__bin(b, TPUIR_MIN, tpulw__bin(b, TPUIR_ADD, s, k), lim);
    p = tpulw__bin_c(b, TPUIR_MUL, p, (double)stride);
    pos = pos < 0 ? p : tpulw__bin(b, TPUIR_ADD, pos, p);
    LW_TRY(pos);
    stride *= in[j];
  }
  int64_t P = 1, K = 1;
  for (int j = 0; j < nsp; j++) {
    P *= out[j];
    K *= kk[j];
  }
  int64_t rs[TPU_MAX_DIMS];
  for (int i = 0; i < bl; i++) rs[i] = bsz[i];
  rs[bl] = P;
  rs[bl + 1] = K;
  return tpulw__reshape(b, pos, bl + 2, rs);
}

static int adapt_max_fn(tpulw__b *b) {
  const tpulw_tensor *in = tpulw__tensor_arg(b, "self");
  int rc;
  if ((rc = tpulw__need_tpu(b, in))) return rc;
  int nsp = tpulw__nsp_of(b);
  const tpu_view *v = &in->view;
  int dt = v->dtype;
  if ((rc = tpulw__float_only(b, dt))) return rc;
  char s1[256];
  if (v->ndim != nsp + 1 && v->ndim != nsp + 2)
    return tpu_error(TPU_E_INVALID, "adaptive_max_pool%dd(): Expected %dD or %dD tensor, but "
                     "got: [%s]", nsp, nsp + 1, nsp + 2, tpulw__fmt_list(s1, sizeof s1, v->ndim, v->sizes));
  int rank = v->ndim, lead = rank - nsp;
  for (int i = 1; i < rank; i++)
    if (v->sizes[i] == 0)
      return tpu_error(TPU_E_INVALID, "adaptive_max_pool%dd(): Expected input to have non-zero "
                       "size for non-batch dimensions, but input has sizes [%s] with dimension "
                       "%d being empty", nsp, tpulw__fmt_list(s1, sizeof s1, rank, v->sizes), i);
  if (b->op == P_ADAPT_MAX_BW) {
    const tpulw_tensor *go = tpulw__tensor_arg(b, "grad_output"), *ix = tpulw__tensor_arg(b, "indices");
    if ((rc = tpulw__need_tpu(b, go)) || (rc = tpulw__need_tpu(b, ix))) return rc;
    if (go->view.ndim != rank || ix->view.ndim != rank)
      return tpu_error(TPU_E_INVALID, "adaptive_max_pool%dd_backward(): Expected %dD or %dD "
                       "grad_output", nsp, nsp + 1, nsp + 2);
    if (go->view.dtype != dt)
      return tpu_error(TPU_E_INVALID, "expected dtype %s for `gradOutput` but got dtype %s",
                       tpulw__torch_name(dt), tpulw__torch_name(go->view.dtype));
    tpuir_val r = flat_scatter(b, tpulw__tensor(b, go), tpulw__tensor(b, ix), rank, nsp, v->sizes,
                               tpulw__opmath(dt));
    return tpulw__result_as(b, r, dt);
  }
  int no;
  int64_t sc;
  const int64_t *os = tpulw__ints(b, "output_size", &no, &sc);
  if (no != nsp)
    return tpu_error(TPU_E_INVALID, "adaptive_max_pool%dd(): internal error: output_size.size() "
                     "must be %d", nsp, nsp);
  int64_t out[3], kk[3], ins[3];
  tpuir_val st[3], len[3];
  for (int j = 0; j < nsp; j++) {
    int64_t I = v->sizes[lead + j], O = os[j];
    if (O < 0) return tpu_error(TPU_E_INVALID, "adaptive_max_pool: negative output size");
    out[j] = O;
    ins[j] = I;
    int64_t K = 1;
    for (int64_t o = 0; o < O; o++) {
      int64_t s = o * I / O, e = ((o + 1) * I + O - 1) / O;
      if (e - s > K) K = e - s;
    }
    kk[j] = K;
    tpuir_val o = tpuir_iota(b->g, TPU_I64, 1, &out[j], 0);
    tpuir_val s = tpulw__bin_c(b, TPUIR_DIV, tpulw__bin_c(b, TPUIR_MUL, o, (double)I), (double)(O ? O : 1));
    tpuir_val e = tpulw__bin_c(b, TPUIR_DIV, tpulw__bin_c(b, TPUIR_ADD, tpulw__bin_c(b, TPUIR_MUL, o, (double)I),
                                                  (double)(I + O - 1)),
                           (double)(O ? O : 1));
    st[j] = s;
    len[j] = tpulw__bin(b, TPUIR_SUB, e, s);
    LW_TRY(len[j]);
  }
  int64_t osz[TPU_MAX_DIMS];
  for (int i = 0; i < lead; i++) osz[i] = v->sizes[i];
  for (int j = 0; j < nsp; j++) osz[lead + j] = out[j];
  int64_t P = 1;
  for (int j = 0; j < nsp; j++) P *= out[j];
  tpuir_val x = tpulw__tensor(b, in);
  if (P == 0 || v->sizes[0] == 0) {
    if ((rc = tpulw__result(b, tpulw__full(b, dt, rank, osz, 0))) < 0) return rc;
    return tpulw__result(b, tpulw__full(b, TPU_I64, rank, osz, 0));
  }
  tpuir_val pos = window_pos(b, 0, NULL, nsp, st, len, out, kk, ins);
  LW_TRY(pos);
  int64_t ps[TPU_MAX_DIMS];
  for (int i = 0; i < lead; i++) ps[i] = 1;
  ps[lead] = P;
  ps[lead + 1] = tpulw__info(b, pos).sizes[1];
  pos = tpulw__reshape(b, pos, lead + 2, ps);
  return window_max(b, x, pos, rank, nsp, out);
}

/* ---- fractional max pool ----------------------------------------------- */

static int frac_fn(tpulw__b *b) {
  const tpulw_tensor *in = tpulw__tensor_arg(b, "self");
  int rc;
  if ((rc = tpulw__need_tpu(b, in))) return rc;
  int nsp = tpulw__nsp_of(b);
  const tpu_view *v = &in->view;
  int dt = v->dtype;
  if ((rc = tpulw__float_only(b, dt))) return rc;
  char s1[256];
  int nk, no;
  int64_t sc[2];
  const int64_t *ks = tpulw__ints(b, "kernel_size", &nk, &sc[0]);
  const int64_t *os = tpulw__ints(b, "output_size", &no, &sc[1]);
  int rank = v->ndim, lead = rank - nsp;
  if (nk != nsp || no != nsp)
    return tpu_error(TPU_E_INVALID, "fractional_max_pool%dd: kernel_size and output_size must "
                     "have %d elements", nsp, nsp);
  if (rank != nsp + 1 && rank != nsp + 2)
    return tpu_error(TPU_E_INVALID, "fractional_max_pool%dd(): Expected %dD or %dD tensor, but "
                     "got: [%s]", nsp, nsp + 1, nsp + 2, tpulw__fmt_list(s1, sizeof s1, rank, v->sizes));
  for (int i = 1; i < rank; i++)
    if (v->sizes[i] <= 0)
      return tpu_error(TPU_E_INVALID, "fractional_max_pool%dd(): Expected input to have non-zero "
                       "size for non-batch dimensions, but got [%s] with dimension %d being empty.",
                       nsp, tpulw__fmt_list(s1, sizeof s1, rank, v->sizes), i);
  static const char *const dn[3] = {"time", "height", "width"};
  for (int j = 0; j < nsp; j++) {
    int64_t I = v->sizes[lead + j];
    const char *name = dn[3 - nsp + j];
    if (ks[j] <= 0 || os[j] <= 0)
      return tpu_error(TPU_E_INVALID, "fractional_max_pool%dd: kernel_size and output_size must "
                       "be greater than zero", nsp);
    if (os[j] + ks[j] - 1 > I)
      return tpu_error(TPU_E_INVALID, "fractional_max_pool%dd_out(): pool %s %lld too large "
                       "relative to input %s %lld", nsp, name, (long long)ks[j], name, (long long)I);
  }
  if (b->op == P_FRAC_BW) {
    const tpulw_tensor *go = tpulw__tensor_arg(b, "grad_output"), *ix = tpulw__tensor_arg(b, "indices");
    if ((rc = tpulw__need_tpu(b, go)) || (rc = tpulw__need_tpu(b, ix))) return rc;
    int ok = go->view.ndim == rank && ix->view.ndim == rank;
    for (int i = 0; ok && i < rank; i++) {
      int64_t want = i < lead ? v->sizes[i] : os[i - lead];
      ok = go->view.sizes[i] == want && ix->view.sizes[i] == want;
    }
    if (!ok)
      return tpu_error(TPU_E_INVALID, "fractional_max_pool%dd_backward(): gradOutput / indices "
                       "do not have the pooled output's shape", nsp);
    tpuir_val r = flat_scatter(b, tpulw__tensor(b, go), tpulw__tensor(b, ix), rank, nsp, v->sizes,
                               tpulw__opmath(dt));
    return tpulw__result_as(b, r, dt);
  }
  const tpulw_tensor *rs = tpulw__tensor_arg(b, "random_samples");
  if ((rc = tpulw__need_tpu(b, rs))) return rc;
  int64_t N = lead == 2 ? v->sizes[0] : 1, C = v->sizes[lead - 1];
  const tpu_view *rv = &rs->view;
  if (rv->ndim != 3 || rv->sizes[0] < N || rv->sizes[1] < C || rv->sizes[2] != nsp)
    return tpu_error(TPU_E_INVALID, "fractional_max_pool%dd(): random_samples must have shape "
                     "[N, C, %d]", nsp, nsp);
  if (rv->dtype != dt)
    return tpu_error(TPU_E_INVALID, "expected scalar type %s but found %s", tpulw__torch_name(dt),
                     tpulw__torch_name(rv->dtype));
  int64_t osz[TPU_MAX_DIMS];
  for (int i = 0; i < lead; i++) osz[i] = v->sizes[i];
  for (int j = 0; j < nsp; j++) osz[lead + j] = os[j];
  if (N == 0) {
    if ((rc = tpulw__result(b, tpulw__full(b, dt, rank, osz, 0))) < 0) return rc;
    return tpulw__result(b, tpulw__full(b, TPU_I64, rank, osz, 0));
  }
  /* window starts [N, C, out_j] from the samples, in the sample dtype:
   * seq[i] = int((i + u) * alpha) - int(u * alpha), seq[out-1] = in - k;
   * 2d: sample 0 is for W, 1 for H; 3d: 0 T, 1 H, 2 W */
  int wdt = dt == TPU_F64 ? TPU_F64 : TPU_F32;
  tpuir_val r = tpulw__convert(b, tpulw__tensor(b, rs), wdt);
  int64_t z3[3] = {0, 0, 0}, one3[3] = {1, 1, 1};
  tpuir_val st[3], len[3];
  int64_t out[3], kk[3], ins[3], bsz[2] = {N, C};
  for (int j = 0; j < nsp; j++) {
    int sidx = nsp == 2 ? 1 - j : j;
    int64_t I = v->sizes[lead + j], O = os[j], K = ks[j];
    out[j] = O;
    kk[j] = K;
    ins[j] = I;
    int64_t lo[3] = {0, 0, sidx}, hi[3] = {N, C, sidx + 1};
    tpuir_val u = tpuir_slice(b->g, r, lo, hi, one3);
    (void)z3;
    int64_t s3[3] = {N, C, O}, d3[3] = {0, 1, 2};
    u = tpuir_broadcast_in_dim(b->g, u, 3, s3, d3);
    tpuir_val seq;
    tpuir_val i = tpuir_iota(b->g, TPU_I64, 3, s3, 2);
    if (O > 1) {
      double alpha = (double)(I - K) / (double)(O - 1);
      if (wdt == TPU_F32) alpha = (float)((float)(I - K) / (float)(O - 1));
      tpuir_val fi = tpuir_iota(b->g, wdt, 3, s3, 2);
      tpuir_val a = tpulw__convert(b, tpulw__bin_c(b, TPUIR_MUL, tpulw__bin(b, TPUIR_ADD, fi, u), alpha), TPU_I64);
      tpuir_val c = tpulw__convert(b, tpulw__bin_c(b, TPUIR_MUL, u, alpha), TPU_I64);
      seq = tpulw__bin(b, TPUIR_SUB, a, c);
      seq = tpulw__sel(b, tpulw__bin_c(b, TPUIR_EQ, i, (double)(O - 1)), tpulw__const(b, TPU_I64, (double)(I - K)), seq);
    } else {
      seq = tpulw__full(b, TPU_I64, 3, s3, (double)(I - K));
    }
    st[j] = seq;
    len[j] = tpulw__full(b, TPU_I64, 3, s3, (double)K);
    LW_TRY(len[j]);
  }
  tpuir_val pos = window_pos(b, 2, bsz, nsp, st, len, out, kk, ins);
  LW_TRY(pos);
  if (lead == 1) {
    tpulw__shape p = tpulw__info(b, pos);
    /* unbatched: [1, C, P, K] -> [C, P, K] */
    int64_t s3[3] = {C, p.sizes[2], p.sizes[3]};
    pos = tpulw__reshape(b, pos, 3, s3);
  }
  return window_max(b, tpulw__tensor(b, in), pos, rank, nsp, out);
}

#define ROW2(n, fn, code) {n, fn, code}, {n ".out", fn, code}

const tpulw__row tpulw__rows_conv[] = {
    ROW2("convolution", conv_fn, C_CONV),
    ROW2("_convolution", conv_fn, C_CONV),
    ROW2("convolution_overrideable", conv_fn, C_CONV),
    ROW2("convolution_backward", conv_bw_fn, C_CONV_BW),
    ROW2("convolution_backward_overrideable", conv_bw_fn, C_CONV_BW),
    ROW2("max_pool2d_with_indices", maxpool_fn, P_MAX),
    ROW2("max_pool3d_with_indices", maxpool_fn, P_MAX),
    {"max_pool2d_with_indices_backward", maxpool_bw_fn, P_MAX_BW},
    {"max_pool2d_with_indices_backward.grad_input", maxpool_bw_fn, P_MAX_BW},
    {"max_pool3d_with_indices_backward", maxpool_bw_fn, P_MAX_BW},
    {"max_pool3d_with_indices_backward.grad_input", maxpool_bw_fn, P_MAX_BW},
    ROW2("avg_pool2d", avgpool_fn, P_AVG),
    ROW2("avg_pool3d", avgpool_fn, P_AVG),
    {"avg_pool2d_backward", avgpool_fn, P_AVG_BW},
    {"avg_pool2d_backward.grad_input", avgpool_fn, P_AVG_BW},
    {"avg_pool3d_backward", avgpool_fn, P_AVG_BW},
    {"avg_pool3d_backward.grad_input", avgpool_fn, P_AVG_BW},
    ROW2("_adaptive_avg_pool2d", adapt_fn, P_ADAPT),
    ROW2("_adaptive_avg_pool3d", adapt_fn, P_ADAPT),
    ROW2("_adaptive_avg_pool2d_backward", adapt_fn, P_ADAPT_BW),
    ROW2("_adaptive_avg_pool3d_backward", adapt_fn, P_ADAPT_BW),
    ROW2("max_unpool2d", unpool_fn, P_UNPOOL),
    ROW2("max_unpool3d", unpool_fn, P_UNPOOL),
    ROW2("adaptive_max_pool2d", adapt_max_fn, P_ADAPT_MAX),
    ROW2("adaptive_max_pool3d", adapt_max_fn, P_ADAPT_MAX),
    {"adaptive_max_pool2d_backward", adapt_max_fn, P_ADAPT_MAX_BW},
    {"adaptive_max_pool2d_backward.grad_input", adapt_max_fn, P_ADAPT_MAX_BW},
    {"adaptive_max_pool3d_backward", adapt_max_fn, P_ADAPT_MAX_BW},
    {"adaptive_max_pool3d_backward.grad_input", adapt_max_fn, P_ADAPT_MAX_BW},
    {"fractional_max_pool2d", frac_fn, P_FRAC},
    {"fractional_max_pool2d.output", frac_fn, P_FRAC},
    {"fractional_max_pool3d", frac_fn, P_FRAC},
    {"fractional_max_pool3d.output", frac_fn, P_FRAC},
    {"fractional_max_pool2d_backward", frac_fn, P_FRAC_BW},
    {"fractional_max_pool2d_backward.grad_input", frac_fn, P_FRAC_BW},
    {"fractional_max_pool3d_backward", frac_fn, P_FRAC_BW},
    {"fractional_max_pool3d_backward.grad_input", frac_fn, P_FRAC_BW},
};
const int tpulw__nrows_conv = sizeof tpulw__rows_conv / sizeof tpulw__rows_conv[0];

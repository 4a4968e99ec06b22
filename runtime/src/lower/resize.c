/* lower/resize.c - interpolation: upsample_nearest{1,2,3}d,
 * _upsample_nearest_exact{1,2,3}d, upsample_linear1d / bilinear2d /
 * trilinear3d, upsample_bicubic2d and _upsample_bilinear2d_aa (an
 * interpolation matrix per spatial dim), and their backward ops;
 * grid_sampler_2d/3d (+ backward: bilinear, nearest, bicubic taps gathered
 * from the flattened plane, gradients scattered back); reflection /
 * replication padding.
 *
 * Interpolation is separable: each spatial dim is resampled in turn with
 * index_select (and, for the linear modes, a two-tap blend); the backward
 * ops scatter with index_add in the reverse order. Source indices and
 * weights are computed in the graph with PyTorch's float formulas
 * (UpSample.h: nearest in float32, linear in the op's accumulate type).
 */
#include <math.h>
#include <string.h>

#include "lower/internal.h"

enum { U_NEAREST = 1, U_NEAREST_EXACT, U_LINEAR, U_BICUBIC, U_BILINEAR_AA };

typedef struct up_dim {
  tpuir_val i0, i1; /* int64 [out] source indices */
  tpuir_val l0, l1; /* weights [out] (linear modes) */
} up_dim;

static const char *scale_name(int k, int j) {
  static const char *const n3[3] = {"scales_d", "scales_h", "scales_w"};
  if (k == 1) return "scales";
  return n3[3 - k + j];
}

/* indices (and weights) of one spatial dim */
static int up_indices(tpulw__b *b, int mode, int64_t in, int64_t out, int has_scale, double scale_arg,
                      int align, int wdt, up_dim *u) {
  int64_t n = out;
  u->l0 = u->l1 = -1;
  if (mode != U_LINEAR) {
    if (out == in && mode == U_NEAREST) {
      u->i0 = tpuir_iota(b->g, TPU_I64, 1, &n, 0);
    } else if (out == 2 * in && mode == U_NEAREST) {
      u->i0 = tpulw__bin_c(b, TPUIR_DIV, tpuir_iota(b->g, TPU_I64, 1, &n, 0), 2);
    } else {
      float scale = (has_scale && scale_arg > 0) ? (float)(1.0 / scale_arg) : (float)in / (float)out;
      tpuir_val f = tpuir_iota(b->g, TPU_F32, 1, &n, 0);
      if (mode == U_NEAREST_EXACT) f = tpulw__bin_c(b, TPUIR_ADD, f, 0.5);
      f = tpulw__un(b, TPUIR_FLOOR, tpulw__bin_c(b, TPUIR_MUL, f, scale));
      u->i0 = tpulw__bin_c(b, TPUIR_MIN, tpulw__convert(b, f, TPU_I64), (double)(in - 1));
    }
    return u->i0 < 0 ? u->i0 : TPU_OK;
  }
  /* linear: area_pixel_compute_scale / _source_index in wdt */
  double scale;
  if (align) scale = out > 1 ? (double)(in - 1) / (double)(out - 1) : 0;
  else if (has_scale && scale_arg > 0) scale = 1.0 / scale_arg;
  else scale = (double)in / (double)out;
  if (wdt == TPU_F32) scale = (float)scale;
  tpuir_val f = tpuir_iota(b->g, wdt, 1, &n, 0);
  tpuir_val src;
  if (align) {
    src = tpulw__bin_c(b, TPUIR_MUL, f, scale);
  } else {
    src = tpulw__bin_c(b, TPUIR_SUB, tpulw__bin_c(b, TPUIR_MUL, tpulw__bin_c(b, TPUIR_ADD, f, 0.5), scale), 0.5);
    src = tpulw__bin_c(b, TPUIR_MAX, src, 0);
  }
  tpuir_val i0 = tpulw__convert(b, src, TPU_I64);
  tpuir_val l1 = tpulw__bin(b, TPUIR_SUB, src, tpulw__convert(b, i0, wdt));
  l1 = tpulw__bin_c(b, TPUIR_MIN, tpulw__bin_c(b, TPUIR_MAX, l1, 0), 1);
  u->l0 = tpulw__bin(b, TPUIR_SUB, tpulw__const(b, wdt, 1), l1);
  u->l1 = l1;
  u->i0 = i0;
  u->i1 = tpulw__bin(b, TPUIR_ADD, i0, tpulw__convert(b, tpulw__bin_c(b, TPUIR_LT, i0, (double)(in - 1)), TPU_I64));
  return u->i1 < 0 ? u->i1 : TPU_OK;
}

/* weight vector [n] -> shape broadcasting at `axis` of rank nd */
static tpuir_val at_axis(tpulw__b *b, tpuir_val w, int nd, int axis, int64_t n) {
  int64_t sz[TPU_MAX_DIMS];
  for (int d = 0; d < nd; d++) sz[d] = d == axis ? n : 1;
  return tpulw__reshape(b, w, nd, sz);
}

static int upsample_fn(tpulw__b *b) {
  int mode = b->op;
  int bw = strstr(b->base, "_backward") != NULL;
  const tpulw_tensor *t = tpulw__tensor_arg(b, bw ? "grad_output" : "self");
  if (!t) return tpu_error(TPU_E_UNSUPPORTED, "%s: no input", b->base);
  int dt = t->view.dtype;
  int no, ni = 0;
  int64_t s1, s2;
  const int64_t *osz = tpulw__ints(b, "output_size", &no, &s1);
  const int64_t *isz = bw ? tpulw__ints(b, "input_size", &ni, &s2) : NULL;
  int k = no;
  int nd = bw ? ni : t->view.ndim;
  if (k < 1 || k > 3 || nd != k + 2 || (bw && !isz))
    return tpu_error(TPU_E_UNSUPPORTED, "%s: unexpected sizes", b->base);
  const int64_t *in_sizes = bw ? isz : t->view.sizes;
  if (mode == U_LINEAR && !tpu_dtype_is_float(dt))
    return tpu_error(TPU_E_UNSUPPORTED, "\"%s\" not implemented for '%s'", b->base,
                     tpulw__torch_name(dt));
  if (dt == TPU_BOOL) return tpu_error(TPU_E_UNSUPPORTED, "%s: bool input", b->base);
  for (int j = 0; j < k; j++)
    if (osz[j] <= 0 || in_sizes[2 + j] <= 0)
      return tpu_error(TPU_E_INVALID,
                       "Input and output sizes should be greater than 0, but got input "
                       "size %lld and output size %lld",
                       (long long)in_sizes[2 + j], (long long)osz[j]);
  if (bw)
    for (int j = 0; j < k; j++)
      if (t->view.sizes[2 + j] != osz[j] || t->view.sizes[0] != isz[0] || t->view.sizes[1] != isz[1])
        return tpu_error(TPU_E_INVALID,
                         "Expected grad_output to have the same shape as output; output.size(%d) "
                         "= %lld but got grad_output.size(%d) = %lld",
                         2 + j, (long long)osz[j], 2 + j, (long long)t->view.sizes[2 + j]);
  int align = mode == U_LINEAR ? (int)tpulw__int(b, "align_corners", 0) : 0;
  int cdt = tpu_dtype_is_float(dt) ? tpulw__opmath(dt) : dt;
  int wdt = dt == TPU_F64 ? TPU_F64 : TPU_F32;
  up_dim u[3];
  for (int j = 0; j < k; j++) {
    const char *sn = scale_name(k, j);
    int has = !tpulw__none(b, sn);
    int rc = up_indices(b, mode, in_sizes[2 + j], osz[j], has, tpulw__float(b, sn, 0), align, wdt, &u[j]);
    if (rc < 0) return rc;
  }
  tpuir_val x = tpulw__convert(b, tpulw__tensor(b, t), cdt);
  if (!bw) {
    for (int j = 0; j < k; j++) {
      int axis = 2 + j;
      if (mode != U_LINEAR) {
        x = tpuir_index_select(b->g, x, axis, u[j].i0);
      } else {
        tpuir_val a0 = tpuir_index_select(b->g, x, axis, u[j].i0);
        tpuir_val a1 = tpuir_index_select(b->g, x, axis, u[j].i1);
        tpuir_val w0 = at_axis(b, tpulw__convert(b, u[j].l0, cdt), nd, axis, osz[j]);
        tpuir_val w1 = at_axis(b, tpulw__convert(b, u[j].l1, cdt), nd, axis, osz[j]);
        x = tpulw__bin(b, TPUIR_ADD, tpulw__bin(b, TPUIR_MUL, a0, w0), tpulw__bin(b, TPUIR_MUL, a1, w1));
      }
      if (x < 0) return x;
    }
    return tpulw__result_as(b, x, dt);
  }
  /* backward: scatter along each spatial dim, last first */
  int64_t cur[TPU_MAX_DIMS] = {in_sizes[0], in_sizes[1]};
  for (int d = 2; d < nd; d++) cur[d] = osz[d - 2];
  for (int j = k - 1; j >= 0; j--) {
    int axis = 2 + j;
    cur[axis] = in_sizes[axis];
    tpuir_val zeros = tpulw__full(b, cdt, nd, cur, 0);
    if (mode != U_LINEAR) {
      x = tpuir_index_add(b->g, zeros, axis, u[j].i0, x);
    } else {
      tpuir_val w0 = at_axis(b, tpulw__convert(b, u[j].l0, cdt), nd, axis, osz[j]);
      tpuir_val w1 = at_axis(b, tpulw__convert(b, u[j].l1, cdt), nd, axis, osz[j]);
      tpuir_val g0 = tpulw__bin(b, TPUIR_MUL, x, w0), g1 = tpulw__bin(b, TPUIR_MUL, x, w1);
      x = tpuir_index_add(b->g, tpuir_index_add(b->g, zeros, axis, u[j].i0, g0), axis, u[j].i1, g1);
    }
    if (x < 0) return x;
  }
  return tpulw__result_as(b, x, dt);
}

/* reflection_pad / replication_pad {1,2,3}d (+ backward): the last k dims
 * are padded by index_select with reflected / clamped source indices;
 * padding lists the last dim first: (left, right, top, bottom, ...) */
enum { PAD_REFLECT = 1, PAD_REPLICATE };

static int pad_fn(tpulw__b *b) {
  int bw = strstr(b->base, "_backward") != NULL;
  int k = b->base[strlen(b->base) - (bw ? 11 : 2)] - '0'; /* ...pad2d[_backward] */
  const tpulw_tensor *t = tpulw__tensor_arg(b, bw ? "grad_output" : "self");
  const tpulw_tensor *self = tpulw__tensor_arg(b, "self");
  int np;
  int64_t scratch;
  const int64_t *pad = tpulw__ints(b, "padding", &np, &scratch);
  if (!t || !self || k < 1 || k > 3 || np != 2 * k)
    return tpu_error(TPU_E_UNSUPPORTED, "%s: unexpected arguments", b->base);
  int dt = t->view.dtype;
  if (dt == TPU_BOOL) return tpu_error(TPU_E_UNSUPPORTED, "%s: bool", b->base);
  const tpu_view *iv = &self->view;
  int nd = iv->ndim;
  if (nd != k + 1 && nd != k + 2)
    return tpu_error(TPU_E_INVALID, "Expected %dD or %dD (batch mode) tensor with possibly 0 "
                     "batch size and other non-zero dimensions for input, but got: %dD", k + 1,
                     k + 2, nd);
  int reflect = b->op == PAD_REFLECT;
  up_dim u[3];
  int64_t osz[3];
  for (int j = 0; j < k; j++) {
    int axis = nd - k + j;
    int64_t in = iv->sizes[axis];
    int64_t lo = pad[2 * (k - 1 - j)], hi = pad[2 * (k - 1 - j) + 1];
    /* replication with negative padding crops (the clamped index covers it) */
    if (reflect && (lo < 0 || hi < 0))
      return tpu_error(TPU_E_UNSUPPORTED, "%s: negative padding", b->base);
    if (!reflect && in + lo + hi < 1)
      return tpu_error(TPU_E_INVALID, "input (W: %lld) is too small. Calculated output W: %lld",
                       (long long)in, (long long)(in + lo + hi));
    if (reflect && (lo >= in || hi >= in))
      return tpu_error(TPU_E_INVALID,
                       "Argument #4: Padding size should be less than the corresponding input "
                       "dimension, but got: padding (%lld, %lld) at dimension %d of input %d",
                       (long long)lo, (long long)hi, axis, nd);
    if (!reflect && in == 0)
      return tpu_error(TPU_E_INVALID, "input tensor must have non-zero size in dim %d", axis);
    int64_t out = in + lo + hi;
    osz[j] = out;
    tpuir_val i = tpulw__bin_c(b, TPUIR_SUB, tpuir_iota(b->g, TPU_I64, 1, &out, 0), (double)lo);
    if (reflect) {
      i = tpulw__un(b, TPUIR_ABS, i);
      i = tpulw__sel(b, tpulw__bin_c(b, TPUIR_GE, i, (double)in),
                 tpulw__bin(b, TPUIR_SUB, tpulw__const(b, TPU_I64, 2.0 * (double)(in - 1)), i), i);
    } else {
      i = tpulw__bin_c(b, TPUIR_MIN, tpulw__bin_c(b, TPUIR_MAX, i, 0), (double)(in - 1));
    }
    u[j].i0 = i;
    if (i < 0) return i;
  }
  int cdt = tpu_dtype_is_float(dt) ? tpulw__opmath(dt) : dt;
  tpuir_val x = tpulw__convert(b, tpulw__tensor(b, t), cdt);
  if (!bw) {
    for (int j = 0; j < k && x >= 0; j++) x = tpuir_index_select(b->g, x, nd - k + j, u[j].i0);
    return tpulw__result_as(b, x, dt);
  }
  int64_t cur[TPU_MAX_DIMS];
  for (int d = 0; d < nd; d++) cur[d] = d < nd - k ? iv->sizes[d] : osz[d - (nd - k)];
  for (int d = 0; d < nd; d++)
    if (t->view.sizes[d] != cur[d])
      return tpu_error(TPU_E_INVALID, "grad_output has the wrong size at dimension %d", d);
  for (int j = k - 1; j >= 0 && x >= 0; j--) {
    int axis = nd - k + j;
    cur[axis] = iv->sizes[axis];
    x = tpuir_index_add(b->g, tpulw__full(b, cdt, nd, cur, 0), axis, u[j].i0, x);
  }
  return tpulw__result_as(b, x, dt);
}

/* im2col (nn.Unfold) and col2im (nn.Fold) with strided slices / interior
 * padding, one kernel offset at a time */
static int im2col_fn(tpulw__b *b) {
  int fold = strncmp(b->base, "col2im", 6) == 0;
  const tpulw_tensor *t = tpulw__tensor_arg(b, "self");
  int n1, n2, n3, n4, n5 = 2;
  int64_t sc[5];
  const int64_t *ks = tpulw__ints(b, "kernel_size", &n1, &sc[0]);
  const int64_t *dl = tpulw__ints(b, "dilation", &n2, &sc[1]);
  const int64_t *pd = tpulw__ints(b, "padding", &n3, &sc[2]);
  const int64_t *st = tpulw__ints(b, "stride", &n4, &sc[3]);
  const int64_t *os = fold ? tpulw__ints(b, "output_size", &n5, &sc[4]) : NULL;
  if (!t || n1 != 2 || n2 != 2 || n3 != 2 || n4 != 2 || n5 != 2)
    return tpu_error(TPU_E_UNSUPPORTED, "%s: unexpected arguments", b->base);
  for (int i = 0; i < 2; i++)
    if (ks[i] <= 0 || dl[i] <= 0 || st[i] <= 0 || pd[i] < 0)
      return tpu_error(TPU_E_INVALID,
                       "%s: kernel size, dilation and stride should be greater than zero, "
                       "padding non-negative", b->base);
  int dt = t->view.dtype;
  if (dt == TPU_BOOL) return tpu_error(TPU_E_UNSUPPORTED, "%s: bool", b->base);
  int batched = t->view.ndim == 4 - fold;
  if (t->view.ndim != 3 - fold && !batched)
    return tpu_error(TPU_E_INVALID, "Expected %dD or %dD (batch mode) tensor for input, but got: %dD",
                     3 - fold, 4 - fold, t->view.ndim);
  tpuir_val x = tpulw__tensor(b, t);
  int64_t nb = batched ? t->view.sizes[0] : 1, kk = ks[0] * ks[1];
  int64_t h, w, c;
  if (!fold) {
    c = t->view.sizes[batched];
    h = t->view.sizes[batched + 1];
    w = t->view.sizes[batched + 2];
  } else {
    h = os[0];
    w = os[1];
    int64_t ckk = t->view.sizes[batched];
    if (ckk % kk)
      return tpu_error(TPU_E_INVALID,
                       "Expected size of input's dimension 1 to be divisible by the product of "
                       "kernel_size, but got input.size(1)=%lld and kernel_size=(%lld, %lld)",
                       (long long)ckk, (long long)ks[0], (long long)ks[1]);
    c = ckk / kk;
  }
  int64_t hp = h + 2 * pd[0], wp = w + 2 * pd[1];
  int64_t oh = (hp - (dl[0] * (ks[0] - 1) + 1)) / st[0] + 1;
  int64_t ow = (wp - (dl[1] * (ks[1] - 1) + 1)) / st[1] + 1;
  if (oh <= 0 || ow <= 0)
    return tpu_error(TPU_E_INVALID, "%s: the output would have no blocks", b->base);
  int64_t L = oh * ow;
  if (fold && t->view.sizes[batched + 1] != L)
    return tpu_error(TPU_E_INVALID,
                     "Given output_size=(%lld, %lld), kernel_size=(%lld, %lld), dilation=(%lld, "
                     "%lld), padding=(%lld, %lld), stride=(%lld, %lld), expected size of input's "
                     "dimension 2 to match the calculated number of sliding blocks %lld * %lld = "
                     "%lld, but got input.size(2)=%lld.",
                     (long long)h, (long long)w, (long long)ks[0], (long long)ks[1],
                     (long long)dl[0], (long long)dl[1], (long long)pd[0], (long long)pd[1],
                     (long long)st[0], (long long)st[1], (long long)oh, (long long)ow,
                     (long long)L, (long long)t->view.sizes[batched + 1]);
  if (kk > 256) return tpu_error(TPU_E_UNSUPPORTED, "%s: kernel too large", b->base);
  tpuir_val zero = tpulw__const(b, dt, 0);
  tpuir_val parts[256];
  if (!fold) {
    int64_t s4[4] = {nb, c, h, w};
    x = tpulw__reshape(b, x, 4, s4);
    int64_t lo[4] = {0, 0, pd[0], pd[1]}, hi[4] = {0, 0, pd[0], pd[1]}, in0[4] = {0};
    if (pd[0] || pd[1]) x = tpuir_pad(b->g, x, zero, lo, hi, in0);
    int64_t blk[4] = {nb, c, 1, L};
    for (int64_t i = 0; i < ks[0]; i++)
      for (int64_t j = 0; j < ks[1]; j++) {
        int64_t s0[4] = {0, 0, i * dl[0], j * dl[1]};
        int64_t l0[4] = {nb, c, s0[2] + (oh - 1) * st[0] + 1, s0[3] + (ow - 1) * st[1] + 1};
        int64_t str[4] = {1, 1, st[0], st[1]};
        tpuir_val v = tpulw__reshape(b, tpuir_slice(b->g, x, s0, l0, str), 4, blk);
        if (v < 0) return v;
        parts[i * ks[1] + j] = v;
      }
    tpuir_val r = kk == 1 ? parts[0] : tpuir_concat(b->g, (int)kk, parts, 2);
    int64_t o3[3] = {nb, c * kk, L};
    r = tpulw__reshape(b, r, batched ? 3 : 2, batched ? o3 : o3 + 1);
    return tpulw__result(b, r);
  }
  int cdt = tpu_dtype_is_float(dt) ? tpulw__opmath(dt) : dt;
  int64_t s5[5] = {nb, c, kk, oh, ow};
  x = tpulw__reshape(b, tpulw__convert(b, x, cdt), 5, s5);
  tpuir_val czero = tpulw__const(b, cdt, 0), acc = -1;
  for (int64_t i = 0; i < ks[0]; i++)
    for (int64_t j = 0; j < ks[1]; j++) {
      int64_t k = i * ks[1] + j;
      int64_t s0[5] = {0, 0, k, 0, 0}, l0[5] = {nb, c, k + 1, oh, ow}, one[5] = {1, 1, 1, 1, 1};
      int64_t b4[4] = {nb, c, oh, ow};
      tpuir_val v = tpulw__reshape(b, tpuir_slice(b->g, x, s0, l0, one), 4, b4);
      int64_t r0 = i * dl[0], c0 = j * dl[1];
      int64_t lo[4] = {0, 0, r0, c0};
      int64_t hi[4] = {0, 0, hp - (r0 + (oh - 1) * st[0] + 1), wp - (c0 + (ow - 1) * st[1] + 1)};
      int64_t in[4] = {0, 0, st[0] - 1, st[1] - 1};
      v = tpuir_pad(b->g, v, czero, lo, hi, in);
      acc = acc < 0 ? v : tpulw__bin(b, TPUIR_ADD, acc, v);
      if (acc < 0) return acc;
    }
  if (pd[0] || pd[1]) {
    int64_t s0[4] = {0, 0, pd[0], pd[1]}, l0[4] = {nb, c, pd[0] + h, pd[1] + w}, one[4] = {1, 1, 1, 1};
    acc = tpuir_slice(b->g, acc, s0, l0, one);
  }
  int64_t o4[4] = {nb, c, h, w};
  acc = tpulw__reshape(b, acc, batched ? 4 : 3, batched ? o4 : o4 + 1);
  return tpulw__result_as(b, acc, dt);
}

#define PAD(n, mode)                                                           \
  {n, pad_fn, mode}, {n ".out", pad_fn, mode}, {n "_backward", pad_fn, mode},  \
      {n "_backward.grad_input", pad_fn, mode}

#define UP(n, mode)                                                            \
  {n, upsample_fn, mode}, {n ".out", upsample_fn, mode},                       \
      {n "_backward", upsample_fn, mode}, {n "_backward.grad_input", upsample_fn, mode}

/* ---- upsample_bicubic2d / _upsample_bilinear2d_aa (+ backward) ---------- */

/* interpolation matrix M [out, in] in wdt for one spatial dim:
 * bicubic: the four Keys taps (A = -0.75) at clamped indices, as
 * UpSampleKernel.cpp; bilinear aa: PIL-style triangle filter with support
 * scaled by the downsampling factor, normalized per output. */
static tpuir_val interp_matrix(tpulw__b *b, int aa, int64_t in, int64_t out, int align,
                               int has_scale, double scale_arg, int wdt) {
  double scale;
  if (align) scale = out > 1 ? (double)(in - 1) / (double)(out - 1) : 0;
  else if (has_scale && scale_arg > 0) scale = 1.0 / scale_arg;
  else scale = (double)in / (double)out;
  if (wdt == TPU_F32) scale = (float)scale;
  int64_t sz[2] = {out, in};
  tpuir_val o = tpuir_iota(b->g, wdt, 2, sz, 0);
  tpuir_val i = tpuir_iota(b->g, wdt, 2, sz, 1);
  tpuir_val zero = tpulw__const(b, wdt, 0);
  if (!aa) {
    tpuir_val real = align ? tpulw__bin_c(b, TPUIR_MUL, o, scale)
                           : tpulw__bin_c(b, TPUIR_SUB, tpulw__bin_c(b, TPUIR_MUL, tpulw__bin_c(b, TPUIR_ADD, o, 0.5), scale), 0.5);
    tpuir_val i0 = tpulw__bin_c(b, TPUIR_MIN, tpulw__un(b, TPUIR_FLOOR, real), (double)(in - 1));
    tpuir_val t = tpulw__bin_c(b, TPUIR_MIN, tpulw__bin_c(b, TPUIR_MAX, tpulw__bin(b, TPUIR_SUB, real, i0), 0), 1);
    const double A = -0.75;
    tpuir_val m = -1;
    for (int k = 0; k < 4; k++) {
      tpuir_val x = k < 2 ? tpulw__bin_c(b, TPUIR_ADD, t, (double)(1 - k))
                          : tpulw__bin_c(b, TPUIR_ADD, tpulw__bin(b, TPUIR_SUB, tpulw__const(b, wdt, 1), t), (double)(k - 2));
      tpuir_val w;
      if (k == 1 || k == 2) { /* ((A + 2) x - (A + 3)) x x + 1 */
        w = tpulw__bin_c(b, TPUIR_SUB, tpulw__bin_c(b, TPUIR_MUL, x, A + 2), A + 3);
        w = tpulw__bin_c(b, TPUIR_ADD, tpulw__bin(b, TPUIR_MUL, tpulw__bin(b, TPUIR_MUL, w, x), x), 1);
      } else { /* ((A x - 5A) x + 8A) x - 4A */
        w = tpulw__bin_c(b, TPUIR_SUB, tpulw__bin_c(b, TPUIR_MUL, x, A), 5 * A);
        w = tpulw__bin_c(b, TPUIR_ADD, tpulw__bin(b, TPUIR_MUL, w, x), 8 * A);
        w = tpulw__bin_c(b, TPUIR_SUB, tpulw__bin(b, TPUIR_MUL, w, x), 4 * A);
      }
      tpuir_val idx = tpulw__bin_c(b, TPUIR_MIN, tpulw__bin_c(b, TPUIR_MAX, tpulw__bin_c(b, TPUIR_ADD, i0, (double)(k - 1)), 0),
                               (double)(in - 1));
      tpuir_val c = tpulw__sel(b, tpulw__bin(b, TPUIR_EQ, idx, i), w, zero);
      m = m < 0 ? c : tpulw__bin(b, TPUIR_ADD, m, c);
    }
    return m;
  }
  double support = scale >= 1.0 ? scale : 1.0;
  double invscale = scale >= 1.0 ? 1.0 / scale : 1.0;
  if (wdt == TPU_F32) {
    support = (float)support;
    invscale = (float)invscale;
  }
  int64_t maxi = (int64_t)ceil(support) * 2 + 1;
  tpuir_val center = tpulw__bin_c(b, TPUIR_MUL, tpulw__bin_c(b, TPUIR_ADD, o, 0.5), scale);
  tpuir_val xmin = tpulw__bin_c(b, TPUIR_MAX, tpulw__un(b, TPUIR_TRUNC, tpulw__bin_c(b, TPUIR_ADD, tpulw__bin_c(b, TPUIR_SUB, center, support), 0.5)), 0);
  tpuir_val xmax = tpulw__bin_c(b, TPUIR_MIN, tpulw__un(b, TPUIR_TRUNC, tpulw__bin_c(b, TPUIR_ADD, tpulw__bin_c(b, TPUIR_ADD, center, support), 0.5)), (double)in);
  xmax = tpulw__bin(b, TPUIR_MIN, xmax, tpulw__bin_c(b, TPUIR_ADD, xmin, (double)maxi));
  tpuir_val in_rng = tpulw__bin(b, TPUIR_AND, tpulw__bin(b, TPUIR_GE, i, xmin), tpulw__bin(b, TPUIR_LT, i, xmax));
  tpuir_val a = tpulw__un(b, TPUIR_ABS, tpulw__bin_c(b, TPUIR_MUL, tpulw__bin_c(b, TPUIR_ADD, tpulw__bin(b, TPUIR_SUB, i, center), 0.5), invscale));
  tpuir_val w = tpulw__bin_c(b, TPUIR_MAX, tpulw__bin(b, TPUIR_SUB, tpulw__const(b, wdt, 1), a), 0);
  w = tpulw__sel(b, in_rng, w, zero);
  tpuir_val tot = tpulw__reduce_dims(b, TPUIR_RED_SUM, w, 2u, 1);
  tpuir_val nz = tpulw__bin_c(b, TPUIR_NE, tot, 0);
  return tpulw__sel(b, tpulw__bcast(b, nz, 2, sz), tpulw__bin(b, TPUIR_DIV, w, tpulw__sel(b, nz, tot, tpulw__const(b, wdt, 1))), zero);
}

static int interp_fn(tpulw__b *b) {
  int aa = b->op == U_BILINEAR_AA;
  int bw = strstr(b->base, "_backward") != NULL;
  const tpulw_tensor *t = tpulw__tensor_arg(b, bw ? "grad_output" : "self");
  int rc;
  if ((rc = tpulw__need_tpu(b, t))) return rc;
  int dt = t->view.dtype;
  if ((rc = tpulw__float_only(b, dt))) return rc;
  int no, ni = 0;
  int64_t sa, sb;
  const int64_t *osz = tpulw__ints(b, "output_size", &no, &sa);
  const int64_t *isz = bw ? tpulw__ints(b, "input_size", &ni, &sb) : NULL;
  if (no != 2 || (bw && ni != 4))
    return tpu_error(TPU_E_INVALID, "It is expected output_size equals to 2, but got size %d", no);
  if (!bw && t->view.ndim != 4)
    return tpu_error(TPU_E_INVALID, "Non-empty 4D data tensor expected but got a tensor with sizes [%lld]",
                     (long long)t->view.ndim);
  const int64_t *in_sizes = bw ? isz : t->view.sizes;
  for (int j = 0; j < 2; j++)
    if (osz[j] <= 0 || in_sizes[2 + j] <= 0)
      return tpu_error(TPU_E_INVALID, "Input and output sizes should be greater than 0, but got "
                       "input (H: %lld, W: %lld) output (H: %lld, W: %lld)", (long long)in_sizes[2],
                       (long long)in_sizes[3], (long long)osz[0], (long long)osz[1]);
  if (bw) {
    int ok = t->view.ndim == 4 && t->view.sizes[0] == isz[0] && t->view.sizes[1] == isz[1] &&
             t->view.sizes[2] == osz[0] && t->view.sizes[3] == osz[1];
    if (!ok)
      return tpu_error(TPU_E_INVALID, "Expected grad_output to have the same shape as output");
  }
  int align = (int)tpulw__int(b, "align_corners", 0);
  int wdt = dt == TPU_F64 ? TPU_F64 : TPU_F32;
  tpuir_val v = tpulw__convert(b, tpulw__tensor(b, t), wdt);
  static const char *const sn[2] = {"scales_h", "scales_w"};
  for (int j = 0; j < 2; j++) {
    tpuir_val M = interp_matrix(b, aa, in_sizes[2 + j], osz[j], align, !tpulw__none(b, sn[j]),
                                tpulw__float(b, sn[j], 0), wdt);
    LW_TRY(M);
    int64_t lc[1] = {2}, rc1[1] = {bw ? 0 : 1};
    v = tpuir_dot_general(b->g, v, M, 0, NULL, NULL, 1, lc, rc1, TPU_PREC_FP32, wdt);
    LW_TRY(v);
  }
  return tpulw__result_as(b, v, dt);
}

/* ---- grid_sampler_2d / grid_sampler_3d (+ backward) ---------------------- */

enum { GS_BILINEAR = 0, GS_NEAREST, GS_BICUBIC };
enum { GS_ZEROS = 0, GS_BORDER, GS_REFLECTION };

/* clip to [0, size - 1]; *gm (if non-NULL) *= d/dx (0 where clipped) */
static tpuir_val gs_clip(tpulw__b *b, tpuir_val x, int64_t size, tpuir_val *gm) {
  tpuir_val r = tpulw__bin_c(b, TPUIR_MIN, tpulw__bin_c(b, TPUIR_MAX, x, 0), (double)(size - 1));
  if (gm) {
    tpulw__shape s = tpulw__info(b, x);
    tpuir_val inside = tpulw__bin(b, TPUIR_AND, tpulw__bin_c(b, TPUIR_GT, x, 0), tpulw__bin_c(b, TPUIR_LT, x, (double)(size - 1)));
    *gm = tpulw__sel(b, inside, *gm, tpulw__const(b, s.dtype, 0));
  }
  return r;
}

/* reflect x into [tl/2, th/2] (GridSampler.h reflect_coordinates[_set_grad]) */
static tpuir_val gs_reflect(tpulw__b *b, tpuir_val x, int64_t tl, int64_t th, tpuir_val *gm) {
  tpulw__shape s = tpulw__info(b, x);
  if (tl == th) {
    if (gm) *gm = tpulw__full(b, s.dtype, s.ndim, s.sizes, 0);
    return tpulw__full(b, s.dtype, s.ndim, s.sizes, 0);
  }
  double mn = (double)tl / 2, span = (double)(th - tl) / 2;
  tpuir_val d = tpulw__bin_c(b, TPUIR_SUB, x, mn);
  tpuir_val neg = tpulw__bin_c(b, TPUIR_LT, d, 0);
  tpuir_val a = tpulw__un(b, TPUIR_ABS, d);
  tpuir_val extra = tpulw__bin_c(b, TPUIR_REM, a, span);
  tpuir_val flips = tpulw__un(b, TPUIR_FLOOR, tpulw__bin_c(b, TPUIR_DIV, a, span));
  tpuir_val even = tpulw__bin_c(b, TPUIR_EQ, tpulw__bin_c(b, TPUIR_REM, flips, 2), 0);
  tpuir_val r = tpulw__sel(b, even, tpulw__bin_c(b, TPUIR_ADD, extra, mn),
                       tpulw__bin_c(b, TPUIR_ADD, tpulw__bin(b, TPUIR_SUB, tpulw__const(b, s.dtype, span), extra), mn));
  if (gm) {
    tpuir_val one = tpulw__const(b, s.dtype, 1), mone = tpulw__const(b, s.dtype, -1);
    tpuir_val m = tpulw__sel(b, neg, mone, one);
    m = tpulw__sel(b, even, m, tpulw__un(b, TPUIR_NEG, m));
    *gm = tpulw__bin(b, TPUIR_MUL, *gm, m);
  }
  return r;
}

/* padding applied to an unnormalized coordinate (compute_coordinates) */
static tpuir_val gs_pad(tpulw__b *b, tpuir_val x, int64_t size, int pad, int align, tpuir_val *gm) {
  if (pad == GS_BORDER) {
    x = gs_clip(b, x, size, gm);
  } else if (pad == GS_REFLECTION) {
    x = align ? gs_reflect(b, x, 0, 2 * (size - 1), gm) : gs_reflect(b, x, -1, 2 * size - 1, gm);
    x = gs_clip(b, x, size, gm);
  }
  /* safe_downgrade_to_int_range: non-finite / huge -> -100 */
  tpulw__shape s = tpulw__info(b, x);
  tpuir_val ok = tpulw__bin(b, TPUIR_AND, tpulw__un(b, TPUIR_IS_FINITE, x),
                        tpulw__bin(b, TPUIR_AND, tpulw__bin_c(b, TPUIR_LT, x, 2147483646.0), tpulw__bin_c(b, TPUIR_GE, x, -2147483648.0)));
  return tpulw__sel(b, ok, x, tpulw__const(b, s.dtype, -100));
}

static tpuir_val gs_unnorm(tpulw__b *b, tpuir_val c, int64_t size, int align, double *mult) {
  if (align) {
    *mult = (double)(size - 1) / 2;
    return tpulw__bin_c(b, TPUIR_MUL, tpulw__bin_c(b, TPUIR_ADD, c, 1), (double)(size - 1) / 2);
  }
  *mult = (double)size / 2;
  return tpulw__bin_c(b, TPUIR_DIV, tpulw__bin_c(b, TPUIR_SUB, tpulw__bin_c(b, TPUIR_MUL, tpulw__bin_c(b, TPUIR_ADD, c, 1), (double)size), 1), 2);
}

/* Keys cubic coefficients (A = -0.75) of tap k at fraction t, and their
 * derivative (get_cubic_coefficients_grad) */
static tpuir_val cubic_coef(tpulw__b *b, tpuir_val t, int k, int grad) {
  const double A = -0.75;
  tpulw__shape s = tpulw__info(b, t);
  tpuir_val one = tpulw__const(b, s.dtype, 1);
  tpuir_val x, w;
  if (!grad) {
    x = k == 0 ? tpulw__bin_c(b, TPUIR_ADD, t, 1) : k == 1 ? t : k == 2 ? tpulw__bin(b, TPUIR_SUB, one, t)
                                                         : tpulw__bin_c(b, TPUIR_ADD, tpulw__bin(b, TPUIR_SUB, one, t), 1);
    if (k == 1 || k == 2) {
      w = tpulw__bin_c(b, TPUIR_SUB, tpulw__bin_c(b, TPUIR_MUL, x, A + 2), A + 3);
      return tpulw__bin_c(b, TPUIR_ADD, tpulw__bin(b, TPUIR_MUL, tpulw__bin(b, TPUIR_MUL, w, x), x), 1);
    }
    w = tpulw__bin_c(b, TPUIR_SUB, tpulw__bin_c(b, TPUIR_MUL, x, A), 5 * A);
    w = tpulw__bin_c(b, TPUIR_ADD, tpulw__bin(b, TPUIR_MUL, w, x), 8 * A);
    return tpulw__bin_c(b, TPUIR_SUB, tpulw__bin(b, TPUIR_MUL, w, x), 4 * A);
  }
  if (k == 0) {
    x = tpulw__bin(b, TPUIR_SUB, tpulw__const(b, s.dtype, -1), t);
    w = tpulw__bin_c(b, TPUIR_SUB, tpulw__bin_c(b, TPUIR_MUL, x, -3 * A), 10 * A);
    return tpulw__bin_c(b, TPUIR_SUB, tpulw__bin(b, TPUIR_MUL, w, x), 8 * A);
  }
  if (k == 1) {
    x = tpulw__un(b, TPUIR_NEG, t);
    w = tpulw__bin_c(b, TPUIR_SUB, tpulw__bin_c(b, TPUIR_MUL, x, -3 * (A + 2)), 2 * (A + 3));
    return tpulw__bin(b, TPUIR_MUL, w, x);
  }
  if (k == 2) {
    x = tpulw__bin(b, TPUIR_SUB, one, t);
    w = tpulw__bin_c(b, TPUIR_SUB, tpulw__bin_c(b, TPUIR_MUL, x, 3 * (A + 2)), 2 * (A + 3));
    return tpulw__bin(b, TPUIR_MUL, w, x);
  }
  x = tpulw__bin(b, TPUIR_SUB, tpulw__const(b, s.dtype, 2), t);
  w = tpulw__bin_c(b, TPUIR_SUB, tpulw__bin_c(b, TPUIR_MUL, x, 3 * A), 10 * A);
  return tpulw__bin_c(b, TPUIR_ADD, tpulw__bin(b, TPUIR_MUL, w, x), 8 * A);
}

#define GS_MAXT 64
typedef struct gs_tap {
  tpuir_val flat;           /* int64 [N, P] flat spatial index (0 where invalid) */
  tpuir_val w;              /* cdt [N, P] weight (0 where invalid) */
  tpuir_val dw[3];          /* cdt [N, P] d weight / d source coord per dim */
} gs_tap;

static int grid_fn(tpulw__b *b) {
  int bw = strstr(b->base, "_backward") != NULL;
  int nsp = tpulw__nsp_of(b);
  const tpulw_tensor *in = tpulw__tensor_arg(b, "input"), *gr = tpulw__tensor_arg(b, "grid");
  int rc;
  if ((rc = tpulw__need_tpu(b, in)) || (rc = tpulw__need_tpu(b, gr))) return rc;
  const tpu_view *iv = &in->view, *gv = &gr->view;
  int dt = iv->dtype;
  char s1[256], s2[256];
  if ((rc = tpulw__float_only(b, dt))) return rc;
  if (gv->dtype != dt)
    return tpu_error(TPU_E_INVALID, "grid_sampler(): expected input and grid to have same dtype, "
                     "but input has %s and grid has %s", tpulw__c_name(dt), tpulw__c_name(gv->dtype));
  if (iv->ndim != nsp + 2 || gv->ndim != iv->ndim)
    return tpu_error(TPU_E_INVALID, "grid_sampler(): expected %dD input and grid with same number "
                     "of dimensions, but got input with sizes [%s] and grid with sizes [%s]", nsp + 2,
                     tpulw__fmt_list(s1, sizeof s1, iv->ndim, iv->sizes), tpulw__fmt_list(s2, sizeof s2, gv->ndim, gv->sizes));
  if (iv->sizes[0] != gv->sizes[0])
    return tpu_error(TPU_E_INVALID, "grid_sampler(): expected grid and input to have same batch "
                     "size, but got input with sizes [%s] and grid with sizes [%s]",
                     tpulw__fmt_list(s1, sizeof s1, iv->ndim, iv->sizes), tpulw__fmt_list(s2, sizeof s2, gv->ndim, gv->sizes));
  if (gv->sizes[gv->ndim - 1] != nsp)
    return tpu_error(TPU_E_INVALID, "grid_sampler(): expected grid to have size %d in last "
                     "dimension, but got grid with sizes [%s]", nsp, tpulw__fmt_list(s2, sizeof s2, gv->ndim, gv->sizes));
  for (int i = 2; i < iv->ndim; i++)
    if (iv->sizes[i] <= 0)
      return tpu_error(TPU_E_INVALID, "grid_sampler(): expected input to have non-empty spatial "
                       "dimensions, but input has sizes [%s] with dimension %d being empty",
                       tpulw__fmt_list(s1, sizeof s1, iv->ndim, iv->sizes), i);
  int mode = (int)tpulw__int(b, "interpolation_mode", 0), pad = (int)tpulw__int(b, "padding_mode", 0);
  int align = (int)tpulw__int(b, "align_corners", 0);
  if (mode == GS_BICUBIC && nsp == 3)
    return tpu_error(TPU_E_INVALID, "grid_sampler(): bicubic interpolation only supports 4D input");
  if (mode < 0 || mode > 2 || pad < 0 || pad > 2)
    return tpu_error(TPU_E_UNSUPPORTED, "grid_sampler: mode");
  int64_t N = iv->sizes[0], C = iv->sizes[1], P = 1, S = 1;
  for (int i = 0; i < nsp; i++) {
    P *= gv->sizes[1 + i];
    S *= iv->sizes[2 + i];
  }
  int64_t osz[5] = {N, C};
  for (int i = 0; i < nsp; i++) osz[2 + i] = gv->sizes[1 + i];
  int cdt = tpulw__opmath(dt);
  const tpulw_tensor *go = NULL;
  int m0 = 1, m1 = 1;
  if (bw) {
    go = tpulw__tensor_arg(b, "grad_output");
    if ((rc = tpulw__need_tpu(b, go))) return rc;
    int ok = go->view.ndim == nsp + 2;
    for (int i = 0; ok && i < nsp + 2; i++) ok = go->view.sizes[i] == osz[i];
    if (!ok) return tpu_error(TPU_E_INVALID, "grid_sampler backward: grad_output shape");
    int n;
    int64_t sc;
    const int64_t *mk = tpulw__ints(b, "output_mask", &n, &sc);
    if (mk && n == 2) {
      m0 = mk[0] != 0;
      m1 = mk[1] != 0;
    }
  }
  if (N == 0 || P == 0 || C == 0) {
    if (!bw) return tpulw__result(b, tpulw__full(b, dt, nsp + 2, osz, 0));
    if ((rc = tpulw__result(b, tpulw__full(b, dt, iv->ndim, iv->sizes, 0))) < 0) return rc;
    return tpulw__result(b, tpulw__full(b, dt, gv->ndim, gv->sizes, 0));
  }
  int64_t g3[3] = {N, P, nsp}, np2[2] = {N, P}, one3[3] = {1, 1, 1};
  tpuir_val g = tpulw__reshape(b, tpulw__convert(b, tpulw__tensor(b, gr), cdt), 3, g3);
  tpuir_val gmul[3], i0[3], t[3];
  int64_t size[3], stride[3];
  int64_t st = 1;
  for (int d = 0; d < nsp; d++) { /* d = 0: W (last dim), 1: H, 2: D */
    size[d] = iv->sizes[iv->ndim - 1 - d];
    stride[d] = st;
    st *= size[d];
    int64_t lo[3] = {0, 0, d}, hi[3] = {N, P, d + 1};
    tpuir_val c = tpulw__reshape(b, tpuir_slice(b->g, g, lo, hi, one3), 2, np2);
    double um;
    tpuir_val x = gs_unnorm(b, c, size[d], align, &um);
    gmul[d] = tpulw__full(b, cdt, 2, np2, um);
    if (mode != GS_BICUBIC) x = gs_pad(b, x, size[d], pad, align, &gmul[d]);
    LW_TRY(x);
    if (mode == GS_NEAREST) {
      i0[d] = tpulw__un(b, TPUIR_ROUND_EVEN, x);
    } else {
      i0[d] = tpulw__un(b, TPUIR_FLOOR, x);
      t[d] = tpulw__bin(b, TPUIR_SUB, x, i0[d]);
    }
  }
  /* taps */
  gs_tap taps[GS_MAXT];
  int ntap = 0;
  int per = mode == GS_NEAREST ? 1 : mode == GS_BILINEAR ? 2 : 4;
  int total = 1;
  for (int d = 0; d < nsp; d++) total *= per;
  tpuir_val zero = tpulw__const(b, cdt, 0);
  for (int k = 0; k < total; k++) {
    int kd[3], kk = k;
    for (int d = 0; d < nsp; d++) {
      kd[d] = kk % per;
      kk /= per;
    }
    tpuir_val valid = -1, flat = -1, w = -1, wd[3] = {-1, -1, -1}, dwd[3] = {-1, -1, -1};
    for (int d = 0; d < nsp; d++) {
      tpuir_val pos;
      if (mode == GS_NEAREST) {
        pos = i0[d];
        wd[d] = tpulw__full(b, cdt, 2, np2, 1);
        dwd[d] = tpulw__full(b, cdt, 2, np2, 0);
      } else if (mode == GS_BILINEAR) {
        pos = kd[d] ? tpulw__bin_c(b, TPUIR_ADD, i0[d], 1) : i0[d];
        wd[d] = kd[d] ? t[d] : tpulw__bin(b, TPUIR_SUB, tpulw__const(b, cdt, 1), t[d]);
        dwd[d] = tpulw__full(b, cdt, 2, np2, kd[d] ? 1 : -1);
      } else {
        pos = gs_pad(b, tpulw__bin_c(b, TPUIR_ADD, i0[d], (double)(kd[d] - 1)), size[d], pad, align, NULL);
        wd[d] = cubic_coef(b, t[d], kd[d], 0);
        dwd[d] = tpulw__un(b, TPUIR_NEG, cubic_coef(b, t[d], kd[d], 1));
      }
      tpuir_val ok = tpulw__bin(b, TPUIR_AND, tpulw__bin_c(b, TPUIR_GE, pos, 0), tpulw__bin_c(b, TPUIR_LE, pos, (double)(size[d] - 1)));
      valid = valid < 0 ? ok : tpulw__bin(b, TPUIR_AND, valid, ok);
      tpuir_val pi = tpulw__convert(b, tpulw__sel(b, ok, pos, zero), TPU_I64);
      pi = tpulw__bin_c(b, TPUIR_MUL, pi, (double)stride[d]);
      flat = flat < 0 ? pi : tpulw__bin(b, TPUIR_ADD, flat, pi);
      LW_TRY(flat);
    }
    gs_tap *tp = &taps[ntap++];
    tp->flat = tpulw__sel(b, valid, flat, tpulw__const(b, TPU_I64, 0));
    for (int d = 0; d < nsp; d++) w = w < 0 ? wd[d] : tpulw__bin(b, TPUIR_MUL, w, wd[d]);
    tp->w = tpulw__sel(b, valid, w, zero);
    for (int d = 0; d < nsp; d++) {
      tpuir_val dw = dwd[d];
      for (int e = 0; e < nsp; e++)
        if (e != d) dw = tpulw__bin(b, TPUIR_MUL, dw, wd[e]);
      tp->dw[d] = tpulw__sel(b, valid, dw, zero);
    }
    LW_TRY(tp->w);
  }
  int64_t ins[3] = {N, C, S}, outs[3] = {N, C, P}, d02[2] = {0, 2};
  tpuir_val x = tpulw__reshape(b, tpulw__convert(b, tpulw__tensor(b, in), cdt), 3, ins);
  tpuir_val gsrc[3] = {-1, -1, -1}, acc = -1, gin = -1;
  tpuir_val gout = bw ? tpulw__reshape(b, tpulw__convert(b, tpulw__tensor(b, go), cdt), 3, outs) : -1;
  if (bw && m0) gin = tpulw__full(b, cdt, 3, ins, 0);
  for (int k = 0; k < ntap; k++) {
    tpuir_val idx = tpuir_broadcast_in_dim(b->g, taps[k].flat, 3, outs, d02);
    tpuir_val w3 = tpuir_broadcast_in_dim(b->g, taps[k].w, 3, outs, d02);
    if (!bw) {
      tpuir_val v = tpulw__bin(b, TPUIR_MUL, tpuir_gather(b->g, x, 2, idx), w3);
      acc = acc < 0 ? v : tpulw__bin(b, TPUIR_ADD, acc, v);
      LW_TRY(acc);
      continue;
    }
    if (m0) gin = tpuir_scatter_add(b->g, gin, 2, idx, tpulw__bin(b, TPUIR_MUL, gout, w3));
    if (m1 && mode != GS_NEAREST) {
      tpuir_val vg = tpulw__reduce_dims(b, TPUIR_RED_SUM, tpulw__bin(b, TPUIR_MUL, tpuir_gather(b->g, x, 2, idx), gout), 2u, 0);
      for (int d = 0; d < nsp; d++) {
        tpuir_val c = tpulw__bin(b, TPUIR_MUL, vg, taps[k].dw[d]);
        gsrc[d] = gsrc[d] < 0 ? c : tpulw__bin(b, TPUIR_ADD, gsrc[d], c);
        LW_TRY(gsrc[d]);
      }
    }
  }
  if (!bw) return tpulw__result_as(b, tpulw__reshape(b, acc, nsp + 2, osz), dt);
  if (m0) {
    if ((rc = tpulw__result_as(b, tpulw__reshape(b, gin, iv->ndim, iv->sizes), dt)) < 0) return rc;
  } else {
    if ((rc = tpulw__result(b, tpulw__full(b, dt, iv->ndim, iv->sizes, 0))) < 0) return rc;
  }
  if (!m1 || mode == GS_NEAREST) return tpulw__result(b, tpulw__full(b, dt, gv->ndim, gv->sizes, 0));
  tpuir_val parts[3];
  int64_t np1[3] = {N, P, 1};
  for (int d = 0; d < nsp; d++) parts[d] = tpulw__reshape(b, tpulw__bin(b, TPUIR_MUL, gsrc[d], gmul[d]), 3, np1);
  tpuir_val gg = tpuir_concat(b->g, nsp, parts, 2);
  return tpulw__result_as(b, tpulw__reshape(b, gg, gv->ndim, gv->sizes), dt);
}

const tpulw__row tpulw__rows_resize[] = {
    UP("upsample_nearest1d", U_NEAREST),
    UP("upsample_nearest2d", U_NEAREST),
    UP("upsample_nearest3d", U_NEAREST),
    UP("_upsample_nearest_exact1d", U_NEAREST_EXACT),
    UP("_upsample_nearest_exact2d", U_NEAREST_EXACT),
    UP("_upsample_nearest_exact3d", U_NEAREST_EXACT),
    UP("upsample_linear1d", U_LINEAR),
    UP("upsample_bilinear2d", U_LINEAR),
    UP("upsample_trilinear3d", U_LINEAR),
    {"im2col", im2col_fn, 0}, {"im2col.out", im2col_fn, 0},
    {"col2im", im2col_fn, 0}, {"col2im.out", im2col_fn, 0},
    PAD("reflection_pad1d", PAD_REFLECT),
    PAD("reflection_pad2d", PAD_REFLECT),
    PAD("reflection_pad3d", PAD_REFLECT),
    PAD("replication_pad1d", PAD_REPLICATE),
    PAD("replication_pad2d", PAD_REPLICATE),
    PAD("replication_pad3d", PAD_REPLICATE),
    {"upsample_bicubic2d", interp_fn, U_BICUBIC}, {"upsample_bicubic2d.out", interp_fn, U_BICUBIC},
    {"upsample_bicubic2d_backward", interp_fn, U_BICUBIC},
    {"upsample_bicubic2d_backward.grad_input", interp_fn, U_BICUBIC},
    {"_upsample_bilinear2d_aa", interp_fn, U_BILINEAR_AA}, {"_upsample_bilinear2d_aa.out", interp_fn, U_BILINEAR_AA},
    {"_upsample_bilinear2d_aa_backward", interp_fn, U_BILINEAR_AA},
    {"_upsample_bilinear2d_aa_backward.grad_input", interp_fn, U_BILINEAR_AA},
    {"grid_sampler_2d", grid_fn, 0}, {"grid_sampler_2d.out", grid_fn, 0},
    {"grid_sampler_3d", grid_fn, 0}, {"grid_sampler_3d.out", grid_fn, 0},
    {"grid_sampler_2d_backward", grid_fn, 0}, {"grid_sampler_2d_backward.out", grid_fn, 0},
    {"grid_sampler_3d_backward", grid_fn, 0}, {"grid_sampler_3d_backward.out", grid_fn, 0},
};
const int tpulw__nrows_resize = sizeof tpulw__rows_resize / sizeof tpulw__rows_resize[0];

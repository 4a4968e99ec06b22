/* lower_resize.c - interpolation: upsample_nearest{1,2,3}d,
 * _upsample_nearest_exact{1,2,3}d, upsample_linear1d / bilinear2d /
 * trilinear3d, and their backward ops.
 *
 * Interpolation is separable: each spatial dim is resampled in turn with
 * index_select (and, for the linear modes, a two-tap blend); the backward
 * ops scatter with index_add in the reverse order. Source indices and
 * weights are computed in the graph with PyTorch's float formulas
 * (UpSample.h: nearest in float32, linear in the op's accumulate type).
 */
#include <string.h>

#include "lower_internal.h"

enum { U_NEAREST = 1, U_NEAREST_EXACT, U_LINEAR };

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
static int up_indices(lw_b *b, int mode, int64_t in, int64_t out, int has_scale, double scale_arg,
                      int align, int wdt, up_dim *u) {
  int64_t n = out;
  u->l0 = u->l1 = -1;
  if (mode != U_LINEAR) {
    if (out == in && mode == U_NEAREST) {
      u->i0 = tpuir_iota(b->g, TPU_I64, 1, &n, 0);
    } else if (out == 2 * in && mode == U_NEAREST) {
      u->i0 = lw_bin_c(b, TPUIR_DIV, tpuir_iota(b->g, TPU_I64, 1, &n, 0), 2);
    } else {
      float scale = (has_scale && scale_arg > 0) ? (float)(1.0 / scale_arg) : (float)in / (float)out;
      tpuir_val f = tpuir_iota(b->g, TPU_F32, 1, &n, 0);
      if (mode == U_NEAREST_EXACT) f = lw_bin_c(b, TPUIR_ADD, f, 0.5);
      f = lw_un(b, TPUIR_FLOOR, lw_bin_c(b, TPUIR_MUL, f, scale));
      u->i0 = lw_bin_c(b, TPUIR_MIN, lw_convert(b, f, TPU_I64), (double)(in - 1));
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
    src = lw_bin_c(b, TPUIR_MUL, f, scale);
  } else {
    src = lw_bin_c(b, TPUIR_SUB, lw_bin_c(b, TPUIR_MUL, lw_bin_c(b, TPUIR_ADD, f, 0.5), scale), 0.5);
    src = lw_bin_c(b, TPUIR_MAX, src, 0);
  }
  tpuir_val i0 = lw_convert(b, src, TPU_I64);
  tpuir_val l1 = lw_bin(b, TPUIR_SUB, src, lw_convert(b, i0, wdt));
  l1 = lw_bin_c(b, TPUIR_MIN, lw_bin_c(b, TPUIR_MAX, l1, 0), 1);
  u->l0 = lw_bin(b, TPUIR_SUB, lw_const(b, wdt, 1), l1);
  u->l1 = l1;
  u->i0 = i0;
  u->i1 = lw_bin(b, TPUIR_ADD, i0, lw_convert(b, lw_bin_c(b, TPUIR_LT, i0, (double)(in - 1)), TPU_I64));
  return u->i1 < 0 ? u->i1 : TPU_OK;
}

/* weight vector [n] -> shape broadcasting at `axis` of rank nd */
static tpuir_val at_axis(lw_b *b, tpuir_val w, int nd, int axis, int64_t n) {
  int64_t sz[TPU_MAX_DIMS];
  for (int d = 0; d < nd; d++) sz[d] = d == axis ? n : 1;
  return lw_reshape(b, w, nd, sz);
}

static int upsample_fn(lw_b *b) {
  int mode = b->op;
  int bw = strstr(b->base, "_backward") != NULL;
  const tpulw_tensor *t = lw_tensor_arg(b, bw ? "grad_output" : "self");
  if (!t) return tpu_error(TPU_E_UNSUPPORTED, "%s: no input", b->base);
  int dt = t->view.dtype;
  int no, ni = 0;
  int64_t s1, s2;
  const int64_t *osz = lw_ints(b, "output_size", &no, &s1);
  const int64_t *isz = bw ? lw_ints(b, "input_size", &ni, &s2) : NULL;
  int k = no;
  int nd = bw ? ni : t->view.ndim;
  if (k < 1 || k > 3 || nd != k + 2 || (bw && !isz))
    return tpu_error(TPU_E_UNSUPPORTED, "%s: unexpected sizes", b->base);
  const int64_t *in_sizes = bw ? isz : t->view.sizes;
  if (mode == U_LINEAR && !tpu_dtype_is_float(dt))
    return tpu_error(TPU_E_UNSUPPORTED, "\"%s\" not implemented for '%s'", b->base,
                     lw_torch_name(dt));
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
  int align = mode == U_LINEAR ? (int)lw_int(b, "align_corners", 0) : 0;
  int cdt = tpu_dtype_is_float(dt) ? lw_opmath(dt) : dt;
  int wdt = dt == TPU_F64 ? TPU_F64 : TPU_F32;
  up_dim u[3];
  for (int j = 0; j < k; j++) {
    const char *sn = scale_name(k, j);
    int has = !lw_none(b, sn);
    int rc = up_indices(b, mode, in_sizes[2 + j], osz[j], has, lw_float(b, sn, 0), align, wdt, &u[j]);
    if (rc < 0) return rc;
  }
  tpuir_val x = lw_convert(b, lw_tensor(b, t), cdt);
  if (!bw) {
    for (int j = 0; j < k; j++) {
      int axis = 2 + j;
      if (mode != U_LINEAR) {
        x = tpuir_index_select(b->g, x, axis, u[j].i0);
      } else {
        tpuir_val a0 = tpuir_index_select(b->g, x, axis, u[j].i0);
        tpuir_val a1 = tpuir_index_select(b->g, x, axis, u[j].i1);
        tpuir_val w0 = at_axis(b, lw_convert(b, u[j].l0, cdt), nd, axis, osz[j]);
        tpuir_val w1 = at_axis(b, lw_convert(b, u[j].l1, cdt), nd, axis, osz[j]);
        x = lw_bin(b, TPUIR_ADD, lw_bin(b, TPUIR_MUL, a0, w0), lw_bin(b, TPUIR_MUL, a1, w1));
      }
      if (x < 0) return x;
    }
    return lw_result_as(b, x, dt);
  }
  /* backward: scatter along each spatial dim, last first */
  int64_t cur[TPU_MAX_DIMS] = {in_sizes[0], in_sizes[1]};
  for (int d = 2; d < nd; d++) cur[d] = osz[d - 2];
  for (int j = k - 1; j >= 0; j--) {
    int axis = 2 + j;
    cur[axis] = in_sizes[axis];
    tpuir_val zeros = lw_full(b, cdt, nd, cur, 0);
    if (mode != U_LINEAR) {
      x = tpuir_index_add(b->g, zeros, axis, u[j].i0, x);
    } else {
      tpuir_val w0 = at_axis(b, lw_convert(b, u[j].l0, cdt), nd, axis, osz[j]);
      tpuir_val w1 = at_axis(b, lw_convert(b, u[j].l1, cdt), nd, axis, osz[j]);
      tpuir_val g0 = lw_bin(b, TPUIR_MUL, x, w0), g1 = lw_bin(b, TPUIR_MUL, x, w1);
      x = tpuir_index_add(b->g, tpuir_index_add(b->g, zeros, axis, u[j].i0, g0), axis, u[j].i1, g1);
    }
    if (x < 0) return x;
  }
  return lw_result_as(b, x, dt);
}

/* reflection_pad / replication_pad {1,2,3}d (+ backward): the last k dims
 * are padded by index_select with reflected / clamped source indices;
 * padding lists the last dim first: (left, right, top, bottom, ...) */
enum { PAD_REFLECT = 1, PAD_REPLICATE };

static int pad_fn(lw_b *b) {
  int bw = strstr(b->base, "_backward") != NULL;
  int k = b->base[strlen(b->base) - (bw ? 11 : 2)] - '0'; /* ...pad2d[_backward] */
  const tpulw_tensor *t = lw_tensor_arg(b, bw ? "grad_output" : "self");
  const tpulw_tensor *self = lw_tensor_arg(b, "self");
  int np;
  int64_t scratch;
  const int64_t *pad = lw_ints(b, "padding", &np, &scratch);
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
    if (lo < 0 || hi < 0) return tpu_error(TPU_E_UNSUPPORTED, "%s: negative padding", b->base);
    if (reflect && (lo >= in || hi >= in))
      return tpu_error(TPU_E_INVALID,
                       "Argument #4: Padding size should be less than the corresponding input "
                       "dimension, but got: padding (%lld, %lld) at dimension %d of input %d",
                       (long long)lo, (long long)hi, axis, nd);
    if (!reflect && in == 0)
      return tpu_error(TPU_E_INVALID, "input tensor must have non-zero size in dim %d", axis);
    int64_t out = in + lo + hi;
    osz[j] = out;
    tpuir_val i = lw_bin_c(b, TPUIR_SUB, tpuir_iota(b->g, TPU_I64, 1, &out, 0), (double)lo);
    if (reflect) {
      i = lw_un(b, TPUIR_ABS, i);
      i = lw_sel(b, lw_bin_c(b, TPUIR_GE, i, (double)in),
                 lw_bin(b, TPUIR_SUB, lw_const(b, TPU_I64, 2.0 * (double)(in - 1)), i), i);
    } else {
      i = lw_bin_c(b, TPUIR_MIN, lw_bin_c(b, TPUIR_MAX, i, 0), (double)(in - 1));
    }
    u[j].i0 = i;
    if (i < 0) return i;
  }
  int cdt = tpu_dtype_is_float(dt) ? lw_opmath(dt) : dt;
  tpuir_val x = lw_convert(b, lw_tensor(b, t), cdt);
  if (!bw) {
    for (int j = 0; j < k && x >= 0; j++) x = tpuir_index_select(b->g, x, nd - k + j, u[j].i0);
    return lw_result_as(b, x, dt);
  }
  int64_t cur[TPU_MAX_DIMS];
  for (int d = 0; d < nd; d++) cur[d] = d < nd - k ? iv->sizes[d] : osz[d - (nd - k)];
  for (int d = 0; d < nd; d++)
    if (t->view.sizes[d] != cur[d])
      return tpu_error(TPU_E_INVALID, "grad_output has the wrong size at dimension %d", d);
  for (int j = k - 1; j >= 0 && x >= 0; j--) {
    int axis = nd - k + j;
    cur[axis] = iv->sizes[axis];
    x = tpuir_index_add(b->g, lw_full(b, cdt, nd, cur, 0), axis, u[j].i0, x);
  }
  return lw_result_as(b, x, dt);
}

#define PAD(n, mode)                                                           \
  {n, pad_fn, mode}, {n ".out", pad_fn, mode}, {n "_backward", pad_fn, mode},  \
      {n "_backward.grad_input", pad_fn, mode}

#define UP(n, mode)                                                            \
  {n, upsample_fn, mode}, {n ".out", upsample_fn, mode},                       \
      {n "_backward", upsample_fn, mode}, {n "_backward.grad_input", upsample_fn, mode}

const lw_row lw_rows_resize[] = {
    UP("upsample_nearest1d", U_NEAREST),
    UP("upsample_nearest2d", U_NEAREST),
    UP("upsample_nearest3d", U_NEAREST),
    UP("_upsample_nearest_exact1d", U_NEAREST_EXACT),
    UP("_upsample_nearest_exact2d", U_NEAREST_EXACT),
    UP("_upsample_nearest_exact3d", U_NEAREST_EXACT),
    UP("upsample_linear1d", U_LINEAR),
    UP("upsample_bilinear2d", U_LINEAR),
    UP("upsample_trilinear3d", U_LINEAR),
    PAD("reflection_pad1d", PAD_REFLECT),
    PAD("reflection_pad2d", PAD_REFLECT),
    PAD("reflection_pad3d", PAD_REFLECT),
    PAD("replication_pad1d", PAD_REPLICATE),
    PAD("replication_pad2d", PAD_REPLICATE),
    PAD("replication_pad3d", PAD_REPLICATE),
};
const int lw_nrows_resize = sizeof lw_rows_resize / sizeof lw_rows_resize[0];

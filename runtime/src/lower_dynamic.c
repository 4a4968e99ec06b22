/* lower_dynamic.c - lowerings of ATen ops whose output SHAPE depends on
 * the input DATA (nonzero, masked_select, _unique2, unique_consecutive),
 * plus reductions the IR has no scatter kind for (scatter_reduce,
 * index_reduce) and a few stragglers (logspace.out, polygamma).
 *
 * Data-dependent shape: synchronizes, like CUDA's nonzero. tpulw_prepare
 * must report output shapes, so these lowerings flush the Fused Eager
 * recorder (tpug_flush), wait for the device (tpurt_device_synchronize)
 * and read the input in C - the vTPU's device memory is host memory - to
 * count the output size (number of nonzeros / unique values). The VALUES
 * are then produced by an ordinary IR graph: a prefix count (log-step
 * scan) gives each selected element its output slot, scatter_add of the
 * element positions into those slots gives the source index of every
 * output element, and index_select reads the values.
 *
 * Rows: lw_rows_dynamic (table_init in lower.c).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lower_internal.h"
#include "tpu_graph.h"
#include "tpu_rt.h"

/* ---- host-side reads ---------------------------------------------------- */

/* Wait until every queued op of device `dev` has written its outputs. */
static int dyn_sync(int dev) {
  int rc = tpug_flush(dev, TPUG_R_D2H); /* Fused Eager: run pending ops */
  if (rc < 0) return rc;
  return tpurt_device_synchronize(dev);
}

/* Pointer to element `lin` (row-major) of v. */
static const char *dyn_elem(const tpu_view *v, int64_t lin) {
  int64_t off = v->offset;
  for (int d = v->ndim - 1; d >= 0; d--) {
    int64_t sz = v->sizes[d];
    if (sz <= 0) return NULL;
    off += (lin % sz) * v->strides[d];
    lin /= sz;
  }
  return (const char *)v->base + off * (int64_t)tpu_dtype_size(v->dtype);
}

/* Element as double (floats) or int64 (ints/bool); *isnan set for NaN. */
static void dyn_read(int dt, const char *p, double *f, int64_t *i) {
  *f = 0;
  *i = 0;
  switch (dt) {
    case TPU_BOOL: *i = *(const uint8_t *)p != 0; break;
    case TPU_U8: *i = *(const uint8_t *)p; break;
    case TPU_I8: *i = *(const int8_t *)p; break;
    case TPU_I16: { int16_t v; memcpy(&v, p, 2); *i = v; break; }
    case TPU_I32: { int32_t v; memcpy(&v, p, 4); *i = v; break; }
    case TPU_I64: memcpy(i, p, 8); break;
    case TPU_F16: { uint16_t h; memcpy(&h, p, 2); *f = tpu_f16_to_f32(h); break; }
    case TPU_BF16: { uint16_t h; memcpy(&h, p, 2); *f = tpu_bf16_to_f32(h); break; }
    case TPU_F32: { float v; memcpy(&v, p, 4); *f = v; break; }
    case TPU_F64: memcpy(f, p, 8); break;
    default: break;
  }
}

/* Number of nonzero elements of v (after dyn_sync). */
static int64_t dyn_count_nz(const tpu_view *v) {
  int64_t n = tpu_view_numel(v), k = 0;
  int fl = tpu_dtype_is_float(v->dtype);
  for (int64_t j = 0; j < n; j++) {
    double f;
    int64_t i;
    dyn_read(v->dtype, dyn_elem(v, j), &f, &i);
    k += fl ? (f != 0) : (i != 0);
  }
  return k;
}

/* ---- graph helpers ------------------------------------------------------ */

/* Inclusive prefix sum of a rank-1 int64 value of length n (log-step). */
static tpuir_val dyn_scan(lw_b *b, tpuir_val x, int64_t n) {
  tpuir_val zero = lw_const(b, TPU_I64, 0);
  for (int64_t k = 1; k < n && x >= 0; k *= 2) {
    int64_t lo = k, hi = -k, in = 0;
    x = lw_bin(b, TPUIR_ADD, x, tpuir_pad(b->g, x, zero, &lo, &hi, &in));
  }
  return x;
}

/* Positions (int64 [k]) of the true elements of the rank-1 bool m of
 * length n, in order; k is their number (counted by the caller). */
static tpuir_val dyn_compact(lw_b *b, tpuir_val m, int64_t n, int64_t k) {
  tpuir_val c = dyn_scan(b, lw_convert(b, m, TPU_I64), n);
  tpuir_val slot = lw_sel(b, m, lw_bin_c(b, TPUIR_SUB, c, 1),
                          lw_const(b, TPU_I64, (double)k));
  int64_t k1 = k + 1;
  tpuir_val base = lw_full(b, TPU_I64, 1, &k1, 0);
  tpuir_val pos = tpuir_iota(b->g, TPU_I64, 1, &n, 0);
  tpuir_val r = tpuir_scatter_add(b->g, base, 0, slot, pos);
  int64_t st = 0, lim = k, str = 1;
  return tpuir_slice(b->g, r, &st, &lim, &str);
}

static tpuir_val dyn_flat(lw_b *b, tpuir_val v) {
  lw_shape s = lw_info(b, v);
  int64_t n = lw_numel(&s);
  return lw_reshape(b, v, 1, &n);
}

/* x != 0 as bool. */
static tpuir_val dyn_nz(lw_b *b, tpuir_val x) {
  lw_shape s = lw_info(b, x);
  if (s.dtype == TPU_BOOL) return x;
  return lw_bin(b, TPUIR_NE, x, lw_const(b, s.dtype, 0));
}

/* ---- nonzero ------------------------------------------------------------ */

/* nonzero(self) -> int64 [K, ndim]: data-dependent shape, synchronizes. */
static int nonzero_fn(lw_b *b) {
  const tpulw_tensor *self = lw_tensor_arg(b, "self");
  if (!self || self->device < 0)
    return tpu_error(TPU_E_UNSUPPORTED, "nonzero: unsupported arguments");
  b->out_rule = LW_OUT_SAME;
  int rc = dyn_sync(b->ctx->device);
  if (rc < 0) return rc;
  const tpu_view *v = &self->view;
  int nd = v->ndim;
  int64_t n = tpu_view_numel(v), k = dyn_count_nz(v);
  tpuir_val flat = dyn_flat(b, lw_tensor(b, self));
  tpuir_val idx = dyn_compact(b, dyn_nz(b, flat), n, k);
  LW_TRY(idx);
  int64_t os[2] = {k, nd};
  if (nd == 0) return lw_result(b, lw_full(b, TPU_I64, 2, os, 0));
  tpuir_val cols[TPU_MAX_DIMS];
  int64_t stride = 1, k1[2] = {k, 1};
  for (int d = nd - 1; d >= 0; d--) {
    tpuir_val c = lw_bin_c(b, TPUIR_DIV, idx, (double)stride);
    if (d > 0) c = lw_bin_c(b, TPUIR_REM, c, (double)v->sizes[d]);
    cols[d] = lw_reshape(b, c, 2, k1);
    LW_TRY(cols[d]);
    stride *= v->sizes[d] > 0 ? v->sizes[d] : 1;
  }
  return lw_result(b, tpuir_concat(b->g, nd, cols, 1));
}

/* ---- masked_select ------------------------------------------------------ */

/* masked_select(self, mask) -> 1-D: data-dependent shape, synchronizes. */
static int masked_select_fn(lw_b *b) {
  const tpulw_tensor *self = lw_tensor_arg(b, "self");
  const tpulw_tensor *mask = lw_tensor_arg(b, "mask");
  if (!self || !mask || mask->device < 0)
    return tpu_error(TPU_E_UNSUPPORTED, "masked_select: unsupported arguments");
  if (mask->view.dtype != TPU_BOOL)
    return tpu_error(TPU_E_INVALID,
                     "masked_select: expected BoolTensor for mask");
  b->out_rule = LW_OUT_SAME;
  tpuir_val vs[2] = {lw_tensor(b, self), lw_tensor(b, mask)};
  int rc = lw_bcast_all(b, 2, vs);
  if (rc < 0) return rc;
  rc = dyn_sync(b->ctx->device);
  if (rc < 0) return rc;
  lw_shape bs = lw_info(b, vs[0]);
  int64_t n = lw_numel(&bs), nm = tpu_view_numel(&mask->view);
  int64_t k = nm ? dyn_count_nz(&mask->view) * (n / nm) : 0;
  tpuir_val idx = dyn_compact(b, dyn_flat(b, vs[1]), n, k);
  LW_TRY(idx);
  return lw_result(b, tpuir_index_select(b->g, dyn_flat(b, vs[0]), 0, idx));
}

/* ---- table -------------------------------------------------------------- */

const lw_row lw_rows_dynamic[] = {
    {"nonzero", nonzero_fn, 0},
    {"nonzero.out", nonzero_fn, 0},
    {"masked_select", masked_select_fn, 0},
    {"masked_select.out", masked_select_fn, 0},
};
const int lw_nrows_dynamic = sizeof lw_rows_dynamic / sizeof lw_rows_dynamic[0];

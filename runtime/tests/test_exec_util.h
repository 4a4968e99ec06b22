/* test_exec_util.h - helpers shared by the vTPU executor tests: test arrays,
 * independent element reads/writes and dtype rounding references. */
#ifndef TEST_EXEC_UTIL_H
#define TEST_EXEC_UTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpu_exec.h"
#include "tpu_ir.h"

typedef struct tarr {
  tpu_view v;
  void *mem;
} tarr;

/* Contiguous zeroed array (caller frees mem). */
static inline tarr ta_new(int dt, int nd, const int64_t *sz) {
  tarr a;
  int64_t n = 1;
  for (int i = 0; i < nd; i++) n *= sz[i];
  a.mem = calloc((size_t)(n ? n : 1), 8);
  tpu_view_init_contiguous(&a.v, a.mem, dt, nd, sz);
  return a;
}

static inline int64_t tv_off(const tpu_view *v, int64_t lin) {
  int64_t off = v->offset;
  for (int d = v->ndim - 1; d >= 0; d--) {
    int64_t s = v->sizes[d];
    off += (lin % s) * v->strides[d];
    lin /= s;
  }
  return off;
}

/* Read element `lin` (row-major over the view's sizes) as double. */
static inline double tv_get(const tpu_view *v, int64_t lin) {
  int64_t o = tv_off(v, lin);
  const char *b = v->base;
  switch (v->dtype) {
  case TPU_BOOL: return ((const uint8_t *)b)[o] != 0;
  case TPU_U8: return ((const uint8_t *)b)[o];
  case TPU_I8: return ((const int8_t *)b)[o];
  case TPU_I16: return ((const int16_t *)b)[o];
  case TPU_I32: return ((const int32_t *)b)[o];
  case TPU_I64: return (double)((const int64_t *)b)[o];
  case TPU_F16: return tpu_f16_to_f32(((const uint16_t *)b)[o]);
  case TPU_BF16: return tpu_bf16_to_f32(((const uint16_t *)b)[o]);
  case TPU_F32: return ((const float *)b)[o];
  default: return ((const double *)b)[o];
  }
}
static inline int64_t tv_geti(const tpu_view *v, int64_t lin) {
  if (v->dtype == TPU_I64) return ((const int64_t *)v->base)[tv_off(v, lin)];
  return (int64_t)tv_get(v, lin);
}

/* Write x (already representable) into element lin. */
static inline void tv_set(const tpu_view *v, int64_t lin, double x) {
  int64_t o = tv_off(v, lin);
  char *b = v->base;
  switch (v->dtype) {
  case TPU_BOOL: ((uint8_t *)b)[o] = x != 0; break;
  case TPU_U8: ((uint8_t *)b)[o] = (uint8_t)(int64_t)x; break;
  case TPU_I8: ((int8_t *)b)[o] = (int8_t)(int64_t)x; break;
  case TPU_I16: ((int16_t *)b)[o] = (int16_t)(int64_t)x; break;
  case TPU_I32: ((int32_t *)b)[o] = (int32_t)(int64_t)x; break;
  case TPU_I64: ((int64_t *)b)[o] = (int64_t)x; break;
  case TPU_F16: ((uint16_t *)b)[o] = tpu_f32_to_f16((float)x); break;
  case TPU_BF16: ((uint16_t *)b)[o] = tpu_f32_to_bf16((float)x); break;
  case TPU_F32: ((float *)b)[o] = (float)x; break;
  default: ((double *)b)[o] = x; break;
  }
}
static inline void tv_seti(const tpu_view *v, int64_t lin, int64_t x) {
  if (v->dtype == TPU_I64) ((int64_t *)v->base)[tv_off(v, lin)] = x;
  else tv_set(v, lin, (double)x);
}

/* Round a double to what dtype dt stores (float narrowing via f32, like
 * c10), ints wrap, bool != 0. */
static inline double round_to(int dt, double x) {
  switch (dt) {
  case TPU_F64: return x;
  case TPU_F32: return (float)x;
  case TPU_BF16: return tpu_bf16_to_f32(tpu_f32_to_bf16((float)x));
  case TPU_F16: return tpu_f16_to_f32(tpu_f32_to_f16((float)x));
  case TPU_BOOL: return x != 0;
  case TPU_U8: return (uint8_t)(int64_t)x;
  case TPU_I8: return (int8_t)(int64_t)x;
  case TPU_I16: return (int16_t)(int64_t)x;
  case TPU_I32: return (int32_t)(int64_t)x;
  default: return (double)(int64_t)x;
  }
}

/* Deterministic pseudo-random numbers for test data. */
static inline uint64_t trand_next(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}
/* uniform in [lo, hi) */
static inline double trand(uint64_t *s, double lo, double hi) {
  return lo + (hi - lo) * (double)(trand_next(s) >> 11) * 0x1p-53;
}
/* fill with values representable in the dtype: ints in [lo, hi] */
static inline void ta_fill(const tpu_view *v, uint64_t *s, double lo, double hi) {
  int64_t n = tpu_view_numel(v);
  for (int64_t i = 0; i < n; i++) {
    double x = trand(s, lo, hi);
    if (!tpu_dtype_is_float(v->dtype)) x = floor(x);
    tv_set(v, i, round_to(v->dtype, x));
  }
}

/* 1 if a and b agree within tol relative/absolute (NaNs must match). */
static inline int near_eq(double a, double b, double tol) {
  if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
  if (isinf(a) || isinf(b)) return a == b;
  return fabs(a - b) <= tol * (1 + fabs(b));
}

/* Run g on ins with executor fusion `kind` (TPUX_FUSE_*) on, then off,
 * into fresh contiguous outputs (at most 8). Returns 1 when both runs give
 * the same status and, if TPU_OK, bit-identical outputs. on[] receives the
 * "on" outputs (caller frees .mem); *fused = runs of the fusion during the
 * "on" run; *rc_on = that run's status. */
static inline int te_fusion_on_off(int kind, tpuir_graph *g, int np,
                                   const tpu_view *ins, tarr *on,
                                   int64_t *fused, int *rc_on) {
  int no = tpuir_num_outputs(g);
  tarr off[8];
  tpu_view ov_on[8], ov_off[8];
  if (no > 8) return 0;
  for (int i = 0; i < no; i++) {
    int dt, nd;
    int64_t sz[TPU_MAX_DIMS];
    tpuir_value_info(g, tpuir_output(g, i), &dt, &nd, sz);
    on[i] = ta_new(dt, nd, sz);
    off[i] = ta_new(dt, nd, sz);
    ov_on[i] = on[i].v;
    ov_off[i] = off[i].v;
  }
  int64_t r0 = tpux_fusion_runs(kind);
  tpux_set_fusion(kind, 1);
  int rc = tpux_run(g, np, ins, no, ov_on);
  *fused = tpux_fusion_runs(kind) - r0;
  tpux_set_fusion(kind, 0);
  int rc2 = tpux_run(g, np, ins, no, ov_off);
  tpux_set_fusion(kind, -1);
  *rc_on = rc;
  int same = rc == rc2;
  for (int i = 0; i < no; i++) {
    int64_t n = tpu_view_numel(&on[i].v);
    if (same && rc == TPU_OK &&
        memcmp(on[i].mem, off[i].mem, (size_t)n * tpu_dtype_size(on[i].v.dtype))) {
      fprintf(stderr, "  output %d differs with/without fusion %d\n", i, kind);
      same = 0;
    }
    free(off[i].mem);
  }
  if (rc != rc2) fprintf(stderr, "  tpux_run: %d %d (%s)\n", rc, rc2, tpu_last_error());
  return same;
}

#endif

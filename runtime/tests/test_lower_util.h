/* test_lower_util.h - helpers for the lowering tests: argument builders,
 * an op runner (prepare -> allocate -> launch -> synchronize) over views
 * into malloc'd memory, and element access by logical index. */
#ifndef TEST_LOWER_UTIL_H
#define TEST_LOWER_UTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpu_base.h"
#include "tpu_lower.h"
#include "tpu_rt.h"

static inline tpulw_arg lt_tensor(const char *name, tpu_view v) {
  tpulw_arg a;
  memset(&a, 0, sizeof a);
  a.name = name;
  a.kind = TPULW_TENSOR;
  a.t.view = v;
  a.t.defined = 1;
  a.t.device = 0;
  return a;
}
static inline tpulw_arg lt_out(const char *name, tpu_view v) {
  tpulw_arg a = lt_tensor(name, v);
  a.is_output = 1;
  return a;
}
static inline tpulw_arg lt_cpu(const char *name, int dt, double v, int wrapped) {
  tpulw_arg a;
  memset(&a, 0, sizeof a);
  a.name = name;
  a.kind = TPULW_TENSOR;
  a.t.defined = 1;
  a.t.device = -1;
  a.t.view.dtype = dt;
  a.t.wrapped_number = wrapped;
  a.t.cpu_f = v;
  a.t.cpu_i = (int64_t)v;
  return a;
}
static inline tpulw_arg lt_int(const char *name, int64_t v) {
  tpulw_arg a;
  memset(&a, 0, sizeof a);
  a.name = name;
  a.kind = TPULW_INT;
  a.i = v;
  a.f = (double)v;
  return a;
}
static inline tpulw_arg lt_bool(const char *name, int v) {
  tpulw_arg a = lt_int(name, v != 0);
  a.kind = TPULW_BOOL;
  return a;
}
static inline tpulw_arg lt_float(const char *name, double v) {
  tpulw_arg a;
  memset(&a, 0, sizeof a);
  a.name = name;
  a.kind = TPULW_FLOAT;
  a.f = v;
  return a;
}
static inline tpulw_arg lt_str(const char *name, const char *s) {
  tpulw_arg a;
  memset(&a, 0, sizeof a);
  a.name = name;
  a.kind = TPULW_STR;
  a.s = s;
  return a;
}
static inline tpulw_arg lt_dtype(const char *name, int dt) {
  tpulw_arg a = lt_int(name, dt);
  a.kind = TPULW_DTYPE;
  return a;
}
static inline tpulw_arg lt_none(const char *name) {
  tpulw_arg a;
  memset(&a, 0, sizeof a);
  a.name = name;
  a.kind = TPULW_NONE;
  return a;
}
static inline tpulw_arg lt_ints(const char *name, const int64_t *v, int n) {
  tpulw_arg a;
  memset(&a, 0, sizeof a);
  a.name = name;
  a.kind = TPULW_INTS;
  a.ints = v;
  a.n = n;
  return a;
}
static inline tpulw_arg lt_tensors(const char *name, const tpulw_tensor *t, int n) {
  tpulw_arg a;
  memset(&a, 0, sizeof a);
  a.name = name;
  a.kind = TPULW_TENSORS;
  a.tensors = t;
  a.n = n;
  return a;
}
static inline tpulw_arg lt_gen(const char *name, tpulw_philox *g) {
  tpulw_arg a;
  memset(&a, 0, sizeof a);
  a.name = name;
  a.kind = TPULW_GENERATOR;
  a.gen = g;
  return a;
}

/* ---- typed element access ---------------------------------------------- */
static inline double lt_get_raw(int dt, const void *p) {
  switch (dt) {
  case TPU_BOOL: return *(const uint8_t *)p != 0;
  case TPU_U8: return *(const uint8_t *)p;
  case TPU_I8: return *(const int8_t *)p;
  case TPU_I16: return *(const int16_t *)p;
  case TPU_I32: return *(const int32_t *)p;
  case TPU_I64: return (double)*(const int64_t *)p;
  case TPU_F16: return tpu_f16_to_f32(*(const uint16_t *)p);
  case TPU_BF16: return tpu_bf16_to_f32(*(const uint16_t *)p);
  case TPU_F32: return *(const float *)p;
  case TPU_F64: return *(const double *)p;
  default: return NAN;
  }
}
static inline void lt_set_raw(int dt, void *p, double v) {
  switch (dt) {
  case TPU_BOOL: *(uint8_t *)p = v != 0; break;
  case TPU_U8: *(uint8_t *)p = (uint8_t)(int64_t)v; break;
  case TPU_I8: *(int8_t *)p = (int8_t)v; break;
  case TPU_I16: *(int16_t *)p = (int16_t)v; break;
  case TPU_I32: *(int32_t *)p = (int32_t)v; break;
  case TPU_I64: *(int64_t *)p = (int64_t)v; break;
  case TPU_F16: *(uint16_t *)p = tpu_f32_to_f16((float)v); break;
  case TPU_BF16: *(uint16_t *)p = tpu_f32_to_bf16((float)v); break;
  case TPU_F32: *(float *)p = (float)v; break;
  case TPU_F64: *(double *)p = v; break;
  default: break;
  }
}
/* address of the element with row-major logical index i */
static inline void *lt_addr(const tpu_view *v, int64_t i) {
  int64_t off = v->offset;
  for (int d = v->ndim - 1; d >= 0; d--) {
    int64_t n = v->sizes[d];
    off += (i % n) * v->strides[d];
    i /= n;
  }
  return (char *)v->base + off * (int64_t)tpu_dtype_size(v->dtype);
}
static inline double lt_get(const tpu_view *v, int64_t i) {
  return lt_get_raw(v->dtype, lt_addr(v, i));
}
static inline void lt_set(const tpu_view *v, int64_t i, double x) {
  lt_set_raw(v->dtype, lt_addr(v, i), x);
}

/* A contiguous malloc'd tensor (free with lt_free). */
static inline tpu_view lt_new(int dt, int nd, const int64_t *sizes) {
  tpu_view v;
  int64_t n = 1;
  for (int i = 0; i < nd; i++) n *= sizes[i];
  void *p = calloc((size_t)(n > 0 ? n : 1), tpu_dtype_size(dt));
  tpu_view_init_contiguous(&v, p, dt, nd, sizes);
  return v;
}
/* contiguous tensor filled from vals (n values) */
static inline tpu_view lt_from(int dt, int nd, const int64_t *sizes,
                               const double *vals) {
  tpu_view v = lt_new(dt, nd, sizes);
  int64_t n = tpu_view_numel(&v);
  for (int64_t i = 0; i < n; i++) lt_set(&v, i, vals[i]);
  return v;
}
static inline void lt_free(tpu_view *v) {
  free(v->base);
  v->base = NULL;
}

/* deterministic pseudo-random fill in [-1, 1) */
static inline void lt_fill_rand(tpu_view *v, unsigned seed) {
  uint32_t s = seed * 2654435761u + 1;
  int64_t n = tpu_view_numel(v);
  for (int64_t i = 0; i < n; i++) {
    s = s * 1664525u + 1013904223u;
    lt_set(v, i, ((s >> 8) / 16777216.0) * 2 - 1);
  }
}

/* ---- the runner ---------------------------------------------------------- */
typedef struct lt_result {
  int rc;       /* first error (prepare, launch or synchronize) */
  int nout;
  tpulw_out_info info[8];
  tpu_view out[8]; /* results (new outputs: malloc'd, owned here) */
  int owned[8];
} lt_result;

static inline void lt_result_free(lt_result *r) {
  for (int i = 0; i < r->nout; i++)
    if (r->owned[i]) lt_free(&r->out[i]);
  r->nout = 0;
}

/* Run an op end to end on device 0's default stream. Destinations that are
 * args are used in place (resize requests are honoured by allocating a new
 * contiguous buffer owned by the result). */
static inline lt_result lt_run(const char *name, const char *ov,
                               const tpulw_arg *args, int n) {
  lt_result r;
  memset(&r, 0, sizeof r);
  tpulw_ctx ctx = {0, TPU_PREC_HIGHEST};
  tpulw_plan *p = NULL;
  r.rc = tpulw_prepare(&ctx, name, ov, args, n, &p);
  if (r.rc < 0) return r;
  r.nout = tpulw_plan_num_outputs(p);
  for (int i = 0; i < r.nout; i++) {
    const tpulw_out_info *o = tpulw_plan_output(p, i);
    r.info[i] = *o;
    if (o->dest_arg < 0 || o->resize) {
      r.out[i] = lt_new(o->dtype, o->ndim, o->sizes);
      r.owned[i] = 1;
    } else {
      const tpulw_arg *a = &args[o->dest_arg];
      r.out[i] = a->kind == TPULW_TENSOR ? a->t.view : a->tensors[o->dest_elem].view;
    }
  }
  tpurt_stream *s = tpurt_default_stream(0);
  r.rc = tpulw_launch(p, s, r.out);
  int rc2 = tpurt_stream_synchronize(s);
  if (r.rc == 0) r.rc = rc2;
  return r;
}

/* a and b agree to tol (relative to 1 + |b|); NaN matches NaN, inf matches
 * the same inf. */
static inline int lt_near(double a, double b, double tol) {
  if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
  if (isinf(a) || isinf(b)) return a == b;
  return fabs(a - b) <= tol * (1 + fabs(b));
}

/* CHECK every element of `view` against ref[0..n) (uses tpu_test.h). */
#define CHECK_VALS(view, ref, n, tol)                                        \
  do {                                                                       \
    for (int64_t i_ = 0; i_ < (n); i_++) {                                   \
      double g_ = lt_get(&(view), i_), w_ = (ref)[i_];                       \
      if (!lt_near(g_, w_, tol)) {                                           \
        fprintf(stderr, "  element %lld: got %.9g want %.9g\n",              \
                (long long)i_, g_, w_);                                      \
        CHECK(lt_near(g_, w_, tol));                                         \
      }                                                                      \
    }                                                                        \
  } while (0)

#endif

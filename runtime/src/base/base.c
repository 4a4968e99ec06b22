/* base/base.c - status codes, per-thread errors, dtypes, views. */
#include "tpu_base.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char g_err_msg[1024];
static _Thread_local int g_err_code;

int tpu_error(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_err_msg, sizeof g_err_msg, fmt, ap);
  va_end(ap);
  g_err_code = code;
  return code;
}

const char *tpu_last_error(void) { return g_err_msg; }
int tpu_last_error_code(void) { return g_err_code; }
void tpu_clear_error(void) {
  g_err_msg[0] = 0;
  g_err_code = TPU_OK;
}

const char *tpu_status_name(int code) {
  switch (code) {
  case TPU_OK: return "TPU_OK";
  case TPU_E_INVALID: return "TPU_E_INVALID";
  case TPU_E_INDEX: return "TPU_E_INDEX";
  case TPU_E_TYPE: return "TPU_E_TYPE";
  case TPU_E_VALUE: return "TPU_E_VALUE";
  case TPU_E_OOM: return "TPU_E_OOM";
  case TPU_E_BUSY: return "TPU_E_BUSY";
  case TPU_E_UNSUPPORTED: return "TPU_E_UNSUPPORTED";
  case TPU_E_INTERNAL: return "TPU_E_INTERNAL";
  case TPU_E_LINALG: return "TPU_E_LINALG";
  default: return "TPU_E_?";
  }
}

static const struct { size_t size; const char *name; } k_dtypes[TPU_NUM_DTYPES] = {
    [TPU_BOOL] = {1, "bool"},     [TPU_U8] = {1, "uint8"},
    [TPU_I8] = {1, "int8"},       [TPU_I16] = {2, "int16"},
    [TPU_I32] = {4, "int32"},     [TPU_I64] = {8, "int64"},
    [TPU_F16] = {2, "float16"},   [TPU_BF16] = {2, "bfloat16"},
    [TPU_F32] = {4, "float32"},   [TPU_F64] = {8, "float64"},
    [TPU_C64] = {8, "complex64"}, [TPU_C128] = {16, "complex128"},
};

size_t tpu_dtype_size(int dt) {
  return (dt >= 0 && dt < TPU_NUM_DTYPES) ? k_dtypes[dt].size : 0;
}
const char *tpu_dtype_name(int dt) {
  return (dt >= 0 && dt < TPU_NUM_DTYPES) ? k_dtypes[dt].name : "?";
}
int tpu_dtype_is_float(int dt) {
  return dt == TPU_F16 || dt == TPU_BF16 || dt == TPU_F32 || dt == TPU_F64;
}
int tpu_dtype_is_int(int dt) { return dt >= TPU_U8 && dt <= TPU_I64; }
int tpu_dtype_is_complex(int dt) { return dt == TPU_C64 || dt == TPU_C128; }
int tpu_dtype_complex_part(int dt) {
  return dt == TPU_C64 ? TPU_F32 : dt == TPU_C128 ? TPU_F64 : dt;
}
int tpu_dtype_to_complex(int dt) {
  if (tpu_dtype_is_complex(dt)) return dt;
  return dt == TPU_F64 ? TPU_C128 : TPU_C64;
}

float tpu_bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

uint16_t tpu_f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */
  return (uint16_t)(u >> 16);
}

float tpu_f16_to_f32(uint16_t h) {
  _Float16 x;
  memcpy(&x, &h, 2);
  return (float)x;
}

uint16_t tpu_f32_to_f16(float f) {
  _Float16 x = (_Float16)f;
  uint16_t h;
  memcpy(&h, &x, 2);
  return h;
}

int64_t tpu_view_numel(const tpu_view *v) {
  int64_t n = 1;
  for (int i = 0; i < v->ndim; i++) n *= v->sizes[i];
  return n;
}

int tpu_view_is_contiguous(const tpu_view *v) {
  int64_t expect = 1;
  for (int i = v->ndim - 1; i >= 0; i--) {
    if (v->sizes[i] == 0) return 1;
    if (v->sizes[i] != 1 && v->strides[i] != expect) return 0;
    expect *= v->sizes[i];
  }
  return 1;
}

void tpu_view_init_contiguous(tpu_view *v, void *base, int dtype, int ndim,
                              const int64_t *sizes) {
  memset(v, 0, sizeof *v);
  v->base = base;
  v->dtype = dtype;
  v->ndim = ndim;
  int64_t s = 1;
  for (int i = ndim - 1; i >= 0; i--) {
    v->sizes[i] = sizes[i];
    v->strides[i] = s;
    s *= sizes[i] > 1 ? sizes[i] : 1;
  }
}

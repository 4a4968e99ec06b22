/* coll/reduce.c - typed reductions of n buffers into one, in source order.
 * 16-bit floats accumulate in fp32 and round once; AVG divides the sum. */
#include <string.h>

#include "coll/internal.h"

#define RED_BLOCK 1024 /* elements per block: sources stay in L1 */

#define SUM(a, b) ((a) + (b))
#define PRD(a, b) ((a) * (b))
#define MIN_(a, b) ((b) < (a) ? (b) : (a))
#define MAX_(a, b) ((b) > (a) ? (b) : (a))

/* Real dtypes stored as T, accumulated as A (via LOAD/STORE). NaN
 * propagates through MIN/MAX like torch.minimum/maximum. */
#define DEF_REAL(NAME, T, A, LOAD, STORE, ISNAN)                               \
  static void red_##NAME(T *dst, const void *const *srcs, int n, size_t cnt,  \
                         int op, int avg_div) {                              \
    A acc[RED_BLOCK];                                                        \
    for (size_t b = 0; b < cnt; b += RED_BLOCK) {                            \
      size_t m = cnt - b < RED_BLOCK ? cnt - b : RED_BLOCK;                  \
      const T *s0 = (const T *)srcs[0] + b;                                  \
      for (size_t i = 0; i < m; i++) acc[i] = LOAD(s0[i]);                   \
      for (int k = 1; k < n; k++) {                                          \
        const T *s = (const T *)srcs[k] + b;                                 \
        switch (op) {                                                        \
          case TPUCOLL_SUM:                                                  \
          case TPUCOLL_AVG:                                                  \
            for (size_t i = 0; i < m; i++) acc[i] = SUM(acc[i], LOAD(s[i])); \
            break;                                                           \
          case TPUCOLL_PROD:                                                 \
            for (size_t i = 0; i < m; i++) acc[i] = PRD(acc[i], LOAD(s[i])); \
            break;                                                           \
          case TPUCOLL_MIN:                                                  \
            for (size_t i = 0; i < m; i++) {                                 \
              A v = LOAD(s[i]);                                              \
              acc[i] = ISNAN(acc[i]) ? acc[i] : ISNAN(v) ? v : MIN_(acc[i], v); \
            }                                                                \
            break;                                                           \
          default:                                                           \
            for (size_t i = 0; i < m; i++) {                                 \
              A v = LOAD(s[i]);                                              \
              acc[i] = ISNAN(acc[i]) ? acc[i] : ISNAN(v) ? v : MAX_(acc[i], v); \
            }                                                                \
        }                                                                    \
      }                                                                      \
      if (op == TPUCOLL_AVG)                                                 \
        for (size_t i = 0; i < m; i++) acc[i] = acc[i] / (A)avg_div;         \
      for (size_t i = 0; i < m; i++) dst[b + i] = STORE(acc[i]);             \
    }                                                                        \
  }

#define ID(x) (x)
#define NO_NAN(x) 0
#define F_NAN(x) ((x) != (x))
#define BOOL_STORE(x) ((uint8_t)((x) != 0))

DEF_REAL(f32, float, float, ID, ID, F_NAN)
DEF_REAL(f64, double, double, ID, ID, F_NAN)
DEF_REAL(bf16, uint16_t, float, tpu_bf16_to_f32, tpu_f32_to_bf16, F_NAN)
DEF_REAL(f16, uint16_t, float, tpu_f16_to_f32, tpu_f32_to_f16, F_NAN)
DEF_REAL(i8, int8_t, int8_t, ID, ID, NO_NAN)
DEF_REAL(u8, uint8_t, uint8_t, ID, ID, NO_NAN)
DEF_REAL(i16, int16_t, int16_t, ID, ID, NO_NAN)
DEF_REAL(i32, int32_t, int32_t, ID, ID, NO_NAN)
DEF_REAL(i64, int64_t, int64_t, ID, ID, NO_NAN)
/* bool: SUM/MAX = or, PROD/MIN = and (as torch does for bool tensors) */
DEF_REAL(b8, uint8_t, int, ID, BOOL_STORE, NO_NAN)

/* Complex: SUM/AVG add parts, PROD multiplies. */
#define DEF_CPLX(NAME, T)                                                     \
  static void red_##NAME(T *dst, const void *const *srcs, int n, size_t cnt, \
                         int op, int avg_div) {                             \
    for (size_t i = 0; i < cnt; i++) {                                      \
      T re = ((const T *)srcs[0])[2 * i], im = ((const T *)srcs[0])[2 * i + 1]; \
      for (int k = 1; k < n; k++) {                                         \
        T br = ((const T *)srcs[k])[2 * i], bi = ((const T *)srcs[k])[2 * i + 1]; \
        if (op == TPUCOLL_PROD) {                                           \
          T r = re * br - im * bi;                                          \
          im = re * bi + im * br;                                           \
          re = r;                                                           \
        } else {                                                            \
          re += br;                                                         \
          im += bi;                                                         \
        }                                                                   \
      }                                                                     \
      if (op == TPUCOLL_AVG) {                                              \
        re /= (T)avg_div;                                                   \
        im /= (T)avg_div;                                                   \
      }                                                                     \
      dst[2 * i] = re;                                                      \
      dst[2 * i + 1] = im;                                                  \
    }                                                                       \
  }
DEF_CPLX(c64, float)
DEF_CPLX(c128, double)

int tpucoll__check_reduce_op(int dtype, int op) {
  if (op < 0 || op >= TPUCOLL_NUM_OPS)
    return tpu_error(TPU_E_INVALID, "tpu_dist: unknown reduce op %d", op);
  if (op == TPUCOLL_AVG && !tpu_dtype_is_float(dtype) && !tpu_dtype_is_complex(dtype))
    return tpu_error(TPU_E_TYPE, "tpu_dist: ReduceOp.AVG needs a floating or complex dtype, got %s",
                     tpu_dtype_name(dtype));
  if ((op == TPUCOLL_MIN || op == TPUCOLL_MAX) && tpu_dtype_is_complex(dtype))
    return tpu_error(TPU_E_TYPE, "tpu_dist: ReduceOp.MIN/MAX are not defined for %s",
                     tpu_dtype_name(dtype));
  return TPU_OK;
}

int tpucoll_reduce_buffers(void *dst, const void *const *srcs, int n,
                           size_t count, int dtype, int op, int avg_div) {
  int rc = tpucoll__check_reduce_op(dtype, op);
  if (rc) return rc;
  if (n < 1) return tpu_error(TPU_E_INVALID, "tpu_dist: no sources to reduce");
  if (avg_div < 1) avg_div = n;
  switch (dtype) {
    case TPU_F32: red_f32(dst, srcs, n, count, op, avg_div); break;
    case TPU_F64: red_f64(dst, srcs, n, count, op, avg_div); break;
    case TPU_BF16: red_bf16(dst, srcs, n, count, op, avg_div); break;
    case TPU_F16: red_f16(dst, srcs, n, count, op, avg_div); break;
    case TPU_I8: red_i8(dst, srcs, n, count, op, avg_div); break;
    case TPU_U8: red_u8(dst, srcs, n, count, op, avg_div); break;
    case TPU_I16: red_i16(dst, srcs, n, count, op, avg_div); break;
    case TPU_I32: red_i32(dst, srcs, n, count, op, avg_div); break;
    case TPU_I64: red_i64(dst, srcs, n, count, op, avg_div); break;
    case TPU_BOOL: red_b8(dst, srcs, n, count, op, avg_div); break;
    case TPU_C64: red_c64(dst, srcs, n, count, op, avg_div); break;
    case TPU_C128: red_c128(dst, srcs, n, count, op, avg_div); break;
    default:
      return tpu_error(TPU_E_TYPE, "tpu_dist: unsupported dtype %d", dtype);
  }
  return TPU_OK;
}

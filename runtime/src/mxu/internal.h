/* mxu/internal.h - private interface of the vTPU matrix unit (mxu/):
 * the oneDNN matmul wrapper (mxu/dnnl.c) and the driver that splits f32
 * operands into bf16 parts and finishes C (mxu/driver.c); convolutions on
 * oneDNN's convolution primitives (mxu/conv.c). */
#ifndef TPU_MXU_INTERNAL_H
#define TPU_MXU_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "tpu_base.h"
#include "tpu_mxu.h"

/* f32 -> bf16 (RNE, quiet NaN) returned as the f32 bit pattern with the low
 * 16 bits clear (same bits as tpu_f32_to_bf16 << 16). */
static inline uint32_t tpumxu__rne_bits(uint32_t u) {
  if ((u & 0x7fffffffu) > 0x7f800000u) return (u | 0x00400000u) & 0xffff0000u;
  return (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
}
static inline uint32_t tpumxu__f2u(float x) {
  uint32_t u;
  __builtin_memcpy(&u, &x, 4);
  return u;
}
static inline float tpumxu__u2f(uint32_t u) {
  float x;
  __builtin_memcpy(&x, &u, 4);
  return x;
}

/* ---- oneDNN matmul (mxu/dnnl.c) ------------------------------------- */

/* Element types the wrapper passes to oneDNN. */
enum { TPUMXU_DT_F32 = 0, TPUMXU_DT_BF16 = 1 };

/* One operand or result of a batched matmul: element (b, i, j) at
 * ptr + (b * sb + i * s0 + j * s1) elements of dt; sb == 0 with a batch of
 * more than one broadcasts a single matrix. Strides >= 0. */
/* m*n*k up to this runs on the small-problem primitive (run-time sizes,
 * unit column strides, calling thread): see mxu/dnnl.c */
#define TPUMXU_SMALL_MACS ((int64_t)1 << 21)
/* A batch of small problems with at least this many multiply-adds in all
 * runs on the pool's threads (mxu/dnnl.c); a transposed operand is then
 * read in place by shape-specialised primitives (mxu/driver.c). */
#define TPUMXU_SMALL_POOL_MACS ((int64_t)1 << 22)

typedef struct tpumxu__mat {
  void *ptr;
  int dt;
  int64_t sb, s0, s1;
} tpumxu__mat;

/* dst[b] = src[b] (m x k) @ wei[b] (k x n)  (+ dst[b] when accumulate),
 * f32 accumulation, over `batch` items; the oneDNN primitive is cached by
 * shape, types, strides and `accumulate`. Returns TPU_OK, TPU_E_OOM or
 * TPU_E_INTERNAL (oneDNN refused; message set). Borrowed: all pointers. */
int tpumxu__dnnl_matmul(int64_t batch, int64_t m, int64_t n, int64_t k,
                       const tpumxu__mat *src, const tpumxu__mat *wei,
                       const tpumxu__mat *dst, int accumulate);

/* Whether oneDNN multiplies bf16 operands natively on this CPU (else the
 * driver stores bf16 parts widened to f32: bf16 x bf16 products are exact
 * in f32, so the result is the same up to accumulation order). */
int tpumxu__dnnl_bf16_native(void);

/* Implementation oneDNN picks for a dense m x k @ k x n problem with the
 * given operand/result types (e.g. "brg:avx512_core_bf16"), into buf. */
int tpumxu__dnnl_impl(int src_dt, int dst_dt, int64_t m, int64_t n, int64_t k,
                     char *buf, size_t cap);

/* The process's oneDNN CPU engine (a dnnl_engine_t), created on first
 * use; NULL (error set) when oneDNN is unusable. */
void *tpumxu__dnnl_engine(void);

/* Reusable 64-byte-aligned workspace (a few freed buffers are kept so big
 * GEMMs do not page-fault per call). ws_get: at least n bytes, *cap its
 * size, NULL when out of memory; ws_put: give it back (NULL is fine). */
void *tpumxu__ws_get(size_t n, size_t *cap);
void tpumxu__ws_put(void *p, size_t cap);

/* ---- driver (mxu/driver.c) ------------------------------------------ */

/* One validated GEMM request (operand dtype F32, BF16 or F16, C of cdtype:
 * the same, or F32 for BF16 operands; strides in elements, pointers
 * already offset to element (0,0) of batch 0). */
typedef struct tpumxu__problem {
  int dtype, cdtype, prec;
  int64_t batch, m, n, k;
  float alpha, beta;
  const char *a, *b;
  char *c;
  int64_t sab, sam, sak, sbb, sbk, sbn, sbc, scm, scn;
  tpumxu_epilogue_fn epi; /* optional (see tpumxu_gemm_ex) */
  void *epi_ctx;
} tpumxu__problem;

/* Run a problem through oneDNN. Returns TPU_OK, TPU_E_OOM or
 * TPU_E_INTERNAL. */
int tpumxu__run(const tpumxu__problem *p);

#endif /* TPU_MXU_INTERNAL_H */

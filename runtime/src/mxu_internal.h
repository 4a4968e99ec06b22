/* mxu_internal.h - private interface of the vTPU matrix unit (mxu*.c):
 * packed-panel formats, micro-kernels, packing and the blocked driver. */
#ifndef TPU_MXU_INTERNAL_H
#define TPU_MXU_INTERNAL_H

#include <stdint.h>

#include "tpu_base.h"
#include "tpu_mxu.h"

/* Packed panel formats. A panel holds R rows (R = MR for A, NR for B; the
 * "rows" of a B panel are its columns) by kc k-steps:
 *   F32:   float  [kc][R]
 *   BF16P: uint32 [kc/2][R], each word the bf16 pair (k even in the low
 *          half, k odd in the high half) that vdpbf16ps multiplies; kc even.
 * A plane is one bf16 part of the split (hi, r1, r2) or the raw value. */
enum { TPUMXU_FMT_F32 = 0, TPUMXU_FMT_BF16P = 1 };

/* Micro-kernel: acc[MR][NR] (row-major, 64-byte aligned) = (load ? acc : 0)
 * + sum over the np plane pairs p of A_p(MR x kc) * B_p(kc x NR), where
 * ap[p] / bp[p] point at packed panels in the kernel's format. fp32
 * accumulation; bf16 products are exact. kc may be 0. */
typedef void (*tpumxu_kern_fn)(int np, const void *const *ap,
                               const void *const *bp, int64_t kc, float *acc,
                               int load);

/* Epilogue of one C tile: for i < mr, j < nr:
 *   v = h[i][j] + (s ? (isfinite(s[i][j]) ? s[i][j] : 0) : 0)
 *   C[i][j] = alpha * v + (beta != 0 ? beta * C[i][j] : 0), rounded once
 * into dtype (TPU_F32/BF16/F16). h/s have row stride ld. */
typedef void (*tpumxu_epi_fn)(const float *h, const float *s, int ld, int mr,
                              int nr, float alpha, float beta, int dtype,
                              char *c, int64_t scm, int64_t scn);

/* Largest MR * NR of any kernel (stack tiles in the driver). */
#define TPUMXU_MAX_TILE 512

typedef struct tpumxu_kernel {
  int mr, nr, fmt;
  tpumxu_kern_fn fn;
  tpumxu_epi_fn epi;
} tpumxu_kernel;

extern const tpumxu_kernel tpumxu_kern_scalar_f32;
extern const tpumxu_kernel tpumxu_kern_avx2_f32;
extern const tpumxu_kernel tpumxu_kern_avx512_f32;
extern const tpumxu_kernel tpumxu_kern_avx512bf16_bf16p;

/* AVX-512 epilogue (contiguous C rows; else the generic one). */
void tpumxu_epi_avx512(const float *h, const float *s, int ld, int mr,
                       int nr, float alpha, float beta, int dtype, char *c,
                       int64_t scm, int64_t scn);
/* Portable epilogue (any layout, any dtype). */
void tpumxu_epi_generic(const float *h, const float *s, int ld, int mr,
                        int nr, float alpha, float beta, int dtype, char *c,
                        int64_t scm, int64_t scn);

/* ---- packing (mxu_pack.c) ------------------------------------------- */

/* A strided source matrix seen as rows x k: element (r, l) at
 * base + (r * rs + l * ks) elements of dtype (F32, BF16 or F16). */
typedef struct tpumxu_src {
  const char *base;
  int64_t rs, ks;
  int dtype;
} tpumxu_src;

/* Pack one panel: source rows [r0, r0 + nr) (nr <= R; rows beyond are
 * zero) and k-steps [k0, k0 + kv) (kv <= kc; steps beyond are zero) into
 * `nplanes` planes of format fmt, plane p at dst + p * plane_bytes.
 * nplanes == 0 means one plane of raw values (fmt F32 only); 1..3 the bf16
 * split parts hi, r1, r2. `isa` picks the SIMD code (tpumxu_isa). */
void tpumxu_pack_panel(int isa, const tpumxu_src *s, int64_t r0, int nr,
                       int R, int64_t k0, int64_t kv, int64_t kc, int fmt,
                       int nplanes, void *dst, int64_t plane_bytes);

/* Pack npan consecutive panels: panel p holds source rows
 * [r0 + p * R, r0 + (p + 1) * R) (rows at or beyond r0 + nrows are zero) and
 * goes to dst + p * panel_bytes; k-steps, formats and planes as in
 * tpumxu_pack_panel. Same bits as npan tpumxu_pack_panel calls; panels
 * with contiguous rows are read a k-pair at a time across all panels. */
void tpumxu_pack_panels(int isa, const tpumxu_src *s, int64_t r0,
                        int64_t nrows, int R, int64_t npan, int64_t k0,
                        int64_t kv, int64_t kc, int fmt, int nplanes,
                        void *dst, int64_t panel_bytes, int64_t plane_bytes);

/* Scalar split of x into bf16 parts (bit patterns; RNE like
 * tpu_f32_to_bf16; non-finite parts as the arithmetic gives them). */
static inline uint32_t tpumxu_f2u(float x) {
  uint32_t u;
  __builtin_memcpy(&u, &x, 4);
  return u;
}
static inline float tpumxu_u2f(uint32_t u) {
  float x;
  __builtin_memcpy(&x, &u, 4);
  return x;
}
/* f32 -> bf16 (RNE, quiet NaN) returned as the f32 bit pattern with the low
 * 16 bits clear. */
static inline uint32_t tpumxu_rne_bits(uint32_t u) {
  if ((u & 0x7fffffffu) > 0x7f800000u) return (u | 0x00400000u) & 0xffff0000u;
  return (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
}

/* ---- blocked driver (mxu_driver.c) ------------------------------------ */

/* One validated GEMM request (dtype F32, BF16 or F16; strides in elements,
 * pointers already offset to element (0,0) of batch 0). */
typedef struct tpumxu_problem {
  int dtype, prec, isa;
  int64_t batch, m, n, k;
  float alpha, beta;
  const char *a, *b;
  char *c;
  int64_t sab, sam, sak, sbb, sbk, sbn, sbc, scm, scn;
  tpumxu_epilogue_fn epi; /* optional (see tpumxu_gemm_ex) */
  void *epi_ctx;
} tpumxu_problem;

/* Run a problem with the packed/blocked driver on the thread pool.
 * Returns TPU_OK or TPU_E_OOM (workspace). */
int tpumxu_run(const tpumxu_problem *p);

#endif /* TPU_MXU_INTERNAL_H */

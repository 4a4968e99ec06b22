/* tpu_mxu.h - the vTPU matrix unit (prefix tpumxu_): GEMM with TPU
 * numerics (bf16 products, fp32 accumulation, 1/3/6-pass precision), run
 * by oneDNN's matmul (AMX / AVX512-BF16 / AVX2, whatever the host has).
 *
 * Passes (ARCHITECTURE §4), for an f32 x split into bf16 parts
 * hi = bf16(x), r1 = bf16(x - hi), r2 = bf16(x - hi - r1):
 *   DEFAULT: hi*hi
 *   HIGH:    (hi*r1 + r1*hi) + hi*hi
 *   HIGHEST: (r1*r1 + r2*hi + hi*r2 + r1*hi + hi*r1) + hi*hi
 * each product a bf16 x bf16 dot accumulated in fp32; the small-term sum is
 * zeroed if non-finite before hi*hi is added. FP32 = plain fp32 GEMM.
 * The small terms are one GEMM over the parts concatenated along K (their
 * fp32 sum in oneDNN's order, smallest terms first along K); bf16 x bf16
 * products are exact in fp32, so results differ from a term-by-term sum
 * only by fp32 accumulation order (tests bound it against fp64).
 */
#ifndef TPU_MXU_H
#define TPU_MXU_H

#include <stddef.h>

#include "tpu_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The multiply engine (oneDNN) as text, e.g. "oneDNN 3.2.0, cpu isa
 * avx512_core_amx, bf16 native", into buf (cap bytes, NUL-terminated).
 * Returns TPU_OK or TPU_E_INTERNAL (oneDNN unusable). Borrowed: buf. */
TPU_API int tpumxu_engine_info(char *buf, size_t cap);

/* The oneDNN implementation that runs a dense row-major m x k @ k x n GEMM
 * of `dtype` at `precision` (e.g. "brg:avx512_core_bf16"), into buf.
 * Returns TPU_OK, TPU_E_INVALID or TPU_E_INTERNAL. Borrowed: buf. */
TPU_API int tpumxu_impl_name(int dtype, int precision, int64_t m, int64_t n,
                     int64_t k, char *buf, size_t cap);

/* Batched strided GEMM:
 *   for b < batch: C_b[m,n] = alpha * sum_k A_b[m,k] * B_b[k,n] + beta * C_b[m,n]
 * A element (b,m,k) at a + b*sab + m*sam + k*sak (strides in elements, any
 * sign/zero: transposed views need no copy); same for B (sbb,sbk,sbn) and C
 * (sbc, scm, scn). dtype: TPU_F32, TPU_BF16, TPU_F16 (A, B and C share it;
 * accumulation in f32, C rounded once) or TPU_F64 (exact f64). beta == 0
 * means C is not read (may hold NaN). `precision` applies to f32.
 * Uses the runtime thread pool. Borrowed: all pointers. */
TPU_API int tpumxu_gemm(int dtype, int precision, int64_t batch, int64_t m, int64_t n,
                int64_t k, double alpha, const void *a, int64_t sab,
                int64_t sam, int64_t sak, const void *b, int64_t sbb,
                int64_t sbk, int64_t sbn, double beta, void *c, int64_t sbc,
                int64_t scm, int64_t scn);

/* GEMM epilogue callback: called once the final values (alpha/beta applied,
 * rounded to dtype) of the C block rows [m0, m1) x cols [n0, n1) of batch
 * item `batch` have been stored, while the block is still hot in cache.
 * The blocks of one call cover C exactly once. It runs on the thread that
 * finished the block: a pool worker or the calling thread, several blocks
 * concurrently, in no particular order. It must only read the finished
 * block (not other parts of C) and write memory no other block's callback
 * or the GEMM itself touches (in particular not A, B or other parts of C);
 * it must not call tpurt_parallel_for expecting parallelism (nested calls
 * run inline). It cannot fail: report errors through ctx. */
typedef void (*tpumxu_epilogue_fn)(void *ctx, int64_t batch, int64_t m0,
                                   int64_t m1, int64_t n0, int64_t n1);

/* tpumxu_gemm with an optional epilogue (epi may be NULL: then exactly
 * tpumxu_gemm). With k == 0 the epilogue is called on the calling thread
 * for each batch item after C is scaled. Not called when batch, m or n is
 * 0 or on an argument error; after an out-of-memory error some blocks may
 * have been processed. Borrowed: all pointers, epi_ctx. */
TPU_API int tpumxu_gemm_ex(int dtype, int precision, int64_t batch, int64_t m,
                   int64_t n, int64_t k, double alpha, const void *a,
                   int64_t sab, int64_t sam, int64_t sak, const void *b,
                   int64_t sbb, int64_t sbk, int64_t sbn, double beta, void *c,
                   int64_t sbc, int64_t scm, int64_t scn,
                   tpumxu_epilogue_fn epi, void *epi_ctx);

/* tpumxu_gemm_ex with operands (A, B) of ab_dtype and C of c_dtype: either
 * the same dtype (exactly tpumxu_gemm_ex), or TPU_BF16 operands with an
 * TPU_F32 C (bf16 x bf16 products accumulated and stored in f32: the
 * DEFAULT pass of f32 operands already rounded to bf16, without the
 * rounding pass; `precision` is ignored). Borrowed: all pointers, epi_ctx. */
TPU_API int tpumxu_gemm_io(int ab_dtype, int c_dtype, int precision, int64_t batch,
                   int64_t m, int64_t n, int64_t k, double alpha, const void *a,
                   int64_t sab, int64_t sam, int64_t sak, const void *b,
                   int64_t sbb, int64_t sbk, int64_t sbn, double beta, void *c,
                   int64_t sbc, int64_t scm, int64_t scn,
                   tpumxu_epilogue_fn epi, void *epi_ctx);

/* 1 when bf16 operands multiply natively on this host (AVX512-BF16, AMX),
 * 0 when oneDNN widens them to f32 (same products, slower), or oneDNN is
 * unusable. */
TPU_API int tpumxu_bf16_native(void);

/* ---- convolution ----------------------------------------------------- */

/* Which operand of tpumxu_conv is computed (the other two are read):
 *   FWD:         y = conv(x, w)
 *   BWD_DATA:    x = conv_backward_data(y, w)       (y holds dL/dy)
 *   BWD_WEIGHTS: w = conv_backward_weights(x, y)    (y holds dL/dy) */
enum { TPUMXU_CONV_FWD = 0, TPUMXU_CONV_BWD_DATA = 1, TPUMXU_CONV_BWD_WEIGHTS = 2 };

/* A convolution y[n, o, q] = sum_{c in group(o), t} x[n, c, q*stride +
 * t*dil - pad_l] * w[o, c, t] (x zero outside [0, in)), nsp spatial dims
 * (1..3; entries past nsp ignored), G groups (C = G*Cg, O = G*Og).
 * Element strides: x [N, C, in..] and y [N, O, out..] positive (or any for
 * a size-1 dim); w as [G, Og, Cg, k..], any sign when w is read (so a
 * reversed or transposed view needs no copy), positive when written. The
 * written operand is overwritten (all its elements, also positions no
 * window reaches). */
typedef struct tpumxu_conv_args {
  int kind, dtype, precision, nsp;
  int64_t N, C, O, G;
  int64_t in[3], k[3], out[3], stride[3], dil[3], pad_l[3];
  void *x, *w, *y;
  int64_t xs[5], ws[6], ys[5];
} tpumxu_conv_args;

/* Run a convolution with TPU numerics on oneDNN's convolution primitives
 * (forward, backward-data, backward-weights; blocked layouts chosen by
 * oneDNN, reorders and primitives cached by shape). Handles dtype TPU_F32
 * at TPU_PREC_DEFAULT (bf16 operands, fp32 accumulation and result) and
 * TPU_PREC_FP32, and TPU_BF16 (fp32 accumulation, rounded once). Returns
 * TPU_OK, TPU_E_OOM, TPU_E_INTERNAL, or TPU_E_UNSUPPORTED (no error
 * message set) for problems it does not take (other dtypes/precisions,
 * negative padding; without a native bf16 kernel the bf16 operands are
 * bf16 values in an f32 primitive, same products): the caller then
 * computes the convolution another way. Borrowed: all pointers. */
TPU_API int tpumxu_conv(const tpumxu_conv_args *a);

#ifdef __cplusplus
}
#endif
#endif /* TPU_MXU_H */

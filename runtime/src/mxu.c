/* mxu.c - vTPU matrix unit: public entry points (argument checks, ISA
 * selection) and a simple portable reference implementation. */
#include "tpu_mxu.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "tpu_rt.h"

/* ---- ISA selection --------------------------------------------------- */

static atomic_int g_isa = TPUMXU_ISA_AUTO; /* forced path, AUTO = best */

static int isa_supported(int isa) {
  switch (isa) {
  case TPUMXU_ISA_SCALAR: return 1;
  case TPUMXU_ISA_AVX2:
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  case TPUMXU_ISA_AVX512:
    return __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
  case TPUMXU_ISA_AVX512BF16:
    return isa_supported(TPUMXU_ISA_AVX512) &&
           __builtin_cpu_supports("avx512bf16");
  default: return 0;
  }
}

static int best_isa(void) {
  for (int i = TPUMXU_ISA_AVX512BF16; i > TPUMXU_ISA_SCALAR; i--)
    if (isa_supported(i)) return i;
  return TPUMXU_ISA_SCALAR;
}

/* Force a code path (AUTO = best available). */
int tpumxu_set_isa(int isa) {
  if (isa == TPUMXU_ISA_AUTO) {
    atomic_store(&g_isa, TPUMXU_ISA_AUTO);
    return TPU_OK;
  }
  if (isa < TPUMXU_ISA_SCALAR || isa > TPUMXU_ISA_AVX512BF16)
    return tpu_error(TPU_E_INVALID, "tpumxu_set_isa: bad isa %d", isa);
  if (!isa_supported(isa))
    return tpu_error(TPU_E_UNSUPPORTED,
                     "tpumxu_set_isa: CPU lacks isa %d", isa);
  atomic_store(&g_isa, isa);
  return TPU_OK;
}

/* Code path currently used (never AUTO). */
int tpumxu_get_isa(void) {
  int isa = atomic_load(&g_isa);
  return isa == TPUMXU_ISA_AUTO ? best_isa() : isa;
}

/* ---- reference (portable) implementation ----------------------------- */

static float ld(int dtype, const void *p, int64_t i) {
  switch (dtype) {
  case TPU_F32: return ((const float *)p)[i];
  case TPU_BF16: return tpu_bf16_to_f32(((const uint16_t *)p)[i]);
  default: return tpu_f16_to_f32(((const uint16_t *)p)[i]);
  }
}

static float bf(float x) { return tpu_bf16_to_f32(tpu_f32_to_bf16(x)); }

/* Split x into bf16 parts hi, r1, r2 (as floats). */
static void split3(float x, float *p) {
  p[0] = bf(x);
  p[1] = bf(x - p[0]);
  p[2] = bf(x - p[0] - p[1]);
}

static void ref_gemm_f32(int dtype, int prec, int64_t m, int64_t n,
                         int64_t k, float alpha, const void *a, int64_t sam,
                         int64_t sak, const void *b, int64_t sbk, int64_t sbn,
                         float beta, void *c, int64_t scm, int64_t scn) {
  /* pass table: pairs (a part, b part) of the small terms, hi*hi last */
  static const int small_hi[2][2] = {{0, 1}, {1, 0}};
  static const int small_hst[5][2] = {{1, 1}, {2, 0}, {0, 2}, {1, 0}, {0, 1}};
  const int(*small)[2] = NULL;
  int nsmall = 0;
  int split = dtype == TPU_F32 && prec != TPU_PREC_FP32;
  if (split && prec == TPU_PREC_HIGH) small = small_hi, nsmall = 2;
  if (split && prec == TPU_PREC_HIGHEST) small = small_hst, nsmall = 5;
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      float s = 0.f, h = 0.f;
      for (int64_t l = 0; l < k; l++) {
        float x = ld(dtype, a, i * sam + l * sak);
        float y = ld(dtype, b, l * sbk + j * sbn);
        if (!split) {
          h = fmaf(x, y, h);
          continue;
        }
        float px[3], py[3];
        split3(x, px);
        split3(y, py);
        for (int t = 0; t < nsmall; t++)
          s += px[small[t][0]] * py[small[t][1]]; /* exact product */
        h += px[0] * py[0];
      }
      if (!isfinite(s)) s = 0.f;
      float r = alpha * (s + h);
      int64_t ci = i * scm + j * scn;
      if (dtype == TPU_F32) {
        float *cp = (float *)c + ci;
        *cp = beta != 0.f ? r + beta * *cp : r;
      } else {
        uint16_t *cp = (uint16_t *)c + ci;
        if (beta != 0.f) r += beta * ld(dtype, c, ci);
        *cp = dtype == TPU_BF16 ? tpu_f32_to_bf16(r) : tpu_f32_to_f16(r);
      }
    }
}

static void ref_gemm_f64(int64_t m, int64_t n, int64_t k, double alpha,
                         const double *a, int64_t sam, int64_t sak,
                         const double *b, int64_t sbk, int64_t sbn,
                         double beta, double *c, int64_t scm, int64_t scn) {
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      double s = 0.;
      for (int64_t l = 0; l < k; l++) s += a[i * sam + l * sak] * b[l * sbk + j * sbn];
      double *cp = c + i * scm + j * scn;
      *cp = beta != 0. ? alpha * s + beta * *cp : alpha * s;
    }
}

/* ---- public entry point ---------------------------------------------- */

/* Batched strided GEMM with TPU numerics (see tpu_mxu.h). */
int tpumxu_gemm(int dtype, int precision, int64_t batch, int64_t m, int64_t n,
                int64_t k, double alpha, const void *a, int64_t sab,
                int64_t sam, int64_t sak, const void *b, int64_t sbb,
                int64_t sbk, int64_t sbn, double beta, void *c, int64_t sbc,
                int64_t scm, int64_t scn) {
  if (dtype != TPU_F32 && dtype != TPU_BF16 && dtype != TPU_F16 &&
      dtype != TPU_F64)
    return tpu_error(TPU_E_TYPE, "tpumxu_gemm: unsupported dtype %s",
                     tpu_dtype_name(dtype));
  if (precision < TPU_PREC_DEFAULT || precision > TPU_PREC_FP32)
    return tpu_error(TPU_E_INVALID, "tpumxu_gemm: bad precision %d", precision);
  if (batch < 0 || m < 0 || n < 0 || k < 0)
    return tpu_error(TPU_E_INVALID,
                     "tpumxu_gemm: negative size (batch=%lld m=%lld n=%lld k=%lld)",
                     (long long)batch, (long long)m, (long long)n, (long long)k);
  if (batch == 0 || m == 0 || n == 0) return TPU_OK;
  if (!c || (k > 0 && (!a || !b)))
    return tpu_error(TPU_E_INVALID, "tpumxu_gemm: NULL operand");
  size_t es = tpu_dtype_size(dtype);
  for (int64_t bi = 0; bi < batch; bi++) {
    const char *ab = (const char *)a + (k ? bi * sab * (int64_t)es : 0);
    const char *bb = (const char *)b + (k ? bi * sbb * (int64_t)es : 0);
    char *cb = (char *)c + bi * sbc * (int64_t)es;
    if (dtype == TPU_F64)
      ref_gemm_f64(m, n, k, alpha, (const double *)ab, sam, sak,
                   (const double *)bb, sbk, sbn, beta, (double *)cb, scm, scn);
    else
      ref_gemm_f32(dtype, precision, m, n, k, (float)alpha, ab, sam, sak, bb,
                   sbk, sbn, (float)beta, cb, scm, scn);
  }
  return TPU_OK;
}

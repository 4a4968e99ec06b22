/* mxu/mxu.c - vTPU matrix unit: public entry points (argument checks,
 * dispatch, engine description), the float64 path and k == 0. The
 * f32/bf16/f16 paths run through oneDNN (mxu/driver.c, mxu/dnnl.c). */
#include "tpu_mxu.h"

#include <oneapi/dnnl/dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mxu/internal.h"
#include "tpu_rt.h"

/* ---- engine description ------------------------------------------- */

static const char *isa_name(dnnl_cpu_isa_t isa) {
  switch (isa) {
  case dnnl_cpu_isa_sse41: return "sse41";
  case dnnl_cpu_isa_avx: return "avx";
  case dnnl_cpu_isa_avx2: return "avx2";
  case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
  case dnnl_cpu_isa_avx512_core: return "avx512_core";
  case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
  case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
  case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
  case dnnl_cpu_isa_avx2_vnni_2: return "avx2_vnni_2";
  case dnnl_cpu_isa_avx512_core_fp16: return "avx512_core_fp16";
  case dnnl_cpu_isa_avx512_core_amx_fp16: return "avx512_core_amx_fp16";
  default: return "other";
  }
}

/* Engine description (see tpu_mxu.h). */
int tpumxu_engine_info(char *buf, size_t cap) {
  int native = tpumxu__dnnl_bf16_native();
  const dnnl_version_t *v = dnnl_version();
  snprintf(buf, cap, "oneDNN %d.%d.%d, cpu isa %s, bf16 %s", v->major, v->minor,
           v->patch, isa_name(dnnl_get_effective_cpu_isa()),
           native ? "native" : "as f32 (no native bf16 kernel)");
  return TPU_OK;
}

/* Implementation oneDNN runs for a dense GEMM (see tpu_mxu.h). */
int tpumxu_impl_name(int dtype, int precision, int64_t m, int64_t n,
                     int64_t k, char *buf, size_t cap) {
  if (m <= 0 || n <= 0 || k <= 0 ||
      (dtype != TPU_F32 && dtype != TPU_BF16 && dtype != TPU_F16))
    return tpu_error(TPU_E_INVALID, "tpumxu_impl_name: bad problem");
  int bf = tpumxu__dnnl_bf16_native() &&
           (dtype == TPU_BF16 || (dtype == TPU_F32 && precision != TPU_PREC_FP32));
  return tpumxu__dnnl_impl(bf ? TPUMXU_DT_BF16 : TPUMXU_DT_F32, TPUMXU_DT_F32,
                          m, n, k, buf, cap);
}

/* ---- float64 (exact f64, simple blocked loops) ------------------------ */

typedef struct f64_job {
  int64_t m, n, k, mb;
  double alpha, beta;
  const double *a, *b;
  double *c;
  int64_t sab, sam, sak, sbb, sbk, sbn, sbc, scm, scn;
  int oom;
  tpumxu_epilogue_fn epi;
  void *epi_ctx;
} f64_job;

#define F64_ROWS 16

/* Task t = (batch item, block of F64_ROWS rows): rows accumulated in a
 * contiguous f64 buffer, k outer / n inner, then alpha/beta into C. */
static void f64_fn(void *ctx, int64_t t0, int64_t t1) {
  f64_job *J = ctx;
  double *acc = malloc(sizeof(double) * (size_t)J->n);
  double *brow = malloc(sizeof(double) * (size_t)J->n);
  if (!acc || !brow) {
    __atomic_store_n(&J->oom, 1, __ATOMIC_RELAXED);
    t1 = t0;
  }
  for (int64_t t = t0; t < t1; t++) {
    int64_t bi = t / J->mb, i0 = (t % J->mb) * F64_ROWS;
    int64_t i1 = i0 + F64_ROWS < J->m ? i0 + F64_ROWS : J->m;
    const double *a = J->a + bi * J->sab, *b = J->b + bi * J->sbb;
    double *c = J->c + bi * J->sbc;
    for (int64_t i = i0; i < i1; i++) {
      memset(acc, 0, sizeof(double) * (size_t)J->n);
      for (int64_t l = 0; l < J->k; l++) {
        double x = a[i * J->sam + l * J->sak];
        const double *bl = b + l * J->sbk;
        if (J->sbn != 1) {
          for (int64_t j = 0; j < J->n; j++) brow[j] = bl[j * J->sbn];
          bl = brow;
        }
        for (int64_t j = 0; j < J->n; j++) acc[j] += x * bl[j];
      }
      for (int64_t j = 0; j < J->n; j++) {
        double *cp = c + i * J->scm + j * J->scn;
        *cp = J->beta != 0. ? J->alpha * acc[j] + J->beta * *cp : J->alpha * acc[j];
      }
    }
    if (J->epi) J->epi(J->epi_ctx, bi, i0, i1, 0, J->n);
  }
  free(acc);
  free(brow);
}

/* C = beta * C (k == 0), not reading C when beta == 0. */
static void scale_c(int dtype, int64_t batch, int64_t m, int64_t n,
                    double beta, char *c, int64_t sbc, int64_t scm,
                    int64_t scn) {
  int64_t es = (int64_t)tpu_dtype_size(dtype);
  for (int64_t bi = 0; bi < batch; bi++)
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) {
        char *p = c + (bi * sbc + i * scm + j * scn) * es;
        switch (dtype) {
        case TPU_F64: *(double *)p = beta != 0. ? beta * *(double *)p : 0.; break;
        case TPU_F32: *(float *)p = beta != 0. ? (float)beta * *(float *)p : 0.f; break;
        case TPU_BF16:
          *(uint16_t *)p = tpu_f32_to_bf16(
              beta != 0. ? (float)beta * tpu_bf16_to_f32(*(uint16_t *)p) : 0.f);
          break;
        default:
          *(uint16_t *)p = tpu_f32_to_f16(
              beta != 0. ? (float)beta * tpu_f16_to_f32(*(uint16_t *)p) : 0.f);
          break;
        }
      }
}

/* ---- public entry point ---------------------------------------------- */

/* Batched strided GEMM with TPU numerics (see tpu_mxu.h). */
int tpumxu_gemm(int dtype, int precision, int64_t batch, int64_t m, int64_t n,
                int64_t k, double alpha, const void *a, int64_t sab,
                int64_t sam, int64_t sak, const void *b, int64_t sbb,
                int64_t sbk, int64_t sbn, double beta, void *c, int64_t sbc,
                int64_t scm, int64_t scn) {
  return tpumxu_gemm_ex(dtype, precision, batch, m, n, k, alpha, a, sab, sam,
                        sak, b, sbb, sbk, sbn, beta, c, sbc, scm, scn, NULL,
                        NULL);
}

/* GEMM with an optional per-block epilogue callback (see tpu_mxu.h). */
int tpumxu_gemm_ex(int dtype, int precision, int64_t batch, int64_t m,
                   int64_t n, int64_t k, double alpha, const void *a,
                   int64_t sab, int64_t sam, int64_t sak, const void *b,
                   int64_t sbb, int64_t sbk, int64_t sbn, double beta, void *c,
                   int64_t sbc, int64_t scm, int64_t scn,
                   tpumxu_epilogue_fn epi, void *epi_ctx) {
  return tpumxu_gemm_io(dtype, dtype, precision, batch, m, n, k, alpha, a, sab,
                        sam, sak, b, sbb, sbk, sbn, beta, c, sbc, scm, scn, epi,
                        epi_ctx);
}

int tpumxu_bf16_native(void) { return tpumxu__dnnl_bf16_native(); }

/* GEMM with operand and result dtypes of their own (see tpu_mxu.h). */
int tpumxu_gemm_io(int dtype, int c_dtype, int precision, int64_t batch,
                   int64_t m, int64_t n, int64_t k, double alpha, const void *a,
                   int64_t sab, int64_t sam, int64_t sak, const void *b,
                   int64_t sbb, int64_t sbk, int64_t sbn, double beta, void *c,
                   int64_t sbc, int64_t scm, int64_t scn,
                   tpumxu_epilogue_fn epi, void *epi_ctx) {
  if (dtype != TPU_F32 && dtype != TPU_BF16 && dtype != TPU_F16 &&
      dtype != TPU_F64)
    return tpu_error(TPU_E_TYPE, "tpumxu_gemm: unsupported dtype %s",
                     tpu_dtype_name(dtype));
  if (c_dtype != dtype && !(dtype == TPU_BF16 && c_dtype == TPU_F32))
    return tpu_error(TPU_E_TYPE, "tpumxu_gemm: %s operands with a %s result are not supported",
                     tpu_dtype_name(dtype), tpu_dtype_name(c_dtype));
  if (dtype != c_dtype) precision = TPU_PREC_DEFAULT;
  if (precision < TPU_PREC_DEFAULT || precision > TPU_PREC_FP32)
    return tpu_error(TPU_E_INVALID, "tpumxu_gemm: bad precision %d", precision);
  if (batch < 0 || m < 0 || n < 0 || k < 0)
    return tpu_error(TPU_E_INVALID,
                     "tpumxu_gemm: negative size (batch=%lld m=%lld n=%lld k=%lld)",
                     (long long)batch, (long long)m, (long long)n, (long long)k);
  if (batch == 0 || m == 0 || n == 0) return TPU_OK;
  if (!c || (k > 0 && (!a || !b)))
    return tpu_error(TPU_E_INVALID, "tpumxu_gemm: NULL operand");
  if (k == 0) {
    scale_c(c_dtype, batch, m, n, beta, c, sbc, scm, scn);
    if (epi)
      for (int64_t bi = 0; bi < batch; bi++) epi(epi_ctx, bi, 0, m, 0, n);
    return TPU_OK;
  }
  if (dtype == TPU_F64) {
    f64_job J = {m, n, k, (m + F64_ROWS - 1) / F64_ROWS, alpha, beta, a, b, c,
                 sab, sam, sak, sbb, sbk, sbn, sbc, scm, scn, 0, epi, epi_ctx};
    int64_t grain = (int64_t)(1 + (1 << 16) / ((double)F64_ROWS * n * k + 1));
    tpurt_parallel_for(batch * J.mb, grain, f64_fn, &J);
    return J.oom ? tpu_error(TPU_E_OOM, "tpumxu_gemm: out of host memory") : TPU_OK;
  }
  tpumxu__problem p = {dtype, c_dtype, precision, batch, m, n, k,
                      (float)alpha, (float)beta, a, b, c, sab, sam, sak, sbb,
                      sbk, sbn, sbc, scm, scn, epi, epi_ctx};
  return tpumxu__run(&p);
}

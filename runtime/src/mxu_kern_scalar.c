/* mxu_kern_scalar.c - portable micro-kernel (F32 panels) and the generic
 * epilogue used by every path for layouts the SIMD epilogues skip. */
#include <math.h>
#include <string.h>

#include "mxu_internal.h"

#define MR 4
#define NR 8

static void kern_scalar(int np, const void *const *ap, const void *const *bp,
                        int64_t kc, float *acc, int load) {
  float c[MR * NR];
  if (load)
    memcpy(c, acc, sizeof c);
  else
    memset(c, 0, sizeof c);
  for (int p = 0; p < np; p++) {
    const float *a = ap[p], *b = bp[p];
    for (int64_t l = 0; l < kc; l++, a += MR, b += NR)
      for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++) c[i * NR + j] += a[i] * b[j];
  }
  memcpy(acc, c, sizeof c);
}

static float ld_c(int dtype, const char *p) {
  switch (dtype) {
  case TPU_F32: return *(const float *)p;
  case TPU_BF16: return tpu_bf16_to_f32(*(const uint16_t *)p);
  default: return tpu_f16_to_f32(*(const uint16_t *)p);
  }
}

/* Portable epilogue: any strides, any C dtype (see mxu_internal.h). */
void tpumxu_epi_generic(const float *h, const float *s, int ld, int mr,
                        int nr, float alpha, float beta, int dtype, char *c,
                        int64_t scm, int64_t scn) {
  int64_t es = dtype == TPU_F32 ? 4 : 2;
  for (int i = 0; i < mr; i++)
    for (int j = 0; j < nr; j++) {
      float v = h[i * ld + j];
      if (s) {
        float t = s[i * ld + j];
        v = (isfinite(t) ? t : 0.f) + v;
      }
      v *= alpha;
      char *cp = c + (i * scm + j * scn) * es;
      if (beta != 0.f) v += beta * ld_c(dtype, cp);
      if (dtype == TPU_F32)
        *(float *)cp = v;
      else if (dtype == TPU_BF16)
        *(uint16_t *)cp = tpu_f32_to_bf16(v);
      else
        *(uint16_t *)cp = tpu_f32_to_f16(v);
    }
}

const tpumxu_kernel tpumxu_kern_scalar_f32 = {MR, NR, TPUMXU_FMT_F32,
                                              kern_scalar, tpumxu_epi_generic};

/* mxu_kern_avx512.c - AVX-512F micro-kernel over F32 panels (14 x 32
 * tile) and the AVX-512 epilogue shared with the AVX512-BF16 path. */
#include <immintrin.h>

#include "mxu_internal.h"

#define MR 14
#define NV 2
#define NR (16 * NV)

#define T512 __attribute__((target("avx512f,avx512bw,avx512vl")))

T512 static void kern_avx512(int np, const void *const *ap,
                             const void *const *bp, int64_t kc, float *acc,
                             int load) {
  __m512 c[MR][NV];
#pragma GCC unroll 16
  for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++)
      c[i][v] = load ? _mm512_load_ps(acc + i * NR + v * 16) : _mm512_setzero_ps();
  for (int p = 0; p < np; p++) {
    const float *a = ap[p], *b = bp[p];
    for (int64_t l = 0; l < kc; l++, a += MR, b += NR) {
      __m512 bv[NV];
#pragma GCC unroll 4
      for (int v = 0; v < NV; v++) bv[v] = _mm512_load_ps(b + v * 16);
#pragma GCC unroll 16
      for (int i = 0; i < MR; i++) {
        __m512 av = _mm512_set1_ps(a[i]);
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) c[i][v] = _mm512_fmadd_ps(av, bv[v], c[i][v]);
      }
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++) _mm512_store_ps(acc + i * NR + v * 16, c[i][v]);
}

/* f32 -> bf16 bits (RNE, quiet NaN) of 16 lanes, in the low halves. */
T512 static __m256i cvt_bf16(__m512 v) {
  __m512i u = _mm512_castps_si512(v);
  __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb);
  __m512i abs = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
  __mmask16 nan = _mm512_cmpgt_epu32_mask(abs, _mm512_set1_epi32(0x7f800000));
  r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(u, _mm512_set1_epi32(0x00400000)));
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16));
}

/* AVX-512 epilogue: contiguous rows (scn == 1) of any dtype; other layouts
 * go to the generic one. */
T512 void tpumxu_epi_avx512(const float *h, const float *s, int ld, int mr,
                            int nr, float alpha, float beta, int dtype,
                            char *c, int64_t scm, int64_t scn) {
  if (scn != 1) {
    tpumxu_epi_generic(h, s, ld, mr, nr, alpha, beta, dtype, c, scm, scn);
    return;
  }
  const __m512i expm = _mm512_set1_epi32(0x7f800000);
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
  int64_t es = dtype == TPU_F32 ? 4 : 2;
  for (int i = 0; i < mr; i++) {
    char *crow = c + i * scm * es;
    for (int j = 0; j < nr; j += 16) {
      __mmask16 mk = nr - j >= 16 ? 0xffff : (__mmask16)((1u << (nr - j)) - 1);
      __m512 v = _mm512_load_ps(h + i * ld + j);
      if (s) {
        __m512 t = _mm512_load_ps(s + i * ld + j);
        __mmask16 fin = _mm512_cmpneq_epi32_mask(
            _mm512_and_si512(_mm512_castps_si512(t), expm), expm);
        v = _mm512_add_ps(_mm512_maskz_mov_ps(fin, t), v);
      }
      if (alpha != 1.f) v = _mm512_mul_ps(v, va);
      if (dtype == TPU_F32) {
        float *cp = (float *)crow + j;
        if (beta != 0.f) v = _mm512_add_ps(v, _mm512_mul_ps(vb, _mm512_maskz_loadu_ps(mk, cp)));
        _mm512_mask_storeu_ps(cp, mk, v);
      } else {
        uint16_t *cp = (uint16_t *)crow + j;
        if (beta != 0.f) {
          __m256i old = _mm256_maskz_loadu_epi16(mk, cp);
          __m512 o = dtype == TPU_BF16
                         ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(old), 16))
                         : _mm512_cvtph_ps(old);
          v = _mm512_add_ps(v, _mm512_mul_ps(vb, o));
        }
        __m256i r = dtype == TPU_BF16
                        ? cvt_bf16(v)
                        : _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm256_mask_storeu_epi16(cp, mk, r);
      }
    }
  }
}

const tpumxu_kernel tpumxu_kern_avx512_f32 = {MR, NR, TPUMXU_FMT_F32,
                                              kern_avx512, tpumxu_epi_avx512};

/* mxu_kern_avx2.c - AVX2+FMA micro-kernel over F32 panels (6 x 16 tile). */
#include <immintrin.h>

#include "mxu_internal.h"

#define MR 6
#define NV 2
#define NR (8 * NV)

__attribute__((target("avx2,fma"))) static void
kern_avx2(int np, const void *const *ap, const void *const *bp, int64_t kc,
          float *acc, int load) {
  __m256 c[MR][NV];
#pragma GCC unroll 8
  for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++)
      c[i][v] = load ? _mm256_load_ps(acc + i * NR + v * 8) : _mm256_setzero_ps();
  for (int p = 0; p < np; p++) {
    const float *a = ap[p], *b = bp[p];
    for (int64_t l = 0; l < kc; l++, a += MR, b += NR) {
      __m256 bv[NV];
#pragma GCC unroll 4
      for (int v = 0; v < NV; v++) bv[v] = _mm256_load_ps(b + v * 8);
#pragma GCC unroll 8
      for (int i = 0; i < MR; i++) {
        __m256 av = _mm256_broadcast_ss(a + i);
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) c[i][v] = _mm256_fmadd_ps(av, bv[v], c[i][v]);
      }
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++) _mm256_store_ps(acc + i * NR + v * 8, c[i][v]);
}

const tpumxu_kernel tpumxu_kern_avx2_f32 = {MR, NR, TPUMXU_FMT_F32, kern_avx2,
                                            tpumxu_epi_generic};

/* mxu_kern_avx512bf16.c - AVX512-BF16 micro-kernel over BF16P panels
 * (vdpbf16ps: 2 exact bf16 products per f32 lane, f32 accumulation - the
 * MXU's numerics), 14 x 32 tile. */
#include <immintrin.h>

#include "mxu_internal.h"

#define MR 14
#define NV 2
#define NR (16 * NV)

__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) static void
kern_bf16(int np, const void *const *ap, const void *const *bp, int64_t kc,
          float *acc, int load) {
  __m512 c[MR][NV];
#pragma GCC unroll 16
  for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++)
      c[i][v] = load ? _mm512_load_ps(acc + i * NR + v * 16) : _mm512_setzero_ps();
  int64_t kp = kc / 2;
  for (int p = 0; p < np; p++) {
    const int32_t *a = ap[p];
    const int32_t *b = bp[p];
    for (int64_t l = 0; l < kp; l++, a += MR, b += NR) {
      __m512bh bv[NV];
#pragma GCC unroll 4
      for (int v = 0; v < NV; v++) bv[v] = (__m512bh)_mm512_load_si512(b + v * 16);
#pragma GCC unroll 16
      for (int i = 0; i < MR; i++) {
        __m512bh av = (__m512bh)_mm512_set1_epi32(a[i]);
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) c[i][v] = _mm512_dpbf16_ps(c[i][v], av, bv[v]);
      }
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++) _mm512_store_ps(acc + i * NR + v * 16, c[i][v]);
}

const tpumxu_kernel tpumxu_kern_avx512bf16_bf16p = {
    MR, NR, TPUMXU_FMT_BF16P, kern_bf16, tpumxu_epi_avx512};

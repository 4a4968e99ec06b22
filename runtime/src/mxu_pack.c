/* mxu_pack.c - packing of A/B panels for the micro-kernels, doing the
 * bf16 split (hi, r1, r2) while packing. A portable path handles any
 * strides and dtypes; AVX-512 paths handle panels whose rows or k-steps
 * are contiguous (row-major and transposed operands). */
#include <immintrin.h>
#include <string.h>

#include "mxu_internal.h"

static inline float ld_src(int dtype, const char *base, int64_t off) {
  switch (dtype) {
  case TPU_F32: return ((const float *)base)[off];
  case TPU_BF16: return tpu_bf16_to_f32(((const uint16_t *)base)[off]);
  default: return tpu_f16_to_f32(((const uint16_t *)base)[off]);
  }
}

/* Store the split parts of x at logical position (l, r) of each plane. */
static inline void put_split(float x, int fmt, int nplanes, char *dst,
                             int64_t pb, int R, int64_t l, int r) {
  if (nplanes == 0) {
    ((float *)dst)[l * R + r] = x;
    return;
  }
  uint32_t part[3];
  float rem = x;
  for (int p = 0; p < nplanes; p++) {
    part[p] = tpumxu_rne_bits(tpumxu_f2u(rem));
    rem = rem - tpumxu_u2f(part[p]);
  }
  for (int p = 0; p < nplanes; p++) {
    char *d = dst + p * pb;
    if (fmt == TPUMXU_FMT_F32)
      ((uint32_t *)d)[l * R + r] = part[p];
    else
      ((uint16_t *)d)[((l >> 1) * R + r) * 2 + (l & 1)] = (uint16_t)(part[p] >> 16);
  }
}

static void pack_generic(const tpumxu_src *s, int64_t r0, int nr, int R,
                         int64_t k0, int64_t kv, int64_t kc, int fmt,
                         int nplanes, char *dst, int64_t pb) {
  for (int r = 0; r < R; r++) {
    const char *row = s->base;
    int64_t off = (r0 + r) * s->rs + k0 * s->ks;
    for (int64_t l = 0; l < kc; l++, off += s->ks) {
      float x = (r < nr && l < kv) ? ld_src(s->dtype, row, off) : 0.f;
      put_split(x, fmt, nplanes, dst, pb, R, l, r);
    }
  }
}

/* ---- AVX-512 --------------------------------------------------------- */

#define T512 __attribute__((target("avx512f,avx512bw,avx512vl")))

/* Load up to 16 elements (mask mk) at p with element stride 1. */
T512 static inline __m512 ld16(int dtype, const char *p, __mmask16 mk) {
  if (dtype == TPU_F32) return _mm512_maskz_loadu_ps(mk, p);
  __m256i h = _mm256_maskz_loadu_epi16(mk, p);
  if (dtype == TPU_BF16)
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  return _mm512_cvtph_ps(h);
}

/* RNE to bf16, result as f32 bits with the low half clear (quiet NaN). */
T512 static inline __m512i rne16(__m512 v) {
  __m512i u = _mm512_castps_si512(v);
  __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb);
  __m512i abs = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
  __mmask16 nan = _mm512_cmpgt_epu32_mask(abs, _mm512_set1_epi32(0x7f800000));
  r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(u, _mm512_set1_epi32(0x00400000)));
  return _mm512_and_si512(r, _mm512_set1_epi32((int)0xffff0000u));
}

/* Split v into nplanes parts (0: raw value). */
T512 static inline void split16(__m512 v, int nplanes, __m512i out[3]) {
  if (nplanes == 0) {
    out[0] = _mm512_castps_si512(v);
    return;
  }
  for (int p = 0; p < nplanes; p++) {
    out[p] = rne16(v);
    v = _mm512_sub_ps(v, _mm512_castsi512_ps(out[p]));
  }
}

static inline __mmask16 lanes(int64_t n) {
  return n >= 16 ? (__mmask16)0xffff : n <= 0 ? 0 : (__mmask16)((1u << n) - 1);
}

#define PF_AHEAD 8

/* Panel rows contiguous in memory (rs == 1). */
T512 static void pack_rows_contig(const tpumxu_src *s, int64_t r0, int nr,
                                  int R, int64_t k0, int64_t kv, int64_t kc,
                                  int fmt, int nplanes, char *dst,
                                  int64_t pb) {
  int np = nplanes ? nplanes : 1;
  int64_t es = s->dtype == TPU_F32 ? 4 : 2;
  int nvec = (R + 15) / 16;
  /* every k-step is a new cache line (a transposed read): prefetch
   * PF_AHEAD k-steps ahead so the loads are not latency-bound */
  const int64_t kstride = s->ks * es, row_bytes = (int64_t)nr * es;
  if (fmt == TPUMXU_FMT_F32) {
    for (int64_t l = 0; l < kc; l++) {
      const char *src = s->base + (r0 + (k0 + l) * s->ks) * es;
      if (l + PF_AHEAD < kv)
        for (int64_t b = 0; b < row_bytes; b += 64)
          _mm_prefetch(src + PF_AHEAD * kstride + b, _MM_HINT_T0);
      for (int v = 0; v < nvec; v++) {
        __mmask16 ml = l < kv ? lanes(nr - v * 16) : 0;
        __m512i part[3];
        split16(ld16(s->dtype, src + v * 16 * es, ml), nplanes, part);
        for (int p = 0; p < np; p++)
          _mm512_mask_storeu_epi32(dst + p * pb + (l * R + v * 16) * 4,
                                   lanes(R - v * 16), part[p]);
      }
    }
    return;
  }
  for (int64_t l = 0; l < kc; l += 2) {
    const char *s0 = s->base + (r0 + (k0 + l) * s->ks) * es;
    const char *s1 = s0 + kstride;
    if (l + PF_AHEAD + 1 < kv)
      for (int64_t b = 0; b < row_bytes; b += 64) {
        _mm_prefetch(s0 + PF_AHEAD * kstride + b, _MM_HINT_T0);
        _mm_prefetch(s1 + PF_AHEAD * kstride + b, _MM_HINT_T0);
      }
    for (int v = 0; v < nvec; v++) {
      __m512i pe[3], po[3];
      split16(ld16(s->dtype, s0 + v * 16 * es, l < kv ? lanes(nr - v * 16) : 0),
              nplanes, pe);
      split16(ld16(s->dtype, s1 + v * 16 * es,
                   l + 1 < kv ? lanes(nr - v * 16) : 0),
              nplanes, po);
      for (int p = 0; p < np; p++) {
        __m512i w = _mm512_or_si512(po[p], _mm512_srli_epi32(pe[p], 16));
        _mm512_mask_storeu_epi32(dst + p * pb + ((l >> 1) * R + v * 16) * 4,
                                 lanes(R - v * 16), w);
      }
    }
  }
}

/* In-register transpose of a 16 x 16 block of dwords: on return r[j]
 * holds column j (lane i = old r[i] lane j). */
T512 static inline void transpose16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  __m512i u[16]; /* u[4g + c]: lane L = rows 4g..4g+3 of column 4L + c */
  for (int g = 0; g < 4; g++) {
    u[4 * g + 0] = _mm512_unpacklo_epi64(t[4 * g], t[4 * g + 2]);
    u[4 * g + 1] = _mm512_unpackhi_epi64(t[4 * g], t[4 * g + 2]);
    u[4 * g + 2] = _mm512_unpacklo_epi64(t[4 * g + 1], t[4 * g + 3]);
    u[4 * g + 3] = _mm512_unpackhi_epi64(t[4 * g + 1], t[4 * g + 3]);
  }
  for (int c = 0; c < 4; c++) { /* 4 x 4 transpose of 128-bit lanes */
    __m512i v0 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x44);
    __m512i v1 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xee);
    __m512i v2 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x44);
    __m512i v3 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xee);
    r[c] = _mm512_shuffle_i32x4(v0, v2, 0x88);
    r[4 + c] = _mm512_shuffle_i32x4(v0, v2, 0xdd);
    r[8 + c] = _mm512_shuffle_i32x4(v1, v3, 0x88);
    r[12 + c] = _mm512_shuffle_i32x4(v1, v3, 0xdd);
  }
}

/* Panel k-steps contiguous in memory (ks == 1): each row yields 16 packed
 * words per chunk (16 k-steps, or 32 as bf16 pairs); groups of 16 rows are
 * transposed in registers and stored as k-step rows of the panel. */
T512 static void pack_k_contig(const tpumxu_src *s, int64_t r0, int nr, int R,
                               int64_t k0, int64_t kv, int64_t kc, int fmt,
                               int nplanes, char *dst, int64_t pb) {
  int np = nplanes ? nplanes : 1;
  int64_t es = s->dtype == TPU_F32 ? 4 : 2;
  static const uint16_t odd_idx[32] = {1,  3,  5,  7,  9,  11, 13, 15,
                                       17, 19, 21, 23, 25, 27, 29, 31,
                                       33, 35, 37, 39, 41, 43, 45, 47,
                                       49, 51, 53, 55, 57, 59, 61, 63};
  const __m512i idx = _mm512_loadu_si512(odd_idx);
  const int pairs = fmt == TPUMXU_FMT_BF16P;
  const int64_t chunk = pairs ? 32 : 16; /* k-steps per chunk */
  for (int g = 0; g < R; g += 16) {
    int gr = R - g < 16 ? R - g : 16; /* panel rows in this group */
    __mmask16 smask = lanes(gr);
    for (int64_t l = 0; l < kc; l += chunk) {
      __m512i w[3][16];
      for (int i = 0; i < 16; i++) {
        int r = g + i;
        if (r >= nr || i >= gr) {
          for (int p = 0; p < np; p++) w[p][i] = _mm512_setzero_si512();
          continue;
        }
        const char *src = s->base + ((r0 + r) * s->rs + k0 + l) * es;
        __m512i pa[3];
        split16(ld16(s->dtype, src, lanes(kv - l)), nplanes, pa);
        if (!pairs) {
          for (int p = 0; p < np; p++) w[p][i] = pa[p];
          continue;
        }
        __m512i pb2[3];
        split16(ld16(s->dtype, src + 16 * es, lanes(kv - l - 16)), nplanes, pb2);
        for (int p = 0; p < np; p++)
          w[p][i] = _mm512_permutex2var_epi16(pa[p], idx, pb2[p]);
      }
      int64_t nl = (kc - l < chunk ? kc - l : chunk) >> pairs; /* words */
      for (int p = 0; p < np; p++) {
        transpose16(w[p]);
        uint32_t *d = (uint32_t *)(dst + p * pb) + (l >> pairs) * R + g;
        for (int64_t j = 0; j < nl; j++) _mm512_mask_storeu_epi32(d + j * R, smask, w[p][j]);
      }
    }
  }
}

/* Pack one panel (see mxu_internal.h). */
void tpumxu_pack_panel(int isa, const tpumxu_src *s, int64_t r0, int nr,
                       int R, int64_t k0, int64_t kv, int64_t kc, int fmt,
                       int nplanes, void *dst, int64_t plane_bytes) {
  if (isa >= TPUMXU_ISA_AVX512) {
    if (s->rs == 1 && nr > 1) {
      pack_rows_contig(s, r0, nr, R, k0, kv, kc, fmt, nplanes, dst, plane_bytes);
      return;
    }
    if (s->ks == 1) {
      pack_k_contig(s, r0, nr, R, k0, kv, kc, fmt, nplanes, dst, plane_bytes);
      return;
    }
  }
  pack_generic(s, r0, nr, R, k0, kv, kc, fmt, nplanes, dst, plane_bytes);
}

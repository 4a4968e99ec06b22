/* mxu_pack.c - packing of A/B panels for the micro-kernels, doing the
 * bf16 split (hi, r1, r2) while packing. A portable path handles any
 * strides and dtypes; AVX-512 paths handle panels whose rows or k-steps
 * are contiguous (row-major and transposed operands).
 *
 * Every path produces the same bits as the portable one. The single-plane
 * f32 -> bf16 case (DEFAULT precision) uses vcvtne2ps2bf16 (AVX512_BF16):
 * its RNE and its NaN quieting (bf16 = (x >> 16) | 0x40) equal
 * tpumxu_rne_bits, but it treats denormal inputs as zero, so any group of
 * lanes holding a denormal takes the integer rounding instead.
 *
 * Panels whose rows are contiguous (rs == 1: each k-step of a panel is a
 * short strided read) are packed several at a time (tpumxu_pack_panels):
 * a few k-steps at a time across all panels, so each source row is read
 * once, front to back, instead of once per panel with a page hop per
 * k-step. */
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

/* ---- AVX512_BF16 single-plane conversion ----------------------------- */

#define T512BF __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

/* Lanes of v holding a denormal (exponent 0, mantissa != 0). */
T512BF static inline __mmask16 denorm16(__m512 v) {
  return _mm512_fpclass_ps_mask(v, 0x20);
}

/* 32 bf16 (RNE, quiet NaN, as tpumxu_rne_bits) of lo (16-bit elements
 * 0..15) and hi (16..31). */
T512BF static inline __m512i cvt32(__m512 lo, __m512 hi) {
  if (__builtin_expect((denorm16(lo) | denorm16(hi)) != 0, 0)) {
    __m512i l = _mm512_srli_epi32(rne16(lo), 16), h = _mm512_srli_epi32(rne16(hi), 16);
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi32_epi16(l)),
                              _mm512_cvtepi32_epi16(h), 1);
  }
  return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
}

static inline __mmask16 lanes(int64_t n) {
  return n >= 16 ? (__mmask16)0xffff : n <= 0 ? 0 : (__mmask16)((1u << n) - 1);
}

/* bf16 source values as packed words: NaNs quieted (| 0x0040), as the
 * split of their f32 widening gives; everything else is exact. */
T512 static inline __m512i quiet16(__m512i w) {
  __mmask32 nan = _mm512_cmpgt_epu16_mask(_mm512_and_si512(w, _mm512_set1_epi16(0x7fff)),
                                          _mm512_set1_epi16(0x7f80));
  return _mm512_mask_blend_epi16(nan, w, _mm512_or_si512(w, _mm512_set1_epi16(0x0040)));
}

#define PF_AHEAD 8

/* k-steps per sweep over the panels in pack_rows_bf16_1: 8 source rows are
 * read side by side, and each panel gets 4 k-pairs (one contiguous run of
 * 4 x R words) per visit. Measured (2048 x 2048 f32, out of cache): 0.25-0.36
 * ns/element against 0.43-0.55 with one k-pair per visit (the stores then
 * go to every panel in turn) and 0.5+ with 16 or 32 k-steps (too many
 * source streams). */
#define ROWS_KSTEPS 8

/* BF16P, f32 or bf16 source, one plane, rows contiguous (rs == 1): panels
 * [0, npan) of R rows starting at source row r0 (rows >= r0 + nrows are
 * zero), swept ROWS_KSTEPS k-steps at a time across all panels so each
 * source row is read front to back once. */
T512BF static void pack_rows_bf16_1(const tpumxu_src *s, int64_t r0,
                                    int64_t nrows, int R, int64_t npan,
                                    int64_t k0, int64_t kv, int64_t kc,
                                    char *dst, int64_t panel_bytes) {
  static const uint16_t ilv[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,
                                   21, 6, 22, 7, 23, 8,  24, 9,  25, 10, 26,
                                   11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i idx = _mm512_loadu_si512(ilv);
  const int bf = s->dtype == TPU_BF16; /* else f32 */
  const int64_t es = bf ? 2 : 4, kstride = s->ks * es;
  const int nvec = (R + 15) / 16;
  for (int64_t lb = 0; lb < kc; lb += ROWS_KSTEPS) {
    int64_t le = lb + ROWS_KSTEPS < kc ? lb + ROWS_KSTEPS : kc;
    for (int64_t p = 0; p < npan; p++) {
      int64_t pr = p * R; /* first row of the panel, relative to r0 */
      char *dp = dst + p * panel_bytes;
      /* the next sweep's rows: short rows give the hardware prefetcher
       * too little to go on */
      const char *pf = s->base + (r0 + pr + (k0 + le) * s->ks) * es;
      for (int64_t j = le; j < le + ROWS_KSTEPS && j < kv; j++, pf += kstride)
        for (int v = 0; v < nvec; v++) _mm_prefetch(pf + v * 64, _MM_HINT_T0);
      for (int64_t l = lb; l < le; l += 2) {
        const char *s0 = s->base + (r0 + (k0 + l) * s->ks) * es;
        const char *s1 = s0 + kstride;
        int e_ok = l < kv, o_ok = l + 1 < kv;
        char *d = dp + (l >> 1) * R * 4;
        for (int v = 0; v < nvec; v++) {
          int64_t row = pr + v * 16;
          __mmask16 ml = lanes(nrows - row);
          __m512i eo; /* 16-bit elements: k even rows 0..15, then k odd */
          if (bf)
            eo = quiet16(_mm512_inserti64x4(
                _mm512_castsi256_si512(_mm256_maskz_loadu_epi16(e_ok ? ml : 0, s0 + row * 2)),
                _mm256_maskz_loadu_epi16(o_ok ? ml : 0, s1 + row * 2), 1));
          else
            eo = cvt32(_mm512_maskz_loadu_ps(e_ok ? ml : 0, s0 + row * 4),
                       _mm512_maskz_loadu_ps(o_ok ? ml : 0, s1 + row * 4));
          __m512i w = _mm512_permutexvar_epi16(idx, eo);
          _mm512_mask_storeu_epi32(d + v * 64, lanes(R - v * 16), w);
        }
      }
    }
  }
}

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

/* BF16P, f32 or bf16 source, one plane, k-steps contiguous (ks == 1): 32
 * k-steps of a row make 16 pair words (f32: one vcvtne2ps2bf16; bf16: one
 * load); groups of 16 rows are transposed in registers. */
T512BF static void pack_k_bf16_1(const tpumxu_src *s, int64_t r0, int nr,
                                 int R, int64_t k0, int64_t kv, int64_t kc,
                                 char *dst) {
  const int bf = s->dtype == TPU_BF16; /* else f32 */
  const int64_t es = bf ? 2 : 4;
  for (int g = 0; g < R; g += 16) {
    int gr = R - g < 16 ? R - g : 16; /* panel rows in this group */
    int live = nr - g < gr ? nr - g : gr; /* rows with data */
    __mmask16 smask = lanes(gr);
    for (int64_t l = 0; l < kc; l += 32) {
      __m512i w[16];
      __mmask16 m0 = lanes(kv - l), m1 = lanes(kv - l - 16);
      __mmask32 m32 = (__mmask32)m0 | ((__mmask32)m1 << 16);
      const char *src = s->base + ((r0 + g) * s->rs + k0 + l) * es;
      for (int i = 0; i < 16; i++, src += s->rs * es) {
        if (i >= live)
          w[i] = _mm512_setzero_si512();
        else if (bf)
          w[i] = quiet16(_mm512_maskz_loadu_epi16(m32, src));
        else
          w[i] = cvt32(_mm512_maskz_loadu_ps(m0, src),
                       _mm512_maskz_loadu_ps(m1, (const float *)src + 16));
      }
      transpose16(w);
      int64_t nl = (kc - l < 32 ? kc - l : 32) >> 1; /* words */
      uint32_t *d = (uint32_t *)dst + (l >> 1) * R + g;
      for (int64_t j = 0; j < nl; j++) _mm512_mask_storeu_epi32(d + j * R, smask, w[j]);
    }
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

/* single plane f32 (vcvtne2ps2bf16) or bf16 -> BF16P */
static int fast_bf16_1(int isa, const tpumxu_src *s, int fmt, int nplanes) {
  return isa >= TPUMXU_ISA_AVX512BF16 && fmt == TPUMXU_FMT_BF16P &&
         nplanes == 1 && (s->dtype == TPU_F32 || s->dtype == TPU_BF16);
}

/* Pack one panel (see mxu_internal.h). */
void tpumxu_pack_panel(int isa, const tpumxu_src *s, int64_t r0, int nr,
                       int R, int64_t k0, int64_t kv, int64_t kc, int fmt,
                       int nplanes, void *dst, int64_t plane_bytes) {
  if (isa >= TPUMXU_ISA_AVX512) {
    if (s->rs == 1 && nr > 1) {
      if (fast_bf16_1(isa, s, fmt, nplanes))
        pack_rows_bf16_1(s, r0, nr, R, 1, k0, kv, kc, dst, 0);
      else
        pack_rows_contig(s, r0, nr, R, k0, kv, kc, fmt, nplanes, dst, plane_bytes);
      return;
    }
    if (s->ks == 1) {
      if (fast_bf16_1(isa, s, fmt, nplanes))
        pack_k_bf16_1(s, r0, nr, R, k0, kv, kc, dst);
      else
        pack_k_contig(s, r0, nr, R, k0, kv, kc, fmt, nplanes, dst, plane_bytes);
      return;
    }
  }
  pack_generic(s, r0, nr, R, k0, kv, kc, fmt, nplanes, dst, plane_bytes);
}

/* Pack consecutive panels (see mxu_internal.h). */
void tpumxu_pack_panels(int isa, const tpumxu_src *s, int64_t r0,
                        int64_t nrows, int R, int64_t npan, int64_t k0,
                        int64_t kv, int64_t kc, int fmt, int nplanes,
                        void *dst, int64_t panel_bytes, int64_t plane_bytes) {
  if (npan > 1 && nrows > 1 && s->rs == 1 && fast_bf16_1(isa, s, fmt, nplanes)) {
    pack_rows_bf16_1(s, r0, nrows, R, npan, k0, kv, kc, dst, panel_bytes);
    return;
  }
  for (int64_t p = 0; p < npan; p++) {
    int64_t rem = nrows - p * R;
    int nr = (int)(rem < 0 ? 0 : rem < R ? rem : R);
    tpumxu_pack_panel(isa, s, r0 + p * R, nr, R, k0, kv, kc, fmt, nplanes,
                      (char *)dst + p * panel_bytes, plane_bytes);
  }
}

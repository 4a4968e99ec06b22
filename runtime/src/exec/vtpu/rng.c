/* exec/vtpu/rng.c - counter-based random numbers (Philox4x32-10).
 *
 * Element i (row-major) of a draw uses the block at the 128-bit counter
 * (offset << 64) | i (word 0 least significant) under key = seed (low word
 * first): each draw has its own 2^64-block stream, and the generator's
 * offset counts draws (as TorchTPU's does), not elements:
 *   UNIFORM  f32: (w0 >> 8) * 2^-24; bf16: (w0 >> 24) * 2^-8;
 *            f16: (w0 >> 21) * 2^-11 (exact in the dtype, so always < 1);
 *            f64: ((w0 | w1 << 32) >> 11) * 2^-53
 *   NORMAL   Box-Muller: u1 in (0, 1], u2 in [0, 1) from words 0 and 1 (f32
 *            and narrower, 24 bits each) or from words 0-1 and 2-3 (f64, 53
 *            bits each); z = sqrt(-2 ln u1) cos(pi 2u2), computed in double
 *            (SLEEF's log and cospi, 4 or 2 lanes at a time)
 *   BITS     (uint64)(w0 | w1 << 32), wrapped to the integer dtype.
 * Each element depends only on (seed, offset, i): threading never changes
 * the result.
 */
#include <immintrin.h>

#include "exec/vtpu/internal.h"

/* One block, scalar: the definition (the C tests check the draws against
 * it; philox8 below computes 8 at a time, this the rest). */
void tpux__philox(const uint32_t ctr[4], uint64_t seed, uint32_t out[4]) {
  uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
  uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
  for (int r = 0; r < 10; r++) {
    if (r) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    uint64_t p0 = (uint64_t)0xD2511F53u * c0;
    uint64_t p1 = (uint64_t)0xCD9E8D57u * c2;
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
    uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
    c1 = (uint32_t)p1;
    c3 = (uint32_t)p0;
    c0 = n0;
    c2 = n2;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

typedef struct rng_job {
  char *out;
  int dt, kind;
  uint64_t seed, offset;
  int64_t total;
} rng_job;

/* tpux__philox of the counters (lo + k, hi) for k in [k0, n), word q into
 * w[q][k]. */
static void philox_lanes(uint64_t lo, uint64_t hi, uint64_t seed, int64_t k0, int64_t n,
                         uint32_t w[4][XK_TILE]) {
  for (int64_t k = k0; k < n; k++) {
    uint64_t c = lo + (uint64_t)k;
    uint32_t ctr[4] = {(uint32_t)c, (uint32_t)(c >> 32), (uint32_t)hi, (uint32_t)(hi >> 32)}, out[4];
    tpux__philox(ctr, seed, out);
    for (int q = 0; q < 4; q++) w[q][k] = out[q];
  }
}

/* The same, 8 counters per AVX2 step (the products of even and odd lanes
 * by two vpmuludq, high and low halves put back by blends); returns how
 * many counters it did (a multiple of 8). */
__attribute__((target("avx2"))) static int64_t philox8(uint64_t lo, uint64_t hi, uint64_t seed,
                                                       int64_t n, uint32_t w[4][XK_TILE]) {
  const __m256i m0 = _mm256_set1_epi64x(0xD2511F53), m1 = _mm256_set1_epi64x(0xCD9E8D57);
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), sign = _mm256_set1_epi32(INT32_MIN);
  const __m256i l0 = _mm256_set1_epi32((int)(uint32_t)lo), l1 = _mm256_set1_epi32((int)(uint32_t)(lo >> 32));
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    __m256i c0 = _mm256_add_epi32(l0, _mm256_add_epi32(lane, _mm256_set1_epi32((int)k)));
    /* carry: c0 < l0 (unsigned), as a signed compare of the sign-flipped words */
    __m256i cy = _mm256_cmpgt_epi32(_mm256_xor_si256(l0, sign), _mm256_xor_si256(c0, sign));
    __m256i c1 = _mm256_sub_epi32(l1, cy);
    __m256i c2 = _mm256_set1_epi32((int)(uint32_t)hi), c3 = _mm256_set1_epi32((int)(uint32_t)(hi >> 32));
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++) {
      __m256i pe0 = _mm256_mul_epu32(c0, m0), po0 = _mm256_mul_epu32(_mm256_srli_epi64(c0, 32), m0);
      __m256i pe1 = _mm256_mul_epu32(c2, m1), po1 = _mm256_mul_epu32(_mm256_srli_epi64(c2, 32), m1);
      __m256i hi0 = _mm256_blend_epi32(_mm256_srli_epi64(pe0, 32), po0, 0xAA);
      __m256i lo0 = _mm256_blend_epi32(pe0, _mm256_slli_epi64(po0, 32), 0xAA);
      __m256i hi1 = _mm256_blend_epi32(_mm256_srli_epi64(pe1, 32), po1, 0xAA);
      __m256i lo1 = _mm256_blend_epi32(pe1, _mm256_slli_epi64(po1, 32), 0xAA);
      __m256i n0 = _mm256_xor_si256(_mm256_xor_si256(hi1, c1), _mm256_set1_epi32((int)k0));
      __m256i n2 = _mm256_xor_si256(_mm256_xor_si256(hi0, c3), _mm256_set1_epi32((int)k1));
      c1 = lo1;
      c3 = lo0;
      c0 = n0;
      c2 = n2;
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    _mm256_storeu_si256((__m256i *)(w[0] + k), c0);
    _mm256_storeu_si256((__m256i *)(w[1] + k), c1);
    _mm256_storeu_si256((__m256i *)(w[2] + k), c2);
    _mm256_storeu_si256((__m256i *)(w[3] + k), c3);
  }
  return k;
}

/* SLEEF's double log (1 ulp) and cos(pi x) (0.5 ulp): 4 lanes where the
 * CPU has AVX2 and FMA, else 2 (every x86-64); the library picks its
 * kernel within a width. */
__m128d Sleef_logd2_u10(__m128d);
__m128d Sleef_cospid2_u05(__m128d);
__m256d Sleef_logd4_u10(__m256d);
__m256d Sleef_cospid4_u05(__m256d);

/* Box-Muller over n pairs (u1 in (0, 1], u2 in [0, 1)) into z, in place of
 * u1: sqrt(-2 ln u1) cos(pi 2u2). */
__attribute__((target("avx2,fma"))) static int64_t box_muller4(double *u1, const double *u2,
                                                              int64_t n) {
  int64_t k = 0;
  for (; k + 4 <= n; k += 4) {
    __m256d l = Sleef_logd4_u10(_mm256_loadu_pd(u1 + k)), v = _mm256_loadu_pd(u2 + k);
    __m256d c = Sleef_cospid4_u05(_mm256_add_pd(v, v));
    _mm256_storeu_pd(u1 + k, _mm256_mul_pd(_mm256_sqrt_pd(_mm256_mul_pd(_mm256_set1_pd(-2.0), l)), c));
  }
  return k;
}

/* Whether the CPU has AVX2 and FMA (cached; the same answer every time). */
static int have_avx2(void) {
  static int avx2 = -1;
  int a = __atomic_load_n(&avx2, __ATOMIC_RELAXED);
  if (a < 0) {
    a = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    __atomic_store_n(&avx2, a, __ATOMIC_RELAXED);
  }
  return a;
}

static void box_muller(double *u1, const double *u2, int64_t n) {
  int64_t k = have_avx2() ? box_muller4(u1, u2, n) : 0;
  for (; k < n; k += 2) { /* (an odd last one: lane 1 repeats it) */
    int64_t k1 = k + 1 < n ? k + 1 : k;
    __m128d l = Sleef_logd2_u10(_mm_set_pd(u1[k1], u1[k]));
    __m128d c = Sleef_cospid2_u05(_mm_set_pd(2.0 * u2[k1], 2.0 * u2[k]));
    __m128d z = _mm_mul_pd(_mm_sqrt_pd(_mm_mul_pd(_mm_set1_pd(-2.0), l)), c);
    _mm_storeh_pd(u1 + k1, z);
    _mm_storel_pd(u1 + k, z);
  }
}

static void rng_range(void *ctx, int64_t b, int64_t e) {
  rng_job *j = ctx;
  union {
    float f[XK_TILE];
    double d[XK_TILE];
    int64_t i[XK_TILE];
  } buf;
  uint32_t w[4][XK_TILE];
  double u2[XK_TILE];
  size_t es = tpu_dtype_size(j->dt);
  for (int64_t tile = b; tile < e; tile++) {
    int64_t L = tile * XK_TILE, n = j->total - L;
    if (n > XK_TILE) n = XK_TILE;
    int64_t done = have_avx2() ? philox8((uint64_t)L, j->offset, j->seed, n, w) : 0;
    philox_lanes((uint64_t)L, j->offset, j->seed, done, n, w);
    const uint32_t *w0 = w[0], *w1 = w[1], *w2 = w[2], *w3 = w[3];
    if (j->kind == TPUIR_RNG_BITS) {
      for (int64_t k = 0; k < n; k++) buf.i[k] = (int64_t)((uint64_t)w0[k] | (uint64_t)w1[k] << 32);
    } else if (j->kind == TPUIR_RNG_UNIFORM) {
      switch (j->dt) {
      case TPU_F64:
        for (int64_t k = 0; k < n; k++)
          buf.d[k] = (double)(((uint64_t)w0[k] | (uint64_t)w1[k] << 32) >> 11) * 0x1p-53;
        break;
      case TPU_BF16: for (int64_t k = 0; k < n; k++) buf.f[k] = (float)(w0[k] >> 24) * 0x1p-8f; break;
      case TPU_F16: for (int64_t k = 0; k < n; k++) buf.f[k] = (float)(w0[k] >> 21) * 0x1p-11f; break;
      default: for (int64_t k = 0; k < n; k++) buf.f[k] = (float)(w0[k] >> 8) * 0x1p-24f; break;
      }
    } else if (j->dt == TPU_F64) {
      for (int64_t k = 0; k < n; k++) {
        buf.d[k] = (double)((((uint64_t)w0[k] | (uint64_t)w1[k] << 32) >> 11) + 1) * 0x1p-53;
        u2[k] = (double)(((uint64_t)w2[k] | (uint64_t)w3[k] << 32) >> 11) * 0x1p-53;
      }
      box_muller(buf.d, u2, n);
    } else {
      for (int64_t k = 0; k < n; k++) {
        buf.d[k] = (double)((w0[k] >> 8) + 1) * 0x1p-24;
        u2[k] = (double)(w1[k] >> 8) * 0x1p-24;
      }
      box_muller(buf.d, u2, n);
      for (int64_t k = 0; k < n; k++) buf.f[k] = (float)buf.d[k]; /* (in place, forwards) */
    }
    tpux__store(j->dt, j->out + L * (int64_t)es, 1, n, &buf);
  }
}

int tpux__eval_rng(xctx *c, int t) {
  int rc = tpux__alloc_value(c, t);
  if (rc) return rc;
  const tpuir_node *n = tpuir_get_node(c->g, t);
  rng_job j = {tpux__value_data(c, t), n->dtype, n->kind, n->seed, n->offset, 1};
  if (n->nin == 1) { /* run-time key: int64[2] (seed, offset) */
    const tpu_view *k = &c->vals[n->in[0]].v;
    const int64_t *kp = (const int64_t *)k->base + k->offset;
    j.seed = (uint64_t)kp[0];
    j.offset = (uint64_t)kp[k->strides[0]];
  }
  for (int i = 0; i < n->ndim; i++) j.total *= n->sizes[i];
  if (j.total == 0) return TPU_OK;
  int64_t tiles = (j.total + XK_TILE - 1) / XK_TILE;
  tpurt_parallel_for(tiles, 4, rng_range, &j);
  return TPU_OK;
}

/* exec/vtpu/vmath.c - float32 transcendental functions of the elementwise and
 * fused engines over whole tile buffers, through SLEEF (Debian
 * libsleef-dev): its 1.0-ulp ("_u10") vector functions, 16 lanes on
 * AVX-512, 8 on AVX2, 4 on SSE2 (every x86-64), each picked once from the
 * CPU. SLEEF's results follow C99 for NaN, infinities and signed zeros.
 *
 * log1p takes log above 1e38 and sinh/cosh exp(|x|/2)^2/2 above 88 (SLEEF's
 * overflow there), asinh/acosh log(|x|) + ln 2 above 1e18 (same).
 * logistic is 1 / (1 + exp(-x)) for x >= 0 and e / (1 + e), e = exp(x),
 * below (no overflow, no cancellation): exp and one division (the own exp
 * at 16 and 8 lanes, SLEEF's at 4).
 *
 * erf, tanh, sin, exp and logistic at 16 and 8 lanes are the vTPU's own
 * (exec/vtpu/vkern.h: faster than SLEEF's there, within 1 ulp); 4 lanes
 * (SSE2) stay SLEEF's.
 *
 * The vector prototypes are declared here (sleef.h only declares the
 * 512/256-bit ones when the whole file is compiled for that ISA, and this
 * file is not: each width is a target attribute, chosen at run time).
 * State: the engine's width (the CPU's widest, or TORCH_TPU_VTPU_VECTOR_WIDTH),
 * set once.
 */
#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "exec/vtpu/internal.h"
#include "exec/vtpu/vkern.h"

/* f(x) and f(x, y) for the three widths (SLEEF's dispatchers pick the
 * exact kernel, e.g. avx512f vs avx512fnofma, on first call). */
#define SLEEF_UN(f)                          \
  __m512 Sleef_##f##f16_u10(__m512);         \
  __m256 Sleef_##f##f8_u10(__m256);          \
  __m128 Sleef_##f##f4_u10(__m128);
#define SLEEF_BIN(f)                         \
  __m512 Sleef_##f##f16_u10(__m512, __m512); \
  __m256 Sleef_##f##f8_u10(__m256, __m256);  \
  __m128 Sleef_##f##f4_u10(__m128, __m128);
SLEEF_UN(exp)
SLEEF_UN(expm1)
SLEEF_UN(log)
SLEEF_UN(log1p)
SLEEF_UN(sin)
SLEEF_UN(cos)
SLEEF_UN(tan)
SLEEF_UN(tanh)
SLEEF_UN(asin)
SLEEF_UN(acos)
SLEEF_UN(atan)
SLEEF_UN(sinh)
SLEEF_UN(cosh)
SLEEF_UN(asinh)
SLEEF_UN(acosh)
SLEEF_UN(atanh)
SLEEF_UN(erf)
SLEEF_BIN(pow)
SLEEF_BIN(atan2)

/* logistic at 4 lanes (16 and 8: vkern.h; see the header comment) */
static __m128 logistic4(__m128 x) {
  __m128 ax = _mm_andnot_ps(_mm_set1_ps(-0.0f), x);
  __m128 e = Sleef_expf4_u10(_mm_sub_ps(_mm_setzero_ps(), ax));
  __m128 y = _mm_div_ps(_mm_set1_ps(1.0f), _mm_add_ps(e, _mm_set1_ps(1.0f)));
  __m128 neg = _mm_cmplt_ps(x, _mm_setzero_ps());
  return _mm_or_ps(_mm_and_ps(neg, _mm_mul_ps(e, y)), _mm_andnot_ps(neg, y));
}

/* log1p: SLEEF's float log1p overflows to inf above ~1e38, where
 * log1p(x) = log(x) in float anyway. */
T512 static __m512 log1p16(__m512 x) {
  __mmask16 big = _mm512_cmp_ps_mask(x, _mm512_set1_ps(1e38f), _CMP_GT_OQ);
  return _mm512_mask_mov_ps(Sleef_log1pf16_u10(x), big, Sleef_logf16_u10(x));
}
T256 static __m256 log1p8(__m256 x) {
  __m256 big = _mm256_cmp_ps(x, _mm256_set1_ps(1e38f), _CMP_GT_OQ);
  return _mm256_blendv_ps(Sleef_log1pf8_u10(x), Sleef_logf8_u10(x), big);
}
static __m128 log1p4(__m128 x) {
  __m128 big = _mm_cmpgt_ps(x, _mm_set1_ps(1e38f));
  return _mm_or_ps(_mm_and_ps(big, Sleef_logf4_u10(x)), _mm_andnot_ps(big, Sleef_log1pf4_u10(x)));
}

/* sinh, cosh: SLEEF's float ones overflow to inf above |x| = 88.5 although
 * the result is finite up to ~89.4; there (e^-|x| negligible) they are
 * (e/2) * e with e = exp(|x|/2): within 3 ulp. */
T512 static __m512 big16(__m512 x, __m512 r, int odd) {
  __m512 ax = _mm512_abs_ps(x);
  __mmask16 big = _mm512_cmp_ps_mask(ax, _mm512_set1_ps(88.0f), _CMP_GT_OQ);
  if (!big) return r;
  __m512 e = Sleef_expf16_u10(_mm512_mul_ps(ax, _mm512_set1_ps(0.5f)));
  __m512 v = _mm512_mul_ps(_mm512_mul_ps(e, _mm512_set1_ps(0.5f)), e);
  if (odd) v = _mm512_castsi512_ps(_mm512_or_si512(
               _mm512_castps_si512(v), _mm512_and_si512(_mm512_castps_si512(x),
                                                        _mm512_set1_epi32((int)0x80000000u))));
  return _mm512_mask_mov_ps(r, big, v);
}
T512 static __m512 sinh16(__m512 x) { return big16(x, Sleef_sinhf16_u10(x), 1); }
T512 static __m512 cosh16(__m512 x) { return big16(x, Sleef_coshf16_u10(x), 0); }
T256 static __m256 big8(__m256 x, __m256 r, int odd) {
  __m256 sign = _mm256_set1_ps(-0.0f), ax = _mm256_andnot_ps(sign, x);
  __m256 big = _mm256_cmp_ps(ax, _mm256_set1_ps(88.0f), _CMP_GT_OQ);
  if (_mm256_movemask_ps(big) == 0) return r;
  __m256 e = Sleef_expf8_u10(_mm256_mul_ps(ax, _mm256_set1_ps(0.5f)));
  __m256 v = _mm256_mul_ps(_mm256_mul_ps(e, _mm256_set1_ps(0.5f)), e);
  if (odd) v = _mm256_or_ps(v, _mm256_and_ps(sign, x));
  return _mm256_blendv_ps(r, v, big);
}
T256 static __m256 sinh8(__m256 x) { return big8(x, Sleef_sinhf8_u10(x), 1); }
T256 static __m256 cosh8(__m256 x) { return big8(x, Sleef_coshf8_u10(x), 0); }
static __m128 big4(__m128 x, __m128 r, int odd) {
  __m128 sign = _mm_set1_ps(-0.0f), ax = _mm_andnot_ps(sign, x);
  __m128 big = _mm_cmpgt_ps(ax, _mm_set1_ps(88.0f));
  if (_mm_movemask_ps(big) == 0) return r;
  __m128 e = Sleef_expf4_u10(_mm_mul_ps(ax, _mm_set1_ps(0.5f)));
  __m128 v = _mm_mul_ps(_mm_mul_ps(e, _mm_set1_ps(0.5f)), e);
  if (odd) v = _mm_or_ps(v, _mm_and_ps(sign, x));
  return _mm_or_ps(_mm_and_ps(big, v), _mm_andnot_ps(big, r));
}
static __m128 sinh4(__m128 x) { return big4(x, Sleef_sinhf4_u10(x), 1); }
static __m128 cosh4(__m128 x) { return big4(x, Sleef_coshf4_u10(x), 0); }

/* asinh, acosh: SLEEF's float ones overflow above ~1.8e19; there (x^2
 * beyond float) they are log(|x|) + ln 2, with the sign of x for asinh. */
#define LN2F 0.693147180559945309f
T512 static __m512 alog16(__m512 x, __m512 r, int odd) {
  __m512 ax = _mm512_abs_ps(x);
  /* acosh: only x > 1e18 (negative x stays NaN) */
  __mmask16 big = _mm512_cmp_ps_mask(odd ? ax : x, _mm512_set1_ps(1e18f), _CMP_GT_OQ);
  if (!big) return r;
  __m512 v = _mm512_add_ps(Sleef_logf16_u10(ax), _mm512_set1_ps(LN2F));
  if (odd) v = _mm512_castsi512_ps(_mm512_or_si512(
               _mm512_castps_si512(v), _mm512_and_si512(_mm512_castps_si512(x),
                                                        _mm512_set1_epi32((int)0x80000000u))));
  return _mm512_mask_mov_ps(r, big, v);
}
T512 static __m512 asinh16(__m512 x) { return alog16(x, Sleef_asinhf16_u10(x), 1); }
T512 static __m512 acosh16(__m512 x) { return alog16(x, Sleef_acoshf16_u10(x), 0); }
T256 static __m256 alog8(__m256 x, __m256 r, int odd) {
  __m256 sign = _mm256_set1_ps(-0.0f), ax = _mm256_andnot_ps(sign, x);
  __m256 big = _mm256_cmp_ps(odd ? ax : x, _mm256_set1_ps(1e18f), _CMP_GT_OQ);
  if (_mm256_movemask_ps(big) == 0) return r;
  __m256 v = _mm256_add_ps(Sleef_logf8_u10(ax), _mm256_set1_ps(LN2F));
  if (odd) v = _mm256_or_ps(v, _mm256_and_ps(sign, x));
  return _mm256_blendv_ps(r, v, big);
}
T256 static __m256 asinh8(__m256 x) { return alog8(x, Sleef_asinhf8_u10(x), 1); }
T256 static __m256 acosh8(__m256 x) { return alog8(x, Sleef_acoshf8_u10(x), 0); }
static __m128 alog4(__m128 x, __m128 r, int odd) {
  __m128 sign = _mm_set1_ps(-0.0f), ax = _mm_andnot_ps(sign, x);
  __m128 big = _mm_cmpgt_ps(odd ? ax : x, _mm_set1_ps(1e18f));
  if (_mm_movemask_ps(big) == 0) return r;
  __m128 v = _mm_add_ps(Sleef_logf4_u10(ax), _mm_set1_ps(LN2F));
  if (odd) v = _mm_or_ps(v, _mm_and_ps(sign, x));
  return _mm_or_ps(_mm_and_ps(big, v), _mm_andnot_ps(big, r));
}
static __m128 asinh4(__m128 x) { return alog4(x, Sleef_asinhf4_u10(x), 1); }
static __m128 acosh4(__m128 x) { return alog4(x, Sleef_acoshf4_u10(x), 0); }

typedef __m512 (*un16)(__m512);
typedef __m256 (*un8)(__m256);
typedef __m128 (*un4)(__m128);
typedef __m512 (*bin16)(__m512, __m512);
typedef __m256 (*bin8)(__m256, __m256);
typedef __m128 (*bin4)(__m128, __m128);

/* The functions of an op at each width (NULL: not covered); src16, src8:
 * the names of u16, u8 when they are vkern.h kernels (native kernels
 * inline those). */
typedef struct vfn {
  un16 u16;
  un8 u8;
  un4 u4;
  bin16 b16;
  bin8 b8;
  bin4 b4;
  const char *src16, *src8;
} vfn;

#define UNF(f) (vfn){Sleef_##f##f16_u10, Sleef_##f##f8_u10, Sleef_##f##f4_u10, 0, 0, 0, 0, 0}
#define BINF(f) (vfn){0, 0, 0, Sleef_##f##f16_u10, Sleef_##f##f8_u10, Sleef_##f##f4_u10, 0, 0}

static int fn_of(int op, vfn *f) {
  switch (op) {
  case TPUIR_EXP: *f = (vfn){exp16, exp8, Sleef_expf4_u10, 0, 0, 0, "exp16", "exp8"}; return 1;
  case TPUIR_EXPM1: *f = UNF(expm1); return 1;
  case TPUIR_LOG: *f = UNF(log); return 1;
  case TPUIR_LOG1P: *f = (vfn){log1p16, log1p8, log1p4, 0, 0, 0, 0, 0}; return 1;
  case TPUIR_SIN: *f = (vfn){sin16, sin8, Sleef_sinf4_u10, 0, 0, 0, "sin16", "sin8"}; return 1;
  case TPUIR_COS: *f = UNF(cos); return 1;
  case TPUIR_TAN: *f = UNF(tan); return 1;
  case TPUIR_TANH: *f = (vfn){tanh16, tanh8, Sleef_tanhf4_u10, 0, 0, 0, "tanh16", "tanh8"}; return 1;
  case TPUIR_ASIN: *f = UNF(asin); return 1;
  case TPUIR_ACOS: *f = UNF(acos); return 1;
  case TPUIR_ATAN: *f = UNF(atan); return 1;
  case TPUIR_SINH: *f = (vfn){sinh16, sinh8, sinh4, 0, 0, 0, 0, 0}; return 1;
  case TPUIR_COSH: *f = (vfn){cosh16, cosh8, cosh4, 0, 0, 0, 0, 0}; return 1;
  case TPUIR_ASINH: *f = (vfn){asinh16, asinh8, asinh4, 0, 0, 0, 0, 0}; return 1;
  case TPUIR_ACOSH: *f = (vfn){acosh16, acosh8, acosh4, 0, 0, 0, 0, 0}; return 1;
  case TPUIR_ATANH: *f = UNF(atanh); return 1;
  case TPUIR_ERF: *f = (vfn){erf16, erf8, Sleef_erff4_u10, 0, 0, 0, "erf16", "erf8"}; return 1;
  case TPUIR_LOGISTIC:
    *f = (vfn){logistic16, logistic8, logistic4, 0, 0, 0, "logistic16", "logistic8"};
    return 1;
  case TPUIR_POW: *f = BINF(pow); return 1;
  case TPUIR_ATAN2: *f = BINF(atan2); return 1;
  default: return 0;
  }
}

/* Loops: full vectors, then the tail through a zero-padded vector. */
T512 static void run16(const vfn *f, int64_t n, float *r, const float *a, const float *b) {
  int64_t i = 0;
  if (f->u16) {
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(r + i, f->u16(_mm512_loadu_ps(a + i)));
  } else {
    for (; i + 16 <= n; i += 16)
      _mm512_storeu_ps(r + i, f->b16(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i)));
  }
  if (i < n) {
    __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
    __m512 x = _mm512_maskz_loadu_ps(m, a + i);
    __m512 y = f->u16 ? x : f->b16(x, _mm512_maskz_loadu_ps(m, b + i));
    _mm512_mask_storeu_ps(r + i, m, f->u16 ? f->u16(x) : y);
  }
}

T256 static void run8(const vfn *f, int64_t n, float *r, const float *a, const float *b) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(r + i, f->u8 ? f->u8(_mm256_loadu_ps(a + i))
                                  : f->b8(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  if (i < n) {
    float xa[8] = {0}, xb[8] = {0}, xr[8];
    memcpy(xa, a + i, sizeof(float) * (size_t)(n - i));
    if (!f->u8) memcpy(xb, b + i, sizeof(float) * (size_t)(n - i));
    _mm256_storeu_ps(xr, f->u8 ? f->u8(_mm256_loadu_ps(xa))
                               : f->b8(_mm256_loadu_ps(xa), _mm256_loadu_ps(xb)));
    memcpy(r + i, xr, sizeof(float) * (size_t)(n - i));
  }
}

static void run4(const vfn *f, int64_t n, float *r, const float *a, const float *b) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    _mm_storeu_ps(r + i, f->u4 ? f->u4(_mm_loadu_ps(a + i))
                               : f->b4(_mm_loadu_ps(a + i), _mm_loadu_ps(b + i)));
  if (i < n) {
    float xa[4] = {0}, xb[4] = {0}, xr[4];
    memcpy(xa, a + i, sizeof(float) * (size_t)(n - i));
    if (!f->u4) memcpy(xb, b + i, sizeof(float) * (size_t)(n - i));
    _mm_storeu_ps(xr, f->u4 ? f->u4(_mm_loadu_ps(xa))
                            : f->b4(_mm_loadu_ps(xa), _mm_loadu_ps(xb)));
    memcpy(r + i, xr, sizeof(float) * (size_t)(n - i));
  }
}

/* Widest vector width this CPU runs (16, 8 or 4 lanes). */
static int host_width(void) {
  if (__builtin_cpu_supports("avx512f")) return 16;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 8;
  return 4;
}

/* The width the engine runs at: the CPU's, or narrower where
 * TORCH_TPU_VTPU_VECTOR_WIDTH (8 or 4) asks for it (tests and A/B runs of
 * the AVX2 / SSE2 paths on a wider CPU). Read once. */
static int g_width;
static pthread_once_t g_width_once = PTHREAD_ONCE_INIT;
static void width_init(void) {
  const char *e = getenv("TORCH_TPU_VTPU_VECTOR_WIDTH");
  int w = e ? atoi(e) : 0;
  g_width = host_width();
  if ((w == 8 || w == 4) && w < g_width) g_width = w;
}
static int engine_width(void) {
  pthread_once(&g_width_once, width_init);
  return g_width;
}

/* See exec/vtpu/internal.h. */
int tpux__vmath_f32_width(int width, int op, int64_t n, float *r, const float *a,
                          const float *b) {
  vfn f;
  if (width > host_width() || !fn_of(op, &f)) return 0;
  if (width == 16) run16(&f, n, r, a, b);
  else if (width == 8) run8(&f, n, r, a, b);
  else if (width == 4) run4(&f, n, r, a, b);
  else return 0;
  return 1;
}

/* See exec/vtpu/internal.h. */
int tpux__vmath_width(void) { return engine_width(); }

/* See exec/vtpu/internal.h. */
void (*tpux__vmath_f32_vec(int op, int width))(void) {
  vfn f;
  if (width > host_width() || !fn_of(op, &f)) return NULL;
  if (width == 16) return f.u16 ? (void (*)(void))f.u16 : (void (*)(void))f.b16;
  if (width == 8) return f.u8 ? (void (*)(void))f.u8 : (void (*)(void))f.b8;
  return NULL;
}

/* See exec/vtpu/internal.h. */
const char *tpux__vmath_f32_src(int op, int width) {
  vfn f;
  if (width > host_width() || !fn_of(op, &f)) return NULL;
  return width == 16 ? f.src16 : width == 8 ? f.src8 : NULL;
}

/* exp(s - m) over a row and its sum: 16 / 8 lanes (the tail through a
 * masked vector whose lanes past n count 0), SSE2 through vmath. */
T512 static float exp_sum16(float *s, int64_t n, float m) {
  __m512 acc = _mm512_setzero_ps(), mv = _mm512_set1_ps(m);
  int64_t c = 0;
  for (; c + 16 <= n; c += 16) {
    __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(s + c), mv));
    _mm512_storeu_ps(s + c, e);
    acc = _mm512_add_ps(acc, e);
  }
  if (c < n) {
    __mmask16 k = (__mmask16)((1u << (n - c)) - 1u);
    __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + c), mv));
    _mm512_mask_storeu_ps(s + c, k, e);
    acc = _mm512_mask_add_ps(acc, k, acc, e);
  }
  return _mm512_reduce_add_ps(acc);
}

T256 static float exp_sum8(float *s, int64_t n, float m) {
  __m256 acc = _mm256_setzero_ps(), mv = _mm256_set1_ps(m);
  int64_t c = 0;
  for (; c + 8 <= n; c += 8) {
    __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + c), mv));
    _mm256_storeu_ps(s + c, e);
    acc = _mm256_add_ps(acc, e);
  }
  if (c < n) {
    __m256i k = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n - c)),
                                   _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    __m256 e = exp8(_mm256_sub_ps(_mm256_maskload_ps(s + c, k), mv));
    _mm256_maskstore_ps(s + c, k, e);
    acc = _mm256_add_ps(acc, _mm256_and_ps(e, _mm256_castsi256_ps(k)));
  }
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  return _mm_cvtss_f32(_mm_add_ss(h, _mm_shuffle_ps(h, h, 1)));
}

/* See exec/vtpu/internal.h. */
float tpux__vmath_exp_sum_width(int w, float *s, int64_t n, float m) {
  if (w > host_width() || (w != 16 && w != 8 && w != 4)) return NAN;
  if (w == 16) return exp_sum16(s, n, m);
  if (w == 8) return exp_sum8(s, n, m);
  vfn f;
  fn_of(TPUIR_EXP, &f); /* the elementwise exp's 4-lane function */
  for (int64_t c = 0; c < n; c++) s[c] -= m;
  run4(&f, n, s, s, NULL);
  float l = 0.f;
  for (int64_t c = 0; c < n; c++) l += s[c];
  return l;
}

/* See exec/vtpu/internal.h. */
float tpux__vmath_exp_sum(float *s, int64_t n, float m) {
  return tpux__vmath_exp_sum_width(engine_width(), s, n, m);
}

/* See exec/vtpu/internal.h. */
int tpux__vmath_f32(int op, int64_t n, float *r, const float *a, const float *b) {
  return tpux__vmath_f32_width(engine_width(), op, n, r, a, b);
}

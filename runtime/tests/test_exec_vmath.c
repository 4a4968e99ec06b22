/* test_exec_vmath.c - the float32 transcendental kernels (exec/vtpu/vmath.c,
 * SLEEF) against double-precision libm over a sweep of float bit patterns
 * (every 251st for exp/tanh/logistic/erf/sin, every 4093rd for the rest,
 * both signs) plus special values: SLEEF's 1-ulp functions and the own erf,
 * tanh, sin and exp within 1.5 ulp of the exact result (logistic, sinh, cosh 3: see the test),
 * NaN -> NaN, signed zeros and infinities as C99; at every vector width the
 * host runs (AVX-512, AVX2, SSE2). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/vtpu/internal.h"
#include "tpu_test.h"

static double ref_of(int op, double x) {
  switch (op) {
  case TPUIR_EXP: return exp(x);
  case TPUIR_EXPM1: return expm1(x);
  case TPUIR_LOG: return log(x);
  case TPUIR_LOG1P: return log1p(x);
  case TPUIR_SIN: return sin(x);
  case TPUIR_COS: return cos(x);
  case TPUIR_TAN: return tan(x);
  case TPUIR_TANH: return tanh(x);
  case TPUIR_ASIN: return asin(x);
  case TPUIR_ACOS: return acos(x);
  case TPUIR_ATAN: return atan(x);
  case TPUIR_SINH: return sinh(x);
  case TPUIR_COSH: return cosh(x);
  case TPUIR_ASINH: return asinh(x);
  case TPUIR_ACOSH: return acosh(x);
  case TPUIR_ATANH: return atanh(x);
  case TPUIR_LOGISTIC: return 1.0 / (1.0 + exp(-x));
  default: return erf(x);
  }
}

/* error of y in units of the float spacing at the reference value */
static double ulp_err(float y, double ref) {
  if (isnan(ref)) return isnan(y) ? 0 : 1e9;
  float rf = (float)ref;
  if (isinf(rf)) return isinf(y) && (y > 0) == (rf > 0) ? 0 : 1e9;
  double sp = (double)nextafterf(fabsf(rf), INFINITY) - fabsf(rf);
  return fabs((double)y - ref) / sp;
}

static double sweep(int width, int op, uint64_t step, float *worst_x) {
  enum { B = 1024 };
  float in[B], out[B];
  double worst = 0;
  int cnt = 0;
  for (uint64_t u = 0; u <= 0xffffffffu; u += step) {
    uint32_t bits = (uint32_t)u;
    float x;
    memcpy(&x, &bits, 4);
    if (isnan(x)) continue;
    in[cnt++] = x;
    if (cnt < B && u + step <= 0xffffffffu) continue;
    if (!tpux__vmath_f32_width(width, op, cnt, out, in, NULL)) return -1;
    for (int i = 0; i < cnt; i++) {
      double e = ulp_err(out[i], ref_of(op, in[i]));
      if (e > worst) {
        worst = e;
        *worst_x = in[i];
      }
    }
    cnt = 0;
  }
  return worst;
}

TPU_TEST(exec_vmath_ulp) {
  static const int ops[] = {TPUIR_EXP,  TPUIR_TANH,  TPUIR_LOGISTIC, TPUIR_ERF,
                            TPUIR_SIN,  TPUIR_COS,   TPUIR_LOG,      TPUIR_EXPM1,
                            TPUIR_LOG1P, TPUIR_TAN,  TPUIR_ASIN,     TPUIR_ACOS,
                            TPUIR_ATAN, TPUIR_SINH,  TPUIR_COSH,     TPUIR_ASINH,
                            TPUIR_ACOSH, TPUIR_ATANH};
  static const char *names[] = {"exp",  "tanh", "logistic", "erf",   "sin",  "cos",
                                "log",  "expm1", "log1p",   "tan",   "asin", "acos",
                                "atan", "sinh", "cosh",     "asinh", "acosh", "atanh"};
  for (int width = 16; width >= 4; width /= 2) {
    if (!tpux__vmath_f32_width(width, TPUIR_EXP, 0, NULL, NULL, NULL)) continue; /* not on this CPU */
    for (int k = 0; k < (int)(sizeof ops / sizeof ops[0]); k++) {
      float wx = 0;
      /* logistic: exp's error through e / (1 + e); sinh/cosh above 88:
       * exp(|x|/2)^2/2 (exec/vtpu/vmath.c) */
      double bound = ops[k] == TPUIR_LOGISTIC || ops[k] == TPUIR_SINH || ops[k] == TPUIR_COSH
                         ? 3.0 : 1.5;
      double w = sweep(width, ops[k], k < 5 ? 251 : 4093, &wx);
      if (getenv("TPU_TEST_VERBOSE") || w > bound)
        printf("  %d lanes %s: %.2f ulp at %.9g\n", width, names[k], w, wx);
      CHECK(w >= 0 && w <= bound);
    }
  }
}

/* Worst ulp error of op at a width over: every float within 64 ulp of
 * ends[0..4] (piece ends, rounding to 1), the 1344 smallest subnormals, and
 * every 7th float of [2^-8, top], both signs. */
static double pieces_worst(int width, int op, double (*ref)(double), const float *ends,
                           uint32_t top) {
  enum { B = 4096 };
  static float in[B], out[B];
  double worst = 0;
  int cnt = 0;
  for (int e = 0; e < 5; e++) {
    float v = ends[e];
    for (int s = 0; s < 64; s++) v = nextafterf(v, 0.0f);
    for (int s = 0; s < 128; s++, v = nextafterf(v, INFINITY)) {
      in[cnt++] = v;
      in[cnt++] = -v;
    }
  }
  for (float v = 0x1p-149f; cnt < 5 * 256 + 64; v = nextafterf(v, 1.0f)) in[cnt++] = v;
  if (!tpux__vmath_f32_width(width, op, cnt, out, in, NULL)) return 1e9;
  for (int i = 0; i < cnt; i++) {
    double er = ulp_err(out[i], ref((double)in[i]));
    if (er > worst) worst = er;
  }
  for (uint32_t u = 0x3b800000u; u <= top; u += B / 2 * 7) {
    cnt = 0;
    for (uint32_t v = u; v < u + B / 2 * 7 && v <= top; v += 7) {
      float x;
      memcpy(&x, &v, 4);
      in[cnt++] = x;
      in[cnt++] = -x;
    }
    if (!tpux__vmath_f32_width(width, op, cnt, out, in, NULL)) return 1e9;
    for (int i = 0; i < cnt; i++) {
      double er = ulp_err(out[i], ref((double)in[i]));
      if (er > worst) worst = er;
    }
  }
  return worst;
}

/* erf and tanh (exec/vtpu/vmath.c's own at 16 and 8 lanes): within 1 ulp around their pieces' ends and densely below
 * (pieces_worst); the SLEEF paths within their 1.5. */
TPU_TEST(exec_vmath_pieces) {
  static const float erf_ends[] = {1.0f, 2.0f, 3.0f, 4.0f, 3.9192059f};
  static const float tanh_ends[] = {0.3125f, 2.5f, 5.0f, 9.6875f, 9.0109f};
  for (int width = 16; width >= 4; width /= 2) {
    if (!tpux__vmath_f32_width(width, TPUIR_EXP, 0, NULL, NULL, NULL)) continue;
    double we = pieces_worst(width, TPUIR_ERF, erf, erf_ends, 0x40800000u);     /* 4 */
    double wt = pieces_worst(width, TPUIR_TANH, tanh, tanh_ends, 0x41200000u);  /* 10 */
    if (getenv("TPU_TEST_VERBOSE") || we > 1.0 || wt > 1.0)
      printf("  %d lanes pieces: erf %.3f ulp, tanh %.3f ulp\n", width, we, wt);
    CHECK(we <= (width == 4 ? 1.5 : 1.0));
    CHECK(wt <= (width == 4 ? 1.5 : 1.0));
  }
}

/* sin (exec/vtpu/vmath.c's own at 16 and 8 lanes, in double below 2^18):
 * within 0.62 ulp over every 7th float up to 2^18, around multiples of pi
 * and the switch to SLEEF, and subnormals (pieces_worst); SLEEF's 4 lanes
 * within 1.5. */
TPU_TEST(exec_vmath_sin_dense) {
  static const float ends[] = {3.14159274f, 6.28318548f, 3141.59277f, 205887.406f, 0x1.fffffep17f};
  for (int width = 16; width >= 4; width /= 2) {
    if (!tpux__vmath_f32_width(width, TPUIR_EXP, 0, NULL, NULL, NULL)) continue;
    double w = pieces_worst(width, TPUIR_SIN, sin, ends, 0x487fffffu);
    if (getenv("TPU_TEST_VERBOSE") || w > (width == 4 ? 1.5 : 0.62))
      printf("  %d lanes sin: %.3f ulp\n", width, w);
    CHECK(w <= (width == 4 ? 1.5 : 0.62));
  }
}

/* exp (exec/vtpu/vkern.h's own at 16 and 8 lanes): within 1 ulp over
 * every 7th float of [2^-8, 104] (both signs: normal results down to
 * e^-87.3; the subnormal ones round twice, within 1.5 as the sweep
 * checks), around the clamps and where k changes (pieces_worst); the 8
 * lanes give the 16 lanes' bits, subnormal and overflowing results
 * included. */
TPU_TEST(exec_vmath_exp_dense) {
  static const float ends[] = {0.34657359f, 88.7228394f, -87.3365479f, 1.03972077f, 0.5f};
  for (int width = 16; width >= 8; width /= 2) {
    if (!tpux__vmath_f32_width(width, TPUIR_EXP, 0, NULL, NULL, NULL)) continue;
    double w = pieces_worst(width, TPUIR_EXP, exp, ends, 0x42ae0000u); /* 87 */
    if (getenv("TPU_TEST_VERBOSE") || w > 1.0) printf("  %d lanes exp: %.3f ulp\n", width, w);
    CHECK(w <= 1.0);
  }
  if (!tpux__vmath_f32_width(16, TPUIR_EXP, 0, NULL, NULL, NULL)) return;
  enum { N = 1 << 16 };
  static float in[N], o16[N], o8[N];
  for (int i = 0; i < N; i++) in[i] = -110.0f + 200.0f * (float)i / N + (float)i * 1e-7f;
  in[0] = NAN, in[1] = INFINITY, in[2] = -INFINITY, in[3] = -0.0f;
  CHECK(tpux__vmath_f32_width(16, TPUIR_EXP, N, o16, in, NULL) == 1);
  CHECK(tpux__vmath_f32_width(8, TPUIR_EXP, N, o8, in, NULL) == 1);
  int diff = 0;
  for (int i = 0; i < N; i++) diff += memcmp(&o16[i], &o8[i], 4) != 0;
  CHECK(diff == 0);
}

/* exp, erf, tanh and logistic take a shorter path for vectors whose lanes
 * are all ordinary (exp: |x| <= 86; erf and tanh: no |x| below 2^-64):
 * the same inputs give the same bits when a vector holds one lane that
 * sends it down the general path (every 8th lane replaced here). */
TPU_TEST(exec_vmath_fast_paths_same_bits) {
  enum { N = 4096 };
  static float in[N], mixed[N], o1[N], o2[N];
  static const int ops[] = {TPUIR_EXP, TPUIR_ERF, TPUIR_TANH, TPUIR_LOGISTIC};
  static const float odd[] = {87.5f, 0x1p-70f, -0x1p-90f, 90.0f};
  for (int i = 0; i < N; i++) {
    float v = -86.0f + 172.0f * (float)i / (N - 1); /* exp's whole short range */
    if (i % 4 == 1) v = ldexpf(v, -(i % 60)); /* small magnitudes too */
    in[i] = i < 64 ? nextafterf(i & 1 ? -86.0f : 86.0f, 0.0f) - (float)(i / 2) * 1e-6f : v;
  }
  for (int width = 16; width >= 8; width /= 2)
    for (int k = 0; k < 4; k++) {
      if (!tpux__vmath_f32_width(width, ops[k], 0, NULL, NULL, NULL)) continue;
      memcpy(mixed, in, sizeof in);
      for (int i = 0; i < N; i += 8) mixed[i] = odd[k];
      CHECK(tpux__vmath_f32_width(width, ops[k], N, o1, in, NULL) == 1);
      CHECK(tpux__vmath_f32_width(width, ops[k], N, o2, mixed, NULL) == 1);
      int diff = 0;
      for (int i = 0; i < N; i++) diff += i % 8 != 0 && memcmp(&o1[i], &o2[i], 4) != 0;
      if (diff) printf("  %d lanes op %d: %d lanes differ\n", width, ops[k], diff);
      CHECK(diff == 0);
    }
}

/* pow and atan2 over a grid of both arguments (signs, zeros, infinities
 * and large and tiny magnitudes included). */
TPU_TEST(exec_vmath_binary_ulp) {
  enum { N = 181 };
  float v[N];
  for (int i = 0; i < N - 7; i++) v[i] = (i & 1 ? -1.f : 1.f) * ldexpf(1.0f + (float)i / 37.f, i / 2 - 43);
  float sp[7] = {0.0f, -0.0f, INFINITY, -INFINITY, 2.0f, -3.0f, 0.5f};
  memcpy(v + N - 7, sp, sizeof sp);
  static float a[N * N], b[N * N], out[N * N];
  for (int i = 0; i < N; i++)
    for (int j = 0; j < N; j++) a[i * N + j] = v[i], b[i * N + j] = v[j];
  for (int which = 0; which < 2; which++) {
    int op = which ? TPUIR_ATAN2 : TPUIR_POW;
    CHECK(tpux__vmath_f32(op, N * N, out, a, b) == 1);
    double worst = 0;
    for (int i = 0; i < N * N; i++) {
      double ref = which ? atan2((double)a[i], (double)b[i]) : pow((double)a[i], (double)b[i]);
      float rf = (float)ref;
      double e;
      if (isnan(ref)) e = isnan(out[i]) ? 0 : 1e9;
      else if (rf == 0.0f) e = out[i] == 0.0f && signbit(out[i]) == signbit(rf) ? 0 : 1e9;
      else e = ulp_err(out[i], ref);
      if (e > worst) worst = e;
      if (e > 1.5 && getenv("TPU_TEST_VERBOSE"))
        printf("  op %d (%g, %g) = %g ref %g\n", op, a[i], b[i], out[i], ref);
    }
    CHECK(worst <= 1.5);
  }
}

/* special values at vector width w */
static void specials_at(int w, int *tpu_test_failed_) {
  /* 17 values: one full vector plus a masked tail */
  float in[17] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e-30f, -1e-30f, 88.8f,
                  -104.5f, 0.625f, -0.625f, 4.0f, -4.5f, 10.0f, -10.0f, 1.0f, -NAN};
  float out[17];
  CHECK(tpux__vmath_f32_width(w, TPUIR_TANH, 17, out, in, NULL) == 1);
  CHECK(isnan(out[0]) && isnan(out[16]));
  CHECK(out[1] == 1.0f && out[2] == -1.0f);
  CHECK(out[3] == 0.0f && !signbit(out[3]) && out[4] == 0.0f && signbit(out[4]));
  CHECK(out[5] == 1e-30f && out[6] == -1e-30f && out[13] == 1.0f && out[14] == -1.0f);
  CHECK(tpux__vmath_f32_width(w, TPUIR_EXP, 17, out, in, NULL) == 1);
  CHECK(isnan(out[0]) && out[1] == INFINITY && out[2] == 0.0f && out[3] == 1.0f);
  CHECK(out[7] == INFINITY && out[8] == 0.0f);
  CHECK(tpux__vmath_f32_width(w, TPUIR_LOGISTIC, 17, out, in, NULL) == 1);
  CHECK(isnan(out[0]) && out[1] == 1.0f && out[2] == 0.0f && out[3] == 0.5f);
  CHECK(tpux__vmath_f32_width(w, TPUIR_ERF, 17, out, in, NULL) == 1);
  CHECK(isnan(out[0]) && out[1] == 1.0f && out[2] == -1.0f && signbit(out[4]));
  CHECK(out[11] == 1.0f - 0x1p-24f || out[11] == 1.0f);
  CHECK(out[12] == -1.0f);
  CHECK(tpux__vmath_f32_width(w, TPUIR_SIN, 17, out, in, NULL) == 1);
  CHECK(isnan(out[0]) && isnan(out[1]) && isnan(out[2]) && signbit(out[4]) && out[3] == 0.0f);
  CHECK(tpux__vmath_f32_width(w, TPUIR_LOG, 17, out, in, NULL) == 1);
  CHECK(isnan(out[0]) && out[1] == INFINITY && isnan(out[2]) && out[3] == -INFINITY &&
        out[4] == -INFINITY && isnan(out[6]) && out[15] == 0.0f);
  /* in place, and an op it does not cover */
  float io[3] = {0.5f, -2.0f, 3.0f};
  CHECK(tpux__vmath_f32_width(w, TPUIR_EXP, 3, io, io, NULL) == 1);
  CHECK(fabsf(io[0] - expf(0.5f)) <= 2e-7f * expf(0.5f));
  CHECK(tpux__vmath_f32_width(w, TPUIR_FLOOR, 3, io, io, NULL) == 0);
}

TPU_TEST(exec_vmath_specials) {
  for (int w = 16; w >= 4; w /= 2)
    if (tpux__vmath_f32_width(w, TPUIR_EXP, 0, NULL, NULL, NULL)) {
      specials_at(w, tpu_test_failed_);
      if (*tpu_test_failed_) {
        fprintf(stderr, "  (at %d lanes)\n", w);
        return;
      }
    }
}

/* exp_sum (a softmax row: s = exp(s - m) and its sum, one pass) at every
 * width: the same bits as the elementwise exp of s - m, the sum within a
 * few float roundings of the double sum of those values, nothing past n
 * written; all -inf with m = -inf gives NaN, as softmax. */
TPU_TEST(exec_vmath_exp_sum) {
  enum { N = 300 };
  static const int64_t lens[] = {0, 1, 5, 7, 8, 9, 15, 16, 17, 31, 33, 256, 299};
  float s[N + 1], ref[N], inf_row[9];
  for (int w = 16; w >= 4; w /= 2) {
    float probe = 0.f;
    if (isnan(tpux__vmath_exp_sum_width(w, &probe, 0, 0.f))) continue; /* CPU lacks w */
    for (size_t t = 0; t < sizeof lens / sizeof lens[0]; t++) {
      int64_t n = lens[t];
      float m = -INFINITY;
      for (int64_t i = 0; i < n; i++) {
        s[i] = -30.0f + 35.0f * (float)((i * 7919 + t * 104729) % 1000) / 1000.0f;
        if (i % 11 == 3) s[i] = -INFINITY; /* a masked key */
        m = s[i] > m ? s[i] : m;
      }
      s[n] = 42.0f; /* must stay */
      for (int64_t i = 0; i < n; i++) ref[i] = s[i] - m;
      CHECK(tpux__vmath_f32_width(w, TPUIR_EXP, n, ref, ref, NULL) == 1);
      float l = tpux__vmath_exp_sum_width(w, s, n, m);
      double want = 0.0;
      for (int64_t i = 0; i < n; i++) want += ref[i];
      CHECK(memcmp(s, ref, (size_t)n * sizeof(float)) == 0);
      CHECK(s[n] == 42.0f);
      CHECK(fabs(l - want) <= 1e-6 * want + (n == 0 ? 0.0 : 1e-30));
      if (n == 0) CHECK(l == 0.f);
    }
    for (int i = 0; i < 9; i++) inf_row[i] = -INFINITY;
    CHECK(isnan(tpux__vmath_exp_sum_width(w, inf_row, 9, -INFINITY)));
  }
  float probe = 0.f;
  CHECK(isnan(tpux__vmath_exp_sum_width(3, &probe, 1, 0.f)) && probe == 0.f);
}

/* test_exec_vmath.c - the AVX-512 float32 transcendental kernels
 * (exec_vmath.c) against double-precision libm over a dense sweep of all
 * float bit patterns (every 251st, both signs) plus special values: at most
 * 2 ulp from the exact result (3 for logistic and erf), NaN -> NaN, signed zeros and
 * infinities as C99. Skipped (passes) on CPUs without AVX-512F. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/exec_internal.h"
#include "tpu_test.h"

static double ref_of(int op, double x) {
  switch (op) {
  case TPUIR_EXP: return exp(x);
  case TPUIR_TANH: return tanh(x);
  case TPUIR_LOGISTIC: return 1.0 / (1.0 + exp(-x));
  default: return erf(x);
  }
}

/* error of y in units of the float spacing at the reference value */
static double ulp_err(float y, double ref) {
  float rf = (float)ref;
  if (isinf(rf)) return isinf(y) && (y > 0) == (rf > 0) ? 0 : 1e9;
  double sp = (double)nextafterf(fabsf(rf), INFINITY) - fabsf(rf);
  return fabs((double)y - ref) / sp;
}

static double sweep(int op, float *worst_x) {
  enum { B = 1024 };
  float in[B], out[B];
  double worst = 0;
  int cnt = 0;
  for (uint64_t u = 0; u <= 0xffffffffu; u += 251) {
    uint32_t bits = (uint32_t)u;
    float x;
    memcpy(&x, &bits, 4);
    if (isnan(x)) continue;
    in[cnt++] = x;
    if (cnt < B && u + 251 <= 0xffffffffu) continue;
    if (!tpux__vmath_f32(op, cnt, out, in)) return -1;
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
  if (!__builtin_cpu_supports("avx512f")) return;
  static const int ops[] = {TPUIR_EXP, TPUIR_TANH, TPUIR_LOGISTIC, TPUIR_ERF};
  static const char *names[] = {"exp", "tanh", "logistic", "erf"};
  /* logistic: exp's error passes through e / (1 + e) for x < 0; erf: the
   * portable kernel's fits are within 3 ulp */
  static const double bound[] = {2.0, 2.0, 3.0, 3.0};
  for (int k = 0; k < 4; k++) {
    float wx = 0;
    double w = sweep(ops[k], &wx);
    if (getenv("TPU_TEST_VERBOSE") || w > bound[k])
      printf("  %s: %.2f ulp at %.9g\n", names[k], w, wx);
    CHECK(w >= 0 && w <= bound[k]);
  }
}

TPU_TEST(exec_vmath_specials) {
  if (!__builtin_cpu_supports("avx512f")) return;
  /* 17 values: one full vector plus a masked tail */
  float in[17] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e-30f, -1e-30f, 88.8f,
                  -104.5f, 0.625f, -0.625f, 4.0f, -4.5f, 10.0f, -10.0f, 1.0f, -NAN};
  float out[17];
  CHECK(tpux__vmath_f32(TPUIR_TANH, 17, out, in) == 1);
  CHECK(isnan(out[0]) && isnan(out[16]));
  CHECK(out[1] == 1.0f && out[2] == -1.0f);
  CHECK(out[3] == 0.0f && !signbit(out[3]) && out[4] == 0.0f && signbit(out[4]));
  CHECK(out[5] == 1e-30f && out[6] == -1e-30f && out[13] == 1.0f && out[14] == -1.0f);
  CHECK(tpux__vmath_f32(TPUIR_EXP, 17, out, in) == 1);
  CHECK(isnan(out[0]) && out[1] == INFINITY && out[2] == 0.0f && out[3] == 1.0f);
  CHECK(out[7] == INFINITY && out[8] == 0.0f);
  CHECK(tpux__vmath_f32(TPUIR_LOGISTIC, 17, out, in) == 1);
  CHECK(isnan(out[0]) && out[1] == 1.0f && out[2] == 0.0f && out[3] == 0.5f);
  CHECK(tpux__vmath_f32(TPUIR_ERF, 17, out, in) == 1);
  CHECK(isnan(out[0]) && out[1] == 1.0f && out[2] == -1.0f && signbit(out[4]));
  CHECK(out[11] == 1.0f - 0x1p-24f || out[11] == 1.0f);
  CHECK(out[12] == -1.0f);
  /* in place, and an op it does not cover */
  float io[3] = {0.5f, -2.0f, 3.0f};
  CHECK(tpux__vmath_f32(TPUIR_EXP, 3, io, io) == 1);
  CHECK(fabsf(io[0] - expf(0.5f)) <= 2e-7f * expf(0.5f));
  CHECK(tpux__vmath_f32(TPUIR_SIN, 3, io, io) == 0);
}

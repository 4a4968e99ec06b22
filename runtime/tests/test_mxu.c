/* test_mxu.c - tests of the vTPU matrix unit (tpumxu_gemm, run by
 * oneDNN): every precision, layout and dtype against an independent float64
 * emulation of the TPU passes (and a true f64 GEMM for the error bounds). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tpu_base.h"
#include "tpu_mxu.h"
#include "tpu_test.h"

/* ---- helpers --------------------------------------------------------- */

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static double urand(void) { /* uniform [-1, 1) */
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return (double)(g_rng >> 11) / 4503599627370496.0 - 1.0;
}

/* Round a float value to bf16 (round to nearest even), written with
 * frexp/nearbyint independently of the runtime's bit tricks. */
static double t_bf16(double x) {
  float f = (float)x;
  if (!isfinite(f) || f == 0.f) return f;
  int e;
  double mant = frexp((double)f, &e); /* 0.5 <= |mant| < 1 */
  double r = nearbyint(mant * 256.0) / 256.0;
  return (double)(float)ldexp(r, e); /* overflow -> inf like the hardware */
}

/* A strided matrix of R x C elements of dtype dt, in one of several
 * layouts: 0 row-major, 1 column-major (transposed view), 2 padded both
 * ways, 3 negative row stride, 4 negative column stride + padding. */
typedef struct tmat {
  char *buf;
  char *base;
  int64_t rs, cs, R, C;
  int dt;
} tmat;

static size_t t_esize(int dt) { return tpu_dtype_size(dt); }

static void tmat_init(tmat *t, int dt, int64_t R, int64_t C, int layout) {
  int64_t rs, cs, off = 0, span;
  switch (layout) {
  case 1: rs = 1; cs = R; span = R * C; break;
  case 2: rs = 2 * C + 3; cs = 2; span = R * rs; break;
  case 3: rs = -C; cs = 1; span = R * C; off = (R - 1) * C; break;
  case 4: rs = C * 3 + 1; cs = -3; span = R * rs; off = (C - 1) * 3; break;
  default: rs = C; cs = 1; span = R * C; break;
  }
  if (span < 1) span = 1;
  t->dt = dt;
  t->R = R;
  t->C = C;
  t->rs = rs;
  t->cs = cs;
  t->buf = malloc((size_t)span * t_esize(dt) + 64);
  memset(t->buf, 0xff, (size_t)span * t_esize(dt) + 64); /* NaN filler */
  t->base = t->buf + off * (int64_t)t_esize(dt);
}
static void tmat_free(tmat *t) { free(t->buf); }

static double tmat_get(const tmat *t, int64_t i, int64_t j) {
  const char *p = t->base + (i * t->rs + j * t->cs) * (int64_t)t_esize(t->dt);
  switch (t->dt) {
  case TPU_F32: return *(const float *)p;
  case TPU_F64: return *(const double *)p;
  case TPU_BF16: {
    uint32_t u = (uint32_t)(*(const uint16_t *)p) << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
  }
  default: return (double)*(const _Float16 *)p;
  }
}
/* Store x (already representable, or rounded here RNE) into element i,j. */
static void tmat_set(tmat *t, int64_t i, int64_t j, double x) {
  char *p = t->base + (i * t->rs + j * t->cs) * (int64_t)t_esize(t->dt);
  switch (t->dt) {
  case TPU_F32: *(float *)p = (float)x; break;
  case TPU_F64: *(double *)p = x; break;
  case TPU_BF16: {
    float f = (float)t_bf16(x);
    uint32_t u;
    memcpy(&u, &f, 4);
    if (isnan(f)) u = 0x7fc00000u;
    *(uint16_t *)p = (uint16_t)(u >> 16);
    break;
  }
  default: *(_Float16 *)p = (_Float16)(float)x; break;
  }
}
static void tmat_fill(tmat *t, double scale) {
  for (int64_t i = 0; i < t->R; i++)
    for (int64_t j = 0; j < t->C; j++) tmat_set(t, i, j, urand() * scale);
}

static int gemm_t(int prec, double alpha, const tmat *A, const tmat *B,
                  double beta, tmat *C) {
  return tpumxu_gemm(C->dt, prec, 1, C->R, C->C, A->C, alpha, A->base, 0,
                     A->rs, A->cs, B->base, 0, B->rs, B->cs, beta, C->base, 0,
                     C->rs, C->cs);
}

/* float64 emulation of the TPU passes for f32 inputs: returns the expected
 * alpha*acc + beta*c0 and the magnitude sum|terms| used for the tolerance.
 * ref/mag/c0 are m*n row-major. */
static void emulate_f32(int prec, int64_t m, int64_t n, int64_t k,
                        const tmat *A, const tmat *B, double alpha,
                        double beta, const double *c0, double *ref,
                        double *mag) {
  double *ap = malloc(sizeof(double) * 3 * (size_t)(m * k + 1));
  double *bp = malloc(sizeof(double) * 3 * (size_t)(k * n + 1));
  for (int64_t i = 0; i < m; i++)
    for (int64_t l = 0; l < k; l++) {
      double x = tmat_get(A, i, l), *p = ap + 3 * (i * k + l);
      p[0] = t_bf16(x);
      p[1] = t_bf16(x - p[0]);
      p[2] = t_bf16(x - p[0] - p[1]);
      if (prec == TPU_PREC_FP32) p[0] = x, p[1] = p[2] = 0;
    }
  for (int64_t l = 0; l < k; l++)
    for (int64_t j = 0; j < n; j++) {
      double x = tmat_get(B, l, j), *p = bp + 3 * (l * n + j);
      p[0] = t_bf16(x);
      p[1] = t_bf16(x - p[0]);
      p[2] = t_bf16(x - p[0] - p[1]);
      if (prec == TPU_PREC_FP32) p[0] = x, p[1] = p[2] = 0;
    }
  /* small terms (a part, b part) per precision; hi*hi is added last */
  static const int hi3[2][2] = {{0, 1}, {1, 0}};
  static const int hi6[5][2] = {{1, 1}, {2, 0}, {0, 2}, {1, 0}, {0, 1}};
  const int(*sm)[2] = prec == TPU_PREC_HIGH ? hi3 : hi6;
  int nsm = prec == TPU_PREC_HIGH ? 2 : prec == TPU_PREC_HIGHEST ? 5 : 0;
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      double s = 0, h = 0, g = 0;
      for (int t = 0; t < nsm; t++) {
        double d = 0;
        for (int64_t l = 0; l < k; l++) {
          double pr = ap[3 * (i * k + l) + sm[t][0]] * bp[3 * (l * n + j) + sm[t][1]];
          d += pr;
          g += fabs(pr);
        }
        s += d;
      }
      if (!isfinite(s)) s = 0;
      for (int64_t l = 0; l < k; l++) {
        double pr = ap[3 * (i * k + l)] * bp[3 * (l * n + j)];
        h += pr;
        g += fabs(pr);
      }
      double r = alpha * (s + h);
      if (beta != 0) r += beta * c0[i * n + j];
      ref[i * n + j] = r;
      mag[i * n + j] = fabs(alpha) * g + fabs(beta * c0[i * n + j]);
    }
  free(ap);
  free(bp);
}

static const double EPS32 = 5.960464477539063e-08; /* 2^-24 */

/* One GEMM of ab_dt operands (f32, or bf16 with an f32 C: tpumxu_gemm_io)
 * at the given precision on the current ISA vs the emulation (bf16 values
 * are their own hi part: one exact product each). Returns 0 if every
 * element is within fp32 accumulation error. */
static int check_io(int ab_dt, int prec, int64_t m, int64_t n, int64_t k, int la,
                    int lb, int lc, double alpha, double beta) {
  tmat A, B, C;
  tmat_init(&A, ab_dt, m, k, la);
  tmat_init(&B, ab_dt, k, n, lb);
  tmat_init(&C, TPU_F32, m, n, lc);
  tmat_fill(&A, 1.0);
  tmat_fill(&B, 1.0);
  double *c0 = calloc((size_t)(m * n), sizeof(double));
  double *ref = calloc((size_t)(m * n), sizeof(double));
  double *mag = calloc((size_t)(m * n), sizeof(double));
  if (beta != 0) tmat_fill(&C, 1.0); /* else C keeps its NaN filler */
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) c0[i * n + j] = beta != 0 ? tmat_get(&C, i, j) : 0;
  emulate_f32(ab_dt == TPU_F32 ? prec : TPU_PREC_DEFAULT, m, n, k, &A, &B, alpha, beta, c0,
              ref, mag);
  int bad = 0;
  int rc = tpumxu_gemm_io(ab_dt, TPU_F32, prec, 1, m, n, k, alpha, A.base, 0, A.rs, A.cs,
                          B.base, 0, B.rs, B.cs, beta, C.base, 0, C.rs, C.cs, NULL, NULL);
  if (rc) {
    fprintf(stderr, "  gemm rc %d: %s\n", rc, tpu_last_error());
    bad = 1;
  }
  double tolk = 3.0 * EPS32 * (sqrt((double)k) + 2.0);
  for (int64_t i = 0; i < m && !bad; i++)
    for (int64_t j = 0; j < n && !bad; j++) {
      double got = tmat_get(&C, i, j), r = ref[i * n + j];
      double tol = tolk * mag[i * n + j] + 1e-30;
      if (!(fabs(got - r) <= tol)) {
        fprintf(stderr,
                "  %s prec %d m%lld n%lld k%lld la%d lb%d lc%d: C[%lld,%lld]=%.9g "
                "ref %.9g (tol %.3g)\n",
                tpu_dtype_name(ab_dt), prec, (long long)m, (long long)n,
                (long long)k, la, lb, lc, (long long)i, (long long)j, got, r,
                tol);
        bad = 1;
      }
    }
  free(c0);
  free(ref);
  free(mag);
  tmat_free(&A);
  tmat_free(&B);
  tmat_free(&C);
  return bad;
}

static int check_f32(int prec, int64_t m, int64_t n, int64_t k, int la, int lb, int lc,
                     double alpha, double beta) {
  return check_io(TPU_F32, prec, m, n, k, la, lb, lc, alpha, beta);
}

/* ---- tests ----------------------------------------------------------- */

/* oneDNN is there, names its ISA, and runs a real (not reference) kernel:
 * bf16 natively where the CPU has AVX512-BF16 or AMX. */
TPU_TEST(mxu_engine_info) {
  char info[256], impl[128];
  CHECK_OK(tpumxu_engine_info(info, sizeof info));
  CHECK(strncmp(info, "oneDNN ", 7) == 0);
  CHECK_OK(tpumxu_impl_name(TPU_F32, TPU_PREC_DEFAULT, 512, 512, 512, impl, sizeof impl));
  CHECK(strncmp(impl, "ref", 3) != 0);
  if (__builtin_cpu_supports("avx512bf16")) {
    CHECK(strstr(info, "bf16 native") != NULL);
    CHECK(strstr(impl, "bf16") != NULL || strstr(impl, "amx") != NULL);
  }
  CHECK_OK(tpumxu_impl_name(TPU_F32, TPU_PREC_FP32, 512, 512, 512, impl, sizeof impl));
  CHECK(strncmp(impl, "ref", 3) != 0);
  CHECK(tpumxu_impl_name(TPU_I32, TPU_PREC_FP32, 5, 5, 5, impl, sizeof impl) == TPU_E_INVALID);
}

TPU_TEST(mxu_bad_args) {
  float x = 0;
  CHECK(tpumxu_gemm(TPU_I32, 0, 1, 1, 1, 1, 1, &x, 0, 1, 1, &x, 0, 1, 1, 0,
                    &x, 0, 1, 1) == TPU_E_TYPE);
  CHECK(tpumxu_gemm(TPU_F32, 0, 1, -1, 1, 1, 1, &x, 0, 1, 1, &x, 0, 1, 1, 0,
                    &x, 0, 1, 1) == TPU_E_INVALID);
  CHECK(tpumxu_gemm(TPU_F32, 9, 1, 1, 1, 1, 1, &x, 0, 1, 1, &x, 0, 1, 1, 0,
                    &x, 0, 1, 1) == TPU_E_INVALID);
  CHECK(tpumxu_gemm(TPU_F32, 0, 1, 1, 1, 1, 1, NULL, 0, 1, 1, &x, 0, 1, 1, 0,
                    &x, 0, 1, 1) == TPU_E_INVALID);
  /* empty problems are fine and touch nothing */
  CHECK_OK(tpumxu_gemm(TPU_F32, 0, 0, 5, 5, 5, 1, NULL, 0, 1, 1, NULL, 0, 1,
                       1, 0, NULL, 0, 1, 1));
  CHECK_OK(tpumxu_gemm(TPU_F32, 0, 1, 0, 5, 5, 1, NULL, 0, 1, 1, NULL, 0, 1,
                       1, 0, NULL, 0, 1, 1));
}

/* Every precision and ISA against the pass emulation, small odd shapes. */
TPU_TEST(mxu_passes_small) {
  static const int64_t sz[][3] = {{1, 1, 1}, {1, 1, 2}, {7, 7, 7},  {3, 5, 1},
                                  {5, 3, 9}, {17, 33, 15}, {15, 47, 64},
                                  {31, 17, 3}};
  { /* one code path: oneDNN picks it */
    for (int prec = TPU_PREC_DEFAULT; prec <= TPU_PREC_FP32; prec++)
      for (size_t s = 0; s < sizeof sz / sizeof sz[0]; s++)
        CHECK(check_f32(prec, sz[s][0], sz[s][1], sz[s][2], 0, 0, 0, 1.0,
                        0.0) == 0);
  }
}

/* Sizes 1023 in each dimension and shapes that cross block boundaries. */
TPU_TEST(mxu_passes_large) {
  static const int64_t sz[][3] = {{1023, 3, 5},  {2, 1023, 3}, {3, 2, 1023},
                                  {130, 70, 300}, {45, 97, 1100},
                                  {3, 2100, 40}, {70, 2, 2500}, {5, 40, 4500}};
  { /* one code path: oneDNN picks it */
    for (int prec = TPU_PREC_DEFAULT; prec <= TPU_PREC_FP32; prec++)
      for (size_t s = 0; s < sizeof sz / sizeof sz[0]; s++)
        CHECK(check_f32(prec, sz[s][0], sz[s][1], sz[s][2], 0, 0, 0, 1.0,
                        0.0) == 0);
  }
}

/* Transposed, padded and negative strides; alpha/beta. */
TPU_TEST(mxu_strides_alpha_beta) {
  { /* one code path: oneDNN picks it */
    for (int prec = TPU_PREC_DEFAULT; prec <= TPU_PREC_FP32; prec++)
      for (int la = 0; la < 5; la++)
        for (int lb = 0; lb < 5; lb++) {
          int lc = (la + lb) % 5;
          double alpha = (la & 1) ? -0.75 : 1.0;
          double beta = lb == 2 ? 0.0 : (lb & 1) ? 0.5 : -1.25;
          CHECK(check_f32(prec, 19, 37, 41, la, lb, lc, alpha, beta) == 0);
        }
  }
}

/* Big problems (past the small-problem primitive) with B read along K (a
 * transposed weight: packed in its own order and handed over transposed),
 * every precision, with A and C in other layouts; alpha/beta. */
TPU_TEST(mxu_big_transposed_b) {
  for (int prec = TPU_PREC_DEFAULT; prec <= TPU_PREC_FP32; prec++)
    for (int la = 0; la < 3; la++) {
      CHECK(check_f32(prec, 96, 160, 192, la, 1, (la + 1) % 3, 1.0, 0.0) == 0);
      CHECK(check_f32(prec, 70, 130, 257, la, 1, 2, -0.75, 0.5) == 0);
      CHECK(check_f32(prec, 10, 1024, 256, la, 1, 0, 1.0, 0.0) == 0); /* no dense cut */
    }
}

/* Packed f32-storage operands (every precision where bf16 is not native,
 * FP32 elsewhere) whose rows are a multiple of 256 floats get a padded
 * row stride (mxu/driver.c pack_operand): A transposed (packed K-major)
 * and row-major, B row-major and transposed, cut by rows and not. */
TPU_TEST(mxu_padded_packed_strides) {
  for (int prec = TPU_PREC_DEFAULT; prec <= TPU_PREC_FP32; prec++)
    for (int la = 0; la < 2; la++) {
      CHECK(check_f32(prec, 256, 512, 256, la, 0, 0, 1.0, 0.0) == 0);
      CHECK(check_f32(prec, 512, 256, 512, la, 1, 0, 1.0, 0.5) == 0);
      CHECK(check_f32(prec, 20, 768, 512, la, 0, 1, -0.75, 0.0) == 0); /* no dense cut */
    }
}

/* bf16 operands with an f32 C (tpumxu_gemm_io): products exact, f32
 * accumulation, any layout (transposed operands of big problems are read
 * in place), small and big problems, alpha/beta; mixed pairs other than
 * bf16 -> f32 are refused. */
static int check_bf16_f32(int64_t m, int64_t n, int64_t k, int la, int lb, int lc,
                          double alpha, double beta) {
  return check_io(TPU_BF16, TPU_PREC_HIGHEST, m, n, k, la, lb, lc, alpha, beta);
}

TPU_TEST(mxu_bf16_operands_f32_result) {
  for (int la = 0; la < 3; la++)
    for (int lb = 0; lb < 3; lb++) {
      CHECK(check_bf16_f32(19, 37, 41, la, lb, (la + lb) % 3, 1.0, 0.0) == 0);
      CHECK(check_bf16_f32(96, 160, 192, la, lb, 0, 1.0, 0.0) == 0);
      CHECK(check_bf16_f32(70, 130, 257, la, lb, 2, -0.75, 0.5) == 0);
    }
  CHECK(check_bf16_f32(300, 70, 130, 1, 1, 0, 1.0, 0.0) == 0); /* cut by rows */
  CHECK(check_bf16_f32(10, 1024, 256, 1, 0, 0, 1.0, 0.0) == 0); /* no cut: one thread */
  float x = 0;
  CHECK(tpumxu_gemm_io(TPU_F16, TPU_F32, 0, 1, 1, 1, 1, 1, &x, 0, 1, 1, &x, 0, 1, 1,
                       0, &x, 0, 1, 1, NULL, NULL) == TPU_E_TYPE);
  CHECK(tpumxu_gemm_io(TPU_F32, TPU_BF16, 0, 1, 1, 1, 1, 1, &x, 0, 1, 1, &x, 0, 1, 1,
                       0, &x, 0, 1, 1, NULL, NULL) == TPU_E_TYPE);
}

/* HIGHEST is within ~1e-6 of a true f64 GEMM; DEFAULT visibly is not. */
TPU_TEST(mxu_precision_vs_f64) {
  const int64_t m = 24, n = 40, k = 96;
  { /* one code path: oneDNN picks it */
    double maxerr[4] = {0};
    for (int prec = TPU_PREC_DEFAULT; prec <= TPU_PREC_FP32; prec++) {
      g_rng = 12345;
      tmat A, B, C;
      tmat_init(&A, TPU_F32, m, k, 0);
      tmat_init(&B, TPU_F32, k, n, 0);
      tmat_init(&C, TPU_F32, m, n, 0);
      tmat_fill(&A, 1.0);
      tmat_fill(&B, 1.0);
      CHECK_OK(gemm_t(prec, 1.0, &A, &B, 0.0, &C));
      for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
          double s = 0, g = 0;
          for (int64_t l = 0; l < k; l++) {
            double p = tmat_get(&A, i, l) * tmat_get(&B, l, j);
            s += p;
            g += fabs(p);
          }
          double e = fabs(tmat_get(&C, i, j) - s) / g;
          if (e > maxerr[prec]) maxerr[prec] = e;
        }
      tmat_free(&A);
      tmat_free(&B);
      tmat_free(&C);
    }
    CHECK(maxerr[TPU_PREC_HIGHEST] < 1e-6);
    CHECK(maxerr[TPU_PREC_FP32] < 1e-6);
    CHECK(maxerr[TPU_PREC_HIGH] < 1e-4);
    CHECK(maxerr[TPU_PREC_DEFAULT] > 1e-4);
    CHECK(maxerr[TPU_PREC_HIGH] < maxerr[TPU_PREC_DEFAULT] / 10);
  }
}

/* k == 0 gives C = beta*C (beta == 0: C not read, NaN filler replaced). */
TPU_TEST(mxu_k_zero) {
  { /* one code path: oneDNN picks it */
    for (int dt = 0; dt < 4; dt++) {
      static const int dts[4] = {TPU_F32, TPU_BF16, TPU_F16, TPU_F64};
      tmat C;
      tmat_init(&C, dts[dt], 5, 6, 2); /* filler NaN */
      CHECK_OK(tpumxu_gemm(dts[dt], TPU_PREC_HIGHEST, 1, 5, 6, 0, 2.0, NULL,
                           0, 1, 1, NULL, 0, 1, 1, 0.0, C.base, 0, C.rs, C.cs));
      for (int i = 0; i < 5; i++)
        for (int j = 0; j < 6; j++) CHECK(tmat_get(&C, i, j) == 0.0);
      for (int i = 0; i < 5; i++)
        for (int j = 0; j < 6; j++) tmat_set(&C, i, j, i - j);
      CHECK_OK(tpumxu_gemm(dts[dt], TPU_PREC_DEFAULT, 1, 5, 6, 0, 2.0, NULL,
                           0, 1, 1, NULL, 0, 1, 1, -0.5, C.base, 0, C.rs,
                           C.cs));
      for (int i = 0; i < 5; i++)
        for (int j = 0; j < 6; j++) CHECK(tmat_get(&C, i, j) == -0.5 * (i - j));
      tmat_free(&C);
    }
  }
}

/* beta == 0 ignores NaN in C; alpha scales. */
TPU_TEST(mxu_beta_zero_nan_c) {
  { /* one code path: oneDNN picks it */
    for (int prec = TPU_PREC_DEFAULT; prec <= TPU_PREC_FP32; prec++)
      CHECK(check_f32(prec, 9, 13, 11, 0, 1, 2, 2.5, 0.0) == 0);
  }
}

/* batch > 1 with a broadcast operand (batch stride 0). */
TPU_TEST(mxu_batch_broadcast) {
  const int64_t bt = 3, m = 11, n = 21, k = 35;
  { /* one code path: oneDNN picks it */
    for (int prec = TPU_PREC_DEFAULT; prec <= TPU_PREC_FP32; prec++) {
      float *a = malloc(sizeof(float) * m * k);
      float *b = malloc(sizeof(float) * bt * k * n);
      float *c = malloc(sizeof(float) * bt * m * n);
      for (int64_t i = 0; i < m * k; i++) a[i] = (float)urand();
      for (int64_t i = 0; i < bt * k * n; i++) b[i] = (float)urand();
      /* A broadcast over batch; B transposed (n x k storage) per batch */
      CHECK_OK(tpumxu_gemm(TPU_F32, prec, bt, m, n, k, 1.0, a, 0, k, 1, b,
                           k * n, 1, k, 0.0, c, m * n, n, 1));
      int bad = 0;
      for (int64_t q = 0; q < bt && !bad; q++) {
        tmat A = {NULL, (char *)a, k, 1, m, k, TPU_F32};
        tmat B = {NULL, (char *)(b + q * k * n), 1, k, k, n, TPU_F32};
        double *ref = malloc(sizeof(double) * m * n);
        double *mag = malloc(sizeof(double) * m * n);
        double *c0 = calloc((size_t)(m * n), sizeof(double));
        emulate_f32(prec, m, n, k, &A, &B, 1.0, 0.0, c0, ref, mag);
        for (int64_t i = 0; i < m * n; i++)
          if (!(fabs(c[q * m * n + i] - ref[i]) <=
                3 * EPS32 * (sqrt((double)k) + 2) * mag[i]))
            bad = 1;
        free(ref);
        free(mag);
        free(c0);
      }
      free(a);
      free(b);
      free(c);
      CHECK(!bad);
    }
  }
}

/* bf16 / f16 storage: one pass, f32 accumulation, C rounded once. */
static int check_half(int dt, int64_t m, int64_t n, int64_t k, int la,
                      int lb, double alpha, double beta) {
  tmat A, B, C;
  tmat_init(&A, dt, m, k, la);
  tmat_init(&B, dt, k, n, lb);
  tmat_init(&C, dt, m, n, 0);
  tmat_fill(&A, 2.0);
  tmat_fill(&B, 2.0);
  if (beta != 0) tmat_fill(&C, 2.0);
  double *c0 = malloc(sizeof(double) * m * n);
  for (int64_t i = 0; i < m * n; i++)
    c0[i] = beta != 0 ? tmat_get(&C, i / n, i % n) : 0;
  int bad = gemm_t(TPU_PREC_DEFAULT, alpha, &A, &B, beta, &C) != 0;
  double u = dt == TPU_BF16 ? 1.0 / 256 : 1.0 / 2048; /* output ulp (rel) */
  for (int64_t i = 0; i < m && !bad; i++)
    for (int64_t j = 0; j < n && !bad; j++) {
      double s = 0, g = 0;
      for (int64_t l = 0; l < k; l++) {
        double p = tmat_get(&A, i, l) * tmat_get(&B, l, j);
        s += p;
        g += fabs(p);
      }
      double r = alpha * s + beta * c0[i * n + j];
      double tol = u * fabs(r) + 3 * EPS32 * (sqrt((double)k) + 2) *
                                     (fabs(alpha) * g + fabs(beta * c0[i * n + j]));
      double got = tmat_get(&C, i, j);
      if (!(fabs(got - r) <= tol)) {
        fprintf(stderr, "  dt %d C[%lld,%lld]=%g ref %g\n", dt, (long long)i, (long long)j, got, r);
        bad = 1;
      }
    }
  free(c0);
  tmat_free(&A);
  tmat_free(&B);
  tmat_free(&C);
  return bad;
}

TPU_TEST(mxu_half_dtypes) {
  { /* one code path: oneDNN picks it */
    for (int h = 0; h < 2; h++) {
      int dt = h ? TPU_F16 : TPU_BF16;
      CHECK(check_half(dt, 1, 1, 1, 0, 0, 1.0, 0.0) == 0);
      CHECK(check_half(dt, 7, 9, 13, 1, 3, 1.0, 0.0) == 0);
      CHECK(check_half(dt, 33, 65, 130, 0, 1, -1.5, 0.25) == 0);
      CHECK(check_half(dt, 129, 40, 700, 4, 2, 1.0, 1.0) == 0);
    }
  }
}

/* Accumulation is f32 and C is rounded once: 1 + 2u + 2u... where u is half
 * an output ulp would stay 1 if accumulated in the storage type. */
TPU_TEST(mxu_half_round_once) {
  { /* one code path: oneDNN picks it */
    for (int h = 0; h < 2; h++) {
      int dt = h ? TPU_F16 : TPU_BF16;
      double half_ulp = h ? ldexp(1, -11) : ldexp(1, -8);
      tmat A, B, C;
      tmat_init(&A, dt, 1, 3, 0);
      tmat_init(&B, dt, 3, 1, 0);
      tmat_init(&C, dt, 1, 1, 0);
      tmat_set(&A, 0, 0, 1.0);
      tmat_set(&A, 0, 1, half_ulp);
      tmat_set(&A, 0, 2, half_ulp);
      for (int l = 0; l < 3; l++) tmat_set(&B, l, 0, 1.0);
      CHECK_OK(gemm_t(TPU_PREC_DEFAULT, 1.0, &A, &B, 0.0, &C));
      CHECK(tmat_get(&C, 0, 0) == 1.0 + 2 * half_ulp);
      tmat_free(&A);
      tmat_free(&B);
      tmat_free(&C);
    }
  }
}

/* float64: exact f64 GEMM (compare with a plain loop). */
TPU_TEST(mxu_f64) {
  static const int64_t sz[][3] = {{1, 1, 1}, {7, 5, 3}, {37, 29, 131}, {3, 300, 70}};
  { /* one code path: oneDNN picks it */
    for (size_t s = 0; s < 4; s++) {
      int64_t m = sz[s][0], n = sz[s][1], k = sz[s][2];
      tmat A, B, C;
      tmat_init(&A, TPU_F64, m, k, (int)s % 5);
      tmat_init(&B, TPU_F64, k, n, (int)(s + 1) % 5);
      tmat_init(&C, TPU_F64, m, n, (int)(s + 2) % 5);
      tmat_fill(&A, 1.0);
      tmat_fill(&B, 1.0);
      tmat_fill(&C, 1.0);
      double *c0 = malloc(sizeof(double) * m * n);
      for (int64_t i = 0; i < m * n; i++) c0[i] = tmat_get(&C, i / n, i % n);
      CHECK_OK(gemm_t(TPU_PREC_DEFAULT, 0.5, &A, &B, -2.0, &C));
      int bad = 0;
      for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
          double r = 0, g = 0;
          for (int64_t l = 0; l < k; l++) {
            r += tmat_get(&A, i, l) * tmat_get(&B, l, j);
            g += fabs(tmat_get(&A, i, l) * tmat_get(&B, l, j));
          }
          r = 0.5 * r - 2.0 * c0[i * n + j];
          if (!(fabs(tmat_get(&C, i, j) - r) <= 1e-14 * (g + 4))) bad = 1;
        }
      free(c0);
      tmat_free(&A);
      tmat_free(&B);
      tmat_free(&C);
      CHECK(!bad);
    }
  }
}

/* inf/NaN inputs: an inf in A with HIGHEST gives inf (the small terms turn
 * NaN and are zeroed), matching the emulation; NaN propagates. */
TPU_TEST(mxu_inf_nan) {
  const int64_t m = 4, n = 5, k = 37;
  { /* one code path: oneDNN picks it */
    for (int prec = TPU_PREC_DEFAULT; prec <= TPU_PREC_FP32; prec++) {
      tmat A, B, C;
      tmat_init(&A, TPU_F32, m, k, 0);
      tmat_init(&B, TPU_F32, k, n, 1);
      tmat_init(&C, TPU_F32, m, n, 0);
      tmat_fill(&A, 1.0);
      tmat_fill(&B, 1.0);
      for (int64_t l = 0; l < k; l++)
        for (int64_t j = 0; j < n; j++)
          if (tmat_get(&B, l, j) == 0) tmat_set(&B, l, j, 0.5);
      tmat_set(&A, 0, 3, INFINITY);
      tmat_set(&A, 1, 7, -INFINITY);
      tmat_set(&A, 2, 9, NAN);
      tmat_set(&B, 20, 4, INFINITY); /* column 4: inf in B */
      CHECK_OK(gemm_t(prec, 1.0, &A, &B, 0.0, &C));
      for (int64_t j = 0; j < 4; j++) {
        double b0 = tmat_get(&B, 3, j), b1 = tmat_get(&B, 7, j);
        CHECK(isinf(tmat_get(&C, 0, j)) && (tmat_get(&C, 0, j) > 0) == (b0 > 0));
        CHECK(isinf(tmat_get(&C, 1, j)) && (tmat_get(&C, 1, j) > 0) == (b1 < 0));
        CHECK(isnan(tmat_get(&C, 2, j)));
        CHECK(isfinite(tmat_get(&C, 3, j)));
      }
      /* column 4: row 3 has a finite A row times an inf in B -> inf */
      double a3 = tmat_get(&A, 3, 20);
      CHECK(isinf(tmat_get(&C, 3, 4)) && (tmat_get(&C, 3, 4) > 0) == (a3 > 0));
      CHECK(isnan(tmat_get(&C, 2, 4)));
      /* agreement with the emulation on the finite/inf pattern */
      double ref[20], mag[20], c0[20] = {0};
      emulate_f32(prec, m, n, k, &A, &B, 1.0, 0.0, c0, ref, mag);
      for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
          double got = tmat_get(&C, i, j), r = ref[i * n + j];
          CHECK(isnan(got) == isnan(r));
          CHECK(isinf(got) == isinf(r));
          if (isinf(r)) CHECK(got == r);
        }
      tmat_free(&A);
      tmat_free(&B);
      tmat_free(&C);
    }
  }
}

/* A finite input whose bf16 part overflows (|x| near FLT_MAX rounds to
 * inf): HIGH/HIGHEST follow the emulation (hi*hi is inf, the NaN small
 * terms are zeroed), also where the f32-parts form would turn it NaN. */
TPU_TEST(mxu_hi_overflow) {
  const int64_t m = 3, n = 4, k = 64;
  for (int prec = TPU_PREC_DEFAULT; prec <= TPU_PREC_FP32; prec++) {
    g_rng = 777;
    tmat A, B, C;
    tmat_init(&A, TPU_F32, m, k, 0);
    tmat_init(&B, TPU_F32, k, n, 0);
    tmat_init(&C, TPU_F32, m, n, 0);
    tmat_fill(&A, 1.0);
    tmat_fill(&B, 1.0);
    tmat_set(&A, 0, 5, 3.4e38);   /* bf16(x) = inf */
    tmat_set(&B, 5, 0, 1e-30);    /* x * b finite, hi * b inf */
    tmat_set(&B, 5, 1, -1e-30);
    CHECK_OK(gemm_t(prec, 1.0, &A, &B, 0.0, &C));
    double ref[12], mag[12], c0[12] = {0};
    emulate_f32(prec, m, n, k, &A, &B, 1.0, 0.0, c0, ref, mag);
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) {
        double got = tmat_get(&C, i, j), r = ref[i * n + j];
        CHECK(isnan(got) == isnan(r));
        CHECK(isinf(got) == isinf(r));
        if (isinf(r)) CHECK(got == r);
        if (isfinite(r)) CHECK(fabs(got - r) <= 3.0 * EPS32 * (sqrt((double)k) + 2.0) * mag[i * n + j] + 1e-30);
      }
    if (prec != TPU_PREC_FP32) CHECK(isinf(tmat_get(&C, 0, 0)) && tmat_get(&C, 0, 0) > 0);
    tmat_free(&A);
    tmat_free(&B);
    tmat_free(&C);
  }
}

/* Many small batch items (the batch-parallel path), per-item strides,
 * B broadcast (stride 0), C with padded rows. */
TPU_TEST(mxu_batch_many_small) {
  const int64_t bt = 24, m = 40, n = 36, k = 48, ldc = 40;
  float *a = malloc(sizeof(float) * bt * m * k);
  float *b = malloc(sizeof(float) * k * n);
  float *c = malloc(sizeof(float) * bt * m * ldc);
  for (int64_t i = 0; i < bt * m * k; i++) a[i] = (float)urand();
  for (int64_t i = 0; i < k * n; i++) b[i] = (float)urand();
  { /* one code path: oneDNN picks it */
    for (int prec = TPU_PREC_DEFAULT; prec <= TPU_PREC_FP32; prec += 2) {
      CHECK_OK(tpumxu_gemm(TPU_F32, prec, bt, m, n, k, 1.0, a, m * k, k, 1, b,
                           0, n, 1, 0.0, c, m * ldc, ldc, 1));
      int bad = 0;
      double *ref = malloc(sizeof(double) * m * n);
      double *mag = malloc(sizeof(double) * m * n);
      double *c0 = calloc((size_t)(m * n), sizeof(double));
      for (int64_t q = 0; q < bt && !bad; q++) {
        tmat A = {NULL, (char *)(a + q * m * k), k, 1, m, k, TPU_F32};
        tmat B = {NULL, (char *)b, n, 1, k, n, TPU_F32};
        emulate_f32(prec, m, n, k, &A, &B, 1.0, 0.0, c0, ref, mag);
        for (int64_t i = 0; i < m; i++)
          for (int64_t j = 0; j < n; j++)
            if (!(fabs(c[q * m * ldc + i * ldc + j] - ref[i * n + j]) <=
                  3 * EPS32 * (sqrt((double)k) + 2) * mag[i * n + j]))
              bad = 1;
      }
      free(ref);
      free(mag);
      free(c0);
      CHECK(!bad);
    }
  }
  free(a);
  free(b);
  free(c);
}

/* Concurrent calls from several threads give the same results as serial
 * ones (the shared pool runs a busy caller's work inline). */
#include <pthread.h>
typedef struct conc_arg {
  const float *a, *b;
  float *c;
  int64_t m, n, k;
  int prec, rc;
} conc_arg;
static void *conc_main(void *p) {
  conc_arg *x = p;
  for (int r = 0; r < 3 && !x->rc; r++)
    x->rc = tpumxu_gemm(TPU_F32, x->prec, 1, x->m, x->n, x->k, 1.0, x->a, 0,
                        x->k, 1, x->b, 0, x->n, 1, 0.0, x->c, 0, x->n, 1);
  return NULL;
}
TPU_TEST(mxu_concurrent_calls) {
  const int64_t m = 150, n = 130, k = 170;
  float *a = malloc(sizeof(float) * m * k), *b = malloc(sizeof(float) * k * n);
  for (int64_t i = 0; i < m * k; i++) a[i] = (float)urand();
  for (int64_t i = 0; i < k * n; i++) b[i] = (float)urand();
  float *want[4], *got[4];
  conc_arg args[4];
  pthread_t th[4];
  for (int t = 0; t < 4; t++) {
    want[t] = malloc(sizeof(float) * m * n);
    got[t] = malloc(sizeof(float) * m * n);
    CHECK_OK(tpumxu_gemm(TPU_F32, t % 4, 1, m, n, k, 1.0, a, 0, k, 1, b, 0, n,
                         1, 0.0, want[t], 0, n, 1));
    args[t] = (conc_arg){a, b, got[t], m, n, k, t % 4, 0};
  }
  for (int t = 0; t < 4; t++) CHECK(pthread_create(&th[t], NULL, conc_main, &args[t]) == 0);
  for (int t = 0; t < 4; t++) pthread_join(th[t], NULL);
  for (int t = 0; t < 4; t++) {
    CHECK(args[t].rc == 0);
    CHECK(memcmp(want[t], got[t], sizeof(float) * m * n) == 0);
    free(want[t]);
    free(got[t]);
  }
  free(a);
  free(b);
}

/* Big GEMMs are cut into parts for the kernel pool's threads (groups of
 * batch items, or row blocks of one item; never K): the result does not
 * depend on how many threads the pool has, bit for bit, for every
 * precision, a broadcast operand and an accumulated (beta 1) result. */
#include "tpu_rt.h"
TPU_TEST(mxu_pool_cut_thread_invariant) {
  static const int64_t shapes[][5] = {
      /* batch, m, n, k, B broadcast */
      {3, 300, 200, 100, 0},
      {4, 130, 96, 256, 1},
      {1, 257, 130, 300, 0},
      {6, 64, 80, 512, 0},
      {64, 128, 32, 128, 0}, /* small items, shared out to the pool */
      {25, 64, 96, 200, 1},
      {64, 128, 32, 128, 2}, /* small items, A transposed (read in place) */
  };
  const int saved = tpurt_num_threads();
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    const int64_t bt = shapes[s][0], m = shapes[s][1], n = shapes[s][2], k = shapes[s][3];
    const int64_t sbb = shapes[s][4] == 1 ? 0 : k * n, nb = shapes[s][4] == 1 ? 1 : bt;
    const int64_t sam = shapes[s][4] == 2 ? 1 : k, sak = shapes[s][4] == 2 ? m : 1;
    float *a = malloc(sizeof(float) * bt * m * k), *b = malloc(sizeof(float) * nb * k * n);
    float *c0 = malloc(sizeof(float) * bt * m * n);
    for (int64_t i = 0; i < bt * m * k; i++) a[i] = (float)urand();
    for (int64_t i = 0; i < nb * k * n; i++) b[i] = (float)urand();
    for (int64_t i = 0; i < bt * m * n; i++) c0[i] = (float)urand();
    for (int prec = TPU_PREC_DEFAULT; prec <= TPU_PREC_FP32; prec++)
      for (int beta = 0; beta <= 1; beta++) {
        float *want = malloc(sizeof(float) * bt * m * n), *got = malloc(sizeof(float) * bt * m * n);
        for (int nt = 1; nt <= 3; nt++) {
          float *c = nt == 1 ? want : got;
          memcpy(c, c0, sizeof(float) * bt * m * n);
          tpurt_set_num_threads(nt);
          CHECK_OK(tpumxu_gemm(TPU_F32, prec, bt, m, n, k, 1.0, a, m * k, sam, sak, b, sbb, n, 1,
                               beta, c, m * n, n, 1));
          if (nt > 1) CHECK(memcmp(want, got, sizeof(float) * bt * m * n) == 0);
        }
        /* and right (FP32: f32 products), whatever the operand layout */
        for (int64_t bi = 0; bi < bt && prec == TPU_PREC_FP32; bi++)
          for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
              double r = beta ? c0[(bi * m + i) * n + j] : 0;
              for (int64_t q = 0; q < k; q++)
                r += (double)a[bi * m * k + i * sam + q * sak] *
                     b[(nb == 1 ? 0 : bi) * k * n + q * n + j];
              CHECK(fabs(want[(bi * m + i) * n + j] - r) <= 1e-4 * (1 + fabs(r)));
            }
        free(want);
        free(got);
      }
    free(a);
    free(b);
    free(c0);
  }
  tpurt_set_num_threads(saved);
}

/* test_spectral.c - EIGH / SVD: IR builders, the Jacobi executors and the
 * _linalg_eigh / _linalg_svd lowerings. References are independent of the
 * code under test: defining identities (A V = V diag(w), A = U S Vh,
 * orthonormality, ordering), matrices with known spectra, and power
 * iteration for the largest eigenvalue / singular value. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "test_lower_util.h"
#include "tpu_exec.h"
#include "tpu_ir.h"
#include "tpu_test.h"

/* deterministic values in [-1, 1) */
static double rnd(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(*s >> 11) / 4503599627370496.0 - 1.0;
}

/* element (i, j) of matrix `b` of a [..., r, c] view */
static double el(const tpu_view *v, int64_t b, int64_t i, int64_t j) {
  int64_t r = v->sizes[v->ndim - 2], c = v->sizes[v->ndim - 1];
  return lt_get(v, (b * r + i) * c + j);
}

/* largest |eigenvalue| of the symmetric n x n S by power iteration */
static double power_iter(const double *S, int n) {
  double x[16], y[16], lam = 0;
  for (int i = 0; i < n; i++) x[i] = 1.0 + 0.1 * i;
  for (int it = 0; it < 5000; it++) {
    double nr = 0;
    for (int i = 0; i < n; i++) {
      y[i] = 0;
      for (int j = 0; j < n; j++) y[i] += S[i * n + j] * x[j];
      nr += y[i] * y[i];
    }
    nr = sqrt(nr);
    if (nr == 0) return 0;
    for (int i = 0; i < n; i++) x[i] = y[i] / nr;
    lam = nr;
  }
  return lam;
}

static lt_result run_eigh(tpu_view a, const char *uplo, int compute_v) {
  tpulw_arg args[3] = {lt_tensor("A", a), lt_str("UPLO", uplo),
                       lt_bool("compute_v", compute_v)};
  return lt_run("_linalg_eigh", "", args, 3);
}

static lt_result run_svd(tpu_view a, int full, int compute_uv) {
  tpulw_arg args[4] = {lt_tensor("A", a), lt_bool("full_matrices", full),
                       lt_bool("compute_uv", compute_uv), lt_none("driver")};
  return lt_run("_linalg_svd", "", args, 4);
}

TPU_TEST(spectral_ir_builders) {
  tpuir_graph *g = tpuir_graph_new();
  int64_t s3[3] = {2, 4, 4}, s2[2] = {3, 5}, s1[1] = {4};
  tpuir_val x = tpuir_param(g, TPU_F32, 3, s3);
  tpuir_val y = tpuir_param(g, TPU_F64, 2, s2);
  tpuir_val z = tpuir_param(g, TPU_I32, 2, s2);
  tpuir_val v1 = tpuir_param(g, TPU_F32, 1, s1);
  int dt, nd;
  int64_t sz[TPU_MAX_DIMS];
  tpuir_val e = tpuir_eigh(g, x, 1, 1, 0);
  CHECK(e >= 0);
  CHECK_OK(tpuir_value_info(g, e, &dt, &nd, sz));
  CHECK(dt == TPU_F32 && nd == 3 && sz[0] == 2 && sz[1] == 5 && sz[2] == 4);
  e = tpuir_eigh(g, x, 0, 0, 1);
  CHECK_OK(tpuir_value_info(g, e, &dt, &nd, sz));
  CHECK(nd == 3 && sz[1] == 1 && sz[2] == 4);
  CHECK(tpuir_eigh(g, y, 1, 1, 0) == TPU_E_INVALID);  /* not square */
  CHECK(tpuir_eigh(g, z, 1, 1, 0) == TPU_E_TYPE);
  CHECK(tpuir_svd(g, v1, 0, 1, 0) == TPU_E_INVALID);  /* rank 1 */
  tpuir_val s = tpuir_svd(g, y, 0, 1, 0); /* k = 3: 3 + 3*3 + 3*5 */
  CHECK_OK(tpuir_value_info(g, s, &dt, &nd, sz));
  CHECK(dt == TPU_F64 && nd == 1 && sz[0] == 3 + 9 + 15);
  s = tpuir_svd(g, y, 1, 1, 0); /* 3 + 3*3 + 5*5 */
  CHECK_OK(tpuir_value_info(g, s, &dt, &nd, sz));
  CHECK(sz[0] == 3 + 9 + 25);
  s = tpuir_svd(g, y, 1, 0, 0);
  CHECK_OK(tpuir_value_info(g, s, &dt, &nd, sz));
  CHECK(sz[0] == 3);
  char buf[4096];
  tpuir_dump(g, buf, sizeof buf);
  CHECK(strstr(buf, "eigh(") && strstr(buf, "uplo=L") && strstr(buf, "uplo=U"));
  CHECK(strstr(buf, "svd(") && strstr(buf, "full_matrices=1"));
  tpuir_graph_free(g);
  /* every attribute reaches the hash */
  uint64_t h[4];
  for (int k = 0; k < 4; k++) {
    tpuir_graph *q = tpuir_graph_new();
    tpuir_val p = tpuir_param(q, TPU_F32, 3, s3);
    tpuir_val r = tpuir_eigh(q, p, k != 1, k != 2, k == 3);
    tpuir_set_outputs(q, 1, &r);
    h[k] = TEST_IR_HASH(q);
    tpuir_graph_free(q);
  }
  for (int i = 0; i < 4; i++)
    for (int j = i + 1; j < 4; j++) CHECK(h[i] != h[j]);
}

/* known spectrum: [[2,1],[1,2]] -> 1, 3; diag -> sorted diagonal */
TPU_TEST(spectral_eigh_known) {
  int64_t sz[2] = {2, 2};
  double a[4] = {2, 1, 1, 2};
  tpu_view A = lt_from(TPU_F64, 2, sz, a);
  lt_result r = run_eigh(A, "L", 1);
  CHECK_OK(r.rc);
  CHECK(r.nout == 2 && r.out[0].ndim == 1 && r.out[1].ndim == 2);
  CHECK_NEAR(lt_get(&r.out[0], 0), 1.0, 1e-14);
  CHECK_NEAR(lt_get(&r.out[0], 1), 3.0, 1e-14);
  /* eigenvector of 3 is (1,1)/sqrt2 (sign fixed: largest component > 0) */
  CHECK_NEAR(fabs(el(&r.out[1], 0, 0, 1)), sqrt(0.5), 1e-14);
  CHECK_NEAR(el(&r.out[1], 0, 1, 1), el(&r.out[1], 0, 0, 1), 1e-14);
  lt_result_free(&r);
  lt_free(&A);
  int64_t s3[2] = {3, 3};
  double d[9] = {5, 0, 0, 0, -2, 0, 0, 0, 1};
  A = lt_from(TPU_F32, 2, s3, d);
  r = run_eigh(A, "U", 0);
  CHECK_OK(r.rc);
  CHECK(r.out[1].ndim == 1 && r.out[1].sizes[0] == 0);
  double want[3] = {-2, 1, 5};
  CHECK_VALS(r.out[0], want, 3, 1e-6);
  lt_result_free(&r);
  lt_free(&A);
}

/* random symmetric matrices, batched: A V = V diag(w), V^T V = I,
 * ascending, the largest |w| equals power iteration's; the unread triangle
 * holds garbage */
TPU_TEST(spectral_eigh_random) {
  uint64_t seed = 7;
  for (int dti = 0; dti < 2; dti++) {
    int dt = dti ? TPU_F64 : TPU_F32;
    double tol = dt == TPU_F64 ? 1e-12 : 2e-5;
    for (int lower = 0; lower < 2; lower++) {
      int n = 7, B = 3;
      int64_t sz[3] = {B, n, n};
      tpu_view A = lt_new(dt, 3, sz);
      double S[3][49];
      for (int b = 0; b < B; b++)
        for (int i = 0; i < n; i++)
          for (int j = 0; j <= i; j++) {
            double v = rnd(&seed);
            if (dt == TPU_F32) v = (float)v;
            S[b][i * n + j] = S[b][j * n + i] = v;
            lt_set(&A, (b * n + i) * n + j, lower ? v : 99.0);
            lt_set(&A, (b * n + j) * n + i, lower ? 99.0 : v);
            if (i == j) lt_set(&A, (b * n + i) * n + i, v);
          }
      lt_result r = run_eigh(A, lower ? "L" : "U", 1);
      CHECK_OK(r.rc);
      const tpu_view *w = &r.out[0], *V = &r.out[1];
      for (int b = 0; b < B; b++) {
        double mx = 0;
        for (int j = 0; j < n; j++) {
          double wj = lt_get(w, b * n + j);
          if (j) CHECK(wj >= lt_get(w, b * n + j - 1));
          if (fabs(wj) > mx) mx = fabs(wj);
          for (int i = 0; i < n; i++) {
            double av = 0;
            for (int k = 0; k < n; k++) av += S[b][i * n + k] * el(V, b, k, j);
            CHECK_NEAR(av, wj * el(V, b, i, j), tol * 10);
          }
          for (int j2 = 0; j2 < n; j2++) {
            double d = 0;
            for (int k = 0; k < n; k++) d += el(V, b, k, j) * el(V, b, k, j2);
            CHECK_NEAR(d, j == j2 ? 1.0 : 0.0, tol * 10);
          }
        }
        CHECK_NEAR(mx, power_iter(S[b], n), tol * 100);
      }
      lt_result_free(&r);
      lt_free(&A);
    }
  }
}

/* A = U diag(S) Vh, orthonormal U / Vh (full bases too), descending S,
 * S[0] = sqrt(largest eigenvalue of A^T A) by power iteration; tall, wide,
 * square; a transposed (non-contiguous) operand */
TPU_TEST(spectral_svd_random) {
  uint64_t seed = 11;
  int shapes[4][2] = {{5, 3}, {3, 5}, {4, 4}, {6, 1}};
  for (int dti = 0; dti < 2; dti++) {
    int dt = dti ? TPU_F64 : TPU_F32;
    double tol = dt == TPU_F64 ? 1e-12 : 2e-5;
    for (int sh = 0; sh < 4; sh++)
      for (int full = 0; full < 2; full++)
        for (int trans = 0; trans < 2; trans++) {
          int m = shapes[sh][0], n = shapes[sh][1], k = m < n ? m : n, B = 2;
          /* storage [B, n, m] viewed transposed when trans */
          int64_t sz[3] = {B, trans ? n : m, trans ? m : n};
          tpu_view st = lt_new(dt, 3, sz);
          tpu_view A = st;
          if (trans) {
            A.sizes[1] = m;
            A.sizes[2] = n;
            A.strides[1] = 1;
            A.strides[2] = m;
          }
          double M[2][36];
          for (int b = 0; b < B; b++)
            for (int i = 0; i < m; i++)
              for (int j = 0; j < n; j++) {
                double v = rnd(&seed);
                if (dt == TPU_F32) v = (float)v;
                M[b][i * n + j] = v;
                lt_set(&A, (b * m + i) * n + j, v);
              }
          lt_result r = run_svd(A, full, 1);
          CHECK_OK(r.rc);
          const tpu_view *U = &r.out[0], *S = &r.out[1], *Vh = &r.out[2];
          int uc = full ? m : k, vr = full ? n : k;
          CHECK(U->sizes[1] == m && U->sizes[2] == uc);
          CHECK(S->sizes[1] == k);
          CHECK(Vh->sizes[1] == vr && Vh->sizes[2] == n);
          for (int b = 0; b < B; b++) {
            for (int j = 1; j < k; j++)
              CHECK(lt_get(S, b * k + j) <= lt_get(S, b * k + j - 1));
            for (int i = 0; i < m; i++)
              for (int j = 0; j < n; j++) {
                double s = 0;
                for (int q = 0; q < k; q++)
                  s += el(U, b, i, q) * lt_get(S, b * k + q) * el(Vh, b, q, j);
                CHECK_NEAR(s, M[b][i * n + j], tol * 10);
              }
            for (int p = 0; p < uc; p++)
              for (int q = 0; q < uc; q++) {
                double d = 0;
                for (int i = 0; i < m; i++) d += el(U, b, i, p) * el(U, b, i, q);
                CHECK_NEAR(d, p == q ? 1.0 : 0.0, tol * 10);
              }
            for (int p = 0; p < vr; p++)
              for (int q = 0; q < vr; q++) {
                double d = 0;
                for (int j = 0; j < n; j++) d += el(Vh, b, p, j) * el(Vh, b, q, j);
                CHECK_NEAR(d, p == q ? 1.0 : 0.0, tol * 10);
              }
            double G[36];
            for (int i = 0; i < n; i++)
              for (int j = 0; j < n; j++) {
                G[i * n + j] = 0;
                for (int q = 0; q < m; q++) G[i * n + j] += M[b][q * n + i] * M[b][q * n + j];
              }
            CHECK_NEAR(lt_get(S, b * k), sqrt(power_iter(G, n)), tol * 100);
          }
          lt_result_free(&r);
          /* compute_uv = false: the same S, empty U / Vh */
          r = run_svd(A, full, 0);
          CHECK_OK(r.rc);
          CHECK(r.out[0].ndim == 1 && r.out[0].sizes[0] == 0);
          CHECK(r.out[2].ndim == 1 && r.out[2].sizes[0] == 0);
          CHECK(r.out[1].sizes[1] == k);
          lt_result_free(&r);
          lt_free(&st);
        }
  }
}

/* rank-deficient and zero matrices: bases still orthonormal */
TPU_TEST(spectral_svd_rank_deficient) {
  int64_t sz[2] = {4, 3};
  /* rank 1: outer product (1,2,3,4) x (1,-1,2) */
  double a[12];
  double u[4] = {1, 2, 3, 4}, v[3] = {1, -1, 2};
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 3; j++) a[i * 3 + j] = u[i] * v[j];
  for (int zero = 0; zero < 2; zero++) {
    if (zero) memset(a, 0, sizeof a);
    tpu_view A = lt_from(TPU_F64, 2, sz, a);
    lt_result r = run_svd(A, 1, 1);
    CHECK_OK(r.rc);
    const tpu_view *U = &r.out[0], *S = &r.out[1], *Vh = &r.out[2];
    CHECK_NEAR(lt_get(S, 0), zero ? 0.0 : sqrt(30.0) * sqrt(6.0), 1e-12);
    CHECK_NEAR(lt_get(S, 1), 0.0, 1e-12);
    CHECK_NEAR(lt_get(S, 2), 0.0, 1e-12);
    for (int p = 0; p < 4; p++)
      for (int q = 0; q < 4; q++) {
        double d = 0;
        for (int i = 0; i < 4; i++) d += el(U, 0, i, p) * el(U, 0, i, q);
        CHECK_NEAR(d, p == q ? 1.0 : 0.0, 1e-12);
      }
    for (int p = 0; p < 3; p++)
      for (int q = 0; q < 3; q++) {
        double d = 0;
        for (int j = 0; j < 3; j++) d += el(Vh, 0, p, j) * el(Vh, 0, q, j);
        CHECK_NEAR(d, p == q ? 1.0 : 0.0, 1e-12);
      }
    for (int i = 0; i < 4; i++)
      for (int j = 0; j < 3; j++)
        CHECK_NEAR(el(U, 0, i, 0) * lt_get(S, 0) * el(Vh, 0, 0, j), a[i * 3 + j], 1e-12);
    lt_result_free(&r);
    lt_free(&A);
  }
}

/* empty matrices: 0 x 3 full -> Vh = I; empty batch */
TPU_TEST(spectral_empty) {
  int64_t sz[2] = {0, 3};
  tpu_view A = lt_new(TPU_F32, 2, sz);
  lt_result r = run_svd(A, 1, 1);
  CHECK_OK(r.rc);
  CHECK(r.out[0].sizes[0] == 0 && r.out[0].sizes[1] == 0);
  CHECK(r.out[1].sizes[0] == 0);
  CHECK(r.out[2].sizes[0] == 3 && r.out[2].sizes[1] == 3);
  double eye[9] = {1, 0, 0, 0, 1, 0, 0, 0, 1};
  CHECK_VALS(r.out[2], eye, 9, 0);
  lt_result_free(&r);
  lt_free(&A);
  int64_t e3[3] = {0, 4, 4};
  A = lt_new(TPU_F64, 3, e3);
  r = run_eigh(A, "L", 1);
  CHECK_OK(r.rc);
  CHECK(r.out[0].ndim == 2 && r.out[0].sizes[0] == 0 && r.out[0].sizes[1] == 4);
  CHECK(r.out[1].ndim == 3 && r.out[1].sizes[1] == 4);
  lt_result_free(&r);
  lt_free(&A);
}

/* NaN -> TPU_E_LINALG with PyTorch CPU's message; inf -> NaN results;
 * shape / dtype / UPLO errors at prepare */
TPU_TEST(spectral_errors) {
  int64_t sz[3] = {2, 3, 3};
  double a[18];
  for (int i = 0; i < 18; i++) a[i] = (i % 4) - 1.5;
  a[9 + 3] = NAN; /* batch 1, (1, 0): read by "L" only */
  tpu_view A = lt_from(TPU_F32, 3, sz, a);
  lt_result r = run_eigh(A, "L", 1);
  CHECK(r.rc == TPU_E_LINALG);
  CHECK(strstr(tpu_last_error(), "linalg.eigh: (Batch element 1): The algorithm "
                                  "failed to converge") != NULL);
  CHECK(strstr(tpu_last_error(), "(error code: 2).") != NULL);
  lt_result_free(&r);
  r = run_eigh(A, "U", 1); /* the NaN is not read */
  CHECK_OK(r.rc);
  lt_result_free(&r);
  r = run_svd(A, 0, 0);
  CHECK(r.rc == TPU_E_LINALG);
  CHECK(strstr(tpu_last_error(), "linalg.svd: (Batch element 1): The algorithm "
                                  "failed to converge because the input matrix "
                                  "contained non-finite values.") != NULL);
  lt_result_free(&r);
  lt_set(&A, 9 + 3, INFINITY);
  r = run_svd(A, 0, 1);
  CHECK_OK(r.rc);
  CHECK(isnan(lt_get(&r.out[1], 3)) && !isnan(lt_get(&r.out[1], 0)));
  lt_result_free(&r);
  lt_free(&A);
  int64_t s23[2] = {2, 3};
  A = lt_new(TPU_F32, 2, s23);
  r = run_eigh(A, "L", 1);
  CHECK(r.rc == TPU_E_INVALID);
  CHECK(strstr(tpu_last_error(), "must be batches of square matrices") != NULL);
  lt_free(&A);
  int64_t s33[2] = {3, 3};
  A = lt_new(TPU_F32, 2, s33);
  r = run_eigh(A, "X", 1);
  CHECK(r.rc == TPU_E_INVALID);
  lt_free(&A);
  A = lt_new(TPU_I64, 2, s33);
  r = run_eigh(A, "L", 1);
  CHECK(r.rc == TPU_E_UNSUPPORTED);
  r = run_svd(A, 0, 1);
  CHECK(r.rc == TPU_E_INVALID);
  CHECK(strstr(tpu_last_error(), "Expected a floating point") != NULL);
  lt_free(&A);
  int64_t s3[1] = {3};
  A = lt_new(TPU_F32, 1, s3);
  r = run_svd(A, 0, 1);
  CHECK(r.rc == TPU_E_INVALID);
  CHECK(strstr(tpu_last_error(), "at least 2 dimensions") != NULL);
  lt_free(&A);
}

/* larger matrices with clustered / repeated eigenvalues converge */
TPU_TEST(spectral_repeated) {
  int n = 24;
  int64_t sz[2] = {n, n};
  tpu_view A = lt_new(TPU_F64, 2, sz);
  /* Q diag(1,1,...,1,2,2,...) Q^T with a Householder Q */
  double h[24], hn = 0;
  uint64_t seed = 3;
  for (int i = 0; i < n; i++) {
    h[i] = rnd(&seed);
    hn += h[i] * h[i];
  }
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++) {
      double s = 0;
      for (int k = 0; k < n; k++) {
        double qik = (i == k) - 2 * h[i] * h[k] / hn, qjk = (j == k) - 2 * h[j] * h[k] / hn;
        s += qik * (k < n / 2 ? 1.0 : 2.0) * qjk;
      }
      lt_set(&A, i * n + j, s);
    }
  lt_result r = run_eigh(A, "L", 1);
  CHECK_OK(r.rc);
  for (int j = 0; j < n; j++) CHECK_NEAR(lt_get(&r.out[0], j), j < n / 2 ? 1.0 : 2.0, 1e-12);
  lt_result_free(&r);
  r = run_svd(A, 0, 1);
  CHECK_OK(r.rc);
  for (int j = 0; j < n; j++) CHECK_NEAR(lt_get(&r.out[1], j), j < n / 2 ? 2.0 : 1.0, 1e-12);
  lt_result_free(&r);
  lt_free(&A);
}

/* a matrix large enough for the parallel Jacobi rounds (and a wide one) */
TPU_TEST(spectral_svd_large) {
  int m = 400, n = 170;
  uint64_t seed = 5;
  for (int wide = 0; wide < 2; wide++) {
    int64_t sz[2] = {wide ? n : m, wide ? m : n};
    tpu_view A = lt_new(TPU_F64, 2, sz);
    int64_t numel = (int64_t)m * n;
    for (int64_t i = 0; i < numel; i++) lt_set(&A, i, rnd(&seed));
    lt_result r = run_svd(A, 0, 1);
    CHECK_OK(r.rc);
    const tpu_view *U = &r.out[0], *S = &r.out[1], *Vh = &r.out[2];
    int64_t rr = sz[0], cc = sz[1], k = n;
    double err = 0, orth = 0;
    for (int64_t i = 0; i < rr; i++)
      for (int64_t j = 0; j < cc; j++) {
        double s = 0;
        for (int64_t q = 0; q < k; q++)
          s += el(U, 0, i, q) * lt_get(S, q) * el(Vh, 0, q, j);
        err = fmax(err, fabs(s - lt_get(&A, i * cc + j)));
      }
    for (int64_t p = 0; p < k; p += 7)
      for (int64_t q = 0; q < k; q++) {
        double d = 0;
        for (int64_t i = 0; i < rr; i++) d += el(U, 0, i, p) * el(U, 0, i, q);
        orth = fmax(orth, fabs(d - (p == q)));
      }
    CHECK(err < 1e-11);
    CHECK(orth < 1e-11);
    for (int64_t q = 1; q < k; q++) CHECK(lt_get(S, q) <= lt_get(S, q - 1));
    lt_result_free(&r);
    lt_free(&A);
  }
}

/* an eigh large enough for the parallel Jacobi rounds */
TPU_TEST(spectral_eigh_large) {
  int n = 260;
  uint64_t seed = 9;
  int64_t sz[2] = {n, n};
  tpu_view A = lt_new(TPU_F64, 2, sz);
  for (int i = 0; i < n; i++)
    for (int j = 0; j <= i; j++) {
      double v = rnd(&seed);
      lt_set(&A, (int64_t)i * n + j, v);
      lt_set(&A, (int64_t)j * n + i, v);
    }
  lt_result r = run_eigh(A, "L", 1);
  CHECK_OK(r.rc);
  const tpu_view *w = &r.out[0], *V = &r.out[1];
  double err = 0, orth = 0;
  for (int j = 0; j < n; j += 3) {
    for (int i = 0; i < n; i++) {
      double av = 0;
      for (int k = 0; k < n; k++) av += lt_get(&A, (int64_t)i * n + k) * el(V, 0, k, j);
      err = fmax(err, fabs(av - lt_get(w, j) * el(V, 0, i, j)));
    }
    for (int q = 0; q < n; q++) {
      double d = 0;
      for (int k = 0; k < n; k++) d += el(V, 0, k, j) * el(V, 0, k, q);
      orth = fmax(orth, fabs(d - (j == q)));
    }
  }
  CHECK(err < 1e-11);
  CHECK(orth < 1e-11);
  for (int j = 1; j < n; j++) CHECK(lt_get(w, j) >= lt_get(w, j - 1));
  lt_result_free(&r);
  lt_free(&A);
}

/* the IR ops on f16 / bf16 operands (computed in double, rounded once) */
TPU_TEST(spectral_ir_half) {
  int dts[2] = {TPU_F16, TPU_BF16};
  for (int di = 0; di < 2; di++) {
    int dt = dts[di];
    tpuir_graph *g = tpuir_graph_new();
    int64_t sz[2] = {2, 2};
    tpuir_val x = tpuir_param(g, dt, 2, sz);
    tpuir_val outs[2] = {tpuir_eigh(g, x, 1, 1, 0), tpuir_svd(g, x, 0, 0, 0)};
    CHECK_OK(tpuir_set_outputs(g, 2, outs));
    double a[4] = {2, 1, 1, 2};
    tpu_view in = lt_from(dt, 2, sz, a);
    int64_t es[2] = {3, 2}, ss[1] = {2};
    tpu_view ov[2] = {lt_new(dt, 2, es), lt_new(dt, 1, ss)};
    CHECK_OK(tpux_run(g, 1, &in, 2, ov));
    double want_w[2] = {1, 3}, want_s[2] = {3, 1};
    tpu_view w = ov[0];
    w.ndim = 1;
    w.sizes[0] = 2;
    w.strides[0] = 1;
    CHECK_VALS(w, want_w, 2, 1e-2);
    for (int i = 2; i < 6; i++) CHECK_NEAR(fabs(lt_get(&ov[0], i)), sqrt(0.5), 1e-2);
    /* vectors (1,-1) and (1,1) up to sign */
    CHECK(lt_get(&ov[0], 2) * lt_get(&ov[0], 4) < 0);
    CHECK(lt_get(&ov[0], 3) * lt_get(&ov[0], 5) > 0);
    CHECK_VALS(ov[1], want_s, 2, 1e-2);
    lt_free(&in);
    lt_free(&ov[0]);
    lt_free(&ov[1]);
    tpuir_graph_free(g);
  }
}

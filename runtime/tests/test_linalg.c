/* test_linalg.c - dense linear algebra IR ops (CHOLESKY, TRIANGULAR_SOLVE,
 * LU, LU_PIVOTS_TO_PERM, GEQRF, HOUSEHOLDER_PRODUCT) on the vTPU, checked
 * against independent references in long double: reconstruction of A from
 * the factors, residuals of solves, a naive Gaussian elimination for
 * pivots/info, and orthogonality of Q. */
#include <math.h>
#include <stdio.h>

#include "test_exec_util.h"
#include "tpu_test.h"

/* run g (one param x, or two) into freshly allocated outputs */
static int run_graph(tpuir_graph *g, int nin, const tpu_view *ins, int nout, tarr *outs) {
  tpu_view ov[8];
  if (nout > 8) return TPU_E_INVALID;
  for (int i = 0; i < nout; i++) {
    int dt, nd;
    int64_t sz[TPU_MAX_DIMS];
    tpuir_value_info(g, tpuir_output(g, i), &dt, &nd, sz);
    outs[i] = ta_new(dt, nd, sz);
    ov[i] = outs[i].v;
  }
  return tpux_run(g, nin, ins, nout, ov);
}

static tarr rand_mat(int dt, int nb, int64_t m, int64_t n, uint64_t *seed) {
  int64_t sz[3] = {nb, m, n};
  tarr a = ta_new(dt, 3, sz);
  for (int64_t i = 0; i < nb * m * n; i++) tv_set(&a.v, i, trand(seed, -1, 1));
  return a;
}

#define AT(v, b, r, c, n_, m_) tv_get(v, ((b) * (m_) + (r)) * (n_) + (c))

TPU_TEST(linalg_cholesky_reconstructs) {
  uint64_t seed = 11;
  for (int dt = 0; dt < 2; dt++) {
    int dtype = dt ? TPU_F64 : TPU_F32;
    for (int lower = 0; lower < 2; lower++) {
      const int nb = 3;
      const int64_t n = 5;
      tarr g0 = rand_mat(TPU_F64, nb, n, n, &seed);
      int64_t sz[3] = {nb, n, n};
      tarr a = ta_new(dtype, 3, sz);
      for (int b = 0; b < nb; b++) /* A = G G^T + n I */
        for (int r = 0; r < n; r++)
          for (int c = 0; c < n; c++) {
            long double s = r == c ? n : 0;
            for (int k = 0; k < n; k++) s += AT(&g0.v, b, r, k, n, n) * AT(&g0.v, b, c, k, n, n);
            tv_set(&a.v, (b * n + r) * n + c, (double)s);
          }
      tpuir_graph *g = tpuir_graph_new();
      tpuir_val x = tpuir_param(g, dtype, 3, sz);
      tpuir_val outs[2] = {tpuir_cholesky(g, x, lower, TPUIR_CHOL_FACTOR),
                           tpuir_cholesky(g, x, lower, TPUIR_CHOL_INFO)};
      CHECK(outs[0] >= 0 && outs[1] >= 0);
      CHECK_OK(tpuir_set_outputs(g, 2, outs));
      tarr o[2];
      CHECK_OK(run_graph(g, 1, &a.v, 2, o));
      double tol = dtype == TPU_F32 ? 1e-4 : 1e-11;
      for (int b = 0; b < nb; b++) {
        CHECK(tv_get(&o[1].v, b) == 0);
        for (int r = 0; r < n; r++)
          for (int c = 0; c < n; c++) {
            /* other triangle zero */
            if (lower ? c > r : c < r) CHECK(AT(&o[0].v, b, r, c, n, n) == 0);
            long double s = 0;
            for (int k = 0; k < n; k++)
              s += lower ? (long double)AT(&o[0].v, b, r, k, n, n) * AT(&o[0].v, b, c, k, n, n)
                         : (long double)AT(&o[0].v, b, k, r, n, n) * AT(&o[0].v, b, k, c, n, n);
            CHECK(fabsl(s - AT(&a.v, b, r, c, n, n)) < tol * n);
          }
      }
      free(o[0].mem);
      free(o[1].mem);
      free(a.mem);
      free(g0.mem);
      tpuir_graph_free(g);
    }
  }
}

TPU_TEST(linalg_cholesky_info_and_check) {
  int64_t sz[2] = {3, 3};
  tarr a = ta_new(TPU_F64, 2, sz);
  double v[9] = {4, 0, 0, 0, -1, 0, 0, 0, 1}; /* minor of order 2 fails */
  for (int i = 0; i < 9; i++) tv_set(&a.v, i, v[i]);
  tpuir_graph *g = tpuir_graph_new();
  tpuir_val x = tpuir_param(g, TPU_F64, 2, sz);
  tpuir_val info = tpuir_cholesky(g, x, 1, TPUIR_CHOL_INFO);
  CHECK_OK(tpuir_set_outputs(g, 1, &info));
  tarr o;
  CHECK_OK(run_graph(g, 1, &a.v, 1, &o));
  CHECK(o.v.ndim == 0 && o.v.dtype == TPU_I32 && tv_get(&o.v, 0) == 2);
  free(o.mem);
  tpuir_graph_free(g);
  /* checking variant fails at run time, even when its value is unused */
  g = tpuir_graph_new();
  x = tpuir_param(g, TPU_F64, 2, sz);
  tpuir_val chk = tpuir_cholesky(g, x, 1 | TPUIR_CHOL_CHECK, TPUIR_CHOL_INFO);
  CHECK(chk >= 0);
  tpuir_val f = tpuir_cholesky(g, x, 1, TPUIR_CHOL_FACTOR);
  CHECK_OK(tpuir_set_outputs(g, 1, &f));
  CHECK(run_graph(g, 1, &a.v, 1, &o) == TPU_E_LINALG);
  CHECK(strstr(tpu_last_error(), "leading minor of order 2") != NULL);
  free(o.mem);
  tpuir_graph_free(g);
  free(a.mem);
}

TPU_TEST(linalg_builder_errors) {
  tpuir_graph *g = tpuir_graph_new();
  int64_t sq[2] = {3, 3}, rect[2] = {3, 4};
  tpuir_val i = tpuir_param(g, TPU_I64, 2, sq);
  tpuir_val r = tpuir_param(g, TPU_F32, 2, rect);
  tpuir_val v = tpuir_param(g, TPU_F32, 1, sq);
  CHECK(tpuir_cholesky(g, i, 1, 0) == TPU_E_TYPE);
  CHECK(tpuir_cholesky(g, r, 1, 0) == TPU_E_INVALID);
  CHECK(tpuir_lu(g, v, 0) == TPU_E_INVALID);
  CHECK(tpuir_lu(g, r, 7) == TPU_E_INVALID);
  CHECK(tpuir_triangular_solve(g, r, r, 1, 1, 0, 0) == TPU_E_INVALID);
  CHECK(tpuir_householder_product(g, r, v) == TPU_E_INVALID); /* m < n */
  tpuir_graph_free(g);
}

TPU_TEST(linalg_triangular_solve_all_flags) {
  uint64_t seed = 5;
  const int nb = 2;
  const int64_t k = 4, m0 = 3;
  for (int flags = 0; flags < 16; flags++) {
    int left = flags & 1, lower = (flags >> 1) & 1, unit = (flags >> 2) & 1, tr = (flags >> 3) & 1;
    for (int dt = 0; dt < 2; dt++) {
      int dtype = dt ? TPU_F64 : TPU_F32;
      tarr a = rand_mat(dtype, nb, k, k, &seed);
      for (int b = 0; b < nb; b++)
        for (int d = 0; d < k; d++) tv_set(&a.v, (b * k + d) * k + d, 3.0 + d); /* well conditioned */
      int64_t m = left ? k : m0, n = left ? m0 : k;
      tarr bb = rand_mat(dtype, nb, m, n, &seed);
      tpuir_graph *g = tpuir_graph_new();
      int64_t asz[3] = {nb, k, k}, bsz[3] = {nb, m, n};
      tpuir_val pa = tpuir_param(g, dtype, 3, asz), pb = tpuir_param(g, dtype, 3, bsz);
      tpuir_val x = tpuir_triangular_solve(g, pa, pb, left, lower, unit, tr);
      CHECK(x >= 0);
      CHECK_OK(tpuir_set_outputs(g, 1, &x));
      tpu_view ins[2] = {a.v, bb.v};
      tarr o;
      CHECK_OK(run_graph(g, 2, ins, 1, &o));
      double tol = dtype == TPU_F32 ? 1e-5 : 1e-12;
      /* residual of op(T) X = B / X op(T) = B with T the referenced triangle */
      for (int b = 0; b < nb; b++)
        for (int r = 0; r < m; r++)
          for (int c = 0; c < n; c++) {
            long double s = 0;
            for (int q = 0; q < k; q++) {
              int64_t tr_r = left ? r : q, tr_c = left ? q : c; /* index into op(T) */
              int64_t ar = tr ? tr_c : tr_r, ac = tr ? tr_r : tr_c;
              int in = lower ? ac <= ar : ac >= ar;
              long double t = !in ? 0 : (ar == ac && unit) ? 1 : AT(&a.v, b, ar, ac, k, k);
              long double xv = left ? AT(&o.v, b, q, c, n, m) : AT(&o.v, b, r, q, n, m);
              s += t * xv;
            }
            CHECK(fabsl(s - AT(&bb.v, b, r, c, n, m)) < tol * 10);
          }
      free(o.mem);
      free(a.mem);
      free(bb.mem);
      tpuir_graph_free(g);
    }
  }
}

/* naive partial-pivoting elimination in long double: pivots (1-based), info */
static int ref_getrf(const tpu_view *a, int b, int64_t m, int64_t n, int *piv) {
  long double w[8][8];
  for (int r = 0; r < m; r++)
    for (int c = 0; c < n; c++) w[r][c] = AT(a, b, r, c, n, m);
  int info = 0;
  int64_t k = m < n ? m : n;
  for (int j = 0; j < k; j++) {
    int p = j;
    for (int i = j + 1; i < m; i++)
      if (fabsl(w[i][j]) > fabsl(w[p][j])) p = i;
    piv[j] = p + 1;
    if (w[p][j] == 0) {
      if (!info) info = j + 1;
      continue;
    }
    for (int c = 0; c < n; c++) {
      long double t = w[j][c];
      w[j][c] = w[p][c];
      w[p][c] = t;
    }
    for (int i = j + 1; i < m; i++) {
      long double l = w[i][j] / w[j][j];
      for (int c = j; c < n; c++) w[i][c] -= l * w[j][c];
    }
  }
  return info;
}

TPU_TEST(linalg_lu_reconstructs) {
  uint64_t seed = 77;
  static const int64_t shapes[][2] = {{5, 5}, {4, 6}, {6, 4}, {1, 3}, {3, 3}};
  for (int s = 0; s < 5; s++) {
    int64_t m = shapes[s][0], n = shapes[s][1], k = m < n ? m : n;
    const int nb = 2;
    tarr a = rand_mat(TPU_F64, nb, m, n, &seed);
    if (s == 4) /* singular: row 2 = 2 * row 0, zero column 2 in row 1 */
      for (int b = 0; b < nb; b++)
        for (int c = 0; c < n; c++) tv_set(&a.v, (b * m + 2) * n + c, 2 * AT(&a.v, b, 0, c, n, m));
    tpuir_graph *g = tpuir_graph_new();
    int64_t sz[3] = {nb, m, n};
    tpuir_val x = tpuir_param(g, TPU_F64, 3, sz);
    tpuir_val piv = tpuir_lu(g, x, TPUIR_LU_PIVOTS);
    tpuir_val outs[5] = {tpuir_lu(g, x, TPUIR_LU_PACKED), piv, tpuir_lu(g, x, TPUIR_LU_INFO),
                         tpuir_lu(g, x, TPUIR_LU_PERM), tpuir_lu_pivots_to_perm(g, piv, m)};
    CHECK_OK(tpuir_set_outputs(g, 5, outs));
    tarr o[5];
    CHECK_OK(run_graph(g, 1, &a.v, 5, o));
    for (int b = 0; b < nb; b++) {
      int rp[8];
      int rinfo = ref_getrf(&a.v, b, m, n, rp);
      CHECK(tv_get(&o[2].v, b) == rinfo);
      for (int j = 0; j < k; j++) CHECK(tv_get(&o[1].v, b * k + j) == rp[j]);
      for (int i = 0; i < m; i++) CHECK(tv_get(&o[3].v, b * m + i) == tv_get(&o[4].v, b * m + i));
      /* (L U)[i] == A[perm[i]] */
      for (int r = 0; r < m; r++)
        for (int c = 0; c < n; c++) {
          long double s_ = 0;
          for (int q = 0; q <= (r < c ? r : c) && q < k; q++) {
            long double l = q == r ? 1 : AT(&o[0].v, b, r, q, n, m);
            s_ += l * AT(&o[0].v, b, q, c, n, m);
          }
          int pr = (int)tv_get(&o[3].v, b * m + r);
          CHECK(fabsl(s_ - AT(&a.v, b, pr, c, n, m)) < 1e-12);
          if (c < r && c < k) CHECK(fabs(AT(&o[0].v, b, r, c, n, m)) <= 1.0); /* |L| <= 1 */
        }
    }
    for (int i = 0; i < 5; i++) free(o[i].mem);
    free(a.mem);
    tpuir_graph_free(g);
  }
}

TPU_TEST(linalg_pivots_to_perm_range_error) {
  int64_t sz[1] = {3};
  tarr p = ta_new(TPU_I32, 1, sz);
  tv_set(&p.v, 0, 2);
  tv_set(&p.v, 1, 9);
  tv_set(&p.v, 2, 3);
  tpuir_graph *g = tpuir_graph_new();
  tpuir_val x = tpuir_param(g, TPU_I32, 1, sz);
  tpuir_val r = tpuir_lu_pivots_to_perm(g, x, 3);
  CHECK_OK(tpuir_set_outputs(g, 1, &r));
  tarr o;
  CHECK(run_graph(g, 1, &p.v, 1, &o) == TPU_E_INVALID);
  CHECK(strstr(tpu_last_error(), "pivots passed to lu_unpack") != NULL);
  free(o.mem);
  tv_set(&p.v, 1, 3);
  CHECK_OK(run_graph(g, 1, &p.v, 1, &o)); /* swaps 0<->1, 1<->2, 2<->2 */
  CHECK(tv_get(&o.v, 0) == 1 && tv_get(&o.v, 1) == 2 && tv_get(&o.v, 2) == 0);
  free(o.mem);
  free(p.mem);
  tpuir_graph_free(g);
}

TPU_TEST(linalg_qr_householder) {
  uint64_t seed = 3;
  static const int64_t shapes[][2] = {{5, 3}, {4, 4}, {3, 5}};
  for (int s = 0; s < 3; s++) {
    int64_t m = shapes[s][0], n = shapes[s][1], k = m < n ? m : n;
    const int nb = 2;
    tarr a = rand_mat(TPU_F64, nb, m, n, &seed);
    tpuir_graph *g = tpuir_graph_new();
    int64_t sz[3] = {nb, m, n};
    tpuir_val x = tpuir_param(g, TPU_F64, 3, sz);
    tpuir_val pk = tpuir_geqrf(g, x, TPUIR_QR_PACKED), tau = tpuir_geqrf(g, x, TPUIR_QR_TAU);
    /* Q from the first k columns (m x k) */
    int64_t st[3] = {0, 0, 0}, li[3] = {nb, m, k}, sd[3] = {1, 1, 1};
    tpuir_val q = tpuir_householder_product(g, tpuir_slice(g, pk, st, li, sd), tau);
    CHECK(q >= 0);
    tpuir_val outs[3] = {pk, tau, q};
    CHECK_OK(tpuir_set_outputs(g, 3, outs));
    tarr o[3];
    CHECK_OK(run_graph(g, 1, &a.v, 3, o));
    for (int b = 0; b < nb; b++) {
      for (int j = 0; j < k; j++) {
        double t = tv_get(&o[1].v, b * k + j);
        CHECK(t == 0 || (t >= 1 - 1e-12 && t <= 2 + 1e-12)); /* dlarfg: 1 <= tau <= 2 */
      }
      for (int r = 0; r < m; r++)
        for (int c = 0; c < n; c++) { /* Q R == A */
          long double s_ = 0;
          for (int q_ = 0; q_ < k && q_ <= c; q_++)
            s_ += (long double)AT(&o[2].v, b, r, q_, k, m) * AT(&o[0].v, b, q_, c, n, m);
          CHECK(fabsl(s_ - AT(&a.v, b, r, c, n, m)) < 1e-12);
        }
      for (int i = 0; i < k; i++)
        for (int j = 0; j < k; j++) { /* Q^T Q == I */
          long double s_ = 0;
          for (int r = 0; r < m; r++) s_ += (long double)AT(&o[2].v, b, r, i, k, m) * AT(&o[2].v, b, r, j, k, m);
          CHECK(fabsl(s_ - (i == j)) < 1e-12);
        }
    }
    for (int i = 0; i < 3; i++) free(o[i].mem);
    free(a.mem);
    tpuir_graph_free(g);
  }
}

TPU_TEST(linalg_dump_and_hash) {
  tpuir_graph *g1 = tpuir_graph_new(), *g2 = tpuir_graph_new();
  int64_t sz[2] = {3, 3};
  tpuir_val x1 = tpuir_param(g1, TPU_F32, 2, sz), x2 = tpuir_param(g2, TPU_F32, 2, sz);
  tpuir_val a = tpuir_cholesky(g1, x1, 1, 0), c = tpuir_cholesky(g2, x2, 0, 0);
  CHECK_OK(tpuir_set_outputs(g1, 1, &a));
  CHECK_OK(tpuir_set_outputs(g2, 1, &c));
  CHECK(TEST_IR_HASH(g1) != TEST_IR_HASH(g2));
  char buf[512];
  tpuir_dump(g1, buf, sizeof buf);
  CHECK(strstr(buf, "cholesky(%0) {lower=1, check=0, result=factor}") != NULL);
  tpuir_graph_free(g1);
  tpuir_graph_free(g2);
}

TPU_TEST(linalg_ldl_solve_residual) {
  /* symmetric indefinite matrices (zero diagonal forces 2x2 pivots): the
   * factor + solve pair must solve A X = B */
  uint64_t seed = 19;
  const int nb = 3;
  const int64_t n = 6, k = 2;
  tarr a = rand_mat(TPU_F64, nb, n, n, &seed);
  for (int b = 0; b < nb; b++)
    for (int r = 0; r < n; r++)
      for (int c = 0; c <= r; c++) {
        double v = r == c ? (b == 0 ? 0.0 : AT(&a.v, b, r, c, n, n)) : AT(&a.v, b, r, c, n, n);
        tv_set(&a.v, (b * n + r) * n + c, v);
        tv_set(&a.v, (b * n + c) * n + r, v);
      }
  tarr bb = rand_mat(TPU_F64, nb, n, k, &seed);
  tpuir_graph *g = tpuir_graph_new();
  int64_t asz[3] = {nb, n, n}, bsz[3] = {nb, n, k};
  tpuir_val pa = tpuir_param(g, TPU_F64, 3, asz), pb = tpuir_param(g, TPU_F64, 3, bsz);
  tpuir_val ld = tpuir_ldl(g, pa, TPUIR_LDL_LD), piv = tpuir_ldl(g, pa, TPUIR_LDL_PIVOTS);
  tpuir_val outs[3] = {tpuir_ldl_solve(g, ld, piv, pb), piv, tpuir_ldl(g, pa, TPUIR_LDL_INFO)};
  CHECK_OK(tpuir_set_outputs(g, 3, outs));
  tpu_view ins[2] = {a.v, bb.v};
  tarr o[3];
  CHECK_OK(run_graph(g, 2, ins, 3, o));
  int neg = 0;
  for (int b = 0; b < nb; b++) {
    CHECK(tv_get(&o[2].v, b) == 0);
    for (int i = 0; i < n; i++) neg += tv_get(&o[1].v, b * n + i) < 0;
    for (int r = 0; r < n; r++)
      for (int c = 0; c < k; c++) {
        long double s = 0;
        for (int q = 0; q < n; q++) s += (long double)AT(&a.v, b, r, q, n, n) * AT(&o[0].v, b, q, c, k, n);
        CHECK(fabsl(s - AT(&bb.v, b, r, c, k, n)) < 1e-10);
      }
  }
  CHECK(neg > 0); /* at least one 2x2 block was used */
  for (int i = 0; i < 3; i++) free(o[i].mem);
  free(a.mem);
  free(bb.mem);
  tpuir_graph_free(g);
}

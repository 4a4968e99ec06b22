/* test_exec_epilogue.c - GEMM epilogue fusion in the vTPU executor: graphs
 * dot + elementwise region run with the epilogue on and off must give
 * bit-identical outputs, agree with an independent double reference, and
 * the fusion must (or must not) have happened where expected. */
#include <stdio.h>

#include "exec/vtpu/internal.h"
#include "test_exec_util.h"
#include "tpu_mxu.h"
#include "tpu_test.h"

#define MAXP 6
#define MAXO 3

static double tol_of(int dt) {
  return dt == TPU_F64 ? 1e-12 : dt == TPU_F32 ? 2e-5 : dt == TPU_F16 ? 8e-3 : 4e-2;
}

static tpuir_val cscal(tpuir_graph *g, int dt, double v, int nd, const int64_t *sz) {
  return tpuir_broadcast_in_dim(g, tpuir_const_f(g, dt, v), nd, sz, NULL);
}

/* g with the epilogue on and off (te_fusion_on_off); both runs must
 * succeed. */
static int run_both(tpuir_graph *g, int np, const tpu_view *ins, tarr *on,
                    int64_t *fused) {
  int rc;
  return te_fusion_on_off(TPUX_FUSE_EPILOGUE, g, np, ins, on, fused, &rc) && rc == TPU_OK;
}

typedef enum { ACT_NONE, ACT_RELU, ACT_GELU } act_kind;

static double act_ref(int act, double h) {
  if (act == ACT_RELU) return h > 0 ? h : 0;
  if (act == ACT_GELU) return 0.5 * h * (1 + erf(h * M_SQRT1_2)) * 1.7;
  return h;
}

/* y = act(X @ W + bias) (+ residual), X [M,K] or transposed [K,M], W [K,N]
 * or [N,K]; optional second output: the raw dot. */
static void linear_case2(int *tpu_test_failed_, int dt, int odt, int64_t M,
                         int64_t K, int64_t N, int act, int tx, int tw,
                         int resid, int raw_out, int expect_fused) {
  tpuir_graph *g = tpuir_graph_new();
  int64_t xs[2] = {tx ? K : M, tx ? M : K}, ws[2] = {tw ? N : K, tw ? K : N};
  int64_t bs[1] = {N}, os[2] = {M, N};
  tpuir_val X = tpuir_param(g, dt, 2, xs), W = tpuir_param(g, dt, 2, ws);
  tpuir_val B = tpuir_param(g, odt, 1, bs);
  tpuir_val Rs = resid ? tpuir_param(g, odt, 2, os) : -1;
  int64_t lc[1] = {tx ? 0 : 1}, rc_[1] = {tw ? 1 : 0};
  tpuir_val D = tpuir_dot_general(g, X, W, 0, NULL, NULL, 1, lc, rc_,
                                  TPU_PREC_HIGHEST, odt);
  int fdt = dt;
  dt = odt; /* the region computes in the dot's result dtype */
  int64_t d1[1] = {1};
  tpuir_val h = tpuir_binary(g, TPUIR_ADD, D, tpuir_broadcast_in_dim(g, B, 2, os, d1));
  tpuir_val y = h;
  if (act == ACT_RELU) y = tpuir_binary(g, TPUIR_MAX, h, cscal(g, dt, 0, 2, os));
  if (act == ACT_GELU) {
    tpuir_val e = tpuir_unary(g, TPUIR_ERF, tpuir_binary(g, TPUIR_MUL, h, cscal(g, dt, M_SQRT1_2, 2, os)));
    tpuir_val q = tpuir_binary(g, TPUIR_ADD, cscal(g, dt, 1, 2, os), e);
    y = tpuir_binary(g, TPUIR_MUL, tpuir_binary(g, TPUIR_MUL, h, cscal(g, dt, 0.5, 2, os)), q);
    y = tpuir_binary(g, TPUIR_MUL, y, cscal(g, dt, 1.7, 2, os));
  }
  if (resid) y = tpuir_binary(g, TPUIR_ADD, y, Rs);
  if (fdt != dt) y = tpuir_convert(g, y, fdt);
  tpuir_val outs[2] = {y, D};
  CHECK_OK(tpuir_set_outputs(g, raw_out ? 2 : 1, outs));

  uint64_t seed = 0x1234 + (uint64_t)(M * 131 + N * 7 + K + dt);
  tarr P[4];
  P[0] = ta_new(fdt, 2, xs);
  P[1] = ta_new(fdt, 2, ws);
  P[2] = ta_new(dt, 1, bs);
  P[3] = ta_new(dt, 2, os);
  int np = resid ? 4 : 3;
  tpu_view ins[4];
  for (int i = 0; i < np; i++) {
    ta_fill(&P[i].v, &seed, -1, 1);
    ins[i] = P[i].v;
  }
  tarr on[MAXO];
  int64_t fused = 0;
  int ok = run_both(g, np, ins, on, &fused);
  int refok = 1;
  if (ok) { /* independent reference (double, from the rounded inputs) */
    double tol = tol_of(fdt) * (1 + sqrt((double)K));
    for (int64_t i = 0; i < M && refok; i++)
      for (int64_t j = 0; j < N && refok; j++) {
        double s = 0;
        for (int64_t l = 0; l < K; l++)
          s += tv_get(&P[0].v, tx ? l * M + i : i * K + l) *
               tv_get(&P[1].v, tw ? j * K + l : l * N + j);
        double want = act_ref(act, round_to(dt, s) + tv_get(&P[2].v, j));
        if (resid) want += tv_get(&P[3].v, i * N + j);
        double got = tv_get(&on[0].v, i * N + j);
        if (!near_eq(got, want, tol)) {
          fprintf(stderr, "  dt=%s M=%lld K=%lld N=%lld act=%d [%lld,%lld] got %g want %g\n",
                  tpu_dtype_name(dt), (long long)M, (long long)K, (long long)N, act,
                  (long long)i, (long long)j, got, want);
          refok = 0;
        }
        if (raw_out && !near_eq(tv_get(&on[1].v, i * N + j), s, tol)) refok = 0;
      }
  }
  int nout = raw_out ? 2 : 1;
  for (int i = 0; i < nout; i++) free(on[i].mem);
  for (int i = 0; i < 4; i++) free(P[i].mem);
  tpuir_graph_free(g);
  CHECK(ok);
  CHECK(refok);
  if (expect_fused >= 0) CHECK(fused == expect_fused);
}

static void linear_case(int *tpu_test_failed_, int dt, int64_t M, int64_t K,
                        int64_t N, int act, int tx, int tw, int resid,
                        int raw_out, int expect_fused) {
  linear_case2(tpu_test_failed_, dt, dt, M, K, N, act, tx, tw, resid, raw_out,
               expect_fused);
}

TPU_TEST(exec_epilogue_bias_relu) {
  static const int dts[] = {TPU_F32, TPU_BF16, TPU_F16, TPU_F64};
  for (int d = 0; d < 4; d++) {
    linear_case(tpu_test_failed_, dts[d], 37, 29, 53, ACT_RELU, 0, 0, 0, 0, 1);
    if (*tpu_test_failed_) return;
    linear_case(tpu_test_failed_, dts[d], 130, 64, 700, ACT_RELU, 0, 0, 0, 0, 1);
    if (*tpu_test_failed_) return;
  }
}

TPU_TEST(exec_epilogue_bias_gelu_scale) {
  static const int dts[] = {TPU_F32, TPU_BF16, TPU_F64};
  for (int d = 0; d < 3; d++) {
    linear_case(tpu_test_failed_, dts[d], 61, 33, 300, ACT_GELU, 0, 0, 0, 0, 1);
    if (*tpu_test_failed_) return;
    linear_case(tpu_test_failed_, dts[d], 1, 5, 1, ACT_GELU, 0, 0, 0, 0, 1);
    if (*tpu_test_failed_) return;
  }
}

TPU_TEST(exec_epilogue_residual_transposed) {
  static const int dts[] = {TPU_F32, TPU_BF16, TPU_F64};
  for (int d = 0; d < 3; d++)
    for (int tr = 0; tr < 4; tr++) {
      linear_case(tpu_test_failed_, dts[d], 45, 70, 270, ACT_GELU, tr & 1, tr >> 1, 1, 0, 1);
      if (*tpu_test_failed_) return;
    }
}

/* bf16/f16 operands with an f32 result (what the lowerings emit), the
 * region converting back at the end */
TPU_TEST(exec_epilogue_widened_dot) {
  linear_case2(tpu_test_failed_, TPU_BF16, TPU_F32, 41, 50, 300, ACT_GELU, 0, 1, 1, 0, 1);
  if (*tpu_test_failed_) return;
  linear_case2(tpu_test_failed_, TPU_F16, TPU_F32, 23, 8, 40, ACT_RELU, 1, 0, 0, 1, 1);
}

TPU_TEST(exec_epilogue_raw_dot_output) {
  linear_case(tpu_test_failed_, TPU_F32, 50, 40, 300, ACT_RELU, 0, 1, 1, 1, 1);
  if (*tpu_test_failed_) return;
  linear_case(tpu_test_failed_, TPU_BF16, 17, 9, 33, ACT_GELU, 1, 0, 0, 1, 1);
}

TPU_TEST(exec_epilogue_multi_k_and_empty) {
  /* several k blocks (HIGHEST splits f32 into 3 planes) */
  linear_case(tpu_test_failed_, TPU_F32, 20, 3000, 300, ACT_RELU, 0, 0, 1, 0, 1);
  if (*tpu_test_failed_) return;
  /* k == 0: the dot is zeros; the region still runs (after the dot) */
  linear_case(tpu_test_failed_, TPU_F32, 7, 0, 9, ACT_GELU, 0, 0, 1, 0, 0);
  if (*tpu_test_failed_) return;
  linear_case(tpu_test_failed_, TPU_F32, 0, 5, 9, ACT_RELU, 0, 0, 0, 0, 0);
}

/* batched dot, several free dims on each side, bias over the rhs free
 * dims, residual bound with strides that do (or do not) fold into
 * [batch, M, N] */
TPU_TEST(exec_epilogue_batched) {
  static const int dts[] = {TPU_F32, TPU_BF16, TPU_F64};
  for (int d = 0; d < 3; d++)
    for (int odd = 0; odd < 2; odd++) {
      int dt = dts[d];
      tpuir_graph *g = tpuir_graph_new();
      int64_t xs[4] = {3, 4, 5, 19}, ws[4] = {3, 19, 6, 45};
      int64_t bs[2] = {6, 45}, os[5] = {3, 4, 5, 6, 45};
      tpuir_val X = tpuir_param(g, dt, 4, xs), W = tpuir_param(g, dt, 4, ws);
      tpuir_val B = tpuir_param(g, dt, 2, bs), R = tpuir_param(g, dt, 5, os);
      int64_t lb[1] = {0}, rb[1] = {0}, lc[1] = {3}, rc_[1] = {1};
      tpuir_val D = tpuir_dot_general(g, X, W, 1, lb, rb, 1, lc, rc_, TPU_PREC_HIGHEST, dt);
      int64_t bd[2] = {3, 4};
      tpuir_val y = tpuir_binary(g, TPUIR_ADD, D, tpuir_broadcast_in_dim(g, B, 5, os, bd));
      y = tpuir_unary(g, TPUIR_TANH, y);
      y = tpuir_binary(g, TPUIR_ADD, y, R);
      CHECK_OK(tpuir_set_outputs(g, 1, &y));
      uint64_t seed = 99;
      tarr P[4] = {ta_new(dt, 4, xs), ta_new(dt, 4, ws), ta_new(dt, 2, bs), ta_new(dt, 5, os)};
      tpu_view ins[4];
      for (int i = 0; i < 4; i++) {
        ta_fill(&P[i].v, &seed, -1, 1);
        ins[i] = P[i].v;
      }
      if (odd) { /* residual: dims 1 and 2 (both lhs free) swapped in memory */
        ins[3].strides[1] = 6 * 45;
        ins[3].strides[2] = 4 * 6 * 45;
      }
      tarr on[MAXO];
      int64_t fused = 0;
      int ok = run_both(g, 4, ins, on, &fused);
      int refok = 1;
      for (int64_t b = 0; ok && b < 3; b++)
        for (int64_t i = 0; i < 20 && refok; i++)
          for (int64_t j = 0; j < 270 && refok; j++) {
            double s = 0;
            for (int64_t l = 0; l < 19; l++)
              s += tv_get(&P[0].v, (b * 20 + i) * 19 + l) * tv_get(&P[1].v, (b * 19 + l) * 270 + j);
            int64_t lin = (b * 20 + i) * 270 + j;
            double want = tanh(round_to(dt, s) + tv_get(&P[2].v, j)) + tv_get(&ins[3], lin);
            refok = near_eq(tv_get(&on[0].v, lin), want, tol_of(dt) * 10);
            if (!refok) fprintf(stderr, "  batched dt=%d odd=%d b=%lld i=%lld j=%lld\n", dt, odd,
                                (long long)b, (long long)i, (long long)j);
          }
      free(on[0].mem);
      for (int i = 0; i < 4; i++) free(P[i].mem);
      tpuir_graph_free(g);
      CHECK(ok);
      CHECK(refok);
      CHECK(fused == (odd ? 0 : 1)); /* odd strides: region after the dot */
    }
}

/* y = X @ W + X (square), output written over X itself: the epilogue must
 * not write X while the GEMM still reads it (so it is not fused); and
 * y = X @ W + R written over R (identical view: fused, written directly). */
TPU_TEST(exec_epilogue_inplace_outputs) {
  for (int over_x = 0; over_x < 2; over_x++) {
    int dt = TPU_F32;
    int64_t n = 300, sz[2] = {n, n};
    tpuir_graph *g = tpuir_graph_new();
    tpuir_val X = tpuir_param(g, dt, 2, sz), W = tpuir_param(g, dt, 2, sz);
    tpuir_val R = tpuir_param(g, dt, 2, sz);
    int64_t lc[1] = {1}, rc_[1] = {0};
    tpuir_val D = tpuir_dot_general(g, X, W, 0, NULL, NULL, 1, lc, rc_, TPU_PREC_HIGHEST, dt);
    tpuir_val y = tpuir_binary(g, TPUIR_ADD, D, over_x ? X : R);
    y = tpuir_binary(g, TPUIR_MUL, y, cscal(g, dt, 0.5, 2, sz));
    CHECK_OK(tpuir_set_outputs(g, 1, &y));
    tarr res[2];
    tarr P[3] = {ta_new(dt, 2, sz), ta_new(dt, 2, sz), ta_new(dt, 2, sz)};
    for (int mode = 0; mode < 2; mode++) {
      uint64_t seed = 5;
      tpu_view ins[3];
      for (int i = 0; i < 3; i++) {
        ta_fill(&P[i].v, &seed, -1, 1);
        ins[i] = P[i].v;
      }
      tpux__set_epilogue(mode);
      tpu_view out = ins[over_x ? 0 : 2];
      int64_t r0 = tpux__epilogue_runs();
      int rc = tpux_run(g, 3, ins, 1, &out);
      int64_t fused = tpux__epilogue_runs() - r0;
      tpux__set_epilogue(-1);
      CHECK_OK(rc);
      /* over X: a direct write there would race with the GEMM reading X,
       * and a copy would cost more than the fusion saves: not fused */
      CHECK(fused == (over_x ? 0 : mode));
      res[mode] = ta_new(dt, 2, sz);
      memcpy(res[mode].mem, out.base, (size_t)(n * n * 4));
    }
    int same = !memcmp(res[0].mem, res[1].mem, (size_t)(n * n * 4));
    /* reference from fresh inputs */
    uint64_t seed = 5;
    for (int i = 0; i < 3; i++) ta_fill(&P[i].v, &seed, -1, 1);
    int refok = 1;
    for (int64_t i = 0; i < n && refok; i += 7)
      for (int64_t j = 0; j < n && refok; j += 3) {
        double s = 0;
        for (int64_t l = 0; l < n; l++) s += tv_get(&P[0].v, i * n + l) * tv_get(&P[1].v, l * n + j);
        double want = ((float)s + tv_get(&P[over_x ? 0 : 2].v, i * n + j)) * 0.5;
        refok = near_eq(tv_get(&res[1].v, i * n + j), want, 1e-4);
      }
    for (int i = 0; i < 3; i++) free(P[i].mem);
    free(res[0].mem);
    free(res[1].mem);
    tpuir_graph_free(g);
    CHECK(same);
    CHECK(refok);
  }
}

/* region inputs: computed before the dot (fused), or only after it by a
 * node that cannot run early (a reduce: not fused) */
TPU_TEST(exec_epilogue_input_order) {
  for (int late = 0; late < 2; late++) {
    int dt = TPU_F32;
    int64_t xs[2] = {33, 17}, ws[2] = {17, 260}, os[2] = {33, 260}, bs[1] = {260};
    int64_t ps[3] = {33, 260, 3};
    tpuir_graph *g = tpuir_graph_new();
    tpuir_val X = tpuir_param(g, dt, 2, xs), W = tpuir_param(g, dt, 2, ws);
    tpuir_val B = tpuir_param(g, dt, 1, bs), P = tpuir_param(g, dt, 3, ps);
    tpuir_val b2 = tpuir_binary(g, TPUIR_MUL, B, tpuir_broadcast_in_dim(g, tpuir_const_f(g, dt, 2), 1, bs, NULL));
    tpuir_val s = -1;
    int64_t rd[1] = {2};
    if (!late) s = tpuir_reduce(g, TPUIR_RED_SUM, P, 1, rd);
    int64_t lc[1] = {1}, rc_[1] = {0};
    tpuir_val D = tpuir_dot_general(g, X, W, 0, NULL, NULL, 1, lc, rc_, TPU_PREC_DEFAULT, dt);
    if (late) s = tpuir_reduce(g, TPUIR_RED_SUM, P, 1, rd);
    int64_t d1[1] = {1};
    tpuir_val y = tpuir_binary(g, TPUIR_ADD, D, tpuir_broadcast_in_dim(g, b2, 2, os, d1));
    y = tpuir_binary(g, TPUIR_SUB, y, s);
    CHECK_OK(tpuir_set_outputs(g, 1, &y));
    uint64_t seed = 77;
    tarr A[4] = {ta_new(dt, 2, xs), ta_new(dt, 2, ws), ta_new(dt, 1, bs), ta_new(dt, 3, ps)};
    tpu_view ins[4];
    for (int i = 0; i < 4; i++) {
      ta_fill(&A[i].v, &seed, -1, 1);
      ins[i] = A[i].v;
    }
    tarr on[MAXO];
    int64_t fused = 0;
    int ok = run_both(g, 4, ins, on, &fused);
    if (ok) free(on[0].mem);
    for (int i = 0; i < 4; i++) free(A[i].mem);
    tpuir_graph_free(g);
    CHECK(ok);
    CHECK(fused == !late);
  }
}

/* an optimizer-like step: a scalar count updated in place after the dot
 * (its own small region, run early for the epilogue), the dot's region
 * scaling by a value derived from it and updating the weight in place */
TPU_TEST(exec_epilogue_early_scalar_region) {
  int dt = TPU_F32;
  int64_t xs[2] = {40, 30}, ws[2] = {30, 270}, os[2] = {40, 270};
  tpuir_graph *g = tpuir_graph_new();
  tpuir_val X = tpuir_param(g, dt, 2, xs), W = tpuir_param(g, dt, 2, ws);
  tpuir_val S = tpuir_param(g, dt, 0, NULL), Wt = tpuir_param(g, dt, 2, os);
  int64_t lc[1] = {1}, rc_[1] = {0};
  tpuir_val D = tpuir_dot_general(g, X, W, 0, NULL, NULL, 1, lc, rc_, TPU_PREC_HIGHEST, dt);
  tpuir_val s1 = tpuir_binary(g, TPUIR_ADD, S, tpuir_const_f(g, dt, 1));
  tpuir_val corr = tpuir_binary(g, TPUIR_DIV, tpuir_const_f(g, dt, 0.1),
                                tpuir_unary(g, TPUIR_SQRT, s1));
  tpuir_val y = tpuir_binary(g, TPUIR_MUL, D, tpuir_broadcast_in_dim(g, corr, 2, os, NULL));
  y = tpuir_binary(g, TPUIR_SUB, Wt, y);
  tpuir_val outs[2] = {y, s1};
  CHECK_OK(tpuir_set_outputs(g, 2, outs));
  tarr res[2][2];
  for (int mode = 0; mode < 2; mode++) {
    uint64_t seed = 11;
    tarr P[4] = {ta_new(dt, 2, xs), ta_new(dt, 2, ws), ta_new(dt, 0, NULL), ta_new(dt, 2, os)};
    tpu_view ins[4];
    for (int i = 0; i < 4; i++) {
      ta_fill(&P[i].v, &seed, 0, 1);
      ins[i] = P[i].v;
    }
    tpu_view ov[2] = {ins[3], ins[2]}; /* both in place */
    tpux__set_epilogue(mode);
    int64_t r0 = tpux__epilogue_runs();
    int rc = tpux_run(g, 4, ins, 2, ov);
    int64_t fused = tpux__epilogue_runs() - r0;
    tpux__set_epilogue(-1);
    res[mode][0] = P[3];
    res[mode][1] = P[2];
    free(P[0].mem);
    free(P[1].mem);
    CHECK_OK(rc);
    CHECK(fused == mode);
  }
  int same = !memcmp(res[0][0].mem, res[1][0].mem, 40 * 270 * 4) &&
             !memcmp(res[0][1].mem, res[1][1].mem, 4);
  /* reference */
  uint64_t seed = 11;
  tarr P[4] = {ta_new(dt, 2, xs), ta_new(dt, 2, ws), ta_new(dt, 0, NULL), ta_new(dt, 2, os)};
  for (int i = 0; i < 4; i++) ta_fill(&P[i].v, &seed, 0, 1);
  float st = (float)tv_get(&P[2].v, 0) + 1.0f, cr = 0.1f / sqrtf(st);
  int refok = tv_get(&res[1][1].v, 0) == st;
  for (int64_t i = 0; i < 40 && refok; i++)
    for (int64_t j = 0; j < 270 && refok; j++) {
      double sum = 0;
      for (int64_t l = 0; l < 30; l++) sum += tv_get(&P[0].v, i * 30 + l) * tv_get(&P[1].v, l * 270 + j);
      double want = tv_get(&P[3].v, i * 270 + j) - (float)sum * cr;
      refok = near_eq(tv_get(&res[1][0].v, i * 270 + j), want, 1e-5);
    }
  for (int i = 0; i < 4; i++) free(P[i].mem);
  for (int m = 0; m < 2; m++) {
    free(res[m][0].mem);
    free(res[m][1].mem);
  }
  tpuir_graph_free(g);
  CHECK(same);
  CHECK(refok);
}

/* the public entry point: every block exactly once, after it is final */
typedef struct cover_ctx {
  const float *c;
  int64_t m, n;
  int *hits;
  float *copy;
  int f32;
} cover_ctx;

static void cover_fn(void *ctx, int64_t b, int64_t m0, int64_t m1, int64_t n0,
                     int64_t n1) {
  cover_ctx *x = ctx;
  for (int64_t i = m0; i < m1; i++)
    for (int64_t j = n0; j < n1; j++) {
      int64_t o = (b * x->m + i) * x->n + j;
      __atomic_fetch_add(&x->hits[o], 1, __ATOMIC_RELAXED);
      if (x->f32) x->copy[o] = x->c[o];
    }
}

TPU_TEST(mxu_gemm_ex_covers_blocks) {
  static const int dts[] = {TPU_F32, TPU_BF16, TPU_F64};
  for (int d = 0; d < 3; d++) {
    int dt = dts[d];
    int64_t B = 2, M = 77, N = 531, K = 40;
    size_t es = tpu_dtype_size(dt);
    char *a = calloc((size_t)(B * M * K), es), *b = calloc((size_t)(B * K * N), es);
    char *c = calloc((size_t)(B * M * N), es), *c2 = calloc((size_t)(B * M * N), es);
    int *hits = calloc((size_t)(B * M * N), sizeof(int));
    float *copy = calloc((size_t)(B * M * N), sizeof(float));
    uint64_t seed = 3;
    tpu_view va, vb;
    int64_t as[3] = {B, M, K}, bs[3] = {B, K, N};
    tpu_view_init_contiguous(&va, a, dt, 3, as);
    tpu_view_init_contiguous(&vb, b, dt, 3, bs);
    ta_fill(&va, &seed, -1, 1);
    ta_fill(&vb, &seed, -1, 1);
    /* f32: the callback copies the block, which must already be final */
    cover_ctx x = {(const float *)c, M, N, hits, copy, dt == TPU_F32};
    CHECK_OK(tpumxu_gemm_ex(dt, TPU_PREC_HIGH, B, M, N, K, 1.0, a, M * K, K, 1, b,
                            K * N, N, 1, 0.0, c, M * N, N, 1, cover_fn, &x));
    CHECK_OK(tpumxu_gemm(dt, TPU_PREC_HIGH, B, M, N, K, 1.0, a, M * K, K, 1, b, K * N,
                         N, 1, 0.0, c2, M * N, N, 1));
    int once = 1;
    for (int64_t i = 0; i < B * M * N; i++) once &= hits[i] == 1;
    int same = !memcmp(c, c2, (size_t)(B * M * N) * es);
    int final_ok = dt != TPU_F32 || !memcmp(copy, c, (size_t)(B * M * N) * 4);
    free(a);
    free(b);
    free(c);
    free(c2);
    free(hits);
    free(copy);
    CHECK(once);
    CHECK(same);
    CHECK(final_ok);
  }
}

/* test_exec_reduce_fusion.c - reductions fused with their elementwise
 * producer region in the vTPU executor: graphs region -> REDUCE run with
 * the fusion on and off must give bit-identical outputs, agree with an
 * independent double reference, and the fusion must (or must not) have
 * happened where expected (tpux__reduce_fusion_runs). */
#include <stdio.h>

#include "exec/vtpu/internal.h"
#include "test_exec_util.h"
#include "tpu_test.h"

#define MAXO 3

/* g with reduction fusion on and off (te_fusion_on_off). */
static int run_both(tpuir_graph *g, int np, const tpu_view *ins, tarr *on,
                    int64_t *fused, int *rc_on) {
  return te_fusion_on_off(TPUX_FUSE_REDUCE, g, np, ins, on, fused, rc_on);
}

enum { V_PLAIN, V_MULTI, V_OUTPUT, V_CONVERT, V_TWO };

static double comb_ref(int kind, double a, double v) {
  switch (kind) {
  case TPUIR_RED_SUM: return a + v;
  case TPUIR_RED_PROD: return a * v;
  case TPUIR_RED_MAX: return v > a ? v : a;
  default: return v < a ? v : a;
  }
}

/* X [s0, s1, s2] (a transposed parameter when tx), W [s2];
 * y1 = X * X, y2 = y1 + W * c (broadcast), r = reduce(kind, y2 (converted
 * to f32 for V_CONVERT), dims). Outputs: r; V_MULTI also y1; V_OUTPUT also
 * y2 (then y2 is stored and the reduction reads it back while hot); V_TWO
 * also a second reduction (SUM) of y2 (one fuses, the other reads y2). */
static void red_case(int *tpu_test_failed_, int dt, const int64_t *sz, int nred,
                     const int64_t *dims, int kind, int variant, int tx,
                     int expect_fused) {
  tpuir_graph *g = tpuir_graph_new();
  int64_t xs[3] = {sz[0], sz[1], sz[2]}, ts[3] = {sz[2], sz[1], sz[0]};
  int64_t ws[1] = {sz[2]}, d2[1] = {2}, perm[3] = {2, 1, 0};
  int isf = tpu_dtype_is_float(dt);
  tpuir_val Xp = tpuir_param(g, dt, 3, tx ? ts : xs);
  tpuir_val X = tx ? tpuir_transpose(g, Xp, perm) : Xp;
  tpuir_val W = tpuir_param(g, dt, 1, ws);
  tpuir_val c = isf ? tpuir_const_f(g, dt, 0.5) : tpuir_const_i(g, dt, 2);
  tpuir_val cb = tpuir_broadcast_in_dim(g, c, 3, xs, NULL);
  tpuir_val y1 = tpuir_binary(g, TPUIR_MUL, X, X);
  tpuir_val y2 = tpuir_binary(
      g, TPUIR_ADD, y1,
      tpuir_binary(g, TPUIR_MUL, tpuir_broadcast_in_dim(g, W, 3, xs, d2), cb));
  int rdt = variant == V_CONVERT ? TPU_F32 : dt;
  tpuir_val ro = variant == V_CONVERT ? tpuir_convert(g, y2, TPU_F32) : y2;
  tpuir_val r = tpuir_reduce(g, kind, ro, nred, dims);
  tpuir_val outs[2] = {r, variant == V_MULTI ? y1 : y2};
  if (variant == V_TWO) outs[1] = tpuir_reduce(g, TPUIR_RED_SUM, y2, nred, dims);
  CHECK_OK(tpuir_set_outputs(g, variant == V_PLAIN || variant == V_CONVERT ? 1 : 2, outs));

  uint64_t seed = 0x9e37 + (uint64_t)(sz[0] * 131 + sz[1] * 7 + sz[2] + dt + kind);
  tarr P[2] = {ta_new(dt, 3, tx ? ts : xs), ta_new(dt, 1, ws)};
  double lo = kind == TPUIR_RED_PROD ? 0.9 : -2, hi = kind == TPUIR_RED_PROD ? 1.05 : 2;
  if (!isf) {
    lo = kind == TPUIR_RED_PROD ? 0 : -5;
    hi = kind == TPUIR_RED_PROD ? 1.99 : 5;
  }
  tpu_view ins[2];
  for (int i = 0; i < 2; i++) {
    if (kind == TPUIR_RED_PROD && isf) /* values near 1 */
      ta_fill(&P[i].v, &seed, i ? 1.98 : -0.1, i ? 2.0 : 0.1);
    else
      ta_fill(&P[i].v, &seed, lo, hi);
    ins[i] = P[i].v;
  }
  tarr on[MAXO];
  int64_t fused = 0;
  int rc_on = 0;
  int ok = run_both(g, 2, ins, on, &fused, &rc_on);
  CHECK(ok);
  CHECK(rc_on == TPU_OK);
  if (fused != expect_fused)
    fprintf(stderr, "  fused %lld, expected %d (dt %d kind %d variant %d tx %d)\n",
            (long long)fused, expect_fused, dt, kind, variant, tx);
  CHECK(fused == expect_fused);
  if (ok && rc_on == TPU_OK) { /* independent reference */
    uint32_t red = 0;
    for (int i = 0; i < nred; i++) red |= 1u << dims[i];
    int64_t ks[3], nk = 0, nout = 1;
    for (int d = 0; d < 3; d++)
      if (!(red & (1u << d))) {
        ks[nk++] = sz[d];
        nout *= sz[d];
      }
    double *acc = malloc((size_t)(nout ? nout : 1) * sizeof(double));
    double *mag = calloc((size_t)(nout ? nout : 1), sizeof(double));
    double *acc2 = calloc((size_t)(nout ? nout : 1), sizeof(double));
    double id = kind == TPUIR_RED_SUM ? 0 : kind == TPUIR_RED_PROD ? 1
              : kind == TPUIR_RED_MAX ? -INFINITY : INFINITY;
    for (int64_t o = 0; o < nout; o++) acc[o] = id;
    int64_t n = sz[0] * sz[1] * sz[2];
    for (int64_t i = 0; i < n; i++) {
      int64_t ix[3] = {i / (sz[1] * sz[2]), (i / sz[2]) % sz[1], i % sz[2]};
      int64_t xl = tx ? (ix[2] * sz[1] + ix[1]) * sz[0] + ix[0] : i;
      double x = tv_get(&P[0].v, xl), w = tv_get(&P[1].v, ix[2]);
      double v1 = round_to(dt, x * x);
      double v = round_to(dt, v1 + round_to(dt, w * (isf ? 0.5 : 2)));
      int64_t o = 0;
      for (int d = 0, k = 0; d < 3; d++)
        if (!(red & (1u << d))) o = o * ks[k++] + ix[d];
      acc[o] = comb_ref(kind, acc[o], v);
      acc2[o] += v;
      mag[o] += fabs(v);
      if (variant == V_MULTI) CHECK(tv_get(&on[1].v, i) == v1);
      if (variant == V_OUTPUT) CHECK(tv_get(&on[1].v, i) == v);
    }
    double tol = rdt == TPU_F64 ? 1e-12 : rdt == TPU_F32 ? 1e-5 : 1e-2;
    if (dt == TPU_BF16 && variant != V_CONVERT) tol = 1e-2;
    int bad = 0;
    for (int64_t o = 0; o < nout && !bad; o++) {
      double got = tv_get(&on[0].v, o), want = round_to(rdt, acc[o]);
      double lim = kind == TPUIR_RED_SUM ? tol * (1 + mag[o]) : tol * (1 + fabs(want));
      if (!isf) lim = 0;
      if (!(fabs(got - want) <= lim)) {
        fprintf(stderr, "  out %lld: got %g want %g\n", (long long)o, got, want);
        bad = 1;
      }
    }
    for (int64_t o = 0; o < nout && !bad && variant == V_TWO; o++) {
      double got = tv_get(&on[1].v, o), want = round_to(dt, acc2[o]);
      if (!(fabs(got - want) <= (isf ? tol * (1 + mag[o]) : 0))) bad = 1;
    }
    CHECK(!bad);
    free(acc2);
    free(acc);
    free(mag);
  }
  for (int i = 0; i < tpuir_num_outputs(g); i++) free(on[i].mem);
  for (int i = 0; i < 2; i++) free(P[i].mem);
  tpuir_graph_free(g);
}

TPU_TEST(reduce_fusion_layouts) {
  int64_t s1[3] = {4, 37, 300}, s2[3] = {3, 700, 5}, s3[3] = {2, 1, 1500};
  int64_t dl[1] = {2}, d0[1] = {0}, d1[1] = {1}, d02[2] = {0, 2}, d012[3] = {0, 1, 2};
  int64_t d12[2] = {1, 2}, d01[2] = {0, 1};
  int kinds[4] = {TPUIR_RED_SUM, TPUIR_RED_MAX, TPUIR_RED_MIN, TPUIR_RED_PROD};
  for (int q = 0; q < 4; q++) {
    int kd = kinds[q];
    red_case(tpu_test_failed_, TPU_F32, s1, 1, dl, kd, V_PLAIN, 0, 1);  /* inner, batched */
    red_case(tpu_test_failed_, TPU_F32, s3, 1, dl, kd, V_PLAIN, 0, 1);  /* inner, long rows */
    red_case(tpu_test_failed_, TPU_F32, s1, 1, d0, kd, V_PLAIN, 0, 1);  /* outer */
    red_case(tpu_test_failed_, TPU_F32, s1, 1, d1, kd, V_PLAIN, 0, 1);  /* outer, middle */
    red_case(tpu_test_failed_, TPU_F32, s1, 2, d02, kd, V_PLAIN, 0, 1); /* inner, 2 dims */
    red_case(tpu_test_failed_, TPU_F32, s1, 3, d012, kd, V_PLAIN, 0, 1); /* full */
    red_case(tpu_test_failed_, TPU_F32, s2, 2, d01, kd, V_PLAIN, 0, 1); /* outer, 2 dims */
    /* runs of 5 (W breaks the reduced run): short windows, plain plan */
    red_case(tpu_test_failed_, TPU_F32, s2, 2, d12, kd, V_PLAIN, 0, 0);
  }
  /* dtypes: rounding of the stored value, int wrap */
  int dts[4] = {TPU_BF16, TPU_F16, TPU_F64, TPU_I32};
  for (int q = 0; q < 4; q++) {
    red_case(tpu_test_failed_, dts[q], s1, 1, dl, TPUIR_RED_SUM, V_PLAIN, 0, 1);
    red_case(tpu_test_failed_, dts[q], s1, 1, d0, TPUIR_RED_SUM, V_PLAIN, 0, 1);
    red_case(tpu_test_failed_, dts[q], s1, 3, d012, TPUIR_RED_MAX, V_PLAIN, 0, 1);
    red_case(tpu_test_failed_, dts[q], s2, 3, d012, TPUIR_RED_MAX, V_PLAIN, 0, 0);
  }
  /* a convert feeding the reduction (bf16 -> f32 sum) */
  red_case(tpu_test_failed_, TPU_BF16, s1, 1, dl, TPUIR_RED_SUM, V_CONVERT, 0, 1);
  red_case(tpu_test_failed_, TPU_BF16, s1, 1, d1, TPUIR_RED_SUM, V_CONVERT, 0, 1);
}

TPU_TEST(reduce_fusion_multi_output_and_views) {
  int64_t s1[3] = {4, 37, 300}, s2[3] = {5, 60, 70};
  int64_t dl[1] = {2}, d0[1] = {0}, d012[3] = {0, 1, 2}, d1[1] = {1}, d02[2] = {0, 2};
  /* the region stores y1 and feeds the reduction with y2 */
  red_case(tpu_test_failed_, TPU_F32, s1, 1, dl, TPUIR_RED_SUM, V_MULTI, 0, 1);
  red_case(tpu_test_failed_, TPU_F32, s1, 1, d0, TPUIR_RED_SUM, V_MULTI, 0, 1);
  red_case(tpu_test_failed_, TPU_BF16, s2, 1, d1, TPUIR_RED_MAX, V_MULTI, 0, 1);
  /* the reduced value is also an output / read by another reduction: it is
   * stored by the windows and folded from memory while hot */
  red_case(tpu_test_failed_, TPU_F32, s1, 1, dl, TPUIR_RED_SUM, V_OUTPUT, 0, 1);
  red_case(tpu_test_failed_, TPU_F32, s1, 1, d0, TPUIR_RED_MAX, V_OUTPUT, 0, 1);
  red_case(tpu_test_failed_, TPU_BF16, s1, 3, d012, TPUIR_RED_SUM, V_OUTPUT, 1, 1);
  red_case(tpu_test_failed_, TPU_F32, s1, 1, d1, TPUIR_RED_MAX, V_TWO, 0, 1);
  red_case(tpu_test_failed_, TPU_F16, s2, 1, d1, TPUIR_RED_MIN, V_TWO, 1, 1);
  red_case(tpu_test_failed_, TPU_I32, s1, 1, dl, TPUIR_RED_MAX, V_TWO, 0, 1);
  /* a transposed (non-contiguous) input: windows split where its strides
   * break, folds unchanged */
  red_case(tpu_test_failed_, TPU_F32, s1, 1, d1, TPUIR_RED_SUM, V_PLAIN, 1, 1);
  red_case(tpu_test_failed_, TPU_F32, s1, 1, dl, TPUIR_RED_SUM, V_PLAIN, 1, 1);
  red_case(tpu_test_failed_, TPU_F32, s1, 3, d012, TPUIR_RED_SUM, V_PLAIN, 1, 1);
  /* runs of 70 (transposed input, or two reduced dims): short windows,
   * except where a window takes all 5 reduced rows (outer shape: 350) */
  red_case(tpu_test_failed_, TPU_F32, s2, 1, d0, TPUIR_RED_MIN, V_MULTI, 1, 1);
  red_case(tpu_test_failed_, TPU_BF16, s2, 3, d012, TPUIR_RED_SUM, V_MULTI, 1, 0);
  red_case(tpu_test_failed_, TPU_F32, s2, 2, d02, TPUIR_RED_MAX, V_PLAIN, 1, 0);
  red_case(tpu_test_failed_, TPU_F32, s2, 2, d02, TPUIR_RED_SUM, V_MULTI, 0, 0);
}

TPU_TEST(reduce_fusion_chunks_and_empty) {
  /* long reductions split into chunks (few outputs) */
  int64_t s1[3] = {3, 1, 150000}, s2[3] = {1, 140000, 3}, s3[3] = {2, 0, 5};
  int64_t s4[3] = {3, 4, 1};
  int64_t dl[1] = {2}, d1[1] = {1}, d012[3] = {0, 1, 2}, d0[1] = {0};
  red_case(tpu_test_failed_, TPU_F32, s1, 1, dl, TPUIR_RED_SUM, V_PLAIN, 0, 1);
  red_case(tpu_test_failed_, TPU_F32, s1, 3, d012, TPUIR_RED_SUM, V_PLAIN, 0, 1);
  red_case(tpu_test_failed_, TPU_F32, s2, 1, d1, TPUIR_RED_SUM, V_MULTI, 0, 1);
  red_case(tpu_test_failed_, TPU_BF16, s1, 3, d012, TPUIR_RED_MAX, V_PLAIN, 0, 1);
  /* empty value / empty reduction / nothing reduced: the plain plan */
  red_case(tpu_test_failed_, TPU_F32, s3, 1, dl, TPUIR_RED_SUM, V_PLAIN, 0, 0);
  red_case(tpu_test_failed_, TPU_F32, s3, 1, d1, TPUIR_RED_PROD, V_MULTI, 0, 0);
  red_case(tpu_test_failed_, TPU_F32, s3, 1, d1, TPUIR_RED_SUM, V_OUTPUT, 0, 0);
  red_case(tpu_test_failed_, TPU_F32, s4, 1, dl, TPUIR_RED_SUM, V_OUTPUT, 0, 0);
  red_case(tpu_test_failed_, TPU_F32, s1, 1, dl, TPUIR_RED_SUM, V_OUTPUT, 0, 1);
  red_case(tpu_test_failed_, TPU_F32, s2, 1, d1, TPUIR_RED_SUM, V_TWO, 0, 1);
  red_case(tpu_test_failed_, TPU_F32, s4, 1, dl, TPUIR_RED_SUM, V_MULTI, 0, 0);
  red_case(tpu_test_failed_, TPU_F32, s4, 1, d0, TPUIR_RED_SUM, V_MULTI, 0, 1);
  /* column sums of rows wider than a tile (a fused plan takes whole rows
   * per block, the plain one tiles of columns) over 160 rows (3 chunks of
   * 64 rows): the same sums either way; a stored bf16 value is folded
   * back in column pieces */
  int64_t s5[3] = {4, 40, 2500}, d01[2] = {0, 1};
  red_case(tpu_test_failed_, TPU_F32, s5, 2, d01, TPUIR_RED_SUM, V_PLAIN, 0, 1);
  red_case(tpu_test_failed_, TPU_BF16, s5, 2, d01, TPUIR_RED_SUM, V_OUTPUT, 0, 1);
  red_case(tpu_test_failed_, TPU_F32, s5, 2, d01, TPUIR_RED_MAX, V_TWO, 0, 1);
  red_case(tpu_test_failed_, TPU_F32, s5, 2, d01, TPUIR_RED_SUM, V_MULTI, 1, 1);
}

/* all/any (AND/OR of bools) fold contiguous rows as bytes: short rows and
 * rows longer than a tile (runs carried over), a stored bool operand and
 * one computed by a fused compare; one odd element anywhere in a row
 * decides it. */
TPU_TEST(reduce_bool_all_any_rows) {
  static const int64_t lens[2] = {256, 2500}, odd[5] = {0, 255, 1023, 1024, -1};
  for (int li = 0; li < 2; li++) {
    enum { R = 7 };
    int64_t N = lens[li], rn[2] = {R, N}, d1[1] = {1};
    tpuir_graph *g = tpuir_graph_new();
    tpuir_val X = tpuir_param(g, TPU_F32, 2, rn), P = tpuir_param(g, TPU_BOOL, 2, rn);
    tpuir_val zero = tpuir_broadcast_in_dim(g, tpuir_const_f(g, TPU_F32, 0), 2, rn, NULL);
    tpuir_val o[4];
    o[0] = tpuir_reduce(g, TPUIR_RED_AND, tpuir_binary(g, TPUIR_GT, X, zero), 1, d1);
    o[1] = tpuir_reduce(g, TPUIR_RED_OR, tpuir_binary(g, TPUIR_LT, X, zero), 1, d1);
    o[2] = tpuir_reduce(g, TPUIR_RED_AND, P, 1, d1);
    o[3] = tpuir_reduce(g, TPUIR_RED_OR, P, 1, d1);
    CHECK_OK(tpuir_set_outputs(g, 4, o));
    tarr x = ta_new(TPU_F32, 2, rn), pb = ta_new(TPU_BOOL, 2, rn), on[4];
    float *X_ = x.mem;
    uint8_t *P_ = pb.mem;
    /* rows 0-4: positive but one element (odd[r]); row 5 all positive,
     * row 6 all negative; P is X > 0 for rows 0-5, all false in row 6 */
    for (int r = 0; r < R; r++)
      for (int64_t c = 0; c < N; c++) {
        int64_t at = r < 5 ? (odd[r] < 0 ? N - 1 : odd[r] % N) : -2;
        float v = r == 6 || c == at ? -1.f - (float)c : 1.f + (float)c;
        X_[r * N + c] = v;
        P_[r * N + c] = v > 0;
      }
    tpu_view in[2] = {x.v, pb.v};
    int64_t fused;
    int rc;
    CHECK(run_both(g, 2, in, on, &fused, &rc));
    CHECK_OK(rc);
    CHECK(fused == 2);
    for (int r = 0; r < R; r++) {
      uint8_t all = r == 5, any_neg = r != 5;
      CHECK(((uint8_t *)on[0].mem)[r] == all);
      CHECK(((uint8_t *)on[1].mem)[r] == any_neg);
      CHECK(((uint8_t *)on[2].mem)[r] == all);
      CHECK(((uint8_t *)on[3].mem)[r] == (r != 6));
    }
    for (int k = 0; k < 4; k++) free(on[k].mem);
    free(x.mem), free(pb.mem);
    tpuir_graph_free(g);
  }
}

/* Regions that can fail (integer division) are not fused and still raise;
 * a one-op graph (parameter -> REDUCE) is untouched. */
TPU_TEST(reduce_fusion_errors_and_one_op) {
  int64_t xs[2] = {4, 300}, d1[1] = {1};
  tpuir_graph *g = tpuir_graph_new();
  tpuir_val X = tpuir_param(g, TPU_I32, 2, xs), Y = tpuir_param(g, TPU_I32, 2, xs);
  tpuir_val q = tpuir_binary(g, TPUIR_DIV, X, Y);
  tpuir_val r = tpuir_reduce(g, TPUIR_RED_SUM, q, 1, d1);
  CHECK_OK(tpuir_set_outputs(g, 1, &r));
  tarr P[2] = {ta_new(TPU_I32, 2, xs), ta_new(TPU_I32, 2, xs)};
  uint64_t seed = 77;
  ta_fill(&P[0].v, &seed, -5, 5);
  for (int64_t i = 0; i < 1200; i++) tv_set(&P[1].v, i, i == 555 ? 0 : 3);
  tpu_view ins[2] = {P[0].v, P[1].v};
  tarr on[MAXO];
  int64_t fused = 0;
  int rc = 0;
  CHECK(run_both(g, 2, ins, on, &fused, &rc));
  CHECK(rc == TPU_E_INVALID);
  CHECK(fused == 0);
  free(on[0].mem);
  tpuir_graph_free(g);

  g = tpuir_graph_new();
  X = tpuir_param(g, TPU_F32, 2, xs);
  r = tpuir_reduce(g, TPUIR_RED_SUM, X, 1, d1);
  CHECK_OK(tpuir_set_outputs(g, 1, &r));
  tpu_view in1;
  tarr pf = ta_new(TPU_F32, 2, xs);
  ta_fill(&pf.v, &seed, -1, 1);
  in1 = pf.v;
  CHECK(run_both(g, 1, &in1, on, &fused, &rc));
  CHECK(rc == TPU_OK && fused == 0);
  free(on[0].mem);
  free(pf.mem);
  tpuir_graph_free(g);
  for (int i = 0; i < 2; i++) free(P[i].mem);
}

TPU_TEST(exec_fusion_public_api) {
  /* tpu_exec.h's counters/switches map to the per-fusion state */
  CHECK(tpux_fusion_runs(TPUX_FUSE_EPILOGUE) == tpux__epilogue_runs());
  CHECK(tpux_fusion_runs(TPUX_FUSE_REDUCE) == tpux__reduce_fusion_runs());
  CHECK(tpux_fusion_runs(7) == -1);
  CHECK_OK(tpux_set_fusion(TPUX_FUSE_REDUCE, 0));
  CHECK(!tpux__reduce_fusion_enabled());
  CHECK_OK(tpux_set_fusion(TPUX_FUSE_REDUCE, -1));
  CHECK_OK(tpux_set_fusion(TPUX_FUSE_EPILOGUE, 0));
  CHECK(!tpux__epilogue_enabled());
  CHECK_OK(tpux_set_fusion(TPUX_FUSE_EPILOGUE, 1));
  CHECK(tpux__epilogue_enabled());
  CHECK_OK(tpux_set_fusion(TPUX_FUSE_EPILOGUE, -1));
  CHECK(tpux_set_fusion(TPUX_FUSE_REDUCE, 2) == TPU_E_INVALID);
  CHECK(tpux_set_fusion(-1, 0) == TPU_E_INVALID);
}

/* test_conv.c - IR builders and vTPU executor for CONVOLUTION,
 * REDUCE_WINDOW and WINDOW_ARGMAX, against naive float64 references
 * (direct convolution with StableHLO semantics, direct window loops). The
 * cases cover every executor path: 1x1 direct GEMM, im2col in both layouts,
 * direct loops for depthwise / tiny groups,
 * several batch items per GEMM, lhs dilation (col2im), groups, negative
 * padding, strided / flipped operand views, 1-3 spatial dims, dtypes and
 * precisions. */
#include <stdio.h>

#include "tpu_test.h"
#include "test_exec_util.h"
#include "test_lower_util.h"

typedef struct ccase {
  int nsp;
  int64_t N, C, O, G;
  int64_t in[3], k[3];
  int64_t st[3], lo[3], hi[3], ld[3], rd[3];
} ccase;

static int64_t cc_out(const ccase *c, int i) {
  int64_t din = c->in[i] > 0 ? (c->in[i] - 1) * c->ld[i] + 1 : 0;
  int64_t padded = c->lo[i] + din + c->hi[i];
  int64_t dw = (c->k[i] - 1) * c->rd[i] + 1;
  if (c->in[i] == 0 || padded < dw) return 0;
  return (padded - dw) / c->st[i] + 1;
}

/* Direct f64 convolution: y[n,o,q] = sum x[n,c,i] * w[o,f,k] over the
 * positions where q*st + k*rd - lo = i*ld. Also |x|*|w| sums (error
 * scale). x, w read through tv_get (any view). */
static void ref_conv(const ccase *c, const tpu_view *x, const tpu_view *w,
                     double (*rnd)(double), double *y, double *yabs) {
  int nsp = c->nsp;
  int64_t out[3] = {1, 1, 1}, in[3] = {1, 1, 1}, k[3] = {1, 1, 1};
  for (int i = 0; i < nsp; i++) {
    out[i] = cc_out(c, i);
    in[i] = c->in[i];
    k[i] = c->k[i];
  }
  int64_t Q = out[0] * out[1] * out[2], I = in[0] * in[1] * in[2],
          K = k[0] * k[1] * k[2];
  int64_t Fg = c->C / c->G, Og = c->O / c->G;
  for (int64_t n = 0; n < c->N; n++)
    for (int64_t o = 0; o < c->O; o++)
      for (int64_t q = 0; q < Q; q++) {
        int64_t qi[3] = {q / (out[1] * out[2]), (q / out[2]) % out[1], q % out[2]};
        double s = 0, sa = 0;
        int64_t g = o / Og;
        for (int64_t f = 0; f < Fg; f++)
          for (int64_t kk = 0; kk < K; kk++) {
            int64_t ki[3] = {kk / (k[1] * k[2]), (kk / k[2]) % k[1], kk % k[2]};
            int64_t ii[3], ok = 1;
            for (int d = 0; d < nsp; d++) {
              int64_t pos = qi[d] * c->st[d] + ki[d] * c->rd[d] - c->lo[d];
              if (pos < 0 || pos % c->ld[d] || pos / c->ld[d] >= in[d]) ok = 0;
              ii[d] = ok ? pos / c->ld[d] : 0;
            }
            if (!ok) continue;
            int64_t lin = 0;
            for (int d = 0; d < nsp; d++) lin = lin * in[d] + ii[d];
            double xv = tv_get(x, (n * c->C + g * Fg + f) * I + lin);
            double wv = tv_get(w, (o * Fg + f) * K + kk);
            if (rnd) {
              xv = rnd(xv);
              wv = rnd(wv);
            }
            s += xv * wv;
            sa += fabs(xv * wv);
          }
        y[(n * c->O + o) * Q + q] = s;
        yabs[(n * c->O + o) * Q + q] = sa;
      }
}

static double bf16r(double v) { return tpu_bf16_to_f32(tpu_f32_to_bf16((float)v)); }

/* Run case c in dtype dt / precision. layout_x: 0 plain, 1 channels-last
 * storage (the graph transposes it), 2 weight flipped in storage (the
 * graph reverses it). Returns 0 if all elements are within tolerance. */
static int run_case(const ccase *c, int dt, int prec, int layout, uint64_t seed,
                    const char *label) {
  int nsp = c->nsp, rank = nsp + 2;
  int64_t xs[5], ws[5], ys[5];
  xs[0] = c->N;
  xs[1] = c->C;
  ws[0] = c->O;
  ws[1] = c->C / c->G;
  ys[0] = c->N;
  ys[1] = c->O;
  for (int i = 0; i < nsp; i++) {
    xs[2 + i] = c->in[i];
    ws[2 + i] = c->k[i];
    ys[2 + i] = cc_out(c, i);
  }
  /* storage shapes */
  int64_t xstore[5], perm_to_nc[5], perm_cl[5];
  if (layout == 1) { /* storage N, s..., C; graph transposes to N, C, s... */
    xstore[0] = c->N;
    for (int i = 0; i < nsp; i++) xstore[1 + i] = c->in[i];
    xstore[rank - 1] = c->C;
    perm_to_nc[0] = 0;
    perm_to_nc[1] = rank - 1;
    for (int i = 0; i < nsp; i++) perm_to_nc[2 + i] = 1 + i;
    perm_cl[0] = 0;
    for (int i = 0; i < nsp; i++) perm_cl[1 + i] = 2 + i;
    perm_cl[rank - 1] = 1;
  } else {
    memcpy(xstore, xs, sizeof xs);
  }
  tarr X = ta_new(dt, rank, xstore), W = ta_new(dt, rank, ws);
  uint64_t s = seed;
  ta_fill(&X.v, &s, -1, 1);
  ta_fill(&W.v, &s, -1, 1);
  tpuir_graph *g = tpuir_graph_new();
  tpuir_val px = tpuir_param(g, dt, rank, xstore);
  tpuir_val pw = tpuir_param(g, dt, rank, ws);
  tpuir_val vx = layout == 1 ? tpuir_transpose(g, px, perm_to_nc) : px;
  tpuir_val vw = pw;
  int64_t sp_dims[3] = {2, 3, 4};
  if (layout == 2) vw = tpuir_reverse(g, pw, nsp, sp_dims);
  int64_t st[3], lo[3], hi[3], ld[3], rd[3];
  for (int i = 0; i < nsp; i++) {
    st[i] = c->st[i];
    lo[i] = c->lo[i];
    hi[i] = c->hi[i];
    ld[i] = c->ld[i];
    rd[i] = c->rd[i];
  }
  tpuir_val y = tpuir_convolution(g, vx, vw, st, lo, hi, ld, rd, c->G, prec);
  int fail = 0;
  if (y < 0) {
    fprintf(stderr, "  %s: build failed: %s\n", label, tpu_last_error());
    tpuir_graph_free(g);
    free(X.mem);
    free(W.mem);
    return 1;
  }
  tpuir_set_outputs(g, 1, &y);
  tarr Y = ta_new(dt, rank, ys);
  int64_t ny = tpu_view_numel(&Y.v);
  for (int64_t i = 0; i < ny; i++) tv_set(&Y.v, i, NAN);
  tpu_view ins[2] = {X.v, W.v};
  int rc = tpux_run(g, 2, ins, 1, &Y.v);
  if (rc) {
    fprintf(stderr, "  %s: run failed: %s\n", label, tpu_last_error());
    fail = 1;
  }
  /* reference over the logical (N, C, s) / flipped views */
  tpu_view lx = X.v, lw = W.v;
  if (layout == 1) {
    for (int d = 0; d < rank; d++) {
      lx.sizes[d] = X.v.sizes[perm_to_nc[d]];
      lx.strides[d] = X.v.strides[perm_to_nc[d]];
    }
  }
  if (layout == 2)
    for (int i = 0; i < nsp; i++) {
      int d = 2 + i;
      lw.offset += (lw.sizes[d] - 1) * lw.strides[d];
      lw.strides[d] = -lw.strides[d];
    }
  (void)perm_cl;
  double *ref = malloc(sizeof(double) * (size_t)(ny ? ny : 1));
  double *rab = malloc(sizeof(double) * (size_t)(ny ? ny : 1));
  int bf_in = dt == TPU_F32 && prec == TPU_PREC_DEFAULT;
  ref_conv(c, &lx, &lw, bf_in ? bf16r : NULL, ref, rab);
  double acc_tol = dt == TPU_F64 ? 1e-13 : 2e-6;
  if (dt == TPU_F32 && prec == TPU_PREC_HIGH) acc_tol = 3e-5; /* ~3 * 2^-18 */
  double out_tol = dt == TPU_BF16 ? 0x1p-8 : dt == TPU_F16 ? 0x1p-11 : 0;
  double worst = 0;
  for (int64_t i = 0; i < ny && !fail; i++) {
    double got = tv_get(&Y.v, i);
    double err = fabs(got - ref[i]);
    double tol = acc_tol * (rab[i] + 1e-30) + out_tol * fabs(ref[i]);
    if (err / (tol + 1e-300) > worst) worst = err / (tol + 1e-300);
    if (!(err <= tol)) {
      fprintf(stderr, "  %s (%s prec %d layout %d): y[%lld] = %.9g, want %.9g (tol %g)\n",
              label, tpu_dtype_name(dt), prec, layout, (long long)i, got,
              ref[i], tol);
      fail = 1;
    }
  }
  free(ref);
  free(rab);
  free(X.mem);
  free(W.mem);
  free(Y.mem);
  tpuir_graph_free(g);
  return fail;
}

#define CC(nsp_, N_, C_, O_, G_, ...) \
  {nsp_, N_, C_, O_, G_, __VA_ARGS__}

/* in, k, st, lo, hi, ld, rd */
static const ccase k_cases[] = {
    /* 2D forward: 3x3 pad 1, stride 1 (im2col, items chunked) */
    CC(2, 2, 3, 4, 1, {7, 6}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, {1, 1}),
    /* stride 2, asymmetric pad, rhs dilation */
    CC(2, 3, 4, 5, 1, {9, 8}, {3, 2}, {2, 3}, {1, 0}, {2, 1}, {1, 1}, {2, 3}),
    /* groups 2 and depthwise */
    CC(2, 2, 4, 6, 2, {6, 5}, {3, 3}, {1, 2}, {1, 1}, {1, 1}, {1, 1}, {1, 1}),
    CC(2, 2, 4, 8, 4, {5, 5}, {3, 3}, {1, 1}, {0, 2}, {2, 0}, {1, 1}, {1, 1}),
    /* 1x1 on 32x32 (direct GEMM path, Q = 1024), groups 2 */
    CC(2, 2, 6, 4, 2, {32, 32}, {1, 1}, {1, 1}, {0, 0}, {0, 0}, {1, 1}, {1, 1}),
    /* 1x1 stride 2 (gather) */
    CC(2, 3, 5, 7, 1, {9, 9}, {1, 1}, {2, 2}, {0, 0}, {0, 0}, {1, 1}, {1, 1}),
    /* large Q, one item per GEMM (40x40 out) */
    CC(2, 2, 3, 5, 1, {40, 40}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, {1, 1}),
    /* kernel wider than output (weight-gradient layout) */
    CC(2, 3, 2, 4, 1, {12, 13}, {10, 11}, {1, 1}, {0, 1}, {0, 0}, {1, 1}, {1, 1}),
    CC(2, 4, 3, 2, 1, {16, 16}, {7, 7}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, {2, 2}),
    /* negative padding (crop) */
    CC(2, 2, 2, 3, 1, {8, 8}, {3, 3}, {1, 1}, {-1, 1}, {-2, 0}, {1, 1}, {1, 1}),
    /* lhs dilation (transposed conv / input gradient): col2im */
    CC(2, 2, 3, 4, 1, {5, 4}, {3, 3}, {1, 1}, {2, 2}, {2, 3}, {2, 2}, {1, 1}),
    CC(2, 3, 4, 6, 2, {4, 5}, {3, 2}, {1, 1}, {1, 0}, {1, 2}, {3, 2}, {2, 1}),
    /* lhs dilation with window stride (divisibility) and negative pad */
    CC(2, 2, 2, 3, 1, {5, 6}, {3, 3}, {2, 3}, {-1, 2}, {1, 0}, {2, 3}, {1, 1}),
    /* 1D and 3D */
    CC(1, 3, 4, 5, 1, {17}, {5}, {2}, {2}, {1}, {1}, {2}),
    CC(1, 2, 4, 4, 2, {9}, {3}, {1}, {2}, {2}, {2}, {1}),
    CC(3, 2, 3, 4, 1, {5, 6, 4}, {3, 2, 3}, {1, 2, 1}, {1, 0, 1}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}),
    CC(3, 1, 2, 2, 1, {3, 3, 4}, {2, 2, 2}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {2, 1, 2}, {1, 1, 1}),
    /* depthwise / tiny groups (direct loops): 2D strided + dilated, 1D, 3D */
    CC(2, 2, 6, 6, 6, {9, 10}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, {2, 1}),
    CC(1, 2, 4, 4, 4, {12}, {3}, {2}, {1}, {0}, {1}, {1}),
    CC(3, 1, 2, 4, 2, {4, 5, 6}, {2, 3, 3}, {1, 1, 2}, {1, 0, 1}, {0, 1, 1}, {1, 1, 1}, {1, 2, 1}),
};
#define NCASES ((int)(sizeof k_cases / sizeof k_cases[0]))

TPU_TEST(conv_f64_all_paths) {
  for (int i = 0; i < NCASES; i++) {
    char lab[32];
    snprintf(lab, sizeof lab, "case %d", i);
    CHECK(run_case(&k_cases[i], TPU_F64, TPU_PREC_DEFAULT, 0, 100 + (uint64_t)i, lab) == 0);
  }
}

TPU_TEST(conv_f32_precisions) {
  int precs[3] = {TPU_PREC_HIGHEST, TPU_PREC_HIGH, TPU_PREC_DEFAULT};
  for (int p = 0; p < 3; p++)
    for (int i = 0; i < NCASES; i++) {
      char lab[32];
      snprintf(lab, sizeof lab, "case %d", i);
      CHECK(run_case(&k_cases[i], TPU_F32, precs[p], 0, 200 + (uint64_t)i, lab) == 0);
    }
}

TPU_TEST(conv_half_dtypes) {
  for (int i = 0; i < NCASES; i++) {
    char lab[32];
    snprintf(lab, sizeof lab, "case %d", i);
    CHECK(run_case(&k_cases[i], TPU_BF16, TPU_PREC_DEFAULT, 0, 300 + (uint64_t)i, lab) == 0);
    CHECK(run_case(&k_cases[i], TPU_F16, TPU_PREC_DEFAULT, 0, 400 + (uint64_t)i, lab) == 0);
  }
}

TPU_TEST(conv_strided_and_flipped_views) {
  for (int i = 0; i < NCASES; i++) {
    char lab[32];
    snprintf(lab, sizeof lab, "case %d", i);
    CHECK(run_case(&k_cases[i], TPU_F32, TPU_PREC_HIGHEST, 1, 500 + (uint64_t)i, lab) == 0);
    CHECK(run_case(&k_cases[i], TPU_F64, TPU_PREC_DEFAULT, 2, 600 + (uint64_t)i, lab) == 0);
  }
}

/* DEFAULT and FP32 run on oneDNN (forward, weight- and input-gradient
 * forms) where it takes the case: plain, channels-last and flipped views. */
TPU_TEST(conv_f32_default_fp32_views) {
  for (int layout = 0; layout < 3; layout++)
    for (int i = 0; i < NCASES; i++) {
      char lab[32];
      snprintf(lab, sizeof lab, "case %d", i);
      CHECK(run_case(&k_cases[i], TPU_F32, TPU_PREC_DEFAULT, layout, 700 + (uint64_t)i, lab) == 0);
      CHECK(run_case(&k_cases[i], TPU_F32, TPU_PREC_FP32, layout, 800 + (uint64_t)i, lab) == 0);
      if (layout) CHECK(run_case(&k_cases[i], TPU_BF16, TPU_PREC_DEFAULT, layout, 900 + (uint64_t)i, lab) == 0);
    }
}

/* A reference check that can fail: a wrong stride must be caught. */
TPU_TEST(conv_reference_detects_errors) {
  ccase c = k_cases[1];
  int64_t x[4] = {c.N, c.C, c.in[0], c.in[1]}, w[4] = {c.O, c.C, c.k[0], c.k[1]};
  tarr X = ta_new(TPU_F64, 4, x), W = ta_new(TPU_F64, 4, w);
  uint64_t s = 7;
  ta_fill(&X.v, &s, -1, 1);
  ta_fill(&W.v, &s, -1, 1);
  tpuir_graph *g = tpuir_graph_new();
  tpuir_val px = tpuir_param(g, TPU_F64, 4, x), pw = tpuir_param(g, TPU_F64, 4, w);
  int64_t st[2] = {1, 1}; /* the case says {2, 3} */
  tpuir_val y = tpuir_convolution(g, px, pw, st, c.lo, c.hi, c.ld, c.rd, 1, 0);
  CHECK(y >= 0);
  int dt, nd;
  int64_t ys[TPU_MAX_DIMS];
  tpuir_value_info(g, y, &dt, &nd, ys);
  tpuir_set_outputs(g, 1, &y);
  tarr Y = ta_new(TPU_F64, 4, ys);
  tpu_view ins[2] = {X.v, W.v};
  CHECK_OK(tpux_run(g, 2, ins, 1, &Y.v));
  int64_t ny = cc_out(&c, 0) * cc_out(&c, 1) * c.N * c.O;
  double *ref = malloc(sizeof(double) * (size_t)ny), *ra = malloc(sizeof(double) * (size_t)ny);
  ref_conv(&c, &X.v, &W.v, NULL, ref, ra);
  int differs = 0;
  for (int64_t i = 0; i < ny; i++) differs |= fabs(tv_get(&Y.v, i) - ref[i]) > 1e-9;
  free(ref);
  free(ra);
  free(X.mem);
  free(W.mem);
  free(Y.mem);
  tpuir_graph_free(g);
  CHECK(differs);
}

TPU_TEST(conv_builder_shapes_and_errors) {
  tpuir_graph *g = tpuir_graph_new();
  int64_t xs[4] = {2, 6, 10, 9}, ws[4] = {8, 3, 3, 2};
  tpuir_val x = tpuir_param(g, TPU_F32, 4, xs), w = tpuir_param(g, TPU_F32, 4, ws);
  int64_t st[2] = {2, 1}, lo[2] = {1, 0}, hi[2] = {1, 2}, ld[2] = {1, 2}, rd[2] = {2, 1};
  tpuir_val y = tpuir_convolution(g, x, w, st, lo, hi, ld, rd, 2, TPU_PREC_HIGH);
  CHECK(y >= 0);
  int dt, nd;
  int64_t s[TPU_MAX_DIMS];
  CHECK_OK(tpuir_value_info(g, y, &dt, &nd, s));
  CHECK(dt == TPU_F32 && nd == 4 && s[0] == 2 && s[1] == 8);
  /* h: (1 + 10 + 1 - 5) / 2 + 1 = 4; w: (0 + 17 + 2 - 2) / 1 + 1 = 18 */
  CHECK(s[2] == 4 && s[3] == 18);
  /* NULL arrays mean defaults */
  tpuir_val y2 = tpuir_convolution(g, x, w, NULL, NULL, NULL, NULL, NULL, 2, 0);
  CHECK_OK(tpuir_value_info(g, y2, &dt, &nd, s));
  CHECK(s[2] == 8 && s[3] == 8);
  /* window larger than the padded input -> size 0 */
  int64_t big[4] = {8, 3, 11, 2};
  tpuir_val wb = tpuir_param(g, TPU_F32, 4, big);
  tpuir_val y3 = tpuir_convolution(g, x, wb, NULL, NULL, NULL, NULL, NULL, 2, 0);
  CHECK_OK(tpuir_value_info(g, y3, &dt, &nd, s));
  CHECK(s[2] == 0);
  /* dump and hash see the attributes */
  char buf[4096];
  tpuir_set_outputs(g, 1, &y);
  tpuir_dump(g, buf, sizeof buf);
  CHECK(strstr(buf, "convolution(") != NULL);
  CHECK(strstr(buf, "stride=[2,1]") != NULL);
  CHECK(strstr(buf, "lhs_dilation=[1,2]") != NULL);
  CHECK(strstr(buf, "feature_group_count=2") != NULL);
  uint64_t h1 = TEST_IR_HASH(g);
  tpuir_graph *g2 = tpuir_graph_new();
  tpuir_val x2 = tpuir_param(g2, TPU_F32, 4, xs), w2 = tpuir_param(g2, TPU_F32, 4, ws);
  int64_t rd2[2] = {1, 1};
  tpuir_val z = tpuir_convolution(g2, x2, w2, st, lo, hi, ld, rd2, 2, TPU_PREC_HIGH);
  tpuir_set_outputs(g2, 1, &z);
  CHECK(TEST_IR_HASH(g2) != h1);
  tpuir_graph_free(g2);
  /* errors */
  int64_t w7[4] = {7, 3, 3, 3};
  tpuir_val bad = tpuir_param(g, TPU_F32, 4, w7);
  CHECK(tpuir_convolution(g, x, bad, NULL, NULL, NULL, NULL, NULL, 2, 0) == TPU_E_INVALID);
  CHECK(tpuir_convolution(g, x, w, NULL, NULL, NULL, NULL, NULL, 3, 0) == TPU_E_INVALID);
  CHECK(tpuir_convolution(g, x, w, NULL, NULL, NULL, NULL, NULL, 0, 0) == TPU_E_INVALID);
  int64_t zero[2] = {0, 1};
  CHECK(tpuir_convolution(g, x, w, zero, NULL, NULL, NULL, NULL, 2, 0) == TPU_E_INVALID);
  tpuir_val wd = tpuir_param(g, TPU_F64, 4, ws);
  CHECK(tpuir_convolution(g, x, wd, NULL, NULL, NULL, NULL, NULL, 2, 0) == TPU_E_TYPE);
  tpuir_val xi = tpuir_param(g, TPU_I32, 4, xs), wi = tpuir_param(g, TPU_I32, 4, ws);
  CHECK(tpuir_convolution(g, xi, wi, NULL, NULL, NULL, NULL, NULL, 2, 0) == TPU_E_TYPE);
  int64_t r2[2] = {2, 6};
  tpuir_val x2d = tpuir_param(g, TPU_F32, 2, r2);
  CHECK(tpuir_convolution(g, x2d, x2d, NULL, NULL, NULL, NULL, NULL, 1, 0) == TPU_E_INVALID);
  CHECK(tpuir_convolution(g, -5, w, NULL, NULL, NULL, NULL, NULL, 1, 0) == -5);
  CHECK(tpuir_convolution(g, 9999, w, NULL, NULL, NULL, NULL, NULL, 1, 0) == TPU_E_INVALID);
  tpuir_graph_free(g);
}

TPU_TEST(conv_empty_batch_and_channels) {
  /* N = 0: empty result; C = 0: zeros */
  for (int which = 0; which < 2; which++) {
    int64_t xs[4] = {which ? 2 : 0, which ? 0 : 3, 5, 5};
    int64_t ws[4] = {4, which ? 0 : 3, 3, 3};
    tpuir_graph *g = tpuir_graph_new();
    tpuir_val x = tpuir_param(g, TPU_F32, 4, xs), w = tpuir_param(g, TPU_F32, 4, ws);
    int64_t lo[2] = {1, 1}, hi[2] = {1, 1};
    tpuir_val y = tpuir_convolution(g, x, w, NULL, lo, hi, NULL, NULL, 1, 0);
    CHECK(y >= 0);
    tpuir_set_outputs(g, 1, &y);
    int dt, nd;
    int64_t s[TPU_MAX_DIMS];
    tpuir_value_info(g, y, &dt, &nd, s);
    tarr X = ta_new(TPU_F32, 4, xs), W = ta_new(TPU_F32, 4, ws), Y = ta_new(TPU_F32, 4, s);
    int64_t ny = tpu_view_numel(&Y.v);
    for (int64_t i = 0; i < ny; i++) tv_set(&Y.v, i, 5);
    tpu_view ins[2] = {X.v, W.v};
    CHECK_OK(tpux_run(g, 2, ins, 1, &Y.v));
    CHECK(ny == (which ? 2 * 4 * 25 : 0));
    for (int64_t i = 0; i < ny; i++) CHECK(tv_get(&Y.v, i) == 0);
    free(X.mem);
    free(W.mem);
    free(Y.mem);
    tpuir_graph_free(g);
  }
}

/* Bigger shapes with several threads: ResNet-like 3x3 and its gradients
 * (weight gradient via the kernel-wide layout; input gradient of a
 * strided conv via lhs dilation), f32 HIGHEST vs f64 on a sample. */
TPU_TEST(conv_resnet_like_shapes) {
  static const ccase big[] = {
      CC(2, 2, 16, 24, 1, {28, 28}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, {1, 1}),
      /* weight gradient of a 3x3/2 conv on 28x28: lhs = x^T, rhs = dy^T */
      CC(2, 16, 2, 24, 1, {28, 28}, {14, 14}, {1, 1}, {1, 1}, {0, 0}, {1, 1}, {2, 2}),
      /* input gradient of that conv (dy 14x14 -> dx 28x28) */
      CC(2, 2, 24, 16, 1, {14, 14}, {3, 3}, {1, 1}, {1, 1}, {2, 2}, {2, 2}, {1, 1}),
      /* one item per GEMM in several output-line chunks (col > 4 MB) */
      CC(2, 1, 64, 8, 1, {48, 48}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, {1, 1}),
      /* kernel-wide layout split over input channels (GEMM accumulates) */
      CC(2, 4, 16, 3, 1, {64, 64}, {62, 62}, {1, 1}, {0, 0}, {0, 0}, {1, 1}, {1, 1}),
  };
  for (int i = 0; i < 5; i++) {
    char lab[32];
    snprintf(lab, sizeof lab, "big %d", i);
    CHECK(run_case(&big[i], TPU_F32, TPU_PREC_HIGHEST, 0, 900 + (uint64_t)i, lab) == 0);
    if (i >= 3)
      CHECK(run_case(&big[i], TPU_F64, TPU_PREC_DEFAULT, 0, 950 + (uint64_t)i, lab) == 0);
  }
}

/* ---- windows ---------------------------------------------------------------- */

typedef struct wcase {
  int rank;
  int64_t sz[4], w[4], s[4], lo[4], hi[4], dl[4];
} wcase;

static void ref_window(const wcase *c, const tpu_view *x, int argmax, int sum,
                       int idims, double *out, int64_t *idx, int64_t *osz) {
  int64_t on = 1;
  for (int d = 0; d < c->rank; d++) {
    int64_t padded = c->lo[d] + c->sz[d] + c->hi[d], dw = (c->w[d] - 1) * c->dl[d] + 1;
    osz[d] = padded < dw ? 0 : (padded - dw) / c->s[d] + 1;
    on *= osz[d];
  }
  for (int64_t o = 0; o < on; o++) {
    int64_t q[4], rem = o;
    for (int d = c->rank - 1; d >= 0; d--) {
      q[d] = rem % osz[d];
      rem /= osz[d];
    }
    int64_t wn = 1;
    for (int d = 0; d < c->rank; d++) wn *= c->w[d];
    double m = sum ? 0 : -INFINITY;
    int64_t mi = -1;
    for (int64_t k = 0; k < wn; k++) {
      int64_t wi[4], r2 = k, lin = 0, ok = 1, il = 0;
      for (int d = c->rank - 1; d >= 0; d--) {
        wi[d] = r2 % c->w[d];
        r2 /= c->w[d];
      }
      for (int d = 0; d < c->rank; d++) {
        int64_t p = q[d] * c->s[d] - c->lo[d] + wi[d] * c->dl[d];
        if (p < 0 || p >= c->sz[d]) ok = 0;
        lin = lin * c->sz[d] + p;
        if (d >= c->rank - idims) il = il * c->sz[d] + p;
      }
      if (!ok) continue;
      double v = tv_get(x, lin);
      if (sum) m += v;
      else {
        if (mi < 0) mi = il;
        if (v > m || isnan(v)) {
          m = v;
          mi = il;
        }
      }
    }
    out[o] = m;
    if (argmax) idx[o] = mi;
  }
}

TPU_TEST(reduce_window_and_argmax) {
  static const wcase cases[] = {
      {4, {2, 3, 9, 8}, {1, 1, 3, 3}, {1, 1, 2, 2}, {0, 0, 1, 1}, {0, 0, 1, 1}, {1, 1, 1, 1}},
      {4, {1, 2, 7, 9}, {1, 1, 2, 3}, {1, 1, 1, 2}, {0, 0, 0, 1}, {0, 0, 1, 2}, {1, 1, 2, 1}},
      {3, {2, 3, 11}, {1, 1, 4}, {1, 1, 3}, {0, 0, 2}, {0, 0, 2}, {1, 1, 1}},
      {4, {2, 2, 5, 5}, {1, 2, 2, 2}, {1, 1, 1, 1}, {0, 0, 0, 0}, {0, 0, 0, 0}, {1, 1, 1, 1}},
      {2, {40, 70}, {5, 4}, {3, 2}, {2, 1}, {2, 3}, {1, 2}},
      /* undilated windows over the last two dims (f32: by output rows) */
      {2, {40, 70}, {5, 4}, {3, 2}, {2, 1}, {2, 3}, {1, 1}},
      {3, {2, 9, 8}, {1, 2, 2}, {1, 2, 2}, {0, 0, 0}, {0, 1, 1}, {1, 1, 1}},
      /* cumulative windows (cumsum / cummax, run as scans): along the last
       * dim (9 lines: groups of 4 and one left), along a middle dim */
      {2, {9, 70}, {1, 70}, {1, 1}, {0, 69}, {0, 0}, {1, 1}},
      {3, {3, 40, 5}, {1, 40, 1}, {1, 1, 1}, {0, 39, 0}, {0, 0, 0}, {1, 1, 1}},
      /* nearly one (padding 28 + 1): plain windows */
      {2, {6, 30}, {1, 30}, {1, 1}, {0, 28}, {0, 1}, {1, 1}},
  };
  int dts[5] = {TPU_F32, TPU_F64, TPU_BF16, TPU_I32, TPU_I64};
  for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
    for (int di = 0; di < 5; di++) {
      const wcase *c = &cases[ci];
      int dt = dts[di];
      tarr X = ta_new(dt, c->rank, c->sz);
      uint64_t s = 11 + ci * 7 + (uint64_t)di;
      ta_fill(&X.v, &s, -20, 20);
      int64_t n = tpu_view_numel(&X.v);
      if (tpu_dtype_is_float(dt)) { /* ties, a NaN and -inf */
        tv_set(&X.v, n / 3, tv_get(&X.v, n / 3 + 1));
        tv_set(&X.v, n / 2, NAN);
        tv_set(&X.v, n / 2 + 3, NAN);
        tv_set(&X.v, n / 5, -INFINITY);
      }
      int idims = c->rank >= 2 ? c->rank - 2 : 1;
      if (idims == 0) idims = c->rank;
      tpuir_graph *g = tpuir_graph_new();
      tpuir_val x = tpuir_param(g, dt, c->rank, c->sz);
      tpuir_val ys = tpuir_reduce_window(g, TPUIR_RED_SUM, x, c->w, c->s, c->lo, c->hi, c->dl);
      tpuir_val ym = tpuir_reduce_window(g, TPUIR_RED_MAX, x, c->w, c->s, c->lo, c->hi, c->dl);
      tpuir_val yi = tpuir_window_argmax(g, x, c->w, c->s, c->lo, c->hi, c->dl, idims);
      CHECK(ys >= 0 && ym >= 0 && yi >= 0);
      tpuir_val outs[3] = {ys, ym, yi};
      tpuir_set_outputs(g, 3, outs);
      int64_t osz[4];
      int64_t on = 1;
      double *rs = malloc(8 * (size_t)(n + 1)), *rm = malloc(8 * (size_t)(n + 1));
      int64_t *ri = malloc(8 * (size_t)(n + 1));
      ref_window(c, &X.v, 0, 1, idims, rs, NULL, osz);
      ref_window(c, &X.v, 1, 0, idims, rm, ri, osz);
      for (int d = 0; d < c->rank; d++) on *= osz[d];
      int dt2, nd;
      int64_t s2[TPU_MAX_DIMS];
      tpuir_value_info(g, yi, &dt2, &nd, s2);
      CHECK(dt2 == TPU_I64 && nd == c->rank);
      for (int d = 0; d < c->rank; d++) CHECK(s2[d] == osz[d]);
      tarr S = ta_new(dt, c->rank, osz), M = ta_new(dt, c->rank, osz),
           IX = ta_new(TPU_I64, c->rank, osz);
      tpu_view ov[3] = {S.v, M.v, IX.v};
      CHECK_OK(tpux_run(g, 1, &X.v, 3, ov));
      int bad = 0;
      for (int64_t i = 0; i < on && !bad; i++) {
        double tol = dt == TPU_BF16 ? 0x1p-8 * (fabs(rs[i]) + 1) : 1e-5 * (fabs(rs[i]) + 1);
        if (!tpu_dtype_is_float(dt)) tol = 0;
        if (!near_eq(tv_get(&S.v, i), round_to(dt, rs[i]), tol) &&
            !(fabs(tv_get(&S.v, i) - rs[i]) <= tol))
          bad = 1;
        if (!near_eq(tv_get(&M.v, i), rm[i], 0)) bad = 2;
        if (tv_geti(&IX.v, i) != ri[i]) bad = 3;
        if (bad)
          fprintf(stderr, "  window case %zu %s [%lld]: sum %g/%g max %g/%g idx %lld/%lld\n",
                  ci, tpu_dtype_name(dt), (long long)i, tv_get(&S.v, i), rs[i],
                  tv_get(&M.v, i), rm[i], (long long)tv_geti(&IX.v, i),
                  (long long)ri[i]);
      }
      free(rs);
      free(rm);
      free(ri);
      free(X.mem);
      free(S.mem);
      free(M.mem);
      free(IX.mem);
      tpuir_graph_free(g);
      CHECK(!bad);
    }
}

TPU_TEST(reduce_window_builder_errors) {
  tpuir_graph *g = tpuir_graph_new();
  int64_t xs[2] = {4, 4}, w[2] = {2, 2}, z[2] = {0, 1}, neg[2] = {-1, 0};
  tpuir_val x = tpuir_param(g, TPU_F32, 2, xs);
  CHECK(tpuir_reduce_window(g, TPUIR_RED_PROD, x, w, NULL, NULL, NULL, NULL) == TPU_E_INVALID);
  CHECK(tpuir_reduce_window(g, TPUIR_RED_SUM, x, z, NULL, NULL, NULL, NULL) == TPU_E_INVALID);
  CHECK(tpuir_reduce_window(g, TPUIR_RED_SUM, x, w, NULL, neg, NULL, NULL) == TPU_E_INVALID);
  CHECK(tpuir_window_argmax(g, x, w, NULL, NULL, NULL, NULL, 3) == TPU_E_INVALID);
  tpuir_val b = tpuir_param(g, TPU_BOOL, 2, xs);
  CHECK(tpuir_reduce_window(g, TPUIR_RED_MAX, b, w, NULL, NULL, NULL, NULL) == TPU_E_TYPE);
  tpuir_val y = tpuir_reduce_window(g, TPUIR_RED_MAX, x, w, w, NULL, NULL, NULL);
  int dt, nd;
  int64_t s[TPU_MAX_DIMS];
  CHECK_OK(tpuir_value_info(g, y, &dt, &nd, s));
  CHECK(s[0] == 2 && s[1] == 2);
  tpuir_set_outputs(g, 1, &y);
  char buf[1024];
  tpuir_dump(g, buf, sizeof buf);
  CHECK(strstr(buf, "reduce_window(") && strstr(buf, "kind=max") && strstr(buf, "window=[2,2]"));
  tpuir_graph_free(g);
}

/* ---- lowerings (tpulw) ------------------------------------------------------
 * End-to-end through the lowering table in f64: the forward against the
 * direct reference (regular convs) or through the adjoint identity
 * <convT(x, w), z> = <x, conv(z, w)> (transposed convs), and
 * convolution_backward through <y, gy> = <x, gx> = <w, gw> (y is bilinear in
 * x and w) plus grad_bias = sum of gy. */
#include "test_lower_util.h"

typedef struct lcase {
  int nsp, transposed;
  int64_t N, Cin, Cout, G;
  int64_t in[3], k[3], s[3], p[3], d[3], op[3];
} lcase;

static double dotv(const tpu_view *a, const tpu_view *b) {
  int64_t n = tpu_view_numel(a);
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += tv_get(a, i) * tv_get(b, i);
  return s;
}

static int lower_case(const lcase *c, uint64_t seed) {
  int nsp = c->nsp, rank = nsp + 2;
  int64_t xs[5] = {c->N, c->Cin}, ws[5], ys[5] = {c->N, c->Cout};
  if (c->transposed) {
    ws[0] = c->Cin;
    ws[1] = c->Cout / c->G;
  } else {
    ws[0] = c->Cout;
    ws[1] = c->Cin / c->G;
  }
  for (int i = 0; i < nsp; i++) {
    xs[2 + i] = c->in[i];
    ws[2 + i] = c->k[i];
    ys[2 + i] = c->transposed
                    ? (c->in[i] - 1) * c->s[i] - 2 * c->p[i] + c->d[i] * (c->k[i] - 1) + c->op[i] + 1
                    : (c->in[i] + 2 * c->p[i] - c->d[i] * (c->k[i] - 1) - 1) / c->s[i] + 1;
  }
  tarr X = ta_new(TPU_F64, rank, xs), W = ta_new(TPU_F64, rank, ws);
  tarr GY = ta_new(TPU_F64, rank, ys), B = ta_new(TPU_F64, 1, &c->Cout);
  uint64_t st = seed;
  ta_fill(&X.v, &st, -1, 1);
  ta_fill(&W.v, &st, -1, 1);
  ta_fill(&GY.v, &st, -1, 1);
  ta_fill(&B.v, &st, -1, 1);
  int64_t bsz[1] = {c->Cout}, mask[3] = {1, 1, 1};
  tpulw_arg a[12];
  int na = 0;
  a[na++] = lt_tensor("input", X.v);
  a[na++] = lt_tensor("weight", W.v);
  a[na++] = lt_tensor("bias", B.v);
  a[na++] = lt_ints("stride", c->s, nsp);
  a[na++] = lt_ints("padding", c->p, nsp);
  a[na++] = lt_ints("dilation", c->d, nsp);
  a[na++] = lt_bool("transposed", c->transposed);
  a[na++] = lt_ints("output_padding", c->op, nsp);
  a[na++] = lt_int("groups", c->G);
  lt_result fr = lt_run("convolution", "", a, na);
  int fail = fr.rc != 0 || fr.nout != 1;
  if (fail) fprintf(stderr, "  convolution: %s\n", tpu_last_error());
  for (int i = 0; !fail && i < rank; i++) fail = fr.out[0].sizes[i] != ys[i];
  int64_t ny = 1;
  for (int i = 0; i < rank; i++) ny *= ys[i];
  if (!fail) {
    /* y - bias */
    for (int64_t i = 0; i < ny; i++) {
      int64_t o = (i / (ny / c->N / c->Cout)) % c->Cout;
      tv_set(&fr.out[0], i, tv_get(&fr.out[0], i) - tv_get(&B.v, o));
    }
    if (!c->transposed) {
      ccase cc = {nsp, c->N, c->Cin, c->Cout, c->G, {0}, {0}, {0}, {0}, {0}, {0}, {0}};
      for (int i = 0; i < nsp; i++) {
        cc.in[i] = c->in[i];
        cc.k[i] = c->k[i];
        cc.st[i] = c->s[i];
        cc.lo[i] = cc.hi[i] = c->p[i];
        cc.ld[i] = 1;
        cc.rd[i] = c->d[i];
      }
      double *ref = malloc(8 * (size_t)ny), *ra = malloc(8 * (size_t)ny);
      ref_conv(&cc, &X.v, &W.v, NULL, ref, ra);
      for (int64_t i = 0; i < ny && !fail; i++)
        if (fabs(tv_get(&fr.out[0], i) - ref[i]) > 1e-10 * (ra[i] + 1)) {
          fprintf(stderr, "  forward [%lld]: %g vs %g\n", (long long)i,
                  tv_get(&fr.out[0], i), ref[i]);
          fail = 1;
        }
      free(ref);
      free(ra);
    } else { /* <convT(x, w), z> = <x, conv(z, w)> with z = gy */
      ccase cc = {nsp, c->N, c->Cout, c->Cin, c->G, {0}, {0}, {0}, {0}, {0}, {0}, {0}};
      for (int i = 0; i < nsp; i++) {
        cc.in[i] = ys[2 + i];
        cc.k[i] = c->k[i];
        cc.st[i] = c->s[i];
        cc.lo[i] = c->p[i];
        cc.hi[i] = c->p[i] - c->op[i];
        cc.ld[i] = 1;
        cc.rd[i] = c->d[i];
      }
      int64_t nx = tpu_view_numel(&X.v);
      double *ref = malloc(8 * (size_t)nx), *ra = malloc(8 * (size_t)nx);
      ref_conv(&cc, &GY.v, &W.v, NULL, ref, ra);
      double lhs = dotv(&fr.out[0], &GY.v), rhs = 0;
      for (int64_t i = 0; i < nx; i++) rhs += tv_get(&X.v, i) * ref[i];
      if (fabs(lhs - rhs) > 1e-9 * (fabs(lhs) + 1)) {
        fprintf(stderr, "  transposed adjoint: %.12g vs %.12g\n", lhs, rhs);
        fail = 1;
      }
      free(ref);
      free(ra);
    }
  }
  /* backward */
  tpulw_arg bw[12];
  int nb = 0;
  bw[nb++] = lt_tensor("grad_output", GY.v);
  bw[nb++] = lt_tensor("input", X.v);
  bw[nb++] = lt_tensor("weight", W.v);
  bw[nb++] = lt_ints("bias_sizes", bsz, 1);
  bw[nb++] = lt_ints("stride", c->s, nsp);
  bw[nb++] = lt_ints("padding", c->p, nsp);
  bw[nb++] = lt_ints("dilation", c->d, nsp);
  bw[nb++] = lt_bool("transposed", c->transposed);
  bw[nb++] = lt_ints("output_padding", c->op, nsp);
  bw[nb++] = lt_int("groups", c->G);
  bw[nb++] = lt_ints("output_mask", mask, 3);
  lt_result br = lt_run("convolution_backward", "", bw, nb);
  if (!fail && (br.rc != 0 || br.nout != 3)) {
    fprintf(stderr, "  convolution_backward: %s\n", tpu_last_error());
    fail = 1;
  }
  if (!fail) {
    double yg = dotv(&fr.out[0], &GY.v);
    double xg = dotv(&X.v, &br.out[0]), wg = dotv(&W.v, &br.out[1]);
    double tol = 1e-9 * (fabs(yg) + 1);
    if (fabs(xg - yg) > tol || fabs(wg - yg) > tol) {
      fprintf(stderr, "  backward adjoint: <y,gy> %.12g <x,gx> %.12g <w,gw> %.12g\n",
              yg, xg, wg);
      fail = 1;
    }
    int64_t per = ny / c->N / c->Cout;
    for (int64_t o = 0; o < c->Cout && !fail; o++) {
      double sb = 0;
      for (int64_t n = 0; n < c->N; n++)
        for (int64_t q = 0; q < per; q++) sb += tv_get(&GY.v, (n * c->Cout + o) * per + q);
      if (fabs(tv_get(&br.out[2], o) - sb) > 1e-9 * (fabs(sb) + 1)) fail = 1;
    }
  }
  lt_result_free(&fr);
  lt_result_free(&br);
  free(X.mem);
  free(W.mem);
  free(GY.mem);
  free(B.mem);
  return fail;
}

TPU_TEST(conv_lowering_forward_backward_adjoint) {
  static const lcase cases[] = {
      /* nsp, transposed, N, Cin, Cout, G, in, k, s, p, d, op */
      {2, 0, 2, 3, 4, 1, {9, 8}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {0, 0}},
      {2, 0, 2, 4, 6, 2, {11, 10}, {3, 2}, {2, 1}, {1, 0}, {1, 2}, {0, 0}},
      {2, 0, 3, 4, 8, 4, {8, 8}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {0, 0}},
      {2, 0, 1, 3, 5, 1, {12, 12}, {7, 7}, {2, 2}, {3, 3}, {1, 1}, {0, 0}},
      {2, 0, 2, 6, 4, 1, {6, 7}, {1, 1}, {2, 2}, {0, 0}, {1, 1}, {0, 0}},
      {1, 0, 2, 3, 4, 1, {17}, {4}, {3}, {2}, {2}, {0}},
      {3, 0, 1, 2, 3, 1, {5, 4, 6}, {3, 2, 3}, {1, 2, 1}, {1, 0, 1}, {1, 1, 1}, {0, 0, 0}},
      {2, 1, 2, 4, 3, 1, {5, 6}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 0}},
      {2, 1, 1, 6, 4, 2, {4, 4}, {3, 2}, {3, 2}, {1, 0}, {1, 1}, {2, 1}},
      {2, 1, 2, 3, 2, 1, {7, 5}, {3, 3}, {1, 1}, {2, 2}, {2, 2}, {0, 0}},
      {1, 1, 2, 3, 4, 1, {7}, {3}, {2}, {1}, {1}, {1}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int bad = lower_case(&cases[i], 77 + i);
    if (bad) fprintf(stderr, "  lowering case %zu failed\n", i);
    CHECK(!bad);
  }
}

TPU_TEST(conv_lowering_errors) {
  int64_t xs[4] = {1, 3, 5, 5}, ws[4] = {4, 3, 7, 7}, one[2] = {1, 1}, zero[2] = {0, 0};
  tarr X = ta_new(TPU_F32, 4, xs), W = ta_new(TPU_F32, 4, ws);
  tpulw_arg a[9] = {lt_tensor("input", X.v), lt_tensor("weight", W.v), lt_none("bias"),
                    lt_ints("stride", one, 2), lt_ints("padding", zero, 2),
                    lt_ints("dilation", one, 2), lt_bool("transposed", 0),
                    lt_ints("output_padding", zero, 2), lt_int("groups", 1)};
  lt_result r = lt_run("convolution", "", a, 9);
  CHECK(r.rc == TPU_E_INVALID);
  CHECK(strstr(tpu_last_error(), "Kernel size can't be greater") != NULL);
  a[8] = lt_int("groups", 2);
  r = lt_run("convolution", "", a, 9);
  CHECK(r.rc == TPU_E_INVALID);
  CHECK(strstr(tpu_last_error(), "to have 6 channels") != NULL);
  free(X.mem);
  free(W.mem);
}

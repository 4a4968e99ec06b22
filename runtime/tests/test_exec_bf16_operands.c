/* test_exec_bf16_operands.c - the plan's bf16 operands for f32 DEFAULT
 * matmuls (exec/vtpu/rewrite.c): one program with an elementwise producer
 * read by two matmuls (one transposed), a weight read by two matmuls (one
 * transposed; bound as a transposed view), a matmul result read by another
 * matmul, and a lone matmul of two parameters. Run with the rewrite on and
 * off: the rewritten matmuls are counted, row-major ones are bit-identical
 * (same products, same kernel), transposed ones agree within f32
 * accumulation error, and the lone matmul is left alone. */
#include <stdio.h>

#include "exec/vtpu/internal.h"
#include "test_exec_util.h"
#include "tpu_mxu.h"
#include "tpu_test.h"

enum { M = 256, K = 128, N = 96, P = 96, Q = 160 };

static tpuir_val dot2(tpuir_graph *g, tpuir_val a, tpuir_val b, int64_t ca, int64_t cb) {
  return tpuir_dot_general(g, a, b, 0, NULL, NULL, 1, &ca, &cb, TPU_PREC_DEFAULT, TPU_F32);
}

/* Run g with the rewrite switched (on: 1, off: 0) into fresh outputs;
 * returns the run's status, *dots = rewritten dots planned. */
static int run_mode(tpuir_graph *g, int on, int np, const tpu_view *ins, tarr *outs,
                    int64_t *dots) {
  int no = tpuir_num_outputs(g);
  tpu_view ov[8];
  for (int i = 0; i < no; i++) {
    int dt, nd;
    int64_t sz[TPU_MAX_DIMS];
    tpuir_value_info(g, tpuir_output(g, i), &dt, &nd, sz);
    outs[i] = ta_new(dt, nd, sz);
    ov[i] = outs[i].v;
  }
  int64_t d0 = tpux_fusion_runs(TPUX_FUSE_BF16_OPERANDS);
  tpux_set_fusion(TPUX_FUSE_BF16_OPERANDS, on);
  int rc = tpux_run(g, np, ins, no, ov);
  tpux_set_fusion(TPUX_FUSE_BF16_OPERANDS, -1);
  *dots = tpux_fusion_runs(TPUX_FUSE_BF16_OPERANDS) - d0;
  return rc;
}

TPU_TEST(exec_bf16_operands) {
  tpuir_graph *g = tpuir_graph_new();
  int64_t xs[2] = {M, K}, ws[2] = {K, N}, gs[2] = {M, N}, w2s[2] = {N, P};
  int64_t as[2] = {K, K}, bs[2] = {K, Q};
  tpuir_val X = tpuir_param(g, TPU_F32, 2, xs), W = tpuir_param(g, TPU_F32, 2, ws);
  tpuir_val G = tpuir_param(g, TPU_F32, 2, gs), W2 = tpuir_param(g, TPU_F32, 2, w2s);
  tpuir_val A = tpuir_param(g, TPU_F32, 2, as), B = tpuir_param(g, TPU_F32, 2, bs);
  tpuir_val H = tpuir_unary(g, TPUIR_TANH, X);       /* produced in the program */
  tpuir_val Y1 = dot2(g, H, W, 1, 0);                 /* [M,N] row-major */
  int64_t perm[2] = {1, 0};
  tpuir_val Y2 = dot2(g, tpuir_transpose(g, H, perm), G, 1, 0); /* H^T G: [K,N] */
  tpuir_val Y3 = dot2(g, G, tpuir_transpose(g, W, perm), 1, 0); /* G W^T: [M,K] */
  tpuir_val Y4 = dot2(g, Y1, W2, 1, 0);               /* a dot's result: [M,P] */
  tpuir_val Y5 = dot2(g, A, B, 1, 0);                 /* two lone parameters */
  tpuir_val outs[5] = {Y1, Y2, Y3, Y4, Y5};
  CHECK_OK(tpuir_set_outputs(g, 5, outs));

  uint64_t seed = 0x5eed;
  tarr P0[6];
  int64_t wt[2] = {N, K}; /* W bound as a transposed view of an [N,K] array */
  const int64_t *shp[6] = {xs, wt, gs, w2s, as, bs};
  tpu_view ins[6];
  for (int i = 0; i < 6; i++) {
    P0[i] = ta_new(TPU_F32, 2, shp[i]);
    ta_fill(&P0[i].v, &seed, -1, 1);
    ins[i] = P0[i].v;
  }
  ins[1].sizes[0] = K;
  ins[1].sizes[1] = N;
  ins[1].strides[0] = 1;
  ins[1].strides[1] = K;

  tarr on[5], off[5];
  int64_t dots_on = 0, dots_off = 0;
  int rc_on = run_mode(g, 1, 6, ins, on, &dots_on);
  int rc_off = run_mode(g, 0, 6, ins, off, &dots_off);
  int native = tpumxu_bf16_native();
  int same_rm = 1, close = 1;
  for (int o = 0; o < 5 && rc_on == TPU_OK && rc_off == TPU_OK; o++) {
    int64_t n = tpu_view_numel(&on[o].v);
    if (o == 0 || o == 3 || o == 4) /* row-major operands: bit-identical */
      same_rm &= memcmp(on[o].mem, off[o].mem, (size_t)n * 4) == 0;
    for (int64_t i = 0; i < n && close; i++) {
      double a = tv_get(&on[o].v, i), b = tv_get(&off[o].v, i);
      if (!near_eq(a, b, 1e-5 * (1 + sqrt((double)M)))) {
        fprintf(stderr, "  output %d [%lld]: %g (rewrite) vs %g\n", o, (long long)i, a, b);
        close = 0;
      }
    }
  }
  /* Y1 against an independent reference: bf16(tanh(x)) . bf16(w) */
  int refok = 1;
  for (int64_t i = 0; i < M && refok && rc_on == TPU_OK; i += 37)
    for (int64_t j = 0; j < N && refok; j += 5) {
      double s = 0;
      for (int64_t l = 0; l < K; l++)
        s += round_to(TPU_BF16, (float)tanh(tv_get(&P0[0].v, i * K + l))) *
             round_to(TPU_BF16, tv_get(&P0[1].v, j * K + l));
      refok = near_eq(tv_get(&on[0].v, i * N + j), s, 1e-3);
    }
  for (int o = 0; o < 5; o++) {
    free(on[o].mem);
    free(off[o].mem);
  }
  for (int i = 0; i < 6; i++) free(P0[i].mem);
  tpuir_graph_free(g);
  CHECK(rc_on == TPU_OK && rc_off == TPU_OK);
  CHECK(dots_on == (native ? 4 : 0)); /* Y1..Y4; not the lone Y5 */
  CHECK(dots_off == 0);
  CHECK(same_rm);
  CHECK(close);
  CHECK(refok);
}

/* Below REWRITE_MIN_MACS, non-f32 or non-DEFAULT dots are not rewritten. */
TPU_TEST(exec_bf16_operands_skipped) {
  static const int precs[2] = {TPU_PREC_DEFAULT, TPU_PREC_HIGHEST};
  static const int64_t rows[2] = {8, 256};
  for (int c = 0; c < 2; c++) {
    tpuir_graph *g = tpuir_graph_new();
    int64_t xs[2] = {rows[c], K}, ws[2] = {K, N};
    tpuir_val X = tpuir_param(g, TPU_F32, 2, xs), W = tpuir_param(g, TPU_F32, 2, ws);
    tpuir_val H = tpuir_unary(g, TPUIR_TANH, X);
    int64_t ca = 1, cb = 0;
    tpuir_val Y = tpuir_dot_general(g, H, W, 0, NULL, NULL, 1, &ca, &cb, precs[c], TPU_F32);
    CHECK_OK(tpuir_set_outputs(g, 1, &Y));
    tpux_plan *p = NULL;
    int64_t d0 = tpux_fusion_runs(TPUX_FUSE_BF16_OPERANDS);
    CHECK_OK(tpux_plan_new(g, &p));
    CHECK(tpux_fusion_runs(TPUX_FUSE_BF16_OPERANDS) == d0);
    tpux_plan_free(p);
    tpuir_graph_free(g);
  }
}

/* Attention's batched matmuls over heads split off [B, T, H, D] activations
 * (exec/vtpu/rewrite.c, "Heads"): q = reshape(transpose(Q)) [B*H, T, D],
 * k^T and v likewise, through the extra reshape/slice views Fused Eager
 * records; S = q k^T is read by an elementwise region (a GEMM epilogue),
 * O = exp(S / 8) v. The plan multiplies the transposed views over batch
 * dims (B, H) (no reshape copies; dot.c loops over B): checked against a
 * float64 reference at HIGHEST and DEFAULT (bf16-rounded operands). */
static double bf16r(double x) { return tpu_bf16_to_f32(tpu_f32_to_bf16((float)x)); }

TPU_TEST(exec_dot_head_split) {
  enum { B = 3, T = 40, H = 4, D = 24 };
  for (int prec = 0; prec < 2; prec++) {
    int pr = prec ? TPU_PREC_HIGHEST : TPU_PREC_DEFAULT;
    tpuir_graph *g = tpuir_graph_new();
    int64_t xs[4] = {B, T, H, D}, p0213[4] = {0, 2, 1, 3}, p0231[4] = {0, 2, 3, 1};
    int64_t qs[3] = {B * H, T, D}, q1[4] = {B * H, T, D, 1}, ks[3] = {B * H, D, T};
    int64_t z4[4] = {0, 0, 0, 0}, l4[4] = {B * H, T, D, 1}, o4[4] = {1, 1, 1, 1};
    tpuir_val Q = tpuir_param(g, TPU_F32, 4, xs), K = tpuir_param(g, TPU_F32, 4, xs);
    tpuir_val V = tpuir_param(g, TPU_F32, 4, xs);
    /* q through Fused Eager's views: [B*H,T,D,1] -> slice -> [B*H,T,D] */
    tpuir_val q = tpuir_reshape(g, tpuir_transpose(g, Q, p0213), 4, q1);
    q = tpuir_reshape(g, tpuir_slice(g, q, z4, l4, o4), 3, qs);
    tpuir_val kt = tpuir_reshape(g, tpuir_transpose(g, K, p0231), 3, ks);
    tpuir_val v = tpuir_reshape(g, tpuir_transpose(g, V, p0213), 3, qs);
    int64_t b0 = 0, c2 = 2, c1 = 1;
    tpuir_val S = tpuir_dot_general(g, q, kt, 1, &b0, &b0, 1, &c2, &c1, pr, TPU_F32);
    int64_t ss[3] = {B * H, T, T};
    tpuir_val c8 = tpuir_broadcast_in_dim(g, tpuir_const_f(g, TPU_F32, 0.125), 3, ss, NULL);
    tpuir_val E = tpuir_unary(g, TPUIR_EXP, tpuir_binary(g, TPUIR_MUL, S, c8));
    tpuir_val O = tpuir_dot_general(g, E, v, 1, &b0, &b0, 1, &c2, &c1, pr, TPU_F32);
    /* O read by a matmul too: at DEFAULT its bf16 copy is the split dot's
     * epilogue */
    int64_t ws[2] = {D, 256}, rs[3] = {B * H, T, 256}, c0 = 0;
    tpuir_val W = tpuir_param(g, TPU_F32, 2, ws);
    tpuir_val R = tpuir_dot_general(g, O, W, 0, NULL, NULL, 1, &c2, &c0, pr, TPU_F32);
    tpuir_val outs[3] = {S, O, R};
    CHECK_OK(tpuir_set_outputs(g, 3, outs));
    tpux_plan *p = NULL;
    CHECK_OK(tpux_plan_new(g, &p));
    int split = 0;
    for (int t = 0; p && p->own && t < tpuir_num_nodes(p->own); t++) {
      const tpuir_node *n = tpuir_get_node(p->own, t);
      split += n->op == TPUIR_DOT_GENERAL && n->na == 2;
    }
    CHECK(split == 2);
    tarr X[4], So = ta_new(TPU_F32, 3, ss), Oo = ta_new(TPU_F32, 3, qs), Ro = ta_new(TPU_F32, 3, rs);
    uint64_t seed = 99 + (uint64_t)prec;
    tpu_view ins[4], ov[3] = {So.v, Oo.v, Ro.v};
    for (int i = 0; i < 4; i++) {
      X[i] = i < 3 ? ta_new(TPU_F32, 4, xs) : ta_new(TPU_F32, 2, ws);
      ta_fill(&X[i].v, &seed, -1, 1);
      ins[i] = X[i].v;
    }
    CHECK_OK(tpux_plan_run(p, 4, ins, 3, ov));
    const float *wp = X[3].mem, *rp = Ro.mem;
    double worst_r = 0;
    for (int r = 0; r < B * H * T; r++)
      for (int c = 0; c < 256; c++) {
        double acc = 0;
        for (int d = 0; d < D; d++) {
          double a = ((const float *)Oo.mem)[r * D + d], w = wp[d * 256 + c];
          acc += prec ? a * w : bf16r(a) * bf16r(w);
        }
        worst_r = fmax(worst_r, fabs(rp[r * 256 + c] - acc));
      }
    CHECK(worst_r <= 2e-5);
    const float *qp = X[0].mem, *kp = X[1].mem, *vp = X[2].mem, *sp = So.mem, *op = Oo.mem;
    double worst_s = 0, worst_o = 0;
    static double e[T];
    for (int b = 0; b < B; b++)
      for (int h = 0; h < H; h++)
        for (int i = 0; i < T; i++) {
          for (int j = 0; j < T; j++) {
            double acc = 0;
            for (int d = 0; d < D; d++) {
              double a = qp[((b * T + i) * H + h) * D + d], c = kp[((b * T + j) * H + h) * D + d];
              acc += prec ? a * c : bf16r(a) * bf16r(c);
            }
            double got = sp[((b * H + h) * T + i) * T + j];
            worst_s = fmax(worst_s, fabs(got - acc));
            e[j] = exp((double)(float)(got * 0.125f));
          }
          for (int d = 0; d < D; d++) {
            double acc = 0;
            for (int j = 0; j < T; j++) {
              double a = (float)e[j], c = vp[((b * T + j) * H + h) * D + d];
              acc += prec ? a * c : bf16r(a) * bf16r(c);
            }
            worst_o = fmax(worst_o, fabs(op[((b * H + h) * T + i) * D + d] - acc) / (1 + fabs(acc)));
          }
        }
    if (worst_s > 2e-5 || worst_o > 2e-5)
      fprintf(stderr, "head split (prec %d): S err %g, O err %g\n", pr, worst_s, worst_o);
    CHECK(worst_s <= 2e-5 && worst_o <= 2e-5);
    for (int i = 0; i < 4; i++) free(X[i].mem);
    free(So.mem);
    free(Oo.mem);
    free(Ro.mem);
    tpux_plan_free(p);
    tpuir_graph_free(g);
  }
}

/* Views of a split packed projection (exec/vtpu/rewrite.c, emit_view):
 * X [T,B,3E] -> [T,B,3,E] -> transpose to [3,T,B,E] -> reshape [3T,B,H,D,1]
 * (recorded once per use, as Fused Eager does) -> slices of whole T-blocks
 * of dim 0 -> [T,B,H,D]. The reshape merges a transposed dim 0 and would
 * copy all of X per use; sliced first, each third is a view. The step
 * profile names views that materialised "(copy)": none here; with a cut
 * that is not a whole block (or the merged value itself an output) the
 * reshape stays and copies. Values against X's elements in every case. */
static int profile_copies(void) {
  tpux_profile_entry e[256];
  int n = tpux_profile_read(e, 256, 1), copies = 0;
  for (int i = 0; i < n && i < 256; i++) copies += strstr(e[i].label, "(copy)") != NULL;
  return copies;
}

TPU_TEST(exec_split_projection_views) {
  enum { T = 6, B = 4, H = 2, D = 4, E = H * D };
  for (int mode = 0; mode < 3; mode++) { /* 0: blocks, 1: a cut inside a block, 2: merged output */
    tpuir_graph *g = tpuir_graph_new();
    int64_t xs[3] = {T, B, 3 * E}, x4[4] = {T, B, 3, E}, p2013[4] = {2, 0, 1, 3};
    int64_t m5[5] = {3 * T, B, H, D, 1}, o4[4] = {T, B, H, D}, one[5] = {1, 1, 1, 1, 1};
    int64_t lo = mode == 1 ? T - 1 : T; /* mode 1: the second slice starts inside a block */
    int64_t st[3][5] = {{0}, {lo}, {2 * T}}, li[3][5];
    tpuir_val X = tpuir_param(g, TPU_F32, 3, xs);
    tpuir_val tr = tpuir_transpose(g, tpuir_reshape(g, X, 4, x4), p2013), outs[4];
    for (int k = 0; k < 3; k++) {
      memcpy(li[k], m5, sizeof m5);
      li[k][0] = st[k][0] + T;
      tpuir_val m = tpuir_reshape(g, tr, 5, m5); /* one per use */
      outs[k] = tpuir_reshape(g, tpuir_slice(g, m, st[k], li[k], one), 4, o4);
    }
    outs[2] = tpuir_binary(g, TPUIR_ADD, outs[2], outs[2]);
    int no = 3;
    if (mode == 2) outs[no++] = tpuir_reshape(g, tr, 5, m5);
    CHECK_OK(tpuir_set_outputs(g, no, outs));
    tarr Xa = ta_new(TPU_F32, 3, xs), O[4];
    uint64_t seed = 21;
    ta_fill(&Xa.v, &seed, -1, 1);
    tpu_view ov[4];
    for (int k = 0; k < no; k++) {
      O[k] = k < 3 ? ta_new(TPU_F32, 4, o4) : ta_new(TPU_F32, 5, m5);
      ov[k] = O[k].v;
    }
    tpux_profile_read(NULL, 0, 1);
    tpux_profile_enable(1);
    CHECK_OK(tpux_run(g, 1, &Xa.v, no, ov));
    tpux_profile_enable(0);
    int copies = profile_copies();
    CHECK(mode == 0 ? copies == 0 : copies > 0);
    const float *x = Xa.mem;
    for (int k = 0; k < 3; k++) {
      const float *o = O[k].mem;
      for (int i = 0; i < T * B * E; i++) { /* o[t,b,h,d] = X[t',b,c*E+h*D+d] of row st+t */
        int64_t r = st[k][0] + i / (B * E), c = r / T, t = r % T, be = i % (B * E);
        float want = x[(t * B + be / E) * 3 * E + c * E + be % E];
        CHECK(o[i] == (k == 2 ? 2 * want : want));
      }
    }
    for (int k = 0; k < no; k++) free(O[k].mem);
    free(Xa.mem);
    tpuir_graph_free(g);
  }
}

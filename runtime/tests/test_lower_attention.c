/* test_lower_attention.c - the attention lowerings end to end on the vTPU
 * (prepare -> launch -> synchronize, HIGHEST precision): torch_tpu::sdpa_fwd
 * / sdpa_bwd, which run the TPUIR_ATTENTION(_GRAD) executor
 * (exec/vtpu/attention.c: query blocks, causal key ranges, a broadcast
 * bias), and _native_multi_head_attention (lower/transformer.c) with and
 * without the weights, against float64 references computed here. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_lower_util.h"
#include "tpu_test.h"

#define SZ(...) ((const int64_t[]){__VA_ARGS__})
#define ARGS(...) ((const tpulw_arg[]){__VA_ARGS__})
#define NARGS(...) ((int)(sizeof((tpulw_arg[]){__VA_ARGS__}) / sizeof(tpulw_arg)))
#define RUN(name, ...) lt_run(name, "", ARGS(__VA_ARGS__), NARGS(__VA_ARGS__))


/* One (batch, head) of attention in float64: q [Tq, E], k [Tk, E], v [Tk,
 * Ev] row-major, bias [Tq, Tk] or NULL; P (probabilities), o and lse out.
 * With dout: dq, dk, dv (the gradients of sum(o * dout)). */
typedef struct att_ref {
  int64_t Tq, Tk, E, Ev;
  double scale;
  int causal;
} att_ref;

static void att_fwd(const att_ref *a, const double *q, const double *k, const double *v,
                    const double *bias, double *P, double *o, double *lse) {
  for (int64_t i = 0; i < a->Tq; i++) {
    double m = -INFINITY, *p = P + i * a->Tk;
    for (int64_t j = 0; j < a->Tk; j++) {
      double s = 0;
      for (int64_t e = 0; e < a->E; e++) s += q[i * a->E + e] * k[j * a->E + e];
      s = s * a->scale + (bias ? bias[i * a->Tk + j] : 0);
      if (a->causal && j > i) s = -INFINITY;
      p[j] = s;
      m = fmax(m, s);
    }
    double sum = 0;
    for (int64_t j = 0; j < a->Tk; j++) sum += p[j] = exp(p[j] - m);
    for (int64_t j = 0; j < a->Tk; j++) p[j] /= sum;
    if (lse) lse[i] = m + log(sum);
    for (int64_t e = 0; e < a->Ev; e++) {
      double acc = 0;
      for (int64_t j = 0; j < a->Tk; j++) acc += p[j] * v[j * a->Ev + e];
      o[i * a->Ev + e] = acc;
    }
  }
}

static void att_bwd(const att_ref *a, const double *q, const double *k, const double *v,
                    const double *P, const double *o, const double *dout, double *dq, double *dk,
                    double *dv) {
  memset(dq, 0, sizeof(double) * (size_t)(a->Tq * a->E));
  memset(dk, 0, sizeof(double) * (size_t)(a->Tk * a->E));
  memset(dv, 0, sizeof(double) * (size_t)(a->Tk * a->Ev));
  for (int64_t i = 0; i < a->Tq; i++) {
    double D = 0;
    for (int64_t e = 0; e < a->Ev; e++) D += dout[i * a->Ev + e] * o[i * a->Ev + e];
    for (int64_t j = 0; j < a->Tk; j++) {
      double p = P[i * a->Tk + j], dp = 0;
      for (int64_t e = 0; e < a->Ev; e++) {
        dp += dout[i * a->Ev + e] * v[j * a->Ev + e];
        dv[j * a->Ev + e] += p * dout[i * a->Ev + e];
      }
      double ds = p * (dp - D) * a->scale;
      for (int64_t e = 0; e < a->E; e++) {
        dq[i * a->E + e] += ds * k[j * a->E + e];
        dk[j * a->E + e] += ds * q[i * a->E + e];
      }
    }
  }
}

/* the (b, h) slice of a contiguous [B, H, T, n] view as doubles */
static void head_of(const tpu_view *t, int64_t bh, int64_t T, int64_t n, double *out) {
  for (int64_t i = 0; i < T * n; i++) out[i] = lt_get(t, bh * T * n + i);
}

/* sdpa_fwd and sdpa_bwd on [B, H, T, E] operands, every (b, h) checked
 * (CHECK reports through tpu_test_failed_) */
static void check_sdpa(int *tpu_test_failed_, int64_t B, int64_t H, int64_t Tq, int64_t Tk, int64_t E, int64_t Ev,
                       int causal, int with_bias) {
  tpu_view q = lt_new(TPU_F32, 4, SZ(B, H, Tq, E)), k = lt_new(TPU_F32, 4, SZ(B, H, Tk, E)),
           v = lt_new(TPU_F32, 4, SZ(B, H, Tk, Ev)), go = lt_new(TPU_F32, 4, SZ(B, H, Tq, Ev));
  tpu_view bias = lt_new(TPU_F32, 2, SZ(Tq, Tk)); /* broadcast over batch and heads */
  lt_fill_rand(&q, 1);
  lt_fill_rand(&k, 2);
  lt_fill_rand(&v, 3);
  lt_fill_rand(&go, 4);
  lt_fill_rand(&bias, 5);
  const double scale = 0.3;
  tpulw_arg ba = with_bias ? lt_tensor("attn_bias", bias) : lt_none("attn_bias");
  lt_result f = RUN("torch_tpu::sdpa_fwd", lt_tensor("query", q), lt_tensor("key", k),
                    lt_tensor("value", v), ba, lt_bool("is_causal", causal),
                    lt_float("scale", scale));
  CHECK(f.rc == 0);
  CHECK(f.nout == 2);
  lt_result g = RUN("torch_tpu::sdpa_bwd", lt_tensor("grad_out", go), lt_tensor("query", q),
                    lt_tensor("key", k), lt_tensor("value", v), lt_tensor("out", f.out[0]),
                    lt_tensor("logsumexp", f.out[1]), ba, lt_bool("is_causal", causal),
                    lt_float("scale", scale));
  CHECK(g.rc == 0);
  CHECK(g.nout == 3);
  if (f.rc == 0 && g.rc == 0) {
    att_ref a = {Tq, Tk, E, Ev, scale, causal};
    size_t nq = (size_t)(Tq * E), nk = (size_t)(Tk * E), nv = (size_t)(Tk * Ev),
           no = (size_t)(Tq * Ev);
    double *buf = malloc(sizeof(double) * (3 * nq + 3 * nk + 3 * nv + 3 * no + (size_t)(Tq * Tk) * 2 + (size_t)Tq));
    double *hq = buf, *hk = hq + nq, *hv = hk + nk, *hg = hv + nv, *hb = hg + no,
           *P = hb + Tq * Tk, *o = P + Tq * Tk, *lse = o + no, *dq = lse + Tq, *dk = dq + nq,
           *dv = dk + nk, *got = dv + nv;
    for (int64_t i = 0; i < Tq * Tk; i++) hb[i] = lt_get(&bias, i);
    for (int64_t bh = 0; bh < B * H; bh++) {
      head_of(&q, bh, Tq, E, hq);
      head_of(&k, bh, Tk, E, hk);
      head_of(&v, bh, Tk, Ev, hv);
      head_of(&go, bh, Tq, Ev, hg);
      att_fwd(&a, hq, hk, hv, with_bias ? hb : NULL, P, o, lse);
      att_bwd(&a, hq, hk, hv, P, o, hg, dq, dk, dv);
      head_of(&f.out[0], bh, Tq, Ev, got);
      for (size_t i = 0; i < no; i++) CHECK(lt_near(got[i], o[i], 2e-5));
      head_of(&f.out[1], bh, Tq, 1, got);
      for (int64_t i = 0; i < Tq; i++) CHECK(lt_near(got[i], lse[i], 2e-5));
      head_of(&g.out[0], bh, Tq, E, got);
      for (size_t i = 0; i < nq; i++) CHECK(lt_near(got[i], dq[i], 5e-5));
      head_of(&g.out[1], bh, Tk, E, got);
      for (size_t i = 0; i < nk; i++) CHECK(lt_near(got[i], dk[i], 5e-5));
      head_of(&g.out[2], bh, Tk, Ev, got);
      for (size_t i = 0; i < nv; i++) CHECK(lt_near(got[i], dv[i], 5e-5));
    }
    free(buf);
  }
  lt_result_free(&f);
  lt_result_free(&g);
  lt_free(&q);
  lt_free(&k);
  lt_free(&v);
  lt_free(&go);
  lt_free(&bias);
}

TPU_TEST(lower_sdpa_fwd_bwd_as_float64) {
  check_sdpa(tpu_test_failed_, 2, 3, 17, 23, 8, 5, 0, 1); /* more keys than queries, a bias */
  check_sdpa(tpu_test_failed_, 1, 2, 300, 300, 16, 16, 1, 0); /* several query blocks, causal key ranges */
  check_sdpa(tpu_test_failed_, 1, 1, 40, 9, 8, 8, 1, 1); /* more queries than keys */
}

/* _native_multi_head_attention: self-attention with a key padding mask
 * (mask_type 1; the first batch item's last keys masked), out and the
 * head-averaged weights; without need_weights on the fused node. */
TPU_TEST(lower_native_mha_as_float64) {
  enum { B = 2, L = 6, E = 8, H = 2, D = E / H };
  tpu_view x = lt_new(TPU_F32, 3, SZ(B, L, E)), w = lt_new(TPU_F32, 2, SZ(3 * E, E)),
           bw = lt_new(TPU_F32, 1, SZ(3 * E)), wp = lt_new(TPU_F32, 2, SZ(E, E)),
           bp = lt_new(TPU_F32, 1, SZ(E)), m = lt_new(TPU_BOOL, 2, SZ(B, L));
  lt_fill_rand(&x, 11);
  lt_fill_rand(&w, 12);
  lt_fill_rand(&bw, 13);
  lt_fill_rand(&wp, 14);
  lt_fill_rand(&bp, 15);
  lt_set(&m, L - 1, 1);
  lt_set(&m, L - 2, 1);
  /* reference: projections, per-head attention, output projection */
  double qkv[B][L][3 * E], ctx[B][L][E], ref[B][L][E], wavg[B][L][L];
  memset(wavg, 0, sizeof wavg);
  for (int b = 0; b < B; b++)
    for (int t = 0; t < L; t++)
      for (int j = 0; j < 3 * E; j++) {
        double s = lt_get(&bw, j);
        for (int e = 0; e < E; e++) s += lt_get(&x, (b * L + t) * E + e) * lt_get(&w, j * E + e);
        qkv[b][t][j] = s;
      }
  att_ref a = {L, L, D, D, 1.0 / sqrt((double)D), 0};
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++) {
      double q[L * D], k[L * D], v[L * D], bias[L * L], P[L * L], o[L * D];
      for (int t = 0; t < L; t++)
        for (int d = 0; d < D; d++) {
          q[t * D + d] = qkv[b][t][h * D + d];
          k[t * D + d] = qkv[b][t][E + h * D + d];
          v[t * D + d] = qkv[b][t][2 * E + h * D + d];
        }
      for (int i = 0; i < L * L; i++) bias[i] = lt_get(&m, b * L + i % L) ? -INFINITY : 0;
      att_fwd(&a, q, k, v, bias, P, o, NULL);
      for (int t = 0; t < L; t++) {
        for (int d = 0; d < D; d++) ctx[b][t][h * D + d] = o[t * D + d];
        for (int j = 0; j < L; j++) wavg[b][t][j] += P[t * L + j] / H;
      }
    }
  for (int b = 0; b < B; b++)
    for (int t = 0; t < L; t++)
      for (int j = 0; j < E; j++) {
        double s = lt_get(&bp, j);
        for (int e = 0; e < E; e++) s += ctx[b][t][e] * lt_get(&wp, j * E + e);
        ref[b][t][j] = s;
      }
  for (int need = 0; need < 2; need++) {
    lt_result r = RUN("_native_multi_head_attention", lt_tensor("query", x),
                      lt_tensor("key", x), lt_tensor("value", x), lt_int("embed_dim", E),
                      lt_int("num_head", H), lt_tensor("qkv_weight", w),
                      lt_tensor("qkv_bias", bw), lt_tensor("proj_weight", wp),
                      lt_tensor("proj_bias", bp), lt_tensor("mask", m),
                      lt_bool("need_weights", need), lt_bool("average_attn_weights", 1),
                      lt_int("mask_type", 1));
    CHECK(r.rc == 0);
    CHECK(r.nout == 1 + need);
    if (r.rc == 0) {
      CHECK_VALS(r.out[0], &ref[0][0][0], B * L * E, 2e-5);
      if (need) CHECK_VALS(r.out[1], &wavg[0][0][0], B * L * L, 2e-5);
    }
    lt_result_free(&r);
  }
  /* a 2-D mask without a mask type is CPU's error */
  lt_result r = RUN("_native_multi_head_attention", lt_tensor("query", x), lt_tensor("key", x),
                    lt_tensor("value", x), lt_int("embed_dim", E), lt_int("num_head", H),
                    lt_tensor("qkv_weight", w), lt_tensor("qkv_bias", bw),
                    lt_tensor("proj_weight", wp), lt_tensor("proj_bias", bp),
                    lt_tensor("mask", m), lt_bool("need_weights", 0),
                    lt_bool("average_attn_weights", 1), lt_none("mask_type"));
  CHECK(r.rc == TPU_E_INVALID);
  lt_free(&x);
  lt_free(&w);
  lt_free(&bw);
  lt_free(&wp);
  lt_free(&bp);
  lt_free(&m);
}

/* test_pjrt.c - the StableHLO emitter (always) and the PJRT executor
 * against the vTPU (when TORCH_TPU_PJRT_PLUGIN names a plugin; `make test`
 * passes the xla-cpu-pjrt plugin when it is installed). */
#include <string.h>

#include "exec/pjrt/internal.h"
#include "test_exec_util.h"
#include "tpu_test.h"

static char *emit(tpuir_graph *g) {
  char *t = NULL;
  if (tpux_emit_stablehlo(g, &t, NULL) != TPU_OK) return NULL;
  return t;
}

TPU_TEST(pjrt_emit_dot_precision) {
  static const char *want[3] = {"#stablehlo<precision DEFAULT>", "#stablehlo<precision HIGH>",
                                "#stablehlo<precision HIGHEST>"};
  for (int p = 0; p < 3; p++) {
    tpuir_graph *g = tpuir_graph_new();
    int64_t s[2] = {4, 8}, t[2] = {8, 3}, lc = 1, rc = 0;
    tpuir_val a = tpuir_param(g, TPU_F32, 2, s), b = tpuir_param(g, TPU_F32, 2, t);
    tpuir_val d = tpuir_dot_general(g, a, b, 0, NULL, NULL, 1, &lc, &rc, p, TPU_F32);
    CHECK(d >= 0);
    CHECK_OK(tpuir_set_outputs(g, 1, &d));
    char *txt = emit(g);
    CHECK(txt != NULL);
    CHECK(strstr(txt, "stablehlo.dot_general") != NULL);
    CHECK(strstr(txt, want[p]) != NULL);
    CHECK(strstr(txt, "lhs_contracting_dimensions = [1]") != NULL);
    CHECK(strstr(txt, "-> tensor<4x3xf32>") != NULL);
    for (int q = 0; q < 3; q++)
      if (q != p) CHECK(strstr(txt, want[q]) == NULL);
    free(txt);
    tpuir_graph_free(g);
  }
}

TPU_TEST(pjrt_emit_unsupported_op) {
  tpuir_graph *g = tpuir_graph_new();
  int64_t s[2] = {3, 3};
  tpuir_val a = tpuir_param(g, TPU_F32, 2, s);
  tpuir_val l = tpuir_lu(g, a, TPUIR_LU_PACKED);
  CHECK(l >= 0);
  CHECK_OK(tpuir_set_outputs(g, 1, &l));
  char *t = NULL;
  CHECK(tpux_emit_stablehlo(g, &t, NULL) == TPU_E_UNSUPPORTED);
  CHECK(t == NULL);
  CHECK(strstr(tpu_last_error(), "unsupported on PJRT: ") != NULL);
  /* a dead unsupported node does not matter */
  tpuir_val n = tpuir_unary(g, TPUIR_NEG, a);
  CHECK_OK(tpuir_set_outputs(g, 1, &n));
  t = emit(g);
  CHECK(t != NULL);
  CHECK(strstr(t, "stablehlo.negate") != NULL);
  free(t);
  tpuir_graph_free(g);
}

/* ---- PJRT vs vTPU ------------------------------------------------------------ */

static int have_plugin(void) {
  const char *p = getenv("TORCH_TPU_PJRT_PLUGIN");
  if (!p || !*p) {
    fprintf(stderr, "  (skipped: TORCH_TPU_PJRT_PLUGIN not set)\n");
    return 0;
  }
  return 1;
}

/* Run g through both executors with inputs ins; compare every output
 * within rtol/atol (exact when both are 0). Returns 0 when they agree. */
static int both(tpuir_graph *g, int nin, const tarr *ins, double rtol, double atol) {
  int nout = tpuir_num_outputs(g);
  tarr ov[8], op[8];
  tpu_view iv[8], vv[8], pv[8];
  for (int k = 0; k < nin; k++) iv[k] = ins[k].v;
  for (int i = 0; i < nout; i++) {
    int dt, nd;
    int64_t sz[TPU_MAX_DIMS];
    tpuir_value_info(g, tpuir_output(g, i), &dt, &nd, sz);
    ov[i] = ta_new(dt, nd, sz);
    op[i] = ta_new(dt, nd, sz);
    vv[i] = ov[i].v;
    pv[i] = op[i].v;
  }
  int bad = 0;
  if (tpux_run(g, nin, iv, nout, vv) != TPU_OK) {
    fprintf(stderr, "  vtpu: %s\n", tpu_last_error());
    bad = 1;
  }
  const tpux_executor *ex = tpux_executor_pjrt();
  void *exe = NULL;
  if (!bad && ex->compile(g, NULL, &exe) != TPU_OK) {
    fprintf(stderr, "  pjrt compile: %s\n", tpu_last_error());
    bad = 1;
  }
  if (!bad && ex->execute(exe, g, nin, iv, nout, pv) != TPU_OK) {
    fprintf(stderr, "  pjrt execute: %s\n", tpu_last_error());
    bad = 1;
  }
  ex->release(exe);
  for (int i = 0; i < nout && !bad; i++) {
    int64_t n = tpu_view_numel(&ov[i].v);
    for (int64_t j = 0; j < n; j++) {
      double a = tv_get(&ov[i].v, j), b = tv_get(&op[i].v, j);
      int ok = (isnan(a) && isnan(b)) || a == b || fabs(a - b) <= atol + rtol * fabs(a);
      if (!ok) {
        fprintf(stderr, "  output %d element %lld: vtpu %.9g pjrt %.9g\n", i, (long long)j, a, b);
        bad = 1;
        break;
      }
    }
  }
  for (int i = 0; i < nout; i++) {
    free(ov[i].mem);
    free(op[i].mem);
  }
  return bad;
}

static tarr rnd(int dt, int nd, const int64_t *sz, unsigned seed) {
  tarr a = ta_new(dt, nd, sz);
  int64_t n = tpu_view_numel(&a.v);
  srand(seed);
  for (int64_t i = 0; i < n; i++) tv_set(&a.v, i, (double)(rand() % 2001 - 1000) / 250.0);
  return a;
}

TPU_TEST(pjrt_matmul_reduce_matches_vtpu) {
  if (!have_plugin()) return;
  tpuir_graph *g = tpuir_graph_new();
  int64_t s[3] = {2, 5, 7}, t[3] = {2, 7, 3}, bd = 0, lc = 2, rc = 1, rd[1] = {1};
  tpuir_val a = tpuir_param(g, TPU_F32, 3, s), b = tpuir_param(g, TPU_F32, 3, t);
  tpuir_val d = tpuir_dot_general(g, a, b, 1, &bd, &bd, 1, &lc, &rc, TPU_PREC_HIGHEST, TPU_F32);
  tpuir_val e = tpuir_unary(g, TPUIR_TANH, d);
  tpuir_val r = tpuir_reduce(g, TPUIR_RED_SUM, e, 1, rd);
  tpuir_val m = tpuir_reduce(g, TPUIR_RED_MAX, a, 1, rd);
  tpuir_val am = tpuir_argreduce(g, TPUIR_RED_MAX, a, 2);
  tpuir_val outs[4] = {d, r, m, am};
  CHECK_OK(tpuir_set_outputs(g, 4, outs));
  tarr in[2] = {rnd(TPU_F32, 3, s, 1), rnd(TPU_F32, 3, t, 2)};
  CHECK(both(g, 2, in, 1e-5, 1e-5) == 0);
  free(in[0].mem);
  free(in[1].mem);
  tpuir_graph_free(g);
}

TPU_TEST(pjrt_shape_index_sort_match_vtpu) {
  if (!have_plugin()) return;
  tpuir_graph *g = tpuir_graph_new();
  int64_t s[2] = {4, 6}, is[2] = {4, 3}, perm[2] = {1, 0};
  tpuir_val x = tpuir_param(g, TPU_F32, 2, s), idx = tpuir_param(g, TPU_I64, 2, is);
  tpuir_val ga = tpuir_gather(g, x, 1, idx);
  tpuir_val src = tpuir_unary(g, TPUIR_EXP, ga);
  tpuir_val sc = tpuir_scatter_add(g, x, 1, idx, src);
  tpuir_val sv = tpuir_sort(g, x, 1, 0, TPUIR_SORT_VALUES);
  tpuir_val si = tpuir_sort(g, x, 0, 1, TPUIR_SORT_INDICES);
  tpuir_val tr = tpuir_transpose(g, x, perm);
  int64_t lo[2] = {1, 0}, hi[2] = {0, 2}, in0[2] = {0, 1};
  tpuir_val pz = tpuir_pad(g, x, tpuir_const_f(g, TPU_F32, -1.5), lo, hi, in0);
  tpuir_val rv = tpuir_reverse(g, x, 1, perm);
  tpuir_val cv = tpuir_convert(g, x, TPU_I32);
  tpuir_val io = tpuir_iota(g, TPU_F32, 2, s, 1);
  tpuir_val pr = tpuir_binary(g, TPUIR_GT, x, io);
  tpuir_val se = tpuir_select(g, pr, x, io);
  tpuir_val outs[8] = {ga, sc, sv, si, tr, pz, rv, cv};
  (void)se;
  CHECK_OK(tpuir_set_outputs(g, 8, outs));
  tarr in[2] = {rnd(TPU_F32, 2, s, 3), ta_new(TPU_I64, 2, is)};
  for (int i = 0; i < 12; i++) tv_seti(&in[1].v, i, (i * 7) % 6);
  tv_set(&in[0].v, 3, tv_get(&in[0].v, 4)); /* a tie for the stable sort */
  CHECK(both(g, 2, in, 1e-6, 1e-6) == 0);
  tpuir_val o2[2] = {se, tpuir_sort_head(g, x, 1, 1, TPUIR_SORT_INDICES, 2)};
  CHECK_OK(tpuir_set_outputs(g, 2, o2));
  CHECK(both(g, 2, in, 0, 0) == 0);
  free(in[0].mem);
  free(in[1].mem);
  tpuir_graph_free(g);
}

TPU_TEST(pjrt_rng_bits_match_vtpu) {
  if (!have_plugin()) return;
  tpuir_graph *g = tpuir_graph_new();
  int64_t s[2] = {3, 5}, two = 2;
  tpuir_val u = tpuir_rng(g, TPUIR_RNG_UNIFORM, TPU_F32, 2, s, 0x1234567890abcdefull, 77);
  tpuir_val key = tpuir_param(g, TPU_I64, 1, &two);
  tpuir_val d = tpuir_rng_dyn(g, TPUIR_RNG_UNIFORM, TPU_F64, 2, s, key);
  tpuir_val b = tpuir_rng_dyn(g, TPUIR_RNG_BITS, TPU_I64, 2, s, key);
  tpuir_val n = tpuir_rng(g, TPUIR_RNG_NORMAL, TPU_F32, 2, s, 42, 5);
  tpuir_val outs[4] = {u, d, b, n};
  CHECK_OK(tpuir_set_outputs(g, 4, outs));
  tarr k = ta_new(TPU_I64, 1, &two);
  tv_seti(&k.v, 0, -3);
  tv_seti(&k.v, 1, 1000);
  /* uniform and bits: bit-exact; normal: libm vs XLA's log/cos */
  CHECK(both(g, 1, &k, 1e-6, 1e-6) == 0);
  free(k.mem);
  tpuir_graph_free(g);
}

TPU_TEST(pjrt_conv_pool_match_vtpu) {
  if (!have_plugin()) return;
  tpuir_graph *g = tpuir_graph_new();
  int64_t xs[4] = {2, 3, 7, 6}, ws[4] = {4, 3, 3, 2}, st[2] = {2, 1}, lo[2] = {1, 0},
          hi[2] = {1, 1}, one[2] = {1, 1}, rd[2] = {1, 2};
  tpuir_val x = tpuir_param(g, TPU_F32, 4, xs), w = tpuir_param(g, TPU_F32, 4, ws);
  tpuir_val c = tpuir_convolution(g, x, w, st, lo, hi, one, rd, 1, TPU_PREC_HIGHEST);
  int64_t win[4] = {1, 1, 2, 2}, ws2[4] = {1, 1, 2, 2}, pl[4] = {0, 0, 1, 0},
          ph[4] = {0, 0, 0, 1};
  tpuir_val mp = tpuir_reduce_window(g, TPUIR_RED_MAX, x, win, ws2, pl, ph, NULL);
  tpuir_val ma = tpuir_window_argmax(g, x, win, ws2, pl, ph, NULL, 2);
  tpuir_val sp = tpuir_reduce_window(g, TPUIR_RED_SUM, x, win, ws2, pl, ph, NULL);
  CHECK(c >= 0 && mp >= 0 && ma >= 0 && sp >= 0);
  tpuir_val outs[4] = {c, mp, ma, sp};
  CHECK_OK(tpuir_set_outputs(g, 4, outs));
  tarr in[2] = {rnd(TPU_F32, 4, xs, 5), rnd(TPU_F32, 4, ws, 6)};
  CHECK(both(g, 2, in, 1e-5, 1e-5) == 0);
  free(in[0].mem);
  free(in[1].mem);
  tpuir_graph_free(g);
}

/* Donation: the emitter marks donated parameters and the extra output
 * arguments; on XLA:CPU an in-place output (out == in) is written into the
 * input's own memory, a disjoint output straight into its storage, and an
 * input read by another output is not corrupted. */
TPU_TEST(pjrt_donation_in_place) {
  int64_t s[1] = {256}, t[1] = {128};
  tpuir_graph *g = tpuir_graph_new();
  tpuir_val a = tpuir_param(g, TPU_F32, 1, s), b = tpuir_param(g, TPU_F32, 1, s);
  tpuir_val sum = tpuir_binary(g, TPUIR_ADD, a, b);   /* overwrites a */
  tpuir_val prod = tpuir_binary(g, TPUIR_MUL, a, b);  /* reads the old a */
  tpuir_val outs[2] = {sum, prod};
  CHECK_OK(tpuir_set_outputs(g, 2, outs));
  int alias[2] = {0, -2};
  char *txt = NULL;
  tpux__check *ck = NULL;
  int nck = 0;
  CHECK_OK(tpux__emit_stablehlo(g, alias, &txt, NULL, &ck, &nck));
  CHECK(txt && strstr(txt, "tensor<256xf32> {tf.aliasing_output = 0 : i32}") != NULL);
  CHECK(strstr(txt, "%dst1: tensor<256xf32> {tf.aliasing_output = 1 : i32}") != NULL);
  CHECK(alias[0] == 0 && alias[1] == -2 && nck == 0);
  free(txt);
  /* a donated parameter must have the output's type */
  tpuir_val half = tpuir_slice(g, a, (int64_t[]){0}, t, (int64_t[]){1});
  tpuir_val o2[1] = {half};
  CHECK_OK(tpuir_set_outputs(g, 1, o2));
  int al2[1] = {0};
  CHECK_OK(tpux__emit_stablehlo(g, al2, &txt, NULL, &ck, &nck));
  CHECK(al2[0] == -1 && strstr(txt, "aliasing_output") == NULL);
  free(txt);
  CHECK_OK(tpuir_set_outputs(g, 2, outs));
  if (have_plugin()) {
    tpux_pjrt_stats s0, s1;
    tpux_pjrt_get_stats(&s0);
    float *ma = aligned_alloc(64, 256 * 4), *mb = aligned_alloc(64, 256 * 4),
          *mp = aligned_alloc(64, 256 * 4);
    for (int i = 0; i < 256; i++) {
      ma[i] = (float)i;
      mb[i] = 0.5f * (float)(i % 7);
    }
    tpu_view iv[2], ov[2];
    tpu_view_init_contiguous(&iv[0], ma, TPU_F32, 1, s);
    tpu_view_init_contiguous(&iv[1], mb, TPU_F32, 1, s);
    ov[0] = iv[0]; /* in place into a */
    tpu_view_init_contiguous(&ov[1], mp, TPU_F32, 1, s);
    const tpux_executor *ex = tpux_executor_pjrt();
    void *exe = NULL;
    CHECK_OK(ex->compile(g, NULL, &exe));
    for (int rep = 0; rep < 2; rep++) { /* the second run reuses the executable */
      CHECK_OK(ex->execute(exe, g, 2, iv, 2, ov));
      for (int i = 0; i < 256; i++) {
        float a0 = rep ? (float)i + 0.5f * (float)(i % 7) : (float)i, bb = 0.5f * (float)(i % 7);
        CHECK(ma[i] == a0 + bb);
        CHECK(mp[i] == a0 * bb);
      }
    }
    ex->release(exe);
    tpux_pjrt_get_stats(&s1);
    CHECK(s1.compiles == s0.compiles + 1);
    CHECK(s1.donated_inputs == s0.donated_inputs + 2);
    CHECK(s1.direct_outputs == s0.direct_outputs + 2);
    CHECK(s1.bytes_d2h == s0.bytes_d2h);
    free(ma);
    free(mb);
    free(mp);
  }
  tpuir_graph_free(g);
}

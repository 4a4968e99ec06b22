/* test_exec_jit.c - native kernels of elementwise programs (exec/vtpu/jit.c)
 * give the tile engine's results bit for bit: random float/bf16/bool
 * programs with special values, tails, broadcasts and in-place updates,
 * each run with the kernels off and then compiled on the calling thread.
 * TPU_TEST_JIT_TRIALS=n runs n random programs (default 48). `make test`
 * runs these again at 8 and 4 lanes (TORCH_TPU_VTPU_VECTOR_WIDTH). */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "exec/vtpu/internal.h"
#include "test_exec_util.h"
#include "tpu_test.h"

/* A private cache directory for this process's kernels (removed at exit;
 * TPU_TEST_KEEP_JIT=1 keeps it), set for the test's duration only: other
 * layers read the variable once (the graph cache's disk tier). */
static char jit_dir[64], saved_dir[1024];
static int had_dir;
static void rm_jit_dir(void) {
  if (getenv("TPU_TEST_KEEP_JIT")) return;
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", jit_dir);
  if (system(cmd)) {}
}
static void use_private_cache(int on) {
  if (!jit_dir[0]) {
    snprintf(jit_dir, sizeof jit_dir, "/tmp/tpu_jit_test_XXXXXX");
    if (!mkdtemp(jit_dir)) return;
    atexit(rm_jit_dir);
  }
  if (on) {
    const char *d = getenv("TORCH_TPU_COMPILATION_CACHE_DIR");
    had_dir = d != NULL;
    snprintf(saved_dir, sizeof saved_dir, "%s", d ? d : "");
    setenv("TORCH_TPU_COMPILATION_CACHE_DIR", jit_dir, 1);
  } else if (had_dir) {
    setenv("TORCH_TPU_COMPILATION_CACHE_DIR", saved_dir, 1);
  } else {
    unsetenv("TORCH_TPU_COMPILATION_CACHE_DIR");
  }
}

/* run g with the kernels off, then on (compiled now); 1 if every output's
 * bytes agree. `ins` may alias `outs`: `reset` restores the inputs. */
static int both_ways(tpuir_graph *g, int nin, const tpu_view *ins, int nout,
                     const tpu_view *outs, const size_t *obytes, void **save,
                     const size_t *sbytes, void **live, int nsave) {
  void *first[8] = {0};
  int ok = 1, old = tpux_jit_configure(0, 0);
  for (int pass = 0; pass < 2 && ok; pass++) {
    for (int k = 0; k < nsave; k++) memcpy(live[k], save[k], sbytes[k]);
    tpux_jit_configure(pass ? 2 : 0, 1);
    if (tpux_run(g, nin, ins, nout, outs) != TPU_OK) ok = 0;
    for (int k = 0; k < nout && ok; k++) {
      if (!pass) {
        first[k] = malloc(obytes[k]);
        memcpy(first[k], outs[k].base, obytes[k]);
      } else {
        /* bits, except which NaN: an operation on two NaNs returns the
         * first operand's, and compilers may swap a + b */
        tpu_view f = outs[k];
        f.base = first[k];
        size_t e = tpu_dtype_size(f.dtype);
        for (int64_t i = 0; i < (int64_t)(obytes[k] / e) && ok; i++) {
          double x = tv_get(&outs[k], i), y = tv_get(&f, i);
          if (!memcmp((char *)f.base + i * (int64_t)e, (char *)outs[k].base + i * (int64_t)e, e) ||
              (x != x && y != y))
            continue;
          fprintf(stderr, "  output %d (%s) [%lld]: %.9g with native kernels, %.9g without\n",
                  k, tpu_dtype_name(f.dtype), (long long)i, x, y);
          ok = 0;
        }
      }
    }
  }
  for (int k = 0; k < nout; k++) free(first[k]);
  tpux_jit_configure(old, 3);
  return ok;
}

static void fill_special(const tpu_view *v, uint64_t *seed, int64_t n) {
  static const float sp[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e-40f, 88.9f, -100.f, 3e38f};
  ta_fill(v, seed, -4, 4);
  for (int64_t i = 0; i < n; i += 7 + (int64_t)(trand_next(seed) % 11))
    tv_set(v, i, sp[trand_next(seed) % 9]);
}

TPU_TEST(exec_jit_random_programs) {
  use_private_cache(1);
  tpux_jit_stats s0, s1;
  tpux_jit_get_stats(&s0);
  uint64_t seed = 77;
  static const int bops[] = {TPUIR_ADD, TPUIR_SUB, TPUIR_MUL, TPUIR_DIV, TPUIR_MAX,
                             TPUIR_MIN, TPUIR_POW, TPUIR_ATAN2};
  static const int uops[] = {TPUIR_NEG, TPUIR_ABS, TPUIR_SQRT, TPUIR_RSQRT, TPUIR_EXP,
                             TPUIR_LOG, TPUIR_TANH, TPUIR_ERF, TPUIR_LOGISTIC, TPUIR_SIN,
                             TPUIR_EXPM1, TPUIR_LOG1P};
  static const int cops[] = {TPUIR_LT, TPUIR_LE, TPUIR_GT, TPUIR_GE, TPUIR_EQ, TPUIR_NE};
  static const int lops[] = {TPUIR_AND, TPUIR_OR, TPUIR_XOR};
  /* shapes: one coalesced run with a tail; rows < 256 with a broadcast row
   * (tiles gathered); rows >= 256 (row tiles, each with a tail) */
  static const int64_t shapes[3][2] = {{37, 29}, {37, 29}, {3, 300}};
  int trials = getenv("TPU_TEST_JIT_TRIALS") ? atoi(getenv("TPU_TEST_JIT_TRIALS")) : 48;
  for (int trial = 0; trial < trials; trial++) {
    int sh = trial % 3;
    int64_t sz[2] = {shapes[sh][0], shapes[sh][1]}, N = sz[0] * sz[1];
    tpuir_graph *g = tpuir_graph_new();
    enum { MAXV = 64 };
    tpuir_val v[MAXV];
    int dt[MAXV], nv = 0;
    /* params: f32, f32, bf16, bool, f32 row (broadcast over dim 0 in
     * shape 1, full otherwise), 0-dim f32 and bool (broadcast scalars) */
    int64_t row[1] = {sz[1]};
    static const int pdt[7] = {TPU_F32, TPU_F32, TPU_BF16, TPU_BOOL, TPU_F32, TPU_F32, TPU_BOOL};
    tarr P[7];
    tpu_view ins[7];
    for (int k = 0; k < 7; k++) {
      int nd = k < 4 ? 2 : k == 4 ? (sh == 1 ? 1 : 2) : 0;
      P[k] = ta_new(pdt[k], nd, nd == 1 ? row : sz);
      int64_t n = nd == 2 ? N : nd == 1 ? sz[1] : 1;
      if (pdt[k] == TPU_BOOL)
        for (int64_t i = 0; i < n; i++) tv_set(&P[k].v, i, (double)(trand_next(&seed) % 2));
      else
        fill_special(&P[k].v, &seed, n);
      if (k == 5) tv_set(&P[k].v, 0, 0.75);
      ins[k] = P[k].v;
      tpuir_val pv = tpuir_param(g, pdt[k], nd, nd == 1 ? row : sz);
      if (nd < 2) {
        int64_t d1[1] = {1};
        pv = tpuir_broadcast_in_dim(g, pv, 2, sz, nd == 1 ? d1 : NULL);
      }
      v[nv] = pv;
      dt[nv++] = pdt[k];
    }
    int nodes = 6 + (int)(trand_next(&seed) % 24);
    for (int s = 0; s < nodes && nv < MAXV; s++) {
      int a = (int)(trand_next(&seed) % (uint64_t)nv), b = -1;
      for (int t = 0; t < 30 && b < 0; t++) {
        int c = (int)(trand_next(&seed) % (uint64_t)nv);
        if (dt[c] == dt[a]) b = c;
      }
      if (b < 0) b = a;
      int kind = (int)(trand_next(&seed) % 6), rdt = dt[a];
      tpuir_val r;
      if (dt[a] == TPU_BOOL) {
        if (kind < 2) r = tpuir_unary(g, TPUIR_NOT, v[a]);
        else if (kind < 4) r = tpuir_binary(g, lops[trand_next(&seed) % 3], v[a], v[b]);
        else r = tpuir_convert(g, v[a], rdt = kind == 4 ? TPU_F32 : TPU_BF16);
      } else if (kind <= 1) {
        r = tpuir_binary(g, bops[trand_next(&seed) % 8], v[a], v[b]);
      } else if (kind == 2) {
        r = tpuir_unary(g, uops[trand_next(&seed) % 12], v[a]);
      } else if (kind == 3) {
        r = tpuir_binary(g, cops[trand_next(&seed) % 6], v[a], v[b]);
        rdt = TPU_BOOL;
      } else if (kind == 4) {
        int p = -1;
        for (int t = 0; t < 30 && p < 0; t++) {
          int c = (int)(trand_next(&seed) % (uint64_t)nv);
          if (dt[c] == TPU_BOOL) p = c;
        }
        r = tpuir_select(g, v[p], v[a], v[b]);
      } else {
        rdt = trand_next(&seed) % 4 == 0 ? TPU_BOOL : dt[a] == TPU_F32 ? TPU_BF16 : TPU_F32;
        r = tpuir_convert(g, v[a], rdt);
      }
      CHECK(r >= 0);
      v[nv] = r;
      dt[nv++] = rdt;
    }
    int nout = 1 + (int)(trand_next(&seed) % 3);
    tpuir_val ov[3];
    tpu_view outs[3];
    size_t ob[3];
    tarr O[3];
    for (int k = 0; k < nout; k++) {
      int i = k ? 7 + (int)(trand_next(&seed) % (uint64_t)(nv - 7)) : nv - 1;
      ov[k] = v[i];
      O[k] = ta_new(dt[i], 2, sz);
      outs[k] = O[k].v;
      ob[k] = (size_t)N * tpu_dtype_size(dt[i]);
    }
    CHECK_OK(tpuir_set_outputs(g, nout, ov));
    if (!both_ways(g, 7, ins, nout, outs, ob, NULL, NULL, NULL, 0)) {
      fprintf(stderr, "  trial %d\n", trial);
      if (getenv("TPU_TEST_KEEP_JIT")) {
        char buf[8192];
        tpuir_dump(g, buf, sizeof buf);
        fprintf(stderr, "%s\n", buf);
        for (int k = 0; k < 7; k++) fprintf(stderr, "in%d = %.9g\n", k, tv_get(&ins[k], ins[k].ndim == 2 ? 99 : ins[k].ndim ? 99 % 29 : 0));
      }
      CHECK(0);
    }
    for (int k = 0; k < nout; k++) free(O[k].mem);
    for (int k = 0; k < 7; k++) free(P[k].mem);
    tpuir_graph_free(g);
  }
  tpux_jit_get_stats(&s1);
  use_private_cache(0);
  /* most programs are covered (not every trial's regions: some hold one op);
   * none at 4 lanes (SSE2: no native kernels) */
  if (tpux__vmath_width() >= 8) {
    CHECK(s1.compiles + s1.disk_loads - s0.compiles - s0.disk_loads >= 30);
    CHECK(s1.bound > s0.bound);
  }
  CHECK(s1.failures == s0.failures);
}

/* An in-place update (outputs are the inputs' own views, as an optimizer
 * step writes them) runs straight into the arrays; an output overlapping a
 * shifted view of its input must not. */
TPU_TEST(exec_jit_in_place) {
  use_private_cache(1);
  enum { N = 4099 };
  int64_t sz[1] = {N}, szm[1] = {N - 1};
  uint64_t seed = 5;
  tarr Pm = ta_new(TPU_F32, 1, sz), G = ta_new(TPU_F32, 1, sz), M = ta_new(TPU_F32, 1, sz);
  fill_special(&Pm.v, &seed, N);
  ta_fill(&G.v, &seed, -1, 1);
  ta_fill(&M.v, &seed, 0, 1);
  float lr = 0.01f;
  tpu_view LR;
  tpu_view_init_contiguous(&LR, &lr, TPU_F32, 0, NULL);
  tpuir_graph *g = tpuir_graph_new();
  tpuir_val p = tpuir_param(g, TPU_F32, 1, sz), gr = tpuir_param(g, TPU_F32, 1, sz);
  tpuir_val m = tpuir_param(g, TPU_F32, 1, sz);
  tpuir_val l = tpuir_broadcast_in_dim(g, tpuir_param(g, TPU_F32, 0, NULL), 1, sz, NULL);
  tpuir_val m2 = tpuir_binary(g, TPUIR_ADD, tpuir_binary(g, TPUIR_MUL, m, l), gr);
  tpuir_val p2 = tpuir_binary(g, TPUIR_SUB, p,
                              tpuir_binary(g, TPUIR_DIV, tpuir_binary(g, TPUIR_MUL, m2, l),
                                           tpuir_unary(g, TPUIR_SQRT, tpuir_unary(g, TPUIR_ABS, m2))));
  tpuir_val ov[2] = {p2, m2};
  CHECK_OK(tpuir_set_outputs(g, 2, ov));
  tpu_view ins[4] = {Pm.v, G.v, M.v, LR}, outs[2] = {Pm.v, M.v};
  size_t ob[2] = {N * 4, N * 4}, sb[2] = {N * 4, N * 4};
  void *save[2] = {malloc(N * 4), malloc(N * 4)}, *live[2] = {Pm.mem, M.mem};
  memcpy(save[0], Pm.mem, N * 4);
  memcpy(save[1], M.mem, N * 4);
  CHECK(both_ways(g, 4, ins, 2, outs, ob, save, sb, live, 2));
  tpuir_graph_free(g);
  /* y[0:N-1] = x[1:N] * x[1:N] + 1 over one array: reads run ahead of
   * writes, so tiles may not write in place */
  g = tpuir_graph_new();
  tpuir_val x = tpuir_param(g, TPU_F32, 1, szm);
  tpuir_val one = tpuir_broadcast_in_dim(g, tpuir_const_f(g, TPU_F32, 1), 1, szm, NULL);
  tpuir_val y = tpuir_binary(g, TPUIR_ADD, tpuir_binary(g, TPUIR_MUL, x, x), one);
  CHECK_OK(tpuir_set_outputs(g, 1, &y));
  tpu_view xi = Pm.v, yo = Pm.v;
  xi.sizes[0] = yo.sizes[0] = N - 1;
  xi.offset = 1;
  memcpy(save[0], Pm.mem, N * 4);
  int old = tpux_jit_configure(2, 1);
  CHECK_OK(tpux_run(g, 1, &xi, 1, &yo));
  tpux_jit_configure(old, 3);
  const float *was = save[0], *now = Pm.mem;
  for (int i = 0; i < N - 1; i++) {
    float want = was[i + 1] * was[i + 1] + 1;
    CHECK(!memcmp(&now[i], &want, 4));
  }
  tpuir_graph_free(g);
  use_private_cache(0);
  free(save[0]);
  free(save[1]);
  free(Pm.mem);
  free(G.mem);
  free(M.mem);
}

/* Short rows next to broadcast operands (a softmax's normalisation over
 * rows of 100): linear tiles read and write the contiguous arrays in
 * place, including an in-place update and a strided destination, with
 * the tile engine and with native kernels. */
TPU_TEST(exec_short_rows_in_place) {
  use_private_cache(1);
  enum { R = 37, C = 100, CP = 105 };
  int64_t rc[2] = {R, C}, r1[2] = {R, 1}, c1[2] = {1, C}, rcp[2] = {R, CP};
  int64_t bd[2] = {0, 1};
  tpuir_graph *g = tpuir_graph_new();
  tpuir_val X = tpuir_param(g, TPU_F32, 2, rc), S = tpuir_param(g, TPU_F32, 2, r1);
  tpuir_val Cc = tpuir_param(g, TPU_F32, 2, c1);
  tpuir_val Sb = tpuir_broadcast_in_dim(g, S, 2, rc, bd), Cb = tpuir_broadcast_in_dim(g, Cc, 2, rc, bd);
  tpuir_val o[3];
  o[0] = tpuir_binary(g, TPUIR_ADD, tpuir_binary(g, TPUIR_DIV, X, Sb), Cb);
  o[1] = tpuir_binary(g, TPUIR_SUB, tpuir_binary(g, TPUIR_DIV, X, Sb), Cb);
  o[2] = tpuir_binary(g, TPUIR_MUL, tpuir_binary(g, TPUIR_MUL, X, Sb), Cb); /* into X */
  CHECK_OK(tpuir_set_outputs(g, 3, o));
  tarr x = ta_new(TPU_F32, 2, rc), sv = ta_new(TPU_F32, 2, r1), cv = ta_new(TPU_F32, 2, c1);
  tarr y = ta_new(TPU_F32, 2, rc), z = ta_new(TPU_F32, 2, rcp);
  float *x0 = malloc(sizeof(float) * R * C);
  uint64_t seed = 11;
  ta_fill(&x.v, &seed, -1, 1);
  ta_fill(&sv.v, &seed, 1, 2);
  ta_fill(&cv.v, &seed, -1, 1);
  memcpy(x0, x.mem, sizeof(float) * R * C);
  tpu_view zo = z.v; /* columns 2..C+1 of rows of CP: not contiguous */
  zo.sizes[1] = C;
  zo.offset = 2;
  const float *S_ = sv.mem, *C_ = cv.mem;
  for (int mode = 0; mode < 2; mode++)
    for (int rep = 0; rep < 3; rep++) { /* native: bound from the second run */
      memcpy(x.mem, x0, sizeof(float) * R * C);
      int old = tpux_jit_configure(mode ? 2 : 0, 1);
      tpu_view in[3] = {x.v, sv.v, cv.v}, ov[3] = {y.v, zo, x.v};
      CHECK_OK(tpux_run(g, 3, in, 3, ov));
      tpux_jit_configure(old, 3);
      for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) {
          float xv = x0[r * C + c], q = xv / S_[r];
          CHECK(((float *)y.mem)[r * C + c] == q + C_[c]);
          CHECK(((float *)z.mem)[r * CP + 2 + c] == q - C_[c]);
          CHECK(((float *)x.mem)[r * C + c] == xv * S_[r] * C_[c]);
        }
    }
  free(x0), free(x.mem), free(sv.mem), free(cv.mem), free(y.mem), free(z.mem);
  tpuir_graph_free(g);
  use_private_cache(0);
}

/* Bool masks read by native kernels as bytes: in place (a full mask, row
 * tiles of rows >= 256 and linear tiles of short rows, each with a tail)
 * and gathered as bytes (a [R, 1] mask broadcast along the row, a [C]
 * mask broadcast over rows, a transposed mask): the tile engine's results
 * bit for bit, and each mask decides its elements. */
TPU_TEST(exec_jit_bool_masks) {
  use_private_cache(1);
  static const int64_t shapes[2][2] = {{37, 29}, {5, 300}};
  for (int sh = 0; sh < 2; sh++) {
    int64_t R = shapes[sh][0], C = shapes[sh][1], N = R * C;
    int64_t rc[2] = {R, C}, r1[2] = {R, 1}, cc[1] = {C}, cr[2] = {C, R};
    int64_t bd[2] = {0, 1}, d1[1] = {1}, perm[2] = {1, 0};
    tpuir_graph *g = tpuir_graph_new();
    tpuir_val X = tpuir_param(g, TPU_F32, 2, rc), F = tpuir_param(g, TPU_BOOL, 2, rc);
    tpuir_val Mr = tpuir_broadcast_in_dim(g, tpuir_param(g, TPU_BOOL, 2, r1), 2, rc, bd);
    tpuir_val Mc = tpuir_broadcast_in_dim(g, tpuir_param(g, TPU_BOOL, 1, cc), 2, rc, d1);
    tpuir_val Mt = tpuir_transpose(g, tpuir_param(g, TPU_BOOL, 2, cr), perm);
    tpuir_val two = tpuir_broadcast_in_dim(g, tpuir_const_f(g, TPU_F32, 2), 2, rc, NULL);
    tpuir_val y = tpuir_select(g, Mt, tpuir_unary(g, TPUIR_NEG, X), tpuir_binary(g, TPUIR_ADD, X, two));
    y = tpuir_select(g, Mc, tpuir_binary(g, TPUIR_MUL, X, two), y);
    y = tpuir_select(g, Mr, X, y);
    y = tpuir_select(g, F, tpuir_binary(g, TPUIR_SUB, y, two), y);
    CHECK_OK(tpuir_set_outputs(g, 1, &y));
    tarr x = ta_new(TPU_F32, 2, rc), f = ta_new(TPU_BOOL, 2, rc), mr = ta_new(TPU_BOOL, 2, r1);
    tarr mc = ta_new(TPU_BOOL, 1, cc), mt = ta_new(TPU_BOOL, 2, cr), o = ta_new(TPU_F32, 2, rc);
    uint64_t seed = 21 + (uint64_t)sh;
    ta_fill(&x.v, &seed, -1, 1);
    uint8_t *F_ = f.mem, *R_ = mr.mem, *C_ = mc.mem, *T_ = mt.mem;
    for (int64_t i = 0; i < N; i++) F_[i] = trand_next(&seed) % 2, T_[i] = trand_next(&seed) % 2;
    for (int64_t i = 0; i < R; i++) R_[i] = trand_next(&seed) % 3 == 0;
    for (int64_t i = 0; i < C; i++) C_[i] = trand_next(&seed) % 3 == 0;
    tpu_view ins[5] = {x.v, f.v, mr.v, mc.v, mt.v};
    size_t ob[1] = {(size_t)N * 4};
    CHECK(both_ways(g, 5, ins, 1, &o.v, ob, NULL, NULL, NULL, 0));
    const float *X_ = x.mem, *O_ = o.mem;
    for (int64_t r = 0; r < R; r++)
      for (int64_t c = 0; c < C; c++) {
        float v = X_[r * C + c];
        float w = R_[r] ? v : C_[c] ? v * 2 : T_[c * R + r] ? -v : v + 2;
        if (F_[r * C + c]) w -= 2;
        CHECK(O_[r * C + c] == w);
      }
    free(x.mem), free(f.mem), free(mr.mem), free(mc.mem), free(mt.mem), free(o.mem);
    tpuir_graph_free(g);
  }
  use_private_cache(0);
}

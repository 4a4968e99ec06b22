/* test_exec_plan.c - vTPU plans (tpux_plan_new/_run/_free): one plan run
 * many times with bindings that alias in every way (each pattern plans its
 * own variant; more patterns than a plan keeps), under both fusion
 * switches, from several threads at once, against an independent scalar
 * reference and against tpux_run. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "test_exec_util.h"
#include "tpu_test.h"

#define N 64

/* y = (x + 1) * w, z = x * 2 (one fused region, both outputs direct-write
 * candidates) */
static tpuir_graph *graph_yz(void) {
  int64_t s[1] = {N};
  tpuir_graph *g = tpuir_graph_new();
  tpuir_val x = tpuir_param(g, TPU_F32, 1, s), w = tpuir_param(g, TPU_F32, 1, s);
  tpuir_val one = tpuir_broadcast_in_dim(g, tpuir_const_f(g, TPU_F32, 1), 1, s, NULL);
  tpuir_val two = tpuir_broadcast_in_dim(g, tpuir_const_f(g, TPU_F32, 2), 1, s, NULL);
  tpuir_val y = tpuir_binary(g, TPUIR_MUL, tpuir_binary(g, TPUIR_ADD, x, one), w);
  tpuir_val z = tpuir_binary(g, TPUIR_MUL, x, two);
  tpuir_val o[2] = {y, z};
  if (tpuir_set_outputs(g, 2, o) != TPU_OK) {
    tpuir_graph_free(g);
    return NULL;
  }
  return g;
}

/* Destinations: into its own buffer, exactly x, exactly w, x shifted by 3,
 * x reversed, or (in the interleaved layout) one half of the buffer
 * holding both x and w. */
enum { D_OWN, D_X, D_W, D_XSHIFT, D_XREV, D_HALF, D_N };

typedef struct layout {
  float buf[4 * N + 64]; /* x, w (and the destinations) with guards */
  float own[2][N];
  tpu_view x, w;
  int inter; /* x = buf[0::2], w = buf[1::2] */
} layout;

static void layout_init(layout *L, int inter, uint64_t *seed) {
  int64_t s[1] = {N};
  for (int i = 0; i < 4 * N + 64; i++) L->buf[i] = (float)(int)trand(seed, -8, 8) * 0.5f;
  memset(L->own, 0, sizeof L->own);
  L->inter = inter;
  if (inter) {
    tpu_view_init_contiguous(&L->x, L->buf + 32, TPU_F32, 1, s);
    L->w = L->x;
    L->x.strides[0] = 2;
    L->w.offset = 1;
    L->w.strides[0] = 2;
  } else {
    tpu_view_init_contiguous(&L->x, L->buf + 32, TPU_F32, 1, s);
    tpu_view_init_contiguous(&L->w, L->buf + 32 + 2 * N, TPU_F32, 1, s);
  }
}

/* destination d for output o; 0 when d makes no sense in this layout */
static int dest(layout *L, int d, int o, tpu_view *v) {
  int64_t s[1] = {N};
  switch (d) {
  case D_OWN: tpu_view_init_contiguous(v, L->own[o], TPU_F32, 1, s); return 1;
  case D_X: *v = L->x; return !L->inter;
  case D_W: *v = L->w; return !L->inter;
  case D_XSHIFT: tpu_view_init_contiguous(v, L->buf + 35, TPU_F32, 1, s); return !L->inter;
  case D_XREV:
    *v = L->x;
    v->offset = N - 1;
    v->strides[0] = -1;
    return !L->inter;
  default: tpu_view_init_contiguous(v, L->buf + 32 + o * N, TPU_F32, 1, s); return L->inter;
  }
}

static int spans_overlap(const tpu_view *a, const tpu_view *b) {
  const float *a0 = (const float *)a->base + a->offset, *b0 = (const float *)b->base + b->offset;
  int64_t as = a->strides[0], bs = b->strides[0];
  const float *alo = as < 0 ? a0 + as * (N - 1) : a0, *blo = bs < 0 ? b0 + bs * (N - 1) : b0;
  int64_t ae = (as < 0 ? -as : as) * (N - 1), be = (bs < 0 ? -bs : bs) * (N - 1);
  return alo <= blo + be && blo <= alo + ae;
}

/* One binding case: plan p (reused) and a fresh tpux_run on a copy of the
 * layout both give the reference; the guards stay untouched. */
static int run_case(tpux_plan *p, const tpuir_graph *g, int inter, int dy, int dz, uint64_t seed) {
  static layout L, L2;
  uint64_t s1 = seed, s2 = seed;
  layout_init(&L, inter, &s1);
  layout_init(&L2, inter, &s2);
  tpu_view ov[2], ov2[2];
  if (!dest(&L, dy, 0, &ov[0]) || !dest(&L, dz, 1, &ov[1])) return 1; /* n/a */
  if (spans_overlap(&ov[0], &ov[1])) return 1;
  dest(&L2, dy, 0, &ov2[0]);
  dest(&L2, dz, 1, &ov2[1]);
  float yr[N], zr[N], before[4 * N + 64];
  for (int i = 0; i < N; i++) {
    float x = (float)tv_get(&L.x, i), w = (float)tv_get(&L.w, i);
    yr[i] = (x + 1.0f) * w;
    zr[i] = x * 2.0f;
  }
  memcpy(before, L.buf, sizeof before);
  tpu_view ins[2] = {L.x, L.w}, ins2[2] = {L2.x, L2.w};
  if (tpux_plan_run(p, 2, ins, 2, ov) != TPU_OK) return 0;
  if (tpux_run(g, 2, ins2, 2, ov2) != TPU_OK) return 0;
  for (int i = 0; i < N; i++)
    if (tv_get(&ov[0], i) != yr[i] || tv_get(&ov[1], i) != zr[i] ||
        tv_get(&ov2[0], i) != yr[i] || tv_get(&ov2[1], i) != zr[i])
      return 0;
  for (int i = 0; i < 32; i++) /* guards */
    if (L.buf[i] != before[i] || L.buf[4 * N + 32 + i] != before[4 * N + 32 + i]) return 0;
  return 1;
}

TPU_TEST(exec_plan_alias_patterns) {
  tpuir_graph *g = graph_yz();
  CHECK(g);
  tpux_plan *p = NULL;
  CHECK_OK(tpux_plan_new(g, &p));
  int cases = 0;
  for (int rep = 0; rep < 2; rep++) /* the second pass finds its variants */
    for (int fl = 0; fl < 4; fl++) {
      tpux_set_fusion(TPUX_FUSE_EPILOGUE, fl & 1);
      tpux_set_fusion(TPUX_FUSE_REDUCE, (fl >> 1) & 1);
      for (int inter = 0; inter < 2; inter++)
        for (int dy = 0; dy < D_N; dy++)
          for (int dz = 0; dz < D_N; dz++) {
            int ok = run_case(p, g, inter, dy, dz, 77 + (uint64_t)(dy * 7 + dz));
            if (!ok) fprintf(stderr, "  case inter=%d dy=%d dz=%d flags=%d\n", inter, dy, dz, fl);
            CHECK(ok);
            cases++;
          }
    }
  tpux_set_fusion(TPUX_FUSE_EPILOGUE, -1);
  tpux_set_fusion(TPUX_FUSE_REDUCE, -1);
  CHECK(cases == 2 * 4 * 2 * D_N * D_N);
  tpux_plan_free(p);
  tpuir_graph_free(g);
}

/* A plan follows the fusion switches set after it was built. */
TPU_TEST(exec_plan_fusion_switch) {
  enum { M = 16, K = 24, NN = 20 };
  int64_t xs[2] = {M, K}, ws[2] = {K, NN}, os[2] = {M, NN}, lc[1] = {1}, rc[1] = {0};
  tpuir_graph *g = tpuir_graph_new();
  tpuir_val X = tpuir_param(g, TPU_F32, 2, xs), W = tpuir_param(g, TPU_F32, 2, ws);
  tpuir_val D = tpuir_dot_general(g, X, W, 0, NULL, NULL, 1, lc, rc, TPU_PREC_HIGHEST, TPU_F32);
  tpuir_val zero = tpuir_broadcast_in_dim(g, tpuir_const_f(g, TPU_F32, 0), 2, os, NULL);
  tpuir_val y = tpuir_binary(g, TPUIR_MAX, D, zero);
  CHECK_OK(tpuir_set_outputs(g, 1, &y));
  tarr A = ta_new(TPU_F32, 2, xs), B = ta_new(TPU_F32, 2, ws), O = ta_new(TPU_F32, 2, os);
  uint64_t seed = 5;
  ta_fill(&A.v, &seed, -2, 2);
  ta_fill(&B.v, &seed, -2, 2);
  tpux_plan *p = NULL;
  CHECK_OK(tpux_plan_new(g, &p));
  tpu_view ins[2] = {A.v, B.v};
  for (int it = 0; it < 6; it++) {
    int on = it % 3 != 1;
    tpux_set_fusion(TPUX_FUSE_EPILOGUE, on);
    int64_t r0 = tpux_fusion_runs(TPUX_FUSE_EPILOGUE);
    CHECK_OK(tpux_plan_run(p, 2, ins, 1, &O.v));
    CHECK(tpux_fusion_runs(TPUX_FUSE_EPILOGUE) - r0 == on);
    for (int i = 0; i < M; i++)
      for (int j = 0; j < NN; j++) {
        double s = 0;
        for (int k = 0; k < K; k++) s += tv_get(&A.v, i * K + k) * tv_get(&B.v, k * NN + j);
        CHECK_NEAR(tv_get(&O.v, i * NN + j), s > 0 ? s : 0, 1e-4);
      }
  }
  tpux_set_fusion(TPUX_FUSE_EPILOGUE, -1);
  tpux_plan_free(p);
  free(A.mem);
  free(B.mem);
  free(O.mem);
  tpuir_graph_free(g);
}

/* Runs of one plan overlap (two streams running one cached program): each
 * gets its own scratch. */
typedef struct plan_arg {
  tpux_plan *p;
  int id, bad;
} plan_arg;

static void *plan_worker(void *vp) {
  plan_arg *a = vp;
  int64_t s[1] = {N};
  float x[N], w[N], y[N], z[N];
  tpu_view v[4];
  tpu_view_init_contiguous(&v[0], x, TPU_F32, 1, s);
  tpu_view_init_contiguous(&v[1], w, TPU_F32, 1, s);
  tpu_view_init_contiguous(&v[2], y, TPU_F32, 1, s);
  tpu_view_init_contiguous(&v[3], a->id & 1 ? x : z, TPU_F32, 1, s); /* odd: z in place of x */
  for (int it = 0; it < 200 && !a->bad; it++) {
    for (int i = 0; i < N; i++) {
      x[i] = (float)(a->id * 100 + it + i);
      w[i] = 0.5f;
    }
    if (tpux_plan_run(a->p, 2, v, 2, v + 2) != TPU_OK) a->bad = 1;
    for (int i = 0; i < N && !a->bad; i++) {
      float x0 = (float)(a->id * 100 + it + i);
      if (y[i] != (x0 + 1) * 0.5f || ((float *)v[3].base)[i] != x0 * 2) a->bad = 2;
    }
  }
  return NULL;
}

TPU_TEST(exec_plan_concurrent_runs) {
  tpuir_graph *g = graph_yz();
  CHECK(g);
  tpux_plan *p = NULL;
  CHECK_OK(tpux_plan_new(g, &p));
  enum { NT = 4 };
  pthread_t th[NT];
  plan_arg args[NT];
  for (int k = 0; k < NT; k++) {
    args[k] = (plan_arg){p, k, 0};
    CHECK(pthread_create(&th[k], NULL, plan_worker, &args[k]) == 0);
  }
  for (int k = 0; k < NT; k++) pthread_join(th[k], NULL);
  for (int k = 0; k < NT; k++) CHECK(args[k].bad == 0);
  tpux_plan_free(p);
  tpuir_graph_free(g);
}

TPU_TEST(exec_plan_errors) {
  tpux_plan *p = (tpux_plan *)&p;
  CHECK(tpux_plan_new(NULL, &p) == TPU_E_INVALID && p == NULL);
  CHECK(tpux_plan_run(NULL, 0, NULL, 0, NULL) == TPU_E_INVALID);
  tpux_plan_free(NULL);
  tpuir_graph *g = graph_yz();
  CHECK(g);
  CHECK_OK(tpux_plan_new(g, &p));
  int64_t s[1] = {N}, s2[1] = {N + 1};
  float a[N + 1] = {0}, b[N] = {0}, c[N], d[N];
  tpu_view v[4];
  tpu_view_init_contiguous(&v[0], a, TPU_F32, 1, s);
  tpu_view_init_contiguous(&v[1], b, TPU_F32, 1, s);
  tpu_view_init_contiguous(&v[2], c, TPU_F32, 1, s);
  tpu_view_init_contiguous(&v[3], d, TPU_F32, 1, s);
  CHECK(tpux_plan_run(p, 1, v, 2, v + 2) == TPU_E_INVALID);   /* parameter count */
  CHECK(tpux_plan_run(p, 2, v, 1, v + 2) == TPU_E_INVALID);   /* output count */
  tpu_view_init_contiguous(&v[0], a, TPU_F32, 1, s2);
  CHECK(tpux_plan_run(p, 2, v, 2, v + 2) == TPU_E_INVALID);   /* shape */
  tpu_view_init_contiguous(&v[0], a, TPU_F64, 1, s);
  CHECK(tpux_plan_run(p, 2, v, 2, v + 2) == TPU_E_TYPE);      /* dtype */
  tpu_view_init_contiguous(&v[0], a, TPU_F32, 1, s);
  CHECK_OK(tpux_plan_run(p, 2, v, 2, v + 2)); /* the plan still runs after errors */
  for (int i = 0; i < N; i++) CHECK(c[i] == 0 && d[i] == 0);
  tpux_plan_free(p);
  tpuir_graph_free(g);
}

/* steps of the last profiled runs named like label (reset) */
static int profile_steps(const char *label) {
  tpux_profile_entry e[256];
  int n = tpux_profile_read(e, 256, 1), k = 0;
  for (int i = 0; i < n && i < 256; i++) k += strncmp(e[i].label, label, strlen(label)) == 0;
  return k;
}

/* IOTA values read only by regions are computed as the regions load them
 * (no iota step), in every kind of region (plain, feeding a reduction, a
 * dot's epilogue) and dtype (wrapped, rounded); one that an output or a
 * view reads is evaluated. */
TPU_TEST(exec_plan_fused_iota) {
  enum { R = 37, C = 300, K = 8 };
  int64_t rc[2] = {R, C}, r1[2] = {R, 1}, rk[2] = {R, K}, kc[2] = {K, C}, d1[1] = {1};
  int64_t bd[2] = {0, 1}, cdim[1] = {1}, rdim[1] = {0};
  for (int fuse = 0; fuse < 2; fuse++) {
    CHECK_OK(tpux_set_fusion(TPUX_FUSE_REDUCE, fuse));
    CHECK_OK(tpux_set_fusion(TPUX_FUSE_EPILOGUE, fuse));
    tpuir_graph *g = tpuir_graph_new();
    tpuir_val X = tpuir_param(g, TPU_F32, 2, rc), I = tpuir_param(g, TPU_I64, 2, r1);
    tpuir_val A = tpuir_param(g, TPU_F32, 2, rk), B = tpuir_param(g, TPU_F32, 2, kc);
    tpuir_val zero = tpuir_broadcast_in_dim(g, tpuir_const_f(g, TPU_F32, 0), 2, rc, NULL);
    tpuir_val hit = tpuir_binary(g, TPUIR_EQ, tpuir_iota(g, TPU_I64, 2, rc, 1),
                                 tpuir_broadcast_in_dim(g, I, 2, rc, bd));
    tpuir_val o[6];
    o[0] = tpuir_select(g, hit, X, zero);                          /* one-hot */
    o[1] = tpuir_reduce(g, TPUIR_RED_SUM, o[0], 1, cdim);          /* its row sums */
    o[2] = tpuir_binary(g, TPUIR_ADD, tpuir_convert(g, tpuir_iota(g, TPU_I8, 2, rc, 1), TPU_F32),
                        tpuir_convert(g, tpuir_iota(g, TPU_BF16, 2, rc, 0), TPU_F32));
    o[3] = tpuir_binary(g, TPUIR_ADD, /* in a dot's epilogue */
                        tpuir_dot_general(g, A, B, 0, NULL, NULL, 1, cdim, rdim,
                                          TPU_PREC_HIGHEST, TPU_F32),
                        tpuir_iota(g, TPU_F32, 2, rc, 0));
    o[4] = tpuir_iota(g, TPU_I32, 2, rc, 1);                       /* an output */
    o[5] = tpuir_binary(g, TPUIR_MUL, X, /* read through a view */
                        tpuir_broadcast_in_dim(g, tpuir_iota(g, TPU_F32, 1, d1, 0), 2, rc, rdim));
    CHECK_OK(tpuir_set_outputs(g, 6, o));
    tarr x = ta_new(TPU_F32, 2, rc), ix = ta_new(TPU_I64, 2, r1);
    tarr a = ta_new(TPU_F32, 2, rk), b = ta_new(TPU_F32, 2, kc), out[6];
    uint64_t seed = 5;
    ta_fill(&x.v, &seed, -1, 1);
    for (int i = 0; i < R * K; i++) ((float *)a.mem)[i] = (float)(i % 7 - 3);
    for (int i = 0; i < K * C; i++) ((float *)b.mem)[i] = (float)(i % 5 - 2);
    for (int i = 0; i < R; i++) ((int64_t *)ix.mem)[i] = (i * 97) % (C + 3); /* some miss */
    int64_t r0[1] = {R};
    out[0] = ta_new(TPU_F32, 2, rc);
    out[1] = ta_new(TPU_F32, 1, r0);
    out[2] = ta_new(TPU_F32, 2, rc);
    out[3] = ta_new(TPU_F32, 2, rc);
    out[4] = ta_new(TPU_I32, 2, rc);
    out[5] = ta_new(TPU_F32, 2, rc);
    tpu_view in[4] = {x.v, ix.v, a.v, b.v}, ov[6];
    for (int k = 0; k < 6; k++) ov[k] = out[k].v;
    tpux_profile_read(NULL, 0, 1);
    tpux_profile_enable(1);
    CHECK_OK(tpux_run(g, 4, in, 6, ov));
    tpux_profile_enable(0);
    CHECK(profile_steps("iota") == 2); /* the output and the view's operand */
    const float *X_ = x.mem, *A_ = a.mem, *B_ = b.mem;
    const int64_t *I_ = ix.mem;
    for (int r = 0; r < R; r++) {
      float sum = 0;
      for (int c = 0; c < C; c++) {
        int i = r * C + c;
        float oh = c == I_[r] ? X_[i] : 0.f, dot = 0;
        sum += oh;
        for (int k = 0; k < K; k++) dot += A_[r * K + k] * B_[k * C + c];
        CHECK(((float *)out[0].mem)[i] == oh);
        CHECK(((float *)out[2].mem)[i] == (float)(int8_t)c + (float)r); /* r < 256: exact in bf16 */
        CHECK(((float *)out[3].mem)[i] == dot + (float)r);
        CHECK(((int32_t *)out[4].mem)[i] == c);
        CHECK(((float *)out[5].mem)[i] == 0.f * X_[i]);
      }
      CHECK(near_eq(((float *)out[1].mem)[r], sum, 1e-6));
    }
    for (int k = 0; k < 6; k++) free(out[k].mem);
    free(x.mem), free(ix.mem), free(a.mem), free(b.mem);
    tpuir_graph_free(g);
  }
  CHECK_OK(tpux_set_fusion(TPUX_FUSE_REDUCE, -1));
  CHECK_OK(tpux_set_fusion(TPUX_FUSE_EPILOGUE, -1));
}

/* A gather's indices are range-checked as soon as they exist: outputs of
 * the program before the gather itself are written directly (no output
 * copy), and a bad index still fails the run before any output is
 * written. */
TPU_TEST(exec_plan_index_check_early) {
  enum { R = 9, C = 50 };
  int64_t rc[2] = {R, C}, r1[2] = {R, 1};
  tpuir_graph *g = tpuir_graph_new();
  tpuir_val X = tpuir_param(g, TPU_F32, 2, rc), I = tpuir_param(g, TPU_I64, 2, r1);
  tpuir_val one = tpuir_broadcast_in_dim(g, tpuir_const_i(g, TPU_I64, 1), 2, r1, NULL);
  tpuir_val J = tpuir_binary(g, TPUIR_ADD, I, one);
  tpuir_val two = tpuir_broadcast_in_dim(g, tpuir_const_f(g, TPU_F32, 2), 2, rc, NULL);
  tpuir_val o[2];
  o[0] = tpuir_binary(g, TPUIR_MUL, X, two);
  o[1] = tpuir_gather(g, tpuir_unary(g, TPUIR_NEG, X), 1, J);
  CHECK_OK(tpuir_set_outputs(g, 2, o));
  tarr x = ta_new(TPU_F32, 2, rc), ix = ta_new(TPU_I64, 2, r1);
  tarr y = ta_new(TPU_F32, 2, rc), z = ta_new(TPU_F32, 2, r1);
  uint64_t seed = 3;
  ta_fill(&x.v, &seed, -1, 1);
  tpu_view in[2] = {x.v, ix.v}, ov[2] = {y.v, z.v};
  float *Y = y.mem, *Z = z.mem;
  const float *X_ = x.mem;
  int64_t *I_ = ix.mem;
  for (int bad = 1; bad >= 0; bad--) {
    for (int r = 0; r < R; r++) I_[r] = (r * 7) % C - 1 + (bad && r == R - 1) * C;
    for (int i = 0; i < R * C; i++) Y[i] = -7.f;
    tpux_profile_read(NULL, 0, 1);
    tpux_profile_enable(1);
    int rc_ = tpux_run(g, 2, in, 2, ov);
    tpux_profile_enable(0);
    if (bad) {
      CHECK(rc_ == TPU_E_INDEX);
      CHECK(strstr(tpu_last_error(), "out of bounds for dimension 1") != NULL);
      for (int i = 0; i < R * C; i++) CHECK(Y[i] == -7.f); /* untouched */
      continue;
    }
    CHECK_OK(rc_);
    tpux_profile_entry e[64];
    int n = tpux_profile_read(e, 64, 1), checks = 0, copies = 0;
    for (int k = 0; k < n && k < 64; k++) {
      checks += strncmp(e[k].label, "(index check) gather", 20) == 0;
      copies += strcmp(e[k].label, "(output copy) float32[9,50]") == 0; /* (a gather is never direct) */
    }
    CHECK(checks == 1 && copies == 0);
    for (int r = 0; r < R; r++) {
      CHECK(Z[r] == -X_[r * C + I_[r] + 1]);
      for (int c = 0; c < C; c++) CHECK(Y[r * C + c] == 2.f * X_[r * C + c]);
    }
  }
  free(x.mem), free(ix.mem), free(y.mem), free(z.mem);
  tpuir_graph_free(g);
}

/* Indices computed late in node order (a loss's labels after the
 * forward) are computed first, after the parameters, so their range check
 * comes before the outputs and these are written directly; parameters
 * created later (one read by the moved nodes) keep their numbers, and a
 * bad index still fails the run before any output is written. */
TPU_TEST(exec_plan_index_cone_first) {
  enum { R = 9, C = 50 };
  int64_t rc[2] = {R, C}, r1[2] = {R, 1};
  tpuir_graph *g = tpuir_graph_new();
  tpuir_val X = tpuir_param(g, TPU_F32, 2, rc);
  tpuir_val two = tpuir_broadcast_in_dim(g, tpuir_const_f(g, TPU_F32, 2), 2, rc, NULL);
  tpuir_val o[3];
  o[0] = tpuir_binary(g, TPUIR_MUL, X, two);
  tpuir_val W = tpuir_param(g, TPU_F32, 2, rc);
  o[1] = tpuir_binary(g, TPUIR_ADD, tpuir_unary(g, TPUIR_EXP, o[0]), W);
  tpuir_val I = tpuir_param(g, TPU_I64, 2, r1); /* read by the moved nodes */
  tpuir_val ign = tpuir_broadcast_in_dim(g, tpuir_const_i(g, TPU_I64, -100), 2, r1, NULL);
  tpuir_val zero = tpuir_broadcast_in_dim(g, tpuir_const_i(g, TPU_I64, 0), 2, r1, NULL);
  tpuir_val J = tpuir_select(g, tpuir_binary(g, TPUIR_EQ, I, ign), zero, I); /* ignore_index */
  o[2] = tpuir_gather(g, tpuir_unary(g, TPUIR_NEG, X), 1, J);
  CHECK_OK(tpuir_set_outputs(g, 3, o));
  tarr x = ta_new(TPU_F32, 2, rc), ix = ta_new(TPU_I64, 2, r1), w = ta_new(TPU_F32, 2, rc);
  tarr y = ta_new(TPU_F32, 2, rc), u = ta_new(TPU_F32, 2, rc), z = ta_new(TPU_F32, 2, r1);
  uint64_t seed = 4;
  ta_fill(&x.v, &seed, -1, 1);
  ta_fill(&w.v, &seed, -1, 1);
  tpu_view in[3] = {x.v, w.v, ix.v}, ov[3] = {y.v, u.v, z.v};
  float *Y = y.mem, *U = u.mem, *Z = z.mem;
  const float *X_ = x.mem, *W_ = w.mem;
  int64_t *I_ = ix.mem;
  for (int bad = 1; bad >= 0; bad--) {
    for (int r = 0; r < R; r++) I_[r] = r % 3 ? (r * 7) % C + (bad && r == R - 1) * C : -100;
    for (int i = 0; i < R * C; i++) Y[i] = U[i] = -7.f;
    tpux_profile_read(NULL, 0, 1);
    tpux_profile_enable(1);
    int rc_ = tpux_run(g, 3, in, 3, ov);
    tpux_profile_enable(0);
    if (bad) {
      CHECK(rc_ == TPU_E_INDEX);
      for (int i = 0; i < R * C; i++) CHECK(Y[i] == -7.f && U[i] == -7.f); /* untouched */
      continue;
    }
    CHECK_OK(rc_);
    tpux_profile_entry e[64];
    int n = tpux_profile_read(e, 64, 1), copies = 0;
    for (int k = 0; k < n && k < 64; k++)
      copies += strcmp(e[k].label, "(output copy) float32[9,50]") == 0;
    CHECK(copies == 0);
    for (int r = 0; r < R; r++) CHECK(Z[r] == -X_[r * C + (I_[r] == -100 ? 0 : I_[r])]);
    for (int i = 0; i < R * C; i++) {
      CHECK(Y[i] == 2.f * X_[i]);
      CHECK(near_eq(U[i], expf(2.f * X_[i]) + W_[i], 1e-5));
    }
  }
  free(x.mem), free(ix.mem), free(w.mem), free(y.mem), free(u.mem), free(z.mem);
  tpuir_graph_free(g);
}

/* A region output that later nodes read is written straight into its
 * destination and read there (no output copy), unless another output's
 * destination overlaps it: then the later reader still sees its value. */
TPU_TEST(exec_plan_region_output_read_later) {
  enum { R = 16, C = 40 };
  int64_t rc[2] = {R, C}, bd[1] = {0}, cdim[1] = {1};
  tpuir_graph *g = tpuir_graph_new();
  tpuir_val X = tpuir_param(g, TPU_F32, 2, rc);
  tpuir_val two = tpuir_broadcast_in_dim(g, tpuir_const_f(g, TPU_F32, 2), 2, rc, NULL);
  tpuir_val one = tpuir_broadcast_in_dim(g, tpuir_const_f(g, TPU_F32, 1), 2, rc, NULL);
  tpuir_val o[3];
  o[0] = tpuir_binary(g, TPUIR_MUL, X, two);
  tpuir_val s = tpuir_reduce(g, TPUIR_RED_SUM, o[0], 1, cdim); /* closes o[0]'s region */
  o[1] = tpuir_binary(g, TPUIR_ADD, X, one);
  o[2] = tpuir_binary(g, TPUIR_MUL, o[0], tpuir_broadcast_in_dim(g, s, 2, rc, bd));
  CHECK_OK(tpuir_set_outputs(g, 3, o));
  tarr x = ta_new(TPU_F32, 2, rc), y[3];
  uint64_t seed = 9;
  ta_fill(&x.v, &seed, -1, 1);
  for (int k = 0; k < 3; k++) y[k] = ta_new(TPU_F32, 2, rc);
  const float *X_ = x.mem;
  for (int shared = 0; shared < 2; shared++) {
    tpu_view ov[3] = {y[0].v, shared ? y[0].v : y[1].v, y[2].v};
    tpux_profile_read(NULL, 0, 1);
    tpux_profile_enable(1);
    CHECK_OK(tpux_run(g, 1, &x.v, 3, ov));
    tpux_profile_enable(0);
    if (!shared) CHECK(profile_steps("(output copy)") == 0);
    for (int r = 0; r < R; r++) {
      float sum = 0;
      for (int c = 0; c < C; c++) sum += 2.f * X_[r * C + c];
      for (int c = 0; c < C; c++) {
        int i = r * C + c;
        CHECK(near_eq(((float *)y[2].mem)[i], 2.f * X_[i] * sum, 1e-5));
        if (!shared) CHECK(((float *)y[0].mem)[i] == 2.f * X_[i] && ((float *)y[1].mem)[i] == X_[i] + 1.f);
      }
    }
  }
  for (int k = 0; k < 3; k++) free(y[k].mem);
  free(x.mem);
  tpuir_graph_free(g);
}

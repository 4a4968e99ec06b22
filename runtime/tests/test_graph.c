/* test_graph.c - the eager-mode recorder (tpu_graph.h): Fused Eager data
 * edges, views of pending outputs, dead outputs never written, deferred
 * frees, the compilation cache, disk serialization. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "graph/internal.h"
#include "tpu_exec.h"
#include "tpu_graph.h"
#include "tpu_rt.h"
#include "tpu_test.h"

typedef struct tg_op {
  tpuir_graph *g;
  tpu_view in, out;
} tg_op;

static void tg_release(void *ctx) {
  tg_op *o = ctx;
  tpuir_graph_free(o->g);
  free(o);
}

/* out = in * a + b (f32, same shape as out; in may be any view); sync: as
 * an op that must run now (tpug_submit) */
static int tg_affine_op(tpurt_stream *s, const tpu_view *in, const tpu_view *out,
                        double a, double b, int sync) {
  tg_op *o = calloc(1, sizeof *o);
  o->g = tpuir_graph_new();
  o->in = *in;
  o->out = *out;
  tpuir_graph *g = o->g;
  tpuir_val p = tpuir_param(g, TPU_F32, in->ndim, in->sizes);
  tpuir_val ca = tpuir_broadcast_in_dim(g, tpuir_const_f(g, TPU_F32, a),
                                        in->ndim, in->sizes, NULL);
  tpuir_val cb = tpuir_broadcast_in_dim(g, tpuir_const_f(g, TPU_F32, b),
                                        in->ndim, in->sizes, NULL);
  tpuir_val v = tpuir_binary(g, TPUIR_ADD, tpuir_binary(g, TPUIR_MUL, p, ca), cb);
  tpuir_set_outputs(g, 1, &v);
  return tpug_submit(s, g, 1, &o->in, 1, &o->out, sync, tg_release, o);
}

static int tg_affine(tpurt_stream *s, const tpu_view *in, const tpu_view *out,
                     double a, double b) {
  return tg_affine_op(s, in, out, a, b, 0);
}

static float *tg_buf(int64_t n, tpu_view *v) {
  void *p = NULL;
  if (tpurt_malloc(0, (size_t)n * 4, &p) != TPU_OK) return NULL;
  tpu_view_init_contiguous(v, p, TPU_F32, 1, &n);
  return p;
}

TPU_TEST(graph_fused_edges_dead_outputs_and_cache) {
  tpurt_stream *s = tpurt_default_stream(0);
  CHECK(s != NULL);
  const int64_t n = 1000;
  tpu_view vx, vy, vz;
  float *x = tg_buf(n, &vx), *y = tg_buf(n, &vy), *z = tg_buf(n, &vz);
  CHECK(x && y && z);
  for (int64_t i = 0; i < n; i++) {
    x[i] = (float)i;
    y[i] = -7.0f;
  }
  CHECK_OK(tpug_set_mode(TPUG_FUSE));
  tpug_reset_stats();
  tpug_cache_clear();
  for (int step = 0; step < 3; step++) {
    CHECK_OK(tg_affine(s, &vx, &vy, 2.0, 1.0 + step)); /* y = 2x + 1 + step */
    CHECK_OK(tg_affine(s, &vy, &vz, 3.0, 0.0));        /* z = 3y (edge) */
    CHECK(tpug_pending_ops(0) == 2);
    CHECK(tpug_is_pending(z) == 1);
    CHECK_OK(tpug_free(y)); /* y dies before the flush: never written */
    CHECK(tpug_is_pending(y) == 0);
    CHECK_OK(tpug_flush(0, TPUG_R_SYNC));
    CHECK_OK(tpurt_stream_synchronize(s));
    for (int64_t i = 0; i < n; i++)
      CHECK(z[i] == 3.0f * (2.0f * (float)i + 1.0f + (float)step));
    y = tg_buf(n, &vy); /* a fresh y for the next step */
    CHECK(y != NULL);
    for (int64_t i = 0; i < n; i++) y[i] = -7.0f;
  }
  tpug_stats st;
  tpug_get_stats(&st);
  CHECK(st.outputs_elided == 3 && st.outputs_written == 3);
  CHECK(st.misses == 1 && st.hits == 2); /* scalars do not change the key */
  CHECK_OK(tpug_set_mode(TPUG_STRICT));
  tpurt_free(x);
  tpurt_free(y);
  tpurt_free(z);
}

/* out = uniform(seed, offset) * 2 (one rng op) */
static int tg_rng(tpurt_stream *s, const tpu_view *out, uint64_t seed, uint64_t offset) {
  tg_op *o = calloc(1, sizeof *o);
  o->g = tpuir_graph_new();
  o->out = *out;
  tpuir_graph *g = o->g;
  tpuir_val r = tpuir_rng(g, TPUIR_RNG_UNIFORM, TPU_F32, out->ndim, out->sizes, seed, offset);
  tpuir_val two = tpuir_broadcast_in_dim(g, tpuir_const_f(g, TPU_F32, 2.0), out->ndim,
                                         out->sizes, NULL);
  tpuir_val v = tpuir_binary(g, TPUIR_MUL, r, two);
  tpuir_set_outputs(g, 1, &v);
  return tpug_submit(s, g, 0, NULL, 1, &o->out, 0, tg_release, o);
}

/* Rng seeds/offsets are run-time parameters of a compiled program: steps
 * that only differ in them (dropout) hit the cache, and each step still
 * sees its own random numbers, equal to a direct run with that key. */
TPU_TEST(graph_rng_key_lifted_out_of_cache_key) {
  tpurt_stream *s = tpurt_default_stream(0);
  const int64_t n = 5000;
  tpu_view vy, vr;
  float *y = tg_buf(n, &vy), *r = tg_buf(n, &vr);
  CHECK(y && r);
  for (int mode = TPUG_STRICT; mode <= TPUG_FUSE; mode++) {
    CHECK_OK(tpug_set_mode(mode));
    tpug_cache_clear();
    tpug_reset_stats();
    for (int step = 0; step < 3; step++) {
      uint64_t seed = 1234 + (uint64_t)step * 77, off = (uint64_t)step * 4 * (uint64_t)n;
      CHECK_OK(tg_rng(s, &vy, seed, off));
      CHECK_OK(tpug_flush(0, TPUG_R_SYNC));
      CHECK_OK(tpurt_stream_synchronize(s));
      /* reference: the static-key rng node run directly */
      tpuir_graph *g = tpuir_graph_new();
      tpuir_val v = tpuir_rng(g, TPUIR_RNG_UNIFORM, TPU_F32, 1, &n, seed, off);
      CHECK_OK(tpuir_set_outputs(g, 1, &v));
      CHECK_OK(tpux_run(g, 0, NULL, 1, &vr));
      tpuir_graph_free(g);
      int same = 1;
      for (int64_t i = 0; i < n; i++) same &= y[i] == 2.0f * r[i];
      CHECK(same);
      CHECK(step == 0 || y[0] != y[1] || y[2] != y[3]);
    }
    tpug_stats st;
    tpug_get_stats(&st);
    CHECK(st.misses == 1 && st.hits == 2);
  }
  CHECK_OK(tpug_set_mode(TPUG_STRICT));
  /* the key must be int64[2] */
  tpuir_graph *g = tpuir_graph_new();
  int64_t three = 3;
  tpuir_val k = tpuir_param(g, TPU_I64, 1, &three);
  CHECK(tpuir_rng_dyn(g, TPUIR_RNG_UNIFORM, TPU_F32, 1, &n, k) == TPU_E_TYPE);
  tpuir_graph_free(g);
  tpurt_free(y);
  tpurt_free(r);
}

TPU_TEST(graph_fused_view_of_pending_output) {
  tpurt_stream *s = tpurt_default_stream(0);
  const int64_t n = 24;
  tpu_view vx, vy, vz;
  float *x = tg_buf(n, &vx), *y = tg_buf(n, &vy), *z = tg_buf(n, &vz);
  CHECK(x && y && z);
  for (int64_t i = 0; i < n; i++) x[i] = (float)i;
  CHECK_OK(tpug_set_mode(TPUG_FUSE));
  tpug_reset_stats();
  CHECK_OK(tg_affine(s, &vx, &vy, 1.0, 100.0)); /* y = x + 100 */
  /* read y as a transposed [6,4] view of its [4,6] layout, offset 0 */
  tpu_view t = vy;
  t.ndim = 2;
  t.sizes[0] = 6; t.sizes[1] = 4;
  t.strides[0] = 1; t.strides[1] = 6;
  tpu_view zt = vz;
  zt.ndim = 2;
  zt.sizes[0] = 6; zt.sizes[1] = 4;
  zt.strides[0] = 4; zt.strides[1] = 1;
  CHECK_OK(tg_affine(s, &t, &zt, 2.0, 0.0));
  CHECK(tpug_pending_ops(0) == 2); /* no alias flush */
  char buf[4096];
  CHECK(tpug_dump(0, 0, buf, sizeof buf) > 0 && strstr(buf, "transpose"));
  CHECK(tpug_dump(0, 1, buf, sizeof buf) > 0 && strstr(buf, "digraph"));
  CHECK_OK(tpug_flush(0, TPUG_R_SYNC));
  CHECK_OK(tpurt_stream_synchronize(s));
  for (int i = 0; i < 6; i++)
    for (int j = 0; j < 4; j++)
      CHECK(z[i * 4 + j] == 2.0f * ((float)(j * 6 + i) + 100.0f));
  for (int64_t i = 0; i < n; i++) CHECK(y[i] == (float)i + 100.0f);
  /* a partial write into a pending output flushes first */
  CHECK_OK(tg_affine(s, &vx, &vy, 1.0, 0.0));
  tpu_view half = vy;
  half.sizes[0] = 12;
  CHECK_OK(tg_affine(s, &half, &half, 1.0, 1.0));
  tpug_stats st;
  tpug_get_stats(&st);
  CHECK(st.flushes[TPUG_R_ALIAS] == 1);
  CHECK_OK(tpug_set_mode(TPUG_STRICT));
  CHECK_OK(tpurt_stream_synchronize(s));
  for (int64_t i = 0; i < n; i++) CHECK(y[i] == (float)i + (i < 12 ? 1.0f : 0.0f));
  /* a write covering every element of a pending output, through another
   * shape of the same memory (an in-place op on a reshaped view of a whole
   * result) or over a pending part of it, supersedes it: no flush */
  CHECK_OK(tpug_set_mode(TPUG_FUSE));
  tpug_reset_stats();
  CHECK_OK(tg_affine(s, &vx, &vy, 1.0, 100.0)); /* y = x + 100 */
  tpu_view y2 = vy;                             /* y as [4,6] */
  y2.ndim = 2;
  y2.sizes[0] = 4; y2.sizes[1] = 6;
  y2.strides[0] = 6; y2.strides[1] = 1;
  CHECK_OK(tg_affine(s, &y2, &y2, 2.0, 0.0));   /* y *= 2 */
  tpu_view zhalf = vz;                          /* z[:12] */
  zhalf.sizes[0] = 12;
  CHECK_OK(tg_affine(s, &vx, &zhalf, 1.0, 7.0)); /* z[:12] = x + 7 */
  CHECK_OK(tg_affine(s, &vy, &vz, 1.0, 1.0));    /* z = y + 1: covers z[:12] */
  CHECK(tpug_pending_ops(0) == 4);
  tpug_get_stats(&st);
  CHECK(st.flushes[TPUG_R_ALIAS] == 0);
  CHECK_OK(tpug_flush(0, TPUG_R_SYNC));
  CHECK_OK(tpurt_stream_synchronize(s));
  for (int64_t i = 0; i < n; i++) {
    CHECK(y[i] == 2.0f * ((float)i + 100.0f));
    CHECK(z[i] == y[i] + 1.0f);
  }
  CHECK_OK(tpug_set_mode(TPUG_STRICT));
  tpurt_free(x);
  tpurt_free(y);
  tpurt_free(z);
}

TPU_TEST(graph_disk_roundtrip) {
  tpuir_graph *g = tpuir_graph_new();
  int64_t sz[2] = {3, 4};
  tpuir_val a = tpuir_param(g, TPU_F32, 2, sz), b = tpuir_param(g, TPU_F32, 2, sz);
  tpuir_val xs[2] = {tpuir_unary(g, TPUIR_EXP, a), b};
  tpuir_val c = tpuir_concat(g, 2, xs, 0);
  tpuir_set_outputs(g, 1, &c);
  char path[256];
  snprintf(path, sizeof path, "/tmp/tpug_test_%d.tpug", (int)getpid());
  CHECK_OK(tpug__graph_write(g, path));
  tpuir_graph *h = tpug__graph_read(path);
  unlink(path);
  CHECK(h != NULL);
  CHECK(TEST_IR_HASH(h) == TEST_IR_HASH(g));
  CHECK(tpuir_num_params(h) == 2 && tpuir_num_outputs(h) == 1);
  tpuir_graph_free(g);
  tpuir_graph_free(h);
}

/* Capture (torch.compile): ops recorded between begin and end become one
 * program, in Strict mode too; replaying it on relocated memory computes
 * the same function of the new inputs without recording anything; a base
 * missing from the relocation table is refused; rng keys can be replaced. */
TPU_TEST(graph_capture_replay_relocates_memory) {
  tpurt_stream *s = tpurt_default_stream(0);
  const int64_t n = 777;
  tpu_view vx, vy, vz, vx2, vz2, vr;
  float *x = tg_buf(n, &vx), *y = tg_buf(n, &vy), *z = tg_buf(n, &vz);
  float *x2 = tg_buf(n, &vx2), *z2 = tg_buf(n, &vz2), *r = tg_buf(n, &vr);
  CHECK(x && y && z && x2 && z2 && r);
  for (int64_t i = 0; i < n; i++) {
    x[i] = (float)i;
    x2[i] = (float)(2 * i + 5);
  }
  CHECK_OK(tpug_set_mode(TPUG_STRICT));
  tpug_reset_stats();
  CHECK(tpug_capturing(0) == 0);
  CHECK_OK(tpug_capture_begin(0));
  CHECK(tpug_capturing(0) == 1);
  CHECK(tpug_capture_begin(0) < 0); /* no nesting */
  CHECK_OK(tg_affine(s, &vx, &vy, 2.0, 1.0)); /* y = 2x + 1 */
  CHECK_OK(tg_affine(s, &vy, &vz, 3.0, 0.0)); /* z = 3y */
  CHECK(tpug_pending_ops(0) == 2);            /* deferred although Strict */
  CHECK_OK(tg_rng(s, &vr, 99, 0));            /* r = 2 * uniform(99, 0) */
  CHECK_OK(tpug_free(y));                     /* an intermediate dies */
  tpug_capture *c = NULL;
  int cut = 7;
  CHECK_OK(tpug_capture_end(0, &c, &cut));
  CHECK(c != NULL && cut == -1 && tpug_capturing(0) == 0);
  CHECK_OK(tpurt_stream_synchronize(s));
  for (int64_t i = 0; i < n; i++) CHECK(z[i] == 3.0f * (2.0f * (float)i + 1.0f));
  /* the blocks it touches: x, z, r (y was elided) */
  const void *bases[8];
  CHECK(tpug_capture_bases(c, bases, 8) == 3);
  int64_t keys[2];
  CHECK(tpug_capture_rng(c, keys, 1) == 1 && keys[0] == 99 && keys[1] == 0);
  float r0 = r[0];
  /* replay on x2 -> z2, r with a new key */
  const void *from[3] = {x, z, r};
  void *to[3] = {x2, z2, r};
  int64_t nk[2] = {99, 1000};
  tpug_stats st0;
  tpug_get_stats(&st0);
  CHECK_OK(tpug_capture_run(c, s, 3, from, to, nk));
  CHECK_OK(tpurt_stream_synchronize(s));
  tpug_stats st1;
  tpug_get_stats(&st1);
  CHECK(st1.ops_recorded == st0.ops_recorded && st1.replays == st0.replays + 1);
  for (int64_t i = 0; i < n; i++) CHECK(z2[i] == 3.0f * (2.0f * (float)x2[i] + 1.0f));
  for (int64_t i = 0; i < n; i++) CHECK(z[i] == 3.0f * (2.0f * (float)i + 1.0f)); /* untouched */
  CHECK(r[0] != r0);
  /* a block the table does not cover: refused, nothing runs */
  CHECK(tpug_capture_run(c, s, 2, from, to, NULL) == TPU_E_INVALID);
  tpug_capture_free(c);

  /* a forced flush (here: an explicit one) cuts the capture: no program,
   * the ops still ran */
  CHECK_OK(tpug_capture_begin(0));
  CHECK_OK(tg_affine(s, &vx, &vz, 1.0, 1.0));
  CHECK_OK(tpug_flush(0, TPUG_R_D2H));
  CHECK(tpug_capturing(0) == 2);
  CHECK_OK(tg_affine(s, &vz, &vz2, 1.0, 1.0));
  CHECK_OK(tpug_capture_end(0, &c, &cut));
  CHECK(c == NULL && cut == TPUG_R_D2H);
  CHECK_OK(tpurt_stream_synchronize(s));
  for (int64_t i = 0; i < n; i++) CHECK(z2[i] == (float)i + 2.0f);
  tpug_get_stats(&st1);
  CHECK(st1.captures == 1 && st1.broken_captures == 1);
  CHECK(tpug_capture_end(0, &c, NULL) < 0); /* not capturing */
  tpurt_free(x);
  tpurt_free(z);
  tpurt_free(x2);
  tpurt_free(z2);
  tpurt_free(r);
}

/* The program trace: one event per program run (fused graphs and strict
 * ops), named by its IR ops, with dot FLOPs, bytes and worker timestamps. */
TPU_TEST(graph_trace_events) {
  tpurt_stream *s = tpurt_default_stream(0);
  const int64_t n = 64;
  tpu_view vx, vy, vz;
  float *x = tg_buf(n, &vx), *y = tg_buf(n, &vy), *z = tg_buf(n, &vz);
  CHECK(x && y && z);
  tpug_trace_event ev[8];
  tpug_trace_enable(0);
  CHECK(tpug_trace_enabled() == 0);
  CHECK_OK(tg_affine(s, &vx, &vy, 2.0, 1.0)); /* tracing off: no event */
  CHECK_OK(tpurt_stream_synchronize(s));
  tpug_trace_enable(1);
  CHECK(tpug_trace_drain(ev, 8, NULL) == 0);
  CHECK_OK(tpug_set_mode(TPUG_FUSE));
  CHECK_OK(tg_affine(s, &vx, &vy, 2.0, 1.0));
  CHECK_OK(tg_affine(s, &vy, &vz, 3.0, 0.0));
  CHECK_OK(tpug_flush(0, TPUG_R_SYNC));
  CHECK_OK(tpurt_stream_synchronize(s));
  CHECK_OK(tpug_set_mode(TPUG_STRICT));
  /* a strict dot: [2,3] x [3,4] */
  tpu_view va, vb, vc;
  int64_t sa[2] = {2, 3}, sb[2] = {3, 4}, sc[2] = {2, 4};
  void *a = NULL, *b = NULL, *c = NULL;
  CHECK_OK(tpurt_malloc(0, 6 * 4, &a));
  CHECK_OK(tpurt_malloc(0, 12 * 4, &b));
  CHECK_OK(tpurt_malloc(0, 8 * 4, &c));
  tpu_view_init_contiguous(&va, a, TPU_F32, 2, sa);
  tpu_view_init_contiguous(&vb, b, TPU_F32, 2, sb);
  tpu_view_init_contiguous(&vc, c, TPU_F32, 2, sc);
  tpuir_graph *g = tpuir_graph_new();
  tpuir_val pa = tpuir_param(g, TPU_F32, 2, sa), pb = tpuir_param(g, TPU_F32, 2, sb);
  int64_t lc = 1, rc = 0;
  tpuir_val d = tpuir_dot_general(g, pa, pb, 0, NULL, NULL, 1, &lc, &rc, TPU_PREC_HIGHEST, TPU_F32);
  CHECK_OK(tpuir_set_outputs(g, 1, &d));
  tpu_view ins[2] = {va, vb};
  CHECK_OK(tpug_submit(s, g, 2, ins, 1, &vc, 0, NULL, NULL));
  CHECK_OK(tpurt_stream_synchronize(s));
  uint64_t dropped = 1;
  int ne = tpug_trace_drain(ev, 8, &dropped);
  CHECK(ne == 2 && dropped == 0);
  CHECK(ev[0].nops == 2 && ev[0].reason == TPUG_R_SYNC && ev[0].flops == 0);
  CHECK(strstr(ev[0].name, "mul") != NULL && ev[0].device == 0 && ev[0].stream == 0);
  CHECK(ev[0].bytes >= 2 * 64 * sizeof(float)); /* x read, z written */
  CHECK(ev[0].start_ns > 0 && ev[0].end_ns >= ev[0].start_ns);
  CHECK(ev[1].nops == 1 && ev[1].reason == TPUG_R_STRICT);
  CHECK(strstr(ev[1].name, "dot_general") != NULL);
  CHECK(ev[1].flops == 2 * 2 * 4 * 3);
  CHECK(ev[1].bytes == (6 + 12 + 8) * sizeof(float));
  CHECK(ev[1].start_ns >= ev[0].end_ns);
  CHECK(ev[1].program != ev[0].program);
  CHECK(tpug_trace_drain(ev, 8, NULL) == 0); /* drained */
  tpug_trace_enable(0);
  tpuir_graph_free(g);
  tpurt_free(a);
  tpurt_free(b);
  tpurt_free(c);
  tpurt_free(x);
  tpurt_free(y);
  tpurt_free(z);
}

/* A pending output written in a permuted dense layout (an elementwise
 * result that kept its input's layout) can be read through another view of
 * its memory without a flush: the recorder transposes to memory order. */
TPU_TEST(graph_fused_view_of_permuted_output) {
  tpurt_stream *s = tpurt_default_stream(0);
  const int64_t R = 6, C = 10, n = R * C;
  tpu_view vx, vy, vz;
  float *x = tg_buf(n, &vx), *y = tg_buf(n, &vy), *z = tg_buf(n, &vz);
  CHECK(x && y && z);
  for (int64_t i = 0; i < n; i++) x[i] = (float)i;
  /* x as [R, C] transposed: logical [C, R], strides (1, C) */
  tpu_view xt = vx, yt = vy, yrows = vy, zrows = vz;
  xt.ndim = yt.ndim = 2;
  xt.sizes[0] = yt.sizes[0] = C;
  xt.sizes[1] = yt.sizes[1] = R;
  xt.strides[0] = yt.strides[0] = 1;
  xt.strides[1] = yt.strides[1] = C;
  yrows.ndim = zrows.ndim = 2; /* y's memory read row-major as [R, C] */
  yrows.sizes[0] = zrows.sizes[0] = R;
  yrows.sizes[1] = zrows.sizes[1] = C;
  yrows.strides[0] = zrows.strides[0] = C;
  yrows.strides[1] = zrows.strides[1] = 1;
  CHECK_OK(tpug_set_mode(TPUG_FUSE));
  tpug_reset_stats();
  CHECK_OK(tg_affine(s, &xt, &yt, 2.0, 0.0));       /* y = 2x, written permuted */
  CHECK_OK(tg_affine(s, &yrows, &zrows, 1.0, 1.0)); /* z = y + 1 through rows */
  CHECK(tpug_pending_ops(0) == 2);                  /* no alias flush */
  CHECK_OK(tpug_flush(0, TPUG_R_SYNC));
  CHECK_OK(tpurt_stream_synchronize(s));
  for (int64_t i = 0; i < n; i++) CHECK(z[i] == 2.0f * (float)i + 1.0f);
  tpug_stats st;
  tpug_get_stats(&st);
  CHECK(st.flushes[TPUG_R_ALIAS] == 0);
  CHECK_OK(tpug_set_mode(TPUG_STRICT));
  tpurt_free(x);
  tpurt_free(y);
  tpurt_free(z);
}

TPU_TEST(graph_fresh_blocks_and_defer_all) {
  tpurt_stream *s = tpurt_default_stream(0);
  const int64_t n = 16;
  tpu_view vx, vy;
  float *x = tg_buf(n, &vx), *y = tg_buf(n, &vy);
  CHECK(x && y);
  for (int64_t i = 0; i < n; i++) x[i] = (float)i;
  CHECK_OK(tpug_note_alloc(y)); /* Strict: nothing is a promise */
  CHECK(tpug_is_pending(y) == 0);
  CHECK_OK(tpug_set_mode(TPUG_FUSE));
  tpug_reset_stats();
  CHECK_OK(tpug_note_alloc(y));
  CHECK(tpug_is_pending(y) == 1 && tpug_is_pending(x) == 0);
  CHECK_OK(tpug_flush_if_uses(0, y, TPUG_R_COPY)); /* a host copy: materialized */
  CHECK(tpug_is_pending(y) == 0);
  CHECK_OK(tpug_note_alloc(y));
  CHECK_OK(tpug_flush(0, TPUG_R_SYNC)); /* any flush materializes it */
  CHECK(tpug_is_pending(y) == 0);
  tpug_stats st;
  tpug_get_stats(&st);
  CHECK(st.flushes[TPUG_R_COPY] == 0 && st.flushes[TPUG_R_SYNC] == 0);
  /* Fuse: an op that must run now flushes; DEFER_ALL: it is deferred */
  CHECK(tg_affine_op(s, &vx, &vy, 2.0, 0.0, 1) == TPU_OK);
  CHECK(tpug_pending_ops(0) == 0);
  CHECK_OK(tpug_set_mode(TPUG_DEFER_ALL));
  CHECK(tpug_get_mode() == TPUG_DEFER_ALL);
  CHECK(tg_affine_op(s, &vx, &vy, 3.0, 0.0, 1) == TPUG_DEFERRED);
  CHECK(tpug_pending_ops(0) == 1 && tpug_is_pending(y) == 1);
  CHECK_OK(tpug_flush(0, TPUG_R_SYNC));
  CHECK_OK(tpurt_stream_synchronize(s));
  for (int64_t i = 0; i < n; i++) CHECK(y[i] == 3.0f * (float)i);
  CHECK(tpug_set_mode(7) < 0);
  CHECK_OK(tpug_set_mode(TPUG_STRICT));
  tpurt_free(x);
  tpurt_free(y);
}

/* The waits of tpu_graph.h flush pending Fused Eager ops themselves, each
 * counted under its reason; a sync submit waits for its op; memory pressure
 * in tpug_malloc flushes, waits and retries. */
TPU_TEST(graph_sync_api_flushes_with_reasons) {
  tpurt_stream *s = tpurt_default_stream(0);
  const int64_t n = 256;
  tpu_view vx, vy;
  float *x = tg_buf(n, &vx), *y = tg_buf(n, &vy);
  CHECK(x && y);
  for (int64_t i = 0; i < n; i++) x[i] = (float)i;
  CHECK_OK(tpug_set_mode(TPUG_FUSE));
  tpug_reset_stats();
  tpug_stats st;
  CHECK_OK(tg_affine(s, &vx, &vy, 2.0, 0.0));
  CHECK(tpug_stream_query(s) == 0); /* pending counts as not done */
  CHECK_OK(tpug_synchronize_stream(s));
  CHECK(tpug_stream_query(s) == 1 && tpug_pending_ops(0) == 0 && y[5] == 10.0f);
  CHECK_OK(tg_affine(s, &vx, &vy, 3.0, 0.0));
  CHECK_OK(tpug_synchronize_device(0));
  CHECK(y[5] == 15.0f);
  CHECK_OK(tg_affine(s, &vx, &vy, 4.0, 0.0));
  CHECK_OK(tpug_synchronize_for_host(0));
  CHECK(y[5] == 20.0f);
  tpurt_event *e = tpurt_event_create();
  CHECK(e != NULL);
  CHECK_OK(tg_affine(s, &vx, &vy, 5.0, 0.0));
  CHECK_OK(tpug_event_record(e, s));
  CHECK(tpug_pending_ops(0) == 0);
  CHECK_OK(tpurt_event_synchronize(e));
  CHECK(y[5] == 25.0f);
  CHECK_OK(tg_affine(s, &vx, &vy, 6.0, 0.0));
  CHECK_OK(tpug_stream_wait_event(s, e));
  CHECK(tpug_pending_ops(0) == 0);
  CHECK_OK(tpug_synchronize_stream(s));
  CHECK(y[5] == 30.0f);
  tpurt_event_destroy(e);
  tpug_get_stats(&st);
  CHECK(st.flushes[TPUG_R_SYNC] == 4 && st.flushes[TPUG_R_D2H] == 1);
  CHECK(st.flushes[TPUG_R_OOM] == 0);
  CHECK(tpug_synchronize_device(-1) == TPU_E_INVALID);
  CHECK(tpug_synchronize_stream(NULL) == TPU_E_INVALID);

  /* memory pressure: a big block freed while a pending op writes it is
   * returned only after the flush; tpug_malloc flushes (OOM) and retries */
  tpurt_mem_stats ms;
  CHECK_OK(tpurt_mem_get_stats(0, &ms));
  size_t big = (size_t)((ms.capacity - ms.allocated) * 6 / 10);
  void *b1 = NULL, *b2 = NULL;
  CHECK_OK(tpurt_malloc(0, big, &b1));
  tpu_view vb;
  tpu_view_init_contiguous(&vb, b1, TPU_F32, 1, &n);
  CHECK_OK(tg_affine(s, &vx, &vb, 1.0, 1.0));
  CHECK_OK(tpug_free(b1)); /* deferred: the pending op writes it */
  CHECK(tpug_pending_ops(0) == 1);
  CHECK_OK(tpug_malloc(0, 0, big, &b2));
  CHECK(b2 != NULL && tpug_pending_ops(0) == 0);
  tpug_get_stats(&st);
  CHECK(st.flushes[TPUG_R_OOM] == 1);
  CHECK_OK(tpug_free(b2));

  /* Strict: a sync submit returns after its op ran */
  CHECK_OK(tpug_set_mode(TPUG_STRICT));
  tg_op *o = calloc(1, sizeof *o);
  o->g = tpuir_graph_new();
  o->in = vx;
  o->out = vy;
  tpuir_val p = tpuir_param(o->g, TPU_F32, 1, &n);
  tpuir_val v = tpuir_binary(o->g, TPUIR_ADD, p, p);
  CHECK_OK(tpuir_set_outputs(o->g, 1, &v));
  CHECK_OK(tpug_submit(s, o->g, 1, &o->in, 1, &o->out, 1, tg_release, o));
  CHECK(y[7] == 14.0f);
  tpurt_free(x);
  tpurt_free(y);
}

/* The copy engine (graph/copy.c): staged h2d, d2h, d2d with conversion. */
TPU_TEST(graph_copies) {
  tpurt_stream *s = tpurt_default_stream(0);
  CHECK(s != NULL);
  float host[6] = {1, 2, 3, 4, 5, 6};
  tpu_view hv, dv, back;
  /* host source: transposed 3x2 view of a 2x3 buffer */
  tpu_view_init_contiguous(&hv, host, TPU_F32, 2, (int64_t[]){2, 3});
  tpu_view ht = hv;
  ht.sizes[0] = 3; ht.sizes[1] = 2; ht.strides[0] = 1; ht.strides[1] = 3;
  void *dev = NULL;
  CHECK_OK(tpurt_malloc(0, 6 * sizeof(double), &dev));
  tpu_view_init_contiguous(&dv, dev, TPU_F64, 2, (int64_t[]){3, 2});
  CHECK_OK(tpug_copy_h2d(s, &dv, &ht));
  for (int i = 0; i < 6; i++) host[i] = -1; /* the copy was staged */
  double out[6];
  tpu_view_init_contiguous(&back, out, TPU_F64, 2, (int64_t[]){3, 2});
  CHECK_OK(tpug_copy_d2h(s, &back, &dv));
  const double want[6] = {1, 4, 2, 5, 3, 6};
  for (int i = 0; i < 6; i++) CHECK(out[i] == want[i]);
  /* d2d with conversion */
  void *dev2 = NULL;
  CHECK_OK(tpurt_malloc(0, 6 * sizeof(int32_t), &dev2));
  tpu_view d2;
  tpu_view_init_contiguous(&d2, dev2, TPU_I32, 2, (int64_t[]){3, 2});
  CHECK_OK(tpug_copy_d2d(s, &d2, &dv));
  int32_t oi[6];
  tpu_view_init_contiguous(&back, oi, TPU_I32, 2, (int64_t[]){3, 2});
  CHECK_OK(tpug_copy_d2h(s, &back, &d2));
  for (int i = 0; i < 6; i++) CHECK(oi[i] == (int)want[i]);
  /* async d2h: enqueued, the result is there after a stream sync */
  int32_t oa[6] = {0};
  tpu_view_init_contiguous(&back, oa, TPU_I32, 2, (int64_t[]){3, 2});
  CHECK_OK(tpug_copy_d2h_async(s, &back, &d2));
  CHECK_OK(tpurt_stream_synchronize(s));
  for (int i = 0; i < 6; i++) CHECK(oa[i] == (int)want[i]);
  /* size mismatch */
  tpu_view_init_contiguous(&back, oi, TPU_I32, 1, (int64_t[]){6});
  CHECK(tpug_copy_d2h(s, &back, &d2) == TPU_E_INVALID);
  CHECK(tpug_copy_d2h_async(s, &back, &d2) == TPU_E_INVALID);
  tpurt_free(dev);
  tpurt_free(dev2);
}

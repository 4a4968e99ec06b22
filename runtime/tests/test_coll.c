/* test_coll.c - collectives (tpu_coll.h): ranks are fork()ed processes
 * sharing one segment; every result is checked against a reference
 * computed in the test. Small slots force many chunks. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tpu_coll.h"
#include "tpu_test.h"

#define SLOT 8192 /* bytes: 2048 floats per chunk */

typedef int (*rank_fn)(tpucoll_comm *c, int rank, int size, void *arg);

static void seg_name(char *buf, size_t n, const char *tag) {
  static int counter;
  snprintf(buf, n, "/tpucoll_t_%d_%s_%d", (int)getpid(), tag, counter++);
}

static int seg_exists(const char *name) {
  char path[256];
  snprintf(path, sizeof path, "/dev/shm%s", name);
  struct stat st;
  return stat(path, &st) == 0;
}

/* Fork `size` ranks running fn; returns the number of ranks that failed
 * (exit code != 0). Exit codes land in codes[] if given. */
static int run_ranks(int size, rank_fn fn, void *arg, const char *name, int64_t timeout_ms,
                     int *codes) {
  pid_t pids[16];
  for (int r = 0; r < size; r++) {
    pids[r] = fork();
    if (pids[r] == 0) {
      tpucoll_comm *c = NULL;
      if (tpucoll_comm_init(name, r, size, SLOT, timeout_ms, &c) != TPU_OK) {
        fprintf(stderr, "  rank %d init: %s\n", r, tpu_last_error());
        _exit(90);
      }
      int rc = fn(c, r, size, arg);
      tpucoll_comm_destroy(c);
      _exit(rc);
    }
  }
  int bad = 0;
  for (int r = 0; r < size; r++) {
    int st = 0;
    waitpid(pids[r], &st, 0);
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (codes) codes[r] = code;
    if (code) bad++;
  }
  return bad;
}

static float val(int rank, size_t i) { return (float)((rank + 1) * 0.5 + (double)(i % 97) * 0.25); }

#define RCHECK(cond)                                                             \
  do {                                                                           \
    if (!(cond)) {                                                               \
      fprintf(stderr, "  rank %d: %s:%d: CHECK(%s) failed (%s)\n", rank, __FILE__, \
              __LINE__, #cond, tpu_last_error());                               \
      return 1;                                                                  \
    }                                                                            \
  } while (0)

/* every collective once, with counts that do not divide the chunk size */
static int all_kinds(tpucoll_comm *c, int rank, int size, void *arg) {
  size_t n = *(size_t *)arg;
  float *in = calloc(n * size, sizeof(float)), *out = calloc(n * size, sizeof(float));
  for (size_t i = 0; i < n; i++) in[i] = val(rank, i);
  /* all_reduce sum / max / avg (in place) */
  RCHECK(tpucoll_all_reduce(c, in, out, n, TPU_F32, TPUCOLL_SUM) == TPU_OK);
  for (size_t i = 0; i < n; i++) {
    float ref = 0;
    for (int k = 0; k < size; k++) ref += val(k, i);
    RCHECK(out[i] == ref);
  }
  RCHECK(tpucoll_all_reduce(c, in, out, n, TPU_F32, TPUCOLL_MAX) == TPU_OK);
  for (size_t i = 0; i < n; i++) RCHECK(out[i] == val(size - 1, i));
  memcpy(out, in, n * sizeof(float));
  RCHECK(tpucoll_all_reduce(c, out, out, n, TPU_F32, TPUCOLL_AVG) == TPU_OK);
  for (size_t i = 0; i < n; i++) {
    float ref = 0;
    for (int k = 0; k < size; k++) ref += val(k, i);
    RCHECK(out[i] == ref / size);
  }
  /* int64 product */
  int64_t iv[5] = {rank + 1, 2, -1, 3, 0}, io[5];
  RCHECK(tpucoll_all_reduce(c, iv, io, 5, TPU_I64, TPUCOLL_PROD) == TPU_OK);
  int64_t fact = 1;
  for (int k = 0; k < size; k++) fact *= k + 1;
  RCHECK(io[0] == fact && io[1] == (1 << size) && io[2] == (size % 2 ? -1 : 1) && io[4] == 0);
  /* broadcast from the last rank */
  for (size_t i = 0; i < n; i++) out[i] = rank == size - 1 ? val(7, i) : -1.f;
  RCHECK(tpucoll_broadcast(c, out, n, TPU_F32, size - 1) == TPU_OK);
  for (size_t i = 0; i < n; i++) RCHECK(out[i] == val(7, i));
  /* reduce min to rank 0 */
  for (size_t i = 0; i < n; i++) out[i] = -5.f;
  RCHECK(tpucoll_reduce(c, in, out, n, TPU_F32, TPUCOLL_MIN, 0) == TPU_OK);
  for (size_t i = 0; i < n; i++) RCHECK(out[i] == (rank == 0 ? val(0, i) : -5.f));
  /* all_gather */
  RCHECK(tpucoll_all_gather(c, in, out, n, TPU_F32) == TPU_OK);
  for (int k = 0; k < size; k++)
    for (size_t i = 0; i < n; i++) RCHECK(out[k * n + i] == val(k, i));
  /* reduce_scatter: slice k of rank r's input is val(r, k*n + i) */
  for (size_t i = 0; i < n * size; i++) in[i] = val(rank, i);
  RCHECK(tpucoll_reduce_scatter(c, in, out, n, TPU_F32, TPUCOLL_SUM) == TPU_OK);
  for (size_t i = 0; i < n; i++) {
    float ref = 0;
    for (int k = 0; k < size; k++) ref += val(k, rank * n + i);
    RCHECK(out[i] == ref);
  }
  /* all_to_all with uneven splits: rank r sends (r + k + 1) * 300 to k */
  size_t sc[16], rcnt[16], tot_s = 0, tot_r = 0;
  for (int k = 0; k < size; k++) {
    sc[k] = (size_t)(rank + k + 1) * 300;
    rcnt[k] = (size_t)(k + rank + 1) * 300;
    tot_s += sc[k];
    tot_r += rcnt[k];
  }
  int32_t *a = malloc(tot_s * 4), *b = malloc(tot_r * 4);
  for (size_t i = 0, o = 0; i < (size_t)size; o += sc[i], i++)
    for (size_t j = 0; j < sc[i]; j++) a[o + j] = rank * 1000000 + (int)i * 10000 + (int)j;
  RCHECK(tpucoll_all_to_all(c, a, sc, b, rcnt, TPU_I32) == TPU_OK);
  for (size_t k = 0, o = 0; k < (size_t)size; o += rcnt[k], k++)
    for (size_t j = 0; j < rcnt[k]; j++) RCHECK(b[o + j] == (int)k * 1000000 + rank * 10000 + (int)j);
  free(a);
  free(b);
  /* send/recv around a ring, bigger than two p2p halves */
  size_t pn = 3 * SLOT / sizeof(float) + 5;
  float *ps = malloc(pn * 4), *pr = malloc(pn * 4);
  for (size_t i = 0; i < pn; i++) ps[i] = val(rank, i);
  int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  if (rank % 2 == 0) {
    RCHECK(tpucoll_send(c, ps, pn * 4, next, 7) == TPU_OK);
    RCHECK(tpucoll_recv(c, pr, pn * 4, prev, 7) == TPU_OK);
  } else {
    RCHECK(tpucoll_recv(c, pr, pn * 4, prev, 7) == TPU_OK);
    RCHECK(tpucoll_send(c, ps, pn * 4, next, 7) == TPU_OK);
  }
  for (size_t i = 0; i < pn; i++) RCHECK(pr[i] == val(prev, i));
  /* a recv with another tag fails and leaves the message queued */
  if (rank % 2 == 0) {
    RCHECK(tpucoll_send(c, ps, 64, next, 8) == TPU_OK);
  } else {
    RCHECK(tpucoll_recv(c, pr, 64, prev, 9) == TPU_E_VALUE);
    RCHECK(strstr(tpu_last_error(), "tag mismatch") != NULL);
    RCHECK(tpucoll_recv(c, pr, 64, prev, 8) == TPU_OK);
    for (size_t i = 0; i < 16; i++) RCHECK(pr[i] == val(prev, i));
  }
  free(ps);
  free(pr);
  RCHECK(tpucoll_barrier(c) == TPU_OK);
  free(in);
  free(out);
  return 0;
}

TPU_TEST(coll_all_kinds_2_and_4_ranks) {
  size_t counts[] = {1, 1000, 5 * 2048 + 3};
  /* all_reduce: both algorithms (every rank reduces all, up to
   * TORCH_TPU_COLL_DIRECT_BYTES; reduce-scatter + all-gather above) */
  const char *direct[] = {"0", "1M"};
  for (int d = 0; d < 2; d++) {
    setenv("TORCH_TPU_COLL_DIRECT_BYTES", direct[d], 1);
    for (int size = 2; size <= 4; size += 2)
      for (int i = 0; i < 3; i++) {
        char name[96];
        seg_name(name, sizeof name, "kinds");
        CHECK(run_ranks(size, all_kinds, &counts[i], name, 20000, NULL) == 0);
        CHECK(!seg_exists(name));
      }
  }
  unsetenv("TORCH_TPU_COLL_DIRECT_BYTES");
}

TPU_TEST(coll_reduce_buffers_dtypes) {
  uint16_t a[3], b[3], o[3];
  float fa[3] = {1.5f, -2.f, 3.25f}, fb[3] = {0.25f, 8.f, NAN};
  for (int i = 0; i < 3; i++) {
    a[i] = tpu_f32_to_bf16(fa[i]);
    b[i] = tpu_f32_to_bf16(fb[i]);
  }
  const void *s[2] = {a, b};
  CHECK_OK(tpucoll_reduce_buffers(o, s, 2, 3, TPU_BF16, TPUCOLL_SUM, 0));
  CHECK(tpu_bf16_to_f32(o[0]) == 1.75f && tpu_bf16_to_f32(o[1]) == 6.f);
  CHECK(isnan(tpu_bf16_to_f32(o[2])));
  CHECK_OK(tpucoll_reduce_buffers(o, s, 2, 3, TPU_BF16, TPUCOLL_MAX, 0));
  CHECK(tpu_bf16_to_f32(o[1]) == 8.f && isnan(tpu_bf16_to_f32(o[2])));
  uint8_t ba[2] = {1, 0}, bb[2] = {0, 0}, bo[2];
  const void *sb[2] = {ba, bb};
  CHECK_OK(tpucoll_reduce_buffers(bo, sb, 2, 2, TPU_BOOL, TPUCOLL_SUM, 0));
  CHECK(bo[0] == 1 && bo[1] == 0);
  float ca[2] = {1, 2}, cb[2] = {3, -1}, co[2]; /* (1+2i)(3-i) = 5+5i */
  const void *sc[2] = {ca, cb};
  CHECK_OK(tpucoll_reduce_buffers(co, sc, 2, 1, TPU_C64, TPUCOLL_PROD, 0));
  CHECK(co[0] == 5.f && co[1] == 5.f);
  int32_t ia = 1, ib = 2, io;
  const void *si[2] = {&ia, &ib};
  CHECK(tpucoll_reduce_buffers(&io, si, 2, 1, TPU_I32, TPUCOLL_AVG, 0) == TPU_E_TYPE);
  CHECK(tpucoll_reduce_buffers(co, sc, 2, 1, TPU_C64, TPUCOLL_MAX, 0) == TPU_E_TYPE);
}

/* rank 1 calls with a different count: both ranks get TPU_E_INVALID with
 * a message naming the two calls, and the communicator still works. */
static int mismatch(tpucoll_comm *c, int rank, int size, void *arg) {
  float buf[8] = {0};
  int rc = tpucoll_all_reduce(c, buf, buf, rank == 1 ? 8 : 4, TPU_F32, TPUCOLL_SUM);
  RCHECK(rc == TPU_E_INVALID);
  RCHECK(strstr(tpu_last_error(), "mismatched") && strstr(tpu_last_error(), "count=8"));
  buf[0] = 1;
  RCHECK(tpucoll_all_reduce(c, buf, buf, 1, TPU_F32, TPUCOLL_SUM) == TPU_OK);
  RCHECK(buf[0] == size);
  return 0;
}

TPU_TEST(coll_mismatch_is_an_error) {
  char name[96];
  seg_name(name, sizeof name, "mis");
  CHECK(run_ranks(2, mismatch, NULL, name, 20000, NULL) == 0);
}

/* rank 2 of 3 dies before the second collective: the others fail with a
 * timeout-class error well within the timeout; no segment is left. */
static int killed(tpucoll_comm *c, int rank, int size, void *arg) {
  float buf[4096] = {0};
  RCHECK(tpucoll_all_reduce(c, buf, buf, 4096, TPU_F32, TPUCOLL_SUM) == TPU_OK);
  if (rank == 2) raise(SIGKILL);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  int rc = tpucoll_all_reduce(c, buf, buf, 4096, TPU_F32, TPUCOLL_SUM);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double s = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
  RCHECK(rc != TPU_OK && strstr(tpu_last_error(), "tpu_dist timeout"));
  RCHECK(s < 5.0);
  /* the communicator is aborted from now on */
  RCHECK(tpucoll_barrier(c) != TPU_OK);
  return 0;
}

TPU_TEST(coll_killed_rank_times_out) {
  char name[96];
  seg_name(name, sizeof name, "kill");
  int codes[3];
  CHECK(run_ranks(3, killed, NULL, name, 5000, codes) == 1);
  CHECK(codes[0] == 0 && codes[1] == 0 && codes[2] == 128 + SIGKILL);
  CHECK(!seg_exists(name));
}

/* A rank that never joins: init fails within the timeout, nothing leaks. */
TPU_TEST(coll_init_timeout_cleans_up) {
  char name[96];
  seg_name(name, sizeof name, "init");
  tpucoll_comm *c = NULL;
  CHECK(tpucoll_comm_init(name, 0, 2, SLOT, 300, &c) != TPU_OK);
  CHECK(c == NULL && strstr(tpu_last_error(), "timeout"));
  CHECK(!seg_exists(name));
  CHECK(tpucoll_comm_init(name, 1, 2, SLOT, 300, &c) != TPU_OK);
  CHECK(strstr(tpu_last_error(), "timeout"));
}

/* Async: collectives as tasks on a runtime stream, callbacks in order. */
typedef struct cb_log { int n, order[8], status[8]; } cb_log;
static cb_log g_log;
static void on_done(void *ctx, int status, const char *msg) {
  g_log.order[g_log.n] = (int)(intptr_t)ctx;
  g_log.status[g_log.n++] = status;
}

static int async_rank(tpucoll_comm *c, int rank, int size, void *arg) {
  /* chips 2 and 3: the parent test process uses chip 0 */
  tpurt_stream *s = tpurt_stream_create(2 + rank);
  RCHECK(s != NULL);
  float *x = NULL;
  RCHECK(tpurt_malloc(2 + rank, 4 * 10000, (void **)&x) == TPU_OK);
  for (int i = 0; i < 10000; i++) x[i] = (float)rank + i;
  tpucoll_work *w[3];
  tpucoll_desc d = {.kind = TPUCOLL_ALL_REDUCE, .in = x, .out = x, .count = 10000,
                    .dtype = TPU_F32, .op = TPUCOLL_SUM};
  for (int i = 0; i < 3; i++)
    RCHECK(tpucoll_enqueue(c, s, &d, on_done, (void *)(intptr_t)i, &w[i]) == TPU_OK);
  for (int i = 0; i < 3; i++) RCHECK(tpucoll_work_wait(w[i]) == TPU_OK);
  tpucoll_comm_drain(c);
  RCHECK(g_log.n == 3 && g_log.order[0] == 0 && g_log.order[2] == 2 && g_log.status[1] == 0);
  /* three in-place sums over 2 ranks: (0 + 1 + 2i) * 4 */
  for (int i = 0; i < 10000; i++) RCHECK(x[i] == (1.f + 2.f * i) * 4.f);
  for (int i = 0; i < 3; i++) tpucoll_work_release(w[i]);
  tpurt_free(x);
  return 0;
}

TPU_TEST(coll_async_on_stream) {
  char name[96];
  seg_name(name, sizeof name, "async");
  CHECK(run_ranks(2, async_rank, NULL, name, 20000, NULL) == 0);
}

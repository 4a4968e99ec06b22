/* test_rt.c - tests of the vTPU runtime core: env parsing, devices, the
 * caching allocator, streams, launch-blocking, events and the chip lock.
 *
 * Tests run in one process and other layers' tests may use tpu:0 too, so
 * memory checks compare deltas of the statistics. Process-level behaviour
 * (env read once, the inter-process chip lock) is tested in child processes
 * that re-exec this binary with TPURT_TEST_CHILD set (handled by a
 * constructor below, before main runs any test).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ftw.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rt/internal.h"
#include "tpu_rt.h"
#include "tpu_test.h"

extern char **environ;

/* ---- helpers ---------------------------------------------------------- */

/* A gate tasks can block on until the test opens it. */
typedef struct gate {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int open;
  _Atomic int entered;
} gate;

static void gate_init(gate *g) {
  pthread_mutex_init(&g->mu, NULL);
  pthread_cond_init(&g->cv, NULL);
  g->open = 0;
  atomic_store(&g->entered, 0);
}
static void gate_open(gate *g) {
  pthread_mutex_lock(&g->mu);
  g->open = 1;
  pthread_cond_broadcast(&g->cv);
  pthread_mutex_unlock(&g->mu);
}
static void gate_destroy(gate *g) {
  pthread_mutex_destroy(&g->mu);
  pthread_cond_destroy(&g->cv);
}
static int gate_task(void *ctx) {
  gate *g = ctx;
  atomic_fetch_add(&g->entered, 1);
  pthread_mutex_lock(&g->mu);
  while (!g->open) pthread_cond_wait(&g->cv, &g->mu);
  pthread_mutex_unlock(&g->mu);
  return TPU_OK;
}

static int stats(int dev, tpurt_mem_stats *s) { return tpurt_mem_get_stats(dev, s); }

/* ---- env parsing ------------------------------------------------------ */

TPU_TEST(tpurt__parse_visible_chips) {
  int out[RT_MAX_CHIPS];
  char err[128];
  CHECK(tpurt__parse_visible_chips("", 4, out, RT_MAX_CHIPS, err, sizeof err) == 0);
  CHECK(tpurt__parse_visible_chips("  ", 4, out, RT_MAX_CHIPS, err, sizeof err) == 0);
  CHECK(tpurt__parse_visible_chips("2", 4, out, RT_MAX_CHIPS, err, sizeof err) == 1 && out[0] == 2);
  CHECK(tpurt__parse_visible_chips("3, 1,0", 4, out, RT_MAX_CHIPS, err, sizeof err) == 3);
  CHECK(out[0] == 3 && out[1] == 1 && out[2] == 0);
  CHECK(tpurt__parse_visible_chips("4", 4, out, RT_MAX_CHIPS, err, sizeof err) == -1);
  CHECK(strstr(err, "chip 4 does not exist") != NULL);
  CHECK(tpurt__parse_visible_chips("1,1", 4, out, RT_MAX_CHIPS, err, sizeof err) == -1);
  CHECK(strstr(err, "twice") != NULL);
  CHECK(tpurt__parse_visible_chips("a", 4, out, RT_MAX_CHIPS, err, sizeof err) == -1);
  CHECK(tpurt__parse_visible_chips("1,", 4, out, RT_MAX_CHIPS, err, sizeof err) == -1);
  CHECK(tpurt__parse_visible_chips("-1", 4, out, RT_MAX_CHIPS, err, sizeof err) == -1);
  CHECK(tpurt__parse_visible_chips("1;2", 4, out, RT_MAX_CHIPS, err, sizeof err) == -1);
  CHECK(tpurt__parse_visible_chips("0,1,2", 4, out, 2, err, sizeof err) == -1);
}

TPU_TEST(tpurt__parse_bytes) {
  uint64_t v = 0;
  CHECK(tpurt__parse_bytes("1024", &v) == 0 && v == 1024);
  CHECK(tpurt__parse_bytes("0", &v) == 0 && v == 0);
  CHECK(tpurt__parse_bytes("4K", &v) == 0 && v == 4096);
  CHECK(tpurt__parse_bytes("4k", &v) == 0 && v == 4096);
  CHECK(tpurt__parse_bytes("3M", &v) == 0 && v == 3ull << 20);
  CHECK(tpurt__parse_bytes("16G", &v) == 0 && v == 16ull << 30);
  CHECK(tpurt__parse_bytes("16GiB", &v) == 0 && v == 16ull << 30);
  CHECK(tpurt__parse_bytes("2GB", &v) == 0 && v == 2ull << 30);
  CHECK(tpurt__parse_bytes("1.5G", &v) == 0 && v == 3ull << 29);
  CHECK(tpurt__parse_bytes(" 8M ", &v) == 0 && v == 8ull << 20);
  CHECK(tpurt__parse_bytes("", &v) == -1);
  CHECK(tpurt__parse_bytes("G", &v) == -1);
  CHECK(tpurt__parse_bytes("-1", &v) == -1);
  CHECK(tpurt__parse_bytes("12Q", &v) == -1);
  CHECK(tpurt__parse_bytes("1.5", &v) == -1);
  CHECK(tpurt__parse_bytes("99999999999999999999", &v) == -1);
  CHECK(tpurt__parse_bytes("99999999999T", &v) == -1);
}

TPU_TEST(tpurt__format_bytes) {
  char b[32];
  CHECK(strcmp(tpurt__format_bytes(0, b, sizeof b), "0 bytes") == 0);
  CHECK(strcmp(tpurt__format_bytes(1024, b, sizeof b), "1024 bytes") == 0);
  CHECK(strcmp(tpurt__format_bytes(1536, b, sizeof b), "1.50 KiB") == 0);
  CHECK(strcmp(tpurt__format_bytes(3ull << 20, b, sizeof b), "3.00 MiB") == 0);
  CHECK(strcmp(tpurt__format_bytes(3ull << 29, b, sizeof b), "1.50 GiB") == 0);
}

/* ---- devices ---------------------------------------------------------- */

TPU_TEST(rt_devices) {
  int n = tpurt_device_count();
  CHECK(n >= 1);
  const char *hbm = getenv("TORCH_TPU_HBM_BYTES");
  uint64_t want = RT_DEFAULT_HBM;
  if (hbm && *hbm) CHECK(tpurt__parse_bytes(hbm, &want) == 0);
  CHECK(tpurt_device_hbm_capacity(0) == want);
  CHECK(tpurt_device_hbm_capacity(n) == 0);
  CHECK(tpurt_device_hbm_capacity(-1) == 0);
  CHECK(tpurt_device_physical_id(0) >= 0);
  CHECK(tpurt_device_physical_id(n) == TPU_E_INVALID);
  CHECK(tpurt_device_open(n) == TPU_E_INVALID);
  CHECK(tpurt_device_open(-1) == TPU_E_INVALID);
  CHECK_OK(tpurt_device_open(0));
  CHECK_OK(tpurt_device_open(0)); /* idempotent */
  CHECK(tpurt_device_is_open(0) == 1);
  CHECK(tpurt_device_is_open(n) == 0);
}

/* ---- memory ----------------------------------------------------------- */

TPU_TEST(rt_mem_basic) {
  tpurt_mem_stats s0, s1;
  CHECK_OK(stats(0, &s0));
  void *p = NULL, *q = NULL;
  CHECK_OK(tpurt_malloc(0, 0, &p));
  CHECK(p == NULL);
  CHECK_OK(tpurt_malloc(0, 1000, &p));
  CHECK(p != NULL && ((uintptr_t)p % 64) == 0);
  memset(p, 0xab, 1000);
  CHECK_OK(tpurt_malloc(0, 3u << 20, &q)); /* large path */
  CHECK(q != NULL && ((uintptr_t)q % 64) == 0);
  memset(q, 1, 3u << 20);
  CHECK_OK(stats(0, &s1));
  CHECK(s1.allocated - s0.allocated == 1024 + (3u << 20));
  CHECK(s1.active_blocks - s0.active_blocks == 2);
  CHECK(s1.num_allocs - s0.num_allocs == 2);
  CHECK(s1.reserved >= s1.allocated);
  CHECK(s1.capacity == tpurt_device_hbm_capacity(0));
  CHECK(s1.peak_allocated >= s1.allocated);
  /* ptr_device finds interior addresses */
  CHECK(tpurt_ptr_device(p) == 0);
  CHECK(tpurt_ptr_device((char *)p + 999) == 0);
  CHECK(tpurt_ptr_device((char *)q + (3u << 20) - 1) == 0);
  int local;
  CHECK(tpurt_ptr_device(&local) == -1);
  CHECK(tpurt_ptr_device(NULL) == -1);
  /* bad frees */
  CHECK(tpurt_free(&local) == TPU_E_INVALID);
  CHECK(tpurt_free((char *)p + 64) == TPU_E_INVALID);
  CHECK_OK(tpurt_free(p));
  CHECK(tpurt_free(p) == TPU_E_INVALID); /* double free */
  CHECK(tpurt_ptr_device(p) == -1);
  CHECK_OK(tpurt_free(q));
  CHECK_OK(tpurt_free(NULL));
  CHECK_OK(stats(0, &s1));
  CHECK(s1.allocated == s0.allocated);
  CHECK(s1.num_frees - s0.num_frees == 2);
  CHECK(s1.active_blocks == s0.active_blocks);
  CHECK(tpurt_malloc(99, 16, &p) == TPU_E_INVALID);
  CHECK(tpurt_mem_get_stats(-1, &s1) == TPU_E_INVALID);
}

TPU_TEST(rt_mem_cache_peak_empty) {
  CHECK_OK(tpurt_device_synchronize(0));
  CHECK_OK(tpurt_mem_empty_cache(0));
  tpurt_mem_stats s0, s1;
  CHECK_OK(stats(0, &s0));
  size_t sz = 777 * 512; /* a size no other test uses */
  void *p, *q;
  CHECK_OK(tpurt_malloc(0, sz - 5, &p));
  CHECK_OK(tpurt_free(p));
  CHECK_OK(stats(0, &s1));
  CHECK(s1.reserved - s0.reserved == sz); /* cached, still reserved */
  CHECK(s1.allocated == s0.allocated);
  CHECK_OK(tpurt_malloc(0, sz, &q));
  CHECK(q == p); /* reused from the cache */
  CHECK_OK(stats(0, &s1));
  CHECK(s1.reserved - s0.reserved == sz);
  /* peaks */
  CHECK_OK(tpurt_mem_reset_peak(0));
  CHECK_OK(stats(0, &s1));
  CHECK(s1.peak_allocated == s1.allocated && s1.peak_reserved == s1.reserved);
  void *a, *b;
  CHECK_OK(tpurt_malloc(0, 4096, &a));
  CHECK_OK(tpurt_malloc(0, 8192, &b));
  CHECK_OK(tpurt_free(a));
  CHECK_OK(tpurt_free(b));
  CHECK_OK(tpurt_free(q));
  tpurt_mem_stats s2;
  CHECK_OK(stats(0, &s2));
  CHECK(s2.peak_allocated == s1.allocated + 4096 + 8192);
  CHECK(s2.allocated == s0.allocated);
  CHECK(s2.reserved >= s0.reserved + sz + 4096 + 8192);
  CHECK_OK(tpurt_mem_empty_cache(0));
  CHECK_OK(stats(0, &s2));
  CHECK(s2.reserved == s2.allocated); /* nothing cached, nothing pending */
  CHECK(s2.peak_reserved >= s0.reserved + sz + 4096 + 8192);
}

TPU_TEST(rt_mem_oom) {
  CHECK_OK(tpurt_device_synchronize(0));
  uint64_t cap = tpurt_device_hbm_capacity(0);
  CHECK(cap >= (64u << 20)); /* the test env uses 1G */
  tpurt_mem_stats s0, s1;
  CHECK_OK(stats(0, &s0));
  void *p = NULL;
  /* larger than the chip */
  CHECK(tpurt_malloc(0, cap + 1, &p) == TPU_E_OOM);
  CHECK(p == NULL);
  CHECK(strstr(tpu_last_error(), "Tried to allocate") != NULL);
  CHECK(strstr(tpu_last_error(), "on tpu:0") != NULL);
  char expect[64];
  snprintf(expect, sizeof expect, "(%llu bytes)", (unsigned long long)cap + 1);
  CHECK(strstr(tpu_last_error(), expect) != NULL);
  CHECK_OK(stats(0, &s1));
  CHECK(s1.num_ooms - s0.num_ooms == 1);

  /* 60% + 60% does not fit; exact message checked */
  size_t big = (size_t)(cap / 10 * 6) & ~(size_t)((128 << 10) - 1);
  void *a = NULL, *b = NULL;
  CHECK_OK(tpurt_malloc(0, big, &a));
  CHECK(tpurt_malloc(0, big, &b) == TPU_E_OOM);
  CHECK(b == NULL);
  CHECK_OK(stats(0, &s1));
  char x[32], f[32], c[32], al[32], r[32], msg[512];
  snprintf(msg, sizeof msg,
           "Tried to allocate %s (%llu bytes) on tpu:0; %s free of %s capacity "
           "(%s allocated, %s reserved by torch_tpu)",
           tpurt__format_bytes(big, x, sizeof x), (unsigned long long)big,
           tpurt__format_bytes(cap - s1.reserved, f, sizeof f), tpurt__format_bytes(cap, c, sizeof c),
           tpurt__format_bytes(s1.allocated, al, sizeof al),
           tpurt__format_bytes(s1.reserved, r, sizeof r));
  CHECK(strcmp(tpu_last_error(), msg) == 0);
  CHECK(s1.reserved <= cap);
  CHECK(s1.num_ooms - s0.num_ooms == 2);
  /* allocation keeps working after an OOM */
  void *small = NULL;
  CHECK_OK(tpurt_malloc(0, 4096, &small));
  CHECK_OK(tpurt_free(small));
  /* free a (cached, reserved); a 70% block fits only if the cache is
   * released first */
  CHECK_OK(tpurt_free(a));
  size_t big2 = (size_t)(cap / 10 * 7) & ~(size_t)((128 << 10) - 1);
  CHECK_OK(tpurt_malloc(0, big2, &b));
  CHECK_OK(stats(0, &s1));
  CHECK(s1.reserved <= cap);
  CHECK_OK(tpurt_free(b));
  CHECK_OK(tpurt_mem_empty_cache(0));
}

typedef struct {
  int dev;
  int ok;
  int seed;
} mem_thread_arg;

static void *mem_thread(void *v) {
  mem_thread_arg *a = v;
  a->ok = 1;
  void *ptrs[32] = {0};
  size_t sizes[32] = {0};
  unsigned st = (unsigned)a->seed;
  for (int it = 0; it < 2000; it++) {
    st = st * 1103515245u + 12345u;
    int k = (int)((st >> 16) % 32);
    if (ptrs[k]) {
      unsigned char *p = ptrs[k];
      if (p[0] != (unsigned char)k || p[sizes[k] - 1] != (unsigned char)k) a->ok = 0;
      if (tpurt_ptr_device(p + sizes[k] / 2) != a->dev) a->ok = 0;
      if (tpurt_free(p) != TPU_OK) a->ok = 0;
      ptrs[k] = NULL;
    } else {
      size_t sz = 1 + (st >> 4) % 20000;
      if (tpurt_malloc(a->dev, sz, &ptrs[k]) != TPU_OK) {
        a->ok = 0;
        continue;
      }
      memset(ptrs[k], k, sz);
      sizes[k] = sz;
    }
  }
  for (int k = 0; k < 32; k++)
    if (ptrs[k] && tpurt_free(ptrs[k]) != TPU_OK) a->ok = 0;
  return NULL;
}

TPU_TEST(rt_mem_threads) {
  enum { NT = 4 };
  tpurt_mem_stats s0, s1;
  CHECK_OK(stats(0, &s0));
  pthread_t t[NT];
  mem_thread_arg a[NT];
  for (int i = 0; i < NT; i++) {
    a[i].dev = 0;
    a[i].seed = 17 + i;
    CHECK(pthread_create(&t[i], NULL, mem_thread, &a[i]) == 0);
  }
  int ok = 1;
  for (int i = 0; i < NT; i++) {
    pthread_join(t[i], NULL);
    ok &= a[i].ok;
  }
  CHECK(ok);
  CHECK_OK(stats(0, &s1));
  CHECK(s1.allocated == s0.allocated);
  CHECK(s1.active_blocks == s0.active_blocks);
  CHECK(s1.num_allocs - s0.num_allocs == s1.num_frees - s0.num_frees);
}

/* ---- stream-ordered free --------------------------------------------- */

TPU_TEST(rt_mem_stream_ordered_free) {
  tpurt_stream *s0 = tpurt_default_stream(0);
  tpurt_stream *s1 = tpurt_stream_create(0);
  CHECK(s0 && s1);
  CHECK_OK(tpurt_device_synchronize(0));
  CHECK_OK(tpurt_mem_empty_cache(0));
  size_t sz = 555 * 512; /* unique size */
  tpurt_stream *streams[2] = {s0, s1};
  for (int k = 0; k < 2; k++) {
    gate g;
    gate_init(&g);
    void *p, *q, *r;
    CHECK_OK(tpurt_malloc(0, sz, &p));
    CHECK_OK(tpurt_stream_enqueue(streams[k], gate_task, NULL, &g)); /* "uses" p */
    CHECK_OK(tpurt_free(p));
    tpurt_mem_stats st;
    CHECK_OK(stats(0, &st));
    CHECK(st.reserved >= st.allocated + sz); /* pending, still reserved */
    CHECK_OK(tpurt_malloc(0, sz, &q));
    CHECK(q != p); /* the stream has not passed the free yet */
    CHECK(tpurt_stream_query(streams[k]) == 0);
    gate_open(&g);
    CHECK_OK(tpurt_stream_synchronize(streams[k]));
    CHECK_OK(tpurt_malloc(0, sz, &r));
    CHECK(r == p); /* now reusable */
    CHECK_OK(tpurt_free(q));
    CHECK_OK(tpurt_free(r));
    gate_destroy(&g);
  }
  /* empty_cache never releases a pending block */
  gate g;
  gate_init(&g);
  void *p;
  CHECK_OK(tpurt_malloc(0, sz, &p));
  CHECK_OK(tpurt_stream_enqueue(s1, gate_task, NULL, &g));
  CHECK_OK(tpurt_free(p));
  CHECK_OK(tpurt_mem_empty_cache(0));
  tpurt_mem_stats st;
  CHECK_OK(stats(0, &st));
  CHECK(st.reserved >= st.allocated + sz);
  gate_open(&g);
  CHECK_OK(tpurt_device_synchronize(0));
  CHECK_OK(tpurt_mem_empty_cache(0));
  CHECK_OK(stats(0, &st));
  CHECK(st.reserved == st.allocated);
  gate_destroy(&g);
}

/* Under memory pressure malloc waits for pending frees instead of failing. */
typedef struct {
  gate *g;
  int delay_open;
} opener_arg;
static void *opener(void *v) {
  opener_arg *a = v;
  /* open the gate once the main thread is (probably) waiting; correctness
   * does not depend on the timing */
  usleep(20000);
  gate_open(a->g);
  return NULL;
}

/* tpurt_malloc_on: a block freed while only stream sid had work queued is
 * reused at once for sid, never for another stream or a plain malloc, and
 * not when another stream was busy at the free. */
TPU_TEST(rt_mem_same_stream_reuse) {
  tpurt_stream *s0 = tpurt_default_stream(0);
  tpurt_stream *s1 = tpurt_stream_create(0);
  CHECK(s0 && s1);
  CHECK_OK(tpurt_device_synchronize(0));
  CHECK_OK(tpurt_mem_empty_cache(0));
  int id0 = tpurt_stream_id(s0), id1 = tpurt_stream_id(s1);
  size_t sz = 557 * 512; /* unique size */
  gate g;
  gate_init(&g);
  void *p, *q, *r, *t;
  CHECK_OK(tpurt_malloc(0, sz, &p));
  CHECK_OK(tpurt_stream_enqueue(s0, gate_task, NULL, &g)); /* "uses" p */
  CHECK_OK(tpurt_free(p));
  CHECK_OK(tpurt_malloc(0, sz, &q));
  CHECK(q != p);                           /* plain malloc waits for the stream */
  CHECK_OK(tpurt_malloc_on(0, id1, sz, &r));
  CHECK(r != p);                           /* another stream must wait too */
  CHECK_OK(tpurt_malloc_on(0, id0, sz, &t));
  CHECK(t == p);                           /* same stream: at once */
  CHECK(tpurt_stream_query(s0) == 0);      /* while the user is still queued */
  CHECK_OK(tpurt_free(t));
  CHECK_OK(tpurt_free(q));
  CHECK_OK(tpurt_free(r));
  /* another stream busy at the free: no same-stream shortcut */
  gate g1;
  gate_init(&g1);
  CHECK_OK(tpurt_malloc(0, sz, &p));
  CHECK_OK(tpurt_stream_enqueue(s1, gate_task, NULL, &g1));
  CHECK_OK(tpurt_free(p));
  CHECK_OK(tpurt_malloc_on(0, id0, sz, &q));
  CHECK(q != p);
  gate_open(&g);
  gate_open(&g1);
  CHECK_OK(tpurt_device_synchronize(0));
  CHECK_OK(tpurt_free(q));
  gate_destroy(&g);
  gate_destroy(&g1);
}

TPU_TEST(rt_mem_oom_waits_for_pending_free) {
  CHECK_OK(tpurt_device_synchronize(0));
  CHECK_OK(tpurt_mem_empty_cache(0));
  uint64_t cap = tpurt_device_hbm_capacity(0);
  size_t big = (size_t)(cap / 10 * 6) & ~(size_t)((128 << 10) - 1);
  tpurt_stream *s = tpurt_default_stream(0);
  gate g;
  gate_init(&g);
  void *a, *b;
  CHECK_OK(tpurt_malloc(0, big, &a));
  CHECK_OK(tpurt_stream_enqueue(s, gate_task, NULL, &g));
  CHECK_OK(tpurt_free(a));
  pthread_t t;
  opener_arg oa = {&g, 1};
  CHECK(pthread_create(&t, NULL, opener, &oa) == 0);
  int rc = tpurt_malloc(0, big, &b); /* must wait for the stream */
  pthread_join(t, NULL);
  CHECK_OK(rc);
  CHECK(b == a);
  CHECK_OK(tpurt_free(b));
  CHECK_OK(tpurt_stream_synchronize(s));
  CHECK_OK(tpurt_mem_empty_cache(0));
  gate_destroy(&g);
}

/* ---- streams ---------------------------------------------------------- */

typedef struct {
  int *log;
  _Atomic int *pos;
  int value;
  _Atomic int *cleanups;
} log_task;

static int log_run(void *ctx) {
  log_task *t = ctx;
  t->log[atomic_fetch_add(t->pos, 1)] = t->value;
  return TPU_OK;
}
static void log_cleanup(void *ctx) {
  log_task *t = ctx;
  atomic_fetch_add(t->cleanups, 1);
  free(t);
}

TPU_TEST(rt_stream_ids) {
  tpurt_stream *d = tpurt_default_stream(0);
  CHECK(d != NULL);
  CHECK(tpurt_default_stream(0) == d);
  CHECK(tpurt_stream_id(d) == 0 && tpurt_stream_device(d) == 0);
  CHECK(tpurt_stream_get(0, 0) == d);
  tpurt_stream *a = tpurt_stream_create(0);
  tpurt_stream *b = tpurt_stream_create(0);
  CHECK(a && b && a != b && a != d);
  CHECK(tpurt_stream_id(a) >= 1 && tpurt_stream_id(b) == tpurt_stream_id(a) + 1);
  CHECK(tpurt_stream_get(0, tpurt_stream_id(b)) == b);
  CHECK(tpurt_stream_get(0, RT_MAX_STREAMS) == NULL);
  CHECK(tpurt_stream_get(tpurt_device_count(), 0) == NULL);
  CHECK(tpurt_default_stream(-1) == NULL);
  CHECK(tpurt_stream_create(tpurt_device_count()) == NULL);
  CHECK(tpurt_stream_query(a) == 1); /* nothing enqueued */
  CHECK_OK(tpurt_stream_synchronize(a));
}

TPU_TEST(rt_stream_order) {
  enum { N = 2000 };
  tpurt_stream *s[2] = {tpurt_default_stream(0), tpurt_stream_create(0)};
  CHECK(s[0] && s[1]);
  int *log[2];
  _Atomic int pos[2] = {0, 0};
  _Atomic int cleanups = 0;
  for (int k = 0; k < 2; k++) log[k] = calloc(N, sizeof(int));
  for (int i = 0; i < N; i++)
    for (int k = 0; k < 2; k++) {
      log_task *t = malloc(sizeof *t);
      *t = (log_task){log[k], &pos[k], i, &cleanups};
      CHECK_OK(tpurt_stream_enqueue(s[k], log_run, log_cleanup, t));
    }
  CHECK_OK(tpurt_stream_synchronize(s[0]));
  CHECK_OK(tpurt_stream_synchronize(s[1]));
  CHECK(tpurt_stream_query(s[0]) && tpurt_stream_query(s[1]));
  int ok = atomic_load(&pos[0]) == N && atomic_load(&pos[1]) == N;
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < N && ok; i++) ok = log[k][i] == i;
  free(log[0]);
  free(log[1]);
  CHECK(ok);
  CHECK(atomic_load(&cleanups) == 2 * N); /* cleanup ran before synchronize returned */
}

static int fail_task(void *ctx) {
  return tpu_error(TPU_E_VALUE, "task %d failed", (int)(intptr_t)ctx);
}
static int count_task(void *ctx) {
  atomic_fetch_add((_Atomic int *)ctx, 1);
  return TPU_OK;
}

TPU_TEST(rt_stream_sticky_error) {
  tpurt_stream *s = tpurt_stream_create(0);
  CHECK(s);
  _Atomic int count = 0;
  CHECK_OK(tpurt_stream_enqueue(s, fail_task, NULL, (void *)(intptr_t)7));
  CHECK_OK(tpurt_stream_enqueue(s, count_task, NULL, &count));
  CHECK_OK(tpurt_stream_enqueue(s, fail_task, NULL, (void *)(intptr_t)8));
  CHECK_OK(tpurt_stream_enqueue(s, count_task, NULL, &count));
  tpu_clear_error();
  CHECK(tpurt_stream_synchronize(s) == TPU_E_VALUE);
  CHECK(strcmp(tpu_last_error(), "task 7 failed") == 0); /* first wins */
  CHECK(tpu_last_error_code() == TPU_E_VALUE);
  CHECK(atomic_load(&count) == 2); /* later tasks still ran */
  CHECK_OK(tpurt_stream_synchronize(s)); /* cleared */
  /* device_synchronize reports a stream's error too */
  CHECK_OK(tpurt_stream_enqueue(s, fail_task, NULL, (void *)(intptr_t)9));
  CHECK(tpurt_device_synchronize(0) == TPU_E_VALUE);
  CHECK(strcmp(tpu_last_error(), "task 9 failed") == 0);
  CHECK_OK(tpurt_device_synchronize(0));
  CHECK(tpurt_device_synchronize(-1) == TPU_E_INVALID);
  /* NULL stream: cleanup still runs */
  _Atomic int cleanups = 0;
  log_task *t = malloc(sizeof *t);
  int dummy[1];
  _Atomic int pos = 0;
  *t = (log_task){dummy, &pos, 0, &cleanups};
  CHECK(tpurt_stream_enqueue(NULL, log_run, log_cleanup, t) == TPU_E_INVALID);
  CHECK(atomic_load(&cleanups) == 1);
}

TPU_TEST(rt_launch_blocking) {
  int was = tpurt_get_launch_blocking();
  const char *env = getenv("TORCH_TPU_LAUNCH_BLOCKING");
  int env_on = env && strcmp(env, "1") == 0;
  CHECK(was == env_on); /* nobody changed it yet */
  tpurt_set_launch_blocking(1);
  CHECK(tpurt_get_launch_blocking() == 1);
  tpurt_stream *s = tpurt_stream_create(0);
  CHECK(s);
  _Atomic int count = 0;
  int ok = 1;
  for (int i = 0; i < 50 && ok; i++) {
    if (tpurt_stream_enqueue(s, count_task, NULL, &count) != TPU_OK) ok = 0;
    if (atomic_load(&count) != i + 1) ok = 0; /* done when enqueue returns */
  }
  int rc = tpurt_stream_enqueue(s, fail_task, NULL, (void *)(intptr_t)3);
  int msg_ok = strcmp(tpu_last_error(), "task 3 failed") == 0;
  int rc2 = tpurt_stream_synchronize(s); /* reported once, not sticky */
  tpurt_set_launch_blocking(was);
  CHECK(ok);
  CHECK(rc == TPU_E_VALUE && msg_ok);
  CHECK_OK(rc2);
  CHECK(tpurt_get_launch_blocking() == was);
}

/* ---- events ----------------------------------------------------------- */

typedef struct {
  _Atomic int *x;
  _Atomic int *seen;
} xfer_ctx;
static int set_x(void *ctx) {
  atomic_store(((xfer_ctx *)ctx)->x, 1);
  return TPU_OK;
}
static int read_x(void *ctx) {
  xfer_ctx *c = ctx;
  atomic_store(c->seen, atomic_load(c->x) ? 1 : 2);
  return TPU_OK;
}

TPU_TEST(rt_events) {
  tpurt_stream *s1 = tpurt_stream_create(0), *s2 = tpurt_stream_create(0);
  CHECK(s1 && s2);
  tpurt_event *e = tpurt_event_create(), *start = tpurt_event_create();
  CHECK(e && start);
  double ms = -1;
  CHECK(tpurt_event_query(e) == 1); /* never recorded */
  CHECK_OK(tpurt_event_synchronize(e));
  CHECK(tpurt_event_elapsed_ms(start, e, &ms) == TPU_E_INVALID);
  /* wait_event on a never-recorded event is a no-op */
  CHECK_OK(tpurt_stream_wait_event(s2, e));

  gate g;
  gate_init(&g);
  _Atomic int x = 0, seen = 0;
  xfer_ctx xc = {&x, &seen};
  CHECK_OK(tpurt_event_record(start, s1));
  CHECK_OK(tpurt_stream_enqueue(s1, gate_task, NULL, &g));
  CHECK_OK(tpurt_stream_enqueue(s1, set_x, NULL, &xc));
  CHECK_OK(tpurt_event_record(e, s1));
  CHECK_OK(tpurt_stream_wait_event(s2, e));
  CHECK_OK(tpurt_stream_enqueue(s2, read_x, NULL, &xc));
  CHECK_OK(tpurt_event_synchronize(start));
  CHECK(tpurt_event_query(start) == 1);
  CHECK(tpurt_event_query(e) == 0);
  CHECK(tpurt_event_elapsed_ms(start, e, &ms) == TPU_E_INVALID); /* e pending */
  CHECK(atomic_load(&seen) == 0); /* s2 is held by the event */
  CHECK(tpurt_stream_query(s2) == 0);
  gate_open(&g);
  CHECK_OK(tpurt_event_synchronize(e));
  CHECK(tpurt_event_query(e) == 1);
  CHECK_OK(tpurt_stream_synchronize(s2));
  CHECK(atomic_load(&seen) == 1); /* s2 ran after s1's set_x */
  CHECK_OK(tpurt_event_elapsed_ms(start, e, &ms));
  CHECK(ms >= 0.0);
  CHECK_OK(tpurt_event_elapsed_ms(e, e, &ms));
  CHECK(ms == 0.0);

  /* re-record replaces the previous record */
  gate g2;
  gate_init(&g2);
  CHECK_OK(tpurt_stream_enqueue(s1, gate_task, NULL, &g2));
  CHECK_OK(tpurt_event_record(e, s1));
  CHECK(tpurt_event_query(e) == 0);
  gate_open(&g2);
  CHECK_OK(tpurt_event_synchronize(e));
  CHECK(tpurt_event_query(e) == 1);

  /* destroy while a record and a wait are still pending */
  gate g3;
  gate_init(&g3);
  tpurt_event *tmp = tpurt_event_create();
  CHECK_OK(tpurt_stream_enqueue(s1, gate_task, NULL, &g3));
  CHECK_OK(tpurt_event_record(tmp, s1));
  CHECK_OK(tpurt_stream_wait_event(s2, tmp));
  tpurt_event_destroy(tmp);
  gate_open(&g3);
  CHECK_OK(tpurt_stream_synchronize(s1));
  CHECK_OK(tpurt_stream_synchronize(s2));

  tpurt_event_destroy(e);
  tpurt_event_destroy(start);
  tpurt_event_destroy(NULL);
  gate_destroy(&g);
  gate_destroy(&g2);
  gate_destroy(&g3);
}

TPU_TEST(rt_device_synchronize_all_streams) {
  tpurt_stream *s[3] = {tpurt_default_stream(0), tpurt_stream_create(0),
                        tpurt_stream_create(0)};
  CHECK(s[0] && s[1] && s[2]);
  gate g;
  gate_init(&g);
  _Atomic int count = 0;
  for (int k = 0; k < 3; k++) {
    CHECK_OK(tpurt_stream_enqueue(s[k], gate_task, NULL, &g));
    for (int i = 0; i < 10; i++) CHECK_OK(tpurt_stream_enqueue(s[k], count_task, NULL, &count));
  }
  CHECK(atomic_load(&count) == 0);
  gate_open(&g);
  CHECK_OK(tpurt_device_synchronize(0));
  CHECK(atomic_load(&count) == 30);
  for (int k = 0; k < 3; k++) CHECK(tpurt_stream_query(s[k]) == 1);
  gate_destroy(&g);
}

/* ---- child processes (env read once; the chip lock) ------------------ */

/* Child modes, selected by TPURT_TEST_CHILD before any test runs:
 *   "lock <dev> <wfd> <rfd>": open <dev>, write the status to wfd, then
 *       block until rfd is closed, then _exit(0).
 *   "env <wfd>": write "count rc cap msg" for device 0 and _exit(0). */
__attribute__((constructor(200))) static void rt_test_child_entry(void) {
  const char *mode = getenv("TPURT_TEST_CHILD");
  if (!mode) return;
  char buf[600];
  int dev, wfd, rfd;
  if (sscanf(mode, "lock %d %d %d", &dev, &wfd, &rfd) == 3) {
    int rc = tpurt_device_open(dev);
    int n = snprintf(buf, sizeof buf, "%d", rc);
    if (write(wfd, buf, (size_t)n) < 0) _exit(2);
    close(wfd);
    char c;
    while (read(rfd, &c, 1) > 0) {
    }
    _exit(0);
  }
  if (sscanf(mode, "env %d", &wfd) == 1) {
    int count = tpurt_device_count();
    int rc = tpurt_device_open(0);
    int n = snprintf(buf, sizeof buf, "%d %d %llu %d %s", count, rc,
                     (unsigned long long)tpurt_device_hbm_capacity(0),
                     tpurt_get_launch_blocking(), rc ? tpu_last_error() : "-");
    if (write(wfd, buf, (size_t)n) < 0) _exit(2);
    _exit(0);
  }
  _exit(3);
}

/* Several test runs may share one tree (and the Makefile's lock dir) at
 * the same time: give this test process a private lock directory, inherited
 * by its children, so concurrent runs never see each other's chip locks.
 * Runs before main, i.e. before the runtime reads the environment. */
static char g_private_lock_dir[600];

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  return remove(path);
}
static void remove_private_lock_dir(void) {
  if (g_private_lock_dir[0]) nftw(g_private_lock_dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

__attribute__((constructor(150))) static void rt_test_private_lock_dir(void) {
  if (getenv("TPURT_TEST_CHILD")) return;
  const char *base = getenv("TORCH_TPU_LOCK_DIR");
  snprintf(g_private_lock_dir, sizeof g_private_lock_dir, "%s/run%d",
           base && *base ? base : "/tmp/torch_tpu_test_locks", (int)getpid());
  setenv("TORCH_TPU_LOCK_DIR", g_private_lock_dir, 1);
  atexit(remove_private_lock_dir);
}

/* Start this binary as a child with TPURT_TEST_CHILD=mode plus `extra`
 * (NULL-terminated "K=V" list). Returns its pid, or -1. */
static pid_t spawn_child(const char *mode, const char **extra, int keep1, int keep2) {
  char modebuf[128];
  snprintf(modebuf, sizeof modebuf, "TPURT_TEST_CHILD=%s", mode);
  int n = 0;
  while (environ[n]) n++;
  const char **env = calloc((size_t)n + 16, sizeof *env);
  int k = 0;
  for (int i = 0; i < n; i++) {
    int skip = strncmp(environ[i], "TPURT_TEST_CHILD=", 17) == 0;
    for (int j = 0; extra && extra[j]; j++) {
      size_t eq = strcspn(extra[j], "=");
      if (strncmp(environ[i], extra[j], eq + 1) == 0) skip = 1;
    }
    if (!skip) env[k++] = environ[i];
  }
  for (int j = 0; extra && extra[j]; j++) env[k++] = extra[j];
  env[k++] = modebuf;
  env[k] = NULL;
  pid_t pid = fork();
  if (pid == 0) {
    /* every pipe end is close-on-exec except the child's own ends */
    if (keep1 >= 0) fcntl(keep1, F_SETFD, 0);
    if (keep2 >= 0) fcntl(keep2, F_SETFD, 0);
    execve("/proc/self/exe", (char *[]){"tpu_tests", "__child__", NULL}, (char **)env);
    _exit(4);
  }
  free(env);
  return pid;
}

static int read_all(int fd, char *buf, size_t len) {
  size_t got = 0;
  ssize_t r;
  while (got + 1 < len && (r = read(fd, buf + got, len - 1 - got)) > 0) got += (size_t)r;
  buf[got] = 0;
  return (int)got;
}

/* Child opens `dev`; returns its pid and the write end that keeps it alive
 * (close it to let the child exit). */
static pid_t child_hold(int dev, int *keep_fd, int *child_rc) {
  int up[2], down[2];
  if (pipe2(up, O_CLOEXEC) != 0) return -1;
  if (pipe2(down, O_CLOEXEC) != 0) {
    close(up[0]);
    close(up[1]);
    return -1;
  }
  char mode[64];
  snprintf(mode, sizeof mode, "lock %d %d %d", dev, up[1], down[0]);
  pid_t pid = spawn_child(mode, NULL, up[1], down[0]);
  close(up[1]);
  close(down[0]);
  char buf[32];
  read_all(up[0], buf, sizeof buf);
  close(up[0]);
  *child_rc = atoi(buf);
  *keep_fd = down[1];
  return pid;
}

TPU_TEST(rt_chip_lock_across_processes) {
  int dev = -1;
  for (int d = tpurt_device_count() - 1; d >= 0; d--)
    if (!tpurt_device_is_open(d)) {
      dev = d;
      break;
    }
  if (dev < 0) {
    fprintf(stderr, "  (skipped: every device is already open in this process)\n");
    return;
  }
  int phys = tpurt_device_physical_id(dev);
  char pidstr[64];

  /* 1: child holds the chip, parent is refused with the child's pid */
  int keep, crc;
  pid_t c1 = child_hold(dev, &keep, &crc);
  CHECK(c1 > 0);
  CHECK(crc == TPU_OK);
  CHECK(tpurt_device_open(dev) == TPU_E_BUSY);
  snprintf(pidstr, sizeof pidstr, "(pid %d)", (int)c1);
  CHECK(strstr(tpu_last_error(), pidstr) != NULL);
  char chipstr[64];
  snprintf(chipstr, sizeof chipstr, "vTPU chip %d (tpu:%d) is held by another process", phys, dev);
  CHECK(strstr(tpu_last_error(), chipstr) != NULL);
  CHECK(strstr(tpu_last_error(), "TPU_VISIBLE_CHIPS") != NULL);
  CHECK(tpurt_device_is_open(dev) == 0);
  void *p = NULL;
  CHECK(tpurt_malloc(dev, 64, &p) == TPU_E_BUSY);
  CHECK(tpurt_default_stream(dev) == NULL);

  /* 2: the child crashes (SIGKILL): the kernel releases the lock, and a
   * second child can take it */
  kill(c1, SIGKILL);
  int status;
  waitpid(c1, &status, 0);
  close(keep);
  CHECK(WIFSIGNALED(status));
  pid_t c2 = child_hold(dev, &keep, &crc);
  CHECK(c2 > 0);
  CHECK(crc == TPU_OK);
  CHECK(tpurt_device_open(dev) == TPU_E_BUSY);
  snprintf(pidstr, sizeof pidstr, "(pid %d)", (int)c2);
  CHECK(strstr(tpu_last_error(), pidstr) != NULL);

  /* 3: the child exits normally; now the parent gets the chip */
  close(keep);
  waitpid(c2, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  CHECK_OK(tpurt_device_open(dev));
  CHECK(tpurt_device_is_open(dev) == 1);

  /* 4: and now a child is refused, naming us */
  pid_t c3 = child_hold(dev, &keep, &crc);
  CHECK(c3 > 0);
  close(keep);
  waitpid(c3, &status, 0);
  CHECK(crc == TPU_E_BUSY);
}

static int run_env_child(const char **extra, char *out, size_t len) {
  int up[2];
  if (pipe2(up, O_CLOEXEC) != 0) return -1;
  char mode[32];
  snprintf(mode, sizeof mode, "env %d", up[1]);
  pid_t pid = spawn_child(mode, extra, up[1], -1);
  close(up[1]);
  read_all(up[0], out, len);
  close(up[0]);
  int status;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TPU_TEST(rt_env_in_child) {
  char dir[600], lockenv[700], out[700];
  const char *ld = getenv("TORCH_TPU_LOCK_DIR");
  /* a fresh lock dir that does not exist yet: created on open */
  snprintf(dir, sizeof dir, "%s/envchild/sub", ld && *ld ? ld : "/tmp/torch_tpu_test_locks");
  snprintf(lockenv, sizeof lockenv, "TORCH_TPU_LOCK_DIR=%s", dir);

  const char *e1[] = {"TPU_VISIBLE_CHIPS=5,1", "TORCH_TPU_VTPU_CHIPS=8",
                      "TORCH_TPU_HBM_BYTES=3M", "TORCH_TPU_LAUNCH_BLOCKING=1", lockenv,
                      NULL};
  CHECK(run_env_child(e1, out, sizeof out) == 0);
  CHECK(strcmp(out, "2 0 3145728 1 -") == 0);
  char path[700];
  snprintf(path, sizeof path, "%s/vtpu_chip5.lock", dir);
  CHECK(access(path, F_OK) == 0); /* physical chip 5 was locked */
  struct stat sb;
  CHECK(stat(dir, &sb) == 0 && (sb.st_mode & 0777) == 0777); /* created shared */

  const char *e2[] = {"TPU_VISIBLE_CHIPS=1,x", "TORCH_TPU_LAUNCH_BLOCKING=0", lockenv, NULL};
  CHECK(run_env_child(e2, out, sizeof out) == 0);
  CHECK(strncmp(out, "0 -1 0 0 ", 9) == 0);
  CHECK(strstr(out, "TPU_VISIBLE_CHIPS='1,x' is invalid") != NULL);

  const char *e3[] = {"TPU_VISIBLE_CHIPS=", "TORCH_TPU_LAUNCH_BLOCKING=0", lockenv, NULL};
  CHECK(run_env_child(e3, out, sizeof out) == 0);
  CHECK(strncmp(out, "0 -1 0 0 ", 9) == 0);

  /* defaults: 4 chips, 16 GiB, a bad HBM value is ignored */
  const char *e4[] = {"TORCH_TPU_HBM_BYTES=bogus", "TORCH_TPU_VTPU_CHIPS=",
                      "TPU_VISIBLE_CHIPS=0,1,2,3", "TORCH_TPU_LAUNCH_BLOCKING=0", lockenv,
                      NULL};
  CHECK(run_env_child(e4, out, sizeof out) == 0);
  CHECK(strcmp(out, "4 0 17179869184 0 -") == 0);
}

/* A plain fork() child of a process that has opened a chip: it must not
 * keep the parent's lock alive, must see the chip as taken by the parent,
 * must not hang on the parent's streams, and the pool still works. */
static void fork_sum(void *ctx, int64_t b, int64_t e) {
  int64_t s = 0;
  for (int64_t i = b; i < e; i++) s += i;
  atomic_fetch_add((_Atomic int64_t *)ctx, s);
}

TPU_TEST(rt_fork_child_does_not_inherit_chip) {
  CHECK_OK(tpurt_device_open(0));
  tpurt_stream *s = tpurt_default_stream(0);
  CHECK(s);
  _Atomic int64_t sum0 = 0;
  tpurt_parallel_for(100000, 100, fork_sum, &sum0); /* pool threads exist */
  pid_t pid = fork();
  if (pid == 0) {
    int code = 0;
    if (tpurt_device_is_open(0) != 0) code |= 1;
    if (tpurt_device_open(0) != TPU_E_BUSY) code |= 2;
    char want[64];
    snprintf(want, sizeof want, "(pid %d)", (int)getppid());
    if (!strstr(tpu_last_error(), want)) code |= 4;
    if (tpurt_stream_enqueue(s, count_task, NULL, NULL) == TPU_OK) code |= 8;
    if (tpurt_default_stream(0) != NULL) code |= 16;
    _Atomic int64_t sum = 0;
    tpurt_parallel_for(100000, 100, fork_sum, &sum);
    if (atomic_load(&sum) != (int64_t)100000 * 99999 / 2) code |= 32;
    _exit(code);
  }
  CHECK(pid > 0);
  int status;
  waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status));
  if (WEXITSTATUS(status)) fprintf(stderr, "  child code %d\n", WEXITSTATUS(status));
  CHECK(WEXITSTATUS(status) == 0);
  /* the parent still holds the chip */
  int keep, crc;
  pid_t c = child_hold(0, &keep, &crc);
  CHECK(c > 0);
  close(keep);
  waitpid(c, &status, 0);
  CHECK(crc == TPU_E_BUSY);
  CHECK(tpurt_device_is_open(0) == 1);
  _Atomic int count = 0;
  CHECK_OK(tpurt_stream_enqueue(s, count_task, NULL, &count));
  CHECK_OK(tpurt_stream_synchronize(s));
  CHECK(atomic_load(&count) == 1);
}

/* Past RT_MAX_STREAMS streams per chip, creation hands out the existing
 * non-default streams round-robin (consecutive creates stay distinct). */
TPU_TEST(rt_stream_create_round_robin) {
  int dev = 0;
  tpurt_stream *d = tpurt_default_stream(dev);
  CHECK(d);
  tpurt_stream *prev = NULL;
  int seen[RT_MAX_STREAMS] = {0};
  for (int i = 0; i < 2 * RT_MAX_STREAMS; i++) {
    tpurt_stream *s = tpurt_stream_create(dev);
    CHECK(s && s != d && s != prev);
    int id = tpurt_stream_id(s);
    CHECK(id >= 1 && id < RT_MAX_STREAMS);
    CHECK(tpurt_stream_get(dev, id) == s);
    seen[id] = 1;
    prev = s;
  }
  for (int id = 1; id < RT_MAX_STREAMS; id++) CHECK(seen[id]);
  /* the streams still work */
  _Atomic int count = 0;
  CHECK_OK(tpurt_stream_enqueue(prev, count_task, NULL, &count));
  CHECK_OK(tpurt_device_synchronize(dev));
  CHECK(atomic_load(&count) == 1);
}

static int slow_run(void *ctx) {
  struct timespec ts = {0, 200 * 1000};
  nanosleep(&ts, NULL);
  atomic_fetch_add((_Atomic int *)ctx, 1);
  return TPU_OK;
}

TPU_TEST(rt_stream_throttle) {
  /* the host blocks while more than max_pending tasks are pending */
  tpurt_stream *s = tpurt_stream_create(0);
  CHECK(s);
  _Atomic int ran = 0;
  for (int i = 0; i < 40; i++) {
    CHECK_OK(tpurt_stream_enqueue(s, slow_run, NULL, (void *)&ran));
    tpurt_stream_throttle(s, 3);
    CHECK(i + 1 - atomic_load(&ran) <= 3);
  }
  tpurt_stream_throttle(s, 0); /* 0: wait for all */
  CHECK(atomic_load(&ran) == 40);
  tpurt_stream_throttle(NULL, 0);
  CHECK_OK(tpurt_stream_synchronize(s));
}

/* A task that keeps the worker busy for ~us microseconds (no sleep). */
static int spin_us(void *ctx) {
  long us = (long)(intptr_t)ctx;
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  do clock_gettime(CLOCK_MONOTONIC, &b);
  while ((b.tv_sec - a.tv_sec) * 1000000L + (b.tv_nsec - a.tv_nsec) / 1000 < us);
  return TPU_OK;
}

/* Times the calling thread went to sleep (voluntary context switches). */
static long sleeps(void) {
  struct rusage ru;
  getrusage(RUSAGE_THREAD, &ru);
  return ru.ru_nvcsw;
}

typedef struct waiter {
  tpurt_stream *s;
  uint64_t ticket, seen; /* seen: `done` when the wait returned */
  _Atomic int back;
} waiter;

static void *waiter_main(void *arg) {
  waiter *w = arg;
  tpurt__stream_wait_completed(tpurt_stream_device(w->s), tpurt_stream_id(w->s), w->ticket);
  w->seen = tpurt__stream_completed(tpurt_stream_device(w->s), tpurt_stream_id(w->s));
  atomic_store(&w->back, 1);
  return NULL;
}

TPU_TEST(rt_stream_waiters_woken_when_due) {
  /* a synchronize behind a long queue sleeps once: the worker wakes it when
   * its ticket is reached, not after every task (each wake took a core
   * from the work being waited for) */
  tpurt_stream *s = tpurt_stream_create(0);
  CHECK(s);
  for (int i = 0; i < 400; i++) CHECK_OK(tpurt_stream_enqueue(s, spin_us, NULL, (void *)(intptr_t)25));
  long z = sleeps();
  CHECK_OK(tpurt_stream_synchronize(s));
  long n = sleeps() - z;
  CHECK(n < 40); /* one per task (~400) before */
  /* throttling: one sleep per half queue, not one per task */
  z = sleeps();
  for (int i = 0; i < 1000; i++) {
    CHECK_OK(tpurt_stream_enqueue(s, spin_us, NULL, (void *)(intptr_t)5));
    tpurt_stream_throttle(s, 64);
    uint64_t e = tpurt__stream_enqueued(0, tpurt_stream_id(s));
    CHECK(e - tpurt__stream_completed(0, tpurt_stream_id(s)) <= 64);
  }
  n = sleeps() - z;
  CHECK(n < 200); /* ~1000 - 64 before */
  CHECK_OK(tpurt_stream_synchronize(s));
  /* waiters with different tickets: each wakes once its own is reached */
  uint64_t base = tpurt__stream_enqueued(0, tpurt_stream_id(s));
  for (int i = 0; i < 300; i++) CHECK_OK(tpurt_stream_enqueue(s, spin_us, NULL, (void *)(intptr_t)20));
  waiter w[3];
  pthread_t th[3];
  for (int k = 0; k < 3; k++) {
    w[k] = (waiter){s, base + 100 * (uint64_t)(3 - k), 0, 0}; /* 300, 200, 100 */
    CHECK(pthread_create(&th[k], NULL, waiter_main, &w[k]) == 0);
  }
  CHECK_OK(tpurt_stream_synchronize(s));
  for (int k = 0; k < 3; k++) {
    for (int ms = 0; ms < 10000 && !atomic_load(&w[k].back); ms++) {
      struct timespec ts = {0, 1000 * 1000};
      nanosleep(&ts, NULL);
    }
    CHECK(atomic_load(&w[k].back)); /* else a waiter was never woken */
    if (atomic_load(&w[k].back)) {
      pthread_join(th[k], NULL);
      CHECK(w[k].seen >= w[k].ticket);
    }
  }
}

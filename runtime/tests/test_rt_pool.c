/* test_rt_pool.c - tests of the kernel thread pool (tpurt_parallel_for). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "tpu_rt.h"
#include "tpu_test.h"

typedef struct {
  _Atomic int *hits; /* one counter per index */
  int64_t grain, n;
  _Atomic int bad_chunk;
  _Atomic int nested_ok;
} pf_ctx;

static void pf_mark(void *vctx, int64_t b, int64_t e) {
  pf_ctx *c = vctx;
  if (e <= b || b < 0 || e > c->n) atomic_store(&c->bad_chunk, 1);
  /* every chunk but the last is >= grain */
  if (e != c->n && e - b < c->grain) atomic_store(&c->bad_chunk, 1);
  for (int64_t i = b; i < e; i++) atomic_fetch_add(&c->hits[i], 1);
}

static int check_all_once(_Atomic int *hits, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    if (atomic_load(&hits[i]) != 1) return 0;
  return 1;
}

TPU_TEST(rt_pool_cover_once) {
  CHECK(tpurt_num_threads() >= 1);
  static const int64_t ns[] = {0, 1, 5, 63, 64, 65, 1000, 4097, 100003};
  static const int64_t grains[] = {1, 7, 64, 1000, 1 << 20};
  for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
    for (size_t g = 0; g < sizeof grains / sizeof grains[0]; g++) {
      int64_t n = ns[a];
      _Atomic int *hits = calloc((size_t)n + 1, sizeof *hits);
      pf_ctx c = {.hits = hits, .grain = grains[g], .n = n};
      tpurt_parallel_for(n, grains[g], pf_mark, &c);
      int ok = check_all_once(hits, n) && !atomic_load(&c.bad_chunk);
      free(hits);
      CHECK(ok);
    }
}

/* nested: each outer chunk runs an inner parallel_for (runs inline) */
typedef struct {
  _Atomic int *hits;
  int64_t inner;
} nest_ctx;
typedef struct {
  _Atomic int *row;
} nest_inner_ctx;
static void nest_inner(void *v, int64_t b, int64_t e) {
  nest_inner_ctx *c = v;
  for (int64_t i = b; i < e; i++) atomic_fetch_add(&c->row[i], 1);
}
static void nest_outer(void *v, int64_t b, int64_t e) {
  nest_ctx *c = v;
  for (int64_t r = b; r < e; r++) {
    nest_inner_ctx ic = {.row = c->hits + r * c->inner};
    tpurt_parallel_for(c->inner, 3, nest_inner, &ic);
  }
}

TPU_TEST(rt_pool_nested) {
  int64_t rows = 37, inner = 101;
  _Atomic int *hits = calloc((size_t)(rows * inner), sizeof *hits);
  nest_ctx c = {.hits = hits, .inner = inner};
  tpurt_parallel_for(rows, 1, nest_outer, &c);
  int ok = check_all_once(hits, rows * inner);
  free(hits);
  CHECK(ok);
}

/* many threads calling parallel_for at once, each checking its own sums */
typedef struct {
  int seed;
  int ok;
} caller_arg;
typedef struct {
  const int64_t *x;
  _Atomic int64_t sum;
} sum_ctx;
static void sum_fn(void *v, int64_t b, int64_t e) {
  sum_ctx *c = v;
  int64_t s = 0;
  for (int64_t i = b; i < e; i++) s += c->x[i];
  atomic_fetch_add(&c->sum, s);
}
static void *caller_main(void *v) {
  caller_arg *a = v;
  a->ok = 1;
  unsigned st = (unsigned)a->seed * 2654435761u + 1;
  for (int it = 0; it < 200; it++) {
    st = st * 1103515245u + 12345u;
    int64_t n = 1 + (st >> 8) % 5000;
    int64_t *x = malloc((size_t)n * sizeof *x);
    int64_t ref = 0;
    for (int64_t i = 0; i < n; i++) {
      x[i] = (int64_t)((i * 31 + a->seed * 7 + it) % 1009) - 500;
      ref += x[i];
    }
    sum_ctx c = {.x = x};
    tpurt_parallel_for(n, 1 + (int64_t)((st >> 4) % 64), sum_fn, &c);
    if (atomic_load(&c.sum) != ref) a->ok = 0;
    free(x);
  }
  return NULL;
}

TPU_TEST(rt_pool_concurrent_callers) {
  enum { NT = 8 };
  pthread_t t[NT];
  caller_arg a[NT];
  for (int i = 0; i < NT; i++) {
    a[i].seed = i + 1;
    CHECK(pthread_create(&t[i], NULL, caller_main, &a[i]) == 0);
  }
  int ok = 1;
  for (int i = 0; i < NT; i++) {
    pthread_join(t[i], NULL);
    ok &= a[i].ok;
  }
  CHECK(ok);
}

TPU_TEST(rt_pool_set_threads) {
  int orig = tpurt_num_threads();
  tpurt_set_num_threads(3);
  CHECK(tpurt_num_threads() == 3);
  int64_t n = 10000;
  _Atomic int *hits = calloc((size_t)n, sizeof *hits);
  pf_ctx c = {.hits = hits, .grain = 10, .n = n};
  tpurt_parallel_for(n, 10, pf_mark, &c);
  int ok = check_all_once(hits, n);
  tpurt_set_num_threads(1);
  CHECK(tpurt_num_threads() == 1);
  memset(hits, 0, (size_t)n * sizeof *hits);
  tpurt_parallel_for(n, 10, pf_mark, &c);
  ok &= check_all_once(hits, n);
  tpurt_set_num_threads(orig);
  free(hits);
  CHECK(ok && !atomic_load(&c.bad_chunk));
  CHECK(tpurt_num_threads() == orig);
}

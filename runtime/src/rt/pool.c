/* rt/pool.c - the kernel thread pool behind tpurt_parallel_for.
 *
 * One persistent pool per process: (TORCH_TPU_NUM_THREADS or the CPUs this
 * process may run on) - 1 worker threads, plus the caller, which always
 * participates. One parallel region owns the workers at a time (an atomic
 * "busy" flag taken with a single exchange); a concurrent caller from
 * another thread that finds the pool busy runs its range inline (serially),
 * and calls from inside fn (on the caller or on a worker) run inline too.
 *
 * A region is published through one 64-bit word `g_join`:
 *   bits 63..32  region generation
 *   bit  31      closed (no new workers may join)
 *   bits 30..0   number of workers currently inside the region
 * Workers join with a CAS (only while open and of the current generation),
 * claim chunks with fetch_add on `g_next`, and leave with fetch_sub. The
 * caller, once no chunk is left, closes the region and waits until the
 * joined count drops to 0, so the job fields below are never read after the
 * caller returns. Sleeping uses futexes with a short spin first; wake-ups
 * are only issued when somebody sleeps.
 *
 * Fork: a child has no workers; the caller then runs every chunk itself.
 */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "tpu_rt.h"

#define POOL_MAX_THREADS 512
#define POOL_SPIN 4000          /* pause iterations before sleeping */
#define POOL_CHUNKS_PER_THREAD 4 /* load balancing granularity */

#define JOIN_CLOSED ((uint64_t)1 << 31)
#define JOIN_COUNT_MASK (JOIN_CLOSED - 1)

/* ---- job state (written by the region owner while it holds g_busy) ---- */
static tpurt_range_fn g_fn;
static void *g_ctx;
static int64_t g_n, g_chunk, g_nchunks;
static _Atomic int64_t g_next;       /* next chunk to claim */
static _Atomic uint64_t g_join;      /* generation | closed | count */
static _Atomic uint32_t g_wake_seq;  /* futex: bumped per region */
static _Atomic uint32_t g_done_seq;  /* futex: bumped when the last worker leaves */
static _Atomic int g_sleepers;       /* workers sleeping on g_wake_seq */
static _Atomic int g_busy;           /* 1 while a region owns the workers */

/* ---- pool shape ------------------------------------------------------- */
static _Atomic int g_active_workers; /* workers allowed to join (threads-1) */
static int g_spawned;                /* worker threads created (under g_spawn_mu) */
static pthread_mutex_t g_spawn_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* 1 on pool workers (always) and on a caller while it runs a region. */
static _Thread_local int tl_in_region;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

static void futex_wait(_Atomic uint32_t *addr, uint32_t val) {
  syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}
static void futex_wake(_Atomic uint32_t *addr, int n) {
  syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}

/* Run chunks of the current region until none is left. */
static void run_chunks(void) {
  for (;;) {
    int64_t c = atomic_fetch_add_explicit(&g_next, 1, memory_order_relaxed);
    if (c >= g_nchunks) return;
    int64_t b = c * g_chunk;
    int64_t e = b + g_chunk < g_n ? b + g_chunk : g_n;
    g_fn(g_ctx, b, e);
  }
}

/* Try to enter the region of generation `gen`; 1 on success. */
static int worker_join(uint64_t *state) {
  uint64_t s = atomic_load_explicit(&g_join, memory_order_acquire);
  for (;;) {
    if ((s & JOIN_CLOSED) || (s >> 32) == 0) return 0;
    if ((s & JOIN_COUNT_MASK) == JOIN_COUNT_MASK) return 0;
    if (atomic_compare_exchange_weak_explicit(&g_join, &s, s + 1,
                                              memory_order_acq_rel,
                                              memory_order_acquire)) {
      *state = s + 1;
      return 1;
    }
  }
}

static void worker_leave(void) {
  uint64_t prev = atomic_fetch_sub_explicit(&g_join, 1, memory_order_acq_rel);
  if ((prev & JOIN_COUNT_MASK) == 1 && (prev & JOIN_CLOSED)) {
    atomic_fetch_add_explicit(&g_done_seq, 1, memory_order_release);
    futex_wake(&g_done_seq, 1);
  }
}

static void *worker_main(void *arg) {
  int idx = (int)(intptr_t)arg;
  tl_in_region = 1; /* nested parallel_for inside fn runs inline */
  char name[16];
  snprintf(name, sizeof name, "tpu-pool%d", idx % 10000);
  pthread_setname_np(pthread_self(), name);
  uint64_t last_gen = 0;
  for (;;) {
    uint32_t seen = atomic_load_explicit(&g_wake_seq, memory_order_acquire);
    uint64_t st;
    if (idx < atomic_load_explicit(&g_active_workers, memory_order_relaxed) &&
        (atomic_load_explicit(&g_join, memory_order_acquire) >> 32) != last_gen &&
        worker_join(&st)) {
      last_gen = st >> 32;
      run_chunks();
      worker_leave();
    }
    /* wait for the next region */
    int spins = 0;
    while (atomic_load_explicit(&g_wake_seq, memory_order_acquire) == seen) {
      if (spins < POOL_SPIN) {
        cpu_relax();
        spins++;
        continue;
      }
      atomic_fetch_add(&g_sleepers, 1);
      if (atomic_load(&g_wake_seq) == seen) futex_wait(&g_wake_seq, seen);
      atomic_fetch_sub(&g_sleepers, 1);
    }
  }
  return NULL;
}

/* Create workers up to `nworkers` (caller holds g_spawn_mu). */
static void spawn_locked(int nworkers) {
  while (g_spawned < nworkers) {
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&t, &attr, worker_main, (void *)(intptr_t)g_spawned);
    pthread_attr_destroy(&attr);
    if (rc != 0) break;
    g_spawned++;
  }
  atomic_store(&g_active_workers, nworkers < g_spawned ? nworkers : g_spawned);
}

static int default_threads(void) {
  const char *e = getenv("TORCH_TPU_NUM_THREADS");
  if (e && *e) {
    char *end;
    long v = strtol(e, &end, 10);
    if (*end == 0 && v >= 1) return v > POOL_MAX_THREADS ? POOL_MAX_THREADS : (int)v;
  }
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    int c = CPU_COUNT(&set);
    if (c >= 1 && (n < 1 || c < n)) n = c;
  }
  if (n < 1) n = 1;
  return n > POOL_MAX_THREADS ? POOL_MAX_THREADS : (int)n;
}

static void pool_init(void) {
  int n = tpurt_default_num_threads(); /* the environment read once */
  pthread_mutex_lock(&g_spawn_mu);
  spawn_locked(n - 1);
  pthread_mutex_unlock(&g_spawn_mu);
}

/* Runs fn over [0, n) in chunks of >= grain items on the pool; blocks until
 * every chunk has run. See tpu_rt.h. */
void tpurt_parallel_for(int64_t n, int64_t grain, tpurt_range_fn fn, void *ctx) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  if (n <= grain || tl_in_region) {
    fn(ctx, 0, n);
    return;
  }
  pthread_once(&g_once, pool_init);
  int nthreads = atomic_load_explicit(&g_active_workers, memory_order_relaxed) + 1;
  /* floor(n / grain) chunks, so every chunk has >= grain items */
  int64_t nchunks = n / grain;
  int64_t maxchunks = (int64_t)nthreads * POOL_CHUNKS_PER_THREAD;
  if (nchunks > maxchunks) nchunks = maxchunks;
  if (nthreads <= 1 || nchunks <= 1 ||
      atomic_exchange_explicit(&g_busy, 1, memory_order_acquire)) {
    /* single thread, or another region owns the workers: run serially */
    tl_in_region = 1;
    fn(ctx, 0, n);
    tl_in_region = 0;
    return;
  }
  int64_t chunk = (n + nchunks - 1) / nchunks;
  nchunks = (n + chunk - 1) / chunk;

  g_fn = fn;
  g_ctx = ctx;
  g_n = n;
  g_chunk = chunk;
  g_nchunks = nchunks;
  atomic_store_explicit(&g_next, 0, memory_order_relaxed);
  /* publish: new generation, open, count 0 (count is 0 here: the previous
   * region waited for it) */
  uint64_t gen = (atomic_load_explicit(&g_join, memory_order_relaxed) >> 32) + 1;
  if ((gen & 0xffffffffu) == 0) gen = 1;
  atomic_store_explicit(&g_join, gen << 32, memory_order_release);
  atomic_fetch_add(&g_wake_seq, 1); /* seq_cst: pairs with the sleepers check */
  if (atomic_load(&g_sleepers) > 0) {
    int want = nchunks - 1 < nthreads - 1 ? (int)(nchunks - 1) : nthreads - 1;
    futex_wake(&g_wake_seq, want);
  }

  tl_in_region = 1;
  run_chunks();
  tl_in_region = 0;

  /* close, then wait for workers still inside */
  uint64_t s = atomic_fetch_or_explicit(&g_join, JOIN_CLOSED, memory_order_acq_rel);
  if (s & JOIN_COUNT_MASK) {
    int spins = 0;
    for (;;) {
      uint32_t d = atomic_load_explicit(&g_done_seq, memory_order_acquire);
      if ((atomic_load_explicit(&g_join, memory_order_acquire) & JOIN_COUNT_MASK) == 0)
        break;
      if (spins < POOL_SPIN) {
        cpu_relax();
        spins++;
        continue;
      }
      futex_wait(&g_done_seq, d);
    }
  }
  atomic_store_explicit(&g_busy, 0, memory_order_release);
}

/* Threads the pool uses, including the calling thread (>= 1). */
int tpurt_num_threads(void) {
  pthread_once(&g_once, pool_init);
  return atomic_load(&g_active_workers) + 1;
}

static pthread_once_t g_default_once = PTHREAD_ONCE_INIT;
static int g_default_threads; /* set once (g_default_once) */
static void default_init(void) { g_default_threads = default_threads(); }

int tpurt_default_num_threads(void) {
  pthread_once(&g_default_once, default_init);
  return g_default_threads;
}

/* Resize the pool to `n` threads including the caller (values < 1 mean 1).
 * Threads are created on demand and never destroyed; surplus ones idle. */
void tpurt_set_num_threads(int n) {
  pthread_once(&g_once, pool_init);
  if (n < 1) n = 1;
  if (n > POOL_MAX_THREADS) n = POOL_MAX_THREADS;
  pthread_mutex_lock(&g_spawn_mu);
  spawn_locked(n - 1);
  pthread_mutex_unlock(&g_spawn_mu);
}

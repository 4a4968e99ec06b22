/* rt/stream.c - streams (in-order async task queues, one worker thread each),
 * launch-blocking mode and events.
 *
 * Each stream has a ring buffer of tasks, an `enq` counter (tasks ever
 * enqueued) and a `done` counter (tasks finished, cleanup included); both
 * only grow and are read lock-free by the allocator (stream-ordered free).
 * The worker thread is created on the first enqueue and detached: it sleeps
 * on a condition variable when idle, so process exit never waits for it.
 * Streams are owned by the runtime and live until exit. A chip has at most
 * RT_MAX_STREAMS streams; past that, tpurt_stream_create hands out the
 * existing non-default streams round-robin (like CUDA's stream pool).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rt/internal.h"
#include "tpu_rt.h"

#define RT_MSG_LEN 1024
#define RT_SPIN 4000 /* pause iterations (~tens of us) before sleeping */

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/* Spin briefly until `*ctr >= target`; 1 if reached. Cheap hand-offs
 * without a futex round trip when the other side is quick. */
static int spin_until(_Atomic uint64_t *ctr, uint64_t target) {
  for (int i = 0; i < RT_SPIN; i++) {
    if (atomic_load_explicit(ctr, memory_order_acquire) >= target) return 1;
    cpu_relax();
  }
  return atomic_load_explicit(ctr, memory_order_acquire) >= target;
}

typedef struct rt_blocking_result {
  int status;
  char msg[RT_MSG_LEN];
} rt_blocking_result;

typedef struct rt_task {
  tpurt_task_fn run;
  tpurt_cleanup_fn cleanup;
  void *ctx;
  rt_blocking_result *br; /* launch-blocking: status goes here, not sticky */
} rt_task;

struct tpurt_stream {
  int dev, id;
  pthread_mutex_t mu;
  pthread_cond_t cv_work; /* worker waits for tasks */
  pthread_cond_t cv_done; /* synchronizers wait for `done` */
  rt_task *ring;
  size_t cap, head, len;
  /* written under mu, read lock-free; own cache lines (spinning readers) */
  _Alignas(64) _Atomic uint64_t enq;
  _Alignas(64) _Atomic uint64_t done;
  _Alignas(64) int pad_;
  int waiters;                /* threads waiting on cv_done */
  uint64_t wake_at;           /* smallest `done` a waiter needs (UINT64_MAX: none) */
  int worker_idle;            /* worker is waiting on cv_work */
  int started;                /* worker thread exists */
  int err_code;               /* sticky error (first one wins) */
  char err_msg[RT_MSG_LEN];
};

typedef struct rt_chip_streams {
  tpurt_stream *_Atomic s[RT_MAX_STREAMS];
  _Atomic int count;
  int rr; /* round-robin cursor once full (under g_create_mu) */
} rt_chip_streams;

static rt_chip_streams g_cs[RT_MAX_CHIPS];
static pthread_mutex_t g_create_mu = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local tpurt_stream *tl_worker;
static _Atomic int g_launch_blocking = -1; /* -1: take the env default */

/* ---- launch-blocking ------------------------------------------------- */

/* Turn launch-blocking (every enqueue waits for its task) on or off. */
void tpurt_set_launch_blocking(int on) {
  atomic_store(&g_launch_blocking, on ? 1 : 0);
}

/* 1 if launch-blocking is on (default: TORCH_TPU_LAUNCH_BLOCKING=1). */
int tpurt_get_launch_blocking(void) {
  int v = atomic_load(&g_launch_blocking);
  return v < 0 ? tpurt__env_get()->launch_blocking : v;
}

/* ---- stream table ---------------------------------------------------- */

static tpurt_stream *stream_new(int dev, int id) {
  tpurt_stream *s = aligned_alloc(64, (sizeof *s + 63) & ~(size_t)63);
  if (!s) return NULL;
  memset(s, 0, sizeof *s);
  s->dev = dev;
  s->id = id;
  s->wake_at = UINT64_MAX;
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv_work, NULL);
  pthread_cond_init(&s->cv_done, NULL);
  return s;
}

static tpurt_stream *table_get(int dev, int id) {
  if (dev < 0 || dev >= RT_MAX_CHIPS || id < 0 || id >= RT_MAX_STREAMS) return NULL;
  return atomic_load_explicit(&g_cs[dev].s[id], memory_order_acquire);
}

/* Create stream `id` of `dev` if missing (g_create_mu held). */
static tpurt_stream *table_add_locked(int dev, int id) {
  tpurt_stream *s = atomic_load_explicit(&g_cs[dev].s[id], memory_order_relaxed);
  if (s) return s;
  s = stream_new(dev, id);
  if (!s) return NULL;
  atomic_store_explicit(&g_cs[dev].s[id], s, memory_order_release);
  if (atomic_load(&g_cs[dev].count) <= id) atomic_store(&g_cs[dev].count, id + 1);
  return s;
}

/* Default stream (id 0) of `dev`; opens the device. Borrowed; NULL on error. */
tpurt_stream *tpurt_default_stream(int dev) {
  tpurt_stream *s = table_get(dev, 0);
  if (s && tpurt_device_is_open(dev)) return s;
  if (tpurt_device_open(dev) != TPU_OK) return NULL;
  pthread_mutex_lock(&g_create_mu);
  s = table_add_locked(dev, 0);
  pthread_mutex_unlock(&g_create_mu);
  if (!s) tpu_error(TPU_E_INTERNAL, "out of host memory creating a stream");
  return s;
}

/* New stream on `dev` (ids 1, 2, ...; round-robin reuse past
 * RT_MAX_STREAMS). Borrowed, lives until exit; NULL on error. */
tpurt_stream *tpurt_stream_create(int dev) {
  if (!tpurt_default_stream(dev)) return NULL;
  pthread_mutex_lock(&g_create_mu);
  int n = atomic_load(&g_cs[dev].count);
  tpurt_stream *s;
  if (n < RT_MAX_STREAMS) {
    s = table_add_locked(dev, n);
  } else {
    s = table_get(dev, 1 + g_cs[dev].rr);
    g_cs[dev].rr = (g_cs[dev].rr + 1) % (RT_MAX_STREAMS - 1);
  }
  pthread_mutex_unlock(&g_create_mu);
  if (!s) tpu_error(TPU_E_INTERNAL, "out of host memory creating a stream");
  return s;
}

/* Device of a stream (-1 for NULL). */
int tpurt_stream_device(const tpurt_stream *s) { return s ? s->dev : -1; }
/* Id of a stream within its device (0 = default; -1 for NULL). */
int tpurt_stream_id(const tpurt_stream *s) { return s ? s->id : -1; }

/* Stream `id` of `dev`; id 0 yields the default stream (opening the
 * device). Borrowed; NULL if there is no such stream. */
tpurt_stream *tpurt_stream_get(int dev, int id) {
  if (dev < 0 || dev >= tpurt_device_count() || id < 0 || id >= RT_MAX_STREAMS)
    return NULL;
  if (id == 0) return tpurt_default_stream(dev);
  return table_get(dev, id);
}

/* ---- internal, for the allocator ------------------------------------- */

int tpurt__stream_count(int dev) {
  if (dev < 0 || dev >= RT_MAX_CHIPS) return 0;
  return atomic_load_explicit(&g_cs[dev].count, memory_order_acquire);
}

uint64_t tpurt__stream_enqueued(int dev, int sid) {
  tpurt_stream *s = table_get(dev, sid);
  return s ? atomic_load_explicit(&s->enq, memory_order_acquire) : 0;
}

uint64_t tpurt__stream_completed(int dev, int sid) {
  tpurt_stream *s = table_get(dev, sid);
  return s ? atomic_load_explicit(&s->done, memory_order_acquire) : 0;
}

/* Sleep until `ticket` tasks of s have finished (mu held). Each waiter
 * lowers wake_at to its ticket, so the worker wakes the waiters once the
 * first of them can go, not after every task (a synchronize behind a long
 * queue was woken and put back to sleep once per task, taking a core from
 * the work it waits for). */
static void wait_done_locked(tpurt_stream *s, uint64_t ticket) {
  s->waiters++;
  while (atomic_load_explicit(&s->done, memory_order_relaxed) < ticket) {
    if (ticket < s->wake_at) s->wake_at = ticket;
    pthread_cond_wait(&s->cv_done, &s->mu);
  }
  s->waiters--;
}

static void wait_done(tpurt_stream *s, uint64_t ticket) {
  pthread_mutex_lock(&s->mu);
  wait_done_locked(s, ticket);
  pthread_mutex_unlock(&s->mu);
}

void tpurt__stream_wait_completed(int dev, int sid, uint64_t ticket) {
  tpurt_stream *s = table_get(dev, sid);
  if (s && s != tl_worker) wait_done(s, ticket);
}

tpurt_stream *tpurt__current_worker_stream(void) { return tl_worker; }

/* ---- worker ----------------------------------------------------------- */

static void *worker_main(void *arg) {
  tpurt_stream *s = arg;
  tl_worker = s;
  char name[16];
  snprintf(name, sizeof name, "tpu%d-s%d", s->dev % 1000, s->id % 100);
  pthread_setname_np(pthread_self(), name);
  char msg[RT_MSG_LEN];
  pthread_mutex_lock(&s->mu);
  for (;;) {
    if (s->len == 0) { /* spin a little for the next task before sleeping */
      uint64_t d = atomic_load_explicit(&s->done, memory_order_relaxed);
      pthread_mutex_unlock(&s->mu);
      spin_until(&s->enq, d + 1);
      pthread_mutex_lock(&s->mu);
    }
    while (s->len == 0) {
      s->worker_idle = 1;
      pthread_cond_wait(&s->cv_work, &s->mu);
      s->worker_idle = 0;
    }
    rt_task t = s->ring[s->head];
    s->head = (s->head + 1) % s->cap;
    s->len--;
    pthread_mutex_unlock(&s->mu);

    tpu_clear_error();
    int rc = t.run ? t.run(t.ctx) : TPU_OK;
    if (rc != TPU_OK) {
      const char *m = tpu_last_error();
      if (m[0])
        snprintf(msg, sizeof msg, "%s", m);
      else
        snprintf(msg, sizeof msg, "a task on tpu:%d stream %d failed (%s)",
                 s->dev, s->id, tpu_status_name(rc));
    }
    if (t.cleanup) t.cleanup(t.ctx);

    pthread_mutex_lock(&s->mu);
    if (rc != TPU_OK) {
      if (t.br) {
        t.br->status = rc;
        memcpy(t.br->msg, msg, sizeof msg);
      } else if (s->err_code == TPU_OK) {
        s->err_code = rc;
        memcpy(s->err_msg, msg, sizeof msg);
      }
    } else if (t.br) {
      t.br->status = TPU_OK;
    }
    uint64_t done = atomic_load_explicit(&s->done, memory_order_relaxed) + 1;
    atomic_store_explicit(&s->done, done, memory_order_release);
    if (s->waiters && done >= s->wake_at) { /* woken waiters not done yet re-register */
      s->wake_at = UINT64_MAX;
      pthread_cond_broadcast(&s->cv_done);
    }
  }
  return NULL;
}

/* Enqueue (mu held). Returns the task's ticket (enq after it), or 0 on
 * failure with the error set. */
static uint64_t push_locked(tpurt_stream *s, const rt_task *t) {
  if (!s->started) {
    pthread_t th;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&th, &attr, worker_main, s);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
      tpu_error(TPU_E_INTERNAL, "cannot start the worker of tpu:%d stream %d", s->dev, s->id);
      return 0;
    }
    s->started = 1;
  }
  if (s->len == s->cap) {
    size_t ncap = s->cap ? s->cap * 2 : 64;
    rt_task *r = malloc(ncap * sizeof *r);
    if (!r) {
      tpu_error(TPU_E_INTERNAL, "out of host memory growing a stream queue");
      return 0;
    }
    for (size_t i = 0; i < s->len; i++) r[i] = s->ring[(s->head + i) % s->cap];
    free(s->ring);
    s->ring = r;
    s->cap = ncap;
    s->head = 0;
  }
  s->ring[(s->head + s->len) % s->cap] = *t;
  s->len++;
  uint64_t ticket = atomic_load_explicit(&s->enq, memory_order_relaxed) + 1;
  atomic_store_explicit(&s->enq, ticket, memory_order_release);
  if (s->worker_idle) pthread_cond_signal(&s->cv_work);
  return ticket;
}

/* Enqueue a task on `s` (see tpu_rt.h). Takes ownership of ctx. */
int tpurt_stream_enqueue(tpurt_stream *s, tpurt_task_fn run,
                         tpurt_cleanup_fn cleanup, void *ctx) {
  if (!s) {
    if (cleanup) cleanup(ctx);
    return tpu_error(TPU_E_INVALID, "tpurt_stream_enqueue: NULL stream");
  }
  if (!tpurt_device_is_open(s->dev)) { /* e.g. in a forked child */
    if (cleanup) cleanup(ctx);
    return tpu_error(TPU_E_INVALID,
                     "tpu:%d is not open in this process (streams do not survive fork)",
                     s->dev);
  }
  /* launch-blocking waits for the task, except when enqueued by a task of
   * the same stream (that would wait for itself) */
  int blocking = tpurt_get_launch_blocking() && tl_worker != s;
  rt_blocking_result br;
  rt_task t = {run, cleanup, ctx, blocking ? &br : NULL};
  br.status = TPU_OK;
  br.msg[0] = 0;
  pthread_mutex_lock(&s->mu);
  uint64_t ticket = push_locked(s, &t);
  if (ticket == 0) {
    pthread_mutex_unlock(&s->mu);
    char m[RT_MSG_LEN];
    snprintf(m, sizeof m, "%s", tpu_last_error());
    if (cleanup) cleanup(ctx);
    return tpu_error(TPU_E_INTERNAL, "%s", m);
  }
  if (!blocking) {
    pthread_mutex_unlock(&s->mu);
    return TPU_OK;
  }
  pthread_mutex_unlock(&s->mu);
  if (!spin_until(&s->done, ticket)) {
    wait_done(s, ticket);
  } else {
    /* pair with the worker's unlock after filling br */
    pthread_mutex_lock(&s->mu);
    pthread_mutex_unlock(&s->mu);
  }
  if (br.status != TPU_OK) return tpu_error(br.status, "%s", br.msg);
  return TPU_OK;
}

/* Wait for every task enqueued so far; returns and clears the sticky error. */
int tpurt_stream_synchronize(tpurt_stream *s) {
  if (!s) return tpu_error(TPU_E_INVALID, "tpurt_stream_synchronize: NULL stream");
  if (s == tl_worker)
    return tpu_error(TPU_E_INVALID,
                     "tpu:%d stream %d synchronized from one of its own tasks", s->dev,
                     s->id);
  char msg[RT_MSG_LEN];
  spin_until(&s->done, atomic_load_explicit(&s->enq, memory_order_acquire));
  pthread_mutex_lock(&s->mu);
  wait_done_locked(s, atomic_load_explicit(&s->enq, memory_order_relaxed));
  int code = s->err_code;
  if (code != TPU_OK) {
    memcpy(msg, s->err_msg, sizeof msg);
    s->err_code = TPU_OK;
    s->err_msg[0] = 0;
  }
  pthread_mutex_unlock(&s->mu);
  if (code != TPU_OK) return tpu_error(code, "%s", msg);
  return TPU_OK;
}

/* Past max_pending pending tasks, wait until at most half are (see
 * tpu_rt.h). */
void tpurt_stream_throttle(tpurt_stream *s, uint64_t max_pending) {
  if (!s || tl_worker) return;
  uint64_t e = atomic_load_explicit(&s->enq, memory_order_acquire);
  if (e <= max_pending) return;
  if (atomic_load_explicit(&s->done, memory_order_acquire) < e - max_pending)
    wait_done(s, e - max_pending / 2);
}

/* 1 if every task enqueued on `s` has finished. */
int tpurt_stream_query(tpurt_stream *s) {
  if (!s) return 1;
  uint64_t e = atomic_load_explicit(&s->enq, memory_order_acquire);
  return atomic_load_explicit(&s->done, memory_order_acquire) >= e;
}

/* Synchronize every stream of `dev`; the first error wins (all are
 * cleared). */
int tpurt_device_synchronize(int dev) {
  if (dev < 0 || dev >= tpurt_device_count())
    return tpu_error(TPU_E_INVALID, "invalid device tpu:%d (%d visible)", dev,
                     tpurt_device_count());
  int first = TPU_OK;
  char msg[RT_MSG_LEN] = {0};
  int n = tpurt__stream_count(dev);
  for (int i = 0; i < n; i++) {
    tpurt_stream *s = table_get(dev, i);
    if (!s) continue;
    int rc = tpurt_stream_synchronize(s);
    if (rc != TPU_OK && first == TPU_OK) {
      first = rc;
      snprintf(msg, sizeof msg, "%s", tpu_last_error());
    }
  }
  if (first != TPU_OK) return tpu_error(first, "%s", msg);
  return TPU_OK;
}

/* ---- events ----------------------------------------------------------- */

struct tpurt_event {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int refs;             /* user + pending record/wait tasks */
  int waiters;
  uint64_t rec_seq;     /* number of records so far */
  uint64_t done_seq;    /* == rec_seq when the latest record completed */
  uint64_t max_reached; /* highest record seq reached by a stream */
  struct timespec t;    /* time the latest record was reached */
};

typedef struct rt_event_task {
  tpurt_event *e;
  uint64_t seq;
  int ran;
} rt_event_task;

static void event_unref(tpurt_event *e) {
  pthread_mutex_lock(&e->mu);
  int r = --e->refs;
  pthread_mutex_unlock(&e->mu);
  if (r == 0) {
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    free(e);
  }
}

/* New event, never recorded (so complete). Caller destroys it. */
tpurt_event *tpurt_event_create(void) {
  tpurt_event *e = calloc(1, sizeof *e);
  if (!e) {
    tpu_error(TPU_E_INTERNAL, "out of host memory creating an event");
    return NULL;
  }
  pthread_mutex_init(&e->mu, NULL);
  pthread_cond_init(&e->cv, NULL);
  e->refs = 1;
  return e;
}

/* Drop the caller's reference; freed once no pending task uses it. */
void tpurt_event_destroy(tpurt_event *e) {
  if (e) event_unref(e);
}

static void event_reach(tpurt_event *e, uint64_t seq) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  pthread_mutex_lock(&e->mu);
  if (seq > e->max_reached) e->max_reached = seq;
  if (seq == e->rec_seq) {
    e->done_seq = seq;
    e->t = now;
  }
  if (e->waiters) pthread_cond_broadcast(&e->cv);
  pthread_mutex_unlock(&e->mu);
}

static int record_run(void *ctx) {
  rt_event_task *t = ctx;
  t->ran = 1;
  event_reach(t->e, t->seq);
  return TPU_OK;
}

static void event_task_cleanup(void *ctx) {
  rt_event_task *t = ctx;
  if (!t->ran) event_reach(t->e, t->seq); /* dropped: never leave waiters hanging */
  event_unref(t->e);
  free(t);
}

/* Record `e` on `s`: completes when `s` reaches this point. */
int tpurt_event_record(tpurt_event *e, tpurt_stream *s) {
  if (!e || !s) return tpu_error(TPU_E_INVALID, "tpurt_event_record: NULL argument");
  rt_event_task *t = malloc(sizeof *t);
  if (!t) return tpu_error(TPU_E_INTERNAL, "out of host memory recording an event");
  pthread_mutex_lock(&e->mu);
  t->e = e;
  t->seq = ++e->rec_seq;
  t->ran = 0;
  e->refs++;
  pthread_mutex_unlock(&e->mu);
  return tpurt_stream_enqueue(s, record_run, event_task_cleanup, t);
}

/* 1 if the latest record completed (or never recorded). */
int tpurt_event_query(tpurt_event *e) {
  if (!e) return 1;
  pthread_mutex_lock(&e->mu);
  int r = e->done_seq == e->rec_seq;
  pthread_mutex_unlock(&e->mu);
  return r;
}

/* Block until the record current at the call has been reached. */
int tpurt_event_synchronize(tpurt_event *e) {
  if (!e) return tpu_error(TPU_E_INVALID, "tpurt_event_synchronize: NULL event");
  pthread_mutex_lock(&e->mu);
  uint64_t target = e->rec_seq;
  e->waiters++;
  while (e->max_reached < target) pthread_cond_wait(&e->cv, &e->mu);
  e->waiters--;
  pthread_mutex_unlock(&e->mu);
  return TPU_OK;
}

static int wait_run(void *ctx) {
  rt_event_task *t = ctx;
  t->ran = 1;
  tpurt_event *e = t->e;
  pthread_mutex_lock(&e->mu);
  e->waiters++;
  while (e->max_reached < t->seq) pthread_cond_wait(&e->cv, &e->mu);
  e->waiters--;
  pthread_mutex_unlock(&e->mu);
  return TPU_OK;
}

static void wait_cleanup(void *ctx) {
  rt_event_task *t = ctx;
  event_unref(t->e);
  free(t);
}

/* Future work on `s` waits for the current record of `e`. */
int tpurt_stream_wait_event(tpurt_stream *s, tpurt_event *e) {
  if (!e || !s) return tpu_error(TPU_E_INVALID, "tpurt_stream_wait_event: NULL argument");
  pthread_mutex_lock(&e->mu);
  uint64_t target = e->rec_seq;
  if (target == 0 || e->max_reached >= target) {
    pthread_mutex_unlock(&e->mu);
    return TPU_OK; /* nothing to wait for */
  }
  rt_event_task *t = malloc(sizeof *t);
  if (!t) {
    pthread_mutex_unlock(&e->mu);
    return tpu_error(TPU_E_INTERNAL, "out of host memory in stream_wait_event");
  }
  t->e = e;
  t->seq = target;
  t->ran = 0;
  e->refs++;
  pthread_mutex_unlock(&e->mu);
  return tpurt_stream_enqueue(s, wait_run, wait_cleanup, t);
}

/* Milliseconds from `start` to `end` (both recorded and complete). */
int tpurt_event_elapsed_ms(tpurt_event *start, tpurt_event *end, double *ms) {
  if (!start || !end || !ms)
    return tpu_error(TPU_E_INVALID, "tpurt_event_elapsed_ms: NULL argument");
  struct timespec t[2];
  tpurt_event *ev[2] = {start, end};
  for (int i = 0; i < 2; i++) {
    pthread_mutex_lock(&ev[i]->mu);
    int recorded = ev[i]->rec_seq > 0;
    int ok = recorded && ev[i]->done_seq == ev[i]->rec_seq;
    t[i] = ev[i]->t;
    pthread_mutex_unlock(&ev[i]->mu);
    if (!ok)
      return tpu_error(TPU_E_INVALID, "event_elapsed_ms: %s event is %s",
                       i ? "end" : "start", recorded ? "not complete" : "not recorded");
  }
  *ms = (double)(t[1].tv_sec - t[0].tv_sec) * 1e3 +
        (double)(t[1].tv_nsec - t[0].tv_nsec) * 1e-6;
  return TPU_OK;
}

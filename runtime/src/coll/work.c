/* coll/work.c - collectives as stream tasks: a tpucoll_work per enqueued
 * collective, and one completion thread per communicator that runs the
 * caller's done-callbacks in issue order (never on a stream worker, so a
 * callback may enqueue more chip work). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll/internal.h"

struct tpucoll_work {
  tpucoll_comm *c;
  tpucoll_desc d;
  size_t *counts; /* all_to_all send + recv counts (owned copy) */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int ran, done, status;
  char msg[512];
  _Atomic int refs;
  tpucoll_done_fn fn;
  void *fn_ctx;
  struct tpucoll_work *next;
};

static void work_unref(tpucoll_work *w) {
  if (atomic_fetch_sub(&w->refs, 1) != 1) return;
  pthread_mutex_destroy(&w->mu);
  pthread_cond_destroy(&w->cv);
  free(w->counts);
  free(w);
}

static void *completion_main(void *arg) {
  tpucoll_comm *c = arg;
  pthread_mutex_lock(&c->mu);
  for (;;) {
    while (!c->done_head && !c->stop) pthread_cond_wait(&c->cv, &c->mu);
    tpucoll_work *w = c->done_head;
    if (!w) break; /* stop requested and queue empty */
    c->done_head = w->next;
    if (!c->done_head) c->done_tail = NULL;
    pthread_mutex_unlock(&c->mu);
    if (w->fn) w->fn(w->fn_ctx, w->status, w->status ? w->msg : "");
    work_unref(w);
    pthread_mutex_lock(&c->mu);
    c->finished++;
    pthread_cond_broadcast(&c->cv);
  }
  pthread_mutex_unlock(&c->mu);
  return NULL;
}

static int task_run(void *ctx) {
  tpucoll_work *w = ctx;
  int rc = tpucoll_run(w->c, &w->d);
  w->ran = 1;
  w->status = rc;
  if (rc) snprintf(w->msg, sizeof w->msg, "%s", tpu_last_error());
  tpu_clear_error();
  /* The failure is reported through the work (and the communicator is
   * aborted); the stream itself carries on. */
  return TPU_OK;
}

/* Runs once, after task_run or instead of it: publish and hand the work
 * to the completion thread. */
static void task_cleanup(void *ctx) {
  tpucoll_work *w = ctx;
  tpucoll_comm *c = w->c;
  if (!w->ran) {
    w->status = TPU_E_INTERNAL;
    snprintf(w->msg, sizeof w->msg, "tpu_dist: %s was dropped by its stream",
             tpucoll__kind_name(w->d.kind));
  }
  pthread_mutex_lock(&w->mu);
  w->done = 1;
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
  pthread_mutex_lock(&c->mu);
  w->next = NULL;
  if (c->done_tail) c->done_tail->next = w;
  else c->done_head = w;
  c->done_tail = w;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
}

int tpucoll_enqueue(tpucoll_comm *c, tpurt_stream *s, const tpucoll_desc *d,
                    tpucoll_done_fn done, void *done_ctx, tpucoll_work **out) {
  if (out) *out = NULL;
  if (!c || !s || !d) return tpu_error(TPU_E_INVALID, "tpu_dist: enqueue needs comm, stream, desc");
  tpucoll_work *w = calloc(1, sizeof *w);
  if (!w) return tpu_error(TPU_E_OOM, "tpu_dist: out of host memory");
  w->c = c;
  w->d = *d;
  w->fn = done;
  w->fn_ctx = done_ctx;
  pthread_mutex_init(&w->mu, NULL);
  pthread_cond_init(&w->cv, NULL);
  if (d->kind == TPUCOLL_ALL_TO_ALL) {
    w->counts = malloc(2 * (size_t)c->size * sizeof(size_t));
    if (!w->counts) {
      free(w);
      return tpu_error(TPU_E_OOM, "tpu_dist: out of host memory");
    }
    memcpy(w->counts, d->send_counts, (size_t)c->size * sizeof(size_t));
    memcpy(w->counts + c->size, d->recv_counts, (size_t)c->size * sizeof(size_t));
    w->d.send_counts = w->counts;
    w->d.recv_counts = w->counts + c->size;
  }
  atomic_store(&w->refs, out ? 2 : 1);
  pthread_mutex_lock(&c->mu);
  if (!c->thread_started) {
    if (pthread_create(&c->thread, NULL, completion_main, c) != 0) {
      pthread_mutex_unlock(&c->mu);
      free(w->counts);
      free(w);
      return tpu_error(TPU_E_INTERNAL, "tpu_dist: cannot start the completion thread");
    }
    c->thread_started = 1;
  }
  c->enqueued++;
  pthread_mutex_unlock(&c->mu);
  if (out) *out = w;
  /* cleanup runs even if the enqueue fails, completing the work */
  int rc = tpurt_stream_enqueue(s, task_run, task_cleanup, w);
  (void)rc; /* a task error is reported through the work, not here */
  tpu_clear_error();
  return TPU_OK;
}

int tpucoll_work_wait(tpucoll_work *w) {
  pthread_mutex_lock(&w->mu);
  while (!w->done) pthread_cond_wait(&w->cv, &w->mu);
  pthread_mutex_unlock(&w->mu);
  if (w->status) return tpu_error(w->status, "%s", w->msg);
  return TPU_OK;
}

int tpucoll_work_query(tpucoll_work *w) {
  pthread_mutex_lock(&w->mu);
  int d = w->done;
  pthread_mutex_unlock(&w->mu);
  return d;
}

void tpucoll_work_release(tpucoll_work *w) {
  if (w) work_unref(w);
}

void tpucoll_comm_drain(tpucoll_comm *c) {
  if (!c) return;
  pthread_mutex_lock(&c->mu);
  while (c->finished < c->enqueued) pthread_cond_wait(&c->cv, &c->mu);
  pthread_mutex_unlock(&c->mu);
}

int tpucoll_comm_idle(tpucoll_comm *c) {
  if (!c) return 1;
  pthread_mutex_lock(&c->mu);
  int idle = c->finished == c->enqueued;
  pthread_mutex_unlock(&c->mu);
  return idle;
}

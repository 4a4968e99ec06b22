/* graph/trace.c - the program trace behind the profiler: one event per
 * program the recorder runs (name from its IR ops, program key, device,
 * stream, start/end on the worker, bytes moved, dot FLOPs), kept in a
 * bounded buffer until drained.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "graph/internal.h"
#include "tpu_ir.h"

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int g_on;
static tpug_trace_event *g_buf; /* ring of TPUG_TRACE_CAP (allocated on enable) */
static size_t g_head, g_len;
static uint64_t g_dropped;

void tpug_trace_enable(int on) {
  pthread_mutex_lock(&g_mu);
  if (on && !g_buf) g_buf = malloc(sizeof *g_buf * TPUG_TRACE_CAP);
  g_head = g_len = 0;
  g_dropped = 0;
  atomic_store(&g_on, on && g_buf ? 1 : 0);
  pthread_mutex_unlock(&g_mu);
}

int tpug_trace_enabled(void) { return atomic_load(&g_on); }

int tpug_trace_drain(tpug_trace_event *out, int max, uint64_t *dropped) {
  pthread_mutex_lock(&g_mu);
  int n = 0;
  while (n < max && g_len > 0) {
    out[n++] = g_buf[g_head];
    g_head = (g_head + 1) % TPUG_TRACE_CAP;
    g_len--;
  }
  if (dropped) *dropped = g_dropped;
  pthread_mutex_unlock(&g_mu);
  return n;
}

void tpug__trace_push(const tpug_trace_event *ev) {
  pthread_mutex_lock(&g_mu);
  if (g_buf && atomic_load(&g_on)) {
    if (g_len == TPUG_TRACE_CAP) {
      g_dropped++;
    } else {
      g_buf[(g_head + g_len) % TPUG_TRACE_CAP] = *ev;
      g_len++;
    }
  }
  pthread_mutex_unlock(&g_mu);
}

int64_t tpug__trace_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int64_t numel(const tpuir_node *n) {
  int64_t e = 1;
  for (int i = 0; i < n->ndim; i++) e *= n->sizes[i];
  return e;
}

/* Append op to the name unless it is a bookkeeping node; "..." once full. */
static void add_name(char *name, size_t cap, int op) {
  if (op == TPUIR_PARAM || op == TPUIR_CONST) return;
  const char *s = tpuir_op_name(op);
  size_t len = strlen(name), need = strlen(s) + (len ? 1 : 0);
  if (len + need + 4 >= cap) {
    if (len + 4 < cap && strcmp(name + (len >= 3 ? len - 3 : 0), "...") != 0)
      strcat(name, "...");
    return;
  }
  if (len) strcat(name, "+");
  strcat(name, s);
}

void tpug__trace_describe(tpug_trace_event *ev, const tpuir_graph *const *graphs, int n) {
  ev->name[0] = 0;
  ev->nops = n;
  ev->flops = 0;
  for (int k = 0; k < n; k++) {
    const tpuir_graph *g = graphs[k];
    int nn = tpuir_num_nodes(g);
    for (int t = 0; t < nn; t++) {
      const tpuir_node *s = tpuir_get_node(g, t);
      add_name(ev->name, sizeof ev->name, s->op);
      if (s->op == TPUIR_DOT_GENERAL) {
        const tpuir_node *l = tpuir_get_node(g, s->in[0]);
        int64_t kk = 1;
        for (int i = 0; i < s->nb; i++) kk *= l->sizes[s->c[i]];
        ev->flops += (uint64_t)(2 * numel(s) * kk);
      }
    }
  }
  if (!ev->name[0]) snprintf(ev->name, sizeof ev->name, "copy");
}

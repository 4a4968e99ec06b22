/* exec/vtpu/profile.c - the vTPU executor's step profile (prefix tpux_):
 * when switched on, each plan run adds the wall time of each of its steps
 * (a node, a fused region, a dot with its epilogue, a region feeding a
 * reduction), of each output it copies (values not computed into their
 * destination: "(output copy) f32[64,64]") and of the whole run to a process-wide
 * table keyed by a label naming what ran ("dot_general bf16[8,8,256,64]",
 * "region 7 ops f32[2048,512]: mul,add,...", "reshape (copy) f32[768,64]"
 * for a view that had to materialise). Off by default: the cost when off
 * is one relaxed atomic load per run. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "exec/vtpu/internal.h"

#define PROF_SLOTS 1024 /* power of two; entries beyond it are dropped */

static atomic_int g_on;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static tpux_profile_entry g_tab[PROF_SLOTS]; /* guarded by g_mu */
static int g_n;                              /* guarded by g_mu */

void tpux_profile_enable(int on) { atomic_store_explicit(&g_on, on != 0, memory_order_relaxed); }

int tpux__profile_on(void) { return atomic_load_explicit(&g_on, memory_order_relaxed); }

double tpux__profile_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint32_t label_hash(const char *s) {
  uint32_t h = 2166136261u;
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 16777619u;
  return h;
}

void tpux__profile_add(const char *label, double seconds) {
  pthread_mutex_lock(&g_mu);
  for (uint32_t i = label_hash(label) & (PROF_SLOTS - 1), probes = 0; probes < PROF_SLOTS;
       i = (i + 1) & (PROF_SLOTS - 1), probes++) {
    tpux_profile_entry *e = &g_tab[i];
    if (e->count == 0) {
      if (g_n >= PROF_SLOTS * 3 / 4) break; /* keep probes short: drop new labels */
      snprintf(e->label, sizeof e->label, "%s", label);
      g_n++;
    } else if (strncmp(e->label, label, sizeof e->label - 1) != 0) {
      continue;
    }
    e->count++;
    e->seconds += seconds;
    break;
  }
  pthread_mutex_unlock(&g_mu);
}

/* "<dtype>[d0,d1,...]" of node t's result, appended at p (cap bytes left). */
static int shape_text(char *p, size_t cap, const tpuir_node *n) {
  int k = snprintf(p, cap, "%s[", tpu_dtype_name(n->dtype));
  for (int d = 0; d < n->ndim && k > 0 && (size_t)k < cap; d++)
    k += snprintf(p + k, cap - (size_t)k, d ? ",%lld" : "%lld", (long long)n->sizes[d]);
  if (k > 0 && (size_t)k < cap) k += snprintf(p + k, cap - (size_t)k, "]");
  return k;
}

void tpux__profile_step(const tpuir_graph *g, int kind, int t, int nm, const int32_t *members,
                        int copied, double seconds) {
  char lab[sizeof(((tpux_profile_entry *)0)->label)];
  size_t cap = sizeof lab;
  const tpuir_node *n = tpuir_get_node(g, t);
  int k;
  if (kind == XS_NODE)
    k = snprintf(lab, cap, "%s%s ", tpuir_op_name(n->op), copied ? " (copy)" : "");
  else if (kind == XS_CHECK)
    k = snprintf(lab, cap, "(index check) %s ", tpuir_op_name(n->op));
  else
    k = snprintf(lab, cap, "%s %d ops ",
                 kind == XS_DOT_EPI ? "dot+epilogue" : kind == XS_REGION_REDUCE ? "region+reduce"
                                                                                : "region",
                 nm);
  k += shape_text(lab + k, cap - (size_t)k, n);
  if (n->op == TPUIR_DOT_GENERAL && (size_t)k < cap) { /* the contracted size */
    int64_t kk = 1;
    for (int i = 0; i < n->nb; i++) kk *= tpuir_get_node(g, n->in[0])->sizes[n->c[i]];
    k += snprintf(lab + k, cap - (size_t)k, " k=%lld", (long long)kk);
  }
  for (int m = 0; m < nm && (size_t)k + 2 < cap; m++)
    k += snprintf(lab + k, cap - (size_t)k, "%s%s", m ? "," : ": ",
                  tpuir_op_name(tpuir_get_node(g, members[m])->op));
  tpux__profile_add(lab, seconds);
}

void tpux__profile_output(const tpuir_graph *g, int v, double seconds) {
  char lab[sizeof(((tpux_profile_entry *)0)->label)];
  int k = snprintf(lab, sizeof lab, "(output copy) ");
  shape_text(lab + k, sizeof lab - (size_t)k, tpuir_get_node(g, v));
  tpux__profile_add(lab, seconds);
}

int tpux_profile_read(tpux_profile_entry *out, int cap, int reset) {
  pthread_mutex_lock(&g_mu);
  int n = 0;
  for (int i = 0; i < PROF_SLOTS; i++) {
    if (g_tab[i].count == 0) continue;
    if (out && n < cap) out[n] = g_tab[i];
    n++;
  }
  if (reset) {
    memset(g_tab, 0, sizeof g_tab);
    g_n = 0;
  }
  pthread_mutex_unlock(&g_mu);
  return n;
}

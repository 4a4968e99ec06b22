/* graph/internal.h - private interface between the recorder (graph/graph.c) and
 * the compilation cache (graph/cache.c). Not installed. */
#ifndef TPU_GRAPH_INTERNAL_H
#define TPU_GRAPH_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "tpu_graph.h"

/* A cached program: the merged graph, shared by the cache and the tasks
 * running it (reference counted). */
typedef struct tpug_prog {
  uint64_t k1, k2;
  tpuir_graph *g;
  int refs; /* atomic */
  uint64_t tick;
  void *exe; /* executables of the executors that ran it (tpux_exec_program slot) */
} tpug_prog;

/* Look a program up (memory, then disk). Returns a new reference or NULL.
 * *from_disk is set to 1 when it was loaded from the disk tier. */
tpug_prog *tpug__cache_get(uint64_t k1, uint64_t k2, int *from_disk);
/* Insert a freshly compiled graph (ownership moves to the cache; also
 * written to the disk tier). Returns a new reference (NULL on OOM: g is
 * freed). */
tpug_prog *tpug__cache_put(uint64_t k1, uint64_t k2, tpuir_graph *g);
/* Drop one reference. */
void tpug__prog_unref(tpug_prog *p);
/* The disk tier's directory copied into buf (cap bytes); "" when off.
 * Returns buf. */
const char *tpug__cache_dir(char *buf, size_t cap);
/* Counters kept by the cache. */
void tpug__cache_count(uint64_t *hits, uint64_t *disk_hits, uint64_t *entries);
void tpug__cache_reset_counts(void);

/* Serialize / load a graph (versioned raw node images). */
int tpug__graph_write(const tpuir_graph *g, const char *path);
tpuir_graph *tpug__graph_read(const char *path);

/* Program trace (graph/trace.c). Fill `ev`'s name, nops, bytes and flops
 * from a merged program (ops of the recorded graphs, in order). */
void tpug__trace_describe(tpug_trace_event *ev, const tpuir_graph *const *graphs, int n);
/* Stamp the clock (CLOCK_REALTIME ns). */
int64_t tpug__trace_now_ns(void);
/* Append a finished event (copied). */
void tpug__trace_push(const tpug_trace_event *ev);

#endif /* TPU_GRAPH_INTERNAL_H */

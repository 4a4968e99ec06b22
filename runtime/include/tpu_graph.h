/* tpu_graph.h - eager execution modes (prefix tpug_): Strict Eager and
 * Fused Eager (TorchTPU's DEFER_AND_FUSE) over one code path, plus the
 * compilation cache shared by every mode.
 *
 * Every launched op (tpulw_launch) is handed to tpug_submit as a small IR
 * graph with bound parameter views and output destination views. The
 * device's recorder appends it to its pending list; in Strict mode the list
 * is flushed at once (a one-op program), in Fuse mode it is flushed on a
 * trigger (host copy, synchronize, index-checking op, repeated step, size
 * cap, memory pressure, an alias the recorder cannot express).
 *
 * Flush: the pending ops are merged into one graph. A parameter whose view
 * equals a pending output's destination exactly becomes a data edge; a
 * view contained in a contiguous pending output becomes reshape/slice/
 * transpose/broadcast of that value; any other overlap with a pending
 * output flushes first. Rank-0 constants are lifted into parameters bound
 * to host scalars, so the merged program does not depend on scalar values
 * (learning rates, step counts). Outputs whose buffer was freed before the
 * flush (dead intermediates) are not outputs of the program: the executor
 * never writes them. The merged graph is looked up in the compilation
 * cache by a key over op structure, bindings and live outputs (built
 * without merging), so a hit skips the merge; the cache has an in-memory
 * LRU and an optional on-disk tier (TORCH_TPU_COMPILATION_CACHE_DIR).
 * Frees of blocks referenced by pending ops are deferred until the flush
 * has been enqueued (tpug_free).
 *
 * Environment (read at first use): TORCH_TPU_DEFER_AND_FUSE=1 (start in
 * Fuse mode), TORCH_TPU_FUSE_MAX_OPS (size cap, default 2000),
 * TORCH_TPU_COMPILATION_CACHE_DIR (disk tier), TORCH_TPU_CACHE_ENTRIES
 * (in-memory LRU size, default 512).
 * Thread safety: every function may be called from any thread (one lock
 * per device, one for the cache).
 */
#ifndef TPU_GRAPH_H
#define TPU_GRAPH_H

#include "tpu_base.h"
#include "tpu_ir.h"
#include "tpu_rt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* TPUG_DEFER_ALL (TorchTPU's INTERNAL_DEFER_ALL): Fuse mode in which ops
 * that check indices are deferred too (tpug_submit returns TPUG_DEFERRED;
 * their errors surface when the flushed program runs, as on a GPU). */
enum { TPUG_STRICT = 0, TPUG_FUSE = 1, TPUG_DEFER_ALL = 2 };

/* Why a pending graph was flushed (index into tpug_stats.flushes). */
typedef enum tpug_reason {
  TPUG_R_STRICT = 0, /* strict mode: every op */
  TPUG_R_SYNC,       /* explicit synchronize / stream or event sync */
  TPUG_R_D2H,        /* device -> host copy (.cpu(), .item(), printing) */
  TPUG_R_COPY,       /* host->device / cross-device copy touching pending */
  TPUG_R_ALIAS,      /* partial overlap the recorder cannot express */
  TPUG_R_SYNC_OP,    /* op that checks indices synchronously */
  TPUG_R_LOOP,       /* repeated step detected */
  TPUG_R_CAP,        /* size cap */
  TPUG_R_OOM,        /* memory pressure */
  TPUG_R_STREAM,     /* op on another stream than the pending ones */
  TPUG_R_MODE,       /* mode switch */
  TPUG_R_COMPILED,   /* before a captured (compiled) program starts or runs */
  TPUG_NUM_REASONS
} tpug_reason;

/* Select the mode for the process (leaving Fuse flushes every device). */
TPU_API int tpug_set_mode(int mode);
TPU_API int tpug_get_mode(void);

/* Returned (> 0) by tpug_submit for a sync op that was deferred anyway,
 * because its device is capturing (tpug_capture_begin): the caller must not
 * wait for it; its input errors surface when the program runs. */
#define TPUG_DEFERRED 1

/* Hand one op to the recorder of stream `s`'s device. g, ins[0..nin) (one
 * view per graph parameter) and outs[0..nout) (destinations) are borrowed
 * until release(owner) is called, which tpug does exactly once (also on
 * error). sync != 0: the op must run now (pending work is flushed with it)
 * and tpug_submit waits for stream `s` to finish it, returning the first
 * error of the stream's tasks (its input checks). A host thread blocks here while
 * the stream has more than 1024 programs pending (launch-queue back-pressure,
 * tpurt_stream_throttle). */
TPU_API int tpug_submit(tpurt_stream *s, const tpuir_graph *g, int nin,
                const tpu_view *ins, int nout, const tpu_view *outs, int sync,
                tpurt_cleanup_fn release, void *owner);

/* ---- waits and copies: the one place that flushes for a caller ----------
 * Layers above the recorder (the lowering, the C++ glue) never pair a flush
 * with a wait themselves: they call these, which flush the device's pending
 * Fused Eager ops with the right reason and then wait on the runtime
 * (tpurt_*). The tpurt_ synchronize calls below them wait only for work
 * already enqueued. */

/* torch.tpu.synchronize / Stream.synchronize: flush (TPUG_R_SYNC) and wait
 * for every stream of `dev` / for stream `s`. A device never opened has
 * nothing to wait for (TPU_OK). */
TPU_API int tpug_synchronize_device(int dev);
TPU_API int tpug_synchronize_stream(tpurt_stream *s);
/* The host is about to read `dev`'s memory directly (a data-dependent
 * shape, the allocator's copy_data): flush (TPUG_R_D2H) and wait for every
 * stream of `dev`. */
TPU_API int tpug_synchronize_for_host(int dev);
/* Event record / stream wait: pending ops of the stream's device are
 * flushed first (TPUG_R_SYNC), so the event covers them. */
TPU_API int tpug_event_record(tpurt_event *e, tpurt_stream *s);
TPU_API int tpug_stream_wait_event(tpurt_stream *s, tpurt_event *e);
/* 1 if `s` has nothing left to do (no pending ops on its device and every
 * enqueued task finished), else 0. Flushes nothing. */
TPU_API int tpug_stream_query(tpurt_stream *s);
/* tpurt_malloc_on with memory pressure handled: on TPU_E_OOM while `dev`
 * has pending ops, they are flushed (TPUG_R_OOM), the device is waited for
 * (deferred frees return their blocks) and the allocation is retried once.
 * The new block is noted (tpug_note_alloc): in a deferring mode it reads as
 * pending until a flush. *out is owned by the caller (free with tpug_free). */
TPU_API int tpug_malloc(int dev, int stream_id, size_t n, void **out);

/* The copy engine (graph/copy.c), all with dtype conversion.
 * host -> device: src (host memory, borrowed only during the call) is
 * staged into a runtime buffer at once, then copied/converted on `s`;
 * pending ops using dst's block are flushed first (TPUG_R_COPY). */
TPU_API int tpug_copy_h2d(tpurt_stream *s, const tpu_view *dst, const tpu_view *src);
/* device -> host: pending ops are flushed (TPUG_R_D2H), the copy is
 * enqueued on `s`, then waited for. */
TPU_API int tpug_copy_d2h(tpurt_stream *s, const tpu_view *dst, const tpu_view *src);
/* device -> host without waiting: flushed and enqueued on `s`, returns at
 * once; dst (host memory, borrowed until `s` has run the copy: synchronize
 * the stream or an event recorded after it before reading or freeing dst). */
TPU_API int tpug_copy_d2h_async(tpurt_stream *s, const tpu_view *dst, const tpu_view *src);
/* device -> device (same or other chip): in Fuse mode (or while capturing)
 * a same-chip copy is recorded with the pending ops; otherwise pending ops
 * touching src/dst are flushed (TPUG_R_COPY) and the copy is enqueued on
 * `s` (the destination's stream) after the source's chip has finished its
 * queued work. */
TPU_API int tpug_copy_d2d(tpurt_stream *s, const tpu_view *dst, const tpu_view *src);

/* Enqueue `dev`'s pending ops (dev < 0: every device) as one program. */
TPU_API int tpug_flush(int dev, int reason);
/* Flush `dev` if its pending ops read or write memory of block `base`. */
TPU_API int tpug_flush_if_uses(int dev, const void *base, int reason);
/* Free a device block (tpurt_malloc'd): deferred while pending ops use it;
 * pending outputs into it become dead (never written). */
TPU_API int tpug_free(void *ptr);
/* Note a freshly allocated device block (borrowed): in a deferring mode it
 * reads as pending (a promise, TorchTPU's deferred empty) until a flush of
 * its device, a copy or host access touches it (tpug_flush_if_uses), or it
 * is freed. No-op in Strict mode and while capturing. */
TPU_API int tpug_note_alloc(void *base);
/* 1 if block `base` is the destination of a pending (unflushed) output or
 * a fresh block noted by tpug_note_alloc. */
TPU_API int tpug_is_pending(const void *base);
/* Pending op count of `dev`. */
TPU_API int tpug_pending_ops(int dev);

/* Dump `dev`'s pending graph (merged, without flushing): format 0 = text
 * (tpuir_dump), 1 = graphviz dot, 2 = StableHLO (MLIR text, as the PJRT
 * executor emits it; 0 if an op has no StableHLO form). Returns the length
 * needed (excl. NUL). */
TPU_API size_t tpug_dump(int dev, int format, char *buf, size_t cap);

typedef struct tpug_stats {
  uint64_t hits;            /* in-memory cache hits */
  uint64_t disk_hits;       /* programs loaded from the disk tier */
  uint64_t misses;          /* compiles (merges) */
  double compile_seconds;   /* time spent compiling (merging) */
  uint64_t entries;         /* programs in the in-memory LRU */
  uint64_t ops_recorded;
  uint64_t programs_run;    /* flushed programs enqueued */
  uint64_t outputs_written; /* program outputs written */
  uint64_t outputs_elided;  /* dead pending outputs never written */
  uint64_t bytes_elided;
  uint64_t flushes[TPUG_NUM_REASONS];
  uint64_t captures;        /* programs captured (tpug_capture_end) */
  uint64_t broken_captures; /* captures cut by a forced flush */
  uint64_t replays;         /* tpug_capture_run calls enqueued */
} tpug_stats;

/* ---- capture / replay (torch.compile: one program per FX graph) ------ */

/* A captured program: the merged graph of every op recorded on one device
 * between tpug_capture_begin and tpug_capture_end, with the views it read
 * (parameters) and wrote (outputs) during the capture, so it can run again
 * on other memory of the same layout without recording anything. */
typedef struct tpug_capture tpug_capture;

/* Start capturing `dev`: its pending ops are flushed first; until
 * tpug_capture_end every op recorded on `dev` is deferred whatever the
 * mode, ops that check indices included (TPUG_DEFERRED: their errors
 * surface when the program runs, as on a GPU); the size cap and loop
 * detection do not cut it. A flush forced meanwhile (host copy, alias,
 * stream switch, memory pressure) breaks the capture: everything still runs
 * in order, but tpug_capture_end then returns no program. */
TPU_API int tpug_capture_begin(int dev);
/* End the capture: enqueue the recorded ops as one program (its first run;
 * compiled through the shared cache) and return it in *out (caller frees
 * with tpug_capture_free), or *out = NULL when the capture was broken or
 * recorded nothing observable. *cut (may be NULL): the tpug_reason of the
 * flush that broke the capture, -1 if none did. */
TPU_API int tpug_capture_end(int dev, tpug_capture **out, int *cut);
/* 1 while `dev` is capturing (2 once a forced flush has cut the capture). */
TPU_API int tpug_capturing(int dev);
TPU_API void tpug_capture_free(tpug_capture *c);
/* Distinct device blocks the program reads or writes (the bases of its
 * parameter and output views): writes up to `cap` into bases (borrowed
 * pointers, may be NULL with cap 0) and returns the count. */
TPU_API int tpug_capture_bases(const tpug_capture *c, const void **bases, int cap);
/* Number of rng keys (one per random node) and the (seed, offset) pair
 * each had during the capture (keys: 2 * count int64s, caller's array). */
TPU_API int tpug_capture_rng(const tpug_capture *c, int64_t *keys, int cap);
/* Run the captured program again on stream `s` (its device's pending ops
 * are flushed first). Every view whose base is from[k] is moved to to[k]
 * (same offsets, sizes, strides); every base the program uses must be in
 * from[] (else TPU_E_INVALID, nothing runs). rng_keys: 2 * count new
 * (seed, offset) pairs, or NULL to reuse the captured ones. Asynchronous. */
TPU_API int tpug_capture_run(tpug_capture *c, tpurt_stream *s, int nreloc,
                     const void *const *from, void *const *to,
                     const int64_t *rng_keys);

/* Snapshot of the counters. */
TPU_API void tpug_get_stats(tpug_stats *out);
/* Zero the counters (not the cache). */
TPU_API void tpug_reset_stats(void);
/* Drop the in-memory cache (the disk tier stays). */
TPU_API void tpug_cache_clear(void);
/* Set the disk-tier directory (NULL or "" disables it). */
TPU_API int tpug_cache_set_dir(const char *dir);

/* ---- program trace (profiler) ------------------------------------------
 * While tracing is on, every program the recorder enqueues (a fused graph,
 * or one op in Strict/Debug Eager) leaves one event when it has run on its
 * stream. Events wait in a bounded buffer (TPUG_TRACE_CAP; further events
 * are counted as dropped) until drained. */
#define TPUG_TRACE_CAP 65536
typedef struct tpug_trace_event {
  char name[128];      /* IR ops of the program, e.g. "dot_general+add+tanh" */
  uint64_t program;    /* compiled-program (cache) key: same graph, same id */
  int32_t device, stream;
  int32_t nops;        /* recorded ops merged into the program */
  int32_t reason;      /* tpug_flush_reason that ran it */
  int64_t start_ns, end_ns; /* CLOCK_REALTIME, on the stream's worker */
  uint64_t bytes;      /* bytes read (program inputs) + written (outputs) */
  uint64_t flops;      /* 2*M*N*K over the program's dot_general nodes */
} tpug_trace_event;

/* Turn tracing on (1) or off (0); turning it on clears the buffer. */
TPU_API void tpug_trace_enable(int on);
TPU_API int tpug_trace_enabled(void);
/* Move up to `max` events (oldest first) into `out` (caller-owned array);
 * returns how many. *dropped (if not NULL) gets the number of events lost
 * to a full buffer since tracing was enabled. */
TPU_API int tpug_trace_drain(tpug_trace_event *out, int max, uint64_t *dropped);

#ifdef __cplusplus
}
#endif
#endif /* TPU_GRAPH_H */

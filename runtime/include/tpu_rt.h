/* tpu_rt.h - vTPU runtime layer (prefix tpurt_): chips, HBM memory,
 * streams (async execution queues), events, and the kernel thread pool.
 *
 * Thread safety: every function here may be called from any thread.
 * Devices are the chips visible to this process, numbered 0..count-1
 * (TPU_VISIBLE_CHIPS maps them onto physical vTPU chips).
 *
 * Environment (read once, at first use):
 *   TORCH_TPU_VTPU_CHIPS  physical chips on this host (default 4)
 *   TPU_VISIBLE_CHIPS     comma list of physical chips this process sees
 *                         (default: all)
 *   TORCH_TPU_HBM_BYTES   HBM capacity per chip in bytes (default 16 GiB;
 *                         suffixes K/M/G accepted)
 *   TORCH_TPU_LOCK_DIR    directory of the per-chip lock files
 *                         (default /tmp/torch_tpu_locks)
 *   TORCH_TPU_NUM_THREADS kernel thread-pool size (default: online CPUs)
 */
#ifndef TPU_RT_H
#define TPU_RT_H

#include "tpu_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- chips ----------------------------------------------------------- */

/* Number of chips visible to this process (>= 0). Does not open/lock any. */
TPU_API int tpurt_device_count(void);
/* Physical vTPU chip id behind visible device `dev`, or TPU_E_INVALID. */
TPU_API int tpurt_device_physical_id(int dev);
/* Open device `dev`: takes the chip's inter-process lock and sets up its
 * memory and default stream. Idempotent; called implicitly by tpurt_malloc
 * and tpurt_default_stream. TPU_E_BUSY if another live process holds the
 * chip (message names that pid); the lock is released when this process
 * exits or crashes (flock semantics). */
TPU_API int tpurt_device_open(int dev);
/* 1 if `dev` has been opened by this process, else 0. */
TPU_API int tpurt_device_is_open(int dev);
/* HBM capacity of `dev` in bytes (0 for a bad dev). */
TPU_API uint64_t tpurt_device_hbm_capacity(int dev);

/* ---- memory (per-chip caching allocator) ----------------------------- */

/* Allocate `nbytes` (0 allowed -> *out = NULL, TPU_OK) of device memory on
 * `dev`, 64-byte aligned. Caller frees with tpurt_free. On exhaustion the
 * allocator first releases its cache, then fails with TPU_E_OOM and a
 * message "Tried to allocate X; Y free of Z capacity (A allocated, R
 * reserved)". Memory is host memory: the pointer is a real address. */
TPU_API int tpurt_malloc(int dev, size_t nbytes, void **out);
/* Same, for memory whose first use is work enqueued on stream `sid` of
 * `dev` after this call (CUDA's caching-allocator rule): a block freed while
 * only stream `sid` still had work queued is handed out at once, since that
 * stream runs the block's earlier users before the new one. sid < 0 is
 * tpurt_malloc. Using the memory on another stream first is the caller's
 * bug, as on CUDA. Caller frees with tpurt_free. */
TPU_API int tpurt_malloc_on(int dev, int sid, size_t nbytes, void **out);
/* Free memory from tpurt_malloc (NULL is a no-op). Stream-ordered: the block
 * is reused only after every task enqueued on any stream of its chip before
 * this call has finished. Never blocks. */
TPU_API int tpurt_free(void *ptr);
/* Device that owns `ptr` (any address inside a live block), or -1. */
TPU_API int tpurt_ptr_device(const void *ptr);

typedef struct tpurt_mem_stats {
  uint64_t allocated;      /* bytes in live blocks (rounded block sizes) */
  uint64_t peak_allocated; /* max of allocated since start / reset */
  uint64_t reserved;       /* bytes taken from the host (live + cached) */
  uint64_t peak_reserved;
  uint64_t capacity;       /* HBM capacity */
  uint64_t num_allocs;     /* number of successful tpurt_malloc calls */
  uint64_t num_frees;
  uint64_t num_ooms;
  uint64_t active_blocks;  /* live blocks */
} tpurt_mem_stats;

/* Fill `out` with `dev`'s statistics. */
TPU_API int tpurt_mem_get_stats(int dev, tpurt_mem_stats *out);
/* Reset peak_allocated/peak_reserved to the current values. */
TPU_API int tpurt_mem_reset_peak(int dev);
/* Return cached (free) blocks of `dev` to the host. */
TPU_API int tpurt_mem_empty_cache(int dev);

/* ---- streams --------------------------------------------------------- */

typedef struct tpurt_stream tpurt_stream;

/* A task runs on the stream's worker thread, in enqueue order. It returns a
 * tpu_status; on error it should have called tpu_error() (on the worker
 * thread) - the runtime copies that message. `cleanup` (may be NULL) is
 * called exactly once after run (or instead of it if the task is dropped),
 * on any thread; it owns freeing `ctx`. */
typedef int (*tpurt_task_fn)(void *ctx);
typedef void (*tpurt_cleanup_fn)(void *ctx);

/* Default stream of `dev` (opens the device). Borrowed, lives until exit.
 * NULL on error (see tpu_last_error). */
TPU_API tpurt_stream *tpurt_default_stream(int dev);
/* Create a new stream on `dev` (own worker thread). Borrowed: the runtime
 * owns streams and keeps them until exit. NULL on error. A chip has at most
 * 64 streams (ids 0..63); past that, existing non-default streams are handed
 * out round-robin (like CUDA's stream pool). */
TPU_API tpurt_stream *tpurt_stream_create(int dev);
/* Device of a stream; its id (0 = default stream, then 1, 2, ... per chip). */
TPU_API int tpurt_stream_device(const tpurt_stream *s);
TPU_API int tpurt_stream_id(const tpurt_stream *s);
/* Look a stream up by (dev, id); NULL if none. Borrowed. id 0 always yields
 * the default stream (opening the device). */
TPU_API tpurt_stream *tpurt_stream_get(int dev, int id);

/* Enqueue a task. Returns immediately (unless launch-blocking is on, then it
 * waits and returns the task's status). Ownership of ctx passes to the
 * stream (cleanup is called even if enqueue fails). */
TPU_API int tpurt_stream_enqueue(tpurt_stream *s, tpurt_task_fn run,
                         tpurt_cleanup_fn cleanup, void *ctx);
/* Wait until every task enqueued so far has finished. Returns the first
 * error a task reported since the last synchronize (and clears it, with its
 * message set on the calling thread), else TPU_OK. */
TPU_API int tpurt_stream_synchronize(tpurt_stream *s);
/* 1 if every enqueued task has finished, 0 otherwise. */
TPU_API int tpurt_stream_query(tpurt_stream *s);
/* Back-pressure, like CUDA's bounded launch queue: when more than
 * max_pending tasks are queued or running on s, block the calling thread
 * until at most max_pending / 2 are (one wake-up per half queue, not one
 * per task).
 * Returns at once when called by a task of any stream (a worker must never
 * wait for queue space: it could be what frees it). Errors stay sticky for
 * the next synchronize. */
TPU_API void tpurt_stream_throttle(tpurt_stream *s, uint64_t max_pending);
/* Synchronize every stream of `dev` (first error wins). */
TPU_API int tpurt_device_synchronize(int dev);

/* Launch-blocking (Debug Eager): when on, every enqueue waits for its task. */
TPU_API void tpurt_set_launch_blocking(int on);
TPU_API int tpurt_get_launch_blocking(void);

/* ---- events ---------------------------------------------------------- */

typedef struct tpurt_event tpurt_event;

/* Create an event (caller frees with tpurt_event_destroy). */
TPU_API tpurt_event *tpurt_event_create(void);
/* Destroy (safe while a record is still pending). */
TPU_API void tpurt_event_destroy(tpurt_event *e);
/* Record: the event completes when `s` reaches this point. Re-recording
 * replaces the previous record. Captures a timestamp when reached. */
TPU_API int tpurt_event_record(tpurt_event *e, tpurt_stream *s);
/* 1 if complete (or never recorded), 0 if pending. */
TPU_API int tpurt_event_query(tpurt_event *e);
/* Block until complete. */
TPU_API int tpurt_event_synchronize(tpurt_event *e);
/* Make future work on `s` wait until `e` completes. */
TPU_API int tpurt_stream_wait_event(tpurt_stream *s, tpurt_event *e);
/* Milliseconds between two completed events (TPU_E_INVALID if either is
 * not recorded/complete). */
TPU_API int tpurt_event_elapsed_ms(tpurt_event *start, tpurt_event *end, double *ms);

/* ---- kernel thread pool ---------------------------------------------- */

typedef void (*tpurt_range_fn)(void *ctx, int64_t begin, int64_t end);

/* Run fn over [0, n) split into chunks of at least `grain` items, on the
 * shared pool (the caller participates). Blocks until done. Safe to call
 * from several threads at once and from inside fn (nested calls run
 * inline). */
TPU_API void tpurt_parallel_for(int64_t n, int64_t grain, tpurt_range_fn fn,
                        void *ctx);
/* Threads in the pool (including the caller). */
TPU_API int tpurt_num_threads(void);
/* Change the pool size (>= 1). */
TPU_API void tpurt_set_num_threads(int n);
/* The pool's size at start, whatever tpurt_set_num_threads set since:
 * TORCH_TPU_NUM_THREADS, else the usable cores. Work cut into this many
 * parts is cut the same way at any pool size. */
TPU_API int tpurt_default_num_threads(void);

#ifdef __cplusplus
}
#endif
#endif /* TPU_RT_H */

/* tpu_coll.h - collectives layer (prefix tpucoll_): the vTPU's "ICI"
 * between the processes (one per chip) of one host.
 *
 * A communicator joins `size` processes of one host through one POSIX
 * shared-memory segment. Rank 0 creates it under a name the caller agreed
 * on out of band (torch_tpu uses the c10d Store), the others attach, and
 * once every rank is attached rank 0 unlinks the name: from then on the
 * segment lives only as long as some member maps it, so a crash leaks
 * nothing in /dev/shm.
 *
 * Algorithms (all ranks get bitwise-identical results): every collective
 * starts with a metadata exchange (kind, dtype, count, op, root) so
 * mismatched calls fail with a message naming both ranks' arguments; then
 * data moves in chunks through per-rank slots of the segment (double
 * buffered). all_reduce is a reduce-scatter (rank r reduces slice r of the
 * chunk over all ranks' slots, in rank order) followed by an all-gather;
 * reduce_scatter/all_gather/broadcast/reduce/all_to_all are the matching
 * halves. send/recv use a per-(src,dst) double-buffered channel and match
 * in order per pair (no tags).
 *
 * Waiting: spin briefly, then futex-sleep on a shared doorbell (no spin
 * when there are more ranks than CPUs: a spinning rank would only keep the
 * rank it waits for off the CPU; TORCH_TPU_COLL_SPIN overrides the spin
 * rounds). A rank rings (FUTEX_WAKE) only while some rank sleeps. Every
 * wait is bounded by the communicator's timeout; a peer whose process is
 * gone is detected within a sleep slice (20 ms). Any failure marks the communicator aborted (in shared
 * memory too, so the peers stop waiting): later calls fail at once.
 *
 * Memory: buffers are plain host addresses - the vTPU's device memory is
 * host memory owned by the runtime, so tpu tensors' data pointers are
 * passed as they are (no staging through framework tensors).
 *
 * Ordering with the chip (tpucoll_enqueue): a collective is a task on a
 * runtime stream. torch_tpu enqueues it on a per-communicator stream of the
 * rank's chip after making that stream wait for an event recorded on the
 * producer's current stream, so it runs after the work that produced its
 * inputs and overlaps with later compute; completion is reported through a
 * tpucoll_work handle (and an optional callback on the communicator's
 * completion thread).
 *
 * Thread safety: calls on one communicator must be serialised by the
 * caller (tpucoll_enqueue on one stream does that); different
 * communicators are independent. Errors: codes from tpu_base.h with a
 * message (tpu_last_error); TPU_E_TIMEOUT-class failures use
 * TPU_E_INTERNAL and a message starting "tpu_dist timeout".
 */
#ifndef TPU_COLL_H
#define TPU_COLL_H

#include "tpu_base.h"
#include "tpu_rt.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TPUCOLL_MAX_RANKS 64

typedef enum tpucoll_op {
  TPUCOLL_SUM = 0,
  TPUCOLL_PROD,
  TPUCOLL_MIN,
  TPUCOLL_MAX,
  TPUCOLL_AVG, /* sum / size; floating and complex dtypes only */
  TPUCOLL_NUM_OPS
} tpucoll_op;

typedef enum tpucoll_kind {
  TPUCOLL_BARRIER = 0,
  TPUCOLL_ALL_REDUCE,
  TPUCOLL_BROADCAST,
  TPUCOLL_REDUCE,
  TPUCOLL_ALL_GATHER,
  TPUCOLL_REDUCE_SCATTER,
  TPUCOLL_ALL_TO_ALL,
  TPUCOLL_SEND,
  TPUCOLL_RECV,
  TPUCOLL_NUM_KINDS
} tpucoll_kind;

typedef struct tpucoll_comm tpucoll_comm;

/* Create (rank 0) or attach to (others) the segment `name` ("/..." as for
 * shm_open) and wait until all `size` ranks are attached, at most
 * `timeout_ms`. Rank 0 then unlinks the name. `slot_bytes` (0: default 1
 * MiB, or TORCH_TPU_COLL_SLOT_BYTES) is the per-rank chunk size and must
 * agree across ranks. Caller frees *out with tpucoll_comm_destroy. */
TPU_API int tpucoll_comm_init(const char *name, int rank, int size, size_t slot_bytes,
                      int64_t timeout_ms, tpucoll_comm **out);
/* Unmap (and unlink if still linked). NULL is a no-op. Pending enqueued
 * work must have finished (tpucoll_comm_drain). */
TPU_API void tpucoll_comm_destroy(tpucoll_comm *c);
/* Mark the communicator aborted here and in shared memory (peers waiting
 * in a collective fail at once with `reason`). */
TPU_API void tpucoll_comm_abort(tpucoll_comm *c, const char *reason);
TPU_API int tpucoll_comm_rank(const tpucoll_comm *c);
TPU_API int tpucoll_comm_size(const tpucoll_comm *c);
/* Change the per-wait timeout (milliseconds, > 0). */
TPU_API void tpucoll_comm_set_timeout(tpucoll_comm *c, int64_t timeout_ms);

/* ---- blocking collectives (calling thread) ---------------------------
 * Buffers are borrowed; `count` is in elements of `dtype`; in == out is
 * allowed where the kind has both. */
TPU_API int tpucoll_barrier(tpucoll_comm *c);
TPU_API int tpucoll_all_reduce(tpucoll_comm *c, const void *in, void *out,
                       size_t count, int dtype, int op);
TPU_API int tpucoll_broadcast(tpucoll_comm *c, void *buf, size_t count, int dtype,
                      int root);
/* out is written on `root` only (may be NULL elsewhere). */
TPU_API int tpucoll_reduce(tpucoll_comm *c, const void *in, void *out, size_t count,
                   int dtype, int op, int root);
/* in: count elements; out: size*count, rank order. */
TPU_API int tpucoll_all_gather(tpucoll_comm *c, const void *in, void *out,
                       size_t count, int dtype);
/* in: size*count elements (slice r goes to rank r); out: count. */
TPU_API int tpucoll_reduce_scatter(tpucoll_comm *c, const void *in, void *out,
                           size_t count, int dtype, int op);
/* in: pieces for ranks 0..size-1 back to back, send_counts[k] elements for
 * rank k; out: pieces from ranks 0..size-1 back to back, recv_counts[k]
 * elements. recv_counts[k] must equal rank k's send_counts[rank]. */
TPU_API int tpucoll_all_to_all(tpucoll_comm *c, const void *in,
                       const size_t *send_counts, void *out,
                       const size_t *recv_counts, int dtype);
/* Point to point, matched in order per (src, dst) pair; sizes must agree
 * (a mismatch aborts the communicator). `tag` travels with the message: a
 * recv whose tag differs from the next message's fails with TPU_E_VALUE
 * before consuming anything (the message stays queued for a recv with the
 * right tag; the transport never reorders by tag). */
TPU_API int tpucoll_send(tpucoll_comm *c, const void *buf, size_t nbytes, int peer, int64_t tag);
TPU_API int tpucoll_recv(tpucoll_comm *c, void *buf, size_t nbytes, int peer, int64_t tag);

/* ---- asynchronous collectives on a stream ---------------------------- */

/* One collective. Buffers are borrowed until the work completes; the
 * count arrays (all_to_all) are copied by tpucoll_enqueue. */
typedef struct tpucoll_desc {
  int kind;          /* tpucoll_kind */
  const void *in;    /* input (send, all_reduce in, ...) */
  void *out;         /* output (recv, broadcast buffer, ...) */
  size_t count;      /* elements (bytes for send/recv) */
  int dtype;
  int op;            /* tpucoll_op */
  int root;          /* broadcast/reduce root; send/recv peer */
  const size_t *send_counts, *recv_counts; /* all_to_all */
  int64_t tag;       /* send/recv */
} tpucoll_desc;

/* Run `d` now on the calling thread (blocking). Work enqueued earlier must
 * have finished first (tpucoll_comm_drain), or the order breaks. */
TPU_API int tpucoll_run(tpucoll_comm *c, const tpucoll_desc *d);

typedef struct tpucoll_work tpucoll_work;
typedef void (*tpucoll_done_fn)(void *ctx, int status, const char *msg);

/* Enqueue `d` on stream `s` (tasks of one communicator must all go to one
 * stream). `done` (may be NULL) is called once, on the communicator's
 * completion thread, after the collective finished (status + message);
 * it must not block on other collectives of this communicator. Caller owns
 * *out (may be NULL if not wanted): release it with tpucoll_work_release. */
TPU_API int tpucoll_enqueue(tpucoll_comm *c, tpurt_stream *s, const tpucoll_desc *d,
                    tpucoll_done_fn done, void *done_ctx,
                    tpucoll_work **out);
/* Block until the work finished; returns its status (message set on the
 * calling thread on error). */
TPU_API int tpucoll_work_wait(tpucoll_work *w);
/* 1 if finished, else 0. */
TPU_API int tpucoll_work_query(tpucoll_work *w);
/* Drop the caller's reference (safe before completion). */
TPU_API void tpucoll_work_release(tpucoll_work *w);
/* Block until every work enqueued on `c` has finished and its callback ran. */
TPU_API void tpucoll_comm_drain(tpucoll_comm *c);
/* 1 if every work enqueued on `c` has finished and its callback ran (so
 * tpucoll_run may go next without a drain), else 0. */
TPU_API int tpucoll_comm_idle(tpucoll_comm *c);

/* ---- reductions (exposed for tests) ---------------------------------- */

/* dst[i] = op(srcs[0][i], ..., srcs[n-1][i]) in source order (AVG divides
 * the sum by `avg_div`). dst may alias a source. TPU_E_TYPE/TPU_E_INVALID
 * for combinations the op lacks (bool/int AVG, complex MIN/MAX/PROD). */
TPU_API int tpucoll_reduce_buffers(void *dst, const void *const *srcs, int n,
                           size_t count, int dtype, int op, int avg_div);

#ifdef __cplusplus
}
#endif
#endif /* TPU_COLL_H */

/* coll/internal.h - private declarations of the collectives layer
 * (coll/shm.c: segment + waits, coll/algo.c: algorithms, coll/reduce.c:
 * typed reductions, coll/work.c: stream tasks + completion thread). */
#ifndef COLL_INTERNAL_H
#define COLL_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "tpu_coll.h"

#define COLL_MAGIC 0x54505543u /* "TPUC" */
#define COLL_LINE 64

/* Per-collective metadata, exchanged before any data moves. */
typedef struct tpucoll__meta {
  uint64_t seq;
  int32_t kind, dtype, op, root;
  uint64_t count;
  uint64_t counts[TPUCOLL_MAX_RANKS]; /* all_to_all send counts */
} tpucoll__meta;

typedef struct tpucoll__rank {
  _Atomic uint64_t arrive; /* barrier generation this rank reached */
  int32_t pid;
  char pad[COLL_LINE - 12];
  tpucoll__meta meta[2]; /* indexed by seq & 1 */
} __attribute__((aligned(COLL_LINE))) tpucoll__rank;

/* One direction of a point-to-point pair: chunks posted/acked so far. */
typedef struct tpucoll__chan {
  _Atomic uint64_t posted;
  _Atomic uint64_t acked;
  uint64_t msg_bytes[2]; /* total message size of the chunk in each half */
  int64_t msg_tag[2];    /* the message's tag, likewise */
  char pad[COLL_LINE - 48];
} __attribute__((aligned(COLL_LINE))) tpucoll__chan;

typedef struct tpucoll__hdr {
  uint32_t magic;
  int32_t size;
  uint64_t slot_bytes, p2p_bytes;
  _Atomic uint32_t ready;     /* rank 0 finished initialising */
  _Atomic uint32_t bell;      /* futex doorbell: bumped on every arrival */
  _Atomic uint32_t sleepers;  /* ranks in (or entering) a futex wait on bell */
  _Atomic uint32_t aborted;   /* some rank failed */
  int32_t abort_rank;
  char abort_msg[256];
} tpucoll__hdr;

struct tpucoll_comm {
  char name[128];
  int rank, size, linked;
  int64_t timeout_ms;
  int spin;           /* busy-wait rounds before sleeping (0: oversubscribed) */
  size_t direct_bytes; /* all_reduce up to this size: every rank reduces all */
  uint8_t *base;
  size_t map_bytes;
  tpucoll__hdr *hdr;
  tpucoll__rank *ranks;
  tpucoll__chan *chans;   /* [src * size + dst] */
  uint8_t *data;      /* slots[2][size][slot_bytes] then result[2][slot_bytes] */
  uint8_t *p2p;       /* [src * size + dst][2][p2p_bytes] */
  size_t slot_bytes, p2p_bytes;
  uint64_t gen;       /* barrier generation */
  uint64_t seq;       /* collectives issued */
  uint64_t chunk;     /* data chunks moved (double-buffer parity) */
  uint64_t sent[TPUCOLL_MAX_RANKS], recvd[TPUCOLL_MAX_RANKS]; /* p2p chunks */
  int aborted;
  char abort_msg[512];
  /* async machinery (coll/work.c) */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  struct tpucoll_work *done_head, *done_tail; /* finished, callback pending */
  uint64_t enqueued, finished;                /* callbacks run */
  int thread_started, stop;
  pthread_t thread;
};

/* coll/shm.c */
uint8_t *tpucoll__slot(tpucoll_comm *c, uint64_t parity, int rank);
uint8_t *tpucoll__result(tpucoll_comm *c, uint64_t parity);
/* Barrier over all ranks (bounded by the timeout). `what` names the
 * collective for messages. */
int tpucoll__barrier(tpucoll_comm *c, const char *what);
/* Wait until *ctr >= target, with the same bounds; `peer` is the rank
 * whose progress is awaited. */
int tpucoll__wait_ge(tpucoll_comm *c, _Atomic uint64_t *ctr, uint64_t target,
                 int peer, const char *what);
void tpucoll__ring(tpucoll_comm *c);
/* Record a failure: abort the communicator (locally + shared), set the
 * thread's error and return `code`. */
int tpucoll__fail(tpucoll_comm *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int tpucoll__check_alive(tpucoll_comm *c);
/* TPU_OK if `op` is a reduce op defined for `dtype` (AVG: floating or
 * complex; MIN/MAX: not complex), else the error (message set). */
int tpucoll__check_reduce_op(int dtype, int op);
const char *tpucoll__kind_name(int kind);


#endif

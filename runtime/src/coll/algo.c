/* coll/algo.c - the collective algorithms over the shared segment.
 *
 * Every collective but send/recv starts with a metadata exchange (one
 * barrier) that checks all ranks called the same thing. Data then moves in
 * chunks of one slot per rank; chunk i uses buffer set (i & 1), and each
 * chunk's reads finish before its rank arrives at the next chunk's
 * barrier, so set (i & 1) is free again when chunk i + 2 writes it. The
 * first chunk is staged before the metadata exchange, whose barrier then
 * serves as that chunk's (a mismatched call stages into the caller's own
 * slot only, and nobody reads it). */
#include <stdio.h>
#include <string.h>

#include "coll/internal.h"

static const char *op_name(int op) {
  static const char *n[TPUCOLL_NUM_OPS] = {"SUM", "PRODUCT", "MIN", "MAX", "AVG"};
  return op >= 0 && op < TPUCOLL_NUM_OPS ? n[op] : "?";
}

static void describe(const tpucoll__meta *m, char *buf, size_t n) {
  int k = m->kind;
  int len = snprintf(buf, n, "%s(", tpucoll__kind_name(k));
  if (k != TPUCOLL_BARRIER && k != TPUCOLL_ALL_TO_ALL)
    len += snprintf(buf + len, n - len, "count=%llu, dtype=%s", (unsigned long long)m->count,
                    tpu_dtype_name(m->dtype));
  else if (k == TPUCOLL_ALL_TO_ALL)
    len += snprintf(buf + len, n - len, "dtype=%s", tpu_dtype_name(m->dtype));
  if (k == TPUCOLL_ALL_REDUCE || k == TPUCOLL_REDUCE || k == TPUCOLL_REDUCE_SCATTER)
    len += snprintf(buf + len, n - len, ", op=%s", op_name(m->op));
  if (k == TPUCOLL_BROADCAST || k == TPUCOLL_REDUCE)
    len += snprintf(buf + len, n - len, ", root=%d", m->root);
  snprintf(buf + len, n - len, ")");
}

static int same_call(const tpucoll__meta *a, const tpucoll__meta *b) {
  if (a->kind != b->kind) return 0;
  if (a->kind == TPUCOLL_BARRIER) return 1;
  if (a->dtype != b->dtype) return 0;
  if (a->kind == TPUCOLL_ALL_TO_ALL) return 1;
  if (a->count != b->count) return 0;
  if ((a->kind == TPUCOLL_ALL_REDUCE || a->kind == TPUCOLL_REDUCE ||
       a->kind == TPUCOLL_REDUCE_SCATTER) && a->op != b->op)
    return 0;
  if ((a->kind == TPUCOLL_BROADCAST || a->kind == TPUCOLL_REDUCE) && a->root != b->root)
    return 0;
  return 1;
}

/* Publish this rank's call, wait for all, and check they agree. A mismatch
 * is seen by every rank (all compare all), so it is reported without
 * aborting: the communicator stays usable. */
static int exchange(tpucoll_comm *c, const tpucoll__meta *mine) {
  int rc = tpucoll__check_alive(c);
  if (rc) return rc;
  uint64_t s = ++c->seq;
  tpucoll__meta *m = &c->ranks[c->rank].meta[s & 1];
  *m = *mine;
  m->seq = s;
  rc = tpucoll__barrier(c, tpucoll__kind_name(mine->kind));
  if (rc) return rc;
  for (int k = 0; k < c->size; k++) {
    const tpucoll__meta *o = &c->ranks[k].meta[s & 1];
    if (o->seq != s)
      return tpucoll__fail(c, TPU_E_INTERNAL,
                       "tpu_dist: rank %d is at collective #%llu but rank %d at #%llu",
                       c->rank, (unsigned long long)s, k, (unsigned long long)o->seq);
    const tpucoll__meta *r0 = &c->ranks[0].meta[s & 1];
    if (!same_call(r0, o)) {
      char a[160], b[160];
      describe(r0, a, sizeof a);
      describe(o, b, sizeof b);
      return tpu_error(TPU_E_INVALID,
                       "tpu_dist: mismatched collective #%llu across ranks: rank 0 called "
                       "%s but rank %d called %s",
                       (unsigned long long)s, a, k, b);
    }
  }
  if (mine->kind == TPUCOLL_ALL_TO_ALL) {
    /* counts[0..size) = send counts, counts[size..2size) = recv counts */
    for (int i = 0; i < c->size; i++)
      for (int j = 0; j < c->size; j++) {
        uint64_t sent = c->ranks[i].meta[s & 1].counts[j];
        uint64_t want = c->ranks[j].meta[s & 1].counts[c->size + i];
        if (sent != want)
          return tpu_error(TPU_E_INVALID,
                           "tpu_dist: all_to_all split mismatch: rank %d sends %llu elements "
                           "to rank %d, which expects %llu",
                           i, (unsigned long long)sent, j, (unsigned long long)want);
      }
  }
  return TPU_OK;
}

static tpucoll__meta meta_of(int kind, size_t count, int dtype, int op, int root) {
  tpucoll__meta m;
  memset(&m, 0, sizeof m);
  m.kind = kind;
  m.count = count;
  m.dtype = dtype;
  m.op = op;
  m.root = root;
  return m;
}

static int check_dtype(int dtype) {
  if (tpu_dtype_size(dtype) == 0)
    return tpu_error(TPU_E_TYPE, "tpu_dist: unsupported dtype %d", dtype);
  return TPU_OK;
}

int tpucoll_barrier(tpucoll_comm *c) {
  tpucoll__meta m = meta_of(TPUCOLL_BARRIER, 0, 0, 0, 0);
  return exchange(c, &m);
}

/* all_reduce, or reduce to `root` (root >= 0): rank r reduces slice r of
 * each chunk over every rank's slot into the shared result, then every
 * rank (or only root) copies the result out.
 *
 * One barrier per chunk: chunk 0's input is staged before the metadata
 * exchange (whose barrier is chunk 0's), and chunk i's barrier also
 * publishes the reductions of chunk i-1, whose result is copied out right
 * after it; a final barrier publishes the last chunk's. Safe because a
 * chunk's slots are read before the reader's next barrier and its result
 * before the second-next, while a rank writes chunk i's slots after
 * barrier i-1 and its result after barrier i (parity i & 1 both). */
/* Reduce whole chunks on every rank (instead of a reduce-scatter then an
 * all-gather through the result area)? Each rank then reads all `size`
 * slots instead of 1/size of them, but a chunk needs one barrier, not two.
 * With 2 ranks that is also less memory traffic (no copy out of the result
 * area); with more, it pays while the message is small (latency-bound).
 * The limit is c->direct_bytes (TORCH_TPU_COLL_DIRECT_BYTES, default
 * 256 KiB). */
static int direct_reduce(const tpucoll_comm *c, size_t nbytes) {
  return c->size <= 2 || nbytes <= c->direct_bytes;
}

static int reduce_common(tpucoll_comm *c, const void *in, void *out, size_t count,
                         int dtype, int op, int root) {
  int rc = check_dtype(dtype);
  if (rc) return rc;
  int kind = root < 0 ? TPUCOLL_ALL_REDUCE : TPUCOLL_REDUCE;
  if ((rc = tpucoll__check_reduce_op(dtype, op))) return rc;
  size_t es = tpu_dtype_size(dtype), per = c->slot_bytes / es;
  size_t chunks = (count + per - 1) / per;
  uint64_t p0 = c->chunk;
  if (chunks) memcpy(tpucoll__slot(c, p0, c->rank), in, (count < per ? count : per) * es);
  tpucoll__meta m = meta_of(kind, count, dtype, op, root < 0 ? 0 : root);
  if ((rc = exchange(c, &m))) return rc;
  c->chunk += chunks;
  int copy_out = root < 0 || root == c->rank;
  const void *srcs[TPUCOLL_MAX_RANKS];
  if (direct_reduce(c, count * es)) {
    /* every rank (or root) reduces whole chunks straight into `out`: no
     * result area, no second barrier; the same code in the same rank order
     * gives every rank the same bits */
    for (size_t i = 0; i < chunks; i++) {
      size_t off = i * per, n = count - off < per ? count - off : per;
      uint64_t p = p0 + i;
      if (i > 0) {
        memcpy(tpucoll__slot(c, p, c->rank), (const uint8_t *)in + off * es, n * es);
        if ((rc = tpucoll__barrier(c, tpucoll__kind_name(kind)))) return rc;
      }
      if (!copy_out) continue;
      for (int k = 0; k < c->size; k++) srcs[k] = tpucoll__slot(c, p, k);
      rc = tpucoll_reduce_buffers((uint8_t *)out + off * es, srcs, c->size, n, dtype, op, c->size);
      if (rc) return tpucoll__fail(c, rc, "%s", tpu_last_error());
    }
    return TPU_OK;
  }
  for (size_t i = 0; i < chunks; i++) {
    size_t off = i * per, n = count - off < per ? count - off : per;
    uint64_t p = p0 + i;
    if (i > 0) {
      memcpy(tpucoll__slot(c, p, c->rank), (const uint8_t *)in + off * es, n * es);
      if ((rc = tpucoll__barrier(c, tpucoll__kind_name(kind)))) return rc;
      if (copy_out)
        memcpy((uint8_t *)out + (off - per) * es, tpucoll__result(c, p - 1), per * es);
    }
    size_t lo = n * (size_t)c->rank / (size_t)c->size;
    size_t hi = n * ((size_t)c->rank + 1) / (size_t)c->size;
    if (hi > lo) {
      for (int k = 0; k < c->size; k++) srcs[k] = tpucoll__slot(c, p, k) + lo * es;
      rc = tpucoll_reduce_buffers(tpucoll__result(c, p) + lo * es, srcs, c->size, hi - lo, dtype,
                                  op, c->size);
      if (rc) return tpucoll__fail(c, rc, "%s", tpu_last_error());
    }
  }
  if (chunks) {
    if ((rc = tpucoll__barrier(c, tpucoll__kind_name(kind)))) return rc;
    size_t off = (chunks - 1) * per;
    if (copy_out)
      memcpy((uint8_t *)out + off * es, tpucoll__result(c, p0 + chunks - 1), (count - off) * es);
  }
  return TPU_OK;
}

int tpucoll_all_reduce(tpucoll_comm *c, const void *in, void *out, size_t count, int dtype,
                       int op) {
  return reduce_common(c, in, out, count, dtype, op, -1);
}

int tpucoll_reduce(tpucoll_comm *c, const void *in, void *out, size_t count, int dtype, int op,
                   int root) {
  if (root < 0 || root >= c->size)
    return tpu_error(TPU_E_INVALID, "tpu_dist: reduce root %d out of range [0, %d)", root,
                     c->size);
  return reduce_common(c, in, out, count, dtype, op, root);
}

int tpucoll_broadcast(tpucoll_comm *c, void *buf, size_t count, int dtype, int root) {
  int rc = check_dtype(dtype);
  if (rc) return rc;
  if (root < 0 || root >= c->size)
    return tpu_error(TPU_E_INVALID, "tpu_dist: broadcast root %d out of range [0, %d)", root,
                     c->size);
  size_t es = tpu_dtype_size(dtype), per = c->slot_bytes / es;
  /* chunk 0 is staged before the exchange, whose barrier is chunk 0's */
  uint64_t p0 = c->chunk;
  if (count && c->rank == root)
    memcpy(tpucoll__slot(c, p0, root), buf, (count < per ? count : per) * es);
  tpucoll__meta m = meta_of(TPUCOLL_BROADCAST, count, dtype, 0, root);
  if ((rc = exchange(c, &m))) return rc;
  for (size_t off = 0; off < count; off += per) {
    size_t n = count - off < per ? count - off : per;
    uint64_t p = c->chunk++;
    if (off > 0) {
      if (c->rank == root) memcpy(tpucoll__slot(c, p, root), (uint8_t *)buf + off * es, n * es);
      if ((rc = tpucoll__barrier(c, "broadcast"))) return rc;
    }
    if (c->rank != root) memcpy((uint8_t *)buf + off * es, tpucoll__slot(c, p, root), n * es);
  }
  return TPU_OK;
}

int tpucoll_all_gather(tpucoll_comm *c, const void *in, void *out, size_t count, int dtype) {
  int rc = check_dtype(dtype);
  if (rc) return rc;
  size_t es = tpu_dtype_size(dtype), per = c->slot_bytes / es;
  /* chunk 0 is staged before the exchange, whose barrier is chunk 0's */
  if (count)
    memcpy(tpucoll__slot(c, c->chunk, c->rank), in, (count < per ? count : per) * es);
  tpucoll__meta m = meta_of(TPUCOLL_ALL_GATHER, count, dtype, 0, 0);
  if ((rc = exchange(c, &m))) return rc;
  for (size_t off = 0; off < count; off += per) {
    size_t n = count - off < per ? count - off : per;
    uint64_t p = c->chunk++;
    if (off > 0) {
      memcpy(tpucoll__slot(c, p, c->rank), (const uint8_t *)in + off * es, n * es);
      if ((rc = tpucoll__barrier(c, "all_gather"))) return rc;
    }
    for (int k = 0; k < c->size; k++)
      if (k != c->rank || (const uint8_t *)in + off * es != (uint8_t *)out + ((size_t)k * count + off) * es)
        memcpy((uint8_t *)out + ((size_t)k * count + off) * es, tpucoll__slot(c, p, k), n * es);
  }
  return TPU_OK;
}

/* Each chunk: rank r stages piece k of its input in sub-slot k of its slot;
 * then reduces sub-slot r of every rank's slot straight into `out`. */
int tpucoll_reduce_scatter(tpucoll_comm *c, const void *in, void *out, size_t count, int dtype,
                           int op) {
  int rc = check_dtype(dtype);
  if (rc) return rc;
  if ((rc = tpucoll__check_reduce_op(dtype, op))) return rc;
  size_t es = tpu_dtype_size(dtype), per = c->slot_bytes / es / (size_t)c->size;
  const void *srcs[TPUCOLL_MAX_RANKS];
  /* chunk 0 is staged before the exchange, whose barrier is chunk 0's */
  size_t n0 = count < per ? count : per;
  for (int k = 0; k < c->size && n0; k++)
    memcpy(tpucoll__slot(c, c->chunk, c->rank) + (size_t)k * n0 * es,
           (const uint8_t *)in + (size_t)k * count * es, n0 * es);
  tpucoll__meta m = meta_of(TPUCOLL_REDUCE_SCATTER, count, dtype, op, 0);
  if ((rc = exchange(c, &m))) return rc;
  for (size_t off = 0; off < count; off += per) {
    size_t n = count - off < per ? count - off : per;
    uint64_t p = c->chunk++;
    if (off > 0) {
      uint8_t *mine = tpucoll__slot(c, p, c->rank);
      for (int k = 0; k < c->size; k++)
        memcpy(mine + (size_t)k * n * es, (const uint8_t *)in + ((size_t)k * count + off) * es,
               n * es);
      if ((rc = tpucoll__barrier(c, "reduce_scatter"))) return rc;
    }
    for (int k = 0; k < c->size; k++) srcs[k] = tpucoll__slot(c, p, k) + (size_t)c->rank * n * es;
    rc = tpucoll_reduce_buffers((uint8_t *)out + off * es, srcs, c->size, n, dtype, op, c->size);
    if (rc) return tpucoll__fail(c, rc, "%s", tpu_last_error());
  }
  return TPU_OK;
}

int tpucoll_all_to_all(tpucoll_comm *c, const void *in, const size_t *send_counts, void *out,
                       const size_t *recv_counts, int dtype) {
  int rc = check_dtype(dtype);
  if (rc) return rc;
  if (2 * c->size > TPUCOLL_MAX_RANKS)
    return tpu_error(TPU_E_INVALID, "tpu_dist: all_to_all supports at most %d ranks",
                     TPUCOLL_MAX_RANKS / 2);
  tpucoll__meta m = meta_of(TPUCOLL_ALL_TO_ALL, 0, dtype, 0, 0);
  for (int k = 0; k < c->size; k++) {
    m.counts[k] = send_counts[k];
    m.counts[c->size + k] = recv_counts[k];
  }
  if ((rc = exchange(c, &m))) return rc;
  size_t es = tpu_dtype_size(dtype);
  size_t sub = c->slot_bytes / (size_t)c->size / es; /* elements per sub-slot */
  uint64_t most = 0;
  uint64_t s = c->seq;
  for (int i = 0; i < c->size; i++)
    for (int j = 0; j < c->size; j++) {
      uint64_t v = c->ranks[i].meta[s & 1].counts[j];
      if (v > most) most = v;
    }
  size_t sdis[TPUCOLL_MAX_RANKS], rdis[TPUCOLL_MAX_RANKS], sa = 0, ra = 0;
  for (int k = 0; k < c->size; k++) {
    sdis[k] = sa;
    rdis[k] = ra;
    sa += send_counts[k];
    ra += recv_counts[k];
  }
  for (uint64_t off = 0; off < most; off += sub) {
    uint64_t p = c->chunk++;
    uint8_t *mine = tpucoll__slot(c, p, c->rank);
    for (int k = 0; k < c->size; k++) {
      size_t n = send_counts[k] > off ? send_counts[k] - off : 0;
      if (n > sub) n = sub;
      if (n) memcpy(mine + (size_t)k * sub * es, (const uint8_t *)in + (sdis[k] + off) * es, n * es);
    }
    if ((rc = tpucoll__barrier(c, "all_to_all"))) return rc;
    for (int k = 0; k < c->size; k++) {
      size_t n = recv_counts[k] > off ? recv_counts[k] - off : 0;
      if (n > sub) n = sub;
      if (n)
        memcpy((uint8_t *)out + (rdis[k] + off) * es,
               tpucoll__slot(c, p, k) + (size_t)c->rank * sub * es, n * es);
    }
  }
  return TPU_OK;
}

/* ---- point to point --------------------------------------------------- */

static uint8_t *p2p_buf(tpucoll_comm *c, int src, int dst, uint64_t chunk) {
  return c->p2p + (((size_t)src * c->size + dst) * 2 + (chunk & 1)) * c->p2p_bytes;
}

int tpucoll_send(tpucoll_comm *c, const void *buf, size_t nbytes, int peer, int64_t tag) {
  if (peer < 0 || peer >= c->size || peer == c->rank)
    return tpu_error(TPU_E_INVALID, "tpu_dist: send to invalid peer %d (rank %d of %d)", peer,
                     c->rank, c->size);
  int rc = tpucoll__check_alive(c);
  if (rc) return rc;
  tpucoll__chan *ch = &c->chans[(size_t)c->rank * c->size + peer];
  size_t off = 0;
  do {
    uint64_t j = c->sent[peer];
    /* both halves in flight at most: wait for chunk j-2's ack */
    if (j >= 2 && (rc = tpucoll__wait_ge(c, &ch->acked, j - 1, peer, "send"))) return rc;
    size_t n = nbytes - off < c->p2p_bytes ? nbytes - off : c->p2p_bytes;
    memcpy(p2p_buf(c, c->rank, peer, j), (const uint8_t *)buf + off, n);
    ch->msg_bytes[j & 1] = nbytes;
    ch->msg_tag[j & 1] = tag;
    atomic_store_explicit(&ch->posted, j + 1, memory_order_release);
    tpucoll__ring(c);
    c->sent[peer] = j + 1;
    off += n;
  } while (off < nbytes);
  return TPU_OK;
}

int tpucoll_recv(tpucoll_comm *c, void *buf, size_t nbytes, int peer, int64_t tag) {
  if (peer < 0 || peer >= c->size || peer == c->rank)
    return tpu_error(TPU_E_INVALID, "tpu_dist: recv from invalid peer %d (rank %d of %d)", peer,
                     c->rank, c->size);
  int rc = tpucoll__check_alive(c);
  if (rc) return rc;
  tpucoll__chan *ch = &c->chans[(size_t)peer * c->size + c->rank];
  size_t off = 0;
  do {
    uint64_t j = c->recvd[peer];
    if ((rc = tpucoll__wait_ge(c, &ch->posted, j + 1, peer, "recv"))) return rc;
    if (off == 0 && ch->msg_tag[j & 1] != tag)
      return tpu_error(TPU_E_VALUE,
                       "tpu_dist: tag mismatch: rank %d posted a recv with tag %lld from rank %d, "
                       "whose next message has tag %lld (messages of a pair match in order)",
                       c->rank, (long long)tag, peer, (long long)ch->msg_tag[j & 1]);
    if (ch->msg_bytes[j & 1] != nbytes)
      return tpucoll__fail(c, TPU_E_INVALID,
                       "tpu_dist: size mismatch: rank %d posted a recv of %zu bytes but rank %d "
                       "sent %llu bytes",
                       c->rank, nbytes, peer, (unsigned long long)ch->msg_bytes[j & 1]);
    size_t n = nbytes - off < c->p2p_bytes ? nbytes - off : c->p2p_bytes;
    memcpy((uint8_t *)buf + off, p2p_buf(c, peer, c->rank, j), n);
    atomic_store_explicit(&ch->acked, j + 1, memory_order_release);
    tpucoll__ring(c);
    c->recvd[peer] = j + 1;
    off += n;
  } while (off < nbytes);
  return TPU_OK;
}

int tpucoll_run(tpucoll_comm *c, const tpucoll_desc *d) {
  switch (d->kind) {
    case TPUCOLL_BARRIER: return tpucoll_barrier(c);
    case TPUCOLL_ALL_REDUCE: return tpucoll_all_reduce(c, d->in, d->out, d->count, d->dtype, d->op);
    case TPUCOLL_BROADCAST: return tpucoll_broadcast(c, d->out, d->count, d->dtype, d->root);
    case TPUCOLL_REDUCE:
      return tpucoll_reduce(c, d->in, d->out, d->count, d->dtype, d->op, d->root);
    case TPUCOLL_ALL_GATHER: return tpucoll_all_gather(c, d->in, d->out, d->count, d->dtype);
    case TPUCOLL_REDUCE_SCATTER:
      return tpucoll_reduce_scatter(c, d->in, d->out, d->count, d->dtype, d->op);
    case TPUCOLL_ALL_TO_ALL:
      return tpucoll_all_to_all(c, d->in, d->send_counts, d->out, d->recv_counts, d->dtype);
    case TPUCOLL_SEND: return tpucoll_send(c, d->in, d->count, d->root, d->tag);
    case TPUCOLL_RECV: return tpucoll_recv(c, d->out, d->count, d->root, d->tag);
    default: return tpu_error(TPU_E_INVALID, "tpu_dist: unknown collective kind %d", d->kind);
  }
}

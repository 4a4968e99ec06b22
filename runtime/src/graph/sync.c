/* graph/sync.c - the runtime's flush policy for waits (see tpu_graph.h,
 * "waits and copies"): every wait a caller above the recorder asks for
 * flushes the device's pending Fused Eager ops first, with the reason the
 * flush counters report, then waits on the runtime's streams. The copy
 * engine (graph/copy.c) follows the same policy for copies.
 */
#include "graph/internal.h"
#include "tpu_rt.h"

int tpug_synchronize_device(int dev) {
  if (!tpurt_device_is_open(dev)) { /* nothing was ever enqueued on it */
    if (dev < 0 || dev >= tpurt_device_count())
      return tpu_error(TPU_E_INVALID, "invalid device tpu:%d (%d visible)", dev,
                       tpurt_device_count());
    return TPU_OK;
  }
  int rc = tpug_flush(dev, TPUG_R_SYNC);
  return rc < 0 ? rc : tpurt_device_synchronize(dev);
}

int tpug_synchronize_stream(tpurt_stream *s) {
  if (!s) return tpu_error(TPU_E_INVALID, "tpug_synchronize_stream: NULL stream");
  int rc = tpug_flush(tpurt_stream_device(s), TPUG_R_SYNC);
  return rc < 0 ? rc : tpurt_stream_synchronize(s);
}

int tpug_synchronize_for_host(int dev) {
  int rc = tpug_flush(dev, TPUG_R_D2H);
  return rc < 0 ? rc : tpurt_device_synchronize(dev);
}

int tpug_event_record(tpurt_event *e, tpurt_stream *s) {
  if (!e || !s) return tpu_error(TPU_E_INVALID, "tpug_event_record: NULL event or stream");
  int rc = tpug_flush(tpurt_stream_device(s), TPUG_R_SYNC);
  return rc < 0 ? rc : tpurt_event_record(e, s);
}

int tpug_stream_wait_event(tpurt_stream *s, tpurt_event *e) {
  if (!e || !s) return tpu_error(TPU_E_INVALID, "tpug_stream_wait_event: NULL event or stream");
  int rc = tpug_flush(tpurt_stream_device(s), TPUG_R_SYNC);
  return rc < 0 ? rc : tpurt_stream_wait_event(s, e);
}

int tpug_stream_query(tpurt_stream *s) {
  if (s && tpug_pending_ops(tpurt_stream_device(s)) > 0) return 0;
  return tpurt_stream_query(s);
}

int tpug_malloc(int dev, int stream_id, size_t n, void **out) {
  int rc = tpurt_malloc_on(dev, stream_id, n, out);
  if (rc == TPU_E_OOM && tpug_pending_ops(dev) > 0) { /* memory pressure */
    rc = tpug_flush(dev, TPUG_R_OOM);
    if (rc >= 0) rc = tpurt_device_synchronize(dev);
    if (rc >= 0) rc = tpurt_malloc_on(dev, stream_id, n, out);
  }
  if (rc >= 0) tpug_note_alloc(*out); /* deferring modes: a promise until a flush */
  return rc;
}

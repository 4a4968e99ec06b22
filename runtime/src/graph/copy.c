/* graph/copy.c - the copy engine: host->device (staged), device->host
 * (synchronous) and device->device copies, all with dtype conversion,
 * executed by tpux_copy on a stream's worker. It lives in the graph layer
 * because a copy is ordered against the Fused Eager recorder: pending ops
 * that write the source or use the destination are flushed first (reasons
 * TPUG_R_D2H / TPUG_R_COPY), and a same-chip device copy in Fuse mode (or
 * while capturing) is recorded as a one-op graph instead.
 */
#include <stdlib.h>
#include <string.h>

#include "graph/internal.h"
#include "tpu_exec.h"
#include "tpu_rt.h"

typedef struct copy_task {
  tpu_view dst, src;
  void *staging; /* owned host buffer (h2d), or NULL */
} copy_task;

static int copy_run(void *ctx) {
  copy_task *t = ctx;
  return tpux_copy(&t->dst, &t->src);
}

static void copy_free(void *ctx) {
  copy_task *t = ctx;
  free(t->staging);
  free(t);
}

static int check_pair(const tpu_view *dst, const tpu_view *src) {
  if (!dst || !src) return tpu_error(TPU_E_INVALID, "copy: NULL view");
  if (tpu_dtype_size(dst->dtype) == 0 || tpu_dtype_size(src->dtype) == 0)
    return tpu_error(TPU_E_UNSUPPORTED, "copy: unsupported dtype");
  if (dst->ndim != src->ndim)
    return tpu_error(TPU_E_INVALID, "copy: rank mismatch (%d vs %d)",
                     dst->ndim, src->ndim);
  for (int i = 0; i < dst->ndim; i++)
    if (dst->sizes[i] != src->sizes[i])
      return tpu_error(TPU_E_INVALID,
                       "copy: size mismatch at dim %d (%lld vs %lld)", i,
                       (long long)dst->sizes[i], (long long)src->sizes[i]);
  return TPU_OK;
}

static int enqueue_copy(tpurt_stream *s, const tpu_view *dst,
                        const tpu_view *src, void *staging) {
  copy_task *t = malloc(sizeof *t);
  if (!t) {
    free(staging);
    return tpu_error(TPU_E_INTERNAL, "copy: out of host memory");
  }
  t->dst = *dst;
  t->src = *src;
  t->staging = staging;
  return tpurt_stream_enqueue(s, copy_run, copy_free, t);
}

int tpug_copy_h2d(tpurt_stream *s, const tpu_view *dst, const tpu_view *src) {
  int rc = check_pair(dst, src);
  if (rc < 0) return rc;
  if (!s) return tpu_error(TPU_E_INVALID, "copy: NULL stream");
  int64_t n = tpu_view_numel(src);
  if (n == 0) return TPU_OK;
  /* Fused Eager: pending ops using dst must run before it is overwritten */
  rc = tpug_flush_if_uses(tpurt_stream_device(s), dst->base, TPUG_R_COPY);
  if (rc < 0) return rc;
  size_t es = tpu_dtype_size(src->dtype);
  void *buf = malloc((size_t)n * es);
  if (!buf) return tpu_error(TPU_E_OOM, "copy: cannot stage %lld bytes",
                             (long long)((size_t)n * es));
  tpu_view stage;
  tpu_view_init_contiguous(&stage, buf, src->dtype, src->ndim, src->sizes);
  /* Stage now: the caller may overwrite its memory once we return. */
  if (tpu_view_is_contiguous(src)) {
    memcpy(buf, (const char *)src->base + src->offset * (int64_t)es,
           (size_t)n * es);
  } else {
    rc = tpux_copy(&stage, src);
    if (rc < 0) {
      free(buf);
      return rc;
    }
  }
  return enqueue_copy(s, dst, &stage, buf);
}

static int d2h(tpurt_stream *s, const tpu_view *dst, const tpu_view *src, int wait) {
  int rc = check_pair(dst, src);
  if (rc < 0) return rc;
  if (!s) return tpu_error(TPU_E_INVALID, "copy: NULL stream");
  rc = tpug_flush(tpurt_stream_device(s), TPUG_R_D2H); /* Fused Eager */
  if (rc < 0) return rc;
  if (tpu_view_numel(src) > 0) {
    rc = enqueue_copy(s, dst, src, NULL);
    if (rc < 0) return rc;
  }
  return wait ? tpurt_stream_synchronize(s) : TPU_OK;
}

int tpug_copy_d2h(tpurt_stream *s, const tpu_view *dst, const tpu_view *src) {
  return d2h(s, dst, src, 1);
}

int tpug_copy_d2h_async(tpurt_stream *s, const tpu_view *dst, const tpu_view *src) {
  return d2h(s, dst, src, 0);
}

/* A same-chip copy as a one-op graph for the Fused Eager recorder. */
typedef struct copy_op {
  tpuir_graph *g;
  tpu_view in, out;
} copy_op;

static void copy_op_free(void *ctx) {
  copy_op *c = ctx;
  tpuir_graph_free(c->g);
  free(c);
}

static int record_copy(tpurt_stream *s, const tpu_view *dst,
                       const tpu_view *src) {
  copy_op *c = calloc(1, sizeof *c);
  if (!c || !(c->g = tpuir_graph_new())) {
    free(c);
    return tpu_error(TPU_E_INTERNAL, "copy: out of host memory");
  }
  c->in = *src;
  c->out = *dst;
  tpuir_val v = tpuir_param(c->g, src->dtype, src->ndim, src->sizes);
  if (v >= 0 && src->dtype != dst->dtype) v = tpuir_convert(c->g, v, dst->dtype);
  int rc = v < 0 ? v : tpuir_set_outputs(c->g, 1, &v);
  if (rc < 0) {
    copy_op_free(c);
    return rc;
  }
  return tpug_submit(s, c->g, 1, &c->in, 1, &c->out, 0, copy_op_free, c);
}

int tpug_copy_d2d(tpurt_stream *s, const tpu_view *dst, const tpu_view *src) {
  int rc = check_pair(dst, src);
  if (rc < 0) return rc;
  if (!s) return tpu_error(TPU_E_INVALID, "copy: NULL stream");
  if (tpu_view_numel(src) == 0) return TPU_OK;
  int sdev = tpurt_ptr_device(src->base), ddev = tpurt_stream_device(s);
  if ((tpug_get_mode() != TPUG_STRICT || tpug_capturing(ddev)) && (sdev < 0 || sdev == ddev))
    return record_copy(s, dst, src); /* fused with the pending ops */
  /* Fused Eager: pending ops producing src / using dst run first */
  if (sdev >= 0) rc = tpug_flush_if_uses(sdev, src->base, TPUG_R_COPY);
  if (rc >= 0) rc = tpug_flush_if_uses(ddev, dst->base, TPUG_R_COPY);
  if (rc < 0) return rc;
  if (sdev >= 0 && sdev != tpurt_stream_device(s)) {
    /* the source's chip must have produced its data first */
    rc = tpurt_device_synchronize(sdev);
    if (rc < 0) return rc;
  }
  return enqueue_copy(s, dst, src, NULL);
}

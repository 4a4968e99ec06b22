/* exec/vtpu/shape.c - vTPU leaves and data-movement nodes: CONST, IOTA, CONCAT,
 * PAD, and the stride computation behind copy-free RESHAPE. */
#include <stdlib.h>

#include "exec/vtpu/internal.h"

/* torch's computeStride: strides that view (sizes, strides) with new_sizes
 * (same numel) without a copy, if they exist. */
int tpux__reshape_strides(int ndim, const int64_t *sizes,
                          const int64_t *strides, int new_ndim,
                          const int64_t *new_sizes, int64_t *new_strides) {
  int64_t numel = 1;
  for (int i = 0; i < ndim; i++) numel *= sizes[i];
  if (numel == 0 || ndim == 0) {
    int64_t s = 1;
    for (int i = new_ndim - 1; i >= 0; i--) {
      new_strides[i] = s;
      s *= new_sizes[i] > 1 ? new_sizes[i] : 1;
    }
    return 1;
  }
  int view_d = new_ndim - 1;
  int64_t chunk_base_stride = strides[ndim - 1];
  int64_t tensor_numel = 1, view_numel = 1;
  for (int tensor_d = ndim - 1; tensor_d >= 0; tensor_d--) {
    tensor_numel *= sizes[tensor_d];
    if (tensor_d == 0 ||
        (sizes[tensor_d - 1] != 1 &&
         strides[tensor_d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 &&
             (view_numel < tensor_numel || new_sizes[view_d] == 1)) {
        new_strides[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_sizes[view_d];
        view_d--;
      }
      if (view_numel != tensor_numel) return 0;
      if (tensor_d > 0) {
        chunk_base_stride = strides[tensor_d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}

/* Class value of a CONST node. */
static void const_value(const tpuir_node *n, void *out) {
  switch (xk_cls(n->dtype)) {
  case XK_F32: *(float *)out = (float)n->fval; break;
  case XK_F64: *(double *)out = n->fval; break;
  default: *(int64_t *)out = n->ival; break;
  }
}

int tpux__eval_const(xctx *c, int t) {
  int rc = tpux__alloc_value(c, t);
  if (rc) return rc;
  uint64_t v = 0;
  const tpuir_node *n = tpuir_get_node(c->g, t);
  const_value(n, &v);
  tpux__store(n->dtype, c->vals[t].mem, 1, 1, &v);
  return TPU_OK;
}

typedef struct iota_job {
  char *out;
  int dt;
  int64_t inner, size, total;
} iota_job;

static void iota_range(void *ctx, int64_t b, int64_t e) {
  iota_job *j = ctx;
  int64_t ib[XK_TILE];
  double db[XK_TILE];
  float fb[XK_TILE];
  size_t es = tpu_dtype_size(j->dt);
  int cls = xk_cls(j->dt);
  for (int64_t tile = b; tile < e; tile++) {
    int64_t L = tile * XK_TILE, n = j->total - L;
    if (n > XK_TILE) n = XK_TILE;
    /* (L + i) / inner % size, stepped: two divisions per tile, not per element */
    int64_t r = L % j->inner, v = L / j->inner % j->size;
    for (int64_t i = 0; i < n; i++) {
      ib[i] = v;
      if (++r == j->inner) {
        r = 0;
        if (++v == j->size) v = 0;
      }
    }
    void *src = ib;
    if (cls == XK_F32) {
      for (int64_t i = 0; i < n; i++) fb[i] = (float)ib[i];
      src = fb;
    } else if (cls == XK_F64) {
      for (int64_t i = 0; i < n; i++) db[i] = (double)ib[i];
      src = db;
    }
    tpux__store(j->dt, j->out + L * (int64_t)es, 1, n, src);
  }
}

int tpux__eval_iota(xctx *c, int t) {
  int rc = tpux__alloc_value(c, t);
  if (rc) return rc;
  const tpuir_node *n = tpuir_get_node(c->g, t);
  iota_job j = {tpux__value_data(c, t), n->dtype, 1, n->sizes[n->dim], 1};
  for (int i = n->dim + 1; i < n->ndim; i++) j.inner *= n->sizes[i];
  for (int i = 0; i < n->ndim; i++) j.total *= n->sizes[i];
  if (j.total == 0) return TPU_OK;
  int64_t tiles = (j.total + XK_TILE - 1) / XK_TILE;
  tpurt_parallel_for(tiles, XK_GRAIN / XK_TILE, iota_range, &j);
  return TPU_OK;
}

int tpux__eval_concat(xctx *c, int t) {
  int rc = tpux__alloc_value(c, t);
  if (rc) return rc;
  const tpuir_node *n = tpuir_get_node(c->g, t);
  tpu_view dst = c->vals[t].v;
  int d = n->dim;
  int64_t pos = 0;
  for (int k = 0; k < n->nlist; k++) {
    const tpu_view *src = &c->vals[n->list[k]].v;
    tpu_view part = dst;
    part.sizes[d] = src->sizes[d];
    part.offset = dst.offset + pos * dst.strides[d];
    pos += src->sizes[d];
    if (tpu_view_numel(&part) == 0) continue;
    rc = tpux__copy_nocheck(&part, src);
    if (rc) return rc;
  }
  return TPU_OK;
}

int tpux__eval_pad(xctx *c, int t) {
  int rc = tpux__alloc_value(c, t);
  if (rc) return rc;
  const tpuir_node *n = tpuir_get_node(c->g, t);
  const tpu_view *out = &c->vals[t].v;
  if (tpu_view_numel(out) == 0) return TPU_OK;
  const tpu_view *pv = &c->vals[n->in[1]].v;
  if (tpu_dtype_is_complex(pv->dtype)) {
    double cv[2] = {0, 0};
    const char *pp = (const char *)pv->base + pv->offset * (int64_t)tpu_dtype_size(pv->dtype);
    if (pv->dtype == TPU_C128) memcpy(cv, pp, 16);
    else { float f[2]; memcpy(f, pp, 8); cv[0] = f[0]; cv[1] = f[1]; }
    rc = tpux__fill_complex(out, cv[0], cv[1]);
  } else {
  uint64_t val = 0;
  tpux__load(pv->dtype,
             (const char *)pv->base + pv->offset * (int64_t)tpu_dtype_size(pv->dtype),
             0, 1, &val);
  tpux__fill(out, &val);
  }
  if (rc) return rc;
  tpu_view src = c->vals[n->in[0]].v, dst = *out;
  for (int i = 0; i < n->ndim; i++) {
    int64_t lo = n->a[i], step = n->c[i] + 1, in = src.sizes[i],
            os = out->sizes[i];
    int64_t j0 = lo >= 0 ? 0 : (-lo + step - 1) / step;
    int64_t j1 = os - 1 - lo >= 0 ? (os - 1 - lo) / step + 1 : 0;
    if (j1 > in) j1 = in;
    int64_t cnt = j1 > j0 ? j1 - j0 : 0;
    if (cnt == 0) return TPU_OK;
    src.offset += j0 * src.strides[i];
    src.sizes[i] = cnt;
    dst.offset += (lo + j0 * step) * out->strides[i];
    dst.strides[i] = out->strides[i] * step;
    dst.sizes[i] = cnt;
  }
  return tpux__copy_nocheck(&dst, &src);
}

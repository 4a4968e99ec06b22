/* lower/index.c - indexing and data-movement ops: index_select, gather,
 * scatter/scatter_add, index_add, advanced indexing (index.Tensor,
 * index_put_), cat, stack, flip, roll, tril/triu, channel_shuffle;
 * compaction with a static size (nonzero_static, tril/triu_indices);
 * masked_scatter and put (flat scatter with range checks at run time).
 * Ops that read index tensors set b->sync so out-of-range indices raise
 * IndexError at the call.
 */
#include <stdio.h>
#include <string.h>

#include "lower/internal.h"
#include "tpu_graph.h"
#include "tpu_rt.h"

static int idx_dtype_ok(int dt) { return dt == TPU_I64 || dt == TPU_I32; }

/* ---- index_select / gather / scatter_add / index_add ------------------- */

static int index_select_fn(tpulw__b *b) {
  const tpulw_tensor *self = tpulw__tensor_arg(b, "self");
  const tpulw_tensor *index = tpulw__tensor_arg(b, "index");
  if (!self || !index || self->device < 0 || index->device < 0)
    return tpu_error(TPU_E_UNSUPPORTED, "index_select: missing operand");
  if (!idx_dtype_ok(index->view.dtype))
    return tpu_error(TPU_E_INVALID, "index_select(): Expected dtype int32 or int64 for index");
  if (index->view.ndim > 1)
    return tpu_error(TPU_E_INDEX, "index_select(): Index is supposed to be a vector");
  int od = tpulw__out_dtype(b);
  if (od >= 0 && od != self->view.dtype)
    return tpu_error(TPU_E_INVALID, "index_select(): self and result must have the same scalar type");
  tpuir_val x = tpulw__tensor(b, self);
  tpulw__shape s = tpulw__info(b, x);
  int dim;
  int rc = tpulw__wrap_dim(tpulw__int(b, "dim", 0), s.ndim, &dim);
  if (rc < 0) return rc;
  tpuir_val idx = tpulw__tensor(b, index);
  if (s.ndim == 0) { /* scalar source: index must select element 0 */
    int64_t k = tpu_view_numel(&index->view);
    if (k != 1)
      return tpu_error(TPU_E_INVALID,
                       "index_select(): Index to scalar can have only 1 value, got %lld value(s)",
                       (long long)k);
    int64_t one = 1;
    idx = tpulw__reshape(b, idx, 1, &one);
    x = tpulw__reshape(b, x, 1, &one);
  }
  b->sync = 1;
  tpuir_val r = tpuir_index_select(b->g, x, dim, idx);
  if (s.ndim == 0) r = tpulw__reshape(b, r, 0, NULL); /* CPU: result is 0-dim */
  return tpulw__result(b, r);
}

static int gather_fn(tpulw__b *b) {
  const tpulw_tensor *self = tpulw__tensor_arg(b, "self");
  const tpulw_tensor *index = tpulw__tensor_arg(b, "index");
  if (!self || !index || self->device < 0 || index->device < 0)
    return tpu_error(TPU_E_UNSUPPORTED, "gather: missing operand");
  if (tpu_view_numel(&index->view) != 0 && !idx_dtype_ok(index->view.dtype))
    return tpu_error(TPU_E_INVALID, "gather(): Expected dtype int32/int64 for index");
  b->out_rule = LW_OUT_SAME;
  const tpu_view *sv = &self->view, *iv = &index->view;
  int dim;
  int rc = tpulw__wrap_dim(tpulw__int(b, "dim", 0), sv->ndim, &dim);
  if (rc < 0) return rc;
  int snd = sv->ndim ? sv->ndim : 1, ind = iv->ndim ? iv->ndim : 1;
  if (tpu_view_numel(iv) != 0 && snd != ind)
    return tpu_error(TPU_E_INVALID,
                     "Index tensor must have the same number of dimensions as input tensor");
  for (int d = 0; d < iv->ndim && d < sv->ndim; d++)
    if (d != dim && iv->sizes[d] > sv->sizes[d])
      return tpu_error(TPU_E_INVALID,
                       "Size does not match at dimension %d expected index to be "
                       "smaller than self apart from dimension %d", d, dim);
  tpuir_val x = tpulw__tensor(b, self), idx = tpulw__tensor(b, index);
  if (tpu_view_numel(iv) == 0)
    return tpulw__result(b, tpulw__full(b, sv->dtype, iv->ndim, iv->sizes, 0));
  if (sv->ndim == 0 || iv->ndim == 0) {
    int64_t one = 1;
    x = tpulw__reshape(b, x, 1, &one);
    idx = tpulw__reshape(b, idx, 1, &one);
  }
  b->sync = 1;
  b->err_remap = LW_ERR_RUNTIME;
  tpuir_val r = tpuir_gather(b->g, x, dim, idx);
  return tpulw__result(b, tpulw__reshape(b, r, iv->ndim, iv->sizes));
}

/* shared checks/values for scatter-like ops; src sliced to index's shape */
static int scatter_prep(tpulw__b *b, tpuir_val *x, tpuir_val *idx, tpuir_val *src,
                        int *dim, int dt) {
  const tpulw_tensor *self = tpulw__tensor_arg(b, "self");
  const tpulw_tensor *index = tpulw__tensor_arg(b, "index");
  if (!self || !index || self->device < 0 || index->device < 0)
    return tpu_error(TPU_E_UNSUPPORTED, "%s: missing operand", b->base);
  const tpu_view *sv = &self->view, *iv = &index->view;
  /* CPU skips the index dtype check for an empty index */
  if (tpu_view_numel(iv) != 0 && !idx_dtype_ok(iv->dtype))
    return tpu_error(TPU_E_INVALID, "scatter(): Expected dtype int32/int64 for index");
  const tpulw_tensor *st0 = tpulw__tensor_arg(b, "src");
  if (st0 && st0->view.dtype != sv->dtype)
    return tpu_error(TPU_E_INVALID, "scatter(): Expected self.dtype to be equal to src.dtype");
  int rc = tpulw__wrap_dim(tpulw__int(b, "dim", 0), sv->ndim, dim);
  if (rc < 0) return rc;
  if (iv->ndim != sv->ndim && tpu_view_numel(iv) != 0 && sv->ndim > 0)
    return tpu_error(TPU_E_INVALID,
                     "Index tensor must have the same number of dimensions as self tensor");
  if (sv->ndim == 0) return tpu_error(TPU_E_UNSUPPORTED, "%s: 0-dim self", b->base);
  *x = tpulw__convert(b, tpulw__tensor(b, self), dt);
  *idx = tpulw__tensor(b, index);
  if (tpu_view_numel(iv) == 0) { /* CPU: no-op, shape checks skipped */
    *src = *x;
    return TPU_OK;
  }
  const tpulw_tensor *st = tpulw__tensor_arg(b, "src");
  tpulw__scalar val;
  if (st) {
    if (st->view.ndim != iv->ndim)
      return tpu_error(TPU_E_INVALID,
                       "Index tensor must have the same number of dimensions as src tensor");
    for (int d = 0; d < iv->ndim; d++)
      if (iv->sizes[d] > st->view.sizes[d] || (d != *dim && iv->sizes[d] > sv->sizes[d]))
        return tpu_error(TPU_E_INVALID,
                         "Expected index %s to be smaller than self apart from "
                         "dimension %d and to be smaller size than src", "shape", *dim);
    tpuir_val s = tpulw__convert(b, tpulw__tensor(b, st), dt);
    int64_t start[TPU_MAX_DIMS] = {0}, stride[TPU_MAX_DIMS];
    int need = 0;
    for (int d = 0; d < iv->ndim; d++) {
      stride[d] = 1;
      need |= iv->sizes[d] != st->view.sizes[d];
    }
    if (need) s = tpuir_slice(b->g, s, start, iv->sizes, stride);
    *src = s;
  } else if (tpulw__scalar_arg(b, "value", &val)) {
    *src = tpulw__bcast(b, tpulw__const_s(b, dt, val), iv->ndim, iv->sizes);
  } else {
    return tpu_error(TPU_E_UNSUPPORTED, "%s: no src", b->base);
  }
  b->sync = 1;
  b->err_remap = LW_ERR_RUNTIME;
  return TPU_OK;
}

static int scatter_add_fn(tpulw__b *b) {
  const tpulw_tensor *self = tpulw__tensor_arg(b, "self");
  if (!self) return tpu_error(TPU_E_UNSUPPORTED, "scatter_add: no self");
  int dt = self->view.dtype;
  const char *reduce = tpulw__str(b, "reduce");
  if (reduce && strcmp(reduce, "multiply") == 0) { /* scatter_reduce prod, self included */
    tpuir_val x, idx, src;
    int dim;
    int rc = scatter_prep(b, &x, &idx, &src, &dim, dt);
    if (rc < 0) return rc;
    if (tpu_view_numel(&tpulw__tensor_arg(b, "index")->view) == 0) return tpulw__result(b, x);
    return tpulw__scatter_reduce(b, self, dim, tpulw__convert(b, idx, TPU_I64), src, "prod", 1);
  }
  if (reduce && strcmp(reduce, "add") != 0 && strcmp(reduce, "sum") != 0)
    return tpu_error(TPU_E_INVALID, "reduce argument must be either add or multiply.");
  int cdt = dt == TPU_BOOL ? TPU_I32 : tpulw__opmath(dt);
  tpuir_val x, idx, src;
  int dim;
  int rc = scatter_prep(b, &x, &idx, &src, &dim, cdt);
  if (rc < 0) return rc;
  tpulw__shape is = tpulw__info(b, idx);
  if (tpulw__numel(&is) == 0) return tpulw__result_as(b, x, dt);
  tpuir_val r = tpuir_scatter_add(b->g, x, dim, idx, src);
  if (dt == TPU_BOOL) r = tpulw__bin(b, TPUIR_NE, r, tpulw__const(b, cdt, 0));
  return tpulw__result_as(b, r, dt);
}

/* scatter (overwrite): positions hit once take src; positions hit several
 * times (undefined order in PyTorch) take the mean of their sources. */
static int scatter_fn(tpulw__b *b) {
  const tpulw_tensor *self = tpulw__tensor_arg(b, "self");
  if (!self) return tpu_error(TPU_E_UNSUPPORTED, "scatter: no self");
  if (tpulw__str(b, "reduce")) return scatter_add_fn(b);
  int dt = self->view.dtype;
  int cdt = tpu_dtype_is_float(dt) ? tpulw__opmath(dt) : TPU_I64;
  tpuir_val x, idx, src;
  int dim;
  int rc = scatter_prep(b, &x, &idx, &src, &dim, cdt);
  if (rc < 0) return rc;
  tpulw__shape is = tpulw__info(b, idx), xs = tpulw__info(b, x);
  if (tpulw__numel(&is) == 0) return tpulw__result_as(b, x, dt);
  tpuir_val zeros = tpulw__full(b, cdt, xs.ndim, xs.sizes, 0);
  tpuir_val cnt = tpuir_scatter_add(b->g, zeros, dim, idx, tpulw__full(b, cdt, is.ndim, is.sizes, 1));
  tpuir_val sum = tpuir_scatter_add(b->g, zeros, dim, idx, src);
  tpuir_val hit = tpulw__bin(b, TPUIR_GT, cnt, tpulw__const(b, cdt, 0));
  tpuir_val safe = tpulw__sel(b, hit, cnt, tpulw__const(b, cdt, 1));
  tpuir_val r = tpulw__sel(b, hit, tpulw__bin(b, TPUIR_DIV, sum, safe), x);
  return tpulw__result_as(b, r, dt);
}

static int index_add_fn(tpulw__b *b) {
  const tpulw_tensor *self = tpulw__tensor_arg(b, "self");
  const tpulw_tensor *index = tpulw__tensor_arg(b, "index");
  const tpulw_tensor *source = tpulw__tensor_arg(b, "source");
  if (!self || !index || !source || index->device < 0)
    return tpu_error(TPU_E_UNSUPPORTED, "index_add: missing operand");
  if (!idx_dtype_ok(index->view.dtype))
    return tpu_error(TPU_E_INVALID, "index_add_(): Expected dtype int32/int64 for index");
  if (index->view.ndim > 1)
    return tpu_error(TPU_E_INDEX, "index_add_(): Index is supposed to be a vector");
  int dt = self->view.dtype;
  if (source->view.dtype != dt)
    return tpu_error(TPU_E_INVALID,
                     "index_add_(): self (%s) and source (%s) must have the same scalar type",
                     tpulw__torch_name(dt), tpulw__torch_name(source->view.dtype));
  int cdt = dt == TPU_BOOL ? TPU_I32 : tpulw__opmath(dt);
  tpuir_val x = tpulw__convert(b, tpulw__tensor(b, self), cdt);
  tpuir_val src = tpulw__convert(b, tpulw__tensor(b, source), cdt);
  tpulw__shape s = tpulw__info(b, x);
  int dim;
  int rc = tpulw__wrap_dim(tpulw__int(b, "dim", 0), s.ndim, &dim);
  if (rc < 0) return rc;
  tpulw__scalar alpha = tpulw__scalar_i(1);
  tpulw__scalar_arg(b, "alpha", &alpha);
  if (alpha.f != 1.0) src = tpulw__bin(b, TPUIR_MUL, src, tpulw__const_s(b, cdt, alpha));
  tpuir_val idx = tpulw__tensor(b, index);
  int scalar = s.ndim == 0;
  if (scalar) {
    int64_t one = 1;
    x = tpulw__reshape(b, x, 1, &one);
    src = tpulw__reshape(b, src, 1, &one);
    idx = tpulw__reshape(b, idx, 1, &one);
  } else if (index->view.ndim == 0) {
    int64_t one = 1;
    idx = tpulw__reshape(b, idx, 1, &one);
  }
  b->sync = 1;
  b->err_remap = LW_ERR_RUNTIME;
  tpuir_val r = tpuir_index_add(b->g, x, dim, idx, src);
  if (scalar) r = tpulw__reshape(b, r, 0, NULL);
  if (dt == TPU_BOOL) r = tpulw__bin(b, TPUIR_NE, r, tpulw__const(b, cdt, 0));
  return tpulw__result_as(b, r, dt);
}

/* index as int64 with negatives wrapped by `size` (values < -size stay
 * negative and fail the executor's range check) */
static tpuir_val wrap_index(tpulw__b *b, tpuir_val idx, int64_t size) {
  idx = tpulw__convert(b, idx, TPU_I64);
  tpuir_val zero = tpulw__const(b, TPU_I64, 0);
  return tpulw__sel(b, tpulw__bin(b, TPUIR_LT, idx, zero), tpulw__bin_c(b, TPUIR_ADD, idx, (double)size), idx);
}

/* index_fill_(self, dim, index, value) / index_copy(self, dim, index, source) */
static int index_fill_copy_fn(tpulw__b *b) {
  int is_copy = strncmp(b->base, "index_copy", 10) == 0;
  const tpulw_tensor *self = tpulw__tensor_arg(b, "self");
  const tpulw_tensor *index = tpulw__tensor_arg(b, "index");
  if (!self || !index || index->device < 0)
    return tpu_error(TPU_E_UNSUPPORTED, "%s: missing operand", b->base);
  if (index->view.dtype != TPU_I64)
    return tpu_error(TPU_E_INVALID, "%s(): Expected dtype int64 for index",
                     is_copy ? "index_copy_" : "index_fill_");
  if (index->view.ndim > 1)
    return tpu_error(TPU_E_INVALID, "Index is supposed to be a vector");
  int dt = self->view.dtype;
  tpuir_val x = tpulw__tensor(b, self);
  tpulw__shape s = tpulw__info(b, x);
  int dim;
  int rc = tpulw__wrap_dim(tpulw__int(b, "dim", 0), s.ndim, &dim);
  if (rc < 0) return rc;
  int scalar = s.ndim == 0; /* a 0-dim self acts as [1] */
  if (scalar) {
    int64_t one = 1;
    x = tpulw__reshape(b, x, 1, &one);
    s = tpulw__info(b, x);
  }
  int64_t size = s.sizes[dim], k = tpu_view_numel(&index->view);
  tpuir_val idx = tpulw__reshape(b, tpulw__tensor(b, index), 1, &k);
  if (!is_copy) idx = wrap_index(b, idx, size);
  b->sync = 1;
  b->err_remap = is_copy ? LW_ERR_RUNTIME : LW_ERR_DIM0 + dim;
  int64_t ms[TPU_MAX_DIMS];
  for (int d = 0; d < s.ndim; d++) ms[d] = d == dim ? size : 1;
  tpuir_val cnt = tpuir_index_add(b->g, tpulw__full(b, TPU_I32, 1, &size, 0), 0, idx,
                                  tpulw__full(b, TPU_I32, 1, &k, 1));
  tpuir_val hit = tpulw__reshape(b, tpulw__bin_c(b, TPUIR_GT, cnt, 0), s.ndim, ms);
  if (!is_copy) {
    tpulw__opnd v = tpulw__opnd_arg(b, "value");
    if (v.kind == LW_OPND_TENSOR && v.t->view.ndim != 0)
      return tpu_error(TPU_E_INVALID,
                       "index_fill_ only supports a 0-dimensional value tensor, but got tensor "
                       "with %d dimension(s).", v.t->view.ndim);
    if (v.kind == LW_OPND_NONE) return tpu_error(TPU_E_UNSUPPORTED, "index_fill: no value");
    tpuir_val r = tpulw__sel(b, hit, tpulw__opnd_val(b, &v, dt), x);
    return tpulw__result(b, scalar ? tpulw__reshape(b, r, 0, NULL) : r);
  }
  const tpulw_tensor *src = tpulw__tensor_arg(b, "source");
  if (!src) return tpu_error(TPU_E_UNSUPPORTED, "index_copy: no source");
  if (src->view.dtype != dt)
    return tpu_error(TPU_E_INVALID, "index_copy_(): self and source expected to have the same "
                     "dtype, but got (self) %s and (source) %s", tpulw__torch_name(dt),
                     tpulw__torch_name(src->view.dtype));
  int cdt = tpu_dtype_is_float(dt) ? tpulw__opmath(dt) : TPU_I64;
  tpuir_val sv = tpulw__convert(b, tpulw__tensor(b, src), cdt);
  if (scalar && src->view.ndim == 0) {
    int64_t one = 1;
    sv = tpulw__reshape(b, sv, 1, &one);
  }
  tpulw__shape ss = tpulw__info(b, sv);
  if (ss.ndim != s.ndim || ss.sizes[dim] != k)
    return tpu_error(TPU_E_INVALID, "index_copy_(): Source/destination tensor must have same "
                     "slice shapes.");
  /* positions written several times take the mean of their sources */
  tpuir_val sum = tpuir_index_add(b->g, tpulw__full(b, cdt, s.ndim, s.sizes, 0), dim, idx, sv);
  tpuir_val c = tpulw__convert(b, tpulw__reshape(b, cnt, s.ndim, ms), cdt);
  tpuir_val mean = tpulw__bin(b, TPUIR_DIV, sum, tpulw__bin_c(b, TPUIR_MAX, c, 1));
  tpuir_val r = tpulw__sel(b, hit, tpulw__convert(b, mean, dt), x);
  return tpulw__result(b, scalar ? tpulw__reshape(b, r, 0, NULL) : r);
}

/* take(self, index): self flattened, negative indices wrap */
static int take_fn(tpulw__b *b) {
  const tpulw_tensor *self = tpulw__tensor_arg(b, "self");
  const tpulw_tensor *index = tpulw__tensor_arg(b, "index");
  if (!self || !index || index->device < 0)
    return tpu_error(TPU_E_UNSUPPORTED, "take: missing operand");
  if (index->view.dtype != TPU_I64)
    return tpu_error(TPU_E_INVALID, "take(): Expected a long tensor for index, but got %s",
                     tpulw__torch_name(index->view.dtype));
  int64_t n = tpu_view_numel(&self->view), k = tpu_view_numel(&index->view);
  tpuir_val x = tpulw__reshape(b, tpulw__tensor(b, self), 1, &n);
  tpuir_val idx = wrap_index(b, tpulw__reshape(b, tpulw__tensor(b, index), 1, &k), n);
  b->sync = 1;
  b->out_rule = LW_OUT_SAME;
  tpuir_val r = tpuir_index_select(b->g, x, 0, idx);
  return tpulw__result(b, tpulw__reshape(b, r, index->view.ndim, index->view.sizes));
}

/* ---- advanced indexing ------------------------------------------------- */

typedef struct adv {
  tpuir_val x;          /* self, transposed so indexed dims are adjacent */
  int k0, m;            /* first indexed dim (in x) and count */
  int permuted;
  int64_t perm[TPU_MAX_DIMS];
  tpulw__shape xs;          /* shape of x */
  tpuir_val lin;        /* linear index over the group, flattened [K] */
  tpulw__shape bs;          /* broadcast index shape */
  tpuir_val xg;         /* x with the group merged: [pre, G, post] */
  tpulw__shape gs;
} adv;

/* ---- bool / uint8 masks as index tensors ------------------------------- */

/* Number of nonzero bytes of a bool/uint8 view. Data-dependent: asks the
 * recorder for device `dev`'s data first (tpug_synchronize_for_host; the
 * vTPU's device memory is host memory), like nonzero in lower/dynamic.c. */
static int mask_count(int dev, const tpu_view *v, int64_t *k) {
  int rc = tpug_synchronize_for_host(dev);
  if (rc < 0) return rc;
  *k = tpulw__count_nz(v);
  return TPU_OK;
}

/* Expand mask t (indexing self dims from `at`) into one int64 [k] index
 * per mask dim, like nonzero(mask).unbind(1); appends to pos/out. */
static int mask_expand(tpulw__b *b, const tpu_view *sv, const tpulw_tensor *t, int at, int *pos,
                       tpuir_val *out, int *m) {
  const tpu_view *mv = &t->view;
  if (mv->ndim == 0) return tpu_error(TPU_E_UNSUPPORTED, "index: 0-dim mask");
  for (int d = 0; d < mv->ndim; d++)
    if (mv->sizes[d] != sv->sizes[at + d]) {
      char ms[256], ss[256]; /* CPU prints both full shapes */
      size_t p = 0, q = 0;
      ms[0] = ss[0] = 0;
      for (int j = 0; j < mv->ndim && p < sizeof ms; j++)
        p += (size_t)snprintf(ms + p, sizeof ms - p, "%s%lld", j ? ", " : "",
                              (long long)mv->sizes[j]);
      for (int j = 0; j < sv->ndim && q < sizeof ss; j++)
        q += (size_t)snprintf(ss + q, sizeof ss - q, "%s%lld", j ? ", " : "",
                              (long long)sv->sizes[j]);
      return tpu_error(TPU_E_INDEX,
                       "The shape of the mask [%s] at index %d does not match the shape "
                       "of the indexed tensor [%s] at index %d", ms, d, ss, at + d);
    }
  int64_t n = tpu_view_numel(mv), k;
  int rc = mask_count(b->ctx->device, mv, &k);
  if (rc < 0) return rc;
  tpuir_val mk = tpulw__reshape(b, tpulw__tensor(b, t), 1, &n);
  if (mv->dtype != TPU_BOOL) mk = tpulw__bin(b, TPUIR_NE, mk, tpulw__const(b, mv->dtype, 0));
  tpuir_val idx = tpulw__compact(b, mk, n, k);
  LW_TRY(idx);
  int64_t stride = 1;
  for (int d = mv->ndim - 1; d >= 0; d--) {
    tpuir_val c = tpulw__bin_c(b, TPUIR_DIV, idx, (double)stride);
    if (d > 0) c = tpulw__bin_c(b, TPUIR_REM, c, (double)mv->sizes[d]);
    LW_TRY(c);
    pos[*m + d] = at + d;
    out[*m + d] = c;
    stride *= mv->sizes[d] > 0 ? mv->sizes[d] : 1;
  }
  *m += mv->ndim;
  return TPU_OK;
}

static int adv_prep(tpulw__b *b, const tpulw_tensor *self, const tpulw_arg *ia, adv *a) {
  const tpu_view *sv = &self->view;
  int used = 0;
  for (int i = 0; i < ia->n; i++) {
    const tpulw_tensor *t = &ia->tensors[i];
    int md = t->defined && (t->view.dtype == TPU_BOOL || t->view.dtype == TPU_U8);
    used += md ? t->view.ndim : 1;
  }
  if (used > sv->ndim)
    return tpu_error(TPU_E_INDEX, "too many indices for tensor of dimension %d", sv->ndim);
  int pos[TPU_MAX_DIMS], m = 0;
  tpuir_val iv[TPU_MAX_DIMS];
  for (int i = 0, at = 0; i < ia->n; i++) {
    const tpulw_tensor *t = &ia->tensors[i];
    if (!t->defined) {
      at++;
      continue;
    }
    if (t->device < 0)
      return tpu_error(TPU_E_UNSUPPORTED, "index: only index tensors on the device");
    if (t->view.dtype == TPU_BOOL || t->view.dtype == TPU_U8) {
      int rc = mask_expand(b, sv, t, at, pos, iv, &m);
      if (rc < 0) return rc;
      at += t->view.ndim;
      continue;
    }
    if (!idx_dtype_ok(t->view.dtype))
      return tpu_error(TPU_E_INDEX,
                       "tensors used as indices must be long, int, byte or bool tensors");
    iv[m] = tpulw__convert(b, tpulw__tensor(b, t), TPU_I64);
    pos[m++] = at++;
  }
  if (m == 0) return tpu_error(TPU_E_UNSUPPORTED, "index: no index tensors");
  int adjacent = pos[m - 1] - pos[0] == m - 1;
  tpuir_val x = tpulw__tensor(b, self);
  int nd = sv->ndim;
  a->permuted = 0;
  if (!adjacent) {
    int k = 0;
    for (int j = 0; j < m; j++) a->perm[k++] = pos[j];
    for (int d = 0; d < nd; d++) {
      int used = 0;
      for (int j = 0; j < m; j++) used |= pos[j] == d;
      if (!used) a->perm[k++] = d;
    }
    x = tpuir_transpose(b->g, x, a->perm);
    a->permuted = 1;
    a->k0 = 0;
  } else {
    a->k0 = pos[0];
  }
  a->m = m;
  a->x = x;
  a->xs = tpulw__info(b, x);
  /* broadcast the index tensors, wrap negatives, linearize */
  int rc = m <= 8 ? tpulw__bcast_all(b, m, iv) : tpu_error(TPU_E_UNSUPPORTED, "index: >8 tensors");
  if (rc < 0) return rc;
  a->bs = tpulw__info(b, iv[0]);
  tpuir_val lin = -1, bad = -1;
  tpuir_val zero = tpulw__const(b, TPU_I64, 0);
  for (int j = 0; j < m; j++) {
    int64_t size = a->xs.sizes[a->k0 + j];
    tpuir_val t = iv[j];
    t = tpulw__sel(b, tpulw__bin(b, TPUIR_LT, t, zero), tpulw__bin_c(b, TPUIR_ADD, t, (double)size), t);
    if (m > 1) {
      tpuir_val oob = tpulw__bin(b, TPUIR_OR, tpulw__bin(b, TPUIR_LT, t, zero),
                             tpulw__bin(b, TPUIR_GE, t, tpulw__const(b, TPU_I64, (double)size)));
      bad = j == 0 ? oob : tpulw__bin(b, TPUIR_OR, bad, oob);
    }
    lin = j == 0 ? t : tpulw__bin(b, TPUIR_ADD, tpulw__bin_c(b, TPUIR_MUL, lin, (double)size), t);
  }
  if (m > 1) lin = tpulw__sel(b, bad, tpulw__const(b, TPU_I64, -1), lin);
  int64_t kk = tpulw__numel(&a->bs);
  a->lin = tpulw__reshape(b, lin, 1, &kk);
  /* merge the group dims of x */
  int64_t gsz[TPU_MAX_DIMS];
  int g = 0;
  int64_t prod = 1;
  for (int d = 0; d < a->k0; d++) gsz[g++] = a->xs.sizes[d];
  for (int j = 0; j < m; j++) prod *= a->xs.sizes[a->k0 + j];
  gsz[g++] = prod;
  for (int d = a->k0 + m; d < a->xs.ndim; d++) gsz[g++] = a->xs.sizes[d];
  a->xg = tpulw__reshape(b, x, g, gsz);
  a->gs = tpulw__info(b, a->xg);
  b->sync = 1;
  return a->xg < 0 ? a->xg : a->lin < 0 ? a->lin : TPU_OK;
}

/* result shape of x[indices]: pre + bshape + post */
static void adv_result_shape(const adv *a, int *nd, int64_t *sizes) {
  int k = 0;
  for (int d = 0; d < a->k0; d++) sizes[k++] = a->xs.sizes[d];
  for (int d = 0; d < a->bs.ndim; d++) sizes[k++] = a->bs.sizes[d];
  for (int d = a->k0 + a->m; d < a->xs.ndim; d++) sizes[k++] = a->xs.sizes[d];
  *nd = k;
}

static int index_fn(tpulw__b *b) {
  const tpulw_tensor *self = tpulw__tensor_arg(b, "self");
  const tpulw_arg *ia = tpulw__arg(b, "indices");
  if (!self || !ia || ia->kind != TPULW_TENSORS || self->device < 0)
    return tpu_error(TPU_E_UNSUPPORTED, "index: unsupported arguments");
  adv a;
  int rc = adv_prep(b, self, ia, &a);
  if (rc < 0) return rc;
  int nd;
  int64_t sizes[TPU_MAX_DIMS];
  adv_result_shape(&a, &nd, sizes);
  if (nd > TPU_MAX_DIMS) return tpu_error(TPU_E_UNSUPPORTED, "index: rank");
  tpuir_val r = tpuir_index_select(b->g, a.xg, a.k0, a.lin);
  return tpulw__result(b, tpulw__reshape(b, r, nd, sizes));
}

/* index_put_(self, indices, values, accumulate) */
static int index_put_fn(tpulw__b *b) {
  const tpulw_tensor *self = tpulw__tensor_arg(b, "self");
  const tpulw_arg *ia = tpulw__arg(b, "indices");
  const tpulw_tensor *vals = tpulw__tensor_arg(b, "values");
  if (!self || !ia || ia->kind != TPULW_TENSORS || !vals || self->device < 0)
    return tpu_error(TPU_E_UNSUPPORTED, "index_put: unsupported arguments");
  int dt = self->view.dtype;
  int accumulate = (int)tpulw__int(b, "accumulate", 0);
  /* x[mask] = scalar  ->  masked fill */
  if (ia->n == 1 && ia->tensors[0].defined && ia->tensors[0].device >= 0 &&
      ia->tensors[0].view.dtype == TPU_BOOL && tpu_view_numel(&vals->view) == 1 &&
      !accumulate) {
    const tpu_view *mv = &ia->tensors[0].view;
    if (mv->ndim > self->view.ndim)
      return tpu_error(TPU_E_INDEX, "too many indices for tensor of dimension %d",
                       self->view.ndim);
    for (int d = 0; d < mv->ndim; d++)
      if (mv->sizes[d] != self->view.sizes[d])
        return tpu_error(TPU_E_INDEX,
                         "The shape of the mask [%lld] at index %d does not match "
                         "the shape of the indexed tensor [%lld] at index %d",
                         (long long)mv->sizes[d], d, (long long)self->view.sizes[d], d);
    int64_t ms[TPU_MAX_DIMS];
    for (int d = 0; d < self->view.ndim; d++) ms[d] = d < mv->ndim ? mv->sizes[d] : 1;
    tpuir_val mask = tpulw__reshape(b, tpulw__tensor(b, &ia->tensors[0]), self->view.ndim, ms);
    tpuir_val v = tpulw__reshape(b, tpulw__convert(b, tpulw__tensor(b, vals), dt), 0, NULL);
    return tpulw__result(b, tpulw__sel(b, mask, v, tpulw__tensor(b, self)));
  }
  adv a;
  int rc = adv_prep(b, self, ia, &a);
  if (rc < 0) return rc;
  int cdt = dt == TPU_BOOL ? TPU_I32 : tpulw__opmath(dt);
  int nd;
  int64_t rs[TPU_MAX_DIMS];
  adv_result_shape(&a, &nd, rs);
  /* values broadcast to the indexing result, then to [pre, K, post] */
  tpuir_val v = tpulw__bcast(b, tpulw__convert(b, tpulw__tensor(b, vals), cdt), nd, rs);
  int64_t src_sz[TPU_MAX_DIMS];
  for (int d = 0; d < a.gs.ndim; d++) src_sz[d] = a.gs.sizes[d];
  src_sz[a.k0] = tpulw__numel(&a.bs);
  v = tpulw__reshape(b, v, a.gs.ndim, src_sz);
  tpuir_val x = tpulw__convert(b, a.xg, cdt), r;
  if (accumulate) {
    r = tpuir_index_add(b->g, x, a.k0, a.lin, v);
  } else {
    tpuir_val zeros = tpulw__full(b, cdt, a.gs.ndim, a.gs.sizes, 0);
    tpuir_val cnt = tpuir_index_add(b->g, zeros, a.k0, a.lin,
                                    tpulw__full(b, cdt, a.gs.ndim, src_sz, 1));
    tpuir_val sum = tpuir_index_add(b->g, zeros, a.k0, a.lin, v);
    tpuir_val hit = tpulw__bin(b, TPUIR_GT, cnt, tpulw__const(b, cdt, 0));
    tpuir_val safe = tpulw__sel(b, hit, cnt, tpulw__const(b, cdt, 1));
    r = tpulw__sel(b, hit, tpulw__bin(b, TPUIR_DIV, sum, safe), x);
  }
  if (dt == TPU_BOOL) r = tpulw__bin(b, TPUIR_NE, r, tpulw__const(b, cdt, 0));
  r = tpulw__reshape(b, tpulw__convert(b, r, dt), a.xs.ndim, a.xs.sizes);
  if (a.permuted) {
    int64_t inv[TPU_MAX_DIMS];
    for (int d = 0; d < a.xs.ndim; d++) inv[a.perm[d]] = d;
    r = tpuir_transpose(b->g, r, inv);
  }
  return tpulw__result(b, r);
}

/* ---- cat / stack --------------------------------------------------------- */

static int cat_fn(tpulw__b *b) {
  const tpulw_arg *ta = tpulw__arg(b, "tensors");
  if (!ta || ta->kind != TPULW_TENSORS)
    return tpu_error(TPU_E_UNSUPPORTED, "cat: no tensor list");
  int is_stack = strncmp(b->base, "stack", 5) == 0;
  if (ta->n == 0)
    return tpu_error(TPU_E_INVALID, "%s expected a non-empty TensorList",
                     is_stack ? "stack" : "torch.cat(): expected a non-empty list of Tensors");
  tpulw__opnd ops[64];
  if (ta->n > 64) return tpu_error(TPU_E_UNSUPPORTED, "cat: more than 64 tensors");
  int ref = -1; /* first tensor that is not a legacy empty 1-D tensor */
  for (int i = 0; i < ta->n; i++) {
    const tpulw_tensor *t = &ta->tensors[i];
    if (!t->defined || t->device < 0)
      return tpu_error(TPU_E_UNSUPPORTED, "cat: non-device tensor");
    ops[i] = tpulw__opnd_tensor(t);
    if (!is_stack && t->view.ndim == 0)
      return tpu_error(TPU_E_INVALID,
                       "zero-dimensional tensor (at position %d) cannot be concatenated", i);
    int legacy = t->view.ndim == 1 && t->view.sizes[0] == 0;
    if (ref < 0 && (!legacy || is_stack)) ref = i;
  }
  int dt = tpulw__result_type(ta->n, ops);
  int od = tpulw__out_dtype(b);
  if (od >= 0 && !tpulw__can_cast(dt, od))
    return tpu_error(TPU_E_TYPE,
                     "torch.%s(): input types can't be cast to the desired output type %s",
                     is_stack ? "stack" : "cat", tpulw__torch_name(od));
  if (ref < 0) { /* all legacy empties */
    int64_t z = 0;
    return tpulw__result(b, tpulw__full(b, dt, 1, &z, 0));
  }
  const tpu_view *rv = &ta->tensors[ref].view;
  int nd = rv->ndim + (is_stack ? 1 : 0);
  int dim;
  int rc = tpulw__wrap_dim(tpulw__int(b, "dim", 0), nd, &dim);
  if (rc < 0) return rc;
  tpuir_val vals[64];
  int nv = 0;
  for (int i = 0; i < ta->n; i++) {
    const tpu_view *v = &ta->tensors[i].view;
    if (is_stack) {
      int same = v->ndim == rv->ndim;
      for (int d = 0; same && d < v->ndim; d++) same = v->sizes[d] == rv->sizes[d];
      if (!same)
        return tpu_error(TPU_E_INVALID,
                         "stack expects each tensor to be equal size, but got a "
                         "different size at entry %d", i);
      int64_t sz[TPU_MAX_DIMS];
      for (int d = 0, k = 0; d < nd; d++) sz[d] = d == dim ? 1 : v->sizes[k++];
      vals[nv++] = tpulw__reshape(b, tpulw__convert(b, tpulw__tensor(b, &ta->tensors[i]), dt), nd, sz);
      continue;
    }
    if (v->ndim == 1 && v->sizes[0] == 0 && rv->ndim != 1) continue; /* legacy */
    if (v->ndim != rv->ndim)
      return tpu_error(TPU_E_INVALID,
                       "Tensors must have same number of dimensions: got %d and %d",
                       rv->ndim, v->ndim);
    for (int d = 0; d < nd; d++)
      if (d != dim && v->sizes[d] != rv->sizes[d])
        return tpu_error(TPU_E_INVALID,
                         "Sizes of tensors must match except in dimension %d. "
                         "Expected size %lld but got size %lld for tensor number "
                         "%d in the list.", dim, (long long)rv->sizes[d],
                         (long long)v->sizes[d], i);
    if (v->sizes[dim] == 0) continue;
    vals[nv++] = tpulw__convert(b, tpulw__tensor(b, &ta->tensors[i]), dt);
  }
  if (nv == 0) { /* every part empty along dim */
    int64_t sz[TPU_MAX_DIMS];
    for (int d = 0; d < nd; d++) sz[d] = d == dim ? 0 : rv->sizes[d];
    return tpulw__result(b, tpulw__full(b, dt, nd, sz, 0));
  }
  for (int i = 0; i < nv; i++)
    if (vals[i] < 0) return vals[i];
  if (nv == 1) return tpulw__result(b, vals[0]);
  return tpulw__result(b, tpuir_concat(b->g, nv, vals, dim));
}

/* ---- flip / roll / tril / triu ------------------------------------------ */

static int flip_fn(tpulw__b *b) {
  const tpulw_tensor *self = tpulw__tensor_arg(b, "self");
  if (!self) return tpu_error(TPU_E_UNSUPPORTED, "flip: no self");
  int n;
  int64_t scratch, dims[TPU_MAX_DIMS];
  const int64_t *d = tpulw__ints(b, "dims", &n, &scratch);
  int nd = self->view.ndim;
  uint32_t seen = 0;
  int k = 0;
  for (int i = 0; i < n; i++) {
    int w;
    int rc = tpulw__wrap_dim(d[i], nd, &w);
    if (rc < 0) return rc;
    if (nd == 0) continue;
    if (seen & (1u << w))
      return tpu_error(TPU_E_INVALID, "dims has duplicates, original flip dims size=%d, "
                       "but unique flip dims size=%d", n, __builtin_popcount(seen));
    seen |= 1u << w;
    dims[k++] = w;
  }
  tpuir_val x = tpulw__tensor(b, self);
  if (k == 0) return tpulw__result(b, x);
  return tpulw__result(b, tpuir_reverse(b->g, x, k, dims));
}

/* constant_pad_nd(self, pad, value=0): pad pairs apply from the last dim
 * backwards; negative entries crop (StableHLO pad). */
static int constant_pad_fn(tpulw__b *b) {
  const tpulw_tensor *self = tpulw__tensor_arg(b, "self");
  if (!self) return tpu_error(TPU_E_UNSUPPORTED, "constant_pad_nd: no self");
  int n;
  int64_t scratch;
  const int64_t *pad = tpulw__ints(b, "pad", &n, &scratch);
  if (n < 0) n = 0;
  int nd = self->view.ndim;
  if (n % 2)
    return tpu_error(TPU_E_INVALID, "Length of pad must be even but instead it equals %d", n);
  if (n / 2 > nd)
    return tpu_error(TPU_E_INVALID, "Length of pad should be no more than twice the number of "
                     "dimensions of the input. Pad length is %d while the input has %d dimensions.",
                     n, nd);
  int64_t lo[TPU_MAX_DIMS] = {0}, hi[TPU_MAX_DIMS] = {0}, in[TPU_MAX_DIMS] = {0};
  for (int i = 0; i < n / 2; i++) {
    int d = nd - 1 - i;
    lo[d] = pad[2 * i];
    hi[d] = pad[2 * i + 1];
    int64_t sz = self->view.sizes[d] + lo[d] + hi[d];
    if (sz < 0)
      return tpu_error(TPU_E_INVALID, "The input size %lld, plus negative padding %lld and %lld "
                       "resulted in a negative output size, which is invalid. Check dimension %d "
                       "of your input.", (long long)self->view.sizes[d], (long long)lo[d],
                       (long long)hi[d], d);
  }
  tpulw__scalar v = tpulw__scalar_i(0);
  if (tpulw__arg(b, "value")) {
    int rc = tpulw__scalar_arg(b, "value", &v);
    if (rc < 0) return rc;
  }
  tpuir_val x = tpulw__tensor(b, self);
  return tpulw__result(b, tpuir_pad(b->g, x, tpulw__const_s(b, self->view.dtype, v), lo, hi, in));
}

static tpuir_val roll1(tpulw__b *b, tpuir_val x, int64_t shift, int dim) {
  tpulw__shape s = tpulw__info(b, x);
  int64_t n = s.sizes[dim];
  if (n == 0) return x;
  int64_t sh = ((shift % n) + n) % n;
  if (sh == 0) return x;
  int64_t st[TPU_MAX_DIMS] = {0}, lim[TPU_MAX_DIMS], str[TPU_MAX_DIMS];
  for (int d = 0; d < s.ndim; d++) {
    lim[d] = s.sizes[d];
    str[d] = 1;
  }
  st[dim] = n - sh;
  tpuir_val tail = tpuir_slice(b->g, x, st, lim, str);
  st[dim] = 0;
  lim[dim] = n - sh;
  tpuir_val head = tpuir_slice(b->g, x, st, lim, str);
  tpuir_val parts[2] = {tail, head};
  if (tail < 0) return tail;
  if (head < 0) return head;
  return tpuir_concat(b->g, 2, parts, dim);
}

static int roll_fn(tpulw__b *b) {
  const tpulw_tensor *self = tpulw__tensor_arg(b, "self");
  if (!self) return tpu_error(TPU_E_UNSUPPORTED, "roll: no self");
  int ns, nd;
  int64_t s1, s2;
  const int64_t *shifts = tpulw__ints(b, "shifts", &ns, &s1);
  const int64_t *dims = tpulw__ints(b, "dims", &nd, &s2);
  if (nd < 0) nd = 0;
  tpuir_val x = tpulw__tensor(b, self);
  tpulw__shape s = tpulw__info(b, x);
  if (nd == 0) {
    if (ns != 1)
      return tpu_error(TPU_E_INVALID, "shifts and dimensions must align. shifts: %d, dims:0", ns);
    int64_t n = tpulw__numel(&s);
    tpuir_val f = roll1(b, tpulw__reshape(b, x, 1, &n), shifts[0], 0);
    return tpulw__result(b, tpulw__reshape(b, f, s.ndim, s.sizes));
  }
  if (ns != nd)
    return tpu_error(TPU_E_INVALID, "shifts and dimensions must align. shifts: %d, dims:%d",
                     ns, nd);
  if (s.ndim == 0)
    return tpu_error(TPU_E_INDEX, "Dimension specified as %lld but tensor has no dimensions",
                     (long long)dims[0]);
  for (int i = 0; i < nd; i++) {
    int d;
    int rc = tpulw__wrap_dim(dims[i], s.ndim, &d);
    if (rc < 0) return rc;
    if (s.ndim) x = roll1(b, x, shifts[i], d);
  }
  return tpulw__result(b, x);
}

static int tri_fn(tpulw__b *b) {
  const tpulw_tensor *self = tpulw__tensor_arg(b, "self");
  if (!self) return tpu_error(TPU_E_UNSUPPORTED, "tril: no self");
  int is_tril = strncmp(b->base, "tril", 4) == 0;
  if (self->view.ndim < 2)
    return tpu_error(TPU_E_INVALID, "%s: input tensor must have at least 2 dimensions",
                     is_tril ? "tril" : "triu");
  int64_t diag = tpulw__int(b, "diagonal", 0);
  tpuir_val x = tpulw__tensor(b, self);
  tpulw__shape s = tpulw__info(b, x);
  int64_t sz[2] = {s.sizes[s.ndim - 2], s.sizes[s.ndim - 1]};
  tpuir_val row = tpuir_iota(b->g, TPU_I64, 2, sz, 0);
  tpuir_val col = tpuir_iota(b->g, TPU_I64, 2, sz, 1);
  tpuir_val dif = tpulw__bin(b, TPUIR_SUB, col, row);
  tpuir_val keep = tpulw__bin(b, is_tril ? TPUIR_LE : TPUIR_GE, dif, tpulw__const(b, TPU_I64, (double)diag));
  return tpulw__result(b, tpulw__sel(b, keep, x, tpulw__const(b, s.dtype, 0)));
}

/* narrow_copy(self, dim, start, length): a contiguous slice, with CPU's
 * checks (a positive out-of-range dim is a RuntimeError there). */
static int narrow_copy_fn(tpulw__b *b) {
  const tpulw_tensor *self = tpulw__tensor_arg(b, "self");
  if (!self || self->device < 0) return tpu_error(TPU_E_UNSUPPORTED, "narrow_copy: no self");
  const tpu_view *v = &self->view;
  if (v->ndim == 0)
    return tpu_error(TPU_E_INVALID, "narrow() cannot be applied to a 0-dim tensor.");
  int64_t d64 = tpulw__int(b, "dim", 0), start = tpulw__int(b, "start", 0), len = tpulw__int(b, "length", 0);
  if (d64 >= v->ndim)
    return tpu_error(TPU_E_INVALID,
                     "Expected dim < static_cast<int64_t>(self_sizes.size()) to be true, but "
                     "got false.  (Could this error message be improved?  If so, please "
                     "report an enhancement request to PyTorch.)");
  int dim;
  int rc = tpulw__wrap_dim(d64, v->ndim, &dim);
  if (rc < 0) return rc;
  int64_t size = v->sizes[dim];
  if (start < -size || start > size)
    return tpu_error(TPU_E_INDEX,
                     "start out of range (expected to be in range of [%lld, %lld], but got %lld)",
                     (long long)-size, (long long)size, (long long)start);
  if (start < 0) start += size;
  if (len < 0 || start > size - len)
    return tpu_error(TPU_E_INVALID, "start (%lld) + length (%lld) exceeds dimension size (%lld).",
                     (long long)start, (long long)len, (long long)size);
  int64_t st[TPU_MAX_DIMS], lim[TPU_MAX_DIMS], str[TPU_MAX_DIMS];
  for (int d = 0; d < v->ndim; d++) {
    st[d] = d == dim ? start : 0;
    lim[d] = d == dim ? start + len : v->sizes[d];
    str[d] = 1;
  }
  return tpulw__result(b, tpuir_slice(b->g, tpulw__tensor(b, self), st, lim, str));
}

/* ---- channel_shuffle ----------------------------------------------------- */

static int shuffle_fn(tpulw__b *b) {
  const tpulw_tensor *in = tpulw__tensor_arg(b, "self");
  int rc;
  if ((rc = tpulw__need_tpu(b, in))) return rc;
  const tpu_view *v = &in->view;
  char s1[256];
  int64_t g = tpulw__int(b, "groups", 1);
  if (v->ndim <= 2)
    return tpu_error(TPU_E_INVALID, "channel_shuffle expects input to have at least 3 "
                     "dimensions, but got input with sizes [%s]",
                     tpulw__fmt_list(s1, sizeof s1, v->ndim, v->sizes));
  if (g <= 0)
    return tpu_error(TPU_E_INVALID, "Number of groups to divide channels in must be positive. "
                     "Value of groups:%lld", (long long)g);
  int64_t C = v->sizes[1];
  if (C % g)
    return tpu_error(TPU_E_INVALID, "Number of channels must be divisible by groups. Got %lld "
                     "channels and %lld groups.", (long long)C, (long long)g);
  if (v->ndim + 1 > TPU_MAX_DIMS) return tpu_error(TPU_E_UNSUPPORTED, "channel_shuffle: rank");
  int64_t s[TPU_MAX_DIMS], perm[TPU_MAX_DIMS];
  s[0] = v->sizes[0];
  s[1] = g;
  s[2] = C / g;
  for (int i = 2; i < v->ndim; i++) s[i + 1] = v->sizes[i];
  for (int i = 0; i <= v->ndim; i++) perm[i] = i;
  perm[1] = 2;
  perm[2] = 1;
  tpuir_val x = tpulw__reshape(b, tpulw__tensor(b, in), v->ndim + 1, s);
  x = tpuir_transpose(b->g, x, perm);
  return tpulw__result(b, tpulw__reshape(b, x, v->ndim, v->sizes));
}

/* ---- compaction ---------------------------------------------------------- */

/* Positions (int64 [size]) of the first `size` true elements of the rank-1
 * bool m (length n), in order; *hit (bool [size]) marks the filled slots. */
static tpuir_val compact_static(tpulw__b *b, tpuir_val m, int64_t n, int64_t size, tpuir_val *hit) {
  tpuir_val c = tpulw__scan_op(b, tpulw__convert(b, m, TPU_I64), 0, TPUIR_ADD, 0);
  tpuir_val slot = tpulw__bin_c(b, TPUIR_SUB, c, 1);
  slot = tpulw__sel(b, tpulw__bin(b, TPUIR_AND, m, tpulw__bin_c(b, TPUIR_LT, slot, (double)size)), slot,
                tpulw__const(b, TPU_I64, (double)size));
  int64_t s1 = size + 1, st = 0, str = 1;
  tpuir_val pos = tpuir_iota(b->g, TPU_I64, 1, &n, 0);
  tpuir_val r = tpuir_scatter_add(b->g, tpulw__full(b, TPU_I64, 1, &s1, 0), 0, slot, pos);
  tpuir_val cnt = tpuir_scatter_add(b->g, tpulw__full(b, TPU_I64, 1, &s1, 0), 0, slot,
                                    tpulw__full(b, TPU_I64, 1, &n, 1));
  *hit = tpuir_slice(b->g, tpulw__bin_c(b, TPUIR_GT, cnt, 0), &st, &size, &str);
  return tpuir_slice(b->g, r, &st, &size, &str);
}

/* Row-major coordinates of linear positions lin (int64 [k]) in `sizes`:
 * int64 [k, nd]. */
static tpuir_val unravel(tpulw__b *b, tpuir_val lin, int64_t k, int nd, const int64_t *sizes) {
  tpuir_val cols[TPU_MAX_DIMS];
  int64_t stride = 1, k1[2] = {k, 1};
  for (int d = nd - 1; d >= 0; d--) {
    tpuir_val c = tpulw__bin_c(b, TPUIR_DIV, lin, (double)stride);
    if (d > 0) c = tpulw__bin_c(b, TPUIR_REM, c, (double)sizes[d]);
    cols[d] = tpulw__reshape(b, c, 2, k1);
    if (cols[d] < 0) return cols[d];
    stride *= sizes[d] > 0 ? sizes[d] : 1;
  }
  return nd == 1 ? cols[0] : tpuir_concat(b->g, nd, cols, 1);
}

/* nonzero_static(self, size, fill_value) -> int64 [size, ndim]: the first
 * `size` nonzero coordinates, the remaining rows fill_value. */
static int nonzero_static_fn(tpulw__b *b) {
  const tpulw_tensor *self = tpulw__tpu_self(b);
  if (!self) return tpu_error(TPU_E_UNSUPPORTED, "nonzero_static: no self");
  int64_t size = tpulw__int(b, "size", -1);
  if (size < 0)
    return tpu_error(TPU_E_INVALID, "nonzero_static: 'size' must be an non-negative integer");
  int64_t fill = tpulw__int(b, "fill_value", -1);
  b->out_rule = LW_OUT_SAME;
  const tpu_view *v = &self->view;
  int nd = v->ndim;
  int64_t n = tpu_view_numel(v), os[2] = {size, nd};
  if (nd == 0 || size == 0 || n == 0) return tpulw__result(b, tpulw__full(b, TPU_I64, 2, os, (double)fill));
  tpuir_val x = tpulw__tensor(b, self);
  x = tpulw__reshape(b, x, 1, &n);
  tpuir_val m = self->view.dtype == TPU_BOOL ? x : tpulw__bin(b, TPUIR_NE, x, tpulw__const(b, v->dtype, 0));
  tpuir_val hit;
  tpuir_val lin = compact_static(b, m, n, size, &hit);
  tpuir_val co = unravel(b, lin, size, nd, v->sizes);
  int64_t k1[2] = {size, 1};
  return tpulw__result(b, tpulw__sel(b, tpulw__reshape(b, hit, 2, k1), co,
                             tpulw__const(b, TPU_I64, (double)fill)));
}

/* tril_indices / triu_indices(row, col, offset, dtype) -> [2, count] */
static int tri_indices_fn(tpulw__b *b) {
  int upper = strncmp(b->base, "triu", 4) == 0;
  int64_t row = tpulw__int(b, "row", 0), col = tpulw__int(b, "col", 0), off = tpulw__int(b, "offset", 0);
  if (row < 0) return tpu_error(TPU_E_INVALID, "row must be non-negative, got%lld", (long long)row);
  if (col < 0) return tpu_error(TPU_E_INVALID, "col must be non-negative, got%lld", (long long)col);
  int dt = tpulw__dtype_arg(b, "dtype", TPU_I64);
  const tpulw_tensor *out = tpulw__tensor_arg(b, "out");
  if (out) dt = out->view.dtype;
  if (dt != TPU_I64 && dt != TPU_I32)
    return tpu_error(TPU_E_UNSUPPORTED, "%s: dtype %s", b->base, tpulw__torch_name(dt));
  int64_t cnt = 0;
  for (int64_t r = 0; r < row; r++) {
    int64_t c = upper ? col - (r + off > 0 ? r + off : 0) : r + off + 1;
    cnt += c < 0 ? 0 : c > col ? col : c;
  }
  int64_t os[2] = {2, cnt};
  b->out_rule = LW_OUT_SAME;
  if (cnt == 0) return tpulw__result(b, tpulw__full(b, dt, 2, os, 0));
  int64_t n = row * col, g2[2] = {row, col};
  tpuir_val d = tpulw__bin(b, TPUIR_SUB, tpuir_iota(b->g, TPU_I64, 2, g2, 1),
                       tpuir_iota(b->g, TPU_I64, 2, g2, 0));
  tpuir_val m = tpulw__reshape(b, upper ? tpulw__bin_c(b, TPUIR_GE, d, (double)off)
                                    : tpulw__bin_c(b, TPUIR_LE, d, (double)off), 1, &n);
  tpuir_val hit;
  tpuir_val lin = compact_static(b, m, n, cnt, &hit);
  int64_t c1[2] = {1, cnt};
  tpuir_val rc[2] = {tpulw__reshape(b, tpulw__bin_c(b, TPUIR_DIV, lin, (double)col), 2, c1),
                     tpulw__reshape(b, tpulw__bin_c(b, TPUIR_REM, lin, (double)col), 2, c1)};
  LW_TRY(rc[0]);
  LW_TRY(rc[1]);
  return tpulw__result_as(b, tpuir_concat(b->g, 2, rc, 0), dt);
}

/* ---- masked_scatter / put ------------------------------------------------ */

/* masked_scatter_(self, mask, source) (+ functional/out=): the k-th true
 * element of mask (broadcast to self) takes source.flatten()[k]. Too few
 * source elements -> RuntimeError at run time. */
static int masked_scatter_fn(tpulw__b *b) {
  const tpulw_tensor *self = tpulw__tpu_self(b);
  const tpulw_tensor *mask = tpulw__tensor_arg(b, "mask");
  const tpulw_tensor *src = tpulw__tensor_arg(b, "source");
  if (!self || !mask || !src || mask->device < 0 || src->device < 0)
    return tpu_error(TPU_E_UNSUPPORTED, "masked_scatter: missing operand");
  if (mask->view.dtype != TPU_BOOL)
    return tpu_error(TPU_E_INVALID, "masked_scatter_ only supports boolean masks, but got mask "
                     "with dtype %s", tpulw__torch_name(mask->view.dtype));
  int dt = self->view.dtype;
  if (src->view.dtype != dt)
    return tpu_error(TPU_E_INVALID, "masked_scatter_: expected self and source to have same "
                     "dtypes but got %s and %s", tpulw__torch_name(dt), tpulw__torch_name(src->view.dtype));
  tpuir_val vs[2] = {tpulw__tensor(b, self), tpulw__tensor(b, mask)};
  int in_place = b->base[strlen(b->base) - 1] == '_';
  if (in_place) {
    tpulw__shape ss = tpulw__info(b, vs[0]);
    int nd;
    int64_t sz[TPU_MAX_DIMS];
    int rc = tpulw__bcast_shape(b, 2, vs, &nd, sz);
    if (rc < 0) return rc;
    int same = nd == ss.ndim;
    for (int d = 0; same && d < nd; d++) same = sz[d] == ss.sizes[d];
    if (!same)
      return tpu_error(TPU_E_INVALID, "masked_scatter_: mask must be broadcastable to self");
  }
  int rc = tpulw__bcast_all(b, 2, vs);
  if (rc < 0) return rc;
  tpulw__shape s = tpulw__info(b, vs[0]);
  int64_t n = tpulw__numel(&s), ns = tpu_view_numel(&src->view);
  if (n == 0) return tpulw__result(b, vs[0]);
  tpuir_val m = tpulw__reshape(b, vs[1], 1, &n);
  tpuir_val pos = tpulw__bin_c(b, TPUIR_SUB, tpulw__scan_op(b, tpulw__convert(b, m, TPU_I64), 0, TPUIR_ADD, 0), 1);
  /* source padded by one element; masked positions past the source index
   * beyond the pad (a range error), unmasked ones read the pad */
  pos = tpulw__sel(b, tpulw__bin_c(b, TPUIR_GE, pos, (double)ns), tpulw__bin_c(b, TPUIR_ADD, pos, 1), pos);
  pos = tpulw__sel(b, m, pos, tpulw__const(b, TPU_I64, (double)ns));
  tpuir_val sf = tpulw__reshape(b, tpulw__tensor(b, src), 1, &ns);
  int64_t lo = 0, hi = 1, in = 0;
  sf = tpuir_pad(b->g, sf, tpulw__const(b, dt, 0), &lo, &hi, &in);
  b->sync = 1;
  b->err_remap = LW_ERR_RUNTIME;
  tpuir_val g = tpuir_index_select(b->g, sf, 0, pos);
  tpuir_val r = tpulw__sel(b, m, g, tpulw__reshape(b, vs[0], 1, &n));
  return tpulw__result(b, tpulw__reshape(b, r, s.ndim, s.sizes));
}

/* put_(self, index, source, accumulate) / put: self flattened, negative
 * indices wrap, out of range -> IndexError at run time. Without
 * accumulate, a position written several times takes the mean of its
 * sources (PyTorch leaves the order undefined). */
static int put_fn(tpulw__b *b) {
  const tpulw_tensor *self = tpulw__tpu_self(b);
  const tpulw_tensor *index = tpulw__tensor_arg(b, "index");
  const tpulw_tensor *src = tpulw__tensor_arg(b, "source");
  if (!self || !index || !src || index->device < 0 || src->device < 0)
    return tpu_error(TPU_E_UNSUPPORTED, "put: missing operand");
  int dt = self->view.dtype;
  if (index->view.dtype != TPU_I64)
    return tpu_error(TPU_E_INVALID, "put_(): Expected a long tensor for index, but got %s",
                     tpulw__torch_name(index->view.dtype));
  if (src->view.dtype != dt)
    return tpu_error(TPU_E_INVALID, "put_(): self and source expected to have the same dtype, "
                     "but got self.dtype = %s and source.dtype = %s", tpulw__torch_name(dt),
                     tpulw__torch_name(src->view.dtype));
  int64_t n = tpu_view_numel(&self->view), k = tpu_view_numel(&index->view);
  if (tpu_view_numel(&src->view) != k)
    return tpu_error(TPU_E_INDEX, "put_(): Expected source and index to have the same number "
                     "of elements, but got source.numel() = %lld, index.numel() = %lld",
                     (long long)tpu_view_numel(&src->view), (long long)k);
  int acc = (int)tpulw__int(b, "accumulate", 0);
  tpuir_val x = tpulw__tensor(b, self);
  if (k == 0) return tpulw__result(b, x);
  if (n == 0)
    return tpu_error(TPU_E_INDEX, "put_(): Tried to put elements into an empty tensor");
  int cdt = tpu_dtype_is_float(dt) ? tpulw__opmath(dt) : TPU_I64;
  tpuir_val xf = tpulw__convert(b, tpulw__reshape(b, x, 1, &n), cdt);
  tpuir_val idx = tpulw__reshape(b, tpulw__tensor(b, index), 1, &k);
  idx = tpulw__sel(b, tpulw__bin_c(b, TPUIR_LT, idx, 0), tpulw__bin_c(b, TPUIR_ADD, idx, (double)n), idx);
  tpuir_val sv = tpulw__convert(b, tpulw__reshape(b, tpulw__tensor(b, src), 1, &k), cdt);
  b->sync = 1;
  tpuir_val r;
  if (acc) {
    r = tpuir_index_add(b->g, xf, 0, idx, sv);
  } else {
    tpuir_val zero = tpulw__full(b, cdt, 1, &n, 0);
    tpuir_val cnt = tpuir_index_add(b->g, zero, 0, idx, tpulw__full(b, cdt, 1, &k, 1));
    tpuir_val sum = tpuir_index_add(b->g, zero, 0, idx, sv);
    tpuir_val hit = tpulw__bin_c(b, TPUIR_GT, cnt, 0);
    r = tpulw__sel(b, hit, tpulw__bin(b, TPUIR_DIV, sum, tpulw__bin_c(b, TPUIR_MAX, cnt, 1)), xf);
  }
  r = tpulw__reshape(b, r, self->view.ndim, self->view.sizes);
  return tpulw__result_as(b, r, dt);
}

const tpulw__row tpulw__rows_index[] = {
    {"constant_pad_nd", constant_pad_fn, 0, LW_COMPLEX_OK}, {"constant_pad_nd.out", constant_pad_fn, 0, LW_COMPLEX_OK},
    {"index_select", index_select_fn, 0, LW_COMPLEX_OK | LW_CPU_INDEX},
    {"index_select.out", index_select_fn, 0, LW_COMPLEX_OK | LW_CPU_INDEX},
    {"gather", gather_fn, 0, LW_COMPLEX_OK}, {"gather.out", gather_fn, 0, LW_COMPLEX_OK},
    {"scatter_add", scatter_add_fn, 0}, {"scatter_add_", scatter_add_fn, 0},
    {"scatter_add.out", scatter_add_fn, 0},
    {"scatter.src", scatter_fn, 0}, {"scatter_.src", scatter_fn, 0},
    {"scatter.src_out", scatter_fn, 0},
    {"scatter.value", scatter_fn, 0}, {"scatter_.value", scatter_fn, 0},
    {"scatter.value_out", scatter_fn, 0},
    {"scatter.reduce", scatter_fn, 0}, {"scatter_.reduce", scatter_fn, 0},
    {"scatter.reduce_out", scatter_fn, 0},
    {"scatter.value_reduce", scatter_fn, 0}, {"scatter_.value_reduce", scatter_fn, 0},
    {"scatter.value_reduce_out", scatter_fn, 0},
    {"index_add", index_add_fn, 0, LW_CPU_INDEX}, {"index_add_", index_add_fn, 0, LW_CPU_INDEX},
    {"index_add.out", index_add_fn, 0, LW_CPU_INDEX},
    {"index.Tensor", index_fn, 0, LW_COMPLEX_OK | LW_CPU_INDEX},
    {"index.Tensor_out", index_fn, 0, LW_COMPLEX_OK | LW_CPU_INDEX},
    {"index_put", index_put_fn, 0, LW_CPU_INDEX}, {"index_put_", index_put_fn, 0, LW_CPU_INDEX},
    {"_index_put_impl_", index_put_fn, 0, LW_CPU_INDEX},
    {"index_fill_.int_Scalar", index_fill_copy_fn, 0, LW_CPU_INDEX}, {"index_fill_.int_Tensor", index_fill_copy_fn, 0, LW_CPU_INDEX},
    {"index_fill.int_Scalar", index_fill_copy_fn, 0, LW_CPU_INDEX}, {"index_fill.int_Tensor", index_fill_copy_fn, 0, LW_CPU_INDEX},
    {"index_copy", index_fill_copy_fn, 0, LW_CPU_INDEX}, {"index_copy_", index_fill_copy_fn, 0, LW_CPU_INDEX},
    {"index_copy.out", index_fill_copy_fn, 0, LW_CPU_INDEX},
    {"take", take_fn, 0, LW_COMPLEX_OK}, {"take.out", take_fn, 0, LW_COMPLEX_OK},
    {"cat", cat_fn, 0, LW_COMPLEX_OK}, {"cat.out", cat_fn, 0, LW_COMPLEX_OK},
    {"stack", cat_fn, 0, LW_COMPLEX_OK}, {"stack.out", cat_fn, 0, LW_COMPLEX_OK},
    {"flip", flip_fn, 0, LW_COMPLEX_OK}, {"flip.out", flip_fn, 0, LW_COMPLEX_OK},
    {"roll", roll_fn, 0, LW_COMPLEX_OK}, {"roll.out", roll_fn, 0, LW_COMPLEX_OK},
    {"narrow_copy", narrow_copy_fn, 0, LW_COMPLEX_OK}, {"narrow_copy.out", narrow_copy_fn, 0, LW_COMPLEX_OK},
    {"tril", tri_fn, 0, LW_COMPLEX_OK}, {"tril_", tri_fn, 0, LW_COMPLEX_OK}, {"tril.out", tri_fn, 0, LW_COMPLEX_OK},
    {"triu", tri_fn, 0, LW_COMPLEX_OK}, {"triu_", tri_fn, 0, LW_COMPLEX_OK}, {"triu.out", tri_fn, 0, LW_COMPLEX_OK},
    {"channel_shuffle", shuffle_fn, 0}, {"channel_shuffle.out", shuffle_fn, 0},
    {"nonzero_static", nonzero_static_fn, 0},
    {"nonzero_static.out", nonzero_static_fn, 0},
    {"tril_indices", tri_indices_fn, 0},
    {"tril_indices.out", tri_indices_fn, 0},
    {"triu_indices", tri_indices_fn, 0},
    {"triu_indices.out", tri_indices_fn, 0},
    {"masked_scatter_", masked_scatter_fn, 0},
    {"masked_scatter", masked_scatter_fn, 0},
    {"masked_scatter.out", masked_scatter_fn, 0},
    {"put_", put_fn, 0},
    {"put", put_fn, 0},
    {"put.out", put_fn, 0},
};
const int tpulw__nrows_index = sizeof tpulw__rows_index / sizeof tpulw__rows_index[0];

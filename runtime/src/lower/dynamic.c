/* lower/dynamic.c - lowerings of ATen ops whose output SHAPE depends on
 * the input DATA (nonzero, masked_select, _unique2, unique_consecutive,
 * unique_dim, repeat_interleave.Tensor, bincount), plus reductions the IR has no scatter kind for (scatter_reduce,
 * index_reduce) and a few stragglers (logspace.out, polygamma).
 *
 * Data-dependent shape: synchronizes, like CUDA's nonzero. tpulw_prepare
 * must report output shapes, so these lowerings ask the recorder for the
 * input's data (tpug_synchronize_for_host: it flushes pending Fused Eager
 * ops and waits for the device) and read the input in C - the vTPU's device memory is host memory - to
 * count the output size (number of nonzeros / unique values). The VALUES
 * are then produced by an ordinary IR graph: a prefix count (a cumulative
 * reduce_window) gives each selected element its output slot, scatter_add of the
 * element positions into those slots gives the source index of every
 * output element, and index_select reads the values. The unique ops
 * sort with TPUIR_SORT (stable; slices lexicographically, one sort per
 * column) and mark the starts of runs of equal values.
 *
 * Rows: tpulw__rows_dynamic (table_init in lower/lower.c).
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "lower/internal.h"
#include "tpu_graph.h"
#include "tpu_rt.h"

/* ---- host-side reads ---------------------------------------------------- */

/* Wait until every queued op of device `dev` has written its outputs. */
static int dyn_sync(int dev) { return tpug_synchronize_for_host(dev); }

/* Pointer to element `lin` (row-major) of v. */
static const char *dyn_elem(const tpu_view *v, int64_t lin) {
  int64_t off = v->offset;
  for (int d = v->ndim - 1; d >= 0; d--) {
    int64_t sz = v->sizes[d];
    if (sz <= 0) return NULL;
    off += (lin % sz) * v->strides[d];
    lin /= sz;
  }
  return (const char *)v->base + off * (int64_t)tpu_dtype_size(v->dtype);
}

/* Element as double (floats) or int64 (ints/bool); *isnan set for NaN. */
static void dyn_read(int dt, const char *p, double *f, int64_t *i) {
  *f = 0;
  *i = 0;
  switch (dt) {
    case TPU_BOOL: *i = *(const uint8_t *)p != 0; break;
    case TPU_U8: *i = *(const uint8_t *)p; break;
    case TPU_I8: *i = *(const int8_t *)p; break;
    case TPU_I16: { int16_t v; memcpy(&v, p, 2); *i = v; break; }
    case TPU_I32: { int32_t v; memcpy(&v, p, 4); *i = v; break; }
    case TPU_I64: memcpy(i, p, 8); break;
    case TPU_F16: { uint16_t h; memcpy(&h, p, 2); *f = tpu_f16_to_f32(h); break; }
    case TPU_BF16: { uint16_t h; memcpy(&h, p, 2); *f = tpu_bf16_to_f32(h); break; }
    case TPU_F32: { float v; memcpy(&v, p, 4); *f = v; break; }
    case TPU_F64: memcpy(f, p, 8); break;
    default: break;
  }
}

/* Number of nonzero elements of v (see lower/internal.h): a row (last dim)
 * at a time; rows of bytes (bool masks) counted in one loop. */
int64_t tpulw__count_nz(const tpu_view *v) {
  int64_t n = tpu_view_numel(v), k = 0;
  if (n == 0) return 0;
  int nd = v->ndim, dt = v->dtype, fl = tpu_dtype_is_float(dt);
  int64_t len = nd ? v->sizes[nd - 1] : 1, st = nd ? v->strides[nd - 1] : 0;
  int64_t es = (int64_t)tpu_dtype_size(dt), q[TPU_MAX_DIMS] = {0};
  const char *base = (const char *)v->base + v->offset * es;
  for (int64_t r = 0; r < n / len; r++) {
    int64_t off = 0;
    for (int d = 0; d < nd - 1; d++) off += q[d] * v->strides[d];
    const char *p = base + off * es;
    if (es == 1) { /* bool, u8, i8: nonzero bytes */
      const uint8_t *b = (const uint8_t *)p;
      for (int64_t j = 0; j < len; j++) k += b[j * st] != 0;
    } else {
      for (int64_t j = 0; j < len; j++) {
        double f;
        int64_t i;
        dyn_read(dt, p + j * st * es, &f, &i);
        k += fl ? (f != 0) : (i != 0);
      }
    }
    for (int d = nd - 2; d >= 0 && ++q[d] == v->sizes[d]; d--) q[d] = 0;
  }
  return k;
}

/* ---- graph helpers ------------------------------------------------------ */

/* Positions of the true elements of m (see lower/internal.h). Each
 * element's position is scattered to its slot: the true ones' in order
 * first, then the false ones' (k + their rank among them), a permutation,
 * so no two updates meet (one shared slot for every false element chained
 * their adds through memory). */
tpuir_val tpulw__compact(tpulw__b *b, tpuir_val m, int64_t n, int64_t k) {
  tpuir_val c = tpulw__scan_op(b, tpulw__convert(b, m, TPU_I64), 0, TPUIR_ADD, 0);
  tpuir_val pos = tpuir_iota(b->g, TPU_I64, 1, &n, 0);
  tpuir_val slot = tpulw__sel(b, m, tpulw__bin_c(b, TPUIR_SUB, c, 1),
                              tpulw__bin(b, TPUIR_SUB, tpulw__bin_c(b, TPUIR_ADD, pos, (double)k), c));
  tpuir_val r = tpuir_scatter_add(b->g, tpulw__full(b, TPU_I64, 1, &n, 0), 0, slot, pos);
  int64_t st = 0, lim = k, str = 1;
  return tpuir_slice(b->g, r, &st, &lim, &str);
}

static tpuir_val dyn_flat(tpulw__b *b, tpuir_val v) {
  tpulw__shape s = tpulw__info(b, v);
  int64_t n = tpulw__numel(&s);
  return tpulw__reshape(b, v, 1, &n);
}

/* x != 0 as bool. */
static tpuir_val dyn_nz(tpulw__b *b, tpuir_val x) {
  tpulw__shape s = tpulw__info(b, x);
  if (s.dtype == TPU_BOOL) return x;
  return tpulw__bin(b, TPUIR_NE, x, tpulw__const(b, s.dtype, 0));
}

/* ---- nonzero ------------------------------------------------------------ */

/* nonzero(self) -> int64 [K, ndim]: data-dependent shape, synchronizes. */
static int nonzero_fn(tpulw__b *b) {
  const tpulw_tensor *self = tpulw__tensor_arg(b, "self");
  if (!self || self->device < 0)
    return tpu_error(TPU_E_UNSUPPORTED, "nonzero: unsupported arguments");
  b->out_rule = LW_OUT_SAME;
  int rc = dyn_sync(b->ctx->device);
  if (rc < 0) return rc;
  const tpu_view *v = &self->view;
  int nd = v->ndim;
  int64_t n = tpu_view_numel(v), k = tpulw__count_nz(v);
  tpuir_val flat = dyn_flat(b, tpulw__tensor(b, self));
  tpuir_val idx = tpulw__compact(b, dyn_nz(b, flat), n, k);
  LW_TRY(idx);
  int64_t os[2] = {k, nd};
  if (nd == 0) return tpulw__result(b, tpulw__full(b, TPU_I64, 2, os, 0));
  tpuir_val cols[TPU_MAX_DIMS];
  int64_t stride = 1, k1[2] = {k, 1};
  for (int d = nd - 1; d >= 0; d--) {
    tpuir_val c = tpulw__bin_c(b, TPUIR_DIV, idx, (double)stride);
    if (d > 0) c = tpulw__bin_c(b, TPUIR_REM, c, (double)v->sizes[d]);
    cols[d] = tpulw__reshape(b, c, 2, k1);
    LW_TRY(cols[d]);
    stride *= v->sizes[d] > 0 ? v->sizes[d] : 1;
  }
  return tpulw__result(b, tpuir_concat(b->g, nd, cols, 1));
}

/* ---- masked_select ------------------------------------------------------ */

/* masked_select(self, mask) -> 1-D: data-dependent shape, synchronizes. */
static int masked_select_fn(tpulw__b *b) {
  const tpulw_tensor *self = tpulw__tensor_arg(b, "self");
  const tpulw_tensor *mask = tpulw__tensor_arg(b, "mask");
  if (!self || !mask || mask->device < 0)
    return tpu_error(TPU_E_UNSUPPORTED, "masked_select: unsupported arguments");
  if (mask->view.dtype != TPU_BOOL)
    return tpu_error(TPU_E_INVALID,
                     "masked_select: expected BoolTensor for mask");
  b->out_rule = LW_OUT_SAME;
  tpuir_val vs[2] = {tpulw__tensor(b, self), tpulw__tensor(b, mask)};
  int rc = tpulw__bcast_all(b, 2, vs);
  if (rc < 0) return rc;
  rc = dyn_sync(b->ctx->device);
  if (rc < 0) return rc;
  tpulw__shape bs = tpulw__info(b, vs[0]);
  int64_t n = tpulw__numel(&bs), nm = tpu_view_numel(&mask->view);
  int64_t k = nm ? tpulw__count_nz(&mask->view) * (n / nm) : 0;
  tpuir_val idx = tpulw__compact(b, dyn_flat(b, vs[1]), n, k);
  LW_TRY(idx);
  return tpulw__result(b, tpuir_index_select(b->g, dyn_flat(b, vs[0]), 0, idx));
}

/* ---- unique ------------------------------------------------------------- */

static int dyn_cmp_f(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static int dyn_cmp_i(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* Number of distinct values of v (after dyn_sync); every NaN counts as
 * distinct (CPU's sort-based unique). consecutive: count runs instead (a
 * NaN starts a new run each time). -2 on OOM. */
static int64_t dyn_count_unique(const tpu_view *v, int consecutive) {
  int64_t n = tpu_view_numel(v);
  if (n == 0) return 0;
  int fl = tpu_dtype_is_float(v->dtype);
  double *f = malloc((size_t)n * sizeof *f);
  int64_t *i = malloc((size_t)n * sizeof *i);
  if (!f || !i) {
    free(f);
    free(i);
    return -2;
  }
  int64_t nan = 0, m = 0;
  for (int64_t j = 0; j < n; j++) {
    dyn_read(v->dtype, dyn_elem(v, j), &f[m], &i[m]);
    if (!consecutive && fl && isnan(f[m])) nan++;
    else m++;
  }
  int64_t u = m ? 1 : 0;
  if (consecutive) {
    for (int64_t j = 1; j < n; j++) u += fl ? !(f[j] == f[j - 1]) : i[j] != i[j - 1];
  } else if (fl) {
    qsort(f, (size_t)m, sizeof *f, dyn_cmp_f);
    for (int64_t j = 1; j < m; j++) u += f[j] != f[j - 1];
  } else {
    qsort(i, (size_t)m, sizeof *i, dyn_cmp_i);
    for (int64_t j = 1; j < m; j++) u += i[j] != i[j - 1];
  }
  free(f);
  free(i);
  return u + nan;
}

/* Shared tail of the unique ops: x flat [n] (in output order), first[i]
 * marks the first element of each output value, rank[i] (int64) its output
 * slot (0..u); inv_rank: the slot of each element of self in self's order
 * (flat). Declares (values [u], inverse (self's shape) or [0], counts [u]
 * or [0]). */
static int dyn_unique_results(tpulw__b *b, const tpulw_tensor *self, tpuir_val x,
                              tpuir_val first, tpuir_val rank, tpuir_val inv_rank,
                              int64_t n, int64_t u) {
  int inv = (int)tpulw__int(b, "return_inverse", 0);
  int cnt = (int)tpulw__int(b, "return_counts", 0);
  int64_t u1 = u + 1, st = 0, str = 1, zero = 0;
  tpuir_val slot = tpulw__sel(b, first, rank, tpulw__const(b, TPU_I64, (double)u));
  tpuir_val src = tpuir_scatter_add(b->g, tpulw__full(b, TPU_I64, 1, &u1, 0), 0,
                                    slot, tpuir_iota(b->g, TPU_I64, 1, &n, 0));
  tpuir_val idx = tpuir_slice(b->g, src, &st, &u, &str);
  int rc = tpulw__result(b, tpuir_index_select(b->g, x, 0, idx));
  if (rc < 0) return rc;
  rc = tpulw__result(b, inv ? tpulw__reshape(b, inv_rank, self->view.ndim, self->view.sizes)
                        : tpulw__full(b, TPU_I64, 1, &zero, 0));
  if (rc < 0) return rc;
  tpuir_val c = tpulw__full(b, TPU_I64, 1, &zero, 0);
  if (cnt)
    c = tpuir_scatter_add(b->g, tpulw__full(b, TPU_I64, 1, &u, 0), 0, rank,
                          tpulw__full(b, TPU_I64, 1, &n, 1));
  return tpulw__result(b, c);
}

/* Comparison operand: bool compared as uint8. */
static tpuir_val dyn_cmpable(tpulw__b *b, tpuir_val x) {
  return tpulw__info(b, x).dtype == TPU_BOOL ? tpulw__convert(b, x, TPU_U8) : x;
}

/* first[i]: xs[i] starts a new value (xs[i] != xs[i-1]; NaN != NaN),
 * xs flat [n > 0]. */
static tpuir_val dyn_first(tpulw__b *b, tpuir_val xs, int64_t n) {
  tpuir_val xc = dyn_cmpable(b, xs);
  int64_t s0 = 0, s1 = 1, e0 = n - 1, e1 = n, one = 1, str = 1;
  tpuir_val ne = tpulw__bin(b, TPUIR_NE, tpuir_slice(b->g, xc, &s1, &e1, &str),
                        tpuir_slice(b->g, xc, &s0, &e0, &str));
  tpuir_val parts[2] = {tpulw__full(b, TPU_BOOL, 1, &one, 1), ne};
  return tpuir_concat(b->g, 2, parts, 0);
}

/* _unique2(self, sorted, return_inverse, return_counts): sorted unique
 * values (CPU sorts for sorted=False too; every NaN is its own value, in
 * input order). Data-dependent shape: synchronizes. A stable TPUIR_SORT
 * of the flattened input, then run starts in the sorted order; the
 * inverse is scattered back through the permutation. */
static int unique2_fn(tpulw__b *b) {
  const tpulw_tensor *self = tpulw__tensor_arg(b, "self");
  if (!self || self->device < 0)
    return tpu_error(TPU_E_UNSUPPORTED, "_unique2: unsupported arguments");
  int64_t n = tpu_view_numel(&self->view);
  int rc = dyn_sync(b->ctx->device);
  if (rc < 0) return rc;
  int64_t u = dyn_count_unique(&self->view, 0);
  if (u == -2) return tpu_error(TPU_E_OOM, "_unique2: out of host memory");
  tpuir_val x = dyn_flat(b, tpulw__tensor(b, self));
  if (n == 0) {
    tpuir_val e = tpulw__full(b, TPU_BOOL, 1, &n, 1);
    return dyn_unique_results(b, self, x, e, tpulw__full(b, TPU_I64, 1, &n, 0),
                              tpulw__full(b, TPU_I64, 1, &n, 0), n, 0);
  }
  tpuir_val perm = tpuir_sort(b->g, x, 0, 0, TPUIR_SORT_INDICES);
  tpuir_val xs = tpuir_gather(b->g, x, 0, perm);
  tpuir_val first = dyn_first(b, xs, n);
  tpuir_val rank = tpulw__bin_c(b, TPUIR_SUB, tpulw__scan_op(b, tpulw__convert(b, first, TPU_I64), 0, TPUIR_ADD, 0), 1);
  tpuir_val inv = tpuir_scatter_add(b->g, tpulw__full(b, TPU_I64, 1, &n, 0), 0, perm, rank);
  LW_TRY(inv);
  return dyn_unique_results(b, self, xs, first, rank, inv, n, u);
}

static int unique_dim_fn(tpulw__b *b, const tpulw_tensor *self, int64_t dim_arg, int consecutive);

/* unique_consecutive(self, return_inverse, return_counts, dim=None).
 * Data-dependent shape: synchronizes. */
static int unique_consecutive_fn(tpulw__b *b) {
  const tpulw_tensor *self = tpulw__tensor_arg(b, "self");
  if (!self || self->device < 0)
    return tpu_error(TPU_E_UNSUPPORTED, "unique_consecutive: unsupported arguments");
  if (!tpulw__none(b, "dim") && !(self->view.ndim == 1 && (tpulw__int(b, "dim", 0) == 0 ||
                                                        tpulw__int(b, "dim", 0) == -1)))
    return unique_dim_fn(b, self, tpulw__int(b, "dim", 0), 1);
  int64_t n = tpu_view_numel(&self->view);
  int rc = dyn_sync(b->ctx->device);
  if (rc < 0) return rc;
  int64_t u = dyn_count_unique(&self->view, 1);
  if (u < 0) return tpu_error(TPU_E_OOM, "unique_consecutive: out of host memory");
  tpuir_val x = dyn_flat(b, tpulw__tensor(b, self));
  tpuir_val first = n == 0 ? tpulw__full(b, TPU_BOOL, 1, &n, 1) : dyn_first(b, x, n);
  tpuir_val rank = tpulw__bin_c(b, TPUIR_SUB, tpulw__scan_op(b, tpulw__convert(b, first, TPU_I64), 0, TPUIR_ADD, 0), 1);
  LW_TRY(rank);
  return dyn_unique_results(b, self, x, first, rank, rank, n, u);
}

/* ---- unique along a dim ------------------------------------------------- */

#define DYN_UNIQUE_DIM_COLS 512 /* lexicographic sort: one TPUIR_SORT per column */

typedef struct dyn_rows {
  const double *f;
  const int64_t *i;
  int64_t m;
  int fl;
} dyn_rows;
static dyn_rows g_rows; /* qsort context (guarded by g_rows_lock) */
static pthread_mutex_t g_rows_lock = PTHREAD_MUTEX_INITIALIZER;

/* lexicographic row order, NaN largest (the order of TPUIR_SORT) */
static int dyn_row_cmp(const void *pa, const void *pb) {
  int64_t a = *(const int64_t *)pa, c = *(const int64_t *)pb;
  for (int64_t k = 0; k < g_rows.m; k++) {
    int r;
    if (g_rows.fl) {
      double x = g_rows.f[a * g_rows.m + k], y = g_rows.f[c * g_rows.m + k];
      int xn = isnan(x), yn = isnan(y);
      r = (xn || yn) ? xn - yn : (x > y) - (x < y);
    } else {
      int64_t x = g_rows.i[a * g_rows.m + k], y = g_rows.i[c * g_rows.m + k];
      r = (x > y) - (x < y);
    }
    if (r) return r;
  }
  return (a > c) - (a < c);
}

/* row a != row c elementwise somewhere (NaN != NaN) */
static int dyn_row_ne(const dyn_rows *R, int64_t a, int64_t c) {
  for (int64_t k = 0; k < R->m; k++)
    if (R->fl ? !(R->f[a * R->m + k] == R->f[c * R->m + k])
              : R->i[a * R->m + k] != R->i[c * R->m + k])
      return 1;
  return 0;
}

/* Distinct rows of v read as [n, m] with `dim` first (after dyn_sync);
 * consecutive: runs instead. -2 on OOM. */
static int64_t dyn_count_unique_rows(const tpu_view *v, int dim, int consecutive) {
  tpu_view t = *v; /* dim moved first */
  for (int d = dim; d > 0; d--) {
    t.sizes[d] = v->sizes[d - 1];
    t.strides[d] = v->strides[d - 1];
  }
  t.sizes[0] = v->sizes[dim];
  t.strides[0] = v->strides[dim];
  int64_t N = tpu_view_numel(&t), n = t.sizes[0];
  if (n == 0) return 0;
  int64_t m = N / n;
  dyn_rows R = {NULL, NULL, m, tpu_dtype_is_float(v->dtype)};
  double *f = malloc((size_t)(N ? N : 1) * sizeof *f);
  int64_t *iv = malloc((size_t)(N ? N : 1) * sizeof *iv);
  int64_t *ord = malloc((size_t)n * sizeof *ord);
  if (!f || !iv || !ord) {
    free(f);
    free(iv);
    free(ord);
    return -2;
  }
  for (int64_t j = 0; j < N; j++) dyn_read(v->dtype, dyn_elem(&t, j), &f[j], &iv[j]);
  R.f = f;
  R.i = iv;
  for (int64_t j = 0; j < n; j++) ord[j] = j;
  if (!consecutive) {
    pthread_mutex_lock(&g_rows_lock);
    g_rows = R;
    qsort(ord, (size_t)n, sizeof *ord, dyn_row_cmp);
    pthread_mutex_unlock(&g_rows_lock);
  }
  int64_t u = 1;
  for (int64_t j = 1; j < n; j++) u += dyn_row_ne(&R, ord[j], ord[j - 1]);
  free(f);
  free(iv);
  free(ord);
  return u;
}

/* unique_dim(self, dim, sorted, ...) / unique_dim_consecutive /
 * unique_consecutive with a dim -> (values, inverse, counts): unique
 * slices along dim (always sorted lexicographically unless consecutive,
 * like CPU). Data-dependent shape: synchronizes. The slices are sorted
 * by one stable TPUIR_SORT per column, last column first. */
static int unique_dim_fn(tpulw__b *b, const tpulw_tensor *self, int64_t dim_arg, int consecutive) {
  const tpu_view *v = &self->view;
  int nd = v->ndim, dim;
  if (nd == 0)
    return tpu_error(TPU_E_INDEX, "Dimension specified as %lld but tensor has no dimensions",
                     (long long)dim_arg);
  int rc = tpulw__wrap_dim(dim_arg, nd, &dim);
  if (rc < 0) return rc;
  for (int d = 0; d < nd; d++)
    if (d != dim && v->sizes[d] == 0)
      return tpu_error(TPU_E_INVALID, "There are 0 sized dimensions, and they aren't selected, "
                       "so unique cannot be applied");
  int64_t n = v->sizes[dim], N = tpu_view_numel(v), m = n ? N / n : 0;
  if (m > DYN_UNIQUE_DIM_COLS && !consecutive)
    return tpu_error(TPU_E_UNSUPPORTED, "unique_dim: slices of %lld elements", (long long)m);
  rc = dyn_sync(b->ctx->device);
  if (rc < 0) return rc;
  int64_t u = dyn_count_unique_rows(v, dim, consecutive);
  if (u == -2) return tpu_error(TPU_E_OOM, "unique_dim: out of host memory");
  b->out_rule = LW_OUT_SAME;
  tpuir_val x = tpulw__tensor(b, self);
  int64_t perm[TPU_MAX_DIMS], inv[TPU_MAX_DIMS], ts[TPU_MAX_DIMS];
  perm[0] = dim;
  for (int d = 0, k = 1; d < nd; d++)
    if (d != dim) perm[k++] = d;
  for (int d = 0; d < nd; d++) {
    inv[perm[d]] = d;
    ts[d] = v->sizes[perm[d]];
  }
  int zero = 0;
  int64_t z = 0;
  if (n == 0) {
    if ((rc = tpulw__result(b, x)) < 0) return rc;
    if ((rc = tpulw__result(b, tpulw__full(b, TPU_I64, 1, &z, 0))) < 0) return rc;
    return tpulw__result(b, tpulw__full(b, TPU_I64, 1, &z, 0));
  }
  (void)zero;
  tpuir_val xt = dim ? tpuir_transpose(b->g, x, perm) : x;
  int64_t nm[2] = {n, m};
  tpuir_val x2 = dyn_cmpable(b, tpulw__reshape(b, xt, 2, nm));
  tpuir_val order = tpuir_iota(b->g, TPU_I64, 1, &n, 0);
  if (!consecutive)
    for (int64_t c = m - 1; c >= 0 && order >= 0; c--) {
      int64_t st[2] = {0, c}, lim[2] = {n, c + 1}, str[2] = {1, 1};
      tpuir_val col = tpulw__reshape(b, tpuir_slice(b->g, x2, st, lim, str), 1, &n);
      tpuir_val key = tpuir_index_select(b->g, col, 0, order);
      order = tpuir_index_select(b->g, order, 0, tpuir_sort(b->g, key, 0, 0, TPUIR_SORT_INDICES));
    }
  tpuir_val xs = consecutive ? x2 : tpuir_index_select(b->g, x2, 0, order);
  tpuir_val first;
  int64_t one = 1;
  if (n == 1) {
    first = tpulw__full(b, TPU_BOOL, 1, &one, 1);
  } else {
    int64_t s0[2] = {0, 0}, e0[2] = {n - 1, m}, s1[2] = {1, 0}, e1[2] = {n, m}, str[2] = {1, 1};
    tpuir_val ne = tpulw__bin(b, TPUIR_NE, tpuir_slice(b->g, xs, s1, e1, str),
                          tpuir_slice(b->g, xs, s0, e0, str));
    int64_t ax = 1, n1 = n - 1;
    ne = m ? tpuir_reduce(b->g, TPUIR_RED_OR, ne, 1, &ax) : tpulw__full(b, TPU_BOOL, 1, &n1, 0);
    tpuir_val parts[2] = {tpulw__full(b, TPU_BOOL, 1, &one, 1), ne};
    first = tpuir_concat(b->g, 2, parts, 0);
  }
  tpuir_val rank = tpulw__bin_c(b, TPUIR_SUB, tpulw__scan_op(b, tpulw__convert(b, first, TPU_I64), 0, TPUIR_ADD, 0), 1);
  tpuir_val invv = consecutive ? rank
                               : tpuir_scatter_add(b->g, tpulw__full(b, TPU_I64, 1, &n, 0), 0, order, rank);
  int64_t u1 = u + 1, st = 0, str = 1;
  tpuir_val slot = tpulw__sel(b, first, rank, tpulw__const(b, TPU_I64, (double)u));
  tpuir_val src = tpuir_scatter_add(b->g, tpulw__full(b, TPU_I64, 1, &u1, 0), 0, slot,
                                    tpuir_iota(b->g, TPU_I64, 1, &n, 0));
  tpuir_val rows = tpuir_slice(b->g, src, &st, &u, &str);
  if (!consecutive) rows = tpuir_index_select(b->g, order, 0, rows);
  int64_t xn[2] = {n, m};
  tpuir_val vals = tpuir_index_select(b->g, tpulw__reshape(b, xt, 2, xn), 0, rows);
  ts[0] = u;
  vals = tpulw__reshape(b, vals, nd, ts);
  if (dim) vals = tpuir_transpose(b->g, vals, inv);
  if ((rc = tpulw__result(b, vals)) < 0) return rc;
  if ((rc = tpulw__result(b, invv)) < 0) return rc;
  return tpulw__result(b, tpuir_scatter_add(b->g, tpulw__full(b, TPU_I64, 1, &u, 0), 0, rank,
                                        tpulw__full(b, TPU_I64, 1, &n, 1)));
}

static int unique_dim_row_fn(tpulw__b *b) {
  const tpulw_tensor *self = tpulw__tensor_arg(b, "self");
  if (!self || self->device < 0)
    return tpu_error(TPU_E_UNSUPPORTED, "%s: unsupported arguments", b->base);
  return unique_dim_fn(b, self, tpulw__int(b, "dim", 0),
                       strcmp(b->base, "unique_dim_consecutive") == 0);
}

/* ---- repeat_interleave.Tensor / bincount -------------------------------- */

/* Sum and minimum of a 1-D integer view (after dyn_sync). */
static void dyn_sum_min_max(const tpu_view *v, int64_t *sum, int64_t *mn, int64_t *mx) {
  int64_t n = tpu_view_numel(v);
  *sum = 0;
  *mn = INT64_MAX;
  *mx = INT64_MIN;
  for (int64_t j = 0; j < n; j++) {
    double f;
    int64_t i;
    dyn_read(v->dtype, dyn_elem(v, j), &f, &i);
    *sum += i;
    if (i < *mn) *mn = i;
    if (i > *mx) *mx = i;
  }
}

/* repeat_interleave.Tensor(repeats, output_size): index i repeated
 * repeats[i] times. Data-dependent shape: synchronizes. Each nonzero
 * repeat writes i at its first output slot; a running max fills the rest. */
static int repeat_interleave_fn(tpulw__b *b) {
  const tpulw_tensor *rep = tpulw__tensor_arg(b, "repeats");
  if (!rep || rep->device < 0)
    return tpu_error(TPU_E_UNSUPPORTED, "repeat_interleave: unsupported arguments");
  int dt = rep->view.dtype;
  if (dt != TPU_I32 && dt != TPU_I64)
    return tpu_error(TPU_E_UNSUPPORTED, "\"repeat_interleave_cpu\" not implemented for '%s'",
                     tpulw__torch_name(dt));
  if (rep->view.ndim != 1)
    return tpu_error(TPU_E_INVALID, "repeat_interleave only accept 1D vector as repeat");
  int rc = dyn_sync(b->ctx->device);
  if (rc < 0) return rc;
  int64_t n = rep->view.sizes[0], total, mn, mx;
  dyn_sum_min_max(&rep->view, &total, &mn, &mx);
  if (n > 0 && mn < 0) return tpu_error(TPU_E_INVALID, "repeats can not be negative");
  if (!tpulw__none(b, "output_size") && tpulw__int(b, "output_size", -1) != total)
    return tpu_error(TPU_E_INVALID, "allocated size does not match required size");
  b->out_rule = LW_OUT_SAME;
  if (total == 0) return tpulw__result(b, tpulw__full(b, dt, 1, &total, 0));
  tpuir_val r = tpulw__convert(b, tpulw__tensor(b, rep), TPU_I64);
  tpuir_val start = tpulw__bin(b, TPUIR_SUB, tpulw__scan_op(b, r, 0, TPUIR_ADD, 0), r);
  tpuir_val slot = tpulw__sel(b, tpulw__bin_c(b, TPUIR_GT, r, 0), start, tpulw__const(b, TPU_I64, (double)total));
  int64_t t1 = total + 1, st = 0, str = 1;
  tpuir_val a = tpuir_scatter_add(b->g, tpulw__full(b, TPU_I64, 1, &t1, 0), 0, slot,
                                  tpuir_iota(b->g, TPU_I64, 1, &n, 0));
  a = tpuir_slice(b->g, a, &st, &total, &str);
  tpuir_val zero = tpulw__const(b, TPU_I64, 0);
  for (int64_t k = 1; k < total && a >= 0; k *= 2) {
    int64_t lo = k, hi = -k, in = 0;
    a = tpulw__bin(b, TPUIR_MAX, a, tpuir_pad(b->g, a, zero, &lo, &hi, &in));
  }
  return tpulw__result_as(b, a, dt);
}

/* bincount(self, weights, minlength): counts (int64) or summed weights
 * (float32 weights: float32, others: float64) of each value of the 1-D
 * non-negative integer input. Data-dependent shape: synchronizes. */
static int bincount_fn(tpulw__b *b) {
  const tpulw_tensor *self = tpulw__tensor_arg(b, "self");
  const tpulw_tensor *w = tpulw__tensor_arg(b, "weights");
  if (!self || self->device < 0 || (w && w->device < 0))
    return tpu_error(TPU_E_UNSUPPORTED, "bincount: unsupported arguments");
  int dt = self->view.dtype;
  if (!tpu_dtype_is_int(dt))
    return tpu_error(TPU_E_UNSUPPORTED, "\"bincount_cpu\" not implemented for '%s'",
                     tpulw__torch_name(dt));
  int64_t minlength = tpulw__int(b, "minlength", 0);
  if (minlength < 0) return tpu_error(TPU_E_INVALID, "minlength should be >= 0");
  if (self->view.ndim != 1)
    return tpu_error(TPU_E_INVALID, "bincount only supports 1-d non-negative integral inputs.");
  int64_t n = self->view.sizes[0];
  if (w && (w->view.ndim != 1 || w->view.sizes[0] != n))
    return tpu_error(TPU_E_INVALID, "weights should be 1-d and have the same length as input");
  int rc = dyn_sync(b->ctx->device);
  if (rc < 0) return rc;
  int64_t sum, mn, mx;
  dyn_sum_min_max(&self->view, &sum, &mn, &mx);
  if (n > 0 && mn < 0)
    return tpu_error(TPU_E_INVALID, "bincount only supports 1-d non-negative integral inputs.");
  int64_t size = n > 0 && mx + 1 > minlength ? mx + 1 : minlength;
  int odt = !w ? TPU_I64 : w->view.dtype == TPU_F32 ? TPU_F32 : TPU_F64;
  b->out_rule = LW_OUT_SAME;
  tpuir_val z = tpulw__full(b, odt, 1, &size, 0);
  if (n == 0) return tpulw__result(b, z);
  tpuir_val src = w ? tpulw__convert(b, tpulw__tensor(b, w), odt) : tpulw__full(b, odt, 1, &n, 1);
  return tpulw__result(b, tpuir_index_add(b->g, z, 0, tpulw__convert(b, tpulw__tensor(b, self), TPU_I64),
                                      src));
}

/* ---- scatter_reduce / index_reduce -------------------------------------- */

enum { SR_SUM = 0, SR_PROD, SR_MEAN, SR_AMAX, SR_AMIN };

static int sr_kind(const char *r, int index_reduce) {
  static const char *names[] = {"sum", "prod", "mean", "amax", "amin"};
  for (int k = index_reduce ? 1 : 0; r && k < 5; k++)
    if (strcmp(r, names[k]) == 0) return k;
  return -1;
}

#define SR_PAIRS_CAP ((int64_t)1 << 25) /* elements of the all-pairs mask */

/* Identity of max (lo) or min (!lo) in dtype dt. */
static tpuir_val sr_extreme(tpulw__b *b, int dt, int lo) {
  if (tpu_dtype_is_float(dt)) return tpulw__const(b, dt, lo ? -INFINITY : INFINITY);
  int64_t mn = 0, mx = 0;
  switch (dt) {
    case TPU_BOOL: mn = 0; mx = 1; break;
    case TPU_U8: mn = 0; mx = 255; break;
    case TPU_I8: mn = INT8_MIN; mx = INT8_MAX; break;
    case TPU_I16: mn = INT16_MIN; mx = INT16_MAX; break;
    case TPU_I32: mn = INT32_MIN; mx = INT32_MAX; break;
    default: mn = INT64_MIN; mx = INT64_MAX; break;
  }
  return tpuir_const_i(b->g, dt, lo ? mn : mx);
}

/* Reduce src (shape I) into self (rank r) along d at positions idx (int64,
 * shape I; I[e] <= self[e] off d): torch.scatter_reduce semantics. sum and
 * mean use scatter_add; prod/amax/amin compare every source element with
 * every slot of dim d (cost numel(I) * self[d], capped). The int64 count
 * scatter also range-checks idx (a synchronizing launch). */
static int sr_core(tpulw__b *b, const tpulw_tensor *self, int d, tpuir_val idx,
                   tpuir_val src, int kind, int include_self) {
  int dt = self->view.dtype, r = self->view.ndim;
  /* bool: 0/1 in int64 (sum -> any, prod -> all), converted back */
  int cdt = tpu_dtype_is_float(dt) ? tpulw__opmath(dt) : dt == TPU_BOOL ? TPU_I64 : dt;
  int64_t one = 1;
  const int64_t *ss = r ? self->view.sizes : &one;
  tpuir_val sv = tpulw__convert(b, tpulw__tensor(b, self), cdt);
  if (r == 0) { /* a 0-dim self acts as [1] */
    r = 1;
    sv = tpulw__reshape(b, sv, 1, &one);
    idx = tpulw__reshape(b, idx, 1, &one);
    src = tpulw__reshape(b, src, 1, &one);
  }
  tpulw__shape is = tpulw__info(b, idx);
  src = tpulw__convert(b, src, cdt);
  tpuir_val cnt = tpuir_scatter_add(b->g, tpulw__full(b, TPU_I64, r, ss, 0), d, idx,
                                    tpulw__full(b, TPU_I64, is.ndim, is.sizes, 1));
  tpuir_val hit = tpulw__bin(b, TPUIR_GT, cnt, tpulw__const(b, TPU_I64, 0));
  LW_TRY(hit);
  b->sync = 1;
  b->err_remap = LW_ERR_RUNTIME;
  tpuir_val red;
  if (kind == SR_SUM || kind == SR_MEAN) {
    red = tpuir_scatter_add(b->g, tpulw__full(b, cdt, r, ss, 0), d, idx, src);
  } else {
    int64_t e[TPU_MAX_DIMS + 1], dims[TPU_MAX_DIMS], perm[TPU_MAX_DIMS];
    int64_t n = tpulw__numel(&is) * ss[d];
    if (r + 1 > TPU_MAX_DIMS || n > SR_PAIRS_CAP)
      return tpu_error(TPU_E_UNSUPPORTED, "scatter_reduce: too large for all-pairs");
    for (int i = 0; i < r; i++) {
      e[i] = is.sizes[i];
      dims[i] = i;
      perm[i] = i < d ? i : i == d ? r - 1 : i - 1;
    }
    e[r] = ss[d];
    int rk = kind == SR_PROD ? TPUIR_RED_PROD : kind == SR_AMAX ? TPUIR_RED_MAX : TPUIR_RED_MIN;
    tpuir_val ident = kind == SR_PROD ? tpulw__const(b, cdt, 1) : sr_extreme(b, cdt, kind == SR_AMAX);
    tpuir_val mask = tpulw__bin(b, TPUIR_EQ, tpuir_broadcast_in_dim(b->g, idx, r + 1, e, dims),
                            tpuir_iota(b->g, TPU_I64, r + 1, e, r));
    tpuir_val vals = tpulw__sel(b, mask, tpuir_broadcast_in_dim(b->g, src, r + 1, e, dims), ident);
    int64_t rd = d;
    red = tpuir_transpose(b->g, tpuir_reduce(b->g, rk, vals, 1, &rd), perm);
    int64_t lo[TPU_MAX_DIMS] = {0}, hi[TPU_MAX_DIMS] = {0}, in[TPU_MAX_DIMS] = {0};
    for (int i = 0; i < r; i++) hi[i] = i == d ? 0 : ss[i] - is.sizes[i];
    red = tpuir_pad(b->g, red, ident, lo, hi, in);
  }
  LW_TRY(red);
  if (include_self) {
    static const int ops[] = {TPUIR_ADD, TPUIR_MUL, TPUIR_ADD, TPUIR_MAX, TPUIR_MIN};
    red = tpulw__bin(b, ops[kind], sv, red);
  }
  if (kind == SR_MEAN) {
    tpuir_val den = tpulw__convert(b, include_self ? tpulw__bin_c(b, TPUIR_ADD, cnt, 1) : cnt, cdt);
    den = tpulw__sel(b, hit, den, tpulw__const(b, cdt, 1));
    tpuir_val q = tpulw__bin(b, TPUIR_DIV, red, den);
    if (!tpu_dtype_is_float(cdt)) { /* floor division (den > 0) */
      tpuir_val rem = tpulw__bin(b, TPUIR_REM, red, den);
      q = tpulw__sel(b, tpulw__bin(b, TPUIR_LT, rem, tpulw__const(b, cdt, 0)), tpulw__bin_c(b, TPUIR_SUB, q, 1), q);
    }
    red = q;
  }
  tpuir_val res = tpulw__sel(b, hit, red, sv);
  if (self->view.ndim == 0) res = tpulw__reshape(b, res, 0, NULL);
  return tpulw__result_as(b, res, dt);
}

/* Shared entry (lower/internal.h): scatter_reduce of src into self along d
 * at int64 positions idx with reduce "sum" | "prod" | "mean" | "amax" |
 * "amin". */
int tpulw__scatter_reduce(tpulw__b *b, const tpulw_tensor *self, int d, tpuir_val idx, tpuir_val src,
                      const char *reduce, int include_self) {
  int kind = sr_kind(reduce, 0);
  if (kind < 0) return tpu_error(TPU_E_INVALID, "scatter_reduce: bad reduce %s", reduce);
  return sr_core(b, self, d, idx, src, kind, include_self);
}

/* scatter_reduce.two(self, dim, index, src, reduce, include_self) and its
 * out= / in-place forms. */
static int scatter_reduce_fn(tpulw__b *b) {
  const tpulw_tensor *self = tpulw__tensor_arg(b, "self");
  const tpulw_tensor *index = tpulw__tensor_arg(b, "index");
  const tpulw_tensor *src = tpulw__tensor_arg(b, "src");
  if (!self || !index || !src || self->device < 0 || index->device < 0 ||
      src->device < 0)
    return tpu_error(TPU_E_UNSUPPORTED, "scatter_reduce: unsupported arguments");
  int kind = sr_kind(tpulw__str(b, "reduce"), 0);
  if (kind < 0)
    return tpu_error(TPU_E_INVALID, "reduce argument must be either sum, prod, mean, "
                     "amax or amin, got %s", tpulw__str(b, "reduce") ? tpulw__str(b, "reduce") : "None");
  if (index->view.dtype != TPU_I64 && index->view.dtype != TPU_I32)
    return tpu_error(TPU_E_INVALID, "scatter(): Expected dtype int32/int64 for index");
  if (src->view.dtype != self->view.dtype)
    return tpu_error(TPU_E_INVALID, "scatter(): Expected self.dtype to be equal to src.dtype");
  int r = self->view.ndim, d;
  int rc = tpulw__wrap_dim(tpulw__int(b, "dim", 0), r, &d);
  if (rc < 0) return rc;
  const tpu_view *iv = &index->view;
  if (iv->ndim != r || src->view.ndim != r)
    return tpu_error(TPU_E_INVALID, "Index tensor must have the same number of dimensions "
                     "as self tensor");
  for (int i = 0; i < r; i++)
    if (iv->sizes[i] > src->view.sizes[i] || (i != d && iv->sizes[i] > self->view.sizes[i]))
      return tpu_error(TPU_E_INVALID, "Expected index %s to be smaller than self apart "
                       "from dimension %d and to be smaller size than src", "shape", d);
  tpuir_val sv = tpulw__tensor(b, src);
  int64_t st[TPU_MAX_DIMS] = {0}, str[TPU_MAX_DIMS];
  for (int i = 0; i < r; i++) str[i] = 1;
  if (r > 0) sv = tpuir_slice(b->g, sv, st, iv->sizes, str);
  return sr_core(b, self, d, tpulw__convert(b, tpulw__tensor(b, index), TPU_I64), sv, kind,
                 (int)tpulw__int(b, "include_self", 1));
}

/* index_reduce(self, dim, index, source, reduce, include_self) (+ out=,
 * in-place): scatter_reduce with index broadcast along source. */
static int index_reduce_fn(tpulw__b *b) {
  const tpulw_tensor *self = tpulw__tensor_arg(b, "self");
  const tpulw_tensor *index = tpulw__tensor_arg(b, "index");
  const tpulw_tensor *src = tpulw__tensor_arg(b, "source");
  if (!self || !index || !src || self->device < 0 || index->device < 0 ||
      src->device < 0)
    return tpu_error(TPU_E_UNSUPPORTED, "index_reduce: unsupported arguments");
  int kind = sr_kind(tpulw__str(b, "reduce"), 1);
  if (kind < 0)
    return tpu_error(TPU_E_INVALID, "index_reduce(): Expected reduce to be one of prod, "
                     "mean, amax or amin, got %s.", tpulw__str(b, "reduce") ? tpulw__str(b, "reduce") : "None");
  if (index->view.dtype != TPU_I64 && index->view.dtype != TPU_I32)
    return tpu_error(TPU_E_INVALID, "index_reduce_(): Expected dtype int32/int64 for index");
  if (src->view.dtype != self->view.dtype)
    return tpu_error(TPU_E_INVALID, "index_reduce_(): self (%s) and source (%s) must have "
                     "the same scalar type", tpulw__torch_name(self->view.dtype),
                     tpulw__torch_name(src->view.dtype));
  int r = self->view.ndim, d;
  int rc = tpulw__wrap_dim(tpulw__int(b, "dim", 0), r, &d);
  if (rc < 0) return rc;
  int64_t l = tpu_view_numel(&index->view);
  if (r == 0) {
    if (l != 1 || tpu_view_numel(&src->view) != 1 || src->view.ndim > 1)
      return tpu_error(TPU_E_UNSUPPORTED, "index_reduce: 0-dim self");
    return sr_core(b, self, 0, tpulw__convert(b, tpulw__tensor(b, index), TPU_I64),
                   tpulw__tensor(b, src), kind, (int)tpulw__int(b, "include_self", 1));
  }
  if (index->view.ndim > 1)
    return tpu_error(TPU_E_INVALID, "index_reduce_(): Index is supposed to be a vector");
  if (src->view.ndim != r || src->view.sizes[d] != l)
    return tpu_error(TPU_E_INVALID, "index_reduce_(): Number of indices (%lld) should be "
                     "equal to source.size(dim) (%lld)", (long long)l,
                     (long long)(src->view.ndim == r ? src->view.sizes[d] : -1));
  for (int i = 0; i < r; i++)
    if (i != d && src->view.sizes[i] != self->view.sizes[i])
      return tpu_error(TPU_E_INVALID, "index_reduce_(): source and self must have the "
                       "same shape apart from dim %d", d);
  tpuir_val iv = tpulw__reshape(b, tpulw__convert(b, tpulw__tensor(b, index), TPU_I64), 1, &l);
  int64_t dd = d;
  iv = tpuir_broadcast_in_dim(b->g, iv, r, src->view.sizes, &dd);
  return sr_core(b, self, d, iv, tpulw__tensor(b, src), kind,
                 (int)tpulw__int(b, "include_self", 1));
}

/* ---- logspace.out ------------------------------------------------------- */

/* logspace.out(start, end, steps, base, out): base ** linspace(start, end)
 * (exponents like PyTorch CPU: integer dtypes truncate start/end first;
 * the two halves are computed from either end). */
static int logspace_fn(tpulw__b *b) {
  const tpulw_tensor *out = tpulw__tensor_arg(b, "out");
  tpulw__scalar start, end;
  if (!out || out->device < 0 || !tpulw__scalar_arg(b, "start", &start) ||
      !tpulw__scalar_arg(b, "end", &end))
    return tpu_error(TPU_E_UNSUPPORTED, "logspace: needs scalar start/end and out");
  int64_t steps = tpulw__int(b, "steps", -1);
  if (steps < 0) return tpu_error(TPU_E_INVALID, "number of steps must be non-negative");
  int dt = out->view.dtype;
  if (dt == TPU_BOOL)
    return tpu_error(TPU_E_UNSUPPORTED, "\"logspace_cpu\" not implemented for 'Bool'");
  double base = tpulw__float(b, "base", 10.0), s0 = start.f, s1 = end.f;
  if (!tpu_dtype_is_float(dt)) {
    s0 = start.kind == LW_SK_FLOAT ? trunc(start.f) : (double)start.i;
    s1 = end.kind == LW_SK_FLOAT ? trunc(end.f) : (double)end.i;
    /* start/end converted to the integer dtype first (wrapping) */
    int64_t w0 = (int64_t)s0, w1 = (int64_t)s1;
    switch (dt) {
      case TPU_U8: w0 = (uint8_t)w0; w1 = (uint8_t)w1; break;
      case TPU_I8: w0 = (int8_t)w0; w1 = (int8_t)w1; break;
      case TPU_I16: w0 = (int16_t)w0; w1 = (int16_t)w1; break;
      case TPU_I32: w0 = (int32_t)w0; w1 = (int32_t)w1; break;
      default: break;
    }
    s0 = (double)w0;
    s1 = (double)w1;
  }
  int cdt = dt == TPU_F64 || !tpu_dtype_is_float(dt) ? TPU_F64 : TPU_F32;
  int64_t sz[1] = {steps};
  tpuir_val e;
  if (steps == 1) {
    e = tpulw__full(b, cdt, 1, sz, s0);
  } else {
    double stepv = (s1 - s0) / (double)(steps - 1);
    tpuir_val i = tpuir_iota(b->g, cdt, 1, sz, 0);
    tpuir_val st = tpulw__const(b, cdt, stepv);
    tpuir_val lo = tpulw__bin(b, TPUIR_ADD, tpulw__const(b, cdt, s0), tpulw__bin(b, TPUIR_MUL, st, i));
    tpuir_val rev = tpulw__bin(b, TPUIR_SUB, tpulw__const(b, cdt, (double)(steps - 1)), i);
    tpuir_val hi = tpulw__bin(b, TPUIR_SUB, tpulw__const(b, cdt, s1), tpulw__bin(b, TPUIR_MUL, st, rev));
    e = tpulw__sel(b, tpulw__bin(b, TPUIR_LT, i, tpulw__const(b, cdt, (double)(steps / 2))), lo, hi);
  }
  e = tpulw__convert(b, e, TPU_F64);
  tpuir_val r = tpulw__bin(b, TPUIR_POW, tpulw__bcast(b, tpulw__const(b, TPU_F64, base), 1, sz), e);
  b->out_rule = LW_OUT_ANY;
  return tpulw__result_as(b, r, dt);
}

/* ---- polygamma ---------------------------------------------------------- */

/* trigamma(x) in x's dtype (PyTorch's CPU formula: reflection below 0.5). */
static tpuir_val pg_trigamma(tpulw__b *b, tpuir_val x) {
  const double pi = 3.14159265358979323846;
  int dt = tpulw__info(b, x).dtype;
  tpuir_val refl = tpulw__bin_c(b, TPUIR_LT, x, 0.5);
  tpuir_val sp = tpulw__un(b, TPUIR_SIN, tpulw__bin_c(b, TPUIR_MUL, x, pi));
  tpuir_val rterm = tpulw__bin(b, TPUIR_DIV, tpulw__const(b, dt, -pi * pi),
                           tpulw__bin(b, TPUIR_MUL, sp, sp));
  tpuir_val zero = tpulw__const(b, dt, 0);
  tpuir_val res = tpulw__sel(b, refl, rterm, zero);
  x = tpulw__sel(b, refl, tpulw__bin(b, TPUIR_SUB, tpulw__const(b, dt, 1), x), x);
  tpuir_val one = tpulw__const(b, dt, 1);
  for (int i = 0; i < 6; i++) {
    res = tpulw__bin(b, TPUIR_ADD, res, tpulw__bin(b, TPUIR_DIV, one, tpulw__bin(b, TPUIR_MUL, x, x)));
    x = tpulw__bin_c(b, TPUIR_ADD, x, 1);
  }
  tpuir_val ixx = tpulw__bin(b, TPUIR_DIV, one, tpulw__bin(b, TPUIR_MUL, x, x));
  /* 1 + 1/(2x) + ixx*(1/6 - ixx*(1/30 - ixx/42)) */
  tpuir_val p = tpulw__bin(b, TPUIR_SUB, tpulw__const(b, dt, 1.0 / 30),
                       tpulw__bin_c(b, TPUIR_MUL, ixx, 1.0 / 42));
  p = tpulw__bin(b, TPUIR_SUB, tpulw__const(b, dt, 1.0 / 6), tpulw__bin(b, TPUIR_MUL, ixx, p));
  p = tpulw__bin(b, TPUIR_MUL, ixx, p);
  p = tpulw__bin(b, TPUIR_ADD, p, tpulw__bin(b, TPUIR_DIV, one, tpulw__bin_c(b, TPUIR_MUL, x, 2)));
  p = tpulw__bin_c(b, TPUIR_ADD, p, 1);
  res = tpulw__bin(b, TPUIR_ADD, res, tpulw__bin(b, TPUIR_DIV, p, x));
  return tpulw__sel(b, refl, tpulw__un(b, TPUIR_NEG, res), res);
}

/* Hurwitz zeta(s, q) in q's dtype (Cephes, as PyTorch: direct terms
 * while k < 9 or q + k <= 9 - up to DYN_ZETA_TERMS, so exact for
 * q >= 9 - DYN_ZETA_TERMS - then Euler-Maclaurin with 12 Bernoulli terms;
 * a non-positive integer q gives inf). */
#define DYN_ZETA_TERMS 48
static tpuir_val pg_zeta(tpulw__b *b, double s, tpuir_val q) {
  static const double A[12] = {
      12.0, -720.0, 30240.0, -1209600.0, 47900160.0, -1.8924375803183791606e9,
      7.47242496e10, -2.950130727918164224e12, 1.1646782814350067249e14,
      -4.5979787224074726105e15, 1.8152105401943546773e17,
      -7.1661652561756670113e18};
  int dt = tpulw__info(b, q).dtype;
  tpuir_val ms = tpulw__const(b, dt, -s);
  /* K = max(9, floor(9 - q) + 1), at most DYN_ZETA_TERMS */
  tpuir_val kk = tpulw__bin_c(b, TPUIR_ADD, tpulw__un(b, TPUIR_FLOOR, tpulw__bin(b, TPUIR_SUB,
                                              tpulw__const(b, dt, 9), q)), 1);
  kk = tpulw__bin(b, TPUIR_MIN, tpulw__bin(b, TPUIR_MAX, kk, tpulw__const(b, dt, 9)),
              tpulw__const(b, dt, DYN_ZETA_TERMS));
  tpuir_val sum = tpulw__bin(b, TPUIR_POW, q, ms), zero = tpulw__const(b, dt, 0);
  for (int k = 1; k <= DYN_ZETA_TERMS; k++) {
    tpuir_val t = tpulw__bin(b, TPUIR_POW, tpulw__bin_c(b, TPUIR_ADD, q, k), ms);
    if (k > 9) t = tpulw__sel(b, tpulw__bin_c(b, TPUIR_LE, kk, k - 0.5), zero, t);
    sum = tpulw__bin(b, TPUIR_ADD, sum, t);
  }
  tpuir_val w = tpulw__bin(b, TPUIR_ADD, q, kk);
  tpuir_val bb = tpulw__bin(b, TPUIR_POW, w, ms);
  sum = tpulw__bin(b, TPUIR_ADD, sum, tpulw__bin_c(b, TPUIR_MUL, tpulw__bin(b, TPUIR_MUL, bb, w), 1.0 / (s - 1)));
  sum = tpulw__bin(b, TPUIR_SUB, sum, tpulw__bin_c(b, TPUIR_MUL, bb, 0.5));
  double ac = 1, k = 0;
  for (int i = 0; i < 12; i++) {
    ac *= s + k;
    bb = tpulw__bin(b, TPUIR_DIV, bb, w);
    sum = tpulw__bin(b, TPUIR_ADD, sum, tpulw__bin_c(b, TPUIR_MUL, bb, ac / A[i]));
    k += 1;
    bb = tpulw__bin(b, TPUIR_DIV, bb, w);
    ac *= s + k;
  }
  tpuir_val pole = tpulw__bin(b, TPUIR_AND, tpulw__bin_c(b, TPUIR_LE, q, 0),
                          tpulw__bin(b, TPUIR_EQ, q, tpulw__un(b, TPUIR_FLOOR, q)));
  return tpulw__sel(b, pole, tpulw__const(b, dt, INFINITY), sum);
}

/* polygamma(n, self) (+ out=, polygamma_(self, n)): n = 0 digamma, 1
 * trigamma, else (-1)^(n+1) n! zeta(n+1, x), computed in the result's
 * opmath dtype like PyTorch CPU. */
static int polygamma_fn(tpulw__b *b) {
  const tpulw_tensor *self = tpulw__tensor_arg(b, "self");
  if (!self || self->device < 0)
    return tpu_error(TPU_E_UNSUPPORTED, "polygamma: unsupported arguments");
  int64_t n = tpulw__int(b, "n", -1);
  if (n < 0)
    return tpu_error(TPU_E_INVALID, "polygamma(n, x) does not support negative n.");
  int dt = tpulw__float_or_default(self->view.dtype);
  tpuir_val x = tpulw__tensor(b, self);
  if (n == 0)
    return tpulw__result(b, tpulw__un(b, TPUIR_DIGAMMA, tpulw__convert(b, x, dt)));
  x = tpulw__convert(b, x, tpulw__opmath(dt));
  tpuir_val r;
  if (n == 1) {
    r = pg_trigamma(b, x);
  } else {
    double f = ((n % 2) ? 1.0 : -1.0) * exp(lgamma((double)n + 1.0));
    r = tpulw__bin_c(b, TPUIR_MUL, pg_zeta(b, (double)n + 1, x), f);
  }
  return tpulw__result_as(b, r, dt);
}

/* ---- table -------------------------------------------------------------- */

const tpulw__row tpulw__rows_dynamic[] = {
    {"nonzero", nonzero_fn, 0},
    {"nonzero.out", nonzero_fn, 0},
    {"masked_select", masked_select_fn, 0},
    {"masked_select.out", masked_select_fn, 0},
    {"_unique2", unique2_fn, 0},
    {"unique_consecutive", unique_consecutive_fn, 0},
    {"unique_dim", unique_dim_row_fn, 0},
    {"unique_dim_consecutive", unique_dim_row_fn, 0},
    {"scatter_reduce.two", scatter_reduce_fn, 0},
    {"scatter_reduce.two_out", scatter_reduce_fn, 0},
    {"scatter_reduce_.two", scatter_reduce_fn, 0},
    {"index_reduce", index_reduce_fn, 0, LW_CPU_INDEX},
    {"index_reduce.out", index_reduce_fn, 0, LW_CPU_INDEX},
    {"index_reduce_", index_reduce_fn, 0, LW_CPU_INDEX},
    {"logspace.out", logspace_fn, 0},
    {"repeat_interleave.Tensor", repeat_interleave_fn, 0},
    {"bincount", bincount_fn, 0},
    {"bincount.out", bincount_fn, 0},
    {"polygamma", polygamma_fn, 0},
    {"polygamma.out", polygamma_fn, 0},
    {"polygamma_", polygamma_fn, 0},
};
const int tpulw__nrows_dynamic = sizeof tpulw__rows_dynamic / sizeof tpulw__rows_dynamic[0];

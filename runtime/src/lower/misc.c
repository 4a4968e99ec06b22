/* lower/misc.c - assorted ATen ops built from existing IR ops:
 *   log-step scans along a dim: logcumsumexp, cummax/cummin (value + index
 *     pairs with PyTorch CPU's tie/NaN rule);
 *   mode (TPUIR_SORT, run lengths, first longest run);
 *   compaction with a static size: nonzero_static, tril/triu_indices;
 *   masked_scatter, put (flat scatter with range checks at run time);
 *   renorm, linalg_cross;
 *   histogram / histogramdd (bin search by comparison with the edges,
 *     counts by index_add).
 * Rows: tpulw__rows_misc (table_init in lower/lower.c).
 */
#include <math.h>
#include <string.h>

#include "lower/internal.h"

/* ---- shared helpers ----------------------------------------------------- */

/* v shifted by k (> 0) towards higher indices along dim; the first k
 * entries take `fill` (a rank-0 value of v's dtype). */
static tpuir_val shift_along(tpulw__b *b, tpuir_val v, int dim, int64_t k, tpuir_val fill) {
  int64_t lo[TPU_MAX_DIMS] = {0}, hi[TPU_MAX_DIMS] = {0}, in[TPU_MAX_DIMS] = {0};
  lo[dim] = k;
  hi[dim] = -k;
  return tpuir_pad(b->g, v, fill, lo, hi, in);
}

/* Inclusive scan of x along dim with a binary elementwise op whose
 * identity is `ident` (log-step doubling). */
static tpuir_val scan_op(tpulw__b *b, tpuir_val x, int dim, int op, double ident) {
  tpulw__shape s = tpulw__info(b, x);
  if (s.ndim == 0) return x;
  tpuir_val id = tpulw__const(b, s.dtype, ident);
  for (int64_t k = 1; k < s.sizes[dim] && x >= 0; k *= 2)
    x = tpulw__bin(b, op, shift_along(b, x, dim, k, id), x);
  return x;
}

/* Identity of max (lo = 1: the lowest value) or min (lo = 0: the
 * highest) in dtype dt. */
static tpuir_val extreme_of(tpulw__b *b, int dt, int lo) {
  if (tpu_dtype_is_float(dt)) return tpulw__const(b, dt, lo ? -INFINITY : INFINITY);
  int64_t mn, mx;
  switch (dt) {
    case TPU_BOOL: case TPU_U8: mn = 0; mx = dt == TPU_BOOL ? 1 : 255; break;
    case TPU_I8: mn = INT8_MIN; mx = INT8_MAX; break;
    case TPU_I16: mn = INT16_MIN; mx = INT16_MAX; break;
    case TPU_I32: mn = INT32_MIN; mx = INT32_MAX; break;
    default: mn = INT64_MIN; mx = INT64_MAX; break;
  }
  return tpuir_const_i(b->g, dt, lo ? mn : mx);
}

static const tpulw_tensor *self_arg(tpulw__b *b) {
  const tpulw_tensor *t = tpulw__tensor_arg(b, "self");
  return t && t->device >= 0 ? t : NULL;
}

/* ---- logcumsumexp ------------------------------------------------------- */

/* log(exp(a) + exp(b)) like PyTorch's _log_add_exp_helper (equal infinities
 * stay as they are). */
static tpuir_val log_add_exp(tpulw__b *b, tpuir_val a, tpuir_val c) {
  tpuir_val mx = tpulw__bin(b, TPUIR_MAX, a, c), mn = tpulw__bin(b, TPUIR_MIN, a, c);
  tpuir_val r = tpulw__bin(b, TPUIR_ADD, mx, tpulw__un(b, TPUIR_LOG1P, tpulw__un(b, TPUIR_EXP,
                                                                     tpulw__bin(b, TPUIR_SUB, mn, mx))));
  tpuir_val same_inf = tpulw__bin(b, TPUIR_AND, tpulw__bin(b, TPUIR_EQ, mn, mx), tpulw__un(b, TPUIR_IS_INF, mx));
  return tpulw__sel(b, same_inf, mx, r);
}

/* _logcumsumexp(self, dim) (+ out=) */
static int logcumsumexp_fn(tpulw__b *b) {
  const tpulw_tensor *self = self_arg(b);
  if (!self) return tpu_error(TPU_E_UNSUPPORTED, "logcumsumexp: no self");
  int dt = self->view.dtype;
  if (!tpu_dtype_is_float(dt))
    return tpu_error(TPU_E_UNSUPPORTED, "\"logcumsumexp_out_cpu\" not implemented for '%s'",
                     tpulw__torch_name(dt));
  int cdt = tpulw__opmath(dt);
  tpuir_val x = tpulw__convert(b, tpulw__tensor(b, self), cdt);
  tpulw__shape s = tpulw__info(b, x);
  int dim;
  int rc = tpulw__wrap_dim(tpulw__int(b, "dim", 0), s.ndim, &dim);
  if (rc < 0) return rc;
  if (s.ndim > 0) {
    tpuir_val ninf = tpulw__const(b, cdt, -INFINITY);
    for (int64_t k = 1; k < s.sizes[dim] && x >= 0; k *= 2)
      x = log_add_exp(b, shift_along(b, x, dim, k, ninf), x);
  }
  return tpulw__result_as(b, x, dt);
}

/* ---- cummax / cummin ---------------------------------------------------- */

/* _cummax_helper / _cummin_helper(self, values, indices, dim): results
 * written into `values` and `indices`. PyTorch CPU's rule: the running
 * best is replaced by x[i] when x[i] is NaN, or when the best is not NaN
 * and x[i] >= best (cummax; <= for cummin), so ties take the later index
 * and the last NaN wins. Pairs (value, index) are combined by log-step
 * doubling: the later segment's best wins under the same rule. */
static int cummaxmin_fn(tpulw__b *b) {
  const tpulw_tensor *self = self_arg(b);
  if (!self || !tpulw__tensor_arg(b, "values") || !tpulw__tensor_arg(b, "indices"))
    return tpu_error(TPU_E_UNSUPPORTED, "%s: missing operand", b->base);
  int is_max = strstr(b->base, "cummax") != NULL;
  int dt = self->view.dtype;
  tpuir_val x = tpulw__tensor(b, self);
  if (dt == TPU_BOOL) x = tpulw__convert(b, x, TPU_U8);
  int cdt = tpulw__info(b, x).dtype;
  tpulw__shape s = tpulw__info(b, x);
  int dim;
  int rc = tpulw__wrap_dim(tpulw__int(b, "dim", 0), s.ndim, &dim);
  if (rc < 0) return rc;
  tpuir_val idx;
  if (s.ndim == 0) {
    idx = tpulw__const(b, TPU_I64, 0);
  } else {
    int isf = tpu_dtype_is_float(cdt);
    int cmp = is_max ? TPUIR_GE : TPUIR_LE;
    idx = tpuir_iota(b->g, TPU_I64, s.ndim, s.sizes, dim);
    tpuir_val fill = extreme_of(b, cdt, is_max), fill_i = tpulw__const(b, TPU_I64, -1);
    for (int64_t k = 1; k < s.sizes[dim] && x >= 0 && idx >= 0; k *= 2) {
      tpuir_val pv = shift_along(b, x, dim, k, fill), pi = shift_along(b, idx, dim, k, fill_i);
      tpuir_val take = tpulw__bin(b, cmp, x, pv);
      if (isf)
        take = tpulw__bin(b, TPUIR_OR, tpulw__un(b, TPUIR_IS_NAN, x),
                      tpulw__bin(b, TPUIR_AND, tpulw__un(b, TPUIR_NOT, tpulw__un(b, TPUIR_IS_NAN, pv)), take));
      x = tpulw__sel(b, take, x, pv);
      idx = tpulw__sel(b, take, idx, pi);
    }
  }
  LW_TRY(x);
  LW_TRY(idx);
  if ((rc = tpulw__result_to(b, tpulw__convert(b, x, dt), "values")) < 0) return rc;
  return tpulw__result_to(b, idx, "indices");
}

/* ---- mode ---------------------------------------------------------------- */

/* mode(self, dim, keepdim) -> (values, indices): the most frequent value
 * of each slice (ties: the smallest value) and the LAST position where it
 * occurs, like PyTorch CPU. Stable ascending sort; the run ending at each
 * position gets its length; the first longest run wins. */
static int mode_fn(tpulw__b *b) {
  const tpulw_tensor *self = self_arg(b);
  if (!self) return tpu_error(TPU_E_UNSUPPORTED, "mode: no self");
  tpuir_val x = tpulw__tensor(b, self);
  tpulw__shape s = tpulw__info(b, x);
  int dim;
  int rc = tpulw__wrap_dim(tpulw__int(b, "dim", -1), s.ndim, &dim);
  if (rc < 0) return rc;
  int keepdim = (int)tpulw__int(b, "keepdim", 0);
  b->out_rule = LW_OUT_SAME;
  if (s.ndim == 0) {
    if ((rc = tpulw__result(b, x)) < 0) return rc;
    return tpulw__result(b, tpulw__const(b, TPU_I64, 0));
  }
  int64_t n = s.sizes[dim];
  if (n == 0)
    return tpu_error(TPU_E_INDEX, "mode(): Expected reduction dim %d to have non-zero size.", dim);
  int nd = s.ndim;
  int64_t os[TPU_MAX_DIMS], ks[TPU_MAX_DIMS];
  int on = 0;
  for (int d = 0; d < nd; d++) {
    ks[d] = d == dim ? 1 : s.sizes[d];
    if (d != dim || keepdim) os[on++] = ks[d];
  }
  tpuir_val perm = tpuir_sort(b->g, x, dim, 0, TPUIR_SORT_INDICES);
  tpuir_val sv = tpuir_gather(b->g, x, dim, perm);
  tpuir_val cv = tpulw__info(b, sv).dtype == TPU_BOOL ? tpulw__convert(b, sv, TPU_U8) : sv;
  tpuir_val pos = tpuir_iota(b->g, TPU_I64, nd, s.sizes, dim);
  /* first[i]: a run starts at i; last[i]: a run ends at i */
  int64_t st[TPU_MAX_DIMS] = {0}, lim[TPU_MAX_DIMS], str[TPU_MAX_DIMS];
  for (int d = 0; d < nd; d++) {
    lim[d] = s.sizes[d];
    str[d] = 1;
  }
  tpuir_val ne;
  if (n > 1) {
    int64_t st1[TPU_MAX_DIMS], lim0[TPU_MAX_DIMS];
    memcpy(st1, st, sizeof st1);
    memcpy(lim0, lim, sizeof lim0);
    st1[dim] = 1;
    lim0[dim] = n - 1;
    ne = tpulw__bin(b, TPUIR_NE, tpuir_slice(b->g, cv, st1, lim, str),
                tpuir_slice(b->g, cv, st, lim0, str)); /* [.., n-1, ..]: x[i+1] != x[i] */
  } else {
    int64_t e[TPU_MAX_DIMS];
    memcpy(e, s.sizes, sizeof e);
    e[dim] = 0;
    ne = tpulw__full(b, TPU_BOOL, nd, e, 0);
  }
  tpuir_val t = tpulw__const(b, TPU_BOOL, 1);
  int64_t lo[TPU_MAX_DIMS] = {0}, hi[TPU_MAX_DIMS] = {0}, in[TPU_MAX_DIMS] = {0};
  hi[dim] = 1;
  tpuir_val last = tpuir_pad(b->g, ne, t, lo, hi, in);
  lo[dim] = 1;
  hi[dim] = 0;
  tpuir_val first = tpuir_pad(b->g, ne, t, lo, hi, in);
  tpuir_val start = scan_op(b, tpulw__sel(b, first, pos, tpulw__const(b, TPU_I64, 0)), dim, TPUIR_MAX, 0);
  tpuir_val len = tpulw__sel(b, last, tpulw__bin_c(b, TPUIR_ADD, tpulw__bin(b, TPUIR_SUB, pos, start), 1),
                         tpulw__const(b, TPU_I64, 0));
  tpuir_val best = tpulw__reshape(b, tpuir_argreduce(b->g, TPUIR_RED_MAX, len, dim), nd, ks);
  tpuir_val val = tpuir_gather(b->g, sv, dim, best);
  tpuir_val idx = tpuir_gather(b->g, perm, dim, best);
  if ((rc = tpulw__result(b, tpulw__reshape(b, val, on, os))) < 0) return rc;
  return tpulw__result(b, tpulw__reshape(b, idx, on, os));
}

/* ---- compaction ---------------------------------------------------------- */

/* Positions (int64 [size]) of the first `size` true elements of the rank-1
 * bool m (length n), in order; *hit (bool [size]) marks the filled slots. */
static tpuir_val compact_static(tpulw__b *b, tpuir_val m, int64_t n, int64_t size, tpuir_val *hit) {
  tpuir_val c = scan_op(b, tpulw__convert(b, m, TPU_I64), 0, TPUIR_ADD, 0);
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
  const tpulw_tensor *self = self_arg(b);
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
  const tpulw_tensor *self = self_arg(b);
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
  tpuir_val pos = tpulw__bin_c(b, TPUIR_SUB, scan_op(b, tpulw__convert(b, m, TPU_I64), 0, TPUIR_ADD, 0), 1);
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
  const tpulw_tensor *self = self_arg(b);
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

/* ---- renorm / cross ------------------------------------------------------ */

/* renorm(self, p, dim, maxnorm) (+ out=, in-place): each slice along dim
 * whose p-norm exceeds maxnorm is scaled by maxnorm / (norm + 1e-7). */
static int renorm_fn(tpulw__b *b) {
  const tpulw_tensor *self = self_arg(b);
  if (!self) return tpu_error(TPU_E_UNSUPPORTED, "renorm: no self");
  int dt = self->view.dtype;
  double p = tpulw__float(b, "p", 2), maxnorm = tpulw__float(b, "maxnorm", 0);
  if (!(p > 0)) return tpu_error(TPU_E_INVALID, "renorm: non-positive-norm not supported");
  if (!(maxnorm >= 0))
    return tpu_error(TPU_E_INVALID, "renorm: expected maxnorm to be >= 0 but got %g", maxnorm);
  int nd = self->view.ndim;
  if (nd <= 1)
    return tpu_error(TPU_E_INVALID, "renorm: input needs at least 2 dimensions, got %d dimensions",
                     nd);
  if (!tpu_dtype_is_float(dt))
    return tpu_error(TPU_E_UNSUPPORTED, "\"renorm_out\" not implemented for '%s'",
                     tpulw__torch_name(dt));
  int dim;
  int rc = tpulw__wrap_dim(tpulw__int(b, "dim", 0), nd, &dim);
  if (rc < 0) return rc;
  int cdt = tpulw__opmath(dt);
  tpuir_val x = tpulw__tensor(b, self);
  tpuir_val xc = tpulw__convert(b, x, cdt);
  uint32_t mask = ((1u << nd) - 1) & ~(1u << dim);
  tpuir_val ax = tpulw__un(b, TPUIR_ABS, xc), norm;
  if (isinf(p)) {
    norm = tpulw__reduce_dims(b, TPUIR_RED_MAX, ax, mask, 1);
  } else if (p == 1) {
    norm = tpulw__reduce_dims(b, TPUIR_RED_SUM, ax, mask, 1);
  } else if (p == 2) {
    norm = tpulw__un(b, TPUIR_SQRT, tpulw__reduce_dims(b, TPUIR_RED_SUM, tpulw__bin(b, TPUIR_MUL, xc, xc), mask, 1));
  } else {
    norm = tpulw__bin_c(b, TPUIR_POW, tpulw__reduce_dims(b, TPUIR_RED_SUM, tpulw__bin_c(b, TPUIR_POW, ax, p),
                                                 mask, 1), 1.0 / p);
  }
  tpuir_val factor = tpulw__sel(b, tpulw__bin_c(b, TPUIR_GT, norm, maxnorm),
                            tpulw__bin(b, TPUIR_DIV, tpulw__const(b, cdt, maxnorm),
                                   tpulw__bin_c(b, TPUIR_ADD, norm, 1e-7)),
                            tpulw__const(b, cdt, 1));
  factor = tpulw__convert(b, tpulw__convert(b, factor, dt), cdt);
  return tpulw__result_as(b, tpulw__bin(b, TPUIR_MUL, xc, factor), dt);
}

/* linalg_cross(self, other, dim) (+ out=): both broadcast, size 3 at dim. */
static int cross_fn(tpulw__b *b) {
  const tpulw_tensor *a = self_arg(b), *o = tpulw__tensor_arg(b, "other");
  if (!a || !o || o->device < 0) return tpu_error(TPU_E_UNSUPPORTED, "linalg_cross: missing operand");
  if (a->view.ndim != o->view.ndim)
    return tpu_error(TPU_E_INVALID, "linalg.cross: inputs must have the same number of dimensions.");
  tpulw__opnd ops[2] = {tpulw__opnd_tensor(a), tpulw__opnd_tensor(o)};
  int dt = tpulw__result_type(2, ops);
  tpuir_val vs[2] = {tpulw__convert(b, tpulw__tensor(b, a), dt), tpulw__convert(b, tpulw__tensor(b, o), dt)};
  int nd = a->view.ndim, dim;
  int rc = tpulw__wrap_dim(tpulw__int(b, "dim", -1), nd, &dim);
  if (rc < 0) return rc;
  if (a->view.sizes[dim] != 3 || o->view.sizes[dim] != 3)
    return tpu_error(TPU_E_INVALID, "linalg.cross: inputs dimension %d must have length 3. Got %lld "
                     "and %lld", (int)tpulw__int(b, "dim", -1), (long long)a->view.sizes[dim],
                     (long long)o->view.sizes[dim]);
  if ((rc = tpulw__bcast_all(b, 2, vs)) < 0) return rc;
  tpulw__shape s = tpulw__info(b, vs[0]);
  if (tpulw__numel(&s) == 0) return tpulw__result(b, vs[0]);
  tpuir_val c[2][3];
  int64_t st[TPU_MAX_DIMS] = {0}, lim[TPU_MAX_DIMS], str[TPU_MAX_DIMS];
  for (int d = 0; d < nd; d++) {
    lim[d] = s.sizes[d];
    str[d] = 1;
  }
  for (int k = 0; k < 3; k++) {
    st[dim] = k;
    lim[dim] = k + 1;
    for (int j = 0; j < 2; j++) c[j][k] = tpuir_slice(b->g, vs[j], st, lim, str);
  }
  tpuir_val r[3];
  for (int k = 0; k < 3; k++) {
    int p = (k + 1) % 3, q = (k + 2) % 3;
    r[k] = tpulw__bin(b, TPUIR_SUB, tpulw__bin(b, TPUIR_MUL, c[0][p], c[1][q]),
                  tpulw__bin(b, TPUIR_MUL, c[0][q], c[1][p]));
    LW_TRY(r[k]);
  }
  return tpulw__result(b, tpuir_concat(b->g, 3, r, dim));
}

/* ---- histogram / histogramdd --------------------------------------------- */

#define HIST_MAX_DIMS 8
#define HIST_PAIRS_MAX ((int64_t)1 << 26)

/* linspace(lo, hi, steps) in dtype dt from rank-0 values (CPU's two-sided
 * formula). */
static tpuir_val linspace_v(tpulw__b *b, tpuir_val lo, tpuir_val hi, int64_t steps, int dt) {
  tpuir_val i = tpuir_iota(b->g, dt, 1, &steps, 0);
  if (steps == 1) return tpulw__bcast(b, lo, 1, &steps);
  tpuir_val step = tpulw__bin_c(b, TPUIR_DIV, tpulw__bin(b, TPUIR_SUB, hi, lo), (double)(steps - 1));
  tpuir_val a = tpulw__bin(b, TPUIR_ADD, lo, tpulw__bin(b, TPUIR_MUL, step, i));
  tpuir_val rev = tpulw__bin(b, TPUIR_SUB, tpulw__const(b, dt, (double)(steps - 1)), i);
  tpuir_val z = tpulw__bin(b, TPUIR_SUB, hi, tpulw__bin(b, TPUIR_MUL, step, rev));
  return tpulw__sel(b, tpulw__bin_c(b, TPUIR_LT, i, (double)(steps / 2)), a, z);
}

/* Edges of dim d of x [M, N] from a bin count: range given (rng != NULL:
 * rng[0..1]) or the data's min/max; an empty range widened by 0.5 on
 * either side. */
static tpuir_val hist_edges_ct(tpulw__b *b, tpuir_val x, int d, int64_t bins, const double *rng) {
  tpulw__shape s = tpulw__info(b, x);
  int dt = s.dtype;
  tpuir_val lo, hi;
  if (rng) {
    lo = tpulw__const(b, dt, rng[0]);
    hi = tpulw__const(b, dt, rng[1]);
  } else if (s.sizes[0] == 0) { /* CPU's default range [0, 1] */
    return linspace_v(b, tpulw__const(b, dt, 0), tpulw__const(b, dt, 1), bins + 1, dt);
  } else {
    int64_t st[2] = {0, d}, lim[2] = {s.sizes[0], d + 1}, str[2] = {1, 1}, z = 0, m = s.sizes[0];
    tpuir_val col = tpulw__reshape(b, tpuir_slice(b->g, x, st, lim, str), 1, &m);
    lo = tpuir_reduce(b->g, TPUIR_RED_MIN, col, 1, &z);
    hi = tpuir_reduce(b->g, TPUIR_RED_MAX, col, 1, &z);
  }
  tpuir_val same = tpulw__bin(b, TPUIR_EQ, lo, hi);
  lo = tpulw__sel(b, same, tpulw__bin_c(b, TPUIR_SUB, lo, 0.5), lo);
  hi = tpulw__sel(b, same, tpulw__bin_c(b, TPUIR_ADD, hi, 0.5), hi);
  return linspace_v(b, lo, hi, bins + 1, dt);
}

/* Histogram of x [M, N] over the N edge vectors (edges[d]: [bins_d + 1],
 * increasing): an element counts (weight w [M] or 1) in the bin whose
 * edges enclose it (the last bin is closed); elements outside any range
 * are dropped. density: divided by total * bin volume. Result [bins...]. */
static tpuir_val hist_core(tpulw__b *b, tpuir_val x, int N, const tpuir_val *edges, tpuir_val w,
                           int density) {
  tpulw__shape s = tpulw__info(b, x);
  int dt = s.dtype;
  int64_t M = s.sizes[0], nb[HIST_MAX_DIMS], tot = 1;
  for (int d = 0; d < N; d++) {
    nb[d] = tpulw__info(b, edges[d]).sizes[0] - 1;
    tot *= nb[d];
  }
  tpuir_val flat = tpulw__full(b, TPU_I64, 1, &M, 0), in = tpulw__full(b, TPU_BOOL, 1, &M, 1);
  for (int d = 0; d < N; d++) {
    int64_t st[2] = {0, d}, lim[2] = {M, d + 1}, str[2] = {1, 1}, one = 1;
    tpuir_val col = tpuir_slice(b->g, x, st, lim, str); /* [M, 1] */
    int64_t e = nb[d] + 1, r2[2] = {1, e}, last = nb[d];
    tpuir_val ed = tpulw__reshape(b, edges[d], 2, r2);
    /* bin = #(edges <= x) - 1, the right edge in the last bin */
    tpuir_val cnt = tpuir_reduce(b->g, TPUIR_RED_SUM,
                                 tpulw__convert(b, tpulw__bin(b, TPUIR_LE, ed, col), TPU_I64), 1, &one);
    int64_t z0 = 0, z1 = 1, lz = last, lz1 = last + 1, s1 = 1;
    tpuir_val e0 = tpulw__reshape(b, tpuir_slice(b->g, edges[d], &z0, &z1, &s1), 0, NULL);
    tpuir_val e1 = tpulw__reshape(b, tpuir_slice(b->g, edges[d], &lz, &lz1, &s1), 0, NULL);
    tpuir_val xv = tpulw__reshape(b, col, 1, &M);
    tpuir_val ok = tpulw__bin(b, TPUIR_AND, tpulw__bin(b, TPUIR_GE, xv, tpulw__bcast(b, e0, 1, &M)),
                          tpulw__bin(b, TPUIR_LE, xv, tpulw__bcast(b, e1, 1, &M)));
    tpuir_val bin = tpulw__bin_c(b, TPUIR_MIN, tpulw__bin_c(b, TPUIR_SUB, cnt, 1), (double)(last - 1));
    bin = tpulw__bin_c(b, TPUIR_MAX, bin, 0);
    in = tpulw__bin(b, TPUIR_AND, in, ok);
    flat = tpulw__bin(b, TPUIR_ADD, tpulw__bin_c(b, TPUIR_MUL, flat, (double)nb[d]), bin);
  }
  flat = tpulw__sel(b, in, flat, tpulw__const(b, TPU_I64, 0));
  int cdt = tpulw__opmath(dt);
  tpuir_val wv = w >= 0 ? tpulw__convert(b, w, cdt) : tpulw__full(b, cdt, 1, &M, 1);
  wv = tpulw__sel(b, in, wv, tpulw__const(b, cdt, 0));
  tpuir_val h = M == 0 ? tpulw__full(b, cdt, 1, &tot, 0)
                       : tpuir_index_add(b->g, tpulw__full(b, cdt, 1, &tot, 0), 0, flat, wv);
  if (density) {
    int64_t z = 0;
    tpuir_val total = tpuir_reduce(b->g, TPUIR_RED_SUM, h, 1, &z);
    h = tpulw__bin(b, TPUIR_DIV, h, total);
    /* divide by each dim's bin width, broadcast over the flat layout */
    int64_t inner = tot;
    for (int d = 0; d < N; d++) {
      inner /= nb[d];
      int64_t st = 1, lim = nb[d] + 1, st0 = 0, lim0 = nb[d], s1 = 1;
      tpuir_val ed = tpulw__convert(b, edges[d], cdt);
      tpuir_val wd = tpulw__bin(b, TPUIR_SUB, tpuir_slice(b->g, ed, &st, &lim, &s1),
                            tpuir_slice(b->g, ed, &st0, &lim0, &s1));
      int64_t sh3[3] = {tot / (inner * nb[d]), nb[d], inner}, dd = 1;
      tpuir_val wb = tpuir_broadcast_in_dim(b->g, wd, 3, sh3, &dd);
      h = tpulw__bin(b, TPUIR_DIV, h, tpulw__reshape(b, wb, 1, &tot));
    }
  }
  int64_t hs[HIST_MAX_DIMS];
  for (int d = 0; d < N; d++) hs[d] = nb[d];
  return tpulw__convert(b, tpulw__reshape(b, h, N, hs), dt);
}

/* self as [M, N] (N = 1 for histogram: flattened). */
static int hist_input(tpulw__b *b, const tpulw_tensor *self, int dd, tpuir_val *x, int *N) {
  int dt = self->view.dtype;
  if (!tpu_dtype_is_float(dt))
    return tpu_error(TPU_E_INVALID, "torch.histogram%s: input tensor and bins tensors should have "
                     "the same dtype", dd ? "dd" : "");
  tpuir_val v = tpulw__tensor(b, self);
  int64_t n = tpu_view_numel(&self->view);
  int nd = self->view.ndim;
  int64_t cols = dd ? (nd ? self->view.sizes[nd - 1] : 1) : 1;
  if (dd && nd < 2 && nd != 1)
    return tpu_error(TPU_E_INVALID, "torch.histogramdd: input tensor should have at least 2 "
                     "dimensions, but got %d", nd);
  if (cols > HIST_MAX_DIMS || cols < 1)
    return tpu_error(TPU_E_UNSUPPORTED, "histogramdd: %lld dims", (long long)cols);
  int64_t m2[2] = {cols ? n / cols : 0, cols};
  *x = tpulw__reshape(b, v, 2, m2);
  *N = (int)cols;
  if (m2[0] * 101 > HIST_PAIRS_MAX * 4)
    return tpu_error(TPU_E_UNSUPPORTED, "histogram: too large");
  return TPU_OK;
}

/* weight (same element count as the rows of x) or -1 */
static int hist_weight(tpulw__b *b, int64_t M, int dt, tpuir_val *w) {
  const tpulw_tensor *wt = tpulw__tensor_arg(b, "weight");
  *w = -1;
  if (!wt) return TPU_OK;
  if (wt->view.dtype != dt)
    return tpu_error(TPU_E_INVALID, "torch.histogramdd: if weight tensor is provided, it should "
                     "have the same dtype as the input tensor");
  if (tpu_view_numel(&wt->view) != M)
    return tpu_error(TPU_E_INVALID, "torch.histogramdd: if weight tensor is provided it should "
                     "have the same shape as the input tensor excluding its innermost dimension");
  *w = tpulw__reshape(b, tpulw__tensor(b, wt), 1, &M);
  return TPU_OK;
}

/* range argument (float[]? range) for N dims into rng[2N]; 0 if absent */
static int hist_range(tpulw__b *b, int N, double *rng, int *have) {
  const tpulw_arg *a = tpulw__arg(b, "range");
  *have = 0;
  if (!a || a->kind == TPULW_NONE) return TPU_OK;
  if (a->kind != TPULW_FLOATS) return tpu_error(TPU_E_UNSUPPORTED, "histogram: range kind");
  if (a->n != 2 * N)
    return tpu_error(TPU_E_INVALID, "torch.histogramdd: for a %d-dimensional histogram range "
                     "should have %d elements, but got %d", N, 2 * N, a->n);
  for (int i = 0; i < 2 * N; i++) rng[i] = a->floats[i];
  for (int d = 0; d < N; d++) {
    if (!isfinite(rng[2 * d]) || !isfinite(rng[2 * d + 1]))
      return tpu_error(TPU_E_INVALID, "torch.histogramdd: dimension %d's range [%g, %g] is not "
                       "finite", d, rng[2 * d], rng[2 * d + 1]);
    if (rng[2 * d] > rng[2 * d + 1])
      return tpu_error(TPU_E_INVALID, "torch.histogramdd: min should not exceed max, but got min "
                       "%g max %g for dimension %d", rng[2 * d], rng[2 * d + 1], d);
  }
  *have = 1;
  return TPU_OK;
}

/* histogram.bin_ct / histogram.bins_tensor (+ out=) -> (hist, bin_edges);
 * _histogramdd_bin_edges -> edges[]; _histogramdd_from_bin_cts /
 * _histogramdd_from_bin_tensors -> hist. */
static int histogram_fn(tpulw__b *b) {
  const tpulw_tensor *self = self_arg(b);
  if (!self) return tpu_error(TPU_E_UNSUPPORTED, "histogram: no self");
  int dd = strncmp(b->base, "_histogramdd", 12) == 0;
  int want_hist = strcmp(b->base, "_histogramdd_bin_edges") != 0;
  int want_edges = !dd || !want_hist;
  tpuir_val x = -1;
  int N = 0;
  int rc = hist_input(b, self, dd, &x, &N);
  if (rc < 0) return rc;
  int dt = self->view.dtype;
  tpulw__shape xs = tpulw__info(b, x);
  tpuir_val w;
  if ((rc = hist_weight(b, xs.sizes[0], dt, &w)) < 0) return rc;
  tpuir_val edges[HIST_MAX_DIMS];
  const tpulw_arg *ba = tpulw__arg(b, "bins");
  if (!ba) return tpu_error(TPU_E_UNSUPPORTED, "histogram: no bins");
  if (ba->kind == TPULW_TENSOR || ba->kind == TPULW_TENSORS) {
    int nb = ba->kind == TPULW_TENSOR ? 1 : ba->n;
    if (nb != N)
      return tpu_error(TPU_E_INVALID, "torch.histogramdd: expected %d sequences of bin edges for "
                       "each dimension, but got %d", N, nb);
    for (int d = 0; d < N; d++) {
      const tpulw_tensor *t = ba->kind == TPULW_TENSOR ? &ba->t : &ba->tensors[d];
      if (t->device < 0) return tpu_error(TPU_E_UNSUPPORTED, "histogram: CPU bins");
      if (t->view.dtype != dt)
        return tpu_error(TPU_E_INVALID, "torch.histogramdd: input tensor and bins tensors should "
                         "have the same dtype, but got input %s and bins for dimension %d %s",
                         tpulw__torch_name(dt), d, tpulw__torch_name(t->view.dtype));
      if (t->view.ndim != 1)
        return tpu_error(TPU_E_INVALID, "torch.histogramdd: bins tensor should have one "
                         "dimension, but got %d dimensions in the bins tensor for dimension %d",
                         t->view.ndim, d);
      if (t->view.sizes[0] < 1)
        return tpu_error(TPU_E_INVALID, "torch.histogramdd: bins tensor should have at least 1 "
                         "element, but got %lld elements in the bins tensor for dimension %d",
                         (long long)t->view.sizes[0], d);
      edges[d] = tpulw__tensor(b, t);
    }
  } else {
    int64_t sc;
    int n;
    const int64_t *bins = tpulw__ints(b, "bins", &n, &sc);
    if (!bins) return tpu_error(TPU_E_UNSUPPORTED, "histogram: bins");
    if (n != N)
      return tpu_error(TPU_E_INVALID, "torch.histogramdd: expected %d sequences of bin edges for "
                       "each dimension, but got %d", N, n);
    double rng[2 * HIST_MAX_DIMS];
    int have;
    if ((rc = hist_range(b, N, rng, &have)) < 0) return rc;
    for (int d = 0; d < N; d++) {
      if (bins[d] <= 0)
        return tpu_error(TPU_E_INVALID, "torch.histogramdd(): bins must be > 0, but got %lld for "
                         "dimension %d", (long long)bins[d], d);
      edges[d] = hist_edges_ct(b, x, d, bins[d], have ? rng + 2 * d : NULL);
    }
  }
  for (int d = 0; d < N; d++) LW_TRY(edges[d]);
  b->out_rule = LW_OUT_SAME;
  if (want_hist) {
    int64_t e = 1;
    for (int d = 0; d < N; d++) e *= tpulw__info(b, edges[d]).sizes[0];
    if (xs.sizes[0] * e > HIST_PAIRS_MAX)
      return tpu_error(TPU_E_UNSUPPORTED, "histogram: too large");
    tpuir_val h = hist_core(b, x, N, edges, w, (int)tpulw__int(b, "density", 0));
    if ((rc = tpulw__result(b, h)) < 0) return rc;
  }
  if (want_edges)
    for (int d = 0; d < N; d++)
      if ((rc = tpulw__result(b, edges[d])) < 0) return rc;
  return TPU_OK;
}

/* ---- segment_reduce -------------------------------------------------------- */

#define SEG_PAIRS_MAX ((int64_t)1 << 26)

/* segment_reduce(data, reduce, lengths | offsets, axis, unsafe, initial):
 * segment s of each row covers [start_s, end_s) along axis (lengths:
 * running sums; offsets: consecutive entries). `initial` joins every
 * segment (an empty one gives initial; without it max/min give -inf/+inf,
 * sum 0, prod 1, mean NaN). Element-segment membership is a mask over
 * (segment, position); the data-dependent checks of the lengths (negative
 * entries, total != size) are not made (unsafe semantics). */
static int segment_reduce_fn(tpulw__b *b) {
  const tpulw_tensor *data = tpulw__tensor_arg(b, "data");
  const tpulw_tensor *len = tpulw__tensor_arg(b, "lengths"), *off = tpulw__tensor_arg(b, "offsets");
  if (!data || data->device < 0 || (!len && !off) || !tpulw__none(b, "indices"))
    return tpu_error(TPU_E_UNSUPPORTED, "segment_reduce: unsupported arguments");
  const tpulw_tensor *lt = len ? len : off;
  if (lt->device < 0) return tpu_error(TPU_E_UNSUPPORTED, "segment_reduce: CPU lengths");
  const char *red = tpulw__str(b, "reduce");
  static const char *names[] = {"max", "mean", "min", "sum", "prod"};
  int kind = -1;
  for (int k = 0; red && k < 5; k++)
    if (strcmp(red, names[k]) == 0) kind = k;
  if (kind < 0)
    return tpu_error(TPU_E_INVALID, "reduce argument must be either sum, prod, mean, amax or "
                     "amin, got %s", red ? red : "None");
  int dt = data->view.dtype;
  if (!tpu_dtype_is_float(dt))
    return tpu_error(TPU_E_UNSUPPORTED, "\"_segment_reduce_cpu\" not implemented for '%s'",
                     tpulw__torch_name(dt));
  int nd = data->view.ndim, axis;
  int rc = tpulw__wrap_dim(tpulw__int(b, "axis", 0), nd, &axis);
  if (rc < 0) return rc;
  if (nd == 0) return tpu_error(TPU_E_UNSUPPORTED, "segment_reduce: 0-dim data");
  const tpu_view *lv = &lt->view;
  if (lv->dtype != TPU_I64 && lv->dtype != TPU_I32)
    return tpu_error(TPU_E_UNSUPPORTED, "segment_reduce: lengths dtype");
  if (lv->ndim != axis + 1)
    return tpu_error(TPU_E_INVALID, "segment_reduce(): Expected lengths to have %d dimensions",
                     axis + 1);
  for (int d = 0; d < axis; d++)
    if (lv->sizes[d] != data->view.sizes[d])
      return tpu_error(TPU_E_INVALID, "segment_reduce(): Expected lengths and data to have the "
                       "same leading dimensions");
  int64_t S = lv->sizes[axis] - (off ? 1 : 0);
  if (S < 0) return tpu_error(TPU_E_INVALID, "segment_reduce(): offsets must not be empty");
  int64_t N = data->view.sizes[axis], P = 1, I = 1;
  for (int d = 0; d < axis; d++) P *= data->view.sizes[d];
  for (int d = axis + 1; d < nd; d++) I *= data->view.sizes[d];
  if (P * S * N * I > SEG_PAIRS_MAX)
    return tpu_error(TPU_E_UNSUPPORTED, "segment_reduce: too large");
  int cdt = tpulw__opmath(dt);
  /* starts/ends [P, S] */
  int64_t ls[2] = {P, lv->sizes[axis]};
  tpuir_val l = tpulw__reshape(b, tpulw__convert(b, tpulw__tensor(b, lt), TPU_I64), 2, ls);
  tpuir_val st, en;
  int64_t z2[2] = {0, 0}, one2[2] = {1, 1};
  if (len) {
    en = scan_op(b, l, 1, TPUIR_ADD, 0);
    st = tpulw__bin(b, TPUIR_SUB, en, l);
  } else {
    int64_t a0[2] = {0, 0}, a1[2] = {P, S}, b0[2] = {0, 1}, b1[2] = {P, S + 1};
    st = tpuir_slice(b->g, l, a0, a1, one2);
    en = tpuir_slice(b->g, l, b0, b1, one2);
  }
  (void)z2;
  /* mask [P, S, N] */
  int64_t m3[3] = {P, S, N}, d01[2] = {0, 1};
  tpuir_val j = tpuir_iota(b->g, TPU_I64, 3, m3, 2);
  tpuir_val mask = tpulw__bin(b, TPUIR_AND,
                          tpulw__bin(b, TPUIR_LE, tpuir_broadcast_in_dim(b->g, st, 3, m3, d01), j),
                          tpulw__bin(b, TPUIR_LT, j, tpuir_broadcast_in_dim(b->g, en, 3, m3, d01)));
  int64_t e4[4] = {P, S, N, I}, d3[3] = {0, 2, 3}, dm[3] = {0, 1, 2}, x3[3] = {P, N, I};
  tpuir_val x = tpulw__reshape(b, tpulw__convert(b, tpulw__tensor(b, data), cdt), 3, x3);
  tpuir_val xe = tpuir_broadcast_in_dim(b->g, x, 4, e4, d3);
  tpuir_val me = tpuir_broadcast_in_dim(b->g, mask, 4, e4, dm);
  static const int rk[] = {TPUIR_RED_MAX, TPUIR_RED_SUM, TPUIR_RED_MIN, TPUIR_RED_SUM,
                           TPUIR_RED_PROD};
  double ident = kind == 0 ? -INFINITY : kind == 2 ? INFINITY : kind == 4 ? 1 : 0;
  int64_t rd = 2;
  tpuir_val r = tpuir_reduce(b->g, rk[kind], tpulw__sel(b, me, xe, tpulw__const(b, cdt, ident)), 1, &rd);
  tpulw__scalar init;
  int has_init = tpulw__scalar_arg(b, "initial", &init);
  tpuir_val iv = has_init ? tpulw__const(b, cdt, init.f) : -1;
  if (has_init) {
    static const int ops[] = {TPUIR_MAX, TPUIR_ADD, TPUIR_MIN, TPUIR_ADD, TPUIR_MUL};
    r = tpulw__bin(b, ops[kind], r, iv);
  }
  if (kind == 1) { /* mean */
    int64_t c3[3] = {P, S, I}, d2[2] = {0, 1};
    tpuir_val cnt = tpulw__convert(b, tpulw__bin(b, TPUIR_SUB, en, st), cdt);
    cnt = tpuir_broadcast_in_dim(b->g, cnt, 3, c3, d2);
    tpuir_val q = tpulw__bin(b, TPUIR_DIV, r, cnt);
    if (has_init) q = tpulw__sel(b, tpulw__bin_c(b, TPUIR_EQ, cnt, 0), tpulw__bcast(b, iv, 3, c3), q);
    r = q;
  }
  int64_t os[TPU_MAX_DIMS];
  for (int d = 0; d < nd; d++) os[d] = d == axis ? S : data->view.sizes[d];
  return tpulw__result_as(b, tpulw__reshape(b, r, nd, os), dt);
}

/* ---- table ---------------------------------------------------------------- */

const tpulw__row tpulw__rows_misc[] = {
    {"_logcumsumexp", logcumsumexp_fn, 0},
    {"_logcumsumexp.out", logcumsumexp_fn, 0},
    {"_cummax_helper", cummaxmin_fn, 0},
    {"_cummin_helper", cummaxmin_fn, 0},
    {"mode", mode_fn, 0},
    {"mode.values", mode_fn, 0},
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
    {"renorm", renorm_fn, 0},
    {"renorm_", renorm_fn, 0},
    {"renorm.out", renorm_fn, 0},
    {"linalg_cross", cross_fn, 0},
    {"linalg_cross.out", cross_fn, 0},
    {"histogram.bin_ct", histogram_fn, 0},
    {"histogram.bin_ct_out", histogram_fn, 0},
    {"histogram.bins_tensor", histogram_fn, 0},
    {"histogram.bins_tensor_out", histogram_fn, 0},
    {"_histogramdd_bin_edges", histogram_fn, 0},
    {"_histogramdd_from_bin_cts", histogram_fn, 0},
    {"_histogramdd_from_bin_tensors", histogram_fn, 0},
    {"segment_reduce", segment_reduce_fn, 0},
};
const int tpulw__nrows_misc = sizeof tpulw__rows_misc / sizeof tpulw__rows_misc[0];

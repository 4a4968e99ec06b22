/* lower/view_scatter.c - writing through a view as one functional op:
 * select_backward / slice_backward (the gradient of a view: zeros of the
 * base's shape with the gradient in the viewed positions) and
 * select_scatter / slice_scatter (a copy of self with src in the viewed
 * positions; what functionalization turns `x[i] = y` into).
 *
 * All four are a pad of the viewed part to the base's shape (interior
 * padding for slice steps), plus a select against self for the scatters.
 * Lowered natively they are one op of the program; PyTorch's composite
 * forms (zeros, then a copy into a view of the pending zeros) write part of
 * a pending value, which Fused Eager and torch.compile captures could only
 * record by flushing first. */
#include "lower/internal.h"

/* The positions of one dim of the base that a view selects: sizes[dim] of
 * the base, first position, step, count. */
typedef struct span {
  int dim;
  int64_t start, step, n;
} span;

/* select(dim, index) of a base with `nd` dims of `sizes` */
static int select_span(const tpulw__b *b, int nd, const int64_t *sizes, span *s) {
  if (nd == 0) return tpu_error(TPU_E_INDEX, "select() cannot be applied to a 0-dim tensor.");
  int rc = tpulw__wrap_dim(tpulw__int(b, "dim", 0), nd, &s->dim);
  if (rc < 0) return rc;
  int64_t size = sizes[s->dim], index = tpulw__int(b, "index", 0);
  if (index < -size || index >= size) {
    char buf[256];
    return tpu_error(TPU_E_INDEX, "select(): index %lld out of range for tensor of size %s at "
                     "dimension %d", (long long)index, tpulw__fmt_list(buf, sizeof buf, nd, sizes),
                     s->dim);
  }
  s->start = index < 0 ? index + size : index;
  s->step = 1;
  s->n = 1;
  return TPU_OK;
}

/* slice(dim, start, end, step) of a base, with PyTorch's clamping */
static int slice_span(const tpulw__b *b, int nd, const int64_t *sizes, span *s) {
  if (nd == 0) return tpu_error(TPU_E_INDEX, "slice() cannot be applied to a 0-dim tensor.");
  int rc = tpulw__wrap_dim(tpulw__int(b, "dim", 0), nd, &s->dim);
  if (rc < 0) return rc;
  int64_t size = sizes[s->dim];
  int64_t start = tpulw__none(b, "start") ? 0 : tpulw__int(b, "start", 0);
  int64_t end = tpulw__none(b, "end") ? INT64_MAX : tpulw__int(b, "end", INT64_MAX);
  s->step = tpulw__int(b, "step", 1);
  if (s->step <= 0) return tpu_error(TPU_E_INVALID, "slice step must be positive");
  if (start < 0) start += size;
  if (end < 0) end += size;
  start = start < 0 ? 0 : start > size ? size : start;
  end = end < start ? start : end > size ? size : end;
  s->start = start;
  s->n = (end - start + s->step - 1) / s->step;
  return TPU_OK;
}

/* v (the viewed part, with a size-1 dim at s->dim for a select) padded with
 * `fill` to the base's sizes */
static tpuir_val pad_span(tpulw__b *b, tpuir_val v, tpuir_val fill, int nd, const int64_t *sizes,
                          const span *s) {
  int64_t lo[TPU_MAX_DIMS] = {0}, hi[TPU_MAX_DIMS] = {0}, in[TPU_MAX_DIMS] = {0};
  lo[s->dim] = s->start;
  in[s->dim] = s->n > 1 ? s->step - 1 : 0;
  hi[s->dim] = s->n ? sizes[s->dim] - (s->start + (s->n - 1) * s->step + 1)
                    : sizes[s->dim] - s->start;
  return tpuir_pad(b->g, v, fill, lo, hi, in);
}

/* The viewed part's expected sizes (sizes with s->dim set to s->n, or
 * removed for a select) against src's; 0 when they match. */
static int check_part(const char *what, int nd, const int64_t *sizes, const span *s, int select,
                      const tpu_view *src) {
  int64_t want[TPU_MAX_DIMS];
  int k = 0;
  for (int d = 0; d < nd; d++)
    if (d != s->dim) want[k++] = sizes[d];
    else if (!select) want[k++] = s->n;
  int ok = src->ndim == k;
  for (int d = 0; ok && d < k; d++) ok = src->sizes[d] == want[d];
  if (ok) return TPU_OK;
  char a[256], c[256];
  return tpu_error(TPU_E_INVALID, "%s: expected src to have a size equal to the slice of self. "
                   "src size = %s, slice size = %s", what,
                   tpulw__fmt_list(a, sizeof a, src->ndim, src->sizes),
                   tpulw__fmt_list(c, sizeof c, k, want));
}

/* src as the viewed part with the base's rank (a select's dim restored) */
static tpuir_val part_of(tpulw__b *b, const tpulw_tensor *src, int nd, const int64_t *sizes,
                         const span *s, int dtype) {
  tpuir_val v = tpulw__convert(b, tpulw__tensor(b, src), dtype);
  int64_t ps[TPU_MAX_DIMS];
  for (int d = 0; d < nd; d++) ps[d] = d == s->dim ? s->n : sizes[d];
  return tpulw__reshape(b, v, nd, ps);
}

/* select_backward(grad_output, input_sizes, dim, index) and
 * slice_backward(grad_output, input_sizes, dim, start, end, step) */
static int view_backward_fn(tpulw__b *b) {
  int select = b->op;
  const char *what = select ? "select_backward" : "slice_backward";
  const tpulw_tensor *g = tpulw__tensor_arg(b, "grad_output");
  if (!g) return tpu_error(TPU_E_UNSUPPORTED, "%s: no grad_output", what);
  int nd;
  int64_t scratch;
  const int64_t *sizes = tpulw__ints(b, "input_sizes", &nd, &scratch);
  if (nd < 0 || nd > TPU_MAX_DIMS) return tpu_error(TPU_E_UNSUPPORTED, "%s: rank", what);
  span s;
  int rc = select ? select_span(b, nd, sizes, &s) : slice_span(b, nd, sizes, &s);
  if (rc < 0) return rc;
  if ((rc = check_part(what, nd, sizes, &s, select, &g->view))) return rc;
  int dt = g->view.dtype;
  tpuir_val part = part_of(b, g, nd, sizes, &s, dt);
  return tpulw__result(b, pad_span(b, part, tpulw__const(b, dt, 0), nd, sizes, &s));
}

/* select_scatter(self, src, dim, index) and
 * slice_scatter(self, src, dim=0, start=None, end=None, step=1) */
static int view_scatter_fn(tpulw__b *b) {
  int select = b->op;
  const char *what = select ? "select_scatter" : "slice_scatter";
  const tpulw_tensor *self = tpulw__tensor_arg(b, "self"), *src = tpulw__tensor_arg(b, "src");
  if (!self || !src) return tpu_error(TPU_E_UNSUPPORTED, "%s: no self/src", what);
  int nd = self->view.ndim;
  const int64_t *sizes = self->view.sizes;
  span s;
  int rc = select ? select_span(b, nd, sizes, &s) : slice_span(b, nd, sizes, &s);
  if (rc < 0) return rc;
  if ((rc = check_part(what, nd, sizes, &s, select, &src->view))) return rc;
  int dt = self->view.dtype;
  tpuir_val part = part_of(b, src, nd, sizes, &s, dt);
  int64_t ps[TPU_MAX_DIMS];
  for (int d = 0; d < nd; d++) ps[d] = d == s.dim ? s.n : sizes[d];
  tpuir_val hit = pad_span(b, tpulw__full(b, TPU_BOOL, nd, ps, 1), tpulw__const(b, TPU_BOOL, 0),
                           nd, sizes, &s);
  tpuir_val val = pad_span(b, part, tpulw__const(b, dt, 0), nd, sizes, &s);
  return tpulw__result(b, tpulw__sel(b, hit, val, tpulw__tensor(b, self)));
}

const tpulw__row tpulw__rows_view_scatter[] = {
    {"select_backward", view_backward_fn, 1, LW_COMPLEX_OK},
    {"select_backward.out", view_backward_fn, 1, LW_COMPLEX_OK},
    {"slice_backward", view_backward_fn, 0, LW_COMPLEX_OK},
    {"slice_backward.out", view_backward_fn, 0, LW_COMPLEX_OK},
    {"select_scatter", view_scatter_fn, 1, LW_COMPLEX_OK},
    {"select_scatter.out", view_scatter_fn, 1, LW_COMPLEX_OK},
    {"slice_scatter", view_scatter_fn, 0, LW_COMPLEX_OK},
    {"slice_scatter.out", view_scatter_fn, 0, LW_COMPLEX_OK},
};
const int tpulw__nrows_view_scatter =
    sizeof tpulw__rows_view_scatter / sizeof tpulw__rows_view_scatter[0];

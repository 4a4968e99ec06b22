/* lower/sort.c - ordering and set ops: sort and topk (a TPUIR_SORT node
 * for the permutation, values gathered at it; topk = the head of the
 * sort), median/kthvalue (a position in the sort), isin and searchsorted
 * (all-pairs comparisons), histc (bin index + index_add), multinomial, and
 * weight norm (+ backward).
 *
 * The all-pairs forms cost n*m; beyond LW_PAIRS_MAX elements they return
 * TPU_E_UNSUPPORTED (CPU fallback) rather than run for minutes.
 */
#include <math.h>
#include <string.h>

#include "lower/internal.h"

#define LW_PAIRS_MAX ((int64_t)1 << 24)

enum { S_SORT = 1, S_TOPK, S_ISIN, S_HISTC, S_WNORM, S_WNORM_BW };

/* permutation moving `dim` last; inv receives the inverse */
static void last_perm(int nd, int dim, int64_t *perm, int64_t *inv) {
  int k = 0;
  for (int d = 0; d < nd; d++)
    if (d != dim) perm[k++] = d;
  perm[k] = dim;
  for (int d = 0; d < nd; d++) inv[perm[d]] = d;
}

static tpuir_val transpose_if(tpulw__b *b, tpuir_val x, int nd, int dim, const int64_t *perm) {
  if (nd == 0 || dim == nd - 1) return x;
  return tpuir_transpose(b->g, x, perm);
}

/* Stable sort of x along its last dim: *perm_out = source index of each
 * output position (int64, a TPUIR_SORT node), values gathered. */
int tpulw__sort_last(tpulw__b *b, tpuir_val x, int desc, tpuir_val *vals, tpuir_val *perm_out) {
  tpulw__shape s = tpulw__info(b, x);
  int nd = s.ndim;
  if (nd < 1) return tpu_error(TPU_E_UNSUPPORTED, "%s: rank 0 sort", b->base);
  tpuir_val perm = tpuir_sort(b->g, x, nd - 1, desc, TPUIR_SORT_INDICES);
  *perm_out = perm;
  *vals = tpuir_gather(b->g, x, nd - 1, perm);
  return *vals < 0 ? *vals : perm < 0 ? perm : TPU_OK;
}

/* Sorted (stable) indices along dim cut to the first k, and the values
 * gathered at them. */
static int topk_along(tpulw__b *b, tpuir_val x, int dim, int64_t k, int desc, tpuir_val *vals,
                      tpuir_val *idxs) {
  tpuir_val perm = tpuir_sort_head(b->g, x, dim, desc, TPUIR_SORT_INDICES, k);
  *idxs = perm;
  *vals = tpuir_gather(b->g, x, dim, perm);
  return *vals < 0 ? *vals : perm < 0 ? perm : TPU_OK;
}

int tpulw__topk_last(tpulw__b *b, tpuir_val x, int64_t k, int largest, tpuir_val *vals,
                 tpuir_val *idxs) {
  tpulw__shape s = tpulw__info(b, x);
  if (s.ndim < 1) return tpu_error(TPU_E_UNSUPPORTED, "%s: rank 0 topk", b->base);
  return topk_along(b, x, s.ndim - 1, k, largest, vals, idxs);
}

static int sort_fn(tpulw__b *b) {
  const tpulw_tensor *self = tpulw__tensor_arg(b, "self");
  if (!self) return tpu_error(TPU_E_UNSUPPORTED, "%s: no self", b->base);
  tpuir_val x = tpulw__tensor(b, self);
  tpulw__shape s = tpulw__info(b, x);
  int is_topk = b->op == S_TOPK;
  int dim;
  int rc = tpulw__wrap_dim(tpulw__int(b, "dim", -1), s.ndim, &dim);
  if (rc < 0) return rc;
  int desc = is_topk ? (int)tpulw__int(b, "largest", 1) : (int)tpulw__int(b, "descending", 0);
  int64_t n = s.ndim ? s.sizes[dim] : 1;
  int64_t k = is_topk ? tpulw__int(b, "k", 1) : n;
  if (is_topk && (k < 0 || k > n))
    return tpu_error(TPU_E_INVALID, "selected index k out of range");
  b->out_rule = LW_OUT_SAME;
  int nd = s.ndim;
  if (nd == 0) { /* a scalar sorts to itself */
    if ((rc = tpulw__result(b, x)) < 0) return rc;
    return tpulw__result(b, tpulw__const(b, TPU_I64, 0));
  }
  tpuir_val vals, idxs;
  if ((rc = topk_along(b, x, dim, k, desc, &vals, &idxs)) < 0) return rc;
  if ((rc = tpulw__result(b, vals)) < 0) return rc;
  return tpulw__result(b, idxs);
}

static int isin_fn(tpulw__b *b) {
  tpulw__opnd e = tpulw__opnd_arg(b, "elements"), t = tpulw__opnd_arg(b, "test_elements");
  if (e.kind == LW_OPND_NONE) e = tpulw__opnd_arg(b, "element");
  if (t.kind == LW_OPND_NONE) t = tpulw__opnd_arg(b, "test_element");
  if (e.kind == LW_OPND_NONE || t.kind == LW_OPND_NONE)
    return tpu_error(TPU_E_UNSUPPORTED, "isin: missing operand");
  tpulw__opnd ops[2] = {e, t};
  int dt = tpulw__result_type(2, ops);
  if (dt == TPU_BOOL) dt = TPU_U8;
  tpuir_val ev = tpulw__opnd_val(b, &e, dt), tv = tpulw__opnd_val(b, &t, dt);
  tpulw__shape es = tpulw__info(b, ev), tsh = tpulw__info(b, tv);
  int64_t ne = tpulw__numel(&es), nt = tpulw__numel(&tsh);
  if (ne * nt > LW_PAIRS_MAX)
    return tpu_error(TPU_E_UNSUPPORTED, "isin: %lld x %lld elements is too large",
                     (long long)ne, (long long)nt);
  int64_t s2[2] = {ne, nt}, ec[2] = {ne, 1}, tr[2] = {1, nt}, one = 1;
  tpuir_val eq = tpulw__bin(b, TPUIR_EQ, tpulw__reshape(b, ev, 2, ec), tpulw__reshape(b, tv, 2, tr));
  tpuir_val any = nt == 0 ? tpulw__full(b, TPU_BOOL, 1, &ne, 0)
                          : tpuir_reduce(b->g, TPUIR_RED_OR, tpulw__bcast(b, eq, 2, s2), 1, &one);
  tpuir_val r = tpulw__reshape(b, any, es.ndim, es.sizes);
  if (tpulw__int(b, "invert", 0)) r = tpulw__un(b, TPUIR_NOT, r);
  return tpulw__result(b, r);
}

/* bucketize(self, boundaries) / searchsorted(sorted_sequence, self):
 * the number of sequence elements < v (<= v for right / side="right"); a
 * NaN value lands after every element, like CPU's binary search */
static int search_fn(tpulw__b *b) {
  int is_bucket = strncmp(b->base, "bucketize", 9) == 0;
  tpulw__opnd v = tpulw__opnd_arg(b, "self");
  const tpulw_tensor *seq = tpulw__tensor_arg(b, is_bucket ? "boundaries" : "sorted_sequence");
  if (v.kind == LW_OPND_NONE || !seq)
    return tpu_error(TPU_E_UNSUPPORTED, "%s: missing operand", b->base);
  const tpulw_tensor *sorter = tpulw__tensor_arg(b, "sorter");
  if (sorter && sorter->device < 0)
    return tpu_error(TPU_E_UNSUPPORTED, "searchsorted: CPU sorter");
  int right = (int)tpulw__int(b, "right", 0);
  const char *side = tpulw__str(b, "side");
  if (side) {
    if (strcmp(side, "left") && strcmp(side, "right"))
      return tpu_error(TPU_E_INVALID,
                       "torch.searchsorted(): side can only be 'left' or 'right' but got %s", side);
    if (right && strcmp(side, "left") == 0)
      return tpu_error(TPU_E_INVALID,
                       "torch.searchsorted(): side and right can't be set to opposites, got side "
                       "of left while right was True");
    right = strcmp(side, "right") == 0;
  }
  int odt = tpulw__int(b, "out_int32", 0) ? TPU_I32 : TPU_I64;
  tpulw__opnd so = tpulw__opnd_tensor(seq);
  tpulw__opnd ops[2] = {v, so};
  int dt = tpulw__result_type(2, ops);
  if (dt == TPU_BOOL) dt = TPU_U8;
  tpuir_val x = tpulw__opnd_val(b, &v, dt), sq = tpulw__opnd_val(b, &so, dt);
  tpulw__shape xs = tpulw__info(b, x), ss = tpulw__info(b, sq);
  if (sorter) { /* the sequence in sorted order: gather along its last dim */
    const tpu_view *sv = &sorter->view;
    int same = sv->ndim == ss.ndim;
    for (int d = 0; same && d < sv->ndim; d++) same = sv->sizes[d] == ss.sizes[d];
    if (!same)
      return tpu_error(TPU_E_INVALID, "torch.searchsorted(): boundary and sorter must have the "
                       "same size, but got boundary tensor of size %lld and sorter of size %lld",
                       (long long)(ss.ndim ? ss.sizes[ss.ndim - 1] : 1),
                       (long long)(sv->ndim ? sv->sizes[sv->ndim - 1] : 1));
    if (sv->dtype != TPU_I64)
      return tpu_error(TPU_E_INVALID, "torch.searchsorted(): sorter must be a tensor of long "
                       "dtype but got dtype %s", tpulw__torch_name(sv->dtype));
    if (ss.ndim > 0 && tpulw__numel(&ss) > 0) {
      b->sync = 1;
      b->err_remap = LW_ERR_RUNTIME;
      sq = tpuir_gather(b->g, sq, ss.ndim - 1, tpulw__tensor(b, sorter));
    }
  }
  if (is_bucket && ss.ndim != 1)
    return tpu_error(TPU_E_INVALID,
                     "boundaries tensor must be 1 dimension, but got dim(%d)", ss.ndim);
  int64_t m = ss.ndim ? ss.sizes[ss.ndim - 1] : 1;
  if (tpulw__numel(&xs) * m > LW_PAIRS_MAX)
    return tpu_error(TPU_E_UNSUPPORTED, "%s: too large", b->base);
  tpuir_val cmp;
  int nd = xs.ndim;
  if (ss.ndim <= 1) { /* one sequence for every value */
    int64_t n = tpulw__numel(&xs);
    int64_t c2[2] = {n, 1}, r2[2] = {1, m};
    /* CPU's binary search counts !(seq >= v) (left) / !(seq > v) (right): NaN -> len */
    cmp = tpulw__un(b, TPUIR_NOT, tpulw__bin(b, right ? TPUIR_GT : TPUIR_GE, tpulw__reshape(b, sq, 2, r2),
                                     tpulw__reshape(b, x, 2, c2)));
    int64_t one = 1;
    tpuir_val cnt = tpuir_reduce(b->g, TPUIR_RED_SUM, tpulw__convert(b, cmp, TPU_I64), 1, &one);
    return tpulw__result_as(b, tpulw__reshape(b, cnt, nd, xs.sizes), odt);
  }
  /* batched: leading dims of the sequence and the values must match */
  if (ss.ndim != nd)
    return tpu_error(TPU_E_INVALID,
                     "torch.searchsorted(): boundaries tensor should be 1 dimension or the first "
                     "N-1 dimensions of boundaries tensor and input value tensor must match");
  for (int d = 0; d < nd - 1; d++)
    if (ss.sizes[d] != xs.sizes[d])
      return tpu_error(TPU_E_INVALID,
                       "torch.searchsorted(): boundaries tensor should be 1 dimension or the first "
                       "N-1 dimensions of boundaries tensor and input value tensor must match");
  int64_t a[TPU_MAX_DIMS], c[TPU_MAX_DIMS];
  for (int d = 0; d < nd - 1; d++) a[d] = c[d] = xs.sizes[d];
  a[nd - 1] = xs.sizes[nd - 1]; a[nd] = 1;
  c[nd - 1] = 1; c[nd] = m;
  cmp = tpulw__un(b, TPUIR_NOT, tpulw__bin(b, right ? TPUIR_GT : TPUIR_GE, tpulw__reshape(b, sq, nd + 1, c),
                                   tpulw__reshape(b, x, nd + 1, a)));
  int64_t last = nd;
  tpuir_val cnt = tpuir_reduce(b->g, TPUIR_RED_SUM, tpulw__convert(b, cmp, TPU_I64), 1, &last);
  return tpulw__result_as(b, cnt, odt);
}

/* median / nanmedian / kthvalue: a position in the stable ascending sort
 * (NaN last) */
static int median_fn(tpulw__b *b) {
  const tpulw_tensor *self = tpulw__tensor_arg(b, "self");
  if (!self) return tpu_error(TPU_E_UNSUPPORTED, "%s: no self", b->base);
  int is_nan = strncmp(b->base, "nanmedian", 9) == 0;
  int is_kth = strncmp(b->base, "kthvalue", 8) == 0;
  int all = !is_kth && tpulw__arg(b, "dim") == NULL;
  tpuir_val x = tpulw__tensor(b, self);
  tpulw__shape s = tpulw__info(b, x);
  int dt = s.dtype;
  int isf = tpu_dtype_is_float(dt);
  int nd = s.ndim, dim = 0;
  if (all) {
    int64_t n = tpulw__numel(&s);
    if (n == 0)
      return tpu_error(TPU_E_INVALID, "%s() input tensor cannot be empty",
                       is_nan ? "nanmedian" : "median");
    x = tpulw__reshape(b, x, 1, &n);
    nd = 1;
  } else {
    int rc = tpulw__wrap_dim(tpulw__int(b, "dim", -1), s.ndim, &dim);
    if (rc < 0) return rc;
    if (s.ndim == 0) {
      int64_t one = 1;
      x = tpulw__reshape(b, x, 1, &one);
      nd = 1;
    }
  }
  int64_t perm[TPU_MAX_DIMS], inv[TPU_MAX_DIMS];
  last_perm(nd, dim, perm, inv);
  tpuir_val xt = transpose_if(b, x, nd, dim, perm);
  tpulw__shape ts = tpulw__info(b, xt);
  int64_t n = ts.sizes[nd - 1];
  if (n == 0)
    return tpu_error(TPU_E_INDEX, "%s(): Expected reduction dim %d to have non-zero size.",
                     b->base, dim);
  int64_t k = is_kth ? tpulw__int(b, "k", 1) : 0;
  if (is_kth && (k < 1 || k > n))
    return tpu_error(TPU_E_INVALID, "kthvalue(): selected number k out of range for dimension %d",
                     dim);
  tpuir_val sv = -1, sp = -1;
  int rc = tpulw__sort_last(b, xt, 0, &sv, &sp);
  if (rc < 0) return rc;
  int64_t ks[TPU_MAX_DIMS];
  for (int d = 0; d < nd; d++) ks[d] = ts.sizes[d];
  ks[nd - 1] = 1;
  int64_t last = nd - 1;
  tpuir_val pos;
  if (is_kth) {
    pos = tpulw__full(b, TPU_I64, nd, ks, (double)(k - 1));
  } else {
    tpuir_val mid = tpulw__full(b, TPU_I64, nd, ks, (double)((n - 1) / 2));
    if (isf) {
      tpuir_val cnt = tpuir_reduce(b->g, TPUIR_RED_SUM,
                                   tpulw__convert(b, tpulw__un(b, TPUIR_NOT, tpulw__un(b, TPUIR_IS_NAN, xt)),
                                              TPU_I64), 1, &last);
      cnt = tpulw__reshape(b, cnt, nd, ks);
      if (is_nan) /* median of the non-NaN values (all NaN: position 0) */
        pos = tpulw__bin_c(b, TPUIR_MAX, tpulw__bin_c(b, TPUIR_DIV, tpulw__bin_c(b, TPUIR_SUB, cnt, 1), 2), 0);
      else /* any NaN: the first NaN */
        pos = tpulw__sel(b, tpulw__bin_c(b, TPUIR_LT, cnt, (double)n), cnt, mid);
    } else {
      pos = mid;
    }
  }
  tpuir_val val = tpuir_gather(b->g, sv, nd - 1, pos);
  tpuir_val idx = tpuir_gather(b->g, sp, nd - 1, pos);
  if (all) {
    b->out_rule = LW_OUT_SAME;
    return tpulw__result(b, tpulw__reshape(b, val, 0, NULL));
  }
  val = transpose_if(b, val, nd, dim, inv); /* [.., 1 at dim, ..] */
  idx = transpose_if(b, idx, nd, dim, inv);
  int keepdim = (int)tpulw__int(b, "keepdim", 0);
  int64_t os[TPU_MAX_DIMS];
  int on = 0;
  for (int d = 0; d < s.ndim; d++)
    if (d != dim || keepdim) os[on++] = d == dim ? 1 : s.sizes[d];
  b->out_rule = LW_OUT_SAME;
  if ((rc = tpulw__result(b, tpulw__reshape(b, val, on, os))) < 0) return rc;
  return tpulw__result(b, tpulw__reshape(b, idx, on, os));
}

/* multinomial: Gumbel-max sampling (top-k of log p + Gumbel noise without
 * replacement, one argmax per sample with replacement) */
static int multinomial_fn(tpulw__b *b) {
  const tpulw_tensor *self = tpulw__tensor_arg(b, "self");
  if (!self) return tpu_error(TPU_E_UNSUPPORTED, "multinomial: no self");
  int dt = self->view.dtype;
  if (!tpu_dtype_is_float(dt))
    return tpu_error(TPU_E_INVALID, "multinomial only supports floating-point dtypes for input, got: %s",
                     tpulw__torch_name(dt));
  int nd = self->view.ndim;
  if (nd < 1 || nd > 2)
    return tpu_error(TPU_E_INVALID, "prob_dist must be 1 or 2 dim");
  int64_t n = self->view.sizes[nd - 1];
  int64_t ns = tpulw__int(b, "num_samples", 1);
  int repl = (int)tpulw__int(b, "replacement", 0);
  if (ns <= 0) return tpu_error(TPU_E_INVALID, "cannot sample n_sample <= 0 samples");
  if (!repl && ns > n)
    return tpu_error(TPU_E_INVALID, "cannot sample n_sample > prob_dist.size(-1) samples without replacement");
  int cdt = dt == TPU_F64 ? TPU_F64 : TPU_F32;
  tpuir_val p = tpulw__convert(b, tpulw__tensor(b, self), cdt);
  int64_t rows = nd == 2 ? self->view.sizes[0] : 1;
  int64_t p2[2] = {rows, n};
  p = tpulw__reshape(b, p, 2, p2);
  tpuir_val logp = tpulw__un(b, TPUIR_LOG, p);
  tpuir_val r = -1;
  if (!repl) {
    tpuir_val u = tpulw__rng(b, TPUIR_RNG_UNIFORM, cdt, 2, p2);
    tpuir_val gum = tpulw__un(b, TPUIR_NEG, tpulw__un(b, TPUIR_LOG, tpulw__un(b, TPUIR_NEG, tpulw__un(b, TPUIR_LOG, u))));
    tpuir_val keys = tpulw__bin(b, TPUIR_ADD, logp, gum), vals;
    int rc = tpulw__topk_last(b, keys, ns, 1, &vals, &r);
    if (rc < 0) return rc;
  } else {
    int64_t s3[3] = {ns, rows, n}, o2[2] = {ns, rows}, perm[2] = {1, 0};
    tpuir_val u = tpulw__rng(b, TPUIR_RNG_UNIFORM, cdt, 3, s3);
    tpuir_val gum = tpulw__un(b, TPUIR_NEG, tpulw__un(b, TPUIR_LOG, tpulw__un(b, TPUIR_NEG, tpulw__un(b, TPUIR_LOG, u))));
    tpuir_val keys = tpulw__bin(b, TPUIR_ADD, tpulw__bcast(b, logp, 3, s3), gum);
    r = tpulw__reshape(b, tpuir_argreduce(b->g, TPUIR_RED_MAX, keys, 2), 2, o2);
    r = tpuir_transpose(b->g, r, perm);
  }
  if (nd == 1) r = tpulw__reshape(b, r, 1, &ns);
  b->out_rule = LW_OUT_SAME;
  return tpulw__result(b, r);
}

static int histc_fn(tpulw__b *b) {
  const tpulw_tensor *self = tpulw__tensor_arg(b, "self");
  if (!self) return tpu_error(TPU_E_UNSUPPORTED, "histc: no self");
  int dt = self->view.dtype;
  /* integer inputs count into an integer histogram (CUDA semantics: the CPU
   * kernel has no integer version) */
  if (dt == TPU_BOOL)
    return tpu_error(TPU_E_UNSUPPORTED, "\"histogram_cpu\" not implemented for '%s'",
                     tpulw__torch_name(dt));
  int64_t bins = tpulw__int(b, "bins", 100);
  if (bins <= 0)
    return tpu_error(TPU_E_INVALID, "torch.histc(): bins must be > 0, but got %lld for dimension 0",
                     (long long)bins);
  double lo = tpulw__float(b, "min", 0), hi = tpulw__float(b, "max", 0);
  if (lo > hi)
    return tpu_error(TPU_E_INVALID, "torch.histc(): max must be larger than min");
  if (!isfinite(lo) || !isfinite(hi))
    return tpu_error(TPU_E_INVALID, "torch.histc(): range of [%g, %g] is not finite", lo, hi);
  int cdt = tpu_dtype_is_float(dt) ? tpulw__opmath(dt) : TPU_F64;
  if (!tpu_dtype_is_float(dt)) { /* the range in the input's type */
    lo = (double)(int64_t)lo;
    hi = (double)(int64_t)hi;
  }
  tpuir_val x = tpulw__convert(b, tpulw__tensor(b, self), cdt);
  tpulw__shape s = tpulw__info(b, x);
  int64_t n = tpulw__numel(&s);
  x = tpulw__reshape(b, x, 1, &n);
  tpuir_val lov, hiv;
  int64_t z = 0;
  if (lo == hi && n > 0) { /* the data's range (then widened if still empty) */
    lov = tpuir_reduce(b->g, TPUIR_RED_MIN, x, 1, &z);
    hiv = tpuir_reduce(b->g, TPUIR_RED_MAX, x, 1, &z);
  } else {
    lov = tpulw__const(b, cdt, lo);
    hiv = tpulw__const(b, cdt, hi);
  }
  tpuir_val same = tpulw__bin(b, TPUIR_EQ, lov, hiv);
  lov = tpulw__sel(b, same, tpulw__bin_c(b, TPUIR_SUB, lov, 1), lov);
  hiv = tpulw__sel(b, same, tpulw__bin_c(b, TPUIR_ADD, hiv, 1), hiv);
  tpuir_val in = tpulw__bin(b, TPUIR_AND, tpulw__bin(b, TPUIR_GE, x, lov), tpulw__bin(b, TPUIR_LE, x, hiv));
  tpuir_val pos = tpulw__bin_c(b, TPUIR_MUL, tpulw__bin(b, TPUIR_DIV, tpulw__bin(b, TPUIR_SUB, x, lov),
                                                tpulw__bin(b, TPUIR_SUB, hiv, lov)),
                           (double)bins);
  tpuir_val idx = tpulw__convert(b, tpulw__un(b, TPUIR_FLOOR, pos), TPU_I64);
  idx = tpulw__sel(b, tpulw__bin(b, TPUIR_EQ, x, hiv), tpulw__const(b, TPU_I64, (double)(bins - 1)), idx);
  idx = tpulw__sel(b, in, tpulw__bin_c(b, TPUIR_MIN, idx, (double)(bins - 1)), tpulw__const(b, TPU_I64, 0));
  idx = tpulw__bin_c(b, TPUIR_MAX, idx, 0);
  tpuir_val w = tpulw__convert(b, in, cdt);
  tpuir_val r = n == 0 ? tpulw__full(b, cdt, 1, &bins, 0)
                       : tpuir_index_add(b->g, tpulw__full(b, cdt, 1, &bins, 0), 0, idx, w);
  return tpulw__result_as(b, r, dt);
}

/* _weight_norm_interface(v, g, dim) -> (v * g / ||v||, ||v||), the norm over
 * every dim but `dim` (all dims for dim == -1) */
static int wnorm_fn(tpulw__b *b) {
  int bw = b->op == S_WNORM_BW;
  const tpulw_tensor *v = tpulw__tensor_arg(b, bw ? "saved_v" : "v");
  const tpulw_tensor *g = tpulw__tensor_arg(b, bw ? "saved_g" : "g");
  if (!v || !g) return tpu_error(TPU_E_UNSUPPORTED, "weight_norm: missing operand");
  int dt = v->view.dtype;
  if (!tpu_dtype_is_float(dt)) return tpu_error(TPU_E_UNSUPPORTED, "weight_norm: dtype");
  int cdt = tpulw__opmath(dt);
  int nd = v->view.ndim;
  int64_t dim = tpulw__int(b, "dim", 0);
  uint32_t m = 0;
  for (int d = 0; d < nd; d++)
    if (dim == -1 || d != (dim < 0 ? dim + nd : dim)) m |= 1u << d;
  tpuir_val vv = tpulw__convert(b, tpulw__tensor(b, v), cdt);
  tpuir_val gv = tpulw__convert(b, tpulw__tensor(b, g), cdt);
  tpuir_val norm;
  if (bw) {
    const tpulw_tensor *nt = tpulw__tensor_arg(b, "saved_norms");
    const tpulw_tensor *gw = tpulw__tensor_arg(b, "grad_w");
    if (!nt || !gw) return tpu_error(TPU_E_UNSUPPORTED, "weight_norm_backward: missing operand");
    norm = tpulw__convert(b, tpulw__tensor(b, nt), cdt);
    tpuir_val gr = tpulw__convert(b, tpulw__tensor(b, gw), cdt);
    tpuir_val dotv = tpulw__reduce_dims(b, TPUIR_RED_SUM, tpulw__bin(b, TPUIR_MUL, gr, vv), m, 1);
    tpulw__shape gs = tpulw__info(b, gv);
    tpuir_val grad_g = tpulw__bin(b, TPUIR_DIV, dotv, tpulw__bcast(b, norm, tpulw__info(b, dotv).ndim,
                                                             tpulw__info(b, dotv).sizes));
    tpuir_val scale = tpulw__bin(b, TPUIR_DIV, gv, norm);
    tpuir_val grad_v = tpulw__bin(b, TPUIR_MUL, scale,
                              tpulw__bin(b, TPUIR_SUB, gr,
                                     tpulw__bin(b, TPUIR_MUL, vv,
                                            tpulw__bin(b, TPUIR_DIV, dotv,
                                                   tpulw__bin(b, TPUIR_MUL, norm, norm)))));
    int rc = tpulw__result_as(b, grad_v, dt);
    if (rc < 0) return rc;
    return tpulw__result_as(b, tpulw__reshape(b, grad_g, gs.ndim, gs.sizes), g->view.dtype);
  }
  norm = tpulw__un(b, TPUIR_SQRT, tpulw__reduce_dims(b, TPUIR_RED_SUM, tpulw__bin(b, TPUIR_MUL, vv, vv), m, 1));
  tpulw__shape gs = tpulw__info(b, gv);
  tpuir_val w = tpulw__bin(b, TPUIR_MUL, vv, tpulw__bin(b, TPUIR_DIV, gv, norm));
  int rc = tpulw__result_as(b, w, dt);
  if (rc < 0) return rc;
  return tpulw__result(b, tpulw__reshape(b, norm, gs.ndim, gs.sizes)); /* f32 for f16/bf16 */
}

const tpulw__row tpulw__rows_sort[] = {
    {"sort", sort_fn, S_SORT}, {"sort.values", sort_fn, S_SORT},
    {"sort.stable", sort_fn, S_SORT}, {"sort.values_stable", sort_fn, S_SORT},
    {"topk", sort_fn, S_TOPK}, {"topk.values", sort_fn, S_TOPK},
    {"isin.Tensor_Tensor", isin_fn, S_ISIN}, {"isin.Tensor_Tensor_out", isin_fn, S_ISIN},
    {"isin.Tensor_Scalar", isin_fn, S_ISIN}, {"isin.Tensor_Scalar_out", isin_fn, S_ISIN},
    {"isin.Scalar_Tensor", isin_fn, S_ISIN}, {"isin.Scalar_Tensor_out", isin_fn, S_ISIN},
    {"histc", histc_fn, S_HISTC}, {"histc.out", histc_fn, S_HISTC},
    {"bucketize.Tensor", search_fn, 0}, {"bucketize.Tensor_out", search_fn, 0},
    {"bucketize.Scalar", search_fn, 0}, {"bucketize.Scalar_out", search_fn, 0},
    {"searchsorted.Tensor", search_fn, 0}, {"searchsorted.Tensor_out", search_fn, 0},
    {"searchsorted.Scalar", search_fn, 0}, {"searchsorted.Scalar_out", search_fn, 0},
    {"median", median_fn, 0}, {"median.out", median_fn, 0},
    {"median.dim", median_fn, 0}, {"median.dim_values", median_fn, 0},
    {"nanmedian", median_fn, 0}, {"nanmedian.out", median_fn, 0},
    {"nanmedian.dim", median_fn, 0}, {"nanmedian.dim_values", median_fn, 0},
    {"kthvalue", median_fn, 0}, {"kthvalue.values", median_fn, 0},
    {"multinomial", multinomial_fn, 0}, {"multinomial.out", multinomial_fn, 0},
    {"_weight_norm_interface", wnorm_fn, S_WNORM},
    {"_weight_norm_interface_backward", wnorm_fn, S_WNORM_BW},
};
const int tpulw__nrows_sort = sizeof tpulw__rows_sort / sizeof tpulw__rows_sort[0];

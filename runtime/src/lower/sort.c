/* lower/sort.c - ordering and set ops: sort and topk (a TPUIR_SORT node
 * for the permutation, values gathered at it; topk = the head of the
 * sort), median/kthvalue (a position in the sort), isin and searchsorted
 * (all-pairs comparisons), mode (run lengths over the sort, first longest
 * run), histc and histogram / histogramdd (bin index by comparison with the
 * edges + index_add), multinomial, and weight norm (+ backward).
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

/* ---- mode ---------------------------------------------------------------- */

/* mode(self, dim, keepdim) -> (values, indices): the most frequent value
 * of each slice (ties: the smallest value) and the LAST position where it
 * occurs, like PyTorch CPU. Stable ascending sort; the run ending at each
 * position gets its length; the first longest run wins. */
static int mode_fn(tpulw__b *b) {
  const tpulw_tensor *self = tpulw__tpu_self(b);
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
  tpuir_val start = tpulw__scan_op(b, tpulw__sel(b, first, pos, tpulw__const(b, TPU_I64, 0)), dim, TPUIR_MAX, 0);
  tpuir_val len = tpulw__sel(b, last, tpulw__bin_c(b, TPUIR_ADD, tpulw__bin(b, TPUIR_SUB, pos, start), 1),
                         tpulw__const(b, TPU_I64, 0));
  tpuir_val best = tpulw__reshape(b, tpuir_argreduce(b->g, TPUIR_RED_MAX, len, dim), nd, ks);
  tpuir_val val = tpuir_gather(b->g, sv, dim, best);
  tpuir_val idx = tpuir_gather(b->g, perm, dim, best);
  if ((rc = tpulw__result(b, tpulw__reshape(b, val, on, os))) < 0) return rc;
  return tpulw__result(b, tpulw__reshape(b, idx, on, os));
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
  const tpulw_tensor *self = tpulw__tpu_self(b);
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
    {"mode", mode_fn, 0},
    {"mode.values", mode_fn, 0},
    {"histogram.bin_ct", histogram_fn, 0},
    {"histogram.bin_ct_out", histogram_fn, 0},
    {"histogram.bins_tensor", histogram_fn, 0},
    {"histogram.bins_tensor_out", histogram_fn, 0},
    {"_histogramdd_bin_edges", histogram_fn, 0},
    {"_histogramdd_from_bin_cts", histogram_fn, 0},
    {"_histogramdd_from_bin_tensors", histogram_fn, 0},
};
const int tpulw__nrows_sort = sizeof tpulw__rows_sort / sizeof tpulw__rows_sort[0];

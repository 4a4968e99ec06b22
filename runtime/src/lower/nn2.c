/* lower/nn2.c - more neural-network ops, lowered to existing IR ops:
 *   max_unpool2d/3d; adaptive_max_pool2d/3d and fractional_max_pool2d/3d
 *   (+ backward); channel_shuffle; rrelu_with_noise; _pdist_forward /
 *   _pdist_backward; _cdist_forward / _cdist_backward; multi_margin_loss
 *   (+ backward); multilabel_margin_loss_forward (+ backward);
 *   upsample_bicubic2d and _upsample_bilinear2d_aa (+ backward);
 *   _embedding_bag / _embedding_bag_forward_only (+ dense backward and
 *   per_sample_weights backward); grid_sampler_2d/3d (+ backward: bilinear,
 *   nearest, bicubic taps gathered from the flattened plane, gradients
 *   scattered back); _ctc_loss / _ctc_loss_backward (int-list lengths;
 *   the alpha / beta recursions unrolled over time, vectorized over batch
 *   and extended-target positions).
 *
 * Pooling with data- or shape-dependent windows (adaptive, fractional)
 * gathers every window into a trailing axis of size K (the largest window;
 * shorter windows repeat their last element, which changes neither the max
 * nor the first-max / last-NaN index rule of PyTorch CPU) and reduces it
 * with max / argmax. Their backward ops, like max_unpool, scatter-add into
 * the flattened spatial plane.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "lower/internal.h"

enum {
  K_UNPOOL = 1, K_ADAPT_MAX, K_ADAPT_MAX_BW, K_FRAC, K_FRAC_BW, K_SHUFFLE, K_RRELU,
  K_PDIST, K_PDIST_BW, K_CDIST, K_CDIST_BW, K_MULTI_MARGIN, K_MULTI_MARGIN_BW,
  K_MLML, K_MLML_BW, K_BICUBIC, K_BILINEAR_AA, K_EBAG, K_EBAG_BW, K_EBAG_DENSE_BW,
  K_EBAG_PSW_BW
};

enum { RED_NONE = 0, RED_MEAN = 1, RED_SUM = 2 };

/* "2, 3, 4" */
static const char *fmt_sizes(char *buf, size_t cap, int nd, const int64_t *s) {
  size_t k = 0;
  buf[0] = 0;
  for (int i = 0; i < nd && k < cap; i++)
    k += (size_t)snprintf(buf + k, cap - k, "%s%lld", i ? ", " : "", (long long)s[i]);
  return buf;
}

static int nsp_of(const tpulw__b *b) { return strstr(b->base, "3d") ? 3 : 2; }

static int float_only(const tpulw__b *b, int dt) {
  if (tpu_dtype_is_float(dt)) return TPU_OK;
  return tpu_error(TPU_E_UNSUPPORTED, "\"%s\" not implemented for '%s'", b->base,
                   tpulw__torch_name(dt));
}

static int need_tpu(const tpulw__b *b, const tpulw_tensor *t) {
  if (!t || t->device < 0)
    return tpu_error(TPU_E_UNSUPPORTED, "%s: operands must be tpu tensors", b->base);
  return TPU_OK;
}

/* Scatter-add grad [lead..., out...] into zeros [lead..., in...] at the flat
 * spatial positions idx (same shape as grad) over the last nsp dims. */
static tpuir_val flat_scatter(tpulw__b *b, tpuir_val grad, tpuir_val idx, int rank, int nsp,
                              const int64_t *in_sizes, int cdt) {
  tpulw__shape gs = tpulw__info(b, grad);
  int lead = rank - nsp;
  int64_t bs[TPU_MAX_DIMS], ss[TPU_MAX_DIMS];
  int64_t fin = 1, fout = 1;
  for (int i = 0; i < nsp; i++) {
    fin *= in_sizes[lead + i];
    fout *= gs.sizes[lead + i];
  }
  for (int i = 0; i < lead; i++) bs[i] = ss[i] = in_sizes[i];
  bs[lead] = fin;
  ss[lead] = fout;
  tpuir_val g = tpulw__reshape(b, tpulw__convert(b, grad, cdt), lead + 1, ss);
  tpuir_val id = tpulw__reshape(b, idx, lead + 1, ss);
  tpuir_val r = tpuir_scatter_add(b->g, tpulw__full(b, cdt, lead + 1, bs, 0), lead, id, g);
  return tpulw__reshape(b, r, rank, in_sizes);
}

/* ---- max_unpool ---------------------------------------------------------- */

static int unpool_fn(tpulw__b *b) {
  const tpulw_tensor *in = tpulw__tensor_arg(b, "self"), *ix = tpulw__tensor_arg(b, "indices");
  int rc;
  if ((rc = need_tpu(b, in)) || (rc = need_tpu(b, ix))) return rc;
  int nsp = nsp_of(b);
  const tpu_view *v = &in->view, *iv = &ix->view;
  char s1[256], s2[256];
  int no;
  int64_t sc[3];
  const int64_t *os = tpulw__ints(b, "output_size", &no, &sc[0]);
  if (iv->dtype != TPU_I64)
    return tpu_error(TPU_E_INVALID, "elements in indices should be type int64 but got: %s",
                     tpulw__torch_name(iv->dtype));
  if (nsp == 2 && no != 2)
    return tpu_error(TPU_E_INVALID, "There should be exactly two elements (height, width) in "
                     "output_size, but got %d elements.", no);
  if (v->ndim != nsp + 1 && v->ndim != nsp + 2)
    return tpu_error(TPU_E_INVALID, "Input to max_unpooling%dd should be a %dd or %dd Tensor, "
                     "but got a tensor with %d dimensions.", nsp, nsp + 1, nsp + 2, v->ndim);
  if (nsp == 3) {
    int ns, np;
    const int64_t *st = tpulw__ints(b, "stride", &ns, &sc[1]);
    const int64_t *pd = tpulw__ints(b, "padding", &np, &sc[2]);
    (void)pd;
    if (no != 3)
      return tpu_error(TPU_E_INVALID, "There should be exactly three elements (depth, height, "
                       "width) in output_size, but got %d elements.", no);
    if (ns != 3)
      return tpu_error(TPU_E_INVALID, "There should be exactly three elements (depth, height, "
                       "width) in stride, but got: %d elements.", ns);
    if (np != 3)
      return tpu_error(TPU_E_INVALID, "There should be exactly three elements (depth, height, "
                       "width) in padding, but got: %d elements.", np);
    if (st[0] <= 0 || st[1] <= 0 || st[2] <= 0)
      return tpu_error(TPU_E_INVALID, "strides should be greater than zero, but got stride: "
                       "[%s]", fmt_sizes(s1, sizeof s1, 3, st));
  }
  int same = iv->ndim == v->ndim;
  for (int i = 0; same && i < v->ndim; i++) same = iv->sizes[i] == v->sizes[i];
  if (!same)
    return tpu_error(TPU_E_INVALID, "Expected shape of indices to be same as that of the input "
                     "tensor ([%s]) but got indices tensor with shape: [%s]",
                     fmt_sizes(s1, sizeof s1, v->ndim, v->sizes),
                     fmt_sizes(s2, sizeof s2, iv->ndim, iv->sizes));
  for (int i = 1; i < v->ndim; i++)
    if (v->sizes[i] <= 0)
      return tpu_error(TPU_E_INVALID, "max_unpooling%dd_forward_out_cpu(): Expected input to "
                       "have non-zero size for non-batch dimensions, but got [%s] with "
                       "dimension %d being empty.", nsp, fmt_sizes(s1, sizeof s1, v->ndim, v->sizes), i);
  int dt = v->dtype;
  if (dt == TPU_BOOL) return tpu_error(TPU_E_UNSUPPORTED, "max_unpool: bool");
  int rank = v->ndim, lead = rank - nsp;
  int64_t osz[TPU_MAX_DIMS];
  for (int i = 0; i < lead; i++) osz[i] = v->sizes[i];
  for (int i = 0; i < nsp; i++) {
    if (os[i] < 0) return tpu_error(TPU_E_INVALID, "max_unpool: negative output_size");
    osz[lead + i] = os[i];
  }
  int cdt = tpu_dtype_is_float(dt) ? tpulw__opmath(dt) : (dt == TPU_U8 ? TPU_I64 : dt);
  if (!tpu_dtype_is_float(dt)) cdt = TPU_I64;
  tpuir_val x = tpulw__convert(b, tpulw__tensor(b, in), cdt);
  tpuir_val id = tpulw__tensor(b, ix);
  /* assignment semantics: duplicate indices (overlapping pooling windows)
   * hold the same input element; sum / count gives it back */
  tpuir_val sum = flat_scatter(b, x, id, rank, nsp, osz, cdt);
  tpuir_val cnt = flat_scatter(b, tpulw__full(b, cdt, rank, v->sizes, 1), id, rank, nsp, osz, cdt);
  tpuir_val r = tpulw__bin(b, TPUIR_DIV, sum, tpulw__bin_c(b, TPUIR_MAX, cnt, 1));
  b->sync = 1;
  b->err_remap = LW_ERR_RUNTIME;
  return tpulw__result_as(b, r, dt);
}

/* ---- windowed max over gathered windows --------------------------------- */

/* x [lead..., in...] (rank), pos [lead'..., P, K] int64 flat positions in
 * the spatial plane (lead' = lead dims or all-1 to broadcast), P = prod
 * out: the op's two results, max value and its flat index, both of shape
 * [lead..., out...]. */
static int window_max(tpulw__b *b, tpuir_val x, tpuir_val pos, int rank, int nsp,
                      const int64_t *out) {
  tpulw__shape xs = tpulw__info(b, x);
  int lead = rank - nsp;
  int64_t fin = 1, P = 1;
  for (int i = 0; i < nsp; i++) {
    fin *= xs.sizes[lead + i];
    P *= out[i];
  }
  tpulw__shape ps = tpulw__info(b, pos);
  int64_t K = ps.sizes[ps.ndim - 1];
  int64_t fs[TPU_MAX_DIMS], gs[TPU_MAX_DIMS], ks[TPU_MAX_DIMS], os[TPU_MAX_DIMS];
  for (int i = 0; i < lead; i++) fs[i] = gs[i] = ks[i] = os[i] = xs.sizes[i];
  fs[lead] = fin;
  gs[lead] = P * K;
  ks[lead] = P;
  ks[lead + 1] = K;
  for (int i = 0; i < nsp; i++) os[lead + i] = out[i];
  tpuir_val pk = tpulw__bcast(b, pos, lead + 2, ks);
  tpuir_val xf = tpulw__reshape(b, x, lead + 1, fs);
  tpuir_val w = tpuir_gather(b->g, xf, lead, tpulw__reshape(b, pk, lead + 1, gs));
  w = tpulw__reshape(b, w, lead + 2, ks);
  LW_TRY(w);
  tpuir_val am = tpuir_argreduce(b->g, TPUIR_RED_MAX, w, lead + 1);
  LW_TRY(am);
  ks[lead + 1] = 1;
  tpuir_val am1 = tpulw__reshape(b, am, lead + 2, ks);
  int rc = tpulw__result(b, tpulw__reshape(b, tpuir_gather(b->g, w, lead + 1, am1), rank, os));
  if (rc < 0) return rc;
  return tpulw__result(b, tpulw__reshape(b, tpuir_gather(b->g, pk, lead + 1, am1), rank, os));
}

/* flat positions [P, K] (shape [1.., P, K] at rank lead + 2) from per-dim
 * window starts st[j] (int64 [s..., out_j], s = leading dims shared) and
 * window lengths: pos = sum_j clamp(st_j + k_j, st_j, st_j + len_j - 1) *
 * stride_j. st values may have leading batch dims `bl` (rank bl + 1). */
static tpuir_val window_pos(tpulw__b *b, int bl, const int64_t *bsz, int nsp, const tpuir_val *st,
                            const tpuir_val *len, const int64_t *out, const int64_t *kk,
                            const int64_t *in) {
  /* full index space [bl..., o_0, .., o_{n-1}, k_0, .., k_{n-1}] */
  int nd = bl + 2 * nsp;
  int64_t sz[TPU_MAX_DIMS * 2];
  if (nd > TPU_MAX_DIMS) return tpu_error(TPU_E_UNSUPPORTED, "window_pos: rank");
  for (int i = 0; i < bl; i++) sz[i] = bsz[i];
  for (int j = 0; j < nsp; j++) {
    sz[bl + j] = out[j];
    sz[bl + nsp + j] = kk[j];
  }
  tpuir_val pos = -1;
  int64_t stride = 1;
  for (int j = nsp - 1; j >= 0; j--) {
    int64_t dims[TPU_MAX_DIMS];
    for (int i = 0; i < bl; i++) dims[i] = i;
    dims[bl] = bl + j;
    tpuir_val s = tpuir_broadcast_in_dim(b->g, st[j], nd, sz, dims);
    tpuir_val l = tpuir_broadcast_in_dim(b->g, len[j], nd, sz, dims);
    tpuir_val k = tpuir_iota(b->g, TPU_I64, nd, sz, bl + nsp + j);
    tpuir_val lim = tpulw__bin_c(b, TPUIR_SUB, tpulw__bin(b, TPUIR_ADD, s, l), 1);
    tpuir_val p = tpulw__bin(b, TPUIR_MIN, tpulw__bin(b, TPUIR_ADD, s, k), lim);
    p = tpulw__bin_c(b, TPUIR_MUL, p, (double)stride);
    pos = pos < 0 ? p : tpulw__bin(b, TPUIR_ADD, pos, p);
    LW_TRY(pos);
    stride *= in[j];
  }
  int64_t P = 1, K = 1;
  for (int j = 0; j < nsp; j++) {
    P *= out[j];
    K *= kk[j];
  }
  int64_t rs[TPU_MAX_DIMS];
  for (int i = 0; i < bl; i++) rs[i] = bsz[i];
  rs[bl] = P;
  rs[bl + 1] = K;
  return tpulw__reshape(b, pos, bl + 2, rs);
}

static int adapt_max_fn(tpulw__b *b) {
  const tpulw_tensor *in = tpulw__tensor_arg(b, "self");
  int rc;
  if ((rc = need_tpu(b, in))) return rc;
  int nsp = nsp_of(b);
  const tpu_view *v = &in->view;
  int dt = v->dtype;
  if ((rc = float_only(b, dt))) return rc;
  char s1[256];
  if (v->ndim != nsp + 1 && v->ndim != nsp + 2)
    return tpu_error(TPU_E_INVALID, "adaptive_max_pool%dd(): Expected %dD or %dD tensor, but "
                     "got: [%s]", nsp, nsp + 1, nsp + 2, fmt_sizes(s1, sizeof s1, v->ndim, v->sizes));
  int rank = v->ndim, lead = rank - nsp;
  for (int i = 1; i < rank; i++)
    if (v->sizes[i] == 0)
      return tpu_error(TPU_E_INVALID, "adaptive_max_pool%dd(): Expected input to have non-zero "
                       "size for non-batch dimensions, but input has sizes [%s] with dimension "
                       "%d being empty", nsp, fmt_sizes(s1, sizeof s1, rank, v->sizes), i);
  if (b->op == K_ADAPT_MAX_BW) {
    const tpulw_tensor *go = tpulw__tensor_arg(b, "grad_output"), *ix = tpulw__tensor_arg(b, "indices");
    if ((rc = need_tpu(b, go)) || (rc = need_tpu(b, ix))) return rc;
    if (go->view.ndim != rank || ix->view.ndim != rank)
      return tpu_error(TPU_E_INVALID, "adaptive_max_pool%dd_backward(): Expected %dD or %dD "
                       "grad_output", nsp, nsp + 1, nsp + 2);
    if (go->view.dtype != dt)
      return tpu_error(TPU_E_INVALID, "expected dtype %s for `gradOutput` but got dtype %s",
                       tpulw__torch_name(dt), tpulw__torch_name(go->view.dtype));
    tpuir_val r = flat_scatter(b, tpulw__tensor(b, go), tpulw__tensor(b, ix), rank, nsp, v->sizes,
                               tpulw__opmath(dt));
    return tpulw__result_as(b, r, dt);
  }
  int no;
  int64_t sc;
  const int64_t *os = tpulw__ints(b, "output_size", &no, &sc);
  if (no != nsp)
    return tpu_error(TPU_E_INVALID, "adaptive_max_pool%dd(): internal error: output_size.size() "
                     "must be %d", nsp, nsp);
  int64_t out[3], kk[3], ins[3];
  tpuir_val st[3], len[3];
  for (int j = 0; j < nsp; j++) {
    int64_t I = v->sizes[lead + j], O = os[j];
    if (O < 0) return tpu_error(TPU_E_INVALID, "adaptive_max_pool: negative output size");
    out[j] = O;
    ins[j] = I;
    int64_t K = 1;
    for (int64_t o = 0; o < O; o++) {
      int64_t s = o * I / O, e = ((o + 1) * I + O - 1) / O;
      if (e - s > K) K = e - s;
    }
    kk[j] = K;
    tpuir_val o = tpuir_iota(b->g, TPU_I64, 1, &out[j], 0);
    tpuir_val s = tpulw__bin_c(b, TPUIR_DIV, tpulw__bin_c(b, TPUIR_MUL, o, (double)I), (double)(O ? O : 1));
    tpuir_val e = tpulw__bin_c(b, TPUIR_DIV, tpulw__bin_c(b, TPUIR_ADD, tpulw__bin_c(b, TPUIR_MUL, o, (double)I),
                                                  (double)(I + O - 1)),
                           (double)(O ? O : 1));
    st[j] = s;
    len[j] = tpulw__bin(b, TPUIR_SUB, e, s);
    LW_TRY(len[j]);
  }
  int64_t osz[TPU_MAX_DIMS];
  for (int i = 0; i < lead; i++) osz[i] = v->sizes[i];
  for (int j = 0; j < nsp; j++) osz[lead + j] = out[j];
  int64_t P = 1;
  for (int j = 0; j < nsp; j++) P *= out[j];
  tpuir_val x = tpulw__tensor(b, in);
  if (P == 0 || v->sizes[0] == 0) {
    if ((rc = tpulw__result(b, tpulw__full(b, dt, rank, osz, 0))) < 0) return rc;
    return tpulw__result(b, tpulw__full(b, TPU_I64, rank, osz, 0));
  }
  tpuir_val pos = window_pos(b, 0, NULL, nsp, st, len, out, kk, ins);
  LW_TRY(pos);
  int64_t ps[TPU_MAX_DIMS];
  for (int i = 0; i < lead; i++) ps[i] = 1;
  ps[lead] = P;
  ps[lead + 1] = tpulw__info(b, pos).sizes[1];
  pos = tpulw__reshape(b, pos, lead + 2, ps);
  return window_max(b, x, pos, rank, nsp, out);
}

/* ---- fractional max pool ----------------------------------------------- */

static int frac_fn(tpulw__b *b) {
  const tpulw_tensor *in = tpulw__tensor_arg(b, "self");
  int rc;
  if ((rc = need_tpu(b, in))) return rc;
  int nsp = nsp_of(b);
  const tpu_view *v = &in->view;
  int dt = v->dtype;
  if ((rc = float_only(b, dt))) return rc;
  char s1[256];
  int nk, no;
  int64_t sc[2];
  const int64_t *ks = tpulw__ints(b, "kernel_size", &nk, &sc[0]);
  const int64_t *os = tpulw__ints(b, "output_size", &no, &sc[1]);
  int rank = v->ndim, lead = rank - nsp;
  if (nk != nsp || no != nsp)
    return tpu_error(TPU_E_INVALID, "fractional_max_pool%dd: kernel_size and output_size must "
                     "have %d elements", nsp, nsp);
  if (rank != nsp + 1 && rank != nsp + 2)
    return tpu_error(TPU_E_INVALID, "fractional_max_pool%dd(): Expected %dD or %dD tensor, but "
                     "got: [%s]", nsp, nsp + 1, nsp + 2, fmt_sizes(s1, sizeof s1, rank, v->sizes));
  for (int i = 1; i < rank; i++)
    if (v->sizes[i] <= 0)
      return tpu_error(TPU_E_INVALID, "fractional_max_pool%dd(): Expected input to have non-zero "
                       "size for non-batch dimensions, but got [%s] with dimension %d being empty.",
                       nsp, fmt_sizes(s1, sizeof s1, rank, v->sizes), i);
  static const char *const dn[3] = {"time", "height", "width"};
  for (int j = 0; j < nsp; j++) {
    int64_t I = v->sizes[lead + j];
    const char *name = dn[3 - nsp + j];
    if (ks[j] <= 0 || os[j] <= 0)
      return tpu_error(TPU_E_INVALID, "fractional_max_pool%dd: kernel_size and output_size must "
                       "be greater than zero", nsp);
    if (os[j] + ks[j] - 1 > I)
      return tpu_error(TPU_E_INVALID, "fractional_max_pool%dd_out(): pool %s %lld too large "
                       "relative to input %s %lld", nsp, name, (long long)ks[j], name, (long long)I);
  }
  if (b->op == K_FRAC_BW) {
    const tpulw_tensor *go = tpulw__tensor_arg(b, "grad_output"), *ix = tpulw__tensor_arg(b, "indices");
    if ((rc = need_tpu(b, go)) || (rc = need_tpu(b, ix))) return rc;
    int ok = go->view.ndim == rank && ix->view.ndim == rank;
    for (int i = 0; ok && i < rank; i++) {
      int64_t want = i < lead ? v->sizes[i] : os[i - lead];
      ok = go->view.sizes[i] == want && ix->view.sizes[i] == want;
    }
    if (!ok)
      return tpu_error(TPU_E_INVALID, "fractional_max_pool%dd_backward(): gradOutput / indices "
                       "do not have the pooled output's shape", nsp);
    tpuir_val r = flat_scatter(b, tpulw__tensor(b, go), tpulw__tensor(b, ix), rank, nsp, v->sizes,
                               tpulw__opmath(dt));
    return tpulw__result_as(b, r, dt);
  }
  const tpulw_tensor *rs = tpulw__tensor_arg(b, "random_samples");
  if ((rc = need_tpu(b, rs))) return rc;
  int64_t N = lead == 2 ? v->sizes[0] : 1, C = v->sizes[lead - 1];
  const tpu_view *rv = &rs->view;
  if (rv->ndim != 3 || rv->sizes[0] < N || rv->sizes[1] < C || rv->sizes[2] != nsp)
    return tpu_error(TPU_E_INVALID, "fractional_max_pool%dd(): random_samples must have shape "
                     "[N, C, %d]", nsp, nsp);
  if (rv->dtype != dt)
    return tpu_error(TPU_E_INVALID, "expected scalar type %s but found %s", tpulw__torch_name(dt),
                     tpulw__torch_name(rv->dtype));
  int64_t osz[TPU_MAX_DIMS];
  for (int i = 0; i < lead; i++) osz[i] = v->sizes[i];
  for (int j = 0; j < nsp; j++) osz[lead + j] = os[j];
  if (N == 0) {
    if ((rc = tpulw__result(b, tpulw__full(b, dt, rank, osz, 0))) < 0) return rc;
    return tpulw__result(b, tpulw__full(b, TPU_I64, rank, osz, 0));
  }
  /* window starts [N, C, out_j] from the samples, in the sample dtype:
   * seq[i] = int((i + u) * alpha) - int(u * alpha), seq[out-1] = in - k;
   * 2d: sample 0 is for W, 1 for H; 3d: 0 T, 1 H, 2 W */
  int wdt = dt == TPU_F64 ? TPU_F64 : TPU_F32;
  tpuir_val r = tpulw__convert(b, tpulw__tensor(b, rs), wdt);
  int64_t z3[3] = {0, 0, 0}, one3[3] = {1, 1, 1};
  tpuir_val st[3], len[3];
  int64_t out[3], kk[3], ins[3], bsz[2] = {N, C};
  for (int j = 0; j < nsp; j++) {
    int sidx = nsp == 2 ? 1 - j : j;
    int64_t I = v->sizes[lead + j], O = os[j], K = ks[j];
    out[j] = O;
    kk[j] = K;
    ins[j] = I;
    int64_t lo[3] = {0, 0, sidx}, hi[3] = {N, C, sidx + 1};
    tpuir_val u = tpuir_slice(b->g, r, lo, hi, one3);
    (void)z3;
    int64_t s3[3] = {N, C, O}, d3[3] = {0, 1, 2};
    u = tpuir_broadcast_in_dim(b->g, u, 3, s3, d3);
    tpuir_val seq;
    tpuir_val i = tpuir_iota(b->g, TPU_I64, 3, s3, 2);
    if (O > 1) {
      double alpha = (double)(I - K) / (double)(O - 1);
      if (wdt == TPU_F32) alpha = (float)((float)(I - K) / (float)(O - 1));
      tpuir_val fi = tpuir_iota(b->g, wdt, 3, s3, 2);
      tpuir_val a = tpulw__convert(b, tpulw__bin_c(b, TPUIR_MUL, tpulw__bin(b, TPUIR_ADD, fi, u), alpha), TPU_I64);
      tpuir_val c = tpulw__convert(b, tpulw__bin_c(b, TPUIR_MUL, u, alpha), TPU_I64);
      seq = tpulw__bin(b, TPUIR_SUB, a, c);
      seq = tpulw__sel(b, tpulw__bin_c(b, TPUIR_EQ, i, (double)(O - 1)), tpulw__const(b, TPU_I64, (double)(I - K)), seq);
    } else {
      seq = tpulw__full(b, TPU_I64, 3, s3, (double)(I - K));
    }
    st[j] = seq;
    len[j] = tpulw__full(b, TPU_I64, 3, s3, (double)K);
    LW_TRY(len[j]);
  }
  tpuir_val pos = window_pos(b, 2, bsz, nsp, st, len, out, kk, ins);
  LW_TRY(pos);
  if (lead == 1) {
    tpulw__shape p = tpulw__info(b, pos);
    /* unbatched: [1, C, P, K] -> [C, P, K] */
    int64_t s3[3] = {C, p.sizes[2], p.sizes[3]};
    pos = tpulw__reshape(b, pos, 3, s3);
  }
  return window_max(b, tpulw__tensor(b, in), pos, rank, nsp, out);
}

/* ---- channel_shuffle ----------------------------------------------------- */

static int shuffle_fn(tpulw__b *b) {
  const tpulw_tensor *in = tpulw__tensor_arg(b, "self");
  int rc;
  if ((rc = need_tpu(b, in))) return rc;
  const tpu_view *v = &in->view;
  char s1[256];
  int64_t g = tpulw__int(b, "groups", 1);
  if (v->ndim <= 2)
    return tpu_error(TPU_E_INVALID, "channel_shuffle expects input to have at least 3 "
                     "dimensions, but got input with sizes [%s]",
                     fmt_sizes(s1, sizeof s1, v->ndim, v->sizes));
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

/* ---- rrelu_with_noise ---------------------------------------------------- */

static int rrelu_fn(tpulw__b *b) {
  const tpulw_tensor *in = tpulw__tensor_arg(b, "self"), *nz = tpulw__tensor_arg(b, "noise");
  int rc;
  if ((rc = need_tpu(b, in))) return rc;
  int dt = in->view.dtype;
  if ((rc = float_only(b, dt))) return rc;
  double lo = tpulw__float(b, "lower", 1.0 / 8), up = tpulw__float(b, "upper", 1.0 / 3);
  int training = (int)tpulw__int(b, "training", 0);
  int cdt = tpulw__opmath(dt);
  tpuir_val x = tpulw__convert(b, tpulw__tensor(b, in), cdt);
  tpulw__shape s = tpulw__info(b, x);
  if (!training) {
    tpuir_val r = tpulw__sel(b, tpulw__bin_c(b, TPUIR_GE, x, 0), x, tpulw__bin_c(b, TPUIR_MUL, x, (lo + up) / 2));
    if (nz) tpulw__not_out(b, "noise");
    return tpulw__result_as(b, r, dt);
  }
  if ((rc = need_tpu(b, nz))) return rc;
  if (!(lo <= up))
    return tpu_error(TPU_E_INVALID, "Lower bound should be less than or equal to the upper bound");
  int ndt = nz->view.dtype;
  int same = nz->view.ndim == s.ndim;
  for (int i = 0; same && i < s.ndim; i++) same = nz->view.sizes[i] == s.sizes[i];
  if (!same) return tpu_error(TPU_E_UNSUPPORTED, "rrelu_with_noise: noise shape");
  int wdt = dt == TPU_F64 ? TPU_F64 : TPU_F32;
  tpuir_val u = tpulw__rng(b, TPUIR_RNG_UNIFORM, wdt, s.ndim, s.sizes);
  LW_TRY(u);
  u = tpulw__convert(b, tpulw__bin_c(b, TPUIR_ADD, tpulw__bin_c(b, TPUIR_MUL, u, up - lo), lo), cdt);
  tpuir_val neg = tpulw__bin_c(b, TPUIR_LE, x, 0);
  tpuir_val noise = tpulw__sel(b, neg, u, tpulw__const(b, cdt, 1));
  tpuir_val r = tpulw__bin(b, TPUIR_MUL, x, noise);
  if ((rc = tpulw__result_as(b, r, dt)) < 0) return rc;
  return tpulw__result_to(b, tpulw__convert(b, noise, ndt), "noise");
}

/* ---- pdist / cdist ------------------------------------------------------- */

/* p-norm of d along its last dim (dim removed), in d's dtype. */
static tpuir_val pnorm_last(tpulw__b *b, tpuir_val d, double p) {
  tpulw__shape s = tpulw__info(b, d);
  uint32_t m = 1u << (s.ndim - 1);
  tpuir_val a = tpulw__un(b, TPUIR_ABS, d);
  if (p == 0) return tpulw__reduce_dims(b, TPUIR_RED_SUM, tpulw__convert(b, tpulw__bin_c(b, TPUIR_NE, d, 0), s.dtype), m, 0);
  if (p == 1) return tpulw__reduce_dims(b, TPUIR_RED_SUM, a, m, 0);
  if (p == 2) return tpulw__un(b, TPUIR_SQRT, tpulw__reduce_dims(b, TPUIR_RED_SUM, tpulw__bin(b, TPUIR_MUL, d, d), m, 0));
  if (isinf(p)) return tpulw__reduce_dims(b, TPUIR_RED_MAX, a, m, 0);
  tpuir_val sp = tpulw__reduce_dims(b, TPUIR_RED_SUM, tpulw__bin_c(b, TPUIR_POW, a, p), m, 0);
  return tpulw__bin_c(b, TPUIR_POW, sp, 1.0 / p);
}

/* d(dist)/d(diff) for the p-norm (PyTorch's pdist/cdist backward rules),
 * dist broadcast against d. */
static tpuir_val pnorm_grad(tpulw__b *b, tpuir_val d, tpuir_val dist, double p) {
  tpulw__shape s = tpulw__info(b, d);
  tpuir_val zero = tpulw__const(b, s.dtype, 0);
  tpuir_val sg = tpulw__un(b, TPUIR_SIGN, d);
  tpuir_val dz = tpulw__bin_c(b, TPUIR_EQ, dist, 0);
  if (p == 0) return tpulw__full(b, s.dtype, s.ndim, s.sizes, 0);
  if (p == 1) return sg;
  if (p == 2) return tpulw__sel(b, dz, zero, tpulw__bin(b, TPUIR_DIV, d, dist));
  if (isinf(p))
    return tpulw__bin(b, TPUIR_MUL, sg, tpulw__convert(b, tpulw__bin(b, TPUIR_EQ, tpulw__un(b, TPUIR_ABS, d), tpulw__bcast(b, dist, s.ndim, s.sizes)), s.dtype));
  tpuir_val a = tpulw__un(b, TPUIR_ABS, d);
  tpuir_val r;
  if (p < 2) {
    r = tpulw__bin(b, TPUIR_DIV, tpulw__bin(b, TPUIR_MUL, sg, tpulw__bin_c(b, TPUIR_POW, a, p - 1)),
               tpulw__bin_c(b, TPUIR_POW, dist, p - 1));
    if (p < 1) r = tpulw__sel(b, tpulw__bin_c(b, TPUIR_EQ, d, 0), zero, r);
  } else {
    r = tpulw__bin(b, TPUIR_DIV, tpulw__bin(b, TPUIR_MUL, d, tpulw__bin_c(b, TPUIR_POW, a, p - 2)),
               tpulw__bin_c(b, TPUIR_POW, dist, p - 1));
  }
  return tpulw__sel(b, dz, zero, r);
}

/* pair indices (i, j), i < j, of the k-th pdist entry (row-major upper
 * triangle of n x n), as PyTorch computes them */
static int pdist_pairs(tpulw__b *b, int64_t n, int64_t P, tpuir_val *pi, tpuir_val *pj) {
  double n2 = (double)n - .5;
  tpuir_val k = tpuir_iota(b->g, TPU_F64, 1, &P, 0);
  tpuir_val t = tpulw__un(b, TPUIR_SQRT, tpulw__bin(b, TPUIR_SUB, tpulw__const(b, TPU_F64, n2 * n2 - 1),
                                            tpulw__bin_c(b, TPUIR_MUL, k, 2)));
  tpuir_val i = tpulw__convert(b, tpulw__bin(b, TPUIR_SUB, tpulw__const(b, TPU_F64, n2), t), TPU_I64);
  tpuir_val ki = tpulw__convert(b, k, TPU_I64);
  /* j = k - n*i + i*(i+1)/2 + i + 1 */
  tpuir_val j = tpulw__bin(b, TPUIR_SUB, ki, tpulw__bin_c(b, TPUIR_MUL, i, (double)n));
  j = tpulw__bin(b, TPUIR_ADD, j, tpulw__bin_c(b, TPUIR_DIV, tpulw__bin(b, TPUIR_MUL, i, tpulw__bin_c(b, TPUIR_ADD, i, 1)), 2));
  j = tpulw__bin_c(b, TPUIR_ADD, tpulw__bin(b, TPUIR_ADD, j, i), 1);
  *pi = i;
  *pj = j;
  return j < 0 ? j : TPU_OK;
}

static int pdist_fn(tpulw__b *b) {
  int bw = b->op == K_PDIST_BW;
  const tpulw_tensor *in = tpulw__tensor_arg(b, "self");
  int rc;
  if ((rc = need_tpu(b, in))) return rc;
  const tpu_view *v = &in->view;
  double p = tpulw__float(b, "p", 2);
  if (v->ndim != 2)
    return tpu_error(TPU_E_INVALID, "pdist only supports 2D tensors, got: %dD", v->ndim);
  if (!tpu_dtype_is_float(v->dtype))
    return tpu_error(TPU_E_INVALID, "pdist only supports floating-point dtypes");
  if (!(p >= 0)) return tpu_error(TPU_E_INVALID, "pdist only supports non-negative p values");
  int dt = v->dtype, cdt = tpulw__opmath(dt);
  int64_t n = v->sizes[0], m = v->sizes[1], P = n * (n - 1) / 2;
  if (!bw && (P == 0 || m == 0)) return tpulw__result(b, tpulw__full(b, dt, 1, &P, 0));
  if (bw && (P == 0 || m == 0)) return tpulw__result(b, tpulw__full(b, dt, 2, v->sizes, 0));
  tpuir_val i, j;
  if ((rc = pdist_pairs(b, n, P, &i, &j)) < 0) return rc;
  tpuir_val x = tpulw__convert(b, tpulw__tensor(b, in), cdt);
  tpuir_val d = tpulw__bin(b, TPUIR_SUB, tpuir_index_select(b->g, x, 0, i), tpuir_index_select(b->g, x, 0, j));
  if (!bw) return tpulw__result_as(b, pnorm_last(b, d, p), dt);
  const tpulw_tensor *gt = tpulw__tensor_arg(b, "grad"), *pt = tpulw__tensor_arg(b, "pdist");
  if ((rc = need_tpu(b, gt)) || (rc = need_tpu(b, pt))) return rc;
  if (gt->view.ndim != 1 || gt->view.sizes[0] != P || pt->view.ndim != 1 || pt->view.sizes[0] != P)
    return tpu_error(TPU_E_INVALID, "_pdist_backward: grad and pdist must have %lld elements", (long long)P);
  int64_t s2[2] = {P, 1};
  tpuir_val dist = tpulw__reshape(b, tpulw__convert(b, tpulw__tensor(b, pt), cdt), 2, s2);
  tpuir_val g = tpulw__reshape(b, tpulw__convert(b, tpulw__tensor(b, gt), cdt), 2, s2);
  tpuir_val gd = tpulw__bin(b, TPUIR_MUL, pnorm_grad(b, d, dist, p), g);
  tpuir_val r = tpuir_index_add(b->g, tpulw__full(b, cdt, 2, v->sizes, 0), 0, i, gd);
  r = tpuir_index_add(b->g, r, 0, j, tpulw__un(b, TPUIR_NEG, gd));
  return tpulw__result_as(b, r, dt);
}

static int cdist_fn(tpulw__b *b) {
  int bw = b->op == K_CDIST_BW;
  const tpulw_tensor *t1 = tpulw__tensor_arg(b, "x1"), *t2 = tpulw__tensor_arg(b, "x2");
  int rc;
  if ((rc = need_tpu(b, t1)) || (rc = need_tpu(b, t2))) return rc;
  const tpu_view *v1 = &t1->view, *v2 = &t2->view;
  double p = tpulw__float(b, "p", 2);
  if (!tpu_dtype_is_float(v1->dtype))
    return tpu_error(TPU_E_INVALID, "cdist only supports floating-point dtypes, X1 got: %s",
                     tpulw__torch_name(v1->dtype));
  if (!tpu_dtype_is_float(v2->dtype))
    return tpu_error(TPU_E_INVALID, "cdist only supports floating-point dtypes, X2 got: %s",
                     tpulw__torch_name(v2->dtype));
  if (v1->ndim < 2)
    return tpu_error(TPU_E_INVALID, "cdist only supports at least 2D tensors, X1 got: %dD", v1->ndim);
  if (v2->ndim < 2)
    return tpu_error(TPU_E_INVALID, "cdist only supports at least 2D tensors, X2 got: %dD", v2->ndim);
  if (v1->sizes[v1->ndim - 1] != v2->sizes[v2->ndim - 1])
    return tpu_error(TPU_E_INVALID, "X1 and X2 must have the same number of columns. X1: %lld X2: %lld",
                     (long long)v1->sizes[v1->ndim - 1], (long long)v2->sizes[v2->ndim - 1]);
  if (!(p >= 0)) return tpu_error(TPU_E_INVALID, "cdist only supports non-negative p values");
  if (v1->dtype != v2->dtype)
    return tpu_error(TPU_E_INVALID, "X1 and X2 must have the same dtype, but got %s and %s",
                     tpulw__torch_name(v1->dtype), tpulw__torch_name(v2->dtype));
  int dt = v1->dtype, cdt = tpulw__opmath(dt);
  int nb1 = v1->ndim - 2, nb2 = v2->ndim - 2;
  int nb = nb1 > nb2 ? nb1 : nb2;
  if (nb + 3 > TPU_MAX_DIMS) return tpu_error(TPU_E_UNSUPPORTED, "cdist: rank");
  int64_t bs[TPU_MAX_DIMS];
  for (int i = 0; i < nb; i++) {
    int i1 = i - (nb - nb1), i2 = i - (nb - nb2);
    int64_t a = i1 >= 0 ? v1->sizes[i1] : 1, c = i2 >= 0 ? v2->sizes[i2] : 1;
    if (a != c && a != 1 && c != 1)
      return tpu_error(TPU_E_INVALID, "The size of tensor a (%lld) must match the size of tensor b "
                       "(%lld) at non-singleton dimension %d", (long long)a, (long long)c, i);
    bs[i] = a == 1 ? c : a;
  }
  int64_t r1 = v1->sizes[v1->ndim - 2], r2 = v2->sizes[v2->ndim - 2], m = v1->sizes[v1->ndim - 1];
  int64_t s4[TPU_MAX_DIMS];
  for (int i = 0; i < nb; i++) s4[i] = bs[i];
  s4[nb] = r1;
  s4[nb + 1] = r2;
  s4[nb + 2] = m;
  int64_t dims1[TPU_MAX_DIMS], dims2[TPU_MAX_DIMS];
  tpuir_val x1 = tpulw__convert(b, tpulw__tensor(b, t1), cdt), x2 = tpulw__convert(b, tpulw__tensor(b, t2), cdt);
  /* x1 [b1.., r1, m] -> [b.., r1, 1, m] -> [b.., r1, r2, m] */
  int64_t e1[TPU_MAX_DIMS], e2[TPU_MAX_DIMS];
  for (int i = 0; i < nb; i++) {
    int i1 = i - (nb - nb1), i2 = i - (nb - nb2);
    e1[i] = i1 >= 0 ? v1->sizes[i1] : 1;
    e2[i] = i2 >= 0 ? v2->sizes[i2] : 1;
    dims1[i] = dims2[i] = i;
  }
  e1[nb] = r1; e1[nb + 1] = 1; e1[nb + 2] = m;
  e2[nb] = 1; e2[nb + 1] = r2; e2[nb + 2] = m;
  for (int i = nb; i < nb + 3; i++) dims1[i] = dims2[i] = i;
  tpuir_val a1 = tpuir_broadcast_in_dim(b->g, tpulw__reshape(b, x1, nb + 3, e1), nb + 3, s4, dims1);
  tpuir_val a2 = tpuir_broadcast_in_dim(b->g, tpulw__reshape(b, x2, nb + 3, e2), nb + 3, s4, dims2);
  tpuir_val d = tpulw__bin(b, TPUIR_SUB, a1, a2);
  LW_TRY(d);
  if (!bw) {
    if (m == 0) return tpulw__result(b, tpulw__full(b, dt, nb + 2, s4, 0));
    return tpulw__result_as(b, pnorm_last(b, d, p), dt);
  }
  const tpulw_tensor *gt = tpulw__tensor_arg(b, "grad"), *ct = tpulw__tensor_arg(b, "cdist");
  if ((rc = need_tpu(b, gt)) || (rc = need_tpu(b, ct))) return rc;
  int64_t o3[TPU_MAX_DIMS];
  for (int i = 0; i < nb + 2; i++) o3[i] = s4[i];
  o3[nb + 2] = 1;
  int64_t gn = 1, want = 1;
  for (int i = 0; i < gt->view.ndim; i++) gn *= gt->view.sizes[i];
  for (int i = 0; i < nb + 2; i++) want *= s4[i];
  int64_t cn = 1;
  for (int i = 0; i < ct->view.ndim; i++) cn *= ct->view.sizes[i];
  if (gn != want || cn != want)
    return tpu_error(TPU_E_INVALID, "_cdist_backward: grad / cdist do not have the result's shape");
  int64_t gs[TPU_MAX_DIMS];
  for (int i = 0; i < nb + 1; i++) gs[i] = s4[i];
  gs[nb + 1] = m;
  if (m == 0 || want == 0) return tpulw__result(b, tpulw__full(b, dt, nb + 2, gs, 0));
  tpuir_val dist = tpulw__reshape(b, tpulw__convert(b, tpulw__tensor(b, ct), cdt), nb + 3, o3);
  tpuir_val g = tpulw__reshape(b, tpulw__convert(b, tpulw__tensor(b, gt), cdt), nb + 3, o3);
  tpuir_val gd = tpulw__bin(b, TPUIR_MUL, pnorm_grad(b, d, dist, p), g);
  return tpulw__result_as(b, tpulw__reduce_dims(b, TPUIR_RED_SUM, gd, 1u << (nb + 1), 0), dt);
}

/* ---- multi_margin_loss --------------------------------------------------- */

static int margin_shape(const tpulw__b *b, const tpu_view *v, int64_t *nframe, int64_t *dim) {
  char s1[256];
  int nd = v->ndim;
  if (!((nd == 2 && v->sizes[1] != 0) || (nd == 1 && v->sizes[0] != 0) || nd == 0))
    return tpu_error(TPU_E_INVALID, "Expected non-empty vector or matrix with optional 0-dim "
                     "batch size, but got: [%s]", fmt_sizes(s1, sizeof s1, nd, v->sizes));
  *nframe = nd <= 1 ? 1 : v->sizes[0];
  *dim = nd == 0 ? 1 : v->sizes[nd - 1];
  (void)b;
  return TPU_OK;
}

static int multi_margin_fn(tpulw__b *b) {
  int bw = b->op == K_MULTI_MARGIN_BW;
  const tpulw_tensor *in = tpulw__tensor_arg(b, "self"), *tg = tpulw__tensor_arg(b, "target");
  const tpulw_tensor *wt = tpulw__tensor_arg(b, "weight");
  int rc;
  if ((rc = need_tpu(b, in)) || (rc = need_tpu(b, tg))) return rc;
  if (wt && (rc = need_tpu(b, wt))) return rc;
  const tpu_view *v = &in->view;
  int dt = v->dtype;
  if ((rc = float_only(b, dt))) return rc;
  tpulw__scalar ps, ms;
  double p = tpulw__scalar_arg(b, "p", &ps) ? ps.f : 1, margin = tpulw__scalar_arg(b, "margin", &ms) ? ms.f : 1;
  int red = (int)tpulw__int(b, "reduction", RED_MEAN);
  char s1[256];
  if (p != 1 && p != 2) return tpu_error(TPU_E_INVALID, "only p == 1 and p == 2 supported");
  int64_t nframe = 0, dim = 0;
  if ((rc = margin_shape(b, v, &nframe, &dim))) return rc;
  const tpu_view *tv = &tg->view;
  int64_t tn = 1;
  for (int i = 0; i < tv->ndim; i++) tn *= tv->sizes[i];
  if (!(tv->ndim <= 1 && tn == nframe)) {
    char s3[256];
    return tpu_error(TPU_E_INVALID, "multi_margin_loss: target tensor should be 1-D with size equal "
                     "to the number of input samples (batch size). Expected target size [%lld], but "
                     "got [%s]. Input has shape [%s].", (long long)nframe,
                     fmt_sizes(s1, sizeof s1, tv->ndim, tv->sizes),
                     fmt_sizes(s3, sizeof s3, v->ndim, v->sizes));
  }
  if (wt) {
    int64_t wn = 1;
    for (int i = 0; i < wt->view.ndim; i++) wn *= wt->view.sizes[i];
    if (!(wt->view.ndim <= 1 && wn == dim))
      return tpu_error(TPU_E_INVALID, "inconsistent weight size, expected %lld but got [%s]",
                       (long long)dim, fmt_sizes(s1, sizeof s1, wt->view.ndim, wt->view.sizes));
  }
  if (tv->dtype != TPU_I64)
    return tpu_error(TPU_E_INVALID, "expected scalar type Long but found %s", tpulw__torch_name(tv->dtype));
  int cdt = tpulw__opmath(dt);
  int64_t s2[2] = {nframe, dim}, s1n[2] = {nframe, 1};
  tpuir_val x = tpulw__reshape(b, tpulw__convert(b, tpulw__tensor(b, in), cdt), 2, s2);
  tpuir_val y = tpulw__reshape(b, tpulw__convert(b, tpulw__tensor(b, tg), TPU_I64), 2, s1n);
  tpuir_val xy = tpuir_gather(b->g, x, 1, y);
  tpuir_val notyv = tpulw__bin(b, TPUIR_NE, tpuir_iota(b->g, TPU_I64, 2, s2, 1), y);
  tpuir_val z = tpulw__bin(b, TPUIR_ADD, tpulw__bin(b, TPUIR_SUB, tpulw__const(b, cdt, margin), xy), x);
  tpuir_val pos = tpulw__bin(b, TPUIR_AND, tpulw__bin_c(b, TPUIR_GT, z, 0), notyv);
  tpuir_val zero = tpulw__const(b, cdt, 0);
  tpuir_val wy = -1;
  if (wt) {
    int64_t wd = dim;
    tpuir_val w = tpulw__reshape(b, tpulw__convert(b, tpulw__tensor(b, wt), cdt), 1, &wd);
    wy = tpulw__reshape(b, tpuir_index_select(b->g, w, 0, tpulw__reshape(b, y, 1, &nframe)), 2, s1n);
  }
  b->sync = 1;
  b->err_remap = LW_ERR_RUNTIME;
  int64_t outn = nframe;
  int out_nd = (red == RED_NONE && tv->ndim > 0) ? 1 : 0;
  if (!bw) {
    tpuir_val h = p == 1 ? z : tpulw__bin(b, TPUIR_MUL, z, z);
    if (wt) h = tpulw__bin(b, TPUIR_MUL, h, wy);
    h = tpulw__sel(b, pos, h, zero);
    tpuir_val l = tpulw__bin_c(b, TPUIR_DIV, tpulw__reduce_dims(b, TPUIR_RED_SUM, h, 2u, 0), (double)dim);
    if (red == RED_NONE) return tpulw__result_as(b, tpulw__reshape(b, l, out_nd, &outn), dt);
    tpuir_val sum = tpulw__reduce_dims(b, TPUIR_RED_SUM, l, 1u, 0);
    if (red == RED_MEAN) sum = tpulw__bin_c(b, TPUIR_DIV, sum, (double)nframe);
    return tpulw__result_as(b, sum, dt);
  }
  const tpulw_tensor *go = tpulw__tensor_arg(b, "grad_output");
  if ((rc = need_tpu(b, go))) return rc;
  tpuir_val g = tpulw__convert(b, tpulw__tensor(b, go), cdt);
  double scale = red == RED_MEAN ? 1.0 / ((double)nframe * (double)dim) : 1.0 / (double)dim;
  if (red == RED_NONE) {
    int64_t gn = 1;
    for (int i = 0; i < go->view.ndim; i++) gn *= go->view.sizes[i];
    if (gn != nframe) return tpu_error(TPU_E_INVALID, "multi_margin_loss_backward: grad_output size");
    g = tpulw__reshape(b, g, 2, s1n);
  } else {
    g = tpulw__reshape(b, g, 0, NULL);
  }
  tpuir_val h = p == 1 ? tpulw__full(b, cdt, 2, s2, 1) : tpulw__bin_c(b, TPUIR_MUL, z, 2);
  if (wt) h = tpulw__bin(b, TPUIR_MUL, h, wy);
  h = tpulw__sel(b, pos, tpulw__bin_c(b, TPUIR_MUL, h, scale), zero);
  tpuir_val sumh = tpulw__reduce_dims(b, TPUIR_RED_SUM, h, 2u, 1);
  tpuir_val gi = tpulw__sel(b, notyv, h, tpulw__un(b, TPUIR_NEG, sumh));
  gi = tpulw__bin(b, TPUIR_MUL, gi, g);
  return tpulw__result_as(b, tpulw__reshape(b, gi, v->ndim, v->sizes), dt);
}

/* ---- multilabel_margin_loss ---------------------------------------------- */

static int mlml_fn(tpulw__b *b) {
  int bw = b->op == K_MLML_BW;
  const tpulw_tensor *in = tpulw__tensor_arg(b, "self"), *tg = tpulw__tensor_arg(b, "target");
  int rc;
  if ((rc = need_tpu(b, in)) || (rc = need_tpu(b, tg))) return rc;
  const tpu_view *v = &in->view, *tv = &tg->view;
  int dt = v->dtype;
  if ((rc = float_only(b, dt))) return rc;
  int red = (int)tpulw__int(b, "reduction", RED_MEAN);
  char s1[256], s2c[256];
  int64_t nframe = 0, dim = 0;
  if ((rc = margin_shape(b, v, &nframe, &dim))) return rc;
  int64_t tn = 1;
  for (int i = 0; i < tv->ndim; i++) tn *= tv->sizes[i];
  int okt = v->ndim <= 1 ? (tv->ndim <= 1 && tn == dim)
                         : (tv->ndim == 2 && tv->sizes[0] == nframe && tv->sizes[1] == dim);
  if (!okt)
    return tpu_error(TPU_E_INVALID, "inconsistent target size: [%s] for input of size: [%s]",
                     fmt_sizes(s1, sizeof s1, tv->ndim, tv->sizes),
                     fmt_sizes(s2c, sizeof s2c, v->ndim, v->sizes));
  if (tv->dtype != TPU_I64)
    return tpu_error(TPU_E_INVALID, "expected scalar type Long but found %s", tpulw__torch_name(tv->dtype));
  int cdt = tpulw__opmath(dt);
  int64_t s2[2] = {nframe, dim}, s3[3] = {nframe, dim, dim};
  tpuir_val x = tpulw__reshape(b, tpulw__convert(b, tpulw__tensor(b, in), cdt), 2, s2);
  tpuir_val t = tpulw__reshape(b, tpulw__tensor(b, tg), 2, s2);
  /* valid[n,k] = k < first position of a negative target */
  tpuir_val kio = tpuir_iota(b->g, TPU_I64, 2, s2, 1);
  tpuir_val firstneg = tpulw__reduce_dims(b, TPUIR_RED_MIN,
                                      tpulw__sel(b, tpulw__bin_c(b, TPUIR_LT, t, 0), kio, tpulw__const(b, TPU_I64, (double)dim)),
                                      2u, 1);
  tpuir_val valid = tpulw__bin(b, TPUIR_LT, kio, firstneg);
  tpuir_val tc = tpulw__sel(b, valid, t, tpulw__const(b, TPU_I64, 0));
  /* is_target[n,i] = any_k valid[n,k] && t[n,k] == i  ([n,k,i]) */
  int64_t d01[2] = {0, 1};
  tpuir_val t3 = tpuir_broadcast_in_dim(b->g, tc, 3, s3, d01);
  tpuir_val v3 = tpuir_broadcast_in_dim(b->g, valid, 3, s3, d01);
  tpuir_val i3 = tpuir_iota(b->g, TPU_I64, 3, s3, 2);
  tpuir_val hit = tpulw__bin(b, TPUIR_AND, v3, tpulw__bin(b, TPUIR_EQ, t3, i3));
  tpuir_val ist = tpulw__reduce_dims(b, TPUIR_RED_OR, hit, 2u, 0); /* [n, i] bool */
  LW_TRY(ist);
  tpuir_val xt = tpuir_gather(b->g, x, 1, tc); /* [n, k] */
  b->sync = 1;
  b->err_remap = LW_ERR_RUNTIME;
  int64_t d02[2] = {0, 2};
  tpuir_val xt3 = tpuir_broadcast_in_dim(b->g, xt, 3, s3, d01);
  tpuir_val x3 = tpuir_broadcast_in_dim(b->g, x, 3, s3, d02);
  tpuir_val nt3 = tpuir_broadcast_in_dim(b->g, tpulw__un(b, TPUIR_NOT, ist), 3, s3, d02);
  tpuir_val z = tpulw__bin(b, TPUIR_ADD, tpulw__bin(b, TPUIR_SUB, tpulw__const(b, cdt, 1), xt3), x3);
  tpuir_val act = tpulw__bin(b, TPUIR_AND, tpulw__bin(b, TPUIR_AND, v3, nt3), tpulw__bin_c(b, TPUIR_GT, z, 0));
  tpuir_val zero = tpulw__const(b, cdt, 0);
  int64_t outn = nframe;
  if (!bw) {
    tpuir_val l = tpulw__reduce_dims(b, TPUIR_RED_SUM, tpulw__sel(b, act, z, zero), 6u, 0);
    l = tpulw__bin_c(b, TPUIR_DIV, l, (double)dim);
    tpuir_val out;
    if (red == RED_NONE) {
      out = v->ndim <= 1 ? tpulw__reshape(b, l, 0, NULL) : tpulw__reshape(b, l, 1, &outn);
    } else {
      out = tpulw__reduce_dims(b, TPUIR_RED_SUM, l, 1u, 0);
      if (red == RED_MEAN) out = tpulw__bin_c(b, TPUIR_DIV, out, (double)nframe);
    }
    if ((rc = tpulw__result_as(b, out, dt)) < 0) return rc;
    return tpulw__result_as(b, tpulw__reshape(b, tpulw__convert(b, ist, dt), tv->ndim, tv->sizes), dt);
  }
  const tpulw_tensor *go = tpulw__tensor_arg(b, "grad_output");
  if ((rc = need_tpu(b, go))) return rc;
  tpuir_val g = tpulw__convert(b, tpulw__tensor(b, go), cdt);
  int64_t s1n[2] = {nframe, 1};
  if (red == RED_NONE && v->ndim == 2) g = tpulw__reshape(b, g, 2, s1n);
  else g = tpulw__reshape(b, g, 0, NULL);
  double scale = red == RED_MEAN ? 1.0 / ((double)nframe * (double)dim) : 1.0 / (double)dim;
  tpuir_val a = tpulw__convert(b, act, cdt);
  tpuir_val plus = tpulw__reduce_dims(b, TPUIR_RED_SUM, a, 2u, 0);  /* [n, i] */
  tpuir_val minus = tpulw__reduce_dims(b, TPUIR_RED_SUM, a, 4u, 0); /* [n, k] */
  tpuir_val gi = tpuir_scatter_add(b->g, plus, 1, tc, tpulw__un(b, TPUIR_NEG, minus));
  gi = tpulw__bin(b, TPUIR_MUL, tpulw__bin_c(b, TPUIR_MUL, gi, scale), g);
  return tpulw__result_as(b, tpulw__reshape(b, gi, v->ndim, v->sizes), dt);
}

/* ---- upsample_bicubic2d / _upsample_bilinear2d_aa (+ backward) ---------- */

/* interpolation matrix M [out, in] in wdt for one spatial dim:
 * bicubic: the four Keys taps (A = -0.75) at clamped indices, as
 * UpSampleKernel.cpp; bilinear aa: PIL-style triangle filter with support
 * scaled by the downsampling factor, normalized per output. */
static tpuir_val interp_matrix(tpulw__b *b, int aa, int64_t in, int64_t out, int align,
                               int has_scale, double scale_arg, int wdt) {
  double scale;
  if (align) scale = out > 1 ? (double)(in - 1) / (double)(out - 1) : 0;
  else if (has_scale && scale_arg > 0) scale = 1.0 / scale_arg;
  else scale = (double)in / (double)out;
  if (wdt == TPU_F32) scale = (float)scale;
  int64_t sz[2] = {out, in};
  tpuir_val o = tpuir_iota(b->g, wdt, 2, sz, 0);
  tpuir_val i = tpuir_iota(b->g, wdt, 2, sz, 1);
  tpuir_val zero = tpulw__const(b, wdt, 0);
  if (!aa) {
    tpuir_val real = align ? tpulw__bin_c(b, TPUIR_MUL, o, scale)
                           : tpulw__bin_c(b, TPUIR_SUB, tpulw__bin_c(b, TPUIR_MUL, tpulw__bin_c(b, TPUIR_ADD, o, 0.5), scale), 0.5);
    tpuir_val i0 = tpulw__bin_c(b, TPUIR_MIN, tpulw__un(b, TPUIR_FLOOR, real), (double)(in - 1));
    tpuir_val t = tpulw__bin_c(b, TPUIR_MIN, tpulw__bin_c(b, TPUIR_MAX, tpulw__bin(b, TPUIR_SUB, real, i0), 0), 1);
    const double A = -0.75;
    tpuir_val m = -1;
    for (int k = 0; k < 4; k++) {
      tpuir_val x = k < 2 ? tpulw__bin_c(b, TPUIR_ADD, t, (double)(1 - k))
                          : tpulw__bin_c(b, TPUIR_ADD, tpulw__bin(b, TPUIR_SUB, tpulw__const(b, wdt, 1), t), (double)(k - 2));
      tpuir_val w;
      if (k == 1 || k == 2) { /* ((A + 2) x - (A + 3)) x x + 1 */
        w = tpulw__bin_c(b, TPUIR_SUB, tpulw__bin_c(b, TPUIR_MUL, x, A + 2), A + 3);
        w = tpulw__bin_c(b, TPUIR_ADD, tpulw__bin(b, TPUIR_MUL, tpulw__bin(b, TPUIR_MUL, w, x), x), 1);
      } else { /* ((A x - 5A) x + 8A) x - 4A */
        w = tpulw__bin_c(b, TPUIR_SUB, tpulw__bin_c(b, TPUIR_MUL, x, A), 5 * A);
        w = tpulw__bin_c(b, TPUIR_ADD, tpulw__bin(b, TPUIR_MUL, w, x), 8 * A);
        w = tpulw__bin_c(b, TPUIR_SUB, tpulw__bin(b, TPUIR_MUL, w, x), 4 * A);
      }
      tpuir_val idx = tpulw__bin_c(b, TPUIR_MIN, tpulw__bin_c(b, TPUIR_MAX, tpulw__bin_c(b, TPUIR_ADD, i0, (double)(k - 1)), 0),
                               (double)(in - 1));
      tpuir_val c = tpulw__sel(b, tpulw__bin(b, TPUIR_EQ, idx, i), w, zero);
      m = m < 0 ? c : tpulw__bin(b, TPUIR_ADD, m, c);
    }
    return m;
  }
  double support = scale >= 1.0 ? scale : 1.0;
  double invscale = scale >= 1.0 ? 1.0 / scale : 1.0;
  if (wdt == TPU_F32) {
    support = (float)support;
    invscale = (float)invscale;
  }
  int64_t maxi = (int64_t)ceil(support) * 2 + 1;
  tpuir_val center = tpulw__bin_c(b, TPUIR_MUL, tpulw__bin_c(b, TPUIR_ADD, o, 0.5), scale);
  tpuir_val xmin = tpulw__bin_c(b, TPUIR_MAX, tpulw__un(b, TPUIR_TRUNC, tpulw__bin_c(b, TPUIR_ADD, tpulw__bin_c(b, TPUIR_SUB, center, support), 0.5)), 0);
  tpuir_val xmax = tpulw__bin_c(b, TPUIR_MIN, tpulw__un(b, TPUIR_TRUNC, tpulw__bin_c(b, TPUIR_ADD, tpulw__bin_c(b, TPUIR_ADD, center, support), 0.5)), (double)in);
  xmax = tpulw__bin(b, TPUIR_MIN, xmax, tpulw__bin_c(b, TPUIR_ADD, xmin, (double)maxi));
  tpuir_val in_rng = tpulw__bin(b, TPUIR_AND, tpulw__bin(b, TPUIR_GE, i, xmin), tpulw__bin(b, TPUIR_LT, i, xmax));
  tpuir_val a = tpulw__un(b, TPUIR_ABS, tpulw__bin_c(b, TPUIR_MUL, tpulw__bin_c(b, TPUIR_ADD, tpulw__bin(b, TPUIR_SUB, i, center), 0.5), invscale));
  tpuir_val w = tpulw__bin_c(b, TPUIR_MAX, tpulw__bin(b, TPUIR_SUB, tpulw__const(b, wdt, 1), a), 0);
  w = tpulw__sel(b, in_rng, w, zero);
  tpuir_val tot = tpulw__reduce_dims(b, TPUIR_RED_SUM, w, 2u, 1);
  tpuir_val nz = tpulw__bin_c(b, TPUIR_NE, tot, 0);
  return tpulw__sel(b, tpulw__bcast(b, nz, 2, sz), tpulw__bin(b, TPUIR_DIV, w, tpulw__sel(b, nz, tot, tpulw__const(b, wdt, 1))), zero);
}

static int interp_fn(tpulw__b *b) {
  int aa = b->op == K_BILINEAR_AA;
  int bw = strstr(b->base, "_backward") != NULL;
  const tpulw_tensor *t = tpulw__tensor_arg(b, bw ? "grad_output" : "self");
  int rc;
  if ((rc = need_tpu(b, t))) return rc;
  int dt = t->view.dtype;
  if ((rc = float_only(b, dt))) return rc;
  int no, ni = 0;
  int64_t sa, sb;
  const int64_t *osz = tpulw__ints(b, "output_size", &no, &sa);
  const int64_t *isz = bw ? tpulw__ints(b, "input_size", &ni, &sb) : NULL;
  if (no != 2 || (bw && ni != 4))
    return tpu_error(TPU_E_INVALID, "It is expected output_size equals to 2, but got size %d", no);
  if (!bw && t->view.ndim != 4)
    return tpu_error(TPU_E_INVALID, "Non-empty 4D data tensor expected but got a tensor with sizes [%lld]",
                     (long long)t->view.ndim);
  const int64_t *in_sizes = bw ? isz : t->view.sizes;
  for (int j = 0; j < 2; j++)
    if (osz[j] <= 0 || in_sizes[2 + j] <= 0)
      return tpu_error(TPU_E_INVALID, "Input and output sizes should be greater than 0, but got "
                       "input (H: %lld, W: %lld) output (H: %lld, W: %lld)", (long long)in_sizes[2],
                       (long long)in_sizes[3], (long long)osz[0], (long long)osz[1]);
  if (bw) {
    int ok = t->view.ndim == 4 && t->view.sizes[0] == isz[0] && t->view.sizes[1] == isz[1] &&
             t->view.sizes[2] == osz[0] && t->view.sizes[3] == osz[1];
    if (!ok)
      return tpu_error(TPU_E_INVALID, "Expected grad_output to have the same shape as output");
  }
  int align = (int)tpulw__int(b, "align_corners", 0);
  int wdt = dt == TPU_F64 ? TPU_F64 : TPU_F32;
  tpuir_val v = tpulw__convert(b, tpulw__tensor(b, t), wdt);
  static const char *const sn[2] = {"scales_h", "scales_w"};
  for (int j = 0; j < 2; j++) {
    tpuir_val M = interp_matrix(b, aa, in_sizes[2 + j], osz[j], align, !tpulw__none(b, sn[j]),
                                tpulw__float(b, sn[j], 0), wdt);
    LW_TRY(M);
    int64_t lc[1] = {2}, rc1[1] = {bw ? 0 : 1};
    v = tpuir_dot_general(b->g, v, M, 0, NULL, NULL, 1, lc, rc1, TPU_PREC_FP32, wdt);
    LW_TRY(v);
  }
  return tpulw__result_as(b, v, dt);
}

/* ---- embedding_bag --------------------------------------------------------- */

enum { EB_SUM = 0, EB_MEAN, EB_MAX };

/* offset2bag [I] int64: bag of each index (number of offsets <= i, minus 1) */
static tpuir_val offset2bag(tpulw__b *b, tpuir_val offs, int64_t I, int64_t B) {
  int64_t s[2] = {I, B}, d1[1] = {1};
  tpuir_val i = tpuir_iota(b->g, TPU_I64, 2, s, 0);
  tpuir_val o = tpuir_broadcast_in_dim(b->g, offs, 2, s, d1);
  tpuir_val c = tpulw__reduce_dims(b, TPUIR_RED_SUM, tpulw__convert(b, tpulw__bin(b, TPUIR_GE, i, o), TPU_I64), 2u, 0);
  return tpulw__bin_c(b, TPUIR_MAX, tpulw__bin_c(b, TPUIR_SUB, c, 1), 0);
}

static int ebag_common(tpulw__b *b, const tpulw_tensor **idx, const tpulw_tensor **off, int64_t *I,
                       int64_t *B) {
  *idx = tpulw__tensor_arg(b, "indices");
  *off = tpulw__tensor_arg(b, "offsets");
  int rc;
  if ((rc = need_tpu(b, *idx))) return rc;
  if (*off && (rc = need_tpu(b, *off))) return rc;
  if ((*idx)->view.ndim != 1)
    return tpu_error(TPU_E_INVALID, "input has to be a 1D or 2D Tensor, but got Tensor of dimension %d",
                     (*idx)->view.ndim);
  int it = (*idx)->view.dtype;
  if (it != TPU_I64 && it != TPU_I32)
    return tpu_error(TPU_E_INVALID, "Expected tensor for argument #1 'indices' to have one of the "
                     "following scalar types: Long, Int; but got %s instead", tpulw__torch_name(it));
  *I = (*idx)->view.sizes[0];
  if (*off) {
    if ((*off)->view.ndim != 1)
      return tpu_error(TPU_E_INVALID, "offsets has to be a 1D Tensor, but got Tensor of dimension %d",
                       (*off)->view.ndim);
    int ot = (*off)->view.dtype;
    if (ot != TPU_I64 && ot != TPU_I32)
      return tpu_error(TPU_E_INVALID, "Expected tensor for argument #1 'offsets' to have one of the "
                       "following scalar types: Long, Int; but got %s instead", tpulw__torch_name(ot));
    *B = (*off)->view.sizes[0];
  }
  return TPU_OK;
}

static int ebag_fn(tpulw__b *b) {
  const tpulw_tensor *wt = tpulw__tensor_arg(b, "weight"), *idx, *off;
  int rc;
  int64_t I, B = 0;
  if ((rc = need_tpu(b, wt))) return rc;
  if ((rc = ebag_common(b, &idx, &off, &I, &B))) return rc;
  if (!off) return tpu_error(TPU_E_UNSUPPORTED, "embedding_bag: no offsets");
  const tpu_view *wv = &wt->view;
  int dt = wv->dtype;
  if ((rc = float_only(b, dt))) return rc;
  if (wv->ndim != 2)
    return tpu_error(TPU_E_INVALID, "weight has to be a 2D Tensor, but got Tensor of dimension %d", wv->ndim);
  int mode = (int)tpulw__int(b, "mode", EB_SUM);
  int last = (int)tpulw__int(b, "include_last_offset", 0);
  int64_t pad = tpulw__int(b, "padding_idx", -1);
  int64_t V = wv->sizes[0], D = wv->sizes[1];
  if (pad < -1 || pad >= V) pad = -1; /* ATen passes a wrapped index or -1 */
  const tpulw_tensor *psw = tpulw__tensor_arg(b, "per_sample_weights");
  if (psw) {
    if ((rc = need_tpu(b, psw))) return rc;
    if (mode != EB_SUM)
      return tpu_error(TPU_E_INVALID, "embedding_bag: per_sample_weights only supported with mode='sum'");
    if (psw->view.dtype != dt)
      return tpu_error(TPU_E_INVALID, "Expected tensor for argument #1 'per_sample_weights' to have "
                       "the same type as tensor for argument #1 'weight'; but type %s does not "
                       "equal %s", tpulw__torch_name(psw->view.dtype), tpulw__torch_name(dt));
    if (psw->view.ndim != 1 || psw->view.sizes[0] != I)
      return tpu_error(TPU_E_INVALID, "expected per_sample_weights to be a 1D tensor of the same size as indices");
  }
  if (last && B < 1)
    return tpu_error(TPU_E_INVALID, "include_last_offset: number of offset should be at least 1");
  int64_t nb = last ? B - 1 : B;
  int cdt = tpulw__opmath(dt);
  tpuir_val ix = tpulw__convert(b, tpulw__tensor(b, idx), TPU_I64);
  tpuir_val ofs = tpulw__convert(b, tpulw__tensor(b, off), TPU_I64);
  int64_t one = 1;
  if (last) ofs = tpuir_slice(b->g, ofs, (int64_t[1]){0}, &nb, &one);
  int64_t s2[2] = {nb, D}, i2[2] = {I, 1}, ib[2] = {nb, I};
  tpuir_val o2b = nb > 0 ? offset2bag(b, ofs, I, nb) : tpulw__full(b, TPU_I64, 1, &I, 0);
  tpuir_val notpad = tpulw__bin_c(b, TPUIR_NE, ix, (double)pad);
  /* bag_size: non-padding entries per bag (entries past the last bag with
   * include_last_offset are dropped) */
  tpuir_val inbag = notpad;
  if (last && nb > 0 && mode != EB_MAX) { /* (CPU's max mode keeps them in the last bag) */
    tpuir_val lastoff = tpulw__reshape(b, tpuir_slice(b->g, tpulw__convert(b, tpulw__tensor(b, off), TPU_I64), &nb,
                                                 (int64_t[1]){nb + 1}, &one), 0, NULL);
    inbag = tpulw__bin(b, TPUIR_AND, inbag, tpulw__bin(b, TPUIR_LT, tpuir_iota(b->g, TPU_I64, 1, &I, 0), lastoff));
  }
  tpuir_val w = tpulw__convert(b, tpulw__tensor(b, wt), cdt);
  tpuir_val rows = tpuir_index_select(b->g, w, 0, ix); /* [I, D] */
  b->sync = 1;
  b->err_remap = LW_ERR_RUNTIME;
  tpuir_val member = -1, bsz;
  if (nb > 0) {
    int64_t d1[1] = {1};
    tpuir_val bi = tpuir_iota(b->g, TPU_I64, 2, ib, 0);
    member = tpulw__bin(b, TPUIR_AND, tpulw__bin(b, TPUIR_EQ, bi, tpuir_broadcast_in_dim(b->g, o2b, 2, ib, d1)),
                    tpuir_broadcast_in_dim(b->g, inbag, 2, ib, d1)); /* [nb, I] */
    bsz = tpulw__reduce_dims(b, TPUIR_RED_SUM, tpulw__convert(b, member, TPU_I64), 2u, 0);
  } else {
    bsz = tpulw__full(b, TPU_I64, 1, &nb, 0);
  }
  LW_TRY(bsz);
  tpuir_val out, maxi;
  if (mode != EB_MAX) {
    tpuir_val r = tpulw__sel(b, tpulw__reshape(b, inbag, 2, i2), rows, tpulw__const(b, cdt, 0));
    if (psw) r = tpulw__bin(b, TPUIR_MUL, r, tpulw__reshape(b, tpulw__convert(b, tpulw__tensor(b, psw), cdt), 2, i2));
    out = tpuir_index_add(b->g, tpulw__full(b, cdt, 2, s2, 0), 0, o2b, r);
    if (mode == EB_MEAN) {
      int64_t b1[2] = {nb, 1};
      tpuir_val div = tpulw__reshape(b, tpulw__convert(b, tpulw__bin_c(b, TPUIR_MAX, bsz, 1), cdt), 2, b1);
      out = tpulw__bin(b, TPUIR_DIV, out, div);
    }
    maxi = tpulw__full(b, TPU_I64, 1, &nb, 0);
  } else if (nb == 0 || I == 0 || D == 0) {
    out = tpulw__full(b, cdt, 2, s2, 0);
    maxi = tpulw__full(b, TPU_I64, 2, s2, 0);
  } else {
    int64_t s3[3] = {nb, I, D}, d12[2] = {1, 2}, d01[2] = {0, 1};
    tpuir_val m3 = tpuir_broadcast_in_dim(b->g, member, 3, s3, d01);
    tpuir_val r3 = tpuir_broadcast_in_dim(b->g, rows, 3, s3, d12);
    tpuir_val vals = tpulw__sel(b, m3, r3, tpulw__const(b, cdt, -INFINITY));
    tpuir_val am = tpuir_argreduce(b->g, TPUIR_RED_MAX, vals, 1); /* [nb, D] */
    LW_TRY(am);
    int64_t s31[3] = {nb, 1, D};
    tpuir_val mx = tpulw__reshape(b, tpuir_gather(b->g, vals, 1, tpulw__reshape(b, am, 3, s31)), 2, s2);
    tpuir_val nonempty = tpulw__reshape(b, tpulw__bin_c(b, TPUIR_GT, bsz, 0), 2, (int64_t[2]){nb, 1});
    out = tpulw__sel(b, nonempty, mx, tpulw__const(b, cdt, 0));
    tpuir_val wi = tpuir_index_select(b->g, ix, 0, tpulw__reshape(b, am, 1, (int64_t[1]){nb * D}));
    maxi = tpulw__sel(b, nonempty, tpulw__reshape(b, wi, 2, s2), tpulw__const(b, TPU_I64, 0));
  }
  if ((rc = tpulw__result_as(b, out, dt)) < 0) return rc;
  if ((rc = tpulw__result(b, o2b)) < 0) return rc;
  if ((rc = tpulw__result(b, bsz)) < 0) return rc;
  return tpulw__result(b, maxi);
}

/* _embedding_bag_backward (dense) / _embedding_bag_dense_backward */
static int ebag_bw_fn(tpulw__b *b) {
  const tpulw_tensor *gt = tpulw__tensor_arg(b, "grad"), *idx, *off;
  const tpulw_tensor *o2t = tpulw__tensor_arg(b, "offset2bag"), *bst = tpulw__tensor_arg(b, "bag_size");
  const tpulw_tensor *mit = tpulw__tensor_arg(b, "maximum_indices");
  int rc;
  int64_t I, B = 0;
  if ((rc = need_tpu(b, gt)) || (rc = need_tpu(b, o2t)) || (rc = need_tpu(b, bst))) return rc;
  if ((rc = ebag_common(b, &idx, &off, &I, &B))) return rc;
  if (b->op == K_EBAG_BW && tpulw__int(b, "sparse", 0))
    return tpu_error(TPU_E_UNSUPPORTED, "embedding_bag: sparse gradients");
  int dt = gt->view.dtype;
  if ((rc = float_only(b, dt))) return rc;
  if (gt->view.ndim != 2) return tpu_error(TPU_E_INVALID, "embedding_bag backward: grad must be 2D");
  int64_t V = tpulw__int(b, "num_weights", 0), nb = gt->view.sizes[0], D = gt->view.sizes[1];
  int mode = (int)tpulw__int(b, "mode", EB_SUM);
  int64_t pad = tpulw__int(b, "padding_idx", -1);
  int sgf = (int)tpulw__int(b, "scale_grad_by_freq", 0);
  const tpulw_tensor *psw = tpulw__tensor_arg(b, "per_sample_weights");
  int cdt = tpulw__opmath(dt);
  int64_t s2[2] = {V, D}, i2[2] = {I, 1};
  tpuir_val g = tpulw__convert(b, tpulw__tensor(b, gt), cdt);
  tpuir_val ix = tpulw__convert(b, tpulw__tensor(b, idx), TPU_I64);
  tpuir_val bs = tpulw__convert(b, tpulw__tensor(b, bst), TPU_I64);
  b->sync = 1;
  b->err_remap = LW_ERR_RUNTIME;
  if (mode == EB_MAX) {
    if ((rc = need_tpu(b, mit))) return rc;
    if (nb == 0 || D == 0) return tpulw__result_as(b, tpulw__full(b, cdt, 2, s2, 0), dt);
    int64_t b1[2] = {nb, 1}, bd[2] = {nb, D};
    tpuir_val nonempty = tpulw__reshape(b, tpulw__bin_c(b, TPUIR_GT, bs, 0), 2, b1);
    tpuir_val mi = tpulw__reshape(b, tpulw__convert(b, tpulw__tensor(b, mit), TPU_I64), 2, bd);
    mi = tpulw__sel(b, nonempty, mi, tpulw__const(b, TPU_I64, 0));
    tpuir_val src = tpulw__sel(b, nonempty, g, tpulw__const(b, cdt, 0));
    return tpulw__result_as(b, tpuir_scatter_add(b->g, tpulw__full(b, cdt, 2, s2, 0), 0, mi, src), dt);
  }
  if (I == 0 || nb == 0) return tpulw__result_as(b, tpulw__full(b, cdt, 2, s2, 0), dt);
  tpuir_val o2b = tpulw__convert(b, tpulw__tensor(b, o2t), TPU_I64);
  tpuir_val r = tpuir_index_select(b->g, g, 0, o2b); /* [I, D] */
  if (mode == EB_MEAN) {
    tpuir_val bsi = tpuir_index_select(b->g, bs, 0, o2b);
    r = tpulw__bin(b, TPUIR_DIV, r, tpulw__reshape(b, tpulw__convert(b, tpulw__bin_c(b, TPUIR_MAX, bsi, 1), cdt), 2, i2));
  }
  if (psw) r = tpulw__bin(b, TPUIR_MUL, r, tpulw__reshape(b, tpulw__convert(b, tpulw__tensor(b, psw), cdt), 2, i2));
  if (sgf) {
    int64_t ss[2] = {I, I};
    int64_t d0[1] = {0}, d1[1] = {1};
    tpuir_val eq = tpulw__bin(b, TPUIR_EQ, tpuir_broadcast_in_dim(b->g, ix, 2, ss, d0),
                          tpuir_broadcast_in_dim(b->g, ix, 2, ss, d1));
    tpuir_val cnt = tpulw__reduce_dims(b, TPUIR_RED_SUM, tpulw__convert(b, eq, cdt), 2u, 0);
    r = tpulw__bin(b, TPUIR_DIV, r, tpulw__reshape(b, cnt, 2, i2));
  }
  r = tpulw__sel(b, tpulw__reshape(b, tpulw__bin_c(b, TPUIR_NE, ix, (double)pad), 2, i2), r, tpulw__const(b, cdt, 0));
  /* padding / dropped entries (offset2bag of an index past the last bag)
   * add zeros */
  return tpulw__result_as(b, tpuir_index_add(b->g, tpulw__full(b, cdt, 2, s2, 0), 0, ix, r), dt);
}

static int ebag_psw_bw_fn(tpulw__b *b) {
  const tpulw_tensor *gt = tpulw__tensor_arg(b, "grad"), *wt = tpulw__tensor_arg(b, "weight"), *idx, *off;
  const tpulw_tensor *o2t = tpulw__tensor_arg(b, "offset2bag");
  int rc;
  int64_t I, B = 0;
  if ((rc = need_tpu(b, gt)) || (rc = need_tpu(b, wt)) || (rc = need_tpu(b, o2t))) return rc;
  if ((rc = ebag_common(b, &idx, &off, &I, &B))) return rc;
  int mode = (int)tpulw__int(b, "mode", EB_SUM);
  if (mode != EB_SUM)
    return tpu_error(TPU_E_INVALID, "embedding_bag_backward: per_sample_weights only supported for mode='sum'");
  int dt = gt->view.dtype;
  if ((rc = float_only(b, dt))) return rc;
  int64_t pad = tpulw__int(b, "padding_idx", -1);
  int cdt = tpulw__opmath(dt);
  if (I == 0 || gt->view.sizes[0] == 0) return tpulw__result_as(b, tpulw__full(b, cdt, 1, &I, 0), dt);
  tpuir_val ix = tpulw__convert(b, tpulw__tensor(b, idx), TPU_I64);
  tpuir_val o2b = tpulw__convert(b, tpulw__tensor(b, o2t), TPU_I64);
  tpuir_val g = tpuir_index_select(b->g, tpulw__convert(b, tpulw__tensor(b, gt), cdt), 0, o2b);
  tpuir_val w = tpuir_index_select(b->g, tpulw__convert(b, tpulw__tensor(b, wt), cdt), 0, ix);
  b->sync = 1;
  b->err_remap = LW_ERR_RUNTIME;
  tpuir_val r = tpulw__reduce_dims(b, TPUIR_RED_SUM, tpulw__bin(b, TPUIR_MUL, g, w), 2u, 0);
  r = tpulw__sel(b, tpulw__bin_c(b, TPUIR_NE, ix, (double)pad), r, tpulw__const(b, cdt, 0));
  return tpulw__result_as(b, r, dt);
}

/* embedding_renorm_ (max_norm of embedding / embedding_bag): rows named
 * by indices whose p-norm exceeds max_norm are scaled by
 * max_norm / (norm + 1e-7) (scale in double, like CPU). */
static int renorm_fn(tpulw__b *b) {
  const tpulw_tensor *self = tpulw__tensor_arg(b, "self"), *it = tpulw__tensor_arg(b, "indices");
  int rc;
  if ((rc = need_tpu(b, self)) || (rc = need_tpu(b, it))) return rc;
  const tpu_view *v = &self->view;
  int dt = v->dtype;
  if ((rc = float_only(b, dt))) return rc;
  if (v->ndim != 2)
    return tpu_error(TPU_E_INVALID, "Expected 2-dimensional tensor, but got %d-dimensional tensor "
                     "for argument #1 'self' (while checking arguments for embedding_renorm_)", v->ndim);
  int idt = it->view.dtype;
  if (idt != TPU_I64 && idt != TPU_I32)
    return tpu_error(TPU_E_INVALID, "Expected tensor for argument #2 'indices' to have one of the "
                     "following scalar types: Long, Int; but got %s instead (while checking "
                     "arguments for embedding_renorm_)", tpulw__torch_name(idt));
  double max_norm = tpulw__float(b, "max_norm", 0), p = tpulw__float(b, "norm_type", 2);
  int64_t V = v->sizes[0], D = v->sizes[1], n = 1;
  for (int i = 0; i < it->view.ndim; i++) n *= it->view.sizes[i];
  int cdt = tpulw__opmath(dt);
  tpuir_val w = tpulw__convert(b, tpulw__tensor(b, self), cdt);
  if (n == 0 || V == 0) return tpulw__result_as(b, w, dt);
  tpuir_val ix = tpulw__reshape(b, tpulw__convert(b, tpulw__tensor(b, it), TPU_I64), 1, &n);
  tpuir_val hit = tpuir_index_add(b->g, tpulw__full(b, TPU_I64, 1, &V, 0), 0, ix, tpulw__full(b, TPU_I64, 1, &n, 1));
  b->sync = 1;
  tpuir_val norm = D ? pnorm_last(b, w, p) : tpulw__full(b, cdt, 1, &V, 0);
  tpuir_val nd = tpulw__convert(b, norm, TPU_F64);
  tpuir_val scale = tpulw__bin(b, TPUIR_DIV, tpulw__const(b, TPU_F64, max_norm), tpulw__bin_c(b, TPUIR_ADD, nd, 1e-7));
  tpuir_val on = tpulw__bin(b, TPUIR_AND, tpulw__bin_c(b, TPUIR_GT, hit, 0), tpulw__bin_c(b, TPUIR_GT, nd, max_norm));
  int64_t v1[2] = {V, 1};
  tpuir_val sc = tpulw__reshape(b, tpulw__convert(b, tpulw__sel(b, on, scale, tpulw__const(b, TPU_F64, 1)), cdt), 2, v1);
  return tpulw__result_as(b, tpulw__bin(b, TPUIR_MUL, w, sc), dt);
}

/* ---- grid_sampler_2d / grid_sampler_3d (+ backward) ---------------------- */

enum { GS_BILINEAR = 0, GS_NEAREST, GS_BICUBIC };
enum { GS_ZEROS = 0, GS_BORDER, GS_REFLECTION };

/* clip to [0, size - 1]; *gm (if non-NULL) *= d/dx (0 where clipped) */
static tpuir_val gs_clip(tpulw__b *b, tpuir_val x, int64_t size, tpuir_val *gm) {
  tpuir_val r = tpulw__bin_c(b, TPUIR_MIN, tpulw__bin_c(b, TPUIR_MAX, x, 0), (double)(size - 1));
  if (gm) {
    tpulw__shape s = tpulw__info(b, x);
    tpuir_val inside = tpulw__bin(b, TPUIR_AND, tpulw__bin_c(b, TPUIR_GT, x, 0), tpulw__bin_c(b, TPUIR_LT, x, (double)(size - 1)));
    *gm = tpulw__sel(b, inside, *gm, tpulw__const(b, s.dtype, 0));
  }
  return r;
}

/* reflect x into [tl/2, th/2] (GridSampler.h reflect_coordinates[_set_grad]) */
static tpuir_val gs_reflect(tpulw__b *b, tpuir_val x, int64_t tl, int64_t th, tpuir_val *gm) {
  tpulw__shape s = tpulw__info(b, x);
  if (tl == th) {
    if (gm) *gm = tpulw__full(b, s.dtype, s.ndim, s.sizes, 0);
    return tpulw__full(b, s.dtype, s.ndim, s.sizes, 0);
  }
  double mn = (double)tl / 2, span = (double)(th - tl) / 2;
  tpuir_val d = tpulw__bin_c(b, TPUIR_SUB, x, mn);
  tpuir_val neg = tpulw__bin_c(b, TPUIR_LT, d, 0);
  tpuir_val a = tpulw__un(b, TPUIR_ABS, d);
  tpuir_val extra = tpulw__bin_c(b, TPUIR_REM, a, span);
  tpuir_val flips = tpulw__un(b, TPUIR_FLOOR, tpulw__bin_c(b, TPUIR_DIV, a, span));
  tpuir_val even = tpulw__bin_c(b, TPUIR_EQ, tpulw__bin_c(b, TPUIR_REM, flips, 2), 0);
  tpuir_val r = tpulw__sel(b, even, tpulw__bin_c(b, TPUIR_ADD, extra, mn),
                       tpulw__bin_c(b, TPUIR_ADD, tpulw__bin(b, TPUIR_SUB, tpulw__const(b, s.dtype, span), extra), mn));
  if (gm) {
    tpuir_val one = tpulw__const(b, s.dtype, 1), mone = tpulw__const(b, s.dtype, -1);
    tpuir_val m = tpulw__sel(b, neg, mone, one);
    m = tpulw__sel(b, even, m, tpulw__un(b, TPUIR_NEG, m));
    *gm = tpulw__bin(b, TPUIR_MUL, *gm, m);
  }
  return r;
}

/* padding applied to an unnormalized coordinate (compute_coordinates) */
static tpuir_val gs_pad(tpulw__b *b, tpuir_val x, int64_t size, int pad, int align, tpuir_val *gm) {
  if (pad == GS_BORDER) {
    x = gs_clip(b, x, size, gm);
  } else if (pad == GS_REFLECTION) {
    x = align ? gs_reflect(b, x, 0, 2 * (size - 1), gm) : gs_reflect(b, x, -1, 2 * size - 1, gm);
    x = gs_clip(b, x, size, gm);
  }
  /* safe_downgrade_to_int_range: non-finite / huge -> -100 */
  tpulw__shape s = tpulw__info(b, x);
  tpuir_val ok = tpulw__bin(b, TPUIR_AND, tpulw__un(b, TPUIR_IS_FINITE, x),
                        tpulw__bin(b, TPUIR_AND, tpulw__bin_c(b, TPUIR_LT, x, 2147483646.0), tpulw__bin_c(b, TPUIR_GE, x, -2147483648.0)));
  return tpulw__sel(b, ok, x, tpulw__const(b, s.dtype, -100));
}

static tpuir_val gs_unnorm(tpulw__b *b, tpuir_val c, int64_t size, int align, double *mult) {
  if (align) {
    *mult = (double)(size - 1) / 2;
    return tpulw__bin_c(b, TPUIR_MUL, tpulw__bin_c(b, TPUIR_ADD, c, 1), (double)(size - 1) / 2);
  }
  *mult = (double)size / 2;
  return tpulw__bin_c(b, TPUIR_DIV, tpulw__bin_c(b, TPUIR_SUB, tpulw__bin_c(b, TPUIR_MUL, tpulw__bin_c(b, TPUIR_ADD, c, 1), (double)size), 1), 2);
}

/* Keys cubic coefficients (A = -0.75) of tap k at fraction t, and their
 * derivative (get_cubic_coefficients_grad) */
static tpuir_val cubic_coef(tpulw__b *b, tpuir_val t, int k, int grad) {
  const double A = -0.75;
  tpulw__shape s = tpulw__info(b, t);
  tpuir_val one = tpulw__const(b, s.dtype, 1);
  tpuir_val x, w;
  if (!grad) {
    x = k == 0 ? tpulw__bin_c(b, TPUIR_ADD, t, 1) : k == 1 ? t : k == 2 ? tpulw__bin(b, TPUIR_SUB, one, t)
                                                         : tpulw__bin_c(b, TPUIR_ADD, tpulw__bin(b, TPUIR_SUB, one, t), 1);
    if (k == 1 || k == 2) {
      w = tpulw__bin_c(b, TPUIR_SUB, tpulw__bin_c(b, TPUIR_MUL, x, A + 2), A + 3);
      return tpulw__bin_c(b, TPUIR_ADD, tpulw__bin(b, TPUIR_MUL, tpulw__bin(b, TPUIR_MUL, w, x), x), 1);
    }
    w = tpulw__bin_c(b, TPUIR_SUB, tpulw__bin_c(b, TPUIR_MUL, x, A), 5 * A);
    w = tpulw__bin_c(b, TPUIR_ADD, tpulw__bin(b, TPUIR_MUL, w, x), 8 * A);
    return tpulw__bin_c(b, TPUIR_SUB, tpulw__bin(b, TPUIR_MUL, w, x), 4 * A);
  }
  if (k == 0) {
    x = tpulw__bin(b, TPUIR_SUB, tpulw__const(b, s.dtype, -1), t);
    w = tpulw__bin_c(b, TPUIR_SUB, tpulw__bin_c(b, TPUIR_MUL, x, -3 * A), 10 * A);
    return tpulw__bin_c(b, TPUIR_SUB, tpulw__bin(b, TPUIR_MUL, w, x), 8 * A);
  }
  if (k == 1) {
    x = tpulw__un(b, TPUIR_NEG, t);
    w = tpulw__bin_c(b, TPUIR_SUB, tpulw__bin_c(b, TPUIR_MUL, x, -3 * (A + 2)), 2 * (A + 3));
    return tpulw__bin(b, TPUIR_MUL, w, x);
  }
  if (k == 2) {
    x = tpulw__bin(b, TPUIR_SUB, one, t);
    w = tpulw__bin_c(b, TPUIR_SUB, tpulw__bin_c(b, TPUIR_MUL, x, 3 * (A + 2)), 2 * (A + 3));
    return tpulw__bin(b, TPUIR_MUL, w, x);
  }
  x = tpulw__bin(b, TPUIR_SUB, tpulw__const(b, s.dtype, 2), t);
  w = tpulw__bin_c(b, TPUIR_SUB, tpulw__bin_c(b, TPUIR_MUL, x, 3 * A), 10 * A);
  return tpulw__bin_c(b, TPUIR_ADD, tpulw__bin(b, TPUIR_MUL, w, x), 8 * A);
}

#define GS_MAXT 64
typedef struct gs_tap {
  tpuir_val flat;           /* int64 [N, P] flat spatial index (0 where invalid) */
  tpuir_val w;              /* cdt [N, P] weight (0 where invalid) */
  tpuir_val dw[3];          /* cdt [N, P] d weight / d source coord per dim */
} gs_tap;

static int grid_fn(tpulw__b *b) {
  int bw = strstr(b->base, "_backward") != NULL;
  int nsp = nsp_of(b);
  const tpulw_tensor *in = tpulw__tensor_arg(b, "input"), *gr = tpulw__tensor_arg(b, "grid");
  int rc;
  if ((rc = need_tpu(b, in)) || (rc = need_tpu(b, gr))) return rc;
  const tpu_view *iv = &in->view, *gv = &gr->view;
  int dt = iv->dtype;
  char s1[256], s2[256];
  if ((rc = float_only(b, dt))) return rc;
  if (gv->dtype != dt)
    return tpu_error(TPU_E_INVALID, "grid_sampler(): expected input and grid to have same dtype, "
                     "but input has %s and grid has %s", tpulw__c_name(dt), tpulw__c_name(gv->dtype));
  if (iv->ndim != nsp + 2 || gv->ndim != iv->ndim)
    return tpu_error(TPU_E_INVALID, "grid_sampler(): expected %dD input and grid with same number "
                     "of dimensions, but got input with sizes [%s] and grid with sizes [%s]", nsp + 2,
                     fmt_sizes(s1, sizeof s1, iv->ndim, iv->sizes), fmt_sizes(s2, sizeof s2, gv->ndim, gv->sizes));
  if (iv->sizes[0] != gv->sizes[0])
    return tpu_error(TPU_E_INVALID, "grid_sampler(): expected grid and input to have same batch "
                     "size, but got input with sizes [%s] and grid with sizes [%s]",
                     fmt_sizes(s1, sizeof s1, iv->ndim, iv->sizes), fmt_sizes(s2, sizeof s2, gv->ndim, gv->sizes));
  if (gv->sizes[gv->ndim - 1] != nsp)
    return tpu_error(TPU_E_INVALID, "grid_sampler(): expected grid to have size %d in last "
                     "dimension, but got grid with sizes [%s]", nsp, fmt_sizes(s2, sizeof s2, gv->ndim, gv->sizes));
  for (int i = 2; i < iv->ndim; i++)
    if (iv->sizes[i] <= 0)
      return tpu_error(TPU_E_INVALID, "grid_sampler(): expected input to have non-empty spatial "
                       "dimensions, but input has sizes [%s] with dimension %d being empty",
                       fmt_sizes(s1, sizeof s1, iv->ndim, iv->sizes), i);
  int mode = (int)tpulw__int(b, "interpolation_mode", 0), pad = (int)tpulw__int(b, "padding_mode", 0);
  int align = (int)tpulw__int(b, "align_corners", 0);
  if (mode == GS_BICUBIC && nsp == 3)
    return tpu_error(TPU_E_INVALID, "grid_sampler(): bicubic interpolation only supports 4D input");
  if (mode < 0 || mode > 2 || pad < 0 || pad > 2)
    return tpu_error(TPU_E_UNSUPPORTED, "grid_sampler: mode");
  int64_t N = iv->sizes[0], C = iv->sizes[1], P = 1, S = 1;
  for (int i = 0; i < nsp; i++) {
    P *= gv->sizes[1 + i];
    S *= iv->sizes[2 + i];
  }
  int64_t osz[5] = {N, C};
  for (int i = 0; i < nsp; i++) osz[2 + i] = gv->sizes[1 + i];
  int cdt = tpulw__opmath(dt);
  const tpulw_tensor *go = NULL;
  int m0 = 1, m1 = 1;
  if (bw) {
    go = tpulw__tensor_arg(b, "grad_output");
    if ((rc = need_tpu(b, go))) return rc;
    int ok = go->view.ndim == nsp + 2;
    for (int i = 0; ok && i < nsp + 2; i++) ok = go->view.sizes[i] == osz[i];
    if (!ok) return tpu_error(TPU_E_INVALID, "grid_sampler backward: grad_output shape");
    int n;
    int64_t sc;
    const int64_t *mk = tpulw__ints(b, "output_mask", &n, &sc);
    if (mk && n == 2) {
      m0 = mk[0] != 0;
      m1 = mk[1] != 0;
    }
  }
  if (N == 0 || P == 0 || C == 0) {
    if (!bw) return tpulw__result(b, tpulw__full(b, dt, nsp + 2, osz, 0));
    if ((rc = tpulw__result(b, tpulw__full(b, dt, iv->ndim, iv->sizes, 0))) < 0) return rc;
    return tpulw__result(b, tpulw__full(b, dt, gv->ndim, gv->sizes, 0));
  }
  int64_t g3[3] = {N, P, nsp}, np2[2] = {N, P}, one3[3] = {1, 1, 1};
  tpuir_val g = tpulw__reshape(b, tpulw__convert(b, tpulw__tensor(b, gr), cdt), 3, g3);
  tpuir_val gmul[3], i0[3], t[3];
  int64_t size[3], stride[3];
  int64_t st = 1;
  for (int d = 0; d < nsp; d++) { /* d = 0: W (last dim), 1: H, 2: D */
    size[d] = iv->sizes[iv->ndim - 1 - d];
    stride[d] = st;
    st *= size[d];
    int64_t lo[3] = {0, 0, d}, hi[3] = {N, P, d + 1};
    tpuir_val c = tpulw__reshape(b, tpuir_slice(b->g, g, lo, hi, one3), 2, np2);
    double um;
    tpuir_val x = gs_unnorm(b, c, size[d], align, &um);
    gmul[d] = tpulw__full(b, cdt, 2, np2, um);
    if (mode != GS_BICUBIC) x = gs_pad(b, x, size[d], pad, align, &gmul[d]);
    LW_TRY(x);
    if (mode == GS_NEAREST) {
      i0[d] = tpulw__un(b, TPUIR_ROUND_EVEN, x);
    } else {
      i0[d] = tpulw__un(b, TPUIR_FLOOR, x);
      t[d] = tpulw__bin(b, TPUIR_SUB, x, i0[d]);
    }
  }
  /* taps */
  gs_tap taps[GS_MAXT];
  int ntap = 0;
  int per = mode == GS_NEAREST ? 1 : mode == GS_BILINEAR ? 2 : 4;
  int total = 1;
  for (int d = 0; d < nsp; d++) total *= per;
  tpuir_val zero = tpulw__const(b, cdt, 0);
  for (int k = 0; k < total; k++) {
    int kd[3], kk = k;
    for (int d = 0; d < nsp; d++) {
      kd[d] = kk % per;
      kk /= per;
    }
    tpuir_val valid = -1, flat = -1, w = -1, wd[3] = {-1, -1, -1}, dwd[3] = {-1, -1, -1};
    for (int d = 0; d < nsp; d++) {
      tpuir_val pos;
      if (mode == GS_NEAREST) {
        pos = i0[d];
        wd[d] = tpulw__full(b, cdt, 2, np2, 1);
        dwd[d] = tpulw__full(b, cdt, 2, np2, 0);
      } else if (mode == GS_BILINEAR) {
        pos = kd[d] ? tpulw__bin_c(b, TPUIR_ADD, i0[d], 1) : i0[d];
        wd[d] = kd[d] ? t[d] : tpulw__bin(b, TPUIR_SUB, tpulw__const(b, cdt, 1), t[d]);
        dwd[d] = tpulw__full(b, cdt, 2, np2, kd[d] ? 1 : -1);
      } else {
        pos = gs_pad(b, tpulw__bin_c(b, TPUIR_ADD, i0[d], (double)(kd[d] - 1)), size[d], pad, align, NULL);
        wd[d] = cubic_coef(b, t[d], kd[d], 0);
        dwd[d] = tpulw__un(b, TPUIR_NEG, cubic_coef(b, t[d], kd[d], 1));
      }
      tpuir_val ok = tpulw__bin(b, TPUIR_AND, tpulw__bin_c(b, TPUIR_GE, pos, 0), tpulw__bin_c(b, TPUIR_LE, pos, (double)(size[d] - 1)));
      valid = valid < 0 ? ok : tpulw__bin(b, TPUIR_AND, valid, ok);
      tpuir_val pi = tpulw__convert(b, tpulw__sel(b, ok, pos, zero), TPU_I64);
      pi = tpulw__bin_c(b, TPUIR_MUL, pi, (double)stride[d]);
      flat = flat < 0 ? pi : tpulw__bin(b, TPUIR_ADD, flat, pi);
      LW_TRY(flat);
    }
    gs_tap *tp = &taps[ntap++];
    tp->flat = tpulw__sel(b, valid, flat, tpulw__const(b, TPU_I64, 0));
    for (int d = 0; d < nsp; d++) w = w < 0 ? wd[d] : tpulw__bin(b, TPUIR_MUL, w, wd[d]);
    tp->w = tpulw__sel(b, valid, w, zero);
    for (int d = 0; d < nsp; d++) {
      tpuir_val dw = dwd[d];
      for (int e = 0; e < nsp; e++)
        if (e != d) dw = tpulw__bin(b, TPUIR_MUL, dw, wd[e]);
      tp->dw[d] = tpulw__sel(b, valid, dw, zero);
    }
    LW_TRY(tp->w);
  }
  int64_t ins[3] = {N, C, S}, outs[3] = {N, C, P}, d02[2] = {0, 2};
  tpuir_val x = tpulw__reshape(b, tpulw__convert(b, tpulw__tensor(b, in), cdt), 3, ins);
  tpuir_val gsrc[3] = {-1, -1, -1}, acc = -1, gin = -1;
  tpuir_val gout = bw ? tpulw__reshape(b, tpulw__convert(b, tpulw__tensor(b, go), cdt), 3, outs) : -1;
  if (bw && m0) gin = tpulw__full(b, cdt, 3, ins, 0);
  for (int k = 0; k < ntap; k++) {
    tpuir_val idx = tpuir_broadcast_in_dim(b->g, taps[k].flat, 3, outs, d02);
    tpuir_val w3 = tpuir_broadcast_in_dim(b->g, taps[k].w, 3, outs, d02);
    if (!bw) {
      tpuir_val v = tpulw__bin(b, TPUIR_MUL, tpuir_gather(b->g, x, 2, idx), w3);
      acc = acc < 0 ? v : tpulw__bin(b, TPUIR_ADD, acc, v);
      LW_TRY(acc);
      continue;
    }
    if (m0) gin = tpuir_scatter_add(b->g, gin, 2, idx, tpulw__bin(b, TPUIR_MUL, gout, w3));
    if (m1 && mode != GS_NEAREST) {
      tpuir_val vg = tpulw__reduce_dims(b, TPUIR_RED_SUM, tpulw__bin(b, TPUIR_MUL, tpuir_gather(b->g, x, 2, idx), gout), 2u, 0);
      for (int d = 0; d < nsp; d++) {
        tpuir_val c = tpulw__bin(b, TPUIR_MUL, vg, taps[k].dw[d]);
        gsrc[d] = gsrc[d] < 0 ? c : tpulw__bin(b, TPUIR_ADD, gsrc[d], c);
        LW_TRY(gsrc[d]);
      }
    }
  }
  if (!bw) return tpulw__result_as(b, tpulw__reshape(b, acc, nsp + 2, osz), dt);
  if (m0) {
    if ((rc = tpulw__result_as(b, tpulw__reshape(b, gin, iv->ndim, iv->sizes), dt)) < 0) return rc;
  } else {
    if ((rc = tpulw__result(b, tpulw__full(b, dt, iv->ndim, iv->sizes, 0))) < 0) return rc;
  }
  if (!m1 || mode == GS_NEAREST) return tpulw__result(b, tpulw__full(b, dt, gv->ndim, gv->sizes, 0));
  tpuir_val parts[3];
  int64_t np1[3] = {N, P, 1};
  for (int d = 0; d < nsp; d++) parts[d] = tpulw__reshape(b, tpulw__bin(b, TPUIR_MUL, gsrc[d], gmul[d]), 3, np1);
  tpuir_val gg = tpuir_concat(b->g, nsp, parts, 2);
  return tpulw__result_as(b, tpulw__reshape(b, gg, gv->ndim, gv->sizes), dt);
}

/* ---- CTC loss (_ctc_loss / _ctc_loss_backward, int-list lengths) ------- */

/* int64 [n] vector of host values */
static tpuir_val host_vec(tpulw__b *b, int n, const int64_t *v) {
  if (n == 0) {
    int64_t z = 0;
    return tpulw__full(b, TPU_I64, 1, &z, 0);
  }
  tpuir_val parts[256];
  if (n > 256) return tpu_error(TPU_E_UNSUPPORTED, "ctc_loss: batch too large");
  int64_t one = 1;
  for (int i = 0; i < n; i++) parts[i] = tpulw__reshape(b, tpulw__const(b, TPU_I64, (double)v[i]), 1, &one);
  return n == 1 ? parts[0] : tpuir_concat(b->g, n, parts, 0);
}

/* logsumexp of k values (same shape), -inf safe like PyTorch's CTC code */
static tpuir_val lse(tpulw__b *b, int k, const tpuir_val *v) {
  tpuir_val m = v[0];
  for (int i = 1; i < k; i++) m = tpulw__bin(b, TPUIR_MAX, m, v[i]);
  tpulw__shape s = tpulw__info(b, m);
  m = tpulw__sel(b, tpulw__bin_c(b, TPUIR_EQ, m, -INFINITY), tpulw__const(b, s.dtype, 0), m);
  tpuir_val acc = -1;
  for (int i = 0; i < k; i++) {
    tpuir_val e = tpulw__un(b, TPUIR_EXP, tpulw__bin(b, TPUIR_SUB, v[i], m));
    acc = acc < 0 ? e : tpulw__bin(b, TPUIR_ADD, acc, e);
  }
  return tpulw__bin(b, TPUIR_ADD, tpulw__un(b, TPUIR_LOG, acc), m);
}

/* shift along dim 1 of [N, L] by k (> 0: towards higher s), filling -inf */
static tpuir_val shift1(tpulw__b *b, tpuir_val v, int k) {
  tpulw__shape s = tpulw__info(b, v);
  int64_t lo[2] = {0, k}, hi[2] = {0, -k}, in[2] = {0, 0};
  if (k > s.sizes[1] || -k > s.sizes[1]) return tpulw__full(b, s.dtype, 2, s.sizes, -INFINITY);
  return tpuir_pad(b->g, v, tpulw__const(b, s.dtype, -INFINITY), lo, hi, in);
}

#define CTC_MAXT 4096
static int ctc_fn(tpulw__b *b) {
  int bw = strstr(b->base, "_backward") != NULL;
  const tpulw_tensor *lpt = tpulw__tensor_arg(b, "log_probs"), *tgt = tpulw__tensor_arg(b, "targets");
  int rc;
  if ((rc = need_tpu(b, lpt)) || (rc = need_tpu(b, tgt))) return rc;
  const tpu_view *lv = &lpt->view, *tv = &tgt->view;
  int dt = lv->dtype;
  if ((rc = float_only(b, dt))) return rc;
  int nil, ntl;
  int64_t sc1, sc2;
  const int64_t *il = tpulw__ints(b, "input_lengths", &nil, &sc1);
  const int64_t *tl = tpulw__ints(b, "target_lengths", &ntl, &sc2);
  if (!il || !tl) return tpu_error(TPU_E_UNSUPPORTED, "ctc_loss: lengths must be int lists");
  if (lv->ndim != 3) return tpu_error(TPU_E_INVALID, "ctc_loss: log_probs must be 3-D (T, N, C)");
  int64_t T = lv->sizes[0], N = lv->sizes[1], C = lv->sizes[2];
  int64_t blank = tpulw__int(b, "blank", 0);
  int zinf = (int)tpulw__int(b, "zero_infinity", 0);
  if (blank < 0 || blank >= C) return tpu_error(TPU_E_INVALID, "blank must be in label range");
  if (nil != N) return tpu_error(TPU_E_INVALID, "input_lengths must be of size batch_size");
  if (ntl != N) return tpu_error(TPU_E_INVALID, "target_lengths must be of size batch_size");
  if (tv->dtype != TPU_I64 && tv->dtype != TPU_I32)
    return tpu_error(TPU_E_UNSUPPORTED, "ctc_loss: targets dtype");
  int64_t maxS = 0, tsum = 0;
  for (int i = 0; i < N; i++) {
    if (tl[i] < 0)
      return tpu_error(TPU_E_INVALID, "Expected target_lengths to have value at least 0, but got "
                       "value %lld", (long long)tl[i]);
    if (il[i] < 0 || il[i] > T)
      return tpu_error(TPU_E_INVALID, "Expected input_lengths to have value at most %lld, but got "
                       "value %lld (while checking arguments for ctc_loss_cpu)", (long long)T, (long long)il[i]);
    if (tl[i] > maxS) maxS = tl[i];
    tsum += tl[i];
  }
  if (tv->ndim == 2) {
    if (tv->sizes[0] != N)
      return tpu_error(TPU_E_INVALID, "Expected tensor to have size %lld at dimension 0, but got "
                       "size %lld for argument #2 'targets' (while checking arguments for ctc_loss_cpu)",
                       (long long)N, (long long)tv->sizes[0]);
    if (tv->sizes[1] < maxS)
      return tpu_error(TPU_E_INVALID, "Expected tensor to have size at least %lld at dimension 1, "
                       "but got size %lld for argument #2 'targets' (while checking arguments for "
                       "ctc_loss_cpu)", (long long)maxS, (long long)tv->sizes[1]);
  } else if (tv->ndim == 1) {
    if (tv->sizes[0] < tsum)
      return tpu_error(TPU_E_INVALID, "Expected tensor to have size at least %lld at dimension 0, "
                       "but got size %lld for argument #2 'targets' (while checking arguments for "
                       "ctc_loss_cpu)", (long long)tsum, (long long)tv->sizes[0]);
  } else {
    return tpu_error(TPU_E_INVALID, "ctc_loss: targets must be 1-D or 2-D");
  }
  if (T > CTC_MAXT) return tpu_error(TPU_E_UNSUPPORTED, "ctc_loss: sequence too long");
  int64_t L = 2 * maxS + 1;
  int cdt = dt == TPU_F64 ? TPU_F64 : TPU_F32;
  int64_t nl[2] = {N, L}, n1[2] = {N, 1}, tnl[3] = {T, N, L};
  if (N == 0 || T == 0) {
    if (bw) return tpulw__result(b, tpulw__full(b, dt, 3, lv->sizes, 0));
    if ((rc = tpulw__result(b, tpulw__full(b, dt, 1, &N, 0))) < 0) return rc;
    int64_t ntl3[3] = {N, T, L};
    return tpulw__result(b, tpulw__full(b, dt, 3, ntl3, -INFINITY));
  }
  /* extended targets tprime [N, L] (blank at even s) */
  tpuir_val sio = tpuir_iota(b->g, TPU_I64, 2, nl, 1);
  tpuir_val half = tpulw__bin_c(b, TPUIR_DIV, sio, 2);
  tpuir_val tg = tpulw__convert(b, tpulw__tensor(b, tgt), TPU_I64);
  tpuir_val lab;
  if (tv->ndim == 2) {
    int64_t S = tv->sizes[1];
    if (S == 0) {
      lab = tpulw__full(b, TPU_I64, 2, nl, (double)blank);
    } else {
      lab = tpuir_gather(b->g, tg, 1, tpulw__bin_c(b, TPUIR_MIN, half, (double)(S - 1)));
    }
  } else {
    int64_t offs[256], o = 0;
    if (N > 256) return tpu_error(TPU_E_UNSUPPORTED, "ctc_loss: batch too large");
    for (int i = 0; i < N; i++) {
      offs[i] = o;
      o += tl[i];
    }
    int64_t tn = tv->sizes[0];
    if (tn == 0) {
      lab = tpulw__full(b, TPU_I64, 2, nl, (double)blank);
    } else {
      tpuir_val ov = tpulw__reshape(b, host_vec(b, (int)N, offs), 2, n1);
      tpuir_val fi = tpulw__bin_c(b, TPUIR_MIN, tpulw__bin(b, TPUIR_ADD, half, ov), (double)(tn - 1));
      int64_t nln = N * L;
      lab = tpulw__reshape(b, tpuir_index_select(b->g, tg, 0, tpulw__reshape(b, fi, 1, &nln)), 2, nl);
    }
  }
  tpuir_val tlv = tpulw__reshape(b, host_vec(b, (int)N, tl), 2, n1);
  tpuir_val ilv = tpulw__reshape(b, host_vec(b, (int)N, il), 2, n1);
  tpuir_val odd = tpulw__bin_c(b, TPUIR_EQ, tpulw__bin_c(b, TPUIR_REM, sio, 2), 1);
  tpuir_val svalid = tpulw__bin(b, TPUIR_LE, sio, tpulw__bin_c(b, TPUIR_MUL, tlv, 2)); /* s <= 2 tl */
  tpuir_val tprime = tpulw__sel(b, tpulw__bin(b, TPUIR_AND, odd, svalid), lab, tpulw__const(b, TPU_I64, (double)blank));
  b->sync = 1;
  b->err_remap = LW_ERR_RUNTIME;
  /* skip transition s-2 -> s allowed where tprime[s] != tprime[s-2] */
  int64_t lo2[2] = {0, 2}, hi2[2] = {0, -2}, z2[2] = {0, 0};
  tpuir_val tp2 = tpuir_pad(b->g, tprime, tpulw__const(b, TPU_I64, (double)blank), lo2, hi2, z2);
  tpuir_val skip = tpulw__bin(b, TPUIR_AND, tpulw__bin_c(b, TPUIR_GE, sio, 2), tpulw__bin(b, TPUIR_NE, tprime, tp2));
  tpuir_val lp = tpulw__convert(b, tpulw__tensor(b, lpt), cdt);
  int64_t d12[2] = {1, 2};
  tpuir_val lpg = tpuir_gather(b->g, lp, 2, tpuir_broadcast_in_dim(b->g, tprime, 3, tnl, d12)); /* [T,N,L] */
  LW_TRY(lpg);
  tpuir_val ninf = tpulw__const(b, cdt, -INFINITY);
  int64_t one3[3] = {1, 1, 1};
  #define LPG_T(t) tpulw__reshape(b, tpuir_slice(b->g, lpg, (int64_t[3]){(t), 0, 0}, (int64_t[3]){(t) + 1, N, L}, one3), 2, nl)
  if (!bw) {
    tpuir_val parts[CTC_MAXT];
    tpuir_val a = tpulw__sel(b, tpulw__bin(b, TPUIR_AND, tpulw__bin_c(b, TPUIR_LE, sio, 1), svalid), LPG_T(0), ninf);
    a = tpulw__sel(b, tpulw__bin_c(b, TPUIR_LT, ilv, 1), ninf, a);
    tpuir_val fin = a;
    int64_t n1l[3] = {N, 1, L};
    parts[0] = tpulw__reshape(b, a, 3, n1l);
    for (int64_t t = 1; t < T; t++) {
      tpuir_val v3[3] = {a, shift1(b, a, 1), tpulw__sel(b, skip, shift1(b, a, 2), ninf)};
      tpuir_val na = tpulw__bin(b, TPUIR_ADD, lse(b, 3, v3), LPG_T(t));
      na = tpulw__sel(b, svalid, na, ninf);
      tpuir_val live = tpulw__bin_c(b, TPUIR_GT, ilv, (double)t);
      a = tpulw__sel(b, live, na, ninf);
      fin = tpulw__sel(b, live, na, fin);
      parts[t] = tpulw__reshape(b, a, 3, n1l);
      LW_TRY(parts[t]);
    }
    /* nll = -logaddexp(alpha[2tl], alpha[2tl-1]) (tl == 0: -alpha[0]) */
    tpuir_val i1 = tpulw__bin_c(b, TPUIR_MUL, tlv, 2);
    tpuir_val i2 = tpulw__bin_c(b, TPUIR_MAX, tpulw__bin_c(b, TPUIR_SUB, i1, 1), 0);
    tpuir_val l1 = tpuir_gather(b->g, fin, 1, i1);
    tpuir_val l2 = tpulw__sel(b, tpulw__bin_c(b, TPUIR_GT, tlv, 0), tpuir_gather(b->g, fin, 1, i2), ninf);
    tpuir_val v2[2] = {l1, l2};
    tpuir_val nll = tpulw__un(b, TPUIR_NEG, tpulw__reshape(b, lse(b, 2, v2), 1, &N));
    tpuir_val la = T == 1 ? parts[0] : tpuir_concat(b->g, (int)T, parts, 1);
    if ((rc = tpulw__result_as(b, nll, dt)) < 0) return rc;
    return tpulw__result_as(b, la, dt);
  }
  const tpulw_tensor *gt = tpulw__tensor_arg(b, "grad"), *nt = tpulw__tensor_arg(b, "neg_log_likelihood");
  const tpulw_tensor *at = tpulw__tensor_arg(b, "log_alpha");
  if ((rc = need_tpu(b, gt)) || (rc = need_tpu(b, nt)) || (rc = need_tpu(b, at))) return rc;
  const tpu_view *av = &at->view;
  if (av->ndim != 3 || av->sizes[0] != N || av->sizes[1] != T || av->sizes[2] != L)
    return tpu_error(TPU_E_INVALID, "_ctc_loss_backward: log_alpha has the wrong shape");
  int64_t gn = 1;
  for (int i = 0; i < gt->view.ndim; i++) gn *= gt->view.sizes[i];
  if (gn != N) return tpu_error(TPU_E_INVALID, "_ctc_loss_backward: grad must have batch_size elements");
  int64_t perm[3] = {1, 0, 2};
  tpuir_val la = tpuir_transpose(b->g, tpulw__convert(b, tpulw__tensor(b, at), cdt), perm); /* [T,N,L] */
  tpuir_val parts[CTC_MAXT];
  tpuir_val bt = -1;
  tpuir_val i1 = tpulw__bin_c(b, TPUIR_MUL, tlv, 2);
  tpuir_val endm = tpulw__bin(b, TPUIR_AND, tpulw__bin(b, TPUIR_GE, sio, tpulw__bin_c(b, TPUIR_SUB, i1, 1)), svalid);
  int64_t lom2[2] = {0, -2}, hip2[2] = {0, 2};
  tpuir_val skipb = tpuir_pad(b->g, skip, tpulw__const(b, TPU_BOOL, 0), lom2, hip2, z2); /* skip[s + 2] */
  int64_t t1l[3] = {1, N, L};
  for (int64_t t = T - 1; t >= 0; t--) {
    tpuir_val lpt_ = LPG_T(t);
    tpuir_val init = tpulw__sel(b, endm, lpt_, ninf);
    tpuir_val nb;
    if (bt < 0) {
      nb = tpulw__full(b, cdt, 2, nl, -INFINITY);
    } else {
      tpuir_val v3[3] = {bt, shift1(b, bt, -1), tpulw__sel(b, skipb, shift1(b, bt, -2), ninf)};
      nb = tpulw__sel(b, svalid, tpulw__bin(b, TPUIR_ADD, lse(b, 3, v3), lpt_), ninf);
    }
    tpuir_val last = tpulw__bin_c(b, TPUIR_EQ, ilv, (double)(t + 1));
    tpuir_val before = tpulw__bin_c(b, TPUIR_GT, ilv, (double)(t + 1));
    bt = tpulw__sel(b, last, init, tpulw__sel(b, before, nb, ninf));
    tpuir_val lat = tpulw__reshape(b, tpuir_slice(b->g, la, (int64_t[3]){t, 0, 0}, (int64_t[3]){t + 1, N, L}, one3), 2, nl);
    parts[t] = tpulw__reshape(b, tpulw__bin(b, TPUIR_ADD, lat, bt), 3, t1l);
    LW_TRY(parts[t]);
  }
  tpuir_val lcab = T == 1 ? parts[0] : tpuir_concat(b->g, (int)T, parts, 0); /* [T,N,L] */
  tpuir_val m = tpulw__reduce_dims(b, TPUIR_RED_MAX, lcab, 4u, 1);
  m = tpulw__sel(b, tpulw__bin_c(b, TPUIR_EQ, m, -INFINITY), tpulw__const(b, cdt, 0), m);
  tpuir_val ex = tpulw__un(b, TPUIR_EXP, tpulw__bin(b, TPUIR_SUB, lcab, m));
  tpuir_val sums = tpuir_scatter_add(b->g, tpulw__full(b, cdt, 3, lv->sizes, 0), 2,
                                     tpuir_broadcast_in_dim(b->g, tprime, 3, tnl, d12), ex);
  tpuir_val lsum = tpulw__bin(b, TPUIR_ADD, tpulw__un(b, TPUIR_LOG, sums), m);
  int64_t s1n1[3] = {1, N, 1};
  tpuir_val nll = tpulw__reshape(b, tpulw__convert(b, tpulw__tensor(b, nt), cdt), 3, s1n1);
  tpuir_val g = tpulw__reshape(b, tpulw__convert(b, tpulw__tensor(b, gt), cdt), 3, s1n1);
  tpuir_val res = tpulw__bin(b, TPUIR_SUB, tpulw__un(b, TPUIR_EXP, lp),
                         tpulw__un(b, TPUIR_EXP, tpulw__bin(b, TPUIR_SUB, tpulw__bin(b, TPUIR_ADD, lsum, nll), lp)));
  res = tpulw__bin(b, TPUIR_MUL, res, g);
  int64_t tn1[3] = {T, N, 1};
  tpuir_val live = tpulw__bin(b, TPUIR_LT, tpuir_iota(b->g, TPU_I64, 3, tn1, 0), tpulw__reshape(b, ilv, 3, s1n1));
  tpuir_val zero = tpulw__const(b, cdt, 0);
  res = tpulw__sel(b, live, res, zero);
  if (zinf) res = tpulw__sel(b, tpulw__bin_c(b, TPUIR_EQ, nll, INFINITY), zero, res);
  return tpulw__result_as(b, res, dt);
}

#define R2(n, fn, code) {n, fn, code}, {n ".out", fn, code}

const tpulw__row tpulw__rows_nn2[] = {
    R2("max_unpool2d", unpool_fn, K_UNPOOL),
    R2("max_unpool3d", unpool_fn, K_UNPOOL),
    R2("adaptive_max_pool2d", adapt_max_fn, K_ADAPT_MAX),
    R2("adaptive_max_pool3d", adapt_max_fn, K_ADAPT_MAX),
    {"adaptive_max_pool2d_backward", adapt_max_fn, K_ADAPT_MAX_BW},
    {"adaptive_max_pool2d_backward.grad_input", adapt_max_fn, K_ADAPT_MAX_BW},
    {"adaptive_max_pool3d_backward", adapt_max_fn, K_ADAPT_MAX_BW},
    {"adaptive_max_pool3d_backward.grad_input", adapt_max_fn, K_ADAPT_MAX_BW},
    {"fractional_max_pool2d", frac_fn, K_FRAC},
    {"fractional_max_pool2d.output", frac_fn, K_FRAC},
    {"fractional_max_pool3d", frac_fn, K_FRAC},
    {"fractional_max_pool3d.output", frac_fn, K_FRAC},
    {"fractional_max_pool2d_backward", frac_fn, K_FRAC_BW},
    {"fractional_max_pool2d_backward.grad_input", frac_fn, K_FRAC_BW},
    {"fractional_max_pool3d_backward", frac_fn, K_FRAC_BW},
    {"fractional_max_pool3d_backward.grad_input", frac_fn, K_FRAC_BW},
    R2("channel_shuffle", shuffle_fn, K_SHUFFLE),
    R2("rrelu_with_noise", rrelu_fn, K_RRELU),
    R2("_pdist_forward", pdist_fn, K_PDIST),
    R2("_pdist_backward", pdist_fn, K_PDIST_BW),
    R2("_cdist_forward", cdist_fn, K_CDIST),
    R2("_cdist_backward", cdist_fn, K_CDIST_BW),
    R2("multi_margin_loss", multi_margin_fn, K_MULTI_MARGIN),
    {"multi_margin_loss_backward", multi_margin_fn, K_MULTI_MARGIN_BW},
    {"multi_margin_loss_backward.grad_input", multi_margin_fn, K_MULTI_MARGIN_BW},
    {"multilabel_margin_loss_forward", mlml_fn, K_MLML},
    {"multilabel_margin_loss_forward.output", mlml_fn, K_MLML},
    {"multilabel_margin_loss_backward", mlml_fn, K_MLML_BW},
    {"multilabel_margin_loss_backward.grad_input", mlml_fn, K_MLML_BW},
    R2("upsample_bicubic2d", interp_fn, K_BICUBIC),
    {"upsample_bicubic2d_backward", interp_fn, K_BICUBIC},
    {"upsample_bicubic2d_backward.grad_input", interp_fn, K_BICUBIC},
    R2("_upsample_bilinear2d_aa", interp_fn, K_BILINEAR_AA),
    {"_upsample_bilinear2d_aa_backward", interp_fn, K_BILINEAR_AA},
    {"_upsample_bilinear2d_aa_backward.grad_input", interp_fn, K_BILINEAR_AA},
    R2("_embedding_bag", ebag_fn, K_EBAG),
    R2("_embedding_bag_forward_only", ebag_fn, K_EBAG),
    {"_embedding_bag_backward", ebag_bw_fn, K_EBAG_BW},
    R2("_embedding_bag_dense_backward", ebag_bw_fn, K_EBAG_DENSE_BW),
    R2("_embedding_bag_per_sample_weights_backward", ebag_psw_bw_fn, K_EBAG_PSW_BW),
    R2("grid_sampler_2d", grid_fn, 0),
    R2("grid_sampler_3d", grid_fn, 0),
    R2("grid_sampler_2d_backward", grid_fn, 0),
    R2("grid_sampler_3d_backward", grid_fn, 0),
    R2("_ctc_loss", ctc_fn, 0),
    {"embedding_renorm_", renorm_fn, 0},
    R2("embedding_renorm", renorm_fn, 0),
    R2("_ctc_loss_backward", ctc_fn, 0),
};
const int tpulw__nrows_nn2 = sizeof tpulw__rows_nn2 / sizeof tpulw__rows_nn2[0];

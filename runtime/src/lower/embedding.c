/* lower/embedding.c - embedding ops beyond index_select: _embedding_bag /
 * _embedding_bag_forward_only (sum / mean / max bags, + dense backward and
 * per_sample_weights backward), embedding_renorm_ (max_norm) and
 * embedding_dense_backward (index_add of the gradient rows).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "lower/internal.h"

enum { E_EBAG = 1, E_EBAG_BW, E_EBAG_DENSE_BW, E_EBAG_PSW_BW };

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
  if ((rc = tpulw__need_tpu(b, *idx))) return rc;
  if (*off && (rc = tpulw__need_tpu(b, *off))) return rc;
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
  if ((rc = tpulw__need_tpu(b, wt))) return rc;
  if ((rc = ebag_common(b, &idx, &off, &I, &B))) return rc;
  if (!off) return tpu_error(TPU_E_UNSUPPORTED, "embedding_bag: no offsets");
  const tpu_view *wv = &wt->view;
  int dt = wv->dtype;
  if ((rc = tpulw__float_only(b, dt))) return rc;
  if (wv->ndim != 2)
    return tpu_error(TPU_E_INVALID, "weight has to be a 2D Tensor, but got Tensor of dimension %d", wv->ndim);
  int mode = (int)tpulw__int(b, "mode", EB_SUM);
  int last = (int)tpulw__int(b, "include_last_offset", 0);
  int64_t pad = tpulw__int(b, "padding_idx", -1);
  int64_t V = wv->sizes[0], D = wv->sizes[1];
  if (pad < -1 || pad >= V) pad = -1; /* ATen passes a wrapped index or -1 */
  const tpulw_tensor *psw = tpulw__tensor_arg(b, "per_sample_weights");
  if (psw) {
    if ((rc = tpulw__need_tpu(b, psw))) return rc;
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
  if ((rc = tpulw__need_tpu(b, gt)) || (rc = tpulw__need_tpu(b, o2t)) || (rc = tpulw__need_tpu(b, bst))) return rc;
  if ((rc = ebag_common(b, &idx, &off, &I, &B))) return rc;
  if (b->op == E_EBAG_BW && tpulw__int(b, "sparse", 0))
    return tpu_error(TPU_E_UNSUPPORTED, "embedding_bag: sparse gradients");
  int dt = gt->view.dtype;
  if ((rc = tpulw__float_only(b, dt))) return rc;
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
    if ((rc = tpulw__need_tpu(b, mit))) return rc;
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
  if ((rc = tpulw__need_tpu(b, gt)) || (rc = tpulw__need_tpu(b, wt)) || (rc = tpulw__need_tpu(b, o2t))) return rc;
  if ((rc = ebag_common(b, &idx, &off, &I, &B))) return rc;
  int mode = (int)tpulw__int(b, "mode", EB_SUM);
  if (mode != EB_SUM)
    return tpu_error(TPU_E_INVALID, "embedding_bag_backward: per_sample_weights only supported for mode='sum'");
  int dt = gt->view.dtype;
  if ((rc = tpulw__float_only(b, dt))) return rc;
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
  if ((rc = tpulw__need_tpu(b, self)) || (rc = tpulw__need_tpu(b, it))) return rc;
  const tpu_view *v = &self->view;
  int dt = v->dtype;
  if ((rc = tpulw__float_only(b, dt))) return rc;
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
  tpuir_val norm = D ? tpulw__pnorm_last(b, w, p) : tpulw__full(b, cdt, 1, &V, 0);
  tpuir_val nd = tpulw__convert(b, norm, TPU_F64);
  tpuir_val scale = tpulw__bin(b, TPUIR_DIV, tpulw__const(b, TPU_F64, max_norm), tpulw__bin_c(b, TPUIR_ADD, nd, 1e-7));
  tpuir_val on = tpulw__bin(b, TPUIR_AND, tpulw__bin_c(b, TPUIR_GT, hit, 0), tpulw__bin_c(b, TPUIR_GT, nd, max_norm));
  int64_t v1[2] = {V, 1};
  tpuir_val sc = tpulw__reshape(b, tpulw__convert(b, tpulw__sel(b, on, scale, tpulw__const(b, TPU_F64, 1)), cdt), 2, v1);
  return tpulw__result_as(b, tpulw__bin(b, TPUIR_MUL, w, sc), dt);
}

/* ---- embedding_dense_backward ------------------------------------------- */

static int embedding_bw_fn(tpulw__b *b) {
  const tpulw_tensor *go = tpulw__tensor_arg(b, "grad_output");
  const tpulw_tensor *ind = tpulw__tensor_arg(b, "indices");
  if (!go || !ind || ind->device < 0)
    return tpu_error(TPU_E_UNSUPPORTED, "embedding_dense_backward: missing operand");
  if (ind->view.dtype != TPU_I64 && ind->view.dtype != TPU_I32)
    return tpu_error(TPU_E_INVALID, "embedding_backward: indices must be int32 or int64");
  int dt = go->view.dtype;
  if (!tpu_dtype_is_float(dt))
    return tpu_error(TPU_E_UNSUPPORTED, "embedding_dense_backward: dtype");
  int cdt = tpulw__opmath(dt);
  int64_t nw = tpulw__int(b, "num_weights", 0);
  int64_t pad = tpulw__int(b, "padding_idx", -1);
  int scale = (int)tpulw__int(b, "scale_grad_by_freq", 0);
  tpuir_val g = tpulw__convert(b, tpulw__tensor(b, go), cdt);
  tpulw__shape gs = tpulw__info(b, g);
  int64_t k = tpu_view_numel(&ind->view);
  int64_t dsz = gs.ndim ? gs.sizes[gs.ndim - 1] : 1;
  int64_t g2[2] = {k, dsz}, o2[2] = {nw, dsz};
  g = tpulw__reshape(b, g, 2, g2);
  tpuir_val idx = tpulw__convert(b, tpulw__reshape(b, tpulw__tensor(b, ind), 1, &k), TPU_I64);
  tpuir_val zero = tpulw__const(b, cdt, 0);
  if (pad >= 0) {
    tpuir_val keep = tpulw__bin(b, TPUIR_NE, idx, tpulw__const(b, TPU_I64, pad));
    int64_t k1[2] = {k, 1};
    g = tpulw__sel(b, tpulw__reshape(b, keep, 2, k1), g, zero);
  }
  if (scale) {
    tpuir_val cnt = tpuir_index_add(b->g, tpulw__full(b, cdt, 1, &nw, 0), 0, idx,
                                    tpulw__full(b, cdt, 1, &k, 1));
    tpuir_val per = tpuir_index_select(b->g, cnt, 0, idx);
    int64_t k1[2] = {k, 1};
    g = tpulw__bin(b, TPUIR_DIV, g, tpulw__reshape(b, per, 2, k1));
  }
  b->sync = 1;
  tpuir_val r = tpuir_index_add(b->g, tpulw__full(b, cdt, 2, o2, 0), 0, idx, g);
  return tpulw__result_as(b, r, dt);
}

#define R2(n, fn, code) {n, fn, code}, {n ".out", fn, code}

const tpulw__row tpulw__rows_embedding[] = {
    R2("_embedding_bag", ebag_fn, E_EBAG),
    R2("_embedding_bag_forward_only", ebag_fn, E_EBAG),
    {"_embedding_bag_backward", ebag_bw_fn, E_EBAG_BW},
    R2("_embedding_bag_dense_backward", ebag_bw_fn, E_EBAG_DENSE_BW),
    R2("_embedding_bag_per_sample_weights_backward", ebag_psw_bw_fn, E_EBAG_PSW_BW),
    {"embedding_renorm_", renorm_fn, 0},
    R2("embedding_renorm", renorm_fn, 0),
    {"embedding_dense_backward", embedding_bw_fn, 0},
    {"embedding_dense_backward.out", embedding_bw_fn, 0},
};
const int tpulw__nrows_embedding = sizeof tpulw__rows_embedding / sizeof tpulw__rows_embedding[0];

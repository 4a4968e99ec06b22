/* lower/transformer.c - the inference fast path of torch's transformer
 * modules. In eval mode without autograd, nn.MultiheadAttention calls
 * _native_multi_head_attention and nn.TransformerEncoderLayer (so
 * nn.TransformerEncoder) _transformer_encoder_layer_fwd instead of their
 * Python code; each lowers here to one graph: the projections on the
 * matrix unit, the attention as one TPUIR_ATTENTION node on the vTPU (the
 * scores never stored whole; explicit scores and softmax on PJRT, whose
 * emitter has no attention node, for float64, and wherever the weights
 * are asked for).
 * Also _masked_softmax and _transform_bias_rescale_qkv, two of the ops
 * torch's CPU kernel is built from.
 *
 * Semantics are CPU's (aten/native/transformers/attention.cpp):
 * q = (x Wq^T + bq) / sqrt(head_dim), k = x Wk^T + bk, v = x Wv^T + bv;
 * a mask that is not bool counts as "masked where nonzero" (CPU converts
 * it with .to(bool), so the 0/-inf float masks the modules pass work as
 * masks and other float values mask too); masked scores are -inf and a
 * row with every key masked is NaN (softmax of -inf everywhere); the
 * weights, with need_weights, are the probabilities averaged over heads
 * (average_attn_weights) or per head, else undefined. Intermediate values
 * stay in f32 (float16/bfloat16 operands are rounded once more than on CPU
 * only where CPU rounds its intermediates: never less accurate).
 */
#include <math.h>
#include <string.h>

#include "lower/internal.h"
#include "tpu_exec.h"

/* x @ w^T + bias (bias < 0: none) over x's last dim: x [..., K] (any
 * dtype; converted to w's), w [N, K] -> [..., N] in acc. */
static tpuir_val linear(tpulw__b *b, tpuir_val x, tpuir_val w, tpuir_val bias, int acc) {
  if (x < 0 || w < 0) return x < 0 ? x : w;
  tpulw__shape xs = tpulw__info(b, x), ws = tpulw__info(b, w);
  x = tpulw__convert(b, x, ws.dtype);
  int64_t rows = 1, K = xs.sizes[xs.ndim - 1], N = ws.sizes[0];
  for (int i = 0; i < xs.ndim - 1; i++) rows *= xs.sizes[i];
  int64_t s2[2] = {rows, K}, one[1] = {1};
  tpuir_val r = tpuir_dot_general(b->g, tpulw__reshape(b, x, 2, s2), w, 0, NULL, NULL, 1, one,
                                  one, b->ctx->precision, acc);
  if (bias >= 0) r = tpulw__bin(b, TPUIR_ADD, r, tpulw__convert(b, bias, acc));
  int64_t out[TPU_MAX_DIMS];
  memcpy(out, xs.sizes, sizeof(int64_t) * (size_t)xs.ndim);
  out[xs.ndim - 1] = N;
  return tpulw__reshape(b, r, xs.ndim, out);
}

/* rows [lo, hi) of a 2-D value, or elements [lo, hi) of a 1-D one */
static tpuir_val rows(tpulw__b *b, tpuir_val v, int64_t lo, int64_t hi) {
  tpulw__shape s = tpulw__info(b, v);
  int64_t st[2] = {lo, 0}, lim[2] = {hi, s.ndim > 1 ? s.sizes[1] : 0}, one[2] = {1, 1};
  return tpuir_slice(b->g, v, st, lim, one);
}

/* [..., lo:hi) along the last dim of a 3-D value */
static tpuir_val cols(tpulw__b *b, tpuir_val v, int64_t lo, int64_t hi) {
  tpulw__shape s = tpulw__info(b, v);
  int64_t st[3] = {0, 0, lo}, lim[3] = {s.sizes[0], s.sizes[1], hi}, one[3] = {1, 1, 1};
  return tpuir_slice(b->g, v, st, lim, one);
}

/* [B, T, H*dh] -> [B, H, T, dh] and back */
static tpuir_val split_heads(tpulw__b *b, tpuir_val x, int64_t H) {
  tpulw__shape s = tpulw__info(b, x);
  int64_t s4[4] = {s.sizes[0], s.sizes[1], H, s.sizes[2] / H}, perm[4] = {0, 2, 1, 3};
  return tpuir_transpose(b->g, tpulw__reshape(b, x, 4, s4), perm);
}
static tpuir_val merge_heads(tpulw__b *b, tpuir_val x) {
  tpulw__shape s = tpulw__info(b, x);
  int64_t perm[4] = {0, 2, 1, 3}, s3[3] = {s.sizes[0], s.sizes[2], s.sizes[1] * s.sizes[3]};
  return tpulw__reshape(b, tpuir_transpose(b->g, x, perm), 3, s3);
}

/* (q + bias) * scale, k + bias, v + bias from projections without bias */
static void add_bias_rescale(tpulw__b *b, tpuir_val *q, tpuir_val *k, tpuir_val *v,
                             tpuir_val bias, int64_t D, int64_t H, int acc) {
  bias = tpulw__convert(b, bias, acc);
  double scale = 1.0 / sqrt((double)(D / H));
  *q = tpulw__bin_c(b, TPUIR_MUL, tpulw__bin(b, TPUIR_ADD, *q, rows(b, bias, 0, D)), scale);
  *k = tpulw__bin(b, TPUIR_ADD, *k, rows(b, bias, D, 2 * D));
  *v = tpulw__bin(b, TPUIR_ADD, *v, rows(b, bias, 2 * D, 3 * D));
}

/* The bool "masked" value of a mask for scores of shape `in` (ndim nd,
 * softmax over the last dim), at a shape that broadcasts to it (a key
 * padding mask as [B, 1, 1, L]; callers broadcast), with _masked_softmax's
 * mask_type rules (0: [L, L] attention mask, 1: [B, L] key padding mask,
 * both only for a 2-D mask and 4-D scores; 2 (or either of those
 * otherwise): the scores' shape) and CPU's messages. */
static tpuir_val mask_for(tpulw__b *b, const tpulw_tensor *mt, int nd, const int64_t *in,
                          int has_type, int64_t type) {
  tpuir_val m = tpulw__tensor_compact(b, mt); /* merge_masks passes expanded views */
  if (mt->view.dtype != TPU_BOOL)
    m = tpulw__bin(b, TPUIR_NE, m, tpulw__const(b, mt->view.dtype, 0.0));
  const tpu_view *mv = &mt->view;
  if (mv->ndim == 2 && nd == 4) {
    if (!has_type) return tpu_error(TPU_E_INVALID, "Mask Type should be defined");
  } else {
    type = 2;
  }
  if (type == 0) {
    if (mv->sizes[0] != in[2] || mv->sizes[1] != in[2])
      return tpu_error(TPU_E_INVALID, "For mask_type == 0 mask shape should be (L, L)");
  } else if (type == 1) {
    if (mv->sizes[0] != in[0] || mv->sizes[1] != in[2])
      return tpu_error(TPU_E_INVALID, "For mask_type == 1 mask shape should be (B, L)");
    tpulw__shape ms = tpulw__info(b, m);
    int64_t s4[4] = {ms.sizes[0], 1, 1, ms.sizes[1]};
    m = tpulw__reshape(b, m, 4, s4);
  } else {
    int same = mv->ndim == nd;
    for (int i = 0; same && i < nd; i++) same = mv->sizes[i] == in[i];
    if (!same)
      return tpu_error(TPU_E_INVALID, "For mask_type == 2 mask shape should match input shape");
  }
  return m;
}

/* softmax over the last dim of s (f32) with masked (bool, s's shape or
 * -1) entries at -inf: a fully masked row is NaN, as on CPU */
static tpuir_val masked_softmax(tpulw__b *b, tpuir_val s, tpuir_val masked) {
  tpulw__shape ss = tpulw__info(b, s);
  if (masked >= 0) s = tpulw__sel(b, masked, tpulw__const(b, ss.dtype, -INFINITY), s);
  return tpulw__softmax(b, s, ss.ndim ? 1u << (ss.ndim - 1) : 0, 0);
}

/* The arguments of _native_multi_head_attention (and the attention part of
 * _transformer_encoder_layer_fwd). */
typedef struct mha_args {
  const tpulw_tensor *query, *key, *value, *wqkv, *bqkv, *wp, *bp, *mask;
  int64_t E, H;
  int has_type;
  int64_t type;
} mha_args;

static int mha_check(tpulw__b *b, const mha_args *a) {
  const tpu_view *q = &a->query->view, *k = &a->key->view, *v = &a->value->view;
  const tpu_view *w = &a->wqkv->view, *bias = &a->bqkv->view;
  if (q->ndim != 3) return tpu_error(TPU_E_INVALID, "expected 3-D `query`, got %d-D tensor", q->ndim);
  if (q->sizes[2] != a->E)
    return tpu_error(TPU_E_INVALID, "passed-in embed_dim %lld didn't match last dim of query %lld",
                     (long long)a->E, (long long)q->sizes[2]);
  if (k->ndim != 3) return tpu_error(TPU_E_INVALID, "expected 3-D `key`, got %d-D tensor", k->ndim);
  if (v->ndim != 3) return tpu_error(TPU_E_INVALID, "expected 3-D `value`, got %d-D tensor", v->ndim);
  for (int i = 0; i < 3; i++)
    if (k->sizes[i] != q->sizes[i] || v->sizes[i] != q->sizes[i])
      return tpu_error(TPU_E_INVALID, "expected `query`/`key`/`value` shapes to match");
  if (w->ndim != 2)
    return tpu_error(TPU_E_INVALID, "expected 2-D `qkv_weight`, got %d-D tensor", w->ndim);
  if (w->sizes[0] != 3 * a->E)
    return tpu_error(TPU_E_INVALID, "expected `qkv_weight` first dim to be 3x embed_dim");
  if (w->sizes[1] != a->E)
    return tpu_error(TPU_E_INVALID, "expected `qkv_weight` second dim to be embed_Dim");
  if (bias->ndim != 1)
    return tpu_error(TPU_E_INVALID, "expected 1-D `qkv_bias`, got %d-D tensor", bias->ndim);
  if (bias->sizes[0] != 3 * a->E)
    return tpu_error(TPU_E_INVALID,
                     "expected `qkv_bias` first dim and first dim of query to be equal");
  if (a->H <= 0 || a->E % a->H != 0)
    return tpu_error(TPU_E_INVALID, "`embed_dim` must divide evenly by `num_heads`");
  const tpu_view *wp = &a->wp->view;
  if (wp->ndim != 2 || wp->sizes[1] != a->E) {
    char s1[64], s2[64];
    int64_t m1[2] = {q->sizes[0] * q->sizes[1], a->E};
    return tpu_error(TPU_E_INVALID, "mat1 and mat2 shapes cannot be multiplied (%s and %s)",
                     tpulw__fmt_list(s1, sizeof s1, 2, m1),
                     tpulw__fmt_list(s2, sizeof s2, wp->ndim, wp->sizes));
  }
  const tpulw_tensor *ts[] = {a->query, a->key, a->value, a->wqkv, a->bqkv, a->wp, a->bp};
  for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) {
    int dt = ts[i]->view.dtype;
    if (dt != TPU_F32 && dt != TPU_BF16 && dt != TPU_F16 && dt != TPU_F64)
      return tpulw__float_only(b, dt);
    if (dt != q->dtype)
      return tpu_error(TPU_E_INVALID,
                       "expected m1 and m2 to have the same dtype, but got: %s != %s",
                       tpu_dtype_name(q->dtype), tpu_dtype_name(dt));
  }
  return TPU_OK;
}

/* The attention block on x (query; key and value the same tensors or
 * not): the projected output [B, T, E] (acc dtype) and, with need_weights,
 * the weights (*w; else untouched). */
static tpuir_val mha(tpulw__b *b, const mha_args *a, tpuir_val xq, tpuir_val xk, tpuir_val xv,
                     int need_weights, int average, tpuir_val *w) {
  int acc = tpulw__opmath(a->query->view.dtype);
  int64_t E = a->E, H = a->H;
  tpuir_val W = tpulw__tensor(b, a->wqkv), q, k, v;
  if (xq == xk && xk == xv) { /* self-attention: one GEMM for the three */
    tpuir_val qkv = linear(b, xq, W, -1, acc);
    q = cols(b, qkv, 0, E);
    k = cols(b, qkv, E, 2 * E);
    v = cols(b, qkv, 2 * E, 3 * E);
  } else {
    q = linear(b, xq, rows(b, W, 0, E), -1, acc);
    k = linear(b, xk, rows(b, W, E, 2 * E), -1, acc);
    v = linear(b, xv, rows(b, W, 2 * E, 3 * E), -1, acc);
  }
  add_bias_rescale(b, &q, &k, &v, tpulw__tensor(b, a->bqkv), E, H, acc);
  q = split_heads(b, q, H);
  k = split_heads(b, k, H);
  v = split_heads(b, v, H);
  tpulw__shape qs = tpulw__info(b, q);
  int64_t sc[4] = {qs.sizes[0], H, qs.sizes[2], qs.sizes[2]}; /* the scores' shape */
  tpuir_val masked = -1;
  if (a->mask) LW_TRY(masked = mask_for(b, a->mask, 4, sc, a->has_type, a->type));
  const tpux_executor *ex = tpux_executor_active();
  tpuir_val ctx;
  if (!need_weights && acc == TPU_F32 && ex && strcmp(ex->name, "vtpu") == 0) {
    tpuir_val bias = -1; /* 0 / -inf at the mask's shape, broadcast as a view */
    if (masked >= 0)
      bias = tpulw__bcast(b, tpulw__sel(b, masked, tpulw__const(b, TPU_F32, -INFINITY),
                                        tpulw__const(b, TPU_F32, 0.0)),
                          4, sc);
    ctx = tpulw__convert(b, tpulw__attention(b, q, k, v, bias, 1.0, 0, NULL), acc);
  } else {
    static const int64_t b01[2] = {0, 1}, c3[1] = {3}, c2[1] = {2};
    tpuir_val s = tpuir_dot_general(b->g, q, k, 2, b01, b01, 1, c3, c3, b->ctx->precision, acc);
    tpuir_val p = masked_softmax(b, s, masked);
    ctx = tpuir_dot_general(b->g, p, v, 2, b01, b01, 1, c3, c2, b->ctx->precision, acc);
    if (need_weights)
      *w = average ? tpulw__bin_c(b, TPUIR_DIV, tpulw__reduce_dims(b, TPUIR_RED_SUM, p, 1u << 1, 0),
                                  (double)H)
                   : p;
  }
  return linear(b, merge_heads(b, ctx), tpulw__tensor(b, a->wp), tpulw__tensor(b, a->bp), acc);
}

static int mha_args_of(tpulw__b *b, const char *x, const char *heads, mha_args *a) {
  memset(a, 0, sizeof *a);
  a->query = tpulw__tensor_arg(b, x);
  a->key = strcmp(x, "query") ? a->query : tpulw__tensor_arg(b, "key");
  a->value = strcmp(x, "query") ? a->query : tpulw__tensor_arg(b, "value");
  a->wqkv = tpulw__tensor_arg(b, "qkv_weight");
  a->bqkv = tpulw__tensor_arg(b, "qkv_bias");
  a->wp = tpulw__tensor_arg(b, "proj_weight");
  a->bp = tpulw__tensor_arg(b, "proj_bias");
  a->mask = tpulw__tensor_arg(b, "mask");
  a->E = tpulw__int(b, "embed_dim", 0);
  a->H = tpulw__int(b, heads, 0);
  a->has_type = !tpulw__none(b, "mask_type");
  a->type = tpulw__int(b, "mask_type", 2);
  if (!a->query || !a->key || !a->value || !a->wqkv || !a->bqkv || !a->wp || !a->bp)
    return tpu_error(TPU_E_UNSUPPORTED, "%s: missing operand", b->base);
  return TPU_OK;
}

static int mha_fn(tpulw__b *b) {
  mha_args a;
  int rc = mha_args_of(b, "query", "num_head", &a);
  if (rc < 0 || (rc = mha_check(b, &a)) < 0) return rc;
  int dt = a.query->view.dtype;
  int need_weights = (int)tpulw__int(b, "need_weights", 1);
  const int64_t *qs = a.query->view.sizes;
  if (qs[0] * qs[1] * a.E == 0) /* CPU: empty_like(query), no weights */
    return tpulw__result(b, tpulw__full(b, dt, 3, qs, 0.0));
  tpuir_val w = -1;
  tpuir_val out = mha(b, &a, tpulw__tensor(b, a.query), tpulw__tensor(b, a.key),
                      tpulw__tensor(b, a.value), need_weights,
                      (int)tpulw__int(b, "average_attn_weights", 1), &w);
  if ((rc = tpulw__result_as(b, out, dt)) < 0) return rc;
  /* without need_weights the second result is undefined, as CPU's */
  return need_weights ? tpulw__result_as(b, w, dt) : rc;
}

/* _transformer_encoder_layer_fwd: CPU's transformer_encoder_layer_forward
 * (norm_first: x + attn(norm1(x)), then + ffn(norm2(.)); else norm1(x +
 * attn(x)), then norm2(. + ffn(.))), the ffn linear2(act(linear1(x))) with
 * act exact gelu (use_gelu) or relu. */
static int encoder_fn(tpulw__b *b) {
  mha_args a;
  int rc = mha_args_of(b, "src", "num_heads", &a);
  if (rc < 0 || (rc = mha_check(b, &a)) < 0) return rc;
  int dt = a.query->view.dtype, acc = tpulw__opmath(dt);
  const char *names[] = {"norm_weight_1", "norm_bias_1", "norm_weight_2", "norm_bias_2",
                         "ffn_weight_1", "ffn_bias_1", "ffn_weight_2", "ffn_bias_2"};
  tpuir_val p[8];
  for (int i = 0; i < 8; i++) {
    const tpulw_tensor *t = tpulw__tensor_arg(b, names[i]);
    if (!t) return tpu_error(TPU_E_UNSUPPORTED, "%s: missing %s", b->base, names[i]);
    if (t->view.dtype != dt)
      return tpu_error(TPU_E_INVALID, "expected m1 and m2 to have the same dtype, but got: %s != %s",
                       tpu_dtype_name(dt), tpu_dtype_name(t->view.dtype));
    p[i] = tpulw__convert(b, tpulw__tensor(b, t), i == 4 || i == 6 ? dt : acc);
  }
  const int64_t *ss = a.query->view.sizes;
  tpuir_val src = tpulw__tensor(b, a.query);
  if (ss[0] * ss[1] * ss[2] == 0) return tpulw__result(b, src); /* CPU: src.clone() */
  double eps = tpulw__float(b, "eps", 1e-5);
  int norm_first = (int)tpulw__int(b, "norm_first", 0);
  tpuir_val x = tpulw__convert(b, src, acc), h;
  h = norm_first ? tpulw__layer_norm(b, x, 2, &p[0], &p[1], eps, NULL, NULL) : x;
  x = tpulw__bin(b, TPUIR_ADD, mha(b, &a, h, h, h, 0, 1, NULL), x);
  if (!norm_first) x = tpulw__layer_norm(b, x, 2, &p[0], &p[1], eps, NULL, NULL);
  h = norm_first ? tpulw__layer_norm(b, x, 2, &p[2], &p[3], eps, NULL, NULL) : x;
  h = tpulw__gelu_or_relu(b, linear(b, h, p[4], p[5], acc), (int)tpulw__int(b, "use_gelu", 0));
  x = tpulw__bin(b, TPUIR_ADD, linear(b, h, p[6], p[7], acc), x);
  if (!norm_first) x = tpulw__layer_norm(b, x, 2, &p[2], &p[3], eps, NULL, NULL);
  return tpulw__result_as(b, x, dt);
}

/* _masked_softmax(self, mask, dim, mask_type): softmax along dim with the
 * mask's True entries excluded (mask_for's shape rules; CPU requires a
 * bool mask). */
static int masked_softmax_fn(tpulw__b *b) {
  const tpulw_tensor *self = tpulw__tensor_arg(b, "self"), *mt = tpulw__tensor_arg(b, "mask");
  if (!self || !mt) return tpu_error(TPU_E_UNSUPPORTED, "_masked_softmax: missing operand");
  int dt = self->view.dtype, rc = tpulw__float_only(b, dt);
  if (rc < 0) return rc;
  if (mt->view.dtype != TPU_BOOL)
    return tpu_error(TPU_E_INVALID, "Mask should be a boolean tensor");
  int nd = self->view.ndim, dim;
  if ((rc = tpulw__wrap_dim(tpulw__none(b, "dim") ? nd - 1 : tpulw__int(b, "dim", -1), nd, &dim)) < 0)
    return rc;
  tpuir_val masked = mask_for(b, mt, nd, self->view.sizes, !tpulw__none(b, "mask_type"),
                              tpulw__int(b, "mask_type", 2));
  LW_TRY(masked);
  masked = tpulw__bcast(b, masked, nd, self->view.sizes);
  tpuir_val x = tpulw__convert(b, tpulw__tensor(b, self), tpulw__opmath(dt));
  if (dim == nd - 1 || nd == 0) return tpulw__result_as(b, masked_softmax(b, x, masked), dt);
  /* softmax along dim: swap it with the last (a swap is its own inverse) */
  int64_t perm[TPU_MAX_DIMS];
  for (int i = 0; i < nd; i++) perm[i] = i == dim ? nd - 1 : i == nd - 1 ? dim : i;
  tpuir_val y = masked_softmax(b, tpuir_transpose(b->g, x, perm), tpuir_transpose(b->g, masked, perm));
  return tpulw__result_as(b, tpuir_transpose(b->g, y, perm), dt);
}

/* _transform_bias_rescale_qkv(qkv [B, T, 3D], qkv_bias [3D], num_heads):
 * q, k, v [B, H, T, D/H] (mha's first step after the projection). */
static int qkv_fn(tpulw__b *b) {
  const tpulw_tensor *qkv = tpulw__tensor_arg(b, "qkv"), *bias = tpulw__tensor_arg(b, "qkv_bias");
  if (!qkv || !bias) return tpu_error(TPU_E_UNSUPPORTED, "%s: missing operand", b->base);
  int dt = qkv->view.dtype, rc = tpulw__float_only(b, dt);
  if (rc < 0) return rc;
  int64_t H = tpulw__int(b, "num_heads", 1);
  if (qkv->view.ndim != 3 || bias->view.ndim != 1 || bias->view.sizes[0] != qkv->view.sizes[2])
    return tpu_error(TPU_E_INVALID, "%s: expected qkv [B, T, 3D] and qkv_bias [3D]", b->base);
  int64_t D = qkv->view.sizes[2] / 3;
  if (qkv->view.sizes[2] % 3 != 0 || H <= 0 || D % H != 0)
    return tpu_error(TPU_E_INVALID, "Expected condition D %% num_head == 0 to be true");
  int acc = tpulw__opmath(dt);
  tpuir_val x = tpulw__convert(b, tpulw__tensor(b, qkv), acc);
  tpuir_val q = cols(b, x, 0, D), k = cols(b, x, D, 2 * D), v = cols(b, x, 2 * D, 3 * D);
  add_bias_rescale(b, &q, &k, &v, tpulw__tensor(b, bias), D, H, acc);
  if ((rc = tpulw__result_as(b, split_heads(b, q, H), dt)) < 0 ||
      (rc = tpulw__result_as(b, split_heads(b, k, H), dt)) < 0)
    return rc;
  return tpulw__result_as(b, split_heads(b, v, H), dt);
}

const tpulw__row tpulw__rows_transformer[] = {
    {"_masked_softmax", masked_softmax_fn, 0},
    {"_native_multi_head_attention", mha_fn, 0},
    {"_transform_bias_rescale_qkv", qkv_fn, 0},
    {"_transformer_encoder_layer_fwd", encoder_fn, 0},
};
const int tpulw__nrows_transformer = sizeof tpulw__rows_transformer / sizeof tpulw__rows_transformer[0];

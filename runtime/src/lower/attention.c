/* lower/attention.c - fused scaled dot-product attention: the forward and
 * backward of torch's "overrideable" SDPA backend, which the glue
 * (torch_tpu/csrc/kernels.cpp) calls as torch_tpu::sdpa_fwd / sdpa_bwd. One
 * TPUIR_ATTENTION (TPUIR_ATTENTION_GRAD) node computes the packed f32
 * results; out, lse and dq, dk, dv are views of them (out and the
 * gradients converted to the operands' dtype).
 */
#include <math.h>

#include "lower/internal.h"

typedef struct sdpa_args {
  tpuir_val q, k, v, bias;
  int64_t B, H, Tq, Tk, E, Ev;
  double scale;
  int causal, dt;
} sdpa_args;

static int sdpa_setup(tpulw__b *b, sdpa_args *a) {
  const tpulw_tensor *q = tpulw__tensor_arg(b, "query"), *k = tpulw__tensor_arg(b, "key"),
                     *v = tpulw__tensor_arg(b, "value");
  if (!q || !k || !v) return tpu_error(TPU_E_INVALID, "%s: missing query, key or value", b->base);
  a->dt = q->view.dtype;
  if (a->dt != TPU_F32 && a->dt != TPU_BF16 && a->dt != TPU_F16)
    return tpu_error(TPU_E_TYPE, "%s: query must be float32, bfloat16 or float16, got %s",
                     b->base, tpulw__torch_name(a->dt));
  if (k->view.dtype != a->dt || v->view.dtype != a->dt)
    return tpu_error(TPU_E_TYPE,
                     "Expected query, key, and value to have the same dtype, but got query.dtype: "
                     "%s key.dtype: %s and value.dtype: %s instead.",
                     tpulw__torch_name(a->dt), tpulw__torch_name(k->view.dtype),
                     tpulw__torch_name(v->view.dtype));
  a->q = tpulw__tensor(b, q);
  a->k = tpulw__tensor(b, k);
  a->v = tpulw__tensor(b, v);
  tpulw__shape qs = tpulw__info(b, a->q), ks = tpulw__info(b, a->k), vs = tpulw__info(b, a->v);
  if (qs.ndim != 4 || ks.ndim != 4 || vs.ndim != 4)
    return tpu_error(TPU_E_INVALID, "%s: query, key and value must be 4-D [B, H, T, E]", b->base);
  a->B = qs.sizes[0], a->H = qs.sizes[1], a->Tq = qs.sizes[2], a->E = qs.sizes[3];
  a->Tk = ks.sizes[2], a->Ev = vs.sizes[3];
  a->causal = (int)tpulw__int(b, "is_causal", 0);
  a->scale = tpulw__none(b, "scale") ? 1.0 / sqrt((double)a->E) : tpulw__float(b, "scale", 1.0);
  a->bias = -1;
  const tpulw_tensor *m = tpulw__tensor_arg(b, "attn_bias");
  if (m) {
    tpuir_val mv = tpulw__tensor(b, m);
    if (m->view.dtype == TPU_BOOL) /* True takes part: 0, False: -inf */
      mv = tpulw__sel(b, mv, tpulw__const(b, TPU_F32, 0.0), tpulw__const(b, TPU_F32, -INFINITY));
    else if (!tpu_dtype_is_float(m->view.dtype))
      return tpu_error(TPU_E_TYPE, "%s: attn_mask must be bool or float, got %s", b->base,
                       tpulw__torch_name(m->view.dtype));
    else if (m->view.dtype == TPU_F64)
      mv = tpulw__convert(b, mv, TPU_F32);
    int64_t full[4] = {a->B, a->H, a->Tq, a->Tk};
    tpulw__shape ms = tpulw__info(b, mv);
    int ok = ms.ndim <= 4;
    for (int i = 0; ok && i < ms.ndim; i++) {
      int64_t s = ms.sizes[ms.ndim - 1 - i];
      ok = s == 1 || s == full[3 - i];
    }
    if (!ok)
      return tpu_error(TPU_E_INVALID, "%s: attn_mask does not broadcast to [%lld, %lld, %lld, %lld]",
                       b->base, (long long)a->B, (long long)a->H, (long long)a->Tq,
                       (long long)a->Tk);
    a->bias = tpulw__bcast(b, mv, 4, full);
  }
  return TPU_OK;
}

/* v[..., lo:hi] of a [d0, d1, n] or [d0, d1, d2, n] value. */
static tpuir_val last_slice(tpulw__b *b, tpuir_val v, int64_t lo, int64_t hi) {
  tpulw__shape s = tpulw__info(b, v);
  int64_t st[4] = {0}, lim[4], one[4] = {1, 1, 1, 1};
  for (int i = 0; i < s.ndim; i++) lim[i] = s.sizes[i];
  st[s.ndim - 1] = lo;
  lim[s.ndim - 1] = hi;
  return tpuir_slice(b->g, v, st, lim, one);
}

tpuir_val tpulw__attention(tpulw__b *b, tpuir_val q, tpuir_val k, tpuir_val v, tpuir_val bias,
                           double scale, int causal, tpuir_val *lse) {
  tpuir_val r = tpuir_attention(b->g, q, k, v, bias, scale, causal, b->ctx->precision);
  if (r < 0) return r;
  tpulw__shape s = tpulw__info(b, r);
  int64_t Ev = s.sizes[3] - 1, ls[3] = {s.sizes[0], s.sizes[1], s.sizes[2]};
  if (lse) *lse = tpulw__reshape(b, last_slice(b, r, Ev, Ev + 1), 3, ls);
  return last_slice(b, r, 0, Ev);
}

static int sdpa_fwd(tpulw__b *b) {
  sdpa_args a;
  int rc = sdpa_setup(b, &a);
  if (rc) return rc;
  tpuir_val lse, out = tpulw__attention(b, a.q, a.k, a.v, a.bias, a.scale, a.causal, &lse);
  LW_TRY(out);
  if ((rc = tpulw__result_as(b, out, a.dt)) < 0) return rc;
  return tpulw__result(b, lse);
}

static int sdpa_bwd(tpulw__b *b) {
  sdpa_args a;
  int rc = sdpa_setup(b, &a);
  if (rc) return rc;
  const tpulw_tensor *go = tpulw__tensor_arg(b, "grad_out"), *o = tpulw__tensor_arg(b, "out"),
                     *l = tpulw__tensor_arg(b, "logsumexp");
  if (!go || !o || !l)
    return tpu_error(TPU_E_INVALID, "%s: missing grad_out, out or logsumexp", b->base);
  tpuir_val r = tpuir_attention_grad(b->g, a.q, a.k, a.v, tpulw__tensor(b, o),
                                     tpulw__tensor(b, go), tpulw__tensor(b, l), a.bias, a.scale,
                                     a.causal, b->ctx->precision);
  LW_TRY(r);
  int64_t nq = a.Tq * a.E, nk = a.Tk * a.E, nv = a.Tk * a.Ev;
  int64_t sq[4] = {a.B, a.H, a.Tq, a.E}, sk[4] = {a.B, a.H, a.Tk, a.E},
          sv[4] = {a.B, a.H, a.Tk, a.Ev};
  if ((rc = tpulw__result_as(b, tpulw__reshape(b, last_slice(b, r, 0, nq), 4, sq), a.dt)) < 0 ||
      (rc = tpulw__result_as(b, tpulw__reshape(b, last_slice(b, r, nq, nq + nk), 4, sk), a.dt)) < 0)
    return rc;
  return tpulw__result_as(b, tpulw__reshape(b, last_slice(b, r, nq + nk, nq + nk + nv), 4, sv),
                          a.dt);
}

const tpulw__row tpulw__rows_attention[] = {
    {"torch_tpu::sdpa_bwd", sdpa_bwd, 0},
    {"torch_tpu::sdpa_fwd", sdpa_fwd, 0},
};
const int tpulw__nrows_attention = sizeof tpulw__rows_attention / sizeof tpulw__rows_attention[0];

/* ir/attention.c - IR builders for TPUIR_ATTENTION and TPUIR_ATTENTION_GRAD
 * (tpuir_attention, tpuir_attention_grad): validation and shape inference.
 * The executor is exec/vtpu/attention.c.
 *
 * Node attribute layout (tpu_ir.h): list = operands (in[0..4) the first
 * four), kind = precision, a[0] = causal (0/1), a[1] = the bits of the
 * double scale (an attribute, so tpuir_hash keys programs by it).
 */
#include <stdlib.h>
#include <string.h>

#include "ir/internal.h"

static int is_float(int dt) { return dt == TPU_F32 || dt == TPU_BF16 || dt == TPU_F16; }

/* v's node, checked to be a float [B, H, rows, cols] value. */
static int operand4(const tpuir_graph *g, tpuir_val v, const char *what, const char *name,
                    const tpuir_node **out) {
  int rc = tpuir__operand(g, v, what, out);
  if (rc) return rc;
  if ((*out)->ndim != 4 || !is_float((*out)->dtype)) {
    char ty[96];
    tpuir__type_str(ty, sizeof ty, (*out)->dtype, (*out)->ndim, (*out)->sizes);
    return tpu_error(TPU_E_INVALID, "%s: %s must be a 4-D float value [B, H, T, E], got %s",
                     what, name, ty);
  }
  return TPU_OK;
}

static int same4(const tpuir_node *x, int64_t b, int64_t h, int64_t r, int64_t c) {
  return x->sizes[0] == b && x->sizes[1] == h && x->sizes[2] == r && x->sizes[3] == c;
}

/* Shared checks; ops[0..2] = q, k, v. Fills Tq, Tk, E, Ev. */
static int check_qkv(const tpuir_graph *g, const char *what, const tpuir_val *ops,
                     tpuir_val bias, int precision, int64_t dims[6]) {
  const tpuir_node *q, *k, *v;
  int rc;
  if ((rc = operand4(g, ops[0], what, "query", &q)) || (rc = operand4(g, ops[1], what, "key", &k)) ||
      (rc = operand4(g, ops[2], what, "value", &v)))
    return rc;
  if (k->dtype != q->dtype || v->dtype != q->dtype)
    return tpu_error(TPU_E_TYPE, "%s: query, key and value must share a dtype", what);
  int64_t B = q->sizes[0], H = q->sizes[1], Tq = q->sizes[2], E = q->sizes[3];
  int64_t Tk = k->sizes[2], Ev = v->sizes[3];
  if (!same4(k, B, H, Tk, E) || !same4(v, B, H, Tk, Ev))
    return tpu_error(TPU_E_INVALID,
                     "%s: key [B, H, Tk, E] and value [B, H, Tk, Ev] must match query [B, H, Tq, E]",
                     what);
  if (bias >= 0) {
    const tpuir_node *m;
    if ((rc = operand4(g, bias, what, "bias", &m))) return rc;
    if (!same4(m, B, H, Tq, Tk))
      return tpu_error(TPU_E_INVALID, "%s: bias must be [B, H, Tq, Tk]", what);
  }
  if (precision < TPU_PREC_DEFAULT || precision > TPU_PREC_FP32)
    return tpu_error(TPU_E_INVALID, "%s: bad precision %d", what, precision);
  dims[0] = B, dims[1] = H, dims[2] = Tq, dims[3] = Tk, dims[4] = E, dims[5] = Ev;
  return TPU_OK;
}

static tpuir_val make(tpuir_graph *g, int op, const char *what, int nops, const tpuir_val *ops,
                      int64_t last, const int64_t *dims, double scale, int causal, int precision) {
  tpuir_val *list = malloc((size_t)nops * sizeof *list);
  if (!list) return tpu_error(TPU_E_OOM, "%s: out of host memory", what);
  memcpy(list, ops, (size_t)nops * sizeof *list);
  tpuir_node *nd = tpuir__new_node(g, op);
  if (!nd) {
    free(list);
    return tpu_error(TPU_E_OOM, "%s: out of host memory", what);
  }
  nd->dtype = TPU_F32;
  nd->ndim = op == TPUIR_ATTENTION ? 4 : 3;
  nd->sizes[0] = dims[0];
  nd->sizes[1] = dims[1];
  if (op == TPUIR_ATTENTION) nd->sizes[2] = dims[2], nd->sizes[3] = last;
  else nd->sizes[2] = last;
  nd->kind = precision;
  nd->a[0] = causal != 0;
  memcpy(&nd->a[1], &scale, sizeof scale);
  nd->list = list;
  nd->nlist = nops;
  nd->nin = nops < 4 ? nops : 4;
  for (int i = 0; i < nd->nin; i++) nd->in[i] = ops[i];
  return tpuir__commit(g);
}

/* See tpu_ir.h. */
tpuir_val tpuir_attention(tpuir_graph *g, tpuir_val q, tpuir_val k, tpuir_val v,
                          tpuir_val bias, double scale, int causal, int precision) {
  tpuir_val ops[4] = {q, k, v, bias};
  int64_t d[6] = {0};
  int rc = check_qkv(g, "attention", ops, bias, precision, d);
  if (rc) return rc;
  return make(g, TPUIR_ATTENTION, "attention", bias >= 0 ? 4 : 3, ops, d[5] + 1, d, scale,
              causal, precision);
}

/* See tpu_ir.h. */
tpuir_val tpuir_attention_grad(tpuir_graph *g, tpuir_val q, tpuir_val k, tpuir_val v,
                               tpuir_val out, tpuir_val dout, tpuir_val lse, tpuir_val bias,
                               double scale, int causal, int precision) {
  const char *what = "attention_grad";
  tpuir_val ops[7] = {q, k, v, out, dout, lse, bias};
  int64_t d[6] = {0};
  int rc = check_qkv(g, what, ops, bias, precision, d);
  if (rc) return rc;
  const tpuir_node *o, *go, *l;
  if ((rc = operand4(g, out, what, "out", &o)) || (rc = operand4(g, dout, what, "dout", &go)))
    return rc;
  if (!same4(o, d[0], d[1], d[2], d[5]) || !same4(go, d[0], d[1], d[2], d[5]))
    return tpu_error(TPU_E_INVALID, "%s: out and dout must be [B, H, Tq, Ev]", what);
  if ((rc = tpuir__operand(g, lse, what, &l))) return rc;
  if (l->dtype != TPU_F32 || l->ndim != 3 || l->sizes[0] != d[0] || l->sizes[1] != d[1] ||
      l->sizes[2] != d[2])
    return tpu_error(TPU_E_INVALID, "%s: lse must be f32 [B, H, Tq]", what);
  int64_t last = d[2] * d[4] + d[3] * d[4] + d[3] * d[5];
  return make(g, TPUIR_ATTENTION_GRAD, what, bias >= 0 ? 7 : 6, ops, last, d, scale, causal,
              precision);
}

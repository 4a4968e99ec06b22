/* exec/vtpu/attention.c - vTPU executor of TPUIR_ATTENTION and
 * TPUIR_ATTENTION_GRAD (semantics in tpu_ir.h).
 *
 * Each (batch, head) pair is one task on the thread pool. Its q, k, v (and
 * for the gradient dout) are read once into matrix-unit operands: at
 * DEFAULT precision or for bf16 inputs bf16 values (products exact in f32,
 * as on the MXU), stored as bf16 where oneDNN multiplies bf16 natively and
 * as f32 elsewhere; f32 otherwise. Every operand is row-major (k and v are
 * also kept transposed, P and dS written both ways), so oneDNN reads them
 * in place. Queries then go in blocks of BQ rows, sized so that
 * a block's scores [BQ, Tk] stay in the core's cache between the two
 * products: S = q k^T * scale (+ bias, causal mask) by the matrix unit,
 * the softmax of each row in f32, then P v. Under the causal mask a block
 * only reads the keys up to its last query. The gradient recomputes S and
 * P = exp(S - lse) per block:
 *   dv += P^T dout, dP = dout v^T, dS = P (dP - D) * scale with
 *   D = rowsum(dout out), dq = dS k, dk += dS^T q,
 * accumulating dk and dv in the f32 result itself. The matrix unit runs
 * inside the task (a nested tpumxu call runs on the calling thread), so
 * nothing is shared between tasks.
 */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "exec/vtpu/internal.h"
#include "tpu_mxu.h"

/* operand storage: bf16; f32 holding bf16 values; f32 */
enum { OT_BF16, OT_F32R, OT_F32 };

typedef struct at_job {
  const tpu_view *q, *k, *v, *out, *dout, *lse, *bias; /* bias/out/dout/lse may be NULL */
  int64_t B, H, Tq, Tk, E, Ev, BQ;
  float scale;
  int causal, ot, prec; /* ot: operand storage (OT_*); prec: of OT_F32 products */
  char *res;            /* the node's f32 result */
  _Atomic int rc;
} at_job;

/* Row `row` of view x's matrix (b, h) as cols floats. */
static void load_row(const tpu_view *x, int64_t b, int64_t h, int64_t row, int64_t cols,
                     float *dst) {
  int64_t off = x->offset + b * x->strides[0] + h * x->strides[1] + row * x->strides[2];
  tpux__load(x->dtype, (const char *)x->base + off * (int64_t)tpu_dtype_size(x->dtype),
             x->strides[3], cols, dst);
}

/* Bytes of an operand element. */
static inline size_t op_size(const at_job *j) { return j->ot == OT_BF16 ? 2 : 4; }

/* s[0, n) = exp(s - m) (m = -inf with every s = -inf: NaN, as softmax). */
static void exp_shifted(float *s, int64_t n, float m) {
  for (int64_t c = 0; c < n; c++) s[c] -= m;
  if (!tpux__vmath_f32(TPUIR_EXP, n, s, s, NULL))
    for (int64_t c = 0; c < n; c++) s[c] = expf(s[c]);
}

/* n f32 values (stride 1 in src, sd in dst) into the operand format. */
static void put(const at_job *j, void *dst, int64_t sd, const float *src, int64_t n) {
  if (j->ot == OT_BF16) {
    uint16_t *d = dst;
    for (int64_t i = 0; i < n; i++) d[i * sd] = xk_f32_to_bf16(src[i]);
  } else if (j->ot == OT_F32R) {
    float *d = dst;
    for (int64_t i = 0; i < n; i++) d[i * sd] = xk_round_bf16(src[i]);
  } else {
    float *d = dst;
    for (int64_t i = 0; i < n; i++) d[i * sd] = src[i];
  }
}

/* Matrix (b, h) of x ([rows, cols]) as an operand: row-major into dst and
 * transposed ([cols, rows]) into t, each when not NULL. */
static void load_operand(const at_job *j, const tpu_view *x, int64_t b, int64_t h,
                         int64_t rows, int64_t cols, void *dst, void *t, float *tmp) {
  size_t es = op_size(j);
  for (int64_t r = 0; r < rows; r++) {
    load_row(x, b, h, r, cols, tmp);
    if (dst) put(j, (char *)dst + r * cols * es, 1, tmp, cols);
    if (t) put(j, (char *)t + r * es, rows, tmp, cols);
  }
}

/* f32 block src [rows, cols] into the operand format, row-major into dst
 * and transposed into t (when not NULL). */
static void to_operand(const at_job *j, const float *src, int64_t rows, int64_t cols, void *dst,
                       void *t) {
  size_t es = op_size(j);
  put(j, dst, 1, src, rows * cols);
  if (t)
    for (int64_t r = 0; r < rows; r++) put(j, (char *)t + r * es, rows, src + r * cols, cols);
}

/* C[m, n] (f32, row stride ldc) = alpha * A[m, k] B[k, n] + beta * C on this thread. */
static int mm(const at_job *j, int64_t m, int64_t n, int64_t k, float alpha, const void *a,
              int64_t sam, int64_t sak, const void *b, int64_t sbk, int64_t sbn, float beta,
              float *c, int64_t ldc) {
  if (j->ot == OT_BF16)
    return tpumxu_gemm_io(TPU_BF16, TPU_F32, TPU_PREC_DEFAULT, 1, m, n, k, alpha, a, 0, sam,
                          sak, b, 0, sbk, sbn, beta, c, 0, ldc, 1, NULL, NULL);
  return tpumxu_gemm(TPU_F32, j->ot == OT_F32R ? TPU_PREC_FP32 : j->prec, 1, m, n, k, alpha, a, 0,
                     sam, sak, b, 0, sbk, sbn, beta, c, 0, ldc, 1);
}

/* Scores of query rows [q0, q0 + nq) against keys [0, kend) into s (row
 * stride kend): q k^T * scale + bias, -inf past the causal diagonal. Kt:
 * k transposed ([E, Tk]). */
static int scores(const at_job *j, int64_t b, int64_t h, const void *Q, const void *Kt,
                  int64_t q0, int64_t nq, int64_t kend, float *s, float *tmp) {
  size_t es = op_size(j);
  /* alpha 1: oneDNN then writes s itself (no finishing pass) */
  int rc = mm(j, nq, kend, j->E, 1.f, (const char *)Q + q0 * j->E * es, j->E, 1, Kt, j->Tk, 1,
              0.f, s, kend);
  if (rc) return rc;
  for (int64_t i = 0; i < nq; i++) {
    float *r = s + i * kend;
    for (int64_t c = 0; c < kend; c++) r[c] *= j->scale;
    if (j->bias) {
      load_row(j->bias, b, h, q0 + i, kend, tmp);
      for (int64_t c = 0; c < kend; c++) r[c] += tmp[c];
    }
    if (j->causal)
      for (int64_t c = q0 + i + 1; c < kend; c++) r[c] = -INFINITY;
  }
  return TPU_OK;
}

/* The keys query block [q0, q0 + nq) reads. */
static int64_t keys_end(const at_job *j, int64_t q0, int64_t nq) {
  return j->causal && q0 + nq < j->Tk ? q0 + nq : j->Tk;
}

/* One task's buffers: operands (Q, K, Kt, V, Vt, dO; P, Pt, dS, dSt of a
 * block) and f32 work rows (S, dP of a block, a loaded row, D). */
typedef struct at_buf {
  void *Q, *K, *Kt, *V, *Vt, *dO, *P, *Pt, *dS, *dSt;
  float *S, *dP, *row, *D;
} at_buf;

enum { NBUF = 14 };

static int buf_alloc(const at_job *j, int grad, at_buf *w, void **mem) {
  size_t es = op_size(j), n[NBUF];
  int64_t blk = j->BQ * j->Tk, wide = j->Tk > j->Ev ? j->Tk : j->Ev;
  wide = wide > j->E ? wide : j->E;
  n[0] = (size_t)(j->Tq * j->E) * es;                    /* Q */
  n[1] = grad ? (size_t)(j->Tk * j->E) * es : 0;         /* K */
  n[2] = (size_t)(j->Tk * j->E) * es;                    /* Kt */
  n[3] = (size_t)(j->Tk * j->Ev) * es;                   /* V */
  n[4] = grad ? (size_t)(j->Tk * j->Ev) * es : 0;        /* Vt */
  n[5] = grad ? (size_t)(j->Tq * j->Ev) * es : 0;        /* dO */
  n[6] = (size_t)blk * es;                               /* P */
  n[7] = n[8] = n[9] = grad ? (size_t)blk * es : 0;      /* Pt, dS, dSt */
  n[10] = (size_t)blk * 4;                               /* S */
  n[11] = grad ? (size_t)blk * 4 : 0;                    /* dP */
  n[12] = (size_t)wide * 2 * 4;                          /* row */
  n[13] = grad ? (size_t)j->Tq * 4 : 0;                  /* D */
  size_t tot = 0;
  for (int i = 0; i < NBUF; i++) tot += (n[i] + 63) & ~(size_t)63;
  char *p = *mem = tpux__alloc(tot);
  if (!p) return TPU_E_OOM;
  void **slot[NBUF] = {&w->Q,  &w->K,  &w->Kt, &w->V,  &w->Vt,          &w->dO,           &w->P,
                       &w->Pt, &w->dS, &w->dSt, (void **)&w->S, (void **)&w->dP, (void **)&w->row,
                       (void **)&w->D};
  for (int i = 0; i < NBUF; i++) {
    *slot[i] = p;
    p += (n[i] + 63) & ~(size_t)63;
  }
  return TPU_OK;
}

static int fwd_pair(const at_job *j, int64_t b, int64_t h, at_buf *w) {
  int64_t Tq = j->Tq, Tk = j->Tk, E = j->E, Ev = j->Ev;
  load_operand(j, j->q, b, h, Tq, E, w->Q, NULL, w->row);
  load_operand(j, j->k, b, h, Tk, E, NULL, w->Kt, w->row);
  load_operand(j, j->v, b, h, Tk, Ev, w->V, NULL, w->row);
  float *res = (float *)j->res + (b * j->H + h) * Tq * (Ev + 1);
  for (int64_t q0 = 0; q0 < Tq; q0 += j->BQ) {
    int64_t nq = Tq - q0 < j->BQ ? Tq - q0 : j->BQ, kend = keys_end(j, q0, nq);
    int rc = scores(j, b, h, w->Q, w->Kt, q0, nq, kend, w->S, w->row);
    if (rc) return rc;
    for (int64_t i = 0; i < nq; i++) {
      float *s = w->S + i * kend, m = -INFINITY;
      for (int64_t c = 0; c < kend; c++) m = s[c] > m ? s[c] : m;
      exp_shifted(s, kend, m);
      float l = 0.f;
      for (int64_t c = 0; c < kend; c++) l += s[c];
      float inv = 1.f / l;
      for (int64_t c = 0; c < kend; c++) s[c] *= inv; /* the softmax, rounded like it */
      res[(q0 + i) * (Ev + 1) + Ev] = m + logf(l);
    }
    to_operand(j, w->S, nq, kend, w->P, NULL);
    rc = mm(j, nq, Ev, kend, 1.f, w->P, kend, 1, w->V, Ev, 1, 0.f, res + q0 * (Ev + 1), Ev + 1);
    if (rc) return rc;
  }
  return TPU_OK;
}

static int bwd_pair(const at_job *j, int64_t b, int64_t h, at_buf *w) {
  int64_t Tq = j->Tq, Tk = j->Tk, E = j->E, Ev = j->Ev;
  size_t es = op_size(j);
  load_operand(j, j->q, b, h, Tq, E, w->Q, NULL, w->row);
  load_operand(j, j->k, b, h, Tk, E, w->K, w->Kt, w->row);
  load_operand(j, j->v, b, h, Tk, Ev, NULL, w->Vt, w->row);
  load_operand(j, j->dout, b, h, Tq, Ev, w->dO, NULL, w->row);
  float *o = w->row, *g = w->row + (Tk > Ev ? Tk : Ev);
  for (int64_t i = 0; i < Tq; i++) { /* D = rowsum(dout * out) */
    load_row(j->out, b, h, i, Ev, o);
    load_row(j->dout, b, h, i, Ev, g);
    float d = 0.f;
    for (int64_t c = 0; c < Ev; c++) d += o[c] * g[c];
    w->D[i] = d;
  }
  float *dq = (float *)j->res + (b * j->H + h) * (Tq * E + Tk * E + Tk * Ev);
  float *dk = dq + Tq * E, *dv = dk + Tk * E;
  memset(dk, 0, (size_t)(Tk * E + Tk * Ev) * 4);
  for (int64_t q0 = 0; q0 < Tq; q0 += j->BQ) {
    int64_t nq = Tq - q0 < j->BQ ? Tq - q0 : j->BQ, kend = keys_end(j, q0, nq);
    int rc = scores(j, b, h, w->Q, w->Kt, q0, nq, kend, w->S, w->row);
    if (rc) return rc;
    for (int64_t i = 0; i < nq; i++) { /* P = exp(S - lse) */
      float *s = w->S + i * kend;
      int64_t off = j->lse->offset + b * j->lse->strides[0] + h * j->lse->strides[1] +
                    (q0 + i) * j->lse->strides[2];
      float l = ((const float *)j->lse->base)[off]; /* f32 (tpuir_attention_grad) */
      exp_shifted(s, kend, l);
    }
    to_operand(j, w->S, nq, kend, w->P, w->Pt);
    const char *dOb = (const char *)w->dO + q0 * Ev * es;
    /* dv[0:kend] += P^T dout */
    if ((rc = mm(j, kend, Ev, nq, 1.f, w->Pt, nq, 1, dOb, Ev, 1, 1.f, dv, Ev))) return rc;
    /* dP = dout v^T */
    if ((rc = mm(j, nq, kend, Ev, 1.f, dOb, Ev, 1, w->Vt, Tk, 1, 0.f, w->dP, kend))) return rc;
    for (int64_t i = 0; i < nq; i++) {
      float *p = w->S + i * kend, *d = w->dP + i * kend, Di = w->D[q0 + i];
      for (int64_t c = 0; c < kend; c++) d[c] = p[c] * (d[c] - Di) * j->scale;
    }
    to_operand(j, w->dP, nq, kend, w->dS, w->dSt);
    /* dq = dS k; dk[0:kend] += dS^T q (dS holds the scale: alpha 1 lets
     * oneDNN write the results itself) */
    if ((rc = mm(j, nq, E, kend, 1.f, w->dS, kend, 1, w->K, E, 1, 0.f, dq + q0 * E, E)))
      return rc;
    if ((rc = mm(j, kend, E, nq, 1.f, w->dSt, nq, 1, (const char *)w->Q + q0 * E * es, E, 1,
                 1.f, dk, E)))
      return rc;
  }
  return TPU_OK;
}

static void at_range(void *ctx, int64_t p0, int64_t p1) {
  at_job *j = ctx;
  at_buf w;
  void *mem;
  int grad = j->dout != NULL;
  if (buf_alloc(j, grad, &w, &mem)) {
    int z = TPU_OK;
    atomic_compare_exchange_strong(&j->rc, &z, TPU_E_OOM);
    return;
  }
  for (int64_t p = p0; p < p1 && atomic_load(&j->rc) == TPU_OK; p++) {
    int rc = grad ? bwd_pair(j, p / j->H, p % j->H, &w) : fwd_pair(j, p / j->H, p % j->H, &w);
    if (rc) {
      int z = TPU_OK;
      atomic_compare_exchange_strong(&j->rc, &z, rc);
    }
  }
  tpux__free(mem);
}

int tpux__eval_attention(xctx *c, int t) {
  const tpuir_node *n = tpuir_get_node(c->g, t);
  int grad = n->op == TPUIR_ATTENTION_GRAD, nb = grad ? 6 : 3;
  at_job j = {0};
  j.q = &c->vals[n->list[0]].v;
  j.k = &c->vals[n->list[1]].v;
  j.v = &c->vals[n->list[2]].v;
  if (grad) {
    j.out = &c->vals[n->list[3]].v;
    j.dout = &c->vals[n->list[4]].v;
    j.lse = &c->vals[n->list[5]].v;
  }
  j.bias = n->nlist > nb ? &c->vals[n->list[nb]].v : NULL;
  j.B = j.q->sizes[0], j.H = j.q->sizes[1], j.Tq = j.q->sizes[2], j.E = j.q->sizes[3];
  j.Tk = j.k->sizes[2], j.Ev = j.v->sizes[3];
  double scale;
  memcpy(&scale, &n->a[1], sizeof scale);
  j.scale = (float)scale;
  j.causal = (int)n->a[0];
  int dt = j.q->dtype;
  if (dt == TPU_BF16 || (n->kind == TPU_PREC_DEFAULT && dt == TPU_F32))
    j.ot = tpumxu_bf16_native() ? OT_BF16 : OT_F32R;
  else
    j.ot = OT_F32;
  j.prec = dt == TPU_F16 ? TPU_PREC_FP32 : n->kind; /* f16 x f16 products are exact in f32 */
  /* a block's scores S [BQ, Tk] hold 32K floats (128 KB), so S, P and dP
   * of a block stay in a core's L2 */
  int64_t bq = 32768 / (j.Tk > 0 ? j.Tk : 1);
  j.BQ = bq < 16 ? 16 : bq > 256 ? 256 : bq;
  if (j.BQ > j.Tq) j.BQ = j.Tq > 0 ? j.Tq : 1;
  int rc = tpux__alloc_value(c, t);
  if (rc) return rc;
  j.res = tpux__value_data(c, t);
  int64_t pairs = j.B * j.H;
  if (pairs == 0 || j.Tq == 0) return TPU_OK;
  if (j.Tk == 0) { /* no keys: out = an empty sum, lse = -inf, no gradient */
    int64_t numel = tpu_view_numel(&c->vals[t].v);
    float *r = (float *)j.res;
    for (int64_t i = 0; i < numel; i++) r[i] = !grad && i % (j.Ev + 1) == j.Ev ? -INFINITY : 0.f;
    return TPU_OK;
  }
  atomic_init(&j.rc, TPU_OK);
  tpurt_parallel_for(pairs, 1, at_range, &j);
  rc = atomic_load(&j.rc);
  if (rc == TPU_E_OOM) return tpu_error(TPU_E_OOM, "vTPU executor: out of host memory");
  return rc;
}

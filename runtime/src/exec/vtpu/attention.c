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
 * only reads the keys up to its last query, and a row's softmax only its
 * keys up to the diagonal. The row work between the products is vector
 * code (scale + bias + max, exp + sum in one pass, the scaled P written in
 * the operand format; transposes in 8 x 8 register tiles): as scalar loops
 * it took half of a forward ([8,8,256,64] on a Zen 3: 14-16 -> 9-10 ms,
 * causal 18.6 -> 8-9 ms). The gradient recomputes S and
 * P = exp(S - lse) per block:
 *   dv += P^T dout, dP = dout v^T, dS = P (dP - D) * scale with
 *   D = rowsum(dout out), dq = dS k, dk += dS^T q,
 * accumulating dk and dv in the f32 result itself. The matrix unit runs
 * inside the task (a nested tpumxu call runs on the calling thread), so
 * nothing is shared between tasks.
 */
#include <immintrin.h>
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

/* Row kernels over a block's f32 rows, vectorized for the CPU at hand
 * (target_clones; dot_row keeps RL partial sums, combined in a fixed
 * order, so its result does not depend on the CPU). */
#define ROW_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#define RL 16

/* 8 floats as one vector (GCC vector extension: one AVX register, two
 * SSE ones, per clone; 16 lanes made GCC fall back to scalar code under
 * AVX2); loaded and stored with memcpy. */
typedef float vf8 __attribute__((vector_size(32)));
typedef int32_t vi8 __attribute__((vector_size(32)));

/* s[0, n) = s * scale (+ bias, when not NULL); returns their max (NaN
 * ignored, -inf for n = 0). The lanes' max is a compare and select: GCC
 * does not vectorize `v > m ? v : m` over an array of lanes. */
ROW_CLONES static float scale_max(float *restrict s, const float *restrict bias, int64_t n,
                                  float scale) {
  vf8 m, v, bv;
  for (int k = 0; k < 8; k++) m[k] = -INFINITY;
  int64_t c = 0;
  for (; c + 8 <= n; c += 8) {
    memcpy(&v, s + c, sizeof v);
    v *= scale;
    if (bias) {
      memcpy(&bv, bias + c, sizeof bv);
      v += bv;
    }
    memcpy(s + c, &v, sizeof v);
    vi8 gt = v > m;
    m = (vf8)(((vi8)v & gt) | ((vi8)m & ~gt));
  }
  float r = -INFINITY;
  for (; c < n; c++) {
    float x = s[c] * scale;
    if (bias) x += bias[c];
    s[c] = x;
    r = x > r ? x : r;
  }
  for (int k = 0; k < 8; k++) r = m[k] > r ? m[k] : r;
  return r;
}

/* d[0, n) = p * (d - D) * scale: dS from P and dP. */
ROW_CLONES static void ds_row(float *restrict d, const float *restrict p, int64_t n, float D,
                              float scale) {
  for (int64_t c = 0; c < n; c++) d[c] = p[c] * (d[c] - D) * scale;
}

/* Dot product of a[0, n) and b[0, n). */
ROW_CLONES static float dot_row(const float *restrict a, const float *restrict b, int64_t n) {
  float acc[RL] = {0}, r = 0.f;
  int64_t c = 0;
  for (; c + RL <= n; c += RL)
    for (int k = 0; k < RL; k++) acc[k] += a[c + k] * b[c + k];
  for (int k = 0; k < RL; k++) r += acc[k];
  for (; c < n; c++) r += a[c] * b[c];
  return r;
}

/* n values src * f into the operand format (contiguous; f = 1: as they
 * are, the product being exact). */
ROW_CLONES static void put_row(int ot, void *restrict dst, const float *restrict src, int64_t n,
                               float f) {
  if (ot == OT_BF16) {
    uint16_t *d = dst;
    for (int64_t i = 0; i < n; i++) d[i] = xk_f32_to_bf16(src[i] * f);
  } else if (ot == OT_F32R) {
    float *d = dst;
    for (int64_t i = 0; i < n; i++) d[i] = xk_round_bf16(src[i] * f);
  } else {
    float *d = dst;
    for (int64_t i = 0; i < n; i++) d[i] = src[i] * f;
  }
}

/* Transposes go in TT x TT tiles, a row of the result written TT elements
 * at a time (per-element writes down a power-of-two stride thrashed a few
 * L1 sets: transposing k took a tenth of the forward). */
#define TT 8

/* An 8 x 8 tile of 4-byte elements transposed in AVX registers: rows of
 * src (stride ss) to rows of d (stride sd). */
__attribute__((target("avx2"))) static void tile8_avx2(const float *src, int64_t ss, float *d,
                                                       int64_t sd) {
  __m256 r[8], u[8], v[8];
  for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(src + i * ss);
  for (int i = 0; i < 8; i += 2) {
    u[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    u[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    v[i] = _mm256_shuffle_ps(u[i], u[i + 2], 0x44);
    v[i + 1] = _mm256_shuffle_ps(u[i], u[i + 2], 0xee);
    v[i + 2] = _mm256_shuffle_ps(u[i + 1], u[i + 3], 0x44);
    v[i + 3] = _mm256_shuffle_ps(u[i + 1], u[i + 3], 0xee);
  }
  for (int i = 0; i < 4; i++) {
    _mm256_storeu_ps(d + i * sd, _mm256_permute2f128_ps(v[i], v[i + 4], 0x20));
    _mm256_storeu_ps(d + (i + 4) * sd, _mm256_permute2f128_ps(v[i], v[i + 4], 0x31));
  }
}

/* t[c * ldt + r] = src[r * cols + c] for r < nr, c < cols (es-byte
 * elements). */
static void transpose(size_t es, const void *src, int64_t nr, int64_t cols, void *t,
                      int64_t ldt) {
  int avx2 = es == 4 && tpux__vmath_width() >= 8;
  for (int64_t r0 = 0; r0 < nr; r0 += TT)
    for (int64_t c0 = 0; c0 < cols; c0 += TT) {
      int64_t r1 = r0 + TT < nr ? r0 + TT : nr, c1 = c0 + TT < cols ? c0 + TT : cols;
      if (avx2 && r1 - r0 == TT && c1 - c0 == TT) {
        tile8_avx2((const float *)src + r0 * cols + c0, cols, (float *)t + c0 * ldt + r0, ldt);
      } else if (es == 4) {
        const uint32_t *x = src;
        uint32_t *d = t;
        for (int64_t c = c0; c < c1; c++)
          for (int64_t r = r0; r < r1; r++) d[c * ldt + r] = x[r * cols + c];
      } else {
        const uint16_t *x = src;
        uint16_t *d = t;
        for (int64_t c = c0; c < c1; c++)
          for (int64_t r = r0; r < r1; r++) d[c * ldt + r] = x[r * cols + c];
      }
    }
}

/* Matrix (b, h) of x ([rows, cols]) as an operand: row-major into dst and
 * transposed ([cols, rows]) into t, each when not NULL. tmp: (TT + 1) *
 * cols floats (a loaded row, then TT converted rows when there is no
 * dst). */
static void load_operand(const at_job *j, const tpu_view *x, int64_t b, int64_t h,
                         int64_t rows, int64_t cols, void *dst, void *t, float *tmp) {
  size_t es = op_size(j);
  for (int64_t r0 = 0; r0 < rows; r0 += TT) {
    int64_t nr = rows - r0 < TT ? rows - r0 : TT;
    char *slab = dst ? (char *)dst + r0 * cols * es : (char *)(tmp + cols);
    for (int64_t r = 0; r < nr; r++) {
      load_row(x, b, h, r0 + r, cols, tmp);
      put_row(j->ot, slab + r * cols * es, tmp, cols, 1.f);
    }
    if (t) transpose(es, slab, nr, cols, (char *)t + r0 * es, rows);
  }
}

/* f32 block src [rows, cols] into the operand format, row-major into dst
 * and transposed into t (when not NULL). */
static void to_operand(const at_job *j, const float *src, int64_t rows, int64_t cols, void *dst,
                       void *t) {
  put_row(j->ot, dst, src, rows * cols, 1.f);
  if (t) transpose(op_size(j), dst, rows, cols, t, rows);
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

/* Keys row `qi` may attend to of the block's [0, kend): all, or up to the
 * causal diagonal (at least key 0). */
static int64_t keys_valid(const at_job *j, int64_t qi, int64_t kend) {
  return j->causal && qi + 1 < kend ? qi + 1 : kend;
}

/* Scores of query rows [q0, q0 + nq) against keys [0, kend) into s (row
 * stride kend): q k^T * scale + bias over each row's valid keys, the
 * row's max into mx[i]; past the causal diagonal is left as the GEMM
 * wrote it (callers zero P there). Kt: k transposed ([E, Tk]). */
static int scores(const at_job *j, int64_t b, int64_t h, const void *Q, const void *Kt,
                  int64_t q0, int64_t nq, int64_t kend, float *s, float *mx, float *tmp) {
  size_t es = op_size(j);
  /* alpha 1: oneDNN then writes s itself (no finishing pass) */
  int rc = mm(j, nq, kend, j->E, 1.f, (const char *)Q + q0 * j->E * es, j->E, 1, Kt, j->Tk, 1,
              0.f, s, kend);
  if (rc) return rc;
  for (int64_t i = 0; i < nq; i++) {
    int64_t nv = keys_valid(j, q0 + i, kend);
    if (j->bias) load_row(j->bias, b, h, q0 + i, nv, tmp);
    mx[i] = scale_max(s + i * kend, j->bias ? tmp : NULL, nv, j->scale);
  }
  return TPU_OK;
}

/* The keys query block [q0, q0 + nq) reads. */
static int64_t keys_end(const at_job *j, int64_t q0, int64_t nq) {
  return j->causal && q0 + nq < j->Tk ? q0 + nq : j->Tk;
}

/* One task's buffers: operands (Q, K, Kt, V, Vt, dO; P, Pt, dS, dSt of a
 * block) and f32 work rows (S, dP of a block, a loaded row, D, the
 * block's row maxima M). */
typedef struct at_buf {
  void *Q, *K, *Kt, *V, *Vt, *dO, *P, *Pt, *dS, *dSt;
  float *S, *dP, *row, *D, *M;
} at_buf;

enum { NBUF = 15 };

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
  n[12] = (size_t)wide * (TT + 2) * 4;                   /* row */
  n[13] = grad ? (size_t)j->Tq * 4 : 0;                  /* D */
  n[14] = (size_t)j->BQ * 4;                             /* M */
  size_t tot = 0;
  for (int i = 0; i < NBUF; i++) tot += (n[i] + 63) & ~(size_t)63;
  char *p = *mem = tpux__alloc(tot);
  if (!p) return TPU_E_OOM;
  void **slot[NBUF] = {&w->Q,  &w->K,  &w->Kt, &w->V,  &w->Vt,          &w->dO,           &w->P,
                       &w->Pt, &w->dS, &w->dSt, (void **)&w->S, (void **)&w->dP, (void **)&w->row,
                       (void **)&w->D, (void **)&w->M};
  for (int i = 0; i < NBUF; i++) {
    *slot[i] = p;
    p += (n[i] + 63) & ~(size_t)63;
  }
  return TPU_OK;
}

static int fwd_pair(const at_job *j, int64_t b, int64_t h, at_buf *w) {
  int64_t Tq = j->Tq, Tk = j->Tk, E = j->E, Ev = j->Ev;
  size_t es = op_size(j);
  load_operand(j, j->q, b, h, Tq, E, w->Q, NULL, w->row);
  load_operand(j, j->k, b, h, Tk, E, NULL, w->Kt, w->row);
  load_operand(j, j->v, b, h, Tk, Ev, w->V, NULL, w->row);
  float *res = (float *)j->res + (b * j->H + h) * Tq * (Ev + 1);
  for (int64_t q0 = 0; q0 < Tq; q0 += j->BQ) {
    int64_t nq = Tq - q0 < j->BQ ? Tq - q0 : j->BQ, kend = keys_end(j, q0, nq);
    int rc = scores(j, b, h, w->Q, w->Kt, q0, nq, kend, w->S, w->M, w->row);
    if (rc) return rc;
    for (int64_t i = 0; i < nq; i++) {
      float *s = w->S + i * kend, m = w->M[i];
      int64_t nv = keys_valid(j, q0 + i, kend);
      float l = tpux__vmath_exp_sum(s, nv, m);
      /* P: the softmax (rounded like it) in the operand format */
      char *p = (char *)w->P + i * kend * es;
      put_row(j->ot, p, s, nv, 1.f / l);
      memset(p + nv * es, 0, (size_t)(kend - nv) * es);
      res[(q0 + i) * (Ev + 1) + Ev] = m + logf(l);
    }
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
    w->D[i] = dot_row(o, g, Ev);
  }
  float *dq = (float *)j->res + (b * j->H + h) * (Tq * E + Tk * E + Tk * Ev);
  float *dk = dq + Tq * E, *dv = dk + Tk * E;
  memset(dk, 0, (size_t)(Tk * E + Tk * Ev) * 4);
  for (int64_t q0 = 0; q0 < Tq; q0 += j->BQ) {
    int64_t nq = Tq - q0 < j->BQ ? Tq - q0 : j->BQ, kend = keys_end(j, q0, nq);
    int rc = scores(j, b, h, w->Q, w->Kt, q0, nq, kend, w->S, w->M, w->row);
    if (rc) return rc;
    for (int64_t i = 0; i < nq; i++) { /* P = exp(S - lse) */
      float *s = w->S + i * kend;
      int64_t off = j->lse->offset + b * j->lse->strides[0] + h * j->lse->strides[1] +
                    (q0 + i) * j->lse->strides[2], nv = keys_valid(j, q0 + i, kend);
      float l = ((const float *)j->lse->base)[off]; /* f32 (tpuir_attention_grad) */
      tpux__vmath_exp_sum(s, nv, l);
      memset(s + nv, 0, (size_t)(kend - nv) * sizeof(float));
    }
    to_operand(j, w->S, nq, kend, w->P, w->Pt);
    const char *dOb = (const char *)w->dO + q0 * Ev * es;
    /* dv[0:kend] += P^T dout */
    if ((rc = mm(j, kend, Ev, nq, 1.f, w->Pt, nq, 1, dOb, Ev, 1, 1.f, dv, Ev))) return rc;
    /* dP = dout v^T */
    if ((rc = mm(j, nq, kend, Ev, 1.f, dOb, Ev, 1, w->Vt, Tk, 1, 0.f, w->dP, kend))) return rc;
    for (int64_t i = 0; i < nq; i++)
      ds_row(w->dP + i * kend, w->S + i * kend, kend, w->D[q0 + i], j->scale);
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

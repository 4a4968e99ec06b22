/* mxu/driver.c - vTPU matrix unit driver: TPU numerics on top of oneDNN's
 * matmul (mxu/dnnl.c).
 *
 * f32 operands under DEFAULT/HIGH/HIGHEST are split into bf16 parts
 * (hi = bf16(x), r1 = bf16(x - hi), r2 = bf16(x - hi - r1), RNE) while
 * being copied into row-major operand buffers whose K holds the parts of
 * every product side by side, so one bf16 GEMM over the concatenated K
 * computes the small terms of ARCHITECTURE §4 with fp32 accumulation:
 *   HIGH:    A' = [hi r1]          B' = [r1; hi]             (2k)
 *   HIGHEST: A' = [r1 r2 hi r1 hi] B' = [r1; hi; r2; hi; r1] (5k)
 * (smallest terms first along K). That sum S is zeroed where non-finite,
 * then the hi*hi GEMM (a view of the same buffers: A' part hi x B' part
 * hi) is added to it with oneDNN's sum post-op: C = hi*hi + S. DEFAULT is
 * the hi*hi GEMM alone. bf16 storage multiplies as is; f16 storage and
 * FP32 precision multiply f32 values (f16 x f16 products are exact in
 * f32). Where oneDNN has no native bf16 kernel (no AVX-512) the parts are
 * stored widened to f32: the products stay exact, so the result only
 * differs by accumulation order. There the same terms take fewer f32
 * GEMM passes, one GEMM each, with s1 = hi + r1 (16 significant bits, so
 * hi * s1 is exact in f32):
 *   HIGH:    A' = [r1 hi]     B' = [hi; s1]        (2k instead of 3k)
 *   HIGHEST: A' = [r2 r1 hi]  B' = [hi; s1; x]     (3k instead of 6k)
 * HIGHEST's hi*x = hi*(hi + r1 + r2) + hi*(x - hi - r1 - r2): the TPU's
 * terms plus one below f32's resolution, rounded only by the FMA. Small
 * terms cannot be zeroed separately here, so calls with a non-finite part
 * (inf/NaN inputs, or hi overflowing) are repacked for the path above.
 *
 * Operands oneDNN can read as they are (bf16 operands with a native
 * kernel, f32 ones at FP32; row-major, or transposed in big problems) are
 * not copied; bf16 operands may have an f32 C (tpumxu_gemm_io).
 *
 * C is written by oneDNN directly when it can be (f32 C, or bf16 C with a
 * native bf16 kernel; unit column stride, alpha 1, beta 0 - or beta 1
 * without separately summed small terms, as a sum post-op); otherwise the GEMM goes to an f32 buffer and a parallel pass
 * applies alpha/beta and rounds once into C. The user epilogue runs on
 * finished blocks of rows, in parallel, after the GEMM. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mxu/internal.h"
#include "tpu_rt.h"

/* operand parts: bf16 parts of the split, the raw value, hi + r1 */
enum { P_HI = 0, P_R1 = 1, P_R2 = 2, P_RAW = 3, P_S1 = 4 };

static const int8_t k_a_high[2] = {P_HI, P_R1}, k_b_high[2] = {P_R1, P_HI};
static const int8_t k_a_highest[5] = {P_R1, P_R2, P_HI, P_R1, P_HI};
static const int8_t k_b_highest[5] = {P_R1, P_HI, P_R2, P_HI, P_R1};
static const int8_t k_hi[1] = {P_HI}, k_raw[1] = {P_RAW};
/* one-GEMM forms over f32 storage (no native bf16) */
static const int8_t k_a_high_f[2] = {P_R1, P_HI}, k_b_high_f[2] = {P_HI, P_S1};
static const int8_t k_a_highest_f[3] = {P_R2, P_R1, P_HI}, k_b_highest_f[3] = {P_HI, P_S1, P_RAW};

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* ---- operand packing --------------------------------------------------- */

/* Copy a strided source (rows x cols, element (r, c) of item b at
 * base + b*sb + r*sr + c*sc elements of sdt) into np row-major parts: part
 * p of element (b, r, c) at dst + b*db + poff[p] + r*ld + c elements of
 * the output type (bf16 or f32). */
typedef struct pack_job {
  const char *base;
  int sdt, odt, np;
  const int8_t *parts;
  int64_t sb, sr, sc, rows, cols, ld, db, poff[5];
  char *dst;
  int64_t rblocks;
  int nonfin; /* set when a hi part is non-finite */
} pack_job;

#define PACK_ROWS 16

static inline float ld_src(int dt, const char *base, int64_t off) {
  switch (dt) {
  case TPU_F32: return ((const float *)base)[off];
  case TPU_BF16: return tpu_bf16_to_f32(((const uint16_t *)base)[off]);
  default: return tpu_f16_to_f32(((const uint16_t *)base)[off]);
  }
}

/* The parts of x (bit patterns; bf16 ones with the low 16 bits clear). */
static inline void split(float x, uint32_t out[5]) {
  uint32_t hi = tpumxu__rne_bits(tpumxu__f2u(x));
  float rem = x - tpumxu__u2f(hi);
  uint32_t r1 = tpumxu__rne_bits(tpumxu__f2u(rem));
  float rem2 = rem - tpumxu__u2f(r1);
  out[P_HI] = hi;
  out[P_R1] = r1;
  out[P_R2] = tpumxu__rne_bits(tpumxu__f2u(rem2));
  out[P_RAW] = tpumxu__f2u(x);
  out[P_S1] = tpumxu__f2u(tpumxu__u2f(hi) + tpumxu__u2f(r1));
}

static inline void put(const pack_job *J, char *d, int64_t idx, const uint32_t v[5]) {
  for (int p = 0; p < J->np; p++) {
    uint32_t u = v[J->parts[p]];
    if (J->odt == TPUMXU_DT_BF16) ((uint16_t *)d)[J->poff[p] + idx] = (uint16_t)(u >> 16);
    else ((uint32_t *)d)[J->poff[p] + idx] = u;
  }
}

/* Branch-free tpumxu__rne_bits (so gcc vectorises the loops below). */
static inline uint32_t rne_bits_v(uint32_t u) {
  uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  uint32_t q = (u | 0x00400000u) & 0xffff0000u;
  return (u & 0x7fffffffu) > 0x7f800000u ? q : r;
}

/* Part `part` of a contiguous f32 row, as bf16 (o16) or f32 bits (o32):
 * the hot loops (vectorised by gcc; same bits as split()). Returns
 * nonzero when a hi part is non-finite. */
static inline __attribute__((always_inline)) uint32_t
part_row(const float *s, int part, uint16_t *o16, uint32_t *o32, int64_t n) {
  uint32_t bad = 0;
  for (int64_t c = 0; c < n; c++) {
    float x = s[c];
    uint32_t h = rne_bits_v(tpumxu__f2u(x)), v = h;
    bad |= (h & 0x7f800000u) == 0x7f800000u;
    if (part != P_HI) {
      float rem = x - tpumxu__u2f(h);
      v = rne_bits_v(tpumxu__f2u(rem));
      if (part == P_R2) v = rne_bits_v(tpumxu__f2u(rem - tpumxu__u2f(v)));
      if (part == P_RAW) v = tpumxu__f2u(x);
      if (part == P_S1) v = tpumxu__f2u(tpumxu__u2f(h) + tpumxu__u2f(v));
    }
    if (o16) o16[c] = (uint16_t)(v >> 16);
    else o32[c] = v;
  }
  return bad;
}

/* Contiguous f32 row into the parts (one clone per vector width). */
__attribute__((target_clones("avx512f", "avx2", "default"))) static uint32_t pack_row_f32(const pack_job *J, const float *s, char *d, int64_t n) {
  uint32_t bad = 0;
  for (int p = 0; p < J->np; p++) {
    uint16_t *o16 = (uint16_t *)d + J->poff[p];
    uint32_t *o32 = (uint32_t *)d + J->poff[p];
    /* constant part and output type per instance (inlined, vectorised) */
#define PART_CASE(P)                                                       \
  case P:                                                                  \
    if (J->odt == TPUMXU_DT_BF16) bad |= part_row(s, P, o16, NULL, n);     \
    else bad |= part_row(s, P, NULL, o32, n);                              \
    break;
    switch (J->parts[p]) {
      PART_CASE(P_HI)
      PART_CASE(P_R1)
      PART_CASE(P_R2)
      PART_CASE(P_RAW)
      PART_CASE(P_S1)
    }
#undef PART_CASE
  }
  return bad;
}

/* f32 rows [r0, r1) whose columns are not contiguous (a transposed or
 * strided operand): PACK_TCOLS columns at a time are gathered into
 * contiguous rows, walking the source in its memory order, then packed by
 * the vector row loop. */
#define PACK_TCOLS 64
static uint32_t pack_rows_gather_f32(const pack_job *J, const float *src, char *dst, int64_t oes, int64_t r0,
                                     int64_t r1) {
  float tmp[PACK_ROWS][PACK_TCOLS];
  uint32_t bad = 0;
  int rows_inner = llabs(J->sr) < llabs(J->sc);
  for (int64_t c0 = 0; c0 < J->cols; c0 += PACK_TCOLS) {
    int64_t nc = J->cols - c0 < PACK_TCOLS ? J->cols - c0 : PACK_TCOLS;
    const float *s = src + c0 * J->sc;
    if (rows_inner) {
      for (int64_t c = 0; c < nc; c++)
        for (int64_t r = r0; r < r1; r++) tmp[r - r0][c] = s[r * J->sr + c * J->sc];
    } else {
      for (int64_t r = r0; r < r1; r++)
        for (int64_t c = 0; c < nc; c++) tmp[r - r0][c] = s[r * J->sr + c * J->sc];
    }
    for (int64_t r = r0; r < r1; r++) bad |= pack_row_f32(J, tmp[r - r0], dst + (r * J->ld + c0) * oes, nc);
  }
  return bad;
}

/* bf16 rows [r0, r1) copied as they are (bf16 operands handed to a
 * native kernel: no parts to split), a block of PACK_TCOLS columns at a
 * time walking the source in its memory order. */
static void pack_rows_bf16(const pack_job *J, const uint16_t *src, uint16_t *dst, int64_t r0,
                           int64_t r1) {
  if (J->sc == 1) {
    for (int64_t r = r0; r < r1; r++)
      memcpy(dst + r * J->ld, src + r * J->sr, (size_t)J->cols * 2);
    return;
  }
  int rows_inner = llabs(J->sr) < llabs(J->sc);
  for (int64_t c0 = 0; c0 < J->cols; c0 += PACK_TCOLS) {
    int64_t nc = J->cols - c0 < PACK_TCOLS ? J->cols - c0 : PACK_TCOLS;
    const uint16_t *s = src + c0 * J->sc;
    uint16_t *d = dst + c0;
    if (rows_inner) {
      for (int64_t c = 0; c < nc; c++)
        for (int64_t r = r0; r < r1; r++) d[r * J->ld + c] = s[r * J->sr + c * J->sc];
    } else {
      for (int64_t r = r0; r < r1; r++)
        for (int64_t c = 0; c < nc; c++) d[r * J->ld + c] = s[r * J->sr + c * J->sc];
    }
  }
}

static void pack_fn(void *ctx, int64_t t0, int64_t t1) {
  pack_job *J = ctx;
  uint32_t bad = 0;
  int64_t es = (int64_t)tpu_dtype_size(J->sdt), oes = J->odt == TPUMXU_DT_BF16 ? 2 : 4;
  for (int64_t t = t0; t < t1; t++) {
    int64_t b = t / J->rblocks, r0 = (t % J->rblocks) * PACK_ROWS;
    int64_t r1 = r0 + PACK_ROWS < J->rows ? r0 + PACK_ROWS : J->rows;
    const char *src = J->base + b * J->sb * es;
    char *dst = J->dst + b * J->db * oes;
    if (J->sdt == TPU_BF16 && J->odt == TPUMXU_DT_BF16 && J->np == 1) {
      pack_rows_bf16(J, (const uint16_t *)src, (uint16_t *)dst, r0, r1); /* hi part = the value */
    } else if (J->sc == 1 && J->sdt == TPU_F32) {
      for (int64_t r = r0; r < r1; r++)
        bad |= pack_row_f32(J, (const float *)src + r * J->sr, dst + r * J->ld * oes, J->cols);
    } else if (J->sdt == TPU_F32) {
      bad |= pack_rows_gather_f32(J, (const float *)src, dst, oes, r0, r1);
    } else if (J->sc == 1 || llabs(J->sc) <= llabs(J->sr)) {
      for (int64_t r = r0; r < r1; r++)
        for (int64_t c = 0; c < J->cols; c++) {
          uint32_t v[5];
          split(ld_src(J->sdt, src, r * J->sr + c * J->sc), v);
          bad |= (v[P_HI] & 0x7f800000u) == 0x7f800000u;
          put(J, dst, r * J->ld + c, v);
        }
    } else { /* rows closer in memory: walk the rows of the block inside */
      for (int64_t c = 0; c < J->cols; c++)
        for (int64_t r = r0; r < r1; r++) {
          uint32_t v[5];
          split(ld_src(J->sdt, src, r * J->sr + c * J->sc), v);
          bad |= (v[P_HI] & 0x7f800000u) == 0x7f800000u;
          put(J, dst, r * J->ld + c, v);
        }
    }
  }
  if (bad) __atomic_store_n(&J->nonfin, 1, __ATOMIC_RELAXED);
}

/* Operand src (nb items of sb; `outer` free rows or columns - m of A, n
 * of B - at stride s_outer, p->k along K at stride s_k) packed into a
 * workspace buffer in np parts: K along the buffer's rows (k_rows: np*k
 * rows of `outer`, the parts stacked; a source read along `outer` keeps
 * its memory order) or along its columns (`outer` rows of np*k, the parts
 * side by side). *ld: the buffer's row stride, its row length except
 * for f32 storage rows of a multiple of 256 floats, which get 16 more:
 * oneDNN's f32 GEMM runs its no-copy kernel on parts with a side below
 * ~264 and that kernel halves its speed on such power-of-two strides
 * (Zen 3, two 256x2048x2048 parts at once: 89 -> 188 GFLOP/s). Returns
 * the buffer (*cap: its size) or NULL (out of memory); *nonfin: a hi
 * part is non-finite. */
static char *pack_operand(const tpumxu__problem *p, const char *src, int odt, int np,
                          const int8_t *parts, int64_t sb, int64_t s_outer, int64_t s_k,
                          int64_t outer, int64_t nb, int k_rows, int64_t *ld, size_t *cap,
                          int *nonfin) {
  int64_t k = p->k, kk = np * k, oes = odt == TPUMXU_DT_BF16 ? 2 : 4;
  int64_t nrows = k_rows ? kk : outer;
  *ld = k_rows ? outer : kk;
  if (odt == TPUMXU_DT_F32 && *ld % 256 == 0) *ld += 16;
  char *buf = tpumxu__ws_get((size_t)(nb * nrows * *ld * oes), cap);
  if (!buf) return NULL;
  pack_job J = {src, p->dtype, odt, np, parts, sb,
                k_rows ? s_k : s_outer, k_rows ? s_outer : s_k,
                k_rows ? k : outer, k_rows ? outer : k,
                *ld, nrows * *ld, {0}, buf, 0, 0};
  for (int q = 0; q < np; q++) J.poff[q] = k_rows ? q * k * *ld : q * k;
  J.rblocks = cdiv(J.rows, PACK_ROWS);
  int64_t per = PACK_ROWS * J.cols * J.np;
  tpurt_parallel_for(nb * J.rblocks, 1 + (1 << 15) / (per + 1), pack_fn, &J);
  *nonfin = J.nonfin;
  return buf;
}

/* ---- finishing C ------------------------------------------------------- */

typedef struct fin_job {
  const tpumxu__problem *p;
  float *t;         /* f32 result (NULL: C already final) */
  int zero_nonfin;  /* zero the non-finite entries of t (small terms) */
  int64_t rb, nrb;  /* rows per block, blocks per item */
} fin_job;

static void zero_fn(void *ctx, int64_t t0, int64_t t1) {
  float *s = ctx;
  for (int64_t i = t0; i < t1; i++)
    if (!isfinite(s[i])) s[i] = 0.f;
}

/* Zero the non-finite entries of a row-major (or unit-column-stride) f32
 * matrix batch. */
static void zero_nonfinite(float *s, int64_t batch, int64_t m, int64_t n,
                           int64_t sb, int64_t sm) {
  if (sb == m * n && sm == n) {
    tpurt_parallel_for(batch * m * n, 1 << 15, zero_fn, s);
    return;
  }
  for (int64_t b = 0; b < batch; b++)
    for (int64_t i = 0; i < m; i++)
      tpurt_parallel_for(n, 1 << 15, zero_fn, s + b * sb + i * sm);
}

static void fin_fn(void *ctx, int64_t t0, int64_t t1) {
  const fin_job *J = ctx;
  const tpumxu__problem *p = J->p;
  int64_t es = (int64_t)tpu_dtype_size(p->cdtype);
  for (int64_t t = t0; t < t1; t++) {
    int64_t b = t / J->nrb, i0 = (t % J->nrb) * J->rb;
    int64_t i1 = i0 + J->rb < p->m ? i0 + J->rb : p->m;
    if (J->t) {
      const float *tb = J->t + b * p->m * p->n;
      char *cb = p->c + b * p->sbc * es;
      for (int64_t i = i0; i < i1; i++)
        for (int64_t j = 0; j < p->n; j++) {
          float v = p->alpha * tb[i * p->n + j];
          char *cp = cb + (i * p->scm + j * p->scn) * es;
          switch (p->cdtype) {
          case TPU_F32:
            *(float *)cp = p->beta != 0.f ? v + p->beta * *(float *)cp : v;
            break;
          case TPU_BF16:
            if (p->beta != 0.f) v += p->beta * tpu_bf16_to_f32(*(uint16_t *)cp);
            *(uint16_t *)cp = tpu_f32_to_bf16(v);
            break;
          default:
            if (p->beta != 0.f) v += p->beta * tpu_f16_to_f32(*(uint16_t *)cp);
            *(uint16_t *)cp = tpu_f32_to_f16(v);
            break;
          }
        }
    }
    if (p->epi) p->epi(p->epi_ctx, b, i0, i1, 0, p->n);
  }
}

/* ---- driver ------------------------------------------------------------ */

int tpumxu__run(const tpumxu__problem *p) {
  const int split_f32 = p->dtype == TPU_F32 && p->prec != TPU_PREC_FP32;
  const int nsmall = !split_f32 ? 0 : p->prec == TPU_PREC_HIGHEST ? 5
                                   : p->prec == TPU_PREC_HIGH     ? 2 : 0;
  const int native = tpumxu__dnnl_bf16_native();
  /* operand element type handed to oneDNN */
  int odt = (split_f32 || p->dtype == TPU_BF16) && native ? TPUMXU_DT_BF16 : TPUMXU_DT_F32;
  /* one GEMM over f32 parts (see the top), unless a part is non-finite */
  int fused = nsmall && !native;
  int64_t m = p->m, n = p->n, k = p->k;
  int64_t ba = p->batch > 1 && p->sab == 0 ? 1 : p->batch;
  int64_t bb = p->batch > 1 && p->sbb == 0 ? 1 : p->batch;

  /* operands: used in place when oneDNN can read them as they are */
  int same_dt = (p->dtype == TPU_F32 && odt == TPUMXU_DT_F32 && !split_f32) ||
                (p->dtype == TPU_BF16 && odt == TPUMXU_DT_BF16);
  int a_direct = same_dt && p->sak == 1 && p->sam >= 0 && p->sab >= 0;
  int b_direct = same_dt && p->sbn == 1 && p->sbk >= 0 && p->sbb >= 0;
  /* a transposed operand (columns contiguous) is read in place too, by a
   * primitive of the problem's shape (the small-problem primitive takes
   * unit column strides): for big problems, and for batches of small ones
   * worth it (packing a transposed small operand cost as much as its
   * GEMM); oneDNN's transposed-A kernels keep the speed of the row-major
   * ones */
  int big = m * n * k > TPUMXU_SMALL_MACS;
  int shaped = big || p->batch * m * n * k >= TPUMXU_SMALL_POOL_MACS;
  int a_direct_t = same_dt && shaped && !a_direct && p->sam == 1 && p->sak > 0 && p->sab >= 0;
  int b_direct_t = same_dt && shaped && !b_direct && p->sbk == 1 && p->sbn > 0 && p->sbb >= 0;
  /* B read along K (a transposed weight): packed in its own order, rows of
   * B^T with the parts side by side, and handed to oneDNN transposed (its
   * kernels reorder B anyway), so packing needs no gather. Big problems
   * only: the small-problem primitive takes unit column strides. */
  int b_trans = !b_direct && !b_direct_t && p->sbk == 1 && p->sbn != 1 && big;
  /* likewise A read along M (the backward's transposed activations) */
  int a_trans = !a_direct && !a_direct_t && p->sam == 1 && p->sak != 1 && big;
  int64_t oes = odt == TPUMXU_DT_BF16 ? 2 : 4;
  size_t acap = 0, bcap = 0, tcap = 0;
  char *abuf = NULL, *bbuf = NULL;
  float *tbuf = NULL;
  int rc = TPU_OK;
  tpumxu__mat A, B, Ahi, Bhi, D;
  const int8_t *ap, *bp;
  int np, nonfin = 0;
  int64_t kk, ld;
repack:
  ap = bp = k_hi;
  np = 1;
  if (nsmall == 2) ap = fused ? k_a_high_f : k_a_high, bp = fused ? k_b_high_f : k_b_high, np = 2;
  if (nsmall == 5) {
    ap = fused ? k_a_highest_f : k_a_highest;
    bp = fused ? k_b_highest_f : k_b_highest;
    np = fused ? 3 : 5;
  }
  if (!split_f32 && p->dtype != TPU_BF16) ap = bp = k_raw; /* f16, FP32 */
  kk = np * k;
  if (a_direct || a_direct_t) {
    A = (tpumxu__mat){(void *)p->a, odt, p->sab, p->sam, p->sak};
  } else {
    abuf = pack_operand(p, p->a, odt, np, ap, p->sab, p->sam, p->sak, m, ba, a_trans, &ld, &acap,
                        &nonfin);
    if (!abuf) goto oom;
    A = a_trans ? (tpumxu__mat){abuf, odt, kk * ld, 1, ld} : (tpumxu__mat){abuf, odt, m * ld, ld, 1};
    if (fused && nonfin) goto unfuse;
  }
  if (b_direct || b_direct_t) {
    B = (tpumxu__mat){(void *)p->b, odt, p->sbb, p->sbk, p->sbn};
  } else {
    bbuf = pack_operand(p, p->b, odt, np, bp, p->sbb, p->sbn, p->sbk, n, bb, !b_trans, &ld, &bcap,
                        &nonfin);
    if (!bbuf) goto oom;
    B = b_trans ? (tpumxu__mat){bbuf, odt, n * ld, 1, ld} : (tpumxu__mat){bbuf, odt, kk * ld, ld, 1};
    if (fused && nonfin) goto unfuse;
  }
  if (ba == 1) A.sb = 0;
  if (bb == 1) B.sb = 0;

  /* result: C itself, or an f32 buffer finished below */
  const int zeroed = nsmall && !fused; /* small terms summed apart, zeroed */
  /* (oneDNN has no f32 x f32 -> bf16 kernel without native bf16) */
  int cdt_ok = p->cdtype == TPU_F32 || (p->cdtype == TPU_BF16 && nsmall == 0 && native);
  int direct = cdt_ok && p->alpha == 1.f && p->scn == 1 && p->scm >= 0 &&
               p->sbc >= 0 && (p->beta == 0.f || (p->beta == 1.f && !zeroed));
  if (direct) {
    D = (tpumxu__mat){p->c, p->cdtype == TPU_BF16 ? TPUMXU_DT_BF16 : TPUMXU_DT_F32,
                     p->sbc, p->scm, 1};
  } else {
    tbuf = tpumxu__ws_get((size_t)(p->batch * m * n * 4), &tcap);
    if (!tbuf) goto oom;
    D = (tpumxu__mat){tbuf, TPUMXU_DT_F32, m * n, n, 1};
  }
  if (zeroed) {
    /* small terms over the concatenated K, zeroed where non-finite */
    if ((rc = tpumxu__dnnl_matmul(p->batch, m, n, (nsmall == 2 ? 2 : 5) * k, &A, &B, &D, 0)))
      goto done;
    zero_nonfinite((float *)D.ptr, p->batch, m, n, D.sb, D.s0);
    /* hi parts: A' part at K offset ia, B' part at row offset ib */
    int64_t ia = nsmall == 2 ? 0 : 4 * k, ib = nsmall == 2 ? k : 3 * k;
    Ahi = A;
    Ahi.ptr = (char *)A.ptr + ia * A.s1 * oes;
    Bhi = B;
    Bhi.ptr = (char *)B.ptr + ib * B.s0 * oes;
    rc = tpumxu__dnnl_matmul(p->batch, m, n, k, &Ahi, &Bhi, &D, 1);
  } else {
    rc = tpumxu__dnnl_matmul(p->batch, m, n, kk, &A, &B, &D, direct && p->beta == 1.f);
  }
  if (rc) goto done;
  if (!direct || p->epi) {
    fin_job F = {p, direct ? NULL : tbuf, 0, 0, 0};
    F.rb = 1 + (1 << 14) / (n + 1);
    if (F.rb > m) F.rb = m;
    F.nrb = cdiv(m, F.rb);
    tpurt_parallel_for(p->batch * F.nrb, 1, fin_fn, &F);
  }
  goto done;
unfuse: /* a non-finite part: the path with separately zeroed small terms */
  tpumxu__ws_put(abuf, acap);
  tpumxu__ws_put(bbuf, bcap);
  abuf = bbuf = NULL;
  acap = bcap = 0;
  fused = 0;
  goto repack;
oom:
  rc = tpu_error(TPU_E_OOM, "tpumxu_gemm: out of host memory (workspace)");
done:
  tpumxu__ws_put(abuf, acap);
  tpumxu__ws_put(bbuf, bcap);
  tpumxu__ws_put(tbuf, tcap);
  return rc;
}

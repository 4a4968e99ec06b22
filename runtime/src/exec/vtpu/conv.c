/* exec/vtpu/conv.c - vTPU CONVOLUTION, REDUCE_WINDOW and WINDOW_ARGMAX.
 *
 * Convolution (PyTorch layouts, 1-3 spatial dims, normalised to 3 with
 * size-1 leading dims) runs on the matrix unit (tpumxu_gemm) with the
 * node's precision. Notation: lhs [N, C, s..], rhs [O, Fg, k..], G groups
 * (C = G*Fg, O = G*Og), out [N, O, q..]; K, I, Q = numel of the kernel,
 * input and output spatial dims; FK = Fg*K.
 *
 * 1. lhs_dilation == 1 (forward convs, stride-1 input gradients, weight
 *    gradients): im2col + GEMM per group, out_g = W_g [Og x FK] * col
 *    [FK x columns]. The columns are (batch item, output position); items
 *    are processed in chunks: a chunk of one item writes the GEMM result
 *    straight into the output (in cache-sized pieces of whole output
 *    lines); with small Q several items share one GEMM (so the packed
 *    weights are reused) and the result goes through a temporary. Two col
 *    layouts, picked by which line is longer:
 *      [FK][cols]  rows filled along the output's last spatial dim (usual)
 *      [cols][FK]  rows filled along the kernel's last spatial dim (weight
 *                  gradients, where the "kernel" is the output gradient
 *                  and the output is the small weight shape; f32/f64 split
 *                  the contraction over input channels, the GEMM
 *                  accumulating with beta = 1, to keep col cache-sized)
 *    1x1, stride-1, unpadded convs with large Q skip im2col: the GEMM
 *    reads lhs directly. (CV_SMALL_K > 0 would run short contractions as
 *    out^T = col^T W^T; the transposed store goes through the GEMM's slow
 *    generic epilogue, measured slower for the RGB stem, so it is off.)
 * 2. lhs_dilation > 1 (transposed convs, strided input gradients): no
 *    zero-stuffed input. T = Wt [K*Og x Fg] * lhs [Fg x (item, i)] (one
 *    GEMM for all taps), then col2im: out[b, o, q] += T[(k, o), (b, i)]
 *    where q * stride = i * ld + pad_lo - k * rd. Each output row is summed
 *    by one thread in a fixed order (deterministic). f16/bf16 compute T in
 *    f32 (exact products) and round once.
 * 3. Grouped convs with tiny groups (Og * Fg <= 4, e.g. depthwise): direct
 *    loops (see conv_direct).
 * Data types: f32 (precision passes), f16/bf16 (one pass, C rounded once),
 * f64 (exact). Temporaries are bounded (~64 MB per chunk buffer).
 *
 * REDUCE_WINDOW / WINDOW_ARGMAX: direct loops over output elements (in
 * parallel chunks), the window walked as an odometer over its dims with the
 * valid range of the innermost window dim computed up front; f32 windows
 * over the last two dims only (2-D pooling) by output rows (rw2_rows). SUM
 * accumulates in double (int64 for ints), MAX follows PyTorch's max-pool
 * rule (val > max || isnan(val)).
 */
#include <math.h>
#include <stdlib.h>

#include "exec/vtpu/internal.h"
#include "tpu_mxu.h"

#define CV_SP 3
#define CV_CHUNK_BYTES ((int64_t)64 << 20) /* cap of one col / T buffer */
#define CV_TARGET_COLS 1024 /* item-per-GEMM threshold on output columns */
#define CV_COL_BYTES ((int64_t)4 << 20) /* target of a cache-sized col chunk */
#define CV_MIN_COLS 512                 /* ... but at least this many columns */
#define CV_SMALL_K 0 /* contraction below which out^T = col^T W^T (off) */

typedef struct cgeo {
  int dt;
  int64_t es;
  int64_t N, C, O, G, Fg, Og;
  int64_t in[CV_SP], k[CV_SP], out[CV_SP];
  int64_t st[CV_SP], lo[CV_SP], ld[CV_SP], rd[CV_SP];
  int64_t K, Q, I, FK;
  const tpu_view *x, *w; /* lhs, rhs */
  const char *xb;        /* lhs element (0,0,0..) */
  int64_t xn, xc, xs[CV_SP];
  const char *wb;
  int64_t wo, wf, ws[CV_SP];
} cgeo;

static void geo_init(cgeo *g, const tpuir_node *n, const tpu_view *x,
                     const tpu_view *w) {
  memset(g, 0, sizeof *g);
  int nsp = n->na, pad = CV_SP - nsp;
  g->dt = x->dtype;
  g->es = (int64_t)tpu_dtype_size(x->dtype);
  g->N = x->sizes[0];
  g->C = x->sizes[1];
  g->O = w->sizes[0];
  g->Fg = w->sizes[1];
  g->G = n->dim;
  g->Og = g->O / g->G;
  g->x = x;
  g->w = w;
  g->xb = (const char *)x->base + x->offset * g->es;
  g->wb = (const char *)w->base + w->offset * g->es;
  g->xn = x->strides[0];
  g->xc = x->strides[1];
  g->wo = w->strides[0];
  g->wf = w->strides[1];
  for (int d = 0; d < CV_SP; d++) {
    if (d < pad) {
      g->in[d] = g->k[d] = g->out[d] = 1;
      g->st[d] = g->ld[d] = g->rd[d] = 1;
      g->lo[d] = 0;
      g->xs[d] = g->ws[d] = 0;
      continue;
    }
    int i = d - pad;
    g->in[d] = x->sizes[2 + i];
    g->k[d] = w->sizes[2 + i];
    g->out[d] = n->sizes[2 + i];
    g->st[d] = n->a[i];
    g->lo[d] = n->b[i];
    g->ld[d] = n->d[i];
    g->rd[d] = n->d[8 + i];
    g->xs[d] = x->strides[2 + i];
    g->ws[d] = w->strides[2 + i];
  }
  g->K = g->k[0] * g->k[1] * g->k[2];
  g->Q = g->out[0] * g->out[1] * g->out[2];
  g->I = g->in[0] * g->in[1] * g->in[2];
  g->FK = g->Fg * g->K;
}

/* Single stride of dims (sizes, strides) merged row-major, or 0 if they do
 * not merge (size-1 dims ignored; all size 1 -> stride 1). */
static int merged_stride(int n, const int64_t *sz, const int64_t *st,
                         int64_t *out) {
  int64_t s = 1, expect = 0;
  int have = 0;
  for (int i = n - 1; i >= 0; i--) {
    if (sz[i] == 1) continue;
    if (!have) {
      s = st[i];
      have = 1;
    } else if (st[i] != expect) {
      return 0;
    }
    expect = st[i] * sz[i];
  }
  *out = s;
  return 1;
}

/* ---- im2col --------------------------------------------------------------
 * dst[j] = src[(p0 + j*step) * sst] for 0 <= p0 + j*step < size, else 0. */
static void line_copy(char *dst, const char *src, int64_t sst, int64_t p0,
                      int64_t step, int64_t n, int64_t size, int64_t es) {
  int64_t jlo = 0, jhi = 0;
  if (p0 < 0) jlo = (-p0 + step - 1) / step;
  if (size - 1 - p0 >= 0) jhi = (size - 1 - p0) / step + 1;
  if (jhi > n) jhi = n;
  if (jlo > jhi) jlo = jhi;
  if (jlo > 0) memset(dst, 0, (size_t)(jlo * es));
  if (jhi < n) memset(dst + jhi * es, 0, (size_t)((n - jhi) * es));
  int64_t cnt = jhi - jlo;
  if (cnt <= 0) return;
  const char *s = src + (p0 + jlo * step) * sst * es;
  int64_t ss = step * sst;
  char *d = dst + jlo * es;
  if (ss == 1) {
    memcpy(d, s, (size_t)(cnt * es));
    return;
  }
  switch (es) {
  case 2: {
    uint16_t *o = (uint16_t *)d;
    const uint16_t *q = (const uint16_t *)s;
    for (int64_t j = 0; j < cnt; j++) o[j] = q[j * ss];
    break;
  }
  case 4: {
    uint32_t *o = (uint32_t *)d;
    const uint32_t *q = (const uint32_t *)s;
    for (int64_t j = 0; j < cnt; j++) o[j] = q[j * ss];
    break;
  }
  default: {
    uint64_t *o = (uint64_t *)d;
    const uint64_t *q = (const uint64_t *)s;
    for (int64_t j = 0; j < cnt; j++) o[j] = q[j * ss];
    break;
  }
  }
}

typedef struct i2c_job {
  const cgeo *g;
  int64_t b0, nb;   /* items [b0, b0+nb) */
  int64_t f0, fn;   /* input channels [f0, f0+fn) (absolute) */
  int64_t l0, l1;   /* output lines (q0, q1) [l0, l1) ([FK][cols] layout) */
  char *col;
} i2c_job;

/* layout [fn*K][nb * lines * out2]: row r = (f, k0, k1, k2) */
static void i2c_rows_fk(void *ctx, int64_t r0, int64_t r1) {
  const i2c_job *j = ctx;
  const cgeo *g = j->g;
  const int64_t es = g->es, ncols = j->nb * (j->l1 - j->l0) * g->out[2];
  for (int64_t r = r0; r < r1; r++) {
    int64_t f = r / g->K, kk = r % g->K;
    int64_t k2 = kk % g->k[2], k1 = (kk / g->k[2]) % g->k[1],
            k0 = kk / (g->k[2] * g->k[1]);
    char *dst = j->col + r * ncols * es;
    for (int64_t bl = 0; bl < j->nb; bl++) {
      const char *src = g->xb + ((j->b0 + bl) * g->xn + (j->f0 + f) * g->xc) * es;
      for (int64_t l = j->l0; l < j->l1; l++) {
        int64_t q0 = l / g->out[1], q1 = l % g->out[1];
        int64_t p0 = q0 * g->st[0] + k0 * g->rd[0] - g->lo[0];
        int64_t p1 = q1 * g->st[1] + k1 * g->rd[1] - g->lo[1];
        if (p0 < 0 || p0 >= g->in[0] || p1 < 0 || p1 >= g->in[1])
          memset(dst, 0, (size_t)(g->out[2] * es));
        else
          line_copy(dst, src + (p0 * g->xs[0] + p1 * g->xs[1]) * es, g->xs[2],
                    k2 * g->rd[2] - g->lo[2], g->st[2], g->out[2], g->in[2], es);
        dst += g->out[2] * es;
      }
    }
  }
}

/* layout [nb*Q][fn*K]: row r = (item, q0, q1, q2) */
static void i2c_rows_q(void *ctx, int64_t r0, int64_t r1) {
  const i2c_job *j = ctx;
  const cgeo *g = j->g;
  const int64_t es = g->es;
  for (int64_t r = r0; r < r1; r++) {
    int64_t bl = r / g->Q, q = r % g->Q;
    int64_t q2 = q % g->out[2], q1 = (q / g->out[2]) % g->out[1],
            q0 = q / (g->out[2] * g->out[1]);
    char *dst = j->col + r * j->fn * g->K * es;
    for (int64_t f = 0; f < j->fn; f++) {
      const char *src = g->xb + ((j->b0 + bl) * g->xn + (j->f0 + f) * g->xc) * es;
      for (int64_t k0 = 0; k0 < g->k[0]; k0++) {
        int64_t p0 = q0 * g->st[0] + k0 * g->rd[0] - g->lo[0];
        int ok0 = p0 >= 0 && p0 < g->in[0];
        for (int64_t k1 = 0; k1 < g->k[1]; k1++) {
          int64_t p1 = q1 * g->st[1] + k1 * g->rd[1] - g->lo[1];
          if (!ok0 || p1 < 0 || p1 >= g->in[1])
            memset(dst, 0, (size_t)(g->k[2] * es));
          else
            line_copy(dst, src + (p0 * g->xs[0] + p1 * g->xs[1]) * es, g->xs[2],
                      q2 * g->st[2] - g->lo[2], g->rd[2], g->k[2], g->in[2], es);
          dst += g->k[2] * es;
        }
      }
    }
  }
}

static int64_t grain_for(int64_t per_row) {
  int64_t gr = XK_GRAIN / (per_row > 0 ? per_row : 1);
  return gr < 1 ? 1 : gr;
}

/* Contiguous copy of rhs in dtype dt with dims (o, f, k0, k1, k2). */
static int copy_w(const cgeo *g, int dt, void **own) {
  int64_t sz[5] = {g->O, g->Fg, g->k[0], g->k[1], g->k[2]};
  tpu_view src = *g->w, dst;
  src.ndim = 5;
  int64_t st[5] = {g->wo, g->wf, g->ws[0], g->ws[1], g->ws[2]};
  for (int i = 0; i < 5; i++) {
    src.sizes[i] = sz[i];
    src.strides[i] = st[i];
  }
  int64_t n = g->O * g->FK;
  void *m = tpux__alloc((size_t)n * tpu_dtype_size(dt));
  if (!m) return tpu_error(TPU_E_OOM, "convolution: out of host memory");
  tpu_view_init_contiguous(&dst, m, dt, 5, sz);
  int rc = n ? tpux__copy_nocheck(&dst, &src) : TPU_OK;
  if (rc) {
    tpux__free(m);
    return rc;
  }
  *own = m;
  return TPU_OK;
}

/* Convolution with lhs_dilation == 1 (im2col + GEMM). The col buffer is
 * kept cache-sized where that is free: one item's columns are processed in
 * chunks of whole output lines (the GEMM writes each chunk's columns of
 * the output directly), and in the kernel-wide layout (weight gradients)
 * the contraction is split over input channels with the GEMM accumulating
 * (beta = 1; f32/f64 only, so no intermediate rounding). */
static int conv_im2col(const cgeo *g, int prec, char *out) {
  const int dt = g->dt;
  const int64_t es = g->es, FK = g->FK, Q = g->Q, O = g->O, K = g->K;
  /* A = W_g: rows o (stride wo), contraction (f, k..) merged */
  int64_t asz[4] = {g->Fg, g->k[0], g->k[1], g->k[2]};
  int64_t ast[4] = {g->wf, g->ws[0], g->ws[1], g->ws[2]};
  int64_t sak, sam = g->wo;
  const char *wbase = g->wb;
  void *wown = NULL;
  int rc = TPU_OK;
  if (!merged_stride(4, asz, ast, &sak)) {
    if ((rc = copy_w(g, dt, &wown))) return rc;
    wbase = wown;
    sam = FK;
    sak = 1;
  }
  /* direct: 1x1, stride 1, no padding, output = input, mergeable spatial */
  int direct = Q >= CV_TARGET_COLS;
  for (int d = 0; d < CV_SP && direct; d++)
    direct = g->k[d] == 1 && g->st[d] == 1 && g->lo[d] == 0 && g->out[d] == g->in[d];
  int64_t qs = 1;
  if (direct) direct = merged_stride(CV_SP, g->in, g->xs, &qs);
  if (direct) {
    for (int64_t gi = 0; gi < g->G && !rc; gi++)
      rc = tpumxu_gemm(dt, prec, g->N, g->Og, Q, g->Fg, 1.0,
                       wbase + gi * g->Og * sam * es, 0, sam, sak,
                       g->xb + gi * g->Fg * g->xc * es, g->xn, g->xc, qs, 0.0,
                       out + gi * g->Og * Q * es, O * Q, Q, 1);
    tpux__free(wown);
    return rc;
  }
  /* layout: fill along the longer of (output, kernel) last dims */
  int by_q = g->k[2] > g->out[2];
  int64_t nb = 1;
  if (Q < CV_TARGET_COLS) {
    int64_t per = FK * Q * es;
    nb = per > 0 ? CV_CHUNK_BYTES / per : g->N;
    if (nb > g->N) nb = g->N;
    if (nb < 1) nb = 1;
  }
  /* output-line chunks (one item per GEMM, [FK][cols] layout) */
  const int64_t lines = g->out[0] * g->out[1], lw = g->out[2];
  int64_t lchunk = lines;
  if (nb == 1 && !by_q) {
    int64_t cols = CV_COL_BYTES / (FK * es);
    if (cols < CV_MIN_COLS) cols = CV_MIN_COLS;
    lchunk = cols / lw;
    if (lchunk < 1) lchunk = 1;
    if (lchunk > lines) lchunk = lines;
  }
  /* contraction chunks over input channels (kernel-wide layout) */
  int64_t fchunk = g->Fg;
  if (by_q && (dt == TPU_F32 || dt == TPU_F64) && FK * nb * Q * es > CV_COL_BYTES) {
    fchunk = CV_COL_BYTES / (K * nb * Q * es);
    if (fchunk < 1) fchunk = 1;
  }
  char *col = tpux__alloc((size_t)(fchunk * K * nb * lchunk * lw * es));
  char *tmp = nb > 1 ? tpux__alloc((size_t)(g->Og * nb * Q * es)) : NULL;
  if (!col || (nb > 1 && !tmp)) {
    rc = tpu_error(TPU_E_OOM, "convolution: out of host memory");
    goto done;
  }
  for (int64_t b0 = 0; b0 < g->N && !rc; b0 += nb) {
    int64_t cnb = g->N - b0 < nb ? g->N - b0 : nb;
    for (int64_t gi = 0; gi < g->G && !rc; gi++) {
      for (int64_t l0 = 0; l0 < lines && !rc; l0 += lchunk) {
        int64_t l1 = l0 + lchunk < lines ? l0 + lchunk : lines;
        int64_t ncols = cnb * (l1 - l0) * lw;
        for (int64_t f0 = 0; f0 < g->Fg && !rc; f0 += fchunk) {
          int64_t fn = g->Fg - f0 < fchunk ? g->Fg - f0 : fchunk, fk = fn * K;
          i2c_job j = {g, b0, cnb, gi * g->Fg + f0, fn, l0, l1, col};
          if (by_q) tpurt_parallel_for(ncols, grain_for(fk), i2c_rows_q, &j);
          else tpurt_parallel_for(fk, grain_for(ncols), i2c_rows_fk, &j);
          int64_t sbk = by_q ? 1 : ncols, sbn = by_q ? fk : 1;
          const char *ab = wbase + (gi * g->Og * sam + f0 * K * sak) * es;
          double beta = f0 > 0 ? 1.0 : 0.0;
          char *cdst = out + ((b0 * O + gi * g->Og) * Q + l0 * lw) * es;
          if (cnb == 1 && !by_q && fk < CV_SMALL_K)
            /* out^T = col^T W^T: the many columns become the GEMM's rows
             * (measured faster for short contractions, e.g. the RGB stem) */
            rc = tpumxu_gemm(dt, prec, 1, ncols, g->Og, fk, 1.0, col, 0, 1, ncols,
                             ab, 0, sak, sam, beta, cdst, 0, 1, Q);
          else if (cnb == 1)
            rc = tpumxu_gemm(dt, prec, 1, g->Og, ncols, fk, 1.0, ab, 0, sam, sak,
                             col, 0, sbk, sbn, beta, cdst, 0, Q, 1);
          else
            rc = tpumxu_gemm(dt, prec, 1, g->Og, ncols, fk, 1.0, ab, 0, sam, sak,
                             col, 0, sbk, sbn, beta, tmp, 0, ncols, 1);
        }
      }
      if (rc || cnb == 1) continue;
      /* tmp [Og][cnb][Q] -> out[b0 + b][gi*Og + o][q] */
      tpu_view sv, dv;
      int64_t sz[3] = {g->Og, cnb, Q};
      tpu_view_init_contiguous(&sv, tmp, dt, 3, sz);
      dv = sv;
      dv.base = out;
      dv.offset = (b0 * O + gi * g->Og) * Q;
      dv.strides[0] = Q;
      dv.strides[1] = O * Q;
      dv.strides[2] = 1;
      rc = tpux__copy_nocheck(&dv, &sv);
    }
  }
done:
  tpux__free(col);
  tpux__free(tmp);
  tpux__free(wown);
  return rc;
}

/* ---- lhs_dilation > 1: GEMM over all taps, then col2im ------------------ */

typedef struct c2i_job {
  const cgeo *g;
  int tdt, odt;
  int64_t b0, nb, o0; /* items, first output channel of the group */
  const char *T;      /* [K][Og][nb*I] */
  char *out;
  int oom;
} c2i_job;

#define C2I_BODY(TY)                                                          \
  do {                                                                        \
    TY *acc = (TY *)accv;                                                     \
    memset(acc, 0, sizeof(TY) * (size_t)g->Q);                                \
    const TY *T = (const TY *)j->T;                                           \
    for (int64_t kk = 0; kk < g->K; kk++) {                                   \
      int64_t k2 = kk % g->k[2], k1 = (kk / g->k[2]) % g->k[1],               \
              k0 = kk / (g->k[2] * g->k[1]);                                  \
      const TY *trow = T + ((kk * g->Og + o) * ncols + bl * g->I);            \
      int64_t c0 = g->lo[0] - k0 * g->rd[0], c1 = g->lo[1] - k1 * g->rd[1],   \
              c2 = g->lo[2] - k2 * g->rd[2];                                  \
      for (int64_t i0 = 0; i0 < g->in[0]; i0++) {                             \
        int64_t p0 = i0 * g->ld[0] + c0;                                      \
        if (p0 < 0 || p0 % g->st[0]) continue;                                \
        int64_t q0 = p0 / g->st[0];                                           \
        if (q0 >= g->out[0]) continue;                                        \
        for (int64_t i1 = 0; i1 < g->in[1]; i1++) {                           \
          int64_t p1 = i1 * g->ld[1] + c1;                                    \
          if (p1 < 0 || p1 % g->st[1]) continue;                              \
          int64_t q1 = p1 / g->st[1];                                         \
          if (q1 >= g->out[1]) continue;                                      \
          TY *arow = acc + (q0 * g->out[1] + q1) * g->out[2];                 \
          const TY *tr = trow + (i0 * g->in[1] + i1) * g->in[2];              \
          if (g->st[2] == 1) {                                                \
            int64_t ilo = c2 < 0 ? (-c2 + g->ld[2] - 1) / g->ld[2] : 0;       \
            int64_t ihi = g->out[2] - 1 - c2 >= 0                             \
                              ? (g->out[2] - 1 - c2) / g->ld[2] + 1           \
                              : 0;                                            \
            if (ihi > g->in[2]) ihi = g->in[2];                               \
            for (int64_t i2 = ilo; i2 < ihi; i2++)                            \
              arow[i2 * g->ld[2] + c2] += tr[i2];                             \
          } else {                                                            \
            for (int64_t i2 = 0; i2 < g->in[2]; i2++) {                       \
              int64_t p2 = i2 * g->ld[2] + c2;                                \
              if (p2 < 0 || p2 % g->st[2]) continue;                          \
              int64_t q2 = p2 / g->st[2];                                     \
              if (q2 < g->out[2]) arow[q2] += tr[i2];                         \
            }                                                                 \
          }                                                                   \
        }                                                                     \
      }                                                                       \
    }                                                                         \
  } while (0)

/* rows r = (item, o) of the group's output */
static void c2i_rows(void *ctx, int64_t r0, int64_t r1) {
  c2i_job *j = ctx;
  const cgeo *g = j->g;
  int64_t tes = (int64_t)tpu_dtype_size(j->tdt), oes = g->es;
  int64_t ncols = j->nb * g->I;
  void *accv = malloc((size_t)(g->Q * tes + 64));
  if (!accv) {
    __atomic_store_n(&j->oom, 1, __ATOMIC_RELAXED);
    return;
  }
  for (int64_t r = r0; r < r1; r++) {
    int64_t bl = r / g->Og, o = r % g->Og;
    if (j->tdt == TPU_F64) C2I_BODY(double);
    else C2I_BODY(float);
    char *dst = j->out + (((j->b0 + bl) * g->O + j->o0 + o) * g->Q) * oes;
    tpux__store(j->odt, dst, 1, g->Q, accv);
  }
  free(accv);
}

static int conv_scatter(const cgeo *g, int prec, char *out) {
  const int dt = g->dt;
  const int tdt = dt == TPU_F64 ? TPU_F64 : TPU_F32;
  const int tprec = dt == TPU_F32 ? prec : TPU_PREC_FP32;
  const int64_t tes = (int64_t)tpu_dtype_size(tdt);
  const int64_t K = g->K, Og = g->Og, Fg = g->Fg, I = g->I;
  int rc = TPU_OK;
  /* Wt [G][K][Og][Fg] in tdt */
  int64_t wsz[6] = {g->G, g->k[0], g->k[1], g->k[2], Og, Fg};
  tpu_view wsrc = *g->w, wdst;
  wsrc.ndim = 6;
  int64_t wst[6] = {Og * g->wo, g->ws[0], g->ws[1], g->ws[2], g->wo, g->wf};
  for (int i = 0; i < 6; i++) {
    wsrc.sizes[i] = wsz[i];
    wsrc.strides[i] = wst[i];
  }
  int64_t per = K * Og * I * tes + Fg * I * tes;
  int64_t nb = per > 0 ? CV_CHUNK_BYTES / per : g->N;
  if (nb > g->N) nb = g->N;
  if (nb < 1) nb = 1;
  char *wt = tpux__alloc((size_t)(g->G * K * Og * Fg * tes));
  char *lc = tpux__alloc((size_t)(Fg * nb * I * tes));
  char *T = tpux__alloc((size_t)(K * Og * nb * I * tes));
  if (!wt || !lc || !T) {
    rc = tpu_error(TPU_E_OOM, "convolution: out of host memory");
    goto done;
  }
  tpu_view_init_contiguous(&wdst, wt, tdt, 6, wsz);
  if (g->G * K * Og * Fg > 0 && (rc = tpux__copy_nocheck(&wdst, &wsrc))) goto done;
  for (int64_t b0 = 0; b0 < g->N && !rc; b0 += nb) {
    int64_t cnb = g->N - b0 < nb ? g->N - b0 : nb, ncols = cnb * I;
    for (int64_t gi = 0; gi < g->G && !rc; gi++) {
      /* lhs[b0.., gi*Fg + f, i..] -> lc [Fg][cnb][in0][in1][in2] */
      int64_t lsz[5] = {Fg, cnb, g->in[0], g->in[1], g->in[2]};
      tpu_view ls = *g->x, ldv;
      ls.ndim = 5;
      ls.offset = g->x->offset + b0 * g->xn + gi * Fg * g->xc;
      int64_t lst[5] = {g->xc, g->xn, g->xs[0], g->xs[1], g->xs[2]};
      for (int i = 0; i < 5; i++) {
        ls.sizes[i] = lsz[i];
        ls.strides[i] = lst[i];
      }
      tpu_view_init_contiguous(&ldv, lc, tdt, 5, lsz);
      if (Fg * ncols > 0 && (rc = tpux__copy_nocheck(&ldv, &ls))) break;
      rc = tpumxu_gemm(tdt, tprec, 1, K * Og, ncols, Fg, 1.0,
                       wt + gi * K * Og * Fg * tes, 0, Fg, 1, lc, 0, ncols, 1,
                       0.0, T, 0, ncols, 1);
      if (rc) break;
      c2i_job j = {g, tdt, dt, b0, cnb, gi * Og, T, out, 0};
      tpurt_parallel_for(cnb * Og, grain_for(g->Q * K), c2i_rows, &j);
      if (j.oom) rc = tpu_error(TPU_E_OOM, "convolution: out of host memory");
    }
  }
done:
  tpux__free(wt);
  tpux__free(lc);
  tpux__free(T);
  return rc;
}

/* ---- small groups (depthwise): direct loops ------------------------------
 * Grouped convs with Og * Fg <= 4 would be G tiny GEMMs; they run as direct
 * loops instead, rows (item, o, q0, q1) in parallel, each output line
 * accumulated in f32 (f64 for f64). f32 DEFAULT rounds both operands to bf16
 * (exact products, f32 sums: the one-pass MXU result); f32 HIGH and HIGHEST
 * use plain fp32 products (at least as accurate as the passes). */
typedef struct dw_job {
  const cgeo *g;
  int round_bf16;
  char *out;
  int oom;
} dw_job;

static inline double cv_load1(int dt, const char *p) {
  switch (dt) {
  case TPU_F32: return *(const float *)p;
  case TPU_F64: return *(const double *)p;
  case TPU_BF16: return tpu_bf16_to_f32(*(const uint16_t *)p);
  default: return tpu_f16_to_f32(*(const uint16_t *)p);
  }
}

#define DW_BODY(TY)                                                           \
  do {                                                                        \
    TY *acc = (TY *)accv, *xr = (TY *)xrv;                                    \
    for (int64_t i = 0; i < g->out[2]; i++) acc[i] = 0;                       \
    for (int64_t f = 0; f < g->Fg; f++) {                                     \
      int64_t c = gi * g->Fg + f;                                             \
      for (int64_t k0 = 0; k0 < g->k[0]; k0++) {                              \
        int64_t p0 = q0 * g->st[0] + k0 * g->rd[0] - g->lo[0];                \
        if (p0 < 0 || p0 >= g->in[0]) continue;                               \
        for (int64_t k1 = 0; k1 < g->k[1]; k1++) {                            \
          int64_t p1 = q1 * g->st[1] + k1 * g->rd[1] - g->lo[1];              \
          if (p1 < 0 || p1 >= g->in[1]) continue;                             \
          tpux__load(g->dt,                                                   \
                     g->xb + (nn * g->xn + c * g->xc + p0 * g->xs[0] +        \
                              p1 * g->xs[1]) * g->es,                         \
                     g->xs[2], g->in[2], xr);                                 \
          if (J->round_bf16)                                                  \
            for (int64_t i = 0; i < g->in[2]; i++)                            \
              xr[i] = (TY)xk_round_bf16((float)xr[i]);                        \
          for (int64_t k2 = 0; k2 < g->k[2]; k2++) {                          \
            TY wv = (TY)cv_load1(g->dt, g->wb + (o * g->wo + f * g->wf +      \
                                                 k0 * g->ws[0] +              \
                                                 k1 * g->ws[1] +              \
                                                 k2 * g->ws[2]) * g->es);     \
            if (J->round_bf16) wv = (TY)xk_round_bf16((float)wv);             \
            int64_t c2 = k2 * g->rd[2] - g->lo[2], st = g->st[2];             \
            int64_t qlo = c2 < 0 ? (-c2 + st - 1) / st : 0;                   \
            int64_t qhi = g->in[2] - 1 - c2 >= 0                              \
                              ? (g->in[2] - 1 - c2) / st + 1                  \
                              : 0;                                            \
            if (qhi > g->out[2]) qhi = g->out[2];                             \
            if (st == 1)                                                      \
              for (int64_t q2 = qlo; q2 < qhi; q2++) acc[q2] += wv * xr[q2 + c2]; \
            else                                                              \
              for (int64_t q2 = qlo; q2 < qhi; q2++)                          \
                acc[q2] += wv * xr[q2 * st + c2];                             \
          }                                                                   \
        }                                                                     \
      }                                                                       \
    }                                                                         \
  } while (0)

static void dw_rows(void *ctx, int64_t r0, int64_t r1) {
  dw_job *J = ctx;
  const cgeo *g = J->g;
  const int f64 = g->dt == TPU_F64;
  const size_t tes = f64 ? 8 : 4;
  void *accv = malloc(tes * (size_t)g->out[2] + 64);
  void *xrv = malloc(tes * (size_t)g->in[2] + 64);
  if (!accv || !xrv) {
    __atomic_store_n(&J->oom, 1, __ATOMIC_RELAXED);
    free(accv);
    free(xrv);
    return;
  }
  const int64_t L = g->out[0] * g->out[1];
  for (int64_t r = r0; r < r1; r++) {
    int64_t nn = r / (g->O * L), o = (r / L) % g->O, l = r % L;
    int64_t q0 = l / g->out[1], q1 = l % g->out[1], gi = o / g->Og;
    if (f64) DW_BODY(double);
    else DW_BODY(float);
    tpux__store(g->dt, J->out + ((nn * g->O + o) * g->Q + l * g->out[2]) * g->es, 1,
                g->out[2], accv);
  }
  free(accv);
  free(xrv);
}

static int conv_direct(const cgeo *g, int prec, char *out) {
  dw_job J = {g, g->dt == TPU_F32 && prec == TPU_PREC_DEFAULT, out, 0};
  int64_t rows = g->N * g->O * g->out[0] * g->out[1];
  int64_t per = g->out[2] * g->Fg * g->K;
  tpurt_parallel_for(rows, grain_for(per), dw_rows, &J);
  return J.oom ? tpu_error(TPU_E_OOM, "convolution: out of host memory") : TPU_OK;
}

/* The convolution on oneDNN (tpumxu_conv), recognising the three forms the
 * lowering emits: a forward conv; a weight gradient (lhs = x as
 * [C, N, I], rhs = dy as [O, N, Q], result [C, O, k]: a "kernel" larger
 * than the result, feature groups 1); an input gradient (lhs dilated by
 * the stride, window stride 1, rhs = the weights transposed and reversed).
 * TPU_E_UNSUPPORTED: not taken (the caller's loops run it). */
static int conv_onednn(const tpuir_node *n, const tpu_view *x, const tpu_view *w, char *out,
                       int prec) {
  const int nsp = n->na, nd = 2 + nsp;
  const int64_t es = (int64_t)tpu_dtype_size(x->dtype);
  tpumxu_conv_args A;
  memset(&A, 0, sizeof A);
  A.dtype = x->dtype;
  A.precision = prec;
  A.nsp = nsp;
  int64_t os[5], acc = 1, Kn = 1, Qn = 1;
  for (int i = nd - 1; i >= 0; i--) {
    os[i] = acc;
    acc *= n->sizes[i];
  }
  int ld = 0;
  for (int i = 0; i < nsp; i++) {
    ld |= n->d[i] != 1;
    Kn *= w->sizes[2 + i];
    Qn *= n->sizes[2 + i];
  }
  char *xb = (char *)x->base + x->offset * es, *wb = (char *)w->base + w->offset * es;
  if (!ld && Kn <= Qn) { /* forward */
    A.kind = TPUMXU_CONV_FWD;
    A.N = x->sizes[0];
    A.C = x->sizes[1];
    A.O = w->sizes[0];
    A.G = n->dim;
    A.x = xb;
    A.w = wb;
    A.y = out;
    A.ws[0] = (A.O / A.G) * w->strides[0];
    A.ws[1] = w->strides[0];
    A.ws[2] = w->strides[1];
    for (int i = 0; i < nd; i++) {
      A.xs[i] = x->strides[i];
      A.ys[i] = os[i];
    }
    for (int i = 0; i < nsp; i++) {
      A.in[i] = x->sizes[2 + i];
      A.k[i] = w->sizes[2 + i];
      A.out[i] = n->sizes[2 + i];
      A.stride[i] = n->a[i];
      A.dil[i] = n->d[8 + i];
      A.pad_l[i] = n->b[i];
      A.ws[3 + i] = w->strides[2 + i];
    }
  } else if (!ld) { /* weight gradient: result[c, o, t] = dw[o, c, t] */
    if (n->dim != 1) return TPU_E_UNSUPPORTED;
    A.kind = TPUMXU_CONV_BWD_WEIGHTS;
    A.N = x->sizes[1];
    A.C = x->sizes[0];
    A.O = w->sizes[0];
    A.G = 1;
    A.x = xb;
    A.y = wb;
    A.w = out;
    A.xs[0] = x->strides[1];
    A.xs[1] = x->strides[0];
    A.ys[0] = w->strides[1];
    A.ys[1] = w->strides[0];
    A.ws[0] = acc;
    A.ws[1] = os[1];
    A.ws[2] = os[0];
    for (int i = 0; i < nsp; i++) {
      A.in[i] = x->sizes[2 + i];
      A.out[i] = w->sizes[2 + i];
      A.k[i] = n->sizes[2 + i];
      A.stride[i] = n->d[8 + i];
      A.dil[i] = n->a[i];
      A.pad_l[i] = n->b[i];
      A.xs[2 + i] = x->strides[2 + i];
      A.ys[2 + i] = w->strides[2 + i];
      A.ws[3 + i] = os[2 + i];
    }
  } else { /* input gradient: rhs[g*Og + c, o, t] = w[g*Fg + o, c, k-1-t] */
    A.kind = TPUMXU_CONV_BWD_DATA;
    A.N = x->sizes[0];
    A.O = x->sizes[1];
    A.C = w->sizes[0];
    A.G = n->dim;
    A.y = xb;
    A.x = out;
    A.ws[0] = (A.C / A.G) * w->strides[0];
    A.ws[1] = w->strides[1];
    A.ws[2] = w->strides[0];
    for (int i = 0; i < nd; i++) {
      A.ys[i] = x->strides[i];
      A.xs[i] = os[i];
    }
    for (int i = 0; i < nsp; i++) {
      if (n->a[i] != 1) return TPU_E_UNSUPPORTED;
      int64_t kk = w->sizes[2 + i];
      A.in[i] = n->sizes[2 + i];
      A.out[i] = x->sizes[2 + i];
      A.k[i] = kk;
      A.stride[i] = n->d[i];
      A.dil[i] = n->d[8 + i];
      A.pad_l[i] = n->d[8 + i] * (kk - 1) - n->b[i];
      A.ws[3 + i] = -w->strides[2 + i];
      wb += (kk - 1) * w->strides[2 + i] * es;
    }
    A.w = wb;
  }
  return tpumxu_conv(&A);
}

static int eval_convolution(xctx *c, int t) {
  const tpuir_node *n = tpuir_get_node(c->g, t);
  const tpu_view *x = &c->vals[n->in[0]].v, *w = &c->vals[n->in[1]].v;
  int rc = tpux__alloc_value(c, t);
  if (rc) return rc;
  cgeo g;
  geo_init(&g, n, x, w);
  char *out = c->vals[t].v.base;
  if (g.N * g.O * g.Q == 0) return TPU_OK;
  if (g.FK == 0 || g.I == 0) { /* no inputs: zeros */
    memset(out, 0, (size_t)(g.N * g.O * g.Q * g.es));
    return TPU_OK;
  }
  int dil = 0;
  for (int d = 0; d < CV_SP; d++) dil |= g.ld[d] != 1;
  int prec = g.dt == TPU_F32 ? n->kind : TPU_PREC_DEFAULT;
  rc = conv_onednn(n, x, w, out, prec);
  if (rc != TPU_E_UNSUPPORTED) return rc;
  if (dil) return conv_scatter(&g, prec, out);
  if (g.G > 1 && g.Og * g.Fg <= 4 && g.out[2] >= g.k[2])
    return conv_direct(&g, prec, out);
  return conv_im2col(&g, prec, out);
}

/* ---- windows ------------------------------------------------------------ */

#define RW_MAX 8

typedef struct rw_job {
  int op, kind, dt, rank;
  const char *xb; /* element (0..) of x */
  int64_t xs[RW_MAX], xsz[RW_MAX], osz[RW_MAX];
  int64_t w[RW_MAX], s[RW_MAX], lo[RW_MAX], dl[RW_MAX];
  int64_t imul[RW_MAX]; /* argmax index multipliers (0 off the index dims) */
  int nact, act[RW_MAX]; /* dims with window > 1, the innermost last */
  char *y;               /* contiguous result */
} rw_job;

static inline double rw_load(int dt, const char *p) {
  switch (dt) {
  case TPU_F32: return *(const float *)p;
  case TPU_F64: return *(const double *)p;
  case TPU_BF16: return tpu_bf16_to_f32(*(const uint16_t *)p);
  case TPU_F16: return tpu_f16_to_f32(*(const uint16_t *)p);
  case TPU_U8: return *(const uint8_t *)p;
  case TPU_I8: return *(const int8_t *)p;
  case TPU_I16: return *(const int16_t *)p;
  case TPU_I32: return *(const int32_t *)p;
  default: return (double)*(const int64_t *)p;
  }
}
static inline int64_t rw_loadi(int dt, const char *p) {
  switch (dt) {
  case TPU_U8: return *(const uint8_t *)p;
  case TPU_I8: return *(const int8_t *)p;
  case TPU_I16: return *(const int16_t *)p;
  case TPU_I32: return *(const int32_t *)p;
  default: return *(const int64_t *)p;
  }
}

/* A float window result as dtype dt (f16/bf16 rounded from f32). */
static inline void rw_store(int dt, char *p, double v) {
  switch (dt) {
  case TPU_F32: *(float *)p = (float)v; break;
  case TPU_F64: *(double *)p = v; break;
  case TPU_BF16: *(uint16_t *)p = tpu_f32_to_bf16((float)v); break;
  default: *(uint16_t *)p = tpu_f32_to_f16((float)v); break;
  }
}

/* One output element at multi-index q: walks its window. */
#define RW_WALK(VISIT)                                                         \
  do {                                                                         \
    int64_t base = 0, ibase = 0, p[RW_MAX];                                    \
    int empty = 0;                                                             \
    for (int d = 0; d < J->rank; d++) {                                        \
      p[d] = q[d] * J->s[d] - J->lo[d];                                        \
      if (J->w[d] == 1) {                                                      \
        if (p[d] < 0 || p[d] >= J->xsz[d]) empty = 1;                          \
        base += p[d] * J->xs[d];                                               \
        ibase += p[d] * J->imul[d];                                            \
      }                                                                        \
    }                                                                          \
    if (empty) break;                                                          \
    int na = J->nact;                                                          \
    int64_t wi[RW_MAX] = {0};                                                  \
    int in_d = na > 0 ? J->act[na - 1] : -1;                                   \
    int64_t jlo = 0, jhi = 1;                                                  \
    if (in_d >= 0) {                                                           \
      int64_t p0 = p[in_d], st = J->dl[in_d];                                  \
      jlo = p0 < 0 ? (-p0 + st - 1) / st : 0;                                  \
      jhi = J->xsz[in_d] - 1 - p0 >= 0 ? (J->xsz[in_d] - 1 - p0) / st + 1 : 0; \
      if (jhi > J->w[in_d]) jhi = J->w[in_d];                                  \
    }                                                                          \
    for (;;) {                                                                 \
      int ok = 1;                                                              \
      int64_t off = base, ioff = ibase;                                        \
      for (int a = 0; a < na - 1; a++) {                                       \
        int d = J->act[a];                                                     \
        int64_t pos = p[d] + wi[a] * J->dl[d];                                 \
        if (pos < 0 || pos >= J->xsz[d]) ok = 0;                               \
        off += pos * J->xs[d];                                                 \
        ioff += pos * J->imul[d];                                              \
      }                                                                        \
      if (ok) {                                                                \
        for (int64_t jj = jlo; jj < jhi; jj++) {                               \
          int64_t pos = in_d >= 0 ? p[in_d] + jj * J->dl[in_d] : 0;            \
          const char *ep = J->xb + (off + (in_d >= 0 ? pos * J->xs[in_d] : 0)) * es; \
          int64_t eidx = ioff + (in_d >= 0 ? pos * J->imul[in_d] : 0);         \
          (void)eidx;                                                          \
          VISIT;                                                               \
        }                                                                      \
      }                                                                        \
      int a = na - 2;                                                          \
      for (; a >= 0; a--) {                                                    \
        if (++wi[a] < J->w[J->act[a]]) break;                                  \
        wi[a] = 0;                                                             \
      }                                                                        \
      if (a < 0) break;                                                        \
    }                                                                          \
  } while (0)

static void rw_range(void *ctx, int64_t e0, int64_t e1) {
  const rw_job *J = ctx;
  const int dt = J->dt;
  const int64_t es = (int64_t)tpu_dtype_size(dt);
  const int isf = tpu_dtype_is_float(dt);
  int64_t q[RW_MAX];
  int64_t rem = e0;
  for (int d = J->rank - 1; d >= 0; d--) {
    q[d] = J->osz[d] ? rem % J->osz[d] : 0;
    rem = J->osz[d] ? rem / J->osz[d] : 0;
  }
  for (int64_t e = e0; e < e1; e++) {
    if (J->op == TPUIR_WINDOW_ARGMAX) {
      double m = -INFINITY;
      int64_t mi = -1, im = INT64_MIN;
      if (isf) {
        RW_WALK({
          double v = rw_load(dt, ep);
          if (mi < 0) mi = eidx; /* PyTorch starts at the first valid one */
          if (v > m || isnan(v)) {
            m = v;
            mi = eidx;
          }
        });
      } else {
        RW_WALK({
          int64_t v = rw_loadi(dt, ep);
          if (mi < 0) mi = eidx;
          if (v > im) {
            im = v;
            mi = eidx;
          }
        });
      }
      ((int64_t *)J->y)[e] = mi;
    } else if (J->kind == TPUIR_RED_MAX) {
      if (isf) {
        double m = -INFINITY;
        RW_WALK({
          double v = rw_load(dt, ep);
          if (v > m || isnan(v)) m = v;
        });
        rw_store(dt, J->y + e * es, m);
      } else {
        int64_t m = INT64_MIN;
        RW_WALK({
          int64_t v = rw_loadi(dt, ep);
          if (v > m) m = v;
        });
        tpux__store(dt, J->y + e * es, 1, 1, &m);
      }
    } else { /* SUM */
      if (isf) {
        double acc = 0;
        RW_WALK({ acc += rw_load(dt, ep); });
        rw_store(dt, J->y + e * es, acc);
      } else {
        uint64_t acc = 0;
        RW_WALK({ acc += (uint64_t)rw_loadi(dt, ep); });
        int64_t v = (int64_t)acc;
        tpux__store(dt, J->y + e * es, 1, 1, &v);
      }
    }
    for (int d = J->rank - 1; d >= 0; d--) {
      if (++q[d] < J->osz[d]) break;
      q[d] = 0;
    }
  }
}

/* Windows over the last two dims only (2-D max/avg pooling, any leading
 * dims, undilated) of an f32 value: a task per output row of a plane, the
 * window's bounds found once per row and per column instead of walking an
 * odometer per element; same visiting order and arithmetic as rw_range. */
static int rw2_fits(const rw_job *J) {
  int R = J->rank;
  if (R < 2 || J->dt != TPU_F32 || J->dl[R - 2] != 1 || J->dl[R - 1] != 1) return 0;
  for (int d = 0; d < R - 2; d++)
    if (J->w[d] != 1 || J->s[d] != 1 || J->lo[d] != 0 || J->osz[d] != J->xsz[d] ||
        (J->op == TPUIR_WINDOW_ARGMAX && J->imul[d] != 0))
      return 0;
  return J->op != TPUIR_WINDOW_ARGMAX || (J->imul[R - 1] == 1 && J->imul[R - 2] == J->xsz[R - 1]);
}

#define RW2_VISIT(...)                                  \
  for (int64_t kh = ka; kh < kb; kh++)                  \
    for (int64_t kw = la; kw < lb; kw++) {              \
      int64_t h = h0 + kh, w = w0 + kw;                 \
      double v = x[h * hs + w * ws];                    \
      __VA_ARGS__;                                      \
    }

static void rw2_rows(void *ctx, int64_t r0, int64_t r1) {
  const rw_job *J = ctx;
  const int R = J->rank;
  const int64_t H = J->xsz[R - 2], W = J->xsz[R - 1], OH = J->osz[R - 2], OW = J->osz[R - 1];
  const int64_t KH = J->w[R - 2], KW = J->w[R - 1], hs = J->xs[R - 2], ws = J->xs[R - 1];
  for (int64_t r = r0; r < r1; r++) {
    int64_t plane = r / OH, oh = r - plane * OH, off = 0;
    for (int d = R - 3; d >= 0; d--) {
      off += plane % J->xsz[d] * J->xs[d];
      plane /= J->xsz[d];
    }
    const float *x = (const float *)J->xb + off;
    int64_t h0 = oh * J->s[R - 2] - J->lo[R - 2];
    int64_t ka = h0 < 0 ? -h0 : 0, kb = H - h0 < KH ? H - h0 : KH;
    for (int64_t ow = 0, e = r * OW; ow < OW; ow++, e++) {
      int64_t w0 = ow * J->s[R - 1] - J->lo[R - 1];
      int64_t la = w0 < 0 ? -w0 : 0, lb = W - w0 < KW ? W - w0 : KW;
      if (J->op == TPUIR_WINDOW_ARGMAX) {
        double m = -INFINITY;
        int64_t mi = -1;
        RW2_VISIT({ /* (selects, not branches: random data mispredicts) */
          int64_t i = h * W + w;
          int up = (v > m) | (v != v) | (mi < 0);
          m = up ? v : m;
          mi = up ? i : mi;
        });
        ((int64_t *)J->y)[e] = mi;
      } else if (J->kind == TPUIR_RED_MAX) {
        double m = -INFINITY;
        RW2_VISIT(double t = v > m ? v : m; m = v != v ? v : t);
        ((float *)J->y)[e] = (float)m;
      } else {
        double acc = 0;
        RW2_VISIT(acc += v);
        ((float *)J->y)[e] = (float)acc;
      }
    }
  }
}

/* ---- cumulative windows (scans) ------------------------------------------ */

/* XLA's form of cumsum / cummax: along one dim d the window spans the whole
 * dim with size - 1 padding before, every other dim is untouched, so output
 * k along d reduces x[0..k]. Run as a running sum / max per line, O(n)
 * instead of O(n^2); the same accumulation order and types as rw_range
 * (doubles for floats, wrapping int64), so the same bits. d, or -1 when
 * the window is not of this form. */
static int rw_scan_dim(const rw_job *J) {
  if (J->op != TPUIR_REDUCE_WINDOW || J->nact != 1) return -1;
  int d = J->act[0];
  for (int e = 0; e < J->rank; e++)
    if (J->s[e] != 1 || J->dl[e] != 1 || J->osz[e] != J->xsz[e] ||
        (e != d && J->lo[e] != 0))
      return -1;
  return J->w[d] == J->xsz[d] && J->lo[d] == J->xsz[d] - 1 ? d : -1;
}

#define SCAN_LINES 64 /* lines scanned side by side */

typedef struct scan_job {
  const rw_job *J;
  int d;
  int64_t n, inner; /* size of d; elements after d */
} scan_job;

/* Offset (elements) in x of line l's first element: l over the dims other
 * than d, row-major. */
static int64_t scan_line_off(const scan_job *S, int64_t l) {
  const rw_job *J = S->J;
  int64_t off = 0;
  for (int e = J->rank - 1; e >= 0; e--) {
    if (e == S->d) continue;
    off += l % J->xsz[e] * J->xs[e];
    l /= J->xsz[e];
  }
  return off;
}

#define SCAN_LOOP(ACC, INIT, LOAD, STEP, STORE)                                  \
  do {                                                                           \
    ACC acc[SCAN_LINES];                                                         \
    for (int64_t q = 0; q < m; q++) acc[q] = (INIT);                             \
    for (int64_t k = 0; k < n; k++) {                                            \
      for (int64_t q = 0; q < m; q++) {                                          \
        const char *xp = xb + (xo[q] + k * xsd) * es;                            \
        char *yp = y + (k * inner + q * ys) * es;                                \
        ACC v = (LOAD);                                                          \
        STEP;                                                                    \
        STORE;                                                                   \
      }                                                                          \
    }                                                                            \
  } while (0)

/* f32 lines summed into doubles, the loop of the common cumsum(-1): 4
 * lines at a time (independent add chains: one line waits on each add's
 * latency), y's lines n apart. */
static void scan_f32_lines(const char *xb, const int64_t *xo, int64_t xs, float *y, int64_t n,
                           int64_t m) {
  int64_t q = 0;
  for (; q + 4 <= m; q += 4) {
    const float *x0 = (const float *)xb + xo[q], *x1 = (const float *)xb + xo[q + 1];
    const float *x2 = (const float *)xb + xo[q + 2], *x3 = (const float *)xb + xo[q + 3];
    float *y0 = y + q * n;
    double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    for (int64_t k = 0; k < n; k++) {
      a0 += x0[k * xs];
      a1 += x1[k * xs];
      a2 += x2[k * xs];
      a3 += x3[k * xs];
      y0[k] = (float)a0;
      y0[n + k] = (float)a1;
      y0[2 * n + k] = (float)a2;
      y0[3 * n + k] = (float)a3;
    }
  }
  for (; q < m; q++) {
    const float *x = (const float *)xb + xo[q];
    double a = 0;
    for (int64_t k = 0; k < n; k++) {
      a += x[k * xs];
      y[q * n + k] = (float)a;
    }
  }
}

static void scan_range(void *ctx, int64_t l0, int64_t l1) {
  const scan_job *S = ctx;
  const rw_job *J = S->J;
  const int dt = J->dt, isf = tpu_dtype_is_float(dt), mx = J->kind == TPUIR_RED_MAX;
  const int64_t es = (int64_t)tpu_dtype_size(dt), xsd = J->xs[S->d], n = S->n, inner = S->inner;
  const int64_t ys = inner == 1 ? n : 1; /* between lines in y: side by side unless inner is 1 */
  const char *xb = J->xb;
  int64_t xo[SCAN_LINES];
  for (int64_t l = l0; l < l1;) {
    int64_t o = l / inner, j = l - o * inner, m = inner == 1 ? SCAN_LINES : inner - j;
    if (m > SCAN_LINES) m = SCAN_LINES;
    if (m > l1 - l) m = l1 - l;
    for (int64_t q = 0; q < m; q++) xo[q] = scan_line_off(S, l + q);
    char *y = J->y + ((o * n) * inner + j) * es;
    if (dt == TPU_F32 && !mx && inner == 1)
      scan_f32_lines(xb, xo, xsd, (float *)y, n, m);
    else if (dt == TPU_F32 && !mx)
      SCAN_LOOP(double, 0, *(const float *)xp, acc[q] += v, *(float *)yp = (float)acc[q]);
    else if (isf && !mx)
      SCAN_LOOP(double, 0, rw_load(dt, xp), acc[q] += v, rw_store(dt, yp, acc[q]));
    else if (isf)
      SCAN_LOOP(double, -INFINITY, rw_load(dt, xp), if (v > acc[q] || isnan(v)) acc[q] = v,
                rw_store(dt, yp, acc[q]));
    else if (dt == TPU_I64 && !mx)
      SCAN_LOOP(uint64_t, 0, (uint64_t) * (const int64_t *)xp, acc[q] += v,
                *(int64_t *)yp = (int64_t)acc[q]);
    else if (!mx)
      SCAN_LOOP(uint64_t, 0, (uint64_t)rw_loadi(dt, xp), acc[q] += v,
                int64_t r = (int64_t)acc[q]; tpux__store(dt, yp, 1, 1, &r));
    else
      SCAN_LOOP(int64_t, INT64_MIN, rw_loadi(dt, xp), if (v > acc[q]) acc[q] = v,
                tpux__store(dt, yp, 1, 1, &acc[q]));
    l += m;
  }
}

/* Run a cumulative window along d: lines shared out to the threads. */
static void rw_scan(const rw_job *J, int d) {
  scan_job S = {J, d, J->xsz[d], 1};
  for (int e = d + 1; e < J->rank; e++) S.inner *= J->xsz[e];
  int64_t lines = 1;
  for (int e = 0; e < J->rank; e++)
    if (e != d) lines *= J->xsz[e];
  int64_t grain = XK_GRAIN / S.n + 1;
  if (lines <= grain) scan_range(&S, 0, lines);
  else tpurt_parallel_for(lines, grain, scan_range, &S);
}

static int eval_window(xctx *c, int t) {
  const tpuir_node *n = tpuir_get_node(c->g, t);
  const tpu_view *x = &c->vals[n->in[0]].v;
  int rc = tpux__alloc_value(c, t);
  if (rc) return rc;
  rw_job J;
  memset(&J, 0, sizeof J);
  J.op = n->op;
  J.kind = n->kind;
  J.dt = x->dtype;
  J.rank = n->ndim;
  J.xb = (const char *)x->base + x->offset * (int64_t)tpu_dtype_size(x->dtype);
  J.y = tpux__value_data(c, t);
  int64_t total = 1, win = 1;
  for (int d = 0; d < n->ndim; d++) {
    J.xs[d] = x->strides[d];
    J.xsz[d] = x->sizes[d];
    J.osz[d] = n->sizes[d];
    J.w[d] = n->a[d];
    J.s[d] = n->b[d];
    J.lo[d] = n->c[d];
    J.dl[d] = n->d[d];
    if (J.w[d] > 1) J.act[J.nact++] = d;
    total *= n->sizes[d];
    win *= n->a[d];
  }
  if (n->op == TPUIR_WINDOW_ARGMAX) {
    int64_t mul = 1;
    for (int d = n->ndim - 1; d >= n->ndim - n->dim; d--) {
      J.imul[d] = mul;
      mul *= x->sizes[d];
    }
  }
  if (total == 0) return TPU_OK;
  int sd = rw_scan_dim(&J);
  if (sd >= 0) {
    rw_scan(&J, sd);
    return TPU_OK;
  }
  int64_t grain = XK_GRAIN / (win > 0 ? win : 1);
  if (grain < 1) grain = 1;
  if (rw2_fits(&J)) {
    int64_t ow = n->sizes[n->ndim - 1], rows = total / ow, rgrain = grain / ow + 1;
    if (rows <= rgrain) rw2_rows(&J, 0, rows);
    else tpurt_parallel_for(rows, rgrain, rw2_rows, &J);
    return TPU_OK;
  }
  if (total <= grain) rw_range(&J, 0, total);
  else tpurt_parallel_for(total, grain, rw_range, &J);
  return TPU_OK;
}

/* Evaluate a CONVOLUTION, REDUCE_WINDOW or WINDOW_ARGMAX node (result into
 * c->vals[t], a new contiguous temporary). */
int tpux__eval_conv(xctx *c, int t) {
  const tpuir_node *n = tpuir_get_node(c->g, t);
  if (n->op == TPUIR_CONVOLUTION) return eval_convolution(c, t);
  return eval_window(c, t);
}

/* exec/vtpu/reduce.c - vTPU reductions (REDUCE, ARGREDUCE).
 *
 * REDUCE splits the operand's dims into kept and reduced sets (each
 * coalesced; reduced dims ordered by decreasing stride). Floats accumulate
 * in double (f32 MAX/MIN compare in f32: exact, and NaN wins), ints and
 * bool in int64 with wrap-around; the result is rounded once at the store.
 * Two loop shapes:
 *   inner: per output, stream the reduced elements (reduced innermost stride
 *          is the smallest) - sum over rows - in runs of at most XK_TILE
 *          along the innermost reduced dim: element j of a run goes to
 *          lane j % 32 of 32 independent accumulators (kept in registers
 *          within a run), which are combined at the end in a fixed
 *          pairwise tree;
 *   outer: per block of up to XK_TILE (fused: FUSE_OUTER_COLS)
 *          consecutive outputs along a kept innermost dim with the
 *          smaller stride, accumulate rows into a vector of accumulators
 *          - sum over columns: each column folds its rows sequentially in
 *          row order (strips of columns held in registers over a few rows
 *          at a time).
 * Work is split over outputs; when there are few outputs and a long
 * reduction, the reduction is also split into fixed-size chunks whose
 * partial results are combined in chunk order, so results never depend on
 * the number of threads.
 *
 * Fused producers (tpux__eval_region_reduce): when the operand is the value
 * of an elementwise region used by nothing else, the plan is made for the
 * operand as it would be materialised (contiguous), and each place where a
 * loop reads a run of it instead runs the region's program over that
 * window (a few outputs' rows in the inner shape, a few reduced rows of a
 * block in the outer shape) into an L1 scratch in the operand's dtype,
 * then folds the scratch with the same calls on the same runs: the results
 * are bit-identical to materialising the operand first. Plain cases
 * (empty, nothing reduced) materialise it.
 */
#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>

#include "exec/vtpu/internal.h"

#define LANES 32
#define RED_CHUNK 65536
/* Elements of one window of a fused producer (one program start each):
 * reduced rows of a block of columns in the outer shape, folded in row
 * order, or the rows of several outputs in the inner shape. One row per
 * window spent half of a bias gradient's time in window set-up and
 * accumulator traffic: (g * h).sum((0, 1)) over [8,256,2048], Fused
 * 2.0 -> 1.0-1.15 ms; with GELU backward in the region 5.5 -> 2.5-2.9. */
#define FUSE_WINDOW (8 * XK_TILE)
/* Widest block of columns of a fused outer-shape plan: whole rows of a
 * [B*T, 2048] bias gradient. Blocks of XK_TILE columns read half of each
 * row per window, and those windows ran 2x slower than streaming the
 * rows (the hardware prefetchers restart on every row): GELU backward +
 * bias gradient over [8,256,2048] in the GPT block 3.2 -> 2.75 ms. */
#define FUSE_OUTER_COLS (4 * XK_TILE)

typedef union acc_t {
  double d;
  int64_t i;
} acc_t;

struct red_fuse;

typedef struct red_plan {
  int kind, dt, cls, fl; /* fl: accumulate in double */
  const char *x;         /* operand element 0 */
  size_t es;
  /* kept dims (coalesced), operand strides */
  int nk;
  int64_t ks[TPU_MAX_DIMS], kx[TPU_MAX_DIMS];
  /* reduced dims (coalesced), operand strides */
  int nr;
  int64_t rs[TPU_MAX_DIMS], rx[TPU_MAX_DIMS];
  int64_t nout, rcount;
  int outer;            /* loop shape */
  int64_t blk, nblk;    /* outer: block length, blocks per kept row */
  int64_t ngroups, nchunks, chunk;
  acc_t *part;          /* [ngroups][nchunks][glen] */
  int64_t glen;         /* outputs per group (1 or blk) */
  struct red_fuse *F;   /* operand computed by a region, or NULL */
} red_plan;

/* A fused producer: the operand x is not in memory; its elements come from
 * a region's program, run over windows into a scratch array (the
 * program's store array `sarr`), in x's dtype, then folded exactly as the
 * plain loops fold x. Each coalesced dim of the plan is a list of
 * super-dims (kzl/rzl): runs of x's dims that every program array
 * coalesces as x does (one per coalesced dim in the usual case); windows
 * are split into boxes where an array's strides break (broadcasts,
 * transposed inputs), the folds are not. */
typedef struct red_fuse {
  xk_prog *prog;
  int sarr, narr, batch; /* batch: inner shape, several outputs per window */
  int stored; /* x is also materialised: the windows write it in place */
  xk_arr abase[XK_MAX_ARR]; /* the region's arrays at element 0 */
  int nz;                               /* super-dim pool */
  int64_t zs[TPU_MAX_DIMS];             /* sizes */
  int64_t za[TPU_MAX_DIMS][XK_MAX_ARR]; /* strides of each array */
  int64_t zero[XK_MAX_ARR];
  int kzl[TPU_MAX_DIMS][TPU_MAX_DIMS], kzn[TPU_MAX_DIMS]; /* kept dims */
  int rzl[TPU_MAX_DIMS][TPU_MAX_DIMS], rzn[TPU_MAX_DIMS]; /* reduced dims */
} red_fuse;

static acc_t identity(int kind, int dt) {
  acc_t a;
  int fl = xk_cls(dt) != XK_I64;
  switch (kind) {
  case TPUIR_RED_SUM: if (fl) a.d = 0; else a.i = 0; break;
  case TPUIR_RED_PROD: if (fl) a.d = 1; else a.i = 1; break;
  case TPUIR_RED_MAX:
    if (fl) a.d = -INFINITY;
    else a.i = dt == TPU_BOOL || dt == TPU_U8 ? 0 : dt == TPU_I8 ? INT8_MIN
             : dt == TPU_I16 ? INT16_MIN : dt == TPU_I32 ? INT32_MIN : INT64_MIN;
    break;
  case TPUIR_RED_MIN:
    if (fl) a.d = INFINITY;
    else a.i = dt == TPU_BOOL ? 1 : dt == TPU_U8 ? UINT8_MAX : dt == TPU_I8 ? INT8_MAX
             : dt == TPU_I16 ? INT16_MAX : dt == TPU_I32 ? INT32_MAX : INT64_MAX;
    break;
  case TPUIR_RED_AND: a.i = 1; break;
  default: a.i = 0; break;
  }
  return a;
}

/* Combines of an accumulator a with a value v (converted to a's type).
 * MAX/MIN: a NaN value wins and then stays (v > NaN is false); written
 * with | so that the compiler makes them branch-free vector selects. */
#define SUMD(a, v) ((a) + (double)(v))
#define PRODD(a, v) ((a) * (double)(v))
#define MAXD(a, v) ((((double)(v) > (a)) | ((v) != (v))) ? (double)(v) : (a))
#define MIND(a, v) ((((double)(v) < (a)) | ((v) != (v))) ? (double)(v) : (a))
#define MAXF(a, v) ((((v) > (a)) | ((v) != (v))) ? (v) : (a))
#define MINF(a, v) ((((v) < (a)) | ((v) != (v))) ? (v) : (a))
#define SUMI(a, v) ((int64_t)((uint64_t)(a) + (uint64_t)(v)))
#define PRODI(a, v) ((int64_t)((uint64_t)(a) * (uint64_t)(v)))
#define MAXI(a, v) ((v) > (a) ? (v) : (a))
#define MINI(a, v) ((v) < (a) ? (v) : (a))
#define ANDI(a, v) ((a) & (v))
#define ORI(a, v) ((a) | (v))

/* FOLD(T, A, ACC, COMB) for the operand class cls and reduction kind:
 * element type T, accumulator type A (f32 sums in double, f32 max/min in
 * float), the acc_t member ACC and the combine COMB. */
#define FOLD_DISPATCH(FOLD)                                                  \
  do {                                                                       \
    if (cls == XK_F32) {                                                     \
      switch (kind) {                                                        \
      case TPUIR_RED_SUM: FOLD(float, double, d, SUMD); break;               \
      case TPUIR_RED_PROD: FOLD(float, double, d, PRODD); break;             \
      case TPUIR_RED_MAX: FOLD(float, float, d, MAXF); break;                \
      default: FOLD(float, float, d, MINF); break;                           \
      }                                                                      \
    } else if (cls == XK_F64) {                                              \
      switch (kind) {                                                        \
      case TPUIR_RED_SUM: FOLD(double, double, d, SUMD); break;              \
      case TPUIR_RED_PROD: FOLD(double, double, d, PRODD); break;            \
      case TPUIR_RED_MAX: FOLD(double, double, d, MAXD); break;              \
      default: FOLD(double, double, d, MIND); break;                         \
      }                                                                      \
    } else {                                                                 \
      switch (kind) {                                                        \
      case TPUIR_RED_SUM: FOLD(int64_t, int64_t, i, SUMI); break;            \
      case TPUIR_RED_PROD: FOLD(int64_t, int64_t, i, PRODI); break;          \
      case TPUIR_RED_MAX: FOLD(int64_t, int64_t, i, MAXI); break;            \
      case TPUIR_RED_MIN: FOLD(int64_t, int64_t, i, MINI); break;            \
      case TPUIR_RED_AND: FOLD(int64_t, int64_t, i, ANDI); break;            \
      default: FOLD(int64_t, int64_t, i, ORI); break;                        \
      }                                                                      \
    }                                                                        \
  } while (0)

/* Fold a class buffer (elements of type T) into LANES accumulators of type
 * A: element i goes to lane i % LANES. The lanes live in registers; they
 * start from `lanes` (or, fresh, from the identity id) and go back there,
 * or, fin, are combined pairwise in a fixed tree (lane l with lane l + w,
 * w = LANES/2, ..., 1) into r. Every operation is the same whichever the
 * flags (f32 MAX/MIN lanes are exact in f32 or double), so a run gives the
 * same result folded in one call or several. */
#define TREE_STEP(COMB, W)                                                   \
  for (int k_ = 0; k_ < (W); k_++) l_[k_] = COMB(l_[k_], l_[k_ + (W)])
#define FOLD_LANES(T, A, ACC, COMB)                                          \
  do {                                                                       \
    const T *b_ = (const T *)buf;                                            \
    A l_[LANES];                                                             \
    int64_t i_ = 0;                                                          \
    for (int k_ = 0; k_ < LANES; k_++)                                       \
      l_[k_] = fresh ? (A)id.ACC : (A)lanes[k_].ACC;                         \
    for (; i_ + LANES <= n; i_ += LANES)                                     \
      for (int k_ = 0; k_ < LANES; k_++)                                     \
        l_[k_] = COMB(l_[k_], b_[i_ + k_]);                                  \
    for (int k_ = 0; i_ + k_ < n; k_++)                                      \
      l_[k_] = COMB(l_[k_], b_[i_ + k_]);                                    \
    if (!fin) {                                                              \
      for (int k_ = 0; k_ < LANES; k_++) lanes[k_].ACC = l_[k_];             \
      break;                                                                 \
    }                                                                        \
    TREE_STEP(COMB, 16);                                                     \
    TREE_STEP(COMB, 8);                                                      \
    TREE_STEP(COMB, 4);                                                      \
    TREE_STEP(COMB, 2);                                                      \
    TREE_STEP(COMB, 1);                                                      \
    r.ACC = l_[0];                                                           \
  } while (0)
_Static_assert(LANES == 32, "FOLD_LANES' tree combines 32 lanes");

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
static acc_t fold_lanes(int kind, int cls, int64_t n, const void *restrict buf,
                        acc_t *restrict lanes, acc_t id, int fresh, int fin) {
  acc_t r = id;
  FOLD_DISPATCH(FOLD_LANES);
  return r;
}

/* acc[i] op= row r's element i for rows r = 0 .. nrows - 1 in order (row r
 * at buf + r * rst elements): each accumulator folds its column in row
 * order, whatever the blocking. Strips of STRIP columns are kept in
 * registers over batches of up to ROWB rows: ROWB sequential streams at a
 * time, which the prefetchers follow (8 measured best on [2048, 2048]
 * f32 column sums; 64 was 2.5x slower). */
#define STRIP 32
#define ROWB 8
#define FOLD_ROWS(T, A, ACC, COMB)                                           \
  do {                                                                       \
    const T *b_ = (const T *)buf;                                            \
    for (int64_t r0_ = 0; r0_ < nrows; r0_ += ROWB) {                        \
      int64_t r1_ = r0_ + ROWB < nrows ? r0_ + ROWB : nrows, c_ = 0;         \
      for (; c_ + STRIP <= n; c_ += STRIP) {                                 \
        A s_[STRIP];                                                         \
        for (int k_ = 0; k_ < STRIP; k_++) s_[k_] = (A)acc[c_ + k_].ACC;     \
        for (int64_t r_ = r0_; r_ < r1_; r_++) {                             \
          const T *row_ = b_ + r_ * rst + c_;                                \
          for (int k_ = 0; k_ < STRIP; k_++) s_[k_] = COMB(s_[k_], row_[k_]); \
        }                                                                    \
        for (int k_ = 0; k_ < STRIP; k_++) acc[c_ + k_].ACC = s_[k_];        \
      }                                                                      \
      for (int64_t r_ = r0_; r_ < r1_ && c_ < n; r_++) {                     \
        const T *row_ = b_ + r_ * rst;                                       \
        for (int64_t k_ = c_; k_ < n; k_++)                                  \
          acc[k_].ACC = COMB(acc[k_].ACC, (A)row_[k_]);                      \
      }                                                                      \
    }                                                                        \
  } while (0)

/* FOLD_ROWS' float sums (f32 or f64 elements into double) at AVX2 width
 * with a strip's 32 accumulators in registers: GCC kept FOLD_ROWS' array
 * on the stack (a load and a store per row and strip, each row's adds
 * waiting on store forwarding), and its __builtin_convertvector of 4 floats
 * to 4 doubles is two halves and an insert. The same adds in the same
 * order: the same bits. */
#define SUM_ROWS_AVX2(T, LOAD)                                               \
  do {                                                                       \
    for (int64_t r0 = 0; r0 < nrows; r0 += ROWB) {                           \
      int64_t r1 = r0 + ROWB < nrows ? r0 + ROWB : nrows, c = 0;             \
      for (; c + 32 <= n; c += 32) {                                         \
        __m256d s[8];                                                        \
        for (int k = 0; k < 8; k++) s[k] = _mm256_loadu_pd(acc + c + 4 * k); \
        for (int64_t r = r0; r < r1; r++) {                                  \
          const T *w = (const T *)buf + r * rst + c;                         \
          for (int k = 0; k < 8; k++) s[k] = _mm256_add_pd(s[k], LOAD(w + 4 * k)); \
        }                                                                    \
        for (int k = 0; k < 8; k++) _mm256_storeu_pd(acc + c + 4 * k, s[k]); \
      }                                                                      \
      for (int64_t r = r0; r < r1 && c < n; r++) {                           \
        const T *w = (const T *)buf + r * rst;                               \
        for (int64_t k = c; k < n; k++) acc[k] += (double)w[k];              \
      }                                                                      \
    }                                                                        \
  } while (0)
#define LOAD_F32_PD(p) _mm256_cvtps_pd(_mm_loadu_ps(p))

__attribute__((target("avx2"))) static void sum_rows_f32_avx2(int64_t nrows, int64_t n,
                                                              int64_t rst, const void *buf,
                                                              double *acc) {
  SUM_ROWS_AVX2(float, LOAD_F32_PD);
}

__attribute__((target("avx2"))) static void sum_rows_f64_avx2(int64_t nrows, int64_t n,
                                                              int64_t rst, const void *buf,
                                                              double *acc) {
  SUM_ROWS_AVX2(double, _mm256_loadu_pd);
}

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
static void fold_rows_generic(int kind, int cls, int64_t nrows, int64_t n, int64_t rst,
                              const void *restrict buf, acc_t *restrict acc) {
  FOLD_DISPATCH(FOLD_ROWS);
}

static void fold_rows(int kind, int cls, int64_t nrows, int64_t n, int64_t rst,
                      const void *buf, acc_t *acc) {
  if (kind == TPUIR_RED_SUM && cls != XK_I64 && tpux__vmath_width() >= 8) {
    if (cls == XK_F32) sum_rows_f32_avx2(nrows, n, rst, buf, &acc->d);
    else sum_rows_f64_avx2(nrows, n, rst, buf, &acc->d);
    return;
  }
  fold_rows_generic(kind, cls, nrows, n, rst, buf, acc);
}

/* operand offset of kept linear index o (first `nk` kept dims) */
static int64_t kept_offset(const red_plan *p, int nk, int64_t o) {
  int64_t off = 0;
  for (int d = nk - 1; d >= 0; d--) {
    int64_t q = o / p->ks[d];
    off += (o - q * p->ks[d]) * p->kx[d];
    o = q;
  }
  return off;
}

/* Multi-index idx of linear position L of the reduced space; returns the
 * operand's element offset of it. */
static int64_t red_unravel(const red_plan *p, int64_t L, int64_t *idx) {
  int64_t off = 0;
  for (int d = p->nr - 1; d >= 0; d--) {
    int64_t q = L / p->rs[d];
    idx[d] = L - q * p->rs[d];
    off += idx[d] * p->rx[d];
    L = q;
  }
  return off;
}

/* AND (all) or OR (any) of n bools (bytes 0/1), as 0/1. */
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
static int64_t fold_bool(int kind, int64_t n, const uint8_t *restrict b) {
  uint8_t a = kind == TPUIR_RED_AND;
  if (kind == TPUIR_RED_AND)
    for (int64_t i = 0; i < n; i++) a &= b[i];
  else
    for (int64_t i = 0; i < n; i++) a |= b[i];
  return a;
}

/* Fold m elements at src (stride st, x's dtype) into the lanes (fresh:
 * from the identity; fin: return their combination), straight from
 * memory when they are contiguous class elements. Contiguous bools under
 * AND/OR (all, any: exact in any order) fold as bytes, into lane 0. */
static acc_t fold_run(const red_plan *p, const char *src, int64_t st,
                      int64_t m, void *buf, acc_t *lanes, acc_t id, int fresh,
                      int fin) {
  if (st == 1 && p->dt == TPU_BOOL && (p->kind == TPUIR_RED_AND || p->kind == TPUIR_RED_OR)) {
    int64_t v = fold_bool(p->kind, m, (const uint8_t *)src);
    return fold_lanes(p->kind, p->cls, m > 0, &v, lanes, id, fresh, fin);
  }
  if (st == 1 && p->dt == xk_native(p->cls))
    return fold_lanes(p->kind, p->cls, m, src, lanes, id, fresh, fin);
  tpux__load(p->dt, src, st, m, buf);
  return fold_lanes(p->kind, p->cls, m, buf, lanes, id, fresh, fin);
}

/* Reduce elements [lo, hi) of the reduced space at operand offset base into
 * a single accumulator (inner shape): runs of at most XK_TILE along the
 * innermost reduced dim, folded in order into one set of lanes. */
static acc_t reduce_inner(const red_plan *p, int64_t base, int64_t lo,
                          int64_t hi, void *buf) {
  acc_t lanes[LANES], r = identity(p->kind, p->dt), id = r;
  int nr = p->nr, fresh = 1;
  int64_t idx[TPU_MAX_DIMS];
  int64_t off = red_unravel(p, lo, idx);
  int64_t left = hi - lo, inner = p->rs[nr - 1], ist = p->rx[nr - 1];
  while (left > 0) {
    int64_t seg = inner - idx[nr - 1];
    if (seg > left) seg = left;
    for (int64_t done = 0; done < seg; fresh = 0) {
      int64_t m = seg - done > XK_TILE ? XK_TILE : seg - done;
      const char *src = p->x + (base + off + done * ist) * (int64_t)p->es;
      done += m;
      r = fold_run(p, src, ist, m, buf, lanes, id, fresh, done == left);
    }
    left -= seg;
    if (left == 0) break;
    off -= idx[nr - 1] * ist;
    idx[nr - 1] = 0;
    for (int d = nr - 2; d >= 0; d--) {
      idx[d]++;
      off += p->rx[d];
      if (idx[d] < p->rs[d]) break;
      off -= p->rs[d] * p->rx[d];
      idx[d] = 0;
    }
  }
  return r;
}

/* Fold R rows of len elements (row i at src + i * rst elements, elements
 * st apart, x's dtype) into acc[0..len), in row order. */
static void fold_block(const red_plan *p, const char *src, int64_t rst,
                       int64_t st, int64_t R, int64_t len, void *buf,
                       acc_t *acc) {
  int64_t es = (int64_t)p->es;
  if (st == 1 && p->dt == xk_native(p->cls)) {
    fold_rows(p->kind, p->cls, R, len, rst, src, acc); /* straight from memory */
    return;
  }
  if (len > XK_TILE) { /* (a fused plan's wide block) column pieces of a tile */
    for (int64_t c = 0; c < len; c += XK_TILE) {
      int64_t w = len - c < XK_TILE ? len - c : XK_TILE;
      fold_block(p, src + c * st * es, rst, st, R, w, buf, acc + c);
    }
    return;
  }
  int64_t per = XK_TILE / len; /* rows per load (len <= XK_TILE) */
  int64_t ces = p->cls == XK_F32 ? 4 : 8; /* class element size */
  for (int64_t i = 0; i < R; i += per) {
    int64_t q = R - i < per ? R - i : per;
    for (int64_t j = 0; j < q; j++)
      tpux__load(p->dt, src + (i + j) * rst * es, st, len, (char *)buf + j * len * ces);
    fold_rows(p->kind, p->cls, q, len, len, buf, acc);
  }
}

/* Outer shape: acc[0..len) op= rows of the reduced range [lo, hi). */
static void reduce_outer(const red_plan *p, int64_t base, int64_t len,
                         int64_t lo, int64_t hi, void *buf, acc_t *acc) {
  acc_t id = identity(p->kind, p->dt);
  for (int64_t i = 0; i < len; i++) acc[i] = id;
  int nr = p->nr;
  int64_t idx[TPU_MAX_DIMS];
  int64_t off = red_unravel(p, lo, idx);
  int64_t kst = p->kx[p->nk - 1], in = p->rs[nr - 1], ist = p->rx[nr - 1];
  for (int64_t r = lo; r < hi;) { /* runs along the innermost reduced dim */
    int64_t R = in - idx[nr - 1];
    if (R > hi - r) R = hi - r;
    fold_block(p, p->x + (base + off) * (int64_t)p->es, ist, kst, R, len, buf, acc);
    r += R;
    if (r == hi) break;
    off -= idx[nr - 1] * ist;
    idx[nr - 1] = 0;
    for (int d = nr - 2; d >= 0; d--) {
      idx[d]++;
      off += p->rx[d];
      if (idx[d] < p->rs[d]) break;
      off -= p->rs[d] * p->rx[d];
      idx[d] = 0;
    }
  }
}

/* ---- fused producers ----------------------------------------------------- */

/* Add to off[] the per-array offsets of index i along a coalesced dim
 * (super-dims zl[0..nz)). Returns the number of elements from i on along
 * which every array has one stride (*st: those strides), at most m. */
static int64_t fuse_piece(const red_fuse *F, const int *zl, int nz, int64_t i,
                          int64_t m, int64_t *off, const int64_t **st) {
  if (nz == 0) { /* a size-1 dim */
    *st = F->zero;
    return m;
  }
  int64_t run = m;
  for (int k = nz - 1; k >= 0; k--) {
    int64_t Z = F->zs[zl[k]], q = i / Z, r = i - q * Z;
    if (k == nz - 1 && Z - r < run) run = Z - r;
    if (r)
      for (int a = 0; a < F->narr; a++) off[a] += r * F->za[zl[k]][a];
    i = q;
  }
  *st = F->za[zl[nz - 1]];
  return run;
}

/* Per-array offsets of kept linear index o over the first nk kept dims. */
static void fuse_kept_offsets(const red_plan *p, int nk, int64_t o, int64_t *aoff) {
  const red_fuse *F = p->F;
  const int64_t *st;
  for (int a = 0; a < F->narr; a++) aoff[a] = 0;
  for (int d = nk - 1; d >= 0; d--) {
    int64_t q = o / p->ks[d], i = o - q * p->ks[d];
    if (i) fuse_piece(F, F->kzl[d], F->kzn[d], i, 1, aoff, &st);
    o = q;
  }
}

/* out = aoff + offsets of the reduced multi-index idx over dims < nr1. */
static void fuse_red_offsets(const red_plan *p, const int64_t *aoff,
                             const int64_t *idx, int nr1, int64_t *out) {
  const red_fuse *F = p->F;
  const int64_t *st;
  for (int a = 0; a < F->narr; a++) out[a] = aoff[a];
  for (int d = 0; d < nr1; d++)
    if (idx[d]) fuse_piece(F, F->rzl[d], F->rzn[d], idx[d], 1, out, &st);
}

/* One window of uniform strides: nd dims of sizes sz, array a at element
 * offset off[a] with strides ast[j][a]; x's elements go to sbuf with
 * strides sst. */
static void fuse_box(const red_plan *p, const int64_t *off, int nd,
                     const int64_t *sz, const int64_t *const *ast,
                     const int64_t *sst, char *scr, char *sbuf) {
  const red_fuse *F = p->F;
  xk_space s;
  s.nd = nd;
  s.narr = F->narr;
  for (int j = 0; j < nd; j++) s.sz[j] = sz[j];
  for (int a = 0; a < F->narr; a++) {
    xk_arr *x = &s.arr[a];
    if (a == F->sarr) {
      x->dt = F->prog->sp.arr[a].dt;
      x->iota = 0;
      x->p = sbuf;
      for (int j = 0; j < nd; j++) x->st[j] = sst[j];
    } else {
      tpux__arr_at(x, &F->abase[a], off[a]);
      for (int j = 0; j < nd; j++) x->st[j] = ast[j][a];
    }
  }
  tpux__prog_run_window(F->prog, &s, scr);
}

/* A window of x into sbuf: dim j (nd = 1 or 2) runs along the coalesced
 * dim with super-dims (zl[j], zn[j]) from index i0[j] for m[j] elements,
 * stored with sbuf strides sst[j]; aoff: per-array offsets of the rest.
 * Split into boxes where an array's strides break. */
static void fuse_window(const red_plan *p, const int64_t *aoff, int nd,
                        const int *const *zl, const int *zn, const int64_t *i0,
                        const int64_t *m, const int64_t *sst, char *scr,
                        char *sbuf) {
  const red_fuse *F = p->F;
  int64_t o0[XK_MAX_ARR], o1[XK_MAX_ARR], off[XK_MAX_ARR];
  const int64_t *st[2];
  int64_t es = (int64_t)p->es;
  if (nd == 1) {
    for (int64_t pos = 0; pos < m[0];) {
      for (int a = 0; a < F->narr; a++) o0[a] = aoff[a];
      int64_t len = fuse_piece(F, zl[0], zn[0], i0[0] + pos, m[0] - pos, o0, &st[0]);
      fuse_box(p, o0, 1, &len, st, sst, scr, sbuf + pos * sst[0] * es);
      pos += len;
    }
    return;
  }
  for (int64_t p0 = 0; p0 < m[0];) {
    for (int a = 0; a < F->narr; a++) o0[a] = aoff[a];
    int64_t l0 = fuse_piece(F, zl[0], zn[0], i0[0] + p0, m[0] - p0, o0, &st[0]);
    for (int64_t p1 = 0; p1 < m[1];) {
      for (int a = 0; a < F->narr; a++) o1[a] = 0;
      int64_t l1 = fuse_piece(F, zl[1], zn[1], i0[1] + p1, m[1] - p1, o1, &st[1]);
      for (int a = 0; a < F->narr; a++) off[a] = o0[a] + o1[a];
      int64_t sz[2] = {l0, l1};
      fuse_box(p, off, 2, sz, st, sst, scr,
               sbuf + (p0 * sst[0] + p1 * sst[1]) * es);
      p1 += l1;
    }
    p0 += l0;
  }
}

/* x's element offset of the reduced multi-index idx. */
static int64_t red_offset(const red_plan *p, const int64_t *idx) {
  int64_t off = 0;
  for (int d = 0; d < p->nr; d++) off += idx[d] * p->rx[d];
  return off;
}

/* reduce_inner with the operand from the region (same segments, same
 * folds). aoff: per-array offsets of the output's kept index, xk: x's
 * offset of it (stored operand). */
static acc_t fuse_inner(const red_plan *p, const int64_t *aoff, int64_t xk,
                        int64_t lo, int64_t hi, void *buf, char *scr,
                        char *sbuf) {
  const red_fuse *F = p->F;
  acc_t lanes[LANES], r = identity(p->kind, p->dt), id = r;
  int nr = p->nr, fresh = 1;
  int64_t idx[TPU_MAX_DIMS], off[XK_MAX_ARR];
  red_unravel(p, lo, idx);
  const int *zl[1] = {F->rzl[nr - 1]};
  int zn[1] = {F->rzn[nr - 1]};
  int64_t sst[1] = {F->stored ? p->rx[nr - 1] : 1};
  int64_t left = hi - lo, inner = p->rs[nr - 1];
  while (left > 0) {
    int64_t seg = inner - idx[nr - 1];
    if (seg > left) seg = left;
    fuse_red_offsets(p, aoff, idx, nr - 1, off);
    for (int64_t done = 0; done < seg; fresh = 0) {
      int64_t m = seg - done > XK_TILE ? XK_TILE : seg - done;
      int64_t i0 = idx[nr - 1] + done;
      char *tg = sbuf;
      if (F->stored) {
        idx[nr - 1] = i0;
        tg = (char *)p->x + (xk + red_offset(p, idx)) * (int64_t)p->es;
        idx[nr - 1] -= done;
      }
      fuse_window(p, off, 1, zl, zn, &i0, &m, sst, scr, tg);
      done += m;
      r = fold_run(p, tg, sst[0], m, buf, lanes, id, fresh, done == left);
    }
    left -= seg;
    if (left == 0) break;
    idx[nr - 1] = 0;
    for (int d = nr - 2; d >= 0; d--) {
      if (++idx[d] < p->rs[d]) break;
      idx[d] = 0;
    }
  }
  return r;
}

/* Inner shape, one reduced dim of at most XK_TILE / 2 elements and no
 * chunks: outputs [o, o + cnt) (within one innermost kept row) from one
 * window; each output folds its row exactly as reduce_inner does. */
static void fuse_inner_batch(const red_plan *p, int64_t o, int64_t cnt,
                             void *buf, char *scr, char *sbuf) {
  const red_fuse *F = p->F;
  int64_t aoff[XK_MAX_ARR], rc = p->rcount, kin = p->ks[p->nk - 1];
  fuse_kept_offsets(p, p->nk - 1, o / kin, aoff);
  const int *zl[2] = {F->kzl[p->nk - 1], F->rzl[0]};
  int zn[2] = {F->kzn[p->nk - 1], F->rzn[0]};
  int64_t i0[2] = {o % kin, 0}, m[2] = {cnt, rc}, sst[2] = {rc, 1};
  char *tg = sbuf;
  if (F->stored) {
    sst[0] = p->kx[p->nk - 1];
    sst[1] = p->rx[0];
    tg = (char *)p->x + kept_offset(p, p->nk, o) * (int64_t)p->es;
  }
  fuse_window(p, aoff, 2, zl, zn, i0, m, sst, scr, tg);
  acc_t id = identity(p->kind, p->dt);
  for (int64_t j = 0; j < cnt; j++)
    p->part[o + j] = fold_run(p, tg + j * sst[0] * (int64_t)p->es, sst[1], rc,
                              buf, NULL, id, 1, 1);
}

/* reduce_outer with the operand from the region: windows of several
 * reduced rows (along the innermost reduced dim) by len kept elements
 * from kept column `start`, folded row by row in order. aoff: per-array
 * offsets of the kept row; xb: x's offset of the block (stored operand). */
static void fuse_outer(const red_plan *p, const int64_t *aoff, int64_t xb,
                       int64_t start, int64_t len, int64_t lo, int64_t hi,
                       void *buf, char *scr, char *sbuf, acc_t *acc) {
  const red_fuse *F = p->F;
  acc_t id = identity(p->kind, p->dt);
  for (int64_t i = 0; i < len; i++) acc[i] = id;
  int nr = p->nr;
  int64_t idx[TPU_MAX_DIMS], off[XK_MAX_ARR];
  red_unravel(p, lo, idx);
  const int *zl[2] = {F->rzl[nr - 1], F->kzl[p->nk - 1]};
  int zn[2] = {F->rzn[nr - 1], F->kzn[p->nk - 1]};
  int64_t sst[2] = {len, 1};
  if (F->stored) {
    sst[0] = p->rx[nr - 1];
    sst[1] = p->kx[p->nk - 1];
  }
  for (int64_t r = lo; r < hi;) {
    int64_t R = FUSE_WINDOW / len, rl = p->rs[nr - 1] - idx[nr - 1];
    if (R > rl) R = rl;
    if (R > hi - r) R = hi - r;
    fuse_red_offsets(p, aoff, idx, nr - 1, off);
    int64_t i0[2] = {idx[nr - 1], start}, m[2] = {R, len};
    char *tg = sbuf;
    if (F->stored) tg = (char *)p->x + (xb + red_offset(p, idx)) * (int64_t)p->es;
    fuse_window(p, off, 2, zl, zn, i0, m, sst, scr, tg);
    fold_block(p, tg, sst[0], sst[1], R, len, buf, acc);
    r += R;
    idx[nr - 1] += R;
    if (idx[nr - 1] < p->rs[nr - 1]) continue;
    idx[nr - 1] = 0;
    for (int d = nr - 2; d >= 0; d--) {
      if (++idx[d] < p->rs[d]) break;
      idx[d] = 0;
    }
  }
}

static void fuse_range(red_plan *p, int64_t b, int64_t e, void *buf) {
  red_fuse *F = p->F;
  xk_prog *prog = F->prog;
  char *scr = tpux__alloc((size_t)prog->scratch_bytes);
  if (!scr) {
    int z = TPU_OK;
    atomic_compare_exchange_strong(&prog->err, &z, TPU_E_OOM);
    return;
  }
  _Alignas(64) char sbuf[FUSE_WINDOW * 8];
  tpux__prog_fill_consts(prog, &prog->sp, scr);
  int64_t aoff[XK_MAX_ARR];
  for (int64_t task = b; task < e;) {
    if (atomic_load_explicit(&prog->err, memory_order_relaxed)) break;
    if (F->batch) {
      int64_t kin = p->ks[p->nk - 1], col = task % kin;
      int64_t cnt = FUSE_WINDOW / p->rcount;
      if (cnt > e - task) cnt = e - task;
      if (cnt > kin - col) cnt = kin - col;
      fuse_inner_batch(p, task, cnt, buf, scr, sbuf);
      task += cnt;
      continue;
    }
    int64_t g = task / p->nchunks, ch = task - g * p->nchunks;
    int64_t lo = ch * p->chunk, hi = lo + p->chunk;
    if (hi > p->rcount) hi = p->rcount;
    acc_t *dst = p->part + (g * p->nchunks + ch) * p->glen;
    if (!p->outer) {
      fuse_kept_offsets(p, p->nk, g, aoff);
      dst[0] = fuse_inner(p, aoff, kept_offset(p, p->nk, g), lo, hi, buf, scr, sbuf);
    } else {
      int64_t row = g / p->nblk, bi = g - row * p->nblk;
      int64_t start = bi * p->blk, len = p->ks[p->nk - 1] - start;
      if (len > p->blk) len = p->blk;
      fuse_kept_offsets(p, p->nk - 1, row, aoff);
      int64_t xb = kept_offset(p, p->nk - 1, row) + start * p->kx[p->nk - 1];
      fuse_outer(p, aoff, xb, start, len, lo, hi, buf, scr, sbuf, dst);
    }
    task++;
  }
  tpux__free(scr);
}

static void red_range(void *ctx, int64_t b, int64_t e) {
  red_plan *p = ctx;
  union { float f[XK_TILE]; double d[XK_TILE]; int64_t i[XK_TILE]; } ubuf;
  void *buf = &ubuf;
  if (p->F) {
    fuse_range(p, b, e, buf);
    return;
  }
  for (int64_t task = b; task < e; task++) {
    int64_t g = task / p->nchunks, ch = task - g * p->nchunks;
    int64_t lo = ch * p->chunk, hi = lo + p->chunk;
    if (hi > p->rcount) hi = p->rcount;
    acc_t *dst = p->part + (g * p->nchunks + ch) * p->glen;
    if (!p->outer) {
      dst[0] = reduce_inner(p, kept_offset(p, p->nk, g), lo, hi, buf);
    } else {
      int64_t row = g / p->nblk, bi = g - row * p->nblk;
      int64_t start = bi * p->blk, len = p->ks[p->nk - 1] - start;
      if (len > p->blk) len = p->blk;
      int64_t base = kept_offset(p, p->nk - 1, row) + start * p->kx[p->nk - 1];
      reduce_outer(p, base, len, lo, hi, buf, dst);
    }
  }
}

/* Coalesce dims (sizes s, strides st, optional second strides st2 that
 * must merge too). With F, each dim carries its super-dim list (zl, zn:
 * one super-dim per input dim); a merged dim's lists join, and its
 * super-dims merge where every program array allows it. */
static void coalesce_dims(int *n, int64_t *s, int64_t *st, int64_t *st2,
                          red_fuse *F, int (*zl)[TPU_MAX_DIMS], int *zn) {
  int k = 0;
  for (int i = 0; i < *n; i++) {
    if (s[i] == 1) continue;
    if (k > 0 && st[k - 1] == st[i] * s[i] &&
        (!st2 || st2[k - 1] == st2[i] * s[i])) {
      if (F) {
        int last = zl[k - 1][zn[k - 1] - 1], z = zl[i][0], ok = 1;
        for (int a = 0; a < F->narr && ok; a++)
          ok = F->za[last][a] == F->za[z][a] * F->zs[z];
        if (ok) {
          F->zs[last] *= F->zs[z];
          memcpy(F->za[last], F->za[z], (size_t)F->narr * sizeof(int64_t));
        } else {
          zl[k - 1][zn[k - 1]++] = z;
        }
      }
      s[k - 1] *= s[i];
      st[k - 1] = st[i];
      if (st2) st2[k - 1] = st2[i];
      continue;
    }
    s[k] = s[i];
    st[k] = st[i];
    if (st2) st2[k] = st2[i];
    if (F) {
      zn[k] = zn[i];
      memcpy(zl[k], zl[i], sizeof zl[k]);
    }
    k++;
  }
  *n = k;
}

/* Plan a reduction of x by node n (F: a fused producer, whose program
 * arrays' strides over x's dims are taken from F->prog->sp). Returns 1 for
 * the plain cases (nothing to reduce over, empty output or reduction),
 * which the caller handles, else 0 with the loop shape planned. */
static int red_prepare(red_plan *p, const tpuir_node *n, const tpu_view *x,
                       red_fuse *F, uint32_t *redp) {
  memset(p, 0, offsetof(red_plan, F));
  p->F = F;
  p->kind = n->kind;
  p->dt = x->dtype;
  p->cls = xk_cls(p->dt);
  p->fl = p->cls != XK_I64;
  p->es = tpu_dtype_size(p->dt);
  p->x = (const char *)x->base + x->offset * (int64_t)p->es;
  uint32_t red = 0;
  for (int i = 0; i < n->na; i++) red |= 1u << n->a[i];
  *redp = red;
  int64_t ko[TPU_MAX_DIMS]; /* output strides (contiguous) to keep order */
  for (int i = 0; i < x->ndim; i++) {
    if (F) { /* dim i: one super-dim of its own */
      int z = F->nz++;
      F->zs[z] = x->sizes[i];
      for (int a = 0; a < F->narr; a++)
        F->za[z][a] = a == F->sarr ? 0 : F->prog->sp.arr[a].st[i];
      if (red & (1u << i)) {
        F->rzl[p->nr][0] = z;
        F->rzn[p->nr] = 1;
      } else {
        F->kzl[p->nk][0] = z;
        F->kzn[p->nk] = 1;
      }
    }
    if (red & (1u << i)) {
      p->rs[p->nr] = x->sizes[i];
      p->rx[p->nr++] = x->strides[i];
    } else {
      p->ks[p->nk] = x->sizes[i];
      p->kx[p->nk++] = x->strides[i];
    }
  }
  p->nout = 1;
  for (int i = 0; i < p->nk; i++) p->nout *= p->ks[i];
  p->rcount = 1;
  for (int i = 0; i < p->nr; i++) p->rcount *= p->rs[i];
  if (p->nout == 0) return 1;
  {
    int64_t s = 1;
    for (int i = p->nk - 1; i >= 0; i--) {
      ko[i] = s;
      s *= p->ks[i];
    }
  }
  coalesce_dims(&p->nk, p->ks, p->kx, ko, F, F ? F->kzl : NULL, F ? F->kzn : NULL);
  /* reduced dims: decreasing |stride| (stable), then coalesce */
  for (int i = 1; i < p->nr; i++)
    for (int j = i; j > 0 && llabs(p->rx[j - 1]) < llabs(p->rx[j]); j--) {
      int64_t ts = p->rs[j], tx = p->rx[j];
      p->rs[j] = p->rs[j - 1];
      p->rx[j] = p->rx[j - 1];
      p->rs[j - 1] = ts;
      p->rx[j - 1] = tx;
      if (F) {
        int tz = F->rzl[j][0];
        F->rzl[j][0] = F->rzl[j - 1][0];
        F->rzl[j - 1][0] = tz;
      }
    }
  coalesce_dims(&p->nr, p->rs, p->rx, NULL, F, F ? F->rzl : NULL, F ? F->rzn : NULL);
  if (p->nr == 0 || p->rcount == 0) return 1;
  if (p->nk == 0) { /* full reduction */
    p->nk = 1;
    p->ks[0] = 1;
    p->kx[0] = 0;
    if (F) F->kzn[0] = 0;
  }
  p->outer = p->ks[p->nk - 1] > 1 &&
             llabs(p->kx[p->nk - 1]) < llabs(p->rx[p->nr - 1]);
  /* groups of outputs: blocks of at most XK_TILE columns in the outer
   * shape (a fused plan's blocks are whole rows of up to FUSE_OUTER_COLS
   * where the kept dim is one run of every array of the region, so that a
   * window's rows are one run, not a piece of each row; its sums are the
   * same) */
  int64_t kin = p->ks[p->nk - 1], tile_cols = kin < XK_TILE ? kin : XK_TILE;
  int64_t groups = p->nout;
  if (p->outer) {
    int kz = F ? F->kzn[p->nk - 1] : 0;
    int64_t wb = kz && F->zs[F->kzl[p->nk - 1][kz - 1]] == kin ? FUSE_OUTER_COLS : XK_TILE;
    p->blk = kin < wb ? kin : wb;
    p->nblk = (kin + p->blk - 1) / p->blk;
    p->ngroups = (p->nout / kin) * p->nblk;
    p->glen = p->blk;
    groups = (p->nout / kin) * ((kin + XK_TILE - 1) / XK_TILE);
  } else {
    p->ngroups = p->nout;
    p->glen = 1;
  }
  /* few groups (counted in tile blocks whatever the plan's blocks, so that
   * fused and plain plans add in the same order): the reduction also
   * splits into chunks of RED_CHUNK elements (rows of a tile block in the
   * outer shape: a [2048, 512] bias gradient runs in 16 chunks, not on one
   * thread) */
  int64_t crows = RED_CHUNK / (p->outer ? tile_cols : 1);
  p->nchunks = 1;
  p->chunk = p->rcount;
  if (groups < 64 && p->rcount >= 2 * crows) {
    p->chunk = crows;
    p->nchunks = (p->rcount + crows - 1) / crows;
  }
  if (F)
    F->batch = !p->outer && p->nr == 1 && p->nchunks == 1 &&
               p->rcount * 2 <= XK_TILE;
  return 0;
}

/* Run a planned reduction into out (contiguous, nout elements). */
static int red_execute(red_plan *p, char *out) {
  int64_t ntask = p->ngroups * p->nchunks;
  p->part = malloc((size_t)(ntask * p->glen) * sizeof(acc_t));
  if (!p->part) return tpu_error(TPU_E_OOM, "reduce: out of host memory");
  int64_t work = p->rcount / p->nchunks * p->glen;
  int64_t grain = XK_GRAIN / (work > 0 ? work : 1);
  if (grain < 1) grain = 1;
  if (ntask <= grain) red_range(p, 0, ntask);
  else tpurt_parallel_for(ntask, grain, red_range, p);
  if (p->F) {
    int rc = tpux__prog_status(p->F->prog);
    if (rc) {
      free(p->part);
      return rc;
    }
  }
  /* combine chunks (into each group's first chunk, row by row: the outer
   * shape's partial rows are glen apart), convert to the class and store
   * (outputs in order) */
  for (int64_t g = 0; g < p->ngroups && p->nchunks > 1; g++) {
    acc_t *a = p->part + g * p->nchunks * p->glen;
    fold_rows(p->kind, p->fl ? XK_F64 : XK_I64, p->nchunks - 1, p->glen, p->glen,
              a + p->glen, a);
  }
  union { float f[XK_TILE]; double d[XK_TILE]; int64_t i[XK_TILE]; } cb;
  for (int64_t o0 = 0; o0 < p->nout; o0 += XK_TILE) {
    int64_t m = p->nout - o0 > XK_TILE ? XK_TILE : p->nout - o0;
    for (int64_t k = 0; k < m; k++) {
      int64_t o = o0 + k, g, j;
      if (p->outer) {
        int64_t kin = p->ks[p->nk - 1], row = o / kin, col = o - row * kin;
        g = row * p->nblk + col / p->blk;
        j = col % p->blk;
      } else {
        g = o;
        j = 0;
      }
      acc_t a = p->part[(g * p->nchunks) * p->glen + j];
      if (p->cls == XK_F32) cb.f[k] = (float)a.d;
      else if (p->cls == XK_F64) cb.d[k] = a.d;
      else cb.i[k] = a.i;
    }
    tpux__store(p->dt, out + o0 * (int64_t)p->es, 1, m, &cb);
  }
  free(p->part);
  return TPU_OK;
}

/* The plain cases of red_prepare (returned 1): x in memory. */
static int red_trivial(xctx *c, int t, const red_plan *p, const tpu_view *x,
                       uint32_t red) {
  if (p->nout == 0) return TPU_OK;
  if (p->rcount == 0) { /* empty reduction: the identity */
    acc_t id = identity(p->kind, p->dt);
    union { float f; double d; int64_t i; } v;
    if (p->cls == XK_F32) v.f = (float)id.d;
    else if (p->cls == XK_F64) v.d = id.d;
    else v.i = id.i;
    return tpux__fill(&c->vals[t].v, &v);
  }
  /* nothing reduced (copy): reduced dims all have size 1 */
  tpu_view src = *x, dst = c->vals[t].v;
  int k = 0;
  for (int i = 0; i < x->ndim; i++)
    if (!(red & (1u << i))) {
      src.sizes[k] = x->sizes[i];
      src.strides[k++] = x->strides[i];
    }
  src.ndim = k;
  return tpux__copy_nocheck(&dst, &src);
}

int tpux__eval_reduce(xctx *c, int t) {
  const tpuir_node *n = tpuir_get_node(c->g, t);
  const tpu_view *x = &c->vals[n->in[0]].v;
  int rc = tpux__alloc_value(c, t);
  if (rc) return rc;
  red_plan p;
  uint32_t red;
  if (red_prepare(&p, n, x, NULL, &red)) return red_trivial(c, t, &p, x, red);
  return red_execute(&p, c->vals[t].mem);
}

/* ---- reduction fusion switch and entry ----------------------------------- */

static atomic_int g_fuse_mode = -1; /* -1: environment decides */
static atomic_llong g_fuse_runs;
static int g_fuse_env_on = 1;
static pthread_once_t g_fuse_env_once = PTHREAD_ONCE_INIT;

static void fuse_env_init(void) {
  const char *s = getenv("TORCH_TPU_NO_REDUCE_FUSION");
  g_fuse_env_on = !(s && *s && strcmp(s, "0") != 0);
}

/* Whether reduction fusion is on (see exec/vtpu/internal.h). */
int tpux__reduce_fusion_enabled(void) {
  int m = atomic_load(&g_fuse_mode);
  if (m >= 0) return m;
  pthread_once(&g_fuse_env_once, fuse_env_init);
  return g_fuse_env_on;
}

/* Force reduction fusion on (1) / off (0), or back to the environment
 * (-1). */
void tpux__set_reduce_fusion(int mode) {
  atomic_store(&g_fuse_mode, mode < 0 ? -1 : mode != 0);
}

/* Number of reductions evaluated from their region (process-wide). */
int64_t tpux__reduce_fusion_runs(void) { return atomic_load(&g_fuse_runs); }

/* Fusion pays only with windows of a useful size: each costs a program
 * start (a few hundred cycles); the plain plan runs the region over whole
 * tiles and folds short runs cheaply. */
#define FUSE_MIN_WINDOW 256

static int64_t zinner(const red_fuse *F, const int *zl, int zn) {
  return zn ? F->zs[zl[zn - 1]] : 1;
}
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Typical window size (elements per program start) of a fused plan. */
static int64_t fuse_window_size(const red_plan *p) {
  const red_fuse *F = p->F;
  int nk = p->nk, nr = p->nr;
  if (F->batch) {
    int64_t rc = p->rcount, cnt = min64(XK_TILE / rc, p->ks[nk - 1]);
    return min64(cnt, zinner(F, F->kzl[nk - 1], F->kzn[nk - 1])) *
           min64(rc, zinner(F, F->rzl[0], F->rzn[0]));
  }
  if (!p->outer)
    return min64(min64(p->rs[nr - 1], p->chunk),
                 min64(XK_TILE, zinner(F, F->rzl[nr - 1], F->rzn[nr - 1])));
  int64_t R = min64(FUSE_WINDOW / p->blk, p->rs[nr - 1]);
  return min64(R, zinner(F, F->rzl[nr - 1], F->rzn[nr - 1])) *
         min64(p->blk, zinner(F, F->kzl[nk - 1], F->kzn[nk - 1]));
}

/* Region + REDUCE t reading its member k (see exec/vtpu/internal.h). */
int tpux__eval_region_reduce(xctx *c, int n, const int32_t *members,
                             const char *store, const tpu_view *const *dst,
                             int k, int t) {
  static char dummy[64]; /* stands for the scratch until re-based */
  const tpuir_node *rn = tpuir_get_node(c->g, t);
  const tpuir_node *mn = tpuir_get_node(c->g, members[k]);
  if (n > XK_REGION_MAX_NODES || k < 0 || k >= n || rn->in[0] != members[k])
    return tpu_error(TPU_E_INTERNAL, "eval_region_reduce: bad arguments");
  char st[XK_REGION_MAX_NODES];
  const tpu_view *ds[XK_REGION_MAX_NODES];
  int sidx = 0; /* index of member k among the stores */
  for (int q = 0; q < n; q++) {
    st[q] = q == k ? 1 : store[q];
    ds[q] = dst[q];
    if (q < k && st[q]) sidx++;
  }
  /* x stored for other users: the windows write it in place and the folds
   * read it back while it is hot; else it goes to a scratch */
  int stored = store[k] != 0;
  tpu_view sv;
  if (!stored) {
    int64_t zero[TPU_MAX_DIMS] = {0};
    tpu_view_init_contiguous(&sv, dummy, mn->dtype, mn->ndim, mn->sizes);
    memcpy(sv.strides, zero, sizeof zero);
    ds[k] = &sv;
  }
  xk_prog *prog;
  int rc = tpux__region_prog(c, n, members, st, ds, &prog);
  if (rc) return rc;
  red_fuse *F = calloc(1, sizeof *F);
  if (!F) {
    free(prog);
    return tpu_error(TPU_E_OOM, "reduce: out of host memory");
  }
  F->prog = prog;
  F->stored = stored;
  F->sarr = prog->store[sidx].arr;
  F->narr = prog->sp.narr;
  for (int a = 0; a < F->narr; a++) {
    F->abase[a] = prog->sp.arr[a];
  }
  /* x: the member's value as materialised (contiguous unless written
   * straight into an output) */
  tpu_view xv;
  if (stored) xv = c->vals[members[k]].v;
  else tpu_view_init_contiguous(&xv, dummy, mn->dtype, mn->ndim, mn->sizes);
  red_plan p;
  uint32_t red;
  int plain = red_prepare(&p, rn, &xv, F, &red);
  if (!plain)
    plain = fuse_window_size(&p) < min64(FUSE_MIN_WINDOW, p.nout * p.rcount);
  atomic_store(&prog->err, TPU_OK);
  prog->err_val = 0;
  if (plain) {
    /* nothing to fuse (empty, nothing reduced, small windows): materialise
     * x, run the region, then the reduce */
    if (!stored) {
      rc = tpux__alloc_value(c, members[k]);
      if (!rc) {
        const tpu_view *xm = &c->vals[members[k]].v;
        xk_arr *sa = &prog->sp.arr[F->sarr];
        sa->p = (char *)xm->base + xm->offset * (int64_t)tpu_dtype_size(xm->dtype);
        for (int d = 0; d < xm->ndim; d++) sa->st[d] = xm->strides[d];
      }
    }
    if (!rc) rc = tpux__prog_run(prog);
    if (!rc) rc = tpux__eval_reduce(c, t);
  } else {
    rc = tpux__alloc_value(c, t);
    if (!rc) rc = red_execute(&p, c->vals[t].mem);
    if (!rc) atomic_fetch_add(&g_fuse_runs, 1);
  }
  free(F);
  free(prog);
  return rc;
}

/* ---- argmax / argmin ---------------------------------------------------- */

typedef struct arg_plan {
  int kind, dt, cls;
  const char *x;
  size_t es;
  int nk;
  int64_t ks[TPU_MAX_DIMS], kx[TPU_MAX_DIMS];
  int64_t len, lst; /* reduced dim */
  int64_t *out;
} arg_plan;

static void arg_range(void *ctx, int64_t b, int64_t e) {
  arg_plan *p = ctx;
  union { float f[XK_TILE]; double d[XK_TILE]; int64_t i[XK_TILE]; } buf;
  int mx = p->kind == TPUIR_RED_MAX;
  for (int64_t o = b; o < e; o++) {
    int64_t off = 0, q = o;
    for (int d = p->nk - 1; d >= 0; d--) {
      int64_t r = q / p->ks[d];
      off += (q - r * p->ks[d]) * p->kx[d];
      q = r;
    }
    int64_t best_i = 0;
    double bd = 0;
    int64_t bi = 0;
    int nan = 0;
    for (int64_t s = 0; s < p->len && !nan; s += XK_TILE) {
      int64_t m = p->len - s > XK_TILE ? XK_TILE : p->len - s;
      tpux__load(p->dt, p->x + (off + s * p->lst) * (int64_t)p->es, p->lst, m, &buf);
      for (int64_t k = 0; k < m; k++) {
        int64_t pos = s + k;
        if (p->cls == XK_I64) {
          int64_t v = buf.i[k];
          if (pos == 0 || (mx ? v > bi : v < bi)) {
            bi = v;
            best_i = pos;
          }
        } else {
          double v = p->cls == XK_F32 ? (double)buf.f[k] : buf.d[k];
          if (v != v) {
            best_i = pos;
            nan = 1;
            break;
          }
          if (pos == 0 || (mx ? v > bd : v < bd)) {
            bd = v;
            best_i = pos;
          }
        }
      }
    }
    p->out[o] = best_i;
  }
}

int tpux__eval_argreduce(xctx *c, int t) {
  const tpuir_node *n = tpuir_get_node(c->g, t);
  const tpu_view *x = &c->vals[n->in[0]].v;
  int rc = tpux__alloc_value(c, t);
  if (rc) return rc;
  arg_plan p;
  memset(&p, 0, sizeof p);
  p.kind = n->kind;
  p.dt = x->dtype;
  p.cls = xk_cls(p.dt);
  p.es = tpu_dtype_size(p.dt);
  p.x = (const char *)x->base + x->offset * (int64_t)p.es;
  p.out = c->vals[t].mem;
  if (x->ndim == 0) {
    p.out[0] = 0;
    return TPU_OK;
  }
  for (int i = 0; i < x->ndim; i++) {
    if (i == n->dim) continue;
    p.ks[p.nk] = x->sizes[i];
    p.kx[p.nk++] = x->strides[i];
  }
  p.len = x->sizes[n->dim];
  p.lst = x->strides[n->dim];
  int64_t nout = 1;
  for (int i = 0; i < p.nk; i++) nout *= p.ks[i];
  if (nout == 0) return TPU_OK;
  int64_t grain = XK_GRAIN / (p.len > 0 ? p.len : 1);
  if (grain < 1) grain = 1;
  if (nout <= grain) arg_range(&p, 0, nout);
  else tpurt_parallel_for(nout, grain, arg_range, &p);
  return TPU_OK;
}

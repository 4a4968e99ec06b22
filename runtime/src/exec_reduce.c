/* exec_reduce.c - vTPU reductions (REDUCE, ARGREDUCE).
 *
 * REDUCE splits the operand's dims into kept and reduced sets (each
 * coalesced; reduced dims ordered by decreasing stride). Floats accumulate
 * in double (8 independent lanes, folded in a fixed order), ints and bool
 * in int64 with wrap-around; the result is rounded once at the store.
 * Two loop shapes:
 *   inner: per output, stream the reduced elements (reduced innermost stride
 *          is the smallest) - sum over rows;
 *   outer: per block of up to XK_TILE consecutive outputs along a kept
 *          innermost dim with the smaller stride, accumulate rows into a
 *          vector of accumulators - sum over columns.
 * Work is split over outputs; when there are few outputs and a long
 * reduction, the reduction is also split into fixed-size chunks whose
 * partial results are combined in chunk order, so results never depend on
 * the number of threads.
 */
#include <math.h>
#include <stdlib.h>

#include "exec_internal.h"

#define LANES 8
#define RED_CHUNK 65536

typedef union acc_t {
  double d;
  int64_t i;
} acc_t;

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
} red_plan;

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

static inline double comb_d(int kind, double a, double v) {
  switch (kind) {
  case TPUIR_RED_SUM: return a + v;
  case TPUIR_RED_PROD: return a * v;
  case TPUIR_RED_MAX: return (v > a || v != v) ? v : a;
  default: return (v < a || v != v) ? v : a;
  }
}
static inline int64_t comb_i(int kind, int64_t a, int64_t v) {
  switch (kind) {
  case TPUIR_RED_SUM: return (int64_t)((uint64_t)a + (uint64_t)v);
  case TPUIR_RED_PROD: return (int64_t)((uint64_t)a * (uint64_t)v);
  case TPUIR_RED_MAX: return v > a ? v : a;
  case TPUIR_RED_MIN: return v < a ? v : a;
  case TPUIR_RED_AND: return a & v;
  default: return a | v;
  }
}

/* Fold a class buffer into LANES accumulators (lane = i % LANES). */
#define FOLD_LANES(T, ACC, COMB)                                             \
  do {                                                                       \
    const T *b_ = (const T *)buf;                                            \
    int64_t i_ = 0;                                                          \
    for (; i_ + LANES <= n; i_ += LANES)                                     \
      for (int l_ = 0; l_ < LANES; l_++)                                     \
        lanes[l_].ACC = COMB(lanes[l_].ACC, b_[i_ + l_]);                    \
    for (; i_ < n; i_++) lanes[0].ACC = COMB(lanes[0].ACC, b_[i_]);          \
  } while (0)

#define SUMD(a, v) ((a) + (double)(v))
#define PRODD(a, v) ((a) * (double)(v))
#define MAXD(a, v) (((double)(v) > (a) || (v) != (v)) ? (double)(v) : (a))
#define MIND(a, v) (((double)(v) < (a) || (v) != (v)) ? (double)(v) : (a))
#define SUMI(a, v) ((int64_t)((uint64_t)(a) + (uint64_t)(v)))
#define PRODI(a, v) ((int64_t)((uint64_t)(a) * (uint64_t)(v)))
#define MAXI(a, v) ((v) > (a) ? (v) : (a))
#define MINI(a, v) ((v) < (a) ? (v) : (a))
#define ANDI(a, v) ((a) & (v))
#define ORI(a, v) ((a) | (v))

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
static void fold_lanes(int kind, int cls, int64_t n, const void *buf,
                       acc_t *lanes) {
  if (cls == XK_F32) {
    switch (kind) {
    case TPUIR_RED_SUM: FOLD_LANES(float, d, SUMD); break;
    case TPUIR_RED_PROD: FOLD_LANES(float, d, PRODD); break;
    case TPUIR_RED_MAX: FOLD_LANES(float, d, MAXD); break;
    default: FOLD_LANES(float, d, MIND); break;
    }
  } else if (cls == XK_F64) {
    switch (kind) {
    case TPUIR_RED_SUM: FOLD_LANES(double, d, SUMD); break;
    case TPUIR_RED_PROD: FOLD_LANES(double, d, PRODD); break;
    case TPUIR_RED_MAX: FOLD_LANES(double, d, MAXD); break;
    default: FOLD_LANES(double, d, MIND); break;
    }
  } else {
    switch (kind) {
    case TPUIR_RED_SUM: FOLD_LANES(int64_t, i, SUMI); break;
    case TPUIR_RED_PROD: FOLD_LANES(int64_t, i, PRODI); break;
    case TPUIR_RED_MAX: FOLD_LANES(int64_t, i, MAXI); break;
    case TPUIR_RED_MIN: FOLD_LANES(int64_t, i, MINI); break;
    case TPUIR_RED_AND: FOLD_LANES(int64_t, i, ANDI); break;
    default: FOLD_LANES(int64_t, i, ORI); break;
    }
  }
}

/* acc[i] op= buf[i] */
#define FOLD_VEC(T, ACC, COMB)                                               \
  do {                                                                       \
    const T *b_ = (const T *)buf;                                            \
    for (int64_t i_ = 0; i_ < n; i_++) acc[i_].ACC = COMB(acc[i_].ACC, b_[i_]); \
  } while (0)

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
static void fold_vec(int kind, int cls, int64_t n, const void *buf, acc_t *acc) {
  if (cls == XK_F32) {
    switch (kind) {
    case TPUIR_RED_SUM: FOLD_VEC(float, d, SUMD); break;
    case TPUIR_RED_PROD: FOLD_VEC(float, d, PRODD); break;
    case TPUIR_RED_MAX: FOLD_VEC(float, d, MAXD); break;
    default: FOLD_VEC(float, d, MIND); break;
    }
  } else if (cls == XK_F64) {
    switch (kind) {
    case TPUIR_RED_SUM: FOLD_VEC(double, d, SUMD); break;
    case TPUIR_RED_PROD: FOLD_VEC(double, d, PRODD); break;
    case TPUIR_RED_MAX: FOLD_VEC(double, d, MAXD); break;
    default: FOLD_VEC(double, d, MIND); break;
    }
  } else {
    switch (kind) {
    case TPUIR_RED_SUM: FOLD_VEC(int64_t, i, SUMI); break;
    case TPUIR_RED_PROD: FOLD_VEC(int64_t, i, PRODI); break;
    case TPUIR_RED_MAX: FOLD_VEC(int64_t, i, MAXI); break;
    case TPUIR_RED_MIN: FOLD_VEC(int64_t, i, MINI); break;
    case TPUIR_RED_AND: FOLD_VEC(int64_t, i, ANDI); break;
    default: FOLD_VEC(int64_t, i, ORI); break;
    }
  }
}

static acc_t comb(const red_plan *p, acc_t a, acc_t v) {
  if (p->fl) a.d = comb_d(p->kind, a.d, v.d);
  else a.i = comb_i(p->kind, a.i, v.i);
  return a;
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

/* Reduce elements [lo, hi) of the reduced space at operand offset base into
 * a single accumulator (inner shape). */
static acc_t reduce_inner(const red_plan *p, int64_t base, int64_t lo,
                          int64_t hi, void *buf) {
  acc_t lanes[LANES];
  acc_t id = identity(p->kind, p->dt);
  for (int l = 0; l < LANES; l++) lanes[l] = id;
  int nr = p->nr;
  int64_t idx[TPU_MAX_DIMS], off = 0, L = lo;
  for (int d = nr - 1; d >= 0; d--) {
    int64_t q = L / p->rs[d];
    idx[d] = L - q * p->rs[d];
    off += idx[d] * p->rx[d];
    L = q;
  }
  int64_t left = hi - lo, inner = p->rs[nr - 1], ist = p->rx[nr - 1];
  while (left > 0) {
    int64_t seg = inner - idx[nr - 1];
    if (seg > left) seg = left;
    int64_t done = 0;
    while (done < seg) {
      int64_t m = seg - done > XK_TILE ? XK_TILE : seg - done;
      const char *src = p->x + (base + off + done * ist) * (int64_t)p->es;
      if (ist == 1 && p->dt == xk_native(p->cls)) {
        fold_lanes(p->kind, p->cls, m, src, lanes); /* straight from memory */
      } else {
        tpux__load(p->dt, src, ist, m, buf);
        fold_lanes(p->kind, p->cls, m, buf, lanes);
      }
      done += m;
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
  acc_t r = lanes[0];
  for (int l = 1; l < LANES; l++) r = comb(p, r, lanes[l]);
  return r;
}

/* Outer shape: acc[0..len) op= rows of the reduced range [lo, hi). */
static void reduce_outer(const red_plan *p, int64_t base, int64_t len,
                         int64_t lo, int64_t hi, void *buf, acc_t *acc) {
  acc_t id = identity(p->kind, p->dt);
  for (int64_t i = 0; i < len; i++) acc[i] = id;
  int nr = p->nr;
  int64_t idx[TPU_MAX_DIMS], off = 0, L = lo;
  for (int d = nr - 1; d >= 0; d--) {
    int64_t q = L / p->rs[d];
    idx[d] = L - q * p->rs[d];
    off += idx[d] * p->rx[d];
    L = q;
  }
  int64_t kst = p->kx[p->nk - 1];
  for (int64_t r = lo; r < hi; r++) {
    const char *src = p->x + (base + off) * (int64_t)p->es;
    if (kst == 1 && p->dt == xk_native(p->cls)) {
      fold_vec(p->kind, p->cls, len, src, acc);
    } else {
      tpux__load(p->dt, src, kst, len, buf);
      fold_vec(p->kind, p->cls, len, buf, acc);
    }
    for (int d = nr - 1; d >= 0; d--) {
      idx[d]++;
      off += p->rx[d];
      if (idx[d] < p->rs[d]) break;
      off -= p->rs[d] * p->rx[d];
      idx[d] = 0;
    }
  }
}

static void red_range(void *ctx, int64_t b, int64_t e) {
  red_plan *p = ctx;
  union { float f[XK_TILE]; double d[XK_TILE]; int64_t i[XK_TILE]; } ubuf;
  void *buf = &ubuf;
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

static void coalesce_dims(int *n, int64_t *s, int64_t *st, int64_t *st2) {
  int k = 0;
  for (int i = 0; i < *n; i++) {
    if (s[i] == 1) continue;
    if (k > 0 && st[k - 1] == st[i] * s[i] &&
        (!st2 || st2[k - 1] == st2[i] * s[i])) {
      s[k - 1] *= s[i];
      st[k - 1] = st[i];
      if (st2) st2[k - 1] = st2[i];
      continue;
    }
    s[k] = s[i];
    st[k] = st[i];
    if (st2) st2[k] = st2[i];
    k++;
  }
  *n = k;
}

int tpux__eval_reduce(xctx *c, int t) {
  const tpuir_node *n = tpuir_get_node(c->g, t);
  const tpu_view *x = &c->vals[n->in[0]].v;
  int rc = tpux__alloc_value(c, t);
  if (rc) return rc;
  red_plan p;
  memset(&p, 0, sizeof p);
  p.kind = n->kind;
  p.dt = x->dtype;
  p.cls = xk_cls(p.dt);
  p.fl = p.cls != XK_I64;
  p.es = tpu_dtype_size(p.dt);
  p.x = (const char *)x->base + x->offset * (int64_t)p.es;
  uint32_t red = 0;
  for (int i = 0; i < n->na; i++) red |= 1u << n->a[i];
  int64_t ko[TPU_MAX_DIMS]; /* output strides (contiguous) to keep order */
  for (int i = 0; i < x->ndim; i++) {
    if (red & (1u << i)) {
      p.rs[p.nr] = x->sizes[i];
      p.rx[p.nr++] = x->strides[i];
    } else {
      p.ks[p.nk] = x->sizes[i];
      p.kx[p.nk++] = x->strides[i];
    }
  }
  p.nout = 1;
  for (int i = 0; i < p.nk; i++) p.nout *= p.ks[i];
  p.rcount = 1;
  for (int i = 0; i < p.nr; i++) p.rcount *= p.rs[i];
  if (p.nout == 0) return TPU_OK;
  {
    int64_t s = 1;
    for (int i = p.nk - 1; i >= 0; i--) {
      ko[i] = s;
      s *= p.ks[i];
    }
  }
  coalesce_dims(&p.nk, p.ks, p.kx, ko);
  /* reduced dims: decreasing |stride| (stable), then coalesce */
  for (int i = 1; i < p.nr; i++)
    for (int j = i; j > 0 && llabs(p.rx[j - 1]) < llabs(p.rx[j]); j--) {
      int64_t ts = p.rs[j], tx = p.rx[j];
      p.rs[j] = p.rs[j - 1];
      p.rx[j] = p.rx[j - 1];
      p.rs[j - 1] = ts;
      p.rx[j - 1] = tx;
    }
  coalesce_dims(&p.nr, p.rs, p.rx, NULL);
  if (p.nr == 0 || p.rcount == 0) {
    /* nothing reduced (copy) or empty reduction (identity) */
    if (p.rcount == 0) {
      acc_t id = identity(p.kind, p.dt);
      union { float f; double d; int64_t i; } v;
      if (p.cls == XK_F32) v.f = (float)id.d;
      else if (p.cls == XK_F64) v.d = id.d;
      else v.i = id.i;
      return tpux__fill(&c->vals[t].v, &v);
    }
    tpu_view src = *x, dst = c->vals[t].v;
    /* reduced dims all have size 1: drop them from the source */
    int k = 0;
    for (int i = 0; i < x->ndim; i++)
      if (!(red & (1u << i))) {
        src.sizes[k] = x->sizes[i];
        src.strides[k++] = x->strides[i];
      }
    src.ndim = k;
    return tpux__copy_nocheck(&dst, &src);
  }
  if (p.nk == 0) { /* full reduction */
    p.nk = 1;
    p.ks[0] = 1;
    p.kx[0] = 0;
  }
  p.outer = p.ks[p.nk - 1] > 1 &&
            llabs(p.kx[p.nk - 1]) < llabs(p.rx[p.nr - 1]);
  if (p.outer) {
    p.blk = p.ks[p.nk - 1] < XK_TILE ? p.ks[p.nk - 1] : XK_TILE;
    p.nblk = (p.ks[p.nk - 1] + p.blk - 1) / p.blk;
    p.ngroups = (p.nout / p.ks[p.nk - 1]) * p.nblk;
    p.glen = p.blk;
  } else {
    p.ngroups = p.nout;
    p.glen = 1;
  }
  p.nchunks = 1;
  p.chunk = p.rcount;
  if (p.ngroups < 64 && p.rcount >= 2 * RED_CHUNK) {
    p.chunk = RED_CHUNK;
    p.nchunks = (p.rcount + RED_CHUNK - 1) / RED_CHUNK;
  }
  int64_t ntask = p.ngroups * p.nchunks;
  p.part = malloc((size_t)(ntask * p.glen) * sizeof(acc_t));
  if (!p.part) return tpu_error(TPU_E_OOM, "reduce: out of host memory");
  int64_t work = p.rcount / p.nchunks * p.glen;
  int64_t grain = XK_GRAIN / (work > 0 ? work : 1);
  if (grain < 1) grain = 1;
  if (ntask <= grain) red_range(&p, 0, ntask);
  else tpurt_parallel_for(ntask, grain, red_range, &p);
  /* combine chunks, convert to the class and store (outputs in order) */
  char *out = c->vals[t].mem;
  union { float f[XK_TILE]; double d[XK_TILE]; int64_t i[XK_TILE]; } cb;
  for (int64_t o0 = 0; o0 < p.nout; o0 += XK_TILE) {
    int64_t m = p.nout - o0 > XK_TILE ? XK_TILE : p.nout - o0;
    for (int64_t k = 0; k < m; k++) {
      int64_t o = o0 + k, g, j;
      if (p.outer) {
        int64_t kin = p.ks[p.nk - 1], row = o / kin, col = o - row * kin;
        g = row * p.nblk + col / p.blk;
        j = col % p.blk;
      } else {
        g = o;
        j = 0;
      }
      acc_t a = p.part[(g * p.nchunks) * p.glen + j];
      for (int64_t ch = 1; ch < p.nchunks; ch++)
        a = comb(&p, a, p.part[(g * p.nchunks + ch) * p.glen + j]);
      if (p.cls == XK_F32) cb.f[k] = (float)a.d;
      else if (p.cls == XK_F64) cb.d[k] = a.d;
      else cb.i[k] = a.i;
    }
    tpux__store(p.dt, out + o0 * (int64_t)p.es, 1, m, &cb);
  }
  free(p.part);
  return TPU_OK;
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

/* exec/vtpu/copy.c - vTPU strided copies: tpux_copy (with dtype conversion),
 * raw same-dtype copies (memcpy / row loops / blocked 2-D transposes),
 * fills, view overlap tests and temporary allocation. */
#include <pthread.h>
#include <stdlib.h>

#include "exec/vtpu/internal.h"

/* ---- temporaries --------------------------------------------------------
 * Large temporaries come from mmap in glibc, so every run would fault in
 * (and zero) fresh pages, and freeing them unmaps them again. Freed blocks
 * of >= 1 MiB are kept in a process-wide cache (at most 128 blocks / 1 GiB,
 * under a mutex) and reused for requests between half their size and their
 * size: a whole training step's program (dozens of large values live at
 * once) then runs on the same pages every time. An allocation that fails
 * releases the cache and tries once more; tpux_trim_temporaries releases
 * it on request (torch.tpu.empty_cache). */
#define TMP_HDR 64
#define CACHE_MIN ((size_t)1 << 20)
#define CACHE_SLOTS 128
#define CACHE_MAX_BYTES ((size_t)1 << 30)

static pthread_mutex_t g_cache_mu = PTHREAD_MUTEX_INITIALIZER;
static void *g_cache[CACHE_SLOTS]; /* block bases (headers) */
static size_t g_cache_size[CACHE_SLOTS];
static size_t g_cache_bytes;

/* Release every cached block (see tpu_exec.h). */
void tpux_trim_temporaries(void) {
  void *drop[CACHE_SLOTS];
  int nd = 0;
  pthread_mutex_lock(&g_cache_mu);
  for (int i = 0; i < CACHE_SLOTS; i++)
    if (g_cache[i]) {
      drop[nd++] = g_cache[i];
      g_cache[i] = NULL;
    }
  g_cache_bytes = 0;
  pthread_mutex_unlock(&g_cache_mu);
  for (int i = 0; i < nd; i++) free(drop[i]);
}

/* 64-byte aligned host memory (never NULL for 0 bytes unless OOM). Caller
 * frees with tpux__free. */
void *tpux__alloc(size_t bytes) {
  size_t n = (bytes + 63) & ~(size_t)63;
  if (n == 0) n = 64;
  if (n >= CACHE_MIN) {
    pthread_mutex_lock(&g_cache_mu);
    int best = -1;
    for (int i = 0; i < CACHE_SLOTS; i++)
      if (g_cache[i] && g_cache_size[i] >= n && g_cache_size[i] / 2 <= n &&
          (best < 0 || g_cache_size[i] < g_cache_size[best]))
        best = i;
    void *b = NULL;
    if (best >= 0) {
      b = g_cache[best];
      g_cache[best] = NULL;
      g_cache_bytes -= g_cache_size[best];
    }
    pthread_mutex_unlock(&g_cache_mu);
    if (b) return (char *)b + TMP_HDR;
  }
  char *b = aligned_alloc(64, n + TMP_HDR);
  if (!b) {
    tpux_trim_temporaries();
    b = aligned_alloc(64, n + TMP_HDR);
  }
  if (!b) return NULL;
  memcpy(b, &n, sizeof n);
  return b + TMP_HDR;
}

/* Release memory from tpux__alloc (NULL is a no-op). */
void tpux__free(void *p) {
  if (!p) return;
  char *b = (char *)p - TMP_HDR;
  size_t n;
  memcpy(&n, b, sizeof n);
  if (n >= CACHE_MIN) {
    pthread_mutex_lock(&g_cache_mu);
    int slot = -1;
    for (int i = 0; i < CACHE_SLOTS && slot < 0; i++)
      if (!g_cache[i]) slot = i;
    if (slot >= 0 && g_cache_bytes + n <= CACHE_MAX_BYTES) {
      g_cache[slot] = b;
      g_cache_size[slot] = n;
      g_cache_bytes += n;
      b = NULL;
    }
    pthread_mutex_unlock(&g_cache_mu);
  }
  free(b);
}

/* Byte span [lo, hi) touched by a view; 0 if empty. */
static int view_span(const tpu_view *v, uintptr_t *lo, uintptr_t *hi) {
  int64_t es = (int64_t)tpu_dtype_size(v->dtype);
  int64_t mn = 0, mx = 0;
  for (int i = 0; i < v->ndim; i++) {
    if (v->sizes[i] == 0) return 0;
    int64_t e = v->strides[i] * (v->sizes[i] - 1);
    if (e < 0) mn += e;
    else mx += e;
  }
  uintptr_t b = (uintptr_t)v->base;
  *lo = b + (uintptr_t)((v->offset + mn) * es);
  *hi = b + (uintptr_t)((v->offset + mx) * es + es);
  return 1;
}

int tpux__views_overlap(const tpu_view *a, const tpu_view *b) {
  uintptr_t al, ah, bl, bh;
  if (!view_span(a, &al, &ah) || !view_span(b, &bl, &bh)) return 0;
  return al < bh && bl < ah;
}

int tpux__views_same(const tpu_view *a, const tpu_view *b) {
  if (a->base != b->base || a->offset != b->offset || a->dtype != b->dtype ||
      a->ndim != b->ndim)
    return 0;
  for (int i = 0; i < a->ndim; i++) {
    if (a->sizes[i] != b->sizes[i]) return 0;
    if (a->sizes[i] > 1 && a->strides[i] != b->strides[i]) return 0;
  }
  return 1;
}

/* ---- raw (same dtype) copies ------------------------------------------- */

typedef struct raw_job {
  xk_space sp; /* arr 0 = dst, arr 1 = src */
  size_t es;
  int64_t rows, row;
} raw_job;

#define RAW_ROW(T)                                                           \
  do {                                                                       \
    T *d_ = (T *)d;                                                          \
    const T *s_ = (const T *)s;                                              \
    if (ds == 1 && ss == 1) memcpy(d_, s_, (size_t)n * sizeof(T));           \
    else if (ss == 0 && ds == 1) { /* a fill: memset for zeros */           \
      static const T z_;                                                     \
      T v_ = s_[0];                                                          \
      if (!memcmp(&v_, &z_, sizeof(T))) memset(d_, 0, (size_t)n * sizeof(T)); \
      else for (int64_t i = 0; i < n; i++) d_[i] = v_;                       \
    } else if (ss == 0) {                                                    \
      T v_ = s_[0];                                                          \
      for (int64_t i = 0; i < n; i++) d_[i * ds] = v_;                       \
    } else if (ds == 1 && ss == -1) /* a flip: vector loads and shuffles */ \
      for (int64_t i = 0; i < n; i++) d_[i] = s_[-i];                        \
    else if (ds == 1)                                                        \
      for (int64_t i = 0; i < n; i++) d_[i] = s_[i * ss];                    \
    else                                                                     \
      for (int64_t i = 0; i < n; i++) d_[i * ds] = s_[i * ss];               \
  } while (0)

typedef struct raw16 { uint64_t lo, hi; } raw16;

static void raw_row(size_t es, char *d, int64_t ds, const char *s, int64_t ss,
                    int64_t n) {
  switch (es) {
  case 16: RAW_ROW(raw16); break;
  case 1: RAW_ROW(uint8_t); break;
  case 2: RAW_ROW(uint16_t); break;
  case 4: RAW_ROW(uint32_t); break;
  default: RAW_ROW(uint64_t); break;
  }
}

/* Rows [b, e) of the job; the row offsets advance as an odometer (no
 * division per row: rows of a head split are only 64 elements long). */
static void raw_rows(void *ctx, int64_t b, int64_t e) {
  raw_job *j = ctx;
  const xk_space *s = &j->sp;
  const int64_t *dst = s->arr[0].st, *sst = s->arr[1].st;
  int nd = s->nd;
  int64_t es = (int64_t)j->es, idx[TPU_MAX_DIMS], q = b, od = 0, os = 0;
  for (int d = nd - 2; d >= 0; d--) {
    idx[d] = q % s->sz[d];
    q /= s->sz[d];
    od += idx[d] * dst[d];
    os += idx[d] * sst[d];
  }
  for (int64_t r = b; r < e; r++) {
    raw_row(j->es, s->arr[0].p + od * es, dst[nd - 1], s->arr[1].p + os * es, sst[nd - 1],
            j->row);
    for (int d = nd - 2; d >= 0; d--) {
      od += dst[d];
      os += sst[d];
      if (++idx[d] < s->sz[d]) break;
      od -= dst[d] * s->sz[d];
      os -= sst[d] * s->sz[d];
      idx[d] = 0;
    }
  }
}

/* One 32x32 block (rows i0.., cols j0.. of the copy's last two dims) through
 * a tile in L1: read in the source's memory order, written in the
 * destination's. Reading a transposed source straight across its rows would
 * touch 32 lines a power-of-two stride apart, all in one L1 set. */
#define RAW_BLOCK(T)                                                             \
  do {                                                                           \
    T tile_[32][33];                                                             \
    const T *s_ = (const T *)sp;                                                 \
    T *d_ = (T *)dp;                                                             \
    if (llabs(sr) <= llabs(sc))                                                  \
      for (int64_t j = 0; j < nj; j++)                                           \
        for (int64_t i = 0; i < ni; i++) tile_[i][j] = s_[i * sr + j * sc];      \
    else                                                                         \
      for (int64_t i = 0; i < ni; i++)                                           \
        for (int64_t j = 0; j < nj; j++) tile_[i][j] = s_[i * sr + j * sc];      \
    if (llabs(dr) <= llabs(dc))                                                  \
      for (int64_t j = 0; j < nj; j++)                                           \
        for (int64_t i = 0; i < ni; i++) d_[i * dr + j * dc] = tile_[i][j];      \
    else                                                                         \
      for (int64_t i = 0; i < ni; i++)                                           \
        for (int64_t j = 0; j < nj; j++) d_[i * dr + j * dc] = tile_[i][j];      \
  } while (0)

static void raw_block(size_t es, char *dp, int64_t dr, int64_t dc, const char *sp, int64_t sr,
                      int64_t sc, int64_t ni, int64_t nj) {
  switch (es) {
  case 1: RAW_BLOCK(uint8_t); break;
  case 2: RAW_BLOCK(uint16_t); break;
  case 4: RAW_BLOCK(uint32_t); break;
  case 8: RAW_BLOCK(uint64_t); break;
  default:
    for (int64_t i = 0; i < ni; i++)
      raw_row(es, dp + i * dr * (int64_t)es, dc, sp + i * sr * (int64_t)es, sc, nj);
  }
}

/* Copy whose last two dims transpose (one side is read across rows): 32x32
 * blocks of those two dims, for every index of the dims before them. */
static void raw_blocked(void *ctx, int64_t b, int64_t e) {
  raw_job *j = ctx;
  const xk_space *s = &j->sp;
  int nd = s->nd;
  int64_t R = s->sz[nd - 2], C = s->sz[nd - 1], es = (int64_t)j->es;
  int64_t dr = s->arr[0].st[nd - 2], dc = s->arr[0].st[nd - 1];
  int64_t sr = s->arr[1].st[nd - 2], sc = s->arr[1].st[nd - 1];
  int64_t rb = (R + 31) / 32, cb = (C + 31) / 32;
  for (int64_t blk = b; blk < e; blk++) {
    int64_t q = blk / (rb * cb), in = blk % (rb * cb), od = 0, os = 0;
    for (int d = nd - 3; d >= 0; d--) {
      int64_t i = q % s->sz[d];
      q /= s->sz[d];
      od += i * s->arr[0].st[d];
      os += i * s->arr[1].st[d];
    }
    int64_t i0 = (in / cb) * 32, j0 = (in % cb) * 32;
    int64_t i1 = i0 + 32 < R ? i0 + 32 : R, j1 = j0 + 32 < C ? j0 + 32 : C;
    raw_block(j->es, s->arr[0].p + (od + i0 * dr + j0 * dc) * es, dr, dc,
              s->arr[1].p + (os + i0 * sr + j0 * sc) * es, sr, sc, i1 - i0, j1 - j0);
  }
}

static void raw_copy(const tpu_view *dst, const tpu_view *src) {
  raw_job j;
  j.es = tpu_dtype_size(dst->dtype);
  tpux__space_init(&j.sp, dst->ndim, dst->sizes);
  tpux__space_add(&j.sp, dst);
  tpux__space_add(&j.sp, src);
  tpux__space_order(&j.sp, (const char[2]){1, 0});
  int64_t total = tpux__space_numel(&j.sp);
  if (total == 0) return;
  int nd = j.sp.nd;
  j.row = j.sp.sz[nd - 1];
  j.rows = total / j.row;
  int64_t ss = j.sp.arr[1].st[nd - 1], ds = j.sp.arr[0].st[nd - 1];
  if (nd >= 2 && j.sp.sz[nd - 2] >= 32 && j.sp.sz[nd - 1] >= 32 &&
      ((ds == 1 && llabs(ss) > 8) || (ss == 1 && llabs(ds) > 8))) {
    int64_t nblk = total / (j.sp.sz[nd - 2] * j.sp.sz[nd - 1]) *
                   ((j.sp.sz[nd - 2] + 31) / 32) * ((j.sp.sz[nd - 1] + 31) / 32);
    tpurt_parallel_for(nblk, XK_GRAIN / 1024 > 0 ? XK_GRAIN / 1024 : 1,
                       raw_blocked, &j);
    return;
  }
  if (nd == 1 && total > XK_GRAIN && (ss == 1 || ss == 0) && ds == 1) {
    /* view the flat range (a copy or a fill) as rows of 16K elements (+ a
     * tail), shared out to the pool */
    int64_t R = 1 << 14, full = total / R;
    raw_job k = j;
    k.sp.nd = 2;
    k.sp.sz[0] = full;
    k.sp.sz[1] = R;
    k.sp.arr[0].st[0] = R;
    k.sp.arr[0].st[1] = 1;
    k.sp.arr[1].st[0] = R * ss;
    k.sp.arr[1].st[1] = ss;
    k.row = R;
    k.rows = full;
    tpurt_parallel_for(full, 4, raw_rows, &k);
    int64_t tail = total - full * R;
    if (tail)
      raw_row(j.es, j.sp.arr[0].p + full * R * (int64_t)j.es, 1,
              j.sp.arr[1].p + full * R * ss * (int64_t)j.es, ss, tail);
    return;
  }
  int64_t grain = XK_GRAIN / j.row;
  if (grain < 1) grain = 1;
  if (j.rows <= grain) raw_rows(&j, 0, j.rows);
  else tpurt_parallel_for(j.rows, grain, raw_rows, &j);
}

/* dst = convert(src) without overlap handling. */
int tpux__copy_nocheck(const tpu_view *dst, const tpu_view *src) {
  if (dst->dtype == src->dtype) {
    raw_copy(dst, src);
    return TPU_OK;
  }
  if (tpu_dtype_is_complex(dst->dtype) || tpu_dtype_is_complex(src->dtype))
    return tpux__copy_complex(dst, src);
  xk_prog *p = calloc(1, sizeof *p);
  if (!p) return tpu_error(TPU_E_OOM, "copy: out of host memory");
  tpux__space_init(&p->sp, dst->ndim, dst->sizes);
  int ad = tpux__space_add(&p->sp, dst);
  int as = tpux__space_add(&p->sp, src);
  p->nbuf = 2;
  p->bufcls[0] = (int8_t)xk_cls(src->dtype);
  p->bufcls[1] = (int8_t)xk_cls(dst->dtype);
  p->nload = 1;
  p->load[0].arr = (int16_t)as;
  p->load[0].buf = 0;
  p->nins = 1;
  p->ins[0] = (xk_ins){TPUIR_CONVERT, (int16_t)dst->dtype, (int16_t)src->dtype,
                       1, 0, -1, -1, 0};
  p->nstore = 1;
  p->store[0].arr = (int16_t)ad;
  p->store[0].buf = 1;
  p->direct_ok[0] = 1;
  if (xk_cls(src->dtype) == xk_cls(dst->dtype)) {
    /* same compute class (e.g. f32 -> bf16, i32 -> i8): the store does the
     * whole conversion, straight from the loaded buffer */
    p->nins = 0;
    p->nbuf = 1;
    p->store[0].buf = 0;
  }
  tpux__prog_finish(p);
  int rc = tpux__prog_run(p);
  free(p);
  return rc;
}

/* Fill every element of dst with a class value (one element of
 * xk_cls(dst->dtype) at cls_val). */
int tpux__fill(const tpu_view *dst, const void *cls_val) {
  uint64_t one = 0;
  tpux__store(dst->dtype, (char *)&one, 1, 1, cls_val);
  tpu_view s = *dst;
  s.base = &one;
  s.offset = 0;
  for (int i = 0; i < s.ndim; i++) s.strides[i] = 0;
  raw_copy(dst, &s);
  return TPU_OK;
}

/* Copy/convert src into dst (equal sizes, any strides/dtypes). Overlapping
 * views are handled through a temporary. Borrowed: dst, src. */
int tpux_copy(const tpu_view *dst, const tpu_view *src) {
  if (!dst || !src) return tpu_error(TPU_E_INVALID, "tpux_copy: NULL view");
  if (tpu_dtype_size(dst->dtype) == 0 || tpu_dtype_size(src->dtype) == 0)
    return tpu_error(TPU_E_TYPE, "tpux_copy: invalid dtype");
  if (dst->ndim != src->ndim || dst->ndim < 0 || dst->ndim > TPU_MAX_DIMS)
    return tpu_error(TPU_E_INVALID, "tpux_copy: rank mismatch (%d vs %d)",
                     (int)dst->ndim, (int)src->ndim);
  for (int i = 0; i < dst->ndim; i++)
    if (dst->sizes[i] != src->sizes[i] || dst->sizes[i] < 0)
      return tpu_error(TPU_E_INVALID,
                       "tpux_copy: size mismatch at dim %d (%lld vs %lld)", i,
                       (long long)dst->sizes[i], (long long)src->sizes[i]);
  int64_t n = tpu_view_numel(dst);
  if (n == 0) return TPU_OK;
  if (!dst->base || !src->base)
    return tpu_error(TPU_E_INVALID, "tpux_copy: NULL base pointer");
  if (tpux__views_same(dst, src)) return TPU_OK;
  if (tpux__views_overlap(dst, src)) {
    void *tmp = tpux__alloc((size_t)n * tpu_dtype_size(src->dtype));
    if (!tmp) return tpu_error(TPU_E_OOM, "tpux_copy: out of host memory");
    tpu_view t;
    tpu_view_init_contiguous(&t, tmp, src->dtype, src->ndim, src->sizes);
    raw_copy(&t, src);
    int rc = tpux__copy_nocheck(dst, &t);
    tpux__free(tmp);
    return rc;
  }
  return tpux__copy_nocheck(dst, src);
}

/* Allocate node t's value as a new contiguous array (the executor's
 * values; see exec/vtpu/internal.h). */
int tpux__alloc_value(xctx *c, int t) {
  const tpuir_node *n = tpuir_get_node(c->g, t);
  if (c->node_out && t == c->node_t) { /* the output itself (exec/vtpu/variant.c, var_direct) */
    c->vals[t].v = *c->node_out;
    return TPU_OK;
  }
  int64_t numel = 1;
  for (int i = 0; i < n->ndim; i++) numel *= n->sizes[i];
  void *m = tpux__alloc((size_t)numel * tpu_dtype_size(n->dtype));
  if (!m)
    return tpu_error(TPU_E_OOM, "vTPU executor: out of host memory (%lld bytes)",
                     (long long)(numel * (int64_t)tpu_dtype_size(n->dtype)));
  c->vals[t].mem = m;
  tpu_view_init_contiguous(&c->vals[t].v, m, n->dtype, n->ndim, n->sizes);
  return TPU_OK;
}

int tpux__writes_whole_value(int op) {
  switch (op) {
  case TPUIR_DOT_GENERAL: case TPUIR_CONCAT: case TPUIR_PAD: case TPUIR_INDEX_SELECT:
  case TPUIR_GATHER: case TPUIR_INDEX_ADD: case TPUIR_SCATTER_ADD: case TPUIR_RNG:
  case TPUIR_IOTA: case TPUIR_REDUCE_WINDOW: case TPUIR_WINDOW_ARGMAX:
    return 1;
  default: return 0;
  }
}

/* A CONVERT the plan keeps out of regions (a parameter's bf16 copy for the
 * matrix unit, exec/vtpu/rewrite.c): when the operand is dense in some dim
 * order the value keeps that memory order, so the conversion is one flat
 * pass (a transposed weight stays transposed; the matrix unit reads it
 * so); otherwise the value is contiguous. */
int tpux__eval_convert(xctx *c, int t) {
  const tpuir_node *n = tpuir_get_node(c->g, t);
  const tpu_view *x = &c->vals[n->in[0]].v;
  int rc = tpux__alloc_value(c, t);
  if (rc) return rc;
  tpu_view *v = &c->vals[t].v;
  int ord[TPU_MAX_DIMS], no = 0;
  for (int d = 0; d < x->ndim; d++) { /* dims of size > 1 by increasing stride */
    if (x->sizes[d] == 1) continue;
    int k = no++;
    while (k > 0 && x->strides[ord[k - 1]] > x->strides[d]) {
      ord[k] = ord[k - 1];
      k--;
    }
    ord[k] = d;
  }
  int64_t expect = 1;
  int dense = 1;
  for (int k = 0; k < no && dense; k++) {
    dense = x->strides[ord[k]] == expect;
    expect *= x->sizes[ord[k]];
  }
  if (!dense || no < 2) return tpu_view_numel(v) ? tpux__copy_nocheck(v, x) : TPU_OK;
  for (int k = 0; k < no; k++) v->strides[ord[k]] = x->strides[ord[k]];
  tpu_view fx = *x, fv = *v; /* the same memory order: convert it flat */
  fx.ndim = fv.ndim = 1;
  fx.sizes[0] = fv.sizes[0] = expect;
  fx.strides[0] = fv.strides[0] = 1;
  return tpux__copy_nocheck(&fv, &fx);
}

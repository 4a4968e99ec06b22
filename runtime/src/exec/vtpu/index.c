/* exec/vtpu/index.c - vTPU indexing nodes with torch semantics: GATHER,
 * INDEX_SELECT, SCATTER_ADD, INDEX_ADD.
 *
 * Indices (int32/int64 views) are first converted to a contiguous int64
 * array and range-checked as a whole (negative indices are errors, as on
 * torch CPU), so a failing node writes nothing (TPU_E_INDEX). Accumulating ops compute
 * in the dtype's class (f16/bf16 via float, rounded per addition; ints
 * wrap) and run duplicates in index order, so results are deterministic.
 */
#include <stdlib.h>

#include "exec/vtpu/internal.h"

/* Indices as contiguous int64: the view itself when it is one, else a
 * copy in own (the caller frees own with tpux__free; NULL when borrowed). */
typedef struct idx_list {
  const int64_t *ix;
  int64_t n;
  void *own;
} idx_list;

static int load_indices(const tpu_view *idx, idx_list *L) {
  L->n = tpu_view_numel(idx);
  L->own = NULL;
  if (idx->dtype == TPU_I64 && tpu_view_is_contiguous(idx)) {
    L->ix = (const int64_t *)idx->base + idx->offset;
    return TPU_OK;
  }
  int64_t *m = tpux__alloc((size_t)L->n * 8);
  if (!m) return tpu_error(TPU_E_OOM, "index: out of host memory");
  tpu_view d;
  tpu_view_init_contiguous(&d, m, TPU_I64, idx->ndim, idx->sizes);
  int rc = L->n ? tpux__copy_nocheck(&d, idx) : TPU_OK;
  if (rc) {
    tpux__free(m);
    return rc;
  }
  L->ix = m;
  L->own = m;
  return TPU_OK;
}

/* Node n's indices (the view iv) as contiguous int64 (load_indices; the
 * caller frees L->own, nothing to free on error), range-checked against
 * dim n->dim of its operand in[0]. An index out of range is TPU_E_INDEX
 * (tpu_ir.h), message "index out of range in self" for index_select, else
 * "index 5 is out of bounds for dimension 1 with size 3" (torch CPU's
 * text; the lowering re-reports gather/scatter/index_add as RuntimeError,
 * like PyTorch). */
static int checked_indices(const tpuir_graph *g, const tpuir_node *n, const tpu_view *iv,
                           idx_list *L) {
  int rc = load_indices(iv, L);
  if (rc) return rc;
  const tpuir_node *x = tpuir_get_node(g, n->in[0]);
  int64_t size = x->ndim ? x->sizes[n->dim] : 1;
  for (int64_t i = 0; i < L->n && !rc; i++)
    if (L->ix[i] < 0 || L->ix[i] >= size) {
      if (n->op == TPUIR_INDEX_SELECT) rc = tpu_error(TPU_E_INDEX, "index out of range in self");
      else rc = tpu_error(TPU_E_INDEX,
                          "index %lld is out of bounds for dimension %d with size %lld",
                          (long long)L->ix[i], n->dim, (long long)size);
    }
  if (rc) {
    tpux__free(L->own);
    L->own = NULL;
  }
  return rc;
}

int tpux__index_source(const tpuir_graph *g, int v) {
  for (;;) {
    const tpuir_node *n = tpuir_get_node(g, v);
    int64_t numel = 1;
    for (int d = 0; d < n->ndim; d++) numel *= n->sizes[d];
    if (numel == 0 || /* (a broadcast to no elements holds none of them) */
        (n->op != TPUIR_RESHAPE && n->op != TPUIR_TRANSPOSE && n->op != TPUIR_BROADCAST_IN_DIM))
      return v;
    v = n->in[0];
  }
}

int tpux__check_index(xctx *c, int t) {
  const tpuir_node *n = tpuir_get_node(c->g, t);
  idx_list L;
  int rc = checked_indices(c->g, n, &c->vals[tpux__index_source(c->g, n->in[1])].v, &L);
  tpux__free(L.own); /* (NULL after an error) */
  return rc;
}

static inline void copy_elem(size_t es, char *d, const char *s) {
  switch (es) {
  case 1: *d = *s; break;
  case 2: memcpy(d, s, 2); break;
  case 4: memcpy(d, s, 4); break;
  case 16: memcpy(d, s, 16); break;
  default: memcpy(d, s, 8); break;
  }
}

/* *d += *s in dtype dt (class arithmetic, rounded/wrapped once). */
static inline void add_elem(int dt, char *d, const char *s) {
  switch (dt) {
  case TPU_BOOL: *(uint8_t *)d = (*(uint8_t *)d | *(const uint8_t *)s) != 0; break;
  case TPU_U8: *(uint8_t *)d = (uint8_t)(*(uint8_t *)d + *(const uint8_t *)s); break;
  case TPU_I8: *(int8_t *)d = (int8_t)(*(int8_t *)d + *(const int8_t *)s); break;
  case TPU_I16: *(int16_t *)d = (int16_t)(*(int16_t *)d + *(const int16_t *)s); break;
  case TPU_I32: *(int32_t *)d = (int32_t)((uint32_t)*(int32_t *)d + (uint32_t)*(const int32_t *)s); break;
  case TPU_I64: *(int64_t *)d = (int64_t)((uint64_t)*(int64_t *)d + (uint64_t)*(const int64_t *)s); break;
  case TPU_F16: *(_Float16 *)d = (_Float16)((float)*(_Float16 *)d + (float)*(const _Float16 *)s); break;
  case TPU_BF16: {
    uint16_t a, b;
    memcpy(&a, d, 2);
    memcpy(&b, s, 2);
    uint16_t r = xk_f32_to_bf16(xk_bf16_to_f32(a) + xk_bf16_to_f32(b));
    memcpy(d, &r, 2);
    break;
  }
  case TPU_F32: *(float *)d += *(const float *)s; break;
  default: *(double *)d += *(const double *)s; break;
  }
}

/* element offset of linear index L over (nd, sz) with strides st */
static inline int64_t lin_off(int nd, const int64_t *sz, const int64_t *st,
                              int64_t L) {
  int64_t off = 0;
  for (int d = nd - 1; d >= 0; d--) {
    int64_t q = L / sz[d];
    off += (L - q * sz[d]) * st[d];
    L = q;
  }
  return off;
}

/* ---- gather ------------------------------------------------------------ */

typedef struct gather_job {
  int nd, dim;
  int64_t sz[TPU_MAX_DIMS], xs[TPU_MAX_DIMS];
  const char *x;
  char *out;
  const int64_t *ix;
  size_t es;
} gather_job;

static void gather_range(void *ctx, int64_t b, int64_t e) {
  gather_job *j = ctx;
  int64_t idx[TPU_MAX_DIMS], off = 0, L = b;
  for (int d = j->nd - 1; d >= 0; d--) {
    int64_t q = L / j->sz[d];
    idx[d] = L - q * j->sz[d];
    if (d != j->dim) off += idx[d] * j->xs[d];
    L = q;
  }
  int64_t es = (int64_t)j->es, xd = j->xs[j->dim];
  for (int64_t o = b; o < e; o++) {
    copy_elem(j->es, j->out + o * es, j->x + (off + j->ix[o] * xd) * es);
    for (int d = j->nd - 1; d >= 0; d--) {
      idx[d]++;
      if (d != j->dim) off += j->xs[d];
      if (idx[d] < j->sz[d]) break;
      if (d != j->dim) off -= j->sz[d] * j->xs[d];
      idx[d] = 0;
    }
  }
}

/* One row of single elements taken by index: b[k * db] = a[ix[k] * da]
 * for k < n, one typed load and store each (gather along the last dim,
 * index_select with no inner dims). */
#define TAKE_ROW(T)                                                                \
  do {                                                                             \
    const T *a_ = (const T *)a;                                                    \
    T *b_ = (T *)b;                                                                \
    for (int64_t k = 0; k < n; k++) b_[k * db] = a_[ix[k] * da];                   \
  } while (0)

static void take_row(size_t es, char *b, int64_t db, const char *a, int64_t da,
                     const int64_t *ix, int64_t n) {
  switch (es) {
  case 1: TAKE_ROW(uint8_t); break;
  case 2: TAKE_ROW(uint16_t); break;
  case 4: TAKE_ROW(uint32_t); break;
  case 8: TAKE_ROW(uint64_t); break;
  default:
    for (int64_t k = 0; k < n; k++)
      copy_elem(es, b + k * db * (int64_t)es, a + ix[k] * da * (int64_t)es);
  }
}

/* Gather along the last dim: a task per row (its offset found once). */
static void gather_rows(void *ctx, int64_t r0, int64_t r1) {
  gather_job *j = ctx;
  const int64_t w = j->sz[j->nd - 1], xd = j->xs[j->nd - 1], es = (int64_t)j->es;
  for (int64_t r = r0; r < r1; r++)
    take_row(j->es, j->out + r * w * es, 1, j->x + lin_off(j->nd - 1, j->sz, j->xs, r) * es, xd,
             j->ix + r * w, w);
}

int tpux__eval_gather(xctx *c, int t) {
  const tpuir_node *n = tpuir_get_node(c->g, t);
  const tpu_view *x = &c->vals[n->in[0]].v, *iv = &c->vals[n->in[1]].v;
  idx_list L;
  int rc = checked_indices(c->g, n, iv, &L);
  if (rc) return rc;
  const int64_t *ix = L.ix;
  int64_t ni = L.n;
  rc = tpux__alloc_value(c, t);
  if (rc || ni == 0) {
    tpux__free(L.own);
    return rc;
  }
  gather_job j;
  j.nd = n->ndim;
  j.dim = n->dim;
  j.es = tpu_dtype_size(x->dtype);
  j.x = (const char *)x->base + x->offset * (int64_t)j.es;
  j.out = tpux__value_data(c, t);
  j.ix = ix;
  for (int d = 0; d < n->ndim; d++) {
    j.sz[d] = n->sizes[d];
    j.xs[d] = x->strides[d];
  }
  if (n->ndim == 0) {
    copy_elem(j.es, j.out, j.x);
  } else if (j.dim == n->ndim - 1) {
    int64_t w = n->sizes[n->ndim - 1], rows = ni / w, grain = XK_GRAIN / w + 1;
    if (rows <= grain) gather_rows(&j, 0, rows);
    else tpurt_parallel_for(rows, grain, gather_rows, &j);
  } else if (ni <= XK_GRAIN) {
    gather_range(&j, 0, ni);
  } else {
    tpurt_parallel_for(ni, XK_GRAIN, gather_range, &j);
  }
  tpux__free(L.own);
  return TPU_OK;
}

/* ---- index_select / index_add ------------------------------------------- */

/* Shared layout: outer dims (< dim), the indexed dim, inner dims (> dim).
 * `a` is the array addressed through the index (x for select, out for
 * add), `b` the array addressed by position (out for select, src for add). */
typedef struct isel_job {
  int add, dt;
  size_t es;
  int no, ni;
  int64_t osz[TPU_MAX_DIMS], oa[TPU_MAX_DIMS], ob[TPU_MAX_DIMS];
  int64_t isz[TPU_MAX_DIMS], ia[TPU_MAX_DIMS], ib[TPU_MAX_DIMS];
  int64_t da, db;     /* strides of the indexed dim in a / b */
  int64_t nouter, ninner, nidx, blk, nblk;
  char *a, *b;        /* element 0 */
  const int64_t *ix;
  int inner_contig;   /* inner coalesced to one dim, stride 1 in a and b */
} isel_job;

static void isel_range(void *ctx, int64_t tb, int64_t te) {
  isel_job *j = ctx;
  int64_t es = (int64_t)j->es;
  for (int64_t task = tb; task < te; task++) {
    if (!j->add) {
      /* task = (outer o, position k): b[o, k, :] = a[o, ix[k], :] */
      int64_t o = task / j->nidx, k = task - o * j->nidx;
      int64_t offa = lin_off(j->no, j->osz, j->oa, o) + j->ix[k] * j->da;
      int64_t offb = lin_off(j->no, j->osz, j->ob, o) + k * j->db;
      if (j->inner_contig) {
        memcpy(j->b + offb * es, j->a + offa * es, (size_t)(j->ninner * es));
      } else {
        for (int64_t i = 0; i < j->ninner; i++)
          copy_elem(j->es, j->b + (offb + lin_off(j->ni, j->isz, j->ib, i)) * es,
                    j->a + (offa + lin_off(j->ni, j->isz, j->ia, i)) * es);
      }
    } else {
      /* task = (outer o, inner block): for k: a[o, ix[k], blk] += b[o, k, blk] */
      int64_t o = task / j->nblk, bl = task - o * j->nblk;
      int64_t i0 = bl * j->blk, i1 = i0 + j->blk;
      if (i1 > j->ninner) i1 = j->ninner;
      int64_t offa = lin_off(j->no, j->osz, j->oa, o);
      int64_t offb = lin_off(j->no, j->osz, j->ob, o);
      for (int64_t k = 0; k < j->nidx; k++) {
        int64_t pa = offa + j->ix[k] * j->da, pb = offb + k * j->db;
        if (j->inner_contig) {
          if (j->dt == TPU_F32) {
            float *d = (float *)j->a + pa;
            const float *s = (const float *)j->b + pb;
            for (int64_t i = i0; i < i1; i++) d[i] += s[i];
          } else {
            for (int64_t i = i0; i < i1; i++)
              add_elem(j->dt, j->a + (pa + i) * es, j->b + (pb + i) * es);
          }
        } else {
          for (int64_t i = i0; i < i1; i++)
            add_elem(j->dt, j->a + (pa + lin_off(j->ni, j->isz, j->ia, i)) * es,
                     j->b + (pb + lin_off(j->ni, j->isz, j->ib, i)) * es);
        }
      }
    }
  }
}

/* index_select of single elements (no inner dims: the last dim, as in
 * nearest-neighbour upsampling): a task per outer row, its offsets found
 * once. */
static void isel_rows(void *ctx, int64_t tb, int64_t te) {
  isel_job *j = ctx;
  const int64_t es = (int64_t)j->es;
  for (int64_t o = tb; o < te; o++)
    take_row(j->es, j->b + lin_off(j->no, j->osz, j->ob, o) * es, j->db,
             j->a + lin_off(j->no, j->osz, j->oa, o) * es, j->da, j->ix, j->nidx);
}

/* Fill the outer/inner layout of j from views a and b around dim. */
static void isel_layout(isel_job *j, const tpu_view *a, const tpu_view *b,
                        int dim) {
  j->es = tpu_dtype_size(a->dtype);
  j->dt = a->dtype;
  j->a = (char *)a->base + a->offset * (int64_t)j->es;
  j->b = (char *)b->base + b->offset * (int64_t)j->es;
  j->no = j->ni = 0;
  j->nouter = j->ninner = 1;
  for (int d = 0; d < a->ndim; d++) {
    if (d < dim) {
      j->osz[j->no] = a->sizes[d];
      j->oa[j->no] = a->strides[d];
      j->ob[j->no++] = b->strides[d];
      j->nouter *= a->sizes[d];
    } else if (d > dim) {
      j->isz[j->ni] = a->sizes[d];
      j->ia[j->ni] = a->strides[d];
      j->ib[j->ni++] = b->strides[d];
      j->ninner *= a->sizes[d];
    }
  }
  j->da = a->ndim ? a->strides[dim] : 0;
  j->db = b->ndim ? b->strides[dim] : 0;
  /* coalesce inner dims */
  int k = 0;
  for (int i = 0; i < j->ni; i++) {
    if (j->isz[i] == 1) continue;
    if (k > 0 && j->ia[k - 1] == j->ia[i] * j->isz[i] &&
        j->ib[k - 1] == j->ib[i] * j->isz[i]) {
      j->isz[k - 1] *= j->isz[i];
      j->ia[k - 1] = j->ia[i];
      j->ib[k - 1] = j->ib[i];
      continue;
    }
    j->isz[k] = j->isz[i];
    j->ia[k] = j->ia[i];
    j->ib[k++] = j->ib[i];
  }
  j->ni = k;
  j->inner_contig = k == 0 || (k == 1 && j->ia[0] == 1 && j->ib[0] == 1);
}

int tpux__eval_index_select(xctx *c, int t) {
  const tpuir_node *n = tpuir_get_node(c->g, t);
  const tpu_view *x = &c->vals[n->in[0]].v, *iv = &c->vals[n->in[1]].v;
  idx_list L;
  int rc = checked_indices(c->g, n, iv, &L);
  if (rc) return rc;
  const int64_t *ix = L.ix;
  int64_t ni = L.n;
  rc = tpux__alloc_value(c, t);
  if (rc) {
    tpux__free(L.own);
    return rc;
  }
  const tpu_view *out = &c->vals[t].v;
  isel_job j;
  memset(&j, 0, sizeof j);
  isel_layout(&j, x, out, n->dim);
  j.ix = ix;
  j.nidx = ni;
  int64_t ntask = j.nouter * ni;
  if (ntask > 0 && j.ninner == 1) {
    int64_t grain = XK_GRAIN / ni + 1;
    if (j.nouter <= grain) isel_rows(&j, 0, j.nouter);
    else tpurt_parallel_for(j.nouter, grain, isel_rows, &j);
  } else if (ntask > 0 && j.ninner > 0) {
    int64_t grain = XK_GRAIN / j.ninner;
    if (grain < 1) grain = 1;
    if (ntask <= grain) isel_range(&j, 0, ntask);
    else tpurt_parallel_for(ntask, grain, isel_range, &j);
  }
  tpux__free(L.own);
  return TPU_OK;
}

int tpux__eval_index_add(xctx *c, int t) {
  const tpuir_node *n = tpuir_get_node(c->g, t);
  const tpu_view *base = &c->vals[n->in[0]].v, *iv = &c->vals[n->in[1]].v,
                 *src = &c->vals[n->in[2]].v;
  idx_list L;
  int rc = checked_indices(c->g, n, iv, &L);
  if (rc) return rc;
  const int64_t *ix = L.ix;
  int64_t ni = L.n;
  rc = tpux__alloc_value(c, t);
  if (!rc) rc = tpux__copy_nocheck(&c->vals[t].v, base);
  if (rc) {
    tpux__free(L.own);
    return rc;
  }
  const tpu_view *out = &c->vals[t].v;
  isel_job j;
  memset(&j, 0, sizeof j);
  j.add = 1;
  isel_layout(&j, out, src, n->dim);
  j.ix = ix;
  j.nidx = ni;
  j.blk = 1024;
  j.nblk = (j.ninner + j.blk - 1) / j.blk;
  int64_t ntask = j.nouter * j.nblk;
  if (ntask > 0 && ni > 0) {
    int64_t per = (j.ninner < j.blk ? j.ninner : j.blk) * ni;
    int64_t grain = XK_GRAIN / (per > 0 ? per : 1);
    if (grain < 1) grain = 1;
    if (ntask <= grain) isel_range(&j, 0, ntask);
    else tpurt_parallel_for(ntask, grain, isel_range, &j);
  }
  tpux__free(L.own);
  return TPU_OK;
}

/* ---- scatter_add ---------------------------------------------------------- */

typedef struct scat_job {
  int nd, dim, dt;
  size_t es;
  int64_t isz[TPU_MAX_DIMS]; /* idx shape */
  int64_t os[TPU_MAX_DIMS], ss[TPU_MAX_DIMS];
  int64_t lsz[TPU_MAX_DIMS]; /* idx shape with dim removed (lines) */
  int64_t lo[TPU_MAX_DIMS], ls[TPU_MAX_DIMS], li[TPU_MAX_DIMS];
  int nl;
  char *out;
  const char *src;
  const int64_t *ix;
} scat_job;

static void scat_range(void *ctx, int64_t b, int64_t e) {
  scat_job *j = ctx;
  int64_t es = (int64_t)j->es, len = j->nd ? j->isz[j->dim] : 1;
  int64_t istride = 1; /* stride of dim in the contiguous index array */
  for (int d = j->dim + 1; d < j->nd; d++) istride *= j->isz[d];
  const int64_t ost = j->nd ? j->os[j->dim] : 0, sst = j->nd ? j->ss[j->dim] : 0;
  for (int64_t line = b; line < e; line++) {
    int64_t oo = lin_off(j->nl, j->lsz, j->lo, line);
    int64_t so = lin_off(j->nl, j->lsz, j->ls, line);
    int64_t io = lin_off(j->nl, j->lsz, j->li, line);
    for (int64_t k = 0; k < len; k++)
      add_elem(j->dt, j->out + (oo + j->ix[io + k * istride] * ost) * es,
               j->src + (so + k * sst) * es);
  }
}

int tpux__eval_scatter_add(xctx *c, int t) {
  const tpuir_node *n = tpuir_get_node(c->g, t);
  const tpu_view *base = &c->vals[n->in[0]].v, *iv = &c->vals[n->in[1]].v,
                 *src = &c->vals[n->in[2]].v;
  idx_list L;
  int rc = checked_indices(c->g, n, iv, &L);
  if (rc) return rc;
  const int64_t *ix = L.ix;
  int64_t ni = L.n;
  rc = tpux__alloc_value(c, t);
  if (!rc) rc = tpux__copy_nocheck(&c->vals[t].v, base);
  if (rc || ni == 0) {
    tpux__free(L.own);
    return rc;
  }
  const tpu_view *out = &c->vals[t].v;
  scat_job j;
  memset(&j, 0, sizeof j);
  j.nd = iv->ndim;
  j.dim = n->dim;
  j.dt = out->dtype;
  j.es = tpu_dtype_size(out->dtype);
  j.out = (char *)out->base + out->offset * (int64_t)j.es;
  j.src = (const char *)src->base + src->offset * (int64_t)j.es;
  j.ix = ix;
  int64_t lines = 1;
  for (int d = 0; d < iv->ndim; d++) {
    j.isz[d] = iv->sizes[d];
    j.os[d] = out->strides[d];
    j.ss[d] = src->strides[d];
  }
  {
    int64_t s = 1, cs[TPU_MAX_DIMS];
    for (int d = iv->ndim - 1; d >= 0; d--) {
      cs[d] = s;
      s *= iv->sizes[d];
    }
    for (int d = 0; d < iv->ndim; d++) {
      if (d == n->dim) continue;
      j.lsz[j.nl] = iv->sizes[d];
      j.lo[j.nl] = out->strides[d];
      j.ls[j.nl] = src->strides[d];
      j.li[j.nl++] = cs[d];
      lines *= iv->sizes[d];
    }
  }
  int64_t len = iv->ndim ? iv->sizes[n->dim] : 1;
  int64_t grain = XK_GRAIN / (len > 0 ? len : 1);
  if (grain < 1) grain = 1;
  if (lines <= grain) scat_range(&j, 0, lines);
  else tpurt_parallel_for(lines, grain, scat_range, &j);
  tpux__free(L.own);
  return TPU_OK;
}

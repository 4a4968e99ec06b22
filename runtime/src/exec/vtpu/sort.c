/* exec/vtpu/sort.c - vTPU executor of TPUIR_SORT (stable sort along a dim).
 *
 * Each 1-D slice ("row") along the sorted dim is loaded into a key array:
 * the element mapped to an unsigned integer whose order is the wanted
 * order (ints: sign bit flipped; floats: IEEE bits with negatives
 * inverted, -0.0 mapped to +0.0 and every NaN to the largest key;
 * descending: all key bits inverted, so NaN comes first). Keys are sorted
 * with their source positions by an LSD radix sort on the key bytes (one
 * pass per byte of the dtype; passes where every key shares the byte are
 * skipped), which is stable, so equal elements keep their order in both
 * directions. Short rows use insertion sort (also stable). When only a
 * short head of each slice is wanted (tpuir_sort_head, k * 16 <= n), a
 * max-heap of k (key, position) pairs selects it in O(n log k). The result is
 * the permutation (int64) or the values copied from the source positions
 * (so -0.0 and NaN payloads are kept). Rows run in parallel on the pool.
 */
#include <stdlib.h>

#include "exec/vtpu/internal.h"

#define SORT_SMALL 32
#define SORT_HEAD_RATIO 16 /* heap selection when head * 16 <= len */

typedef struct sort_job {
  const tpuir_node *n;
  const tpu_view *x;
  char *out;
  int dim, nouter, desc, want_idx, width;
  int64_t len;                      /* slice length */
  int64_t head;                     /* entries kept per slice (<= len) */
  int64_t osz[TPU_MAX_DIMS];        /* outer dims (all but dim) */
  int64_t oxs[TPU_MAX_DIMS];        /* their input strides */
  int64_t oos[TPU_MAX_DIMS];        /* their output strides */
  int64_t xstride, ostride;         /* along dim */
  size_t es;
  _Atomic int err;
} sort_job;

/* Order-preserving unsigned key of element p (dtype dt), before the
 * descending flip. */
static inline uint64_t sort_key(int dt, const char *p) {
  switch (dt) {
  case TPU_BOOL: return *(const uint8_t *)p != 0;
  case TPU_U8: return *(const uint8_t *)p;
  case TPU_I8: return (uint8_t)(*(const uint8_t *)p ^ 0x80u);
  case TPU_I16: { uint16_t u; memcpy(&u, p, 2); return (uint16_t)(u ^ 0x8000u); }
  case TPU_I32: { uint32_t u; memcpy(&u, p, 4); return u ^ 0x80000000u; }
  case TPU_I64: { uint64_t u; memcpy(&u, p, 8); return u ^ 0x8000000000000000ull; }
  case TPU_F16: case TPU_BF16: {
    uint16_t u;
    memcpy(&u, p, 2);
    uint16_t inf = dt == TPU_F16 ? 0x7c00u : 0x7f80u;
    if ((u & 0x7fffu) > inf) return 0xffffu;
    if (u == 0x8000u) u = 0;
    return (u & 0x8000u) ? (uint16_t)~u : (uint16_t)(u | 0x8000u);
  }
  case TPU_F32: {
    uint32_t u;
    memcpy(&u, p, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0xffffffffu;
    if (u == 0x80000000u) u = 0;
    return (u & 0x80000000u) ? (uint32_t)~u : (u | 0x80000000u);
  }
  default: {
    uint64_t u;
    memcpy(&u, p, 8);
    if ((u & 0x7fffffffffffffffull) > 0x7ff0000000000000ull) return ~0ull;
    if (u == 0x8000000000000000ull) u = 0;
    return (u & 0x8000000000000000ull) ? ~u : (u | 0x8000000000000000ull);
  }
  }
}

/* Stable insertion sort of (k, ix) by k. */
static void sort_insertion(uint64_t *k, uint32_t *ix, int64_t n) {
  for (int64_t i = 1; i < n; i++) {
    uint64_t kv = k[i];
    uint32_t iv = ix[i];
    int64_t j = i - 1;
    while (j >= 0 && k[j] > kv) {
      k[j + 1] = k[j];
      ix[j + 1] = ix[j];
      j--;
    }
    k[j + 1] = kv;
    ix[j + 1] = iv;
  }
}

/* Stable LSD radix sort of (k, ix) on the low `width` bytes of k; k2/ix2
 * are scratch of n entries. Returns the arrays holding the result. */
static void sort_radix(uint64_t **k, uint32_t **ix, uint64_t **k2, uint32_t **ix2,
                       int64_t n, int width) {
  int64_t hist[8][256];
  memset(hist, 0, sizeof(int64_t) * 256 * (size_t)width);
  const uint64_t *kk = *k;
  for (int64_t i = 0; i < n; i++) {
    uint64_t v = kk[i];
    for (int p = 0; p < width; p++) hist[p][(v >> (8 * p)) & 0xff]++;
  }
  for (int p = 0; p < width; p++) {
    int64_t *h = hist[p];
    int trivial = 0;
    for (int d = 0; d < 256; d++)
      if (h[d] == n) trivial = 1;
    if (trivial) continue;
    int64_t s = 0;
    for (int d = 0; d < 256; d++) {
      int64_t c = h[d];
      h[d] = s;
      s += c;
    }
    const uint64_t *ks = *k;
    const uint32_t *is = *ix;
    uint64_t *kd = *k2;
    uint32_t *id = *ix2;
    int sh = 8 * p;
    for (int64_t i = 0; i < n; i++) {
      int64_t o = h[(ks[i] >> sh) & 0xff]++;
      kd[o] = ks[i];
      id[o] = is[i];
    }
    uint64_t *tk = *k; *k = *k2; *k2 = tk;
    uint32_t *ti = *ix; *ix = *ix2; *ix2 = ti;
  }
}

/* (key, index) pairs ordered lexicographically: a stable order */
static inline int pair_lt(uint64_t ka, uint32_t ia, uint64_t kb, uint32_t ib) {
  return ka < kb || (ka == kb && ia < ib);
}

static void heap_down(uint64_t *k, uint32_t *ix, int64_t n, int64_t i) {
  for (;;) {
    int64_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < n && pair_lt(k[m], ix[m], k[l], ix[l])) m = l;
    if (r < n && pair_lt(k[m], ix[m], k[r], ix[r])) m = r;
    if (m == i) return;
    uint64_t tk = k[i]; k[i] = k[m]; k[m] = tk;
    uint32_t ti = ix[i]; ix[i] = ix[m]; ix[m] = ti;
    i = m;
  }
}

/* The `lim` smallest (key, position) pairs of the n keys in src, in order,
 * into (k, ix): a max-heap of size lim (an element enters only if its key
 * is below the heap's top, which is exact since positions grow), then a
 * heap sort of what is left. */
static void sort_head(const uint64_t *src, int64_t n, int64_t lim, uint64_t *k, uint32_t *ix) {
  int64_t h = 0;
  for (int64_t i = 0; i < n; i++) {
    uint64_t key = src[i];
    if (h < lim) { /* sift up */
      int64_t c = h++;
      while (c > 0) {
        int64_t p = (c - 1) / 2;
        if (!pair_lt(k[p], ix[p], key, (uint32_t)i)) break;
        k[c] = k[p];
        ix[c] = ix[p];
        c = p;
      }
      k[c] = key;
      ix[c] = (uint32_t)i;
    } else if (key < k[0]) {
      k[0] = key;
      ix[0] = (uint32_t)i;
      heap_down(k, ix, h, 0);
    }
  }
  for (int64_t e = h - 1; e > 0; e--) {
    uint64_t tk = k[0]; k[0] = k[e]; k[e] = tk;
    uint32_t ti = ix[0]; ix[0] = ix[e]; ix[e] = ti;
    heap_down(k, ix, e, 0);
  }
}

static inline void copy_elem(size_t es, char *d, const char *s) {
  switch (es) {
  case 1: *d = *s; break;
  case 2: memcpy(d, s, 2); break;
  case 4: memcpy(d, s, 4); break;
  default: memcpy(d, s, 8); break;
  }
}

static void sort_rows(void *ctx, int64_t rb, int64_t re) {
  sort_job *j = ctx;
  int64_t n = j->len;
  size_t es = j->es;
  uint64_t *k = malloc((size_t)n * 2 * sizeof(uint64_t));
  uint32_t *ix = malloc((size_t)n * 2 * sizeof(uint32_t));
  if (!k || !ix) {
    free(k);
    free(ix);
    atomic_store(&j->err, TPU_E_OOM);
    return;
  }
  uint64_t mask = j->width == 8 ? ~0ull : (((uint64_t)1 << (8 * j->width)) - 1);
  uint64_t flip = j->desc ? mask : 0;
  const char *xb = (const char *)j->x->base + j->x->offset * (int64_t)es;
  int dt = j->x->dtype;
  for (int64_t r = rb; r < re; r++) {
    int64_t L = r, xo = 0, oo = 0;
    for (int d = j->nouter - 1; d >= 0; d--) {
      int64_t q = L / j->osz[d];
      int64_t i = L - q * j->osz[d];
      xo += i * j->oxs[d];
      oo += i * j->oos[d];
      L = q;
    }
    const char *xr = xb + xo * (int64_t)es;
    uint64_t *kk = k, *k2 = k + n;
    uint32_t *ii = ix, *i2 = ix + n;
    for (int64_t i = 0; i < n; i++) {
      kk[i] = sort_key(dt, xr + i * j->xstride * (int64_t)es) ^ flip;
      ii[i] = (uint32_t)i;
    }
    int64_t lim = j->head;
    if (lim * SORT_HEAD_RATIO <= n) {
      sort_head(kk, n, lim, k2, i2);
      kk = k2;
      ii = i2;
    } else if (n <= SORT_SMALL) {
      sort_insertion(kk, ii, n);
    } else {
      sort_radix(&kk, &ii, &k2, &i2, n, j->width);
    }
    if (j->want_idx) {
      int64_t *o = (int64_t *)j->out + oo;
      for (int64_t i = 0; i < lim; i++) o[i * j->ostride] = ii[i];
    } else {
      char *o = j->out + oo * (int64_t)es;
      for (int64_t i = 0; i < lim; i++)
        copy_elem(es, o + i * j->ostride * (int64_t)es,
                  xr + (int64_t)ii[i] * j->xstride * (int64_t)es);
    }
  }
  free(k);
  free(ix);
}

int tpux__eval_sort(xctx *c, int t) {
  const tpuir_node *n = tpuir_get_node(c->g, t);
  const tpu_view *x = &c->vals[n->in[0]].v;
  int rc = tpux__alloc_value(c, t);
  if (rc) return rc;
  tpu_view *ov = &c->vals[t].v;
  int64_t numel = tpu_view_numel(x);
  if (numel == 0 || tpu_view_numel(ov) == 0) return TPU_OK;
  sort_job j;
  memset(&j, 0, sizeof j);
  j.n = n;
  j.x = x;
  j.out = (char *)ov->base + ov->offset * (int64_t)tpu_dtype_size(ov->dtype);
  j.dim = n->dim;
  j.desc = (int)n->a[0];
  j.want_idx = n->kind == TPUIR_SORT_INDICES;
  j.es = tpu_dtype_size(x->dtype);
  j.width = (int)j.es;
  if (x->ndim == 0) {
    j.len = 1;
    j.head = 1;
  } else {
    j.head = n->sizes[n->dim];
    j.len = x->sizes[n->dim];
    j.xstride = x->strides[n->dim];
    j.ostride = ov->strides[n->dim];
    for (int d = 0; d < x->ndim; d++) {
      if (d == n->dim) continue;
      j.osz[j.nouter] = x->sizes[d];
      j.oxs[j.nouter] = x->strides[d];
      j.oos[j.nouter] = ov->strides[d];
      j.nouter++;
    }
  }
  if (j.len > (int64_t)UINT32_MAX)
    return tpu_error(TPU_E_UNSUPPORTED, "sort: a dim of %lld elements is too long",
                     (long long)j.len);
  int64_t rows = numel / j.len;
  int64_t grain = XK_GRAIN / (j.len > 0 ? j.len : 1);
  tpurt_parallel_for(rows, grain > 0 ? grain : 1, sort_rows, &j);
  if (atomic_load(&j.err))
    return tpu_error(TPU_E_OOM, "vTPU executor: out of host memory (sort)");
  return TPU_OK;
}

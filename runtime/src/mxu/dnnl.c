/* mxu/dnnl.c - the vTPU matrix unit's multiply engine: oneDNN's matmul
 * primitive (C API, oneDNN 3.x: PyPI's OpenMP build onednn-cpu-gomp), which
 * dispatches AMX on Intel, AVX512-BF16 on Zen 4 and AVX2 elsewhere.
 *
 * One CPU engine for the process. Primitives are cached by problem (types,
 * sizes, strides, accumulate) so eager dispatch does not re-create them:
 * creating one costs tens of microseconds, a cache hit a mutex and a
 * compare. Entries are reference-counted while executing, so eviction (when
 * the cache is full) never destroys a primitive in use. Scratchpads are
 * "user" mode, from the workspace cache below, so concurrent callers never
 * share one.
 *
 * Small problems (m*n*k up to TPUMXU_SMALL_MACS) skip the shape-specialised
 * kernels: one primitive per type combination with run-time sizes and
 * strides (oneDNN's JIT GEMM, created once) runs them on the calling thread
 * (OpenMP team of one), batch items in a loop. JIT-compiling a kernel per
 * shape costs milliseconds, and waking a thread team for a few
 * microseconds of work costs more than it saves; both dominated eager runs
 * of many small distinct matmuls. A batch of small items with at least
 * TPUMXU_SMALL_POOL_MACS multiply-adds in all (attention's per-head products)
 * shares its items out to the pool's threads, each computed as on the
 * calling thread (64 x 128x32x128 bf16: 1.7-1.8x).
 *
 * Bigger problems run on the runtime's kernel pool, not on an OpenMP
 * team: the problem is cut into parts, a multiple of the pool's default
 * thread count (tpurt_default_num_threads) of them where possible (groups
 * of whole batch items, else blocks of rows of C of one item), and each
 * part runs as a single-thread primitive (created and executed with an
 * OpenMP team of one) on a pool thread. Parts keep the parent's dense
 * layout, so oneDNN picks the same kernel, and K is never cut by us. On
 * AVX-512 (bf16) kernels every element of C is then computed exactly as by
 * one thread without the cut (the team matches it bit for bit except
 * where it cuts K itself, for a small C with a long K). oneDNN 2.6's AMX
 * kernels blocked K by a part's row count (K >= ~1000), so there the cut
 * changed the rounding; 3.2's do not (1- and 2-part cuts of five DEFAULT
 * and HIGHEST shapes up to K = 8192 agree bit for bit). The cut follows the
 * default thread count, not the current one, so results never change with
 * tpurt_set_num_threads, whatever the kernel. On a few cores
 * an OpenMP team that spins after every GEMM starves the pool's
 * elementwise work and the pool's spinning starves the team; with one set
 * of threads neither waits for the other. Fewer items than threads with fewer than
 * POOL_MIN_ROWS rows per thread (no dense cut: a block of columns gets a
 * slower kernel) run on the calling thread up to TEAM_MIN_MACS
 * multiply-adds and on the team above, as does everything with
 * TORCH_TPU_MXU_POOL=0. */
#include <oneapi/dnnl/dnnl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mxu/internal.h"
#include "tpu_rt.h"

/* OpenMP (oneDNN's threading runtime here): per-thread team size */
int omp_get_max_threads(void);
void omp_set_num_threads(int n);

/* ---- workspace cache --------------------------------------------------- */

/* Packed operands, temporaries and scratchpads are large, short-lived
 * buffers; fresh pages cost a fault and a clear per 4 KB, so a few freed
 * buffers (at most WS_MAX_BYTES together) are kept for the next call. */
#define WS_SLOTS 8
#define WS_MAX_BYTES ((size_t)256 << 20)
static pthread_mutex_t g_ws_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
  void *p;
  size_t n;
} g_ws[WS_SLOTS];
static size_t g_ws_total;

/* A 64-byte-aligned buffer of at least n bytes (*cap: its size), or NULL. */
void *tpumxu__ws_get(size_t n, size_t *cap) {
  void *p = NULL;
  pthread_mutex_lock(&g_ws_mu);
  int best = -1;
  for (int i = 0; i < WS_SLOTS; i++)
    if (g_ws[i].p && g_ws[i].n >= n && (best < 0 || g_ws[i].n < g_ws[best].n)) best = i;
  if (best >= 0) {
    p = g_ws[best].p;
    *cap = g_ws[best].n;
    g_ws_total -= *cap;
    g_ws[best].p = NULL;
  }
  pthread_mutex_unlock(&g_ws_mu);
  if (!p) {
    *cap = (n + 4095) & ~(size_t)4095;
    if (*cap == 0) *cap = 4096;
    p = aligned_alloc(64, *cap);
  }
  return p;
}

/* Give back a buffer from tpumxu__ws_get: kept (evicting smaller ones) or
 * freed. */
void tpumxu__ws_put(void *p, size_t cap) {
  if (!p) return;
  pthread_mutex_lock(&g_ws_mu);
  for (;;) {
    int empty = -1, small = -1;
    for (int i = 0; i < WS_SLOTS; i++) {
      if (!g_ws[i].p) empty = i;
      else if (small < 0 || g_ws[i].n < g_ws[small].n) small = i;
    }
    if (empty >= 0 && g_ws_total + cap <= WS_MAX_BYTES) {
      g_ws[empty].p = p;
      g_ws[empty].n = cap;
      g_ws_total += cap;
      p = NULL;
      break;
    }
    if (small < 0 || g_ws[small].n >= cap || cap > WS_MAX_BYTES) break;
    free(g_ws[small].p); /* evict a smaller buffer */
    g_ws_total -= g_ws[small].n;
    g_ws[small].p = NULL;
  }
  pthread_mutex_unlock(&g_ws_mu);
  free(p);
}

/* ---- engine ------------------------------------------------------------ */

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static dnnl_engine_t g_eng;
static int g_bf16_native;

static int impl_of(int sdt, int ddt, int64_t m, int64_t n, int64_t k,
                   char *buf, size_t cap);

static void engine_init(void) {
  if (dnnl_engine_create(&g_eng, dnnl_cpu, 0) != dnnl_success) {
    g_eng = NULL;
    return;
  }
  /* bf16 operands are native unless oneDNN would use its reference
   * (scalar) kernel for them (CPUs without AVX-512) */
  char impl[128];
  g_bf16_native = impl_of(TPUMXU_DT_BF16, TPUMXU_DT_F32, 256, 256, 256, impl,
                          sizeof impl) == TPU_OK &&
                  strncmp(impl, "ref", 3) != 0;
}

static int engine(void) {
  pthread_once(&g_once, engine_init);
  return g_eng ? TPU_OK
               : tpu_error(TPU_E_INTERNAL, "tpumxu: cannot create the oneDNN CPU engine");
}

void *tpumxu__dnnl_engine(void) { return engine() == TPU_OK ? (void *)g_eng : NULL; }

int tpumxu__dnnl_bf16_native(void) {
  return engine() == TPU_OK && g_bf16_native;
}

static dnnl_data_type_t ddt_of(int dt) { return dt == TPUMXU_DT_BF16 ? dnnl_bf16 : dnnl_f32; }

/* x's pointer moved by elems elements */
static void *at_elem(const tpumxu__mat *x, int64_t elems) {
  return (char *)x->ptr + elems * (x->dt == TPUMXU_DT_BF16 ? 2 : 4);
}

/* ---- primitive cache --------------------------------------------------- */

typedef struct key {
  int sdt, wdt, ddt, acc; /* TPUMXU_DT_*; acc: sum post-op */
  int one; /* created for a team of one (a part on the pool) */
  int64_t bs, bw, bd, m, n, k;
  int64_t ss[3], ws[3], ds[3];
} key;

typedef struct entry {
  key k;
  dnnl_primitive_t prim;
  const_dnnl_memory_desc_t smd, wmd, dmd, spd; /* owned by prim */
  size_t scratch;
  int refs, used;
} entry;

#define CACHE_N 128
static pthread_mutex_t g_cache_mu = PTHREAD_MUTEX_INITIALIZER;
static entry g_cache[CACHE_N];
static int g_cache_next; /* round-robin eviction start */

/* Memory descriptor of a batched matrix (dims b x r x c); caller
 * destroys it. */
static dnnl_status_t md_init(dnnl_memory_desc_t *md, int dt, int64_t b,
                             int64_t r, int64_t c, const int64_t st[3]) {
  dnnl_dims_t dims = {b, r, c}, strides = {st[0], st[1], st[2]};
  return dnnl_memory_desc_create_with_strides(md, 3, dims, ddt_of(dt), strides);
}

static void md_free(dnnl_memory_desc_t *mds, int n) {
  for (int i = 0; i < n; i++)
    if (mds[i]) dnnl_memory_desc_destroy(mds[i]);
}

/* Matmul primitive descriptor (scratchpad "user" with user_scratch; sum
 * post-op with acc); caller destroys it. */
static dnnl_status_t matmul_pd(dnnl_primitive_desc_t *pd, const_dnnl_memory_desc_t smd,
                               const_dnnl_memory_desc_t wmd, const_dnnl_memory_desc_t dmd,
                               int acc, int user_scratch) {
  dnnl_primitive_attr_t attr = NULL;
  dnnl_post_ops_t po = NULL;
  dnnl_status_t s;
  *pd = NULL;
  if (!(s = dnnl_primitive_attr_create(&attr)) &&
      (!user_scratch || !(s = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user))) &&
      (!acc || (!(s = dnnl_post_ops_create(&po)) &&
                !(s = dnnl_post_ops_append_sum(po, 1.0f, 0, dnnl_data_type_undef)) &&
                !(s = dnnl_primitive_attr_set_post_ops(attr, po)))))
    s = dnnl_matmul_primitive_desc_create(pd, g_eng, smd, wmd, NULL, dmd, attr);
  if (po) dnnl_post_ops_destroy(po);
  if (attr) dnnl_primitive_attr_destroy(attr);
  return s;
}

static const char *status_name(dnnl_status_t s) {
  switch (s) {
  case dnnl_out_of_memory: return "out of memory";
  case dnnl_invalid_arguments: return "invalid arguments";
  case dnnl_unimplemented: return "unimplemented";
  default: return "failure";
  }
}

/* Create the primitive of a key into e (not yet in the cache). */
static int create(const key *k, entry *e) {
  dnnl_memory_desc_t md[3] = {NULL, NULL, NULL};
  dnnl_primitive_desc_t pd = NULL;
  dnnl_status_t s;
  if ((s = md_init(&md[0], k->sdt, k->bs, k->m, k->k, k->ss)) ||
      (s = md_init(&md[1], k->wdt, k->bw, k->k, k->n, k->ws)) ||
      (s = md_init(&md[2], k->ddt, k->bd, k->m, k->n, k->ds)) ||
      (s = matmul_pd(&pd, md[0], md[1], md[2], k->acc, 1)))
    goto done;
  if ((s = dnnl_primitive_create(&e->prim, pd))) goto done;
  const_dnnl_primitive_desc_t ppd = NULL;
  dnnl_primitive_get_primitive_desc(e->prim, &ppd);
  e->smd = dnnl_primitive_desc_query_md(ppd, dnnl_query_src_md, 0);
  e->wmd = dnnl_primitive_desc_query_md(ppd, dnnl_query_weights_md, 0);
  e->dmd = dnnl_primitive_desc_query_md(ppd, dnnl_query_dst_md, 0);
  e->spd = dnnl_primitive_desc_query_md(ppd, dnnl_query_scratchpad_md, 0);
  e->scratch = e->spd ? dnnl_memory_desc_get_size(e->spd) : 0;
done:
  if (pd) dnnl_primitive_desc_destroy(pd);
  md_free(md, 3);
  if (s == dnnl_out_of_memory)
    return tpu_error(TPU_E_OOM, "tpumxu: oneDNN out of memory creating a matmul");
  if (s)
    return tpu_error(TPU_E_INTERNAL,
                     "tpumxu: oneDNN matmul (m=%lld n=%lld k=%lld batch=%lld) "
                     "not created: %s",
                     (long long)k->m, (long long)k->n, (long long)k->k,
                     (long long)k->bd, status_name(s));
  return TPU_OK;
}

/* The cached entry for k (refs taken), creating it when missing. */
static int acquire(const key *k, entry **out) {
  pthread_mutex_lock(&g_cache_mu);
  for (int i = 0; i < CACHE_N; i++)
    if (g_cache[i].prim && !memcmp(&g_cache[i].k, k, sizeof *k)) {
      g_cache[i].refs++;
      g_cache[i].used = 1;
      *out = &g_cache[i];
      pthread_mutex_unlock(&g_cache_mu);
      return TPU_OK;
    }
  pthread_mutex_unlock(&g_cache_mu);
  entry fresh;
  memset(&fresh, 0, sizeof fresh);
  fresh.k = *k;
  int rc = create(k, &fresh);
  if (rc) return rc;
  pthread_mutex_lock(&g_cache_mu);
  /* another thread may have created the same primitive meanwhile */
  for (int i = 0; i < CACHE_N; i++)
    if (g_cache[i].prim && !memcmp(&g_cache[i].k, k, sizeof *k)) {
      g_cache[i].refs++;
      *out = &g_cache[i];
      pthread_mutex_unlock(&g_cache_mu);
      dnnl_primitive_destroy(fresh.prim);
      return TPU_OK;
    }
  /* a free slot, else the next unused-since-last-sweep idle one (clock) */
  int slot = -1;
  for (int i = 0; i < CACHE_N && slot < 0; i++)
    if (!g_cache[i].prim) slot = i;
  for (int pass = 0; pass < 2 * CACHE_N && slot < 0; pass++) {
    entry *e = &g_cache[g_cache_next];
    g_cache_next = (g_cache_next + 1) % CACHE_N;
    if (e->refs) continue;
    if (e->used) e->used = 0;
    else slot = (int)(e - g_cache);
  }
  if (slot < 0) { /* every entry busy: run uncached */
    pthread_mutex_unlock(&g_cache_mu);
    entry *e = malloc(sizeof *e);
    if (!e) {
      dnnl_primitive_destroy(fresh.prim);
      return tpu_error(TPU_E_OOM, "tpumxu: out of host memory");
    }
    *e = fresh;
    e->refs = -1; /* marks an uncached entry */
    *out = e;
    return TPU_OK;
  }
  if (g_cache[slot].prim) dnnl_primitive_destroy(g_cache[slot].prim);
  g_cache[slot] = fresh;
  g_cache[slot].refs = 1;
  g_cache[slot].used = 1;
  *out = &g_cache[slot];
  pthread_mutex_unlock(&g_cache_mu);
  return TPU_OK;
}

static void release(entry *e) {
  if (e->refs < 0) {
    dnnl_primitive_destroy(e->prim);
    free(e);
    return;
  }
  pthread_mutex_lock(&g_cache_mu);
  e->refs--;
  pthread_mutex_unlock(&g_cache_mu);
}

/* ---- small problems: run-time sizes ------------------------------------ */

static pthread_mutex_t g_rt_mu = PTHREAD_MUTEX_INITIALIZER;
static dnnl_primitive_t g_rt[2][2][2][2]; /* [sdt][wdt][ddt][acc] */

static int rt_prim(int sdt, int wdt, int ddt, int acc, dnnl_primitive_t *out) {
  pthread_mutex_lock(&g_rt_mu);
  dnnl_primitive_t *slot = &g_rt[sdt][wdt][ddt][acc];
  dnnl_status_t s = dnnl_success;
  if (!*slot) {
    dnnl_dims_t d = {DNNL_RUNTIME_DIM_VAL, DNNL_RUNTIME_DIM_VAL};
    dnnl_dims_t st = {DNNL_RUNTIME_DIM_VAL, 1}; /* row-major (else ref:any) */
    dnnl_memory_desc_t md[3] = {NULL, NULL, NULL};
    dnnl_primitive_desc_t pd = NULL;
    if (!(s = dnnl_memory_desc_create_with_strides(&md[0], 2, d, ddt_of(sdt), st)) &&
        !(s = dnnl_memory_desc_create_with_strides(&md[1], 2, d, ddt_of(wdt), st)) &&
        !(s = dnnl_memory_desc_create_with_strides(&md[2], 2, d, ddt_of(ddt), st)) &&
        !(s = matmul_pd(&pd, md[0], md[1], md[2], acc, 0)))
      s = dnnl_primitive_create(slot, pd);
    if (pd) dnnl_primitive_desc_destroy(pd);
    md_free(md, 3);
  }
  *out = *slot;
  pthread_mutex_unlock(&g_rt_mu);
  if (s)
    return tpu_error(TPU_E_INTERNAL, "tpumxu: oneDNN run-time-size matmul not created: %s",
                     status_name(s));
  return TPU_OK;
}

/* A small problem with row-major operands (unit column strides) on the
 * calling thread, one batch item at a time. */
static int small_matmul(int64_t batch, int64_t m, int64_t n, int64_t k,
                        const tpumxu__mat *src, const tpumxu__mat *wei,
                        const tpumxu__mat *dst, int accumulate) {
  dnnl_primitive_t prim;
  int rc = rt_prim(src->dt, wei->dt, dst->dt, accumulate, &prim);
  if (rc) return rc;
  dnnl_memory_desc_t md[3] = {NULL, NULL, NULL};
  dnnl_dims_t ds = {m, k}, ss = {src->s0, src->s1};
  dnnl_dims_t dw = {k, n}, sw = {wei->s0, wei->s1};
  dnnl_dims_t dd = {m, n}, sd = {dst->s0, dst->s1};
  dnnl_stream_t st = NULL;
  dnnl_status_t s;
  int nthr = omp_get_max_threads();
  omp_set_num_threads(1);
  if (!(s = dnnl_memory_desc_create_with_strides(&md[0], 2, ds, ddt_of(src->dt), ss)) &&
      !(s = dnnl_memory_desc_create_with_strides(&md[1], 2, dw, ddt_of(wei->dt), sw)) &&
      !(s = dnnl_memory_desc_create_with_strides(&md[2], 2, dd, ddt_of(dst->dt), sd)) &&
      !(s = dnnl_stream_create(&st, g_eng, dnnl_stream_default_flags))) {
    for (int64_t b = 0; b < batch && !s; b++) {
      dnnl_memory_t ms = NULL, mw = NULL, mo = NULL;
      if (!(s = dnnl_memory_create(&ms, md[0], g_eng, at_elem(src, b * src->sb))) &&
          !(s = dnnl_memory_create(&mw, md[1], g_eng, at_elem(wei, b * wei->sb))) &&
          !(s = dnnl_memory_create(&mo, md[2], g_eng, at_elem(dst, b * dst->sb)))) {
        dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, ms}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_DST, mo}};
        if (!(s = dnnl_primitive_execute(prim, st, 3, args))) s = dnnl_stream_wait(st);
      }
      if (mo) dnnl_memory_destroy(mo);
      if (mw) dnnl_memory_destroy(mw);
      if (ms) dnnl_memory_destroy(ms);
    }
  }
  if (st) dnnl_stream_destroy(st);
  md_free(md, 3);
  omp_set_num_threads(nthr);
  if (s)
    return tpu_error(s == dnnl_out_of_memory ? TPU_E_OOM : TPU_E_INTERNAL,
                     "tpumxu: oneDNN matmul (m=%lld n=%lld k=%lld) failed: %s",
                     (long long)m, (long long)n, (long long)k, status_name(s));
  return TPU_OK;
}

/* ---- matmul ------------------------------------------------------------ */

/* Strides of a matrix as oneDNN sees it: a single (broadcast) batch item
 * gets a dense batch stride. */
static void strides_of(const tpumxu__mat *x, int64_t nb, int64_t r, int64_t c,
                       int64_t st[3]) {
  st[0] = x->sb;
  st[1] = x->s0;
  st[2] = x->s1;
  if (nb == 1) {
    int64_t a = x->s0 * r, b = x->s1 * c;
    st[0] = a > b ? a : b;
    if (st[0] == 0) st[0] = 1;
  }
}

/* A problem on the cached shape-specialised primitive, on the OpenMP team
 * of the calling thread (one: a team of one, whatever that thread's
 * setting; the primitive is created and run so). */
static int cached_matmul(int64_t batch, int64_t m, int64_t n, int64_t k,
                         const tpumxu__mat *src, const tpumxu__mat *wei,
                         const tpumxu__mat *dst, int accumulate, int one) {
  int rc = TPU_OK;
  int nthr = one ? omp_get_max_threads() : 0;
  if (one) omp_set_num_threads(1);
  key kk;
  memset(&kk, 0, sizeof kk);
  kk.one = one;
  kk.sdt = src->dt;
  kk.wdt = wei->dt;
  kk.ddt = dst->dt;
  kk.acc = accumulate;
  kk.bs = batch > 1 && src->sb == 0 ? 1 : batch;
  kk.bw = batch > 1 && wei->sb == 0 ? 1 : batch;
  kk.bd = batch;
  kk.m = m;
  kk.n = n;
  kk.k = k;
  strides_of(src, kk.bs, m, k, kk.ss);
  strides_of(wei, kk.bw, k, n, kk.ws);
  strides_of(dst, kk.bd, m, n, kk.ds);
  entry *e = NULL;
  if ((rc = acquire(&kk, &e))) {
    if (one) omp_set_num_threads(nthr);
    return rc;
  }
  size_t scap = 0;
  void *scratch = e->scratch ? tpumxu__ws_get(e->scratch, &scap) : NULL;
  dnnl_memory_t ms = NULL, mw = NULL, md = NULL, mp = NULL;
  dnnl_stream_t st = NULL;
  dnnl_status_t s = dnnl_success;
  if (e->scratch && !scratch) {
    rc = tpu_error(TPU_E_OOM, "tpumxu: out of host memory (scratchpad)");
    goto done;
  }
  if ((s = dnnl_memory_create(&ms, e->smd, g_eng, src->ptr)) ||
      (s = dnnl_memory_create(&mw, e->wmd, g_eng, wei->ptr)) ||
      (s = dnnl_memory_create(&md, e->dmd, g_eng, dst->ptr)))
    goto done;
  dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, ms}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_DST, md}};
  int nargs = 3;
  if (e->scratch) {
    if ((s = dnnl_memory_create(&mp, e->spd, g_eng, scratch))) goto done;
    args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, mp};
  }
  if ((s = dnnl_stream_create(&st, g_eng, dnnl_stream_default_flags)) ||
      (s = dnnl_primitive_execute(e->prim, st, nargs, args)) ||
      (s = dnnl_stream_wait(st)))
    goto done;
done:
  if (st) dnnl_stream_destroy(st);
  if (mp) dnnl_memory_destroy(mp);
  if (md) dnnl_memory_destroy(md);
  if (mw) dnnl_memory_destroy(mw);
  if (ms) dnnl_memory_destroy(ms);
  tpumxu__ws_put(scratch, scap);
  release(e);
  if (one) omp_set_num_threads(nthr);
  if (!rc && s)
    rc = tpu_error(s == dnnl_out_of_memory ? TPU_E_OOM : TPU_E_INTERNAL,
                   "tpumxu: oneDNN matmul (m=%lld n=%lld k=%lld) failed: %s",
                   (long long)m, (long long)n, (long long)k, status_name(s));
  return rc;
}

/* ---- big problems on the kernel pool ------------------------------------ */

/* Parts of a problem. CUT_BATCH: part q is batch items [q*step,
 * (q+1)*step). CUT_ROWS: part q is rows [r*step, (r+1)*step) of batch
 * item q / mparts (r = q % mparts), a one-item problem. Every part keeps
 * the parent's dense layout (oneDNN's brgemm kernels want dense operands;
 * a column block of C, or rows of several items at once, would get its
 * slower generic gemm, with another summation order). */
enum { CUT_BATCH, CUT_ROWS };

typedef struct part_job {
  int64_t batch, m, n, k, step, mparts;
  tpumxu__mat src, wei, dst;
  int acc, dim, small; /* small: items by small_matmul */
  int rc;            /* first failure (under mu) */
  char msg[256];     /* its message (set on the thread that failed) */
  pthread_mutex_t mu;
} part_job;

static void part_fn(void *ctx, int64_t q0, int64_t q1) {
  part_job *J = ctx;
  for (int64_t q = q0; q < q1; q++) {
    int64_t b0, nb, i0 = 0, m = J->m;
    if (J->dim == CUT_BATCH) {
      b0 = q * J->step;
      nb = J->batch - b0 < J->step ? J->batch - b0 : J->step;
    } else {
      b0 = q / J->mparts, nb = 1;
      i0 = (q % J->mparts) * J->step;
      m = J->m - i0 < J->step ? J->m - i0 : J->step;
    }
    if (nb <= 0 || m <= 0) continue;
    /* a broadcast operand (sb 0) stays put */
    tpumxu__mat s = J->src, w = J->wei, d = J->dst;
    s.ptr = at_elem(&J->src, b0 * J->src.sb + i0 * J->src.s0);
    w.ptr = at_elem(&J->wei, b0 * J->wei.sb);
    d.ptr = at_elem(&J->dst, b0 * J->dst.sb + i0 * J->dst.s0);
    int rc = J->small ? small_matmul(nb, m, J->n, J->k, &s, &w, &d, J->acc)
                      : cached_matmul(nb, m, J->n, J->k, &s, &w, &d, J->acc, 1);
    if (rc) {
      pthread_mutex_lock(&J->mu);
      if (!J->rc) {
        J->rc = rc;
        snprintf(J->msg, sizeof J->msg, "%s", tpu_last_error());
      }
      pthread_mutex_unlock(&J->mu);
    }
  }
}

static int g_use_pool = -1; /* TORCH_TPU_MXU_POOL (default 1) */

static int use_pool(void) {
  int u = __atomic_load_n(&g_use_pool, __ATOMIC_RELAXED);
  if (u < 0) {
    const char *e = getenv("TORCH_TPU_MXU_POOL");
    u = !(e && e[0] == '0' && e[1] == 0);
    __atomic_store_n(&g_use_pool, u, __ATOMIC_RELAXED);
  }
  return u;
}

static int64_t gcd(int64_t a, int64_t b) {
  while (b) {
    int64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

/* Rows per thread below which a lone item is not cut by rows (it stays
 * on oneDNN's OpenMP team, or on the calling thread up to TEAM_MIN_MACS
 * multiply-adds). */
#define POOL_MIN_ROWS 32
#define TEAM_MIN_MACS ((int64_t)1 << 30)

/* The problem cut into parts for the pool threads (see the top); 1 when it
 * was run, 0 when it has no dense cut (the caller runs it on the team).
 * small: the small-problem primitive's items, whole items per part. */
static int pool_matmul(int64_t batch, int64_t m, int64_t n, int64_t k,
                       const tpumxu__mat *src, const tpumxu__mat *wei,
                       const tpumxu__mat *dst, int accumulate, int small, int *rc) {
  /* the cut follows the pool's default size, not its current one, so
   * results stay the same at any tpurt_set_num_threads even with a kernel
   * whose K blocking depends on a part's rows (oneDNN 2.6's AMX ones) */
  int64_t P = tpurt_default_num_threads();
  part_job J = {batch, m, n, k, 0, 1, *src, *wei, *dst, accumulate, CUT_BATCH, small, 0, {0},
                PTHREAD_MUTEX_INITIALIZER};
  int64_t parts;
  if (small || P <= 1 || batch % P == 0) { /* P groups of items */
    J.step = (batch + P - 1) / P;
    parts = (batch + J.step - 1) / J.step;
  } else if (m >= POOL_MIN_ROWS * P) {
    /* item x row-block parts, a multiple of P of them (balanced) */
    J.dim = CUT_ROWS;
    J.mparts = P / gcd(batch, P);
    J.step = ((m + J.mparts - 1) / J.mparts + 15) / 16 * 16;
    J.mparts = (m + J.step - 1) / J.step;
    parts = batch * J.mparts;
  } else if (batch >= P) { /* one item per part, claimed as threads free up */
    J.step = 1;
    parts = batch;
  } else {
    pthread_mutex_destroy(&J.mu);
    return 0;
  }
  tpurt_parallel_for(parts, 1, part_fn, &J);
  pthread_mutex_destroy(&J.mu);
  *rc = J.rc ? tpu_error(J.rc, "%s", J.msg) : TPU_OK;
  return 1;
}

int tpumxu__dnnl_matmul(int64_t batch, int64_t m, int64_t n, int64_t k,
                       const tpumxu__mat *src, const tpumxu__mat *wei,
                       const tpumxu__mat *dst, int accumulate) {
  int rc = engine();
  if (rc) return rc;
  if (m * n * k <= TPUMXU_SMALL_MACS && src->s1 == 1 && wei->s1 == 1 && dst->s1 == 1) {
    /* many small items (attention's per-head products): whole items on
     * the pool's threads, each as on the calling thread */
    if (batch > 1 && batch * m * n * k >= TPUMXU_SMALL_POOL_MACS && use_pool() && tpurt_num_threads() > 1 &&
        pool_matmul(batch, m, n, k, src, wei, dst, accumulate, 1, &rc))
      return rc;
    return small_matmul(batch, m, n, k, src, wei, dst, accumulate);
  }
  if (use_pool() && pool_matmul(batch, m, n, k, src, wei, dst, accumulate, 0, &rc)) return rc;
  /* no dense cut: a moderate problem runs on the calling thread (waking
   * the OpenMP team while the pool's threads hold the cores cost
   * milliseconds: a 10x256x1024 GEMM took 7 ms on the team) */
  int one = use_pool() && batch * m * n * k <= TEAM_MIN_MACS;
  return cached_matmul(batch, m, n, k, src, wei, dst, accumulate, one);
}

/* Implementation name for a dense problem (no cache). */
static int impl_of(int sdt, int ddt, int64_t m, int64_t n, int64_t k,
                   char *buf, size_t cap) {
  int64_t ss[3] = {m * k, k, 1}, ws[3] = {k * n, n, 1}, ds[3] = {m * n, n, 1};
  dnnl_memory_desc_t md[3] = {NULL, NULL, NULL};
  dnnl_primitive_desc_t pd = NULL;
  const char *impl = NULL;
  dnnl_status_t s;
  if (!(s = md_init(&md[0], sdt, 1, m, k, ss)) && !(s = md_init(&md[1], sdt, 1, k, n, ws)) &&
      !(s = md_init(&md[2], ddt, 1, m, n, ds)) &&
      !(s = matmul_pd(&pd, md[0], md[1], md[2], 0, 0)))
    s = dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
  if (!s) snprintf(buf, cap, "%s", impl);
  if (pd) dnnl_primitive_desc_destroy(pd);
  md_free(md, 3);
  if (s) return tpu_error(TPU_E_INTERNAL, "tpumxu: oneDNN matmul not available: %s", status_name(s));
  return TPU_OK;
}

int tpumxu__dnnl_impl(int src_dt, int dst_dt, int64_t m, int64_t n, int64_t k,
                     char *buf, size_t cap) {
  int rc = engine();
  return rc ? rc : impl_of(src_dt, dst_dt, m, n, k, buf, cap);
}

/* rt/mem.c - per-chip caching allocator for vTPU HBM (host memory).
 *
 * Every block is its own host allocation: posix_memalign (64-byte aligned)
 * below 1 MiB, anonymous mmap (lazily backed, page aligned) above. Sizes are
 * rounded up to 512 B (small) or 128 KiB (large). Freed blocks stay cached
 * in a per-chip treap ordered by (size, address); an allocation takes the
 * smallest cached block that fits with at most 1/8 slack (any fit when the
 * chip is near capacity). Reserved bytes (live + cached + pending) never
 * exceed the chip capacity: on pressure the cache is released to the host
 * and pending frees are waited for before failing with TPU_E_OOM.
 *
 * Stream-ordered free: tpurt_free records, for every stream of the chip
 * that still has unfinished work, the stream's enqueue counter; the block
 * sits in a per-chip FIFO until every recorded stream has completed that
 * many tasks. Readiness is monotone along the FIFO (a later free records
 * tickets >= the earlier ones for every stream that is still busy), so
 * reclaiming pops from the head until the first block that is not ready.
 *
 * Every host block is also in one global treap ordered by address, so
 * tpurt_ptr_device / tpurt_free find the block of any address in O(log n).
 * Lock order: chip mutex, then g_addr_mu.
 *
 * Under AddressSanitizer, cached blocks and the rounding tail of live
 * blocks are poisoned, so use-after-free and overruns of device memory are
 * reported.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "rt/internal.h"
#include "tpu_rt.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define RT_POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define RT_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define RT_POISON(p, n) ((void)(p), (void)(n))
#define RT_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#define RT_ALIGN 64
#define RT_SMALL_LIMIT ((size_t)1 << 20)
#define RT_SMALL_ROUND ((size_t)512)
#define RT_LARGE_ROUND ((size_t)128 << 10)
#define RT_INLINE_WAITS 4

/* ---- treap (intrusive, keys unique) ----------------------------------- */

typedef struct rt_tnode {
  struct rt_tnode *l, *r;
  uint32_t prio;
} rt_tnode;

typedef int (*rt_tcmp)(const rt_tnode *a, const rt_tnode *b);

static rt_tnode *t_merge(rt_tnode *a, rt_tnode *b) { /* all of a < all of b */
  if (!a) return b;
  if (!b) return a;
  if (a->prio > b->prio) {
    a->r = t_merge(a->r, b);
    return a;
  }
  b->l = t_merge(a, b->l);
  return b;
}

/* Split t into nodes < key (*l) and >= key (*r). */
static void t_split(rt_tnode *t, const rt_tnode *key, rt_tcmp cmp, rt_tnode **l,
                    rt_tnode **r) {
  if (!t) {
    *l = *r = NULL;
  } else if (cmp(t, key) < 0) {
    t_split(t->r, key, cmp, &t->r, r);
    *l = t;
  } else {
    t_split(t->l, key, cmp, l, &t->l);
    *r = t;
  }
}

static void t_insert(rt_tnode **root, rt_tnode *n, rt_tcmp cmp) {
  rt_tnode **pp = root;
  while (*pp && (*pp)->prio >= n->prio) pp = cmp(n, *pp) < 0 ? &(*pp)->l : &(*pp)->r;
  t_split(*pp, n, cmp, &n->l, &n->r);
  *pp = n;
}

static void t_remove(rt_tnode **root, rt_tnode *n, rt_tcmp cmp) {
  rt_tnode **pp = root;
  while (*pp && *pp != n) pp = cmp(n, *pp) < 0 ? &(*pp)->l : &(*pp)->r;
  if (*pp) *pp = t_merge(n->l, n->r);
  n->l = n->r = NULL;
}

/* ---- blocks ----------------------------------------------------------- */

typedef struct rt_wait {
  int32_t sid;
  uint64_t ticket;
} rt_wait;

typedef struct rt_block {
  rt_tnode by_addr; /* global tree of host blocks (first member) */
  rt_tnode by_size; /* chip's free tree while cached */
  uintptr_t addr;
  size_t size;      /* rounded size */
  size_t req;       /* requested bytes while live */
  int dev;
  int is_mmap;
  _Atomic int live;
  struct rt_block *next; /* pending FIFO */
  int nwait;
  rt_wait w_inline[RT_INLINE_WAITS];
  rt_wait *w_heap;
} rt_block;

#define BLOCK_OF_SIZE(n) ((rt_block *)((char *)(n) - offsetof(rt_block, by_size)))
#define BLOCK_OF_ADDR(n) ((rt_block *)(n))

static int cmp_addr(const rt_tnode *a, const rt_tnode *b) {
  uintptr_t x = BLOCK_OF_ADDR(a)->addr, y = BLOCK_OF_ADDR(b)->addr;
  return x < y ? -1 : x > y;
}
static int cmp_size(const rt_tnode *a, const rt_tnode *b) {
  const rt_block *x = BLOCK_OF_SIZE(a), *y = BLOCK_OF_SIZE(b);
  if (x->size != y->size) return x->size < y->size ? -1 : 1;
  return x->addr < y->addr ? -1 : x->addr > y->addr;
}

static rt_wait *block_waits(rt_block *b) { return b->w_heap ? b->w_heap : b->w_inline; }

/* ---- per-chip state --------------------------------------------------- */

typedef struct rt_mem {
  pthread_mutex_t mu;
  rt_tnode *free_root;          /* cached blocks by (size, addr) */
  rt_block *pend_head, *pend_tail;
  uint64_t allocated, peak_allocated, reserved, peak_reserved;
  uint64_t num_allocs, num_frees, num_ooms, active_blocks;
} rt_mem;

static rt_mem g_mem[RT_MAX_CHIPS];
static pthread_once_t g_mem_once = PTHREAD_ONCE_INIT;
static rt_tnode *g_addr_root;
static pthread_mutex_t g_addr_mu = PTHREAD_MUTEX_INITIALIZER;

static void mem_init(void) {
  for (int i = 0; i < RT_MAX_CHIPS; i++) pthread_mutex_init(&g_mem[i].mu, NULL);
}

static size_t round_size(size_t n) {
  if (n < RT_SMALL_LIMIT) return (n + RT_SMALL_ROUND - 1) & ~(RT_SMALL_ROUND - 1);
  return (n + RT_LARGE_ROUND - 1) & ~(RT_LARGE_ROUND - 1);
}

static uint32_t hash_prio(uintptr_t x) {
  uint64_t z = (uint64_t)x + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return (uint32_t)(z ^ (z >> 31));
}

/* New host block of `size` bytes (chip mutex held); NULL if the host is out
 * of memory. Counted in reserved. */
static rt_block *host_new(rt_mem *m, int dev, size_t size) {
  rt_block *b = calloc(1, sizeof *b);
  if (!b) return NULL;
  void *p;
  if (size >= RT_SMALL_LIMIT) {
    p = mmap(NULL, size, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) p = NULL;
    b->is_mmap = 1;
  } else if (posix_memalign(&p, RT_ALIGN, size) != 0) {
    p = NULL;
  }
  if (!p) {
    free(b);
    return NULL;
  }
  b->addr = (uintptr_t)p;
  b->size = size;
  b->dev = dev;
  b->by_addr.prio = b->by_size.prio = hash_prio(b->addr);
  pthread_mutex_lock(&g_addr_mu);
  t_insert(&g_addr_root, &b->by_addr, cmp_addr);
  pthread_mutex_unlock(&g_addr_mu);
  m->reserved += size;
  if (m->reserved > m->peak_reserved) m->peak_reserved = m->reserved;
  return b;
}

/* Return a cached block to the host (chip mutex held, block not in trees
 * other than the address tree). */
static void host_release(rt_mem *m, rt_block *b) {
  pthread_mutex_lock(&g_addr_mu);
  t_remove(&g_addr_root, &b->by_addr, cmp_addr);
  pthread_mutex_unlock(&g_addr_mu);
  RT_UNPOISON((void *)b->addr, b->size);
  if (b->is_mmap)
    munmap((void *)b->addr, b->size);
  else
    free((void *)b->addr);
  m->reserved -= b->size;
  free(b->w_heap);
  free(b);
}

static void cache_put(rt_mem *m, rt_block *b) {
  RT_POISON((void *)b->addr, b->size);
  t_insert(&m->free_root, &b->by_size, cmp_size);
}

/* Smallest cached block with want <= size <= maxsize, removed from the
 * cache; NULL if none. */
static rt_block *cache_take(rt_mem *m, size_t want, size_t maxsize) {
  rt_tnode *t = m->free_root, *best = NULL;
  while (t) {
    if (BLOCK_OF_SIZE(t)->size >= want) {
      best = t;
      t = t->l;
    } else {
      t = t->r;
    }
  }
  if (!best || BLOCK_OF_SIZE(best)->size > maxsize) return NULL;
  t_remove(&m->free_root, best, cmp_size);
  return BLOCK_OF_SIZE(best);
}

static void release_cache(rt_mem *m) {
  while (m->free_root) {
    rt_tnode *t = m->free_root;
    t_remove(&m->free_root, t, cmp_size);
    host_release(m, BLOCK_OF_SIZE(t));
  }
}

static int block_ready(const rt_block *b) {
  const rt_wait *w = b->w_heap ? b->w_heap : b->w_inline;
  for (int i = 0; i < b->nwait; i++)
    if (tpurt__stream_completed(b->dev, w[i].sid) < w[i].ticket) return 0;
  return 1;
}

/* Move pending blocks whose streams have caught up into the cache. */
static void reclaim_ready(rt_mem *m) {
  while (m->pend_head && block_ready(m->pend_head)) {
    rt_block *b = m->pend_head;
    m->pend_head = b->next;
    if (!m->pend_head) m->pend_tail = NULL;
    b->next = NULL;
    free(b->w_heap);
    b->w_heap = NULL;
    b->nwait = 0;
    cache_put(m, b);
  }
}

/* Wait (chip mutex released meanwhile) until every block pending now is
 * reusable. 0 if it waited, -1 if it cannot (nothing pending, or the only
 * way forward is the calling worker's own stream). */
static int wait_pending(rt_mem *m, int dev) {
  if (!m->pend_tail) return -1;
  rt_wait w[RT_MAX_STREAMS];
  int n = m->pend_tail->nwait;
  memcpy(w, block_waits(m->pend_tail), (size_t)n * sizeof *w);
  tpurt_stream *self = tpurt__current_worker_stream();
  for (int i = 0; i < n; i++)
    if (self && tpurt_stream_device(self) == dev && tpurt_stream_id(self) == w[i].sid &&
        tpurt__stream_completed(dev, w[i].sid) < w[i].ticket)
      return -1;
  pthread_mutex_unlock(&m->mu);
  for (int i = 0; i < n; i++) tpurt__stream_wait_completed(dev, w[i].sid, w[i].ticket);
  pthread_mutex_lock(&m->mu);
  return 0;
}

/* ---- public API ------------------------------------------------------- */

static int check_dev(int dev) {
  if (dev < 0 || dev >= tpurt_device_count())
    return tpu_error(TPU_E_INVALID, "invalid device tpu:%d (%d visible)", dev,
                     tpurt_device_count());
  pthread_once(&g_mem_once, mem_init);
  return TPU_OK;
}

static int oom_error(rt_mem *m, int dev, size_t nbytes, uint64_t cap) {
  char a[32], f[32], c[32], al[32], r[32];
  m->num_ooms++;
  uint64_t fr = cap > m->reserved ? cap - m->reserved : 0;
  return tpu_error(TPU_E_OOM,
                   "Tried to allocate %s (%llu bytes) on tpu:%d; %s free of %s "
                   "capacity (%s allocated, %s reserved by torch_tpu)",
                   tpurt__format_bytes(nbytes, a, sizeof a), (unsigned long long)nbytes, dev,
                   tpurt__format_bytes(fr, f, sizeof f), tpurt__format_bytes(cap, c, sizeof c),
                   tpurt__format_bytes(m->allocated, al, sizeof al),
                   tpurt__format_bytes(m->reserved, r, sizeof r));
}

/* A pending block of want <= size <= maxsize whose recorded streams are
 * all `sid` or already past their ticket, unlinked from the FIFO (chip
 * mutex held); NULL if none. */
static rt_block *pending_take_on(rt_mem *m, int sid, size_t want, size_t maxsize) {
  rt_block *prev = NULL;
  for (rt_block *b = m->pend_head; b; prev = b, b = b->next) {
    if (b->size < want || b->size > maxsize) continue;
    const rt_wait *w = block_waits(b);
    int ok = 1;
    for (int i = 0; i < b->nwait && ok; i++)
      ok = w[i].sid == sid || tpurt__stream_completed(b->dev, w[i].sid) >= w[i].ticket;
    if (!ok) continue;
    if (prev) prev->next = b->next;
    else m->pend_head = b->next;
    if (m->pend_tail == b) m->pend_tail = prev;
    b->next = NULL;
    free(b->w_heap);
    b->w_heap = NULL;
    b->nwait = 0;
    return b;
  }
  return NULL;
}

/* Allocate `nbytes` of HBM on `dev` (64-byte aligned); the caller frees it
 * with tpurt_free. See tpu_rt.h for the OOM behaviour. */
int tpurt_malloc(int dev, size_t nbytes, void **out) {
  return tpurt_malloc_on(dev, -1, nbytes, out);
}

/* tpurt_malloc for first use on stream `sid` (see tpu_rt.h). */
int tpurt_malloc_on(int dev, int sid, size_t nbytes, void **out) {
  if (!out) return tpu_error(TPU_E_INVALID, "tpurt_malloc: out is NULL");
  *out = NULL;
  int rc = check_dev(dev);
  if (rc != TPU_OK) return rc;
  if (nbytes == 0) return TPU_OK;
  rc = tpurt_device_open(dev);
  if (rc != TPU_OK) return rc;
  uint64_t cap = tpurt_device_hbm_capacity(dev);
  rt_mem *m = &g_mem[dev];
  pthread_mutex_lock(&m->mu);
  if (nbytes > cap || nbytes > SIZE_MAX - RT_LARGE_ROUND) {
    rc = oom_error(m, dev, nbytes, cap);
    pthread_mutex_unlock(&m->mu);
    return rc;
  }
  size_t size = round_size(nbytes);
  reclaim_ready(m);
  rt_block *b = cache_take(m, size, size + size / 8);
  if (!b && sid >= 0) b = pending_take_on(m, sid, size, size + size / 8);
  if (!b && m->reserved + size <= cap) b = host_new(m, dev, size);
  for (int attempt = 0; !b && attempt < 16; attempt++) {
    b = cache_take(m, size, SIZE_MAX);
    if (b) break;
    release_cache(m);
    if (m->reserved + size <= cap) {
      b = host_new(m, dev, size);
      if (b) break;
    }
    if (wait_pending(m, dev) != 0) break;
    reclaim_ready(m);
  }
  if (!b) {
    rc = oom_error(m, dev, nbytes, cap);
    pthread_mutex_unlock(&m->mu);
    return rc;
  }
  RT_UNPOISON((void *)b->addr, nbytes);
  if (nbytes < b->size) RT_POISON((char *)b->addr + nbytes, b->size - nbytes);
  b->req = nbytes;
  atomic_store_explicit(&b->live, 1, memory_order_release);
  m->allocated += b->size;
  if (m->allocated > m->peak_allocated) m->peak_allocated = m->allocated;
  m->num_allocs++;
  m->active_blocks++;
  pthread_mutex_unlock(&m->mu);
  *out = (void *)b->addr;
  return TPU_OK;
}

/* Host block whose range contains p (g_addr_mu held), or NULL. */
static rt_block *find_block_locked(uintptr_t p) {
  rt_tnode *t = g_addr_root, *best = NULL;
  while (t) {
    if (BLOCK_OF_ADDR(t)->addr <= p) {
      best = t;
      t = t->r;
    } else {
      t = t->l;
    }
  }
  if (!best) return NULL;
  rt_block *b = BLOCK_OF_ADDR(best);
  return p < b->addr + b->size ? b : NULL;
}

/* Free a block from tpurt_malloc (stream-ordered; never blocks). */
int tpurt_free(void *ptr) {
  if (!ptr) return TPU_OK;
  pthread_mutex_lock(&g_addr_mu);
  rt_block *b = find_block_locked((uintptr_t)ptr);
  int ok = b && b->addr == (uintptr_t)ptr &&
           atomic_exchange_explicit(&b->live, 0, memory_order_acq_rel) == 1;
  pthread_mutex_unlock(&g_addr_mu);
  if (!ok)
    return tpu_error(TPU_E_INVALID,
                     "tpurt_free: %p is not a live block from tpurt_malloc (double free?)",
                     ptr);
  int dev = b->dev;
  rt_mem *m = &g_mem[dev];
  pthread_mutex_lock(&m->mu);
  m->allocated -= b->size;
  m->active_blocks--;
  m->num_frees++;
  /* record the streams that still have work queued */
  int ns = tpurt__stream_count(dev);
  int nw = 0;
  rt_wait tmp[RT_MAX_STREAMS];
  for (int sid = 0; sid < ns; sid++) {
    uint64_t e = tpurt__stream_enqueued(dev, sid);
    if (tpurt__stream_completed(dev, sid) < e) tmp[nw++] = (rt_wait){sid, e};
  }
  if (nw == 0) {
    cache_put(m, b);
  } else {
    if (nw > RT_INLINE_WAITS) {
      b->w_heap = malloc((size_t)nw * sizeof *b->w_heap);
      if (!b->w_heap) { /* no memory for the record: fall back to waiting for all */
        pthread_mutex_unlock(&m->mu);
        for (int i = 0; i < nw; i++) tpurt__stream_wait_completed(dev, tmp[i].sid, tmp[i].ticket);
        pthread_mutex_lock(&m->mu);
        cache_put(m, b);
        pthread_mutex_unlock(&m->mu);
        return TPU_OK;
      }
    }
    memcpy(block_waits(b), tmp, (size_t)nw * sizeof *tmp);
    b->nwait = nw;
    b->next = NULL;
    if (m->pend_tail)
      m->pend_tail->next = b;
    else
      m->pend_head = b;
    m->pend_tail = b;
  }
  pthread_mutex_unlock(&m->mu);
  return TPU_OK;
}

/* Device owning any address inside a live block, or -1. */
int tpurt_ptr_device(const void *ptr) {
  if (!ptr) return -1;
  pthread_mutex_lock(&g_addr_mu);
  rt_block *b = find_block_locked((uintptr_t)ptr);
  int dev = b && atomic_load_explicit(&b->live, memory_order_acquire) ? b->dev : -1;
  pthread_mutex_unlock(&g_addr_mu);
  return dev;
}

/* Copy `dev`'s allocator statistics into *out. */
int tpurt_mem_get_stats(int dev, tpurt_mem_stats *out) {
  int rc = check_dev(dev);
  if (rc != TPU_OK) return rc;
  if (!out) return tpu_error(TPU_E_INVALID, "tpurt_mem_get_stats: out is NULL");
  rt_mem *m = &g_mem[dev];
  pthread_mutex_lock(&m->mu);
  out->allocated = m->allocated;
  out->peak_allocated = m->peak_allocated;
  out->reserved = m->reserved;
  out->peak_reserved = m->peak_reserved;
  out->capacity = tpurt_device_hbm_capacity(dev);
  out->num_allocs = m->num_allocs;
  out->num_frees = m->num_frees;
  out->num_ooms = m->num_ooms;
  out->active_blocks = m->active_blocks;
  pthread_mutex_unlock(&m->mu);
  return TPU_OK;
}

/* Reset the peaks of `dev` to the current values. */
int tpurt_mem_reset_peak(int dev) {
  int rc = check_dev(dev);
  if (rc != TPU_OK) return rc;
  rt_mem *m = &g_mem[dev];
  pthread_mutex_lock(&m->mu);
  m->peak_allocated = m->allocated;
  m->peak_reserved = m->reserved;
  pthread_mutex_unlock(&m->mu);
  return TPU_OK;
}

/* Release `dev`'s cached blocks (those no stream still uses) to the host. */
int tpurt_mem_empty_cache(int dev) {
  int rc = check_dev(dev);
  if (rc != TPU_OK) return rc;
  rt_mem *m = &g_mem[dev];
  pthread_mutex_lock(&m->mu);
  reclaim_ready(m);
  release_cache(m);
  pthread_mutex_unlock(&m->mu);
  return TPU_OK;
}

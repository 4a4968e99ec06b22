/* graph/graph.c - the per-device op recorder of the eager modes (see
 * tpu_graph.h): recording with alias resolution, deferred frees, loop
 * detection, the size cap, the flush (cache key, merge, enqueue) and the
 * pending-graph dumps.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/internal.h"
#include "graph/internal.h"
#include "tpu_exec.h"

#define MAX_DEV 64
#define MAX_KNOWN 16
#define MIN_STEP 4
#define MAX_QUEUED 1024 /* programs a stream may have pending */

enum { B_PARAM = 0, B_EDGE, B_VIEW };

typedef struct gbind {
  int32_t kind, j, k, i; /* PARAM j; EDGE/VIEW of op k's output i */
  tpu_view v;            /* the parameter's view */
} gbind;

typedef struct gop {
  const tpuir_graph *g;
  int nin, nout;
  const tpu_view *ins, *outs;
  tpurt_cleanup_fn release;
  void *owner;
  gbind *bind;   /* nin */
  int32_t *widx; /* nout: writer index */
  uint64_t sk1, sk2, sl; /* structural key hashes, loop signature */
  uint64_t sb;           /* sl + bindings (pending values by distance) */
  uint64_t roll;         /* loop hash of ops[0..this] */
} gop;

typedef struct gwriter {
  tpu_view v;
  int32_t k, i, superseded, dead, next; /* next writer of the same base */
} gwriter;

typedef struct gparam {
  tpu_view v;
  int32_t next;
} gparam;

typedef struct gbase {
  const void *base; /* NULL: empty slot */
  int32_t whead, phead;
  int32_t fresh; /* allocated in a deferring mode and not yet materialized */
} gbase;

typedef struct gdev {
  pthread_mutex_t mu;
  tpurt_stream *s;
  gop *ops;
  int n, cap;
  gwriter *w;
  int nw, capw;
  gparam *p;
  int np, capp;
  gbase *tab;
  int ntab, captab;
  void **deferred;
  int nd, capd;
  struct { int len; uint64_t h; } known[MAX_KNOWN];
  int nknown, known_next;
  int capturing, broken; /* tpug_capture_begin .. end; 1 + reason of a flush that cut it */
  int step_done; /* the pending ops are a known step, flushed at the next call (loop_flush) */
} gdev;

static gdev g_dev[MAX_DEV];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_mode = TPUG_STRICT;
static int g_max_ops = 2000;
static pthread_mutex_t g_stat_mu = PTHREAD_MUTEX_INITIALIZER;
static tpug_stats g_st;

static void init_once(void) {
  for (int d = 0; d < MAX_DEV; d++) pthread_mutex_init(&g_dev[d].mu, NULL);
  const char *e = getenv("TORCH_TPU_DEFER_AND_FUSE");
  if (e && (!strcmp(e, "1") || !strcmp(e, "true") || !strcmp(e, "on") ||
            !strcmp(e, "yes")))
    g_mode = TPUG_FUSE;
  const char *c = getenv("TORCH_TPU_FUSE_MAX_OPS");
  if (c && atoi(c) > 0) g_max_ops = atoi(c);
}

static gdev *dev_of(int d) {
  pthread_once(&g_once, init_once);
  return d >= 0 && d < MAX_DEV ? &g_dev[d] : NULL;
}

#define STAT_ADD(field, v)             \
  do {                                 \
    pthread_mutex_lock(&g_stat_mu);    \
    g_st.field += (v);                 \
    pthread_mutex_unlock(&g_stat_mu);  \
  } while (0)

/* ---- hashing ------------------------------------------------------------- */

/* the graph's own structure is hashed by the IR (tpuir_hash); bindings and
 * step signatures here with the same mixer (tpu_base.h) */

static uint64_t roll_step(uint64_t r, uint64_t sig) {
  r ^= sig + 0x9e3779b97f4a7c15ull + (r << 6) + (r >> 2);
  return r * 0xbf58476d1ce4e5b9ull;
}

/* ---- views --------------------------------------------------------------- */

static int view_eq(const tpu_view *a, const tpu_view *b) {
  if (a->base != b->base || a->offset != b->offset || a->dtype != b->dtype ||
      a->ndim != b->ndim)
    return 0;
  for (int i = 0; i < a->ndim; i++)
    if (a->sizes[i] != b->sizes[i] ||
        (a->sizes[i] != 1 && a->strides[i] != b->strides[i]))
      return 0;
  return 1;
}

/* byte range [lo, hi) a view touches (hi == lo when empty) */
static void view_range(const tpu_view *v, int64_t *lo, int64_t *hi) {
  int64_t es = (int64_t)tpu_dtype_size(v->dtype), last = 0;
  *lo = v->offset * es;
  for (int i = 0; i < v->ndim; i++) {
    if (v->sizes[i] == 0) {
      *hi = *lo;
      return;
    }
    last += (v->sizes[i] - 1) * v->strides[i];
  }
  *hi = (v->offset + last + 1) * es;
}

/* 1 when writing view o replaces every element view w holds: same block
 * and dtype, o dense (its elements fill its byte range exactly once: the
 * dims of size > 1, ordered by stride, have row-major strides) and o's
 * range contains w's. A write through o then supersedes w's writer, as a
 * write through an equal view does (e.g. an in-place op on a reshaped view
 * of a whole result). */
static int view_covers(const tpu_view *o, const tpu_view *w) {
  if (o->base != w->base || o->dtype != w->dtype) return 0;
  int64_t st[TPU_MAX_DIMS], sz[TPU_MAX_DIMS];
  int n = 0;
  for (int i = 0; i < o->ndim; i++) {
    if (o->sizes[i] == 0) return 0;
    if (o->sizes[i] == 1) continue;
    int k = n++;
    for (; k > 0 && st[k - 1] > o->strides[i]; k--) st[k] = st[k - 1], sz[k] = sz[k - 1];
    st[k] = o->strides[i];
    sz[k] = o->sizes[i];
  }
  int64_t expect = 1;
  for (int k = 0; k < n; k++) {
    if (st[k] != expect) return 0;
    expect *= sz[k];
  }
  int64_t ol, oh, wl, wh;
  view_range(o, &ol, &oh);
  view_range(w, &wl, &wh);
  return ol <= wl && wh <= oh;
}

static int view_overlap(const tpu_view *a, const tpu_view *b) {
  int64_t al, ah, bl, bh;
  view_range(a, &al, &ah);
  view_range(b, &bl, &bh);
  return al < bh && bl < ah && al < ah && bl < bh;
}

/* How to read view P out of the contiguous value of view W (same base and
 * dtype): reshape W's value to R (nr dims), slice [c, c+p), reshape to the
 * m "real" dims of P (sorted by stride), transpose to P's order, broadcast
 * to P's shape. Returns 1 if expressible. */
typedef struct vderiv {
  int nr, m;
  int64_t R[TPU_MAX_DIMS + 1], c[TPU_MAX_DIMS + 1], p[TPU_MAX_DIMS + 1];
  int64_t perm[TPU_MAX_DIMS], pdim[TPU_MAX_DIMS]; /* real dim i -> P dim */
  int wtrans;                /* W is dense but permuted: transpose it first */
  int64_t wperm[TPU_MAX_DIMS];
} vderiv;

/* A dense W whose dims are permuted (an elementwise result that kept its
 * input's layout): wperm orders W's dims outermost first (size-1 dims
 * first), and *Wc is the contiguous view of the same memory in that order.
 * 0 if W is not dense in any order. */
static int dense_order(const tpu_view *W, int64_t *wperm, tpu_view *Wc) {
  int n = 0;
  for (int i = 0; i < W->ndim; i++)
    if (W->sizes[i] == 1) wperm[n++] = i;
  int first = n;
  for (int i = 0; i < W->ndim; i++)
    if (W->sizes[i] != 1) {
      int j = n++;
      for (; j > first && W->strides[wperm[j - 1]] < W->strides[i]; j--) wperm[j] = wperm[j - 1];
      wperm[j] = i;
    }
  *Wc = *W;
  int64_t st = 1;
  for (int k = W->ndim - 1; k >= 0; k--) {
    Wc->sizes[k] = W->sizes[wperm[k]];
    Wc->strides[k] = st;
    if (Wc->sizes[k] != 1 && W->strides[wperm[k]] != st) return 0;
    st *= Wc->sizes[k];
  }
  return 1;
}

static int derive_contig(const tpu_view *W, const tpu_view *P, vderiv *d);

static int derive(const tpu_view *W, const tpu_view *P, vderiv *d) {
  d->wtrans = 0;
  if (W->dtype != P->dtype || W->base != P->base) return 0;
  if (tpu_view_is_contiguous(W)) return derive_contig(W, P, d);
  tpu_view Wc;
  if (!dense_order(W, d->wperm, &Wc) || !derive_contig(&Wc, P, d)) return 0;
  d->wtrans = 1;
  return 1;
}

static int derive_contig(const tpu_view *W, const tpu_view *P, vderiv *d) {
  int64_t N = tpu_view_numel(W), start = P->offset - W->offset;
  if (N == 0 || tpu_view_numel(P) == 0 || start < 0) return 0;
  int sd[TPU_MAX_DIMS], m = 0; /* real dims of P in P order */
  for (int i = 0; i < P->ndim; i++)
    if (P->sizes[i] > 1 && P->strides[i] != 0) {
      if (P->strides[i] < 0) return 0;
      sd[m++] = i;
    }
  /* sorted[] = real dims by stride, descending */
  int sorted[TPU_MAX_DIMS];
  for (int i = 0; i < m; i++) sorted[i] = sd[i];
  for (int i = 1; i < m; i++)
    for (int j = i; j > 0 && P->strides[sorted[j]] > P->strides[sorted[j - 1]]; j--) {
      int t = sorted[j];
      sorted[j] = sorted[j - 1];
      sorted[j - 1] = t;
    }
  d->m = m;
  if (m == 0) {
    if (start >= N) return 0;
    d->nr = 1;
    d->R[0] = N;
    d->c[0] = start;
    d->p[0] = 1;
  } else {
    int64_t q0 = P->strides[sorted[0]];
    for (int k = 0; k + 1 < m; k++) {
      int64_t a = P->strides[sorted[k]], b = P->strides[sorted[k + 1]];
      if (a == b || a % b != 0) return 0;
    }
    if (N % q0 != 0) return 0;
    d->nr = m + 1;
    d->R[0] = N / q0;
    for (int k = 1; k < m; k++)
      d->R[k] = P->strides[sorted[k - 1]] / P->strides[sorted[k]];
    d->R[m] = P->strides[sorted[m - 1]];
    int64_t rem = start % q0;
    d->c[0] = start / q0;
    for (int k = 1; k < m; k++) {
      d->c[k] = rem / P->strides[sorted[k]];
      rem %= P->strides[sorted[k]];
    }
    d->c[m] = rem;
    for (int k = 0; k < m; k++) d->p[k] = P->sizes[sorted[k]];
    d->p[m] = 1;
    for (int k = 0; k <= m; k++)
      if (d->c[k] + d->p[k] > d->R[k]) return 0;
  }
  for (int i = 0; i < m; i++) {
    d->pdim[i] = sd[i];
    for (int k = 0; k < m; k++)
      if (sorted[k] == sd[i]) d->perm[i] = k;
  }
  return 1;
}

static tpuir_val build_view(tpuir_graph *g, tpuir_val w, const tpu_view *W,
                            const tpu_view *P) {
  vderiv d;
  if (!derive(W, P, &d))
    return tpu_error(TPU_E_INTERNAL, "fused eager: view not derivable");
  if (d.wtrans) w = tpuir_transpose(g, w, d.wperm); /* W's memory order */
  tpuir_val v = w < 0 ? w : tpuir_reshape(g, w, d.nr, d.R);
  int64_t lim[TPU_MAX_DIMS + 1], one[TPU_MAX_DIMS + 1];
  for (int k = 0; k < d.nr; k++) {
    lim[k] = d.c[k] + d.p[k];
    one[k] = 1;
  }
  if (d.nr > TPU_MAX_DIMS) {
    /* R has one dim more than allowed: merge the last (size-1 slice) */
    return tpu_error(TPU_E_UNSUPPORTED, "fused eager: view rank");
  }
  if (v >= 0) v = tpuir_slice(g, v, d.c, lim, one);
  int64_t ps[TPU_MAX_DIMS];
  for (int k = 0; k < d.m; k++) ps[k] = d.p[k];
  if (v >= 0) v = tpuir_reshape(g, v, d.m, ps);
  int ident = 1;
  for (int i = 0; i < d.m; i++) ident &= d.perm[i] == i;
  if (v >= 0 && !ident) v = tpuir_transpose(g, v, d.perm);
  if (v >= 0 && (d.m != P->ndim)) v = tpuir_broadcast_in_dim(g, v, P->ndim, P->sizes, d.pdim);
  else if (v >= 0) {
    int same = 1;
    for (int i = 0; i < d.m; i++) same &= d.pdim[i] == i;
    if (!same) v = tpuir_broadcast_in_dim(g, v, P->ndim, P->sizes, d.pdim);
  }
  return v;
}

static int derivable(const tpu_view *W, const tpu_view *P) {
  vderiv d;
  return derive(W, P, &d) && d.nr <= TPU_MAX_DIMS;
}

/* ---- base table ---------------------------------------------------------- */

static size_t ptr_hash(const void *p) {
  uint64_t x = (uint64_t)(uintptr_t)p;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return (size_t)x;
}

static gbase *base_find(gdev *D, const void *base) {
  if (!D->captab || !base) return NULL; /* NULL: empty tensors, untracked */
  size_t m = (size_t)D->captab - 1;
  for (size_t i = ptr_hash(base) & m;; i = (i + 1) & m) {
    if (D->tab[i].base == base) return &D->tab[i];
    if (!D->tab[i].base) return NULL;
  }
}

static gbase *base_get(gdev *D, const void *base) {
  if (!base) return NULL;
  gbase *b = base_find(D, base);
  if (b) return b;
  if ((D->ntab + 1) * 2 > D->captab) {
    int nc = D->captab ? D->captab * 2 : 256;
    gbase *nt = calloc((size_t)nc, sizeof *nt);
    if (!nt) return NULL;
    for (int i = 0; i < D->captab; i++) {
      if (!D->tab[i].base) continue;
      size_t m = (size_t)nc - 1, j = ptr_hash(D->tab[i].base) & m;
      while (nt[j].base) j = (j + 1) & m;
      nt[j] = D->tab[i];
    }
    free(D->tab);
    D->tab = nt;
    D->captab = nc;
  }
  size_t m = (size_t)D->captab - 1, i = ptr_hash(base) & m;
  while (D->tab[i].base) i = (i + 1) & m;
  D->tab[i].base = base;
  D->tab[i].whead = D->tab[i].phead = -1;
  D->ntab++;
  return &D->tab[i];
}

/* double *pp's capacity; 0 on success (on failure *pp is unchanged) */
static int grow(void **pp, int *cap, size_t es) {
  int nc = *cap ? *cap * 2 : 64;
  void *q = realloc(*pp, (size_t)nc * es);
  if (!q) return -1;
  *pp = q;
  *cap = nc;
  return 0;
}

/* ---- alias resolution ---------------------------------------------------- */

/* 0: ok to record; 1: conflicts with pending outputs (flush first) */
static int check_conflicts(gdev *D, int nin, const tpu_view *ins, int nout,
                           const tpu_view *outs) {
  for (int j = 0; j < nin; j++) {
    gbase *b = base_find(D, ins[j].base);
    if (!b) continue;
    for (int w = b->whead; w >= 0; w = D->w[w].next) {
      const gwriter *W = &D->w[w];
      if (W->superseded || !view_overlap(&W->v, &ins[j])) continue;
      if (!view_eq(&W->v, &ins[j]) && !derivable(&W->v, &ins[j])) return 1;
    }
  }
  for (int i = 0; i < nout; i++) {
    gbase *b = base_find(D, outs[i].base);
    if (!b) continue;
    for (int w = b->whead; w >= 0; w = D->w[w].next) {
      const gwriter *W = &D->w[w];
      if (W->superseded || !view_overlap(&W->v, &outs[i])) continue;
      if (!view_eq(&W->v, &outs[i]) && !view_covers(&outs[i], &W->v)) return 1;
    }
  }
  return 0;
}

static void resolve_param(gdev *D, const tpu_view *v, gbind *bd) {
  bd->v = *v;
  gbase *b = base_get(D, v->base);
  for (int w = b ? b->whead : -1; w >= 0; w = D->w[w].next) {
    const gwriter *W = &D->w[w];
    if (W->superseded || !view_overlap(&W->v, v)) continue;
    bd->kind = view_eq(&W->v, v) ? B_EDGE : B_VIEW;
    bd->k = W->k;
    bd->i = W->i;
    return;
  }
  bd->kind = B_PARAM;
  for (int p = b ? b->phead : -1; p >= 0; p = D->p[p].next)
    if (view_eq(&D->p[p].v, v)) {
      bd->j = p;
      return;
    }
  bd->j = D->np;
  D->p[D->np].v = *v;
  D->p[D->np].next = b ? b->phead : -1;
  if (b) b->phead = D->np;
  D->np++;
}

/* ---- merge ----------------------------------------------------------------- */

/* live[k][i] flags flattened: out index base per op in obase */
static int out_live(const gdev *D, int k, int i) {
  const gwriter *W = &D->w[D->ops[k].widx[i]];
  return !W->superseded && !W->dead;
}

/* An rng node whose (seed, offset) the flush binds at run time. */
static int lifted_rng(const tpuir_node *s) {
  return s->op == TPUIR_RNG && s->nin == 0;
}

/* Build the merged graph of ops[0..n). Constants and rng keys become
 * parameters after the D->np bound ones, in node order. */
static tpuir_graph *merge(gdev *D, int n) {
  tpuir_graph *g = tpuir_graph_new();
  if (!g) return NULL;
  tpuir_val *pv = malloc(sizeof(tpuir_val) * (size_t)(D->np ? D->np : 1));
  tpuir_val **ov = calloc((size_t)(n ? n : 1), sizeof *ov);
  tpuir_val *map = NULL, *outs = NULL;
  int nmap = 0, nouts = 0, rc = TPU_OK;
  if (!pv || !ov) goto fail;
  for (int j = 0; j < D->np; j++) {
    pv[j] = tpuir_param(g, D->p[j].v.dtype, D->p[j].v.ndim, D->p[j].v.sizes);
    if (pv[j] < 0) goto fail;
  }
  for (int k = 0; k < n; k++) {
    const gop *o = &D->ops[k];
    int nn = tpuir_num_nodes(o->g);
    if (nn > nmap) {
      free(map);
      map = malloc((size_t)nn * sizeof *map);
      nmap = nn;
      if (!map) goto fail;
    }
    for (int t = 0; t < nn; t++) {
      const tpuir_node *s = tpuir_get_node(o->g, t);
      tpuir_val v;
      if (s->op == TPUIR_PARAM) {
        const gbind *b = &o->bind[s->dim];
        if (b->kind == B_PARAM) v = pv[b->j];
        else if (b->kind == B_EDGE) v = ov[b->k][b->i];
        else v = build_view(g, ov[b->k][b->i], &D->ops[b->k].outs[b->i], &b->v);
      } else if (s->op == TPUIR_CONST) {
        v = tpuir_param(g, s->dtype, 0, NULL);
      } else if (lifted_rng(s)) {
        int64_t two = 2;
        v = tpuir_param(g, TPU_I64, 1, &two);
        if (v >= 0) v = tpuir_rng_dyn(g, s->kind, s->dtype, s->ndim, s->sizes, v);
      } else {
        v = tpuir_copy_node(g, s, map);
      }
      if (v < 0) goto fail;
      map[t] = v;
    }
    ov[k] = malloc(sizeof(tpuir_val) * (size_t)(o->nout ? o->nout : 1));
    if (!ov[k]) goto fail;
    for (int i = 0; i < o->nout; i++) {
      ov[k][i] = map[tpuir_output(o->g, i)];
      nouts += out_live(D, k, i);
    }
  }
  outs = malloc(sizeof(tpuir_val) * (size_t)(nouts ? nouts : 1));
  if (!outs) goto fail;
  nouts = 0;
  for (int k = 0; k < n; k++)
    for (int i = 0; i < D->ops[k].nout; i++)
      if (out_live(D, k, i)) outs[nouts++] = ov[k][i];
  rc = tpuir_set_outputs(g, nouts, outs);
  if (rc < 0) goto fail;
  goto done;
fail:
  tpuir_graph_free(g);
  g = NULL;
done:
  for (int k = 0; k < n && ov; k++) free(ov[k]);
  free(ov);
  free(pv);
  free(map);
  free(outs);
  return g;
}

/* ---- flush ------------------------------------------------------------------ */

typedef struct gtask {
  tpug_prog *prog;
  int nin, nout;
  tpu_view *ins, *outs;
  unsigned char *consts;
  int np, nrng;   /* device parameters ins[0..np); rng key count */
  size_t nconst;  /* bytes of consts */
  int32_t *rng;   /* ins index of each rng key */
  tpug_trace_event *ev; /* set while tracing: stamped and pushed when run */
  int one_block;  /* ins, outs, consts and rng live in the task's block */
  int spare;      /* the block is TASK_BLOCK bytes, from / for g_task_spares */
} gtask;

/* Freed task blocks of TASK_BLOCK bytes (a task of up to ~12 views),
 * reused by the next (base/internal.h): a task is made on the calling
 * thread and freed on the stream's worker once per Strict op, a pattern
 * malloc serves from its shared arena (~330 instructions a malloc). */
#define TASK_BLOCK 4096
static tpu_spares g_task_spares;

static int task_run(void *ctx) {
  gtask *t = ctx;
  if (t->ev) t->ev->start_ns = tpug__trace_now_ns();
  char dir[1024] = "";
  tpux_key key = {t->prog->k1, t->prog->k2, dir};
  /* the disk tier's directory matters only to PJRT (the vTPU plans in memory) */
  if (tpux_executor_active() != tpux_executor_vtpu()) tpug__cache_dir(dir, sizeof dir);
  int rc = tpux_exec_program(t->prog->g, &key, &t->prog->exe, t->nin, t->ins, t->nout, t->outs);
  if (t->ev) {
    t->ev->end_ns = tpug__trace_now_ns();
    tpug__trace_push(t->ev);
  }
  return rc;
}

static void task_free(void *ctx) {
  gtask *t = ctx;
  free(t->ev);
  tpug__prog_unref(t->prog);
  if (!t->one_block) {
    free(t->ins);
    free(t->outs);
    free(t->consts);
    free(t->rng);
  }
  if (t->spare) tpu__spare_put(&g_task_spares, t);
  else free(t);
}

/* A task with room for nin inputs, nout outputs, nconst bytes of
 * constants and nrng rng keys, in one allocation (one malloc and one free
 * per program). NULL on OOM. */
static gtask *task_alloc(int nin, int nout, size_t nconst, int nrng) {
  size_t a = (sizeof(gtask) + 63) & ~(size_t)63;
  size_t b = a + sizeof(tpu_view) * (size_t)(nin ? nin : 1);
  size_t c = b + sizeof(tpu_view) * (size_t)(nout ? nout : 1);
  size_t d = c + ((nconst + 7) & ~(size_t)7);
  size_t bytes = d + sizeof(int32_t) * (size_t)(nrng ? nrng : 1);
  int spare = bytes <= TASK_BLOCK;
  unsigned char *m = spare ? tpu__spare_get(&g_task_spares) : NULL;
  if (!m) m = malloc(spare ? TASK_BLOCK : bytes);
  if (!m) return NULL;
  gtask *t = (gtask *)(void *)m;
  memset(t, 0, sizeof *t);
  t->one_block = 1;
  t->spare = spare;
  t->ins = (tpu_view *)(void *)(m + a);
  t->outs = (tpu_view *)(void *)(m + b);
  t->consts = m + c;
  t->rng = nrng ? (int32_t *)(void *)(m + d) : NULL;
  t->nin = nin;
  t->nout = nout;
  t->nconst = nconst;
  return t;
}

/* While tracing, give T an event describing its program (the recorded op
 * graphs gs[0..n), or its merged program when n == 0: a replay). */
static void trace_attach(gtask *T, tpurt_stream *s, const tpuir_graph *const *gs, int n,
                         int reason) {
  if (!tpug_trace_enabled() || !(T->ev = calloc(1, sizeof *T->ev))) return;
  const tpuir_graph *merged = T->prog->g;
  if (n > 0) tpug__trace_describe(T->ev, gs, n);
  else tpug__trace_describe(T->ev, &merged, 1);
  T->ev->program = T->prog->k1;
  T->ev->device = tpurt_stream_device(s);
  T->ev->stream = tpurt_stream_id(s);
  T->ev->reason = (int32_t)reason;
  for (int j = 0; j < T->nin; j++)
    T->ev->bytes += (uint64_t)tpu_view_numel(&T->ins[j]) * tpu_dtype_size(T->ins[j].dtype);
  for (int j = 0; j < T->nout; j++)
    T->ev->bytes += (uint64_t)tpu_view_numel(&T->outs[j]) * tpu_dtype_size(T->outs[j].dtype);
}

static void write_const(const tpuir_node *n, unsigned char *slot) {
  memset(slot, 0, 8);
  switch (n->dtype) {
  case TPU_F32: { float f = (float)n->fval; memcpy(slot, &f, 4); return; }
  case TPU_F64: memcpy(slot, &n->fval, 8); return;
  case TPU_I64: memcpy(slot, &n->ival, 8); return;
  case TPU_I32: { int32_t v = (int32_t)n->ival; memcpy(slot, &v, 4); return; }
  case TPU_BOOL: slot[0] = n->ival != 0; return;
  default: break;
  }
  tpu_view dst, src;
  tpu_view_init_contiguous(&dst, slot, n->dtype, 0, NULL);
  if (n->dtype == TPU_F16 || n->dtype == TPU_BF16) {
    float f = (float)n->fval;
    unsigned char tmp[8];
    memcpy(tmp, &f, 4);
    tpu_view_init_contiguous(&src, tmp, TPU_F32, 0, NULL);
    tpux_copy(&dst, &src);
  } else {
    int64_t v = n->ival;
    tpu_view_init_contiguous(&src, &v, TPU_I64, 0, NULL);
    tpux_copy(&dst, &src);
  }
}

static void clear_bases(gdev *D) {
  if (D->ntab) memset(D->tab, 0, (size_t)D->captab * sizeof *D->tab);
  D->ntab = 0;
}

static void reset_pending(gdev *D) {
  for (int k = 0; k < D->n; k++) {
    gop *o = &D->ops[k];
    if (o->release) o->release(o->owner);
    free(o->bind);
    free(o->widx);
  }
  D->n = 0;
  D->nw = 0;
  D->np = 0;
  clear_bases(D);
  D->s = NULL;
}

static void remember_step(gdev *D, int len, uint64_t h) {
  for (int q = 0; q < D->nknown; q++)
    if (D->known[q].len == len && D->known[q].h == h) return;
  D->known[D->known_next].len = len;
  D->known[D->known_next].h = h;
  D->known_next = (D->known_next + 1) % MAX_KNOWN;
  if (D->nknown < MAX_KNOWN) D->nknown++;
}

/* loop signature of op k with its bindings: inputs computed by ops at or
 * after `start` count by distance, everything earlier as a parameter (so
 * start = 0 gives the signature seen while recording after a flush) */
static uint64_t op_sig(const gdev *D, int k, int start) {
  const gop *o = &D->ops[k];
  tpu_hash h = tpu_hash_init();
  TPU_HASH_FIELD(&h, o->sl);
  for (int j = 0; j < o->nin; j++) {
    const gbind *b = &o->bind[j];
    int32_t d = b->kind != B_PARAM && b->k >= start ? k - b->k : -1;
    int32_t kind = d < 0 ? B_PARAM : b->kind;
    TPU_HASH_FIELD(&h, kind);
    TPU_HASH_FIELD(&h, d);
    if (d >= 0) TPU_HASH_FIELD(&h, b->i);
  }
  return h.a;
}

static int blocks_equal(const gdev *D, int a, int b, int p) {
  for (int t = 0; t < p; t++)
    if (D->ops[a + t].sb != D->ops[b + t].sb) return 0;
  return 1;
}

/* smallest period p whose repetition covers most of the pending sequence:
 * a run of trailing blocks identical with their bindings, plus the block
 * before it when that one is identical once values from before each block
 * count as parameters (a first step reads what later steps get from the
 * step before). Covering more than half the sequence keeps a step that
 * itself repeats a shorter unit from being cut into that unit, and so does
 * requiring that the last block writes state in place (carries_state): a
 * chain x = f(x) repeated five times into fresh buffers is one step. */
/* Whether ops [from, n) write memory that an op of the sequence read as a
 * parameter: state carried from step to step in place (parameters and
 * optimizer moments updated in place, caches). Without it the repeats are
 * a unit inside one step (x = f(x) five times into fresh buffers). */
static int carries_state(gdev *D, int from) {
  for (int k = from; k < D->n; k++)
    for (int i = 0; i < D->ops[k].nout; i++) {
      gbase *b = base_find(D, D->ops[k].outs[i].base);
      if (b && b->phead >= 0) return 1;
    }
  return 0;
}

static void detect_period(gdev *D) {
  int n = D->n;
  for (int p = MIN_STEP; 2 * p <= n; p++) {
    int c = 1;
    while ((c + 1) * p <= n && blocks_equal(D, n - (c + 1) * p, n - p, p)) c++;
    int cov = c * p, e = n - (c + 1) * p;
    if (e >= 0) {
      int ok = 1;
      for (int t = 0; t < p && ok; t++)
        ok = op_sig(D, e + t, e) == op_sig(D, e + p + t, e + p);
      if (ok) cov += p;
    }
    if (cov < 2 * p || 2 * cov <= n || !carries_state(D, n - p)) continue;
    uint64_t h = 0;
    for (int t = 0; t < p; t++) h = roll_step(h, op_sig(D, n - p + t, n - p));
    remember_step(D, p, h);
    return;
  }
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static gtask *task_clone(const gtask *T);

/* Flush D's pending ops (lock held). keep != NULL (capture end): also
 * return a copy of the task (*keep, NULL if nothing observable). */
static int flush_with(gdev *D, int reason, gtask **keep) {
  int n = D->n, rc = TPU_OK;
  if (D->step_done) reason = TPUG_R_LOOP; /* whatever comes first cuts at the step's end */
  D->step_done = 0;
  if (n == 0) {
    for (int i = 0; i < D->nd; i++) tpurt_free(D->deferred[i]);
    D->nd = 0;
    clear_bases(D); /* fresh allocations are materialized by any flush */
    return TPU_OK;
  }
  if (D->capturing && !keep && !D->broken) D->broken = 1 + reason; /* a forced flush cuts it */
  /* loop detection: remember this sequence (not a cut by the cap) and the
   * period of its tail (k identical steps flushed together) */
  if (reason != TPUG_R_STRICT && reason != TPUG_R_LOOP && !D->capturing &&
      n >= MIN_STEP) {
    if (reason != TPUG_R_CAP) remember_step(D, n, D->ops[n - 1].roll);
    detect_period(D);
  }

  /* key: op structure, bindings, live outputs */
  tpu_hash h = tpu_hash_init();
  uint32_t ver = 4; /* 2: rng keys lifted into parameters; 3: word hash; 4: attribute arrays hashed up to their last nonzero element */
  TPU_HASH_FIELD(&h, ver);
  TPU_HASH_FIELD(&h, D->np);
  int nconst = 0, nrng = 0, nouts = 0;
  uint64_t elided = 0, elided_bytes = 0;
  for (int k = 0; k < n; k++) {
    const gop *o = &D->ops[k];
    TPU_HASH_FIELD(&h, o->sk1);
    TPU_HASH_FIELD(&h, o->sk2);
    for (int j = 0; j < o->nin; j++) {
      const gbind *b = &o->bind[j];
      TPU_HASH_FIELD(&h, b->kind);
      if (b->kind == B_PARAM) TPU_HASH_FIELD(&h, b->j);
      else {
        TPU_HASH_FIELD(&h, b->k);
        TPU_HASH_FIELD(&h, b->i);
      }
      if (b->kind == B_VIEW) {
        const tpu_view *W = &D->ops[b->k].outs[b->i];
        int64_t rel = b->v.offset - W->offset;
        TPU_HASH_FIELD(&h, rel);
        TPU_HASH_FIELD(&h, b->v.ndim);
        tpu_hash_bytes(&h, b->v.sizes, sizeof(int64_t) * (size_t)b->v.ndim);
        tpu_hash_bytes(&h, b->v.strides, sizeof(int64_t) * (size_t)b->v.ndim);
        tpu_hash_bytes(&h, W->strides, sizeof(int64_t) * (size_t)W->ndim); /* a permuted W */
      }
    }
    for (int i = 0; i < o->nout; i++) {
      int live = out_live(D, k, i);
      TPU_HASH_FIELD(&h, live);
      if (live) nouts++;
      else if (D->w[o->widx[i]].dead) {
        elided++;
        elided_bytes += (uint64_t)tpu_view_numel(&o->outs[i]) *
                        tpu_dtype_size(o->outs[i].dtype);
      }
    }
    int nn = tpuir_num_nodes(o->g);
    for (int t = 0; t < nn; t++) {
      const tpuir_node *s = tpuir_get_node(o->g, t);
      nconst += s->op == TPUIR_CONST;
      nrng += lifted_rng(s);
    }
  }

  /* rng key: 2 slots */
  gtask *T = task_alloc(D->np + nconst + nrng, nouts, 8 * (size_t)(nconst + 2 * nrng + 1), nrng);
  if (!T) {
    rc = tpu_error(TPU_E_OOM, "fused eager: out of host memory");
    goto out;
  }
  T->np = D->np;
  for (int j = 0; j < D->np; j++) T->ins[j] = D->p[j].v;
  int c = 0, ni = 0, oi = 0;
  for (int k = 0; k < n; k++) {
    const gop *o = &D->ops[k];
    int nn = tpuir_num_nodes(o->g);
    for (int t = 0; t < nn; t++) {
      const tpuir_node *s = tpuir_get_node(o->g, t);
      if (s->op == TPUIR_CONST) {
        write_const(s, T->consts + 8 * c);
        tpu_view_init_contiguous(&T->ins[D->np + ni++], T->consts + 8 * c, s->dtype, 0,
                                 NULL);
        c++;
      } else if (lifted_rng(s)) {
        int64_t key[2] = {(int64_t)s->seed, (int64_t)s->offset}, two = 2;
        memcpy(T->consts + 8 * c, key, sizeof key);
        T->rng[T->nrng++] = D->np + ni;
        tpu_view_init_contiguous(&T->ins[D->np + ni++], T->consts + 8 * c, TPU_I64, 1,
                                 &two);
        c += 2;
      }
    }
    for (int i = 0; i < o->nout; i++)
      if (out_live(D, k, i)) T->outs[oi++] = o->outs[i];
  }

  int from_disk = 0;
  T->prog = tpug__cache_get(h.a, h.b, &from_disk);
  if (!T->prog) {
    double t0 = now_s();
    tpuir_graph *g = merge(D, n);
    double dt = now_s() - t0;
    if (!g) {
      task_free(T);
      rc = tpu_last_error_code() ? tpu_last_error_code() : TPU_E_INTERNAL;
      goto out;
    }
    T->prog = tpug__cache_put(h.a, h.b, g);
    pthread_mutex_lock(&g_stat_mu);
    g_st.misses++;
    g_st.compile_seconds += dt;
    pthread_mutex_unlock(&g_stat_mu);
    if (!T->prog) {
      task_free(T);
      rc = tpu_error(TPU_E_OOM, "fused eager: out of host memory");
      goto out;
    }
  }
  pthread_mutex_lock(&g_stat_mu);
  g_st.flushes[reason]++;
  g_st.outputs_written += (uint64_t)nouts;
  g_st.outputs_elided += elided;
  g_st.bytes_elided += elided_bytes;
  if (nouts) g_st.programs_run++;
  pthread_mutex_unlock(&g_stat_mu);
  tpurt_stream *s = D->s;
  if (keep && nouts) {
    *keep = task_clone(T);
    if (!*keep) rc = tpu_error(TPU_E_OOM, "capture: out of host memory");
  }
  if (nouts) {
    const tpuir_graph *gs[n > 0 ? n : 1];
    for (int k = 0; k < n; k++) gs[k] = D->ops[k].g;
    trace_attach(T, s, gs, n, reason);
  }
  if (nouts == 0) task_free(T); /* nothing observable to compute */
  else if (rc >= 0) rc = tpurt_stream_enqueue(s, task_run, task_free, T);
  else task_free(T);
out:
  reset_pending(D);
  for (int i = 0; i < D->nd; i++) tpurt_free(D->deferred[i]);
  D->nd = 0;
  return rc;
}

static int flush_locked(gdev *D, int reason) { return flush_with(D, reason, NULL); }

/* Loop detection: a recorded sequence that repeats a known step is flushed
 * at the next call that records or copies, not at its last op, so what the
 * host held only while that op was recorded (autograd's last gradients,
 * an optimizer's temporaries) has been released and is no output of the
 * program. Anything that flushes for another reason first cuts at the same
 * place. Host work between steps (loading the next batch) delays the
 * step's start, not the step rate: a host ahead of the chip keeps earlier
 * steps queued, a host behind it leaves the chip waiting either way
 * (torch_xla's step marks also wait for the next batch). */
static int loop_flush(gdev *D) { return D->step_done ? flush_locked(D, TPUG_R_LOOP) : TPU_OK; }

/* ---- capture / replay -------------------------------------------------------- */

struct tpug_capture {
  gtask *t; /* template: views as captured, consts, program reference */
  int dev;
};

/* A copy of T whose const views point into its own consts buffer. */
static gtask *task_clone(const gtask *T) {
  gtask *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  *c = *T;
  c->ev = NULL; /* events belong to one run */
  c->one_block = 0;
  c->spare = 0;
  c->ins = malloc(sizeof(tpu_view) * (size_t)(T->nin ? T->nin : 1));
  c->outs = malloc(sizeof(tpu_view) * (size_t)(T->nout ? T->nout : 1));
  c->consts = malloc(T->nconst);
  c->rng = T->nrng ? malloc(sizeof(int32_t) * (size_t)T->nrng) : NULL;
  if (!c->ins || !c->outs || !c->consts || (T->nrng && !c->rng)) {
    free(c->ins);
    free(c->outs);
    free(c->consts);
    free(c->rng);
    free(c);
    return NULL;
  }
  memcpy(c->ins, T->ins, sizeof(tpu_view) * (size_t)T->nin);
  memcpy(c->outs, T->outs, sizeof(tpu_view) * (size_t)T->nout);
  memcpy(c->consts, T->consts, T->nconst);
  if (T->nrng) memcpy(c->rng, T->rng, sizeof(int32_t) * (size_t)T->nrng);
  for (int j = T->np; j < T->nin; j++)
    c->ins[j].base = c->consts + ((unsigned char *)T->ins[j].base - T->consts);
  __atomic_add_fetch(&c->prog->refs, 1, __ATOMIC_ACQ_REL);
  return c;
}

int tpug_capture_begin(int dev) {
  gdev *D = dev_of(dev);
  if (!D) return tpu_error(TPU_E_INVALID, "tpug_capture_begin: bad device %d", dev);
  pthread_mutex_lock(&D->mu);
  int rc = TPU_OK;
  if (D->capturing) rc = tpu_error(TPU_E_INVALID, "tpug_capture_begin: device %d "
                                   "is already capturing", dev);
  else if (D->n || D->nd) rc = flush_locked(D, TPUG_R_COMPILED);
  if (rc >= 0) {
    D->capturing = 1;
    D->broken = 0;
  }
  pthread_mutex_unlock(&D->mu);
  return rc;
}

int tpug_capture_end(int dev, tpug_capture **out, int *cut) {
  gdev *D = dev_of(dev);
  if (out) *out = NULL;
  if (cut) *cut = -1;
  if (!D || !out) return tpu_error(TPU_E_INVALID, "tpug_capture_end: bad arguments");
  pthread_mutex_lock(&D->mu);
  if (!D->capturing) {
    pthread_mutex_unlock(&D->mu);
    return tpu_error(TPU_E_INVALID, "tpug_capture_end: device %d is not capturing", dev);
  }
  gtask *keep = NULL;
  int broken = D->broken, rc = TPU_OK;
  if (D->n || D->nd) rc = flush_with(D, TPUG_R_COMPILED, broken ? NULL : &keep);
  D->capturing = 0;
  D->broken = 0;
  pthread_mutex_unlock(&D->mu);
  if (cut) *cut = broken - 1;
  if (rc < 0 || !keep) {
    if (keep) task_free(keep);
    if (broken) STAT_ADD(broken_captures, 1);
    return rc;
  }
  tpug_capture *c = malloc(sizeof *c);
  if (!c) {
    task_free(keep);
    return tpu_error(TPU_E_OOM, "capture: out of host memory");
  }
  c->t = keep;
  c->dev = dev;
  *out = c;
  STAT_ADD(captures, 1);
  return TPU_OK;
}

int tpug_capturing(int dev) {
  gdev *D = dev_of(dev);
  if (!D) return 0;
  pthread_mutex_lock(&D->mu);
  int r = D->capturing ? 1 + (D->broken != 0) : 0;
  pthread_mutex_unlock(&D->mu);
  return r;
}

void tpug_capture_free(tpug_capture *c) {
  if (!c) return;
  task_free(c->t);
  free(c);
}

static int add_base(const void **bases, int n, int cap, const void *b) {
  for (int k = 0; k < n && k < cap; k++)
    if (bases[k] == b) return n;
  if (n < cap) bases[n] = b;
  return n + 1;
}

int tpug_capture_bases(const tpug_capture *c, const void **bases, int cap) {
  if (!c) return 0;
  if (!bases) cap = 0;
  /* counting without a buffer needs the distinct set: use a scratch one */
  int tot = c->t->np + c->t->nout;
  const void **tmp = bases;
  if (cap < tot) {
    tmp = malloc(sizeof(void *) * (size_t)(tot ? tot : 1));
    if (!tmp) return tpu_error(TPU_E_OOM, "capture: out of host memory");
  }
  int n = 0;
  for (int j = 0; j < c->t->np; j++) n = add_base(tmp, n, tot, c->t->ins[j].base);
  for (int i = 0; i < c->t->nout; i++) n = add_base(tmp, n, tot, c->t->outs[i].base);
  if (tmp != bases) {
    for (int k = 0; k < n && k < cap; k++) bases[k] = tmp[k];
    free(tmp);
  }
  return n;
}

int tpug_capture_rng(const tpug_capture *c, int64_t *keys, int cap) {
  if (!c) return 0;
  for (int r = 0; r < c->t->nrng && r < cap && keys; r++)
    memcpy(keys + 2 * r, c->t->ins[c->t->rng[r]].base, 2 * sizeof(int64_t));
  return c->t->nrng;
}

static int relocate(tpu_view *v, int nreloc, const void *const *from, void *const *to) {
  for (int k = 0; k < nreloc; k++)
    if (v->base == from[k]) {
      v->base = to[k];
      return TPU_OK;
    }
  return tpu_error(TPU_E_INVALID, "tpug_capture_run: the program uses device memory %p "
                   "that is not among its relocated blocks", v->base);
}

int tpug_capture_run(tpug_capture *c, tpurt_stream *s, int nreloc,
                     const void *const *from, void *const *to,
                     const int64_t *rng_keys) {
  if (!c || !s || nreloc < 0 || (nreloc && (!from || !to)))
    return tpu_error(TPU_E_INVALID, "tpug_capture_run: bad arguments");
  if (tpurt_stream_device(s) != c->dev)
    return tpu_error(TPU_E_INVALID, "tpug_capture_run: program captured on device %d, "
                     "stream of device %d", c->dev, tpurt_stream_device(s));
  gdev *D = dev_of(c->dev);
  gtask *T = task_clone(c->t);
  if (!T) return tpu_error(TPU_E_OOM, "capture: out of host memory");
  int rc = TPU_OK;
  for (int j = 0; j < T->np && rc >= 0; j++) rc = relocate(&T->ins[j], nreloc, from, to);
  for (int i = 0; i < T->nout && rc >= 0; i++) rc = relocate(&T->outs[i], nreloc, from, to);
  if (rc < 0) {
    task_free(T);
    return rc;
  }
  if (rng_keys)
    for (int r = 0; r < T->nrng; r++)
      memcpy(T->ins[T->rng[r]].base, rng_keys + 2 * r, 2 * sizeof(int64_t));
  tpurt_stream_throttle(s, MAX_QUEUED);
  pthread_mutex_lock(&D->mu);
  if (D->n || D->nd) rc = flush_locked(D, TPUG_R_COMPILED);
  pthread_mutex_unlock(&D->mu);
  if (rc < 0) {
    task_free(T);
    return rc;
  }
  trace_attach(T, s, NULL, 0, TPUG_R_COMPILED);
  pthread_mutex_lock(&g_stat_mu);
  g_st.replays++;
  g_st.programs_run++;
  g_st.outputs_written += (uint64_t)T->nout;
  pthread_mutex_unlock(&g_stat_mu);
  return tpurt_stream_enqueue(s, task_run, task_free, T);
}

/* ---- public API ------------------------------------------------------------ */

int tpug_set_mode(int mode) {
  pthread_once(&g_once, init_once);
  if (mode != TPUG_STRICT && mode != TPUG_FUSE && mode != TPUG_DEFER_ALL)
    return tpu_error(TPU_E_INVALID, "tpug_set_mode: bad mode %d", mode);
  int rc = TPU_OK;
  if (mode == TPUG_STRICT) rc = tpug_flush(-1, TPUG_R_MODE);
  __atomic_store_n(&g_mode, mode, __ATOMIC_RELEASE);
  return rc;
}

int tpug_get_mode(void) {
  pthread_once(&g_once, init_once);
  return __atomic_load_n(&g_mode, __ATOMIC_ACQUIRE);
}

/* Strict Eager's fast path (lock held, nothing pending, not capturing): the
 * one-op program's task straight from the op, without recording it. Same
 * key, task and counters as recording the op and flushing it
 * (flush_with), when the program is in the cache; 0 (nothing done) when it
 * is not, and the caller records and flushes it (which compiles it). */
static int strict_run(gdev *D, tpurt_stream *s, const tpuir_graph *g, int nin,
                      const tpu_view *ins, int nout, const tpu_view *outs, int *rc) {
  enum { MAXV = 32 };
  if (nin > MAXV || nout > MAXV) return 0;
  int32_t pj[MAXV]; /* parameter of each input: identical views share one */
  int32_t np = 0;
  for (int j = 0; j < nin; j++) {
    pj[j] = -1;
    if (ins[j].base)
      for (int q = 0; q < j && pj[j] < 0; q++)
        if (ins[q].base == ins[j].base && view_eq(&ins[q], &ins[j])) pj[j] = pj[q];
    if (pj[j] < 0) pj[j] = np++;
  }
  char live[MAXV]; /* an output a later output writes again (equal or covering view) is not */
  int nouts = 0;
  for (int i = 0; i < nout; i++) {
    live[i] = 1;
    for (int q = i + 1; q < nout && live[i]; q++)
      if (outs[i].base && outs[q].base == outs[i].base &&
          (view_eq(&outs[q], &outs[i]) || view_covers(&outs[q], &outs[i])))
        live[i] = 0;
    nouts += live[i];
  }
  /* the key flush_with computes for this one op */
  uint64_t hk[2];
  tpuir_hash(g, 0, hk);
  tpu_hash h = tpu_hash_init();
  uint32_t ver = 4;
  TPU_HASH_FIELD(&h, ver);
  TPU_HASH_FIELD(&h, np);
  TPU_HASH_FIELD(&h, hk[0]);
  TPU_HASH_FIELD(&h, hk[1]);
  for (int j = 0; j < nin; j++) {
    int32_t kind = B_PARAM;
    TPU_HASH_FIELD(&h, kind);
    TPU_HASH_FIELD(&h, pj[j]);
  }
  for (int i = 0; i < nout; i++) {
    int lv = live[i];
    TPU_HASH_FIELD(&h, lv);
  }
  int from_disk = 0;
  tpug_prog *prog = tpug__cache_get(h.a, h.b, &from_disk);
  if (!prog) return 0;
  int nn = tpuir_num_nodes(g), nconst = 0, nrng = 0;
  for (int t = 0; t < nn; t++) {
    const tpuir_node *n = tpuir_get_node(g, t);
    nconst += n->op == TPUIR_CONST;
    nrng += lifted_rng(n);
  }
  gtask *T = task_alloc(np + nconst + nrng, nouts, 8 * (size_t)(nconst + 2 * nrng + 1), nrng);
  if (!T) {
    tpug__prog_unref(prog);
    *rc = tpu_error(TPU_E_OOM, "strict eager: out of host memory");
    return 1;
  }
  T->prog = prog;
  T->np = np;
  for (int j = 0; j < nin; j++) T->ins[pj[j]] = ins[j];
  int c = 0, ni = np;
  for (int t = 0; t < nn; t++) {
    const tpuir_node *n = tpuir_get_node(g, t);
    if (n->op == TPUIR_CONST) {
      write_const(n, T->consts + 8 * c);
      tpu_view_init_contiguous(&T->ins[ni++], T->consts + 8 * c, n->dtype, 0, NULL);
      c++;
    } else if (lifted_rng(n)) {
      int64_t key[2] = {(int64_t)n->seed, (int64_t)n->offset}, two = 2;
      memcpy(T->consts + 8 * c, key, sizeof key);
      T->rng[T->nrng++] = ni;
      tpu_view_init_contiguous(&T->ins[ni++], T->consts + 8 * c, TPU_I64, 1, &two);
      c += 2;
    }
  }
  for (int i = 0, oi = 0; i < nout; i++)
    if (live[i]) T->outs[oi++] = outs[i];
  pthread_mutex_lock(&g_stat_mu);
  g_st.ops_recorded++;
  g_st.flushes[TPUG_R_STRICT]++;
  g_st.outputs_written += (uint64_t)nouts;
  if (nouts) g_st.programs_run++;
  pthread_mutex_unlock(&g_stat_mu);
  if (nouts) trace_attach(T, s, &g, 1, TPUG_R_STRICT);
  if (nouts == 0) {
    task_free(T);
    *rc = TPU_OK;
  } else {
    *rc = tpurt_stream_enqueue(s, task_run, task_free, T);
  }
  for (int i = 0; i < D->nd; i++) tpurt_free(D->deferred[i]);
  D->nd = 0;
  if (D->ntab) clear_bases(D);
  return 1;
}

int tpug_submit(tpurt_stream *s, const tpuir_graph *g, int nin,
                const tpu_view *ins, int nout, const tpu_view *outs, int sync,
                tpurt_cleanup_fn release, void *owner) {
  gdev *D = s ? dev_of(tpurt_stream_device(s)) : NULL;
  if (!D || !g || (nin && !ins) || (nout && !outs)) {
    if (release) release(owner);
    return tpu_error(TPU_E_INVALID, "tpug_submit: bad arguments");
  }
  int mode = tpug_get_mode();
  int fuse = mode != TPUG_STRICT;
  int deferred = 0;
  /* the host runs at most MAX_QUEUED programs ahead of the chip (before
   * taking the recorder lock: the tasks being waited for may need it) */
  tpurt_stream_throttle(s, MAX_QUEUED);
  pthread_mutex_lock(&D->mu);
  if (D->capturing || mode == TPUG_DEFER_ALL) { /* index checks deferred too */
    fuse = 1;
    deferred = sync;
    sync = 0;
  }
  int rc = loop_flush(D);
  if (rc >= 0 && !fuse && !D->n && strict_run(D, s, g, nin, ins, nout, outs, &rc)) {
    pthread_mutex_unlock(&D->mu);
    if (release) release(owner);
    if (rc == TPU_OK && sync) rc = tpurt_stream_synchronize(s);
    return rc;
  }
  if (rc >= 0 && D->n && D->s != s) rc = flush_locked(D, TPUG_R_STREAM);
  if (rc >= 0 && D->n && sync) rc = flush_locked(D, TPUG_R_SYNC_OP);
  if (rc >= 0 && D->n && check_conflicts(D, nin, ins, nout, outs))
    rc = flush_locked(D, TPUG_R_ALIAS);
  if (rc < 0) {
    pthread_mutex_unlock(&D->mu);
    if (release) release(owner);
    return rc;
  }
  /* record */
  gbind *bind = calloc((size_t)(nin ? nin : 1), sizeof *bind);
  int32_t *widx = calloc((size_t)(nout ? nout : 1), sizeof *widx);
  int oom = !bind || !widx;
  while (!oom && D->n >= D->cap) oom = grow((void **)&D->ops, &D->cap, sizeof *D->ops) != 0;
  while (!oom && D->np + nin > D->capp) oom = grow((void **)&D->p, &D->capp, sizeof *D->p) != 0;
  while (!oom && D->nw + nout > D->capw) oom = grow((void **)&D->w, &D->capw, sizeof *D->w) != 0;
  if (oom) {
    free(bind);
    free(widx);
    pthread_mutex_unlock(&D->mu);
    if (release) release(owner);
    return tpu_error(TPU_E_OOM, "fused eager: out of host memory");
  }
  D->s = s;
  int k = D->n;
  for (int j = 0; j < nin; j++) resolve_param(D, &ins[j], &bind[j]);
  for (int i = 0; i < nout; i++) {
    gbase *b = base_get(D, outs[i].base);
    for (int w = b ? b->whead : -1; w >= 0; w = D->w[w].next)
      if (!D->w[w].superseded &&
          (view_eq(&D->w[w].v, &outs[i]) || view_covers(&outs[i], &D->w[w].v)))
        D->w[w].superseded = 1;
    gwriter *W = &D->w[D->nw];
    memset(W, 0, sizeof *W);
    W->v = outs[i];
    W->k = k;
    W->i = i;
    W->next = b ? b->whead : -1;
    if (b) b->whead = D->nw;
    widx[i] = D->nw++;
  }
  gop *o = &D->ops[k];
  memset(o, 0, sizeof *o);
  o->g = g;
  o->nin = nin;
  o->nout = nout;
  o->ins = ins;
  o->outs = outs;
  o->release = release;
  o->owner = owner;
  o->bind = bind;
  o->widx = widx;
  uint64_t hk[2], hl[2] = {0, 0};
  tpuir_hash(g, 0, hk);
  if (fuse) tpuir_hash(g, TPUIR_HASH_LOOP, hl);
  o->sk1 = hk[0];
  o->sk2 = hk[1];
  o->sl = hl[0];
  o->sb = fuse ? op_sig(D, k, 0) : 0;
  o->roll = roll_step(k ? D->ops[k - 1].roll : 0, o->sb);
  D->n++;
  pthread_mutex_lock(&g_stat_mu);
  g_st.ops_recorded++;
  pthread_mutex_unlock(&g_stat_mu);

  if (!fuse) rc = flush_locked(D, TPUG_R_STRICT);
  else if (sync) rc = flush_locked(D, TPUG_R_SYNC_OP);
  else if (D->capturing) rc = deferred ? TPUG_DEFERRED : TPU_OK;
  else if (D->n >= g_max_ops) rc = flush_locked(D, TPUG_R_CAP);
  else if (D->n >= MIN_STEP) {
    for (int q = 0; q < D->nknown; q++)
      if (D->known[q].len == D->n && D->known[q].h == o->roll) {
        D->step_done = 1;
        break;
      }
  }
  pthread_mutex_unlock(&D->mu);
  if (rc >= 0 && deferred) return TPUG_DEFERRED; /* checked when it runs */
  /* a sync op (index range checks) reports its input errors at the call:
   * wait for the stream */
  if (rc == TPU_OK && sync) rc = tpurt_stream_synchronize(s);
  return rc;
}

int tpug_flush(int dev, int reason) {
  pthread_once(&g_once, init_once);
  if (reason < 0 || reason >= TPUG_NUM_REASONS) reason = TPUG_R_SYNC;
  if (dev < 0) {
    int rc = TPU_OK;
    for (int d = 0; d < MAX_DEV; d++) {
      gdev *D = &g_dev[d];
      pthread_mutex_lock(&D->mu);
      int r = (D->n || D->nd || D->ntab) ? flush_locked(D, reason) : TPU_OK;
      pthread_mutex_unlock(&D->mu);
      if (r < 0 && rc >= 0) rc = r;
    }
    return rc;
  }
  gdev *D = dev_of(dev);
  if (!D) return tpu_error(TPU_E_INVALID, "tpug_flush: bad device %d", dev);
  pthread_mutex_lock(&D->mu);
  int rc = (D->n || D->nd || D->ntab) ? flush_locked(D, reason) : TPU_OK;
  pthread_mutex_unlock(&D->mu);
  return rc;
}

int tpug_flush_if_uses(int dev, const void *base, int reason) {
  gdev *D = dev_of(dev);
  if (!D) return TPU_OK;
  pthread_mutex_lock(&D->mu);
  int rc = loop_flush(D);
  gbase *b = rc >= 0 ? base_find(D, base) : NULL;
  if (b && (b->whead >= 0 || b->phead >= 0)) rc = flush_locked(D, reason);
  else if (b) b->fresh = 0; /* used by the host or a copy: materialized */
  pthread_mutex_unlock(&D->mu);
  return rc;
}

int tpug_free(void *ptr) {
  if (!ptr) return TPU_OK;
  gdev *D = dev_of(tpurt_ptr_device(ptr));
  if (!D) return tpurt_free(ptr);
  pthread_mutex_lock(&D->mu);
  gbase *b = base_find(D, ptr);
  if (b) b->fresh = 0;
  if (b && b->whead < 0 && b->phead < 0) b = NULL; /* not used by pending ops */
  if (b && D->nd >= D->capd &&
      grow((void **)&D->deferred, &D->capd, sizeof *D->deferred) != 0)
    b = NULL;
  if (b) {
    for (int w = b->whead; w >= 0; w = D->w[w].next) D->w[w].dead = 1;
    D->deferred[D->nd++] = ptr;
    pthread_mutex_unlock(&D->mu);
    return TPU_OK;
  }
  pthread_mutex_unlock(&D->mu);
  return tpurt_free(ptr);
}

int tpug_note_alloc(void *base) {
  if (!base || tpug_get_mode() == TPUG_STRICT) return TPU_OK;
  gdev *D = dev_of(tpurt_ptr_device(base));
  if (!D) return TPU_OK;
  pthread_mutex_lock(&D->mu);
  gbase *b = D->capturing ? NULL : base_get(D, base);
  if (b) b->fresh = 1;
  pthread_mutex_unlock(&D->mu);
  return TPU_OK; /* no table space: the block just reads as materialized */
}

int tpug_is_pending(const void *base) {
  gdev *D = dev_of(tpurt_ptr_device(base));
  if (!D) return 0;
  pthread_mutex_lock(&D->mu);
  gbase *b = base_find(D, base);
  int r = b && b->fresh;
  for (int w = b ? b->whead : -1; w >= 0 && !r; w = D->w[w].next)
    r = !D->w[w].superseded && !D->w[w].dead;
  pthread_mutex_unlock(&D->mu);
  return r;
}

int tpug_pending_ops(int dev) {
  gdev *D = dev_of(dev);
  if (!D) return 0;
  pthread_mutex_lock(&D->mu);
  int n = D->n;
  pthread_mutex_unlock(&D->mu);
  return n;
}

size_t tpug_dump(int dev, int format, char *buf, size_t cap) {
  gdev *D = dev_of(dev);
  if (buf && cap) buf[0] = 0;
  if (!D) return 0;
  pthread_mutex_lock(&D->mu);
  tpuir_graph *g = D->n ? merge(D, D->n) : NULL;
  pthread_mutex_unlock(&D->mu);
  if (!g) return 0;
  size_t len;
  if (format == 0) {
    len = tpuir_dump(g, buf, cap);
  } else if (format == 2) {
    char *text = NULL;
    len = 0;
    if (tpux_emit_stablehlo(g, &text, &len) < 0) len = 0;
    if (buf && cap) {
      size_t k = len < cap ? len : cap - 1;
      memcpy(buf, text ? text : "", k);
      buf[k] = 0;
    }
    free(text);
  } else {
    size_t need = 0;
    int nn = tpuir_num_nodes(g);
#define DOT(...)                                                              \
  do {                                                                        \
    int w_ = snprintf(buf && need < cap ? buf + need : NULL,                  \
                      buf && need < cap ? cap - need : 0, __VA_ARGS__);       \
    need += (size_t)(w_ > 0 ? w_ : 0);                                        \
  } while (0)
    DOT("digraph pending {\n");
    for (int t = 0; t < nn; t++) {
      const tpuir_node *n = tpuir_get_node(g, t);
      DOT("  n%d [label=\"%%%d %s %s\"];\n", t, t, tpuir_op_name(n->op),
          tpu_dtype_name(n->dtype));
      const tpuir_val *ops = n->nlist ? n->list : n->in; /* CONCAT, CUSTOM_CALL */
      int no = n->nlist ? n->nlist : n->nin;
      for (int k = 0; k < no; k++) DOT("  n%d -> n%d;\n", (int)ops[k], t);
    }
    for (int i = 0; i < tpuir_num_outputs(g); i++)
      DOT("  out%d [shape=box]; n%d -> out%d;\n", i, (int)tpuir_output(g, i), i);
    DOT("}\n");
#undef DOT
    len = need;
    if (buf && cap && need >= cap) buf[cap - 1] = 0;
  }
  tpuir_graph_free(g);
  return len;
}

void tpug_get_stats(tpug_stats *out) {
  pthread_mutex_lock(&g_stat_mu);
  *out = g_st;
  pthread_mutex_unlock(&g_stat_mu);
  tpug__cache_count(&out->hits, &out->disk_hits, &out->entries);
}

void tpug_reset_stats(void) {
  pthread_mutex_lock(&g_stat_mu);
  memset(&g_st, 0, sizeof g_st);
  pthread_mutex_unlock(&g_stat_mu);
  tpug__cache_reset_counts();
}

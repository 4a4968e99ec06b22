/* lower/lower.c - the ATen -> IR lowering table and its generic driver:
 * tpulw_op_flags/tpulw_list (one sorted table over every family's rows),
 * tpulw_prepare (find the lowering, build the functional graph, decide
 * output destinations, check in-place/out= shapes and dtype casts, append
 * converts) and tpulw_launch (enqueue the graph on a stream).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/internal.h"
#include "lower/internal.h"
#include "tpu_exec.h"
#include "tpu_graph.h"

/* ---- the table ---------------------------------------------------------- */

static tpulw__row *g_table; /* sorted by name, a LW_COMPLEX_ONLY row after
                          the real row of its name */
static const char **g_names; /* distinct names, sorted */
static int g_ntable, g_nnames;
static pthread_once_t g_table_once = PTHREAD_ONCE_INIT;

static int row_cmp(const void *a, const void *b) {
  const tpulw__row *x = a, *y = b;
  int c = strcmp(x->name, y->name);
  if (c) return c;
  return (int)(x->flags & LW_COMPLEX_ONLY) - (int)(y->flags & LW_COMPLEX_ONLY);
}

static void table_init(void) {
  /* every family's rows, with the flags the whole family shares */
  const struct { const tpulw__row *rows; int n; unsigned flags; } fam[] = {
      {tpulw__rows_pointwise, tpulw__nrows_pointwise, LW_ELEMENTWISE},
      {tpulw__rows_reduce, tpulw__nrows_reduce, 0},
      {tpulw__rows_linalg, tpulw__nrows_linalg, 0},
      {tpulw__rows_nn, tpulw__nrows_nn, 0},
      {tpulw__rows_index, tpulw__nrows_index, 0},
      {tpulw__rows_view_scatter, tpulw__nrows_view_scatter, 0},
      {tpulw__rows_random, tpulw__nrows_random, 0},
      {tpulw__rows_conv, tpulw__nrows_conv, 0},
      {tpulw__rows_sort, tpulw__nrows_sort, 0},
      {tpulw__rows_resize, tpulw__nrows_resize, 0},
      {tpulw__rows_dynamic, tpulw__nrows_dynamic, 0},
      {tpulw__rows_compare, tpulw__nrows_compare, LW_ELEMENTWISE},
      {tpulw__rows_spectral, tpulw__nrows_spectral, 0},
      {tpulw__rows_linalg_solve, tpulw__nrows_linalg_solve, 0},
      {tpulw__rows_loss, tpulw__nrows_loss, 0},
      {tpulw__rows_embedding, tpulw__nrows_embedding, 0},
      {tpulw__rows_distance, tpulw__nrows_distance, 0},
      {tpulw__rows_complex, tpulw__nrows_complex, LW_COMPLEX_OK},
      {tpulw__rows_fft, tpulw__nrows_fft, LW_COMPLEX_OK},
      {tpulw__rows_special, tpulw__nrows_special, LW_ELEMENTWISE},
      {tpulw__rows_attention, tpulw__nrows_attention, 0},
      {tpulw__rows_transformer, tpulw__nrows_transformer, 0},
  };
  int total = 0;
  for (size_t f = 0; f < sizeof fam / sizeof fam[0]; f++) total += fam[f].n;
  size_t cnt = (size_t)(total ? total : 1);
  tpulw__row *t = malloc(cnt * sizeof *t);
  const char **names = malloc(cnt * sizeof *names);
  if (!t || !names) {
    free(t);
    free(names);
    return;
  }
  int k = 0;
  for (size_t f = 0; f < sizeof fam / sizeof fam[0]; f++)
    for (int i = 0; i < fam[f].n; i++) {
      t[k] = fam[f].rows[i];
      t[k++].flags |= fam[f].flags;
    }
  qsort(t, (size_t)total, sizeof *t, row_cmp);
  /* drop duplicates (first wins; tests check there are none) */
  int m = 0, nn = 0;
  for (int i = 0; i < total; i++) {
    if (m > 0 && row_cmp(&t[m - 1], &t[i]) == 0) continue;
    t[m++] = t[i];
    if (nn == 0 || strcmp(names[nn - 1], t[i].name) != 0) names[nn++] = t[i].name;
  }
  g_table = t;
  g_names = names;
  g_ntable = m;
  g_nnames = nn;
}

static int overload_is_default(const char *ov) {
  return !ov || !*ov || strcmp(ov, "default") == 0;
}

/* "name" or "name.overload", truncated to cap - 1 (on every op call: no
 * printf) */
static void make_key(char *buf, size_t cap, const char *name,
                     const char *overload) {
  size_t k = 0;
  for (const char *p = name ? name : ""; *p && k + 1 < cap; p++) buf[k++] = *p;
  if (!overload_is_default(overload)) {
    if (k + 1 < cap) buf[k++] = '.';
    for (const char *p = overload; *p && k + 1 < cap; p++) buf[k++] = *p;
  }
  buf[k] = 0;
}

/* The first row named name.overload (a real row sorts before the
 * LW_COMPLEX_ONLY row of the same name); NULL if none. */
static const tpulw__row *first_row(const char *name, const char *overload) {
  pthread_once(&g_table_once, table_init);
  if (!g_table) return NULL;
  char key[256];
  make_key(key, sizeof key, name, overload);
  int lo = 0, hi = g_ntable; /* first row with name >= key */
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (strcmp(g_table[mid].name, key) < 0) lo = mid + 1;
    else hi = mid;
  }
  return lo < g_ntable && strcmp(g_table[lo].name, key) == 0 ? &g_table[lo] : NULL;
}

/* The row lowering a call of name.overload (complex: with complex
 * arguments); NULL if none. */
static const tpulw__row *find_row(const char *name, const char *overload, int complex) {
  const tpulw__row *r = first_row(name, overload);
  if (!r) return NULL;
  if (!complex) return (r->flags & LW_COMPLEX_ONLY) ? NULL : r;
  if (r + 1 < g_table + g_ntable && strcmp(r[1].name, r->name) == 0) r++; /* the complex row */
  return (r->flags & (LW_COMPLEX_OK | LW_COMPLEX_ONLY)) ? r : NULL;
}

const char *const *tpulw_list(int *n) {
  pthread_once(&g_table_once, table_init);
  if (n) *n = g_nnames;
  return g_names;
}

unsigned tpulw_op_flags(const char *name, const char *overload) {
  const tpulw__row *r = first_row(name, overload);
  if (!r) /* user C kernels (lower/kernel.c) are not in the table */
    return name && strcmp(name, tpulw__row_c_kernel.name) == 0 ? TPULW_OP_NATIVE : 0u;
  return TPULW_OP_NATIVE | ((r->flags & LW_NEEDS_GEN) ? TPULW_OP_NEEDS_GENERATOR : 0u) |
         ((r->flags & LW_CPU_INDEX) ? TPULW_OP_CPU_INDICES : 0u);
}

/* ---- plans -------------------------------------------------------------- */

typedef struct pc_entry pc_entry;
static void pc_unref(pc_entry *e);

#define PLAN_INLINE_PARAMS 4

struct tpulw_plan {
  tpuir_graph *g;     /* owned, or shared->g (borrowed while the plan lives) */
  pc_entry *shared;   /* the plan cache's entry this plan came from */
  int device;
  int sync;
  int err_remap;
  int nparams;
  tpu_view *params;   /* params_in, or owned */
  int nout;
  tpulw_out_info outs[LW_MAX_RES];
  tpu_view out_views[LW_MAX_RES];
  tpu_view params_in[PLAN_INLINE_PARAMS];
};

/* freed plans, reused by the next op's (base/internal.h) */
static tpu_spares g_plan_spares;

/* An uninitialised plan (caller frees with tpu__spare_put), NULL on OOM. */
static tpulw_plan *plan_alloc(void) {
  tpulw_plan *p = tpu__spare_get(&g_plan_spares);
  return p ? p : malloc(sizeof *p);
}

void tpulw_plan_free(tpulw_plan *p) {
  if (!p) return;
  if (p->shared) pc_unref(p->shared);
  else tpuir_graph_free(p->g);
  if (p->params != p->params_in) free(p->params);
  tpu__spare_put(&g_plan_spares, p);
}

int tpulw_plan_num_outputs(const tpulw_plan *p) { return p ? p->nout : 0; }

const tpulw_out_info *tpulw_plan_output(const tpulw_plan *p, int i) {
  if (!p || i < 0 || i >= p->nout) return NULL;
  return &p->outs[i];
}

const tpuir_graph *tpulw_plan_graph(const tpulw_plan *p) {
  return p ? p->g : NULL;
}

/* "[2, 3]" */
static void fmt_shape(char *buf, size_t cap, int nd, const int64_t *sizes) {
  size_t k = (size_t)snprintf(buf, cap, "[");
  for (int i = 0; i < nd && k < cap; i++)
    k += (size_t)snprintf(buf + k, cap - k, "%s%lld", i ? ", " : "",
                          (long long)sizes[i]);
  if (k < cap) snprintf(buf + k, cap - k, "]");
}

static int same_shape(int nd, const int64_t *s, int nd2, const int64_t *s2) {
  if (nd != nd2) return 0;
  for (int i = 0; i < nd; i++)
    if (s[i] != s2[i]) return 0;
  return 1;
}

static int check_dest_dtype(const tpulw__b *b, int res_dt, int dest_dt) {
  if (res_dt == dest_dt) return TPU_OK;
  if (b->out_rule == LW_OUT_ANY) return TPU_OK;
  if (b->out_rule == LW_OUT_SAME)
    return tpu_error(TPU_E_INVALID,
                     "Expected out tensor to have dtype %s, but got %s instead",
                     tpulw__c_name(res_dt), tpulw__c_name(dest_dt));
  if (!tpulw__can_cast(res_dt, dest_dt))
    return tpu_error(TPU_E_INVALID,
                     "result type %s can't be cast to the desired output type %s",
                     tpulw__torch_name(res_dt), tpulw__torch_name(dest_dt));
  return TPU_OK;
}

static int check_devices(const tpulw_ctx *ctx, const tpulw_arg *args,
                         int nargs) {
  for (int i = 0; i < nargs; i++) {
    const tpulw_arg *a = &args[i];
    const tpulw_tensor *ts = NULL;
    int n = 0;
    if (a->kind == TPULW_TENSOR) {
      ts = &a->t;
      n = 1;
    } else if (a->kind == TPULW_TENSORS) {
      ts = a->tensors;
      n = a->n;
    }
    for (int j = 0; j < n; j++) {
      if (!ts[j].defined || ts[j].device < 0) continue;
      if (ts[j].device != ctx->device)
        return tpu_error(TPU_E_INVALID,
                         "Expected all tensors to be on the same device, but "
                         "found at least two devices, tpu:%d and tpu:%d!",
                         ctx->device, ts[j].device);
      if (ts[j].view.dtype < 0 || ts[j].view.dtype >= TPU_NUM_DTYPES)
        return tpu_error(TPU_E_UNSUPPORTED, "unsupported dtype");
    }
  }
  return TPU_OK;
}

/* In-place ATen names end in '_' ("add_"); of the dunder names only the
 * "__i...__" ones are in place (__iand__, __ilshift__; not __and__). */
static int ends_with_underscore(const char *s) {
  size_t n = strlen(s);
  if (n > 4 && s[0] == '_' && s[1] == '_' && s[n - 1] == '_' && s[n - 2] == '_')
    return s[2] == 'i';
  return n > 0 && s[n - 1] == '_';
}

/* Decide where each result goes and append converts. */
/* TensorIterator's output layout for a new result of an elementwise op:
 * dims ordered innermost-first by the first tensor input (in argument
 * order) whose strides tell them apart, broadcast dims ignored, equal
 * strides broken by size (TensorIterator::reorder_dimensions); the result
 * is dense in that order. 0 when that order is the natural one (a plain
 * contiguous result), 1 with strides[] filled otherwise. */
static int ti_layout(const tpulw__b *b, int ndim, const int64_t *sizes, int64_t *strides) {
  if (ndim < 2) return 0;
  const tpu_view *ops[16];
  int nops = 0;
  for (int k = 0; k < b->nargs && nops < 16; k++) {
    const tpulw_arg *a = &b->args[k];
    if (a->kind != TPULW_TENSOR || a->is_output || a->t.view.ndim == 0 ||
        a->t.view.ndim > ndim || !a->t.view.base)
      continue;
    ops[nops++] = &a->t.view;
  }
  if (nops == 0) return 0;
  int all_contig = 1; /* TensorIterator's fast path: a contiguous result */
  for (int o = 0; o < nops; o++) all_contig &= tpu_view_is_contiguous(ops[o]);
  if (all_contig) return 0;
  /* stride of operand o along output dim d (0: broadcast) */
#define TI_STRIDE(o, d)                                                        \
  ((d) - (ndim - ops[o]->ndim) < 0 ||                                          \
           (ops[o]->sizes[(d) - (ndim - ops[o]->ndim)] == 1 && sizes[d] != 1)  \
       ? 0                                                                     \
       : ops[o]->strides[(d) - (ndim - ops[o]->ndim)])
  int perm[TPU_MAX_DIMS]; /* perm[0] = innermost dim */
  for (int i = 0; i < ndim; i++) perm[i] = ndim - 1 - i;
  for (int i = 1; i < ndim; i++) {
    int d1 = i;
    for (int d0 = i - 1; d0 >= 0; d0--) {
      int cmp = 0;
      for (int o = 0; o < nops && cmp == 0; o++) {
        int64_t s0 = TI_STRIDE(o, perm[d0]), s1 = TI_STRIDE(o, perm[d1]);
        if (s0 == 0 || s1 == 0) continue;
        if (s0 < s1) cmp = -1;
        else if (s0 > s1) cmp = 1;
        else if (sizes[perm[d0]] > sizes[perm[d1]]) cmp = 1;
      }
      if (cmp > 0) {
        int t = perm[d0];
        perm[d0] = perm[d1];
        perm[d1] = t;
        d1 = d0;
      } else if (cmp < 0) {
        break;
      }
    }
  }
#undef TI_STRIDE
  int natural = 1;
  for (int i = 0; i < ndim; i++) natural &= perm[i] == ndim - 1 - i;
  if (natural) return 0;
  int64_t st = 1;
  for (int i = 0; i < ndim; i++) {
    strides[perm[i]] = st;
    st *= sizes[perm[i]];
  }
  return 1;
}

static int place_outputs(tpulw__b *b, tpulw_plan *p) {
  int inplace = ends_with_underscore(b->base);
  /* out= destinations: (arg, element) pairs of is_output args, in order,
   * except args written explicitly (tpulw__result_to / tpulw__not_out) */
  int dargs[LW_MAX_RES], delems[LW_MAX_RES], nd = 0, nauto = 0;
  for (int i = 0; i < b->nres; i++)
    if (b->res_dest[i] < 0 && !(inplace && i == 0)) nauto++;
  if (!inplace) {
    for (int k = 0; k < b->nargs; k++) {
      const tpulw_arg *a = &b->args[k];
      if (!a->is_output || (k < 64 && (b->not_out >> k) & 1)) continue;
      int n = a->kind == TPULW_TENSOR ? 1 : a->kind == TPULW_TENSORS ? a->n : 0;
      for (int e = 0; e < n; e++) {
        if (nd == LW_MAX_RES)
          return tpu_error(TPU_E_UNSUPPORTED, "too many out= tensors");
        dargs[nd] = k;
        delems[nd++] = e;
      }
    }
    if (nd > 0 && nd != nauto)
      return tpu_error(TPU_E_INTERNAL,
                       "lowering of %s.%s produced %d results for %d out= "
                       "tensors", b->base, b->overload, nauto, nd);
  }
  tpuir_val outs[LW_MAX_RES];
  int next = 0;
  for (int i = 0; i < b->nres; i++) {
    tpulw__shape s = tpulw__info(b, b->res[i]);
    tpulw_out_info *o = &p->outs[i];
    memset(o, 0, sizeof *o);
    o->dtype = s.dtype;
    o->ndim = s.ndim;
    memcpy(o->sizes, s.sizes, sizeof o->sizes);
    o->dest_arg = -1;
    o->col_major = s.ndim >= 2 && i < 32 && ((b->col_major >> i) & 1);
    if (b->elementwise && !o->col_major)
      o->strided = ti_layout(b, s.ndim, s.sizes, o->strides);
    const tpulw_tensor *dest = NULL;
    int explicit_dest = b->res_dest[i] >= 0;
    if (explicit_dest || (inplace && i == 0)) {
      int idx = b->res_dest[i];
      if (!explicit_dest) {
        for (int k = 0; k < b->nargs; k++)
          if (b->args[k].name && strcmp(b->args[k].name, "self") == 0) idx = k;
        if (idx < 0) /* no "self": first tensor arg marked written */
          for (int k = 0; k < b->nargs && idx < 0; k++)
            if (b->args[k].is_output && b->args[k].kind == TPULW_TENSOR) idx = k;
      }
      if (idx < 0 || b->args[idx].kind != TPULW_TENSOR ||
          !b->args[idx].t.defined || b->args[idx].t.device < 0)
        return tpu_error(TPU_E_UNSUPPORTED,
                         "in-place op without a device tensor self");
      dest = &b->args[idx].t;
      if (!same_shape(s.ndim, s.sizes, dest->view.ndim, dest->view.sizes)) {
        char a[256], c[256];
        fmt_shape(a, sizeof a, dest->view.ndim, dest->view.sizes);
        fmt_shape(c, sizeof c, s.ndim, s.sizes);
        return tpu_error(TPU_E_INVALID,
                         "output with shape %s doesn't match the broadcast "
                         "shape %s", a, c);
      }
      o->dest_arg = idx;
    } else if (nd > 0) {
      const tpulw_arg *a = &b->args[dargs[next]];
      dest = a->kind == TPULW_TENSOR ? &a->t : &a->tensors[delems[next]];
      if (!dest->defined || dest->device < 0)
        return tpu_error(TPU_E_UNSUPPORTED, "out= argument is not a device tensor");
      o->dest_arg = dargs[next];
      o->dest_elem = delems[next];
      next++;
      if (!same_shape(s.ndim, s.sizes, dest->view.ndim, dest->view.sizes))
        o->resize = 1;
    }
    if (dest) {
      if (!explicit_dest) {
        int rc = check_dest_dtype(b, s.dtype, dest->view.dtype);
        if (rc < 0) return rc;
      }
      o->dtype = dest->view.dtype;
    }
    outs[i] = tpulw__convert(b, b->res[i], o->dtype);
    if (outs[i] < 0) return outs[i];
  }
  p->nout = b->nres;
  return tpuir_set_outputs(b->g, b->nres, outs);
}

/* ---- the plan cache: the per-op fast path of Strict Eager ----------------
 * An elementwise call (a row with LW_ELEMENTWISE) builds the same graph,
 * output infos and parameter bindings whenever its descriptor is the
 * same: op name and overload, the context, and per argument its name,
 * kind and value, tensors described by device, dtype, sizes, strides,
 * wrapped-number flag and which earlier tensor argument has the identical
 * view (identical views share one parameter) - not by address or offset,
 * which only the parameter bindings see. Scalars (and 0-dim CPU tensors)
 * are part of the descriptor by value: a lowering may branch on them
 * (alpha == 1, pow(x, 2)), so another value is another entry. A hit shares
 * the entry's graph (its hashes kept: tpuir_hash_keep, so the recorder
 * does not rehash it) and binds the parameters to this call's views.
 * Descriptors are compared word by word (the hash only picks the slot).
 * Not cached: rows without LW_ELEMENTWISE (they may read device data or
 * draw random numbers), calls with a generator or a tensor list, failed
 * lowerings. Argument and op names are compared by address (the glue
 * passes the schema's strings) and op names by content. TORCH_TPU_PLAN_CACHE=0
 * turns it off (tpulw_plan_cache_stats counts hits and misses). */

#define PC_SLOTS 512      /* direct-mapped */
#define PC_MAX_WORDS 256
#define PC_MAX_TENSORS 16

struct pc_entry {
  int refs;        /* the table's, plus one per live plan */
  uint64_t h;
  int nw;
  uint64_t *w;     /* descriptor words */
  char *name, *overload;
  tpuir_graph *g;
  int sync, err_remap, nparams, nout;
  int16_t parg[PC_MAX_TENSORS]; /* argument bound to each parameter */
  tpulw_out_info outs[LW_MAX_RES];
};

typedef struct pc_desc {
  int n, nt;
  uint64_t h;
  const tpu_view *tv[PC_MAX_TENSORS]; /* device tensor views, in argument order */
  uint64_t w[PC_MAX_WORDS];
} pc_desc;

static pthread_mutex_t g_pc_mu = PTHREAD_MUTEX_INITIALIZER;
static pc_entry *g_pc[PC_SLOTS];
static uint64_t g_pc_hits, g_pc_misses;
static int g_pc_state; /* 0: unread, 1: on, 2: off (TORCH_TPU_PLAN_CACHE=0) */

static int pc_enabled(void) {
  int st = __atomic_load_n(&g_pc_state, __ATOMIC_RELAXED);
  if (st == 0) {
    const char *e = getenv("TORCH_TPU_PLAN_CACHE");
    st = e && (!strcmp(e, "0") || !strcmp(e, "off") || !strcmp(e, "false")) ? 2 : 1;
    __atomic_store_n(&g_pc_state, st, __ATOMIC_RELAXED);
  }
  return st == 1;
}

static void pc_unref(pc_entry *e) {
  if (__atomic_sub_fetch(&e->refs, 1, __ATOMIC_ACQ_REL) != 0) return;
  tpuir_graph_free(e->g);
  free(e->w);
  free(e->name);
  free(e->overload);
  free(e);
}

static uint64_t f2w(double f) {
  uint64_t w;
  memcpy(&w, &f, sizeof w);
  return w;
}

static int same_view_exact(const tpu_view *a, const tpu_view *c) {
  if (a->base != c->base || a->offset != c->offset || a->dtype != c->dtype ||
      a->ndim != c->ndim)
    return 0;
  for (int i = 0; i < a->ndim; i++)
    if (a->sizes[i] != c->sizes[i] || a->strides[i] != c->strides[i]) return 0;
  return 1;
}

/* One tensor's words; 0 if the descriptor is full. */
static int pc_tensor(pc_desc *d, const tpulw_tensor *t) {
  const tpu_view *v = &t->view;
  int nd = v->ndim < 0 || v->ndim > TPU_MAX_DIMS ? 0 : v->ndim;
  if (d->n + 5 + 2 * nd > PC_MAX_WORDS) return 0;
  uint64_t *w = d->w + d->n;
  if (!t->defined) {
    w[0] = 0;
    d->n++;
    return 1;
  }
  uint64_t alias = 0xffff;
  if (t->device >= 0) {
    if (d->nt == PC_MAX_TENSORS) return 0;
    for (int j = 0; j < d->nt && alias == 0xffff; j++)
      if (same_view_exact(d->tv[j], v)) alias = (uint64_t)j;
    d->tv[d->nt++] = v;
  }
  w[0] = 1u | (uint64_t)(t->wrapped_number != 0) << 1 | (uint64_t)(v->base == NULL) << 2 |
         (uint64_t)(uint8_t)v->dtype << 8 | (uint64_t)(uint8_t)nd << 16 | alias << 24 |
         (uint64_t)(uint32_t)t->device << 32;
  int k = 1;
  if (t->device < 0) { /* a 0-dim CPU tensor: its value */
    w[k++] = f2w(t->cpu_f);
    w[k++] = (uint64_t)t->cpu_i;
    w[k++] = f2w(t->cpu_im);
  }
  for (int i = 0; i < nd; i++) w[k++] = (uint64_t)v->sizes[i];
  for (int i = 0; i < nd; i++) w[k++] = (uint64_t)v->strides[i];
  d->n += k;
  return 1;
}

/* The call's descriptor; 0 if it is not cacheable. */
static int pc_describe(const tpulw_ctx *ctx, const tpulw_arg *args, int nargs, pc_desc *d) {
  d->n = 0;
  d->nt = 0;
  d->w[d->n++] = (uint64_t)(uint32_t)ctx->device | (uint64_t)(uint32_t)ctx->precision << 32;
  d->w[d->n++] = (uint64_t)nargs;
  for (int i = 0; i < nargs; i++) {
    const tpulw_arg *a = &args[i];
    if (d->n + 4 > PC_MAX_WORDS) return 0;
    d->w[d->n++] = (uint64_t)(uintptr_t)a->name;
    d->w[d->n++] = (uint64_t)(uint32_t)a->kind | (uint64_t)(a->is_output != 0) << 32;
    switch (a->kind) {
    case TPULW_NONE:
    case TPULW_OTHER: break;
    case TPULW_TENSOR:
      if (!pc_tensor(d, &a->t)) return 0;
      break;
    case TPULW_INT:
    case TPULW_BOOL:
    case TPULW_DTYPE: d->w[d->n++] = (uint64_t)a->i; break;
    case TPULW_FLOAT:
      d->w[d->n++] = f2w(a->f);
      d->w[d->n++] = (uint64_t)a->i;
      break;
    case TPULW_COMPLEX:
      d->w[d->n++] = f2w(a->f);
      d->w[d->n++] = f2w(a->f_im);
      break;
    case TPULW_INTS:
    case TPULW_FLOATS: {
      if (a->n < 0 || d->n + 1 + a->n > PC_MAX_WORDS || (a->n && !a->ints && !a->floats))
        return 0;
      d->w[d->n++] = (uint64_t)a->n;
      const void *src = a->kind == TPULW_INTS ? (const void *)a->ints : (const void *)a->floats;
      if (a->n) memcpy(d->w + d->n, src, (size_t)a->n * 8);
      d->n += a->n;
      break;
    }
    case TPULW_STR: {
      size_t len = a->s ? strlen(a->s) : 0;
      size_t nw = (len + 8) / 8; /* with the terminating zero */
      if (!a->s || d->n + 1 + (int)nw > PC_MAX_WORDS) return 0;
      d->w[d->n++] = (uint64_t)len;
      d->w[d->n + (int)nw - 1] = 0;
      memcpy(d->w + d->n, a->s, len);
      d->n += (int)nw;
      break;
    }
    default: return 0; /* generators, tensor lists */
    }
  }
  tpu_hash h = tpu_hash_init();
  for (int i = 0; i < d->n; i++) tpu_hash_word(&h, d->w[i]);
  d->h = h.a ^ h.b;
  return 1;
}

static int pc_same_name(const char *a, const char *b) {
  return strcmp(a ? a : "", b ? b : "") == 0;
}

/* A plan from the cache for this call, or NULL. */
static tpulw_plan *pc_lookup(const pc_desc *d, const char *name, const char *overload,
                             const tpulw_arg *args) {
  pthread_mutex_lock(&g_pc_mu);
  pc_entry *e = g_pc[d->h % PC_SLOTS];
  if (e && e->h == d->h && e->nw == d->n && pc_same_name(e->name, name) &&
      pc_same_name(e->overload, overload) &&
      memcmp(e->w, d->w, (size_t)d->n * sizeof *d->w) == 0) {
    e->refs++;
    g_pc_hits++;
  } else {
    e = NULL;
    g_pc_misses++;
  }
  pthread_mutex_unlock(&g_pc_mu);
  if (!e) return NULL;
  tpulw_plan *p = plan_alloc();
  tpu_view *params = !p                                ? NULL
                     : e->nparams <= PLAN_INLINE_PARAMS ? p->params_in
                                                        : malloc(sizeof(tpu_view) * (size_t)e->nparams);
  if (!p || !params) {
    tpu__spare_put(&g_plan_spares, p);
    pc_unref(e);
    return NULL; /* the slow path reports the OOM */
  }
  p->g = e->g;
  p->shared = e;
  p->device = (int)(d->w[0] & 0xffffffffu);
  p->sync = e->sync;
  p->err_remap = e->err_remap;
  p->nparams = e->nparams;
  p->params = params;
  for (int j = 0; j < e->nparams; j++) params[j] = args[e->parg[j]].t.view;
  p->nout = e->nout;
  memcpy(p->outs, e->outs, sizeof(tpulw_out_info) * (size_t)e->nout);
  return p;
}

/* Keep p (just built for the call d describes) for later calls: p's graph
 * becomes the entry's. */
static void pc_insert(const pc_desc *d, const char *name, const char *overload,
                      const tpulw_arg *args, int nargs, tpulw_plan *p) {
  if (p->nparams > PC_MAX_TENSORS || p->nout > LW_MAX_RES) return;
  pc_entry *e = calloc(1, sizeof *e);
  if (!e) return;
  for (int j = 0; j < p->nparams; j++) { /* the argument each parameter is */
    int found = -1;
    for (int k = 0; k < nargs && found < 0; k++)
      if (args[k].kind == TPULW_TENSOR && args[k].t.defined && args[k].t.device >= 0 &&
          same_view_exact(&args[k].t.view, &p->params[j]))
        found = k;
    if (found < 0) {
      free(e);
      return;
    }
    e->parg[j] = (int16_t)found;
  }
  e->w = malloc((size_t)d->n * sizeof *e->w);
  e->name = strdup(name ? name : "");
  e->overload = strdup(overload ? overload : "");
  if (!e->w || !e->name || !e->overload) {
    free(e->w);
    free(e->name);
    free(e->overload);
    free(e);
    return;
  }
  memcpy(e->w, d->w, (size_t)d->n * sizeof *e->w);
  e->nw = d->n;
  e->h = d->h;
  e->g = p->g;
  e->sync = p->sync;
  e->err_remap = p->err_remap;
  e->nparams = p->nparams;
  e->nout = p->nout;
  memcpy(e->outs, p->outs, sizeof(tpulw_out_info) * (size_t)p->nout);
  tpuir_hash_keep(e->g); /* before another thread can see it */
  e->refs = 2;           /* the table's and p's */
  p->shared = e;
  pthread_mutex_lock(&g_pc_mu);
  pc_entry *old = g_pc[d->h % PC_SLOTS];
  g_pc[d->h % PC_SLOTS] = e;
  pthread_mutex_unlock(&g_pc_mu);
  if (old) pc_unref(old);
}

void tpulw_plan_cache_stats(uint64_t *hits, uint64_t *misses) {
  pthread_mutex_lock(&g_pc_mu);
  if (hits) *hits = g_pc_hits;
  if (misses) *misses = g_pc_misses;
  pthread_mutex_unlock(&g_pc_mu);
}

void tpulw_plan_cache_clear(void) {
  pc_entry *old[PC_SLOTS];
  pthread_mutex_lock(&g_pc_mu);
  memcpy(old, g_pc, sizeof old);
  memset(g_pc, 0, sizeof g_pc);
  g_pc_hits = g_pc_misses = 0;
  pthread_mutex_unlock(&g_pc_mu);
  for (int i = 0; i < PC_SLOTS; i++)
    if (old[i]) pc_unref(old[i]);
}

int tpulw_prepare(const tpulw_ctx *ctx, const char *name, const char *overload,
                  const tpulw_arg *args, int nargs, tpulw_plan **out) {
  if (!out) return tpu_error(TPU_E_INVALID, "tpulw_prepare: out is NULL");
  *out = NULL;
  if (!ctx || !name || (nargs > 0 && !args))
    return tpu_error(TPU_E_INVALID, "tpulw_prepare: bad arguments");
  pc_desc desc;
  int cacheable = pc_enabled() && pc_describe(ctx, args, nargs, &desc);
  if (cacheable) {
    tpulw_plan *hit = pc_lookup(&desc, name, overload, args);
    if (hit) {
      *out = hit;
      return TPU_OK;
    }
  }
  int complex = tpulw__call_is_complex(args, nargs);
  /* user C kernels (lower/kernel.c) are not ATen ops: not in the table */
  const tpulw__row *row = strcmp(name, tpulw__row_c_kernel.name) == 0 ? &tpulw__row_c_kernel
                                                               : find_row(name, overload, complex);
  if (!row) {
    char key[256];
    make_key(key, sizeof key, name, overload);
    return tpu_error(TPU_E_UNSUPPORTED, "no native lowering for aten::%s%s", key,
                     complex && find_row(name, overload, 0) ? " with complex arguments" : "");
  }
  int rc = check_devices(ctx, args, nargs);
  if (rc < 0) return rc;

  tpulw__b b;
  memset(&b, 0, sizeof b);
  b.ctx = ctx;
  b.base = name;
  b.overload = overload_is_default(overload) ? "" : overload;
  b.args = args;
  b.nargs = nargs;
  b.op = row->op;
  b.elementwise = (row->flags & LW_ELEMENTWISE) != 0;
  b.g = tpuir_graph_new();
  if (!b.g) return tpu_error(TPU_E_INTERNAL, "out of host memory");

  tpulw_plan *p = plan_alloc();
  if (!p) {
    rc = tpu_error(TPU_E_INTERNAL, "out of host memory");
    goto fail;
  }
  memset(p, 0, sizeof *p);
  rc = row->fn(&b);
  if (rc >= 0 && b.nres == 0)
    rc = tpu_error(TPU_E_INTERNAL, "lowering of %s produced no result", name);
  if (rc >= 0) rc = place_outputs(&b, p);
  if (rc < 0) goto fail;

  p->g = b.g;
  p->device = ctx->device;
  p->sync = b.sync;
  p->err_remap = b.err_remap;
  p->nparams = b.nparams;
  p->params = b.params; /* ownership moves to the plan */
  free(b.param_vals);
  if (cacheable && (row->flags & LW_ELEMENTWISE)) pc_insert(&desc, name, overload, args, nargs, p);
  *out = p;
  return TPU_OK;

fail:
  /* a lowering failing inside the IR builder reports the builder's error */
  if (rc == 0) rc = TPU_E_INTERNAL;
  tpuir_graph_free(b.g);
  free(b.params);
  free(b.param_vals);
  tpu__spare_put(&g_plan_spares, p);
  return rc;
}

/* ---- launch ------------------------------------------------------------- */

/* Re-report an executor index error the way PyTorch CPU raises it. */
static int remap_index_error(int remap) {
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", tpu_last_error());
  if (remap == LW_ERR_RUNTIME) return tpu_error(TPU_E_INVALID, "%s", msg);
  if (remap >= LW_ERR_DIM0) { /* IndexError naming the op's dim */
    long long v, size;
    int d;
    if (sscanf(msg, "index %lld is out of bounds for dimension %d with size %lld", &v, &d,
               &size) == 3)
      return tpu_error(TPU_E_INDEX, "index %lld is out of bounds for dimension %d with size %lld",
                       v, remap - LW_ERR_DIM0, size);
    return TPU_E_INDEX;
  }
  if (remap == LW_ERR_NLL_TARGET) {
    long long v;
    if (sscanf(msg, "index %lld is out of bounds", &v) == 1)
      return tpu_error(TPU_E_INDEX, "Target %lld is out of bounds.", v);
    return tpu_error(TPU_E_INDEX, "Target is out of bounds.");
  }
  return TPU_E_INDEX;
}

static void free_plan(void *ctx) { tpulw_plan_free(ctx); }

int tpulw_launch(tpulw_plan *p, tpurt_stream *s, const tpu_view *outs) {
  if (!p) return tpu_error(TPU_E_INVALID, "tpulw_launch: plan is NULL");
  if (!s || (p->nout > 0 && !outs)) {
    tpulw_plan_free(p);
    return tpu_error(TPU_E_INVALID, "tpulw_launch: bad stream or outputs");
  }
  int64_t total = 0;
  for (int i = 0; i < p->nout; i++) {
    const tpulw_out_info *o = &p->outs[i];
    if (outs[i].dtype != o->dtype ||
        !same_shape(o->ndim, o->sizes, outs[i].ndim, outs[i].sizes)) {
      char a[256], c[256];
      fmt_shape(a, sizeof a, outs[i].ndim, outs[i].sizes);
      fmt_shape(c, sizeof c, o->ndim, o->sizes);
      tpulw_plan_free(p);
      return tpu_error(TPU_E_INVALID,
                       "tpulw_launch: output %d is %s %s, expected %s %s", i,
                       tpu_dtype_name(outs[i].dtype), a,
                       tpu_dtype_name(o->dtype), c);
    }
    p->out_views[i] = outs[i];
    total += tpu_view_numel(&outs[i]);
  }
  if (total == 0 && !p->sync) { /* nothing to write */
    tpulw_plan_free(p);
    return TPU_OK;
  }
  int sync = p->sync, remap = p->err_remap;
  /* the eager-mode recorder (graph/graph.c) runs it now or fuses it later.
   * Ops that check index ranges on the device (gather, index_select,
   * embedding, nll_loss, scatter/index_add, ...) must raise at the call,
   * like PyTorch CPU: submitted as sync ops, the recorder waits for them
   * (one stream synchronization). */
  int rc = tpug_submit(s, p->g, p->nparams, p->params, p->nout, p->out_views,
                       sync, free_plan, p);
  if (rc == TPUG_DEFERRED) rc = TPU_OK; /* capturing: checked when it runs */
  if (rc == TPU_E_INDEX) rc = remap_index_error(remap);
  return rc;
}

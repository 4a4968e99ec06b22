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

struct tpulw_plan {
  tpuir_graph *g;
  int device;
  int sync;
  int err_remap;
  int nparams;
  tpu_view *params;
  int nout;
  tpulw_out_info outs[LW_MAX_RES];
  tpu_view out_views[LW_MAX_RES];
};

void tpulw_plan_free(tpulw_plan *p) {
  if (!p) return;
  tpuir_graph_free(p->g);
  free(p->params);
  free(p);
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

int tpulw_prepare(const tpulw_ctx *ctx, const char *name, const char *overload,
                  const tpulw_arg *args, int nargs, tpulw_plan **out) {
  if (!out) return tpu_error(TPU_E_INVALID, "tpulw_prepare: out is NULL");
  *out = NULL;
  if (!ctx || !name || (nargs > 0 && !args))
    return tpu_error(TPU_E_INVALID, "tpulw_prepare: bad arguments");
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

  tpulw_plan *p = calloc(1, sizeof *p);
  if (!p) {
    rc = tpu_error(TPU_E_INTERNAL, "out of host memory");
    goto fail;
  }
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
  *out = p;
  return TPU_OK;

fail:
  /* a lowering failing inside the IR builder reports the builder's error */
  if (rc == 0) rc = TPU_E_INTERNAL;
  tpuir_graph_free(b.g);
  free(b.params);
  free(b.param_vals);
  free(p);
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

/* exec/vtpu/exec.c - vTPU executor driver (prefix tpux_), the RUN half:
 * checks the bindings, finds the plan's variant for their aliasing
 * pattern, runs its steps and writes the outputs. The PLAN half (what
 * depends on the graph alone) is exec/vtpu/plan.c; what depends on the
 * aliasing pattern, exec/vtpu/variant.c. The rules all three follow:
 *
 * Each value is a strided view. PARAM is the bound view; BROADCAST_IN_DIM,
 * TRANSPOSE, SLICE, REVERSE and RESHAPE (when expressible with strides) are
 * free views of their operand; everything else materialises into a
 * contiguous 64-byte aligned temporary that is freed right after its last
 * user (views extend the life of the storage they look at). Dead nodes are
 * skipped, except nodes that can fail at run time (index checks, integer
 * division by zero), which always run so errors are never hidden.
 *
 * Fusion: elementwise nodes (unary, binary, select, convert) of one shape
 * are grouped into regions that run as one tiled program
 * (tpux__eval_region): a node joins the open regions of its operands; a
 * region closes as soon as a node outside it consumes one of its values,
 * and it runs at the position of its last member. Only member values used
 * outside the region (or graph outputs) are materialised; the others live
 * in L1-sized tile buffers. Regions are bounded (XK_REGION_MAX_NODES
 * members, XK_REGION_MAX_INPUTS inputs).
 *
 * Outputs are written at the end, from values computed earlier, so outputs
 * may alias inputs. A region output writes straight into its destination
 * when that is provably safe (the destination overlaps no other output and
 * no parameter still needed after the region runs, no node at or after it
 * can fail (an index op fails at its range check, run as soon as its
 * indices exist), and any region input aliasing it is the identical view,
 * read at the same index; such a store happens at the end of each tile,
 * after all its loads). A
 * DOT_GENERAL's value that is an output is computed into the destination
 * the same way (when it is contiguous and no parameter overlapping it is
 * read from the dot on); later readers of either read it there.
 *
 * GEMM epilogues: a region that reads a float DOT_GENERAL's value directly
 * (same shape, cannot fail, every other input available when the dot runs)
 * runs at the dot, on each finished GEMM block (exec/vtpu/epilogue.c); inputs
 * after the dot that are parameters, constants, views or small regions of
 * such (optimizer scalars) are evaluated early for it. Results are
 * bit-identical to the unfused plan. TORCH_TPU_NO_EPILOGUE=1 disables it.
 *
 * Reductions: a REDUCE whose operand is a member of a region that cannot
 * fail (not in an epilogue) runs with the region, at the region's
 * position: the region's program produces the operand window by window
 * inside the reduction's loops (exec/vtpu/reduce.c, tpux__eval_region_reduce).
 * An operand with no other user outside the region that is not a graph
 * output goes to an L1 scratch and is never written to memory; otherwise
 * it is stored as usual and folded while hot. Other members are stored as
 * usual. Same windows folded in the same order: bit-identical results.
 * TORCH_TPU_NO_REDUCE_FUSION=1 disables it.
 */
#include <stdlib.h>

#include "exec/vtpu/internal.h"

/* Every IR op must have an evaluation here: eval_node, or (elementwise ops)
 * a kernel line in exec/vtpu/elementwise.c and complex.c. A new line in
 * TPUIR_OPS (tpu_ir.h) fails this check until it has one; then update the
 * count. */
_Static_assert(TPUIR_NUM_OPS == 138, "new IR op: give it an evaluation in the vTPU (exec/vtpu/exec.c)");

static int eval_view(xctx *c, int t, const tpuir_node *n) {
  const tpu_view *x = &c->vals[n->in[0]].v;
  tpu_view *v = &c->vals[t].v;
  *v = *x;
  v->ndim = n->ndim;
  for (int i = 0; i < n->ndim; i++) v->sizes[i] = n->sizes[i];
  switch (n->op) {
  case TPUIR_BROADCAST_IN_DIM:
    for (int i = 0; i < n->ndim; i++) v->strides[i] = 0;
    for (int i = 0; i < n->na; i++)
      if (x->sizes[i] == n->sizes[n->a[i]]) v->strides[n->a[i]] = x->strides[i];
    break;
  case TPUIR_TRANSPOSE:
    for (int i = 0; i < n->ndim; i++) v->strides[i] = x->strides[n->a[i]];
    break;
  case TPUIR_SLICE:
    for (int i = 0; i < n->ndim; i++) {
      if (n->sizes[i] > 0) v->offset += n->a[i] * x->strides[i];
      v->strides[i] = x->strides[i] * n->c[i];
    }
    break;
  case TPUIR_REVERSE:
    for (int i = 0; i < n->na; i++) {
      int d = (int)n->a[i];
      if (x->sizes[d] > 0) v->offset += (x->sizes[d] - 1) * x->strides[d];
      v->strides[d] = -x->strides[d];
    }
    break;
  case TPUIR_RESHAPE:
    if (!tpux__reshape_strides(x->ndim, x->sizes, x->strides, n->ndim,
                               n->sizes, v->strides)) {
      /* materialise x contiguously, then view it with the new shape */
      int rc = tpux__alloc_value(c, t);
      if (rc) return rc;
      tpu_view tmp;
      tpu_view_init_contiguous(&tmp, c->vals[t].mem, x->dtype, x->ndim, x->sizes);
      rc = tpux__copy_nocheck(&tmp, x);
      if (rc) return rc;
    }
    break;
  default: return tpu_error(TPU_E_INTERNAL, "eval_view: bad op");
  }
  return TPU_OK;
}

static int check_binding(const char *what, int i, const tpu_view *v,
                         const tpuir_node *n) {
  if (v->dtype != n->dtype)
    return tpu_error(TPU_E_TYPE, "tpux_run: %s %d has dtype %s, expected %s",
                     what, i, tpu_dtype_name(v->dtype), tpu_dtype_name(n->dtype));
  int ok = v->ndim == n->ndim;
  for (int d = 0; ok && d < n->ndim; d++) ok = v->sizes[d] == n->sizes[d];
  if (!ok)
    return tpu_error(TPU_E_INVALID,
                     "tpux_run: %s %d has the wrong shape (rank %d, expected "
                     "rank %d with the graph's sizes)",
                     what, i, (int)v->ndim, (int)n->ndim);
  if (!v->base && tpu_view_numel(v) > 0)
    return tpu_error(TPU_E_INVALID, "tpux_run: %s %d has a NULL base", what, i);
  return TPU_OK;
}

static int eval_node(xctx *c, int t, const tpu_view *ins) {
  const tpuir_node *n = tpuir_get_node(c->g, t);
  if (tpux__is_complex_node(c->g, n)) return tpux__eval_complex(c, t);
  switch (n->op) {
  case TPUIR_PARAM: c->vals[t].v = ins[n->dim]; return TPU_OK;
  case TPUIR_CONST: return tpux__eval_const(c, t);
  case TPUIR_IOTA: return tpux__eval_iota(c, t);
  case TPUIR_RNG: return tpux__eval_rng(c, t);
  case TPUIR_CONCAT: return tpux__eval_concat(c, t);
  case TPUIR_PAD: return tpux__eval_pad(c, t);
  case TPUIR_REDUCE: return tpux__eval_reduce(c, t);
  case TPUIR_ARGREDUCE: return tpux__eval_argreduce(c, t);
  case TPUIR_DOT_GENERAL: return tpux__eval_dot(c, t);
  case TPUIR_GATHER: return tpux__eval_gather(c, t);
  case TPUIR_INDEX_SELECT: return tpux__eval_index_select(c, t);
  case TPUIR_SCATTER_ADD: return tpux__eval_scatter_add(c, t);
  case TPUIR_INDEX_ADD: return tpux__eval_index_add(c, t);
  case TPUIR_CONVOLUTION: case TPUIR_REDUCE_WINDOW: case TPUIR_WINDOW_ARGMAX:
    return tpux__eval_conv(c, t);
  case TPUIR_SORT: return tpux__eval_sort(c, t);
  case TPUIR_EIGH: case TPUIR_SVD: return tpux__eval_spectral(c, t);
  case TPUIR_CHOLESKY: case TPUIR_TRIANGULAR_SOLVE: case TPUIR_LU:
  case TPUIR_LU_PIVOTS_TO_PERM: case TPUIR_GEQRF: case TPUIR_HOUSEHOLDER_PRODUCT:
  case TPUIR_LDL: case TPUIR_LDL_SOLVE:
    return tpux__eval_linalg(c, t);
  case TPUIR_CUSTOM_CALL: return tpux__eval_custom(c, t);
  case TPUIR_ATTENTION: case TPUIR_ATTENTION_GRAD: return tpux__eval_attention(c, t);
  case TPUIR_CONVERT: return tpux__eval_convert(c, t); /* kept out of regions */
  default:
    if (tpux__is_view_op(n->op)) return eval_view(c, t, n);
    return tpu_error(TPU_E_UNSUPPORTED, "vTPU executor: op %s not supported",
                     tpuir_op_name(n->op));
  }
}

/* ---- per-run scratch ------------------------------------------------------
 * Values, the outputs already written and the aliasing-pattern buffer of
 * one run. A plan keeps one idle scratch (p->spare): a run takes it with an
 * atomic exchange and gives it back with a compare-exchange into the empty
 * slot. Two runs of one plan at once (two streams running the same cached
 * program) therefore never share a scratch: the second finds the slot
 * empty and allocates its own, which it frees when the slot is taken
 * again. Given back clean: every vals[].mem NULL, out_done all zero. */
struct xscratch {
  xv *vals;         /* nn values (views are rewritten by each run) */
  char *out_done;   /* nout flags: written by a direct region store */
  int32_t *pairs;   /* aliasing pattern, 2 * cap words (grown) */
  size_t cap;
};

void tpux__run_scratch_free(xscratch *s) {
  if (!s) return;
  free(s->pairs);
  free(s);
}

static xscratch *scratch_take(tpux_plan *p) {
  xscratch *s = atomic_exchange_explicit(&p->spare, NULL, memory_order_acquire);
  if (s) return s;
  size_t nb = (size_t)(p->nn ? p->nn : 1), no = (size_t)(p->nout ? p->nout : 1);
  s = calloc(1, sizeof *s + nb * sizeof(xv) + no);
  if (!s) return NULL;
  s->vals = (xv *)(s + 1);
  s->out_done = (char *)(s->vals + nb);
  return s;
}

static void scratch_give(tpux_plan *p, xscratch *s) {
  xscratch *empty = NULL;
  if (!atomic_compare_exchange_strong_explicit(&p->spare, &empty, s, memory_order_release,
                                               memory_order_relaxed))
    tpux__run_scratch_free(s);
}

/* ---- one run -------------------------------------------------------------- */

static int run_check(const tpux_plan *p, int nin, const tpu_view *ins, int nout,
                     const tpu_view *outs) {
  const tpuir_graph *g = p->g;
  if (nin != tpuir_num_params(g))
    return tpu_error(TPU_E_INVALID, "tpux_run: graph has %d parameters, got %d",
                     tpuir_num_params(g), nin);
  if (nout != p->nout)
    return tpu_error(TPU_E_INVALID, "tpux_run: graph has %d outputs, got %d", p->nout, nout);
  if ((nin && !ins) || (nout && !outs))
    return tpu_error(TPU_E_INVALID, "tpux_run: NULL bindings");
  for (int k = 0; k < p->nparam; k++) {
    const tpuir_node *n = tpuir_get_node(g, p->pnode[k]);
    int rc = check_binding("input", k, &ins[n->dim], n);
    if (rc) return rc;
  }
  for (int i = 0; i < nout; i++) {
    int rc = check_binding("output", i, &outs[i], tpuir_get_node(g, p->outv[i]));
    if (rc) return rc;
  }
  return TPU_OK;
}

/* The aliasing pattern of these bindings: pairs (candidate c, k) whose
 * views overlap, in order, into s->pairs: k < nlp a live parameter, else
 * output k - nlp (never written directly over: c is then not direct). */
static int run_pattern(const tpux_plan *p, const tpu_view *ins, const tpu_view *outs,
                       xscratch *s, int *npairs) {
  int n = 0;
  for (int c = 0; c < p->ncand; c++) {
    const tpu_view *o = &outs[p->cand[c]];
    for (int k = 0; k < p->nlp + p->nout; k++) {
      const tpu_view *x = k < p->nlp ? &ins[tpuir_get_node(p->g, p->lp[k])->dim] : &outs[k - p->nlp];
      if (k - p->nlp == p->cand[c] || !tpux__views_overlap(x, o)) continue;
      if ((size_t)n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 16;
        int32_t *q = realloc(s->pairs, 2 * cap * sizeof(int32_t));
        if (!q) return tpu_error(TPU_E_OOM, "tpux_run: out of host memory");
        s->pairs = q;
        s->cap = cap;
      }
      s->pairs[2 * n] = c;
      s->pairs[2 * n + 1] = k;
      n++;
    }
  }
  *npairs = n;
  return TPU_OK;
}

/* A region step: its members' direct destinations, less those a load of
 * the region aliases without being the identical view (checked on this
 * run's views); then the region, alone, with its REDUCE or in its dot's
 * epilogue. */
static int run_region(const xvar *v, const xstep *st, xctx *c, const tpu_view *outs,
                      char *out_done) {
  const tpu_view *dsts[XK_REGION_MAX_NODES];
  const int32_t *members = v->members + st->m0, *dout = v->dout + st->m0;
  const char *store = v->store + st->m0;
  for (int k = 0; k < st->nm; k++) {
    dsts[k] = dout[k] >= 0 ? &outs[dout[k]] : NULL;
    for (int l = 0; l < st->nl && dsts[k]; l++) {
      const tpu_view *ov = &c->vals[v->loads[st->l0 + l]].v;
      if (tpux__views_overlap(ov, dsts[k]) && !tpux__views_same(ov, dsts[k])) dsts[k] = NULL;
    }
  }
  int rc;
  if (st->kind == XS_REGION_REDUCE)
    rc = tpux__eval_region_reduce(c, st->nm, members, store, dsts, st->k, st->t);
  else if (st->kind == XS_DOT_EPI)
    rc = tpux__eval_dot_fused(c, st->t, st->nm, members, store, dsts);
  else
    rc = tpux__eval_region(c, st->nm, members, store, dsts);
  for (int k = 0; k < st->nm && rc == TPU_OK; k++)
    if (dsts[k]) out_done[dout[k]] = 1;
  return rc;
}

static int run_steps(const xvar *v, xctx *c, const tpu_view *ins, const tpu_view *outs,
                     char *out_done, int prof) {
  int rc = TPU_OK;
  for (int i = 0; i < v->nsteps && rc == TPU_OK; i++) {
    const xstep *st = &v->steps[i];
    double t0 = prof && st->kind != XS_FREE ? tpux__profile_now() : 0;
    int o = (st->kind == XS_NODE || st->kind == XS_DOT_EPI) ? st->k - 1 : -1;
    c->node_out = o >= 0 && tpu_view_is_contiguous(&outs[o]) ? &outs[o] : NULL;
    c->node_t = st->t;
    if (st->kind == XS_NODE) rc = eval_node(c, st->t, ins);
    else if (st->kind == XS_CHECK) rc = tpux__check_index(c, st->t);
    else if (st->kind != XS_FREE) rc = run_region(v, st, c, outs, out_done);
    if (c->node_out && rc == TPU_OK && !c->vals[st->t].mem &&
        tpux__views_same(&c->vals[st->t].v, c->node_out))
      out_done[o] = 1; /* (a complex dot computes into its own temporary) */
    c->node_out = NULL;
    if (t0 > 0) {
      int view = st->kind == XS_NODE && tpux__is_view_op(tpuir_get_node(c->g, st->t)->op);
      tpux__profile_step(c->g, st->kind, st->t, st->kind == XS_NODE ? 0 : st->nm,
                         v->members + st->m0, view && c->vals[st->t].mem != NULL,
                         tpux__profile_now() - t0);
    }
    for (int f = st->f0; f < st->f0 + st->nf; f++) {
      xv *x = &c->vals[v->frees[f]];
      tpux__free(x->mem);
      x->mem = NULL;
    }
  }
  return rc;
}

/* Outputs not yet written directly are copied from their values. Values
 * that live in caller memory and overlap a destination are copied to a
 * temporary first, so every output sees the inputs as they were. */
static int run_outputs(const tpux_plan *p, xv *vals, const tpu_view *outs, const char *out_done,
                       int prof) {
  int rc = TPU_OK, nout = p->nout;
  for (int i = 0; i < nout && rc == TPU_OK; i++) {
    int v = p->outv[i];
    if (out_done[i] || vals[p->root[v]].mem || vals[v].mem) continue; /* private temporary */
    const tpu_view *sv = &vals[v].v;
    int clash = 0;
    for (int j = 0; j < nout && !clash; j++) {
      if (!tpux__views_overlap(sv, &outs[j])) continue;
      if (j == i && tpux__views_same(sv, &outs[j])) continue;
      clash = 1;
    }
    if (!clash) continue;
    void *m = tpux__alloc((size_t)tpu_view_numel(sv) * tpu_dtype_size(sv->dtype));
    if (!m) return tpu_error(TPU_E_OOM, "tpux_run: out of host memory");
    tpu_view tv;
    tpu_view_init_contiguous(&tv, m, sv->dtype, sv->ndim, sv->sizes);
    rc = tpux__copy_nocheck(&tv, sv);
    vals[v].mem = m;
    vals[v].v = tv;
  }
  for (int i = 0; i < nout && rc == TPU_OK; i++) {
    const tpu_view *sv = &vals[p->outv[i]].v;
    if (out_done[i] || tpux__views_same(sv, &outs[i])) continue;
    double t0 = prof ? tpux__profile_now() : 0;
    rc = tpux__copy_nocheck(&outs[i], sv);
    if (prof) tpux__profile_output(p->g, p->outv[i], tpux__profile_now() - t0);
  }
  return rc;
}

/* Run plan p (see tpu_exec.h). Per run: the binding checks, the aliasing
 * pattern (which picks the variant), the steps, the outputs. */
int tpux_plan_run(tpux_plan *p, int nin, const tpu_view *ins, int nout, const tpu_view *outs) {
  if (!p) return tpu_error(TPU_E_INVALID, "tpux_run: NULL plan");
  int rc = run_check(p, nin, ins, nout, outs);
  if (rc) return rc;
  xscratch *s = scratch_take(p);
  if (!s) return tpu_error(TPU_E_OOM, "tpux_run: out of host memory");
  int npairs = 0, tmp = 0;
  const xvar *v = NULL;
  int flags = (tpux__epilogue_enabled() ? 1 : 0) | (tpux__reduce_fusion_enabled() ? 2 : 0);
  rc = run_pattern(p, ins, outs, s, &npairs);
  if (rc == TPU_OK) rc = tpux__variant_get(p, flags, npairs, s->pairs, &v, &tmp);
  if (rc == TPU_OK) {
    xctx c = {p->g, s->vals, p->virt, NULL, -1};
    int prof = tpux__profile_on();
    double t0 = prof ? tpux__profile_now() : 0;
    rc = run_steps(v, &c, ins, outs, s->out_done, prof);
    if (rc == TPU_OK) rc = run_outputs(p, s->vals, outs, s->out_done, prof);
    if (prof) tpux__profile_add("(plan runs)", tpux__profile_now() - t0);
  }
  for (int t = 0; t < p->nn; t++) {
    tpux__free(s->vals[t].mem);
    s->vals[t].mem = NULL;
  }
  memset(s->out_done, 0, (size_t)p->nout);
  if (tmp) tpux__variants_free((xvar *)v);
  scratch_give(p, s);
  return rc;
}

/* Run graph g (see tpu_exec.h): plan, run once, release. Borrowed: g, ins,
 * outs. */
int tpux_run(const tpuir_graph *g, int nin, const tpu_view *ins, int nout,
             const tpu_view *outs) {
  if (!g) return tpu_error(TPU_E_INVALID, "tpux_run: NULL graph");
  tpux_plan *p = NULL;
  int rc = tpux_plan_new(g, &p);
  if (rc == TPU_OK) rc = tpux_plan_run(p, nin, ins, nout, outs);
  tpux_plan_free(p);
  return rc;
}

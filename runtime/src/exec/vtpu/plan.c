/* exec/vtpu/plan.c - the vTPU's PLAN half (prefix tpux_): everything about
 * running a graph that depends on the graph alone, computed once per
 * program (tpux_plan_new; the executor table's compile step keeps it with
 * the cached program):
 *
 *   liveness      which nodes run (outputs, nodes that can fail, and all
 *                 they read; exec/vtpu/exec.c's header has the rules)
 *   regions       elementwise nodes grouped into fused regions; IOTA
 *                 nodes only they read are computed as they load them
 *   lifetimes     last use of every value, the storage root of views,
 *                 users outside a region, which members must be stored,
 *                 and the free list of each position
 *   candidates    region outputs that may be written straight into their
 *                 destination, pending the bindings' aliasing
 *
 * It plans a rewritten copy of the graph when f32 DEFAULT dots get bf16
 * operands (exec/vtpu/rewrite.c).
 *
 * The parts that depend on how the bindings alias each other (direct
 * writes, GEMM epilogues, fused reductions: exec/vtpu/variant.c) are
 * planned per aliasing pattern into a variant, also kept by the plan.
 * What a run still does per execution: exec/vtpu/exec.c.
 */
#include <stdlib.h>

#include "exec/vtpu/internal.h"

static int uf_find(int32_t *par, int x) {
  while (par[x] != x) {
    par[x] = par[par[x]];
    x = par[x];
  }
  return x;
}

/* a broadcast of a one-element value: loaded once per thread by a fused
 * region, so it does not count against XK_REGION_MAX_INPUTS */
static int is_scalar_bcast(const tpuir_graph *g, int v) {
  const tpuir_node *n = tpuir_get_node(g, v);
  if (n->op != TPUIR_BROADCAST_IN_DIM) return 0;
  const tpuir_node *x = tpuir_get_node(g, n->in[0]);
  for (int i = 0; i < x->ndim; i++)
    if (x->sizes[i] != 1) return 0;
  return 1;
}

/* Region bookkeeping needed only while grouping (freed after planning). */
typedef struct pbuild {
  int32_t *rpar;           /* union-find parent */
  int32_t *rsize, *rin;    /* members, inputs */
  int32_t *rsc;            /* scalar-broadcast inputs */
  char *rclosed;           /* a consumer outside it has been seen */
} pbuild;

/* liveness: outputs and nodes that can fail, and everything they read */
static void plan_liveness(tpux_plan *p, pbuild *b) {
  const tpuir_graph *g = p->g;
  int nn = p->nn;
  for (int t = 0; t < nn; t++) {
    p->last[t] = -1;
    p->reg[t] = -1;
    b->rpar[t] = t;
    if (tpuir_node_can_fail(g, t)) p->live[t] = 1;
  }
  for (int i = 0; i < p->nout; i++) {
    p->live[p->outv[i]] = 1;
    p->last[p->outv[i]] = nn; /* never freed by the run */
  }
  for (int t = nn - 1; t >= 0; t--) {
    if (!p->live[t]) continue;
    const tpuir_val *ops;
    int no = tpux__node_operands(tpuir_get_node(g, t), &ops);
    for (int k = 0; k < no; k++) p->live[ops[k]] = 1;
  }
}

/* Candidates: the distinct open regions of t's operands (at most 3). */
static int region_cands(tpux_plan *p, pbuild *b, const tpuir_val *ops, int no, int *cand) {
  int nc = 0;
  for (int k = 0; k < no; k++) {
    if (p->reg[ops[k]] < 0) continue;
    int r = uf_find(b->rpar, p->reg[ops[k]]);
    if (b->rclosed[r]) continue;
    int dup = 0;
    for (int q = 0; q < nc; q++) dup |= cand[q] == r;
    if (!dup) cand[nc++] = r;
  }
  return nc;
}

/* Elementwise node t joins the open regions of its operands (all of them,
 * else each alone) when the merged region stays within the limits.
 * Returns the region joined, or -1. */
static int region_join(tpux_plan *p, pbuild *b, int t, const tpuir_val *ops, int no) {
  int cand[3], nc = region_cands(p, b, ops, no, cand);
  for (int mode = 0; mode <= nc; mode++) {
    int sel[3], ns = 0;
    if (mode == 0) {
      for (int q = 0; q < nc; q++) sel[ns++] = cand[q];
      if (ns == 0) return -1;
    } else {
      sel[ns++] = cand[mode - 1];
    }
    int size = 1, in = 0, sc = 0, fail = tpuir_node_can_fail(p->g, t);
    for (int q = 0; q < ns; q++) {
      size += b->rsize[sel[q]];
      in += b->rin[sel[q]];
      sc += b->rsc[sel[q]];
      fail |= p->rfail[sel[q]];
    }
    for (int k = 0; k < no; k++) {
      int inside = 0;
      if (p->reg[ops[k]] >= 0)
        for (int q = 0; q < ns; q++) inside |= uf_find(b->rpar, p->reg[ops[k]]) == sel[q];
      if (inside) continue;
      if (is_scalar_bcast(p->g, ops[k])) sc++;
      else in++;
    }
    if (size > XK_REGION_MAX_NODES || in > XK_REGION_MAX_INPUTS || sc > XK_REGION_MAX_SCALARS)
      continue;
    int R = sel[0];
    for (int q = 1; q < ns; q++) {
      b->rpar[sel[q]] = R;
      if (p->rfirst[sel[q]] < p->rfirst[R]) p->rfirst[R] = p->rfirst[sel[q]];
    }
    b->rsize[R] = size;
    b->rin[R] = in;
    b->rsc[R] = sc;
    p->rfail[R] = (char)fail;
    return R;
  }
  return -1;
}

/* A new region {t}. */
static int region_new(tpux_plan *p, pbuild *b, int t, const tpuir_val *ops, int no) {
  p->rfirst[t] = t;
  b->rsize[t] = 1;
  b->rin[t] = 0;
  b->rsc[t] = 0;
  for (int k = 0; k < no; k++) {
    if (is_scalar_bcast(p->g, ops[k])) b->rsc[t]++;
    else b->rin[t]++;
  }
  p->rfail[t] = (char)tpuir_node_can_fail(p->g, t);
  return t;
}

/* fused elementwise regions: an elementwise node joins the open regions of
 * its operands; a region closes when anything outside it consumes one of
 * its values (it then runs before that consumer). Afterwards reg[t] is
 * the region's final id (its union-find root). */
static void plan_regions(tpux_plan *p, pbuild *b) {
  const tpuir_graph *g = p->g;
  for (int t = 0; t < p->nn; t++) {
    if (!p->live[t]) continue;
    const tpuir_node *n = tpuir_get_node(g, t);
    const tpuir_val *ops;
    int no = tpux__node_operands(n, &ops);
    int R = -1;
    if (tpuir_op_is_elementwise(n->op) && !tpux__is_complex_node(g, n) &&
        !(p->alone && p->alone[t])) {
      R = region_join(p, b, t, ops, no);
      if (R < 0) R = region_new(p, b, t, ops, no);
      p->reg[t] = R;
      p->rlast[R] = t;
    }
    for (int k = 0; k < no; k++) { /* consumers outside a region close it */
      if (p->reg[ops[k]] < 0) continue;
      int r = uf_find(b->rpar, p->reg[ops[k]]);
      if (r != R) b->rclosed[r] = 1;
    }
  }
  for (int t = 0; t < p->nn; t++)
    if (p->reg[t] >= 0) p->reg[t] = uf_find(b->rpar, p->reg[t]);
}

/* IOTA nodes whose every user is a region member: no step evaluates them,
 * the regions compute their values as they load them (an output or a
 * view's operand is evaluated as usual) */
static void plan_virtual(tpux_plan *p) {
  const tpuir_graph *g = p->g;
  for (int t = 0; t < p->nn; t++)
    p->virt[t] = p->live[t] && tpuir_get_node(g, t)->op == TPUIR_IOTA;
  for (int i = 0; i < p->nout; i++) p->virt[p->outv[i]] = 0;
  for (int u = 0; u < p->nn; u++) {
    if (!p->live[u] || p->reg[u] >= 0) continue;
    const tpuir_val *ops;
    int no = tpux__node_operands(tpuir_get_node(g, u), &ops);
    for (int k = 0; k < no; k++) p->virt[ops[k]] = 0;
  }
}

/* Where the run can last fail. An INDEX-class node fails only when an
 * index is out of range: its indices are checked (XS_CHECK) as soon as
 * they exist, so that outputs written before the node itself runs can be
 * written directly (a late embedding or NLL gather would otherwise keep
 * every output earlier in the program a copy). */
static void plan_failures(tpux_plan *p) {
  const tpuir_graph *g = p->g;
  p->last_fail = -1;
  for (int t = 0; t < p->nn; t++) p->chead[t] = p->cnext[t] = -1;
  for (int t = p->nn - 1; t >= 0; t--) { /* each list in node order */
    if (!p->live[t] || !tpuir_node_can_fail(g, t)) continue;
    const tpuir_node *n = tpuir_get_node(g, t);
    int at = t;
    if (tpuir_op_info(n->op)->cls == TPUIR_CLASS_INDEX) {
      int v = tpux__index_source(g, n->in[1]), ready = p->reg[v] >= 0 ? p->rlast[p->reg[v]] : v;
      if (ready + 1 < t) {
        p->cnext[t] = p->chead[ready];
        p->chead[ready] = t;
        at = ready + 1;
      }
    }
    if (at > p->last_fail) p->last_fail = at;
  }
}

/* last use (a region member consumes its operands when the region runs),
 * users outside the region, stored members, view roots, free lists */
static void plan_lifetimes(tpux_plan *p) {
  const tpuir_graph *g = p->g;
  int nn = p->nn;
  for (int t = 0; t < nn; t++) {
    if (!p->live[t]) continue;
    const tpuir_val *ops;
    int no = tpux__node_operands(tpuir_get_node(g, t), &ops);
    int R = p->reg[t], pos = R >= 0 ? p->rlast[R] : t;
    for (int k = 0; k < no; k++) {
      int o = ops[k];
      if (p->last[o] < pos) p->last[o] = pos;
      if (p->reg[o] < 0 || p->reg[o] != R) p->users[o]++; /* outside */
      if (p->reg[o] >= 0 && p->reg[o] != R) p->ext[o] = 1;
    }
  }
  for (int i = 0; i < p->nout; i++) p->ext[p->outv[i]] = 1;
  for (int t = nn - 1; t >= 0; t--) { /* views keep their storage alive */
    const tpuir_node *n = tpuir_get_node(g, t);
    if (!p->live[t] || !tpux__is_view_op(n->op)) continue;
    if (p->last[n->in[0]] < p->last[t]) p->last[n->in[0]] = p->last[t];
  }
  for (int t = 0; t < nn; t++) {
    const tpuir_node *n = tpuir_get_node(g, t);
    p->root[t] = tpux__is_view_op(n->op) ? p->root[n->in[0]] : t;
    p->head[t] = -1;
  }
  for (int t = 0; t < nn; t++) { /* free lists: value t dies after node last[t] */
    if (!p->live[t]) continue;
    int at = p->last[t] < 0 ? t : p->last[t];
    if (p->reg[t] >= 0 && at < p->rlast[p->reg[t]]) at = p->rlast[p->reg[t]];
    if (at >= nn) continue;
    p->next[t] = p->head[at];
    p->head[at] = t;
  }
}

/* Values that may be written straight into their output's destination,
 * whatever the bindings: a region member or the value of a node that
 * writes it whole (tpux__writes_whole_value: a DOT_GENERAL, CONCAT,
 * INDEX_SELECT, ...) that is one output only, computed after every node
 * that can fail (or by the last one, which fails before writing); its users
 * then read it in the destination. Whether a parameter still needed later
 * or another output overlaps the destination is the variant's part (the
 * run's aliasing pattern). Also lists the PARAM nodes (binding checks)
 * and the live ones (aliasing pattern). */
static void plan_candidates(tpux_plan *p) {
  const tpuir_graph *g = p->g;
  for (int t = 0; t < p->nn; t++) {
    const tpuir_node *n = tpuir_get_node(g, t);
    if (n->op != TPUIR_PARAM) continue;
    p->pnode[p->nparam++] = t;
    if (p->live[t]) p->lp[p->nlp++] = t;
  }
  for (int i = 0; i < p->nout; i++) {
    int t = p->outv[i], R = p->reg[t];
    const tpuir_node *n = tpuir_get_node(g, t);
    int whole = R < 0 && tpux__writes_whole_value(n->op) &&
                (n->op == TPUIR_DOT_GENERAL || !tpux__is_complex_node(g, n));
    if (whole ? t < p->last_fail : R < 0 || p->rfail[R] || p->rlast[R] < p->last_fail) continue;
    int ok = 1;
    for (int j = 0; j < p->nout; j++) ok &= j == i || p->outv[j] != t;
    if (ok) p->cand[p->ncand++] = i;
  }
}

/* One block for the plan and its arrays (freed with the plan). */
static tpux_plan *plan_alloc(const tpuir_graph *g) {
  int nn = tpuir_num_nodes(g), nout = tpuir_num_outputs(g);
  size_t nb = (size_t)(nn ? nn : 1), no = (size_t)(nout ? nout : 1);
  size_t words = 13 * nb + 2 * no, bytes = 4 * nb;
  tpux_plan *p = calloc(1, sizeof *p + words * sizeof(int32_t) + bytes);
  if (!p) return NULL;
  int32_t *w = (int32_t *)(p + 1);
  p->reg = w, w += nb;
  p->rfirst = w, w += nb;
  p->rlast = w, w += nb;
  p->last = w, w += nb;
  p->root = w, w += nb;
  p->users = w, w += nb;
  p->head = w, w += nb;
  p->next = w, w += nb;
  p->pnode = w, w += nb;
  p->lp = w, w += nb;
  p->dcand = w, w += nb;
  p->chead = w, w += nb;
  p->cnext = w, w += nb;
  p->outv = w, w += no;
  p->cand = w, w += no;
  char *c = (char *)w;
  p->live = c, c += nb;
  p->rfail = c, c += nb;
  p->ext = c, c += nb;
  p->virt = c;
  p->g = g;
  p->nn = nn;
  p->nout = nout;
  for (int i = 0; i < nout; i++) p->outv[i] = tpuir_output(g, i);
  pthread_mutex_init(&p->mu, NULL);
  return p;
}

int tpux_plan_new(const tpuir_graph *g, tpux_plan **out) {
  if (!out) return tpu_error(TPU_E_INVALID, "tpux_plan_new: NULL result");
  *out = NULL;
  if (!g) return tpu_error(TPU_E_INVALID, "tpux_plan_new: NULL graph");
  tpuir_graph *own = NULL; /* the graph with bf16 dot operands, if rewritten */
  char *alone = NULL;
  int rc = tpux__rewrite_graph(g, &own, &alone);
  if (rc) return rc;
  tpux_plan *p = plan_alloc(own ? own : g);
  size_t nb = (size_t)(p && p->nn ? p->nn : 1);
  int32_t *tmp = p ? malloc(4 * nb * sizeof(int32_t) + nb) : NULL;
  if (!tmp) {
    free(p);
    tpuir_graph_free(own);
    free(alone);
    return tpu_error(TPU_E_OOM, "tpux_plan_new: out of host memory");
  }
  p->own = own;
  p->alone = alone;
  pbuild b = {tmp, tmp + nb, tmp + 2 * nb, tmp + 3 * nb, (char *)(tmp + 4 * nb)};
  memset(b.rclosed, 0, nb);
  plan_liveness(p, &b);
  plan_regions(p, &b);
  free(tmp);
  plan_virtual(p);
  plan_failures(p);
  plan_lifetimes(p);
  plan_candidates(p);
  for (int c = 0; c < p->ncand; c++) p->dcand[p->outv[p->cand[c]]] = c;
  *out = p;
  return TPU_OK;
}

void tpux_plan_free(tpux_plan *p) {
  if (!p) return;
  tpux__variants_free(atomic_load_explicit(&p->vars, memory_order_acquire));
  tpux__run_scratch_free(atomic_load_explicit(&p->spare, memory_order_acquire));
  pthread_mutex_destroy(&p->mu);
  tpuir_graph_free(p->own);
  free(p->alone);
  free(p);
}

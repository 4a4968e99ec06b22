/* exec/vtpu/exec.c - vTPU executor driver (prefix tpux_): binds parameters, plans
 * value lifetimes, evaluates nodes in order and writes the outputs.
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
 * when that is provably safe (the destination overlaps no parameter still
 * needed after the region runs, no node at or after it can fail, and any
 * region input aliasing it is the identical view, read at the same index;
 * such a store happens at the end of each tile, after all its loads).
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
_Static_assert(TPUIR_NUM_OPS == 136, "new IR op: give it an evaluation in the vTPU (exec/vtpu/exec.c)");

static int is_view_op(int op) { return tpuir_op_info(op)->cls == TPUIR_CLASS_VIEW; }

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

/* operand list of a node */
static int node_operands(const tpuir_node *n, const tpuir_val **ops) {
  if (n->nlist) { /* CONCAT, CUSTOM_CALL */
    *ops = n->list;
    return n->nlist;
  }
  *ops = n->in;
  return n->nin;
}

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

static int uf_find(int32_t *par, int x) {
  while (par[x] != x) {
    par[x] = par[par[x]];
    x = par[x];
  }
  return x;
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
  default:
    if (is_view_op(n->op)) return eval_view(c, t, n);
    return tpu_error(TPU_E_UNSUPPORTED, "vTPU executor: op %s not supported",
                     tpuir_op_name(n->op));
  }
}

/* Planning state for GEMM epilogues (see tpux_run). */
typedef struct epi_plan {
  const tpuir_graph *g;
  const char *live, *rfail, *rfused;
  const int32_t *reg, *rfirst, *rlast, *rearly;
  int32_t *rpar;
  int32_t *pre; /* early work: node u (>= 0) or region R as -(R + 1) */
  int np;
} epi_plan;

/* small regions (a few scalars: optimizer step counts, bias corrections)
 * may run early, before a dot, to feed its epilogue */
#define EPI_EARLY_REGION_NUMEL 16

static int epi_listed(const epi_plan *P, int item) {
  for (int q = 0; q < P->np; q++)
    if (P->pre[q] == item) return 1;
  return 0;
}

/* Whether value o of a region fused into the epilogue of dot t is
 * available when t runs: computed before t (a region member only once its
 * region has run), or a parameter/constant/iota, a view chain, or a small
 * region that cannot fail, of such inputs, which can then be evaluated
 * early (appended to P->pre). */
static int epi_input_ok(epi_plan *P, int t, int o) {
  const tpuir_graph *g = P->g;
  int Ro = P->reg[o] >= 0 ? uf_find(P->rpar, P->reg[o]) : -1;
  if (Ro >= 0 && (P->rfused[Ro] || P->rearly[Ro] >= 0))
    return 1; /* runs at an earlier dot (dots are planned in order) */
  if (o < t) return Ro < 0 || P->rlast[Ro] < t;
  if (o == t) return 0; /* a view of the dot's value: other element order */
  const tpuir_node *n = tpuir_get_node(g, o);
  if (Ro >= 0) {
    if (P->rfail[Ro] || epi_listed(P, -(Ro + 1))) return !P->rfail[Ro];
    int64_t numel = 1;
    for (int d = 0; d < n->ndim; d++) numel *= n->sizes[d];
    if (numel > EPI_EARLY_REGION_NUMEL) return 0;
    for (int u = P->rfirst[Ro]; u <= P->rlast[Ro]; u++) {
      if (!P->live[u] || P->reg[u] < 0 || uf_find(P->rpar, P->reg[u]) != Ro) continue;
      const tpuir_node *m = tpuir_get_node(g, u);
      for (int k = 0; k < m->nin; k++) {
        int x = m->in[k];
        if (P->reg[x] >= 0 && uf_find(P->rpar, P->reg[x]) == Ro) continue;
        if (!epi_input_ok(P, t, x)) return 0;
      }
    }
    P->pre[P->np++] = -(Ro + 1);
    return 1;
  }
  if (epi_listed(P, o)) return 1;
  if (n->op != TPUIR_PARAM && n->op != TPUIR_CONST && n->op != TPUIR_IOTA &&
      !(is_view_op(n->op) && epi_input_ok(P, t, n->in[0])))
    return 0;
  P->pre[P->np++] = o;
  return 1;
}

/* Members of region R (ending at node E) in order, with their store flags
 * and direct destinations; a direct destination is dropped when a load of
 * the region aliases it without being the identical view. Returns the
 * count. */
static int region_list(const tpuir_graph *g, int R, int E, const char *live,
                       const int32_t *reg, int32_t *rpar, const int32_t *rfirst,
                       const char *ext, const tpu_view *const *direct,
                       const xv *vals, int32_t *members, char *store,
                       const tpu_view **dsts) {
  int nm = 0;
  for (int u = rfirst[R]; u <= E; u++) {
    if (!live[u] || reg[u] < 0 || uf_find(rpar, reg[u]) != R) continue;
    store[nm] = ext[u];
    dsts[nm] = direct[u];
    members[nm++] = u;
  }
  /* loads aliasing a direct destination must be the identical view */
  for (int k = 0; k < nm; k++) {
    if (!dsts[k]) continue;
    for (int q = 0; q < nm && dsts[k]; q++) {
      const tpuir_node *m = tpuir_get_node(g, members[q]);
      for (int a = 0; a < m->nin && dsts[k]; a++) {
        int o = m->in[a];
        if (reg[o] >= 0 && uf_find(rpar, reg[o]) == R) continue;
        const tpu_view *ov = &vals[o].v;
        if (tpux__views_overlap(ov, dsts[k]) && !tpux__views_same(ov, dsts[k]))
          dsts[k] = NULL;
      }
    }
  }
  return nm;
}

/* Run graph g (see tpu_exec.h). Borrowed: g, ins, outs. */
int tpux_run(const tpuir_graph *g, int nin, const tpu_view *ins, int nout,
             const tpu_view *outs) {
  if (!g) return tpu_error(TPU_E_INVALID, "tpux_run: NULL graph");
  if (nin != tpuir_num_params(g))
    return tpu_error(TPU_E_INVALID, "tpux_run: graph has %d parameters, got %d",
                     tpuir_num_params(g), nin);
  if (nout != tpuir_num_outputs(g))
    return tpu_error(TPU_E_INVALID, "tpux_run: graph has %d outputs, got %d",
                     tpuir_num_outputs(g), nout);
  if ((nin && !ins) || (nout && !outs))
    return tpu_error(TPU_E_INVALID, "tpux_run: NULL bindings");
  int nn = tpuir_num_nodes(g);
  for (int t = 0, k = 0; t < nn; t++) {
    const tpuir_node *n = tpuir_get_node(g, t);
    if (n->op != TPUIR_PARAM) continue;
    int rc = check_binding("input", k, &ins[n->dim], n);
    if (rc) return rc;
    k++;
  }
  for (int i = 0; i < nout; i++) {
    int rc = check_binding("output", i, &outs[i], tpuir_get_node(g, tpuir_output(g, i)));
    if (rc) return rc;
  }

  /* ---- plan: liveness, fused regions, last use, storage roots ---- */
  size_t nb = (size_t)(nn ? nn : 1);
  int32_t *last = malloc(nb * sizeof(int32_t));
  int32_t *root = malloc(nb * sizeof(int32_t));
  int32_t *users = calloc(nb, sizeof(int32_t)); /* users outside the region */
  int32_t *head = malloc(nb * sizeof(int32_t)), *next = malloc(nb * sizeof(int32_t));
  int32_t *reg = malloc(nb * sizeof(int32_t));   /* region (union-find) or -1 */
  int32_t *rpar = malloc(nb * sizeof(int32_t));  /* union-find parent */
  int32_t *rfirst = malloc(nb * sizeof(int32_t)), *rlast = malloc(nb * sizeof(int32_t));
  int32_t *rsize = malloc(nb * sizeof(int32_t)), *rin = malloc(nb * sizeof(int32_t));
  int32_t *rsc = malloc(nb * sizeof(int32_t)); /* scalar-broadcast inputs */
  char *rclosed = calloc(nb, 1), *rfail = calloc(nb, 1), *ext = calloc(nb, 1);
  char *live = calloc(nb, 1);
  xv *vals = calloc(nb, sizeof(xv));
  const tpu_view **direct = calloc(nb, sizeof(*direct));
  char *out_done = calloc((size_t)(nout ? nout : 1), 1);
  int32_t *members = malloc(sizeof(int32_t) * XK_REGION_MAX_NODES);
  /* GEMM epilogues: epi[t] = region fused into dot t (or -1); preown[u] =
   * dot at which node u is evaluated early (or -1); rfused[R]; done[u] */
  int32_t *epi = malloc(nb * sizeof(int32_t)), *preown = malloc(nb * sizeof(int32_t));
  int32_t *plist = malloc(2 * nb * sizeof(int32_t)), *rearly = malloc(nb * sizeof(int32_t));
  char *rfused = calloc(nb, 1), *done = calloc(nb, 1);
  int32_t *rred = malloc(nb * sizeof(int32_t)); /* region -> fused REDUCE */
  int rc = TPU_OK;
  if (!last || !root || !users || !head || !next || !reg || !rpar || !rfirst ||
      !rlast || !rsize || !rin || !rsc || !rclosed || !rfail || !ext || !live || !vals ||
      !direct || !out_done || !members || !epi || !preown || !plist || !rfused ||
      !done || !rearly || !rred) {
    rc = tpu_error(TPU_E_OOM, "tpux_run: out of host memory");
    goto done;
  }
  const int32_t INF = nn;
  int last_fail = -1;
  for (int t = 0; t < nn; t++) {
    last[t] = -1;
    reg[t] = -1;
    rpar[t] = t;
    if (tpuir_node_can_fail(g, t)) {
      live[t] = 1;
      last_fail = t;
    }
  }
  for (int i = 0; i < nout; i++) {
    live[tpuir_output(g, i)] = 1;
    last[tpuir_output(g, i)] = INF;
  }
  for (int t = nn - 1; t >= 0; t--) {
    if (!live[t]) continue;
    const tpuir_val *ops;
    int no = node_operands(tpuir_get_node(g, t), &ops);
    for (int k = 0; k < no; k++) live[ops[k]] = 1;
  }
  /* fused elementwise regions: an elementwise node joins the open regions
   * of its operands; a region closes when anything outside it consumes one
   * of its values (it then runs before that consumer) */
  for (int t = 0; t < nn; t++) {
    if (!live[t]) continue;
    const tpuir_node *n = tpuir_get_node(g, t);
    const tpuir_val *ops;
    int no = node_operands(n, &ops);
    int R = -1;
    if (tpuir_op_is_elementwise(n->op) && !tpux__is_complex_node(g, n)) {
      int cand[3], nc = 0;
      for (int k = 0; k < no; k++) {
        if (reg[ops[k]] < 0) continue;
        int r = uf_find(rpar, reg[ops[k]]);
        if (rclosed[r]) continue;
        int dup = 0;
        for (int q = 0; q < nc; q++) dup |= cand[q] == r;
        if (!dup) cand[nc++] = r;
      }
      /* try all candidates, then each alone */
      for (int mode = 0; mode <= nc && R < 0; mode++) {
        int sel[3], ns = 0;
        if (mode == 0) {
          for (int q = 0; q < nc; q++) sel[ns++] = cand[q];
          if (ns == 0) break;
        } else {
          sel[ns++] = cand[mode - 1];
        }
        int size = 1, in = 0, sc = 0, fail = tpuir_node_can_fail(g, t);
        for (int q = 0; q < ns; q++) {
          size += rsize[sel[q]];
          in += rin[sel[q]];
          sc += rsc[sel[q]];
          fail |= rfail[sel[q]];
        }
        for (int k = 0; k < no; k++) {
          int inside = 0;
          if (reg[ops[k]] >= 0)
            for (int q = 0; q < ns; q++) inside |= uf_find(rpar, reg[ops[k]]) == sel[q];
          if (inside) continue;
          if (is_scalar_bcast(g, ops[k])) sc++;
          else in++;
        }
        if (size > XK_REGION_MAX_NODES || in > XK_REGION_MAX_INPUTS ||
            sc > XK_REGION_MAX_SCALARS)
          continue;
        R = sel[0];
        for (int q = 1; q < ns; q++) {
          rpar[sel[q]] = R;
          if (rfirst[sel[q]] < rfirst[R]) rfirst[R] = rfirst[sel[q]];
        }
        rsize[R] = size;
        rin[R] = in;
        rsc[R] = sc;
        rfail[R] = (char)fail;
      }
      if (R < 0) { /* a new region */
        R = t;
        rfirst[R] = t;
        rsize[R] = 1;
        rin[R] = 0;
        rsc[R] = 0;
        for (int k = 0; k < no; k++) {
          if (is_scalar_bcast(g, ops[k])) rsc[R]++;
          else rin[R]++;
        }
        rfail[R] = (char)tpuir_node_can_fail(g, t);
      }
      reg[t] = R;
      rlast[R] = t;
    }
    for (int k = 0; k < no; k++) { /* consumers outside a region close it */
      if (reg[ops[k]] < 0) continue;
      int r = uf_find(rpar, reg[ops[k]]);
      if (r != R) rclosed[r] = 1;
    }
  }
  /* last use: a region member consumes its operands when the region runs */
  for (int t = 0; t < nn; t++) {
    if (!live[t]) continue;
    const tpuir_val *ops;
    int no = node_operands(tpuir_get_node(g, t), &ops);
    int R = reg[t] >= 0 ? uf_find(rpar, reg[t]) : -1;
    int pos = R >= 0 ? rlast[R] : t;
    for (int k = 0; k < no; k++) {
      int o = ops[k];
      if (last[o] < pos) last[o] = pos;
      if (reg[o] < 0 || uf_find(rpar, reg[o]) != R) users[o]++; /* outside */
      if (reg[o] >= 0 && uf_find(rpar, reg[o]) != R) ext[o] = 1;
    }
  }
  for (int i = 0; i < nout; i++) ext[tpuir_output(g, i)] = 1;
  for (int t = nn - 1; t >= 0; t--) { /* views keep their storage alive */
    const tpuir_node *n = tpuir_get_node(g, t);
    if (!live[t] || !is_view_op(n->op)) continue;
    if (last[n->in[0]] < last[t]) last[n->in[0]] = last[t];
  }
  for (int t = 0; t < nn; t++) {
    const tpuir_node *n = tpuir_get_node(g, t);
    root[t] = is_view_op(n->op) ? root[n->in[0]] : t;
    head[t] = -1;
  }
  for (int t = 0; t < nn; t++) { /* free lists: value t dies after node last[t] */
    if (!live[t]) continue;
    int at = last[t] < 0 ? t : last[t];
    if (reg[t] >= 0 && at < rlast[uf_find(rpar, reg[t])])
      at = rlast[uf_find(rpar, reg[t])];
    if (at >= INF) continue;
    next[t] = head[at];
    head[at] = t;
  }
  /* direct writes of region outputs into their destination */
  for (int i = 0; i < nout; i++) {
    int t = tpuir_output(g, i);
    if (reg[t] < 0 || direct[t]) continue;
    int R = uf_find(rpar, reg[t]), E = rlast[R];
    if (rfail[R] || E < last_fail) continue; /* errors must precede writes */
    int ok = 1;
    for (int j = 0; j < nout; j++) ok &= j == i || tpuir_output(g, j) != t;
    for (int u = t + 1; u < nn && ok; u++) { /* all users inside the region */
      if (!live[u]) continue;
      const tpuir_val *ops;
      int no = node_operands(tpuir_get_node(g, u), &ops);
      for (int k = 0; k < no; k++)
        if (ops[k] == t && (reg[u] < 0 || uf_find(rpar, reg[u]) != R)) ok = 0;
    }
    for (int p = 0; p < nn && ok; p++) {
      const tpuir_node *pn = tpuir_get_node(g, p);
      if (pn->op != TPUIR_PARAM || !live[p]) continue;
      if (!tpux__views_overlap(&ins[pn->dim], &outs[i])) continue;
      if (last[p] > E) ok = 0; /* read later (or itself an output) */
    }
    if (ok) direct[t] = &outs[i];
  }
  /* GEMM epilogues: a float DOT_GENERAL
   * whose value an elementwise region of the same shape reads directly, if
   * that region cannot fail and every other input of it exists when the dot
   * runs (parameters, constants and views may be evaluated early), runs
   * the region on each finished GEMM block (exec/vtpu/epilogue.c). The region
   * then runs at the dot's position: its direct output writes are re-checked
   * against everything that still reads an overlapping parameter from
   * there on (the dot's own operands included); if one would have to become
   * a copy, the region is not fused. */
  for (int t = 0; t < nn; t++) {
    epi[t] = -1;
    preown[t] = -1;
    rearly[t] = -1;
  }
  epi_plan P = {g, live, rfail, rfused, reg, rfirst, rlast, rearly, rpar, plist, 0};
  for (int t = 0; t < nn && tpux__epilogue_enabled(); t++) {
    const tpuir_node *n = tpuir_get_node(g, t);
    if (!live[t] || n->op != TPUIR_DOT_GENERAL) continue;
    if (!tpu_dtype_is_float(n->dtype) ||
        !tpu_dtype_is_float(tpuir_get_node(g, n->in[0])->dtype))
      continue; /* exec/vtpu/dot.c still decides whether its GEMM can take it */
    int R = -1;
    for (int u = t + 1; u < nn && R < 0; u++) {
      if (!live[u] || reg[u] < 0) continue;
      const tpuir_val *ops;
      int no = node_operands(tpuir_get_node(g, u), &ops);
      for (int k = 0; k < no; k++)
        if (ops[k] == t) R = uf_find(rpar, reg[u]);
    }
    if (R < 0 || rfused[R] || rfail[R]) continue;
    const tpuir_node *rn = tpuir_get_node(g, rlast[R]);
    int ok = rn->ndim == n->ndim;
    P.np = 0;
    for (int d = 0; ok && d < n->ndim; d++) ok = rn->sizes[d] == n->sizes[d];
    for (int u = rfirst[R]; u <= rlast[R] && ok; u++) {
      if (!live[u] || reg[u] < 0 || uf_find(rpar, reg[u]) != R) continue;
      const tpuir_node *m = tpuir_get_node(g, u);
      for (int k = 0; k < m->nin && ok; k++) {
        int o = m->in[k];
        if (o == t || (reg[o] >= 0 && uf_find(rpar, reg[o]) == R)) continue;
        ok = epi_input_ok(&P, t, o);
      }
    }
    /* direct writes must stay direct (else the fusion would cost a copy) */
    for (int u = rfirst[R]; u <= rlast[R] && ok; u++) {
      if (!live[u] || reg[u] < 0 || uf_find(rpar, reg[u]) != R || !direct[u]) continue;
      const tpu_view *dv = direct[u];
      int dok = last_fail < t;
      for (int p = 0; p < nn && dok; p++) {
        const tpuir_node *pn = tpuir_get_node(g, p);
        if (pn->op != TPUIR_PARAM || !live[p]) continue;
        if (!tpux__views_overlap(&ins[pn->dim], dv)) continue;
        for (int i = 0; i < nout && dok; i++) dok = root[tpuir_output(g, i)] != p;
        for (int v = 0; v < nn && dok; v++) { /* readers at or after t */
          const tpuir_node *vn = tpuir_get_node(g, v);
          if (!live[v] || is_view_op(vn->op)) continue;
          int Rv = reg[v] >= 0 ? uf_find(rpar, reg[v]) : -1;
          if (Rv == R) continue;
          int pos = Rv >= 0 ? rlast[Rv] : v;
          if (pos < t) continue;
          const tpuir_val *ops;
          int no = node_operands(vn, &ops);
          for (int k = 0; k < no; k++) dok &= root[ops[k]] != p;
        }
      }
      ok = dok;
    }
    if (!ok) continue;
    epi[t] = R;
    rfused[R] = 1;
    for (int q = 0; q < P.np; q++) {
      if (plist[q] >= 0 && preown[plist[q]] < 0) preown[plist[q]] = t;
      if (plist[q] < 0) rearly[-plist[q] - 1] = t;
    }
  }

  /* reductions fused with their producer: a REDUCE whose operand is a
   * member of a region that cannot fail (and is not run in a GEMM epilogue
   * or early) is evaluated by the region itself, window by window inside
   * the reduction's loops (exec/vtpu/reduce.c), at the region's position. An
   * operand with no other user outside the region that is not a graph
   * output is never materialised (ext cleared); otherwise the windows
   * store it as usual and the reduction reads it back while it is hot.
   * One REDUCE per region. */
  for (int t = 0; t < nn; t++) rred[t] = -1;
  for (int t = 0; t < nn && tpux__reduce_fusion_enabled(); t++) {
    const tpuir_node *n = tpuir_get_node(g, t);
    if (!live[t] || n->op != TPUIR_REDUCE || tpux__is_complex_node(g, n)) continue;
    int m = n->in[0];
    if (reg[m] < 0) continue;
    int R = uf_find(rpar, reg[m]);
    if (rfail[R] || rfused[R] || rearly[R] >= 0 || rred[R] >= 0) continue;
    int only = users[m] == 1; /* t is the only user outside the region */
    for (int i = 0; i < nout && only; i++) only = tpuir_output(g, i) != m;
    if (only) ext[m] = 0;
    rred[R] = t;
  }

  /* ---- evaluate ---- */
  xctx c = {g, vals};
  char store[XK_REGION_MAX_NODES];
  const tpu_view *dsts[XK_REGION_MAX_NODES];
  for (int t = 0; t < nn && rc == TPU_OK; t++) {
    if (!live[t]) continue;
    int nm = 0;
    if (done[t]) {
      /* evaluated early, for a GEMM epilogue */
    } else if (reg[t] >= 0) {
      int R = uf_find(rpar, reg[t]);
      if (rlast[R] == t && !rfused[R] && rearly[R] < 0) {
        nm = region_list(g, R, t, live, reg, rpar, rfirst, ext, direct, vals,
                         members, store, dsts);
        int rt = rred[R], k = 0;
        if (rt >= 0) {
          while (k < nm && members[k] != tpuir_get_node(g, rt)->in[0]) k++;
          rc = tpux__eval_region_reduce(&c, nm, members, store, dsts, k, rt);
          done[rt] = 1;
        } else {
          rc = tpux__eval_region(&c, nm, members, store, dsts);
        }
      }
    } else if (epi[t] >= 0) {
      int R = epi[t];
      for (int u = t + 1; u <= rlast[R] && rc == TPU_OK; u++) {
        int Ru = reg[u] >= 0 ? uf_find(rpar, reg[u]) : -1;
        if (preown[u] == t && !done[u]) {
          rc = eval_node(&c, u, ins);
          done[u] = 1;
        } else if (Ru >= 0 && rlast[Ru] == u && rearly[Ru] == t) {
          /* a small region run early (no direct writes: it runs before
           * readers of the destinations it would have had) */
          nm = region_list(g, Ru, u, live, reg, rpar, rfirst, ext, direct, vals,
                           members, store, dsts);
          for (int k = 0; k < nm; k++) dsts[k] = NULL;
          rc = tpux__eval_region(&c, nm, members, store, dsts);
        }
      }
      if (rc == TPU_OK) {
        nm = region_list(g, R, rlast[R], live, reg, rpar, rfirst, ext, direct,
                         vals, members, store, dsts);
        rc = tpux__eval_dot_fused(&c, t, nm, members, store, dsts);
      }
    } else {
      rc = eval_node(&c, t, ins);
    }
    for (int k = 0; k < nm && rc == TPU_OK; k++)
      if (dsts[k])
        for (int i = 0; i < nout; i++)
          if (tpuir_output(g, i) == members[k]) out_done[i] = 1;
    for (int v = head[t]; v >= 0; v = next[v]) {
      tpux__free(vals[v].mem);
      vals[v].mem = NULL;
    }
  }
  if (rc) goto done;

  /* ---- outputs ---- */
  /* values that live in caller memory and overlap a destination are copied
   * to a temporary first, so every output sees the inputs as they were */
  for (int i = 0; i < nout && rc == TPU_OK; i++) {
    if (out_done[i]) continue;
    int v = tpuir_output(g, i);
    int r = root[v];
    if (vals[r].mem) continue; /* private temporary */
    const tpu_view *sv = &vals[v].v;
    int clash = 0;
    for (int j = 0; j < nout && !clash; j++) {
      if (!tpux__views_overlap(sv, &outs[j])) continue;
      if (j == i && tpux__views_same(sv, &outs[j])) continue;
      clash = 1;
    }
    if (!clash) continue;
    int64_t numel = tpu_view_numel(sv);
    void *m = tpux__alloc((size_t)numel * tpu_dtype_size(sv->dtype));
    if (!m) {
      rc = tpu_error(TPU_E_OOM, "tpux_run: out of host memory");
      break;
    }
    tpu_view tv;
    tpu_view_init_contiguous(&tv, m, sv->dtype, sv->ndim, sv->sizes);
    rc = tpux__copy_nocheck(&tv, sv);
    tpux__free(vals[v].mem);
    vals[v].mem = m;
    vals[v].v = tv;
    root[v] = v;
  }
  for (int i = 0; i < nout && rc == TPU_OK; i++) {
    if (out_done[i]) continue;
    const tpu_view *sv = &vals[tpuir_output(g, i)].v;
    if (tpux__views_same(sv, &outs[i])) continue;
    rc = tpux__copy_nocheck(&outs[i], sv);
  }

done:
  if (vals)
    for (int t = 0; t < nn; t++) tpux__free(vals[t].mem);
  free(reg);
  free(rpar);
  free(rfirst);
  free(rlast);
  free(rsize);
  free(rin);
  free(rsc);
  free(rclosed);
  free(rfail);
  free(ext);
  free(members);
  free(epi);
  free(preown);
  free(plist);
  free(rearly);
  free(rfused);
  free(done);
  free(rred);
  free(last);
  free(root);
  free(users);
  free(head);
  free(next);
  free(live);
  free(vals);
  free(direct);
  free(out_done);
  return rc;
}

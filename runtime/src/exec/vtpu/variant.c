/* exec/vtpu/variant.c - the part of a vTPU plan that depends on how the
 * bindings alias (prefix tpux__): for one aliasing pattern (which outputs
 * overlap which live parameters) and one setting of the fusion switches,
 * decide the direct writes of region outputs, the GEMM epilogues and the
 * fused reductions, and lay the program out as a list of steps
 * (exec/vtpu/exec.c runs them). The rules are in exec/vtpu/exec.c's header.
 *
 * Variants are built under the plan's mutex and published with a release
 * store at the head of the plan's list; they are never changed afterwards,
 * so runs find them without a lock. A plan keeps at most XVAR_MAX of them
 * (a program whose bindings alias in ever new ways plans the extra ones
 * per run and frees them after it).
 */
#include <stdlib.h>

#include "exec/vtpu/internal.h"

/* Planning state of one variant (freed when the variant is built). */
typedef struct vbuild {
  const tpux_plan *p;
  int flags;
  const int32_t *pairs; /* aliasing pattern, sorted by candidate */
  int32_t *pstart;      /* pairs of candidate c: [pstart[c], pstart[c + 1]) */
  int32_t *direct_out;  /* node -> output index it is stored into directly, or -1 */
  int32_t *epi;         /* dot -> region run in its epilogue, or -1 */
  int32_t *preown;      /* node -> dot at which it is evaluated early, or -1 */
  int32_t *rearly;      /* region -> dot at which it runs early, or -1 */
  int32_t *rred;        /* region -> REDUCE it feeds tile by tile, or -1 */
  int32_t *plist;       /* early work of the dot being planned: node u or region as -(R + 1) */
  int np;
  char *rfused, *ext, *done;
  int nmem, nload, nfree; /* filled part of the variant's pools */
} vbuild;

/* ---- direct writes ---------------------------------------------------------- */

/* A candidate region output is written straight into its destination when
 * no live parameter overlapping the destination is read after the region
 * runs (or is itself an output); a dot's, when none is read from the dot
 * on (its operands are read while C is written); neither when another
 * output's destination overlaps it. */
static void var_direct(vbuild *B) {
  const tpux_plan *p = B->p;
  for (int c = 0; c < p->ncand; c++) {
    int i = p->cand[c], t = p->outv[i], ok = 1;
    int E = p->reg[t] >= 0 ? p->rlast[p->reg[t]] : t - 1;
    for (int q = B->pstart[c]; q < B->pstart[c + 1]; q++)
      if (B->pairs[2 * q + 1] >= p->nlp || p->last[p->lp[B->pairs[2 * q + 1]]] > E) ok = 0;
    if (ok) B->direct_out[t] = i;
  }
}

/* ---- GEMM epilogues ----------------------------------------------------------- */

/* small regions (a few scalars: optimizer step counts, bias corrections)
 * may run early, before a dot, to feed its epilogue */
#define EPI_EARLY_REGION_NUMEL 16

static int epi_listed(const vbuild *B, int item) {
  for (int q = 0; q < B->np; q++)
    if (B->plist[q] == item) return 1;
  return 0;
}

/* Whether value o of a region fused into the epilogue of dot t is
 * available when t runs: computed before t (a region member only once its
 * region has run), or a parameter/constant/iota, a view chain, or a small
 * region that cannot fail, of such inputs, which can then be evaluated
 * early (appended to B->plist). */
static int epi_input_ok(vbuild *B, int t, int o) {
  const tpux_plan *p = B->p;
  int Ro = p->reg[o];
  if (Ro >= 0 && (B->rfused[Ro] || B->rearly[Ro] >= 0))
    return 1; /* runs at an earlier dot (dots are planned in order) */
  if (o < t) return Ro < 0 || p->rlast[Ro] < t;
  if (o == t) return 0; /* a view of the dot's value: other element order */
  const tpuir_node *n = tpuir_get_node(p->g, o);
  if (Ro >= 0) {
    if (p->rfail[Ro] || epi_listed(B, -(Ro + 1))) return !p->rfail[Ro];
    int64_t numel = 1;
    for (int d = 0; d < n->ndim; d++) numel *= n->sizes[d];
    if (numel > EPI_EARLY_REGION_NUMEL) return 0;
    for (int u = p->rfirst[Ro]; u <= p->rlast[Ro]; u++) {
      if (!p->live[u] || p->reg[u] != Ro) continue;
      const tpuir_node *m = tpuir_get_node(p->g, u);
      for (int k = 0; k < m->nin; k++)
        if (p->reg[m->in[k]] != Ro && !epi_input_ok(B, t, m->in[k])) return 0;
    }
    B->plist[B->np++] = -(Ro + 1);
    return 1;
  }
  if (epi_listed(B, o)) return 1;
  if (n->op != TPUIR_PARAM && n->op != TPUIR_CONST && n->op != TPUIR_IOTA &&
      !(tpux__is_view_op(n->op) && epi_input_ok(B, t, n->in[0])))
    return 0;
  B->plist[B->np++] = o;
  return 1;
}

/* The region that reads dot t's value directly (its first live user in a
 * region), or -1. */
static int epi_region_of(const tpux_plan *p, int t) {
  for (int u = t + 1; u < p->nn; u++) {
    if (!p->live[u] || p->reg[u] < 0) continue;
    const tpuir_val *ops;
    int no = tpux__node_operands(tpuir_get_node(p->g, u), &ops);
    for (int k = 0; k < no; k++)
      if (ops[k] == t) return p->reg[u];
  }
  return -1;
}

/* Region R has dot t's shape and every input of it other than t is
 * available when t runs (early work listed in B->plist). */
static int epi_inputs_ok(vbuild *B, int t, int R) {
  const tpux_plan *p = B->p;
  const tpuir_node *n = tpuir_get_node(p->g, t), *rn = tpuir_get_node(p->g, p->rlast[R]);
  B->np = 0;
  if (rn->ndim != n->ndim) return 0;
  for (int d = 0; d < n->ndim; d++)
    if (rn->sizes[d] != n->sizes[d]) return 0;
  for (int u = p->rfirst[R]; u <= p->rlast[R]; u++) {
    if (!p->live[u] || p->reg[u] != R) continue;
    const tpuir_node *m = tpuir_get_node(p->g, u);
    for (int k = 0; k < m->nin; k++) {
      int o = m->in[k];
      if (o == t || p->reg[o] == R) continue;
      if (!epi_input_ok(B, t, o)) return 0;
    }
  }
  return 1;
}

/* Parameter pn is an output's storage or is read at or after dot t outside
 * region R. */
static int epi_param_busy(const tpux_plan *p, int t, int R, int pn) {
  for (int i = 0; i < p->nout; i++)
    if (p->root[p->outv[i]] == pn) return 1;
  for (int v = 0; v < p->nn; v++) { /* readers at or after t */
    const tpuir_node *vn = tpuir_get_node(p->g, v);
    if (!p->live[v] || tpux__is_view_op(vn->op)) continue;
    int Rv = p->reg[v];
    if (Rv == R || (Rv >= 0 ? p->rlast[Rv] : v) < t) continue;
    const tpuir_val *ops;
    int no = tpux__node_operands(vn, &ops);
    for (int k = 0; k < no; k++)
      if (p->root[ops[k]] == pn) return 1;
  }
  return 0;
}

/* Run at dot t, region R's direct writes stay direct (else the fusion
 * would cost a copy): no node that can fail runs after t, and no
 * parameter overlapping a destination is still read from t on. */
static int epi_directs_ok(const vbuild *B, int t, int R) {
  const tpux_plan *p = B->p;
  for (int u = p->rfirst[R]; u <= p->rlast[R]; u++) {
    if (!p->live[u] || p->reg[u] != R || B->direct_out[u] < 0) continue;
    if (p->last_fail >= t) return 0;
    int c = p->dcand[u];
    for (int q = B->pstart[c]; q < B->pstart[c + 1]; q++)
      if (B->pairs[2 * q + 1] >= p->nlp || epi_param_busy(p, t, R, p->lp[B->pairs[2 * q + 1]]))
        return 0;
  }
  return 1;
}

/* GEMM epilogues: a float DOT_GENERAL whose value an elementwise region of
 * the same shape reads directly, if that region cannot fail and every other
 * input of it exists when the dot runs (parameters, constants and views may
 * be evaluated early), runs the region on each finished GEMM block
 * (exec/vtpu/epilogue.c), unless a direct write would have to become a copy. */
static void var_epilogues(vbuild *B) {
  const tpux_plan *p = B->p;
  for (int t = 0; t < p->nn && (B->flags & 1); t++) {
    const tpuir_node *n = tpuir_get_node(p->g, t);
    if (!p->live[t] || n->op != TPUIR_DOT_GENERAL) continue;
    if (!tpu_dtype_is_float(n->dtype) || !tpu_dtype_is_float(tpuir_get_node(p->g, n->in[0])->dtype))
      continue; /* exec/vtpu/dot.c still decides whether its GEMM can take it */
    int R = epi_region_of(p, t);
    if (R < 0 || B->rfused[R] || p->rfail[R]) continue;
    if (!epi_inputs_ok(B, t, R) || !epi_directs_ok(B, t, R)) continue;
    B->epi[t] = R;
    B->rfused[R] = 1;
    for (int q = 0; q < B->np; q++) {
      int x = B->plist[q];
      if (x >= 0 && B->preown[x] < 0) B->preown[x] = t;
      if (x < 0) B->rearly[-x - 1] = t;
    }
  }
}

/* Reductions fused with their producer: a REDUCE whose operand is a member
 * of a region that cannot fail (and is not run in a GEMM epilogue or early)
 * is evaluated by the region, window by window (exec/vtpu/reduce.c). An
 * operand with no other user outside the region that is not an output is
 * never materialised (ext cleared). One REDUCE per region. */
static void var_reduce(vbuild *B) {
  const tpux_plan *p = B->p;
  for (int t = 0; t < p->nn && (B->flags & 2); t++) {
    const tpuir_node *n = tpuir_get_node(p->g, t);
    if (!p->live[t] || n->op != TPUIR_REDUCE || tpux__is_complex_node(p->g, n)) continue;
    int m = n->in[0], R = p->reg[m];
    if (R < 0 || p->rfail[R] || B->rfused[R] || B->rearly[R] >= 0 || B->rred[R] >= 0) continue;
    int only = p->users[m] == 1; /* t is the only user outside the region */
    for (int i = 0; i < p->nout && only; i++) only = p->outv[i] != m;
    if (only) B->ext[m] = 0;
    B->rred[R] = t;
  }
}

/* ---- steps ------------------------------------------------------------------------ */

static xstep *emit(xvar *v, int kind, int t) {
  xstep *s = &v->steps[v->nsteps++];
  memset(s, 0, sizeof *s);
  s->kind = kind;
  s->t = t;
  return s;
}

/* A step running region R (members up to E). direct: members may store
 * into their destinations; then the region's operands from outside are
 * listed for the run's alias check (not the dot of an epilogue: its value
 * is a fresh temporary). */
static xstep *emit_region(vbuild *B, xvar *v, int kind, int R, int E, int t, int direct) {
  const tpux_plan *p = B->p;
  xstep *s = emit(v, kind, t);
  int any = 0;
  s->m0 = B->nmem;
  for (int u = p->rfirst[R]; u <= E; u++) {
    if (!p->live[u] || p->reg[u] != R) continue;
    v->members[B->nmem] = u;
    v->store[B->nmem] = B->ext[u];
    v->dout[B->nmem] = direct ? B->direct_out[u] : -1;
    any |= v->dout[B->nmem++] >= 0;
  }
  s->nm = B->nmem - s->m0;
  s->l0 = B->nload;
  for (int q = 0; q < s->nm && any; q++) {
    const tpuir_node *m = tpuir_get_node(p->g, v->members[s->m0 + q]);
    for (int a = 0; a < m->nin; a++) {
      int o = m->in[a], dup = p->reg[o] == R || p->virt[o] || (kind == XS_DOT_EPI && o == t);
      for (int l = s->l0; l < B->nload && !dup; l++) dup = v->loads[l] == o;
      if (!dup) v->loads[B->nload++] = o;
    }
  }
  s->nl = B->nload - s->l0;
  return s;
}

/* Dot t with a region in its epilogue: first the early work for it. */
static void schedule_epi(vbuild *B, xvar *v, int t) {
  const tpux_plan *p = B->p;
  int R = B->epi[t];
  for (int u = t + 1; u <= p->rlast[R]; u++) {
    int Ru = p->reg[u];
    if (B->preown[u] == t && !B->done[u]) {
      emit(v, XS_NODE, u);
      B->done[u] = 1;
    } else if (Ru >= 0 && p->rlast[Ru] == u && B->rearly[Ru] == t) {
      /* a small region run early (no direct writes: it runs before
       * readers of the destinations it would have had) */
      emit_region(B, v, XS_REGION, Ru, u, u, 0);
    }
  }
  emit_region(B, v, XS_DOT_EPI, R, p->rlast[R], t, 1)->k = B->direct_out[t] + 1;
}

/* The steps of live position t, then its frees. */
static void schedule_pos(vbuild *B, xvar *v, int t) {
  const tpux_plan *p = B->p;
  int s0 = v->nsteps, R = p->reg[t];
  if (B->done[t] || p->virt[t]) {
    /* evaluated early (GEMM epilogue), by its region (fused reduction) or
     * by the regions that load it (an IOTA) */
  } else if (R >= 0) {
    if (p->rlast[R] == t && !B->rfused[R] && B->rearly[R] < 0) {
      int rt = B->rred[R];
      if (rt < 0) {
        emit_region(B, v, XS_REGION, R, t, t, 1);
      } else {
        xstep *s = emit_region(B, v, XS_REGION_REDUCE, R, t, rt, 1);
        int m = tpuir_get_node(p->g, rt)->in[0];
        while (s->k < s->nm && v->members[s->m0 + s->k] != m) s->k++;
        B->done[rt] = 1;
      }
    }
  } else if (B->epi[t] >= 0) {
    schedule_epi(B, v, t);
  } else {
    xstep *s = emit(v, XS_NODE, t);
    if (tpux__writes_whole_value(tpuir_get_node(p->g, t)->op)) s->k = B->direct_out[t] + 1;
  }
  for (int u = p->chead[t]; u >= 0; u = p->cnext[u]) emit(v, XS_CHECK, u);
  if (p->head[t] < 0) return;
  if (v->nsteps == s0) emit(v, XS_FREE, t);
  xstep *s = &v->steps[v->nsteps - 1];
  s->f0 = B->nfree;
  for (int x = p->head[t]; x >= 0; x = p->next[x]) v->frees[B->nfree++] = x;
  s->nf = B->nfree - s->f0;
}

/* ---- building and finding variants ----------------------------------------------- */

/* One block for a variant, sized by upper bounds: a step per live
 * position plus one per early node, region or index check, every node a member at most
 * once, at most 3 loads per member. */
static xvar *var_alloc(const tpux_plan *p, int npairs) {
  size_t nb = (size_t)(p->nn ? p->nn : 1);
  size_t bytes = sizeof(xvar) + 2 * nb * sizeof(xstep) +
                 (6 * nb + 2 * (size_t)npairs) * sizeof(int32_t) + nb;
  xvar *v = malloc(bytes);
  if (!v) return NULL;
  memset(v, 0, sizeof *v);
  v->steps = (xstep *)(v + 1);
  int32_t *w = (int32_t *)(v->steps + 2 * nb);
  v->members = w, w += nb;
  v->dout = w, w += nb;
  v->loads = w, w += 3 * nb;
  v->frees = w, w += nb;
  v->pairs = w, w += 2 * npairs;
  v->store = (char *)w;
  return v;
}

/* Temporaries of one variant's planning, initialised. */
static int32_t *vbuild_init(vbuild *B, const tpux_plan *p) {
  size_t nb = (size_t)(p->nn ? p->nn : 1);
  int32_t *w = malloc((7 * nb + (size_t)p->ncand + 1) * sizeof(int32_t) + 3 * nb);
  if (!w) return NULL;
  int32_t *base = w;
  B->direct_out = w, w += nb;
  B->epi = w, w += nb;
  B->preown = w, w += nb;
  B->rearly = w, w += nb;
  B->rred = w, w += nb;
  for (int32_t *q = base; q < w; q++) *q = -1;
  B->plist = w, w += 2 * nb;
  B->pstart = w, w += p->ncand + 1;
  B->rfused = (char *)w;
  B->done = B->rfused + nb;
  B->ext = B->done + nb;
  memset(B->rfused, 0, 2 * nb);
  memcpy(B->ext, p->ext, nb);
  return base;
}

static int var_build(const tpux_plan *p, int flags, int npairs, const int32_t *pairs,
                     xvar **out) {
  vbuild B = {.p = p, .flags = flags, .pairs = pairs};
  xvar *v = var_alloc(p, npairs);
  int32_t *tmp = v ? vbuild_init(&B, p) : NULL;
  if (!tmp) {
    free(v);
    return tpu_error(TPU_E_OOM, "vTPU plan: out of host memory");
  }
  v->flags = flags;
  v->npairs = npairs;
  if (npairs) memcpy(v->pairs, pairs, 2 * (size_t)npairs * sizeof(int32_t));
  for (int c = 0, q = 0; c <= p->ncand; c++) {
    while (q < npairs && pairs[2 * q] < c) q++;
    B.pstart[c] = q;
  }
  var_direct(&B);
  var_epilogues(&B);
  var_reduce(&B);
  for (int t = 0; t < p->nn; t++)
    if (p->live[t]) schedule_pos(&B, v, t);
  free(tmp);
  *out = v;
  return TPU_OK;
}

static xvar *var_find(xvar *v, int flags, int npairs, const int32_t *pairs) {
  for (; v; v = v->next)
    if (v->flags == flags && v->npairs == npairs &&
        (!npairs || !memcmp(v->pairs, pairs, 2 * (size_t)npairs * sizeof(int32_t))))
      return v;
  return NULL;
}

int tpux__variant_get(tpux_plan *p, int flags, int npairs, const int32_t *pairs,
                      const xvar **out, int *tmp) {
  *tmp = 0;
  xvar *v = var_find(atomic_load_explicit(&p->vars, memory_order_acquire), flags, npairs, pairs);
  if (v) {
    *out = v;
    return TPU_OK;
  }
  pthread_mutex_lock(&p->mu);
  xvar *head = atomic_load_explicit(&p->vars, memory_order_relaxed);
  v = var_find(head, flags, npairs, pairs); /* planned by a concurrent run */
  int rc = v ? TPU_OK : var_build(p, flags, npairs, pairs, &v);
  if (rc == TPU_OK && !var_find(head, flags, npairs, pairs)) {
    if (p->nvars < XVAR_MAX) {
      v->next = head;
      atomic_store_explicit(&p->vars, v, memory_order_release);
      p->nvars++;
    } else {
      v->next = NULL;
      *tmp = 1;
    }
  }
  pthread_mutex_unlock(&p->mu);
  if (rc == TPU_OK) *out = v;
  return rc;
}

void tpux__variants_free(xvar *v) {
  while (v) {
    xvar *n = v->next;
    free(v);
    v = n;
  }
}

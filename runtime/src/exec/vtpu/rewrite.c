/* exec/vtpu/rewrite.c - the plan's graph rewrite (prefix tpux_): bf16
 * operands for f32 matmuls at DEFAULT precision, attention heads
 * multiplied in place, views shared, index cones first, reductions of
 * reshaped values over the values themselves (reduce_source).
 *
 * DEFAULT multiplies bf16(x) by bf16(w) with f32 accumulation. Left to the
 * matrix unit, every dot rounds (and, for a transposed operand, gathers)
 * its f32 operands itself, so a value read by several dots (an activation
 * by the forward dot and the weight-gradient dot, a weight by the forward
 * and the input-gradient dot) is rounded once per dot. The rewrite
 * rounds each such value once, where it is produced:
 *
 *   dot(view..(x), view..(w)) -> dot(view..(convert(x, bf16)), ...)
 *
 * The convert is placed right after x's node, so an elementwise producer
 * computes it in its fused region (written once, half the bytes; x itself
 * is no longer stored when nothing else reads it), a dot producer runs it
 * as its GEMM epilogue, and a parameter is converted alone, in its own
 * memory order (a transposed weight stays transposed: one flat pass). The
 * view chain between x and the dot (transpose, broadcast, slice, reshape,
 * reverse) is replayed on the bf16 value, and the dot multiplies bf16
 * operands into its f32 result (tpumxu_gemm_io), reading transposed ones
 * in place. Products are the same; the f32 accumulation order may differ
 * where the matrix unit now reads an operand transposed.
 *
 * Only dots of at least REWRITE_MIN_MACS multiply-adds are rewritten (a
 * tiny dot gains nothing and its program would gain regions), and only
 * where bf16 is native to the host (tpumxu_bf16_native: elsewhere the
 * matrix unit would widen the bf16 copies back to f32). Switch:
 * TPUX_FUSE_BF16_OPERANDS (env TORCH_TPU_NO_BF16_OPERANDS=1), read when a
 * program is planned.
 *
 * Heads: attention's batched matmuls see [B*H, T, D] operands, reshaped
 * from [B, H, T, D] views that a transpose took out of [B, T, H, D]
 * activations; B and H do not merge there, so each reshape would be a
 * copy. A dot with one batch dim (leading in both operands) whose operand
 * is such a reshape multiplies the transposed view itself, over batch dims
 * (B, H) (the other operand split likewise, a view); its result is
 * reshaped back (a view: it is contiguous). exec/vtpu/dot.c loops over
 * the batch dims that do not merge (one GEMM call per B), reading the
 * operands in place with their strides. Same products; the f32
 * accumulation order may differ where the GEMM reads an operand strided. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "exec/vtpu/internal.h"
#include "tpu_mxu.h"

#define REWRITE_MIN_MACS ((int64_t)1 << 21)

static atomic_int g_mode = -1; /* -1: environment decides */
static atomic_llong g_dots;    /* dots rewritten (process-wide) */

int tpux__bf16_operands_enabled(void) {
  int m = atomic_load(&g_mode);
  if (m >= 0) return m;
  const char *s = getenv("TORCH_TPU_NO_BF16_OPERANDS");
  return !(s && *s && strcmp(s, "0") != 0);
}

void tpux__set_bf16_operands(int mode) {
  atomic_store(&g_mode, mode < 0 ? -1 : mode != 0);
}

int64_t tpux__bf16_operand_dots(void) { return atomic_load(&g_dots); }

/* The value a dot operand is a view chain of (itself when it is no view). */
static int chain_source(const tpuir_graph *g, int v) {
  for (;;) {
    const tpuir_node *n = tpuir_get_node(g, v);
    if (!tpux__is_view_op(n->op)) return v;
    v = n->in[0];
  }
}

/* Multiply-adds of dot node n: its result's elements times the
 * contracted sizes. */
static int64_t dot_macs(const tpuir_graph *g, const tpuir_node *n) {
  int64_t macs = 1;
  for (int i = 0; i < n->ndim; i++) macs *= n->sizes[i];
  const tpuir_node *l = tpuir_get_node(g, n->in[0]);
  for (int i = 0; i < n->nb; i++) macs *= l->sizes[n->c[i]];
  return macs;
}

static int candidate(const tpuir_graph *g, const tpuir_node *n, int bf16) {
  if (!bf16 || n->op != TPUIR_DOT_GENERAL || n->dtype != TPU_F32 ||
      n->kind != TPU_PREC_DEFAULT)
    return 0;
  for (int k = 0; k < 2; k++)
    if (tpuir_get_node(g, n->in[k])->dtype != TPU_F32) return 0;
  return dot_macs(g, n) >= REWRITE_MIN_MACS;
}

/* Views between a dot operand and the reshape that merged heads into its
 * batch dim: each keeps dim 0 as it is (a TRANSPOSE fixing dim 0, a RESHAPE
 * of the other dims, a SLICE whole along dim 0), so each replays with dim 0
 * split. */
#define HEAD_CHAIN_MAX 8
typedef struct heads {
  int p;                     /* batch dims after the split (0: no split) */
  int64_t lead[TPU_MAX_DIMS]; /* their sizes */
  int y;                     /* the transposed value the heads come from */
  int ch[HEAD_CHAIN_MAX], nch; /* views down to the merge, the dot's operand first */
} heads;

static int keeps_dim0(const tpuir_node *m, const tpuir_node *in) {
  if (m->ndim < 1 || in->ndim < 1 || m->sizes[0] != in->sizes[0]) return 0;
  if (m->op == TPUIR_TRANSPOSE) return m->a[0] == 0;
  if (m->op == TPUIR_RESHAPE) return 1;
  if (m->op == TPUIR_SLICE) return m->a[0] == 0 && m->b[0] == in->sizes[0] && m->c[0] == 1;
  return 0;
}

/* Operand k of dot n, through views that keep dim 0, is RESHAPE(y) merging
 * y's leading p >= 2 dims into dim 0 (and reshaping the others), and y is a
 * TRANSPOSE that took those dims from non-adjacent places (so the reshape
 * copies). Fills *h (h->p 0 when not). */
static void merged_heads(const tpuir_graph *g, const tpuir_node *n, int k, heads *h) {
  h->p = h->nch = 0;
  int v = n->in[k];
  for (;;) {
    const tpuir_node *x = tpuir_get_node(g, v);
    if (!tpux__is_view_op(x->op) || x->nin < 1) return;
    const tpuir_node *y = tpuir_get_node(g, x->in[0]);
    if (keeps_dim0(x, y)) {
      if (h->nch == HEAD_CHAIN_MAX) return;
      h->ch[h->nch++] = v;
      v = x->in[0];
      continue;
    }
    if (x->op != TPUIR_RESHAPE || y->op != TPUIR_TRANSPOSE || h->nch == HEAD_CHAIN_MAX) return;
    int p = 0, adjacent = 1;
    int64_t prod = 1;
    while (p < y->ndim && prod < x->sizes[0]) prod *= y->sizes[p++];
    for (int d = 0; d + 1 < p; d++) adjacent &= y->a[d + 1] == y->a[d] + 1;
    if (p < 2 || prod != x->sizes[0] || adjacent) return;
    h->ch[h->nch++] = v; /* (replayed as a reshape of the dims after the heads) */
    for (int q = 0; q < h->nch; q++)
      if (tpuir_get_node(g, h->ch[q])->ndim + p - 1 > TPU_MAX_DIMS) return;
    memcpy(h->lead, y->sizes, (size_t)p * sizeof *h->lead);
    h->y = x->in[0];
    h->p = p;
    return;
  }
}

/* The batch split of dot n (see the top) in hd[0..1]: operand k with
 * hd[k].p > 0 drops its merging reshape; the other is split by a reshape
 * (a view). Returns the number of batch dims, 0 when n is no such dot. */
static int batch_split(const tpuir_graph *g, const tpuir_node *n, heads *hd) {
  hd[0].p = hd[1].p = 0;
  if (n->op != TPUIR_DOT_GENERAL || n->na != 1 || n->a[0] != 0 || n->b[0] != 0) return 0;
  merged_heads(g, n, 0, &hd[0]);
  merged_heads(g, n, 1, &hd[1]);
  if (hd[0].p && hd[1].p &&
      (hd[0].p != hd[1].p || memcmp(hd[0].lead, hd[1].lead, (size_t)hd[0].p * sizeof(int64_t))))
    hd[1].p = 0;
  int p = hd[0].p ? hd[0].p : hd[1].p;
  for (int k = 0; k < 2; k++)
    if (tpuir_get_node(g, n->in[k])->ndim + p - 1 > TPU_MAX_DIMS) p = 0;
  return n->ndim + p - 1 > TPU_MAX_DIMS ? 0 : p;
}

/* In h: value v (of y's shape) through the views hd->ch with dim 0 split. */
static tpuir_val replay_split(tpuir_graph *h, const tpuir_graph *g, const heads *hd, tpuir_val v) {
  int p = hd->p;
  for (int q = hd->nch - 1; q >= 0 && v >= 0; q--) {
    const tpuir_node *m = tpuir_get_node(g, hd->ch[q]);
    int64_t a[TPU_MAX_DIMS], b[TPU_MAX_DIMS], c[TPU_MAX_DIMS];
    for (int d = 0; d < p; d++) a[d] = m->op == TPUIR_TRANSPOSE ? d : 0, b[d] = hd->lead[d], c[d] = 1;
    for (int d = 1; d < m->ndim; d++) {
      a[d + p - 1] = m->op == TPUIR_TRANSPOSE ? m->a[d] + p - 1 : m->a[d];
      b[d + p - 1] = m->op == TPUIR_RESHAPE ? m->sizes[d] : m->b[d];
      c[d + p - 1] = m->c[d];
    }
    if (m->op == TPUIR_TRANSPOSE) v = tpuir_transpose(h, v, a);
    else if (m->op == TPUIR_RESHAPE) v = tpuir_reshape(h, v, m->ndim + p - 1, b);
    else v = tpuir_slice(h, v, a, b, c);
  }
  return v;
}

/* ---- views in the rewritten graph ------------------------------------------
 * Every view node goes into h through emit_view, which
 *  - reuses an identical view of the same value already in h (Fused Eager
 *    records a view once per use, and the bf16 operands above replay the
 *    chains per dot: a reshape that copies would copy once per use);
 *  - drops a SLICE that keeps its whole operand;
 *  - slices before a RESHAPE instead of after it, where the reshape merged
 *    leading dims into dim 0 and every user of the reshape slices whole
 *    blocks of dim 0 (lift[], per reshape of g): `.contiguous()` of a
 *    transposed packed projection, split into q, k, v (nn.MultiheadAttention),
 *    then reshapes each third of the transposed value, a view, where the
 *    merged reshape copied all of it once per use. */
typedef struct vtab {
  int32_t *head, *next; /* head[x]: the newest view of h-value x, next[v]: the one before */
  int cap;
  int changed; /* views reused, dropped or lifted */
} vtab;

static int vtab_fit(vtab *vt, int n) {
  if (n <= vt->cap) return TPU_OK;
  int cap = vt->cap ? vt->cap : 64;
  while (cap < n) cap *= 2;
  int32_t *hd = realloc(vt->head, (size_t)cap * sizeof *hd);
  if (hd) vt->head = hd;
  int32_t *nx = hd ? realloc(vt->next, (size_t)cap * sizeof *nx) : NULL;
  if (nx) vt->next = nx;
  if (!hd || !nx) return tpu_error(TPU_E_OOM, "tpux_plan_new: out of host memory");
  for (int i = vt->cap; i < cap; i++) vt->head[i] = vt->next[i] = -1;
  vt->cap = cap;
  return TPU_OK;
}

static int same_view(const tpuir_node *a, const tpuir_node *b) {
  size_t sz = (size_t)a->ndim * sizeof(int64_t), na = (size_t)a->na * sizeof(int64_t);
  if (a->op != b->op || a->dtype != b->dtype || a->ndim != b->ndim || a->na != b->na ||
      a->in[0] != b->in[0] || memcmp(a->sizes, b->sizes, sz))
    return 0;
  switch (a->op) {
  case TPUIR_RESHAPE: return 1;
  case TPUIR_TRANSPOSE: return !memcmp(a->a, b->a, sz);
  case TPUIR_SLICE: return !memcmp(a->a, b->a, sz) && !memcmp(a->b, b->b, sz) && !memcmp(a->c, b->c, sz);
  default: return !memcmp(a->a, b->a, na); /* BROADCAST_IN_DIM, REVERSE: dims */
  }
}

/* View node c (its operand c->in[0] a value of h) in h: an identical one
 * already there, or a new one. */
static tpuir_val intern_view(tpuir_graph *h, vtab *vt, const tpuir_node *c) {
  int rc = vtab_fit(vt, tpuir_num_nodes(h) + 1);
  if (rc) return rc;
  for (int e = vt->head[c->in[0]]; e >= 0; e = vt->next[e])
    if (same_view(tpuir_get_node(h, e), c)) return vt->changed++, e;
  tpuir_node d = *c;
  tpuir_val map[1] = {c->in[0]};
  d.in[0] = 0;
  tpuir_val v = tpuir_copy_node(h, &d, map);
  if (v >= 0) {
    vt->next[v] = vt->head[c->in[0]];
    vt->head[c->in[0]] = v;
  }
  return v;
}

/* A SLICE of x with unit strides that cuts dim 0 only, or every dim
 * whole (*whole = 1). */
static int dim0_slice(const tpuir_node *s, const tpuir_node *x, int *whole) {
  *whole = s->op == TPUIR_SLICE;
  for (int d = 0; d < s->ndim && *whole; d++) *whole = s->a[d] == 0 && s->b[d] == x->sizes[d] && s->c[d] == 1;
  if (s->op != TPUIR_SLICE || *whole || s->ndim < 1 || s->c[0] != 1) return 0;
  for (int d = 1; d < s->ndim; d++)
    if (s->a[d] != 0 || s->b[d] != x->sizes[d] || s->c[d] != 1) return 0;
  return 1;
}

/* Elements of y's dims 1..j that RESHAPE r merged into its dim 0 with
 * y's dim 0 (y->sizes[0..j] multiply to r->sizes[0]); 0 when r does not. */
static int64_t merged_inner(const tpuir_node *r, const tpuir_node *y) {
  int64_t prod = 1;
  for (int j = 0; j < y->ndim && y->sizes[j] > 0; j++) {
    prod *= y->sizes[j];
    if (prod == r->sizes[0]) return prod / y->sizes[0];
    if (prod > r->sizes[0]) return 0;
  }
  return 0; /* (empty values are left alone) */
}

/* lift[r] for each RESHAPE r of g: every user of r is a SLICE of dim 0
 * in whole blocks of the merged inner dims (see emit_view), and r is no
 * output. */
static void lift_reshapes(const tpuir_graph *g, char *lift) {
  int nn = tpuir_num_nodes(g);
  for (int t = 0; t < nn; t++) lift[t] = tpuir_get_node(g, t)->op == TPUIR_RESHAPE ? 1 : 0;
  for (int t = 0; t < nn; t++) {
    const tpuir_node *n = tpuir_get_node(g, t);
    for (int k = 0; k < n->nin; k++) {
      int r = n->in[k], whole;
      if (!lift[r]) continue;
      const tpuir_node *rn = tpuir_get_node(g, r);
      int64_t inner = merged_inner(rn, tpuir_get_node(g, rn->in[0]));
      lift[r] = inner > 0 && dim0_slice(n, rn, &whole) && n->a[0] % inner == 0 &&
                n->b[0] % inner == 0;
    }
    for (int k = 0; k < n->nlist; k++) lift[n->list[k]] = 0;
  }
  for (int i = 0; i < tpuir_num_outputs(g); i++) lift[tpuir_output(g, i)] = 0;
}

/* View node s of g on value x of h with result dtype dt (see above);
 * lift: s's operand is a RESHAPE with lift[] set. */
static tpuir_val emit_view(tpuir_graph *h, vtab *vt, const tpuir_node *s, tpuir_val x, int dt,
                           int lift) {
  if (x < 0) return x;
  const tpuir_node *xn = tpuir_get_node(h, x);
  int whole;
  if (dim0_slice(s, xn, &whole) && lift && xn->op == TPUIR_RESHAPE) {
    const tpuir_node *y = tpuir_get_node(h, xn->in[0]);
    int64_t inner = merged_inner(xn, y);
    if (inner > 0 && s->a[0] % inner == 0 && s->b[0] % inner == 0) {
      tpuir_node c = {.op = TPUIR_SLICE, .nin = 1, .in = {xn->in[0]}, .dtype = dt, .ndim = y->ndim};
      for (int d = 0; d < y->ndim; d++) c.b[d] = c.sizes[d] = y->sizes[d], c.c[d] = 1;
      c.a[0] = s->a[0] / inner;
      c.b[0] = s->b[0] / inner;
      c.sizes[0] = c.b[0] - c.a[0];
      tpuir_val v = intern_view(h, vt, &c);
      if (v < 0) return v;
      vt->changed++;
      tpuir_node r = {.op = TPUIR_RESHAPE, .nin = 1, .in = {v}, .dtype = dt, .ndim = s->ndim};
      memcpy(r.sizes, s->sizes, sizeof r.sizes);
      return intern_view(h, vt, &r);
    }
  }
  if (whole) return vt->changed++, x;
  tpuir_node c = *s;
  c.in[0] = x;
  c.dtype = dt;
  return intern_view(h, vt, &c);
}

/* Node s copied with operands `ops` (nin of them) and result dtype dt. */
static tpuir_val copy_with(tpuir_graph *h, const tpuir_node *s, int nin,
                           const tpuir_val *ops, int dt) {
  tpuir_node c = *s;
  tpuir_val map[4];
  for (int k = 0; k < nin; k++) {
    c.in[k] = k;
    map[k] = ops[k];
  }
  c.dtype = dt;
  return tpuir_copy_node(h, &c, map);
}

/* REDUCE n of g (operands mapped into h by map) whose operand is, in h,
 * RESHAPEs of a computed value x (no parameter or view: contiguous) that
 * keep each group of reduced dims whole: the same reduction over x's dims,
 * reshaped to n's shape if that differs (*r = 1), so a fused region's value
 * feeds its reduction directly (bias gradients: sum(0) over [B*T, C] of a
 * [B, T, C] value). Groups pair runs of x's dims and the operand's dims of
 * equal products (size-1 dims aside); a group is reduced when its operand
 * dims are, and a group reduced in part leaves n alone (*r = 0, returns 0).
 * The reduction coalesces dims, so over a contiguous x it runs the same
 * loops over the same memory: bit-identical. */
static tpuir_val reduce_source(tpuir_graph *h, const tpuir_node *n, const tpuir_val *map,
                               int *r) {
  *r = 0;
  tpuir_val y = map[n->in[0]], x = y;
  if (y < 0) return y;
  while (tpuir_get_node(h, x)->op == TPUIR_RESHAPE) x = tpuir_get_node(h, x)->in[0];
  const tpuir_node *X = tpuir_get_node(h, x), *Y = tpuir_get_node(h, y);
  if (x == y || X->op == TPUIR_PARAM || tpux__is_view_op(X->op)) return 0;
  char yred[TPU_MAX_DIMS] = {0};
  int64_t dims[TPU_MAX_DIMS];
  for (int k = 0; k < n->na; k++) yred[n->a[k]] = 1;
  int xi = 0, yj = 0, nd = 0;
  for (;;) {
    while (xi < X->ndim && X->sizes[xi] == 1) xi++;
    while (yj < Y->ndim && Y->sizes[yj] == 1) yj++;
    if (xi == X->ndim || yj == Y->ndim) break;
    int x0 = xi, red = yred[yj];
    int64_t px = X->sizes[xi++], py = Y->sizes[yj++];
    while (px != py) {
      if (px < py && xi < X->ndim) {
        px *= X->sizes[xi++];
      } else if (py < px && yj < Y->ndim) {
        if (Y->sizes[yj] != 1 && yred[yj] != red) return 0;
        py *= Y->sizes[yj++];
      } else {
        return 0;
      }
    }
    if (px == 0) return 0;
    for (int d = x0; d < xi && red; d++) dims[nd++] = d;
  }
  if (xi < X->ndim || yj < Y->ndim) return 0; /* (a zero-size dim) */
  tpuir_val v = tpuir_reduce(h, n->kind, x, nd, dims);
  if (v < 0) return v;
  *r = 1;
  const tpuir_node *V = tpuir_get_node(h, v);
  int same = V->ndim == n->ndim;
  for (int d = 0; d < n->ndim && same; d++) same = V->sizes[d] == n->sizes[d];
  return same ? v : tpuir_reshape(h, v, n->ndim, n->sizes);
}

/* The bf16 counterpart (in h) of dot operand v of g: v's view chain
 * replayed on the converted source. */
static tpuir_val bf16_operand(const tpuir_graph *g, tpuir_graph *h, vtab *vt, const char *lift,
                              int v, const tpuir_val *shadow) {
  const tpuir_node *n = tpuir_get_node(g, v);
  if (!tpux__is_view_op(n->op)) return shadow[v];
  tpuir_val x = bf16_operand(g, h, vt, lift, n->in[0], shadow);
  return emit_view(h, vt, n, x, TPU_BF16, lift[n->in[0]]);
}

/* Dot n of g in h over p leading batch dims (batch_split): operand k is
 * ops[k] (y's value, hd[k].p > 0) through its views, split, or ops[k] (the
 * operand's value) split by a reshape; the dot's value is reshaped back.
 * *bf16 (if not NULL) gets the bf16 counterpart, converted from the dot
 * itself (so it can run as the GEMM's epilogue). */
static tpuir_val split_dot(tpuir_graph *h, const tpuir_graph *g, const tpuir_node *n,
                           tpuir_val *ops, int p, const heads *hd, tpuir_val *bf16) {
  const int64_t *lead = hd[0].p ? hd[0].lead : hd[1].lead;
  int64_t bd[TPU_MAX_DIMS], lc[TPU_MAX_DIMS], rc[TPU_MAX_DIMS], sz[TPU_MAX_DIMS];
  for (int k = 0; k < 2; k++) {
    if (hd[k].p) {
      ops[k] = replay_split(h, g, &hd[k], ops[k]);
    } else if (ops[k] >= 0) {
      const tpuir_node *x = tpuir_get_node(g, n->in[k]);
      memcpy(sz, lead, (size_t)p * sizeof *sz);
      memcpy(sz + p, x->sizes + 1, (size_t)(x->ndim - 1) * sizeof *sz);
      ops[k] = tpuir_reshape(h, ops[k], x->ndim + p - 1, sz);
    }
    if (ops[k] < 0) return ops[k];
  }
  for (int i = 0; i < p; i++) bd[i] = i;
  for (int i = 0; i < n->nb; i++) lc[i] = n->c[i] + p - 1, rc[i] = n->d[i] + p - 1;
  tpuir_val d = tpuir_dot_general(h, ops[0], ops[1], p, bd, bd, n->nb, lc, rc, n->kind, n->dtype);
  if (bf16 && d >= 0) {
    *bf16 = tpuir_convert(h, d, TPU_BF16);
    if (*bf16 >= 0) *bf16 = tpuir_reshape(h, *bf16, n->ndim, n->sizes);
    if (*bf16 < 0) return *bf16;
  }
  return d < 0 ? d : tpuir_reshape(h, d, n->ndim, n->sizes);
}

/* Index cones first: the nodes an INDEX-class node's indices are computed
 * from (a loss's labels through pad, slice, where(ignore_index), reshape)
 * run at the start of the program, after the parameters, so that their
 * range check (XS_CHECK), and with it the program's last possible
 * failure, comes first and the outputs computed after it may be written
 * directly. A cone moves only when it is small (CONE_MAX nodes,
 * CONE_MAX_ELEMS elements: its values live longer) and none of its nodes
 * can fail (errors keep their order). */
#define CONE_MAX 64
#define CONE_MAX_ELEMS ((int64_t)1 << 22)

static int cone_add(const tpuir_graph *g, int v, char *mark, int *list, int *k, int64_t *elems) {
  const tpuir_node *m = tpuir_get_node(g, v);
  if (mark[v] || m->op == TPUIR_PARAM) return 1;
  int64_t e = 1;
  for (int d = 0; d < m->ndim; d++) e *= m->sizes[d];
  if (*k >= CONE_MAX || tpuir_node_can_fail(g, v) || (*elems += e) > CONE_MAX_ELEMS) return 0;
  mark[v] = 2;
  list[(*k)++] = v;
  return 1;
}

/* Fills ord with parameters, index cones, the rest, each in node order (a
 * topological order; parameters keep their numbers). Returns whether that
 * differs from node order (< 0: out of host memory). */
static int index_cones_first(const tpuir_graph *g, int *ord) {
  int nn = tpuir_num_nodes(g), list[CONE_MAX], moved = 0;
  char *mark = calloc((size_t)(nn ? nn : 1), 1); /* 1: in a cone, 2: trying */
  if (!mark) return tpu_error(TPU_E_OOM, "tpux_plan_new: out of host memory");
  for (int t = 0; t < nn; t++) {
    const tpuir_node *n = tpuir_get_node(g, t);
    if (tpuir_op_info(n->op)->cls != TPUIR_CLASS_INDEX) continue;
    int k = 0;
    int64_t elems = 0;
    int ok = cone_add(g, n->in[1], mark, list, &k, &elems);
    for (int i = 0; ok && i < k; i++) { /* list grows as it is read */
      const tpuir_val *ops;
      int no = tpux__node_operands(tpuir_get_node(g, list[i]), &ops);
      for (int j = 0; ok && j < no; j++) ok = cone_add(g, ops[j], mark, list, &k, &elems);
    }
    for (int i = 0; i < k; i++) mark[list[i]] = (char)ok;
  }
  int o = 0;
  for (int t = 0; t < nn; t++)
    if (tpuir_get_node(g, t)->op == TPUIR_PARAM) ord[o++] = t;
  for (int t = 0; t < nn; t++)
    if (mark[t]) ord[o++] = t;
  for (int t = 0; t < nn; t++)
    if (!mark[t] && tpuir_get_node(g, t)->op != TPUIR_PARAM) ord[o++] = t;
  for (int t = 0; t < nn; t++) moved |= ord[t] != t;
  free(mark);
  return moved;
}

int tpux__rewrite_graph(const tpuir_graph *g, tpuir_graph **out, char **alone) {
  *out = NULL;
  *alone = NULL;
  int nn = tpuir_num_nodes(g), ndots = 0, nsplit = 0, nred = 0;
  int bf = tpux__bf16_operands_enabled() && tpumxu_bf16_native();
  heads hd[2];
  for (int t = 0; t < nn && !ndots; t++) {
    const tpuir_node *n = tpuir_get_node(g, t);
    ndots = candidate(g, n, bf) || batch_split(g, n, hd) || n->op == TPUIR_RESHAPE;
  }
  int *ord = malloc((size_t)(nn ? nn : 1) * sizeof *ord);
  int moved = ord ? index_cones_first(g, ord) : tpu_error(TPU_E_OOM, "tpux_plan_new: out of host memory");
  if (moved < 0 || (!ndots && !moved)) {
    free(ord);
    return moved < 0 ? moved : TPU_OK;
  }
  /* uses[x]: candidate-dot operands whose source is x (capped at 2);
   * dot[t]: dot t is rewritten; need[x]: x gets a bf16 counterpart */
  char *uses = calloc(4 * (size_t)nn, 1), *dot = uses + nn, *need = dot + nn, *lift = need + nn;
  tpuir_val *map = malloc(2 * (size_t)nn * sizeof *map), *shadow = map + nn;
  tpuir_graph *h = tpuir_graph_new();
  vtab vt = {0};
  int rc = uses && map && h ? TPU_OK : tpu_error(TPU_E_OOM, "tpux_plan_new: out of host memory");
  if (rc == TPU_OK) lift_reshapes(g, lift);
  for (int t = 0; t < nn && rc == TPU_OK; t++) {
    const tpuir_node *n = tpuir_get_node(g, t);
    for (int k = 0; k < 2 && candidate(g, n, bf); k++) {
      char *u = &uses[chain_source(g, n->in[k])];
      *u += *u < 2;
    }
  }
  /* A dot gains when an operand is produced inside the program (rounded
   * by its producer) or is a parameter other dots read too (rounded
   * once). Two parameters read by this dot alone (Strict Eager's lone
   * matmul) stay with the matrix unit, which rounds them as it packs them
   * in their memory order. */
  ndots = 0;
  for (int t = 0; t < nn && rc == TPU_OK; t++) {
    const tpuir_node *n = tpuir_get_node(g, t);
    if (!candidate(g, n, bf)) continue;
    for (int k = 0; k < 2; k++) {
      int x = chain_source(g, n->in[k]);
      dot[t] |= tpuir_get_node(g, x)->op != TPUIR_PARAM || uses[x] > 1;
    }
    for (int k = 0; k < 2 && dot[t]; k++) need[chain_source(g, n->in[k])] = 1;
    ndots += dot[t];
  }
  for (int i = 0; i < nn && rc == TPU_OK; i++) {
    int t = ord[i];
    const tpuir_node *n = tpuir_get_node(g, t);
    int p = batch_split(g, n, hd), done = 0;
    if (dot[t] || p) { /* (values below 0 are error codes) */
      tpuir_val ops[2];
      for (int k = 0; k < 2; k++) {
        int x = p && hd[k].p ? hd[k].y : n->in[k];
        ops[k] = k && ops[0] < 0 ? ops[0] : dot[t] ? bf16_operand(g, h, &vt, lift, x, shadow) : map[x];
      }
      if (p) {
        map[t] = split_dot(h, g, n, ops, p, hd, need[t] ? &shadow[t] : NULL);
        done = need[t];
        nsplit++;
      } else {
        map[t] = ops[0] < 0 ? ops[0] : ops[1] < 0 ? ops[1] : copy_with(h, n, 2, ops, n->dtype);
      }
    } else if (tpux__is_view_op(n->op)) {
      map[t] = emit_view(h, &vt, n, map[n->in[0]], n->dtype, lift[n->in[0]]);
    } else {
      int red = 0;
      map[t] = n->op == TPUIR_REDUCE ? reduce_source(h, n, map, &red) : 0;
      if (!red && map[t] >= 0) map[t] = tpuir_copy_node(h, n, map);
      nred += red;
    }
    if (map[t] >= 0 && need[t] && !done) shadow[t] = tpuir_convert(h, map[t], TPU_BF16);
    rc = map[t] < 0 ? map[t] : need[t] && shadow[t] < 0 ? shadow[t] : TPU_OK;
    if (rc == TPU_OK && need[t] && n->op == TPUIR_PARAM) need[t] = 2; /* alone */
  }
  int nh = rc == TPU_OK ? tpuir_num_nodes(h) : 0;
  char *al = rc == TPU_OK ? calloc((size_t)(nh ? nh : 1), 1) : NULL;
  if (rc == TPU_OK && !al) rc = tpu_error(TPU_E_OOM, "tpux_plan_new: out of host memory");
  for (int t = 0; t < nn && al; t++)
    if (need[t] == 2) al[shadow[t]] = 1;
  if (rc == TPU_OK) {
    int no = tpuir_num_outputs(g);
    tpuir_val *outs = malloc((size_t)(no ? no : 1) * sizeof *outs);
    if (!outs) rc = tpu_error(TPU_E_OOM, "tpux_plan_new: out of host memory");
    for (int i = 0; i < no && outs; i++) outs[i] = map[tpuir_output(g, i)];
    if (outs) rc = tpuir_set_outputs(h, no, outs);
    free(outs);
  }
  free(uses);
  free(map);
  free(ord);
  free(vt.head);
  free(vt.next);
  if (rc != TPU_OK || (!ndots && !nsplit && !nred && !vt.changed && !moved)) {
    tpuir_graph_free(h);
    free(al);
    return rc;
  }
  *alone = al;
  atomic_fetch_add(&g_dots, ndots);
  *out = h;
  return TPU_OK;
}

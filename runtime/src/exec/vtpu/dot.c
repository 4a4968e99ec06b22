/* exec/vtpu/dot.c - vTPU DOT_GENERAL on the matrix unit (tpumxu_gemm).
 *
 * Operands are seen as [batch..., free..., contract...] (lhs) and
 * [batch..., contract..., free...] (rhs) through their strides; when a group
 * of dims cannot be expressed with a single stride the operand is first
 * copied into that canonical order. Float dtypes go to tpumxu_gemm:
 *   same in/out dtype (f32/bf16/f16/f64): one gemm into the result;
 *   bf16 operands with an f32 result: one bf16 gemm with an f32 C (how
 *     the plan's bf16 operands of f32 DEFAULT dots run: exec/vtpu/rewrite.c);
 *   bf16/f16 operands with another result dtype: operands widened to f32
 *     (exact) and multiplied with plain fp32 (products of bf16/f16 are exact
 *     in fp32, so this is the one-pass MXU result with f32 accumulation);
 *   otherwise gemm in the operand dtype, then converted.
 * Integer operands: exact int64 loops (wrapping), converted at the end.
 */
#include <stdlib.h>

#include "exec/vtpu/internal.h"
#include "tpu_mxu.h"

typedef struct dot_dims {
  int n;
  int64_t sz[TPU_MAX_DIMS];
  int64_t st[TPU_MAX_DIMS];
} dot_dims;

/* Merge a dim group into (total size, single stride) if possible. */
static int merge(const dot_dims *d, int64_t *tot, int64_t *stride) {
  int64_t t = 1, s = 0, expect = -1;
  int have = 0;
  for (int i = 0; i < d->n; i++) t *= d->sz[i];
  for (int i = d->n - 1; i >= 0; i--) {
    if (d->sz[i] == 1) continue;
    if (!have) {
      s = d->st[i];
      have = 1;
    } else if (d->st[i] != expect) {
      return 0;
    }
    expect = d->st[i] * d->sz[i];
  }
  *tot = t;
  *stride = s;
  return 1;
}

typedef struct dot_op {
  tpu_view v;      /* operand in canonical dim order: g0, g1, g2 */
  int n0, n1, n2;  /* dims per group */
  void *own;       /* temporary copy, if any */
} dot_op;

/* Build the canonical-order view of x: groups (perm0, perm1, perm2). */
static void canon_view(const tpu_view *x, const int64_t *p0, int n0,
                       const int64_t *p1, int n1, const int64_t *p2, int n2,
                       dot_op *o) {
  o->v = *x;
  int k = 0;
  for (int i = 0; i < n0; i++, k++) {
    o->v.sizes[k] = x->sizes[p0[i]];
    o->v.strides[k] = x->strides[p0[i]];
  }
  for (int i = 0; i < n1; i++, k++) {
    o->v.sizes[k] = x->sizes[p1[i]];
    o->v.strides[k] = x->strides[p1[i]];
  }
  for (int i = 0; i < n2; i++, k++) {
    o->v.sizes[k] = x->sizes[p2[i]];
    o->v.strides[k] = x->strides[p2[i]];
  }
  o->v.ndim = k;
  o->n0 = n0;
  o->n1 = n1;
  o->n2 = n2;
  o->own = NULL;
}

static void group(const dot_op *o, int g, dot_dims *d) {
  int start = g == 0 ? 0 : g == 1 ? o->n0 : o->n0 + o->n1;
  d->n = g == 0 ? o->n0 : g == 1 ? o->n1 : o->n2;
  for (int i = 0; i < d->n; i++) {
    d->sz[i] = o->v.sizes[start + i];
    d->st[i] = o->v.strides[start + i];
  }
}

/* Whether dims [from, n) of o's group g merge into one (size, stride). */
static int merge_from(const dot_op *o, int g, int from, int64_t *tot, int64_t *stride) {
  dot_dims d;
  group(o, g, &d);
  d.n -= from;
  memmove(d.sz, d.sz + from, (size_t)d.n * sizeof d.sz[0]);
  memmove(d.st, d.st + from, (size_t)d.n * sizeof d.st[0]);
  return merge(&d, tot, stride);
}

/* Make o contiguous in dtype dt (copy) if needed or if its groups do not
 * merge; then return merged (size, stride) of the three groups. With
 * `split` non-NULL, batch dims that do not merge (heads split off a
 * transposed activation) are left for the caller to loop over: *split = 1
 * and tot[0]/str[0] unset. */
static int prepare(dot_op *o, int dt, int force, int64_t tot[3], int64_t str[3], int *split) {
  int ok = !force && o->v.dtype == dt;
  for (int g = 1; g < 3 && ok; g++) ok = merge_from(o, g, 0, &tot[g], &str[g]);
  if (ok && !merge_from(o, 0, 0, &tot[0], &str[0])) {
    if (split) *split = 1;
    else ok = 0;
  }
  if (ok) return TPU_OK;
  int64_t numel = tpu_view_numel(&o->v);
  void *m = tpux__alloc((size_t)numel * tpu_dtype_size(dt));
  if (!m) return tpu_error(TPU_E_OOM, "dot_general: out of host memory");
  tpu_view c;
  tpu_view_init_contiguous(&c, m, dt, o->v.ndim, o->v.sizes);
  int rc = numel ? tpux__copy_nocheck(&c, &o->v) : TPU_OK;
  if (rc) {
    tpux__free(m);
    return rc;
  }
  o->v = c;
  o->own = m;
  for (int g = 0; g < 3; g++) merge_from(o, g, 0, &tot[g], &str[g]);
  return TPU_OK;
}

/* An epilogue seen from one GEMM call of an outer batch loop: its batch
 * items are items off.. of the whole result. */
typedef struct outer_epi {
  tpumxu_epilogue_fn fn;
  void *ctx;
  int64_t off;
} outer_epi;

static void outer_epi_block(void *ctx, int64_t b, int64_t m0, int64_t m1, int64_t n0,
                            int64_t n1) {
  outer_epi *e = ctx;
  e->fn(e->ctx, e->off + b, m0, m1, n0, n1);
}

/* Float GEMM of a dot whose batch dims do not merge for some operand (a
 * copy avoided): the longest run of trailing batch dims that merges in
 * both operands is one batched call, the leading ones a loop of calls
 * (ab, bb: the operands' first elements; ls, rs: their row and column
 * strides). C is contiguous. */
static int gemm_outer(int gdt, int cdt, int prec, const dot_op *lo, const dot_op *ro, int64_t m,
                      int64_t nn, int64_t k, const char *ab, const int64_t ls[3], const char *bb,
                      const int64_t rs[3], void *c, tpumxu_epilogue_fn fn, void *ctx) {
  int s = 0;
  int64_t lt, lst, rt, rst;
  while (!(merge_from(lo, 0, s, &lt, &lst) && merge_from(ro, 0, s, &rt, &rst))) s++;
  int64_t outer = 1, es = (int64_t)tpu_dtype_size(gdt), ces = (int64_t)tpu_dtype_size(cdt);
  for (int d = 0; d < s; d++) outer *= lo->v.sizes[d];
  int rc = TPU_OK;
  for (int64_t q = 0; q < outer && rc == TPU_OK; q++) {
    int64_t r = q, la = 0, ra = 0;
    for (int d = s - 1; d >= 0; d--) {
      int64_t i = r % lo->v.sizes[d];
      r /= lo->v.sizes[d];
      la += i * lo->v.strides[d];
      ra += i * ro->v.strides[d];
    }
    outer_epi e = {fn, ctx, q * lt};
    rc = tpumxu_gemm_io(gdt, cdt, prec, lt, m, nn, k, 1.0, ab + la * es, lst, ls[1], ls[2],
                        bb + ra * es, rst, rs[1], rs[2], 0.0,
                        (char *)c + q * lt * m * nn * ces, m * nn, nn, 1,
                        fn ? outer_epi_block : NULL, &e);
  }
  return rc;
}

typedef struct idot_job {
  const int64_t *a, *b;
  int64_t *c;
  int64_t m, n, k;
} idot_job;

static void idot_range(void *ctx, int64_t b, int64_t e) {
  idot_job *j = ctx;
  for (int64_t r = b; r < e; r++) { /* r = batch * m + i */
    int64_t bt = r / j->m, i = r - bt * j->m;
    const int64_t *ar = j->a + (bt * j->m + i) * j->k;
    const int64_t *bb = j->b + bt * j->k * j->n;
    int64_t *cr = j->c + r * j->n;
    for (int64_t q = 0; q < j->n; q++) cr[q] = 0;
    for (int64_t l = 0; l < j->k; l++) {
      uint64_t av = (uint64_t)ar[l];
      const int64_t *br = bb + l * j->n;
      for (int64_t q = 0; q < j->n; q++)
        cr[q] = (int64_t)((uint64_t)cr[q] + av * (uint64_t)br[q]);
    }
  }
}

/* Where dot t's value goes (see exec/vtpu/internal.h). */
int tpux__dot_value(xctx *c, int t) {
  return c->vals[t].mem && !(c->node_out && t == c->node_t) ? TPU_OK : tpux__alloc_value(c, t);
}

int tpux__eval_dot(xctx *c, int t) {
  int applied;
  return tpux__eval_dot_ex(c, t, NULL, NULL, &applied);
}

/* DOT_GENERAL with an optional GEMM epilogue (see exec/vtpu/internal.h). */
int tpux__eval_dot_ex(xctx *c, int t, tpumxu_epilogue_fn fn, void *ctx,
                      int *applied) {
  const tpuir_node *n = tpuir_get_node(c->g, t);
  const tpu_view *L = &c->vals[n->in[0]].v, *R = &c->vals[n->in[1]].v;
  *applied = 0;
  int rc = tpux__dot_value(c, t);
  if (rc) return rc;
  int nb = n->na, nc = n->nb;
  int64_t lfree[TPU_MAX_DIMS], rfree[TPU_MAX_DIMS];
  int nlf = 0, nrf = 0;
  uint32_t lu = 0, ru = 0;
  for (int i = 0; i < nb; i++) {
    lu |= 1u << n->a[i];
    ru |= 1u << n->b[i];
  }
  for (int i = 0; i < nc; i++) {
    lu |= 1u << n->c[i];
    ru |= 1u << n->d[i];
  }
  for (int i = 0; i < L->ndim; i++)
    if (!(lu & (1u << i))) lfree[nlf++] = i;
  for (int i = 0; i < R->ndim; i++)
    if (!(ru & (1u << i))) rfree[nrf++] = i;
  dot_op lo, ro;
  canon_view(L, n->a, nb, lfree, nlf, n->c, nc, &lo);
  canon_view(R, n->b, nb, n->d, nc, rfree, nrf, &ro);

  int in_dt = L->dtype, out_dt = n->dtype;
  int is_int = xk_cls(in_dt) == XK_I64;
  int gdt, prec = n->kind; /* gemm operand dtype */
  if (is_int) gdt = TPU_I64;
  else if (in_dt == out_dt || (in_dt == TPU_BF16 && out_dt == TPU_F32)) gdt = in_dt;
  else if (in_dt == TPU_BF16 || in_dt == TPU_F16) {
    gdt = TPU_F32;
    prec = TPU_PREC_FP32;
  } else gdt = in_dt;

  int64_t lt[3] = {0}, ls[3] = {0}, rt[3] = {0}, rs[3] = {0};
  int split = 0;
  rc = prepare(&lo, gdt, is_int, lt, ls, is_int ? NULL : &split);
  if (!rc) rc = prepare(&ro, gdt, is_int, rt, rs, is_int ? NULL : &split);
  /* lt = {batch, m, k}, rt = {batch, k, n} */
  int64_t batch = 1, m = lt[1], k = lt[2], nn = rt[2];
  for (int i = 0; i < lo.n0; i++) batch *= lo.v.sizes[i];
  int cdt = gdt == TPU_BF16 && out_dt == TPU_F32 ? TPU_F32 : gdt; /* gemm C dtype */
  void *cbuf = NULL;
  tpu_view cv = c->vals[t].v;
  if (!rc && cdt != out_dt) {
    int64_t numel = tpu_view_numel(&cv);
    cbuf = tpux__alloc((size_t)numel * tpu_dtype_size(cdt));
    if (!cbuf) rc = tpu_error(TPU_E_OOM, "dot_general: out of host memory");
    else {
      int64_t csz[TPU_MAX_DIMS];
      memcpy(csz, cv.sizes, sizeof csz);
      tpu_view_init_contiguous(&cv, cbuf, cdt, cv.ndim, csz);
    }
  }
  char *cb = (char *)cv.base + cv.offset * (int64_t)tpu_dtype_size(cdt);
  if (!rc && batch * m * nn > 0) {
    if (k == 0) {
      memset(cb, 0, (size_t)(batch * m * nn) * tpu_dtype_size(cdt));
    } else if (is_int) {
      idot_job j = {lo.v.base, ro.v.base, (int64_t *)cb, m, nn, k};
      int64_t rows = batch * m, per = nn * k;
      int64_t grain = XK_GRAIN / (per > 0 ? per : 1);
      if (grain < 1) grain = 1;
      if (rows <= grain) idot_range(&j, 0, rows);
      else tpurt_parallel_for(rows, grain, idot_range, &j);
    } else {
      size_t es = tpu_dtype_size(gdt);
      const char *ab = (const char *)lo.v.base + lo.v.offset * (int64_t)es;
      const char *bb = (const char *)ro.v.base + ro.v.offset * (int64_t)es;
      tpumxu_epilogue_fn epi = cbuf ? NULL : fn;
      if (split)
        rc = gemm_outer(gdt, cdt, prec, &lo, &ro, m, nn, k, ab, ls, bb, rs, cb, epi, ctx);
      else
        rc = tpumxu_gemm_io(gdt, cdt, prec, batch, m, nn, k, 1.0, ab, ls[0], ls[1], ls[2], bb,
                            rs[0], rs[1], rs[2], 0.0, cb, m * nn, nn, 1, epi, ctx);
      *applied = epi != NULL;
    }
  }
  if (!rc && cbuf) rc = tpux__copy_nocheck(&c->vals[t].v, &cv);
  tpux__free(cbuf);
  tpux__free(lo.own);
  tpux__free(ro.own);
  return rc;
}

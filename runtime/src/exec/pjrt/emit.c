/* exec/pjrt/emit.c - StableHLO text (MLIR generic form) of an IR graph, the
 * program format the PJRT executor hands to a plugin ("mlir").
 *
 * One func.func @main: the graph's parameters (in parameter order) are the
 * arguments, its outputs the results. Only nodes reachable from an output
 * are emitted. Each node becomes one or a few stablehlo ops (chlo for the
 * transcendental functions XLA expands itself). Semantics follow the IR
 * (tpu_ir.h), with these documented differences on PJRT: run-time checks of
 * the vTPU (index out of range, integer division by zero, non-PD Cholesky
 * with check) do not raise; out-of-range gather/scatter indices are clamped
 * or dropped as XLA does; matmul precision is passed on as precision_config
 * (XLA:CPU computes f32 exactly whatever the precision).
 *
 * Ops without an expression here (the LAPACK-style custom calls, the
 * spectral decompositions, most special functions) make the emitter fail
 * with TPU_E_UNSUPPORTED "unsupported on PJRT: <op>".
 */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/pjrt/internal.h"

/* Every IR op must have a StableHLO expression in node() below (or report
 * TPU_E_UNSUPPORTED there). A new line in TPUIR_OPS (tpu_ir.h) fails this
 * check until it has one; then update the count. */
_Static_assert(TPUIR_NUM_OPS == 138, "new IR op: give it a StableHLO expression (exec/pjrt/emit.c node())");

typedef struct ty {
  int dt, nd;
  int64_t sz[TPU_MAX_DIMS];
} ty;

typedef struct nm {
  char s[32];
} nm;

typedef struct em {
  const tpuir_graph *g;
  char *p;
  size_t n, cap;
  int oom;
  int tmp;
  int bad_op; /* first op without an expression, or -1 */
  nm *names;  /* value id -> SSA name */
  tpux__check *chk; /* run-time checks (exec/pjrt/internal.h) */
  nm *chk_val;
  int nchk, capchk;
  char tbuf[8][512];
  int ti;
} em;

/* ---- text buffer ------------------------------------------------------- */

static void out(em *e, const char *fmt, ...) {
  if (e->oom) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(e->p + e->n, e->cap - e->n, fmt, ap);
    va_end(ap);
    if (k < 0) {
      e->oom = 1;
      return;
    }
    if (e->n + (size_t)k < e->cap) {
      e->n += (size_t)k;
      return;
    }
    size_t nc = e->cap * 2 + (size_t)k + 1;
    char *np = realloc(e->p, nc);
    if (!np) {
      e->oom = 1;
      return;
    }
    e->p = np;
    e->cap = nc;
  }
}

static const char *ety(int dt) {
  switch (dt) {
  case TPU_BOOL: return "i1";
  case TPU_U8: return "ui8";
  case TPU_I8: return "i8";
  case TPU_I16: return "i16";
  case TPU_I32: return "i32";
  case TPU_I64: return "i64";
  case TPU_F16: return "f16";
  case TPU_BF16: return "bf16";
  case TPU_F32: return "f32";
  case TPU_F64: return "f64";
  case TPU_C64: return "complex<f32>";
  case TPU_C128: return "complex<f64>";
  default: return "?";
  }
}

/* Type text "tensor<2x3xf32>" (ring of buffers, valid for a few calls). */
static const char *ts(em *e, ty t) {
  char *b = e->tbuf[e->ti++ & 7];
  size_t n = (size_t)snprintf(b, 512, "tensor<");
  for (int i = 0; i < t.nd && n < 400; i++)
    n += (size_t)snprintf(b + n, 512 - n, "%" PRId64 "x", t.sz[i]);
  snprintf(b + n, 512 - n, "%s>", ety(t.dt));
  return b;
}

static ty tyof(em *e, tpuir_val v) {
  const tpuir_node *n = tpuir_get_node(e->g, v);
  ty t = {n->dtype, n->ndim, {0}};
  for (int i = 0; i < n->ndim; i++) t.sz[i] = n->sizes[i];
  return t;
}

static ty tyd(ty t, int dt) {
  t.dt = dt;
  return t;
}

static ty scalar(int dt) {
  ty t = {dt, 0, {0}};
  return t;
}

static nm V(tpuir_val v) {
  nm r;
  snprintf(r.s, sizeof r.s, "%%v%d", (int)v);
  return r;
}

static nm N(em *e, tpuir_val v) {
  return e->names[v];
}

/* Result i of multi-result value r ("%t5#1"). */
static nm sub(nm r, int i) {
  nm o;
  size_t k = strlen(r.s);
  if (k > sizeof o.s - 3) k = sizeof o.s - 3;
  memcpy(o.s, r.s, k);
  o.s[k] = '#';
  o.s[k + 1] = (char)('0' + i);
  o.s[k + 2] = 0;
  return o;
}

static nm fresh(em *e) {
  nm r;
  snprintf(r.s, sizeof r.s, "%%t%d", e->tmp++);
  return r;
}

/* "array<i64: 1, 2>" */
static void arr(em *e, const char *name, int n, const int64_t *a) {
  out(e, "%s = array<i64", name);
  for (int i = 0; i < n; i++) out(e, "%s %" PRId64, i ? "," : ":", a[i]);
  out(e, ">");
}

/* Generic op with attributes text `attrs` (may be NULL): r = op(args). */
static nm gen(em *e, const char *op, int na, const nm *a, const ty *ta, ty tr,
              const char *attrs) {
  nm r = fresh(e);
  out(e, "    %s = \"%s\"(", r.s, op);
  for (int i = 0; i < na; i++) out(e, "%s%s", i ? ", " : "", a[i].s);
  out(e, ")");
  if (attrs && *attrs) out(e, " {%s}", attrs);
  out(e, " : (");
  for (int i = 0; i < na; i++) out(e, "%s%s", i ? ", " : "", ts(e, ta[i]));
  out(e, ") -> %s\n", ts(e, tr));
  return r;
}

static nm un(em *e, const char *op, nm a, ty ta, ty tr) {
  return gen(e, op, 1, &a, &ta, tr, NULL);
}

static nm bin(em *e, const char *op, nm a, nm b, ty t, ty tr) {
  nm x[2] = {a, b};
  ty tt[2] = {t, t};
  return gen(e, op, 2, x, tt, tr, NULL);
}

static nm cmp(em *e, const char *dir, nm a, nm b, ty t) {
  char at[160];
  const char *ct = tpu_dtype_is_float(t.dt) ? "FLOAT"
                   : (t.dt == TPU_BOOL || t.dt == TPU_U8) ? "UNSIGNED"
                   : tpu_dtype_is_complex(t.dt) ? NULL : "SIGNED";
  if (ct)
    snprintf(at, sizeof at,
             "comparison_direction = #stablehlo<comparison_direction %s>, "
             "compare_type = #stablehlo<comparison_type %s>",
             dir, ct);
  else
    snprintf(at, sizeof at, "comparison_direction = #stablehlo<comparison_direction %s>",
             dir);
  nm x[2] = {a, b};
  ty tt[2] = {t, t};
  return gen(e, "stablehlo.compare", 2, x, tt, tyd(t, TPU_BOOL), at);
}

static nm sel(em *e, nm p, nm a, nm b, ty t) {
  nm x[3] = {p, a, b};
  ty tt[3] = {tyd(t, TPU_BOOL), t, t};
  return gen(e, "stablehlo.select", 3, x, tt, t, NULL);
}

static nm conv(em *e, nm a, ty ta, int dt) {
  if (ta.dt == dt) return a;
  return un(e, "stablehlo.convert", a, ta, tyd(ta, dt));
}

static uint64_t f64bits(double d) {
  uint64_t u;
  memcpy(&u, &d, 8);
  return u;
}

/* Splat constant of type t: value f (floats) or i (ints/bool). Exact: f32
 * and f64 as bit patterns; f16/bf16 as f32 then convert (round to nearest
 * even, as the IR's constants). */
static nm cst(em *e, ty t, double f, int64_t i) {
  if (t.dt == TPU_F16 || t.dt == TPU_BF16) return conv(e, cst(e, tyd(t, TPU_F32), f, i), tyd(t, TPU_F32), t.dt);
  if (tpu_dtype_is_complex(t.dt)) {
    int pd = tpu_dtype_complex_part(t.dt);
    nm re = cst(e, tyd(t, pd), f, i), im = cst(e, tyd(t, pd), 0, 0);
    return bin(e, "stablehlo.complex", re, im, tyd(t, pd), t);
  }
  nm r = fresh(e);
  out(e, "    %s = stablehlo.constant dense<", r.s);
  if (t.dt == TPU_F32) {
    float x = (float)f;
    uint32_t u;
    memcpy(&u, &x, 4);
    out(e, "0x%08" PRIX32, u);
  } else if (t.dt == TPU_F64) {
    out(e, "0x%016" PRIX64, f64bits(f));
  } else if (t.dt == TPU_BOOL) {
    out(e, "%s", i ? "true" : "false");
  } else if (t.dt == TPU_U8) {
    out(e, "%" PRIu64, (uint64_t)(uint8_t)i);
  } else {
    out(e, "%" PRId64, i);
  }
  out(e, "> : %s\n", ts(e, t));
  return r;
}

static nm reshape(em *e, nm a, ty ta, ty tr) {
  return un(e, "stablehlo.reshape", a, ta, tr);
}

static nm bcast(em *e, nm a, ty ta, ty tr, const int64_t *dims) {
  char at[400];
  size_t k = (size_t)snprintf(at, sizeof at, "broadcast_dimensions = array<i64");
  for (int i = 0; i < ta.nd; i++)
    k += (size_t)snprintf(at + k, sizeof at - k, "%s %" PRId64, i ? "," : ":", dims[i]);
  snprintf(at + k, sizeof at - k, ">");
  return gen(e, "stablehlo.broadcast_in_dim", 1, &a, &ta, tr, at);
}

static nm iota(em *e, ty t, int dim) {
  nm r = fresh(e);
  out(e, "    %s = \"stablehlo.iota\"() {iota_dimension = %d : i64} : () -> %s\n", r.s, dim,
      ts(e, t));
  return r;
}

/* Lowest / highest value of dtype dt (as the double or int64 to pass to
 * cst); floats: -inf / +inf. */
static void extreme(int dt, int high, double *f, int64_t *i) {
  *f = high ? INFINITY : -INFINITY;
  switch (dt) {
  case TPU_BOOL: *i = high; break;
  case TPU_U8: *i = high ? 255 : 0; break;
  case TPU_I8: *i = high ? INT8_MAX : INT8_MIN; break;
  case TPU_I16: *i = high ? INT16_MAX : INT16_MIN; break;
  case TPU_I32: *i = high ? INT32_MAX : INT32_MIN; break;
  default: *i = high ? INT64_MAX : INT64_MIN; break;
  }
}

/* ---- regions ------------------------------------------------------------ */

/* Open a region taking n scalar block arguments of types t[i]; names in a. */
static void region_open(em *e, int n, const ty *t, nm *a) {
  out(e, "    ^bb0(");
  for (int i = 0; i < n; i++) {
    a[i] = fresh(e);
    out(e, "%s%s: %s", i ? ", " : "", a[i].s, ts(e, t[i]));
  }
  out(e, "):\n");
}

static void region_ret(em *e, int n, const nm *v, const ty *t) {
  out(e, "    \"stablehlo.return\"(");
  for (int i = 0; i < n; i++) out(e, "%s%s", i ? ", " : "", v[i].s);
  out(e, ") : (");
  for (int i = 0; i < n; i++) out(e, "%s%s", i ? ", " : "", ts(e, t[i]));
  out(e, ") -> ()\n");
}

/* Scalar combiner of a reduce kind (SUM, PROD, MAX, MIN, AND, OR). */
static const char *combiner(int kind, int dt) {
  if (dt == TPU_BOOL) {
    switch (kind) {
    case TPUIR_RED_SUM: case TPUIR_RED_MAX: case TPUIR_RED_OR: return "stablehlo.or";
    default: return "stablehlo.and";
    }
  }
  switch (kind) {
  case TPUIR_RED_SUM: return "stablehlo.add";
  case TPUIR_RED_PROD: return "stablehlo.multiply";
  case TPUIR_RED_MAX: return "stablehlo.maximum";
  case TPUIR_RED_MIN: return "stablehlo.minimum";
  case TPUIR_RED_AND: return "stablehlo.and";
  default: return "stablehlo.or";
  }
}

static void reduce_init(int kind, int dt, double *f, int64_t *i) {
  switch (kind) {
  case TPUIR_RED_SUM: case TPUIR_RED_OR: *f = 0; *i = 0; break;
  case TPUIR_RED_PROD: case TPUIR_RED_AND: *f = 1; *i = 1; break;
  case TPUIR_RED_MAX: extreme(dt, 0, f, i); break;
  default: extreme(dt, 1, f, i); break;
  }
}

/* Accumulation dtype of a reduction over dt. */
static int acc_dtype(int dt, int kind) {
  if (dt == TPU_F16 || dt == TPU_BF16) return TPU_F32;
  if (tpu_dtype_is_int(dt) && (kind == TPUIR_RED_SUM || kind == TPUIR_RED_PROD)) return TPU_I64;
  return dt;
}

/* Open stablehlo.<op> ("reduce", "reduce_window") of *x converted to acc
 * (*tx updated) with init the identity of kind (its value taken at
 * init_dt) and the scalar combiner of kind as region. Returns the result's
 * name, *s the scalar type; the caller emits attributes and signature. */
static nm reduce_open(em *e, const char *op, nm *x, ty *tx, int kind, int acc, int init_dt,
                      ty *s) {
  *x = conv(e, *x, *tx, acc);
  tx->dt = acc;
  double f;
  int64_t iv;
  reduce_init(kind, init_dt, &f, &iv);
  *s = scalar(acc);
  nm init = cst(e, *s, f, iv);
  nm r = fresh(e);
  out(e, "    %s = \"stablehlo.%s\"(%s, %s) ({\n", r.s, op, x->s, init.s);
  ty rt[2] = {*s, *s};
  nm a[2];
  region_open(e, 2, rt, a);
  nm c = bin(e, combiner(kind, acc), a[0], a[1], *s, *s);
  region_ret(e, 1, &c, s);
  return r;
}

/* reduce x (type tx) over dims with a single scalar combiner. */
static nm reduce1(em *e, nm x, ty tx, int kind, int nd, const int64_t *dims, ty tr) {
  int acc = acc_dtype(tx.dt, kind);
  ty s;
  nm r = reduce_open(e, "reduce", &x, &tx, kind, acc, acc == TPU_I64 && acc != tr.dt ? tr.dt : acc,
                     &s);
  out(e, "    }) {");
  arr(e, "dimensions", nd, dims);
  out(e, "} : (%s, %s) -> %s\n", ts(e, tx), ts(e, s), ts(e, tyd(tr, acc)));
  return conv(e, r, tyd(tr, acc), tr.dt);
}

/* ---- run-time checks ---------------------------------------------------- */

/* Record check (kind, dim, size) whose value is `v` (rank-0 i64). */
static void add_check(em *e, int kind, int dim, int64_t size, nm v) {
  if (e->nchk == e->capchk) {
    int nc = e->capchk ? 2 * e->capchk : 8;
    tpux__check *c = realloc(e->chk, sizeof *c * (size_t)nc);
    if (c) e->chk = c;
    nm *w = realloc(e->chk_val, sizeof *w * (size_t)nc);
    if (w) e->chk_val = w;
    if (!c || !w) {
      e->oom = 1;
      return;
    }
    e->capchk = nc;
  }
  tpux__check c = {kind, dim, size};
  e->chk[e->nchk] = c;
  e->chk_val[e->nchk++] = v;
}

/* max over all of select(bad, x (as i64), INT64_MIN): INT64_MIN when no
 * element is bad, else the largest bad value. */
static nm bad_value(em *e, nm bad, nm x, ty tx) {
  ty ti = tyd(tx, TPU_I64);
  nm xi = conv(e, x, tx, TPU_I64);
  nm lo = cst(e, ti, 0, INT64_MIN);
  nm v = sel(e, bad, xi, lo, ti);
  if (tx.nd == 0) return v;
  int64_t dims[TPU_MAX_DIMS];
  for (int i = 0; i < tx.nd; i++) dims[i] = i;
  return reduce1(e, v, ti, TPUIR_RED_MAX, tx.nd, dims, scalar(TPU_I64));
}

/* Indices idx must lie in [0, size). */
static void check_index(em *e, nm idx, ty tidx, int dim, int64_t size, int select_msg) {
  nm z = cst(e, tidx, 0, 0), sz = cst(e, tidx, (double)size, size);
  nm neg = cmp(e, "LT", idx, z, tidx), big = cmp(e, "GE", idx, sz, tidx);
  ty tb = tyd(tidx, TPU_BOOL);
  nm bad = bin(e, "stablehlo.or", neg, big, tb, tb);
  add_check(e, select_msg ? TPUX_CHECK_SELECT : TPUX_CHECK_INDEX, dim, size,
            bad_value(e, bad, idx, tidx));
}

/* ---- indexing helpers ------------------------------------------------- */

/* Full index tensor [S..., r] (i64) for torch.gather/scatter along dim:
 * component d is idx at dim and iota(d) elsewhere; *tfull its type. */
static nm full_index(em *e, nm idx, ty tidx, int dim, ty *tfull) {
  int r = tidx.nd;
  ty t1 = tidx;
  t1.nd = r + 1;
  t1.sz[r] = 1;
  t1.dt = TPU_I64;
  nm parts[TPU_MAX_DIMS];
  ty pt[TPU_MAX_DIMS];
  nm i64 = conv(e, idx, tidx, TPU_I64);
  for (int d = 0; d < r; d++) {
    pt[d] = t1;
    parts[d] = d == dim ? reshape(e, i64, tyd(tidx, TPU_I64), t1) : iota(e, t1, d);
  }
  ty tf = t1;
  tf.sz[r] = r;
  *tfull = tf;
  char at[64];
  snprintf(at, sizeof at, "dimension = %d : i64", r);
  return gen(e, "stablehlo.concatenate", r, parts, pt, tf, at);
}

static void dims_attr(char *buf, size_t cap, const char *name, int r) {
  size_t k = (size_t)snprintf(buf, cap, "%s = [", name);
  for (int i = 0; i < r; i++) k += (size_t)snprintf(buf + k, cap - k, "%s%d", i ? ", " : "", i);
  snprintf(buf + k, cap - k, "]");
}

/* torch.gather(x, dim, idx) with idx of x's rank (r >= 1). */
static nm torch_gather(em *e, nm x, ty tx, nm idx, ty tidx, int dim, ty tr) {
  int r = tx.nd;
  ty tf;
  nm fi = full_index(e, idx, tidx, dim, &tf);
  char d1[160], d2[160], at[600];
  dims_attr(d1, sizeof d1, "collapsed_slice_dims", r);
  dims_attr(d2, sizeof d2, "start_index_map", r);
  size_t k = (size_t)snprintf(at, sizeof at,
                              "dimension_numbers = #stablehlo.gather<%s, %s, index_vector_dim = %d>, "
                              "indices_are_sorted = false, slice_sizes = array<i64",
                              d1, d2, r);
  for (int i = 0; i < r; i++) k += (size_t)snprintf(at + k, sizeof at - k, "%s 1", i ? "," : ":");
  snprintf(at + k, sizeof at - k, ">");
  nm a[2] = {x, fi};
  ty t[2] = {tx, tf};
  return gen(e, "stablehlo.gather", 2, a, t, tr, at);
}

/* torch.scatter_add(base, dim, idx, src) with src already idx's shape. */
static nm torch_scatter_add(em *e, nm base, ty tb, nm idx, ty tidx, nm src, int dim) {
  int r = tb.nd;
  ty tf;
  nm fi = full_index(e, idx, tidx, dim, &tf);
  ty tsrc = tyd(tidx, tb.dt);
  nm res = fresh(e);
  out(e, "    %s = \"stablehlo.scatter\"(%s, %s, %s) ({\n", res.s, base.s, fi.s, src.s);
  ty s1 = scalar(tb.dt), rt[2] = {s1, s1};
  nm a[2];
  region_open(e, 2, rt, a);
  nm c = bin(e, combiner(TPUIR_RED_SUM, tb.dt), a[0], a[1], s1, s1);
  region_ret(e, 1, &c, &s1);
  char d1[160], d2[160];
  dims_attr(d1, sizeof d1, "inserted_window_dims", r);
  dims_attr(d2, sizeof d2, "scatter_dims_to_operand_dims", r);
  out(e,
      "    }) {indices_are_sorted = false, scatter_dimension_numbers = "
      "#stablehlo.scatter<%s, %s, index_vector_dim = %d>, unique_indices = false} : "
      "(%s, %s, %s) -> %s\n",
      d1, d2, r, ts(e, tb), ts(e, tf), ts(e, tsrc), ts(e, tb));
  return res;
}

/* idx (rank 0 or 1, n entries) broadcast along `dim` of shape tr. */
static nm idx_along(em *e, nm idx, ty tidx, int dim, ty tr) {
  ty t1 = tidx;
  if (t1.nd == 0) {
    t1.nd = 1;
    t1.sz[0] = 1;
    idx = reshape(e, idx, tidx, t1);
  }
  int64_t d = dim;
  return bcast(e, idx, t1, tyd(tr, t1.dt), &d);
}

/* ---- philox (tpuir_rng) -------------------------------------------------- */

/* 32-bit words of Philox4x32-10 for counters (offset << 64) | i (i < n), key
 * seed; key/offset as rank-0 ui64 values. w[0..4) receive ui32 [n]. */
static void philox(em *e, nm seed, nm offset, int64_t n, nm *w) {
  ty u64 = {TPU_I64, 1, {n}}, u32 = u64;
  u64.dt = TPU_I64;
  /* work in ui64/ui32 through the i64/i32 types' bit patterns: the printer
   * below uses explicit unsigned element types */
  (void)u32;
  char T64[64], T32[64];
  snprintf(T64, sizeof T64, "tensor<%" PRId64 "xui64>", n);
  snprintf(T32, sizeof T32, "tensor<%" PRId64 "xui32>", n);
#define OP2(r, op, a, b, T) \
  do { nm r_ = fresh(e); out(e, "    %s = \"" op "\"(%s, %s) : (%s, %s) -> %s\n", r_.s, a.s, b.s, T, T, T); r = r_; } while (0)
#define CVT(r, a, Ta, Tr) \
  do { nm r_ = fresh(e); out(e, "    %s = \"stablehlo.convert\"(%s) : (%s) -> %s\n", r_.s, a.s, Ta, Tr); r = r_; } while (0)
#define K64(r, v) \
  do { r = fresh(e); out(e, "    %s = stablehlo.constant dense<%" PRIu64 "> : %s\n", r.s, (uint64_t)(v), T64); } while (0)
#define K32(r, v) \
  do { r = fresh(e); out(e, "    %s = stablehlo.constant dense<%" PRIu32 "> : %s\n", r.s, (uint32_t)(v), T32); } while (0)
  nm it = fresh(e);
  out(e, "    %s = \"stablehlo.iota\"() {iota_dimension = 0 : i64} : () -> %s\n", it.s, T64);
  nm ob = fresh(e), sb = fresh(e);
  out(e, "    %s = \"stablehlo.broadcast_in_dim\"(%s) {broadcast_dimensions = array<i64>} : (tensor<ui64>) -> %s\n",
      ob.s, offset.s, T64);
  out(e, "    %s = \"stablehlo.broadcast_in_dim\"(%s) {broadcast_dimensions = array<i64>} : (tensor<ui64>) -> %s\n",
      sb.s, seed.s, T64);
  /* counter (offset << 64) | i, as exec/vtpu/rng.c: words i lo, i hi, offset lo, hi */
  nm ctr = it, s32, c0, c1, c2, c3, k0, k1, tmp;
  K64(s32, 32);
  CVT(c0, ctr, T64, T32);
  OP2(tmp, "stablehlo.shift_right_logical", ctr, s32, T64);
  CVT(c1, tmp, T64, T32);
  CVT(c2, ob, T64, T32);
  OP2(tmp, "stablehlo.shift_right_logical", ob, s32, T64);
  CVT(c3, tmp, T64, T32);
  CVT(k0, sb, T64, T32);
  OP2(tmp, "stablehlo.shift_right_logical", sb, s32, T64);
  CVT(k1, tmp, T64, T32);
  nm m0, m1, w0, w1;
  K64(m0, 0xD2511F53u);
  K64(m1, 0xCD9E8D57u);
  K32(w0, 0x9E3779B9u);
  K32(w1, 0xBB67AE85u);
  for (int r = 0; r < 10; r++) {
    if (r) {
      OP2(k0, "stablehlo.add", k0, w0, T32);
      OP2(k1, "stablehlo.add", k1, w1, T32);
    }
    nm a0, a2, p0, p1, hi0, hi1, lo0, lo1, n0, n2;
    CVT(a0, c0, T32, T64);
    CVT(a2, c2, T32, T64);
    OP2(p0, "stablehlo.multiply", a0, m0, T64);
    OP2(p1, "stablehlo.multiply", a2, m1, T64);
    OP2(tmp, "stablehlo.shift_right_logical", p0, s32, T64);
    CVT(hi0, tmp, T64, T32);
    OP2(tmp, "stablehlo.shift_right_logical", p1, s32, T64);
    CVT(hi1, tmp, T64, T32);
    CVT(lo0, p0, T64, T32);
    CVT(lo1, p1, T64, T32);
    OP2(tmp, "stablehlo.xor", hi1, c1, T32);
    OP2(n0, "stablehlo.xor", tmp, k0, T32);
    OP2(tmp, "stablehlo.xor", hi0, c3, T32);
    OP2(n2, "stablehlo.xor", tmp, k1, T32);
    c1 = lo1;
    c3 = lo0;
    c0 = n0;
    c2 = n2;
  }
  w[0] = c0;
  w[1] = c1;
  w[2] = c2;
  w[3] = c3;
}

/* (w_lo | w_hi << 32) >> drop as f64 * 2^-scale, shape [n] f64. */
static nm bits_to_f64(em *e, nm lo, nm hi, int64_t n, int drop, int scale, int plus1) {
  char T64[64], T32[64], TF[64];
  snprintf(T64, sizeof T64, "tensor<%" PRId64 "xui64>", n);
  snprintf(T32, sizeof T32, "tensor<%" PRId64 "xui32>", n);
  snprintf(TF, sizeof TF, "tensor<%" PRId64 "xf64>", n);
  nm a, b, s32, t, d, r, f, k;
  CVT(a, lo, T32, T64);
  CVT(b, hi, T32, T64);
  K64(s32, 32);
  OP2(t, "stablehlo.shift_left", b, s32, T64);
  OP2(t, "stablehlo.or", t, a, T64);
  K64(d, drop);
  OP2(t, "stablehlo.shift_right_logical", t, d, T64);
  if (plus1) {
    nm one;
    K64(one, 1);
    OP2(t, "stablehlo.add", t, one, T64);
  }
  CVT(f, t, T64, TF);
  k = fresh(e);
  out(e, "    %s = stablehlo.constant dense<0x%016" PRIX64 "> : %s\n", k.s, f64bits(ldexp(1.0, -scale)), TF);
  OP2(r, "stablehlo.multiply", f, k, TF);
  return r;
}

/* 24-bit style: (w >> drop) (+1) * 2^-scale as f64 [n]. */
static nm word_to_f64(em *e, nm w, int64_t n, int drop, int scale, int plus1) {
  char T32[64], TF[64];
  snprintf(T32, sizeof T32, "tensor<%" PRId64 "xui32>", n);
  snprintf(TF, sizeof TF, "tensor<%" PRId64 "xf64>", n);
  nm d, t, f, k, r;
  K32(d, drop);
  OP2(t, "stablehlo.shift_right_logical", w, d, T32);
  CVT(f, t, T32, TF);
  if (plus1) {
    nm one = fresh(e);
    out(e, "    %s = stablehlo.constant dense<1.0> : %s\n", one.s, TF);
    OP2(f, "stablehlo.add", f, one, TF);
  }
  k = fresh(e);
  out(e, "    %s = stablehlo.constant dense<0x%016" PRIX64 "> : %s\n", k.s, f64bits(ldexp(1.0, -scale)), TF);
  OP2(r, "stablehlo.multiply", f, k, TF);
  return r;
}

/* tpuir_rng: seed/offset are rank-0 ui64 values. */
static nm rng(em *e, const tpuir_node *n, nm seed, nm offset, ty tr) {
  int64_t cnt = 1;
  for (int i = 0; i < tr.nd; i++) cnt *= tr.sz[i];
  if (cnt == 0) return cst(e, tr, 0, 0);
  nm w[4];
  philox(e, seed, offset, cnt, w);
  char TF[64], T32[64];
  snprintf(TF, sizeof TF, "tensor<%" PRId64 "xf64>", cnt);
  snprintf(T32, sizeof T32, "tensor<%" PRId64 "xui32>", cnt);
  ty flat = {tr.dt, 1, {cnt}};
  nm v;
  if (n->kind == TPUIR_RNG_BITS) {
    char T64[64];
    snprintf(T64, sizeof T64, "tensor<%" PRId64 "xui64>", cnt);
    nm a, b, s32, t;
    CVT(a, w[0], T32, T64);
    CVT(b, w[1], T32, T64);
    K64(s32, 32);
    OP2(t, "stablehlo.shift_left", b, s32, T64);
    OP2(t, "stablehlo.or", t, a, T64);
    /* wrap to the dtype: ui64 -> i64 bitcast, then narrowing convert */
    nm s = fresh(e);
    out(e, "    %s = \"stablehlo.bitcast_convert\"(%s) : (%s) -> tensor<%" PRId64 "xi64>\n", s.s, t.s,
        T64, cnt);
    v = conv(e, s, tyd(flat, TPU_I64), tr.dt);
  } else if (n->kind == TPUIR_RNG_UNIFORM) {
    nm f;
    switch (tr.dt) {
    case TPU_F64: f = bits_to_f64(e, w[0], w[1], cnt, 11, 53, 0); break;
    case TPU_BF16: f = word_to_f64(e, w[0], cnt, 24, 8, 0); break;
    case TPU_F16: f = word_to_f64(e, w[0], cnt, 21, 11, 0); break;
    default: f = word_to_f64(e, w[0], cnt, 8, 24, 0); break;
    }
    v = conv(e, f, tyd(flat, TPU_F64), tr.dt);
  } else { /* NORMAL: Box-Muller in f64 */
    nm u1, u2;
    if (tr.dt == TPU_F64) {
      u1 = bits_to_f64(e, w[0], w[1], cnt, 11, 53, 1);
      u2 = bits_to_f64(e, w[2], w[3], cnt, 11, 53, 0);
    } else {
      u1 = word_to_f64(e, w[0], cnt, 8, 24, 1);
      u2 = word_to_f64(e, w[1], cnt, 8, 24, 0);
    }
    nm lg, m2, tp, sq, an, cs, z;
    lg = fresh(e);
    out(e, "    %s = \"stablehlo.log\"(%s) : (%s) -> %s\n", lg.s, u1.s, TF, TF);
    m2 = fresh(e);
    out(e, "    %s = stablehlo.constant dense<-2.0> : %s\n", m2.s, TF);
    OP2(lg, "stablehlo.multiply", lg, m2, TF);
    sq = fresh(e);
    out(e, "    %s = \"stablehlo.sqrt\"(%s) : (%s) -> %s\n", sq.s, lg.s, TF, TF);
    tp = fresh(e);
    out(e, "    %s = stablehlo.constant dense<0x%016" PRIX64 "> : %s\n", tp.s,
        f64bits(6.283185307179586476925286766559), TF);
    OP2(an, "stablehlo.multiply", u2, tp, TF);
    cs = fresh(e);
    out(e, "    %s = \"stablehlo.cosine\"(%s) : (%s) -> %s\n", cs.s, an.s, TF, TF);
    OP2(z, "stablehlo.multiply", sq, cs, TF);
    v = conv(e, z, tyd(flat, TPU_F64), tr.dt);
  }
#undef OP2
#undef CVT
#undef K64
#undef K32
  return reshape(e, v, flat, tr);
}

/* ---- argreduce / window argmax / sort ----------------------------------- */

/* Region choosing between (a, ai) and (b, bi): `want_max`, NaN counts as the
 * extreme; ties: lower index (first) unless nan_last for NaN ties. */
static void pick_region(em *e, ty s, int want_max, int nan_last_wins) {
  ty si = scalar(TPU_I64), rt[4] = {s, si, s, si};
  nm a[4];
  /* block args order for variadic reduce: (acc0, acc1, x0, x1) */
  region_open(e, 4, rt, a);
  nm av = a[0], ai = a[1], bv = a[2], bi = a[3];
  nm an = cmp(e, "NE", av, av, s), bn = cmp(e, "NE", bv, bv, s);
  ty sb = scalar(TPU_BOOL);
  nm nbn = un(e, "stablehlo.not", bn, sb, sb);
  nm ilt = cmp(e, "LT", ai, bi, si);
  nm igt = cmp(e, "GT", ai, bi, si);
  nm better = cmp(e, want_max ? "GT" : "LT", av, bv, s);
  nm eq = cmp(e, "EQ", av, bv, s);
  nm tie = bin(e, "stablehlo.and", eq, ilt, sb, sb);
  nm nonnan = bin(e, "stablehlo.or", better, tie, sb, sb);
  nonnan = bin(e, "stablehlo.and", nbn, nonnan, sb, sb);
  nm nantie = nan_last_wins ? igt : ilt;
  nm whennan = bin(e, "stablehlo.or", nbn, nantie, sb, sb);
  nm pa = sel(e, an, whennan, nonnan, sb);
  nm rv = sel(e, pa, av, bv, s), ri = sel(e, pa, ai, bi, si);
  nm rr[2] = {rv, ri};
  ty rtt[2] = {s, si};
  region_ret(e, 2, rr, rtt);
}

static nm argreduce(em *e, const tpuir_node *n, nm x, ty tx, ty tr) {
  int dim = n->dim, mx = n->kind == TPUIR_RED_MAX;
  if (tx.nd == 0) return cst(e, tr, 0, 0);
  if (tx.dt == TPU_BOOL) {
    x = conv(e, x, tx, TPU_U8);
    tx.dt = TPU_U8;
  }
  nm io = iota(e, tyd(tx, TPU_I64), dim);
  double f;
  int64_t iv;
  extreme(tx.dt, !mx, &f, &iv);
  nm i0 = cst(e, scalar(tx.dt), f, iv), i1 = cst(e, scalar(TPU_I64), 0, INT64_MAX);
  nm r = fresh(e);
  out(e, "    %s:2 = \"stablehlo.reduce\"(%s, %s, %s, %s) ({\n", r.s, x.s, io.s, i0.s, i1.s);
  pick_region(e, scalar(tx.dt), mx, 0);
  int64_t d = dim;
  out(e, "    }) {");
  arr(e, "dimensions", 1, &d);
  out(e, "} : (%s, %s, %s, %s) -> (%s, %s)\n", ts(e, tx), ts(e, tyd(tx, TPU_I64)),
      ts(e, scalar(tx.dt)), ts(e, scalar(TPU_I64)), ts(e, tyd(tr, tx.dt)), ts(e, tr));
  return sub(r, 1);
}

static void padding_attr(em *e, int r, const int64_t *lo, const int64_t *hi) {
  out(e, "padding = dense<[");
  for (int i = 0; i < r; i++) out(e, "%s[%" PRId64 ", %" PRId64 "]", i ? ", " : "", lo[i], hi[i]);
  out(e, "]> : tensor<%dx2xi64>", r);
}

static void window_attrs(em *e, const tpuir_node *n) {
  int r = n->na;
  out(e, "}) {");
  padding_attr(e, r, n->c, n->c + 8);
  out(e, ", ");
  arr(e, "window_dilations", r, n->d);
  out(e, ", ");
  arr(e, "window_dimensions", r, n->a);
  out(e, ", ");
  arr(e, "window_strides", r, n->b);
  out(e, "}");
}

static nm reduce_window(em *e, const tpuir_node *n, nm x, ty tx, ty tr) {
  int kind = n->kind, acc = (kind == TPUIR_RED_SUM) ? acc_dtype(tx.dt, kind) : tx.dt;
  if (acc == TPU_I64 && tx.dt != TPU_I64) acc = tx.dt; /* windows are small */
  ty s;
  nm r = reduce_open(e, "reduce_window", &x, &tx, kind, acc, acc, &s);
  out(e, "    ");
  window_attrs(e, n);
  out(e, " : (%s, %s) -> %s\n", ts(e, tx), ts(e, s), ts(e, tyd(tr, acc)));
  return conv(e, r, tyd(tr, acc), tr.dt);
}

static nm window_argmax(em *e, const tpuir_node *n, nm x, ty tx, ty tr) {
  int r = tx.nd, k = n->dim;
  /* flat index over the last k dims */
  ty ti = tyd(tx, TPU_I64);
  nm idx = cst(e, ti, 0, 0);
  int64_t stride = 1;
  for (int d = r - 1; d >= r - k; d--) {
    nm io = iota(e, ti, d);
    nm st = cst(e, ti, 0, stride);
    io = bin(e, "stablehlo.multiply", io, st, ti, ti);
    idx = bin(e, "stablehlo.add", idx, io, ti, ti);
    stride *= tx.sz[d];
  }
  double f;
  int64_t iv;
  extreme(tx.dt, 0, &f, &iv);
  nm i0 = cst(e, scalar(tx.dt), f, iv), i1 = cst(e, scalar(TPU_I64), 0, INT64_MAX);
  nm res = fresh(e);
  out(e, "    %s:2 = \"stablehlo.reduce_window\"(%s, %s, %s, %s) ({\n", res.s, x.s, idx.s, i0.s,
      i1.s);
  pick_region(e, scalar(tx.dt), 1, 1);
  out(e, "    ");
  window_attrs(e, n);
  out(e, " : (%s, %s, %s, %s) -> (%s, %s)\n", ts(e, tx), ts(e, ti), ts(e, scalar(tx.dt)),
      ts(e, scalar(TPU_I64)), ts(e, tyd(tr, tx.dt)), ts(e, tr));
  nm ri = sub(res, 1);
  nm big = cst(e, tr, 0, INT64_MAX), m1 = cst(e, tr, 0, -1);
  nm isbig = cmp(e, "EQ", ri, big, tr);
  return sel(e, isbig, m1, ri, tr);
}

static nm sort_op(em *e, const tpuir_node *n, nm x, ty tx, ty tr) {
  int dim = n->dim, desc = (int)n->a[0];
  if (tx.nd == 0) return n->kind == TPUIR_SORT_INDICES ? cst(e, tr, 0, 0) : x;
  /* key: canonical zero and NaN for floats, u8 for bool */
  nm key = x;
  ty tk = tx;
  if (tpu_dtype_is_float(tx.dt)) {
    nm z = cst(e, tx, 0, 0), qn = cst(e, tx, NAN, 0);
    nm isz = cmp(e, "EQ", x, z, tx), isn = cmp(e, "NE", x, x, tx);
    key = sel(e, isz, z, x, tx);
    key = sel(e, isn, qn, key, tx);
  } else if (tx.dt == TPU_BOOL) {
    key = conv(e, x, tx, TPU_U8);
    tk.dt = TPU_U8;
  }
  ty ti = tyd(tx, TPU_I64);
  nm io = iota(e, ti, dim);
  nm r = fresh(e);
  out(e, "    %s:3 = \"stablehlo.sort\"(%s, %s, %s) ({\n", r.s, key.s, io.s, x.s);
  ty sk = scalar(tk.dt), si = scalar(TPU_I64), sx = scalar(tx.dt);
  ty rt[6] = {sk, sk, si, si, sx, sx};
  nm a[6];
  region_open(e, 6, rt, a);
  char at[200];
  snprintf(at, sizeof at,
           "comparison_direction = #stablehlo<comparison_direction %s>, compare_type = "
           "#stablehlo<comparison_type %s>",
           desc ? "GT" : "LT", tpu_dtype_is_float(tk.dt) ? "TOTALORDER" : tk.dt == TPU_U8 ? "UNSIGNED" : "SIGNED");
  nm ab[2] = {a[0], a[1]};
  ty tt[2] = {sk, sk};
  ty sb = scalar(TPU_BOOL);
  nm c = gen(e, "stablehlo.compare", 2, ab, tt, sb, at);
  region_ret(e, 1, &c, &sb);
  out(e, "    }) {dimension = %d : i64, is_stable = true} : (%s, %s, %s) -> (%s, %s, %s)\n", dim,
      ts(e, tk), ts(e, ti), ts(e, tx), ts(e, tk), ts(e, ti), ts(e, tx));
  int which = n->kind == TPUIR_SORT_INDICES ? 1 : 2;
  nm res = sub(r, which);
  ty full = which == 1 ? ti : tx;
  if (tr.sz[dim] != tx.sz[dim]) {
    int64_t st[TPU_MAX_DIMS], li[TPU_MAX_DIMS], sd[TPU_MAX_DIMS];
    for (int i = 0; i < tx.nd; i++) {
      st[i] = 0;
      li[i] = i == dim ? tr.sz[dim] : tx.sz[i];
      sd[i] = 1;
    }
    char buf[1200];
    size_t k = 0;
    const int64_t *vv[3] = {st, li, sd};
    const char *names[3] = {"start_indices", "limit_indices", "strides"};
    for (int j = 0; j < 3; j++) {
      k += (size_t)snprintf(buf + k, sizeof buf - k, "%s%s = array<i64", j ? ", " : "", names[j]);
      for (int i = 0; i < tx.nd; i++)
        k += (size_t)snprintf(buf + k, sizeof buf - k, "%s %" PRId64, i ? "," : ":", vv[j][i]);
      k += (size_t)snprintf(buf + k, sizeof buf - k, ">");
    }
    return gen(e, "stablehlo.slice", 1, &res, &full, tr, buf);
  }
  return res;
}

/* ---- one node ------------------------------------------------------------ */

static const char *unary_name(int op) {
  switch (op) {
  case TPUIR_NEG: return "stablehlo.negate";
  case TPUIR_ABS: return "stablehlo.abs";
  case TPUIR_EXP: return "stablehlo.exponential";
  case TPUIR_EXPM1: return "stablehlo.exponential_minus_one";
  case TPUIR_LOG: return "stablehlo.log";
  case TPUIR_LOG1P: return "stablehlo.log_plus_one";
  case TPUIR_SQRT: return "stablehlo.sqrt";
  case TPUIR_RSQRT: return "stablehlo.rsqrt";
  case TPUIR_SIN: return "stablehlo.sine";
  case TPUIR_COS: return "stablehlo.cosine";
  case TPUIR_TAN: return "chlo.tan";
  case TPUIR_TANH: return "stablehlo.tanh";
  case TPUIR_ASIN: return "chlo.asin";
  case TPUIR_ACOS: return "chlo.acos";
  case TPUIR_ATAN: return "chlo.atan";
  case TPUIR_SINH: return "chlo.sinh";
  case TPUIR_COSH: return "chlo.cosh";
  case TPUIR_ASINH: return "chlo.asinh";
  case TPUIR_ACOSH: return "chlo.acosh";
  case TPUIR_ATANH: return "chlo.atanh";
  case TPUIR_LOGISTIC: return "stablehlo.logistic";
  case TPUIR_ERF: return "chlo.erf";
  case TPUIR_ERFINV: return "chlo.erf_inv";
  case TPUIR_LGAMMA: return "chlo.lgamma";
  case TPUIR_DIGAMMA: return "chlo.digamma";
  case TPUIR_FLOOR: return "stablehlo.floor";
  case TPUIR_CEIL: return "stablehlo.ceil";
  case TPUIR_ROUND_EVEN: return "stablehlo.round_nearest_even";
  case TPUIR_NOT: return "stablehlo.not";
  case TPUIR_MBESSEL_I1: return NULL;
  case TPUIR_I1E: return "chlo.bessel_i1e";
  default: return NULL;
  }
}

static const char *binary_name(int op, int dt) {
  if (dt == TPU_BOOL) {
    switch (op) {
    case TPUIR_ADD: case TPUIR_MAX: case TPUIR_OR: return "stablehlo.or";
    case TPUIR_MUL: case TPUIR_MIN: case TPUIR_AND: return "stablehlo.and";
    case TPUIR_SUB: case TPUIR_XOR: return "stablehlo.xor";
    default: return NULL;
    }
  }
  switch (op) {
  case TPUIR_ADD: return "stablehlo.add";
  case TPUIR_SUB: return "stablehlo.subtract";
  case TPUIR_MUL: return "stablehlo.multiply";
  case TPUIR_DIV: return "stablehlo.divide";
  case TPUIR_REM: return "stablehlo.remainder";
  case TPUIR_POW: return "stablehlo.power";
  case TPUIR_MAX: return "stablehlo.maximum";
  case TPUIR_MIN: return "stablehlo.minimum";
  case TPUIR_ATAN2: return "stablehlo.atan2";
  case TPUIR_AND: return "stablehlo.and";
  case TPUIR_OR: return "stablehlo.or";
  case TPUIR_XOR: return "stablehlo.xor";
  case TPUIR_SHL: return "stablehlo.shift_left";
  case TPUIR_SHR: return dt == TPU_U8 ? "stablehlo.shift_right_logical" : "stablehlo.shift_right_arithmetic";
  case TPUIR_ZETA: return "chlo.zeta";
  case TPUIR_NEXTAFTER: return "chlo.next_after";
  default: return NULL;
  }
}

static const char *cmp_dir(int op) {
  switch (op) {
  case TPUIR_EQ: return "EQ";
  case TPUIR_NE: return "NE";
  case TPUIR_LT: return "LT";
  case TPUIR_LE: return "LE";
  case TPUIR_GT: return "GT";
  default: return "GE";
  }
}

/* Emit node v; *res receives its value name. Returns 0, or -1 when the op
 * has no expression (e->bad_op set). */
static int node(em *e, tpuir_val v, nm *res) {
  const tpuir_node *n = tpuir_get_node(e->g, v);
  ty tr = tyof(e, v);
  nm x = n->nin > 0 ? N(e, n->in[0]) : V(0);
  ty tx = n->nin > 0 ? tyof(e, n->in[0]) : tr;
  nm r;
  const char *op;
  switch (n->op) {
  case TPUIR_CONST:
    r = cst(e, tr, n->fval, n->ival);
    break;
  case TPUIR_IOTA:
    if (tr.dt == TPU_BOOL) {
      r = conv(e, iota(e, tyd(tr, TPU_I64), n->dim), tyd(tr, TPU_I64), TPU_BOOL);
    } else {
      r = iota(e, tr, n->dim);
    }
    break;
  case TPUIR_RNG: {
      nm sd, of;
      if (n->nin == 1) {
        ty k1 = {TPU_I64, 1, {1}};
        ty t2 = {TPU_I64, 1, {2}};
        const char *a0 = "start_indices = array<i64: 0>, limit_indices = array<i64: 1>, "
                         "strides = array<i64: 1>";
        const char *a1 = "start_indices = array<i64: 1>, limit_indices = array<i64: 2>, "
                         "strides = array<i64: 1>";
        nm s0 = gen(e, "stablehlo.slice", 1, &x, &t2, k1, a0);
        nm s1 = gen(e, "stablehlo.slice", 1, &x, &t2, k1, a1);
        s0 = reshape(e, s0, k1, scalar(TPU_I64));
        s1 = reshape(e, s1, k1, scalar(TPU_I64));
        sd = fresh(e);
        out(e, "    %s = \"stablehlo.bitcast_convert\"(%s) : (tensor<i64>) -> tensor<ui64>\n", sd.s, s0.s);
        of = fresh(e);
        out(e, "    %s = \"stablehlo.bitcast_convert\"(%s) : (tensor<i64>) -> tensor<ui64>\n", of.s, s1.s);
      } else {
        sd = fresh(e);
        out(e, "    %s = stablehlo.constant dense<%" PRIu64 "> : tensor<ui64>\n", sd.s, n->seed);
        of = fresh(e);
        out(e, "    %s = stablehlo.constant dense<%" PRIu64 "> : tensor<ui64>\n", of.s, n->offset);
      }
      if (!tpu_dtype_is_float(tr.dt) && n->kind != TPUIR_RNG_BITS) goto bad;
      r = rng(e, n, sd, of, tr);
    }
    break;
  case TPUIR_SIGN:
    if (tx.dt == TPU_BOOL || tx.dt == TPU_U8) {
      nm z = cst(e, tx, 0, 0);
      nm nz = cmp(e, "NE", x, z, tx);
      r = conv(e, nz, tyd(tx, TPU_BOOL), tr.dt);
    } else {
      r = un(e, "stablehlo.sign", x, tx, tr);
      if (tpu_dtype_is_float(tx.dt)) {
        nm isn = cmp(e, "NE", x, x, tx), z = cst(e, tr, 0, 0);
        r = sel(e, isn, z, r, tr);
      }
    }
    break;
  case TPUIR_TRUNC:
    if (!tpu_dtype_is_float(tx.dt)) {
      r = x;
    } else {
      nm z = cst(e, tx, 0, 0), lt = cmp(e, "LT", x, z, tx);
      nm c = un(e, "stablehlo.ceil", x, tx, tr), f = un(e, "stablehlo.floor", x, tx, tr);
      r = sel(e, lt, c, f, tr);
    }
    break;
  case TPUIR_FLOOR: case TPUIR_CEIL: case TPUIR_ROUND_EVEN:
    r = tpu_dtype_is_float(tx.dt) ? un(e, unary_name(n->op), x, tx, tr) : x;
    break;
  case TPUIR_IS_FINITE:
    if (tpu_dtype_is_float(tx.dt)) {
      r = un(e, "stablehlo.is_finite", x, tx, tr);
    } else if (tpu_dtype_is_complex(tx.dt)) {
      int pd = tpu_dtype_complex_part(tx.dt);
      nm re = un(e, "stablehlo.real", x, tx, tyd(tx, pd)), im = un(e, "stablehlo.imag", x, tx, tyd(tx, pd));
      nm fr = un(e, "stablehlo.is_finite", re, tyd(tx, pd), tr);
      nm fi = un(e, "stablehlo.is_finite", im, tyd(tx, pd), tr);
      r = bin(e, "stablehlo.and", fr, fi, tr, tr);
    } else {
      r = cst(e, tr, 1, 1);
    }
    break;
  case TPUIR_IS_NAN:
    if (tpu_dtype_is_complex(tx.dt)) goto bad;
    r = tpu_dtype_is_float(tx.dt) ? cmp(e, "NE", x, x, tx) : cst(e, tr, 0, 0);
    break;
  case TPUIR_IS_INF:
    if (tpu_dtype_is_complex(tx.dt)) goto bad;
    if (tpu_dtype_is_float(tx.dt)) {
      nm a = un(e, "stablehlo.abs", x, tx, tx), inf = cst(e, tx, INFINITY, 0);
      r = cmp(e, "EQ", a, inf, tx);
    } else {
      r = cst(e, tr, 0, 0);
    }
    break;
  case TPUIR_NEG:
    if (tx.dt == TPU_BOOL) goto bad;
    r = un(e, "stablehlo.negate", x, tx, tr);
    break;
  case TPUIR_ABS:
    r = tx.dt == TPU_BOOL || tx.dt == TPU_U8 ? x : un(e, "stablehlo.abs", x, tx, tr);
    break;
  case TPUIR_EQ: case TPUIR_NE: case TPUIR_LT: case TPUIR_LE: case TPUIR_GT: case TPUIR_GE:
    r = cmp(e, cmp_dir(n->op), x, N(e, n->in[1]), tx);
    break;
  case TPUIR_SELECT: {
    nm a[3] = {x, N(e, n->in[1]), N(e, n->in[2])};
    ty t[3] = {tx, tr, tr};
    r = gen(e, "stablehlo.select", 3, a, t, tr, NULL);
    break;
  }
  case TPUIR_CONVERT:
    if (tr.dt == tx.dt) {
      r = x;
    } else if (tr.dt == TPU_BOOL) {
      nm z = cst(e, tx, 0, 0);
      r = cmp(e, "NE", x, z, tx);
    } else if (tpu_dtype_is_complex(tx.dt) && !tpu_dtype_is_complex(tr.dt)) {
      int pd = tpu_dtype_complex_part(tx.dt);
      nm re = un(e, "stablehlo.real", x, tx, tyd(tx, pd));
      r = conv(e, re, tyd(tx, pd), tr.dt);
    } else if (!tpu_dtype_is_complex(tx.dt) && tpu_dtype_is_complex(tr.dt)) {
      int pd = tpu_dtype_complex_part(tr.dt);
      nm re = conv(e, x, tx, pd), im = cst(e, tyd(tr, pd), 0, 0);
      r = bin(e, "stablehlo.complex", re, im, tyd(tr, pd), tr);
    } else {
      r = conv(e, x, tx, tr.dt);
    }
    break;
  case TPUIR_BROADCAST_IN_DIM:
    r = bcast(e, x, tx, tr, n->a);
    break;
  case TPUIR_RESHAPE:
    r = reshape(e, x, tx, tr);
    break;
  case TPUIR_TRANSPOSE: {
    char at[400];
    size_t k = (size_t)snprintf(at, sizeof at, "permutation = array<i64");
    for (int i = 0; i < n->na; i++)
      k += (size_t)snprintf(at + k, sizeof at - k, "%s %" PRId64, i ? "," : ":", n->a[i]);
    snprintf(at + k, sizeof at - k, ">");
    r = gen(e, "stablehlo.transpose", 1, &x, &tx, tr, at);
    break;
  }
  case TPUIR_SLICE: {
    r = fresh(e);
    out(e, "    %s = \"stablehlo.slice\"(%s) {", r.s, x.s);
    arr(e, "start_indices", n->na, n->a);
    out(e, ", ");
    arr(e, "limit_indices", n->na, n->b);
    out(e, ", ");
    arr(e, "strides", n->na, n->c);
    out(e, "} : (%s) -> %s\n", ts(e, tx), ts(e, tr));
    break;
  }
  case TPUIR_CONCAT: {
    r = fresh(e);
    out(e, "    %s = \"stablehlo.concatenate\"(", r.s);
    for (int i = 0; i < n->nlist; i++) out(e, "%s%s", i ? ", " : "", N(e, n->list[i]).s);
    out(e, ") {dimension = %d : i64} : (", n->dim);
    for (int i = 0; i < n->nlist; i++) out(e, "%s%s", i ? ", " : "", ts(e, tyof(e, n->list[i])));
    out(e, ") -> %s\n", ts(e, tr));
    break;
  }
  case TPUIR_PAD: {
    r = fresh(e);
    out(e, "    %s = \"stablehlo.pad\"(%s, %s) {", r.s, x.s, N(e, n->in[1]).s);
    arr(e, "edge_padding_high", n->na, n->b);
    out(e, ", ");
    arr(e, "edge_padding_low", n->na, n->a);
    out(e, ", ");
    arr(e, "interior_padding", n->na, n->c);
    out(e, "} : (%s, %s) -> %s\n", ts(e, tx), ts(e, scalar(tx.dt)), ts(e, tr));
    break;
  }
  case TPUIR_REVERSE: {
    r = fresh(e);
    out(e, "    %s = \"stablehlo.reverse\"(%s) {", r.s, x.s);
    arr(e, "dimensions", n->na, n->a);
    out(e, "} : (%s) -> %s\n", ts(e, tx), ts(e, tr));
    break;
  }
  case TPUIR_REDUCE:
    if (n->na == 0) {
      r = x;
      break;
    }
    if (tpu_dtype_is_complex(tx.dt) && n->kind != TPUIR_RED_SUM && n->kind != TPUIR_RED_PROD) goto bad;
    r = reduce1(e, x, tx, n->kind, n->na, n->a, tr);
    break;
  case TPUIR_ARGREDUCE:
    r = argreduce(e, n, x, tx, tr);
    break;
  case TPUIR_DOT_GENERAL: {
    static const char *prec[] = {"DEFAULT", "HIGH", "HIGHEST", "HIGHEST"};
    const char *p = prec[(n->kind >= 0 && n->kind <= 3) ? n->kind : 0];
    ty ty2 = tyof(e, n->in[1]);
    char at[1200];
    size_t k = (size_t)snprintf(at, sizeof at, "dot_dimension_numbers = #stablehlo.dot<");
    int first = 1;
    const char *nms[4] = {"lhs_batching_dimensions", "rhs_batching_dimensions",
                          "lhs_contracting_dimensions", "rhs_contracting_dimensions"};
    const int64_t *ls[4] = {n->a, n->b, n->c, n->d};
    int cnt[4] = {n->na, n->na, n->nb, n->nb};
    for (int j = 0; j < 4; j++) {
      if (!cnt[j]) continue;
      k += (size_t)snprintf(at + k, sizeof at - k, "%s%s = [", first ? "" : ", ", nms[j]);
      first = 0;
      for (int i = 0; i < cnt[j]; i++)
        k += (size_t)snprintf(at + k, sizeof at - k, "%s%" PRId64, i ? ", " : "", ls[j][i]);
      k += (size_t)snprintf(at + k, sizeof at - k, "]");
    }
    snprintf(at + k, sizeof at - k,
             ">, precision_config = [#stablehlo<precision %s>, #stablehlo<precision %s>]", p, p);
    nm a[2] = {x, N(e, n->in[1])};
    ty t[2] = {tx, ty2};
    r = gen(e, "stablehlo.dot_general", 2, a, t, tr, at);
    break;
  }
  case TPUIR_GATHER:
    if (tx.nd == 0) {
      r = x;
      break;
    }
    check_index(e, N(e, n->in[1]), tyof(e, n->in[1]), n->dim, tx.sz[n->dim], 0);
    r = torch_gather(e, x, tx, N(e, n->in[1]), tyof(e, n->in[1]), n->dim, tr);
    break;
  case TPUIR_INDEX_SELECT: {
    if (tx.nd == 0) {
      r = x;
      break;
    }
    ty ti = tyof(e, n->in[1]);
    check_index(e, N(e, n->in[1]), ti, n->dim, tx.sz[n->dim], 1);
    nm bi = idx_along(e, N(e, n->in[1]), ti, n->dim, tr);
    r = torch_gather(e, x, tx, bi, tyd(tr, ti.dt), n->dim, tr);
    break;
  }
  case TPUIR_SCATTER_ADD: case TPUIR_INDEX_ADD: {
    if (tx.nd == 0) {
      r = bin(e, binary_name(TPUIR_ADD, tx.dt), x, N(e, n->in[2]), tx, tr);
      break;
    }
    ty ti = tyof(e, n->in[1]), tsrc = tyof(e, n->in[2]);
    nm idx = N(e, n->in[1]), src = N(e, n->in[2]);
    check_index(e, idx, ti, n->dim, tx.sz[n->dim], 0);
    if (n->op == TPUIR_INDEX_ADD) {
      idx = idx_along(e, idx, ti, n->dim, tsrc);
      ti = tyd(tsrc, ti.dt);
    } else {
      int same = 1;
      for (int i = 0; i < ti.nd; i++) same &= ti.sz[i] == tsrc.sz[i];
      if (!same) {
        int64_t z[TPU_MAX_DIMS] = {0}, one[TPU_MAX_DIMS];
        for (int i = 0; i < ti.nd; i++) one[i] = 1;
        nm sl = fresh(e);
        out(e, "    %s = \"stablehlo.slice\"(%s) {", sl.s, src.s);
        arr(e, "start_indices", ti.nd, z);
        out(e, ", ");
        arr(e, "limit_indices", ti.nd, ti.sz);
        out(e, ", ");
        arr(e, "strides", ti.nd, one);
        out(e, "} : (%s) -> %s\n", ts(e, tsrc), ts(e, tyd(ti, tsrc.dt)));
        src = sl;
      }
    }
    r = torch_scatter_add(e, x, tx, idx, ti, src, n->dim);
    break;
  }
  case TPUIR_CONVOLUTION: {
    int nsp = n->na;
    static const char sp[3] = {'0', '1', '2'};
    char dn[64];
    size_t k = (size_t)snprintf(dn, sizeof dn, "[b, f");
    for (int i = 0; i < nsp; i++) k += (size_t)snprintf(dn + k, sizeof dn - k, ", %c", sp[i]);
    snprintf(dn + k, sizeof dn - k, "]");
    char kn[64];
    k = (size_t)snprintf(kn, sizeof kn, "[o, i");
    for (int i = 0; i < nsp; i++) k += (size_t)snprintf(kn + k, sizeof kn - k, ", %c", sp[i]);
    snprintf(kn + k, sizeof kn - k, "]");
    static const char *prec[] = {"DEFAULT", "HIGH", "HIGHEST", "HIGHEST"};
    const char *p = prec[(n->kind >= 0 && n->kind <= 3) ? n->kind : 0];
    ty tw = tyof(e, n->in[1]);
    r = fresh(e);
    out(e, "    %s = \"stablehlo.convolution\"(%s, %s) {batch_group_count = 1 : i64, "
           "dimension_numbers = #stablehlo.conv<%sx%s->%s>, feature_group_count = %d : i64, ",
        r.s, x.s, N(e, n->in[1]).s, dn, kn, dn, n->dim);
    arr(e, "lhs_dilation", nsp, n->d);
    out(e, ", ");
    padding_attr(e, nsp, n->b, n->c);
    out(e, ", precision_config = [#stablehlo<precision %s>, #stablehlo<precision %s>], ", p, p);
    arr(e, "rhs_dilation", nsp, n->d + 8);
    out(e, ", ");
    arr(e, "window_strides", nsp, n->a);
    out(e, "} : (%s, %s) -> %s\n", ts(e, tx), ts(e, tw), ts(e, tr));
    break;
  }
  case TPUIR_REDUCE_WINDOW:
    r = reduce_window(e, n, x, tx, tr);
    break;
  case TPUIR_WINDOW_ARGMAX:
    r = window_argmax(e, n, x, tx, tr);
    break;
  case TPUIR_SORT:
    r = sort_op(e, n, x, tx, tr);
    break;
  case TPUIR_REAL: case TPUIR_IMAG:
    if (!tpu_dtype_is_complex(tx.dt)) {
      r = n->op == TPUIR_REAL ? x : cst(e, tr, 0, 0);
      break;
    }
    r = un(e, n->op == TPUIR_REAL ? "stablehlo.real" : "stablehlo.imag", x, tx, tr);
    break;
  case TPUIR_COMPLEX:
    r = bin(e, "stablehlo.complex", x, N(e, n->in[1]), tx, tr);
    break;
  case TPUIR_CONJ:
    if (!tpu_dtype_is_complex(tx.dt)) {
      r = x;
      break;
    } else {
      int pd = tpu_dtype_complex_part(tx.dt);
      nm re = un(e, "stablehlo.real", x, tx, tyd(tx, pd)), im = un(e, "stablehlo.imag", x, tx, tyd(tx, pd));
      im = un(e, "stablehlo.negate", im, tyd(tx, pd), tyd(tx, pd));
      r = bin(e, "stablehlo.complex", re, im, tyd(tx, pd), tr);
    }
    break;
  case TPUIR_FFT: {
    static const char *ft[] = {"FFT", "IFFT", "RFFT", "IRFFT"};
    if (n->kind < 0 || n->kind > 3) goto bad;
    r = fresh(e);
    out(e, "    %s = \"stablehlo.fft\"(%s) {", r.s, x.s);
    arr(e, "fft_length", n->na, n->a);
    out(e, ", fft_type = #stablehlo<fft_type %s>} : (%s) -> %s\n", ft[n->kind], ts(e, tx), ts(e, tr));
    break;
  }
  case TPUIR_CHOLESKY: {
    int lower = n->kind & 1, nn = (int)tx.sz[tx.nd - 1];
    nm L = fresh(e);
    out(e, "    %s = \"stablehlo.cholesky\"(%s) {lower = %s} : (%s) -> %s\n", L.s, x.s,
        lower ? "true" : "false", ts(e, tx), ts(e, tx));
    /* XLA leaves the other triangle unspecified: zero it */
    ty ti = tyd(tx, TPU_I64);
    nm ri = iota(e, ti, tx.nd - 2), ci = iota(e, ti, tx.nd - 1);
    nm keep = cmp(e, lower ? "GE" : "LE", ri, ci, ti);
    nm z = cst(e, tx, 0, 0);
    if (n->dim == TPUIR_CHOL_FACTOR) {
      r = sel(e, keep, L, z, tx);
      break;
    }
    if (n->dim != TPUIR_CHOL_INFO) goto bad;
    /* info: 1 + the first column whose diagonal entry is not a positive
     * number (XLA's factor turns NaN from the failing column on), or 0 */
    nm diag = cmp(e, "EQ", ri, ci, ti);
    nm dv = sel(e, diag, L, z, tx);
    int64_t last = tx.nd - 1;
    ty tb = tx;
    tb.nd = tx.nd - 1; /* [..., n] */
    nm d = reduce1(e, dv, tx, TPUIR_RED_SUM, 1, &last, tb);
    nm zb = cst(e, tb, 0, 0);
    nm pos = cmp(e, "GT", d, zb, tb); /* false for NaN and <= 0 */
    ty tbb = tyd(tb, TPU_BOOL);
    nm badc = un(e, "stablehlo.not", pos, tbb, tbb);
    ty tbi = tyd(tb, TPU_I64);
    nm k1 = iota(e, tbi, tb.nd - 1);
    nm one = cst(e, tbi, 1, 1), big = cst(e, tbi, 0, INT64_MAX);
    k1 = bin(e, "stablehlo.add", k1, one, tbi, tbi);
    nm cand = sel(e, badc, k1, big, tbi);
    ty tinfo = tyd(tr, TPU_I64);
    int64_t last2 = tb.nd - 1;
    nm mn = reduce1(e, cand, tbi, TPUIR_RED_MIN, 1, &last2, tinfo);
    nm bigr = cst(e, tinfo, 0, INT64_MAX), zr = cst(e, tinfo, 0, 0);
    nm none = cmp(e, "EQ", mn, bigr, tinfo);
    nm info = sel(e, none, zr, mn, tinfo);
    r = conv(e, info, tinfo, tr.dt);
    if (n->kind & TPUIR_CHOL_CHECK) {
      /* first failing batch element: min of b * (n + 1) + info over info != 0 */
      nm code = info;
      if (tinfo.nd > 0) {
        nm flat = cst(e, tinfo, 0, 0);
        int64_t stride = 1;
        for (int dd = tinfo.nd - 1; dd >= 0; dd--) {
          nm io = iota(e, tinfo, dd), st = cst(e, tinfo, 0, stride);
          io = bin(e, "stablehlo.multiply", io, st, tinfo, tinfo);
          flat = bin(e, "stablehlo.add", flat, io, tinfo, tinfo);
          stride *= tinfo.sz[dd];
        }
        nm np1 = cst(e, tinfo, 0, nn + 1);
        flat = bin(e, "stablehlo.multiply", flat, np1, tinfo, tinfo);
        code = bin(e, "stablehlo.add", flat, info, tinfo, tinfo);
      }
      nm failed = cmp(e, "NE", info, zr, tinfo);
      nm cv = sel(e, failed, code, bigr, tinfo);
      if (tinfo.nd > 0) {
        int64_t dims[TPU_MAX_DIMS];
        for (int dd = 0; dd < tinfo.nd; dd++) dims[dd] = dd;
        cv = reduce1(e, cv, tinfo, TPUIR_RED_MIN, tinfo.nd, dims, scalar(TPU_I64));
      }
      ty s64 = scalar(TPU_I64);
      nm bs = cst(e, s64, 0, INT64_MAX), lo = cst(e, s64, 0, INT64_MIN);
      nm ok = cmp(e, "EQ", cv, bs, s64);
      add_check(e, TPUX_CHECK_CHOLESKY, tinfo.nd > 0, nn, sel(e, ok, lo, cv, s64));
    }
    break;
  }
  case TPUIR_TRIANGULAR_SOLVE: {
    int k = n->kind;
    r = fresh(e);
    out(e, "    %s = \"stablehlo.triangular_solve\"(%s, %s) {left_side = %s, lower = %s, "
           "transpose_a = #stablehlo<transpose %s>, unit_diagonal = %s} : (%s, %s) -> %s\n",
        r.s, x.s, N(e, n->in[1]).s, (k & 1) ? "true" : "false", (k & 2) ? "true" : "false",
        (k & 8) ? "TRANSPOSE" : "NO_TRANSPOSE", (k & 4) ? "true" : "false", ts(e, tx),
        ts(e, tyof(e, n->in[1])), ts(e, tr));
    break;
  }
  case TPUIR_XLOG1PY: {
    nm b = N(e, n->in[1]);
    nm z = cst(e, tx, 0, 0);
    nm l = un(e, "stablehlo.log_plus_one", b, tx, tx);
    nm m = bin(e, "stablehlo.multiply", x, l, tx, tx);
    nm az = cmp(e, "EQ", x, z, tx), bn = cmp(e, "NE", b, b, tx);
    ty tb = tyd(tx, TPU_BOOL);
    nm nb = un(e, "stablehlo.not", bn, tb, tb);
    nm c = bin(e, "stablehlo.and", az, nb, tb, tb);
    r = sel(e, c, z, m, tr);
    break;
  }
  case TPUIR_I1: case TPUIR_MBESSEL_I1: case TPUIR_I1E: {
    if (!tpu_dtype_is_float(tx.dt)) goto bad;
    r = un(e, "chlo.bessel_i1e", x, tx, tr);
    if (n->op != TPUIR_I1E) {
      nm a = un(e, "stablehlo.abs", x, tx, tx);
      nm ex = un(e, "stablehlo.exponential", a, tx, tx);
      r = bin(e, "stablehlo.multiply", r, ex, tx, tr);
    }
    break;
  }
  case TPUIR_NDTRI: { /* sqrt(2) erfinv(2p - 1) */
    if (!tpu_dtype_is_float(tx.dt)) goto bad;
    nm two = cst(e, tx, 2, 2), one = cst(e, tx, 1, 1), s2 = cst(e, tx, 1.4142135623730951, 0);
    nm t = bin(e, "stablehlo.multiply", x, two, tx, tx);
    t = bin(e, "stablehlo.subtract", t, one, tx, tx);
    t = un(e, "chlo.erf_inv", t, tx, tx);
    r = bin(e, "stablehlo.multiply", t, s2, tx, tr);
    break;
  }
  case TPUIR_LOG_NDTR: { /* log(erfc(-x / sqrt 2) / 2) */
    if (!tpu_dtype_is_float(tx.dt)) goto bad;
    nm k = cst(e, tx, -0.7071067811865476, 0), h = cst(e, tx, 0.5, 0);
    nm t = bin(e, "stablehlo.multiply", x, k, tx, tx);
    t = un(e, "chlo.erfc", t, tx, tx);
    t = bin(e, "stablehlo.multiply", t, h, tx, tx);
    r = un(e, "stablehlo.log", t, tx, tr);
    break;
  }
  case TPUIR_ERFCX: { /* exp(x^2) erfc(x) */
    if (!tpu_dtype_is_float(tx.dt)) goto bad;
    nm sq = bin(e, "stablehlo.multiply", x, x, tx, tx);
    nm ex = un(e, "stablehlo.exponential", sq, tx, tx);
    nm ec = un(e, "chlo.erfc", x, tx, tx);
    r = bin(e, "stablehlo.multiply", ex, ec, tx, tr);
    break;
  }
  case TPUIR_SPH_BESSEL_J0: { /* sin(x) / x, 1 at 0 */
    if (!tpu_dtype_is_float(tx.dt)) goto bad;
    nm z = cst(e, tx, 0, 0), one = cst(e, tx, 1, 1);
    nm sn = un(e, "stablehlo.sine", x, tx, tx);
    nm q = bin(e, "stablehlo.divide", sn, x, tx, tx);
    nm iz = cmp(e, "EQ", x, z, tx);
    r = sel(e, iz, one, q, tr);
    break;
  }
  case TPUIR_FREXP_MANT: case TPUIR_FREXP_EXP: {
    if (!tpu_dtype_is_float(tx.dt)) goto bad;
    int d64 = tx.dt == TPU_F64, wdt = d64 ? TPU_F64 : TPU_F32, idt = d64 ? TPU_I64 : TPU_I32;
    int mb = d64 ? 52 : 23;
    int64_t emask = d64 ? 0x7ff : 0xff, bias = d64 ? 1022 : 126;
    int64_t keep = d64 ? (int64_t)0x800fffffffffffffULL : (int64_t)0x807fffff;
    int64_t half = d64 ? 0x3fe0000000000000LL : 0x3f000000;
    ty tw = tyd(tx, wdt), tI = tyd(tx, idt), tb = tyd(tx, TPU_BOOL);
    nm w = conv(e, x, tx, wdt);
    /* subnormals: scale by 2^64 first */
    nm zero = cst(e, tw, 0, 0), scale = cst(e, tw, 18446744073709551616.0, 0);
    nm a = un(e, "stablehlo.abs", w, tw, tw), tiny = cst(e, tw, d64 ? 2.2250738585072014e-308 : 1.17549435e-38, 0);
    nm sub = cmp(e, "LT", a, tiny, tw), nz = cmp(e, "NE", w, zero, tw);
    sub = bin(e, "stablehlo.and", sub, nz, tb, tb);
    nm ws = bin(e, "stablehlo.multiply", w, scale, tw, tw);
    w = sel(e, sub, ws, w, tw);
    nm bits = un(e, "stablehlo.bitcast_convert", w, tw, tI);
    nm sh = cst(e, tI, 0, mb), em = cst(e, tI, 0, emask), bi = cst(e, tI, 0, bias);
    nm ef = bin(e, "stablehlo.shift_right_logical", bits, sh, tI, tI);
    ef = bin(e, "stablehlo.and", ef, em, tI, tI);
    nm ex = bin(e, "stablehlo.subtract", ef, bi, tI, tI);
    nm s64 = cst(e, tI, 0, 64), zi = cst(e, tI, 0, 0);
    nm exs = bin(e, "stablehlo.subtract", ex, s64, tI, tI);
    ex = sel(e, sub, exs, ex, tI);
    nm fin = un(e, "stablehlo.is_finite", x, tx, tb);
    nm special = un(e, "stablehlo.not", fin, tb, tb);
    nm isz = cmp(e, "EQ", x, cst(e, tx, 0, 0), tx);
    special = bin(e, "stablehlo.or", special, isz, tb, tb);
    if (n->op == TPUIR_FREXP_EXP) {
      ex = sel(e, special, zi, ex, tI);
      r = conv(e, ex, tI, tr.dt);
    } else {
      nm km = cst(e, tI, 0, keep), hf = cst(e, tI, 0, half);
      nm mbits = bin(e, "stablehlo.and", bits, km, tI, tI);
      mbits = bin(e, "stablehlo.or", mbits, hf, tI, tI);
      nm m = un(e, "stablehlo.bitcast_convert", mbits, tI, tw);
      m = conv(e, m, tw, tx.dt);
      r = sel(e, special, x, m, tr);
    }
    break;
  }
  case TPUIR_SINC: {
    nm z = cst(e, tx, 0, 0), one = cst(e, tx, 1, 1), pi = cst(e, tx, 3.14159265358979323846, 0);
    nm px = bin(e, "stablehlo.multiply", x, pi, tx, tx);
    nm s = un(e, "stablehlo.sine", px, tx, tx);
    nm q = bin(e, "stablehlo.divide", s, px, tx, tx);
    nm iz = cmp(e, "EQ", x, z, tx);
    r = sel(e, iz, one, q, tr);
    break;
  }
  case TPUIR_ENTR: {
    nm z = cst(e, tx, 0, 0), ninf = cst(e, tx, -INFINITY, 0);
    nm l = un(e, "stablehlo.log", x, tx, tx);
    nm m = bin(e, "stablehlo.multiply", x, l, tx, tx);
    m = un(e, "stablehlo.negate", m, tx, tx);
    nm gt = cmp(e, "GT", x, z, tx), eq = cmp(e, "EQ", x, z, tx), lt = cmp(e, "LT", x, z, tx);
    r = sel(e, gt, m, x, tr); /* NaN stays NaN */
    r = sel(e, eq, z, r, tr);
    r = sel(e, lt, ninf, r, tr);
    break;
  }
  default:
    if (n->nin == 1 && (op = unary_name(n->op)) && tpuir_op_info(n->op)->cls == TPUIR_CLASS_UNARY) {
      if (n->op == TPUIR_NOT && tx.dt != TPU_BOOL && !tpu_dtype_is_int(tx.dt)) goto bad;
      if (n->op != TPUIR_NOT && !tpu_dtype_is_float(tx.dt) && !tpu_dtype_is_complex(tx.dt)) goto bad;
      r = un(e, op, x, tx, tr);
      break;
    }
    if (n->nin == 2 && (tpuir_op_info(n->op)->cls == TPUIR_CLASS_BINARY || n->op == TPUIR_ZETA || n->op == TPUIR_NEXTAFTER) &&
        (op = binary_name(n->op, tx.dt))) {
      if (tpu_dtype_is_complex(tx.dt) && n->op != TPUIR_ADD && n->op != TPUIR_SUB &&
          n->op != TPUIR_MUL && n->op != TPUIR_DIV && n->op != TPUIR_POW)
        goto bad;
      r = bin(e, op, x, N(e, n->in[1]), tx, tr);
      if (tpu_dtype_is_int(tx.dt) &&
          (n->op == TPUIR_DIV || n->op == TPUIR_REM || n->op == TPUIR_POW)) {
        nm y = N(e, n->in[1]), z = cst(e, tx, 0, 0);
        int pw = n->op == TPUIR_POW;
        nm bad = cmp(e, pw ? "LT" : "EQ", y, z, tx);
        add_check(e, pw ? TPUX_CHECK_NEG_POW : TPUX_CHECK_DIV_ZERO, 0, 0, bad_value(e, bad, y, tx));
      }
      break;
    }
    goto bad;
  }
  *res = r;
  return 0;
bad:
  e->bad_op = n->op;
  return -1;
}

int tpux_emit_stablehlo(const tpuir_graph *g, char **text, size_t *len) {
  tpux__check *c = NULL;
  int nc = 0;
  int rc = tpux__emit_stablehlo(g, NULL, text, len, &c, &nc);
  free(c);
  return rc;
}

/* The function body is emitted first (into a separate buffer), because the
 * checks it collects are results of @main too. */
int tpux__emit_stablehlo(const tpuir_graph *g, int *alias, char **text, size_t *len,
                         tpux__check **checks, int *nchecks) {
  if (!g || !text || !checks || !nchecks)
    return tpu_error(TPU_E_INVALID, "tpux_emit_stablehlo: NULL argument");
  *text = NULL;
  *checks = NULL;
  *nchecks = 0;
  int nn = tpuir_num_nodes(g), np = tpuir_num_params(g), no = tpuir_num_outputs(g);
  if (no <= 0) return tpu_error(TPU_E_INVALID, "tpux_emit_stablehlo: graph has no outputs");
  em e = {.g = g, .bad_op = -1}, h = {.g = g, .bad_op = -1};
  e.cap = 4096;
  e.p = malloc(e.cap);
  char *live = calloc((size_t)nn + 1, 1);
  tpuir_val *params = malloc(sizeof(tpuir_val) * (size_t)(np + 1));
  nm *names = malloc(sizeof(nm) * (size_t)(nn + 1));
  int rc = TPU_OK;
  if (!e.p || !live || !params || !names) {
    rc = tpu_error(TPU_E_OOM, "tpux_emit_stablehlo: out of host memory");
    goto done;
  }
  e.p[0] = 0;
  e.names = names;
  /* liveness: operands precede their users */
  for (int i = 0; i < no; i++) live[tpuir_output(g, i)] = 1;
  for (int v = nn - 1; v >= 0; v--) {
    if (!live[v]) continue;
    const tpuir_node *n = tpuir_get_node(g, v);
    if (n->nlist) /* CONCAT, CUSTOM_CALL */
      for (int i = 0; i < n->nlist; i++) live[n->list[i]] = 1;
    else
      for (int i = 0; i < n->nin; i++) live[n->in[i]] = 1;
  }
  for (int v = 0; v < nn; v++) {
    const tpuir_node *n = tpuir_get_node(g, v);
    if (n->op == TPUIR_PARAM && n->dim >= 0 && n->dim < np) params[n->dim] = v;
  }
  for (int v = 0; v < nn; v++) {
    const tpuir_node *n = tpuir_get_node(g, v);
    if (n->op == TPUIR_PARAM) {
      names[v] = V(v);
      continue;
    }
    if (!live[v]) continue;
    nm r;
    if (node(&e, v, &r) < 0) {
      if (e.bad_op == TPUIR_CUSTOM_CALL) { /* a user C kernel: vTPU only */
        const char *kn = tpux_kernel_name((uint64_t)n->a[0]);
        rc = tpu_error(TPU_E_UNSUPPORTED, "unsupported on PJRT: C kernel '%s' (user C kernels "
                       "run on the vTPU executor only)", kn ? kn : "?");
        goto done;
      }
      rc = tpu_error(TPU_E_UNSUPPORTED, "unsupported on PJRT: %s", tpuir_op_name(e.bad_op));
      goto done;
    }
    names[v] = r;
  }
  /* header (arguments, result types: outputs then checks) + body + return */
  h.cap = 1024 + e.n;
  h.p = malloc(h.cap);
  if (!h.p) {
    rc = tpu_error(TPU_E_OOM, "tpux_emit_stablehlo: out of host memory");
    goto done;
  }
  h.p[0] = 0;
  /* donation (tf.aliasing_output): not with checks, which must raise
   * before any output is written */
  for (int i = 0; alias && i < no; i++) {
    int k = alias[i];
    if (e.nchk || k >= np || k < -2) alias[i] = -1;
    if (alias[i] < 0) continue;
    ty tp = tyof(&h, params[k]), to = tyof(&h, tpuir_output(g, i));
    int same = tp.dt == to.dt && tp.nd == to.nd &&
               !memcmp(tp.sz, to.sz, sizeof(int64_t) * (size_t)tp.nd);
    for (int j = 0; j < i; j++) same &= alias[j] != k; /* one output per donated input */
    if (!same) alias[i] = -1;
  }
  out(&h, "module @tpu_program {\n  func.func public @main(");
  for (int k = 0; k < np; k++) {
    out(&h, "%s%s: %s", k ? ", " : "", V(params[k]).s, ts(&h, tyof(&h, params[k])));
    for (int i = 0; alias && i < no; i++)
      if (alias[i] == k) {
        out(&h, " {tf.aliasing_output = %d : i32}", i);
        break;
      }
  }
  for (int i = 0, nd = 0; alias && i < no; i++)
    if (alias[i] == -2)
      out(&h, "%s%%dst%d: %s {tf.aliasing_output = %d : i32}", np + nd++ ? ", " : "", i,
          ts(&h, tyof(&h, tpuir_output(g, i))), i);
  out(&h, ") -> (");
  for (int i = 0; i < no + e.nchk; i++) {
    const char *t = i < no ? ts(&h, tyof(&h, tpuir_output(g, i))) : "tensor<i64>";
    out(&h, "%s%s", i ? ", " : "", t);
  }
  out(&h, ") {\n%s    func.return ", e.oom ? "" : e.p);
  for (int i = 0; i < no + e.nchk; i++)
    out(&h, "%s%s", i ? ", " : "", i < no ? names[tpuir_output(g, i)].s : e.chk_val[i - no].s);
  out(&h, " : ");
  for (int i = 0; i < no + e.nchk; i++) {
    const char *t = i < no ? ts(&h, tyof(&h, tpuir_output(g, i))) : "tensor<i64>";
    out(&h, "%s%s", i ? ", " : "", t);
  }
  out(&h, "\n  }\n}\n");
  if (e.oom || h.oom) {
    rc = tpu_error(TPU_E_OOM, "tpux_emit_stablehlo: out of host memory");
    goto done;
  }
  *text = h.p;
  if (len) *len = h.n;
  h.p = NULL;
  *checks = e.chk;
  *nchecks = e.nchk;
  e.chk = NULL;
done:
  free(h.p);
  free(e.chk);
  free(e.chk_val);
  free(e.p);
  free(live);
  free(params);
  free(names);
  return rc;
}

/* ir/ir.c - functional graph IR (prefix tpuir_): builder, shape/dtype
 * inference and validation, outputs, inspection, dump and hash.
 *
 * A graph is a growing array of nodes; node k defines value k. Every builder
 * zero-initialises its node, infers the result dtype/shape, validates the
 * operands and appends the node. Errors return a negative tpu_status with the
 * message set by tpu_error(); a negative operand passed to a builder is
 * returned unchanged (so lowerings can chain calls and check once).
 *
 * Node attribute layout (tpuir_node; executors and printers rely on it):
 *   PARAM            dim = parameter index
 *   CONST            fval and ival both set (const_f: ival = (int64)v
 *                    truncated/saturated, NaN -> 0, bool: v != 0;
 *                    const_i: fval = (double)v, bool: v != 0)
 *   IOTA             dim
 *   RNG              kind (tpuir_rng_kind), seed, offset
 *   unary / binary   in[0], in[1]
 *   SELECT           in = {pred, on_true, on_false}
 *   CONVERT          dtype = result dtype
 *   BROADCAST_IN_DIM a = dims (na = operand rank)
 *   RESHAPE          (sizes only)
 *   TRANSPOSE        a = perm (na = rank)
 *   SLICE            a = start, b = limit, c = stride (na = rank)
 *   CONCAT           list/nlist (owned by the graph), dim; in[0..] = first
 *                    up to 4 operands as well
 *   PAD              in = {x, padval}, a = lo, b = hi, c = interior (na)
 *   REVERSE          a = dims, na
 *   REDUCE           kind (tpuir_reduce_kind), a = dims, na
 *   ARGREDUCE        kind (RED_MAX / RED_MIN), dim
 *   DOT_GENERAL      a = lhs_batch, b = rhs_batch (na = nbatch),
 *                    c = lhs_contract, d = rhs_contract (nb = ncontract),
 *                    kind = precision
 *   GATHER, INDEX_SELECT        in = {x, idx}, dim
 *   SCATTER_ADD, INDEX_ADD      in = {base, idx, src}, dim
 */
#include "tpu_ir.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/internal.h"

struct tpuir_graph {
  tpuir_node *nodes;
  int32_t n, cap;
  int32_t nparams;
  tpuir_val *outs;
  int32_t nouts;
  /* structural hashes kept by tpuir_hash_keep (bit f: flags f of
   * tpuir_hash, f = 0 or TPUIR_HASH_LOOP); any change clears them */
  uint32_t memo_ok;
  uint64_t memo[4][2];
};

/* tpuir_hash's kept result for flags, NULL if none (ir/hash.c) */
const uint64_t *tpuir__hash_memo(const tpuir_graph *g, unsigned flags) {
  return flags < 4 && ((g->memo_ok >> flags) & 1u) ? g->memo[flags] : NULL;
}

void tpuir_hash_keep(tpuir_graph *g) {
  g->memo_ok = 0;
  tpuir_hash(g, 0, g->memo[0]);
  tpuir_hash(g, TPUIR_HASH_LOOP, g->memo[TPUIR_HASH_LOOP]);
  g->memo_ok = 1u | (1u << TPUIR_HASH_LOOP);
}

/* ---- graph lifetime --------------------------------------------------- */

/* Create an empty graph; caller owns it (tpuir_graph_free). */
tpuir_graph *tpuir_graph_new(void) {
  return calloc(1, sizeof(tpuir_graph));
}

/* Free a graph and everything it owns (NULL is a no-op). */
void tpuir_graph_free(tpuir_graph *g) {
  if (!g) return;
  for (int32_t i = 0; i < g->n; i++) free(g->nodes[i].list);
  free(g->nodes);
  free(g->outs);
  free(g);
}

/* ---- op names ---------------------------------------------------------- */

static const tpuir_op_info_t k_ops[TPUIR_NUM_OPS] = {
#define OP_INFO_(id, name, arity, cls, fails, attrs) \
  [TPUIR_##id] = {name, arity, TPUIR_CLASS_##cls, TPUIR_FAILS_##fails},
    TPUIR_OPS(OP_INFO_)
#undef OP_INFO_
};

const tpuir_op_info_t *tpuir_op_info(int op) {
  return (op >= 0 && op < TPUIR_NUM_OPS) ? &k_ops[op] : NULL;
}

const char *tpuir_op_name(int op) {
  return (op >= 0 && op < TPUIR_NUM_OPS) ? k_ops[op].name : "?";
}

int tpuir_op_is_elementwise(int op) {
  if (op < 0 || op >= TPUIR_NUM_OPS) return 0;
  switch ((tpuir_op_class)k_ops[op].cls) {
  case TPUIR_CLASS_UNARY: case TPUIR_CLASS_PREDICATE: case TPUIR_CLASS_BINARY:
  case TPUIR_CLASS_COMPARE: case TPUIR_CLASS_SELECT: case TPUIR_CLASS_CONVERT:
  case TPUIR_CLASS_SPECIAL1: case TPUIR_CLASS_SPECIAL2:
    return 1;
  default: return 0;
  }
}

int tpuir_node_can_fail(const tpuir_graph *g, tpuir_val v) {
  const tpuir_node *n = tpuir_get_node(g, v);
  if (!n) return 0;
  switch ((tpuir_fails)k_ops[n->op].fails) {
  case TPUIR_FAILS_NEVER: return 0;
  case TPUIR_FAILS_ALWAYS: return 1;
  case TPUIR_FAILS_DEPENDS: break;
  }
  switch (n->op) {
  case TPUIR_DIV: case TPUIR_REM: case TPUIR_POW: {
    int dt = g->nodes[n->in[0]].dtype;
    return !tpu_dtype_is_float(dt) && !tpu_dtype_is_complex(dt);
  }
  case TPUIR_CHOLESKY: return (n->kind & TPUIR_CHOL_CHECK) != 0;
  case TPUIR_EIGH: case TPUIR_SVD: return n->a[0] != 0; /* check_nan */
  default: return 1; /* DEPENDS without a rule: assume it may fail */
  }
}

static const char *short_dtype(int dt) {
  static const char *const k[TPU_NUM_DTYPES] = {
      "i1", "u8", "i8", "i16", "i32", "i64", "f16", "bf16", "f32", "f64",
      "c64", "c128"};
  return (dt >= 0 && dt < TPU_NUM_DTYPES) ? k[dt] : "?";
}

const char *tpuir__reduce_kind_name(int k) {
  static const char *const names[] = {"sum", "prod", "max", "min", "and", "or"};
  return (k >= 0 && k <= TPUIR_RED_OR) ? names[k] : "?";
}

const char *tpuir__rng_kind_name(int k) {
  static const char *const names[] = {"uniform", "normal", "bits"};
  return (k >= 0 && k <= TPUIR_RNG_BITS) ? names[k] : "?";
}

/* "f32[4,8]" into buf (always NUL-terminated); see ir/internal.h. */
void tpuir__type_str(char *buf, size_t cap, int dtype, int ndim,
                     const int64_t *sizes) {
  size_t p = (size_t)snprintf(buf, cap, "%s[", short_dtype(dtype));
  for (int i = 0; i < ndim && p < cap; i++)
    p += (size_t)snprintf(buf + p, cap - p, i ? ",%lld" : "%lld",
                          (long long)sizes[i]);
  if (p < cap) snprintf(buf + p, cap - p, "]");
}

/* ---- node allocation and operand checks -------------------------------- */

static tpuir_node *new_node(tpuir_graph *g, int op) {
  if (g->n == g->cap) {
    int32_t nc = g->cap ? g->cap * 2 : 16;
    tpuir_node *nn = realloc(g->nodes, (size_t)nc * sizeof(tpuir_node));
    if (!nn) return NULL;
    g->nodes = nn;
    g->cap = nc;
  }
  tpuir_node *nd = &g->nodes[g->n];
  memset(nd, 0, sizeof *nd);
  nd->op = op;
  return nd;
}

/* Commit the node most recently returned by new_node (its operand count
 * must be the op's arity in TPUIR_OPS: a builder bug otherwise). */
static tpuir_val commit(tpuir_graph *g) {
  const tpuir_node *n = &g->nodes[g->n];
  int arity = k_ops[n->op].arity;
  if (arity >= 0   ? n->nin != arity
      : arity == -2 ? n->nin > 1
                    : n->nin != (n->nlist < 4 ? n->nlist : 4))
    return tpu_error(TPU_E_INTERNAL, "IR builder bug: %s has %d operands, TPUIR_OPS says %d",
                     k_ops[n->op].name, (int)n->nin, arity);
  g->memo_ok = 0;
  return g->n++;
}

/* Hooks for the builders in ir/conv.c (see ir/internal.h). */
tpuir_node *tpuir__new_node(tpuir_graph *g, int op) { return new_node(g, op); }
tpuir_val tpuir__commit(tpuir_graph *g) { return commit(g); }

static int dtype_ok(int dt) { return dt >= 0 && dt < TPU_NUM_DTYPES; }

/* Validate operand v; returns 0 or a negative status (v itself if v < 0). */
static int check_val(const tpuir_graph *g, tpuir_val v, const char *what) {
  if (v < 0) return v;
  if (v >= g->n)
    return tpu_error(TPU_E_INVALID, "%s: value %%%d is not defined in this graph",
                     what, (int)v);
  return TPU_OK;
}

static const tpuir_node *val(const tpuir_graph *g, tpuir_val v) {
  return &g->nodes[v];
}

int tpuir__operand(const tpuir_graph *g, tpuir_val v, const char *what,
                   const tpuir_node **out) {
  int rc = check_val(g, v, what);
  if (rc == TPU_OK && out) *out = val(g, v);
  return rc;
}

static int check_sizes(const char *what, int ndim, const int64_t *sizes) {
  if (ndim < 0 || ndim > TPU_MAX_DIMS)
    return tpu_error(TPU_E_INVALID, "%s: rank %d is out of range [0, %d]", what,
                     ndim, TPU_MAX_DIMS);
  if (ndim > 0 && !sizes)
    return tpu_error(TPU_E_INVALID, "%s: sizes is NULL", what);
  for (int i = 0; i < ndim; i++)
    if (sizes[i] < 0)
      return tpu_error(TPU_E_INVALID, "%s: negative size %lld at dim %d", what,
                       (long long)sizes[i], i);
  return TPU_OK;
}

static int same_shape(const tpuir_node *a, const tpuir_node *b) {
  if (a->ndim != b->ndim) return 0;
  for (int i = 0; i < a->ndim; i++)
    if (a->sizes[i] != b->sizes[i]) return 0;
  return 1;
}

static int64_t numel_of(const tpuir_node *n) {
  int64_t e = 1;
  for (int i = 0; i < n->ndim; i++) e *= n->sizes[i];
  return e;
}

static int shape_mismatch(const char *what, const tpuir_node *a,
                          const tpuir_node *b, int code, const char *kind) {
  char sa[160], sb[160];
  tpuir__type_str(sa, sizeof sa, a->dtype, a->ndim, a->sizes);
  tpuir__type_str(sb, sizeof sb, b->dtype, b->ndim, b->sizes);
  return tpu_error(code, "%s: operands must have the same %s, got %s and %s",
                   what, kind, sa, sb);
}

/* Checks that `dims` (n entries) are distinct and in [0, rank). */
static int check_dims(const char *what, int n, const int64_t *dims, int rank) {
  if (n < 0 || n > TPU_MAX_DIMS)
    return tpu_error(TPU_E_INVALID, "%s: %d dims is out of range", what, n);
  if (n > 0 && !dims) return tpu_error(TPU_E_INVALID, "%s: dims is NULL", what);
  uint32_t seen = 0;
  for (int i = 0; i < n; i++) {
    if (dims[i] < 0 || dims[i] >= rank)
      return tpu_error(TPU_E_INDEX,
                       "%s: dimension %lld out of range (expected to be in "
                       "range of [0, %d))",
                       what, (long long)dims[i], rank);
    if (seen & (1u << dims[i]))
      return tpu_error(TPU_E_INVALID, "%s: dim %lld appears multiple times",
                       what, (long long)dims[i]);
    seen |= 1u << dims[i];
  }
  return TPU_OK;
}

static void copy_shape(tpuir_node *nd, int dtype, int ndim,
                       const int64_t *sizes) {
  nd->dtype = dtype;
  nd->ndim = ndim;
  for (int i = 0; i < ndim; i++) nd->sizes[i] = sizes[i];
}

/* ---- leaves ------------------------------------------------------------ */

/* Parameter number k (k = count of earlier params). */
tpuir_val tpuir_param(tpuir_graph *g, int dtype, int ndim,
                      const int64_t *sizes) {
  if (!dtype_ok(dtype))
    return tpu_error(TPU_E_TYPE, "param: invalid dtype %d", dtype);
  int rc = check_sizes("param", ndim, sizes);
  if (rc) return rc;
  tpuir_node *nd = new_node(g, TPUIR_PARAM);
  if (!nd) return tpu_error(TPU_E_OOM, "param: out of host memory");
  copy_shape(nd, dtype, ndim, sizes);
  nd->dim = g->nparams++;
  return commit(g);
}

/* Rank-0 constant from a double (see layout comment for ival). */
tpuir_val tpuir_const_f(tpuir_graph *g, int dtype, double v) {
  if (tpu_dtype_is_complex(dtype))
    return tpu_error(TPU_E_TYPE, "constant: no complex constants (use tpuir_complex)");
  if (!dtype_ok(dtype))
    return tpu_error(TPU_E_TYPE, "constant: invalid dtype %d", dtype);
  tpuir_node *nd = new_node(g, TPUIR_CONST);
  if (!nd) return tpu_error(TPU_E_OOM, "constant: out of host memory");
  nd->dtype = dtype;
  if (dtype == TPU_BOOL) {
    nd->ival = v != 0; /* NaN -> true */
    nd->fval = (double)nd->ival;
  } else {
    nd->fval = v;
    if (isnan(v)) nd->ival = 0;
    else if (v >= 9223372036854775807.0) nd->ival = INT64_MAX;
    else if (v <= -9223372036854775808.0) nd->ival = INT64_MIN;
    else nd->ival = (int64_t)v;
  }
  return commit(g);
}

/* Rank-0 constant from an int64. */
tpuir_val tpuir_const_i(tpuir_graph *g, int dtype, int64_t v) {
  if (tpu_dtype_is_complex(dtype))
    return tpu_error(TPU_E_TYPE, "constant: no complex constants (use tpuir_complex)");
  if (!dtype_ok(dtype))
    return tpu_error(TPU_E_TYPE, "constant: invalid dtype %d", dtype);
  tpuir_node *nd = new_node(g, TPUIR_CONST);
  if (!nd) return tpu_error(TPU_E_OOM, "constant: out of host memory");
  nd->dtype = dtype;
  nd->ival = dtype == TPU_BOOL ? (v != 0) : v;
  nd->fval = (double)nd->ival;
  return commit(g);
}

/* Array whose element at index i is i[dim]. */
tpuir_val tpuir_iota(tpuir_graph *g, int dtype, int ndim, const int64_t *sizes,
                     int dim) {
  if (!dtype_ok(dtype) || tpu_dtype_is_complex(dtype))
    return tpu_error(TPU_E_TYPE, "iota: invalid dtype %d", dtype);
  int rc = check_sizes("iota", ndim, sizes);
  if (rc) return rc;
  if (dim < 0 || dim >= ndim)
    return tpu_error(TPU_E_INDEX, "iota: dim %d out of range for rank %d", dim,
                     ndim);
  tpuir_node *nd = new_node(g, TPUIR_IOTA);
  if (!nd) return tpu_error(TPU_E_OOM, "iota: out of host memory");
  copy_shape(nd, dtype, ndim, sizes);
  nd->dim = dim;
  return commit(g);
}

/* Counter-based random numbers (Philox4x32-10); key >= 0: the seed and
 * offset come from that int64[2] value at run time. */
static tpuir_val rng_node(tpuir_graph *g, int kind, int dtype, int ndim, const int64_t *sizes,
                          uint64_t seed, uint64_t offset, tpuir_val key) {
  if (!dtype_ok(dtype))
    return tpu_error(TPU_E_TYPE, "rng: invalid dtype %d", dtype);
  if (kind < TPUIR_RNG_UNIFORM || kind > TPUIR_RNG_BITS)
    return tpu_error(TPU_E_INVALID, "rng: invalid kind %d", kind);
  if (kind == TPUIR_RNG_BITS ? !tpu_dtype_is_int(dtype)
                             : !tpu_dtype_is_float(dtype))
    return tpu_error(TPU_E_TYPE, "rng: %s needs %s dtype, got %s",
                     tpuir__rng_kind_name(kind),
                     kind == TPUIR_RNG_BITS ? "an integer" : "a floating point",
                     tpu_dtype_name(dtype));
  int rc = check_sizes("rng", ndim, sizes);
  if (rc) return rc;
  tpuir_node *nd = new_node(g, TPUIR_RNG);
  if (!nd) return tpu_error(TPU_E_OOM, "rng: out of host memory");
  copy_shape(nd, dtype, ndim, sizes);
  nd->kind = kind;
  nd->seed = seed;
  nd->offset = offset;
  nd->nin = key >= 0 ? 1 : 0;
  nd->in[0] = key >= 0 ? key : 0;
  return commit(g);
}

tpuir_val tpuir_rng(tpuir_graph *g, int kind, int dtype, int ndim,
                    const int64_t *sizes, uint64_t seed, uint64_t offset) {
  return rng_node(g, kind, dtype, ndim, sizes, seed, offset, -1);
}

tpuir_val tpuir_rng_dyn(tpuir_graph *g, int kind, int dtype, int ndim,
                        const int64_t *sizes, tpuir_val key) {
  int rc = check_val(g, key, "rng");
  if (rc) return rc;
  const tpuir_node *k = val(g, key);
  if (k->dtype != TPU_I64 || k->ndim != 1 || k->sizes[0] != 2)
    return tpu_error(TPU_E_TYPE, "rng: the key must be int64[2] (seed, offset)");
  return rng_node(g, kind, dtype, ndim, sizes, 0, 0, key);
}

/* ---- elementwise ------------------------------------------------------- */

static int is_unary(int op) {
  int c = op >= 0 && op < TPUIR_NUM_OPS ? k_ops[op].cls : -1;
  return c == TPUIR_CLASS_UNARY || c == TPUIR_CLASS_PREDICATE;
}
static int is_binary(int op) {
  int c = op >= 0 && op < TPUIR_NUM_OPS ? k_ops[op].cls : -1;
  return c == TPUIR_CLASS_BINARY || c == TPUIR_CLASS_COMPARE;
}

/* Unary elementwise op; see tpu_ir.h for result dtypes. */
tpuir_val tpuir_unary(tpuir_graph *g, int op, tpuir_val x) {
  if (!is_unary(op))
    return tpu_error(TPU_E_INVALID, "unary: op %d (%s) is not a unary op", op,
                     tpuir_op_name(op));
  const char *nm = tpuir_op_name(op);
  int rc = check_val(g, x, nm);
  if (rc) return rc;
  const tpuir_node *xn = val(g, x);
  int dt = xn->dtype, rdt = dt;
  if (tpu_dtype_is_complex(dt)) {
    switch (op) {
    case TPUIR_NEG: break;
    case TPUIR_ABS: rdt = tpu_dtype_complex_part(dt); break;
    case TPUIR_IS_FINITE: case TPUIR_IS_NAN: case TPUIR_IS_INF: rdt = TPU_BOOL; break;
    case TPUIR_EXP: case TPUIR_EXPM1: case TPUIR_LOG: case TPUIR_LOG1P:
    case TPUIR_SQRT: case TPUIR_RSQRT: case TPUIR_SIN: case TPUIR_COS:
    case TPUIR_TAN: case TPUIR_TANH: case TPUIR_SINH: case TPUIR_COSH:
    case TPUIR_ASIN: case TPUIR_ACOS: case TPUIR_ATAN: case TPUIR_ASINH:
    case TPUIR_ACOSH: case TPUIR_ATANH: case TPUIR_LOGISTIC:
      break;
    default:
      return tpu_error(TPU_E_TYPE, "%s: not supported for complex operands (%s)",
                       nm, tpu_dtype_name(dt));
    }
  } else
  switch (op) {
  case TPUIR_NEG:
    if (dt == TPU_BOOL)
      return tpu_error(TPU_E_TYPE,
                       "negate: negation, the `-` operator, on a bool tensor "
                       "is not supported");
    break;
  case TPUIR_ABS:
    if (dt == TPU_BOOL)
      return tpu_error(TPU_E_TYPE, "abs: not supported for bool tensors");
    break;
  case TPUIR_SIGN: case TPUIR_FLOOR: case TPUIR_CEIL: case TPUIR_ROUND_EVEN:
  case TPUIR_TRUNC:
    break;
  case TPUIR_NOT:
    if (tpu_dtype_is_float(dt))
      return tpu_error(TPU_E_TYPE,
                       "not: needs a bool or integer operand, got %s",
                       tpu_dtype_name(dt));
    break;
  case TPUIR_IS_FINITE: case TPUIR_IS_NAN: case TPUIR_IS_INF:
    rdt = TPU_BOOL;
    break;
  default: /* transcendental: float only */
    if (!tpu_dtype_is_float(dt))
      return tpu_error(TPU_E_TYPE,
                       "%s: needs a floating point operand, got %s "
                       "(convert first)",
                       nm, tpu_dtype_name(dt));
    break;
  }
  tpuir_node *nd = new_node(g, op);
  if (!nd) return tpu_error(TPU_E_OOM, "%s: out of host memory", nm);
  xn = val(g, x); /* new_node may have moved the array */
  copy_shape(nd, rdt, xn->ndim, xn->sizes);
  nd->nin = 1;
  nd->in[0] = x;
  return commit(g);
}

/* Binary elementwise op (same shapes and dtypes). */
tpuir_val tpuir_binary(tpuir_graph *g, int op, tpuir_val a, tpuir_val b) {
  if (!is_binary(op))
    return tpu_error(TPU_E_INVALID, "binary: op %d (%s) is not a binary op", op,
                     tpuir_op_name(op));
  const char *nm = tpuir_op_name(op);
  int rc = check_val(g, a, nm);
  if (rc) return rc;
  rc = check_val(g, b, nm);
  if (rc) return rc;
  const tpuir_node *an = val(g, a), *bn = val(g, b);
  if (an->dtype != bn->dtype)
    return shape_mismatch(nm, an, bn, TPU_E_TYPE, "dtype");
  if (!same_shape(an, bn))
    return shape_mismatch(nm, an, bn, TPU_E_INVALID, "shape");
  int dt = an->dtype, rdt = dt;
  if (tpu_dtype_is_complex(dt) && op != TPUIR_ADD && op != TPUIR_SUB &&
      op != TPUIR_MUL && op != TPUIR_DIV && op != TPUIR_POW &&
      op != TPUIR_EQ && op != TPUIR_NE)
    return tpu_error(TPU_E_TYPE, "%s: not supported for complex operands (%s)",
                     nm, tpu_dtype_name(dt));
  switch (op) {
  case TPUIR_ADD: case TPUIR_MUL: case TPUIR_MAX: case TPUIR_MIN:
    break;
  case TPUIR_SUB: case TPUIR_DIV: case TPUIR_REM: case TPUIR_POW:
    if (dt == TPU_BOOL)
      return tpu_error(TPU_E_TYPE, "%s: not supported for bool operands", nm);
    break;
  case TPUIR_ATAN2:
    if (!tpu_dtype_is_float(dt))
      return tpu_error(TPU_E_TYPE,
                       "atan2: needs floating point operands, got %s",
                       tpu_dtype_name(dt));
    break;
  case TPUIR_AND: case TPUIR_OR: case TPUIR_XOR:
    if (tpu_dtype_is_float(dt))
      return tpu_error(TPU_E_TYPE,
                       "%s: needs bool or integer operands, got %s", nm,
                       tpu_dtype_name(dt));
    break;
  case TPUIR_SHL: case TPUIR_SHR:
    if (!tpu_dtype_is_int(dt))
      return tpu_error(TPU_E_TYPE, "%s: needs integer operands, got %s", nm,
                       tpu_dtype_name(dt));
    break;
  default: /* comparisons */
    rdt = TPU_BOOL;
    break;
  }
  tpuir_node *nd = new_node(g, op);
  if (!nd) return tpu_error(TPU_E_OOM, "%s: out of host memory", nm);
  an = val(g, a);
  copy_shape(nd, rdt, an->ndim, an->sizes);
  nd->nin = 2;
  nd->in[0] = a;
  nd->in[1] = b;
  return commit(g);
}

/* select(pred, on_true, on_false): same shapes, pred bool. */
tpuir_val tpuir_select(tpuir_graph *g, tpuir_val pred, tpuir_val on_true,
                       tpuir_val on_false) {
  int rc = check_val(g, pred, "select");
  if (rc) return rc;
  if ((rc = check_val(g, on_true, "select"))) return rc;
  if ((rc = check_val(g, on_false, "select"))) return rc;
  const tpuir_node *p = val(g, pred), *t = val(g, on_true),
                   *f = val(g, on_false);
  if (p->dtype != TPU_BOOL)
    return tpu_error(TPU_E_TYPE, "select: predicate must be bool, got %s",
                     tpu_dtype_name(p->dtype));
  if (t->dtype != f->dtype) return shape_mismatch("select", t, f, TPU_E_TYPE, "dtype");
  if (!same_shape(t, f)) return shape_mismatch("select", t, f, TPU_E_INVALID, "shape");
  if (!same_shape(p, t)) return shape_mismatch("select", p, t, TPU_E_INVALID, "shape");
  tpuir_node *nd = new_node(g, TPUIR_SELECT);
  if (!nd) return tpu_error(TPU_E_OOM, "select: out of host memory");
  t = val(g, on_true);
  copy_shape(nd, t->dtype, t->ndim, t->sizes);
  nd->nin = 3;
  nd->in[0] = pred;
  nd->in[1] = on_true;
  nd->in[2] = on_false;
  return commit(g);
}

/* dtype conversion (PyTorch semantics). */
tpuir_val tpuir_convert(tpuir_graph *g, tpuir_val x, int dtype) {
  int rc = check_val(g, x, "convert");
  if (rc) return rc;
  if (!dtype_ok(dtype))
    return tpu_error(TPU_E_TYPE, "convert: invalid dtype %d", dtype);
  tpuir_node *nd = new_node(g, TPUIR_CONVERT);
  if (!nd) return tpu_error(TPU_E_OOM, "convert: out of host memory");
  const tpuir_node *xn = val(g, x);
  copy_shape(nd, dtype, xn->ndim, xn->sizes);
  nd->nin = 1;
  nd->in[0] = x;
  return commit(g);
}

/* ---- shape ------------------------------------------------------------- */

/* StableHLO broadcast_in_dim. */
tpuir_val tpuir_broadcast_in_dim(tpuir_graph *g, tpuir_val x, int ndim,
                                 const int64_t *sizes, const int64_t *dims) {
  int rc = check_val(g, x, "broadcast_in_dim");
  if (rc) return rc;
  if ((rc = check_sizes("broadcast_in_dim", ndim, sizes))) return rc;
  const tpuir_node *xn = val(g, x);
  if (xn->ndim > ndim)
    return tpu_error(TPU_E_INVALID,
                     "broadcast_in_dim: operand rank %d exceeds result rank %d",
                     (int)xn->ndim, ndim);
  if ((rc = check_dims("broadcast_in_dim", xn->ndim, dims, ndim))) return rc;
  for (int i = 0; i < xn->ndim; i++) {
    int64_t os = xn->sizes[i], rs = sizes[dims[i]];
    if (os != 1 && os != rs)
      return tpu_error(TPU_E_INVALID,
                       "broadcast_in_dim: the expanded size of the tensor "
                       "(%lld) must match the existing size (%lld) at operand "
                       "dimension %d",
                       (long long)rs, (long long)os, i);
  }
  tpuir_node *nd = new_node(g, TPUIR_BROADCAST_IN_DIM);
  if (!nd) return tpu_error(TPU_E_OOM, "broadcast_in_dim: out of host memory");
  xn = val(g, x);
  copy_shape(nd, xn->dtype, ndim, sizes);
  nd->nin = 1;
  nd->in[0] = x;
  nd->na = xn->ndim;
  for (int i = 0; i < xn->ndim; i++) nd->a[i] = dims[i];
  return commit(g);
}

/* Row-major reshape (same numel). */
tpuir_val tpuir_reshape(tpuir_graph *g, tpuir_val x, int ndim,
                        const int64_t *sizes) {
  int rc = check_val(g, x, "reshape");
  if (rc) return rc;
  if ((rc = check_sizes("reshape", ndim, sizes))) return rc;
  const tpuir_node *xn = val(g, x);
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) n *= sizes[i];
  if (n != numel_of(xn)) {
    char s[160];
    tpuir__type_str(s, sizeof s, xn->dtype, ndim, sizes);
    return tpu_error(TPU_E_INVALID,
                     "reshape: shape '%s' is invalid for input of size %lld", s,
                     (long long)numel_of(xn));
  }
  tpuir_node *nd = new_node(g, TPUIR_RESHAPE);
  if (!nd) return tpu_error(TPU_E_OOM, "reshape: out of host memory");
  xn = val(g, x);
  copy_shape(nd, xn->dtype, ndim, sizes);
  nd->nin = 1;
  nd->in[0] = x;
  return commit(g);
}

/* Result dim i = operand dim perm[i]. */
tpuir_val tpuir_transpose(tpuir_graph *g, tpuir_val x, const int64_t *perm) {
  int rc = check_val(g, x, "transpose");
  if (rc) return rc;
  const tpuir_node *xn = val(g, x);
  if ((rc = check_dims("transpose", xn->ndim, perm, xn->ndim))) return rc;
  tpuir_node *nd = new_node(g, TPUIR_TRANSPOSE);
  if (!nd) return tpu_error(TPU_E_OOM, "transpose: out of host memory");
  xn = val(g, x);
  nd->dtype = xn->dtype;
  nd->ndim = xn->ndim;
  nd->na = xn->ndim;
  for (int i = 0; i < xn->ndim; i++) {
    nd->a[i] = perm[i];
    nd->sizes[i] = xn->sizes[perm[i]];
  }
  nd->nin = 1;
  nd->in[0] = x;
  return commit(g);
}

/* StableHLO slice (stride > 0). */
tpuir_val tpuir_slice(tpuir_graph *g, tpuir_val x, const int64_t *start,
                      const int64_t *limit, const int64_t *stride) {
  int rc = check_val(g, x, "slice");
  if (rc) return rc;
  const tpuir_node *xn = val(g, x);
  int r = xn->ndim;
  if (r > 0 && (!start || !limit || !stride))
    return tpu_error(TPU_E_INVALID, "slice: start/limit/stride is NULL");
  for (int i = 0; i < r; i++) {
    if (stride[i] <= 0)
      return tpu_error(TPU_E_INVALID,
                       "slice: step must be positive, got %lld at dim %d",
                       (long long)stride[i], i);
    if (start[i] < 0 || start[i] > limit[i] || limit[i] > xn->sizes[i])
      return tpu_error(TPU_E_INVALID,
                       "slice: range [%lld, %lld) is invalid for dim %d of "
                       "size %lld",
                       (long long)start[i], (long long)limit[i], i,
                       (long long)xn->sizes[i]);
  }
  tpuir_node *nd = new_node(g, TPUIR_SLICE);
  if (!nd) return tpu_error(TPU_E_OOM, "slice: out of host memory");
  xn = val(g, x);
  nd->dtype = xn->dtype;
  nd->ndim = r;
  nd->na = r;
  for (int i = 0; i < r; i++) {
    nd->a[i] = start[i];
    nd->b[i] = limit[i];
    nd->c[i] = stride[i];
    nd->sizes[i] = (limit[i] - start[i] + stride[i] - 1) / stride[i];
  }
  nd->nin = 1;
  nd->in[0] = x;
  return commit(g);
}

/* Concatenate n values along dim. */
tpuir_val tpuir_concat(tpuir_graph *g, int n, const tpuir_val *xs, int dim) {
  if (n < 1 || !xs)
    return tpu_error(TPU_E_INVALID, "concatenate: expected a non-empty list of tensors");
  for (int i = 0; i < n; i++) {
    int rc = check_val(g, xs[i], "concatenate");
    if (rc) return rc;
  }
  const tpuir_node *x0 = val(g, xs[0]);
  if (x0->ndim == 0)
    return tpu_error(TPU_E_INVALID,
                     "concatenate: zero-dimensional tensor (at position 0) "
                     "cannot be concatenated");
  if (dim < 0 || dim >= x0->ndim)
    return tpu_error(TPU_E_INDEX,
                     "concatenate: dimension %d out of range (expected to be "
                     "in range of [0, %d))",
                     dim, (int)x0->ndim);
  int64_t total = 0;
  for (int i = 0; i < n; i++) {
    const tpuir_node *xi = val(g, xs[i]);
    if (xi->dtype != x0->dtype)
      return shape_mismatch("concatenate", x0, xi, TPU_E_TYPE, "dtype");
    if (xi->ndim != x0->ndim)
      return shape_mismatch("concatenate", x0, xi, TPU_E_INVALID, "rank");
    for (int d = 0; d < x0->ndim; d++)
      if (d != dim && xi->sizes[d] != x0->sizes[d])
        return tpu_error(TPU_E_INVALID,
                         "concatenate: sizes of tensors must match except in "
                         "dimension %d. Expected size %lld but got size %lld "
                         "for tensor number %d in the list",
                         dim, (long long)x0->sizes[d], (long long)xi->sizes[d],
                         i);
    total += xi->sizes[dim];
  }
  tpuir_val *list = malloc((size_t)n * sizeof(tpuir_val));
  if (!list) return tpu_error(TPU_E_OOM, "concatenate: out of host memory");
  memcpy(list, xs, (size_t)n * sizeof(tpuir_val));
  tpuir_node *nd = new_node(g, TPUIR_CONCAT);
  if (!nd) {
    free(list);
    return tpu_error(TPU_E_OOM, "concatenate: out of host memory");
  }
  x0 = val(g, xs[0]);
  copy_shape(nd, x0->dtype, x0->ndim, x0->sizes);
  nd->sizes[dim] = total;
  nd->dim = dim;
  nd->list = list;
  nd->nlist = n;
  nd->nin = n < 4 ? n : 4;
  for (int i = 0; i < nd->nin; i++) nd->in[i] = xs[i];
  return commit(g);
}

/* Pad with a rank-0 value (negative lo/hi crop). */
tpuir_val tpuir_pad(tpuir_graph *g, tpuir_val x, tpuir_val padval,
                    const int64_t *lo, const int64_t *hi,
                    const int64_t *interior) {
  int rc = check_val(g, x, "pad");
  if (rc) return rc;
  if ((rc = check_val(g, padval, "pad"))) return rc;
  const tpuir_node *xn = val(g, x), *pn = val(g, padval);
  if (pn->ndim != 0)
    return tpu_error(TPU_E_INVALID, "pad: padding value must be rank 0, got rank %d",
                     (int)pn->ndim);
  if (pn->dtype != xn->dtype)
    return shape_mismatch("pad", xn, pn, TPU_E_TYPE, "dtype");
  int r = xn->ndim;
  if (r > 0 && (!lo || !hi || !interior))
    return tpu_error(TPU_E_INVALID, "pad: lo/hi/interior is NULL");
  int64_t rs[TPU_MAX_DIMS];
  for (int i = 0; i < r; i++) {
    if (interior[i] < 0)
      return tpu_error(TPU_E_INVALID, "pad: negative interior padding %lld at dim %d",
                       (long long)interior[i], i);
    int64_t s = xn->sizes[i];
    int64_t core = s + (s > 0 ? (s - 1) * interior[i] : 0);
    rs[i] = lo[i] + hi[i] + core;
    if (rs[i] < 0)
      return tpu_error(TPU_E_INVALID,
                       "pad: resulting size %lld of dim %d is negative",
                       (long long)rs[i], i);
  }
  tpuir_node *nd = new_node(g, TPUIR_PAD);
  if (!nd) return tpu_error(TPU_E_OOM, "pad: out of host memory");
  xn = val(g, x);
  copy_shape(nd, xn->dtype, r, rs);
  nd->na = r;
  for (int i = 0; i < r; i++) {
    nd->a[i] = lo[i];
    nd->b[i] = hi[i];
    nd->c[i] = interior[i];
  }
  nd->nin = 2;
  nd->in[0] = x;
  nd->in[1] = padval;
  return commit(g);
}

/* Reverse the listed dims. */
tpuir_val tpuir_reverse(tpuir_graph *g, tpuir_val x, int ndims,
                        const int64_t *dims) {
  int rc = check_val(g, x, "reverse");
  if (rc) return rc;
  const tpuir_node *xn = val(g, x);
  if ((rc = check_dims("reverse", ndims, dims, xn->ndim))) return rc;
  tpuir_node *nd = new_node(g, TPUIR_REVERSE);
  if (!nd) return tpu_error(TPU_E_OOM, "reverse: out of host memory");
  xn = val(g, x);
  copy_shape(nd, xn->dtype, xn->ndim, xn->sizes);
  nd->na = ndims;
  for (int i = 0; i < ndims; i++) nd->a[i] = dims[i];
  nd->nin = 1;
  nd->in[0] = x;
  return commit(g);
}

/* ---- reductions -------------------------------------------------------- */

/* Reduce the listed dims away. */
tpuir_val tpuir_reduce(tpuir_graph *g, int kind, tpuir_val x, int ndims,
                       const int64_t *dims) {
  int rc = check_val(g, x, "reduce");
  if (rc) return rc;
  if (kind < TPUIR_RED_SUM || kind > TPUIR_RED_OR)
    return tpu_error(TPU_E_INVALID, "reduce: invalid kind %d", kind);
  const tpuir_node *xn = val(g, x);
  if (tpu_dtype_is_complex(xn->dtype) && kind != TPUIR_RED_SUM && kind != TPUIR_RED_PROD)
    return tpu_error(TPU_E_TYPE, "reduce: %s is not defined for complex operands",
                     tpuir__reduce_kind_name(kind));
  if ((kind == TPUIR_RED_AND || kind == TPUIR_RED_OR) && xn->dtype != TPU_BOOL)
    return tpu_error(TPU_E_TYPE, "reduce: %s needs a bool operand, got %s",
                     tpuir__reduce_kind_name(kind), tpu_dtype_name(xn->dtype));
  if ((rc = check_dims("reduce", ndims, dims, xn->ndim))) return rc;
  tpuir_node *nd = new_node(g, TPUIR_REDUCE);
  if (!nd) return tpu_error(TPU_E_OOM, "reduce: out of host memory");
  xn = val(g, x);
  nd->dtype = xn->dtype;
  uint32_t red = 0;
  for (int i = 0; i < ndims; i++) red |= 1u << dims[i];
  int r = 0;
  for (int i = 0; i < xn->ndim; i++)
    if (!(red & (1u << i))) nd->sizes[r++] = xn->sizes[i];
  nd->ndim = r;
  nd->kind = kind;
  nd->na = ndims;
  for (int i = 0; i < ndims; i++) nd->a[i] = dims[i];
  nd->nin = 1;
  nd->in[0] = x;
  return commit(g);
}

/* Index (int64) of the max/min along dim (dim removed). */
tpuir_val tpuir_argreduce(tpuir_graph *g, int kind, tpuir_val x, int dim) {
  int rc = check_val(g, x, "argreduce");
  if (rc) return rc;
  if (kind != TPUIR_RED_MAX && kind != TPUIR_RED_MIN)
    return tpu_error(TPU_E_INVALID, "argreduce: kind must be max or min, got %d",
                     kind);
  const tpuir_node *xn = val(g, x);
  const char *nm = kind == TPUIR_RED_MAX ? "argmax" : "argmin";
  int r = xn->ndim;
  if (r == 0 ? dim != 0 : (dim < 0 || dim >= r))
    return tpu_error(TPU_E_INDEX,
                     "%s: dimension %d out of range (expected to be in range "
                     "of [0, %d))",
                     nm, dim, r ? r : 1);
  if (r > 0 && xn->sizes[dim] == 0)
    return tpu_error(TPU_E_INDEX,
                     "%s(): Expected reduction dim %d to have non-zero size.",
                     nm, dim);
  tpuir_node *nd = new_node(g, TPUIR_ARGREDUCE);
  if (!nd) return tpu_error(TPU_E_OOM, "argreduce: out of host memory");
  xn = val(g, x);
  nd->dtype = TPU_I64;
  int k = 0;
  for (int i = 0; i < r; i++)
    if (i != dim) nd->sizes[k++] = xn->sizes[i];
  nd->ndim = k;
  nd->kind = kind;
  nd->dim = dim;
  nd->nin = 1;
  nd->in[0] = x;
  return commit(g);
}

/* ---- matrix unit ------------------------------------------------------- */

/* StableHLO dot_general. */
tpuir_val tpuir_dot_general(tpuir_graph *g, tpuir_val lhs, tpuir_val rhs,
                            int nbatch, const int64_t *lhs_batch,
                            const int64_t *rhs_batch, int ncontract,
                            const int64_t *lhs_contract,
                            const int64_t *rhs_contract, int precision,
                            int out_dtype) {
  const char *nm = "dot_general";
  int rc = check_val(g, lhs, nm);
  if (rc) return rc;
  if ((rc = check_val(g, rhs, nm))) return rc;
  const tpuir_node *l = val(g, lhs), *r = val(g, rhs);
  if (l->dtype != r->dtype) return shape_mismatch(nm, l, r, TPU_E_TYPE, "dtype");
  if (l->dtype == TPU_BOOL)
    return tpu_error(TPU_E_TYPE, "dot_general: bool operands are not supported");
  if (tpu_dtype_is_complex(l->dtype) && tpu_dtype_is_complex(out_dtype))
    return tpuir__dot_complex(g, lhs, rhs, nbatch, lhs_batch, rhs_batch, ncontract,
                              lhs_contract, rhs_contract, precision, out_dtype);
  if (tpu_dtype_is_complex(l->dtype) || tpu_dtype_is_complex(out_dtype))
    return tpu_error(TPU_E_TYPE, "dot_general: complex operands are not supported "
                     "(split into real dot_generals)");
  if (!dtype_ok(out_dtype) || out_dtype == TPU_BOOL)
    return tpu_error(TPU_E_TYPE, "dot_general: invalid result dtype %d", out_dtype);
  if (precision < TPU_PREC_DEFAULT || precision > TPU_PREC_FP32)
    return tpu_error(TPU_E_INVALID, "dot_general: invalid precision %d", precision);
  if (nbatch < 0 || ncontract < 0 || nbatch + ncontract > l->ndim ||
      nbatch + ncontract > r->ndim)
    return tpu_error(TPU_E_INVALID,
                     "dot_general: %d batch + %d contracting dims do not fit "
                     "operand ranks %d and %d",
                     nbatch, ncontract, (int)l->ndim, (int)r->ndim);
  int64_t ld[2 * TPU_MAX_DIMS], rd[2 * TPU_MAX_DIMS];
  for (int i = 0; i < nbatch; i++) {
    ld[i] = lhs_batch[i];
    rd[i] = rhs_batch[i];
  }
  for (int i = 0; i < ncontract; i++) {
    ld[nbatch + i] = lhs_contract[i];
    rd[nbatch + i] = rhs_contract[i];
  }
  if ((rc = check_dims("dot_general (lhs)", nbatch + ncontract, ld, l->ndim)))
    return rc;
  if ((rc = check_dims("dot_general (rhs)", nbatch + ncontract, rd, r->ndim)))
    return rc;
  for (int i = 0; i < nbatch + ncontract; i++)
    if (l->sizes[ld[i]] != r->sizes[rd[i]])
      return tpu_error(TPU_E_INVALID,
                       "dot_general: %s dimension sizes differ: lhs dim %lld "
                       "has size %lld, rhs dim %lld has size %lld",
                       i < nbatch ? "batch" : "contracting", (long long)ld[i],
                       (long long)l->sizes[ld[i]], (long long)rd[i],
                       (long long)r->sizes[rd[i]]);
  int rank = l->ndim + r->ndim - nbatch - 2 * ncontract;
  if (rank > TPU_MAX_DIMS)
    return tpu_error(TPU_E_INVALID, "dot_general: result rank %d exceeds %d",
                     rank, TPU_MAX_DIMS);
  int64_t rs[TPU_MAX_DIMS];
  int k = 0;
  uint32_t lused = 0, rused = 0;
  for (int i = 0; i < nbatch + ncontract; i++) {
    lused |= 1u << ld[i];
    rused |= 1u << rd[i];
  }
  for (int i = 0; i < nbatch; i++) rs[k++] = l->sizes[ld[i]];
  for (int i = 0; i < l->ndim; i++)
    if (!(lused & (1u << i))) rs[k++] = l->sizes[i];
  for (int i = 0; i < r->ndim; i++)
    if (!(rused & (1u << i))) rs[k++] = r->sizes[i];
  tpuir_node *nd = new_node(g, TPUIR_DOT_GENERAL);
  if (!nd) return tpu_error(TPU_E_OOM, "dot_general: out of host memory");
  copy_shape(nd, out_dtype, rank, rs);
  nd->na = nbatch;
  nd->nb = ncontract;
  for (int i = 0; i < nbatch; i++) {
    nd->a[i] = lhs_batch[i];
    nd->b[i] = rhs_batch[i];
  }
  for (int i = 0; i < ncontract; i++) {
    nd->c[i] = lhs_contract[i];
    nd->d[i] = rhs_contract[i];
  }
  nd->kind = precision;
  nd->nin = 2;
  nd->in[0] = lhs;
  nd->in[1] = rhs;
  return commit(g);
}

/* ---- indexing ---------------------------------------------------------- */

static int check_index_dtype(const char *nm, const tpuir_node *idx) {
  if (idx->dtype != TPU_I32 && idx->dtype != TPU_I64)
    return tpu_error(TPU_E_TYPE, "%s(): Expected dtype int32/int64 for index, got %s",
                     nm, tpu_dtype_name(idx->dtype));
  return TPU_OK;
}

/* dim check for ops where a rank-0 tensor accepts dim 0 */
static int check_dim0(const char *nm, int dim, int rank) {
  if (rank == 0 ? dim != 0 : (dim < 0 || dim >= rank))
    return tpu_error(TPU_E_INDEX,
                     "%s: dimension %d out of range (expected to be in range "
                     "of [0, %d))",
                     nm, dim, rank ? rank : 1);
  return TPU_OK;
}

/* torch.gather(x, dim, idx). */
tpuir_val tpuir_gather(tpuir_graph *g, tpuir_val x, int dim, tpuir_val idx) {
  int rc = check_val(g, x, "gather");
  if (rc) return rc;
  if ((rc = check_val(g, idx, "gather"))) return rc;
  const tpuir_node *xn = val(g, x), *in = val(g, idx);
  if ((rc = check_index_dtype("gather", in))) return rc;
  if ((rc = check_dim0("gather", dim, xn->ndim))) return rc;
  if (in->ndim != xn->ndim)
    return tpu_error(TPU_E_INVALID,
                     "gather(): Index tensor must have the same number of "
                     "dimensions as input tensor");
  for (int d = 0; d < xn->ndim; d++)
    if (d != dim && in->sizes[d] > xn->sizes[d])
      return tpu_error(TPU_E_INVALID,
                       "gather(): Size does not match at dimension %d expected "
                       "index [..] to be smaller than self apart from "
                       "dimension %d (index size %lld, self size %lld)",
                       d, dim, (long long)in->sizes[d], (long long)xn->sizes[d]);
  tpuir_node *nd = new_node(g, TPUIR_GATHER);
  if (!nd) return tpu_error(TPU_E_OOM, "gather: out of host memory");
  xn = val(g, x);
  in = val(g, idx);
  copy_shape(nd, xn->dtype, in->ndim, in->sizes);
  nd->dim = dim;
  nd->nin = 2;
  nd->in[0] = x;
  nd->in[1] = idx;
  return commit(g);
}

/* torch.index_select(x, dim, idx). */
tpuir_val tpuir_index_select(tpuir_graph *g, tpuir_val x, int dim,
                             tpuir_val idx) {
  int rc = check_val(g, x, "index_select");
  if (rc) return rc;
  if ((rc = check_val(g, idx, "index_select"))) return rc;
  const tpuir_node *xn = val(g, x), *in = val(g, idx);
  if ((rc = check_index_dtype("index_select", in))) return rc;
  if ((rc = check_dim0("index_select", dim, xn->ndim))) return rc;
  if (in->ndim > 1)
    return tpu_error(TPU_E_INVALID,
                     "index_select(): Index is supposed to be a vector");
  int64_t ni = numel_of(in);
  if (xn->ndim == 0 && ni != 1)
    return tpu_error(TPU_E_INVALID,
                     "index_select(): Index to scalar can have only 1 value, "
                     "got %lld value(s)",
                     (long long)ni);
  tpuir_node *nd = new_node(g, TPUIR_INDEX_SELECT);
  if (!nd) return tpu_error(TPU_E_OOM, "index_select: out of host memory");
  xn = val(g, x);
  copy_shape(nd, xn->dtype, xn->ndim, xn->sizes);
  if (xn->ndim > 0) nd->sizes[dim] = ni;
  nd->dim = dim;
  nd->nin = 2;
  nd->in[0] = x;
  nd->in[1] = idx;
  return commit(g);
}

/* torch.scatter_add(base, dim, idx, src). */
tpuir_val tpuir_scatter_add(tpuir_graph *g, tpuir_val base, int dim,
                            tpuir_val idx, tpuir_val src) {
  int rc = check_val(g, base, "scatter_add");
  if (rc) return rc;
  if ((rc = check_val(g, idx, "scatter_add"))) return rc;
  if ((rc = check_val(g, src, "scatter_add"))) return rc;
  const tpuir_node *bn = val(g, base), *in = val(g, idx), *sn = val(g, src);
  if ((rc = check_index_dtype("scatter_add", in))) return rc;
  if (tpu_dtype_is_complex(bn->dtype))
    return tpu_error(TPU_E_TYPE, "scatter_add: complex operands are not supported");
  if (sn->dtype != bn->dtype)
    return shape_mismatch("scatter_add", bn, sn, TPU_E_TYPE, "dtype");
  if ((rc = check_dim0("scatter_add", dim, bn->ndim))) return rc;
  if (in->ndim != bn->ndim || sn->ndim != bn->ndim)
    return tpu_error(TPU_E_INVALID,
                     "scatter_add(): Index tensor must have the same number "
                     "of dimensions as self and src tensors");
  for (int d = 0; d < bn->ndim; d++) {
    if (in->sizes[d] > sn->sizes[d] || (d != dim && in->sizes[d] > bn->sizes[d]))
      return tpu_error(TPU_E_INVALID,
                       "scatter_add(): Expected index [..] to be smaller than "
                       "self apart from dimension %d and to be smaller size "
                       "than src (dim %d: index %lld, self %lld, src %lld)",
                       dim, d, (long long)in->sizes[d], (long long)bn->sizes[d],
                       (long long)sn->sizes[d]);
  }
  tpuir_node *nd = new_node(g, TPUIR_SCATTER_ADD);
  if (!nd) return tpu_error(TPU_E_OOM, "scatter_add: out of host memory");
  bn = val(g, base);
  copy_shape(nd, bn->dtype, bn->ndim, bn->sizes);
  nd->dim = dim;
  nd->nin = 3;
  nd->in[0] = base;
  nd->in[1] = idx;
  nd->in[2] = src;
  return commit(g);
}

/* torch.index_add(base, dim, idx, src). */
tpuir_val tpuir_index_add(tpuir_graph *g, tpuir_val base, int dim,
                          tpuir_val idx, tpuir_val src) {
  int rc = check_val(g, base, "index_add");
  if (rc) return rc;
  if ((rc = check_val(g, idx, "index_add"))) return rc;
  if ((rc = check_val(g, src, "index_add"))) return rc;
  const tpuir_node *bn = val(g, base), *in = val(g, idx), *sn = val(g, src);
  if ((rc = check_index_dtype("index_add", in))) return rc;
  if (tpu_dtype_is_complex(bn->dtype))
    return tpu_error(TPU_E_TYPE, "index_add: complex operands are not supported");
  if (sn->dtype != bn->dtype)
    return shape_mismatch("index_add", bn, sn, TPU_E_TYPE, "dtype");
  if ((rc = check_dim0("index_add", dim, bn->ndim))) return rc;
  if (in->ndim > 1)
    return tpu_error(TPU_E_INVALID, "index_add(): Index is supposed to be a vector");
  int64_t ni = numel_of(in);
  int ok = sn->ndim == bn->ndim;
  for (int d = 0; ok && d < bn->ndim; d++)
    ok = sn->sizes[d] == (d == dim ? ni : bn->sizes[d]);
  if (bn->ndim == 0) ok = sn->ndim == 0 && ni == 1;
  if (!ok) {
    char sb[160], ss[160];
    tpuir__type_str(sb, sizeof sb, bn->dtype, bn->ndim, bn->sizes);
    tpuir__type_str(ss, sizeof ss, sn->dtype, sn->ndim, sn->sizes);
    return tpu_error(TPU_E_INVALID,
                     "index_add(): source %s must have the shape of self %s "
                     "with size %lld at dim %d",
                     ss, sb, (long long)ni, dim);
  }
  tpuir_node *nd = new_node(g, TPUIR_INDEX_ADD);
  if (!nd) return tpu_error(TPU_E_OOM, "index_add: out of host memory");
  bn = val(g, base);
  copy_shape(nd, bn->dtype, bn->ndim, bn->sizes);
  nd->dim = dim;
  nd->nin = 3;
  nd->in[0] = base;
  nd->in[1] = idx;
  nd->in[2] = src;
  return commit(g);
}

/* ---- outputs and inspection -------------------------------------------- */

/* Declare the graph's results (replaces an earlier declaration). */
int tpuir_set_outputs(tpuir_graph *g, int n, const tpuir_val *outs) {
  if (n < 0 || (n > 0 && !outs))
    return tpu_error(TPU_E_INVALID, "set_outputs: bad output list");
  for (int i = 0; i < n; i++) {
    int rc = check_val(g, outs[i], "set_outputs");
    if (rc) return rc;
  }
  tpuir_val *o = NULL;
  if (n > 0) {
    o = malloc((size_t)n * sizeof(tpuir_val));
    if (!o) return tpu_error(TPU_E_OOM, "set_outputs: out of host memory");
    memcpy(o, outs, (size_t)n * sizeof(tpuir_val));
  }
  free(g->outs);
  g->outs = o;
  g->nouts = n;
  g->memo_ok = 0;
  return TPU_OK;
}

/* Number of parameters (PARAM nodes) built so far. */
int tpuir_num_params(const tpuir_graph *g) { return g->nparams; }
/* Number of declared outputs (0 before tpuir_set_outputs). */
int tpuir_num_outputs(const tpuir_graph *g) { return g->nouts; }
/* Number of nodes (= values) in the graph. */
int tpuir_num_nodes(const tpuir_graph *g) { return g->n; }

/* Output value i (TPU_E_INVALID if out of range). */
tpuir_val tpuir_output(const tpuir_graph *g, int i) {
  if (i < 0 || i >= g->nouts)
    return tpu_error(TPU_E_INVALID, "output %d out of range (graph has %d)", i,
                     (int)g->nouts);
  return g->outs[i];
}

/* Node defining value v (borrowed; NULL if v is not a value of g). Valid
 * until the next builder call on g. */
const tpuir_node *tpuir_get_node(const tpuir_graph *g, tpuir_val v) {
  if (!g || v < 0 || v >= g->n) return NULL;
  return &g->nodes[v];
}

/* Shape/dtype of value v (any out-pointer may be NULL). */
int tpuir_value_info(const tpuir_graph *g, tpuir_val v, int *dtype, int *ndim,
                     int64_t *sizes) {
  int rc = check_val(g, v, "value_info");
  if (rc) return rc;
  const tpuir_node *n = &g->nodes[v];
  if (dtype) *dtype = n->dtype;
  if (ndim) *ndim = n->ndim;
  if (sizes)
    for (int i = 0; i < n->ndim; i++) sizes[i] = n->sizes[i];
  return TPU_OK;
}

tpuir_val tpuir_copy_node(tpuir_graph *g, const tpuir_node *s, const tpuir_val *map) {
  if (!s || s->op < 0 || s->op >= TPUIR_NUM_OPS)
    return tpu_error(TPU_E_INVALID, "tpuir_copy_node: not a node");
  if (s->op == TPUIR_PARAM) return tpuir_param(g, s->dtype, s->ndim, s->sizes);
  tpuir_val *list = NULL;
  if (s->nlist) {
    list = malloc((size_t)s->nlist * sizeof *list);
    if (!list) return tpu_error(TPU_E_OOM, "tpuir_copy_node: out of host memory");
    for (int k = 0; k < s->nlist; k++) list[k] = map[s->list[k]];
  }
  for (int k = 0; k < s->nin; k++)
    if (map[s->in[k]] < 0 || map[s->in[k]] >= g->n) {
      free(list);
      return tpu_error(TPU_E_INVALID, "tpuir_copy_node: operand %d not mapped", k);
    }
  tpuir_node *d = new_node(g, s->op);
  if (!d) {
    free(list);
    return tpu_error(TPU_E_OOM, "tpuir_copy_node: out of host memory");
  }
  *d = *s;
  for (int k = 0; k < s->nin; k++) d->in[k] = map[s->in[k]];
  d->list = list;
  tpuir_val v = commit(g);
  if (v < 0) free(list);
  return v;
}

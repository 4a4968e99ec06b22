/* ir/dump.c - the human-readable listing of a graph (tpuir_dump), one line
 * per node: `%3 = add(%1, %2) {attributes} : f32[4,8]`, then `return ...`.
 * Which attribute printer a node uses is the `attrs` column of TPUIR_OPS
 * (tpu_ir.h): attr_<attrs> below. This file sits above the builders and
 * reads nodes only (tpu_ir.h), so no builder file depends on it. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ir/internal.h"

typedef struct sbuf {
  char *buf;
  size_t cap, len;
} sbuf;

__attribute__((format(printf, 2, 3))) static void sb_printf(sbuf *s, const char *fmt, ...) {
  char tmp[512];
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (k < 0) return;
  size_t n = (size_t)k < sizeof tmp ? (size_t)k : sizeof tmp - 1;
  if (s->cap > 0 && s->len < s->cap - 1) {
    size_t room = s->cap - 1 - s->len;
    memcpy(s->buf + s->len, tmp, n < room ? n : room);
    s->buf[s->len + (n < room ? n : room)] = 0;
  }
  s->len += n;
}

/* `name=[1,2,3]`, preceded by ", " unless first */
static void sb_ints(sbuf *s, int first, const char *name, int n, const int64_t *v) {
  sb_printf(s, "%s%s=[", first ? "" : ", ", name);
  for (int i = 0; i < n; i++) sb_printf(s, i ? ",%lld" : "%lld", (long long)v[i]);
  sb_printf(s, "]");
}

/* ---- attribute printers (the `attrs` column of TPUIR_OPS) --------------- */

static void attr_none(sbuf *s, const tpuir_node *n) { (void)s, (void)n; }

static void attr_param(sbuf *s, const tpuir_node *n) { sb_printf(s, " {index=%d}", (int)n->dim); }

static void attr_const(sbuf *s, const tpuir_node *n) {
  if (tpu_dtype_is_float(n->dtype)) sb_printf(s, " {value=%.17g}", n->fval);
  else sb_printf(s, " {value=%lld}", (long long)n->ival);
}

static void attr_dim(sbuf *s, const tpuir_node *n) { sb_printf(s, " {dim=%d}", (int)n->dim); }

static void attr_rng(sbuf *s, const tpuir_node *n) {
  sb_printf(s, " {kind=%s, seed=%llu, offset=%llu}", tpuir__rng_kind_name(n->kind),
            (unsigned long long)n->seed, (unsigned long long)n->offset);
}

static void attr_dims(sbuf *s, const tpuir_node *n) {
  sb_printf(s, " {");
  sb_ints(s, 1, "dims", n->na, n->a);
  sb_printf(s, "}");
}

static void attr_perm(sbuf *s, const tpuir_node *n) {
  sb_printf(s, " {");
  sb_ints(s, 1, "perm", n->na, n->a);
  sb_printf(s, "}");
}

static void attr_slice(sbuf *s, const tpuir_node *n) {
  sb_printf(s, " {");
  sb_ints(s, 1, "start", n->na, n->a);
  sb_ints(s, 0, "limit", n->na, n->b);
  sb_ints(s, 0, "stride", n->na, n->c);
  sb_printf(s, "}");
}

static void attr_pad(sbuf *s, const tpuir_node *n) {
  sb_printf(s, " {");
  sb_ints(s, 1, "lo", n->na, n->a);
  sb_ints(s, 0, "hi", n->na, n->b);
  sb_ints(s, 0, "interior", n->na, n->c);
  sb_printf(s, "}");
}

static void attr_reduce(sbuf *s, const tpuir_node *n) {
  sb_printf(s, " {kind=%s", tpuir__reduce_kind_name(n->kind));
  sb_ints(s, 0, "dims", n->na, n->a);
  sb_printf(s, "}");
}

static void attr_argreduce(sbuf *s, const tpuir_node *n) {
  sb_printf(s, " {kind=%s, dim=%d}", tpuir__reduce_kind_name(n->kind), (int)n->dim);
}

static void attr_sort(sbuf *s, const tpuir_node *n) {
  sb_printf(s, " {dim=%d, descending=%d, result=%s}", (int)n->dim, (int)n->a[0],
            n->kind == TPUIR_SORT_INDICES ? "indices" : "values");
}

static void attr_fft(sbuf *s, const tpuir_node *n) {
  static const char *const types[] = {"FFT", "IFFT", "RFFT", "IRFFT"};
  sb_printf(s, " {fft_type=%s", n->kind >= 0 && n->kind <= TPUIR_FFT_IRFFT ? types[n->kind] : "?");
  sb_ints(s, 0, "fft_length", n->na, n->a);
  sb_printf(s, "}");
}

static void attr_dot(sbuf *s, const tpuir_node *n) {
  sb_printf(s, " {");
  sb_ints(s, 1, "lhs_batch", n->na, n->a);
  sb_ints(s, 0, "rhs_batch", n->na, n->b);
  sb_ints(s, 0, "lhs_contract", n->nb, n->c);
  sb_ints(s, 0, "rhs_contract", n->nb, n->d);
  sb_printf(s, ", precision=%d}", (int)n->kind);
}

/* CONVOLUTION, REDUCE_WINDOW, WINDOW_ARGMAX (attribute layout: ir/conv.c) */
static void attr_window(sbuf *s, const tpuir_node *n) {
  int k = n->na;
  sb_printf(s, " {");
  if (n->op == TPUIR_CONVOLUTION) {
    sb_ints(s, 1, "stride", k, n->a);
    sb_ints(s, 0, "pad_lo", k, n->b);
    sb_ints(s, 0, "pad_hi", k, n->c);
    sb_ints(s, 0, "lhs_dilation", k, n->d);
    sb_ints(s, 0, "rhs_dilation", k, n->d + 8);
    sb_printf(s, ", feature_group_count=%d, precision=%d}", (int)n->dim, (int)n->kind);
    return;
  }
  int first = 1;
  if (n->op == TPUIR_REDUCE_WINDOW) {
    sb_printf(s, "kind=%s", n->kind == TPUIR_RED_MAX ? "max" : "sum");
    first = 0;
  }
  sb_ints(s, first, "window", k, n->a);
  sb_ints(s, 0, "stride", k, n->b);
  sb_ints(s, 0, "pad_lo", k, n->c);
  sb_ints(s, 0, "pad_hi", k, n->c + 8);
  sb_ints(s, 0, "dilation", k, n->d);
  if (n->op == TPUIR_WINDOW_ARGMAX) sb_printf(s, ", index_dims=%d", (int)n->dim);
  sb_printf(s, "}");
}

static void attr_eigh(sbuf *s, const tpuir_node *n) {
  sb_printf(s, " {uplo=%s, compute_v=%d, check_nan=%d}", n->kind ? "L" : "U", (int)n->dim,
            (int)n->a[0]);
}

static void attr_svd(sbuf *s, const tpuir_node *n) {
  sb_printf(s, " {compute_uv=%d, full_matrices=%d, check_nan=%d}", (int)n->kind, (int)n->dim,
            (int)n->a[0]);
}

/* dense linear algebra (attribute layout: ir/linalg.c) */
static void attr_linalg(sbuf *s, const tpuir_node *n) {
  static const char *const chol[] = {"factor", "info"};
  static const char *const lu[] = {"packed", "pivots", "info", "permutation"};
  static const char *const qr[] = {"packed", "tau"};
  static const char *const ldl[] = {"ld", "pivots", "info"};
  int r = n->dim;
  switch (n->op) {
  case TPUIR_CHOLESKY:
    sb_printf(s, " {lower=%d, check=%d, result=%s}", n->kind & 1, (n->kind >> 1) & 1,
              r >= 0 && r < 2 ? chol[r] : "?");
    break;
  case TPUIR_TRIANGULAR_SOLVE:
    sb_printf(s, " {left_side=%d, lower=%d, unit_diagonal=%d, transpose_a=%d}", n->kind & 1,
              (n->kind >> 1) & 1, (n->kind >> 2) & 1, (n->kind >> 3) & 1);
    break;
  case TPUIR_LU: sb_printf(s, " {result=%s}", r >= 0 && r < 4 ? lu[r] : "?"); break;
  case TPUIR_LU_PIVOTS_TO_PERM: sb_printf(s, " {m=%d}", r); break;
  case TPUIR_GEQRF: sb_printf(s, " {result=%s}", r >= 0 && r < 2 ? qr[r] : "?"); break;
  case TPUIR_LDL: sb_printf(s, " {result=%s}", r >= 0 && r < 3 ? ldl[r] : "?"); break;
  default: sb_printf(s, " {}"); break;
  }
}

static void attr_custom(sbuf *s, const tpuir_node *n) {
  sb_printf(s, " {kernel=%016llx, result=%d of %d}", (unsigned long long)n->a[0], (int)n->dim,
            (int)n->kind);
}

static void attr_attention(sbuf *s, const tpuir_node *n) {
  double scale;
  memcpy(&scale, &n->a[1], sizeof scale);
  sb_printf(s, " {scale=%g, causal=%d, precision=%d}", scale, (int)n->a[0], (int)n->kind);
}

typedef void (*attr_fn)(sbuf *, const tpuir_node *);
static const attr_fn k_attr[TPUIR_NUM_OPS] = {
#define ATTR_FN_(id, name, arity, cls, fails, attrs) [TPUIR_##id] = attr_##attrs,
    TPUIR_OPS(ATTR_FN_)
#undef ATTR_FN_
};

size_t tpuir_dump(const tpuir_graph *g, char *buf, size_t cap) {
  sbuf s = {buf, cap, 0};
  if (buf && cap) buf[0] = 0;
  int nn = tpuir_num_nodes(g);
  for (int v = 0; v < nn; v++) {
    const tpuir_node *n = tpuir_get_node(g, v);
    sb_printf(&s, "%%%d = %s(", v, tpuir_op_name(n->op));
    const tpuir_val *ops = n->nlist ? n->list : n->in; /* CONCAT, CUSTOM_CALL */
    int no = n->nlist ? n->nlist : n->nin;
    for (int i = 0; i < no; i++) sb_printf(&s, i ? ", %%%d" : "%%%d", (int)ops[i]);
    sb_printf(&s, ")");
    k_attr[n->op](&s, n);
    char ts[200];
    tpuir__type_str(ts, sizeof ts, n->dtype, n->ndim, n->sizes);
    sb_printf(&s, " : %s\n", ts);
  }
  sb_printf(&s, "return");
  int no = tpuir_num_outputs(g);
  for (int i = 0; i < no; i++) sb_printf(&s, i ? ", %%%d" : " %%%d", (int)tpuir_output(g, i));
  sb_printf(&s, "\n");
  return s.len;
}

/* lower/stablehlo.c - StableHLO text -> IR importer (tpulw_import_stablehlo).
 *
 * Input: a StableHLO module in MLIR's GENERIC textual form (what
 * `jax.jit(f).lower(...).compiler_ir("stablehlo").operation.get_asm(
 * print_generic_op_form=True)` prints; one grammar for every op:
 *   %r:2 = "dialect.op"(%a, %b#1) <{props}> ({regions}) {attrs} : (types) -> types
 * so a JAX release that changes an op's pretty printer does not break it).
 *
 * The module is parsed into an op tree, then `main` is EVALUATED
 * symbolically: every SSA value is either an IR value of the graph being
 * built or a small host constant (<= SH_HOST_MAX elements: loop counters,
 * grid indices, slice offsets). Ops whose operands are all host constants
 * are folded on the host; the rest become IR nodes. Control flow:
 *  - func.call inlines the callee;
 *  - stablehlo.while is UNROLLED: its condition must fold to a host
 *    constant on every iteration (static trip count: fori_loop, Pallas
 *    grids); a data-dependent condition is TPU_E_UNSUPPORTED
 *    (NotImplementedError), never a wrong result;
 *  - stablehlo.case with a host index picks the branch; with a device
 *    index every branch is built and the results are selected.
 * dynamic_slice / dynamic_update_slice with device indices become
 * index_select / select over iota masks (exact StableHLO clamping);
 * take-style gather -> index_select (indices clamped, as StableHLO does);
 * x.at[i].add scatter -> index_add (out-of-bounds updates skipped).
 */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lower/internal.h"
#include "tpu_graph.h"

#define SH_HOST_MAX 256          /* host-folded constants up to this numel */
#define SH_MAT_MAX (1 << 14)     /* non-splat constants materialised up to this */
#define SH_MAX_NODES 2000000     /* unrolling budget (IR nodes) */
#define SH_MAX_ARGS 64

/* ------------------------------------------------------------------ */
/* parsed module                                                        */

typedef struct sh_type {
  int dtype; /* tpu_dtype, -1 unsupported */
  int ndim;
  int64_t sizes[TPU_MAX_DIMS];
} sh_type;

typedef struct sh_region sh_region;
typedef struct sh_op {
  const char *name; int namelen;   /* "stablehlo.add" */
  int nres, res0;                  /* results: ids res0 .. res0+nres-1 */
  int nopd; int *opd;              /* operand ids */
  const char *props, *props_end;   /* "<{ ... }>" contents */
  int nreg; sh_region *reg;
  int nin; sh_type *tin;           /* operand types */
  int nout; sh_type *tout;         /* result types */
} sh_op;

struct sh_region {
  int nargs; int *args; sh_type *targs;
  int nops; sh_op *ops;
};

typedef struct sh_parser {
  const char *p, *end;
  /* SSA names -> ids */
  char **names; int *lens; int nnames, capnames;
  int *htab; int hcap;
  /* allocations */
  void **allocs; int nallocs, capallocs;
  int err;
} sh_parser;

static void *sp_alloc(sh_parser *P, size_t n) {
  if (P->nallocs == P->capallocs) {
    int nc = P->capallocs ? P->capallocs * 2 : 256;
    void **na = realloc(P->allocs, (size_t)nc * sizeof(void *));
    if (!na) return NULL;
    P->allocs = na; P->capallocs = nc;
  }
  void *m = calloc(1, n ? n : 1);
  if (m) P->allocs[P->nallocs++] = m;
  return m;
}

static int sp_fail(sh_parser *P, const char *what) {
  if (!P->err) {
    char ctx[48] = {0};
    size_t k = 0;
    for (const char *q = P->p; q < P->end && k < sizeof ctx - 1 && *q != '\n'; q++) ctx[k++] = *q;
    P->err = tpu_error(TPU_E_INVALID, "stablehlo import: parse error (%s) near '%s'", what, ctx);
  }
  return P->err;
}

static void sp_ws(sh_parser *P) {
  while (P->p < P->end) {
    if (isspace((unsigned char)*P->p)) P->p++;
    else if (P->p + 1 < P->end && P->p[0] == '/' && P->p[1] == '/') {
      while (P->p < P->end && *P->p != '\n') P->p++;
    } else break;
  }
}

static int sp_lit(sh_parser *P, const char *s) {
  sp_ws(P);
  size_t n = strlen(s);
  if ((size_t)(P->end - P->p) >= n && memcmp(P->p, s, n) == 0) { P->p += n; return 1; }
  return 0;
}

static uint32_t sp_hash(const char *s, int n) {
  uint32_t h = 2166136261u;
  for (int i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 16777619u;
  return h;
}

/* id of SSA name s[0..n) (created on first sight) */
static int sp_name(sh_parser *P, const char *s, int n) {
  if (P->nnames * 2 >= P->hcap) {
    int nc = P->hcap ? P->hcap * 2 : 1024;
    int *nt = malloc((size_t)nc * sizeof(int));
    if (!nt) return -1;
    for (int i = 0; i < nc; i++) nt[i] = -1;
    for (int i = 0; i < P->nnames; i++) {
      uint32_t h = sp_hash(P->names[i], P->lens[i]) & (uint32_t)(nc - 1);
      while (nt[h] >= 0) h = (h + 1) & (uint32_t)(nc - 1);
      nt[h] = i;
    }
    free(P->htab); P->htab = nt; P->hcap = nc;
  }
  uint32_t h = sp_hash(s, n) & (uint32_t)(P->hcap - 1);
  while (P->htab[h] >= 0) {
    int i = P->htab[h];
    if (P->lens[i] == n && memcmp(P->names[i], s, (size_t)n) == 0) return i;
    h = (h + 1) & (uint32_t)(P->hcap - 1);
  }
  if (P->nnames == P->capnames) {
    int nc = P->capnames ? P->capnames * 2 : 512;
    char **nn = realloc(P->names, (size_t)nc * sizeof(char *));
    if (!nn) return -1;
    P->names = nn;
    int *nl = realloc(P->lens, (size_t)nc * sizeof(int));
    if (!nl) return -1;
    P->lens = nl; P->capnames = nc;
  }
  P->names[P->nnames] = (char *)s; /* points into the text */
  P->lens[P->nnames] = n;
  P->htab[h] = P->nnames;
  return P->nnames++;
}

static int is_idch(char c) { return isalnum((unsigned char)c) || c == '_' || c == '.' || c == '$' || c == '-'; }

/* %name -> (start, len) */
static int sp_ssa(sh_parser *P, const char **s, int *n) {
  sp_ws(P);
  if (P->p >= P->end || *P->p != '%') return sp_fail(P, "expected %name");
  const char *q = P->p + 1;
  while (q < P->end && (isalnum((unsigned char)*q) || *q == '_' || *q == '.' || *q == '$')) q++;
  *s = P->p; *n = (int)(q - P->p);
  P->p = q;
  return 0;
}

static int64_t sp_int(sh_parser *P) {
  sp_ws(P);
  char *e;
  long long v = strtoll(P->p, &e, 10);
  if (e == P->p) { sp_fail(P, "expected integer"); return 0; }
  P->p = e;
  return v;
}

/* skip a balanced group starting at an opener; handles strings and "->" */
static int sp_skip_balanced(sh_parser *P) {
  int depth = 0;
  while (P->p < P->end) {
    char c = *P->p;
    if (c == '"') {
      P->p++;
      while (P->p < P->end && *P->p != '"') { if (*P->p == '\\') P->p++; P->p++; }
      P->p++;
      if (depth == 0) return 0;
      continue;
    }
    if (c == '(' || c == '[' || c == '{' || c == '<') depth++;
    else if (c == ')' || c == ']' || c == '}' || (c == '>' && P->p[-1] != '-')) {
      depth--;
      if (depth == 0) { P->p++; return 0; }
      if (depth < 0) return sp_fail(P, "unbalanced");
    }
    P->p++;
  }
  return sp_fail(P, "unterminated group");
}

static int elem_dtype(const char *s, int n) {
#define EQ(lit) (n == (int)sizeof(lit) - 1 && memcmp(s, lit, sizeof(lit) - 1) == 0)
  if (EQ("f32")) return TPU_F32;
  if (EQ("f64")) return TPU_F64;
  if (EQ("bf16")) return TPU_BF16;
  if (EQ("f16")) return TPU_F16;
  if (EQ("i1")) return TPU_BOOL;
  if (EQ("i8")) return TPU_I8;
  if (EQ("i16")) return TPU_I16;
  if (EQ("i32")) return TPU_I32;
  if (EQ("i64")) return TPU_I64;
  if (EQ("ui8")) return TPU_U8;
  if (EQ("complex<f32>")) return TPU_C64;
  if (EQ("complex<f64>")) return TPU_C128;
#undef EQ
  return -1;
}

/* tensor<AxBxf32> (or a non-tensor type: dtype -1) */
static int sp_type(sh_parser *P, sh_type *t) {
  sp_ws(P);
  memset(t, 0, sizeof *t);
  t->dtype = -1;
  if (!sp_lit(P, "tensor<")) {
    /* unsupported type (!stablehlo.token, tuple, ...): skip an identifier + group */
    while (P->p < P->end && (is_idch(*P->p) || *P->p == '!')) P->p++;
    if (P->p < P->end && *P->p == '<') return sp_skip_balanced(P);
    return 0;
  }
  for (;;) {
    sp_ws(P);
    if (isdigit((unsigned char)*P->p) || *P->p == '?') {
      if (*P->p == '?') { P->p++; t->ndim = TPU_MAX_DIMS + 1; }
      else {
        int64_t v = sp_int(P);
        if (t->ndim < TPU_MAX_DIMS) t->sizes[t->ndim] = v;
        t->ndim++;
      }
      if (*P->p == 'x') { P->p++; continue; }
      return sp_fail(P, "bad tensor type");
    }
    break;
  }
  const char *s = P->p;
  int depth = 0;
  while (P->p < P->end) {
    char c = *P->p;
    if (c == '<') depth++;
    else if (c == '>') { if (depth == 0) break; depth--; }
    else if (c == ',' && depth == 0) break;
    P->p++;
  }
  t->dtype = elem_dtype(s, (int)(P->p - s));
  if (t->ndim > TPU_MAX_DIMS) t->dtype = -1;
  if (*P->p == ',') { /* encoding attribute */
    P->p++;
    while (P->p < P->end && *P->p != '>') {
      if (*P->p == '<' || *P->p == '{' || *P->p == '[' || *P->p == '(') { if (sp_skip_balanced(P)) return P->err; }
      else P->p++;
    }
  }
  if (*P->p != '>') return sp_fail(P, "unterminated tensor type");
  P->p++;
  return 0;
}

/* '(' type, ... ')' or a single type */
static int sp_types(sh_parser *P, int *n, sh_type **ts) {
  sp_ws(P);
  int paren = sp_lit(P, "(");
  int cap = 8;
  sh_type *a = sp_alloc(P, (size_t)cap * sizeof(sh_type));
  int k = 0;
  if (!a) return tpu_error(TPU_E_OOM, "stablehlo import: out of memory");
  if (paren && sp_lit(P, ")")) { *n = 0; *ts = a; return 0; }
  for (;;) {
    if (k == cap) {
      sh_type *b = sp_alloc(P, (size_t)cap * 2 * sizeof(sh_type));
      if (!b) return tpu_error(TPU_E_OOM, "stablehlo import: out of memory");
      memcpy(b, a, (size_t)k * sizeof(sh_type));
      a = b; cap *= 2;
    }
    if (sp_type(P, &a[k++])) return P->err;
    sp_ws(P);
    if (P->p < P->end && *P->p == '{') { if (sp_skip_balanced(P)) return P->err; } /* arg attrs */
    if (!paren) break;
    if (sp_lit(P, ",")) continue;
    if (sp_lit(P, ")")) break;
    return sp_fail(P, "bad type list");
  }
  *n = k; *ts = a;
  return 0;
}

static int sp_region(sh_parser *P, sh_region *R);

/* one op (generic form) */
static int sp_op(sh_parser *P, sh_op *op) {
  memset(op, 0, sizeof *op);
  sp_ws(P);
  int resids[SH_MAX_ARGS * 4], nres = 0;
  if (*P->p == '%') {
    for (;;) {
      const char *s; int n;
      if (sp_ssa(P, &s, &n)) return P->err;
      int cnt = 1;
      if (sp_lit(P, ":")) cnt = (int)sp_int(P);
      for (int k = 0; k < cnt; k++) {
        if (nres >= (int)(sizeof resids / sizeof resids[0])) return sp_fail(P, "too many results");
        /* %r:2 -> names "%r#0", "%r#1": register as "%r" + index via
         * a synthetic key: use the base name id and offset below */
        resids[nres++] = k == 0 ? sp_name(P, s, n) : -2 - k;
      }
      if (!sp_lit(P, ",")) break;
    }
    if (!sp_lit(P, "=")) return sp_fail(P, "expected =");
  }
  sp_ws(P);
  if (*P->p != '"') return sp_fail(P, "expected \"op\"");
  const char *ns = ++P->p;
  while (P->p < P->end && *P->p != '"') P->p++;
  op->name = ns; op->namelen = (int)(P->p - ns);
  P->p++;
  /* results: the first name's id, the others synthetic "#k" names */
  op->nres = nres;
  if (nres) {
    /* ids for base#k: register "<base>#k" strings lazily as sp_alloc'd text */
    int base = resids[0];
    op->res0 = base;
    if (nres > 1) {
      /* allocate consecutive synthetic ids base#1.. */
      int *ids = sp_alloc(P, (size_t)nres * sizeof(int));
      if (!ids) return tpu_error(TPU_E_OOM, "stablehlo import: out of memory");
      ids[0] = base;
      for (int k = 1; k < nres; k++) {
        char *nm = sp_alloc(P, (size_t)P->lens[base] + 16);
        if (!nm) return tpu_error(TPU_E_OOM, "stablehlo import: out of memory");
        int len = snprintf(nm, (size_t)P->lens[base] + 16, "%.*s#%d", P->lens[base], P->names[base], k);
        ids[k] = sp_name(P, nm, len);
      }
      /* store the id list in opd-like side array: reuse tout later */
      op->res0 = -1;
      op->opd = ids; /* temporarily */
    }
  }
  int *resid_list = op->res0 == -1 ? op->opd : NULL;
  op->opd = NULL;
  /* operands */
  if (!sp_lit(P, "(")) return sp_fail(P, "expected (");
  int opd[SH_MAX_ARGS * 4], nopd = 0;
  if (!sp_lit(P, ")")) {
    for (;;) {
      const char *s; int n;
      if (sp_ssa(P, &s, &n)) return P->err;
      int id;
      if (P->p < P->end && *P->p == '#') {
        P->p++;
        int64_t k = sp_int(P);
        if (k == 0) id = sp_name(P, s, n);
        else {
          char nm[128];
          int len = snprintf(nm, sizeof nm, "%.*s#%d", n, s, (int)k);
          char *c = sp_alloc(P, (size_t)len + 1);
          if (!c) return tpu_error(TPU_E_OOM, "stablehlo import: out of memory");
          memcpy(c, nm, (size_t)len);
          id = sp_name(P, c, len);
        }
      } else id = sp_name(P, s, n);
      if (nopd >= (int)(sizeof opd / sizeof opd[0])) return sp_fail(P, "too many operands");
      opd[nopd++] = id;
      if (sp_lit(P, ",")) continue;
      if (sp_lit(P, ")")) break;
      return sp_fail(P, "bad operand list");
    }
  }
  op->nopd = nopd;
  op->opd = sp_alloc(P, (size_t)(nopd + 1) * sizeof(int));
  if (!op->opd) return tpu_error(TPU_E_OOM, "stablehlo import: out of memory");
  memcpy(op->opd, opd, (size_t)nopd * sizeof(int));
  sp_ws(P);
  if (*P->p == '[') { if (sp_skip_balanced(P)) return P->err; sp_ws(P); } /* successors */
  if (P->p + 1 < P->end && P->p[0] == '<' && P->p[1] == '{') {
    const char *s = P->p;
    if (sp_skip_balanced(P)) return P->err;
    op->props = s + 2; op->props_end = P->p - 2;
    sp_ws(P);
  }
  if (*P->p == '(') { /* regions */
    P->p++;
    int cap = 4;
    op->reg = sp_alloc(P, (size_t)cap * sizeof(sh_region));
    if (!op->reg) return tpu_error(TPU_E_OOM, "stablehlo import: out of memory");
    for (;;) {
      if (op->nreg == cap) {
        sh_region *nr = sp_alloc(P, (size_t)cap * 2 * sizeof(sh_region));
        if (!nr) return tpu_error(TPU_E_OOM, "stablehlo import: out of memory");
        memcpy(nr, op->reg, (size_t)cap * sizeof(sh_region));
        op->reg = nr; cap *= 2;
      }
      if (sp_region(P, &op->reg[op->nreg++])) return P->err;
      if (sp_lit(P, ",")) continue;
      if (sp_lit(P, ")")) break;
      return sp_fail(P, "bad region list");
    }
    sp_ws(P);
  }
  if (*P->p == '{') { if (sp_skip_balanced(P)) return P->err; sp_ws(P); } /* attr dict */
  if (!sp_lit(P, ":")) return sp_fail(P, "expected : type");
  if (sp_types(P, &op->nin, &op->tin)) return P->err;
  if (!sp_lit(P, "->")) return sp_fail(P, "expected ->");
  if (sp_types(P, &op->nout, &op->tout)) return P->err;
  sp_ws(P);
  if (sp_lit(P, "loc(")) { P->p--; if (sp_skip_balanced(P)) return P->err; }
  /* result ids: res0 .. via list */
  if (nres > 1) {
    /* remap: store ids in a side array appended after operands */
    int *all = sp_alloc(P, (size_t)(nopd + nres + 1) * sizeof(int));
    if (!all) return tpu_error(TPU_E_OOM, "stablehlo import: out of memory");
    memcpy(all, op->opd, (size_t)nopd * sizeof(int));
    memcpy(all + nopd, resid_list, (size_t)nres * sizeof(int));
    op->opd = all;
    op->res0 = -1;
  } else if (nres == 1) {
    /* single result: res0 already */
    int *all = sp_alloc(P, (size_t)(nopd + 2) * sizeof(int));
    if (!all) return tpu_error(TPU_E_OOM, "stablehlo import: out of memory");
    memcpy(all, op->opd, (size_t)nopd * sizeof(int));
    all[nopd] = op->res0;
    op->opd = all;
  }
  return 0;
}

/* result id k of op */
static int op_res(const sh_op *op, int k) { return op->opd[op->nopd + k]; }

static int sp_region(sh_parser *P, sh_region *R) {
  memset(R, 0, sizeof *R);
  if (!sp_lit(P, "{")) return sp_fail(P, "expected {");
  if (sp_lit(P, "^")) {
    while (P->p < P->end && is_idch(*P->p)) P->p++;
    if (sp_lit(P, "(")) {
      int cap = 8;
      R->args = sp_alloc(P, (size_t)cap * sizeof(int));
      R->targs = sp_alloc(P, (size_t)cap * sizeof(sh_type));
      if (!R->args || !R->targs) return tpu_error(TPU_E_OOM, "stablehlo import: out of memory");
      if (!sp_lit(P, ")")) {
        for (;;) {
          if (R->nargs == cap) {
            int *na = sp_alloc(P, (size_t)cap * 2 * sizeof(int));
            sh_type *nt = sp_alloc(P, (size_t)cap * 2 * sizeof(sh_type));
            if (!na || !nt) return tpu_error(TPU_E_OOM, "stablehlo import: out of memory");
            memcpy(na, R->args, (size_t)cap * sizeof(int));
            memcpy(nt, R->targs, (size_t)cap * sizeof(sh_type));
            R->args = na; R->targs = nt; cap *= 2;
          }
          const char *s; int n;
          if (sp_ssa(P, &s, &n)) return P->err;
          R->args[R->nargs] = sp_name(P, s, n);
          if (!sp_lit(P, ":")) return sp_fail(P, "expected : in block args");
          if (sp_type(P, &R->targs[R->nargs])) return P->err;
          R->nargs++;
          sp_ws(P);
          if (*P->p == '{') { if (sp_skip_balanced(P)) return P->err; }
          if (sp_lit(P, "loc(")) { P->p--; if (sp_skip_balanced(P)) return P->err; }
          if (sp_lit(P, ",")) continue;
          if (sp_lit(P, ")")) break;
          return sp_fail(P, "bad block args");
        }
      }
    }
    if (!sp_lit(P, ":")) return sp_fail(P, "expected : after block label");
  }
  int cap = 16;
  R->ops = sp_alloc(P, (size_t)cap * sizeof(sh_op));
  if (!R->ops) return tpu_error(TPU_E_OOM, "stablehlo import: out of memory");
  for (;;) {
    if (sp_lit(P, "}")) break;
    if (P->p >= P->end) return sp_fail(P, "unterminated region");
    if (*P->p == '^') return sp_fail(P, "multi-block regions are not supported");
    if (R->nops == cap) {
      sh_op *no = sp_alloc(P, (size_t)cap * 2 * sizeof(sh_op));
      if (!no) return tpu_error(TPU_E_OOM, "stablehlo import: out of memory");
      memcpy(no, R->ops, (size_t)cap * sizeof(sh_op));
      R->ops = no; cap *= 2;
    }
    if (sp_op(P, &R->ops[R->nops++])) return P->err;
  }
  return 0;
}

static int op_is(const sh_op *op, const char *name) {
  return op->namelen == (int)strlen(name) && memcmp(op->name, name, (size_t)op->namelen) == 0;
}

/* ---- property lookup: pointer to the value text of `key = ...` ------- */
static const char *prop(const sh_op *op, const char *key) {
  if (!op->props) return NULL;
  size_t kl = strlen(key);
  const char *p = op->props;
  int depth = 0;
  while (p < op->props_end) {
    char c = *p;
    if (c == '"') { p++; while (p < op->props_end && *p != '"') { if (*p == '\\') p++; p++; } p++; continue; }
    if (c == '(' || c == '[' || c == '{' || c == '<') depth++;
    else if (c == ')' || c == ']' || c == '}' || (c == '>' && p[-1] != '-')) depth--;
    else if (depth == 0 && (p == op->props || p[-1] == ' ' || p[-1] == ',') &&
             (size_t)(op->props_end - p) > kl + 2 && memcmp(p, key, kl) == 0 && p[kl] == ' ' &&
             p[kl + 1] == '=') {
      p += kl + 2;
      while (*p == ' ') p++;
      return p;
    }
    p++;
  }
  return NULL;
}

/* copy the value text of `key` (one balanced attribute) into buf */
static int prop_copy(const sh_op *op, const char *key, char *buf, size_t cap) {
  const char *s = prop(op, key);
  if (!s) return 0;
  size_t n = 0;
  int depth = 0;
  while (s + n < op->props_end && n + 1 < cap) {
    char c = s[n];
    if (c == '(' || c == '[' || c == '{' || c == '<') depth++;
    else if (c == ')' || c == ']' || c == '}' || (c == '>' && n && s[n - 1] != '-')) {
      if (--depth < 0) break;
    } else if (c == ',' && depth == 0) break;
    n++;
  }
  memcpy(buf, s, n);
  buf[n] = 0;
  return 1;
}

/* array<i64: 1, 2> or [1, 2] or dense<[...]> -> ints; returns count or -1 */
static int parse_ints(const char *s, int64_t *out, int cap) {
  if (!s) return -1;
  if (strncmp(s, "array<i64", 9) == 0) {
    s += 9;
    if (*s == '>') return 0;
    if (*s != ':') return -1;
    s++;
  } else if (strncmp(s, "dense<", 6) == 0) s += 6;
  int n = 0;
  while (*s == ' ' || *s == '[') s++;
  while (*s && *s != '>' && *s != '}') {
    while (*s == ' ' || *s == '[' || *s == ']' || *s == ',') s++;
    if (*s == '>' || *s == '}' || !*s) break;
    char *e;
    long long v = strtoll(s, &e, 10);
    if (e == s) break;
    if (n < cap) out[n] = v;
    n++;
    s = e;
    while (*s == ']' ) s++;
    if (*s == ' ' && s[1] == ':') break;
  }
  return n;
}

static int64_t parse_int1(const char *s, int64_t dflt) {
  if (!s) return dflt;
  return strtoll(s, NULL, 10);
}

/* ------------------------------------------------------------------ */
/* evaluation                                                           */

typedef struct hv {
  int set;
  int dtype, ndim;
  int64_t sizes[TPU_MAX_DIMS];
  int64_t numel;
  tpuir_val v;      /* -1: not materialised */
  double *hd;       /* host data (floats) */
  int64_t *hi;      /* host data (ints / bool) */
  int iota_dim;     /* >= 0: value is an iota along this dim (argmax pattern) */
} hv;

typedef struct sh_func { const char *name; int namelen; sh_region *body; } sh_func;

typedef struct sh_ctx {
  sh_parser *P;
  tpuir_graph *g;
  int precision;
  sh_func *funcs; int nfuncs;
  int depth;
} sh_ctx;

static int is_host(const hv *x) { return x->hd || x->hi; }
static int isf(int dt) { return tpu_dtype_is_float(dt); }

static int64_t numel_of(int ndim, const int64_t *s) {
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) n *= s[i];
  return n;
}

static double round_to(int dt, double v) {
  switch (dt) {
    case TPU_F32: return (double)(float)v;
    case TPU_BF16: return (double)tpu_bf16_to_f32(tpu_f32_to_bf16((float)v));
    case TPU_F16: return (double)tpu_f16_to_f32(tpu_f32_to_f16((float)v));
    default: return v;
  }
}

static int64_t wrap_to(int dt, int64_t v) {
  switch (dt) {
    case TPU_BOOL: return v != 0;
    case TPU_U8: return (uint8_t)v;
    case TPU_I8: return (int8_t)(uint8_t)v;
    case TPU_I16: return (int16_t)(uint16_t)v;
    case TPU_I32: return (int32_t)(uint32_t)v;
    default: return v;
  }
}

static int hv_alloc_host(sh_ctx *C, hv *x) {
  if (isf(x->dtype)) x->hd = sp_alloc(C->P, (size_t)(x->numel ? x->numel : 1) * sizeof(double));
  else x->hi = sp_alloc(C->P, (size_t)(x->numel ? x->numel : 1) * sizeof(int64_t));
  if (!x->hd && !x->hi) return tpu_error(TPU_E_OOM, "stablehlo import: out of memory");
  return 0;
}

static void hv_from_type(hv *x, const sh_type *t) {
  memset(x, 0, sizeof *x);
  x->set = 1;
  x->dtype = t->dtype; x->ndim = t->ndim;
  memcpy(x->sizes, t->sizes, sizeof x->sizes);
  x->numel = numel_of(t->ndim, t->sizes);
  x->v = -1;
  x->iota_dim = -1;
}

static double hget_f(const hv *x, int64_t i) { return x->hd ? x->hd[i] : (double)x->hi[i]; }
static int64_t hget_i(const hv *x, int64_t i) { return x->hi ? x->hi[i] : (int64_t)x->hd[i]; }

static int ck(tpuir_val v) { return v < 0 ? (int)v : 0; }

/* make x an IR value */
static int materialize(sh_ctx *C, hv *x) {
  if (x->v >= 0) return 0;
  if (!is_host(x)) return tpu_error(TPU_E_INTERNAL, "stablehlo import: value without data");
  int splat = 1;
  for (int64_t i = 1; i < x->numel && splat; i++)
    splat = isf(x->dtype) ? (memcmp(&x->hd[i], &x->hd[0], sizeof(double)) == 0) : x->hi[i] == x->hi[0];
  tpuir_val v;
  if (splat || x->numel <= 1) {
    if (x->numel == 0) { /* empty: any value broadcast to 0 elements */
      v = isf(x->dtype) ? tpuir_const_f(C->g, x->dtype, 0) : tpuir_const_i(C->g, x->dtype, 0);
    } else {
      v = isf(x->dtype) ? tpuir_const_f(C->g, x->dtype, x->hd[0]) : tpuir_const_i(C->g, x->dtype, x->hi[0]);
    }
    if (ck(v)) return v;
    if (x->ndim > 0) {
      v = tpuir_broadcast_in_dim(C->g, v, x->ndim, x->sizes, NULL);
      if (ck(v)) return v;
    }
  } else {
    if (x->numel > SH_MAT_MAX)
      return tpu_error(TPU_E_UNSUPPORTED, "stablehlo import: dense constant of %lld elements "
                       "(at most %d are supported)", (long long)x->numel, SH_MAT_MAX);
    tpuir_val *parts = malloc((size_t)x->numel * sizeof(tpuir_val));
    if (!parts) return tpu_error(TPU_E_OOM, "stablehlo import: out of memory");
    int64_t one = 1;
    for (int64_t i = 0; i < x->numel; i++) {
      tpuir_val c = isf(x->dtype) ? tpuir_const_f(C->g, x->dtype, x->hd[i]) : tpuir_const_i(C->g, x->dtype, x->hi[i]);
      if (c >= 0) c = tpuir_reshape(C->g, c, 1, &one);
      if (c < 0) { free(parts); return c; }
      parts[i] = c;
    }
    v = tpuir_concat(C->g, (int)x->numel, parts, 0);
    free(parts);
    if (ck(v)) return v;
    v = tpuir_reshape(C->g, v, x->ndim, x->sizes);
    if (ck(v)) return v;
  }
  x->v = v;
  return 0;
}

/* ---- dense<...> literal ---------------------------------------------- */
static int parse_dense(sh_ctx *C, const char *s, hv *x) {
  if (!s || strncmp(s, "dense<", 6) != 0)
    return tpu_error(TPU_E_UNSUPPORTED, "stablehlo import: unsupported constant literal '%.40s'", s ? s : "");
  s += 6;
  int fl = isf(x->dtype);
  int esz = (int)tpu_dtype_size(x->dtype);
  if (x->dtype < 0 || tpu_dtype_is_complex(x->dtype))
    return tpu_error(TPU_E_UNSUPPORTED, "stablehlo import: unsupported constant dtype");
  if (x->numel > SH_MAT_MAX)
    return tpu_error(TPU_E_UNSUPPORTED, "stablehlo import: dense constant of %lld elements "
                     "(at most %d are supported)", (long long)x->numel, SH_MAT_MAX);
  if (hv_alloc_host(C, x)) return TPU_E_OOM;
  if (*s == '"') { /* hex blob of raw little-endian elements */
    s++;
    if (s[0] != '0' || s[1] != 'x') return tpu_error(TPU_E_UNSUPPORTED, "stablehlo import: bad hex constant");
    s += 2;
    int64_t nbytes = 0;
    while (isxdigit((unsigned char)s[nbytes])) nbytes++;
    nbytes /= 2;
    int64_t cnt = nbytes / esz;
    if (cnt != 1 && cnt != x->numel) return tpu_error(TPU_E_INVALID, "stablehlo import: hex constant size mismatch");
    for (int64_t i = 0; i < x->numel; i++) {
      int64_t e = cnt == 1 ? 0 : i;
      uint64_t bits = 0;
      for (int b = 0; b < esz; b++) {
        unsigned v;
        sscanf(s + 2 * (e * esz + b), "%2x", &v);
        bits |= (uint64_t)v << (8 * b);
      }
      if (fl) {
        double d;
        if (x->dtype == TPU_F32) { float f; uint32_t u = (uint32_t)bits; memcpy(&f, &u, 4); d = f; }
        else if (x->dtype == TPU_F64) memcpy(&d, &bits, 8);
        else if (x->dtype == TPU_BF16) d = tpu_bf16_to_f32((uint16_t)bits);
        else d = tpu_f16_to_f32((uint16_t)bits);
        x->hd[i] = d;
      } else {
        int64_t v = (int64_t)bits;
        x->hi[i] = x->dtype == TPU_BOOL ? (bits != 0) : wrap_to(x->dtype, v);
        if (x->dtype == TPU_I64) x->hi[i] = (int64_t)bits;
      }
    }
    return 0;
  }
  int64_t n = 0;
  const char *p = s;
  for (;;) {
    while (*p == ' ' || *p == '[' || *p == ']' || *p == ',' || *p == '\n') p++;
    if (*p == '>' || !*p) break;
    if (n >= x->numel && n > 0) return tpu_error(TPU_E_INVALID, "stablehlo import: constant has too many elements");
    double d = 0; int64_t iv = 0;
    if (strncmp(p, "true", 4) == 0) { iv = 1; d = 1; p += 4; }
    else if (strncmp(p, "false", 5) == 0) { p += 5; }
    else if (p[0] == '0' && p[1] == 'x') {
      uint64_t bits = strtoull(p + 2, (char **)&p, 16);
      if (x->dtype == TPU_F32) { float f; uint32_t u = (uint32_t)bits; memcpy(&f, &u, 4); d = f; }
      else if (x->dtype == TPU_F64) memcpy(&d, &bits, 8);
      else if (x->dtype == TPU_BF16) d = tpu_bf16_to_f32((uint16_t)bits);
      else if (x->dtype == TPU_F16) d = tpu_f16_to_f32((uint16_t)bits);
      iv = (int64_t)bits;
    } else if (fl) {
      char *e; d = strtod(p, &e);
      if (e == p) return tpu_error(TPU_E_UNSUPPORTED, "stablehlo import: bad constant '%.20s'", p);
      p = e;
    } else {
      char *e; iv = strtoll(p, &e, 10);
      if (e == p) return tpu_error(TPU_E_UNSUPPORTED, "stablehlo import: bad constant '%.20s'", p);
      p = e;
    }
    if (n < x->numel) { if (fl) x->hd[n] = round_to(x->dtype, d); else x->hi[n] = wrap_to(x->dtype, iv); }
    n++;
  }
  if (n == 1) {
    for (int64_t i = 1; i < x->numel; i++) { if (fl) x->hd[i] = x->hd[0]; else x->hi[i] = x->hi[0]; }
  } else if (n != x->numel) return tpu_error(TPU_E_INVALID, "stablehlo import: constant has %lld elements, type %lld",
                                              (long long)n, (long long)x->numel);
  return 0;
}

/* ---- op tables --------------------------------------------------------- */
typedef struct { const char *name; int op; } opmap;
static const opmap k_unary[] = {
  {"stablehlo.negate", TPUIR_NEG}, {"stablehlo.abs", TPUIR_ABS}, {"stablehlo.sign", TPUIR_SIGN},
  {"stablehlo.exponential", TPUIR_EXP}, {"stablehlo.exponential_minus_one", TPUIR_EXPM1},
  {"stablehlo.log", TPUIR_LOG}, {"stablehlo.log_plus_one", TPUIR_LOG1P}, {"stablehlo.sqrt", TPUIR_SQRT},
  {"stablehlo.rsqrt", TPUIR_RSQRT}, {"stablehlo.sine", TPUIR_SIN}, {"stablehlo.cosine", TPUIR_COS},
  {"stablehlo.tan", TPUIR_TAN}, {"chlo.tan", TPUIR_TAN}, {"stablehlo.tanh", TPUIR_TANH},
  {"chlo.asin", TPUIR_ASIN}, {"chlo.acos", TPUIR_ACOS}, {"chlo.atan", TPUIR_ATAN}, {"chlo.sinh", TPUIR_SINH},
  {"chlo.cosh", TPUIR_COSH}, {"chlo.asinh", TPUIR_ASINH}, {"chlo.acosh", TPUIR_ACOSH}, {"chlo.atanh", TPUIR_ATANH},
  {"stablehlo.logistic", TPUIR_LOGISTIC}, {"chlo.erf", TPUIR_ERF}, {"chlo.erf_inv", TPUIR_ERFINV},
  {"chlo.lgamma", TPUIR_LGAMMA}, {"chlo.digamma", TPUIR_DIGAMMA}, {"stablehlo.floor", TPUIR_FLOOR},
  {"stablehlo.ceil", TPUIR_CEIL}, {"stablehlo.round_nearest_even", TPUIR_ROUND_EVEN},
  {"stablehlo.not", TPUIR_NOT}, {"stablehlo.is_finite", TPUIR_IS_FINITE}, {"chlo.is_inf", TPUIR_IS_INF},
  {NULL, 0}};
static const opmap k_binary[] = {
  {"stablehlo.add", TPUIR_ADD}, {"stablehlo.subtract", TPUIR_SUB}, {"stablehlo.multiply", TPUIR_MUL},
  {"stablehlo.divide", TPUIR_DIV}, {"stablehlo.remainder", TPUIR_REM}, {"stablehlo.power", TPUIR_POW},
  {"stablehlo.maximum", TPUIR_MAX}, {"stablehlo.minimum", TPUIR_MIN}, {"stablehlo.atan2", TPUIR_ATAN2},
  {"stablehlo.and", TPUIR_AND}, {"stablehlo.or", TPUIR_OR}, {"stablehlo.xor", TPUIR_XOR},
  {"stablehlo.shift_left", TPUIR_SHL}, {"stablehlo.shift_right_arithmetic", TPUIR_SHR},
  {"chlo.next_after", TPUIR_NEXTAFTER}, {"chlo.zeta", TPUIR_ZETA},
  {NULL, 0}};

static int lookup(const opmap *m, const sh_op *op) {
  for (int i = 0; m[i].name; i++) if (op_is(op, m[i].name)) return m[i].op;
  return -1;
}

/* ---- host folding of elementwise ops ---------------------------------- */
static int fold_unary(int op, int dt, const hv *a, hv *r) {
  for (int64_t i = 0; i < r->numel; i++) {
    if (isf(dt)) {
      double x = hget_f(a, i), y;
      switch (op) {
        case TPUIR_NEG: y = -x; break;
        case TPUIR_ABS: y = fabs(x); break;
        case TPUIR_SIGN: y = isnan(x) ? x : (x > 0) - (x < 0); break;
        case TPUIR_FLOOR: y = floor(x); break;
        case TPUIR_CEIL: y = ceil(x); break;
        case TPUIR_SQRT: y = sqrt(x); break;
        default: return 1;
      }
      r->hd[i] = round_to(dt, y);
    } else {
      int64_t x = hget_i(a, i), y;
      switch (op) {
        case TPUIR_NEG: y = (int64_t)(0 - (uint64_t)x); break;
        case TPUIR_ABS: y = x < 0 ? (int64_t)(0 - (uint64_t)x) : x; break;
        case TPUIR_SIGN: y = (x > 0) - (x < 0); break;
        case TPUIR_NOT: y = dt == TPU_BOOL ? !x : ~x; break;
        default: return 1;
      }
      r->hi[i] = wrap_to(dt, y);
    }
  }
  return 0;
}

static int fold_binary(int op, int dt, const hv *a, const hv *b, hv *r) {
  for (int64_t i = 0; i < r->numel; i++) {
    if (isf(dt)) {
      double x = hget_f(a, i), y = hget_f(b, i), z;
      switch (op) {
        case TPUIR_ADD: z = x + y; break;
        case TPUIR_SUB: z = x - y; break;
        case TPUIR_MUL: z = x * y; break;
        case TPUIR_DIV: z = x / y; break;
        case TPUIR_REM: z = fmod(x, y); break;
        case TPUIR_MAX: z = isnan(x) || isnan(y) ? NAN : (x > y ? x : y); break;
        case TPUIR_MIN: z = isnan(x) || isnan(y) ? NAN : (x < y ? x : y); break;
        default: return 1;
      }
      r->hd[i] = round_to(dt, z);
    } else {
      int64_t x = hget_i(a, i), y = hget_i(b, i), z;
      int bits = (int)tpu_dtype_size(dt) * 8;
      switch (op) {
        case TPUIR_ADD: z = (int64_t)((uint64_t)x + (uint64_t)y); break;
        case TPUIR_SUB: z = (int64_t)((uint64_t)x - (uint64_t)y); break;
        case TPUIR_MUL: z = (int64_t)((uint64_t)x * (uint64_t)y); break;
        case TPUIR_DIV: z = y == 0 ? -1 : (x == INT64_MIN && y == -1) ? x : x / y; break;
        case TPUIR_REM: z = y == 0 ? x : (y == -1) ? 0 : x % y; break;
        case TPUIR_MAX: z = x > y ? x : y; break;
        case TPUIR_MIN: z = x < y ? x : y; break;
        case TPUIR_AND: z = x & y; break;
        case TPUIR_OR: z = x | y; break;
        case TPUIR_XOR: z = x ^ y; break;
        case TPUIR_SHL: z = (y < 0 || y >= bits) ? 0 : (int64_t)((uint64_t)x << y); break;
        case TPUIR_SHR: z = (y < 0 || y >= bits) ? (x < 0 ? -1 : 0) : x >> y; break;
        default: return 1;
      }
      r->hi[i] = wrap_to(dt, z);
    }
  }
  return 0;
}

static int cmp_dir(const sh_op *op) {
  const char *d = prop(op, "comparison_direction");
  if (!d) return -1;
  const char *s = strstr(d, "comparison_direction ");
  if (!s) return -1;
  s += 21;
  if (!strncmp(s, "EQ", 2)) return TPUIR_EQ;
  if (!strncmp(s, "NE", 2)) return TPUIR_NE;
  if (!strncmp(s, "LT", 2)) return TPUIR_LT;
  if (!strncmp(s, "LE", 2)) return TPUIR_LE;
  if (!strncmp(s, "GT", 2)) return TPUIR_GT;
  if (!strncmp(s, "GE", 2)) return TPUIR_GE;
  return -1;
}

static int fold_cmp(int op, const hv *a, const hv *b, hv *r) {
  int fl = isf(a->dtype);
  for (int64_t i = 0; i < r->numel; i++) {
    int z;
    if (fl) {
      double x = hget_f(a, i), y = hget_f(b, i);
      switch (op) {
        case TPUIR_EQ: z = x == y; break; case TPUIR_NE: z = x != y; break;
        case TPUIR_LT: z = x < y; break; case TPUIR_LE: z = x <= y; break;
        case TPUIR_GT: z = x > y; break; default: z = x >= y; break;
      }
    } else {
      int64_t x = hget_i(a, i), y = hget_i(b, i);
      switch (op) {
        case TPUIR_EQ: z = x == y; break; case TPUIR_NE: z = x != y; break;
        case TPUIR_LT: z = x < y; break; case TPUIR_LE: z = x <= y; break;
        case TPUIR_GT: z = x > y; break; default: z = x >= y; break;
      }
    }
    r->hi[i] = z;
  }
  return 0;
}

/* broadcast a rank-0 IR value / hv to shape of r (for scalar operands) */
static int bcast_scalar(sh_ctx *C, hv *x, const hv *like) {
  if (x->ndim == like->ndim) return 0;
  if (x->ndim != 0) return tpu_error(TPU_E_INVALID, "stablehlo import: operand rank mismatch");
  if (is_host(x) && like->numel <= SH_HOST_MAX) {
    hv y = *x;
    y.ndim = like->ndim; memcpy(y.sizes, like->sizes, sizeof y.sizes);
    y.numel = like->numel; y.v = -1; y.hd = NULL; y.hi = NULL;
    if (hv_alloc_host(C, &y)) return TPU_E_OOM;
    for (int64_t i = 0; i < y.numel; i++) { if (y.hd) y.hd[i] = hget_f(x, 0); else y.hi[i] = hget_i(x, 0); }
    *x = y;
    return 0;
  }
  int rc = materialize(C, x);
  if (rc) return rc;
  tpuir_val v = tpuir_broadcast_in_dim(C->g, x->v, like->ndim, like->sizes, NULL);
  if (ck(v)) return v;
  hv y = *x;
  y.ndim = like->ndim; memcpy(y.sizes, like->sizes, sizeof y.sizes); y.numel = like->numel;
  y.v = v; y.hd = NULL; y.hi = NULL;
  *x = y;
  return 0;
}

static tpuir_val ir_i64_scalar(sh_ctx *C, hv *x) {
  /* rank-0 index operand -> int64 IR value */
  if (materialize(C, x)) return tpu_last_error_code() ? tpu_last_error_code() : TPU_E_INTERNAL;
  tpuir_val v = x->v;
  if (x->dtype != TPU_I64) v = tpuir_convert(C->g, v, TPU_I64);
  return v;
}

/* ---- the evaluator ------------------------------------------------------ */
typedef struct sh_env { hv *vals; int n; } sh_env;

static int eval_region(sh_ctx *C, sh_env *E, const sh_region *R, int nargs, const hv *args, int *nret, hv **ret);

static int env_get(sh_env *E, int id, hv *out) {
  if (id < 0 || id >= E->n || !E->vals[id].set)
    return tpu_error(TPU_E_INVALID, "stablehlo import: use of an undefined value");
  *out = E->vals[id];
  return 0;
}

static int call_func(sh_ctx *C, const char *name, int namelen, int nargs, const hv *args, int *nret, hv **ret) {
  for (int i = 0; i < C->nfuncs; i++) {
    if (C->funcs[i].namelen == namelen && memcmp(C->funcs[i].name, name, (size_t)namelen) == 0) {
      if (++C->depth > 200) return tpu_error(TPU_E_UNSUPPORTED, "stablehlo import: call depth > 200 (recursion?)");
      sh_env E;
      E.n = C->P->nnames;
      E.vals = calloc((size_t)E.n, sizeof(hv));
      if (!E.vals) return tpu_error(TPU_E_OOM, "stablehlo import: out of memory");
      int rc = eval_region(C, &E, C->funcs[i].body, nargs, args, nret, ret);
      free(E.vals);
      C->depth--;
      return rc;
    }
  }
  return tpu_error(TPU_E_INVALID, "stablehlo import: call of unknown function @%.*s", namelen, name);
}

/* reduce body -> reduce kind (single binary op on the two block args) */
static int reduce_kind(const sh_region *R) {
  if (R->nops != 2 || R->nargs != 2) return -1;
  const sh_op *o = &R->ops[0];
  if (o->nopd != 2) return -1;
  if (op_is(o, "stablehlo.add")) return TPUIR_RED_SUM;
  if (op_is(o, "stablehlo.multiply")) return TPUIR_RED_PROD;
  if (op_is(o, "stablehlo.maximum")) return TPUIR_RED_MAX;
  if (op_is(o, "stablehlo.minimum")) return TPUIR_RED_MIN;
  if (op_is(o, "stablehlo.and")) return TPUIR_RED_AND;
  if (op_is(o, "stablehlo.or")) return TPUIR_RED_OR;
  return -1;
}

static int kind_binop(int kind) {
  switch (kind) {
    case TPUIR_RED_SUM: return TPUIR_ADD;
    case TPUIR_RED_PROD: return TPUIR_MUL;
    case TPUIR_RED_MAX: return TPUIR_MAX;
    case TPUIR_RED_MIN: return TPUIR_MIN;
    case TPUIR_RED_AND: return TPUIR_AND;
    default: return TPUIR_OR;
  }
}

static int is_identity(int kind, const hv *init) {
  if (!is_host(init)) return 0;
  if (isf(init->dtype)) {
    double v = hget_f(init, 0);
    switch (kind) {
      case TPUIR_RED_SUM: return v == 0;
      case TPUIR_RED_PROD: return v == 1;
      case TPUIR_RED_MAX: return isinf(v) && v < 0;
      case TPUIR_RED_MIN: return isinf(v) && v > 0;
      default: return 0;
    }
  }
  int64_t v = hget_i(init, 0);
  int bits = (int)tpu_dtype_size(init->dtype) * 8;
  int64_t lo = init->dtype == TPU_U8 || init->dtype == TPU_BOOL ? 0 : (bits == 64 ? INT64_MIN : -((int64_t)1 << (bits - 1)));
  int64_t hi = init->dtype == TPU_BOOL ? 1 : init->dtype == TPU_U8 ? 255 : (bits == 64 ? INT64_MAX : ((int64_t)1 << (bits - 1)) - 1);
  switch (kind) {
    case TPUIR_RED_SUM: return v == 0;
    case TPUIR_RED_PROD: return v == 1;
    case TPUIR_RED_MAX: return v == lo;
    case TPUIR_RED_MIN: return v == hi;
    case TPUIR_RED_AND: return v == 1;
    case TPUIR_RED_OR: return v == 0;
  }
  return 0;
}

/* combine r (IR value of type `t`) with a non-identity init */
static int combine_init(sh_ctx *C, int kind, hv *init, const sh_type *t, tpuir_val *r) {
  if (is_identity(kind, init)) return 0;
  int rc = materialize(C, init);
  if (rc) return rc;
  tpuir_val b = init->v;
  if (t->ndim > 0) { b = tpuir_broadcast_in_dim(C->g, b, t->ndim, t->sizes, NULL); if (ck(b)) return b; }
  tpuir_val v = tpuir_binary(C->g, kind_binop(kind), *r, b);
  if (ck(v)) return v;
  *r = v;
  return 0;
}

/* region uses any block arg beyond the first two? (sort comparators) */
static int region_refs_args(const sh_region *R, int from) {
  for (int i = 0; i < R->nops; i++)
    for (int k = 0; k < R->ops[i].nopd; k++)
      for (int a = from; a < R->nargs; a++)
        if (R->ops[i].opd[k] == R->args[a]) return 1;
  return 0;
}

#define UNSUP(...) return tpu_error(TPU_E_UNSUPPORTED, __VA_ARGS__)

static int eval_op(sh_ctx *C, sh_env *E, const sh_op *op, hv *res /* op->nres */) {
  hv a[SH_MAX_ARGS];
  int n = op->nopd;
  if (n > SH_MAX_ARGS && !op_is(op, "stablehlo.while") && !op_is(op, "func.call") && !op_is(op, "call"))
    UNSUP("stablehlo import: %.*s with %d operands", op->namelen, op->name, n);
  hv *args = n > SH_MAX_ARGS ? calloc((size_t)n, sizeof(hv)) : a;
  if (!args) return tpu_error(TPU_E_OOM, "stablehlo import: out of memory");
  int rc = 0;
  for (int i = 0; i < n && !rc; i++) rc = env_get(E, op->opd[i], &args[i]);
  for (int i = 0; i < op->nres && i < op->nout; i++) {
    hv_from_type(&res[i], &op->tout[i]);
    if (op->tout[i].dtype < 0 && !rc)
      rc = tpu_error(TPU_E_UNSUPPORTED, "stablehlo import: %.*s: unsupported result type (unsigned ints wider "
                     "than 8 bits, tokens, tuples and dynamic shapes are not supported)", op->namelen, op->name);
  }
  if (rc) goto done;
  hv *r = &res[0];
  tpuir_graph *g = C->g;
  int u, b;
  tpuir_val v = -1;

  if (op_is(op, "stablehlo.constant")) {
    rc = parse_dense(C, prop(op, "value"), r);
    if (!rc && r->numel > SH_HOST_MAX) rc = materialize(C, r), r->hd = NULL, r->hi = NULL;
    goto done;
  }
  if ((u = lookup(k_unary, op)) >= 0) {
    if (is_host(&args[0]) && r->numel <= SH_HOST_MAX) {
      if ((rc = hv_alloc_host(C, r))) goto done;
      if (!fold_unary(u, r->dtype, &args[0], r)) goto done;
      r->hd = NULL; r->hi = NULL;
    }
    if ((rc = materialize(C, &args[0]))) goto done;
    v = tpuir_unary(g, u, args[0].v);
    goto setv;
  }
  if ((b = lookup(k_binary, op)) >= 0) {
    if (is_host(&args[0]) && is_host(&args[1]) && r->numel <= SH_HOST_MAX) {
      if ((rc = hv_alloc_host(C, r))) goto done;
      if (!fold_binary(b, r->dtype, &args[0], &args[1], r)) goto done;
      r->hd = NULL; r->hi = NULL;
    }
    if ((rc = materialize(C, &args[0])) || (rc = materialize(C, &args[1]))) goto done;
    if (b == TPUIR_NEXTAFTER || b == TPUIR_ZETA) v = tpuir_special_binary(g, b, args[0].v, args[1].v);
    else v = tpuir_binary(g, b, args[0].v, args[1].v);
    goto setv;
  }
  if (op_is(op, "chlo.square")) {
    if ((rc = materialize(C, &args[0]))) goto done;
    v = tpuir_binary(g, TPUIR_MUL, args[0].v, args[0].v);
    goto setv;
  }
  if (op_is(op, "chlo.erfc")) {
    /* x >= 0: erfcx(x) exp(-x^2); x < 0: 2 - erfcx(-x) exp(-x^2) (no cancellation, no overflow) */
    if ((rc = materialize(C, &args[0]))) goto done;
    tpuir_val x = args[0].v, ax = tpuir_unary(g, TPUIR_ABS, x);
    tpuir_val e = tpuir_binary(g, TPUIR_MUL, tpuir_special_unary(g, TPUIR_ERFCX, ax),
                               tpuir_unary(g, TPUIR_EXP, tpuir_unary(g, TPUIR_NEG, tpuir_binary(g, TPUIR_MUL, x, x))));
    tpuir_val two = tpuir_const_f(g, r->dtype, 2.0), zero = tpuir_const_f(g, r->dtype, 0.0);
    if (r->ndim) {
      two = tpuir_broadcast_in_dim(g, two, r->ndim, r->sizes, NULL);
      zero = tpuir_broadcast_in_dim(g, zero, r->ndim, r->sizes, NULL);
    }
    v = tpuir_select(g, tpuir_binary(g, TPUIR_LT, x, zero), tpuir_binary(g, TPUIR_SUB, two, e), e);
    goto setv;
  }
  if (op_is(op, "stablehlo.round_nearest_afz")) {
    /* trunc(x) + sign(x) where |x - trunc(x)| >= 0.5 (exact) */
    if ((rc = materialize(C, &args[0]))) goto done;
    tpuir_val x = args[0].v, t = tpuir_unary(g, TPUIR_TRUNC, x);
    tpuir_val d = tpuir_unary(g, TPUIR_ABS, tpuir_binary(g, TPUIR_SUB, x, t));
    tpuir_val h = tpuir_broadcast_in_dim(g, tpuir_const_f(g, r->dtype, 0.5), r->ndim, r->sizes, NULL);
    tpuir_val up = tpuir_binary(g, TPUIR_ADD, t, tpuir_unary(g, TPUIR_SIGN, x));
    v = tpuir_select(g, tpuir_binary(g, TPUIR_GE, d, h), up, t);
    goto setv;
  }
  if (op_is(op, "stablehlo.compare")) {
    int cdir = cmp_dir(op);
    if (cdir < 0) { rc = tpu_error(TPU_E_INVALID, "stablehlo import: compare without direction"); goto done; }
    const char *ct = prop(op, "compare_type");
    int uns = ct && !strncmp(ct, "#stablehlo<comparison_type UNSIGNED>", 36) && tpu_dtype_is_int(args[0].dtype) &&
              args[0].dtype != TPU_U8;
    /* unsigned order of signed storage: flip the sign bit, compare signed */
    int64_t flip = uns ? (int64_t)((uint64_t)1 << (tpu_dtype_size(args[0].dtype) * 8 - 1)) : 0;
    if (is_host(&args[0]) && is_host(&args[1]) && r->numel <= SH_HOST_MAX) {
      if ((rc = hv_alloc_host(C, r))) goto done;
      if (uns) {
        hv fa = args[0], fb = args[1];
        fa.hi = sp_alloc(C->P, (size_t)fa.numel * sizeof(int64_t) + 8);
        fb.hi = sp_alloc(C->P, (size_t)fb.numel * sizeof(int64_t) + 8);
        if (!fa.hi || !fb.hi) { rc = tpu_error(TPU_E_OOM, "stablehlo import: out of memory"); goto done; }
        for (int64_t i = 0; i < fa.numel; i++) fa.hi[i] = wrap_to(fa.dtype, hget_i(&args[0], i) ^ flip);
        for (int64_t i = 0; i < fb.numel; i++) fb.hi[i] = wrap_to(fb.dtype, hget_i(&args[1], i) ^ flip);
        fold_cmp(cdir, &fa, &fb, r);
      } else fold_cmp(cdir, &args[0], &args[1], r);
      goto done;
    }
    if ((rc = materialize(C, &args[0])) || (rc = materialize(C, &args[1]))) goto done;
    tpuir_val ca = args[0].v, cb = args[1].v;
    if (uns) {
      int64_t fl = args[0].dtype == TPU_I64 ? INT64_MIN : -flip;
      tpuir_val f = tpuir_const_i(g, args[0].dtype, fl);
      if (args[0].ndim) f = tpuir_broadcast_in_dim(g, f, args[0].ndim, args[0].sizes, NULL);
      ca = tpuir_binary(g, TPUIR_XOR, ca, f);
      cb = tpuir_binary(g, TPUIR_XOR, cb, f);
    }
    v = tpuir_binary(g, cdir, ca, cb);
    goto setv;
  }
  if (op_is(op, "stablehlo.select")) {
    if ((rc = bcast_scalar(C, &args[0], r))) goto done;
    if (is_host(&args[0]) && is_host(&args[1]) && is_host(&args[2]) && r->numel <= SH_HOST_MAX) {
      if ((rc = hv_alloc_host(C, r))) goto done;
      for (int64_t i = 0; i < r->numel; i++) {
        const hv *s = hget_i(&args[0], i) ? &args[1] : &args[2];
        if (r->hd) r->hd[i] = hget_f(s, i); else r->hi[i] = hget_i(s, i);
      }
      goto done;
    }
    if (is_host(&args[0]) && args[0].numel >= 1) { /* uniform host predicate: pick */
      int all1 = 1, all0 = 1;
      for (int64_t i = 0; i < args[0].numel; i++) { if (hget_i(&args[0], i)) all0 = 0; else all1 = 0; }
      if (all1 || all0) { *r = args[all1 ? 1 : 2]; goto done; }
    }
    for (int k = 0; k < 3; k++) if ((rc = materialize(C, &args[k]))) goto done;
    v = tpuir_select(g, args[0].v, args[1].v, args[2].v);
    goto setv;
  }
  if (op_is(op, "stablehlo.clamp")) {
    hv lo = args[0], x = args[1], hi = args[2];
    if ((rc = bcast_scalar(C, &lo, &x)) || (rc = bcast_scalar(C, &hi, &x))) goto done;
    if (is_host(&lo) && is_host(&x) && is_host(&hi) && r->numel <= SH_HOST_MAX) {
      if ((rc = hv_alloc_host(C, r))) goto done;
      hv t = *r; t.hd = NULL; t.hi = NULL;
      if ((rc = hv_alloc_host(C, &t))) goto done;
      fold_binary(TPUIR_MAX, r->dtype, &x, &lo, &t);
      fold_binary(TPUIR_MIN, r->dtype, &t, &hi, r);
      goto done;
    }
    if ((rc = materialize(C, &lo)) || (rc = materialize(C, &x)) || (rc = materialize(C, &hi))) goto done;
    v = tpuir_binary(g, TPUIR_MIN, tpuir_binary(g, TPUIR_MAX, x.v, lo.v), hi.v);
    goto setv;
  }
  if (op_is(op, "stablehlo.convert")) {
    if (is_host(&args[0]) && r->numel <= SH_HOST_MAX) {
      if ((rc = hv_alloc_host(C, r))) goto done;
      for (int64_t i = 0; i < r->numel; i++) {
        if (r->hd) r->hd[i] = round_to(r->dtype, hget_f(&args[0], i));
        else if (r->dtype == TPU_BOOL) r->hi[i] = isf(args[0].dtype) ? hget_f(&args[0], i) != 0 : hget_i(&args[0], i) != 0;
        else if (isf(args[0].dtype)) {
          double d = hget_f(&args[0], i);
          r->hi[i] = isnan(d) ? 0 : wrap_to(r->dtype, (int64_t)trunc(d));
        } else r->hi[i] = wrap_to(r->dtype, hget_i(&args[0], i));
      }
      goto done;
    }
    if ((rc = materialize(C, &args[0]))) goto done;
    v = args[0].dtype == r->dtype ? args[0].v : tpuir_convert(g, args[0].v, r->dtype);
    goto setv;
  }
  if (op_is(op, "stablehlo.optimization_barrier")) {
    for (int i = 0; i < op->nres; i++) res[i] = args[i];
    goto done;
  }
  if (op_is(op, "stablehlo.bitcast_convert") && args[0].dtype == r->dtype && args[0].ndim == r->ndim) {
    *r = args[0];
    goto done;
  }
  if (op_is(op, "stablehlo.iota")) {
    int d = (int)parse_int1(prop(op, "iota_dimension"), 0);
    if (r->numel <= SH_HOST_MAX) {
      if ((rc = hv_alloc_host(C, r))) goto done;
      for (int64_t i = 0; i < r->numel; i++) {
        int64_t rem = i, idx = 0;
        for (int k = r->ndim - 1; k >= 0; k--) { int64_t c = rem % r->sizes[k]; rem /= r->sizes[k]; if (k == d) idx = c; }
        if (r->hd) r->hd[i] = (double)idx; else r->hi[i] = wrap_to(r->dtype, idx);
      }
    } else {
      v = tpuir_iota(g, r->dtype, r->ndim, r->sizes, d);
      if ((rc = ck(v))) goto done;
      r->v = v;
    }
    r->iota_dim = d;
    goto done;
  }
  if (op_is(op, "stablehlo.broadcast_in_dim")) {
    int64_t dims[TPU_MAX_DIMS];
    int nd = parse_ints(prop(op, "broadcast_dimensions"), dims, TPU_MAX_DIMS);
    if (nd != args[0].ndim) { rc = tpu_error(TPU_E_INVALID, "stablehlo import: bad broadcast_dimensions"); goto done; }
    if (is_host(&args[0]) && r->numel <= SH_HOST_MAX) {
      if ((rc = hv_alloc_host(C, r))) goto done;
      for (int64_t i = 0; i < r->numel; i++) {
        int64_t idx[TPU_MAX_DIMS], rem = i, src = 0;
        for (int k = r->ndim - 1; k >= 0; k--) { idx[k] = rem % r->sizes[k]; rem /= r->sizes[k]; }
        for (int k = 0; k < nd; k++) src = src * args[0].sizes[k] + (args[0].sizes[k] == 1 ? 0 : idx[dims[k]]);
        if (r->hd) r->hd[i] = hget_f(&args[0], src); else r->hi[i] = hget_i(&args[0], src);
      }
      goto done;
    }
    if ((rc = materialize(C, &args[0]))) goto done;
    if (args[0].ndim == r->ndim && memcmp(args[0].sizes, r->sizes, sizeof(int64_t) * (size_t)r->ndim) == 0) {
      int id = 1;
      for (int k = 0; k < nd; k++) if (dims[k] != k) id = 0;
      if (id) { r->v = args[0].v; goto done; }
    }
    v = tpuir_broadcast_in_dim(g, args[0].v, r->ndim, r->sizes, dims);
    goto setv;
  }
  if (op_is(op, "stablehlo.reshape")) {
    if (is_host(&args[0]) && r->numel <= SH_HOST_MAX) {
      r->hd = args[0].hd; r->hi = args[0].hi;
      goto done;
    }
    if ((rc = materialize(C, &args[0]))) goto done;
    v = tpuir_reshape(g, args[0].v, r->ndim, r->sizes);
    goto setv;
  }
  if (op_is(op, "stablehlo.transpose")) {
    int64_t perm[TPU_MAX_DIMS];
    if (parse_ints(prop(op, "permutation"), perm, TPU_MAX_DIMS) != r->ndim) {
      rc = tpu_error(TPU_E_INVALID, "stablehlo import: bad permutation"); goto done;
    }
    if ((rc = materialize(C, &args[0]))) goto done;
    v = tpuir_transpose(g, args[0].v, perm);
    goto setv;
  }
  if (op_is(op, "stablehlo.slice")) {
    int64_t st[TPU_MAX_DIMS], li[TPU_MAX_DIMS], sd[TPU_MAX_DIMS];
    int n1 = parse_ints(prop(op, "start_indices"), st, TPU_MAX_DIMS);
    int n2 = parse_ints(prop(op, "limit_indices"), li, TPU_MAX_DIMS);
    int n3 = parse_ints(prop(op, "strides"), sd, TPU_MAX_DIMS);
    if (n1 != args[0].ndim || n2 != n1 || n3 != n1) { rc = tpu_error(TPU_E_INVALID, "stablehlo import: bad slice"); goto done; }
    if (is_host(&args[0]) && r->numel <= SH_HOST_MAX) {
      if ((rc = hv_alloc_host(C, r))) goto done;
      for (int64_t i = 0; i < r->numel; i++) {
        int64_t rem = i, src = 0, idx[TPU_MAX_DIMS];
        for (int k = r->ndim - 1; k >= 0; k--) { idx[k] = rem % r->sizes[k]; rem /= r->sizes[k]; }
        for (int k = 0; k < r->ndim; k++) src = src * args[0].sizes[k] + st[k] + idx[k] * sd[k];
        if (r->hd) r->hd[i] = hget_f(&args[0], src); else r->hi[i] = hget_i(&args[0], src);
      }
      goto done;
    }
    if ((rc = materialize(C, &args[0]))) goto done;
    v = tpuir_slice(g, args[0].v, st, li, sd);
    goto setv;
  }
  if (op_is(op, "stablehlo.concatenate")) {
    int d = (int)parse_int1(prop(op, "dimension"), 0);
    tpuir_val xs[SH_MAX_ARGS];
    for (int i = 0; i < n; i++) { if ((rc = materialize(C, &args[i]))) goto done; xs[i] = args[i].v; }
    v = tpuir_concat(g, n, xs, d);
    goto setv;
  }
  if (op_is(op, "stablehlo.pad")) {
    int64_t lo[TPU_MAX_DIMS], hi[TPU_MAX_DIMS], in[TPU_MAX_DIMS];
    parse_ints(prop(op, "edge_padding_low"), lo, TPU_MAX_DIMS);
    parse_ints(prop(op, "edge_padding_high"), hi, TPU_MAX_DIMS);
    parse_ints(prop(op, "interior_padding"), in, TPU_MAX_DIMS);
    if ((rc = materialize(C, &args[0])) || (rc = materialize(C, &args[1]))) goto done;
    v = tpuir_pad(g, args[0].v, args[1].v, lo, hi, in);
    goto setv;
  }
  if (op_is(op, "stablehlo.reverse")) {
    int64_t dims[TPU_MAX_DIMS];
    int nd = parse_ints(prop(op, "dimensions"), dims, TPU_MAX_DIMS);
    if ((rc = materialize(C, &args[0]))) goto done;
    v = tpuir_reverse(g, args[0].v, nd, dims);
    goto setv;
  }
  if (op_is(op, "stablehlo.dot_general")) {
    char dn[512];
    if (!prop_copy(op, "dot_dimension_numbers", dn, sizeof dn)) { rc = tpu_error(TPU_E_INVALID, "stablehlo import: dot_general without dimension numbers"); goto done; }
    int64_t lb[TPU_MAX_DIMS], rb[TPU_MAX_DIMS], lc[TPU_MAX_DIMS], rcd[TPU_MAX_DIMS];
    int nlb = 0, nrb = 0, nlc = 0, nrc = 0;
    const char *q;
    if ((q = strstr(dn, "lhs_batching_dimensions = "))) nlb = parse_ints(q + 26, lb, TPU_MAX_DIMS);
    if ((q = strstr(dn, "rhs_batching_dimensions = "))) nrb = parse_ints(q + 26, rb, TPU_MAX_DIMS);
    if ((q = strstr(dn, "lhs_contracting_dimensions = "))) nlc = parse_ints(q + 29, lc, TPU_MAX_DIMS);
    if ((q = strstr(dn, "rhs_contracting_dimensions = "))) nrc = parse_ints(q + 29, rcd, TPU_MAX_DIMS);
    if (nlb != nrb || nlc != nrc) { rc = tpu_error(TPU_E_INVALID, "stablehlo import: bad dot dimension numbers"); goto done; }
    int prec = C->precision;
    char pc[256];
    if (prop_copy(op, "precision_config", pc, sizeof pc)) {
      if (strstr(pc, "HIGHEST")) prec = TPU_PREC_HIGHEST;
      else if (strstr(pc, "HIGH") && prec < TPU_PREC_HIGH) prec = TPU_PREC_HIGH;
    }
    if ((rc = materialize(C, &args[0])) || (rc = materialize(C, &args[1]))) goto done;
    tpuir_val l = args[0].v, rr = args[1].v;
    if (args[0].dtype != args[1].dtype) { /* mixed operand dtypes: promote to the result's */
      l = tpuir_convert(g, l, r->dtype); rr = tpuir_convert(g, rr, r->dtype);
    }
    v = tpuir_dot_general(g, l, rr, nlb, lb, rb, nlc, lc, rcd, prec, r->dtype);
    goto setv;
  }
  if (op_is(op, "stablehlo.reduce")) {
    int ninp = n / 2;
    int64_t dims[TPU_MAX_DIMS];
    int nd = parse_ints(prop(op, "dimensions"), dims, TPU_MAX_DIMS);
    if (op->nreg != 1) { rc = tpu_error(TPU_E_INVALID, "stablehlo import: reduce without body"); goto done; }
    const sh_region *body = &op->reg[0];
    if (ninp == 1) {
      int kind = reduce_kind(body);
      if (kind < 0) UNSUP("stablehlo import: reduce with a custom body is not supported");
      if ((rc = materialize(C, &args[0]))) goto done;
      v = tpuir_reduce(g, kind, args[0].v, nd, dims);
      if ((rc = ck(v))) goto done;
      if ((rc = combine_init(C, kind, &args[1], &op->tout[0], &v))) goto done;
      r->v = v;
      goto done;
    }
    /* argmax / argmin: (values, iota along the reduced dim) */
    if (ninp == 2 && nd == 1 && args[1].iota_dim == (int)dims[0]) {
      int dir = -1;
      for (int i = 0; i < body->nops; i++) {
        if (op_is(&body->ops[i], "stablehlo.compare")) {
          int d2 = cmp_dir(&body->ops[i]);
          if (d2 == TPUIR_GT || d2 == TPUIR_LT) { dir = d2; break; }
        }
      }
      if (dir < 0) UNSUP("stablehlo import: variadic reduce with a custom body is not supported");
      int kind = dir == TPUIR_GT ? TPUIR_RED_MAX : TPUIR_RED_MIN;
      if ((rc = materialize(C, &args[0]))) goto done;
      tpuir_val mv = tpuir_reduce(g, kind, args[0].v, 1, dims);
      if ((rc = ck(mv))) goto done;
      tpuir_val iv = tpuir_argreduce(g, kind, args[0].v, (int)dims[0]);
      if ((rc = ck(iv))) goto done;
      if (res[1].dtype != TPU_I64) iv = tpuir_convert(g, iv, res[1].dtype);
      if ((rc = ck(iv))) goto done;
      res[0].v = mv; res[1].v = iv;
      goto done;
    }
    UNSUP("stablehlo import: variadic reduce (%d operands) is not supported", ninp);
  }
  if (op_is(op, "stablehlo.reduce_window")) {
    if (n != 2 || op->nreg != 1) UNSUP("stablehlo import: variadic reduce_window is not supported");
    int kind = reduce_kind(&op->reg[0]);
    if (kind != TPUIR_RED_SUM && kind != TPUIR_RED_MAX && kind != TPUIR_RED_MIN)
      UNSUP("stablehlo import: reduce_window supports add/max/min bodies");
    int rk = args[0].ndim;
    int64_t win[TPU_MAX_DIMS], str[TPU_MAX_DIMS], bd[TPU_MAX_DIMS], wd[TPU_MAX_DIMS], pad[2 * TPU_MAX_DIMS];
    int64_t plo[TPU_MAX_DIMS], phi[TPU_MAX_DIMS];
    for (int k = 0; k < rk; k++) { str[k] = bd[k] = wd[k] = 1; plo[k] = phi[k] = 0; }
    parse_ints(prop(op, "window_dimensions"), win, TPU_MAX_DIMS);
    parse_ints(prop(op, "window_strides"), str, TPU_MAX_DIMS);
    parse_ints(prop(op, "base_dilations"), bd, TPU_MAX_DIMS);
    parse_ints(prop(op, "window_dilations"), wd, TPU_MAX_DIMS);
    int np = parse_ints(prop(op, "padding"), pad, 2 * TPU_MAX_DIMS);
    for (int k = 0; k < rk && np == 2 * rk; k++) { plo[k] = pad[2 * k]; phi[k] = pad[2 * k + 1]; }
    for (int k = 0; k < rk; k++) if (bd[k] != 1) UNSUP("stablehlo import: reduce_window base dilation");
    if ((rc = materialize(C, &args[0]))) goto done;
    tpuir_val x = args[0].v;
    if (kind == TPUIR_RED_MIN) x = tpuir_unary(g, TPUIR_NEG, x);
    v = tpuir_reduce_window(g, kind == TPUIR_RED_SUM ? TPUIR_RED_SUM : TPUIR_RED_MAX, x, win, str, plo, phi, wd);
    if ((rc = ck(v))) goto done;
    if (kind == TPUIR_RED_MIN) v = tpuir_unary(g, TPUIR_NEG, v);
    if ((rc = ck(v))) goto done;
    if ((rc = combine_init(C, kind, &args[1], &op->tout[0], &v))) goto done;
    r->v = v;
    goto done;
  }
  if (op_is(op, "stablehlo.sort")) {
    int d = (int)parse_int1(prop(op, "dimension"), 0);
    if (op->nreg != 1) { rc = tpu_error(TPU_E_INVALID, "stablehlo import: sort without comparator"); goto done; }
    const sh_region *cmp = &op->reg[0];
    if (region_refs_args(cmp, 2)) UNSUP("stablehlo import: sort comparing more than the first operand is not supported");
    const sh_op *last = cmp->nops >= 2 ? &cmp->ops[cmp->nops - 2] : NULL;
    int dir = last && op_is(last, "stablehlo.compare") ? cmp_dir(last) : -1;
    if (dir != TPUIR_LT && dir != TPUIR_GT) UNSUP("stablehlo import: sort comparator must end in a LT/GT compare");
    /* the compare's first operand must derive from arg0 (a < b ascending) */
    int desc = dir == TPUIR_GT;
    if (last->opd[0] == cmp->args[1] || last->opd[1] == cmp->args[0]) desc = !desc;
    if ((rc = materialize(C, &args[0]))) goto done;
    if (n == 1) { v = tpuir_sort(g, args[0].v, d, desc, TPUIR_SORT_VALUES); goto setv; }
    tpuir_val idx = tpuir_sort(g, args[0].v, d, desc, TPUIR_SORT_INDICES);
    if ((rc = ck(idx))) goto done;
    for (int i = 0; i < n; i++) {
      if ((rc = materialize(C, &args[i]))) goto done;
      tpuir_val o = tpuir_gather(g, args[i].v, d, idx);
      if ((rc = ck(o))) goto done;
      res[i].v = o;
    }
    goto done;
  }
  if (op_is(op, "stablehlo.dynamic_slice")) {
    int64_t sz[TPU_MAX_DIMS];
    hv *x = &args[0];
    int rk = x->ndim;
    if (parse_ints(prop(op, "slice_sizes"), sz, TPU_MAX_DIMS) != rk || n != rk + 1) {
      rc = tpu_error(TPU_E_INVALID, "stablehlo import: bad dynamic_slice"); goto done;
    }
    int64_t st[TPU_MAX_DIMS], li[TPU_MAX_DIMS], sd[TPU_MAX_DIMS];
    for (int k = 0; k < rk; k++) {
      sd[k] = 1;
      if (is_host(&args[1 + k])) {
        int64_t s = hget_i(&args[1 + k], 0);
        if (s < 0) s = 0;
        if (s > x->sizes[k] - sz[k]) s = x->sizes[k] - sz[k];
        st[k] = s;
      } else st[k] = -1;
      li[k] = st[k] + sz[k];
    }
    int dyn = 0;
    for (int k = 0; k < rk; k++) if (st[k] < 0) dyn = 1;
    if (!dyn && is_host(x) && r->numel <= SH_HOST_MAX) {
      if ((rc = hv_alloc_host(C, r))) goto done;
      for (int64_t i = 0; i < r->numel; i++) {
        int64_t rem = i, src = 0, idx[TPU_MAX_DIMS];
        for (int k = rk - 1; k >= 0; k--) { idx[k] = rem % r->sizes[k]; rem /= r->sizes[k]; }
        for (int k = 0; k < rk; k++) src = src * x->sizes[k] + st[k] + idx[k];
        if (r->hd) r->hd[i] = hget_f(x, src); else r->hi[i] = hget_i(x, src);
      }
      goto done;
    }
    if ((rc = materialize(C, x))) goto done;
    tpuir_val cur = x->v;
    /* static dims first */
    int64_t st2[TPU_MAX_DIMS], li2[TPU_MAX_DIMS];
    for (int k = 0; k < rk; k++) {
      st2[k] = st[k] < 0 ? 0 : st[k];
      li2[k] = st[k] < 0 ? x->sizes[k] : li[k];
    }
    cur = tpuir_slice(g, cur, st2, li2, sd);
    for (int k = 0; k < rk && !ck(cur); k++) {
      if (st[k] >= 0) continue;
      /* idx = clamp(start, 0, N - size) + iota(size) */
      tpuir_val s = ir_i64_scalar(C, &args[1 + k]);
      if ((rc = ck(s))) goto done;
      s = tpuir_binary(g, TPUIR_MAX, s, tpuir_const_i(g, TPU_I64, 0));
      s = tpuir_binary(g, TPUIR_MIN, s, tpuir_const_i(g, TPU_I64, x->sizes[k] - sz[k]));
      tpuir_val io = tpuir_iota(g, TPU_I64, 1, &sz[k], 0);
      tpuir_val idx = tpuir_binary(g, TPUIR_ADD, io, tpuir_broadcast_in_dim(g, s, 1, &sz[k], NULL));
      cur = tpuir_index_select(g, cur, k, idx);
    }
    v = cur;
    goto setv;
  }
  if (op_is(op, "stablehlo.dynamic_update_slice")) {
    hv *x = &args[0], *up = &args[1];
    int rk = x->ndim;
    if (n != rk + 2) { rc = tpu_error(TPU_E_INVALID, "stablehlo import: bad dynamic_update_slice"); goto done; }
    if ((rc = materialize(C, x)) || (rc = materialize(C, up))) goto done;
    int full = 1;
    for (int k = 0; k < rk; k++) if (up->sizes[k] != x->sizes[k]) full = 0;
    if (full) { r->v = up->v; goto done; }
    int allhost = 1;
    for (int k = 0; k < rk; k++) if (!is_host(&args[2 + k])) allhost = 0;
    if (allhost) {
      int64_t lo[TPU_MAX_DIMS], hi[TPU_MAX_DIMS], in[TPU_MAX_DIMS];
      for (int k = 0; k < rk; k++) {
        int64_t s = hget_i(&args[2 + k], 0);
        if (s < 0) s = 0;
        if (s > x->sizes[k] - up->sizes[k]) s = x->sizes[k] - up->sizes[k];
        lo[k] = s; hi[k] = x->sizes[k] - up->sizes[k] - s; in[k] = 0;
      }
      /* out = select(mask, pad(update), x) with mask = pad(true) */
      tpuir_val zero = isf(x->dtype) ? tpuir_const_f(g, x->dtype, 0) : tpuir_const_i(g, x->dtype, 0);
      tpuir_val pu = tpuir_pad(g, up->v, zero, lo, hi, in);
      tpuir_val t = tpuir_broadcast_in_dim(g, tpuir_const_i(g, TPU_BOOL, 1), rk, up->sizes, NULL);
      tpuir_val m = tpuir_pad(g, t, tpuir_const_i(g, TPU_BOOL, 0), lo, hi, in);
      v = tpuir_select(g, m, pu, x->v);
      goto setv;
    }
    /* device start indices: per dim, gather the update rows and mask */
    tpuir_val cur = up->v, mask = -1;
    for (int k = 0; k < rk; k++) {
      int64_t N = x->sizes[k], S = up->sizes[k];
      tpuir_val s = ir_i64_scalar(C, &args[2 + k]);
      if ((rc = ck(s))) goto done;
      s = tpuir_binary(g, TPUIR_MAX, s, tpuir_const_i(g, TPU_I64, 0));
      s = tpuir_binary(g, TPUIR_MIN, s, tpuir_const_i(g, TPU_I64, N - S));
      tpuir_val io = tpuir_iota(g, TPU_I64, 1, &N, 0);
      tpuir_val sb = tpuir_broadcast_in_dim(g, s, 1, &N, NULL);
      tpuir_val rel = tpuir_binary(g, TPUIR_SUB, io, sb);
      tpuir_val ge = tpuir_binary(g, TPUIR_GE, rel, tpuir_broadcast_in_dim(g, tpuir_const_i(g, TPU_I64, 0), 1, &N, NULL));
      tpuir_val lt = tpuir_binary(g, TPUIR_LT, rel, tpuir_broadcast_in_dim(g, tpuir_const_i(g, TPU_I64, S), 1, &N, NULL));
      tpuir_val mk = tpuir_binary(g, TPUIR_AND, ge, lt);
      tpuir_val idx = tpuir_binary(g, TPUIR_MIN, tpuir_binary(g, TPUIR_MAX, rel,
                          tpuir_broadcast_in_dim(g, tpuir_const_i(g, TPU_I64, 0), 1, &N, NULL)),
                          tpuir_broadcast_in_dim(g, tpuir_const_i(g, TPU_I64, S - 1), 1, &N, NULL));
      cur = tpuir_index_select(g, cur, k, idx);
      int64_t dk = k;
      tpuir_val mb = tpuir_broadcast_in_dim(g, mk, rk, x->sizes, &dk);
      mask = mask < 0 ? mb : tpuir_binary(g, TPUIR_AND, mask, mb);
      if ((rc = ck(mask)) || (rc = ck(cur))) goto done;
    }
    v = tpuir_select(g, mask, cur, x->v);
    goto setv;
  }
  if (op_is(op, "stablehlo.gather")) {
    char dn[512];
    int64_t off[TPU_MAX_DIMS], col[TPU_MAX_DIMS], sim[TPU_MAX_DIMS], ss[TPU_MAX_DIMS], obd[TPU_MAX_DIMS];
    int noff = 0, ncol = 0, nsim = 0, nobd = 0;
    const char *q;
    if (!prop_copy(op, "dimension_numbers", dn, sizeof dn)) { rc = tpu_error(TPU_E_INVALID, "stablehlo import: gather without dimension numbers"); goto done; }
    if ((q = strstr(dn, "offset_dims = "))) noff = parse_ints(q + 14, off, TPU_MAX_DIMS);
    if ((q = strstr(dn, "collapsed_slice_dims = "))) ncol = parse_ints(q + 23, col, TPU_MAX_DIMS);
    if ((q = strstr(dn, "operand_batching_dims = "))) nobd = parse_ints(q + 24, obd, TPU_MAX_DIMS);
    if ((q = strstr(dn, "start_index_map = "))) nsim = parse_ints(q + 18, sim, TPU_MAX_DIMS);
    int64_t ivd = -1;
    if ((q = strstr(dn, "index_vector_dim = "))) ivd = strtoll(q + 19, NULL, 10);
    int nss = parse_ints(prop(op, "slice_sizes"), ss, TPU_MAX_DIMS);
    hv *x = &args[0], *ix = &args[1];
    int rk = x->ndim;
    /* supported: take along one axis d (jnp.take, x[idx]) */
    if (nobd || nsim != 1 || ncol != 1 || col[0] != sim[0] || nss != rk || ivd != ix->ndim - 1 ||
        ix->sizes[ix->ndim - 1] != 1)
      UNSUP("stablehlo import: this gather form is not supported (only take along one axis)");
    int d = (int)col[0];
    for (int k = 0; k < rk; k++) if (ss[k] != (k == d ? 1 : x->sizes[k])) UNSUP("stablehlo import: gather with partial slices is not supported");
    int nb = ix->ndim - 1;
    int64_t B = 1;
    for (int k = 0; k < nb; k++) B *= ix->sizes[k];
    if ((rc = materialize(C, x)) || (rc = materialize(C, ix))) goto done;
    tpuir_val idx = tpuir_reshape(g, ix->v, 1, &B);
    if (ix->dtype != TPU_I64) idx = tpuir_convert(g, idx, TPU_I64);
    idx = tpuir_binary(g, TPUIR_MAX, idx, tpuir_broadcast_in_dim(g, tpuir_const_i(g, TPU_I64, 0), 1, &B, NULL));
    idx = tpuir_binary(g, TPUIR_MIN, idx, tpuir_broadcast_in_dim(g, tpuir_const_i(g, TPU_I64, x->sizes[d] - 1), 1, &B, NULL));
    tpuir_val y = tpuir_index_select(g, x->v, d, idx);
    /* y: [x dims < d] [B] [x dims > d] -> [x < d] [batch dims] [x > d] */
    int64_t ysz[TPU_MAX_DIMS]; int yn = 0;
    for (int k = 0; k < d; k++) ysz[yn++] = x->sizes[k];
    for (int k = 0; k < nb; k++) ysz[yn++] = ix->sizes[k];
    for (int k = d + 1; k < rk; k++) ysz[yn++] = x->sizes[k];
    if (yn > TPU_MAX_DIMS) UNSUP("stablehlo import: gather rank too large");
    y = tpuir_reshape(g, y, yn, ysz);
    if ((rc = ck(y))) goto done;
    int64_t perm[TPU_MAX_DIMS];
    int bi = 0, oi = 0, ident = 1;
    for (int p = 0; p < r->ndim; p++) {
      int isoff = 0;
      for (int k = 0; k < noff; k++) if (off[k] == p) isoff = 1;
      if (isoff) {
        int j = 0, cnt = -1; /* oi-th non-collapsed operand dim */
        for (j = 0; j < rk; j++) { if (j == d) continue; if (++cnt == oi) break; }
        perm[p] = j < d ? j : j - 1 + nb;
        oi++;
      } else perm[p] = d + bi++;
      if (perm[p] != p) ident = 0;
    }
    v = ident ? y : tpuir_transpose(g, y, perm);
    goto setv;
  }
  if (op_is(op, "stablehlo.scatter")) {
    /* supported: x.at[idx].add(u) along one axis d (the mirror of take) */
    char dn[512];
    int64_t uwd[TPU_MAX_DIMS], iwd[TPU_MAX_DIMS], sdo[TPU_MAX_DIMS], ibd[TPU_MAX_DIMS];
    int nuwd = 0, niwd = 0, nsdo = 0, nibd = 0;
    const char *q;
    if (n != 3 || op->nreg != 1) UNSUP("stablehlo import: variadic scatter is not supported");
    if (reduce_kind(&op->reg[0]) != TPUIR_RED_SUM)
      UNSUP("stablehlo import: scatter supports the add combiner only (x.at[i].add)");
    if (!prop_copy(op, "scatter_dimension_numbers", dn, sizeof dn)) { rc = tpu_error(TPU_E_INVALID, "stablehlo import: scatter without dimension numbers"); goto done; }
    if ((q = strstr(dn, "update_window_dims = "))) nuwd = parse_ints(q + 21, uwd, TPU_MAX_DIMS);
    if ((q = strstr(dn, "inserted_window_dims = "))) niwd = parse_ints(q + 23, iwd, TPU_MAX_DIMS);
    if ((q = strstr(dn, "input_batching_dims = "))) nibd = parse_ints(q + 22, ibd, TPU_MAX_DIMS);
    if ((q = strstr(dn, "scatter_dims_to_operand_dims = "))) nsdo = parse_ints(q + 31, sdo, TPU_MAX_DIMS);
    int64_t ivd = -1;
    if ((q = strstr(dn, "index_vector_dim = "))) ivd = strtoll(q + 19, NULL, 10);
    hv *x = &args[0], *ix = &args[1], *up = &args[2];
    int rk = x->ndim;
    if (nibd || nsdo != 1 || niwd != 1 || iwd[0] != sdo[0] || ivd != ix->ndim - 1 || ix->sizes[ix->ndim - 1] != 1 ||
        nuwd != rk - 1)
      UNSUP("stablehlo import: this scatter form is not supported (only x.at[idx].add along one axis)");
    int d = (int)iwd[0];
    int nb = ix->ndim - 1;
    int64_t B = 1;
    for (int k = 0; k < nb; k++) B *= ix->sizes[k];
    /* update dim p -> position in [x < d][batch][x > d] (as the gather) */
    int64_t perm[TPU_MAX_DIMS], inv[TPU_MAX_DIMS];
    int bi = 0, oi = 0, ident = 1;
    for (int p = 0; p < up->ndim; p++) {
      int isw = 0;
      for (int k = 0; k < nuwd; k++) if (uwd[k] == p) isw = 1;
      if (isw) {
        int j = 0, cnt = -1;
        for (j = 0; j < rk; j++) { if (j == d) continue; if (++cnt == oi) break; }
        perm[p] = j < d ? j : j - 1 + nb;
        if (up->sizes[p] != x->sizes[j]) UNSUP("stablehlo import: scatter with partial windows is not supported");
        oi++;
      } else perm[p] = d + bi++;
      if (perm[p] != p) ident = 0;
    }
    for (int p = 0; p < up->ndim; p++) inv[perm[p]] = p;
    if ((rc = materialize(C, x)) || (rc = materialize(C, ix)) || (rc = materialize(C, up))) goto done;
    tpuir_val u = ident ? up->v : tpuir_transpose(g, up->v, inv);
    int64_t ssz[TPU_MAX_DIMS];
    for (int k = 0; k < rk; k++) ssz[k] = k == d ? B : x->sizes[k];
    u = tpuir_reshape(g, u, rk, ssz);
    tpuir_val idx = tpuir_reshape(g, ix->v, 1, &B);
    if (ix->dtype != TPU_I64) idx = tpuir_convert(g, idx, TPU_I64);
    /* out-of-bounds updates are skipped (StableHLO): add zeros at index 0 */
    tpuir_val lo = tpuir_binary(g, TPUIR_GE, idx, tpuir_broadcast_in_dim(g, tpuir_const_i(g, TPU_I64, 0), 1, &B, NULL));
    tpuir_val hi = tpuir_binary(g, TPUIR_LT, idx, tpuir_broadcast_in_dim(g, tpuir_const_i(g, TPU_I64, x->sizes[d]), 1, &B, NULL));
    tpuir_val ok = tpuir_binary(g, TPUIR_AND, lo, hi);
    idx = tpuir_select(g, ok, idx, tpuir_broadcast_in_dim(g, tpuir_const_i(g, TPU_I64, 0), 1, &B, NULL));
    int64_t dd = d;
    tpuir_val okb = tpuir_broadcast_in_dim(g, ok, rk, ssz, &dd);
    tpuir_val zero = isf(x->dtype) ? tpuir_const_f(g, x->dtype, 0) : tpuir_const_i(g, x->dtype, 0);
    u = tpuir_select(g, okb, u, tpuir_broadcast_in_dim(g, zero, rk, ssz, NULL));
    v = tpuir_index_add(g, x->v, d, idx, u);
    goto setv;
  }
  if (op_is(op, "func.call") || op_is(op, "call")) {
    const char *cal = prop(op, "callee");
    if (!cal || *cal != '@') { rc = tpu_error(TPU_E_INVALID, "stablehlo import: call without callee"); goto done; }
    cal++;
    int cl = 0;
    while (is_idch(cal[cl]) && cal[cl] != '-') cl++;
    if (cal[0] == '"') { cal++; cl = 0; while (cal[cl] != '"') cl++; }
    int nr = 0; hv *rv = NULL;
    if ((rc = call_func(C, cal, cl, n, args, &nr, &rv))) goto done;
    if (nr != op->nres) { rc = tpu_error(TPU_E_INVALID, "stablehlo import: call result count mismatch"); free(rv); goto done; }
    for (int i = 0; i < nr; i++) res[i] = rv[i];
    free(rv);
    goto done;
  }
  if (op_is(op, "stablehlo.while")) {
    if (op->nreg != 2) { rc = tpu_error(TPU_E_INVALID, "stablehlo import: while needs cond and body"); goto done; }
    hv *cur = malloc((size_t)(n ? n : 1) * sizeof(hv));
    if (!cur) { rc = tpu_error(TPU_E_OOM, "stablehlo import: out of memory"); goto done; }
    memcpy(cur, args, (size_t)n * sizeof(hv));
    for (int64_t it = 0;; it++) {
      int nr = 0; hv *cv = NULL;
      if ((rc = eval_region(C, E, &op->reg[0], n, cur, &nr, &cv))) break;
      if (nr != 1 || !is_host(&cv[0])) {
        free(cv);
        rc = tpu_error(TPU_E_UNSUPPORTED, "stablehlo import: stablehlo.while with a data-dependent trip count "
                       "is not supported (loops are unrolled; the condition must only depend on constants "
                       "and loop counters)");
        break;
      }
      int go = hget_i(&cv[0], 0) != 0;
      free(cv);
      if (!go) break;
      if (tpuir_num_nodes(g) > SH_MAX_NODES) {
        rc = tpu_error(TPU_E_UNSUPPORTED, "stablehlo import: unrolled loop exceeds %d IR nodes", SH_MAX_NODES);
        break;
      }
      hv *nv = NULL;
      if ((rc = eval_region(C, E, &op->reg[1], n, cur, &nr, &nv))) break;
      if (nr != n) { free(nv); rc = tpu_error(TPU_E_INVALID, "stablehlo import: while body result count"); break; }
      memcpy(cur, nv, (size_t)n * sizeof(hv));
      free(nv);
    }
    if (!rc) memcpy(res, cur, (size_t)op->nres * sizeof(hv));
    free(cur);
    goto done;
  }
  if (op_is(op, "stablehlo.case") || op_is(op, "stablehlo.if")) {
    int isif = op_is(op, "stablehlo.if");
    hv *ix = &args[0];
    int nb = op->nreg;
    if (is_host(ix)) {
      int64_t k = hget_i(ix, 0);
      if (isif) k = k ? 0 : 1;
      else if (k < 0 || k >= nb) k = nb - 1;
      int nr = 0; hv *rv = NULL;
      if ((rc = eval_region(C, E, &op->reg[k], 0, NULL, &nr, &rv))) goto done;
      for (int i = 0; i < op->nres && i < nr; i++) res[i] = rv[i];
      free(rv);
      goto done;
    }
    /* device index: build every branch, select the results */
    hv **br = calloc((size_t)nb, sizeof(hv *));
    if (!br) { rc = tpu_error(TPU_E_OOM, "stablehlo import: out of memory"); goto done; }
    for (int k = 0; k < nb && !rc; k++) {
      int nr = 0;
      rc = eval_region(C, E, &op->reg[k], 0, NULL, &nr, &br[k]);
      if (!rc && nr != op->nres) rc = tpu_error(TPU_E_INVALID, "stablehlo import: case branch result count");
    }
    tpuir_val idx = -1;
    if (!rc) { rc = materialize(C, ix); idx = ix->v; }
    for (int i = 0; i < op->nres && !rc; i++) {
      hv acc = br[isif ? 1 : nb - 1][i];
      if ((rc = materialize(C, &acc))) break;
      tpuir_val out = acc.v;
      for (int k = (isif ? 0 : nb - 2); k >= 0 && !rc; k--) {
        hv bk = br[k][i];
        if ((rc = materialize(C, &bk))) break;
        tpuir_val pred;
        if (isif) pred = idx;
        else pred = tpuir_binary(g, TPUIR_EQ, idx, tpuir_const_i(g, ix->dtype, k));
        if (res[i].ndim > 0) pred = tpuir_broadcast_in_dim(g, pred, res[i].ndim, res[i].sizes, NULL);
        out = tpuir_select(g, pred, bk.v, out);
        rc = ck(out);
      }
      res[i].v = out;
    }
    for (int k = 0; k < nb; k++) free(br[k]);
    free(br);
    goto done;
  }
  if (op_is(op, "stablehlo.custom_call")) {
    const char *t = prop(op, "call_target_name");
    UNSUP("stablehlo import: stablehlo.custom_call %.40s is not supported", t ? t : "");
  }
  rc = tpu_error(TPU_E_UNSUPPORTED, "stablehlo import: op %.*s is not supported", op->namelen, op->name);
  goto done;
setv:
  if ((rc = ck(v))) goto done;
  r->v = v;
  r->hd = NULL; r->hi = NULL;
done:
  if (args != a) free(args);
  return rc;
}

/* evaluate a region: bind args, run ops, collect the return operands */
static int eval_region(sh_ctx *C, sh_env *E, const sh_region *R, int nargs, const hv *args, int *nret, hv **ret) {
  if (nargs != R->nargs) return tpu_error(TPU_E_INVALID, "stablehlo import: region expects %d arguments, got %d",
                                          R->nargs, nargs);
  for (int i = 0; i < nargs; i++) {
    hv x = args[i];
    const sh_type *t = &R->targs[i];
    if (t->dtype < 0) return tpu_error(TPU_E_UNSUPPORTED, "stablehlo import: unsupported argument type");
    if (x.dtype != t->dtype || x.ndim != t->ndim)
      return tpu_error(TPU_E_INVALID, "stablehlo import: argument type mismatch");
    E->vals[R->args[i]] = x;
  }
  for (int i = 0; i < R->nops; i++) {
    const sh_op *op = &R->ops[i];
    if (op_is(op, "stablehlo.return") || op_is(op, "func.return") || op_is(op, "return")) {
      hv *out = malloc((size_t)(op->nopd ? op->nopd : 1) * sizeof(hv));
      if (!out) return tpu_error(TPU_E_OOM, "stablehlo import: out of memory");
      for (int k = 0; k < op->nopd; k++) {
        int rc = env_get(E, op->opd[k], &out[k]);
        if (rc) { free(out); return rc; }
      }
      *nret = op->nopd; *ret = out;
      return 0;
    }
    hv rs[SH_MAX_ARGS];
    hv *res = op->nres > SH_MAX_ARGS ? calloc((size_t)op->nres, sizeof(hv)) : rs;
    if (!res) return tpu_error(TPU_E_OOM, "stablehlo import: out of memory");
    if (op->nres != op->nout && op->nres) {
      if (res != rs) free(res);
      return tpu_error(TPU_E_INVALID, "stablehlo import: result count mismatch in %.*s", op->namelen, op->name);
    }
    int rc = eval_op(C, E, op, res);
    if (!rc)
      for (int k = 0; k < op->nres; k++) {
        res[k].set = 1;
        E->vals[op_res(op, k)] = res[k];
      }
    if (res != rs) free(res);
    if (rc) return rc;
  }
  return tpu_error(TPU_E_INVALID, "stablehlo import: region without a return");
}

/* ------------------------------------------------------------------ */
int tpulw_import_stablehlo(const char *text, int nargs, const int *dtypes, const int *ndims,
                           const int64_t *sizes, int precision, tpuir_graph **out) {
  if (!text || !out) return tpu_error(TPU_E_INVALID, "stablehlo import: NULL argument");
  *out = NULL;
  sh_parser P = {0};
  P.p = text; P.end = text + strlen(text);
  sh_op mod;
  int rc = sp_op(&P, &mod);
  if (!rc && (!op_is(&mod, "builtin.module") || mod.nreg != 1))
    rc = tpu_error(TPU_E_INVALID, "stablehlo import: expected a builtin.module in generic form "
                   "(print with print_generic_op_form=True)");
  sh_ctx C = {0};
  C.P = &P;
  C.precision = precision;
  int mainf = -1;
  if (!rc) {
    const sh_region *body = &mod.reg[0];
    C.funcs = calloc((size_t)(body->nops ? body->nops : 1), sizeof(sh_func));
    if (!C.funcs) rc = tpu_error(TPU_E_OOM, "stablehlo import: out of memory");
    for (int i = 0; !rc && i < body->nops; i++) {
      const sh_op *f = &body->ops[i];
      if (!op_is(f, "func.func") || f->nreg != 1) continue;
      const char *nm = prop(f, "sym_name");
      if (!nm || *nm != '"') continue;
      nm++;
      int l = 0;
      while (nm[l] && nm[l] != '"') l++;
      C.funcs[C.nfuncs].name = nm; C.funcs[C.nfuncs].namelen = l;
      C.funcs[C.nfuncs].body = &f->reg[0];
      if (l == 4 && memcmp(nm, "main", 4) == 0) mainf = C.nfuncs;
      C.nfuncs++;
    }
    if (!rc && mainf < 0) rc = tpu_error(TPU_E_INVALID, "stablehlo import: no @main function");
  }
  tpuir_graph *g = NULL;
  if (!rc) {
    g = tpuir_graph_new();
    if (!g) rc = tpu_error(TPU_E_OOM, "stablehlo import: out of memory");
    C.g = g;
  }
  hv *params = NULL;
  sh_region *mb = mainf >= 0 ? C.funcs[mainf].body : NULL;
  if (!rc) {
    if (nargs >= 0 && nargs != mb->nargs)
      rc = tpu_error(TPU_E_INVALID, "stablehlo import: @main takes %d arguments, %d given", mb->nargs, nargs);
    params = calloc((size_t)(mb->nargs ? mb->nargs : 1), sizeof(hv));
    if (!rc && !params) rc = tpu_error(TPU_E_OOM, "stablehlo import: out of memory");
    for (int i = 0; !rc && i < mb->nargs; i++) {
      const sh_type *t = &mb->targs[i];
      if (t->dtype < 0) { rc = tpu_error(TPU_E_UNSUPPORTED, "stablehlo import: @main argument %d has an unsupported type", i); break; }
      if (nargs >= 0) {
        int same = dtypes[i] == t->dtype && ndims[i] == t->ndim;
        for (int k = 0; same && k < t->ndim; k++) same = sizes[i * TPU_MAX_DIMS + k] == t->sizes[k];
        if (!same) { rc = tpu_error(TPU_E_INVALID, "stablehlo import: argument %d does not match @main's type", i); break; }
      }
      hv_from_type(&params[i], t);
      params[i].v = tpuir_param(g, t->dtype, t->ndim, t->sizes);
      rc = ck(params[i].v);
    }
  }
  if (!rc) {
    int nr = 0; hv *rv = NULL;
    rc = call_func(&C, "main", 4, mb->nargs, params, &nr, &rv);
    if (!rc) {
      tpuir_val *outs = malloc((size_t)(nr ? nr : 1) * sizeof(tpuir_val));
      if (!outs) rc = tpu_error(TPU_E_OOM, "stablehlo import: out of memory");
      for (int i = 0; !rc && i < nr; i++) { rc = materialize(&C, &rv[i]); if (!rc) outs[i] = rv[i].v; }
      if (!rc) rc = tpuir_set_outputs(g, nr, outs);
      free(outs);
    }
    free(rv);
  }
  free(params);
  free(C.funcs);
  for (int i = 0; i < P.nallocs; i++) free(P.allocs[i]);
  free(P.allocs); free(P.names); free(P.lens); free(P.htab);
  if (rc) { tpuir_graph_free(g); return rc < 0 ? rc : TPU_E_INTERNAL; }
  *out = g;
  return TPU_OK;
}

/* ---- launching a caller-owned graph ------------------------------------ */
typedef struct shl_task { tpu_view *views; } shl_task;
static void shl_release(void *owner) {
  shl_task *t = owner;
  free(t->views);
  free(t);
}

int tpulw_launch_graph(tpurt_stream *s, const tpuir_graph *g, int nin, const tpu_view *ins, int nout,
                       const tpu_view *outs) {
  if (!s || !g) return tpu_error(TPU_E_INVALID, "tpulw_launch_graph: NULL argument");
  if (nin != tpuir_num_params(g) || nout != tpuir_num_outputs(g))
    return tpu_error(TPU_E_INVALID, "tpulw_launch_graph: graph takes %d inputs and %d outputs, got %d and %d",
                     tpuir_num_params(g), tpuir_num_outputs(g), nin, nout);
  /* parameters are the first nodes in order (tpuir_param) */
  int k = 0;
  for (int v = 0; v < tpuir_num_nodes(g) && k < nin; v++) {
    const tpuir_node *nd = tpuir_get_node(g, v);
    if (nd->op != TPUIR_PARAM) continue;
    const tpu_view *w = &ins[nd->dim];
    int same = w->dtype == nd->dtype && w->ndim == nd->ndim;
    for (int d = 0; same && d < nd->ndim; d++) same = w->sizes[d] == nd->sizes[d];
    if (!same) return tpu_error(TPU_E_INVALID, "tpulw_launch_graph: input %d has the wrong dtype or shape", nd->dim);
    k++;
  }
  for (int i = 0; i < nout; i++) {
    int dt, nd; int64_t sz[TPU_MAX_DIMS];
    tpuir_value_info(g, tpuir_output(g, i), &dt, &nd, sz);
    int same = outs[i].dtype == dt && outs[i].ndim == nd;
    for (int d = 0; same && d < nd; d++) same = outs[i].sizes[d] == sz[d];
    if (!same) return tpu_error(TPU_E_INVALID, "tpulw_launch_graph: output %d has the wrong dtype or shape", i);
  }
  shl_task *t = calloc(1, sizeof *t);
  if (!t) return tpu_error(TPU_E_OOM, "tpulw_launch_graph: out of memory");
  t->views = malloc((size_t)(nin + nout + 1) * sizeof(tpu_view));
  if (!t->views) { free(t); return tpu_error(TPU_E_OOM, "tpulw_launch_graph: out of memory"); }
  memcpy(t->views, ins, (size_t)nin * sizeof(tpu_view));
  memcpy(t->views + nin, outs, (size_t)nout * sizeof(tpu_view));
  int rc = tpug_submit(s, g, nin, t->views, nout, t->views + nin, 0, shl_release, t);
  if (rc == TPUG_DEFERRED) rc = TPU_OK;
  return rc;
}

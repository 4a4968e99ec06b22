/* exec/vtpu/kernel.c - user C kernels in the vTPU executor (prefix tpux_kernel_,
 * see tpu_exec.h): the process-wide registry of loaded kernels (dlopen'ed
 * shared objects, keyed by a content hash), the signature check and
 * output-shape inference used by the lowering, and the evaluation of
 * TPUIR_CUSTOM_CALL nodes inside a program.
 *
 * Evaluation: every operand is handed to the kernel as contiguous row-major
 * memory (a strided view, e.g. a transposed or broadcast operand, is first
 * copied into a temporary); the result of the node is a fresh temporary the
 * kernel writes; the kernel's other results (multi-result kernels: one node
 * per result) go to scratch buffers that are freed at once.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/vtpu/internal.h"

typedef struct kreg {
  tpux_kernel_desc d; /* strings below point into owned copies */
  char *strs[4 + TPUX_KERNEL_MAX_ARGS + TPUX_KERNEL_MAX_SYMS];
  void *handle;
  tpux_kernel_fn entry;
} kreg;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static kreg **g_regs;
static int g_n, g_cap;
static _Atomic uint64_t g_runs;

/* Registered kernels are never removed: a found entry stays valid. */
static const kreg *find(uint64_t key) {
  const kreg *r = NULL;
  pthread_mutex_lock(&g_mu);
  for (int i = 0; i < g_n && !r; i++)
    if (g_regs[i]->d.key == key) r = g_regs[i];
  pthread_mutex_unlock(&g_mu);
  return r;
}

static char *dup_str(const char *s) {
  if (!s) s = "";
  size_t n = strlen(s) + 1;
  char *c = malloc(n);
  if (c) memcpy(c, s, n);
  return c;
}

static void free_reg(kreg *r) {
  if (!r) return;
  for (size_t i = 0; i < sizeof r->strs / sizeof r->strs[0]; i++) free(r->strs[i]);
  free(r);
}

static int check_desc(const tpux_kernel_desc *d) {
  if (!d || !d->name || (!d->fn && (!d->path || !d->symbol)))
    return tpu_error(TPU_E_INVALID, "tpux_kernel_register: NULL descriptor or path");
  if (d->nin < 0 || d->nin > TPUX_KERNEL_MAX_ARGS || d->nout < 1 ||
      d->nout > TPUX_KERNEL_MAX_OUTS || d->nsym < 0 || d->nsym > TPUX_KERNEL_MAX_SYMS ||
      d->ncode < 0 || d->ncode > TPUX_KERNEL_MAX_CODE || d->ncode % 2)
    return tpu_error(TPU_E_INVALID, "%s: bad kernel descriptor (argument, output, symbol "
                     "or code count)", d->name);
  for (int k = 0; k < d->nin; k++) {
    if (d->in_dtype[k] < 0 || d->in_dtype[k] >= TPU_NUM_DTYPES ||
        d->in_ndim[k] < -1 || d->in_ndim[k] > TPU_MAX_DIMS)
      return tpu_error(TPU_E_INVALID, "%s: bad argument %d in the descriptor", d->name, k);
    for (int a = 0; a < d->in_ndim[k]; a++)
      if (d->in_dim[k][a] < -d->nsym)
        return tpu_error(TPU_E_INVALID, "%s: argument %d names symbol %lld of %d", d->name,
                         k, (long long)(-d->in_dim[k][a] - 1), (int)d->nsym);
  }
  int dims = 0;
  for (int o = 0; o < d->nout; o++) {
    if (d->out_dtype[o] < 0 || d->out_dtype[o] >= TPU_NUM_DTYPES ||
        tpu_dtype_is_complex(d->out_dtype[o]) || d->out_ndim[o] < 0 ||
        d->out_ndim[o] > TPU_MAX_DIMS)
      return tpu_error(TPU_E_INVALID, "%s: bad output %d in the descriptor", d->name, o);
    dims += d->out_ndim[o];
  }
  int ends = 0;
  for (int i = 0; i < d->ncode; i += 2) {
    int64_t op = d->code[i], v = d->code[i + 1];
    if (op < TPUX_KOP_END || op > TPUX_KOP_MOD ||
        (op == TPUX_KOP_SYM && (v < 0 || v >= d->nsym)))
      return tpu_error(TPU_E_INVALID, "%s: bad output size program", d->name);
    ends += op == TPUX_KOP_END;
  }
  if (ends != dims)
    return tpu_error(TPU_E_INVALID, "%s: %d output size programs for %d output dims",
                     d->name, ends, dims);
  if (d->parallel) { /* the row symbol: dim 0 of every output, nowhere else */
    int64_t ps = d->parallel - 1;
    if (ps < 0 || ps >= d->nsym)
      return tpu_error(TPU_E_INVALID, "%s: parallel symbol %lld of %d", d->name,
                       (long long)ps, (int)d->nsym);
    for (int k = 0; k < d->nin; k++)
      for (int a = 1; a < d->in_ndim[k]; a++)
        if (d->in_dim[k][a] == -ps - 1)
          return tpu_error(TPU_E_INVALID, "%s: parallel symbol %s must be dimension 0 only "
                           "(argument %s has it at dimension %d)", d->name, d->sym_name[ps],
                           d->in_name[k], a);
    int pc = 0;
    for (int o = 0; o < d->nout; o++)
      for (int a = 0; a < d->out_ndim[o]; a++) {
        int start = pc;
        while (d->code[pc] != TPUX_KOP_END) {
          if (d->code[pc] == TPUX_KOP_SYM && d->code[pc + 1] == ps && a != 0)
            return tpu_error(TPU_E_INVALID, "%s: parallel symbol %s in output %d dimension %d",
                             d->name, d->sym_name[ps], o, a);
          pc += 2;
        }
        if (a == 0 && !(pc - start == 2 && d->code[start] == TPUX_KOP_SYM &&
                        d->code[start + 1] == ps))
          return tpu_error(TPU_E_INVALID, "%s: dimension 0 of output %d must be the parallel "
                           "symbol %s", d->name, o, d->sym_name[ps]);
        pc += 2;
      }
    for (int o = 0; o < d->nout; o++)
      if (d->out_ndim[o] < 1)
        return tpu_error(TPU_E_INVALID, "%s: output %d has no dimension 0 for the parallel "
                         "symbol", d->name, o);
  }
  return TPU_OK;
}

int tpux_kernel_register(const tpux_kernel_desc *d) {
  int rc = check_desc(d);
  if (rc) return rc;
  if (find(d->key)) return TPU_OK;
  kreg *r = calloc(1, sizeof *r);
  if (!r) return tpu_error(TPU_E_OOM, "tpux_kernel_register: out of host memory");
  r->d = *d;
  int s = 0, ok = 1;
#define KEEP(field) ok &= (r->strs[s] = dup_str(d->field)) != NULL, r->d.field = r->strs[s++]
  KEEP(name);
  KEEP(signature);
  KEEP(path);
  KEEP(symbol);
  for (int k = 0; k < d->nin; k++) KEEP(in_name[k]);
  for (int k = 0; k < d->nsym; k++) KEEP(sym_name[k]);
#undef KEEP
  if (!ok) {
    free_reg(r);
    return tpu_error(TPU_E_OOM, "tpux_kernel_register: out of host memory");
  }
  if (d->fn) {
    r->entry = d->fn;
    goto add;
  }
  dlerror();
  r->handle = dlopen(d->path, RTLD_NOW | RTLD_LOCAL);
  if (!r->handle) {
    const char *e = dlerror();
    rc = tpu_error(TPU_E_INVALID, "c_kernel %s: cannot load %s: %s", d->name, d->path,
                   e ? e : "?");
    free_reg(r);
    return rc;
  }
  void *sym = dlsym(r->handle, d->symbol);
  if (!sym) {
    const char *e = dlerror();
    rc = tpu_error(TPU_E_INVALID, "c_kernel %s: no symbol %s in %s: %s", d->name, d->symbol,
                   d->path, e ? e : "?");
    if (r->handle) dlclose(r->handle);
    free_reg(r);
    return rc;
  }
  memcpy(&r->entry, &sym, sizeof sym); /* object -> function pointer (POSIX) */
add:
  pthread_mutex_lock(&g_mu);
  for (int i = 0; i < g_n; i++)
    if (g_regs[i]->d.key == d->key) { /* a concurrent registration won */
      pthread_mutex_unlock(&g_mu);
      if (r->handle) dlclose(r->handle);
      free_reg(r);
      return TPU_OK;
    }
  if (g_n == g_cap) {
    int nc = g_cap ? 2 * g_cap : 16;
    kreg **nr = realloc(g_regs, (size_t)nc * sizeof *nr);
    if (!nr) {
      pthread_mutex_unlock(&g_mu);
      if (r->handle) dlclose(r->handle);
      free_reg(r);
      return tpu_error(TPU_E_OOM, "tpux_kernel_register: out of host memory");
    }
    g_regs = nr;
    g_cap = nc;
  }
  g_regs[g_n++] = r;
  pthread_mutex_unlock(&g_mu);
  return TPU_OK;
}

const char *tpux_kernel_name(uint64_t key) {
  const kreg *r = find(key);
  return r ? r->d.name : NULL;
}

int tpux_kernel_args(uint64_t key, int cap, int32_t *ndim, int32_t *dtype) {
  const kreg *r = find(key);
  if (!r)
    return tpu_error(TPU_E_INVALID, "c_kernel: no kernel registered under key %016llx",
                     (unsigned long long)key);
  for (int k = 0; k < r->d.nin && k < cap; k++) {
    if (ndim) ndim[k] = r->d.in_ndim[k];
    if (dtype) dtype[k] = r->d.in_dtype[k];
  }
  return r->d.nin;
}

uint64_t tpux_kernel_runs(void) { return atomic_load(&g_runs); }

/* "[N, 4]" for argument k of d */
static void fmt_spec(const tpux_kernel_desc *d, int k, char *buf, size_t cap) {
  size_t n = 0;
  n += (size_t)snprintf(buf, cap, "[");
  for (int a = 0; a < d->in_ndim[k] && n < cap; a++) {
    int64_t v = d->in_dim[k][a];
    if (v >= 0) n += (size_t)snprintf(buf + n, cap - n, a ? ", %lld" : "%lld", (long long)v);
    else n += (size_t)snprintf(buf + n, cap - n, a ? ", %s" : "%s", d->sym_name[-v - 1]);
  }
  if (n < cap) snprintf(buf + n, cap - n, "]");
}

static void fmt_shape(int ndim, const int64_t *sizes, char *buf, size_t cap) {
  size_t n = (size_t)snprintf(buf, cap, "[");
  for (int a = 0; a < ndim && n < cap; a++)
    n += (size_t)snprintf(buf + n, cap - n, a ? ", %lld" : "%lld", (long long)sizes[a]);
  if (n < cap) snprintf(buf + n, cap - n, "]");
}

/* Evaluate the size program starting at code[*pc]; advances *pc past END. */
static int eval_size(const tpux_kernel_desc *d, int *pc, const int64_t *sym, int64_t *out) {
  int64_t st[32];
  int sp = 0;
  for (; *pc + 1 < d->ncode + 1; *pc += 2) {
    int64_t op = d->code[*pc], v = d->code[*pc + 1];
    if (op == TPUX_KOP_END) {
      *pc += 2;
      if (sp != 1) break;
      *out = st[0];
      return TPU_OK;
    }
    if (op == TPUX_KOP_LIT || op == TPUX_KOP_SYM) {
      if (sp == 32) break;
      st[sp++] = op == TPUX_KOP_LIT ? v : sym[v];
      continue;
    }
    if (sp < 2) break;
    int64_t y = st[--sp], x = st[sp - 1], r;
    switch (op) {
    case TPUX_KOP_ADD: r = x + y; break;
    case TPUX_KOP_SUB: r = x - y; break;
    case TPUX_KOP_MUL: r = x * y; break;
    case TPUX_KOP_DIV:
    case TPUX_KOP_MOD:
      if (y <= 0)
        return tpu_error(TPU_E_INVALID, "%s: output size divides by %lld", d->name,
                         (long long)y);
      r = x / y - ((x % y) < 0);
      if (op == TPUX_KOP_MOD) r = x - r * y;
      break;
    default: return tpu_error(TPU_E_INVALID, "%s: bad output size program", d->name);
    }
    st[sp - 1] = r;
  }
  return tpu_error(TPU_E_INVALID, "%s: bad output size program", d->name);
}

int tpux_kernel_infer(uint64_t key, int nin, const int32_t *dtype, const int32_t *ndim,
                      const int64_t (*sizes)[TPU_MAX_DIMS], int64_t *sym_out, int *nout,
                      int32_t *out_dtype, int32_t *out_ndim,
                      int64_t (*out_sizes)[TPU_MAX_DIMS]) {
  const kreg *r = find(key);
  if (!r)
    return tpu_error(TPU_E_INVALID, "c_kernel: no kernel registered under key %016llx",
                     (unsigned long long)key);
  const tpux_kernel_desc *d = &r->d;
  if (nin != d->nin)
    return tpu_error(TPU_E_INVALID, "%s() takes %d arguments (%s) but %d were given", d->name,
                     (int)d->nin, d->signature, nin);
  int64_t sym[TPUX_KERNEL_MAX_SYMS];
  int from[TPUX_KERNEL_MAX_SYMS], from_dim[TPUX_KERNEL_MAX_SYMS];
  for (int s = 0; s < d->nsym; s++) from[s] = -1;
  char spec[256], got[256];
  for (int k = 0; k < nin; k++) {
    int scalar = d->in_ndim[k] < 0;
    if (scalar != (ndim[k] < 0))
      return tpu_error(TPU_E_INVALID, "%s(): argument '%s' must be a %s (signature %s)",
                       d->name, d->in_name[k], scalar ? "scalar" : "tensor", d->signature);
    if (scalar) continue;
    fmt_spec(d, k, spec, sizeof spec);
    if (dtype[k] != d->in_dtype[k])
      return tpu_error(TPU_E_INVALID,
                       "%s(): expected argument '%s' to have dtype %s (signature %s), but got "
                       "dtype %s",
                       d->name, d->in_name[k], tpu_dtype_name(d->in_dtype[k]), d->signature,
                       tpu_dtype_name(dtype[k]));
    fmt_shape(ndim[k], sizes[k], got, sizeof got);
    if (ndim[k] != d->in_ndim[k])
      return tpu_error(TPU_E_INVALID,
                       "%s(): expected argument '%s' to have %d dimension(s) %s (signature %s), "
                       "but got shape %s",
                       d->name, d->in_name[k], (int)d->in_ndim[k], spec, d->signature, got);
    for (int a = 0; a < ndim[k]; a++) {
      int64_t want = d->in_dim[k][a], n = sizes[k][a];
      if (want >= 0) {
        if (n != want)
          return tpu_error(TPU_E_INVALID,
                           "%s(): expected argument '%s' to have shape %s, but got shape %s "
                           "(size %lld at dimension %d, expected %lld)",
                           d->name, d->in_name[k], spec, got, (long long)n, a,
                           (long long)want);
        continue;
      }
      int s = (int)(-want - 1);
      if (from[s] < 0) {
        from[s] = k;
        from_dim[s] = a;
        sym[s] = n;
      } else if (sym[s] != n) {
        return tpu_error(TPU_E_INVALID,
                         "%s(): size mismatch for '%s': argument '%s' has %s = %lld (dimension "
                         "%d) but argument '%s' has %s = %lld (dimension %d); signature %s",
                         d->name, d->sym_name[s], d->in_name[from[s]], d->sym_name[s],
                         (long long)sym[s], from_dim[s], d->in_name[k], d->sym_name[s],
                         (long long)n, a, d->signature);
      }
    }
  }
  for (int s = 0; s < d->nsym; s++)
    if (from[s] < 0)
      return tpu_error(TPU_E_INVALID, "%s: size symbol '%s' is not a dimension of any input",
                       d->name, d->sym_name[s]);
  int pc = 0;
  for (int o = 0; o < d->nout; o++) {
    if (out_dtype) out_dtype[o] = d->out_dtype[o];
    if (out_ndim) out_ndim[o] = d->out_ndim[o];
    for (int a = 0; a < d->out_ndim[o]; a++) {
      int64_t v = 0;
      int rc = eval_size(d, &pc, sym, &v);
      if (rc) return rc;
      if (v < 0)
        return tpu_error(TPU_E_INVALID, "%s(): output %d has negative size %lld at dimension "
                         "%d (signature %s)", d->name, o, (long long)v, a, d->signature);
      if (out_sizes) out_sizes[o][a] = v;
    }
  }
  if (sym_out)
    for (int s = 0; s < d->nsym; s++) sym_out[s] = sym[s];
  if (nout) *nout = d->nout;
  return TPU_OK;
}

/* ---- evaluation (exec.c: eval_node) -------------------------------------- */

/* a parallel kernel's blocks of rows (tpux_kernel_desc.parallel) */
typedef struct kpar {
  const tpux_kernel_desc *d;
  tpux_kernel_fn entry;
  void *const *in, *const *out;
  const int64_t *sym;
  int64_t in_row[TPUX_KERNEL_MAX_ARGS];  /* bytes per row, 0: passed whole */
  int64_t out_row[TPUX_KERNEL_MAX_OUTS];
} kpar;

static void run_rows(void *ctx, int64_t begin, int64_t end) {
  const kpar *P = ctx;
  const tpux_kernel_desc *d = P->d;
  void *in[TPUX_KERNEL_MAX_ARGS], *out[TPUX_KERNEL_MAX_OUTS];
  int64_t sym[TPUX_KERNEL_MAX_SYMS];
  for (int k = 0; k < d->nin; k++)
    in[k] = P->in_row[k] ? (char *)P->in[k] + begin * P->in_row[k] : P->in[k];
  for (int o = 0; o < d->nout; o++) out[o] = (char *)P->out[o] + begin * P->out_row[o];
  for (int s = 0; s < d->nsym; s++) sym[s] = P->sym[s];
  sym[d->parallel - 1] = end - begin;
  P->entry(in, out, sym);
}

int tpux__eval_custom(xctx *c, int t) {
  const tpuir_node *n = tpuir_get_node(c->g, t);
  uint64_t key = (uint64_t)n->a[0];
  const kreg *r = find(key);
  if (!r)
    return tpu_error(TPU_E_INVALID, "vTPU executor: user kernel %016llx is not loaded in this "
                     "process (create it with torch_tpu.kernels.c_kernel first)",
                     (unsigned long long)key);
  const tpux_kernel_desc *d = &r->d;
  int nin = n->nlist;
  if (nin != d->nin || n->kind != d->nout || n->dim < 0 || n->dim >= d->nout)
    return tpu_error(TPU_E_INTERNAL, "%s: call node does not match the kernel", d->name);
  int32_t dt[TPUX_KERNEL_MAX_ARGS], nd[TPUX_KERNEL_MAX_ARGS];
  int64_t sz[TPUX_KERNEL_MAX_ARGS][TPU_MAX_DIMS];
  void *in[TPUX_KERNEL_MAX_ARGS], *tmp[TPUX_KERNEL_MAX_ARGS + TPUX_KERNEL_MAX_OUTS];
  void *out[TPUX_KERNEL_MAX_OUTS];
  int ntmp = 0, rc = TPU_OK;
  for (int k = 0; k < nin; k++) {
    const tpu_view *v = &c->vals[n->list[k]].v;
    dt[k] = v->dtype;
    nd[k] = d->in_ndim[k] < 0 ? -1 : v->ndim;
    for (int a = 0; a < v->ndim; a++) sz[k][a] = v->sizes[a];
  }
  int64_t sym[TPUX_KERNEL_MAX_SYMS];
  int32_t odt[TPUX_KERNEL_MAX_OUTS], ond[TPUX_KERNEL_MAX_OUTS];
  int64_t osz[TPUX_KERNEL_MAX_OUTS][TPU_MAX_DIMS];
  rc = tpux_kernel_infer(key, nin, dt, nd, (const int64_t(*)[TPU_MAX_DIMS])sz, sym, NULL, odt,
                         ond, osz);
  if (rc) return rc;
  for (int k = 0; k < nin; k++) {
    const tpu_view *v = &c->vals[n->list[k]].v;
    size_t es = tpu_dtype_size(v->dtype);
    if (tpu_view_is_contiguous(v)) {
      in[k] = (char *)v->base + v->offset * (int64_t)es;
      continue;
    }
    void *m = tpux__alloc((size_t)tpu_view_numel(v) * es);
    if (!m) {
      rc = tpu_error(TPU_E_OOM, "vTPU executor: out of host memory");
      goto done;
    }
    tmp[ntmp++] = m;
    tpu_view cv;
    tpu_view_init_contiguous(&cv, m, v->dtype, v->ndim, v->sizes);
    rc = tpux__copy_nocheck(&cv, v);
    if (rc) goto done;
    in[k] = m;
  }
  rc = tpux__alloc_value(c, t);
  if (rc) goto done;
  for (int o = 0; o < d->nout; o++) {
    if (o == n->dim) {
      out[o] = c->vals[t].mem;
      continue;
    }
    int64_t numel = 1;
    for (int a = 0; a < ond[o]; a++) numel *= osz[o][a];
    out[o] = tmp[ntmp++] = tpux__alloc((size_t)numel * tpu_dtype_size(odt[o]));
    if (!out[o]) {
      rc = tpu_error(TPU_E_OOM, "vTPU executor: out of host memory");
      goto done;
    }
  }
  if (d->parallel && sym[d->parallel - 1] > 1) {
    kpar P = {d, r->entry, in, out, sym, {0}, {0}};
    int s = d->parallel - 1;
    for (int k = 0; k < nin; k++) {
      if (d->in_ndim[k] < 1 || d->in_dim[k][0] != -s - 1) continue;
      int64_t row = (int64_t)tpu_dtype_size(dt[k]);
      for (int a = 1; a < nd[k]; a++) row *= sz[k][a];
      P.in_row[k] = row;
    }
    for (int o = 0; o < d->nout; o++) {
      int64_t row = (int64_t)tpu_dtype_size(odt[o]);
      for (int a = 1; a < ond[o]; a++) row *= osz[o][a];
      P.out_row[o] = row;
    }
    tpurt_parallel_for(sym[s], 1, run_rows, &P);
  } else {
    r->entry(in, out, sym);
  }
  atomic_fetch_add(&g_runs, 1);
done:
  for (int i = 0; i < ntmp; i++) tpux__free(tmp[i]);
  return rc;
}

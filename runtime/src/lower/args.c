/* lower/args.c - argument access, type promotion (torch.result_type),
 * broadcasting and small graph-building helpers shared by every lowering.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lower/internal.h"

/* ---- scalars ------------------------------------------------------------ */

tpulw__scalar tpulw__scalar_f(double f) {
  tpulw__scalar s = {LW_SK_FLOAT, 0, f, 0};
  if (isfinite(f) && fabs(f) < 9.2e18) s.i = (int64_t)f;
  return s;
}

tpulw__scalar tpulw__scalar_i(int64_t i) {
  tpulw__scalar s = {LW_SK_INT, i, (double)i, 0};
  return s;
}

static tpulw__scalar scalar_b(int v) {
  tpulw__scalar s = {LW_SK_BOOL, v != 0, v != 0, 0};
  return s;
}

/* ---- argument access ---------------------------------------------------- */

const tpulw_arg *tpulw__arg(const tpulw__b *b, const char *name) {
  for (int i = 0; i < b->nargs; i++)
    if (b->args[i].name && strcmp(b->args[i].name, name) == 0)
      return &b->args[i];
  return NULL;
}

int tpulw__none(const tpulw__b *b, const char *name) {
  const tpulw_arg *a = tpulw__arg(b, name);
  if (!a || a->kind == TPULW_NONE) return 1;
  if (a->kind == TPULW_TENSOR && !a->t.defined) return 1;
  return 0;
}

tpulw__scalar tpulw__scalar_c(double re, double im) {
  tpulw__scalar s = tpulw__scalar_f(re);
  s.kind = LW_SK_COMPLEX;
  s.im = im;
  return s;
}

static int cpu_scalar(const tpulw_tensor *t, tpulw__scalar *out) {
  if (t->device >= 0 || !t->defined) return 0;
  if (tpu_dtype_is_complex(t->view.dtype)) *out = tpulw__scalar_c(t->cpu_f, t->cpu_im);
  else if (tpu_dtype_is_float(t->view.dtype)) *out = tpulw__scalar_f(t->cpu_f);
  else if (t->view.dtype == TPU_BOOL) *out = scalar_b(t->cpu_i != 0);
  else *out = tpulw__scalar_i(t->cpu_i);
  return 1;
}

int tpulw__scalar_arg(const tpulw__b *b, const char *name, tpulw__scalar *out) {
  const tpulw_arg *a = tpulw__arg(b, name);
  if (!a) return 0;
  switch (a->kind) {
  case TPULW_INT: *out = tpulw__scalar_i(a->i); return 1;
  case TPULW_BOOL: *out = scalar_b(a->i != 0); return 1;
  case TPULW_FLOAT: *out = tpulw__scalar_f(a->f); return 1;
  case TPULW_COMPLEX: *out = tpulw__scalar_c(a->f, a->f_im); return 1;
  case TPULW_TENSOR: return cpu_scalar(&a->t, out);
  default: return 0;
  }
}

int64_t tpulw__int(const tpulw__b *b, const char *name, int64_t def) {
  tpulw__scalar s;
  if (!tpulw__scalar_arg(b, name, &s)) return def;
  return s.kind == LW_SK_FLOAT ? (int64_t)s.f : s.i;
}

double tpulw__float(const tpulw__b *b, const char *name, double def) {
  tpulw__scalar s;
  if (!tpulw__scalar_arg(b, name, &s)) return def;
  return s.f;
}

const char *tpulw__str(const tpulw__b *b, const char *name) {
  const tpulw_arg *a = tpulw__arg(b, name);
  return (a && a->kind == TPULW_STR) ? a->s : NULL;
}

int tpulw__dtype_arg(const tpulw__b *b, const char *name, int def) {
  const tpulw_arg *a = tpulw__arg(b, name);
  return (a && a->kind == TPULW_DTYPE) ? (int)a->i : def;
}

const int64_t *tpulw__ints(const tpulw__b *b, const char *name, int *n,
                       int64_t *scratch) {
  const tpulw_arg *a = tpulw__arg(b, name);
  if (!a || a->kind == TPULW_NONE) {
    *n = -1;
    return NULL;
  }
  if (a->kind == TPULW_INTS) {
    *n = a->n;
    return a->ints;
  }
  if (a->kind == TPULW_INT) {
    *scratch = a->i;
    *n = 1;
    return scratch;
  }
  *n = -1;
  return NULL;
}

const tpulw_tensor *tpulw__tensor_arg(const tpulw__b *b, const char *name) {
  const tpulw_arg *a = tpulw__arg(b, name);
  if (!a || a->kind != TPULW_TENSOR || !a->t.defined) return NULL;
  return &a->t;
}

/* ---- operands ----------------------------------------------------------- */

tpulw__opnd tpulw__opnd_scalar(tpulw__scalar s) {
  tpulw__opnd o = {LW_OPND_SCALAR, NULL, s};
  return o;
}

tpulw__opnd tpulw__opnd_tensor(const tpulw_tensor *t) {
  tpulw__opnd o = {LW_OPND_TENSOR, t, {0, 0, 0, 0}};
  return o;
}

tpulw__opnd tpulw__opnd_arg(const tpulw__b *b, const char *name) {
  tpulw__opnd o = {LW_OPND_NONE, NULL, {0, 0, 0, 0}};
  const tpulw_arg *a = tpulw__arg(b, name);
  if (!a) return o;
  if (a->kind == TPULW_TENSOR) {
    if (a->t.defined) o = tpulw__opnd_tensor(&a->t);
    return o;
  }
  tpulw__scalar s;
  if (tpulw__scalar_arg(b, name, &s)) o = tpulw__opnd_scalar(s);
  return o;
}

/* ---- dtypes ------------------------------------------------------------- */

#define B TPU_BOOL
#define U8 TPU_U8
#define I8 TPU_I8
#define I16 TPU_I16
#define I32 TPU_I32
#define I64 TPU_I64
#define F16 TPU_F16
#define BF TPU_BF16
#define F32 TPU_F32
#define F64 TPU_F64
#define C64 TPU_C64
#define C128 TPU_C128
/* torch.promote_types over our dtypes (generated with PyTorch 2.13). */
static const signed char k_promote[TPU_NUM_DTYPES][TPU_NUM_DTYPES] = {
    {B, U8, I8, I16, I32, I64, F16, BF, F32, F64, C64, C128},
    {U8, U8, I16, I16, I32, I64, F16, BF, F32, F64, C64, C128},
    {I8, I16, I8, I16, I32, I64, F16, BF, F32, F64, C64, C128},
    {I16, I16, I16, I16, I32, I64, F16, BF, F32, F64, C64, C128},
    {I32, I32, I32, I32, I32, I64, F16, BF, F32, F64, C64, C128},
    {I64, I64, I64, I64, I64, I64, F16, BF, F32, F64, C64, C128},
    {F16, F16, F16, F16, F16, F16, F16, F32, F32, F64, C64, C128},
    {BF, BF, BF, BF, BF, BF, F32, BF, F32, F64, C64, C128},
    {F32, F32, F32, F32, F32, F32, F32, F32, F32, F64, C64, C128},
    {F64, F64, F64, F64, F64, F64, F64, F64, F64, F64, C128, C128},
    {C64, C64, C64, C64, C64, C64, C64, C64, C64, C128, C64, C128},
    {C128, C128, C128, C128, C128, C128, C128, C128, C128, C128, C128, C128},
};
#undef B
#undef U8
#undef I8
#undef I16
#undef I32
#undef I64
#undef F16
#undef BF
#undef F32
#undef F64
#undef C64
#undef C128

int tpulw__promote(int a, int b) {
  if (a < 0) return b;
  if (b < 0) return a;
  return k_promote[a][b];
}

static int category(int dt) {
  if (dt == TPU_BOOL) return 0;
  if (tpu_dtype_is_int(dt)) return 1;
  if (tpu_dtype_is_complex(dt)) return 3;
  return 2;
}

int tpulw__can_cast(int from, int to) { return category(from) <= category(to); }

const char *tpulw__torch_name(int dt) {
  static const char *const names[TPU_NUM_DTYPES] = {
      "Bool", "Byte", "Char", "Short", "Int", "Long",
      "Half", "BFloat16", "Float", "Double", "ComplexFloat", "ComplexDouble"};
  return (dt >= 0 && dt < TPU_NUM_DTYPES) ? names[dt] : "?";
}

const char *tpulw__c_name(int dt) {
  static const char *const names[TPU_NUM_DTYPES] = {
      "bool", "unsigned char", "signed char", "short int", "int", "long int",
      "c10::Half", "c10::BFloat16", "float", "double", "c10::complex<float>",
      "c10::complex<double>"};
  return (dt >= 0 && dt < TPU_NUM_DTYPES) ? names[dt] : "?";
}

int tpulw__out_dtype(const tpulw__b *b) {
  for (int i = 0; i < b->nargs; i++) {
    const tpulw_arg *a = &b->args[i];
    if (a->is_output && a->kind == TPULW_TENSOR && a->t.defined) return a->t.view.dtype;
  }
  return -1;
}

/* c10 combine_categories(higher, lower). */
static int combine(int higher, int lower) {
  if (higher < 0) return lower;
  if (tpu_dtype_is_complex(higher)) return higher;
  if (lower >= 0 && tpu_dtype_is_complex(lower))
    return tpu_dtype_is_float(higher) ? tpu_dtype_to_complex(higher) : lower;
  if (tpu_dtype_is_float(higher)) return higher;
  if (higher == TPU_BOOL || (lower >= 0 && tpu_dtype_is_float(lower)))
    return tpulw__promote(higher, lower);
  return higher;
}

int tpulw__result_type(int n, const tpulw__opnd *ops) {
  int dim_r = -1, zero_r = -1, wrap_r = -1;
  for (int i = 0; i < n; i++) {
    const tpulw__opnd *o = &ops[i];
    if (o->kind == LW_OPND_TENSOR) {
      int dt = o->t->view.dtype;
      if (o->t->wrapped_number) {
        if (tpu_dtype_is_float(dt)) dt = LW_DEFAULT_FLOAT;
        if (tpu_dtype_is_complex(dt)) dt = TPU_C64;
        wrap_r = tpulw__promote(wrap_r, dt);
      } else if (o->t->view.ndim == 0) {
        zero_r = tpulw__promote(zero_r, dt);
      } else {
        dim_r = tpulw__promote(dim_r, dt);
      }
    } else if (o->kind == LW_OPND_SCALAR) {
      int dt = o->s.kind == LW_SK_BOOL      ? TPU_BOOL
               : o->s.kind == LW_SK_INT     ? TPU_I64
               : o->s.kind == LW_SK_COMPLEX ? TPU_C64
                                            : LW_DEFAULT_FLOAT;
      wrap_r = tpulw__promote(wrap_r, dt);
    }
  }
  return combine(dim_r, combine(zero_r, wrap_r));
}

int tpulw__opmath(int dt) {
  return (dt == TPU_F16 || dt == TPU_BF16) ? TPU_F32 : dt;
}

int tpulw__float_or_default(int dt) {
  return tpu_dtype_is_float(dt) || tpu_dtype_is_complex(dt) ? dt : LW_DEFAULT_FLOAT;
}

/* ---- graph values ------------------------------------------------------- */

tpulw__shape tpulw__info(const tpulw__b *b, tpuir_val v) {
  tpulw__shape s;
  memset(&s, 0, sizeof s);
  s.dtype = -1;
  if (v >= 0) tpuir_value_info(b->g, v, &s.dtype, &s.ndim, s.sizes);
  return s;
}

int64_t tpulw__numel(const tpulw__shape *s) {
  int64_t n = 1;
  for (int i = 0; i < s->ndim; i++) n *= s->sizes[i];
  return n;
}

static int same_sizes(int nd, const int64_t *a, const int64_t *c) {
  for (int i = 0; i < nd; i++)
    if (a[i] != c[i]) return 0;
  return 1;
}

static int same_view(const tpu_view *a, const tpu_view *c) {
  if (a->base != c->base || a->offset != c->offset || a->dtype != c->dtype ||
      a->ndim != c->ndim)
    return 0;
  for (int i = 0; i < a->ndim; i++)
    if (a->sizes[i] != c->sizes[i] || a->strides[i] != c->strides[i])
      return 0;
  return 1;
}

static int64_t wrap_int(int dt, int64_t v) {
  switch (dt) {
  case TPU_BOOL: return v != 0;
  case TPU_U8: return (uint8_t)v;
  case TPU_I8: return (int8_t)v;
  case TPU_I16: return (int16_t)v;
  case TPU_I32: return (int32_t)v;
  default: return v;
  }
}

tpuir_val tpulw__const(tpulw__b *b, int dtype, double v) {
  if (tpu_dtype_is_complex(dtype)) /* (v, 0): no complex constant nodes */
    return tpuir_convert(b->g, tpuir_const_f(b->g, tpu_dtype_complex_part(dtype), v), dtype);
  if (tpu_dtype_is_float(dtype)) return tpuir_const_f(b->g, dtype, v);
  if (dtype == TPU_BOOL) return tpuir_const_i(b->g, dtype, v != 0);
  int64_t i = 0;
  if (isfinite(v) && fabs(v) < 9.2e18) i = (int64_t)v;
  return tpuir_const_i(b->g, dtype, wrap_int(dtype, i));
}

tpuir_val tpulw__const_s(tpulw__b *b, int dtype, tpulw__scalar s) {
  if (tpu_dtype_is_complex(dtype)) {
    int pd = tpu_dtype_complex_part(dtype);
    double re = s.kind == LW_SK_INT ? (double)s.i : s.f;
    return tpuir_complex(b->g, tpuir_const_f(b->g, pd, re),
                         tpuir_const_f(b->g, pd, s.kind == LW_SK_COMPLEX ? s.im : 0.0));
  }
  if (tpu_dtype_is_float(dtype)) return tpuir_const_f(b->g, dtype, s.f);
  if (dtype == TPU_BOOL)
    return tpuir_const_i(b->g, dtype, s.kind == LW_SK_FLOAT ? s.f != 0 : s.i != 0);
  if (s.kind == LW_SK_FLOAT) return tpulw__const(b, dtype, s.f);
  return tpuir_const_i(b->g, dtype, wrap_int(dtype, s.i));
}

tpuir_val tpulw__tensor(tpulw__b *b, const tpulw_tensor *t) {
  if (!t || !t->defined)
    return tpu_error(TPU_E_INTERNAL, "lowering: undefined tensor operand");
  if (t->device < 0) {
    tpulw__scalar s;
    cpu_scalar(t, &s);
    return tpulw__const_s(b, t->view.dtype, s);
  }
  for (int i = 0; i < b->nparams; i++)
    if (same_view(&b->params[i], &t->view)) return b->param_vals[i];
  if (b->nparams == b->capparams) {
    int cap = b->capparams ? 2 * b->capparams : 8;
    tpu_view *p = realloc(b->params, (size_t)cap * sizeof *p);
    if (!p) return tpu_error(TPU_E_INTERNAL, "lowering: out of host memory");
    b->params = p;
    tpuir_val *pv = realloc(b->param_vals, (size_t)cap * sizeof *pv);
    if (!pv) return tpu_error(TPU_E_INTERNAL, "lowering: out of host memory");
    b->param_vals = pv;
    b->capparams = cap;
  }
  tpuir_val v = tpuir_param(b->g, t->view.dtype, t->view.ndim, t->view.sizes);
  if (v < 0) return v;
  b->params[b->nparams] = t->view;
  b->param_vals[b->nparams] = v;
  b->nparams++;
  return v;
}

tpuir_val tpulw__tensor_compact(tpulw__b *b, const tpulw_tensor *t) {
  if (!t || t->device < 0) return tpulw__tensor(b, t);
  tpulw_tensor c = *t;
  for (int d = 0; d < c.view.ndim; d++)
    if (c.view.strides[d] == 0) c.view.sizes[d] = 1;
  return tpulw__tensor(b, &c);
}

tpuir_val tpulw__convert(tpulw__b *b, tpuir_val v, int dtype) {
  if (v < 0) return v;
  tpulw__shape s = tpulw__info(b, v);
  if (s.dtype == dtype) return v;
  return tpuir_convert(b->g, v, dtype);
}

tpuir_val tpulw__opnd_val(tpulw__b *b, const tpulw__opnd *o, int dtype) {
  if (o->kind == LW_OPND_TENSOR) {
    if (o->t->device < 0) { /* fold the conversion into the constant */
      tpulw__scalar s;
      cpu_scalar(o->t, &s);
      return tpulw__const_s(b, dtype, s);
    }
    return tpulw__convert(b, tpulw__tensor(b, o->t), dtype);
  }
  if (o->kind == LW_OPND_SCALAR) return tpulw__const_s(b, dtype, o->s);
  return tpu_error(TPU_E_INTERNAL, "lowering: missing operand");
}

tpuir_val tpulw__bcast(tpulw__b *b, tpuir_val v, int ndim, const int64_t *sizes) {
  if (v < 0) return v;
  tpulw__shape s = tpulw__info(b, v);
  if (s.ndim == ndim && same_sizes(ndim, s.sizes, sizes)) return v;
  if (s.ndim > ndim)
    return tpu_error(TPU_E_INVALID, "cannot broadcast a %d-dim value to %d dims",
                     s.ndim, ndim);
  int64_t dims[TPU_MAX_DIMS];
  for (int i = 0; i < s.ndim; i++) dims[i] = ndim - s.ndim + i;
  return tpuir_broadcast_in_dim(b->g, v, ndim, sizes, dims);
}

tpuir_val tpulw__full(tpulw__b *b, int dtype, int ndim, const int64_t *sizes,
                  double v) {
  return tpulw__bcast(b, tpulw__const(b, dtype, v), ndim, sizes);
}

int tpulw__bcast_shape(const tpulw__b *b, int n, const tpuir_val *vs, int *ndim,
                   int64_t *sizes) {
  int nd = 0;
  tpulw__shape sh[8];
  if (n > 8) return tpu_error(TPU_E_INTERNAL, "tpulw__bcast_shape: too many operands");
  for (int i = 0; i < n; i++) {
    if (vs[i] < 0) return vs[i];
    sh[i] = tpulw__info(b, vs[i]);
    if (sh[i].ndim > nd) nd = sh[i].ndim;
  }
  for (int d = 0; d < nd; d++) sizes[d] = 1;
  for (int d = 0; d < nd; d++) {
    int have = -1; /* operand index that fixed a non-1 size */
    for (int i = 0; i < n; i++) {
      int k = d - (nd - sh[i].ndim);
      if (k < 0) continue;
      int64_t sz = sh[i].sizes[k];
      if (sz == 1) continue;
      if (have < 0 || sizes[d] == 1) {
        sizes[d] = sz;
        have = i;
      } else if (sizes[d] != sz) {
        return tpu_error(TPU_E_INVALID,
                         "The size of tensor a (%lld) must match the size of "
                         "tensor b (%lld) at non-singleton dimension %d",
                         (long long)sizes[d], (long long)sz, d);
      }
    }
  }
  *ndim = nd;
  return TPU_OK;
}

int tpulw__bcast_all(tpulw__b *b, int n, tpuir_val *vs) {
  int nd = 0;
  int64_t sizes[TPU_MAX_DIMS];
  int rc = tpulw__bcast_shape(b, n, vs, &nd, sizes);
  if (rc < 0) return rc;
  for (int i = 0; i < n; i++) {
    vs[i] = tpulw__bcast(b, vs[i], nd, sizes);
    if (vs[i] < 0) return vs[i];
  }
  return TPU_OK;
}

tpuir_val tpulw__bin(tpulw__b *b, int op, tpuir_val x, tpuir_val y) {
  tpuir_val v[2] = {x, y};
  int rc = tpulw__bcast_all(b, 2, v);
  if (rc < 0) return rc;
  return tpuir_binary(b->g, op, v[0], v[1]);
}

tpuir_val tpulw__un(tpulw__b *b, int op, tpuir_val x) {
  if (x < 0) return x;
  return tpuir_unary(b->g, op, x);
}

tpuir_val tpulw__bin_c(tpulw__b *b, int op, tpuir_val x, double c) {
  if (x < 0) return x;
  tpulw__shape s = tpulw__info(b, x);
  return tpulw__bin(b, op, x, tpulw__const(b, s.dtype, c));
}

tpuir_val tpulw__sel(tpulw__b *b, tpuir_val p, tpuir_val t, tpuir_val f) {
  tpuir_val v[3] = {p, t, f};
  int rc = tpulw__bcast_all(b, 3, v);
  if (rc < 0) return rc;
  return tpuir_select(b->g, v[0], v[1], v[2]);
}

tpuir_val tpulw__reshape(tpulw__b *b, tpuir_val v, int ndim, const int64_t *sizes) {
  if (v < 0) return v;
  tpulw__shape s = tpulw__info(b, v);
  if (s.ndim == ndim && same_sizes(ndim, s.sizes, sizes)) return v;
  return tpuir_reshape(b->g, v, ndim, sizes);
}

int tpulw__result(tpulw__b *b, tpuir_val v) {
  if (v < 0) return v;
  if (b->nres >= LW_MAX_RES)
    return tpu_error(TPU_E_INTERNAL, "lowering: too many results");
  b->res_dest[b->nres] = -1;
  b->res[b->nres++] = v;
  return TPU_OK;
}

static int arg_index(const tpulw__b *b, const char *name) {
  for (int i = 0; i < b->nargs; i++)
    if (b->args[i].name && strcmp(b->args[i].name, name) == 0) return i;
  return -1;
}

int tpulw__result_to(tpulw__b *b, tpuir_val v, const char *name) {
  int idx = arg_index(b, name);
  if (idx < 0 || idx >= 64 || b->args[idx].kind != TPULW_TENSOR ||
      !b->args[idx].t.defined || b->args[idx].t.device < 0)
    return tpu_error(TPU_E_UNSUPPORTED, "%s: '%s' is not a device tensor",
                     b->base, name);
  int rc = tpulw__result(b, v);
  if (rc < 0) return rc;
  b->res_dest[b->nres - 1] = idx;
  b->not_out |= 1ull << idx;
  return TPU_OK;
}

void tpulw__not_out(tpulw__b *b, const char *name) {
  int idx = arg_index(b, name);
  if (idx >= 0 && idx < 64) b->not_out |= 1ull << idx;
}

int tpulw__result_as(tpulw__b *b, tpuir_val v, int dtype) {
  return tpulw__result(b, tpulw__convert(b, v, dtype));
}

int tpulw__wrap_dim(int64_t dim, int ndim, int *out) {
  int64_t n = ndim > 0 ? ndim : 1;
  if (dim < -n || dim >= n)
    return tpu_error(TPU_E_INDEX,
                     "Dimension out of range (expected to be in range of "
                     "[%lld, %lld], but got %lld)",
                     (long long)-n, (long long)(n - 1), (long long)dim);
  if (dim < 0) dim += n;
  *out = ndim > 0 ? (int)dim : 0;
  return TPU_OK;
}

int tpulw__dim_mask(const tpulw__b *b, const char *name, int nd, uint32_t *mask) {
  int n;
  int64_t scratch;
  const int64_t *dims = tpulw__ints(b, name, &n, &scratch);
  *mask = 0;
  if (n <= 0) {
    *mask = nd > 0 ? (uint32_t)((1ull << nd) - 1) : 0;
    return TPU_OK;
  }
  for (int i = 0; i < n; i++) {
    int d;
    int rc = tpulw__wrap_dim(dims[i], nd, &d);
    if (rc < 0) return rc;
    if (nd == 0) continue;
    if (*mask & (1u << d))
      return tpu_error(TPU_E_INVALID,
                       "dim %d appears multiple times in the list of dims", d);
    *mask |= 1u << d;
  }
  return TPU_OK;
}

tpuir_val tpulw__reduce_dims(tpulw__b *b, int kind, tpuir_val v, uint32_t mask,
                         int keepdim) {
  if (v < 0) return v;
  tpulw__shape s = tpulw__info(b, v);
  int64_t dims[TPU_MAX_DIMS];
  int nr = 0;
  int64_t keep[TPU_MAX_DIMS];
  for (int d = 0; d < s.ndim; d++) {
    if (mask & (1u << d)) {
      dims[nr++] = d;
      keep[d] = 1;
    } else {
      keep[d] = s.sizes[d];
    }
  }
  tpuir_val r = tpuir_reduce(b->g, kind, v, nr, dims);
  if (r < 0 || !keepdim) return r;
  return tpulw__reshape(b, r, s.ndim, keep);
}

/* ---- helpers shared by several families -------------------------------- */

const char *tpulw__fmt_list(char *buf, size_t cap, int nd, const int64_t *s) {
  size_t k = 0;
  buf[0] = 0;
  for (int i = 0; i < nd && k < cap; i++)
    k += (size_t)snprintf(buf + k, cap - k, "%s%lld", i ? ", " : "", (long long)s[i]);
  return buf;
}

int tpulw__nsp_of(const tpulw__b *b) { return strstr(b->base, "3d") ? 3 : 2; }

int tpulw__float_only(const tpulw__b *b, int dt) {
  if (tpu_dtype_is_float(dt)) return TPU_OK;
  return tpu_error(TPU_E_UNSUPPORTED, "\"%s\" not implemented for '%s'", b->base,
                   tpulw__torch_name(dt));
}

int tpulw__need_tpu(const tpulw__b *b, const tpulw_tensor *t) {
  if (!t || t->device < 0)
    return tpu_error(TPU_E_UNSUPPORTED, "%s: operands must be tpu tensors", b->base);
  return TPU_OK;
}

tpuir_val tpulw__pnorm_last(tpulw__b *b, tpuir_val d, double p) {
  tpulw__shape s = tpulw__info(b, d);
  uint32_t m = 1u << (s.ndim - 1);
  tpuir_val a = tpulw__un(b, TPUIR_ABS, d);
  if (p == 0) return tpulw__reduce_dims(b, TPUIR_RED_SUM, tpulw__convert(b, tpulw__bin_c(b, TPUIR_NE, d, 0), s.dtype), m, 0);
  if (p == 1) return tpulw__reduce_dims(b, TPUIR_RED_SUM, a, m, 0);
  if (p == 2) return tpulw__un(b, TPUIR_SQRT, tpulw__reduce_dims(b, TPUIR_RED_SUM, tpulw__bin(b, TPUIR_MUL, d, d), m, 0));
  if (isinf(p)) return tpulw__reduce_dims(b, TPUIR_RED_MAX, a, m, 0);
  tpuir_val sp = tpulw__reduce_dims(b, TPUIR_RED_SUM, tpulw__bin_c(b, TPUIR_POW, a, p), m, 0);
  return tpulw__bin_c(b, TPUIR_POW, sp, 1.0 / p);
}

tpuir_val tpulw__shift_along(tpulw__b *b, tpuir_val v, int dim, int64_t k, tpuir_val fill) {
  int64_t lo[TPU_MAX_DIMS] = {0}, hi[TPU_MAX_DIMS] = {0}, in[TPU_MAX_DIMS] = {0};
  lo[dim] = k;
  hi[dim] = -k;
  return tpuir_pad(b->g, v, fill, lo, hi, in);
}

tpuir_val tpulw__scan_op(tpulw__b *b, tpuir_val x, int dim, int op, double ident) {
  tpulw__shape s = tpulw__info(b, x);
  if (s.ndim == 0) return x;
  int64_t n = s.sizes[dim];
  if ((op == TPUIR_ADD || op == TPUIR_MAX) && s.dtype != TPU_BOOL && n > 1) {
    int64_t w[TPU_MAX_DIMS], lo[TPU_MAX_DIMS] = {0}, hi[TPU_MAX_DIMS] = {0};
    for (int d = 0; d < s.ndim; d++) w[d] = d == dim ? n : 1;
    lo[dim] = n - 1;
    return tpuir_reduce_window(b->g, op == TPUIR_ADD ? TPUIR_RED_SUM : TPUIR_RED_MAX, x, w,
                               NULL, lo, hi, NULL);
  }
  tpuir_val id = tpulw__const(b, s.dtype, ident);
  for (int64_t k = 1; k < s.sizes[dim] && x >= 0; k *= 2)
    x = tpulw__bin(b, op, tpulw__shift_along(b, x, dim, k, id), x);
  return x;
}

const tpulw_tensor *tpulw__tpu_self(tpulw__b *b) {
  const tpulw_tensor *t = tpulw__tensor_arg(b, "self");
  return t && t->device >= 0 ? t : NULL;
}

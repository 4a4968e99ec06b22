/* lower/reduce.c - reductions: sum/mean/prod/nansum, max/min/amax/amin/
 * aminmax, argmax/argmin, var/std(_mean), all/any, logsumexp, vector
 * norms, renorm, count_nonzero, segment_reduce; scans along a dim:
 * cumsum (a cumulative reduce_window, tpulw__scan_op), cumprod,
 * logcumsumexp and cummax/cummin (value + index pairs with PyTorch CPU's
 * tie/NaN rule) by log-step doubling.
 */
#include <math.h>
#include <string.h>

#include "lower/internal.h"

enum {
  R_SUM = 1, R_PROD, R_MEAN, R_NANSUM, R_MAX_ALL, R_MIN_ALL, R_MAX_DIM,
  R_MIN_DIM, R_AMAX, R_AMIN, R_AMINMAX, R_ARGMAX, R_ARGMIN, R_VAR, R_STD,
  R_VAR_MEAN, R_STD_MEAN, R_ALL, R_ANY, R_LOGSUMEXP, R_VNORM, R_NORM,
  R_COUNT_NZ, R_CUMSUM, R_CUMPROD
};

static int get_self(const tpulw__b *b, const tpulw_tensor **t) {
  *t = tpulw__tensor_arg(b, "self");
  if (!*t) return tpu_error(TPU_E_UNSUPPORTED, "%s: no tensor self", b->base);
  return TPU_OK;
}

/* dtype of the out= tensor named `name`, or -1. */
static int out_dtype(const tpulw__b *b, const char *name) {
  const tpulw_arg *a = tpulw__arg(b, name);
  if (!a || !a->is_output || a->kind != TPULW_TENSOR || !a->t.defined) return -1;
  return a->t.view.dtype;
}

/* Check that every dim in mask has non-zero size (amax, max.dim ...). */
static int check_nonempty(const char *nm, const tpulw__shape *s, uint32_t mask) {
  for (int d = 0; d < s->ndim; d++)
    if ((mask & (1u << d)) && s->sizes[d] == 0)
      return tpu_error(TPU_E_INDEX,
                       "%s(): Expected reduction dim %d to have non-zero size.",
                       nm, d);
  return TPU_OK;
}

static int64_t count_of(const tpulw__shape *s, uint32_t mask) {
  int64_t n = 1;
  for (int d = 0; d < s->ndim; d++)
    if (mask & (1u << d)) n *= s->sizes[d];
  return n;
}

/* sum / prod / nansum / mean / count_nonzero */
static int sum_fn(tpulw__b *b) {
  const tpulw_tensor *self;
  int rc = get_self(b, &self);
  if (rc < 0) return rc;
  int in_dt = self->view.dtype;
  int dt = tpulw__dtype_arg(b, "dtype", -1);
  int od = out_dtype(b, "out");
  if (b->op == R_MEAN) {
    int chk = dt >= 0 ? dt : in_dt;
    if (!tpu_dtype_is_float(chk))
      return tpu_error(TPU_E_INVALID,
                       "mean(): could not infer output dtype. Input dtype must "
                       "be either a floating point or complex dtype. Got: %s",
                       tpulw__torch_name(chk));
  }
  if (dt < 0) dt = od;
  if (dt < 0) dt = tpu_dtype_is_float(in_dt) ? in_dt : TPU_I64;
  if (b->op == R_COUNT_NZ) dt = TPU_I64;
  tpuir_val x = tpulw__tensor(b, self);
  tpulw__shape s = tpulw__info(b, x);
  uint32_t mask;
  rc = tpulw__dim_mask(b, "dim", s.ndim, &mask);
  if (rc < 0) return rc;
  int keepdim = (int)tpulw__int(b, "keepdim", 0);
  switch (b->op) {
  case R_SUM:
    return tpulw__result(b, tpulw__reduce_dims(b, TPUIR_RED_SUM, tpulw__convert(b, x, dt), mask, keepdim));
  case R_PROD:
    return tpulw__result(b, tpulw__reduce_dims(b, TPUIR_RED_PROD, tpulw__convert(b, x, dt), mask, keepdim));
  case R_NANSUM: {
    x = tpulw__convert(b, x, dt);
    if (tpu_dtype_is_float(dt))
      x = tpulw__sel(b, tpulw__un(b, TPUIR_IS_NAN, x), tpulw__const(b, dt, 0), x);
    return tpulw__result(b, tpulw__reduce_dims(b, TPUIR_RED_SUM, x, mask, keepdim));
  }
  case R_COUNT_NZ: {
    tpuir_val nz = tpulw__bin(b, TPUIR_NE, x, tpulw__const(b, in_dt, 0));
    return tpulw__result(b, tpulw__reduce_dims(b, TPUIR_RED_SUM, tpulw__convert(b, nz, TPU_I64), mask, 0));
  }
  case R_MEAN: {
    int cdt = tpulw__opmath(dt);
    tpuir_val sum = tpulw__reduce_dims(b, TPUIR_RED_SUM, tpulw__convert(b, x, cdt), mask, keepdim);
    tpuir_val r = tpulw__bin_c(b, TPUIR_DIV, sum, (double)count_of(&s, mask));
    return tpulw__result_as(b, r, dt);
  }
  default:
    return tpu_error(TPU_E_INTERNAL, "sum_fn: bad op");
  }
}

/* max()/min() over everything */
static int extreme_all_fn(tpulw__b *b) {
  const tpulw_tensor *self;
  int rc = get_self(b, &self);
  if (rc < 0) return rc;
  int is_max = b->op == R_MAX_ALL;
  if (tpu_view_numel(&self->view) == 0)
    return tpu_error(TPU_E_INVALID,
                     "%s(): Expected reduction dim to be specified for "
                     "input.numel() == 0. Specify the reduction dim with the "
                     "'dim' argument.", is_max ? "max" : "min");
  tpuir_val x = tpulw__tensor(b, self);
  tpulw__shape s = tpulw__info(b, x);
  int kind = is_max ? TPUIR_RED_MAX : TPUIR_RED_MIN;
  if (s.dtype == TPU_BOOL) kind = is_max ? TPUIR_RED_OR : TPUIR_RED_AND;
  uint32_t mask = s.ndim ? (uint32_t)((1ull << s.ndim) - 1) : 0;
  return tpulw__result(b, tpulw__reduce_dims(b, kind, x, mask, 0));
}

/* argreduce along dim (bool compared as uint8) */
static tpuir_val argred(tpulw__b *b, int kind, tpuir_val x, int dim) {
  tpulw__shape s = tpulw__info(b, x);
  if (s.dtype == TPU_BOOL) x = tpulw__convert(b, x, TPU_U8);
  return tpuir_argreduce(b->g, kind, x, dim);
}

static tpuir_val keep_dim(tpulw__b *b, tpuir_val r, const tpulw__shape *in, int dim) {
  int64_t sizes[TPU_MAX_DIMS];
  for (int d = 0; d < in->ndim; d++) sizes[d] = d == dim ? 1 : in->sizes[d];
  return tpulw__reshape(b, r, in->ndim, sizes);
}

/* max.dim / min.dim -> (values, indices) */
static int extreme_dim_fn(tpulw__b *b) {
  const tpulw_tensor *self;
  int rc = get_self(b, &self);
  if (rc < 0) return rc;
  int is_max = b->op == R_MAX_DIM;
  b->out_rule = LW_OUT_SAME;
  tpuir_val x = tpulw__tensor(b, self);
  tpulw__shape s = tpulw__info(b, x);
  int dim;
  rc = tpulw__wrap_dim(tpulw__int(b, "dim", 0), s.ndim, &dim);
  if (rc < 0) return rc;
  int keepdim = (int)tpulw__int(b, "keepdim", 0);
  if (s.ndim == 0) {
    rc = tpulw__result(b, x);
    if (rc < 0) return rc;
    return tpulw__result(b, tpulw__const(b, TPU_I64, 0));
  }
  rc = check_nonempty(is_max ? "max" : "min", &s, 1u << dim);
  if (rc < 0) return rc;
  int kind = is_max ? TPUIR_RED_MAX : TPUIR_RED_MIN;
  int vkind = kind;
  if (s.dtype == TPU_BOOL) vkind = is_max ? TPUIR_RED_OR : TPUIR_RED_AND;
  tpuir_val v = tpulw__reduce_dims(b, vkind, x, 1u << dim, keepdim);
  tpuir_val i = argred(b, kind, x, dim);
  if (keepdim) i = keep_dim(b, i, &s, dim);
  rc = tpulw__result(b, v);
  if (rc < 0) return rc;
  return tpulw__result(b, i);
}

/* amax / amin / aminmax */
static int amax_fn(tpulw__b *b) {
  const tpulw_tensor *self;
  int rc = get_self(b, &self);
  if (rc < 0) return rc;
  tpuir_val x = tpulw__tensor(b, self);
  tpulw__shape s = tpulw__info(b, x);
  uint32_t mask;
  int keepdim = (int)tpulw__int(b, "keepdim", 0);
  if (b->op == R_AMINMAX) {
    if (tpulw__none(b, "dim")) {
      if (tpulw__numel(&s) == 0)
        return tpu_error(TPU_E_INVALID,
                         "aminmax(): cannot compute aminmax over an empty "
                         "dimension as the operation has no identity.");
      mask = s.ndim ? (uint32_t)((1ull << s.ndim) - 1) : 0;
    } else {
      int d;
      rc = tpulw__wrap_dim(tpulw__int(b, "dim", 0), s.ndim, &d);
      if (rc < 0) return rc;
      mask = s.ndim ? 1u << d : 0;
      if (s.ndim && s.sizes[d] == 0)
        return tpu_error(TPU_E_INDEX,
                         "aminmax(): Expected reduction dim %d to have "
                         "non-zero size.", d);
    }
  } else {
    rc = tpulw__dim_mask(b, "dim", s.ndim, &mask);
    if (rc < 0) return rc;
    int nd_list;
    int64_t scratch;
    tpulw__ints(b, "dim", &nd_list, &scratch);
    if (nd_list <= 0 && tpulw__numel(&s) == 0)
      return tpu_error(TPU_E_INVALID,
                       "%s(): Expected reduction dim to be specified for input.numel() "
                       "== 0. Specify the reduction dim with the 'dim' argument.",
                       b->op == R_AMAX ? "amax" : "amin");
    if (s.ndim > 0 && tpulw__numel(&s) == 0) {
      rc = check_nonempty(b->op == R_AMAX ? "amax" : "amin", &s, mask);
      if (rc < 0) return rc;
    }
  }
  int isb = s.dtype == TPU_BOOL;
  int kmax = isb ? TPUIR_RED_OR : TPUIR_RED_MAX;
  int kmin = isb ? TPUIR_RED_AND : TPUIR_RED_MIN;
  if (b->op == R_AMAX) return tpulw__result(b, tpulw__reduce_dims(b, kmax, x, mask, keepdim));
  if (b->op == R_AMIN) return tpulw__result(b, tpulw__reduce_dims(b, kmin, x, mask, keepdim));
  rc = tpulw__result(b, tpulw__reduce_dims(b, kmin, x, mask, keepdim));
  if (rc < 0) return rc;
  return tpulw__result(b, tpulw__reduce_dims(b, kmax, x, mask, keepdim));
}

static int argmax_fn(tpulw__b *b) {
  const tpulw_tensor *self;
  int rc = get_self(b, &self);
  if (rc < 0) return rc;
  const char *nm = b->op == R_ARGMAX ? "argmax" : "argmin";
  b->out_rule = LW_OUT_SAME;
  if (self->view.dtype == TPU_BOOL)
    return tpu_error(TPU_E_INVALID, "%s(): does not support bool input", nm);
  int kind = b->op == R_ARGMAX ? TPUIR_RED_MAX : TPUIR_RED_MIN;
  tpuir_val x = tpulw__tensor(b, self);
  tpulw__shape s = tpulw__info(b, x);
  int keepdim = (int)tpulw__int(b, "keepdim", 0);
  if (tpulw__none(b, "dim")) {
    int64_t n = tpulw__numel(&s);
    if (n == 0)
      return tpu_error(TPU_E_INDEX,
                       "%s(): Expected reduction dim to be specified for "
                       "input.numel() == 0.", nm);
    tpuir_val r = argred(b, kind, tpulw__reshape(b, x, 1, &n), 0);
    if (keepdim) {
      int64_t ones[TPU_MAX_DIMS];
      for (int d = 0; d < s.ndim; d++) ones[d] = 1;
      r = tpulw__reshape(b, r, s.ndim, ones);
    }
    return tpulw__result(b, r);
  }
  int dim;
  rc = tpulw__wrap_dim(tpulw__int(b, "dim", 0), s.ndim, &dim);
  if (rc < 0) return rc;
  if (s.ndim == 0) return tpulw__result(b, tpulw__const(b, TPU_I64, 0));
  rc = check_nonempty(nm, &s, 1u << dim);
  if (rc < 0) return rc;
  tpuir_val r = argred(b, kind, x, dim);
  if (keepdim) r = keep_dim(b, r, &s, dim);
  return tpulw__result(b, r);
}

/* var / std / var_mean / std_mean (correction form) */
static int var_fn(tpulw__b *b) {
  const tpulw_tensor *self;
  int rc = get_self(b, &self);
  if (rc < 0) return rc;
  int dt = self->view.dtype;
  if (!tpu_dtype_is_float(dt))
    return tpu_error(TPU_E_INVALID,
                     "std and var only support floating point and complex dtypes");
  tpuir_val x = tpulw__tensor(b, self);
  tpulw__shape s = tpulw__info(b, x);
  uint32_t mask;
  rc = tpulw__dim_mask(b, "dim", s.ndim, &mask);
  if (rc < 0) return rc;
  int keepdim = (int)tpulw__int(b, "keepdim", 0);
  double corr = tpulw__float(b, "correction", 1.0);
  if (tpulw__arg(b, "unbiased") && tpulw__none(b, "correction"))
    corr = tpulw__int(b, "unbiased", 1) ? 1.0 : 0.0;
  int cdt = tpulw__opmath(dt);
  x = tpulw__convert(b, x, cdt);
  double n = (double)count_of(&s, mask);
  tpuir_val mean_k = tpulw__bin_c(b, TPUIR_DIV, tpulw__reduce_dims(b, TPUIR_RED_SUM, x, mask, 1), n);
  tpuir_val d = tpulw__bin(b, TPUIR_SUB, x, mean_k);
  tpuir_val ss = tpulw__reduce_dims(b, TPUIR_RED_SUM, tpulw__bin(b, TPUIR_MUL, d, d), mask, keepdim);
  double dof = n - corr;
  if (dof < 0) dof = 0;
  tpuir_val var = tpulw__bin_c(b, TPUIR_DIV, ss, dof);
  if (b->op == R_STD || b->op == R_STD_MEAN) var = tpulw__un(b, TPUIR_SQRT, var);
  rc = tpulw__result_as(b, var, dt);
  if (rc < 0 || (b->op != R_VAR_MEAN && b->op != R_STD_MEAN)) return rc;
  tpuir_val mean = mean_k;
  if (!keepdim) {
    tpulw__shape m = tpulw__info(b, var);
    mean = tpulw__reshape(b, mean_k, m.ndim, m.sizes);
  }
  return tpulw__result_as(b, mean, dt);
}

/* all / any */
static int all_any_fn(tpulw__b *b) {
  const tpulw_tensor *self;
  int rc = get_self(b, &self);
  if (rc < 0) return rc;
  int is_all = b->op == R_ALL;
  int in_dt = self->view.dtype;
  int rdt = in_dt == TPU_U8 ? TPU_U8 : TPU_BOOL;
  int od = out_dtype(b, "out");
  if (od >= 0 && od != TPU_BOOL && !(in_dt == TPU_U8 && od == TPU_U8))
    return tpu_error(TPU_E_INVALID, "%s only supports bool tensor for result, got: %s",
                     is_all ? "all" : "any", tpulw__torch_name(od));
  tpuir_val x = tpulw__convert(b, tpulw__tensor(b, self), TPU_BOOL);
  tpulw__shape s = tpulw__info(b, x);
  uint32_t mask;
  rc = tpulw__dim_mask(b, "dim", s.ndim, &mask);
  if (rc < 0) return rc;
  int keepdim = (int)tpulw__int(b, "keepdim", 0);
  tpuir_val r = tpulw__reduce_dims(b, is_all ? TPUIR_RED_AND : TPUIR_RED_OR, x, mask, keepdim);
  b->out_rule = LW_OUT_ANY;
  return tpulw__result_as(b, r, rdt);
}

static int logsumexp_fn(tpulw__b *b) {
  const tpulw_tensor *self;
  int rc = get_self(b, &self);
  if (rc < 0) return rc;
  int dt = tpulw__float_or_default(self->view.dtype);
  int cdt = tpulw__opmath(dt);
  tpuir_val x = tpulw__convert(b, tpulw__tensor(b, self), cdt);
  tpulw__shape s = tpulw__info(b, x);
  uint32_t mask;
  rc = tpulw__dim_mask(b, "dim", s.ndim, &mask);
  if (rc < 0) return rc;
  int keepdim = (int)tpulw__int(b, "keepdim", 0);
  tpuir_val m = tpulw__reduce_dims(b, TPUIR_RED_MAX, x, mask, 1);
  m = tpulw__sel(b, tpulw__un(b, TPUIR_IS_INF, m), tpulw__const(b, cdt, 0), m);
  tpuir_val e = tpulw__un(b, TPUIR_EXP, tpulw__bin(b, TPUIR_SUB, x, m));
  tpuir_val r = tpulw__un(b, TPUIR_LOG, tpulw__reduce_dims(b, TPUIR_RED_SUM, e, mask, keepdim));
  tpulw__shape rs = tpulw__info(b, r);
  r = tpulw__bin(b, TPUIR_ADD, r, tpulw__reshape(b, m, rs.ndim, rs.sizes));
  return tpulw__result_as(b, r, dt);
}

/* p-norm of a (absolute values, float dtype; the result keeps it) over the
 * dims in mask: max/min for +-inf, the count of non-zeros for 0, else
 * (sum a^p)^(1/p) with the 1- and 2-norms special-cased like torch. */
tpuir_val tpulw__pnorm_dims(tpulw__b *b, tpuir_val a, double p, uint32_t mask, int keepdim) {
  int dt = tpulw__info(b, a).dtype;
  if (isinf(p))
    return tpulw__reduce_dims(b, p > 0 ? TPUIR_RED_MAX : TPUIR_RED_MIN, a, mask, keepdim);
  if (p == 0) {
    tpuir_val nz = tpulw__convert(b, tpulw__bin(b, TPUIR_NE, a, tpulw__const(b, dt, 0)), dt);
    return tpulw__reduce_dims(b, TPUIR_RED_SUM, nz, mask, keepdim);
  }
  if (p == 1) return tpulw__reduce_dims(b, TPUIR_RED_SUM, a, mask, keepdim);
  if (p == 2)
    return tpulw__un(b, TPUIR_SQRT, tpulw__reduce_dims(b, TPUIR_RED_SUM, tpulw__bin(b, TPUIR_MUL, a, a),
                                               mask, keepdim));
  tpuir_val ap = tpulw__bin(b, TPUIR_POW, a, tpulw__const(b, dt, p));
  return tpulw__bin(b, TPUIR_POW, tpulw__reduce_dims(b, TPUIR_RED_SUM, ap, mask, keepdim),
                tpulw__const(b, dt, 1.0 / p));
}

/* linalg_vector_norm / norm.ScalarOpt_dim(_dtype) */
static int norm_fn(tpulw__b *b) {
  const tpulw_tensor *self;
  int rc = get_self(b, &self);
  if (rc < 0) return rc;
  int in_dt = self->view.dtype;
  int dt = tpulw__dtype_arg(b, "dtype", -1);
  if (!tpu_dtype_is_float(in_dt))
    return tpu_error(TPU_E_INVALID,
                     "linalg.vector_norm: Expected a floating point or complex "
                     "tensor as input. Got %s", tpulw__torch_name(in_dt));
  if (dt < 0) dt = in_dt;
  double p = tpulw__float(b, b->op == R_VNORM ? "ord" : "p", 2.0);
  int cdt = tpulw__opmath(dt);
  tpuir_val x = tpulw__un(b, TPUIR_ABS, tpulw__convert(b, tpulw__tensor(b, self), cdt));
  tpulw__shape s = tpulw__info(b, x);
  uint32_t mask;
  rc = tpulw__dim_mask(b, "dim", s.ndim, &mask);
  if (rc < 0) return rc;
  int keepdim = (int)tpulw__int(b, "keepdim", 0);
  if (isinf(p) && tpulw__numel(&s) == 0)
    return tpu_error(TPU_E_INVALID,
                     "linalg.vector_norm cannot compute the %s norm on an "
                     "empty tensor because the operation does not have an "
                     "identity", p > 0 ? "inf" : "-inf");
  tpuir_val r = tpulw__pnorm_dims(b, x, p, mask, keepdim);
  return tpulw__result_as(b, r, dt);
}

static int cumsum_fn(tpulw__b *b) {
  const tpulw_tensor *self;
  int rc = get_self(b, &self);
  if (rc < 0) return rc;
  int in_dt = self->view.dtype;
  int dt = tpulw__dtype_arg(b, "dtype", -1);
  if (dt < 0) dt = out_dtype(b, "out");
  if (dt < 0) dt = tpu_dtype_is_float(in_dt) ? in_dt : TPU_I64;
  tpuir_val x = tpulw__tensor(b, self);
  tpulw__shape s = tpulw__info(b, x);
  int dim;
  rc = tpulw__wrap_dim(tpulw__int(b, "dim", 0), s.ndim, &dim);
  if (rc < 0) return rc;
  int cdt = tpulw__opmath(dt);
  tpuir_val r = b->op == R_CUMSUM ? tpulw__scan_op(b, tpulw__convert(b, x, cdt), dim, TPUIR_ADD, 0)
                                   : tpulw__scan_op(b, tpulw__convert(b, x, cdt), dim, TPUIR_MUL, 1);
  return tpulw__result_as(b, r, dt);
}

static int trace_fn(tpulw__b *b) {
  const tpulw_tensor *self;
  int rc = get_self(b, &self);
  if (rc < 0) return rc;
  if (self->view.ndim != 2) return tpu_error(TPU_E_INVALID, "trace: expected a matrix");
  int in_dt = self->view.dtype;
  int dt = tpu_dtype_is_float(in_dt) ? in_dt : TPU_I64;
  tpuir_val x = tpulw__convert(b, tpulw__tensor(b, self), dt);
  tpulw__shape s = tpulw__info(b, x);
  tpuir_val diag = tpulw__bin(b, TPUIR_EQ, tpuir_iota(b->g, TPU_I64, 2, s.sizes, 0),
                          tpuir_iota(b->g, TPU_I64, 2, s.sizes, 1));
  x = tpulw__sel(b, diag, x, tpulw__const(b, dt, 0));
  return tpulw__result(b, tpulw__reduce_dims(b, TPUIR_RED_SUM, x, 3u, 0));
}

/* ---- scans: logcumsumexp, cummax / cummin ------------------------------- */

/* Identity of max (lo = 1: the lowest value) or min (lo = 0: the
 * highest) in dtype dt. */
static tpuir_val extreme_of(tpulw__b *b, int dt, int lo) {
  if (tpu_dtype_is_float(dt)) return tpulw__const(b, dt, lo ? -INFINITY : INFINITY);
  int64_t mn, mx;
  switch (dt) {
    case TPU_BOOL: case TPU_U8: mn = 0; mx = dt == TPU_BOOL ? 1 : 255; break;
    case TPU_I8: mn = INT8_MIN; mx = INT8_MAX; break;
    case TPU_I16: mn = INT16_MIN; mx = INT16_MAX; break;
    case TPU_I32: mn = INT32_MIN; mx = INT32_MAX; break;
    default: mn = INT64_MIN; mx = INT64_MAX; break;
  }
  return tpuir_const_i(b->g, dt, lo ? mn : mx);
}

/* log(exp(a) + exp(b)) like PyTorch's _log_add_exp_helper (equal infinities
 * stay as they are). */
static tpuir_val log_add_exp(tpulw__b *b, tpuir_val a, tpuir_val c) {
  tpuir_val mx = tpulw__bin(b, TPUIR_MAX, a, c), mn = tpulw__bin(b, TPUIR_MIN, a, c);
  tpuir_val r = tpulw__bin(b, TPUIR_ADD, mx, tpulw__un(b, TPUIR_LOG1P, tpulw__un(b, TPUIR_EXP,
                                                                     tpulw__bin(b, TPUIR_SUB, mn, mx))));
  tpuir_val same_inf = tpulw__bin(b, TPUIR_AND, tpulw__bin(b, TPUIR_EQ, mn, mx), tpulw__un(b, TPUIR_IS_INF, mx));
  return tpulw__sel(b, same_inf, mx, r);
}

/* _logcumsumexp(self, dim) (+ out=) */
static int logcumsumexp_fn(tpulw__b *b) {
  const tpulw_tensor *self = tpulw__tpu_self(b);
  if (!self) return tpu_error(TPU_E_UNSUPPORTED, "logcumsumexp: no self");
  int dt = self->view.dtype;
  if (!tpu_dtype_is_float(dt))
    return tpu_error(TPU_E_UNSUPPORTED, "\"logcumsumexp_out_cpu\" not implemented for '%s'",
                     tpulw__torch_name(dt));
  int cdt = tpulw__opmath(dt);
  tpuir_val x = tpulw__convert(b, tpulw__tensor(b, self), cdt);
  tpulw__shape s = tpulw__info(b, x);
  int dim;
  int rc = tpulw__wrap_dim(tpulw__int(b, "dim", 0), s.ndim, &dim);
  if (rc < 0) return rc;
  if (s.ndim > 0) {
    tpuir_val ninf = tpulw__const(b, cdt, -INFINITY);
    for (int64_t k = 1; k < s.sizes[dim] && x >= 0; k *= 2)
      x = log_add_exp(b, tpulw__shift_along(b, x, dim, k, ninf), x);
  }
  return tpulw__result_as(b, x, dt);
}

/* ---- cummax / cummin ---------------------------------------------------- */

/* _cummax_helper / _cummin_helper(self, values, indices, dim): results
 * written into `values` and `indices`. PyTorch CPU's rule: the running
 * best is replaced by x[i] when x[i] is NaN, or when the best is not NaN
 * and x[i] >= best (cummax; <= for cummin), so ties take the later index
 * and the last NaN wins. Pairs (value, index) are combined by log-step
 * doubling: the later segment's best wins under the same rule. */
static int cummaxmin_fn(tpulw__b *b) {
  const tpulw_tensor *self = tpulw__tpu_self(b);
  if (!self || !tpulw__tensor_arg(b, "values") || !tpulw__tensor_arg(b, "indices"))
    return tpu_error(TPU_E_UNSUPPORTED, "%s: missing operand", b->base);
  int is_max = strstr(b->base, "cummax") != NULL;
  int dt = self->view.dtype;
  tpuir_val x = tpulw__tensor(b, self);
  if (dt == TPU_BOOL) x = tpulw__convert(b, x, TPU_U8);
  int cdt = tpulw__info(b, x).dtype;
  tpulw__shape s = tpulw__info(b, x);
  int dim;
  int rc = tpulw__wrap_dim(tpulw__int(b, "dim", 0), s.ndim, &dim);
  if (rc < 0) return rc;
  tpuir_val idx;
  if (s.ndim == 0) {
    idx = tpulw__const(b, TPU_I64, 0);
  } else {
    int isf = tpu_dtype_is_float(cdt);
    int cmp = is_max ? TPUIR_GE : TPUIR_LE;
    idx = tpuir_iota(b->g, TPU_I64, s.ndim, s.sizes, dim);
    tpuir_val fill = extreme_of(b, cdt, is_max), fill_i = tpulw__const(b, TPU_I64, -1);
    for (int64_t k = 1; k < s.sizes[dim] && x >= 0 && idx >= 0; k *= 2) {
      tpuir_val pv = tpulw__shift_along(b, x, dim, k, fill), pi = tpulw__shift_along(b, idx, dim, k, fill_i);
      tpuir_val take = tpulw__bin(b, cmp, x, pv);
      if (isf)
        take = tpulw__bin(b, TPUIR_OR, tpulw__un(b, TPUIR_IS_NAN, x),
                      tpulw__bin(b, TPUIR_AND, tpulw__un(b, TPUIR_NOT, tpulw__un(b, TPUIR_IS_NAN, pv)), take));
      x = tpulw__sel(b, take, x, pv);
      idx = tpulw__sel(b, take, idx, pi);
    }
  }
  LW_TRY(x);
  LW_TRY(idx);
  if ((rc = tpulw__result_to(b, tpulw__convert(b, x, dt), "values")) < 0) return rc;
  return tpulw__result_to(b, idx, "indices");
}

/* ---- renorm ------------------------------------------------------------- */

/* renorm(self, p, dim, maxnorm) (+ out=, in-place): each slice along dim
 * whose p-norm exceeds maxnorm is scaled by maxnorm / (norm + 1e-7). */
static int renorm_fn(tpulw__b *b) {
  const tpulw_tensor *self = tpulw__tpu_self(b);
  if (!self) return tpu_error(TPU_E_UNSUPPORTED, "renorm: no self");
  int dt = self->view.dtype;
  double p = tpulw__float(b, "p", 2), maxnorm = tpulw__float(b, "maxnorm", 0);
  if (!(p > 0)) return tpu_error(TPU_E_INVALID, "renorm: non-positive-norm not supported");
  if (!(maxnorm >= 0))
    return tpu_error(TPU_E_INVALID, "renorm: expected maxnorm to be >= 0 but got %g", maxnorm);
  int nd = self->view.ndim;
  if (nd <= 1)
    return tpu_error(TPU_E_INVALID, "renorm: input needs at least 2 dimensions, got %d dimensions",
                     nd);
  if (!tpu_dtype_is_float(dt))
    return tpu_error(TPU_E_UNSUPPORTED, "\"renorm_out\" not implemented for '%s'",
                     tpulw__torch_name(dt));
  int dim;
  int rc = tpulw__wrap_dim(tpulw__int(b, "dim", 0), nd, &dim);
  if (rc < 0) return rc;
  int cdt = tpulw__opmath(dt);
  tpuir_val x = tpulw__tensor(b, self);
  tpuir_val xc = tpulw__convert(b, x, cdt);
  uint32_t mask = ((1u << nd) - 1) & ~(1u << dim);
  tpuir_val ax = tpulw__un(b, TPUIR_ABS, xc), norm;
  if (isinf(p)) {
    norm = tpulw__reduce_dims(b, TPUIR_RED_MAX, ax, mask, 1);
  } else if (p == 1) {
    norm = tpulw__reduce_dims(b, TPUIR_RED_SUM, ax, mask, 1);
  } else if (p == 2) {
    norm = tpulw__un(b, TPUIR_SQRT, tpulw__reduce_dims(b, TPUIR_RED_SUM, tpulw__bin(b, TPUIR_MUL, xc, xc), mask, 1));
  } else {
    norm = tpulw__bin_c(b, TPUIR_POW, tpulw__reduce_dims(b, TPUIR_RED_SUM, tpulw__bin_c(b, TPUIR_POW, ax, p),
                                                 mask, 1), 1.0 / p);
  }
  tpuir_val factor = tpulw__sel(b, tpulw__bin_c(b, TPUIR_GT, norm, maxnorm),
                            tpulw__bin(b, TPUIR_DIV, tpulw__const(b, cdt, maxnorm),
                                   tpulw__bin_c(b, TPUIR_ADD, norm, 1e-7)),
                            tpulw__const(b, cdt, 1));
  factor = tpulw__convert(b, tpulw__convert(b, factor, dt), cdt);
  return tpulw__result_as(b, tpulw__bin(b, TPUIR_MUL, xc, factor), dt);
}

/* ---- segment_reduce -------------------------------------------------------- */

#define SEG_PAIRS_MAX ((int64_t)1 << 26)

/* segment_reduce(data, reduce, lengths | offsets, axis, unsafe, initial):
 * segment s of each row covers [start_s, end_s) along axis (lengths:
 * running sums; offsets: consecutive entries). `initial` joins every
 * segment (an empty one gives initial; without it max/min give -inf/+inf,
 * sum 0, prod 1, mean NaN). Element-segment membership is a mask over
 * (segment, position); the data-dependent checks of the lengths (negative
 * entries, total != size) are not made (unsafe semantics). */
static int segment_reduce_fn(tpulw__b *b) {
  const tpulw_tensor *data = tpulw__tensor_arg(b, "data");
  const tpulw_tensor *len = tpulw__tensor_arg(b, "lengths"), *off = tpulw__tensor_arg(b, "offsets");
  if (!data || data->device < 0 || (!len && !off) || !tpulw__none(b, "indices"))
    return tpu_error(TPU_E_UNSUPPORTED, "segment_reduce: unsupported arguments");
  const tpulw_tensor *lt = len ? len : off;
  if (lt->device < 0) return tpu_error(TPU_E_UNSUPPORTED, "segment_reduce: CPU lengths");
  const char *red = tpulw__str(b, "reduce");
  static const char *names[] = {"max", "mean", "min", "sum", "prod"};
  int kind = -1;
  for (int k = 0; red && k < 5; k++)
    if (strcmp(red, names[k]) == 0) kind = k;
  if (kind < 0)
    return tpu_error(TPU_E_INVALID, "reduce argument must be either sum, prod, mean, amax or "
                     "amin, got %s", red ? red : "None");
  int dt = data->view.dtype;
  if (!tpu_dtype_is_float(dt))
    return tpu_error(TPU_E_UNSUPPORTED, "\"_segment_reduce_cpu\" not implemented for '%s'",
                     tpulw__torch_name(dt));
  int nd = data->view.ndim, axis;
  int rc = tpulw__wrap_dim(tpulw__int(b, "axis", 0), nd, &axis);
  if (rc < 0) return rc;
  if (nd == 0) return tpu_error(TPU_E_UNSUPPORTED, "segment_reduce: 0-dim data");
  const tpu_view *lv = &lt->view;
  if (lv->dtype != TPU_I64 && lv->dtype != TPU_I32)
    return tpu_error(TPU_E_UNSUPPORTED, "segment_reduce: lengths dtype");
  if (lv->ndim != axis + 1)
    return tpu_error(TPU_E_INVALID, "segment_reduce(): Expected lengths to have %d dimensions",
                     axis + 1);
  for (int d = 0; d < axis; d++)
    if (lv->sizes[d] != data->view.sizes[d])
      return tpu_error(TPU_E_INVALID, "segment_reduce(): Expected lengths and data to have the "
                       "same leading dimensions");
  int64_t S = lv->sizes[axis] - (off ? 1 : 0);
  if (S < 0) return tpu_error(TPU_E_INVALID, "segment_reduce(): offsets must not be empty");
  int64_t N = data->view.sizes[axis], P = 1, I = 1;
  for (int d = 0; d < axis; d++) P *= data->view.sizes[d];
  for (int d = axis + 1; d < nd; d++) I *= data->view.sizes[d];
  if (P * S * N * I > SEG_PAIRS_MAX)
    return tpu_error(TPU_E_UNSUPPORTED, "segment_reduce: too large");
  int cdt = tpulw__opmath(dt);
  /* starts/ends [P, S] */
  int64_t ls[2] = {P, lv->sizes[axis]};
  tpuir_val l = tpulw__reshape(b, tpulw__convert(b, tpulw__tensor(b, lt), TPU_I64), 2, ls);
  tpuir_val st, en;
  int64_t z2[2] = {0, 0}, one2[2] = {1, 1};
  if (len) {
    en = tpulw__scan_op(b, l, 1, TPUIR_ADD, 0);
    st = tpulw__bin(b, TPUIR_SUB, en, l);
  } else {
    int64_t a0[2] = {0, 0}, a1[2] = {P, S}, b0[2] = {0, 1}, b1[2] = {P, S + 1};
    st = tpuir_slice(b->g, l, a0, a1, one2);
    en = tpuir_slice(b->g, l, b0, b1, one2);
  }
  (void)z2;
  /* mask [P, S, N] */
  int64_t m3[3] = {P, S, N}, d01[2] = {0, 1};
  tpuir_val j = tpuir_iota(b->g, TPU_I64, 3, m3, 2);
  tpuir_val mask = tpulw__bin(b, TPUIR_AND,
                          tpulw__bin(b, TPUIR_LE, tpuir_broadcast_in_dim(b->g, st, 3, m3, d01), j),
                          tpulw__bin(b, TPUIR_LT, j, tpuir_broadcast_in_dim(b->g, en, 3, m3, d01)));
  int64_t e4[4] = {P, S, N, I}, d3[3] = {0, 2, 3}, dm[3] = {0, 1, 2}, x3[3] = {P, N, I};
  tpuir_val x = tpulw__reshape(b, tpulw__convert(b, tpulw__tensor(b, data), cdt), 3, x3);
  tpuir_val xe = tpuir_broadcast_in_dim(b->g, x, 4, e4, d3);
  tpuir_val me = tpuir_broadcast_in_dim(b->g, mask, 4, e4, dm);
  static const int rk[] = {TPUIR_RED_MAX, TPUIR_RED_SUM, TPUIR_RED_MIN, TPUIR_RED_SUM,
                           TPUIR_RED_PROD};
  double ident = kind == 0 ? -INFINITY : kind == 2 ? INFINITY : kind == 4 ? 1 : 0;
  int64_t rd = 2;
  tpuir_val r = tpuir_reduce(b->g, rk[kind], tpulw__sel(b, me, xe, tpulw__const(b, cdt, ident)), 1, &rd);
  tpulw__scalar init;
  int has_init = tpulw__scalar_arg(b, "initial", &init);
  tpuir_val iv = has_init ? tpulw__const(b, cdt, init.f) : -1;
  if (has_init) {
    static const int ops[] = {TPUIR_MAX, TPUIR_ADD, TPUIR_MIN, TPUIR_ADD, TPUIR_MUL};
    r = tpulw__bin(b, ops[kind], r, iv);
  }
  if (kind == 1) { /* mean */
    int64_t c3[3] = {P, S, I}, d2[2] = {0, 1};
    tpuir_val cnt = tpulw__convert(b, tpulw__bin(b, TPUIR_SUB, en, st), cdt);
    cnt = tpuir_broadcast_in_dim(b->g, cnt, 3, c3, d2);
    tpuir_val q = tpulw__bin(b, TPUIR_DIV, r, cnt);
    if (has_init) q = tpulw__sel(b, tpulw__bin_c(b, TPUIR_EQ, cnt, 0), tpulw__bcast(b, iv, 3, c3), q);
    r = q;
  }
  int64_t os[TPU_MAX_DIMS];
  for (int d = 0; d < nd; d++) os[d] = d == axis ? S : data->view.sizes[d];
  return tpulw__result_as(b, tpulw__reshape(b, r, nd, os), dt);
}

#define RED3(n, fn, code) {n, fn, code}, {n ".out", fn, code}

const tpulw__row tpulw__rows_reduce[] = {
    {"sum", sum_fn, R_SUM}, {"sum.out", sum_fn, R_SUM},
    {"sum.dim_IntList", sum_fn, R_SUM}, {"sum.IntList_out", sum_fn, R_SUM},
    {"nansum", sum_fn, R_NANSUM}, {"nansum.out", sum_fn, R_NANSUM},
    {"mean", sum_fn, R_MEAN}, {"mean.dtype_out", sum_fn, R_MEAN},
    {"mean.dim", sum_fn, R_MEAN}, {"mean.out", sum_fn, R_MEAN},
    {"prod", sum_fn, R_PROD}, {"prod.out", sum_fn, R_PROD},
    {"prod.dim_int", sum_fn, R_PROD}, {"prod.int_out", sum_fn, R_PROD},
    {"count_nonzero.dim_IntList", sum_fn, R_COUNT_NZ},
    {"count_nonzero.dim_IntList_out", sum_fn, R_COUNT_NZ},
    {"max", extreme_all_fn, R_MAX_ALL}, {"max.unary_out", extreme_all_fn, R_MAX_ALL},
    {"min", extreme_all_fn, R_MIN_ALL}, {"min.unary_out", extreme_all_fn, R_MIN_ALL},
    {"max.dim", extreme_dim_fn, R_MAX_DIM}, {"max.dim_max", extreme_dim_fn, R_MAX_DIM},
    {"min.dim", extreme_dim_fn, R_MIN_DIM}, {"min.dim_min", extreme_dim_fn, R_MIN_DIM},
    RED3("amax", amax_fn, R_AMAX), RED3("amin", amax_fn, R_AMIN),
    RED3("aminmax", amax_fn, R_AMINMAX),
    RED3("argmax", argmax_fn, R_ARGMAX), RED3("argmin", argmax_fn, R_ARGMIN),
    {"var.correction", var_fn, R_VAR}, {"var.correction_out", var_fn, R_VAR},
    {"std.correction", var_fn, R_STD}, {"std.correction_out", var_fn, R_STD},
    {"var_mean.correction", var_fn, R_VAR_MEAN},
    {"var_mean.correction_out", var_fn, R_VAR_MEAN},
    {"std_mean.correction", var_fn, R_STD_MEAN},
    {"std_mean.correction_out", var_fn, R_STD_MEAN},
    {"all", all_any_fn, R_ALL}, {"all.all_out", all_any_fn, R_ALL},
    {"all.dim", all_any_fn, R_ALL}, {"all.out", all_any_fn, R_ALL},
    {"all.dims", all_any_fn, R_ALL}, {"all.dims_out", all_any_fn, R_ALL},
    {"any", all_any_fn, R_ANY}, {"any.all_out", all_any_fn, R_ANY},
    {"any.dim", all_any_fn, R_ANY}, {"any.out", all_any_fn, R_ANY},
    {"any.dims", all_any_fn, R_ANY}, {"any.dims_out", all_any_fn, R_ANY},
    RED3("logsumexp", logsumexp_fn, R_LOGSUMEXP),
    RED3("trace", trace_fn, 0),
    RED3("linalg_vector_norm", norm_fn, R_VNORM),
    {"norm.ScalarOpt_dim", norm_fn, R_NORM}, {"norm.out", norm_fn, R_NORM},
    {"norm.ScalarOpt_dim_dtype", norm_fn, R_NORM}, {"norm.dtype_out", norm_fn, R_NORM},
    RED3("cumsum", cumsum_fn, R_CUMSUM), {"cumsum_", cumsum_fn, R_CUMSUM},
    RED3("cumprod", cumsum_fn, R_CUMPROD), {"cumprod_", cumsum_fn, R_CUMPROD},
    {"_logcumsumexp", logcumsumexp_fn, 0},
    {"_logcumsumexp.out", logcumsumexp_fn, 0},
    {"_cummax_helper", cummaxmin_fn, 0},
    {"_cummin_helper", cummaxmin_fn, 0},
    {"renorm", renorm_fn, 0},
    {"renorm_", renorm_fn, 0},
    {"renorm.out", renorm_fn, 0},
    {"segment_reduce", segment_reduce_fn, 0},
};
const int tpulw__nrows_reduce = sizeof tpulw__rows_reduce / sizeof tpulw__rows_reduce[0];

/* lower/complex.c - lowerings for complex tensors: complex, polar, angle,
 * abs/sgn of complex values, conj_physical, sum/mean/prod/vdot of complex
 * values, pow, normal_ and linalg_vector_norm on complex tensors.
 *
 * A call with a complex tensor, dtype or Scalar argument runs natively only
 * through (1) a row of this family or of lower/fft.c, (2) a LW_COMPLEX_ONLY
 * row below written for complex operands (same ATen name as a real-only row
 * of another family), or (3) a row of another family flagged LW_COMPLEX_OK,
 * whose lowering is known to be correct for complex values (data movement,
 * or arithmetic whose IR ops accept complex operands). Anything else is
 * TPU_E_UNSUPPORTED, so real-only lowerings never see complex inputs.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lower/internal.h"

enum { C_COMPLEX = 1, C_POLAR, C_ANGLE, C_ABS, C_SGN, C_CONJ, C_SUM, C_MEAN,
       C_VDOT, C_ISNAN, C_ISINF, C_PROD };

/* complex(real, imag) / polar(abs, angle) */
static int complex_fn(tpulw__b *b) {
  int polar = b->op == C_POLAR;
  const char *n1 = polar ? "abs" : "real", *n2 = polar ? "angle" : "imag";
  const tpulw_tensor *a = tpulw__tensor_arg(b, n1), *c = tpulw__tensor_arg(b, n2);
  if (!a || !c) return tpu_error(TPU_E_UNSUPPORTED, "%s: missing operand", b->base);
  int da = a->view.dtype, dc = c->view.dtype;
  int okf = (da == TPU_F16 || da == TPU_F32 || da == TPU_F64) &&
            (dc == TPU_F16 || dc == TPU_F32 || dc == TPU_F64);
  if (!okf)
    return tpu_error(TPU_E_INVALID,
                     "Expected both inputs to be Half, Float or Double tensors but "
                     "got %s and %s", tpulw__torch_name(da), tpulw__torch_name(dc));
  if (da != dc)
    return tpu_error(TPU_E_INVALID,
                     "Expected object of scalar type %s but got scalar type %s for "
                     "second argument", tpulw__torch_name(da), tpulw__torch_name(dc));
  if (da == TPU_F16) return tpu_error(TPU_E_UNSUPPORTED, "complex32 (chalf) is not supported");
  b->out_rule = LW_OUT_SAME;
  tpuir_val v[2] = {tpulw__tensor(b, a), tpulw__tensor(b, c)};
  int rc = tpulw__bcast_all(b, 2, v);
  if (rc < 0) return rc;
  tpuir_val re = v[0], im = v[1];
  if (polar) {
    re = tpulw__bin(b, TPUIR_MUL, v[0], tpulw__un(b, TPUIR_COS, v[1]));
    im = tpulw__bin(b, TPUIR_MUL, v[0], tpulw__un(b, TPUIR_SIN, v[1]));
  }
  return tpulw__result(b, tpuir_complex(b->g, re, im));
}

/* angle: complex -> atan2(imag, real); real -> pi for x < 0, else 0 (NaN
 * kept); ints/bool -> the default float dtype */
static int angle_fn(tpulw__b *b) {
  const tpulw_tensor *s = tpulw__tensor_arg(b, "self");
  if (!s) return tpu_error(TPU_E_UNSUPPORTED, "angle: no self");
  int dt = s->view.dtype;
  tpuir_val x = tpulw__tensor(b, s);
  if (tpu_dtype_is_complex(dt)) {
    tpuir_val r = tpulw__bin(b, TPUIR_ATAN2, tpuir_imag(b->g, x), tpuir_real(b->g, x));
    return tpulw__result(b, r);
  }
  int rdt = tpulw__float_or_default(dt);
  int cdt = tpulw__opmath(rdt);
  x = tpulw__convert(b, x, cdt);
  tpuir_val neg = tpulw__bin(b, TPUIR_LT, x, tpulw__const(b, cdt, 0));
  tpuir_val r = tpulw__sel(b, neg, tpulw__const(b, cdt, M_PI), tpulw__const(b, cdt, 0));
  r = tpulw__sel(b, tpulw__un(b, TPUIR_IS_NAN, x), x, r);
  return tpulw__result_as(b, r, rdt);
}

/* abs / sgn / conj_physical / isnan / isinf of a complex (or real) self */
static int cunary_fn(tpulw__b *b) {
  const tpulw_tensor *s = tpulw__tensor_arg(b, "self");
  if (!s) return tpu_error(TPU_E_UNSUPPORTED, "%s: no self", b->base);
  int dt = s->view.dtype;
  if (!tpu_dtype_is_complex(dt) && b->op != C_CONJ)
    return tpu_error(TPU_E_UNSUPPORTED, "%s: real input", b->base);
  tpuir_val x = tpulw__tensor(b, s);
  switch (b->op) {
  case C_ABS:
    b->out_rule = LW_OUT_CAST;
    return tpulw__result(b, tpulw__un(b, TPUIR_ABS, x));
  case C_SGN: {
    tpuir_val a = tpulw__un(b, TPUIR_ABS, x);
    int pd = tpu_dtype_complex_part(dt);
    tpuir_val zero = tpulw__bin(b, TPUIR_EQ, a, tpulw__const(b, pd, 0));
    tpuir_val q = tpulw__bin(b, TPUIR_DIV, x, tpuir_complex(b->g, a, tpulw__full(b, pd, s->view.ndim, s->view.sizes, 0)));
    return tpulw__result(b, tpulw__sel(b, zero, tpulw__const(b, dt, 0), q));
  }
  case C_CONJ:
    b->out_rule = LW_OUT_ANY;
    return tpulw__result(b, tpu_dtype_is_complex(dt) ? tpuir_conj(b->g, x) : x);
  case C_ISNAN:
    return tpulw__result(b, tpulw__un(b, TPUIR_IS_NAN, x));
  case C_ISINF:
    return tpulw__result(b, tpulw__un(b, TPUIR_IS_INF, x));
  default:
    return tpu_error(TPU_E_INTERNAL, "cunary_fn: bad op");
  }
}

/* sum / mean of complex values */
static int csum_fn(tpulw__b *b) {
  const tpulw_tensor *s = tpulw__tensor_arg(b, "self");
  if (!s || s->device < 0) return tpu_error(TPU_E_UNSUPPORTED, "%s: no self", b->base);
  int dt = tpulw__dtype_arg(b, "dtype", -1);
  if (dt < 0) dt = tpulw__out_dtype(b);
  if (dt < 0) dt = s->view.dtype;
  if (!tpu_dtype_is_complex(dt))
    return tpu_error(TPU_E_UNSUPPORTED, "%s: complex input with a real result dtype", b->base);
  tpuir_val x = tpulw__convert(b, tpulw__tensor(b, s), dt);
  tpulw__shape sh = tpulw__info(b, x);
  uint32_t mask;
  int rc = tpulw__dim_mask(b, "dim", sh.ndim, &mask);
  if (rc < 0) return rc;
  int keepdim = (int)tpulw__int(b, "keepdim", 0);
  if (b->op == C_PROD && tpulw__arg(b, "dim") && tpulw__arg(b, "dim")->kind == TPULW_INT) {
    int d; /* prod.dim_int: one dim */
    rc = tpulw__wrap_dim(tpulw__arg(b, "dim")->i, sh.ndim, &d);
    if (rc < 0) return rc;
    mask = sh.ndim ? 1u << d : 0;
  }
  tpuir_val r = tpulw__reduce_dims(b, b->op == C_PROD ? TPUIR_RED_PROD : TPUIR_RED_SUM, x,
                               mask, keepdim);
  if (b->op == C_MEAN) {
    int64_t cnt = 1;
    for (int d = 0; d < sh.ndim; d++)
      if (mask & (1u << d)) cnt *= sh.sizes[d];
    r = tpulw__bin_c(b, TPUIR_DIV, r, (double)cnt);
  }
  return tpulw__result(b, r);
}

/* pow(self, exponent) with a complex operand (Tensor or Scalar on
 * either side) */
static int cpow_fn(tpulw__b *b) {
  tpulw__opnd ops[2] = {tpulw__opnd_arg(b, "self"), tpulw__opnd_arg(b, "exponent")};
  if (ops[0].kind == LW_OPND_NONE || ops[1].kind == LW_OPND_NONE)
    return tpu_error(TPU_E_UNSUPPORTED, "pow: missing operand");
  int dt = tpulw__result_type(2, ops);
  if (!tpu_dtype_is_complex(dt)) return tpu_error(TPU_E_UNSUPPORTED, "pow: real result");
  tpuir_val x = tpulw__opnd_val(b, &ops[0], dt), y = tpulw__opnd_val(b, &ops[1], dt);
  return tpulw__result(b, tpulw__bin(b, TPUIR_POW, x, y));
}

/* normal_ on a complex tensor: real and imaginary parts are independent
 * N(mean, std^2 / 2) draws (torch: normal_ on view_as_real(self) with
 * std / sqrt(2)) */
static int cnormal_fn(tpulw__b *b) {
  const tpulw_tensor *s = tpulw__tensor_arg(b, "self");
  if (!s || !tpu_dtype_is_complex(s->view.dtype))
    return tpu_error(TPU_E_UNSUPPORTED, "normal_: not a complex self");
  double mean = tpulw__float(b, "mean", 0), std = tpulw__float(b, "std", 1);
  if (!(std >= 0))
    return tpu_error(TPU_E_INVALID, "normal expects std >= 0.0, but found std %g", std);
  const tpu_view *v = &s->view;
  int pd = tpu_dtype_complex_part(v->dtype), nd = v->ndim;
  int64_t sz[TPU_MAX_DIMS], st[TPU_MAX_DIMS], li[TPU_MAX_DIMS], sd[TPU_MAX_DIMS];
  if (nd + 1 > TPU_MAX_DIMS) return tpu_error(TPU_E_UNSUPPORTED, "normal_: rank too large");
  for (int d = 0; d < nd; d++) {
    sz[d] = v->sizes[d];
    st[d] = 0;
    li[d] = v->sizes[d];
    sd[d] = 1;
  }
  sz[nd] = 2;
  sd[nd] = 1;
  tpuir_val z = tpulw__rng(b, TPUIR_RNG_NORMAL, pd, nd + 1, sz);
  z = tpulw__bin_c(b, TPUIR_ADD, tpulw__bin_c(b, TPUIR_MUL, z, std / sqrt(2.0)), mean);
  tpuir_val part[2];
  for (int k = 0; k < 2; k++) {
    st[nd] = k;
    li[nd] = k + 1;
    part[k] = tpulw__reshape(b, tpuir_slice(b->g, z, st, li, sd), nd, v->sizes);
  }
  return tpulw__result(b, tpuir_complex(b->g, part[0], part[1]));
}

/* linalg_vector_norm of a complex tensor: the norm of |z| (real result
 * of the part dtype; a complex `dtype` argument picks the computation
 * precision like torch) */
static int cnorm_fn(tpulw__b *b) {
  const tpulw_tensor *s = tpulw__tensor_arg(b, "self");
  if (!s || s->device < 0 || !tpu_dtype_is_complex(s->view.dtype))
    return tpu_error(TPU_E_UNSUPPORTED, "%s: not a complex self", b->base);
  int dt = tpulw__dtype_arg(b, "dtype", s->view.dtype);
  if (!tpu_dtype_is_complex(dt)) return tpu_error(TPU_E_UNSUPPORTED, "norm: real dtype");
  double ord = tpulw__float(b, "ord", 2);
  tpuir_val a = tpulw__un(b, TPUIR_ABS, tpulw__convert(b, tpulw__tensor(b, s), dt));
  tpulw__shape sh = tpulw__info(b, a);
  uint32_t mask;
  int rc = tpulw__dim_mask(b, "dim", sh.ndim, &mask);
  if (rc < 0) return rc;
  int keep = (int)tpulw__int(b, "keepdim", 0);
  if (isinf(ord))
    for (int d = 0; d < sh.ndim; d++)
      if ((mask >> d & 1u) && sh.sizes[d] == 0)
        return tpu_error(TPU_E_INVALID, "linalg.vector_norm cannot compute the %s norm on "
                         "an empty tensor because the operation does not have an identity",
                         ord > 0 ? "inf" : "-inf");
  tpuir_val r = tpulw__pnorm_dims(b, a, ord, mask, keep);
  b->out_rule = LW_OUT_SAME;
  return tpulw__result(b, r);
}

/* vdot(self, other) = sum(conj(self) * other) */
static int vdot_fn(tpulw__b *b) {
  const tpulw_tensor *a = tpulw__tensor_arg(b, "self"), *c = tpulw__tensor_arg(b, "other");
  if (!a || !c || a->device < 0 || c->device < 0)
    return tpu_error(TPU_E_UNSUPPORTED, "vdot: missing operand");
  if (a->view.ndim != 1 || c->view.ndim != 1)
    return tpu_error(TPU_E_INVALID, "1D tensors expected, but got %dD and %dD tensors",
                     a->view.ndim, c->view.ndim);
  if (a->view.dtype != c->view.dtype)
    return tpu_error(TPU_E_INVALID,
                     "vdot : expected both vectors to have same dtype, but found %s and %s",
                     tpulw__torch_name(a->view.dtype), tpulw__torch_name(c->view.dtype));
  if (a->view.sizes[0] != c->view.sizes[0])
    return tpu_error(TPU_E_INVALID,
                     "inconsistent tensor size, expected tensor [%lld] and src [%lld] to "
                     "have the same number of elements, but got %lld and %lld elements "
                     "respectively",
                     (long long)a->view.sizes[0], (long long)c->view.sizes[0],
                     (long long)a->view.sizes[0], (long long)c->view.sizes[0]);
  b->out_rule = LW_OUT_SAME;
  int dt = a->view.dtype;
  tpuir_val x = tpuir_conj(b->g, tpulw__tensor(b, a)), y = tpulw__tensor(b, c);
  int64_t z = 0;
  return tpulw__result(b, tpuir_dot_general(b->g, x, y, 0, NULL, NULL, 1, &z, &z,
                                        b->ctx->precision, dt));
}

/* ---- rows --------------------------------------------------------------- */

const tpulw__row tpulw__rows_complex[] = {
    {"complex", complex_fn, C_COMPLEX}, {"complex.out", complex_fn, C_COMPLEX},
    {"polar", complex_fn, C_POLAR}, {"polar.out", complex_fn, C_POLAR},
    {"angle", angle_fn, C_ANGLE}, {"angle.out", angle_fn, C_ANGLE},
    {"_conj_physical", cunary_fn, C_CONJ}, {"conj_physical.out", cunary_fn, C_CONJ},
    {"conj_physical_", cunary_fn, C_CONJ},
    /* complex calls of ops that other families lower for real dtypes */
    {"abs", cunary_fn, C_ABS, LW_COMPLEX_ONLY}, {"abs.out", cunary_fn, C_ABS, LW_COMPLEX_ONLY},
    {"sgn", cunary_fn, C_SGN, LW_COMPLEX_ONLY}, {"sgn.out", cunary_fn, C_SGN, LW_COMPLEX_ONLY}, {"sgn_", cunary_fn, C_SGN, LW_COMPLEX_ONLY},
    {"isnan", cunary_fn, C_ISNAN, LW_COMPLEX_ONLY}, {"isnan.out", cunary_fn, C_ISNAN, LW_COMPLEX_ONLY},
    {"isinf", cunary_fn, C_ISINF, LW_COMPLEX_ONLY}, {"isinf.out", cunary_fn, C_ISINF, LW_COMPLEX_ONLY},
    {"sum", csum_fn, C_SUM, LW_COMPLEX_ONLY}, {"sum.dim_IntList", csum_fn, C_SUM, LW_COMPLEX_ONLY},
    {"sum.IntList_out", csum_fn, C_SUM, LW_COMPLEX_ONLY}, {"sum.out", csum_fn, C_SUM, LW_COMPLEX_ONLY},
    {"mean", csum_fn, C_MEAN, LW_COMPLEX_ONLY}, {"mean.dim", csum_fn, C_MEAN, LW_COMPLEX_ONLY},
    {"mean.out", csum_fn, C_MEAN, LW_COMPLEX_ONLY}, {"mean.dtype_out", csum_fn, C_MEAN, LW_COMPLEX_ONLY},
    {"vdot", vdot_fn, C_VDOT, LW_COMPLEX_ONLY}, {"vdot.out", vdot_fn, C_VDOT, LW_COMPLEX_ONLY},
    {"prod", csum_fn, C_PROD, LW_COMPLEX_ONLY}, {"prod.dim_int", csum_fn, C_PROD, LW_COMPLEX_ONLY},
    {"prod.int_out", csum_fn, C_PROD, LW_COMPLEX_ONLY}, {"prod.out", csum_fn, C_PROD, LW_COMPLEX_ONLY},
    {"pow.Tensor_Tensor", cpow_fn, 0, LW_COMPLEX_ONLY}, {"pow.Tensor_Tensor_out", cpow_fn, 0, LW_COMPLEX_ONLY},
    {"pow.Tensor_Scalar", cpow_fn, 0, LW_COMPLEX_ONLY}, {"pow.Tensor_Scalar_out", cpow_fn, 0, LW_COMPLEX_ONLY},
    {"pow.Scalar", cpow_fn, 0, LW_COMPLEX_ONLY}, {"pow.Scalar_out", cpow_fn, 0, LW_COMPLEX_ONLY},
    {"pow_.Tensor", cpow_fn, 0, LW_COMPLEX_ONLY}, {"pow_.Scalar", cpow_fn, 0, LW_COMPLEX_ONLY},
    {"normal_", cnormal_fn, 0, LW_COMPLEX_ONLY},
    {"linalg_vector_norm", cnorm_fn, 0, LW_COMPLEX_ONLY}, {"linalg_vector_norm.out", cnorm_fn, 0, LW_COMPLEX_ONLY},
};
const int tpulw__nrows_complex = (int)(sizeof tpulw__rows_complex / sizeof tpulw__rows_complex[0]);

/* 1 if any argument of the call is complex (tensor, dtype or Scalar). */
int tpulw__call_is_complex(const tpulw_arg *args, int nargs) {
  for (int i = 0; i < nargs; i++) {
    const tpulw_arg *a = &args[i];
    if (a->kind == TPULW_COMPLEX) return 1;
    if (a->kind == TPULW_DTYPE && tpu_dtype_is_complex((int)a->i)) return 1;
    if (a->kind == TPULW_TENSOR && a->t.defined && tpu_dtype_is_complex(a->t.view.dtype))
      return 1;
    if (a->kind == TPULW_TENSORS)
      for (int j = 0; j < a->n; j++)
        if (a->tensors[j].defined && tpu_dtype_is_complex(a->tensors[j].view.dtype))
          return 1;
  }
  return 0;
}

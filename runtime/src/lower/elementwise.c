/* lower/elementwise.c - elementwise ATen ops: arithmetic, comparisons,
 * logical/bitwise ops, unary math, clamp/where/lerp/addc*, fills,
 * activations and their backward ops, arange/linspace.
 *
 * Every lowering computes in PyTorch's "opmath" dtype (f16/bf16 -> f32)
 * and converts back to the result dtype at the end, like the CPU kernels.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "lower/internal.h"

/* Pseudo op codes for rows that are not a single IR op. */
enum {
  P_ADD = 1000, P_SUB, P_RSUB, P_MUL, P_DIV, P_DIV_MODE, P_FLOOR_DIVIDE,
  P_REMAINDER, P_FMOD, P_POW, P_MAXIMUM, P_MINIMUM, P_ATAN2,
  P_BITAND, P_BITOR, P_BITXOR, P_LOGAND, P_LOGOR, P_LOGXOR,
  P_EQ, P_NE, P_LT, P_LE, P_GT, P_GE,
  /* unary float */
  P_EXP2, P_LOG2, P_LOG10, P_RECIP, P_ERFC, P_SIGMOID,
  /* unary same-dtype */
  P_NEG, P_ABS, P_SIGN, P_FLOOR, P_CEIL, P_ROUND, P_TRUNC, P_FRAC,
  P_BITNOT, P_LOGNOT, P_RELU,
  /* predicates */
  P_ISNAN, P_ISINF, P_ISFINITE, P_ISPOSINF, P_ISNEGINF, P_SIGNBIT,
  /* activations */
  P_GELU, P_SILU, P_MISH, P_HARDSIGMOID, P_HARDSWISH, P_LEAKY_RELU, P_ELU,
  P_SOFTPLUS,
  /* backward */
  P_THRESHOLD_BW, P_GELU_BW, P_SILU_BW, P_TANH_BW, P_SIGMOID_BW,
  P_LEAKY_RELU_BW, P_HARDTANH_BW, P_ELU_BW, P_SOFTPLUS_BW,
  P_HARDSIGMOID_BW, P_HARDSWISH_BW, P_MISH_BW,
  /* clamps */
  P_CLAMP, P_CLAMP_MIN, P_CLAMP_MAX, P_HARDTANH,
  /* more binary float ops */
  P_XLOGY, P_COPYSIGN, P_HYPOT, P_LOGADDEXP, P_LOGADDEXP2, P_HEAVISIDE,
  P_FMAX, P_FMIN,
  /* more activations */
  P_LOGSIGMOID, P_LOGSIGMOID_BW, P_HARDSHRINK, P_SOFTSHRINK, P_SHRINK_BW,
  P_LOGIT, P_LOGIT_BW, P_PRELU, P_PRELU_BW, P_GLU, P_GLU_BW,
  P_SHL, P_SHR
};

static int unsupported_dtype(const char *what, int dt) {
  return tpu_error(TPU_E_UNSUPPORTED, "\"%s\" not implemented for '%s'", what,
                   tpulw__torch_name(dt));
}

/* The tensor operand "self" as an tpulw__opnd, or an error. */
static int get_self(const tpulw__b *b, const char *name, tpulw__opnd *o) {
  *o = tpulw__opnd_arg(b, name);
  if (o->kind != LW_OPND_TENSOR)
    return tpu_error(TPU_E_UNSUPPORTED, "%s: expected a tensor '%s'", b->base,
                     name);
  return TPU_OK;
}

/* ---- value-range check of Scalars written into a tensor (fill_) -------- */

static const char *c_type_name(int dt) {
  static const char *const n[TPU_NUM_DTYPES] = {
      "bool", "uint8_t", "int8_t", "int16_t", "int", "int64_t",
      "c10::Half", "c10::BFloat16", "float", "double", "c10::complex<float>",
      "c10::complex<double>"};
  return (dt >= 0 && dt < TPU_NUM_DTYPES) ? n[dt] : "?";
}

static int check_fits(int dt, tpulw__scalar s) {
  int bad = 0;
  double lo = 0, hi = 0;
  switch (dt) {
  case TPU_U8: lo = -255; hi = 255; break; /* negatives wrap (c10) */
  case TPU_I8: lo = -128; hi = 127; break;
  case TPU_I16: lo = -32768; hi = 32767; break;
  case TPU_I32: lo = -2147483648.0; hi = 2147483647.0; break;
  case TPU_I64: lo = -9223372036854775808.0; hi = 9223372036854775807.0; break;
  case TPU_F16: lo = -65504; hi = 65504; break;
  case TPU_BF16: lo = -3.3895313892515355e38; hi = 3.3895313892515355e38; break;
  case TPU_F32: lo = -3.4028234663852886e38; hi = 3.4028234663852886e38; break;
  default: return TPU_OK;
  }
  if (tpu_dtype_is_int(dt)) {
    if (s.kind == LW_SK_FLOAT) bad = !(s.f >= lo && s.f <= hi);
    else if (dt != TPU_I64) bad = (double)s.i < lo || (double)s.i > hi;
  } else if (s.kind == LW_SK_FLOAT && isfinite(s.f)) {
    bad = s.f < lo || s.f > hi;
  }
  if (bad)
    return tpu_error(TPU_E_INVALID,
                     "value cannot be converted to type %s without overflow",
                     c_type_name(dt));
  return TPU_OK;
}

/* ---- binary ops --------------------------------------------------------- */

static int alpha_checks(const tpulw__b *b, int dt, tpulw__scalar *alpha, int *has) {
  *has = tpulw__scalar_arg(b, "alpha", alpha);
  if (!*has) return TPU_OK;
  if (!tpu_dtype_is_float(dt) && alpha->kind == LW_SK_FLOAT)
    return tpu_error(TPU_E_INVALID,
                     "For integral input tensors, argument alpha must not be "
                     "a floating point number.");
  if (dt != TPU_BOOL && alpha->kind == LW_SK_BOOL)
    return tpu_error(TPU_E_INVALID,
                     "Boolean alpha only supported for Boolean results.");
  if (alpha->f == 1.0) *has = 0;
  return TPU_OK;
}

static int is_bool_opnd(const tpulw__opnd *o) {
  if (o->kind == LW_OPND_TENSOR) return o->t->view.dtype == TPU_BOOL;
  return o->kind == LW_OPND_SCALAR && o->s.kind == LW_SK_BOOL;
}

/* integer floor division / Python remainder fix-ups */
static tpuir_val int_floor_div(tpulw__b *b, tpuir_val x, tpuir_val y) {
  tpuir_val q = tpulw__bin(b, TPUIR_DIV, x, y);
  tpuir_val r = tpulw__bin(b, TPUIR_REM, x, y);
  tpulw__shape s = tpulw__info(b, x);
  tpuir_val zero = tpulw__const(b, s.dtype, 0);
  tpuir_val rnz = tpulw__bin(b, TPUIR_NE, r, zero);
  tpuir_val sd = tpulw__bin(b, TPUIR_NE, tpulw__bin(b, TPUIR_LT, r, zero),
                        tpulw__bin(b, TPUIR_LT, y, zero));
  tpuir_val fix = tpulw__bin(b, TPUIR_AND, rnz, sd);
  return tpulw__sel(b, fix, tpulw__bin_c(b, TPUIR_SUB, q, 1), q);
}

static tpuir_val float_floor_div(tpulw__b *b, tpuir_val a, tpuir_val c) {
  /* c10 div_floor_floating */
  tpulw__shape s = tpulw__info(b, a);
  int dt = s.dtype;
  tpuir_val zero = tpulw__const(b, dt, 0);
  tpuir_val mod = tpulw__bin(b, TPUIR_REM, a, c);
  tpuir_val div = tpulw__bin(b, TPUIR_DIV, tpulw__bin(b, TPUIR_SUB, a, mod), c);
  tpuir_val fix = tpulw__bin(b, TPUIR_AND, tpulw__bin(b, TPUIR_NE, mod, zero),
                         tpulw__bin(b, TPUIR_NE, tpulw__bin(b, TPUIR_LT, c, zero),
                                tpulw__bin(b, TPUIR_LT, mod, zero)));
  div = tpulw__sel(b, fix, tpulw__bin_c(b, TPUIR_SUB, div, 1), div);
  tpuir_val fl = tpulw__un(b, TPUIR_FLOOR, div);
  tpuir_val up = tpulw__bin(b, TPUIR_GT, tpulw__bin(b, TPUIR_SUB, div, fl),
                        tpulw__const(b, dt, 0.5));
  fl = tpulw__sel(b, up, tpulw__bin_c(b, TPUIR_ADD, fl, 1), fl);
  tpuir_val q = tpulw__bin(b, TPUIR_DIV, a, c);
  tpuir_val signed_zero = tpulw__bin(b, TPUIR_MUL, q, zero);
  tpuir_val res = tpulw__sel(b, tpulw__bin(b, TPUIR_NE, div, zero), fl, signed_zero);
  return tpulw__sel(b, tpulw__bin(b, TPUIR_EQ, c, zero), q, res);
}

static tpuir_val python_rem(tpulw__b *b, tpuir_val a, tpuir_val c) {
  tpulw__shape s = tpulw__info(b, a);
  tpuir_val zero = tpulw__const(b, s.dtype, 0);
  tpuir_val mod = tpulw__bin(b, TPUIR_REM, a, c);
  tpuir_val fix = tpulw__bin(b, TPUIR_AND, tpulw__bin(b, TPUIR_NE, mod, zero),
                         tpulw__bin(b, TPUIR_NE, tpulw__bin(b, TPUIR_LT, c, zero),
                                tpulw__bin(b, TPUIR_LT, mod, zero)));
  return tpulw__sel(b, fix, tpulw__bin(b, TPUIR_ADD, mod, c), mod);
}

/* x ** e for integer dtypes with PyTorch's negative-exponent rules */
static tpuir_val int_pow(tpulw__b *b, tpuir_val x, tpuir_val e) {
  tpuir_val v[2] = {x, e};
  int rc = tpulw__bcast_all(b, 2, v);
  if (rc < 0) return rc;
  x = v[0];
  e = v[1];
  tpulw__shape s = tpulw__info(b, x);
  int dt = s.dtype;
  if (dt == TPU_U8) return tpuir_binary(b->g, TPUIR_POW, x, e);
  tpuir_val zero = tpulw__const(b, dt, 0), one = tpulw__const(b, dt, 1);
  tpuir_val neg = tpulw__bin(b, TPUIR_LT, e, zero);
  tpuir_val safe_e = tpulw__sel(b, neg, zero, e);
  tpuir_val p = tpuir_binary(b->g, TPUIR_POW, x, safe_e);
  tpuir_val odd = tpulw__bin(b, TPUIR_NE, tpulw__bin(b, TPUIR_AND, e, one), zero);
  tpuir_val mone_val = tpulw__sel(b, odd, tpulw__const(b, dt, -1), one);
  tpuir_val negval =
      tpulw__sel(b, tpulw__bin(b, TPUIR_EQ, x, one), one,
             tpulw__sel(b, tpulw__bin(b, TPUIR_EQ, x, tpulw__const(b, dt, -1)), mone_val,
                    zero));
  return tpulw__sel(b, neg, negval, p);
}

static tpuir_val float_pow_scalar(tpulw__b *b, tpuir_val x, double e) {
  tpulw__shape s = tpulw__info(b, x);
  if (e == 1.0) return x;
  if (e == 2.0) return tpulw__bin(b, TPUIR_MUL, x, x);
  if (e == 3.0) return tpulw__bin(b, TPUIR_MUL, tpulw__bin(b, TPUIR_MUL, x, x), x);
  if (e == 0.5) return tpulw__un(b, TPUIR_SQRT, x);
  if (e == -0.5) return tpulw__un(b, TPUIR_RSQRT, x);
  if (e == -1.0) return tpulw__bin(b, TPUIR_DIV, tpulw__const(b, s.dtype, 1), x);
  if (e == -2.0)
    return tpulw__bin(b, TPUIR_DIV, tpulw__const(b, s.dtype, 1),
                  tpulw__bin(b, TPUIR_MUL, x, x));
  if (e == 0.0) return tpulw__full(b, s.dtype, s.ndim, s.sizes, 1.0);
  return tpulw__bin(b, TPUIR_POW, x, tpulw__const(b, s.dtype, e));
}

static int binary_fn(tpulw__b *b) {
  tpulw__opnd ops[2];
  ops[0] = tpulw__opnd_arg(b, "self");
  ops[1] = tpulw__opnd_arg(b, "other");
  if (ops[1].kind == LW_OPND_NONE) ops[1] = tpulw__opnd_arg(b, "exponent");
  if (ops[1].kind == LW_OPND_NONE) ops[1] = tpulw__opnd_arg(b, "values");
  if (ops[0].kind == LW_OPND_NONE || ops[1].kind == LW_OPND_NONE)
    return tpu_error(TPU_E_UNSUPPORTED, "%s: missing operand", b->base);
  int op = b->op;
  int dt = tpulw__result_type(2, ops);
  if (op == P_RSUB) { /* other - alpha * self */
    tpulw__opnd t = ops[0];
    ops[0] = ops[1];
    ops[1] = t;
  }
  int cdt = tpulw__opmath(dt);
  tpuir_val x, y, r;
  switch (op) {
  case P_ADD:
  case P_SUB:
  case P_RSUB: {
    if (op != P_ADD) {
      if (is_bool_opnd(&ops[0]) && is_bool_opnd(&ops[1]))
        return tpu_error(TPU_E_INVALID,
                         "Subtraction, the `-` operator, with two bool tensors "
                         "is not supported. Use the `^` or `logical_xor()` "
                         "operator instead.");
      if (is_bool_opnd(&ops[0]) || is_bool_opnd(&ops[1]))
        return tpu_error(TPU_E_INVALID,
                         "Subtraction, the `-` operator, with a bool tensor is "
                         "not supported. If you are trying to invert a mask, "
                         "use the `~` or `logical_not()` operator instead.");
    }
    tpulw__scalar alpha;
    int has_alpha;
    int rc = alpha_checks(b, dt, &alpha, &has_alpha);
    if (rc < 0) return rc;
    x = tpulw__opnd_val(b, &ops[0], cdt);
    y = tpulw__opnd_val(b, &ops[1], cdt);
    if (dt == TPU_BOOL) {
      if (has_alpha) y = tpulw__bin(b, TPUIR_AND, y, tpulw__const_s(b, TPU_BOOL, alpha));
      return tpulw__result(b, tpulw__bin(b, TPUIR_OR, x, y));
    }
    if (has_alpha) y = tpulw__bin(b, TPUIR_MUL, y, tpulw__const_s(b, cdt, alpha));
    r = tpulw__bin(b, op == P_ADD ? TPUIR_ADD : TPUIR_SUB, x, y);
    return tpulw__result_as(b, r, dt);
  }
  case P_MUL:
    x = tpulw__opnd_val(b, &ops[0], cdt);
    y = tpulw__opnd_val(b, &ops[1], cdt);
    r = tpulw__bin(b, dt == TPU_BOOL ? TPUIR_AND : TPUIR_MUL, x, y);
    return tpulw__result_as(b, r, dt);
  case P_DIV:
  case P_DIV_MODE:
  case P_FLOOR_DIVIDE: {
    const char *mode = op == P_FLOOR_DIVIDE ? "floor"
                       : op == P_DIV_MODE   ? tpulw__str(b, "rounding_mode")
                                            : NULL;
    if (mode && strcmp(mode, "trunc") && strcmp(mode, "floor"))
      return tpu_error(TPU_E_INVALID,
                       "div expected rounding_mode to be one of None, "
                       "'trunc', or 'floor' but found '%s'", mode);
    if (!mode) {
      dt = tpulw__float_or_default(dt);
      cdt = tpulw__opmath(dt);
      x = tpulw__opnd_val(b, &ops[0], cdt);
      y = tpulw__opnd_val(b, &ops[1], cdt);
      return tpulw__result_as(b, tpulw__bin(b, TPUIR_DIV, x, y), dt);
    }
    if (dt == TPU_BOOL)
      return unsupported_dtype(mode[0] == 't' ? "div_trunc_cpu" : "div_floor_cpu", dt);
    x = tpulw__opnd_val(b, &ops[0], cdt);
    y = tpulw__opnd_val(b, &ops[1], cdt);
    if (tpu_dtype_is_int(dt)) {
      b->sync = 1; /* ZeroDivisionError is raised at the call */
      r = mode[0] == 't' ? tpulw__bin(b, TPUIR_DIV, x, y) : int_floor_div(b, x, y);
      return tpulw__result(b, r);
    }
    if (mode[0] == 't') r = tpulw__un(b, TPUIR_TRUNC, tpulw__bin(b, TPUIR_DIV, x, y));
    else {
      tpuir_val v[2] = {x, y};
      int rc = tpulw__bcast_all(b, 2, v);
      if (rc < 0) return rc;
      r = float_floor_div(b, v[0], v[1]);
    }
    return tpulw__result_as(b, r, dt);
  }
  case P_REMAINDER:
  case P_FMOD: {
    if (dt == TPU_BOOL)
      return unsupported_dtype(op == P_FMOD ? "fmod_cpu" : "remainder_cpu", dt);
    x = tpulw__opnd_val(b, &ops[0], cdt);
    y = tpulw__opnd_val(b, &ops[1], cdt);
    if (tpu_dtype_is_int(dt)) b->sync = 1;
    if (op == P_FMOD) return tpulw__result_as(b, tpulw__bin(b, TPUIR_REM, x, y), dt);
    tpuir_val v[2] = {x, y};
    int rc = tpulw__bcast_all(b, 2, v);
    if (rc < 0) return rc;
    return tpulw__result_as(b, python_rem(b, v[0], v[1]), dt);
  }
  case P_POW: {
    if (dt == TPU_BOOL && ops[0].kind == LW_OPND_TENSOR && ops[1].kind == LW_OPND_SCALAR &&
        (ops[1].s.f == 1 || ops[1].s.f == 0)) { /* CPU: x ** 1 -> x, x ** 0 -> 1 */
      x = tpulw__opnd_val(b, &ops[0], dt);
      if (ops[1].s.f == 1) return tpulw__result(b, x);
      tpulw__shape xs = tpulw__info(b, x);
      return tpulw__result(b, tpulw__full(b, dt, xs.ndim, xs.sizes, 1));
    }
    if (dt == TPU_BOOL) return unsupported_dtype("pow", dt);
    if (tpu_dtype_is_int(dt)) {
      if (ops[1].kind == LW_OPND_SCALAR && ops[1].s.kind != LW_SK_FLOAT &&
          ops[1].s.i < 0)
        return tpu_error(TPU_E_INVALID,
                         "Integers to negative integer powers are not allowed.");
      x = tpulw__opnd_val(b, &ops[0], dt);
      y = tpulw__opnd_val(b, &ops[1], dt);
      return tpulw__result(b, int_pow(b, x, y));
    }
    x = tpulw__opnd_val(b, &ops[0], cdt);
    if (ops[1].kind == LW_OPND_SCALAR && ops[0].kind == LW_OPND_TENSOR)
      return tpulw__result_as(b, float_pow_scalar(b, x, ops[1].s.f), dt);
    y = tpulw__opnd_val(b, &ops[1], cdt);
    return tpulw__result_as(b, tpulw__bin(b, TPUIR_POW, x, y), dt);
  }
  case P_MAXIMUM:
  case P_MINIMUM: {
    int iop = op == P_MAXIMUM ? TPUIR_MAX : TPUIR_MIN;
    if (dt == TPU_BOOL) iop = op == P_MAXIMUM ? TPUIR_OR : TPUIR_AND;
    x = tpulw__opnd_val(b, &ops[0], dt);
    y = tpulw__opnd_val(b, &ops[1], dt);
    return tpulw__result(b, tpulw__bin(b, iop, x, y));
  }
  case P_ATAN2:
    dt = tpulw__float_or_default(dt);
    cdt = tpulw__opmath(dt);
    x = tpulw__opnd_val(b, &ops[0], cdt);
    y = tpulw__opnd_val(b, &ops[1], cdt);
    return tpulw__result_as(b, tpulw__bin(b, TPUIR_ATAN2, x, y), dt);
  case P_BITAND:
  case P_BITOR:
  case P_BITXOR: {
    if (tpu_dtype_is_float(dt))
      return unsupported_dtype(op == P_BITAND  ? "bitwise_and_cpu"
                               : op == P_BITOR ? "bitwise_or_cpu"
                                               : "bitwise_xor_cpu",
                               dt);
    int iop = op == P_BITAND ? TPUIR_AND : op == P_BITOR ? TPUIR_OR : TPUIR_XOR;
    x = tpulw__opnd_val(b, &ops[0], dt);
    y = tpulw__opnd_val(b, &ops[1], dt);
    return tpulw__result(b, tpulw__bin(b, iop, x, y));
  }
  case P_LOGAND:
  case P_LOGOR:
  case P_LOGXOR: {
    int iop = op == P_LOGAND ? TPUIR_AND : op == P_LOGOR ? TPUIR_OR : TPUIR_XOR;
    x = tpulw__opnd_val(b, &ops[0], TPU_BOOL);
    y = tpulw__opnd_val(b, &ops[1], TPU_BOOL);
    return tpulw__result(b, tpulw__bin(b, iop, x, y));
  }
  case P_EQ: case P_NE: case P_LT: case P_LE: case P_GT: case P_GE: {
    static const int cmp[] = {TPUIR_EQ, TPUIR_NE, TPUIR_LT,
                              TPUIR_LE, TPUIR_GT, TPUIR_GE};
    x = tpulw__opnd_val(b, &ops[0], dt);
    y = tpulw__opnd_val(b, &ops[1], dt);
    return tpulw__result(b, tpulw__bin(b, cmp[op - P_EQ], x, y));
  }
  case P_SHL:
  case P_SHR: {
    if (!tpu_dtype_is_int(dt))
      return unsupported_dtype(op == P_SHL ? "lshift_cpu" : "rshift_cpu", dt);
    x = tpulw__opnd_val(b, &ops[0], dt);
    y = tpulw__opnd_val(b, &ops[1], dt);
    tpuir_val v2[2] = {x, y};
    int rc = tpulw__bcast_all(b, 2, v2);
    if (rc < 0) return rc;
    x = v2[0];
    y = v2[1];
    double bits = 8.0 * (double)tpu_dtype_size(dt);
    tpuir_val zero = tpulw__const(b, dt, 0);
    /* shifts by < 0 or >= the width give 0 (or -1 for negative >>) */
    tpuir_val bad = tpulw__bin_c(b, TPUIR_GE, y, bits);
    if (dt != TPU_U8) bad = tpulw__bin(b, TPUIR_OR, bad, tpulw__bin(b, TPUIR_LT, y, zero));
    tpuir_val sh = tpulw__bin(b, op == P_SHL ? TPUIR_SHL : TPUIR_SHR, x, tpulw__sel(b, bad, zero, y));
    tpuir_val fill = zero;
    if (op == P_SHR && dt != TPU_U8)
      fill = tpulw__sel(b, tpulw__bin(b, TPUIR_LT, x, zero), tpulw__const(b, dt, -1), zero);
    return tpulw__result(b, tpulw__sel(b, bad, fill, sh));
  }
  case P_XLOGY: case P_COPYSIGN: case P_HYPOT: case P_LOGADDEXP:
  case P_LOGADDEXP2: case P_HEAVISIDE: case P_FMAX: case P_FMIN: {
    if (op == P_HEAVISIDE) {
      if (ops[0].kind == LW_OPND_TENSOR && ops[1].kind == LW_OPND_TENSOR &&
          ops[0].t->view.dtype != ops[1].t->view.dtype)
        return tpu_error(TPU_E_INVALID,
                         "heaviside is not yet implemented for tensors with different dtypes");
      x = tpulw__opnd_val(b, &ops[0], dt);
      y = tpulw__opnd_val(b, &ops[1], dt);
      tpuir_val zero = tpulw__const(b, dt, 0);
      tpuir_val pos = tpulw__convert(b, tpulw__bin(b, TPUIR_GT, x, zero), dt);
      return tpulw__result(b, tpulw__sel(b, tpulw__bin(b, TPUIR_EQ, x, zero), y, pos));
    }
    if ((op == P_HYPOT || op == P_LOGADDEXP || op == P_LOGADDEXP2) && !tpu_dtype_is_float(dt))
      return unsupported_dtype(op == P_HYPOT ? "hypot_cpu" : op == P_LOGADDEXP ? "logaddexp_cpu"
                                                                               : "logaddexp2_cpu",
                               dt);
    if ((op == P_FMAX || op == P_FMIN) && !tpu_dtype_is_float(dt)) {
      int iop = op == P_FMAX ? (dt == TPU_BOOL ? TPUIR_OR : TPUIR_MAX)
                             : (dt == TPU_BOOL ? TPUIR_AND : TPUIR_MIN);
      return tpulw__result(b, tpulw__bin(b, iop, tpulw__opnd_val(b, &ops[0], dt), tpulw__opnd_val(b, &ops[1], dt)));
    }
    dt = tpulw__float_or_default(dt);
    cdt = tpulw__opmath(dt);
    x = tpulw__opnd_val(b, &ops[0], cdt);
    y = tpulw__opnd_val(b, &ops[1], cdt);
    tpuir_val v2[2] = {x, y};
    int rc = tpulw__bcast_all(b, 2, v2);
    if (rc < 0) return rc;
    x = v2[0];
    y = v2[1];
    tpuir_val zero = tpulw__const(b, cdt, 0);
    switch (op) {
    case P_XLOGY: /* 0 where x == 0 (unless y is NaN) */
      r = tpulw__bin(b, TPUIR_MUL, x, tpulw__un(b, TPUIR_LOG, y));
      r = tpulw__sel(b, tpulw__bin(b, TPUIR_AND, tpulw__bin(b, TPUIR_EQ, x, zero),
                           tpulw__un(b, TPUIR_NOT, tpulw__un(b, TPUIR_IS_NAN, y))), zero, r);
      break;
    case P_COPYSIGN: { /* |x| with the sign bit of y (-0.0 counts as negative) */
      tpuir_val neg = tpulw__bin(b, TPUIR_OR, tpulw__bin(b, TPUIR_LT, y, zero),
                             tpulw__bin(b, TPUIR_AND, tpulw__bin(b, TPUIR_EQ, y, zero),
                                    tpulw__bin(b, TPUIR_LT, tpulw__bin(b, TPUIR_DIV, tpulw__const(b, cdt, 1), y),
                                           zero)));
      tpuir_val ax = tpulw__un(b, TPUIR_ABS, x);
      r = tpulw__sel(b, neg, tpulw__un(b, TPUIR_NEG, ax), ax);
      break;
    }
    case P_HYPOT: {
      tpuir_val ax = tpulw__un(b, TPUIR_ABS, x), ay = tpulw__un(b, TPUIR_ABS, y);
      tpuir_val mx = tpulw__bin(b, TPUIR_MAX, ax, ay), mn = tpulw__bin(b, TPUIR_MIN, ax, ay);
      tpuir_val q = tpulw__bin(b, TPUIR_DIV, mn, mx);
      tpuir_val h = tpulw__bin(b, TPUIR_MUL, mx, tpulw__un(b, TPUIR_SQRT, tpulw__bin_c(b, TPUIR_ADD,
                                                                        tpulw__bin(b, TPUIR_MUL, q, q), 1)));
      h = tpulw__sel(b, tpulw__bin(b, TPUIR_EQ, mx, zero), zero, h);
      r = tpulw__sel(b, tpulw__bin(b, TPUIR_OR, tpulw__un(b, TPUIR_IS_INF, x), tpulw__un(b, TPUIR_IS_INF, y)),
                 tpulw__const(b, cdt, INFINITY), h);
      break;
    }
    case P_LOGADDEXP:
    case P_LOGADDEXP2: {
      double k = op == P_LOGADDEXP ? 1.0 : M_LN2;
      tpuir_val mx = tpulw__bin(b, TPUIR_MAX, x, y);
      tpuir_val d = tpulw__un(b, TPUIR_NEG, tpulw__un(b, TPUIR_ABS, tpulw__bin(b, TPUIR_SUB, x, y)));
      tpuir_val t = tpulw__un(b, TPUIR_LOG1P, tpulw__un(b, TPUIR_EXP, tpulw__bin_c(b, TPUIR_MUL, d, k)));
      r = tpulw__bin(b, TPUIR_ADD, mx, tpulw__bin_c(b, TPUIR_DIV, t, k));
      /* equal infinities: the result is that infinity */
      r = tpulw__sel(b, tpulw__bin(b, TPUIR_AND, tpulw__un(b, TPUIR_IS_INF, x), tpulw__bin(b, TPUIR_EQ, x, y)), x, r);
      break;
    }
    default: { /* fmax / fmin: NaN loses */
      int iop = op == P_FMAX ? TPUIR_MAX : TPUIR_MIN;
      r = tpulw__bin(b, iop, x, y);
      r = tpulw__sel(b, tpulw__un(b, TPUIR_IS_NAN, x), y, r);
      r = tpulw__sel(b, tpulw__un(b, TPUIR_IS_NAN, y), x, r);
      break;
    }
    }
    return tpulw__result_as(b, r, dt);
  }
  default:
    return tpu_error(TPU_E_INTERNAL, "binary_fn: bad op %d", op);
  }
}

/* ---- unary ops ---------------------------------------------------------- */

/* Unary math with a float result (int/bool inputs -> default float). */
static int unary_float_fn(tpulw__b *b) {
  tpulw__opnd s;
  int rc = get_self(b, "self", &s);
  if (rc < 0) return rc;
  int dt = tpulw__float_or_default(s.t->view.dtype);
  int cdt = tpulw__opmath(dt);
  tpuir_val x = tpulw__opnd_val(b, &s, cdt);
  tpuir_val r;
  switch (b->op) {
  case P_EXP2: {
    tpuir_val xd = tpulw__convert(b, x, TPU_F64);
    r = tpulw__bin(b, TPUIR_POW, tpulw__const(b, TPU_F64, 2.0), xd);
    break;
  }
  case P_LOG2:
  case P_LOG10: {
    tpuir_val xd = tpulw__convert(b, x, TPU_F64);
    r = tpulw__bin_c(b, TPUIR_DIV, tpulw__un(b, TPUIR_LOG, xd),
                 b->op == P_LOG2 ? M_LN2 : M_LN10);
    break;
  }
  case P_ERFC: {
    tpuir_val xd = tpulw__convert(b, x, TPU_F64);
    r = tpulw__bin(b, TPUIR_SUB, tpulw__const(b, TPU_F64, 1.0), tpulw__un(b, TPUIR_ERF, xd));
    break;
  }
  case P_RECIP:
    r = tpulw__bin(b, TPUIR_DIV, tpulw__const(b, cdt, 1.0), x);
    break;
  case P_SIGMOID:
    r = tpulw__un(b, TPUIR_LOGISTIC, x);
    break;
  default:
    r = tpulw__un(b, b->op, x);
    break;
  }
  return tpulw__result_as(b, r, dt);
}

static tpuir_val sign_of(tpulw__b *b, tpuir_val x) {
  tpulw__shape s = tpulw__info(b, x);
  tpuir_val zero = tpulw__const(b, s.dtype, 0);
  tpuir_val pos = tpulw__convert(b, tpulw__bin(b, TPUIR_GT, x, zero), s.dtype);
  if (s.dtype == TPU_U8) return pos;
  tpuir_val neg = tpulw__convert(b, tpulw__bin(b, TPUIR_LT, x, zero), s.dtype);
  return tpulw__bin(b, TPUIR_SUB, pos, neg);
}

/* Unary ops whose result keeps the input dtype. */
static int unary_same_fn(tpulw__b *b) {
  tpulw__opnd s;
  int rc = get_self(b, "self", &s);
  if (rc < 0) return rc;
  int dt = s.t->view.dtype;
  int isf = tpu_dtype_is_float(dt);
  tpuir_val x = tpulw__tensor(b, s.t);
  switch (b->op) {
  case P_NEG:
    if (dt == TPU_BOOL)
      return tpu_error(TPU_E_INVALID,
                       "Negation, the `-` operator, on a bool tensor is not "
                       "supported. If you are trying to invert a mask, use the "
                       "`~` or `logical_not()` operator instead.");
    return tpulw__result(b, tpulw__un(b, TPUIR_NEG, x));
  case P_ABS:
    if (dt == TPU_BOOL) return unsupported_dtype("abs_cpu", dt);
    if (dt == TPU_U8) return tpulw__result(b, x);
    return tpulw__result(b, tpulw__un(b, TPUIR_ABS, x));
  case P_SIGN:
    if (dt == TPU_BOOL) return tpulw__result(b, x);
    return tpulw__result(b, sign_of(b, x));
  case P_FLOOR:
  case P_CEIL:
  case P_TRUNC:
  case P_ROUND: {
    static const char *const names[] = {"floor_vml_cpu", "ceil_vml_cpu",
                                        "round_vml_cpu", "trunc_vml_cpu"};
    int k = b->op == P_FLOOR ? 0 : b->op == P_CEIL ? 1 : b->op == P_ROUND ? 2 : 3;
    int64_t decimals = tpulw__int(b, "decimals", 0);
    if (decimals != 0 && !isf) return unsupported_dtype("round_cpu", dt);
    if (dt == TPU_BOOL) return unsupported_dtype(names[k], dt);
    if (!isf) return tpulw__result(b, x);
    int iop = b->op == P_FLOOR ? TPUIR_FLOOR
              : b->op == P_CEIL ? TPUIR_CEIL
              : b->op == P_ROUND ? TPUIR_ROUND_EVEN
                                 : TPUIR_TRUNC;
    if (decimals == 0) return tpulw__result(b, tpulw__un(b, iop, x));
    /* round(x * 10^d) / 10^d (or the inverse for d < 0), in the dtype */
    int cdt = tpulw__opmath(dt);
    tpuir_val xc = tpulw__convert(b, x, cdt);
    double tp = pow(10.0, (double)(decimals > 0 ? decimals : -decimals));
    tpuir_val p = tpulw__const(b, cdt, tp);
    tpuir_val r;
    if (decimals > 0)
      r = tpulw__bin(b, TPUIR_DIV, tpulw__un(b, iop, tpulw__bin(b, TPUIR_MUL, xc, p)), p);
    else
      r = tpulw__bin(b, TPUIR_MUL, tpulw__un(b, iop, tpulw__bin(b, TPUIR_DIV, xc, p)), p);
    return tpulw__result_as(b, r, dt);
  }
  case P_FRAC:
    if (!isf) return unsupported_dtype("frac_cpu", dt);
    return tpulw__result(b, tpulw__bin(b, TPUIR_SUB, x, tpulw__un(b, TPUIR_TRUNC, x)));
  case P_BITNOT:
    if (isf) return unsupported_dtype("bitwise_not_cpu", dt);
    return tpulw__result(b, tpulw__un(b, TPUIR_NOT, x));
  case P_LOGNOT:
    return tpulw__result(b, tpulw__un(b, TPUIR_NOT, tpulw__convert(b, x, TPU_BOOL)));
  case P_RELU:
    if (dt == TPU_BOOL)
      return tpu_error(TPU_E_INVALID, "Boolean inputs not supported for relu");
    if (dt == TPU_U8) return tpulw__result(b, x);
    return tpulw__result(b, tpulw__bin(b, TPUIR_MAX, x, tpulw__const(b, dt, 0)));
  default:
    return tpu_error(TPU_E_INTERNAL, "unary_same_fn: bad op %d", b->op);
  }
}

static int predicate_fn(tpulw__b *b) {
  tpulw__opnd s;
  int rc = get_self(b, "self", &s);
  if (rc < 0) return rc;
  int dt = s.t->view.dtype;
  tpuir_val x = tpulw__tensor(b, s.t);
  tpulw__shape sh = tpulw__info(b, x);
  if (!tpu_dtype_is_float(dt)) {
    double v = 0;
    if (b->op == P_ISFINITE) v = 1;
    if (b->op == P_SIGNBIT && dt != TPU_BOOL && dt != TPU_U8)
      return tpulw__result(b, tpulw__bin(b, TPUIR_LT, x, tpulw__const(b, dt, 0)));
    return tpulw__result(b, tpulw__full(b, TPU_BOOL, sh.ndim, sh.sizes, v));
  }
  switch (b->op) {
  case P_ISNAN: return tpulw__result(b, tpulw__un(b, TPUIR_IS_NAN, x));
  case P_ISINF: return tpulw__result(b, tpulw__un(b, TPUIR_IS_INF, x));
  case P_ISFINITE: return tpulw__result(b, tpulw__un(b, TPUIR_IS_FINITE, x));
  case P_ISPOSINF: return tpulw__result(b, tpulw__bin(b, TPUIR_EQ, x, tpulw__const(b, dt, INFINITY)));
  case P_ISNEGINF: return tpulw__result(b, tpulw__bin(b, TPUIR_EQ, x, tpulw__const(b, dt, -INFINITY)));
  case P_SIGNBIT: {
    /* x < 0, or x is -0.0 (1/x == -inf), NaN sign not tracked */
    tpuir_val zero = tpulw__const(b, dt, 0);
    tpuir_val lt = tpulw__bin(b, TPUIR_LT, x, zero);
    tpuir_val negz = tpulw__bin(b, TPUIR_AND, tpulw__bin(b, TPUIR_EQ, x, zero),
                            tpulw__bin(b, TPUIR_LT, tpulw__bin(b, TPUIR_DIV, tpulw__const(b, dt, 1), x),
                                   zero));
    return tpulw__result(b, tpulw__bin(b, TPUIR_OR, lt, negz));
  }
  default: return tpu_error(TPU_E_INTERNAL, "predicate_fn: bad op");
  }
}

/* ---- clamp family ------------------------------------------------------- */

static int clamp_fn(tpulw__b *b) {
  tpulw__opnd s;
  int rc = get_self(b, "self", &s);
  if (rc < 0) return rc;
  tpulw__opnd lo = {0}, hi = {0};
  if (b->op == P_CLAMP || b->op == P_CLAMP_MIN) lo = tpulw__opnd_arg(b, "min");
  if (b->op == P_CLAMP || b->op == P_CLAMP_MAX) hi = tpulw__opnd_arg(b, "max");
  if (b->op == P_HARDTANH) {
    lo = tpulw__opnd_arg(b, "min_val");
    hi = tpulw__opnd_arg(b, "max_val");
    if (lo.kind == LW_OPND_NONE) lo = tpulw__opnd_scalar(tpulw__scalar_i(-1));
    if (hi.kind == LW_OPND_NONE) hi = tpulw__opnd_scalar(tpulw__scalar_i(1));
  }
  if (lo.kind == LW_OPND_NONE && hi.kind == LW_OPND_NONE)
    return tpu_error(TPU_E_INVALID,
                     "torch.clamp: At least one of 'min' or 'max' must not be "
                     "None");
  int dt;
  if (b->op == P_HARDTANH) {
    dt = s.t->view.dtype;
    if (dt == TPU_BOOL) return unsupported_dtype("hardtanh", dt);
  } else {
    tpulw__opnd ops[3] = {s, lo, hi};
    dt = tpulw__result_type(3, ops);
  }
  if (dt == TPU_BOOL) return unsupported_dtype("clamp_cpu", dt);
  tpuir_val x = tpulw__opnd_val(b, &s, dt);
  if (lo.kind != LW_OPND_NONE) x = tpulw__bin(b, TPUIR_MAX, x, tpulw__opnd_val(b, &lo, dt));
  if (hi.kind != LW_OPND_NONE) x = tpulw__bin(b, TPUIR_MIN, x, tpulw__opnd_val(b, &hi, dt));
  return tpulw__result(b, x);
}

/* ---- where / masked_fill / fill ---------------------------------------- */

static int where_fn(tpulw__b *b) {
  const tpulw_tensor *cond = tpulw__tensor_arg(b, "condition");
  tpulw__opnd ops[2] = {tpulw__opnd_arg(b, "self"), tpulw__opnd_arg(b, "other")};
  if (!cond || ops[0].kind == LW_OPND_NONE || ops[1].kind == LW_OPND_NONE)
    return tpu_error(TPU_E_UNSUPPORTED, "where: missing operand");
  int cdt = cond->view.dtype;
  if (cdt != TPU_BOOL && cdt != TPU_U8)
    return tpu_error(TPU_E_INVALID,
                     "where expected condition to be a boolean tensor, but got "
                     "a tensor with dtype %s", tpulw__torch_name(cdt));
  int dt = tpulw__result_type(2, ops);
  int od = tpulw__out_dtype(b);
  if (od >= 0 && od != dt)
    return tpu_error(TPU_E_INVALID, "Expected out type to be %s but got %s", tpulw__torch_name(dt),
                     tpulw__torch_name(od));
  tpuir_val c = tpulw__convert(b, tpulw__tensor(b, cond), TPU_BOOL);
  return tpulw__result(b, tpulw__sel(b, c, tpulw__opnd_val(b, &ops[0], dt),
                             tpulw__opnd_val(b, &ops[1], dt)));
}

static int masked_fill_fn(tpulw__b *b) {
  tpulw__opnd s;
  int rc = get_self(b, "self", &s);
  if (rc < 0) return rc;
  const tpulw_tensor *mask = tpulw__tensor_arg(b, "mask");
  if (!mask) return tpu_error(TPU_E_UNSUPPORTED, "masked_fill: no mask");
  if (mask->view.dtype != TPU_BOOL)
    return tpu_error(TPU_E_INVALID,
                     "masked_fill_ only supports boolean masks, but got mask "
                     "with dtype %s",
                     mask->view.dtype == TPU_I64 ? "long int"
                                                 : tpu_dtype_name(mask->view.dtype));
  int dt = s.t->view.dtype;
  tpulw__opnd v = tpulw__opnd_arg(b, "value");
  tpuir_val val;
  if (v.kind == LW_OPND_SCALAR) {
    rc = check_fits(dt, v.s);
    if (rc < 0) return rc;
    val = tpulw__const_s(b, dt, v.s);
  } else if (v.kind == LW_OPND_TENSOR) {
    if (v.t->view.ndim != 0)
      return tpu_error(TPU_E_INVALID,
                       "masked_fill_ only supports a 0-dimensional value "
                       "tensor, but got tensor with %d dimension(s).",
                       v.t->view.ndim);
    val = tpulw__opnd_val(b, &v, dt);
  } else {
    return tpu_error(TPU_E_UNSUPPORTED, "masked_fill: no value");
  }
  tpuir_val x = tpulw__tensor(b, s.t);
  return tpulw__result(b, tpulw__sel(b, tpulw__tensor(b, mask), val, x));
}

static int fill_fn(tpulw__b *b) {
  const tpulw_tensor *self = tpulw__tensor_arg(b, "self");
  if (!self) return tpu_error(TPU_E_UNSUPPORTED, "fill_: no self");
  int dt = self->view.dtype;
  tpuir_val v;
  if (strcmp(b->base, "zero_") == 0) {
    v = tpulw__const(b, dt, 0);
  } else {
    tpulw__opnd val = tpulw__opnd_arg(b, "value");
    if (val.kind == LW_OPND_SCALAR) {
      int rc = check_fits(dt, val.s);
      if (rc < 0) return rc;
      v = tpulw__const_s(b, dt, val.s);
    } else if (val.kind == LW_OPND_TENSOR) {
      if (val.t->view.ndim != 0)
        return tpu_error(TPU_E_INVALID,
                         "fill_ only supports 0-dimension value tensor but got "
                         "tensor with %d dimensions.", val.t->view.ndim);
      v = tpulw__opnd_val(b, &val, dt);
    } else {
      return tpu_error(TPU_E_UNSUPPORTED, "fill_: no value");
    }
  }
  b->out_rule = LW_OUT_ANY;
  return tpulw__result(b, tpulw__bcast(b, v, self->view.ndim, self->view.sizes));
}

/* ---- nan_to_num / lerp / addcmul / addcdiv ----------------------------- */

static double dtype_max(int dt) {
  switch (dt) {
  case TPU_F16: return 65504.0;
  case TPU_BF16: return 3.3895313892515355e38;
  case TPU_F32: return 3.4028234663852886e38;
  default: return 1.7976931348623157e308;
  }
}

static int nan_to_num_fn(tpulw__b *b) {
  const tpulw_tensor *self = tpulw__tensor_arg(b, "self");
  if (!self) return tpu_error(TPU_E_UNSUPPORTED, "nan_to_num: no self");
  int dt = self->view.dtype;
  tpuir_val x = tpulw__tensor(b, self);
  if (!tpu_dtype_is_float(dt)) return tpulw__result(b, x);
  double nan = tpulw__float(b, "nan", 0.0);
  double pinf = tpulw__float(b, "posinf", dtype_max(dt));
  double ninf = tpulw__float(b, "neginf", -dtype_max(dt));
  tpuir_val zero = tpulw__const(b, dt, 0);
  tpuir_val r = tpulw__sel(b, tpulw__un(b, TPUIR_IS_NAN, x), tpulw__const(b, dt, nan), x);
  tpuir_val inf = tpulw__un(b, TPUIR_IS_INF, x);
  tpuir_val pos = tpulw__bin(b, TPUIR_GT, x, zero);
  r = tpulw__sel(b, tpulw__bin(b, TPUIR_AND, inf, pos), tpulw__const(b, dt, pinf), r);
  r = tpulw__sel(b, tpulw__bin(b, TPUIR_AND, inf, tpulw__un(b, TPUIR_NOT, pos)),
             tpulw__const(b, dt, ninf), r);
  return tpulw__result(b, r);
}

static int lerp_fn(tpulw__b *b) {
  const tpulw_tensor *self = tpulw__tensor_arg(b, "self");
  const tpulw_tensor *end = tpulw__tensor_arg(b, "end");
  tpulw__opnd w = tpulw__opnd_arg(b, "weight");
  if (!self || !end || w.kind == LW_OPND_NONE)
    return tpu_error(TPU_E_UNSUPPORTED, "lerp: missing operand");
  int dt = self->view.dtype;
  if (end->view.dtype != dt)
    return tpu_error(TPU_E_INVALID, "expected dtype %s for `end` but got dtype %s",
                     tpu_dtype_name(dt), tpu_dtype_name(end->view.dtype));
  if (w.kind == LW_OPND_TENSOR && w.t->view.dtype != dt)
    return tpu_error(TPU_E_INVALID,
                     "expected dtype %s for `weight` but got dtype %s",
                     tpu_dtype_name(dt), tpu_dtype_name(w.t->view.dtype));
  if (!tpu_dtype_is_float(dt)) return unsupported_dtype("lerp_kernel_scalar", dt);
  int cdt = tpulw__opmath(dt);
  tpuir_val s = tpulw__convert(b, tpulw__tensor(b, self), cdt);
  tpuir_val e = tpulw__convert(b, tpulw__tensor(b, end), cdt);
  tpuir_val wt = tpulw__opnd_val(b, &w, cdt);
  tpuir_val diff = tpulw__bin(b, TPUIR_SUB, e, s);
  tpuir_val small = tpulw__bin(b, TPUIR_LT, tpulw__un(b, TPUIR_ABS, wt), tpulw__const(b, cdt, 0.5));
  tpuir_val r1 = tpulw__bin(b, TPUIR_ADD, s, tpulw__bin(b, TPUIR_MUL, wt, diff));
  tpuir_val r2 = tpulw__bin(b, TPUIR_SUB, e,
                        tpulw__bin(b, TPUIR_MUL, diff,
                               tpulw__bin(b, TPUIR_SUB, tpulw__const(b, cdt, 1), wt)));
  return tpulw__result_as(b, tpulw__sel(b, small, r1, r2), dt);
}

static int addc_fn(tpulw__b *b) {
  int is_div = strncmp(b->base, "addcdiv", 7) == 0;
  tpulw__opnd ops[3] = {tpulw__opnd_arg(b, "self"), tpulw__opnd_arg(b, "tensor1"),
                    tpulw__opnd_arg(b, "tensor2")};
  for (int i = 0; i < 3; i++)
    if (ops[i].kind != LW_OPND_TENSOR)
      return tpu_error(TPU_E_UNSUPPORTED, "%s: missing operand", b->base);
  int dt = tpulw__result_type(3, ops);
  if (is_div && !tpu_dtype_is_float(dt))
    return tpu_error(TPU_E_INVALID,
                     "Integer division with addcdiv is no longer supported, and "
                     "in a future  release addcdiv will perform a true division "
                     "of tensor1 and tensor2. The historic addcdiv behavior can "
                     "be implemented as (input + value * torch.trunc(tensor1 / "
                     "tensor2)).to(input.dtype) for integer inputs and as "
                     "(input + value * tensor1 / tensor2) for float inputs. The "
                     "future addcdiv behavior is just the latter implementation: "
                     "(input + value * tensor1 / tensor2), for all dtypes.");
  tpulw__scalar value = tpulw__scalar_i(1);
  tpulw__scalar_arg(b, "value", &value);
  int cdt = tpulw__opmath(dt);
  tpuir_val s = tpulw__opnd_val(b, &ops[0], cdt);
  tpuir_val t1 = tpulw__opnd_val(b, &ops[1], cdt);
  tpuir_val t2 = tpulw__opnd_val(b, &ops[2], cdt);
  if (dt == TPU_BOOL) {
    tpuir_val p = tpulw__bin(b, TPUIR_AND, t1, t2);
    if (!value.f) p = tpulw__full(b, TPU_BOOL, 0, NULL, 0);
    return tpulw__result(b, tpulw__bin(b, TPUIR_OR, s, p));
  }
  tpuir_val st = tpulw__bin(b, TPUIR_MUL, tpulw__const_s(b, cdt, value), t1);
  tpuir_val r = tpulw__bin(b, TPUIR_ADD, s,
                       tpulw__bin(b, is_div ? TPUIR_DIV : TPUIR_MUL, st, t2));
  return tpulw__result_as(b, r, dt);
}

/* ---- activations -------------------------------------------------------- */

static tpuir_val softplus_of(tpulw__b *b, tpuir_val x) { /* log1p(exp(x)) */
  return tpulw__un(b, TPUIR_LOG1P, tpulw__un(b, TPUIR_EXP, x));
}

static int activation_fn(tpulw__b *b) {
  tpulw__opnd s;
  int rc = get_self(b, "self", &s);
  if (rc < 0) return rc;
  int dt = s.t->view.dtype;
  static const char *const names[] = {
      "GeluKernelImpl", "silu_cpu", "mish_cpu", "hardsigmoid_cpu",
      "hardswish_cpu", "leaky_relu_cpu", "elu_cpu", "softplus_cpu"};
  if (!tpu_dtype_is_float(dt)) return unsupported_dtype(names[b->op - P_GELU], dt);
  int cdt = tpulw__opmath(dt);
  tpuir_val x = tpulw__convert(b, tpulw__tensor(b, s.t), cdt);
  tpuir_val zero = tpulw__const(b, cdt, 0), r;
#define C(v) tpulw__const(b, cdt, (v))
  switch (b->op) {
  case P_GELU: {
    const char *approx = tpulw__str(b, "approximate");
    if (approx && strcmp(approx, "tanh") == 0) {
      tpuir_val x3 = tpulw__bin(b, TPUIR_MUL, tpulw__bin(b, TPUIR_MUL, x, x), x);
      tpuir_val inner = tpulw__bin(b, TPUIR_MUL, C(M_SQRT2 * M_2_SQRTPI * 0.5),
                               tpulw__bin(b, TPUIR_ADD, x, tpulw__bin(b, TPUIR_MUL, C(0.044715), x3)));
      r = tpulw__bin(b, TPUIR_MUL, tpulw__bin(b, TPUIR_MUL, C(0.5), x),
                 tpulw__bin(b, TPUIR_ADD, C(1), tpulw__un(b, TPUIR_TANH, inner)));
    } else if (!approx || strcmp(approx, "none") == 0) {
      tpuir_val e = tpulw__un(b, TPUIR_ERF, tpulw__bin(b, TPUIR_MUL, x, C(M_SQRT1_2)));
      r = tpulw__bin(b, TPUIR_MUL, tpulw__bin(b, TPUIR_MUL, x, C(0.5)),
                 tpulw__bin(b, TPUIR_ADD, C(1), e));
    } else {
      return tpu_error(TPU_E_INVALID, "approximate argument must be either none or tanh.");
    }
    break;
  }
  case P_SILU:
    r = tpulw__bin(b, TPUIR_DIV, x,
               tpulw__bin(b, TPUIR_ADD, C(1), tpulw__un(b, TPUIR_EXP, tpulw__un(b, TPUIR_NEG, x))));
    break;
  case P_MISH:
    r = tpulw__bin(b, TPUIR_MUL, x, tpulw__un(b, TPUIR_TANH, softplus_of(b, x)));
    break;
  case P_HARDSIGMOID:
  case P_HARDSWISH: {
    tpuir_val h = tpulw__bin(b, TPUIR_MIN,
                         tpulw__bin(b, TPUIR_MAX, tpulw__bin(b, TPUIR_ADD, x, C(3)), zero), C(6));
    if (b->op == P_HARDSIGMOID) r = tpulw__bin(b, TPUIR_DIV, h, C(6));
    else r = tpulw__bin(b, TPUIR_DIV, tpulw__bin(b, TPUIR_MUL, x, h), C(6));
    break;
  }
  case P_LEAKY_RELU: {
    double slope = tpulw__float(b, "negative_slope", 0.01);
    r = tpulw__sel(b, tpulw__bin(b, TPUIR_GT, x, zero), x, tpulw__bin(b, TPUIR_MUL, x, C(slope)));
    break;
  }
  case P_ELU: {
    double alpha = tpulw__float(b, "alpha", 1), scale = tpulw__float(b, "scale", 1);
    double iscale = tpulw__float(b, "input_scale", 1);
    tpuir_val neg = tpulw__bin(b, TPUIR_MUL,
                           tpulw__un(b, TPUIR_EXPM1, tpulw__bin(b, TPUIR_MUL, x, C(iscale))),
                           C(alpha * scale));
    r = tpulw__sel(b, tpulw__bin(b, TPUIR_LE, x, zero), neg, tpulw__bin(b, TPUIR_MUL, x, C(scale)));
    break;
  }
  case P_SOFTPLUS: {
    double beta = tpulw__float(b, "beta", 1), thr = tpulw__float(b, "threshold", 20);
    tpuir_val xb = tpulw__bin(b, TPUIR_MUL, x, C(beta));
    r = tpulw__sel(b, tpulw__bin(b, TPUIR_GT, xb, C(thr)), x,
               tpulw__bin(b, TPUIR_DIV, softplus_of(b, xb), C(beta)));
    break;
  }
  default:
    return tpu_error(TPU_E_INTERNAL, "activation_fn: bad op");
  }
#undef C
  return tpulw__result_as(b, r, dt);
}

/* log_sigmoid, shrinks, logit, prelu, glu (+ backward) */
static int activation2_fn(tpulw__b *b) {
  int op = b->op;
  const char *xname = "self";
  const tpulw_tensor *self = tpulw__tensor_arg(b, xname);
  const tpulw_tensor *go = tpulw__tensor_arg(b, "grad_output");
  if (!go) go = tpulw__tensor_arg(b, "grad_out");
  int bw = op == P_LOGSIGMOID_BW || op == P_SHRINK_BW || op == P_PRELU_BW || op == P_GLU_BW ||
           op == P_LOGIT_BW;
  if (!self || (bw && !go)) return tpu_error(TPU_E_UNSUPPORTED, "%s: missing operand", b->base);
  int dt = self->view.dtype;
  if (!tpu_dtype_is_float(dt)) {
    if (op != P_LOGIT || tpu_dtype_is_complex(dt)) return unsupported_dtype(b->base, dt);
    dt = LW_DEFAULT_FLOAT; /* logit promotes ints like a unary float op */
  }
  int cdt = tpulw__opmath(dt);
  tpuir_val x = tpulw__convert(b, tpulw__tensor(b, self), cdt);
  tpuir_val g = bw ? tpulw__convert(b, tpulw__tensor(b, go), cdt) : -1;
  tpuir_val zero = tpulw__const(b, cdt, 0), one = tpulw__const(b, cdt, 1), r;
  int rc;
  switch (op) {
  case P_LOGSIGMOID: { /* min(x, 0) - log1p(exp(-|x|)); buffer = exp(-|x|) */
    tpuir_val z = tpulw__un(b, TPUIR_EXP, tpulw__un(b, TPUIR_NEG, tpulw__un(b, TPUIR_ABS, x)));
    r = tpulw__bin(b, TPUIR_SUB, tpulw__bin(b, TPUIR_MIN, x, zero), tpulw__un(b, TPUIR_LOG1P, z));
    if ((rc = tpulw__result_as(b, r, dt)) < 0) return rc;
    return tpulw__result_as(b, z, dt);
  }
  case P_LOGSIGMOID_BW: {
    tpuir_val z = tpulw__un(b, TPUIR_EXP, tpulw__un(b, TPUIR_NEG, tpulw__un(b, TPUIR_ABS, x)));
    tpuir_val neg = tpulw__bin(b, TPUIR_LT, x, zero);
    tpuir_val q = tpulw__bin(b, TPUIR_DIV, z, tpulw__bin(b, TPUIR_ADD, one, z));
    r = tpulw__sel(b, neg, tpulw__bin(b, TPUIR_SUB, one, q), q);
    return tpulw__result_as(b, tpulw__bin(b, TPUIR_MUL, r, g), dt);
  }
  case P_HARDSHRINK:
  case P_SOFTSHRINK:
  case P_SHRINK_BW: {
    double l = tpulw__float(b, "lambd", 0.5);
    if (op == P_SOFTSHRINK && !(l >= 0)) {
      const char *nm = dt == TPU_F64 ? "Double" : dt == TPU_F16 ? "Half"
                       : dt == TPU_BF16 ? "BFloat16" : "Float";
      const char *mx = dt == TPU_F64 ? "1.79769e+308" : dt == TPU_F16 ? "65504"
                       : dt == TPU_BF16 ? "3.38953e+38" : "3.40282e+38";
      return tpu_error(TPU_E_INVALID,
                       "lambda must be in range [0, %s] for input dtype %s, but found %g", mx, nm, l);
    }
    tpuir_val in = tpulw__bin(b, TPUIR_AND, tpulw__bin_c(b, TPUIR_GE, x, -l), tpulw__bin_c(b, TPUIR_LE, x, l));
    if (op == P_HARDSHRINK) r = tpulw__sel(b, in, zero, x);
    else if (op == P_SHRINK_BW) r = tpulw__sel(b, in, zero, g);
    else
      r = tpulw__sel(b, tpulw__bin_c(b, TPUIR_GT, x, l), tpulw__bin_c(b, TPUIR_SUB, x, l),
                 tpulw__sel(b, tpulw__bin_c(b, TPUIR_LT, x, -l), tpulw__bin_c(b, TPUIR_ADD, x, l), zero));
    return tpulw__result_as(b, r, dt);
  }
  case P_LOGIT: {
    double e = tpulw__none(b, "eps") ? -1.0 : tpulw__float(b, "eps", 0);
    if (e >= 0) /* a negative (or NaN) eps means no clamping, like CPU */
      x = tpulw__bin_c(b, TPUIR_MIN, tpulw__bin_c(b, TPUIR_MAX, x, e), 1 - e);
    r = tpulw__un(b, TPUIR_LOG, tpulw__bin(b, TPUIR_DIV, x, tpulw__bin(b, TPUIR_SUB, one, x)));
    return tpulw__result_as(b, r, dt);
  }
  case P_LOGIT_BW: {
    tpuir_val den = tpulw__bin(b, TPUIR_MUL, x, tpulw__bin(b, TPUIR_SUB, one, x));
    r = tpulw__bin(b, TPUIR_DIV, g, den);
    if (!tpulw__none(b, "eps")) {
      double e = tpulw__float(b, "eps", 0);
      tpuir_val out = tpulw__bin(b, TPUIR_OR, tpulw__bin_c(b, TPUIR_LT, x, e), tpulw__bin_c(b, TPUIR_GT, x, 1 - e));
      r = tpulw__sel(b, out, zero, r);
    } else {
      tpuir_val out = tpulw__bin(b, TPUIR_OR, tpulw__bin(b, TPUIR_LT, x, zero), tpulw__bin(b, TPUIR_GT, x, one));
      r = tpulw__sel(b, out, tpulw__const(b, cdt, NAN), r);
    }
    return tpulw__result_as(b, r, dt);
  }
  case P_PRELU:
  case P_PRELU_BW: {
    const tpulw_tensor *wt = tpulw__tensor_arg(b, "weight");
    if (!wt) return tpu_error(TPU_E_UNSUPPORTED, "prelu: no weight");
    tpuir_val w = tpulw__convert(b, tpulw__tensor(b, wt), cdt);
    tpulw__shape xs = tpulw__info(b, x), ws = tpulw__info(b, w);
    /* weight [C] applies along dim 1 (or broadcasts if it has one element) */
    if (ws.ndim == 1 && xs.ndim >= 2 && ws.sizes[0] != 1) {
      int64_t sz[TPU_MAX_DIMS];
      for (int d = 0; d < xs.ndim; d++) sz[d] = d == 1 ? ws.sizes[0] : 1;
      w = tpulw__reshape(b, w, xs.ndim, sz);
    }
    tpuir_val pos = tpulw__bin(b, TPUIR_GT, x, zero);
    if (op == P_PRELU) return tpulw__result_as(b, tpulw__sel(b, pos, x, tpulw__bin(b, TPUIR_MUL, w, x)), dt);
    r = tpulw__sel(b, pos, g, tpulw__bin(b, TPUIR_MUL, w, g));
    if ((rc = tpulw__result_as(b, r, dt)) < 0) return rc;
    /* grad_weight: sum of g * x where x <= 0, reduced to weight's shape */
    tpuir_val gw = tpulw__sel(b, pos, zero, tpulw__bin(b, TPUIR_MUL, g, x));
    tpulw__shape wa = tpulw__info(b, w); /* weight as broadcast against x */
    uint32_t m = 0;
    for (int d = 0; d < xs.ndim; d++) {
      int k = d - (xs.ndim - wa.ndim);
      if (k < 0 || wa.sizes[k] == 1) m |= 1u << d;
    }
    gw = tpulw__reduce_dims(b, TPUIR_RED_SUM, gw, m, 0);
    return tpulw__result_as(b, tpulw__reshape(b, gw, ws.ndim, ws.sizes), wt->view.dtype);
  }
  case P_GLU:
  case P_GLU_BW: {
    tpulw__shape xs = tpulw__info(b, x);
    int dim;
    if ((rc = tpulw__wrap_dim(tpulw__int(b, "dim", -1), xs.ndim, &dim)) < 0) return rc;
    if (xs.ndim == 0 || xs.sizes[dim] % 2)
      return tpu_error(TPU_E_INVALID,
                       "Halving dimension must be even, but dimension %d is size %lld", dim,
                       (long long)(xs.ndim ? xs.sizes[dim] : 0));
    int64_t st[TPU_MAX_DIMS] = {0}, lim[TPU_MAX_DIMS], str[TPU_MAX_DIMS];
    for (int d = 0; d < xs.ndim; d++) {
      lim[d] = xs.sizes[d];
      str[d] = 1;
    }
    int64_t h = xs.sizes[dim] / 2;
    lim[dim] = h;
    tpuir_val a = tpuir_slice(b->g, x, st, lim, str);
    st[dim] = h;
    lim[dim] = 2 * h;
    tpuir_val c = tpuir_slice(b->g, x, st, lim, str);
    tpuir_val sg = tpulw__un(b, TPUIR_LOGISTIC, c);
    if (op == P_GLU) return tpulw__result_as(b, tpulw__bin(b, TPUIR_MUL, a, sg), dt);
    tpuir_val ga = tpulw__bin(b, TPUIR_MUL, g, sg);
    tpuir_val gb = tpulw__bin(b, TPUIR_MUL, tpulw__bin(b, TPUIR_MUL, g, a),
                          tpulw__bin(b, TPUIR_MUL, sg, tpulw__bin(b, TPUIR_SUB, one, sg)));
    tpuir_val parts[2] = {ga, gb};
    if (ga < 0) return ga;
    if (gb < 0) return gb;
    return tpulw__result_as(b, tpuir_concat(b->g, 2, parts, dim), dt);
  }
  default:
    return tpu_error(TPU_E_INTERNAL, "activation2_fn: bad op");
  }
}

static int threshold_fn(tpulw__b *b) {
  tpulw__opnd s;
  int rc = get_self(b, "self", &s);
  if (rc < 0) return rc;
  tpulw__opnd thr = tpulw__opnd_arg(b, "threshold"), val = tpulw__opnd_arg(b, "value");
  if (thr.kind == LW_OPND_NONE || val.kind == LW_OPND_NONE)
    return tpu_error(TPU_E_UNSUPPORTED, "threshold: missing operand");
  int dt = s.t->view.dtype;
  if (dt == TPU_BOOL) return unsupported_dtype("threshold_cpu", dt);
  int cdt = tpulw__opmath(dt);
  tpuir_val x = tpulw__convert(b, tpulw__tensor(b, s.t), cdt);
  tpuir_val r = tpulw__sel(b, tpulw__bin(b, TPUIR_LE, x, tpulw__opnd_val(b, &thr, cdt)),
                       tpulw__opnd_val(b, &val, cdt), x);
  return tpulw__result_as(b, r, dt);
}

/* Backward ops: (grad_output, self/output/...) -> grad_input in the
 * promoted dtype. */
static int backward_fn(tpulw__b *b) {
  tpulw__opnd g = tpulw__opnd_arg(b, "grad_output");
  const char *xname = "self";
  if (b->op == P_TANH_BW || b->op == P_SIGMOID_BW) xname = "output";
  if (b->op == P_ELU_BW) xname = "self_or_result";
  tpulw__opnd xo = tpulw__opnd_arg(b, xname);
  if (g.kind != LW_OPND_TENSOR || xo.kind != LW_OPND_TENSOR)
    return tpu_error(TPU_E_UNSUPPORTED, "%s: missing operand", b->base);
  tpulw__opnd ops[2] = {g, xo};
  int dt = tpulw__result_type(2, ops);
  if (!tpu_dtype_is_float(dt) && b->op != P_THRESHOLD_BW)
    return unsupported_dtype(b->base, dt);
  int cdt = tpulw__opmath(dt);
  tpuir_val gv = tpulw__opnd_val(b, &g, cdt);
  tpuir_val x = tpulw__opnd_val(b, &xo, cdt);
  tpuir_val zero = tpulw__const(b, cdt, 0), r;
#define C(v) tpulw__const(b, cdt, (v))
#define MUL(a, c) tpulw__bin(b, TPUIR_MUL, (a), (c))
#define ADD(a, c) tpulw__bin(b, TPUIR_ADD, (a), (c))
#define SUB(a, c) tpulw__bin(b, TPUIR_SUB, (a), (c))
#define DIV(a, c) tpulw__bin(b, TPUIR_DIV, (a), (c))
  switch (b->op) {
  case P_THRESHOLD_BW: {
    tpulw__opnd thr = tpulw__opnd_arg(b, "threshold");
    if (thr.kind == LW_OPND_NONE) return tpu_error(TPU_E_UNSUPPORTED, "no threshold");
    r = tpulw__sel(b, tpulw__bin(b, TPUIR_LE, x, tpulw__opnd_val(b, &thr, cdt)), zero, gv);
    break;
  }
  case P_GELU_BW: {
    const char *approx = tpulw__str(b, "approximate");
    if (approx && strcmp(approx, "tanh") == 0) {
      const double kbeta = M_SQRT2 * M_2_SQRTPI * 0.5, kk = 0.044715;
      tpuir_val x2 = MUL(x, x), x3 = MUL(x2, x);
      tpuir_val inner = MUL(C(kbeta), ADD(x, MUL(C(kk), x3)));
      tpuir_val t = tpulw__un(b, TPUIR_TANH, inner);
      tpuir_val left = MUL(C(0.5), x), right = ADD(C(1), t);
      tpuir_val ld = MUL(C(0.5), right);
      tpuir_val td = SUB(C(1), MUL(t, t));
      tpuir_val id = MUL(C(kbeta), ADD(C(1), MUL(C(3 * kk), x2)));
      tpuir_val rd = MUL(MUL(left, td), id);
      r = MUL(gv, ADD(ld, rd));
    } else {
      tpuir_val cdf = MUL(C(0.5), ADD(C(1), tpulw__un(b, TPUIR_ERF, MUL(x, C(M_SQRT1_2)))));
      tpuir_val pdf = MUL(tpulw__un(b, TPUIR_EXP, MUL(C(-0.5), MUL(x, x))),
                          C(M_2_SQRTPI * M_SQRT1_2 * 0.5));
      r = MUL(gv, ADD(cdf, MUL(x, pdf)));
    }
    break;
  }
  case P_SILU_BW: {
    tpuir_val sg = tpulw__un(b, TPUIR_LOGISTIC, x);
    r = MUL(MUL(gv, sg), ADD(C(1), MUL(x, SUB(C(1), sg))));
    break;
  }
  case P_TANH_BW:
    r = MUL(gv, SUB(C(1), MUL(x, x)));
    break;
  case P_SIGMOID_BW:
    r = MUL(MUL(gv, SUB(C(1), x)), x);
    break;
  case P_LEAKY_RELU_BW: {
    double slope = tpulw__float(b, "negative_slope", 0.01);
    r = tpulw__sel(b, tpulw__bin(b, TPUIR_GT, x, zero), gv, MUL(gv, C(slope)));
    break;
  }
  case P_HARDTANH_BW: {
    double lo = tpulw__float(b, "min_val", -1), hi = tpulw__float(b, "max_val", 1);
    tpuir_val out = tpulw__bin(b, TPUIR_OR, tpulw__bin(b, TPUIR_LE, x, C(lo)),
                           tpulw__bin(b, TPUIR_GE, x, C(hi)));
    r = tpulw__sel(b, out, zero, gv);
    break;
  }
  case P_ELU_BW: {
    double alpha = tpulw__float(b, "alpha", 1), scale = tpulw__float(b, "scale", 1);
    double iscale = tpulw__float(b, "input_scale", 1);
    int is_result = (int)tpulw__int(b, "is_result", 0);
    double negcoef = alpha * scale;
    tpuir_val neg;
    if (is_result)
      neg = MUL(MUL(gv, C(iscale)), ADD(x, C(negcoef)));
    else
      neg = MUL(MUL(gv, C(iscale * negcoef)), tpulw__un(b, TPUIR_EXP, MUL(x, C(iscale))));
    r = tpulw__sel(b, tpulw__bin(b, TPUIR_LE, x, zero), neg, MUL(gv, C(scale)));
    break;
  }
  case P_SOFTPLUS_BW: {
    double beta = tpulw__float(b, "beta", 1), thr = tpulw__float(b, "threshold", 20);
    tpuir_val xb = MUL(x, C(beta));
    tpuir_val z = tpulw__un(b, TPUIR_EXP, xb);
    r = tpulw__sel(b, tpulw__bin(b, TPUIR_GT, xb, C(thr)), gv, DIV(MUL(gv, z), ADD(z, C(1))));
    break;
  }
  case P_HARDSIGMOID_BW: {
    tpuir_val in = tpulw__bin(b, TPUIR_AND, tpulw__bin(b, TPUIR_GT, x, C(-3)),
                          tpulw__bin(b, TPUIR_LT, x, C(3)));
    r = tpulw__sel(b, in, DIV(gv, C(6)), zero);
    break;
  }
  case P_HARDSWISH_BW: {
    tpuir_val mid = MUL(gv, ADD(DIV(x, C(3)), C(0.5)));
    r = tpulw__sel(b, tpulw__bin(b, TPUIR_LT, x, C(-3)), zero,
               tpulw__sel(b, tpulw__bin(b, TPUIR_LE, x, C(3)), mid, gv));
    break;
  }
  case P_MISH_BW: {
    tpuir_val t = tpulw__un(b, TPUIR_TANH, softplus_of(b, x));
    tpuir_val sg = tpulw__un(b, TPUIR_LOGISTIC, x);
    r = MUL(gv, ADD(t, MUL(MUL(x, sg), SUB(C(1), MUL(t, t)))));
    break;
  }
  default:
    return tpu_error(TPU_E_INTERNAL, "backward_fn: bad op");
  }
#undef C
#undef MUL
#undef ADD
#undef SUB
#undef DIV
  return tpulw__result_as(b, r, dt);
}

/* ---- arange / linspace (out= only: the composite computes the size) ---- */

static int arange_fn(tpulw__b *b) {
  const tpulw_tensor *out = tpulw__tensor_arg(b, "out");
  if (!out) return tpu_error(TPU_E_UNSUPPORTED, "arange: no out tensor");
  tpulw__scalar start = tpulw__scalar_i(0), end = tpulw__scalar_i(0), step = tpulw__scalar_i(1);
  tpulw__scalar_arg(b, "start", &start);
  if (!tpulw__scalar_arg(b, "end", &end))
    return tpu_error(TPU_E_UNSUPPORTED, "arange: no end");
  tpulw__scalar_arg(b, "step", &step);
  int dt = out->view.dtype;
  if (dt == TPU_BOOL) return unsupported_dtype("arange_cpu", dt);
  if (!isfinite(start.f) || !isfinite(end.f))
    return tpu_error(TPU_E_INVALID, "unsupported range: %g -> %g", start.f, end.f);
  if (step.f == 0) return tpu_error(TPU_E_INVALID, "step must be nonzero");
  if (!((step.f > 0 && end.f >= start.f) || (step.f < 0 && end.f <= start.f)))
    return tpu_error(TPU_E_INVALID,
                     "upper bound and lower bound inconsistent with step sign");
  int64_t n;
  int allint = start.kind != LW_SK_FLOAT && end.kind != LW_SK_FLOAT &&
               step.kind != LW_SK_FLOAT;
  if (dt == TPU_I64 && allint) {
    int64_t sg = step.i > 0 ? 1 : -1;
    n = (end.i - start.i + step.i - sg) / step.i;
  } else {
    n = (int64_t)ceil((end.f - start.f) / step.f);
  }
  if (n < 0) n = 0;
  int64_t sz[1] = {n};
  tpuir_val r;
  if (tpu_dtype_is_int(dt)) {
    tpuir_val i = tpuir_iota(b->g, TPU_I64, 1, sz, 0);
    r = tpulw__bin(b, TPUIR_ADD, tpulw__bin(b, TPUIR_MUL, i, tpulw__const_s(b, TPU_I64, step)),
               tpulw__const_s(b, TPU_I64, start));
  } else {
    tpuir_val i = tpuir_iota(b->g, TPU_F64, 1, sz, 0);
    r = tpulw__bin(b, TPUIR_ADD, tpulw__bin(b, TPUIR_MUL, i, tpulw__const(b, TPU_F64, step.f)),
               tpulw__const(b, TPU_F64, start.f));
  }
  b->out_rule = LW_OUT_ANY;
  return tpulw__result_as(b, r, dt);
}

static int eye_fn(tpulw__b *b) {
  const tpulw_tensor *out = tpulw__tensor_arg(b, "out");
  if (!out) return tpu_error(TPU_E_UNSUPPORTED, "eye: no out tensor");
  int64_t n = tpulw__int(b, "n", -1), m = tpulw__none(b, "m") ? n : tpulw__int(b, "m", -1);
  if (n < 0) return tpu_error(TPU_E_INVALID, "n must be greater or equal to 0, got %lld", (long long)n);
  if (m < 0) return tpu_error(TPU_E_INVALID, "m must be greater or equal to 0, got %lld", (long long)m);
  int64_t sz[2] = {n, m};
  tpuir_val r = tpulw__bin(b, TPUIR_EQ, tpuir_iota(b->g, TPU_I64, 2, sz, 0), tpuir_iota(b->g, TPU_I64, 2, sz, 1));
  b->out_rule = LW_OUT_ANY;
  return tpulw__result_as(b, r, out->view.dtype);
}

static int linspace_fn(tpulw__b *b) {
  const tpulw_tensor *out = tpulw__tensor_arg(b, "out");
  tpulw__scalar start, end;
  if (!out || !tpulw__scalar_arg(b, "start", &start) || !tpulw__scalar_arg(b, "end", &end))
    return tpu_error(TPU_E_UNSUPPORTED, "linspace: needs scalar start/end and out");
  int64_t steps = tpulw__int(b, "steps", -1);
  if (steps < 0) return tpu_error(TPU_E_INVALID, "number of steps must be non-negative");
  int dt = out->view.dtype;
  if (dt == TPU_BOOL) return unsupported_dtype("linspace_cpu", dt);
  int cdt = tpu_dtype_is_float(dt) ? tpulw__opmath(dt) : TPU_F64;
  int64_t sz[1] = {steps};
  tpuir_val r;
  if (steps == 1) {
    r = tpulw__full(b, cdt, 1, sz, start.f);
  } else {
    double stepv = (end.f - start.f) / (double)(steps - 1);
    tpuir_val i = tpuir_iota(b->g, cdt, 1, sz, 0);
    tpuir_val st = tpulw__const(b, cdt, stepv);
    tpuir_val lo = tpulw__bin(b, TPUIR_ADD, tpulw__const(b, cdt, start.f), tpulw__bin(b, TPUIR_MUL, st, i));
    tpuir_val rev = tpulw__bin(b, TPUIR_SUB, tpulw__const(b, cdt, (double)(steps - 1)), i);
    tpuir_val hi = tpulw__bin(b, TPUIR_SUB, tpulw__const(b, cdt, end.f), tpulw__bin(b, TPUIR_MUL, st, rev));
    tpuir_val first = tpulw__bin(b, TPUIR_LT, i, tpulw__const(b, cdt, (double)(steps / 2)));
    r = tpulw__sel(b, first, lo, hi);
  }
  b->out_rule = LW_OUT_ANY;
  return tpulw__result_as(b, r, dt);
}

/* ---- the rows ------------------------------------------------------------ */

/* the overloads of one op; the optional last argument is the rows' flags */
#define BIN3(n, code, ...)                                                     \
  {n ".Tensor", binary_fn, code, __VA_ARGS__}, {n "_.Tensor", binary_fn, code, __VA_ARGS__}, \
      {n ".out", binary_fn, code, __VA_ARGS__}, {n ".Scalar", binary_fn, code, __VA_ARGS__}, \
      {n "_.Scalar", binary_fn, code, __VA_ARGS__}, {n ".Scalar_out", binary_fn, code, __VA_ARGS__}
#define CMP(n, code, ...)                                                      \
  {n ".Tensor", binary_fn, code, __VA_ARGS__}, {n "_.Tensor", binary_fn, code, __VA_ARGS__}, \
      {n ".Tensor_out", binary_fn, code, __VA_ARGS__}, {n ".Scalar", binary_fn, code, __VA_ARGS__}, \
      {n "_.Scalar", binary_fn, code, __VA_ARGS__}, {n ".Scalar_out", binary_fn, code, __VA_ARGS__}
#define FUNC3(n, fn, code, ...)                                                \
  {n, fn, code, __VA_ARGS__}, {n "_", fn, code, __VA_ARGS__}, {n ".out", fn, code, __VA_ARGS__}
#define UF(n, code, ...) FUNC3(n, unary_float_fn, code, __VA_ARGS__)
#define US(n, code, ...) FUNC3(n, unary_same_fn, code, __VA_ARGS__)

const tpulw__row tpulw__rows_pointwise[] = {
    BIN3("add", P_ADD, LW_COMPLEX_OK),
    BIN3("sub", P_SUB, LW_COMPLEX_OK),
    {"rsub.Tensor", binary_fn, P_RSUB, LW_COMPLEX_OK}, {"rsub.Scalar", binary_fn, P_RSUB, LW_COMPLEX_OK},
    {"rsub.Tensor_out", binary_fn, P_RSUB, LW_COMPLEX_OK}, {"rsub.Scalar_out", binary_fn, P_RSUB, LW_COMPLEX_OK},
    BIN3("mul", P_MUL, LW_COMPLEX_OK),
    BIN3("div", P_DIV, LW_COMPLEX_OK),
    {"div.Tensor_mode", binary_fn, P_DIV_MODE}, {"div_.Tensor_mode", binary_fn, P_DIV_MODE},
    {"div.out_mode", binary_fn, P_DIV_MODE}, {"div.Scalar_mode", binary_fn, P_DIV_MODE},
    {"div_.Scalar_mode", binary_fn, P_DIV_MODE}, {"div.Scalar_mode_out", binary_fn, P_DIV_MODE},
    {"floor_divide", binary_fn, P_FLOOR_DIVIDE}, {"floor_divide_.Tensor", binary_fn, P_FLOOR_DIVIDE},
    {"floor_divide.out", binary_fn, P_FLOOR_DIVIDE}, {"floor_divide.Scalar", binary_fn, P_FLOOR_DIVIDE},
    {"floor_divide_.Scalar", binary_fn, P_FLOOR_DIVIDE}, {"floor_divide.Scalar_out", binary_fn, P_FLOOR_DIVIDE},
    CMP("remainder", P_REMAINDER),
    {"remainder.Scalar_Tensor", binary_fn, P_REMAINDER},
    {"remainder.Scalar_Tensor_out", binary_fn, P_REMAINDER},
    CMP("fmod", P_FMOD),
    {"pow.Tensor_Tensor", binary_fn, P_POW}, {"pow_.Tensor", binary_fn, P_POW},
    {"pow.Tensor_Tensor_out", binary_fn, P_POW}, {"pow.Tensor_Scalar", binary_fn, P_POW},
    {"pow_.Scalar", binary_fn, P_POW}, {"pow.Tensor_Scalar_out", binary_fn, P_POW},
    {"pow.Scalar", binary_fn, P_POW}, {"pow.Scalar_out", binary_fn, P_POW},
    {"maximum", binary_fn, P_MAXIMUM}, {"maximum.out", binary_fn, P_MAXIMUM},
    {"minimum", binary_fn, P_MINIMUM}, {"minimum.out", binary_fn, P_MINIMUM},
    {"max.other", binary_fn, P_MAXIMUM}, {"max.out", binary_fn, P_MAXIMUM},
    {"min.other", binary_fn, P_MINIMUM}, {"min.out", binary_fn, P_MINIMUM},
    FUNC3("atan2", binary_fn, P_ATAN2),
    CMP("bitwise_and", P_BITAND), CMP("bitwise_or", P_BITOR), CMP("bitwise_xor", P_BITXOR),
    {"bitwise_and.Scalar_Tensor", binary_fn, P_BITAND},
    {"bitwise_or.Scalar_Tensor", binary_fn, P_BITOR},
    {"bitwise_xor.Scalar_Tensor", binary_fn, P_BITXOR},
    {"__and__.Tensor", binary_fn, P_BITAND}, {"__or__.Tensor", binary_fn, P_BITOR},
    {"__xor__.Tensor", binary_fn, P_BITXOR},
    FUNC3("logical_and", binary_fn, P_LOGAND),
    FUNC3("logical_or", binary_fn, P_LOGOR),
    FUNC3("logical_xor", binary_fn, P_LOGXOR),
    CMP("eq", P_EQ, LW_COMPLEX_OK), CMP("ne", P_NE, LW_COMPLEX_OK), CMP("lt", P_LT),
    CMP("le", P_LE), CMP("gt", P_GT), CMP("ge", P_GE),
    /* unary, float result */
    UF("exp", TPUIR_EXP, LW_COMPLEX_OK), UF("exp2", P_EXP2), UF("expm1", TPUIR_EXPM1),
    UF("log", TPUIR_LOG, LW_COMPLEX_OK), UF("log2", P_LOG2), UF("log10", P_LOG10),
    UF("log1p", TPUIR_LOG1P), UF("sqrt", TPUIR_SQRT, LW_COMPLEX_OK), UF("rsqrt", TPUIR_RSQRT, LW_COMPLEX_OK),
    UF("reciprocal", P_RECIP, LW_COMPLEX_OK), UF("sin", TPUIR_SIN, LW_COMPLEX_OK), UF("cos", TPUIR_COS, LW_COMPLEX_OK),
    UF("tan", TPUIR_TAN), UF("tanh", TPUIR_TANH, LW_COMPLEX_OK), UF("sigmoid", P_SIGMOID, LW_COMPLEX_OK),
    UF("erf", TPUIR_ERF), UF("erfc", P_ERFC), UF("erfinv", TPUIR_ERFINV),
    UF("asin", TPUIR_ASIN), UF("acos", TPUIR_ACOS), UF("atan", TPUIR_ATAN),
    UF("sinh", TPUIR_SINH), UF("cosh", TPUIR_COSH), UF("asinh", TPUIR_ASINH),
    UF("acosh", TPUIR_ACOSH), UF("atanh", TPUIR_ATANH), UF("lgamma", TPUIR_LGAMMA),
    UF("digamma", TPUIR_DIGAMMA),
    /* unary, same dtype */
    US("neg", P_NEG, LW_COMPLEX_OK), US("abs", P_ABS), US("sign", P_SIGN), US("sgn", P_SIGN),
    US("floor", P_FLOOR), US("ceil", P_CEIL), US("round", P_ROUND),
    US("trunc", P_TRUNC), US("frac", P_FRAC), US("bitwise_not", P_BITNOT),
    US("logical_not", P_LOGNOT), US("relu", P_RELU),
    {"round.decimals", unary_same_fn, P_ROUND}, {"round_.decimals", unary_same_fn, P_ROUND},
    {"round.decimals_out", unary_same_fn, P_ROUND},
    /* predicates */
    {"isnan", predicate_fn, P_ISNAN}, {"isnan.out", predicate_fn, P_ISNAN},
    {"isinf", predicate_fn, P_ISINF}, {"isinf.out", predicate_fn, P_ISINF},
    {"isfinite", predicate_fn, P_ISFINITE},
    {"isposinf", predicate_fn, P_ISPOSINF}, {"isposinf.out", predicate_fn, P_ISPOSINF},
    {"isneginf", predicate_fn, P_ISNEGINF}, {"isneginf.out", predicate_fn, P_ISNEGINF},
    {"signbit", predicate_fn, P_SIGNBIT}, {"signbit.out", predicate_fn, P_SIGNBIT},
    /* clamps */
    FUNC3("clamp", clamp_fn, P_CLAMP),
    {"clamp.Tensor", clamp_fn, P_CLAMP}, {"clamp_.Tensor", clamp_fn, P_CLAMP},
    {"clamp.Tensor_out", clamp_fn, P_CLAMP},
    FUNC3("clamp_min", clamp_fn, P_CLAMP_MIN),
    {"clamp_min.Tensor", clamp_fn, P_CLAMP_MIN}, {"clamp_min_.Tensor", clamp_fn, P_CLAMP_MIN},
    {"clamp_min.Tensor_out", clamp_fn, P_CLAMP_MIN},
    FUNC3("clamp_max", clamp_fn, P_CLAMP_MAX),
    {"clamp_max.Tensor", clamp_fn, P_CLAMP_MAX}, {"clamp_max_.Tensor", clamp_fn, P_CLAMP_MAX},
    {"clamp_max.Tensor_out", clamp_fn, P_CLAMP_MAX},
    FUNC3("hardtanh", clamp_fn, P_HARDTANH),
    /* selection / fills */
    {"where.self", where_fn, 0, LW_COMPLEX_OK}, {"where.self_out", where_fn, 0, LW_COMPLEX_OK},
    {"masked_fill.Scalar", masked_fill_fn, 0, LW_COMPLEX_OK}, {"masked_fill_.Scalar", masked_fill_fn, 0, LW_COMPLEX_OK},
    {"masked_fill.Scalar_out", masked_fill_fn, 0, LW_COMPLEX_OK},
    {"masked_fill.Tensor", masked_fill_fn, 0, LW_COMPLEX_OK}, {"masked_fill_.Tensor", masked_fill_fn, 0, LW_COMPLEX_OK},
    {"masked_fill.Tensor_out", masked_fill_fn, 0, LW_COMPLEX_OK},
    {"fill_.Scalar", fill_fn, 0, LW_COMPLEX_OK}, {"fill_.Tensor", fill_fn, 0, LW_COMPLEX_OK}, {"zero_", fill_fn, 0, LW_COMPLEX_OK},
    FUNC3("nan_to_num", nan_to_num_fn, 0),
    {"lerp.Scalar", lerp_fn, 0}, {"lerp_.Scalar", lerp_fn, 0}, {"lerp.Scalar_out", lerp_fn, 0},
    {"lerp.Tensor", lerp_fn, 0}, {"lerp_.Tensor", lerp_fn, 0}, {"lerp.Tensor_out", lerp_fn, 0},
    FUNC3("addcmul", addc_fn, 0), FUNC3("addcdiv", addc_fn, 0),
    /* activations */
    FUNC3("gelu", activation_fn, P_GELU), FUNC3("silu", activation_fn, P_SILU),
    FUNC3("mish", activation_fn, P_MISH),
    FUNC3("hardsigmoid", activation_fn, P_HARDSIGMOID),
    FUNC3("hardswish", activation_fn, P_HARDSWISH),
    FUNC3("leaky_relu", activation_fn, P_LEAKY_RELU),
    FUNC3("elu", activation_fn, P_ELU),
    {"softplus", activation_fn, P_SOFTPLUS}, {"softplus.out", activation_fn, P_SOFTPLUS},
    FUNC3("threshold", threshold_fn, 0),
    /* backward */
    {"threshold_backward", backward_fn, P_THRESHOLD_BW},
    {"threshold_backward.grad_input", backward_fn, P_THRESHOLD_BW},
    {"gelu_backward", backward_fn, P_GELU_BW},
    {"gelu_backward.grad_input", backward_fn, P_GELU_BW},
    {"silu_backward", backward_fn, P_SILU_BW},
    {"silu_backward.grad_input", backward_fn, P_SILU_BW},
    {"tanh_backward", backward_fn, P_TANH_BW},
    {"tanh_backward.grad_input", backward_fn, P_TANH_BW},
    {"sigmoid_backward", backward_fn, P_SIGMOID_BW},
    {"sigmoid_backward.grad_input", backward_fn, P_SIGMOID_BW},
    {"leaky_relu_backward", backward_fn, P_LEAKY_RELU_BW},
    {"leaky_relu_backward.grad_input", backward_fn, P_LEAKY_RELU_BW},
    {"hardtanh_backward", backward_fn, P_HARDTANH_BW},
    {"hardtanh_backward.grad_input", backward_fn, P_HARDTANH_BW},
    {"elu_backward", backward_fn, P_ELU_BW},
    {"elu_backward.grad_input", backward_fn, P_ELU_BW},
    {"softplus_backward", backward_fn, P_SOFTPLUS_BW},
    {"softplus_backward.grad_input", backward_fn, P_SOFTPLUS_BW},
    {"hardsigmoid_backward", backward_fn, P_HARDSIGMOID_BW},
    {"hardsigmoid_backward.grad_input", backward_fn, P_HARDSIGMOID_BW},
    {"hardswish_backward", backward_fn, P_HARDSWISH_BW},
    {"hardswish_backward.out", backward_fn, P_HARDSWISH_BW},
    {"mish_backward", backward_fn, P_MISH_BW},
    {"log_sigmoid_forward", activation2_fn, P_LOGSIGMOID},
    {"log_sigmoid_forward.output", activation2_fn, P_LOGSIGMOID},
    {"log_sigmoid_backward", activation2_fn, P_LOGSIGMOID_BW},
    {"log_sigmoid_backward.grad_input", activation2_fn, P_LOGSIGMOID_BW},
    {"hardshrink", activation2_fn, P_HARDSHRINK}, {"hardshrink.out", activation2_fn, P_HARDSHRINK},
    {"softshrink", activation2_fn, P_SOFTSHRINK}, {"softshrink.out", activation2_fn, P_SOFTSHRINK},
    {"hardshrink_backward", activation2_fn, P_SHRINK_BW},
    {"hardshrink_backward.grad_input", activation2_fn, P_SHRINK_BW},
    FUNC3("logit", activation2_fn, P_LOGIT),
    {"logit_backward", activation2_fn, P_LOGIT_BW},
    {"logit_backward.grad_input", activation2_fn, P_LOGIT_BW},
    {"softshrink_backward", activation2_fn, P_SHRINK_BW},
    {"softshrink_backward.grad_input", activation2_fn, P_SHRINK_BW},
    {"_prelu_kernel", activation2_fn, P_PRELU},
    {"_prelu_kernel_backward", activation2_fn, P_PRELU_BW},
    {"glu", activation2_fn, P_GLU}, {"glu.out", activation2_fn, P_GLU},
    {"glu_backward", activation2_fn, P_GLU_BW}, {"glu_backward.grad_input", activation2_fn, P_GLU_BW},
    /* more binary float ops */
    {"xlogy.Tensor", binary_fn, P_XLOGY}, {"xlogy_.Tensor", binary_fn, P_XLOGY},
    {"xlogy.OutTensor", binary_fn, P_XLOGY},
    {"copysign.Tensor", binary_fn, P_COPYSIGN}, {"copysign_.Tensor", binary_fn, P_COPYSIGN},
    {"copysign.out", binary_fn, P_COPYSIGN},
    FUNC3("hypot", binary_fn, P_HYPOT),
    {"logaddexp", binary_fn, P_LOGADDEXP}, {"logaddexp.out", binary_fn, P_LOGADDEXP},
    {"logaddexp2", binary_fn, P_LOGADDEXP2}, {"logaddexp2.out", binary_fn, P_LOGADDEXP2},
    FUNC3("heaviside", binary_fn, P_HEAVISIDE),
    {"__lshift__.Tensor", binary_fn, P_SHL}, {"__lshift__.Scalar", binary_fn, P_SHL},
    {"__ilshift__.Tensor", binary_fn, P_SHL}, {"__ilshift__.Scalar", binary_fn, P_SHL},
    {"__rshift__.Tensor", binary_fn, P_SHR}, {"__rshift__.Scalar", binary_fn, P_SHR},
    {"__irshift__.Tensor", binary_fn, P_SHR}, {"__irshift__.Scalar", binary_fn, P_SHR},
    {"bitwise_left_shift.Tensor", binary_fn, P_SHL}, {"bitwise_left_shift_.Tensor", binary_fn, P_SHL},
    {"bitwise_left_shift.Tensor_out", binary_fn, P_SHL},
    {"bitwise_right_shift.Tensor", binary_fn, P_SHR}, {"bitwise_right_shift_.Tensor", binary_fn, P_SHR},
    {"bitwise_right_shift.Tensor_out", binary_fn, P_SHR},
    {"fmax", binary_fn, P_FMAX}, {"fmax.out", binary_fn, P_FMAX},
    {"fmin", binary_fn, P_FMIN}, {"fmin.out", binary_fn, P_FMIN},
    /* factories (out= forms the composites call) */
    {"arange.start_out", arange_fn, 0}, {"arange.out", arange_fn, 0},
    {"linspace.out", linspace_fn, 0},
    {"eye.out", eye_fn, 0}, {"eye.m_out", eye_fn, 0},
};
const int tpulw__nrows_pointwise = sizeof tpulw__rows_pointwise / sizeof tpulw__rows_pointwise[0];

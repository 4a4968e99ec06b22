/* lower/special.c - special functions (torch.special.*, i0, sinc, igamma,
 * nextafter, frexp, gcd/lcm, the orthogonal polynomials) lowered to the
 * special-function IR ops (tpuir_special_unary / tpuir_special_binary).
 *
 * Type promotion follows PyTorch CPU: float-result ops take integer and
 * bool inputs as the default float dtype; f16/bf16 compute in f32 and
 * round once (only for the ops whose CPU kernel accepts them: the others
 * report "not implemented" like CPU); igamma/igammac/nextafter need float
 * inputs and gcd/lcm integer inputs. The Scalar overloads of the binary
 * ops (x_scalar, n_scalar, self_scalar, other_scalar) are
 * CompositeExplicitAutograd in PyTorch: they wrap the number into a 0-dim
 * tensor and land in the rows below.
 */
#include <stdio.h>
#include <string.h>

#include "lower/internal.h"

/* row parameter: IR op | flags */
enum {
  SF_OP = 0xffff,
  SF_HALF = 1 << 16,  /* f16 / bf16 supported (computed in f32) */
  SF_FLOAT = 1 << 17, /* operands must be float already (no int promotion) */
  SF_INT = 1 << 18,   /* integer operands (gcd / lcm) */
  SF_NATIVE = 1 << 19 /* compute in the dtype itself (nextafter on f16) */
};

/* PyTorch's name of the CPU kernel in "not implemented" messages. */
static const char *kernel_name(const tpulw__b *b) {
  static char buf[96];
  const char *n = b->base;
  if (!strncmp(n, "special_", 8)) n += 8;
  size_t k = strlen(n);
  if (k && n[k - 1] == '_') k--;
  snprintf(buf, sizeof buf, "%.*s_cpu", (int)k, n);
  return buf;
}

static int not_implemented(const tpulw__b *b, int dt) {
  return tpu_error(TPU_E_UNSUPPORTED, "\"%s\" not implemented for '%s'",
                   kernel_name(b), tpulw__torch_name(dt));
}

/* float-result unary special function */
static int special_unary_fn(tpulw__b *b) {
  int op = b->op & SF_OP;
  tpulw__opnd s = tpulw__opnd_arg(b, "self");
  if (s.kind == LW_OPND_NONE) s = tpulw__opnd_arg(b, "x"); /* airy_ai, ... */
  if (s.kind != LW_OPND_TENSOR)
    return tpu_error(TPU_E_UNSUPPORTED, "%s: expected a tensor operand", b->base);
  if (tpu_dtype_is_complex(s.t->view.dtype)) return not_implemented(b, s.t->view.dtype);
  int dt = tpulw__float_or_default(s.t->view.dtype);
  if ((dt == TPU_F16 || dt == TPU_BF16) && !(b->op & SF_HALF))
    return not_implemented(b, dt);
  int cdt = tpulw__opmath(dt);
  tpuir_val x = tpulw__opnd_val(b, &s, cdt);
  LW_TRY(x);
  return tpulw__result_as(b, tpuir_special_unary(b->g, op, x), dt);
}

/* binary special function (x, n) / (self, other) */
static int special_binary_fn(tpulw__b *b) {
  int op = b->op & SF_OP;
  tpulw__opnd ops[2];
  ops[0] = tpulw__opnd_arg(b, "self");
  ops[1] = tpulw__opnd_arg(b, "other");
  if (ops[0].kind == LW_OPND_NONE) ops[0] = tpulw__opnd_arg(b, "x");
  if (ops[1].kind == LW_OPND_NONE) ops[1] = tpulw__opnd_arg(b, "n");
  if (ops[0].kind == LW_OPND_NONE || ops[1].kind == LW_OPND_NONE)
    return tpu_error(TPU_E_UNSUPPORTED, "%s: missing operand", b->base);
  int dt = tpulw__result_type(2, ops);
  if (tpu_dtype_is_complex(dt)) return not_implemented(b, dt);
  if (b->op & SF_INT) {
    if (!tpu_dtype_is_int(dt)) return not_implemented(b, dt);
  } else if (b->op & SF_FLOAT) {
    if (!tpu_dtype_is_float(dt)) return not_implemented(b, dt);
  } else {
    dt = tpulw__float_or_default(dt);
  }
  if ((dt == TPU_F16 || dt == TPU_BF16) && !(b->op & SF_HALF))
    return not_implemented(b, dt);
  int cdt = (b->op & (SF_INT | SF_NATIVE)) ? dt : tpulw__opmath(dt);
  tpuir_val v[2] = {tpulw__opnd_val(b, &ops[0], cdt), tpulw__opnd_val(b, &ops[1], cdt)};
  LW_TRY(v[0]);
  LW_TRY(v[1]);
  int rc = tpulw__bcast_all(b, 2, v);
  if (rc < 0) return rc;
  return tpulw__result_as(b, tpuir_special_binary(b->g, op, v[0], v[1]), dt);
}

/* frexp.Tensor_out(self, *, mantissa, exponent) */
static int frexp_fn(tpulw__b *b) {
  const tpulw_tensor *self = tpulw__tensor_arg(b, "self");
  if (!self) return tpu_error(TPU_E_UNSUPPORTED, "frexp: missing operand");
  int dt = self->view.dtype;
  if (!tpu_dtype_is_float(dt))
    return tpu_error(TPU_E_INVALID,
                     "torch.frexp() only supports floating-point dtypes");
  const tpulw_tensor *m = tpulw__tensor_arg(b, "mantissa");
  const tpulw_tensor *e = tpulw__tensor_arg(b, "exponent");
  if (m && m->view.dtype != dt)
    return tpu_error(TPU_E_INVALID,
                     "torch.frexp() expects mantissa to have dtype %s but got %s",
                     tpulw__c_name(dt), tpulw__c_name(m->view.dtype));
  if (e && e->view.dtype != TPU_I32)
    return tpu_error(TPU_E_INVALID,
                     "torch.frexp() expects exponent to have int dtype but got %s",
                     tpulw__c_name(e->view.dtype));
  b->out_rule = LW_OUT_SAME;
  tpuir_val x = tpulw__tensor(b, self);
  LW_TRY(x);
  int rc = tpulw__result(b, tpuir_special_unary(b->g, TPUIR_FREXP_MANT, x));
  if (rc < 0) return rc;
  return tpulw__result(b, tpuir_special_unary(b->g, TPUIR_FREXP_EXP, x));
}

#define SU(n, op) {n, special_unary_fn, op}, {n ".out", special_unary_fn, op}
#define SU3(n, op) SU(n, op), {n "_", special_unary_fn, op}
#define SB(n, op) {n, special_binary_fn, op}, {n ".out", special_binary_fn, op}
#define SB3(n, op) SB(n, op), {n "_", special_binary_fn, op}

const tpulw__row tpulw__rows_special[] = {
    SU("special_bessel_j0", TPUIR_BESSEL_J0),
    SU("special_bessel_j1", TPUIR_BESSEL_J1),
    SU("special_bessel_y0", TPUIR_BESSEL_Y0),
    SU("special_bessel_y1", TPUIR_BESSEL_Y1),
    SU("special_modified_bessel_i0", TPUIR_MBESSEL_I0),
    SU("special_modified_bessel_i1", TPUIR_MBESSEL_I1),
    SU("special_modified_bessel_k0", TPUIR_MBESSEL_K0),
    SU("special_modified_bessel_k1", TPUIR_MBESSEL_K1),
    SU("special_scaled_modified_bessel_k0", TPUIR_SMBESSEL_K0),
    SU("special_scaled_modified_bessel_k1", TPUIR_SMBESSEL_K1),
    SU("special_airy_ai", TPUIR_AIRY_AI),
    SU("special_spherical_bessel_j0", TPUIR_SPH_BESSEL_J0),
    SU("special_entr", TPUIR_ENTR | SF_HALF),
    SU("special_erfcx", TPUIR_ERFCX),
    SU3("i0", TPUIR_I0 | SF_HALF),
    SU("special_i0e", TPUIR_I0E | SF_HALF),
    SU("special_i1", TPUIR_I1 | SF_HALF),
    SU("special_i1e", TPUIR_I1E | SF_HALF),
    SU("special_log_ndtr", TPUIR_LOG_NDTR),
    SU("special_ndtri", TPUIR_NDTRI),
    SU3("sinc", TPUIR_SINC | SF_HALF),
    {"frexp.Tensor_out", frexp_fn, 0},
    SB("special_zeta", TPUIR_ZETA),
    SB("special_xlog1py", TPUIR_XLOG1PY | SF_HALF),
    SB3("igamma", TPUIR_IGAMMA | SF_HALF | SF_FLOAT),
    SB3("igammac", TPUIR_IGAMMAC | SF_HALF | SF_FLOAT),
    SB3("nextafter", TPUIR_NEXTAFTER | SF_HALF | SF_FLOAT | SF_NATIVE),
    SB("special_chebyshev_polynomial_t", TPUIR_CHEB_T),
    SB("special_chebyshev_polynomial_u", TPUIR_CHEB_U),
    SB("special_chebyshev_polynomial_v", TPUIR_CHEB_V),
    SB("special_chebyshev_polynomial_w", TPUIR_CHEB_W),
    SB("special_shifted_chebyshev_polynomial_t", TPUIR_SCHEB_T),
    SB("special_shifted_chebyshev_polynomial_u", TPUIR_SCHEB_U),
    SB("special_shifted_chebyshev_polynomial_v", TPUIR_SCHEB_V),
    SB("special_shifted_chebyshev_polynomial_w", TPUIR_SCHEB_W),
    SB("special_hermite_polynomial_h", TPUIR_HERMITE_H),
    SB("special_hermite_polynomial_he", TPUIR_HERMITE_HE),
    SB("special_laguerre_polynomial_l", TPUIR_LAGUERRE_L),
    SB("special_legendre_polynomial_p", TPUIR_LEGENDRE_P),
    SB3("gcd", TPUIR_GCD | SF_INT),
    SB3("lcm", TPUIR_LCM | SF_INT),
};
const int tpulw__nrows_special = (int)(sizeof tpulw__rows_special / sizeof tpulw__rows_special[0]);

/* exec/vtpu/special.c - vTPU kernels of the special-function elementwise ops
 * (TPUIR_SPECIAL_FIRST .. TPUIR_SPECIAL_LAST): Bessel / Airy / error-
 * function family, incomplete gamma, Hurwitz zeta, orthogonal polynomials,
 * frexp, nextafter, gcd / lcm.
 *
 * Called by the fused elementwise engine (tpux__ew_apply) on class
 * buffers: f16 / bf16 / f32 operands arrive as float (computed in float
 * and rounded once at the store, like PyTorch's float opmath), f64 as
 * double, integers as int64. The scalar functions for float and double
 * are one template (exec/vtpu/special_tmpl.h) instantiated twice.
 *
 * PyTorch's CPU kernels are built per ISA (AVX2 / AVX512 with FMA) and with
 * GCC's default floating-point contraction, so a * b + c becomes an FMA
 * there. To round the same way, this file is compiled with fp-contract=fast
 * and the two kernel entry points are cloned for x86-64-v4 / v3 (FMA) and
 * the baseline, with every special function inlined into each clone
 * (flatten), picked at run time like the rest of the elementwise engine.
 */
#pragma GCC optimize("fp-contract=fast")
#include <float.h>
#include <stdint.h>
#include <string.h>
#include <tgmath.h>

#include "exec/vtpu/internal.h"
#include "exec/vtpu/special_coef.h"

static const double k_erfcx_y100[100][7] = {SPC_ERFCX_Y100};

#define T float
#define SP(name) name##_f
#include "exec/vtpu/special_tmpl.h"
#undef SP
#undef T

#define T double
#define SP(name) name##_d
#include "exec/vtpu/special_tmpl.h"
#undef SP
#undef T

/* PyTorch's static_cast<int64_t>(n) of a polynomial degree, with the x86
 * result (INT64_MIN) for NaN and out-of-range values. */
static int64_t degree(double v) {
  if (!(v >= -9223372036854775808.0 && v < 9223372036854775808.0)) return INT64_MIN;
  return (int64_t)v;
}

/* nextafter on a 16-bit float encoding (musl's algorithm, as c10 does for
 * Half / BFloat16). bf: 1 for bfloat16, 0 for float16. */
static uint16_t f16_bits(float v, int bf) {
  if (bf) return xk_f32_to_bf16(v);
  _Float16 h = (_Float16)v;
  uint16_t u;
  memcpy(&u, &h, 2);
  return u;
}
static float f16_val(uint16_t u, int bf) {
  if (bf) return xk_bf16_to_f32(u);
  _Float16 h;
  memcpy(&h, &u, 2);
  return (float)h;
}
static float nextafter16(float from, float to, int bf) {
  if (from != from || to != to) return from + to;
  uint16_t uf = f16_bits(from, bf), ut = f16_bits(to, bf);
  if (uf == ut) return from;
  const uint16_t sign = 0x8000;
  uint16_t af = uf & (uint16_t)~sign, at = ut & (uint16_t)~sign;
  if (af == 0) {
    if (at == 0) return to;
    return f16_val((uint16_t)((ut & sign) | 1), bf);
  }
  if (af > at || ((uf ^ ut) & sign)) uf--;
  else uf++;
  return f16_val(uf, bf);
}

/* |v| with two's-complement wrap-around in dtype dt (std::abs on T). */
static int64_t iabs_dt(int dt, int64_t v) {
  if (dt == TPU_U8) return v;
  if (v >= 0) return v;
  return xk_wrap(dt, (int64_t)(0ull - (uint64_t)v));
}
static int64_t irem(int64_t a, int64_t b) { return b == -1 ? 0 : a % b; }

static int64_t gcd_dt(int dt, int64_t a, int64_t b) {
  a = iabs_dt(dt, a);
  b = iabs_dt(dt, b);
  while (a != 0) {
    int64_t c = a;
    a = irem(b, a);
    b = c;
  }
  return b;
}

static int64_t lcm_dt(int dt, int64_t a, int64_t b) {
  int64_t g = gcd_dt(dt, a, b);
  if (g == 0) return 0;
  int64_t q = g == -1 ? (int64_t)(0ull - (uint64_t)a) : a / g;
  int64_t m = (int64_t)((uint64_t)q * (uint64_t)b);
  if (dt == TPU_I32 || dt == TPU_I64) /* computed in T (int / int64) */
    return iabs_dt(dt, xk_wrap(dt, m));
  return m < 0 ? -m : m; /* promoted to int; the store wraps */
}

#define UN_F(OP, FN)                                                         \
  case OP:                                                                   \
    for (int64_t i = 0; i < n; i++) r[i] = FN(a[i]);                         \
    break;
#define BIN_F(OP, FN)                                                        \
  case OP:                                                                   \
    for (int64_t i = 0; i < n; i++) r[i] = FN(a[i], b[i]);                   \
    break;
#define POLY_F(OP, FN)                                                       \
  case OP:                                                                   \
    for (int64_t i = 0; i < n; i++) r[i] = FN(a[i], degree(b[i]));           \
    break;
#define SCHEB_F(OP, KIND, X)                                                 \
  case OP:                                                                   \
    for (int64_t i = 0; i < n; i++) r[i] = scheb##X(KIND, a[i], degree(b[i])); \
    break;

/* One body for both float classes: TT = float/double, X = _f/_d. */
#define SPECIAL_FLOAT_BODY(TT, X)                                            \
  const TT *a = va, *b = vb;                                                 \
  TT *r = vr;                                                                \
  switch (op) {                                                              \
  UN_F(TPUIR_BESSEL_J0, bessel_j0##X)                                        \
  UN_F(TPUIR_BESSEL_J1, bessel_j1##X)                                        \
  UN_F(TPUIR_BESSEL_Y0, bessel_y0##X)                                        \
  UN_F(TPUIR_BESSEL_Y1, bessel_y1##X)                                        \
  UN_F(TPUIR_MBESSEL_I0, mbessel_i0##X)                                      \
  UN_F(TPUIR_MBESSEL_I1, mbessel_i1##X)                                      \
  UN_F(TPUIR_MBESSEL_K0, mbessel_k0##X)                                      \
  UN_F(TPUIR_MBESSEL_K1, mbessel_k1##X)                                      \
  UN_F(TPUIR_SMBESSEL_K0, smbessel_k0##X)                                    \
  UN_F(TPUIR_SMBESSEL_K1, smbessel_k1##X)                                    \
  UN_F(TPUIR_AIRY_AI, airy_ai##X)                                            \
  UN_F(TPUIR_SPH_BESSEL_J0, sph_bessel_j0##X)                                \
  UN_F(TPUIR_ENTR, entr##X)                                                  \
  UN_F(TPUIR_ERFCX, erfcx##X)                                                \
  UN_F(TPUIR_I0, i0##X)                                                      \
  UN_F(TPUIR_I0E, i0e##X)                                                    \
  UN_F(TPUIR_I1, i1##X)                                                      \
  UN_F(TPUIR_I1E, i1e##X)                                                    \
  UN_F(TPUIR_LOG_NDTR, log_ndtr##X)                                          \
  UN_F(TPUIR_NDTRI, ndtri##X)                                                \
  UN_F(TPUIR_SINC, sinc##X)                                                  \
  case TPUIR_FREXP_MANT:                                                     \
    for (int64_t i = 0; i < n; i++) {                                        \
      int e;                                                                 \
      r[i] = frexp(a[i], &e);                                                \
    }                                                                        \
    break;                                                                   \
  case TPUIR_FREXP_EXP: {                                                    \
    int64_t *ri = vr;                                                        \
    for (int64_t i = 0; i < n; i++) {                                        \
      int e = 0;                                                             \
      TT v = a[i];                                                           \
      (void)frexp(v, &e);                                                    \
      ri[i] = isfinite(v) ? e : 0;                                           \
    }                                                                        \
    break;                                                                   \
  }                                                                          \
  BIN_F(TPUIR_ZETA, zeta##X)                                                 \
  BIN_F(TPUIR_XLOG1PY, xlog1py##X)                                           \
  BIN_F(TPUIR_IGAMMA, igamma##X)                                             \
  BIN_F(TPUIR_IGAMMAC, igammac##X)                                           \
  POLY_F(TPUIR_CHEB_T, cheb_t##X)                                            \
  POLY_F(TPUIR_CHEB_U, cheb_u##X)                                            \
  POLY_F(TPUIR_CHEB_V, cheb_v##X)                                            \
  POLY_F(TPUIR_CHEB_W, cheb_w##X)                                            \
  SCHEB_F(TPUIR_SCHEB_T, 0, X)                                               \
  SCHEB_F(TPUIR_SCHEB_U, 1, X)                                               \
  SCHEB_F(TPUIR_SCHEB_V, 2, X)                                               \
  SCHEB_F(TPUIR_SCHEB_W, 3, X)                                               \
  POLY_F(TPUIR_HERMITE_H, hermite_h##X)                                      \
  POLY_F(TPUIR_HERMITE_HE, hermite_he##X)                                    \
  POLY_F(TPUIR_LAGUERRE_L, laguerre_l##X)                                    \
  POLY_F(TPUIR_LEGENDRE_P, legendre_p##X)                                    \
  default: return TPU_E_INTERNAL;                                            \
  }                                                                          \
  return TPU_OK;

#define SP_CLONES                                                            \
  __attribute__((flatten,                                                    \
                 target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))

SP_CLONES static int special_f32(int op, int in_dt, int64_t n, void *vr, const void *va,
                       const void *vb) {
  if (op == TPUIR_NEXTAFTER) {
    const float *a = va, *b = vb;
    float *r = vr;
    if (in_dt == TPU_F32)
      for (int64_t i = 0; i < n; i++) r[i] = nextafterf(a[i], b[i]);
    else
      for (int64_t i = 0; i < n; i++) r[i] = nextafter16(a[i], b[i], in_dt == TPU_BF16);
    return TPU_OK;
  }
  SPECIAL_FLOAT_BODY(float, _f)
}

SP_CLONES static int special_f64(int op, int64_t n, void *vr, const void *va,
                       const void *vb) {
  if (op == TPUIR_NEXTAFTER) {
    const double *a = va, *b = vb;
    double *r = vr;
    for (int64_t i = 0; i < n; i++) r[i] = nextafter(a[i], b[i]);
    return TPU_OK;
  }
  SPECIAL_FLOAT_BODY(double, _d)
}

/* Special-function kernel on class buffers (see exec/vtpu/internal.h). */
int tpux__special_apply(int op, int in_dt, int64_t n, void *r, const void *a,
                        const void *b) {
  switch (xk_cls(in_dt)) {
  case XK_F32: return special_f32(op, in_dt, n, r, a, b);
  case XK_F64: return special_f64(op, n, r, a, b);
  default: {
    const int64_t *x = a, *y = b;
    int64_t *o = r;
    if (op == TPUIR_GCD)
      for (int64_t i = 0; i < n; i++) o[i] = gcd_dt(in_dt, x[i], y[i]);
    else if (op == TPUIR_LCM)
      for (int64_t i = 0; i < n; i++) o[i] = lcm_dt(in_dt, x[i], y[i]);
    else
      return TPU_E_INTERNAL;
    return TPU_OK;
  }
  }
}

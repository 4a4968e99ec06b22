/* exec_vmath.c - AVX-512 float32 transcendental kernels for the elementwise
 * engine: exp, tanh, logistic and erf over whole tile buffers.
 *
 * The portable kernels in exec_elementwise.c are written branch-free so the
 * compiler vectorises them, but that evaluates every branch of a piecewise
 * formula under masks and divides with vdivps (~10 cycles a vector). Here
 * each function is one straight-line AVX-512 sequence: the exponential's
 * 2^n is applied with vscalefps (one rounding, correct in the denormal
 * range), reciprocals are vrcp14ps plus one Newton step (relative error
 * ~2^-28 before the final rounding). The formulas are those of the
 * portable kernels (Cephes polynomials and erf's fits). Measured over every
 * 251st float (C test exec_vmath_ulp): exp 1.22, tanh 1.33, logistic 2.73,
 * erf 2.43 ulp at most. NaN in gives NaN out; infinities and signed
 * zeros follow C99.
 *
 * Used when the CPU has AVX-512F; otherwise the caller keeps the portable
 * kernels. No state.
 */
#include <immintrin.h>

#include "exec_internal.h"

#define T512 __attribute__((target("avx512f")))

T512 static inline __m512 cf(float v) { return _mm512_set1_ps(v); }

/* exp(x): x = n ln2 + r (ln2 in two parts), degree-6 polynomial in r,
 * times 2^n. Clamping keeps n in range; vscalefps overflows to inf / goes
 * to 0 or denormals exactly like the scalar kernel's two-half scaling. */
T512 static inline __m512 v_exp(__m512 x) {
  __m512 xc = _mm512_max_ps(_mm512_min_ps(x, cf(89.0f)), cf(-104.0f));
  __m512 nf = _mm512_roundscale_ps(_mm512_mul_ps(xc, cf(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(nf, cf(0.693359375f), xc);
  r = _mm512_fnmadd_ps(nf, cf(-2.12194440e-4f), r);
  __m512 p = cf(1.9875691500E-4f);
  p = _mm512_fmadd_ps(p, r, cf(1.3981999507E-3f));
  p = _mm512_fmadd_ps(p, r, cf(8.3334519073E-3f));
  p = _mm512_fmadd_ps(p, r, cf(4.1665795894E-2f));
  p = _mm512_fmadd_ps(p, r, cf(1.6666665459E-1f));
  p = _mm512_fmadd_ps(p, r, cf(5.0000001201E-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, cf(1.0f)));
  __m512 res = _mm512_scalef_ps(p, nf);
  /* min/max drop NaN: put it back */
  return _mm512_mask_mov_ps(res, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
}

/* 1/d for finite d >= 1 (vrcp14ps + one Newton step). */
T512 static inline __m512 v_rcp(__m512 d) {
  __m512 y = _mm512_rcp14_ps(d);
  return _mm512_fmadd_ps(y, _mm512_fnmadd_ps(d, y, cf(1.0f)), y);
}

T512 static inline __m512 v_sign(__m512 x) {
  return _mm512_castsi512_ps(
      _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32((int)0x80000000u)));
}
T512 static inline __m512 v_or(__m512 a, __m512 b) {
  return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(a), _mm512_castps_si512(b)));
}

/* tanh: odd polynomial below 0.625, else 1 - 2 / (exp(2|x|) + 1); the sign
 * of x is applied last (tanh(-0) = -0). */
T512 static inline __m512 v_tanh(__m512 x) {
  __m512 ax = _mm512_abs_ps(x), z = _mm512_mul_ps(x, x);
  __m512 ps = _mm512_fmadd_ps(cf(-5.70498872745E-3f), z, cf(2.06390887954E-2f));
  ps = _mm512_fmadd_ps(ps, z, cf(-5.37397155531E-2f));
  ps = _mm512_fmadd_ps(ps, z, cf(1.33314422036E-1f));
  ps = _mm512_fmadd_ps(ps, z, cf(-3.33332819422E-1f));
  ps = _mm512_fmadd_ps(_mm512_mul_ps(ps, z), ax, ax);
  __m512 e = v_exp(_mm512_min_ps(_mm512_add_ps(ax, ax), cf(40.0f)));
  __m512 pl = _mm512_fnmadd_ps(cf(2.0f), v_rcp(_mm512_add_ps(e, cf(1.0f))), cf(1.0f));
  __mmask16 small = _mm512_cmp_ps_mask(ax, cf(0.625f), _CMP_LT_OQ);
  __m512 res = v_or(_mm512_mask_mov_ps(pl, small, ps), v_sign(x));
  return _mm512_mask_mov_ps(res, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
}

/* logistic: e = exp(-|x|); 1 / (1 + e) for x >= 0, e / (1 + e) below. */
T512 static inline __m512 v_logistic(__m512 x) {
  __m512 e = v_exp(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_abs_ps(x)));
  __m512 y = v_rcp(_mm512_add_ps(e, cf(1.0f)));
  __mmask16 neg = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
  return _mm512_mask_mul_ps(y, neg, e, y); /* NaN: exp(NaN) = NaN flows */
}

/* erf: |x| < 1: x * P7(x^2); else sign(x) * (1 - exp(-x^2) * Q8(1/|x|)),
 * 1 beyond 4 (the portable kernel's fits). */
T512 static inline __m512 v_erf(__m512 x) {
  __m512 ax = _mm512_abs_ps(x), z = _mm512_mul_ps(x, x);
  static const float P[8] = {-9.728414117e-06f, 1.128817663e-04f,  -8.487267968e-04f,
                             5.221261510e-03f,  -2.686551745e-02f, 1.128378411e-01f,
                             -3.761263859e-01f, 1.128379167e+00f};
  static const float Q[9] = {-7.995059136e-03f, 2.116690447e-02f,  3.977871942e-02f,
                             -2.612839504e-01f, 5.111928552e-01f,  -4.781195561e-01f,
                             4.377910644e-02f,  5.587775939e-01f,  2.869468911e-04f};
  __m512 p = cf(P[0]);
  for (int i = 1; i < 8; i++) p = _mm512_fmadd_ps(p, z, cf(P[i]));
  __m512 r1 = _mm512_mul_ps(x, p);
  __m512 t = v_rcp(_mm512_max_ps(ax, cf(1.0f)));
  __m512 q = cf(Q[0]);
  for (int i = 1; i < 9; i++) q = _mm512_fmadd_ps(q, t, cf(Q[i]));
  __m512 r2 = _mm512_fnmadd_ps(v_exp(_mm512_sub_ps(_mm512_setzero_ps(), z)), q, cf(1.0f));
  r2 = _mm512_mask_mov_ps(r2, _mm512_cmp_ps_mask(ax, cf(4.0f), _CMP_GT_OQ), cf(1.0f));
  r2 = v_or(r2, v_sign(x));
  __m512 res = _mm512_mask_mov_ps(r2, _mm512_cmp_ps_mask(ax, cf(1.0f), _CMP_LT_OQ), r1);
  return _mm512_mask_mov_ps(res, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
}

#define VLOOP(F)                                                              \
  do {                                                                        \
    int64_t i = 0;                                                            \
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(r + i, F(_mm512_loadu_ps(a + i))); \
    if (i < n) {                                                              \
      __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);                        \
      _mm512_mask_storeu_ps(r + i, m, F(_mm512_maskz_loadu_ps(m, a + i)));     \
    }                                                                         \
  } while (0)

T512 static int vmath_512(int op, int64_t n, float *r, const float *a) {
  switch (op) {
  case TPUIR_EXP: VLOOP(v_exp); return 1;
  case TPUIR_TANH: VLOOP(v_tanh); return 1;
  case TPUIR_LOGISTIC: VLOOP(v_logistic); return 1;
  case TPUIR_ERF: VLOOP(v_erf); return 1;
  default: return 0;
  }
}

/* See exec_internal.h. */
int tpux__vmath_f32(int op, int64_t n, float *r, const float *a) {
  if (op != TPUIR_EXP && op != TPUIR_TANH && op != TPUIR_LOGISTIC && op != TPUIR_ERF)
    return 0;
  if (!__builtin_cpu_supports("avx512f")) return 0;
  return vmath_512(op, n, r, a);
}

/* test_lower_complex.c - end-to-end tests of the complex and FFT lowerings
 * (lower/complex.c, lower/fft.c) and of the complex gate, against
 * references computed here (naive DFTs in double). */
#include <complex.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "test_lower_util.h"
#include "tpu_test.h"

#define ARGS(...) ((const tpulw_arg[]){__VA_ARGS__})
#define NARGS(...) ((int)(sizeof((tpulw_arg[]){__VA_ARGS__}) / sizeof(tpulw_arg)))
#define RUN(name, ov, ...) lt_run(name, ov, ARGS(__VA_ARGS__), NARGS(__VA_ARGS__))

typedef double complex dcx;

static dcx cv_get(const tpu_view *v, int64_t i) { /* contiguous c128 */
  const double *d = v->base;
  return CMPLX(d[2 * i], d[2 * i + 1]);
}
static void cv_set(const tpu_view *v, int64_t i, dcx z) {
  double *d = v->base;
  d[2 * i] = creal(z);
  d[2 * i + 1] = cimag(z);
}
static dcx w(int64_t jk, int64_t n, int sign) {
  double a = sign * 2.0 * M_PI * (double)(jk % n) / (double)n;
  return CMPLX(cos(a), sin(a));
}

TPU_TEST(lower_fft_c2c_on_dim0) {
  /* x [4, 3] c128, FFT along dim 0 (not the last dim), no normalization;
   * inverse along dims (1, 0) with norm by_n gives x back */
  int64_t sz[2] = {4, 3};
  tpu_view x = lt_new(TPU_C128, 2, sz);
  for (int64_t i = 0; i < 12; i++) cv_set(&x, i, CMPLX(sin(1.0 + i), cos(2.0 * i)));
  int64_t d0 = 0, d10[2] = {1, 0};
  lt_result r = RUN("_fft_c2c", "", lt_tensor("self", x), lt_ints("dim", &d0, 1),
                    lt_int("normalization", 0), lt_bool("forward", 1));
  CHECK_OK(r.rc);
  CHECK(r.info[0].dtype == TPU_C128);
  double err = 0;
  for (int k = 0; k < 4; k++)
    for (int c = 0; c < 3; c++) {
      dcx acc = 0;
      for (int j = 0; j < 4; j++) acc += cv_get(&x, j * 3 + c) * w((int64_t)j * k, 4, -1);
      double e = cabs(cv_get(&r.out[0], k * 3 + c) - acc);
      if (e > err) err = e;
    }
  CHECK(err < 1e-12);
  lt_result b = RUN("_fft_c2c", "", lt_tensor("self", r.out[0]), lt_ints("dim", d10, 2),
                    lt_int("normalization", 2), lt_bool("forward", 0));
  CHECK_OK(b.rc);
  /* the forward was only along dim 0: undo dim 1 separately by comparing to
   * the inverse of a 2-D transform: ifft2(fft_dim0(x)) = ifft_dim1(x) */
  for (int k = 0; k < 4 && err < 1e-12; k++)
    for (int c = 0; c < 3; c++) {
      dcx acc = 0;
      for (int j = 0; j < 3; j++) acc += cv_get(&x, k * 3 + j) * w((int64_t)j * c, 3, 1);
      double e = cabs(cv_get(&b.out[0], k * 3 + c) - acc / 3.0);
      if (e > err) err = e;
    }
  CHECK(err < 1e-12);
  lt_result_free(&r);
  lt_result_free(&b);
  lt_free(&x);
}

TPU_TEST(lower_fft_r2c_c2r) {
  /* real x [3, 5] f64: rfft over dims (0, 1) onesided, norm by_root_n;
   * c2r back with last_dim_size 5 and the same norm gives x */
  int64_t sz[2] = {3, 5}, dims[2] = {0, 1};
  tpu_view x = lt_new(TPU_F64, 2, sz);
  for (int64_t i = 0; i < 15; i++) lt_set(&x, i, cos(0.7 * (double)(i * i)));
  lt_result r = RUN("_fft_r2c", "", lt_tensor("self", x), lt_ints("dim", dims, 2),
                    lt_int("normalization", 1), lt_bool("onesided", 1));
  CHECK_OK(r.rc);
  CHECK(r.info[0].dtype == TPU_C128 && r.info[0].ndim == 2 && r.info[0].sizes[0] == 3 &&
        r.info[0].sizes[1] == 3);
  double err = 0;
  for (int k0 = 0; k0 < 3; k0++)
    for (int k1 = 0; k1 < 3; k1++) {
      dcx acc = 0;
      for (int j0 = 0; j0 < 3; j0++)
        for (int j1 = 0; j1 < 5; j1++)
          acc += lt_get(&x, j0 * 5 + j1) * w((int64_t)j0 * k0, 3, -1) * w((int64_t)j1 * k1, 5, -1);
      double e = cabs(cv_get(&r.out[0], k0 * 3 + k1) - acc / sqrt(15.0));
      if (e > err) err = e;
    }
  CHECK(err < 1e-12);
  lt_result b = RUN("_fft_c2r", "", lt_tensor("self", r.out[0]), lt_ints("dim", dims, 2),
                    lt_int("normalization", 1), lt_int("last_dim_size", 5));
  CHECK_OK(b.rc);
  CHECK(b.info[0].dtype == TPU_F64 && b.info[0].sizes[1] == 5);
  for (int64_t i = 0; i < 15; i++) CHECK(fabs(lt_get(&b.out[0], i) - lt_get(&x, i)) < 1e-12);
  /* half-precision input: CPU's "Unsupported dtype Half" */
  tpu_view h = lt_new(TPU_F16, 2, sz);
  lt_result e = RUN("_fft_r2c", "", lt_tensor("self", h), lt_ints("dim", dims, 2),
                    lt_int("normalization", 0), lt_bool("onesided", 1));
  CHECK(e.rc == TPU_E_INVALID);
  lt_result_free(&r);
  lt_result_free(&b);
  lt_free(&x);
  lt_free(&h);
}

TPU_TEST(lower_complex_gate_and_promotion) {
  int64_t n = 3;
  tpu_view c = lt_new(TPU_C64, 1, &n), f = lt_new(TPU_F64, 1, &n);
  float *cp = c.base;
  for (int i = 0; i < 6; i++) cp[i] = (float)(i + 1);
  for (int i = 0; i < 3; i++) lt_set(&f, i, 0.5 * i);
  /* float64 + complex64 -> complex128 (torch.promote_types) */
  lt_result r = RUN("add", "Tensor", lt_tensor("self", c), lt_tensor("other", f),
                    lt_int("alpha", 1));
  CHECK_OK(r.rc);
  CHECK(r.info[0].dtype == TPU_C128);
  for (int i = 0; i < 3; i++)
    CHECK(cabs(cv_get(&r.out[0], i) - CMPLX(2 * i + 1 + 0.5 * i, 2 * i + 2)) < 1e-6);
  lt_result_free(&r);
  /* a real-only lowering never sees complex operands */
  lt_result m = RUN("maximum", "", lt_tensor("self", c), lt_tensor("other", c));
  CHECK(m.rc == TPU_E_UNSUPPORTED);
  /* complex(): int parts are a RuntimeError, half parts (chalf) unsupported */
  tpu_view i32 = lt_new(TPU_I32, 1, &n), h = lt_new(TPU_F16, 1, &n);
  lt_result e1 = RUN("complex", "", lt_tensor("real", i32), lt_tensor("imag", i32));
  CHECK(e1.rc == TPU_E_INVALID);
  lt_result e2 = RUN("complex", "", lt_tensor("real", h), lt_tensor("imag", h));
  CHECK(e2.rc == TPU_E_UNSUPPORTED);
  lt_result p = RUN("angle", "", lt_tensor("self", f));
  CHECK_OK(p.rc);
  CHECK(p.info[0].dtype == TPU_F64 && lt_get(&p.out[0], 1) == 0.0);
  lt_result_free(&p);
  lt_free(&c);
  lt_free(&f);
  lt_free(&i32);
  lt_free(&h);
}

/* test_complex.c - complex dtypes, complex IR ops and the FFT executor,
 * checked against independent double-precision references (a naive
 * O(n^2) DFT for the FFT). */
#include <complex.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_exec_util.h"
#include "tpu_test.h"

typedef double complex dcx;

static double frand(unsigned *s) {
  *s = *s * 1103515245u + 12345u;
  return ((double)((*s >> 8) & 0xffff) / 65536.0) * 2.0 - 1.0;
}

/* complex element get/set for c64/c128 contiguous arrays */
static dcx cget(const tarr *a, int64_t i) {
  if (a->v.dtype == TPU_C64) {
    const float *f = a->mem;
    return CMPLX(f[2 * i], f[2 * i + 1]);
  }
  const double *d = a->mem;
  return CMPLX(d[2 * i], d[2 * i + 1]);
}
static void cset(tarr *a, int64_t i, dcx z) {
  if (a->v.dtype == TPU_C64) {
    float *f = a->mem;
    f[2 * i] = (float)creal(z);
    f[2 * i + 1] = (float)cimag(z);
  } else {
    double *d = a->mem;
    d[2 * i] = creal(z);
    d[2 * i + 1] = cimag(z);
  }
}
static tarr carr(int dt, int nd, const int64_t *sz) {
  tarr a;
  int64_t n = 1;
  for (int i = 0; i < nd; i++) n *= sz[i];
  a.mem = calloc((size_t)(n ? n : 1), 16);
  tpu_view_init_contiguous(&a.v, a.mem, dt, nd, sz);
  return a;
}

/* naive DFT of x[0..n) with stride st; sign -1 forward, +1 inverse */
static void dft(const dcx *x, dcx *y, int64_t n, int64_t st, int sign) {
  for (int64_t k = 0; k < n; k++) {
    dcx acc = 0;
    for (int64_t j = 0; j < n; j++) {
      double a = sign * 2.0 * M_PI * (double)((j * k) % n) / (double)n;
      acc += x[j * st] * CMPLX(cos(a), sin(a));
    }
    y[k * st] = acc;
  }
}

/* run a one-node FFT graph on x, result into y */
static int run_fft(const tarr *x, tarr *y, int type, int nl, const int64_t *len) {
  tpuir_graph *g = tpuir_graph_new();
  tpuir_val p = tpuir_param(g, x->v.dtype, x->v.ndim, x->v.sizes);
  tpuir_val r = tpuir_fft(g, p, type, nl, len);
  int rc = r < 0 ? r : tpuir_set_outputs(g, 1, &r);
  if (rc == 0) rc = tpux_run(g, 1, &x->v, 1, &y->v);
  tpuir_graph_free(g);
  return rc;
}

static const int64_t k_sizes[] = {1, 2, 5, 7, 8, 12, 17, 64};

TPU_TEST(complex_fft_1d_vs_dft) {
  unsigned seed = 7;
  for (size_t si = 0; si < sizeof k_sizes / sizeof k_sizes[0]; si++) {
    int64_t n = k_sizes[si], sz[2] = {3, n};
    for (int dtk = 0; dtk < 2; dtk++) {
      int dt = dtk ? TPU_C64 : TPU_C128;
      double tol = (dtk ? 2e-6 : 1e-12) * (double)n;
      for (int inv = 0; inv < 2; inv++) {
        tarr x = carr(dt, 2, sz), y = carr(dt, 2, sz);
        dcx *ref = malloc(sizeof(dcx) * (size_t)(3 * n)), *src = malloc(sizeof(dcx) * (size_t)(3 * n));
        for (int64_t i = 0; i < 3 * n; i++) {
          cset(&x, i, CMPLX(frand(&seed), frand(&seed)));
          src[i] = cget(&x, i);
        }
        for (int b = 0; b < 3; b++) dft(src + b * n, ref + b * n, n, 1, inv ? 1 : -1);
        int rc = run_fft(&x, &y, inv ? TPUIR_FFT_INV : TPUIR_FFT_FWD, 1, &n);
        double err = 0;
        for (int64_t i = 0; i < 3 * n && rc == 0; i++) {
          dcx want = inv ? ref[i] / (double)n : ref[i];
          double e = cabs(cget(&y, i) - want);
          if (e > err) err = e;
        }
        free(ref);
        free(src);
        free(x.mem);
        free(y.mem);
        CHECK_OK(rc);
        if (err > tol) fprintf(stderr, "  n=%lld dt=%d inv=%d err=%g\n", (long long)n, dt, inv, err);
        CHECK(err <= tol);
      }
    }
  }
}

TPU_TEST(complex_rfft_irfft_vs_dft) {
  unsigned seed = 11;
  for (size_t si = 0; si < sizeof k_sizes / sizeof k_sizes[0]; si++) {
    int64_t n = k_sizes[si], h = n / 2 + 1, sz[2] = {2, n}, hs[2] = {2, h};
    tarr x = ta_new(TPU_F64, 2, sz), y = carr(TPU_C128, 2, hs), z = ta_new(TPU_F64, 2, sz);
    dcx *src = malloc(sizeof(dcx) * (size_t)(2 * n)), *ref = malloc(sizeof(dcx) * (size_t)(2 * n));
    for (int64_t i = 0; i < 2 * n; i++) {
      double v = frand(&seed);
      tv_set(&x.v, i, v);
      src[i] = v;
    }
    for (int b = 0; b < 2; b++) dft(src + b * n, ref + b * n, n, 1, -1);
    int rc = run_fft(&x, &y, TPUIR_FFT_RFFT, 1, &n);
    double err = 0, err2 = 0;
    for (int b = 0; b < 2 && rc == 0; b++)
      for (int64_t k = 0; k < h; k++) {
        double e = cabs(cget(&y, b * h + k) - ref[b * n + k]);
        if (e > err) err = e;
      }
    if (rc == 0) rc = run_fft(&y, &z, TPUIR_FFT_IRFFT, 1, &n);
    for (int64_t i = 0; i < 2 * n && rc == 0; i++) {
      double e = fabs(tv_get(&z.v, i) - creal(src[i]));
      if (e > err2) err2 = e;
    }
    free(src);
    free(ref);
    free(x.mem);
    free(y.mem);
    free(z.mem);
    CHECK_OK(rc);
    CHECK(err <= 1e-12 * (double)n);
    CHECK(err2 <= 1e-12 * (double)n);
  }
}

TPU_TEST(complex_fft_2d_3d_vs_dft) {
  unsigned seed = 3;
  int64_t sz[4] = {2, 3, 5, 4};
  int64_t total = 2 * 3 * 5 * 4;
  for (int nl = 2; nl <= 3; nl++) {
    tarr x = carr(TPU_C128, 4, sz), y = carr(TPU_C128, 4, sz);
    dcx *ref = malloc(sizeof(dcx) * (size_t)total), *tmp = malloc(sizeof(dcx) * (size_t)total);
    for (int64_t i = 0; i < total; i++) {
      cset(&x, i, CMPLX(frand(&seed), frand(&seed)));
      ref[i] = cget(&x, i);
    }
    /* separable reference over the trailing nl dims */
    for (int ax = 4 - nl; ax < 4; ax++) {
      int64_t inner = 1, outer = 1;
      for (int d = ax + 1; d < 4; d++) inner *= sz[d];
      for (int d = 0; d < ax; d++) outer *= sz[d];
      memcpy(tmp, ref, sizeof(dcx) * (size_t)total);
      for (int64_t o = 0; o < outer; o++)
        for (int64_t in = 0; in < inner; in++)
          dft(tmp + o * sz[ax] * inner + in, ref + o * sz[ax] * inner + in, sz[ax], inner, -1);
    }
    int rc = run_fft(&x, &y, TPUIR_FFT_FWD, nl, sz + 4 - nl);
    double err = 0;
    for (int64_t i = 0; i < total && rc == 0; i++) {
      double e = cabs(cget(&y, i) - ref[i]);
      if (e > err) err = e;
    }
    free(ref);
    free(tmp);
    free(x.mem);
    free(y.mem);
    CHECK_OK(rc);
    CHECK(err <= 1e-11);
  }
}

TPU_TEST(complex_elementwise_and_parts) {
  int64_t n = 6;
  tarr a = carr(TPU_C64, 1, &n), c = carr(TPU_C64, 1, &n);
  unsigned seed = 5;
  for (int64_t i = 0; i < n; i++) {
    cset(&a, i, CMPLX(frand(&seed), frand(&seed)));
    cset(&c, i, CMPLX(frand(&seed) + 2, frand(&seed)));
  }
  tpuir_graph *g = tpuir_graph_new();
  tpuir_val pa = tpuir_param(g, TPU_C64, 1, &n), pc = tpuir_param(g, TPU_C64, 1, &n);
  tpuir_val outs[6];
  outs[0] = tpuir_binary(g, TPUIR_MUL, pa, pc);
  outs[1] = tpuir_binary(g, TPUIR_DIV, pa, pc);
  outs[2] = tpuir_unary(g, TPUIR_ABS, pa);                       /* f32 */
  outs[3] = tpuir_complex(g, tpuir_imag(g, pa), tpuir_real(g, pa)); /* swap */
  outs[4] = tpuir_conj(g, pa);
  outs[5] = tpuir_convert(g, pa, TPU_F64);                      /* real part */
  CHECK(outs[2] >= 0 && tpuir_get_node(g, outs[2])->dtype == TPU_F32);
  CHECK_OK(tpuir_set_outputs(g, 6, outs));
  tarr r0 = carr(TPU_C64, 1, &n), r1 = carr(TPU_C64, 1, &n), r2 = ta_new(TPU_F32, 1, &n),
       r3 = carr(TPU_C64, 1, &n), r4 = carr(TPU_C64, 1, &n), r5 = ta_new(TPU_F64, 1, &n);
  tpu_view ins[2] = {a.v, c.v}, ov[6] = {r0.v, r1.v, r2.v, r3.v, r4.v, r5.v};
  int rc = tpux_run(g, 2, ins, 6, ov);
  double err = 0;
  for (int64_t i = 0; i < n && rc == 0; i++) {
    dcx x = cget(&a, i), y = cget(&c, i);
    double e[6] = {cabs(cget(&r0, i) - x * y), cabs(cget(&r1, i) - x / y),
                   fabs(tv_get(&r2.v, i) - cabs(x)), cabs(cget(&r3, i) - CMPLX(cimag(x), creal(x))),
                   cabs(cget(&r4, i) - conj(x)), fabs(tv_get(&r5.v, i) - creal(x))};
    for (int k = 0; k < 6; k++)
      if (e[k] > err) err = e[k];
  }
  tpuir_graph_free(g);
  free(a.mem); free(c.mem); free(r0.mem); free(r1.mem); free(r2.mem);
  free(r3.mem); free(r4.mem); free(r5.mem);
  CHECK_OK(rc);
  CHECK(err < 1e-6);
}

TPU_TEST(complex_dot_and_sum) {
  int64_t as[2] = {2, 3}, bs[2] = {3, 4}, os[2] = {2, 4};
  tarr a = carr(TPU_C128, 2, as), bb = carr(TPU_C128, 2, bs);
  unsigned seed = 9;
  for (int64_t i = 0; i < 6; i++) cset(&a, i, CMPLX(frand(&seed), frand(&seed)));
  for (int64_t i = 0; i < 12; i++) cset(&bb, i, CMPLX(frand(&seed), frand(&seed)));
  tpuir_graph *g = tpuir_graph_new();
  tpuir_val pa = tpuir_param(g, TPU_C128, 2, as), pb = tpuir_param(g, TPU_C128, 2, bs);
  int64_t lc = 1, rc0 = 0, d0 = 0;
  tpuir_val outs[2];
  outs[0] = tpuir_dot_general(g, pa, pb, 0, NULL, NULL, 1, &lc, &rc0, TPU_PREC_HIGHEST, TPU_C128);
  outs[1] = tpuir_reduce(g, TPUIR_RED_SUM, pb, 1, &d0);
  CHECK(outs[0] >= 0 && outs[1] >= 0);
  CHECK(tpuir_reduce(g, TPUIR_RED_MAX, pb, 1, &d0) == TPU_E_TYPE);
  CHECK(tpuir_const_f(g, TPU_C64, 1.0) == TPU_E_TYPE);
  CHECK(tpuir_binary(g, TPUIR_MAX, pa, pa) == TPU_E_TYPE);
  CHECK_OK(tpuir_set_outputs(g, 2, outs));
  int64_t s4 = 4;
  tarr o = carr(TPU_C128, 2, os), s = carr(TPU_C128, 1, &s4);
  tpu_view ins[2] = {a.v, bb.v}, ov[2] = {o.v, s.v};
  int rc = tpux_run(g, 2, ins, 2, ov);
  double err = 0;
  for (int i = 0; i < 2 && rc == 0; i++)
    for (int j = 0; j < 4; j++) {
      dcx acc = 0;
      for (int k = 0; k < 3; k++) acc += cget(&a, i * 3 + k) * cget(&bb, k * 4 + j);
      double e = cabs(cget(&o, i * 4 + j) - acc);
      if (e > err) err = e;
    }
  for (int j = 0; j < 4 && rc == 0; j++) {
    dcx acc = 0;
    for (int k = 0; k < 3; k++) acc += cget(&bb, k * 4 + j);
    double e = cabs(cget(&s, j) - acc);
    if (e > err) err = e;
  }
  tpuir_graph_free(g);
  free(a.mem); free(bb.mem); free(o.mem); free(s.mem);
  CHECK_OK(rc);
  CHECK(err < 1e-12);
}

TPU_TEST(complex_fft_errors_and_empty) {
  tpuir_graph *g = tpuir_graph_new();
  int64_t sz[2] = {0, 8}, n = 8, bad = 6;
  tpuir_val pr = tpuir_param(g, TPU_F32, 2, sz), pc = tpuir_param(g, TPU_C64, 2, sz);
  CHECK(tpuir_fft(g, pr, TPUIR_FFT_FWD, 1, &n) == TPU_E_TYPE);
  CHECK(tpuir_fft(g, pc, TPUIR_FFT_RFFT, 1, &n) == TPU_E_TYPE);
  CHECK(tpuir_fft(g, pc, TPUIR_FFT_FWD, 1, &bad) == TPU_E_INVALID);
  CHECK(tpuir_fft(g, pc, TPUIR_FFT_FWD, 4, &n) == TPU_E_INVALID);
  tpuir_val r = tpuir_fft(g, pr, TPUIR_FFT_RFFT, 1, &n);
  CHECK(r >= 0);
  const tpuir_node *rn = tpuir_get_node(g, r);
  CHECK(rn->dtype == TPU_C64 && rn->sizes[1] == 5);
  tpuir_val ir = tpuir_fft(g, r, TPUIR_FFT_IRFFT, 1, &n);
  CHECK(ir >= 0 && tpuir_get_node(g, ir)->dtype == TPU_F32 &&
        tpuir_get_node(g, ir)->sizes[1] == 8);
  char buf[512];
  tpuir_dump(g, buf, sizeof buf);
  CHECK(strstr(buf, "fft_type=RFFT") != NULL);
  CHECK_OK(tpuir_set_outputs(g, 1, &ir));
  /* empty batch: runs and writes nothing */
  tarr x = ta_new(TPU_F32, 2, sz), y = ta_new(TPU_F32, 2, sz), c = carr(TPU_C64, 2, sz);
  tpu_view ins[2] = {x.v, c.v};
  CHECK_OK(tpux_run(g, 2, ins, 1, &y.v));
  tpuir_graph_free(g);
  free(x.mem); free(y.mem); free(c.mem);
}

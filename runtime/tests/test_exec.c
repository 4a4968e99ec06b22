/* test_exec.c - vTPU executor: elementwise ops, conversions, views, copies,
 * aliasing and error behaviour, against independent scalar references. */
#include <pthread.h>
#include <stdio.h>

#include "tpu_test.h"
#include "test_exec_util.h"

static const int k_all_dt[] = {TPU_BOOL, TPU_U8,  TPU_I8,   TPU_I16, TPU_I32,
                               TPU_I64,  TPU_F16, TPU_BF16, TPU_F32, TPU_F64};

/* ---- references ---------------------------------------------------------- */

static int is_cmp(int op) { return op >= TPUIR_EQ && op <= TPUIR_GE; }

static double ref_cmp(int op, double x, double y) {
  switch (op) {
  case TPUIR_EQ: return x == y;
  case TPUIR_NE: return x != y;
  case TPUIR_LT: return x < y;
  case TPUIR_LE: return x <= y;
  case TPUIR_GT: return x > y;
  default: return x >= y;
  }
}

/* float binary op in float (f16/bf16/f32) or double, then rounded */
static double ref_bin_float(int op, int dt, double x, double y) {
  if (is_cmp(op)) return ref_cmp(op, x, y);
  if (dt == TPU_F64) {
    switch (op) {
    case TPUIR_ADD: return x + y;
    case TPUIR_SUB: return x - y;
    case TPUIR_MUL: return x * y;
    case TPUIR_DIV: return x / y;
    case TPUIR_REM: return fmod(x, y);
    case TPUIR_POW: return pow(x, y);
    case TPUIR_MAX: return isnan(x) || isnan(y) ? NAN : (x > y ? x : y);
    case TPUIR_MIN: return isnan(x) || isnan(y) ? NAN : (x < y ? x : y);
    case TPUIR_ATAN2: return atan2(x, y);
    }
    return NAN;
  }
  float a = (float)x, b = (float)y, r = NAN;
  switch (op) {
  case TPUIR_ADD: r = a + b; break;
  case TPUIR_SUB: r = a - b; break;
  case TPUIR_MUL: r = a * b; break;
  case TPUIR_DIV: r = a / b; break;
  case TPUIR_REM: r = fmodf(a, b); break;
  case TPUIR_POW: r = powf(a, b); break;
  case TPUIR_MAX: r = isnan(a) || isnan(b) ? NAN : (a > b ? a : b); break;
  case TPUIR_MIN: r = isnan(a) || isnan(b) ? NAN : (a < b ? a : b); break;
  case TPUIR_ATAN2: r = atan2f(a, b); break;
  }
  return round_to(dt, r);
}

static int64_t wrap_i(int dt, int64_t v) { return (int64_t)round_to(dt, (double)v); }

static int64_t ref_bin_int(int op, int dt, int64_t x, int64_t y) {
  if (is_cmp(op)) return (int64_t)ref_cmp(op, (double)x, (double)y);
  int bits = (int)tpu_dtype_size(dt) * 8;
  int64_t r = 0;
  switch (op) {
  case TPUIR_ADD: r = x + y; break;
  case TPUIR_SUB: r = x - y; break;
  case TPUIR_MUL: r = x * y; break;
  case TPUIR_DIV: r = x / y; break;
  case TPUIR_REM: r = x % y; break;
  case TPUIR_POW: r = 1; for (int k = 0; k < y; k++) r *= x; break;
  case TPUIR_MAX: r = x > y ? x : y; break;
  case TPUIR_MIN: r = x < y ? x : y; break;
  case TPUIR_AND: r = x & y; break;
  case TPUIR_OR: r = x | y; break;
  case TPUIR_XOR: r = x ^ y; break;
  case TPUIR_SHL: r = y >= bits ? 0 : (int64_t)((uint64_t)x << y); break;
  case TPUIR_SHR: {
    int maxs = bits - (dt != TPU_U8);
    r = y >= maxs ? x >> maxs : x >> y;
    break;
  }
  }
  return wrap_i(dt, r);
}

/* run a graph with one output */
static int run1(tpuir_graph *g, tpuir_val out, int nin, const tpu_view *ins,
                const tpu_view *o) {
  int rc = tpuir_set_outputs(g, 1, &out);
  if (rc) return rc;
  return tpux_run(g, nin, ins, 1, o);
}

/* ---- binary ops, every dtype, non-contiguous operand ---------------------- */

TPU_TEST(exec_binary_all_dtypes) {
  uint64_t seed = 12345;
  int64_t sz[2] = {3, 37}, szt[2] = {37, 3};
  int checked = 0;
  for (size_t di = 0; di < sizeof k_all_dt / sizeof *k_all_dt; di++) {
    int dt = k_all_dt[di];
    int fl = tpu_dtype_is_float(dt);
    for (int op = TPUIR_ADD; op <= TPUIR_GE; op++) {
      tpuir_graph *g = tpuir_graph_new();
      tpuir_val a = tpuir_param(g, dt, 2, sz), b = tpuir_param(g, dt, 2, sz);
      tpuir_val r = tpuir_binary(g, op, a, b);
      if (r < 0) { /* rejected combination */
        tpuir_graph_free(g);
        continue;
      }
      tarr A = ta_new(dt, 2, sz), Bt = ta_new(dt, 2, szt);
      /* B is a transposed (non-contiguous) view of a [37,3] buffer */
      tpu_view B = Bt.v;
      B.sizes[0] = 3; B.sizes[1] = 37; B.strides[0] = 1; B.strides[1] = 3;
      int pos = op == TPUIR_DIV || op == TPUIR_REM || op == TPUIR_POW ||
                op == TPUIR_SHL || op == TPUIR_SHR;
      if (dt == TPU_BOOL) {
        ta_fill(&A.v, &seed, 0, 2);
        ta_fill(&B, &seed, 0, 2);
      } else if (fl) {
        ta_fill(&A.v, &seed, op == TPUIR_POW ? 0.1 : -4, 4);
        ta_fill(&B, &seed, op == TPUIR_POW ? 0.5 : -3, 3);
        if (op == TPUIR_MAX || op == TPUIR_MIN || op == TPUIR_EQ) {
          tv_set(&A.v, 0, NAN);
          tv_set(&B, 1, NAN);
          tv_set(&B, 2, tv_get(&A.v, 2));
        }
      } else {
        int u = dt == TPU_U8;
        ta_fill(&A.v, &seed, u ? 0 : -20, 40);
        ta_fill(&B, &seed, pos ? 1 : (u ? 0 : -20), pos ? (op == TPUIR_POW ? 4 : 7) : 40);
        if (op == TPUIR_DIV || op == TPUIR_REM) tv_set(&B, 3, u ? 3 : -3);
        if (op == TPUIR_SHL || op == TPUIR_SHR) tv_set(&B, 4, 70);
      }
      int rdt = is_cmp(op) ? TPU_BOOL : dt;
      tarr O = ta_new(rdt, 2, sz);
      tpu_view ins[2] = {A.v, B};
      CHECK_OK(run1(g, r, 2, ins, &O.v));
      for (int64_t i = 0; i < 3 * 37; i++) {
        double x = tv_get(&A.v, i), y = tv_get(&B, i), got = tv_get(&O.v, i);
        double want;
        if (fl) want = ref_bin_float(op, dt, x, y);
        else want = (double)ref_bin_int(op, dt, (int64_t)x, (int64_t)y);
        if (!is_cmp(op) && dt == TPU_BOOL) want = want != 0;
        /* pow, atan2: float32 runs in SLEEF (1 ulp), the reference in libm */
        double tol = fl && (op == TPUIR_POW || op == TPUIR_ATAN2) ? 1e-6 : 0;
        if (!near_eq(got, want, tol)) {
          fprintf(stderr, "  %s %s: %g op %g = %g, want %g\n", tpuir_op_name(op),
                  tpu_dtype_name(dt), x, y, got, want);
          CHECK(0);
        }
      }
      checked++;
      free(A.mem); free(Bt.mem); free(O.mem);
      tpuir_graph_free(g);
    }
  }
  CHECK(checked > 120);
}

/* ---- unary float ops ------------------------------------------------------- */

static double ref_digamma(double x) {
  double h = 1e-5;
  return (lgamma(x + h) - lgamma(x - h)) / (2 * h);
}

static double ref_unary(int op, double x) {
  switch (op) {
  case TPUIR_NEG: return -x;
  case TPUIR_ABS: return fabs(x);
  case TPUIR_SIGN: return (x > 0) - (x < 0); /* torch: sign(NaN) = 0 */
  case TPUIR_EXP: return exp(x);
  case TPUIR_EXPM1: return expm1(x);
  case TPUIR_LOG: return log(x);
  case TPUIR_LOG1P: return log1p(x);
  case TPUIR_SQRT: return sqrt(x);
  case TPUIR_RSQRT: return 1 / sqrt(x);
  case TPUIR_SIN: return sin(x);
  case TPUIR_COS: return cos(x);
  case TPUIR_TAN: return tan(x);
  case TPUIR_TANH: return tanh(x);
  case TPUIR_ASIN: return asin(x);
  case TPUIR_ACOS: return acos(x);
  case TPUIR_ATAN: return atan(x);
  case TPUIR_SINH: return sinh(x);
  case TPUIR_COSH: return cosh(x);
  case TPUIR_ASINH: return asinh(x);
  case TPUIR_ACOSH: return acosh(x);
  case TPUIR_ATANH: return atanh(x);
  case TPUIR_LOGISTIC: return 1 / (1 + exp(-x));
  case TPUIR_ERF: return erf(x);
  case TPUIR_LGAMMA: return lgamma(x);
  case TPUIR_DIGAMMA: return ref_digamma(x);
  case TPUIR_FLOOR: return floor(x);
  case TPUIR_CEIL: return ceil(x);
  case TPUIR_ROUND_EVEN: return nearbyint(x);
  case TPUIR_TRUNC: return trunc(x);
  case TPUIR_IS_FINITE: return isfinite(x) ? 1 : 0;
  case TPUIR_IS_NAN: return isnan(x) ? 1 : 0;
  case TPUIR_IS_INF: return isinf(x) ? 1 : 0;
  }
  return NAN;
}

TPU_TEST(exec_unary_float) {
  static const int fdt[] = {TPU_F32, TPU_F64, TPU_BF16, TPU_F16};
  uint64_t seed = 99;
  int64_t sz[1] = {300};
  for (int di = 0; di < 4; di++) {
    int dt = fdt[di];
    double tol = dt == TPU_F64 ? 1e-12 : dt == TPU_F32 ? 2e-6 : dt == TPU_F16 ? 2e-3 : 1e-2;
    for (int op = TPUIR_NEG; op <= TPUIR_IS_INF; op++) {
      if (op == TPUIR_NOT) continue;
      double lo = -3, hi = 3;
      switch (op) {
      case TPUIR_LOG: case TPUIR_SQRT: case TPUIR_RSQRT: case TPUIR_LGAMMA:
      case TPUIR_DIGAMMA: lo = 0.1; hi = 6; break;
      case TPUIR_ACOSH: lo = 1; hi = 5; break;
      case TPUIR_ASIN: case TPUIR_ACOS: case TPUIR_ATANH: case TPUIR_ERFINV:
        lo = -0.95; hi = 0.95; break;
      case TPUIR_LOG1P: lo = -0.9; break;
      case TPUIR_TAN: lo = -1.4; hi = 1.4; break;
      }
      tpuir_graph *g = tpuir_graph_new();
      tpuir_val p = tpuir_param(g, dt, 1, sz);
      tpuir_val r = tpuir_unary(g, op, p);
      CHECK(r >= 0);
      int rdt = op >= TPUIR_IS_FINITE ? TPU_BOOL : dt;
      tarr A = ta_new(dt, 1, sz), O = ta_new(rdt, 1, sz);
      ta_fill(&A.v, &seed, lo, hi);
      tv_set(&A.v, 0, 0.5);
      tv_set(&A.v, 1, op == TPUIR_ROUND_EVEN ? 2.5 : 1.0);
      tv_set(&A.v, 2, op == TPUIR_ROUND_EVEN ? -0.5 : 0.25);
      if (op == TPUIR_IS_NAN || op == TPUIR_IS_INF || op == TPUIR_IS_FINITE ||
          op == TPUIR_SIGN || op == TPUIR_ABS || op == TPUIR_EXP) {
        tv_set(&A.v, 3, NAN);
        tv_set(&A.v, 4, INFINITY);
        tv_set(&A.v, 5, -INFINITY);
      }
      CHECK_OK(run1(g, r, 1, &A.v, &O.v));
      for (int64_t i = 0; i < sz[0]; i++) {
        double x = tv_get(&A.v, i), got = tv_get(&O.v, i);
        double want;
        if (op == TPUIR_ERFINV) {
          /* check through the inverse */
          got = erf(got);
          want = x;
        } else {
          want = ref_unary(op, x);
          if (rdt != TPU_BOOL) want = round_to(dt, want);
        }
        double t2 = op == TPUIR_DIGAMMA && dt == TPU_F64 ? 1e-8 : tol;
        if (op == TPUIR_ERFINV && dt != TPU_F64) t2 = dt == TPU_F32 ? 1e-5 : 2e-2;
        if (!near_eq(got, want, t2)) {
          fprintf(stderr, "  %s(%s %.9g) = %.9g, want %.9g\n", tpuir_op_name(op),
                  tpu_dtype_name(dt), x, got, want);
          CHECK(0);
        }
      }
      free(A.mem); free(O.mem);
      tpuir_graph_free(g);
    }
  }
}

TPU_TEST(exec_unary_special_values) {
  int64_t sz[1] = {8};
  struct { int op; double in[8], out[8]; } cases[] = {
    {TPUIR_DIGAMMA, {0, -0.0, -1, -2, 1, 10, -0.5, INFINITY},
     {-INFINITY, INFINITY, NAN, NAN, -0.5772156649015329, 2.251752589066721,
      0.03648997397857652, INFINITY}},
    {TPUIR_ERFINV, {1, -1, 0, 2, -2, NAN, 0.5, -0.5},
     {INFINITY, -INFINITY, 0, NAN, NAN, NAN, 0.4769362762044699, -0.4769362762044699}},
    {TPUIR_LOGISTIC, {-200, 200, 0, -INFINITY, INFINITY, NAN, 1, -1},
     {0, 1, 0.5, 0, 1, NAN, 0.7310585786300049, 0.2689414213699951}},
    {TPUIR_SIGN, {-0.0, 0, NAN, -3, 3, INFINITY, -INFINITY, 1e-30},
     {0, 0, 0, -1, 1, 1, -1, 1}},
    {TPUIR_ROUND_EVEN, {0.5, 1.5, 2.5, -0.5, -1.5, 2.4999, NAN, -INFINITY},
     {0, 2, 2, 0, -2, 2, NAN, -INFINITY}},
  };
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
    for (int dt = TPU_F32; dt <= TPU_F64; dt++) {
      tpuir_graph *g = tpuir_graph_new();
      tpuir_val r = tpuir_unary(g, cases[c].op, tpuir_param(g, dt, 1, sz));
      tarr A = ta_new(dt, 1, sz), O = ta_new(dt, 1, sz);
      for (int i = 0; i < 8; i++) tv_set(&A.v, i, cases[c].in[i]);
      CHECK_OK(run1(g, r, 1, &A.v, &O.v));
      for (int i = 0; i < 8; i++) {
        double got = tv_get(&O.v, i), want = cases[c].out[i];
        if (!near_eq(got, want, dt == TPU_F32 ? 1e-6 : 1e-12)) {
          fprintf(stderr, "  %s(%g) [%s] = %.17g want %.17g\n",
                  tpuir_op_name(cases[c].op), cases[c].in[i], tpu_dtype_name(dt),
                  got, want);
          CHECK(0);
        }
      }
      free(A.mem); free(O.mem);
      tpuir_graph_free(g);
    }
}

TPU_TEST(exec_unary_int) {
  int64_t sz[1] = {6};
  int64_t in[6] = {-128, -5, 0, 7, 127, -1};
  static const int idt[] = {TPU_I8, TPU_I16, TPU_I32, TPU_I64, TPU_U8, TPU_BOOL};
  for (int di = 0; di < 6; di++) {
    int dt = idt[di];
    for (int op = TPUIR_NEG; op <= TPUIR_IS_INF; op++) {
      tpuir_graph *g = tpuir_graph_new();
      tpuir_val r = tpuir_unary(g, op, tpuir_param(g, dt, 1, sz));
      if (r < 0) {
        tpuir_graph_free(g);
        continue;
      }
      int rdt = op >= TPUIR_IS_FINITE ? TPU_BOOL : dt;
      tarr A = ta_new(dt, 1, sz), O = ta_new(rdt, 1, sz);
      for (int i = 0; i < 6; i++) tv_set(&A.v, i, round_to(dt, (double)in[i]));
      CHECK_OK(run1(g, r, 1, &A.v, &O.v));
      for (int i = 0; i < 6; i++) {
        int64_t x = (int64_t)tv_get(&A.v, i), want;
        switch (op) {
        case TPUIR_NEG: want = -x; break;
        case TPUIR_ABS: want = x < 0 ? -x : x; break;
        case TPUIR_SIGN: want = (x > 0) - (x < 0); break;
        case TPUIR_NOT: want = dt == TPU_BOOL ? !x : ~x; break;
        case TPUIR_IS_FINITE: want = 1; break;
        case TPUIR_IS_NAN: case TPUIR_IS_INF: want = 0; break;
        default: want = x; break; /* floor, ceil, round, trunc */
        }
        if (rdt != TPU_BOOL || op < TPUIR_IS_FINITE) want = wrap_i(rdt, want);
        CHECK(tv_get(&O.v, i) == (double)want);
      }
      free(A.mem); free(O.mem);
      tpuir_graph_free(g);
    }
  }
}

/* ---- conversions ------------------------------------------------------------ */

TPU_TEST(exec_convert_all_pairs) {
  static const double vals[] = {0, 1, -1, 2.5, -2.5, 127, 128, 255, 256, -129,
                                65504, 1e10, -1e10, 0.1, 3.999, -0.0, NAN, INFINITY,
                                1.00390625, 70000};
  int n = (int)(sizeof vals / sizeof *vals);
  int64_t sz[1] = {n};
  for (int si = 0; si < 10; si++)
    for (int di = 0; di < 10; di++) {
      int s = k_all_dt[si], d = k_all_dt[di];
      tpuir_graph *g = tpuir_graph_new();
      tpuir_val r = tpuir_convert(g, tpuir_param(g, s, 1, sz), d);
      tarr A = ta_new(s, 1, sz), O = ta_new(d, 1, sz);
      for (int i = 0; i < n; i++) {
        double v = vals[i];
        if (!tpu_dtype_is_float(s) && !isfinite(v)) v = 3;
        if (!tpu_dtype_is_float(s)) v = trunc(v);
        if (!tpu_dtype_is_float(s) && (v > 1e9 || v < -1e9)) v = 1000;
        tv_set(&A.v, i, round_to(s, v));
      }
      CHECK_OK(run1(g, r, 1, &A.v, &O.v));
      for (int i = 0; i < n; i++) {
        double x = tv_get(&A.v, i), got = tv_get(&O.v, i), want;
        if (d == TPU_BOOL) want = x != 0;
        else if (tpu_dtype_is_float(d)) want = round_to(d, x);
        else if (!tpu_dtype_is_float(s)) want = round_to(d, x);
        else {
          /* float -> int: truncate toward zero (in range cases only) */
          double tx = trunc(x);
          if (isnan(x) || fabs(tx) >= 2147483648.0) continue; /* platform-defined */
          want = round_to(d, tx);
        }
        if (!near_eq(got, want, 0)) {
          fprintf(stderr, "  convert %s %.17g -> %s = %.17g, want %.17g\n",
                  tpu_dtype_name(s), x, tpu_dtype_name(d), got, want);
          CHECK(0);
        }
      }
      free(A.mem); free(O.mem);
      tpuir_graph_free(g);
    }
}

TPU_TEST(exec_convert_rounding) {
  /* f32 -> bf16 ties to even; f64 -> bf16 goes through f32 like c10 */
  int64_t sz[1] = {3};
  tpuir_graph *g = tpuir_graph_new();
  tpuir_val r = tpuir_convert(g, tpuir_param(g, TPU_F32, 1, sz), TPU_BF16);
  float in[3] = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -(1.0f + 0x1p-8f + 0x1p-20f)};
  uint16_t out[3];
  tpu_view A, O;
  tpu_view_init_contiguous(&A, in, TPU_F32, 1, sz);
  tpu_view_init_contiguous(&O, out, TPU_BF16, 1, sz);
  CHECK_OK(run1(g, r, 1, &A, &O));
  CHECK(tpu_bf16_to_f32(out[0]) == 1.0f);
  CHECK(tpu_bf16_to_f32(out[1]) == 1.0f + 4 * 0x1p-8f);
  CHECK(tpu_bf16_to_f32(out[2]) == -(1.0f + 2 * 0x1p-8f));
  tpuir_graph_free(g);
}

/* ---- select, const, iota, broadcasting ----------------------------------- */

TPU_TEST(exec_select_const_broadcast) {
  int64_t sz[2] = {4, 5}, row[1] = {5};
  tpuir_graph *g = tpuir_graph_new();
  tpuir_val x = tpuir_param(g, TPU_F32, 2, sz);
  tpuir_val bias = tpuir_param(g, TPU_F32, 1, row);
  int64_t d1[1] = {1};
  tpuir_val bb = tpuir_broadcast_in_dim(g, bias, 2, sz, d1);
  tpuir_val zero = tpuir_broadcast_in_dim(g, tpuir_const_f(g, TPU_F32, 0.0), 2, sz, NULL);
  tpuir_val s = tpuir_binary(g, TPUIR_ADD, x, bb);
  tpuir_val pos = tpuir_binary(g, TPUIR_GT, s, zero);
  tpuir_val relu = tpuir_select(g, pos, s, zero);
  tpuir_val io = tpuir_convert(g, tpuir_iota(g, TPU_I32, 2, sz, 0), TPU_F32);
  tpuir_val outv[3] = {relu, io, bb};
  CHECK_OK(tpuir_set_outputs(g, 3, outv));
  uint64_t seed = 7;
  tarr X = ta_new(TPU_F32, 2, sz), B = ta_new(TPU_F32, 1, row);
  tarr O0 = ta_new(TPU_F32, 2, sz), O1 = ta_new(TPU_F32, 2, sz), O2 = ta_new(TPU_F32, 2, sz);
  ta_fill(&X.v, &seed, -2, 2);
  ta_fill(&B.v, &seed, -1, 1);
  tpu_view ins[2] = {X.v, B.v}, outs[3] = {O0.v, O1.v, O2.v};
  CHECK_OK(tpux_run(g, 2, ins, 3, outs));
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 5; j++) {
      float s2 = (float)tv_get(&X.v, i * 5 + j) + (float)tv_get(&B.v, j);
      CHECK(tv_get(&O0.v, i * 5 + j) == (s2 > 0 ? s2 : 0));
      CHECK(tv_get(&O1.v, i * 5 + j) == i);
      CHECK(tv_get(&O2.v, i * 5 + j) == tv_get(&B.v, j));
    }
  free(X.mem); free(B.mem); free(O0.mem); free(O1.mem); free(O2.mem);
  tpuir_graph_free(g);
}

/* One fused region over several tiles with: an integer-class value
 * (compare result) whose buffer is later reused by floats, pairs of + - * /
 * computed in one pass (also with broadcast scalars, one of them stored so
 * it must not be merged), and a SELECT on a 0-dim predicate (its other
 * operand's producers are skipped). Bit-exact against the same float ops in
 * C, for both predicate values. */
TPU_TEST(exec_fusion_tile_kernels) {
  enum { N = 1000 };
  int64_t sz[1] = {N};
  tpuir_graph *g = tpuir_graph_new();
  tpuir_val x = tpuir_param(g, TPU_F32, 1, sz), z = tpuir_param(g, TPU_F32, 1, sz);
  tpuir_val sp = tpuir_param(g, TPU_F32, 0, NULL), cp = tpuir_param(g, TPU_BOOL, 0, NULL);
  tpuir_val s = tpuir_broadcast_in_dim(g, sp, 1, sz, NULL);
  tpuir_val c = tpuir_broadcast_in_dim(g, cp, 1, sz, NULL);
  tpuir_val m = tpuir_binary(g, TPUIR_LT, x, z);
  tpuir_val y = tpuir_select(g, m, x, z);
  tpuir_val w = tpuir_binary(g, TPUIR_MUL, y, s);
  tpuir_val u = tpuir_binary(g, TPUIR_ADD, w, z);
  tpuir_val q = tpuir_binary(g, TPUIR_SUB, s, u);
  tpuir_val d = tpuir_binary(g, TPUIR_DIV, q, x);
  tpuir_val k = tpuir_binary(g, TPUIR_LT, d, x);
  tpuir_val e = tpuir_select(g, k, d, u);
  tpuir_val a1 = tpuir_binary(g, TPUIR_DIV, tpuir_binary(g, TPUIR_SUB, e, z), s);
  tpuir_val b1 = tpuir_binary(g, TPUIR_DIV, x, tpuir_binary(g, TPUIR_ADD, e, s));
  tpuir_val f = tpuir_select(g, c, a1, b1);
  tpuir_val out = tpuir_binary(g, TPUIR_SUB, y, tpuir_binary(g, TPUIR_MUL, f, z));
  tpuir_val outv[3] = {out, k, q};
  CHECK_OK(tpuir_set_outputs(g, 3, outv));
  uint64_t seed = 11;
  tarr X = ta_new(TPU_F32, 1, sz), Z = ta_new(TPU_F32, 1, sz);
  ta_fill(&X.v, &seed, -3, 3);
  ta_fill(&Z.v, &seed, -3, 3);
  float sv = 0.37f;
  for (int pv = 0; pv < 2; pv++) {
    uint8_t cv = (uint8_t)pv;
    tpu_view S, C;
    tpu_view_init_contiguous(&S, &sv, TPU_F32, 0, NULL);
    tpu_view_init_contiguous(&C, &cv, TPU_BOOL, 0, NULL);
    tarr O = ta_new(TPU_F32, 1, sz), K = ta_new(TPU_BOOL, 1, sz), Q = ta_new(TPU_F32, 1, sz);
    tpu_view ins[4] = {X.v, Z.v, S, C}, outs[3] = {O.v, K.v, Q.v};
    CHECK_OK(tpux_run(g, 4, ins, 3, outs));
    const float *xs = X.mem, *zs = Z.mem;
    int bad = 0;
    for (int i = 0; i < N && bad < 3; i++) {
      float yv = xs[i] < zs[i] ? xs[i] : zs[i];
      float uv = yv * sv + zs[i], qv = sv - uv, dv = qv / xs[i];
      int kv = dv < xs[i];
      float ev = kv ? dv : uv;
      float fv = cv ? (ev - zs[i]) / sv : xs[i] / (ev + sv);
      float ov = yv - fv * zs[i];
      float got = ((const float *)O.mem)[i], gq = ((const float *)Q.mem)[i];
      int gk = ((const uint8_t *)K.mem)[i];
      if (memcmp(&got, &ov, 4) || memcmp(&gq, &qv, 4) || gk != kv) {
        fprintf(stderr, "  pred %d [%d]: out %.9g want %.9g, q %.9g want %.9g, k %d want %d\n",
                pv, i, got, ov, gq, qv, gk, kv);
        bad++;
      }
    }
    CHECK(bad == 0);
    free(O.mem); free(K.mem); free(Q.mem);
  }
  free(X.mem); free(Z.mem);
  tpuir_graph_free(g);
}

/* iota over tiles that start inside a row and a run of the inner dims */
TPU_TEST(exec_iota_across_tiles) {
  int64_t sz[3] = {3, 701, 5};
  for (int dim = 0; dim < 3; dim++) {
    tpuir_graph *g = tpuir_graph_new();
    tpuir_val io = tpuir_iota(g, TPU_I64, 3, sz, dim);
    CHECK_OK(tpuir_set_outputs(g, 1, &io));
    tarr O = ta_new(TPU_I64, 3, sz);
    tpu_view outs[1] = {O.v};
    CHECK_OK(tpux_run(g, 0, NULL, 1, outs));
    for (int64_t i = 0; i < 3 * 701 * 5; i++) {
      int64_t idx[3] = {i / (701 * 5), i / 5 % 701, i % 5};
      CHECK(tv_get(&O.v, i) == idx[dim]);
    }
    free(O.mem);
    tpuir_graph_free(g);
  }
}

TPU_TEST(exec_rank0_and_empty) {
  /* rank 0 */
  tpuir_graph *g = tpuir_graph_new();
  tpuir_val a = tpuir_param(g, TPU_I64, 0, NULL);
  tpuir_val r = tpuir_binary(g, TPUIR_MUL, a, tpuir_const_i(g, TPU_I64, -3));
  int64_t av = 1234567890123ll, ov = 0;
  tpu_view A, O;
  tpu_view_init_contiguous(&A, &av, TPU_I64, 0, NULL);
  tpu_view_init_contiguous(&O, &ov, TPU_I64, 0, NULL);
  CHECK_OK(run1(g, r, 1, &A, &O));
  CHECK(ov == -3703703670369ll);
  tpuir_graph_free(g);
  /* empty */
  int64_t sz[3] = {4, 0, 3};
  g = tpuir_graph_new();
  tpuir_val e = tpuir_param(g, TPU_F32, 3, sz);
  r = tpuir_unary(g, TPUIR_EXP, e);
  int64_t rd[1] = {1}, rs[2] = {4, 3};
  tpuir_val s = tpuir_reduce(g, TPUIR_RED_SUM, e, 1, rd);
  tpuir_val m = tpuir_reduce(g, TPUIR_RED_MAX, e, 1, rd);
  tpuir_val outs[3] = {r, s, m};
  CHECK_OK(tpuir_set_outputs(g, 3, outs));
  float sb[12], mb[12];
  tpu_view E, S, M, R;
  tpu_view_init_contiguous(&E, NULL, TPU_F32, 3, sz);
  tpu_view_init_contiguous(&R, NULL, TPU_F32, 3, sz);
  tpu_view_init_contiguous(&S, sb, TPU_F32, 2, rs);
  tpu_view_init_contiguous(&M, mb, TPU_F32, 2, rs);
  tpu_view ov3[3] = {R, S, M};
  CHECK_OK(tpux_run(g, 1, &E, 3, ov3));
  for (int i = 0; i < 12; i++) CHECK(sb[i] == 0 && mb[i] == -INFINITY);
  tpuir_graph_free(g);
}

/* ---- shape ops ------------------------------------------------------------- */

TPU_TEST(exec_shape_ops) {
  int64_t sz[3] = {2, 3, 4};
  tarr X = ta_new(TPU_I32, 3, sz);
  for (int i = 0; i < 24; i++) tv_set(&X.v, i, i);
  tpuir_graph *g = tpuir_graph_new();
  tpuir_val x = tpuir_param(g, TPU_I32, 3, sz);
  int64_t perm[3] = {2, 0, 1};
  tpuir_val tr = tpuir_transpose(g, x, perm);                     /* [4,2,3] */
  int64_t rs[2] = {4, 6};
  tpuir_val rsh = tpuir_reshape(g, tr, 2, rs);                    /* copy */
  int64_t st[3] = {0, 1, 1}, li[3] = {2, 3, 4}, sd[3] = {1, 1, 2};
  tpuir_val sl = tpuir_slice(g, x, st, li, sd);                   /* [2,2,2] */
  int64_t rvd[2] = {0, 2};
  tpuir_val rv = tpuir_reverse(g, x, 2, rvd);
  tpuir_val cl[3] = {x, sl, x};
  int64_t cs[3] = {2, 3, 4};
  (void)cs;
  int64_t st2[3] = {0, 0, 0}, li2[3] = {2, 3, 2}, sd2[3] = {1, 1, 1};
  tpuir_val sl2 = tpuir_slice(g, x, st2, li2, sd2);               /* [2,3,2] */
  cl[1] = sl2;
  tpuir_val cc = tpuir_concat(g, 3, cl, 2);                       /* [2,3,10] */
  int64_t lo[3] = {1, -1, 0}, hi[3] = {0, 1, -1}, in[3] = {0, 1, 1};
  tpuir_val pd = tpuir_pad(g, x, tpuir_const_i(g, TPU_I32, -7), lo, hi, in);
  CHECK(pd >= 0);
  tpuir_val outs[5] = {rsh, sl, rv, cc, pd};
  CHECK_OK(tpuir_set_outputs(g, 5, outs));
  int pdn, pdd;
  int64_t pds[TPU_MAX_DIMS];
  CHECK_OK(tpuir_value_info(g, pd, &pdd, &pdn, pds));
  CHECK(pds[0] == 3 && pds[1] == 5 && pds[2] == 6);
  int64_t s_sl[3] = {2, 2, 2}, s_cc[3] = {2, 3, 10};
  tarr O0 = ta_new(TPU_I32, 2, rs), O1 = ta_new(TPU_I32, 3, s_sl),
       O2 = ta_new(TPU_I32, 3, sz), O3 = ta_new(TPU_I32, 3, s_cc),
       O4 = ta_new(TPU_I32, 3, pds);
  tpu_view ov[5] = {O0.v, O1.v, O2.v, O3.v, O4.v};
  CHECK_OK(tpux_run(g, 1, &X.v, 5, ov));
  /* transpose+reshape: O0[a, b*3+c] = x[b, c, a] */
  for (int a = 0; a < 4; a++)
    for (int b = 0; b < 2; b++)
      for (int c = 0; c < 3; c++)
        CHECK(tv_get(&O0.v, a * 6 + b * 3 + c) == b * 12 + c * 4 + a);
  for (int a = 0; a < 2; a++)
    for (int b = 0; b < 2; b++)
      for (int c = 0; c < 2; c++)
        CHECK(tv_get(&O1.v, a * 4 + b * 2 + c) == a * 12 + (1 + b) * 4 + (1 + 2 * c));
  for (int a = 0; a < 2; a++)
    for (int b = 0; b < 3; b++)
      for (int c = 0; c < 4; c++)
        CHECK(tv_get(&O2.v, a * 12 + b * 4 + c) == (1 - a) * 12 + b * 4 + (3 - c));
  for (int a = 0; a < 2; a++)
    for (int b = 0; b < 3; b++)
      for (int c = 0; c < 10; c++) {
        double want = c < 4 ? a * 12 + b * 4 + c
                    : c < 6 ? a * 12 + b * 4 + (c - 4) : a * 12 + b * 4 + (c - 6);
        CHECK(tv_get(&O3.v, a * 30 + b * 10 + c) == want);
      }
  /* pad: out[i,j,k]; source (i-1, (j+1)/2 if odd.., k/2 if even) */
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 5; j++)
      for (int k = 0; k < 6; k++) {
        int si = i - 1, pj = j + 1, pk = k;
        double want = -7;
        if (si >= 0 && pj % 2 == 0 && pj / 2 < 3 && pk % 2 == 0 && pk / 2 < 4)
          want = si * 12 + (pj / 2) * 4 + pk / 2;
        CHECK(tv_get(&O4.v, i * 30 + j * 6 + k) == want);
      }
  free(X.mem); free(O0.mem); free(O1.mem); free(O2.mem); free(O3.mem); free(O4.mem);
  tpuir_graph_free(g);
}

TPU_TEST(exec_reshape_views) {
  /* reshape of a sliced / broadcast view keeps working (view or copy) */
  int64_t sz[2] = {4, 6};
  tarr X = ta_new(TPU_F64, 2, sz);
  for (int i = 0; i < 24; i++) tv_set(&X.v, i, i * 0.5);
  tpuir_graph *g = tpuir_graph_new();
  tpuir_val x = tpuir_param(g, TPU_F64, 2, sz);
  int64_t st[2] = {1, 0}, li[2] = {3, 6}, sd[2] = {1, 1};
  tpuir_val sl = tpuir_slice(g, x, st, li, sd); /* rows 1..2: contiguous */
  int64_t r1[3] = {2, 2, 3};
  tpuir_val a = tpuir_reshape(g, sl, 3, r1);
  int64_t st2[2] = {0, 1}, li2[2] = {4, 5}, sd2[2] = {2, 2};
  tpuir_val sl2 = tpuir_slice(g, x, st2, li2, sd2); /* [2,2] strided */
  int64_t r2[1] = {4};
  tpuir_val b = tpuir_reshape(g, sl2, 1, r2);
  int64_t bs[3] = {3, 2, 2}, bd[2] = {1, 2};
  tpuir_val bc = tpuir_broadcast_in_dim(g, sl2, 3, bs, bd);
  int64_t r3[2] = {3, 4};
  tpuir_val c = tpuir_reshape(g, bc, 2, r3);
  tpuir_val outs[3] = {a, b, c};
  CHECK_OK(tpuir_set_outputs(g, 3, outs));
  tarr A = ta_new(TPU_F64, 3, r1), B = ta_new(TPU_F64, 1, r2), C = ta_new(TPU_F64, 2, r3);
  tpu_view ov[3] = {A.v, B.v, C.v};
  CHECK_OK(tpux_run(g, 1, &X.v, 3, ov));
  for (int i = 0; i < 12; i++) CHECK(tv_get(&A.v, i) == (6 + i) * 0.5);
  double wb[4] = {1 * 0.5, 3 * 0.5, 13 * 0.5, 15 * 0.5};
  for (int i = 0; i < 4; i++) CHECK(tv_get(&B.v, i) == wb[i]);
  for (int i = 0; i < 12; i++) CHECK(tv_get(&C.v, i) == wb[i % 4]);
  free(X.mem); free(A.mem); free(B.mem); free(C.mem);
  tpuir_graph_free(g);
}

/* ---- strided inputs and outputs -------------------------------------------- */

TPU_TEST(exec_strided_inputs_outputs) {
  /* input: column-major view with a zero-stride dim; output: strided slice */
  int64_t sz[3] = {3, 4, 5};
  double buf[4 * 5 * 2];
  for (int i = 0; i < 40; i++) buf[i] = i;
  tpu_view X;
  memset(&X, 0, sizeof X);
  X.base = buf; X.dtype = TPU_F64; X.ndim = 3; X.offset = 1;
  X.sizes[0] = 3; X.sizes[1] = 4; X.sizes[2] = 5;
  X.strides[0] = 0; X.strides[1] = 1; X.strides[2] = 8; /* x[i,j,k] = buf[1+j+8k] */
  double obuf[3 * 4 * 5 * 3];
  for (int i = 0; i < 180; i++) obuf[i] = -1;
  tpu_view O;
  memset(&O, 0, sizeof O);
  O.base = obuf; O.dtype = TPU_F64; O.ndim = 3; O.offset = 2;
  O.sizes[0] = 3; O.sizes[1] = 4; O.sizes[2] = 5;
  O.strides[0] = 60; O.strides[1] = 15; O.strides[2] = 3;
  tpuir_graph *g = tpuir_graph_new();
  tpuir_val x = tpuir_param(g, TPU_F64, 3, sz);
  tpuir_val r = tpuir_binary(g, TPUIR_MUL, x, x);
  CHECK_OK(run1(g, r, 1, &X, &O));
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 4; j++)
      for (int k = 0; k < 5; k++) {
        double v = 1 + j + 8 * k;
        CHECK(obuf[2 + 60 * i + 15 * j + 3 * k] == v * v);
      }
  int untouched = 0;
  for (int i = 0; i < 180; i++) untouched += obuf[i] == -1;
  CHECK(untouched == 180 - 60);
  tpuir_graph_free(g);
}

/* A view of `mem` with sizes sz whose memory order is `order` (outermost
 * first): dim order[nd-1] has unit stride. */
static tpu_view permuted_view(void *mem, int dt, int nd, const int64_t *sz, const int *order) {
  tpu_view v;
  memset(&v, 0, sizeof v);
  v.base = mem;
  v.dtype = dt;
  v.ndim = nd;
  int64_t st = 1;
  for (int i = nd - 1; i >= 0; i--) {
    v.sizes[order[i]] = sz[order[i]];
    v.strides[order[i]] = st;
    st *= sz[order[i]];
  }
  return v;
}

/* Elementwise programs and copies over every pairing of permuted input and
 * output layouts (the engine walks the dims sorted by the output's
 * strides; a broadcast row and an iota operand ride along): every element
 * checked, the bytes around the output untouched. */
TPU_TEST(exec_permuted_and_transposed_layouts) {
  const int64_t shapes[3][3] = {{2, 64, 96}, {3, 40, 70}, {1, 32, 33}};
  const int orders[4][3] = {{0, 1, 2}, {2, 0, 1}, {1, 2, 0}, {0, 2, 1}};
  for (int sh = 0; sh < 3; sh++)
    for (int xo = 0; xo < 4; xo++)
      for (int oo = 0; oo < 4; oo++) {
        const int64_t *sz = shapes[sh];
        int64_t n = sz[0] * sz[1] * sz[2], bsz[3] = {1, sz[1], 1};
        float *xm = malloc((size_t)n * 4), *bm = malloc((size_t)sz[1] * 4);
        uint16_t *om = malloc((size_t)(n + 64) * 2);
        tpu_view X = permuted_view(xm, TPU_F32, 3, sz, orders[xo]);
        tpu_view B = permuted_view(bm, TPU_F32, 3, bsz, orders[0]);
        for (int64_t i = 0; i < n; i++) tv_set(&X, i, (double)((int64_t)(i * 7919) % 1000) - 500);
        for (int64_t i = 0; i < sz[1]; i++) bm[i] = (float)(i + 1);
        for (int64_t i = 0; i < n + 64; i++) om[i] = 0xdead;
        /* bf16 output (stored through the class buffers), 32 elements in */
        tpu_view O = permuted_view(om + 32, TPU_BF16, 3, sz, orders[oo]);
        tpuir_graph *g = tpuir_graph_new();
        tpuir_val x = tpuir_param(g, TPU_F32, 3, sz);
        tpuir_val b = tpuir_param(g, TPU_F32, 3, bsz);
        int64_t bd[3] = {0, 1, 2};
        tpuir_val r = tpuir_binary(g, TPUIR_MUL, x, tpuir_broadcast_in_dim(g, b, 3, sz, bd));
        r = tpuir_binary(g, TPUIR_ADD, r, tpuir_iota(g, TPU_F32, 3, sz, 2));
        r = tpuir_convert(g, r, TPU_BF16);
        tpu_view ins[2] = {X, B};
        CHECK_OK(run1(g, r, 2, ins, &O));
        int bad = 0;
        for (int64_t i = 0; i < n; i++) {
          int64_t k = i % sz[2], j = (i / sz[2]) % sz[1];
          float want = (float)tv_get(&X, i) * bm[j] + (float)k;
          bad += tv_get(&O, i) != tpu_bf16_to_f32(tpu_f32_to_bf16(want));
        }
        for (int i = 0; i < 32; i++) bad += om[i] != 0xdead || om[n + 32 + i] != 0xdead;
        CHECK(bad == 0);
        tpuir_graph_free(g);
        /* a same-dtype copy (transpose of a permuted input into O's layout) */
        int64_t tsz[3] = {sz[2], sz[1], sz[0]}, perm[3] = {2, 1, 0};
        float *tm = malloc((size_t)n * 4);
        tpu_view T = permuted_view(tm, TPU_F32, 3, tsz, orders[oo]);
        g = tpuir_graph_new();
        x = tpuir_param(g, TPU_F32, 3, sz);
        CHECK_OK(run1(g, tpuir_transpose(g, x, perm), 1, &X, &T));
        for (int64_t i = 0; i < n; i++) {
          int64_t c = i % sz[2], bb = (i / sz[2]) % sz[1], a = i / (sz[1] * sz[2]);
          bad += tv_get(&T, (c * sz[1] + bb) * sz[0] + a) != tv_get(&X, i);
        }
        CHECK(bad == 0);
        tpuir_graph_free(g);
        free(xm);
        free(bm);
        free(om);
        free(tm);
      }
}

/* pad without interior padding: edges, crops, an all-cropped input, a
 * zero (memset fill) and a nonzero value; every output element checked. */
TPU_TEST(exec_pad_slabs) {
  int64_t sz[3] = {4, 5, 6};
  const int64_t cases[3][2][3] = {{{1, -2, 0}, {2, 1, 3}},
                                  {{0, 0, -1}, {0, 3, 0}},
                                  {{1, -6, 0}, {0, 2, 0}}}; /* dim 1 cropped away */
  for (int cs = 0; cs < 3; cs++)
    for (int zero = 0; zero < 2; zero++) {
      const int64_t *lo = cases[cs][0], *hi = cases[cs][1], in[3] = {0, 0, 0};
      float pad = zero ? 0.f : -7.f;
      tpuir_graph *g = tpuir_graph_new();
      tpuir_val x = tpuir_param(g, TPU_F32, 3, sz);
      tpuir_val pd = tpuir_pad(g, x, tpuir_const_f(g, TPU_F32, pad), lo, hi, in);
      int64_t os[3];
      for (int i = 0; i < 3; i++) os[i] = sz[i] + lo[i] + hi[i];
      tarr X = ta_new(TPU_F32, 3, sz), O = ta_new(TPU_F32, 3, os);
      for (int64_t i = 0; i < 120; i++) ((float *)X.mem)[i] = (float)(i + 1);
      for (int64_t i = 0; i < os[0] * os[1] * os[2]; i++) ((float *)O.mem)[i] = 99.f;
      CHECK_OK(run1(g, pd, 1, &X.v, &O.v));
      int bad = 0;
      for (int64_t i = 0; i < os[0]; i++)
        for (int64_t j = 0; j < os[1]; j++)
          for (int64_t k = 0; k < os[2]; k++) {
            int64_t si = i - lo[0], sj = j - lo[1], sk = k - lo[2];
            float want = si >= 0 && si < sz[0] && sj >= 0 && sj < sz[1] && sk >= 0 && sk < sz[2]
                             ? (float)(si * 30 + sj * 6 + sk + 1) : pad;
            bad += ((float *)O.mem)[(i * os[1] + j) * os[2] + k] != want;
          }
      CHECK(bad == 0);
      free(X.mem);
      free(O.mem);
      tpuir_graph_free(g);
    }
}

/* Fills (a broadcast scalar copied into a view: zeros, pad values): zero
 * bytes through memset, others stored, long flat ones shared out in rows
 * of 16K with a tail; every element and the bytes around checked. */
TPU_TEST(exec_fill_views) {
  const int dts[4] = {TPU_F32, TPU_BF16, TPU_I64, TPU_BOOL};
  const double vals[2] = {0, 3};
  for (int di = 0; di < 4; di++)
    for (int vi = 0; vi < 2; vi++)
      for (int strided = 0; strided < 2; strided++) {
        int dt = dts[di];
        int64_t es = (int64_t)tpu_dtype_size(dt), n = 100003, cols = 1001, ld = 1003;
        int64_t rows = n / cols, span = strided ? rows * ld : n;
        char *mem = malloc((size_t)((span + 64) * es));
        memset(mem, 0x5a, (size_t)((span + 64) * es));
        tpu_view D;
        memset(&D, 0, sizeof D);
        D.base = mem;
        D.offset = 32;
        D.dtype = dt;
        if (strided) {
          D.ndim = 2;
          D.sizes[0] = rows; D.sizes[1] = cols;
          D.strides[0] = ld; D.strides[1] = 1;
        } else {
          D.ndim = 1;
          D.sizes[0] = n; D.strides[0] = 1;
        }
        char one[8] = {0};
        tpu_view S = D;
        S.base = one;
        S.offset = 0;
        for (int i = 0; i < S.ndim; i++) S.strides[i] = 0;
        tv_set(&S, 0, vals[vi]);
        CHECK_OK(tpux_copy(&D, &S));
        int64_t numel = strided ? rows * cols : n, bad = 0;
        double want = tv_get(&S, 0); /* the value in dt (bool: 1) */
        for (int64_t i = 0; i < numel; i++) bad += tv_get(&D, i) != want;
        for (int64_t b = 0; b < 32 * es; b++)
          bad += mem[b] != 0x5a || mem[(32 + span) * es + b] != 0x5a;
        if (strided) /* the gaps between rows */
          for (int64_t r = 0; r + 1 < rows; r++)
            for (int64_t b = cols * es; b < ld * es; b++) bad += mem[(32 + r * ld) * es + b] != 0x5a;
        CHECK(bad == 0);
        free(mem);
      }
}

TPU_TEST(exec_large_elementwise_parallel) {
  /* 1M+ elements, broadcast row + scalar, bf16 output */
  int64_t sz[2] = {1031, 1029}, row[1] = {1029};
  tpuir_graph *g = tpuir_graph_new();
  tpuir_val x = tpuir_param(g, TPU_F32, 2, sz);
  tpuir_val b = tpuir_param(g, TPU_F32, 1, row);
  int64_t d1[1] = {1};
  tpuir_val t = tpuir_binary(g, TPUIR_MUL, x, tpuir_broadcast_in_dim(g, b, 2, sz, d1));
  t = tpuir_unary(g, TPUIR_TANH, t);
  t = tpuir_convert(g, t, TPU_BF16);
  tarr X = ta_new(TPU_F32, 2, sz), B = ta_new(TPU_F32, 1, row), O = ta_new(TPU_BF16, 2, sz);
  uint64_t seed = 5;
  ta_fill(&X.v, &seed, -2, 2);
  ta_fill(&B.v, &seed, -2, 2);
  tpu_view ins[2] = {X.v, B.v};
  CHECK_OK(run1(g, t, 2, ins, &O.v));
  const float *xp = X.mem, *bp = B.mem;
  const uint16_t *op = O.mem;
  for (int64_t i = 0; i < sz[0] * sz[1]; i += 7) {
    float want = tanhf(xp[i] * bp[i % 1029]);
    CHECK(fabsf(tpu_bf16_to_f32(op[i]) - tpu_bf16_to_f32(tpu_f32_to_bf16(want))) <= 0.0079f);
  }
  free(X.mem); free(B.mem); free(O.mem);
  tpuir_graph_free(g);
}

/* A float32 operand broadcast along rows ([R] -> [R, C]: x - mean over
 * rows) read by the tile engine as a per-tile scalar: as operand b and a,
 * read by two instructions, read after its buffer is rewritten, and where
 * an instruction cannot take it so (a fused pair); rows of one tile,
 * several with a tail, and short rows that run linear tiles. Every
 * element exact against the same float arithmetic. */
TPU_TEST(exec_row_broadcast_scalars) {
  static const int64_t cols[] = {300, 1024, 2051, 40003};
  for (int ci = 0; ci < 4; ci++)
    for (int form = 0; form < 5; form++) {
      int64_t sz[2] = {5, cols[ci]}, rs[1] = {5}, n = sz[0] * sz[1];
      tpuir_graph *g = tpuir_graph_new();
      tpuir_val x = tpuir_param(g, TPU_F32, 2, sz), mp = tpuir_param(g, TPU_F32, 1, rs);
      int64_t d0[1] = {0};
      tpuir_val m = tpuir_broadcast_in_dim(g, mp, 2, sz, d0), r;
      switch (form) {
      case 0: r = tpuir_binary(g, TPUIR_SUB, x, m); break;
      case 1: r = tpuir_binary(g, TPUIR_DIV, m, x); break;
      case 2: /* two readers, the second one after a unary */
        r = tpuir_binary(g, TPUIR_MUL, tpuir_unary(g, TPUIR_NEG, tpuir_binary(g, TPUIR_SUB, x, m)), m);
        break;
      case 3: /* a fused pair (x - m) * m: read as a tile */
        r = tpuir_binary(g, TPUIR_MUL, tpuir_binary(g, TPUIR_SUB, x, m), m);
        break;
      default: r = tpuir_binary(g, TPUIR_MAX, tpuir_binary(g, TPUIR_ADD, x, x), m); break;
      }
      tarr X = ta_new(TPU_F32, 2, sz), M = ta_new(TPU_F32, 1, rs), O = ta_new(TPU_F32, 2, sz);
      uint64_t seed = 11 + (uint64_t)form;
      ta_fill(&X.v, &seed, -3, 3);
      ta_fill(&M.v, &seed, -3, 3);
      tpu_view ins[2] = {X.v, M.v};
      CHECK_OK(run1(g, r, 2, ins, &O.v));
      const float *xp = X.mem, *mv = M.mem, *op = O.mem;
      int64_t bad = 0;
      for (int64_t i = 0; i < n; i++) {
        float a = xp[i], b = mv[i / sz[1]], want;
        switch (form) {
        case 0: want = a - b; break;
        case 1: want = b / a; break;
        case 2: want = -(a - b) * b; break;
        case 3: want = (a - b) * b; break;
        default: want = a + a > b ? a + a : b; break;
        }
        bad += memcmp(&want, &op[i], 4) != 0;
      }
      if (bad) fprintf(stderr, "  cols %lld form %d: %lld wrong\n", (long long)sz[1], form, (long long)bad);
      CHECK(bad == 0);
      free(X.mem);
      free(M.mem);
      free(O.mem);
      tpuir_graph_free(g);
    }
}

/* ---- errors ----------------------------------------------------------------- */

TPU_TEST(exec_int_errors_leave_output) {
  int64_t sz[1] = {4};
  int32_t a[4] = {1, 2, 3, 4}, b[4] = {1, 0, 1, 1}, o[4] = {9, 9, 9, 9};
  tpu_view A, B, O;
  tpu_view_init_contiguous(&A, a, TPU_I32, 1, sz);
  tpu_view_init_contiguous(&B, b, TPU_I32, 1, sz);
  tpu_view_init_contiguous(&O, o, TPU_I32, 1, sz);
  for (int op = TPUIR_DIV; op <= TPUIR_REM; op++) {
    tpuir_graph *g = tpuir_graph_new();
    tpuir_val p0 = tpuir_param(g, TPU_I32, 1, sz);
    tpuir_val p1 = tpuir_param(g, TPU_I32, 1, sz);
    tpuir_val r = tpuir_binary(g, op, p0, p1);
    tpu_view ins[2] = {A, B};
    CHECK(run1(g, r, 2, ins, &O) == TPU_E_INVALID);
    CHECK(strstr(tpu_last_error(), "ZeroDivisionError"));
    for (int i = 0; i < 4; i++) CHECK(o[i] == 9);
    tpuir_graph_free(g);
  }
  /* negative integer power */
  b[1] = -2;
  tpuir_graph *g = tpuir_graph_new();
  tpuir_val p0 = tpuir_param(g, TPU_I32, 1, sz);
  tpuir_val p1 = tpuir_param(g, TPU_I32, 1, sz);
  tpuir_val r = tpuir_binary(g, TPUIR_POW, p0, p1);
  tpu_view ins[2] = {A, B};
  CHECK(run1(g, r, 2, ins, &O) == TPU_E_INVALID);
  CHECK(strstr(tpu_last_error(), "negative integer powers"));
  for (int i = 0; i < 4; i++) CHECK(o[i] == 9);
  tpuir_graph_free(g);
  /* INT64_MIN / -1 and % -1 do not trap */
  int64_t x[2] = {INT64_MIN, 7}, y[2] = {-1, -1}, q[2];
  int64_t s2[1] = {2};
  tpu_view X, Y, Q;
  tpu_view_init_contiguous(&X, x, TPU_I64, 1, s2);
  tpu_view_init_contiguous(&Y, y, TPU_I64, 1, s2);
  tpu_view_init_contiguous(&Q, q, TPU_I64, 1, s2);
  g = tpuir_graph_new();
  p0 = tpuir_param(g, TPU_I64, 1, s2);
  p1 = tpuir_param(g, TPU_I64, 1, s2);
  r = tpuir_binary(g, TPUIR_DIV, p0, p1);
  tpuir_val r2 = tpuir_binary(g, TPUIR_REM, 0, 1);
  tpuir_val outs[2] = {r, r2};
  CHECK_OK(tpuir_set_outputs(g, 2, outs));
  int64_t q2[2];
  tpu_view Q2;
  tpu_view_init_contiguous(&Q2, q2, TPU_I64, 1, s2);
  tpu_view ins2[2] = {X, Y}, ov[2] = {Q, Q2};
  CHECK_OK(tpux_run(g, 2, ins2, 2, ov));
  CHECK(q[0] == INT64_MIN && q[1] == -7 && q2[0] == 0 && q2[1] == 0);
  tpuir_graph_free(g);
}

TPU_TEST(exec_binding_errors) {
  int64_t sz[1] = {4}, sz5[1] = {5};
  tpuir_graph *g = tpuir_graph_new();
  tpuir_val r = tpuir_unary(g, TPUIR_NEG, tpuir_param(g, TPU_F32, 1, sz));
  CHECK_OK(tpuir_set_outputs(g, 1, &r));
  float a[5], o[5];
  tpu_view A, O, A5, Ai;
  tpu_view_init_contiguous(&A, a, TPU_F32, 1, sz);
  tpu_view_init_contiguous(&O, o, TPU_F32, 1, sz);
  tpu_view_init_contiguous(&A5, a, TPU_F32, 1, sz5);
  tpu_view_init_contiguous(&Ai, a, TPU_I32, 1, sz);
  CHECK(tpux_run(g, 0, NULL, 1, &O) == TPU_E_INVALID);
  CHECK(tpux_run(g, 1, &A, 0, NULL) == TPU_E_INVALID);
  CHECK(tpux_run(g, 1, &A5, 1, &O) == TPU_E_INVALID);
  CHECK(tpux_run(g, 1, &Ai, 1, &O) == TPU_E_TYPE);
  CHECK(tpux_run(g, 1, &A, 1, &A5) == TPU_E_INVALID);
  tpuir_graph_free(g);
}

/* ---- aliasing ---------------------------------------------------------------- */

TPU_TEST(exec_inplace_aliasing) {
  int64_t sz[2] = {16, 16};
  uint64_t seed = 3;
  /* out aliases in: x = x * 2 + 1 (direct write path) */
  tarr X = ta_new(TPU_F32, 2, sz), ref = ta_new(TPU_F32, 2, sz);
  ta_fill(&X.v, &seed, -5, 5);
  memcpy(ref.mem, X.mem, 256 * 4);
  tpuir_graph *g = tpuir_graph_new();
  tpuir_val x = tpuir_param(g, TPU_F32, 2, sz);
  tpuir_val two = tpuir_broadcast_in_dim(g, tpuir_const_f(g, TPU_F32, 2), 2, sz, NULL);
  tpuir_val one = tpuir_broadcast_in_dim(g, tpuir_const_f(g, TPU_F32, 1), 2, sz, NULL);
  tpuir_val r = tpuir_binary(g, TPUIR_ADD, tpuir_binary(g, TPUIR_MUL, x, two), one);
  CHECK_OK(run1(g, r, 1, &X.v, &X.v));
  for (int i = 0; i < 256; i++) CHECK(((float *)X.mem)[i] == ((float *)ref.mem)[i] * 2 + 1);
  tpuir_graph_free(g);
  /* in-place transpose: x = x.T + x (output overlaps a differently-strided operand) */
  memcpy(ref.mem, X.mem, 256 * 4);
  g = tpuir_graph_new();
  x = tpuir_param(g, TPU_F32, 2, sz);
  int64_t perm[2] = {1, 0};
  r = tpuir_binary(g, TPUIR_ADD, tpuir_transpose(g, x, perm), x);
  CHECK_OK(run1(g, r, 1, &X.v, &X.v));
  const float *rp = ref.mem, *xp = X.mem;
  for (int i = 0; i < 16; i++)
    for (int j = 0; j < 16; j++) CHECK(xp[i * 16 + j] == rp[j * 16 + i] + rp[i * 16 + j]);
  tpuir_graph_free(g);
  /* output = transpose(x) written onto x itself (pure view output) */
  memcpy(ref.mem, X.mem, 256 * 4);
  g = tpuir_graph_new();
  x = tpuir_param(g, TPU_F32, 2, sz);
  r = tpuir_transpose(g, x, perm);
  CHECK_OK(run1(g, r, 1, &X.v, &X.v));
  for (int i = 0; i < 16; i++)
    for (int j = 0; j < 16; j++) CHECK(xp[i * 16 + j] == rp[j * 16 + i]);
  tpuir_graph_free(g);
  /* two outputs: (x + 1 -> into x, old x -> into y); y must see the old x */
  memcpy(ref.mem, X.mem, 256 * 4);
  tarr Y = ta_new(TPU_F32, 2, sz);
  g = tpuir_graph_new();
  x = tpuir_param(g, TPU_F32, 2, sz);
  one = tpuir_broadcast_in_dim(g, tpuir_const_f(g, TPU_F32, 1), 2, sz, NULL);
  r = tpuir_binary(g, TPUIR_ADD, x, one);
  tpuir_val outs[2] = {r, x};
  CHECK_OK(tpuir_set_outputs(g, 2, outs));
  tpu_view ov[2] = {X.v, Y.v};
  CHECK_OK(tpux_run(g, 1, &X.v, 2, ov));
  for (int i = 0; i < 256; i++) {
    CHECK(xp[i] == rp[i] + 1);
    CHECK(((float *)Y.mem)[i] == rp[i]);
  }
  /* same with the outputs swapped and a later reader of x */
  memcpy(ref.mem, X.mem, 256 * 4);
  tpuir_graph_free(g);
  g = tpuir_graph_new();
  x = tpuir_param(g, TPU_F32, 2, sz);
  one = tpuir_broadcast_in_dim(g, tpuir_const_f(g, TPU_F32, 1), 2, sz, NULL);
  r = tpuir_binary(g, TPUIR_ADD, x, one);
  tpuir_val r2 = tpuir_binary(g, TPUIR_MUL, x, x);
  tpuir_val outs2[3] = {r, r2, r};
  CHECK_OK(tpuir_set_outputs(g, 3, outs2));
  tarr Z = ta_new(TPU_F32, 2, sz);
  tpu_view ov2[3] = {X.v, Y.v, Z.v};
  CHECK_OK(tpux_run(g, 1, &X.v, 3, ov2));
  for (int i = 0; i < 256; i++) {
    CHECK(xp[i] == rp[i] + 1);
    CHECK(((float *)Y.mem)[i] == rp[i] * rp[i]);
    CHECK(((float *)Z.mem)[i] == rp[i] + 1);
  }
  tpuir_graph_free(g);
  free(X.mem); free(ref.mem); free(Y.mem); free(Z.mem);
}

/* A program whose 4 MiB values are materialised (read after a reduction
 * closes their region) runs on reused temporaries, and again after
 * tpux_trim_temporaries returned them: the same bytes every time. */
TPU_TEST(exec_temporaries_reused_and_trimmed) {
  int64_t sz[2] = {1024, 1024}, d1[1] = {1};
  tpuir_graph *g = tpuir_graph_new();
  tpuir_val x = tpuir_param(g, TPU_F32, 2, sz);
  tpuir_val t = tpuir_unary(g, TPUIR_EXP, tpuir_binary(g, TPUIR_MUL, x, x));
  tpuir_val r = tpuir_reduce(g, TPUIR_RED_SUM, t, 1, d1);
  int64_t d0[1] = {0};
  tpuir_val o = tpuir_binary(g, TPUIR_DIV, t, tpuir_broadcast_in_dim(g, r, 2, sz, d0));
  CHECK_OK(tpuir_set_outputs(g, 1, &o));
  tarr X = ta_new(TPU_F32, 2, sz), O = ta_new(TPU_F32, 2, sz), P = ta_new(TPU_F32, 2, sz);
  uint64_t seed = 8;
  ta_fill(&X.v, &seed, -1, 1);
  tpux_plan *p = NULL;
  CHECK_OK(tpux_plan_new(g, &p));
  CHECK_OK(tpux_plan_run(p, 1, &X.v, 1, &O.v));
  for (int k = 0; k < 3; k++) {
    if (k == 1) tpux_trim_temporaries();
    memset(P.mem, 0, (size_t)(sz[0] * sz[1]) * 4);
    CHECK_OK(tpux_plan_run(p, 1, &X.v, 1, &P.v));
    CHECK(memcmp(O.mem, P.mem, (size_t)(sz[0] * sz[1]) * 4) == 0);
  }
  const float *xp = X.mem, *op = O.mem;
  for (int i = 0; i < 1024; i += 97) {
    double sum = 0;
    for (int j = 0; j < 1024; j++) sum += exp((double)xp[i * 1024 + j] * xp[i * 1024 + j]);
    CHECK(fabs(op[i * 1024 + 5] - exp((double)xp[i * 1024 + 5] * xp[i * 1024 + 5]) / sum) < 1e-7);
  }
  tpux_plan_free(p);
  tpuir_graph_free(g);
  free(X.mem); free(O.mem); free(P.mem);
}

/* A dot whose value is an output is computed straight into it (and its
 * users read it there) unless the destination overlaps an operand or is
 * not contiguous: Y = X W (DEFAULT: X is rounded while the GEMM packs it)
 * and Z = 2 Y bound to fresh, offset, strided and X-aliasing (in place)
 * destinations all give the reference. */
TPU_TEST(exec_dot_output_destinations) {
  enum { N = 384 };
  int64_t sz[2] = {N, N}, c1 = 1, c0 = 0;
  tpuir_graph *g = tpuir_graph_new();
  tpuir_val X = tpuir_param(g, TPU_F32, 2, sz), W = tpuir_param(g, TPU_F32, 2, sz);
  tpuir_val Y = tpuir_dot_general(g, X, W, 0, NULL, NULL, 1, &c1, &c0, TPU_PREC_DEFAULT, TPU_F32);
  tpuir_val Z = tpuir_binary(g, TPUIR_ADD, Y, Y);
  tpuir_val outs[2] = {Y, Z};
  CHECK_OK(tpuir_set_outputs(g, 2, outs));
  tpux_plan *p = NULL;
  CHECK_OK(tpux_plan_new(g, &p));
  uint64_t seed = 31;
  for (int mode = 0; mode < 3; mode++) { /* 0 fresh+offset, 1 strided, 2 Y over X */
    float *xb = malloc((N * N + 16) * sizeof(float)), *w = malloc(N * N * sizeof(float));
    float *yb = calloc(2 * N * N + 16, sizeof(float)), *z = calloc(N * N, sizeof(float));
    tarr tmp = ta_new(TPU_F32, 2, sz);
    ta_fill(&tmp.v, &seed, -1, 1);
    memcpy(xb + 8, tmp.mem, N * N * sizeof(float));
    ta_fill(&tmp.v, &seed, -1, 1);
    memcpy(w, tmp.mem, N * N * sizeof(float));
    free(tmp.mem);
    static double ref[N * N];
    for (int i = 0; i < N; i++)
      for (int j = 0; j < N; j++) {
        double acc = 0;
        for (int k = 0; k < N; k++)
          acc += (double)tpu_bf16_to_f32(tpu_f32_to_bf16(xb[8 + i * N + k])) *
                 tpu_bf16_to_f32(tpu_f32_to_bf16(w[k * N + j]));
        ref[i * N + j] = acc;
      }
    tpu_view xv, wv, yv, zv;
    tpu_view_init_contiguous(&xv, xb, TPU_F32, 2, sz);
    xv.offset = 8;
    tpu_view_init_contiguous(&wv, w, TPU_F32, 2, sz);
    tpu_view_init_contiguous(&zv, z, TPU_F32, 2, sz);
    yv = mode == 2 ? xv : (tpu_view){0};
    if (mode < 2) {
      tpu_view_init_contiguous(&yv, yb, TPU_F32, 2, sz);
      yv.offset = 5;
      if (mode == 1) yv.strides[0] = 2 * N; /* every other row */
    }
    tpu_view ins[2] = {xv, wv}, ov[2] = {yv, zv};
    CHECK_OK(tpux_plan_run(p, 2, ins, 2, ov));
    double worst = 0;
    for (int i = 0; i < N * N; i++) {
      float *yp = (float *)yv.base + yv.offset + (i / N) * yv.strides[0] + i % N;
      worst = fmax(worst, fabs(*yp - ref[i]));
      worst = fmax(worst, fabs(z[i] - 2 * ref[i]));
    }
    if (worst > 2e-4) fprintf(stderr, "dot output mode %d: error %g\n", mode, worst);
    CHECK(worst <= 2e-4);
    for (int i = 0; i < 5 && mode < 2; i++) CHECK(yb[i] == 0); /* before the offset */
    free(xb); free(w); free(yb); free(z);
  }
  tpux_plan_free(p);
  tpuir_graph_free(g);
}

/* Outputs of nodes that write their value whole (index_select, concat,
 * ...: tpux__writes_whole_value) go straight into their destination like a
 * dot's, and are read there by later users; not when the destination is
 * strided or overlaps an operand read at or after the node. S = X[:, idx]
 * (index_select along the last dim: one element per index), Q = cat(X, X)
 * and Z = S + S, with destinations fresh and offset (0), S strided (1), S
 * over X (2, in place), Q over X (3): every output equals the reference
 * computed from X's old contents; only the refused destination is written
 * by an output copy (step profile). */
TPU_TEST(exec_whole_value_output_destinations) {
  enum { R = 64, C = 96, K = 150 };
  int64_t xs[2] = {R, C}, ss[2] = {R, K}, qs[2] = {2 * R, C}, ks[1] = {K};
  tpuir_graph *g = tpuir_graph_new();
  tpuir_val X = tpuir_param(g, TPU_F32, 2, xs), I = tpuir_param(g, TPU_I64, 1, ks);
  tpuir_val S = tpuir_index_select(g, X, 1, I);
  tpuir_val xx[2] = {X, X};
  tpuir_val Q = tpuir_concat(g, 2, xx, 0);
  tpuir_val Z = tpuir_binary(g, TPUIR_ADD, S, S);
  tpuir_val outs[3] = {S, Q, Z};
  CHECK_OK(tpuir_set_outputs(g, 3, outs));
  tpux_plan *p = NULL;
  CHECK_OK(tpux_plan_new(g, &p));
  uint64_t seed = 5;
  int64_t idx[K];
  for (int k = 0; k < K; k++) idx[k] = (int64_t)(trand_next(&seed) % C);
  for (int mode = 0; mode < 4; mode++) {
    /* X (at offset 3) and room for an S or Q written over it */
    float *xb = calloc(3 + 2 * R * K + 2 * R * C, sizeof(float)), x0[R * C];
    float *sb = calloc(8 + 2 * R * K, sizeof(float)), *qb = calloc(8 + 2 * R * C, sizeof(float));
    float *zb = calloc(R * K, sizeof(float));
    for (int i = 0; i < R * C; i++) x0[i] = xb[3 + i] = (float)trand(&seed, -4, 4);
    tpu_view xv, iv, sv, qv, zv;
    tpu_view_init_contiguous(&xv, xb, TPU_F32, 2, xs);
    xv.offset = 3;
    tpu_view_init_contiguous(&iv, idx, TPU_I64, 1, ks);
    tpu_view_init_contiguous(&sv, sb, TPU_F32, 2, ss);
    tpu_view_init_contiguous(&qv, qb, TPU_F32, 2, qs);
    tpu_view_init_contiguous(&zv, zb, TPU_F32, 2, ss);
    sv.offset = qv.offset = 8;
    if (mode == 1) sv.strides[0] = 2 * K; /* every other row */
    if (mode == 2) sv.base = xb, sv.offset = 3;
    if (mode == 3) qv.base = xb, qv.offset = 3;
    tpu_view ins[2] = {xv, iv}, ov[3] = {sv, qv, zv};
    tpux_profile_read(NULL, 0, 1);
    tpux_profile_enable(1);
    CHECK_OK(tpux_plan_run(p, 2, ins, 3, ov));
    tpux_profile_enable(0);
    tpux_profile_entry e[64];
    int ne = tpux_profile_read(e, 64, 1), copies = 0;
    for (int i = 0; i < ne && i < 64; i++)
      if (strstr(e[i].label, "(output copy)")) copies += (int)e[i].count;
    CHECK(copies == (mode == 0 ? 0 : 1)); /* the refused destination gets a copy */
    int bad = 0;
    for (int i = 0; i < R && !bad; i++)
      for (int k = 0; k < K && !bad; k++) {
        float want = x0[i * C + idx[k]];
        bad = ((float *)sv.base)[sv.offset + i * sv.strides[0] + k] != want ||
              zb[i * K + k] != want + want;
      }
    for (int i = 0; i < 2 * R * C && !bad; i++)
      bad = ((float *)qv.base)[qv.offset + i] != x0[i % (R * C)];
    if (bad) fprintf(stderr, "whole-value outputs, mode %d: wrong values\n", mode);
    CHECK(!bad);
    for (int i = 0; i < 8 && mode < 2; i++) CHECK(sb[i] == 0 && qb[i] == 0); /* before the offset */
    free(xb); free(sb); free(qb); free(zb);
  }
  tpux_plan_free(p);
  tpuir_graph_free(g);
}

/* index_select and gather along the last dim (one element per index, a
 * typed load and store per index: 1, 2, 4, 8 and 16 bytes; gather's
 * indices a strided view) against a reference, on a transposed (strided)
 * operand. */
TPU_TEST(exec_index_select_last_dim_dtypes) {
  const int dts[5] = {TPU_BOOL, TPU_BF16, TPU_F32, TPU_I64, TPU_C128};
  int64_t xs[3] = {3, 40, 50}, ks[1] = {77};
  for (int q = 0; q < 5; q++) {
    int dt = dts[q];
    size_t es = tpu_dtype_size(dt);
    uint64_t seed = 17 + q;
    unsigned char *am = malloc(3 * 40 * 50 * es), *om = malloc(3 * 50 * 77 * es);
    unsigned char *gm = malloc(3 * 50 * 77 * es);
    for (size_t i = 0; i < 3 * 40 * 50 * es; i++) am[i] = (unsigned char)trand_next(&seed);
    if (dt == TPU_BOOL)
      for (size_t i = 0; i < 3 * 40 * 50; i++) am[i] &= 1;
    tpu_view at; /* [3, 50, 40]: the last two dims of a [3, 40, 50] array swapped */
    tpu_view_init_contiguous(&at, am, dt, 3, xs);
    at.sizes[1] = 50; at.sizes[2] = 40; at.strides[1] = 1; at.strides[2] = 50;
    int64_t ts[3] = {3, 50, 40}, os[3] = {3, 50, 77};
    tarr I = ta_new(TPU_I64, 1, ks);
    int64_t gs[3] = {77, 50, 3};
    tarr G = ta_new(TPU_I64, 3, gs); /* gather's indices: [3, 50, 77] through a transpose */
    tpu_view gi = G.v, ov, gv;
    gi.sizes[0] = 3; gi.sizes[2] = 77; gi.strides[0] = 1; gi.strides[2] = 150;
    tpu_view_init_contiguous(&ov, om, dt, 3, os);
    tpu_view_init_contiguous(&gv, gm, dt, 3, os);
    for (int k = 0; k < 77; k++) tv_seti(&I.v, k, (int64_t)(trand_next(&seed) % 40));
    for (int64_t i = 0; i < 3 * 50 * 77; i++) tv_seti(&gi, i, (int64_t)(trand_next(&seed) % 40));
    tpuir_graph *g = tpuir_graph_new();
    tpuir_val X = tpuir_param(g, dt, 3, ts), Ix = tpuir_param(g, TPU_I64, 1, ks);
    tpuir_val Gx = tpuir_param(g, TPU_I64, 3, os);
    tpuir_val outs[2] = {tpuir_index_select(g, X, 2, Ix), tpuir_gather(g, X, 2, Gx)};
    CHECK_OK(tpuir_set_outputs(g, 2, outs));
    tpu_view ins[3] = {at, I.v, gi}, ovs[2] = {ov, gv};
    CHECK_OK(tpux_run(g, 3, ins, 2, ovs));
    int bad = 0;
    for (int64_t i = 0; i < 3 * 50 && !bad; i++)
      for (int k = 0; k < 77 && !bad; k++) {
        int64_t b = i / 50, r = i % 50, c = tv_geti(&I.v, k), cg = tv_geti(&gi, i * 77 + k);
        int64_t so = b * at.strides[0] + r * at.strides[1] + c * at.strides[2];
        int64_t sg = b * at.strides[0] + r * at.strides[1] + cg * at.strides[2];
        bad = memcmp(am + so * (int64_t)es, om + (i * 77 + k) * (int64_t)es, es) != 0 ||
              memcmp(am + sg * (int64_t)es, gm + (i * 77 + k) * (int64_t)es, es) != 0;
      }
    if (bad) fprintf(stderr, "index_select/gather last dim, %s: wrong values\n", tpu_dtype_name(dt));
    CHECK(!bad);
    tpuir_graph_free(g);
    free(am); free(om); free(gm); free(I.mem); free(G.mem);
  }
}

/* ---- tpux_copy ---------------------------------------------------------------- */

TPU_TEST(exec_copy_convert_and_overlap) {
  int64_t sz[2] = {70, 90};
  tarr A = ta_new(TPU_F32, 2, sz);
  uint64_t seed = 11;
  ta_fill(&A.v, &seed, -100, 100);
  /* transposing copy with conversion to f16 */
  int64_t tz[2] = {90, 70};
  tarr T = ta_new(TPU_F16, 2, tz);
  tpu_view Tt = T.v;
  Tt.sizes[0] = 70; Tt.sizes[1] = 90; Tt.strides[0] = 1; Tt.strides[1] = 70;
  CHECK_OK(tpux_copy(&Tt, &A.v));
  for (int i = 0; i < 70 * 90; i++)
    CHECK(tv_get(&Tt, i) == round_to(TPU_F16, tv_get(&A.v, i)));
  /* same-dtype transposing copy (blocked path) */
  tarr T2 = ta_new(TPU_F32, 2, tz);
  tpu_view T2t = T2.v;
  T2t.sizes[0] = 70; T2t.sizes[1] = 90; T2t.strides[0] = 1; T2t.strides[1] = 70;
  CHECK_OK(tpux_copy(&T2t, &A.v));
  for (int i = 0; i < 70 * 90; i++) CHECK(tv_get(&T2t, i) == tv_get(&A.v, i));
  /* overlapping shift: a[1:] = a[:-1] */
  int64_t n[1] = {1000};
  tarr B = ta_new(TPU_I64, 1, n);
  for (int i = 0; i < 1000; i++) ((int64_t *)B.mem)[i] = i;
  tpu_view d = B.v, s = B.v;
  d.sizes[0] = s.sizes[0] = 999;
  d.offset = 1;
  CHECK_OK(tpux_copy(&d, &s));
  CHECK(((int64_t *)B.mem)[0] == 0);
  for (int i = 1; i < 1000; i++) CHECK(((int64_t *)B.mem)[i] == i - 1);
  /* big contiguous copy */
  int64_t big[1] = {3 << 20};
  tarr C = ta_new(TPU_I8, 1, big), D = ta_new(TPU_I8, 1, big);
  for (int64_t i = 0; i < big[0]; i++) ((int8_t *)C.mem)[i] = (int8_t)(i * 7);
  CHECK_OK(tpux_copy(&D.v, &C.v));
  CHECK(memcmp(C.mem, D.mem, (size_t)big[0]) == 0);
  /* mismatched sizes */
  CHECK(tpux_copy(&A.v, &T.v) == TPU_E_INVALID);
  free(A.mem); free(T.mem); free(T2.mem); free(B.mem); free(C.mem); free(D.mem);
}

/* Same-dtype copies of permuted, reversed and offset views (ranks 2-4,
 * sizes around the 32x32 transpose blocks, element sizes 1-16 bytes)
 * against a byte-wise reference; the bytes around the destination stay. */
TPU_TEST(exec_copy_permutations) {
  static const int dts[5] = {TPU_I8, TPU_BF16, TPU_F32, TPU_I64, TPU_C128};
  static const int64_t dimsz[6] = {1, 5, 31, 32, 33, 70};
  uint64_t seed = 77;
  for (int trial = 0; trial < 120; trial++) {
    int dt = dts[trial % 5], nd = 2 + (int)(trial / 5 % 3);
    int64_t es = (int64_t)tpu_dtype_size(dt), sz[4], n = 1;
    for (int d = 0; d < nd; d++) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      sz[d] = d >= nd - 2 ? dimsz[2 + (seed >> 33) % 4] : dimsz[(seed >> 40) % 4];
      n *= sz[d];
    }
    /* source: a contiguous buffer of the permuted shape, seen through a
     * permutation, one dim reversed */
    int perm[4] = {0, 1, 2, 3};
    for (int d = nd - 1; d > 0; d--) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      int k = (int)((seed >> 33) % (uint64_t)(d + 1)), t = perm[d];
      perm[d] = perm[k];
      perm[k] = t;
    }
    /* even trials: the source's last dim is not its contiguous one; odd
     * trials: it is, and the destination is transposed instead */
    for (int d = 0; d < nd - 1 && (perm[nd - 1] == nd - 1) == (trial % 2 == 0); d++)
      if ((perm[d] == nd - 1) == (trial % 2 == 1)) {
        int t = perm[nd - 1];
        perm[nd - 1] = perm[d];
        perm[d] = t;
      }
    int64_t psz[4], pst[4], st = 1;
    for (int d = 0; d < nd; d++) psz[d] = sz[perm[d]];
    for (int d = nd - 1; d >= 0; d--) pst[d] = st, st *= psz[d];
    char *src = malloc((size_t)(n * es)), *dst = malloc((size_t)((n + 8) * es));
    for (int64_t i = 0; i < n * es; i++) src[i] = (char)(i * 131 + trial);
    memset(dst, 0x5a, (size_t)((n + 8) * es));
    tpu_view sv, dv;
    tpu_view_init_contiguous(&dv, dst, dt, nd, sz);
    dv.offset = 4;
    if (trial % 2) { /* a transposed destination (its last two dims swapped) */
      int64_t acc = sz[nd - 2] * sz[nd - 1];
      dv.strides[nd - 2] = 1;
      dv.strides[nd - 1] = sz[nd - 2];
      for (int d = nd - 3; d >= 0; d--) dv.strides[d] = acc, acc *= sz[d];
    }
    sv = dv;
    sv.base = src;
    sv.offset = 0;
    for (int d = 0; d < nd; d++) sv.strides[perm[d]] = pst[d];
    int rev = trial % nd;
    sv.offset += (sz[rev] - 1) * sv.strides[rev];
    sv.strides[rev] = -sv.strides[rev];
    CHECK_OK(tpux_copy(&dv, &sv));
    int bad = 0;
    for (int64_t i = 0; i < n && !bad; i++)
      bad = memcmp(dst + tv_off(&dv, i) * es, src + tv_off(&sv, i) * es, (size_t)es) != 0;
    for (int64_t i = 0; i < 4 * es && !bad; i++)
      bad = dst[i] != 0x5a || dst[(n + 4) * es + i] != 0x5a;
    if (bad) fprintf(stderr, "copy trial %d (dtype %d, rank %d) wrong\n", trial, dt, nd);
    CHECK(!bad);
    free(src);
    free(dst);
  }
}

/* ---- fused elementwise regions ------------------------------------------------ */

/* Random elementwise programs (exact ops only, several dtypes, values used
 * inside and outside regions, reductions closing regions, several outputs)
 * against a per-element scalar interpreter with unfused semantics. */
TPU_TEST(exec_fusion_random_programs) {
  uint64_t seed = 4242;
  static const int pdt[4] = {TPU_F32, TPU_BF16, TPU_I32, TPU_I8};
  int64_t sz[2] = {37, 29};
  const int64_t N = 37 * 29;
  for (int trial = 0; trial < 100; trial++) {
    tpuir_graph *g = tpuir_graph_new();
    enum { MAXV = 80 };
    tpuir_val v[MAXV];
    int dt[MAXV], nv = 0;
    /* per-element reference values */
    double *ref = calloc((size_t)MAXV * N, sizeof(double));
    tarr P[4];
    for (int k = 0; k < 4; k++) {
      P[k] = ta_new(pdt[k], 2, sz);
      ta_fill(&P[k].v, &seed, -6, 6);
      v[nv] = tpuir_param(g, pdt[k], 2, sz);
      dt[nv] = pdt[k];
      for (int64_t i = 0; i < N; i++) ref[nv * N + i] = tv_get(&P[k].v, i);
      nv++;
    }
    int nodes = 10 + (int)(trand_next(&seed) % 40);
    for (int s = 0; s < nodes && nv < MAXV; s++) {
      int kind = (int)(trand_next(&seed) % 10);
      if (kind >= 7) kind = 4; /* favour compare/select: mixed buffer classes */
      int a = (int)(trand_next(&seed) % (uint64_t)nv);
      int b = -1;
      for (int tries = 0; tries < 20; tries++) { /* same dtype partner */
        int c = (int)(trand_next(&seed) % (uint64_t)nv);
        if (dt[c] == dt[a]) { b = c; break; }
      }
      if (b < 0) b = a;
      int fl = tpu_dtype_is_float(dt[a]);
      tpuir_val r;
      int rdt = dt[a];
      double *ra = ref + a * N, *rb = ref + b * N, *rr = ref + nv * N;
      if (kind <= 1) { /* binary arithmetic */
        static const int bops[5] = {TPUIR_ADD, TPUIR_SUB, TPUIR_MUL, TPUIR_MAX, TPUIR_MIN};
        int op = bops[trand_next(&seed) % 5];
        if (dt[a] == TPU_BOOL && op == TPUIR_SUB) op = TPUIR_ADD;
        r = tpuir_binary(g, op, v[a], v[b]);
        for (int64_t i = 0; i < N; i++) {
          double w = fl ? ref_bin_float(op, rdt, ra[i], rb[i])
                        : (double)ref_bin_int(op, rdt == TPU_BOOL ? TPU_I64 : rdt,
                                              (int64_t)ra[i], (int64_t)rb[i]);
          rr[i] = rdt == TPU_BOOL ? w != 0 : w;
        }
      } else if (kind == 2) { /* unary */
        int op = (int)(trand_next(&seed) % 3) == 0 ? TPUIR_ABS : TPUIR_NEG;
        if (fl && trand_next(&seed) % 2) op = TPUIR_FLOOR;
        if (dt[a] == TPU_BOOL) op = TPUIR_NOT;
        r = tpuir_unary(g, op, v[a]);
        for (int64_t i = 0; i < N; i++) {
          double x = ra[i], w;
          if (op == TPUIR_NOT) w = !x;
          else if (op == TPUIR_FLOOR) w = floor(x);
          else if (op == TPUIR_ABS) w = fabs(x);
          else w = -x;
          rr[i] = round_to(rdt, w);
        }
      } else if (kind == 3) { /* convert (never float -> int) */
        static const int cdt[6] = {TPU_F32, TPU_BF16, TPU_F16, TPU_F64, TPU_I16, TPU_U8};
        int to = cdt[trand_next(&seed) % 6];
        if (fl && !tpu_dtype_is_float(to)) to = TPU_F64;
        r = tpuir_convert(g, v[a], to);
        rdt = to;
        for (int64_t i = 0; i < N; i++) rr[i] = round_to(to, ra[i]);
      } else if (kind == 4) { /* compare + select */
        int c = (int)(trand_next(&seed) % (uint64_t)nv);
        tpuir_val pr = tpuir_binary(g, TPUIR_LT, v[a], v[b]);
        if (dt[c] == dt[a]) {
          r = tpuir_select(g, pr, v[c], v[a]);
          for (int64_t i = 0; i < N; i++) rr[i] = ra[i] < rb[i] ? ref[c * N + i] : ra[i];
        } else {
          r = pr;
          rdt = TPU_BOOL;
          for (int64_t i = 0; i < N; i++) rr[i] = ra[i] < rb[i];
        }
      } else if (kind == 5) { /* reduce over dim 1 and broadcast back (closes regions) */
        if (dt[a] == TPU_BOOL || dt[a] == TPU_I8 || dt[a] == TPU_U8) continue;
        int64_t d1[1] = {1}, d0[1] = {0};
        tpuir_val red = tpuir_reduce(g, TPUIR_RED_MAX, v[a], 1, d1);
        r = tpuir_broadcast_in_dim(g, red, 2, sz, d0);
        for (int64_t i = 0; i < N; i++) {
          double m = -INFINITY;
          int64_t row = i / 29;
          for (int j = 0; j < 29; j++) {
            double x = ra[row * 29 + j];
            m = isnan(x) || isnan(m) ? NAN : (x > m ? x : m);
          }
          rr[i] = m;
        }
      } else { /* transpose twice (a view of a region value) */
        int64_t perm[2] = {1, 0};
        r = tpuir_transpose(g, tpuir_transpose(g, v[a], perm), perm);
        for (int64_t i = 0; i < N; i++) rr[i] = ra[i];
      }
      CHECK(r >= 0);
      v[nv] = r;
      dt[nv] = rdt;
      nv++;
    }
    /* outputs: the last value, plus a few random ones (maybe duplicates) */
    int nout = 1 + (int)(trand_next(&seed) % 4);
    tpuir_val ov[4];
    int oi[4];
    for (int k = 0; k < nout; k++) {
      oi[k] = k == 0 ? nv - 1 : 4 + (int)(trand_next(&seed) % (uint64_t)(nv - 4 > 0 ? nv - 4 : 1));
      if (oi[k] >= nv) oi[k] = nv - 1;
      ov[k] = v[oi[k]];
    }
    CHECK_OK(tpuir_set_outputs(g, nout, ov));
    tarr O[4];
    tpu_view outs[4], ins[4];
    for (int k = 0; k < nout; k++) {
      O[k] = ta_new(dt[oi[k]], 2, sz);
      outs[k] = O[k].v;
    }
    for (int k = 0; k < 4; k++) ins[k] = P[k].v;
    CHECK_OK(tpux_run(g, 4, ins, nout, outs));
    for (int k = 0; k < nout; k++)
      for (int64_t i = 0; i < N; i++) {
        double got = tv_get(&O[k].v, i), want = ref[oi[k] * N + i];
        if (!near_eq(got, want, 0)) {
          fprintf(stderr, "  trial %d out %d (value %d, %s) [%lld]: %.9g want %.9g\n",
                  trial, k, oi[k], tpu_dtype_name(dt[oi[k]]), (long long)i, got, want);
          CHECK(0);
        }
      }
    for (int k = 0; k < nout; k++) free(O[k].mem);
    for (int k = 0; k < 4; k++) free(P[k].mem);
    free(ref);
    tpuir_graph_free(g);
  }
}

TPU_TEST(exec_fusion_limits_and_inplace) {
  /* a chain of 100 ops (several regions) and a sum of 20 inputs */
  int64_t sz[1] = {3000};
  tpuir_graph *g = tpuir_graph_new();
  tpuir_val p[20];
  for (int k = 0; k < 20; k++) p[k] = tpuir_param(g, TPU_F64, 1, sz);
  tpuir_val acc = p[0];
  for (int k = 1; k < 20; k++) acc = tpuir_binary(g, TPUIR_ADD, acc, p[k]);
  tpuir_val ch = p[0];
  for (int k = 0; k < 100; k++) ch = tpuir_unary(g, TPUIR_NEG, ch);
  ch = tpuir_binary(g, TPUIR_MUL, ch, acc);
  tpuir_val outs[2] = {ch, acc};
  CHECK_OK(tpuir_set_outputs(g, 2, outs));
  tarr P[20];
  tpu_view ins[20];
  uint64_t seed = 8;
  for (int k = 0; k < 20; k++) {
    P[k] = ta_new(TPU_F64, 1, sz);
    ta_fill(&P[k].v, &seed, -1, 1);
    ins[k] = P[k].v;
  }
  /* write ch in place over input 0 */
  tarr A = ta_new(TPU_F64, 1, sz);
  double *x0 = malloc(3000 * sizeof(double));
  memcpy(x0, P[0].mem, 3000 * sizeof(double));
  tpu_view ov[2] = {P[0].v, A.v};
  CHECK_OK(tpux_run(g, 20, ins, 2, ov));
  for (int i = 0; i < 3000; i++) {
    double s = x0[i];
    for (int k = 1; k < 20; k++) s += ((double *)P[k].mem)[i];
    CHECK(((double *)A.mem)[i] == s);
    CHECK(((double *)P[0].mem)[i] == x0[i] * s);
  }
  free(x0);
  free(A.mem);
  for (int k = 0; k < 20; k++) free(P[k].mem);
  tpuir_graph_free(g);
  /* integer division by zero inside a fused region: error, outputs untouched */
  g = tpuir_graph_new();
  tpuir_val a = tpuir_param(g, TPU_I32, 1, sz), b = tpuir_param(g, TPU_I32, 1, sz);
  tpuir_val q = tpuir_binary(g, TPUIR_DIV, tpuir_binary(g, TPUIR_ADD, a, b), b);
  q = tpuir_binary(g, TPUIR_MUL, q, a);
  CHECK_OK(tpuir_set_outputs(g, 1, &q));
  tarr IA = ta_new(TPU_I32, 1, sz), IB = ta_new(TPU_I32, 1, sz);
  for (int i = 0; i < 3000; i++) {
    ((int32_t *)IA.mem)[i] = i;
    ((int32_t *)IB.mem)[i] = i == 2999 ? 0 : 1 + i % 5;
  }
  tpu_view ins2[2] = {IA.v, IB.v};
  CHECK(tpux_run(g, 2, ins2, 1, &IA.v) == TPU_E_INVALID);
  for (int i = 0; i < 3000; i++) CHECK(((int32_t *)IA.mem)[i] == i);
  ((int32_t *)IB.mem)[2999] = 7;
  CHECK_OK(tpux_run(g, 2, ins2, 1, &IA.v));
  for (int i = 0; i < 3000; i++) {
    int32_t bb = ((int32_t *)IB.mem)[i];
    CHECK(((int32_t *)IA.mem)[i] == ((i + bb) / bb) * i);
  }
  free(IA.mem);
  free(IB.mem);
  tpuir_graph_free(g);
}

/* The vectorised float32 exp/log/tanh/logistic/erf against double libm over
 * wide ranges (denormals included): within 3 ulp of the correctly rounded
 * value. */
TPU_TEST(exec_fast_f32_math_accuracy) {
  enum { NPT = 40000 };
  static const int ops[5] = {TPUIR_EXP, TPUIR_LOG, TPUIR_TANH, TPUIR_LOGISTIC, TPUIR_ERF};
  int64_t sz[1] = {NPT};
  float *in = malloc(NPT * sizeof(float)), *out = malloc(NPT * sizeof(float));
  for (int oi = 0; oi < 5; oi++) {
    int op = ops[oi];
    for (int i = 0; i < NPT; i++) {
      double f = (double)i / (NPT - 1);
      switch (op) {
      case TPUIR_EXP: in[i] = (float)(-110 + 200 * f); break;
      case TPUIR_LOG: in[i] = (float)pow(10.0, -45 + 83.5 * f); break;
      case TPUIR_TANH: in[i] = (float)(-12 + 24 * f * f * f); break;
      case TPUIR_ERF: in[i] = (float)(-6 + 12 * f); break;
      default: in[i] = (float)(-100 + 200 * f); break;
      }
    }
    in[0] = op == TPUIR_LOG ? 1.0f : 0.0f;
    in[1] = op == TPUIR_LOG ? 0x1p-149f : 1e-30f;
    in[2] = op == TPUIR_TANH ? -1e-6f : 88.7f;
    tpuir_graph *g = tpuir_graph_new();
    tpuir_val r = tpuir_unary(g, op, tpuir_param(g, TPU_F32, 1, sz));
    tpu_view A, O;
    tpu_view_init_contiguous(&A, in, TPU_F32, 1, sz);
    tpu_view_init_contiguous(&O, out, TPU_F32, 1, sz);
    CHECK_OK(run1(g, r, 1, &A, &O));
    double worst = 0;
    for (int i = 0; i < NPT; i++) {
      double x = in[i], ref;
      switch (op) {
      case TPUIR_EXP: ref = exp(x); break;
      case TPUIR_LOG: ref = log(x); break;
      case TPUIR_TANH: ref = tanh(x); break;
      case TPUIR_ERF: ref = erf(x); break;
      default: ref = 1.0 / (1.0 + exp(-x)); break;
      }
      float rf = (float)ref;
      double ulp = fabs((double)nextafterf(rf, INFINITY) - (double)rf);
      if (ulp == 0 || isinf(ulp)) ulp = 0x1p-149;
      double err = isinf(ref) || isinf(out[i]) ? (out[i] == rf ? 0 : 1e9)
                                               : fabs(out[i] - ref) / ulp;
      if (err > worst) worst = err;
      if (err > 3) {
        fprintf(stderr, "  %s(%.9g) = %.9g, want %.9g (%.1f ulp)\n",
                tpuir_op_name(op), x, out[i], ref, err);
        CHECK(0);
      }
    }
    if (getenv("TPU_TEST_VERBOSE"))
      fprintf(stderr, "  %s: worst %.2f ulp\n", tpuir_op_name(op), worst);
    tpuir_graph_free(g);
  }
  free(in);
  free(out);
}

/* Regression: floor division as the lowering builds it (one fused region of
 * ~20 nodes where the stored result reuses a buffer that earlier held a
 * bool/int64 comparison; that earlier write must not go to the output). */
TPU_TEST(exec_fusion_register_reuse_store) {
  int64_t s[2] = {10, 5};
  tpuir_graph *g = tpuir_graph_new();
#define BC(x) tpuir_broadcast_in_dim(g, x, 2, s, NULL)
  tpuir_val v[40];
  v[0] = tpuir_param(g, TPU_F32, 2, s);
  v[1] = tpuir_param(g, TPU_F32, 0, NULL);
  v[2] = BC(v[1]);
  v[3] = tpuir_const_f(g, TPU_F32, 0);
  v[4] = tpuir_binary(g, TPUIR_REM, v[0], v[2]);
  v[5] = tpuir_binary(g, TPUIR_SUB, v[0], v[4]);
  v[6] = tpuir_binary(g, TPUIR_DIV, v[5], v[2]);
  v[7] = BC(v[3]);
  v[8] = tpuir_binary(g, TPUIR_LT, v[4], v[7]);
  v[9] = BC(v[3]);
  v[10] = tpuir_binary(g, TPUIR_LT, v[2], v[9]);
  v[11] = tpuir_binary(g, TPUIR_NE, v[10], v[8]);
  v[12] = BC(v[3]);
  v[13] = tpuir_binary(g, TPUIR_NE, v[4], v[12]);
  v[14] = tpuir_binary(g, TPUIR_AND, v[13], v[11]);
  v[15] = tpuir_const_f(g, TPU_F32, 1);
  v[16] = BC(v[15]);
  v[17] = tpuir_binary(g, TPUIR_SUB, v[6], v[16]);
  v[18] = tpuir_select(g, v[14], v[17], v[6]);
  v[19] = tpuir_unary(g, TPUIR_FLOOR, v[18]);
  v[20] = tpuir_const_f(g, TPU_F32, 0.5);
  v[21] = tpuir_binary(g, TPUIR_SUB, v[18], v[19]);
  v[22] = BC(v[20]);
  v[23] = tpuir_binary(g, TPUIR_GT, v[21], v[22]);
  v[24] = tpuir_const_f(g, TPU_F32, 1);
  v[25] = BC(v[24]);
  v[26] = tpuir_binary(g, TPUIR_ADD, v[19], v[25]);
  v[27] = tpuir_select(g, v[23], v[26], v[19]);
  v[28] = tpuir_binary(g, TPUIR_DIV, v[0], v[2]);
  v[29] = BC(v[3]);
  v[30] = tpuir_binary(g, TPUIR_MUL, v[28], v[29]);
  v[31] = BC(v[3]);
  v[32] = tpuir_binary(g, TPUIR_NE, v[18], v[31]);
  v[33] = tpuir_select(g, v[32], v[27], v[30]);
  v[34] = BC(v[3]);
  v[35] = tpuir_binary(g, TPUIR_EQ, v[2], v[34]);
  v[36] = tpuir_select(g, v[35], v[28], v[33]);
#undef BC
  for (int i = 0; i < 37; i++) CHECK(v[i] >= 0);
  CHECK_OK(tpuir_set_outputs(g, 1, &v[36]));
  /* the output sits inside a larger buffer with guard zones around it */
  float a[50], b = 3, big[50 + 64];
  for (int i = 0; i < 50; i++) a[i] = (float)i - 25.5f;
  for (int i = 0; i < 114; i++) big[i] = 12345.0f;
  tpu_view A, Bv, O;
  tpu_view_init_contiguous(&A, a, TPU_F32, 2, s);
  tpu_view_init_contiguous(&Bv, &b, TPU_F32, 0, NULL);
  tpu_view_init_contiguous(&O, big + 32, TPU_F32, 2, s);
  tpu_view ins[2] = {A, Bv};
  CHECK_OK(tpux_run(g, 2, ins, 1, &O));
  for (int i = 0; i < 50; i++) CHECK(big[32 + i] == floorf(a[i] / 3.0f));
  for (int i = 0; i < 32; i++) CHECK(big[i] == 12345.0f && big[82 + i] == 12345.0f);
  tpuir_graph_free(g);
}

/* tpux_run is re-entrant: several threads run the same graph at once (the
 * temporary cache and the pool are shared). */

typedef struct conc_arg {
  const tpuir_graph *g;
  const tpu_view *in;
  float *out;
  int bad;
} conc_arg;

static void *conc_worker(void *p) {
  conc_arg *a = p;
  int64_t s1[1] = {512};
  tpu_view O;
  tpu_view_init_contiguous(&O, a->out, TPU_F32, 1, s1);
  for (int it = 0; it < 30 && !a->bad; it++) {
    if (tpux_run(a->g, 1, a->in, 1, &O) != TPU_OK) a->bad = 1;
    for (int i = 0; i < 512 && !a->bad; i++)
      if (a->out[i] != 2048.0f * (float)i) a->bad = 2;
  }
  return NULL;
}

TPU_TEST(exec_concurrent_runs) {
  /* out[j] = sum_i (x[i, j] * 2) over a [1024, 512] input (2 MiB temps) */
  int64_t sz[2] = {1024, 512}, d0[1] = {0};
  tpuir_graph *g = tpuir_graph_new();
  tpuir_val x = tpuir_param(g, TPU_F32, 2, sz);
  tpuir_val two = tpuir_broadcast_in_dim(g, tpuir_const_f(g, TPU_F32, 2), 2, sz, NULL);
  tpuir_val y = tpuir_binary(g, TPUIR_MUL, x, two);
  tpuir_val r = tpuir_reduce(g, TPUIR_RED_SUM, y, 1, d0);
  CHECK_OK(tpuir_set_outputs(g, 1, &r));
  float *xb = malloc(1024 * 512 * sizeof(float));
  for (int i = 0; i < 1024; i++)
    for (int j = 0; j < 512; j++) xb[i * 512 + j] = (float)j;
  tpu_view X;
  tpu_view_init_contiguous(&X, xb, TPU_F32, 2, sz);
  enum { NT = 4 };
  pthread_t th[NT];
  conc_arg args[NT];
  float outs[NT][512];
  for (int k = 0; k < NT; k++) {
    args[k] = (conc_arg){g, &X, outs[k], 0};
    CHECK(pthread_create(&th[k], NULL, conc_worker, &args[k]) == 0);
  }
  for (int k = 0; k < NT; k++) pthread_join(th[k], NULL);
  for (int k = 0; k < NT; k++) CHECK(args[k].bad == 0);
  free(xb);
  tpuir_graph_free(g);
}

/* One-instruction programs run long tiles (XK_TILE_ONE): sizes across
 * several tiles with a tail, in place, against a broadcast scalar (its
 * tile filled only as far as the run reaches: a 5-element run), gathered
 * from a transposed input, and stored through a bf16 conversion; every
 * element checked, the bytes after the output untouched. */
TPU_TEST(exec_one_op_long_tiles) {
  const int64_t lens[3] = {3 * 16384 + 123, 5, 16384};
  for (int t = 0; t < 3; t++) {
    int64_t n = lens[t];
    tarr X = ta_new(TPU_F32, 1, &n), Y = ta_new(TPU_F32, 1, &n), S = ta_new(TPU_F32, 0, NULL);
    for (int64_t i = 0; i < n; i++) {
      tv_set(&X.v, i, (double)(i % 1001) - 500);
      tv_set(&Y.v, i, 0.25 * (double)(i % 13));
    }
    tv_set(&S.v, 0, 3.5);
    float *om = malloc((size_t)(n + 16) * 4);
    for (int64_t i = 0; i < n + 16; i++) om[i] = -7.0f;
    tpu_view O;
    tpu_view_init_contiguous(&O, om, TPU_F32, 1, &n);
    for (int c = 0; c < 2; c++) { /* x * y; x + s (0-dim, broadcast) */
      tpuir_graph *g = tpuir_graph_new();
      tpuir_val x = tpuir_param(g, TPU_F32, 1, &n);
      tpuir_val y = c ? tpuir_broadcast_in_dim(g, tpuir_param(g, TPU_F32, 0, NULL), 1, &n, NULL)
                      : tpuir_param(g, TPU_F32, 1, &n);
      tpu_view ins[2] = {X.v, c ? S.v : Y.v};
      CHECK_OK(run1(g, tpuir_binary(g, c ? TPUIR_ADD : TPUIR_MUL, x, y), 2, ins, &O));
      int bad = 0;
      for (int64_t i = 0; i < n; i++) {
        float xv = (float)tv_get(&X.v, i);
        bad += om[i] != (c ? xv + 3.5f : xv * (float)tv_get(&Y.v, i));
      }
      for (int i = 0; i < 16; i++) bad += om[n + i] != -7.0f;
      CHECK(bad == 0);
      tpuir_graph_free(g);
    }
    free(X.mem);
    free(Y.mem);
    free(S.mem);
    free(om);
  }
  /* gathered: the transpose of a [301, 170] array, times 2 (f32) and
   * converted (bf16) */
  int64_t sz[2] = {170, 301}, n = 301 * 170;
  const int order[2] = {1, 0};
  float *xm = malloc((size_t)n * 4), *of = malloc((size_t)(n + 16) * 4);
  uint16_t *ob = malloc((size_t)(n + 16) * 2);
  tpu_view X = permuted_view(xm, TPU_F32, 2, sz, order), OF, OB;
  for (int64_t i = 0; i < n; i++) xm[i] = (float)((i * 7919) % 2003) * 0.126f;
  for (int64_t i = 0; i < n + 16; i++) of[i] = -7.0f, ob[i] = 0xdead;
  tpu_view_init_contiguous(&OF, of, TPU_F32, 2, sz);
  tpu_view_init_contiguous(&OB, ob, TPU_BF16, 2, sz);
  for (int c = 0; c < 2; c++) {
    tpuir_graph *g = tpuir_graph_new();
    tpuir_val x = tpuir_param(g, TPU_F32, 2, sz);
    tpuir_val two = tpuir_broadcast_in_dim(g, tpuir_const_f(g, TPU_F32, 2.0), 2, sz, NULL);
    CHECK_OK(run1(g, c ? tpuir_convert(g, x, TPU_BF16) : tpuir_binary(g, TPUIR_MUL, x, two), 1,
                  &X, c ? &OB : &OF));
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
      float xv = (float)tv_get(&X, i);
      bad += c ? tv_get(&OB, i) != tpu_bf16_to_f32(tpu_f32_to_bf16(xv)) : of[i] != xv * 2.0f;
    }
    for (int i = 0; i < 16; i++) bad += c ? ob[n + i] != 0xdead : of[n + i] != -7.0f;
    CHECK(bad == 0);
    tpuir_graph_free(g);
  }
  free(xm);
  free(of);
  free(ob);
}

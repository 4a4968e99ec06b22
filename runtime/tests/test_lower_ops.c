/* test_lower_ops.c - end-to-end tests of the reduction, linear-algebra,
 * NN, indexing and random lowerings (prepare -> launch -> synchronize on
 * views of malloc'd memory), against reference values computed here. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "test_lower_util.h"
#include "tpu_test.h"

#define ARR(...) ((const double[]){__VA_ARGS__})
#define SZ(...) ((const int64_t[]){__VA_ARGS__})
#define ARGS(...) ((const tpulw_arg[]){__VA_ARGS__})
#define NARGS(...) ((int)(sizeof((tpulw_arg[]){__VA_ARGS__}) / sizeof(tpulw_arg)))
/* run name.ov with the given args */
#define RUN(name, ov, ...) lt_run(name, ov, ARGS(__VA_ARGS__), NARGS(__VA_ARGS__))



#define CHECK_SHAPE(info, ...)                                               \
  do {                                                                       \
    const int64_t want_[] = {__VA_ARGS__};                                   \
    int n_ = (int)(sizeof want_ / sizeof want_[0]);                          \
    CHECK((info).ndim == n_);                                                \
    for (int k_ = 0; k_ < n_; k_++) CHECK((info).sizes[k_] == want_[k_]);    \
  } while (0)


/* ---- reductions --------------------------------------------------------- */

TPU_TEST(lower_sum_mean_prod) {
  tpu_view x = lt_from(TPU_I32, 2, SZ(2, 3), ARR(1, 2, 3, 4, 5, 6));
  int64_t d1[1] = {1};
  lt_result r = RUN("sum", "dim_IntList", lt_tensor("self", x), lt_ints("dim", d1, 1),
                    lt_bool("keepdim", 1), lt_none("dtype"));
  CHECK_OK(r.rc);
  CHECK(r.info[0].dtype == TPU_I64);
  CHECK_SHAPE(r.info[0], 2, 1);
  CHECK_VALS(r.out[0], ARR(6, 15), 2, 0);
  lt_result_free(&r);
  /* all dims with a dtype */
  r = RUN("sum", "dim_IntList", lt_tensor("self", x), lt_none("dim"), lt_bool("keepdim", 0),
          lt_dtype("dtype", TPU_F64));
  CHECK_OK(r.rc);
  CHECK(r.info[0].dtype == TPU_F64 && r.info[0].ndim == 0);
  CHECK_VALS(r.out[0], ARR(21), 1, 0);
  lt_result_free(&r);
  /* mean of ints is an error; of floats fine */
  tpulw_ctx ctx = {0, 0};
  tpulw_plan *p = NULL;
  CHECK(tpulw_prepare(&ctx, "mean", "dim", ARGS(lt_tensor("self", x), lt_ints("dim", d1, 1)), 2,
                      &p) == TPU_E_INVALID);
  tpu_view xf = lt_from(TPU_F32, 2, SZ(2, 3), ARR(1, 2, 3, 4, 5, 6));
  int64_t d0[1] = {0};
  r = RUN("mean", "dim", lt_tensor("self", xf), lt_ints("dim", d0, 1), lt_bool("keepdim", 0));
  CHECK_OK(r.rc);
  CHECK_VALS(r.out[0], ARR(2.5, 3.5, 4.5), 3, 1e-7);
  lt_result_free(&r);
  r = RUN("prod", "dim_int", lt_tensor("self", x), lt_int("dim", -1), lt_bool("keepdim", 0));
  CHECK_OK(r.rc);
  CHECK(r.info[0].dtype == TPU_I64);
  CHECK_VALS(r.out[0], ARR(6, 120), 2, 0);
  lt_result_free(&r);
  /* sum.IntList_out into a float out= computes in float */
  tpu_view o = lt_new(TPU_F32, 1, SZ(3));
  r = RUN("sum", "IntList_out", lt_tensor("self", x), lt_ints("dim", d0, 1),
          lt_bool("keepdim", 0), lt_none("dtype"), lt_out("out", o));
  CHECK_OK(r.rc);
  CHECK(r.info[0].dest_arg == 4 && !r.info[0].resize);
  CHECK_VALS(o, ARR(5, 7, 9), 3, 0);
  /* mean over an empty dim is NaN */
  tpu_view e = lt_new(TPU_F32, 2, SZ(0, 3));
  r = RUN("mean", "dim", lt_tensor("self", e), lt_ints("dim", d0, 1), lt_bool("keepdim", 0));
  CHECK_OK(r.rc);
  CHECK(isnan(lt_get(&r.out[0], 0)));
  lt_result_free(&r);
  lt_free(&x);
  lt_free(&xf);
  lt_free(&o);
  lt_free(&e);
}

TPU_TEST(lower_max_argmax_amax) {
  tpu_view x = lt_from(TPU_F32, 2, SZ(2, 3), ARR(1, 7, 7, -1, NAN, 2));
  lt_result r = RUN("max", "dim", lt_tensor("self", x), lt_int("dim", 1), lt_bool("keepdim", 0));
  CHECK_OK(r.rc);
  CHECK(r.nout == 2 && r.info[1].dtype == TPU_I64);
  CHECK_VALS(r.out[0], ARR(7, NAN), 2, 0);
  CHECK_VALS(r.out[1], ARR(1, 1), 2, 0);
  lt_result_free(&r);
  r = RUN("min", "dim", lt_tensor("self", x), lt_int("dim", 0), lt_bool("keepdim", 1));
  CHECK_OK(r.rc);
  CHECK_SHAPE(r.info[0], 1, 3);
  CHECK_VALS(r.out[0], ARR(-1, NAN, 2), 3, 0);
  CHECK_VALS(r.out[1], ARR(1, 1, 1), 3, 0);
  lt_result_free(&r);
  r = RUN("argmax", "", lt_tensor("self", x), lt_none("dim"), lt_bool("keepdim", 0));
  CHECK_OK(r.rc);
  CHECK(r.info[0].ndim == 0);
  CHECK_VALS(r.out[0], ARR(4), 1, 0);
  lt_result_free(&r);
  tpu_view y = lt_from(TPU_I32, 3, SZ(2, 2, 2), ARR(1, 8, 3, 4, 5, 6, 7, 2));
  int64_t dims[2] = {0, 2};
  r = RUN("amax", "", lt_tensor("self", y), lt_ints("dim", dims, 2), lt_bool("keepdim", 0));
  CHECK_OK(r.rc);
  CHECK(r.info[0].dtype == TPU_I32);
  CHECK_VALS(r.out[0], ARR(8, 7), 2, 0);
  lt_result_free(&r);
  r = RUN("max", "", lt_tensor("self", y));
  CHECK_OK(r.rc);
  CHECK_VALS(r.out[0], ARR(8), 1, 0);
  lt_result_free(&r);
  /* errors */
  tpu_view e = lt_new(TPU_F32, 2, SZ(2, 0));
  r = RUN("max", "", lt_tensor("self", e));
  CHECK(r.rc == TPU_E_INVALID);
  r = RUN("max", "dim", lt_tensor("self", e), lt_int("dim", 1), lt_bool("keepdim", 0));
  CHECK(r.rc == TPU_E_INDEX);
  CHECK(strstr(tpu_last_error(), "Expected reduction dim 1 to have non-zero size") != NULL);
  r = RUN("argmax", "", lt_tensor("self", x), lt_int("dim", 2), lt_bool("keepdim", 0));
  CHECK(r.rc == TPU_E_INDEX);
  lt_free(&x);
  lt_free(&y);
  lt_free(&e);
}

TPU_TEST(lower_var_std_all_any_norm_cumsum) {
  double xs[8] = {1, 2, 4, 8, -1, 0, 3, 5};
  tpu_view x = lt_from(TPU_F32, 2, SZ(2, 4), xs);
  int64_t d1[1] = {1};
  lt_result r = RUN("var_mean", "correction", lt_tensor("self", x), lt_ints("dim", d1, 1),
                    lt_int("correction", 1), lt_bool("keepdim", 0));
  CHECK_OK(r.rc);
  CHECK(r.nout == 2);
  double var[2], mean[2];
  for (int i = 0; i < 2; i++) {
    double m = 0, s = 0;
    for (int j = 0; j < 4; j++) m += xs[i * 4 + j];
    m /= 4;
    for (int j = 0; j < 4; j++) s += (xs[i * 4 + j] - m) * (xs[i * 4 + j] - m);
    var[i] = s / 3;
    mean[i] = m;
  }
  CHECK_VALS(r.out[0], var, 2, 1e-6);
  CHECK_VALS(r.out[1], mean, 2, 1e-6);
  lt_result_free(&r);
  r = RUN("std", "correction", lt_tensor("self", x), lt_none("dim"), lt_none("correction"),
          lt_bool("keepdim", 0));
  CHECK_OK(r.rc);
  double m = 0, s = 0;
  for (int i = 0; i < 8; i++) m += xs[i];
  m /= 8;
  for (int i = 0; i < 8; i++) s += (xs[i] - m) * (xs[i] - m);
  CHECK_VALS(r.out[0], ARR(sqrt(s / 7)), 1, 1e-6);
  lt_result_free(&r);
  /* all/any: uint8 input keeps uint8 */
  tpu_view u = lt_from(TPU_U8, 1, SZ(3), ARR(1, 0, 2));
  r = RUN("all", "", lt_tensor("self", u));
  CHECK_OK(r.rc);
  CHECK(r.info[0].dtype == TPU_U8);
  CHECK_VALS(r.out[0], ARR(0), 1, 0);
  lt_result_free(&r);
  r = RUN("any", "dim", lt_tensor("self", x), lt_int("dim", 0), lt_bool("keepdim", 0));
  CHECK_OK(r.rc);
  CHECK(r.info[0].dtype == TPU_BOOL);
  CHECK_VALS(r.out[0], ARR(1, 1, 1, 1), 4, 0);
  lt_result_free(&r);
  /* vector norms */
  r = RUN("linalg_vector_norm", "", lt_tensor("self", x), lt_float("ord", 2), lt_none("dim"),
          lt_bool("keepdim", 0), lt_none("dtype"));
  CHECK_OK(r.rc);
  double ss = 0;
  for (int i = 0; i < 8; i++) ss += xs[i] * xs[i];
  CHECK_VALS(r.out[0], ARR(sqrt(ss)), 1, 1e-6);
  lt_result_free(&r);
  r = RUN("linalg_vector_norm", "", lt_tensor("self", x), lt_float("ord", INFINITY),
          lt_ints("dim", d1, 1), lt_bool("keepdim", 0), lt_none("dtype"));
  CHECK_OK(r.rc);
  CHECK_VALS(r.out[0], ARR(8, 5), 2, 0);
  lt_result_free(&r);
  /* logsumexp */
  r = RUN("logsumexp", "", lt_tensor("self", x), lt_ints("dim", d1, 1), lt_bool("keepdim", 0));
  CHECK_OK(r.rc);
  double l0 = log(exp(1) + exp(2) + exp(4) + exp(8)), l1 = log(exp(-1) + 1 + exp(3) + exp(5));
  CHECK_VALS(r.out[0], ARR(l0, l1), 2, 1e-6);
  lt_result_free(&r);
  /* cumsum of ints -> int64 */
  tpu_view c = lt_from(TPU_I8, 1, SZ(7), ARR(1, 2, 3, 4, 5, 6, 7));
  r = RUN("cumsum", "", lt_tensor("self", c), lt_int("dim", 0), lt_none("dtype"));
  CHECK_OK(r.rc);
  CHECK(r.info[0].dtype == TPU_I64);
  CHECK_VALS(r.out[0], ARR(1, 3, 6, 10, 15, 21, 28), 7, 0);
  lt_result_free(&r);
  r = RUN("cumprod", "", lt_tensor("self", x), lt_int("dim", 1), lt_none("dtype"));
  CHECK_OK(r.rc);
  CHECK_VALS(r.out[0], ARR(1, 2, 8, 64, -1, 0, 0, 0), 8, 1e-7);
  lt_result_free(&r);
  lt_free(&x);
  lt_free(&u);
  lt_free(&c);
}

/* ---- linear algebra ---------------------------------------------------- */

static void ref_mm(const tpu_view *a, const tpu_view *b, double *out, int64_t m,
                   int64_t k, int64_t n, int64_t batch) {
  for (int64_t z = 0; z < batch; z++)
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) {
        double s = 0;
        for (int64_t t = 0; t < k; t++)
          s += lt_get(a, z * m * k + i * k + t) * lt_get(b, z * k * n + t * n + j);
        out[z * m * n + i * n + j] = s;
      }
}

TPU_TEST(lower_mm_bmm_addmm) {
  tpu_view a = lt_new(TPU_F32, 2, SZ(3, 5)), bb = lt_new(TPU_F32, 2, SZ(5, 4));
  lt_fill_rand(&a, 1);
  lt_fill_rand(&bb, 2);
  double want[12];
  ref_mm(&a, &bb, want, 3, 5, 4, 1);
  lt_result r = RUN("mm", "", lt_tensor("self", a), lt_tensor("mat2", bb));
  CHECK_OK(r.rc);
  CHECK_SHAPE(r.info[0], 3, 4);
  CHECK_VALS(r.out[0], want, 12, 1e-5); /* HIGHEST precision */
  lt_result_free(&r);
  /* addmm with a broadcast bias row, beta/alpha */
  tpu_view bias = lt_from(TPU_F32, 1, SZ(4), ARR(1, 2, 3, 4));
  r = RUN("addmm", "", lt_tensor("self", bias), lt_tensor("mat1", a), lt_tensor("mat2", bb),
          lt_float("beta", 0.5), lt_int("alpha", 2));
  CHECK_OK(r.rc);
  double w2[12];
  for (int i = 0; i < 12; i++) w2[i] = 0.5 * (i % 4 + 1) + 2 * want[i];
  CHECK_VALS(r.out[0], w2, 12, 1e-5);
  lt_result_free(&r);
  /* non-contiguous (transposed) mat2 */
  tpu_view bt = lt_new(TPU_F32, 2, SZ(4, 5));
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 5; j++) lt_set(&bt, i * 5 + j, lt_get(&bb, j * 4 + i));
  tpu_view btv = bt;
  btv.sizes[0] = 5; btv.sizes[1] = 4; btv.strides[0] = 1; btv.strides[1] = 5;
  r = RUN("mm", "", lt_tensor("self", a), lt_tensor("mat2", btv));
  CHECK_OK(r.rc);
  CHECK_VALS(r.out[0], want, 12, 1e-5);
  lt_result_free(&r);
  /* bmm */
  tpu_view p = lt_new(TPU_F32, 3, SZ(2, 3, 5)), q = lt_new(TPU_F32, 3, SZ(2, 5, 2));
  lt_fill_rand(&p, 3);
  lt_fill_rand(&q, 4);
  double wb[12];
  ref_mm(&p, &q, wb, 3, 5, 2, 2);
  r = RUN("bmm", "", lt_tensor("self", p), lt_tensor("mat2", q));
  CHECK_OK(r.rc);
  CHECK_SHAPE(r.info[0], 2, 3, 2);
  CHECK_VALS(r.out[0], wb, 12, 1e-5);
  lt_result_free(&r);
  /* int mm is exact; dot; shape errors */
  tpu_view ia = lt_from(TPU_I64, 2, SZ(2, 2), ARR(1, 2, 3, 4));
  r = RUN("mm", "", lt_tensor("self", ia), lt_tensor("mat2", ia));
  CHECK_OK(r.rc);
  CHECK_VALS(r.out[0], ARR(7, 10, 15, 22), 4, 0);
  lt_result_free(&r);
  tpu_view v = lt_from(TPU_F32, 1, SZ(3), ARR(1, 2, 3));
  r = RUN("dot", "", lt_tensor("self", v), lt_tensor("tensor", v));
  CHECK_OK(r.rc);
  CHECK(r.info[0].ndim == 0);
  CHECK_VALS(r.out[0], ARR(14), 1, 1e-6);
  lt_result_free(&r);
  r = RUN("mm", "", lt_tensor("self", a), lt_tensor("mat2", a));
  CHECK(r.rc == TPU_E_INVALID);
  CHECK(strcmp(tpu_last_error(), "mat1 and mat2 shapes cannot be multiplied (3x5 and 3x5)") == 0);
  /* mv */
  tpu_view vec = lt_from(TPU_F32, 1, SZ(4), ARR(1, 0, -1, 2));
  r = RUN("mv", "", lt_tensor("self", bb), lt_tensor("vec", vec));
  CHECK_OK(r.rc);
  double wm[5];
  for (int i = 0; i < 5; i++) {
    wm[i] = 0;
    for (int j = 0; j < 4; j++) wm[i] += lt_get(&bb, i * 4 + j) * lt_get(&vec, j);
  }
  CHECK_VALS(r.out[0], wm, 5, 1e-5);
  lt_result_free(&r);
  lt_free(&a); lt_free(&bb); lt_free(&bias); lt_free(&bt); lt_free(&p); lt_free(&q);
  lt_free(&ia); lt_free(&v); lt_free(&vec);
}

/* ---- NN ---------------------------------------------------------------- */

TPU_TEST(lower_softmax_and_backward) {
  double xs[6] = {1, 2, 3, -1, 0, 100};
  tpu_view x = lt_from(TPU_F32, 2, SZ(2, 3), xs);
  lt_result r = RUN("_softmax", "", lt_tensor("self", x), lt_int("dim", 1),
                    lt_bool("half_to_float", 0));
  CHECK_OK(r.rc);
  double sm[6], lsm[6];
  for (int i = 0; i < 2; i++) {
    double mx = fmax(fmax(xs[i * 3], xs[i * 3 + 1]), xs[i * 3 + 2]), s = 0;
    for (int j = 0; j < 3; j++) s += exp(xs[i * 3 + j] - mx);
    for (int j = 0; j < 3; j++) {
      sm[i * 3 + j] = exp(xs[i * 3 + j] - mx) / s;
      lsm[i * 3 + j] = xs[i * 3 + j] - mx - log(s);
    }
  }
  CHECK_VALS(r.out[0], sm, 6, 1e-6);
  tpu_view y = r.out[0];
  r.owned[0] = 0;
  lt_result_free(&r);
  r = RUN("_log_softmax", "", lt_tensor("self", x), lt_int("dim", -1),
          lt_bool("half_to_float", 0));
  CHECK_OK(r.rc);
  CHECK_VALS(r.out[0], lsm, 6, 1e-6);
  lt_result_free(&r);
  /* softmax backward: grad_input = y * (g - sum(g * y)) */
  tpu_view g = lt_from(TPU_F32, 2, SZ(2, 3), ARR(1, 0, 0, 0.5, -1, 2));
  r = RUN("_softmax_backward_data", "", lt_tensor("grad_output", g), lt_tensor("output", y),
          lt_int("dim", 1), lt_dtype("input_dtype", TPU_F32));
  CHECK_OK(r.rc);
  double gi[6];
  for (int i = 0; i < 2; i++) {
    double dotv = 0;
    for (int j = 0; j < 3; j++) dotv += lt_get(&g, i * 3 + j) * sm[i * 3 + j];
    for (int j = 0; j < 3; j++) gi[i * 3 + j] = sm[i * 3 + j] * (lt_get(&g, i * 3 + j) - dotv);
  }
  CHECK_VALS(r.out[0], gi, 6, 1e-6);
  lt_result_free(&r);
  lt_free(&x);
  lt_free(&y);
  lt_free(&g);
}

TPU_TEST(lower_layer_norm_fwd_bwd) {
  tpu_view x = lt_new(TPU_F32, 2, SZ(3, 4));
  lt_fill_rand(&x, 7);
  tpu_view w = lt_from(TPU_F32, 1, SZ(4), ARR(1, 2, 0.5, -1));
  tpu_view bias = lt_from(TPU_F32, 1, SZ(4), ARR(0, 1, 0, 2));
  int64_t ns[1] = {4};
  lt_result r = RUN("native_layer_norm", "", lt_tensor("input", x), lt_ints("normalized_shape", ns, 1),
                    lt_tensor("weight", w), lt_tensor("bias", bias), lt_float("eps", 1e-5));
  CHECK_OK(r.rc);
  CHECK(r.nout == 3);
  CHECK_SHAPE(r.info[1], 3, 1);
  double ref[12], mean[3], rstd[3];
  for (int i = 0; i < 3; i++) {
    double m = 0, v = 0;
    for (int j = 0; j < 4; j++) m += lt_get(&x, i * 4 + j);
    m /= 4;
    for (int j = 0; j < 4; j++) v += pow(lt_get(&x, i * 4 + j) - m, 2);
    v /= 4;
    mean[i] = m;
    rstd[i] = 1 / sqrt(v + 1e-5);
    for (int j = 0; j < 4; j++)
      ref[i * 4 + j] = (lt_get(&x, i * 4 + j) - m) * rstd[i] * lt_get(&w, j) + lt_get(&bias, j);
  }
  CHECK_VALS(r.out[0], ref, 12, 1e-5);
  CHECK_VALS(r.out[1], mean, 3, 1e-6);
  CHECK_VALS(r.out[2], rstd, 3, 1e-5);
  tpu_view mv = r.out[1], rv = r.out[2];
  r.owned[1] = r.owned[2] = 0;
  lt_result_free(&r);
  /* backward vs finite differences of sum(g * y) */
  tpu_view g = lt_new(TPU_F32, 2, SZ(3, 4));
  lt_fill_rand(&g, 9);
  int64_t mask[3] = {1, 1, 1};
  r = RUN("native_layer_norm_backward", "", lt_tensor("grad_out", g), lt_tensor("input", x),
          lt_ints("normalized_shape", ns, 1), lt_tensor("mean", mv), lt_tensor("rstd", rv),
          lt_tensor("weight", w), lt_tensor("bias", bias), lt_ints("output_mask", mask, 3));
  CHECK_OK(r.rc);
  CHECK(r.nout == 3);
  double gin[12], gw[4] = {0}, gb[4] = {0};
  for (int i = 0; i < 3; i++) {
    double xr[4];
    for (int j = 0; j < 4; j++) xr[j] = lt_get(&x, i * 4 + j);
    for (int j = 0; j < 4; j++) {
      double xh = (xr[j] - mean[i]) * rstd[i];
      gw[j] += lt_get(&g, i * 4 + j) * xh;
      gb[j] += lt_get(&g, i * 4 + j);
    }
    for (int j = 0; j < 4; j++) {
      double f[2];
      for (int sgn = 0; sgn < 2; sgn++) {
        double xx[4];
        memcpy(xx, xr, sizeof xx);
        xx[j] += sgn ? 1e-5 : -1e-5;
        double m = (xx[0] + xx[1] + xx[2] + xx[3]) / 4, v = 0;
        for (int k = 0; k < 4; k++) v += (xx[k] - m) * (xx[k] - m);
        double rs = 1 / sqrt(v / 4 + 1e-5), acc = 0;
        for (int k = 0; k < 4; k++) acc += lt_get(&g, i * 4 + k) * (xx[k] - m) * rs * lt_get(&w, k);
        f[sgn] = acc;
      }
      gin[i * 4 + j] = (f[1] - f[0]) / 2e-5;
    }
  }
  CHECK_VALS(r.out[0], gin, 12, 2e-3);
  CHECK_VALS(r.out[1], gw, 4, 1e-5);
  CHECK_VALS(r.out[2], gb, 4, 1e-5);
  lt_result_free(&r);
  lt_free(&x); lt_free(&w); lt_free(&bias); lt_free(&mv); lt_free(&rv); lt_free(&g);
}

TPU_TEST(lower_batch_norm_training_updates_running_stats) {
  /* input [2, 2, 2]: channel c values */
  tpu_view x = lt_from(TPU_F32, 3, SZ(2, 2, 2), ARR(1, 2, 10, 20, 3, 4, 30, 40));
  tpu_view rm = lt_from(TPU_F32, 1, SZ(2), ARR(0, 0));
  tpu_view rv = lt_from(TPU_F32, 1, SZ(2), ARR(1, 1));
  tpulw_arg args[] = {lt_tensor("input", x), lt_none("weight"), lt_none("bias"),
                      lt_out("running_mean", rm), lt_out("running_var", rv),
                      lt_bool("training", 1), lt_float("momentum", 0.1), lt_float("eps", 1e-5)};
  lt_result r = lt_run("_native_batch_norm_legit", "", args, 8);
  CHECK_OK(r.rc);
  CHECK(r.nout == 5);
  CHECK(r.info[0].dest_arg == -1 && r.info[1].dest_arg == -1 && r.info[2].dest_arg == -1);
  CHECK(r.info[3].dest_arg == 3 && r.info[4].dest_arg == 4);
  /* channel 0: 1,2,3,4 mean 2.5 var 1.25; channel 1: 10,20,30,40 mean 25 var 125 */
  CHECK_VALS(r.out[1], ARR(2.5, 25), 2, 1e-6);
  CHECK_VALS(r.out[2], ARR(1 / sqrt(1.25 + 1e-5), 1 / sqrt(125 + 1e-5)), 2, 1e-5);
  CHECK_VALS(rm, ARR(0.25, 2.5), 2, 1e-6);
  CHECK_VALS(rv, ARR(0.9 + 0.1 * 1.25 * 4 / 3, 0.9 + 0.1 * 125 * 4 / 3), 2, 1e-5);
  double y0 = (1 - 2.5) / sqrt(1.25 + 1e-5);
  CHECK(lt_near(lt_get(&r.out[0], 0), y0, 1e-5));
  lt_result_free(&r);
  /* eval mode: uses running stats, leaves them alone, empty saved stats */
  args[5] = lt_bool("training", 0);
  r = lt_run("_native_batch_norm_legit", "", args, 8);
  CHECK_OK(r.rc);
  CHECK(r.nout == 3);
  CHECK_SHAPE(r.info[1], 0);
  CHECK(lt_near(lt_get(&r.out[0], 0), (1 - 0.25) / sqrt(lt_get(&rv, 0) + 1e-5), 1e-5));
  lt_result_free(&r);
  lt_free(&x); lt_free(&rm); lt_free(&rv);
}

TPU_TEST(lower_nll_loss_and_mse) {
  double xs[8] = {-1, -2, -3, -4, -0.5, -1.5, -2.5, -3.5};
  tpu_view x = lt_from(TPU_F32, 2, SZ(2, 4), xs);
  tpu_view t = lt_from(TPU_I64, 1, SZ(2), ARR(3, 1));
  tpu_view w = lt_from(TPU_F32, 1, SZ(4), ARR(1, 2, 3, 4));
  lt_result r = RUN("nll_loss_forward", "", lt_tensor("self", x), lt_tensor("target", t),
                    lt_tensor("weight", w), lt_int("reduction", 1), lt_int("ignore_index", -100));
  CHECK_OK(r.rc);
  CHECK(r.nout == 2 && r.info[0].ndim == 0);
  double tw = 4 + 2, loss = (4 * 4 + 2 * 1.5) / tw;
  CHECK_VALS(r.out[0], ARR(loss), 1, 1e-6);
  CHECK_VALS(r.out[1], ARR(tw), 1, 0);
  tpu_view twv = r.out[1];
  r.owned[1] = 0;
  lt_result_free(&r);
  /* ignore_index, reduction none */
  tpu_view t2 = lt_from(TPU_I64, 1, SZ(2), ARR(-100, 2));
  r = RUN("nll_loss_forward", "", lt_tensor("self", x), lt_tensor("target", t2),
          lt_none("weight"), lt_int("reduction", 0), lt_int("ignore_index", -100));
  CHECK_OK(r.rc);
  CHECK_SHAPE(r.info[0], 2);
  CHECK_VALS(r.out[0], ARR(0, 2.5), 2, 1e-7);
  lt_result_free(&r);
  /* target out of range -> IndexError at the call */
  tpu_view t3 = lt_from(TPU_I64, 1, SZ(2), ARR(5, 0));
  r = RUN("nll_loss_forward", "", lt_tensor("self", x), lt_tensor("target", t3),
          lt_none("weight"), lt_int("reduction", 1), lt_int("ignore_index", -100));
  CHECK(r.rc == TPU_E_INDEX);
  lt_result_free(&r);
  /* backward (mean): grad_input[i, t_i] = -w[t_i] * g / total_weight */
  tpu_view go = lt_from(TPU_F32, 0, NULL, ARR(1));
  r = RUN("nll_loss_backward", "", lt_tensor("grad_output", go), lt_tensor("self", x),
          lt_tensor("target", t), lt_tensor("weight", w), lt_int("reduction", 1),
          lt_int("ignore_index", -100), lt_tensor("total_weight", twv));
  CHECK_OK(r.rc);
  CHECK_VALS(r.out[0], ARR(0, 0, 0, -4 / tw, 0, -2 / tw, 0, 0), 8, 1e-6);
  lt_result_free(&r);
  /* mse loss + backward */
  tpu_view y = lt_from(TPU_F32, 2, SZ(2, 4), ARR(0, 0, 0, 0, 0, 0, 0, 0));
  r = RUN("mse_loss", "", lt_tensor("self", x), lt_tensor("target", y), lt_int("reduction", 1));
  CHECK_OK(r.rc);
  double mse = 0;
  for (int i = 0; i < 8; i++) mse += xs[i] * xs[i];
  CHECK_VALS(r.out[0], ARR(mse / 8), 1, 1e-6);
  lt_result_free(&r);
  r = RUN("mse_loss_backward", "", lt_tensor("grad_output", go), lt_tensor("self", x),
          lt_tensor("target", y), lt_int("reduction", 1));
  CHECK_OK(r.rc);
  double gm[8];
  for (int i = 0; i < 8; i++) gm[i] = 2 * xs[i] / 8;
  CHECK_VALS(r.out[0], gm, 8, 1e-6);
  lt_result_free(&r);
  lt_free(&x); lt_free(&t); lt_free(&w); lt_free(&twv); lt_free(&t2); lt_free(&t3);
  lt_free(&go); lt_free(&y);
}

/* ---- indexing ------------------------------------------------------------ */

TPU_TEST(lower_index_select_gather_scatter) {
  tpu_view x = lt_from(TPU_F32, 2, SZ(3, 2), ARR(1, 2, 3, 4, 5, 6));
  tpu_view idx = lt_from(TPU_I64, 1, SZ(4), ARR(2, 0, 2, 1));
  lt_result r = RUN("index_select", "", lt_tensor("self", x), lt_int("dim", 0),
                    lt_tensor("index", idx));
  CHECK_OK(r.rc);
  CHECK_SHAPE(r.info[0], 4, 2);
  CHECK_VALS(r.out[0], ARR(5, 6, 1, 2, 5, 6, 3, 4), 8, 0);
  lt_result_free(&r);
  tpu_view bad = lt_from(TPU_I64, 1, SZ(1), ARR(3));
  r = RUN("index_select", "", lt_tensor("self", x), lt_int("dim", 0), lt_tensor("index", bad));
  CHECK(r.rc == TPU_E_INDEX);
  lt_result_free(&r);
  /* gather along dim 1 */
  tpu_view gi = lt_from(TPU_I64, 2, SZ(3, 2), ARR(1, 1, 0, 1, 0, 0));
  r = RUN("gather", "", lt_tensor("self", x), lt_int("dim", 1), lt_tensor("index", gi),
          lt_bool("sparse_grad", 0));
  CHECK_OK(r.rc);
  CHECK_VALS(r.out[0], ARR(2, 2, 3, 4, 5, 5), 6, 0);
  lt_result_free(&r);
  /* scatter_add into zeros */
  tpu_view z = lt_new(TPU_F32, 2, SZ(3, 2));
  r = RUN("scatter_add", "", lt_tensor("self", z), lt_int("dim", 1), lt_tensor("index", gi),
          lt_tensor("src", x));
  CHECK_OK(r.rc);
  CHECK_VALS(r.out[0], ARR(0, 3, 3, 4, 11, 0), 6, 0);
  lt_result_free(&r);
  /* scatter_.value (one-hot) in place */
  tpu_view oh = lt_new(TPU_I64, 2, SZ(3, 4));
  tpu_view col = lt_from(TPU_I64, 2, SZ(3, 1), ARR(2, 0, 3));
  r = RUN("scatter_", "value", lt_out("self", oh), lt_int("dim", 1), lt_tensor("index", col),
          lt_int("value", 1));
  CHECK_OK(r.rc);
  CHECK_VALS(oh, ARR(0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 1), 12, 0);
  /* index_add with alpha */
  tpu_view src = lt_from(TPU_F32, 2, SZ(2, 2), ARR(1, 1, 2, 2));
  tpu_view ii = lt_from(TPU_I64, 1, SZ(2), ARR(1, 1));
  r = RUN("index_add", "", lt_tensor("self", x), lt_int("dim", 0), lt_tensor("index", ii),
          lt_tensor("source", src), lt_int("alpha", 2));
  CHECK_OK(r.rc);
  CHECK_VALS(r.out[0], ARR(1, 2, 9, 10, 5, 6), 6, 0);
  lt_result_free(&r);
  lt_free(&x); lt_free(&idx); lt_free(&bad); lt_free(&gi); lt_free(&z); lt_free(&oh);
  lt_free(&col); lt_free(&src); lt_free(&ii);
}

TPU_TEST(lower_advanced_indexing) {
  /* x[2, 3]; x[[-1, 0]] and x[:, [2, 0, 2]] and x[[0, 1], [2, 0]] */
  tpu_view x = lt_from(TPU_F32, 2, SZ(2, 3), ARR(1, 2, 3, 4, 5, 6));
  tpu_view i1 = lt_from(TPU_I64, 1, SZ(2), ARR(-1, 0));
  tpulw_tensor l1[1];
  memset(l1, 0, sizeof l1);
  l1[0] = lt_tensor("", i1).t;
  lt_result r = RUN("index", "Tensor", lt_tensor("self", x), lt_tensors("indices", l1, 1));
  CHECK_OK(r.rc);
  CHECK_SHAPE(r.info[0], 2, 3);
  CHECK_VALS(r.out[0], ARR(4, 5, 6, 1, 2, 3), 6, 0);
  lt_result_free(&r);
  tpu_view i2 = lt_from(TPU_I64, 1, SZ(3), ARR(2, 0, 2));
  tpulw_tensor l2[2];
  memset(l2, 0, sizeof l2);
  l2[1] = lt_tensor("", i2).t;
  r = RUN("index", "Tensor", lt_tensor("self", x), lt_tensors("indices", l2, 2));
  CHECK_OK(r.rc);
  CHECK_SHAPE(r.info[0], 2, 3);
  CHECK_VALS(r.out[0], ARR(3, 1, 3, 6, 4, 6), 6, 0);
  lt_result_free(&r);
  tpu_view ra = lt_from(TPU_I64, 1, SZ(2), ARR(0, 1)), rb = lt_from(TPU_I64, 1, SZ(2), ARR(2, 0));
  tpulw_tensor l3[2] = {lt_tensor("", ra).t, lt_tensor("", rb).t};
  r = RUN("index", "Tensor", lt_tensor("self", x), lt_tensors("indices", l3, 2));
  CHECK_OK(r.rc);
  CHECK_SHAPE(r.info[0], 2);
  CHECK_VALS(r.out[0], ARR(3, 4), 2, 0);
  lt_result_free(&r);
  /* out of range in one of two index tensors */
  tpu_view rc3 = lt_from(TPU_I64, 1, SZ(2), ARR(3, 0));
  tpulw_tensor l4[2] = {lt_tensor("", ra).t, lt_tensor("", rc3).t};
  r = RUN("index", "Tensor", lt_tensor("self", x), lt_tensors("indices", l4, 2));
  CHECK(r.rc == TPU_E_INDEX);
  lt_result_free(&r);
  /* index_put_ accumulate and overwrite, mask fill */
  tpu_view vals = lt_from(TPU_F32, 1, SZ(2), ARR(10, 20));
  r = RUN("_index_put_impl_", "", lt_out("self", x), lt_tensors("indices", l3, 2),
          lt_tensor("values", vals), lt_bool("accumulate", 1), lt_bool("unsafe", 0));
  CHECK_OK(r.rc);
  CHECK_VALS(x, ARR(1, 2, 13, 24, 5, 6), 6, 0);
  r = RUN("_index_put_impl_", "", lt_out("self", x), lt_tensors("indices", l3, 2),
          lt_tensor("values", vals), lt_bool("accumulate", 0), lt_bool("unsafe", 0));
  CHECK_OK(r.rc);
  CHECK_VALS(x, ARR(1, 2, 10, 20, 5, 6), 6, 0);
  tpu_view mask = lt_from(TPU_BOOL, 2, SZ(2, 3), ARR(1, 0, 0, 0, 0, 1));
  tpu_view zero = lt_from(TPU_F32, 0, NULL, ARR(-7));
  tpulw_tensor lm[1] = {lt_tensor("", mask).t};
  r = RUN("_index_put_impl_", "", lt_out("self", x), lt_tensors("indices", lm, 1),
          lt_tensor("values", zero), lt_bool("accumulate", 0), lt_bool("unsafe", 0));
  CHECK_OK(r.rc);
  CHECK_VALS(x, ARR(-7, 2, 10, 20, 5, -7), 6, 0);
  lt_free(&x); lt_free(&i1); lt_free(&i2); lt_free(&ra); lt_free(&rb); lt_free(&rc3);
  lt_free(&vals); lt_free(&mask); lt_free(&zero);
}

TPU_TEST(lower_cat_stack_flip_roll_tril_embedding_bw) {
  tpu_view a = lt_from(TPU_F32, 2, SZ(1, 2), ARR(1, 2));
  tpu_view b2 = lt_from(TPU_I32, 2, SZ(2, 2), ARR(3, 4, 5, 6));
  tpu_view empty = lt_new(TPU_F32, 1, SZ(0));
  tpulw_tensor list[3] = {lt_tensor("", a).t, lt_tensor("", empty).t, lt_tensor("", b2).t};
  lt_result r = RUN("cat", "", lt_tensors("tensors", list, 3), lt_int("dim", 0));
  CHECK_OK(r.rc);
  CHECK(r.info[0].dtype == TPU_F32);
  CHECK_SHAPE(r.info[0], 3, 2);
  CHECK_VALS(r.out[0], ARR(1, 2, 3, 4, 5, 6), 6, 0);
  lt_result_free(&r);
  tpulw_tensor list2[2] = {lt_tensor("", a).t, lt_tensor("", b2).t};
  r = RUN("cat", "", lt_tensors("tensors", list2, 2), lt_int("dim", 1));
  CHECK(r.rc == TPU_E_INVALID);
  tpulw_tensor list3[2] = {lt_tensor("", a).t, lt_tensor("", a).t};
  r = RUN("stack", "", lt_tensors("tensors", list3, 2), lt_int("dim", -1));
  CHECK_OK(r.rc);
  CHECK_SHAPE(r.info[0], 1, 2, 2);
  CHECK_VALS(r.out[0], ARR(1, 1, 2, 2), 4, 0);
  lt_result_free(&r);
  int64_t d1[1] = {1};
  r = RUN("flip", "", lt_tensor("self", b2), lt_ints("dims", d1, 1));
  CHECK_OK(r.rc);
  CHECK_VALS(r.out[0], ARR(4, 3, 6, 5), 4, 0);
  lt_result_free(&r);
  tpu_view s5 = lt_from(TPU_I64, 1, SZ(5), ARR(1, 2, 3, 4, 5));
  int64_t sh[1] = {-2};
  r = RUN("roll", "", lt_tensor("self", s5), lt_ints("shifts", sh, 1), lt_ints("dims", NULL, 0));
  CHECK_OK(r.rc);
  CHECK_VALS(r.out[0], ARR(3, 4, 5, 1, 2), 5, 0);
  lt_result_free(&r);
  tpu_view m = lt_from(TPU_F32, 2, SZ(3, 3), ARR(1, 2, 3, 4, 5, 6, 7, 8, 9));
  r = RUN("tril", "", lt_tensor("self", m), lt_int("diagonal", 0));
  CHECK_OK(r.rc);
  CHECK_VALS(r.out[0], ARR(1, 0, 0, 4, 5, 0, 7, 8, 9), 9, 0);
  lt_result_free(&r);
  r = RUN("triu", "", lt_tensor("self", m), lt_int("diagonal", 1));
  CHECK_OK(r.rc);
  CHECK_VALS(r.out[0], ARR(0, 2, 3, 0, 0, 6, 0, 0, 0), 9, 0);
  lt_result_free(&r);
  /* embedding backward with padding_idx and scale_grad_by_freq */
  tpu_view g = lt_from(TPU_F32, 2, SZ(3, 2), ARR(1, 2, 3, 4, 5, 6));
  tpu_view ind = lt_from(TPU_I64, 1, SZ(3), ARR(1, 0, 1));
  r = RUN("embedding_dense_backward", "", lt_tensor("grad_output", g), lt_tensor("indices", ind),
          lt_int("num_weights", 3), lt_int("padding_idx", 0), lt_bool("scale_grad_by_freq", 1));
  CHECK_OK(r.rc);
  CHECK_SHAPE(r.info[0], 3, 2);
  CHECK_VALS(r.out[0], ARR(0, 0, 3, 4, 0, 0), 6, 1e-7);
  lt_result_free(&r);
  lt_free(&a); lt_free(&b2); lt_free(&empty); lt_free(&s5); lt_free(&m); lt_free(&g);
  lt_free(&ind);
}

/* ---- random ------------------------------------------------------------- */

TPU_TEST(lower_random_ops) {
  tpulw_philox gen = {1234, 0};
  tpu_view x = lt_new(TPU_F32, 1, SZ(4096));
  lt_result r = RUN("uniform_", "", lt_out("self", x), lt_float("from", -2), lt_float("to", 3),
                    lt_gen("generator", &gen));
  CHECK_OK(r.rc);
  CHECK(gen.offset == 1); /* one per draw */
  double mean = 0, mn = 1e9, mx = -1e9;
  for (int i = 0; i < 4096; i++) {
    double v = lt_get(&x, i);
    mean += v / 4096;
    mn = fmin(mn, v);
    mx = fmax(mx, v);
  }
  CHECK(mn >= -2 && mx < 3 && fabs(mean - 0.5) < 0.15);
  /* same (seed, offset) -> same numbers */
  tpu_view y = lt_new(TPU_F32, 1, SZ(4096));
  tpulw_philox gen2 = {1234, 0};
  r = RUN("uniform_", "", lt_out("self", y), lt_float("from", -2), lt_float("to", 3),
          lt_gen("generator", &gen2));
  CHECK_OK(r.rc);
  CHECK(memcmp(x.base, y.base, 4096 * sizeof(float)) == 0);
  /* normal_ moments */
  r = RUN("normal_", "", lt_out("self", x), lt_float("mean", 1), lt_float("std", 2),
          lt_gen("generator", &gen));
  CHECK_OK(r.rc);
  CHECK(gen.offset == 2);
  double s1 = 0, s2 = 0;
  for (int i = 0; i < 4096; i++) {
    double v = lt_get(&x, i);
    s1 += v;
    s2 += v * v;
  }
  s1 /= 4096;
  double sd = sqrt(s2 / 4096 - s1 * s1);
  CHECK(fabs(s1 - 1) < 0.2 && fabs(sd - 2) < 0.2);
  /* bernoulli_ p = 0.25 */
  r = RUN("bernoulli_", "float", lt_out("self", x), lt_float("p", 0.25), lt_gen("generator", &gen));
  CHECK_OK(r.rc);
  double ones = 0;
  for (int i = 0; i < 4096; i++) {
    double v = lt_get(&x, i);
    CHECK(v == 0 || v == 1);
    ones += v;
  }
  CHECK(fabs(ones / 4096 - 0.25) < 0.05);
  r = RUN("bernoulli_", "float", lt_out("self", x), lt_float("p", 1.5), lt_gen("generator", &gen));
  CHECK(r.rc == TPU_E_INVALID);
  /* random_ from/to on int64 */
  tpu_view iv = lt_new(TPU_I64, 1, SZ(1000));
  r = RUN("random_", "from", lt_out("self", iv), lt_int("from", -3), lt_int("to", 4),
          lt_gen("generator", &gen));
  CHECK_OK(r.rc);
  int seen[7] = {0};
  for (int i = 0; i < 1000; i++) {
    double v = lt_get(&iv, i);
    CHECK(v >= -3 && v < 4);
    seen[(int)v + 3] = 1;
  }
  for (int k = 0; k < 7; k++) CHECK(seen[k]);
  /* dropout: output = input * mask / (1 - p) */
  tpu_view in = lt_new(TPU_F32, 1, SZ(1000));
  for (int i = 0; i < 1000; i++) lt_set(&in, i, i + 1);
  r = RUN("native_dropout", "", lt_tensor("input", in), lt_float("p", 0.2), lt_bool("train", 1),
          lt_gen("generator", &gen));
  CHECK_OK(r.rc);
  CHECK(r.nout == 2 && r.info[1].dtype == TPU_BOOL);
  int kept = 0;
  for (int i = 0; i < 1000; i++) {
    double o = lt_get(&r.out[0], i), mk = lt_get(&r.out[1], i);
    CHECK(lt_near(o, mk * (i + 1) / 0.8, 1e-6));
    kept += mk != 0;
  }
  CHECK(kept > 700 && kept < 900);
  lt_result_free(&r);
  lt_free(&x); lt_free(&y); lt_free(&iv); lt_free(&in);
}

TPU_TEST(lower_more_activations_and_binary) {
  double xs[6] = {-3, -0.5, 0, 0.25, 1, 4};
  tpu_view x = lt_from(TPU_F32, 2, SZ(2, 3), xs);
  lt_result r = RUN("log_sigmoid_forward", "", lt_tensor("self", x));
  CHECK_OK(r.rc);
  CHECK(r.nout == 2);
  double w[6];
  for (int i = 0; i < 6; i++) w[i] = -log1p(exp(-xs[i]));
  CHECK_VALS(r.out[0], w, 6, 1e-6);
  lt_result_free(&r);
  r = RUN("glu", "", lt_tensor("self", x), lt_int("dim", 1));
  CHECK(r.rc == TPU_E_INVALID); /* odd halving dim */
  tpu_view x4 = lt_from(TPU_F32, 1, SZ(4), ARR(1, 2, 0, -1));
  r = RUN("glu", "", lt_tensor("self", x4), lt_int("dim", 0));
  CHECK_OK(r.rc);
  CHECK_VALS(r.out[0], ARR(1 * 0.5, 2 / (1 + exp(1))), 2, 1e-6);
  lt_result_free(&r);
  r = RUN("hardshrink", "", lt_tensor("self", x), lt_float("lambd", 0.5));
  CHECK_OK(r.rc);
  CHECK_VALS(r.out[0], ARR(-3, 0, 0, 0, 1, 4), 6, 0);
  lt_result_free(&r);
  tpu_view y = lt_from(TPU_F32, 1, SZ(3), ARR(4, -0.0, NAN));
  r = RUN("hypot", "", lt_tensor("self", x), lt_tensor("other", y));
  CHECK_OK(r.rc);
  CHECK_VALS(r.out[0], ARR(5, 0.5, NAN, sqrt(16.0625), 1, NAN), 6, 1e-6);
  lt_result_free(&r);
  r = RUN("copysign", "Tensor", lt_tensor("self", x), lt_tensor("other", y));
  CHECK_OK(r.rc);
  CHECK(lt_get(&r.out[0], 1) == -0.5 && lt_get(&r.out[0], 4) == -1);
  lt_result_free(&r);
  r = RUN("logaddexp", "", lt_tensor("self", x), lt_tensor("other", x));
  CHECK_OK(r.rc);
  for (int i = 0; i < 6; i++) w[i] = xs[i] + log(2.0);
  CHECK_VALS(r.out[0], w, 6, 1e-6);
  lt_result_free(&r);
  /* native_dropout draws from a generator appended by the glue */
  CHECK(tpulw_op_flags("native_dropout", "") == (TPULW_OP_NATIVE | TPULW_OP_NEEDS_GENERATOR));
  CHECK(tpulw_op_flags("index_put_", "") == (TPULW_OP_NATIVE | TPULW_OP_CPU_INDICES) &&
        tpulw_op_flags("nope", "") == 0);
  CHECK(tpulw_op_flags("add", "Tensor") == TPULW_OP_NATIVE);
  CHECK(tpulw_op_flags("torch_tpu::c_kernel", "") == TPULW_OP_NATIVE);
  r = RUN("native_dropout", "", lt_tensor("input", x), lt_float("p", 0.5), lt_bool("train", 1));
  CHECK(r.rc == TPU_E_UNSUPPORTED);
  lt_free(&x); lt_free(&x4); lt_free(&y);
}

TPU_TEST(lower_group_norm_backward) {
  /* N=1, C=4, HxW=2, groups=2: compare with the layer-norm-per-group math */
  tpu_view x = lt_new(TPU_F32, 3, SZ(1, 4, 2)), g = lt_new(TPU_F32, 3, SZ(1, 4, 2));
  lt_fill_rand(&x, 11);
  lt_fill_rand(&g, 12);
  tpu_view w = lt_from(TPU_F32, 1, SZ(4), ARR(1, -2, 0.5, 3));
  double mean[2], rstd[2];
  for (int k = 0; k < 2; k++) {
    double m = 0, v = 0;
    for (int i = 0; i < 4; i++) m += lt_get(&x, k * 4 + i);
    m /= 4;
    for (int i = 0; i < 4; i++) v += pow(lt_get(&x, k * 4 + i) - m, 2);
    mean[k] = m;
    rstd[k] = 1 / sqrt(v / 4 + 1e-5);
  }
  tpu_view mv = lt_from(TPU_F32, 2, SZ(1, 2), mean), rv = lt_from(TPU_F32, 2, SZ(1, 2), rstd);
  int64_t mask[3] = {1, 1, 1};
  lt_result r = RUN("native_group_norm_backward", "", lt_tensor("grad_out", g), lt_tensor("input", x),
                    lt_tensor("mean", mv), lt_tensor("rstd", rv), lt_tensor("weight", w),
                    lt_int("N", 1), lt_int("C", 4), lt_int("HxW", 2), lt_int("group", 2),
                    lt_ints("output_mask", mask, 3));
  CHECK_OK(r.rc);
  CHECK(r.nout == 3);
  double gi[8], gw[4] = {0}, gb[4] = {0};
  for (int k = 0; k < 2; k++) {
    double s1 = 0, s2 = 0, xh[4], gwv[4];
    for (int i = 0; i < 4; i++) {
      int c = k * 2 + i / 2;
      xh[i] = (lt_get(&x, k * 4 + i) - mean[k]) * rstd[k];
      gwv[i] = lt_get(&g, k * 4 + i) * lt_get(&w, c);
      s1 += gwv[i];
      s2 += gwv[i] * xh[i];
      gw[c] += lt_get(&g, k * 4 + i) * xh[i];
      gb[c] += lt_get(&g, k * 4 + i);
    }
    for (int i = 0; i < 4; i++) gi[k * 4 + i] = rstd[k] * (gwv[i] - s1 / 4 - xh[i] * s2 / 4);
  }
  CHECK_VALS(r.out[0], gi, 8, 1e-5);
  CHECK_VALS(r.out[1], gw, 4, 1e-5);
  CHECK_VALS(r.out[2], gb, 4, 1e-5);
  lt_result_free(&r);
  lt_free(&x); lt_free(&g); lt_free(&w); lt_free(&mv); lt_free(&rv);
}

TPU_TEST(lower_sort_topk_isin_histc) {
  tpu_view x = lt_from(TPU_F32, 2, SZ(2, 5), ARR(3, 1, NAN, 1, -2, 0, 5, 5, -1, 2));
  lt_result r = RUN("sort", "stable", lt_tensor("self", x), lt_bool("stable", 1), lt_int("dim", 1),
                    lt_bool("descending", 0));
  CHECK_OK(r.rc);
  CHECK(r.nout == 2 && r.info[1].dtype == TPU_I64);
  CHECK_VALS(r.out[0], ARR(-2, 1, 1, 3, NAN, -1, 0, 2, 5, 5), 10, 0);
  CHECK_VALS(r.out[1], ARR(4, 1, 3, 0, 2, 3, 0, 4, 1, 2), 10, 0); /* stable */
  lt_result_free(&r);
  r = RUN("topk", "", lt_tensor("self", x), lt_int("k", 2), lt_int("dim", -1),
          lt_bool("largest", 1), lt_bool("sorted", 1));
  CHECK_OK(r.rc);
  CHECK_VALS(r.out[0], ARR(NAN, 3, 5, 5), 4, 0); /* NaN is the largest */
  CHECK_VALS(r.out[1], ARR(2, 0, 1, 2), 4, 0);
  lt_result_free(&r);
  /* long rows use k rounds of max/argmax */
  tpu_view big = lt_new(TPU_F32, 1, SZ(5000));
  lt_fill_rand(&big, 5);
  lt_set(&big, 1234, 7);
  lt_set(&big, 4321, 6);
  r = RUN("topk", "", lt_tensor("self", big), lt_int("k", 2), lt_int("dim", 0),
          lt_bool("largest", 1), lt_bool("sorted", 1));
  CHECK_OK(r.rc);
  CHECK_VALS(r.out[0], ARR(7, 6), 2, 0);
  CHECK_VALS(r.out[1], ARR(1234, 4321), 2, 0);
  lt_result_free(&r);
  r = RUN("topk", "", lt_tensor("self", x), lt_int("k", 6), lt_int("dim", -1),
          lt_bool("largest", 1), lt_bool("sorted", 1));
  CHECK(r.rc == TPU_E_INVALID);
  /* isin */
  tpu_view e = lt_from(TPU_I64, 1, SZ(4), ARR(1, 2, 3, 4));
  tpu_view t = lt_from(TPU_F32, 1, SZ(2), ARR(2, 3.5));
  r = RUN("isin", "Tensor_Tensor", lt_tensor("elements", e), lt_tensor("test_elements", t),
          lt_bool("assume_unique", 0), lt_bool("invert", 0));
  CHECK_OK(r.rc);
  CHECK(r.info[0].dtype == TPU_BOOL);
  CHECK_VALS(r.out[0], ARR(0, 1, 0, 0), 4, 0);
  lt_result_free(&r);
  /* histc with the data's range */
  tpu_view h = lt_from(TPU_F32, 1, SZ(5), ARR(1, 2, 1, 4, 3));
  r = RUN("histc", "", lt_tensor("self", h), lt_int("bins", 3), lt_int("min", 0), lt_int("max", 0));
  CHECK_OK(r.rc);
  CHECK_VALS(r.out[0], ARR(2, 1, 2), 3, 0);
  lt_result_free(&r);
  lt_free(&x); lt_free(&big); lt_free(&e); lt_free(&t); lt_free(&h);
}

TPU_TEST(lower_upsample) {
  tpu_view x = lt_from(TPU_F32, 4, SZ(1, 1, 2, 2), ARR(1, 2, 3, 4));
  int64_t os[2] = {4, 3};
  lt_result r = RUN("upsample_nearest2d", "", lt_tensor("self", x), lt_ints("output_size", os, 2),
                    lt_none("scales_h"), lt_none("scales_w"));
  CHECK_OK(r.rc);
  CHECK_SHAPE(r.info[0], 1, 1, 4, 3);
  /* rows: h*2/4 -> 0,0,1,1; cols: floor(w*2/3) -> 0,0,1 */
  CHECK_VALS(r.out[0], ARR(1, 1, 2, 1, 1, 2, 3, 3, 4, 3, 3, 4), 12, 0);
  lt_result_free(&r);
  int64_t ol[2] = {2, 3};
  r = RUN("upsample_bilinear2d", "", lt_tensor("self", x), lt_ints("output_size", ol, 2),
          lt_bool("align_corners", 1), lt_none("scales_h"), lt_none("scales_w"));
  CHECK_OK(r.rc);
  CHECK_VALS(r.out[0], ARR(1, 1.5, 2, 3, 3.5, 4), 6, 1e-6);
  lt_result_free(&r);
  /* backward of nearest: each input collects its copies */
  tpu_view g = lt_new(TPU_F32, 4, SZ(1, 1, 4, 3));
  for (int i = 0; i < 12; i++) lt_set(&g, i, 1);
  int64_t is[4] = {1, 1, 2, 2};
  r = RUN("upsample_nearest2d_backward", "", lt_tensor("grad_output", g), lt_ints("output_size", os, 2),
          lt_ints("input_size", is, 4), lt_none("scales_h"), lt_none("scales_w"));
  CHECK_OK(r.rc);
  CHECK_SHAPE(r.info[0], 1, 1, 2, 2);
  CHECK_VALS(r.out[0], ARR(4, 2, 4, 2), 4, 0);
  lt_result_free(&r);
  lt_free(&x); lt_free(&g);
}

TPU_TEST(lower_shift_pad_median_search_multinomial) {
  tpu_view a = lt_from(TPU_I32, 1, SZ(4), ARR(8, -8, 1, -1));
  tpu_view s = lt_from(TPU_I32, 1, SZ(4), ARR(1, 40, -1, 31));
  lt_result r = RUN("__rshift__", "Tensor", lt_tensor("self", a), lt_tensor("other", s));
  CHECK_OK(r.rc);
  CHECK_VALS(r.out[0], ARR(4, -1, 0, -1), 4, 0);
  lt_result_free(&r);
  r = RUN("__lshift__", "Tensor", lt_tensor("self", a), lt_tensor("other", s));
  CHECK_OK(r.rc);
  CHECK_VALS(r.out[0], ARR(16, 0, 0, -2147483648.0), 4, 0);
  lt_result_free(&r);
  /* reflection pad (2, 1) of [1, 2, 3] -> [3, 2, 1, 2, 3, 2] */
  tpu_view p = lt_from(TPU_F32, 2, SZ(1, 3), ARR(1, 2, 3));
  int64_t pad[2] = {2, 1};
  r = RUN("reflection_pad1d", "", lt_tensor("self", p), lt_ints("padding", pad, 2));
  CHECK_OK(r.rc);
  CHECK_VALS(r.out[0], ARR(3, 2, 1, 2, 3, 2), 6, 0);
  lt_result_free(&r);
  r = RUN("replication_pad1d", "", lt_tensor("self", p), lt_ints("padding", pad, 2));
  CHECK_OK(r.rc);
  CHECK_VALS(r.out[0], ARR(1, 1, 1, 2, 3, 3), 6, 0);
  lt_result_free(&r);
  /* median with NaN, nanmedian, bucketize */
  tpu_view m = lt_from(TPU_F32, 2, SZ(2, 4), ARR(4, 1, 3, 2, 5, NAN, 1, 0));
  r = RUN("median", "dim", lt_tensor("self", m), lt_int("dim", 1), lt_bool("keepdim", 0));
  CHECK_OK(r.rc);
  CHECK_VALS(r.out[0], ARR(2, NAN), 2, 0);
  CHECK_VALS(r.out[1], ARR(3, 1), 2, 0);
  lt_result_free(&r);
  r = RUN("nanmedian", "dim", lt_tensor("self", m), lt_int("dim", 1), lt_bool("keepdim", 0));
  CHECK_OK(r.rc);
  CHECK_VALS(r.out[0], ARR(2, 1), 2, 0);
  lt_result_free(&r);
  tpu_view bnd = lt_from(TPU_F32, 1, SZ(3), ARR(0, 1, 2));
  r = RUN("bucketize", "Tensor", lt_tensor("self", m), lt_tensor("boundaries", bnd),
          lt_bool("out_int32", 0), lt_bool("right", 0));
  CHECK_OK(r.rc);
  CHECK(r.info[0].dtype == TPU_I64);
  CHECK_VALS(r.out[0], ARR(3, 1, 3, 2, 3, 3, 1, 0), 8, 0); /* NaN sorts after everything */
  lt_result_free(&r);
  /* multinomial never draws a zero-probability class */
  tpulw_philox gen = {7, 0};
  tpu_view pr = lt_from(TPU_F32, 2, SZ(2, 3), ARR(0, 1, 1, 1, 0, 0));
  r = RUN("multinomial", "", lt_tensor("self", pr), lt_int("num_samples", 2),
          lt_bool("replacement", 0), lt_gen("generator", &gen));
  CHECK_OK(r.rc);
  CHECK_SHAPE(r.info[0], 2, 2);
  double s0 = lt_get(&r.out[0], 0), s1 = lt_get(&r.out[0], 1);
  CHECK((s0 == 1 && s1 == 2) || (s0 == 2 && s1 == 1));
  CHECK(lt_get(&r.out[0], 2) == 0);
  CHECK(gen.offset == 1); /* one draw */
  lt_result_free(&r);
  lt_free(&a); lt_free(&s); lt_free(&p); lt_free(&m); lt_free(&bnd); lt_free(&pr);
}

TPU_TEST(lower_im2col_col2im) {
  /* 1x1x3x3 input, 2x2 kernel, stride 1: 4 blocks */
  tpu_view x = lt_from(TPU_F32, 4, SZ(1, 1, 3, 3), ARR(1, 2, 3, 4, 5, 6, 7, 8, 9));
  int64_t k[2] = {2, 2}, d[2] = {1, 1}, p[2] = {0, 0}, s[2] = {1, 1}, o[2] = {3, 3};
  lt_result r = RUN("im2col", "", lt_tensor("self", x), lt_ints("kernel_size", k, 2),
                    lt_ints("dilation", d, 2), lt_ints("padding", p, 2), lt_ints("stride", s, 2));
  CHECK_OK(r.rc);
  CHECK_SHAPE(r.info[0], 1, 4, 4);
  CHECK_VALS(r.out[0], ARR(1, 2, 4, 5, 2, 3, 5, 6, 4, 5, 7, 8, 5, 6, 8, 9), 16, 0);
  tpu_view cols = r.out[0];
  r.owned[0] = 0;
  lt_result_free(&r);
  /* fold(unfold(x)) counts each pixel once per block covering it */
  r = RUN("col2im", "", lt_tensor("self", cols), lt_ints("output_size", o, 2),
          lt_ints("kernel_size", k, 2), lt_ints("dilation", d, 2), lt_ints("padding", p, 2),
          lt_ints("stride", s, 2));
  CHECK_OK(r.rc);
  CHECK_SHAPE(r.info[0], 1, 1, 3, 3);
  CHECK_VALS(r.out[0], ARR(1, 4, 3, 8, 20, 12, 7, 16, 9), 9, 0);
  lt_result_free(&r);
  lt_free(&x); lt_free(&cols);
}

/* test_lower.c - lowering driver: table, type promotion, destinations,
 * resize and cast rules, copies, and pointwise ops end to end. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "lower/internal.h"
#include "test_lower_util.h"
#include "tpu_test.h"

#define ARR(...) ((const double[]){__VA_ARGS__})
#define SZ(...) ((const int64_t[]){__VA_ARGS__})

TPU_TEST(lower_table_sorted_unique) {
  int n = 0;
  const char *const *names = tpulw_list(&n);
  CHECK(n > 200);
  for (int i = 1; i < n; i++) {
    if (strcmp(names[i - 1], names[i]) >= 0)
      fprintf(stderr, "  not sorted/unique: %s, %s\n", names[i - 1], names[i]);
    CHECK(strcmp(names[i - 1], names[i]) < 0);
  }
  CHECK(tpulw_op_flags("add", "Tensor") & TPULW_OP_NATIVE);
  CHECK(tpulw_op_flags("add", "out") & TPULW_OP_NATIVE);
  CHECK(tpulw_op_flags("add_", "Tensor") & TPULW_OP_NATIVE);
  CHECK(tpulw_op_flags("relu", "") & TPULW_OP_NATIVE);
  CHECK(tpulw_op_flags("relu", "default") & TPULW_OP_NATIVE);
  CHECK(tpulw_op_flags("relu", NULL) & TPULW_OP_NATIVE);
  CHECK(tpulw_op_flags("relu", "bogus") == 0);
  CHECK(tpulw_op_flags("no_such_op", "") == 0);
}

TPU_TEST(lower_promotion_rules) {
  tpulw_tensor i32 = {0}, f64z = {0}, u8 = {0}, i8 = {0}, bt = {0}, f16 = {0},
               wf = {0}, i32z = {0};
  i32.defined = f64z.defined = u8.defined = i8.defined = bt.defined = 1;
  f16.defined = wf.defined = i32z.defined = 1;
  i32.view.dtype = TPU_I32; i32.view.ndim = 1;
  f64z.view.dtype = TPU_F64; f64z.view.ndim = 0;
  u8.view.dtype = TPU_U8; u8.view.ndim = 1;
  i8.view.dtype = TPU_I8; i8.view.ndim = 1;
  bt.view.dtype = TPU_BOOL; bt.view.ndim = 1;
  f16.view.dtype = TPU_F16; f16.view.ndim = 2;
  wf.view.dtype = TPU_F64; wf.wrapped_number = 1; wf.device = -1;
  i32z.view.dtype = TPU_I32; i32z.view.ndim = 0;
#define RT2(a, b) tpulw__result_type(2, (tpulw__opnd[]){a, b})
  /* int tensor + Python float -> default float */
  CHECK(RT2(tpulw__opnd_tensor(&i32), tpulw__opnd_scalar(tpulw__scalar_f(2.5))) == TPU_F32);
  /* int tensor + wrapped float tensor -> default float */
  CHECK(RT2(tpulw__opnd_tensor(&i32), tpulw__opnd_tensor(&wf)) == TPU_F32);
  /* int tensor + float64 0-dim tensor -> float64 (torch.result_type) */
  CHECK(RT2(tpulw__opnd_tensor(&i32), tpulw__opnd_tensor(&f64z)) == TPU_F64);
  CHECK(RT2(tpulw__opnd_tensor(&u8), tpulw__opnd_tensor(&i8)) == TPU_I16);
  CHECK(RT2(tpulw__opnd_tensor(&bt), tpulw__opnd_tensor(&bt)) == TPU_BOOL);
  CHECK(RT2(tpulw__opnd_tensor(&bt), tpulw__opnd_scalar(tpulw__scalar_i(5))) == TPU_I64);
  CHECK(RT2(tpulw__opnd_tensor(&i8), tpulw__opnd_scalar(tpulw__scalar_i(500))) == TPU_I8);
  CHECK(RT2(tpulw__opnd_tensor(&f16), tpulw__opnd_tensor(&f64z)) == TPU_F16);
  CHECK(RT2(tpulw__opnd_tensor(&bt), tpulw__opnd_tensor(&i32z)) == TPU_I32);
  CHECK(RT2(tpulw__opnd_tensor(&i32z), tpulw__opnd_scalar(tpulw__scalar_f(1.0))) == TPU_F32);
  CHECK(RT2(tpulw__opnd_tensor(&i32z), tpulw__opnd_tensor(&f64z)) == TPU_F64);
#undef RT2
  CHECK(tpulw__promote(TPU_BF16, TPU_F16) == TPU_F32);
  CHECK(tpulw__can_cast(TPU_I64, TPU_F16) && !tpulw__can_cast(TPU_F32, TPU_I64));
  CHECK(!tpulw__can_cast(TPU_I32, TPU_BOOL) && tpulw__can_cast(TPU_BOOL, TPU_U8));
}

/* prepare only; returns rc and fills the first output info */
static int prep(const char *name, const char *ov, const tpulw_arg *a, int n,
                tpulw_out_info *o0, int *nout) {
  tpulw_ctx ctx = {0, TPU_PREC_DEFAULT};
  tpulw_plan *p = NULL;
  int rc = tpulw_prepare(&ctx, name, ov, a, n, &p);
  if (rc < 0) return rc;
  if (o0) *o0 = *tpulw_plan_output(p, 0);
  if (nout) *nout = tpulw_plan_num_outputs(p);
  tpulw_plan_free(p);
  return rc;
}

TPU_TEST(lower_destinations) {
  float a[4], c[4], o[4];
  double od[4];
  int64_t l[4];
  tpu_view va, vb2, vc, vo, vod, vl, vo3;
  tpu_view_init_contiguous(&va, a, TPU_F32, 1, SZ(2));
  tpu_view_init_contiguous(&vb2, c, TPU_F32, 2, SZ(2, 2));
  tpu_view_init_contiguous(&vc, c, TPU_F32, 1, SZ(2));
  tpu_view_init_contiguous(&vo, o, TPU_F32, 1, SZ(2));
  tpu_view_init_contiguous(&vo3, o, TPU_F32, 1, SZ(3));
  tpu_view_init_contiguous(&vod, od, TPU_F64, 1, SZ(2));
  tpu_view_init_contiguous(&vl, l, TPU_I64, 1, SZ(2));
  tpulw_out_info oi;
  int nout;

  /* functional: new output */
  tpulw_arg f[] = {lt_tensor("self", va), lt_tensor("other", vc), lt_int("alpha", 1)};
  CHECK_OK(prep("add", "Tensor", f, 3, &oi, &nout));
  CHECK(nout == 1 && oi.dest_arg == -1 && oi.dtype == TPU_F32 && oi.ndim == 1 &&
        oi.sizes[0] == 2 && !oi.resize);

  /* in-place: output 0 into self */
  tpulw_arg ip[] = {lt_out("self", va), lt_tensor("other", vc), lt_int("alpha", 1)};
  CHECK_OK(prep("add_", "Tensor", ip, 3, &oi, NULL));
  CHECK(oi.dest_arg == 0 && !oi.resize);

  /* in-place with a broadcast result larger than self */
  tpulw_arg ipb[] = {lt_out("self", va), lt_tensor("other", vb2), lt_int("alpha", 1)};
  CHECK(prep("add_", "Tensor", ipb, 3, NULL, NULL) == TPU_E_INVALID);
  CHECK(strcmp(tpu_last_error(),
               "output with shape [2] doesn't match the broadcast shape [2, 2]") == 0);

  /* in-place float result into a Long self */
  tpulw_arg ipc[] = {lt_out("self", vl), lt_tensor("other", vc), lt_int("alpha", 1)};
  CHECK(prep("add_", "Tensor", ipc, 3, NULL, NULL) == TPU_E_INVALID);
  CHECK(strcmp(tpu_last_error(),
               "result type Float can't be cast to the desired output type Long") == 0);

  /* out=: same shape, resize when the shape differs, cast to wider dtype */
  tpulw_arg out1[] = {lt_tensor("self", va), lt_tensor("other", vc), lt_int("alpha", 1),
                      lt_out("out", vo)};
  CHECK_OK(prep("add", "out", out1, 4, &oi, NULL));
  CHECK(oi.dest_arg == 3 && !oi.resize && oi.dtype == TPU_F32);
  tpulw_arg out2[] = {lt_tensor("self", va), lt_tensor("other", vc), lt_int("alpha", 1),
                      lt_out("out", vo3)};
  CHECK_OK(prep("add", "out", out2, 4, &oi, NULL));
  CHECK(oi.dest_arg == 3 && oi.resize == 1 && oi.sizes[0] == 2);
  tpulw_arg out3[] = {lt_tensor("self", va), lt_tensor("other", vc), lt_int("alpha", 1),
                      lt_out("out", vod)};
  CHECK_OK(prep("add", "out", out3, 4, &oi, NULL));
  CHECK(oi.dtype == TPU_F64);
  tpulw_arg out4[] = {lt_tensor("self", va), lt_tensor("other", vc), lt_int("alpha", 1),
                      lt_out("out", vl)};
  CHECK(prep("add", "out", out4, 4, NULL, NULL) == TPU_E_INVALID);

  /* comparisons produce bool; into a float out= is fine */
  tpulw_arg cmp[] = {lt_tensor("self", va), lt_tensor("other", vc), lt_out("out", vo)};
  CHECK_OK(prep("lt", "Tensor_out", cmp, 3, &oi, NULL));
  CHECK(oi.dtype == TPU_F32);
  tpulw_arg cmpf[] = {lt_tensor("self", va), lt_tensor("other", vc)};
  CHECK_OK(prep("lt", "Tensor", cmpf, 2, &oi, NULL));
  CHECK(oi.dtype == TPU_BOOL);

  /* broadcasting error */
  tpu_view v3;
  tpu_view_init_contiguous(&v3, o, TPU_F32, 1, SZ(3));
  tpulw_arg bad[] = {lt_tensor("self", va), lt_tensor("other", v3), lt_int("alpha", 1)};
  CHECK(prep("add", "Tensor", bad, 3, NULL, NULL) == TPU_E_INVALID);
  CHECK(strstr(tpu_last_error(), "must match the size of tensor b") != NULL);

  /* dunder names: __lshift__ is functional, __ilshift__ in place */
  int64_t li[2] = {1, 2};
  tpu_view vli;
  tpu_view_init_contiguous(&vli, li, TPU_I64, 1, SZ(2));
  tpulw_arg sh[] = {lt_tensor("self", vli), lt_int("other", 3)};
  CHECK_OK(prep("__lshift__", "Scalar", sh, 2, &oi, NULL));
  CHECK(oi.dest_arg == -1);
  sh[0].is_output = 1;
  CHECK_OK(prep("__ilshift__", "Scalar", sh, 2, &oi, NULL));
  CHECK(oi.dest_arg == 0);
  CHECK_OK(prep("__and__", "Tensor", (tpulw_arg[]){lt_tensor("self", vli), lt_tensor("other", vli)}, 2, &oi, NULL));
  CHECK(oi.dest_arg == -1);

  /* unknown op, other device */
  CHECK(prep("no_such_op", "", f, 3, NULL, NULL) == TPU_E_UNSUPPORTED);
  tpulw_arg dev[] = {lt_tensor("self", va), lt_tensor("other", vc)};
  dev[1].t.device = 1;
  CHECK(prep("mul", "Tensor", dev, 2, NULL, NULL) == TPU_E_INVALID);

  /* int tensor + wrapped Python float -> float32 result */
  tpulw_arg wr[] = {lt_tensor("self", vl), lt_cpu("other", TPU_F64, 2.5, 1), lt_int("alpha", 1)};
  CHECK_OK(prep("add", "Tensor", wr, 3, &oi, NULL));
  CHECK(oi.dtype == TPU_F32);
  /* alpha must not be float for integer results */
  tpulw_arg al[] = {lt_tensor("self", vl), lt_tensor("other", vl), lt_float("alpha", 0.5)};
  CHECK(prep("add", "Tensor", al, 3, NULL, NULL) == TPU_E_INVALID);
  /* bool - bool */
  tpu_view vbool;
  tpu_view_init_contiguous(&vbool, a, TPU_BOOL, 1, SZ(2));
  tpulw_arg bs[] = {lt_tensor("self", vbool), lt_tensor("other", vbool), lt_int("alpha", 1)};
  CHECK(prep("sub", "Tensor", bs, 3, NULL, NULL) == TPU_E_INVALID);
  /* unsupported dtype combination falls back */
  tpulw_arg bw[] = {lt_tensor("self", va), lt_tensor("other", vc)};
  CHECK(prep("bitwise_and", "Tensor", bw, 2, NULL, NULL) == TPU_E_UNSUPPORTED);
}


TPU_TEST(lower_add_alpha_broadcast_noncontig) {
  /* a: 2x3 transposed view of a 3x2 buffer; b: [3] broadcast */
  tpu_view base = lt_from(TPU_F32, 2, SZ(3, 2), ARR(1, 2, 3, 4, 5, 6));
  tpu_view at = base; /* a[i][j] = base[j][i] */
  at.sizes[0] = 2; at.sizes[1] = 3;
  at.strides[0] = 1; at.strides[1] = 2;
  tpu_view bv = lt_from(TPU_F32, 1, SZ(3), ARR(10, 20, 30));
  tpulw_arg args[] = {lt_tensor("self", at), lt_tensor("other", bv), lt_float("alpha", 0.5)};
  lt_result r = lt_run("add", "Tensor", args, 3);
  CHECK_OK(r.rc);
  CHECK(r.info[0].ndim == 2 && r.info[0].sizes[0] == 2 && r.info[0].sizes[1] == 3);
  double want[6] = {1 + 5, 3 + 10, 5 + 15, 2 + 5, 4 + 10, 6 + 15};
  CHECK_VALS(r.out[0], want, 6, 1e-6);
  lt_result_free(&r);

  /* in place through the transposed view: a -= b */
  tpulw_arg ip[] = {lt_out("self", at), lt_tensor("other", bv), lt_int("alpha", 1)};
  r = lt_run("sub_", "Tensor", ip, 3);
  CHECK_OK(r.rc);
  double want2[6] = {1 - 10, 3 - 20, 5 - 30, 2 - 10, 4 - 20, 6 - 30};
  CHECK_VALS(at, want2, 6, 1e-6);
  lt_free(&base);
  lt_free(&bv);
}

TPU_TEST(lower_int_scalar_promotion_e2e) {
  tpu_view x = lt_from(TPU_I32, 1, SZ(3), ARR(1, -2, 7));
  tpulw_arg a[] = {lt_tensor("self", x), lt_cpu("other", TPU_F64, 2.5, 1), lt_int("alpha", 1)};
  lt_result r = lt_run("mul", "Tensor", a, 2);
  CHECK_OK(r.rc);
  CHECK(r.info[0].dtype == TPU_F32);
  CHECK_VALS(r.out[0], ARR(2.5, -5, 17.5), 3, 1e-7);
  lt_result_free(&r);
  /* true division of ints -> float */
  tpu_view y = lt_from(TPU_I32, 1, SZ(3), ARR(2, 4, -2));
  tpulw_arg d[] = {lt_tensor("self", x), lt_tensor("other", y)};
  r = lt_run("div", "Tensor", d, 2);
  CHECK_OK(r.rc);
  CHECK(r.info[0].dtype == TPU_F32);
  CHECK_VALS(r.out[0], ARR(0.5, -0.5, -3.5), 3, 1e-7);
  lt_result_free(&r);
  /* floor / trunc division and remainder on ints */
  tpulw_arg fl[] = {lt_tensor("self", x), lt_tensor("other", y), lt_str("rounding_mode", "floor")};
  r = lt_run("div", "Tensor_mode", fl, 3);
  CHECK_OK(r.rc);
  CHECK(r.info[0].dtype == TPU_I32);
  CHECK_VALS(r.out[0], ARR(0, -1, -4), 3, 0);
  lt_result_free(&r);
  tpulw_arg tr[] = {lt_tensor("self", x), lt_tensor("other", y), lt_str("rounding_mode", "trunc")};
  r = lt_run("div", "Tensor_mode", tr, 3);
  CHECK_OK(r.rc);
  CHECK_VALS(r.out[0], ARR(0, 0, -3), 3, 0);
  lt_result_free(&r);
  tpulw_arg rm[] = {lt_tensor("self", x), lt_tensor("other", y)};
  r = lt_run("remainder", "Tensor", rm, 2);
  CHECK_OK(r.rc);
  CHECK_VALS(r.out[0], ARR(1, 2, -1), 3, 0);
  lt_result_free(&r);
  /* pow with negative int exponents */
  tpu_view base = lt_from(TPU_I64, 1, SZ(4), ARR(2, 1, -1, 3));
  tpu_view ex = lt_from(TPU_I64, 1, SZ(4), ARR(-1, -3, -3, 3));
  tpulw_arg pw[] = {lt_tensor("self", base), lt_tensor("exponent", ex)};
  r = lt_run("pow", "Tensor_Tensor", pw, 2);
  CHECK_OK(r.rc);
  CHECK_VALS(r.out[0], ARR(0, 1, -1, 27), 4, 0);
  lt_result_free(&r);
  tpulw_arg pn[] = {lt_tensor("self", base), lt_int("exponent", -1)};
  CHECK(prep("pow", "Tensor_Scalar", pn, 2, NULL, NULL) == TPU_E_INVALID);
  lt_free(&x);
  lt_free(&y);
  lt_free(&base);
  lt_free(&ex);
}

TPU_TEST(lower_float_floor_div_remainder) {
  tpu_view x = lt_from(TPU_F32, 1, SZ(5), ARR(5, -5, 5.5, -0.0, 1));
  tpu_view y = lt_from(TPU_F32, 1, SZ(5), ARR(2, 2, -2, 3, 0));
  tpulw_arg fl[] = {lt_tensor("self", x), lt_tensor("other", y)};
  lt_result r = lt_run("floor_divide", "", fl, 2);
  CHECK_OK(r.rc);
  CHECK_VALS(r.out[0], ARR(2, -3, -3, -0.0, INFINITY), 5, 1e-7);
  lt_result_free(&r);
  r = lt_run("remainder", "Tensor", fl, 2);
  CHECK_OK(r.rc);
  double want[5] = {1, 1, -0.5, 0, NAN};
  CHECK_VALS(r.out[0], want, 5, 1e-7);
  lt_result_free(&r);
  lt_free(&x);
  lt_free(&y);
}

TPU_TEST(lower_unary_and_activations) {
  double xs[6] = {-3.5, -1, -0.25, 0, 0.75, 4};
  tpu_view x = lt_from(TPU_F32, 1, SZ(6), xs);
  struct { const char *name; double (*f)(double); } un[] = {
      {"exp", exp}, {"tanh", tanh}, {"sin", sin}, {"erf", erf}, {"floor", floor},
      {"ceil", ceil}, {"trunc", trunc}, {"expm1", expm1}, {"atan", atan},
  };
  for (size_t k = 0; k < sizeof un / sizeof un[0]; k++) {
    tpulw_arg a[] = {lt_tensor("self", x)};
    lt_result r = lt_run(un[k].name, "", a, 1);
    CHECK_OK(r.rc);
    double want[6];
    for (int i = 0; i < 6; i++) want[i] = un[k].f(xs[i]);
    CHECK_VALS(r.out[0], want, 6, 1e-5);
    lt_result_free(&r);
  }
  /* activations */
  double w_relu[6], w_sig[6], w_gelu[6], w_silu[6], w_hsw[6], w_sp[6];
  for (int i = 0; i < 6; i++) {
    double v = xs[i];
    w_relu[i] = v > 0 ? v : 0;
    w_sig[i] = 1 / (1 + exp(-v));
    w_gelu[i] = 0.5 * v * (1 + erf(v / sqrt(2)));
    w_silu[i] = v * w_sig[i];
    w_hsw[i] = v * fmin(fmax(v + 3, 0), 6) / 6;
    w_sp[i] = log1p(exp(v));
  }
  struct { const char *name; const double *w; } act[] = {
      {"relu", w_relu}, {"sigmoid", w_sig}, {"gelu", w_gelu},
      {"silu", w_silu}, {"hardswish", w_hsw}, {"softplus", w_sp}};
  for (size_t k = 0; k < sizeof act / sizeof act[0]; k++) {
    tpulw_arg a[] = {lt_tensor("self", x)};
    lt_result r = lt_run(act[k].name, "", a, 1);
    if (r.rc) fprintf(stderr, "  op %s\n", act[k].name);
    CHECK_OK(r.rc);
    CHECK_VALS(r.out[0], act[k].w, 6, 1e-5);
    lt_result_free(&r);
  }
  /* integer input -> float32 result */
  tpu_view xi = lt_from(TPU_I64, 1, SZ(3), ARR(0, 1, 4));
  tpulw_arg ai[] = {lt_tensor("self", xi)};
  lt_result r = lt_run("sqrt", "", ai, 1);
  CHECK_OK(r.rc);
  CHECK(r.info[0].dtype == TPU_F32);
  CHECK_VALS(r.out[0], ARR(0, 1, 2), 3, 1e-7);
  lt_result_free(&r);
  /* sign of NaN is 0, neg/abs keep ints */
  tpu_view xn = lt_from(TPU_F32, 1, SZ(3), ARR(NAN, -2, 3));
  tpulw_arg an[] = {lt_tensor("self", xn)};
  r = lt_run("sign", "", an, 1);
  CHECK_OK(r.rc);
  CHECK_VALS(r.out[0], ARR(0, -1, 1), 3, 0);
  lt_result_free(&r);
  /* backward: gelu_backward vs numeric derivative */
  tpu_view g = lt_from(TPU_F32, 1, SZ(6), ARR(1, 1, 1, 1, 1, 2));
  tpulw_arg gb[] = {lt_tensor("grad_output", g), lt_tensor("self", x), lt_str("approximate", "none")};
  r = lt_run("gelu_backward", "", gb, 3);
  CHECK_OK(r.rc);
  double wg[6];
  for (int i = 0; i < 6; i++) {
    double v = xs[i], h = 1e-6;
    double f1 = 0.5 * (v + h) * (1 + erf((v + h) / sqrt(2)));
    double f0 = 0.5 * (v - h) * (1 + erf((v - h) / sqrt(2)));
    wg[i] = (i == 5 ? 2 : 1) * (f1 - f0) / (2 * h);
  }
  CHECK_VALS(r.out[0], wg, 6, 1e-4);
  lt_result_free(&r);
  lt_free(&x);
  lt_free(&xi);
  lt_free(&xn);
  lt_free(&g);
}

TPU_TEST(lower_where_clamp_fill_masked) {
  tpu_view c = lt_from(TPU_BOOL, 1, SZ(4), ARR(1, 0, 1, 0));
  tpu_view x = lt_from(TPU_F32, 1, SZ(4), ARR(1, 2, 3, 4));
  tpulw_arg w[] = {lt_tensor("condition", c), lt_tensor("self", x), lt_cpu("other", TPU_F64, -1, 1)};
  lt_result r = lt_run("where", "self", w, 3);
  CHECK_OK(r.rc);
  CHECK(r.info[0].dtype == TPU_F32);
  CHECK_VALS(r.out[0], ARR(1, -1, 3, -1), 4, 0);
  lt_result_free(&r);
  /* clamp: int tensor with a float bound promotes to float */
  tpu_view xi = lt_from(TPU_I64, 1, SZ(4), ARR(-5, 0, 5, 10));
  tpulw_arg cl[] = {lt_tensor("self", xi), lt_float("min", -1.5), lt_int("max", 6)};
  r = lt_run("clamp", "", cl, 3);
  CHECK_OK(r.rc);
  CHECK(r.info[0].dtype == TPU_F32);
  CHECK_VALS(r.out[0], ARR(-1.5, 0, 5, 6), 4, 0);
  lt_result_free(&r);
  tpulw_arg cn[] = {lt_tensor("self", xi), lt_none("min"), lt_none("max")};
  CHECK(prep("clamp", "", cn, 3, NULL, NULL) == TPU_E_INVALID);
  /* fill_ and masked_fill_ in place */
  tpulw_arg f[] = {lt_out("self", x), lt_float("value", 2.5)};
  r = lt_run("fill_", "Scalar", f, 2);
  CHECK_OK(r.rc);
  CHECK_VALS(x, ARR(2.5, 2.5, 2.5, 2.5), 4, 0);
  tpulw_arg mf[] = {lt_out("self", x), lt_tensor("mask", c), lt_int("value", 7)};
  r = lt_run("masked_fill_", "Scalar", mf, 3);
  CHECK_OK(r.rc);
  CHECK_VALS(x, ARR(7, 2.5, 7, 2.5), 4, 0);
  tpu_view i8 = lt_from(TPU_I8, 1, SZ(2), ARR(1, 2));
  tpulw_arg fo[] = {lt_out("self", i8), lt_int("value", 300)};
  CHECK(prep("fill_", "Scalar", fo, 2, NULL, NULL) == TPU_E_INVALID);
  tpulw_arg z[] = {lt_out("self", xi)};
  r = lt_run("zero_", "", z, 1);
  CHECK_OK(r.rc);
  CHECK_VALS(xi, ARR(0, 0, 0, 0), 4, 0);
  lt_free(&c);
  lt_free(&x);
  lt_free(&xi);
  lt_free(&i8);
}

TPU_TEST(lower_lerp_addcmul_compare_logical) {
  tpu_view s = lt_from(TPU_F32, 1, SZ(3), ARR(0, 1, 2));
  tpu_view e = lt_from(TPU_F32, 1, SZ(3), ARR(10, 11, 12));
  tpulw_arg l[] = {lt_tensor("self", s), lt_tensor("end", e), lt_float("weight", 0.75)};
  lt_result r = lt_run("lerp", "Scalar", l, 3);
  CHECK_OK(r.rc);
  CHECK_VALS(r.out[0], ARR(7.5, 8.5, 9.5), 3, 1e-7);
  lt_result_free(&r);
  tpulw_arg ac[] = {lt_tensor("self", s), lt_tensor("tensor1", e), lt_tensor("tensor2", e),
                    lt_float("value", 0.5)};
  r = lt_run("addcdiv", "", ac, 4);
  CHECK_OK(r.rc);
  CHECK_VALS(r.out[0], ARR(0.5, 1.5, 2.5), 3, 1e-7);
  lt_result_free(&r);
  tpulw_arg cmp[] = {lt_tensor("self", s), lt_float("other", 1.0)};
  r = lt_run("ge", "Scalar", cmp, 2);
  CHECK_OK(r.rc);
  CHECK(r.info[0].dtype == TPU_BOOL);
  CHECK_VALS(r.out[0], ARR(0, 1, 1), 3, 0);
  lt_result_free(&r);
  tpulw_arg lx[] = {lt_tensor("self", s), lt_tensor("other", e)};
  r = lt_run("logical_xor", "", lx, 2);
  CHECK_OK(r.rc);
  CHECK_VALS(r.out[0], ARR(1, 0, 0), 3, 0);
  lt_result_free(&r);
  lt_free(&s);
  lt_free(&e);
}

TPU_TEST(lower_arange_out_and_empty) {
  tpu_view o = lt_new(TPU_F32, 1, SZ(0));
  tpulw_arg a[] = {lt_int("start", 1), lt_float("end", 2.0), lt_float("step", 0.25),
                   lt_out("out", o)};
  lt_result r = lt_run("arange", "start_out", a, 4);
  CHECK_OK(r.rc);
  CHECK(r.info[0].resize == 1 && r.info[0].sizes[0] == 4);
  CHECK_VALS(r.out[0], ARR(1, 1.25, 1.5, 1.75), 4, 0);
  lt_result_free(&r);
  tpulw_arg z[] = {lt_int("start", 0), lt_int("end", 5), lt_int("step", 0), lt_out("out", o)};
  CHECK(prep("arange", "start_out", z, 4, NULL, NULL) == TPU_E_INVALID);
  lt_free(&o);
  /* empty tensors flow through */
  tpu_view e = lt_new(TPU_F32, 2, SZ(0, 3));
  tpulw_arg ee[] = {lt_tensor("self", e), lt_tensor("other", e), lt_int("alpha", 1)};
  r = lt_run("add", "Tensor", ee, 3);
  CHECK_OK(r.rc);
  CHECK(r.info[0].ndim == 2 && r.info[0].sizes[0] == 0);
  lt_result_free(&r);
  lt_free(&e);
}


/* The plan cache: a repeated elementwise call reuses the built graph and
 * binds this call's views (offsets, aliasing); another scalar, aliasing
 * pattern or layout is another entry; results equal an uncached lowering. */
TPU_TEST(lower_plan_cache_rebinds) {
  tpulw_plan_cache_clear();
  tpu_view buf = lt_from(TPU_F32, 1, SZ(8), ARR(1, 2, 3, 4, 5, 6, 7, 8));
  tpu_view lo = buf, hi = buf; /* two views of one buffer, other offsets */
  lo.sizes[0] = hi.sizes[0] = 4;
  hi.offset = 4;
  uint64_t h0, m0, h1, m1;
  for (int rep = 0; rep < 3; rep++) {
    tpulw_arg args[] = {lt_tensor("self", lo), lt_tensor("other", hi), lt_int("alpha", 2)};
    lt_result r = lt_run("add", "Tensor", args, 3);
    CHECK_OK(r.rc);
    CHECK_VALS(r.out[0], ((double[]){11, 14, 17, 20}), 4, 1e-6);
    lt_result_free(&r);
    /* the same structure, the roles of the views swapped */
    tpulw_arg sw[] = {lt_tensor("self", hi), lt_tensor("other", lo), lt_int("alpha", 2)};
    r = lt_run("add", "Tensor", sw, 3);
    CHECK_OK(r.rc);
    CHECK_VALS(r.out[0], ((double[]){7, 10, 13, 16}), 4, 1e-6);
    lt_result_free(&r);
  }
  tpulw_plan_cache_stats(&h0, &m0);
  CHECK(m0 == 1 && h0 == 5);
  /* another scalar: another entry, its own constant */
  tpulw_arg a3[] = {lt_tensor("self", lo), lt_tensor("other", hi), lt_int("alpha", 3)};
  lt_result r = lt_run("add", "Tensor", a3, 3);
  CHECK_OK(r.rc);
  CHECK_VALS(r.out[0], ((double[]){16, 20, 24, 28}), 4, 1e-6);
  lt_result_free(&r);
  /* self aliasing other (one parameter) vs two distinct views */
  tpulw_arg al[] = {lt_tensor("self", lo), lt_tensor("other", lo), lt_int("alpha", 2)};
  r = lt_run("add", "Tensor", al, 3);
  CHECK_OK(r.rc);
  CHECK_VALS(r.out[0], ((double[]){3, 6, 9, 12}), 4, 1e-6);
  lt_result_free(&r);
  tpulw_plan_cache_stats(&h1, &m1);
  CHECK(m1 == m0 + 2 && h1 == h0);
  /* in place into a view with an offset, twice (the second a hit) */
  for (int rep = 0; rep < 2; rep++) {
    tpulw_arg ip[] = {lt_out("self", hi), lt_float("other", 0.5), lt_int("alpha", 1)};
    r = lt_run("add_", "Scalar", ip, 3);
    CHECK_OK(r.rc);
    lt_result_free(&r);
  }
  CHECK_VALS(buf, ((double[]){1, 2, 3, 4, 6, 7, 8, 9}), 8, 1e-6);
  tpulw_plan_cache_stats(&h1, &m1);
  CHECK(m1 == m0 + 3 && h1 == h0 + 1);
  /* a transposed input: the new result follows its layout, not the cached one */
  tpu_view t = buf, c = buf;
  t.ndim = c.ndim = 2;
  t.sizes[0] = t.sizes[1] = c.sizes[0] = c.sizes[1] = 2;
  c.strides[0] = 2; c.strides[1] = 1;
  t.strides[0] = 1; t.strides[1] = 2;
  tpulw_arg ac[] = {lt_tensor("self", c), lt_float("other", 1.0), lt_int("alpha", 1)};
  tpulw_arg at[] = {lt_tensor("self", t), lt_float("other", 1.0), lt_int("alpha", 1)};
  tpulw_out_info oc, ot;
  CHECK_OK(prep("add", "Scalar", ac, 3, &oc, NULL));
  CHECK_OK(prep("add", "Scalar", at, 3, &ot, NULL));
  CHECK(!oc.strided && ot.strided && ot.strides[0] == 1 && ot.strides[1] == 2);
  tpulw_plan_cache_clear();
  lt_free(&buf);
}

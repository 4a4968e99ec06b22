/* test_stablehlo.c - the StableHLO text importer (tpulw_import_stablehlo):
 * generic-form modules as jax prints them, run on the vTPU executor. */
#include <string.h>

#include "test_exec_util.h"
#include "tpu_lower.h"
#include "tpu_test.h"

#define HDR "\"builtin.module\"() <{sym_name = \"jit_f\"}> ({\n"
#define FTR "}) {mhlo.num_partitions = 1 : i32} : () -> ()\n"

/* f(x: f32[4]) = fori_loop(0, 3, x -> x * 2 + 1) through a call + while */
static const char *k_loop =
    HDR
    "  \"func.func\"() <{function_type = (tensor<4xf32>) -> tensor<4xf32>, sym_name = \"main\", sym_visibility = \"public\"}> ({\n"
    "  ^bb0(%arg0: tensor<4xf32>):\n"
    "    %0 = \"stablehlo.constant\"() <{value = dense<0> : tensor<i32>}> : () -> tensor<i32>\n"
    "    %1:2 = \"stablehlo.while\"(%0, %arg0) ({\n"
    "    ^bb0(%a1: tensor<i32>, %a2: tensor<4xf32>):\n"
    "      %2 = \"stablehlo.constant\"() <{value = dense<3> : tensor<i32>}> : () -> tensor<i32>\n"
    "      %3 = \"stablehlo.compare\"(%a1, %2) <{comparison_direction = #stablehlo<comparison_direction LT>}> : (tensor<i32>, tensor<i32>) -> tensor<i1>\n"
    "      \"stablehlo.return\"(%3) : (tensor<i1>) -> ()\n"
    "    }, {\n"
    "    ^bb0(%a3: tensor<i32>, %a4: tensor<4xf32>):\n"
    "      %4 = \"func.call\"(%a4) <{callee = @body}> : (tensor<4xf32>) -> tensor<4xf32>\n"
    "      %5 = \"stablehlo.constant\"() <{value = dense<1> : tensor<i32>}> : () -> tensor<i32>\n"
    "      %6 = \"stablehlo.add\"(%a3, %5) : (tensor<i32>, tensor<i32>) -> tensor<i32>\n"
    "      \"stablehlo.return\"(%6, %4) : (tensor<i32>, tensor<4xf32>) -> ()\n"
    "    }) : (tensor<i32>, tensor<4xf32>) -> (tensor<i32>, tensor<4xf32>)\n"
    "    \"func.return\"(%1#1) : (tensor<4xf32>) -> ()\n"
    "  }) : () -> ()\n"
    "  \"func.func\"() <{function_type = (tensor<4xf32>) -> tensor<4xf32>, sym_name = \"body\", sym_visibility = \"private\"}> ({\n"
    "  ^bb0(%b0: tensor<4xf32>):\n"
    "    %7 = \"stablehlo.constant\"() <{value = dense<[2.000000e+00, 2.000000e+00, 2.000000e+00, 2.000000e+00]> : tensor<4xf32>}> : () -> tensor<4xf32>\n"
    "    %8 = \"stablehlo.multiply\"(%b0, %7) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>\n"
    "    %9 = \"stablehlo.constant\"() <{value = dense<1.000000e+00> : tensor<f32>}> : () -> tensor<f32>\n"
    "    %10 = \"stablehlo.broadcast_in_dim\"(%9) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<4xf32>\n"
    "    %11 = \"stablehlo.add\"(%8, %10) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>\n"
    "    \"func.return\"(%11) : (tensor<4xf32>) -> ()\n"
    "  }) : () -> ()\n" FTR;

TPU_TEST(stablehlo_unrolled_while_call) {
  tpuir_graph *g = NULL;
  int dt = TPU_F32, nd = 1;
  int64_t sz[TPU_MAX_DIMS] = {4};
  CHECK_OK(tpulw_import_stablehlo(k_loop, 1, &dt, &nd, sz, TPU_PREC_DEFAULT, &g));
  CHECK(tpuir_num_params(g) == 1 && tpuir_num_outputs(g) == 1);
  tarr x = ta_new(TPU_F32, 1, sz), y = ta_new(TPU_F32, 1, sz);
  for (int i = 0; i < 4; i++) tv_set(&x.v, i, i - 1.5);
  int rc = tpux_run(g, 1, &x.v, 1, &y.v);
  double got[4];
  for (int i = 0; i < 4; i++) got[i] = tv_get(&y.v, i);
  free(x.mem); free(y.mem); tpuir_graph_free(g);
  CHECK_OK(rc);
  for (int i = 0; i < 4; i++) {
    double v = i - 1.5;
    for (int k = 0; k < 3; k++) v = v * 2 + 1;
    CHECK_NEAR(got[i], v, 0);
  }
}

/* while whose condition reads the data: NotImplementedError, no graph */
static const char *k_dyn =
    HDR
    "  \"func.func\"() <{function_type = (tensor<f32>) -> tensor<f32>, sym_name = \"main\"}> ({\n"
    "  ^bb0(%arg0: tensor<f32>):\n"
    "    %0 = \"stablehlo.while\"(%arg0) ({\n"
    "    ^bb0(%a: tensor<f32>):\n"
    "      %1 = \"stablehlo.constant\"() <{value = dense<1.000000e+02> : tensor<f32>}> : () -> tensor<f32>\n"
    "      %2 = \"stablehlo.compare\"(%a, %1) <{comparison_direction = #stablehlo<comparison_direction LT>}> : (tensor<f32>, tensor<f32>) -> tensor<i1>\n"
    "      \"stablehlo.return\"(%2) : (tensor<i1>) -> ()\n"
    "    }, {\n"
    "    ^bb0(%b: tensor<f32>):\n"
    "      %3 = \"stablehlo.add\"(%b, %b) : (tensor<f32>, tensor<f32>) -> tensor<f32>\n"
    "      \"stablehlo.return\"(%3) : (tensor<f32>) -> ()\n"
    "    }) : (tensor<f32>) -> tensor<f32>\n"
    "    \"func.return\"(%0) : (tensor<f32>) -> ()\n"
    "  }) : () -> ()\n" FTR;

TPU_TEST(stablehlo_data_dependent_while_unsupported) {
  tpuir_graph *g = NULL;
  CHECK(tpulw_import_stablehlo(k_dyn, -1, NULL, NULL, NULL, TPU_PREC_DEFAULT, &g) == TPU_E_UNSUPPORTED);
  CHECK(g == NULL);
  CHECK(strstr(tpu_last_error(), "data-dependent") != NULL);
}

/* dynamic_slice / dynamic_update_slice with a device index, and a case
 * on a device predicate */
static const char *k_dyn_slice =
    HDR
    "  \"func.func\"() <{function_type = (tensor<5xf32>, tensor<i32>) -> (tensor<2xf32>, tensor<5xf32>, tensor<5xf32>), sym_name = \"main\"}> ({\n"
    "  ^bb0(%x: tensor<5xf32>, %i: tensor<i32>):\n"
    "    %0 = \"stablehlo.dynamic_slice\"(%x, %i) <{slice_sizes = array<i64: 2>}> : (tensor<5xf32>, tensor<i32>) -> tensor<2xf32>\n"
    "    %1 = \"stablehlo.constant\"() <{value = dense<[1.000000e+01, 2.000000e+01]> : tensor<2xf32>}> : () -> tensor<2xf32>\n"
    "    %2 = \"stablehlo.dynamic_update_slice\"(%x, %1, %i) : (tensor<5xf32>, tensor<2xf32>, tensor<i32>) -> tensor<5xf32>\n"
    "    %3 = \"stablehlo.constant\"() <{value = dense<2> : tensor<i32>}> : () -> tensor<i32>\n"
    "    %4 = \"stablehlo.compare\"(%i, %3) <{comparison_direction = #stablehlo<comparison_direction GT>}> : (tensor<i32>, tensor<i32>) -> tensor<i1>\n"
    "    %5 = \"stablehlo.convert\"(%4) : (tensor<i1>) -> tensor<i32>\n"
    "    %6 = \"stablehlo.case\"(%5) ({\n"
    "      \"stablehlo.return\"(%x) : (tensor<5xf32>) -> ()\n"
    "    }, {\n"
    "      %7 = \"stablehlo.negate\"(%x) : (tensor<5xf32>) -> tensor<5xf32>\n"
    "      \"stablehlo.return\"(%7) : (tensor<5xf32>) -> ()\n"
    "    }) : (tensor<i32>) -> tensor<5xf32>\n"
    "    \"func.return\"(%0, %2, %6) : (tensor<2xf32>, tensor<5xf32>, tensor<5xf32>) -> ()\n"
    "  }) : () -> ()\n" FTR;

TPU_TEST(stablehlo_dynamic_index_and_case) {
  tpuir_graph *g = NULL;
  CHECK_OK(tpulw_import_stablehlo(k_dyn_slice, -1, NULL, NULL, NULL, TPU_PREC_DEFAULT, &g));
  int64_t s5 = 5, s2 = 2;
  int bad = 0;
  for (int idx = -1; idx <= 6 && !bad; idx++) {
    tarr x = ta_new(TPU_F32, 1, &s5), i = ta_new(TPU_I32, 0, NULL);
    tarr o0 = ta_new(TPU_F32, 1, &s2), o1 = ta_new(TPU_F32, 1, &s5), o2 = ta_new(TPU_F32, 1, &s5);
    for (int k = 0; k < 5; k++) tv_set(&x.v, k, k);
    tv_set(&i.v, 0, idx);
    tpu_view ins[2] = {x.v, i.v}, outs[3] = {o0.v, o1.v, o2.v};
    int rc = tpux_run(g, 2, ins, 3, outs);
    int s = idx < 0 ? 0 : idx > 3 ? 3 : idx; /* StableHLO clamps the start */
    if (rc) bad = 1;
    for (int k = 0; k < 2 && !bad; k++) bad |= tv_get(&o0.v, k) != s + k;
    for (int k = 0; k < 5 && !bad; k++)
      bad |= tv_get(&o1.v, k) != (k == s ? 10 : k == s + 1 ? 20 : k);
    for (int k = 0; k < 5 && !bad; k++) bad |= tv_get(&o2.v, k) != (idx > 2 ? -k : k);
    free(x.mem); free(i.mem); free(o0.mem); free(o1.mem); free(o2.mem);
  }
  tpuir_graph_free(g);
  CHECK(!bad);
}

TPU_TEST(stablehlo_errors) {
  tpuir_graph *g = NULL;
  CHECK(tpulw_import_stablehlo("not mlir", -1, NULL, NULL, NULL, 0, &g) == TPU_E_INVALID);
  int dt = TPU_F64, nd = 1;
  int64_t sz[TPU_MAX_DIMS] = {4};
  CHECK(tpulw_import_stablehlo(k_loop, 1, &dt, &nd, sz, 0, &g) == TPU_E_INVALID); /* wrong dtype */
  const char *cc =
      HDR "  \"func.func\"() <{function_type = (tensor<f32>) -> tensor<f32>, sym_name = \"main\"}> ({\n"
      "  ^bb0(%a: tensor<f32>):\n"
      "    %0 = \"stablehlo.custom_call\"(%a) <{call_target_name = \"foo\"}> : (tensor<f32>) -> tensor<f32>\n"
      "    \"func.return\"(%0) : (tensor<f32>) -> ()\n"
      "  }) : () -> ()\n" FTR;
  CHECK(tpulw_import_stablehlo(cc, -1, NULL, NULL, NULL, 0, &g) == TPU_E_UNSUPPORTED);
  CHECK(strstr(tpu_last_error(), "custom_call") != NULL);
}

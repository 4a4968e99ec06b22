/* test_kernel.c - user kernels (tpux_kernel_*, TPUIR_CUSTOM_CALL): the
 * registry, signature checks and output-shape inference, and custom-call
 * nodes run by the vTPU executor inside a program (strided operands,
 * multi-result kernels, scalars), against scalar references. */
#include <stdio.h>
#include <string.h>

#include "tpu_exec.h"
#include "tpu_ir.h"
#include "tpu_test.h"

/* (float32[N,M] x, float32[M] b, float a) -> (float32[N,M] y, float32[N] s):
 * y = a * x + b, s = row sums of y */
static void axpb(void *const *in, void *const *out, const int64_t *sym) {
  const float *x = in[0], *b = in[1];
  float a = *(const float *)in[2];
  float *y = out[0], *s = out[1];
  int64_t n = sym[0], m = sym[1];
  for (int64_t i = 0; i < n; i++) {
    float acc = 0;
    for (int64_t j = 0; j < m; j++) acc += y[i * m + j] = a * x[i * m + j] + b[j];
    s[i] = acc;
  }
}

/* (int32[K] v) -> int32[2*K+1]: v, then v + 100, then K */
static void dup(void *const *in, void *const *out, const int64_t *sym) {
  const int32_t *v = in[0];
  int32_t *o = out[0];
  int64_t k = sym[0];
  for (int64_t i = 0; i < k; i++) o[i] = v[i], o[k + i] = v[i] + 100;
  o[2 * k] = (int32_t)k;
}

static const uint64_t KEY_AXPB = 0x1234567890abcdefull, KEY_DUP = 0xfedcba0987654321ull,
                      KEY_AXPB_PAR = 0x1234567890abcdeeull;

static int register_all(void) {
  tpux_kernel_desc d;
  memset(&d, 0, sizeof d);
  d.name = "axpb";
  d.signature = "(float32[N,M] x, float32[M] b, float a) -> (float32[N,M], float32[N])";
  d.fn = axpb;
  d.key = KEY_AXPB;
  d.nin = 3;
  d.in_dtype[0] = TPU_F32, d.in_ndim[0] = 2, d.in_dim[0][0] = -1, d.in_dim[0][1] = -2;
  d.in_dtype[1] = TPU_F32, d.in_ndim[1] = 1, d.in_dim[1][0] = -2;
  d.in_dtype[2] = TPU_F32, d.in_ndim[2] = -1;
  d.in_name[0] = "x", d.in_name[1] = "b", d.in_name[2] = "a";
  d.nsym = 2, d.sym_name[0] = "N", d.sym_name[1] = "M";
  d.nout = 2;
  d.out_dtype[0] = TPU_F32, d.out_ndim[0] = 2, d.out_dtype[1] = TPU_F32, d.out_ndim[1] = 1;
  int64_t code[] = {TPUX_KOP_SYM, 0, TPUX_KOP_END, 0, TPUX_KOP_SYM, 1, TPUX_KOP_END, 0,
                    TPUX_KOP_SYM, 0, TPUX_KOP_END, 0};
  d.ncode = (int)(sizeof code / sizeof code[0]);
  memcpy(d.code, code, sizeof code);
  int rc = tpux_kernel_register(&d);
  if (rc) return rc;
  /* the same kernel on blocks of rows of N (symbol 0) */
  d.key = KEY_AXPB_PAR;
  d.parallel = 2; /* M: not dimension 0 of the outputs */
  if (tpux_kernel_register(&d) != TPU_E_INVALID) return TPU_E_INTERNAL;
  d.parallel = 1;
  rc = tpux_kernel_register(&d);
  if (rc) return rc;
  memset(&d, 0, sizeof d);
  d.name = "dup";
  d.signature = "(int32[K] v) -> int32[2*K+1]";
  d.fn = dup;
  d.key = KEY_DUP;
  d.nin = 1;
  d.in_dtype[0] = TPU_I32, d.in_ndim[0] = 1, d.in_dim[0][0] = -1, d.in_name[0] = "v";
  d.nsym = 1, d.sym_name[0] = "K";
  d.nout = 1, d.out_dtype[0] = TPU_I32, d.out_ndim[0] = 1;
  int64_t code2[] = {TPUX_KOP_LIT, 2, TPUX_KOP_SYM, 0, TPUX_KOP_MUL, 0, TPUX_KOP_LIT, 1,
                     TPUX_KOP_ADD, 0, TPUX_KOP_END, 0};
  d.ncode = (int)(sizeof code2 / sizeof code2[0]);
  memcpy(d.code, code2, sizeof code2);
  return tpux_kernel_register(&d);
}

TPU_TEST(kernel_register_and_infer) {
  CHECK_OK(register_all());
  CHECK_OK(register_all()); /* again: a no-op */
  CHECK(strcmp(tpux_kernel_name(KEY_AXPB), "axpb") == 0);
  CHECK(tpux_kernel_name(42) == NULL);
  int32_t dt[3] = {TPU_F32, TPU_F32, TPU_F32}, nd[3] = {2, 1, -1};
  int64_t sz[3][TPU_MAX_DIMS] = {{3, 5}, {5}, {0}};
  int64_t sym[2];
  int nout = 0;
  int32_t odt[2], ond[2];
  int64_t osz[2][TPU_MAX_DIMS];
  CHECK_OK(tpux_kernel_infer(KEY_AXPB, 3, dt, nd, (const int64_t(*)[TPU_MAX_DIMS])sz, sym,
                             &nout, odt, ond, osz));
  CHECK(nout == 2 && sym[0] == 3 && sym[1] == 5);
  CHECK(ond[0] == 2 && osz[0][0] == 3 && osz[0][1] == 5 && ond[1] == 1 && osz[1][0] == 3);
  /* wrong dtype, conflicting symbol, scalar for tensor, argument count */
  dt[1] = TPU_F64;
  CHECK(tpux_kernel_infer(KEY_AXPB, 3, dt, nd, (const int64_t(*)[TPU_MAX_DIMS])sz, NULL, NULL,
                          NULL, NULL, NULL) == TPU_E_INVALID);
  CHECK(strstr(tpu_last_error(), "'b'") && strstr(tpu_last_error(), "float32"));
  dt[1] = TPU_F32;
  sz[1][0] = 4;
  CHECK(tpux_kernel_infer(KEY_AXPB, 3, dt, nd, (const int64_t(*)[TPU_MAX_DIMS])sz, NULL, NULL,
                          NULL, NULL, NULL) == TPU_E_INVALID);
  CHECK(strstr(tpu_last_error(), "size mismatch for 'M'"));
  sz[1][0] = 5;
  nd[0] = -1;
  CHECK(tpux_kernel_infer(KEY_AXPB, 3, dt, nd, (const int64_t(*)[TPU_MAX_DIMS])sz, NULL, NULL,
                          NULL, NULL, NULL) == TPU_E_INVALID);
  nd[0] = 2;
  CHECK(tpux_kernel_infer(KEY_AXPB, 2, dt, nd, (const int64_t(*)[TPU_MAX_DIMS])sz, NULL, NULL,
                          NULL, NULL, NULL) == TPU_E_INVALID);
  /* output size program: 2*K+1 */
  int32_t dt2 = TPU_I32, nd2 = 1;
  int64_t sz2[1][TPU_MAX_DIMS] = {{7}};
  CHECK_OK(tpux_kernel_infer(KEY_DUP, 1, &dt2, &nd2, (const int64_t(*)[TPU_MAX_DIMS])sz2, NULL,
                             &nout, odt, ond, osz));
  CHECK(nout == 1 && ond[0] == 1 && osz[0][0] == 15);
  /* a bad descriptor and an unloadable path */
  tpux_kernel_desc d;
  memset(&d, 0, sizeof d);
  d.name = "bad";
  d.path = "/nonexistent/k.so";
  d.symbol = "f";
  d.key = 7;
  d.nout = 1;
  CHECK(tpux_kernel_register(&d) == TPU_E_INVALID); /* dlopen fails */
  CHECK(strstr(tpu_last_error(), "cannot load"));
}

TPU_TEST(kernel_custom_call_runs_in_a_program) {
  CHECK_OK(register_all());
  /* x^T (a transposed, strided operand) -> both results of axpb, then y + 1 */
  tpuir_graph *g = tpuir_graph_new();
  int64_t xs[2] = {4, 3}, bs[1] = {4}, perm[2] = {1, 0};
  tpuir_val xt = tpuir_param(g, TPU_F32, 2, xs);
  tpuir_val b = tpuir_param(g, TPU_F32, 1, bs);
  tpuir_val x = tpuir_transpose(g, xt, perm); /* [3, 4] */
  tpuir_val a = tpuir_const_f(g, TPU_F32, 2.0);
  tpuir_val ops[3] = {x, b, a};
  int64_t ys[2] = {3, 4}, ss[1] = {3};
  tpuir_val y = tpuir_custom_call(g, KEY_AXPB, 3, ops, 0, 2, TPU_F32, 2, ys);
  tpuir_val s = tpuir_custom_call(g, KEY_AXPB, 3, ops, 1, 2, TPU_F32, 1, ss);
  tpuir_val one = tpuir_broadcast_in_dim(g, tpuir_const_f(g, TPU_F32, 1.0), 2, ys, NULL);
  tpuir_val y1 = tpuir_binary(g, TPUIR_ADD, y, one);
  CHECK(y >= 0 && s >= 0 && y1 >= 0);
  tpuir_val outs[2] = {y1, s};
  CHECK_OK(tpuir_set_outputs(g, 2, outs));
  char dump[4096];
  tpuir_dump(g, dump, sizeof dump);
  CHECK(strstr(dump, "custom_call(") && strstr(dump, "result=1 of 2"));
  float xv[12], bv[4], yv[12], sv[3];
  for (int i = 0; i < 12; i++) xv[i] = (float)i - 5.5f;
  for (int i = 0; i < 4; i++) bv[i] = 0.25f * (float)i;
  tpu_view in[2], out[2];
  tpu_view_init_contiguous(&in[0], xv, TPU_F32, 2, xs);
  tpu_view_init_contiguous(&in[1], bv, TPU_F32, 1, bs);
  tpu_view_init_contiguous(&out[0], yv, TPU_F32, 2, ys);
  tpu_view_init_contiguous(&out[1], sv, TPU_F32, 1, ss);
  uint64_t runs0 = tpux_kernel_runs();
  CHECK_OK(tpux_run(g, 2, in, 2, out));
  CHECK(tpux_kernel_runs() - runs0 == 2); /* one run per live result node */
  for (int i = 0; i < 3; i++) {
    float acc = 0;
    for (int j = 0; j < 4; j++) {
      float want = 2.0f * xv[j * 3 + i] + bv[j];
      acc += want;
      CHECK(yv[i * 4 + j] == want + 1.0f);
    }
    CHECK(sv[i] == acc);
  }
  /* the kernel's key is part of the structural hash */
  tpuir_graph *g2 = tpuir_graph_new();
  tpuir_val p2 = tpuir_param(g2, TPU_I32, 1, bs);
  tpuir_val r2 = tpuir_custom_call(g2, KEY_DUP, 1, &p2, 0, 1, TPU_I32, 1, (int64_t[]){9});
  CHECK_OK(tpuir_set_outputs(g2, 1, &r2));
  uint64_t h1 = TEST_IR_HASH(g2);
  tpuir_graph *g3 = tpuir_graph_new();
  tpuir_val p3 = tpuir_param(g3, TPU_I32, 1, bs);
  tpuir_val r3 = tpuir_custom_call(g3, KEY_DUP + 1, 1, &p3, 0, 1, TPU_I32, 1, (int64_t[]){9});
  CHECK_OK(tpuir_set_outputs(g3, 1, &r3));
  CHECK(TEST_IR_HASH(g3) != h1);
  int32_t iv[4] = {1, 2, 3, 4}, ov[9];
  tpu_view vi, vo;
  tpu_view_init_contiguous(&vi, iv, TPU_I32, 1, bs);
  tpu_view_init_contiguous(&vo, ov, TPU_I32, 1, (int64_t[]){9});
  CHECK_OK(tpux_run(g2, 1, &vi, 1, &vo));
  CHECK(ov[0] == 1 && ov[3] == 4 && ov[4] == 101 && ov[7] == 104 && ov[8] == 4);
  /* an unregistered key fails at run time with a clear message */
  CHECK(tpux_run(g3, 1, &vi, 1, &vo) == TPU_E_INVALID);
  CHECK(strstr(tpu_last_error(), "not loaded"));
  /* builder checks */
  CHECK(tpuir_custom_call(g3, 1, 1, &p3, 1, 1, TPU_I32, 1, (int64_t[]){9}) < 0);
  CHECK(tpuir_custom_call(g3, 1, 1, (tpuir_val[]){99}, 0, 1, TPU_I32, 1, (int64_t[]){9}) < 0);
  CHECK(tpuir_custom_call(g3, 1, 1, &p3, 0, 1, TPU_I32, 1, (int64_t[]){-1}) < 0);
  tpuir_graph_free(g);
  tpuir_graph_free(g2);
  tpuir_graph_free(g3);
}

TPU_TEST(kernel_parallel_rows) {
  CHECK_OK(register_all());
  enum { N = 203, M = 37 };
  tpuir_graph *g = tpuir_graph_new();
  int64_t xs[2] = {N, M}, bs[1] = {M}, ss[1] = {N};
  tpuir_val ops[3] = {tpuir_param(g, TPU_F32, 2, xs), tpuir_param(g, TPU_F32, 1, bs),
                      tpuir_const_f(g, TPU_F32, -0.5)};
  tpuir_val outs[2] = {tpuir_custom_call(g, KEY_AXPB_PAR, 3, ops, 0, 2, TPU_F32, 2, xs),
                       tpuir_custom_call(g, KEY_AXPB_PAR, 3, ops, 1, 2, TPU_F32, 1, ss)};
  CHECK_OK(tpuir_set_outputs(g, 2, outs));
  static float xv[N * M], yv[N * M], sv[N];
  float bv[M];
  for (int i = 0; i < N * M; i++) xv[i] = (float)((i * 7) % 13) - 6.0f;
  for (int j = 0; j < M; j++) bv[j] = 0.5f * (float)j;
  tpu_view in[2], out[2];
  tpu_view_init_contiguous(&in[0], xv, TPU_F32, 2, xs);
  tpu_view_init_contiguous(&in[1], bv, TPU_F32, 1, bs);
  tpu_view_init_contiguous(&out[0], yv, TPU_F32, 2, xs);
  tpu_view_init_contiguous(&out[1], sv, TPU_F32, 1, ss);
  CHECK_OK(tpux_run(g, 2, in, 2, out));
  for (int i = 0; i < N; i++) {
    float acc = 0;
    for (int j = 0; j < M; j++) {
      float want = -0.5f * xv[i * M + j] + bv[j];
      acc += want;
      CHECK(yv[i * M + j] == want);
    }
    CHECK(sv[i] == acc);
  }
  tpuir_graph_free(g);
}

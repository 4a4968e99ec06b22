/* test_ir.c - IR builder: shape/dtype inference, validation, dump, hash. */
#include <string.h>
#include <unistd.h>

#include "tpu_ir.h"
#include "tpu_test.h"

static int shape_is(const tpuir_graph *g, tpuir_val v, int dtype, int ndim,
                    const int64_t *sizes) {
  int dt, nd;
  int64_t s[TPU_MAX_DIMS];
  if (tpuir_value_info(g, v, &dt, &nd, s) != TPU_OK) return 0;
  if (dt != dtype || nd != ndim) return 0;
  for (int i = 0; i < nd; i++)
    if (s[i] != sizes[i]) return 0;
  return 1;
}

TPU_TEST(ir_params_consts) {
  tpuir_graph *g = tpuir_graph_new();
  CHECK(g);
  int64_t s[2] = {4, 8};
  tpuir_val p0 = tpuir_param(g, TPU_F32, 2, s);
  tpuir_val p1 = tpuir_param(g, TPU_I64, 0, NULL);
  CHECK(p0 == 0 && p1 == 1);
  CHECK(tpuir_num_params(g) == 2);
  CHECK(tpuir_get_node(g, p1)->dim == 1);
  CHECK(shape_is(g, p0, TPU_F32, 2, s));
  tpuir_val c = tpuir_const_f(g, TPU_I32, -2.75);
  CHECK(c >= 0 && tpuir_get_node(g, c)->ival == -2 &&
        tpuir_get_node(g, c)->fval == -2.75);
  c = tpuir_const_i(g, TPU_F64, 7);
  CHECK(tpuir_get_node(g, c)->fval == 7.0 && tpuir_get_node(g, c)->ival == 7);
  c = tpuir_const_f(g, TPU_BOOL, NAN);
  CHECK(tpuir_get_node(g, c)->ival == 1);
  c = tpuir_const_f(g, TPU_I64, 1e300);
  CHECK(tpuir_get_node(g, c)->ival == INT64_MAX);
  CHECK(tpuir_param(g, 99, 2, s) == TPU_E_TYPE);
  CHECK(tpuir_param(g, TPU_F32, TPU_MAX_DIMS + 1, s) == TPU_E_INVALID);
  int64_t neg[1] = {-1};
  CHECK(tpuir_param(g, TPU_F32, 1, neg) == TPU_E_INVALID);
  CHECK(strstr(tpu_last_error(), "negative size"));
  CHECK(tpuir_iota(g, TPU_I64, 2, s, 2) == TPU_E_INDEX);
  tpuir_val io = tpuir_iota(g, TPU_I64, 2, s, 1);
  CHECK(shape_is(g, io, TPU_I64, 2, s) && tpuir_get_node(g, io)->dim == 1);
  CHECK(tpuir_rng(g, TPUIR_RNG_UNIFORM, TPU_I32, 2, s, 1, 2) == TPU_E_TYPE);
  CHECK(tpuir_rng(g, TPUIR_RNG_BITS, TPU_F32, 2, s, 1, 2) == TPU_E_TYPE);
  tpuir_val r = tpuir_rng(g, TPUIR_RNG_NORMAL, TPU_BF16, 2, s, 5, 9);
  CHECK(r >= 0 && tpuir_get_node(g, r)->seed == 5 &&
        tpuir_get_node(g, r)->offset == 9 &&
        tpuir_get_node(g, r)->kind == TPUIR_RNG_NORMAL);
  tpuir_graph_free(g);
}

TPU_TEST(ir_elementwise_validation) {
  tpuir_graph *g = tpuir_graph_new();
  int64_t s[2] = {4, 8}, s2[2] = {8, 4};
  tpuir_val a = tpuir_param(g, TPU_F32, 2, s);
  tpuir_val b = tpuir_param(g, TPU_F32, 2, s);
  tpuir_val c = tpuir_param(g, TPU_F32, 2, s2);
  tpuir_val d = tpuir_param(g, TPU_F64, 2, s);
  tpuir_val i = tpuir_param(g, TPU_I32, 2, s);
  tpuir_val bo = tpuir_param(g, TPU_BOOL, 2, s);
  tpuir_val sum = tpuir_binary(g, TPUIR_ADD, a, b);
  CHECK(shape_is(g, sum, TPU_F32, 2, s));
  CHECK(tpuir_binary(g, TPUIR_ADD, a, c) == TPU_E_INVALID);
  CHECK(strstr(tpu_last_error(), "f32[4,8]") && strstr(tpu_last_error(), "f32[8,4]"));
  CHECK(tpuir_binary(g, TPUIR_ADD, a, d) == TPU_E_TYPE);
  CHECK(tpuir_binary(g, TPUIR_NEG, a, b) == TPU_E_INVALID);
  CHECK(tpuir_unary(g, TPUIR_ADD, a) == TPU_E_INVALID);
  CHECK(shape_is(g, tpuir_binary(g, TPUIR_LT, a, b), TPU_BOOL, 2, s));
  CHECK(tpuir_binary(g, TPUIR_AND, a, b) == TPU_E_TYPE);
  CHECK(tpuir_binary(g, TPUIR_AND, i, i) >= 0);
  CHECK(tpuir_binary(g, TPUIR_OR, bo, bo) >= 0);
  CHECK(tpuir_binary(g, TPUIR_SHL, bo, bo) == TPU_E_TYPE);
  CHECK(tpuir_binary(g, TPUIR_SUB, bo, bo) == TPU_E_TYPE);
  CHECK(tpuir_binary(g, TPUIR_ATAN2, i, i) == TPU_E_TYPE);
  CHECK(tpuir_unary(g, TPUIR_EXP, i) == TPU_E_TYPE);
  CHECK(strstr(tpu_last_error(), "floating point"));
  CHECK(tpuir_unary(g, TPUIR_NOT, a) == TPU_E_TYPE);
  CHECK(tpuir_unary(g, TPUIR_NEG, bo) == TPU_E_TYPE);
  CHECK(tpuir_unary(g, TPUIR_FLOOR, i) >= 0);
  CHECK(shape_is(g, tpuir_unary(g, TPUIR_IS_NAN, d), TPU_BOOL, 2, s));
  CHECK(shape_is(g, tpuir_unary(g, TPUIR_ERF, d), TPU_F64, 2, s));
  CHECK(shape_is(g, tpuir_convert(g, a, TPU_BF16), TPU_BF16, 2, s));
  CHECK(tpuir_convert(g, a, 42) == TPU_E_TYPE);
  CHECK(shape_is(g, tpuir_select(g, bo, a, b), TPU_F32, 2, s));
  CHECK(tpuir_select(g, i, a, b) == TPU_E_TYPE);
  CHECK(tpuir_select(g, bo, a, d) == TPU_E_TYPE);
  CHECK(tpuir_select(g, bo, a, c) == TPU_E_INVALID);
  /* undefined value id */
  CHECK(tpuir_unary(g, TPUIR_EXP, 1000) == TPU_E_INVALID);
  tpuir_graph_free(g);
}

TPU_TEST(ir_error_passthrough) {
  tpuir_graph *g = tpuir_graph_new();
  int64_t s[1] = {3};
  tpuir_val a = tpuir_param(g, TPU_F32, 1, s);
  int n0 = tpuir_num_nodes(g);
  tpuir_val bad = tpuir_unary(g, TPUIR_EXP, TPU_E_INDEX);
  CHECK(bad == TPU_E_INDEX);
  CHECK(tpuir_binary(g, TPUIR_ADD, a, TPU_E_TYPE) == TPU_E_TYPE);
  CHECK(tpuir_binary(g, TPUIR_ADD, TPU_E_VALUE, a) == TPU_E_VALUE);
  CHECK(tpuir_convert(g, TPU_E_INDEX, TPU_F64) == TPU_E_INDEX);
  CHECK(tpuir_reduce(g, TPUIR_RED_SUM, TPU_E_OOM, 0, NULL) == TPU_E_OOM);
  tpuir_val l[2] = {a, TPU_E_INDEX};
  CHECK(tpuir_concat(g, 2, l, 0) == TPU_E_INDEX);
  CHECK(tpuir_set_outputs(g, 2, l) == TPU_E_INDEX);
  CHECK(tpuir_num_nodes(g) == n0);
  tpuir_graph_free(g);
}

TPU_TEST(ir_shape_ops) {
  tpuir_graph *g = tpuir_graph_new();
  int64_t s[3] = {2, 3, 4};
  tpuir_val x = tpuir_param(g, TPU_F32, 3, s);
  /* broadcast_in_dim */
  int64_t s1[2] = {3, 1};
  tpuir_val y = tpuir_param(g, TPU_F32, 2, s1);
  int64_t bs[3] = {2, 3, 5}, bd[2] = {1, 2};
  tpuir_val b = tpuir_broadcast_in_dim(g, y, 3, bs, bd);
  CHECK(shape_is(g, b, TPU_F32, 3, bs));
  CHECK(tpuir_get_node(g, b)->na == 2 && tpuir_get_node(g, b)->a[1] == 2);
  int64_t bs2[3] = {2, 4, 5};
  CHECK(tpuir_broadcast_in_dim(g, y, 3, bs2, bd) == TPU_E_INVALID);
  int64_t bdd[2] = {1, 1};
  CHECK(tpuir_broadcast_in_dim(g, y, 3, bs, bdd) == TPU_E_INVALID);
  int64_t bdo[2] = {1, 3};
  CHECK(tpuir_broadcast_in_dim(g, y, 3, bs, bdo) == TPU_E_INDEX);
  CHECK(tpuir_broadcast_in_dim(g, x, 2, bs, bd) == TPU_E_INVALID);
  /* reshape */
  int64_t rs[2] = {6, 4}, rbad[2] = {5, 5};
  CHECK(shape_is(g, tpuir_reshape(g, x, 2, rs), TPU_F32, 2, rs));
  CHECK(tpuir_reshape(g, x, 2, rbad) == TPU_E_INVALID);
  CHECK(strstr(tpu_last_error(), "invalid for input of size 24"));
  /* transpose */
  int64_t perm[3] = {2, 0, 1}, ts[3] = {4, 2, 3}, pbad[3] = {0, 0, 1};
  CHECK(shape_is(g, tpuir_transpose(g, x, perm), TPU_F32, 3, ts));
  CHECK(tpuir_transpose(g, x, pbad) == TPU_E_INVALID);
  /* slice */
  int64_t st[3] = {0, 1, 0}, li[3] = {2, 3, 4}, sd[3] = {1, 1, 3};
  int64_t ss[3] = {2, 2, 2};
  tpuir_val sl = tpuir_slice(g, x, st, li, sd);
  CHECK(shape_is(g, sl, TPU_F32, 3, ss));
  CHECK(tpuir_get_node(g, sl)->c[2] == 3 && tpuir_get_node(g, sl)->b[1] == 3);
  int64_t sd0[3] = {1, 0, 1}, libad[3] = {2, 4, 4};
  CHECK(tpuir_slice(g, x, st, li, sd0) == TPU_E_INVALID);
  CHECK(tpuir_slice(g, x, st, libad, sd) == TPU_E_INVALID);
  /* concat */
  tpuir_val l3[3] = {x, x, x};
  int64_t cs[3] = {2, 9, 4};
  tpuir_val cc = tpuir_concat(g, 3, l3, 1);
  CHECK(shape_is(g, cc, TPU_F32, 3, cs));
  CHECK(tpuir_get_node(g, cc)->nlist == 3 && tpuir_get_node(g, cc)->list[2] == x);
  tpuir_val lb[2] = {x, y};
  CHECK(tpuir_concat(g, 2, lb, 0) == TPU_E_INVALID);
  CHECK(tpuir_concat(g, 1, l3, 3) == TPU_E_INDEX);
  /* pad */
  tpuir_val pv = tpuir_const_f(g, TPU_F32, 0.5);
  int64_t lo[3] = {1, -1, 0}, hi[3] = {0, 2, 1}, in[3] = {0, 0, 2};
  int64_t ps[3] = {3, 4, 11};
  tpuir_val pd = tpuir_pad(g, x, pv, lo, hi, in);
  CHECK(shape_is(g, pd, TPU_F32, 3, ps));
  CHECK(tpuir_get_node(g, pd)->in[1] == pv && tpuir_get_node(g, pd)->c[2] == 2);
  int64_t inbad[3] = {0, -1, 0};
  CHECK(tpuir_pad(g, x, pv, lo, hi, inbad) == TPU_E_INVALID);
  int64_t lobad[3] = {-5, 0, 0};
  CHECK(tpuir_pad(g, x, pv, lobad, hi, in) == TPU_E_INVALID);
  CHECK(tpuir_pad(g, x, x, lo, hi, in) == TPU_E_INVALID);
  /* reverse */
  int64_t rd[2] = {0, 2};
  CHECK(shape_is(g, tpuir_reverse(g, x, 2, rd), TPU_F32, 3, s));
  int64_t rdbad[1] = {3};
  CHECK(tpuir_reverse(g, x, 1, rdbad) == TPU_E_INDEX);
  tpuir_graph_free(g);
}

TPU_TEST(ir_reduce_dot_index) {
  tpuir_graph *g = tpuir_graph_new();
  int64_t s[3] = {2, 3, 4};
  tpuir_val x = tpuir_param(g, TPU_F32, 3, s);
  int64_t rd[2] = {2, 0}, rs[1] = {3};
  tpuir_val r = tpuir_reduce(g, TPUIR_RED_SUM, x, 2, rd);
  CHECK(shape_is(g, r, TPU_F32, 1, rs));
  CHECK(tpuir_reduce(g, TPUIR_RED_AND, x, 2, rd) == TPU_E_TYPE);
  CHECK(tpuir_reduce(g, 17, x, 2, rd) == TPU_E_INVALID);
  CHECK(shape_is(g, tpuir_reduce(g, TPUIR_RED_MAX, x, 0, NULL), TPU_F32, 3, s));
  int64_t as[2] = {2, 4};
  CHECK(shape_is(g, tpuir_argreduce(g, TPUIR_RED_MAX, x, 1), TPU_I64, 2, as));
  CHECK(tpuir_argreduce(g, TPUIR_RED_SUM, x, 1) == TPU_E_INVALID);
  CHECK(tpuir_argreduce(g, TPUIR_RED_MAX, x, 3) == TPU_E_INDEX);
  int64_t ez[2] = {3, 0};
  tpuir_val e = tpuir_param(g, TPU_F32, 2, ez);
  CHECK(tpuir_argreduce(g, TPUIR_RED_MIN, e, 1) == TPU_E_INDEX);
  CHECK(tpuir_argreduce(g, TPUIR_RED_MIN, e, 0) >= 0);
  /* dot_general: [b=2, m=3, k=4] x [b=2, k=4, n=5] -> [2, 3, 5] */
  int64_t rsz[3] = {2, 4, 5};
  tpuir_val y = tpuir_param(g, TPU_F32, 3, rsz);
  int64_t lb[1] = {0}, rb[1] = {0}, lc[1] = {2}, rc[1] = {1};
  int64_t ds[3] = {2, 3, 5};
  tpuir_val d = tpuir_dot_general(g, x, y, 1, lb, rb, 1, lc, rc, TPU_PREC_HIGH,
                                  TPU_F32);
  CHECK(shape_is(g, d, TPU_F32, 3, ds));
  const tpuir_node *dn = tpuir_get_node(g, d);
  CHECK(dn->na == 1 && dn->nb == 1 && dn->c[0] == 2 && dn->d[0] == 1 &&
        dn->kind == TPU_PREC_HIGH);
  int64_t rcbad[1] = {2};
  CHECK(tpuir_dot_general(g, x, y, 1, lb, rb, 1, lc, rcbad, 0, TPU_F32) ==
        TPU_E_INVALID);
  int64_t lcdup[1] = {0};
  CHECK(tpuir_dot_general(g, x, y, 1, lb, rb, 1, lcdup, rc, 0, TPU_F32) ==
        TPU_E_INVALID);
  /* no batch, contract lhs 1 with rhs 1: [2,3,4]x[2,4,5]? sizes 3 vs 4 */
  int64_t c1[1] = {1};
  CHECK(tpuir_dot_general(g, x, y, 0, NULL, NULL, 1, c1, c1, 0, TPU_F32) ==
        TPU_E_INVALID);
  /* outer product */
  int64_t os[6] = {2, 3, 4, 2, 4, 5};
  CHECK(shape_is(g, tpuir_dot_general(g, x, y, 0, NULL, NULL, 0, NULL, NULL, 0,
                                      TPU_F32),
                 TPU_F32, 6, os));
  /* gather / index_select / scatter_add / index_add */
  int64_t is[3] = {2, 2, 4};
  tpuir_val idx = tpuir_param(g, TPU_I64, 3, is);
  CHECK(shape_is(g, tpuir_gather(g, x, 1, idx), TPU_F32, 3, is));
  CHECK(tpuir_gather(g, x, 1, x) == TPU_E_TYPE);
  int64_t isbig[3] = {3, 2, 4};
  tpuir_val idxb = tpuir_param(g, TPU_I32, 3, isbig);
  CHECK(tpuir_gather(g, x, 1, idxb) == TPU_E_INVALID);
  CHECK(tpuir_gather(g, x, 0, idxb) >= 0);
  int64_t vs[1] = {7};
  tpuir_val v = tpuir_param(g, TPU_I32, 1, vs);
  int64_t iss[3] = {2, 7, 4};
  CHECK(shape_is(g, tpuir_index_select(g, x, 1, v), TPU_F32, 3, iss));
  CHECK(tpuir_index_select(g, x, 1, idx) == TPU_E_INVALID);
  CHECK(tpuir_index_select(g, x, 5, v) == TPU_E_INDEX);
  tpuir_val src = tpuir_param(g, TPU_F32, 3, is);
  CHECK(shape_is(g, tpuir_scatter_add(g, x, 1, idx, src), TPU_F32, 3, s));
  CHECK(tpuir_scatter_add(g, x, 1, idx, idx) == TPU_E_TYPE);
  tpuir_val src2 = tpuir_param(g, TPU_F32, 3, iss);
  CHECK(shape_is(g, tpuir_index_add(g, x, 1, v, src2), TPU_F32, 3, s));
  CHECK(tpuir_index_add(g, x, 1, v, src) == TPU_E_INVALID);
  tpuir_graph_free(g);
}

TPU_TEST(ir_outputs_dump_hash) {
  uint64_t h[3];
  for (int k = 0; k < 3; k++) {
    tpuir_graph *g = tpuir_graph_new();
    int64_t s[2] = {4, 8};
    tpuir_val a = tpuir_param(g, TPU_F32, 2, s);
    tpuir_val b = tpuir_param(g, TPU_F32, 2, s);
    tpuir_val c = tpuir_binary(g, k == 2 ? TPUIR_SUB : TPUIR_ADD, a, b);
    tpuir_val one = tpuir_const_f(g, TPU_F32, 1.5);
    int64_t none[1];
    tpuir_val ob = tpuir_broadcast_in_dim(g, one, 2, s, none);
    tpuir_val d = tpuir_binary(g, TPUIR_MUL, c, ob);
    tpuir_val outs[2] = {d, a};
    CHECK(tpuir_num_outputs(g) == 0);
    CHECK_OK(tpuir_set_outputs(g, 2, outs));
    CHECK(tpuir_num_outputs(g) == 2 && tpuir_output(g, 0) == d &&
          tpuir_output(g, 1) == a);
    CHECK(tpuir_output(g, 2) == TPU_E_INVALID);
    h[k] = TEST_IR_HASH(g);
    if (k == 0) {
      char buf[1024];
      size_t need = tpuir_dump(g, buf, sizeof buf);
      CHECK(need == strlen(buf));
      CHECK(strstr(buf, "%2 = add(%0, %1) : f32[4,8]\n"));
      CHECK(strstr(buf, "%3 = constant() {value=1.5} : f32[]\n"));
      CHECK(strstr(buf, "return %5, %0"));
      char small[10];
      CHECK(tpuir_dump(g, small, sizeof small) == need);
      CHECK(strlen(small) == 9 && memcmp(small, buf, 9) == 0);
      CHECK(tpuir_dump(g, NULL, 0) == need);
      CHECK(strcmp(tpuir_op_name(TPUIR_DOT_GENERAL), "dot_general") == 0);
      CHECK(strcmp(tpuir_op_name(-1), "?") == 0);
      for (int op = 0; op < TPUIR_NUM_OPS; op++)
        CHECK(strcmp(tpuir_op_name(op), "?") != 0);
    }
    tpuir_graph_free(g);
  }
  CHECK(h[0] == h[1]);
  CHECK(h[0] != h[2]);
  /* constants and rng offsets are part of the structure */
  tpuir_graph *g1 = tpuir_graph_new(), *g2 = tpuir_graph_new();
  int64_t s[1] = {8};
  tpuir_rng(g1, TPUIR_RNG_UNIFORM, TPU_F32, 1, s, 1, 0);
  tpuir_rng(g2, TPUIR_RNG_UNIFORM, TPU_F32, 1, s, 1, 8);
  CHECK(TEST_IR_HASH(g1) != TEST_IR_HASH(g2));
  tpuir_graph_free(g1);
  tpuir_graph_free(g2);
  tpuir_graph_free(NULL);
}

TPU_TEST(ir_many_nodes) {
  tpuir_graph *g = tpuir_graph_new();
  int64_t s[1] = {2};
  tpuir_val v = tpuir_param(g, TPU_F32, 1, s);
  for (int i = 0; i < 1000; i++) v = tpuir_unary(g, TPUIR_NEG, v);
  CHECK(v == 1000 && tpuir_num_nodes(g) == 1001);
  CHECK(tpuir_get_node(g, 1000)->in[0] == 999);
  CHECK(tpuir_get_node(g, 1001) == NULL);
  tpuir_graph_free(g);
}

/* The op table (TPUIR_OPS): every op has a distinct name and a class, the
 * elementwise predicate follows the class, can-fail follows the node. */
TPU_TEST(ir_op_table) {
  CHECK(tpuir_op_info(-1) == NULL && tpuir_op_info(TPUIR_NUM_OPS) == NULL);
  CHECK(!strcmp(tpuir_op_name(TPUIR_NUM_OPS), "?"));
  for (int op = 0; op < TPUIR_NUM_OPS; op++) {
    const tpuir_op_info_t *oi = tpuir_op_info(op);
    CHECK(oi && oi->name && strcmp(oi->name, "?") != 0);
    for (int q = 0; q < op; q++) CHECK(strcmp(oi->name, tpuir_op_name(q)) != 0);
    CHECK(oi->arity >= -2 && oi->arity <= 4);
  }
  CHECK(tpuir_op_is_elementwise(TPUIR_ADD) && tpuir_op_is_elementwise(TPUIR_IS_NAN) &&
        tpuir_op_is_elementwise(TPUIR_SELECT) && tpuir_op_is_elementwise(TPUIR_ZETA));
  CHECK(!tpuir_op_is_elementwise(TPUIR_DOT_GENERAL) && !tpuir_op_is_elementwise(TPUIR_SLICE) &&
        !tpuir_op_is_elementwise(TPUIR_REAL) && !tpuir_op_is_elementwise(TPUIR_PARAM));
  CHECK(tpuir_op_info(TPUIR_CONCAT)->arity == -1);
  tpuir_graph *g = tpuir_graph_new();
  int64_t s[1] = {4};
  tpuir_val f = tpuir_param(g, TPU_F32, 1, s), i = tpuir_param(g, TPU_I64, 1, s);
  tpuir_val df = tpuir_binary(g, TPUIR_DIV, f, f), di = tpuir_binary(g, TPUIR_DIV, i, i);
  tpuir_val ad = tpuir_binary(g, TPUIR_ADD, i, i), gi = tpuir_gather(g, f, 0, i);
  CHECK(!tpuir_node_can_fail(g, df) && tpuir_node_can_fail(g, di));
  CHECK(!tpuir_node_can_fail(g, ad) && tpuir_node_can_fail(g, gi));
  CHECK(!tpuir_node_can_fail(g, 999));
  tpuir_graph_free(g);
}

/* tpuir_write / tpuir_read: the round trip keeps the graph (hash with
 * values), a truncated or foreign file reads as NULL with an error. */
TPU_TEST(ir_serialize_roundtrip) {
  tpuir_graph *g = tpuir_graph_new();
  int64_t s[2] = {2, 3}, st[2] = {0, 1}, lim[2] = {2, 3}, one[2] = {1, 1};
  tpuir_val x = tpuir_param(g, TPU_F32, 2, s), c = tpuir_const_f(g, TPU_F32, 2.5);
  tpuir_val y = tpuir_binary(g, TPUIR_MUL, x, tpuir_broadcast_in_dim(g, c, 2, s, NULL));
  tpuir_val z = tpuir_slice(g, y, st, lim, one);
  tpuir_val parts[2] = {z, z}, cc = tpuir_concat(g, 2, parts, 1);
  int64_t two = 2;
  tpuir_val key = tpuir_param(g, TPU_I64, 1, &two); /* an rng with a run-time key */
  tpuir_val outs[2] = {cc, tpuir_rng_dyn(g, TPUIR_RNG_NORMAL, TPU_F32, 2, s, key)};
  CHECK_OK(tpuir_set_outputs(g, 2, outs));
  FILE *f = tmpfile();
  CHECK(f != NULL);
  CHECK_OK(tpuir_write(g, f));
  long size = ftell(f);
  rewind(f);
  tpuir_graph *h = tpuir_read(f);
  CHECK(h != NULL);
  CHECK(TEST_IR_HASH(h) == TEST_IR_HASH(g) && tpuir_num_params(h) == 2);
  tpuir_graph_free(h);
  /* truncated */
  CHECK(ftruncate(fileno(f), size - 3) == 0);
  fflush(f); /* drop what stdio buffered of the whole file */
  rewind(f);
  CHECK(tpuir_read(f) == NULL && tpu_last_error_code() == TPU_E_INVALID);
  /* foreign bytes */
  rewind(f);
  fputs("not a graph at all, just text", f);
  rewind(f);
  CHECK(tpuir_read(f) == NULL);
  fclose(f);
  tpuir_graph_free(g);
}

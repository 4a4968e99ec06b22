/* test_sort.c - TPUIR_SORT (ir/sort.c, exec/vtpu/sort.c) against a qsort
 * reference on (value, position) pairs: stability, NaN order, -0.0,
 * descending, strided operands, empty slices, long rows, rank 0, errors. */
#include <stdlib.h>

#include "test_exec_util.h"
#include "tpu_test.h"

typedef struct sref {
  double v;
  int64_t i;
  int desc;
} sref;

/* NaN largest; ties (incl. -0 == +0, NaN == NaN) by position */
static int sref_cmp(const void *pa, const void *pb) {
  const sref *a = pa, *b = pb;
  int an = isnan(a->v), bn = isnan(b->v), c;
  if (an || bn) c = an - bn;
  else c = (a->v > b->v) - (a->v < b->v);
  if (a->desc) c = -c;
  if (c) return c;
  return (a->i > b->i) - (a->i < b->i);
}

/* Sort X (any view) along dim with the executor; compare both results with
 * the reference. Returns 1 if everything matched. */
static int check_sort(const tpu_view *X, int dim, int desc) {
  int nd = X->ndim, dt = X->dtype;
  tpuir_graph *g = tpuir_graph_new();
  tpuir_val p = tpuir_param(g, dt, nd, X->sizes);
  tpuir_val outs[2] = {tpuir_sort(g, p, dim, desc, TPUIR_SORT_VALUES),
                       tpuir_sort(g, p, dim, desc, TPUIR_SORT_INDICES)};
  if (outs[0] < 0 || outs[1] < 0 || tpuir_set_outputs(g, 2, outs) != TPU_OK) {
    tpuir_graph_free(g);
    return 0;
  }
  tarr V = ta_new(dt, nd, X->sizes), I = ta_new(TPU_I64, nd, X->sizes);
  tpu_view ov[2] = {V.v, I.v};
  int ok = tpux_run(g, 1, X, 2, ov) == TPU_OK;
  int64_t numel = tpu_view_numel(X);
  int64_t n = nd ? X->sizes[dim] : 1;
  int64_t inner = 1;
  for (int d = dim + 1; d < nd; d++) inner *= X->sizes[d];
  sref *r = malloc(sizeof(sref) * (size_t)(n ? n : 1));
  for (int64_t row = 0; ok && n && row < numel / n; row++) {
    int64_t base = (row / inner) * n * inner + row % inner;
    for (int64_t i = 0; i < n; i++) {
      r[i].v = tv_get(X, base + i * inner);
      r[i].i = i;
      r[i].desc = desc;
    }
    qsort(r, (size_t)n, sizeof *r, sref_cmp);
    for (int64_t i = 0; ok && i < n; i++) {
      double got = tv_get(&V.v, base + i * inner);
      int64_t gi = tv_geti(&I.v, base + i * inner);
      ok = gi == r[i].i &&
           (isnan(r[i].v) ? isnan(got) : (got == r[i].v && signbit(got) == signbit(r[i].v)));
      if (!ok)
        fprintf(stderr, "  sort mismatch dt=%d dim=%d desc=%d row=%lld pos=%lld: got (%g, %lld), "
                "want (%g, %lld)\n", dt, dim, desc, (long long)row, (long long)i, got,
                (long long)gi, r[i].v, (long long)r[i].i);
    }
  }
  free(r);
  free(V.mem);
  free(I.mem);
  tpuir_graph_free(g);
  return ok;
}

TPU_TEST(sort_dtypes_ties_nan_desc) {
  static const int dts[] = {TPU_F32, TPU_F64, TPU_F16, TPU_BF16, TPU_I64, TPU_I32,
                            TPU_I16, TPU_I8, TPU_U8, TPU_BOOL};
  uint64_t seed = 77;
  for (int k = 0; k < 10; k++) {
    int dt = dts[k];
    int64_t sz[2] = {5, 41}; /* > the insertion-sort cutoff */
    tarr X = ta_new(dt, 2, sz);
    double lo = dt == TPU_U8 || dt == TPU_BOOL ? 0 : -4, hi = dt == TPU_BOOL ? 2 : 5;
    ta_fill(&X.v, &seed, lo, hi); /* few distinct values: many ties */
    if (tpu_dtype_is_float(dt)) {
      tv_set(&X.v, 3, NAN);
      tv_set(&X.v, 17, NAN);
      tv_set(&X.v, 20, -0.0);
      tv_set(&X.v, 21, 0.0);
      tv_set(&X.v, 22, -0.0);
      tv_set(&X.v, 50, INFINITY);
      tv_set(&X.v, 51, -INFINITY);
      tv_set(&X.v, 60, 0.25);
    }
    for (int desc = 0; desc < 2; desc++)
      for (int dim = 0; dim < 2; dim++) CHECK(check_sort(&X.v, dim, desc));
    /* a short row too (insertion sort) */
    tpu_view S = X.v;
    S.sizes[1] = 7;
    for (int desc = 0; desc < 2; desc++) CHECK(check_sort(&S, 1, desc));
    free(X.mem);
  }
}

TPU_TEST(sort_strided_empty_rank0) {
  uint64_t seed = 5;
  int64_t sz[3] = {4, 6, 50};
  tarr X = ta_new(TPU_F32, 3, sz);
  ta_fill(&X.v, &seed, -100, 100);
  /* transposed view [50, 6, 4] */
  tpu_view T = X.v;
  for (int d = 0; d < 3; d++) {
    T.sizes[d] = X.v.sizes[2 - d];
    T.strides[d] = X.v.strides[2 - d];
  }
  for (int dim = 0; dim < 3; dim++)
    for (int desc = 0; desc < 2; desc++) CHECK(check_sort(&T, dim, desc));
  /* empty slices and no slices */
  tpu_view E = X.v;
  E.sizes[2] = 0;
  CHECK(check_sort(&E, 2, 0));
  CHECK(check_sort(&E, 0, 1));
  /* rank 0 */
  tpu_view Z = X.v;
  Z.ndim = 0;
  CHECK(check_sort(&Z, 0, 0));
  free(X.mem);
  /* bad dim / bad result kind */
  tpuir_graph *g = tpuir_graph_new();
  tpuir_val p = tpuir_param(g, TPU_F32, 3, sz);
  CHECK(tpuir_sort(g, p, 3, 0, TPUIR_SORT_VALUES) == TPU_E_INDEX);
  CHECK(tpuir_sort(g, p, -1, 0, TPUIR_SORT_VALUES) == TPU_E_INDEX);
  CHECK(tpuir_sort(g, p, 0, 0, 7) == TPU_E_INVALID);
  tpuir_val s = tpuir_sort(g, p, 1, 1, TPUIR_SORT_INDICES);
  CHECK(s >= 0);
  char buf[512];
  tpuir_dump(g, buf, sizeof buf);
  CHECK(strstr(buf, "sort(%0) {dim=1, descending=1, result=indices} : i64[4,6,50]") != NULL);
  /* the hash sees the direction */
  tpuir_graph *g2 = tpuir_graph_new();
  tpuir_val p2 = tpuir_param(g2, TPU_F32, 3, sz);
  CHECK(tpuir_sort(g2, p2, 1, 0, TPUIR_SORT_INDICES) >= 0);
  CHECK(TEST_IR_HASH(g) != TEST_IR_HASH(g2));
  tpuir_graph_free(g);
  tpuir_graph_free(g2);
}

TPU_TEST(sort_long_rows_vs_qsort) {
  uint64_t seed = 99;
  static const int dts[] = {TPU_F32, TPU_I64, TPU_F64, TPU_BF16};
  for (int k = 0; k < 4; k++) {
    int64_t sz[2] = {3, 70001};
    tarr X = ta_new(dts[k], 2, sz);
    ta_fill(&X.v, &seed, -1e4, 1e4);
    for (int i = 0; i < 200; i++)
      if (tpu_dtype_is_float(dts[k])) tv_set(&X.v, (int64_t)(trand_next(&seed) % 210003), NAN);
    CHECK(check_sort(&X.v, 1, k % 2));
    CHECK(check_sort(&X.v, 0, 0));
    free(X.mem);
  }
}

/* tpuir_sort_head: the prefix of the full stable sort (heap selection for
 * short heads, full sort otherwise), both directions, ties and NaN. */
TPU_TEST(sort_head_matches_prefix) {
  uint64_t seed = 123;
  static const int dts[] = {TPU_F32, TPU_I64, TPU_F16, TPU_U8};
  for (int t = 0; t < 4; t++) {
    int dt = dts[t];
    int64_t sz[2] = {3, 2000};
    tarr X = ta_new(dt, 2, sz);
    ta_fill(&X.v, &seed, dt == TPU_U8 ? 0 : -50, 50); /* many ties */
    if (tpu_dtype_is_float(dt)) {
      tv_set(&X.v, 7, NAN);
      tv_set(&X.v, 2500, NAN);
    }
    static const int64_t ks[] = {0, 1, 5, 100, 2000};
    for (int desc = 0; desc < 2; desc++)
      for (int ki = 0; ki < 5; ki++) {
        int64_t k = ks[ki];
        tpuir_graph *g = tpuir_graph_new();
        tpuir_val p = tpuir_param(g, dt, 2, sz);
        tpuir_val outs[3] = {tpuir_sort_head(g, p, 1, desc, TPUIR_SORT_VALUES, k),
                             tpuir_sort_head(g, p, 1, desc, TPUIR_SORT_INDICES, k),
                             tpuir_sort(g, p, 1, desc, TPUIR_SORT_INDICES)};
        CHECK_OK(tpuir_set_outputs(g, 3, outs));
        int64_t hs[2] = {3, k};
        tarr V = ta_new(dt, 2, hs), I = ta_new(TPU_I64, 2, hs), F = ta_new(TPU_I64, 2, sz);
        tpu_view ov[3] = {V.v, I.v, F.v};
        CHECK_OK(tpux_run(g, 1, &X.v, 3, ov));
        int ok = 1;
        for (int64_t r = 0; r < 3 && ok; r++)
          for (int64_t i = 0; i < k && ok; i++) {
            int64_t want = tv_geti(&F.v, r * 2000 + i), got = tv_geti(&I.v, r * k + i);
            double wv = tv_get(&X.v, r * 2000 + want), gv = tv_get(&V.v, r * k + i);
            ok = got == want && (isnan(wv) ? isnan(gv) : gv == wv);
          }
        CHECK(ok);
        free(V.mem);
        free(I.mem);
        free(F.mem);
        tpuir_graph_free(g);
      }
    free(X.mem);
  }
  tpuir_graph *g = tpuir_graph_new();
  int64_t sz[1] = {4};
  tpuir_val p = tpuir_param(g, TPU_F32, 1, sz);
  CHECK(tpuir_sort_head(g, p, 0, 0, TPUIR_SORT_VALUES, 5) == TPU_E_INVALID);
  tpuir_graph_free(g);
}

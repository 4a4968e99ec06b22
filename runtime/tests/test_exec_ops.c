/* test_exec_ops.c - vTPU executor: reductions, argmax/argmin, dot_general,
 * indexing ops and random numbers, against independent references. */
#include <stdio.h>

#include "tpu_test.h"
#include "test_exec_util.h"

/* internal Philox block function of the executor (exec/vtpu/rng.c) */
void tpux__philox(const uint32_t ctr[4], uint64_t seed, uint32_t out[4]);

/* ---- reduce ---------------------------------------------------------------- */

/* Naive reference over a view x (any strides): out[kept idx] = reduce. */
static void ref_reduce(int kind, const tpu_view *x, uint32_t red, double *out,
                       int64_t *iout, int64_t nout) {
  int fl = tpu_dtype_is_float(x->dtype);
  for (int64_t o = 0; o < nout; o++) {
    switch (kind) {
    case TPUIR_RED_SUM: case TPUIR_RED_OR: out[o] = 0; break;
    case TPUIR_RED_PROD: case TPUIR_RED_AND: out[o] = 1; break;
    case TPUIR_RED_MAX: out[o] = -INFINITY; break;
    default: out[o] = INFINITY; break;
    }
    if (iout) {
      int dt = x->dtype;
      switch (kind) {
      case TPUIR_RED_SUM: case TPUIR_RED_OR: iout[o] = 0; break;
      case TPUIR_RED_PROD: case TPUIR_RED_AND: iout[o] = 1; break;
      case TPUIR_RED_MAX:
        iout[o] = dt == TPU_U8 || dt == TPU_BOOL ? 0 : dt == TPU_I8 ? INT8_MIN
                : dt == TPU_I32 ? INT32_MIN : INT64_MIN;
        break;
      default:
        iout[o] = dt == TPU_BOOL ? 1 : dt == TPU_U8 ? 255 : dt == TPU_I8 ? INT8_MAX
                : dt == TPU_I32 ? INT32_MAX : INT64_MAX;
        break;
      }
    }
  }
  (void)fl;
  int64_t n = tpu_view_numel(x);
  for (int64_t i = 0; i < n; i++) {
    /* output index: kept dims row-major */
    int64_t rem = i, o = 0, mul = 1;
    for (int d = x->ndim - 1; d >= 0; d--) {
      int64_t id = rem % x->sizes[d];
      rem /= x->sizes[d];
      if (!(red & (1u << d))) {
        o += id * mul;
        mul *= x->sizes[d];
      }
    }
    double v = tv_get(x, i);
    if (iout) {
      int64_t a = iout[o], w = (int64_t)v;
      switch (kind) {
      case TPUIR_RED_SUM: a = (int64_t)((uint64_t)a + (uint64_t)w); break;
      case TPUIR_RED_PROD: a = (int64_t)((uint64_t)a * (uint64_t)w); break;
      case TPUIR_RED_MAX: a = w > a ? w : a; break;
      case TPUIR_RED_MIN: a = w < a ? w : a; break;
      case TPUIR_RED_AND: a = a && w; break;
      default: a = a || w; break;
      }
      iout[o] = a;
      continue;
    }
    switch (kind) {
    case TPUIR_RED_SUM: out[o] += v; break;
    case TPUIR_RED_PROD: out[o] *= v; break;
    case TPUIR_RED_MAX: out[o] = isnan(v) || isnan(out[o]) ? NAN : (v > out[o] ? v : out[o]); break;
    case TPUIR_RED_MIN: out[o] = isnan(v) || isnan(out[o]) ? NAN : (v < out[o] ? v : out[o]); break;
    case TPUIR_RED_AND: out[o] = out[o] && v; break;
    default: out[o] = out[o] || v; break;
    }
  }
}

TPU_TEST(exec_reduce_random) {
  static const int dts[] = {TPU_F32, TPU_F64, TPU_BF16, TPU_F16, TPU_I32, TPU_I64,
                            TPU_U8, TPU_I8, TPU_BOOL};
  uint64_t seed = 2024;
  for (int trial = 0; trial < 160; trial++) {
    int dt = dts[trial % 9];
    int kind = (int)(trand_next(&seed) % 4);
    if (dt == TPU_BOOL) kind = TPUIR_RED_AND + (int)(trand_next(&seed) % 2);
    int nd = 1 + (int)(trand_next(&seed) % 4);
    int64_t sz[4];
    for (int d = 0; d < nd; d++) sz[d] = 1 + (int64_t)(trand_next(&seed) % 9);
    if (trial % 17 == 3) sz[nd - 1] = 0;
    if (trial % 5 == 0) sz[0] = 300; /* long dims: outer / inner shapes */
    uint32_t red = 0;
    int64_t dims[4];
    int nr = 0;
    for (int d = 0; d < nd; d++)
      if (trand_next(&seed) % 2) {
        red |= 1u << d;
        dims[nr++] = d;
      }
    if (trial % 7 == 0) { /* full reduce */
      red = (1u << nd) - 1;
      nr = 0;
      for (int d = 0; d < nd; d++) dims[nr++] = d;
    }
    /* operand: reversed-order (transposed) view of a buffer */
    int64_t bsz[4];
    for (int d = 0; d < nd; d++) bsz[d] = sz[nd - 1 - d];
    tarr B = ta_new(dt, nd, bsz);
    tpu_view X = B.v;
    for (int d = 0; d < nd; d++) {
      X.sizes[d] = sz[d];
      X.strides[d] = B.v.strides[nd - 1 - d];
    }
    if (dt == TPU_BOOL) ta_fill(&X, &seed, 0, 1.3);
    else if (kind == TPUIR_RED_PROD) ta_fill(&X, &seed, tpu_dtype_is_float(dt) ? 0.5 : 1, tpu_dtype_is_float(dt) ? 1.5 : 3);
    else ta_fill(&X, &seed, dt == TPU_U8 ? 0 : -50, 50);
    if (tpu_dtype_is_float(dt) && (kind == TPUIR_RED_MAX || kind == TPUIR_RED_MIN) &&
        tpu_view_numel(&X) > 3 && trial % 3 == 0)
      tv_set(&X, 2, NAN);
    tpuir_graph *g = tpuir_graph_new();
    tpuir_val p = tpuir_param(g, dt, nd, sz);
    tpuir_val r = tpuir_reduce(g, kind, p, nr, dims);
    CHECK(r >= 0);
    CHECK_OK(tpuir_set_outputs(g, 1, &r));
    int ond;
    int64_t osz[4];
    CHECK_OK(tpuir_value_info(g, r, NULL, &ond, osz));
    tarr O = ta_new(dt, ond, osz);
    CHECK_OK(tpux_run(g, 1, &X, 1, &O.v));
    int64_t nout = tpu_view_numel(&O.v);
    double *want = malloc((size_t)(nout ? nout : 1) * sizeof(double));
    int64_t *iwant = malloc((size_t)(nout ? nout : 1) * sizeof(int64_t));
    int isint = !tpu_dtype_is_float(dt);
    ref_reduce(kind, &X, red, want, isint ? iwant : NULL, nout);
    for (int64_t o = 0; o < nout; o++) {
      if (isint) {
        /* integer reductions: int64 with wrap-around, then the dtype wrap */
        int64_t got = tv_geti(&O.v, o), w = iwant[o];
        if (dt != TPU_I64) w = (int64_t)round_to(dt, (double)(int32_t)w) ;
        if (dt == TPU_I32) w = (int32_t)iwant[o];
        if (dt == TPU_I8) w = (int8_t)iwant[o];
        if (dt == TPU_U8) w = (uint8_t)iwant[o];
        if (dt == TPU_BOOL) w = iwant[o] != 0;
        if (got != w) {
          fprintf(stderr, "  trial %d %s kind %d: out[%lld] = %lld want %lld\n",
                  trial, tpu_dtype_name(dt), kind, (long long)o, (long long)got,
                  (long long)w);
          CHECK(0);
        }
        continue;
      }
      double w = round_to(dt, want[o]);
      double got = tv_get(&O.v, o);
      double tol = dt == TPU_F32 ? 1e-6 : dt == TPU_F64 ? 1e-12 : dt == TPU_BF16 ? 8e-3 : dt == TPU_F16 ? 1e-3 : 0;
      if (!near_eq(got, w, tol)) {
        fprintf(stderr, "  trial %d %s kind %d: out[%lld] = %.17g want %.17g\n",
                trial, tpu_dtype_name(dt), kind, (long long)o, got, w);
        CHECK(0);
      }
    }
    free(want);
    free(iwant);
    free(B.mem);
    free(O.mem);
    tpuir_graph_free(g);
  }
}

/* Float reductions around the accumulator lanes' edges: rows of lengths
 * 1 .. 2100 (the inner shape's 32 lanes and their tail, runs of more than
 * one tile) and columns (the outer shape's strips of 32 and batches of 8
 * rows), contiguous, transposed (strided loads) and bf16 (converting
 * loads); MAX/MIN with a NaN at a random place of some outputs (the tail,
 * the last lane) and infinities elsewhere must give NaN there and the
 * exact max/min elsewhere; SUM within rounding of a double reference
 * (column sums of one chunk: its exact bits). */
TPU_TEST(exec_reduce_lane_edges) {
  static const int64_t lens[] = {1, 5, 31, 32, 33, 63, 65, 257, 1023, 1025, 2100};
  static const int64_t cols[] = {1, 7, 31, 33, 65, 100, 1100};
  static const int dts[] = {TPU_F32, TPU_F64, TPU_BF16};
  uint64_t seed = 77;
  int trial = 0;
  for (int di = 0; di < 3; di++)
    for (int kind = TPUIR_RED_SUM; kind <= TPUIR_RED_MIN; kind++) {
      if (kind == TPUIR_RED_PROD) continue;
      for (int li = 0; li < 11; li++)
        for (int shape = 0; shape < 3; shape++, trial++) {
          /* shape 0: [k, n] over dim 1; 1: [n, c] over dim 0; 2: shape 0
           * as a transposed view */
          int dt = dts[di];
          int64_t n = lens[li], c = shape == 1 ? cols[(li + di) % 7] : 3;
          int64_t sz[2] = {shape == 1 ? n : c, shape == 1 ? c : n};
          int64_t bsz[2] = {sz[1], sz[0]};
          tarr B = ta_new(dt, 2, shape == 2 ? bsz : sz);
          tpu_view X = B.v;
          if (shape == 2) {
            X.sizes[0] = sz[0];
            X.sizes[1] = sz[1];
            X.strides[0] = 1;
            X.strides[1] = sz[0];
          }
          ta_fill(&X, &seed, -50, 50);
          int64_t nout = c, len = n;
          if (kind != TPUIR_RED_SUM) {
            for (int64_t o = 0; o < nout; o++) {
              int64_t pick = (int64_t)(trand_next(&seed) % 4);
              int64_t at = pick == 0 ? len - 1 : pick == 1 ? (len / 32) * 32 + (len % 32) / 2
                         : (int64_t)(trand_next(&seed) % (uint64_t)len);
              if (at >= len) at = len - 1;
              int64_t lin = shape == 1 ? at * c + o : o * len + at;
              if (trand_next(&seed) % 3 == 0) tv_set(&X, lin, NAN);
              else tv_set(&X, lin, trand_next(&seed) % 2 ? INFINITY : -INFINITY);
            }
          }
          int64_t dim[1] = {shape == 1 ? 0 : 1}, osz[1] = {nout};
          tpuir_graph *g = tpuir_graph_new();
          tpuir_val r = tpuir_reduce(g, kind, tpuir_param(g, dt, 2, sz), 1, dim);
          CHECK_OK(tpuir_set_outputs(g, 1, &r));
          tarr O = ta_new(dt, 1, osz);
          CHECK_OK(tpux_run(g, 1, &X, 1, &O.v));
          double want[1100];
          ref_reduce(kind, &X, 1u << dim[0], want, NULL, nout);
          for (int64_t o = 0; o < nout; o++) {
            double w = round_to(dt, want[o]), got = tv_get(&O.v, o);
            /* sums over columns (several) of fewer than 128 rows are one
             * chunk: each column adds its rows in order in double, as the
             * reference does */
            int exact = kind != TPUIR_RED_SUM || (shape == 1 && c > 1 && n < 128);
            double tol = exact ? 0 : dt == TPU_F32 ? 1e-6 : dt == TPU_F64 ? 1e-12 : 8e-3;
            if (!(near_eq(got, w, tol) && (!exact || isnan(w) || got == w))) {
              fprintf(stderr, "  trial %d %s kind %d shape %d n %lld: out[%lld] = %.17g want %.17g\n",
                      trial, tpu_dtype_name(dt), kind, shape, (long long)n, (long long)o, got, w);
              CHECK(0);
              break;
            }
          }
          free(O.mem);
          free(B.mem);
          tpuir_graph_free(g);
        }
    }
}

TPU_TEST(exec_reduce_big_accuracy) {
  /* 3M float32 values of 0.1f: naive float summation is off by ~1e-2 rel */
  int64_t n = 3 << 20;
  int64_t sz[1] = {n};
  tarr X = ta_new(TPU_F32, 1, sz);
  float *xp = X.mem;
  for (int64_t i = 0; i < n; i++) xp[i] = 0.1f;
  tpuir_graph *g = tpuir_graph_new();
  int64_t d0[1] = {0};
  tpuir_val r = tpuir_reduce(g, TPUIR_RED_SUM, tpuir_param(g, TPU_F32, 1, sz), 1, d0);
  CHECK_OK(tpuir_set_outputs(g, 1, &r));
  float out = 0;
  tpu_view O;
  tpu_view_init_contiguous(&O, &out, TPU_F32, 0, NULL);
  CHECK_OK(tpux_run(g, 1, &X.v, 1, &O));
  double exact = (double)n * (double)0.1f;
  CHECK(fabs(out - exact) / exact < 1e-6);
  tpuir_graph_free(g);
  /* few outputs, long rows (chunked): [3, 1M] over dim 1, and columns */
  int64_t s2[2] = {3, n / 3};
  tpu_view X2 = X.v;
  X2.ndim = 2;
  X2.sizes[0] = 3; X2.sizes[1] = n / 3; X2.strides[0] = n / 3; X2.strides[1] = 1;
  for (int64_t i = 0; i < n; i++) xp[i] = (float)((i % 1000) * 0.001);
  g = tpuir_graph_new();
  tpuir_val p = tpuir_param(g, TPU_F32, 2, s2);
  int64_t d1[1] = {1};
  tpuir_val r1 = tpuir_reduce(g, TPUIR_RED_SUM, p, 1, d1);
  tpuir_val r0 = tpuir_reduce(g, TPUIR_RED_MAX, p, 1, d0);
  tpuir_val outs[2] = {r1, r0};
  CHECK_OK(tpuir_set_outputs(g, 2, outs));
  float o1[3];
  int64_t s3[1] = {3}, sc[1] = {n / 3};
  tarr O0 = ta_new(TPU_F32, 1, sc);
  tpu_view V1;
  tpu_view_init_contiguous(&V1, o1, TPU_F32, 1, s3);
  tpu_view ov[2] = {V1, O0.v};
  CHECK_OK(tpux_run(g, 1, &X2, 2, ov));
  for (int r = 0; r < 3; r++) {
    double s = 0;
    for (int64_t j = 0; j < n / 3; j++) s += xp[r * (n / 3) + j];
    CHECK(fabs(o1[r] - s) <= 1e-6 * s);
  }
  for (int64_t j = 0; j < n / 3; j += 97) {
    float m = xp[j];
    for (int r = 1; r < 3; r++) m = xp[r * (n / 3) + j] > m ? xp[r * (n / 3) + j] : m;
    CHECK(((float *)O0.mem)[j] == m);
  }
  free(O0.mem);
  free(X.mem);
  tpuir_graph_free(g);
}

/* ---- argreduce ------------------------------------------------------------ */

TPU_TEST(exec_argreduce) {
  int64_t sz[2] = {3, 6};
  double vals[18] = {1, 5, 5, 2, 0, 5,     /* ties: first max at 1, first min 4 */
                     NAN, 1, NAN, 9, -9, 0, /* first NaN wins (both) */
                     -1, -1, -1, -1, -1, -1};
  for (int dt = TPU_F16; dt <= TPU_F64; dt++) {
    tarr X = ta_new(dt, 2, sz);
    for (int i = 0; i < 18; i++) tv_set(&X.v, i, vals[i]);
    tpuir_graph *g = tpuir_graph_new();
    tpuir_val p = tpuir_param(g, dt, 2, sz);
    tpuir_val a = tpuir_argreduce(g, TPUIR_RED_MAX, p, 1);
    tpuir_val b = tpuir_argreduce(g, TPUIR_RED_MIN, p, 1);
    tpuir_val c = tpuir_argreduce(g, TPUIR_RED_MAX, p, 0);
    tpuir_val outs[3] = {a, b, c};
    CHECK_OK(tpuir_set_outputs(g, 3, outs));
    int64_t oa[3], ob[3], oc[6];
    int64_t s3[1] = {3}, s6[1] = {6};
    tpu_view A, B, C;
    tpu_view_init_contiguous(&A, oa, TPU_I64, 1, s3);
    tpu_view_init_contiguous(&B, ob, TPU_I64, 1, s3);
    tpu_view_init_contiguous(&C, oc, TPU_I64, 1, s6);
    tpu_view ov[3] = {A, B, C};
    CHECK_OK(tpux_run(g, 1, &X.v, 3, ov));
    CHECK(oa[0] == 1 && oa[1] == 0 && oa[2] == 0);
    CHECK(ob[0] == 4 && ob[1] == 0 && ob[2] == 0);
    int64_t wc[6] = {1, 0, 1, 1, 0, 0};
    for (int j = 0; j < 6; j++) CHECK(oc[j] == wc[j]);
    free(X.mem);
    tpuir_graph_free(g);
  }
  /* ints, rank 0 */
  int64_t s1[1] = {5};
  int32_t iv[5] = {3, -7, 8, 8, -7};
  tpu_view I;
  tpu_view_init_contiguous(&I, iv, TPU_I32, 1, s1);
  tpuir_graph *g = tpuir_graph_new();
  tpuir_val p = tpuir_param(g, TPU_I32, 1, s1);
  tpuir_val outs[3] = {tpuir_argreduce(g, TPUIR_RED_MAX, p, 0),
                       tpuir_argreduce(g, TPUIR_RED_MIN, p, 0), 0};
  int64_t ri[1] = {4};
  outs[2] = tpuir_argreduce(g, TPUIR_RED_MAX, tpuir_reshape(g, tpuir_slice(g, p, (int64_t[]){4}, (int64_t[]){5}, (int64_t[]){1}), 0, ri), 0);
  CHECK_OK(tpuir_set_outputs(g, 3, outs));
  int64_t r0 = -1, r1 = -1, r2 = -1;
  tpu_view R0, R1, R2;
  tpu_view_init_contiguous(&R0, &r0, TPU_I64, 0, NULL);
  tpu_view_init_contiguous(&R1, &r1, TPU_I64, 0, NULL);
  tpu_view_init_contiguous(&R2, &r2, TPU_I64, 0, NULL);
  tpu_view ov[3] = {R0, R1, R2};
  CHECK_OK(tpux_run(g, 1, &I, 3, ov));
  CHECK(r0 == 2 && r1 == 1 && r2 == 0);
  tpuir_graph_free(g);
}

/* ---- dot_general ----------------------------------------------------------- */

TPU_TEST(exec_dot_general_f32_batched) {
  /* lhs [b=2, m=33, k=47] stored as [k, b, m] (permuted), rhs [b=2, k=47, n=29] */
  int64_t B = 2, M = 33, K = 47, N = 29;
  int64_t lst[3] = {K, B, M}, rsz[3] = {B, K, N};
  tarr Ls = ta_new(TPU_F32, 3, lst), R = ta_new(TPU_F32, 3, rsz);
  uint64_t seed = 77;
  ta_fill(&Ls.v, &seed, -1, 1);
  ta_fill(&R.v, &seed, -1, 1);
  tpu_view L = Ls.v; /* L[b, m, k] = Ls[k, b, m] */
  L.sizes[0] = B; L.sizes[1] = M; L.sizes[2] = K;
  L.strides[0] = M; L.strides[1] = 1; L.strides[2] = B * M;
  int precs[3] = {TPU_PREC_FP32, TPU_PREC_HIGHEST, TPU_PREC_DEFAULT};
  double tols[3] = {1e-5, 1e-5, 3e-2};
  for (int pi = 0; pi < 3; pi++) {
    int64_t lsz[3] = {B, M, K};
    tpuir_graph *g = tpuir_graph_new();
    tpuir_val a = tpuir_param(g, TPU_F32, 3, lsz);
    tpuir_val b = tpuir_param(g, TPU_F32, 3, rsz);
    int64_t lb[1] = {0}, rb[1] = {0}, lc[1] = {2}, rc[1] = {1};
    tpuir_val d = tpuir_dot_general(g, a, b, 1, lb, rb, 1, lc, rc, precs[pi], TPU_F32);
    CHECK(d >= 0);
    CHECK_OK(tpuir_set_outputs(g, 1, &d));
    int64_t osz[3] = {B, M, N};
    tarr O = ta_new(TPU_F32, 3, osz);
    tpu_view ins[2] = {L, R.v};
    CHECK_OK(tpux_run(g, 2, ins, 1, &O.v));
    double maxerr = 0;
    for (int64_t bi = 0; bi < B; bi++)
      for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
          double s = 0;
          for (int64_t k = 0; k < K; k++)
            s += tv_get(&L, (bi * M + i) * K + k) * tv_get(&R.v, (bi * K + k) * N + j);
          double e = fabs(tv_get(&O.v, (bi * M + i) * N + j) - s);
          if (e > maxerr) maxerr = e;
        }
    if (maxerr > tols[pi]) fprintf(stderr, "  prec %d maxerr %g\n", precs[pi], maxerr);
    CHECK(maxerr <= tols[pi]);
    free(O.mem);
    tpuir_graph_free(g);
  }
  free(Ls.mem);
  free(R.mem);
}

TPU_TEST(exec_dot_general_shapes_dtypes) {
  /* lhs [2, 3, 4, 5]: batch dims {3, 0} (unmergeable order), contract {2, 1};
   * rhs [3, 5, 2, 4, 6]: batch {1, 2}, contract {3, 0}; free: none / {4} */
  int64_t ls[4] = {2, 3, 4, 5}, rs[5] = {3, 5, 2, 4, 6};
  int64_t lb[2] = {3, 0}, rb[2] = {1, 2}, lc[2] = {2, 1}, rc[2] = {3, 0};
  static const int dts[] = {TPU_F64, TPU_I32, TPU_BF16, TPU_F32, TPU_I8};
  for (int di = 0; di < 5; di++) {
    int dt = dts[di];
    int odt = dt == TPU_BF16 ? TPU_F32 : dt == TPU_I8 ? TPU_I64 : dt;
    tarr L = ta_new(dt, 4, ls), R = ta_new(dt, 5, rs);
    uint64_t seed = 1 + (uint64_t)di;
    ta_fill(&L.v, &seed, -4, 4);
    ta_fill(&R.v, &seed, -4, 4);
    tpuir_graph *g = tpuir_graph_new();
    tpuir_val a = tpuir_param(g, dt, 4, ls);
    tpuir_val b = tpuir_param(g, dt, 5, rs);
    tpuir_val d = tpuir_dot_general(g, a, b, 2, lb, rb, 2, lc, rc, TPU_PREC_FP32, odt);
    CHECK(d >= 0);
    CHECK_OK(tpuir_set_outputs(g, 1, &d));
    int64_t osz[3] = {5, 2, 6};
    int ond;
    int64_t chk[TPU_MAX_DIMS];
    CHECK_OK(tpuir_value_info(g, d, NULL, &ond, chk));
    CHECK(ond == 3 && chk[0] == 5 && chk[1] == 2 && chk[2] == 6);
    tarr O = ta_new(odt, 3, osz);
    tpu_view ins[2] = {L.v, R.v};
    CHECK_OK(tpux_run(g, 2, ins, 1, &O.v));
    for (int b0 = 0; b0 < 5; b0++)
      for (int b1 = 0; b1 < 2; b1++)
        for (int f = 0; f < 6; f++) {
          double s = 0;
          for (int c0 = 0; c0 < 4; c0++)
            for (int c1 = 0; c1 < 3; c1++) {
              /* lhs[b1, c1, c0, b0], rhs[c1, b0, b1, c0, f] */
              double x = tv_get(&L.v, ((b1 * 3 + c1) * 4 + c0) * 5 + b0);
              double y = tv_get(&R.v, (((c1 * 5 + b0) * 2 + b1) * 4 + c0) * 6 + f);
              s += x * y;
            }
          double got = tv_get(&O.v, (b0 * 2 + b1) * 6 + f);
          if (!near_eq(got, round_to(odt, s), dt == TPU_F32 || dt == TPU_BF16 ? 1e-6 : 0)) {
            fprintf(stderr, "  %s: [%d,%d,%d] = %g want %g\n", tpu_dtype_name(dt),
                    b0, b1, f, got, s);
            CHECK(0);
          }
        }
    free(L.mem); free(R.mem); free(O.mem);
    tpuir_graph_free(g);
  }
  /* k = 0 gives zeros; bf16 in, bf16 out */
  int64_t a0[2] = {3, 0}, b0s[2] = {0, 4}, os[2] = {3, 4};
  tpuir_graph *g = tpuir_graph_new();
  tpuir_val a = tpuir_param(g, TPU_BF16, 2, a0);
  tpuir_val b = tpuir_param(g, TPU_BF16, 2, b0s);
  int64_t c1[1] = {1}, c0[1] = {0};
  tpuir_val d = tpuir_dot_general(g, a, b, 0, NULL, NULL, 1, c1, c0, 0, TPU_BF16);
  CHECK_OK(tpuir_set_outputs(g, 1, &d));
  tarr O = ta_new(TPU_BF16, 2, os);
  memset(O.mem, 0xff, 24);
  tpu_view A, B;
  tpu_view_init_contiguous(&A, NULL, TPU_BF16, 2, a0);
  tpu_view_init_contiguous(&B, NULL, TPU_BF16, 2, b0s);
  tpu_view ins[2] = {A, B};
  CHECK_OK(tpux_run(g, 2, ins, 1, &O.v));
  for (int i = 0; i < 12; i++) CHECK(tv_get(&O.v, i) == 0);
  free(O.mem);
  tpuir_graph_free(g);
}

/* ---- indexing ---------------------------------------------------------------- */

TPU_TEST(exec_gather_scatter) {
  int64_t xs[2] = {4, 5}, is[2] = {3, 5};
  tarr X = ta_new(TPU_F32, 2, xs), I = ta_new(TPU_I64, 2, is), S = ta_new(TPU_F32, 2, is);
  uint64_t seed = 3;
  ta_fill(&X.v, &seed, -3, 3);
  ta_fill(&S.v, &seed, -3, 3);
  for (int i = 0; i < 15; i++) ((int64_t *)I.mem)[i] = (i * 7) % 4;
  for (int dim = 0; dim < 2; dim++) {
    /* gather along dim (idx values < 4 <= size) */
    tpuir_graph *g = tpuir_graph_new();
    tpuir_val x = tpuir_param(g, TPU_F32, 2, xs);
    tpuir_val ix = tpuir_param(g, TPU_I64, 2, is);
    tpuir_val s = tpuir_param(g, TPU_F32, 2, is);
    tpuir_val ga = tpuir_gather(g, x, dim, ix);
    tpuir_val sa = tpuir_scatter_add(g, x, dim, ix, s);
    tpuir_val outs[2] = {ga, sa};
    CHECK_OK(tpuir_set_outputs(g, 2, outs));
    tarr G = ta_new(TPU_F32, 2, is), SA = ta_new(TPU_F32, 2, xs);
    tpu_view ins[3] = {X.v, I.v, S.v}, ov[2] = {G.v, SA.v};
    CHECK_OK(tpux_run(g, 3, ins, 2, ov));
    double ref[20];
    for (int k = 0; k < 20; k++) ref[k] = tv_get(&X.v, k);
    for (int i = 0; i < 3; i++)
      for (int j = 0; j < 5; j++) {
        int64_t t = ((int64_t *)I.mem)[i * 5 + j];
        int64_t src = dim == 0 ? t * 5 + j : i * 5 + t;
        CHECK(tv_get(&G.v, i * 5 + j) == tv_get(&X.v, src));
        ref[src] = (float)(ref[src] + tv_get(&S.v, i * 5 + j));
      }
    for (int k = 0; k < 20; k++) CHECK(tv_get(&SA.v, k) == ref[k]);
    free(G.mem); free(SA.mem);
    tpuir_graph_free(g);
  }
  /* out-of-range / negative index: TPU_E_INDEX, outputs untouched */
  for (int bad = 0; bad < 2; bad++) {
    ((int64_t *)I.mem)[7] = bad ? -1 : 5;
    tpuir_graph *g = tpuir_graph_new();
    tpuir_val x = tpuir_param(g, TPU_F32, 2, xs);
    tpuir_val ix = tpuir_param(g, TPU_I64, 2, is);
    tpuir_val ga = tpuir_gather(g, x, 1, ix);
    tpuir_val e = tpuir_unary(g, TPUIR_EXP, x);
    tpuir_val outs[2] = {e, ga};
    CHECK_OK(tpuir_set_outputs(g, 2, outs));
    tarr G = ta_new(TPU_F32, 2, is), E = ta_new(TPU_F32, 2, xs);
    memset(G.mem, 0x55, 15 * 4);
    memset(E.mem, 0x55, 20 * 4);
    tpu_view ins[2] = {X.v, I.v}, ov[2] = {E.v, G.v};
    if (bad == 0) {
      /* in range for dim 1 (size 5) -> ok; make it out of range */
      ((int64_t *)I.mem)[7] = 5;
    }
    CHECK(tpux_run(g, 2, ins, 2, ov) == TPU_E_INDEX);
    CHECK(strstr(tpu_last_error(), bad ? "index -1 is out of bounds for dimension 1 with size 5"
                                       : "index 5 is out of bounds for dimension 1 with size 5"));
    for (int k = 0; k < 15; k++) CHECK(((uint32_t *)G.mem)[k] == 0x55555555u);
    for (int k = 0; k < 20; k++) CHECK(((uint32_t *)E.mem)[k] == 0x55555555u);
    free(G.mem); free(E.mem);
    tpuir_graph_free(g);
  }
  free(X.mem); free(I.mem); free(S.mem);
}

TPU_TEST(exec_index_select_add) {
  int64_t xs[3] = {5, 4, 3}, ns[1] = {6};
  static const int dts[] = {TPU_F32, TPU_BF16, TPU_I16, TPU_F64};
  int32_t idx[6] = {4, 0, 0, 2, 4, 1};
  for (int di = 0; di < 4; di++) {
    int dt = dts[di];
    tarr X = ta_new(dt, 3, xs);
    uint64_t seed = 9;
    ta_fill(&X.v, &seed, -8, 8);
    for (int dim = 0; dim < 3; dim++) {
      int64_t osz[3] = {5, 4, 3};
      osz[dim] = 6;
      int64_t isz[1] = {6};
      int32_t ix[6];
      for (int k = 0; k < 6; k++) ix[k] = idx[k] % (int32_t)xs[dim];
      tpu_view I;
      tpu_view_init_contiguous(&I, ix, TPU_I32, 1, isz);
      tarr S = ta_new(dt, 3, osz);
      ta_fill(&S.v, &seed, -8, 8);
      tpuir_graph *g = tpuir_graph_new();
      tpuir_val x = tpuir_param(g, dt, 3, xs);
      tpuir_val iv = tpuir_param(g, TPU_I32, 1, ns);
      tpuir_val s = tpuir_param(g, dt, 3, osz);
      tpuir_val sel = tpuir_index_select(g, x, dim, iv);
      tpuir_val add = tpuir_index_add(g, x, dim, iv, s);
      CHECK(sel >= 0 && add >= 0);
      tpuir_val outs[2] = {sel, add};
      CHECK_OK(tpuir_set_outputs(g, 2, outs));
      tarr O1 = ta_new(dt, 3, osz), O2 = ta_new(dt, 3, xs);
      tpu_view ins[3] = {X.v, I, S.v}, ov[2] = {O1.v, O2.v};
      CHECK_OK(tpux_run(g, 3, ins, 2, ov));
      double ref[60];
      for (int k = 0; k < 60; k++) ref[k] = tv_get(&X.v, k);
      for (int a = 0; a < osz[0]; a++)
        for (int b = 0; b < osz[1]; b++)
          for (int c = 0; c < osz[2]; c++) {
            int p[3] = {a, b, c};
            p[dim] = ix[p[dim]];
            int src = (p[0] * 4 + p[1]) * 3 + p[2];
            int o = (a * (int)osz[1] + b) * (int)osz[2] + c;
            CHECK(tv_get(&O1.v, o) == tv_get(&X.v, src));
          }
      /* index_add reference in index order */
      for (int k = 0; k < 6; k++)
        for (int a = 0; a < osz[0]; a++)
          for (int b = 0; b < osz[1]; b++)
            for (int c = 0; c < osz[2]; c++) {
              int p[3] = {a, b, c};
              if (p[dim] != k) continue;
              int so = (a * (int)osz[1] + b) * (int)osz[2] + c;
              p[dim] = ix[k];
              int dst = (p[0] * 4 + p[1]) * 3 + p[2];
              ref[dst] = round_to(dt, ref[dst] + tv_get(&S.v, so));
            }
      for (int k = 0; k < 60; k++) CHECK(tv_get(&O2.v, k) == ref[k]);
      free(S.mem); free(O1.mem); free(O2.mem);
      tpuir_graph_free(g);
    }
    free(X.mem);
  }
  /* index_select range error */
  int64_t s1[1] = {3}, s2[1] = {2};
  float xv[3] = {1, 2, 3}, ov[2] = {7, 7};
  int64_t iv[2] = {1, 3};
  tpu_view X, I, O;
  tpu_view_init_contiguous(&X, xv, TPU_F32, 1, s1);
  tpu_view_init_contiguous(&I, iv, TPU_I64, 1, s2);
  tpu_view_init_contiguous(&O, ov, TPU_F32, 1, s2);
  tpuir_graph *g = tpuir_graph_new();
  tpuir_val x = tpuir_param(g, TPU_F32, 1, s1);
  tpuir_val ix = tpuir_param(g, TPU_I64, 1, s2);
  tpuir_val r = tpuir_index_select(g, x, 0, ix);
  CHECK_OK(tpuir_set_outputs(g, 1, &r));
  tpu_view ins[2] = {X, I};
  CHECK(tpux_run(g, 2, ins, 1, &O) == TPU_E_INDEX);
  CHECK(ov[0] == 7 && ov[1] == 7);
  iv[1] = 2;
  CHECK_OK(tpux_run(g, 2, ins, 1, &O));
  CHECK(ov[0] == 2 && ov[1] == 3);
  tpuir_graph_free(g);
}

TPU_TEST(exec_embedding_large) {
  /* index_select dim 0 of [1000, 64] with 5000 indices; index_add back */
  int64_t ws[2] = {1000, 64}, is[1] = {5000}, os[2] = {5000, 64};
  tarr W = ta_new(TPU_F32, 2, ws), I = ta_new(TPU_I64, 1, is);
  uint64_t seed = 4;
  ta_fill(&W.v, &seed, -1, 1);
  for (int i = 0; i < 5000; i++) ((int64_t *)I.mem)[i] = (i * 37) % 1000;
  tpuir_graph *g = tpuir_graph_new();
  tpuir_val w = tpuir_param(g, TPU_F32, 2, ws);
  tpuir_val ix = tpuir_param(g, TPU_I64, 1, is);
  tpuir_val e = tpuir_index_select(g, w, 0, ix);
  tpuir_val z = tpuir_broadcast_in_dim(g, tpuir_const_f(g, TPU_F32, 0), 2, ws, NULL);
  tpuir_val back = tpuir_index_add(g, z, 0, ix, e);
  tpuir_val outs[2] = {e, back};
  CHECK_OK(tpuir_set_outputs(g, 2, outs));
  tarr E = ta_new(TPU_F32, 2, os), Bk = ta_new(TPU_F32, 2, ws);
  tpu_view ins[2] = {W.v, I.v}, ov[2] = {E.v, Bk.v};
  CHECK_OK(tpux_run(g, 2, ins, 2, ov));
  const float *wp = W.mem, *ep = E.mem, *bp = Bk.mem;
  for (int i = 0; i < 5000; i++)
    CHECK(memcmp(ep + i * 64, wp + ((i * 37) % 1000) * 64, 256) == 0);
  for (int r = 0; r < 1000; r++) /* each row appears 5 times */
    for (int c = 0; c < 64; c++) {
      float acc = 0;
      for (int k = 0; k < 5; k++) acc += wp[r * 64 + c];
      CHECK(bp[r * 64 + c] == acc);
    }
  free(W.mem); free(I.mem); free(E.mem); free(Bk.mem);
  tpuir_graph_free(g);
}

/* ---- rng ------------------------------------------------------------------------ */

TPU_TEST(exec_philox_known_answers) {
  struct { uint32_t ctr[4]; uint32_t key[2]; uint32_t out[4]; } kat[3] = {
    {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
    {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff},
     {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
    {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0},
     {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (int k = 0; k < 3; k++) {
    uint32_t o[4];
    tpux__philox(kat[k].ctr, (uint64_t)kat[k].key[1] << 32 | kat[k].key[0], o);
    for (int w = 0; w < 4; w++) CHECK(o[w] == kat[k].out[w]);
  }
  /* through the executor: BITS element i = words 0-1 of block
   * (offset << 64 | i), key = seed; counter 0 under key 0 is the first
   * known answer */
  tpuir_graph *g = tpuir_graph_new();
  int64_t s1[1] = {2};
  tpuir_val r = tpuir_rng(g, TPUIR_RNG_BITS, TPU_I64, 1, s1, 0, 0);
  tpuir_val r2 = tpuir_rng(g, TPUIR_RNG_BITS, TPU_I64, 1, s1, 0x299f31d0a4093822ull,
                           0x85a308d3243f6a88ull);
  tpuir_val outs[2] = {r, r2};
  CHECK_OK(tpuir_set_outputs(g, 2, outs));
  uint64_t o[2], o2[2];
  tpu_view O, O2;
  tpu_view_init_contiguous(&O, o, TPU_I64, 1, s1);
  tpu_view_init_contiguous(&O2, o2, TPU_I64, 1, s1);
  tpu_view ov[2] = {O, O2};
  CHECK_OK(tpux_run(g, 0, NULL, 2, ov));
  CHECK(o[0] == ((uint64_t)kat[0].out[1] << 32 | kat[0].out[0]));
  /* element 1 of the draw at offset 0x85a308d3243f6a88: counter words
   * {1, 0, offset lo, offset hi} */
  uint32_t w[4], ctr[4] = {1, 0, 0x243f6a88, 0x85a308d3};
  tpux__philox(ctr, 0x299f31d0a4093822ull, w);
  CHECK(o2[1] == ((uint64_t)w[1] << 32 | w[0]));
  /* the largest offset: the draw number fills the high half */
  tpuir_graph_free(g);
  g = tpuir_graph_new();
  r = tpuir_rng(g, TPUIR_RNG_BITS, TPU_I64, 1, s1, 5, UINT64_MAX);
  CHECK_OK(tpuir_set_outputs(g, 1, &r));
  CHECK_OK(tpux_run(g, 0, NULL, 1, &O));
  uint32_t c1[4] = {1, 0, UINT32_MAX, UINT32_MAX};
  tpux__philox(c1, 5, w);
  CHECK(o[1] == ((uint64_t)w[1] << 32 | w[0]));
  tpuir_graph_free(g);
}

/* Whole draws against the scalar definition, element by element: 2051
 * elements (two full tiles, whose counters run 8 to a vector step, and a
 * 3-element tail), BITS exactly, NORMAL f64 and f32 against Box-Muller with
 * libm's log and cos in double (within 1e-12 relative; f32 within one
 * float rounding of it). */
TPU_TEST(exec_rng_tiles_match_scalar_definition) {
  enum { N = 2051 };
  int64_t sz[1] = {N};
  const uint64_t seed = 0x0123456789abcdefull, off = 77;
  tpuir_graph *g = tpuir_graph_new();
  tpuir_val outs[3] = {tpuir_rng(g, TPUIR_RNG_BITS, TPU_I64, 1, sz, seed, off),
                       tpuir_rng(g, TPUIR_RNG_NORMAL, TPU_F64, 1, sz, seed, off),
                       tpuir_rng(g, TPUIR_RNG_NORMAL, TPU_F32, 1, sz, seed, off)};
  CHECK_OK(tpuir_set_outputs(g, 3, outs));
  static uint64_t bits[N];
  static double nd[N];
  static float nf[N];
  tpu_view ov[3];
  tpu_view_init_contiguous(&ov[0], bits, TPU_I64, 1, sz);
  tpu_view_init_contiguous(&ov[1], nd, TPU_F64, 1, sz);
  tpu_view_init_contiguous(&ov[2], nf, TPU_F32, 1, sz);
  CHECK_OK(tpux_run(g, 0, NULL, 3, ov));
  int bad = 0;
  for (int i = 0; i < N && !bad; i++) {
    uint32_t ctr[4] = {(uint32_t)i, 0, (uint32_t)off, 0}, w[4];
    tpux__philox(ctr, seed, w);
    uint64_t w01 = (uint64_t)w[1] << 32 | w[0], w23 = (uint64_t)w[3] << 32 | w[2];
    double z64 = sqrt(-2.0 * log((double)((w01 >> 11) + 1) * 0x1p-53)) *
                 cos(6.283185307179586 * ((double)(w23 >> 11) * 0x1p-53));
    double z32 = sqrt(-2.0 * log((double)((w[0] >> 8) + 1) * 0x1p-24)) *
                 cos(6.283185307179586 * ((double)(w[1] >> 8) * 0x1p-24));
    bad = bits[i] != w01 || fabs(nd[i] - z64) > 1e-12 * (1 + fabs(z64)) ||
          fabs(nf[i] - z32) > 0x1p-23 * fabs(z32) + 1e-12;
    if (bad) fprintf(stderr, "rng element %d: bits %llx/%llx normal %.17g/%.17g f32 %.9g/%.9g\n", i,
                     (unsigned long long)bits[i], (unsigned long long)w01, nd[i], z64, nf[i], z32);
  }
  CHECK(!bad);
  tpuir_graph_free(g);
}

TPU_TEST(exec_rng_properties) {
  int64_t n = 200000;
  int64_t sz[1] = {n};
  static const int dts[] = {TPU_F32, TPU_F64, TPU_BF16, TPU_F16};
  for (int di = 0; di < 4; di++) {
    int dt = dts[di];
    for (int kind = TPUIR_RNG_UNIFORM; kind <= TPUIR_RNG_NORMAL; kind++) {
      tpuir_graph *g = tpuir_graph_new();
      tpuir_val a = tpuir_rng(g, kind, dt, 1, sz, 42, 1000);
      tpuir_val b = tpuir_rng(g, kind, dt, 1, sz, 42, 1000);
      tpuir_val c = tpuir_rng(g, kind, dt, 1, sz, 42, 1001);
      tpuir_val d = tpuir_rng(g, kind, dt, 1, sz, 43, 1000);
      tpuir_val outs[4] = {a, b, c, d};
      CHECK_OK(tpuir_set_outputs(g, 4, outs));
      tarr A = ta_new(dt, 1, sz), B = ta_new(dt, 1, sz), C = ta_new(dt, 1, sz), D = ta_new(dt, 1, sz);
      tpu_view ov[4] = {A.v, B.v, C.v, D.v};
      CHECK_OK(tpux_run(g, 0, NULL, 4, ov));
      size_t bytes = (size_t)n * tpu_dtype_size(dt);
      CHECK(memcmp(A.mem, B.mem, bytes) == 0);
      /* another offset is another draw: an unrelated stream (no shifted copy) */
      CHECK(memcmp(A.mem, C.mem, bytes) != 0);
      CHECK(memcmp((char *)A.mem + tpu_dtype_size(dt), C.mem, bytes - tpu_dtype_size(dt)) != 0);
      CHECK(memcmp(A.mem, D.mem, bytes) != 0);
      double s = 0, s2 = 0, mn = 1e9, mx = -1e9;
      for (int64_t i = 0; i < n; i++) {
        double v = tv_get(&A.v, i);
        s += v;
        s2 += v * v;
        mn = v < mn ? v : mn;
        mx = v > mx ? v : mx;
      }
      double mean = s / n, var = s2 / n - mean * mean;
      if (kind == TPUIR_RNG_UNIFORM) {
        CHECK(mn >= 0 && mx < 1);
        CHECK(fabs(mean - 0.5) < 0.01 && fabs(var - 1.0 / 12) < 0.01);
      } else {
        CHECK(fabs(mean) < 0.01 && fabs(var - 1) < 0.02);
        CHECK(mn < -3.5 && mx > 3.5);
      }
      free(A.mem); free(B.mem); free(C.mem); free(D.mem);
      tpuir_graph_free(g);
    }
  }
  /* bits for ints: u8 covers all values roughly uniformly */
  tpuir_graph *g = tpuir_graph_new();
  tpuir_val r = tpuir_rng(g, TPUIR_RNG_BITS, TPU_U8, 1, sz, 7, 0);
  CHECK_OK(tpuir_set_outputs(g, 1, &r));
  tarr U = ta_new(TPU_U8, 1, sz);
  CHECK_OK(tpux_run(g, 0, NULL, 1, &U.v));
  int hist[256] = {0};
  for (int64_t i = 0; i < n; i++) hist[((uint8_t *)U.mem)[i]]++;
  for (int k = 0; k < 256; k++) CHECK(hist[k] > 600 && hist[k] < 1000);
  free(U.mem);
  tpuir_graph_free(g);
}

TPU_TEST(exec_dead_failable_nodes_still_check) {
  /* a gather whose result is unused still reports its bad index, and an
   * unused integer division still reports division by zero */
  int64_t s[1] = {4};
  float xv[4] = {1, 2, 3, 4}, ov[4] = {0, 0, 0, 0};
  int64_t iv[4] = {0, 1, 9, 2};
  int32_t a[4] = {1, 2, 3, 4}, z[4] = {1, 0, 1, 1};
  tpu_view X, I, O, A, Z;
  tpu_view_init_contiguous(&X, xv, TPU_F32, 1, s);
  tpu_view_init_contiguous(&I, iv, TPU_I64, 1, s);
  tpu_view_init_contiguous(&O, ov, TPU_F32, 1, s);
  tpu_view_init_contiguous(&A, a, TPU_I32, 1, s);
  tpu_view_init_contiguous(&Z, z, TPU_I32, 1, s);
  tpuir_graph *g = tpuir_graph_new();
  tpuir_val x = tpuir_param(g, TPU_F32, 1, s);
  tpuir_val ix = tpuir_param(g, TPU_I64, 1, s);
  tpuir_val pa = tpuir_param(g, TPU_I32, 1, s);
  tpuir_val pz = tpuir_param(g, TPU_I32, 1, s);
  CHECK(tpuir_gather(g, x, 0, ix) >= 0);
  CHECK(tpuir_binary(g, TPUIR_DIV, pa, pz) >= 0);
  tpuir_val r = tpuir_unary(g, TPUIR_NEG, x);
  CHECK_OK(tpuir_set_outputs(g, 1, &r));
  tpu_view ins[4] = {X, I, A, Z};
  CHECK(tpux_run(g, 4, ins, 1, &O) == TPU_E_INDEX);
  CHECK(ov[0] == 0 && ov[3] == 0);
  iv[2] = 3;
  CHECK(tpux_run(g, 4, ins, 1, &O) == TPU_E_INVALID);
  CHECK(strstr(tpu_last_error(), "ZeroDivisionError"));
  CHECK(ov[0] == 0);
  z[1] = 5;
  CHECK_OK(tpux_run(g, 4, ins, 1, &O));
  CHECK(ov[0] == -1 && ov[3] == -4);
  tpuir_graph_free(g);
}

TPU_TEST(exec_rng_int_bits_and_normal_f64) {
  int64_t s[1] = {100000};
  tpuir_graph *g = tpuir_graph_new();
  tpuir_val b32 = tpuir_rng(g, TPUIR_RNG_BITS, TPU_I32, 1, s, 99, 5);
  tpuir_val b64 = tpuir_rng(g, TPUIR_RNG_BITS, TPU_I64, 1, s, 99, 5);
  tpuir_val outs[2] = {b32, b64};
  CHECK_OK(tpuir_set_outputs(g, 2, outs));
  tarr O32 = ta_new(TPU_I32, 1, s), O64 = ta_new(TPU_I64, 1, s);
  tpu_view ov[2] = {O32.v, O64.v};
  CHECK_OK(tpux_run(g, 0, NULL, 2, ov));
  int neg = 0;
  for (int i = 0; i < 100000; i++) {
    /* int32 bits are the low 32 bits of the 64-bit draw */
    CHECK(((int32_t *)O32.mem)[i] == (int32_t)((int64_t *)O64.mem)[i]);
    neg += ((int32_t *)O32.mem)[i] < 0;
  }
  CHECK(neg > 49000 && neg < 51000);
  free(O32.mem);
  free(O64.mem);
  tpuir_graph_free(g);
}

/* reduce_bench.c - f32 REDUCE graphs through the public executor API
 * (tpuir_* graph, tpux_plan_run): best-of-N time and GB/s of the operand
 * read (input bytes / time), for the reduction shapes of a transformer
 * training step on the vTPU.
 *
 * usage: reduce_bench [-t THREADS] [-r REPS] [CASES]
 *   CASES: comma list of names below (default all); THREADS: pool size
 *   (default: the pool's, TORCH_TPU_NUM_THREADS or the CPUs).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tpu_exec.h"
#include "tpu_ir.h"
#include "tpu_rt.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

enum { C_SUM_LAST, C_MAX_LAST, C_SUM_COLS, C_SUM_ROWS512, C_SOFTMAX, C_LNORM, C_REGRED };

static const struct {
  const char *name, *what;
  int kind, nd;
  int64_t sz[3];
} cases[] = {
    {"sum_last", "sum over dim 2 of [64,256,256]", C_SUM_LAST, 3, {64, 256, 256}},
    {"max_last", "max over dim 2 of [64,256,256]", C_MAX_LAST, 3, {64, 256, 256}},
    {"sum_cols", "sum over dim 0 of [2048,2048]", C_SUM_COLS, 2, {2048, 2048}},
    {"sum_cols512", "sum over dim 0 of [2048,512] (a bias gradient)", C_SUM_COLS, 2, {2048, 512}},
    {"sum_rows512", "sum over dim 1 of [2048,512]", C_SUM_ROWS512, 2, {2048, 512}},
    {"softmax", "max(x*s), sum(exp(x*s - max)) over dim 2 of [64,256,256]",
     C_SOFTMAX, 3, {64, 256, 256}},
    {"lnorm", "sum(x), sum(x*x) over dim 1 of [2048,512]", C_LNORM, 2, {2048, 512}},
    {"regred", "max(x*s) over dim 2 of [64,256,256]", C_REGRED, 3, {64, 256, 256}},
};

/* Graph of case k (caller frees). */
static tpuir_graph *build(int k) {
  tpuir_graph *g = tpuir_graph_new();
  int nd = cases[k].nd;
  const int64_t *sz = cases[k].sz;
  int64_t last[1] = {nd - 1}, first[1] = {0};
  tpuir_val x = tpuir_param(g, TPU_F32, nd, sz);
  tpuir_val outs[2];
  int no = 1;
  switch (cases[k].kind) {
  case C_SUM_LAST: outs[0] = tpuir_reduce(g, TPUIR_RED_SUM, x, 1, last); break;
  case C_MAX_LAST: outs[0] = tpuir_reduce(g, TPUIR_RED_MAX, x, 1, last); break;
  case C_SUM_COLS: outs[0] = tpuir_reduce(g, TPUIR_RED_SUM, x, 1, first); break;
  case C_SUM_ROWS512: outs[0] = tpuir_reduce(g, TPUIR_RED_SUM, x, 1, last); break;
  case C_REGRED: {
    tpuir_val c = tpuir_broadcast_in_dim(g, tpuir_const_f(g, TPU_F32, 0.125), nd, sz, NULL);
    outs[0] = tpuir_reduce(g, TPUIR_RED_MAX, tpuir_binary(g, TPUIR_MUL, x, c), 1, last);
    break;
  }
  case C_SOFTMAX: {
    tpuir_val c = tpuir_broadcast_in_dim(g, tpuir_const_f(g, TPU_F32, 0.125), nd, sz, NULL);
    tpuir_val s = tpuir_binary(g, TPUIR_MUL, x, c);
    tpuir_val m = tpuir_reduce(g, TPUIR_RED_MAX, s, 1, last);
    int64_t bd[2] = {0, 1};
    tpuir_val e = tpuir_unary(g, TPUIR_EXP,
                              tpuir_binary(g, TPUIR_SUB, s, tpuir_broadcast_in_dim(g, m, nd, sz, bd)));
    outs[0] = m;
    outs[1] = tpuir_reduce(g, TPUIR_RED_SUM, e, 1, last);
    no = 2;
    break;
  }
  default: {
    outs[0] = tpuir_reduce(g, TPUIR_RED_SUM, x, 1, last);
    outs[1] = tpuir_reduce(g, TPUIR_RED_SUM, tpuir_binary(g, TPUIR_MUL, x, x), 1, last);
    no = 2;
    break;
  }
  }
  if (tpuir_set_outputs(g, no, outs) != TPU_OK) {
    fprintf(stderr, "%s: %s\n", cases[k].name, tpu_last_error());
    exit(1);
  }
  return g;
}

int main(int argc, char **argv) {
  int reps = 20;
  const char *want = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-t") && i + 1 < argc) tpurt_set_num_threads(atoi(argv[++i]));
    else if (!strcmp(argv[i], "-r") && i + 1 < argc) reps = atoi(argv[++i]);
    else want = argv[i];
  }
  printf("%-12s %9s %9s  (%d threads, best of %d)\n", "case", "ms", "GB/s",
         tpurt_num_threads(), reps);
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    if (want && !strstr(want, cases[k].name)) continue;
    tpuir_graph *g = build((int)k);
    tpux_plan *plan;
    if (tpux_plan_new(g, &plan) != TPU_OK) {
      fprintf(stderr, "%s: %s\n", cases[k].name, tpu_last_error());
      return 1;
    }
    int64_t n = 1;
    for (int d = 0; d < cases[k].nd; d++) n *= cases[k].sz[d];
    float *xm = malloc((size_t)n * sizeof(float));
    uint64_t s = 0x9e3779b97f4a7c15u;
    for (int64_t i = 0; i < n; i++) { /* uniform in [-4, 4) */
      s ^= s << 13;
      s ^= s >> 7;
      s ^= s << 17;
      xm[i] = (float)((double)(s >> 11) * 0x1p-50 - 4.0);
    }
    tpu_view in, outs[2];
    tpu_view_init_contiguous(&in, xm, TPU_F32, cases[k].nd, cases[k].sz);
    int no = tpuir_num_outputs(g);
    void *om[2];
    for (int i = 0; i < no; i++) {
      int dt, nd;
      int64_t sz[TPU_MAX_DIMS];
      tpuir_value_info(g, tpuir_output(g, i), &dt, &nd, sz);
      om[i] = malloc((size_t)n * sizeof(float)); /* >= the output */
      tpu_view_init_contiguous(&outs[i], om[i], dt, nd, sz);
    }
    double best = 1e9;
    for (int r = 0; r < reps + 2; r++) { /* two warm-up runs */
      double t0 = now();
      if (tpux_plan_run(plan, 1, &in, no, outs) != TPU_OK) {
        fprintf(stderr, "%s: %s\n", cases[k].name, tpu_last_error());
        return 1;
      }
      double t = now() - t0;
      if (r >= 2 && t < best) best = t;
    }
    double chk = 0;
    for (int i = 0; i < no; i++) chk += ((const float *)om[i])[0];
    printf("%-12s %9.3f %9.2f  %s [%g]\n", cases[k].name, best * 1e3,
           (double)n * sizeof(float) / best * 1e-9, cases[k].what, chk);
    for (int i = 0; i < no; i++) free(om[i]);
    free(xm);
    tpux_plan_free(plan);
    tpuir_graph_free(g);
  }
  return 0;
}

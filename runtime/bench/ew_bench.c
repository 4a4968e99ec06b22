/* ew_bench.c - fused elementwise regions through the public executor API:
 * an AdamW update (4 inputs, 3 outputs, 0-dim hyper-parameters broadcast,
 * as torch.optim.AdamW(foreach) records it) against the same update as one
 * hand-written C loop over the same memory; best-of-N ms and ns/element.
 *
 * usage: ew_bench [-t THREADS] [-r REPS] [-i] [N ...]   (-i: in place)   (N: elements, default
 * 65536 1048576 4194304)
 */
#include <math.h>
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

enum { NH = 6 }; /* 0-dim inputs: 1-lr*wd, 1-b1, b2, 1-b2, bc2_sqrt, step_size */
static const float hyp[NH] = {0.99999f, 0.1f, 0.999f, 0.001f, 0.0316f, 1e-3f};

/* p*(1-lr*wd) - step*m'/(sqrt(v')/bc2 + eps), m' = m + (1-b1)(g-m),
 * v' = b2*v + (1-b2)*g*g; outputs p', m', v' */
static tpuir_graph *build(int64_t n) {
  tpuir_graph *g = tpuir_graph_new();
  int64_t sz[1] = {n};
  tpuir_val p = tpuir_param(g, TPU_F32, 1, sz), m = tpuir_param(g, TPU_F32, 1, sz);
  tpuir_val v = tpuir_param(g, TPU_F32, 1, sz), gr = tpuir_param(g, TPU_F32, 1, sz);
  tpuir_val h[NH];
  for (int i = 0; i < NH; i++)
    h[i] = tpuir_broadcast_in_dim(g, tpuir_param(g, TPU_F32, 0, NULL), 1, sz, NULL);
  tpuir_val eps = tpuir_broadcast_in_dim(g, tpuir_const_f(g, TPU_F32, 1e-8), 1, sz, NULL);
  tpuir_val p1 = tpuir_binary(g, TPUIR_MUL, p, h[0]);
  tpuir_val m1 = tpuir_binary(g, TPUIR_ADD, m,
                              tpuir_binary(g, TPUIR_MUL, h[1], tpuir_binary(g, TPUIR_SUB, gr, m)));
  tpuir_val v1 = tpuir_binary(g, TPUIR_ADD, tpuir_binary(g, TPUIR_MUL, v, h[2]),
                              tpuir_binary(g, TPUIR_MUL, h[3], tpuir_binary(g, TPUIR_MUL, gr, gr)));
  tpuir_val den = tpuir_binary(g, TPUIR_ADD,
                               tpuir_binary(g, TPUIR_DIV, tpuir_unary(g, TPUIR_SQRT, v1), h[4]), eps);
  tpuir_val upd = tpuir_binary(g, TPUIR_DIV, tpuir_binary(g, TPUIR_MUL, h[5], m1), den);
  tpuir_val outs[3] = {tpuir_binary(g, TPUIR_SUB, p1, upd), m1, v1};
  if (tpuir_set_outputs(g, 3, outs) != TPU_OK) {
    fprintf(stderr, "build: %s\n", tpu_last_error());
    exit(1);
  }
  return g;
}

/* the same update as one loop, vectorised for this CPU (as the runtime's
 * kernels are; built with -fno-math-errno) */
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
static void ref(int64_t n, const float *p, const float *m, const float *v, const float *g,
                float *restrict po, float *restrict mo, float *restrict vo) {
#pragma GCC ivdep /* in place: each element is read before it is written */
  for (int64_t i = 0; i < n; i++) {
    float m1 = m[i] + hyp[1] * (g[i] - m[i]);
    float v1 = v[i] * hyp[2] + hyp[3] * (g[i] * g[i]);
    po[i] = p[i] * hyp[0] - hyp[5] * m1 / (__builtin_sqrtf(v1) / hyp[4] + 1e-8f);
    mo[i] = m1;
    vo[i] = v1;
  }
}

typedef struct { int64_t n; float *a[7]; } ref_job;
static void ref_fn(void *ctx, int64_t b, int64_t e) {
  ref_job *J = ctx;
  ref(e - b, J->a[0] + b, J->a[1] + b, J->a[2] + b, J->a[3] + b, J->a[4] + b, J->a[5] + b,
      J->a[6] + b);
}

int main(int argc, char **argv) {
  int reps = 30, inplace = 0;
  int64_t ns[16];
  int nn = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-t") && i + 1 < argc) tpurt_set_num_threads(atoi(argv[++i]));
    else if (!strcmp(argv[i], "-r") && i + 1 < argc) reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "-i")) inplace = 1;
    else if (nn < 16) ns[nn++] = atoll(argv[i]);
  }
  if (!nn) ns[nn++] = 65536, ns[nn++] = 1 << 20, ns[nn++] = 1 << 22;
  printf("adamw region vs one C loop (%d threads, best of %d, %s)\n", tpurt_num_threads(), reps,
         inplace ? "in place" : "new outputs");
  for (int k = 0; k < nn; k++) {
    int64_t n = ns[k];
    tpuir_graph *g = build(n);
    tpux_plan *plan;
    if (tpux_plan_new(g, &plan) != TPU_OK) {
      fprintf(stderr, "plan: %s\n", tpu_last_error());
      return 1;
    }
    float *buf[7];
    for (int i = 0; i < 7; i++) {
      buf[i] = aligned_alloc(64, (size_t)n * 4);
      for (int64_t j = 0; j < n; j++) buf[i][j] = 0.5f + 0.001f * (float)(j % 1000) + (float)i;
    }
    float hv[NH];
    memcpy(hv, hyp, sizeof hv);
    tpu_view in[4 + NH], out[3];
    for (int i = 0; i < 4; i++) tpu_view_init_contiguous(&in[i], buf[i], TPU_F32, 1, &n);
    for (int i = 0; i < NH; i++) tpu_view_init_contiguous(&in[4 + i], &hv[i], TPU_F32, 0, NULL);
    /* in place (as the optimizer updates its state): outputs over p, m, v */
    for (int i = 0; i < 3; i++)
      tpu_view_init_contiguous(&out[i], buf[inplace ? i : 4 + i], TPU_F32, 1, &n);
    double best = 1e9, bref = 1e9;
    ref_job J = {n, {buf[0], buf[1], buf[2], buf[3], buf[inplace ? 0 : 4], buf[inplace ? 1 : 5],
                     buf[inplace ? 2 : 6]}};
    for (int r = 0; r < reps + 2; r++) {
      double t0 = now();
      if (tpux_plan_run(plan, 4 + NH, in, 3, out) != TPU_OK) {
        fprintf(stderr, "run: %s\n", tpu_last_error());
        return 1;
      }
      double t = now() - t0;
      if (r >= 2 && t < best) best = t;
      t0 = now();
      tpurt_parallel_for(n, 32768, ref_fn, &J);
      t = now() - t0;
      if (r >= 2 && t < bref) bref = t;
    }
    printf("n %9lld  region %8.3f ms %6.2f ns/elem   C loop %8.3f ms %6.2f ns/elem   ratio %.2fx\n",
           (long long)n, best * 1e3, best * 1e9 / (double)n, bref * 1e3, bref * 1e9 / (double)n,
           best / bref);
    for (int i = 0; i < 7; i++) free(buf[i]);
    tpux_plan_free(plan);
    tpuir_graph_free(g);
  }
  return 0;
}

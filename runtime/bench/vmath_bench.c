/* vmath_bench.c - single-thread ns per element of the float32
 * transcendental kernels (exec/vtpu/vmath.c) at each vector width this CPU
 * runs, over one 1024-float tile (L1-resident, as the elementwise engine
 * calls them) of values in [-3, 3] (randn-like).
 *
 * usage: vmath_bench [OPS]   OPS: comma list of exp,log,sin,cos,tanh,erf,
 *                            logistic,expm1 (default all)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exec/vtpu/internal.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv) {
  static const struct { const char *name; int op; } ops[] = {
      {"exp", TPUIR_EXP},   {"log", TPUIR_LOG},         {"sin", TPUIR_SIN},
      {"cos", TPUIR_COS},   {"tanh", TPUIR_TANH},       {"erf", TPUIR_ERF},
      {"logistic", TPUIR_LOGISTIC}, {"expm1", TPUIR_EXPM1}};
  enum { N = 1024 };
  static float a[N], r[N];
  for (int i = 0; i < N; i++) a[i] = -3.0f + 6.0f * (float)((i * 7919) % N) / N;
  const char *want = argc > 1 ? argv[1] : NULL;
  printf("%-9s %8s %8s %8s  (ns/element, 1 thread)\n", "op", "16 lanes", "8 lanes", "4 lanes");
  for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
    if (want && !strstr(want, ops[k].name)) continue;
    printf("%-9s", ops[k].name);
    for (int w = 16; w >= 4; w /= 2) {
      if (!tpux__vmath_f32_width(w, ops[k].op, N, r, a, NULL)) {
        printf(" %8s", "-");
        continue;
      }
      double best = 1e9;
      for (int rep = 0; rep < 5; rep++) {
        int iters = 2000;
        double t0 = now();
        for (int it = 0; it < iters; it++) tpux__vmath_f32_width(w, ops[k].op, N, r, a, NULL);
        double t = (now() - t0) / iters / N * 1e9;
        if (t < best) best = t;
      }
      printf(" %8.3f", best);
    }
    printf("\n");
  }
  return 0;
}

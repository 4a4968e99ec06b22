/* mxu_bench.c - GFLOP/s of tpumxu_gemm per precision and shape, against
 * the machine's peak.
 *
 * Peak = threads x clock x FLOP/cycle/core, where the clock is measured with
 * a dependent integer-add chain (1 add per cycle) and FLOP/cycle/core is
 * measured with independent vdpbf16ps (bf16) and vfmadd231ps (fp32) zmm
 * streams (Zen 4: 1 of each per cycle = 64 and 32 FLOP/cycle).
 *
 * usage: mxu_bench [-q] [-n] [-T] [-A] [-b BATCH] [-p PRECS] [-s SHAPES] [-t THREADS]
 *   -T:     B stored transposed (n x k row-major, like x @ W^T)
 *   -A:     A stored transposed (k x m row-major, like dY^T @ X)
 *   -n:     no peak measurement (for profiling)
 *   -b N:   batch of N independent products (like bmm)
 *   PRECS:  comma list of default,high,highest,fp32,bf16,f16 (default all)
 *   SHAPES: comma list of MxKxN (default 256..4096 squares, 4096x1024x4096,
 *           4096x768x3072); -q = quick subset
 */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tpu_base.h"
#include "tpu_mxu.h"
#include "tpu_rt.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static double cpu_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}
static int dcmp(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return a < b ? -1 : a > b;
}
static double g_cpu_gflops; /* last bench_one: FLOPs per median CPU second x threads */

/* ---- peak measurement -------------------------------------------------- */

/* Best of 30 short runs: the machine may be shared, and the fastest run is
 * the one that was not interrupted. */
static double measure_ghz(void) {
  double best = 0;
  for (int r = 0; r < 30; r++) {
    long it = 2000000, x = 0, one = 1;
    double t = now();
    /* register operands: adds of an immediate are folded at rename on
     * Golden Cove cores (a chain of them reads 12 GHz there) */
    for (long i = 0; i < it; i++)
      __asm__ volatile("add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0" : "+r"(x) : "r"(one));
    double g = 4.0 * (double)it / (now() - t) / 1e9;
    if (g > best) best = g;
  }
  return best;
}

#define NACC 24
__attribute__((target("avx512f,avx512bf16"))) static double bf16_flop_per_s(void) {
  __m512 acc[NACC];
  for (int i = 0; i < NACC; i++) acc[i] = _mm512_setzero_ps();
  __m512bh a = (__m512bh)_mm512_set1_epi32(0x3f803f80), b = a;
  long it = 500000;
  double t = 1e30;
  for (int r = 0; r < 20; r++) {
    double t0 = now();
    for (long i = 0; i < it; i++) {
#pragma GCC unroll 24
      for (int j = 0; j < NACC; j++) acc[j] = _mm512_dpbf16_ps(acc[j], a, b);
      __asm__ volatile("" : "+v"(a));
    }
    t0 = now() - t0;
    if (t0 < t) t = t0;
  }
  __m512 s = acc[0];
  for (int i = 1; i < NACC; i++) s = _mm512_add_ps(s, acc[i]);
  volatile float sink = _mm512_reduce_add_ps(s);
  (void)sink;
  return (double)it * NACC * 64 / t;
}
__attribute__((target("avx512f"))) static double fma_flop_per_s(void) {
  __m512 acc[NACC];
  for (int i = 0; i < NACC; i++) acc[i] = _mm512_setzero_ps();
  __m512 a = _mm512_set1_ps(1.0001f), b = _mm512_set1_ps(0.9999f);
  long it = 500000;
  double t = 1e30;
  for (int r = 0; r < 20; r++) {
    double t0 = now();
    for (long i = 0; i < it; i++) {
#pragma GCC unroll 24
      for (int j = 0; j < NACC; j++) acc[j] = _mm512_fmadd_ps(a, b, acc[j]);
      __asm__ volatile("" : "+v"(a));
    }
    t0 = now() - t0;
    if (t0 < t) t = t0;
  }
  __m512 s = acc[0];
  for (int i = 1; i < NACC; i++) s = _mm512_add_ps(s, acc[i]);
  volatile float sink = _mm512_reduce_add_ps(s);
  (void)sink;
  return (double)it * NACC * 32 / t;
}

/* ---- GEMM timing ------------------------------------------------------- */

typedef struct prec_def {
  const char *name;
  int dtype, prec;
} prec_def;
static const prec_def k_precs[] = {
    {"default", TPU_F32, TPU_PREC_DEFAULT}, {"high", TPU_F32, TPU_PREC_HIGH},
    {"highest", TPU_F32, TPU_PREC_HIGHEST}, {"fp32", TPU_F32, TPU_PREC_FP32},
    {"bf16", TPU_BF16, TPU_PREC_DEFAULT},   {"f16", TPU_F16, TPU_PREC_DEFAULT}};

static int g_bt; /* B stored transposed (n x k), as in x @ W^T */
static int g_nopeak; /* -n: skip the clock/peak measurement (profiling) */
static int g_at; /* A stored transposed (k x m), as in dY^T @ X */
static int64_t g_batch = 1;

static double bench_one(const prec_def *pd, int64_t m, int64_t k, int64_t n,
                        double min_time) {
  size_t es = tpu_dtype_size(pd->dtype);
  int64_t nb = g_batch;
  char *a = aligned_alloc(64, (size_t)(nb * m * k) * es + 64);
  char *b = aligned_alloc(64, (size_t)(nb * k * n) * es + 64);
  char *c = aligned_alloc(64, (size_t)(nb * m * n) * es + 64);
  if (!a || !b || !c) {
    fprintf(stderr, "out of memory\n");
    exit(1);
  }
  for (int64_t i = 0; i < nb * m * k; i++) {
    float x = (float)((i * 7919) % 2001 - 1000) / 1000.f;
    if (es == 4) ((float *)a)[i] = x;
    else ((uint16_t *)a)[i] = pd->dtype == TPU_BF16 ? tpu_f32_to_bf16(x) : tpu_f32_to_f16(x);
  }
  for (int64_t i = 0; i < nb * k * n; i++) {
    float x = (float)((i * 104729) % 2001 - 1000) / 1000.f;
    if (es == 4) ((float *)b)[i] = x;
    else ((uint16_t *)b)[i] = pd->dtype == TPU_BF16 ? tpu_f32_to_bf16(x) : tpu_f32_to_f16(x);
  }
  double best = 1e30, total = 0, cpus[64];
  int reps = 0;
  while (reps < 2 || (total < min_time && reps < 50)) {
    double t = now(), tc = cpu_now();
    int rc = tpumxu_gemm(pd->dtype, pd->prec, nb, m, n, k, 1.0, a, m * k,
                         g_at ? 1 : k, g_at ? m : 1, b, k * n, g_bt ? 1 : n,
                         g_bt ? k : 1, 0.0, c, m * n, n, 1);
    t = now() - t;
    cpus[reps] = cpu_now() - tc;
    if (rc) {
      fprintf(stderr, "gemm failed: %s\n", tpu_last_error());
      exit(1);
    }
    if (t < best) best = t;
    total += t;
    reps++;
  }
  free(a);
  free(b);
  free(c);
  qsort(cpus, (size_t)reps, sizeof cpus[0], dcmp);
  g_cpu_gflops = 2.0 * (double)nb * (double)m * (double)n * (double)k /
                 (cpus[reps / 2] / tpurt_num_threads()) / 1e9;
  return 2.0 * (double)nb * (double)m * (double)n * (double)k / best / 1e9;
}

int main(int argc, char **argv) {
  const char *precs = "default,high,highest,fp32,bf16,f16";
  const char *shapes =
      "256x256x256,512x512x512,1024x1024x1024,2048x2048x2048,"
      "4096x4096x4096,4096x1024x4096,4096x768x3072";
  double min_time = 1.0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-q")) {
      shapes = "512x512x512,2048x2048x2048,4096x768x3072";
      min_time = 0.3;
    } else if (!strcmp(argv[i], "-T"))
      g_bt = 1;
    else if (!strcmp(argv[i], "-n"))
      g_nopeak = 1;
    else if (!strcmp(argv[i], "-A"))
      g_at = 1;
    else if (!strcmp(argv[i], "-b") && i + 1 < argc)
      g_batch = atoll(argv[++i]);
    else if (!strcmp(argv[i], "-p") && i + 1 < argc)
      precs = argv[++i];
    else if (!strcmp(argv[i], "-t") && i + 1 < argc)
      tpurt_set_num_threads(atoi(argv[++i]));
    else if (!strcmp(argv[i], "-s") && i + 1 < argc)
      shapes = argv[++i];
    else {
      fprintf(stderr, "usage: %s [-q] [-n] [-T] [-A] [-b batch] [-p precs] [-s MxKxN,...] [-t threads]\n", argv[0]);
      return 2;
    }
  }
  int threads = tpurt_num_threads();
  double ghz = g_nopeak ? 1.0 : measure_ghz();
  char info[256] = "?";
  tpumxu_engine_info(info, sizeof info);
  printf("threads %d, clock %.2f GHz (measured, dependent add chain), engine: %s\n",
         threads, ghz, info);
  double pk_bf16 = 0, pk_fma = 0;
  if (!g_nopeak && __builtin_cpu_supports("avx512f")) {
    double f = fma_flop_per_s();
    pk_fma = threads * ghz * 32;
    printf("fp32 FMA : %.1f FLOP/cycle/core measured; peak = %d x %.2f GHz x 32 = %.0f GFLOP/s\n",
           f / (ghz * 1e9), threads, ghz, pk_fma);
  }
  if (!g_nopeak && __builtin_cpu_supports("avx512bf16")) {
    double f = bf16_flop_per_s();
    pk_bf16 = threads * ghz * 64;
    printf("bf16 dot : %.1f FLOP/cycle/core measured; peak = %d x %.2f GHz x 64 = %.0f GFLOP/s\n",
           f / (ghz * 1e9), threads, ghz, pk_bf16);
  }
  printf("%-9s %-16s %10s %10s %10s %10s\n", "prec", "MxKxN", "GFLOP/s",
         "%bf16pk", "%fp32pk", "cpuGFLOP/s");
  char *pl = strdup(precs);
  for (char *ps = strtok(pl, ","); ps; ps = strtok(NULL, ",")) {
    const prec_def *pd = NULL;
    for (size_t i = 0; i < sizeof k_precs / sizeof k_precs[0]; i++)
      if (!strcmp(k_precs[i].name, ps)) pd = &k_precs[i];
    if (!pd) {
      fprintf(stderr, "unknown precision %s\n", ps);
      return 2;
    }
    const char *sp = shapes;
    while (*sp) {
      long long m, k, n;
      int used = 0;
      if (sscanf(sp, "%lldx%lldx%lld%n", &m, &k, &n, &used) != 3) {
        fprintf(stderr, "bad shape list %s\n", sp);
        return 2;
      }
      sp += used;
      if (*sp == ',') sp++;
      double g = bench_one(pd, m, k, n, min_time);
      char sh[64];
      snprintf(sh, sizeof sh, "%lldx%lldx%lld", m, k, n);
      printf("%-9s %-16s %10.1f %9.1f%% %9.1f%% %10.1f\n", pd->name, sh, g,
             pk_bf16 > 0 ? 100 * g / pk_bf16 : 0, pk_fma > 0 ? 100 * g / pk_fma : 0,
             g_cpu_gflops);
      fflush(stdout);
    }
  }
  free(pl);
  return 0;
}

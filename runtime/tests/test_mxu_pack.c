/* test_mxu_pack.c - the vTPU matrix unit's packing paths give the same bits
 * as the portable packer: panel by panel (every SIMD path against the
 * scalar one, with denormals, rounding edges, NaN and inf in the data) and
 * through whole GEMMs (operands whose layout picks a fast path against the
 * same operands in a padded layout that takes the portable one). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../src/mxu_internal.h"
#include "tpu_base.h"
#include "tpu_mxu.h"
#include "tpu_test.h"

static uint64_t g_rng = 0x243f6a8885a308d3ull;
static uint32_t rnd32(void) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return (uint32_t)(g_rng >> 16);
}

/* f32 bit patterns that stress the bf16 split: denormals (the largest
 * rounds up to the smallest normal), ties, overflow to inf, NaNs. */
static const uint32_t k_special[] = {
    0x00000001u, 0x007fffffu, 0x007f8000u, 0x007f7fffu, 0x80400000u,
    0x00008000u, 0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x7f7fffffu,
    0xff7f8000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u,
    0xffbfffffu, 0x80000000u, 0x00800000u, 0x0080ffffu, 0x3f807fffu};

/* Random f32 in [-2, 2) with ~1/8 specials (special != 0). */
static uint32_t rnd_f32_bits(int special) {
  uint32_t r = rnd32();
  if (special && (r & 7) == 0)
    return k_special[(r >> 3) % (sizeof k_special / sizeof k_special[0])];
  float x = (float)((int32_t)rnd32()) / 1073741824.f;
  uint32_t u;
  memcpy(&u, &x, 4);
  return u;
}

static void fill(char *buf, int dt, int64_t n, int special) {
  for (int64_t i = 0; i < n; i++) {
    uint32_t u = rnd_f32_bits(special);
    if (dt == TPU_F32) memcpy(buf + 4 * i, &u, 4);
    else {
      float x;
      memcpy(&x, &u, 4);
      uint16_t h = dt == TPU_BF16 ? (uint16_t)(u >> 16) : tpu_f32_to_f16(x);
      memcpy(buf + 2 * i, &h, 2);
    }
  }
}

/* ---- panel level ------------------------------------------------------ */

/* Pack with `isa` and with the scalar packer, compare bytes. rows_contig
 * selects rs == 1 (else ks == 1). Returns 0 if equal. */
static int pack_case(int isa, int dt, int fmt, int nplanes, int R,
                     int64_t nrows, int64_t npan, int64_t k0, int64_t kv,
                     int64_t kc, int rows_contig, int special) {
  int64_t rows_tot = nrows + 5, ksteps = k0 + (kv > 0 ? kv : 0) + 3;
  int64_t es = dt == TPU_F32 ? 4 : 2;
  int64_t span = rows_tot * ksteps + 64;
  char *src = malloc((size_t)(span * es));
  fill(src, dt, span, special);
  tpumxu_src s = {src, rows_contig ? 1 : ksteps, rows_contig ? rows_tot : 1, dt};
  int64_t kb = fmt == TPUMXU_FMT_F32 ? 4 : 2;
  int64_t panel = ((kc * R * kb + 63) / 64) * 64, plane = panel * npan;
  int np = nplanes ? nplanes : 1;
  size_t bytes = (size_t)(plane * np);
  char *d0 = aligned_alloc(64, bytes), *d1 = aligned_alloc(64, bytes);
  memset(d0, 0xab, bytes);
  memset(d1, 0xab, bytes);
  tpumxu_pack_panels(isa, &s, 2, nrows, R, npan, k0, kv, kc, fmt, nplanes, d0, panel, plane);
  tpumxu_pack_panels(TPUMXU_ISA_SCALAR, &s, 2, nrows, R, npan, k0, kv, kc, fmt, nplanes, d1,
                     panel, plane);
  int bad = memcmp(d0, d1, bytes) != 0;
  if (bad)
    fprintf(stderr,
            "  pack mismatch isa %d dt %d fmt %d np %d R %d nrows %lld npan %lld "
            "k0 %lld kv %lld kc %lld rows_contig %d\n",
            isa, dt, fmt, nplanes, R, (long long)nrows, (long long)npan,
            (long long)k0, (long long)kv, (long long)kc, rows_contig);
  free(src);
  free(d0);
  free(d1);
  return bad;
}

TPU_TEST(mxu_pack_panels_bits) {
  static const int64_t dims[][4] = {
      /* nrows, npan, kv, kc */
      {14, 1, 64, 64}, {13, 1, 63, 64}, {1, 1, 5, 6},     {2, 1, 31, 32},
      {29, 3, 33, 34}, {70, 5, 100, 100}, {9, 2, 0, 2},   {32, 1, 64, 64},
      {31, 1, 17, 18}, {95, 3, 47, 48},  {64, 2, 129, 130}, {33, 2, 7, 40}};
  for (int isa = TPUMXU_ISA_AVX2; isa <= TPUMXU_ISA_AVX512BF16; isa++) {
    if (tpumxu_set_isa(isa) != TPU_OK) continue;
    for (int dt = 0; dt < 3; dt++) {
      int dtype = dt == 0 ? TPU_F32 : dt == 1 ? TPU_BF16 : TPU_F16;
      for (int fmt = 0; fmt < 2; fmt++)
        for (int nplanes = 0; nplanes <= 3; nplanes++) {
          if (nplanes == 0 && fmt != TPUMXU_FMT_F32) continue;
          for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++)
            for (int rc = 0; rc < 2; rc++)
              for (int sp = 0; sp < 2; sp++) {
                int R = dims[d][0] > 14 && dims[d][1] == 1 ? 32 : 14;
                int64_t kc = dims[d][3];
                if (fmt == TPUMXU_FMT_BF16P && (kc & 1)) kc++;
                CHECK(pack_case(isa, dtype, fmt, nplanes, R, dims[d][0],
                                dims[d][1], 3, dims[d][2], kc, rc, sp) == 0);
              }
        }
    }
  }
  tpumxu_set_isa(TPUMXU_ISA_AUTO);
}

/* ---- GEMM level ------------------------------------------------------- */

/* Operand of R x C elements (dtype dt): layout 0 row-major, 1 column-major,
 * 2 padded both ways (portable packer), 3 negative row stride. */
typedef struct pmat {
  char *buf, *base;
  int64_t rs, cs;
} pmat;

static void pmat_make(pmat *t, int dt, int64_t R, int64_t C, int layout,
                      const char *vals /* R x C row-major, dt */) {
  int64_t es = dt == TPU_F32 ? 4 : 2, span, off = 0;
  switch (layout) {
  case 1: t->rs = 1, t->cs = R, span = R * C; break;
  case 2: t->rs = 2 * C + 3, t->cs = 2, span = R * t->rs; break;
  case 3: t->rs = -C, t->cs = 1, span = R * C, off = (R - 1) * C; break;
  default: t->rs = C, t->cs = 1, span = R * C; break;
  }
  t->buf = malloc((size_t)((span + 8) * es));
  memset(t->buf, 0xff, (size_t)((span + 8) * es));
  t->base = t->buf + off * es;
  for (int64_t i = 0; i < R; i++)
    for (int64_t j = 0; j < C; j++)
      memcpy(t->base + (i * t->rs + j * t->cs) * es, vals + (i * C + j) * es, (size_t)es);
}

/* C (batch x m x n, row-major) for A, B in layouts la, lb. */
static int run_layout(int dt, int prec, int64_t batch, int64_t m, int64_t k,
                      int64_t n, const char *av, const char *bv, int la,
                      int lb, char *c) {
  int64_t es = dt == TPU_F32 ? 4 : 2;
  int rc = TPU_OK;
  for (int64_t b = 0; b < batch && !rc; b++) {
    pmat A, B;
    pmat_make(&A, dt, m, k, la, av + b * m * k * es);
    pmat_make(&B, dt, k, n, lb, bv + b * k * n * es);
    rc = tpumxu_gemm(dt, prec, 1, m, n, k, 1.0, A.base, 0, A.rs, A.cs, B.base,
                     0, B.rs, B.cs, 0.0, c + b * m * n * es, 0, n, 1);
    free(A.buf);
    free(B.buf);
  }
  return rc;
}

/* Batched call with contiguous (la/lb 0 or 1) operands. */
static int run_batched(int dt, int prec, int64_t batch, int64_t m, int64_t k,
                       int64_t n, const char *av, const char *bv, int la,
                       int lb, char *c) {
  int64_t es = dt == TPU_F32 ? 4 : 2;
  char *a = malloc((size_t)(batch * m * k * es)), *b = malloc((size_t)(batch * k * n * es));
  for (int64_t t = 0; t < batch; t++)
    for (int64_t i = 0; i < m; i++)
      for (int64_t l = 0; l < k; l++) {
        int64_t d = la ? l * m + i : i * k + l;
        memcpy(a + (t * m * k + d) * es, av + (t * m * k + i * k + l) * es, (size_t)es);
      }
  for (int64_t t = 0; t < batch; t++)
    for (int64_t l = 0; l < k; l++)
      for (int64_t j = 0; j < n; j++) {
        int64_t d = lb ? j * k + l : l * n + j;
        memcpy(b + (t * k * n + d) * es, bv + (t * k * n + l * n + j) * es, (size_t)es);
      }
  int rc = tpumxu_gemm(dt, prec, batch, m, n, k, 1.0, a, m * k, la ? 1 : k,
                       la ? m : 1, b, k * n, lb ? 1 : n, lb ? k : 1, 0.0, c,
                       m * n, n, 1);
  free(a);
  free(b);
  return rc;
}

static int gemm_case(int dt, int prec, int64_t batch, int64_t m, int64_t k,
                     int64_t n, int special) {
  int64_t es = dt == TPU_F32 ? 4 : 2;
  char *av = malloc((size_t)(batch * m * k * es)), *bv = malloc((size_t)(batch * k * n * es));
  fill(av, dt, batch * m * k, special);
  fill(bv, dt, batch * k * n, special);
  size_t cb = (size_t)(batch * m * n * es);
  char *ref = malloc(cb), *got = malloc(cb);
  int bad = run_layout(dt, prec, batch, m, k, n, av, bv, 2, 2, ref) != TPU_OK;
  static const int lay[][2] = {{0, 0}, {0, 1}, {1, 0}, {1, 1}, {3, 1}, {1, 3}};
  for (size_t q = 0; q < sizeof lay / sizeof lay[0] && !bad; q++) {
    memset(got, 0x5a, cb);
    bad |= run_layout(dt, prec, batch, m, k, n, av, bv, lay[q][0], lay[q][1], got) != TPU_OK;
    if (!bad && memcmp(got, ref, cb)) {
      fprintf(stderr, "  gemm bits differ: dt %d prec %d %lldx%lldx%lld la %d lb %d\n", dt,
              prec, (long long)m, (long long)k, (long long)n, lay[q][0], lay[q][1]);
      bad = 1;
    }
  }
  for (int q = 0; q < 4 && !bad && batch > 1; q++) {
    memset(got, 0x5a, cb);
    bad |= run_batched(dt, prec, batch, m, k, n, av, bv, q & 1, q >> 1, got) != TPU_OK;
    if (!bad && memcmp(got, ref, cb)) {
      fprintf(stderr, "  batched gemm bits differ: dt %d prec %d %lldx%lldx%lld q %d\n",
              dt, prec, (long long)m, (long long)k, (long long)n, q);
      bad = 1;
    }
  }
  free(av);
  free(bv);
  free(ref);
  free(got);
  return bad;
}

/* Fast-path layouts (row-major, transposed, negative strides, batched) give
 * the same bits as the portable packer on tails (m, n, k not multiples of
 * the panel sizes, k odd), for every dtype and precision. */
TPU_TEST(mxu_pack_gemm_bits) {
  static const int64_t sh[][4] = {/* batch, m, k, n */
                                  {1, 1, 1, 1},   {1, 15, 33, 31}, {1, 29, 65, 70},
                                  {1, 3, 7, 100}, {1, 100, 2, 3},  {3, 37, 64, 45},
                                  {5, 30, 17, 33}, {1, 130, 97, 66}};
  for (int dt = 0; dt < 3; dt++) {
    int dtype = dt == 0 ? TPU_F32 : dt == 1 ? TPU_BF16 : TPU_F16;
    for (int prec = TPU_PREC_DEFAULT; prec <= TPU_PREC_FP32; prec++) {
      if (dtype != TPU_F32 && prec != TPU_PREC_DEFAULT) continue;
      for (size_t s = 0; s < sizeof sh / sizeof sh[0]; s++)
        for (int sp = 0; sp < 2; sp++)
          CHECK(gemm_case(dtype, prec, sh[s][0], sh[s][1], sh[s][2], sh[s][3], sp) == 0);
    }
  }
  /* several k blocks (HIGHEST: 2730 k-steps per block) */
  CHECK(gemm_case(TPU_F32, TPU_PREC_HIGHEST, 1, 17, 2801, 35, 0) == 0);
  CHECK(gemm_case(TPU_F32, TPU_PREC_DEFAULT, 1, 20, 8195, 9, 1) == 0);
}

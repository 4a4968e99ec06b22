/* exec/vtpu/rng.c - counter-based random numbers (Philox4x32-10).
 *
 * Element i (row-major) of a draw uses the block at the 128-bit counter
 * (offset << 64) | i (word 0 least significant) under key = seed (low word
 * first): each draw has its own 2^64-block stream, and the generator's
 * offset counts draws (as TorchTPU's does), not elements:
 *   UNIFORM  f32: (w0 >> 8) * 2^-24; bf16: (w0 >> 24) * 2^-8;
 *            f16: (w0 >> 21) * 2^-11 (exact in the dtype, so always < 1);
 *            f64: ((w0 | w1 << 32) >> 11) * 2^-53
 *   NORMAL   Box-Muller: u1 in (0, 1], u2 in [0, 1) from words 0 and 1 (f32
 *            and narrower, 24 bits each) or from words 0-1 and 2-3 (f64, 53
 *            bits each); z = sqrt(-2 ln u1) cos(2 pi u2), computed in double
 *   BITS     (uint64)(w0 | w1 << 32), wrapped to the integer dtype.
 * Each element depends only on (seed, offset, i): threading never changes
 * the result.
 */
#include <math.h>

#include "exec/vtpu/internal.h"

void tpux__philox(const uint32_t ctr[4], uint64_t seed, uint32_t out[4]) {
  uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
  uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
  for (int r = 0; r < 10; r++) {
    if (r) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    uint64_t p0 = (uint64_t)0xD2511F53u * c0;
    uint64_t p1 = (uint64_t)0xCD9E8D57u * c2;
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
    uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
    c1 = (uint32_t)p1;
    c3 = (uint32_t)p0;
    c0 = n0;
    c2 = n2;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

typedef struct rng_job {
  char *out;
  int dt, kind;
  uint64_t seed, offset;
  int64_t total;
} rng_job;

static void rng_range(void *ctx, int64_t b, int64_t e) {
  rng_job *j = ctx;
  union {
    float f[XK_TILE];
    double d[XK_TILE];
    int64_t i[XK_TILE];
  } buf;
  size_t es = tpu_dtype_size(j->dt);
  const double two_pi = 6.283185307179586476925286766559;
  for (int64_t tile = b; tile < e; tile++) {
    int64_t L = tile * XK_TILE, n = j->total - L;
    if (n > XK_TILE) n = XK_TILE;
    for (int64_t k = 0; k < n; k++) {
      uint64_t lo = (uint64_t)(L + k), hi = j->offset;
      uint32_t ctr[4] = {(uint32_t)lo, (uint32_t)(lo >> 32), (uint32_t)hi, (uint32_t)(hi >> 32)};
      uint32_t w[4];
      tpux__philox(ctr, j->seed, w);
      uint64_t w01 = (uint64_t)w[0] | ((uint64_t)w[1] << 32);
      if (j->kind == TPUIR_RNG_BITS) {
        buf.i[k] = (int64_t)w01;
      } else if (j->kind == TPUIR_RNG_UNIFORM) {
        switch (j->dt) {
        case TPU_F64: buf.d[k] = (double)(w01 >> 11) * 0x1p-53; break;
        case TPU_BF16: buf.f[k] = (float)(w[0] >> 24) * 0x1p-8f; break;
        case TPU_F16: buf.f[k] = (float)(w[0] >> 21) * 0x1p-11f; break;
        default: buf.f[k] = (float)(w[0] >> 8) * 0x1p-24f; break;
        }
      } else if (j->dt == TPU_F64) {
        uint64_t w23 = (uint64_t)w[2] | ((uint64_t)w[3] << 32);
        double u1 = (double)((w01 >> 11) + 1) * 0x1p-53;
        double u2 = (double)(w23 >> 11) * 0x1p-53;
        buf.d[k] = sqrt(-2.0 * log(u1)) * cos(two_pi * u2);
      } else {
        double u1 = (double)((w[0] >> 8) + 1) * 0x1p-24;
        double u2 = (double)(w[1] >> 8) * 0x1p-24;
        buf.f[k] = (float)(sqrt(-2.0 * log(u1)) * cos(two_pi * u2));
      }
    }
    tpux__store(j->dt, j->out + L * (int64_t)es, 1, n, &buf);
  }
}

int tpux__eval_rng(xctx *c, int t) {
  int rc = tpux__alloc_value(c, t);
  if (rc) return rc;
  const tpuir_node *n = tpuir_get_node(c->g, t);
  rng_job j = {c->vals[t].mem, n->dtype, n->kind, n->seed, n->offset, 1};
  if (n->nin == 1) { /* run-time key: int64[2] (seed, offset) */
    const tpu_view *k = &c->vals[n->in[0]].v;
    const int64_t *kp = (const int64_t *)k->base + k->offset;
    j.seed = (uint64_t)kp[0];
    j.offset = (uint64_t)kp[k->strides[0]];
  }
  for (int i = 0; i < n->ndim; i++) j.total *= n->sizes[i];
  if (j.total == 0) return TPU_OK;
  int64_t tiles = (j.total + XK_TILE - 1) / XK_TILE;
  tpurt_parallel_for(tiles, 4, rng_range, &j);
  return TPU_OK;
}

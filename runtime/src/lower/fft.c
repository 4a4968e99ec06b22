/* lower/fft.c - ATen FFT primitives (_fft_r2c, _fft_c2r, _fft_c2c and their
 * out= forms) lowered to tpuir_fft.
 *
 * The transformed dims may be any set of dims in any order: each tpuir_fft
 * node works on up to 3 trailing dims, so the lowering transposes the dims
 * it transforms to the end, runs the node and transposes back (more than 3
 * dims are done in groups: the transform is separable). Normalization
 * follows ATen's fft_norm_mode (0: none, 1: 1/sqrt(n), 2: 1/n, n = the
 * product of the signal sizes); the IR's inverse transforms are already
 * scaled by 1/n, so inverse ones are multiplied back as needed.
 */
#include <math.h>
#include <string.h>

#include "lower/internal.h"

enum { F_R2C = 1, F_C2R, F_C2C };

/* fft of `type` along dims[0..k) (k <= 3) of v, with lengths len[]. */
static tpuir_val fft_along(tpulw__b *b, tpuir_val v, int type, int k, const int *dims,
                           const int64_t *len) {
  tpulw__shape s = tpulw__info(b, v);
  if (v < 0) return v;
  int64_t perm[TPU_MAX_DIMS], inv[TPU_MAX_DIMS];
  int np = 0;
  for (int d = 0; d < s.ndim; d++) {
    int in = 0;
    for (int j = 0; j < k; j++) in |= dims[j] == d;
    if (!in) perm[np++] = d;
  }
  for (int j = 0; j < k; j++) perm[np++] = dims[j];
  int ident = 1;
  for (int d = 0; d < s.ndim; d++) ident &= perm[d] == d;
  tpuir_val t = ident ? v : tpuir_transpose(b->g, v, perm);
  tpuir_val r = tpuir_fft(b->g, t, type, k, len);
  if (ident || r < 0) return r;
  for (int d = 0; d < s.ndim; d++) inv[perm[d]] = d;
  return tpuir_transpose(b->g, r, inv);
}

/* complex-to-complex transform over dims[0..k) in groups of <= 3 */
static tpuir_val c2c_groups(tpulw__b *b, tpuir_val v, int inverse, int k, const int *dims) {
  for (int j = 0; j < k && v >= 0; j += 3) {
    int g = k - j < 3 ? k - j : 3;
    tpulw__shape s = tpulw__info(b, v);
    int64_t len[3];
    for (int q = 0; q < g; q++) len[q] = s.sizes[dims[j + q]];
    v = fft_along(b, v, inverse ? TPUIR_FFT_INV : TPUIR_FFT_FWD, g, dims + j, len);
  }
  return v;
}

static int fft_fn(tpulw__b *b) {
  const tpulw_tensor *self = tpulw__tensor_arg(b, "self");
  if (!self || self->device < 0) return tpu_error(TPU_E_UNSUPPORTED, "%s: no self", b->base);
  int dt = self->view.dtype, nd = self->view.ndim;
  int op = b->op;
  if (op == F_R2C ? (dt != TPU_F32 && dt != TPU_F64) : !tpu_dtype_is_complex(dt)) {
    if (dt == TPU_F16 || dt == TPU_BF16 || tpu_dtype_is_complex(dt) || tpu_dtype_is_float(dt))
      return tpu_error(TPU_E_INVALID, "Unsupported dtype %s", tpulw__torch_name(dt));
    return tpu_error(TPU_E_UNSUPPORTED, "%s: dtype %s", b->base, tpulw__torch_name(dt));
  }
  int nlist;
  int64_t scratch;
  const int64_t *dl = tpulw__ints(b, "dim", &nlist, &scratch);
  if (nlist < 0) nlist = 0;
  if (nlist > TPU_MAX_DIMS)
    return tpu_error(TPU_E_INVALID, "%s: too many dims", b->base);
  int dims[TPU_MAX_DIMS];
  uint32_t seen = 0;
  for (int j = 0; j < nlist; j++) {
    int rc = tpulw__wrap_dim(dl[j], nd, &dims[j]);
    if (rc < 0) return rc;
    if (seen & (1u << dims[j]))
      return tpu_error(TPU_E_INVALID, "dims must be unique");
    seen |= 1u << dims[j];
  }
  int norm = (int)tpulw__int(b, "normalization", 0);
  b->out_rule = LW_OUT_SAME;
  tpuir_val x = tpulw__tensor(b, self);
  tpulw__shape s = tpulw__info(b, x);
  if (nlist == 0) {
    if (op == F_C2R) return tpu_error(TPU_E_UNSUPPORTED, "_fft_c2r without dims");
    return tpulw__result(b, op == F_R2C ? tpulw__convert(b, x, tpu_dtype_to_complex(dt)) : x);
  }
  /* signal sizes and their product */
  int64_t last_n = op == F_C2R ? tpulw__int(b, "last_dim_size", 0) : s.sizes[dims[nlist - 1]];
  double N = 1;
  for (int j = 0; j < nlist; j++) {
    int64_t n = j == nlist - 1 ? last_n : s.sizes[dims[j]];
    if (n < 1)
      return tpu_error(TPU_E_INVALID, "Invalid number of data points (%lld) specified",
                       (long long)n);
    N *= (double)n;
  }
  int inverse = (op == F_C2R) || (op == F_C2C && !tpulw__int(b, "forward", 1));
  tpuir_val r;
  int last = dims[nlist - 1];
  if (op == F_R2C) {
    if (tpulw__int(b, "onesided", 1)) {
      r = fft_along(b, x, TPUIR_FFT_RFFT, 1, &last, &last_n);
      r = c2c_groups(b, r, 0, nlist - 1, dims);
    } else {
      r = c2c_groups(b, tpulw__convert(b, x, tpu_dtype_to_complex(dt)), 0, nlist, dims);
    }
  } else if (op == F_C2C) {
    r = c2c_groups(b, x, inverse, nlist, dims);
  } else {
    /* the half spectrum on the last dim: n/2 + 1 entries (crop or pad) */
    int64_t h = last_n / 2 + 1, have = s.sizes[last];
    if (have > h) {
      int64_t st[TPU_MAX_DIMS], li[TPU_MAX_DIMS], sd[TPU_MAX_DIMS];
      for (int d = 0; d < s.ndim; d++) {
        st[d] = 0;
        li[d] = d == last ? h : s.sizes[d];
        sd[d] = 1;
      }
      x = tpuir_slice(b->g, x, st, li, sd);
    } else if (have < h) {
      int64_t zs[TPU_MAX_DIMS];
      memcpy(zs, s.sizes, sizeof zs);
      zs[last] = h - have;
      tpuir_val parts[2] = {x, tpulw__full(b, dt, s.ndim, zs, 0)};
      x = tpuir_concat(b->g, 2, parts, last);
    }
    x = c2c_groups(b, x, 1, nlist - 1, dims);
    r = fft_along(b, x, TPUIR_FFT_IRFFT, 1, &last, &last_n);
  }
  /* normalization */
  double scale;
  if (inverse) scale = norm == 1 ? sqrt(N) : norm == 2 ? 1.0 : N;
  else scale = norm == 1 ? 1.0 / sqrt(N) : norm == 2 ? 1.0 / N : 1.0;
  if (scale != 1.0) r = tpulw__bin_c(b, TPUIR_MUL, r, scale);
  return tpulw__result(b, r);
}

const tpulw__row tpulw__rows_fft[] = {
    {"_fft_r2c", fft_fn, F_R2C}, {"_fft_r2c.out", fft_fn, F_R2C},
    {"_fft_c2r", fft_fn, F_C2R}, {"_fft_c2r.out", fft_fn, F_C2R},
    {"_fft_c2c", fft_fn, F_C2C}, {"_fft_c2c.out", fft_fn, F_C2C},
};
const int tpulw__nrows_fft = (int)(sizeof tpulw__rows_fft / sizeof tpulw__rows_fft[0]);

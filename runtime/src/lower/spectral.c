/* lower/spectral.c - symmetric eigendecomposition and SVD:
 * _linalg_eigh (+ .eigenvalues) and _linalg_svd (+ .U), lowered to the
 * packed TPUIR_EIGH / TPUIR_SVD nodes (tpu_ir.h) whose parts are taken
 * apart with slices and reshapes. Everything above them (linalg.eigh,
 * eigvalsh, svd, svdvals, pinv, matrix_rank, cond, nuclear norms, ...) is
 * CompositeImplicitAutograd in PyTorch and decomposes into these, and the
 * backward formulas decompose into existing ops.
 *
 * Checks and messages follow PyTorch CPU (the meta functions first, then
 * the kernel's dtype dispatch: "linalg_eigh_cpu" not implemented for
 * 'Half' is NotImplementedError, which the strict mode raises and the
 * fallback reproduces). A NaN input raises torch.linalg.LinAlgError at
 * the call like LAPACK's info check, so these launches synchronise.
 */
#include <string.h>

#include "lower/internal.h"

enum { SP_EIGH = 1, SP_SVD };

static int check_matrix(const tpulw__b *b, const tpulw_tensor *a, const char *api) {
  if (a->view.ndim < 2)
    return tpu_error(TPU_E_INVALID,
                     "%s: The input tensor A must have at least 2 dimensions.", api);
  return TPU_OK;
}

/* x[..., lo:hi] along dim `d` (other dims whole) */
static tpuir_val slice_dim(tpulw__b *b, tpuir_val x, int d, int64_t lo, int64_t hi) {
  tpulw__shape s = tpulw__info(b, x);
  int64_t st[TPU_MAX_DIMS], li[TPU_MAX_DIMS], sd[TPU_MAX_DIMS];
  for (int i = 0; i < s.ndim; i++) {
    st[i] = 0;
    li[i] = s.sizes[i];
    sd[i] = 1;
  }
  st[d] = lo;
  li[d] = hi;
  return tpuir_slice(b->g, x, st, li, sd);
}

/* packed[..., lo:lo+r*c] reshaped to [..., r, c] */
static tpuir_val unpack_matrix(tpulw__b *b, tpuir_val packed, int64_t lo, int64_t r,
                               int64_t c) {
  tpulw__shape s = tpulw__info(b, packed);
  tpuir_val v = slice_dim(b, packed, s.ndim - 1, lo, lo + r * c);
  LW_TRY(v);
  int64_t sz[TPU_MAX_DIMS];
  for (int i = 0; i < s.ndim - 1; i++) sz[i] = s.sizes[i];
  sz[s.ndim - 1] = r;
  sz[s.ndim] = c;
  return tpulw__reshape(b, v, s.ndim + 1, sz);
}

static int eigh_fn(tpulw__b *b) {
  const tpulw_tensor *a = tpulw__tensor_arg(b, "A");
  if (!a || a->device < 0)
    return tpu_error(TPU_E_UNSUPPORTED, "%s: A is not a device tensor", b->base);
  int rc = check_matrix(b, a, "linalg.eigh");
  LW_TRY(rc);
  const tpu_view *v = &a->view;
  int nd = v->ndim;
  int64_t n = v->sizes[nd - 1];
  if (v->sizes[nd - 2] != n)
    return tpu_error(TPU_E_INVALID,
                     "linalg.eigh: A must be batches of square matrices, but they "
                     "are %lld by %lld matrices",
                     (long long)v->sizes[nd - 2], (long long)n);
  const char *uplo = tpulw__str(b, "UPLO");
  if (!uplo) uplo = "L";
  int lower;
  if (strcmp(uplo, "L") == 0 || strcmp(uplo, "l") == 0) lower = 1;
  else if (strcmp(uplo, "U") == 0 || strcmp(uplo, "u") == 0) lower = 0;
  else
    return tpu_error(TPU_E_INVALID,
                     "Expected UPLO argument to be 'L' or 'U', but got %s", uplo);
  int dt = v->dtype;
  if (dt != TPU_F32 && dt != TPU_F64)
    return tpu_error(TPU_E_UNSUPPORTED, "\"linalg_eigh_cpu\" not implemented for '%s'",
                     tpulw__torch_name(dt));
  int compute_v = (int)tpulw__int(b, "compute_v", 1);
  b->out_rule = LW_OUT_SAME;
  b->sync = 1; /* a NaN raises LinAlgError at the call */
  tpuir_val x = tpulw__tensor(b, a);
  LW_TRY(x);
  tpuir_val p = tpuir_eigh(b->g, x, lower, compute_v, 1);
  LW_TRY(p);
  tpuir_val w = slice_dim(b, p, nd - 2, 0, 1);
  LW_TRY(w);
  int64_t ws[TPU_MAX_DIMS];
  for (int i = 0; i < nd - 1; i++) ws[i] = v->sizes[i];
  ws[nd - 2] = n;
  w = tpulw__reshape(b, w, nd - 1, ws);
  if ((rc = tpulw__result(b, w)) < 0) return rc;
  if (!compute_v) {
    int64_t zero = 0;
    return tpulw__result(b, tpulw__full(b, dt, 1, &zero, 0));
  }
  return tpulw__result(b, slice_dim(b, p, nd - 2, 1, n + 1));
}

static int svd_fn(tpulw__b *b) {
  const tpulw_tensor *a = tpulw__tensor_arg(b, "A");
  if (!a || a->device < 0)
    return tpu_error(TPU_E_UNSUPPORTED, "%s: A is not a device tensor", b->base);
  int rc = check_matrix(b, a, "linalg.svd");
  LW_TRY(rc);
  const tpu_view *v = &a->view;
  int dt = v->dtype, nd = v->ndim;
  if (tpu_dtype_is_int(dt) || dt == TPU_BOOL)
    return tpu_error(TPU_E_INVALID,
                     "linalg.svd: Expected a floating point or complex tensor as "
                     "input. Got %s",
                     tpulw__torch_name(dt));
  if (!tpulw__none(b, "driver"))
    return tpu_error(TPU_E_INVALID,
                     "torch.linalg.svd: keyword argument `driver=` is only "
                     "supported on CUDA inputs with cuSOLVER backend.");
  if (dt != TPU_F32 && dt != TPU_F64) /* f16/bf16 like CPU; complex: not yet */
    return tpu_error(TPU_E_UNSUPPORTED, "\"linalg_svd_cpu\" not implemented for '%s'",
                     tpulw__torch_name(dt));
  int full = (int)tpulw__int(b, "full_matrices", 0);
  int compute_uv = (int)tpulw__int(b, "compute_uv", 1);
  int64_t m = v->sizes[nd - 2], n = v->sizes[nd - 1], k = m < n ? m : n;
  int64_t uc = full ? m : k, vr = full ? n : k;
  b->out_rule = LW_OUT_SAME;
  b->sync = 1; /* a NaN raises LinAlgError at the call */
  tpuir_val x = tpulw__tensor(b, a);
  LW_TRY(x);
  tpuir_val p = tpuir_svd(b->g, x, full, compute_uv, 1);
  LW_TRY(p);
  tpuir_val s = slice_dim(b, p, nd - 2, 0, k);
  LW_TRY(s);
  if (!compute_uv) {
    int64_t zero = 0;
    tpuir_val e = tpulw__full(b, dt, 1, &zero, 0);
    if ((rc = tpulw__result(b, e)) < 0) return rc;
    if ((rc = tpulw__result(b, s)) < 0) return rc;
    return tpulw__result(b, tpulw__full(b, dt, 1, &zero, 0));
  }
  tpuir_val u = unpack_matrix(b, p, k, m, uc);
  tpuir_val vh = unpack_matrix(b, p, k + m * uc, vr, n);
  if ((rc = tpulw__result(b, u)) < 0) return rc;
  if ((rc = tpulw__result(b, s)) < 0) return rc;
  return tpulw__result(b, vh);
}

const tpulw__row tpulw__rows_spectral[] = {
    {"_linalg_eigh", eigh_fn, SP_EIGH},
    {"_linalg_eigh.eigenvalues", eigh_fn, SP_EIGH},
    {"_linalg_svd", svd_fn, SP_SVD},
    {"_linalg_svd.U", svd_fn, SP_SVD},
};
const int tpulw__nrows_spectral = sizeof tpulw__rows_spectral / sizeof tpulw__rows_spectral[0];

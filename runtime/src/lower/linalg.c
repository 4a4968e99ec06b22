/* lower/linalg.c - dense factorizations and solves: Cholesky, LU,
 * QR (geqrf / householder_product / ormqr / linalg_qr), LDL^T (Bunch-
 * Kaufman ldl_factor / ldl_solve), triangular solves,
 * inverse, solve, det/slogdet, lstsq (QR, full-rank inputs) and
 * matrix_exp (scaling and squaring with a degree-13 Pade approximant),
 * linalg_cross.
 *
 * Built from the dense linear algebra IR ops (tpu_ir.h: CHOLESKY,
 * TRIANGULAR_SOLVE, LU, LU_PIVOTS_TO_PERM, GEQRF, HOUSEHOLDER_PRODUCT)
 * plus dot_general and elementwise ops. float32 inputs are computed in
 * float64 internally and rounded once at the end. Errors follow PyTorch
 * CPU's types and texts (int inputs -> RuntimeError; f16/bf16 -> the
 * NotImplementedError of CPU's dispatch, through TPU_E_UNSUPPORTED).
 * The *_ex ops return `info` like LAPACK; the non-_ex Python APIs raise
 * torch.linalg.LinAlgError through aten::_linalg_check_errors, which reads
 * that info on the device.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "lower/internal.h"

enum {
  S_CHOL_EX = 1, S_CHOL, S_CHOL_SOLVE, S_CHOL_INV, S_TRI_SOLVE, S_SOLVE_TRI,
  S_LU_FACTOR, S_LU, S_LU_UNPACK, S_LU_SOLVE, S_INV, S_SOLVE, S_DET, S_SLOGDET,
  S_GEQRF, S_HH, S_ORMQR, S_QR, S_LSTSQ, S_MEXP, S_LDL, S_LDL_SOLVE
};

#define CT TPU_F64 /* compute dtype */

/* Tensor argument t as a value in the compute dtype. */
static tpuir_val ct_arg(tpulw__b *b, const tpulw_tensor *t) {
  return tpulw__convert(b, tpulw__tensor(b, t), CT);
}

/* *_ex ops with check_errors=True raise from inside the op on CPU; not
 * lowered (TPU_E_UNSUPPORTED: the glue falls back). */
static int no_check_errors(tpulw__b *b, const char *op) {
  if (!tpulw__int(b, "check_errors", 0)) return TPU_OK;
  return tpu_error(TPU_E_UNSUPPORTED, "%s: check_errors=True", op);
}

/* ---- checks ------------------------------------------------------------ */

/* tensor argument (a 0-dim CPU tensor too: it fails the rank checks with
 * PyTorch's message) */
static const tpulw_tensor *targ(const tpulw__b *b, const char *name) {
  return tpulw__tensor_arg(b, name);
}

/* float32/float64 matrix (batch) input. `fname` is PyTorch's API name in
 * messages. fc: a non-float dtype raises RuntimeError "Expected a floating
 * point or complex tensor" (else CPU's dispatch NotImplementedError for
 * `disp`, through TPU_E_UNSUPPORTED); low: f16/bf16 raise RuntimeError
 * "Low precision dtypes not supported" (else the dispatch error). */
static int check_mat(const tpulw_tensor *t, const char *fname, const char *arg,
                     int square, int fc, int low, const char *disp) {
  if (!t) return tpu_error(TPU_E_UNSUPPORTED, "%s: missing tensor", fname);
  int dt = t->view.dtype;
  if (dt != TPU_F32 && dt != TPU_F64) {
    int isf = tpu_dtype_is_float(dt);
    if (isf ? low : fc)
      return tpu_error(TPU_E_INVALID,
                       isf ? "%s: Low precision dtypes not supported. Got %s"
                           : "%s: Expected a floating point or complex tensor as input. Got %s",
                       fname, tpulw__torch_name(dt));
    return tpu_error(TPU_E_UNSUPPORTED, "\"%s\" not implemented for '%s'", disp,
                     tpulw__torch_name(dt));
  }
  if (t->view.ndim < 2)
    return tpu_error(TPU_E_INVALID,
                     "%s: The input tensor %s must have at least 2 dimensions.", fname, arg);
  if (square && t->view.sizes[t->view.ndim - 1] != t->view.sizes[t->view.ndim - 2])
    return tpu_error(TPU_E_INVALID,
                     "%s: %s must be batches of square matrices, but they are %lld by "
                     "%lld matrices",
                     fname, arg, (long long)t->view.sizes[t->view.ndim - 2],
                     (long long)t->view.sizes[t->view.ndim - 1]);
  return TPU_OK;
}

/* dtype-mismatch check between two inputs */
static int check_same_dtype(const tpulw_tensor *a, const tpulw_tensor *c, const char *fname,
                            const char *an, const char *cn) {
  if (a->view.dtype != c->view.dtype)
    return tpu_error(TPU_E_INVALID,
                     "%s: Expected %s and %s to have the same dtype, but found %s "
                     "and %s instead",
                     fname, an, cn, tpulw__torch_name(a->view.dtype),
                     tpulw__torch_name(c->view.dtype));
  return TPU_OK;
}

/* ---- small IR helpers --------------------------------------------------- */

/* transpose of the last two dims */
static tpuir_val mT(tpulw__b *b, tpuir_val x) {
  if (x < 0) return x;
  tpulw__shape s = tpulw__info(b, x);
  int64_t perm[TPU_MAX_DIMS];
  for (int i = 0; i < s.ndim; i++) perm[i] = i;
  perm[s.ndim - 1] = s.ndim - 2;
  perm[s.ndim - 2] = s.ndim - 1;
  return tpuir_transpose(b->g, x, perm);
}

/* batched x [.., m, k] @ y [.., k, n] (same batch dims), exact fp64 */
static tpuir_val mm(tpulw__b *b, tpuir_val x, tpuir_val y) {
  if (x < 0) return x;
  if (y < 0) return y;
  tpulw__shape s = tpulw__info(b, x);
  int nb = s.ndim - 2;
  int64_t bd[TPU_MAX_DIMS];
  for (int i = 0; i < nb; i++) bd[i] = i;
  int64_t lc = nb + 1, rc = nb;
  return tpuir_dot_general(b->g, x, y, nb, bd, bd, 1, &lc, &rc, TPU_PREC_FP32, s.dtype);
}

/* broadcast the batch dims (all but the last `keep`) of x to bsizes[0..nb) */
static tpuir_val bcast_batch(tpulw__b *b, tpuir_val x, int keep, int nb, const int64_t *bs) {
  if (x < 0) return x;
  tpulw__shape s = tpulw__info(b, x);
  int64_t sz[TPU_MAX_DIMS];
  for (int i = 0; i < nb; i++) sz[i] = bs[i];
  for (int i = 0; i < keep; i++) sz[nb + i] = s.sizes[s.ndim - keep + i];
  return tpulw__bcast(b, x, nb + keep, sz);
}

/* broadcast shape of two batch-dim lists (PyTorch's error on mismatch) */
static int batch_shape(int na, const int64_t *a, int nc, const int64_t *c, int *nb,
                       int64_t *out) {
  int n = na > nc ? na : nc;
  for (int i = 0; i < n; i++) {
    int64_t x = i - (n - na) >= 0 ? a[i - (n - na)] : 1;
    int64_t y = i - (n - nc) >= 0 ? c[i - (n - nc)] : 1;
    if (x != y && x != 1 && y != 1)
      return tpu_error(TPU_E_INVALID,
                       "The size of tensor a (%lld) must match the size of tensor b "
                       "(%lld) at non-singleton dimension %d",
                       (long long)x, (long long)y, i);
    out[i] = x == 1 ? y : x;
  }
  *nb = n;
  return TPU_OK;
}

/* iota-based masks over the last two dims of shape s */
static tpuir_val rowcol(tpulw__b *b, const tpulw__shape *s, int which) {
  return tpuir_iota(b->g, TPU_I64, s->ndim, s->sizes, s->ndim - 2 + which);
}

/* tril (lower = 1) / triu of x with diagonal offset k */
static tpuir_val tri(tpulw__b *b, tpuir_val x, int lower, int64_t k) {
  if (x < 0) return x;
  tpulw__shape s = tpulw__info(b, x);
  tpuir_val r = rowcol(b, &s, 0), c = rowcol(b, &s, 1);
  tpuir_val d = tpulw__bin(b, TPUIR_SUB, c, r); /* c - r */
  tpuir_val keep = lower ? tpulw__bin(b, TPUIR_LE, d, tpulw__const(b, TPU_I64, (double)k))
                         : tpulw__bin(b, TPUIR_GE, d, tpulw__const(b, TPU_I64, (double)k));
  return tpulw__sel(b, keep, x, tpulw__const(b, s.dtype, 0.0));
}

/* identity [bs..., n, n] */
static tpuir_val eye(tpulw__b *b, int dt, int nb, const int64_t *bs, int64_t r, int64_t c) {
  tpulw__shape s;
  s.dtype = dt;
  s.ndim = nb + 2;
  for (int i = 0; i < nb; i++) s.sizes[i] = bs[i];
  s.sizes[nb] = r;
  s.sizes[nb + 1] = c;
  tpuir_val e = tpulw__bin(b, TPUIR_EQ, rowcol(b, &s, 0), rowcol(b, &s, 1));
  return tpulw__convert(b, e, dt);
}

/* x[..., r0:r1, c0:c1] */
static tpuir_val sub(tpulw__b *b, tpuir_val x, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  if (x < 0) return x;
  tpulw__shape s = tpulw__info(b, x);
  int64_t st[TPU_MAX_DIMS], li[TPU_MAX_DIMS], sd[TPU_MAX_DIMS];
  for (int i = 0; i < s.ndim; i++) {
    st[i] = 0;
    li[i] = s.sizes[i];
    sd[i] = 1;
  }
  st[s.ndim - 2] = r0;
  li[s.ndim - 2] = r1;
  st[s.ndim - 1] = c0;
  li[s.ndim - 1] = c1;
  return tpuir_slice(b->g, x, st, li, sd);
}

/* zero-pad the last two dims of x to (r, c) */
static tpuir_val pad_to(tpulw__b *b, tpuir_val x, int64_t r, int64_t c) {
  if (x < 0) return x;
  tpulw__shape s = tpulw__info(b, x);
  int64_t lo[TPU_MAX_DIMS] = {0}, hi[TPU_MAX_DIMS] = {0}, in[TPU_MAX_DIMS] = {0};
  hi[s.ndim - 2] = r - s.sizes[s.ndim - 2];
  hi[s.ndim - 1] = c - s.sizes[s.ndim - 1];
  if (!hi[s.ndim - 2] && !hi[s.ndim - 1]) return x;
  return tpuir_pad(b->g, x, tpulw__const(b, s.dtype, 0.0), lo, hi, in);
}

/* zero-pad the last dim of x to n */
static tpuir_val pad_last(tpulw__b *b, tpuir_val x, int64_t n) {
  if (x < 0) return x;
  tpulw__shape s = tpulw__info(b, x);
  int64_t lo[TPU_MAX_DIMS] = {0}, hi[TPU_MAX_DIMS] = {0}, in[TPU_MAX_DIMS] = {0};
  hi[s.ndim - 1] = n - s.sizes[s.ndim - 1];
  if (!hi[s.ndim - 1]) return x;
  return tpuir_pad(b->g, x, tpulw__const(b, s.dtype, 0.0), lo, hi, in);
}

/* diagonal [..., min(m, n)] of x [..., m, n] (exact) */
static tpuir_val diag(tpulw__b *b, tpuir_val x) {
  if (x < 0) return x;
  tpulw__shape s = tpulw__info(b, x);
  int64_t m = s.sizes[s.ndim - 2], n = s.sizes[s.ndim - 1], k = m < n ? m : n;
  tpuir_val sq = sub(b, x, 0, k, 0, k);
  tpulw__shape q = tpulw__info(b, sq);
  tpuir_val on = tpulw__bin(b, TPUIR_EQ, rowcol(b, &q, 0), rowcol(b, &q, 1));
  tpuir_val z = tpulw__sel(b, on, sq, tpulw__const(b, s.dtype, 0.0));
  int64_t last = s.ndim - 1;
  return tpuir_reduce(b->g, TPUIR_RED_SUM, z, 1, &last);
}

/* value shape without the trailing `drop` dims */
static void batch_of(const tpulw__shape *s, int drop, int *nb, int64_t *bs) {
  *nb = s->ndim - drop;
  for (int i = 0; i < *nb; i++) bs[i] = s->sizes[i];
}

/* rows of x [..., m, n] permuted: out[i] = x[perm[i]] (perm int32 [.., m]) */
static tpuir_val permute_rows(tpulw__b *b, tpuir_val x, tpuir_val perm) {
  if (x < 0) return x;
  if (perm < 0) return perm;
  tpulw__shape s = tpulw__info(b, x);
  tpulw__shape p = tpulw__info(b, perm);
  int64_t sz[TPU_MAX_DIMS];
  memcpy(sz, p.sizes, sizeof sz);
  sz[p.ndim] = 1;
  tpuir_val idx = tpulw__reshape(b, tpulw__convert(b, perm, TPU_I64), p.ndim + 1, sz);
  idx = tpulw__bcast(b, idx, s.ndim, s.sizes);
  return tpuir_gather(b->g, x, s.ndim - 2, idx);
}

/* inverse permutation (int32 [.., m]) */
static tpuir_val inv_perm(tpulw__b *b, tpuir_val perm) {
  if (perm < 0) return perm;
  tpulw__shape p = tpulw__info(b, perm);
  tpuir_val pi = tpulw__convert(b, perm, TPU_I64);
  tpuir_val io = tpuir_iota(b->g, TPU_I64, p.ndim, p.sizes, p.ndim - 1);
  tpuir_val z = tpulw__full(b, TPU_I64, p.ndim, p.sizes, 0);
  return tpuir_scatter_add(b->g, z, p.ndim - 1, pi, io);
}

/* permutation matrix P [.., m, m] with A = P L U: P[perm[i], i] = 1 */
static tpuir_val perm_matrix(tpulw__b *b, tpuir_val perm, int dt) {
  if (perm < 0) return perm;
  tpulw__shape p = tpulw__info(b, perm);
  int64_t m = p.sizes[p.ndim - 1];
  tpulw__shape s = p;
  s.ndim = p.ndim + 1;
  s.sizes[p.ndim - 1] = m;
  s.sizes[p.ndim] = m;
  int64_t dims[TPU_MAX_DIMS];
  for (int i = 0; i < p.ndim - 1; i++) dims[i] = i;
  dims[p.ndim - 1] = p.ndim; /* perm indexed by the column */
  tpuir_val pc = tpuir_broadcast_in_dim(b->g, tpulw__convert(b, perm, TPU_I64), s.ndim, s.sizes, dims);
  tpuir_val eq = tpulw__bin(b, TPUIR_EQ, pc, rowcol(b, &s, 0));
  return tpulw__convert(b, eq, dt);
}

/* Declare the next result (converted to dt) with a column-major layout,
 * as PyTorch CPU returns LAPACK outputs. */
static int res_f(tpulw__b *b, tpuir_val v, int dt) {
  if (b->nres < 32) b->col_major |= 1u << b->nres;
  return tpulw__result_as(b, v, dt);
}

/* ---- LU solve core ------------------------------------------------------ */

/* Solve with A = P L U given (LU, perm) of equal batch dims with B
 * [.., n, k]: left & !adjoint: A X = B; left & adjoint: A^T X = B. */
static tpuir_val lu_solve_left(tpulw__b *b, tpuir_val lu, tpuir_val perm, tpuir_val B,
                               int adjoint) {
  if (!adjoint) {
    tpuir_val y = permute_rows(b, B, perm);
    y = tpuir_triangular_solve(b->g, lu, y, 1, 1, 1, 0);
    return tpuir_triangular_solve(b->g, lu, y, 1, 0, 0, 0);
  }
  tpuir_val y = tpuir_triangular_solve(b->g, lu, B, 1, 0, 0, 1);
  y = tpuir_triangular_solve(b->g, lu, y, 1, 1, 1, 1);
  return permute_rows(b, y, inv_perm(b, perm));
}

/* left: as above; right (X A = B): A^T X^T = B^T. */
static tpuir_val lu_solve_any(tpulw__b *b, tpuir_val lu, tpuir_val perm, tpuir_val B,
                              int left, int adjoint) {
  if (left) return lu_solve_left(b, lu, perm, B, adjoint);
  return mT(b, lu_solve_left(b, lu, perm, mT(b, B), !adjoint));
}

/* ---- Cholesky family ---------------------------------------------------- */

static int chol_fn(tpulw__b *b) {
  const char *fname = b->op == S_CHOL ? "cholesky" : "linalg.cholesky";
  const tpulw_tensor *a = targ(b, "self");
  int rc = check_mat(a, fname, "A", 1, b->op == S_CHOL_EX, 0, "cholesky_cpu");
  if (rc) return rc;
  if (b->op == S_CHOL_EX && (rc = no_check_errors(b, "linalg_cholesky_ex"))) return rc;
  int upper = (int)tpulw__int(b, "upper", 0);
  int dt = a->view.dtype;
  b->out_rule = LW_OUT_SAME;
  tpuir_val x = ct_arg(b, a);
  tpuir_val L = tpuir_cholesky(b->g, x, !upper, TPUIR_CHOL_FACTOR);
  LW_TRY(L);
  if (b->op == S_CHOL) {
    /* the deprecated op raises (RuntimeError) on a non-PD input: the info
     * node checks at run time */
    tpuir_val info = tpuir_cholesky(b->g, x, (!upper) | TPUIR_CHOL_CHECK, TPUIR_CHOL_INFO);
    LW_TRY(info);
    b->sync = 1;
    return res_f(b, L, dt);
  }
  rc = res_f(b, L, dt);
  if (rc) return rc;
  return tpulw__result(b, tpuir_cholesky(b->g, x, !upper, TPUIR_CHOL_INFO));
}

static int chol_solve_fn(tpulw__b *b) {
  const tpulw_tensor *B = targ(b, "self"), *A = targ(b, "A");
  int rc = check_mat(B, "cholesky_solve", "B", 0, 0, 0, "cholesky_solve_cpu");
  if (rc) return rc;
  if ((rc = check_mat(A, "cholesky_solve", "A", 1, 0, 0, "cholesky_solve_cpu"))) return rc;
  if ((rc = check_same_dtype(B, A, "cholesky_solve", "self", "A"))) return rc;
  int upper = (int)tpulw__int(b, "upper", 0), dt = B->view.dtype;
  b->out_rule = LW_OUT_SAME;
  tpuir_val xb = ct_arg(b, B), xa = ct_arg(b, A);
  tpulw__shape sb = tpulw__info(b, xb), sa = tpulw__info(b, xa);
  int nb;
  int64_t bs[TPU_MAX_DIMS];
  if ((rc = batch_shape(sb.ndim - 2, sb.sizes, sa.ndim - 2, sa.sizes, &nb, bs))) return rc;
  xb = bcast_batch(b, xb, 2, nb, bs);
  xa = bcast_batch(b, xa, 2, nb, bs);
  /* A = L L^T: L^T X = L^{-1} B ; A = U^T U: U X = U^{-T} B */
  tpuir_val y = tpuir_triangular_solve(b->g, xa, xb, 1, !upper, 0, upper);
  y = tpuir_triangular_solve(b->g, xa, y, 1, !upper, 0, !upper);
  return res_f(b, y, dt);
}

static int chol_inv_fn(tpulw__b *b) {
  const tpulw_tensor *A = targ(b, "self");
  int rc = check_mat(A, "cholesky_inverse", "input", 1, 0, 0, "cholesky_inverse_out_cpu");
  if (rc) return rc;
  int upper = (int)tpulw__int(b, "upper", 0), dt = A->view.dtype;
  b->out_rule = LW_OUT_SAME;
  tpuir_val xa = ct_arg(b, A);
  tpulw__shape s = tpulw__info(b, xa);
  int nb;
  int64_t bs[TPU_MAX_DIMS];
  batch_of(&s, 2, &nb, bs);
  int64_t n = s.sizes[s.ndim - 1];
  tpuir_val I = eye(b, CT, nb, bs, n, n);
  tpuir_val y = tpuir_triangular_solve(b->g, xa, I, 1, !upper, 0, upper);
  y = tpuir_triangular_solve(b->g, xa, y, 1, !upper, 0, !upper);
  return res_f(b, y, dt);
}

/* ---- triangular solves -------------------------------------------------- */

static int tri_fn(tpulw__b *b) {
  int legacy = b->op == S_TRI_SOLVE;
  const char *fname = legacy ? "triangular_solve" : "linalg.solve_triangular";
  const tpulw_tensor *A = targ(b, legacy ? "A" : "self"), *B = targ(b, legacy ? "self" : "B");
  int rc = check_mat(A, fname, "A", 1, 0, 0, "triangular_solve_cpu");
  if (rc) return rc;
  if ((rc = check_mat(B, fname, "B", 0, 0, 0, "triangular_solve_cpu")))
    return rc;
  if ((rc = check_same_dtype(B, A, fname, "B", "A"))) return rc;
  int upper = (int)tpulw__int(b, "upper", legacy ? 1 : 0);
  int trans = legacy ? (int)tpulw__int(b, "transpose", 0) : 0;
  int unit = (int)tpulw__int(b, "unitriangular", 0);
  int left = legacy ? 1 : (int)tpulw__int(b, "left", 1);
  int dt = B->view.dtype;
  b->out_rule = LW_OUT_SAME;
  tpuir_val xa = ct_arg(b, A), xb = ct_arg(b, B);
  tpulw__shape sa = tpulw__info(b, xa), sb = tpulw__info(b, xb);
  int64_t k = sa.sizes[sa.ndim - 1];
  int64_t need = left ? sb.sizes[sb.ndim - 2] : sb.sizes[sb.ndim - 1];
  if (need != k) {
    if (legacy)
      return tpu_error(TPU_E_INVALID,
                       "Incompatible matrix sizes for triangular_solve: each A matrix is "
                       "%lld by %lld but each b matrix is %lld by %lld",
                       (long long)k, (long long)k, (long long)sb.sizes[sb.ndim - 2],
                       (long long)sb.sizes[sb.ndim - 1]);
    return tpu_error(TPU_E_INVALID,
                     "linalg.solve_triangular: Incompatible shapes of A and B for the "
                     "equation %s (%lldx%lld and %lldx%lld)",
                     left ? "AX = B" : "XA = B", (long long)k, (long long)k,
                     (long long)sb.sizes[sb.ndim - 2], (long long)sb.sizes[sb.ndim - 1]);
  }
  int nb;
  int64_t bs[TPU_MAX_DIMS];
  if ((rc = batch_shape(sb.ndim - 2, sb.sizes, sa.ndim - 2, sa.sizes, &nb, bs))) return rc;
  xb = bcast_batch(b, xb, 2, nb, bs);
  tpuir_val xab = bcast_batch(b, xa, 2, nb, bs);
  tpuir_val x = tpuir_triangular_solve(b->g, xab, xb, left, !upper, unit, trans);
  rc = res_f(b, x, dt);
  if (rc || !legacy) return rc;
  return res_f(b, bcast_batch(b, tpulw__tensor(b, A), 2, nb, bs), dt);
}

/* ---- LU family ---------------------------------------------------------- */

static int lu_factor_fn(tpulw__b *b) {
  const char *fname = b->op == S_LU ? "linalg.lu" : "linalg.lu_factor";
  const tpulw_tensor *A = targ(b, "A");
  int rc = check_mat(A, fname, "A", 0, 0, 0, "lu_cpu");
  if (rc) return rc;
  if (!tpulw__int(b, "pivot", 1))
    return tpu_error(TPU_E_INVALID,
                     "linalg.lu_factor: LU without pivoting is not implemented on the CPU");
  if (b->op == S_LU_FACTOR && (rc = no_check_errors(b, "linalg_lu_factor_ex"))) return rc;
  int dt = A->view.dtype;
  b->out_rule = LW_OUT_SAME;
  tpuir_val x = ct_arg(b, A);
  tpuir_val lu = tpuir_lu(b->g, x, TPUIR_LU_PACKED);
  LW_TRY(lu);
  if (b->op == S_LU_FACTOR) {
    if ((rc = res_f(b, lu, dt))) return rc;
    if ((rc = tpulw__result(b, tpuir_lu(b->g, x, TPUIR_LU_PIVOTS)))) return rc;
    return tpulw__result(b, tpuir_lu(b->g, x, TPUIR_LU_INFO));
  }
  tpulw__shape s = tpulw__info(b, lu);
  int64_t m = s.sizes[s.ndim - 2], n = s.sizes[s.ndim - 1], k = m < n ? m : n;
  int nb;
  int64_t bs[TPU_MAX_DIMS];
  batch_of(&s, 2, &nb, bs);
  tpuir_val P = perm_matrix(b, tpuir_lu(b->g, x, TPUIR_LU_PERM), CT);
  tpuir_val L = tpulw__bin(b, TPUIR_ADD, tri(b, sub(b, lu, 0, m, 0, k), 1, -1), eye(b, CT, nb, bs, m, k));
  tpuir_val U = tri(b, sub(b, lu, 0, k, 0, n), 0, 0);
  if ((rc = tpulw__result_as(b, P, dt))) return rc;
  if ((rc = tpulw__result_as(b, L, dt))) return rc;
  return tpulw__result_as(b, U, dt);
}

static int lu_unpack_fn(tpulw__b *b) {
  const tpulw_tensor *LU = targ(b, "LU_data"), *piv = targ(b, "LU_pivots");
  int rc = TPU_OK;
  if (!LU) return tpu_error(TPU_E_UNSUPPORTED, "lu_unpack: no LU");
  if (LU->view.dtype == TPU_BOOL)
    return tpu_error(TPU_E_UNSUPPORTED, "lu_unpack: bool");
  if (LU->view.ndim < 2)
    return tpu_error(TPU_E_INVALID,
                     "torch.lu_unpack: Expected tensor with 2 or more dimensions. Got size: "
                     "[%lld] instead",
                     (long long)(LU->view.ndim ? LU->view.sizes[0] : 0));
  if (!piv) return tpu_error(TPU_E_UNSUPPORTED, "lu_unpack: no pivots");
  if (piv->view.dtype != TPU_I32)
    return tpu_error(TPU_E_INVALID,
                     "torch.lu_unpack: LU_pivots is expected to be a contiguous tensor "
                     "of torch.int32 dtype.\nNote: this function is intended to be used "
                     "with the output produced by torch.linalg.lu_factor");
  int ud = (int)tpulw__int(b, "unpack_data", 1), up = (int)tpulw__int(b, "unpack_pivots", 1);
  int dt = LU->view.dtype;
  b->out_rule = LW_OUT_SAME;
  tpuir_val lu = ct_arg(b, LU);
  tpulw__shape s = tpulw__info(b, lu);
  int64_t m = s.sizes[s.ndim - 2], n = s.sizes[s.ndim - 1], k = m < n ? m : n;
  int nb;
  int64_t bs[TPU_MAX_DIMS];
  batch_of(&s, 2, &nb, bs);
  int64_t z = 0;
  tpuir_val P, L, U;
  if (up) {
    tpuir_val pv = tpulw__tensor(b, piv);
    tpulw__shape ps = tpulw__info(b, pv);
    if (ps.ndim < 1 || ps.sizes[ps.ndim - 1] != k)
      return tpu_error(TPU_E_INVALID,
                       "torch.lu_unpack: Expected LU_pivots.size(-1) == min(LU.size(-2), "
                       "LU.size(-1)), but got %lld and %lld",
                       (long long)(ps.ndim ? ps.sizes[ps.ndim - 1] : 1), (long long)k);
    b->sync = 1; /* out-of-range pivots raise at the call, like CPU */
    P = perm_matrix(b, tpuir_lu_pivots_to_perm(b->g, pv, m), CT);
  } else {
    P = tpulw__full(b, CT, 1, &z, 0);
  }
  if (ud) {
    L = tpulw__bin(b, TPUIR_ADD, tri(b, sub(b, lu, 0, m, 0, k), 1, -1), eye(b, CT, nb, bs, m, k));
    U = tri(b, sub(b, lu, 0, k, 0, n), 0, 0);
  } else {
    L = tpulw__full(b, CT, 1, &z, 0);
    U = tpulw__full(b, CT, 1, &z, 0);
  }
  if ((rc = tpulw__result_as(b, P, dt))) return rc;
  if ((rc = tpulw__result_as(b, L, dt))) return rc;
  return tpulw__result_as(b, U, dt);
}

static int lu_solve_fn(tpulw__b *b) {
  const tpulw_tensor *LU = targ(b, "LU"), *piv = targ(b, "pivots"), *B = targ(b, "B");
  const char *fname = "linalg.lu_solve";
  int rc = check_mat(LU, "torch.linalg.lu_solve", "LU", 1, 1, 0, "linalg.lu_solve_cpu");
  if (rc) return rc;
  if ((rc = check_mat(B, "torch.linalg.lu_solve", "B", 0, 1, 0, "linalg.lu_solve_cpu"))) return rc;
  if ((rc = check_same_dtype(B, LU, fname, "B", "LU"))) return rc;
  if (!piv || piv->view.dtype != TPU_I32)
    return tpu_error(TPU_E_INVALID, "linalg.lu_solve: pivots should be a Tensor of scalar type Int");
  int left = (int)tpulw__int(b, "left", 1), adj = (int)tpulw__int(b, "adjoint", 0);
  int dt = B->view.dtype;
  b->out_rule = LW_OUT_SAME;
  tpuir_val lu = ct_arg(b, LU), xb = ct_arg(b, B);
  tpuir_val pv = tpulw__tensor(b, piv);
  tpulw__shape sl = tpulw__info(b, lu), sb = tpulw__info(b, xb), sp = tpulw__info(b, pv);
  int64_t n = sl.sizes[sl.ndim - 1];
  if ((left ? sb.sizes[sb.ndim - 2] : sb.sizes[sb.ndim - 1]) != n)
    return tpu_error(TPU_E_INVALID,
                     "linalg.lu_solve: Incompatible shapes of A and B for the equation "
                     "%s (%lldx%lld and %lldx%lld)",
                     left ? "AX = B" : "XA = B", (long long)n, (long long)n,
                     (long long)sb.sizes[sb.ndim - 2], (long long)sb.sizes[sb.ndim - 1]);
  if (sp.ndim != sl.ndim - 1 || sp.sizes[sp.ndim - 1] != n)
    return tpu_error(TPU_E_INVALID,
                     "linalg.lu_solve: Expected LU.shape[:-1] and pivots.shape to be the "
                     "same");
  int nb;
  int64_t bs[TPU_MAX_DIMS];
  if ((rc = batch_shape(sb.ndim - 2, sb.sizes, sl.ndim - 2, sl.sizes, &nb, bs))) return rc;
  lu = bcast_batch(b, lu, 2, nb, bs);
  xb = bcast_batch(b, xb, 2, nb, bs);
  tpuir_val perm = tpuir_lu_pivots_to_perm(b->g, bcast_batch(b, pv, 1, nb, bs), n);
  b->sync = 1;
  return res_f(b, lu_solve_any(b, lu, perm, xb, left, adj), dt);
}

static int inv_fn(tpulw__b *b) {
  const tpulw_tensor *A = targ(b, "A");
  int rc = check_mat(A, "linalg.inv", "A", 1, 1, 1, "lu_cpu");
  if (rc) return rc;
  if ((rc = no_check_errors(b, "linalg_inv_ex"))) return rc;
  int dt = A->view.dtype;
  b->out_rule = LW_OUT_SAME;
  tpuir_val x = ct_arg(b, A);
  tpulw__shape s = tpulw__info(b, x);
  int nb;
  int64_t bs[TPU_MAX_DIMS];
  batch_of(&s, 2, &nb, bs);
  int64_t n = s.sizes[s.ndim - 1];
  tpuir_val lu = tpuir_lu(b->g, x, TPUIR_LU_PACKED), perm = tpuir_lu(b->g, x, TPUIR_LU_PERM);
  tpuir_val inv = lu_solve_left(b, lu, perm, eye(b, CT, nb, bs, n, n), 0);
  if ((rc = res_f(b, inv, dt))) return rc;
  return tpulw__result(b, tpuir_lu(b->g, x, TPUIR_LU_INFO));
}

static int solve_fn(tpulw__b *b) {
  const tpulw_tensor *A = targ(b, "A"), *B = targ(b, "B");
  const char *fname = "linalg.solve";
  int rc = check_mat(A, fname, "A", 1, 1, 0, "lu_cpu");
  if (rc) return rc;
  if (!B) return tpu_error(TPU_E_UNSUPPORTED, "solve: no B");
  if (B->view.dtype != A->view.dtype)
    return tpu_error(TPU_E_INVALID,
                     "linalg.solve: Expected A and B to have the same dtype, but found "
                     "A of type %s and B of type %s instead",
                     tpulw__torch_name(A->view.dtype), tpulw__torch_name(B->view.dtype));
  if ((rc = no_check_errors(b, "_linalg_solve_ex"))) return rc;
  int left = (int)tpulw__int(b, "left", 1), dt = A->view.dtype;
  b->out_rule = LW_OUT_SAME;
  tpuir_val xa = ct_arg(b, A), xb = ct_arg(b, B);
  tpulw__shape sa = tpulw__info(b, xa), sb = tpulw__info(b, xb);
  /* vector rhs: B.dim() == 1 or B.shape == A.shape[:-1] */
  int vec = sb.ndim == 1;
  if (sb.ndim == sa.ndim - 1) {
    vec = 1;
    for (int i = 0; i < sb.ndim; i++)
      if (sb.sizes[i] != sa.sizes[i]) vec = 0;
  }
  int64_t n = sa.sizes[sa.ndim - 1];
  if (vec) {
    int64_t sz[TPU_MAX_DIMS];
    memcpy(sz, sb.sizes, sizeof sz);
    sz[sb.ndim] = 1;
    xb = tpulw__reshape(b, xb, sb.ndim + 1, sz);
    sb = tpulw__info(b, xb);
  }
  if (sb.ndim < 2 || (left ? sb.sizes[sb.ndim - 2] : sb.sizes[sb.ndim - 1]) != n)
    return tpu_error(TPU_E_INVALID,
                     "linalg.solve: Incompatible shapes of A and B for the equation %s "
                     "(%lldx%lld and %lldx%lld)",
                     left ? "AX = B" : "XA = B", (long long)n, (long long)n,
                     (long long)(sb.ndim >= 2 ? sb.sizes[sb.ndim - 2] : 0),
                     (long long)sb.sizes[sb.ndim - 1]);
  int nb;
  int64_t bs[TPU_MAX_DIMS];
  if ((rc = batch_shape(sb.ndim - 2, sb.sizes, sa.ndim - 2, sa.sizes, &nb, bs))) return rc;
  tpuir_val lu = tpuir_lu(b->g, xa, TPUIR_LU_PACKED), perm = tpuir_lu(b->g, xa, TPUIR_LU_PERM);
  tpuir_val x = lu_solve_any(b, bcast_batch(b, lu, 2, nb, bs), bcast_batch(b, perm, 1, nb, bs),
                             bcast_batch(b, xb, 2, nb, bs), left, 0);
  if (vec) {
    tpulw__shape sx = tpulw__info(b, x);
    x = tpulw__reshape(b, x, sx.ndim - 1, sx.sizes);
  }
  if ((rc = res_f(b, x, dt))) return rc;
  if ((rc = res_f(b, lu, dt))) return rc;
  if ((rc = tpulw__result(b, tpuir_lu(b->g, xa, TPUIR_LU_PIVOTS)))) return rc;
  return tpulw__result(b, tpuir_lu(b->g, xa, TPUIR_LU_INFO));
}

/* sign of the row permutation from LAPACK pivots: (-1)^(#piv[i] != i+1) */
static tpuir_val perm_sign(tpulw__b *b, tpuir_val piv) {
  tpulw__shape p = tpulw__info(b, piv);
  tpuir_val io = tpulw__bin_c(b, TPUIR_ADD, tpuir_iota(b->g, TPU_I32, p.ndim, p.sizes, p.ndim - 1), 1);
  tpuir_val sw = tpulw__bin(b, TPUIR_NE, piv, io);
  tpuir_val f = tpulw__sel(b, sw, tpulw__const(b, CT, -1.0), tpulw__const(b, CT, 1.0));
  int64_t last = p.ndim - 1;
  return tpuir_reduce(b->g, TPUIR_RED_PROD, tpulw__bcast(b, f, p.ndim, p.sizes), 1, &last);
}

static int det_fn(tpulw__b *b) {
  int slog = b->op == S_SLOGDET;
  const tpulw_tensor *A = targ(b, "A");
  int rc = check_mat(A, slog ? "linalg.slogdet" : "linalg.det", "A", 1, 1, slog, "lu_cpu");
  if (rc) return rc;
  int dt = A->view.dtype;
  b->out_rule = LW_OUT_SAME;
  tpuir_val x = ct_arg(b, A);
  /* like CPU: a contiguous A is factored as A^T (det(A^T) = det(A)); the
   * backward formulas read this LU */
  if (tpu_view_is_contiguous(&A->view)) x = mT(b, x);
  tpuir_val lu = tpuir_lu(b->g, x, TPUIR_LU_PACKED), piv = tpuir_lu(b->g, x, TPUIR_LU_PIVOTS);
  LW_TRY(lu);
  tpuir_val d = diag(b, lu), sg = perm_sign(b, piv);
  tpulw__shape ds = tpulw__info(b, d);
  int64_t last = ds.ndim - 1;
  if (!slog) {
    tpuir_val det = tpulw__bin(b, TPUIR_MUL, sg, tpuir_reduce(b->g, TPUIR_RED_PROD, d, 1, &last));
    if ((rc = tpulw__result_as(b, det, dt))) return rc;
  } else {
    tpuir_val s = tpulw__bin(b, TPUIR_MUL, sg,
                         tpuir_reduce(b->g, TPUIR_RED_PROD, tpulw__un(b, TPUIR_SIGN, d), 1, &last));
    tpuir_val la = tpuir_reduce(b->g, TPUIR_RED_SUM, tpulw__un(b, TPUIR_LOG, tpulw__un(b, TPUIR_ABS, d)),
                                1, &last);
    if ((rc = tpulw__result_as(b, s, dt))) return rc;
    if ((rc = tpulw__result_as(b, la, dt))) return rc;
  }
  if ((rc = res_f(b, lu, dt))) return rc;
  return tpulw__result(b, piv);
}

/* ---- QR family ---------------------------------------------------------- */

static int geqrf_fn(tpulw__b *b) {
  const tpulw_tensor *A = targ(b, "self");
  int rc = check_mat(A, "geqrf", "input", 0, 0, 0, "geqrf_cpu");
  if (rc) return rc;
  int dt = A->view.dtype;
  b->out_rule = LW_OUT_SAME;
  tpuir_val x = ct_arg(b, A);
  if ((rc = res_f(b, tpuir_geqrf(b->g, x, TPUIR_QR_PACKED), dt))) return rc;
  return tpulw__result_as(b, tpuir_geqrf(b->g, x, TPUIR_QR_TAU), dt);
}

static int hh_fn(tpulw__b *b) {
  const tpulw_tensor *A = targ(b, "input"), *tau = targ(b, "tau");
  const char *fname = "torch.linalg.householder_product";
  int rc = check_mat(A, fname, "input", 0, 0, 0, "orgqr_cpu");
  if (rc) return rc;
  if (!tau) return tpu_error(TPU_E_UNSUPPORTED, "householder_product: no tau");
  const tpu_view *va = &A->view, *vt = &tau->view;
  if (vt->ndim < 1 || va->ndim - vt->ndim != 1)
    return tpu_error(TPU_E_INVALID,
                     "torch.linalg.householder_product: input.dim() - tau.dim() must be "
                     "equal to 1 but got: %d",
                     va->ndim - vt->ndim);
  int64_t m = va->sizes[va->ndim - 2], n = va->sizes[va->ndim - 1], k = vt->sizes[vt->ndim - 1];
  if (m < n)
    return tpu_error(TPU_E_INVALID,
                     "torch.linalg.householder_product: input.shape[-2] must be greater "
                     "than or equal to input.shape[-1]");
  if (n < k)
    return tpu_error(TPU_E_INVALID,
                     "torch.linalg.householder_product: input.shape[-1] must be greater "
                     "than or equal to tau.shape[-1]");
  for (int i = 0; i < vt->ndim - 1; i++)
    if (va->sizes[i] != vt->sizes[i])
      return tpu_error(TPU_E_INVALID,
                       "torch.linalg.householder_product: Expected batch dimensions of "
                       "tau to be equal to input.shape[:-2], but got %lld",
                       (long long)vt->sizes[i]);
  if (vt->dtype != va->dtype)
    return tpu_error(TPU_E_INVALID,
                     "torch.linalg.householder_product: tau dtype %s does not match input "
                     "dtype %s",
                     tpulw__torch_name(vt->dtype), tpulw__torch_name(va->dtype));
  int dt = va->dtype;
  b->out_rule = LW_OUT_SAME;
  tpuir_val q = tpuir_householder_product(b->g, ct_arg(b, A),
                                          ct_arg(b, tau));
  return res_f(b, q, dt);
}

/* full Q [.., r, r] of the reflectors in a [.., r, c] (c <= r or sliced),
 * tau [.., t] */
static tpuir_val full_q(tpulw__b *b, tpuir_val a, tpuir_val tau, int64_t r) {
  tpulw__shape s = tpulw__info(b, a);
  int64_t c = s.sizes[s.ndim - 1];
  if (c > r) a = sub(b, a, 0, r, 0, r);
  a = pad_to(b, a, r, r);
  tpulw__shape ts = tpulw__info(b, tau);
  if (ts.sizes[ts.ndim - 1] > r) {
    int64_t st[TPU_MAX_DIMS] = {0}, li[TPU_MAX_DIMS], sd[TPU_MAX_DIMS];
    for (int i = 0; i < ts.ndim; i++) { li[i] = ts.sizes[i]; sd[i] = 1; }
    li[ts.ndim - 1] = r;
    tau = tpuir_slice(b->g, tau, st, li, sd);
  }
  tau = pad_last(b, tau, r);
  return tpuir_householder_product(b->g, a, tau);
}

static int ormqr_fn(tpulw__b *b) {
  const tpulw_tensor *A = targ(b, "self"), *tau = targ(b, "input2"), *C = targ(b, "input3");
  const tpulw_tensor *A0 = tpulw__tensor_arg(b, "self"), *C0 = tpulw__tensor_arg(b, "input3");
  if (A0 && (A0->device < 0 || A0->view.ndim < 2))
    return tpu_error(TPU_E_INVALID, "torch.ormqr: input must have at least 2 dimensions.");
  if (C0 && (C0->device < 0 || C0->view.ndim < 2))
    return tpu_error(TPU_E_INVALID, "torch.ormqr: other must have at least 2 dimensions.");
  if (!A || !C || !tau) return tpu_error(TPU_E_UNSUPPORTED, "ormqr: missing tensor");
  int left = (int)tpulw__int(b, "left", 1), trans = (int)tpulw__int(b, "transpose", 0);
  const tpu_view *va = &A->view, *vt = &tau->view, *vc = &C->view;
  if (va->ndim != vc->ndim)
    return tpu_error(TPU_E_INVALID,
                     "torch.ormqr: input.dim() must be equal to other.dim(), but got "
                     "input.dim() = %d and other.dim() = %d",
                     va->ndim, vc->ndim);
  if (vt->ndim != va->ndim - 1)
    return tpu_error(TPU_E_INVALID,
                     "torch.ormqr: input.dim() - tau.dim() must be equal to 1 but got: %d",
                     va->ndim - vt->ndim);
  int64_t mn = left ? vc->sizes[vc->ndim - 2] : vc->sizes[vc->ndim - 1];
  if (va->sizes[va->ndim - 2] != mn)
    return tpu_error(TPU_E_INVALID,
                     "torch.ormqr: other.shape[%d] must be equal to input.shape[-2] but "
                     "got other.shape[%d] = %lld and input.shape[-2] = %lld",
                     left ? -2 : -1, left ? -2 : -1, (long long)mn,
                     (long long)va->sizes[va->ndim - 2]);
  int64_t an = va->sizes[va->ndim - 1];
  if (vt->ndim < 1 || vt->sizes[vt->ndim - 1] != (mn < an ? mn : an))
    return tpu_error(TPU_E_INVALID,
                     "torch.ormqr: tau.shape[-1] must be equal to min(other.shape[-2], "
                     "input.shape[-1])");
  if (vt->dtype != va->dtype || vc->dtype != va->dtype)
    return tpu_error(TPU_E_INVALID,
                     "torch.ormqr: Expected input, tau and other to have the same dtype");
  for (int i = 0; i < va->ndim - 2; i++)
    if (va->sizes[i] != vc->sizes[i] || va->sizes[i] != vt->sizes[i])
      return tpu_error(TPU_E_INVALID,
                       "torch.ormqr: Expected batch dimensions of input, tau and other to "
                       "be equal");
  /* CPU checks the shapes first, then the dtype */
  int rc = check_mat(A, "ormqr", "input", 0, 0, 0, "ormqr_cpu");
  if (rc) return rc;
  if ((rc = check_mat(C, "ormqr", "other", 0, 0, 0, "ormqr_cpu"))) return rc;
  int dt = vc->dtype;
  b->out_rule = LW_OUT_SAME;
  tpuir_val a = ct_arg(b, A), t = ct_arg(b, tau);
  tpuir_val c = ct_arg(b, C);
  tpuir_val Q = full_q(b, a, t, mn);
  if (trans) Q = mT(b, Q);
  return res_f(b, left ? mm(b, Q, c) : mm(b, c, Q), dt);
}

static int qr_fn(tpulw__b *b) {
  const tpulw_tensor *A = targ(b, "A");
  int rc = check_mat(A, "linalg.qr", "A", 0, 1, 0, "geqrf_cpu");
  if (rc) return rc;
  const char *mode = tpulw__str(b, "mode");
  if (!mode) mode = "reduced";
  int complete = !strcmp(mode, "complete"), ronly = !strcmp(mode, "r");
  if (!complete && !ronly && strcmp(mode, "reduced"))
    return tpu_error(TPU_E_INVALID,
                     "qr received unrecognized mode '%s' but expected one of 'reduced' "
                     "(default), 'r', or 'complete'",
                     mode);
  int dt = A->view.dtype;
  b->out_rule = LW_OUT_SAME;
  tpuir_val x = ct_arg(b, A);
  tpulw__shape s = tpulw__info(b, x);
  int64_t m = s.sizes[s.ndim - 2], n = s.sizes[s.ndim - 1], k = m < n ? m : n;
  tpuir_val pk = tpuir_geqrf(b->g, x, TPUIR_QR_PACKED), tau = tpuir_geqrf(b->g, x, TPUIR_QR_TAU);
  LW_TRY(pk);
  tpuir_val Q, R;
  int64_t z = 0;
  if (ronly) {
    Q = tpulw__full(b, CT, 1, &z, 0);
    R = tri(b, sub(b, pk, 0, k, 0, n), 0, 0);
  } else if (complete) {
    Q = full_q(b, pk, tau, m);
    R = tri(b, pk, 0, 0);
  } else {
    Q = tpuir_householder_product(b->g, sub(b, pk, 0, m, 0, k), tau);
    R = tri(b, sub(b, pk, 0, k, 0, n), 0, 0);
  }
  if ((rc = res_f(b, Q, dt))) return rc;
  return res_f(b, R, dt);
}

static int lstsq_fn(tpulw__b *b) {
  const tpulw_tensor *A = targ(b, "self"), *B = targ(b, "b");
  const char *fname = "torch.linalg.lstsq";
  if (!A || !B) return tpu_error(TPU_E_UNSUPPORTED, "lstsq: missing tensor");
  if ((A->view.dtype != TPU_F32 && A->view.dtype != TPU_F64) ||
      (B->view.dtype != TPU_F32 && B->view.dtype != TPU_F64))
    return tpu_error(TPU_E_INVALID,
                     "This function doesn't handle types other than float and double");
  int rc = check_mat(A, fname, "A", 0, 1, 1, "-");
  if (rc) return rc;
  if (B->view.dtype != A->view.dtype)
    return tpu_error(TPU_E_INVALID,
                     "torch.linalg.lstsq: Expected input and other to have the same "
                     "dtype, but got input's dtype %s and other's dtype %s",
                     tpulw__torch_name(A->view.dtype), tpulw__torch_name(B->view.dtype));
  const char *drv = tpulw__str(b, "driver");
  if (!drv) drv = "gelsy";
  int gels = !strcmp(drv, "gels");
  int svdd = !strcmp(drv, "gelsd") || !strcmp(drv, "gelss");
  if (!gels && !svdd && strcmp(drv, "gelsy")) {
    return tpu_error(TPU_E_INVALID,
                     "torch.linalg.lstsq: parameter `driver` should be one of (gels, "
                     "gelsy, gelsd, gelss)");
  }
  int dt = A->view.dtype;
  b->out_rule = LW_OUT_SAME;
  tpuir_val xa = ct_arg(b, A), xb = ct_arg(b, B);
  tpulw__shape sa = tpulw__info(b, xa), sb = tpulw__info(b, xb);
  int vec = sb.ndim == sa.ndim - 1;
  int64_t m = sa.sizes[sa.ndim - 2], n = sa.sizes[sa.ndim - 1];
  if (vec) {
    int64_t sz[TPU_MAX_DIMS];
    memcpy(sz, sb.sizes, sizeof sz);
    sz[sb.ndim] = 1;
    xb = tpulw__reshape(b, xb, sb.ndim + 1, sz);
    sb = tpulw__info(b, xb);
  }
  if (sb.ndim < 2 || sb.sizes[sb.ndim - 2] != m)
    return tpu_error(TPU_E_INVALID,
                     "torch.linalg.lstsq: input.size(-2) should match other.size(-2)");
  int nb;
  int64_t bs[TPU_MAX_DIMS];
  if ((rc = batch_shape(sb.ndim - 2, sb.sizes, sa.ndim - 2, sa.sizes, &nb, bs))) return rc;
  xa = bcast_batch(b, xa, 2, nb, bs);
  xb = bcast_batch(b, xb, 2, nb, bs);
  tpuir_val x, sv = -1, rank = -1;
  int64_t z = 0, kk = m < n ? m : n;
  if (svdd) { /* pseudo-inverse from the SVD (rank-revealing, like gelsd/gelss) */
    double eps = dt == TPU_F64 ? 2.220446049250313e-16 : 1.1920928955078125e-07;
    double rcond = tpulw__none(b, "rcond") ? eps * (double)(m > n ? m : n) : tpulw__float(b, "rcond", 0);
    tpuir_val pk = tpuir_svd(b->g, xa, 0, 1, 0);
    LW_TRY(pk);
    int64_t st[TPU_MAX_DIMS] = {0}, li[TPU_MAX_DIMS], sd[TPU_MAX_DIMS], sz[TPU_MAX_DIMS];
    for (int i = 0; i < nb; i++) { li[i] = bs[i]; sd[i] = 1; sz[i] = bs[i]; }
    sd[nb] = 1;
    st[nb] = 0; li[nb] = kk;
    sv = tpuir_slice(b->g, pk, st, li, sd); /* [.., k] */
    st[nb] = kk; li[nb] = kk + m * kk;
    sz[nb] = m; sz[nb + 1] = kk;
    tpuir_val U = tpulw__reshape(b, tpuir_slice(b->g, pk, st, li, sd), nb + 2, sz);
    st[nb] = kk + m * kk; li[nb] = kk + m * kk + kk * n;
    sz[nb] = kk; sz[nb + 1] = n;
    tpuir_val Vh = tpulw__reshape(b, tpuir_slice(b->g, pk, st, li, sd), nb + 2, sz);
    int64_t last = nb;
    tpuir_val smax = tpuir_reduce(b->g, TPUIR_RED_MAX, sv, 1, &last);
    int64_t sz1[TPU_MAX_DIMS];
    for (int i = 0; i < nb; i++) sz1[i] = bs[i];
    sz1[nb] = 1;
    tpuir_val thr = tpulw__reshape(b, tpulw__bin_c(b, TPUIR_MUL, smax, rcond), nb + 1, sz1);
    tpuir_val keep = tpulw__bin(b, TPUIR_GT, sv, thr);
    tpuir_val sinv = tpulw__sel(b, keep, tpulw__bin(b, TPUIR_DIV, tpulw__const(b, CT, 1.0), sv), tpulw__const(b, CT, 0.0));
    sz1[nb] = kk;
    sz1[nb + 1] = 1;
    tpuir_val y = tpulw__bin(b, TPUIR_MUL, mm(b, mT(b, U), xb), tpulw__reshape(b, sinv, nb + 2, sz1));
    x = mm(b, mT(b, Vh), y);
    rank = tpuir_reduce(b->g, TPUIR_RED_SUM, tpulw__convert(b, keep, TPU_I64), 1, &last);
  } else if (m >= n) { /* R x = (Q^T b)[:n] */
    tpuir_val pk = tpuir_geqrf(b->g, xa, TPUIR_QR_PACKED), tau = tpuir_geqrf(b->g, xa, TPUIR_QR_TAU);
    tpuir_val Q = tpuir_householder_product(b->g, pk, tau);
    tpuir_val qtb = mm(b, mT(b, Q), xb);
    x = tpuir_triangular_solve(b->g, sub(b, pk, 0, n, 0, n), qtb, 1, 0, 0, 0);
  } else { /* A^T = Q R: x = Q R^{-T} b */
    tpuir_val at = mT(b, xa);
    tpuir_val pk = tpuir_geqrf(b->g, at, TPUIR_QR_PACKED), tau = tpuir_geqrf(b->g, at, TPUIR_QR_TAU);
    tpuir_val Q = tpuir_householder_product(b->g, pk, tau);
    tpuir_val y = tpuir_triangular_solve(b->g, sub(b, pk, 0, m, 0, m), xb, 1, 0, 0, 1);
    x = mm(b, Q, y);
  }
  LW_TRY(x);
  tpuir_val res;
  if (!strcmp(drv, "gelsy") ? 0 : m > n) { /* assumes full rank (CPU: empty otherwise) */
    tpuir_val r = tpulw__bin(b, TPUIR_SUB, mm(b, xa, x), xb);
    tpulw__shape rs = tpulw__info(b, r);
    int64_t d = rs.ndim - 2;
    res = tpuir_reduce(b->g, TPUIR_RED_SUM, tpulw__bin(b, TPUIR_MUL, r, r), 1, &d);
  } else {
    res = tpulw__full(b, CT, 1, &z, 0);
  }
  if (vec) {
    tpulw__shape sx = tpulw__info(b, x);
    x = tpulw__reshape(b, x, sx.ndim - 1, sx.sizes);
  }
  if (rank < 0)
    rank = gels ? tpulw__full(b, TPU_I64, 1, &z, 0) : tpulw__full(b, TPU_I64, nb, bs, (double)kk);
  if ((rc = tpulw__result_as(b, x, dt))) return rc;
  if ((rc = tpulw__result_as(b, res, dt))) return rc;
  if ((rc = tpulw__result(b, rank))) return rc;
  return tpulw__result_as(b, svdd ? sv : tpulw__full(b, CT, 1, &z, 0), dt);
}

/* ---- matrix exponential ------------------------------------------------- */

#define MEXP_MAX_SQUARINGS 40

static int mexp_fn(tpulw__b *b) {
  const tpulw_tensor *A = targ(b, "self");
  const char *fname = "linalg.matrix_exp";
  if (!A) return tpu_error(TPU_E_UNSUPPORTED, "matrix_exp: no input");
  int dt = A->view.dtype;
  if (!tpu_dtype_is_float(dt))
    return tpu_error(TPU_E_INVALID,
                     "%s: Expected a floating point or complex tensor as input. Got %s",
                     fname, tpulw__torch_name(dt));
  const tpu_view *v = &A->view;
  if (v->ndim < 2 || v->sizes[v->ndim - 1] != v->sizes[v->ndim - 2])
    return tpu_error(TPU_E_INVALID,
                     "%s: A must be batches of square matrices, but they are %lld by %lld "
                     "matrices",
                     fname, (long long)(v->ndim >= 2 ? v->sizes[v->ndim - 2] : 0),
                     (long long)v->sizes[v->ndim ? v->ndim - 1 : 0]);
  b->out_rule = LW_OUT_SAME;
  tpuir_val x = ct_arg(b, A);
  tpulw__shape s = tpulw__info(b, x);
  int nb;
  int64_t bs[TPU_MAX_DIMS];
  batch_of(&s, 2, &nb, bs);
  int64_t n = s.sizes[s.ndim - 1];
  if (tpulw__numel(&s) == 0) return tpulw__result_as(b, x, dt);
  /* 1-norm (max column sum) -> s = max(0, ceil(log2(norm / theta13))) */
  int64_t rd = s.ndim - 2, cd = s.ndim - 1;
  tpuir_val colsum = tpuir_reduce(b->g, TPUIR_RED_SUM, tpulw__un(b, TPUIR_ABS, x), 1, &rd);
  tpuir_val nrm = tpuir_reduce(b->g, TPUIR_RED_MAX, colsum, 1, &rd); /* [batch] */
  (void)cd;
  const double theta13 = 5.371920351148152;
  tpuir_val sc = tpulw__un(b, TPUIR_CEIL,
                       tpulw__bin_c(b, TPUIR_MUL, tpulw__un(b, TPUIR_LOG, tpulw__bin_c(b, TPUIR_MUL, nrm, 1.0 / theta13)),
                                1.0 / M_LN2));
  sc = tpulw__bin_c(b, TPUIR_MIN, tpulw__bin_c(b, TPUIR_MAX, sc, 0.0), (double)MEXP_MAX_SQUARINGS);
  /* NaN/inf norms: no squaring (the result is NaN/inf anyway) */
  sc = tpulw__sel(b, tpulw__un(b, TPUIR_IS_NAN, sc), tpulw__const(b, CT, 0.0), sc);
  tpuir_val scale = tpulw__un(b, TPUIR_EXP, tpulw__bin_c(b, TPUIR_MUL, sc, -M_LN2));
  int64_t bsz[TPU_MAX_DIMS];
  memcpy(bsz, bs, sizeof bsz);
  bsz[nb] = 1;
  bsz[nb + 1] = 1;
  tpuir_val sc2 = tpulw__reshape(b, sc, nb + 2, bsz);
  tpuir_val As = tpulw__bin(b, TPUIR_MUL, x, tpulw__reshape(b, scale, nb + 2, bsz));
  static const double c[14] = {64764752532480000.0, 32382376266240000.0, 7771770303897600.0,
                               1187353796428800.0,  129060195264000.0,   10559470521600.0,
                               670442572800.0,      33522128640.0,       1323241920.0,
                               40840800.0,          960960.0,            16380.0,
                               182.0,               1.0};
  tpuir_val I = eye(b, CT, nb, bs, n, n);
  tpuir_val A2 = mm(b, As, As), A4 = mm(b, A2, A2), A6 = mm(b, A4, A2);
#define LC(v, k) tpulw__bin_c(b, TPUIR_MUL, v, c[k])
#define ADD(p, q) tpulw__bin(b, TPUIR_ADD, p, q)
  tpuir_val u1 = ADD(ADD(LC(A6, 13), LC(A4, 11)), LC(A2, 9));
  tpuir_val u2 = ADD(ADD(ADD(LC(A6, 7), LC(A4, 5)), LC(A2, 3)), LC(I, 1));
  tpuir_val U = mm(b, As, ADD(mm(b, A6, u1), u2));
  tpuir_val v1 = ADD(ADD(LC(A6, 12), LC(A4, 10)), LC(A2, 8));
  tpuir_val v2 = ADD(ADD(ADD(LC(A6, 6), LC(A4, 4)), LC(A2, 2)), LC(I, 0));
  tpuir_val V = ADD(mm(b, A6, v1), v2);
#undef LC
#undef ADD
  tpuir_val P = tpulw__bin(b, TPUIR_SUB, V, U), Qm = tpulw__bin(b, TPUIR_ADD, V, U);
  tpuir_val lu = tpuir_lu(b->g, P, TPUIR_LU_PACKED), perm = tpuir_lu(b->g, P, TPUIR_LU_PERM);
  tpuir_val R = lu_solve_left(b, lu, perm, Qm, 0);
  LW_TRY(R);
  /* squarings: at most MEXP_MAX_SQUARINGS, each taken where i < s */
  double smax_all = MEXP_MAX_SQUARINGS;
  (void)smax_all;
  for (int i = 0; i < MEXP_MAX_SQUARINGS; i++) {
    tpuir_val take = tpulw__bin(b, TPUIR_GT, sc2, tpulw__const(b, CT, (double)i));
    R = tpulw__sel(b, take, mm(b, R, R), R);
    LW_TRY(R);
  }
  return tpulw__result_as(b, R, dt);
}

/* ---- LDL^T (Bunch-Kaufman) ---------------------------------------------- */

static int ldl_fn(tpulw__b *b) {
  const tpulw_tensor *A = targ(b, "self");
  int rc = check_mat(A, "torch.linalg.ldl_factor_ex", "A", 1, 1, 0, "ldl_factor_kernel_cpu");
  if (rc) return rc;
  if ((rc = no_check_errors(b, "linalg_ldl_factor_ex"))) return rc;
  int dt = A->view.dtype;
  b->out_rule = LW_OUT_SAME;
  tpuir_val x = ct_arg(b, A);
  if ((rc = res_f(b, tpuir_ldl(b->g, x, TPUIR_LDL_LD), dt))) return rc;
  if ((rc = tpulw__result(b, tpuir_ldl(b->g, x, TPUIR_LDL_PIVOTS)))) return rc;
  return tpulw__result(b, tpuir_ldl(b->g, x, TPUIR_LDL_INFO));
}

static int ldl_solve_fn(tpulw__b *b) {
  const tpulw_tensor *LD = targ(b, "LD"), *piv = targ(b, "pivots"), *B = targ(b, "B");
  const char *fname = "torch.linalg.ldl_solve";
  int rc = check_mat(LD, fname, "LD", 1, 1, 0, "ldl_solve_kernel_cpu");
  if (rc) return rc;
  if ((rc = check_mat(B, fname, "B", 0, 1, 0, "ldl_solve_kernel_cpu"))) return rc;
  if ((rc = check_same_dtype(B, LD, fname, "B", "LD"))) return rc;
  if (!piv || piv->view.dtype != TPU_I32)
    return tpu_error(TPU_E_INVALID, "torch.linalg.ldl_solve: Expected pivots to be integers. Got %s",
                     piv ? tpulw__torch_name(piv->view.dtype) : "None");
  int dt = B->view.dtype;
  b->out_rule = LW_OUT_SAME;
  tpuir_val ld = ct_arg(b, LD), xb = ct_arg(b, B);
  tpuir_val pv = tpulw__tensor(b, piv);
  tpulw__shape sl = tpulw__info(b, ld), sb = tpulw__info(b, xb), sp = tpulw__info(b, pv);
  int64_t n = sl.sizes[sl.ndim - 1];
  if (sp.ndim != sl.ndim - 1 || sp.sizes[sp.ndim - 1] != n)
    return tpu_error(TPU_E_INVALID,
                     "torch.linalg.ldl_solve: Expected LD.shape[:-1] and pivots.shape to be "
                     "the same");
  if (sb.sizes[sb.ndim - 2] != n)
    return tpu_error(TPU_E_INVALID,
                     "torch.linalg.ldl_solve: Incompatible shapes of A and B for the equation "
                     "AX = B (%lldx%lld and %lldx%lld)",
                     (long long)n, (long long)n, (long long)sb.sizes[sb.ndim - 2],
                     (long long)sb.sizes[sb.ndim - 1]);
  int nb;
  int64_t bs[TPU_MAX_DIMS];
  if ((rc = batch_shape(sb.ndim - 2, sb.sizes, sl.ndim - 2, sl.sizes, &nb, bs))) return rc;
  tpuir_val x = tpuir_ldl_solve(b->g, bcast_batch(b, ld, 2, nb, bs), bcast_batch(b, pv, 1, nb, bs),
                                bcast_batch(b, xb, 2, nb, bs));
  return res_f(b, x, dt);
}

/* ---- linalg_cross --------------------------------------------------------- */

/* linalg_cross(self, other, dim) (+ out=): both broadcast, size 3 at dim. */
static int cross_fn(tpulw__b *b) {
  const tpulw_tensor *a = tpulw__tpu_self(b), *o = tpulw__tensor_arg(b, "other");
  if (!a || !o || o->device < 0) return tpu_error(TPU_E_UNSUPPORTED, "linalg_cross: missing operand");
  if (a->view.ndim != o->view.ndim)
    return tpu_error(TPU_E_INVALID, "linalg.cross: inputs must have the same number of dimensions.");
  tpulw__opnd ops[2] = {tpulw__opnd_tensor(a), tpulw__opnd_tensor(o)};
  int dt = tpulw__result_type(2, ops);
  tpuir_val vs[2] = {tpulw__convert(b, tpulw__tensor(b, a), dt), tpulw__convert(b, tpulw__tensor(b, o), dt)};
  int nd = a->view.ndim, dim;
  int rc = tpulw__wrap_dim(tpulw__int(b, "dim", -1), nd, &dim);
  if (rc < 0) return rc;
  if (a->view.sizes[dim] != 3 || o->view.sizes[dim] != 3)
    return tpu_error(TPU_E_INVALID, "linalg.cross: inputs dimension %d must have length 3. Got %lld "
                     "and %lld", (int)tpulw__int(b, "dim", -1), (long long)a->view.sizes[dim],
                     (long long)o->view.sizes[dim]);
  if ((rc = tpulw__bcast_all(b, 2, vs)) < 0) return rc;
  tpulw__shape s = tpulw__info(b, vs[0]);
  if (tpulw__numel(&s) == 0) return tpulw__result(b, vs[0]);
  tpuir_val c[2][3];
  int64_t st[TPU_MAX_DIMS] = {0}, lim[TPU_MAX_DIMS], str[TPU_MAX_DIMS];
  for (int d = 0; d < nd; d++) {
    lim[d] = s.sizes[d];
    str[d] = 1;
  }
  for (int k = 0; k < 3; k++) {
    st[dim] = k;
    lim[dim] = k + 1;
    for (int j = 0; j < 2; j++) c[j][k] = tpuir_slice(b->g, vs[j], st, lim, str);
  }
  tpuir_val r[3];
  for (int k = 0; k < 3; k++) {
    int p = (k + 1) % 3, q = (k + 2) % 3;
    r[k] = tpulw__bin(b, TPUIR_SUB, tpulw__bin(b, TPUIR_MUL, c[0][p], c[1][q]),
                  tpulw__bin(b, TPUIR_MUL, c[0][q], c[1][p]));
    LW_TRY(r[k]);
  }
  return tpulw__result(b, tpuir_concat(b->g, 3, r, dim));
}

/* ---- table -------------------------------------------------------------- */

#define R2(n, fn, code) {n, fn, code}, {n ".out", fn, code}

const tpulw__row tpulw__rows_linalg_solve[] = {
    {"linalg_cholesky_ex", chol_fn, S_CHOL_EX},
    {"linalg_cholesky_ex.L", chol_fn, S_CHOL_EX},
    R2("cholesky", chol_fn, S_CHOL),
    R2("_cholesky_solve_helper", chol_solve_fn, S_CHOL_SOLVE),
    R2("cholesky_inverse", chol_inv_fn, S_CHOL_INV),
    {"triangular_solve", tri_fn, S_TRI_SOLVE},
    {"triangular_solve.X", tri_fn, S_TRI_SOLVE},
    R2("linalg_solve_triangular", tri_fn, S_SOLVE_TRI),
    R2("linalg_lu_factor_ex", lu_factor_fn, S_LU_FACTOR),
    R2("linalg_lu", lu_factor_fn, S_LU),
    R2("lu_unpack", lu_unpack_fn, S_LU_UNPACK),
    R2("linalg_lu_solve", lu_solve_fn, S_LU_SOLVE),
    {"linalg_inv_ex", inv_fn, S_INV},
    {"linalg_inv_ex.inverse", inv_fn, S_INV},
    {"_linalg_solve_ex", solve_fn, S_SOLVE},
    {"_linalg_solve_ex.result", solve_fn, S_SOLVE},
    {"_linalg_det", det_fn, S_DET},
    {"_linalg_det.result", det_fn, S_DET},
    {"_linalg_slogdet", det_fn, S_SLOGDET},
    {"_linalg_slogdet.sign", det_fn, S_SLOGDET},
    {"geqrf", geqrf_fn, S_GEQRF},
    {"geqrf.a", geqrf_fn, S_GEQRF},
    R2("linalg_householder_product", hh_fn, S_HH),
    R2("ormqr", ormqr_fn, S_ORMQR),
    R2("linalg_qr", qr_fn, S_QR),
    {"linalg_lstsq.out", lstsq_fn, S_LSTSQ},
    R2("linalg_matrix_exp", mexp_fn, S_MEXP),
    R2("linalg_ldl_factor_ex", ldl_fn, S_LDL),
    R2("linalg_ldl_solve", ldl_solve_fn, S_LDL_SOLVE),
    {"linalg_cross", cross_fn, 0},
    {"linalg_cross.out", cross_fn, 0},
};
const int tpulw__nrows_linalg_solve = sizeof tpulw__rows_linalg_solve / sizeof tpulw__rows_linalg_solve[0];

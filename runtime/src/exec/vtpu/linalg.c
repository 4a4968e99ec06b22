/* exec/vtpu/linalg.c - vTPU dense linear algebra nodes: CHOLESKY,
 * TRIANGULAR_SOLVE, LU, LU_PIVOTS_TO_PERM, GEQRF, HOUSEHOLDER_PRODUCT, LDL,
 * LDL_SOLVE (semantics in tpu_ir.h).
 *
 * Operands are first copied into contiguous row-major double buffers
 * (f32 and f64 alike compute in double), every batch element is factored
 * independently (batches split over the thread pool), the selected result
 * is gathered into a double buffer and finally converted into the node's
 * contiguous result (f32/f64, or int32 for pivots/info/permutations; those
 * are exact in double). The algorithms are LAPACK's unblocked ones
 * (potf2, getf2, geqr2 with dlarfg, org2r, sytf2, sytrs), so pivots, signs and tau follow
 * LAPACK's conventions.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "exec/vtpu/internal.h"

typedef struct la_job {
  const tpuir_node *n;
  int64_t nbatch;
  const double *x, *y, *z; /* operands (contiguous doubles) */
  int64_t xsz, ysz, zsz;   /* elements per batch element */
  double *out;           /* result, osz per batch element */
  int64_t osz;
  int64_t r, c, k;       /* sizes (meaning per op) */
  _Atomic int bad;       /* LU_PIVOTS_TO_PERM: a pivot out of range */
} la_job;

/* ---- kernels on one matrix (row-major, double) ------------------------ */

/* potf2 on the symmetric matrix whose lower triangle is in a (n x n, in
 * place: lower triangle becomes L). Returns info. */
static int chol_lower(double *a, int64_t n) {
  for (int64_t j = 0; j < n; j++) {
    double s = a[j * n + j];
    for (int64_t k = 0; k < j; k++) s -= a[j * n + k] * a[j * n + k];
    if (!(s > 0.0)) { /* also NaN */
      a[j * n + j] = s;
      return (int)(j + 1);
    }
    double d = sqrt(s);
    a[j * n + j] = d;
    for (int64_t i = j + 1; i < n; i++) {
      double t = a[i * n + j];
      for (int64_t k = 0; k < j; k++) t -= a[i * n + k] * a[j * n + k];
      a[i * n + j] = t / d;
    }
  }
  return 0;
}

/* getf2 on a (m x n) in place; piv (min(m,n), 1-based), perm (m).
 * Returns info. */
static int lu_factor(double *a, int64_t m, int64_t n, double *piv, double *perm) {
  int info = 0;
  int64_t k = m < n ? m : n;
  for (int64_t i = 0; i < m; i++) perm[i] = (double)i;
  for (int64_t j = 0; j < k; j++) {
    int64_t p = j;
    double best = fabs(a[j * n + j]);
    for (int64_t i = j + 1; i < m; i++) {
      double v = fabs(a[i * n + j]);
      if (v > best || (isnan(v) && !isnan(best))) {
        best = v;
        p = i;
      }
    }
    piv[j] = (double)(p + 1);
    if (a[p * n + j] != 0.0) {
      if (p != j) {
        for (int64_t c = 0; c < n; c++) {
          double t = a[j * n + c];
          a[j * n + c] = a[p * n + c];
          a[p * n + c] = t;
        }
        double t = perm[j];
        perm[j] = perm[p];
        perm[p] = t;
      }
      double d = a[j * n + j];
      for (int64_t i = j + 1; i < m; i++) a[i * n + j] /= d;
    } else if (info == 0) {
      info = (int)(j + 1);
    }
    for (int64_t i = j + 1; i < m; i++) {
      double l = a[i * n + j];
      if (l == 0.0) continue;
      for (int64_t c = j + 1; c < n; c++) a[i * n + c] -= l * a[j * n + c];
    }
  }
  return info;
}

/* geqr2 (dlarfg conventions) on a (m x n) in place; tau (min(m,n)). */
static void qr_factor(double *a, int64_t m, int64_t n, double *tau) {
  int64_t k = m < n ? m : n;
  for (int64_t i = 0; i < k; i++) {
    double alpha = a[i * n + i];
    double xn = 0.0, scale = 0.0;
    for (int64_t r = i + 1; r < m; r++) scale = fmax(scale, fabs(a[r * n + i]));
    if (scale > 0.0) {
      for (int64_t r = i + 1; r < m; r++) {
        double v = a[r * n + i] / scale;
        xn += v * v;
      }
      xn = scale * sqrt(xn);
    }
    if (xn == 0.0) {
      tau[i] = 0.0;
      continue;
    }
    double beta = hypot(alpha, xn);
    if (alpha >= 0.0) beta = -beta;
    tau[i] = (beta - alpha) / beta;
    double s = 1.0 / (alpha - beta);
    for (int64_t r = i + 1; r < m; r++) a[r * n + i] *= s;
    a[i * n + i] = beta;
    /* apply H = I - tau v v^T to a[i:m, i+1:n], v = [1; a[i+1:m, i]] */
    for (int64_t c = i + 1; c < n; c++) {
      double w = a[i * n + c];
      for (int64_t r = i + 1; r < m; r++) w += a[r * n + i] * a[r * n + c];
      w *= tau[i];
      a[i * n + c] -= w;
      for (int64_t r = i + 1; r < m; r++) a[r * n + c] -= w * a[r * n + i];
    }
  }
}

/* org2r: q (m x n) = first n columns of H_1...H_k from a (m x n), tau. */
static void householder(const double *a, const double *tau, int64_t m,
                        int64_t n, int64_t k, double *q) {
  for (int64_t r = 0; r < m; r++)
    for (int64_t c = 0; c < n; c++) q[r * n + c] = r == c ? 1.0 : 0.0;
  for (int64_t i = k - 1; i >= 0; i--) {
    double t = tau[i];
    if (t == 0.0) continue;
    for (int64_t c = 0; c < n; c++) {
      double w = q[i * n + c];
      for (int64_t r = i + 1; r < m; r++) w += a[r * n + i] * q[r * n + c];
      w *= t;
      q[i * n + c] -= w;
      for (int64_t r = i + 1; r < m; r++) q[r * n + c] -= w * a[r * n + i];
    }
  }
}

/* sytf2 (uplo = 'L', Bunch-Kaufman) on a (n x n, lower triangle read) in
 * place; piv (n, LAPACK ipiv as doubles). Returns info. */
static int ldl_factor(double *a, int64_t n, double *piv) {
  const double alpha = (1.0 + sqrt(17.0)) / 8.0;
  int info = 0;
#define A_(i, j) a[(i) * n + (j)]
  int64_t k = 0;
  while (k < n) {
    int64_t kstep = 1, kp = k, imax = k;
    double absakk = fabs(A_(k, k)), colmax = 0.0;
    if (k < n - 1) {
      imax = k + 1;
      for (int64_t i = k + 2; i < n; i++)
        if (fabs(A_(i, k)) > fabs(A_(imax, k))) imax = i;
      colmax = fabs(A_(imax, k));
    }
    if (fmax(absakk, colmax) == 0.0 || isnan(absakk)) {
      if (!info) info = (int)(k + 1);
      kp = k;
    } else {
      if (absakk >= alpha * colmax) {
        kp = k;
      } else {
        int64_t jmax = k; /* row imax, columns k..imax-1 */
        for (int64_t j = k + 1; j < imax; j++)
          if (fabs(A_(imax, j)) > fabs(A_(imax, jmax))) jmax = j;
        double rowmax = fabs(A_(imax, jmax));
        if (imax < n - 1) {
          int64_t jm = imax + 1;
          for (int64_t i = imax + 2; i < n; i++)
            if (fabs(A_(i, imax)) > fabs(A_(jm, imax))) jm = i;
          rowmax = fmax(rowmax, fabs(A_(jm, imax)));
        }
        if (absakk >= alpha * colmax * (colmax / rowmax)) {
          kp = k;
        } else if (fabs(A_(imax, imax)) >= alpha * rowmax) {
          kp = imax;
        } else {
          kp = imax;
          kstep = 2;
        }
      }
      int64_t kk = k + kstep - 1;
      if (kp != kk) {
        double t;
        for (int64_t i = kp + 1; i < n; i++) {
          t = A_(i, kk); A_(i, kk) = A_(i, kp); A_(i, kp) = t;
        }
        for (int64_t j = kk + 1; j < kp; j++) {
          t = A_(j, kk); A_(j, kk) = A_(kp, j); A_(kp, j) = t;
        }
        t = A_(kk, kk); A_(kk, kk) = A_(kp, kp); A_(kp, kp) = t;
        if (kstep == 2) {
          t = A_(k + 1, k); A_(k + 1, k) = A_(kp, k); A_(kp, k) = t;
        }
      }
      if (kstep == 1) {
        if (k < n - 1) {
          double d11 = 1.0 / A_(k, k);
          for (int64_t j = k + 1; j < n; j++) {
            double xj = A_(j, k);
            if (xj == 0.0) continue;
            for (int64_t i = j; i < n; i++) A_(i, j) -= d11 * A_(i, k) * xj;
          }
          for (int64_t i = k + 1; i < n; i++) A_(i, k) *= d11;
        }
      } else if (k < n - 2) {
        double d21 = A_(k + 1, k);
        double d11 = A_(k + 1, k + 1) / d21;
        double d22 = A_(k, k) / d21;
        double t = 1.0 / (d11 * d22 - 1.0);
        d21 = t / d21;
        for (int64_t j = k + 2; j < n; j++) {
          double wk = d21 * (d11 * A_(j, k) - A_(j, k + 1));
          double wkp1 = d21 * (d22 * A_(j, k + 1) - A_(j, k));
          for (int64_t i = j; i < n; i++) A_(i, j) -= A_(i, k) * wk + A_(i, k + 1) * wkp1;
          A_(j, k) = wk;
          A_(j, k + 1) = wkp1;
        }
      }
    }
    if (kstep == 1) {
      piv[k] = (double)(kp + 1);
    } else {
      piv[k] = -(double)(kp + 1);
      piv[k + 1] = -(double)(kp + 1);
    }
    k += kstep;
  }
  for (int64_t r = 0; r < n; r++)
    for (int64_t c = r + 1; c < n; c++) A_(r, c) = 0.0;
#undef A_
  return info;
}

/* sytrs (uplo = 'L'): b (n x m) overwritten by A^{-1} b. Pivots out of
 * range are clamped (unspecified result, never out of bounds). */
static void ldl_solve(const double *a, const double *pv, int64_t n, double *b, int64_t m) {
#define A_(i, j) a[(i) * n + (j)]
#define B_(i, j) b[(i) * m + (j)]
#define PIV(i) ((int64_t)pv[i])
#define SWAP_ROWS(r1, r2)                                                    \
  do {                                                                       \
    int64_t r1_ = (r1), r2_ = (r2);                                          \
    if (r1_ != r2_ && r2_ >= 0 && r2_ < n)                                   \
      for (int64_t j_ = 0; j_ < m; j_++) {                                   \
        double t_ = B_(r1_, j_); B_(r1_, j_) = B_(r2_, j_); B_(r2_, j_) = t_; \
      }                                                                      \
  } while (0)
  int64_t k = 0;
  while (k < n) {
    if (PIV(k) > 0) {
      SWAP_ROWS(k, PIV(k) - 1);
      for (int64_t i = k + 1; i < n; i++)
        for (int64_t j = 0; j < m; j++) B_(i, j) -= A_(i, k) * B_(k, j);
      for (int64_t j = 0; j < m; j++) B_(k, j) /= A_(k, k);
      k += 1;
    } else {
      if (k + 1 >= n) break;
      SWAP_ROWS(k + 1, -PIV(k) - 1);
      for (int64_t i = k + 2; i < n; i++)
        for (int64_t j = 0; j < m; j++) B_(i, j) -= A_(i, k) * B_(k, j) + A_(i, k + 1) * B_(k + 1, j);
      double akm1k = A_(k + 1, k);
      double akm1 = A_(k, k) / akm1k, ak = A_(k + 1, k + 1) / akm1k;
      double denom = akm1 * ak - 1.0;
      for (int64_t j = 0; j < m; j++) {
        double bkm1 = B_(k, j) / akm1k, bk = B_(k + 1, j) / akm1k;
        B_(k, j) = (ak * bkm1 - bk) / denom;
        B_(k + 1, j) = (akm1 * bk - bkm1) / denom;
      }
      k += 2;
    }
  }
  k = n - 1;
  while (k >= 0) {
    if (PIV(k) > 0) {
      for (int64_t j = 0; j < m; j++) {
        double s = B_(k, j);
        for (int64_t i = k + 1; i < n; i++) s -= A_(i, k) * B_(i, j);
        B_(k, j) = s;
      }
      SWAP_ROWS(k, PIV(k) - 1);
      k -= 1;
    } else {
      if (k < 1) break;
      for (int64_t j = 0; j < m; j++) {
        double s = B_(k, j), s1 = B_(k - 1, j);
        for (int64_t i = k + 1; i < n; i++) {
          s -= A_(i, k) * B_(i, j);
          s1 -= A_(i, k - 1) * B_(i, j);
        }
        B_(k, j) = s;
        B_(k - 1, j) = s1;
      }
      SWAP_ROWS(k, -PIV(k) - 1);
      k -= 2;
    }
  }
#undef SWAP_ROWS
#undef PIV
#undef B_
#undef A_
}

/* ---- per-batch drivers ------------------------------------------------- */

static void chol_range(void *ctx, int64_t b0, int64_t b1) {
  la_job *j = ctx;
  int64_t n = j->r;
  int lower = j->n->kind & 1, res = j->n->dim;
  double *w = malloc((size_t)(n * n > 0 ? n * n : 1) * sizeof(double));
  if (!w) { atomic_store(&j->bad, -1); return; }
  for (int64_t b = b0; b < b1; b++) {
    const double *x = j->x + b * j->xsz;
    /* lower-triangular copy of the referenced triangle */
    for (int64_t r = 0; r < n; r++)
      for (int64_t c = 0; c < n; c++)
        w[r * n + c] = c > r ? 0.0 : lower ? x[r * n + c] : x[c * n + r];
    int info = chol_lower(w, n);
    if (res == TPUIR_CHOL_INFO) {
      j->out[b] = info;
      continue;
    }
    double *o = j->out + b * j->osz;
    for (int64_t r = 0; r < n; r++)
      for (int64_t c = 0; c < n; c++) {
        double v = c > r ? 0.0 : w[r * n + c];
        if (info && c >= info - 1 && !(r == c && c == info - 1)) v = 0.0;
        if (lower) o[r * n + c] = v;
        else o[c * n + r] = v;
      }
  }
  free(w);
}

static void trsm_range(void *ctx, int64_t b0, int64_t b1) {
  la_job *j = ctx;
  int kind = j->n->kind;
  int left = kind & 1, lower = (kind >> 1) & 1, unit = (kind >> 2) & 1,
      trans = (kind >> 3) & 1;
  int64_t m = j->n->sizes[j->n->ndim - 2], n = j->n->sizes[j->n->ndim - 1];
  int64_t k = j->k;
  /* solve E Y = Bt: E (k x k) = op(a) (transposed again for right side),
   * Bt (k x nr) = b or b^T */
  int64_t nr = left ? n : m;
  int elower = lower ^ trans ^ !left;
  double *e = malloc((size_t)(k * k + k * nr + 1) * sizeof(double));
  if (!e) { atomic_store(&j->bad, -1); return; }
  double *y = e + k * k;
  for (int64_t bi = b0; bi < b1; bi++) {
    const double *a = j->x + bi * j->xsz, *bb = j->y + bi * j->ysz;
    for (int64_t r = 0; r < k; r++)
      for (int64_t c = 0; c < k; c++) {
        /* element (r, c) of op(a) (then of op(a)^T when right side) */
        int64_t rr = r, cc = c;
        if (!left) { rr = c; cc = r; }
        int64_t ar = trans ? cc : rr, ac = trans ? rr : cc;
        int in_tri = lower ? ac <= ar : ac >= ar;
        double v = in_tri ? a[ar * k + ac] : 0.0;
        if (ar == ac && unit) v = 1.0;
        e[r * k + c] = v;
      }
    for (int64_t r = 0; r < k; r++)
      for (int64_t c = 0; c < nr; c++) y[r * nr + c] = left ? bb[r * n + c] : bb[c * n + r];
    for (int64_t c = 0; c < nr; c++) {
      if (elower) {
        for (int64_t r = 0; r < k; r++) {
          double s = y[r * nr + c];
          for (int64_t q = 0; q < r; q++) s -= e[r * k + q] * y[q * nr + c];
          y[r * nr + c] = unit ? s : s / e[r * k + r];
        }
      } else {
        for (int64_t r = k - 1; r >= 0; r--) {
          double s = y[r * nr + c];
          for (int64_t q = r + 1; q < k; q++) s -= e[r * k + q] * y[q * nr + c];
          y[r * nr + c] = unit ? s : s / e[r * k + r];
        }
      }
    }
    double *o = j->out + bi * j->osz;
    for (int64_t r = 0; r < m; r++)
      for (int64_t c = 0; c < n; c++) o[r * n + c] = left ? y[r * nr + c] : y[c * nr + r];
  }
  free(e);
}

static void lu_range(void *ctx, int64_t b0, int64_t b1) {
  la_job *j = ctx;
  int64_t m = j->r, n = j->c, k = m < n ? m : n;
  int res = j->n->dim;
  double *w = malloc((size_t)(m * n + k + m + 1) * sizeof(double));
  if (!w) { atomic_store(&j->bad, -1); return; }
  double *piv = w + m * n, *perm = piv + k;
  for (int64_t b = b0; b < b1; b++) {
    memcpy(w, j->x + b * j->xsz, (size_t)(m * n) * sizeof(double));
    int info = lu_factor(w, m, n, piv, perm);
    double *o = j->out + b * j->osz;
    switch (res) {
    case TPUIR_LU_PACKED: memcpy(o, w, (size_t)(m * n) * sizeof(double)); break;
    case TPUIR_LU_PIVOTS: memcpy(o, piv, (size_t)k * sizeof(double)); break;
    case TPUIR_LU_INFO: o[0] = info; break;
    default: memcpy(o, perm, (size_t)m * sizeof(double)); break;
    }
  }
  free(w);
}

static void perm_range(void *ctx, int64_t b0, int64_t b1) {
  la_job *j = ctx;
  int64_t m = j->r, k = j->k;
  for (int64_t b = b0; b < b1; b++) {
    const double *p = j->x + b * j->xsz;
    double *o = j->out + b * j->osz;
    for (int64_t i = 0; i < m; i++) o[i] = (double)i;
    for (int64_t i = 0; i < k; i++) {
      double q = p[i] - 1;
      if (!(q >= 0 && q < (double)m) || i >= m) {
        atomic_store(&j->bad, 1);
        return;
      }
      int64_t qi = (int64_t)q;
      double t = o[i];
      o[i] = o[qi];
      o[qi] = t;
    }
  }
}

static void qr_range(void *ctx, int64_t b0, int64_t b1) {
  la_job *j = ctx;
  int64_t m = j->r, n = j->c, k = m < n ? m : n;
  int res = j->n->dim;
  double *w = malloc((size_t)(m * n + k + 1) * sizeof(double));
  if (!w) { atomic_store(&j->bad, -1); return; }
  double *tau = w + m * n;
  for (int64_t b = b0; b < b1; b++) {
    memcpy(w, j->x + b * j->xsz, (size_t)(m * n) * sizeof(double));
    qr_factor(w, m, n, tau);
    double *o = j->out + b * j->osz;
    if (res == TPUIR_QR_PACKED) memcpy(o, w, (size_t)(m * n) * sizeof(double));
    else memcpy(o, tau, (size_t)k * sizeof(double));
  }
  free(w);
}

static void hh_range(void *ctx, int64_t b0, int64_t b1) {
  la_job *j = ctx;
  for (int64_t b = b0; b < b1; b++)
    householder(j->x + b * j->xsz, j->y + b * j->ysz, j->r, j->c, j->k,
                j->out + b * j->osz);
}

static void ldl_range(void *ctx, int64_t b0, int64_t b1) {
  la_job *j = ctx;
  int64_t n = j->r;
  int res = j->n->dim;
  double *w = malloc((size_t)(n * n + n + 1) * sizeof(double));
  if (!w) { atomic_store(&j->bad, -1); return; }
  double *piv = w + n * n;
  for (int64_t b = b0; b < b1; b++) {
    memcpy(w, j->x + b * j->xsz, (size_t)(n * n) * sizeof(double));
    int info = ldl_factor(w, n, piv);
    double *o = j->out + b * j->osz;
    if (res == TPUIR_LDL_LD) memcpy(o, w, (size_t)(n * n) * sizeof(double));
    else if (res == TPUIR_LDL_PIVOTS) memcpy(o, piv, (size_t)n * sizeof(double));
    else o[0] = info;
  }
  free(w);
}

static void ldl_solve_range(void *ctx, int64_t b0, int64_t b1) {
  la_job *j = ctx;
  int64_t n = j->r, m = j->n->sizes[j->n->ndim - 1];
  for (int64_t b = b0; b < b1; b++) {
    double *o = j->out + b * j->osz;
    memcpy(o, j->z + b * j->zsz, (size_t)(n * m) * sizeof(double));
    ldl_solve(j->x + b * j->xsz, j->y + b * j->ysz, n, o, m);
  }
}

/* ---- node evaluation --------------------------------------------------- */

static int64_t numel_of(const tpu_view *v) { return tpu_view_numel(v); }

/* contiguous double copy of a view (caller frees with tpux__free) */
static int load_f64(const tpu_view *v, double **out) {
  int64_t n = numel_of(v);
  double *m = tpux__alloc((size_t)(n > 0 ? n : 1) * sizeof(double));
  if (!m) return tpu_error(TPU_E_OOM, "linalg: out of host memory");
  tpu_view d;
  tpu_view_init_contiguous(&d, m, TPU_F64, v->ndim, v->sizes);
  int rc = n ? tpux__copy_nocheck(&d, v) : TPU_OK;
  if (rc) {
    tpux__free(m);
    return rc;
  }
  *out = m;
  return TPU_OK;
}

/* Evaluate one dense linear algebra node into c->vals[t] (exec/vtpu/internal.h). */
int tpux__eval_linalg(xctx *c, int t) {
  const tpuir_node *n = tpuir_get_node(c->g, t);
  const tpu_view *x = &c->vals[n->in[0]].v;
  const tpu_view *y = n->nin > 1 ? &c->vals[n->in[1]].v : NULL;
  const tpu_view *z = n->nin > 2 ? &c->vals[n->in[2]].v : NULL;
  la_job j;
  memset(&j, 0, sizeof j);
  atomic_init(&j.bad, 0);
  j.n = n;
  int xb = n->op == TPUIR_LU_PIVOTS_TO_PERM ? x->ndim - 1 : x->ndim - 2;
  j.nbatch = 1;
  for (int i = 0; i < xb; i++) j.nbatch *= x->sizes[i];
  j.xsz = 1;
  for (int i = xb; i < x->ndim; i++) j.xsz *= x->sizes[i];
  if (y) {
    j.ysz = 1;
    for (int i = xb; i < y->ndim; i++) j.ysz *= y->sizes[i];
  }
  if (z) {
    j.zsz = 1;
    for (int i = xb; i < z->ndim; i++) j.zsz *= z->sizes[i];
  }
  j.osz = 1;
  for (int i = xb; i < n->ndim; i++) j.osz *= n->sizes[i];
  j.r = x->sizes[x->ndim - 2 < 0 ? 0 : x->ndim - 2];
  j.c = x->sizes[x->ndim - 1];
  tpurt_range_fn fn = NULL;
  int64_t work = 1;
  switch (n->op) {
  case TPUIR_CHOLESKY: fn = chol_range; work = j.r * j.r * j.r; break;
  case TPUIR_TRIANGULAR_SOLVE:
    fn = trsm_range;
    j.k = x->sizes[x->ndim - 1];
    work = j.k * j.k * (j.ysz / (j.k > 0 ? j.k : 1) + 1);
    break;
  case TPUIR_LU: fn = lu_range; work = j.r * j.c * (j.r < j.c ? j.r : j.c); break;
  case TPUIR_LU_PIVOTS_TO_PERM:
    fn = perm_range;
    j.r = n->dim;
    j.k = x->sizes[x->ndim - 1];
    work = j.r + j.k;
    break;
  case TPUIR_GEQRF: fn = qr_range; work = j.r * j.c * (j.r < j.c ? j.r : j.c); break;
  case TPUIR_HOUSEHOLDER_PRODUCT:
    fn = hh_range;
    j.k = y->sizes[y->ndim - 1];
    work = j.r * j.c * (j.k + 1);
    break;
  case TPUIR_LDL: fn = ldl_range; work = j.r * j.r * j.r; break;
  case TPUIR_LDL_SOLVE: fn = ldl_solve_range; work = j.r * j.r * (j.zsz / (j.r > 0 ? j.r : 1) + 1); break;
  default: return tpu_error(TPU_E_INTERNAL, "eval_linalg: bad op");
  }
  int rc = tpux__alloc_value(c, t);
  if (rc) return rc;
  int64_t onum = j.nbatch * j.osz;
  if (onum == 0) return TPU_OK;
  double *xb_ = NULL, *yb_ = NULL, *zb_ = NULL, *ob = NULL;
  if ((rc = load_f64(x, &xb_))) return rc;
  if (y && (rc = load_f64(y, &yb_))) goto done;
  if (z && (rc = load_f64(z, &zb_))) goto done;
  ob = tpux__alloc((size_t)onum * sizeof(double));
  if (!ob) {
    rc = tpu_error(TPU_E_OOM, "linalg: out of host memory");
    goto done;
  }
  j.x = xb_;
  j.y = yb_;
  j.z = zb_;
  j.out = ob;
  int64_t grain = 65536 / (work > 0 ? work : 1);
  tpurt_parallel_for(j.nbatch, grain < 1 ? 1 : grain, fn, &j);
  int bad = atomic_load(&j.bad);
  if (!bad && n->op == TPUIR_CHOLESKY && (n->kind & TPUIR_CHOL_CHECK) &&
      n->dim == TPUIR_CHOL_INFO) {
    for (int64_t i = 0; i < j.nbatch; i++) {
      if (ob[i] == 0.0) continue;
      char bs[64] = "";
      if (n->ndim > 0) snprintf(bs, sizeof bs, ": (Batch element %lld)", (long long)i);
      rc = tpu_error(TPU_E_LINALG,
                     "cholesky%s: The factorization could not be completed because the "
                     "input is not positive-definite (the leading minor of order %d is "
                     "not positive-definite).",
                     bs, (int)ob[i]);
      goto done;
    }
  }
  if (bad < 0) {
    rc = tpu_error(TPU_E_OOM, "linalg: out of host memory");
  } else if (bad > 0) {
    rc = tpu_error(TPU_E_INVALID,
                   "pivots passed to lu_unpack must be between 1 and LU.size(-2) "
                   "inclusive.Did you use the LU factorization of a matrix with "
                   "more rows than columns?");
  } else {
    tpu_view src;
    tpu_view_init_contiguous(&src, ob, TPU_F64, n->ndim, n->sizes);
    rc = tpux__copy_nocheck(&c->vals[t].v, &src);
  }
done:
  tpux__free(xb_);
  tpux__free(yb_);
  tpux__free(zb_);
  tpux__free(ob);
  return rc;
}

/* exec/vtpu/spectral.c - vTPU EIGH and SVD (packed results, see tpu_ir.h).
 *
 * Every matrix of the batch is loaded into double precision, scaled by its
 * largest magnitude (no overflow/underflow in the squares), decomposed,
 * and the packed result is rounded to the operand dtype once at the end.
 * Matrices run in parallel over the batch (one matrix per task).
 *
 * EIGH: cyclic Jacobi on the symmetric matrix rebuilt from the selected
 * triangle: each (p, q) rotation zeroes a_pq (tan from the smaller root);
 * a sweep visits every pair once in round-robin (tournament) order, n/2
 * disjoint pairs per round, so a round's rotations commute and are applied
 * together (columns by rows of A, then rows by pairs: contiguous, and
 * parallel for large n). Pairs already negligible are skipped
 * (|a_pq| <= eps * sqrt(|a_pp a_qq|), or below 1e-20 of ||A||_F, far under
 * double roundoff of the eigenvalues); the iteration stops after a sweep
 * without rotations. Quadratic convergence: ~6-10 sweeps.
 *
 * SVD: one-sided (Hestenes) Jacobi on the columns of the tall orientation
 * W (A, or A^T when m < n): rotate column pairs until every pair is
 * orthogonal to eps * rows relative to their norms, accumulating V (the
 * same round-robin rounds, pairs rotated in parallel when large). Then
 * sigma_j = ||w_j||, U's columns are w_j / sigma_j (re-orthogonalised by
 * modified Gram-Schmidt) and the columns for zero singular values and, for
 * full_matrices, the extra columns complete an orthonormal basis: each
 * next column is the standard basis vector with the largest residual after
 * projecting out the columns so far (projected twice).
 */
#include <float.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/vtpu/internal.h"

#define SP_MAX_SWEEPS 100

enum { SP_OK = 0, SP_NAN, SP_INF, SP_NOCONV, SP_NOMEM };

typedef struct sp_job {
  const tpuir_node *n;
  const tpu_view *x;  /* operand */
  char *out;          /* result, contiguous */
  int nbd;            /* batch dims */
  int64_t m, ncol;    /* matrix rows, cols */
  int64_t per;        /* result elements per matrix */
  _Atomic int64_t fail; /* min over failures of (batch << 2 | reason) */
  _Atomic int oom;
} sp_job;

/* ---- load / store -------------------------------------------------------- */

static void load_matrix(const sp_job *J, int64_t b, double *M, void *rowbuf) {
  const tpu_view *x = J->x;
  int64_t off = x->offset, r = b;
  for (int d = J->nbd - 1; d >= 0; d--) {
    off += (r % x->sizes[d]) * x->strides[d];
    r /= x->sizes[d];
  }
  size_t es = tpu_dtype_size(x->dtype);
  int64_t sr = x->strides[J->nbd], sc = x->strides[J->nbd + 1];
  for (int64_t i = 0; i < J->m; i++) {
    const char *p = (const char *)x->base + (off + i * sr) * (int64_t)es;
    tpux__load(x->dtype, p, sc, J->ncol, rowbuf);
    double *row = M + i * J->ncol;
    if (x->dtype == TPU_F64) memcpy(row, rowbuf, (size_t)J->ncol * sizeof(double));
    else
      for (int64_t j = 0; j < J->ncol; j++) row[j] = ((const float *)rowbuf)[j];
  }
}

static void store_result(const sp_job *J, int64_t b, const double *R, void *fbuf) {
  int dt = J->n->dtype;
  char *p = J->out + b * J->per * (int64_t)tpu_dtype_size(dt);
  if (dt == TPU_F64) {
    tpux__store(dt, p, 1, J->per, R);
    return;
  }
  float *f = fbuf;
  for (int64_t i = 0; i < J->per; i++) f[i] = (float)R[i];
  tpux__store(dt, p, 1, J->per, f);
}

/* SP_NAN if any entry is NaN, else SP_INF if any is infinite, else SP_OK;
 * *amax receives the largest magnitude. */
static int scan(const double *a, int64_t n, double *amax) {
  double mx = 0;
  int inf = 0;
  for (int64_t i = 0; i < n; i++) {
    double v = fabs(a[i]);
    if (v != v) return SP_NAN;
    if (isinf(v)) inf = 1;
    if (v > mx) mx = v;
  }
  *amax = mx;
  return inf ? SP_INF : SP_OK;
}

/* tan of the Jacobi rotation angle for cot(2 phi) = z (smaller root). */
static double jacobi_tan(double z) {
  double az = fabs(z);
  double t = az > 1e150 ? 0.5 / az : 1.0 / (az + sqrt(1.0 + az * az));
  return z < 0 ? -t : t;
}

/* ---- EIGH ---------------------------------------------------------------- */

/* Round-robin (tournament) schedule over `cols` indices: idx holds N =
 * cols rounded up to even entries (index cols is a bye), initially
 * 0..N-1. rr_pairs writes the round's disjoint pairs (p < q, byes
 * skipped) to pq and returns their count; rr_next moves to the next round
 * (all but idx[0] rotate). N - 1 rounds visit every pair once. */
static int64_t rr_pairs(const int64_t *idx, int64_t N, int64_t cols, int64_t *pq) {
  int64_t np = 0;
  for (int64_t i = 0; i < N / 2; i++) {
    int64_t a = idx[i], b = idx[N - 1 - i];
    if (a >= cols || b >= cols) continue;
    pq[2 * np] = a < b ? a : b;
    pq[2 * np + 1] = a < b ? b : a;
    np++;
  }
  return np;
}

static void rr_next(int64_t *idx, int64_t N) {
  int64_t last = idx[N - 1];
  for (int64_t i = N - 1; i > 1; i--) idx[i] = idx[i - 1];
  if (N > 1) idx[1] = last;
}

/* One round of two-sided Jacobi: the round's rotations act on disjoint
 * index pairs, so A <- J^T A J is applied as a column phase (A J, by rows
 * of A) and a row phase (J^T (A J), by pairs), both parallel. */
typedef struct ej_round {
  double *A, *Vt;
  int64_t n, np;
  const int64_t *pq;
  const double *cs; /* per pair: c, s, new a_pp, new a_qq; s == 0: none */
} ej_round;

static void ej_cols(void *ctx, int64_t lo, int64_t hi) {
  const ej_round *R = ctx;
  for (int64_t k = lo; k < hi; k++) {
    double *row = R->A + k * R->n;
    for (int64_t i = 0; i < R->np; i++) {
      double c = R->cs[4 * i], s = R->cs[4 * i + 1];
      if (s == 0) continue;
      int64_t p = R->pq[2 * i], q = R->pq[2 * i + 1];
      double x = row[p], y = row[q];
      row[p] = c * x - s * y;
      row[q] = s * x + c * y;
    }
  }
}

static void rot_rows(double *rp, double *rq, int64_t n, double c, double s) {
  for (int64_t k = 0; k < n; k++) {
    double x = rp[k], y = rq[k];
    rp[k] = c * x - s * y;
    rq[k] = s * x + c * y;
  }
}

static void ej_rows(void *ctx, int64_t lo, int64_t hi) {
  const ej_round *R = ctx;
  int64_t n = R->n;
  for (int64_t i = lo; i < hi; i++) {
    double c = R->cs[4 * i], s = R->cs[4 * i + 1];
    if (s == 0) continue;
    int64_t p = R->pq[2 * i], q = R->pq[2 * i + 1];
    double *rp = R->A + p * n, *rq = R->A + q * n;
    rot_rows(rp, rq, n, c, s);
    rp[p] = R->cs[4 * i + 2]; /* the 2 x 2 block exactly */
    rq[q] = R->cs[4 * i + 3];
    rp[q] = rq[p] = 0;
    if (R->Vt) rot_rows(R->Vt + p * n, R->Vt + q * n, n, c, s);
  }
}

/* Eigen-decompose the symmetric n x n row-major A in place (destroyed) by
 * cyclic Jacobi in round-robin order; Vt (n x n, may be NULL) receives the
 * eigenvectors as ROWS (Vt[j*n + i] = component i of eigenvector j), w the
 * eigenvalues (unsorted). Returns SP_OK, SP_NOCONV or SP_NOMEM. */
static int jacobi_eigh(double *A, double *Vt, double *w, int64_t n) {
  double frob = 0;
  for (int64_t i = 0; i < n * n; i++) frob += A[i] * A[i];
  frob = sqrt(frob);
  double tiny = frob * 1e-20;
  if (Vt) {
    memset(Vt, 0, (size_t)(n * n) * sizeof(double));
    for (int64_t i = 0; i < n; i++) Vt[i * n + i] = 1;
  }
  int64_t N = n + (n & 1);
  int64_t *idx = malloc((size_t)(N ? N : 1) * 2 * sizeof(int64_t));
  double *cs = malloc((size_t)(N / 2 + 1) * 4 * sizeof(double));
  if (!idx || !cs) {
    free(idx);
    free(cs);
    return SP_NOMEM;
  }
  int64_t *pq = idx + N;
  for (int64_t i = 0; i < N; i++) idx[i] = i;
  int par = n * n >= 2 * XK_GRAIN;
  int64_t grain = 8192 / (n ? n : 1) + 1;
  int conv = n < 2;
  for (int sweep = 0; sweep < SP_MAX_SWEEPS && !conv; sweep++) {
    conv = 1;
    for (int64_t r = 0; r < N - 1; r++, rr_next(idx, N)) {
      ej_round R = {A, Vt, n, rr_pairs(idx, N, n, pq), pq, cs};
      int any = 0;
      for (int64_t i = 0; i < R.np; i++) {
        int64_t p = pq[2 * i], q = pq[2 * i + 1];
        double apq = A[p * n + q], app = A[p * n + p], aqq = A[q * n + q];
        cs[4 * i] = 1;
        cs[4 * i + 1] = 0;
        if (fabs(apq) <= tiny ||
            fabs(apq) <= DBL_EPSILON * sqrt(fabs(app)) * sqrt(fabs(aqq))) {
          A[p * n + q] = A[q * n + p] = 0;
          continue;
        }
        double t = jacobi_tan(0.5 * (aqq - app) / apq);
        double c = 1.0 / sqrt(1.0 + t * t);
        cs[4 * i] = c;
        cs[4 * i + 1] = t * c;
        cs[4 * i + 2] = app - t * apq;
        cs[4 * i + 3] = aqq + t * apq;
        any = 1;
      }
      if (!any) continue;
      conv = 0;
      if (par) {
        tpurt_parallel_for(n, grain, ej_cols, &R);
        tpurt_parallel_for(R.np, grain, ej_rows, &R);
      } else {
        ej_cols(&R, 0, n);
        ej_rows(&R, 0, R.np);
      }
    }
  }
  for (int64_t i = 0; i < n; i++) w[i] = A[i * n + i];
  free(idx);
  free(cs);
  return conv ? SP_OK : SP_NOCONV;
}

/* stable insertion sort of indices by key (ascending, or descending) */
static void sort_idx(const double *key, int64_t n, int64_t *perm, int desc) {
  for (int64_t i = 0; i < n; i++) {
    int64_t v = perm[i] = i, j = i;
    while (j > 0 && (desc ? key[perm[j - 1]] < key[v] : key[perm[j - 1]] > key[v])) {
      perm[j] = perm[j - 1];
      j--;
    }
    perm[j] = v;
  }
}

/* Non-finite check of the batch item's matrix X[0..cnt): on NaN/Inf its
 * results become NaN (stored) and the scan status is returned; else
 * SP_OK with *scale = max |x| (1 for a zero matrix), the factor X is
 * divided by before the iterations. */
static int scan_item(const sp_job *J, int64_t b, const double *X, int64_t cnt,
                     double *R, void *fbuf, double *scale) {
  double amax = 0;
  int st = scan(X, cnt, &amax);
  if (st != SP_OK) {
    for (int64_t i = 0; i < J->per; i++) R[i] = NAN;
    store_result(J, b, R, fbuf);
    return st;
  }
  *scale = amax > 0 ? amax : 1;
  return SP_OK;
}

typedef struct eigh_ws {
  double *M, *V, *w, *R;
  int64_t *perm;
  void *rowbuf, *fbuf;
} eigh_ws;

static int eigh_one(const sp_job *J, int64_t b, eigh_ws *ws) {
  int64_t n = J->m;
  int lower = J->n->kind, want_v = J->n->dim;
  double *A = ws->M, *R = ws->R;
  load_matrix(J, b, A, ws->rowbuf);
  for (int64_t i = 0; i < n; i++) /* the other triangle is never read */
    for (int64_t j = i + 1; j < n; j++) {
      if (lower) A[i * n + j] = A[j * n + i];
      else A[j * n + i] = A[i * n + j];
    }
  double scale;
  int st = scan_item(J, b, A, n * n, R, ws->fbuf, &scale);
  if (st != SP_OK) return st;
  for (int64_t i = 0; i < n * n; i++) A[i] /= scale;
  double *V = want_v ? ws->V : NULL;
  st = jacobi_eigh(A, V, ws->w, n);
  if (st == SP_NOMEM) return st;
  sort_idx(ws->w, n, ws->perm, 0);
  for (int64_t j = 0; j < n; j++) R[j] = ws->w[ws->perm[j]] * scale;
  if (want_v)
    for (int64_t j = 0; j < n; j++) {
      const double *vc = V + ws->perm[j] * n; /* V holds vectors as rows */
      int64_t arg = 0;
      for (int64_t i = 1; i < n; i++)
        if (fabs(vc[i]) > fabs(vc[arg])) arg = i;
      double sg = vc[arg] < 0 ? -1.0 : 1.0;
      for (int64_t i = 0; i < n; i++) R[n + i * n + j] = sg * vc[i];
    }
  store_result(J, b, R, ws->fbuf);
  return st;
}

/* ---- SVD ----------------------------------------------------------------- */

/* Rotate columns p < q of W (and V) to make them orthogonal unless they
 * already are (to tol relative to their norms). Returns 1 if rotated. */
static int hs_rotate(double *W, double *V, int64_t rows, int64_t cols, int64_t p,
                     int64_t q, double tol) {
  double *wp = W + p * rows, *wq = W + q * rows;
  double al = 0, be = 0, ga = 0;
  for (int64_t i = 0; i < rows; i++) {
    al += wp[i] * wp[i];
    be += wq[i] * wq[i];
    ga += wp[i] * wq[i];
  }
  if (fabs(ga) <= tol * sqrt(al) * sqrt(be) || fabs(ga) < 1e-290) return 0;
  double t = jacobi_tan((be - al) / (2 * ga));
  double c = 1.0 / sqrt(1.0 + t * t), s = t * c;
  for (int64_t i = 0; i < rows; i++) {
    double x = wp[i], y = wq[i];
    wp[i] = c * x - s * y;
    wq[i] = s * x + c * y;
  }
  if (V) {
    double *vp = V + p * cols, *vq = V + q * cols;
    for (int64_t i = 0; i < cols; i++) {
      double x = vp[i], y = vq[i];
      vp[i] = c * x - s * y;
      vq[i] = s * x + c * y;
    }
  }
  return 1;
}

typedef struct hs_round {
  double *W, *V;
  int64_t rows, cols;
  const int64_t *pq; /* pairs: pq[2i] < pq[2i+1] */
  double tol;
  _Atomic int rotated;
} hs_round;

static void hs_range(void *ctx, int64_t lo, int64_t hi) {
  hs_round *R = ctx;
  int any = 0;
  for (int64_t i = lo; i < hi; i++)
    any |= hs_rotate(R->W, R->V, R->rows, R->cols, R->pq[2 * i], R->pq[2 * i + 1],
                     R->tol);
  if (any) atomic_store(&R->rotated, 1);
}

/* Hestenes Jacobi on W (rows x cols column-major, rows >= cols): on return
 * the columns of W are mutually orthogonal and W_in V = W_out; V
 * (cols x cols column-major, may be NULL) accumulates the rotations. A
 * sweep visits every pair once in round-robin (tournament) order: each
 * round is cols/2 disjoint pairs, rotated in parallel when large. */
static int hestenes(double *W, double *V, int64_t rows, int64_t cols) {
  if (V) {
    memset(V, 0, (size_t)(cols * cols) * sizeof(double));
    for (int64_t i = 0; i < cols; i++) V[i * cols + i] = 1;
  }
  if (cols < 2) return SP_OK;
  int64_t N = cols + (cols & 1); /* index cols = a bye */
  int64_t *idx = malloc((size_t)N * 2 * sizeof(int64_t));
  if (!idx) return SP_NOMEM;
  int64_t *pq = idx + N;
  for (int64_t i = 0; i < N; i++) idx[i] = i;
  hs_round R;
  R.W = W;
  R.V = V;
  R.rows = rows;
  R.cols = cols;
  R.pq = pq;
  R.tol = DBL_EPSILON * (double)rows;
  int conv = 0;
  for (int sweep = 0; sweep < SP_MAX_SWEEPS && !conv; sweep++) {
    atomic_store(&R.rotated, 0);
    for (int64_t r = 0; r < N - 1; r++, rr_next(idx, N)) {
      int64_t np = rr_pairs(idx, N, cols, pq);
      if (rows * np < XK_GRAIN) hs_range(&R, 0, np);
      else tpurt_parallel_for(np, 8192 / rows + 1, hs_range, &R);
    }
    conv = !atomic_load(&R.rotated);
  }
  free(idx);
  return conv ? SP_OK : SP_NOCONV;
}

static double dotv(const double *a, const double *b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
  return s;
}

/* U (rows x ncols column-major): columns with ok[j] set are orthonormal
 * candidates; re-orthogonalise them (modified Gram-Schmidt, in order) and
 * replace the others (and any that vanish) by completing the basis with
 * standard basis vectors. res: rows doubles of scratch. */
static void complete_basis(double *U, char *ok, int64_t rows, int64_t ncols,
                           double *res) {
  for (int64_t j = 0; j < ncols; j++) {
    if (!ok[j]) continue;
    double *u = U + j * rows;
    for (int pass = 0; pass < 2; pass++)
      for (int64_t i = 0; i < j; i++) {
        if (!ok[i]) continue;
        double d = dotv(U + i * rows, u, rows);
        for (int64_t r = 0; r < rows; r++) u[r] -= d * U[i * rows + r];
      }
    double nr = sqrt(dotv(u, u, rows));
    if (nr < 0.5) { ok[j] = 0; continue; }
    for (int64_t r = 0; r < rows; r++) u[r] /= nr;
  }
  /* residual norms^2 of the standard basis vectors */
  for (int64_t r = 0; r < rows; r++) res[r] = 1;
  for (int64_t j = 0; j < ncols; j++)
    if (ok[j])
      for (int64_t r = 0; r < rows; r++) res[r] -= U[j * rows + r] * U[j * rows + r];
  for (int64_t j = 0; j < ncols; j++) {
    if (ok[j]) continue;
    int64_t best = 0;
    for (int64_t r = 1; r < rows; r++)
      if (res[r] > res[best]) best = r;
    double *u = U + j * rows;
    memset(u, 0, (size_t)rows * sizeof(double));
    u[best] = 1;
    for (int pass = 0; pass < 2; pass++)
      for (int64_t i = 0; i < ncols; i++) {
        if (!ok[i]) continue;
        double d = dotv(U + i * rows, u, rows);
        for (int64_t r = 0; r < rows; r++) u[r] -= d * U[i * rows + r];
      }
    double nr = sqrt(dotv(u, u, rows));
    for (int64_t r = 0; r < rows; r++) {
      u[r] /= nr;
      res[r] -= u[r] * u[r];
    }
    ok[j] = 1;
  }
}

typedef struct svd_ws {
  double *M, *W, *V, *U, *sig, *res, *R;
  int64_t *perm;
  char *ok;
  void *rowbuf, *fbuf;
} svd_ws;

static int svd_one(const sp_job *J, int64_t b, svd_ws *ws) {
  int64_t m = J->m, n = J->ncol;
  int want_uv = J->n->kind, full = J->n->dim;
  int tall = m >= n;
  int64_t rows = tall ? m : n, cols = tall ? n : m, k = cols;
  double *M = ws->M, *W = ws->W, *R = ws->R;
  load_matrix(J, b, M, ws->rowbuf);
  double scale;
  int st = scan_item(J, b, M, m * n, R, ws->fbuf, &scale);
  if (st != SP_OK) return st;
  /* W: the tall orientation, column-major */
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      double v = M[i * n + j] / scale;
      if (tall) W[j * rows + i] = v;
      else W[i * rows + j] = v;
    }
  double *V = want_uv ? ws->V : NULL;
  st = hestenes(W, V, rows, cols);
  if (st == SP_NOMEM) return st;
  for (int64_t j = 0; j < cols; j++) ws->sig[j] = sqrt(dotv(W + j * rows, W + j * rows, rows));
  sort_idx(ws->sig, cols, ws->perm, 1);
  for (int64_t j = 0; j < k; j++) R[j] = ws->sig[ws->perm[j]] * scale;
  if (!want_uv) {
    store_result(J, b, R, ws->fbuf);
    return st;
  }
  /* U side of the tall orientation: rows x ucols, column-major */
  int64_t ucols = full ? rows : cols;
  double *U = ws->U;
  for (int64_t j = 0; j < ucols; j++) {
    double *u = U + j * rows;
    ws->ok[j] = 0;
    if (j >= cols) continue;
    double s = ws->sig[ws->perm[j]];
    if (!(s > 0) || s < DBL_MIN * 1e4) continue;
    const double *w = W + ws->perm[j] * rows;
    for (int64_t r = 0; r < rows; r++) u[r] = w[r] / s;
    ws->ok[j] = 1;
  }
  complete_basis(U, ws->ok, rows, ucols, ws->res);
  /* sign: largest component of each right singular vector positive */
  for (int64_t j = 0; j < k; j++) {
    double *v = V + ws->perm[j] * cols, *u = U + j * rows;
    const double *rv = tall ? v : u;
    int64_t len = tall ? cols : rows, arg = 0;
    for (int64_t i = 1; i < len; i++)
      if (fabs(rv[i]) > fabs(rv[arg])) arg = i;
    if (rv[arg] < 0) {
      for (int64_t i = 0; i < cols; i++) v[i] = -v[i];
      for (int64_t i = 0; i < rows; i++) u[i] = -u[i];
    }
  }
  /* pack: U_out [m, uc], Vh_out [vr, n] */
  int64_t uc = full ? m : k, vr = full ? n : k;
  double *Uo = R + k, *Vo = R + k + m * uc;
  if (tall) { /* A = U S V^T */
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < uc; j++) Uo[i * uc + j] = U[j * rows + i];
    for (int64_t r = 0; r < vr; r++)
      for (int64_t i = 0; i < n; i++) Vo[r * n + i] = V[ws->perm[r] * cols + i];
  } else { /* A^T = U S V^T, so A = V S U^T */
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < uc; j++) Uo[i * uc + j] = V[ws->perm[j] * cols + i];
    for (int64_t r = 0; r < vr; r++)
      for (int64_t i = 0; i < n; i++) Vo[r * n + i] = U[r * rows + i];
  }
  store_result(J, b, R, ws->fbuf);
  return st;
}

/* ---- driver -------------------------------------------------------------- */

static void note_fail(sp_job *J, int64_t b, int st) {
  int64_t code = (b << 2) | st;
  int64_t cur = atomic_load(&J->fail);
  while (code < cur && !atomic_compare_exchange_weak(&J->fail, &cur, code)) {
  }
}

static void sp_range(void *ctx, int64_t lo, int64_t hi) {
  sp_job *J = ctx;
  int64_t m = J->m, n = J->ncol, big = m > n ? m : n;
  int is_eigh = J->n->op == TPUIR_EIGH;
  size_t dsz = sizeof(double);
  /* one block: M, W, V, U, R, sig, res (doubles), perm, ok, rowbuf, fbuf */
  size_t nd = (size_t)(m * n) * 2 + (size_t)(big * big) * 2 + (size_t)J->per +
              (size_t)big * 2 + 8;
  char *blk = malloc(nd * dsz + (size_t)big * (sizeof(int64_t) + 1) +
                     (size_t)big * dsz + (size_t)J->per * sizeof(float) + 64);
  if (!blk) {
    atomic_store(&J->oom, 1);
    return;
  }
  double *d = (double *)blk;
  double *M = d; d += m * n;
  double *W = d; d += m * n;
  double *V = d; d += big * big;
  double *U = d; d += big * big;
  double *R = d; d += J->per;
  double *sig = d; d += big;
  double *res = d; d += big;
  d += 8;
  void *rowbuf = d; d += big;
  int64_t *perm = (int64_t *)d;
  char *ok = (char *)(perm + big);
  void *fbuf = (void *)(((uintptr_t)(ok + big) + 15) & ~(uintptr_t)15);
  for (int64_t b = lo; b < hi; b++) {
    int st;
    if (is_eigh) {
      eigh_ws ws = {M, V, sig, R, perm, rowbuf, fbuf};
      st = eigh_one(J, b, &ws);
    } else {
      svd_ws ws = {M, W, V, U, sig, res, R, perm, ok, rowbuf, fbuf};
      st = svd_one(J, b, &ws);
    }
    if (st == SP_NOMEM) atomic_store(&J->oom, 1);
    else if (st == SP_NAN || st == SP_NOCONV) note_fail(J, b, st);
  }
  free(blk);
}

/* Evaluate an EIGH or SVD node (result into c->vals[t]). */
int tpux__eval_spectral(xctx *c, int t) {
  const tpuir_node *n = tpuir_get_node(c->g, t);
  const tpu_view *x = &c->vals[n->in[0]].v;
  int rc = tpux__alloc_value(c, t);
  if (rc) return rc;
  sp_job J;
  memset(&J, 0, sizeof J);
  J.n = n;
  J.x = x;
  J.out = c->vals[t].mem;
  J.nbd = x->ndim - 2;
  J.m = x->sizes[x->ndim - 2];
  J.ncol = x->sizes[x->ndim - 1];
  int64_t nb = 1;
  for (int d = 0; d < J.nbd; d++) nb *= x->sizes[d];
  J.per = n->sizes[n->ndim - 1] * (n->op == TPUIR_EIGH ? n->sizes[n->ndim - 2] : 1);
  atomic_store(&J.fail, INT64_MAX);
  atomic_store(&J.oom, 0);
  if (nb == 0 || J.per == 0) return TPU_OK;
  int64_t k = J.m < J.ncol ? J.m : J.ncol;
  int64_t work = J.m * J.ncol * (k > 0 ? k : 1) * 8 + 1;
  int64_t grain = XK_GRAIN / work;
  if (grain < 1) grain = 1;
  if (nb <= grain) sp_range(&J, 0, nb);
  else tpurt_parallel_for(nb, grain, sp_range, &J);
  if (atomic_load(&J.oom))
    return tpu_error(TPU_E_OOM, "%s: out of host memory", tpuir_op_name(n->op));
  int64_t f = atomic_load(&J.fail);
  if (f == INT64_MAX || !n->a[0]) return TPU_OK;
  int64_t b = f >> 2;
  int why = (int)(f & 3);
  char pre[64] = "";
  if (J.nbd > 0) snprintf(pre, sizeof pre, "(Batch element %lld): ", (long long)b);
  if (n->op == TPUIR_EIGH)
    return tpu_error(TPU_E_LINALG,
                     "linalg.eigh: %sThe algorithm failed to converge because the "
                     "input matrix is ill-conditioned or has too many repeated "
                     "eigenvalues (error code: %lld).",
                     pre, why == SP_NAN ? (long long)(n->dim ? 2 : 1) : (long long)J.m);
  if (why == SP_NAN)
    return tpu_error(TPU_E_LINALG,
                     "linalg.svd: %sThe algorithm failed to converge because the "
                     "input matrix contained non-finite values.",
                     pre);
  return tpu_error(TPU_E_LINALG,
                   "linalg.svd: %sThe algorithm failed to converge because the "
                   "input matrix is ill-conditioned or has too many repeated "
                   "singular values (error code: %lld).",
                   pre, (long long)k);
}

/* exec/vtpu/elementwise.c - vTPU elementwise engine: dtype <-> compute-class
 * loads/stores, iteration spaces, tiled programs and the per-op kernels.
 *
 * Compute classes: f16/bf16/f32 in float (rounded once at the store), f64 in
 * double, ints and bool in int64 (the store wraps like C / PyTorch).
 * Hot loops are compiled for x86-64-v4 / v3 / baseline and picked at run
 * time (target_clones).
 */
#include <immintrin.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>

#include "exec/vtpu/internal.h"

#define CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))

/* ---- loads and stores --------------------------------------------------- */

#define LOOP_LOAD(ST, DT, EXPR)                                              \
  do {                                                                       \
    const ST *s_ = (const ST *)p;                                            \
    DT *d_ = (DT *)dst;                                                      \
    if (stride == 1) {                                                       \
      for (int64_t i = 0; i < n; i++) { ST v = s_[i]; d_[i] = (EXPR); }      \
    } else if (stride == 0) {                                                \
      ST v = s_[0];                                                          \
      DT x_ = (EXPR);                                                        \
      for (int64_t i = 0; i < n; i++) d_[i] = x_;                            \
    } else {                                                                 \
      for (int64_t i = 0; i < n; i++) {                                      \
        ST v = s_[i * stride];                                               \
        d_[i] = (EXPR);                                                      \
      }                                                                      \
    }                                                                        \
  } while (0)

/* Load n elements of dtype dt into its class buffer. */
CLONES void tpux__load(int dt, const char *p, int64_t stride, int64_t n,
                       void *dst) {
  switch (dt) {
  case TPU_BOOL: LOOP_LOAD(uint8_t, int64_t, (int64_t)(v != 0)); break;
  case TPU_U8: LOOP_LOAD(uint8_t, int64_t, (int64_t)v); break;
  case TPU_I8: LOOP_LOAD(int8_t, int64_t, (int64_t)v); break;
  case TPU_I16: LOOP_LOAD(int16_t, int64_t, (int64_t)v); break;
  case TPU_I32: LOOP_LOAD(int32_t, int64_t, (int64_t)v); break;
  case TPU_I64: LOOP_LOAD(int64_t, int64_t, v); break;
  case TPU_F16: LOOP_LOAD(_Float16, float, (float)v); break;
  case TPU_BF16: LOOP_LOAD(uint16_t, float, xk_bf16_to_f32(v)); break;
  case TPU_F32: LOOP_LOAD(float, float, v); break;
  case TPU_F64: LOOP_LOAD(double, double, v); break;
  default: break;
  }
}

#define LOOP_STORE(DT, ST, EXPR)                                             \
  do {                                                                       \
    DT *d_ = (DT *)p;                                                        \
    const ST *s_ = (const ST *)src;                                          \
    if (stride == 1) {                                                       \
      for (int64_t i = 0; i < n; i++) { ST v = s_[i]; d_[i] = (EXPR); }      \
    } else {                                                                 \
      for (int64_t i = 0; i < n; i++) {                                      \
        ST v = s_[i];                                                        \
        d_[i * stride] = (EXPR);                                             \
      }                                                                      \
    }                                                                        \
  } while (0)

/* Store n class-buffer elements as dtype dt. */
CLONES void tpux__store(int dt, char *p, int64_t stride, int64_t n,
                        const void *src) {
  switch (dt) {
  case TPU_BOOL: LOOP_STORE(uint8_t, int64_t, (uint8_t)(v != 0)); break;
  case TPU_U8: LOOP_STORE(uint8_t, int64_t, (uint8_t)v); break;
  case TPU_I8: LOOP_STORE(int8_t, int64_t, (int8_t)v); break;
  case TPU_I16: LOOP_STORE(int16_t, int64_t, (int16_t)v); break;
  case TPU_I32: LOOP_STORE(int32_t, int64_t, (int32_t)v); break;
  case TPU_I64: LOOP_STORE(int64_t, int64_t, v); break;
  case TPU_F16: LOOP_STORE(_Float16, float, (_Float16)v); break;
  case TPU_BF16: LOOP_STORE(uint16_t, float, xk_f32_to_bf16(v)); break;
  case TPU_F32: LOOP_STORE(float, float, v); break;
  case TPU_F64: LOOP_STORE(double, double, v); break;
  default: break;
  }
}

/* ---- iteration spaces ---------------------------------------------------- */

void tpux__space_init(xk_space *s, int ndim, const int64_t *sizes) {
  s->nd = ndim;
  for (int i = 0; i < ndim; i++) s->sz[i] = sizes[i];
  s->narr = 0;
}

int tpux__space_add(xk_space *s, const tpu_view *v) {
  int k = s->narr++;
  xk_arr *a = &s->arr[k];
  a->dt = v->dtype;
  a->iota = 0;
  a->p = (char *)v->base + v->offset * (int64_t)tpu_dtype_size(v->dtype);
  for (int i = 0; i < s->nd; i++) a->st[i] = v->strides[i];
  return k;
}

int tpux__space_add_iota(xk_space *s, int dt, int dim) {
  int k = s->narr++;
  xk_arr *a = &s->arr[k];
  a->dt = dt;
  a->iota = 1;
  a->p = NULL;
  a->io = 0;
  for (int i = 0; i < s->nd; i++) a->st[i] = i == dim;
  return k;
}

int64_t tpux__space_numel(const xk_space *s) {
  int64_t n = 1;
  for (int i = 0; i < s->nd; i++) n *= s->sz[i];
  return n;
}

void tpux__space_coalesce(xk_space *s) {
  if (tpux__space_numel(s) == 0) {
    s->nd = 1;
    s->sz[0] = 0;
    for (int k = 0; k < s->narr; k++) s->arr[k].st[0] = 1;
    return;
  }
  int nd = 0;
  for (int i = 0; i < s->nd; i++) {
    if (s->sz[i] == 1) continue;
    if (nd > 0) {
      /* merge previous kept dim (outer) with dim i (inner)? */
      int ok = 1;
      for (int k = 0; k < s->narr && ok; k++)
        ok = s->arr[k].st[nd - 1] == s->arr[k].st[i] * s->sz[i];
      if (ok) {
        s->sz[nd - 1] *= s->sz[i];
        for (int k = 0; k < s->narr; k++) s->arr[k].st[nd - 1] = s->arr[k].st[i];
        continue;
      }
    }
    s->sz[nd] = s->sz[i];
    for (int k = 0; k < s->narr; k++) s->arr[k].st[nd] = s->arr[k].st[i];
    nd++;
  }
  if (nd == 0) { /* one element */
    nd = 1;
    s->sz[0] = 1;
    for (int k = 0; k < s->narr; k++) s->arr[k].st[0] = 1;
  }
  s->nd = nd;
}

/* Array a of s as a view (its memory, the space's sizes). */
static tpu_view arr_view(const xk_space *s, const xk_arr *a) {
  tpu_view v;
  memset(&v, 0, sizeof v);
  v.base = a->p;
  v.dtype = a->dt;
  v.ndim = s->nd;
  memcpy(v.sizes, s->sz, (size_t)s->nd * sizeof s->sz[0]);
  memcpy(v.strides, a->st, (size_t)s->nd * sizeof a->st[0]);
  return v;
}

/* Whether dim d1 should be iterated inside dim d0 (1), outside (-1) or
 * either (0), by the strides of the arrays in turn (order: the written
 * ones first), as PyTorch's TensorIterator sorts its dims: the first array
 * with two distinct nonzero strides decides; on equal strides the smaller
 * dim goes inside. */
static int dim_swap(const xk_space *s, const int *order, int d0, int d1) {
  for (int q = 0; q < s->narr; q++) {
    const xk_arr *a = &s->arr[order[q]];
    if (a->iota) continue;
    int64_t s0 = llabs(a->st[d0]), s1 = llabs(a->st[d1]);
    if (s0 == 0 || s1 == 0) continue;
    if (s0 < s1) return -1;
    if (s0 > s1) return 1;
    if (s->sz[d0] > s->sz[d1]) return 1;
  }
  return 0;
}

/* Whether the element order can change: no written array shares memory
 * with another array laid out differently (an identical view, an in-place
 * update, reads each element before writing it in any order). */
static int order_free(const xk_space *s, const char *written) {
  for (int w = 0; w < s->narr; w++) {
    if (!written[w]) continue;
    tpu_view vw = arr_view(s, &s->arr[w]);
    for (int a = 0; a < s->narr; a++) {
      if (a == w || s->arr[a].iota) continue;
      tpu_view va = arr_view(s, &s->arr[a]);
      if (tpux__views_overlap(&vw, &va) && !tpux__views_same(&vw, &va)) return 0;
    }
  }
  return 1;
}

/* The space's element order for memory (elementwise work only, every
 * element independent; written[a]: array a is stored into): the dims
 * sorted by the arrays' strides, written arrays deciding first, then
 * coalesced. A transposed output and input in the same layout (PyTorch's
 * preserved layout: x.t() * s) are then walked in memory order, not
 * element by element across rows (Zen 3, 1M floats: 5.0 -> 0.36 ms). Left
 * in logical order when a written array overlaps an array laid out
 * differently (the order would decide what is read). A transpose between
 * arrays stays a gather along the inner dim: 32 x 32 blocks through the
 * tile loads (short runs) were twice as slow. */
void tpux__space_order(xk_space *s, const char *written) {
  int nd = s->nd, order[XK_MAX_ARR], n = 0, perm[TPU_MAX_DIMS], moved = 0;
  for (int a = 0; a < s->narr; a++)
    if (written[a]) order[n++] = a;
  for (int a = 0; a < s->narr; a++)
    if (!written[a]) order[n++] = a;
  for (int i = 0; i < nd; i++) perm[i] = nd - 1 - i; /* innermost first */
  for (int i = 1; i < nd; i++) { /* insertion sort, as TensorIterator */
    int d1 = i;
    for (int d0 = i - 1; d0 >= 0; d0--) {
      int c = dim_swap(s, order, perm[d0], perm[d1]);
      if (c > 0) {
        int t = perm[d0];
        perm[d0] = perm[d1];
        perm[d1] = t;
        d1 = d0;
        moved = 1;
      } else if (c < 0) {
        break;
      }
    }
  }
  if (moved && tpux__space_numel(s) > 0 && order_free(s, written)) {
    int64_t t[TPU_MAX_DIMS];
    for (int i = 0; i < nd; i++) t[i] = s->sz[perm[nd - 1 - i]];
    memcpy(s->sz, t, (size_t)nd * sizeof t[0]);
    for (int a = 0; a < s->narr; a++) {
      for (int i = 0; i < nd; i++) t[i] = s->arr[a].st[perm[nd - 1 - i]];
      memcpy(s->arr[a].st, t, (size_t)nd * sizeof t[0]);
    }
  }
  tpux__space_coalesce(s);
}

/* The multi-index of linear index L of the space (a division per dim). */
static void space_index(const xk_space *s, int64_t L, int64_t *idx) {
  for (int d = s->nd - 1; d >= 0; d--) {
    int64_t q = L / s->sz[d];
    idx[d] = L - q * s->sz[d];
    L = q;
  }
}

/* Element offset of array a at multi-index idx. */
static int64_t index_offset(const xk_space *s, int a, const int64_t *idx) {
  int64_t off = 0;
  for (int d = 0; d < s->nd; d++) off += idx[d] * s->arr[a].st[d];
  return off;
}

/* Round/wrap a class buffer to dtype dt in place. */
CLONES static void norm_buf(int dt, int64_t n, void *buf) {
  switch (dt) {
  case TPU_BF16: { float *f = buf; for (int64_t i = 0; i < n; i++) f[i] = xk_round_bf16(f[i]); break; }
  case TPU_F16: { float *f = buf; for (int64_t i = 0; i < n; i++) f[i] = (float)(_Float16)f[i]; break; }
  case TPU_BOOL: { int64_t *v = buf; for (int64_t i = 0; i < n; i++) v[i] = v[i] != 0; break; }
  case TPU_U8: { int64_t *v = buf; for (int64_t i = 0; i < n; i++) v[i] = (uint8_t)v[i]; break; }
  case TPU_I8: { int64_t *v = buf; for (int64_t i = 0; i < n; i++) v[i] = (int8_t)v[i]; break; }
  case TPU_I16: { int64_t *v = buf; for (int64_t i = 0; i < n; i++) v[i] = (int16_t)v[i]; break; }
  case TPU_I32: { int64_t *v = buf; for (int64_t i = 0; i < n; i++) v[i] = (int32_t)v[i]; break; }
  default: break;
  }
}

/* Load n values v0, v0 + stride, ... of an IOTA of dtype dt into its class
 * buffer, as tpux__eval_iota stores and tpux__load reads them back. */
CLONES static void iota_load(int dt, int64_t v0, int64_t stride, int64_t n, void *dst) {
  int cls = xk_cls(dt);
  if (cls == XK_F32) {
    float *f = dst;
    for (int64_t i = 0; i < n; i++) f[i] = (float)(v0 + i * stride);
  } else if (cls == XK_F64) {
    double *d = dst;
    for (int64_t i = 0; i < n; i++) d[i] = (double)(v0 + i * stride);
  } else {
    int64_t *v = dst;
    for (int64_t i = 0; i < n; i++) v[i] = v0 + i * stride;
  }
  if (dt != TPU_F32 && dt != TPU_F64 && dt != TPU_I64) norm_buf(dt, n, dst);
}

/* Transfers of space_xfer: gather into class buffers, scatter from them,
 * gather a bool array's bytes as they are (a native kernel's mask). */
enum { XF_LOAD, XF_STORE, XF_BYTES };

/* Gather/scatter the linear range [L, L+n) of array a to/from a buffer. */
static void space_xfer(const xk_space *s, int a, int64_t L, int64_t n,
                       void *buf, int mode) {
  const xk_arr *ar = &s->arr[a];
  size_t es = tpu_dtype_size(ar->dt);
  size_t bs = 8; /* class buffers: float uses 4 */
  if (xk_cls(ar->dt) == XK_F32) bs = 4;
  if (mode == XF_BYTES) bs = es;
  int64_t idx[TPU_MAX_DIMS];
  space_index(s, L, idx);
  int64_t off = index_offset(s, a, idx);
  int nd = s->nd;
  int64_t inner = s->sz[nd - 1], ist = ar->st[nd - 1];
  char *b = buf;
  while (n > 0) {
    int64_t seg = inner - idx[nd - 1];
    if (seg > n) seg = n;
    if (ar->iota) { /* never stored into, never bytes */
      iota_load(ar->dt, ar->io + off, ist, seg, b);
    } else {
      char *p = ar->p + off * (int64_t)es;
      if (mode == XF_STORE) tpux__store(ar->dt, p, ist, seg, b);
      else if (mode == XF_LOAD) tpux__load(ar->dt, p, ist, seg, b);
      else if (ist == 1) memcpy(b, p, (size_t)seg);
      else if (ist == 0) memset(b, *p, (size_t)seg);
      else for (int64_t i = 0; i < seg; i++) b[i] = p[i * ist];
    }
    b += seg * (int64_t)bs;
    n -= seg;
    if (n == 0) break;
    /* advance to the start of the next row */
    off += (inner - idx[nd - 1]) * ist;
    idx[nd - 1] = 0;
    off -= inner * ist;
    for (int d = nd - 2; d >= 0; d--) {
      idx[d]++;
      off += ar->st[d];
      if (idx[d] < s->sz[d]) break;
      off -= s->sz[d] * ar->st[d];
      idx[d] = 0;
    }
  }
}

/* ---- kernels ------------------------------------------------------------ */

/* erfinv: rational approximation + two Newton steps (as PyTorch). */
static double erfinv_d(double y) {
  static const double a[4] = {0.886226899, -1.645349621, 0.914624893, -0.140543331};
  static const double b[4] = {-2.118377725, 1.442710462, -0.329097515, 0.012229801};
  static const double c[4] = {-1.970840454, -1.624906493, 3.429567803, 1.641345311};
  static const double d[2] = {3.543889200, 1.637067800};
  double ya = fabs(y), x;
  if (!(ya <= 1.0)) return NAN;
  if (ya == 1.0) return copysign(INFINITY, y);
  if (ya <= 0.7) {
    double z = y * y;
    double num = ((a[3] * z + a[2]) * z + a[1]) * z + a[0];
    double dem = (((b[3] * z + b[2]) * z + b[1]) * z + b[0]) * z + 1.0;
    x = y * num / dem;
  } else {
    double z = sqrt(-log((1.0 - ya) / 2.0));
    double num = ((c[3] * z + c[2]) * z + c[1]) * z + c[0];
    double dem = (d[1] * z + d[0]) * z + 1.0;
    x = copysign(num, y) / dem;
  }
  const double k = 1.1283791670955126; /* 2/sqrt(pi) */
  x = x - (erf(x) - y) / (k * exp(-x * x));
  x = x - (erf(x) - y) / (k * exp(-x * x));
  return x;
}
static float erfinv_f(float y) {
  static const float a[4] = {0.886226899f, -1.645349621f, 0.914624893f, -0.140543331f};
  static const float b[4] = {-2.118377725f, 1.442710462f, -0.329097515f, 0.012229801f};
  static const float c[4] = {-1.970840454f, -1.624906493f, 3.429567803f, 1.641345311f};
  static const float d[2] = {3.543889200f, 1.637067800f};
  float ya = fabsf(y), x;
  if (!(ya <= 1.0f)) return NAN;
  if (ya == 1.0f) return copysignf(INFINITY, y);
  if (ya <= 0.7f) {
    float z = y * y;
    float num = ((a[3] * z + a[2]) * z + a[1]) * z + a[0];
    float dem = (((b[3] * z + b[2]) * z + b[1]) * z + b[0]) * z + 1.0f;
    x = y * num / dem;
  } else {
    float z = sqrtf(-logf((1.0f - ya) / 2.0f));
    float num = ((c[3] * z + c[2]) * z + c[1]) * z + c[0];
    float dem = (d[1] * z + d[0]) * z + 1.0f;
    x = copysignf(num, y) / dem;
  }
  const float k = 1.1283791670955126f;
  x = x - (erff(x) - y) / (k * expf(-x * x));
  x = x - (erff(x) - y) / (k * expf(-x * x));
  return x;
}

/* digamma as PyTorch's calc_digamma (reflection for x < 0, recurrence up
 * to x >= 10, asymptotic series). digamma(+-0) = -+inf. */
static double digamma_d(double x) {
  static const double PSI_10 = 2.25175258906672110764;
  if (x == 0) return copysign(INFINITY, -x);
  if (x < 0) {
    if (x == trunc(x)) return NAN;
    double q, r = modf(x, &q);
    return digamma_d(1 - x) - M_PI / tan(M_PI * r);
  }
  double result = 0;
  while (x < 10) {
    result -= 1 / x;
    x += 1;
  }
  if (x == 10) return result + PSI_10;
  static const double A[] = {8.33333333333333333333E-2, -2.10927960927960927961E-2,
                             7.57575757575757575758E-3, -4.16666666666666666667E-3,
                             3.96825396825396825397E-3, -8.33333333333333333333E-3,
                             8.33333333333333333333E-2};
  double y = 0;
  if (x < 1.0e17) {
    double z = 1.0 / (x * x), p = 0;
    for (int i = 0; i < 7; i++) p = p * z + A[i];
    y = z * p;
  }
  return result + log(x) - (0.5 / x) - y;
}
static float digamma_f(float x) {
  static const float PSI_10 = 2.25175258906672110764f;
  if (x == 0) return copysignf(INFINITY, -x);
  if (x < 0) {
    if (x == truncf(x)) return NAN;
    double q, r = modf((double)x, &q);
    float pi_over_tan = (float)(M_PI / tan(M_PI * r));
    return digamma_f(1 - x) - pi_over_tan;
  }
  float result = 0;
  while (x < 10) {
    result -= 1 / x;
    x += 1;
  }
  if (x == 10) return result + PSI_10;
  static const float A[] = {8.33333333333333333333E-2f, -2.10927960927960927961E-2f,
                            7.57575757575757575758E-3f, -4.16666666666666666667E-3f,
                            3.96825396825396825397E-3f, -8.33333333333333333333E-3f,
                            8.33333333333333333333E-2f};
  float y = 0;
  if (x < 1.0e17f) {
    float z = 1 / (x * x), p = 0;
    for (int i = 0; i < 7; i++) p = p * z + A[i];
    y = z * p;
  }
  return result + logf(x) - (0.5f / x) - y;
}

static double lgamma_d(double x) {
  int s;
  return lgamma_r(x, &s);
}
static float lgamma_f(float x) {
  int s;
  return lgammaf_r(x, &s);
}

/* Float-class kernel body: T = float/double, S = libm suffix (f or empty),
 * X = suffix of the local helpers (_f / _d). */
#define EW_FLOAT_BODY(T, S, X)                                                 \
  const T *a = (const T *)va, *b = (const T *)vb;                              \
  T *r = (T *)vr;                                                              \
  int64_t *ri = (int64_t *)vr;                                                 \
  switch (op) {                                                                \
  UN(TPUIR_NEG, -x)                                                            \
  UN(TPUIR_ABS, fabs##S(x))                                                    \
  UN(TPUIR_SIGN, (T)((x > 0) - (x < 0))) /* torch: sign(NaN) = 0 */                           \
  UN(TPUIR_EXP, fexp##X(x))                                                     \
  UN(TPUIR_EXPM1, expm1##S(x))                                                 \
  UN(TPUIR_LOG, flog##X(x))                                                     \
  UN(TPUIR_LOG1P, log1p##S(x))                                                 \
  case TPUIR_SQRT: vsqrt##X(n, r, a, 0); break;                                \
  case TPUIR_RSQRT: vsqrt##X(n, r, a, 1); break;                               \
  UN(TPUIR_SIN, sin##S(x))                                                     \
  UN(TPUIR_COS, cos##S(x))                                                     \
  UN(TPUIR_TAN, tan##S(x))                                                     \
  UN(TPUIR_TANH, ftanh##X(x))                                                   \
  UN(TPUIR_ASIN, asin##S(x))                                                   \
  UN(TPUIR_ACOS, acos##S(x))                                                   \
  UN(TPUIR_ATAN, atan##S(x))                                                   \
  UN(TPUIR_SINH, sinh##S(x))                                                   \
  UN(TPUIR_COSH, cosh##S(x))                                                   \
  UN(TPUIR_ASINH, asinh##S(x))                                                 \
  UN(TPUIR_ACOSH, acosh##S(x))                                                 \
  UN(TPUIR_ATANH, atanh##S(x))                                                 \
  UN(TPUIR_LOGISTIC, logistic##X(x))                                           \
  UN(TPUIR_ERF, ferf##X(x))                                                     \
  UN(TPUIR_ERFINV, erfinv##X(x))                                               \
  UN(TPUIR_LGAMMA, lgamma##X(x))                                               \
  UN(TPUIR_DIGAMMA, digamma##X(x))                                             \
  UN(TPUIR_FLOOR, floor##S(x))                                                 \
  UN(TPUIR_CEIL, ceil##S(x))                                                   \
  UN(TPUIR_ROUND_EVEN, nearbyint##S(x))                                        \
  UN(TPUIR_TRUNC, trunc##S(x))                                                 \
  UNI(TPUIR_IS_FINITE, isfinite(x) ? 1 : 0)                                    \
  UNI(TPUIR_IS_NAN, x != x)                                                    \
  UNI(TPUIR_IS_INF, isinf(x) ? 1 : 0)                                          \
  BIN(TPUIR_ADD, x + y)                                                        \
  BIN(TPUIR_SUB, x - y)                                                        \
  BIN(TPUIR_MUL, x * y)                                                        \
  BIN(TPUIR_DIV, x / y)                                                        \
  BIN(TPUIR_REM, fmod##S(x, y))                                                \
  BIN(TPUIR_POW, pow##S(x, y))                                                 \
  BIN(TPUIR_MAX, (x > y || x != x) ? x : y)                                    \
  BIN(TPUIR_MIN, (x < y || x != x) ? x : y)                                    \
  BIN(TPUIR_ATAN2, atan2##S(x, y))                                             \
  CMP(TPUIR_EQ, x == y)                                                        \
  CMP(TPUIR_NE, x != y)                                                        \
  CMP(TPUIR_LT, x < y)                                                         \
  CMP(TPUIR_LE, x <= y)                                                        \
  CMP(TPUIR_GT, x > y)                                                         \
  CMP(TPUIR_GE, x >= y)                                                        \
  default: return TPU_E_INTERNAL;                                              \
  }                                                                            \
  return TPU_OK;

#define UN(OPC, EXPR)                                                          \
  case OPC:                                                                    \
    for (int64_t i = 0; i < n; i++) {                                          \
      __auto_type x = a[i];                                                    \
      r[i] = (EXPR);                                                           \
    }                                                                          \
    break;
#define UNI(OPC, EXPR)                                                         \
  case OPC:                                                                    \
    for (int64_t i = 0; i < n; i++) {                                          \
      __auto_type x = a[i];                                                    \
      ri[i] = (EXPR);                                                          \
    }                                                                          \
    break;
#define BIN(OPC, EXPR)                                                         \
  case OPC:                                                                    \
    for (int64_t i = 0; i < n; i++) {                                          \
      __auto_type x = a[i];                                                    \
      __auto_type y = b[i];                                                    \
      r[i] = (EXPR);                                                           \
    }                                                                          \
    break;
#define CMP(OPC, EXPR)                                                         \
  case OPC:                                                                    \
    for (int64_t i = 0; i < n; i++) {                                          \
      __auto_type x = a[i];                                                    \
      __auto_type y = b[i];                                                    \
      ri[i] = (EXPR);                                                          \
    }                                                                          \
    break;

/* exp, log, erf, tanh: float32 runs through SLEEF (tpux__vmath_f32, before
 * this portable body is reached); these are the libm references the
 * portable body names. */
static inline float fexp_f(float x) { return expf(x); }
static inline double fexp_d(double x) { return exp(x); }
static inline float flog_f(float x) { return logf(x); }
static inline double flog_d(double x) { return log(x); }
static inline float ferf_f(float x) { return erff(x); }
static inline double ferf_d(double x) { return erf(x); }
static inline float ftanh_f(float x) { return tanhf(x); }
static inline double ftanh_d(double x) { return tanh(x); }

/* sqrt / rsqrt without libm's errno path (which blocks vectorisation). */
__attribute__((target("avx512f"))) static void vsqrt_f32_512(int64_t n, float *r,
                                                            const float *a,
                                                            int inv) {
  int64_t i = 0;
  const __m512 one = _mm512_set1_ps(1.0f);
  for (; i + 16 <= n; i += 16) {
    __m512 v = _mm512_sqrt_ps(_mm512_loadu_ps(a + i));
    _mm512_storeu_ps(r + i, inv ? _mm512_div_ps(one, v) : v);
  }
  for (; i < n; i++) {
    float v = _mm_cvtss_f32(_mm_sqrt_ss(_mm_set_ss(a[i])));
    r[i] = inv ? 1.0f / v : v;
  }
}
static void vsqrt_f(int64_t n, float *r, const float *a, int inv) {
  if (__builtin_cpu_supports("avx512f")) {
    vsqrt_f32_512(n, r, a, inv);
    return;
  }
  int64_t i = 0;
  const __m128 one = _mm_set1_ps(1.0f);
  for (; i + 4 <= n; i += 4) {
    __m128 v = _mm_sqrt_ps(_mm_loadu_ps(a + i));
    _mm_storeu_ps(r + i, inv ? _mm_div_ps(one, v) : v);
  }
  for (; i < n; i++) {
    float v = _mm_cvtss_f32(_mm_sqrt_ss(_mm_set_ss(a[i])));
    r[i] = inv ? 1.0f / v : v;
  }
}
static void vsqrt_d(int64_t n, double *r, const double *a, int inv) {
  int64_t i = 0;
  const __m128d one = _mm_set1_pd(1.0);
  for (; i + 2 <= n; i += 2) {
    __m128d v = _mm_sqrt_pd(_mm_loadu_pd(a + i));
    _mm_storeu_pd(r + i, inv ? _mm_div_pd(one, v) : v);
  }
  for (; i < n; i++) {
    __m128d v = _mm_sqrt_sd(_mm_setzero_pd(), _mm_set_sd(a[i]));
    r[i] = inv ? 1.0 / _mm_cvtsd_f64(v) : _mm_cvtsd_f64(v);
  }
}

static inline float logistic_f(float x) {
  float e = fexp_f(-fabsf(x));
  return x >= 0 ? 1.0f / (1.0f + e) : e / (1.0f + e);
}
static inline double logistic_d(double x) {
  double e = exp(-fabs(x));
  return x >= 0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
}

CLONES static int ew_f32(int op, int64_t n, void *vr, const void *va,
                         const void *vb) {
  EW_FLOAT_BODY(float, f, _f)
}

CLONES static int ew_f64(int op, int64_t n, void *vr, const void *va,
                         const void *vb) {
  EW_FLOAT_BODY(double, , _d)
}

static int64_t ipow(int64_t base, int64_t e) {
  uint64_t r = 1, b = (uint64_t)base;
  while (e) {
    if (e & 1) r *= b;
    b *= b;
    e >>= 1;
  }
  return (int64_t)r;
}

CLONES static int ew_i64(int op, int dt, int64_t n, void *vr, const void *va,
                         const void *vb, int64_t *bad) {
  const int64_t *a = va, *b = vb;
  int64_t *r = vr, *ri = vr;
  int bits = (int)tpu_dtype_size(dt) * 8;
  switch (op) {
  UN(TPUIR_NEG, (int64_t)(0ull - (uint64_t)x))
  UN(TPUIR_ABS, x < 0 ? (int64_t)(0ull - (uint64_t)x) : x)
  UN(TPUIR_SIGN, (int64_t)((x > 0) - (x < 0)))
  case TPUIR_FLOOR: case TPUIR_CEIL: case TPUIR_ROUND_EVEN: case TPUIR_TRUNC:
    if (r != a) memcpy(r, a, (size_t)n * 8);
    break;
  case TPUIR_NOT:
    if (dt == TPU_BOOL)
      for (int64_t i = 0; i < n; i++) r[i] = !a[i];
    else
      for (int64_t i = 0; i < n; i++) r[i] = ~a[i];
    break;
  UNI(TPUIR_IS_FINITE, (int64_t)1 + 0 * x)
  UNI(TPUIR_IS_NAN, (int64_t)0 * x)
  UNI(TPUIR_IS_INF, (int64_t)0 * x)
  BIN(TPUIR_ADD, (int64_t)((uint64_t)x + (uint64_t)y))
  BIN(TPUIR_SUB, (int64_t)((uint64_t)x - (uint64_t)y))
  BIN(TPUIR_MUL, (int64_t)((uint64_t)x * (uint64_t)y))
  case TPUIR_DIV:
  case TPUIR_REM: {
    int z = 0;
    for (int64_t i = 0; i < n; i++) z |= b[i] == 0;
    if (z) {
      *bad = 0;
      return TPU_E_INVALID;
    }
    if (op == TPUIR_DIV)
      for (int64_t i = 0; i < n; i++)
        r[i] = b[i] == -1 ? (int64_t)(0ull - (uint64_t)a[i]) : a[i] / b[i];
    else
      for (int64_t i = 0; i < n; i++) r[i] = b[i] == -1 ? 0 : a[i] % b[i];
    break;
  }
  case TPUIR_POW:
    for (int64_t i = 0; i < n; i++)
      if (b[i] < 0) {
        *bad = b[i];
        return TPU_E_INVALID;
      }
    for (int64_t i = 0; i < n; i++) r[i] = ipow(a[i], b[i]);
    break;
  BIN(TPUIR_MAX, x > y ? x : y)
  BIN(TPUIR_MIN, x < y ? x : y)
  BIN(TPUIR_AND, x & y)
  BIN(TPUIR_OR, x | y)
  BIN(TPUIR_XOR, x ^ y)
  BIN(TPUIR_SHL, (y < 0 || y >= bits) ? 0 : (int64_t)((uint64_t)x << y))
  case TPUIR_SHR: {
    int maxs = bits - (dt != TPU_U8);
    for (int64_t i = 0; i < n; i++) {
      int64_t x = a[i], y = b[i];
      r[i] = (y < 0 || y >= maxs) ? x >> maxs : x >> y;
    }
    break;
  }
  CMP(TPUIR_EQ, x == y)
  CMP(TPUIR_NE, x != y)
  CMP(TPUIR_LT, x < y)
  CMP(TPUIR_LE, x <= y)
  CMP(TPUIR_GT, x > y)
  CMP(TPUIR_GE, x >= y)
  default: return TPU_E_INTERNAL;
  }
  return TPU_OK;
}

/* Class conversion for CONVERT (target dtype dt). */
CLONES static void convert_buf(int from_dt, int dt, int64_t n, void *vr,
                               const void *va) {
  int fc = xk_cls(from_dt), tc = xk_cls(dt);
  if (fc == XK_F32) {
    const float *a = va;
    if (tc == XK_F32) { if (vr != va) memcpy(vr, va, (size_t)n * 4); }
    else if (tc == XK_F64) { double *r = vr; for (int64_t i = 0; i < n; i++) r[i] = a[i]; }
    else {
      int64_t *r = vr;
      if (dt == TPU_BOOL) for (int64_t i = 0; i < n; i++) r[i] = a[i] != 0;
      else if (dt == TPU_I64) for (int64_t i = 0; i < n; i++) r[i] = xk_f2i64(a[i]);
      else for (int64_t i = 0; i < n; i++) r[i] = xk_f2i32(a[i]);
    }
  } else if (fc == XK_F64) {
    const double *a = va;
    if (tc == XK_F32) { float *r = vr; for (int64_t i = 0; i < n; i++) r[i] = (float)a[i]; }
    else if (tc == XK_F64) { if (vr != va) memcpy(vr, va, (size_t)n * 8); }
    else {
      int64_t *r = vr;
      if (dt == TPU_BOOL) for (int64_t i = 0; i < n; i++) r[i] = a[i] != 0;
      else if (dt == TPU_I64) for (int64_t i = 0; i < n; i++) r[i] = xk_f2i64(a[i]);
      else for (int64_t i = 0; i < n; i++) r[i] = xk_f2i32(a[i]);
    }
  } else {
    const int64_t *a = va;
    if (tc == XK_F32) { float *r = vr; for (int64_t i = 0; i < n; i++) r[i] = (float)a[i]; }
    else if (tc == XK_F64) { double *r = vr; for (int64_t i = 0; i < n; i++) r[i] = (double)a[i]; }
    else if (vr != va) memcpy(vr, va, (size_t)n * 8);
  }
}

CLONES static void select_buf(int cls, int64_t n, void *vr, const int64_t *p,
                              const void *vb, const void *vc) {
  if (cls == XK_F32) {
    float *r = vr;
    const float *b = vb, *c = vc;
    for (int64_t i = 0; i < n; i++) r[i] = p[i] ? b[i] : c[i];
  } else {
    int64_t *r = vr; /* double and int64 move as bits */
    const int64_t *b = vb, *c = vc;
    for (int64_t i = 0; i < n; i++) r[i] = p[i] ? b[i] : c[i];
  }
}

static int is_special(int op) { /* XK_OP_COPY is no IR op */
  const tpuir_op_info_t *oi = tpuir_op_info(op);
  return oi && (oi->cls == TPUIR_CLASS_SPECIAL1 || oi->cls == TPUIR_CLASS_SPECIAL2);
}

int tpux__ew_apply(const xk_ins *in, int64_t n, void *r, const void *a,
                   const void *b, const void *c, int64_t *bad) {
  int rc = TPU_OK;
  if (in->op == TPUIR_CONVERT) {
    convert_buf(in->in_dt, in->dt, n, r, a);
  } else if (in->op == TPUIR_SELECT) {
    select_buf(xk_cls(in->in_dt), n, r, a, b, c);
  } else if (is_special(in->op)) {
    rc = tpux__special_apply(in->op, in->in_dt, n, r, a, b);
  } else {
    switch (xk_cls(in->in_dt)) {
    case XK_F32:
      if (!tpux__vmath_f32(in->op, n, r, a, b)) rc = ew_f32(in->op, n, r, a, b);
      break;
    case XK_F64: rc = ew_f64(in->op, n, r, a, b); break;
    default: rc = ew_i64(in->op, in->in_dt, n, r, a, b, bad); break;
    }
  }
  if (rc == TPU_OK && in->norm) norm_buf(in->dt, n, r);
  return rc;
}

/* ---- direct kernels ----------------------------------------------------- */

/* r may be one of the operands (a buffer reused by the allocator), never a
 * partly overlapping range: element i is read before it is written, so the
 * loops vectorise without run-time overlap checks falling back to scalar */
#define IVDEP _Pragma("GCC ivdep")

/* The common float ops of fused chains, one function each (vector-vector,
 * vector-scalar, scalar-vector), bound to their instructions once by
 * tpux__prog_finish: an instruction then costs one indirect call instead of
 * the generic dispatch (op table, vector-math and class switches), which
 * matters once tiles are small enough to stay in L1. A broadcast scalar
 * operand is read as a value, not as a tile of copies (in a fused chain,
 * the scalars' tiles would crowd L1). The expressions are those of
 * EW_FLOAT_BODY, so results are identical. */
#define FK(NAME, EXPR)                                                         \
  CLONES static void fk_##NAME##_vv(int64_t n, float *r, const void *va,      \
                                    const void *vb, const void *vc, float s) { \
    const float *a = va, *b = vb;                                              \
    IVDEP for (int64_t i = 0; i < n; i++) { float x = a[i], y = b[i]; r[i] = (EXPR); } \
  }                                                                            \
  CLONES static void fk_##NAME##_vs(int64_t n, float *r, const void *va,      \
                                    const void *vb, const void *vc, float s) { \
    const float *a = va;                                                       \
    IVDEP for (int64_t i = 0; i < n; i++) { float x = a[i], y = s; r[i] = (EXPR); }  \
  }                                                                            \
  CLONES static void fk_##NAME##_sv(int64_t n, float *r, const void *va,      \
                                    const void *vb, const void *vc, float s) { \
    const float *a = va;                                                       \
    IVDEP for (int64_t i = 0; i < n; i++) { float x = s, y = a[i]; r[i] = (EXPR); }  \
  }
FK(add, x + y)
FK(sub, x - y)
FK(mul, x * y)
FK(div, x / y)
FK(max, (x > y || x != x) ? x : y)
FK(min, (x < y || x != x) ? x : y)
#undef FK

CLONES static void fk_neg(int64_t n, float *r, const void *va, const void *vb,
                          const void *vc, float s) {
  const float *a = va;
  IVDEP for (int64_t i = 0; i < n; i++) r[i] = -a[i];
}
static void fk_sqrt(int64_t n, float *r, const void *va, const void *vb,
                    const void *vc, float s) {
  vsqrt_f(n, r, va, 0);
}
static void fk_rsqrt(int64_t n, float *r, const void *va, const void *vb,
                     const void *vc, float s) {
  vsqrt_f(n, r, va, 1);
}
CLONES static void fk_select(int64_t n, float *r, const void *vp, const void *vb,
                             const void *vc, float s) {
  const int64_t *p = vp;
  const float *b = vb, *c = vc;
  IVDEP for (int64_t i = 0; i < n; i++) r[i] = p[i] ? b[i] : c[i];
}

/* Two instructions in one pass: r = f2(f1(a, b), c) (_l) or f2(c, f1(a, b))
 * (_r), where the inner value has no other use, for f1, f2 among + - * /:
 * one store and one load of a tile fewer. The inner value is rounded to
 * float as a separate instruction's would be (no contraction), so results
 * are identical. */
#define FP_SIDE(N1, E1, N2, E2, SIDE, X, Y)                                    \
  CLONES static void fp_##N1##_##N2##_##SIDE(int64_t n, float *r, const void *va, \
                                             const void *vb, const void *vc,   \
                                             float s) {                        \
    const float *a = va, *b = vb, *c = vc;                                     \
    IVDEP for (int64_t i = 0; i < n; i++) {                                    \
      float x = a[i], y = b[i], t = (E1);                                      \
      x = (X), y = (Y);                                                        \
      r[i] = (E2);                                                             \
    }                                                                          \
  }
#define FP(N1, E1, N2, E2)                                                     \
  FP_SIDE(N1, E1, N2, E2, l, t, c[i]) FP_SIDE(N1, E1, N2, E2, r, c[i], t)
#define FP_ROW(N1, E1)                                                         \
  FP(N1, E1, add, x + y) FP(N1, E1, sub, x - y) FP(N1, E1, mul, x * y)         \
  FP(N1, E1, div, x / y)
FP_ROW(add, x + y)
FP_ROW(sub, x - y)
FP_ROW(mul, x * y)
FP_ROW(div, x / y)
#undef FP_ROW
#undef FP
#undef FP_SIDE
#define FP_ENT(N1, N2) {fp_##N1##_##N2##_l, fp_##N1##_##N2##_r}
#define FP_ROW(N1) {FP_ENT(N1, add), FP_ENT(N1, sub), FP_ENT(N1, mul), FP_ENT(N1, div)}
static const xk_fast_fn fp_tab[4][4][2] = {FP_ROW(add), FP_ROW(sub), FP_ROW(mul), FP_ROW(div)};
#undef FP_ROW
#undef FP_ENT

/* index of + - * / in fp_tab, -1 for other ops */
static int fp_op(int op) {
  switch (op) {
  case TPUIR_ADD: return 0;
  case TPUIR_SUB: return 1;
  case TPUIR_MUL: return 2;
  case TPUIR_DIV: return 3;
  default: return -1;
  }
}

/* The kernel of a two-operand float op (+ - * / max min), with operand a
 * (sa) or b (sb) read as a broadcast scalar; NULL for other ops. */
static xk_fast_fn fast_binary(int op, int sa, int sb) {
#define PICK(NAME) return sa ? fk_##NAME##_sv : sb ? fk_##NAME##_vs : fk_##NAME##_vv
  switch (op) {
  case TPUIR_ADD: PICK(add);
  case TPUIR_SUB: PICK(sub);
  case TPUIR_MUL: PICK(mul);
  case TPUIR_DIV: PICK(div);
  case TPUIR_MAX: PICK(max);
  case TPUIR_MIN: PICK(min);
  default: return NULL;
  }
#undef PICK
}

/* Elements per tile of a program run (p->pt): the most, up to XK_TILE,
 * whose tile buffers fit in XK_PT_BYTES, so they stay in L1 between
 * instructions; at least XK_PT_MIN (per-tile costs). A one-op program gets
 * long tiles, a long chain short ones. */
#define XK_PT_BYTES 16384
#define XK_PT_MIN 256
#define XK_TILE_ONE 16384 /* a one-instruction program's tiles */
/* what a run does with an instruction (planned by tpux__prog_fill_consts) */
enum { XR_SKIP = 0, XR_RUN = 1, XR_TAKE_B = 2, XR_TAKE_C = 3 };

void tpux__prog_finish(xk_prog *p) {
  /* a stored value holds its buffer to the end of the program: its
   * producer is the last instruction writing that buffer */
  for (int k = 0; k < p->nstore; k++) {
    p->store_prod[k] = -1;
    for (int j = 0; j < p->nins; j++)
      if (p->ins[j].r == p->store[k].buf) p->store_prod[k] = (int16_t)j;
  }
  p->jit = tpux__jit_bind(p);
  /* bytes an element of each buffer: 8 if any value it holds (a physical
   * buffer is reused across classes; bufcls is its last holder's) is
   * double or integer, else 4 */
  int8_t esz[XK_MAX_BUF];
  for (int b = 0; b < p->nbuf; b++) esz[b] = p->bufcls[b] != XK_F32 ? 8 : 4;
  for (int k = 0; k < p->nload; k++)
    if (xk_cls(p->sp.arr[p->load[k].arr].dt) != XK_F32) esz[p->load[k].buf] = 8;
  for (int j = 0; j < p->nins; j++)
    if (xk_cls(p->ins[j].dt) != XK_F32) esz[p->ins[j].r] = 8;
  int32_t per = 0; /* bytes of all buffers per element */
  for (int b = 0; b < p->nbuf; b++) per += esz[b];
  p->pt = XK_TILE; /* a native kernel keeps values in registers: long tiles */
  while (!p->jit && p->pt > XK_PT_MIN && p->pt * per > XK_PT_BYTES) p->pt /= 2;
  /* one instruction keeps no value between instructions: its buffers only
   * stage gathered loads and stores, so its tiles are long. Strict a * b on
   * 256K floats: 1.82 -> 0.82 instructions per element in the workers (the
   * multiply itself 0.77), on a Zen 3 1.3-2.2x -> 1.2-1.4x torch's time */
  if (!p->jit && p->nins == 1) p->pt = XK_TILE_ONE;
  int32_t off = 0;
  for (int b = 0; b < p->nbuf; b++) {
    p->boff[b] = off;
    off += p->pt * esz[b];
  }
  p->jit_soff = off;
  if (p->jit) off += p->nstore * 8 * p->pt;
  p->moff = off;
  p->scratch_bytes = off + ((XK_MAX_INS + 63) & ~63); /* 64-byte multiple */
  if (p->jit) return;
  const int8_t *cst = p->buf_const;
  for (int j = 0; j < p->nins; j++) {
    const xk_ins *in = &p->ins[j];
    xk_fast_fn fn = NULL;
    p->fa[j] = in->a, p->fb[j] = in->b, p->fc[j] = in->c, p->fs[j] = -1;
    if (xk_cls(in->in_dt) == XK_F32 && xk_cls(in->dt) == XK_F32) {
      int two = in->a >= 0 && in->b >= 0 && in->c < 0;
      /* one broadcast-scalar operand: read as a value, not a tile */
      int sa = two && cst[in->a] && !cst[in->b], sb = two && cst[in->b] && !cst[in->a];
      fn = two ? fast_binary(in->op, sa, sb) : NULL;
      switch (in->op) {
      case TPUIR_NEG: fn = fk_neg; break;
      case TPUIR_SQRT: fn = fk_sqrt; break;
      case TPUIR_RSQRT: fn = fk_rsqrt; break;
      case TPUIR_SELECT: fn = fk_select; break;
      default: break;
      }
      if (fn && sa) p->fa[j] = in->b, p->fs[j] = in->a;
      if (fn && sb) p->fs[j] = in->b;
    }
    p->fn[j] = fn;
  }
  /* pairs: + - * / feeding the next + - * / and nothing else */
  for (int j = 0; j + 1 < p->nins; j++) {
    const xk_ins *i1 = &p->ins[j], *i2 = &p->ins[j + 1];
    int o1 = fp_op(i1->op), o2 = fp_op(i2->op), t = i1->r;
    if (o1 < 0 || o2 < 0 || !p->fn[j] || !p->fn[j + 1] || i1->norm || i2->norm ||
        (i2->a == t) == (i2->b == t))
      continue;
    int single = 1;
    for (int k = 0; k < p->nstore; k++) single &= p->store_prod[k] != j;
    for (int k = j + 2; k < p->nins && single; k++) {
      const xk_ins *q = &p->ins[k];
      single = q->a != t && q->b != t && q->c != t;
      if (q->r == t) break; /* overwritten: later reads are of another value */
    }
    if (!single) continue;
    int right = i2->b == t;
    p->fn[j + 1] = fp_tab[o1][o2][right];
    p->fa[j + 1] = i1->a, p->fb[j + 1] = i1->b, p->fs[j + 1] = -1;
    p->fc[j + 1] = right ? i2->a : i2->b;
    p->merged[j] = 1;
    j++;
  }
}

/* ---- program runner ----------------------------------------------------- */

typedef struct prog_job {
  xk_prog *p;
  int64_t row;   /* row length (innermost coalesced size) */
  int64_t cpr;   /* tiles per row (row mode), 0 = linear mode */
  int64_t total; /* elements */
  char dense[XK_MAX_ARR]; /* linear mode: the array is row-major contiguous
                             over the space (element L at offset L) */
} prog_job;

/* The tile engine over one tile: each instruction on whole buffers (bp: the
 * buffer each value is read from; dout: results written straight to their
 * destination). 0 when an instruction failed (recorded in p->err). */
static int run_instructions(xk_prog *p, int64_t n, void **bp, void *const *dout,
                            char *scratch) {
  const int8_t *plan = (const int8_t *)scratch + p->moff;
  for (int j = 0; j < p->nins; j++) {
    const xk_ins *in = &p->ins[j];
    if (plan[j] == XR_SKIP || p->merged[j]) continue;
    int64_t bad = 0;
    void *r = dout[j] ? dout[j] : scratch + p->boff[in->r];
    int rc = TPU_OK;
    if (plan[j] != XR_RUN) { /* a SELECT on a scalar predicate */
      const void *v = bp[plan[j] == XR_TAKE_B ? in->b : in->c];
      if (r != v) memmove(r, v, (size_t)n * (xk_cls(in->dt) == XK_F32 ? 4 : 8));
    } else if (p->fn[j]) {
      p->fn[j](n, r, bp[p->fa[j]], p->fb[j] >= 0 ? bp[p->fb[j]] : NULL,
               p->fc[j] >= 0 ? bp[p->fc[j]] : NULL,
               p->fs[j] >= 0 ? *(const float *)bp[p->fs[j]] : 0.f);
      if (in->norm) norm_buf(in->dt, n, r);
    } else {
      rc = tpux__ew_apply(in, n, r, in->a >= 0 ? bp[in->a] : NULL,
                          in->b >= 0 ? bp[in->b] : NULL,
                          in->c >= 0 ? bp[in->c] : NULL, &bad);
    }
    bp[in->r] = r;
    if (rc != TPU_OK) {
      int z = TPU_OK;
      if (atomic_compare_exchange_strong(&p->err, &z, rc)) p->err_val = bad;
      return 0;
    }
  }
  return 1;
}

/* Whether array a's part of the tile starting at L is one run in memory,
 * and the element offset of its start: in row mode always (along the
 * inner dim; idx: L's index), in linear mode when the array is row-major
 * contiguous (short rows next to a broadcast operand: softmax's
 * normalisation over rows of 128). */
static int tile_run(const xk_space *s, int a, int in_row, const char *dense, int64_t L,
                    const int64_t *idx, int64_t *off) {
  if (in_row) *off = index_offset(s, a, idx);
  else if (dense && dense[a]) *off = L;
  else return 0;
  return 1;
}

/* Whether array a of that tile is read or written in place: one run of
 * unit stride in its native class type. */
static int in_place(const xk_space *s, int a, int in_row, const char *dense, int64_t L,
                    const int64_t *idx, int64_t *off) {
  const xk_arr *ar = &s->arr[a];
  if (ar->iota || ar->dt != xk_native(xk_cls(ar->dt))) return 0;
  if (in_row && ar->st[s->nd - 1] != 1) return 0;
  return tile_run(s, a, in_row, dense, L, idx, off);
}

/* dense[a]: array a of s is row-major contiguous over the space. */
static void space_dense(const xk_space *s, char *dense) {
  for (int a = 0; a < s->narr; a++) {
    int64_t want = 1;
    dense[a] = 1;
    for (int d = s->nd - 1; d >= 0 && dense[a]; d--) {
      dense[a] = s->arr[a].st[d] == want;
      want *= s->sz[d];
    }
  }
}

static void run_tile(xk_prog *p, const xk_space *s, int64_t L, int64_t n,
                     int in_row, const char *dense, char *scratch) {
  void *bp[XK_MAX_BUF], *dout[XK_MAX_INS];
  char stored[XK_MAX_ARR] = {0};
  for (int i = 0; i < p->nbuf; i++) bp[i] = scratch + p->boff[i];
  for (int j = 0; j < p->nins; j++) dout[j] = NULL;
  /* the tile's first element as an index, once for all arrays (row mode) */
  int64_t idx[TPU_MAX_DIMS], off;
  if (in_row) space_index(s, L, idx);
  /* loads */
  for (int k = 0; k < p->nload; k++) {
    int a = p->load[k].arr, bi = p->load[k].buf;
    const xk_arr *ar = &s->arr[a];
    if (p->load_const[k]) continue; /* filled once by prog_range */
    if (p->load_row[k]) { /* a per-tile scalar (row mode): the row's element */
      bp[bi] = ar->p + index_offset(s, a, idx) * 4;
      continue;
    }
    if (p->jit && xk_load_bytes(p, k)) { /* a mask: its bytes */
      if ((!in_row || ar->st[s->nd - 1] == 1) && tile_run(s, a, in_row, dense, L, idx, &off))
        bp[bi] = ar->p + off;
      else
        space_xfer(s, a, L, n, bp[bi], XF_BYTES);
      continue;
    }
    if (in_place(s, a, in_row, dense, L, idx, &off)) {
      int64_t es = (int64_t)tpu_dtype_size(ar->dt);
      bp[bi] = ar->p + off * es;
      /* the next tile of this stream (usually the bytes that follow; a
       * prefetch never faults) comes in while this one computes. Not for a
       * native kernel (it streams at memory speed, where these prefetches
       * only fill the line buffers: AdamW region from DRAM 0.98 ->
       * 0.54-0.61 ns/element without them) nor for a one-instruction
       * program's long tiles (a whole tile ahead is past what the core
       * keeps in flight) */
      for (int64_t o = n * es; !p->jit && p->pt <= XK_TILE && o < 2 * n * es; o += 64)
        __builtin_prefetch((const char *)bp[bi] + o, 0, 3);
    } else {
      space_xfer(s, a, L, n, bp[bi], XF_LOAD);
    }
  }
  /* results computed straight into a contiguous native destination. A
   * stored value holds its buffer to the end of the program, so the
   * instruction producing it is the last one writing that buffer (earlier
   * writers of the same physical buffer keep using scratch). */
  for (int k = 0; k < p->nstore; k++) {
    int a = p->store[k].arr, bi = p->store[k].buf, prod = p->store_prod[k];
    const xk_arr *ar = &s->arr[a];
    if (prod >= 0 && !dout[prod] && (p->direct_ok[k] || (p->jit && p->direct_jit[k])) &&
        ar->dt == xk_native(p->bufcls[bi]) && in_place(s, a, in_row, dense, L, idx, &off)) {
      dout[prod] = ar->p + off * (int64_t)tpu_dtype_size(ar->dt);
      stored[k] = 1;
    }
  }
  if (p->jit) { /* the whole program in one pass */
    void *in[XK_MAX_ARR], *out[XK_MAX_ARR];
    for (int k = 0; k < p->nload; k++) in[k] = bp[p->load[k].buf];
    for (int k = 0; k < p->nstore; k++) /* a store's own tile (its buffer
      * may be a load's: the engine's reuse, of another element size) */
      out[k] = stored[k] ? dout[p->store_prod[k]]
                         : (bp[p->store[k].buf] = scratch + p->jit_soff + k * 8 * p->pt);
    p->jit(n, in, out, tpux__jit_fns());
  } else if (!run_instructions(p, n, bp, dout, scratch)) {
    return;
  }
  for (int k = 0; k < p->nstore; k++) {
    if (stored[k]) continue;
    int a = p->store[k].arr, bi = p->store[k].buf;
    const xk_arr *ar = &s->arr[a];
    if (tile_run(s, a, in_row, dense, L, idx, &off)) {
      tpux__store(ar->dt, ar->p + off * (int64_t)tpu_dtype_size(ar->dt),
                  in_row ? ar->st[s->nd - 1] : 1, n, bp[bi]);
    } else {
      space_xfer(s, a, L, n, bp[bi], XF_STORE);
    }
  }
}

static void prog_range(void *ctx, int64_t b, int64_t e) {
  prog_job *j = ctx;
  xk_prog *p = j->p;
  char *scratch = tpux__alloc((size_t)p->scratch_bytes);
  if (!scratch) {
    int z = TPU_OK;
    atomic_compare_exchange_strong(&p->err, &z, TPU_E_OOM);
    return;
  }
  tpux__prog_fill_consts(p, &p->sp, scratch); /* broadcast scalars: one fill */
  for (int64_t t = b; t < e; t++) {
    if (atomic_load_explicit(&p->err, memory_order_relaxed)) break;
    if (j->cpr) {
      int64_t row = t / j->cpr, ch = t - row * j->cpr;
      int64_t L = row * j->row + ch * p->pt;
      int64_t n = j->row - ch * p->pt;
      if (n > p->pt) n = p->pt;
      run_tile(p, &p->sp, L, n, 1, NULL, scratch);
    } else {
      int64_t L = t * p->pt, n = j->total - L;
      if (n > p->pt) n = p->pt;
      run_tile(p, &p->sp, L, n, p->sp.nd == 1, j->dense, scratch);
    }
  }
  tpux__free(scratch);
}

/* Row tiles (a tile is a row or a piece of one; every array with unit
 * inner stride is read in place) or linear tiles (across rows: row-major
 * dense arrays in place, the others gathered). Rows shorter than a tile
 * are linear when every array is dense or broadcast along the row
 * (softmax over rows of 256, normalised by its row max / sum: a tile per
 * row was a program start per 256 elements; Fused exp(x - max).sum(-1)
 * over [8,8,256,256] 1.43 -> 1.26 ms, Strict (x - s) * y 1.99 -> 1.45),
 * and always below 256. */
static int row_tiles(const xk_prog *p, const xk_space *s, char *dense) {
  int64_t row = s->sz[s->nd - 1];
  space_dense(s, dense);
  if (s->nd == 1 || row < 256) return 0;
  if (row >= p->pt) return 1;
  for (int a = 0; a < s->narr; a++)
    if (!dense[a] && s->arr[a].st[s->nd - 1] != 0) return 1;
  return 0;
}

/* The instructions reading buffer b before it is rewritten: whether each
 * has a vector kernel of a two-operand float op that may take b as a
 * scalar (mode 0: nothing changed), or switch them to the scalar-operand
 * kernels (1) or back to the vector ones tpux__prog_finish gave them (2). */
static int row_readers(xk_prog *p, int b, int mode) {
  for (int j = 0; j < p->nins; j++) {
    const xk_ins *in = &p->ins[j];
    int ra = in->a == b, rb = in->b == b;
    if (ra || rb || in->c == b) {
      if (mode == 0 && !(p->fn[j] && p->fs[j] < 0 && in->c < 0 && ra != rb && !p->merged[j] &&
                         !(j > 0 && p->merged[j - 1]) && fast_binary(in->op, 0, 0)))
        return 0;
      if (mode > 0) {
        int on = mode == 1;
        p->fn[j] = fast_binary(in->op, on && ra, on && rb);
        p->fa[j] = on && ra ? in->b : in->a;
        p->fs[j] = on ? (int16_t)b : -1;
      }
    }
    if (in->r == b) break; /* rewritten: later reads are of another value */
  }
  return 1;
}

/* Row-broadcast loads as per-tile scalars (row mode, tile engine): a
 * float32 operand with inner stride 0 (x - mean over rows, a per-channel
 * scale over [N, C, HxW]) was gathered into a tile of copies that the
 * kernel then streamed beside the other operand (Strict [4,8,32768] -
 * [4,8,1] at 2.6x torch's time). When every instruction reading it before
 * its buffer is rewritten has a scalar-operand kernel, those kernels take
 * the row's element in place. Marks p->load_row and switches the kernels
 * (row_scalars_undo puts them back); returns how many loads it took. Not
 * where a store may overlap a load (stores wait for the tile end there). */
static int row_scalars(xk_prog *p) {
  const xk_space *s = &p->sp;
  int nd = s->nd, taken = 0;
  for (int q = 0; q < p->nstore; q++)
    if (!p->direct_ok[q]) return 0;
  for (int k = 0; k < p->nload; k++) {
    const xk_arr *ar = &s->arr[p->load[k].arr];
    int b = p->load[k].buf;
    int ok = !p->load_const[k] && !ar->iota && ar->dt == TPU_F32 && ar->st[nd - 1] == 0;
    for (int q = 0; q < p->nstore && ok; q++) ok = p->store[q].buf != b || p->store_prod[q] >= 0;
    ok = ok && row_readers(p, b, 0);
    if (ok) row_readers(p, b, 1);
    p->load_row[k] = (int8_t)ok;
    taken += ok;
  }
  return taken;
}

/* The program as built again, for its other runs (reduce windows, GEMM
 * epilogue blocks). */
static void row_scalars_undo(xk_prog *p) {
  for (int k = 0; k < p->nload; k++)
    if (p->load_row[k]) {
      row_readers(p, p->load[k].buf, 2);
      p->load_row[k] = 0;
    }
}

int tpux__prog_run(xk_prog *p) {
  atomic_store(&p->err, TPU_OK);
  p->err_val = 0;
  char written[XK_MAX_ARR] = {0};
  for (int k = 0; k < p->nstore; k++) written[p->store[k].arr] = 1;
  tpux__space_order(&p->sp, written);
  int64_t total = tpux__space_numel(&p->sp);
  if (total == 0) return TPU_OK;
  prog_job j = {p, p->sp.sz[p->sp.nd - 1], 0, total, {0}};
  int rows = row_tiles(p, &p->sp, j.dense);
  /* per-tile scalars need tiles within a row: rows of a tile or more
   * (shorter ones stay linear tiles, a program start per row would cost
   * more than the gathers) */
  int scalars = !p->jit && p->sp.nd >= 2 && (rows || j.row >= XK_TILE) && row_scalars(p);
  rows |= scalars;
  int64_t ntiles, tile_len;
  if (rows) {
    j.cpr = (j.row + p->pt - 1) / p->pt;
    ntiles = (total / j.row) * j.cpr;
    tile_len = j.row / j.cpr;
  } else {
    ntiles = (total + p->pt - 1) / p->pt;
    tile_len = p->pt;
  }
  int64_t grain = XK_GRAIN / (tile_len > 0 ? tile_len : 1);
  if (grain < 1) grain = 1;
  if (ntiles <= grain) prog_range(&j, 0, ntiles);
  else tpurt_parallel_for(ntiles, grain, prog_range, &j);
  if (scalars) row_scalars_undo(p);
  return tpux__prog_status(p);
}

/* Fill the tile buffers of p's broadcast-scalar loads (once per scratch). */
void tpux__prog_fill_consts(const xk_prog *p, const xk_space *s, char *scratch) {
  /* a native kernel reads [0] only; the tile engine at most a tile, or the
   * whole space when that is shorter (a small op's one short tile) */
  int64_t numel = tpux__space_numel(s);
  int64_t n = p->jit ? 1 : numel < p->pt ? numel : p->pt;
  for (int k = 0; k < p->nload; k++)
    if (p->load_const[k]) {
      const xk_arr *ar = &s->arr[p->load[k].arr];
      tpux__load(ar->dt, ar->p, 0, n, scratch + p->boff[p->load[k].buf]);
    }
  if (p->jit) return; /* it computes every instruction: no plan */
  /* the run's plan (XR_*), by liveness from the stores backwards: a SELECT
   * on a broadcast-scalar predicate needs only the operand it picks (lerp's
   * two formulas, torch.where on a 0-dim condition), so the float work that
   * fed only the other operand is not computed */
  int8_t *run = (int8_t *)scratch + p->moff;
  uint8_t live[XK_MAX_BUF] = {0};
  for (int k = 0; k < p->nstore; k++) live[p->store[k].buf] = 1;
  for (int j = p->nins - 1; j >= 0; j--) {
    const xk_ins *in = &p->ins[j];
    /* only float work is skipped: an integer op still reports its errors
     * (division by zero) when its value is not used */
    if (!live[in->r] && xk_cls(in->in_dt) == XK_F32 && xk_cls(in->dt) == XK_F32) {
      run[j] = XR_SKIP;
      continue;
    }
    live[in->r] = 0;
    if (in->op == TPUIR_SELECT && p->buf_const[in->a]) {
      int pick = *(const int64_t *)(scratch + p->boff[in->a]) ? in->b : in->c;
      run[j] = pick == in->b ? XR_TAKE_B : XR_TAKE_C;
      live[pick] = 1;
      continue;
    }
    run[j] = XR_RUN;
    if (in->a >= 0) live[in->a] = 1;
    if (in->b >= 0) live[in->b] = 1;
    if (in->c >= 0) live[in->c] = 1;
  }
}

/* Run p serially over `s` with the caller's tile buffers (see
 * exec/vtpu/internal.h). Errors go to p->err. */
void tpux__prog_run_window(xk_prog *p, xk_space *s, char *scratch) {
  tpux__space_coalesce(s);
  int64_t total = tpux__space_numel(s);
  if (total == 0) return;
  int64_t row = s->sz[s->nd - 1];
  char dense[XK_MAX_ARR];
  if (row_tiles(p, s, dense)) {
    int64_t cpr = (row + p->pt - 1) / p->pt;
    for (int64_t r = 0; r < total / row; r++)
      for (int64_t ch = 0; ch < cpr; ch++) {
        if (atomic_load_explicit(&p->err, memory_order_relaxed)) return;
        int64_t n = row - ch * p->pt;
        run_tile(p, s, r * row + ch * p->pt, n > p->pt ? p->pt : n, 1, NULL,
                 scratch);
      }
  } else {
    for (int64_t L = 0; L < total; L += p->pt) {
      if (atomic_load_explicit(&p->err, memory_order_relaxed)) break;
      int64_t n = total - L;
      run_tile(p, s, L, n > p->pt ? p->pt : n, s->nd == 1, dense, scratch);
    }
  }
}

/* Run a program serially over `s` (the program's arrays, re-based and
 * re-shaped; see exec/vtpu/internal.h). Errors go to p->err. */
void tpux__prog_run_serial(xk_prog *p, xk_space *s) {
  /* tile buffers: kept per thread (GEMM epilogues call this once per block;
   * a malloc/free pair of this size per block can trim and re-fault heap
   * pages), at most XK_MAX_BUF tiles */
  static _Thread_local char *tl_scratch;
  static _Thread_local size_t tl_cap;
  if (tpux__space_numel(s) == 0) return;
  size_t need = (size_t)p->scratch_bytes;
  if (tl_cap < need) {
    char *nb = aligned_alloc(64, need);
    if (!nb) {
      int z = TPU_OK;
      atomic_compare_exchange_strong(&p->err, &z, TPU_E_OOM);
      return;
    }
    free(tl_scratch);
    tl_scratch = nb;
    tl_cap = need;
  }
  tpux__prog_fill_consts(p, s, tl_scratch);
  tpux__prog_run_window(p, s, tl_scratch);
}

/* Status of a program's run: TPU_OK or an error with its message. */
int tpux__prog_status(xk_prog *p) {
  int err = atomic_load(&p->err);
  if (err == TPU_OK) return TPU_OK;
  if (err == TPU_E_OOM) return tpu_error(TPU_E_OOM, "out of host memory for tiles");
  if (err == TPU_E_INVALID) {
    for (int j2 = 0; j2 < p->nins; j2++)
      if (p->ins[j2].op == TPUIR_POW && p->err_val < 0)
        return tpu_error(TPU_E_INVALID,
                         "Integers to negative integer powers are not allowed.");
    return tpu_error(TPU_E_INVALID, "ZeroDivisionError");
  }
  return tpu_error(err, "elementwise kernel failed");
}

/* ---- node evaluation ---------------------------------------------------- */

/* node m's result must be rounded / wrapped to its dtype in the buffer
 * (comparisons and predicates give 0 or 1 already) */
static int needs_norm(const tpuir_node *m) {
  int dt = m->dtype, cls = tpuir_op_info(m->op)->cls;
  if (cls == TPUIR_CLASS_COMPARE || cls == TPUIR_CLASS_PREDICATE) return 0;
  return dt == TPU_BF16 || dt == TPU_F16 || (xk_cls(dt) == XK_I64 && dt != TPU_I64);
}

/* Build the program of a fused elementwise region (see exec/vtpu/internal.h). */
int tpux__region_prog(xctx *c, int n, const int32_t *members, const char *store,
                      const tpu_view *const *dst, xk_prog **out) {
  *out = NULL;
  if (n < 1 || n > XK_MAX_INS)
    return tpu_error(TPU_E_INTERNAL, "eval_region: bad region size %d", n);
  const tpuir_graph *g = c->g;
  int rc = TPU_OK;
  for (int k = 0; k < n && rc == TPU_OK; k++) {
    if (!store[k]) continue;
    if (dst[k]) c->vals[members[k]].v = *dst[k];
    else rc = tpux__alloc_value(c, members[k]);
  }
  if (rc) return rc;
  /* not calloc: the space's array table (~14 KB, filled as arrays are
   * added) would be cleared on every op for nothing */
  xk_prog *p = malloc(sizeof *p);
  if (!p) return tpu_error(TPU_E_OOM, "elementwise: out of host memory");
  memset(p, 0, offsetof(xk_prog, sp.arr));
  memset(&p->nload, 0, sizeof *p - offsetof(xk_prog, nload));
  const tpuir_node *n0 = tpuir_get_node(g, members[0]);
  tpux__space_init(&p->sp, n0->ndim, n0->sizes);
  /* virtual registers in program order: member k's new loads (all loaded at
   * the start of a tile), then its result */
  int32_t vid[XK_MAX_BUF], vdef[XK_MAX_BUF], lastuse[XK_MAX_BUF];
  int8_t vcls[XK_MAX_BUF], consumed[XK_MAX_BUF], vload[XK_MAX_BUF];
  int16_t res_v[XK_MAX_INS], ops_v[XK_MAX_INS][3];
  int nv = 0;
  for (int k = 0; k < n; k++) {
    const tpuir_node *m = tpuir_get_node(g, members[k]);
    for (int q = 0; q < 3; q++) ops_v[k][q] = -1;
    for (int q = 0; q < m->nin; q++) {
      int o = m->in[q], v = -1;
      for (int j = 0; j < nv; j++)
        if (vid[j] == o) v = j;
      if (v < 0) { /* a value from outside the region: load it */
        if (nv >= XK_MAX_BUF - 1 || p->sp.narr >= XK_MAX_ARR - (n - k)) {
          free(p);
          return tpu_error(TPU_E_INTERNAL, "eval_region: too many inputs");
        }
        v = nv++;
        vid[v] = o;
        vdef[v] = 0; /* every load happens at the start of a tile */
        lastuse[v] = k;
        const tpuir_node *on = tpuir_get_node(g, o);
        int virt = c->virt && c->virt[o], cst = !virt;
        vcls[v] = (int8_t)xk_cls(on->dtype);
        consumed[v] = 0;
        vload[v] = (int8_t)!virt; /* (in memory) */
        const tpu_view *lv = &c->vals[o].v;
        for (int d = 0; d < on->ndim && cst; d++) cst = lv->strides[d] == 0 || lv->sizes[d] == 1;
        if (cst) lastuse[v] = n; /* its buffer is never reused */
        p->load_const[p->nload] = (int8_t)cst;
        p->load[p->nload].arr = (int16_t)(virt ? tpux__space_add_iota(&p->sp, on->dtype, on->dim)
                                               : tpux__space_add(&p->sp, lv));
        p->load[p->nload].buf = (int16_t)v; /* renamed to physical below */
        p->nload++;
      }
      ops_v[k][q] = (int16_t)v;
      if (lastuse[v] < k) lastuse[v] = k;
      consumed[v] = 1;
    }
    int v = nv++;
    vid[v] = members[k];
    vdef[v] = k;
    lastuse[v] = store[k] ? n : k; /* stored values are held to the end */
    vcls[v] = (int8_t)xk_cls(m->dtype);
    consumed[v] = 0;
    vload[v] = 0;
    res_v[k] = (int16_t)v;
  }
  /* linear-scan allocation: a physical buffer is free for a register
   * defined at member k if its holder's last use is before k */
  int16_t phys[XK_MAX_BUF];
  int32_t busy[XK_MAX_BUF];
  int np = 0;
  for (int j = 0; j < nv; j++) {
    int pick = -1;
    for (int b = 0; b < np && pick < 0; b++)
      if (busy[b] < vdef[j]) pick = b;
    if (pick < 0) pick = np++;
    busy[pick] = lastuse[j];
    phys[j] = (int16_t)pick;
    p->bufcls[pick] = vcls[j];
  }
  p->nbuf = np;
  for (int l = 0; l < p->nload; l++) {
    p->load[l].buf = phys[p->load[l].buf];
    p->buf_const[p->load[l].buf] = p->load_const[l];
  }
  for (int k = 0; k < n; k++) {
    const tpuir_node *m = tpuir_get_node(g, members[k]);
    int in_dt = tpuir_get_node(g, m->in[m->op == TPUIR_SELECT ? 1 : 0])->dtype;
    int rv = res_v[k];
    p->ins[k] = (xk_ins){(int16_t)m->op, (int16_t)m->dtype, (int16_t)in_dt,
                         phys[rv],
                         ops_v[k][0] >= 0 ? phys[ops_v[k][0]] : -1,
                         ops_v[k][1] >= 0 ? phys[ops_v[k][1]] : -1,
                         ops_v[k][2] >= 0 ? phys[ops_v[k][2]] : -1,
                         (int16_t)(consumed[rv] && needs_norm(m))};
    if (!store[k]) continue;
    int s = p->nstore++;
    p->store[s].arr = (int16_t)tpux__space_add(&p->sp, &c->vals[members[k]].v);
    p->store[s].buf = phys[rv];
    /* caller memory that a load also reads: write only at the tile end
     * (a native kernel: also in place over an identical view) */
    p->direct_ok[s] = p->direct_jit[s] = 1;
    if (dst[k])
      for (int j = 0; j < nv; j++)
        if (vload[j] && tpux__views_overlap(&c->vals[vid[j]].v, dst[k])) {
          p->direct_ok[s] = 0;
          if (!tpux__views_same(&c->vals[vid[j]].v, dst[k])) p->direct_jit[s] = 0;
        }
  }
  p->nins = n;
  tpux__prog_finish(p);
  *out = p;
  return TPU_OK;
}

/* Evaluate a fused elementwise region (see exec/vtpu/internal.h). */
int tpux__eval_region(xctx *c, int n, const int32_t *members, const char *store,
                      const tpu_view *const *dst) {
  xk_prog *p;
  int rc = tpux__region_prog(c, n, members, store, dst, &p);
  if (rc) return rc;
  rc = tpux__prog_run(p);
  free(p);
  return rc;
}

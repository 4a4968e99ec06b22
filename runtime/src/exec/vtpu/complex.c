/* exec/vtpu/complex.c - vTPU executor for complex values: elementwise nodes with
 * a complex operand or result (and REAL / IMAG / COMPLEX / CONJ), complex
 * conversions in copies, complex fills, SUM/PROD reductions of complex
 * values and the FFT node.
 *
 * Complex nodes are never fused: each runs as a standalone strided loop
 * that loads every operand element as a double complex, computes in
 * double and stores with the result dtype's rounding. The FFT works on
 * double complex lines: radix-2 (iterative, exact twiddles) for powers of
 * two, Bluestein's chirp-z transform through a power-of-two convolution for
 * every other length.
 */
#include <complex.h>
#include <math.h>
#include <stdlib.h>

#include "exec/vtpu/internal.h"

typedef double complex dcx;

/* ---- element loads and stores ------------------------------------------- */

static dcx cx_ld(int dt, const char *p) {
  switch (dt) {
  case TPU_BOOL: return *(const uint8_t *)p != 0;
  case TPU_U8: return *(const uint8_t *)p;
  case TPU_I8: return *(const int8_t *)p;
  case TPU_I16: { int16_t v; memcpy(&v, p, 2); return v; }
  case TPU_I32: { int32_t v; memcpy(&v, p, 4); return v; }
  case TPU_I64: { int64_t v; memcpy(&v, p, 8); return (double)v; }
  case TPU_F16: { _Float16 v; memcpy(&v, p, 2); return (double)v; }
  case TPU_BF16: { uint16_t v; memcpy(&v, p, 2); return xk_bf16_to_f32(v); }
  case TPU_F32: { float v; memcpy(&v, p, 4); return v; }
  case TPU_F64: { double v; memcpy(&v, p, 8); return v; }
  case TPU_C64: { float v[2]; memcpy(v, p, 8); return CMPLX(v[0], v[1]); }
  case TPU_C128: { double v[2]; memcpy(v, p, 16); return CMPLX(v[0], v[1]); }
  default: return 0;
  }
}

static void cx_st(int dt, char *p, dcx z) {
  double re = creal(z);
  switch (dt) {
  case TPU_BOOL: *(uint8_t *)p = re != 0 || cimag(z) != 0; break;
  case TPU_U8: case TPU_I8: case TPU_I16: case TPU_I32: case TPU_I64: {
    int64_t v = xk_wrap(dt, xk_f2i64(re));
    size_t es = tpu_dtype_size(dt);
    if (es == 1) { uint8_t b = (uint8_t)v; memcpy(p, &b, 1); }
    else if (es == 2) { int16_t b = (int16_t)v; memcpy(p, &b, 2); }
    else if (es == 4) { int32_t b = (int32_t)v; memcpy(p, &b, 4); }
    else memcpy(p, &v, 8);
    break;
  }
  case TPU_F16: { _Float16 v = (_Float16)(float)re; memcpy(p, &v, 2); break; }
  case TPU_BF16: { uint16_t v = xk_f32_to_bf16((float)re); memcpy(p, &v, 2); break; }
  case TPU_F32: { float v = (float)re; memcpy(p, &v, 4); break; }
  case TPU_F64: memcpy(p, &re, 8); break;
  case TPU_C64: { float v[2] = {(float)re, (float)cimag(z)}; memcpy(p, v, 8); break; }
  case TPU_C128: { double v[2] = {re, cimag(z)}; memcpy(p, v, 16); break; }
  default: break;
  }
}

/* ---- elementwise ----------------------------------------------------------- */

static dcx cx_pow(dcx a, dcx b) {
  if (b == 0) return 1;
  if (a == 0 && cimag(b) == 0 && creal(b) > 0) return 0;
  return cpow(a, b);
}

static dcx cx_op(int op, dcx a, dcx b, dcx c) {
  switch (op) {
  case TPUIR_NEG: return -a;
  case TPUIR_ABS: return cabs(a);
  case TPUIR_IS_FINITE: return isfinite(creal(a)) && isfinite(cimag(a));
  case TPUIR_IS_NAN: return isnan(creal(a)) || isnan(cimag(a));
  case TPUIR_IS_INF: return isinf(creal(a)) || isinf(cimag(a));
  case TPUIR_EXP: return cexp(a);
  case TPUIR_EXPM1: return cexp(a) - 1;
  case TPUIR_LOG: return clog(a);
  case TPUIR_LOG1P: return clog(1 + a);
  case TPUIR_SQRT: return csqrt(a);
  case TPUIR_RSQRT: return 1 / csqrt(a);
  case TPUIR_SIN: return csin(a);
  case TPUIR_COS: return ccos(a);
  case TPUIR_TAN: return ctan(a);
  case TPUIR_TANH: return ctanh(a);
  case TPUIR_SINH: return csinh(a);
  case TPUIR_COSH: return ccosh(a);
  case TPUIR_ASIN: return casin(a);
  case TPUIR_ACOS: return cacos(a);
  case TPUIR_ATAN: return catan(a);
  case TPUIR_ASINH: return casinh(a);
  case TPUIR_ACOSH: return cacosh(a);
  case TPUIR_ATANH: return catanh(a);
  case TPUIR_LOGISTIC: return 1 / (1 + cexp(-a));
  case TPUIR_ADD: return a + b;
  case TPUIR_SUB: return a - b;
  case TPUIR_MUL: return a * b;
  case TPUIR_DIV: return a / b;
  case TPUIR_POW: return cx_pow(a, b);
  case TPUIR_EQ: return a == b;
  case TPUIR_NE: return a != b;
  case TPUIR_SELECT: return creal(a) != 0 ? b : c;
  case TPUIR_REAL: return creal(a);
  case TPUIR_IMAG: return cimag(a);
  case TPUIR_COMPLEX: return CMPLX(creal(a), creal(b));
  case TPUIR_CONJ: return conj(a);
  default: return a; /* CONVERT */
  }
}

typedef struct cx_job {
  int op, nin;
  int nd;
  int64_t sz[TPU_MAX_DIMS];
  char *p[4];     /* 0: result, 1..nin: operands (element (0,...,0)) */
  int dt[4];
  int64_t st[4][TPU_MAX_DIMS]; /* byte strides */
} cx_job;

static void cx_range(void *ctx, int64_t b, int64_t e) {
  const cx_job *j = ctx;
  int64_t idx[TPU_MAX_DIMS];
  int64_t L = b;
  for (int d = j->nd - 1; d >= 0; d--) {
    idx[d] = L % j->sz[d];
    L /= j->sz[d];
  }
  for (int64_t i = b; i < e; i++) {
    char *ptr[4];
    for (int k = 0; k <= j->nin; k++) {
      int64_t off = 0;
      for (int d = 0; d < j->nd; d++) off += idx[d] * j->st[k][d];
      ptr[k] = j->p[k] + off;
    }
    dcx a = j->nin > 0 ? cx_ld(j->dt[1], ptr[1]) : 0;
    dcx bb = j->nin > 1 ? cx_ld(j->dt[2], ptr[2]) : 0;
    dcx cc = j->nin > 2 ? cx_ld(j->dt[3], ptr[3]) : 0;
    cx_st(j->dt[0], ptr[0], cx_op(j->op, a, bb, cc));
    for (int d = j->nd - 1; d >= 0; d--) {
      if (++idx[d] < j->sz[d]) break;
      idx[d] = 0;
    }
  }
}

static void job_add(cx_job *j, int k, const tpu_view *v) {
  size_t es = tpu_dtype_size(v->dtype);
  j->dt[k] = v->dtype;
  j->p[k] = (char *)v->base + v->offset * (int64_t)es;
  for (int d = 0; d < j->nd; d++) j->st[k][d] = v->strides[d] * (int64_t)es;
}

/* dst = op(srcs) elementwise over dst's shape (operands of dst's shape). */
static int cx_apply(int op, const tpu_view *dst, int nin, const tpu_view *const *srcs) {
  cx_job j;
  memset(&j, 0, sizeof j);
  j.op = op;
  j.nin = nin;
  j.nd = dst->ndim;
  for (int d = 0; d < j.nd; d++) j.sz[d] = dst->sizes[d];
  job_add(&j, 0, dst);
  for (int k = 0; k < nin; k++) job_add(&j, k + 1, srcs[k]);
  int64_t n = tpu_view_numel(dst);
  if (n == 0) return TPU_OK;
  if (n <= XK_GRAIN / 4) cx_range(&j, 0, n);
  else tpurt_parallel_for(n, XK_GRAIN / 4, cx_range, &j);
  return TPU_OK;
}

/* Copy/convert when either side is complex (same sizes; no overlap). */
int tpux__copy_complex(const tpu_view *dst, const tpu_view *src) {
  const tpu_view *s[1] = {src};
  return cx_apply(TPUIR_CONVERT, dst, 1, s);
}

/* Fill a view with re + im*i (converted to its dtype). */
int tpux__fill_complex(const tpu_view *dst, double re, double im) {
  double v[2] = {re, im};
  tpu_view s;
  memset(&s, 0, sizeof s);
  s.base = v;
  s.dtype = TPU_C128;
  s.ndim = dst->ndim;
  for (int d = 0; d < s.ndim; d++) s.sizes[d] = dst->sizes[d];
  const tpu_view *sp[1] = {&s};
  return cx_apply(TPUIR_CONVERT, dst, 1, sp);
}

/* 1 if node n must run through this file (complex operand or result). */
int tpux__is_complex_node(const tpuir_graph *g, const tpuir_node *n) {
  int cls = tpuir_op_info(n->op)->cls;
  if (cls == TPUIR_CLASS_COMPLEX || cls == TPUIR_CLASS_FFT) return 1;
  if (n->op == TPUIR_PARAM || n->op == TPUIR_CONST) return 0;
  if (n->op == TPUIR_BROADCAST_IN_DIM || n->op == TPUIR_TRANSPOSE ||
      n->op == TPUIR_SLICE || n->op == TPUIR_REVERSE || n->op == TPUIR_RESHAPE ||
      n->op == TPUIR_CONCAT || n->op == TPUIR_GATHER || n->op == TPUIR_INDEX_SELECT ||
      n->op == TPUIR_PAD)
    return 0; /* data movement: dtype-agnostic */
  if (tpu_dtype_is_complex(n->dtype)) return 1;
  for (int k = 0; k < n->nin && k < 4; k++)
    if (tpu_dtype_is_complex(tpuir_get_node(g, n->in[k])->dtype)) return 1;
  return 0;
}

/* ---- reductions ------------------------------------------------------------- */

static int eval_reduce(xctx *c, int t, const tpuir_node *n) {
  int rc = tpux__alloc_value(c, t);
  if (rc) return rc;
  const tpu_view *x = &c->vals[n->in[0]].v;
  const tpu_view *o = &c->vals[t].v;
  int64_t on = tpu_view_numel(o);
  dcx *acc = malloc((size_t)(on ? on : 1) * sizeof(dcx));
  if (!acc) return tpu_error(TPU_E_OOM, "reduce: out of host memory");
  dcx init = n->kind == TPUIR_RED_PROD ? 1 : 0;
  for (int64_t i = 0; i < on; i++) acc[i] = init;
  /* output stride (in elements of acc) of each input dim; 0 if reduced */
  int64_t ost[TPU_MAX_DIMS];
  int red[TPU_MAX_DIMS] = {0};
  for (int i = 0; i < n->na; i++) red[n->a[i]] = 1;
  int64_t s = 1;
  for (int d = x->ndim - 1; d >= 0; d--) {
    if (red[d]) { ost[d] = 0; continue; }
    ost[d] = s;
    s *= x->sizes[d];
  }
  int64_t xn = tpu_view_numel(x);
  size_t es = tpu_dtype_size(x->dtype);
  const char *base = (const char *)x->base + x->offset * (int64_t)es;
  int64_t idx[TPU_MAX_DIMS] = {0};
  for (int64_t i = 0; i < xn; i++) {
    int64_t off = 0, oi = 0;
    for (int d = 0; d < x->ndim; d++) {
      off += idx[d] * x->strides[d];
      oi += idx[d] * ost[d];
    }
    dcx v = cx_ld(x->dtype, base + off * (int64_t)es);
    if (n->kind == TPUIR_RED_PROD) acc[oi] *= v;
    else acc[oi] += v;
    for (int d = x->ndim - 1; d >= 0; d--) {
      if (++idx[d] < x->sizes[d]) break;
      idx[d] = 0;
    }
  }
  tpu_view av;
  tpu_view_init_contiguous(&av, acc, TPU_C128, o->ndim, o->sizes);
  rc = tpux__copy_complex(o, &av);
  free(acc);
  return rc;
}

/* ---- FFT --------------------------------------------------------------------- */

typedef struct fft_plan {
  int64_t n;    /* transform length */
  int64_t m;    /* power-of-two size of the inner radix-2 transform */
  int blue;     /* 1: Bluestein (n not a power of two) */
  dcx *tw;      /* m/2 twiddles exp(-2 pi i k / m) */
  dcx *chirp;   /* n values exp(-pi i k^2 / n) (Bluestein) */
  dcx *bhat;    /* FFT_m of the conjugated, wrapped chirp (Bluestein) */
} fft_plan;

/* In-place forward radix-2 FFT of length m (power of two). */
static void fft_pow2(dcx *x, int64_t m, const dcx *tw) {
  for (int64_t i = 1, j = 0; i < m; i++) {
    int64_t bit = m >> 1;
    for (; j & bit; bit >>= 1) j ^= bit;
    j ^= bit;
    if (i < j) {
      dcx t = x[i];
      x[i] = x[j];
      x[j] = t;
    }
  }
  for (int64_t len = 2; len <= m; len <<= 1) {
    int64_t half = len >> 1, step = m / len;
    for (int64_t i = 0; i < m; i += len)
      for (int64_t k = 0; k < half; k++) {
        dcx u = x[i + k], v = x[i + k + half] * tw[k * step];
        x[i + k] = u + v;
        x[i + k + half] = u - v;
      }
  }
}

static void plan_free(fft_plan *p) {
  free(p->tw);
  free(p->chirp);
  free(p->bhat);
}

static int plan_init(fft_plan *p, int64_t n) {
  memset(p, 0, sizeof *p);
  p->n = n;
  int64_t m = 1;
  while (m < n) m <<= 1;
  p->blue = m != n;
  if (p->blue) {
    m = 1;
    while (m < 2 * n - 1) m <<= 1;
  }
  p->m = m;
  p->tw = malloc((size_t)(m / 2 + 1) * sizeof(dcx));
  if (!p->tw) return TPU_E_OOM;
  for (int64_t k = 0; k < m / 2 + 1; k++) {
    double a = -2.0 * M_PI * (double)k / (double)m;
    p->tw[k] = CMPLX(cos(a), sin(a));
  }
  if (!p->blue) return TPU_OK;
  p->chirp = malloc((size_t)n * sizeof(dcx));
  p->bhat = calloc((size_t)m, sizeof(dcx));
  if (!p->chirp || !p->bhat) return TPU_E_OOM;
  for (int64_t k = 0; k < n; k++) {
    /* k^2 mod 2n keeps the angle small and exact */
    int64_t q = (int64_t)(((unsigned __int128)k * (unsigned __int128)k) % (unsigned __int128)(2 * n));
    double a = -M_PI * (double)q / (double)n;
    p->chirp[k] = CMPLX(cos(a), sin(a));
  }
  p->bhat[0] = conj(p->chirp[0]);
  for (int64_t k = 1; k < n; k++) p->bhat[k] = p->bhat[m - k] = conj(p->chirp[k]);
  fft_pow2(p->bhat, m, p->tw);
  return TPU_OK;
}

/* Transform x (length p->n) in place; inverse = unscaled inverse DFT.
 * work: p->m scratch elements (Bluestein). */
static void fft_line(const fft_plan *p, dcx *x, int inverse, dcx *work) {
  int64_t n = p->n;
  if (n == 1) return;
  if (inverse)
    for (int64_t i = 0; i < n; i++) x[i] = conj(x[i]);
  if (!p->blue) {
    fft_pow2(x, n, p->tw);
  } else {
    int64_t m = p->m;
    for (int64_t k = 0; k < n; k++) work[k] = x[k] * p->chirp[k];
    for (int64_t k = n; k < m; k++) work[k] = 0;
    fft_pow2(work, m, p->tw);
    for (int64_t k = 0; k < m; k++) work[k] = conj(work[k] * p->bhat[k]);
    fft_pow2(work, m, p->tw); /* inverse through conjugation */
    double s = 1.0 / (double)m;
    for (int64_t k = 0; k < n; k++) x[k] = conj(work[k]) * s * p->chirp[k];
  }
  if (inverse)
    for (int64_t i = 0; i < n; i++) x[i] = conj(x[i]);
}

typedef struct fft_axis_job {
  dcx *data;            /* [outer, len, inner] contiguous */
  int64_t outer, len, inner;
  const fft_plan *p;
  int inverse;
  int err;
} fft_axis_job;

static void fft_axis_range(void *ctx, int64_t b, int64_t e) {
  fft_axis_job *j = ctx;
  dcx *line = malloc((size_t)(j->len + j->p->m) * sizeof(dcx));
  if (!line) {
    j->err = 1;
    return;
  }
  dcx *work = line + j->len;
  for (int64_t r = b; r < e; r++) {
    int64_t o = r / j->inner, in = r % j->inner;
    dcx *base = j->data + o * j->len * j->inner + in;
    for (int64_t k = 0; k < j->len; k++) line[k] = base[k * j->inner];
    fft_line(j->p, line, j->inverse, work);
    for (int64_t k = 0; k < j->len; k++) base[k * j->inner] = line[k];
  }
  free(line);
}

/* Transform `data` (shape sizes[0..nd), contiguous) along dim `ax`. */
static int fft_axis(dcx *data, int nd, const int64_t *sizes, int ax, int inverse) {
  fft_axis_job j = {data, 1, sizes[ax], 1, NULL, inverse, 0};
  for (int d = 0; d < ax; d++) j.outer *= sizes[d];
  for (int d = ax + 1; d < nd; d++) j.inner *= sizes[d];
  int64_t lines = j.outer * j.inner;
  if (lines == 0 || j.len <= 1) return TPU_OK;
  fft_plan p;
  if (plan_init(&p, j.len)) {
    plan_free(&p);
    return tpu_error(TPU_E_OOM, "fft: out of host memory");
  }
  j.p = &p;
  int64_t grain = XK_GRAIN / (4 * j.len) + 1;
  if (lines <= grain) fft_axis_range(&j, 0, lines);
  else tpurt_parallel_for(lines, grain, fft_axis_range, &j);
  plan_free(&p);
  if (j.err) return tpu_error(TPU_E_OOM, "fft: out of host memory");
  return TPU_OK;
}

static int eval_fft(xctx *c, int t, const tpuir_node *n) {
  int rc = tpux__alloc_value(c, t);
  if (rc) return rc;
  const tpu_view *x = &c->vals[n->in[0]].v;
  const tpu_view *o = &c->vals[t].v;
  int nd = x->ndim, nl = n->na, type = n->kind;
  /* work array: full complex of the input's shape (RFFT: x as complex) */
  int64_t sizes[TPU_MAX_DIMS];
  for (int d = 0; d < nd; d++) sizes[d] = x->sizes[d];
  int64_t total = 1;
  for (int d = 0; d < nd; d++) total *= sizes[d];
  if (total == 0 || tpu_view_numel(o) == 0) return TPU_OK;
  int64_t last = n->a[nl - 1];
  if (type == TPUIR_FFT_IRFFT) total = total / sizes[nd - 1] * last;
  dcx *buf = calloc((size_t)total, sizeof(dcx));
  if (!buf) return tpu_error(TPU_E_OOM, "fft: out of host memory");
  tpu_view bv;
  tpu_view_init_contiguous(&bv, buf, TPU_C128, nd, sizes);
  if (type == TPUIR_FFT_IRFFT) { /* half spectrum into the first columns */
    int64_t full[TPU_MAX_DIMS];
    memcpy(full, sizes, sizeof full);
    full[nd - 1] = last;
    tpu_view_init_contiguous(&bv, buf, TPU_C128, nd, full);
    bv.sizes[nd - 1] = sizes[nd - 1];
  }
  rc = tpux__copy_complex(&bv, x);
  int inverse = type == TPUIR_FFT_INV || type == TPUIR_FFT_IRFFT;
  if (type == TPUIR_FFT_IRFFT) {
    sizes[nd - 1] = last;
    /* inverse c2c over the leading fft dims (the half spectrum sits in
     * the first last/2+1 columns of rows of length `last`; the zero
     * columns after it are transformed too and then overwritten) */
    for (int k = 0; k < nl - 1 && rc == TPU_OK; k++)
      rc = fft_axis(buf, nd, sizes, nd - nl + k, 1);
    /* Hermitian extension of the last dim */
    int64_t rows = total / last, h = last / 2 + 1;
    for (int64_t r = 0; r < rows; r++) {
      dcx *row = buf + r * last;
      for (int64_t k = h; k < last; k++) row[k] = conj(row[last - k]);
    }
    if (rc == TPU_OK) rc = fft_axis(buf, nd, sizes, nd - 1, 1);
  } else {
    for (int k = 0; k < nl && rc == TPU_OK; k++)
      rc = fft_axis(buf, nd, sizes, nd - nl + k, inverse);
  }
  if (rc == TPU_OK && inverse) {
    double N = 1;
    for (int k = 0; k < nl; k++) N *= (double)n->a[k];
    double s = 1.0 / N;
    for (int64_t i = 0; i < total; i++) buf[i] *= s;
  }
  if (rc == TPU_OK) {
    tpu_view_init_contiguous(&bv, buf, TPU_C128, nd, sizes);
    if (type == TPUIR_FFT_RFFT) bv.sizes[nd - 1] = o->sizes[nd - 1];
    rc = tpux__copy_complex(o, &bv);
  }
  free(buf);
  return rc;
}

/* ---- dispatch ------------------------------------------------------------------ */

/* Evaluate complex node t (tpux__is_complex_node) into c->vals[t]. */
int tpux__eval_complex(xctx *c, int t) {
  const tpuir_node *n = tpuir_get_node(c->g, t);
  switch (n->op) {
  case TPUIR_FFT: return eval_fft(c, t, n);
  case TPUIR_REDUCE: return eval_reduce(c, t, n);
  default: break;
  }
  int cls = tpuir_op_info(n->op)->cls;
  if (cls == TPUIR_CLASS_UNARY || cls == TPUIR_CLASS_PREDICATE || cls == TPUIR_CLASS_BINARY ||
      cls == TPUIR_CLASS_COMPARE || cls == TPUIR_CLASS_SELECT || cls == TPUIR_CLASS_CONVERT ||
      cls == TPUIR_CLASS_COMPLEX) {
    int rc = tpux__alloc_value(c, t);
    if (rc) return rc;
    const tpu_view *srcs[3];
    for (int k = 0; k < n->nin; k++) srcs[k] = &c->vals[n->in[k]].v;
    return cx_apply(n->op, &c->vals[t].v, n->nin, srcs);
  }
  return tpu_error(TPU_E_UNSUPPORTED, "vTPU executor: %s is not supported for complex values",
                   tpuir_op_name(n->op));
}

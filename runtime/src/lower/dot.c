/* lower/dot.c - matrix-unit ops: mm, bmm, addmm, baddbmm, addbmm,
 * addmv, mv, dot, vdot, _addmm_activation, lowered to tpuir_dot_general
 * with the context's precision (f32 inputs; bf16/f16 use one pass).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "lower/internal.h"

enum { L_MM = 1, L_BMM, L_ADDMM, L_BADDBMM, L_ADDBMM, L_ADDMV, L_MV, L_DOT,
       L_ADDMM_ACT };

static int unsupported(int dt) {
  return tpu_error(TPU_E_UNSUPPORTED,
                   "\"addmm_impl_cpu_\" not implemented for '%s'",
                   tpulw__torch_name(dt));
}

static void fmt_sizes(char *buf, size_t cap, const tpu_view *v) {
  size_t k = 0;
  buf[0] = 0;
  for (int i = 0; i < v->ndim && k < cap; i++)
    k += (size_t)snprintf(buf + k, cap - k, "%s%lld", i ? "x" : "",
                          (long long)v->sizes[i]);
}

/* lhs @ rhs over the given batch/contract dims with an f32 (or f64/int)
 * accumulator dtype `acc`. */
static tpuir_val dot(tpulw__b *b, tpuir_val l, tpuir_val r, int nb,
                     const int64_t *lb, const int64_t *rb, int nc,
                     const int64_t *lc, const int64_t *rc, int acc) {
  return tpuir_dot_general(b->g, l, r, nb, lb, rb, nc, lc, rc,
                           b->ctx->precision, acc);
}

/* accumulation / epilogue dtype for an operand dtype */
static int acc_dtype(int dt) { return tpulw__opmath(dt); }

tpuir_val tpulw__gelu_or_relu(tpulw__b *b, tpuir_val x, int gelu) {
  if (!gelu) return tpulw__bin_c(b, TPUIR_MAX, x, 0.0);
  tpuir_val e = tpulw__un(b, TPUIR_ERF, tpulw__bin_c(b, TPUIR_MUL, x, M_SQRT1_2));
  return tpulw__bin(b, TPUIR_MUL, tpulw__bin_c(b, TPUIR_MUL, x, 0.5), tpulw__bin_c(b, TPUIR_ADD, e, 1.0));
}

static int mm_fn(tpulw__b *b) {
  int op = b->op;
  const char *n1 = "self", *n2 = "mat2";
  if (op == L_ADDMM || op == L_ADDMM_ACT) { n1 = "mat1"; n2 = "mat2"; }
  if (op == L_BADDBMM || op == L_ADDBMM) { n1 = "batch1"; n2 = "batch2"; }
  if (op == L_ADDMV) { n1 = "mat"; n2 = "vec"; }
  if (op == L_MV) { n1 = "self"; n2 = "vec"; }
  if (op == L_DOT) { n1 = "self"; n2 = "tensor"; if (!tpulw__tensor_arg(b, n2)) n2 = "other"; }
  const tpulw_tensor *a = tpulw__tensor_arg(b, n1), *c = tpulw__tensor_arg(b, n2);
  if (!a || !c || a->device < 0 || c->device < 0)
    return tpu_error(TPU_E_UNSUPPORTED, "%s: missing operand", b->base);
  const tpu_view *va = &a->view, *vc = &c->view;
  int dt = va->dtype;
  b->out_rule = LW_OUT_SAME;
  char s1[128], s2[128];
  /* shape and dtype checks with PyTorch's messages */
  switch (op) {
  case L_MM: case L_ADDMM: case L_ADDMM_ACT:
    if (va->ndim != 2)
      return tpu_error(TPU_E_INVALID, "%s must be a matrix", op == L_MM ? "self" : "mat1");
    if (vc->ndim != 2) return tpu_error(TPU_E_INVALID, "mat2 must be a matrix");
    if (va->sizes[1] != vc->sizes[0]) {
      fmt_sizes(s1, sizeof s1, va);
      fmt_sizes(s2, sizeof s2, vc);
      return tpu_error(TPU_E_INVALID,
                       "mat1 and mat2 shapes cannot be multiplied (%s and %s)", s1, s2);
    }
    if (vc->dtype != dt)
      return tpu_error(TPU_E_INVALID,
                       "expected m1 and m2 to have the same dtype, but got: %s != %s",
                       tpu_dtype_name(dt), tpu_dtype_name(vc->dtype));
    break;
  case L_BMM: case L_BADDBMM: case L_ADDBMM:
    if (va->ndim != 3) return tpu_error(TPU_E_INVALID, "batch1 must be a 3D tensor");
    if (vc->ndim != 3) return tpu_error(TPU_E_INVALID, "batch2 must be a 3D tensor");
    if (vc->sizes[0] != va->sizes[0] || vc->sizes[1] != va->sizes[2])
      return tpu_error(TPU_E_INVALID,
                       "Expected size for first two dimensions of batch2 tensor "
                       "to be: [%lld, %lld] but got: [%lld, %lld].",
                       (long long)va->sizes[0], (long long)va->sizes[2],
                       (long long)vc->sizes[0], (long long)vc->sizes[1]);
    if (vc->dtype != dt)
      return tpu_error(TPU_E_INVALID,
                       "expected scalar type %s but found %s",
                       tpulw__torch_name(dt), tpulw__torch_name(vc->dtype));
    break;
  case L_MV: case L_ADDMV:
    if (va->ndim != 2 || vc->ndim != 1)
      return tpu_error(TPU_E_INVALID,
                       "vector + matrix @ vector expected, got %d, %d, %d",
                       1, va->ndim, vc->ndim);
    if (va->sizes[1] != vc->sizes[0]) {
      fmt_sizes(s1, sizeof s1, va);
      return tpu_error(TPU_E_INVALID, "size mismatch, got input (%lld), mat (%s), vec (%lld)",
                       (long long)va->sizes[0], s1, (long long)vc->sizes[0]);
    }
    if (vc->dtype != dt)
      return tpu_error(TPU_E_INVALID,
                       "expected m1 and m2 to have the same dtype, but got: %s != %s",
                       tpu_dtype_name(dt), tpu_dtype_name(vc->dtype));
    break;
  case L_DOT:
    if (va->ndim != 1 || vc->ndim != 1)
      return tpu_error(TPU_E_INVALID, "1D tensors expected, but got %dD and %dD tensors",
                       va->ndim, vc->ndim);
    if (va->sizes[0] != vc->sizes[0])
      return tpu_error(TPU_E_INVALID,
                       "inconsistent tensor size, expected tensor [%lld] and src "
                       "[%lld] to have the same number of elements, but got %lld "
                       "and %lld elements respectively",
                       (long long)va->sizes[0], (long long)vc->sizes[0],
                       (long long)va->sizes[0], (long long)vc->sizes[0]);
    if (vc->dtype != dt)
      return tpu_error(TPU_E_INVALID,
                       "dot : expected both vectors to have same dtype, but found %s and %s",
                       tpulw__torch_name(dt), tpulw__torch_name(vc->dtype));
    break;
  }
  if (dt == TPU_BOOL) return unsupported(dt);
  int acc = acc_dtype(dt);
  tpuir_val x = tpulw__tensor(b, a), y = tpulw__tensor(b, c), r;
  static const int64_t z0[1] = {0}, z1[1] = {1}, z2[1] = {2};
  static const int64_t b02l[2] = {0, 2}, b01r[2] = {0, 1};
  switch (op) {
  case L_MM: case L_ADDMM: case L_ADDMM_ACT:
    r = dot(b, x, y, 0, NULL, NULL, 1, z1, z0, acc);
    break;
  case L_BMM: case L_BADDBMM:
    r = dot(b, x, y, 1, z0, z0, 1, z2, z1, acc);
    break;
  case L_ADDBMM:
    r = dot(b, x, y, 0, NULL, NULL, 2, b02l, b01r, acc);
    break;
  case L_MV: case L_ADDMV:
    r = dot(b, x, y, 0, NULL, NULL, 1, z1, z0, acc);
    break;
  default: /* L_DOT */
    r = dot(b, x, y, 0, NULL, NULL, 1, z0, z0, acc);
    break;
  }
  if (op == L_MM || op == L_BMM || op == L_MV || op == L_DOT)
    return tpulw__result_as(b, r, dt);

  /* beta * self + alpha * (product) */
  const tpulw_tensor *self = tpulw__tensor_arg(b, "self");
  if (!self) return tpu_error(TPU_E_UNSUPPORTED, "%s: no self", b->base);
  if (self->view.dtype != dt)
    return tpu_error(TPU_E_INVALID,
                     "self and mat2 must have the same dtype, but got %s and %s",
                     tpulw__torch_name(self->view.dtype), tpulw__torch_name(dt));
  tpulw__scalar beta = tpulw__scalar_i(1), alpha = tpulw__scalar_i(1);
  tpulw__scalar_arg(b, "beta", &beta);
  tpulw__scalar_arg(b, "alpha", &alpha);
  tpulw__shape rs = tpulw__info(b, r);
  /* self must broadcast to the product's shape */
  const tpu_view *sv = &self->view;
  if (sv->ndim > rs.ndim)
    goto bad_expand;
  for (int i = 0; i < sv->ndim; i++) {
    int64_t want = rs.sizes[rs.ndim - sv->ndim + i];
    if (sv->sizes[i] != 1 && sv->sizes[i] != want) goto bad_expand;
  }
  if (alpha.f != 1.0 || alpha.kind != LW_SK_INT)
    r = tpulw__bin(b, TPUIR_MUL, r, tpulw__const_s(b, acc, alpha));
  /* integer dtypes: beta/alpha are converted to the dtype first */
  int beta_zero = beta.kind != LW_SK_FLOAT ? beta.i == 0
                  : tpu_dtype_is_float(dt) ? beta.f == 0.0
                                           : (int64_t)beta.f == 0;
  if (!beta_zero) {
    tpuir_val sv_ = tpulw__convert(b, tpulw__tensor(b, self), acc);
    if (!(beta.kind == LW_SK_INT && beta.i == 1))
      sv_ = tpulw__bin(b, TPUIR_MUL, sv_, tpulw__const_s(b, acc, beta));
    r = tpulw__bin(b, TPUIR_ADD, sv_, r);
  }
  if (op == L_ADDMM_ACT) {
    r = tpulw__gelu_or_relu(b, r, (int)tpulw__int(b, "use_gelu", 0));
  }
  return tpulw__result_as(b, r, dt);

bad_expand: {
  char t[256];
  size_t k = (size_t)snprintf(t, sizeof t, "[");
  for (int i = 0; i < rs.ndim && k < sizeof t; i++)
    k += (size_t)snprintf(t + k, sizeof t - k, "%s%lld", i ? ", " : "", (long long)rs.sizes[i]);
  char u[256];
  size_t q = (size_t)snprintf(u, sizeof u, "[");
  for (int i = 0; i < sv->ndim && q < sizeof u; i++)
    q += (size_t)snprintf(u + q, sizeof u - q, "%s%lld", i ? ", " : "", (long long)sv->sizes[i]);
  return tpu_error(TPU_E_INVALID,
                   "The expanded size of the tensor (%lld) must match the "
                   "existing size (%lld) at non-singleton dimension %d.  Target "
                   "sizes: %s].  Tensor sizes: %s]",
                   (long long)rs.sizes[rs.ndim - 1], (long long)sv->sizes[sv->ndim - 1],
                   rs.ndim - 1, t, u);
}
}

#define LIN3(n, code, ...) {n, mm_fn, code, __VA_ARGS__}, {n ".out", mm_fn, code, __VA_ARGS__}

const tpulw__row tpulw__rows_linalg[] = {
    LIN3("mm", L_MM, LW_COMPLEX_OK),
    LIN3("bmm", L_BMM, LW_COMPLEX_OK),
    LIN3("addmm", L_ADDMM), {"addmm_", mm_fn, L_ADDMM},
    LIN3("baddbmm", L_BADDBMM), {"baddbmm_", mm_fn, L_BADDBMM},
    LIN3("addbmm", L_ADDBMM), {"addbmm_", mm_fn, L_ADDBMM},
    LIN3("addmv", L_ADDMV), {"addmv_", mm_fn, L_ADDMV},
    LIN3("mv", L_MV, LW_COMPLEX_OK),
    LIN3("dot", L_DOT, LW_COMPLEX_OK),
    LIN3("vdot", L_DOT),
    LIN3("_addmm_activation", L_ADDMM_ACT),
};
const int tpulw__nrows_linalg = sizeof tpulw__rows_linalg / sizeof tpulw__rows_linalg[0];

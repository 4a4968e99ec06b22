/* lower/rng.c - random ops on the counter-based Philox generator:
 * uniform_, normal_ / normal, bernoulli(_), random_, exponential_,
 * randperm, native_dropout (+ backward), rrelu_with_noise. Each lowering reads the generator's
 * (seed, offset) at prepare time and advances the offset by one per draw
 * (each draw is its own Philox stream, see exec/vtpu/rng.c), so results do not
 * depend on fusion or threading.
 */
#include <math.h>
#include <string.h>

#include "lower/internal.h"

enum { RN_UNIFORM = 1, RN_NORMAL, RN_NORMAL_TT, RN_BERNOULLI_F, RN_BERNOULLI_T,
       RN_BERNOULLI_SELF, RN_RANDOM, RN_EXPONENTIAL, RN_DROPOUT, RN_DROPOUT_BW,
       RN_CAUCHY, RN_GEOMETRIC, RN_LOG_NORMAL };

/* Random numbers of `kind` in dtype over a shape; advances the generator. */
tpuir_val tpulw__rng(tpulw__b *b, int kind, int dtype, int nd, const int64_t *sizes) {
  const tpulw_arg *g = tpulw__arg(b, "generator");
  tpulw_philox *gen = (g && g->kind == TPULW_GENERATOR) ? g->gen : NULL;
  if (!gen) return tpu_error(TPU_E_UNSUPPORTED, "%s: no generator", b->base);
  tpuir_val v = tpuir_rng(b->g, kind, dtype, nd, sizes, gen->seed, gen->offset);
  if (v >= 0) gen->offset += 1;
  return v;
}

/* dtype in which uniform floats are drawn for a float result dtype */
static int draw_dtype(int dt) { return dt == TPU_F64 ? TPU_F64 : TPU_F32; }

static int float_self(const tpulw__b *b, const tpulw_tensor **self, const char *what) {
  *self = tpulw__tensor_arg(b, "self");
  if (!*self) return tpu_error(TPU_E_UNSUPPORTED, "%s: no self", b->base);
  if (!tpu_dtype_is_float((*self)->view.dtype))
    return tpu_error(TPU_E_UNSUPPORTED, "\"%s\" not implemented for '%s'", what,
                     tpulw__torch_name((*self)->view.dtype));
  return TPU_OK;
}

static int uniform_fn(tpulw__b *b) {
  const tpulw_tensor *self;
  int rc = float_self(b, &self, "check_uniform_bounds");
  if (rc < 0) return rc;
  double from = tpulw__float(b, "from", 0), to = tpulw__float(b, "to", 1);
  if (!(from <= to))
    return tpu_error(TPU_E_INVALID,
                     "uniform_ expects to return a [from, to) range, but found from=%g > to=%g",
                     from, to);
  const tpu_view *v = &self->view;
  int dt = v->dtype, cdt = draw_dtype(dt);
  tpuir_val u = tpulw__rng(b, TPUIR_RNG_UNIFORM, cdt, v->ndim, v->sizes);
  tpuir_val r = tpulw__bin_c(b, TPUIR_ADD, tpulw__bin_c(b, TPUIR_MUL, u, to - from), from);
  return tpulw__result_as(b, r, dt);
}

static int exponential_fn(tpulw__b *b) {
  const tpulw_tensor *self;
  int rc = float_self(b, &self, "exponential_cpu");
  if (rc < 0) return rc;
  double l = tpulw__float(b, "lambd", 1);
  if (!(l > 0))
    return tpu_error(TPU_E_INVALID, "exponential_ expects lambda > 0.0, but found lambda=%g", l);
  const tpu_view *v = &self->view;
  int dt = v->dtype, cdt = draw_dtype(dt);
  tpuir_val u = tpulw__rng(b, TPUIR_RNG_UNIFORM, cdt, v->ndim, v->sizes);
  tpuir_val r = tpulw__bin_c(b, TPUIR_DIV, tpulw__un(b, TPUIR_LOG1P, tpulw__un(b, TPUIR_NEG, u)), -l);
  return tpulw__result_as(b, r, dt);
}

/* cauchy_, geometric_, log_normal_ */
static int dist_fn(tpulw__b *b) {
  const tpulw_tensor *self = tpulw__tensor_arg(b, "self");
  if (!self) return tpu_error(TPU_E_UNSUPPORTED, "%s: no self", b->base);
  const tpu_view *v = &self->view;
  int dt = v->dtype;
  if (!tpu_dtype_is_float(dt) && !(b->op == RN_GEOMETRIC && tpu_dtype_is_int(dt)))
    return tpu_error(TPU_E_UNSUPPORTED, "\"%s\" not implemented for '%s'", b->base,
                     tpulw__torch_name(dt));
  int cdt = draw_dtype(dt);
  tpuir_val r;
  if (b->op == RN_LOG_NORMAL) {
    double mean = tpulw__float(b, "mean", 1), std = tpulw__float(b, "std", 2);
    if (!(std > 0))
      return tpu_error(TPU_E_INVALID, "log_normal_ expects std > 0.0, but found std=%g", std);
    tpuir_val z = tpulw__rng(b, TPUIR_RNG_NORMAL, cdt, v->ndim, v->sizes);
    r = tpulw__un(b, TPUIR_EXP, tpulw__bin_c(b, TPUIR_ADD, tpulw__bin_c(b, TPUIR_MUL, z, std), mean));
  } else {
    tpuir_val u = tpulw__rng(b, TPUIR_RNG_UNIFORM, cdt, v->ndim, v->sizes);
    if (b->op == RN_CAUCHY) {
      double med = tpulw__float(b, "median", 0), sig = tpulw__float(b, "sigma", 1);
      if (!(sig > 0))
        return tpu_error(TPU_E_INVALID, "cauchy_ expects sigma > 0.0, but found sigma=%g", sig);
      r = tpulw__un(b, TPUIR_TAN, tpulw__bin_c(b, TPUIR_MUL, tpulw__bin_c(b, TPUIR_SUB, u, 0.5), M_PI));
      r = tpulw__bin_c(b, TPUIR_ADD, tpulw__bin_c(b, TPUIR_MUL, r, sig), med);
    } else {
      double p = tpulw__float(b, "p", 0.5);
      if (!(p > 0 && p < 1))
        return tpu_error(TPU_E_INVALID, "geometric_ expects p to be in (0, 1), but got p=%g", p);
      /* ceil(log(u') / log1p(-p)) with u' = 1 - u in (0, 1] */
      tpuir_val lu = tpulw__un(b, TPUIR_LOG, tpulw__bin(b, TPUIR_SUB, tpulw__const(b, cdt, 1), u));
      r = tpulw__un(b, TPUIR_CEIL, tpulw__bin_c(b, TPUIR_DIV, lu, log1p(-p)));
      r = tpulw__bin_c(b, TPUIR_MAX, r, 1);
    }
  }
  b->out_rule = LW_OUT_ANY;
  return tpulw__result_as(b, r, dt);
}

static int normal_fn(tpulw__b *b) {
  if (b->op == RN_NORMAL) { /* normal_(self, mean, std) */
    const tpulw_tensor *self;
    int rc = float_self(b, &self, "normal_kernel_cpu");
    if (rc < 0) return rc;
    double mean = tpulw__float(b, "mean", 0), std = tpulw__float(b, "std", 1);
    if (!(std >= 0))
      return tpu_error(TPU_E_INVALID, "normal expects std >= 0.0, but found std %g", std);
    const tpu_view *v = &self->view;
    int dt = v->dtype, cdt = draw_dtype(dt);
    tpuir_val z = tpulw__rng(b, TPUIR_RNG_NORMAL, cdt, v->ndim, v->sizes);
    tpuir_val r = tpulw__bin_c(b, TPUIR_ADD, tpulw__bin_c(b, TPUIR_MUL, z, std), mean);
    return tpulw__result_as(b, r, dt);
  }
  /* normal.Tensor_float / float_Tensor / Tensor_Tensor */
  tpulw__opnd mean = tpulw__opnd_arg(b, "mean"), std = tpulw__opnd_arg(b, "std");
  if (mean.kind == LW_OPND_NONE) mean = tpulw__opnd_scalar(tpulw__scalar_f(0));
  if (std.kind == LW_OPND_NONE) std = tpulw__opnd_scalar(tpulw__scalar_f(1));
  if (mean.kind != LW_OPND_TENSOR && std.kind != LW_OPND_TENSOR)
    return tpu_error(TPU_E_UNSUPPORTED, "normal: no tensor argument");
  if (std.kind == LW_OPND_SCALAR && !(std.s.f >= 0))
    return tpu_error(TPU_E_INVALID, "normal expects std >= 0.0, but found std %g", std.s.f);
  tpulw__opnd ops[2] = {mean, std};
  int dt = tpulw__result_type(2, ops);
  if (!tpu_dtype_is_float(dt))
    return tpu_error(TPU_E_UNSUPPORTED, "normal: non-float dtype");
  int cdt = draw_dtype(dt);
  tpuir_val vm = tpulw__opnd_val(b, &mean, cdt), vs = tpulw__opnd_val(b, &std, cdt);
  tpuir_val v2[2] = {vm, vs};
  int rc = tpulw__bcast_all(b, 2, v2);
  if (rc < 0) return rc;
  tpulw__shape s = tpulw__info(b, v2[0]);
  tpuir_val z = tpulw__rng(b, TPUIR_RNG_NORMAL, cdt, s.ndim, s.sizes);
  return tpulw__result_as(b, tpulw__bin(b, TPUIR_ADD, tpulw__bin(b, TPUIR_MUL, z, v2[1]), v2[0]), dt);
}

static int bernoulli_fn(tpulw__b *b) {
  const tpulw_tensor *self = tpulw__tensor_arg(b, "self");
  if (!self) return tpu_error(TPU_E_UNSUPPORTED, "bernoulli: no self");
  const tpu_view *v = &self->view;
  int dt = v->dtype;
  int cdt = dt == TPU_F64 ? TPU_F64 : TPU_F32;
  tpuir_val p;
  if (b->op == RN_BERNOULLI_F) {
    double pf = tpulw__float(b, "p", 0.5);
    if (!(pf >= 0 && pf <= 1))
      return tpu_error(TPU_E_INVALID, "bernoulli_ expects p to be in [0, 1], but got p=%g", pf);
    p = tpulw__const(b, cdt, pf);
  } else if (b->op == RN_BERNOULLI_T) {
    const tpulw_tensor *pt = tpulw__tensor_arg(b, "p");
    if (!pt) return tpu_error(TPU_E_UNSUPPORTED, "bernoulli: no p");
    if (!tpu_dtype_is_float(pt->view.dtype))
      return tpu_error(TPU_E_UNSUPPORTED, "bernoulli: integer p");
    p = tpulw__convert(b, tpulw__tensor(b, pt), cdt);
  } else { /* probabilities are self */
    if (!tpu_dtype_is_float(dt))
      return tpu_error(TPU_E_UNSUPPORTED, "\"bernoulli_tensor_cpu_p_\" not implemented for '%s'",
                       tpulw__torch_name(dt));
    p = tpulw__convert(b, tpulw__tensor(b, self), cdt);
  }
  tpuir_val u = tpulw__rng(b, TPUIR_RNG_UNIFORM, cdt, v->ndim, v->sizes);
  tpuir_val r = tpulw__bin(b, TPUIR_LT, u, p);
  b->out_rule = LW_OUT_ANY;
  return tpulw__result_as(b, r, dt);
}

static int random_fn(tpulw__b *b) {
  const tpulw_tensor *self = tpulw__tensor_arg(b, "self");
  if (!self) return tpu_error(TPU_E_UNSUPPORTED, "random_: no self");
  const tpu_view *v = &self->view;
  int dt = v->dtype;
  int64_t from = tpulw__int(b, "from", 0);
  int has_to = !tpulw__none(b, "to");
  uint64_t range; /* 0 = full 2^63 */
  if (has_to) {
    int64_t to = tpulw__int(b, "to", 0);
    if (from >= to)
      return tpu_error(TPU_E_INVALID,
                       "random_ expects 'from' to be less than 'to', but got from=%lld >= to=%lld",
                       (long long)from, (long long)to);
    range = (uint64_t)to - (uint64_t)from;
  } else {
    uint64_t top; /* exclusive upper bound of the default range */
    switch (dt) {
    case TPU_BOOL: top = 2; break;
    case TPU_U8: top = 256; break;
    case TPU_I8: top = 128; break;
    case TPU_I16: top = 32768; break;
    case TPU_I32: top = 2147483648ull; break;
    case TPU_I64: top = 0; break;
    case TPU_F16: top = (1ull << 11) + 1; break;
    case TPU_BF16: top = (1ull << 8) + 1; break;
    case TPU_F32: top = (1ull << 24) + 1; break;
    default: top = (1ull << 53) + 1; break;
    }
    if (top == 0) range = 0;
    else if ((uint64_t)from >= top && from >= 0)
      return tpu_error(TPU_E_INVALID, "random_ expects 'from' to be less than 'to'");
    else range = top - (uint64_t)from;
  }
  tpuir_val bits = tpulw__rng(b, TPUIR_RNG_BITS, TPU_I64, v->ndim, v->sizes);
  tpuir_val pos = tpulw__bin(b, TPUIR_AND, bits, tpulw__bcast(b, tpuir_const_i(b->g, TPU_I64, INT64_MAX),
                                                       v->ndim, v->sizes));
  tpuir_val r = pos;
  if (range != 0 && range <= (uint64_t)INT64_MAX)
    r = tpulw__bin(b, TPUIR_REM, pos, tpulw__bcast(b, tpuir_const_i(b->g, TPU_I64, (int64_t)range),
                                           v->ndim, v->sizes));
  if (from != 0)
    r = tpulw__bin(b, TPUIR_ADD, r, tpulw__bcast(b, tpuir_const_i(b->g, TPU_I64, from), v->ndim, v->sizes));
  b->out_rule = LW_OUT_ANY;
  return tpulw__result_as(b, r, dt);
}

/* randperm: the stable ascending order of n random 64-bit keys (one draw);
 * ties (probability ~n^2/2^65) keep index order, so the result is always a
 * permutation of 0..n-1. */
static int randperm_fn(tpulw__b *b) {
  const tpulw_tensor *out = tpulw__tensor_arg(b, "out");
  if (!out) return tpu_error(TPU_E_UNSUPPORTED, "randperm: no out");
  int64_t n = tpulw__int(b, "n", 0);
  if (n < 0) return tpu_error(TPU_E_INVALID, "n must be non-negative, got%lld", (long long)n);
  int dt = out->view.dtype;
  if (dt == TPU_BOOL || tpu_dtype_is_complex(dt))
    return tpu_error(TPU_E_UNSUPPORTED, "\"randperm\" not implemented for '%s'", tpulw__torch_name(dt));
  tpuir_val keys = tpulw__rng(b, TPUIR_RNG_BITS, TPU_I64, 1, &n);
  if (keys < 0) return (int)keys;
  tpuir_val perm = tpuir_sort(b->g, keys, 0, 0, TPUIR_SORT_INDICES);
  b->out_rule = LW_OUT_ANY;
  return tpulw__result_as(b, perm, dt);
}

static int dropout_fn(tpulw__b *b) {
  const tpulw_tensor *in = tpulw__tensor_arg(b, "input");
  if (!in) return tpu_error(TPU_E_UNSUPPORTED, "native_dropout: no input");
  int dt = in->view.dtype;
  double p = tpulw__float(b, "p", 0.5);
  int train = tpulw__none(b, "train") ? 1 : (int)tpulw__int(b, "train", 1);
  tpuir_val x = tpulw__tensor(b, in);
  const tpu_view *v = &in->view;
  if (!train || p == 0) {
    int rc = tpulw__result(b, x);
    if (rc < 0) return rc;
    return tpulw__result(b, tpulw__full(b, TPU_BOOL, v->ndim, v->sizes, 1));
  }
  if (!tpu_dtype_is_float(dt))
    return tpu_error(TPU_E_UNSUPPORTED, "native_dropout: non-float input");
  if (!(p >= 0 && p <= 1))
    return tpu_error(TPU_E_INVALID, "dropout probability has to be between 0 and 1, but got %g", p);
  int cdt = draw_dtype(dt);
  double keep = 1 - p, scale = keep == 0 ? 0 : 1 / keep;
  tpuir_val u = tpulw__rng(b, TPUIR_RNG_UNIFORM, cdt, v->ndim, v->sizes);
  tpuir_val mask = tpulw__bin(b, TPUIR_LT, u, tpulw__const(b, cdt, keep));
  int odt = tpulw__opmath(dt);
  tpuir_val y = tpulw__bin_c(b, TPUIR_MUL,
                         tpulw__bin(b, TPUIR_MUL, tpulw__convert(b, x, odt), tpulw__convert(b, mask, odt)),
                         scale);
  int rc = tpulw__result_as(b, y, dt);
  if (rc < 0) return rc;
  return tpulw__result(b, mask);
}

static int dropout_bw_fn(tpulw__b *b) {
  const tpulw_tensor *g = tpulw__tensor_arg(b, "grad_output");
  const tpulw_tensor *m = tpulw__tensor_arg(b, "mask");
  if (!g || !m) return tpu_error(TPU_E_UNSUPPORTED, "native_dropout_backward: missing operand");
  int dt = g->view.dtype;
  if (!tpu_dtype_is_float(dt))
    return tpu_error(TPU_E_UNSUPPORTED, "native_dropout_backward: non-float");
  int cdt = tpulw__opmath(dt);
  double scale = tpulw__float(b, "scale", 1);
  tpuir_val r = tpulw__bin(b, TPUIR_MUL, tpulw__convert(b, tpulw__tensor(b, g), cdt),
                       tpulw__convert(b, tpulw__tensor(b, m), cdt));
  return tpulw__result_as(b, tpulw__bin_c(b, TPUIR_MUL, r, scale), dt);
}

/* ---- rrelu_with_noise ---------------------------------------------------- */

static int rrelu_fn(tpulw__b *b) {
  const tpulw_tensor *in = tpulw__tensor_arg(b, "self"), *nz = tpulw__tensor_arg(b, "noise");
  int rc;
  if ((rc = tpulw__need_tpu(b, in))) return rc;
  int dt = in->view.dtype;
  if ((rc = tpulw__float_only(b, dt))) return rc;
  double lo = tpulw__float(b, "lower", 1.0 / 8), up = tpulw__float(b, "upper", 1.0 / 3);
  int training = (int)tpulw__int(b, "training", 0);
  int cdt = tpulw__opmath(dt);
  tpuir_val x = tpulw__convert(b, tpulw__tensor(b, in), cdt);
  tpulw__shape s = tpulw__info(b, x);
  if (!training) {
    tpuir_val r = tpulw__sel(b, tpulw__bin_c(b, TPUIR_GE, x, 0), x, tpulw__bin_c(b, TPUIR_MUL, x, (lo + up) / 2));
    if (nz) tpulw__not_out(b, "noise");
    return tpulw__result_as(b, r, dt);
  }
  if ((rc = tpulw__need_tpu(b, nz))) return rc;
  if (!(lo <= up))
    return tpu_error(TPU_E_INVALID, "Lower bound should be less than or equal to the upper bound");
  int ndt = nz->view.dtype;
  int same = nz->view.ndim == s.ndim;
  for (int i = 0; same && i < s.ndim; i++) same = nz->view.sizes[i] == s.sizes[i];
  if (!same) return tpu_error(TPU_E_UNSUPPORTED, "rrelu_with_noise: noise shape");
  int wdt = dt == TPU_F64 ? TPU_F64 : TPU_F32;
  tpuir_val u = tpulw__rng(b, TPUIR_RNG_UNIFORM, wdt, s.ndim, s.sizes);
  LW_TRY(u);
  u = tpulw__convert(b, tpulw__bin_c(b, TPUIR_ADD, tpulw__bin_c(b, TPUIR_MUL, u, up - lo), lo), cdt);
  tpuir_val neg = tpulw__bin_c(b, TPUIR_LE, x, 0);
  tpuir_val noise = tpulw__sel(b, neg, u, tpulw__const(b, cdt, 1));
  tpuir_val r = tpulw__bin(b, TPUIR_MUL, x, noise);
  if ((rc = tpulw__result_as(b, r, dt)) < 0) return rc;
  return tpulw__result_to(b, tpulw__convert(b, noise, ndt), "noise");
}

const tpulw__row tpulw__rows_random[] = {
    {"uniform_", uniform_fn, RN_UNIFORM},
    {"normal_", normal_fn, RN_NORMAL},
    {"normal.Tensor_float", normal_fn, RN_NORMAL_TT},
    {"normal.Tensor_float_out", normal_fn, RN_NORMAL_TT},
    {"normal.float_Tensor", normal_fn, RN_NORMAL_TT},
    {"normal.float_Tensor_out", normal_fn, RN_NORMAL_TT},
    {"normal.Tensor_Tensor", normal_fn, RN_NORMAL_TT},
    {"normal.Tensor_Tensor_out", normal_fn, RN_NORMAL_TT},
    {"bernoulli_.float", bernoulli_fn, RN_BERNOULLI_F},
    {"bernoulli.p", bernoulli_fn, RN_BERNOULLI_F},
    {"bernoulli.float_out", bernoulli_fn, RN_BERNOULLI_F},
    {"bernoulli_.Tensor", bernoulli_fn, RN_BERNOULLI_T},
    {"bernoulli.Tensor", bernoulli_fn, RN_BERNOULLI_T},
    {"bernoulli.Tensor_out", bernoulli_fn, RN_BERNOULLI_T},
    {"bernoulli", bernoulli_fn, RN_BERNOULLI_SELF},
    {"bernoulli.out", bernoulli_fn, RN_BERNOULLI_SELF},
    {"random_", random_fn, RN_RANDOM},
    {"random_.from", random_fn, RN_RANDOM},
    {"random_.to", random_fn, RN_RANDOM},
    {"exponential_", exponential_fn, RN_EXPONENTIAL},
    {"cauchy_", dist_fn, RN_CAUCHY},
    {"geometric_", dist_fn, RN_GEOMETRIC},
    {"log_normal_", dist_fn, RN_LOG_NORMAL},
    {"randperm.generator_out", randperm_fn, RN_RANDOM},
    {"native_dropout", dropout_fn, RN_DROPOUT, LW_NEEDS_GEN},
    {"native_dropout.out", dropout_fn, RN_DROPOUT},
    {"native_dropout_backward", dropout_bw_fn, RN_DROPOUT_BW},
    {"native_dropout_backward.out", dropout_bw_fn, RN_DROPOUT_BW},
    {"rrelu_with_noise", rrelu_fn, 0}, {"rrelu_with_noise.out", rrelu_fn, 0},
};
const int tpulw__nrows_random = sizeof tpulw__rows_random / sizeof tpulw__rows_random[0];

/* lower/internal.h - private interface of the ATen -> IR lowering layer
 * (runtime/src/lower/). Not installed; the public contract is
 * include/tpu_lower.h.
 *
 * A lowering function receives a builder `tpulw__b` holding the call's
 * arguments and an empty IR graph. It builds the FUNCTIONAL computation
 * from the non-output arguments (tensor args become graph parameters via
 * tpulw__tensor / tpulw__opnd_val), then declares its results with tpulw__result() in
 * the op's natural result dtype and shape. The driver (lower/lower.c) then picks
 * destinations (in-place `self`, out= args, or new tensors), checks shapes
 * and dtype casts, and appends converts.
 */
#ifndef TPU_LOWER_INTERNAL_H
#define TPU_LOWER_INTERNAL_H

#include <stdint.h>

#include "tpu_base.h"
#include "tpu_ir.h"
#include "tpu_lower.h"

#define LW_MAX_RES 8

/* How out= / in-place destinations may differ in dtype from the result. */
enum {
  LW_OUT_CAST = 0, /* torch.can_cast(result, dest) (TensorIterator ops) */
  LW_OUT_SAME,     /* dest dtype must equal the result dtype */
  LW_OUT_ANY       /* any conversion allowed (copy-like ops) */
};

/* How a run-time index error (TPU_E_INDEX from the executor) is reported
 * by a synchronizing launch, to match PyTorch CPU's exception. */
enum {
  LW_ERR_KEEP = 0,   /* IndexError as is */
  LW_ERR_RUNTIME,    /* RuntimeError, same message (gather, scatter, ...) */
  LW_ERR_NLL_TARGET, /* IndexError "Target N is out of bounds." */
  LW_ERR_DIM0 = 16   /* + d: IndexError "... for dimension d ..." */
};

typedef struct tpulw__b {
  const tpulw_ctx *ctx;
  const char *base;     /* ATen base name, e.g. "add_" */
  const char *overload; /* "Tensor", "out", "" for the default overload */
  const tpulw_arg *args;
  int nargs;
  int op;               /* per-row parameter from the table */
  tpuir_graph *g;
  /* parameters: one per distinct tensor view */
  int nparams, capparams;
  tpu_view *params;
  tpuir_val *param_vals;
  /* results */
  int nres;
  tpuir_val res[LW_MAX_RES];
  int res_dest[LW_MAX_RES]; /* explicit destination arg index, or -1 */
  uint64_t not_out;         /* args (bit = index) written only explicitly */
  int sync;       /* launch must synchronize (op checks index ranges) */
  int err_remap;  /* LW_ERR_*: how a run-time TPU_E_INDEX is reported */
  int out_rule;   /* LW_OUT_* */
  uint32_t col_major; /* bit i: result i laid out column-major (tpulw_out_info) */
  int elementwise;    /* the row has LW_ELEMENTWISE */
} tpulw__b;

typedef int (*tpulw__fn)(tpulw__b *b);

/* ---- table rows per family (defined in each lower_<family>.c) ---------- */
/* One ATen overload: everything the table knows of it is in its row. */
typedef struct tpulw__row {
  const char *name; /* "add.Tensor", "relu" (default overload) */
  tpulw__fn fn;
  int op;           /* parameter passed as b->op */
  unsigned flags;   /* LW_* below (a family may add some to all its rows) */
} tpulw__row;

enum {
  LW_COMPLEX_OK = 1u << 0,   /* also lowers calls with complex arguments */
  LW_COMPLEX_ONLY = 1u << 1, /* lowers the complex calls of a name whose real
                                calls another row lowers */
  LW_NEEDS_GEN = 1u << 2,    /* draws random numbers without a Generator in
                                its schema (tpulw_op_flags) */
  LW_CPU_INDEX = 1u << 3,    /* accepts CPU index tensors (tpulw_op_flags) */
  LW_ELEMENTWISE = 1u << 4,  /* a TensorIterator op: new results follow the
                                inputs' memory layout (ti_layout) */
};

extern const tpulw__row tpulw__rows_pointwise[];
extern const int tpulw__nrows_pointwise;
extern const tpulw__row tpulw__rows_reduce[];
extern const int tpulw__nrows_reduce;
extern const tpulw__row tpulw__rows_linalg[];
extern const int tpulw__nrows_linalg;
extern const tpulw__row tpulw__rows_nn[];
extern const int tpulw__nrows_nn;
extern const tpulw__row tpulw__rows_index[];
extern const int tpulw__nrows_index;
extern const tpulw__row tpulw__rows_view_scatter[];
extern const int tpulw__nrows_view_scatter;
extern const tpulw__row tpulw__rows_random[];
extern const int tpulw__nrows_random;
extern const tpulw__row tpulw__rows_conv[];
extern const int tpulw__nrows_conv;
extern const tpulw__row tpulw__rows_sort[];
extern const int tpulw__nrows_sort;
extern const tpulw__row tpulw__rows_resize[];
extern const int tpulw__nrows_resize;
extern const tpulw__row tpulw__rows_dynamic[];
extern const int tpulw__nrows_dynamic;
extern const tpulw__row tpulw__rows_compare[];
extern const int tpulw__nrows_compare;
extern const tpulw__row tpulw__rows_spectral[];
extern const int tpulw__nrows_spectral;
extern const tpulw__row tpulw__rows_linalg_solve[];
extern const int tpulw__nrows_linalg_solve;
extern const tpulw__row tpulw__rows_loss[];
extern const int tpulw__nrows_loss;
extern const tpulw__row tpulw__rows_embedding[];
extern const int tpulw__nrows_embedding;
extern const tpulw__row tpulw__rows_distance[];
extern const int tpulw__nrows_distance;
extern const tpulw__row tpulw__rows_complex[];
extern const int tpulw__nrows_complex;
extern const tpulw__row tpulw__rows_fft[];
extern const int tpulw__nrows_fft;
/* torch_tpu::sdpa_fwd / sdpa_bwd (lower/attention.c) */
extern const tpulw__row tpulw__rows_attention[];
extern const int tpulw__nrows_attention;
/* _native_multi_head_attention, _transformer_encoder_layer_fwd,
 * _masked_softmax, _transform_bias_rescale_qkv (lower/transformer.c) */
extern const tpulw__row tpulw__rows_transformer[];
extern const int tpulw__nrows_transformer;

/* 1 if any tensor / dtype / Scalar argument is complex (lower/complex.c):
 * such a call needs a row with LW_COMPLEX_OK or LW_COMPLEX_ONLY. */
int tpulw__call_is_complex(const tpulw_arg *args, int nargs);
extern const tpulw__row tpulw__rows_special[];
/* torch_tpu::c_kernel (lower/kernel.c), found by name outside the table */
extern const tpulw__row tpulw__row_c_kernel;
extern const int tpulw__nrows_special;

/* ---- scalars ------------------------------------------------------------ */
enum { LW_SK_BOOL = 0, LW_SK_INT, LW_SK_FLOAT, LW_SK_COMPLEX };
typedef struct tpulw__scalar {
  int kind; /* LW_SK_* */
  int64_t i;
  double f; /* valid for every kind (the real part of a complex one) */
  double im; /* imaginary part (LW_SK_COMPLEX; 0 otherwise) */
} tpulw__scalar;

tpulw__scalar tpulw__scalar_f(double f);
tpulw__scalar tpulw__scalar_i(int64_t i);
/* Complex scalar re + im*i (kind LW_SK_COMPLEX). */
tpulw__scalar tpulw__scalar_c(double re, double im);

/* ---- argument access (lower/args.c) ------------------------------------ */
/* Argument by schema name, NULL if absent. */
const tpulw_arg *tpulw__arg(const tpulw__b *b, const char *name);
/* 1 if the argument is absent or None. */
int tpulw__none(const tpulw__b *b, const char *name);
/* int / bool argument (INT, BOOL, or an integral 0-dim CPU tensor); def if
 * absent or None. */
int64_t tpulw__int(const tpulw__b *b, const char *name, int64_t def);
/* float argument (FLOAT, INT, BOOL, or 0-dim CPU tensor). */
double tpulw__float(const tpulw__b *b, const char *name, double def);
/* str argument (NULL if absent/None). */
const char *tpulw__str(const tpulw__b *b, const char *name);
/* dtype argument (TPULW_DTYPE), or def. */
int tpulw__dtype_arg(const tpulw__b *b, const char *name, int def);
/* int[] argument: *n receives its length; NULL (and *n = -1) if absent or
 * None. A single INT is returned as a list of one (static storage in b is
 * not used: caller passes one int64 of scratch). */
const int64_t *tpulw__ints(const tpulw__b *b, const char *name, int *n,
                       int64_t *scratch);
/* Scalar argument (INT/FLOAT/BOOL or 0-dim CPU tensor); returns 0 when
 * absent/None, 1 when found. */
int tpulw__scalar_arg(const tpulw__b *b, const char *name, tpulw__scalar *out);
/* Tensor argument (device or 0-dim CPU); NULL if absent/None/undefined. */
const tpulw_tensor *tpulw__tensor_arg(const tpulw__b *b, const char *name);

/* ---- operands of elementwise ops --------------------------------------- */
enum { LW_OPND_NONE = 0, LW_OPND_TENSOR, LW_OPND_SCALAR };
typedef struct tpulw__opnd {
  int kind;
  const tpulw_tensor *t;
  tpulw__scalar s;
} tpulw__opnd;

/* Operand from a Tensor or Scalar argument; kind NONE if absent/None. */
tpulw__opnd tpulw__opnd_arg(const tpulw__b *b, const char *name);
tpulw__opnd tpulw__opnd_scalar(tpulw__scalar s);
tpulw__opnd tpulw__opnd_tensor(const tpulw_tensor *t);

/* torch.promote_types. */
int tpulw__promote(int a, int b);
/* torch.can_cast(from, to). */
int tpulw__can_cast(int from, int to);
/* PyTorch ScalarType name ("Float", "Long", ...). */
const char *tpulw__torch_name(int dt);
/* C++ type name PyTorch prints in some messages ("float", "long int"). */
const char *tpulw__c_name(int dt);
/* dtype of the first out= (is_output) tensor argument, or -1. */
int tpulw__out_dtype(const tpulw__b *b);
/* torch.result_type over n operands (NONE ones skipped). Returns the dtype
 * (or -1 if there are no operands). */
int tpulw__result_type(int n, const tpulw__opnd *ops);
/* Default float dtype (torch.get_default_dtype(): float32). */
#define LW_DEFAULT_FLOAT TPU_F32
/* Computation dtype for a float result dtype: f16/bf16 -> f32 (PyTorch's
 * opmath), others unchanged. */
int tpulw__opmath(int dt);
/* dt if floating, else the default float dtype. */
int tpulw__float_or_default(int dt); /* complex dtypes are kept too */

/* ---- graph values ------------------------------------------------------- */
typedef struct tpulw__shape {
  int dtype, ndim;
  int64_t sizes[TPU_MAX_DIMS];
} tpulw__shape;

/* Shape/dtype of a value. */
tpulw__shape tpulw__info(const tpulw__b *b, tpuir_val v);
int64_t tpulw__numel(const tpulw__shape *s);
/* Value of a tensor arg in its own dtype and shape: a graph parameter
 * bound to the view (identical views share one parameter), or a constant
 * for a 0-dim CPU tensor. */
tpuir_val tpulw__tensor(tpulw__b *b, const tpulw_tensor *t);
/* t's value without its expanded dims: the view with every stride-0 dim at
 * size 1 (broadcastable to t's shape), so work on an expanded tensor runs
 * at its real size. */
tpuir_val tpulw__tensor_compact(tpulw__b *b, const tpulw_tensor *t);
/* Operand value converted to dtype (scalars: rank-0 constants). */
tpuir_val tpulw__opnd_val(tpulw__b *b, const tpulw__opnd *o, int dtype);
/* Rank-0 constant of dtype with value v (ints/bool converted like C). */
tpuir_val tpulw__const(tpulw__b *b, int dtype, double v);
tpuir_val tpulw__const_s(tpulw__b *b, int dtype, tpulw__scalar s);
/* Constant broadcast to a shape. */
tpuir_val tpulw__full(tpulw__b *b, int dtype, int ndim, const int64_t *sizes,
                  double v);
/* Convert (no-op when dtype already matches). */
tpuir_val tpulw__convert(tpulw__b *b, tpuir_val v, int dtype);
/* numpy-style broadcast of v to (ndim, sizes) (no-op if equal). */
tpuir_val tpulw__bcast(tpulw__b *b, tpuir_val v, int ndim, const int64_t *sizes);
/* Broadcast shape of n values (error TPU_E_INVALID like PyTorch's
 * "The size of tensor a (3) must match ..."). */
int tpulw__bcast_shape(const tpulw__b *b, int n, const tpuir_val *vs, int *ndim,
                   int64_t *sizes);
/* Broadcast all n values (in place in vs) to their common shape. */
int tpulw__bcast_all(tpulw__b *b, int n, tpuir_val *vs);
/* Binary op after broadcasting both operands to a common shape. */
tpuir_val tpulw__bin(tpulw__b *b, int op, tpuir_val x, tpuir_val y);
/* Unary op. */
tpuir_val tpulw__un(tpulw__b *b, int op, tpuir_val x);
/* Binary op with a scalar constant (of x's dtype) on the right. */
tpuir_val tpulw__bin_c(tpulw__b *b, int op, tpuir_val x, double c);
/* select(pred, t, f) after broadcasting all three. */
tpuir_val tpulw__sel(tpulw__b *b, tpuir_val p, tpuir_val t, tpuir_val f);
/* Reshape. */
tpuir_val tpulw__reshape(tpulw__b *b, tpuir_val v, int ndim, const int64_t *sizes);
/* Declare the next result. Returns TPU_OK or the error in v. */
int tpulw__result(tpulw__b *b, tpuir_val v);
/* Convert v to dtype, then declare it as result. */
int tpulw__result_as(tpulw__b *b, tpuir_val v, int dtype);
/* Declare a result that is written into tensor argument `name` (a side
 * effect such as batch norm's running stats; shape must match, converted
 * to the argument's dtype). Not one of the op's returns; the argument is
 * no longer an out= destination for the other results. */
int tpulw__result_to(tpulw__b *b, tpuir_val v, const char *name);
/* Exclude tensor argument `name` from the out= destinations (an is_output
 * argument that this call leaves untouched). */
void tpulw__not_out(tpulw__b *b, const char *name);

/* Normalize a dim against rank ndim (wrap negatives; rank 0 accepts -1, 0).
 * Error: TPU_E_INDEX "Dimension out of range (expected to be in range of
 * [-2, 1], but got 2)". */
int tpulw__wrap_dim(int64_t dim, int ndim, int *out);

/* Propagate a failing tpuir_val / status. */
#define LW_TRY(v)                                                            \
  do {                                                                       \
    if ((v) < 0) return (int)(v);                                            \
  } while (0)

/* ---- shared helpers across families ------------------------------------ */
/* Random numbers (tpuir_rng kind) from the call's "generator" argument;
 * advances its offset by the element count. TPU_E_UNSUPPORTED without a
 * generator. */
tpuir_val tpulw__rng(tpulw__b *b, int kind, int dtype, int nd, const int64_t *sizes);
/* Stable sort of x along its LAST dim (ascending, or descending; NaN is the
 * largest value): sorted values and the source index of each position
 * (one TPUIR_SORT node for the permutation, the values gathered). */
int tpulw__sort_last(tpulw__b *b, tpuir_val x, int desc, tpuir_val *vals, tpuir_val *perm);
/* Top-k along the LAST dim (largest or smallest first; the head of the
 * stable sort, so ties keep their order). */
int tpulw__topk_last(tpulw__b *b, tpuir_val x, int64_t k, int largest, tpuir_val *vals,
                 tpuir_val *idxs);
/* torch.scatter_reduce of src (index's shape) into tensor arg self along
 * dim d at int64 positions idx, reduce "sum" | "prod" | "mean" | "amax" |
 * "amin" (lower/dynamic.c); declares the result (self's dtype). */
int tpulw__scatter_reduce(tpulw__b *b, const tpulw_tensor *self, int d, tpuir_val idx, tpuir_val src,
                      const char *reduce, int include_self);
/* softmax (log: log_softmax) of x over the dims in mask m, max-shifted
 * (lower/nn.c). */
tpuir_val tpulw__softmax(tpulw__b *b, tpuir_val x, uint32_t m, int log);
/* Layer norm of x (opmath dtype) over dims [axis, ndim) with optional
 * weight and bias (NULL: none), as native_layer_norm; mean and rstd (kept
 * dims) if asked (lower/nn.c). */
tpuir_val tpulw__layer_norm(tpulw__b *b, tpuir_val x, int axis, const tpuir_val *w,
                           const tpuir_val *bias, double eps, tpuir_val *mean, tpuir_val *rstd);
/* _addmm_activation's epilogue: exact (erf) gelu, or relu (lower/dot.c). */
tpuir_val tpulw__gelu_or_relu(tpulw__b *b, tpuir_val x, int gelu);
/* softmax(q k^T * scale + bias) v of 4-D q, k, v ([B, H, T, E]) as one
 * TPUIR_ATTENTION node (bias -1 or broadcast to [B, H, Tq, Tk]): f32
 * [B, H, Tq, Ev]; lse (f32 [B, H, Tq]) if asked (lower/attention.c). */
tpuir_val tpulw__attention(tpulw__b *b, tpuir_val q, tpuir_val k, tpuir_val v, tpuir_val bias,
                           double scale, int causal, tpuir_val *lse);
/* Sum-reduce dims (mask bit d set) of v; keepdim keeps size-1 dims. */
tpuir_val tpulw__reduce_dims(tpulw__b *b, int kind, tpuir_val v, uint32_t mask,
                         int keepdim);
/* p-norm (torch.linalg.vector_norm's ord) of the absolute values a over
 * the dims in mask (lower/reduce.c); result in a's dtype. */
tpuir_val tpulw__pnorm_dims(tpulw__b *b, tpuir_val a, double p, uint32_t mask, int keepdim);
/* Parse an optional int[] dim list against rank nd into a bit mask (None
 * or [] = all dims). Duplicate -> TPU_E_INVALID like PyTorch. */
int tpulw__dim_mask(const tpulw__b *b, const char *name, int nd, uint32_t *mask);

/* ---- helpers shared by several families (lower/args.c) ----------------- */
/* "2, 3, 4" (no brackets) into buf; returns buf. */
const char *tpulw__fmt_list(char *buf, size_t cap, int nd, const int64_t *s);
/* Spatial dims of a 2d/3d op: 3 if its base name contains "3d", else 2. */
int tpulw__nsp_of(const tpulw__b *b);
/* TPU_OK for a floating dtype, else CPU's "\"op\" not implemented for
 * 'Dtype'" (TPU_E_UNSUPPORTED). */
int tpulw__float_only(const tpulw__b *b, int dt);
/* TPU_OK if t is a tpu tensor, else TPU_E_UNSUPPORTED (CPU fallback). */
int tpulw__need_tpu(const tpulw__b *b, const tpulw_tensor *t);
/* p-norm of d along its last dim (dim removed), in d's dtype. */
tpuir_val tpulw__pnorm_last(tpulw__b *b, tpuir_val d, double p);
/* v shifted by k (> 0) towards higher indices along dim; the first k
 * entries take `fill` (a rank-0 value of v's dtype). */
tpuir_val tpulw__shift_along(tpulw__b *b, tpuir_val v, int dim, int64_t k, tpuir_val fill);
/* Inclusive scan of x along dim with a binary elementwise op whose
 * identity is `ident`: ADD and MAX (not bool) as one reduce_window whose
 * window spans the dim with size - 1 padding before (XLA's cumsum; the
 * vTPU runs it as a linear scan), other ops by log-step doubling. */
tpuir_val tpulw__scan_op(tpulw__b *b, tpuir_val x, int dim, int op, double ident);
/* Number of nonzero elements of v, read on the host (the caller waits for
 * the device first: tpug_synchronize_for_host). lower/dynamic.c. */
int64_t tpulw__count_nz(const tpu_view *v);
/* Row-major positions (int64 [k]) of the true elements of the rank-1 bool
 * m of length n, in order; k is their number (tpulw__count_nz): a prefix
 * count gives each its slot, scatter_add collects the positions.
 * lower/dynamic.c. */
tpuir_val tpulw__compact(tpulw__b *b, tpuir_val m, int64_t n, int64_t k);
/* The "self" argument if it is a tpu tensor, else NULL. */
const tpulw_tensor *tpulw__tpu_self(tpulw__b *b);
/* Bit mask of all nd dims. */
static inline uint32_t tpulw__all_mask(int nd) {
  return nd > 0 ? (uint32_t)((1ull << nd) - 1) : 0;
}

#endif /* TPU_LOWER_INTERNAL_H */

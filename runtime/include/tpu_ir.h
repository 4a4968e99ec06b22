/* tpu_ir.h - functional graph IR (prefix tpuir_), close to StableHLO.
 *
 * A graph is built once, then run by an executor (vTPU: tpu_exec.h) with
 * parameter views bound at run time. Values are immutable arrays with a
 * static shape and dtype; every builder call infers the result shape/dtype
 * and validates its operands (error -> negative status, message via
 * tpu_last_error). Operands of elementwise ops must already have identical
 * shapes and dtypes (no implicit broadcasting or promotion: use
 * tpuir_broadcast_in_dim / tpuir_convert, as in StableHLO).
 *
 * Not thread-safe per graph (one builder at a time); distinct graphs are
 * independent.
 */
#ifndef TPU_IR_H
#define TPU_IR_H

#include <stdio.h>

#include "tpu_base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpuir_graph tpuir_graph;
typedef int32_t tpuir_val; /* >= 0: value id; < 0: tpu_status error */

/* Every IR op, defined once:
 *   X(ID, name, arity, class, fails, attrs)
 *   ID     the enum is TPUIR_<ID> (the order here is the enum order)
 *   name   StableHLO-style name (dump, errors, traces)
 *   arity  operand count (-1: a list in `list`/`nlist`, the first four also
 *          in `in`; -2: one optional operand), checked when a node is committed
 *   class  TPUIR_CLASS_<class>: what passes and executors may assume of it
 *   fails  NEVER / ALWAYS (may report an error when it runs: out-of-range
 *          indices) / DEPENDS (decided per node: tpuir_node_can_fail)
 *   attrs  which attribute printer tpuir_dump uses (ir/dump.c attr_<attrs>)
 * Adding an op: a line here, its builder (ir/), its evaluation in each
 * executor (exec/vtpu/exec.c eval_node, exec/pjrt/emit.c node()) and a
 * lowering. Each executor has a _Static_assert on TPUIR_NUM_OPS, so a
 * line added here fails the build until every executor was visited. */
#define TPUIR_OPS(X) \
  /* leaves */ \
  X(PARAM, "param", 0, LEAF, NEVER, param) \
  X(CONST, "constant", 0, LEAF, NEVER, const) \
  X(IOTA, "iota", 0, LEAF, NEVER, dim) \
  X(RNG, "rng", -2, LEAF, NEVER, rng)                                    /* operand: the run-time key (tpuir_rng_dyn) or none */ \
  /* unary elementwise (result dtype = operand dtype unless noted) */ \
  X(NEG, "negate", 1, UNARY, NEVER, none) \
  X(ABS, "abs", 1, UNARY, NEVER, none) \
  X(SIGN, "sign", 1, UNARY, NEVER, none)                                 /* -1/0/+1; sign(NaN) = 0 like torch.sign */ \
  X(EXP, "exponential", 1, UNARY, NEVER, none) \
  X(EXPM1, "exponential_minus_one", 1, UNARY, NEVER, none) \
  X(LOG, "log", 1, UNARY, NEVER, none) \
  X(LOG1P, "log_plus_one", 1, UNARY, NEVER, none) \
  X(SQRT, "sqrt", 1, UNARY, NEVER, none) \
  X(RSQRT, "rsqrt", 1, UNARY, NEVER, none) \
  X(SIN, "sine", 1, UNARY, NEVER, none) \
  X(COS, "cosine", 1, UNARY, NEVER, none) \
  X(TAN, "tan", 1, UNARY, NEVER, none) \
  X(TANH, "tanh", 1, UNARY, NEVER, none) \
  X(ASIN, "asin", 1, UNARY, NEVER, none) \
  X(ACOS, "acos", 1, UNARY, NEVER, none) \
  X(ATAN, "atan", 1, UNARY, NEVER, none) \
  X(SINH, "sinh", 1, UNARY, NEVER, none) \
  X(COSH, "cosh", 1, UNARY, NEVER, none) \
  X(ASINH, "asinh", 1, UNARY, NEVER, none) \
  X(ACOSH, "acosh", 1, UNARY, NEVER, none) \
  X(ATANH, "atanh", 1, UNARY, NEVER, none) \
  X(LOGISTIC, "logistic", 1, UNARY, NEVER, none) \
  X(ERF, "erf", 1, UNARY, NEVER, none) \
  X(ERFINV, "erf_inv", 1, UNARY, NEVER, none) \
  X(LGAMMA, "lgamma", 1, UNARY, NEVER, none) \
  X(DIGAMMA, "digamma", 1, UNARY, NEVER, none) \
  X(FLOOR, "floor", 1, UNARY, NEVER, none) \
  X(CEIL, "ceil", 1, UNARY, NEVER, none) \
  X(ROUND_EVEN, "round_nearest_even", 1, UNARY, NEVER, none)             /* round half to even (torch.round) */ \
  X(TRUNC, "trunc", 1, UNARY, NEVER, none) \
  X(NOT, "not", 1, UNARY, NEVER, none)                                   /* bool: logical not; ints: bitwise not */ \
  X(IS_FINITE, "is_finite", 1, PREDICATE, NEVER, none) \
  X(IS_NAN, "is_nan", 1, PREDICATE, NEVER, none) \
  X(IS_INF, "is_inf", 1, PREDICATE, NEVER, none)                         /* -> bool */ \
  /* binary elementwise */ \
  X(ADD, "add", 2, BINARY, NEVER, none) \
  X(SUB, "subtract", 2, BINARY, NEVER, none) \
  X(MUL, "multiply", 2, BINARY, NEVER, none) \
  X(DIV, "divide", 2, BINARY, DEPENDS, none)                             /* floats: IEEE; ints: truncating (C), /0 fails (ZeroDivisionError) */ \
  X(REM, "remainder", 2, BINARY, DEPENDS, none)                          /* floats: fmod; ints: C % (sign of dividend) */ \
  X(POW, "power", 2, BINARY, DEPENDS, none)                              /* ints: a negative exponent fails ("Integers to negative integer powers ...") */ \
  X(MAX, "maximum", 2, BINARY, NEVER, none) \
  X(MIN, "minimum", 2, BINARY, NEVER, none)                              /* max/min propagate NaN (torch.maximum) */ \
  X(ATAN2, "atan2", 2, BINARY, NEVER, none) \
  X(AND, "and", 2, BINARY, NEVER, none) \
  X(OR, "or", 2, BINARY, NEVER, none) \
  X(XOR, "xor", 2, BINARY, NEVER, none)                                  /* bool: logical; ints: bitwise */ \
  X(SHL, "shift_left", 2, BINARY, NEVER, none) \
  X(SHR, "shift_right", 2, BINARY, NEVER, none)                          /* ints; SHR arithmetic for signed */ \
  /* comparisons: operands same dtype, result bool */ \
  X(EQ, "compare_eq", 2, COMPARE, NEVER, none) \
  X(NE, "compare_ne", 2, COMPARE, NEVER, none) \
  X(LT, "compare_lt", 2, COMPARE, NEVER, none) \
  X(LE, "compare_le", 2, COMPARE, NEVER, none) \
  X(GT, "compare_gt", 2, COMPARE, NEVER, none) \
  X(GE, "compare_ge", 2, COMPARE, NEVER, none) \
  /* (pred bool, on_true, on_false), same shapes; dtype conversion */ \
  X(SELECT, "select", 3, SELECT, NEVER, none)                            /* (pred bool, on_true, on_false), same shapes */ \
  X(CONVERT, "convert", 1, CONVERT, NEVER, none) \
  /* views and data movement */ \
  X(BROADCAST_IN_DIM, "broadcast_in_dim", 1, VIEW, NEVER, dims) \
  X(RESHAPE, "reshape", 1, VIEW, NEVER, none) \
  X(TRANSPOSE, "transpose", 1, VIEW, NEVER, perm) \
  X(SLICE, "slice", 1, VIEW, NEVER, slice) \
  X(CONCAT, "concatenate", -1, DATA, NEVER, dim) \
  X(PAD, "pad", 2, DATA, NEVER, pad) \
  X(REVERSE, "reverse", 1, VIEW, NEVER, dims) \
  /* reductions, the matrix unit, indexing, windows, sort */ \
  X(REDUCE, "reduce", 1, REDUCE, NEVER, reduce)                          /* attr: reduce kind */ \
  X(ARGREDUCE, "argreduce", 1, REDUCE, NEVER, argreduce)                 /* attr: TPUIR_RED_MAX / TPUIR_RED_MIN */ \
  X(DOT_GENERAL, "dot_general", 2, DOT, NEVER, dot) \
  X(GATHER, "gather", 2, INDEX, ALWAYS, dim)                             /* torch.gather along a dim */ \
  X(INDEX_SELECT, "index_select", 2, INDEX, ALWAYS, dim) \
  X(SCATTER_ADD, "scatter_add", 3, INDEX, ALWAYS, dim)                   /* torch.scatter_add along a dim */ \
  X(INDEX_ADD, "index_add", 3, INDEX, ALWAYS, dim) \
  X(CONVOLUTION, "convolution", 2, WINDOW, NEVER, window)                /* see tpuir_convolution */ \
  X(REDUCE_WINDOW, "reduce_window", 1, WINDOW, NEVER, window)            /* attr: reduce kind (SUM / MAX) */ \
  X(WINDOW_ARGMAX, "window_argmax", 1, WINDOW, NEVER, window)            /* max-pool indices */ \
  X(SORT, "sort", 1, SORT, NEVER, sort)                                  /* stable sort along a dim (ir/sort.c) */ \
  /* decompositions (ir/spectral.c, ir/linalg.c) */ \
  X(EIGH, "eigh", 1, SPECTRAL, DEPENDS, eigh)                            /* symmetric eigendecomposition, packed (ir/spectral.c) */ \
  X(SVD, "svd", 1, SPECTRAL, DEPENDS, svd)                               /* singular value decomposition, packed (ir/spectral.c) */ \
  X(CHOLESKY, "cholesky", 1, LINALG, DEPENDS, linalg)                    /* StableHLO cholesky (+ info result) */ \
  X(TRIANGULAR_SOLVE, "triangular_solve", 2, LINALG, NEVER, linalg)      /* StableHLO triangular_solve */ \
  X(LU, "lu", 1, LINALG, NEVER, linalg)                                  /* custom call: getrf (one node per result) */ \
  X(LU_PIVOTS_TO_PERM, "lu_pivots_to_permutation", 1, LINALG, ALWAYS, linalg) /* custom call: LAPACK pivots -> permutation */ \
  X(GEQRF, "geqrf", 1, LINALG, NEVER, linalg)                            /* custom call: Householder QR (one per result) */ \
  X(HOUSEHOLDER_PRODUCT, "householder_product", 2, LINALG, NEVER, linalg) /* custom call: orgqr */ \
  /* complex numbers and FFT (ir/complex.c) */ \
  X(REAL, "real", 1, COMPLEX, NEVER, none) \
  X(IMAG, "imag", 1, COMPLEX, NEVER, none) \
  X(COMPLEX, "complex", 2, COMPLEX, NEVER, none) \
  X(CONJ, "conj", 1, COMPLEX, NEVER, none) \
  X(FFT, "fft", 1, FFT, NEVER, fft)                                      /* attr: kind = tpuir_fft_type, a = fft_length (na) */ \
  /* special functions (ir/special.c), elementwise and fused; unary, float operand, result in its dtype */ \
  X(BESSEL_J0, "bessel_j0", 1, SPECIAL1, NEVER, none) \
  X(BESSEL_J1, "bessel_j1", 1, SPECIAL1, NEVER, none) \
  X(BESSEL_Y0, "bessel_y0", 1, SPECIAL1, NEVER, none) \
  X(BESSEL_Y1, "bessel_y1", 1, SPECIAL1, NEVER, none) \
  X(MBESSEL_I0, "modified_bessel_i0", 1, SPECIAL1, NEVER, none) \
  X(MBESSEL_I1, "modified_bessel_i1", 1, SPECIAL1, NEVER, none) \
  X(MBESSEL_K0, "modified_bessel_k0", 1, SPECIAL1, NEVER, none) \
  X(MBESSEL_K1, "modified_bessel_k1", 1, SPECIAL1, NEVER, none) \
  X(SMBESSEL_K0, "scaled_modified_bessel_k0", 1, SPECIAL1, NEVER, none) \
  X(SMBESSEL_K1, "scaled_modified_bessel_k1", 1, SPECIAL1, NEVER, none)  /* exp(x) * K0(x), exp(x) * K1(x) */ \
  X(AIRY_AI, "airy_ai", 1, SPECIAL1, NEVER, none) \
  X(SPH_BESSEL_J0, "spherical_bessel_j0", 1, SPECIAL1, NEVER, none) \
  X(ENTR, "entr", 1, SPECIAL1, NEVER, none)                              /* -x ln x (0 at 0, -inf for x < 0) */ \
  X(ERFCX, "erfcx", 1, SPECIAL1, NEVER, none)                            /* exp(x^2) erfc(x) */ \
  X(I0, "i0", 1, SPECIAL1, NEVER, none) \
  X(I0E, "i0e", 1, SPECIAL1, NEVER, none) \
  X(I1, "i1", 1, SPECIAL1, NEVER, none) \
  X(I1E, "i1e", 1, SPECIAL1, NEVER, none)                                /* torch.i0 family (Cephes) */ \
  X(LOG_NDTR, "log_ndtr", 1, SPECIAL1, NEVER, none) \
  X(NDTRI, "ndtri", 1, SPECIAL1, NEVER, none) \
  X(SINC, "sinc", 1, SPECIAL1, NEVER, none)                              /* sin(pi x) / (pi x), 1 at 0 */ \
  X(FREXP_MANT, "frexp_mantissa", 1, SPECIAL1, NEVER, none)              /* frexp mantissa in [0.5, 1) (x itself for 0/inf/nan) */ \
  X(FREXP_EXP, "frexp_exponent", 1, SPECIAL1, NEVER, none)               /* frexp exponent -> int32 (0 for 0/inf/nan) */ \
  /* binary (a, b), same float dtype, result in that dtype */ \
  X(ZETA, "zeta", 2, SPECIAL2, NEVER, none)                              /* Hurwitz zeta(x = a, q = b) */ \
  X(XLOG1PY, "xlog1py", 2, SPECIAL2, NEVER, none)                        /* a * log1p(b), 0 where a == 0 unless b is NaN */ \
  X(IGAMMA, "igamma", 2, SPECIAL2, NEVER, none) \
  X(IGAMMAC, "igammac", 2, SPECIAL2, NEVER, none)                        /* regularized incomplete gamma P(a, x), Q */ \
  X(NEXTAFTER, "nextafter", 2, SPECIAL2, NEVER, none) \
  /* orthogonal polynomials p_n(x) with (a = x, b = n); n truncated like PyTorch's (int64_t) cast */ \
  X(CHEB_T, "chebyshev_t", 2, SPECIAL2, NEVER, none) \
  X(CHEB_U, "chebyshev_u", 2, SPECIAL2, NEVER, none) \
  X(CHEB_V, "chebyshev_v", 2, SPECIAL2, NEVER, none) \
  X(CHEB_W, "chebyshev_w", 2, SPECIAL2, NEVER, none) \
  X(SCHEB_T, "shifted_chebyshev_t", 2, SPECIAL2, NEVER, none) \
  X(SCHEB_U, "shifted_chebyshev_u", 2, SPECIAL2, NEVER, none) \
  X(SCHEB_V, "shifted_chebyshev_v", 2, SPECIAL2, NEVER, none) \
  X(SCHEB_W, "shifted_chebyshev_w", 2, SPECIAL2, NEVER, none)            /* shifted */ \
  X(HERMITE_H, "hermite_h", 2, SPECIAL2, NEVER, none) \
  X(HERMITE_HE, "hermite_he", 2, SPECIAL2, NEVER, none) \
  X(LAGUERRE_L, "laguerre_l", 2, SPECIAL2, NEVER, none) \
  X(LEGENDRE_P, "legendre_p", 2, SPECIAL2, NEVER, none) \
  /* binary, same integer dtype (not bool) */ \
  X(GCD, "gcd", 2, SPECIAL2, NEVER, none) \
  X(LCM, "lcm", 2, SPECIAL2, NEVER, none)                                /* non-negative like std::gcd / torch.lcm (|a*b|/g) */ \
  /* dense linear algebra, continued (ir/linalg.c) */ \
  X(LDL, "ldl", 1, LINALG, NEVER, linalg)                                /* custom call: sytrf (one node per result) */ \
  X(LDL_SOLVE, "ldl_solve", 3, LINALG, NEVER, linalg)                    /* custom call: sytrs */ \
  /* user kernels (ir/custom.c): a C function registered with the executor \
   * (tpux_kernel_register), see tpuir_custom_call */ \
  X(CUSTOM_CALL, "custom_call", -1, CUSTOM, NEVER, custom) \
  /* fused attention (ir/attention.c): softmax(q k^T * scale + bias) v, packed results */ \
  X(ATTENTION, "attention", -1, ATTENTION, NEVER, attention) \
  X(ATTENTION_GRAD, "attention_grad", -1, ATTENTION, NEVER, attention)

typedef enum tpuir_op {
#define TPUIR_ENUM_(id, name, arity, cls, fails, attrs) TPUIR_##id,
  TPUIR_OPS(TPUIR_ENUM_)
#undef TPUIR_ENUM_
  TPUIR_NUM_OPS
} tpuir_op;

/* What an op is, for passes and executors (tpuir_op_info). */
typedef enum tpuir_op_class {
  TPUIR_CLASS_LEAF,      /* PARAM, CONST, IOTA, RNG: no operands */
  TPUIR_CLASS_UNARY,     /* elementwise, result dtype = operand dtype */
  TPUIR_CLASS_PREDICATE, /* elementwise unary -> bool (is_finite, ...) */
  TPUIR_CLASS_BINARY,    /* elementwise, same dtypes in and out */
  TPUIR_CLASS_COMPARE,   /* elementwise, result bool */
  TPUIR_CLASS_SELECT,    /* elementwise (pred, on_true, on_false) */
  TPUIR_CLASS_CONVERT,   /* elementwise dtype conversion */
  TPUIR_CLASS_VIEW,      /* a strided view of the operand (no arithmetic) */
  TPUIR_CLASS_DATA,      /* data movement into a new array (concat, pad) */
  TPUIR_CLASS_REDUCE, TPUIR_CLASS_DOT, TPUIR_CLASS_INDEX, TPUIR_CLASS_WINDOW,
  TPUIR_CLASS_SORT, TPUIR_CLASS_SPECTRAL, TPUIR_CLASS_LINALG,
  TPUIR_CLASS_COMPLEX,   /* elementwise parts of complex values */
  TPUIR_CLASS_FFT,
  TPUIR_CLASS_SPECIAL1,  /* elementwise special function of one operand */
  TPUIR_CLASS_SPECIAL2,  /* elementwise special function of two operands */
  TPUIR_CLASS_CUSTOM,    /* a user kernel (operands in `list`) */
  TPUIR_CLASS_ATTENTION  /* fused attention and its gradient (operands in `list`) */
} tpuir_op_class;

typedef enum tpuir_fails {
  TPUIR_FAILS_NEVER, TPUIR_FAILS_ALWAYS, TPUIR_FAILS_DEPENDS
} tpuir_fails;

typedef struct tpuir_op_info_t {
  const char *name;   /* static */
  int8_t arity;       /* -1: operand list */
  uint8_t cls;        /* tpuir_op_class */
  uint8_t fails;      /* tpuir_fails */
} tpuir_op_info_t;

/* Facts of op `op` (borrowed, static); NULL if op is not an IR op. */
TPU_API const tpuir_op_info_t *tpuir_op_info(int op);
/* Elementwise ops (classes UNARY .. CONVERT, COMPLEX, SPECIAL1/2): one
 * result element from the operands' elements at the same position. */
TPU_API int tpuir_op_is_elementwise(int op);

typedef enum tpuir_reduce_kind {
  TPUIR_RED_SUM = 0, TPUIR_RED_PROD, TPUIR_RED_MAX, TPUIR_RED_MIN,
  TPUIR_RED_AND, TPUIR_RED_OR
} tpuir_reduce_kind;

typedef enum tpuir_rng_kind {
  TPUIR_RNG_UNIFORM = 0, /* U[0,1) in dtype (float dtypes) */
  TPUIR_RNG_NORMAL,      /* N(0,1) in dtype (float dtypes) */
  TPUIR_RNG_BITS         /* raw uniformly random bits (int dtypes, u64 cast) */
} tpuir_rng_kind;

/* Create an empty graph. Caller frees with tpuir_graph_free. NULL on OOM. */
TPU_API tpuir_graph *tpuir_graph_new(void);
TPU_API void tpuir_graph_free(tpuir_graph *g);

/* ---- leaves ---------------------------------------------------------- */
/* Parameter number k (k = count of earlier params). Bound to a strided view
 * with exactly this dtype/shape at run time. */
TPU_API tpuir_val tpuir_param(tpuir_graph *g, int dtype, int ndim,
                      const int64_t *sizes);
/* Rank-0 constant. The double form is exact for every float dtype value
 * and for ints up to 2^53; use the int64 form for integers. */
TPU_API tpuir_val tpuir_const_f(tpuir_graph *g, int dtype, double v);
TPU_API tpuir_val tpuir_const_i(tpuir_graph *g, int dtype, int64_t v);
/* Array whose element at index i is i[dim] (converted to dtype). */
TPU_API tpuir_val tpuir_iota(tpuir_graph *g, int dtype, int ndim, const int64_t *sizes,
                     int dim);
/* Counter-based random numbers (Philox4x32-10): the element with linear
 * (row-major) index i uses the 128-bit block at counter (offset + i) under
 * key `seed` (UNIFORM f32: word 0; f64: words 0-1; f16/bf16: the top 11/8
 * bits of word 0, so values are exact and < 1; NORMAL: Box-Muller on
 * words 0-1 (f32) or 0-3 (f64); BITS: words 0-1). The result depends only
 * on (seed, offset, shape), never on threading; a lowering advances the
 * generator's offset by numel. */
TPU_API tpuir_val tpuir_rng(tpuir_graph *g, int kind, int dtype, int ndim,
                    const int64_t *sizes, uint64_t seed, uint64_t offset);
/* Same, with (seed, offset) read at run time from `key`: a rank-1 int64
 * value of 2 elements (the u64 bit patterns of seed and offset). The node
 * has one operand; its seed/offset attributes are unused. Fused Eager binds
 * the key to host memory so one compiled program serves every step. */
TPU_API tpuir_val tpuir_rng_dyn(tpuir_graph *g, int kind, int dtype, int ndim,
                        const int64_t *sizes, tpuir_val key);

/* ---- elementwise ----------------------------------------------------- */
TPU_API tpuir_val tpuir_unary(tpuir_graph *g, int op, tpuir_val x);
TPU_API tpuir_val tpuir_binary(tpuir_graph *g, int op, tpuir_val a, tpuir_val b);
TPU_API tpuir_val tpuir_select(tpuir_graph *g, tpuir_val pred, tpuir_val on_true,
                       tpuir_val on_false);
/* dtype conversion with PyTorch semantics (float->int truncates, ->bool is
 * != 0, float narrowing rounds to nearest even). */
TPU_API tpuir_val tpuir_convert(tpuir_graph *g, tpuir_val x, int dtype);

/* ---- shape ----------------------------------------------------------- */
/* StableHLO broadcast_in_dim: operand dim i maps to result dim dims[i];
 * operand size must be 1 or equal to the result size there. */
TPU_API tpuir_val tpuir_broadcast_in_dim(tpuir_graph *g, tpuir_val x, int ndim,
                                 const int64_t *sizes, const int64_t *dims);
/* Row-major reshape (same numel). */
TPU_API tpuir_val tpuir_reshape(tpuir_graph *g, tpuir_val x, int ndim,
                        const int64_t *sizes);
/* Result dim i = operand dim perm[i]. */
TPU_API tpuir_val tpuir_transpose(tpuir_graph *g, tpuir_val x, const int64_t *perm);
/* StableHLO slice: per dim [start, limit) with step stride (> 0). */
TPU_API tpuir_val tpuir_slice(tpuir_graph *g, tpuir_val x, const int64_t *start,
                      const int64_t *limit, const int64_t *stride);
/* Concatenate n values (same dtype; equal sizes except along dim). */
TPU_API tpuir_val tpuir_concat(tpuir_graph *g, int n, const tpuir_val *xs, int dim);
/* Pad with a rank-0 value: lo/hi (may be negative = crop), interior >= 0. */
TPU_API tpuir_val tpuir_pad(tpuir_graph *g, tpuir_val x, tpuir_val padval,
                    const int64_t *lo, const int64_t *hi,
                    const int64_t *interior);
/* Reverse the listed dims. */
TPU_API tpuir_val tpuir_reverse(tpuir_graph *g, tpuir_val x, int ndims,
                        const int64_t *dims);

/* ---- reductions ------------------------------------------------------ */
/* Reduce the listed dims away (result rank = rank - ndims; ndims == 0 is a
 * copy). Result dtype = operand dtype; float16/bfloat16 accumulate in f32,
 * f32 in f32 with pairwise/blocked summation (f64 allowed), ints in i64.
 * MAX/MIN propagate NaN. Empty reductions give the identity (0, 1, -inf/
 * lowest, +inf/highest, true, false). */
TPU_API tpuir_val tpuir_reduce(tpuir_graph *g, int kind, tpuir_val x, int ndims,
                       const int64_t *dims);
/* Index (int64) of the max/min along `dim` (dim removed); first occurrence
 * wins; a NaN counts as the max (and as the min), like torch.argmax. A
 * zero-size dim is TPU_E_INDEX at build time. */
TPU_API tpuir_val tpuir_argreduce(tpuir_graph *g, int kind, tpuir_val x, int dim);

/* ---- matrix unit ----------------------------------------------------- */
/* StableHLO dot_general. Result dims: batch dims (in lhs_batch order), then
 * lhs free dims (in order), then rhs free dims (in order). Operands: same
 * dtype; result dtype `out_dtype` (usually the operand dtype; accumulation
 * is always >= fp32). `precision` (tpu_precision) applies to f32 operands;
 * bf16/f16 use one pass; f64 and ints compute exactly. */
TPU_API tpuir_val tpuir_dot_general(tpuir_graph *g, tpuir_val lhs, tpuir_val rhs,
                            int nbatch, const int64_t *lhs_batch,
                            const int64_t *rhs_batch, int ncontract,
                            const int64_t *lhs_contract,
                            const int64_t *rhs_contract, int precision,
                            int out_dtype);

/* ---- indexing (indices: int32 or int64 values) ----------------------- */
/* torch.gather(x, dim, idx): out[i..] = x[.. idx[i..] at dim ..]; idx has
 * x's rank, out has idx's shape (idx sizes <= x sizes off dim). Negative or
 * out-of-range index -> TPU_E_INDEX at run time, before anything is
 * written. */
TPU_API tpuir_val tpuir_gather(tpuir_graph *g, tpuir_val x, int dim, tpuir_val idx);
/* torch.index_select(x, dim, idx): idx rank 1 (or 0); out has x's shape
 * with size(dim) = numel(idx). Range checked like gather. */
TPU_API tpuir_val tpuir_index_select(tpuir_graph *g, tpuir_val x, int dim,
                             tpuir_val idx);
/* torch.scatter_add(base, dim, idx, src): a copy of base with src[i..]
 * added at position idx[i..] along dim. idx and src same shape. */
TPU_API tpuir_val tpuir_scatter_add(tpuir_graph *g, tpuir_val base, int dim,
                            tpuir_val idx, tpuir_val src);
/* torch.index_add(base, dim, idx, src): idx rank 1; src = base's shape with
 * size(dim) = numel(idx). */
TPU_API tpuir_val tpuir_index_add(tpuir_graph *g, tpuir_val base, int dim,
                          tpuir_val idx, tpuir_val src);

/* ---- convolution and windows (ir/conv.c) ----------------------------- */
/* StableHLO convolution restricted to PyTorch layouts: lhs [N, C, s...],
 * rhs [O, C/groups, k...], result [N, O, o...] with 1..3 spatial dims
 * (nsp = rank - 2). Per spatial dim i (arrays of nsp entries; NULL means
 * all 1 for strides/dilations, all 0 for padding):
 *   the input is dilated by lhs_dilation[i] (ld - 1 zeros between
 *   elements; transposed convs / input gradients), padded by pad_lo[i] /
 *   pad_hi[i] zeros (negative = crop), the kernel dilated by
 *   rhs_dilation[i], and the window moved by window_strides[i]:
 *     o[i] = (pad_lo + (s - 1) * ld + 1 + pad_hi - ((k - 1) * rd + 1))
 *            / stride + 1          (0 when the padded input is smaller
 *                                   than the dilated window, or s == 0)
 * feature_group_count g: C and O are split into g groups; output group j
 * sees input group j only. Operands: same float dtype (f16, bf16, f32,
 * f64); result in that dtype; accumulation >= fp32; `precision`
 * (tpu_precision) applies to f32 like dot_general. */
TPU_API tpuir_val tpuir_convolution(tpuir_graph *g, tpuir_val lhs, tpuir_val rhs,
                            const int64_t *window_strides,
                            const int64_t *pad_lo, const int64_t *pad_hi,
                            const int64_t *lhs_dilation,
                            const int64_t *rhs_dilation,
                            int64_t feature_group_count, int precision);
/* StableHLO reduce_window over every dim of x (rank <= 8; arrays of rank
 * entries; NULL strides/dilations = 1, NULL padding = 0): kind
 * TPUIR_RED_SUM (padding adds 0; f16/bf16 accumulate in f32) or
 * TPUIR_RED_MAX (padding never wins; NaN propagates). Result dim
 *   (pad_lo + s + pad_hi - ((w - 1) * dil + 1)) / stride + 1   (or 0).
 * Result dtype = x's dtype (float or int; not bool). */
TPU_API tpuir_val tpuir_reduce_window(tpuir_graph *g, int kind, tpuir_val x,
                              const int64_t *window, const int64_t *strides,
                              const int64_t *pad_lo, const int64_t *pad_hi,
                              const int64_t *dilation);
/* Max-pool indices: same windows as tpuir_reduce_window(TPUIR_RED_MAX, ...)
 * but the int64 position of the max instead of its value, as a row-major
 * index over the last `index_dims` dims of x (PyTorch's max_pool indices:
 * index_dims = number of spatial dims). Padding positions are never
 * chosen; ties keep the first; a NaN is taken as the max (the last NaN of
 * the window wins, like PyTorch CPU). An all-padding window gives -1. */
TPU_API tpuir_val tpuir_window_argmax(tpuir_graph *g, tpuir_val x,
                              const int64_t *window, const int64_t *strides,
                              const int64_t *pad_lo, const int64_t *pad_hi,
                              const int64_t *dilation, int index_dims);
/* Node attributes of these ops (tpuir_node below):
 *   CONVOLUTION  na = nsp, a = window_strides, b = pad_lo, c = pad_hi,
 *                d[0..nsp) = lhs_dilation, d[8..8+nsp) = rhs_dilation,
 *                dim = feature_group_count, kind = precision
 *   REDUCE_WINDOW / WINDOW_ARGMAX  na = rank, a = window, b = strides,
 *                c[0..8) = pad_lo, c[8..16) = pad_hi, d[0..8) = dilation,
 *                kind = reduce kind (RED_MAX for argmax), dim = index_dims */

/* ---- sorting (ir/sort.c) --------------------------------------------- */
/* Which result a TPUIR_SORT node produces (one node per result). */
typedef enum tpuir_sort_result {
  TPUIR_SORT_VALUES = 0, /* the sorted values (x's dtype and shape) */
  TPUIR_SORT_INDICES     /* int64 source position along dim of each value */
} tpuir_sort_result;
/* StableHLO sort of x along `dim` with a stable comparator: every 1-D
 * slice along dim is sorted ascending (descending != 0: descending); equal
 * elements keep their original order in both directions (torch.sort with
 * stable=True); NaN is larger than every number (last ascending, first
 * descending; all NaNs equal to each other); -0.0 == +0.0. `result`
 * (tpuir_sort_result) picks the output: the values, or the permutation
 * (int64, same shape: out[.., i, ..] = position in x of the i-th value, so
 * values == gather(x, dim, indices)). Any dtype (bool as 0/1); rank 0 is
 * one element (dim must be 0); empty slices are fine. dim out of range ->
 * TPU_E_INDEX. Two nodes (values + indices) sort twice: a lowering that
 * needs both should build the INDICES node and gather the values.
 * Node attributes: dim, kind = result, a[0] = descending (0/1), na = 0;
 * sizes[dim] = the number of entries kept (tpuir_sort_head). */
TPU_API tpuir_val tpuir_sort(tpuir_graph *g, tpuir_val x, int dim, int descending,
                     int result);
/* The first k entries along dim of tpuir_sort's result (0 <= k <= size of
 * dim; k < 0 = all): the result has size k at dim. topk is a sort head;
 * the executor selects a short head in O(n log k) instead of sorting.
 * k > size -> TPU_E_INVALID. */
TPU_API tpuir_val tpuir_sort_head(tpuir_graph *g, tpuir_val x, int dim, int descending,
                          int result, int64_t k);
/* ---- dense linear algebra (ir/linalg.c, executor exec/vtpu/linalg.c) ------ */
/* Matrix operands are float32 or float64 arrays [..., rows, cols] (rank >=
 * 2; leading dims are batch dims, processed independently). The vTPU
 * computes in double for f32 and f64 alike; results are in the operand
 * dtype (pivots / info / permutations are int32, as PyTorch returns them).
 * Other dtypes -> TPU_E_TYPE; rank < 2 or shape mismatches -> TPU_E_INVALID.
 *
 * Multi-result factorizations: the IR has one value per node, so each
 * result is its own node selected by `result` (attribute `dim`); XLA's
 * custom calls return tuples, a printer emits one call + get_tuple_element
 * per distinct operand. The executor recomputes the factorization per
 * result node (cheap next to the cost of a second graph; a graph that needs
 * both LU and pivots pays twice). Node attributes: kind = flags below,
 * dim = result index. */
enum {
  TPUIR_CHOL_FACTOR = 0, /* [..., n, n], the other triangle zero */
  TPUIR_CHOL_INFO = 1,   /* int32 [...]: 0, or k when the leading minor of
                            order k is not positive definite (LAPACK potrf) */
};
enum {
  TPUIR_LU_PACKED = 0, /* [..., m, n]: L (unit diag, below) and U packed */
  TPUIR_LU_PIVOTS = 1, /* int32 [..., min(m, n)], 1-based LAPACK ipiv */
  TPUIR_LU_INFO = 2,   /* int32 [...]: 0, or k when U[k-1, k-1] == 0 */
  TPUIR_LU_PERM = 3,   /* int32 [..., m]: 0-based, (L U)[i, :] = A[perm[i], :] */
};
enum {
  TPUIR_QR_PACKED = 0, /* [..., m, n]: R on/above the diagonal, Householder
                          vectors (implicit unit head) below (LAPACK geqrf) */
  TPUIR_QR_TAU = 1,    /* [..., min(m, n)] */
};
/* Cholesky factor of the symmetric positive-definite x [..., n, n]: only
 * the `lower` (1: A = L L^T, reads the lower triangle) or upper (0:
 * A = U^T U, reads the upper triangle) half is read. `result`
 * TPUIR_CHOL_FACTOR / TPUIR_CHOL_INFO. A failing matrix keeps the partial
 * factor of the first info-1 columns (like LAPACK potf2); other entries of
 * the factor are then unspecified (finite). `lower` may be or'ed with
 * TPUIR_CHOL_CHECK: the node then fails at run time on a non-PD matrix
 * (TPU_E_LINALG, PyTorch's "cholesky: The factorization could not be
 * completed ..." text) and always runs, even when unused (the deprecated
 * torch.cholesky raises). kind = lower | check. */
#define TPUIR_CHOL_CHECK 2
TPU_API tpuir_val tpuir_cholesky(tpuir_graph *g, tpuir_val x, int lower, int result);
/* StableHLO triangular_solve: a [..., k, k] triangular (only the `lower` or
 * upper triangle is read; unit_diagonal: its diagonal is taken as 1), b
 * [..., m, n] with the same batch dims and dtype. left_side: solves
 * op(a) X = b (k == m), else X op(a) = b (k == n); op = transpose when
 * transpose_a. Result [..., m, n]. A zero diagonal gives inf/nan (IEEE),
 * like BLAS trsm. kind = left_side | lower << 1 | unit_diagonal << 2 |
 * transpose_a << 3. */
TPU_API tpuir_val tpuir_triangular_solve(tpuir_graph *g, tpuir_val a, tpuir_val b,
                                 int left_side, int lower, int unit_diagonal,
                                 int transpose_a);
/* LU with partial pivoting of x [..., m, n] (LAPACK getrf: the pivot is the
 * first entry of largest |a| in the column; a zero pivot column is left as
 * is and sets info once, the factorization continues). `result` one of
 * TPUIR_LU_*. */
TPU_API tpuir_val tpuir_lu(tpuir_graph *g, tpuir_val x, int result);
/* Row permutation (int32 [..., m], 0-based, as TPUIR_LU_PERM) of LAPACK
 * pivots (int32/int64 [..., k], 1-based, applied as swaps i <-> piv[i]-1 in
 * order). A pivot outside [1, m] fails at run time with TPU_E_INVALID
 * "pivots passed to lu_unpack must be between 1 and LU.size(-2)
 * inclusive.". kind = 0, dim = m. */
TPU_API tpuir_val tpuir_lu_pivots_to_perm(tpuir_graph *g, tpuir_val pivots,
                                  int64_t m);
/* Householder QR of x [..., m, n] (LAPACK geqrf/dlarfg: beta = -sign(alpha)
 * * norm, tau = (beta - alpha) / beta, tau = 0 when the column below the
 * diagonal is already zero). `result` TPUIR_QR_PACKED / TPUIR_QR_TAU. */
TPU_API tpuir_val tpuir_geqrf(tpuir_graph *g, tpuir_val x, int result);
/* First n columns of H_1 ... H_k (LAPACK orgqr), H_i = I - tau_i v_i v_i^T
 * with v_i stored below the diagonal of column i of a (unit head): a
 * [..., m, n] with m >= n, tau [..., k] with k <= n, same batch dims and
 * dtype. Result [..., m, n]. */
TPU_API tpuir_val tpuir_householder_product(tpuir_graph *g, tpuir_val a,
                                    tpuir_val tau);
enum {
  TPUIR_LDL_LD = 0,     /* [..., n, n]: D (1x1 / 2x2 blocks) and unit L below,
                           zero above the diagonal */
  TPUIR_LDL_PIVOTS = 1, /* int32 [..., n], LAPACK sytrf ipiv (1-based; a 2x2
                           block stores -p twice) */
  TPUIR_LDL_INFO = 2,   /* int32 [...]: 0, or k when D(k, k) is exactly 0 */
};
/* Bunch-Kaufman LDL^T of the symmetric x [..., n, n] (LAPACK sytf2 with
 * uplo = 'L': only the lower triangle is read; alpha = (1 + sqrt(17)) / 8;
 * a zero column sets info and the factorization continues). `result` one
 * of TPUIR_LDL_*. */
TPU_API tpuir_val tpuir_ldl(tpuir_graph *g, tpuir_val x, int result);
/* Solve A X = B from the LDL^T factors of A (LAPACK sytrs, uplo = 'L'): ld
 * [..., n, n] (TPUIR_LDL_LD), pivots int32 [..., n] (TPUIR_LDL_PIVOTS), b
 * [..., n, k]; equal batch dims, ld and b of one float dtype. Result
 * [..., n, k]. A pivot outside [1, n] gives unspecified values. */
TPU_API tpuir_val tpuir_ldl_solve(tpuir_graph *g, tpuir_val ld, tpuir_val pivots,
                          tpuir_val b);

/* ---- spectral decompositions (ir/spectral.c) -------------------------- */
/* The IR has one result value per node, so each decomposition is ONE node
 * whose result PACKS all of its outputs along the trailing dims; a lowering
 * takes them apart with tpuir_slice + tpuir_reshape (free views in the
 * vTPU executor). Both work on the trailing two dims of a float operand
 * (f16, bf16, f32, f64; any leading batch dims), compute in double and
 * round to the operand dtype at the end. Empty matrices and empty batches
 * are allowed. A matrix with a non-finite entry (among those read) gives
 * NaN values and vectors; with `check_nan` set, a NaN entry instead fails
 * at run time with TPU_E_LINALG and PyTorch CPU's (LAPACK's) message:
 *   eigh: "linalg.eigh: [(Batch element b): ]The algorithm failed to
 *         converge because the input matrix is ill-conditioned or has too
 *         many repeated eigenvalues (error code: 1|2)." (2 with vectors)
 *   svd:  "linalg.svd: [(Batch element b): ]The algorithm failed to
 *         converge because the input matrix contained non-finite values."
 * (b = the first failing batch element; the prefix only for batched
 * operands). The same error, with error code n, if Jacobi does not
 * converge (not seen for finite input). A launch that must raise at the
 * call synchronises.
 *
 * tpuir_eigh: x [..., n, n] symmetric, read from its lower (lower = 1) or
 * upper (lower = 0) triangle only (LAPACK UPLO). Cyclic Jacobi.
 *   result [..., 1 + n, n] when compute_v, else [..., 1, n]:
 *     row 0           eigenvalues w, ascending (LAPACK syevd order)
 *     rows 1..n       V with V[i][j] = component i of the eigenvector of
 *                     w[j] (orthonormal columns; A V = V diag(w))
 *   Each eigenvector is normalised so that its largest-magnitude component
 *   is positive (eigenvectors are only defined up to sign).
 * tpuir_svd: x [..., m, n], k = min(m, n). One-sided (Hestenes) Jacobi.
 *   result [..., P], P = k + (compute_uv ? m*uc + vr*n : 0), with
 *   uc = vr = (full_matrices ? m resp. n : k):
 *     [0, k)            singular values S, descending, >= 0
 *     [k, k + m*uc)     U [m, uc] row-major (orthonormal columns)
 *     [k + m*uc, P)     Vh [vr, n] row-major (orthonormal rows)
 *   A = U[:, :k] diag(S) Vh[:k, :]. Columns of U / rows of Vh beyond the
 *   rank of A (and beyond k when full_matrices) complete an orthonormal
 *   basis. Singular vectors are normalised so that the largest-magnitude
 *   component of each right singular vector is positive.
 * Node attributes: EIGH kind = lower, dim = compute_v; SVD kind =
 * compute_uv, dim = full_matrices; both: a[0] = check_nan (not ival:
 * the Fused Eager cache key skips ival, which holds constant values). */
TPU_API tpuir_val tpuir_eigh(tpuir_graph *g, tpuir_val x, int lower, int compute_v,
                     int check_nan);
TPU_API tpuir_val tpuir_svd(tpuir_graph *g, tpuir_val x, int full_matrices,
                    int compute_uv, int check_nan);
/* ---- complex numbers and FFT (ir/complex.c) --------------------------
 * Complex dtypes (TPU_C64, TPU_C128) store (re, im) pairs. Elementwise
 * ops accept complex operands where the math is defined: NEG, ADD, SUB,
 * MUL, DIV, POW, EQ, NE, SELECT, CONVERT (real -> complex: imag 0; complex
 * -> real: the real part, like torch), ABS (-> the real part dtype: |z|),
 * IS_FINITE/IS_NAN/IS_INF, and EXP, EXPM1, LOG, LOG1P, SQRT, RSQRT, SIN,
 * COS, TAN, TANH, SINH, COSH, ASIN, ACOS, ATAN, ASINH, ACOSH, ATANH,
 * LOGISTIC (C99 complex semantics); REDUCE with SUM / PROD. Other ops
 * reject complex operands with TPU_E_TYPE. There are no complex CONST
 * nodes: build one with tpuir_complex of two real constants. Complex nodes
 * are never fused by the vTPU executor (they run as standalone nodes,
 * computing in double). dot_general does not take complex operands
 * (lowerings split a complex matmul into real dot_generals). */
typedef enum tpuir_fft_type {
  TPUIR_FFT_FWD = 0, /* complex -> complex, forward (exp(-2 pi i jk/n)) */
  TPUIR_FFT_INV,     /* complex -> complex, inverse, scaled by 1/prod(n) */
  TPUIR_FFT_RFFT,    /* real (f32/f64) -> complex, forward; the last fft
                        dim shrinks to n/2 + 1 */
  TPUIR_FFT_IRFFT    /* complex (last dim n/2 + 1) -> real, inverse scaled
                        by 1/prod(n); the result's last dim is n */
} tpuir_fft_type;
/* Real / imaginary part of x: complex -> its part dtype (c64 -> f32); a
 * real x gives x itself (REAL) or zeros (IMAG). */
TPU_API tpuir_val tpuir_real(tpuir_graph *g, tpuir_val x);
TPU_API tpuir_val tpuir_imag(tpuir_graph *g, tpuir_val x);
/* re + im*i: re and im of the same float dtype (f32 -> c64, f64 -> c128;
 * f16/bf16 are TPU_E_TYPE) and shape. */
TPU_API tpuir_val tpuir_complex(tpuir_graph *g, tpuir_val re, tpuir_val im);
/* Complex conjugate (a real x gives x). */
TPU_API tpuir_val tpuir_conj(tpuir_graph *g, tpuir_val x);
/* StableHLO fft over the trailing nlen (1..3) dims of x with lengths
 * fft_length[0..nlen) (each >= 1). FWD/INV: x complex whose trailing dims
 * equal fft_length; RFFT: x f32/f64 with trailing dims = fft_length,
 * result complex (c64 for f32) with last dim fft_length[-1]/2 + 1;
 * IRFFT: x complex with trailing dims = fft_length except the last, which
 * is fft_length[-1]/2 + 1, result the real part dtype with last dim
 * fft_length[-1]. Any length (not only powers of two); the vTPU computes
 * in double. Errors: TPU_E_TYPE (dtypes), TPU_E_INVALID (shapes). */
TPU_API tpuir_val tpuir_fft(tpuir_graph *g, tpuir_val x, int fft_type, int nlen,
                    const int64_t *fft_length);
/* ---- special functions (ir/special.c) ------------------------------- */
/* Unary special function (TPUIR_BESSEL_J0 .. TPUIR_FREXP_EXP) of a float
 * value; result has x's shape and dtype (FREXP_EXP: int32). A non-float
 * operand is TPU_E_TYPE; another op is TPU_E_INVALID. */
TPU_API tpuir_val tpuir_special_unary(tpuir_graph *g, int op, tpuir_val x);
/* Binary special function (TPUIR_ZETA .. TPUIR_LCM): operands of the same
 * shape and dtype (float for ZETA .. LEGENDRE_P, integer for GCD/LCM, else
 * TPU_E_TYPE); result has that shape and dtype. */
TPU_API tpuir_val tpuir_special_binary(tpuir_graph *g, int op, tpuir_val a,
                               tpuir_val b);

/* ---- user kernels (ir/custom.c) --------------------------------------- */
/* Result `result` (0 <= result < nresults) of the user kernel identified by
 * `key` (tpux_kernel_register; the key is a content hash, stable across
 * processes, so it is part of the program's cache key) applied to
 * ops[0..nops) (tensors and rank-0 scalars, in the kernel's signature
 * order), with the result's dtype and shape. A multi-result kernel is one
 * node per result; the executor runs the kernel once per live result node.
 * The builder checks the operands exist; the kernel's own signature checks
 * happen at registration / lowering (tpux_kernel_infer).
 * Node attributes: list/nlist = ops (in[0..4) the first four as well),
 * a[0] = key (as int64), dim = result, kind = nresults. */
TPU_API tpuir_val tpuir_custom_call(tpuir_graph *g, uint64_t key, int nops,
                            const tpuir_val *ops, int result, int nresults,
                            int dtype, int ndim, const int64_t *sizes);

/* ---- fused attention (ir/attention.c) ---------------------------------- */
/* Scaled dot-product attention over [B, H, T, E] operands, the scores never
 * stored whole (the vTPU runs it block by block, ARCHITECTURE §4 numerics:
 * both products at `precision` like DOT_GENERAL, softmax in f32):
 *   S = q k^T * scale + bias (bias [B, H, Tq, Tk], any float dtype, or -1
 *   for none), with causal != 0 also -inf where key j > query i (the
 *   top-left aligned triangle of torch's is_causal);
 *   out = softmax(S) v, lse = logsumexp of each row of S.
 * q [B, H, Tq, E], k [B, H, Tk, E], v [B, H, Tk, Ev]: one float dtype (f32,
 * bf16 or f16); bias of the same shape family. A row whose every score is
 * -inf gives NaN (as softmax does). Result: f32 [B, H, Tq, Ev + 1], out in
 * [..., :Ev] and lse in [..., Ev] (one node: the two share all the work).
 * Node attributes: list = (q, k, v[, bias]), kind = precision, a[0] =
 * causal, a[1] = the bits of the double scale. */
TPU_API tpuir_val tpuir_attention(tpuir_graph *g, tpuir_val q, tpuir_val k, tpuir_val v,
                                  tpuir_val bias, double scale, int causal, int precision);
/* Its gradient from the forward's out and lse (f32 [B, H, Tq]) and dout
 * (the gradient of out, [B, H, Tq, Ev], q's dtype or f32): the scores are
 * recomputed, P = exp(S - lse). Result: f32 [B, H, Tq*E + Tk*E + Tk*Ev],
 * per (b, h) dq [Tq, E], dk [Tk, E] and dv [Tk, Ev] row-major one after the
 * other. Node attributes as tpuir_attention's; list = (q, k, v, out, dout,
 * lse[, bias]). */
TPU_API tpuir_val tpuir_attention_grad(tpuir_graph *g, tpuir_val q, tpuir_val k, tpuir_val v,
                                       tpuir_val out, tpuir_val dout, tpuir_val lse,
                                       tpuir_val bias, double scale, int causal,
                                       int precision);

/* ---- outputs and inspection ------------------------------------------ */
/* Declare the graph's results (in order). A value may appear twice and may
 * be a parameter. Must be called once before running. */
TPU_API int tpuir_set_outputs(tpuir_graph *g, int n, const tpuir_val *outs);
TPU_API int tpuir_num_params(const tpuir_graph *g);
TPU_API int tpuir_num_outputs(const tpuir_graph *g);
TPU_API tpuir_val tpuir_output(const tpuir_graph *g, int i);
TPU_API int tpuir_num_nodes(const tpuir_graph *g);
/* Shape/dtype of value v (sizes needs TPU_MAX_DIMS room). */
TPU_API int tpuir_value_info(const tpuir_graph *g, tpuir_val v, int *dtype, int *ndim,
                     int64_t *sizes);
/* Write a human-readable (StableHLO-like) listing into buf (NUL-terminated,
 * truncated to cap). Returns the length it needed (excl. NUL). */
TPU_API size_t tpuir_dump(const tpuir_graph *g, char *buf, size_t cap);
/* Graph to bytes and back (ir/serial.c): the compilation cache's disk
 * format, versioned by field (a reader skips fields it does not know).
 * tpuir_write: TPU_OK or TPU_E_INTERNAL (write failed); f borrowed.
 * tpuir_read: a new graph (caller frees with tpuir_graph_free), or NULL
 * (not a graph, another version, corrupt: tpu_last_error says which). */
TPU_API int tpuir_write(const tpuir_graph *g, FILE *f);
TPU_API tpuir_graph *tpuir_read(FILE *f);
/* 128-bit structural hash of a graph into out[2] (ir/hash.c): ops, dtypes,
 * shapes, operands, attributes and outputs; with TPUIR_HASH_VALUES also
 * constants' values and rng seeds/offsets (eager modes lift those into
 * run-time parameters, so their cache keys leave them out); with
 * TPUIR_HASH_LOOP only op, dtype and shape of leaves (the loop detector's
 * signature: a loop's iterations differ in their constants and params). */
enum { TPUIR_HASH_VALUES = 1u << 0, TPUIR_HASH_LOOP = 1u << 1 };
TPU_API void tpuir_hash(const tpuir_graph *g, unsigned flags, uint64_t out[2]);
/* Compute g's hashes for flags 0 and TPUIR_HASH_LOOP once and keep them
 * in g: tpuir_hash returns the kept ones until g changes (a new node or
 * output list). For graphs shared read-only by many launches (the
 * lowering's plan cache); call it before sharing g between threads. */
TPU_API void tpuir_hash_keep(tpuir_graph *g);
/* Static name of an op ("add", "dot_general", ...); "?" if invalid. */
TPU_API const char *tpuir_op_name(int op);
/* Whether node v can report an error when it runs (tpuir_op_info's
 * `fails`, with DEPENDS decided from the node: integer DIV/REM/POW,
 * CHOLESKY with TPUIR_CHOL_CHECK, EIGH/SVD with check_nan). */
TPU_API int tpuir_node_can_fail(const tpuir_graph *g, tpuir_val v);

/* ---- node access for executors and printers -------------------------- */
typedef struct tpuir_node {
  int32_t op;                 /* tpuir_op */
  int32_t dtype, ndim;        /* result */
  int64_t sizes[TPU_MAX_DIMS];
  int32_t nin;                /* operand count */
  tpuir_val in[4];            /* operands (CONCAT uses `list`) */
  tpuir_val *list; int32_t nlist; /* CONCAT operands (owned by the graph) */
  /* attributes (meaning depends on op) */
  int32_t kind;               /* reduce/rng kind, precision for DOT */
  int32_t dim;                /* gather/index/concat/argreduce/iota dim; param index */
  int64_t a[TPU_MAX_DIMS];    /* dims / perm / start / lo / lhs_batch ... */
  int64_t b[TPU_MAX_DIMS];    /* limit / hi / rhs_batch ... */
  int64_t c[TPU_MAX_DIMS];    /* stride / interior / lhs_contract ... */
  int64_t d[TPU_MAX_DIMS];    /* rhs_contract */
  int32_t na, nb;             /* used lengths (ndims, nbatch, ncontract) */
  double fval; int64_t ival;  /* CONST value */
  uint64_t seed, offset;      /* RNG */
} tpuir_node;
/* Append a copy of node s (of any graph) to g, its operands renamed by
 * map (old value id -> value of g; borrowed). A PARAM becomes g's next
 * parameter. Returns the new value, or an error (operand not mapped,
 * OOM). */
TPU_API tpuir_val tpuir_copy_node(tpuir_graph *g, const tpuir_node *s, const tpuir_val *map);
/* Node that defines value v (values and nodes share ids). Borrowed. */
TPU_API const tpuir_node *tpuir_get_node(const tpuir_graph *g, tpuir_val v);

#ifdef __cplusplus
}
#endif
#endif /* TPU_IR_H */

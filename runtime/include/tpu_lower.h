/* tpu_lower.h - ATen -> IR lowering table (prefix tpulw_).
 *
 * The PyTorch glue marshals an ATen call (operator name, overload, schema
 * arguments) into tpulw_arg descriptors; tpulw_prepare finds the lowering,
 * builds the IR graph, infers every output and decides where each output
 * goes; the glue allocates/resizes destinations and calls tpulw_launch,
 * which enqueues the graph on a stream for the vTPU executor.
 *
 * Output destinations (decided by tpulw_prepare from the schema flags):
 *  - in-place ops (base name ends in '_'): output 0 goes into `self`; the
 *    result must have self's shape ("output with shape [..] doesn't match
 *    the broadcast shape [..]") and be castable to self's dtype;
 *  - out= ops: outputs go into the is_output args in order (resize = 1 when
 *    the destination's shape differs); dtype cast checked likewise;
 *  - functional ops: dest_arg = -1, the glue allocates a new contiguous
 *    tensor of the given dtype/sizes.
 * Type promotion follows torch.result_type (dimensioned tensors > 0-dim
 * tensors > wrapped Python numbers; bool < int < float).
 */
#ifndef TPU_LOWER_H
#define TPU_LOWER_H

#include "tpu_base.h"
#include "tpu_ir.h"
#include "tpu_rt.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tpulw_kind {
  TPULW_NONE = 0,  /* None / absent optional */
  TPULW_TENSOR,    /* t */
  TPULW_TENSORS,   /* tensors[0..n) (Tensor[] or Tensor?[]; undefined
                      entries have defined == 0) */
  TPULW_INT,       /* i   (int, SymInt, or an int-valued Scalar) */
  TPULW_FLOAT,     /* f   (float, or a float-valued Scalar) */
  TPULW_BOOL,      /* i   (0/1; bool or a bool-valued Scalar) */
  TPULW_INTS,      /* ints[0..n) */
  TPULW_FLOATS,    /* floats[0..n) */
  TPULW_STR,       /* s */
  TPULW_DTYPE,     /* i = tpu_dtype */
  TPULW_GENERATOR, /* gen (never NULL: glue substitutes the default one) */
  TPULW_OTHER,     /* layout/device/memory_format...: ignored by lowerings */
  TPULW_COMPLEX    /* f + f_im*i (a complex-valued Scalar) */
} tpulw_kind;

typedef struct tpulw_tensor {
  tpu_view view;         /* device memory (device >= 0) */
  int32_t defined;       /* 0 for an undefined entry of Tensor?[] */
  int32_t device;        /* tpu device index, or -1: a 0-dim CPU tensor
                            passed by value in cpu_f/cpu_i (view.base NULL,
                            view.dtype its dtype) */
  int32_t wrapped_number;/* Python number wrapped into a tensor */
  double cpu_f;
  int64_t cpu_i;
  double cpu_im;         /* imaginary part of a complex 0-dim CPU tensor */
} tpulw_tensor;

/* Philox generator state; lowerings of random ops read it and advance
 * `offset` (in 128-bit Philox blocks) by what they consume. The glue holds
 * the generator's lock during tpulw_prepare. */
typedef struct tpulw_philox {
  uint64_t seed;
  uint64_t offset;
} tpulw_philox;

typedef struct tpulw_arg {
  const char *name;            /* schema argument name (borrowed) */
  int32_t kind;                /* tpulw_kind */
  int32_t is_output;           /* written by the op (schema alias "(a!)") */
  int32_t n;                   /* length of ints/floats/tensors */
  int64_t i;
  double f;
  const char *s;
  const int64_t *ints;
  const double *floats;
  tpulw_tensor t;
  const tpulw_tensor *tensors;
  tpulw_philox *gen;
  double f_im;                 /* imaginary part (TPULW_COMPLEX) */
} tpulw_arg;

typedef struct tpulw_ctx {
  int32_t device;    /* device the op runs on */
  int32_t precision; /* tpu_precision for f32 matmul-class ops */
} tpulw_ctx;

typedef struct tpulw_out_info {
  int32_t dtype, ndim;
  int64_t sizes[TPU_MAX_DIMS];
  int32_t dest_arg;  /* -1: new tensor; else index into args */
  int32_t dest_elem; /* element of a TENSORS dest arg (else 0) */
  int32_t resize;    /* 1: glue must resize the dest to sizes first */
  int32_t col_major; /* 1: a new or resized destination gets its last two
                        dims column-major (batched Fortran strides, what
                        PyTorch CPU's LAPACK-backed linalg ops return) */
  int32_t strided;   /* 1: a new destination gets `strides` (elementwise
                        ops follow their inputs' memory layout, as
                        PyTorch's TensorIterator does) */
  int64_t strides[TPU_MAX_DIMS];
} tpulw_out_info;

typedef struct tpulw_plan tpulw_plan;

/* Sorted list of every native overload ("add.Tensor", "relu", ...).
 * Borrowed static strings; *n receives the count. */
TPU_API const char *const *tpulw_list(int *n);

/* Facts of "name.overload" (e.g. "add.Tensor", "relu" or "relu.default" for
 * the default overload; no "aten::" prefix) the glue needs before
 * marshalling, from the op's row in the lowering table (one lookup; 0 when
 * it has no lowering):
 *   TPULW_OP_NATIVE  it has a native lowering (set for every row, and for
 *       torch_tpu::c_kernel); without it the glue falls back to CPU;
 *   TPULW_OP_NEEDS_GENERATOR  draws random numbers although its schema has
 *       no Generator argument (native_dropout): the glue appends one extra
 *       argument {name "generator", kind TPULW_GENERATOR, gen = the device's
 *       default generator} (held locked during tpulw_prepare);
 *   TPULW_OP_CPU_INDICES  accepts index tensors on the CPU (index_select,
 *       index.Tensor, index_put_, ... as PyTorch's CUDA kernels do). */
enum {
  TPULW_OP_NEEDS_GENERATOR = 1u << 0,
  TPULW_OP_CPU_INDICES = 1u << 1,
  TPULW_OP_NATIVE = 1u << 2
};
TPU_API unsigned tpulw_op_flags(const char *name, const char *overload);

/* Build the plan for one ATen call. Caller owns *out (tpulw_launch or
 * tpulw_plan_free releases it). Errors: TPU_E_UNSUPPORTED when no lowering
 * covers this call (glue then falls back), else the error PyTorch CPU
 * would raise (TPU_E_INVALID -> RuntimeError, TPU_E_INDEX -> IndexError,
 * TPU_E_TYPE -> TypeError, TPU_E_VALUE -> ValueError). Borrowed: args
 * (copied as needed). */
TPU_API int tpulw_prepare(const tpulw_ctx *ctx, const char *name, const char *overload,
                  const tpulw_arg *args, int nargs, tpulw_plan **out);
TPU_API int tpulw_plan_num_outputs(const tpulw_plan *p);
/* Borrowed; valid while the plan lives. */
TPU_API const tpulw_out_info *tpulw_plan_output(const tpulw_plan *p, int i);
/* The plan's graph (borrowed), e.g. for dumps. */
TPU_API const tpuir_graph *tpulw_plan_graph(const tpulw_plan *p);
/* Enqueue the plan on `s` with destination views outs[0..num_outputs) (on
 * the plan's device). Takes ownership of the plan (freed also on error).
 * Ops that must report input errors synchronously (index range checks)
 * are submitted as sync ops: tpug_submit waits for them and the task's
 * status is returned. Lowering only builds the graph; when it runs and
 * what is flushed with it is the recorder's decision (tpu_graph.h). */
TPU_API int tpulw_launch(tpulw_plan *p, tpurt_stream *s, const tpu_view *outs);
TPU_API void tpulw_plan_free(tpulw_plan *p);
/* The plan cache (lower/lower.c): elementwise calls with the same
 * descriptor (op, dtypes, shapes, strides, aliasing, scalar values) reuse
 * one built graph instead of lowering again. Counts since the last clear
 * (hits, misses: lookups that found no entry); clear drops every entry.
 * TORCH_TPU_PLAN_CACHE=0 turns the cache off. */
TPU_API void tpulw_plan_cache_stats(uint64_t *hits, uint64_t *misses);
TPU_API void tpulw_plan_cache_clear(void);

/* ---- StableHLO import (src/lower/stablehlo.c) ----------------------------- */
/* Build a new graph (caller frees with tpuir_graph_free) from a StableHLO
 * module in MLIR's generic textual form (jax: lowered.compiler_ir(
 * "stablehlo").operation.get_asm(print_generic_op_form=True)): the
 * parameters are @main's arguments, the outputs its results. nargs >= 0:
 * argument i must have dtype dtypes[i], rank ndims[i] and sizes
 * sizes[i * TPU_MAX_DIMS ...] (nargs < 0: no check). `precision`
 * (tpu_precision) applies to f32 dot_generals whose precision_config is
 * DEFAULT; HIGH/HIGHEST in the text raise it. Loops (stablehlo.while) are
 * unrolled: a condition that does not fold to a constant (data-dependent
 * trip count), an unsupported op or type -> TPU_E_UNSUPPORTED with the op's
 * name; malformed text -> TPU_E_INVALID. */
int tpulw_import_stablehlo(const char *text, int nargs, const int *dtypes,
                           const int *ndims, const int64_t *sizes,
                           int precision, tpuir_graph **out);
/* Run graph g (borrowed: it must outlive the launch, i.e. until the stream
 * has run it; keep it for the process) on stream s, like an op: ins[i]
 * binds parameter i, outs[i] receives output i (dtype and shape must
 * match). Recorded by the eager-mode recorder (tpug_submit), so it fuses
 * with neighbouring ops in Fused Eager and goes through the compilation
 * cache. Asynchronous. */
int tpulw_launch_graph(tpurt_stream *s, const tpuir_graph *g, int nin,
                       const tpu_view *ins, int nout, const tpu_view *outs);

#ifdef __cplusplus
}
#endif
#endif /* TPU_LOWER_H */

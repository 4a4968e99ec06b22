/* tpu_exec.h - vTPU executor (prefix tpux_): runs an IR graph on the host
 * CPU with TPU numerics. Multithreaded through tpurt_parallel_for.
 */
#ifndef TPU_EXEC_H
#define TPU_EXEC_H

#include "tpu_base.h"
#include "tpu_ir.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Run graph `g` synchronously on the calling thread (plus the pool): plan
 * it, run the plan once and free it (tpux_plan_new/_run/_free below).
 * ins[k] binds parameter k (dtype and sizes must match; any strides,
 * including 0 and overlapping); outs[i] receives output i (dtype and sizes
 * must match the output value; any non-overlapping strides). Outputs may
 * alias inputs (in-place ops): the executor gives the same result as if all
 * inputs were read before any output is written. Temporaries are allocated
 * on the host heap and released before return (freed blocks of >= 1 MiB are
 * kept in a small process-wide cache, at most 16 blocks / 256 MiB, so
 * repeated runs do not fault in fresh pages). On error nothing has been
 * written to any output when the error is an input check (e.g. an index
 * out of range -> TPU_E_INDEX). Borrowed: g, ins, outs. */
TPU_API int tpux_run(const tpuir_graph *g, int nin, const tpu_view *ins, int nout,
             const tpu_view *outs);

/* ---- plans: tpux_run in two halves --------------------------------------
 * tpux_plan_new does the part of tpux_run that depends on the graph alone
 * (liveness, fused regions, value lifetimes, free lists); tpux_plan_run
 * runs it with bindings, as tpux_run does (same checks, results and
 * errors). The plan also keeps what it learns per aliasing pattern of the
 * bindings (which outputs overlap which inputs: direct writes, GEMM
 * epilogues, fused reductions) and per setting of the fusion switches, so
 * running a plan again costs only the evaluation. The vTPU executor's
 * compile step builds one per cached program.
 * Thread-safe: runs of one plan may overlap (each takes the plan's spare
 * scratch or allocates its own). */
typedef struct tpux_plan tpux_plan;
/* Plan graph g into *out (owned by the caller: tpux_plan_free). g is
 * borrowed and must outlive the plan, unchanged. TPU_E_INVALID (NULL),
 * TPU_E_OOM. */
TPU_API int tpux_plan_new(const tpuir_graph *g, tpux_plan **out);
/* Run plan p with bindings as tpux_run. Borrowed: p, ins, outs. */
TPU_API int tpux_plan_run(tpux_plan *p, int nin, const tpu_view *ins, int nout,
                          const tpu_view *outs);
/* Release a plan (NULL allowed); no run of it may be in progress. */
TPU_API void tpux_plan_free(tpux_plan *p);

/* Copy/convert: dst[i] = convert(src[i]) for views of equal sizes (any
 * strides/dtypes). Used for device<->device and host<->device copies. */
TPU_API int tpux_copy(const tpu_view *dst, const tpu_view *src);

/* ---- fusion counters and switches ---------------------------------------
 * Kinds: TPUX_FUSE_EPILOGUE (a matmul's elementwise consumers run on each
 * finished GEMM block; env TORCH_TPU_NO_EPILOGUE=1 turns it off) and
 * TPUX_FUSE_REDUCE (a reduction evaluates its producer region tile by tile;
 * env TORCH_TPU_NO_REDUCE_FUSION=1), both bit-identical to the unfused
 * plan; TPUX_FUSE_BF16_OPERANDS (an f32 matmul at DEFAULT precision reads
 * bf16 operands rounded once where they are produced, instead of rounding
 * them itself per matmul: same products, the f32 accumulation order may
 * differ; on hosts with native bf16 only; env TORCH_TPU_NO_BF16_OPERANDS=1;
 * it applies to programs planned after the switch). Process-wide and
 * thread-safe. */
enum { TPUX_FUSE_EPILOGUE = 0, TPUX_FUSE_REDUCE = 1, TPUX_FUSE_BF16_OPERANDS = 2 };
/* How many times fusion `kind` has run since the process started (dots with
 * an epilogue / fused reductions / dots planned with bf16 operands); -1 for
 * an unknown kind. */
TPU_API int64_t tpux_fusion_runs(int kind);
/* Turn fusion `kind` on (mode 1), off (0) or back to its environment
 * default (-1), for every later program (A/B comparisons, tests). Returns
 * TPU_OK, or TPU_E_INVALID for an unknown kind or mode. */
TPU_API int tpux_set_fusion(int kind, int mode);


/* ---- executors: one table per way of running a program ------------------
 * The runtime runs every flushed program (Strict, Debug and Fused Eager)
 * through the active executor: the vTPU (this file's tpux_plan_*, the
 * default) or PJRT (exec/pjrt/client.c: the graph is emitted as StableHLO, compiled
 * once by a PJRT plugin and executed there; XLA:CPU, CUDA or libtpu).
 * Memory model: device storage stays runtime-owned host memory. On a host
 * platform (XLA:CPU) that memory is the device's: the PJRT executor hands
 * inputs to the plugin zero-copy, donates an input an output overwrites in
 * place and has other outputs written straight into their storage (each
 * checked, else copied). On an accelerator it copies inputs host -> device
 * and outputs back per program (device-resident storage is future work).
 *
 * Selection (first use, process-wide): TORCH_TPU_BACKEND=vtpu|pjrt|auto
 * (unset or "vtpu": the vTPU; "auto": PJRT when its plugin starts, else
 * the vTPU), TORCH_TPU_PJRT_PLUGIN=/path/plugin.so (the PJRT
 * plugin; torch_tpu's Python package fills it in from the installed
 * plugins: libtpu, the jax CUDA plugin, xla-cpu-pjrt). */
/* Identity of a program for an executor's own disk cache: the graph
 * cache's 128-bit structural key and its disk directory (NULL or "": no
 * disk tier). */
typedef struct tpux_key {
  uint64_t k1, k2;
  const char *dir;
} tpux_key;

typedef struct tpux_executor {
  const char *name; /* "vtpu" or "pjrt" (static) */
  /* Prepare g for execution into *exe (the vTPU: its tpux_plan; PJRT: the
   * per-binding-pattern executables). g is borrowed and outlives *exe; key (may be NULL: no disk
   * tier) is copied. PJRT compiles lazily at the first execute per binding
   * pattern (which outputs overwrite which inputs), from its disk tier when
   * the key's file is there. Errors: TPU_E_UNSUPPORTED ("unsupported on
   * PJRT: <op>"), the plugin's message otherwise. */
  int (*compile)(const tpuir_graph *g, const tpux_key *key, void **exe);
  /* Run a compiled program: bindings as tpux_run. Synchronous (events are
   * awaited inside). Borrowed: everything. */
  int (*execute)(void *exe, const tpuir_graph *g, int nin, const tpu_view *ins, int nout,
                 const tpu_view *outs);
  /* Release what compile returned (NULL allowed). */
  void (*release)(void *exe);
  /* Copy/convert between host views (see tpux_copy). */
  int (*copy)(const tpu_view *dst, const tpu_view *src);
} tpux_executor;

/* The executor chosen by the environment (see above), initialising it on
 * first use. NULL on error (message via tpu_last_error: e.g. a PJRT plugin
 * that cannot be loaded, libtpu without a TPU). Static, thread-safe. */
TPU_API const tpux_executor *tpux_executor_active(void);
/* Switch the active executor to "vtpu" or "pjrt" (A/B benchmarks and
 * tests). The caller makes sure no program is queued (synchronize first);
 * cached programs keep their executable and can run on either. TPU_OK, or
 * the PJRT plugin's error (the active executor is then unchanged). */
TPU_API int tpux_executor_select(const char *name);
/* The built-in executors (static). tpux_executor_pjrt() exists in every
 * build; without the PJRT header at build time its compile fails with
 * TPU_E_UNSUPPORTED. */
TPU_API const tpux_executor *tpux_executor_vtpu(void);
TPU_API const tpux_executor *tpux_executor_pjrt(void);

/* Run program g through the active executor, compiling it on first use
 * into *slot (a per-program cache slot, initially NULL, owned by the
 * caller: release it with tpux_exec_release). The slot keeps one
 * executable per executor, so a program runs on whichever is active.
 * Thread-safe: concurrent first runs compile once each and keep one.
 * Borrowed: g (must outlive the slot), ins, outs. */
TPU_API int tpux_exec_program(const tpuir_graph *g, const tpux_key *key, void **slot, int nin,
                      const tpu_view *ins, int nout, const tpu_view *outs);
/* Release a slot filled by tpux_exec_program (NULL is fine). */
TPU_API void tpux_exec_release(void *slot);

/* Human-readable name of the device programs run on ("vTPU (host CPU
 * executor)", or the PJRT platform and device kind, e.g. "cpu (XLA:CPU via
 * PJRT)"). Static string; "" before/without a working executor. */
TPU_API const char *tpux_device_name(void);

/* Counters of the PJRT executor (process-wide): programs compiled by the
 * plugin, executed, and programs that ran on the vTPU instead because
 * StableHLO has no expression for one of their ops (only with
 * TORCH_TPU_PJRT_FALLBACK=vtpu; counted, never silent); StableHLO
 * emissions; executables loaded from / stored to the disk tier (loads are
 * not compiles); inputs donated to an output that overwrites them, outputs
 * written straight into their storage; bytes the plugin copied host ->
 * device and device -> host. */
typedef struct tpux_pjrt_stats {
  uint64_t compiles, executions, fallbacks;
  double compile_seconds;
  uint64_t emits, disk_loads, disk_stores;
  uint64_t donated_inputs, direct_outputs, bytes_h2d, bytes_d2h;
} tpux_pjrt_stats;
TPU_API void tpux_pjrt_get_stats(tpux_pjrt_stats *out);

/* Counters of the vTPU's native elementwise kernels (process-wide; see
 * exec/vtpu/jit.c): program signatures compiled, loaded from the cache
 * directory instead, failed (no compiler, compile error: those programs
 * stay on the tile engine), seconds spent compiling, program builds bound
 * to a native kernel, and signatures queued or compiling now. */
typedef struct tpux_jit_stats {
  uint64_t compiles, disk_loads, failures;
  double compile_seconds;
  uint64_t bound, pending;
} tpux_jit_stats;
TPU_API void tpux_jit_get_stats(tpux_jit_stats *out);
/* Block until no native kernel is queued or compiling (benchmarks measure
 * the steady state after their warm-up). */
TPU_API void tpux_jit_wait(void);
/* Switch native kernels (overrides TORCH_TPU_VTPU_JIT(_HOT)): mode 0 off,
 * 1 compile in the background, 2 compile on the calling thread; hot > 0:
 * builds of a program signature before it is compiled (<= 0: unchanged).
 * Programs built from then on follow it. Returns the previous mode. */
TPU_API int tpux_jit_configure(int mode, int hot);

/* The vTPU keeps freed temporaries of >= 1 MiB (values of running
 * programs, not device memory) in a process-wide cache of at most 1 GiB,
 * so a program's next run reuses the same pages; this returns them to the
 * host (torch.tpu.empty_cache calls it). Thread-safe. */
TPU_API void tpux_trim_temporaries(void);

/* Executor step profile (vTPU). While on, every plan run adds the wall time
 * of each step it runs (a node, a fused region, a dot with its epilogue, a
 * region feeding a reduction), of each output value it copies into its
 * destination ("(output copy) f32[64,64]") and of the whole run
 * ("(plan runs)") to a process-wide table keyed by a
 * label naming what ran, e.g. "dot_general f32[8,8,256,64]",
 * "region 3 ops f32[2048,512]: mul,add,tanh" or "reshape (copy) f32[64,64]"
 * (a view that materialised). Off by default. Thread-safe. */
TPU_API void tpux_profile_enable(int on);
typedef struct tpux_profile_entry {
  char label[120];
  int64_t count;  /* steps run under this label */
  double seconds; /* their total wall time */
} tpux_profile_entry;
/* Copies up to cap entries (any order) into out (caller-owned; may be NULL
 * with cap 0) and returns how many there are; reset != 0 empties the table
 * afterwards. */
TPU_API int tpux_profile_read(tpux_profile_entry *out, int cap, int reset);

/* StableHLO text (MLIR, generic op form) of graph g: func.func @main with
 * g's parameters as arguments and its outputs as results. *text is
 * malloc'd (caller frees), NUL-terminated; *len (may be NULL) its length.
 * TPU_E_UNSUPPORTED "unsupported on PJRT: <op>" when an op reachable from
 * an output has no StableHLO expression (exec/pjrt/emit.c lists them). */
TPU_API int tpux_emit_stablehlo(const tpuir_graph *g, char **text, size_t *len);


/* ---- user kernels (exec/vtpu/kernel.c) ----------------------------------------
 * A user kernel is a C function compiled into a shared object by the
 * Python layer (torch_tpu.kernels.c_kernel) and run by the vTPU as the
 * TPUIR_CUSTOM_CALL node of a program. Its entry point has the uniform ABI
 *     void entry(void *const *in, void *const *out, const int64_t *sym);
 * in[k]: argument k in signature order (a tensor: its contiguous row-major
 * data; a scalar: a pointer to its value in its dtype), out[o]: output o
 * (contiguous, written by the kernel), sym[s]: the value of size symbol s.
 * The entry runs on one executor thread; it must not keep the pointers.
 *
 * Argument dims: in_dim[k][d] >= 0 is a fixed size, < 0 is symbol
 * -(in_dim + 1). Output dims are small programs over the symbols (RPN,
 * pairs (opcode, operand) in `code`, one program per output dim in order,
 * each ending with TPUX_KOP_END). */
#define TPUX_KERNEL_MAX_ARGS 16
#define TPUX_KERNEL_MAX_OUTS 8
#define TPUX_KERNEL_MAX_SYMS 16
#define TPUX_KERNEL_MAX_CODE 512
enum { /* output-size programs: (opcode, operand) pairs */
  TPUX_KOP_END = 0, TPUX_KOP_LIT, /* push operand */
  TPUX_KOP_SYM,                   /* push symbol[operand] */
  TPUX_KOP_ADD, TPUX_KOP_SUB, TPUX_KOP_MUL,
  TPUX_KOP_DIV,                   /* floor division (x // y, y > 0) */
  TPUX_KOP_MOD                    /* x % y (y > 0) */
};
typedef void (*tpux_kernel_fn)(void *const *in, void *const *out, const int64_t *sym);
typedef struct tpux_kernel_desc {
  const char *name;      /* the kernel's name (messages, PJRT error) */
  const char *signature; /* its signature text (messages) */
  const char *path;      /* shared object to dlopen */
  const char *symbol;    /* entry point in it (ABI above) */
  tpux_kernel_fn fn;     /* or the entry itself (path and symbol unused) */
  uint64_t key;          /* identity: hash of source, signature, compiler */
  int32_t nin;           /* arguments (tensors and scalars) */
  int32_t in_dtype[TPUX_KERNEL_MAX_ARGS];
  int32_t in_ndim[TPUX_KERNEL_MAX_ARGS];  /* -1: a scalar */
  int64_t in_dim[TPUX_KERNEL_MAX_ARGS][TPU_MAX_DIMS];
  const char *in_name[TPUX_KERNEL_MAX_ARGS];
  int32_t nsym;
  const char *sym_name[TPUX_KERNEL_MAX_SYMS];
  int32_t nout;
  int32_t out_dtype[TPUX_KERNEL_MAX_OUTS], out_ndim[TPUX_KERNEL_MAX_OUTS];
  int32_t ncode;         /* int64 words in code (pairs) */
  int64_t code[TPUX_KERNEL_MAX_CODE];
  /* 1 + s: the kernel may run on blocks of rows of size symbol s, in
   * parallel on the executor's threads: s must be dimension 0 of every
   * output (exactly) and appear in no other dimension of any argument or
   * output; each block call gets the arguments that have s at dimension 0
   * (and the outputs) offset to its first row, sym[s] = its row count, and
   * every other argument whole. 0: one call on one thread. */
  int32_t parallel;
} tpux_kernel_desc;

/* Load d->path (dlopen, RTLD_NOW | RTLD_LOCAL), resolve d->symbol (or take
 * d->fn when set: a kernel linked into the program) and register the kernel under d->key (the descriptor and its strings are
 * copied). Registering a key again is a no-op (TPU_OK). Errors:
 * TPU_E_INVALID (bad descriptor, dlopen/dlsym message). Thread-safe;
 * kernels stay loaded for the life of the process. */
TPU_API int tpux_kernel_register(const tpux_kernel_desc *d);
/* Name of the registered kernel `key` (static while the process lives),
 * or NULL when no such kernel is registered. */
TPU_API const char *tpux_kernel_name(uint64_t key);
/* Argument kinds of kernel `key` in signature order: ndim[k] (-1 for a
 * scalar) and dtype[k], for up to cap arguments. Returns the argument
 * count, or TPU_E_INVALID for an unknown key. */
TPU_API int tpux_kernel_args(uint64_t key, int cap, int32_t *ndim, int32_t *dtype);
/* Check one call against kernel `key`'s signature and infer its outputs:
 * nin arguments with dtype[k] and shape (ndim[k], sizes[k]); a scalar
 * argument is passed with ndim -1 (its dtype is not checked). Fills
 * sym[0..nsym) (may be NULL) and, per output o, out_dtype[o], out_ndim[o],
 * out_sizes[o] (any may be NULL); *nout (may be NULL) = the output count.
 * Errors (the message names the kernel, the argument and the signature):
 * TPU_E_INVALID (unknown key, wrong argument count, dtype, rank, size, or
 * conflicting sizes for one symbol; a negative output size). */
TPU_API int tpux_kernel_infer(uint64_t key, int nin, const int32_t *dtype, const int32_t *ndim,
                      const int64_t (*sizes)[TPU_MAX_DIMS], int64_t *sym, int *nout,
                      int32_t *out_dtype, int32_t *out_ndim,
                      int64_t (*out_sizes)[TPU_MAX_DIMS]);
/* How many times user kernels have run in the vTPU executor (process-wide). */
TPU_API uint64_t tpux_kernel_runs(void);

#ifdef __cplusplus
}
#endif
#endif /* TPU_EXEC_H */

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

/* Run graph `g` synchronously on the calling thread (plus the pool).
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
int tpux_run(const tpuir_graph *g, int nin, const tpu_view *ins, int nout,
             const tpu_view *outs);

/* Copy/convert: dst[i] = convert(src[i]) for views of equal sizes (any
 * strides/dtypes). Used for device<->device and host<->device copies. */
int tpux_copy(const tpu_view *dst, const tpu_view *src);

/* ---- fusion counters and switches ---------------------------------------
 * Kinds: TPUX_FUSE_EPILOGUE (a matmul's elementwise consumers run on each
 * finished GEMM block; env TORCH_TPU_NO_EPILOGUE=1 turns it off) and
 * TPUX_FUSE_REDUCE (a reduction evaluates its producer region tile by tile;
 * env TORCH_TPU_NO_REDUCE_FUSION=1). Both are bit-identical to the unfused
 * plan. Process-wide and thread-safe. */
enum { TPUX_FUSE_EPILOGUE = 0, TPUX_FUSE_REDUCE = 1 };
/* How many times fusion `kind` has run since the process started (dots with
 * an epilogue / fused reductions); -1 for an unknown kind. */
int64_t tpux_fusion_runs(int kind);
/* Turn fusion `kind` on (mode 1), off (0) or back to its environment
 * default (-1), for every later program (A/B comparisons, tests). Returns
 * TPU_OK, or TPU_E_INVALID for an unknown kind or mode. */
int tpux_set_fusion(int kind, int mode);


/* ---- executors: one table per way of running a program ------------------
 * The runtime runs every flushed program (Strict, Debug and Fused Eager)
 * through the active executor: the vTPU (this file's tpux_run, the
 * default) or PJRT (exec/pjrt/client.c: the graph is emitted as StableHLO, compiled
 * once by a PJRT plugin and executed there; XLA:CPU, CUDA or libtpu).
 * Memory model: device storage stays runtime-owned host memory; the PJRT
 * executor copies a program's inputs host -> PJRT device, executes and
 * copies the outputs back (a device-resident buffer model is future work).
 *
 * Selection (first use, process-wide): TORCH_TPU_BACKEND=vtpu|pjrt|auto
 * (unset or "vtpu": the vTPU; "auto": PJRT when its plugin starts, else
 * the vTPU), TORCH_TPU_PJRT_PLUGIN=/path/plugin.so (the PJRT
 * plugin; torch_tpu's Python package fills it in from the installed
 * plugins: libtpu, the jax CUDA plugin, xla-cpu-pjrt). */
typedef struct tpux_executor {
  const char *name; /* "vtpu" or "pjrt" (static) */
  /* Compile g once into *exe (NULL when the executor needs no executable).
   * g is borrowed and outlives *exe. Errors: TPU_E_UNSUPPORTED ("unsupported
   * on PJRT: <op>"), the plugin's message otherwise. */
  int (*compile)(const tpuir_graph *g, void **exe);
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
const tpux_executor *tpux_executor_active(void);
/* Switch the active executor to "vtpu" or "pjrt" (A/B benchmarks and
 * tests). The caller makes sure no program is queued (synchronize first);
 * cached programs keep their executable and can run on either. TPU_OK, or
 * the PJRT plugin's error (the active executor is then unchanged). */
int tpux_executor_select(const char *name);
/* The built-in executors (static). tpux_executor_pjrt() exists in every
 * build; without the PJRT header at build time its compile fails with
 * TPU_E_UNSUPPORTED. */
const tpux_executor *tpux_executor_vtpu(void);
const tpux_executor *tpux_executor_pjrt(void);

/* Run program g through the active executor, compiling it on first use
 * into *slot (a per-program cache slot, initially NULL, owned by the
 * caller: release it with tpux_exec_release). Thread-safe: concurrent first
 * runs compile once each and keep one. Borrowed: g, ins, outs. */
int tpux_exec_program(const tpuir_graph *g, void **slot, int nin, const tpu_view *ins, int nout,
                      const tpu_view *outs);
/* Release a slot filled by tpux_exec_program (NULL is fine). */
void tpux_exec_release(void *slot);

/* Human-readable name of the device programs run on ("vTPU (host CPU
 * executor)", or the PJRT platform and device kind, e.g. "cpu (XLA:CPU via
 * PJRT)"). Static string; "" before/without a working executor. */
const char *tpux_device_name(void);

/* Counters of the PJRT executor (process-wide): programs compiled,
 * executed, and programs that ran on the vTPU instead because StableHLO
 * has no expression for one of their ops (only with
 * TORCH_TPU_PJRT_FALLBACK=vtpu; counted, never silent). */
typedef struct tpux_pjrt_stats {
  uint64_t compiles, executions, fallbacks;
  double compile_seconds;
} tpux_pjrt_stats;
void tpux_pjrt_get_stats(tpux_pjrt_stats *out);

/* StableHLO text (MLIR, generic op form) of graph g: func.func @main with
 * g's parameters as arguments and its outputs as results. *text is
 * malloc'd (caller frees), NUL-terminated; *len (may be NULL) its length.
 * TPU_E_UNSUPPORTED "unsupported on PJRT: <op>" when an op reachable from
 * an output has no StableHLO expression (exec/pjrt/emit.c lists them). */
int tpux_emit_stablehlo(const tpuir_graph *g, char **text, size_t *len);

#ifdef __cplusplus
}
#endif
#endif /* TPU_EXEC_H */

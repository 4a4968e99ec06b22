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

#ifdef __cplusplus
}
#endif
#endif /* TPU_EXEC_H */

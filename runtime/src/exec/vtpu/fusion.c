/* exec/vtpu/fusion.c - the public counters and switches of the executor's
 * fusions (tpu_exec.h), over the per-fusion state kept by exec/vtpu/epilogue.c
 * exec/vtpu/reduce.c and exec/vtpu/rewrite.c. */
#include "exec/vtpu/internal.h"

int64_t tpux_fusion_runs(int kind) {
  switch (kind) {
  case TPUX_FUSE_EPILOGUE: return tpux__epilogue_runs();
  case TPUX_FUSE_REDUCE: return tpux__reduce_fusion_runs();
  case TPUX_FUSE_BF16_OPERANDS: return tpux__bf16_operand_dots();
  default: return -1;
  }
}

int tpux_set_fusion(int kind, int mode) {
  if (mode < -1 || mode > 1)
    return tpu_error(TPU_E_INVALID, "tpux_set_fusion: mode must be -1, 0 or 1, got %d", mode);
  switch (kind) {
  case TPUX_FUSE_EPILOGUE: tpux__set_epilogue(mode); return TPU_OK;
  case TPUX_FUSE_REDUCE: tpux__set_reduce_fusion(mode); return TPU_OK;
  case TPUX_FUSE_BF16_OPERANDS: tpux__set_bf16_operands(mode); return TPU_OK;
  default: return tpu_error(TPU_E_INVALID, "tpux_set_fusion: unknown fusion kind %d", kind);
  }
}

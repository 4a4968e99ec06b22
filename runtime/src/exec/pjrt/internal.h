/* exec/pjrt/internal.h - private interface between the StableHLO emitter
 * (exec/pjrt/emit.c) and the PJRT executor (exec/pjrt/client.c). Not installed. */
#ifndef TPU_EXEC_PJRT_INTERNAL_H
#define TPU_EXEC_PJRT_INTERNAL_H

#include "tpu_exec.h"

/* A run-time check the vTPU makes and the program computes itself: the
 * emitted @main returns, after the graph's outputs, one rank-0 i64 per
 * check: INT64_MIN when it passed, else the offending value (an index, a
 * divisor, an exponent). The executor raises the vTPU's error for the
 * first failed check before writing any output. */
enum {
  TPUX_CHECK_INDEX = 0,  /* TPU_E_INDEX "index V is out of bounds for dimension D with size S" */
  TPUX_CHECK_SELECT,     /* TPU_E_INDEX "index out of range in self" */
  TPUX_CHECK_DIV_ZERO,   /* TPU_E_INVALID "ZeroDivisionError" */
  TPUX_CHECK_NEG_POW,    /* TPU_E_INVALID "Integers to negative integer powers ..." */
  TPUX_CHECK_CHOLESKY,   /* TPU_E_LINALG "cholesky: ... (the leading minor of order K ...)";
                            value = batch * (n + 1) + K of the first failing matrix, size = n,
                            dim = 1 when batched */
};
typedef struct tpux__check {
  int kind, dim;
  int64_t size;
} tpux__check;

/* tpux_emit_stablehlo plus the checks (*checks malloc'd, caller frees;
 * NULL when *nchecks == 0) and donation. alias (NULL: none) has one entry
 * per output: -1 a plain result; -2 the output gets an extra argument of
 * its type, donated to it (appended after the parameters, in output
 * order: the executor passes the output's own storage there); k >= 0
 * parameter k is donated to it (tf.aliasing_output). Entries are reset to
 * -1 when the program has checks (they raise before any output is
 * written) or are out of range. */
int tpux__emit_stablehlo(const tpuir_graph *g, int *alias, char **text, size_t *len,
                         tpux__check **checks, int *nchecks);

#endif /* TPU_EXEC_PJRT_INTERNAL_H */

/* ir/internal.h - private hooks between ir/ir.c and the builders that live in
 * other ir/ files (builders by family, ir/dump.c). Not installed. */
#ifndef TPU_IR_INTERNAL_H
#define TPU_IR_INTERNAL_H

#include <stddef.h>

#include "tpu_ir.h"

/* Operand v of a builder named `what`: TPU_OK with *out (may be NULL) set
 * to its node (borrowed, valid until the graph grows), v itself if v < 0
 * (an earlier error), or TPU_E_INVALID if v is not in g. */
int tpuir__operand(const tpuir_graph *g, tpuir_val v, const char *what,
                   const tpuir_node **out);
/* Append a zeroed node with op `op` (not yet a value: call tpuir__commit
 * after filling it). NULL on OOM. May move every node: re-fetch operand
 * nodes after calling it. Defined in ir/ir.c. */
tpuir_node *tpuir__new_node(tpuir_graph *g, int op);
/* Commit the node most recently returned by tpuir__new_node; returns its
 * value id. Defined in ir/ir.c. */
tpuir_val tpuir__commit(tpuir_graph *g);
/* tpuir_hash's result for flags kept by tpuir_hash_keep, NULL if none.
 * Defined in ir/ir.c. */
const uint64_t *tpuir__hash_memo(const tpuir_graph *g, unsigned flags);
/* "f32[4,8]" (dtype and sizes) into buf, always NUL-terminated. Defined in
 * ir/ir.c; used by builder messages and the dump. */
void tpuir__type_str(char *buf, size_t cap, int dtype, int ndim, const int64_t *sizes);
/* Static names of a tpuir_reduce_kind / tpuir_rng_kind ("?" if invalid). */
const char *tpuir__reduce_kind_name(int k);
const char *tpuir__rng_kind_name(int k);
/* dot_general of two complex operands (same dtype) as four real
 * dot_generals of their parts: (a+bi)(c+di) = (ac - bd) + (ad + bc)i.
 * Result dtype out_dtype (complex). Defined in ir/complex.c. */
tpuir_val tpuir__dot_complex(tpuir_graph *g, tpuir_val lhs, tpuir_val rhs,
                             int nbatch, const int64_t *lhs_batch,
                             const int64_t *rhs_batch, int ncontract,
                             const int64_t *lhs_contract,
                             const int64_t *rhs_contract, int precision,
                             int out_dtype);

#endif /* TPU_IR_INTERNAL_H */

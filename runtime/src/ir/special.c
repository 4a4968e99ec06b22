/* ir/special.c - IR builders for the special-function elementwise ops
 * (classes TPUIR_CLASS_SPECIAL1/2 in TPUIR_OPS, tpu_ir.h): operand validation and
 * result shape/dtype. They use the plain unary / binary node layout
 * (in[0], in[1]; no attributes), so tpuir_hash and tpuir_dump need nothing
 * more, and the executor fuses them like the other elementwise ops.
 */
#include <string.h>

#include "ir/internal.h"

static tpuir_val append(tpuir_graph *g, int op, int dtype, int nin,
                        tpuir_val a, tpuir_val b) {
  const char *nm = tpuir_op_name(op);
  const tpuir_node *an = tpuir_get_node(g, a);
  int ndim = an->ndim;
  int64_t sizes[TPU_MAX_DIMS];
  memcpy(sizes, an->sizes, sizeof sizes);
  tpuir_node *nd = tpuir__new_node(g, op);
  if (!nd) return tpu_error(TPU_E_OOM, "%s: out of host memory", nm);
  nd->dtype = dtype;
  nd->ndim = ndim;
  memcpy(nd->sizes, sizes, sizeof sizes);
  nd->nin = nin;
  nd->in[0] = a;
  if (nin > 1) nd->in[1] = b;
  return tpuir__commit(g);
}

/* Unary special function of a float value (see tpu_ir.h). */
tpuir_val tpuir_special_unary(tpuir_graph *g, int op, tpuir_val x) {
  const tpuir_op_info_t *oi = tpuir_op_info(op);
  if (!oi || oi->cls != TPUIR_CLASS_SPECIAL1)
    return tpu_error(TPU_E_INVALID, "special_unary: op %d (%s) is not a unary "
                     "special function", op, tpuir_op_name(op));
  const char *nm = tpuir_op_name(op);
  const tpuir_node *xn = NULL;
  int rc = tpuir__operand(g, x, nm, &xn);
  if (rc) return rc;
  if (!tpu_dtype_is_float(xn->dtype))
    return tpu_error(TPU_E_TYPE, "%s: needs a floating point operand, got %s",
                     nm, tpu_dtype_name(xn->dtype));
  return append(g, op, op == TPUIR_FREXP_EXP ? TPU_I32 : xn->dtype, 1, x, 0);
}

/* Binary special function of two values of one shape and dtype. */
tpuir_val tpuir_special_binary(tpuir_graph *g, int op, tpuir_val a,
                               tpuir_val b) {
  const tpuir_op_info_t *oi = tpuir_op_info(op);
  if (!oi || oi->cls != TPUIR_CLASS_SPECIAL2)
    return tpu_error(TPU_E_INVALID, "special_binary: op %d (%s) is not a "
                     "binary special function", op, tpuir_op_name(op));
  const char *nm = tpuir_op_name(op);
  const tpuir_node *an = NULL, *bn = NULL;
  int rc = tpuir__operand(g, a, nm, &an);
  if (rc) return rc;
  if ((rc = tpuir__operand(g, b, nm, &bn))) return rc;
  if (an->dtype != bn->dtype)
    return tpu_error(TPU_E_TYPE, "%s: operand dtypes differ (%s vs %s)", nm,
                     tpu_dtype_name(an->dtype), tpu_dtype_name(bn->dtype));
  int ok = an->ndim == bn->ndim;
  for (int i = 0; ok && i < an->ndim; i++) ok = an->sizes[i] == bn->sizes[i];
  if (!ok)
    return tpu_error(TPU_E_INVALID, "%s: operand shapes differ", nm);
  int is_int = op == TPUIR_GCD || op == TPUIR_LCM;
  if (is_int ? !tpu_dtype_is_int(an->dtype) : !tpu_dtype_is_float(an->dtype))
    return tpu_error(TPU_E_TYPE, "%s: needs %s operands, got %s", nm,
                     is_int ? "integer" : "floating point",
                     tpu_dtype_name(an->dtype));
  return append(g, op, an->dtype, 2, a, b);
}

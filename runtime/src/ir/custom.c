/* ir/custom.c - IR builder of user-kernel calls (TPUIR_CUSTOM_CALL): one
 * node per result of a C kernel registered with the executor
 * (tpux_kernel_register). The node holds the kernel's content key, so a
 * program's structural hash (and its cache key) covers the kernel's
 * identity; its operands are a list like CONCAT's. */
#include <stdlib.h>
#include <string.h>

#include "ir/internal.h"

tpuir_val tpuir_custom_call(tpuir_graph *g, uint64_t key, int nops,
                            const tpuir_val *ops, int result, int nresults,
                            int dtype, int ndim, const int64_t *sizes) {
  if (!g) return tpu_error(TPU_E_INVALID, "custom_call: NULL graph");
  if (nops < 0 || (nops > 0 && !ops))
    return tpu_error(TPU_E_INVALID, "custom_call: bad operand list");
  if (nresults < 1 || result < 0 || result >= nresults)
    return tpu_error(TPU_E_INVALID, "custom_call: result %d of %d", result, nresults);
  if (dtype < 0 || dtype >= TPU_NUM_DTYPES || tpu_dtype_is_complex(dtype))
    return tpu_error(TPU_E_TYPE, "custom_call: bad result dtype %d", dtype);
  if (ndim < 0 || ndim > TPU_MAX_DIMS || (ndim > 0 && !sizes))
    return tpu_error(TPU_E_INVALID, "custom_call: bad result rank %d", ndim);
  for (int d = 0; d < ndim; d++)
    if (sizes[d] < 0)
      return tpu_error(TPU_E_INVALID, "custom_call: negative result size %lld",
                       (long long)sizes[d]);
  for (int k = 0; k < nops; k++) {
    int rc = tpuir__operand(g, ops[k], "custom_call", NULL);
    if (rc < 0) return rc;
  }
  tpuir_val *list = NULL;
  if (nops) {
    list = malloc((size_t)nops * sizeof(tpuir_val));
    if (!list) return tpu_error(TPU_E_OOM, "custom_call: out of host memory");
    memcpy(list, ops, (size_t)nops * sizeof(tpuir_val));
  }
  tpuir_node *nd = tpuir__new_node(g, TPUIR_CUSTOM_CALL);
  if (!nd) {
    free(list);
    return tpu_error(TPU_E_OOM, "custom_call: out of host memory");
  }
  nd->dtype = dtype;
  nd->ndim = ndim;
  for (int d = 0; d < ndim; d++) nd->sizes[d] = sizes[d];
  nd->list = list;
  nd->nlist = nops;
  nd->nin = nops < 4 ? nops : 4;
  for (int i = 0; i < nd->nin; i++) nd->in[i] = ops[i];
  nd->a[0] = (int64_t)key;
  nd->na = 1;
  nd->dim = result;
  nd->kind = nresults;
  return tpuir__commit(g);
}

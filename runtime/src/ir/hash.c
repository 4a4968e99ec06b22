/* ir/hash.c - the structural hash of a graph (tpuir_hash), the key of the
 * compilation cache and of the eager recorder's loop detection. */
#include "ir/internal.h"

#define HF(h, x) tpu_hash_bytes((h), &(x), sizeof(x))

void tpuir_hash(const tpuir_graph *g, unsigned flags, uint64_t out[2]) {
  tpu_hash h = tpu_hash_init();
  int nn = tpuir_num_nodes(g), no = tpuir_num_outputs(g);
  HF(&h, nn);
  for (int t = 0; t < nn; t++) {
    const tpuir_node *n = tpuir_get_node(g, t);
    HF(&h, n->op);
    HF(&h, n->dtype);
    HF(&h, n->ndim);
    tpu_hash_bytes(&h, n->sizes, (size_t)n->ndim * sizeof(int64_t));
    if ((flags & TPUIR_HASH_LOOP) && tpuir_op_info(n->op)->cls == TPUIR_CLASS_LEAF) continue;
    HF(&h, n->nin);
    tpu_hash_bytes(&h, n->in, (size_t)n->nin * sizeof(tpuir_val));
    HF(&h, n->nlist);
    if (n->nlist) tpu_hash_bytes(&h, n->list, (size_t)n->nlist * sizeof(tpuir_val));
    HF(&h, n->kind);
    HF(&h, n->dim);
    /* attribute arrays are zero beyond their used length (new nodes are) */
    tpu_hash_bytes(&h, n->a, sizeof n->a);
    tpu_hash_bytes(&h, n->b, sizeof n->b);
    tpu_hash_bytes(&h, n->c, sizeof n->c);
    tpu_hash_bytes(&h, n->d, sizeof n->d);
    HF(&h, n->na);
    HF(&h, n->nb);
    if (flags & TPUIR_HASH_VALUES) {
      HF(&h, n->fval);
      HF(&h, n->ival);
      HF(&h, n->seed);
      HF(&h, n->offset);
    }
  }
  HF(&h, no);
  for (int i = 0; i < no; i++) {
    tpuir_val v = tpuir_output(g, i);
    HF(&h, v);
  }
  out[0] = h.a;
  out[1] = h.b;
}

/* ir/hash.c - the structural hash of a graph (tpuir_hash), the key of the
 * compilation cache and of the eager recorder's loop detection. */
#include "ir/internal.h"

/* an attribute array: its length up to the last nonzero element, then
 * those elements (the rest is zero: new nodes are zeroed), so a node of a
 * few dims hashes a few words instead of TPU_MAX_DIMS */
static void hash_attr(tpu_hash *h, const int64_t *a) {
  int n = TPU_MAX_DIMS;
  while (n > 0 && a[n - 1] == 0) n--;
  tpu_hash_word(h, (uint64_t)n);
  for (int i = 0; i < n; i++) tpu_hash_word(h, (uint64_t)a[i]);
}

void tpuir_hash(const tpuir_graph *g, unsigned flags, uint64_t out[2]) {
  const uint64_t *kept = tpuir__hash_memo(g, flags);
  if (kept) {
    out[0] = kept[0];
    out[1] = kept[1];
    return;
  }
  tpu_hash h = tpu_hash_init();
  int nn = tpuir_num_nodes(g), no = tpuir_num_outputs(g);
  TPU_HASH_FIELD(&h, nn);
  for (int t = 0; t < nn; t++) {
    const tpuir_node *n = tpuir_get_node(g, t);
    TPU_HASH_FIELD(&h, n->op);
    TPU_HASH_FIELD(&h, n->dtype);
    TPU_HASH_FIELD(&h, n->ndim);
    tpu_hash_bytes(&h, n->sizes, (size_t)n->ndim * sizeof(int64_t));
    if ((flags & TPUIR_HASH_LOOP) && tpuir_op_info(n->op)->cls == TPUIR_CLASS_LEAF) continue;
    TPU_HASH_FIELD(&h, n->nin);
    tpu_hash_bytes(&h, n->in, (size_t)n->nin * sizeof(tpuir_val));
    TPU_HASH_FIELD(&h, n->nlist);
    if (n->nlist) tpu_hash_bytes(&h, n->list, (size_t)n->nlist * sizeof(tpuir_val));
    TPU_HASH_FIELD(&h, n->kind);
    TPU_HASH_FIELD(&h, n->dim);
    /* attribute arrays are zero beyond their used length (new nodes are) */
    hash_attr(&h, n->a);
    hash_attr(&h, n->b);
    hash_attr(&h, n->c);
    hash_attr(&h, n->d);
    TPU_HASH_FIELD(&h, n->na);
    TPU_HASH_FIELD(&h, n->nb);
    if (flags & TPUIR_HASH_VALUES) {
      TPU_HASH_FIELD(&h, n->fval);
      TPU_HASH_FIELD(&h, n->ival);
      TPU_HASH_FIELD(&h, n->seed);
      TPU_HASH_FIELD(&h, n->offset);
    }
  }
  TPU_HASH_FIELD(&h, no);
  for (int i = 0; i < no; i++) {
    tpuir_val v = tpuir_output(g, i);
    TPU_HASH_FIELD(&h, v);
  }
  out[0] = h.a;
  out[1] = h.b;
}

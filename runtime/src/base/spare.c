/* base/spare.c - spare heap blocks of one size (base/internal.h). */
#include <stdlib.h>

#include "base/internal.h"

void *tpu__spare_get(tpu_spares *s) {
  for (int i = 0; i < TPU_SPARES; i++) {
    if (!atomic_load_explicit(&s->slot[i], memory_order_relaxed)) continue;
    void *p = atomic_exchange_explicit(&s->slot[i], NULL, memory_order_acquire);
    if (p) return p;
  }
  return NULL;
}

void tpu__spare_put(tpu_spares *s, void *p) {
  if (!p) return;
  for (int i = 0; i < TPU_SPARES; i++) {
    void *none = NULL;
    if (!atomic_load_explicit(&s->slot[i], memory_order_relaxed) &&
        atomic_compare_exchange_strong_explicit(&s->slot[i], &none, p, memory_order_release,
                                                memory_order_relaxed))
      return;
  }
  free(p);
}

/* base/internal.h - base-layer helpers private to the runtime library
 * (hidden symbols, prefix tpu__). */
#ifndef TPU_BASE_INTERNAL_H
#define TPU_BASE_INTERNAL_H

#include <stdatomic.h>

#include "tpu_base.h"

/* Spare heap blocks of one size, for blocks that eager dispatch makes and
 * frees once per op and that are too large for malloc's per-thread caches
 * (a lowering plan, ~5.7 KB: a malloc and free of it cost ~500
 * instructions). Up to TPU_SPARES freed blocks wait for the next get.
 * Each slot is one atomic pointer (taken by exchange, filled by
 * compare-exchange), so any thread may get or put without a lock; static
 * zero-initialised storage is an empty set. */
#define TPU_SPARES 4
typedef struct tpu_spares {
  _Atomic(void *) slot[TPU_SPARES];
} tpu_spares;

/* A kept block, uninitialised (caller owns it: tpu__spare_put or free),
 * or NULL when none is kept (the caller mallocs). */
void *tpu__spare_get(tpu_spares *s);
/* Keep p (a malloc'd block of the set's size; ownership passes) for a
 * later get, or free it when every slot is full. p may be NULL. */
void tpu__spare_put(tpu_spares *s, void *p);

#endif

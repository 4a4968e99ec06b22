/* pool.c - kernel thread pool. PLACEHOLDER (serial) until the runtime-core
 * work replaces it with the real pool. */
#include "tpu_rt.h"

void tpurt_parallel_for(int64_t n, int64_t grain, tpurt_range_fn fn, void *ctx) {
  (void)grain;
  if (n > 0) fn(ctx, 0, n);
}
int tpurt_num_threads(void) { return 1; }
void tpurt_set_num_threads(int n) { (void)n; }

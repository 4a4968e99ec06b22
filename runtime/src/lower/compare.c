/* lower/compare.c - whole-tensor comparisons that return a Python value:
 * torch.equal. The result is a rank-0 tensor; the glue reads it back
 * (like .item()) for schemas that return bool. */
#include "lower/internal.h"

/* equal(self, other) -> bool: same shape and all elements equal after type
 * promotion (NaN != NaN, like CPU). */
static int equal_fn(tpulw__b *b) {
  const tpulw_tensor *x = tpulw__tensor_arg(b, "self"), *y = tpulw__tensor_arg(b, "other");
  if (!x || !y) return tpu_error(TPU_E_UNSUPPORTED, "equal: undefined tensor");
  int same = x->view.ndim == y->view.ndim;
  for (int i = 0; same && i < x->view.ndim; i++)
    same = x->view.sizes[i] == y->view.sizes[i];
  if (!same) return tpulw__result(b, tpulw__const(b, TPU_BOOL, 0));
  int dt = tpulw__promote(x->view.dtype, y->view.dtype);
  tpuir_val vx = tpulw__convert(b, tpulw__tensor(b, x), dt);
  tpuir_val vy = tpulw__convert(b, tpulw__tensor(b, y), dt);
  tpuir_val eq = tpulw__bin(b, TPUIR_EQ, vx, vy);
  int64_t dims[TPU_MAX_DIMS];
  for (int i = 0; i < x->view.ndim; i++) dims[i] = i;
  return tpulw__result(b, tpuir_reduce(b->g, TPUIR_RED_AND, eq, x->view.ndim, dims));
}

const tpulw__row tpulw__rows_compare[] = {
    {"equal", equal_fn, 0},
};
const int tpulw__nrows_compare = sizeof tpulw__rows_compare / sizeof tpulw__rows_compare[0];

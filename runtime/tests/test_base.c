#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "base/internal.h"
#include "tpu_base.h"
#include "tpu_test.h"

TPU_TEST(base_errors) {
  CHECK(tpu_error(TPU_E_INDEX, "index %d out of range", 7) == TPU_E_INDEX);
  CHECK(strcmp(tpu_last_error(), "index 7 out of range") == 0);
  CHECK(tpu_last_error_code() == TPU_E_INDEX);
  tpu_clear_error();
  CHECK(tpu_last_error()[0] == 0);
}

TPU_TEST(base_bf16_rounding) {
  CHECK(tpu_bf16_to_f32(tpu_f32_to_bf16(1.0f)) == 1.0f);
  /* 1 + 2^-8 is exactly halfway between bf16 1.0 and 1+2^-7: ties to even */
  CHECK(tpu_bf16_to_f32(tpu_f32_to_bf16(1.0f + 0x1p-8f)) == 1.0f);
  CHECK(tpu_bf16_to_f32(tpu_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-12f)) == 1.0f + 0x1p-7f);
  CHECK(isnan(tpu_bf16_to_f32(tpu_f32_to_bf16(NAN))));
  CHECK(tpu_f16_to_f32(tpu_f32_to_f16(65504.0f)) == 65504.0f);
}

TPU_TEST(base_views) {
  tpu_view v;
  int64_t sizes[3] = {2, 3, 4};
  tpu_view_init_contiguous(&v, NULL, TPU_F32, 3, sizes);
  CHECK(v.strides[0] == 12 && v.strides[1] == 4 && v.strides[2] == 1);
  CHECK(tpu_view_numel(&v) == 24);
  CHECK(tpu_view_is_contiguous(&v));
  v.strides[2] = 2;
  CHECK(!tpu_view_is_contiguous(&v));
  CHECK(tpu_dtype_size(TPU_BF16) == 2 && strcmp(tpu_dtype_name(TPU_I64), "int64") == 0);
}

/* Spare blocks: a put block comes back from the next get, at most
 * TPU_SPARES are kept (the rest are freed: ASan's leak check sees any
 * lost), and threads getting and putting at once never share a block. */
static tpu_spares t_spares;

static void *spare_worker(void *arg) {
  long id = (long)arg, bad = 0;
  for (int i = 0; i < 20000; i++) {
    long *b = tpu__spare_get(&t_spares);
    if (!b) b = malloc(64);
    if (!b) return (void *)1;
    b[0] = id, b[1] = i;
    if (i % 64 == 0) sched_yield();
    bad |= b[0] != id || b[1] != i; /* another thread wrote into it */
    tpu__spare_put(&t_spares, b);
  }
  return (void *)bad;
}

TPU_TEST(base_spare_blocks) {
  CHECK(tpu__spare_get(&t_spares) == NULL);
  tpu__spare_put(&t_spares, NULL); /* no-op */
  void *a = malloc(64), *b = malloc(64);
  tpu__spare_put(&t_spares, a);
  CHECK(tpu__spare_get(&t_spares) == a);
  CHECK(tpu__spare_get(&t_spares) == NULL);
  tpu__spare_put(&t_spares, a);
  tpu__spare_put(&t_spares, b);
  void *x = tpu__spare_get(&t_spares), *y = tpu__spare_get(&t_spares);
  CHECK(x != y && (x == a || x == b) && (y == a || y == b));
  CHECK(tpu__spare_get(&t_spares) == NULL);
  free(x);
  free(y);
  for (int i = 0; i < TPU_SPARES + 3; i++) tpu__spare_put(&t_spares, malloc(64));
  int kept = 0;
  for (void *p; (p = tpu__spare_get(&t_spares)); kept++) free(p);
  CHECK(kept == TPU_SPARES);
  pthread_t th[4];
  for (long k = 0; k < 4; k++) CHECK(pthread_create(&th[k], NULL, spare_worker, (void *)k) == 0);
  for (int k = 0; k < 4; k++) {
    void *r = (void *)1;
    pthread_join(th[k], &r);
    CHECK(r == NULL);
  }
  for (void *p; (p = tpu__spare_get(&t_spares));) free(p);
}

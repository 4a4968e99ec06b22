#include <string.h>

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

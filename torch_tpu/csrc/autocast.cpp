// autocast.cpp - torch.autocast("tpu") policy: matmul-class ops run in the
// autocast dtype (bf16 by default), precision-sensitive ops in fp32; every
// other op passes through. Mirrors PyTorch's CUDA lists.
#include <ATen/autocast_mode.h>
#include <torch/library.h>

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  // lower_precision_fp
  KERNEL_PRIVATEUSEONE(mm, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(bmm, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(addmm, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(baddbmm, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(addbmm, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(matmul, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(linear, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(conv1d, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(conv2d, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(conv3d, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(_convolution, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(scaled_dot_product_attention, lower_precision_fp)
  // fp32
  KERNEL_PRIVATEUSEONE(acos, fp32)
  KERNEL_PRIVATEUSEONE(asin, fp32)
  KERNEL_PRIVATEUSEONE(cosh, fp32)
  KERNEL_PRIVATEUSEONE(erfinv, fp32)
  KERNEL_PRIVATEUSEONE(exp, fp32)
  KERNEL_PRIVATEUSEONE(expm1, fp32)
  KERNEL_PRIVATEUSEONE(log, fp32)
  KERNEL_PRIVATEUSEONE(log10, fp32)
  KERNEL_PRIVATEUSEONE(log2, fp32)
  KERNEL_PRIVATEUSEONE(log1p, fp32)
  KERNEL_PRIVATEUSEONE(reciprocal, fp32)
  KERNEL_PRIVATEUSEONE(rsqrt, fp32)
  KERNEL_PRIVATEUSEONE(sinh, fp32)
  KERNEL_PRIVATEUSEONE(tan, fp32)
  KERNEL_PRIVATEUSEONE(pow, Tensor_Scalar, fp32)
  KERNEL_PRIVATEUSEONE(pow, Tensor_Tensor, fp32)
  KERNEL_PRIVATEUSEONE(pow, Scalar, fp32)
  KERNEL_PRIVATEUSEONE(softplus, fp32)
  KERNEL_PRIVATEUSEONE(layer_norm, fp32)
  KERNEL_PRIVATEUSEONE(group_norm, fp32)
  KERNEL_PRIVATEUSEONE(cosine_similarity, fp32)
  KERNEL_PRIVATEUSEONE(nll_loss, fp32)
  KERNEL_PRIVATEUSEONE(l1_loss, fp32)
  KERNEL_PRIVATEUSEONE(smooth_l1_loss, fp32)
  KERNEL_PRIVATEUSEONE(mse_loss, fp32)
  KERNEL_PRIVATEUSEONE(binary_cross_entropy_with_logits, fp32)
  KERNEL_PRIVATEUSEONE(logsumexp, fp32)
  // promote
  KERNEL_PRIVATEUSEONE(cat, promote)
  KERNEL_PRIVATEUSEONE(stack, promote)
  KERNEL_PRIVATEUSEONE(index_copy, promote)
}

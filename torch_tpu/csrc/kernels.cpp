// kernels.cpp - ATen registrations for the tpu device:
//  * explicit metadata/memory kernels a fallback cannot provide (empty,
//    views, resize_, set_, copies, _local_scalar_dense);
//  * ONE boxed kernel for every other op: marshal the IValue stack into C
//    descriptors and hand it to the runtime's lowering table (runtime/src/
//    lower*.c), which builds IR and runs it on the vTPU; the commonest
//    signatures enter it unboxed (unboxed_for), their tensors lent;
//  * the explicit, counted CPU fallback for ops without a native lowering.
#include "glue.h"
#include "tpu_exec.h"

#include <ATen/EmptyTensor.h>
#include <ATen/ExpandUtils.h>
#include <ATen/InferSize.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/TensorUtils.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/SDPBackend.h>
#include <ATen/native/transformers/attention.h>
#include <c10/util/SmallVector.h>
#include <ATen/ops/_conj_physical.h>
#include <ATen/ops/_neg_view.h>
#include <ATen/ops/neg.h>
#include <torch/library.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <numeric>
#include <mutex>

namespace torch_tpu {
namespace {

using c10::DeviceIndex;

// ---- views (metadata only) ---------------------------------------------------
void check_in_bounds(const at::Tensor& self, c10::IntArrayRef sizes,
                     c10::IntArrayRef strides, int64_t offset) {
  TORCH_CHECK(offset >= 0, "Tensor: invalid storage offset ", offset);
  for (size_t i = 0; i < sizes.size(); i++) {
    TORCH_CHECK(sizes[i] >= 0, "Trying to create tensor with negative dimension ", sizes[i]);
    TORCH_CHECK(strides[i] >= 0, "as_strided: Negative strides are not supported at the moment, got strides: ", strides);
  }
  size_t need = at::detail::computeStorageNbytes(sizes, strides, self.dtype().itemsize(), offset);
  TORCH_CHECK(need <= self.storage().nbytes(), "setStorage: sizes ", sizes, ", strides ", strides,
              ", storage offset ", offset, ", and itemsize ", self.dtype().itemsize(),
              " requiring a storage size of ", need,
              " are out of bounds for storage of size ", self.storage().nbytes());
}

at::Tensor alias_as(const at::Tensor& self, c10::IntArrayRef sizes,
                    c10::IntArrayRef strides, int64_t offset) {
  TORCH_CHECK(sizes.size() == strides.size(), "mismatch in length of strides and shape");
  check_in_bounds(self, sizes, strides, offset);
  auto impl = c10::make_intrusive<c10::TensorImpl>(
      c10::TensorImpl::VIEW, c10::Storage(self.storage()), self.key_set(), self.dtype());
  impl->set_sizes_and_strides(sizes, strides, offset);
  return at::Tensor(std::move(impl));
}

at::Tensor as_strided(const at::Tensor& self, c10::SymIntArrayRef size,
                      c10::SymIntArrayRef stride, std::optional<c10::SymInt> offset) {
  int64_t off = offset ? offset->guard_int(__FILE__, __LINE__) : self.storage_offset();
  return alias_as(self, C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride), off);
}

at::Tensor view(const at::Tensor& self, c10::SymIntArrayRef size) {
  at::DimVector shape = at::infer_size_dv(C10_AS_INTARRAYREF_SLOW(size), self.numel());
  auto stride = at::detail::computeStride(self.sizes(), self.strides(), shape);
  TORCH_CHECK(stride.has_value(),
              "view size is not compatible with input tensor's size and stride (at "
              "least one dimension spans across two contiguous subspaces). Use "
              ".reshape(...) instead.");
  return alias_as(self, shape, *stride, self.storage_offset());
}

at::Tensor reshape_alias(const at::Tensor& self, c10::SymIntArrayRef size,
                         c10::SymIntArrayRef stride) {
  return alias_as(self, C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride),
                  self.storage_offset());
}

at::Tensor unfold(const at::Tensor& self, int64_t dim, int64_t size, int64_t step) {
  int64_t nd = std::max<int64_t>(self.dim(), 1);
  dim = c10::maybe_wrap_dim(dim, nd);
  int64_t max_size = self.dim() == 0 ? 1 : self.size(dim);
  TORCH_CHECK(size <= max_size, "maximum size for tensor at dimension ", dim, " is ",
              max_size, " but size is ", size);
  TORCH_CHECK(step > 0, "step is ", step, " but must be > 0");
  std::vector<int64_t> sizes(self.sizes().begin(), self.sizes().end());
  std::vector<int64_t> strides(self.strides().begin(), self.strides().end());
  int64_t st = self.dim() == 0 ? 1 : self.stride(dim);
  if (self.dim() > 0) {
    sizes[dim] = (sizes[dim] - size) / step + 1;
    strides[dim] = step * st;
  }
  sizes.push_back(size);
  strides.push_back(st);
  return alias_as(self, sizes, strides, self.storage_offset());
}

// view_as_real / view_as_complex: aliases of the same storage with the
// other dtype (PyTorch registers them per backend, CPU and CUDA only).
at::Tensor view_as_real(const at::Tensor& self) {
  TORCH_CHECK(self.is_complex(), "view_as_real is only supported for complex tensors");
  TORCH_CHECK(!self.is_conj(), "view_as_real doesn't work on unresolved conjugated tensors.  "
              "To resolve the conjugate tensor so you can view it as real, use self.resolve_conj()");
  std::vector<int64_t> sizes(self.sizes().begin(), self.sizes().end());
  std::vector<int64_t> strides;
  for (int64_t st : self.strides()) strides.push_back(st * 2);
  sizes.push_back(2);
  strides.push_back(1);
  auto impl = c10::make_intrusive<c10::TensorImpl>(
      c10::TensorImpl::VIEW, c10::Storage(self.storage()), self.key_set(),
      c10::scalarTypeToTypeMeta(c10::toRealValueType(self.scalar_type())));
  impl->set_sizes_and_strides(sizes, strides, self.storage_offset() * 2);
  return at::Tensor(std::move(impl));
}

at::Tensor view_as_complex(const at::Tensor& self) {
  auto st = self.scalar_type();
  TORCH_CHECK(st == c10::kFloat || st == c10::kDouble || st == c10::kHalf,
              "view_as_complex is only supported for float and double tensors, but got a "
              "tensor of scalar type: ", st);
  TORCH_CHECK_NOT_IMPLEMENTED(st != c10::kHalf, "torch_tpu: complex32 (chalf) is not supported");
  TORCH_CHECK(self.dim() != 0, "Input tensor must have one or more dimensions");
  TORCH_CHECK(self.size(-1) == 2, "Tensor must have a last dimension of size 2");
  TORCH_CHECK(self.stride(-1) == 1, "Tensor must have a last dimension with stride 1");
  std::vector<int64_t> sizes(self.sizes().begin(), self.sizes().end() - 1);
  std::vector<int64_t> strides;
  for (int64_t i = 0; i + 1 < self.dim(); i++) {
    TORCH_CHECK(self.stride(i) % 2 == 0, "Tensor must have a stride divisible by 2 for all "
                "but last dimension");
    strides.push_back(self.stride(i) / 2);
  }
  TORCH_CHECK(self.storage_offset() % 2 == 0, "Tensor must have a storage_offset divisible by 2");
  auto impl = c10::make_intrusive<c10::TensorImpl>(
      c10::TensorImpl::VIEW, c10::Storage(self.storage()), self.key_set(),
      c10::scalarTypeToTypeMeta(c10::toComplexType(st)));
  impl->set_sizes_and_strides(sizes, strides, self.storage_offset() / 2);
  return at::Tensor(std::move(impl));
}

// ---- storage growth / resize ---------------------------------------------------
void copy_bytes(DeviceIndex d, void* dst, const void* src, int64_t nbytes) {
  tpu_view dv, sv;
  tpu_view_init_contiguous(&dv, dst, TPU_U8, 1, &nbytes);
  tpu_view_init_contiguous(&sv, const_cast<void*>(src), TPU_U8, 1, &nbytes);
  check(tpug_copy_d2d(current_stream(d), &dv, &sv));
}

void grow_storage(const at::Tensor& self, size_t need_bytes) {
  c10::Storage storage = self.storage();
  if (need_bytes <= storage.nbytes()) return;
  TORCH_CHECK(storage.resizable(), "Trying to resize storage that is not resizable");
  DeviceIndex d = self.device().index();
  c10::DeviceGuard g(self.device());
  c10::DataPtr fresh = allocator()->allocate(need_bytes);
  if (storage.nbytes() > 0 && storage.data())
    copy_bytes(d, fresh.get(), storage.data(), static_cast<int64_t>(storage.nbytes()));
  storage.set_data_ptr_noswap(std::move(fresh));
  storage.set_nbytes(need_bytes);
}

}  // namespace

void resize_storage_bytes(const c10::Storage& storage, size_t newsize) {
  TORCH_CHECK(storage.resizable(), "Trying to resize storage that is not resizable");
  DeviceIndex d = storage.device().index();
  c10::DeviceGuard g(storage.device());
  c10::DataPtr fresh = allocator()->allocate(newsize);
  size_t keep = std::min(storage.nbytes(), newsize);
  if (keep > 0 && storage.data())
    copy_bytes(d, fresh.get(), storage.data(), static_cast<int64_t>(keep));
  // the old block returns to the caching allocator; work queued on it is
  // ordered before any later reuse by the stream
  const_cast<c10::Storage&>(storage).set_data_ptr_noswap(std::move(fresh));
  const_cast<c10::Storage&>(storage).set_nbytes(newsize);
}

namespace {

void resize_impl(const at::Tensor& self, c10::IntArrayRef sizes,
                 std::optional<c10::MemoryFormat> mf) {
  auto* impl = self.unsafeGetTensorImpl();
  impl->set_sizes_contiguous(sizes);
  if (mf && *mf != c10::MemoryFormat::Preserve && *mf != c10::MemoryFormat::Contiguous)
    impl->empty_tensor_restride(*mf);
  int64_t numel = impl->numel();
  if (numel > 0)
    grow_storage(self, (impl->storage_offset() + numel) * self.dtype().itemsize());
}

const at::Tensor& resize_(const at::Tensor& self, c10::SymIntArrayRef size,
                          std::optional<c10::MemoryFormat> mf) {
  resize_impl(self, C10_AS_INTARRAYREF_SLOW(size), mf);
  return self;
}

// ---- allocation ---------------------------------------------------------------------
at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout>, std::optional<c10::Device> device,
                               std::optional<bool>, std::optional<c10::MemoryFormat> mf) {
  DeviceIndex d = device && device->has_index() ? device->index() : current_device();
  c10::DeviceGuard g(c10::Device(c10::DeviceType::PrivateUse1, d));
  return at::detail::empty_generic(size, allocator(),
                                   c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                   c10::dtype_or_default(dtype), mf);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<c10::ScalarType> dtype, std::optional<c10::Layout>,
                         std::optional<c10::Device> device, std::optional<bool>) {
  DeviceIndex d = device && device->has_index() ? device->index() : current_device();
  c10::DeviceGuard g(c10::Device(c10::DeviceType::PrivateUse1, d));
  return at::detail::empty_strided_generic(size, stride, allocator(),
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                           c10::dtype_or_default(dtype));
}

// ---- set_ ----------------------------------------------------------------------------
at::Tensor& set_storage_offset(at::Tensor& self, c10::Storage storage, int64_t offset,
                               c10::IntArrayRef size, c10::IntArrayRef stride) {
  TORCH_CHECK(!storage.data_ptr() || storage.device().type() == c10::DeviceType::PrivateUse1,
              "Attempted to set the storage of a tpu tensor to a storage on ", storage.device());
  auto* impl = self.unsafeGetTensorImpl();
  impl->set_storage_keep_dtype(std::move(storage));
  if (stride.empty()) {  // contiguous
    impl->set_sizes_contiguous(size);
    impl->set_storage_offset(offset);
  } else {
    impl->set_sizes_and_strides(size, stride, offset);
  }
  grow_storage(self, at::detail::computeStorageNbytes(impl->sizes(), impl->strides(),
                                                      self.dtype().itemsize(), offset));
  return self;
}

at::Tensor& set_source_storage(at::Tensor& self, c10::Storage source) {
  int64_t n = static_cast<int64_t>(source.nbytes() / self.dtype().itemsize());
  return set_storage_offset(self, std::move(source), 0, {n}, {});
}

at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& src) {
  if (self.is_same(src)) return self;
  return set_storage_offset(self, src.storage(), src.storage_offset(), src.sizes(), src.strides());
}

at::Tensor& set_empty(at::Tensor& self) {
  c10::Storage st(c10::Storage::use_byte_size_t(), 0, allocator(), true);
  return set_storage_offset(self, std::move(st), 0, {0}, {});
}

// ---- copies ----------------------------------------------------------------------------
at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  at::assert_no_internal_overlap(dst);  // as CPU's copy_ (expand views)
  copy_between(self, dst, non_blocking);
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (!dst.sizes().equals(self.sizes())) resize_impl(dst, self.sizes(), std::nullopt);
  copy_between(self, dst);
  return dst;
}

c10::Scalar local_scalar_dense(const at::Tensor& self) {
  TORCH_CHECK(self.numel() == 1, "a Tensor with ", self.numel(),
              " elements cannot be converted to Scalar");
  alignas(16) unsigned char buf[16] = {};
  tpu_view src = make_view(self), dst;
  tpu_view_init_contiguous(&dst, buf, src.dtype, 0, nullptr);
  src.ndim = 0;  // numel == 1: the element at the offset
  check(tpug_copy_d2h(current_stream(self.device().index()), &dst, &src));
  switch (src.dtype) {
    case TPU_BOOL: return c10::Scalar(buf[0] != 0);
    case TPU_U8: return c10::Scalar(static_cast<int64_t>(buf[0]));
    case TPU_I8: return c10::Scalar(static_cast<int64_t>(*reinterpret_cast<int8_t*>(buf)));
    case TPU_I16: return c10::Scalar(static_cast<int64_t>(*reinterpret_cast<int16_t*>(buf)));
    case TPU_I32: return c10::Scalar(static_cast<int64_t>(*reinterpret_cast<int32_t*>(buf)));
    case TPU_I64: return c10::Scalar(*reinterpret_cast<int64_t*>(buf));
    case TPU_F16: return c10::Scalar(c10::Half(*reinterpret_cast<uint16_t*>(buf), c10::Half::from_bits()));
    case TPU_BF16: return c10::Scalar(c10::BFloat16(*reinterpret_cast<uint16_t*>(buf), c10::BFloat16::from_bits()));
    case TPU_F32: return c10::Scalar(static_cast<double>(*reinterpret_cast<float*>(buf)));
    case TPU_C64: {
      float f[2];
      std::memcpy(f, buf, sizeof f);
      return c10::Scalar(c10::complex<float>(f[0], f[1]));
    }
    case TPU_C128: {
      double f[2];
      std::memcpy(f, buf, sizeof f);
      return c10::Scalar(c10::complex<double>(f[0], f[1]));
    }
    default: return c10::Scalar(*reinterpret_cast<double*>(buf));
  }
}

// Parameters keep their identity (and weight ties) across Module.to("tpu"):
// like CPU<->CUDA, dense CPU and tpu tensors can swap their impls
// (param.data = moved), which TensorImpl only allows for built-in backends.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  auto dense = [](const at::Tensor& t) {
    return t.layout() == c10::kStrided &&
           (t.device().is_cpu() || t.device().type() == c10::DeviceType::PrivateUse1);
  };
  return self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set()) ||
         (dense(self) && dense(from));
}

// scaled_dot_product_attention picks its backend per device
// (_fused_sdp_choice_stub, registered for PrivateUse1 below). On the vTPU
// it is the fused kernel (torch's "overrideable" backend: one attention node
// per call, the scores never stored whole, lse kept for the backward) for
// the calls that kernel takes: 4-D query/key/value with the same batch and
// heads, no dropout, a mask that needs no gradient (not with is_causal: the
// math path raises CPU's error), static shapes, unless the user disabled
// the backend (torch.nn.attention.sdpa_kernel). Otherwise, and on PJRT
// (where XLA fuses the math path itself), the math path decomposes into
// native ops.
int64_t fused_sdp_choice(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const std::optional<at::Tensor>& mask, double dropout_p, bool is_causal,
                         std::optional<double>, bool) {
  const int64_t math = static_cast<int64_t>(at::SDPBackend::math);
  const tpux_executor* ex = tpux_executor_active();
  if (!ex || std::strcmp(ex->name, "vtpu") != 0) return math;
  if (!at::globalContext().userEnabledOverrideableSDP() || dropout_p != 0.0) return math;
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4 || q.is_nested()) return math;
  // torch.compile with dynamic shapes: reading symbolic sizes here would
  // specialize them (the math path keeps them symbolic)
  for (const at::Tensor* t : {&q, &k, &v})
    if (t->unsafeGetTensorImpl()->has_symbolic_sizes_strides()) return math;
  auto st = q.scalar_type();
  if ((st != at::kFloat && st != at::kBFloat16 && st != at::kHalf) || k.scalar_type() != st ||
      v.scalar_type() != st)
    return math;
  if (k.size(0) != q.size(0) || v.size(0) != q.size(0) || k.size(1) != q.size(1) ||
      v.size(1) != q.size(1) || k.size(3) != q.size(3) || v.size(2) != k.size(2))
    return math;
  if (mask && mask->defined() && (is_causal || mask->requires_grad())) return math;
  return static_cast<int64_t>(at::SDPBackend::overrideable);
}

// torch's meta functions of the overrideable backend (what torch.compile
// traces against) give its results their inputs' layouts: the output
// query's dim order (alloc_with_matching_layout of _meta_registrations.py,
// which puts stride-0 dims innermost; ATen's copy in sdp_utils.h puts them
// outermost, so it is not used here), each gradient its input's
// (empty_like). r in the layout of `like` (sizes `shape`): as it
// is, or copied into it.
at::Tensor in_layout_of(const at::Tensor& r, const at::Tensor& like, at::IntArrayRef shape) {
  std::vector<int64_t> st;
  if (shape != like.sizes()) {
    std::vector<int64_t> order(like.dim());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return like.stride(a) > like.stride(b); });
    st.assign(like.dim(), 0);
    int64_t stride = 1;
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      st[*it] = stride;
      stride *= shape[*it];
    }
  } else if (like.is_non_overlapping_and_dense()) {
    st = like.strides().vec();
  } else {
    st = at::infer_dense_strides(like.sizes(), like.strides());
  }
  if (r.strides() == at::IntArrayRef(st)) return r;
  at::Tensor t = empty_strided(shape, st, r.scalar_type(), std::nullopt, r.device(), std::nullopt);
  t.copy_(r);
  return t;
}

// The overrideable backend's forward and backward call the native
// torch_tpu::sdpa_fwd / sdpa_bwd (lower/attention.c); of the extra results
// of the backend's schema, the sequence offsets and debug mask are
// undefined, max_q / max_k the sequence lengths, and the RNG seed and
// offset (no dropout here) empty 0-dim int64 tensors, as the meta function
// has them (torch.compile saves them for the backward and checks that they
// are tensors; on the device, so a captured program has no host output).
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt, c10::SymInt, at::Tensor,
           at::Tensor, at::Tensor>
sdpa_overrideable(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                  const std::optional<at::Tensor>& bias, double dropout_p, bool is_causal,
                  bool return_debug_mask, std::optional<double> scale) {
  TORCH_CHECK_NOT_IMPLEMENTED(dropout_p == 0.0 && !return_debug_mask,
                              "torch_tpu: the fused attention kernel takes no dropout and returns "
                              "no debug mask (scaled_dot_product_attention uses the math path "
                              "for dropout_p > 0)");
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("torch_tpu::sdpa_fwd", "")
                       .typed<std::tuple<at::Tensor, at::Tensor>(
                           const at::Tensor&, const at::Tensor&, const at::Tensor&,
                           const std::optional<at::Tensor>&, bool, std::optional<double>)>();
  auto [out, lse] = op.call(q, k, v, bias, is_causal, scale);
  auto rng = q.options().dtype(at::kLong);
  return {in_layout_of(out, q, out.sizes()), lse, at::Tensor(), at::Tensor(),
          c10::SymInt(q.size(2)), c10::SymInt(k.size(2)), at::empty({}, rng), at::empty({}, rng),
          at::Tensor()};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> sdpa_overrideable_backward(
    const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor& bias, std::array<bool, 4> grad_input_mask, const at::Tensor& out,
    const at::Tensor& lse, const at::Tensor&, const at::Tensor&, c10::SymInt, c10::SymInt,
    double dropout_p, bool is_causal, const at::Tensor&, const at::Tensor&,
    std::optional<double> scale) {
  TORCH_CHECK_NOT_IMPLEMENTED(dropout_p == 0.0 && !(grad_input_mask[3] && bias.defined()),
                              "torch_tpu: the fused attention kernel computes no gradient of "
                              "attn_mask and takes no dropout");
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("torch_tpu::sdpa_bwd", "")
                       .typed<std::tuple<at::Tensor, at::Tensor, at::Tensor>(
                           const at::Tensor&, const at::Tensor&, const at::Tensor&,
                           const at::Tensor&, const at::Tensor&, const at::Tensor&,
                           const std::optional<at::Tensor>&, bool, std::optional<double>)>();
  std::optional<at::Tensor> b;
  if (bias.defined()) b = bias;
  auto [dq, dk, dv] = op.call(grad_out, q, k, v, out, lse, b, is_causal, scale);
  return {in_layout_of(dq, q, q.sizes()), in_layout_of(dk, k, k.sizes()),
          in_layout_of(dv, v, v.sizes()), at::Tensor()};
}

// ---- CPU fallback (explicit and counted) -----------------------------------------------
std::mutex g_fallback_mu;
std::map<std::string, int64_t> g_fallback_counts;

std::string op_full_name(const c10::OperatorHandle& op) {
  const auto& n = op.schema().operator_name();
  return n.overload_name.empty() ? n.name : n.name + "." + n.overload_name;
}

void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                  const std::string& why) {
  std::string name = op_full_name(op);
  TORCH_CHECK_NOT_IMPLEMENTED(
      g_fallback_enabled.load(), "torch_tpu: ", name,
      " has no native tpu implementation", why.empty() ? "" : " (" + why + ")",
      " and the CPU fallback is disabled (enable it with "
      "torch_tpu.execution_mode.cpu_fallback_mode(True) or TORCH_TPU_CPU_FALLBACK=1)");
  bool first;
  {
    std::lock_guard<std::mutex> lock(g_fallback_mu);
    first = g_fallback_counts[name]++ == 0;
  }
  if (first)
    TORCH_WARN("torch_tpu: ", name, " is not natively supported on tpu",
               why.empty() ? "" : " (" + why + ")",
               "; running it on the CPU (slow; counted as unsupported)");
  at::native::cpu_fallback(op, stack);
}

// ---- the native path: marshal -> tpulw_prepare -> allocate -> tpulw_launch -----------
// The arguments of one call in the runtime's form. args point into ints,
// floats and lists: their elements' buffers stay put when the outer
// vectors grow.
struct Marshal {
  std::vector<tpulw_arg> args;
  std::vector<std::vector<int64_t>> ints;
  std::vector<std::vector<double>> floats;
  std::vector<std::vector<tpulw_tensor>> lists;
  std::vector<at::Generator> gens;
  std::vector<int> gen_args;
  int device = -1;
  bool cpu_indices_ok = false;  // index ops accept CPU index tensors (as CUDA does)
  std::vector<at::Tensor> keep;  // device copies of such indices
  std::string why;  // reason for a CPU fallback
};

// A Marshal for this call, reused by later calls on the thread (its
// vectors keep their capacity: no allocation per op); one per nesting
// level, since marshalling may dispatch another op (index copies).
class MarshalLease {
 public:
  MarshalLease() {
    if (depth_ == pool_.size()) pool_.push_back(std::make_unique<Marshal>());
    m_ = pool_[depth_++].get();
    m_->args.clear();
    m_->ints.clear();
    m_->floats.clear();
    m_->lists.clear();
    m_->gen_args.clear();
    m_->device = -1;
    m_->cpu_indices_ok = false;
    m_->why.clear();
  }
  ~MarshalLease() {  // drop the references now, not at the thread's next op
    m_->gens.clear();
    m_->keep.clear();
    depth_--;
  }
  MarshalLease(const MarshalLease&) = delete;
  MarshalLease& operator=(const MarshalLease&) = delete;
  Marshal& get() { return *m_; }

 private:
  Marshal* m_;
  static thread_local std::vector<std::unique_ptr<Marshal>> pool_;
  static thread_local size_t depth_;
};
thread_local std::vector<std::unique_ptr<Marshal>> MarshalLease::pool_;
thread_local size_t MarshalLease::depth_ = 0;

[[noreturn]] void device_mismatch(int a, const c10::Device& b) {
  TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least "
              "two devices, tpu:", a, " and ", b, "!");
}

// The value of a 0-dim CPU tensor argument. A wrapped Python number (the
// 1.0 of x + 1.0: always a plain double, int64 or bool CPU tensor) is read
// in place; item() is a dispatched op, ~600 instructions of each such call.
c10::Scalar cpu_scalar(const at::Tensor& t) {
  if (t.unsafeGetTensorImpl()->is_wrapped_number()) {
    const void* p = t.const_data_ptr();
    switch (t.scalar_type()) {
      case c10::ScalarType::Double: return c10::Scalar(*static_cast<const double*>(p));
      case c10::ScalarType::Long: return c10::Scalar(*static_cast<const int64_t*>(p));
      case c10::ScalarType::Bool: return c10::Scalar(*static_cast<const bool*>(p));
      default: break;
    }
  }
  return t.item();
}

bool fill_tensor(Marshal& m, const at::Tensor& t, tpulw_tensor& out) {
  std::memset(&out, 0, sizeof out);
  if (!t.defined()) return true;
  out.defined = 1;
  out.wrapped_number = t.unsafeGetTensorImpl()->is_wrapped_number();
  int dt = to_tpu_dtype(t.scalar_type());
  if (dt < 0) {
    m.why = std::string("dtype ") + c10::toString(t.scalar_type());
    return false;
  }
  if (t.device().is_cpu()) {
    if (t.dim() != 0 && m.cpu_indices_ok && m.device >= 0 &&
        (at::isIntegralType(t.scalar_type(), /*includeBool=*/true))) {
      m.keep.push_back(t.to(c10::Device(c10::DeviceType::PrivateUse1, m.device)));
      return fill_tensor(m, m.keep.back(), out);
    }
    if (t.dim() != 0) {
      if (m.device >= 0) device_mismatch(m.device, t.device());
      m.why = "non-scalar CPU tensor argument";
      return false;
    }
    c10::Scalar s = cpu_scalar(t);
    out.device = -1;
    out.view.dtype = dt;
    if (s.isComplex()) {
      c10::complex<double> z = s.toComplexDouble();
      out.cpu_f = z.real();
      out.cpu_im = z.imag();
      out.cpu_i = static_cast<int64_t>(out.cpu_f);
      return true;
    }
    out.cpu_f = s.toDouble();
    out.cpu_i = s.isFloatingPoint() ? static_cast<int64_t>(out.cpu_f) : s.toLong();
    return true;
  }
  if (t.device().type() != c10::DeviceType::PrivateUse1) {
    m.why = "tensor on another device";
    return false;
  }
  int d = t.device().index();
  if (m.device >= 0 && m.device != d) device_mismatch(m.device, t.device());
  m.device = d;
  out.view = make_view(t);
  out.device = d;
  return true;
}

std::vector<int64_t> to_ints(const c10::IValue& v) {
  if (v.isIntList()) return v.toIntVector();
  std::vector<int64_t> out;
  if (v.isBoolList()) {
    for (bool b : v.toBoolList()) out.push_back(b);
    return out;
  }
  for (const auto& e : v.toListRef())
    out.push_back(e.isSymInt() ? e.toSymInt().guard_int(__FILE__, __LINE__) : e.toInt());
  return out;
}

// Fill m.args from the stack; false -> CPU fallback (m.why says why).
bool marshal(Marshal& m, const c10::FunctionSchema& schema, torch::jit::Stack* stack) {
  const auto& sargs = schema.arguments();
  size_t n = sargs.size();
  auto ivs = torch::jit::last(*stack, n);
  m.args.resize(n);
  for (size_t i = 0; i < n; i++) {
    const c10::IValue& iv = ivs[i];
    tpulw_arg& a = m.args[i];
    std::memset(&a, 0, sizeof a);
    a.name = sargs[i].name().c_str();
    a.is_output = sargs[i].alias_info() && sargs[i].alias_info()->isWrite();
    if (iv.isNone()) {
      a.kind = TPULW_NONE;
      continue;
    }
    // raw pointers into the schema (no reference count traffic per call)
    const c10::Type* ty = sargs[i].real_type().get();
    if (auto opt = ty->castRaw<c10::OptionalType>()) ty = opt->getElementType().get();
    switch (ty->kind()) {
      case c10::TypeKind::TensorType:
        a.kind = TPULW_TENSOR;
        if (!fill_tensor(m, iv.toTensor(), a.t)) return false;
        break;
      case c10::TypeKind::ListType: {
        const c10::Type* elem = ty->castRaw<c10::ListType>()->getElementType().get();
        if (auto opt = elem->castRaw<c10::OptionalType>()) elem = opt->getElementType().get();
        if (elem->kind() == c10::TypeKind::TensorType) {
          a.kind = TPULW_TENSORS;
          auto& lst = m.lists.emplace_back();
          for (const auto& e : iv.toListRef()) {
            lst.emplace_back();
            if (!e.isNone() && !fill_tensor(m, e.toTensor(), lst.back())) return false;
          }
          a.tensors = lst.data();
          a.n = static_cast<int32_t>(lst.size());
        } else if (elem->kind() == c10::TypeKind::FloatType) {
          a.kind = TPULW_FLOATS;
          auto& v = m.floats.emplace_back(iv.toDoubleVector());
          a.floats = v.data();
          a.n = static_cast<int32_t>(v.size());
        } else if (elem->kind() == c10::TypeKind::IntType ||
                   elem->kind() == c10::TypeKind::SymIntType ||
                   elem->kind() == c10::TypeKind::BoolType) {
          a.kind = TPULW_INTS;
          auto& v = m.ints.emplace_back(to_ints(iv));
          a.ints = v.data();
          a.n = static_cast<int32_t>(v.size());
        } else {
          m.why = "argument type " + ty->str();
          return false;
        }
        break;
      }
      case c10::TypeKind::IntType:
      case c10::TypeKind::SymIntType:
        a.kind = TPULW_INT;
        a.i = iv.isSymInt() ? iv.toSymInt().guard_int(__FILE__, __LINE__) : iv.toInt();
        break;
      case c10::TypeKind::FloatType:
        a.kind = TPULW_FLOAT;
        a.f = iv.toDouble();
        break;
      case c10::TypeKind::BoolType:
        a.kind = TPULW_BOOL;
        a.i = iv.toBool();
        break;
      case c10::TypeKind::NumberType: {  // Scalar
        c10::Scalar s = iv.toScalar();
        if (s.isBoolean()) {
          a.kind = TPULW_BOOL;
          a.i = s.toBool();
        } else if (s.isIntegral(false)) {
          a.kind = TPULW_INT;
          a.i = s.toLong();
          a.f = static_cast<double>(a.i);
        } else if (s.isFloatingPoint()) {
          a.kind = TPULW_FLOAT;
          a.f = s.toDouble();
        } else {
          c10::complex<double> z = s.toComplexDouble();
          a.kind = TPULW_COMPLEX;
          a.f = z.real();
          a.f_im = z.imag();
        }
        break;
      }
      case c10::TypeKind::StringType:
        a.kind = TPULW_STR;
        a.s = iv.toStringRef().c_str();
        break;
      case c10::TypeKind::ScalarTypeType: {
        int dt = to_tpu_dtype(static_cast<c10::ScalarType>(iv.toInt()));
        if (dt < 0) {
          m.why = std::string("dtype ") + c10::toString(static_cast<c10::ScalarType>(iv.toInt()));
          return false;
        }
        a.kind = TPULW_DTYPE;
        a.i = dt;
        break;
      }
      case c10::TypeKind::GeneratorType:
        a.kind = TPULW_GENERATOR;
        m.gens.push_back(iv.toGenerator());
        m.gen_args.push_back(static_cast<int>(i));
        break;
      case c10::TypeKind::LayoutType:
      case c10::TypeKind::DeviceObjType:
      case c10::TypeKind::MemoryFormatType:
        a.kind = TPULW_OTHER;
        if (ty->kind() == c10::TypeKind::DeviceObjType && m.device < 0 &&
            iv.toDevice().type() == c10::DeviceType::PrivateUse1 && iv.toDevice().has_index())
          m.device = iv.toDevice().index();
        break;
      default:
        m.why = "argument type " + ty->str();
        return false;
    }
  }
  if (m.device < 0) m.device = current_device();
  return true;
}

// Batched column-major strides of an output (tpulw_out_info.col_major).
std::vector<int64_t> col_major_strides(const tpulw_out_info& o) {
  std::vector<int64_t> st(o.ndim);
  int nd = o.ndim;
  st[nd - 2] = 1;
  st[nd - 1] = std::max<int64_t>(o.sizes[nd - 2], 1);
  int64_t m = std::max<int64_t>(o.sizes[nd - 2] * o.sizes[nd - 1], 1);
  for (int i = nd - 3; i >= 0; i--) {
    st[i] = m;
    m *= std::max<int64_t>(o.sizes[i], 1);
  }
  return st;
}

void warn_resize(const at::Tensor& t, const tpulw_out_info& o) {
  if (t.numel() != 0)
    TORCH_WARN("An output with one or more elements was resized since it had shape ",
               t.sizes(), ", which does not match the required output shape ",
               c10::IntArrayRef(o.sizes, o.ndim),
               ". This behavior is deprecated, and in a future PyTorch release outputs "
               "will not be resized unless they have zero elements. You can explicitly "
               "reuse an out tensor t by resizing it, inplace, to zero elements with "
               "t.resize_(0).");
}

// Value writers CPU lets write into expanded tensors (with a deprecation
// warning) instead of raising the internal-overlap error.
bool overlap_write_ok(const char* name, const char* overload) {
  if (std::strcmp(name, "fill_") == 0) return std::strcmp(overload, "Scalar") == 0;
  static const char* const ok[] = {"zero_", "masked_fill_", "index_fill_", "index_put_",
                                   "_index_put_impl_"};
  for (const char* n : ok)
    if (std::strcmp(name, n) == 0) return true;
  return false;
}

// What native_boxed needs to know of an operator, found once per schema
// and thread (no lock) instead of by name on every call.
struct OpInfo {
  bool aten = false, user_kernel = false;
  unsigned flags = 0;          // tpulw_op_flags
  bool check_overlap = false;  // writes an argument and CPU refuses overlapping writes
};

OpInfo op_info(const c10::FunctionSchema& schema) {
  struct Entry {
    const c10::FunctionSchema* schema = nullptr;
    std::string qual, overload;  // checked on a hit: a freed schema's address may be reused
    OpInfo info;
  };
  thread_local Entry cache[256];
  Entry& e = cache[(reinterpret_cast<uintptr_t>(&schema) >> 4) & 255];
  if (e.schema == &schema && e.qual == schema.name() && e.overload == schema.overload_name()) return e.info;
  e.schema = &schema;
  e.qual = schema.name();
  e.overload = schema.overload_name();
  OpInfo& i = e.info;
  // torch_tpu::c_kernel (a user C kernel, torch_tpu/kernels) and the other
  // torch_tpu:: ops lower natively under their qualified names and never
  // fall back
  i.user_kernel = e.qual.rfind("torch_tpu::", 0) == 0;
  i.aten = e.qual.rfind("aten::", 0) == 0;
  const char* name = i.user_kernel ? e.qual.c_str() : e.qual.c_str() + 6;
  // one lookup in the lowering table: native? CPU indices? generator?
  i.flags = i.aten || i.user_kernel ? tpulw_op_flags(name, e.overload.c_str()) : 0u;
  i.check_overlap = false;
  for (const auto& a : schema.arguments()) i.check_overlap |= a.alias_info() && a.alias_info()->isWrite();
  i.check_overlap = i.check_overlap && !overlap_write_ok(name, e.overload.c_str());
  return i;
}

// Stack entries an unboxed caller lends native_run without a reference
// (bit i of mask: entry i). Copying an at::Tensor into an
// IValue takes a reference, and when that lifts a tensor's count above one
// PyTorch also takes one on its Python object (under the GIL); one op paid
// ~2300 instructions for that pair. own() turns the lent entries into
// owned ones (before a CPU fallback consumes the stack); release() and the
// destructor (an exception on the way) give them back unreferenced.
struct Borrowed {
  torch::jit::Stack* stack;
  unsigned mask;
  void release() {
    for (size_t i = 0; mask >> i; i++)
      if (mask >> i & 1u) c10::MaybeOwnedTraits<c10::IValue>::destroyBorrow((*stack)[i]);
    mask = 0;
  }
  void own() {
    for (size_t i = 0; mask >> i; i++)
      if (mask >> i & 1u) {
        c10::IValue& e = (*stack)[i];
        c10::IValue owned(e);  // a real reference
        c10::MaybeOwnedTraits<c10::IValue>::destroyBorrow(e);
        e = std::move(owned);
      }
    mask = 0;
  }
  ~Borrowed() { release(); }
};

// The native path for one call: the op's arguments on top of the stack are
// replaced by its returns. b: entries lent by an unboxed caller (nullptr
// for a boxed call); then an aliased return (an in-place op's self) is
// pushed as None: that caller returns its own reference.
void native_run(const c10::OperatorHandle& op, torch::jit::Stack* stack, Borrowed* b) {
  auto fallback = [&](const std::string& why) {
    if (b) b->own();
    cpu_fallback(op, stack, why);
  };
  const auto& schema = op.schema();
  const OpInfo info = op_info(schema);
  const std::string& qual = schema.name();
  const bool user_kernel = info.user_kernel;
  if (!user_kernel && !info.aten) return fallback("not an aten op");
  const char* name = user_kernel ? qual.c_str() : qual.c_str() + 6;
  const char* overload = schema.overload_name().c_str();
  const unsigned op_flags = info.flags;
  if (!(op_flags & TPULW_OP_NATIVE)) return fallback("");

  // In-place writes into a tensor whose elements share memory (expand
  // views) are refused, as on CPU, except where CPU allows them.
  for (size_t j = 0; info.check_overlap && j < schema.arguments().size(); j++) {
    const auto* ai = schema.arguments()[j].alias_info();
    if (!ai || !ai->isWrite()) continue;
    const c10::IValue& iv = torch::jit::peek(*stack, j, schema.arguments().size());
    if (iv.isTensor()) at::assert_no_internal_overlap(iv.toTensor());
  }

  MarshalLease lease;
  Marshal& m = lease.get();
  m.cpu_indices_ok = (op_flags & TPULW_OP_CPU_INDICES) != 0;
  if (!marshal(m, schema, stack)) {
    TORCH_CHECK(!user_kernel, "C kernel call: ", m.why,
                " (C kernels take tpu tensors, all on one device)");
    return fallback(m.why);
  }
  c10::DeviceGuard guard(c10::Device(c10::DeviceType::PrivateUse1, m.device));

  // Generators: None -> the device's default; lock each while preparing.
  std::vector<std::unique_lock<std::mutex>> locks;
  for (size_t k = 0; k < m.gen_args.size(); k++) {
    at::Generator g = m.gens[k].defined() ? m.gens[k] : default_generator(m.device);
    m.gens[k] = g;
    locks.emplace_back(g.mutex());
    m.args[m.gen_args[k]].gen = &g.get<TpuGenerator>()->state;
  }
  auto use_default_generator = [&](tpulw_arg& a) {
    at::Generator g = default_generator(m.device);
    m.gens.push_back(g);
    locks.emplace_back(g.mutex());
    a.kind = TPULW_GENERATOR;
    a.gen = &g.get<TpuGenerator>()->state;
  };
  for (auto& a : m.args)  // None generator argument -> default generator
    if (a.kind == TPULW_NONE && a.name && std::strcmp(a.name, "generator") == 0)
      use_default_generator(a);
  if (op_flags & TPULW_OP_NEEDS_GENERATOR) {  // random op without one
    tpulw_arg extra;
    std::memset(&extra, 0, sizeof extra);
    extra.name = "generator";
    m.args.push_back(extra);
    use_default_generator(m.args.back());
  }

  tpulw_ctx ctx{m.device, g_precision.load()};
  tpulw_plan* plan = nullptr;
  int rc = tpulw_prepare(&ctx, name, overload, m.args.data(),
                         static_cast<int>(m.args.size()), &plan);
  locks.clear();
  if (rc == TPU_E_UNSUPPORTED && !user_kernel) return fallback(tpu_last_error());
  check(rc);

  // Destinations.
  size_t nargs = schema.arguments().size();
  auto ivs = torch::jit::last(*stack, nargs);
  int nout = tpulw_plan_num_outputs(plan);
  // small inline vectors: no heap allocation for the usual 1-4 outputs
  c10::SmallVector<at::Tensor, 4> fresh;
  c10::SmallVector<tpu_view, 4> outs(nout);
  try {
    for (int i = 0; i < nout; i++) {
      const tpulw_out_info* o = tpulw_plan_output(plan, i);
      at::Tensor dst;
      c10::IntArrayRef sizes(o->sizes, o->ndim);
      if (o->dest_arg < 0) {
        if (o->col_major || o->strided) {
          std::vector<int64_t> st = o->col_major ? col_major_strides(*o)
                                                 : std::vector<int64_t>(o->strides, o->strides + o->ndim);
          dst = empty_strided(sizes, st, to_scalar_type(o->dtype), std::nullopt,
                              c10::Device(c10::DeviceType::PrivateUse1, m.device), std::nullopt);
        } else {
          dst = empty_tpu(sizes, to_scalar_type(o->dtype), m.device);
        }
        fresh.push_back(dst);
      } else {
        const c10::IValue& iv = ivs[o->dest_arg];
        dst = iv.isTensor() ? iv.toTensor() : iv.toTensorList().get(o->dest_elem);
        if (o->resize) {
          warn_resize(dst, *o);
          resize_impl(dst, sizes, std::nullopt);
          if (o->col_major) dst.as_strided_(sizes, col_major_strides(*o));
        }
      }
      outs[i] = make_view(dst);
    }
  } catch (...) {
    tpulw_plan_free(plan);
    throw;
  }
  check(tpulw_launch(plan, current_stream(m.device), outs.data()));

  // Returns: aliased args, else the new outputs in order.
  c10::SmallVector<c10::IValue, 4> rets;
  size_t next = 0;
  for (const auto& r : schema.returns()) {
    if (r.alias_info() && r.alias_info()->isWrite()) {
      if (b) {
        rets.emplace_back();
        continue;
      }
      for (size_t j = 0; j < nargs; j++) {
        const auto* ai = schema.arguments()[j].alias_info();
        if (ai && ai->beforeSets() == r.alias_info()->beforeSets()) {
          rets.push_back(ivs[j]);
          break;
        }
      }
    } else if (r.type()->kind() == c10::TypeKind::ListType) {
      std::vector<at::Tensor> rest(fresh.begin() + next, fresh.end());
      next = fresh.size();
      rets.emplace_back(rest);
    } else if (next == fresh.size() && next > 0 &&
               r.type()->kind() == c10::TypeKind::TensorType) {
      // a lowering may leave trailing Tensor returns out: undefined, as CPU
      // returns them (_native_multi_head_attention's weights without
      // need_weights)
      rets.emplace_back(at::Tensor());
    } else {
      TORCH_CHECK(next < fresh.size(), "torch_tpu: lowering of ", qual, " produced too few outputs");
      at::Tensor& t = fresh[next++];
      switch (r.type()->kind()) {  // Python-value returns come back as 0-dim tensors
        case c10::TypeKind::BoolType: rets.emplace_back(local_scalar_dense(t).toBool()); break;
        case c10::TypeKind::IntType: rets.emplace_back(local_scalar_dense(t).toLong()); break;
        case c10::TypeKind::FloatType: rets.emplace_back(local_scalar_dense(t).toDouble()); break;
        default: rets.emplace_back(std::move(t));
      }
    }
  }
  if (b) b->release();
  torch::jit::drop(*stack, nargs);
  for (auto& r : rets) torch::jit::push(*stack, std::move(r));
}

void native_boxed(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  native_run(op, stack, nullptr);
}

// Unboxed entries for the commonest native signatures (tensors and scalars
// in, one tensor out, or in place on the first tensor): the arguments go
// on a stack as borrowed IValues (see Borrowed), not as new references.
void push_arg(torch::jit::Stack& st, unsigned& mask, const at::Tensor& t) {
  mask |= 1u << st.size();
  st.emplace_back(c10::MaybeOwnedTraits<at::Tensor>::createBorrow(t));
}
void push_arg(torch::jit::Stack& st, unsigned&, const c10::Scalar& s) { st.emplace_back(s); }

// op on args; its one return (None for an in-place op: see native_run).
template <class... A>
c10::IValue unboxed_call(const c10::OperatorHandle& op, const A&... args) {
  torch::jit::Stack st;
  st.reserve(sizeof...(A) + 1);
  Borrowed b{&st, 0};
  (push_arg(st, b.mask, args), ...);
  native_run(op, &st, &b);
  return std::move(st.back());
}

template <class... A>
torch::CppFunction unboxed_kernel(const c10::OperatorHandle& op) {
  return torch::CppFunction(
      [op](const A&... args) -> at::Tensor { return unboxed_call(op, args...).toTensor(); });
}
template <class... A>
torch::CppFunction unboxed_inplace_kernel(const c10::OperatorHandle& op) {
  return torch::CppFunction([op](at::Tensor& self, const A&... args) -> at::Tensor& {
    unboxed_call(op, self, args...);
    return self;
  });
}

// The unboxed kernel for op's schema, or nothing (boxed registration):
// every argument a Tensor or a Scalar (at most three), one Tensor
// returned, fresh or the first argument written in place.
std::optional<torch::CppFunction> unboxed_for(const c10::OperatorHandle& op) {
  const auto& sc = op.schema();
  if (sc.returns().size() != 1 || sc.returns()[0].type()->kind() != c10::TypeKind::TensorType ||
      sc.arguments().size() > 3 || sc.is_vararg() || sc.is_varret())
    return std::nullopt;
  std::string sig;
  for (size_t i = 0; i < sc.arguments().size(); i++) {
    const auto& a = sc.arguments()[i];
    bool w = a.alias_info() && a.alias_info()->isWrite();
    if (w && i != 0) return std::nullopt;
    auto k = a.type()->kind();
    sig += k == c10::TypeKind::TensorType ? (w ? 'W' : 'T') : k == c10::TypeKind::NumberType ? 'S' : '?';
  }
  const auto* ra = sc.returns()[0].alias_info();
  if ((ra != nullptr) != (!sig.empty() && sig[0] == 'W')) return std::nullopt;
  using T = at::Tensor;
  using S = c10::Scalar;
  if (sig == "T") return unboxed_kernel<T>(op);
  if (sig == "TT") return unboxed_kernel<T, T>(op);
  if (sig == "TS") return unboxed_kernel<T, S>(op);
  if (sig == "TTT") return unboxed_kernel<T, T, T>(op);
  if (sig == "TTS") return unboxed_kernel<T, T, S>(op);
  if (sig == "TSS") return unboxed_kernel<T, S, S>(op);
  if (sig == "TST") return unboxed_kernel<T, S, T>(op);
  if (sig == "W") return unboxed_inplace_kernel<>(op);
  if (sig == "WT") return unboxed_inplace_kernel<T>(op);
  if (sig == "WS") return unboxed_inplace_kernel<S>(op);
  if (sig == "WTS") return unboxed_inplace_kernel<T, S>(op);
  if (sig == "WTT") return unboxed_inplace_kernel<T, T>(op);
  if (sig == "WSS") return unboxed_inplace_kernel<S, S>(op);
  return std::nullopt;
}

}  // namespace

namespace {
// Same-width stand-in for dtypes the runtime does not compute with
// (unsigned 16/32/64-bit, 1-byte floats): copies move their bits as is.
int bits_dtype(c10::ScalarType st) {
  switch (st) {
    case c10::ScalarType::UInt16: return TPU_I16;
    case c10::ScalarType::UInt32: return TPU_I32;
    case c10::ScalarType::UInt64: return TPU_I64;
    case c10::ScalarType::Float4_e2m1fn_x2:
    case c10::ScalarType::Float8_e4m3fn:
    case c10::ScalarType::Float8_e4m3fnuz:
    case c10::ScalarType::Float8_e5m2:
    case c10::ScalarType::Float8_e5m2fnuz:
    case c10::ScalarType::Float8_e8m0fnu:
    case c10::ScalarType::Bits8: return TPU_U8;
    case c10::ScalarType::Bits16: return TPU_I16;
    default: return -1;
  }
}
}  // namespace

void copy_between(const at::Tensor& src_in, const at::Tensor& dst, bool non_blocking) {
  at::Tensor src = src_in.sizes().equals(dst.sizes()) ? src_in : src_in.expand(dst.sizes());
  // lazy conjugate / negative views: materialise on the side that holds
  // them (the device: native conj_physical / neg), then copy the bytes
  if (src.is_conj() != dst.is_conj() || src.is_neg() != dst.is_neg()) {
    TORCH_CHECK(!dst.is_conj() && !dst.is_neg(),
                "torch_tpu: copy into a conjugate/negative view is not supported");
    bool conj = src.is_conj(), neg = src.is_neg();
    at::Tensor plain = conj ? src.conj() : src;  // the bits cleared, same memory
    if (neg) plain = at::_neg_view(plain);
    if (src.device().type() == c10::DeviceType::PrivateUse1) {
      if (conj) plain = at::_conj_physical(plain);  // native
      if (neg) plain = at::neg(plain);
      copy_between(plain, dst);
    } else {  // host -> device: copy the stored values, then fix them on the device
      copy_between(plain, dst);
      if (conj) dst.conj_physical_();
      if (neg) dst.neg_();
    }
    return;
  }
  if (dst.numel() == 0) return;
  tpu_view dv, sv;
  if (to_tpu_dtype(dst.scalar_type()) < 0 || to_tpu_dtype(src.scalar_type()) < 0) {
    int bits = bits_dtype(dst.scalar_type());
    TORCH_CHECK_NOT_IMPLEMENTED(bits >= 0 && src.scalar_type() == dst.scalar_type(),
                                "torch_tpu: copy from ", src.scalar_type(), " to ",
                                dst.scalar_type(), " is not supported (", dst.scalar_type(),
                                " tensors are storage-only on tpu: views and same-dtype copies)");
    at::Tensor sb = src.view(to_scalar_type(bits)), db = dst.view(to_scalar_type(bits));
    dv = make_view(db);
    sv = make_view(sb);
  } else {
    dv = make_view(dst);
    sv = make_view(src);
  }
  bool s_dev = src.device().type() == c10::DeviceType::PrivateUse1;
  bool d_dev = dst.device().type() == c10::DeviceType::PrivateUse1;
  TORCH_CHECK(s_dev || src.device().is_cpu(), "torch_tpu: cannot copy from ", src.device());
  TORCH_CHECK(d_dev || dst.device().is_cpu(), "torch_tpu: cannot copy to ", dst.device());
  if (s_dev && d_dev)
    check(tpug_copy_d2d(current_stream(dst.device().index()), &dv, &sv));
  else if (s_dev && non_blocking && pinned_allocator()->owns(dst.storage().data()))
    check(tpug_copy_d2h_async(current_stream(src.device().index()), &dv, &sv));
  else if (s_dev)
    check(tpug_copy_d2h(current_stream(src.device().index()), &dv, &sv));
  else
    check(tpug_copy_h2d(current_stream(dst.device().index()), &dv, &sv));
}

std::vector<std::pair<std::string, int64_t>> fallback_counts() {
  std::lock_guard<std::mutex> lock(g_fallback_mu);
  return {g_fallback_counts.begin(), g_fallback_counts.end()};
}

void reset_fallback_counts() {
  std::lock_guard<std::mutex> lock(g_fallback_mu);
  g_fallback_counts.clear();
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", empty_memory_format);
  m.impl("empty_strided", empty_strided);
  m.impl("as_strided", as_strided);
  m.impl("view", view);
  m.impl("_reshape_alias", reshape_alias);
  m.impl("unfold", unfold);
  m.impl("view_as_real", view_as_real);
  m.impl("view_as_complex", view_as_complex);
  m.impl("resize_", resize_);
  m.impl("set_.source_Storage_storage_offset", set_storage_offset);
  m.impl("set_.source_Storage", set_source_storage);
  m.impl("set_.source_Tensor", set_source_tensor);
  m.impl("set_", set_empty);
  m.impl("_copy_from", copy_from);
  m.impl("_copy_from_and_resize", copy_from_and_resize);
  m.impl("_local_scalar_dense", local_scalar_dense);
  m.impl("_fused_sdp_choice", fused_sdp_choice);
  m.impl("_scaled_dot_product_fused_attention_overrideable", sdpa_overrideable);
  m.impl("_scaled_dot_product_fused_attention_overrideable_backward", sdpa_overrideable_backward);
  m.impl("_has_compatible_shallow_copy_type", has_compatible_shallow_copy_type);
}

// Lazy conjugate / negative tensors: PyTorch's Conjugate/Negative fallback
// would materialise a conj source of _copy_from with clone(), which copies
// through _copy_from again (endless recursion on backends whose copies go
// through _copy_from). copy_between resolves the bits itself.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}
TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

// User C kernels (torch_tpu/kernels): one generic op; each kernel's own
// torch.library op (with its fake implementation) calls it on tpu tensors.
TORCH_LIBRARY_FRAGMENT(torch_tpu, m) {
  m.def("c_kernel(int key, Tensor[] inputs, float[] fscalars, int[] iscalars) -> Tensor[]");
  // fused attention (the overrideable SDPA backend's kernels call these)
  m.def("sdpa_fwd(Tensor query, Tensor key, Tensor value, Tensor? attn_bias, bool is_causal, "
        "float? scale) -> (Tensor, Tensor)");
  m.def("sdpa_bwd(Tensor grad_out, Tensor query, Tensor key, Tensor value, Tensor out, "
        "Tensor logsumexp, Tensor? attn_bias, bool is_causal, float? scale) "
        "-> (Tensor, Tensor, Tensor)");
}
TORCH_LIBRARY_IMPL(torch_tpu, PrivateUse1, m) {
  m.impl("c_kernel", torch::CppFunction::makeFromBoxedFunction<&native_boxed>());
  m.impl("sdpa_fwd", torch::CppFunction::makeFromBoxedFunction<&native_boxed>());
  m.impl("sdpa_bwd", torch::CppFunction::makeFromBoxedFunction<&native_boxed>());
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&native_boxed>());
}

// Every natively lowered overload is also registered as an explicit
// PrivateUse1 kernel: a backend fallback loses to CompositeExplicitAutograd
// kernels, so without this an op like native_layer_norm would decompose
// instead of using its lowering. CompositeImplicitAutograd ops are left to
// decompose (into native ops): a direct backend kernel would take their
// autograd support away.
namespace {
struct RegisterNativeOps {
  torch::Library lib{torch::Library::IMPL, "aten",
                     std::optional<c10::DispatchKey>(c10::DispatchKey::PrivateUse1),
                     __FILE__, __LINE__};
  std::vector<std::string> registered;
  RegisterNativeOps() {
    int n = 0;
    const char* const* names = tpulw_list(&n);
    for (int i = 0; i < n; i++) {
      std::string full(names[i]);
      size_t dot = full.find('.');
      c10::OperatorName opname("aten::" + full.substr(0, dot),
                               dot == std::string::npos ? "" : full.substr(dot + 1));
      auto op = c10::Dispatcher::singleton().findOp(opname);
      if (!op || op->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd))
        continue;
      std::optional<torch::CppFunction> un = unboxed_for(*op);
      if (un)
        lib.impl(names[i], std::move(*un));
      else
        lib.impl(names[i], torch::CppFunction::makeFromBoxedFunction<&native_boxed>());
      registered.push_back(full);
    }
  }
};
RegisterNativeOps g_register_native_ops;
}  // namespace

std::vector<std::string> native_ops() { return g_register_native_ops.registered; }

}  // namespace torch_tpu

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &torch_tpu::fused_sdp_choice)
}  // namespace at::native

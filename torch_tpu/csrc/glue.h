// glue.h - shared declarations of the thin C++ glue between PyTorch's
// dispatcher and the torch_tpu C runtime. Logic lives in runtime/ (C); this
// layer converts PyTorch objects to C descriptors and registers things.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>
#include <c10/core/GeneratorImpl.h>

#include <atomic>
#include <string>

extern "C" {
#include "tpu_base.h"
#include "tpu_graph.h"
#include "tpu_lower.h"
#include "tpu_rt.h"
}

namespace torch_tpu {

// ---- status -> C++ exception (the Python class PyTorch CPU would raise)
[[noreturn]] void throw_status(int code, const std::string& msg);
inline void check(int code) {
  if (code != TPU_OK) throw_status(code, tpu_last_error());
}

// ---- dtypes and views
int to_tpu_dtype(c10::ScalarType st);  // -1 if the runtime lacks it
c10::ScalarType to_scalar_type(int dt);
// View of a tensor's memory (device or host); dtype must be supported.
tpu_view make_view(const at::Tensor& t);

// ---- devices and streams (thread-local current device / stream)
c10::DeviceIndex current_device();
void set_device(c10::DeviceIndex d);
c10::DeviceIndex device_count();
tpurt_stream* current_stream(c10::DeviceIndex d);
void set_current_stream(c10::DeviceIndex d, int stream_id);
int current_stream_id(c10::DeviceIndex d);
void synchronize_device(c10::DeviceIndex d);

// ---- memory
c10::Allocator* allocator();
// New contiguous tpu tensor on device d.
at::Tensor empty_tpu(c10::IntArrayRef sizes, c10::ScalarType st, c10::DeviceIndex d);

// ---- generator
struct TpuGenerator final : public c10::GeneratorImpl {
  explicit TpuGenerator(c10::DeviceIndex d);
  void set_current_seed(uint64_t seed) override;
  void set_offset(uint64_t offset) override;
  uint64_t get_offset() const override;
  uint64_t current_seed() const override;
  uint64_t seed() override;
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;
  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }
  tpulw_philox state{67280421310721ULL, 0};

 private:
  TpuGenerator* clone_impl() const override;
};
const at::Generator& default_generator(c10::DeviceIndex d);

// ---- process-wide settings (set from Python)
extern std::atomic<int> g_precision;        // tpu_precision
extern std::atomic<bool> g_fallback_enabled;  // CPU fallback allowed

// ---- kernels helpers shared with the Python module
void copy_between(const at::Tensor& src, const at::Tensor& dst, bool non_blocking = false);
// Reallocate a tpu storage to newsize bytes, keeping the first
// min(old, new) bytes (the storage-resize hook).
void resize_storage_bytes(const c10::Storage& storage, size_t newsize);

// Pinned host memory: host allocations tracked by base pointer, so
// is_pinned() knows them and a non_blocking device->host copy into them
// is enqueued without waiting.
struct PinnedAllocator final : public c10::Allocator {
  c10::DataPtr allocate(size_t n) override;
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void* dst, const void* src, std::size_t count) const override;
  bool owns(const void* p) const;
};
PinnedAllocator* pinned_allocator();
// Counted CPU fallback statistics: "aten::op.overload" -> calls.
std::vector<std::pair<std::string, int64_t>> fallback_counts();
void reset_fallback_counts();
// ATen overloads registered with a native lowering ("add.Tensor", ...).
std::vector<std::string> native_ops();

}  // namespace torch_tpu

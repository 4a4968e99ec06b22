// device.cpp - the tpu device for PyTorch: errors, dtypes, current
// device/stream, the caching allocator front (runtime memory), the
// DeviceGuard implementation (streams, events), hooks and the generator.
#include "glue.h"
#include "tpu_exec.h"

#include <ATen/EmptyTensor.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/ops/empty.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_set>
#include <vector>

namespace torch_tpu {

using c10::DeviceIndex;
using c10::DeviceType;

[[noreturn]] void throw_status(int code, const std::string& msg) {
  switch (code) {
    case TPU_E_INDEX: TORCH_CHECK_INDEX(false, msg);
    case TPU_E_TYPE: TORCH_CHECK_TYPE(false, msg);
    case TPU_E_VALUE: TORCH_CHECK_VALUE(false, msg);
    case TPU_E_OOM: TORCH_CHECK_WITH(OutOfMemoryError, false, msg);
    case TPU_E_UNSUPPORTED: TORCH_CHECK_NOT_IMPLEMENTED(false, msg);
    case TPU_E_LINALG: TORCH_CHECK_LINALG(false, msg);
    default: TORCH_CHECK(false, msg);
  }
}

int to_tpu_dtype(c10::ScalarType st) {
  switch (st) {
    case c10::ScalarType::Bool: return TPU_BOOL;
    case c10::ScalarType::Byte: return TPU_U8;
    case c10::ScalarType::Char: return TPU_I8;
    case c10::ScalarType::Short: return TPU_I16;
    case c10::ScalarType::Int: return TPU_I32;
    case c10::ScalarType::Long: return TPU_I64;
    case c10::ScalarType::Half: return TPU_F16;
    case c10::ScalarType::BFloat16: return TPU_BF16;
    case c10::ScalarType::Float: return TPU_F32;
    case c10::ScalarType::Double: return TPU_F64;
    case c10::ScalarType::ComplexFloat: return TPU_C64;
    case c10::ScalarType::ComplexDouble: return TPU_C128;
    default: return -1;
  }
}

c10::ScalarType to_scalar_type(int dt) {
  static const c10::ScalarType k[TPU_NUM_DTYPES] = {
      c10::ScalarType::Bool, c10::ScalarType::Byte,     c10::ScalarType::Char,
      c10::ScalarType::Short, c10::ScalarType::Int,     c10::ScalarType::Long,
      c10::ScalarType::Half, c10::ScalarType::BFloat16, c10::ScalarType::Float,
      c10::ScalarType::Double, c10::ScalarType::ComplexFloat,
      c10::ScalarType::ComplexDouble};
  TORCH_CHECK(dt >= 0 && dt < TPU_NUM_DTYPES, "torch_tpu: bad dtype ", dt);
  return k[dt];
}

tpu_view make_view(const at::Tensor& t) {
  tpu_view v;
  std::memset(&v, 0, sizeof v);
  int dt = to_tpu_dtype(t.scalar_type());
  TORCH_CHECK_NOT_IMPLEMENTED(dt >= 0, "torch_tpu: dtype ", t.scalar_type(),
                              " is not supported by the vTPU runtime");
  TORCH_CHECK(t.dim() <= TPU_MAX_DIMS, "torch_tpu: tensors of more than ",
              TPU_MAX_DIMS, " dimensions are not supported");
  v.base = t.storage().mutable_data();
  v.offset = t.storage_offset();
  v.dtype = dt;
  v.ndim = static_cast<int32_t>(t.dim());
  for (int64_t i = 0; i < t.dim(); i++) {
    v.sizes[i] = t.size(i);
    v.strides[i] = t.stride(i);
  }
  return v;
}

// ---- current device / stream -------------------------------------------
namespace {
thread_local DeviceIndex tl_device = 0;
constexpr int kMaxDevices = 64;
thread_local int tl_stream[kMaxDevices] = {};
}  // namespace

DeviceIndex device_count() {
  int n = tpurt_device_count();
  return static_cast<DeviceIndex>(n < 0 ? 0 : std::min(n, kMaxDevices));
}

static void check_device(DeviceIndex d) {
  TORCH_CHECK(d >= 0 && d < device_count(), "Invalid device index tpu:", (int)d,
              " (this process sees ", (int)device_count(), " tpu devices)");
}

DeviceIndex current_device() { return tl_device; }
void set_device(DeviceIndex d) {
  check_device(d);
  tl_device = d;
}

// A stream the runtime returned, or its error (`fallback` if it set none).
static tpurt_stream* or_throw(tpurt_stream* s, int fallback) {
  if (!s) check(tpu_last_error_code() ? tpu_last_error_code() : fallback);
  return s;
}

// Stream `id` of device d (0 = the default stream).
static tpurt_stream* stream_by_id(DeviceIndex d, int id, int fallback) {
  return or_throw(id == 0 ? tpurt_default_stream(d) : tpurt_stream_get(d, id), fallback);
}

tpurt_stream* current_stream(DeviceIndex d) {
  check_device(d);
  return stream_by_id(d, tl_stream[d], TPU_E_INTERNAL);
}
int current_stream_id(DeviceIndex d) { return tl_stream[d]; }
void set_current_stream(DeviceIndex d, int id) {
  check_device(d);
  tl_stream[d] = id;
}

void synchronize_device(DeviceIndex d) {
  check_device(d);
  check(tpug_synchronize_device(d));  // flushes Fused Eager work first
}

static tpurt_stream* stream_of(const c10::Stream& s) {
  return stream_by_id(s.device_index(), static_cast<int>(s.id()), TPU_E_INVALID);
}

// ---- allocator -------------------------------------------------------------
namespace {
// Fused Eager: frees of blocks the pending graph uses are deferred (and
// outputs into them are never written).
void tpu_delete(void* p) { tpug_free(p); }

struct TpuAllocator final : public c10::DeviceAllocator {
  c10::DataPtr allocate(size_t n) override {
    DeviceIndex d = current_device();
    void* p = nullptr;
    // first used by work on the current stream: blocks freed while only that
    // stream had work queued are reused at once (as CUDA's allocator does)
    int sid = current_stream_id(d);
    // memory pressure: the runtime flushes Fused Eager work and retries; in
    // Fused Eager the fresh block is a promise until a flush
    check(tpug_malloc(d, sid, n, &p));
    return {p, p, &tpu_delete, c10::Device(DeviceType::PrivateUse1, d)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &tpu_delete; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    int d = tpurt_ptr_device(src);
    if (d >= 0) check(tpug_synchronize_for_host(d));
    std::memcpy(dest, src, count);
  }
  bool initialized() override { return true; }
  void emptyCache(c10::MempoolId_t) override {
    for (DeviceIndex d = 0; d < device_count(); d++)
      if (tpurt_device_is_open(d)) check(tpurt_mem_empty_cache(d));
    tpux_trim_temporaries();
  }
  void recordStream(const c10::DataPtr&, c10::Stream) override {
    // Frees are ordered against every stream of the chip by the runtime.
  }
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(DeviceIndex d) override {
    c10::CachingDeviceAllocator::DeviceStats out;
    tpurt_mem_stats s{};
    check(tpurt_mem_get_stats(d, &s));
    auto set = [](c10::CachingAllocator::StatArray& a, int64_t cur, int64_t peak) {
      for (auto& st : a) {
        st.current = cur;
        st.peak = peak;
      }
    };
    set(out.allocated_bytes, s.allocated, s.peak_allocated);
    set(out.reserved_bytes, s.reserved, s.peak_reserved);
    set(out.active_bytes, s.allocated, s.peak_allocated);
    set(out.requested_bytes, s.allocated, s.peak_allocated);
    set(out.allocation, s.active_blocks, s.active_blocks);
    set(out.active, s.active_blocks, s.active_blocks);
    for (auto& st : out.allocation) {
      st.allocated = s.num_allocs;
      st.freed = s.num_frees;
    }
    out.num_ooms = s.num_ooms;
    return out;
  }
  void resetAccumulatedStats(DeviceIndex) override {}
  void resetPeakStats(DeviceIndex d) override { check(tpurt_mem_reset_peak(d)); }
  std::pair<size_t, size_t> getMemoryInfo(DeviceIndex d) override {
    tpurt_mem_stats s{};
    check(tpurt_mem_get_stats(d, &s));
    return {s.capacity - s.reserved, s.capacity};
  }
};
TpuAllocator g_allocator;
}  // namespace

c10::Allocator* allocator() { return &g_allocator; }
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_allocator);

// ---- pinned host memory ------------------------------------------------------------
// The vTPU's chips read host RAM directly, so pinning needs no page locking;
// what "pinned" buys is the contract: the memory stays put and a
// non_blocking device->host copy into it is enqueued without waiting.
namespace {
std::mutex g_pinned_mu;
std::unordered_set<const void*> g_pinned;

void pinned_free(void* p) {
  {
    std::lock_guard<std::mutex> lock(g_pinned_mu);
    g_pinned.erase(p);
  }
  std::free(p);
}
PinnedAllocator g_pinned_allocator;
}  // namespace

c10::DataPtr PinnedAllocator::allocate(size_t n) {
  void* p = nullptr;
  if (n > 0) {
    TORCH_CHECK_WITH(OutOfMemoryError, posix_memalign(&p, 64, n) == 0,
                     "torch_tpu: cannot allocate ", n, " bytes of pinned host memory");
    std::lock_guard<std::mutex> lock(g_pinned_mu);
    g_pinned.insert(p);
  }
  return {p, p, &pinned_free, c10::Device(DeviceType::CPU)};
}

void PinnedAllocator::copy_data(void* dst, const void* src, std::size_t count) const {
  std::memcpy(dst, src, count);
}

bool PinnedAllocator::owns(const void* p) const {
  std::lock_guard<std::mutex> lock(g_pinned_mu);
  return p && g_pinned.count(p) > 0;
}

PinnedAllocator* pinned_allocator() { return &g_pinned_allocator; }

at::Tensor empty_tpu(c10::IntArrayRef sizes, c10::ScalarType st, DeviceIndex d) {
  c10::DeviceGuard g(c10::Device(DeviceType::PrivateUse1, d));
  return at::detail::empty_generic(sizes, &g_allocator,
                                   c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                   st, std::nullopt);
}

// ---- device guard ------------------------------------------------------------
namespace {
struct TpuGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  static constexpr DeviceType static_type = DeviceType::PrivateUse1;
  TpuGuardImpl() = default;
  explicit TpuGuardImpl(DeviceType t) {
    TORCH_CHECK(t == static_type, "TpuGuardImpl for a non-tpu device type ", t);
  }
  DeviceType type() const override { return static_type; }
  c10::Device exchangeDevice(c10::Device d) const override {
    DeviceIndex old = current_device();
    if (d.index() >= 0) set_device(d.index());
    return c10::Device(static_type, old);
  }
  c10::Device getDevice() const override { return c10::Device(static_type, current_device()); }
  void setDevice(c10::Device d) const override {
    if (d.index() >= 0) set_device(d.index());
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (d.index() >= 0 && d.index() < device_count()) tl_device = d.index();
  }
  c10::Stream getStream(c10::Device d) const noexcept override {
    return c10::Stream(c10::Stream::UNSAFE, d, tl_stream[d.index()]);
  }
  c10::Stream getDefaultStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::UNSAFE, d, 0);
  }
  c10::Stream getNewStream(c10::Device d, int priority = 0) const override {
    tpurt_stream* s = or_throw(tpurt_stream_create(d.index()), TPU_E_INTERNAL);
    return c10::Stream(c10::Stream::UNSAFE, d, tpurt_stream_id(s));
  }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool = false) const override {
    return getNewStream(d);
  }
  c10::Stream exchangeStream(c10::Stream s) const noexcept override {
    DeviceIndex d = s.device_index();
    c10::Stream old(c10::Stream::UNSAFE, s.device(), tl_stream[d]);
    tl_stream[d] = static_cast<int>(s.id());
    return old;
  }
  DeviceIndex deviceCount() const noexcept override { return device_count(); }
  void record(void** event, const c10::Stream& stream, const DeviceIndex device_index,
              const c10::EventFlag) const override {
    TORCH_CHECK(device_index == -1 || device_index == stream.device_index(),
                "Event device index ", (int)device_index,
                " does not match recording stream's device index ",
                (int)stream.device_index(), ".");
    auto* ev = static_cast<tpurt_event*>(*event);
    if (!ev) {
      ev = tpurt_event_create();
      TORCH_CHECK(ev, "torch_tpu: could not create an event");
      *event = ev;
    }
    check(tpug_event_record(ev, stream_of(stream)));
  }
  void block(void* event, const c10::Stream& stream) const override {
    if (!event) return;
    check(tpug_stream_wait_event(stream_of(stream), static_cast<tpurt_event*>(event)));
  }
  bool queryEvent(void* event) const override {
    return !event || tpurt_event_query(static_cast<tpurt_event*>(event)) == 1;
  }
  void destroyEvent(void* event, const DeviceIndex) const noexcept override {
    if (event) tpurt_event_destroy(static_cast<tpurt_event*>(event));
  }
  bool queryStream(const c10::Stream& s) const override {
    return tpug_stream_query(stream_of(s)) == 1;
  }
  void synchronizeStream(const c10::Stream& s) const override {
    check(tpug_synchronize_stream(stream_of(s)));
  }
  void synchronizeEvent(void* event) const override {
    if (event) check(tpurt_event_synchronize(static_cast<tpurt_event*>(event)));
  }
  void synchronizeDevice(const DeviceIndex d) const override { synchronize_device(d); }
  double elapsedTime(void* e1, void* e2, const DeviceIndex) const override {
    TORCH_CHECK(e1 && e2, "Both events must be recorded before calculating elapsed time.");
    double ms = 0;
    check(tpurt_event_elapsed_ms(static_cast<tpurt_event*>(e1),
                                 static_cast<tpurt_event*>(e2), &ms));
    return ms;
  }
};
C10_REGISTER_GUARD_IMPL(PrivateUse1, TpuGuardImpl);
}  // namespace

// ---- generator -----------------------------------------------------------------
TpuGenerator::TpuGenerator(DeviceIndex d)
    : c10::GeneratorImpl(c10::Device(DeviceType::PrivateUse1, d),
                         c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)) {}
void TpuGenerator::set_current_seed(uint64_t seed) {
  state.seed = seed;
  state.offset = 0;
}
void TpuGenerator::set_offset(uint64_t offset) { state.offset = offset; }
uint64_t TpuGenerator::get_offset() const { return state.offset; }
uint64_t TpuGenerator::current_seed() const { return state.seed; }
uint64_t TpuGenerator::seed() {
  uint64_t s = c10::detail::getNonDeterministicRandom();
  set_current_seed(s);
  return s;
}
void TpuGenerator::set_state(const c10::TensorImpl& t) {
  // as CUDA's generator: the state is a CPU byte tensor (get_rng_state's)
  TORCH_CHECK_TYPE(t.dtype() == caffe2::TypeMeta::Make<uint8_t>() &&
                       t.device_type() == c10::DeviceType::CPU && t.layout() == c10::kStrided,
                   "RNG state must be a torch.ByteTensor (a CPU uint8 tensor), got a ",
                   t.device_type(), " tensor of dtype ", t.dtype());
  TORCH_CHECK(t.numel() == (int64_t)sizeof(state),
              "RNG state is wrong size: expected ", sizeof(state), " bytes, got ", t.numel());
  std::memcpy(&state, t.data(), sizeof(state));
}
c10::intrusive_ptr<c10::TensorImpl> TpuGenerator::get_state() const {
  at::Tensor t = at::empty({(int64_t)sizeof(state)}, at::kByte);
  std::memcpy(t.data_ptr(), &state, sizeof(state));
  return t.getIntrusivePtr();
}
TpuGenerator* TpuGenerator::clone_impl() const {
  auto* g = new TpuGenerator(device().index());
  g->state = state;
  return g;
}

const at::Generator& default_generator(DeviceIndex d) {
  static std::once_flag once;
  static std::vector<at::Generator> gens;
  std::call_once(once, [] {
    for (DeviceIndex i = 0; i < device_count(); i++)
      gens.push_back(at::make_generator<TpuGenerator>(i));
  });
  check_device(d);
  return gens[d];
}

// ---- hooks -----------------------------------------------------------------------
namespace {
struct TpuHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return device_count() > 0; }
  bool hasPrimaryContext(DeviceIndex d) const override { return tpurt_device_is_open(d) == 1; }
  DeviceIndex deviceCount() const override { return device_count(); }
  void setCurrentDevice(DeviceIndex d) const override { set_device(d); }
  DeviceIndex getCurrentDevice() const override { return current_device(); }
  DeviceIndex exchangeDevice(DeviceIndex d) const override {
    DeviceIndex old = current_device();
    set_device(d);
    return old;
  }
  DeviceIndex maybeExchangeDevice(DeviceIndex d) const override {
    if (d < 0 || d >= device_count()) return current_device();
    return exchangeDevice(d);
  }
  const at::Generator& getDefaultGenerator(DeviceIndex d) const override {
    return default_generator(d < 0 ? current_device() : d);
  }
  at::Generator getNewGenerator(DeviceIndex d) const override {
    return at::make_generator<TpuGenerator>(d < 0 ? current_device() : d);
  }
  at::Device getDeviceFromPtr(void* data) const override {
    int d = tpurt_ptr_device(data);
    TORCH_CHECK(d >= 0, "torch_tpu: pointer ", data, " is not tpu device memory");
    return at::Device(DeviceType::PrivateUse1, static_cast<DeviceIndex>(d));
  }
  bool isPinnedPtr(const void* p) const override { return pinned_allocator()->owns(p); }
  at::Allocator* getPinnedMemoryAllocator() const override { return pinned_allocator(); }
  // untyped_storage().resize_() (FSDP2 frees and regrows parameters this way)
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    resize_storage_bytes(storage, newsize);
  }
  bool hasCompatibleShallowCopyType(c10::DispatchKeySet, c10::DispatchKeySet) const {
    return true;
  }
};

struct RegisterHooks {
  RegisterHooks() { at::RegisterPrivateUse1HooksInterface(new TpuHooks()); }
};
RegisterHooks g_register_hooks;
}  // namespace

std::atomic<int> g_precision{TPU_PREC_DEFAULT};
std::atomic<bool> g_fallback_enabled{true};

}  // namespace torch_tpu

// module.cpp - torch_tpu._C: the Python entry points of the glue (device
// queries, memory statistics, settings, the native-op list, fallback
// counters). Everything here forwards to the C runtime.
#include "glue.h"
#include "tpu_exec.h"
#include "tpu_mxu.h"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/Generator.h>

#include <cstring>
#include <vector>

namespace py = pybind11;
using namespace torch_tpu;

namespace torch_tpu {
void init_dist(py::module& m);  // dist.cpp: the c10d backend "tpu_dist"
void init_pallas(py::module& m);  // pallas.cpp: StableHLO import (torch.tpu.pallas)
}

static py::dict mem_stats(int dev) {
  tpurt_mem_stats s{};
  check(tpurt_mem_get_stats(dev, &s));
  py::dict d;
  d["allocated_bytes.all.current"] = s.allocated;
  d["allocated_bytes.all.peak"] = s.peak_allocated;
  d["reserved_bytes.all.current"] = s.reserved;
  d["reserved_bytes.all.peak"] = s.peak_reserved;
  d["active_bytes.all.current"] = s.allocated;
  d["active.all.current"] = s.active_blocks;
  d["allocation.all.allocated"] = s.num_allocs;
  d["allocation.all.freed"] = s.num_frees;
  d["num_ooms"] = s.num_ooms;
  d["capacity"] = s.capacity;
  return d;
}

// tpug_reason names (tpu_graph.h)
static const char* const kReasons[TPUG_NUM_REASONS] = {
    "strict", "sync", "d2h", "copy", "alias", "sync_op", "loop", "cap", "oom", "stream", "mode",
    "compiled"};

PYBIND11_MODULE(_C, m) {
  m.doc() = "torch_tpu C runtime bindings";
  init_dist(m);
  init_pallas(m);
  m.def("_device_count", [] { return (int)device_count(); });
  m.def("_physical_chip", [](int d) { return tpurt_device_physical_id(d); });
  m.def("_current_device", [] { return (int)current_device(); });
  m.def("_set_device", [](int d) { set_device(static_cast<c10::DeviceIndex>(d)); });
  m.def("_synchronize", [](int d) {
    py::gil_scoped_release nogil;
    synchronize_device(static_cast<c10::DeviceIndex>(d));
  });
  m.def("_device_open", [](int d) { check(tpurt_device_open(d)); });
  m.def("_is_initialized", [](int d) { return tpurt_device_is_open(d) == 1; });
  m.def("_hbm_capacity", [](int d) { return tpurt_device_hbm_capacity(d); });
  m.def("_memory_stats", &mem_stats);
  m.def("_reset_peak_memory_stats", [](int d) { check(tpurt_mem_reset_peak(d)); });
  m.def("_empty_cache", [](int d) {
    check(tpurt_mem_empty_cache(d));
    tpux_trim_temporaries();
  });
  m.def("_get_default_generator", [](int d) {
    return py::reinterpret_steal<py::object>(
        THPGenerator_initDefaultGenerator(default_generator(static_cast<c10::DeviceIndex>(d))));
  });
  m.def("_set_precision", [](int p) {
    TORCH_CHECK(p >= TPU_PREC_DEFAULT && p <= TPU_PREC_HIGHEST, "bad precision ", p);
    g_precision.store(p);
  });
  m.def("_get_precision", [] { return g_precision.load(); });
  // The matrix unit's engine and the kernel it runs for an n^3 f32 GEMM at
  // the current precision (benchmarks print them).
  m.def("_mxu_info", [](int64_t n) {
    char info[256], impl[128];
    check(tpumxu_engine_info(info, sizeof info));
    check(tpumxu_impl_name(TPU_F32, g_precision.load(), n, n, n, impl, sizeof impl));
    return std::string(info) + "; f32 " + std::to_string(n) + "^3 GEMM at this precision: " + impl;
  }, pybind11::arg("n") = 1024);
  m.def("_set_fallback_enabled", [](bool on) { g_fallback_enabled.store(on); });
  m.def("_get_fallback_enabled", [] { return g_fallback_enabled.load(); });
  m.def("_fallback_counts", &fallback_counts);
  m.def("_reset_fallback_counts", &reset_fallback_counts);
  m.def("_set_launch_blocking", [](bool on) { tpurt_set_launch_blocking(on); });
  m.def("_get_launch_blocking", [] { return tpurt_get_launch_blocking() != 0; });
  m.def("_set_num_threads", [](int n) { tpurt_set_num_threads(n); });
  m.def("_get_num_threads", [] { return tpurt_num_threads(); });
  m.def("_native_ops", &native_ops);
  // ---- Fused Eager (runtime/src/graph*.c) and the compilation cache
  // a deferring mode on/off (on keeps TPUG_DEFER_ALL when it is the mode)
  m.def("_set_fused", [](bool on) {
    py::gil_scoped_release nogil;
    int m = tpug_get_mode();
    check(tpug_set_mode(on ? (m == TPUG_STRICT ? TPUG_FUSE : m) : TPUG_STRICT));
  });
  m.def("_get_fused", [] { return tpug_get_mode() != TPUG_STRICT; });
  m.def("_set_graph_mode", [](int mode) {  // TPUG_STRICT / _FUSE / _DEFER_ALL
    py::gil_scoped_release nogil;
    check(tpug_set_mode(mode));
  });
  m.def("_get_graph_mode", [] { return tpug_get_mode(); });
  m.def("_flush", [](int d) {
    py::gil_scoped_release nogil;
    check(tpug_flush(d, TPUG_R_SYNC));
  });
  m.def("_pending_ops", [](int d) { return tpug_pending_ops(d); });
  m.def("_is_pending_ptr", [](uintptr_t p) { return tpug_is_pending(reinterpret_cast<const void*>(p)) == 1; });
  m.def("_dump_pending", [](int d, int fmt) {
    size_t n = tpug_dump(d, fmt, nullptr, 0);
    if (n == 0 && fmt == 2 && tpug_pending_ops(d) > 0)  // an op without StableHLO
      throw_status(TPU_E_UNSUPPORTED, tpu_last_error());
    std::string s(n + 1, '\0');
    tpug_dump(d, fmt, s.data(), s.size());
    s.resize(n);
    return s;
  });
  m.def("_cache_stats", [] {
    tpug_stats s{};
    tpug_get_stats(&s);
    py::dict d, f;
    d["hits"] = s.hits;
    d["disk_hits"] = s.disk_hits;
    d["misses"] = s.misses;
    d["compiles"] = s.misses;
    d["compile_time_s"] = s.compile_seconds;
    d["entries"] = s.entries;
    d["ops_recorded"] = s.ops_recorded;
    d["programs_run"] = s.programs_run;
    d["outputs_written"] = s.outputs_written;
    d["outputs_elided"] = s.outputs_elided;
    d["bytes_elided"] = s.bytes_elided;
    d["captures"] = s.captures;
    d["broken_captures"] = s.broken_captures;
    d["compiled_runs"] = s.replays;
    for (int i = 0; i < TPUG_NUM_REASONS; i++) f[kReasons[i]] = s.flushes[i];
    d["flushes"] = f;
    return d;
  });
  m.def("_executor_name", [] {
    const tpux_executor* ex = tpux_executor_active();
    if (!ex) check(tpu_last_error_code());
    return std::string(ex->name);
  });
  m.def("_set_executor", [](const std::string& name) {
    check(tpug_flush(-1, TPUG_R_SYNC));
    check(tpux_executor_select(name.c_str()));
  });
  m.def("_executor_device_name", [] {
    if (!tpux_executor_active()) check(tpu_last_error_code());
    return std::string(tpux_device_name());
  });
  m.def("_pjrt_stats", [] {
    tpux_pjrt_stats s{};
    tpux_pjrt_get_stats(&s);
    py::dict d;
    d["compiles"] = s.compiles;
    d["executions"] = s.executions;
    d["fallbacks"] = s.fallbacks;
    d["compile_time_s"] = s.compile_seconds;
    d["emits"] = s.emits;
    d["disk_loads"] = s.disk_loads;
    d["disk_stores"] = s.disk_stores;
    d["donated_inputs"] = s.donated_inputs;
    d["direct_outputs"] = s.direct_outputs;
    d["bytes_h2d"] = s.bytes_h2d;
    d["bytes_d2h"] = s.bytes_d2h;
    return d;
  });
  m.def("_vtpu_jit_stats", [] {
    tpux_jit_stats s{};
    tpux_jit_get_stats(&s);
    py::dict d;
    d["compiles"] = s.compiles;
    d["disk_loads"] = s.disk_loads;
    d["failures"] = s.failures;
    d["compile_time_s"] = s.compile_seconds;
    d["bound"] = s.bound;
    d["pending"] = s.pending;
    return d;
  });
  m.def("_vtpu_jit_configure", [](int mode, int hot) { return tpux_jit_configure(mode, hot); });
  m.def("_vtpu_jit_wait", [] {
    py::gil_scoped_release nogil;
    tpux_jit_wait();
  });
  m.def("_reset_cache_stats", [] { tpug_reset_stats(); });
  // the vTPU executor's step profile (tpu_exec.h): on/off, and the table as
  // [(label, count, seconds)]
  m.def("_vtpu_profile", [](bool on) { tpux_profile_enable(on ? 1 : 0); });
  m.def("_vtpu_profile_read", [](bool reset) {
    std::vector<tpux_profile_entry> e(1024);
    int n = tpux_profile_read(e.data(), (int)e.size(), reset ? 1 : 0);
    py::list out;
    for (int i = 0; i < n && i < (int)e.size(); i++)
      out.append(py::make_tuple(std::string(e[i].label), e[i].count, e[i].seconds));
    return out;
  });
  // user C kernels (torch_tpu/kernels): register a compiled kernel with the
  // executor; the descriptor fields come from the parsed signature
  m.def("_c_kernel_register", [](const std::string& name, const std::string& sig,
                                 const std::string& path, const std::string& symbol, uint64_t key,
                                 const std::vector<int>& in_dtype, const std::vector<int>& in_ndim,
                                 const std::vector<std::vector<int64_t>>& in_dim,
                                 const std::vector<std::string>& in_name,
                                 const std::vector<std::string>& sym_name,
                                 const std::vector<int>& out_dtype, const std::vector<int>& out_ndim,
                                 const std::vector<int64_t>& code, int parallel) {
    tpux_kernel_desc d;
    std::memset(&d, 0, sizeof d);
    TORCH_CHECK(in_dtype.size() <= TPUX_KERNEL_MAX_ARGS && in_ndim.size() == in_dtype.size() &&
                    in_dim.size() == in_dtype.size() && in_name.size() == in_dtype.size() &&
                    sym_name.size() <= TPUX_KERNEL_MAX_SYMS &&
                    out_dtype.size() <= TPUX_KERNEL_MAX_OUTS && out_ndim.size() == out_dtype.size() &&
                    code.size() <= TPUX_KERNEL_MAX_CODE,
                "c_kernel ", name, ": signature too large (at most ", TPUX_KERNEL_MAX_ARGS,
                " arguments, ", TPUX_KERNEL_MAX_OUTS, " outputs, ", TPUX_KERNEL_MAX_SYMS, " size symbols)");
    d.name = name.c_str();
    d.signature = sig.c_str();
    d.path = path.c_str();
    d.symbol = symbol.c_str();
    d.key = key;
    d.nin = static_cast<int32_t>(in_dtype.size());
    for (size_t k = 0; k < in_dtype.size(); k++) {
      d.in_dtype[k] = in_dtype[k];
      d.in_ndim[k] = in_ndim[k];
      TORCH_CHECK(in_dim[k].size() <= TPU_MAX_DIMS, "c_kernel ", name, ": too many dims");
      for (size_t a = 0; a < in_dim[k].size(); a++) d.in_dim[k][a] = in_dim[k][a];
      d.in_name[k] = in_name[k].c_str();
    }
    d.nsym = static_cast<int32_t>(sym_name.size());
    for (size_t k = 0; k < sym_name.size(); k++) d.sym_name[k] = sym_name[k].c_str();
    d.nout = static_cast<int32_t>(out_dtype.size());
    for (size_t o = 0; o < out_dtype.size(); o++) {
      d.out_dtype[o] = out_dtype[o];
      d.out_ndim[o] = out_ndim[o];
    }
    d.ncode = static_cast<int32_t>(code.size());
    for (size_t i = 0; i < code.size(); i++) d.code[i] = code[i];
    d.parallel = parallel;
    check(tpux_kernel_register(&d));
  });
  m.def("_c_kernel_runs", [] { return tpux_kernel_runs(); });
  m.def("_fusion_runs", [](int kind) { return tpux_fusion_runs(kind); });
  m.def("_set_fusion", [](int kind, int mode) { check(tpux_set_fusion(kind, mode)); });
  m.def("_cache_clear", [] { tpug_cache_clear(); });
  m.def("_cache_set_dir", [](const std::string& dir) { check(tpug_cache_set_dir(dir.c_str())); });
  // ---- capture / replay of whole programs (torch.compile, torch_tpu/_compile.py).
  // A capture handle is an opaque integer; Python frees it with _capture_free.
  m.def("_capture_begin", [](int d) {
    py::gil_scoped_release nogil;
    check(tpug_capture_begin(d));
  });
  // -> (handle or 0, reason index of the flush that cut the capture or -1)
  m.def("_capture_end", [](int d) {
    tpug_capture* c = nullptr;
    int cut = -1;
    {
      py::gil_scoped_release nogil;
      check(tpug_capture_end(d, &c, &cut));
    }
    return std::make_pair(reinterpret_cast<uintptr_t>(c), cut);
  });
  m.def("_flush_reason", [](int r) {
    return std::string(r >= 0 && r < TPUG_NUM_REASONS ? kReasons[r] : "none");
  });
  m.def("_capturing", [](int d) { return tpug_capturing(d); });  // 0 no, 1 yes, 2 cut
  m.def("_capture_free", [](uintptr_t h) { tpug_capture_free(reinterpret_cast<tpug_capture*>(h)); });
  m.def("_capture_bases", [](uintptr_t h) {
    auto* c = reinterpret_cast<tpug_capture*>(h);
    int n = tpug_capture_bases(c, nullptr, 0);
    check(n < 0 ? n : TPU_OK);
    std::vector<const void*> b(static_cast<size_t>(n));
    tpug_capture_bases(c, b.data(), n);
    std::vector<uintptr_t> r;
    for (const void* p : b) r.push_back(reinterpret_cast<uintptr_t>(p));
    return r;
  });
  m.def("_capture_rng", [](uintptr_t h) {
    auto* c = reinterpret_cast<tpug_capture*>(h);
    int n = tpug_capture_rng(c, nullptr, 0);
    std::vector<int64_t> k(2 * static_cast<size_t>(n));
    tpug_capture_rng(c, k.data(), n);
    return k;
  });
  m.def("_capture_run", [](uintptr_t h, int d, const std::vector<uintptr_t>& from,
                           const std::vector<uintptr_t>& to, const std::vector<int64_t>& keys) {
    TORCH_CHECK(from.size() == to.size(), "_capture_run: relocation lists differ in length");
    std::vector<const void*> f;
    std::vector<void*> t;
    for (size_t i = 0; i < from.size(); i++) {
      f.push_back(reinterpret_cast<const void*>(from[i]));
      t.push_back(reinterpret_cast<void*>(to[i]));
    }
    tpurt_stream* s = current_stream(static_cast<c10::DeviceIndex>(d));
    py::gil_scoped_release nogil;
    check(tpug_capture_run(reinterpret_cast<tpug_capture*>(h), s, static_cast<int>(f.size()),
                           f.data(), t.data(), keys.empty() ? nullptr : keys.data()));
  });
  m.def("_current_stream_id", [](int d) { return current_stream_id(static_cast<c10::DeviceIndex>(d)); });
  m.def("_trace_enable", [](bool on) { tpug_trace_enable(on ? 1 : 0); });
  m.def("_trace_enabled", [] { return tpug_trace_enabled() != 0; });
  // Drain the program trace: (events as dicts, dropped count).
  m.def("_trace_drain", [] {
    std::vector<tpug_trace_event> buf(4096);
    py::list out;
    uint64_t dropped = 0;
    for (;;) {
      int n = tpug_trace_drain(buf.data(), static_cast<int>(buf.size()), &dropped);
      for (int i = 0; i < n; i++) {
        const auto& e = buf[i];
        py::dict d;
        d["name"] = std::string(e.name);
        d["program"] = e.program;
        d["device"] = e.device;
        d["stream"] = e.stream;
        d["ops"] = e.nops;
        d["reason"] = (e.reason >= 0 && e.reason < TPUG_NUM_REASONS) ? kReasons[e.reason] : "?";
        d["start_ns"] = e.start_ns;
        d["end_ns"] = e.end_ns;
        d["bytes"] = e.bytes;
        d["flops"] = e.flops;
        out.append(d);
      }
      if (n < static_cast<int>(buf.size())) break;
    }
    return py::make_tuple(out, dropped);
  });
}

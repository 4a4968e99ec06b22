// pallas.cpp - torch_tpu._C entry points of torch.tpu.pallas (jax_op): the
// C runtime imports a StableHLO module into an IR graph
// (tpulw_import_stablehlo) and runs it on tpu tensors like an op
// (tpulw_launch_graph). This file only converts tensors to views.
#include "glue.h"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <vector>

namespace py = pybind11;

namespace torch_tpu {

static tpuir_graph* graph_of(uintptr_t h) { return reinterpret_cast<tpuir_graph*>(h); }

void init_pallas(py::module& m) {
  // Import generic-form StableHLO text; `inputs` give the argument
  // descriptors (dtype/shape, checked against @main). Returns an opaque
  // graph handle that lives for the process.
  m.def("_shlo_import", [](const std::string& text, const std::vector<at::Tensor>& inputs, int precision) {
    std::vector<int> dts, nds;
    std::vector<int64_t> sizes(inputs.size() * TPU_MAX_DIMS + 1, 0);
    for (size_t i = 0; i < inputs.size(); i++) {
      int dt = to_tpu_dtype(inputs[i].scalar_type());
      TORCH_CHECK_NOT_IMPLEMENTED(dt >= 0, "jax_op: unsupported dtype ", inputs[i].scalar_type());
      TORCH_CHECK(inputs[i].dim() <= TPU_MAX_DIMS, "jax_op: too many dims");
      dts.push_back(dt);
      nds.push_back(static_cast<int>(inputs[i].dim()));
      for (int64_t k = 0; k < inputs[i].dim(); k++) sizes[i * TPU_MAX_DIMS + k] = inputs[i].size(k);
    }
    tpuir_graph* g = nullptr;
    {
      py::gil_scoped_release nogil;
      check(tpulw_import_stablehlo(text.c_str(), static_cast<int>(inputs.size()), dts.data(), nds.data(),
                                   sizes.data(), precision, &g));
    }
    return reinterpret_cast<uintptr_t>(g);
  });
  // [(tpu_dtype, [sizes])] of the graph's outputs
  m.def("_shlo_outputs", [](uintptr_t h) {
    const tpuir_graph* g = graph_of(h);
    std::vector<std::pair<int, std::vector<int64_t>>> outs;
    for (int i = 0; i < tpuir_num_outputs(g); i++) {
      int dt, nd;
      int64_t sz[TPU_MAX_DIMS];
      check(tpuir_value_info(g, tpuir_output(g, i), &dt, &nd, sz));
      outs.emplace_back(dt, std::vector<int64_t>(sz, sz + nd));
    }
    return outs;
  });
  m.def("_shlo_num_nodes", [](uintptr_t h) { return tpuir_num_nodes(graph_of(h)); });
  m.def("_shlo_free", [](uintptr_t h) { tpuir_graph_free(graph_of(h)); });
  // Run the graph on tpu tensors (device d); returns new output tensors.
  m.def("_shlo_run", [](uintptr_t h, const std::vector<at::Tensor>& inputs, int d) {
    const tpuir_graph* g = graph_of(h);
    std::vector<tpu_view> ins, outs;
    for (const auto& t : inputs) {
      TORCH_CHECK(t.device().type() == c10::DeviceType::PrivateUse1 && t.device().index() == d,
                  "jax_op: every tensor argument must be on tpu:", d, ", got ", t.device());
      ins.push_back(make_view(t));
    }
    std::vector<at::Tensor> res;
    for (int i = 0; i < tpuir_num_outputs(g); i++) {
      int dt, nd;
      int64_t sz[TPU_MAX_DIMS];
      check(tpuir_value_info(g, tpuir_output(g, i), &dt, &nd, sz));
      res.push_back(empty_tpu(c10::IntArrayRef(sz, nd), to_scalar_type(dt), static_cast<c10::DeviceIndex>(d)));
      outs.push_back(make_view(res.back()));
    }
    check(tpulw_launch_graph(current_stream(static_cast<c10::DeviceIndex>(d)), g, static_cast<int>(ins.size()),
                             ins.data(), static_cast<int>(outs.size()), outs.data()));
    return res;
  });
}

}  // namespace torch_tpu

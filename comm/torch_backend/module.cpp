// ringgrad_torch._C, the extension of the ringgrad_torch package (__init__.py imports torch
// first, then this): importing it registers the "ringgrad" backend with
// torch.distributed for CPU tensors, so `dist.init_process_group("ringgrad")` runs a script's
// collectives on ringgrad's ring. The only file that includes pybind11.
#include <pybind11/chrono.h>
#include <torch/csrc/utils/pybind.h>

#include "comm/torch_backend/ringgrad_backend.h"

namespace py = pybind11;
using ringgrad::torch_backend::RinggradBackend;

namespace {

// torch.distributed's creator signature for a backend without the extended API.
c10::intrusive_ptr<RinggradBackend> create_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                   int rank, int size,
                                                   std::chrono::milliseconds timeout) {
  return c10::make_intrusive<RinggradBackend>(store, rank, size, timeout);
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "ringgrad's collectives as the torch.distributed backend \"ringgrad\" (CPU tensors)";
  // Registers torch's c10d types (Backend, Store) with pybind11 before ours derive from them.
  py::object dist = py::module_::import("torch.distributed");
  py::class_<RinggradBackend, c10d::Backend, c10::intrusive_ptr<RinggradBackend>>(
      m, "RinggradBackend",
      "A ringgrad ring process group as a c10d Backend (made by init_process_group)");
  // Connecting the ranks blocks, so the GIL is released while it does.
  m.def("create_backend", &create_backend, py::arg("store"), py::arg("rank"), py::arg("size"),
        py::arg("timeout"), py::call_guard<py::gil_scoped_release>(),
        "What torch.distributed calls for init_process_group(\"ringgrad\") and new_group");
  py::object backend = dist.attr("Backend");
  if (!backend.attr("_plugins").contains("RINGGRAD"))  // importing twice registers once
    backend.attr("register_backend")("ringgrad", m.attr("create_backend"),
                                     py::arg("devices") = std::vector<std::string>{"cpu"});
}

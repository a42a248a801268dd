// ringgrad_torch._C, the extension of the ringgrad_torch package (__init__.py imports torch
// first, then this): importing it registers the "ringgrad" backend with
// torch.distributed for CPU tensors, so `dist.init_process_group("ringgrad")` runs a script's
// collectives on ringgrad's ring. The only file that includes pybind11.
#include <pybind11/chrono.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <mutex>
#include <vector>

#include "comm/torch_backend/ringgrad_backend.h"

namespace py = pybind11;
using ringgrad::torch_backend::RinggradBackend;

namespace {

// The backends made so far, for shutdown_at_exit; an expired entry is a backend destroyed.
struct LiveBackends {
  std::mutex mu;
  std::vector<c10::weak_intrusive_ptr<RinggradBackend>> all;
};

LiveBackends& live_backends() {
  static LiveBackends* live = new LiveBackends;  // leaked: backends may outlive static teardown
  return *live;
}

// torch.distributed's creator signature for a backend without the extended API.
c10::intrusive_ptr<RinggradBackend> create_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                   int rank, int size,
                                                   std::chrono::milliseconds timeout) {
  auto backend = c10::make_intrusive<RinggradBackend>(store, rank, size, timeout);
  LiveBackends& live = live_backends();
  std::lock_guard<std::mutex> lock(live.mu);
  // Destroyed backends leave: a weak pointer keeps its object's memory (many new_group calls).
  live.all.erase(std::remove_if(live.all.begin(), live.all.end(),
                                [](const auto& weak) { return weak.expired(); }),
                 live.all.end());
  live.all.emplace_back(backend);
  return backend;
}

// Run by Python's atexit, before the interpreter finalizes: shuts down every backend a script
// left alive (no destroy_process_group). Once Python finalizes, a thread that takes the GIL is
// ended with pthread_exit, which aborts the process when that thread is in C++ code that cannot
// be unwound (a destructor): one of the plugin's threads (the completer, by their start order,
// which may drop the last reference to a finished collective's tensors) was ended so in a
// quarter to most of such exits here.
void shutdown_at_exit() {
  std::vector<c10::intrusive_ptr<RinggradBackend>> alive;
  {
    LiveBackends& live = live_backends();
    std::lock_guard<std::mutex> lock(live.mu);
    for (auto& weak : live.all)
      if (auto backend = weak.lock()) alive.push_back(std::move(backend));
    live.all.clear();
  }
  for (auto& backend : alive) backend->shutdown();  // releases the GIL while it joins
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
  m.def("_shutdown_at_exit", &shutdown_at_exit,
        "Shuts down the ringgrad backends still alive (registered with atexit)");
  py::module_::import("atexit").attr("register")(m.attr("_shutdown_at_exit"));
  py::object backend = dist.attr("Backend");
  if (!backend.attr("_plugins").contains("RINGGRAD"))  // importing twice registers once
    backend.attr("register_backend")("ringgrad", m.attr("create_backend"),
                                     py::arg("devices") = std::vector<std::string>{"cpu"});
}

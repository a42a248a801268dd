// Helpers for the GPU suite (test_comm_gpu): cases skip themselves on a machine without a
// usable CUDA device (tests/skip.h: CTest reports them as Skipped, never as passed); host-built
// values, device-vs-host comparison, and a DDP Reducer check shared by the ring and nccl
// backends.
#pragma once
#include "comm/reducer/reducer.h"
#include "core/cuda_memory.h"
#include "tests/comm/ring_fixtures.h"
#include "tests/skip.h"

namespace ringgrad::comm::testing {

inline bool skip_without_cuda() {
  if (cuda_device_count() > 0) return false;
  ringgrad::testing::skip_test("no CUDA device: " + cuda_unavailable_reason());
  return true;
}

inline Tensor host_values(int64_t count, DType dtype, const std::function<double(int64_t)>& v) {
  Tensor t = Tensor::empty({count}, dtype);
  for (int64_t i = 0; i < count; ++i) t.set_element(i, v(i));
  return t;
}

inline std::string first_mismatch(const Tensor& device, const Tensor& want) {
  Tensor got = device.to(Device::cpu());
  for (int64_t i = 0; i < want.numel(); ++i)
    if (got.element(i) != want.element(i))
      return str_cat("element ", i, " is ", got.element(i), ", expected ", want.element(i));
  return "";
}

// Two iterations: the second rebuilds the buckets from rank 0's ready order (a broadcast).
inline void check_reducer_averages(ProcessGroup& pg, int rank, std::vector<std::string>& errors) {
  const Device gpu = Device::cuda(0);
  std::vector<Tensor> params = {Tensor::zeros({1000}, DType::f32, gpu),
                                Tensor::zeros({37}, DType::f32, gpu)};
  std::vector<Tensor> views;
  Reducer reducer(params, {"a", "b"}, pg, ReducerOptions{},
                  [&](const std::vector<Tensor>& v) { views = v; });
  const int world = pg.size();
  for (int iteration = 0; iteration < 2; ++iteration) {
    reducer.prepare_for_backward();
    for (size_t i = 0; i < views.size(); ++i)
      views[i].copy_from(host_values(views[i].numel(), DType::f32,
                                     [&](int64_t j) { return (rank + 1) * (j % 5 + i); }));
    reducer.mark_ready(1);
    reducer.mark_ready(0);
    reducer.finalize_backward();
    const double mean_factor = (world + 1) / 2.0;  // mean of rank + 1 over the ranks
    for (size_t i = 0; i < views.size(); ++i) {
      if (!views[i].is_cuda()) errors.push_back("a gradient view left the device");
      const std::string m = first_mismatch(
          views[i], host_values(views[i].numel(), DType::f32,
                                [&](int64_t j) { return mean_factor * (j % 5 + i); }));
      if (!m.empty())
        errors.push_back(str_cat("reducer iteration ", iteration, " param ", i, ": ", m));
    }
  }
}

}  // namespace ringgrad::comm::testing

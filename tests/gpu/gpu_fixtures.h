// Shared by the tests/gpu suites: the skip check every test case starts with, host <-> device
// helpers and the CPU-vs-CUDA comparison. A test case without a usable device returns at once
// after skip_test("no CUDA device: <reason>"), which CTest reports as Skipped (tests/skip.h).
#pragma once
#include <doctest/doctest.h>

#include <string>

#include "core/cuda_memory.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "tests/kernels/gradcheck.h"
#include "tests/skip.h"

namespace ringgrad::testing {

// if (skip_without_cuda()) return;
inline bool skip_without_cuda() {
  static const std::string reason = cuda_unavailable_reason();
  if (reason.empty()) return false;
  skip_test("no CUDA device: " + reason);
  return true;
}

inline Tensor on_gpu(const Tensor& t) { return t.defined() ? t.to(Device::cuda(0)) : Tensor(); }

inline Tensor empty_gpu(const Shape& shape, DType dtype = DType::f32) {
  return Tensor::empty(shape, dtype, Device::cuda(0));
}

inline Tensor random_f32(const Shape& shape, Generator& g, double scale = 1.0) {
  return random_tensor(shape, g, DType::f32, scale);
}

// The CUDA result against the CPU oracle: largest |gpu - cpu| / max(1, |cpu|) <= tol.
inline void check_gpu_close(const Tensor& gpu, const Tensor& cpu, double tol, const char* what) {
  REQUIRE(gpu.is_cuda());
  check_close(gpu.to(Device::cpu()), cpu, tol, what);
}

constexpr double kTol = 1e-4;  // float32 kernels whose summation order differs from the CPU's

}  // namespace ringgrad::testing

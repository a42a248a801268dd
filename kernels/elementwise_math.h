// Element math shared by the CPU loops and the CUDA kernels (RG_HD: __host__ __device__ under
// nvcc).
#pragma once
#include "core/host_device.h"

namespace ringgrad::kernels {

// NaN stays NaN, as in PyTorch: a comparison with NaN is false, so it takes the `x` branch.
template <class T>
RG_HD T relu(T x) {
  return x < T(0) ? T(0) : x;
}
// Gradient of relu through its output: y > 0 exactly where x > 0. Where y is NaN the gradient
// passes through (PyTorch's threshold_backward), so the NaN is not silently cut off.
template <class T>
RG_HD T relu_grad(T dy, T y) {
  return y <= T(0) ? T(0) : dy;
}

}  // namespace ringgrad::kernels

// Element math shared by the CPU loops and the CUDA kernels (RG_HD: __host__ __device__ under nvcc).
#pragma once
#include "core/host_device.h"

namespace ringgrad::kernels {

template <class T>
RG_HD T relu(T x) { return x > T(0) ? x : T(0); }
// Gradient of relu through its output: y > 0 exactly where x > 0.
template <class T>
RG_HD T relu_grad(T dy, T y) { return y > T(0) ? dy : T(0); }

}  // namespace ringgrad::kernels

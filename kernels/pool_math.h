// Pooling element math shared by kernels/cpu/pool.cpp and a future CUDA kernel (RG_HD:
// __host__ __device__ under nvcc).
#pragma once
#include "core/host_device.h"

namespace ringgrad::kernels {

// Max-pool scan: a candidate replaces the running maximum when strictly larger, so ties keep the
// first position; NaN always replaces it (candidate != candidate), so NaN propagates as in PyTorch.
template <class T>
RG_HD bool max_pool_takes(T candidate, T best) {
  return candidate > best || candidate != candidate;
}

}  // namespace ringgrad::kernels

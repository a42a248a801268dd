// Private helpers of the CUDA kernels in kernels/cuda/*.cu: the launch context (device guard +
// compute stream), grid sizes for grid-stride loops, the element types a kernel may be
// instantiated for (float, Half, BFloat16; arithmetic in float through kernels/cast_math.h),
// block reductions, and argument checks.
// Not part of the kernels API; nothing outside kernels/cuda includes it.
#pragma once
#include <cuda_runtime.h>

#include <initializer_list>

#include "core/cuda_check.h"
#include "core/cuda_memory.h"
#include "core/half.h"
#include "core/tensor.h"
#include "kernels/cast_math.h"

namespace ringgrad::kernels::cuda {

constexpr int kThreads = 256;

// Enough blocks of kThreads for a grid-stride loop over n items to fill an H100/H200 several
// times over; more would only add scheduling overhead. At least one so n == 0 launches cleanly.
inline int blocks_for(int64_t n) {
  constexpr int64_t kMaxBlocks = 8192;
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < 1 ? 1 : (b > kMaxBlocks ? kMaxBlocks : b));
}

__device__ inline int64_t global_thread() { return blockIdx.x * int64_t(blockDim.x) + threadIdx.x; }
__device__ inline int64_t grid_threads() { return int64_t(gridDim.x) * blockDim.x; }

// Where a kernel of tensor t runs: t's device made current, and that device's compute stream.
struct Launch {
  explicit Launch(const Tensor& t)
      : guard(t.device().index),
        stream(static_cast<cudaStream_t>(cuda_compute_stream(t.device().index))) {}
  CudaDeviceGuard guard;
  cudaStream_t stream;
};

// Calls f(T{}) with T = float, Half or BFloat16 according to t.
template <class F>
void dispatch_cuda_float(DType t, const char* op, F&& f) {
  if (t == DType::f32) return f(float{});
  if (t == DType::f16) return f(Half{});
  if (t == DType::bf16) return f(BFloat16{});
  RG_THROW(InvalidArgument, op, ": CUDA kernel supports float32, float16 and bfloat16, got ",
           dtype_name(t));
}

inline void check_f32(const Tensor& t, const char* op, const char* name) {
  RG_CHECK(t.dtype() == DType::f32, op, ": the CUDA kernel takes float32 ", name, ", got ",
           dtype_name(t.dtype()));
}

// t is defined with the expected shape and dtype; messages name op and operand.
inline void check_operand(const Tensor& t, const Shape& expected, DType dtype, const char* op,
                          const char* name) {
  RG_CHECK(t.defined(), op, ": ", name, " is undefined");
  RG_CHECK(t.shape() == expected, op, ": ", name, " has shape ", t.shape().str(), ", expected ",
           expected.str());
  RG_CHECK(t.dtype() == dtype, op, ": ", name, " is ", dtype_name(t.dtype()), ", expected ",
           dtype_name(dtype));
}

// Sum over the block of v, returned to thread 0 (other threads get partial sums). blockDim.x
// is a multiple of 32; every thread of the block must call it. Safe to call repeatedly: the
// leading barrier keeps a new call from overwriting partials the previous one still reads.
template <class T>
__device__ T block_sum(T v) {
  __shared__ T warp_partial[32];
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads();
  if (lane == 0) warp_partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < int(blockDim.x / 32) ? warp_partial[lane] : T(0);
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
  }
  return v;
}

}  // namespace ringgrad::kernels::cuda

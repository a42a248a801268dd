// Per-channel reductions over data laid out as (N, C, HW), shared by batchnorm.cu (sums of x
// and x^2, of dy and dy (x - mean)) and conv2d.cu (the bias gradient). Private to kernels/cuda.
//
// Algorithm: the grid is (splits, C). Block (s, c) walks channel c's N*HW values with stride
// splits*blockDim, adds two terms per value into double accumulators, sums them over the block
// (block_sum) and adds the block's result to sums[c] and sums[C + c] with a double atomicAdd.
// Splitting a channel over several blocks keeps the device busy when C is small (16 channels
// of ResNet-20 would otherwise be 16 blocks); the atomics make the summation order, and so
// the last bits, vary from run to run.
#pragma once
#include "kernels/cuda/cuda_common.cuh"

namespace ringgrad::kernels::cuda {

// Terms: a functor with __device__ void operator()(int64_t at, int64_t c, double& a,
// double& b) const that adds the two terms of element `at` (flat index) of channel c.
template <class Terms>
__global__ void channel_reduce_kernel(double* sums, Terms terms, int64_t N, int64_t C, int64_t HW) {
  const int64_t c = blockIdx.y;
  const int64_t count = N * HW;
  double a = 0, b = 0;
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < count;
       j += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = j / HW;
    terms((n * C + c) * HW + (j - n * HW), c, a, b);
  }
  a = block_sum(a);
  b = block_sum(b);
  if (threadIdx.x == 0) {
    atomicAdd(&sums[c], a);
    atomicAdd(&sums[C + c], b);
  }
}

// sums: 2*C doubles on the device, overwritten with (sum of a per channel, sum of b per channel).
template <class Terms>
void channel_reduce(double* sums, const Terms& terms, int64_t N, int64_t C, int64_t HW,
                    cudaStream_t stream, const char* op) {
  RG_CHECK(C >= 1 && C <= 65535, op, ": ", C, " channels (the CUDA reduction takes 1..65535)");
  CUDA_CHECK(cudaMemsetAsync(sums, 0, 2 * C * sizeof(double), stream));
  constexpr int64_t kValuesPerThread = 16;  // enough work per thread to hide the block sum
  constexpr int64_t kTargetBlocks = 2048;   // about 16 blocks per SM on an H200
  int64_t splits = (N * HW + kThreads * kValuesPerThread - 1) / (kThreads * kValuesPerThread);
  const int64_t max_splits = kTargetBlocks / C > 1 ? kTargetBlocks / C : 1;
  splits = splits < 1 ? 1 : (splits > max_splits ? max_splits : splits);
  channel_reduce_kernel<<<dim3(static_cast<unsigned>(splits), static_cast<unsigned>(C)), kThreads,
                          0, stream>>>(sums, terms, N, C, HW);
  CUDA_CHECK_LAUNCH(op);
}

}  // namespace ringgrad::kernels::cuda

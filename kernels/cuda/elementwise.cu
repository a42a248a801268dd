// Elementwise kernels on CUDA (relu forward/backward so far): one thread per element,
// as the CPU kernel (kernels/elementwise_math.h).
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/elementwise_math.h"

namespace ringgrad::kernels::cuda {

namespace {

template <class T>
__global__ void relu_forward_kernel(T* y, const T* x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(blockDim.x) * gridDim.x)
    y[i] = relu(x[i]);
}

template <class T>
__global__ void relu_backward_kernel(T* dx, const T* dy, const T* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(blockDim.x) * gridDim.x)
    dx[i] = relu_grad(dy[i], y[i]);
}

constexpr int kThreads = 256;
int blocks_for(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < 65535 ? (b > 0 ? b : 1) : 65535);
}

void check_launch(const char* what) {
  cudaError_t err = cudaGetLastError();
  RG_CHECK(err == cudaSuccess, what, ": ", cudaGetErrorString(err));
}

}  // namespace

void relu_forward(Tensor& y, const Tensor& x) {
  RG_CHECK(x.dtype() == DType::f32, "cuda relu_forward: float32 only for now");
  relu_forward_kernel<<<blocks_for(x.numel()), kThreads>>>(y.data<float>(), x.data<float>(),
                                                           x.numel());
  check_launch("relu_forward_kernel");
}

void relu_backward(Tensor& dx, const Tensor& dy, const Tensor& y) {
  RG_CHECK(y.dtype() == DType::f32, "cuda relu_backward: float32 only for now");
  relu_backward_kernel<<<blocks_for(y.numel()), kThreads>>>(dx.data<float>(), dy.data<float>(),
                                                            y.data<float>(), y.numel());
  check_launch("relu_backward_kernel");
}

}  // namespace ringgrad::kernels::cuda

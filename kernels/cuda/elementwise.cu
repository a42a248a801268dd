// Elementwise kernels on CUDA: relu forward/backward, add, fused add+relu and scale, for
// float32, float16 and bfloat16 (computed in float), and the int64 counter increment. One
// grid-stride loop each, with the element math of the CPU kernels (kernels/elementwise_math.h).
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/elementwise_math.h"

namespace ringgrad::kernels::cuda {

namespace {

template <class T>
__global__ void relu_forward_kernel(T* y, const T* x, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads())
    y[i] = convert_element<T>(relu(as_float(x[i])));
}

template <class T>
__global__ void relu_backward_kernel(T* dx, const T* dy, const T* y, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads())
    dx[i] = convert_element<T>(relu_grad(as_float(dy[i]), as_float(y[i])));
}

// y = a + b, or relu(a + b) with fuse_relu.
template <class T>
__global__ void add_kernel(T* y, const T* a, const T* b, int64_t n, bool fuse_relu) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const float sum = as_float(a[i]) + as_float(b[i]);
    y[i] = convert_element<T>(fuse_relu ? relu(sum) : sum);
  }
}

template <class T>
__global__ void scale_kernel(T* a, float alpha, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads())
    a[i] = convert_element<T>(as_float(a[i]) * alpha);
}

__global__ void increment_kernel(int64_t* counter) { ++*counter; }

void launch_add(Tensor& y, const Tensor& a, const Tensor& b, bool fuse_relu, const char* op) {
  dispatch_cuda_float(a.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    Launch l(a);
    add_kernel<<<blocks_for(a.numel()), kThreads, 0, l.stream>>>(y.data<T>(), a.data<T>(),
                                                                 b.data<T>(), a.numel(), fuse_relu);
    CUDA_CHECK_LAUNCH(op);
  });
}

}  // namespace

void relu_forward(Tensor& y, const Tensor& x) {
  dispatch_cuda_float(x.dtype(), "relu_forward", [&](auto tag) {
    using T = decltype(tag);
    Launch l(x);
    relu_forward_kernel<<<blocks_for(x.numel()), kThreads, 0, l.stream>>>(y.data<T>(), x.data<T>(),
                                                                          x.numel());
    CUDA_CHECK_LAUNCH("relu_forward_kernel");
  });
}

void relu_backward(Tensor& dx, const Tensor& dy, const Tensor& y) {
  dispatch_cuda_float(y.dtype(), "relu_backward", [&](auto tag) {
    using T = decltype(tag);
    Launch l(y);
    relu_backward_kernel<<<blocks_for(y.numel()), kThreads, 0, l.stream>>>(
        dx.data<T>(), dy.data<T>(), y.data<T>(), y.numel());
    CUDA_CHECK_LAUNCH("relu_backward_kernel");
  });
}

void add(Tensor& y, const Tensor& a, const Tensor& b) { launch_add(y, a, b, false, "add"); }

void add_relu_forward(Tensor& y, const Tensor& a, const Tensor& b) {
  launch_add(y, a, b, true, "add_relu_forward");
}

void scale_(Tensor& a, double alpha) {
  dispatch_cuda_float(a.dtype(), "scale_", [&](auto tag) {
    using T = decltype(tag);
    Launch l(a);
    scale_kernel<<<blocks_for(a.numel()), kThreads, 0, l.stream>>>(
        a.data<T>(), static_cast<float>(alpha), a.numel());
    CUDA_CHECK_LAUNCH("scale_kernel");
  });
}

void increment_(Tensor& counter) {
  Launch l(counter);
  increment_kernel<<<1, 1, 0, l.stream>>>(counter.data<int64_t>());
  CUDA_CHECK_LAUNCH("increment_kernel");
}

}  // namespace ringgrad::kernels::cuda

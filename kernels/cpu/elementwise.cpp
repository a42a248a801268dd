// relu forward/backward, add, fused add+relu, scale and the counter increment (CPU), and the entry points that send
// CUDA tensors to kernels/cuda (check_same has already required one device for all operands).
// Memory-bound loops: one OpenMP-parallel pass each.
#include "kernels/cpu/cpu_dispatch.h"
#include "kernels/elementwise_math.h"
#include "kernels/ops.h"
#include "ringgrad/config.h"
#ifdef HAVE_CUDA
#include "kernels/cuda/cuda_ops.h"
#endif

namespace ringgrad::kernels {

using cpu::check_same;
using cpu::dispatch_float;

void relu_forward(Tensor& y, const Tensor& x) {
  check_same(y, x, "relu_forward");
#ifdef HAVE_CUDA
  if (x.is_cuda()) return cuda::relu_forward(y, x);
#endif
  dispatch_float(x.dtype(), "relu_forward", [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
    const int64_t n = x.numel();
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) yp[i] = relu(xp[i]);
  });
}

void relu_backward(Tensor& dx, const Tensor& dy, const Tensor& y) {
  check_same(dx, dy, "relu_backward");
  check_same(dy, y, "relu_backward");
#ifdef HAVE_CUDA
  if (y.is_cuda()) return cuda::relu_backward(dx, dy, y);
#endif
  dispatch_float(y.dtype(), "relu_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* dyp = dy.data<T>();
    const T* yp = y.data<T>();
    T* dxp = dx.data<T>();
    const int64_t n = y.numel();
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) dxp[i] = relu_grad(dyp[i], yp[i]);
  });
}

void add(Tensor& y, const Tensor& a, const Tensor& b) {
  check_same(y, a, "add");
  check_same(a, b, "add");
#ifdef HAVE_CUDA
  if (a.is_cuda()) return cuda::add(y, a, b);
#endif
  dispatch_float(a.dtype(), "add", [&](auto tag) {
    using T = decltype(tag);
    const T* ap = a.data<T>();
    const T* bp = b.data<T>();
    T* yp = y.data<T>();
    const int64_t n = a.numel();
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) yp[i] = ap[i] + bp[i];
  });
}

void add_(Tensor& a, const Tensor& b) { add(a, a, b); }

void add_relu_forward(Tensor& y, const Tensor& a, const Tensor& b) {
  check_same(y, a, "add_relu_forward");
  check_same(a, b, "add_relu_forward");
#ifdef HAVE_CUDA
  if (a.is_cuda()) return cuda::add_relu_forward(y, a, b);
#endif
  dispatch_float(a.dtype(), "add_relu_forward", [&](auto tag) {
    using T = decltype(tag);
    const T* ap = a.data<T>();
    const T* bp = b.data<T>();
    T* yp = y.data<T>();
    const int64_t n = a.numel();
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) yp[i] = relu(ap[i] + bp[i]);
  });
}

void scale_(Tensor& a, double alpha) {
  RG_CHECK(a.defined(), "scale_: undefined tensor");
#ifdef HAVE_CUDA
  if (a.is_cuda()) return cuda::scale_(a, alpha);
#endif
  dispatch_float(a.dtype(), "scale_", [&](auto tag) {
    using T = decltype(tag);
    const T factor = static_cast<T>(alpha);
    T* ap = a.data<T>();
    const int64_t n = a.numel();
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) ap[i] *= factor;
  });
}

void increment_(Tensor& counter) {
  RG_CHECK(counter.defined() && counter.numel() == 1 && counter.dtype() == DType::i64,
           "increment_: needs a one-element int64 tensor, got ",
           counter.defined() ? dtype_name(counter.dtype()) : "undefined", " of shape ",
           counter.shape().str());
#ifdef HAVE_CUDA
  if (counter.is_cuda()) return cuda::increment_(counter);
#endif
  ++*counter.data<int64_t>();
}

}  // namespace ringgrad::kernels

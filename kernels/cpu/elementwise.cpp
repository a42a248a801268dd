// relu forward/backward, add, fused add+relu, scale and the counter increment on the CPU
// (kernels/ops.cpp has checked the operands: check_same). Memory-bound loops: one
// OpenMP-parallel pass each, with the element math of kernels/elementwise_math.h.
#include "kernels/cpu/cpu_dispatch.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/elementwise_math.h"

namespace ringgrad::kernels::cpu {

void relu_forward(Tensor& y, const Tensor& x) {
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

void add_relu_forward(Tensor& y, const Tensor& a, const Tensor& b) {
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
  dispatch_float(a.dtype(), "scale_", [&](auto tag) {
    using T = decltype(tag);
    const T factor = static_cast<T>(alpha);
    T* ap = a.data<T>();
    const int64_t n = a.numel();
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) ap[i] *= factor;
  });
}

void increment_(Tensor& counter) { ++*counter.data<int64_t>(); }

}  // namespace ringgrad::kernels::cpu

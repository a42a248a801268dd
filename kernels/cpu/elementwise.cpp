// relu forward/backward, add, fused add+relu and scale (CPU), and the entry points that send
// CUDA tensors to kernels/cuda. Memory-bound loops: one OpenMP-parallel pass each.
#include "kernels/elementwise_math.h"
#include "kernels/ops.h"
#include "ringgrad/config.h"
#ifdef HAVE_CUDA
#include "kernels/cuda/cuda_ops.h"
#endif

namespace ringgrad::kernels {

namespace {

void check_same(const Tensor& a, const Tensor& b, const char* op) {
  RG_CHECK(a.defined() && b.defined(), op, ": undefined tensor");
  RG_CHECK_EQ(a.numel(), b.numel(), op, ": element counts differ (", a.shape().str(), " vs ",
           b.shape().str(), ")");
  RG_CHECK(a.dtype() == b.dtype(), op, ": dtypes differ");
  RG_CHECK(a.device() == b.device(), op, ": devices differ (", a.device().str(), " vs ",
        b.device().str(), ")");
}

template <class F>
void dispatch_float(DType t, const char* op, F&& f) {
  if (t == DType::f32) return f(float{});
  if (t == DType::f64) return f(double{});
  RG_THROW(InvalidArgument, op, ": CPU kernel supports float32 and float64, got ", dtype_name(t));
}

}  // namespace

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

}  // namespace ringgrad::kernels

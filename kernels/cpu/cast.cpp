// cast and has_non_finite (CPU) and their entry points: dtype conversion for mixed precision
// and the GradScaler's inf/NaN test. Element math in kernels/cast_math.h, shared with CUDA.
#include "kernels/cast_math.h"
#include "kernels/cpu/cpu_dispatch.h"
#include "kernels/ops.h"
#include "ringgrad/config.h"
#ifdef HAVE_CUDA
#include "kernels/cuda/cuda_ops.h"
#endif

namespace ringgrad::kernels {

namespace {

// Calls f(T{}) with T = float, double, Half or BFloat16 according to t.
template <class F>
void dispatch_castable(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::f32:
      return f(float{});
    case DType::f64:
      return f(double{});
    case DType::f16:
      return f(Half{});
    case DType::bf16:
      return f(BFloat16{});
    default:
      break;
  }
  RG_THROW(InvalidArgument, op, ": supports float32, float64, float16 and bfloat16, got ",
           dtype_name(t));
}

}  // namespace

void cast(Tensor& y, const Tensor& x) {
  constexpr const char* op = "cast";
  RG_CHECK(x.defined() && y.defined(), op, ": x and y must be defined");
#ifdef HAVE_CUDA
  if (cpu::on_cuda(op, {{"y", y}, {"x", x}})) return cuda::cast(y, x);
#endif
  RG_CHECK(x.shape() == y.shape(), op, ": shapes differ (", x.shape().str(), " vs ",
           y.shape().str(), ")");
  if (x.dtype() == y.dtype()) return y.copy_from(x);
  // Through float: exact from f32 to f64, and from f64 to 16 bits the rounding Tensor::to uses.
  dispatch_castable(x.dtype(), op, [&](auto source) {
    dispatch_castable(y.dtype(), op, [&](auto target) {
      using S = decltype(source);
      using D = decltype(target);
      const S* xp = x.data<S>();
      D* yp = y.data<D>();
      const int64_t n = x.numel();
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < n; ++i) yp[i] = from_float<D>(to_float(xp[i]));
    });
  });
}

bool has_non_finite(const Tensor& x) {
  constexpr const char* op = "has_non_finite";
  RG_CHECK(x.defined(), op, ": x is undefined");
#ifdef HAVE_CUDA
  if (x.is_cuda()) return cuda::has_non_finite(x);
#endif
  bool found = false;
  dispatch_castable(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    const int64_t n = x.numel();
#pragma omp parallel for schedule(static) reduction(|| : found)
    for (int64_t i = 0; i < n; ++i) found = found || is_non_finite(widen(xp[i]));
  });
  return found;
}

}  // namespace ringgrad::kernels

// Casts between float32, float16 and bfloat16 on CUDA, and the inf/NaN test of the GradScaler.
// Element math: kernels/cast_math.h, shared with the CPU, so both round to the same bits.
#include "kernels/cast_math.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace ringgrad::kernels::cuda {

namespace {

template <class D, class S>
__global__ void cast_kernel(D* y, const S* x, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads())
    y[i] = from_float<D>(to_float(x[i]));
}

// found stays 0 unless some element is inf or NaN; every writer stores the same 1, so the
// race between them is harmless.
template <class T>
__global__ void non_finite_kernel(int32_t* found, const T* x, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads())
    if (is_non_finite(widen(x[i]))) *found = 1;
}

}  // namespace

void cast(Tensor& y, const Tensor& x) {
  constexpr const char* op = "cast";
  RG_CHECK(x.defined() && y.defined(), op, ": x and y must be defined");
  RG_CHECK(x.shape() == y.shape(), op, ": shapes differ (", x.shape().str(), " vs ",
           y.shape().str(), ")");
  if (x.numel() == 0) return;
  Launch l(x);
  if (x.dtype() == y.dtype()) {
    CUDA_CHECK(cudaMemcpyAsync(y.raw_data(), x.raw_data(), x.nbytes(), cudaMemcpyDeviceToDevice,
                               l.stream));
    return;
  }
  dispatch_cuda_float(x.dtype(), op, [&](auto source) {
    dispatch_cuda_float(y.dtype(), op, [&](auto target) {
      using S = decltype(source);
      using D = decltype(target);
      cast_kernel<<<blocks_for(x.numel()), kThreads, 0, l.stream>>>(y.data<D>(), x.data<S>(),
                                                                    x.numel());
      CUDA_CHECK_LAUNCH("cast_kernel");
    });
  });
}

bool has_non_finite(const Tensor& x) {
  constexpr const char* op = "has_non_finite";
  RG_CHECK(x.defined(), op, ": x is undefined");
  if (x.numel() == 0) return false;
  Launch l(x);
  Tensor found = Tensor::zeros({1}, DType::i32, x.device());
  dispatch_cuda_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    non_finite_kernel<<<blocks_for(x.numel()), kThreads, 0, l.stream>>>(found.data<int32_t>(),
                                                                        x.data<T>(), x.numel());
    CUDA_CHECK_LAUNCH("non_finite_kernel");
  });
  return found.to_vector<int32_t>()[0] != 0;
}

}  // namespace ringgrad::kernels::cuda

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
    y[i] = convert_element<D>(as_float(x[i]));
}

// Each thread counts its elements, then adds its count once (most add nothing).
template <class T>
__global__ void non_finite_kernel(unsigned long long* count, const T* x, int64_t n) {
  unsigned long long mine = 0;
  for (int64_t i = global_thread(); i < n; i += grid_threads()) mine += is_nonfinite(x[i]);
  if (mine) atomicAdd(count, mine);
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

int64_t count_nonfinite(const Tensor& x) {
  constexpr const char* op = "count_nonfinite";
  RG_CHECK(x.defined(), op, ": x is undefined");
  if (x.numel() == 0) return 0;
  Launch l(x);
  Tensor found = Tensor::zeros({1}, DType::i64, x.device());
  dispatch_cuda_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    non_finite_kernel<<<blocks_for(x.numel()), kThreads, 0, l.stream>>>(
        reinterpret_cast<unsigned long long*>(found.data<int64_t>()), x.data<T>(), x.numel());
    CUDA_CHECK_LAUNCH("non_finite_kernel");
  });
  return found.to_vector<int64_t>()[0];
}

}  // namespace ringgrad::kernels::cuda

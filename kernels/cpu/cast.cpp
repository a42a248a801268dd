// Casts between the floating dtypes and the inf/NaN count of mixed precision (CPU). Element
// math in kernels/cast_math.h; each is one OpenMP-parallel pass over memory.
#include "kernels/cast_math.h"
#include "kernels/cpu/cpu_dispatch.h"
#include "kernels/ops.h"
#include "ringgrad/config.h"
#ifdef HAVE_CUDA
#include "kernels/cuda/cuda_ops.h"
#endif

namespace ringgrad::kernels {

void cast(Tensor& dst, const Tensor& src) {
  constexpr const char* op = "cast";
  RG_CHECK(dst.defined() && src.defined(), op, ": undefined tensor");
  RG_CHECK_EQ(dst.numel(), src.numel(), op, ": element counts differ (", dst.shape().str(),
              " vs ", src.shape().str(), ")");
#ifdef HAVE_CUDA
  if (cpu::on_cuda(op, {{"dst", dst}, {"src", src}})) return cuda::cast(dst, src);
#endif
  cpu::check_cpu(dst, op);
  cpu::check_cpu(src, op);
  if (dst.dtype() == src.dtype()) return dst.copy_from(src);
  cpu::dispatch_floating(src.dtype(), op, [&](auto src_tag) {
    using S = decltype(src_tag);
    cpu::dispatch_floating(dst.dtype(), op, [&](auto dst_tag) {
      using D = decltype(dst_tag);
      const S* s = src.data<S>();
      D* d = dst.data<D>();
      const int64_t n = src.numel();
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < n; ++i) d[i] = convert_element<D>(s[i]);
    });
  });
}

int64_t count_nonfinite(const Tensor& t) {
  constexpr const char* op = "count_nonfinite";
  RG_CHECK(t.defined(), op, ": undefined tensor");
#ifdef HAVE_CUDA
  if (t.is_cuda()) return cuda::count_nonfinite(t);
#endif
  cpu::check_cpu(t, op);
  int64_t count = 0;
  cpu::dispatch_floating(t.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* p = t.data<T>();
    const int64_t n = t.numel();
#pragma omp parallel for schedule(static) reduction(+ : count)
    for (int64_t i = 0; i < n; ++i) count += is_nonfinite(p[i]);
  });
  return count;
}

}  // namespace ringgrad::kernels

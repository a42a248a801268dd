// Casts between the floating dtypes and the inf/NaN count of mixed precision on the CPU
// (kernels/ops.cpp has checked that both casts' operands are defined with equal element counts).
// Element math in kernels/cast_math.h; each is one OpenMP-parallel pass over memory.
#include "kernels/cast_math.h"
#include "kernels/cpu/cpu_dispatch.h"
#include "kernels/cpu/cpu_ops.h"

namespace ringgrad::kernels::cpu {

void cast(Tensor& dst, const Tensor& src) {
  constexpr const char* op = "cast";
  check_cpu(dst, op);
  check_cpu(src, op);
  if (dst.dtype() == src.dtype()) return dst.copy_from(src);
  dispatch_floating(src.dtype(), op, [&](auto src_tag) {
    using S = decltype(src_tag);
    dispatch_floating(dst.dtype(), op, [&](auto dst_tag) {
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
  check_cpu(t, op);
  int64_t count = 0;
  dispatch_floating(t.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* p = t.data<T>();
    const int64_t n = t.numel();
#pragma omp parallel for schedule(static) reduction(+ : count)
    for (int64_t i = 0; i < n; ++i) count += is_nonfinite(p[i]);
  });
  return count;
}

}  // namespace ringgrad::kernels::cpu

// Casts between the floating dtypes and the inf/NaN count of mixed precision on the CPU
// (kernels/ops.cpp has checked that both casts' operands are defined with equal element counts).
// Element math in kernels/cast_math.h; each is one OpenMP-parallel pass over memory.
#include <algorithm>

#include "kernels/cast_math.h"
#include "kernels/cpu/avx512_bw.h"  // first_lanes16, rounded_to_bf16, narrowed_to_bf16
#include "kernels/cpu/cpu_dispatch.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/cpu_ops.h"

namespace ringgrad::kernels::cpu {

namespace {

// f32 -> bf16 sixteen at a time: float_to_bf16's rounding in integer lanes, so the same bits,
// NaN and subnormals included (rounded_to_bf16, avx512_bw.h), or on CPUs with AVX512-BF16 by its
// instruction where no value is subnormal (narrowed_to_bf16). Autocast makes this cast of every
// conv and linear weight at every step; the element loop, compiled for AVX2, narrows eight lanes
// a step through a pack and a permute across lanes.
__attribute__((target("avx512f"))) void f32_to_bf16_avx512(BFloat16* d, const float* s, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 lanes = first_lanes16(n - i);
    const __m512 v = _mm512_maskz_loadu_ps(lanes, s + i);
    _mm512_mask_cvtepi32_storeu_epi16(d + i, lanes, rounded_to_bf16(v));
  }
}

RG_AVX512_BF16 void f32_to_bf16_avx512_bf16(BFloat16* d, const float* s, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 lanes = first_lanes16(n - i);
    _mm256_mask_storeu_epi16(bits(d + i), lanes,
                             narrowed_to_bf16(_mm512_maskz_loadu_ps(lanes, s + i)));
  }
}

}  // namespace

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
      if constexpr (std::is_same_v<S, float> && std::is_same_v<D, BFloat16>) {
        if (cpu_has(Isa::avx512)) {
          constexpr int64_t kBlock = 1 << 14;  // elements a task: whole vectors, 64 KiB read
#pragma omp parallel for schedule(static)
          for (int64_t first = 0; first < n; first += kBlock) {
            const int64_t count = std::min(kBlock, n - first);
            if (cpu_has(Isa::avx512_bf16))
              f32_to_bf16_avx512_bf16(d + first, s + first, count);
            else
              f32_to_bf16_avx512(d + first, s + first, count);
          }
          return;
        }
      }
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

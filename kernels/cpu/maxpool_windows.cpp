// Max pooling by window tables (Note [Max pooling by window tables], maxpool_windows.h).
#include "kernels/cpu/maxpool_windows.h"

#include <immintrin.h>

#include <algorithm>
#include <limits>

#define RG_AVX2 __attribute__((target("avx2")))

namespace ringgrad::kernels::cpu {

namespace {

constexpr int64_t kLanes = 8;  // floats per AVX2 vector

}  // namespace

MaxPoolWindows::MaxPoolWindows(int64_t H, int64_t W, int64_t P, int64_t Q, const Pool2dParams& p)
    : plane_(H * W),
      outputs_(P * Q),
      stride_((P * Q + kLanes - 1) / kLanes * kLanes),
      slots_(p.kernel_h * p.kernel_w),
      offset_(slots_ * stride_, static_cast<int32_t>(plane_)),
      first_(stride_, 0) {
  for (int64_t oh = 0; oh < P; ++oh) {
    const int64_t top = oh * p.stride_h - p.pad_h;
    for (int64_t ow = 0; ow < Q; ++ow) {
      const int64_t left = ow * p.stride_w - p.pad_w, o = oh * Q + ow;
      first_[o] = static_cast<int32_t>(std::max<int64_t>(top, 0) * W + std::max<int64_t>(left, 0));
      for (int64_t r = 0; r < p.kernel_h; ++r) {
        for (int64_t s = 0; s < p.kernel_w; ++s) {
          const int64_t h = top + r, w = left + s;
          if (h < 0 || h >= H || w < 0 || w >= W) continue;
          offset_[(r * p.kernel_w + s) * stride_ + o] = static_cast<int32_t>(h * W + w);
        }
      }
    }
  }
}

RG_AVX2 void MaxPoolWindows::pool(float* y, int32_t* index, const float* padded) const {
  for (int64_t o = 0; o < outputs_; o += kLanes) {
    __m256 best = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
    __m256i best_at = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(&first_[o]));
    for (int64_t slot = 0; slot < slots_; ++slot) {
      const __m256i at =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(&offset_[slot * stride_ + o]));
      const __m256 v = _mm256_i32gather_ps(padded, at, sizeof(float));
      // max_pool_takes: larger, or NaN.
      const __m256 takes =
          _mm256_or_ps(_mm256_cmp_ps(v, best, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
      best = _mm256_blendv_ps(best, v, takes);
      best_at = _mm256_castps_si256(
          _mm256_blendv_ps(_mm256_castsi256_ps(best_at), _mm256_castsi256_ps(at), takes));
    }
    const int64_t n = std::min(kLanes, outputs_ - o);
    if (n == kLanes) {
      _mm256_storeu_ps(y + o, best);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(index + o), best_at);
      continue;
    }
    alignas(32) float values[kLanes];
    alignas(32) int32_t indices[kLanes];
    _mm256_store_ps(values, best);
    _mm256_store_si256(reinterpret_cast<__m256i*>(indices), best_at);
    std::copy_n(values, n, y + o);
    std::copy_n(indices, n, index + o);
  }
}

}  // namespace ringgrad::kernels::cpu

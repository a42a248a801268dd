// The batch-norm passes over one plane with AVX-512, f32 and bf16 (kernels/cpu/batchnorm_planes.h).
//
// Note [Batch-norm planes]
// The passes of batchnorm_passes.cpp are written once for f32, f64 and bf16 and compiled for
// AVX2, with sums in double kept per position: on bf16 data the widening, the rounding back (an
// integer sequence eight lanes at a time) and those double sums cost more than moving the data
// does, and on f32 the double sums run at half the width.
// Here each plane is 16 values a vector (the last one masked), per-channel coefficients are
// scalars, and the sums are taken per plane in f32, then added in double per channel:
// - sum and sum_sq are of x - x0, x0 the plane's first value, and shifted back in double
//   (sum x = s + hw x0, sum x^2 = q + 2 x0 s + hw x0^2): a mean large against the spread then
//   costs no digits in E[x^2] - mean^2 (for bf16 values of nearby size the difference is even
//   exact in f32);
// - sum g (x - mean) is taken with mean rounded to f32 and corrected by (mean_f32 - mean) sum g;
// - each image's sums depend on that image alone, so a batch split across data-parallel ranks
//   still sums to the single-process numbers up to the order of the double additions.
// bf16 results are rounded as float_to_bf16 does (rounded_to_bf16), so the element math is that
// of batchnorm_math.h and elementwise_math.h on the same f32 values. Tested against f64 batch norm
// on the same values and against the unfused ops by tests/kernels/test_batchnorm*.cpp, whose
// layouts include planes of 16, 49 and 784 values.
#include "kernels/cpu/batchnorm_planes.h"

#include <immintrin.h>

#include "kernels/cast_math.h"
#include "kernels/cpu/avx512_bw.h"
#include "kernels/cpu/cpu_features.h"

namespace ringgrad::kernels::cpu {

namespace {

// 16 values of a plane as f32 lanes: loaded (those in mask; zero in the others) and stored.
template <class T>
struct PlaneLanes;

template <>
struct PlaneLanes<float> {
  RG_AVX512_BW static __m512 load(const float* p, __mmask16 mask) {
    return _mm512_maskz_loadu_ps(mask, p);
  }
  RG_AVX512_BW static void store(float* p, __mmask16 mask, __m512 v) {
    _mm512_mask_storeu_ps(p, mask, v);
  }
  // relu_grad(dy, y) where y is not null: dy where y is not <= 0 (NaN included), +0 elsewhere;
  // written to dresidual when that is not null.
  RG_AVX512_BW static __m512 gradient(const float* dy, const float* y, float* dresidual,
                                      __mmask16 mask) {
    __m512 g = _mm512_maskz_loadu_ps(mask, dy);
    if (y) {
      const __mmask16 pass = _mm512_cmp_ps_mask(load(y, mask), _mm512_setzero_ps(), _CMP_NLE_UQ);
      g = _mm512_maskz_mov_ps(pass, g);
    }
    if (dresidual) store(dresidual, mask, g);
    return g;
  }
};

template <>
struct PlaneLanes<BFloat16> {
  RG_AVX512_BW static __m512 load(const BFloat16* p, __mmask16 mask) {
    return widened(bits(p), mask);
  }
  RG_AVX512_BW static void store(BFloat16* p, __mmask16 mask, __m512 v) {
    _mm256_mask_storeu_epi16(bits(p), mask,
                             _mm512_maskz_cvtepi32_epi16(0xFFFF, rounded_to_bf16(v)));
  }
  // As for f32, on the bits: dresidual gets dy's own bits.
  RG_AVX512_BW static __m512 gradient(const BFloat16* dy, const BFloat16* y, BFloat16* dresidual,
                                      __mmask16 mask) {
    __m256i g = _mm256_maskz_loadu_epi16(mask, bits(dy));
    if (y) {
      const __mmask16 pass = _mm512_cmp_ps_mask(load(y, mask), _mm512_setzero_ps(), _CMP_NLE_UQ);
      g = _mm256_maskz_mov_epi16(pass & mask, g);
    }
    if (dresidual) _mm256_mask_storeu_epi16(bits(dresidual), mask, g);
    return widened(g);
  }
};

}  // namespace

template <class T>
bool planes_apply(int64_t hw) {
  return cpu_has(std::is_same_v<T, BFloat16> ? Isa::avx512_bf16 : Isa::avx512) && hw >= 16;
}

template <class T>
RG_AVX512_BW void plane_sums(const T* x, int64_t hw, double& sum, double& sum_sq) {
  using V = PlaneLanes<T>;
  const float first = widen(x[0]);
  const __m512 x0 = _mm512_set1_ps(first);
  __m512 s = _mm512_setzero_ps(), q = _mm512_setzero_ps();
  for (int64_t i = 0; i < hw; i += 16) {
    const __mmask16 mask = first_lanes16(hw - i);
    const __m512 d = _mm512_maskz_sub_ps(mask, V::load(x + i, mask), x0);
    s = _mm512_add_ps(s, d);
    q = _mm512_fmadd_ps(d, d, q);
  }
  const double shifted = lane_sum(s), x0_sum = double{first} * hw;
  sum += shifted + x0_sum;
  sum_sq += lane_sum(q) + (2 * shifted + x0_sum) * first;
}

template <class T>
RG_AVX512_BW void plane_apply(T* y, const T* x, const T* residual, bool relu, int64_t hw,
                              float mean, float scale, float beta) {
  using V = PlaneLanes<T>;
  const __m512 m = _mm512_set1_ps(mean), k = _mm512_set1_ps(scale), b = _mm512_set1_ps(beta);
  for (int64_t i = 0; i < hw; i += 16) {
    const __mmask16 mask = first_lanes16(hw - i);
    __m512 v = _mm512_fmadd_ps(_mm512_sub_ps(V::load(x + i, mask), m), k, b);
    if (residual) v = _mm512_add_ps(v, V::load(residual + i, mask));
    // relu as elementwise_math.h's: NaN and -0 pass as they are (vmaxps returns its second
    // operand when they compare equal or either is NaN).
    if (relu) v = _mm512_maskz_max_ps(0xFFFF, _mm512_setzero_ps(), v);
    V::store(y + i, mask, v);
  }
}

template <class T>
RG_AVX512_BW void plane_backward_sums(const T* dy, const T* y, const T* x, T* dresidual, int64_t hw,
                                      double mean, double& sum_dy, double& sum_dy_xmu) {
  using V = PlaneLanes<T>;
  const float mean_f32 = static_cast<float>(mean);
  const __m512 m = _mm512_set1_ps(mean_f32);
  __m512 s = _mm512_setzero_ps(), sx = _mm512_setzero_ps();
  for (int64_t i = 0; i < hw; i += 16) {
    const __mmask16 mask = first_lanes16(hw - i);
    const __m512 g =
        V::gradient(dy + i, y ? y + i : nullptr, dresidual ? dresidual + i : nullptr, mask);
    s = _mm512_add_ps(s, g);
    sx = _mm512_fmadd_ps(g, _mm512_sub_ps(V::load(x + i, mask), m), sx);  // g = 0 past hw
  }
  const double g_sum = lane_sum(s);
  sum_dy += g_sum;
  sum_dy_xmu += lane_sum(sx) + (double{mean_f32} - mean) * g_sum;
}

template <class T>
RG_AVX512_BW void plane_backward_apply(T* dx, const T* dy, const T* y, const T* x, int64_t hw,
                                       float mean, float scale, float mean_dy, float xmu_coeff) {
  using V = PlaneLanes<T>;
  const __m512 m = _mm512_set1_ps(mean), k = _mm512_set1_ps(scale);
  const __m512 my = _mm512_set1_ps(mean_dy), c = _mm512_set1_ps(xmu_coeff);
  for (int64_t i = 0; i < hw; i += 16) {
    const __mmask16 mask = first_lanes16(hw - i);
    const __m512 g = V::gradient(dy + i, y ? y + i : nullptr, nullptr, mask);
    const __m512 xmu = _mm512_sub_ps(V::load(x + i, mask), m);
    V::store(dx + i, mask, _mm512_mul_ps(k, _mm512_fnmadd_ps(xmu, c, _mm512_sub_ps(g, my))));
  }
}

#define RG_INSTANTIATE(T)                                                                          \
  template bool planes_apply<T>(int64_t);                                                          \
  template void plane_sums<T>(const T*, int64_t, double&, double&);                                \
  template void plane_apply<T>(T*, const T*, const T*, bool, int64_t, float, float, float);        \
  template void plane_backward_sums<T>(const T*, const T*, const T*, T*, int64_t, double, double&, \
                                       double&);                                                   \
  template void plane_backward_apply<T>(T*, const T*, const T*, const T*, int64_t, float, float,   \
                                        float, float);
RG_INSTANTIATE(float)
RG_INSTANTIATE(BFloat16)
#undef RG_INSTANTIATE

}  // namespace ringgrad::kernels::cpu

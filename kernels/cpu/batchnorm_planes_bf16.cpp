// The bf16 batch-norm passes over one plane with AVX-512 (kernels/cpu/batchnorm_planes_bf16.h).
//
// Note [bf16 batch-norm planes]
// The passes of batchnorm_passes.cpp are written once for f32, f64 and bf16 and compiled for
// AVX2: on bf16 data the widening, the rounding back (an integer sequence eight lanes at a time)
// and the double sums kept per position cost more than moving the data does.
// Here each plane is 16 values a vector (the last one masked), per-channel coefficients are
// scalars, and the sums are taken per plane in f32, then added in double per channel:
// - sum and sum_sq are of x - x0, x0 the plane's first value, and shifted back in double
//   (sum x = s + hw x0, sum x^2 = q + 2 x0 s + hw x0^2): a difference of two bf16 values of
//   nearby size is exact in f32, so a mean large against the spread costs no digits in
//   E[x^2] - mean^2;
// - sum g (x - mean) is taken with mean rounded to f32 and corrected by (mean_f32 - mean) sum g;
// - each image's sums depend on that image alone, so a batch split across data-parallel ranks
//   still sums to the single-process numbers up to the order of the double additions.
// Every result is rounded to bf16 as float_to_bf16 does (rounded_to_bf16), so the element math
// is that of batchnorm_math.h and elementwise_math.h on the same f32 values. Tested against f64
// batch norm on the same values and against the unfused ops by tests/kernels/test_batchnorm*.cpp,
// whose layouts include planes of 16, 49 and 784 values.
#include "kernels/cpu/batchnorm_planes_bf16.h"

#include <immintrin.h>

#include "kernels/cpu/avx512_bw.h"
#include "kernels/cpu/cpu_features.h"

namespace ringgrad::kernels::cpu {

namespace {

RG_AVX512_BW void store(BFloat16* p, __mmask16 mask, __m512 v) {
  _mm256_mask_storeu_epi16(bits(p), mask, _mm512_maskz_cvtepi32_epi16(0xFFFF, rounded_to_bf16(v)));
}

// relu_grad(dy, y): dy where y is not <= 0 (NaN included), +0 elsewhere; the bits of dy kept.
RG_AVX512_BW __m256i masked_gradient(const BFloat16* dy, const BFloat16* y, __mmask16 mask) {
  const __m256i g = _mm256_maskz_loadu_epi16(mask, bits(dy));
  if (!y) return g;
  const __mmask16 pass =
      _mm512_cmp_ps_mask(widened(bits(y), mask), _mm512_setzero_ps(), _CMP_NLE_UQ);
  return _mm256_maskz_mov_epi16(pass & mask, g);
}

}  // namespace

bool bf16_planes_apply(int64_t hw) { return cpu_has(Isa::avx512_bf16) && hw >= 16; }

RG_AVX512_BW void plane_sums(const BFloat16* x, int64_t hw, double& sum, double& sum_sq) {
  const float first = bf16_to_float(x[0]);
  const __m512 x0 = _mm512_set1_ps(first);
  __m512 s = _mm512_setzero_ps(), q = _mm512_setzero_ps();
  for (int64_t i = 0; i < hw; i += 16) {
    const __mmask16 mask = first_lanes16(hw - i);
    const __m512 d = _mm512_maskz_sub_ps(mask, widened(bits(x) + i, mask), x0);
    s = _mm512_add_ps(s, d);
    q = _mm512_fmadd_ps(d, d, q);
  }
  const double shifted = lane_sum(s), x0_sum = double{first} * hw;
  sum += shifted + x0_sum;
  sum_sq += lane_sum(q) + (2 * shifted + x0_sum) * first;
}

RG_AVX512_BW void plane_apply(BFloat16* y, const BFloat16* x, const BFloat16* residual, bool relu,
                              int64_t hw, float mean, float scale, float beta) {
  const __m512 m = _mm512_set1_ps(mean), k = _mm512_set1_ps(scale), b = _mm512_set1_ps(beta);
  for (int64_t i = 0; i < hw; i += 16) {
    const __mmask16 mask = first_lanes16(hw - i);
    __m512 v = _mm512_fmadd_ps(_mm512_sub_ps(widened(bits(x) + i, mask), m), k, b);
    if (residual) v = _mm512_add_ps(v, widened(bits(residual) + i, mask));
    // relu as elementwise_math.h's: NaN and -0 pass as they are (vmaxps returns its second
    // operand when they compare equal or either is NaN).
    if (relu) v = _mm512_maskz_max_ps(0xFFFF, _mm512_setzero_ps(), v);
    store(y + i, mask, v);
  }
}

RG_AVX512_BW void plane_backward_sums(const BFloat16* dy, const BFloat16* y, const BFloat16* x,
                                      BFloat16* dresidual, int64_t hw, double mean, double& sum_dy,
                                      double& sum_dy_xmu) {
  const float mean_f32 = static_cast<float>(mean);
  const __m512 m = _mm512_set1_ps(mean_f32);
  __m512 s = _mm512_setzero_ps(), sx = _mm512_setzero_ps();
  for (int64_t i = 0; i < hw; i += 16) {
    const __mmask16 mask = first_lanes16(hw - i);
    const __m256i g_bits = masked_gradient(dy + i, y ? y + i : nullptr, mask);
    if (dresidual) _mm256_mask_storeu_epi16(bits(dresidual + i), mask, g_bits);
    const __m512 g = widened(g_bits);
    s = _mm512_add_ps(s, g);
    sx = _mm512_fmadd_ps(g, _mm512_sub_ps(widened(bits(x) + i, mask), m), sx);  // g = 0 past hw
  }
  const double g_sum = lane_sum(s);
  sum_dy += g_sum;
  sum_dy_xmu += lane_sum(sx) + (double{mean_f32} - mean) * g_sum;
}

RG_AVX512_BW void plane_backward_apply(BFloat16* dx, const BFloat16* dy, const BFloat16* y,
                                       const BFloat16* x, int64_t hw, float mean, float scale,
                                       float mean_dy, float xmu_coeff) {
  const __m512 m = _mm512_set1_ps(mean), k = _mm512_set1_ps(scale);
  const __m512 my = _mm512_set1_ps(mean_dy), c = _mm512_set1_ps(xmu_coeff);
  for (int64_t i = 0; i < hw; i += 16) {
    const __mmask16 mask = first_lanes16(hw - i);
    const __m512 g = widened(masked_gradient(dy + i, y ? y + i : nullptr, mask));
    const __m512 xmu = _mm512_sub_ps(widened(bits(x) + i, mask), m);
    store(dx + i, mask, _mm512_mul_ps(k, _mm512_fnmadd_ps(xmu, c, _mm512_sub_ps(g, my))));
  }
}

}  // namespace ringgrad::kernels::cpu

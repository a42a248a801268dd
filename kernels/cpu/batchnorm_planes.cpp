// The batch-norm passes over one plane with AVX-512, f32 and bf16, and with AVX2, f32
// (kernels/cpu/batchnorm_planes.h).
//
// Note [Batch-norm planes]
// The passes of batchnorm_passes.cpp are written once for f32, f64 and bf16 and compiled for
// AVX2, with sums in double kept per position: on bf16 data the widening, the rounding back (an
// integer sequence eight lanes at a time) and those double sums cost more than moving the data
// does, and on f32 the double sums run at half the width.
// Here each plane is 16 values a vector in f32 (AVX2: 8; bf16: 32, below; the last one masked),
// per-channel coefficients are scalars, and the sums are taken per plane in f32, then added in
// double per channel:
// - sum and sum_sq are of x - x0, x0 the plane's first value, and shifted back in double
//   (sum x = s + hw x0, sum x^2 = q + 2 x0 s + hw x0^2): a mean large against the spread then
//   costs no digits in E[x^2] - mean^2 (for bf16 values of nearby size the difference is even
//   exact in f32);
// - sum g (x - mean) is taken with mean rounded to f32 and corrected by (mean_f32 - mean) sum g;
// - each image's sums depend on that image alone, so a batch split across data-parallel ranks
//   still sums to the single-process numbers up to the order of the double additions.
// bf16 results are rounded as float_to_bf16 does (store_halves), so the element math is that
// of batchnorm_math.h and elementwise_math.h on the same f32 values. Tested against f64 batch norm
// on the same values and against the unfused ops by tests/kernels/test_batchnorm*.cpp, whose
// layouts include planes of 16, 49 and 784 values.
#include "kernels/cpu/batchnorm_planes.h"

#include <immintrin.h>

#include "kernels/cast_math.h"
#include "kernels/cpu/avx2.h"
#include "kernels/cpu/avx512_bw.h"
#include "kernels/cpu/cpu_features.h"

namespace ringgrad::kernels::cpu {

namespace {

// A plane's sums, taken in f32 lanes, added to the per-channel doubles (the Note): s and q, the
// sums of d = x - x0 and d^2 over its hw values, shifted back to those of x and x^2; s and sx, the
// sums of g and g (x - mean_f32), the second corrected to g (x - mean).
void add_shifted_sums(double s, double q, float x0, int64_t hw, double& sum, double& sum_sq) {
  const double x0_sum = double{x0} * hw;
  sum += s + x0_sum;
  sum_sq += q + (2 * s + x0_sum) * x0;
}

void add_gradient_sums(double s, double sx, float mean_f32, double mean, double& sum_dy,
                       double& sum_dy_xmu) {
  sum_dy += s;
  sum_dy_xmu += sx + (double{mean_f32} - mean) * s;
}

// ---- AVX-512, f32: 16 values a step -----------------------------------------------------------

// relu_grad(dy, y) where y is not null: dy where y is not <= 0 (NaN included), +0 elsewhere;
// written to dresidual when that is not null.
RG_AVX512_BW __m512 gradient(const float* dy, const float* y, float* dresidual, __mmask16 mask) {
  __m512 g = _mm512_maskz_loadu_ps(mask, dy);
  if (y) {
    const __m512 yv = _mm512_maskz_loadu_ps(mask, y);
    g = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(yv, _mm512_setzero_ps(), _CMP_NLE_UQ), g);
  }
  if (dresidual) _mm512_mask_storeu_ps(dresidual, mask, g);
  return g;
}

RG_AVX512_BW void sums_avx512(const float* x, int64_t hw, double& sum, double& sum_sq) {
  const float first = x[0];
  const __m512 x0 = _mm512_set1_ps(first);
  __m512 s = _mm512_setzero_ps(), q = _mm512_setzero_ps();
  for (int64_t i = 0; i < hw; i += 16) {
    const __mmask16 mask = first_lanes16(hw - i);
    const __m512 d = _mm512_maskz_sub_ps(mask, _mm512_maskz_loadu_ps(mask, x + i), x0);
    s = _mm512_add_ps(s, d);
    q = _mm512_fmadd_ps(d, d, q);
  }
  add_shifted_sums(lane_sum(s), lane_sum(q), first, hw, sum, sum_sq);
}

RG_AVX512_BW void apply_avx512(float* y, const float* x, const float* residual, bool relu,
                               int64_t hw, float mean, float scale, float beta) {
  const __m512 m = _mm512_set1_ps(mean), k = _mm512_set1_ps(scale), b = _mm512_set1_ps(beta);
  for (int64_t i = 0; i < hw; i += 16) {
    const __mmask16 mask = first_lanes16(hw - i);
    __m512 v = _mm512_fmadd_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(mask, x + i), m), k, b);
    if (residual) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, residual + i));
    // relu as elementwise_math.h's: NaN and -0 pass as they are (vmaxps returns its second
    // operand when they compare equal or either is NaN).
    if (relu) v = _mm512_maskz_max_ps(0xFFFF, _mm512_setzero_ps(), v);
    _mm512_mask_storeu_ps(y + i, mask, v);
  }
}

RG_AVX512_BW void backward_sums_avx512(const float* dy, const float* y, const float* x,
                                       float* dresidual, int64_t hw, double mean, double& sum_dy,
                                       double& sum_dy_xmu) {
  const float mean_f32 = static_cast<float>(mean);
  const __m512 m = _mm512_set1_ps(mean_f32);
  __m512 s = _mm512_setzero_ps(), sx = _mm512_setzero_ps();
  for (int64_t i = 0; i < hw; i += 16) {
    const __mmask16 mask = first_lanes16(hw - i);
    const __m512 g =
        gradient(dy + i, y ? y + i : nullptr, dresidual ? dresidual + i : nullptr, mask);
    s = _mm512_add_ps(s, g);
    const __m512 xmu = _mm512_sub_ps(_mm512_maskz_loadu_ps(mask, x + i), m);
    sx = _mm512_fmadd_ps(g, xmu, sx);  // g = 0 past hw
  }
  add_gradient_sums(lane_sum(s), lane_sum(sx), mean_f32, mean, sum_dy, sum_dy_xmu);
}

RG_AVX512_BW void backward_apply_avx512(float* dx, const float* dy, const float* y, const float* x,
                                        int64_t hw, float mean, float scale, float mean_dy,
                                        float xmu_coeff) {
  const __m512 m = _mm512_set1_ps(mean), k = _mm512_set1_ps(scale);
  const __m512 my = _mm512_set1_ps(mean_dy), c = _mm512_set1_ps(xmu_coeff);
  for (int64_t i = 0; i < hw; i += 16) {
    const __mmask16 mask = first_lanes16(hw - i);
    const __m512 g = gradient(dy + i, y ? y + i : nullptr, nullptr, mask);
    const __m512 xmu = _mm512_sub_ps(_mm512_maskz_loadu_ps(mask, x + i), m);
    _mm512_mask_storeu_ps(dx + i, mask,
                          _mm512_mul_ps(k, _mm512_fnmadd_ps(xmu, c, _mm512_sub_ps(g, my))));
  }
}

// ---- AVX512-BF16, bf16: 32 values a step ---------------------------------------------------
// The same passes on a vector of 32 bf16 values, as two f32 vectors of its even- and odd-numbered
// values (Bf16Halves, avx512_bw.h): the sums take their terms in any order, and the results go
// back in order as they are stored. The element math of each value is that of the f32 passes.

// Of `left` values from a step's first, the even-numbered and the odd-numbered lanes that exist.
RG_AVX512_BW __mmask16 even_lanes(int64_t left) { return first_lanes16((left + 1) / 2); }
RG_AVX512_BW __mmask16 odd_lanes(int64_t left) { return first_lanes16(left / 2); }

// relu_grad's test y > 0 (NaN included) on the bits of 32 bf16 values: positive and not zero as
// 16-bit integers (+inf and the positive NaNs too), or a NaN with the sign set (above 0xff80).
RG_AVX512_BW __mmask32 relu_passes(__m512i y) {
  return _mm512_cmpgt_epi16_mask(y, _mm512_setzero_si512()) |
         _mm512_cmpgt_epu16_mask(y, _mm512_set1_epi16(static_cast<int16_t>(0xff80)));
}

// dy's bits where the relu passes when y is not null, written to dresidual when that is not null.
RG_AVX512_BW __m512i gradient(const BFloat16* dy, const BFloat16* y, BFloat16* dresidual,
                              __mmask32 mask) {
  __m512i g = _mm512_maskz_loadu_epi16(mask, bits(dy));
  if (y) g = _mm512_maskz_mov_epi16(relu_passes(_mm512_maskz_loadu_epi16(mask, bits(y))), g);
  if (dresidual) _mm512_mask_storeu_epi16(bits(dresidual), mask, g);
  return g;
}

RG_AVX512_BW void sums_avx512(const BFloat16* x, int64_t hw, double& sum, double& sum_sq) {
  const float first = widen(x[0]);
  const __m512 x0 = _mm512_set1_ps(first);
  __m512 s = _mm512_setzero_ps(), q = _mm512_setzero_ps();
  for (int64_t i = 0; i < hw; i += 32) {
    const int64_t left = hw - i;
    const Bf16Halves v = load_halves(x + i, first_lanes32(left));
    const __m512 even = _mm512_maskz_sub_ps(even_lanes(left), v.even, x0);
    const __m512 odd = _mm512_maskz_sub_ps(odd_lanes(left), v.odd, x0);
    s = _mm512_add_ps(_mm512_add_ps(s, even), odd);
    q = _mm512_fmadd_ps(odd, odd, _mm512_fmadd_ps(even, even, q));
  }
  add_shifted_sums(lane_sum(s), lane_sum(q), first, hw, sum, sum_sq);
}

RG_AVX512_BF16 void apply_avx512(BFloat16* y, const BFloat16* x, const BFloat16* residual,
                                 bool relu, int64_t hw, float mean, float scale, float beta) {
  const __m512 m = _mm512_set1_ps(mean), k = _mm512_set1_ps(scale), b = _mm512_set1_ps(beta);
  for (int64_t i = 0; i < hw; i += 32) {
    const __mmask32 mask = first_lanes32(hw - i);
    const Bf16Halves in = load_halves(x + i, mask);
    Bf16Halves v{_mm512_fmadd_ps(_mm512_sub_ps(in.even, m), k, b),
                 _mm512_fmadd_ps(_mm512_sub_ps(in.odd, m), k, b)};
    if (residual) {
      const Bf16Halves r = load_halves(residual + i, mask);
      v = {_mm512_add_ps(v.even, r.even), _mm512_add_ps(v.odd, r.odd)};
    }
    if (relu)  // as the f32 pass's
      v = {_mm512_maskz_max_ps(0xFFFF, _mm512_setzero_ps(), v.even),
           _mm512_maskz_max_ps(0xFFFF, _mm512_setzero_ps(), v.odd)};
    store_halves(y + i, mask, v);
  }
}

RG_AVX512_BW void backward_sums_avx512(const BFloat16* dy, const BFloat16* y, const BFloat16* x,
                                       BFloat16* dresidual, int64_t hw, double mean, double& sum_dy,
                                       double& sum_dy_xmu) {
  const float mean_f32 = static_cast<float>(mean);
  const __m512 m = _mm512_set1_ps(mean_f32);
  __m512 s = _mm512_setzero_ps(), sx = _mm512_setzero_ps();
  for (int64_t i = 0; i < hw; i += 32) {
    const __mmask32 mask = first_lanes32(hw - i);
    const Bf16Halves g =
        halves(gradient(dy + i, y ? y + i : nullptr, dresidual ? dresidual + i : nullptr, mask));
    const Bf16Halves xs = load_halves(x + i, mask);
    s = _mm512_add_ps(_mm512_add_ps(s, g.even), g.odd);  // g = 0 past hw
    sx = _mm512_fmadd_ps(g.odd, _mm512_sub_ps(xs.odd, m),
                         _mm512_fmadd_ps(g.even, _mm512_sub_ps(xs.even, m), sx));
  }
  add_gradient_sums(lane_sum(s), lane_sum(sx), mean_f32, mean, sum_dy, sum_dy_xmu);
}

RG_AVX512_BF16 void backward_apply_avx512(BFloat16* dx, const BFloat16* dy, const BFloat16* y,
                                          const BFloat16* x, int64_t hw, float mean, float scale,
                                          float mean_dy, float xmu_coeff) {
  const __m512 m = _mm512_set1_ps(mean), k = _mm512_set1_ps(scale);
  const __m512 my = _mm512_set1_ps(mean_dy), c = _mm512_set1_ps(xmu_coeff);
  for (int64_t i = 0; i < hw; i += 32) {
    const __mmask32 mask = first_lanes32(hw - i);
    const Bf16Halves g = halves(gradient(dy + i, y ? y + i : nullptr, nullptr, mask));
    const Bf16Halves xs = load_halves(x + i, mask);
    const __m512 xmu_even = _mm512_sub_ps(xs.even, m), xmu_odd = _mm512_sub_ps(xs.odd, m);
    store_halves(dx + i, mask,
                 {_mm512_mul_ps(k, _mm512_fnmadd_ps(xmu_even, c, _mm512_sub_ps(g.even, my))),
                  _mm512_mul_ps(k, _mm512_fnmadd_ps(xmu_odd, c, _mm512_sub_ps(g.odd, my)))});
  }
}

// ---- AVX2: f32 on CPUs without AVX-512 -------------------------------------------------------
// The same passes 8 values a vector. Only a plane's last, partial vector goes through masked loads
// and stores (masked stores are slow on some CPUs), and it is zero past the plane.

RG_AVX2_FMA float lane_sum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

// The n values at p (n >= 8: a whole vector), zero past them.
RG_AVX2_FMA __m256 load8(const float* p, int64_t n) {
  return n >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, first_lanes8(n));
}
RG_AVX2_FMA void store8(float* p, int64_t n, __m256 v) {
  if (n >= 8)
    _mm256_storeu_ps(p, v);
  else
    _mm256_maskstore_ps(p, first_lanes8(n), v);
}

// gradient's (f32), 8 values.
RG_AVX2_FMA __m256 gradient8(const float* dy, const float* y, float* dresidual, int64_t n) {
  __m256 g = load8(dy, n);
  if (y) g = _mm256_and_ps(g, _mm256_cmp_ps(load8(y, n), _mm256_setzero_ps(), _CMP_NLE_UQ));
  if (dresidual) store8(dresidual, n, g);
  return g;
}

RG_AVX2_FMA void sums_avx2(const float* x, int64_t hw, double& sum, double& sum_sq) {
  const float first = x[0];
  const __m256 x0 = _mm256_set1_ps(first);
  __m256 s = _mm256_setzero_ps(), q = _mm256_setzero_ps();
  for (int64_t i = 0; i < hw; i += 8) {
    const __m256 in = _mm256_castsi256_ps(first_lanes8(hw - i));
    const __m256 d = _mm256_and_ps(_mm256_sub_ps(load8(x + i, hw - i), x0), in);
    s = _mm256_add_ps(s, d);
    q = _mm256_fmadd_ps(d, d, q);
  }
  add_shifted_sums(lane_sum8(s), lane_sum8(q), first, hw, sum, sum_sq);
}

RG_AVX2_FMA void apply_avx2(float* y, const float* x, const float* residual, bool relu, int64_t hw,
                            float mean, float scale, float beta) {
  const __m256 m = _mm256_set1_ps(mean), k = _mm256_set1_ps(scale), b = _mm256_set1_ps(beta);
  for (int64_t i = 0; i < hw; i += 8) {
    __m256 v = _mm256_fmadd_ps(_mm256_sub_ps(load8(x + i, hw - i), m), k, b);
    if (residual) v = _mm256_add_ps(v, load8(residual + i, hw - i));
    if (relu) v = _mm256_max_ps(_mm256_setzero_ps(), v);  // NaN and -0 pass, as above
    store8(y + i, hw - i, v);
  }
}

RG_AVX2_FMA void backward_sums_avx2(const float* dy, const float* y, const float* x,
                                    float* dresidual, int64_t hw, double mean, double& sum_dy,
                                    double& sum_dy_xmu) {
  const float mean_f32 = static_cast<float>(mean);
  const __m256 m = _mm256_set1_ps(mean_f32);
  __m256 s = _mm256_setzero_ps(), sx = _mm256_setzero_ps();
  for (int64_t i = 0; i < hw; i += 8) {
    const __m256 g =
        gradient8(dy + i, y ? y + i : nullptr, dresidual ? dresidual + i : nullptr, hw - i);
    s = _mm256_add_ps(s, g);
    sx = _mm256_fmadd_ps(g, _mm256_sub_ps(load8(x + i, hw - i), m), sx);  // g = 0 past hw
  }
  add_gradient_sums(lane_sum8(s), lane_sum8(sx), mean_f32, mean, sum_dy, sum_dy_xmu);
}

RG_AVX2_FMA void backward_apply_avx2(float* dx, const float* dy, const float* y, const float* x,
                                     int64_t hw, float mean, float scale, float mean_dy,
                                     float xmu_coeff) {
  const __m256 m = _mm256_set1_ps(mean), k = _mm256_set1_ps(scale);
  const __m256 my = _mm256_set1_ps(mean_dy), c = _mm256_set1_ps(xmu_coeff);
  for (int64_t i = 0; i < hw; i += 8) {
    const __m256 g = gradient8(dy + i, y ? y + i : nullptr, nullptr, hw - i);
    const __m256 xmu = _mm256_sub_ps(load8(x + i, hw - i), m);
    store8(dx + i, hw - i, _mm256_mul_ps(k, _mm256_fnmadd_ps(xmu, c, _mm256_sub_ps(g, my))));
  }
}

}  // namespace

// f32 on every AVX2 CPU: the AVX-512 kernels where the CPU has them.
template <class T>
bool planes_apply(int64_t hw) {
  return cpu_has(std::is_same_v<T, BFloat16> ? Isa::avx512_bf16 : Isa::avx2) && hw >= 16;
}

template <class T>
void plane_sums(const T* x, int64_t hw, double& sum, double& sum_sq) {
  if constexpr (std::is_same_v<T, float>)
    if (!cpu_has(Isa::avx512)) return sums_avx2(x, hw, sum, sum_sq);
  sums_avx512(x, hw, sum, sum_sq);
}

template <class T>
void plane_apply(T* y, const T* x, const T* residual, bool relu, int64_t hw, float mean,
                 float scale, float beta) {
  if constexpr (std::is_same_v<T, float>)
    if (!cpu_has(Isa::avx512)) return apply_avx2(y, x, residual, relu, hw, mean, scale, beta);
  apply_avx512(y, x, residual, relu, hw, mean, scale, beta);
}

template <class T>
void plane_backward_sums(const T* dy, const T* y, const T* x, T* dresidual, int64_t hw, double mean,
                         double& sum_dy, double& sum_dy_xmu) {
  if constexpr (std::is_same_v<T, float>)
    if (!cpu_has(Isa::avx512))
      return backward_sums_avx2(dy, y, x, dresidual, hw, mean, sum_dy, sum_dy_xmu);
  backward_sums_avx512(dy, y, x, dresidual, hw, mean, sum_dy, sum_dy_xmu);
}

template <class T>
void plane_backward_apply(T* dx, const T* dy, const T* y, const T* x, int64_t hw, float mean,
                          float scale, float mean_dy, float xmu_coeff) {
  if constexpr (std::is_same_v<T, float>)
    if (!cpu_has(Isa::avx512))
      return backward_apply_avx2(dx, dy, y, x, hw, mean, scale, mean_dy, xmu_coeff);
  backward_apply_avx512(dx, dy, y, x, hw, mean, scale, mean_dy, xmu_coeff);
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

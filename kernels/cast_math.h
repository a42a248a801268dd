// Element conversions and the finiteness test shared by the CPU and CUDA cast kernels (and by
// every CUDA kernel that stores float16/bfloat16 while computing in float). RG_HD:
// __host__ __device__ under nvcc. 16-bit rounding is core/half.h's (nearest even), so the CPU
// and the device produce the same bits.
#pragma once
#include "core/half.h"
#include "core/host_device.h"

namespace ringgrad::kernels {

RG_HD float to_float(float v) { return v; }
RG_HD float to_float(double v) { return static_cast<float>(v); }
RG_HD float to_float(Half v) { return half_to_float(v); }
RG_HD float to_float(BFloat16 v) { return bf16_to_float(v); }

template <class T>
RG_HD T from_float(float v);
template <>
RG_HD float from_float<float>(float v) {
  return v;
}
template <>
RG_HD double from_float<double>(float v) {
  return v;
}
template <>
RG_HD Half from_float<Half>(float v) {
  return float_to_half(v);
}
template <>
RG_HD BFloat16 from_float<BFloat16>(float v) {
  return float_to_bf16(v);
}

// inf or NaN: the exponent bits are all ones. Bit test rather than std::isfinite so that it
// survives -ffast-math, under which the compiler may assume no value is ever inf or NaN.
RG_HD bool is_non_finite(float v) { return (float_bits(v) & 0x7f800000u) == 0x7f800000u; }
RG_HD bool is_non_finite(double v) {
  uint64_t u;
  memcpy(&u, &v, sizeof u);
  return (u & 0x7ff0000000000000ull) == 0x7ff0000000000000ull;
}
// The finiteness test's argument: float64 as is (a large finite double is not inf as a float),
// the 16-bit types exactly as float.
RG_HD double widen(double v) { return v; }
RG_HD float widen(float v) { return v; }
RG_HD float widen(Half v) { return half_to_float(v); }
RG_HD float widen(BFloat16 v) { return bf16_to_float(v); }

}  // namespace ringgrad::kernels

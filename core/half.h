// IEEE fp16 and bfloat16 storage types with round-to-nearest-even conversion from float.
// Arithmetic is always done in float; these are only how 16-bit values are stored.
#pragma once
#include <cstdint>
#include <cstring>

#include "core/host_device.h"

namespace ringgrad {

struct Half {
  uint16_t bits = 0;
};
struct BFloat16 {
  uint16_t bits = 0;
};

RG_HD uint32_t float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}
RG_HD float bits_float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

// bf16 is the top 16 bits of a float; rounding adds 0x7fff plus the lowest kept bit (ties to
// even). A NaN stays a quiet NaN. Written without a branch, so loops over arrays vectorise.
RG_HD BFloat16 float_to_bf16(float f) {
  const uint32_t u = float_bits(f);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (u >> 16) | 0x40u;
  BFloat16 b;
  b.bits = static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
  return b;
}
RG_HD float bf16_to_float(BFloat16 b) { return bits_float(static_cast<uint32_t>(b.bits) << 16); }

// fp16: 1 sign, 5 exponent (bias 15), 10 mantissa bits. Handles subnormals, overflow to inf, NaN.
RG_HD Half float_to_half(float f) {
  uint32_t u = float_bits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t abs = u & 0x7fffffffu;
  Half h;
  if (abs > 0x7f800000u) {  // NaN
    h.bits = static_cast<uint16_t>(sign | 0x7e00u);
    return h;
  }
  if (abs >= 0x477ff000u) {  // rounds to >= 65520: infinity
    h.bits = static_cast<uint16_t>(sign | 0x7c00u);
    return h;
  }
  if (abs < 0x38800000u) {  // below 2^-14: subnormal half (or zero)
    // Scale so the half's subnormal unit (2^-24) is the float's integer unit, then round.
    float af = bits_float(abs) * 16777216.0f;  // exact: multiply by 2^24
    uint32_t m = static_cast<uint32_t>(af);
    float rem = af - static_cast<float>(m);
    if (rem > 0.5f || (rem == 0.5f && (m & 1u))) ++m;
    h.bits = static_cast<uint16_t>(sign | m);
    return h;
  }
  // Normal: rebias exponent (127 -> 15) and round the 13 dropped mantissa bits to nearest even.
  uint32_t mant_odd = (abs >> 13) & 1u;
  abs += 0xfffu + mant_odd;
  h.bits = static_cast<uint16_t>(sign | ((abs - 0x38000000u) >> 13));
  return h;
}
RG_HD float half_to_float(Half h) {
  uint32_t sign = (static_cast<uint32_t>(h.bits) & 0x8000u) << 16;
  uint32_t exp = (h.bits >> 10) & 0x1fu;
  uint32_t mant = h.bits & 0x3ffu;
  if (exp == 0x1fu) return bits_float(sign | 0x7f800000u | (mant << 13));  // inf / NaN
  if (exp == 0) {                                                          // zero / subnormal
    float v = static_cast<float>(mant) * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

}  // namespace ringgrad

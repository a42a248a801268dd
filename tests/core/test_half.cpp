// Tests for fp16 / bf16 conversion: exact values, rounding to nearest even, specials.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "core/half.h"

using namespace ringgrad;

TEST_CASE("half: exact values and specials") {
  CHECK(float_to_half(1.0f).bits == 0x3c00);
  CHECK(float_to_half(-2.0f).bits == 0xc000);
  CHECK(float_to_half(65504.0f).bits == 0x7bff);
  CHECK(float_to_half(65520.0f).bits == 0x7c00);               // rounds to inf
  CHECK(float_to_half(std::ldexp(1.0f, -24)).bits == 0x0001);  // smallest subnormal
  CHECK(float_to_half(std::ldexp(1.0f, -26)).bits == 0x0000);  // below half of it: zero
  CHECK(std::isnan(half_to_float(float_to_half(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(half_to_float(Half{0x7c00}) == std::numeric_limits<float>::infinity());
  CHECK(half_to_float(Half{0x0001}) == std::ldexp(1.0f, -24));
}

TEST_CASE("half: ties round to even") {
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: rounds down to the even mantissa.
  CHECK(float_to_half(1.0f + std::ldexp(1.0f, -11)).bits == 0x3c00);
  // 1 + 3 * 2^-11 is halfway between odd 1+2^-10 and even 1+2^-9: rounds up.
  CHECK(float_to_half(1.0f + 3 * std::ldexp(1.0f, -11)).bits == 0x3c02);
}

TEST_CASE("half: every finite half round-trips through float") {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    Half h{static_cast<uint16_t>(b)};
    if (((b >> 10) & 0x1f) == 0x1f) continue;  // inf / NaN
    REQUIRE(float_to_half(half_to_float(h)).bits == h.bits);
  }
}

TEST_CASE("bfloat16: rounding and round trip") {
  CHECK(float_to_bf16(1.0f).bits == 0x3f80);
  CHECK(bf16_to_float(float_to_bf16(3.140625f)) == 3.140625f);
  // 1 + 2^-8 is a tie between 1 and 1 + 2^-7: even (1.0) wins.
  CHECK(float_to_bf16(1.0f + std::ldexp(1.0f, -8)).bits == 0x3f80);
  CHECK(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
}

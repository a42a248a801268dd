// Tests for cast and has_non_finite (kernels/cpu/cast.cpp, element math kernels/cast_math.h):
// round trips, rounding to nearest even, specials, and the inf/NaN test in every float dtype.
#include <cmath>
#include <limits>

#include "kernels/ops.h"
#include "tests/kernels/gradcheck.h"

using namespace ringgrad;

namespace {

Tensor cast_to(const Tensor& x, DType t) {
  Tensor y = Tensor::empty(x.shape(), t);
  kernels::cast(y, x);
  return y;
}

}  // namespace

TEST_CASE("cast: f32 to f16 and bf16 rounds to nearest even, and back is exact for them") {
  // 1 + 2^-11 lies halfway between two halves: ties to the even one (1.0); 1 + 3*2^-11 rounds up.
  const float half_tie = 1.0f + std::ldexp(1.0f, -11), half_up = 1.0f + 3 * std::ldexp(1.0f, -11);
  Tensor x = Tensor::from_vector<float>({half_tie, half_up, -2.5f, 65504.0f, 1e6f}, {5});
  Tensor h = cast_to(x, DType::f16);
  const std::vector<float> back = cast_to(h, DType::f32).to_vector<float>();
  CHECK(back[0] == 1.0f);
  CHECK(back[1] == 1.0f + std::ldexp(1.0f, -9));
  CHECK(back[2] == -2.5f);
  CHECK(back[3] == 65504.0f);
  CHECK(std::isinf(back[4]));  // beyond the half range

  // bf16 keeps 8 mantissa bits: 1 + 2^-8 is a tie (to 1.0), 1 + 3*2^-8 rounds up to 1 + 2^-6.
  Tensor xb = Tensor::from_vector<float>(
      {1.0f + std::ldexp(1.0f, -8), 1.0f + 3 * std::ldexp(1.0f, -8), 1e30f}, {3});
  const std::vector<float> bb = cast_to(cast_to(xb, DType::bf16), DType::f32).to_vector<float>();
  CHECK(bb[0] == 1.0f);
  CHECK(bb[1] == 1.0f + std::ldexp(1.0f, -6));
  CHECK(bb[2] == doctest::Approx(1e30f).epsilon(1e-2));
}

TEST_CASE("cast: f64 and f32 both ways, same dtype copies, shape mismatch is an error") {
  Tensor x = Tensor::from_vector<double>({0.1, -3.0, 1e-40}, {3});
  Tensor f = cast_to(x, DType::f32);
  CHECK(f.to_vector<float>() == std::vector<float>{0.1f, -3.0f, static_cast<float>(1e-40)});
  CHECK(cast_to(f, DType::f64).to_vector<double>()[0] == static_cast<double>(0.1f));
  Tensor same = cast_to(x, DType::f64);
  CHECK(same.to_vector<double>() == x.to_vector<double>());
  CHECK(same.raw_data() != x.raw_data());
  Tensor wrong = Tensor::empty({4}, DType::f32);
  CHECK_THROWS_WITH_AS(kernels::cast(wrong, x), doctest::Contains("shapes differ"), Error);
  Tensor ints = Tensor::empty({3}, DType::i32);
  CHECK_THROWS_AS(kernels::cast(ints, x), InvalidArgument);
}

TEST_CASE("has_non_finite: finds inf and NaN in every float dtype, not large finite values") {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    CAPTURE(dtype_name(t));
    Tensor finite = Tensor::from_vector<double>({0, -1, 1e-30, 60000}, {4}).to(t);
    CHECK_FALSE(kernels::has_non_finite(finite));
    CHECK(kernels::has_non_finite(Tensor::from_vector<double>({0, inf, 2}, {3}).to(t)));
    CHECK(kernels::has_non_finite(Tensor::from_vector<double>({-inf}, {1}).to(t)));
    CHECK(kernels::has_non_finite(Tensor::from_vector<double>({1, 2, nan}, {3}).to(t)));
    CHECK_FALSE(kernels::has_non_finite(Tensor::empty({0}, t)));
  }
  // 1e300 is finite as a double even though it is inf as a float.
  CHECK_FALSE(kernels::has_non_finite(Tensor::from_vector<double>({1e300}, {1})));
}

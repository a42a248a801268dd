// Tests for the mixed-precision kernels (kernels/cpu/cast.cpp, kernels/cpu/half_via_f32.h):
// casts round to nearest even at the ties, every finite 16-bit value survives a round trip,
// cast agrees with the scalar conversions of Tensor::to, the inf/NaN count in every dtype,
// and conv2d / linear in f16 and bf16 against the f32 kernels.
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/rng.h"
#include "kernels/ops.h"
#include "tests/kernels/gradcheck.h"

using namespace ringgrad;
using namespace ringgrad::testing;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

Tensor cast_to(const Tensor& src, DType dtype) {
  Tensor dst = Tensor::empty(src.shape(), dtype);
  kernels::cast(dst, src);
  return dst;
}

// The raw 16-bit patterns of an f16 or bf16 tensor.
std::vector<uint16_t> bits_of(const Tensor& t) {
  std::vector<uint16_t> bits(static_cast<size_t>(t.numel()));
  std::memcpy(bits.data(), t.raw_data(), t.nbytes());
  return bits;
}

// Every 16-bit pattern, as a tensor of the given half dtype.
Tensor all_patterns(DType dtype) {
  Tensor t = Tensor::empty({65536}, dtype);
  auto* p = static_cast<uint16_t*>(t.raw_data());
  for (int i = 0; i < 65536; ++i) p[i] = static_cast<uint16_t>(i);
  return t;
}

}  // namespace

TEST_CASE("cast: f32 to bf16 rounds to nearest even") {
  const float one = 1.0f;
  const std::vector<float> values = {
      one,
      one + std::ldexp(1.0f, -8),                          // tie: to the even 1.0
      one + 3 * std::ldexp(1.0f, -8),                      // tie: up to the even 1 + 2^-6
      one + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20),  // past the tie: up
      -0.0f,
      kInf,
      -kInf,
      std::numeric_limits<float>::max()};  // FLT_MAX rounds to inf
  const std::vector<uint16_t> expected = {0x3f80, 0x3f80, 0x3f82, 0x3f81,
                                          0x8000, 0x7f80, 0xff80, 0x7f80};
  CHECK(bits_of(cast_to(Tensor::from_vector(values, {8}), DType::bf16)) == expected);
  CHECK(std::isnan(
      cast_to(Tensor::from_vector<float>({kNaN}, {1}), DType::bf16).to(DType::f32).item()));
}

TEST_CASE("cast: f32 to bf16 gives float_to_bf16's bits at every length and bit pattern") {
  // On an AVX-512 CPU the cast runs sixteen lanes at a time with masked tails (kernels/cpu/
  // cast.cpp); elsewhere the element loop. Either must be core/half.h's conversion bit for bit:
  // random patterns cover NaN payloads, infinities and subnormals, and every fourth one is made a
  // tie (low half 0x8000). Lengths cross the vector and the parallel block (16384) edges. Only
  // every other vector of 16 holds subnormals: with AVX512-BF16 those take the integer rounding
  // and the others the CPU's instruction (narrowed_to_bf16).
  Generator g(11);
  for (int64_t n : {1, 15, 16, 17, 33, 16384 + 40, 3 * 16384 + 5}) {
    CAPTURE(n);
    Tensor src = Tensor::empty({n}, DType::f32);
    auto* bits = static_cast<uint32_t*>(src.raw_data());
    for (int64_t i = 0; i < n; ++i) {
      bits[i] = g.next_u32();
      if (i % 4 == 0) bits[i] = (bits[i] & 0xffff0000u) | 0x8000u;
      if (i % 7 == 0 && i / 16 % 2 == 0) bits[i] &= 0x807fffffu;  // a subnormal (or zero)
      if (i % 11 == 0) bits[i] |= 0x7f800000u;                    // an infinity or a NaN
    }
    const std::vector<uint16_t> got = bits_of(cast_to(src, DType::bf16));
    int64_t wrong = 0;
    for (int64_t i = 0; i < n; ++i) wrong += got[i] != float_to_bf16(src.data<float>()[i]).bits;
    CHECK(wrong == 0);
  }
}

TEST_CASE("cast: f32 to f16 rounds to nearest even, overflows to inf, keeps subnormals") {
  const std::vector<float> values = {1.0f,
                                     1.0f + std::ldexp(1.0f, -11),
                                     1.0f + 3 * std::ldexp(1.0f, -11),
                                     65504.0f,
                                     65520.0f,
                                     -70000.0f,
                                     std::ldexp(1.0f, -24),
                                     std::ldexp(1.0f, -26)};
  const std::vector<uint16_t> expected = {0x3c00, 0x3c00, 0x3c02, 0x7bff,
                                          0x7c00, 0xfc00, 0x0001, 0x0000};
  CHECK(bits_of(cast_to(Tensor::from_vector(values, {8}), DType::f16)) == expected);
}

TEST_CASE("cast: every finite f16 and bf16 value round-trips through f32 and f64") {
  for (DType half : {DType::f16, DType::bf16}) {
    for (DType wide : {DType::f32, DType::f64}) {
      INFO("half: ", dtype_name(half));
      INFO("wide: ", dtype_name(wide));
      const Tensor patterns = all_patterns(half);
      const std::vector<uint16_t> before = bits_of(patterns);
      const std::vector<uint16_t> after = bits_of(cast_to(cast_to(patterns, wide), half));
      const uint16_t exponent = half == DType::f16 ? 0x7c00 : 0x7f80;
      int64_t wrong = 0;
      for (size_t i = 0; i < before.size(); ++i) {
        const bool nan = (before[i] & exponent) == exponent && (before[i] & ~exponent & 0x7fff);
        const bool after_nan = (after[i] & exponent) == exponent && (after[i] & ~exponent & 0x7fff);
        wrong += nan ? !after_nan : before[i] != after[i];
      }
      CHECK(wrong == 0);
    }
  }
}

TEST_CASE("cast: agrees with Tensor::to between every pair of floating dtypes") {
  Generator g(5);
  const Tensor source = random_tensor({1000}, g, DType::f64, 30000.0);  // past the f16 range
  const DType types[] = {DType::f32, DType::f64, DType::f16, DType::bf16};
  for (DType from : types)
    for (DType to : types) {
      INFO("from: ", dtype_name(from));
      INFO("to: ", dtype_name(to));
      const Tensor src = source.to(from);
      const Tensor got = cast_to(src, to), want = src.to(to);
      CHECK(std::memcmp(got.raw_data(), want.raw_data(), got.nbytes()) == 0);
    }
}

TEST_CASE("cast: bad arguments are errors") {
  Tensor f = Tensor::zeros({4});
  Tensor ints = Tensor::empty({4}, DType::i32);
  Tensor shorter = Tensor::empty({3}, DType::bf16);
  CHECK_THROWS_WITH_AS(kernels::cast(ints, f), doctest::Contains("floating dtype"), Error);
  CHECK_THROWS_WITH_AS(kernels::cast(shorter, f), doctest::Contains("element counts"), Error);
}

TEST_CASE("count_nonfinite: inf, -inf and NaN in every floating dtype") {
  const std::vector<float> values = {0.0f, kInf, 1.0f, -kInf, kNaN, -2.0f, 65504.0f};
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    INFO("dtype: ", dtype_name(t));
    CHECK(kernels::count_nonfinite(cast_to(Tensor::from_vector(values, {7}), t)) == 3);
  }
  // Large enough to split over threads; the non-finite values sit at both ends.
  Tensor big = Tensor::zeros({100003});
  big.data<float>()[0] = kNaN;
  big.data<float>()[100002] = kInf;
  CHECK(kernels::count_nonfinite(big) == 2);
  CHECK(kernels::count_nonfinite(Tensor::zeros({0})) == 0);
  // 70000 is finite in f32 and bf16 but beyond the f16 range.
  const Tensor large = Tensor::from_vector<float>({70000.0f}, {1});
  CHECK(kernels::count_nonfinite(cast_to(large, DType::bf16)) == 0);
  CHECK(kernels::count_nonfinite(cast_to(large, DType::f16)) == 1);
  CHECK_THROWS_AS(kernels::count_nonfinite(Tensor::zeros({2}, DType::i64)), Error);
}

TEST_CASE("half precision conv2d and linear: the f32 kernels on the same values, rounded") {
  Generator g(9);
  for (DType half : {DType::f16, DType::bf16}) {
    INFO("dtype: ", dtype_name(half));
    // Relative error of one rounding to nearest: half an ulp, 2^-11 (f16) or 2^-8 (bf16).
    const double tol = half == DType::f16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
    const Tensor x = random_tensor({2, 3, 6, 5}, g, half), w = random_tensor({4, 3, 3, 3}, g, half);
    const Tensor bias = random_tensor({4}, g, half);
    kernels::Conv2dParams p;
    p.stride_h = 2;
    p.pad_h = p.pad_w = 1;
    const Shape ys = kernels::conv2d_output_shape(x.shape(), w.shape(), p);
    Tensor y = Tensor::empty(ys, half), y32 = Tensor::empty(ys);
    kernels::conv2d_forward(y, x, w, bias, p);
    kernels::conv2d_forward(y32, x.to(DType::f32), w.to(DType::f32), bias.to(DType::f32), p);
    CHECK(y.dtype() == half);
    check_close(y, y32, tol, "conv2d forward");

    const Tensor dy = random_tensor(ys, g, half);
    Tensor dx = Tensor::empty(x.shape(), half), dw = Tensor::empty(w.shape(), half),
           db = Tensor::empty({4}, half);
    Tensor dx32 = Tensor::empty(x.shape()), dw32 = Tensor::empty(w.shape());
    Tensor db32 = Tensor::empty({4});
    kernels::conv2d_backward(dx, dw, db, dy, x, w, p);
    kernels::conv2d_backward(dx32, dw32, db32, dy.to(DType::f32), x.to(DType::f32),
                             w.to(DType::f32), p);
    check_close(dx, dx32, tol, "conv2d dx");
    check_close(dw, dw32, tol, "conv2d dw");
    check_close(db, db32, tol, "conv2d dbias");

    const Tensor a = random_tensor({5, 7}, g, half), lw = random_tensor({3, 7}, g, half);
    Tensor ly = Tensor::empty({5, 3}, half), ly32 = Tensor::empty({5, 3});
    kernels::linear_forward(ly, a, lw, Tensor());
    kernels::linear_forward(ly32, a.to(DType::f32), lw.to(DType::f32), Tensor());
    check_close(ly, ly32, tol, "linear forward");
    const Tensor ldy = random_tensor({5, 3}, g, half);
    Tensor lda = Tensor::empty({5, 7}, half), ldw = Tensor::empty({3, 7}, half), none;
    Tensor lda32 = Tensor::empty({5, 7}), ldw32 = Tensor::empty({3, 7});
    kernels::linear_backward(lda, ldw, none, ldy, a, lw);
    kernels::linear_backward(lda32, ldw32, none, ldy.to(DType::f32), a.to(DType::f32),
                             lw.to(DType::f32));
    check_close(lda, lda32, tol, "linear dx");
    check_close(ldw, ldw32, tol, "linear dw");

    const Tensor labels = Tensor::from_vector<int64_t>({0, 1, 2, 0, 1}, {5});
    CHECK(kernels::count_correct(ly, labels) == kernels::count_correct(ly.to(DType::f32), labels));
  }
}

TEST_CASE("half precision conv2d: operands of mixed dtypes are an error") {
  Generator g(2);
  const Tensor x = random_tensor({1, 1, 3, 3}, g, DType::bf16);
  const Tensor w = random_tensor({1, 1, 3, 3}, g, DType::f32);
  Tensor y = Tensor::empty({1, 1, 1, 1}, DType::bf16);
  CHECK_THROWS_WITH_AS(kernels::conv2d_forward(y, x, w, Tensor(), kernels::Conv2dParams()),
                       doctest::Contains("same dtype"), Error);
}

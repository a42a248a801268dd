// Tests for the elementwise kernels (kernels/cpu/elementwise.cpp): relu, add, add_, add_relu
// and scale_ on hand cases, gradients against finite differences and argument errors; on bf16
// each result is the f32 result rounded once, bit for bit (the AVX-512 loop where the CPU has
// it, sixteen lanes and a tail).
#include <cmath>
#include <limits>

#include "core/rng.h"
#include "kernels/elementwise_math.h"
#include "kernels/ops.h"
#include "tests/kernels/gradcheck.h"

using namespace ringgrad;
using namespace ringgrad::testing;

TEST_CASE("relu: forward on a hand case, backward against finite differences") {
  Tensor x = Tensor::from_vector<float>({-1.5f, 0.0f, 2.0f, -0.1f}, {4});
  Tensor y = Tensor::empty({4});
  kernels::relu_forward(y, x);
  CHECK(y.to_vector<float>() == std::vector<float>{0, 0, 2, 0});

  Generator g(3);
  Tensor xd = random_tensor({3, 5, 7}, g);
  Tensor dy = random_tensor({3, 5, 7}, g);
  Tensor yd = Tensor::empty(xd.shape(), DType::f64);
  kernels::relu_forward(yd, xd);
  Tensor dx = Tensor::empty(xd.shape(), DType::f64);
  kernels::relu_backward(dx, dy, yd);
  auto f = [&] {
    Tensor out = Tensor::empty(xd.shape(), DType::f64);
    kernels::relu_forward(out, xd);
    return out;
  };
  check_close(dx, numeric_gradient(f, xd, dy), 1e-6, "relu dx");
}

TEST_CASE("relu: mismatched shapes are an error") {
  Tensor x = Tensor::empty({4}), y = Tensor::empty({5});
  CHECK_THROWS_AS(kernels::relu_forward(y, x), Error);
}

TEST_CASE("add, add_ and scale_ on hand cases in both float types") {
  for (DType t : {DType::f32, DType::f64}) {
    Tensor a = Tensor::from_vector<double>({1.5, -2, 0.25, 4}, {2, 2}).to(t);
    Tensor b = Tensor::from_vector<double>({0.5, 2, -1, -8}, {2, 2}).to(t);
    Tensor y = Tensor::empty({2, 2}, t);
    kernels::add(y, a, b);
    CHECK(y.to(DType::f64).to_vector<double>() == std::vector<double>{2, 0, -0.75, -4});
    kernels::add_(a, b);
    CHECK(a.to(DType::f64).to_vector<double>() == std::vector<double>{2, 0, -0.75, -4});
    kernels::scale_(a, -0.5);
    CHECK(a.to(DType::f64).to_vector<double>() == std::vector<double>{-1, 0, 0.375, 2});
  }
}

TEST_CASE("add_relu: forward by hand, gradient of relu(a + b) through relu_backward") {
  // relu(a + b) for a + b = {-1, 0, 1.5, 3}.
  Tensor a = Tensor::from_vector<float>({-2, 1, 0.5f, 3}, {4});
  Tensor b = Tensor::from_vector<float>({1, -1, 1, 0}, {4});
  Tensor y = Tensor::empty({4});
  kernels::add_relu_forward(y, a, b);
  CHECK(y.to_vector<float>() == std::vector<float>{0, 0, 1.5f, 3});

  Generator g(8);
  Tensor ad = random_tensor({4, 9}, g), bd = random_tensor({4, 9}, g),
         dy = random_tensor({4, 9}, g);
  Tensor yd = Tensor::empty({4, 9}, DType::f64), dsum = Tensor::empty({4, 9}, DType::f64);
  kernels::add_relu_forward(yd, ad, bd);
  kernels::relu_backward(dsum, dy, yd);
  auto f = [&] {
    Tensor out = Tensor::empty({4, 9}, DType::f64);
    kernels::add_relu_forward(out, ad, bd);
    return out;
  };
  check_close(dsum, numeric_gradient(f, ad, dy), 1e-6, "d/da");
  check_close(dsum, numeric_gradient(f, bd, dy), 1e-6, "d/db");
}

TEST_CASE("elementwise ops reject mismatched and non-floating tensors") {
  Tensor a = Tensor::empty({4}), b = Tensor::empty({5}), y = Tensor::empty({4});
  CHECK_THROWS_AS(kernels::add(y, a, b), Error);
  CHECK_THROWS_AS(kernels::add_(a, b), Error);
  CHECK_THROWS_AS(kernels::add_relu_forward(y, a, b), Error);
  Tensor a64 = Tensor::empty({4}, DType::f64);
  CHECK_THROWS_WITH_AS(kernels::add(y, a, a64), doctest::Contains("dtypes differ"), Error);
  Tensor ints = Tensor::zeros({4}, DType::i64);
  CHECK_THROWS_WITH_AS(kernels::scale_(ints, 2.0), doctest::Contains("float32 and float64"),
                       InvalidArgument);
}

TEST_CASE("increment_ counts a one-element int64 tensor and rejects anything else") {
  Tensor counter = Tensor::zeros({}, DType::i64);
  kernels::increment_(counter);
  kernels::increment_(counter);
  CHECK(counter.item() == 2);
  Tensor floats = Tensor::zeros({}), two = Tensor::zeros({2}, DType::i64);
  CHECK_THROWS_WITH_AS(kernels::increment_(floats), doctest::Contains("int64"), Error);
  CHECK_THROWS_WITH_AS(kernels::increment_(two), doctest::Contains("one-element"), Error);
}

TEST_CASE("relu keeps NaN as PyTorch does, forward, fused with add, and backward") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor x = Tensor::from_vector<float>({nan, -1.0f, 3.0f}, {3});
  Tensor y = Tensor::empty({3});
  kernels::relu_forward(y, x);
  const auto out = y.to_vector<float>();
  CHECK(std::isnan(out[0]));
  CHECK(out[1] == 0.0f);
  CHECK(out[2] == 3.0f);
  Tensor zero = Tensor::zeros({3});
  kernels::add_relu_forward(y, x, zero);
  CHECK(std::isnan(y.to_vector<float>()[0]));
  // Where the output is NaN the gradient passes, as in threshold_backward.
  Tensor dy = Tensor::from_vector<float>({5.0f, 5.0f, 5.0f}, {3});
  Tensor dx = Tensor::empty({3});
  kernels::relu_forward(y, x);
  kernels::relu_backward(dx, dy, y);
  CHECK(dx.to_vector<float>() == std::vector<float>{5.0f, 0.0f, 5.0f});
}

TEST_CASE("elementwise ops on bf16 round the f32 result once, NaN and ties included") {
  // 1000 + 37 values: whole vectors and a tail; ties, NaN, -0, subnormals and signs mixed in.
  Generator g(5);
  const int64_t n = 1037;
  Tensor a = random_tensor({n}, g, DType::bf16, 3.0), b = random_tensor({n}, g, DType::bf16);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  a.set_element(3, nan);
  b.set_element(4, nan);
  a.set_element(5, -0.0);
  a.set_element(6, 1.0);  // 1 + 2^-8: halfway between two bf16 values, rounded to even
  b.set_element(6, std::ldexp(1.0, -8));
  // f32 subnormal results in the second vector of 32 only (on AVX512-BF16 such a vector is
  // rounded by the integer steps, the others by the CPU's conversion; avx512_bw.h).
  a.set_element(40, 1e-39);
  b.set_element(40, 1e-40);
  a.set_element(41, -3e-39);
  b.set_element(41, 1e-39);
  auto expect = [&](auto f) {
    std::vector<uint16_t> bits(n);
    for (int64_t i = 0; i < n; ++i)
      bits[i] =
          float_to_bf16(f(static_cast<float>(a.element(i)), static_cast<float>(b.element(i)))).bits;
    return bits;
  };
  auto bits_of = [](const Tensor& t) {
    const BFloat16* p = t.data<BFloat16>();
    std::vector<uint16_t> bits(t.numel());
    for (int64_t i = 0; i < t.numel(); ++i) bits[i] = p[i].bits;
    return bits;
  };
  Tensor y = Tensor::empty({n}, DType::bf16);
  kernels::add(y, a, b);
  CHECK(bits_of(y) == expect([](float u, float v) { return u + v; }));
  kernels::add_relu_forward(y, a, b);
  CHECK(bits_of(y) == expect([](float u, float v) { return kernels::relu(u + v); }));
  kernels::relu_forward(y, a);
  CHECK(bits_of(y) == expect([](float u, float) { return kernels::relu(u); }));
  kernels::relu_backward(y, b, a);
  CHECK(bits_of(y) == expect([](float u, float v) { return kernels::relu_grad(v, u); }));
  Tensor c = a.clone();
  kernels::scale_(c, 0.3);
  CHECK(bits_of(c) == expect([](float u, float) { return u * 0.3f; }));
}

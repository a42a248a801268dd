// Tests for the CPU linear layer (kernels/cpu/linear.cpp): a case worked by hand, a direct-loop
// f64 reference on shapes large enough to split the GEMMs over threads (by rows and by columns),
// finite-difference gradients, f32 vs f64, an empty batch and argument errors.
#include <vector>

#include "core/rng.h"
#include "kernels/ops.h"
#include "tests/kernels/gradcheck.h"

using namespace ringgrad;
using namespace ringgrad::testing;

namespace {

struct LinearGrads {
  Tensor dx, dw, dbias;
};

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias) {
  Tensor y = Tensor::empty({x.size(0), w.size(0)}, x.dtype());
  kernels::linear_forward(y, x, w, bias);
  return y;
}

LinearGrads linear_grads(const Tensor& dy, const Tensor& x, const Tensor& w) {
  LinearGrads g{Tensor::empty(x.shape(), x.dtype()), Tensor::empty(w.shape(), x.dtype()),
                Tensor::empty({w.size(0)}, x.dtype())};
  kernels::linear_backward(g.dx, g.dw, g.dbias, dy, x, w);
  return g;
}

// y[n][o] = bias[o] + sum_i x[n][i] w[o][i] and its adjoint, in f64 loops.
Tensor reference_linear(const Tensor& x, const Tensor& w, const Tensor& bias) {
  const int64_t N = x.size(0), IN = x.size(1), OUT = w.size(0);
  Tensor y = Tensor::zeros({N, OUT}, DType::f64);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < OUT; ++o) {
      double sum = bias.defined() ? bias.data<double>()[o] : 0.0;
      for (int64_t i = 0; i < IN; ++i)
        sum += x.data<double>()[n * IN + i] * w.data<double>()[o * IN + i];
      y.data<double>()[n * OUT + o] = sum;
    }
  return y;
}

LinearGrads reference_grads(const Tensor& dy, const Tensor& x, const Tensor& w) {
  const int64_t N = x.size(0), IN = x.size(1), OUT = w.size(0);
  LinearGrads g{Tensor::zeros(x.shape(), DType::f64), Tensor::zeros(w.shape(), DType::f64),
                Tensor::zeros({OUT}, DType::f64)};
  const double *xp = x.data<double>(), *wp = w.data<double>(), *dyp = dy.data<double>();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < OUT; ++o) {
      const double d = dyp[n * OUT + o];
      g.dbias.data<double>()[o] += d;
      for (int64_t i = 0; i < IN; ++i) {
        g.dx.data<double>()[n * IN + i] += d * wp[o * IN + i];
        g.dw.data<double>()[o * IN + i] += d * xp[n * IN + i];
      }
    }
  return g;
}

}  // namespace

TEST_CASE("linear worked by hand: forward and backward") {
  // x = [[1, 2, 3], [4, 5, 6]], w = [[1, 0, -1], [2, 1, 0]], bias = [0.5, -1]:
  // y = x w^T + bias = [[1 - 3 + 0.5, 2 + 2 - 1], [4 - 6 + 0.5, 8 + 5 - 1]]
  Tensor x = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor w = Tensor::from_vector<float>({1, 0, -1, 2, 1, 0}, {2, 3});
  Tensor b = Tensor::from_vector<float>({0.5f, -1}, {2});
  CHECK(linear(x, w, b).to_vector<float>() == std::vector<float>{-1.5f, 3, -1.5f, 12});
  CHECK(linear(x, w, Tensor()).to_vector<float>() == std::vector<float>{-2, 4, -2, 13});
  // dy = identity: dx = dy w = w, dw = dy^T x = x, dbias = column sums = [1, 1].
  LinearGrads g = linear_grads(Tensor::from_vector<float>({1, 0, 0, 1}, {2, 2}), x, w);
  CHECK(g.dx.to_vector<float>() == w.to_vector<float>());
  CHECK(g.dw.to_vector<float>() == x.to_vector<float>());
  CHECK(g.dbias.to_vector<float>() == std::vector<float>{1, 1});
}

TEST_CASE("linear matches the f64 reference with the GEMMs split over threads") {
  struct Sizes {
    int64_t N, IN, OUT;
  };
  // Large enough that every GEMM is split: (64, 512, 40) splits forward by rows of y,
  // (8, 512, 300) by its columns; in backward dw (OUT, IN) splits by columns in both.
  const std::vector<Sizes> cases = {{64, 512, 40}, {8, 512, 300}, {3, 5, 4}};
  Generator gen(21);
  ThreadCountGuard guard;
  kernels::set_num_threads(3);
  for (const Sizes& s : cases) {
    CAPTURE(s.N);
    CAPTURE(s.OUT);
    Tensor x = random_tensor({s.N, s.IN}, gen), w = random_tensor({s.OUT, s.IN}, gen);
    Tensor b = random_tensor({s.OUT}, gen), dy = random_tensor({s.N, s.OUT}, gen);
    check_close(linear(x, w, b), reference_linear(x, w, b), 1e-12, "y");
    LinearGrads got = linear_grads(dy, x, w), want = reference_grads(dy, x, w);
    check_close(got.dx, want.dx, 1e-12, "dx");
    check_close(got.dw, want.dw, 1e-12, "dw");
    check_close(got.dbias, want.dbias, 1e-12, "dbias");
  }
}

TEST_CASE("linear backward matches central finite differences") {
  Generator gen(4);
  Tensor x = random_tensor({3, 5}, gen), w = random_tensor({4, 5}, gen);
  Tensor b = random_tensor({4}, gen), dy = random_tensor({3, 4}, gen);
  LinearGrads got = linear_grads(dy, x, w);
  auto f = [&] { return linear(x, w, b); };
  check_close(got.dx, numeric_gradient(f, x, dy), 1e-7, "dx");
  check_close(got.dw, numeric_gradient(f, w, dy), 1e-7, "dw");
  check_close(got.dbias, numeric_gradient(f, b, dy), 1e-7, "dbias");
}

TEST_CASE("linear in float32 agrees with float64") {
  Generator gen(8);
  Tensor x = random_tensor({64, 512}, gen), w = random_tensor({10, 512}, gen, DType::f64, 0.05);
  Tensor b = random_tensor({10}, gen), dy = random_tensor({64, 10}, gen);
  LinearGrads g = linear_grads(dy, x, w);
  LinearGrads g32 = linear_grads(dy.to(DType::f32), x.to(DType::f32), w.to(DType::f32));
  check_close(linear(x.to(DType::f32), w.to(DType::f32), b.to(DType::f32)), linear(x, w, b), 1e-5,
              "y f32");
  check_close(g32.dx, g.dx, 1e-5, "dx f32");
  check_close(g32.dw, g.dw, 1e-5, "dw f32");
  check_close(g32.dbias, g.dbias, 1e-5, "dbias f32");
}

TEST_CASE("linear on an empty batch gives zero weight and bias gradients") {
  Tensor x = Tensor::zeros({0, 6}), w = Tensor::full({3, 6}, 1.0);
  CHECK(linear(x, w, Tensor()).shape() == Shape{0, 3});
  LinearGrads g{Tensor::empty({0, 6}), Tensor::full({3, 6}, 7.0), Tensor::full({3}, 7.0)};
  kernels::linear_backward(g.dx, g.dw, g.dbias, Tensor::zeros({0, 3}), x, w);
  CHECK(g.dw.to_vector<float>() == std::vector<float>(18, 0.0f));
  CHECK(g.dbias.to_vector<float>() == std::vector<float>{0, 0, 0});
}

TEST_CASE("linear rejects bad shapes and dtypes with messages") {
  Tensor x = Tensor::zeros({4, 6}), w = Tensor::zeros({3, 6}), y = Tensor::empty({4, 3});
  Tensor w_bad = Tensor::zeros({3, 5});
  CHECK_THROWS_WITH_AS(kernels::linear_forward(y, x, w_bad, Tensor()),
                       doctest::Contains("features"), Error);
  Tensor y_bad = Tensor::empty({4, 4});
  CHECK_THROWS_WITH_AS(kernels::linear_forward(y_bad, x, w, Tensor()),
                       doctest::Contains("y has shape"), Error);
  Tensor w64 = Tensor::zeros({3, 6}, DType::f64);
  CHECK_THROWS_WITH_AS(kernels::linear_forward(y, x, w64, Tensor()),
                       doctest::Contains("same dtype"), Error);
  Tensor x3 = Tensor::zeros({4, 6, 1});
  CHECK_THROWS_WITH_AS(kernels::linear_forward(y, x3, w, Tensor()), doctest::Contains("(N, IN)"),
                       Error);
  Tensor bias_bad = Tensor::zeros({4});
  CHECK_THROWS_WITH_AS(kernels::linear_forward(y, x, w, bias_bad),
                       doctest::Contains("bias has shape"), Error);
  Tensor dy_bad = Tensor::zeros({4, 2}), none;
  CHECK_THROWS_WITH_AS(kernels::linear_backward(none, none, none, dy_bad, x, w),
                       doctest::Contains("dy has shape"), Error);
}

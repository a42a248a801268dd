// Tests for the elementwise kernels (relu, add, add_relu, scale).
#include "core/rng.h"
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

// Tests for nn/autograd: a composed network's gradients against finite differences, gradient
// accumulation (across backward calls and within one), grad-ready hooks firing exactly once when
// final, and no_grad.
#include <doctest/doctest.h>

#include "nn/autograd/ops.h"
#include "tests/kernels/gradcheck.h"

using namespace ringgrad;
using namespace ringgrad::nn;
using namespace ringgrad::testing;

namespace {

// A small residual network in f64 built from every differentiable op.
struct TinyNet {
  Variable w1, gamma, beta, w2, fc_w, fc_b;
  Tensor running_mean = Tensor::zeros({3}, DType::f64),
         running_var = Tensor::full({3}, 1.0, DType::f64);
  Tensor labels = Tensor::from_vector<int64_t>({1, 0, 3}, {3});

  explicit TinyNet(Generator& g)
      : w1(random_tensor({3, 2, 3, 3}, g, DType::f64, 0.5), true),
        gamma(random_tensor({3}, g), true),
        beta(random_tensor({3}, g), true),
        w2(random_tensor({3, 3, 1, 1}, g, DType::f64, 0.5), true),
        fc_w(random_tensor({4, 3}, g), true),
        fc_b(random_tensor({4}, g), true) {}

  Variable loss(const Variable& x) {
    kernels::Conv2dParams p;
    p.pad_h = p.pad_w = 1;
    Variable h = relu(batch_norm(conv2d(x, w1, Variable(), p), gamma, beta, running_mean,
                                 running_var, true, 0.1, 1e-5));
    kernels::Conv2dParams p2;
    Variable r = add_relu(conv2d(h, w2, Variable(), p2), h);  // residual: h used twice
    kernels::Pool2dParams mp;
    mp.kernel_h = mp.kernel_w = 2;
    mp.stride_h = mp.stride_w = 2;
    Variable pooled = global_avg_pool(max_pool2d(r, mp));
    return cross_entropy(linear(reshape(pooled, {3, 3}), fc_w, fc_b), labels);
  }
};

}  // namespace

TEST_CASE("autograd: a composed network's gradients match finite differences") {
  Generator g(5);
  TinyNet net(g);
  Variable x(random_tensor({3, 2, 6, 6}, g), true);
  backward(net.loss(x));
  Tensor one = Tensor::full({}, 1.0, DType::f64);
  for (Variable* v : {&x, &net.w1, &net.gamma, &net.beta, &net.w2, &net.fc_w, &net.fc_b}) {
    Tensor analytic = v->grad().clone();
    auto f = [&] {
      NoGradGuard no_grad;
      return net.loss(x).value();
    };
    check_close(analytic, numeric_gradient(f, v->value(), one, 1e-5), 1e-5, "network gradient");
  }
}

TEST_CASE("autograd: a conv cropped to the taps that meet the image has the true gradients") {
  // conv2d crops a kernel whose border taps only ever meet padding once, for forward and
  // backward (nn/autograd/ops_linear.cpp, weight_crop): a 3x3 pad-1 kernel on 1x1 images keeps
  // its centre, on 2x2 images at stride 2 its lower-right 2x2. Finite differences of the loss
  // see the whole kernel: the outer taps' gradient is zero, the kept taps' is where they are.
  struct Case {
    Shape x;
    int stride;
    int64_t kept;  // taps kept per kernel
  };
  Generator g(9);
  for (const Case& c : {Case{{2, 3, 1, 1}, 1, 1}, Case{{2, 3, 2, 2}, 2, 4}}) {
    CAPTURE(c.x.str());
    kernels::Conv2dParams p;
    p.stride_h = p.stride_w = c.stride;
    p.pad_h = p.pad_w = 1;
    Variable x(random_tensor(c.x, g), true), w(random_tensor({4, 3, 3, 3}, g), true);
    const kernels::TapWindow taps = kernels::conv2d_tap_window(c.x, w.shape(), p);
    REQUIRE((taps.r1 - taps.r0) * (taps.s1 - taps.s0) == c.kept);
    const Tensor labels = Tensor::from_vector<int64_t>({1, 2}, {2});
    auto loss = [&] { return cross_entropy(reshape(conv2d(x, w, Variable(), p), {2, 4}), labels); };
    backward(loss());
    const Tensor one = Tensor::full({}, 1.0, DType::f64);
    auto f = [&] {
      NoGradGuard no_grad;
      return loss().value();
    };
    for (Variable* v : {&x, &w}) {
      const Tensor analytic = v->grad().clone();
      check_close(analytic, numeric_gradient(f, v->value(), one, 1e-5), 1e-6, "conv gradient");
    }
    int64_t nonzero = 0;
    for (double d : w.grad().to_vector<double>()) nonzero += d != 0;
    CHECK(nonzero == 4 * 3 * c.kept);
  }
}

TEST_CASE("autograd: gradients accumulate across backward calls until zeroed") {
  Variable w(Tensor::from_vector<double>({2.0, -1.0}, {1, 2}), true);
  Variable x(Tensor::from_vector<double>({3.0, 4.0}, {1, 2}));
  Tensor labels = Tensor::from_vector<int64_t>({0}, {1});
  auto run = [&] { backward(cross_entropy(linear(x, w, Variable()), labels)); };
  run();
  Tensor first = w.grad().clone();
  run();
  CHECK(w.grad().to_vector<double>()[0] == doctest::Approx(2 * first.to_vector<double>()[0]));
  w.zero_grad();
  run();
  CHECK(w.grad().to_vector<double>()[0] == doctest::Approx(first.to_vector<double>()[0]));
  CHECK(x.impl()->grad.defined() == false);  // x does not require grad
}

TEST_CASE(
    "autograd: a second gradient is summed without changing a gradient it shares storage with") {
  // add's backward hands the same gradient to both inputs: v's first gradient is u's too, and
  // v's second (from q, run later) must not be added into it. Then x.grad is 14 dlogits; adding
  // in place would make both 3 dlogits and x.grad 24 dlogits.
  Generator g(4);
  Tensor x0 = random_tensor({2, 3}, g, DType::f64);
  Tensor labels = Tensor::from_vector<int64_t>({2, 0}, {2});
  Variable x(x0.clone(), true);
  Variable v = mul(x, 3.0), u = mul(x, 5.0);
  Variable q = mul(v, 2.0);  // created before p, so p's backward runs first
  Variable p = add(v, u);
  backward(cross_entropy(add(p, q), labels));
  Variable reference(x0.clone(), true);
  backward(cross_entropy(mul(reference, 14.0), labels));
  check_close(x.grad(), reference.grad(), 1e-12, "x.grad");
}

TEST_CASE("autograd: grad-ready hooks fire once per backward, after the last contribution") {
  Generator g(2);
  Variable w(random_tensor({2, 2}, g), true);
  Variable x(random_tensor({3, 2}, g));
  Tensor labels = Tensor::from_vector<int64_t>({0, 1, 1}, {3});
  int fired = 0;
  Tensor grad_at_hook;
  w.add_grad_ready_hook([&] {
    ++fired;
    grad_at_hook = w.grad().clone();
  });
  // w is used twice: the hook must see the sum of both contributions.
  Variable h = linear(x, w, Variable());
  Variable loss = cross_entropy(linear(h, w, Variable()), labels);
  backward(loss);
  CHECK(fired == 1);
  check_close(grad_at_hook, w.grad(), 0, "hook saw the final gradient");
}

TEST_CASE("autograd: no_grad records nothing, backward needs a scalar that requires grad") {
  Variable w(Tensor::from_vector<double>({1.0, 2.0}, {1, 2}), true);
  Variable x(Tensor::from_vector<double>({1.0, 1.0}, {1, 2}));
  {
    NoGradGuard guard;
    CHECK_FALSE(grad_enabled());
    Variable y = linear(x, w, Variable());
    CHECK_FALSE(y.requires_grad());
    CHECK_THROWS_AS(backward(y), Error);
  }
  CHECK(grad_enabled());
  Variable y = linear(x, w, Variable());
  CHECK(y.requires_grad());
  Variable two = linear(Variable(Tensor::from_vector<double>({1, 1, 1, 1}, {2, 2})), w, Variable());
  CHECK_THROWS_AS(backward(two), Error);  // (2, 1): not a scalar
}

// Tests for sgd_step (kernels/cpu/sgd.cpp): a hand case, several steps against a plain
// reference of torch.optim.SGD's algorithm (plain, momentum, dampening, Nesterov, weight
// decay), PyTorch reference values, grad left untouched and argument errors.
#include <optional>
#include <vector>

#include "core/rng.h"
#include "kernels/ops.h"
#include "tests/kernels/gradcheck.h"

using namespace ringgrad;
using namespace ringgrad::testing;
using kernels::SgdParams;

namespace {

// torch.optim.SGD (_single_tensor_sgd) for one parameter, written as its Python reads:
// d_p = grad (+ weight_decay * param); buf = clone(d_p) first, else buf * momentum +
// (1 - dampening) * d_p; d_p = nesterov ? d_p + momentum * buf : buf; param += -lr * d_p.
struct ReferenceSgd {
  kernels::SgdParams p;
  std::vector<double> param;
  std::optional<std::vector<double>> buf;

  void step(const std::vector<double>& grad) {
    std::vector<double> d_p = grad;
    if (p.weight_decay != 0)
      for (size_t i = 0; i < d_p.size(); ++i) d_p[i] += p.weight_decay * param[i];
    if (p.momentum != 0) {
      if (!buf) {
        buf = d_p;
      } else {
        for (size_t i = 0; i < d_p.size(); ++i)
          (*buf)[i] = (*buf)[i] * p.momentum + (1 - p.dampening) * d_p[i];
      }
      for (size_t i = 0; i < d_p.size(); ++i)
        d_p[i] = p.nesterov ? d_p[i] + p.momentum * (*buf)[i] : (*buf)[i];
    }
    for (size_t i = 0; i < d_p.size(); ++i) param[i] += -p.lr * d_p[i];
  }
};

// Runs `grads.size()` steps of the kernel on a parameter of dtype t starting at `initial`.
Tensor run_kernel(const kernels::SgdParams& p, const std::vector<double>& initial,
                  const std::vector<std::vector<double>>& grads, DType t) {
  const Shape shape{static_cast<int64_t>(initial.size())};
  Tensor param = Tensor::from_vector<double>(initial, shape).to(t);
  Tensor buf = p.momentum != 0 ? Tensor::empty(shape, t) : Tensor();
  for (size_t s = 0; s < grads.size(); ++s) {
    Tensor grad = Tensor::from_vector<double>(grads[s], shape).to(t);
    kernels::sgd_step(param, buf, grad, p, /*first_step=*/s == 0);
  }
  return param;
}

}  // namespace

TEST_CASE("sgd step worked by hand") {
  // Plain: p = {1, -2} - 0.1 * {0.5, 0.25} = {0.95, -2.025}.
  check_close(run_kernel(SgdParams{0.1, 0, 0, 0, false}, {1, -2}, {{0.5, 0.25}}, DType::f64),
              Tensor::from_vector<double>({0.95, -2.025}, {2}), 1e-15, "plain by hand");
  // Momentum 0.5, two steps on p = 1: buf = 2 then 0.5 * 2 + 4 = 5; p = 1 - 0.1 * 2 - 0.1 * 5.
  check_close(run_kernel(SgdParams{0.1, 0.5, 0, 0, false}, {1}, {{2}, {4}}, DType::f64),
              Tensor::from_vector<double>({0.3}, {1}), 1e-15, "momentum by hand");
}

TEST_CASE("sgd over several steps follows torch.optim.SGD's algorithm") {
  struct Config {
    const char* name;
    kernels::SgdParams p;
  };
  const Config configs[] = {
      {"plain", SgdParams{0.1, 0, 0, 0, false}},
      {"momentum", SgdParams{0.05, 0.9, 0, 0, false}},
      {"momentum with dampening", SgdParams{0.05, 0.9, 0.3, 0, false}},
      {"nesterov", SgdParams{0.05, 0.9, 0, 0, true}},
      {"weight decay", SgdParams{0.1, 0, 0, 0.05, false}},
      {"momentum, dampening and weight decay", SgdParams{0.02, 0.8, 0.1, 1e-2, false}},
      {"nesterov with weight decay", SgdParams{0.02, 0.8, 0, 1e-2, true}},
  };
  Generator g(23);
  const int64_t n = 37;
  std::vector<double> initial(n);
  for (double& v : initial) v = g.normal();
  std::vector<std::vector<double>> grads(5, std::vector<double>(n));
  for (auto& step : grads)
    for (double& v : step) v = g.normal();

  for (const Config& c : configs) {
    INFO(c.name);
    ReferenceSgd reference{c.p, initial, std::nullopt};
    for (const auto& grad : grads) reference.step(grad);
    const Tensor expected = Tensor::from_vector<double>(reference.param, {n});
    check_close(run_kernel(c.p, initial, grads, DType::f64), expected, 1e-14, "f64");
    check_close(run_kernel(c.p, initial, grads, DType::f32), expected, 1e-5, "f32");
  }
}

TEST_CASE("sgd matches PyTorch 1.13 over three steps") {
  // Expected from PyTorch 1.13: torch.optim.SGD([p], lr=0.1, momentum=0.9, ...) in float64,
  // p = [1, -2, 0.5], p.grad set to each row of `grads` before each opt.step().
  const std::vector<std::vector<double>> grads = {
      {0.5, -1.0, 0.25}, {0.1, 0.3, -0.2}, {-0.4, 0.0, 1.0}};
  SUBCASE("nesterov=True, weight_decay=0.01") {
    check_close(
        run_kernel(SgdParams{0.1, 0.9, 0, 0.01, true}, {1, -2, 0.5}, grads, DType::f64),
        Tensor::from_vector<double>({0.869465558191, -1.722250616382, 0.2743925290955}, {3}), 1e-13,
        "nesterov");
  }
  SUBCASE("dampening=0.5, weight_decay=0.01") {
    check_close(
        run_kernel(SgdParams{0.1, 0.9, 0.5, 0.01, false}, {1, -2, 0.5}, grads, DType::f64),
        Tensor::from_vector<double>({0.87093963725, -1.7493667744999999, 0.399213568625}, {3}),
        1e-13, "dampening");
  }
}

TEST_CASE("sgd leaves grad untouched and checks its arguments") {
  Tensor param = Tensor::from_vector<float>({1, 2, 3}, {3});
  Tensor grad = Tensor::from_vector<float>({0.5f, -0.5f, 2}, {3});
  Tensor buf = Tensor::empty({3});
  kernels::sgd_step(param, buf, grad, SgdParams{0.1, 0.9, 0, 0.1, true}, true);
  CHECK(grad.to_vector<float>() == std::vector<float>{0.5f, -0.5f, 2});

  Tensor no_buf;
  CHECK_THROWS_WITH_AS(
      kernels::sgd_step(param, no_buf, grad, SgdParams{0.1, 0.9, 0, 0, false}, true),
      doctest::Contains("momentum_buf is undefined"), Error);
  Tensor short_grad = Tensor::empty({2});
  CHECK_THROWS_AS(
      kernels::sgd_step(param, no_buf, short_grad, SgdParams{0.1, 0, 0, 0, false}, false), Error);
  Tensor double_grad = Tensor::zeros({3}, DType::f64);
  CHECK_THROWS_AS(
      kernels::sgd_step(param, no_buf, double_grad, SgdParams{0.1, 0, 0, 0, false}, false), Error);
}

// Tests for the cross-entropy kernels (kernels/cpu/loss.cpp): a hand case, a direct
// log(sum exp) formula, stability for large logits, PyTorch reference values, finite-difference
// gradients, count_correct and the label errors.
#include <cmath>
#include <limits>

#include "core/rng.h"
#include "kernels/ops.h"
#include "tests/kernels/gradcheck.h"

using namespace ringgrad;
using namespace ringgrad::testing;

namespace {

Tensor labels_of(const std::vector<int64_t>& v) {
  return Tensor::from_vector<int64_t>(v, {static_cast<int64_t>(v.size())});
}

double loss_of(const Tensor& logits, const Tensor& labels, Tensor* log_probs_out = nullptr) {
  Tensor loss = Tensor::empty({}, logits.dtype());
  Tensor log_probs = Tensor::empty(logits.shape(), logits.dtype());
  kernels::cross_entropy_forward(loss, log_probs, logits, labels);
  if (log_probs_out) *log_probs_out = log_probs;
  return loss.item();
}

// N labels drawn uniformly from C classes.
std::vector<int64_t> random_labels(Generator& g, int64_t N, int64_t C) {
  std::vector<int64_t> labels(N);
  for (int64_t& label : labels) label = static_cast<int64_t>(g.below(C));
  return labels;
}

}  // namespace

TEST_CASE("cross entropy forward worked by hand") {
  // Row 0: logits {0, 0}, label 0: softmax {1/2, 1/2}, nll = log 2.
  // Row 1: logits {0, log 3}, label 1: softmax {1/4, 3/4}, nll = log(4/3).
  Tensor logits = Tensor::from_vector<double>({0, 0, 0, std::log(3.0)}, {2, 2});
  Tensor log_probs;
  const double loss = loss_of(logits, labels_of({0, 1}), &log_probs);
  CHECK(loss == doctest::Approx((std::log(2.0) + std::log(4.0 / 3.0)) / 2).epsilon(1e-14));
  check_close(log_probs,
              Tensor::from_vector<double>(
                  {std::log(0.5), std::log(0.5), std::log(0.25), std::log(0.75)}, {2, 2}),
              1e-14, "log_probs");
}

TEST_CASE("cross entropy equals -mean(logit[label] - log(sum exp(logits)))") {
  Generator g(17);
  const int64_t N = 6, C = 5;
  Tensor logits = random_tensor({N, C}, g, DType::f64, 3.0);
  const std::vector<int64_t> labels = random_labels(g, N, C);
  double expected = 0;
  for (int64_t i = 0; i < N; ++i) {
    double sum_exp = 0;
    for (int64_t j = 0; j < C; ++j) sum_exp += std::exp(logits.data<double>()[i * C + j]);
    expected -= (logits.data<double>()[i * C + labels[i]] - std::log(sum_exp)) / N;
  }
  CHECK(loss_of(logits, labels_of(labels)) == doctest::Approx(expected).epsilon(1e-13));
  CHECK(loss_of(logits.to(DType::f32), labels_of(labels)) ==
        doctest::Approx(expected).epsilon(1e-5));
}

TEST_CASE("cross entropy is stable for logits whose exp overflows") {
  // exp(1000) overflows double; the loss of {1000, 1001} with label 0 is log(1 + e).
  Tensor logits = Tensor::from_vector<double>({1000, 1001}, {1, 2});
  const double loss = loss_of(logits, labels_of({0}));
  CHECK(loss == doctest::Approx(std::log1p(std::exp(1.0))).epsilon(1e-12));
}

TEST_CASE("cross entropy matches PyTorch 1.13 loss and gradient") {
  // Expected from PyTorch 1.13: F.cross_entropy(lg, torch.tensor([0, 2, 1])) in float64 and
  // lg.grad after loss.backward().
  Tensor logits =
      Tensor::from_vector<double>({2.0, -1.0, 0.5, 0.1, 0.2, 3.0, -2.0, 1.0, 1.5}, {3, 3});
  Tensor labels = labels_of({0, 2, 1}), log_probs;
  CHECK(loss_of(logits, labels, &log_probs) == doctest::Approx(0.44787063817030676).epsilon(1e-13));
  Tensor dlogits = Tensor::empty({3, 3}, DType::f64);
  kernels::cross_entropy_backward(dlogits, log_probs, labels, 1.0);
  const std::vector<double> torch_grad = {
      -0.07146765513690803, 0.013037524423562482, 0.05843013071334556,
      0.01643710905275883,  0.018165814902347015, -0.03460292395510585,
      0.006149949294463345, -0.20980829970365789, 0.20365835040919456};
  check_close(dlogits, Tensor::from_vector<double>(torch_grad, {3, 3}), 1e-13, "dlogits");
}

TEST_CASE("cross entropy backward matches finite differences") {
  Generator g(19);
  const int64_t N = 4, C = 7;
  Tensor logits = random_tensor({N, C}, g, DType::f64, 2.0);
  Tensor labels = labels_of(random_labels(g, N, C)), log_probs;
  loss_of(logits, labels, &log_probs);
  const double dloss = 0.7;
  Tensor dlogits = Tensor::empty({N, C}, DType::f64);
  kernels::cross_entropy_backward(dlogits, log_probs, labels, dloss);
  auto f = [&] { return Tensor::full({}, loss_of(logits, labels), DType::f64); };
  check_close(dlogits, numeric_gradient(f, logits, Tensor::full({}, dloss, DType::f64)), 1e-7,
              "dlogits");
}

TEST_CASE("count_correct counts rows whose first maximum is the label") {
  // Row 0: argmax 1 (label 1, correct). Row 1: tie between 0 and 2 -> 0 (label 2, wrong).
  // Row 2: argmax 2 (label 2, correct). Row 3: argmax 0 (label 1, wrong).
  Tensor logits = Tensor::from_vector<float>({0, 5, 1, 3, -1, 3, 0, 0, 0.5f, 9, 8, 7}, {4, 3});
  CHECK(kernels::count_correct(logits, labels_of({1, 2, 2, 1})) == 2);
  CHECK(kernels::count_correct(logits, labels_of({1, 0, 2, 0})) == 4);
}

TEST_CASE("count_correct never counts a row holding a NaN logit") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // Without the NaN, row 0 predicts 1 and row 1 predicts 0, both the label.
  Tensor logits = Tensor::from_vector<float>({0, 5, nan, 3, -1, 0}, {2, 3});
  CHECK(kernels::count_correct(logits, labels_of({1, 0})) == 1);
  Tensor first = Tensor::from_vector<float>({nan, 1, 0}, {1, 3});
  CHECK(kernels::count_correct(first, labels_of({0})) == 0);
}

TEST_CASE("cross entropy rejects bad labels and shapes") {
  Tensor logits = Tensor::zeros({3, 4}), log_probs = Tensor::empty({3, 4});
  Tensor loss = Tensor::empty({});
  CHECK_THROWS_WITH_AS(
      kernels::cross_entropy_forward(loss, log_probs, logits, labels_of({0, 5, 1})),
      doctest::Contains("label 5 in row 1"), InvalidArgument);
  CHECK_THROWS_WITH_AS(kernels::count_correct(logits, labels_of({0, 1, -1})),
                       doctest::Contains("label -1 in row 2"), InvalidArgument);
  CHECK_THROWS_AS(kernels::cross_entropy_forward(loss, log_probs, logits, labels_of({0, 1})),
                  Error);
  Tensor int32_labels = Tensor::from_vector<int32_t>({0, 1, 2}, {3});
  CHECK_THROWS_WITH_AS(kernels::cross_entropy_forward(loss, log_probs, logits, int32_labels),
                       doctest::Contains("int64"), Error);
  Tensor wrong_log_probs = Tensor::empty({4, 3});
  CHECK_THROWS_AS(
      kernels::cross_entropy_forward(loss, wrong_log_probs, logits, labels_of({0, 1, 2})), Error);
}

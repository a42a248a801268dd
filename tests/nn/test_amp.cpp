// Tests for mixed precision (nn/amp): the autocast policy (which op runs in which dtype, that
// master weights get f32 gradients close to those of an f32 run), GradScaler's state machine
// (PyTorch's defaults, growth, backoff and skipped steps, unscaling, misuse, its state through
// a checkpoint), short CPU training runs in bf16 and fp16 next to the f32 run, and evaluation
// under autocast.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/rng.h"
#include "nn/amp/autocast.h"
#include "nn/amp/grad_scaler.h"
#include "nn/autograd/ops.h"
#include "nn/data/mnist.h"
#include "nn/models/resnet.h"
#include "nn/modules/layers.h"
#include "nn/train/checkpoint.h"
#include "nn/train/evaluate.h"
#include "tests/nn/temp_dir.h"

using namespace ringgrad;
using namespace ringgrad::nn;
using amp::AutocastGuard;
using amp::GradScaler;

namespace {

Tensor random_f32(const Shape& shape, Generator& g, double scale = 1.0) {
  Tensor t = Tensor::empty(shape);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>(scale * g.normal());
  return t;
}

// conv -> BN -> relu -> global average pool -> linear -> cross-entropy: every op of both
// autocast lists and the ops between them.
struct SmallNet {
  Variable conv_w, gamma, beta, fc_w, fc_b;
  Tensor running_mean = Tensor::zeros({4}), running_var = Tensor::full({4}, 1.0);

  explicit SmallNet(Generator& g)
      : conv_w(random_f32({4, 2, 3, 3}, g, 0.3), true),
        gamma(Tensor::full({4}, 1.0), true),
        beta(Tensor::zeros({4}), true),
        fc_w(random_f32({3, 4}, g, 0.5), true),
        fc_b(random_f32({3}, g, 0.1), true) {}
  std::vector<Variable> params() const { return {conv_w, gamma, beta, fc_w, fc_b}; }

  Variable logits(const Tensor& x) {
    kernels::Conv2dParams p;
    p.pad_h = p.pad_w = 1;
    Variable y = conv2d(Variable(x), conv_w, Variable(), p);
    y = batch_norm(y, gamma, beta, running_mean, running_var, true, 0.1, 1e-5);
    return linear(global_avg_pool(relu(y)), fc_w, fc_b);
  }
};

struct Batch {
  Tensor x, labels;
};

Batch small_batch(Generator& g) {
  return {random_f32({6, 2, 5, 5}, g), Tensor::from_vector<int64_t>({0, 1, 2, 2, 1, 0}, {6})};
}

// max |a - b| / max |b|: the error relative to the gradient's scale.
double relative_error(const Tensor& a, const Tensor& b) {
  const float* x = a.data<float>();
  const float* y = b.data<float>();
  double worst = 0, size = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    worst = std::max(worst, std::abs(double(x[i]) - y[i]));
    size = std::max(size, std::abs(double(y[i])));
  }
  return worst / size;
}

// A one-parameter "model" whose loss is 3 * p: the gradient is exactly 3 (times the scale).
struct ScalarModel {
  Variable p{Tensor::full({1}, 2.0), true};
  Sgd sgd{{p}, [] {
            kernels::SgdParams o;
            o.lr = 0.5;
            return o;
          }()};
  // One scaled backward, as the training loop runs it.
  void backward_once(GradScaler& scaler) {
    sgd.zero_grad();
    backward(scaler.scale(mul(p, 3.0)));
  }
  void poison_grad(float value) { p.grad().data<float>()[0] = value; }
  float value() const { return p.value().data<float>()[0]; }
};

}  // namespace

TEST_CASE(
    "autocast: conv2d and linear run in half, cross_entropy in f32, batch_norm as PyTorch's CPU") {
  Generator g(1);
  SmallNet net(g);
  Batch b = small_batch(g);
  kernels::Conv2dParams p;
  for (DType half : {DType::bf16, DType::f16}) {
    CAPTURE(std::string(dtype_name(half)));
    AutocastGuard autocast(half);
    REQUIRE(amp::autocast_dtype() == half);
    Variable conv = conv2d(Variable(b.x), net.conv_w, Variable(), p);
    CHECK(conv.value().dtype() == half);
    // PyTorch's CPU autocast lists batch_norm in neither list: a bf16 input stays bf16 (f32
    // statistics inside); f16, which our CPU batch norm does not take, is cast up to f32.
    const DType norm_dtype = half == DType::bf16 ? DType::bf16 : DType::f32;
    Variable bn =
        batch_norm(conv, net.gamma, net.beta, net.running_mean, net.running_var, true, 0.1, 1e-5);
    CHECK(bn.value().dtype() == norm_dtype);
    CHECK(relu(bn).value().dtype() == norm_dtype);  // outside both lists: its input's dtype
    Variable fused = batch_norm_relu(conv, bn, net.gamma, net.beta, net.running_mean,
                                     net.running_var, true, 0.1, 1e-5);
    CHECK(fused.value().dtype() == norm_dtype);
    Variable logits = linear(global_avg_pool(bn), net.fc_w, net.fc_b);
    CHECK(logits.value().dtype() == half);
    CHECK(cross_entropy(logits, b.labels).value().dtype() == DType::f32);
    // The master weights themselves are untouched.
    CHECK(net.conv_w.value().dtype() == DType::f32);
    CHECK(net.fc_w.value().dtype() == DType::f32);
  }
  CHECK(!amp::autocast_dtype().has_value());  // the guard restored "off"
  CHECK(net.logits(b.x).value().dtype() == DType::f32);
}

TEST_CASE("autocast: guards nest, f64 is never cast, and only half dtypes are accepted") {
  {
    AutocastGuard outer(DType::bf16);
    {
      AutocastGuard off(std::nullopt);
      CHECK(!amp::autocast_dtype().has_value());
    }
    CHECK(amp::autocast_dtype() == DType::bf16);
    Generator g(2);
    Variable x(random_f32({2, 3}, g).to(DType::f64)), w(random_f32({4, 3}, g).to(DType::f64));
    CHECK(linear(x, w, Variable()).value().dtype() == DType::f64);
  }
  CHECK_THROWS_WITH_AS(AutocastGuard(DType::f32), doctest::Contains("float16 or bfloat16"), Error);
  CHECK(choice_value(amp::kAmpModes, "none", "--amp") == std::nullopt);
  CHECK(choice_value(amp::kAmpModes, "fp16", "--amp") == DType::f16);
  CHECK(choice_value(amp::kAmpModes, "bf16", "--amp") == DType::bf16);
  CHECK_THROWS_AS(choice_value(amp::kAmpModes, "fp8", "--amp"), InvalidArgument);
}

TEST_CASE("autocast: master weights get f32 gradients close to those of the f32 run") {
  Generator g(3);
  const Batch b = small_batch(g);
  SmallNet reference_net(g);
  backward(cross_entropy(reference_net.logits(b.x), b.labels));
  const std::vector<Variable> reference = reference_net.params();
  for (DType half : {DType::bf16, DType::f16}) {
    CAPTURE(std::string(dtype_name(half)));
    // f16 lands within a few units of its rounding (2^-11); bf16's 8x coarser rounding also
    // moves a few pre-relu values across zero in this small batch, which switches their
    // gradient on or off (most on the conv weight), hence the wider bound.
    const double tol = half == DType::bf16 ? 0.1 : 4e-3;
    Generator same(3);
    small_batch(same);
    SmallNet net(same);
    Variable loss;
    {
      AutocastGuard autocast(half);
      loss = cross_entropy(net.logits(b.x), b.labels);
    }
    backward(loss);  // outside the guard: the recorded casts carry the dtypes
    const std::vector<Variable> params = net.params();
    const char* names[] = {"conv weight", "bn gamma", "bn beta", "fc weight", "fc bias"};
    for (size_t i = 0; i < params.size(); ++i) {
      CAPTURE(std::string(names[i]));
      Variable p = params[i];
      Variable r = reference[i];
      REQUIRE(p.grad().defined());
      CHECK(p.grad().dtype() == DType::f32);
      const double err = relative_error(p.grad(), r.grad());
      CAPTURE(err);
      CHECK(err < tol);
      CHECK(err > 0);  // the half run did round somewhere: autocast really was on
    }
  }
}

TEST_CASE("autocast: a CPU conv hands its master weight the f32 sums of its half products") {
  // The weight is the conv's own input (no recorded cast), so its gradient is the half conv's
  // weight gradient taken in f32. Beside it, the same conv fed a recorded cast of the weight:
  // its gradient is that one rounded to half and widened, which is all that may differ. On 1x1
  // images conv2d crops the master weight to its centre taps as it casts it (weight_crop).
  for (const Shape& image : {Shape{4, 6, 7, 7}, Shape{4, 6, 1, 1}})
    for (DType half : {DType::bf16, DType::f16}) {
      CAPTURE(std::string(dtype_name(half)));
      CAPTURE(image.str());
      Generator g(5);
      const Tensor w0 = random_f32({8, 6, 3, 3}, g, 0.3), x = random_f32(image, g);
      const Tensor labels = Tensor::from_vector<int64_t>({0, 3, 5, 7}, {4});
      kernels::Conv2dParams p;
      p.pad_h = p.pad_w = 1;
      Variable master(w0.clone(), true), through_cast(w0.clone(), true);
      {
        AutocastGuard autocast(half);
        auto loss = [&](const Variable& w) {  // f16 has no CPU pooling: the conv's y goes to f32
          const Variable y = to_dtype(conv2d(Variable(x), w, Variable(), p), DType::f32);
          return cross_entropy(global_avg_pool(y), labels);
        };
        backward(loss(master));
        backward(loss(to_dtype(through_cast, half)));
      }
      REQUIRE(master.grad().dtype() == DType::f32);
      CHECK(relative_error(master.grad().to(half).to(DType::f32), through_cast.grad()) == 0);
      CHECK(relative_error(master.grad(), through_cast.grad()) > 0);  // not rounded to half
    }
}

TEST_CASE("grad scaler: PyTorch's defaults") {
  GradScaler scaler;
  CHECK(scaler.enabled());
  CHECK(scaler.get_scale() == 65536.0);
  CHECK(scaler.state().growth_tracker == 0);
  const amp::GradScalerOptions o;
  CHECK(o.growth_factor == 2.0);
  CHECK(o.backoff_factor == 0.5);
  CHECK(o.growth_interval == 2000);
}

TEST_CASE("grad scaler: scale multiplies the loss, unscale_ divides the gradients back") {
  ScalarModel m;
  GradScaler scaler;
  Variable scaled = scaler.scale(mul(m.p, 3.0));
  CHECK(scaled.value().item() == 6.0 * 65536);
  m.sgd.zero_grad();
  backward(scaled);
  CHECK(m.p.grad().item() == 3.0 * 65536);
  scaler.unscale_(m.sgd);
  CHECK(m.p.grad().item() == 3.0);
  CHECK(!scaler.found_inf());
  CHECK(scaler.step(m.sgd));  // unscaled already: step() does not divide again
  CHECK(m.value() == doctest::Approx(2.0 - 0.5 * 3.0));
  scaler.update();
  CHECK(scaler.state().growth_tracker == 1);
}

TEST_CASE("grad scaler: the scale doubles after growth_interval good steps in a row") {
  ScalarModel m;
  GradScaler scaler;
  for (int i = 1; i < 2000; ++i) {
    m.backward_once(scaler);
    scaler.step(m.sgd);
    scaler.update();
  }
  CHECK(scaler.get_scale() == 65536.0);
  CHECK(scaler.state().growth_tracker == 1999);
  m.backward_once(scaler);
  scaler.step(m.sgd);
  scaler.update();
  CHECK(scaler.get_scale() == 131072.0);
  CHECK(scaler.state().growth_tracker == 0);
  CHECK(scaler.skipped_steps() == 0);
}

TEST_CASE("grad scaler: an inf or NaN gradient skips the step and backs the scale off") {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  for (float bad : {kInf, std::numeric_limits<float>::quiet_NaN()}) {
    CAPTURE(bad);
    ScalarModel m;
    amp::GradScalerOptions o;
    o.growth_interval = 3;
    GradScaler scaler(o);
    for (int i = 0; i < 2; ++i) {  // two good steps: one short of growth
      m.backward_once(scaler);
      scaler.step(m.sgd);
      scaler.update();
    }
    REQUIRE(scaler.state().growth_tracker == 2);
    const float before = m.value();
    m.backward_once(scaler);
    m.poison_grad(bad);
    CHECK_FALSE(scaler.step(m.sgd));
    CHECK(scaler.found_inf());
    CHECK(m.value() == before);  // the parameter did not move
    scaler.update();
    CHECK(scaler.get_scale() == 32768.0);
    CHECK(scaler.state().growth_tracker == 0);  // the run of good steps starts over
    CHECK(scaler.skipped_steps() == 1);
    for (int i = 0; i < 3; ++i) {
      m.backward_once(scaler);
      CHECK(scaler.step(m.sgd));
      scaler.update();
    }
    CHECK(scaler.get_scale() == 65536.0);
  }
}

TEST_CASE("grad scaler: a grown scale that would overflow is not taken") {
  amp::GradScalerOptions o;
  o.init_scale = std::numeric_limits<double>::max() / 1.5;
  o.growth_interval = 1;
  GradScaler scaler(o);
  ScalarModel m;
  m.sgd.zero_grad();
  backward(mul(m.p, 1.0));  // not scaled: only the update of the scale is under test here
  scaler.step(m.sgd);
  scaler.update();
  CHECK(scaler.get_scale() == o.init_scale);
  CHECK(scaler.state().growth_tracker == 0);
}

TEST_CASE("grad scaler: calls out of order are errors") {
  ScalarModel m;
  GradScaler scaler;
  CHECK_THROWS_WITH_AS(scaler.update(), doctest::Contains("needs a step()"), Error);
  m.backward_once(scaler);
  scaler.unscale_(m.sgd);
  CHECK_THROWS_WITH_AS(scaler.unscale_(m.sgd), doctest::Contains("already called"), Error);
  scaler.step(m.sgd);
  CHECK_THROWS_WITH_AS(scaler.step(m.sgd), doctest::Contains("already called"), Error);
  scaler.update();
  CHECK_THROWS_AS(GradScaler([] {
                    amp::GradScalerOptions o;
                    o.backoff_factor = 1.5;
                    return o;
                  }()),
                  Error);
}

TEST_CASE("grad scaler: disabled (bf16) it passes the loss and the step through") {
  amp::GradScalerOptions o;
  o.enabled = false;
  GradScaler scaler(o);
  ScalarModel m;
  Variable loss = mul(m.p, 3.0);
  CHECK(scaler.scale(loss).impl() == loss.impl());
  m.sgd.zero_grad();
  backward(loss);
  m.poison_grad(std::numeric_limits<float>::infinity());
  CHECK(scaler.step(m.sgd));  // no inf check: bf16 does not skip
  scaler.update();
  CHECK(scaler.get_scale() == 65536.0);
}

TEST_CASE("grad scaler: its state goes through a checkpoint bit for bit") {
  nn::testing::TempDir dir;
  Generator g(4);
  Linear model(4, 3, g);
  Sgd sgd(model.parameters(), kernels::SgdParams());
  CheckpointInfo info{"linear", 0, 10};
  info.steps_per_epoch = 10;
  GradScaler saved;
  amp::GradScalerState state;
  state.scale = 65536.0 * std::ldexp(1.0, -37) * 3;  // not a short decimal
  state.growth_tracker = 1234;
  saved.load_state(state);
  save_checkpoint(dir.file("amp.safetensors"), model, sgd, {0, 3, 3}, info, &saved);

  GradScaler loaded;
  load_checkpoint(dir.file("amp.safetensors"), model, sgd, info, &loaded);
  CHECK(loaded.get_scale() == state.scale);
  CHECK(loaded.state().growth_tracker == 1234);

  // A checkpoint of a run without loss scaling leaves a new scaler at its initial state.
  save_checkpoint(dir.file("plain.safetensors"), model, sgd, {0, 3, 3}, info);
  GradScaler fresh;
  load_checkpoint(dir.file("plain.safetensors"), model, sgd, info, &fresh);
  CHECK(fresh.get_scale() == 65536.0);

  amp::GradScalerState bad;
  bad.growth_tracker = 2000;
  CHECK_THROWS_WITH_AS(fresh.load_state(bad), doctest::Contains("growth tracker"), Error);
}

namespace {

// Trains resnet8 on a fixed synthetic batch for `steps` steps (--amp as given) and returns the
// loss of every step.
std::vector<double> train_losses(const std::string& amp_mode, int steps) {
  Generator rng(7);
  auto model = make_model("resnet8", rng);
  kernels::SgdParams o;
  o.lr = 0.05;
  o.momentum = 0.9;
  Sgd sgd(model->parameters(), o);
  const std::optional<DType> dtype = choice_value(amp::kAmpModes, amp_mode, "--amp");
  amp::GradScalerOptions so;
  so.enabled = dtype == DType::f16;
  GradScaler scaler(so);
  const Dataset data = synthetic_mnist(32, 11);
  std::vector<double> losses;
  for (int i = 0; i < steps; ++i) {
    sgd.zero_grad();
    Variable loss;
    {
      AutocastGuard autocast(dtype);
      loss = cross_entropy(model->forward(Variable(data.images)), data.labels);
    }
    backward(scaler.scale(loss));
    scaler.step(sgd);
    scaler.update();
    losses.push_back(loss.value().item());
  }
  return losses;
}

}  // namespace

TEST_CASE("amp training: bf16 and fp16 on the CPU lower the loss and track the f32 run") {
  constexpr int kSteps = 20;
  const std::vector<double> f32 = train_losses("none", kSteps);
  REQUIRE(f32.back() < 0.5 * f32.front());
  for (const char* mode : {"bf16", "fp16"}) {
    CAPTURE(std::string(mode));
    const std::vector<double> half = train_losses(mode, kSteps);
    for (int i = 0; i < kSteps; ++i) {
      CAPTURE(i);
      CAPTURE(half[i]);
      CAPTURE(f32[i]);
      CHECK(std::abs(half[i] - f32[i]) < 0.02);  // both half dtypes stay well inside it
    }
    CHECK(half.back() < 0.5 * half.front());
  }
}

TEST_CASE("amp evaluation: under autocast the model scores as in f32, within rounding") {
  Generator rng(8);
  auto model = make_model("resnet8", rng);
  const Dataset test = synthetic_mnist(64, 12);
  const EvalResult f32 = evaluate(*model, test, 32, nullptr);
  for (DType half : {DType::bf16, DType::f16}) {
    CAPTURE(std::string(dtype_name(half)));
    AutocastGuard autocast(half);
    const EvalResult ev = evaluate(*model, test, 32, nullptr);  // half logits: count_correct widens
    CHECK(ev.count == 64);
    CHECK(ev.loss == doctest::Approx(f32.loss).epsilon(0.01));
    CHECK(std::abs(ev.accuracy - f32.accuracy) <= 2.0 / 64);  // a near-tie may flip
  }
}

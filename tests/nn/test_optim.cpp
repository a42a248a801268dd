// Tests for nn/optim: learning-rate schedules against PyTorch and the Sgd wrapper.
#include <doctest/doctest.h>

#include "nn/optim/lr_schedule.h"
#include "nn/optim/sgd.h"

using namespace ringgrad;
using namespace ringgrad::nn;

TEST_CASE("lr schedule: onecycle equals torch.optim.lr_scheduler.OneCycleLR") {
  // Reference values printed by PyTorch 1.13: OneCycleLR(SGD(lr=0.1, momentum=0.9),
  // max_lr=0.1, total_steps=100), lr and momentum of the param group before step i.
  LrSchedule s(LrScheduleKind::onecycle, 0.1, 100, 0);
  struct Row {
    int step;
    double lr, momentum;
  };
  const Row rows[] = {{0, 0.0040000000000000036, 0.95},
                      {1, 0.004281378056590748, 0.9497068978577179},
                      {10, 0.029516394846410082, 0.9234204220349895},
                      {29, 0.1, 0.85},
                      {30, 0.09994965352845243, 0.8500503466729342},
                      {50, 0.0793893450575732, 0.8706107373853763},
                      {99, 4e-07, 0.95}};
  for (const Row& r : rows) {
    CAPTURE(r.step);
    CHECK(s.lr(r.step) == doctest::Approx(r.lr).epsilon(1e-9));
    CHECK(*s.momentum(r.step) == doctest::Approx(r.momentum).epsilon(1e-9));
  }
}

TEST_CASE("lr schedule: warm-up, constant and cosine") {
  LrSchedule c(LrScheduleKind::constant, 0.2, 100, 4);
  CHECK(c.lr(0) == doctest::Approx(0.05));
  CHECK(c.lr(3) == doctest::Approx(0.2));
  CHECK(c.lr(80) == doctest::Approx(0.2));
  CHECK_FALSE(c.momentum(5).has_value());
  LrSchedule cos(LrScheduleKind::cosine, 0.2, 110, 10);
  CHECK(cos.lr(10) == doctest::Approx(0.2));
  CHECK(cos.lr(60) == doctest::Approx(0.1));
  CHECK(cos.lr(110) == doctest::Approx(0.0));
  CHECK(choice_value(kLrSchedules, "onecycle", "--lr-schedule") == LrScheduleKind::onecycle);
  CHECK_THROWS_WITH_AS(choice_value(kLrSchedules, "linear", "--lr-schedule"),
                       doctest::Contains("'linear' is not one of constant, cosine or onecycle"),
                       InvalidArgument);
}

TEST_CASE("sgd: skips parameters without gradients and keeps momentum per parameter") {
  Variable a(Tensor::from_vector<float>({1.0f}, {1}), true);
  Variable b(Tensor::from_vector<float>({5.0f}, {1}), true);
  kernels::SgdParams opts;
  opts.lr = 0.5;
  opts.momentum = 0.9;
  Sgd opt({a, b}, opts);
  a.set_grad(Tensor::from_vector<float>({2.0f}, {1}));
  opt.step();  // first step: buf = g = 2, a = 1 - 0.5 * 2
  CHECK(a.value().to_vector<float>()[0] == doctest::Approx(0.0));
  CHECK(b.value().to_vector<float>()[0] == 5.0f);
  CHECK_FALSE(opt.momentum_buffers()[1].defined());
  opt.step();  // buf = 0.9 * 2 + 2 = 3.8, a = 0 - 1.9
  CHECK(a.value().to_vector<float>()[0] == doctest::Approx(-1.9));
  opt.zero_grad();
  CHECK(a.grad().to_vector<float>()[0] == 0.0f);
}

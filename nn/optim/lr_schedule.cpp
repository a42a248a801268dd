// Learning-rate schedule formulas.
#include "nn/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace ringgrad::nn {

namespace {

constexpr double kPi = 3.14159265358979323846;
// Cosine interpolation from start (pct 0) to end (pct 1), OneCycleLR's "cos" annealing.
double cosine_anneal(double start, double end, double pct) {
  return end + (start - end) / 2.0 * (std::cos(kPi * pct) + 1.0);
}

// OneCycleLR phase boundaries: phase 1 ends at step pct_start * total - 1, phase 2 at total - 1.
struct OneCyclePhase {
  double pct;
  bool rising;
};
OneCyclePhase one_cycle_phase(int64_t step, int64_t total, double rise_steps) {
  const double end1 = rise_steps - 1.0;
  const double end2 = static_cast<double>(total) - 1.0;
  const double s = static_cast<double>(step);
  if (s <= end1) return {end1 > 0 ? s / end1 : 1.0, true};
  return {std::min(1.0, (s - end1) / std::max(1.0, end2 - end1)), false};
}

}  // namespace

LrSchedule::LrSchedule(LrScheduleKind kind, double peak_lr, int64_t total_steps,
                       int64_t warmup_steps)
    : kind_(kind),
      peak_lr_(peak_lr),
      total_steps_(std::max<int64_t>(1, total_steps)),
      warmup_steps_(warmup_steps) {
  RG_CHECK(warmup_steps >= 0, "warm-up steps must be >= 0");
  rise_steps_ = warmup_steps_ > 0 ? static_cast<double>(warmup_steps_)
                                  : 0.3 * static_cast<double>(total_steps_);  // pct_start 0.3
}

double LrSchedule::lr(int64_t step) const {
  if (kind_ == LrScheduleKind::onecycle) {
    const double initial = peak_lr_ / 25.0, final_lr = initial / 1e4;
    auto [pct, rising] = one_cycle_phase(step, total_steps_, rise_steps_);
    return rising ? cosine_anneal(initial, peak_lr_, pct) : cosine_anneal(peak_lr_, final_lr, pct);
  }
  if (step < warmup_steps_) return peak_lr_ * static_cast<double>(step + 1) / warmup_steps_;
  if (kind_ == LrScheduleKind::constant) return peak_lr_;
  const double span = static_cast<double>(std::max<int64_t>(1, total_steps_ - warmup_steps_));
  const double pct = std::min(1.0, static_cast<double>(step - warmup_steps_) / span);
  return cosine_anneal(peak_lr_, 0.0, pct);
}

std::optional<double> LrSchedule::momentum(int64_t step) const {
  if (kind_ != LrScheduleKind::onecycle) return std::nullopt;
  constexpr double kMax = 0.95, kBase = 0.85;
  auto [pct, rising] = one_cycle_phase(step, total_steps_, rise_steps_);
  return rising ? cosine_anneal(kMax, kBase, pct) : cosine_anneal(kBase, kMax, pct);
}

}  // namespace ringgrad::nn

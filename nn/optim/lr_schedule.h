// Learning-rate schedules, evaluated per optimiser step (as PyTorch's schedulers stepped once
// per batch):
//   constant: linear warm-up over warmup_steps, then peak_lr;
//   cosine:   linear warm-up, then cosine decay from peak_lr to 0 at total_steps;
//   onecycle: torch.optim.lr_scheduler.OneCycleLR with its defaults: cosine rise from
//             peak/25 to peak over the first 30% (or warmup_steps when given), cosine fall to
//             peak/25/1e4, and momentum cycled the opposite way between 0.95 and 0.85.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "core/choices.h"

namespace ringgrad::nn {

enum class LrScheduleKind { constant, cosine, onecycle };
inline const Choices<LrScheduleKind> kLrSchedules{{"constant", LrScheduleKind::constant},
                                                  {"cosine", LrScheduleKind::cosine},
                                                  {"onecycle", LrScheduleKind::onecycle}};

class LrSchedule {
 public:
  LrSchedule(LrScheduleKind kind, double peak_lr, int64_t total_steps, int64_t warmup_steps);
  double lr(int64_t step) const;
  std::optional<double> momentum(int64_t step) const;  // set only by onecycle

 private:
  LrScheduleKind kind_;
  double peak_lr_;
  int64_t total_steps_, warmup_steps_;
  double rise_steps_;  // onecycle: steps of the rising phase
};

}  // namespace ringgrad::nn

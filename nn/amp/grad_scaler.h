// GradScaler: dynamic loss scaling for fp16 training (PyTorch's torch.amp.GradScaler, same
// defaults). fp16 gradients below 2^-24 flush to zero, so the loss is multiplied by `scale`
// before backward and the f32 master gradients are divided by it before the step. A step whose
// gradients hold an inf or NaN is skipped and the scale halved; after growth_interval good
// steps in a row the scale doubles. bf16 has f32's range and needs none of this (disabled
// scaler: scale() and step() pass through, as PyTorch's GradScaler(enabled=False)).
//   backward(scaler.scale(loss)); scaler.step(optimizer); scaler.update();
// DDP: backward() returns with the gradients already averaged over the ranks (the reducer
// waits for its buckets in a backward callback), and an inf or NaN survives the sum, so every
// rank finds the same found_inf and skips the same steps: no extra collective is needed.
#pragma once
#include <cstdint>

#include "nn/autograd/variable.h"
#include "nn/optim/sgd.h"

namespace ringgrad::nn::amp {

struct GradScalerOptions {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  bool enabled = true;
};

// What a checkpoint keeps so that a resumed run scales and skips exactly as the original.
struct GradScalerState {
  double scale = 65536.0;
  int64_t growth_tracker = 0;  // good steps in a row since the last growth or backoff
};

class GradScaler {
 public:
  explicit GradScaler(const GradScalerOptions& options = {});

  // loss * scale, recorded so that backward carries the factor into every gradient.
  Variable scale(const Variable& loss) const;
  // Divides each gradient of the optimiser's parameters by the scale and records whether any
  // holds an inf or NaN. At most once per step (before clipping, say); step() does it if not.
  void unscale_(Sgd& optimizer);
  // optimizer.step() unless the gradients were non-finite; returns whether it stepped.
  bool step(Sgd& optimizer);
  // After step(): backoff on a skipped step, growth after growth_interval good ones.
  void update();

  bool enabled() const { return options_.enabled; }
  double get_scale() const { return state_.scale; }
  bool found_inf() const { return found_inf_; }             // of the latest unscale_
  int64_t skipped_steps() const { return skipped_steps_; }  // since construction
  const GradScalerState& state() const { return state_; }
  void load_state(const GradScalerState& state);

 private:
  enum class Stage { ready, unscaled, stepped };
  GradScalerOptions options_;
  GradScalerState state_;
  Stage stage_ = Stage::ready;
  bool found_inf_ = false;
  int64_t skipped_steps_ = 0;
};

}  // namespace ringgrad::nn::amp

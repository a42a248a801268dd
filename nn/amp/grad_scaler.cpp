// GradScaler's state machine, per step: ready -> (unscale_) unscaled -> (step) stepped ->
// (update) ready. The update rule is PyTorch's _amp_update_scale_: a step with inf/NaN
// gradients multiplies the scale by backoff_factor and resets the tracker; a good step counts
// towards growth_interval, and reaching it multiplies the scale by growth_factor (kept only if
// the grown scale is finite) and resets the tracker.
#include "nn/amp/grad_scaler.h"

#include <cmath>

#include "kernels/ops.h"
#include "nn/autograd/ops.h"

namespace ringgrad::nn::amp {

GradScaler::GradScaler(const GradScalerOptions& options) : options_(options) {
  RG_CHECK(options.init_scale > 0 && std::isfinite(options.init_scale),
           "GradScaler: init_scale must be positive and finite, got ", options.init_scale);
  RG_CHECK(options.growth_factor > 1, "GradScaler: growth_factor must be > 1, got ",
           options.growth_factor);
  RG_CHECK(options.backoff_factor > 0 && options.backoff_factor < 1,
           "GradScaler: backoff_factor must be in (0, 1), got ", options.backoff_factor);
  RG_CHECK_GE(options.growth_interval, 1, "GradScaler: growth_interval must be at least 1");
  state_.scale = options.init_scale;
}

Variable GradScaler::scale(const Variable& loss) const {
  return options_.enabled ? mul(loss, state_.scale) : loss;
}

void GradScaler::unscale_(Sgd& optimizer) {
  if (!options_.enabled) return;
  RG_CHECK(stage_ == Stage::ready,
           "GradScaler: unscale_ was already called (or step taken) since the last update()");
  const double inv_scale = 1.0 / state_.scale;  // exact for power-of-two scales (the default)
  int64_t nonfinite = 0;
  for (const Variable& p : optimizer.params()) {
    VariableImpl& impl = *p.impl();
    if (!impl.grad.defined() || impl.grad_is_zero) continue;  // no gradient, or zero
    RG_CHECK(impl.grad.dtype() == DType::f32 || impl.grad.dtype() == DType::f64,
             "GradScaler: gradients must be f32 master gradients, got ",
             dtype_name(impl.grad.dtype()), " (half parameters are not supported)");
    kernels::scale_(impl.grad, inv_scale);
    nonfinite += kernels::count_nonfinite(impl.grad);
  }
  found_inf_ = nonfinite > 0;
  stage_ = Stage::unscaled;
}

bool GradScaler::step(Sgd& optimizer) {
  if (!options_.enabled) {
    optimizer.step();
    return true;
  }
  RG_CHECK(stage_ != Stage::stepped, "GradScaler: step() was already called since update()");
  if (stage_ == Stage::ready) unscale_(optimizer);
  stage_ = Stage::stepped;
  if (found_inf_) {
    ++skipped_steps_;
    return false;
  }
  optimizer.step();
  return true;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  RG_CHECK(stage_ == Stage::stepped, "GradScaler: update() needs a step() since the last update()");
  if (found_inf_) {
    state_.scale *= options_.backoff_factor;
    state_.growth_tracker = 0;
  } else if (++state_.growth_tracker == options_.growth_interval) {
    const double grown = state_.scale * options_.growth_factor;
    if (std::isfinite(grown)) state_.scale = grown;
    state_.growth_tracker = 0;
  }
  stage_ = Stage::ready;
}

void GradScaler::load_state(const GradScalerState& state) {
  RG_CHECK(state.scale > 0 && std::isfinite(state.scale),
           "GradScaler: a saved scale must be positive and finite, got ", state.scale);
  RG_CHECK(state.growth_tracker >= 0 && state.growth_tracker < options_.growth_interval,
           "GradScaler: saved growth tracker ", state.growth_tracker, " outside [0, ",
           options_.growth_interval, ")");
  state_ = state;
  stage_ = Stage::ready;
}

}  // namespace ringgrad::nn::amp

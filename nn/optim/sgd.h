// SGD with momentum, dampening, Nesterov and weight decay: torch.optim.SGD, one parameter
// group. Parameters whose gradient is undefined are skipped, as PyTorch skips grad=None.
#pragma once
#include <vector>

#include "kernels/ops.h"
#include "nn/autograd/variable.h"

namespace ringgrad::nn {

class Sgd {
 public:
  Sgd(std::vector<Variable> params, const kernels::SgdParams& options);

  void step();
  void zero_grad();  // lazy zero: the next backward overwrites instead of accumulating
  void set_lr(double lr) { options_.lr = lr; }
  void set_momentum(double m) { options_.momentum = m; }
  const kernels::SgdParams& options() const { return options_; }

  // Momentum buffers, one per parameter (undefined until that parameter's first step);
  // checkpoints save and restore them.
  std::vector<Tensor>& momentum_buffers() { return buffers_; }
  const std::vector<Variable>& params() const { return params_; }

 private:
  std::vector<Variable> params_;
  std::vector<Tensor> buffers_;
  kernels::SgdParams options_;
};

}  // namespace ringgrad::nn

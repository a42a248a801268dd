// SGD step over every parameter.
#include "nn/optim/sgd.h"

namespace ringgrad::nn {

Sgd::Sgd(std::vector<Variable> params, const kernels::SgdParams& options)
    : params_(std::move(params)), buffers_(params_.size()), options_(options) {
  RG_CHECK(options.lr >= 0, "learning rate must be >= 0, got ", options.lr);
  RG_CHECK(options.momentum >= 0, "momentum must be >= 0, got ", options.momentum);
  RG_CHECK(!options.nesterov || (options.momentum > 0 && options.dampening == 0),
           "Nesterov momentum needs momentum > 0 and zero dampening");
}

void Sgd::step() {
  for (size_t i = 0; i < params_.size(); ++i) {
    Variable& p = params_[i];
    if (!p.impl()->grad.defined()) continue;
    const bool first = options_.momentum != 0 && !buffers_[i].defined();
    if (first) buffers_[i] = Tensor::empty(p.shape(), p.value().dtype(), p.value().device());
    kernels::sgd_step(p.value(), buffers_[i], p.grad(), options_, first);
  }
}

void Sgd::zero_grad() {
  for (Variable& p : params_) p.zero_grad();
}

}  // namespace ringgrad::nn

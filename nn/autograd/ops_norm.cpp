// batch_norm: training mode normalises with batch statistics and updates the running buffers;
// backward flows through the batch mean and variance as well (kernels::batchnorm_backward).
#include "nn/amp/autocast.h"
#include "nn/autograd/ops.h"

namespace ringgrad::nn {

namespace {

struct BatchNormNode : Node {
  Tensor x, gamma, save_mean, save_invstd;
  const char* name() const override { return "batch_norm"; }
  void backward(const Tensor& dy, std::vector<Tensor>& grads) override {
    auto like = [](const Tensor& t) { return Tensor::empty(t.shape(), t.dtype(), t.device()); };
    Tensor dx = inputs[0] ? like(x) : Tensor();
    Tensor dgamma = inputs[1] ? like(gamma) : Tensor();
    Tensor dbeta = inputs[2] ? like(gamma) : Tensor();
    kernels::batchnorm_backward(dx, dgamma, dbeta, dy, x, gamma, save_mean, save_invstd);
    grads[0] = dx;
    grads[1] = dgamma;
    grads[2] = dbeta;
  }
};

}  // namespace

Variable batch_norm(const Variable& x_in, const Variable& gamma, const Variable& beta,
                    Tensor& running_mean, Tensor& running_var, bool training, double momentum,
                    double eps) {
  const Variable x = amp::cast_for_fp32_op(x_in);  // autocast: statistics in f32
  const Tensor& xv = x.value();
  Tensor y = Tensor::empty(xv.shape(), xv.dtype(), xv.device());
  if (!training) {
    RG_CHECK(!any_requires_grad({&x, &gamma, &beta}),
             "batch_norm in eval mode does not record a graph: run evaluation under NoGradGuard");
    kernels::batchnorm_forward_eval(y, xv, gamma.value(), beta.value(), running_mean, running_var,
                                    eps);
    return Variable(y);
  }
  const Shape channels{xv.size(1)};
  Tensor save_mean = Tensor::empty(channels, xv.dtype(), xv.device());
  Tensor save_invstd = Tensor::empty(channels, xv.dtype(), xv.device());
  kernels::batchnorm_forward_train(y, save_mean, save_invstd, running_mean, running_var, xv,
                                   gamma.value(), beta.value(), momentum, eps);
  if (!any_requires_grad({&x, &gamma, &beta})) return Variable(y);
  auto node = std::make_shared<BatchNormNode>();
  node->x = xv;
  node->gamma = gamma.value();
  node->save_mean = save_mean;
  node->save_invstd = save_invstd;
  return make_result(y, node, {&x, &gamma, &beta});
}

}  // namespace ringgrad::nn

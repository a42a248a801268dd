// batch_norm: training mode normalises with batch statistics and updates the running buffers;
// backward flows through the batch mean and variance as well (kernels::batchnorm_backward).
// batch_norm_relu: the same with relu(. + residual) after it, in one kernel each way.
#include "nn/amp/autocast.h"
#include "nn/autograd/ops.h"

namespace ringgrad::nn {

namespace {

// batch_norm and batch_norm_relu: inputs x, residual (undefined for batch_norm), gamma, beta.
// The fused op's backward sees relu's output y: the gradient of bn's output is dy where y > 0,
// which is also the residual's gradient; batch_norm leaves y undefined (no relu).
struct BatchNormNode : Node {
  Tensor x, y, gamma, save_mean, save_invstd;
  const char* name() const override { return y.defined() ? "batch_norm_relu" : "batch_norm"; }
  void backward(const Tensor& dy, std::vector<Tensor>& grads) override {
    auto like = [](const Tensor& t) { return Tensor::empty(t.shape(), t.dtype(), t.device()); };
    Tensor dx = inputs[0] ? like(x) : Tensor();
    Tensor dresidual = inputs[1] ? like(x) : Tensor();
    Tensor dgamma = inputs[2] ? like(gamma) : Tensor();
    Tensor dbeta = inputs[3] ? like(gamma) : Tensor();
    kernels::batchnorm_relu_backward(dx, dresidual, dgamma, dbeta, dy, y, x, gamma, save_mean,
                                     save_invstd);
    grads[0] = dx;
    grads[1] = dresidual;
    grads[2] = dgamma;
    grads[3] = dbeta;
  }
};

// Saved mean and invstd: f64 for f64 data (the gradient checks), f32 otherwise (bf16 data too).
Tensor channel_values(const Tensor& x) {
  return Tensor::empty({x.size(1)}, x.dtype() == DType::f64 ? DType::f64 : DType::f32, x.device());
}

}  // namespace

Variable batch_norm(const Variable& x_in, const Variable& gamma, const Variable& beta,
                    Tensor& running_mean, Tensor& running_var, bool training, double momentum,
                    double eps) {
  const Variable x = amp::cast_for_norm_op(x_in);
  const Tensor& xv = x.value();
  Tensor y = Tensor::empty(xv.shape(), xv.dtype(), xv.device());
  if (!training) {
    RG_CHECK(!any_requires_grad({&x, &gamma, &beta}),
             "batch_norm in eval mode does not record a graph: run evaluation under NoGradGuard");
    kernels::batchnorm_forward_eval(y, xv, gamma.value(), beta.value(), running_mean, running_var,
                                    eps);
    return Variable(y);
  }
  Tensor save_mean = channel_values(xv), save_invstd = channel_values(xv);
  kernels::batchnorm_forward_train(y, save_mean, save_invstd, running_mean, running_var, xv,
                                   gamma.value(), beta.value(), momentum, eps);
  if (!any_requires_grad({&x, &gamma, &beta})) return Variable(y);
  auto node = std::make_shared<BatchNormNode>();
  node->x = xv;
  node->gamma = gamma.value();
  node->save_mean = save_mean;
  node->save_invstd = save_invstd;
  const Variable no_residual;
  return make_result(y, node, {&x, &no_residual, &gamma, &beta});
}

Variable batch_norm_relu(const Variable& x_in, const Variable& residual_in, const Variable& gamma,
                         const Variable& beta, Tensor& running_mean, Tensor& running_var,
                         bool training, double momentum, double eps) {
  const Variable x = amp::cast_for_norm_op(x_in);
  const Variable residual =
      residual_in.defined() ? to_dtype(residual_in, x.value().dtype()) : residual_in;
  const Tensor& xv = x.value();
  const Tensor r = residual.defined() ? residual.value() : Tensor();
  Tensor y = Tensor::empty(xv.shape(), xv.dtype(), xv.device());
  if (!training) {
    RG_CHECK(!any_requires_grad({&x, &residual, &gamma, &beta}),
             "batch_norm in eval mode does not record a graph: run evaluation under NoGradGuard");
    kernels::batchnorm_relu_forward_eval(y, xv, r, gamma.value(), beta.value(), running_mean,
                                         running_var, eps);
    return Variable(y);
  }
  Tensor save_mean = channel_values(xv), save_invstd = channel_values(xv);
  kernels::batchnorm_relu_forward_train(y, save_mean, save_invstd, running_mean, running_var, xv, r,
                                        gamma.value(), beta.value(), momentum, eps);
  if (!any_requires_grad({&x, &residual, &gamma, &beta})) return Variable(y);
  auto node = std::make_shared<BatchNormNode>();
  node->x = xv;
  node->y = y;
  node->gamma = gamma.value();
  node->save_mean = save_mean;
  node->save_invstd = save_invstd;
  return make_result(y, node, {&x, &residual, &gamma, &beta});
}

}  // namespace ringgrad::nn

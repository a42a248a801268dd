// The fused batch norm + relu (+ residual add) of kernels/ops.h on CUDA: the separate kernels
// one after another (the CPU fuses them into one pass, kernels/cpu/batchnorm_passes.cpp).
// y = relu(bn(x) + residual); backward: g = dy where y > 0, which is also dresidual.
#include "kernels/cuda/cuda_ops.h"

namespace ringgrad::kernels::cuda {

void batchnorm_relu_forward_train(Tensor& y, Tensor& save_mean, Tensor& save_invstd,
                                  Tensor& running_mean, Tensor& running_var, const Tensor& x,
                                  const Tensor& residual, const Tensor& gamma, const Tensor& beta,
                                  double momentum, double eps) {
  batchnorm_forward_train(y, save_mean, save_invstd, running_mean, running_var, x, gamma, beta,
                          momentum, eps);
  if (residual.defined()) return add_relu_forward(y, y, residual);
  relu_forward(y, y);
}

void batchnorm_relu_forward_eval(Tensor& y, const Tensor& x, const Tensor& residual,
                                 const Tensor& gamma, const Tensor& beta,
                                 const Tensor& running_mean, const Tensor& running_var,
                                 double eps) {
  batchnorm_forward_eval(y, x, gamma, beta, running_mean, running_var, eps);
  if (residual.defined()) return add_relu_forward(y, y, residual);
  relu_forward(y, y);
}

void batchnorm_relu_backward(Tensor& dx, Tensor& dresidual, Tensor& dgamma, Tensor& dbeta,
                             const Tensor& dy, const Tensor& y, const Tensor& x,
                             const Tensor& gamma, const Tensor& save_mean,
                             const Tensor& save_invstd) {
  if (!y.defined())
    return batchnorm_backward(dx, dgamma, dbeta, dy, x, gamma, save_mean, save_invstd);
  Tensor g = dresidual.defined() ? dresidual : Tensor::empty(y.shape(), y.dtype(), y.device());
  relu_backward(g, dy, y);
  batchnorm_backward(dx, dgamma, dbeta, g, x, gamma, save_mean, save_invstd);
}

}  // namespace ringgrad::kernels::cuda

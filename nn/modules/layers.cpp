// Layer construction (shapes and initialisation as PyTorch/torchvision) and forward passes.
#include "nn/modules/layers.h"

#include <cmath>

namespace ringgrad::nn {

namespace {

Tensor normal_tensor(const Shape& shape, double std, Generator& rng) {
  Tensor t = Tensor::empty(shape);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>(std * rng.normal());
  return t;
}

Tensor uniform_tensor(const Shape& shape, double bound, Generator& rng) {
  Tensor t = Tensor::empty(shape);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i)
    p[i] = static_cast<float>(bound * (2.0 * rng.uniform_double() - 1.0));
  return t;
}

}  // namespace

Conv2d::Conv2d(int in_channels, int out_channels, int kernel, int stride, int padding, bool bias,
               Generator& rng)
    : weight_(register_parameter(
          "weight", normal_tensor({out_channels, in_channels, kernel, kernel},
                                  std::sqrt(2.0 / (out_channels * kernel * kernel)), rng))) {
  params_.stride_h = params_.stride_w = stride;
  params_.pad_h = params_.pad_w = padding;
  if (bias)  // PyTorch's Conv2d bias default: uniform in +-1/sqrt(fan_in)
    bias_ = register_parameter(
        "bias",
        uniform_tensor({out_channels}, 1.0 / std::sqrt(in_channels * kernel * kernel), rng));
}

Variable Conv2d::forward(const Variable& x) { return conv2d(x, weight_, bias_, params_); }

BatchNorm2d::BatchNorm2d(int channels, double momentum, double eps)
    : weight_(register_parameter("weight", Tensor::full({channels}, 1.0))),
      bias_(register_parameter("bias", Tensor::zeros({channels}))),
      running_mean_(register_buffer("running_mean", Tensor::zeros({channels}))),
      running_var_(register_buffer("running_var", Tensor::full({channels}, 1.0))),
      num_batches_tracked_(register_buffer("num_batches_tracked", Tensor::zeros({}, DType::i64))),
      momentum_(momentum),
      eps_(eps) {}

Variable BatchNorm2d::forward(const Variable& x) {
  if (is_training()) kernels::increment_(num_batches_tracked_);
  if (is_training() && sync_group_)
    return sync_batch_norm(x, weight_, bias_, running_mean_, running_var_, momentum_, eps_,
                           *sync_group_);
  return batch_norm(x, weight_, bias_, running_mean_, running_var_, is_training(), momentum_, eps_);
}

Variable BatchNorm2d::forward_relu(const Variable& x, const Variable& residual) {
  if (is_training() && sync_group_) {
    const Variable y = forward(x);
    return residual.defined() ? add_relu(y, residual) : relu(y);
  }
  if (is_training()) kernels::increment_(num_batches_tracked_);
  return batch_norm_relu(x, residual, weight_, bias_, running_mean_, running_var_, is_training(),
                         momentum_, eps_);
}

Linear::Linear(int in_features, int out_features, Generator& rng)
    : weight_(register_parameter("weight", uniform_tensor({out_features, in_features},
                                                          1.0 / std::sqrt(in_features), rng))),
      bias_(register_parameter(
          "bias", uniform_tensor({out_features}, 1.0 / std::sqrt(in_features), rng))) {}

Variable Linear::forward(const Variable& x) { return linear(x, weight_, bias_); }

void convert_sync_batchnorm(Module& model, comm::ProcessGroup& group) {
  model.apply([&](Module& m) {
    if (auto* bn = dynamic_cast<BatchNorm2d*>(&m)) bn->set_sync_group(&group);
  });
}

MaxPool2d::MaxPool2d(int kernel, int stride, int padding) {
  params_.kernel_h = params_.kernel_w = kernel;
  params_.stride_h = params_.stride_w = stride;
  params_.pad_h = params_.pad_w = padding;
}

Variable MaxPool2d::forward(const Variable& x) { return max_pool2d(x, params_); }

}  // namespace ringgrad::nn

// The layers ResNets are made of, with PyTorch's parameter names, shapes and initialisation:
// Conv2d (weight, optional bias), BatchNorm2d (weight, bias; running_mean, running_var,
// num_batches_tracked), Linear (weight, bias), ReLU, MaxPool2d and global average pooling.
#pragma once
#include "core/rng.h"
#include "kernels/ops.h"
#include "nn/autograd/ops.h"
#include "nn/modules/module.h"

namespace ringgrad::nn {

class Conv2d : public Module {
 public:
  // Kaiming-normal weights with fan_out (torchvision's ResNet init); no bias unless asked.
  Conv2d(int in_channels, int out_channels, int kernel, int stride, int padding, bool bias,
         Generator& rng);
  Variable forward(const Variable& x) override;
  Variable& weight() { return weight_; }

 private:
  Variable& weight_;
  Variable bias_;
  kernels::Conv2dParams params_;
};

class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int channels, double momentum = 0.1, double eps = 1e-5);
  Variable forward(const Variable& x) override;
  // relu(forward(x) + residual) (residual undefined: relu(forward(x))), fused into one op
  // (batch_norm_relu) unless the statistics span a group.
  Variable forward_relu(const Variable& x, const Variable& residual = Variable());
  // With a group, training statistics span all its ranks (SyncBatchNorm); null: per rank.
  void set_sync_group(comm::ProcessGroup* group) { sync_group_ = group; }

 private:
  comm::ProcessGroup* sync_group_ = nullptr;
  Variable& weight_;
  Variable& bias_;
  Tensor& running_mean_;
  Tensor& running_var_;
  Tensor& num_batches_tracked_;
  double momentum_, eps_;
};

class Linear : public Module {
 public:
  // PyTorch's default init: weight and bias uniform in +-1/sqrt(in_features).
  Linear(int in_features, int out_features, Generator& rng);
  Variable forward(const Variable& x) override;

 private:
  Variable& weight_;
  Variable& bias_;
};

class ReLU : public Module {
 public:
  Variable forward(const Variable& x) override { return relu(x); }
};

// Makes every BatchNorm2d in `model` a SyncBatchNorm over `group` (PyTorch's
// SyncBatchNorm.convert_sync_batchnorm).
void convert_sync_batchnorm(Module& model, comm::ProcessGroup& group);

class MaxPool2d : public Module {
 public:
  MaxPool2d(int kernel, int stride, int padding);
  Variable forward(const Variable& x) override;

 private:
  kernels::Pool2dParams params_;
};

}  // namespace ringgrad::nn

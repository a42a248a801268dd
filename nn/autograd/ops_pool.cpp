// max_pool2d (backward through the recorded argmax) and global average pooling.
#include "nn/autograd/ops.h"

namespace ringgrad::nn {

namespace {

struct MaxPoolNode : Node {
  Tensor indices;
  Shape input_shape;
  const char* name() const override { return "max_pool2d"; }
  void backward(const Tensor& dy, std::vector<Tensor>& grads) override {
    Tensor dx = Tensor::empty(input_shape, dy.dtype(), dy.device());
    kernels::maxpool2d_backward(dx, dy, indices);
    grads[0] = dx;
  }
};

struct GlobalAvgPoolNode : Node {
  Shape input_shape;
  const char* name() const override { return "global_avg_pool"; }
  void backward(const Tensor& dy, std::vector<Tensor>& grads) override {
    Tensor dx = Tensor::empty(input_shape, dy.dtype(), dy.device());
    kernels::global_avgpool_backward(dx, dy.view({input_shape[0], input_shape[1], 1, 1}));
    grads[0] = dx;
  }
};

}  // namespace

Variable max_pool2d(const Variable& x, const kernels::Pool2dParams& p) {
  const Tensor& xv = x.value();
  Shape out = kernels::pool2d_output_shape(xv.shape(), p);
  Tensor y = Tensor::empty(out, xv.dtype(), xv.device());
  Tensor indices = Tensor::empty(out, DType::i32, xv.device());
  kernels::maxpool2d_forward(y, indices, xv, p);
  if (!any_requires_grad({&x})) return Variable(y);
  auto node = std::make_shared<MaxPoolNode>();
  node->indices = indices;
  node->input_shape = xv.shape();
  return make_result(y, node, {&x});
}

Variable global_avg_pool(const Variable& x) {
  const Tensor& xv = x.value();
  RG_CHECK_EQ(xv.dim(), 4, "global_avg_pool expects (N, C, H, W), got ", xv.shape().str());
  Tensor y = Tensor::empty({xv.size(0), xv.size(1), 1, 1}, xv.dtype(), xv.device());
  kernels::global_avgpool_forward(y, xv);
  Tensor flat = y.view({xv.size(0), xv.size(1)});
  if (!any_requires_grad({&x})) return Variable(flat);
  auto node = std::make_shared<GlobalAvgPoolNode>();
  node->input_shape = xv.shape();
  return make_result(flat, node, {&x});
}

}  // namespace ringgrad::nn

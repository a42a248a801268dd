// relu, add, the fused add+relu of a residual block, reshape, and multiplication by a constant.
#include "nn/autograd/ops.h"

namespace ringgrad::nn {

namespace {

Tensor empty_like(const Tensor& t) { return Tensor::empty(t.shape(), t.dtype(), t.device()); }

// relu and add_relu share a backward: the gradient passes where the output is positive.
struct ReluNode : Node {
  Tensor y;
  const char* name() const override { return inputs.size() == 1 ? "relu" : "add_relu"; }
  void backward(const Tensor& dy, std::vector<Tensor>& grads) override {
    Tensor dx = empty_like(y);
    kernels::relu_backward(dx, dy, y);
    for (Tensor& g : grads) g = dx;
  }
};

struct AddNode : Node {
  const char* name() const override { return "add"; }
  void backward(const Tensor& dy, std::vector<Tensor>& grads) override {
    grads[0] = dy;
    grads[1] = dy;
  }
};

struct MulNode : Node {
  double alpha = 1;
  const char* name() const override { return "mul"; }
  void backward(const Tensor& dy, std::vector<Tensor>& grads) override {
    Tensor dx = dy.clone();
    kernels::scale_(dx, alpha);
    grads[0] = dx;
  }
};

struct ReshapeNode : Node {
  Shape input_shape;
  const char* name() const override { return "reshape"; }
  void backward(const Tensor& dy, std::vector<Tensor>& grads) override {
    grads[0] = dy.view(input_shape);
  }
};

}  // namespace

Variable relu(const Variable& x) {
  Tensor y = empty_like(x.value());
  kernels::relu_forward(y, x.value());
  if (!any_requires_grad({&x})) return Variable(y);
  auto node = std::make_shared<ReluNode>();
  node->y = y;
  return make_result(y, node, {&x});
}

Variable add(const Variable& a, const Variable& b) {
  Tensor y = empty_like(a.value());
  kernels::add(y, a.value(), b.value());
  if (!any_requires_grad({&a, &b})) return Variable(y);
  return make_result(y, std::make_shared<AddNode>(), {&a, &b});
}

Variable add_relu(const Variable& a, const Variable& b) {
  Tensor y = empty_like(a.value());
  kernels::add_relu_forward(y, a.value(), b.value());
  if (!any_requires_grad({&a, &b})) return Variable(y);
  auto node = std::make_shared<ReluNode>();
  node->y = y;
  return make_result(y, node, {&a, &b});
}

Variable reshape(const Variable& x, const Shape& shape) {
  Tensor y = x.value().view(shape);
  if (!any_requires_grad({&x})) return Variable(y);
  auto node = std::make_shared<ReshapeNode>();
  node->input_shape = x.shape();
  return make_result(y, node, {&x});
}

Variable mul(const Variable& x, double alpha) {
  Tensor y = x.value().clone();
  kernels::scale_(y, alpha);
  if (!any_requires_grad({&x})) return Variable(y);
  auto node = std::make_shared<MulNode>();
  node->alpha = alpha;
  return make_result(y, node, {&x});
}

}  // namespace ringgrad::nn

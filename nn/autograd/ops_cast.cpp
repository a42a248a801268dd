// to_dtype: a recorded dtype conversion, the bridge between f32 master weights and half
// compute under autocast; its backward converts the gradient back to the input's dtype.
#include "nn/autograd/ops.h"

namespace ringgrad::nn {

namespace {

struct CastNode : Node {
  DType input_dtype = DType::f32;
  const char* name() const override { return "to_dtype"; }
  void backward(const Tensor& dy, std::vector<Tensor>& grads) override {
    Tensor dx = Tensor::empty(dy.shape(), input_dtype, dy.device());
    kernels::cast(dx, dy);
    grads[0] = dx;
  }
};

}  // namespace

Variable to_dtype(const Variable& x, DType dtype) {
  const Tensor& xv = x.value();
  if (xv.dtype() == dtype) return x;
  Tensor y = Tensor::empty(xv.shape(), dtype, xv.device());
  kernels::cast(y, xv);
  if (!any_requires_grad({&x})) return Variable(y);
  auto node = std::make_shared<CastNode>();
  node->input_dtype = xv.dtype();
  return make_result(y, node, {&x});
}

}  // namespace ringgrad::nn

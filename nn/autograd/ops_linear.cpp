// conv2d and linear: GEMM-shaped ops whose backward gives the input, weight and bias gradients.
// Both are on autocast's half list: under an AutocastGuard they compute on half casts of their
// operands (and the casts route the gradients back to the f32 originals). A CPU conv takes its
// f32 master weight itself (takes_master_weight), and crops a kernel whose border taps only meet
// padding once for forward and backward (weight_crop).
#include <optional>

#include "nn/amp/autocast.h"
#include "nn/autograd/ops.h"

namespace ringgrad::nn {

namespace {

Tensor empty_like(const Tensor& t) { return Tensor::empty(t.shape(), t.dtype(), t.device()); }
Tensor empty_if(bool needed, const Tensor& like) { return needed ? empty_like(like) : Tensor(); }

// The gradients of a weighted op (conv2d, linear) with inputs x, w and maybe a bias: buffers
// only for the inputs that want one (dw in dw_dtype), handed back in input order.
struct WeightGrads {
  Tensor dx, dw, db;
  WeightGrads(const Node& node, const Tensor& x, const Tensor& w, bool has_bias, DType dw_dtype)
      : dx(empty_if(node.inputs[0] != nullptr, x)),
        dw(node.inputs[1] ? Tensor::empty(w.shape(), dw_dtype, w.device()) : Tensor()),
        db(has_bias && node.inputs[2] ? Tensor::empty({w.size(0)}, w.dtype(), w.device())
                                      : Tensor()) {}
  void hand_back(std::vector<Tensor>& grads, bool has_bias) const {
    grads[0] = dx;
    grads[1] = dw;
    if (has_bias) grads[2] = db;
  }
};

struct Conv2dNode : Node {
  Tensor x, w;  // w as the conv multiplied it: cast, and cropped to `taps` where set
  DType weight_grad_dtype = DType::f32;  // w's, or f32 for a master weight
  bool has_bias = false;
  kernels::Conv2dParams params;  // the cropped kernel's, where cropped
  std::optional<kernels::TapWindow> taps;
  Shape weight_shape;  // the graph's weight's, which its gradient has
  const char* name() const override { return "conv2d"; }
  void backward(const Tensor& dy, std::vector<Tensor>& grads) override {
    WeightGrads g(*this, x, w, has_bias, weight_grad_dtype);
    kernels::conv2d_backward(g.dx, g.dw, g.db, dy, x, w, params);
    if (taps && g.dw.defined()) {
      Tensor dw = Tensor::empty(weight_shape, g.dw.dtype(), g.dw.device());
      kernels::conv2d_uncrop_kernel_grad(dw, g.dw, *taps);
      g.dw = dw;
    }
    g.hand_back(grads, has_bias);
  }
};

struct LinearNode : Node {
  Tensor x, w;
  bool has_bias = false;
  const char* name() const override { return "linear"; }
  void backward(const Tensor& dy, std::vector<Tensor>& grads) override {
    WeightGrads g(*this, x, w, has_bias, w.dtype());
    kernels::linear_backward(g.dx, g.dw, g.db, dy, x, w);
    g.hand_back(grads, has_bias);
  }
};

// Under autocast on the CPU, conv2d takes an f32 master weight as its own input rather than
// through a recorded cast: it multiplies a half copy, and hands the weight gradient back in f32
// straight from the GEMM's f32 sums (kernels::conv2d_backward allows that dw). A cast node would
// round the gradient to half and widen it again: a pass over every weight gradient each step.
bool takes_master_weight(const Variable& w) {
  return amp::autocast_dtype() && w.requires_grad() && w.value().dtype() == DType::f32 &&
         w.value().is_cpu();
}

// The taps a CPU conv's kernel is cropped to here (kernels::TapWindow), where some only ever
// meet padding: the master weight (cast in the same pass), or a weight of x's dtype. The conv
// kernels would crop it in forward and again in backward; cropped here, once a step, the node
// keeps the small kernel for backward and the f32 master is never cast whole. None where the
// kernel is used whole, where no tap meets the image, or where the weight goes through a
// recorded cast.
std::optional<kernels::TapWindow> weight_crop(const Tensor& x, const Variable& w, bool master,
                                              const kernels::Conv2dParams& p) {
  const Tensor& wv = w.value();
  if (!wv.is_cpu() || x.dtype() != (master ? *amp::autocast_dtype() : wv.dtype()))
    return std::nullopt;
  const kernels::TapWindow t = kernels::conv2d_tap_window(x.shape(), wv.shape(), p);
  if (t.empty() || t.cropped(wv.shape()) == wv.shape()) return std::nullopt;
  return t;
}

}  // namespace

Variable conv2d(const Variable& x_in, const Variable& w_in, const Variable& bias_in,
                const kernels::Conv2dParams& p) {
  const bool master = takes_master_weight(w_in);
  const Variable x = amp::cast_for_half_op(x_in), bias = amp::cast_for_half_op(bias_in);
  const Tensor& xv = x.value();
  const std::optional<kernels::TapWindow> taps = weight_crop(xv, w_in, master, p);
  Variable w;  // what the kernels multiply
  kernels::Conv2dParams params = p;
  if (taps) {
    Tensor crop = Tensor::empty(taps->cropped(w_in.shape()), xv.dtype(), xv.device());
    kernels::conv2d_crop_kernel(crop, w_in.value(), *taps);
    w = Variable(crop);
    params = kernels::conv2d_cropped_params(p, *taps);
  } else {
    w = master ? amp::cast_for_half_op(Variable(w_in.value())) : amp::cast_for_half_op(w_in);
  }
  const Variable& w_input = master || taps ? w_in : w;  // the graph's input: w_in, or its cast
  Tensor y = Tensor::empty(kernels::conv2d_output_shape(xv.shape(), w.shape(), params), xv.dtype(),
                           xv.device());
  kernels::conv2d_forward(y, xv, w.value(), bias.defined() ? bias.value() : Tensor(), params);
  if (!any_requires_grad({&x, &w_input, &bias})) return Variable(y);
  auto node = std::make_shared<Conv2dNode>();
  node->x = xv;
  node->w = w.value();
  node->weight_grad_dtype = w_input.value().dtype();
  node->has_bias = bias.defined();
  node->params = params;
  node->taps = taps;
  node->weight_shape = w_input.shape();
  return make_result(y, node, {&x, &w_input, &bias});
}

Variable linear(const Variable& x_in, const Variable& w_in, const Variable& bias_in) {
  const Variable x = amp::cast_for_half_op(x_in), w = amp::cast_for_half_op(w_in),
                 bias = amp::cast_for_half_op(bias_in);
  const Tensor& xv = x.value();
  RG_CHECK_EQ(xv.dim(), 2, "linear expects (N, IN) input, got ", xv.shape().str());
  Tensor y = Tensor::empty({xv.size(0), w.shape()[0]}, xv.dtype(), xv.device());
  kernels::linear_forward(y, xv, w.value(), bias.defined() ? bias.value() : Tensor());
  if (!any_requires_grad({&x, &w, &bias})) return Variable(y);
  auto node = std::make_shared<LinearNode>();
  node->x = xv;
  node->w = w.value();
  node->has_bias = bias.defined();
  return make_result(y, node, {&x, &w, &bias});
}

}  // namespace ringgrad::nn

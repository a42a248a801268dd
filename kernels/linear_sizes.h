// The sizes of a linear layer, x (N, IN) and w (OUT, IN), read from the tensors after the
// checks both backends (cpu/linear.cpp, cuda/linear.cu) share, and the shapes of the backward's
// operands. Not part of the kernels API.
#pragma once
#include "core/error.h"
#include "core/tensor.h"

namespace ringgrad::kernels {

struct LinearSizes {
  int64_t N, IN, OUT;
};

// x and w are defined, 2-D and agree in IN; devices and dtypes are the backend's to check.
inline LinearSizes linear_sizes(const Tensor& x, const Tensor& w, const char* op) {
  RG_CHECK(x.defined() && w.defined(), op, ": x and w must be defined");
  RG_CHECK_EQ(x.dim(), 2, op, ": x must be (N, IN), got shape ", x.shape().str());
  RG_CHECK_EQ(w.dim(), 2, op, ": w must be (OUT, IN), got shape ", w.shape().str());
  RG_CHECK_EQ(x.size(1), w.size(1), op, ": x has ", x.size(1), " features but w expects ",
              w.size(1), " (x ", x.shape().str(), ", w ", w.shape().str(), ")");
  return {x.size(0), x.size(1), w.size(0)};
}

// Checks linear_backward's other operands, each with the backend's
// check_operand(t, shape, dtype, op, name): dy (N, OUT), and where wanted (defined) dx like x,
// dw like w, dbias (OUT), all of x's dtype.
template <class CheckOperand>
void check_backward_operands(const Tensor& dx, const Tensor& dw, const Tensor& dbias,
                             const Tensor& dy, const Tensor& x, const Tensor& w, LinearSizes s,
                             const char* op, CheckOperand check_operand) {
  check_operand(dy, Shape{s.N, s.OUT}, x.dtype(), op, "dy");
  if (dx.defined()) check_operand(dx, x.shape(), x.dtype(), op, "dx");
  if (dw.defined()) check_operand(dw, w.shape(), x.dtype(), op, "dw");
  if (dbias.defined()) check_operand(dbias, Shape{s.OUT}, x.dtype(), op, "dbias");
}

}  // namespace ringgrad::kernels

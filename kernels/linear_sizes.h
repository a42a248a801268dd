// The sizes of a linear layer, x (N, IN) and w (OUT, IN), read from the tensors after the
// checks both backends (cpu/linear.cpp, cuda/linear.cu) share. Not part of the kernels API.
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

}  // namespace ringgrad::kernels

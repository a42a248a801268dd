// CUDA implementations behind kernels/ops.h. Each matches the CPU op of the same name; the
// entry points in kernels/cpu/*.cpp check arguments and forward CUDA tensors here.
#pragma once
#include "core/tensor.h"

namespace ringgrad::kernels::cuda {

void relu_forward(Tensor& y, const Tensor& x);
void relu_backward(Tensor& dx, const Tensor& dy, const Tensor& y);

}  // namespace ringgrad::kernels::cuda

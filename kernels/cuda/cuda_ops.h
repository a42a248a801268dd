// CUDA implementations behind kernels/ops.h, one .cu file per op family, each a cuda::
// function matching the CPU op of the same name (kernels/backend_ops.h: same contract, same
// element math). kernels/ops.cpp calls them once every operand is on one CUDA device. All work
// is queued on the device's compute stream (core/cuda_memory.h) and returns without waiting,
// except where a result is returned to the host (count_correct, count_nonfinite) or a label must
// be validated (cross_entropy_forward). dtypes: float32 everywhere; float16 and bfloat16 too for
// conv2d, linear, the elementwise ops and cast (GEMMs accumulate in float32).
#pragma once
#include "core/tensor.h"
#include "kernels/ops.h"

namespace ringgrad::kernels::cuda {

#include "kernels/backend_ops.h"

// cudnn_conv2d.cu, built when CMake finds cuDNN (HAVE_CUDNN): conv2d through cuDNN, chosen by
// set_conv_impl(ConvImpl::cudnn).
void cudnn_conv2d_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias,
                          const Conv2dParams& p);
void cudnn_conv2d_backward(Tensor& dx, Tensor& dw, Tensor& dbias, const Tensor& dy, const Tensor& x,
                           const Tensor& w, const Conv2dParams& p);

}  // namespace ringgrad::kernels::cuda

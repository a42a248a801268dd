// CUDA implementations behind kernels/ops.h, one .cu file per op family; kernels/ops.cpp calls
// them once every operand is on one CUDA device. Each is declared, as in kernels/cpu/cpu_ops.h,
// with the decltype of the op of its name, and does the CPU's element math; it checks shapes and
// dtypes itself, except where the router already has (the elementwise ops, cast, sgd_step). All
// work is queued on the device's compute stream (core/cuda_memory.h) and returns without waiting,
// except where a result is returned to the host (count_correct, count_nonfinite) or a label must
// be validated (cross_entropy_forward). dtypes: float32 everywhere; float16 and bfloat16 too for
// conv2d, linear, the elementwise ops and cast (GEMMs accumulate in float32).
#pragma once
#include "core/tensor.h"
#include "kernels/ops.h"

namespace ringgrad::kernels::cuda {

// conv2d (conv2d.cu)
decltype(kernels::conv2d_forward) conv2d_forward;
decltype(kernels::conv2d_backward) conv2d_backward;
// linear
decltype(kernels::linear_forward) linear_forward;
decltype(kernels::linear_backward) linear_backward;
// batch norm; batch norm + relu (+ residual) as those ops one after another (batchnorm_relu.cu)
decltype(kernels::batchnorm_channel_sums) batchnorm_channel_sums;
decltype(kernels::batchnorm_apply) batchnorm_apply;
decltype(kernels::batchnorm_forward_train) batchnorm_forward_train;
decltype(kernels::batchnorm_forward_eval) batchnorm_forward_eval;
decltype(kernels::batchnorm_backward_reduce) batchnorm_backward_reduce;
decltype(kernels::batchnorm_backward_apply) batchnorm_backward_apply;
decltype(kernels::batchnorm_backward) batchnorm_backward;
decltype(kernels::batchnorm_relu_forward_train) batchnorm_relu_forward_train;
decltype(kernels::batchnorm_relu_forward_eval) batchnorm_relu_forward_eval;
decltype(kernels::batchnorm_relu_backward) batchnorm_relu_backward;
// elementwise
decltype(kernels::relu_forward) relu_forward;
decltype(kernels::relu_backward) relu_backward;
decltype(kernels::add) add;
decltype(kernels::add_relu_forward) add_relu_forward;
decltype(kernels::scale_) scale_;
decltype(kernels::increment_) increment_;
// pooling
decltype(kernels::maxpool2d_forward) maxpool2d_forward;
decltype(kernels::maxpool2d_backward) maxpool2d_backward;
decltype(kernels::global_avgpool_forward) global_avgpool_forward;
decltype(kernels::global_avgpool_backward) global_avgpool_backward;
// loss
decltype(kernels::cross_entropy_forward) cross_entropy_forward;
decltype(kernels::cross_entropy_backward) cross_entropy_backward;
decltype(kernels::count_correct) count_correct;
// mixed precision
decltype(kernels::cast) cast;
decltype(kernels::count_nonfinite) count_nonfinite;
// optimiser
decltype(kernels::sgd_step) sgd_step;

// cudnn_conv2d.cu, built when CMake finds cuDNN (HAVE_CUDNN): conv2d through cuDNN, chosen by
// set_conv_impl(ConvImpl::cudnn).
void cudnn_conv2d_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias,
                          const Conv2dParams& p);
void cudnn_conv2d_backward(Tensor& dx, Tensor& dw, Tensor& dbias, const Tensor& dy, const Tensor& x,
                           const Tensor& w, const Conv2dParams& p);

}  // namespace ringgrad::kernels::cuda

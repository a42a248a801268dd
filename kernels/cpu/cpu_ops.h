// The CPU kernels behind kernels/ops.h (OpenMP, GEMM through OpenBLAS or our AVX-512 sgemm),
// one .cpp file per op family; kernels/ops.cpp calls them for CPU tensors. Each is declared
// with the decltype of the op of its name, so it has that op's parameters and contract (named
// and explained in ops.h) and cannot drift from it; it checks shapes and dtypes itself, except
// where the router already has (the elementwise ops, cast, sgd_step). f32 and f64 everywhere
// (f64 is what the gradient checks use); batch norm, relu, add and pooling take bf16 too (f32
// arithmetic), and so does conv2d where the CPU has a bf16 GEMM; conv2d elsewhere, linear and
// count_correct take f16 and bf16 through f32 copies (half_via_f32.h). Plus the textbook
// convolution the fast paths are tested on.
#pragma once
#include "core/tensor.h"
#include "kernels/ops.h"

namespace ringgrad::kernels::cpu {

// conv2d (conv2d.cpp, with its tap-crop and flipped-backward paths beside it)
decltype(kernels::conv2d_forward) conv2d_forward;
decltype(kernels::conv2d_backward) conv2d_backward;
decltype(kernels::conv2d_tap_window) conv2d_tap_window;  // conv2d_tap_crop.cpp
decltype(kernels::conv2d_crop_kernel) conv2d_crop_kernel;
decltype(kernels::conv2d_uncrop_kernel_grad) conv2d_uncrop_kernel_grad;
// linear
decltype(kernels::linear_forward) linear_forward;
decltype(kernels::linear_backward) linear_backward;
// batch norm, and batch norm + relu (+ residual) in one pass
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

// conv2d_reference.cpp: the convolution straight from its definition, seven plain loops, f32
// and f64, same contract as conv2d_forward / conv2d_backward. Slow; what readers start from and
// what tests compare conv2d (im2col + GEMM, tap crop, flipped backward) against.
void conv2d_reference_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias,
                              const Conv2dParams& p);
void conv2d_reference_backward(Tensor& dx, Tensor& dw, Tensor& dbias, const Tensor& dy,
                               const Tensor& x, const Tensor& w, const Conv2dParams& p);

}  // namespace ringgrad::kernels::cpu

// CUDA implementations behind kernels/ops.h, one .cu file per op family. Each matches the CPU
// op of the same name (same contract, same element math). The entry points in kernels/cpu/*.cpp
// check that every operand is on one device and forward CUDA tensors here; these functions
// check shapes and dtypes themselves. All work is queued on the device's compute stream
// (core/cuda_memory.h) and returns without waiting, except where a result is returned to the
// host (count_correct, count_nonfinite) or a label must be validated (cross_entropy_forward).
// dtypes: float32 everywhere; float16 and bfloat16 too for conv2d, linear, the elementwise ops
// and cast (GEMMs accumulate in float32).
#pragma once
#include "core/tensor.h"
#include "kernels/ops.h"

namespace ringgrad::kernels::cuda {

// conv2d.cu
void conv2d_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias,
                    const Conv2dParams& p);
void conv2d_backward(Tensor& dx, Tensor& dw, Tensor& dbias, const Tensor& dy, const Tensor& x,
                     const Tensor& w, const Conv2dParams& p);

// cudnn_conv2d.cu, built when CMake finds cuDNN (HAVE_CUDNN): the same ops through cuDNN.
void cudnn_conv2d_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias,
                          const Conv2dParams& p);
void cudnn_conv2d_backward(Tensor& dx, Tensor& dw, Tensor& dbias, const Tensor& dy, const Tensor& x,
                           const Tensor& w, const Conv2dParams& p);

// linear.cu
void linear_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias);
void linear_backward(Tensor& dx, Tensor& dw, Tensor& dbias, const Tensor& dy, const Tensor& x,
                     const Tensor& w);

// batchnorm.cu (per-channel tensors may be float32 or float64, as on the CPU)
void batchnorm_channel_sums(Tensor& sum, Tensor& sum_sq, const Tensor& x);
void batchnorm_apply(Tensor& y, const Tensor& x, const Tensor& mean, const Tensor& invstd,
                     const Tensor& gamma, const Tensor& beta);
void batchnorm_forward_train(Tensor& y, Tensor& save_mean, Tensor& save_invstd,
                             Tensor& running_mean, Tensor& running_var, const Tensor& x,
                             const Tensor& gamma, const Tensor& beta, double momentum, double eps);
void batchnorm_forward_eval(Tensor& y, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                            const Tensor& running_mean, const Tensor& running_var, double eps);
void batchnorm_backward_reduce(Tensor& sum_dy, Tensor& sum_dy_xhat, const Tensor& dy,
                               const Tensor& x, const Tensor& mean, const Tensor& invstd);
void batchnorm_backward_apply(Tensor& dx, const Tensor& dy, const Tensor& x, const Tensor& mean,
                              const Tensor& invstd, const Tensor& gamma, const Tensor& sum_dy,
                              const Tensor& sum_dy_xhat, double count);
void batchnorm_backward(Tensor& dx, Tensor& dgamma, Tensor& dbeta, const Tensor& dy,
                        const Tensor& x, const Tensor& gamma, const Tensor& save_mean,
                        const Tensor& save_invstd);

// elementwise.cu (shapes and dtypes checked by the CPU entry points' check_same)
void relu_forward(Tensor& y, const Tensor& x);
void relu_backward(Tensor& dx, const Tensor& dy, const Tensor& y);
void add(Tensor& y, const Tensor& a, const Tensor& b);
void add_relu_forward(Tensor& y, const Tensor& a, const Tensor& b);
void scale_(Tensor& a, double alpha);
void increment_(Tensor& counter);  // one int64 element

// pool.cu
void maxpool2d_forward(Tensor& y, Tensor& indices, const Tensor& x, const Pool2dParams& p);
void maxpool2d_backward(Tensor& dx, const Tensor& dy, const Tensor& indices);
void global_avgpool_forward(Tensor& y, const Tensor& x);
void global_avgpool_backward(Tensor& dx, const Tensor& dy);

// loss.cu (loss is a one-element tensor on the logits' device)
void cross_entropy_forward(Tensor& loss, Tensor& log_probs, const Tensor& logits,
                           const Tensor& labels);
void cross_entropy_backward(Tensor& dlogits, const Tensor& log_probs, const Tensor& labels,
                            double dloss);
int64_t count_correct(const Tensor& logits, const Tensor& labels);

// cast.cu
void cast(Tensor& y, const Tensor& x);
int64_t count_nonfinite(const Tensor& x);

// sgd.cu
void sgd_step(Tensor& param, Tensor& momentum_buf, const Tensor& grad, const SgdParams& p,
              bool first_step);

}  // namespace ringgrad::kernels::cuda

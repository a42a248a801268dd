// kernels/ops.h: one backend-neutral entry point per op. Each checks its arguments and
// dispatches on the tensors' device to kernels/cpu (OpenMP + OpenBLAS) or kernels/cuda.
// Conventions: outputs first, then inputs, then parameters. Outputs are preallocated by the
// caller with the right shape and are overwritten (never accumulated into) unless the name
// ends in '_' (in place). Optional tensors are passed undefined (Tensor()) to skip them.
// Floating kernels support f32 and f64 on the CPU (f64 is what the gradient checks use); bf16
// too, with f32 arithmetic, for what mixed precision runs in bf16 (conv2d, batch norm, relu,
// add, pooling); linear and count_correct take f16 and bf16 through f32 copies.
#pragma once
#include <string>

#include "core/choices.h"
#include "core/tensor.h"

namespace ringgrad::kernels {

// OpenMP and OpenBLAS threads for every CPU kernel: 1 to max_num_threads(), else InvalidArgument.
void set_num_threads(int n);
int num_threads();
// 4 per core: more only makes every thread wait for a core, and thousands overflow the stack
// space of the OpenMP runtime (a segfault at the first parallel region).
int max_num_threads();
// What the CPU convolutions in dtype t run on here, in words ("AMX tiles", "AVX512-BF16 dot
// products", "f32 copies: why", "AVX2 direct pieces, else OpenBLAS", ...), for logs and benchmark
// headers: one binary picks its kernels at run time (RINGGRAD_CPU_ISA caps the choice).
std::string cpu_conv_path(DType t);

// ---- convolution -----------------------------------------------------------------------
struct Conv2dParams {
  int stride_h = 1, stride_w = 1;
  int pad_h = 0, pad_w = 0;
};
// x: (N, C, H, W)  w: (K, C, R, S)  ->  y: (N, K, P, Q), P = (H + 2 pad_h - R) / stride_h + 1
Shape conv2d_output_shape(const Shape& x, const Shape& w, const Conv2dParams& p);
// Which implementation CUDA convolutions use, process-wide (CPU convolutions always use
// im2col + GEMM): the hand-written im2col + cuBLAS kernels, or cuDNN, which exists so the
// hand-written path can be compared against it (--conv-impl cudnn). set_conv_impl(cudnn)
// throws InvalidArgument in a build without cuDNN.
enum class ConvImpl { im2col, cudnn };
void set_conv_impl(ConvImpl impl);
ConvImpl conv_impl();
inline const Choices<ConvImpl> kConvImpls{{"im2col", ConvImpl::im2col}, {"cudnn", ConvImpl::cudnn}};
// y = conv(x, w) + bias; bias: (K) or undefined.
void conv2d_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias,
                    const Conv2dParams& p);
// From dy: (N, K, P, Q) computes dx (N,C,H,W), dw (K,C,R,S), dbias (K); any may be undefined.
// On the CPU a half x may have an f32 dw: the weight gradient's f32 sums, not rounded to half.
void conv2d_backward(Tensor& dx, Tensor& dw, Tensor& dbias, const Tensor& dy, const Tensor& x,
                     const Tensor& w, const Conv2dParams& p);
// Kernel taps that only ever meet padding multiply zeros (a 3x3 pad-1 kernel on a 1x1 image has
// eight). They form the kernel's borders, so the conv equals the one with the kernel cropped to
// the window of taps that meet the image, rows [r0, r1) and columns [s0, s1), and its padding
// cut by r0 and s0 (conv2d_cropped_params). The CPU conv crops by itself in forward and again in
// backward; a caller that runs both on one weight can crop it once (nn's conv2d does, casting
// to the autocast dtype in the same pass).
struct TapWindow {
  int64_t r0, r1, s0, s1;
  bool empty() const { return r0 >= r1 || s0 >= s1; }  // every output reads only padding
  Shape cropped(const Shape& w) const { return {w[0], w[1], r1 - r0, s1 - s0}; }
};
TapWindow conv2d_tap_window(const Shape& x, const Shape& w, const Conv2dParams& p);
Conv2dParams conv2d_cropped_params(const Conv2dParams& p, const TapWindow& t);
// CPU: crop (K, C, r1 - r0, s1 - s0) = w's taps inside t, converted to crop's dtype.
void conv2d_crop_kernel(Tensor& crop, const Tensor& w, const TapWindow& t);
// CPU: dw (K, C, R, S) = dcrop inside t, zero outside (one dtype).
void conv2d_uncrop_kernel_grad(Tensor& dw, const Tensor& dcrop, const TapWindow& t);

// ---- linear ----------------------------------------------------------------------------
// x: (N, IN)  w: (OUT, IN)  bias: (OUT) or undefined  ->  y: (N, OUT) = x w^T + bias
void linear_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias);
void linear_backward(Tensor& dx, Tensor& dw, Tensor& dbias, const Tensor& dy, const Tensor& x,
                     const Tensor& w);

// ---- batch normalisation (x: (N, C, H, W), per-channel tensors: (C)) ------------------------
// The per-channel tensors may be float32 or float64, whatever x's dtype.
// Split into statistics and application so SyncBatchNorm can all-reduce the sums in between.
// Per-channel sum and sum of squares over N, H, W (accumulated in double on the CPU).
void batchnorm_channel_sums(Tensor& sum, Tensor& sum_sq, const Tensor& x);
// y = (x - mean) * invstd * gamma + beta
void batchnorm_apply(Tensor& y, const Tensor& x, const Tensor& mean, const Tensor& invstd,
                     const Tensor& gamma, const Tensor& beta);
// Training forward, as PyTorch: batch mean and biased variance normalise; the running stats
// get running = (1 - momentum) running + momentum batch, with the unbiased variance.
// save_mean and save_invstd (C) are kept for backward.
void batchnorm_forward_train(Tensor& y, Tensor& save_mean, Tensor& save_invstd,
                             Tensor& running_mean, Tensor& running_var, const Tensor& x,
                             const Tensor& gamma, const Tensor& beta, double momentum, double eps);
// Eval forward with the running statistics.
void batchnorm_forward_eval(Tensor& y, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                            const Tensor& running_mean, const Tensor& running_var, double eps);
// Backward reductions: sum_dy = sum(dy), sum_dy_xhat = sum(dy * (x - mean) * invstd) per channel.
void batchnorm_backward_reduce(Tensor& sum_dy, Tensor& sum_dy_xhat, const Tensor& dy,
                               const Tensor& x, const Tensor& mean, const Tensor& invstd);
// dx = gamma * invstd * (dy - sum_dy / count - xhat * sum_dy_xhat / count); count = N*H*W
// over every rank for SyncBatchNorm.
void batchnorm_backward_apply(Tensor& dx, const Tensor& dy, const Tensor& x, const Tensor& mean,
                              const Tensor& invstd, const Tensor& gamma, const Tensor& sum_dy,
                              const Tensor& sum_dy_xhat, double count);
// Whole training backward: dgamma = sum_dy_xhat, dbeta = sum_dy, dx as above (any may be
// undefined except dy).
void batchnorm_backward(Tensor& dx, Tensor& dgamma, Tensor& dbeta, const Tensor& dy,
                        const Tensor& x, const Tensor& gamma, const Tensor& save_mean,
                        const Tensor& save_invstd);
// Batch norm fused with the relu, and the residual add, that follow it in a ResNet block:
// y = relu(bn(x) + residual), residual like x or undefined (then y = relu(bn(x))). One pass over
// the data where the three ops make three (CPU); on CUDA the ops above, one after another. The
// backward takes that y (its mask is y > 0; undefined: no relu, batchnorm_backward) and gives
// dresidual = dy * (y > 0) when defined.
void batchnorm_relu_forward_train(Tensor& y, Tensor& save_mean, Tensor& save_invstd,
                                  Tensor& running_mean, Tensor& running_var, const Tensor& x,
                                  const Tensor& residual, const Tensor& gamma, const Tensor& beta,
                                  double momentum, double eps);
void batchnorm_relu_forward_eval(Tensor& y, const Tensor& x, const Tensor& residual,
                                 const Tensor& gamma, const Tensor& beta,
                                 const Tensor& running_mean, const Tensor& running_var, double eps);
void batchnorm_relu_backward(Tensor& dx, Tensor& dresidual, Tensor& dgamma, Tensor& dbeta,
                             const Tensor& dy, const Tensor& y, const Tensor& x,
                             const Tensor& gamma, const Tensor& save_mean,
                             const Tensor& save_invstd);

// ---- elementwise -----------------------------------------------------------------------
void relu_forward(Tensor& y, const Tensor& x);
void relu_backward(Tensor& dx, const Tensor& dy, const Tensor& y);  // dx = dy * (y > 0)
void add(Tensor& y, const Tensor& a, const Tensor& b);              // y = a + b
void add_(Tensor& a, const Tensor& b);                              // a += b
// Fused residual tail of a BasicBlock: y = relu(a + b); backward gives d(a+b) = dy * (y > 0).
void add_relu_forward(Tensor& y, const Tensor& a, const Tensor& b);
void scale_(Tensor& a, double alpha);  // a *= alpha
// counter += 1 for a one-element int64 tensor (BatchNorm's num_batches_tracked). On CUDA a
// one-thread kernel, so counting a batch never waits for the stream.
void increment_(Tensor& counter);

// ---- pooling ---------------------------------------------------------------------------
struct Pool2dParams {
  int kernel_h = 1, kernel_w = 1;
  int stride_h = 1, stride_w = 1;
  int pad_h = 0, pad_w = 0;
};
Shape pool2d_output_shape(const Shape& x, const Pool2dParams& p);
// Max pool; indices (i32, same shape as y) record the argmax within each input plane (h*W + w)
// for backward. Padding counts as -inf, as PyTorch.
void maxpool2d_forward(Tensor& y, Tensor& indices, const Tensor& x, const Pool2dParams& p);
void maxpool2d_backward(Tensor& dx, const Tensor& dy, const Tensor& indices);
// Adaptive average pool to 1x1: x (N, C, H, W) -> y (N, C, 1, 1)
void global_avgpool_forward(Tensor& y, const Tensor& x);
void global_avgpool_backward(Tensor& dx, const Tensor& dy);

// ---- loss ------------------------------------------------------------------------------
// Fused log-softmax + NLL, mean over the batch: logits (N, C), labels (N) int64.
// loss: () scalar on the logits' device; log_probs: (N, C) saved for backward.
void cross_entropy_forward(Tensor& loss, Tensor& log_probs, const Tensor& logits,
                           const Tensor& labels);
// dlogits = (softmax - onehot(labels)) * dloss / N
void cross_entropy_backward(Tensor& dlogits, const Tensor& log_probs, const Tensor& labels,
                            double dloss);
// Number of rows whose argmax equals the label.
int64_t count_correct(const Tensor& logits, const Tensor& labels);

// ---- mixed precision ------------------------------------------------------------------------
// dst = src converted to dst's dtype (any of f32, f64, f16, bf16; same numel), rounding to
// nearest even; NaN stays NaN, values beyond the half range become inf. Equal dtypes: a copy.
void cast(Tensor& dst, const Tensor& src);
// Number of inf and NaN elements of a floating tensor: GradScaler's check for an overflowed
// step. Blocking (the count comes back to the host).
int64_t count_nonfinite(const Tensor& t);

// ---- optimiser -------------------------------------------------------------------------
// PyTorch SGD, one parameter: g = grad + weight_decay * param; with momentum:
// buf = first_step ? g : momentum * buf + (1 - dampening) * g; g = nesterov ? g + momentum *
// buf : buf; then param -= lr * g. momentum_buf may be undefined when momentum == 0.
struct SgdParams {
  double lr = 0.01, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
};
void sgd_step(Tensor& param, Tensor& momentum_buf, const Tensor& grad, const SgdParams& p,
              bool first_step);

}  // namespace ringgrad::kernels

// The router behind kernels/ops.h: every op checks that its defined operands share one device
// (a mixed call is an error naming both, never a silent copy) and calls that device's kernel,
// cpu:: (kernels/cpu) or cuda:: (kernels/cuda), which check shapes and dtypes themselves.
// CUDA convolutions go to cuDNN instead of the hand-written kernels when set_conv_impl says so.
#include "kernels/ops.h"

#include <atomic>
#include <initializer_list>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/operand_checks.h"
#include "ringgrad/config.h"

namespace ringgrad::kernels {

namespace {

// A build without CUDA declares the cuda:: functions but defines none of them; it also never
// makes a CUDA tensor. `if constexpr (kCudaBuild)` keeps the calls out of such a build.
#ifdef HAVE_CUDA
constexpr bool kCudaBuild = true;
#else
constexpr bool kCudaBuild = false;
#endif
#ifdef HAVE_CUDNN
constexpr bool kCudnnBuild = true;
#else
constexpr bool kCudnnBuild = false;
#endif

// One operand of an op, named for error messages.
struct Operand {
  const char* name;
  const Tensor& tensor;
};

// Whether the op runs on CUDA: every defined operand must be on one device, and that device is
// a CUDA device.
bool on_cuda(const char* op, std::initializer_list<Operand> operands) {
  const Operand* first = nullptr;
  for (const Operand& o : operands) {
    if (!o.tensor.defined()) continue;
    if (!first) {
      first = &o;
      continue;
    }
    RG_CHECK(o.tensor.device() == first->tensor.device(), op, ": ", first->name, " is on ",
             first->tensor.device().str(), " but ", o.name, " is on ", o.tensor.device().str(),
             "; move every operand to one device");
  }
  return first && first->tensor.is_cuda();
}

std::atomic<ConvImpl> g_conv_impl{ConvImpl::im2col};

}  // namespace

// ---- convolution -----------------------------------------------------------------------

void set_conv_impl(ConvImpl impl) {
  if (impl == ConvImpl::cudnn && !kCudnnBuild)
    RG_THROW(InvalidArgument,
             "--conv-impl cudnn: this ringgrad build has no cuDNN (CMake did not "
             "find libcudnn next to the CUDA toolkit)");
  g_conv_impl = impl;
}

ConvImpl conv_impl() { return g_conv_impl; }

void conv2d_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias,
                    const Conv2dParams& p) {
  if (on_cuda("conv2d_forward", {{"y", y}, {"x", x}, {"w", w}, {"bias", bias}})) {
    if constexpr (kCudnnBuild) {
      if (conv_impl() == ConvImpl::cudnn) return cuda::cudnn_conv2d_forward(y, x, w, bias, p);
    }
    if constexpr (kCudaBuild) return cuda::conv2d_forward(y, x, w, bias, p);
  }
  cpu::conv2d_forward(y, x, w, bias, p);
}

void conv2d_backward(Tensor& dx, Tensor& dw, Tensor& dbias, const Tensor& dy, const Tensor& x,
                     const Tensor& w, const Conv2dParams& p) {
  if (on_cuda("conv2d_backward",
              {{"dx", dx}, {"dw", dw}, {"dbias", dbias}, {"dy", dy}, {"x", x}, {"w", w}})) {
    if constexpr (kCudnnBuild) {
      if (conv_impl() == ConvImpl::cudnn)
        return cuda::cudnn_conv2d_backward(dx, dw, dbias, dy, x, w, p);
    }
    if constexpr (kCudaBuild) return cuda::conv2d_backward(dx, dw, dbias, dy, x, w, p);
  }
  cpu::conv2d_backward(dx, dw, dbias, dy, x, w, p);
}

TapWindow conv2d_tap_window(const Shape& x, const Shape& w, const Conv2dParams& p) {
  return cpu::conv2d_tap_window(x, w, p);  // geometry only: the same on every device
}

Conv2dParams conv2d_cropped_params(const Conv2dParams& p, const TapWindow& t) {
  Conv2dParams cropped = p;
  cropped.pad_h -= static_cast<int>(t.r0);
  cropped.pad_w -= static_cast<int>(t.s0);
  return cropped;
}

void conv2d_crop_kernel(Tensor& crop, const Tensor& w, const TapWindow& t) {
  cpu::conv2d_crop_kernel(crop, w, t);  // CPU only: it checks
}

void conv2d_uncrop_kernel_grad(Tensor& dw, const Tensor& dcrop, const TapWindow& t) {
  cpu::conv2d_uncrop_kernel_grad(dw, dcrop, t);
}

// ---- linear ----------------------------------------------------------------------------

void linear_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias) {
  if (on_cuda("linear_forward", {{"y", y}, {"x", x}, {"w", w}, {"bias", bias}})) {
    if constexpr (kCudaBuild) return cuda::linear_forward(y, x, w, bias);
  }
  cpu::linear_forward(y, x, w, bias);
}

void linear_backward(Tensor& dx, Tensor& dw, Tensor& dbias, const Tensor& dy, const Tensor& x,
                     const Tensor& w) {
  if (on_cuda("linear_backward",
              {{"dx", dx}, {"dw", dw}, {"dbias", dbias}, {"dy", dy}, {"x", x}, {"w", w}})) {
    if constexpr (kCudaBuild) return cuda::linear_backward(dx, dw, dbias, dy, x, w);
  }
  cpu::linear_backward(dx, dw, dbias, dy, x, w);
}

// ---- batch normalisation ---------------------------------------------------------------

void batchnorm_channel_sums(Tensor& sum, Tensor& sum_sq, const Tensor& x) {
  if (on_cuda("batchnorm_channel_sums", {{"x", x}, {"sum", sum}, {"sum_sq", sum_sq}})) {
    if constexpr (kCudaBuild) return cuda::batchnorm_channel_sums(sum, sum_sq, x);
  }
  cpu::batchnorm_channel_sums(sum, sum_sq, x);
}

void batchnorm_apply(Tensor& y, const Tensor& x, const Tensor& mean, const Tensor& invstd,
                     const Tensor& gamma, const Tensor& beta) {
  if (on_cuda("batchnorm_apply", {{"x", x},
                                  {"y", y},
                                  {"mean", mean},
                                  {"invstd", invstd},
                                  {"gamma", gamma},
                                  {"beta", beta}})) {
    if constexpr (kCudaBuild) return cuda::batchnorm_apply(y, x, mean, invstd, gamma, beta);
  }
  cpu::batchnorm_apply(y, x, mean, invstd, gamma, beta);
}

void batchnorm_forward_train(Tensor& y, Tensor& save_mean, Tensor& save_invstd,
                             Tensor& running_mean, Tensor& running_var, const Tensor& x,
                             const Tensor& gamma, const Tensor& beta, double momentum, double eps) {
  if (on_cuda("batchnorm_forward_train", {{"x", x},
                                          {"y", y},
                                          {"save_mean", save_mean},
                                          {"save_invstd", save_invstd},
                                          {"running_mean", running_mean},
                                          {"running_var", running_var},
                                          {"gamma", gamma},
                                          {"beta", beta}})) {
    if constexpr (kCudaBuild)
      return cuda::batchnorm_forward_train(y, save_mean, save_invstd, running_mean, running_var, x,
                                           gamma, beta, momentum, eps);
  }
  cpu::batchnorm_forward_train(y, save_mean, save_invstd, running_mean, running_var, x, gamma, beta,
                               momentum, eps);
}

void batchnorm_forward_eval(Tensor& y, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                            const Tensor& running_mean, const Tensor& running_var, double eps) {
  if (on_cuda("batchnorm_forward_eval", {{"x", x},
                                         {"y", y},
                                         {"gamma", gamma},
                                         {"beta", beta},
                                         {"running_mean", running_mean},
                                         {"running_var", running_var}})) {
    if constexpr (kCudaBuild)
      return cuda::batchnorm_forward_eval(y, x, gamma, beta, running_mean, running_var, eps);
  }
  cpu::batchnorm_forward_eval(y, x, gamma, beta, running_mean, running_var, eps);
}

void batchnorm_backward_reduce(Tensor& sum_dy, Tensor& sum_dy_xhat, const Tensor& dy,
                               const Tensor& x, const Tensor& mean, const Tensor& invstd) {
  if (on_cuda("batchnorm_backward_reduce", {{"x", x},
                                            {"dy", dy},
                                            {"sum_dy", sum_dy},
                                            {"sum_dy_xhat", sum_dy_xhat},
                                            {"mean", mean},
                                            {"invstd", invstd}})) {
    if constexpr (kCudaBuild)
      return cuda::batchnorm_backward_reduce(sum_dy, sum_dy_xhat, dy, x, mean, invstd);
  }
  cpu::batchnorm_backward_reduce(sum_dy, sum_dy_xhat, dy, x, mean, invstd);
}

void batchnorm_backward_apply(Tensor& dx, const Tensor& dy, const Tensor& x, const Tensor& mean,
                              const Tensor& invstd, const Tensor& gamma, const Tensor& sum_dy,
                              const Tensor& sum_dy_xhat, double count) {
  if (on_cuda("batchnorm_backward_apply", {{"x", x},
                                           {"dx", dx},
                                           {"dy", dy},
                                           {"mean", mean},
                                           {"invstd", invstd},
                                           {"gamma", gamma},
                                           {"sum_dy", sum_dy},
                                           {"sum_dy_xhat", sum_dy_xhat}})) {
    if constexpr (kCudaBuild)
      return cuda::batchnorm_backward_apply(dx, dy, x, mean, invstd, gamma, sum_dy, sum_dy_xhat,
                                            count);
  }
  cpu::batchnorm_backward_apply(dx, dy, x, mean, invstd, gamma, sum_dy, sum_dy_xhat, count);
}

void batchnorm_backward(Tensor& dx, Tensor& dgamma, Tensor& dbeta, const Tensor& dy,
                        const Tensor& x, const Tensor& gamma, const Tensor& save_mean,
                        const Tensor& save_invstd) {
  if (on_cuda("batchnorm_backward", {{"x", x},
                                     {"dx", dx},
                                     {"dgamma", dgamma},
                                     {"dbeta", dbeta},
                                     {"dy", dy},
                                     {"gamma", gamma},
                                     {"save_mean", save_mean},
                                     {"save_invstd", save_invstd}})) {
    if constexpr (kCudaBuild)
      return cuda::batchnorm_backward(dx, dgamma, dbeta, dy, x, gamma, save_mean, save_invstd);
  }
  cpu::batchnorm_backward(dx, dgamma, dbeta, dy, x, gamma, save_mean, save_invstd);
}

void batchnorm_relu_forward_train(Tensor& y, Tensor& save_mean, Tensor& save_invstd,
                                  Tensor& running_mean, Tensor& running_var, const Tensor& x,
                                  const Tensor& residual, const Tensor& gamma, const Tensor& beta,
                                  double momentum, double eps) {
  if (on_cuda("batchnorm_relu_forward_train", {{"x", x},
                                               {"y", y},
                                               {"residual", residual},
                                               {"save_mean", save_mean},
                                               {"save_invstd", save_invstd},
                                               {"running_mean", running_mean},
                                               {"running_var", running_var},
                                               {"gamma", gamma},
                                               {"beta", beta}})) {
    if constexpr (kCudaBuild)
      return cuda::batchnorm_relu_forward_train(y, save_mean, save_invstd, running_mean,
                                                running_var, x, residual, gamma, beta, momentum,
                                                eps);
  }
  cpu::batchnorm_relu_forward_train(y, save_mean, save_invstd, running_mean, running_var, x,
                                    residual, gamma, beta, momentum, eps);
}

void batchnorm_relu_forward_eval(Tensor& y, const Tensor& x, const Tensor& residual,
                                 const Tensor& gamma, const Tensor& beta,
                                 const Tensor& running_mean, const Tensor& running_var,
                                 double eps) {
  if (on_cuda("batchnorm_relu_forward_eval", {{"x", x},
                                              {"y", y},
                                              {"residual", residual},
                                              {"gamma", gamma},
                                              {"beta", beta},
                                              {"running_mean", running_mean},
                                              {"running_var", running_var}})) {
    if constexpr (kCudaBuild)
      return cuda::batchnorm_relu_forward_eval(y, x, residual, gamma, beta, running_mean,
                                               running_var, eps);
  }
  cpu::batchnorm_relu_forward_eval(y, x, residual, gamma, beta, running_mean, running_var, eps);
}

void batchnorm_relu_backward(Tensor& dx, Tensor& dresidual, Tensor& dgamma, Tensor& dbeta,
                             const Tensor& dy, const Tensor& y, const Tensor& x,
                             const Tensor& gamma, const Tensor& save_mean,
                             const Tensor& save_invstd) {
  if (on_cuda("batchnorm_relu_backward", {{"x", x},
                                          {"dx", dx},
                                          {"dresidual", dresidual},
                                          {"dgamma", dgamma},
                                          {"dbeta", dbeta},
                                          {"dy", dy},
                                          {"y", y},
                                          {"gamma", gamma},
                                          {"save_mean", save_mean},
                                          {"save_invstd", save_invstd}})) {
    if constexpr (kCudaBuild)
      return cuda::batchnorm_relu_backward(dx, dresidual, dgamma, dbeta, dy, y, x, gamma, save_mean,
                                           save_invstd);
  }
  cpu::batchnorm_relu_backward(dx, dresidual, dgamma, dbeta, dy, y, x, gamma, save_mean,
                               save_invstd);
}

// ---- elementwise: check_same is the whole argument check ------------------------------

void relu_forward(Tensor& y, const Tensor& x) {
  check_same(y, x, "relu_forward");
  if (x.is_cuda()) {
    if constexpr (kCudaBuild) return cuda::relu_forward(y, x);
  }
  cpu::relu_forward(y, x);
}

void relu_backward(Tensor& dx, const Tensor& dy, const Tensor& y) {
  check_same(dx, dy, "relu_backward");
  check_same(dy, y, "relu_backward");
  if (y.is_cuda()) {
    if constexpr (kCudaBuild) return cuda::relu_backward(dx, dy, y);
  }
  cpu::relu_backward(dx, dy, y);
}

void add(Tensor& y, const Tensor& a, const Tensor& b) {
  check_same(y, a, "add");
  check_same(a, b, "add");
  if (a.is_cuda()) {
    if constexpr (kCudaBuild) return cuda::add(y, a, b);
  }
  cpu::add(y, a, b);
}

void add_(Tensor& a, const Tensor& b) { add(a, a, b); }

void add_relu_forward(Tensor& y, const Tensor& a, const Tensor& b) {
  check_same(y, a, "add_relu_forward");
  check_same(a, b, "add_relu_forward");
  if (a.is_cuda()) {
    if constexpr (kCudaBuild) return cuda::add_relu_forward(y, a, b);
  }
  cpu::add_relu_forward(y, a, b);
}

void scale_(Tensor& a, double alpha) {
  RG_CHECK(a.defined(), "scale_: undefined tensor");
  if (a.is_cuda()) {
    if constexpr (kCudaBuild) return cuda::scale_(a, alpha);
  }
  cpu::scale_(a, alpha);
}

void increment_(Tensor& counter) {
  RG_CHECK(counter.defined() && counter.numel() == 1 && counter.dtype() == DType::i64,
           "increment_: needs a one-element int64 tensor, got ",
           counter.defined() ? dtype_name(counter.dtype()) : "undefined", " of shape ",
           counter.shape().str());
  if (counter.is_cuda()) {
    if constexpr (kCudaBuild) return cuda::increment_(counter);
  }
  cpu::increment_(counter);
}

// ---- pooling ---------------------------------------------------------------------------

void maxpool2d_forward(Tensor& y, Tensor& indices, const Tensor& x, const Pool2dParams& p) {
  if (on_cuda("maxpool2d_forward", {{"x", x}, {"y", y}, {"indices", indices}})) {
    if constexpr (kCudaBuild) return cuda::maxpool2d_forward(y, indices, x, p);
  }
  cpu::maxpool2d_forward(y, indices, x, p);
}

void maxpool2d_backward(Tensor& dx, const Tensor& dy, const Tensor& indices) {
  if (on_cuda("maxpool2d_backward", {{"dx", dx}, {"dy", dy}, {"indices", indices}})) {
    if constexpr (kCudaBuild) return cuda::maxpool2d_backward(dx, dy, indices);
  }
  cpu::maxpool2d_backward(dx, dy, indices);
}

void global_avgpool_forward(Tensor& y, const Tensor& x) {
  if (on_cuda("global_avgpool_forward", {{"x", x}, {"y", y}})) {
    if constexpr (kCudaBuild) return cuda::global_avgpool_forward(y, x);
  }
  cpu::global_avgpool_forward(y, x);
}

void global_avgpool_backward(Tensor& dx, const Tensor& dy) {
  if (on_cuda("global_avgpool_backward", {{"dx", dx}, {"dy", dy}})) {
    if constexpr (kCudaBuild) return cuda::global_avgpool_backward(dx, dy);
  }
  cpu::global_avgpool_backward(dx, dy);
}

// ---- loss ------------------------------------------------------------------------------

void cross_entropy_forward(Tensor& loss, Tensor& log_probs, const Tensor& logits,
                           const Tensor& labels) {
  if (on_cuda("cross_entropy_forward",
              {{"logits", logits}, {"loss", loss}, {"log_probs", log_probs}, {"labels", labels}})) {
    if constexpr (kCudaBuild) return cuda::cross_entropy_forward(loss, log_probs, logits, labels);
  }
  cpu::cross_entropy_forward(loss, log_probs, logits, labels);
}

void cross_entropy_backward(Tensor& dlogits, const Tensor& log_probs, const Tensor& labels,
                            double dloss) {
  if (on_cuda("cross_entropy_backward",
              {{"log_probs", log_probs}, {"dlogits", dlogits}, {"labels", labels}})) {
    if constexpr (kCudaBuild)
      return cuda::cross_entropy_backward(dlogits, log_probs, labels, dloss);
  }
  cpu::cross_entropy_backward(dlogits, log_probs, labels, dloss);
}

int64_t count_correct(const Tensor& logits, const Tensor& labels) {
  if (on_cuda("count_correct", {{"logits", logits}, {"labels", labels}})) {
    if constexpr (kCudaBuild) return cuda::count_correct(logits, labels);
  }
  return cpu::count_correct(logits, labels);
}

// ---- mixed precision -------------------------------------------------------------------

void cast(Tensor& dst, const Tensor& src) {
  RG_CHECK(dst.defined() && src.defined(), "cast: undefined tensor");
  RG_CHECK_EQ(dst.numel(), src.numel(), "cast: element counts differ (", dst.shape().str(), " vs ",
              src.shape().str(), ")");
  if (on_cuda("cast", {{"dst", dst}, {"src", src}})) {
    if constexpr (kCudaBuild) return cuda::cast(dst, src);
  }
  cpu::cast(dst, src);
}

int64_t count_nonfinite(const Tensor& t) {
  RG_CHECK(t.defined(), "count_nonfinite: undefined tensor");
  if (t.is_cuda()) {
    if constexpr (kCudaBuild) return cuda::count_nonfinite(t);
  }
  return cpu::count_nonfinite(t);
}

// ---- optimiser -------------------------------------------------------------------------

void sgd_step(Tensor& param, Tensor& momentum_buf, const Tensor& grad, const SgdParams& p,
              bool first_step) {
  constexpr const char* op = "sgd_step";
  RG_CHECK(param.defined() && grad.defined(), op, ": param and grad must be defined");
  RG_CHECK(param.shape() == grad.shape(), op, ": grad shape ", grad.shape().str(),
           " does not match param shape ", param.shape().str());
  check_same(param, grad, op);
  if (p.momentum != 0) {
    RG_CHECK(momentum_buf.defined(), op, ": momentum is ", p.momentum,
             " but momentum_buf is undefined; allocate it (shape ", param.shape().str(),
             ") before the first step");
    RG_CHECK(momentum_buf.shape() == param.shape(), op, ": momentum_buf shape ",
             momentum_buf.shape().str(), " does not match param shape ", param.shape().str());
    check_same(param, momentum_buf, op);
  }
  if (param.is_cuda()) {
    if constexpr (kCudaBuild) return cuda::sgd_step(param, momentum_buf, grad, p, first_step);
  }
  cpu::sgd_step(param, momentum_buf, grad, p, first_step);
}

}  // namespace ringgrad::kernels

// Batch normalisation on the CPU, PyTorch semantics, and its fusions with the relu (and the
// residual add) that follow it in a ResNet. x is viewed as (N, C, HW), in f32, f64 or bf16 (f32
// arithmetic, as PyTorch's CPU batch norm under autocast: bf16 data, f32 or f64 per-channel
// tensors); every per-channel quantity is held in double while it is computed (a few C-sized
// vectors), and the passes of batchnorm_passes.cpp are the only loops over the data: the whole
// forward and backward are compositions of them, and so are the split functions SyncBatchNorm
// uses. Element math: kernels/batchnorm_math.h.
#include <vector>

#include "kernels/batchnorm_math.h"
#include "kernels/cpu/batchnorm_passes.h"
#include "kernels/cpu/cpu_dispatch.h"
#include "kernels/cpu/cpu_ops.h"

namespace ringgrad::kernels::cpu {

namespace {

using ChannelVector = std::vector<double>;  // (C)

Layout layout_of(const Tensor& x, const char* op) {
  RG_CHECK(x.defined(), op, ": x is undefined");
  RG_CHECK_GE(x.dim(), 2, op, ": x must be (N, C, ...), got shape ", x.shape().str());
  check_cpu(x, op);
  int64_t hw = 1;
  for (int d = 2; d < x.dim(); ++d) hw *= x.size(d);
  return {x.size(0), x.size(1), hw};
}

// A data tensor (y, dy, dx) laid out exactly like x.
void check_like_x(const Tensor& t, const Tensor& x, const char* op, const char* name) {
  check_shape(t, x.shape(), op, name);
  check_same(t, x, op);
}

template <class T>
Epilogue<T> epilogue(const Tensor& residual, bool relu) {
  return {residual.defined() ? residual.data<T>() : nullptr, relu};
}

// Per-channel tensors may be float32 or float64 independently of x (SyncBatchNorm keeps its
// sums in float64); they are read into and written from double vectors.
ChannelVector read_channels(const Tensor& t, const Layout& l, const char* op, const char* name) {
  check_shape(t, Shape{l.c}, op, name);
  check_cpu(t, op);
  ChannelVector v(l.c);
  dispatch_float(t.dtype(), op, [&](auto tag) {
    const auto* p = t.data<decltype(tag)>();
    for (int64_t c = 0; c < l.c; ++c) v[c] = p[c];
  });
  return v;
}

ChannelVector read_channels_or(const Tensor& t, const Layout& l, double fallback, const char* op,
                               const char* name) {
  return t.defined() ? read_channels(t, l, op, name) : ChannelVector(l.c, fallback);
}

void write_channels(Tensor& t, const ChannelVector& v, const char* op, const char* name) {
  if (!t.defined()) return;
  check_shape(t, Shape{static_cast<int64_t>(v.size())}, op, name);
  check_cpu(t, op);
  dispatch_float(t.dtype(), op, [&](auto tag) {
    using S = decltype(tag);
    S* p = t.data<S>();
    for (size_t c = 0; c < v.size(); ++c) p[c] = static_cast<S>(v[c]);
  });
}

// ---- compositions on double vectors, shared by the split and the whole entry points ----------

void channel_sums(ChannelVector& sum, ChannelVector& sum_sq, const Tensor& x, Layout l,
                  const char* op) {
  sum.assign(l.c, 0);
  sum_sq.assign(l.c, 0);
  dispatch_float_or_bf16(x.dtype(), op, [&](auto tag) {
    channel_sums_loop(x.data<decltype(tag)>(), l, sum.data(), sum_sq.data());
  });
}

// y = relu(bn(x) + residual) (residual undefined: none; relu false: none).
void apply(Tensor& y, const Tensor& x, const Tensor& residual, bool relu, Layout l,
           const ChannelVector& mean, const ChannelVector& invstd, const ChannelVector& gamma,
           const ChannelVector& beta, const char* op) {
  check_like_x(y, x, op, "y");
  if (residual.defined()) check_like_x(residual, x, op, "residual");
  ChannelVector scale(l.c);
  for (int64_t c = 0; c < l.c; ++c) scale[c] = invstd[c] * gamma[c];
  dispatch_float_or_bf16(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    apply_loop(y.data<T>(), x.data<T>(), l, mean.data(), scale.data(), beta.data(),
               epilogue<T>(residual, relu));
  });
}

// sum_dy_xhat = invstd * sum dy * (x - mean).
void backward_reduce(ChannelVector& sum_dy, ChannelVector& sum_dy_xhat, const Tensor& dy,
                     const Tensor& x, Layout l, const ChannelVector& mean,
                     const ChannelVector& invstd, const char* op) {
  check_like_x(dy, x, op, "dy");
  sum_dy.assign(l.c, 0);
  sum_dy_xhat.assign(l.c, 0);
  dispatch_float_or_bf16(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    backward_reduce_loop(dy.data<T>(), x.data<T>(), l, mean.data(), sum_dy.data(),
                         sum_dy_xhat.data());
  });
  for (int64_t c = 0; c < l.c; ++c) sum_dy_xhat[c] *= invstd[c];
}

void backward_apply(Tensor& dx, const Tensor& dy, const Tensor& x, Layout l,
                    const ChannelVector& mean, const ChannelVector& invstd,
                    const ChannelVector& gamma, const ChannelVector& sum_dy,
                    const ChannelVector& sum_dy_xhat, double count, const char* op) {
  check_like_x(dx, x, op, "dx");
  check_like_x(dy, x, op, "dy");
  RG_CHECK_GT(count, 0, op, ": count (elements per channel over all ranks) must be positive");
  std::vector<InputGradFactors> factors(l.c);
  for (int64_t c = 0; c < l.c; ++c)
    factors[c] = input_grad_factors(gamma[c], invstd[c], sum_dy[c], sum_dy_xhat[c], count);
  dispatch_float_or_bf16(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    backward_apply_loop(dx.data<T>(), dy.data<T>(), x.data<T>(), l, mean.data(), factors.data());
  });
}

}  // namespace

// ---- entry points (kernels/ops.h) -----------------------------------------------------------

void batchnorm_channel_sums(Tensor& sum, Tensor& sum_sq, const Tensor& x) {
  constexpr const char* op = "batchnorm_channel_sums";
  const Layout l = layout_of(x, op);
  ChannelVector s, s2;
  channel_sums(s, s2, x, l, op);
  write_channels(sum, s, op, "sum");
  write_channels(sum_sq, s2, op, "sum_sq");
}

void batchnorm_apply(Tensor& y, const Tensor& x, const Tensor& mean, const Tensor& invstd,
                     const Tensor& gamma, const Tensor& beta) {
  constexpr const char* op = "batchnorm_apply";
  const Layout l = layout_of(x, op);
  apply(y, x, Tensor(), false, l, read_channels(mean, l, op, "mean"),
        read_channels(invstd, l, op, "invstd"), read_channels_or(gamma, l, 1.0, op, "gamma"),
        read_channels_or(beta, l, 0.0, op, "beta"), op);
}

namespace {

// Training forward with the fused epilogue y = relu(bn(x) + residual), each part optional.
void forward_train(Tensor& y, Tensor& save_mean, Tensor& save_invstd, Tensor& running_mean,
                   Tensor& running_var, const Tensor& x, const Tensor& residual, bool relu,
                   const Tensor& gamma, const Tensor& beta, double momentum, double eps,
                   const char* op) {
  const Layout l = layout_of(x, op);
  const double count = l.count();
  RG_CHECK_GT(count, 1, op, ": training needs more than one value per channel, got x of shape ",
              x.shape().str());
  ChannelVector run_mean, run_var;
  if (running_mean.defined()) run_mean = read_channels(running_mean, l, op, "running_mean");
  if (running_var.defined()) run_var = read_channels(running_var, l, op, "running_var");
  const ChannelVector g = read_channels_or(gamma, l, 1.0, op, "gamma");
  const ChannelVector b = read_channels_or(beta, l, 0.0, op, "beta");

  check_like_x(y, x, op, "y");
  if (residual.defined()) check_like_x(residual, x, op, "residual");
  ChannelVector mean(l.c), invstd(l.c), var(l.c);
  dispatch_float_or_bf16(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    fused_forward_train_loop(y.data<T>(), x.data<T>(), l, g.data(), b.data(), eps, mean.data(),
                             invstd.data(), var.data(), epilogue<T>(residual, relu));
  });
  for (int64_t c = 0; c < l.c; ++c) {
    if (running_mean.defined()) run_mean[c] = bn_running_update(run_mean[c], mean[c], momentum);
    if (running_var.defined())
      run_var[c] = bn_running_update(run_var[c], var[c] * count / (count - 1), momentum);
  }
  write_channels(save_mean, mean, op, "save_mean");
  write_channels(save_invstd, invstd, op, "save_invstd");
  write_channels(running_mean, run_mean, op, "running_mean");
  write_channels(running_var, run_var, op, "running_var");
}

// Eval forward with the same epilogue, from the running statistics.
void forward_eval(Tensor& y, const Tensor& x, const Tensor& residual, bool relu,
                  const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                  const Tensor& running_var, double eps, const char* op) {
  const Layout l = layout_of(x, op);
  ChannelVector invstd = read_channels(running_var, l, op, "running_var");
  for (double& v : invstd) v = bn_invstd(v, eps);
  apply(y, x, residual, relu, l, read_channels(running_mean, l, op, "running_mean"), invstd,
        read_channels_or(gamma, l, 1.0, op, "gamma"), read_channels_or(beta, l, 0.0, op, "beta"),
        op);
}

}  // namespace

void batchnorm_forward_train(Tensor& y, Tensor& save_mean, Tensor& save_invstd,
                             Tensor& running_mean, Tensor& running_var, const Tensor& x,
                             const Tensor& gamma, const Tensor& beta, double momentum, double eps) {
  forward_train(y, save_mean, save_invstd, running_mean, running_var, x, Tensor(), false, gamma,
                beta, momentum, eps, "batchnorm_forward_train");
}

void batchnorm_relu_forward_train(Tensor& y, Tensor& save_mean, Tensor& save_invstd,
                                  Tensor& running_mean, Tensor& running_var, const Tensor& x,
                                  const Tensor& residual, const Tensor& gamma, const Tensor& beta,
                                  double momentum, double eps) {
  forward_train(y, save_mean, save_invstd, running_mean, running_var, x, residual, true, gamma,
                beta, momentum, eps, "batchnorm_relu_forward_train");
}

void batchnorm_forward_eval(Tensor& y, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                            const Tensor& running_mean, const Tensor& running_var, double eps) {
  forward_eval(y, x, Tensor(), false, gamma, beta, running_mean, running_var, eps,
               "batchnorm_forward_eval");
}

void batchnorm_relu_forward_eval(Tensor& y, const Tensor& x, const Tensor& residual,
                                 const Tensor& gamma, const Tensor& beta,
                                 const Tensor& running_mean, const Tensor& running_var,
                                 double eps) {
  forward_eval(y, x, residual, true, gamma, beta, running_mean, running_var, eps,
               "batchnorm_relu_forward_eval");
}

void batchnorm_backward_reduce(Tensor& sum_dy, Tensor& sum_dy_xhat, const Tensor& dy,
                               const Tensor& x, const Tensor& mean, const Tensor& invstd) {
  constexpr const char* op = "batchnorm_backward_reduce";
  const Layout l = layout_of(x, op);
  ChannelVector s, sx;
  backward_reduce(s, sx, dy, x, l, read_channels(mean, l, op, "mean"),
                  read_channels(invstd, l, op, "invstd"), op);
  write_channels(sum_dy, s, op, "sum_dy");
  write_channels(sum_dy_xhat, sx, op, "sum_dy_xhat");
}

void batchnorm_backward_apply(Tensor& dx, const Tensor& dy, const Tensor& x, const Tensor& mean,
                              const Tensor& invstd, const Tensor& gamma, const Tensor& sum_dy,
                              const Tensor& sum_dy_xhat, double count) {
  constexpr const char* op = "batchnorm_backward_apply";
  const Layout l = layout_of(x, op);
  backward_apply(
      dx, dy, x, l, read_channels(mean, l, op, "mean"), read_channels(invstd, l, op, "invstd"),
      read_channels_or(gamma, l, 1.0, op, "gamma"), read_channels(sum_dy, l, op, "sum_dy"),
      read_channels(sum_dy_xhat, l, op, "sum_dy_xhat"), count, op);
}

void batchnorm_relu_backward(Tensor& dx, Tensor& dresidual, Tensor& dgamma, Tensor& dbeta,
                             const Tensor& dy, const Tensor& y, const Tensor& x,
                             const Tensor& gamma, const Tensor& save_mean,
                             const Tensor& save_invstd) {
  constexpr const char* op = "batchnorm_relu_backward";
  const Layout l = layout_of(x, op);
  const ChannelVector mean = read_channels(save_mean, l, op, "save_mean");
  const ChannelVector invstd = read_channels(save_invstd, l, op, "save_invstd");
  const ChannelVector gamma_c = read_channels_or(gamma, l, 1.0, op, "gamma");
  check_like_x(dy, x, op, "dy");
  if (y.defined()) check_like_x(y, x, op, "y");
  if (dx.defined()) check_like_x(dx, x, op, "dx");
  if (dresidual.defined()) check_like_x(dresidual, x, op, "dresidual");
  ChannelVector sum_dy(l.c), sum_dy_xhat(l.c);
  dispatch_float_or_bf16(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    auto data = [](const Tensor& t) { return t.defined() ? t.data<T>() : nullptr; };
    fused_backward_loop(data(dx), data(dresidual), dy.data<T>(), data(y), x.data<T>(), l,
                        mean.data(), invstd.data(), gamma_c.data(), sum_dy.data(),
                        sum_dy_xhat.data());
  });
  write_channels(dgamma, sum_dy_xhat, op, "dgamma");
  write_channels(dbeta, sum_dy, op, "dbeta");
}

void batchnorm_backward(Tensor& dx, Tensor& dgamma, Tensor& dbeta, const Tensor& dy,
                        const Tensor& x, const Tensor& gamma, const Tensor& save_mean,
                        const Tensor& save_invstd) {
  Tensor no_residual;
  batchnorm_relu_backward(dx, no_residual, dgamma, dbeta, dy, Tensor(), x, gamma, save_mean,
                          save_invstd);
}

}  // namespace ringgrad::kernels::cpu

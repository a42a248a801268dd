// Batch normalisation on the CPU, PyTorch semantics. x is viewed as (N, C, HW); every
// per-channel quantity is held in double while it is computed (a few C-sized vectors), and the
// four loops below (channel sums, apply, backward reduce, backward apply) are the only passes
// over the data: the whole forward and backward are compositions of them, so they match the
// split functions SyncBatchNorm uses exactly. Element math: kernels/batchnorm_math.h.
#include <vector>

#include "kernels/batchnorm_math.h"
#include "kernels/cpu/cpu_dispatch.h"
#include "kernels/cpu/cpu_ops.h"

namespace ringgrad::kernels::cpu {

namespace {

using ChannelVector = std::vector<double>;  // (C)

struct Layout {
  int64_t n, c, hw;  // x: (n, c, hw)
  double count() const { return static_cast<double>(n * hw); }  // elements per channel
};

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

// ---- the four passes over the data ----------------------------------------------------------
// Each pass is written once, for one channel (its N planes of HW contiguous values) or one
// plane. The split entry points run a pass over every channel (reductions) or plane
// (elementwise) in parallel; the whole training forward and backward run reduction and
// elementwise pass of a channel back to back in one parallel loop over channels (fused_*
// below), so the channel's planes are still in cache and one fork serves both. The arithmetic
// is the same either way, so the results are bit-identical to the split functions'.

// sum = sum x, sum_sq = sum x^2 over channel c's (n, hw).
template <class T>
void channel_sums_of(const T* x, Layout l, int64_t c, double& sum, double& sum_sq) {
  double s = 0, s2 = 0;
  for (int64_t n = 0; n < l.n; ++n) {
    const T* plane = x + (n * l.c + c) * l.hw;
#pragma omp simd reduction(+ : s, s2)
    for (int64_t i = 0; i < l.hw; ++i) {
      const double v = plane[i];
      s += v;
      s2 += v * v;
    }
  }
  sum = s;
  sum_sq = s2;
}

// y = (x - mean) * scale + beta over one plane.
template <class T>
void apply_plane(T* y, const T* x, int64_t hw, double mean, double scale, double beta) {
  const T m = static_cast<T>(mean), k = static_cast<T>(scale), b = static_cast<T>(beta);
#pragma omp simd
  for (int64_t i = 0; i < hw; ++i) y[i] = bn_normalize(x[i], m, k, b);
}

// sum_dy = sum dy, sum_dy_xmu = sum dy * (x - mean) over channel c's (n, hw).
template <class T>
void backward_reduce_of(const T* dy, const T* x, Layout l, int64_t c, double mean,
                        double& sum_dy, double& sum_dy_xmu) {
  double s = 0, sx = 0;
  for (int64_t n = 0; n < l.n; ++n) {
    const int64_t base = (n * l.c + c) * l.hw;
#pragma omp simd reduction(+ : s, sx)
    for (int64_t i = 0; i < l.hw; ++i) {
      const double g = dy[base + i];
      s += g;
      sx += g * (static_cast<double>(x[base + i]) - mean);
    }
  }
  sum_dy = s;
  sum_dy_xmu = sx;
}

// Per-channel factors of the input gradient (kernels/batchnorm_math.h, bn_input_grad).
struct InputGradFactors {
  double scale, mean_dy, xmu_coeff;
};

InputGradFactors input_grad_factors(double gamma, double invstd, double sum_dy,
                                    double sum_dy_xhat, double count) {
  return {gamma * invstd, sum_dy / count, invstd * sum_dy_xhat / count};
}

// dx = scale * (dy - mean_dy - (x - mean) * xmu_coeff) over one plane.
template <class T>
void backward_apply_plane(T* dx, const T* dy, const T* x, int64_t hw, double mean,
                          const InputGradFactors& f) {
  const T m = static_cast<T>(mean), k = static_cast<T>(f.scale);
  const T mdy = static_cast<T>(f.mean_dy), kx = static_cast<T>(f.xmu_coeff);
#pragma omp simd
  for (int64_t i = 0; i < hw; ++i) dx[i] = bn_input_grad(dy[i], x[i], m, k, mdy, kx);
}

template <class T>
void channel_sums_loop(const T* x, Layout l, double* sum, double* sum_sq) {
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < l.c; ++c) channel_sums_of(x, l, c, sum[c], sum_sq[c]);
}

template <class T>
void apply_loop(T* y, const T* x, Layout l, const double* mean, const double* scale,
                const double* beta) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t n = 0; n < l.n; ++n)
    for (int64_t c = 0; c < l.c; ++c) {
      const int64_t base = (n * l.c + c) * l.hw;
      apply_plane(y + base, x + base, l.hw, mean[c], scale[c], beta[c]);
    }
}

template <class T>
void backward_reduce_loop(const T* dy, const T* x, Layout l, const double* mean, double* sum_dy,
                          double* sum_dy_xmu) {
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < l.c; ++c)
    backward_reduce_of(dy, x, l, c, mean[c], sum_dy[c], sum_dy_xmu[c]);
}

template <class T>
void backward_apply_loop(T* dx, const T* dy, const T* x, Layout l, const double* mean,
                         const InputGradFactors* factors) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t n = 0; n < l.n; ++n)
    for (int64_t c = 0; c < l.c; ++c) {
      const int64_t base = (n * l.c + c) * l.hw;
      backward_apply_plane(dx + base, dy + base, x + base, l.hw, mean[c], factors[c]);
    }
}

// Training forward per channel: sums, batch statistics, then y. Writes mean, invstd and the
// biased variance of every channel.
template <class T>
void fused_forward_train_loop(T* y, const T* x, Layout l, const double* gamma, const double* beta,
                              double eps, double* mean, double* invstd, double* var) {
  const double count = l.count();
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < l.c; ++c) {
    double sum, sum_sq;
    channel_sums_of(x, l, c, sum, sum_sq);
    var[c] = bn_biased_var(sum, sum_sq, count);
    mean[c] = sum / count;
    invstd[c] = bn_invstd(var[c], eps);
    const double scale = invstd[c] * gamma[c];
    for (int64_t n = 0; n < l.n; ++n) {
      const int64_t base = (n * l.c + c) * l.hw;
      apply_plane(y + base, x + base, l.hw, mean[c], scale, beta[c]);
    }
  }
}

// Training backward per channel: sum_dy and sum_dy_xhat, then dx (when dx is not null).
template <class T>
void fused_backward_loop(T* dx, const T* dy, const T* x, Layout l, const double* mean,
                         const double* invstd, const double* gamma, double* sum_dy,
                         double* sum_dy_xhat) {
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < l.c; ++c) {
    double sum_dy_xmu;
    backward_reduce_of(dy, x, l, c, mean[c], sum_dy[c], sum_dy_xmu);
    sum_dy_xhat[c] = sum_dy_xmu * invstd[c];
    if (!dx) continue;
    const InputGradFactors f =
        input_grad_factors(gamma[c], invstd[c], sum_dy[c], sum_dy_xhat[c], l.count());
    for (int64_t n = 0; n < l.n; ++n) {
      const int64_t base = (n * l.c + c) * l.hw;
      backward_apply_plane(dx + base, dy + base, x + base, l.hw, mean[c], f);
    }
  }
}

// ---- compositions on double vectors, shared by the split and the whole entry points ----------

void channel_sums(ChannelVector& sum, ChannelVector& sum_sq, const Tensor& x, Layout l,
                  const char* op) {
  sum.assign(l.c, 0);
  sum_sq.assign(l.c, 0);
  dispatch_float(x.dtype(), op, [&](auto tag) {
    channel_sums_loop(x.data<decltype(tag)>(), l, sum.data(), sum_sq.data());
  });
}

void apply(Tensor& y, const Tensor& x, Layout l, const ChannelVector& mean,
           const ChannelVector& invstd, const ChannelVector& gamma, const ChannelVector& beta,
           const char* op) {
  check_like_x(y, x, op, "y");
  ChannelVector scale(l.c);
  for (int64_t c = 0; c < l.c; ++c) scale[c] = invstd[c] * gamma[c];
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    apply_loop(y.data<T>(), x.data<T>(), l, mean.data(), scale.data(), beta.data());
  });
}

// sum_dy_xhat = invstd * sum dy * (x - mean).
void backward_reduce(ChannelVector& sum_dy, ChannelVector& sum_dy_xhat, const Tensor& dy,
                     const Tensor& x, Layout l, const ChannelVector& mean,
                     const ChannelVector& invstd, const char* op) {
  check_like_x(dy, x, op, "dy");
  sum_dy.assign(l.c, 0);
  sum_dy_xhat.assign(l.c, 0);
  dispatch_float(x.dtype(), op, [&](auto tag) {
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
  dispatch_float(x.dtype(), op, [&](auto tag) {
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
  apply(y, x, l, read_channels(mean, l, op, "mean"), read_channels(invstd, l, op, "invstd"),
        read_channels_or(gamma, l, 1.0, op, "gamma"), read_channels_or(beta, l, 0.0, op, "beta"),
        op);
}

void batchnorm_forward_train(Tensor& y, Tensor& save_mean, Tensor& save_invstd,
                             Tensor& running_mean, Tensor& running_var, const Tensor& x,
                             const Tensor& gamma, const Tensor& beta, double momentum,
                             double eps) {
  constexpr const char* op = "batchnorm_forward_train";
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
  ChannelVector mean(l.c), invstd(l.c), var(l.c);
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    fused_forward_train_loop(y.data<T>(), x.data<T>(), l, g.data(), b.data(), eps, mean.data(),
                             invstd.data(), var.data());
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

void batchnorm_forward_eval(Tensor& y, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                            const Tensor& running_mean, const Tensor& running_var, double eps) {
  constexpr const char* op = "batchnorm_forward_eval";
  const Layout l = layout_of(x, op);
  ChannelVector invstd = read_channels(running_var, l, op, "running_var");
  for (double& v : invstd) v = bn_invstd(v, eps);
  apply(y, x, l, read_channels(running_mean, l, op, "running_mean"), invstd,
        read_channels_or(gamma, l, 1.0, op, "gamma"), read_channels_or(beta, l, 0.0, op, "beta"),
        op);
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
  backward_apply(dx, dy, x, l, read_channels(mean, l, op, "mean"),
                 read_channels(invstd, l, op, "invstd"),
                 read_channels_or(gamma, l, 1.0, op, "gamma"),
                 read_channels(sum_dy, l, op, "sum_dy"),
                 read_channels(sum_dy_xhat, l, op, "sum_dy_xhat"), count, op);
}

void batchnorm_backward(Tensor& dx, Tensor& dgamma, Tensor& dbeta, const Tensor& dy,
                        const Tensor& x, const Tensor& gamma, const Tensor& save_mean,
                        const Tensor& save_invstd) {
  constexpr const char* op = "batchnorm_backward";
  const Layout l = layout_of(x, op);
  const ChannelVector mean = read_channels(save_mean, l, op, "save_mean");
  const ChannelVector invstd = read_channels(save_invstd, l, op, "save_invstd");
  const ChannelVector gamma_c = read_channels_or(gamma, l, 1.0, op, "gamma");
  check_like_x(dy, x, op, "dy");
  if (dx.defined()) check_like_x(dx, x, op, "dx");
  ChannelVector sum_dy(l.c), sum_dy_xhat(l.c);
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    fused_backward_loop(dx.defined() ? dx.data<T>() : nullptr, dy.data<T>(), x.data<T>(), l,
                        mean.data(), invstd.data(), gamma_c.data(), sum_dy.data(),
                        sum_dy_xhat.data());
  });
  write_channels(dgamma, sum_dy_xhat, op, "dgamma");
  write_channels(dbeta, sum_dy, op, "dbeta");
}

}  // namespace ringgrad::kernels::cpu

// Batch normalisation on CUDA (float32 data; per-channel tensors float32 or float64), PyTorch
// semantics, the same compositions as kernels/cpu/batchnorm.cpp. x is viewed as (N, C, HW).
// Every entry point is at most three launches:
//   1. a per-channel reduction (channel_reduce.cuh): sums of x and x^2, or of dy and dy (x - mean)
//   2. a per-channel finalize, one thread per channel in double: statistics, running-stat
//      update, the small per-channel outputs, and the factors of the elementwise pass
//   3. an elementwise pass with the element math of kernels/batchnorm_math.h in float.
#include "kernels/batchnorm_math.h"
#include "kernels/cuda/channel_reduce.cuh"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace ringgrad::kernels::cuda {

namespace {

struct Layout {
  int64_t n, c, hw;
  double count() const { return static_cast<double>(n * hw); }  // elements per channel
};

Layout layout_of(const Tensor& x, const char* op) {
  RG_CHECK(x.defined(), op, ": x is undefined");
  RG_CHECK_GE(x.dim(), 2, op, ": x must be (N, C, ...), got shape ", x.shape().str());
  check_f32(x, op, "x");
  int64_t hw = 1;
  for (int d = 2; d < x.dim(); ++d) hw *= x.size(d);
  return {x.size(0), x.size(1), hw};
}

void check_like_x(const Tensor& t, const Tensor& x, const char* op, const char* name) {
  check_operand(t, x.shape(), DType::f32, op, name);
}

// A per-channel tensor (C) of float32 or float64 as the kernels see it; an undefined tensor
// reads as `fallback` (gamma 1, beta 0) and ignores writes.
struct Channel {
  void* p;
  bool f64;
  double fallback;
  __device__ double get(int64_t c) const {
    if (!p) return fallback;
    return f64 ? static_cast<const double*>(p)[c] : static_cast<const float*>(p)[c];
  }
  __device__ void set(int64_t c, double v) const {
    if (!p) return;
    if (f64)
      static_cast<double*>(p)[c] = v;
    else
      static_cast<float*>(p)[c] = static_cast<float>(v);
  }
};

Channel channel(const Tensor& t, const Layout& l, const char* op, const char* name,
                double fallback = 0, bool optional = true) {
  if (!t.defined()) {
    RG_CHECK(optional, op, ": ", name, " is undefined");
    return {nullptr, false, fallback};
  }
  RG_CHECK(t.shape() == Shape{l.c}, op, ": ", name, " has shape ", t.shape().str(), ", expected (",
           l.c, ")");
  RG_CHECK(t.dtype() == DType::f32 || t.dtype() == DType::f64, op, ": ", name,
           " must be float32 or float64, got ", dtype_name(t.dtype()));
  return {t.raw_data(), t.dtype() == DType::f64, fallback};
}

Channel required(const Tensor& t, const Layout& l, const char* op, const char* name) {
  return channel(t, l, op, name, 0, false);
}

// ---- 1. reductions ----------------------------------------------------------------------------

struct SumTerms {  // a = sum x, b = sum x^2
  const float* x;
  __device__ void operator()(int64_t at, int64_t, double& a, double& b) const {
    const double v = x[at];
    a += v;
    b += v * v;
  }
};

struct GradTerms {  // a = sum dy, b = sum dy (x - mean)
  const float* dy;
  const float* x;
  Channel mean;
  __device__ void operator()(int64_t at, int64_t c, double& a, double& b) const {
    const double g = dy[at];
    a += g;
    b += g * (static_cast<double>(x[at]) - mean.get(c));
  }
};

// ---- 2. per-channel finalize ------------------------------------------------------------------
// Factors of the elementwise passes, per channel, in float:
//   forward  {mean, scale = invstd * gamma, beta, unused}
//   backward {mean, scale = gamma * invstd, mean_dy, xmu_coeff}  (bn_input_grad)

// out_a = sums a; out_b = sums b * b_factor (invstd turns sum dy (x - mean) into sum dy xhat).
__global__ void write_sums_kernel(const double* sums, int64_t C, Channel out_a, Channel out_b,
                                  Channel b_factor) {
  for (int64_t c = global_thread(); c < C; c += grid_threads()) {
    out_a.set(c, sums[c]);
    out_b.set(c, sums[C + c] * b_factor.get(c));
  }
}

__global__ void train_stats_kernel(float4* factors, const double* sums, int64_t C, double count,
                                   double eps, double momentum, Channel gamma, Channel beta,
                                   Channel save_mean, Channel save_invstd, Channel running_mean,
                                   Channel running_var) {
  for (int64_t c = global_thread(); c < C; c += grid_threads()) {
    const double var = bn_biased_var(sums[c], sums[C + c], count);
    const double mean = sums[c] / count;
    const double invstd = bn_invstd(var, eps);
    save_mean.set(c, mean);
    save_invstd.set(c, invstd);
    running_mean.set(c, bn_running_update(running_mean.get(c), mean, momentum));
    running_var.set(c, bn_running_update(running_var.get(c), var * count / (count - 1), momentum));
    factors[c] = make_float4(static_cast<float>(mean), static_cast<float>(invstd * gamma.get(c)),
                             static_cast<float>(beta.get(c)), 0.0f);
  }
}

// From given statistics; `spread` is invstd, or the variance when from_var (eval forward).
__global__ void affine_factors_kernel(float4* factors, int64_t C, Channel mean, Channel spread,
                                      bool from_var, double eps, Channel gamma, Channel beta) {
  for (int64_t c = global_thread(); c < C; c += grid_threads()) {
    const double invstd = from_var ? bn_invstd(spread.get(c), eps) : spread.get(c);
    factors[c] =
        make_float4(static_cast<float>(mean.get(c)), static_cast<float>(invstd * gamma.get(c)),
                    static_cast<float>(beta.get(c)), 0.0f);
  }
}

__device__ float4 grad_factors(double mean, double invstd, double gamma, double sum_dy,
                               double sum_dy_xhat, double count) {
  return make_float4(static_cast<float>(mean), static_cast<float>(gamma * invstd),
                     static_cast<float>(sum_dy / count),
                     static_cast<float>(invstd * sum_dy_xhat / count));
}

__global__ void grad_factors_kernel(float4* factors, int64_t C, Channel mean, Channel invstd,
                                    Channel gamma, Channel sum_dy, Channel sum_dy_xhat,
                                    double count) {
  for (int64_t c = global_thread(); c < C; c += grid_threads())
    factors[c] = grad_factors(mean.get(c), invstd.get(c), gamma.get(c), sum_dy.get(c),
                              sum_dy_xhat.get(c), count);
}

// The whole backward's finalize: dgamma = sum dy xhat, dbeta = sum dy, and dx's factors.
__global__ void backward_stats_kernel(float4* factors, const double* sums, int64_t C, double count,
                                      Channel mean, Channel invstd, Channel gamma, Channel dgamma,
                                      Channel dbeta) {
  for (int64_t c = global_thread(); c < C; c += grid_threads()) {
    const double sum_dy = sums[c], sum_dy_xhat = sums[C + c] * invstd.get(c);
    dgamma.set(c, sum_dy_xhat);
    dbeta.set(c, sum_dy);
    factors[c] = grad_factors(mean.get(c), invstd.get(c), gamma.get(c), sum_dy, sum_dy_xhat, count);
  }
}

// ---- 3. elementwise passes --------------------------------------------------------------------

__global__ void apply_kernel(float* y, const float* x, const float4* factors, int64_t C, int64_t HW,
                             int64_t total) {
  for (int64_t i = global_thread(); i < total; i += grid_threads()) {
    const float4 f = factors[i / HW % C];
    y[i] = bn_normalize(x[i], f.x, f.y, f.z);
  }
}

__global__ void input_grad_kernel(float* dx, const float* dy, const float* x, const float4* factors,
                                  int64_t C, int64_t HW, int64_t total) {
  for (int64_t i = global_thread(); i < total; i += grid_threads()) {
    const float4 f = factors[i / HW % C];
    dx[i] = bn_input_grad(dy[i], x[i], f.x, f.y, f.z, f.w);
  }
}

// ---- launches -----------------------------------------------------------------------------

Tensor reduction_buffer(const Tensor& x, const Layout& l) {
  return Tensor::empty({2 * l.c}, DType::f64, x.device());
}

Tensor factor_buffer(const Tensor& x, const Layout& l) {
  return Tensor::empty({4 * l.c}, DType::f32, x.device());  // one float4 per channel
}

float4* factors_of(const Tensor& buffer) { return reinterpret_cast<float4*>(buffer.data<float>()); }

void launch_apply(Tensor& y, const Tensor& x, const Layout& l, const Tensor& factors,
                  cudaStream_t stream) {
  apply_kernel<<<blocks_for(x.numel()), kThreads, 0, stream>>>(
      y.data<float>(), x.data<float>(), factors_of(factors), l.c, l.hw, x.numel());
  CUDA_CHECK_LAUNCH("batchnorm apply_kernel");
}

// y from given per-channel statistics: batchnorm_apply's mean and invstd, or the eval forward's
// running mean and variance (from_var, with eps).
void launch_affine(Tensor& y, const Tensor& x, const char* op, const Tensor& mean,
                   const char* mean_name, const Tensor& spread, const char* spread_name,
                   bool from_var, double eps, const Tensor& gamma, const Tensor& beta) {
  const Layout l = layout_of(x, op);
  check_like_x(y, x, op, "y");
  Launch launch(x);
  Tensor factors = factor_buffer(x, l);
  affine_factors_kernel<<<blocks_for(l.c), kThreads, 0, launch.stream>>>(
      factors_of(factors), l.c, required(mean, l, op, mean_name),
      required(spread, l, op, spread_name), from_var, eps, channel(gamma, l, op, "gamma", 1.0),
      channel(beta, l, op, "beta", 0.0));
  CUDA_CHECK_LAUNCH("batchnorm affine_factors_kernel");
  launch_apply(y, x, l, factors, launch.stream);
}

void launch_input_grad(Tensor& dx, const Tensor& dy, const Tensor& x, const Layout& l,
                       const Tensor& factors, cudaStream_t stream) {
  input_grad_kernel<<<blocks_for(x.numel()), kThreads, 0, stream>>>(
      dx.data<float>(), dy.data<float>(), x.data<float>(), factors_of(factors), l.c, l.hw,
      x.numel());
  CUDA_CHECK_LAUNCH("batchnorm input_grad_kernel");
}

}  // namespace

void batchnorm_channel_sums(Tensor& sum, Tensor& sum_sq, const Tensor& x) {
  constexpr const char* op = "batchnorm_channel_sums";
  const Layout l = layout_of(x, op);
  const Channel out_sum = channel(sum, l, op, "sum"), out_sq = channel(sum_sq, l, op, "sum_sq");
  Launch launch(x);
  Tensor sums = reduction_buffer(x, l);
  channel_reduce(sums.data<double>(), SumTerms{x.data<float>()}, l.n, l.c, l.hw, launch.stream, op);
  write_sums_kernel<<<blocks_for(l.c), kThreads, 0, launch.stream>>>(
      sums.data<double>(), l.c, out_sum, out_sq, Channel{nullptr, false, 1.0});
  CUDA_CHECK_LAUNCH("batchnorm write_sums_kernel");
}

void batchnorm_apply(Tensor& y, const Tensor& x, const Tensor& mean, const Tensor& invstd,
                     const Tensor& gamma, const Tensor& beta) {
  launch_affine(y, x, "batchnorm_apply", mean, "mean", invstd, "invstd", /*from_var=*/false, 0.0,
                gamma, beta);
}

void batchnorm_forward_train(Tensor& y, Tensor& save_mean, Tensor& save_invstd,
                             Tensor& running_mean, Tensor& running_var, const Tensor& x,
                             const Tensor& gamma, const Tensor& beta, double momentum, double eps) {
  constexpr const char* op = "batchnorm_forward_train";
  const Layout l = layout_of(x, op);
  RG_CHECK_GT(l.count(), 1, op, ": training needs more than one value per channel, got x of shape ",
              x.shape().str());
  check_like_x(y, x, op, "y");
  Launch launch(x);
  Tensor sums = reduction_buffer(x, l);
  Tensor factors = factor_buffer(x, l);
  channel_reduce(sums.data<double>(), SumTerms{x.data<float>()}, l.n, l.c, l.hw, launch.stream, op);
  train_stats_kernel<<<blocks_for(l.c), kThreads, 0, launch.stream>>>(
      factors_of(factors), sums.data<double>(), l.c, l.count(), eps, momentum,
      channel(gamma, l, op, "gamma", 1.0), channel(beta, l, op, "beta", 0.0),
      channel(save_mean, l, op, "save_mean"), channel(save_invstd, l, op, "save_invstd"),
      channel(running_mean, l, op, "running_mean"), channel(running_var, l, op, "running_var"));
  CUDA_CHECK_LAUNCH("batchnorm train_stats_kernel");
  launch_apply(y, x, l, factors, launch.stream);
}

void batchnorm_forward_eval(Tensor& y, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                            const Tensor& running_mean, const Tensor& running_var, double eps) {
  launch_affine(y, x, "batchnorm_forward_eval", running_mean, "running_mean", running_var,
                "running_var", /*from_var=*/true, eps, gamma, beta);
}

void batchnorm_backward_reduce(Tensor& sum_dy, Tensor& sum_dy_xhat, const Tensor& dy,
                               const Tensor& x, const Tensor& mean, const Tensor& invstd) {
  constexpr const char* op = "batchnorm_backward_reduce";
  const Layout l = layout_of(x, op);
  check_like_x(dy, x, op, "dy");
  const Channel m = required(mean, l, op, "mean"), s = required(invstd, l, op, "invstd");
  const Channel out_dy = channel(sum_dy, l, op, "sum_dy");
  const Channel out_xhat = channel(sum_dy_xhat, l, op, "sum_dy_xhat");
  Launch launch(x);
  Tensor sums = reduction_buffer(x, l);
  channel_reduce(sums.data<double>(), GradTerms{dy.data<float>(), x.data<float>(), m}, l.n, l.c,
                 l.hw, launch.stream, op);
  write_sums_kernel<<<blocks_for(l.c), kThreads, 0, launch.stream>>>(sums.data<double>(), l.c,
                                                                     out_dy, out_xhat, s);
  CUDA_CHECK_LAUNCH("batchnorm write_sums_kernel");
}

void batchnorm_backward_apply(Tensor& dx, const Tensor& dy, const Tensor& x, const Tensor& mean,
                              const Tensor& invstd, const Tensor& gamma, const Tensor& sum_dy,
                              const Tensor& sum_dy_xhat, double count) {
  constexpr const char* op = "batchnorm_backward_apply";
  const Layout l = layout_of(x, op);
  check_like_x(dx, x, op, "dx");
  check_like_x(dy, x, op, "dy");
  RG_CHECK_GT(count, 0, op, ": count (elements per channel over all ranks) must be positive");
  Launch launch(x);
  Tensor factors = factor_buffer(x, l);
  grad_factors_kernel<<<blocks_for(l.c), kThreads, 0, launch.stream>>>(
      factors_of(factors), l.c, required(mean, l, op, "mean"), required(invstd, l, op, "invstd"),
      channel(gamma, l, op, "gamma", 1.0), required(sum_dy, l, op, "sum_dy"),
      required(sum_dy_xhat, l, op, "sum_dy_xhat"), count);
  CUDA_CHECK_LAUNCH("batchnorm grad_factors_kernel");
  launch_input_grad(dx, dy, x, l, factors, launch.stream);
}

void batchnorm_backward(Tensor& dx, Tensor& dgamma, Tensor& dbeta, const Tensor& dy,
                        const Tensor& x, const Tensor& gamma, const Tensor& save_mean,
                        const Tensor& save_invstd) {
  constexpr const char* op = "batchnorm_backward";
  const Layout l = layout_of(x, op);
  check_like_x(dy, x, op, "dy");
  if (dx.defined()) check_like_x(dx, x, op, "dx");
  const Channel mean = required(save_mean, l, op, "save_mean");
  const Channel invstd = required(save_invstd, l, op, "save_invstd");
  Launch launch(x);
  Tensor sums = reduction_buffer(x, l);
  Tensor factors = factor_buffer(x, l);
  channel_reduce(sums.data<double>(), GradTerms{dy.data<float>(), x.data<float>(), mean}, l.n, l.c,
                 l.hw, launch.stream, op);
  backward_stats_kernel<<<blocks_for(l.c), kThreads, 0, launch.stream>>>(
      factors_of(factors), sums.data<double>(), l.c, l.count(), mean, invstd,
      channel(gamma, l, op, "gamma", 1.0), channel(dgamma, l, op, "dgamma"),
      channel(dbeta, l, op, "dbeta"));
  CUDA_CHECK_LAUNCH("batchnorm backward_stats_kernel");
  if (dx.defined()) launch_input_grad(dx, dy, x, l, factors, launch.stream);
}

}  // namespace ringgrad::kernels::cuda

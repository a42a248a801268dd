// The passes of the CPU batch norm over the data (kernels/cpu/batchnorm_passes.h), with the
// element math of kernels/batchnorm_math.h.
#include "kernels/cpu/batchnorm_passes.h"

#include "kernels/batchnorm_math.h"

namespace ringgrad::kernels::cpu {

// ---- the four passes over the data ----------------------------------------------------------
// Each pass is written once, for one channel (its N planes of HW contiguous values) or one
// plane. The split entry points run a pass over every channel (reductions) or plane
// (elementwise) in parallel; the whole training forward and backward run reduction and
// elementwise pass of a channel back to back in one parallel loop over channels (fused_*
// below), so the channel's planes are still in cache and one fork serves both. The arithmetic
// is the same either way, so the results are bit-identical to the split functions'.

namespace {

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
void backward_reduce_of(const T* dy, const T* x, Layout l, int64_t c, double mean, double& sum_dy,
                        double& sum_dy_xmu) {
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

// dx = scale * (dy - mean_dy - (x - mean) * xmu_coeff) over one plane.
template <class T>
void backward_apply_plane(T* dx, const T* dy, const T* x, int64_t hw, double mean,
                          const InputGradFactors& f) {
  const T m = static_cast<T>(mean), k = static_cast<T>(f.scale);
  const T mdy = static_cast<T>(f.mean_dy), kx = static_cast<T>(f.xmu_coeff);
#pragma omp simd
  for (int64_t i = 0; i < hw; ++i) dx[i] = bn_input_grad(dy[i], x[i], m, k, mdy, kx);
}

}  // namespace

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

template void channel_sums_loop<float>(const float*, Layout, double*, double*);
template void apply_loop<float>(float*, const float*, Layout, const double*, const double*,
                                const double*);
template void backward_reduce_loop<float>(const float*, const float*, Layout, const double*,
                                          double*, double*);
template void backward_apply_loop<float>(float*, const float*, const float*, Layout, const double*,
                                         const InputGradFactors*);
template void fused_forward_train_loop<float>(float*, const float*, Layout, const double*,
                                              const double*, double, double*, double*, double*);
template void fused_backward_loop<float>(float*, const float*, const float*, Layout, const double*,
                                         const double*, const double*, double*, double*);
template void channel_sums_loop<double>(const double*, Layout, double*, double*);
template void apply_loop<double>(double*, const double*, Layout, const double*, const double*,
                                 const double*);
template void backward_reduce_loop<double>(const double*, const double*, Layout, const double*,
                                           double*, double*);
template void backward_apply_loop<double>(double*, const double*, const double*, Layout,
                                          const double*, const InputGradFactors*);
template void fused_forward_train_loop<double>(double*, const double*, Layout, const double*,
                                               const double*, double, double*, double*, double*);
template void fused_backward_loop<double>(double*, const double*, const double*, Layout,
                                          const double*, const double*, const double*, double*,
                                          double*);

}  // namespace ringgrad::kernels::cpu

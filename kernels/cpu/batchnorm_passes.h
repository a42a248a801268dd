// The passes of the CPU batch norm over the data, private to kernels/cpu/batchnorm*.cpp:
// x as (n, c, hw), per-channel values in double, T float or double. batchnorm.cpp composes every
// entry point from these loops, which are the only code that reads or writes the data.
#pragma once
#include <cstdint>

namespace ringgrad::kernels::cpu {

struct Layout {
  int64_t n, c, hw;                                             // x: (n, c, hw)
  double count() const { return static_cast<double>(n * hw); }  // elements per channel
};

// Per-channel factors of the input gradient (kernels/batchnorm_math.h, bn_input_grad).
struct InputGradFactors {
  double scale, mean_dy, xmu_coeff;
};

inline InputGradFactors input_grad_factors(double gamma, double invstd, double sum_dy,
                                           double sum_dy_xhat, double count) {
  return {gamma * invstd, sum_dy / count, invstd * sum_dy_xhat / count};
}

// sum[c] = sum x, sum_sq[c] = sum x^2 over channel c.
template <class T>
void channel_sums_loop(const T* x, Layout l, double* sum, double* sum_sq);

// y = (x - mean[c]) * scale[c] + beta[c].
template <class T>
void apply_loop(T* y, const T* x, Layout l, const double* mean, const double* scale,
                const double* beta);

// sum_dy[c] = sum dy, sum_dy_xmu[c] = sum dy * (x - mean[c]) over channel c.
template <class T>
void backward_reduce_loop(const T* dy, const T* x, Layout l, const double* mean, double* sum_dy,
                          double* sum_dy_xmu);

// dx = factors[c].scale * (dy - factors[c].mean_dy - (x - mean[c]) * factors[c].xmu_coeff).
template <class T>
void backward_apply_loop(T* dx, const T* dy, const T* x, Layout l, const double* mean,
                         const InputGradFactors* factors);

// Training forward: channel sums, batch statistics and y, channel by channel. Writes the mean,
// invstd and biased variance of every channel.
template <class T>
void fused_forward_train_loop(T* y, const T* x, Layout l, const double* gamma, const double* beta,
                              double eps, double* mean, double* invstd, double* var);

// Training backward: sum_dy and sum_dy_xhat, then dx (unless dx is null), channel by channel.
template <class T>
void fused_backward_loop(T* dx, const T* dy, const T* x, Layout l, const double* mean,
                         const double* invstd, const double* gamma, double* sum_dy,
                         double* sum_dy_xhat);

}  // namespace ringgrad::kernels::cpu

// Batch-norm element and per-channel math shared by kernels/cpu/batchnorm.cpp and a future CUDA
// kernel (RG_HD: __host__ __device__ under nvcc). x is normalised per channel c over count
// elements: xhat = (x - mean) * invstd, y = xhat * gamma + beta.
#pragma once
#include <cmath>

#include "core/host_device.h"

namespace ringgrad::kernels {

// From per-channel sum and sum of squares: var = E[x^2] - mean^2 (biased), clamped at 0 against
// rounding (a NaN stays NaN). Accumulate the sums in double so the subtraction keeps its
// precision.
template <class T>
RG_HD T bn_biased_var(T sum, T sum_sq, T count) {
  const T mean = sum / count;
  const T var = sum_sq / count - mean * mean;
  return var < T(0) ? T(0) : var;
}

template <class T>
RG_HD T bn_invstd(T var, T eps) {
  return T(1) / std::sqrt(var + eps);
}

// running = (1 - momentum) * running + momentum * batch; PyTorch feeds the unbiased variance
// biased * count / (count - 1) into running_var.
template <class T>
RG_HD T bn_running_update(T running, T batch, T momentum) {
  return (T(1) - momentum) * running + momentum * batch;
}

// y = (x - mean) * scale + beta with scale = invstd * gamma.
template <class T>
RG_HD T bn_normalize(T x, T mean, T scale, T beta) {
  return (x - mean) * scale + beta;
}

// dx = gamma * invstd * (dy - sum_dy / count - xhat * sum_dy_xhat / count), written with
// scale = gamma * invstd, mean_dy = sum_dy / count and xmu_coeff = invstd * sum_dy_xhat / count
// so that xhat * sum_dy_xhat / count = (x - mean) * xmu_coeff.
template <class T>
RG_HD T bn_input_grad(T dy, T x, T mean, T scale, T mean_dy, T xmu_coeff) {
  return scale * (dy - mean_dy - (x - mean) * xmu_coeff);
}

}  // namespace ringgrad::kernels

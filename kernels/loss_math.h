// Softmax cross-entropy math shared by kernels/cpu/loss.cpp and a future CUDA kernel (RG_HD:
// __host__ __device__ under nvcc).
#pragma once
#include <cmath>
#include <cstdint>

#include "core/host_device.h"

namespace ringgrad::kernels {

// log sum_j exp(row[j]) = m + log sum_j exp(row[j] - m) with m = max_j row[j]: every exponent
// is <= 0, so nothing overflows and the largest term is exactly 1. Sums in Acc.
template <class Acc, class T>
RG_HD Acc row_log_sum_exp(const T* row, int64_t n) {
  T m = row[0];
  for (int64_t j = 1; j < n; ++j) m = row[j] > m ? row[j] : m;
  Acc sum = 0;
  for (int64_t j = 0; j < n; ++j) sum += std::exp(static_cast<Acc>(row[j] - m));
  return static_cast<Acc>(m) + std::log(sum);
}

// The class a row of logits predicts: the index of its first largest logit, or -1 when the
// row holds a NaN, so a NaN prediction is never counted correct.
template <class T>
RG_HD int64_t row_prediction(const T* row, int64_t n) {
  int64_t best = 0;
  for (int64_t j = 0; j < n; ++j) {
    if (row[j] != row[j]) return -1;
    if (row[j] > row[best]) best = j;
  }
  return best;
}

// d loss / d logit = (softmax - onehot) * scale, softmax = exp(log_prob), scale = dloss / N.
template <class T>
RG_HD T cross_entropy_grad(T log_prob, bool is_label, T scale) {
  return (std::exp(log_prob) - (is_label ? T(1) : T(0))) * scale;
}

}  // namespace ringgrad::kernels

// The passes of the CPU batch norm over the data, private to kernels/cpu/batchnorm*.cpp: x as
// (n, c, hw), T float, double or BFloat16 (bf16 values are computed on in f32), per-channel
// values in double. batchnorm.cpp composes every entry point from these loops, which are the
// only code that reads or writes the data.
//
// Every pass works on blocks of whole channels. In each of the n rows (images) a block is one
// contiguous run of channels x hw values, so the loops are long and unit-stride whatever hw is
// (a ResNet-18 on 28x28 images ends with hw = 4 and 1, where a loop per plane would run one to
// four iterations). Each value's sums are kept per position of the run and folded per channel
// at the end; per-channel coefficients are spread over the run once per block. On AVX-512, f32
// and bf16 planes of 16 values or more go plane by plane instead (batchnorm_planes.h). The fused
// passes split the images between the threads, as the convolutions do, and each thread runs the
// same blocks over its own images, in the order memory is in (in_image_runs).
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

// What the fused forward does after normalising, y = relu(bn(x) + residual) with either part
// optional, and so what its backward undoes: the gradient passes where y > 0 and reaches the
// residual unchanged. A ResNet block ends in bn + add + relu, its first half in bn + relu.
template <class T>
struct Epilogue {
  const T* residual = nullptr;  // like x, or null
  bool relu = false;
};

// sum[c] = sum x, sum_sq[c] = sum x^2 over channel c.
template <class T>
void channel_sums_loop(const T* x, Layout l, double* sum, double* sum_sq);

// y = epilogue((x - mean[c]) * scale[c] + beta[c]).
template <class T>
void apply_loop(T* y, const T* x, Layout l, const double* mean, const double* scale,
                const double* beta, Epilogue<T> epilogue);

// sum_dy[c] = sum dy, sum_dy_xmu[c] = sum dy * (x - mean[c]) over channel c.
template <class T>
void backward_reduce_loop(const T* dy, const T* x, Layout l, const double* mean, double* sum_dy,
                          double* sum_dy_xmu);

// dx = factors[c].scale * (dy - factors[c].mean_dy - (x - mean[c]) * factors[c].xmu_coeff).
template <class T>
void backward_apply_loop(T* dx, const T* dy, const T* x, Layout l, const double* mean,
                         const InputGradFactors* factors);

// Training forward: channel sums, batch statistics and y = epilogue(bn(x)), block by block
// (the block is still in cache for its second pass). Writes the mean, invstd and biased
// variance of every channel.
template <class T>
void fused_forward_train_loop(T* y, const T* x, Layout l, const double* gamma, const double* beta,
                              double eps, double* mean, double* invstd, double* var,
                              Epilogue<T> epilogue);

// Training backward, block by block: the gradient g of bn's output (dy, and where y is given,
// dy where y > 0: the relu of the fused forward), written to dresidual when that is not null;
// sum_dy and sum_dy_xhat of g; then dx (when dx is not null).
template <class T>
void fused_backward_loop(T* dx, T* dresidual, const T* dy, const T* y, const T* x, Layout l,
                         const double* mean, const double* invstd, const double* gamma,
                         double* sum_dy, double* sum_dy_xhat);

}  // namespace ringgrad::kernels::cpu

// The batch-norm passes over one plane (the hw values of one image's channel) with AVX-512 or AVX2,
// for kernels/cpu/batchnorm_passes.cpp; Note [Batch-norm planes]. T is float or BFloat16. Private
// to kernels/cpu.
#pragma once
#include <cstdint>
#include <type_traits>

#include "core/half.h"

namespace ringgrad::kernels::cpu {

// The dtypes that have plane kernels: f32 and bf16 (not f64).
template <class T>
constexpr bool kHasPlanes = std::is_same_v<T, float> || std::is_same_v<T, BFloat16>;

// Whether they run: f32 on CPUs with AVX2 (AVX-512 where the CPU has it), bf16 on CPUs with
// AVX512-BF16 (whose bf16 GEMM the rest of a bf16 step runs on), for planes of 16 values or more
// (fewer leave most of each vector empty; the passes' runs across channels serve those).
template <class T>
bool planes_apply(int64_t hw);

// sum += the plane's sum, sum_sq += its sum of squares.
template <class T>
void plane_sums(const T* x, int64_t hw, double& sum, double& sum_sq);

// y = (x - mean) * scale + beta, plus residual when not null, then relu when asked.
template <class T>
void plane_apply(T* y, const T* x, const T* residual, bool relu, int64_t hw, float mean,
                 float scale, float beta);

// g = dy, or where y is not null dy where y > 0 (relu_grad), written to dresidual when that is
// not null; sum_dy += sum g, sum_dy_xmu += sum g * (x - mean).
template <class T>
void plane_backward_sums(const T* dy, const T* y, const T* x, T* dresidual, int64_t hw, double mean,
                         double& sum_dy, double& sum_dy_xmu);

// dx = scale * (g - mean_dy - (x - mean) * xmu_coeff), g as in plane_backward_sums.
template <class T>
void plane_backward_apply(T* dx, const T* dy, const T* y, const T* x, int64_t hw, float mean,
                          float scale, float mean_dy, float xmu_coeff);

}  // namespace ringgrad::kernels::cpu

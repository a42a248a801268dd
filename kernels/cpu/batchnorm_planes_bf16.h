// The bf16 batch-norm passes over one plane (the hw values of one image's channel) with AVX-512,
// for kernels/cpu/batchnorm_passes.cpp; Note [bf16 batch-norm planes]. Private to kernels/cpu.
#pragma once
#include <cstdint>

#include "core/half.h"

namespace ringgrad::kernels::cpu {

// Whether they run: on CPUs with AVX512-BF16 (and so AVX-512BW), for planes of 16 values or more
// (fewer leave most of each vector empty; the passes' runs across channels serve those).
bool bf16_planes_apply(int64_t hw);

// sum += the plane's sum, sum_sq += its sum of squares.
void plane_sums(const BFloat16* x, int64_t hw, double& sum, double& sum_sq);

// y = (x - mean) * scale + beta, plus residual when not null, then relu when asked.
void plane_apply(BFloat16* y, const BFloat16* x, const BFloat16* residual, bool relu, int64_t hw,
                 float mean, float scale, float beta);

// g = dy, or where y is not null dy where y > 0 (relu_grad), written to dresidual when that is
// not null; sum_dy += sum g, sum_dy_xmu += sum g * (x - mean).
void plane_backward_sums(const BFloat16* dy, const BFloat16* y, const BFloat16* x,
                         BFloat16* dresidual, int64_t hw, double mean, double& sum_dy,
                         double& sum_dy_xmu);

// dx = scale * (g - mean_dy - (x - mean) * xmu_coeff), g as in plane_backward_sums.
void plane_backward_apply(BFloat16* dx, const BFloat16* dy, const BFloat16* y, const BFloat16* x,
                          int64_t hw, float mean, float scale, float mean_dy, float xmu_coeff);

}  // namespace ringgrad::kernels::cpu

// The CPU kernels behind kernels/ops.h (OpenMP, GEMM through OpenBLAS or our AVX-512 sgemm),
// one .cpp file per op family, each a cpu:: function matching the op of the same name
// (kernels/backend_ops.h); kernels/ops.cpp calls them for CPU tensors. f32 and f64 everywhere
// (f64 is what the gradient checks use); batch norm, relu, add and pooling take bf16 too (f32
// arithmetic), and so does conv2d where the CPU has a bf16 GEMM; conv2d elsewhere, linear and
// count_correct take f16 and bf16 through f32 copies (half_via_f32.h). Plus the textbook
// convolution the fast paths are tested on.
#pragma once
#include "core/tensor.h"
#include "kernels/ops.h"

namespace ringgrad::kernels::cpu {

#include "kernels/backend_ops.h"

// conv2d_reference.cpp: the convolution straight from its definition, seven plain loops, f32
// and f64, same contract as conv2d_forward / conv2d_backward. Slow; what readers start from and
// what tests compare conv2d (im2col + GEMM, tap crop, flipped backward) against.
void conv2d_reference_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias,
                              const Conv2dParams& p);
void conv2d_reference_backward(Tensor& dx, Tensor& dw, Tensor& dbias, const Tensor& dy,
                               const Tensor& x, const Tensor& w, const Conv2dParams& p);

}  // namespace ringgrad::kernels::cpu

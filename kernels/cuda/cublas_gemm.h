// Row-major GEMM on the compute stream through cuBLAS, shared by conv2d.cu and linear.cu.
// Private to kernels/cuda.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace ringgrad::kernels::cuda {

enum class Op : bool { none = false, transpose = true };

// C (m x n) = alpha op(A) (m x k) op(B) (k x n) + beta C, row-major with leading dimensions,
// all three of `dtype` (float32, float16 or bfloat16), accumulated in float32 (no TF32, so
// float32 results match the CPU's). Queued on the compute stream of `device`, which must be the
// current device.
void gemm(int device, DType dtype, Op op_a, Op op_b, int64_t m, int64_t n, int64_t k, float alpha,
          const void* a, int64_t lda, const void* b, int64_t ldb, float beta, void* c, int64_t ldc);

}  // namespace ringgrad::kernels::cuda

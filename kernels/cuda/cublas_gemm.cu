// cuBLAS behind kernels/cuda/cublas_gemm.h: one handle per device, bound to the compute
// stream. cuBLAS is column-major, and a row-major matrix read column-major is its transpose, so
// row-major C = op(A) op(B) is computed as column-major C^T = op(B)^T op(A)^T: the same call
// with A and B (and m and n) swapped.
#include <cublas_v2.h>

#include <array>
#include <climits>
#include <mutex>

#include "kernels/cuda/cublas_gemm.h"
#include "kernels/cuda/cuda_common.cuh"

namespace ringgrad::kernels::cuda {

namespace {

constexpr int kMaxDevices = 64;

// Never destroyed, for the reason the compute streams are not (core/cuda_memory.cpp): tensors
// and kernels may still be in use while static destructors run.
cublasHandle_t handle_for(int device) {
  static std::array<std::once_flag, kMaxDevices> once;
  static std::array<cublasHandle_t, kMaxDevices> handles{};
  RG_CHECK(device >= 0 && device < kMaxDevices, "CUDA device ", device, " out of range");
  std::call_once(once[device], [device] {
    CudaDeviceGuard guard(device);
    CUBLAS_CHECK(cublasCreate(&handles[device]));
    CUBLAS_CHECK(
        cublasSetStream(handles[device], static_cast<cudaStream_t>(cuda_compute_stream(device))));
    // The default (CUBLAS_DEFAULT_MATH) keeps float32 products in full float32 precision.
    CUBLAS_CHECK(cublasSetMathMode(handles[device], CUBLAS_DEFAULT_MATH));
  });
  return handles[device];
}

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::f32: return CUDA_R_32F;
    case DType::f16: return CUDA_R_16F;
    case DType::bf16: return CUDA_R_16BF;
    default: break;
  }
  RG_THROW(InvalidArgument, "cuBLAS GEMM: unsupported dtype ", dtype_name(t),
           " (float32, float16, bfloat16)");
}

cublasOperation_t cublas_op(Op op) { return op == Op::transpose ? CUBLAS_OP_T : CUBLAS_OP_N; }

int as_int(int64_t v, const char* what) {
  RG_CHECK(v >= 0 && v <= INT_MAX, "cuBLAS GEMM: ", what, " = ", v, " does not fit in int");
  return static_cast<int>(v);
}

}  // namespace

void gemm(int device, DType dtype, Op op_a, Op op_b, int64_t m, int64_t n, int64_t k, float alpha,
          const void* a, int64_t lda, const void* b, int64_t ldb, float beta, void* c,
          int64_t ldc) {
  if (m == 0 || n == 0) return;
  const cudaDataType_t t = cuda_type(dtype);
  CUBLAS_CHECK(cublasGemmEx(handle_for(device), cublas_op(op_b), cublas_op(op_a), as_int(n, "n"),
                            as_int(m, "m"), as_int(k, "k"), &alpha, b, t, as_int(ldb, "ldb"), a, t,
                            as_int(lda, "lda"), &beta, c, t, as_int(ldc, "ldc"), CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT));
}

}  // namespace ringgrad::kernels::cuda

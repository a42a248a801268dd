// CUDA_CHECK, CUBLAS_CHECK, CUDNN_CHECK and NCCL_CHECK: wrap every CUDA runtime, cuBLAS, cuDNN
// and NCCL call and turn a failure into ringgrad::Error "[file:line] expr failed: <library
// message>". Usable from .cu and .cpp files; CUBLAS_CHECK / CUDNN_CHECK / NCCL_CHECK need
// <cublas_v2.h> / <cudnn.h> / <nccl.h> included first.
// Only for CUDA builds (HAVE_CUDA); the CPU-only build never includes this header.
#pragma once
#include <cuda_runtime.h>

#include "core/error.h"

// A CUDA runtime status that is not cudaSuccess throws "<what...> failed: <name> (<text>)".
#define RG_CUDA_STATUS_CHECK(status, ...)                                                         \
  do {                                                                                            \
    const cudaError_t rg_cuda_err_ = (status);                                                    \
    if (rg_cuda_err_ != cudaSuccess)                                                              \
      RG_THROW(::ringgrad::Error, __VA_ARGS__, " failed: ", cudaGetErrorName(rg_cuda_err_), " (", \
               cudaGetErrorString(rg_cuda_err_), ")");                                            \
  } while (0)

#define CUDA_CHECK(expr) RG_CUDA_STATUS_CHECK((expr), #expr)

// After a kernel launch: launch-configuration errors are reported here, execution errors at
// the next synchronising call (which CUDA_CHECK reports).
#define CUDA_CHECK_LAUNCH(kernel_name) \
  RG_CUDA_STATUS_CHECK(cudaGetLastError(), "launch of ", kernel_name)

#define CUBLAS_CHECK(expr)                                                                      \
  do {                                                                                          \
    const cublasStatus_t rg_cublas_st_ = (expr);                                                \
    if (rg_cublas_st_ != CUBLAS_STATUS_SUCCESS)                                                 \
      RG_THROW(::ringgrad::Error, #expr, " failed: ", cublasGetStatusName(rg_cublas_st_), " (", \
               cublasGetStatusString(rg_cublas_st_), ")");                                      \
  } while (0)

#define CUDNN_CHECK(expr)                                                                 \
  do {                                                                                    \
    const cudnnStatus_t rg_cudnn_st_ = (expr);                                            \
    if (rg_cudnn_st_ != CUDNN_STATUS_SUCCESS)                                             \
      RG_THROW(::ringgrad::Error, #expr, " failed: ", cudnnGetErrorString(rg_cudnn_st_)); \
  } while (0)

// ncclGetLastError adds the detail NCCL keeps for the most recent failure (which peer, which
// socket); it takes the communicator, nullptr is allowed. ncclInProgress is how a non-blocking
// communicator says "not done yet", not a failure.
#define NCCL_CHECK(expr)                                                                      \
  do {                                                                                        \
    const ncclResult_t rg_nccl_res_ = (expr);                                                 \
    if (rg_nccl_res_ != ncclSuccess && rg_nccl_res_ != ncclInProgress)                        \
      RG_THROW(::ringgrad::Error, #expr, " failed: ", ncclGetErrorString(rg_nccl_res_), " (", \
               ncclGetLastError(nullptr), ")");                                               \
  } while (0)

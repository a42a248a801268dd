// Checked CUDA runtime and NCCL calls for comm/nccl: a failed call throws ringgrad::Error
// "[file:line] expr failed: <library message>". Local to the nccl backend (core's
// CUDA_CHECK/NCCL_CHECK are a separate piece of work); include only where CUDA/NCCL are built.
#pragma once
#include <cuda_runtime.h>
#include <nccl.h>

#include "core/error.h"

#define RG_CUDA_CALL(expr)                                                                 \
  do {                                                                                     \
    const cudaError_t rg_cuda_err_ = (expr);                                               \
    if (rg_cuda_err_ != cudaSuccess)                                                       \
      RG_THROW(::ringgrad::Error, #expr, " failed: ", cudaGetErrorString(rg_cuda_err_));   \
  } while (0)

// ncclInProgress is not an error: it is how a non-blocking communicator says "queued".
#define RG_NCCL_CALL(expr)                                                                 \
  do {                                                                                     \
    const ncclResult_t rg_nccl_res_ = (expr);                                              \
    if (rg_nccl_res_ != ncclSuccess && rg_nccl_res_ != ncclInProgress)                     \
      RG_THROW(::ringgrad::Error, #expr, " failed: ", ncclGetErrorString(rg_nccl_res_),   \
               " (", ncclGetLastError(nullptr), ")");                                      \
  } while (0)

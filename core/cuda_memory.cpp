// CUDA runtime services for core. Plain cudaMalloc/cudaFree for now; the caching allocator
// replaces the bodies of cuda_allocate/cuda_release without changing callers.
#include "core/cuda_memory.h"

#include "core/error.h"
#include "ringgrad/config.h"

#ifdef HAVE_CUDA
#include <cuda_runtime.h>
#define CUDA_CHECK(expr)                                                              \
  do {                                                                                \
    cudaError_t rg_err_ = (expr);                                                     \
    if (rg_err_ != cudaSuccess)                                                       \
      RG_THROW(::ringgrad::Error, #expr, " failed: ", cudaGetErrorString(rg_err_));   \
  } while (0)
#endif

namespace ringgrad {

#ifdef HAVE_CUDA

std::string cuda_unavailable_reason() {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) return cudaGetErrorString(err);
  if (n == 0) return "no CUDA device found";
  return "";
}

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky error so later calls report their own
    return 0;
  }
  return n;
}

void* cuda_allocate(size_t bytes, int device) {
  CUDA_CHECK(cudaSetDevice(device));
  void* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, bytes == 0 ? 1 : bytes));
  return p;
}

void cuda_release(void* ptr, size_t, int) {
  if (ptr) cudaFree(ptr);  // no throw from a destructor path
}

void cuda_copy(void* dst, const void* src, size_t bytes, CopyKind kind) {
  cudaMemcpyKind k = kind == CopyKind::host_to_device   ? cudaMemcpyHostToDevice
                     : kind == CopyKind::device_to_host ? cudaMemcpyDeviceToHost
                                                        : cudaMemcpyDeviceToDevice;
  CUDA_CHECK(cudaMemcpy(dst, src, bytes, k));
}

void cuda_memset_zero(void* ptr, size_t bytes) { CUDA_CHECK(cudaMemset(ptr, 0, bytes)); }

#else

namespace {
[[noreturn]] void no_cuda() {
  RG_THROW(Error, "this ringgrad build has no CUDA (configure with -DRINGGRAD_ENABLE_CUDA=ON)");
}
}  // namespace

std::string cuda_unavailable_reason() { return "ringgrad was built without CUDA"; }
int cuda_device_count() { return 0; }
void* cuda_allocate(size_t, int) { no_cuda(); }
void cuda_release(void*, size_t, int) {}
void cuda_copy(void*, const void*, size_t, CopyKind) { no_cuda(); }
void cuda_memset_zero(void*, size_t) { no_cuda(); }

#endif

}  // namespace ringgrad

// The few CUDA runtime services core needs (allocation, copies, device count), behind plain C++
// declarations so core's headers never include CUDA. In a build without CUDA every call except
// cuda_device_count() throws an Error saying the build has no CUDA.
#pragma once
#include <cstddef>
#include <string>

namespace ringgrad {

int cuda_device_count();            // 0 when there is no CUDA build, driver or device
std::string cuda_unavailable_reason();  // "" when a device is usable, else why not
void* cuda_allocate(size_t bytes, int device);
void cuda_release(void* ptr, size_t bytes, int device);
enum class CopyKind { host_to_device, device_to_host, device_to_device };
void cuda_copy(void* dst, const void* src, size_t bytes, CopyKind kind);  // synchronous
void cuda_memset_zero(void* ptr, size_t bytes);

}  // namespace ringgrad

// The CUDA runtime services core needs, behind plain C++ declarations so core's headers never
// include CUDA: device selection, device memory from the caching allocator
// (core/cuda_caching_allocator.h), the process's compute stream, pinned host buffers and
// copies. In a build without CUDA every call except the queries throws an Error saying so.
#pragma once
#include <cstddef>
#include <string>

#include "core/cuda_caching_allocator.h"

namespace ringgrad {

int cuda_device_count();                // 0 when there is no CUDA build, driver or device
std::string cuda_unavailable_reason();  // "" when a device is usable, else why not

// Under a launcher (torchrun, ringgrad-run) worker LOCAL_RANK uses device LOCAL_RANK, as
// torch.cuda.set_device(local_rank); LOCAL_RANK unset means device 0. Makes it the current
// device and returns its index; throws when LOCAL_RANK names a device that does not exist.
int cuda_select_device_from_env();

// The compute stream of `device` (a cudaStream_t): one per device and process, created on first
// use, never destroyed. Every kernel, cuBLAS call, copy and memset of ringgrad runs on it, so
// work is ordered without synchronisation. It is a blocking stream: work on the legacy default
// stream (a plain cudaMemcpy elsewhere) still waits for it.
void* cuda_compute_stream(int device);

// Device memory for `device`, from that device's caching allocator, for use on its compute
// stream. RINGGRAD_CUDA_CACHE=0 (read once) turns the cache off: every release is a cudaFree.
void* cuda_allocate(size_t bytes, int device);
// Never throws (it runs in Storage's destructor); a pointer the allocator does not know is
// logged as an error.
void cuda_release(void* ptr, size_t bytes, int device) noexcept;
CachingAllocatorStats cuda_allocator_stats(int device);
void cuda_empty_cache(int device);  // cached blocks back to cudaFree

// Makes `device` current for its scope and restores the previous device after: the current
// device is per-thread state a library call must not change behind its caller's back.
class CudaDeviceGuard {
 public:
  explicit CudaDeviceGuard(int device);
  ~CudaDeviceGuard();
  CudaDeviceGuard(const CudaDeviceGuard&) = delete;
  CudaDeviceGuard& operator=(const CudaDeviceGuard&) = delete;

 private:
  int previous_ = -1;  // -1: nothing to restore
};

// A CUDA event of one device (no timing), for ordering one stream after another without the
// host waiting: record() on the producing stream, then wait_on() makes a consuming stream's
// later work start after everything queued before the record. Streams are cudaStream_t as
// void*. Neither copyable nor movable; the event is destroyed with it.
class CudaEvent {
 public:
  explicit CudaEvent(int device);
  ~CudaEvent();
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  void record(void* stream);
  void wait_on(void* stream) const;  // cudaStreamWaitEvent(stream, this)
  int device() const { return device_; }

 private:
  int device_;
  void* event_ = nullptr;  // cudaEvent_t
};

enum class CopyKind { host_to_device, device_to_host, device_to_device };
// On the compute stream of `device`; returns when the copy is done (host memory may be reused).
void cuda_copy(void* dst, const void* src, size_t bytes, CopyKind kind, int device);
void cuda_memset_zero(void* ptr, size_t bytes, int device);  // queued on the compute stream

// Page-locked host memory (cudaMallocHost): copies from and to it run at full PCIe speed and
// can be asynchronous. For the staging buffers of transfers. Move-only; freed on destruction.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(size_t bytes);
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& other) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace ringgrad

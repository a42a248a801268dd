// CUDA runtime services for core (see core/cuda_memory.h): per device one compute stream and
// one CudaCachingAllocator over cudaMalloc/cudaFree, created on first use.
#include "core/cuda_memory.h"

#include "core/env.h"
#include "core/error.h"
#include "core/logging.h"
#include "ringgrad/config.h"

#ifdef HAVE_CUDA
#include <array>
#include <memory>
#include <mutex>

#include "core/cuda_check.h"
#endif

namespace ringgrad {

#ifdef HAVE_CUDA

namespace {

constexpr int kMaxDevices = 64;

struct DeviceState {
  cudaStream_t stream = nullptr;
  std::unique_ptr<CudaCachingAllocator> allocator;
};

BackingAllocator cuda_backing(int device) {
  BackingAllocator b;
  b.allocate = [device](size_t bytes) -> void* {
    CudaDeviceGuard guard(device);
    void* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, bytes);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // clear it: the cache frees its blocks and retries
      return nullptr;
    }
    CUDA_CHECK(err);
    return p;
  };
  b.release = [](void* p) { (void)cudaFree(p); };  // at exit the context may be gone already
  return b;
}

// The states are never destroyed: tensors held by static objects are released after static
// destructors have run, and by then the CUDA context may be torn down. The driver reclaims the
// memory at exit.
DeviceState& device_state(int device) {
  static std::array<std::once_flag, kMaxDevices> once;
  static auto* states = new std::array<DeviceState, kMaxDevices>();
  static const int visible = cuda_device_count();  // fixed for the process's lifetime
  RG_CHECK(device >= 0 && device < kMaxDevices && device < visible, "CUDA device ", device,
           " does not exist (", visible, " visible)");
  std::call_once(once[device], [device] {
    DeviceState& s = (*states)[device];
    CudaDeviceGuard guard(device);
    CUDA_CHECK(cudaStreamCreate(&s.stream));
    s.allocator = std::make_unique<CudaCachingAllocator>(cuda_backing(device),
                                                         env_bool("RINGGRAD_CUDA_CACHE", true));
  });
  return (*states)[device];
}

}  // namespace

std::string cuda_unavailable_reason() {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return cudaGetErrorString(err);
  }
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

int cuda_select_device_from_env() {
  const long long local_rank = env_int("LOCAL_RANK", 0);
  const int count = cuda_device_count();
  if (count == 0) RG_THROW(Error, "no CUDA device: ", cuda_unavailable_reason());
  if (local_rank < 0 || local_rank >= count)
    RG_THROW(Error, "LOCAL_RANK=", local_rank, " but this host shows ", count,
             " CUDA device(s) (CUDA_VISIBLE_DEVICES=", env_str("CUDA_VISIBLE_DEVICES", "<unset>"),
             "); start at most ", count, " CUDA process(es) per node");
  const int device = static_cast<int>(local_rank);
  CUDA_CHECK(cudaSetDevice(device));
  return device;
}

CudaDeviceGuard::CudaDeviceGuard(int device) {
  int current = 0;
  CUDA_CHECK(cudaGetDevice(&current));
  if (current == device) return;
  CUDA_CHECK(cudaSetDevice(device));
  previous_ = current;
}

CudaDeviceGuard::~CudaDeviceGuard() {
  if (previous_ >= 0) (void)cudaSetDevice(previous_);
}

void* cuda_compute_stream(int device) { return device_state(device).stream; }

void* cuda_allocate(size_t bytes, int device) {
  DeviceState& s = device_state(device);
  return s.allocator->allocate(bytes, s.stream);
}

void cuda_release(void* ptr, size_t, int device) noexcept {
  try {
    device_state(device).allocator->release(ptr);
  } catch (const std::exception& e) {
    log_error("cuda_release: ", e.what());
  }
}

CachingAllocatorStats cuda_allocator_stats(int device) {
  return device_state(device).allocator->stats();
}

void cuda_empty_cache(int device) { device_state(device).allocator->empty_cache(); }

void cuda_copy(void* dst, const void* src, size_t bytes, CopyKind kind, int device) {
  const cudaMemcpyKind k = kind == CopyKind::host_to_device   ? cudaMemcpyHostToDevice
                           : kind == CopyKind::device_to_host ? cudaMemcpyDeviceToHost
                                                              : cudaMemcpyDeviceToDevice;
  cudaStream_t stream = device_state(device).stream;
  CudaDeviceGuard guard(device);
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, k, stream));
  // Host memory may be pageable and is the caller's again on return; device work queued
  // earlier on the stream (the kernel that produced src) has run by now too.
  CUDA_CHECK(cudaStreamSynchronize(stream));
}

void cuda_memset_zero(void* ptr, size_t bytes, int device) {
  cudaStream_t stream = device_state(device).stream;
  CudaDeviceGuard guard(device);
  CUDA_CHECK(cudaMemsetAsync(ptr, 0, bytes, stream));
}

PinnedBuffer::PinnedBuffer(size_t bytes) : bytes_(bytes) {
  CUDA_CHECK(cudaMallocHost(&data_, bytes == 0 ? 1 : bytes));
}

CudaEvent::CudaEvent(int device) : device_(device) {
  CudaDeviceGuard guard(device);  // an event belongs to the device current at creation
  cudaEvent_t e = nullptr;
  CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  event_ = e;
}

CudaEvent::~CudaEvent() {
  if (event_) (void)cudaEventDestroy(static_cast<cudaEvent_t>(event_));
}

void CudaEvent::record(void* stream) {
  CudaDeviceGuard guard(device_);
  CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event_), static_cast<cudaStream_t>(stream)));
}

void CudaEvent::wait_on(void* stream) const {
  CUDA_CHECK(
      cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), static_cast<cudaEvent_t>(event_), 0));
}

PinnedBuffer::~PinnedBuffer() {
  if (data_) (void)cudaFreeHost(data_);
}

#else

namespace {
[[noreturn]] void no_cuda() {
  RG_THROW(Error, "this ringgrad build has no CUDA (configure with -DRINGGRAD_ENABLE_CUDA=ON)");
}
}  // namespace

std::string cuda_unavailable_reason() { return "ringgrad was built without CUDA"; }
int cuda_device_count() { return 0; }
int cuda_select_device_from_env() { no_cuda(); }
CudaDeviceGuard::CudaDeviceGuard(int) { no_cuda(); }
CudaDeviceGuard::~CudaDeviceGuard() = default;
void* cuda_compute_stream(int) { no_cuda(); }
void* cuda_allocate(size_t, int) { no_cuda(); }
void cuda_release(void*, size_t, int) noexcept {}
CachingAllocatorStats cuda_allocator_stats(int) { no_cuda(); }
void cuda_empty_cache(int) { no_cuda(); }
void cuda_copy(void*, const void*, size_t, CopyKind, int) { no_cuda(); }
void cuda_memset_zero(void*, size_t, int) { no_cuda(); }
PinnedBuffer::PinnedBuffer(size_t) { no_cuda(); }
PinnedBuffer::~PinnedBuffer() = default;
CudaEvent::CudaEvent(int) : device_(-1) { no_cuda(); }
CudaEvent::~CudaEvent() = default;
void CudaEvent::record(void*) { no_cuda(); }
void CudaEvent::wait_on(void*) const { no_cuda(); }

#endif

PinnedBuffer::PinnedBuffer(PinnedBuffer&& other) noexcept
    : data_(other.data_), bytes_(other.bytes_) {
  other.data_ = nullptr;
  other.bytes_ = 0;
}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    PinnedBuffer old(std::move(*this));  // frees what this held
    data_ = other.data_;
    bytes_ = other.bytes_;
    other.data_ = nullptr;
    other.bytes_ = 0;
  }
  return *this;
}

}  // namespace ringgrad

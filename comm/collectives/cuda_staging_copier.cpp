// CudaStagingCopier: cudaMemcpy2DAsync between a device buffer and pinned slots, ordered by
// events as StagingCopier's contract asks.
#include "comm/collectives/cuda_staging_copier.h"

#include <algorithm>

#include "core/cuda_memory.h"
#include "core/error.h"
#include "ringgrad/config.h"

#ifdef HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace ringgrad::comm::collectives {

#ifdef HAVE_CUDA

namespace {

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess)
    RG_THROW(Error, "ring staging: ", what, " failed: ", cudaGetErrorString(err));
}

class CudaStagingCopier : public StagingCopier {
 public:
  explicit CudaStagingCopier(int device) : device_(device) {
    check(cudaSetDevice(device_), "cudaSetDevice");
    check(cudaStreamCreate(&to_host_stream_), "cudaStreamCreate");
    check(cudaStreamCreate(&to_device_stream_), "cudaStreamCreate");
    compute_ready_ = std::make_unique<CudaEvent>(device_);
    for (int s = 0; s < kSlots; ++s) {
      check(cudaEventCreateWithFlags(&in_done_[s], cudaEventDisableTiming), "cudaEventCreate");
      check(cudaEventCreateWithFlags(&out_done_[s], cudaEventDisableTiming), "cudaEventCreate");
    }
  }

  ~CudaStagingCopier() override {
    cudaSetDevice(device_);
    cudaStreamSynchronize(to_host_stream_);
    cudaStreamSynchronize(to_device_stream_);
    for (int s = 0; s < kSlots; ++s) {
      cudaEventDestroy(in_done_[s]);
      cudaEventDestroy(out_done_[s]);
      if (slots_[s]) cudaFreeHost(slots_[s]);
    }
    cudaStreamDestroy(to_host_stream_);
    cudaStreamDestroy(to_device_stream_);
  }

  void reserve(size_t bytes) override {
    check(cudaSetDevice(device_), "cudaSetDevice");
    if (bytes <= capacity_) return;
    for (int s = 0; s < kSlots; ++s) {
      if (slots_[s]) check(cudaFreeHost(slots_[s]), "cudaFreeHost");
      slots_[s] = nullptr;
      void* p = nullptr;
      check(cudaHostAlloc(&p, bytes, cudaHostAllocDefault), "cudaHostAlloc (pinned staging slot)");
      slots_[s] = static_cast<unsigned char*>(p);
    }
    capacity_ = bytes;
  }

  unsigned char* slot(int index) override { return slots_[index]; }

  // Note [nccl stream ordering] (comm/nccl/nccl_comm.cpp): each copy first waits for the work
  // queued so far on the compute stream, which wrote the input (to_host) and may still read
  // the output (to_device). Recorded per chunk on the worker thread, so it may also wait for
  // kernels queued after the collective was issued: later than needed, never too early.
  void after_compute(cudaStream_t stream) {
    compute_ready_->record(cuda_compute_stream(device_));
    compute_ready_->wait_on(stream);
  }

  void to_host(int slot, const void* device, const StagedBlock& b) override {
    after_compute(to_host_stream_);
    check(cudaStreamWaitEvent(to_host_stream_, out_done_[slot], 0), "cudaStreamWaitEvent");
    if (b.rows > 0 && b.width > 0)
      check(cudaMemcpy2DAsync(slots_[slot] + b.host_offset, std::max(b.host_pitch, b.width),
                              static_cast<const unsigned char*>(device) + b.device_offset,
                              std::max(b.device_pitch, b.width), b.width, b.rows,
                              cudaMemcpyDeviceToHost, to_host_stream_),
            "cudaMemcpy2DAsync device->host");
    check(cudaEventRecord(in_done_[slot], to_host_stream_), "cudaEventRecord");
  }

  void to_device(int slot, void* device, const StagedBlock& b) override {
    after_compute(to_device_stream_);
    if (b.rows > 0 && b.width > 0)
      check(cudaMemcpy2DAsync(static_cast<unsigned char*>(device) + b.device_offset,
                              std::max(b.device_pitch, b.width), slots_[slot] + b.host_offset,
                              std::max(b.host_pitch, b.width), b.width, b.rows,
                              cudaMemcpyHostToDevice, to_device_stream_),
            "cudaMemcpy2DAsync host->device");
    check(cudaEventRecord(out_done_[slot], to_device_stream_), "cudaEventRecord");
  }

  void wait_to_host(int slot) override {
    check(cudaEventSynchronize(in_done_[slot]), "cudaEventSynchronize");
  }
  void wait_to_device() override {
    check(cudaStreamSynchronize(to_device_stream_), "cudaStreamSynchronize");
  }

 private:
  int device_;
  cudaStream_t to_host_stream_ = nullptr, to_device_stream_ = nullptr;
  std::unique_ptr<CudaEvent> compute_ready_;
  cudaEvent_t in_done_[kSlots] = {}, out_done_[kSlots] = {};
  unsigned char* slots_[kSlots] = {};
  size_t capacity_ = 0;
};

}  // namespace

std::unique_ptr<StagingCopier> make_cuda_staging_copier(int device) {
  return std::make_unique<CudaStagingCopier>(device);
}

#else

std::unique_ptr<StagingCopier> make_cuda_staging_copier(int) {
  RG_THROW(Error, "ring staging: this ringgrad build has no CUDA");
}

#endif

}  // namespace ringgrad::comm::collectives

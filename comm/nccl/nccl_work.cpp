// NcclWork: event polling with a deadline, abort on timeout or asynchronous error.
#include "comm/nccl/nccl_work.h"

#include <nccl.h>

#include <thread>

#include "core/cuda_check.h"

namespace ringgrad::comm {

namespace {
// Spin briefly (small collectives finish in microseconds), then back off to a sleep that
// keeps a long wait cheap without adding much latency to its end.
constexpr auto kSpin = std::chrono::microseconds(50);
constexpr auto kMaxSleep = std::chrono::microseconds(500);
}  // namespace

NcclWork::NcclWork(std::string description, std::shared_ptr<NcclComm> comm,
                   Clock::time_point deadline, std::vector<Tensor> tensors)
    : Work(std::move(description)),
      comm_(std::move(comm)),
      issued_(Clock::now()),
      deadline_(deadline),
      tensors_(std::move(tensors)) {
  // An event belongs to the device current at creation; it must be the stream's.
  CUDA_CHECK(cudaSetDevice(comm_->device()));
  CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
}

NcclWork::~NcclWork() {
  if (event_) cudaEventDestroy(event_);
}

bool NcclWork::is_completed() const { return cudaEventQuery(event_) == cudaSuccess; }

void NcclWork::wait(Milliseconds timeout) {
  const auto start = Clock::now();
  const auto limit =
      timeout == Milliseconds::max() || start + timeout > deadline_ ? deadline_ : start + timeout;
  auto sleep = std::chrono::microseconds(1);
  for (;;) {
    const cudaError_t state = cudaEventQuery(event_);
    if (state ==
        cudaSuccess) {  // Note [nccl stream ordering]: results are read on the compute stream
      CUDA_CHECK(cudaStreamWaitEvent(
          static_cast<cudaStream_t>(cuda_compute_stream(comm_->device())), event_, 0));
      return;
    }
    if (state != cudaErrorNotReady) {
      const std::string why = str_cat(description(), " failed on ", comm_->label(), ": CUDA error ",
                                      cudaGetErrorString(state));
      comm_->abort(why);
      RG_THROW(Error, "nccl backend: ", why, "; aborted the communicator");
    }
    if (auto failure = comm_->failure())
      RG_THROW(Error, "nccl backend: ", description(), " failed on ", comm_->label(), ": ",
               *failure);
    const auto now = Clock::now();
    if (now >= limit) {
      // The time it was allowed (the caller's timeout or what was left of the deadline).
      const auto waited = std::chrono::duration_cast<Milliseconds>(limit - start);
      const auto since_issue = std::chrono::duration_cast<Milliseconds>(now - issued_);
      const std::string why =
          str_cat(description(), " on ", comm_->label(), " not finished after ",
                  format_duration(waited), " of waiting (", format_duration(since_issue),
                  " since it was issued): a rank has not called it or has failed");
      comm_->abort(why);
      RG_THROW(TimeoutError, "nccl backend: ", why,
               "; aborted the communicator, so the group refuses all further work");
    }
    if (now - start > kSpin) {
      std::this_thread::sleep_for(sleep);
      sleep = std::min(sleep * 2, std::chrono::duration_cast<std::chrono::microseconds>(kMaxSleep));
    }
  }
}

}  // namespace ringgrad::comm

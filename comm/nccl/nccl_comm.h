// NcclComm: one NCCL communicator and the CUDA stream its operations run on (RAII). Shared by
// the nccl process group and its Work objects, so a Work that times out can abort the
// communicator every other call then refuses. Thread-safe: one mutex orders issuing,
// error polling and abort, since a communicator's calls are not safe from several threads.
#pragma once
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "comm/transport/transport.h"
#include "core/cuda_memory.h"

namespace ringgrad::comm {

class NcclComm {
 public:
  // Non-blocking init, polled until every rank joined or `deadline`: on a timeout or an
  // error it aborts and throws (TimeoutError / Error) naming `label` ("rank 0 of 2, ...").
  NcclComm(const ncclUniqueId& id, int rank, int size, int device, Clock::time_point deadline,
           std::string label);
  // Finalizes (flushing issued work) for up to `teardown` and destroys; aborts instead when
  // finalizing does not finish, so a destructor never hangs on a dead peer.
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  int device() const { return device_; }
  const std::string& label() const { return label_; }
  void set_teardown_timeout(std::chrono::milliseconds t) { teardown_ = t; }

  // Runs `call(comm, stream)` (an NCCL enqueue) and, if the communicator reports it still in
  // progress, polls until it is queued. `after(stream)` then runs under the same lock (the
  // caller records its completion event there). Throws, after aborting, on an error or when
  // `deadline` passes; throws at once if the communicator was aborted before.
  template <class Call, class After>
  void enqueue(const std::string& operation, Clock::time_point deadline, Call&& call,
               After&& after) {
    std::lock_guard<std::mutex> lock(mu_);
    check_usable(operation);
    select_device();
    // Note [nccl stream ordering]: the inputs were written on the compute stream.
    inputs_ready_->record(cuda_compute_stream(device_));
    inputs_ready_->wait_on(stream_);
    settle(call(comm_, stream_), operation, deadline);
    after(stream_);
  }

  // The reason the communicator is unusable, or nullopt while it is healthy. Polls NCCL's
  // asynchronous error (a peer that failed, a network error) and aborts on one.
  std::optional<std::string> failure();
  // Aborts once (later calls keep the first reason): NCCL kernels on every rank return, and
  // every later operation on this communicator throws `reason`.
  void abort(const std::string& reason);

 private:
  void check_usable(const std::string& operation) const;
  void select_device() const;
  void settle(ncclResult_t result, const std::string& operation, Clock::time_point deadline);
  void abort_locked(const std::string& reason);

  int device_;
  std::string label_;
  std::chrono::milliseconds teardown_{30'000};
  std::mutex mu_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<CudaEvent> inputs_ready_;  // recorded on the compute stream at each enqueue
  std::optional<std::string> aborted_;
};

}  // namespace ringgrad::comm

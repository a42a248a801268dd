// NcclWork: the Work of one NCCL operation. The group records a CUDA event on its stream
// right after the operation; waiting polls that event and the communicator's asynchronous
// error. Blocking: wait() returns once the GPU finished the operation, so the host may read
// or reuse the tensors afterwards.
// Unlike the ring backend's Work, running out of time aborts the communicator (no rank can
// then hang in NCCL) and the group refuses all later work: a timeout here is fatal.
#pragma once
#include <memory>
#include <vector>

#include "comm/nccl/nccl_comm.h"
#include "comm/process_group/work.h"
#include "core/tensor.h"

namespace ringgrad::comm {

class NcclWork : public Work {
 public:
  // `deadline`: the operation's own (issue time + its timeout); `tensors` stay alive until
  // this Work is destroyed, so their memory is not reused while NCCL may still touch it.
  NcclWork(std::string description, std::shared_ptr<NcclComm> comm, Clock::time_point deadline,
           std::vector<Tensor> tensors);
  ~NcclWork() override;

  cudaEvent_t event() const { return event_; }
  bool is_completed() const override;
  // Waits until the event completed, up to min(timeout, the operation's deadline). On an
  // asynchronous NCCL error or when the time runs out: aborts and throws (TimeoutError names
  // the operation, the rank and how long it waited).
  void wait(Milliseconds timeout) override;

 private:
  std::shared_ptr<NcclComm> comm_;
  Clock::time_point issued_, deadline_;
  std::vector<Tensor> tensors_;
  cudaEvent_t event_ = nullptr;
};

}  // namespace ringgrad::comm

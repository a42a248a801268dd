// RinggradWork: the c10d::Work PyTorch holds for one collective of ringgrad's process group.
// Completion is ringgrad's Work; this adds what PyTorch expects on top: errors as
// DistBackendError (Python's torch.distributed.DistBackendError, a RuntimeError), result()
// tensors, an optional finishing step (copying a gathered flat buffer out to a tensor list),
// and getFuture(), which DDP's reducer and comm hooks chain on. A future is completed by the
// backend's FutureCompleter thread, never by ringgrad's comm thread, so Python callbacks on it
// (which take the GIL) cannot stall the next bucket's all-reduce; one whose collective is
// already done (run inline by the group) is completed at once, by getFuture()'s caller.
#pragma once
#include <ATen/core/ivalue.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "comm/process_group/work.h"

namespace ringgrad::torch_plugin {

class FutureCompleter;

class RinggradWork : public c10d::Work {
 public:
  // `finish` (may be empty) runs once, after the collective succeeded and before anyone sees
  // it complete.
  RinggradWork(comm::WorkPtr work, int rank, c10d::OpType type, std::vector<at::Tensor> outputs,
               const std::shared_ptr<FutureCompleter>& completer,
               std::function<void()> finish = {});

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  std::vector<at::Tensor> result() override;
  bool wait(std::chrono::milliseconds timeout) override;  // 0: until the collective ends
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

  // FutureCompleter's thread: waits for the collective, then completes the future.
  void complete_future();

 private:
  // Waits for the collective (at most `timeout`, 0: its own deadline) and records the outcome
  // once; rethrows a wait timeout, which leaves the collective running.
  void settle(std::chrono::milliseconds timeout);

  comm::WorkPtr work_;
  std::vector<at::Tensor> outputs_;
  std::weak_ptr<FutureCompleter> completer_;  // the backend's; gone once it is destroyed
  std::function<void()> finish_;
  mutable std::mutex mu_;  // guards settled_, error_ and future_
  bool settled_ = false;
  std::exception_ptr error_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// One thread per backend that completes futures in the order they were asked for (the order
// the group runs its collectives in, so it never waits behind a later one).
class FutureCompleter {
 public:
  FutureCompleter();
  ~FutureCompleter();  // completes what is queued, then joins
  void add(c10::intrusive_ptr<RinggradWork> work);

 private:
  void loop();
  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<c10::intrusive_ptr<RinggradWork>> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace ringgrad::torch_plugin

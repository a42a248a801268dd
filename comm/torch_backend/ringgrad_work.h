// RinggradWork: the c10d::Work PyTorch holds for one collective of ringgrad's process group.
// Completion is ringgrad's Work; this adds what PyTorch expects on top: errors as
// DistBackendError (Python's torch.distributed.DistBackendError, a RuntimeError), result()
// tensors, an optional finishing step (copying a gathered flat buffer out to a tensor list),
// and getFuture(), which DDP's reducer and comm hooks chain on. A future is completed by the
// backend's FutureCompleter thread, never by ringgrad's comm thread, so Python callbacks on it
// (which take the GIL) cannot stall the next bucket's all-reduce; one whose collective is
// already done is completed at once, by getFuture()'s caller.
// WorkHooks: the completion and abort hooks PyTorch's flight recorder registers, so that its
// trace tells a finished collective (with its duration) from a hung one.
#pragma once
#include <ATen/core/ivalue.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <torch/csrc/distributed/c10d/Hooks.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <utility>
#include <vector>

#include "comm/process_group/work.h"

namespace ringgrad::torch_backend {

class FutureCompleter;

// The hooks a backend's Works report to: completion once per successful collective, with the
// time from issue to completion; abort before a failed one's error reaches its caller. PyTorch
// registers them (its flight recorder does, unless TORCH_FR_BUFFER_SIZE=0); with none
// registered, reporting costs one atomic load. Thread-safe. A hook runs with no lock of ours
// held: PyTorch unregisters while holding its own lock, which its hooks take too.
class WorkHooks {
 public:
  void add_completion(int64_t id, c10d::CompletionHook hook);
  void remove_completion(int64_t id);
  void add_abort(int64_t id, c10d::AbortHook hook);
  void remove_abort(int64_t id);
  bool any() const { return any_.load(std::memory_order_acquire); }
  void completed(uint64_t key, std::optional<float> duration_ms);
  void aborted();

 private:
  struct Table {
    std::vector<std::pair<int64_t, c10d::CompletionHook>> completion;
    std::vector<std::pair<int64_t, c10d::AbortHook>> abort;
  };
  std::shared_ptr<const Table> table() const;
  template <class Change>
  void change(Change&& f);  // copies the table, applies f, publishes the copy

  std::atomic<bool> any_{false};
  mutable std::mutex mu_;  // guards table_ (the pointer; a published table never changes)
  std::shared_ptr<const Table> table_ = std::make_shared<Table>();
};

class RinggradWork : public c10d::Work {
 public:
  using Clock = std::chrono::steady_clock;
  // `finish` (may be empty) runs once, after the collective succeeded and before anyone sees
  // it complete. `issued`: when the collective was handed to the group, if it was timed.
  RinggradWork(comm::WorkPtr work, std::optional<Clock::time_point> issued, int rank,
               c10d::OpType type, std::vector<at::Tensor> outputs,
               const std::shared_ptr<FutureCompleter>& completer,
               const std::shared_ptr<WorkHooks>& hooks, std::function<void()> finish = {});

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  std::vector<at::Tensor> result() override;
  bool wait(std::chrono::milliseconds timeout) override;  // 0: until the collective ends
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  // Milliseconds from issue to completion (to now, while it runs), if it was timed (as it is
  // while hooks are registered); otherwise c10d::Work's, which throws. The flight recorder asks.
  float getDuration() const override;
  // For a recv (from any source): the rank the message came from.
  int sourceRank() const override;

  // Right after construction: with hooks registered, reports a collective already done at
  // once, and hands any other to the completer thread to report.
  void watch();

  // Once, on FutureCompleter's thread (or the issuing one, for a collective already done):
  // waits for the collective, reports it to the hooks and completes the future if one was
  // asked for by then (getFuture() completes a later one itself).
  void conclude();

 private:
  // Waits for the collective (at most `timeout`, 0: its own deadline; an untimed wait with
  // `run_here` may run it on this thread, see comm::Work::wait) and records the outcome once;
  // rethrows a wait timeout, which leaves the collective running.
  void settle(std::chrono::milliseconds timeout, bool run_here = true);
  void complete(const c10::intrusive_ptr<c10::ivalue::Future>& future);  // settled
  void report();                                                         // to the hooks; settled

  comm::WorkPtr work_;
  std::optional<Clock::time_point> issued_;
  std::vector<at::Tensor> outputs_;
  std::weak_ptr<FutureCompleter> completer_;  // the backend's; gone once it is destroyed
  std::shared_ptr<WorkHooks> hooks_;
  std::function<void()> finish_;
  mutable std::mutex mu_;  // guards what follows
  bool settled_ = false;
  std::exception_ptr error_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  bool queued_ = false;     // handed to the completer, which will conclude()
  bool concluded_ = false;  // conclude() ran
};

// One thread per backend that concludes Works (completes their futures, reports them to the
// hooks) in the order they were handed to it: the order the group runs its collectives in, so
// it never waits behind a later one.
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

}  // namespace ringgrad::torch_backend

// RinggradWork: the c10d::Work PyTorch holds for one collective of ringgrad's process group.
// Completion is ringgrad's Work; this adds what PyTorch expects on top: errors as
// DistBackendError (Python's torch.distributed.DistBackendError, a RuntimeError) carrying
// ringgrad's sentence without its source location, result() tensors, an optional copy-out step
// (a gathered flat buffer to a tensor list), getFuture() (which DDP's reducer and comm hooks
// chain on), and reports to the flight recorder's hooks (work_hooks.h). As c10d's Gloo
// AsyncWork does, the future is made with the Work and completed in one place, settle().
// FutureCompleter: the thread that waits for watched Works, so that ringgrad's comm thread
// never runs a future's Python callbacks, and a caller's wait() never runs the flight
// recorder's hooks.
#pragma once
#include <ATen/core/ivalue.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <vector>

#include "comm/process_group/work.h"
#include "comm/torch_backend/work_hooks.h"

namespace ringgrad::torch_backend {

class FutureCompleter;

// State, guarded by mu_; each arrow is taken once, by the first thread to get there:
//
//   kIssued ──create() with hooks registered, or getFuture() while it runs──► kWatched
//   kIssued, kWatched ──settle()──► kSucceeded or kFailed
//
// kWatched: the completer holds the Work and will conclude() it: settle it if nobody has yet,
// then report it to the hooks. settle() runs once the collective has ended, on whichever thread
// sees that first: wait(), isCompleted(), getFuture() (a collective already done, or a backend
// gone), or the completer. It runs the copy-out step, records the outcome and completes the
// future; kSucceeded and kFailed are final.
class RinggradWork : public c10d::Work {
  struct Private {};  // the constructor is for create() only

 public:
  using Clock = std::chrono::steady_clock;
  // `copy_out` (may be empty) runs once, after the collective succeeded and before anyone sees
  // it complete. `issued`: when the collective was handed to the group, if it was timed. With
  // hooks registered, the Work is watched at once, so its report never waits for a caller.
  static c10::intrusive_ptr<RinggradWork> create(comm::WorkPtr work,
                                                 std::optional<Clock::time_point> issued, int rank,
                                                 c10d::OpType type, std::vector<at::Tensor> outputs,
                                                 const std::shared_ptr<FutureCompleter>& completer,
                                                 const std::shared_ptr<WorkHooks>& hooks,
                                                 std::function<void()> copy_out = {});
  RinggradWork(Private, comm::WorkPtr work, std::optional<Clock::time_point> issued, int rank,
               c10d::OpType type, std::vector<at::Tensor> outputs,
               const std::shared_ptr<FutureCompleter>& completer,
               const std::shared_ptr<WorkHooks>& hooks, std::function<void()> copy_out);

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  std::vector<at::Tensor> result() override;
  // 0: until the collective ends; a collective the group has not started yet then runs on this
  // thread (comm::Work::wait). A timed wait never runs it, and raises at its timeout.
  bool wait(std::chrono::milliseconds timeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  // Milliseconds from issue to completion (to now, while it runs), if it was timed (as it is
  // while hooks are registered); otherwise c10d::Work's, which throws. The flight recorder asks.
  float getDuration() const override;
  // For a recv (from any source): the rank the message came from.
  int sourceRank() const override;

  // FutureCompleter's, once per watched Work: waits for the collective (never running it),
  // settles it, and reports it to the hooks: completed, with its duration, or aborted.
  void conclude();

 private:
  enum class State { kIssued, kWatched, kSucceeded, kFailed };
  // The one place the outcome is recorded and the future completed; see State. Waits for the
  // collective without running it, so the caller makes sure it has ended (or is the completer).
  void settle();

  comm::WorkPtr work_;
  std::optional<Clock::time_point> issued_;
  std::vector<at::Tensor> outputs_;
  std::weak_ptr<FutureCompleter> completer_;  // the backend's; gone once it is destroyed
  std::shared_ptr<WorkHooks> hooks_;
  std::function<void()> copy_out_;
  const c10::intrusive_ptr<c10::ivalue::Future> future_;
  mutable std::mutex mu_;  // guards what follows
  State state_ = State::kIssued;
  std::exception_ptr error_;  // set with kFailed
};

// One thread per backend that concludes watched Works in the order they were handed to it: the
// order the group runs its collectives in, so it never waits behind a later one.
//
// Two kinds of hand-over. A Work whose future someone asked for is `prompt`: the thread is woken
// for it at once (DDP waits on that future). A Work watched only for the hooks' report is not:
// waking a thread for each would cost every call a system call, so such Works are collected
// while the thread is still up from its last batch, and concluded when that batch window ends
// (kReportWindow) or a prompt one comes. Only a thread asleep past its window is woken for one.
// So a completion reaches the hooks at most kReportWindow late.
class FutureCompleter {
 public:
  static constexpr std::chrono::milliseconds kReportWindow{5};

  FutureCompleter();
  ~FutureCompleter();  // concludes what is queued, then joins
  void add(c10::intrusive_ptr<RinggradWork> work, bool prompt);

 private:
  void loop();
  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<c10::intrusive_ptr<RinggradWork>> queue_;
  bool prompt_queued_ = false;  // a Work in queue_ is waited on through its future
  bool asleep_ = false;         // past its window: a Work of either kind wakes it
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace ringgrad::torch_backend

// Work: the handle a collective returns. Whoever runs the collective (the group's worker thread,
// or a thread that waits for it before it started) completes it, with an error if it failed;
// callers wait() on it from any thread. Thread-safe.
// Backends whose work finishes elsewhere (the nccl backend's GPU stream) override the
// virtual wait and is_completed.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "comm/store/store.h"

namespace ringgrad::comm {

class Work {
 public:
  explicit Work(std::string description) : description_(std::move(description)) {}
  virtual ~Work() = default;

  // "allreduce #5 (sum, float32, 12 elements)". Thread-safe; a subclass that overrides
  // describe() has it built here on first use.
  const std::string& description() const;
  virtual bool is_completed() const { return done_.load(std::memory_order_acquire); }
  // Blocks until the collective finished and rethrows its error. The collective enforces its
  // own deadline, so this returns within it. A collective that has not started yet (next in
  // its group's queue, the group idle) runs on this thread, since this thread would only
  // sleep meanwhile (the ring group does so: Note [Running a collective where it is waited]).
  void wait();
  // As wait(), but never runs the collective here: for a thread that must not take part.
  void await_completion() { wait(Milliseconds::max()); }
  // As await_completion(), but throws TimeoutError if it has not finished within `timeout`
  // (the collective itself keeps running until its own deadline).
  virtual void wait(Milliseconds timeout);

  // For process group implementations: exactly once, from the worker thread.
  void complete(std::exception_ptr error = nullptr);
  // When complete() ran, on the thread that completed it; valid once wait() has returned.
  // A backend that completes elsewhere (nccl) leaves it empty.
  std::optional<std::chrono::steady_clock::time_point> completed_at() const {
    return completed_at_;
  }

 protected:
  // For a Work whose description is built only when someone reads it (an error, a timeout):
  // formatting it for every call costs a good part of a small collective.
  Work() : lazy_(true) {}
  virtual std::string describe() const { return {}; }
  // wait(): run the collective on the waiting thread if it has not started (default: never).
  virtual void run_if_not_started() {}

 private:
  const bool lazy_ = false;
  mutable std::once_flag described_;
  mutable std::string description_;
  std::atomic<bool> done_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::exception_ptr error_;
  std::optional<std::chrono::steady_clock::time_point> completed_at_;
};

// A receive's Work: also says which rank the message came from (a recv from kAnySource).
class RecvWork : public Work {
 public:
  explicit RecvWork(std::string description) : Work(std::move(description)) {}
  int source() const { return source_.load(std::memory_order_acquire); }  // -1 until done
  void complete_from(int source, std::exception_ptr error = nullptr) {
    source_.store(source, std::memory_order_release);
    complete(std::move(error));
  }

 private:
  std::atomic<int> source_{-1};
};

using WorkPtr = std::shared_ptr<Work>;

}  // namespace ringgrad::comm

// Work: the handle a collective returns. The group's worker thread completes it (with an
// error, if the collective failed); callers wait() on it from any thread. Thread-safe.
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
  // own deadline, so this returns within it.
  void wait();
  // As wait(), but throws TimeoutError if it has not finished within `timeout` (the
  // collective itself keeps running until its own deadline).
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
using WorkPtr = std::shared_ptr<Work>;

}  // namespace ringgrad::comm

// Work completion and waiting. A short spin before sleeping keeps a small collective's
// completion from paying a futex wake-up on the caller's side.
#include "comm/process_group/work.h"

#include <chrono>
#include <thread>

#include "core/error.h"

namespace ringgrad::comm {

namespace {
constexpr auto kSpin = std::chrono::microseconds(30);
}

const std::string& Work::description() const {
  if (lazy_) std::call_once(described_, [this] { description_ = describe(); });
  return description_;
}

void Work::complete(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    completed_at_ = std::chrono::steady_clock::now();
    error_ = std::move(error);
    done_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
}

void Work::wait() {
  if (!done_.load(std::memory_order_acquire)) run_if_not_started();
  wait(Milliseconds::max());
}

void Work::wait(Milliseconds timeout) {
  // Reads the flag itself: a subclass's is_completed may mean something else.
  auto done = [this] { return done_.load(std::memory_order_acquire); };
  // A collective that ran on this thread (wait()) is done here: that path reads no clock and
  // takes no lock.
  if (!done()) {
    const auto start = std::chrono::steady_clock::now();
    while (!done() && std::chrono::steady_clock::now() - start < kSpin) {
    }
    std::unique_lock<std::mutex> lock(mu_);
    if (timeout == Milliseconds::max()) {
      cv_.wait(lock, [&] { return done(); });
    } else if (!cv_.wait_for(lock, timeout, [&] { return done(); })) {
      RG_THROW(TimeoutError, description(), " not finished after ", format_duration(timeout),
               " of waiting (it keeps running until its own deadline)");
    }
  }
  // complete() set error_ before it published done_ (release), and nothing writes it after.
  if (error_) std::rethrow_exception(error_);
}

}  // namespace ringgrad::comm

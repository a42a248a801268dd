// RinggradWork: settling a ringgrad Work once, and futures completed off the comm thread.
#include "apps/torch_plugin/ringgrad_work.h"

#include <c10/util/Exception.h>

#include "core/error.h"

namespace ringgrad::torch_plugin {

namespace {

// Our errors reach Python as torch.distributed.DistBackendError with ringgrad's message.
std::exception_ptr as_dist_backend_error(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const c10::Error&) {
    return error;
  } catch (const std::exception& e) {
    return std::make_exception_ptr(c10::DistBackendError(
        c10::SourceLocation{__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
        std::string("ringgrad: ") + e.what()));
  }
}

}  // namespace

RinggradWork::RinggradWork(comm::WorkPtr work, int rank, c10d::OpType type,
                           std::vector<at::Tensor> outputs,
                           const std::shared_ptr<FutureCompleter>& completer,
                           std::function<void()> finish)
    : c10d::Work(rank, type),
      work_(std::move(work)),
      outputs_(std::move(outputs)),
      completer_(completer),
      finish_(std::move(finish)) {}

void RinggradWork::settle(std::chrono::milliseconds timeout) {
  std::exception_ptr error;
  try {
    if (timeout.count() > 0)
      work_->wait(timeout);
    else
      work_->wait();
  } catch (const TimeoutError&) {
    if (!work_->is_completed()) throw;  // only this wait gave up; the collective goes on
    error = std::current_exception();
  } catch (...) {
    error = std::current_exception();
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (settled_) return;
  if (!error && finish_) {
    try {
      finish_();
    } catch (...) {
      error = std::current_exception();
    }
  }
  error_ = error ? as_dist_backend_error(error) : nullptr;
  settled_ = true;
}

bool RinggradWork::isCompleted() {
  if (!work_->is_completed()) return false;
  settle(std::chrono::milliseconds(0));  // returns at once: the collective is done
  return true;
}

bool RinggradWork::isSuccess() const {
  std::lock_guard<std::mutex> lock(mu_);
  return settled_ && !error_;
}

std::exception_ptr RinggradWork::exception() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

std::vector<at::Tensor> RinggradWork::result() { return outputs_; }

bool RinggradWork::wait(std::chrono::milliseconds timeout) {
  try {
    settle(timeout);
  } catch (const std::exception& e) {
    C10_THROW_ERROR(DistBackendError, std::string("ringgrad: ") + e.what());
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (error_) std::rethrow_exception(error_);
  return true;
}

c10::intrusive_ptr<c10::ivalue::Future> RinggradWork::getFuture() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (future_) return future_;
    future_ =
        c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
  }
  // A collective already done (a small one the group ran inline, on this thread) completes
  // its future here: handing it to the completer thread would cost two wake-ups for nothing.
  // So does one whose backend is gone, and with it every unfinished collective.
  auto completer = completer_.lock();
  if (completer && !work_->is_completed())
    completer->add(c10::intrusive_ptr<RinggradWork>::reclaim_copy(this));
  else
    complete_future();
  return future_;
}

void RinggradWork::complete_future() {
  settle(std::chrono::milliseconds(0));
  std::unique_lock<std::mutex> lock(mu_);
  auto future = future_;
  auto error = error_;
  lock.unlock();
  if (error)
    future->setError(error);
  else
    future->markCompleted(c10::IValue(outputs_));
}

FutureCompleter::FutureCompleter() : thread_([this] { loop(); }) {}

FutureCompleter::~FutureCompleter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void FutureCompleter::add(c10::intrusive_ptr<RinggradWork> work) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(work));
  }
  wake_.notify_one();
}

void FutureCompleter::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, nothing left
    auto work = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    work->complete_future();  // returns within the collective's deadline
    work.reset();             // may drop the last tensor references, outside our lock
    lock.lock();
  }
}

}  // namespace ringgrad::torch_plugin

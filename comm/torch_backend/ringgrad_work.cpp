// RinggradWork: one settle() per Work, futures completed off the comm thread, and the flight
// recorder's hooks run on the completer thread.
#include "comm/torch_backend/ringgrad_work.h"

#include <c10/util/Exception.h>

#include "core/error.h"

namespace ringgrad::torch_backend {

namespace {

// Our errors reach Python as torch.distributed.DistBackendError with ringgrad's sentence (its
// [file:line] is for logs, not for PyTorch's users).
std::exception_ptr as_dist_backend_error(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const c10::Error&) {
    return error;
  } catch (const TimeoutError& e) {
    // PyTorch's own tests (and users' scripts) recognise a timeout by c10d's words.
    return std::make_exception_ptr(c10::DistBackendError(
        c10::SourceLocation{__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
        "ringgrad: Timed out waiting for the collective: " + user_message(e)));
  } catch (const std::exception& e) {
    return std::make_exception_ptr(c10::DistBackendError(
        c10::SourceLocation{__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
        "ringgrad: " + user_message(e)));
  }
}

}  // namespace

c10::intrusive_ptr<RinggradWork> RinggradWork::create(
    comm::WorkPtr work, std::optional<Clock::time_point> issued, int rank, c10d::OpType type,
    std::vector<at::Tensor> outputs, const std::shared_ptr<FutureCompleter>& completer,
    const std::shared_ptr<WorkHooks>& hooks, std::function<void()> copy_out) {
  auto made =
      c10::make_intrusive<RinggradWork>(Private{}, std::move(work), issued, rank, type,
                                        std::move(outputs), completer, hooks, std::move(copy_out));
  if (hooks->any() && completer) {
    made->state_ = State::kWatched;  // no other thread has it yet
    completer->add(made, /*prompt=*/false);
  }
  return made;
}

RinggradWork::RinggradWork(Private, comm::WorkPtr work, std::optional<Clock::time_point> issued,
                           int rank, c10d::OpType type, std::vector<at::Tensor> outputs,
                           const std::shared_ptr<FutureCompleter>& completer,
                           const std::shared_ptr<WorkHooks>& hooks, std::function<void()> copy_out)
    : c10d::Work(rank, type),
      work_(std::move(work)),
      issued_(issued),
      outputs_(std::move(outputs)),
      completer_(completer),
      hooks_(hooks),
      copy_out_(std::move(copy_out)),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::ofTensors())) {}

void RinggradWork::settle() {
  std::exception_ptr error;
  try {
    work_->await_completion();
  } catch (...) {
    error = std::current_exception();
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (state_ == State::kSucceeded || state_ == State::kFailed) return;
  if (!error && copy_out_) {
    try {
      copy_out_();
    } catch (...) {
      error = std::current_exception();
    }
  }
  error_ = error ? as_dist_backend_error(error) : nullptr;
  state_ = error_ ? State::kFailed : State::kSucceeded;
  lock.unlock();
  // Outside the lock: the future's callbacks run here, and may ask this Work anything.
  if (error_)
    future_->setError(error_);
  else
    future_->markCompleted(c10::IValue(outputs_));
}

bool RinggradWork::isCompleted() {
  if (!work_->is_completed()) return false;
  settle();  // returns at once: the collective has ended
  return true;
}

bool RinggradWork::isSuccess() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_ == State::kSucceeded;
}

std::exception_ptr RinggradWork::exception() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

std::vector<at::Tensor> RinggradWork::result() { return outputs_; }

bool RinggradWork::wait(std::chrono::milliseconds timeout) {
  try {
    if (timeout.count() > 0)
      work_->wait(timeout);
    else
      work_->wait();
  } catch (const TimeoutError& e) {
    // Only this wait gave up: the collective goes on, and its Work stays unsettled.
    if (!work_->is_completed()) C10_THROW_ERROR(DistBackendError, "ringgrad: " + user_message(e));
  } catch (...) {
    // The collective failed; settle() records its error.
  }
  settle();
  // A watched Work's abort hooks run on the completer (the flight recorder's dumps its trace,
  // which takes over a second), so the error reaches the caller at the deadline, as Gloo's does.
  if (std::exception_ptr error = exception()) std::rethrow_exception(error);
  return true;
}

c10::intrusive_ptr<c10::ivalue::Future> RinggradWork::getFuture() {
  std::unique_lock<std::mutex> lock(mu_);
  if (state_ != State::kIssued) return future_;  // watched or settled: completed in time
  // A collective still running is watched by the completer thread; one already done (say,
  // waited for before) is settled here, as is one whose backend is gone (with it every
  // collective has ended): the completer would cost two wake-ups for nothing.
  auto completer = completer_.lock();
  if (completer && !work_->is_completed()) {
    state_ = State::kWatched;
    lock.unlock();
    completer->add(c10::intrusive_ptr<RinggradWork>::reclaim_copy(this), /*prompt=*/true);
  } else {
    lock.unlock();
    settle();
  }
  return future_;
}

void RinggradWork::conclude() {
  settle();  // waits here: the completer never runs a collective
  if (!hooks_->any()) return;
  if (exception()) return hooks_->aborted();
  hooks_->completed(getCompletionKey(),
                    issued_ ? std::optional<float>(getDuration()) : std::nullopt);
}

float RinggradWork::getDuration() const {
  if (!issued_) return c10d::Work::getDuration();
  // completed_at() is written before is_completed() turns true.
  const auto end = work_->is_completed() ? work_->completed_at() : std::nullopt;
  return std::chrono::duration<float, std::milli>(end.value_or(Clock::now()) - *issued_).count();
}

int RinggradWork::sourceRank() const {
  if (const auto* recv = dynamic_cast<const comm::RecvWork*>(work_.get())) return recv->source();
  return c10d::Work::sourceRank();
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

void FutureCompleter::add(c10::intrusive_ptr<RinggradWork> work, bool prompt) {
  bool wake;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(work));
    prompt_queued_ |= prompt;
    wake = prompt || asleep_;
  }
  if (wake) wake_.notify_one();
}

void FutureCompleter::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    // The batch window: Works watched for the hooks gather here without waking anyone.
    wake_.wait_for(lock, kReportWindow, [&] { return stopping_ || prompt_queued_; });
    if (queue_.empty() && !stopping_) {
      asleep_ = true;
      wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      asleep_ = false;
    }
    if (queue_.empty()) return;  // stopping, nothing left
    std::deque<c10::intrusive_ptr<RinggradWork>> batch;
    batch.swap(queue_);
    prompt_queued_ = false;
    lock.unlock();
    for (auto& work : batch) {
      work->conclude();  // returns within the collective's deadline
      work.reset();      // may drop the last tensor references, outside our lock
    }
    lock.lock();
  }
}

}  // namespace ringgrad::torch_backend

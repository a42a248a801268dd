// RinggradWork: settling a ringgrad Work once, futures completed off the comm thread, and the
// flight recorder's completion and abort hooks.
#include "comm/torch_backend/ringgrad_work.h"

#include <c10/util/Exception.h>

#include <algorithm>

#include "core/error.h"

namespace ringgrad::torch_backend {

namespace {

// Our errors reach Python as torch.distributed.DistBackendError with ringgrad's message.
std::exception_ptr as_dist_backend_error(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const c10::Error&) {
    return error;
  } catch (const TimeoutError& e) {
    // PyTorch's own tests (and users' scripts) recognise a timeout by c10d's words.
    return std::make_exception_ptr(c10::DistBackendError(
        c10::SourceLocation{__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
        std::string("ringgrad: Timed out waiting for the collective: ") + e.what()));
  } catch (const std::exception& e) {
    return std::make_exception_ptr(c10::DistBackendError(
        c10::SourceLocation{__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
        std::string("ringgrad: ") + e.what()));
  }
}

template <class Hook>
void erase_id(std::vector<std::pair<int64_t, Hook>>& hooks, int64_t id) {
  hooks.erase(std::remove_if(hooks.begin(), hooks.end(), [&](auto& h) { return h.first == id; }),
              hooks.end());
}

}  // namespace

std::shared_ptr<const WorkHooks::Table> WorkHooks::table() const {
  std::lock_guard<std::mutex> lock(mu_);
  return table_;
}

template <class Change>
void WorkHooks::change(Change&& f) {
  std::lock_guard<std::mutex> lock(mu_);
  auto copy = std::make_shared<Table>(*table_);
  f(*copy);
  any_.store(!copy->completion.empty() || !copy->abort.empty(), std::memory_order_release);
  table_ = std::move(copy);
}

void WorkHooks::add_completion(int64_t id, c10d::CompletionHook hook) {
  change([&](Table& t) { t.completion.emplace_back(id, std::move(hook)); });
}

void WorkHooks::remove_completion(int64_t id) {
  change([&](Table& t) { erase_id(t.completion, id); });
}

void WorkHooks::add_abort(int64_t id, c10d::AbortHook hook) {
  change([&](Table& t) { t.abort.emplace_back(id, std::move(hook)); });
}

void WorkHooks::remove_abort(int64_t id) {
  change([&](Table& t) { erase_id(t.abort, id); });
}

void WorkHooks::completed(uint64_t key, std::optional<float> duration_ms) {
  const auto hooks = table();  // held: the loop's range is a member of it
  for (auto& [id, hook] : hooks->completion) hook(c10d::CompletionHookArgs{key, duration_ms});
}

void WorkHooks::aborted() {
  const auto hooks = table();
  for (auto& [id, hook] : hooks->abort) hook();
}

RinggradWork::RinggradWork(comm::WorkPtr work, std::optional<Clock::time_point> issued, int rank,
                           c10d::OpType type, std::vector<at::Tensor> outputs,
                           const std::shared_ptr<FutureCompleter>& completer,
                           const std::shared_ptr<WorkHooks>& hooks, std::function<void()> finish)
    : c10d::Work(rank, type),
      work_(std::move(work)),
      issued_(issued),
      outputs_(std::move(outputs)),
      completer_(completer),
      hooks_(hooks),
      finish_(std::move(finish)) {}

void RinggradWork::watch() {
  if (!hooks_->any()) return;
  // A collective already done is reported here, unless it failed: the flight recorder's abort
  // hook then dumps its trace, which takes about a second, so the completer thread runs it and
  // the error reaches the caller at the collective's deadline.
  if (work_->is_completed()) {
    settle(std::chrono::milliseconds(0));
    if (!exception()) return conclude();
  }
  auto completer = completer_.lock();
  if (!completer) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queued_ = true;
  }
  completer->add(c10::intrusive_ptr<RinggradWork>::reclaim_copy(this));
}

void RinggradWork::settle(std::chrono::milliseconds timeout, bool run_here) {
  std::exception_ptr error;
  try {
    if (timeout.count() > 0)
      work_->wait(timeout);
    else if (run_here)
      work_->wait();
    else
      work_->await_completion();
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
  std::unique_lock<std::mutex> lock(mu_);
  if (!error_) return true;
  std::exception_ptr error = error_;
  const bool reported_elsewhere = queued_;
  lock.unlock();
  // A Work handed to the completer has its abort hooks run there (conclude()): the flight
  // recorder's dumps its trace, which takes longer than a second, and the error must reach
  // the caller at the deadline, as Gloo's does.
  if (!reported_elsewhere) hooks_->aborted();
  std::rethrow_exception(error);
}

c10::intrusive_ptr<c10::ivalue::Future> RinggradWork::getFuture() {
  std::unique_lock<std::mutex> lock(mu_);
  if (future_) return future_;
  future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
  auto future = future_;
  if (queued_ && !concluded_) return future;  // conclude() completes it
  // A collective already done (say, waited for before) completes its future here: handing it
  // to the completer thread would cost two wake-ups for nothing. So does one whose backend is
  // gone, and with it every unfinished collective.
  auto completer = completer_.lock();
  if (!concluded_ && completer && !work_->is_completed()) {
    queued_ = true;
    lock.unlock();
    completer->add(c10::intrusive_ptr<RinggradWork>::reclaim_copy(this));
  } else {
    lock.unlock();
    settle(std::chrono::milliseconds(0));
    complete(future);
  }
  return future;
}

void RinggradWork::conclude() {
  settle(std::chrono::milliseconds(0), false);  // the completer never runs a collective
  std::unique_lock<std::mutex> lock(mu_);
  if (concluded_) return;
  concluded_ = true;
  auto future = future_;
  lock.unlock();
  if (hooks_->any()) report();
  if (future) complete(future);
}

void RinggradWork::report() {
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

void RinggradWork::complete(const c10::intrusive_ptr<c10::ivalue::Future>& future) {
  std::exception_ptr error = exception();
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
    work->conclude();  // returns within the collective's deadline
    work.reset();      // may drop the last tensor references, outside our lock
    lock.lock();
  }
}

}  // namespace ringgrad::torch_backend

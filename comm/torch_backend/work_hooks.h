// WorkHooks: the completion and abort hooks PyTorch's flight recorder registers on a backend,
// so that its trace tells a finished collective (with its duration) from a hung one.
#pragma once
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <torch/csrc/distributed/c10d/Hooks.hpp>
#include <utility>
#include <vector>

namespace ringgrad::torch_backend {

// The hooks a backend's Works report to: completion once per successful collective, with the
// time from issue to completion; abort before a failed one's error reaches its caller. PyTorch
// registers them (its flight recorder does, unless TORCH_FR_BUFFER_SIZE=0) when it makes the
// backend, before any collective; with none registered, reporting costs one atomic load.
// Thread-safe. A hook runs with no lock of ours held: PyTorch unregisters while holding its own
// lock, which its hooks take too.
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

}  // namespace ringgrad::torch_backend

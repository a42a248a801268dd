// WorkHooks: a copy-on-write table, so running the hooks takes no lock of ours.
#include "comm/torch_backend/work_hooks.h"

#include <algorithm>

namespace ringgrad::torch_backend {

namespace {

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

}  // namespace ringgrad::torch_backend

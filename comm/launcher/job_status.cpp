// JobStatus implementation.
#include "comm/launcher/job_status.h"

#include <thread>

#include "core/error.h"

namespace ringgrad::comm {

using Clock = std::chrono::steady_clock;

JobStatus::JobStatus(std::shared_ptr<Store> store, const std::string& run_id, int64_t generation,
                     int num_nodes, int node_rank)
    : store_(std::move(store)),
      prefix_(str_cat("rdzv/", run_id, "/g", generation, "/")),
      num_nodes_(num_nodes),
      node_rank_(node_rank) {}

std::string JobStatus::key(const std::string& name) const { return prefix_ + name; }

JobEvent JobStatus::report(const JobEvent& event) {
  return JobEvent::from_json(store_->compare_set(key("event"), "", event.to_json()));
}

std::optional<JobEvent> JobStatus::event() {
  if (!store_->check({key("event")})) return std::nullopt;
  return JobEvent::from_json(store_->get(key("event")));
}

void JobStatus::mark_succeeded() { store_->add(key("succeeded"), 1); }

bool JobStatus::all_succeeded() { return store_->add(key("succeeded"), 0) >= num_nodes_; }

std::optional<int> JobStatus::beat_and_find_silent(std::chrono::milliseconds timeout) {
  store_->set(key(str_cat("alive/", node_rank_)), std::to_string(++beats_));
  const auto now = Clock::now();
  for (int node = 0; node < num_nodes_; ++node) {
    if (node == node_rank_) continue;
    const std::string k = key(str_cat("alive/", node));
    std::string value = store_->check({k}) ? store_->get(k) : std::string();
    auto it = seen_.find(node);
    if (it == seen_.end() || it->second.value != value) {
      seen_[node] = Seen{value, now};
    } else if (now - it->second.since > timeout) {
      return node;
    }
  }
  return std::nullopt;
}

void JobStatus::leave_and_wait(std::chrono::milliseconds timeout, bool hosts_store) {
  store_->add(key("left"), 1);
  if (!hosts_store) return;
  const auto deadline = Clock::now() + timeout;
  while (store_->add(key("left"), 0) < num_nodes_ && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

}  // namespace ringgrad::comm

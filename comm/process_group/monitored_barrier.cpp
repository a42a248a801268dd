// MonitoredBarrier: arrivals and the release through the store (monitored_barrier.h).
#include "comm/process_group/monitored_barrier.h"

#include <chrono>
#include <vector>

#include "core/error.h"

namespace ringgrad::comm {

namespace {

using SteadyClock = std::chrono::steady_clock;

int64_t ms_since(SteadyClock::time_point start) {
  return std::chrono::duration_cast<Milliseconds>(SteadyClock::now() - start).count();
}

// Waits for `key` until `deadline`; false if it is not there by then. A deadline already
// passed only looks (a zero timeout means "the default" to some stores).
bool arrives_by(Store& store, const std::string& key, SteadyClock::time_point deadline) {
  const auto left = std::chrono::duration_cast<Milliseconds>(deadline - SteadyClock::now());
  if (left.count() <= 0) return store.check({key});
  try {
    store.wait({key}, left);
    return true;
  } catch (const TimeoutError&) {
    return store.check({key});
  }
}

}  // namespace

MonitoredBarrier::MonitoredBarrier(std::shared_ptr<Store> store, std::string prefix, int rank,
                                   int size)
    : store_(std::move(store)), prefix_(std::move(prefix)), rank_(rank), size_(size) {}

std::string MonitoredBarrier::key(uint64_t n, const std::string& what) const {
  return prefix_ + std::to_string(n) + "/" + what;
}

void MonitoredBarrier::run(Milliseconds timeout, bool wait_all_ranks) {
  const uint64_t n = count_++;
  const auto start = SteadyClock::now();
  const auto deadline = start + timeout;
  if (rank_ != 0) {
    store_->set(key(n, "arrived/" + std::to_string(rank_)), "1");
    if (!arrives_by(*store_, key(n, "passed"), deadline))
      RG_THROW(TimeoutError, "Rank ", rank_,
               " successfully reached monitoredBarrier, but received errors while waiting for "
               "send/recv from rank 0 (no release within ",
               timeout.count(), " ms). Please check rank 0 logs for faulty rank.");
    return;
  }
  std::vector<int> missing;
  for (int r = 1; r < size_; ++r) {
    const bool time_left = SteadyClock::now() < deadline;
    const std::string arrived = key(n, "arrived/" + std::to_string(r));
    if (!arrives_by(*store_, arrived, deadline)) {
      // Rank 0 spent its time on the ranks before r: r is not to blame.
      if (!wait_all_ranks && !time_left)
        RG_THROW(TimeoutError, "Rank 0 timed out in monitoredBarrier after ", ms_since(start),
                 " ms (its timeout is ", timeout.count(), " ms), before rank ", r, " arrived");
      missing.push_back(r);
      if (!wait_all_ranks) break;
      continue;
    }
    store_->delete_key(arrived);
  }
  if (missing.size() == 1 && !wait_all_ranks)
    RG_THROW(TimeoutError, "Rank ", missing[0], " failed to pass monitoredBarrier in ",
             timeout.count(), " ms");
  if (!missing.empty()) {
    std::string ranks;
    for (size_t i = 0; i < missing.size(); ++i)
      ranks += (i ? ", " : "") + std::to_string(missing[i]);
    RG_THROW(TimeoutError, missing.size() == 1 ? "Rank " : "Ranks ", ranks,
             " failed to pass monitoredBarrier in ", timeout.count(), " ms");
  }
  store_->set(key(n, "passed"), "1");
  // Every rank has passed barrier n-1 (each arrived at n), so its release can go.
  if (n > 0) store_->delete_key(key(n - 1, "passed"));
}

}  // namespace ringgrad::comm

// JobStatus: the per-generation signals between the launchers of a job, kept in the
// rendezvous store under rdzv/<run_id>/g<G>/: the first JobEvent (compare_set, so exactly one
// wins), how many nodes' workers all succeeded, how many launchers are leaving, and a
// heartbeat per node so a launcher that vanished (kill -9, lost host) is noticed.
#pragma once
#include <chrono>
#include <map>
#include <memory>
#include <optional>

#include "comm/launcher/job_event.h"
#include "comm/store/store.h"

namespace ringgrad::comm {

class JobStatus {
 public:
  JobStatus(std::shared_ptr<Store> store, const std::string& run_id, int64_t generation,
            int num_nodes, int node_rank);

  // Records `event` unless another was recorded first; returns the one that stands.
  JobEvent report(const JobEvent& event);
  std::optional<JobEvent> event();

  void mark_succeeded();
  bool all_succeeded();

  // Bumps this node's heartbeat; returns a node whose heartbeat has not moved for
  // `timeout` (as seen by this launcher), if any.
  std::optional<int> beat_and_find_silent(std::chrono::milliseconds timeout);

  // Called once by each launcher on its way out; the store's host waits (bounded) for the
  // others so it does not take the store away while they still read the final event.
  void leave_and_wait(std::chrono::milliseconds timeout, bool hosts_store);

 private:
  std::string key(const std::string& name) const;

  std::shared_ptr<Store> store_;
  std::string prefix_;
  int num_nodes_;
  int node_rank_;
  int64_t beats_ = 0;
  struct Seen {
    std::string value;
    std::chrono::steady_clock::time_point since;
  };
  std::map<int, Seen> seen_;
};

}  // namespace ringgrad::comm

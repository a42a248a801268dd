// Rendezvous: how the launchers of one job (one per node) agree on who takes part, over the
// launchers' Store. Each generation is a round: nodes claim node ranks (the given one, or the
// first free in join order), node rank 0 closes the round once MIN nodes joined and
// last_call_timeout passed (or MAX joined), and publishes the workers' master address/port.
// A node of an older generation than the job's is refused, so a stale node never joins.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "comm/store/store.h"

namespace ringgrad::comm {

struct RendezvousConfig {
  std::string run_id = "none";
  int min_nodes = 1;
  int max_nodes = 1;
  int node_rank = -1;  // -1: assigned in join order
  int local_world_size = 1;
  std::string hostname;  // shown to the other nodes in messages
  Milliseconds timeout{900'000};
  Milliseconds last_call_timeout{30'000};
  std::string endpoint;  // where the store is, for messages
};

struct RendezvousNode {
  std::string hostname;
  int local_world_size = 0;
};

struct RendezvousResult {
  int64_t generation = 0;
  int node_rank = 0;
  int num_nodes = 0;
  int world_size = 0;
  int rank_offset = 0;                // global rank of this node's local rank 0
  std::vector<RendezvousNode> nodes;  // by node rank
};

class Rendezvous {
 public:
  // Keys live under "rdzv/<run_id>/" of `store`.
  Rendezvous(std::shared_ptr<Store> store, RendezvousConfig config);

  // Joins round `generation` (moving the job's generation forward to it if needed) and
  // blocks until the round closes. Throws TimeoutError naming joined and missing nodes and
  // the endpoint; Error for a stale generation, a taken node rank or a late join.
  RendezvousResult join(int64_t generation);
  // Node rank 0 publishes where worker rank 0 will host the workers' store.
  void publish_master(int64_t generation, const std::string& addr, int port);
  std::pair<std::string, int> wait_master(int64_t generation);

  const std::shared_ptr<Store>& store() const { return store_; }
  const RendezvousConfig& config() const { return config_; }

 private:
  std::string key(int64_t generation, const std::string& name) const;
  int claim_node_rank(int64_t generation);
  std::vector<std::string> rank_keys(int64_t generation, int from, int to) const;
  [[noreturn]] void throw_timeout(int64_t generation, int expected, Milliseconds waited);
  Milliseconds remaining() const;

  std::shared_ptr<Store> store_;
  RendezvousConfig config_;
  std::string identity_;  // unique per launcher: hostname, pid and a random tag
  std::chrono::steady_clock::time_point deadline_;
};

}  // namespace ringgrad::comm

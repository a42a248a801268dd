// The node checker: what each node runs as the single worker of `ringgrad-run --check`'s
// first job (`ringgrad-run --check-node REPORT`). The nodes meet in the worker store, swap
// their facts, each listens on a worker port that every node (itself included) must reach,
// and each writes the whole job's check rows (check_table.h) to REPORT for its launcher.
// Contract: blocks at most about `timeout` per step; throws only when the store itself fails.
#pragma once
#include <chrono>
#include <string>
#include <vector>

#include "comm/launcher/check/check_table.h"
#include "comm/launcher/check/node_facts.h"

namespace ringgrad::comm {

struct NodeCheckOptions {
  std::string report_path;
  int port_base = 0;  // node k listens on port_base + k; 0: a free port of the kernel's choice
  std::chrono::milliseconds timeout{60'000};         // store waits
  std::chrono::milliseconds connect_timeout{5'000};  // one worker-port probe
};

// What one node found (every node's record reaches every node through the store).
struct NodeRecord {
  NodeFacts facts;
  std::string address;  // where the others reach it (the ring transport's interface)
  std::string listen;   // "host:port", empty when it could not listen
  std::string listen_error;
  std::vector<std::string> reached;  // per source node: "" connected, else why not
};

// The rows for a job whose nodes reported `nodes` (pure; index = node rank).
std::vector<CheckRow> node_check_rows(const std::vector<NodeRecord>& nodes);

// Returns 0 once the report is written, whatever the rows say: the launcher reads the verdict
// there, so a failed check is not mistaken for a crashed worker.
int run_node_check(const NodeCheckOptions& options);

}  // namespace ringgrad::comm

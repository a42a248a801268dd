// `ringgrad-run --check`: the environment check a user runs before a real job, on every node
// with the same node flags (or once with --hostfile). Two jobs, run by this node's launcher:
//   1. one node checker per node (node_check.h: rendezvous, worker ports, build, CPUs, CUDA);
//   2. only when every row of 1 passed, all_reduce_perf -b 8 -e 64M -f 4 -c 1 on the ring
//      backend (and on NCCL where there is a GPU per rank) with the job's real
//      nproc-per-node, its table printed as it runs.
// The benchmark jobs' stores are on free ports node 0's checker picked and reported (the first
// store may still be closing when a node moves on, and a fixed port next to it may be taken).
// Node 0 prints the table (check_table.h); the other nodes print one verdict line.
#pragma once
#include <chrono>
#include <string>

#include "comm/launcher/launch_config.h"

namespace ringgrad::comm {

// A check is interactive: a node that does not come within a minute is reported rather than
// waited for for torchrun's 15 minutes (--rdzv-conf timeout=S still decides).
constexpr std::chrono::milliseconds kCheckRendezvousTimeout{60'000};

struct EnvCheckOptions {
  std::string self;     // this ringgrad-run, started again as `--check-node REPORT`
  std::string perf;     // all_reduce_perf (build/bin, next to ringgrad-run)
  int worker_port = 0;  // --check-port: node k probes port worker_port + k (0: any free)
};

// Returns 0 when every row passed, 1 otherwise. Never throws for a failed check: a
// rendezvous that cannot complete becomes a FAIL row naming the endpoint.
int run_env_check(const LaunchConfig& config, const EnvCheckOptions& options);

}  // namespace ringgrad::comm

// The launcher agent, one per node (what torchrun's elastic agent does): open or join the
// rendezvous store, rendezvous, start this node's workers with the torchrun environment,
// watch them and the other nodes, tear the job down on the first failure, restart it as a
// new generation up to --max-restarts, and print the failure summary.
#pragma once
#include "comm/launcher/launch_config.h"

namespace ringgrad::comm {

// Returns ringgrad-run's exit code: 0 when every worker of every node succeeded, 1 after a
// failure (summary printed), 128+N when stopped by signal N. Setup problems (a port in use,
// an unreachable store, a rendezvous timeout) throw, with one line that names the endpoint.
int run_launcher(const LaunchConfig& config);

}  // namespace ringgrad::comm

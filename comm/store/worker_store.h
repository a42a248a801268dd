// The worker side of a launch: read rank and world from the environment a launcher set
// (ringgrad-run / torchrun, Open MPI's mpirun, Slurm's srun) and build the job's Store on
// MASTER_ADDR:MASTER_PORT, as torch.distributed's env:// init does: a client of the launcher's
// store under ringgrad-run (TORCHELASTIC_USE_AGENT_STORE=True), else hosted by rank 0.
#pragma once
#include <functional>
#include <memory>
#include <optional>

#include "comm/store/tcp_store.h"
#include "comm/store/tcp_store_server.h"

namespace ringgrad::comm {

struct WorkerEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr;
  int master_port = 0;
  int64_t generation = -1;   // TORCHELASTIC_RESTART_COUNT; -1 outside ringgrad-run/torchrun
  bool agent_store = false;  // TORCHELASTIC_USE_AGENT_STORE=True: the launcher hosts the store
  std::string source;        // which launcher's variables were used: "RANK", "OMPI", "SLURM"
};

using EnvLookup = std::function<std::optional<std::string>(const char*)>;

// RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE; when RANK is absent, OMPI_COMM_WORLD_* or
// SLURM_PROCID/NTASKS/LOCALID. Outside a ringgrad-run/torchrun job (no TORCHELASTIC_RUN_ID),
// a RANK that disagrees with the MPI or Slurm rank is an error. Throws InvalidArgument.
WorkerEnv read_worker_env(const EnvLookup& lookup);
WorkerEnv read_worker_env();  // from the process environment

struct WorkerStore {
  WorkerEnv env;
  std::unique_ptr<TcpStoreServer> server;  // rank 0, when no launcher hosts the store
  std::shared_ptr<TcpStore> store;

  // Call once when done with the store. When rank 0 hosts it, rank 0 waits (up to `timeout`)
  // until every other rank has said it is finished; otherwise rank 0 exiting could cut off
  // a reply another rank is still waiting for.
  void finish(Milliseconds timeout);
};

// Without an agent store, rank 0 listens at MASTER_PORT on RINGGRAD_STORE_BIND_ADDR (default:
// every interface, as PyTorch's TCPStore); all ranks connect to MASTER_ADDR and meet in a
// barrier, so a missing rank is reported as "barrier 'store_init': 1/2 ranks arrived". Uses
// RINGGRAD_STORE_TOKEN when set and the generation, so a stale worker is refused.
WorkerStore create_worker_store(const WorkerEnv& env, Milliseconds timeout);

}  // namespace ringgrad::comm

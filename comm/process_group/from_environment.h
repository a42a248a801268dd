// A worker's process group from its environment, as torch.distributed.init_process_group
// with init_method="env://": the rank and world from ringgrad-run / torchrun (or mpirun,
// srun) variables, the store on MASTER_ADDR:MASTER_PORT hosted by rank 0, then the group.
// A process started by hand, with none of those variables, is a world of one (no group).
#pragma once
#include <memory>
#include <optional>

#include "comm/process_group/process_group.h"
#include "comm/store/worker_store.h"

namespace ringgrad::comm {

struct DistributedJob {
  WorkerEnv env;                        // rank 0 of 1 when not launched
  std::optional<WorkerStore> store;     // when world > 1
  std::unique_ptr<ProcessGroup> group;  // when world > 1

  bool leader() const { return env.rank == 0; }
  // Rank 0 hosts the store: call before exiting so it outlives the other ranks' last use.
  void finish();
};

// Blocks until every rank has joined (up to the collective timeout); throws naming what is
// missing or malformed. `tensor_device`: where the job's tensors live ("auto" picks nccl for
// CUDA tensors when it can, see create_process_group). `cuda_device`: the GPU those tensors
// are on, for nccl; -1: the launcher's local rank.
DistributedJob join_distributed_job(Backend backend, const std::string& group_name,
                                    DeviceType tensor_device = DeviceType::cpu,
                                    int cuda_device = -1);

}  // namespace ringgrad::comm

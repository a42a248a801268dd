// Joining the job a launcher started.
#include "comm/process_group/from_environment.h"

#include "core/env.h"
#include "core/logging.h"

namespace ringgrad::comm {

DistributedJob join_distributed_job(Backend backend, const std::string& group_name,
                                    DeviceType tensor_device, int cuda_device) {
  DistributedJob job;
  const bool launched =
      env_get("RANK") || env_get("OMPI_COMM_WORLD_RANK") || env_get("SLURM_PROCID");
  if (!launched) return job;
  job.env = read_worker_env();
  if (job.env.world_size == 1) return job;
  set_log_rank(job.env.rank);
  const Milliseconds timeout = default_collective_timeout();
  job.store.emplace(create_worker_store(job.env, timeout));
  ProcessGroupOptions options;
  options.group_name = group_name;
  options.generation = job.env.generation;
  options.store_host = job.env.master_addr;
  options.tensor_device = tensor_device;
  // The local rank also under mpirun/srun, which set no LOCAL_RANK.
  options.cuda_device = cuda_device >= 0 ? cuda_device : job.env.local_rank;
  job.group =
      create_process_group(backend, job.store->store, job.env.rank, job.env.world_size, options);
  return job;
}

void DistributedJob::finish() {
  if (store) store->finish(default_collective_timeout());
}

}  // namespace ringgrad::comm

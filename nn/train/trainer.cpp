// train(): the outline of a run. The checks that can refuse a run (settings, device, threads,
// output paths) come first, before the data is read or the other ranks wait on this one; the
// named steps of the run itself are TrainingRun's (training_run.cpp).
#include "nn/train/trainer.h"

#include <algorithm>
#include <thread>

#include "comm/process_group/from_environment.h"
#include "core/env.h"
#include "core/logging.h"
#include "core/output_path.h"
#include "kernels/ops.h"
#include "nn/train/training_device.h"
#include "nn/train/training_run.h"

namespace ringgrad::nn {

namespace {

// A run's set-up, before any step: every check that can refuse the run, so a bad setting fails
// at once rather than after the training.
void check_settings(const TrainConfig& c, const Device& device) {
  RG_CHECK(c.epochs >= 1, "--epochs must be at least 1, got ", c.epochs);
  RG_CHECK(c.batch_size >= 1, "--batch-size must be at least 1, got ", c.batch_size);
  RG_CHECK(c.backend != comm::Backend::nccl || device.is_cuda(),
           "--backend nccl reduces CUDA tensors only: add --device cuda, or use --backend ring");
  if (c.checkpoint_every > 0 && c.save_path.empty())
    RG_THROW(InvalidArgument, "--checkpoint-every ", c.checkpoint_every,
             " writes checkpoints to --save, and there is none: add --save PATH");
}

// Threads per process: --threads, else OMP_NUM_THREADS when set (ringgrad-run sets 1, as
// torchrun), else the cores shared among the processes of this node. Returns the number set.
int use_threads(const TrainConfig& c, const comm::DistributedJob& job) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const long long threads =
      c.threads > 0 ? c.threads
                    : env_int("OMP_NUM_THREADS", std::max(1, cores / job.env.local_world_size));
  if (threads < 1 || threads > kernels::max_num_threads())  // (--threads is checked when parsed)
    RG_THROW(InvalidArgument, "OMP_NUM_THREADS=", threads, " is outside 1 to ",
             kernels::max_num_threads(),
             " (4 per core of this machine): set it lower, or pass "
             "--threads");
  kernels::set_num_threads(static_cast<int>(threads));
  return static_cast<int>(threads);
}

}  // namespace

TrainResult train(const TrainConfig& c) {
  // Set-up: settings, device, the other ranks, threads and the outputs are checked before the
  // data is read; then the data, model, optimiser and the position to start from.
  const Device device = select_training_device(c.device);
  check_settings(c, device);
  comm::DistributedJob job = comm::join_distributed_job(c.backend, "ringgrad-train", device.type,
                                                        device.is_cuda() ? device.index : -1);
  const int threads = use_threads(c, job);
  if (job.leader()) {  // the leader writes them; fail now rather than after the training
    check_output_path(c.save_path, "--save");
    check_output_path(c.log_json_path, "--log-json");
  }
  TrainingRun run(c, device, job, threads);
  if (run.nothing_left()) {
    if (job.leader())
      log_info("the checkpoint is at step ", run.position().global_step,
               ", at or past --max-steps ", c.max_steps, ": nothing left to train");
    job.finish();
    TrainResult done;
    done.steps = run.position().global_step;
    return done;
  }
  // The run: epochs of steps, each closed by its record (and evaluation); then the totals and
  // the final checkpoint.
  run.start();
  for (int64_t epoch = run.position().epoch; epoch < c.epochs; ++epoch)
    if (!run.run_epoch(epoch)) break;
  TrainResult result = run.finish();
  job.finish();
  return result;
}

}  // namespace ringgrad::nn

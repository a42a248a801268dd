// Training loop. Each step: set the scheduled learning rate (and momentum for onecycle),
// forward and cross-entropy (under autocast with --amp), backward of the loss (scaled for
// fp16), SGD step (skipped by the GradScaler when fp16 gradients overflowed), all on --device
// (each batch is copied there from the host DataLoader). Launched with
// WORLD_SIZE > 1 (ringgrad-run, torchrun-style environment, mpirun or srun) the model is
// wrapped in DistributedDataParallel: each rank trains on its DistributedSampler shard with
// --batch-size images per step, the gradients are averaged by the bucketed all-reduce, and
// rank 0 alone prints, logs and writes checkpoints. Resume restores weights, BN buffers,
// momentum buffers, the loss scale and the position (epoch, batch); the sampler's order is a
// function of (seed, epoch), so the continued run sees exactly the batches the uninterrupted
// one would.
#include "nn/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "comm/process_group/from_environment.h"
#include "core/env.h"
#include "core/logging.h"
#include "core/output_path.h"
#include "kernels/ops.h"
#include "nn/amp/autocast.h"
#include "nn/amp/grad_scaler.h"
#include "nn/autograd/ops.h"
#include "nn/data/dataloader.h"
#include "nn/data/mnist.h"
#include "nn/models/resnet.h"
#include "nn/optim/lr_schedule.h"
#include "nn/parallel/distributed_data_parallel.h"
#include "nn/train/checkpoint.h"
#include "nn/train/evaluate.h"
#include "nn/train/progress.h"
#include "nn/train/training_device.h"

namespace ringgrad::nn {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

struct Splits {
  Dataset train, test;
};

Splits load_data(const TrainConfig& c) {
  if (c.synthetic) return {synthetic_mnist(60000, c.seed), synthetic_mnist(10000, c.seed + 1)};
  RawSplit raw_train = read_mnist_split(c.data_dir, "train");
  if (raw_train.labels.numel() == 0)
    RG_THROW(InvalidArgument, "the training set in ", c.data_dir,
             " holds no images: nothing to train on");
  RawSplit raw_test = read_mnist_split(c.data_dir, "test");
  Normalization norm = compute_normalization(raw_train.images);
  return {to_dataset(raw_train, norm), to_dataset(raw_test, norm)};
}

// Whether every rank's loss of this step is finite, agreed by a one-element all-reduce so that
// all ranks stop at the same step (a rank that stopped alone would leave the others waiting
// in their next gradient all-reduce until the timeout).
bool loss_finite_everywhere(double loss, comm::ProcessGroup* group, Device device) {
  const bool finite = std::isfinite(loss);
  if (!group) return finite;
  Tensor flag = Tensor::from_vector<float>({finite ? 0.0f : 1.0f}, {1}).to(device);
  comm::AllreduceOptions max;
  max.op = comm::ReduceOp::max;
  group->allreduce(flag, max)->wait();
  return flag.to(Device::cpu()).item() == 0.0;
}

// Images per step per process: --batch-size, unless --auto-resume continues a checkpoint of
// another global batch that this number of processes can keep (an elastic job that re-formed
// with fewer or more nodes): then the global batch stays, so the run goes on with the same
// steps, the same learning-rate schedule and, the sampler striding one order, the same images
// in each step.
int per_process_batch(const TrainConfig& c, const std::string& resume_path, int world,
                      bool leader) {
  if (!c.auto_resume || resume_path != c.save_path) return c.batch_size;
  const auto global = checkpoint_global_batch(resume_path);
  if (!global || *global == static_cast<int64_t>(c.batch_size) * world) return c.batch_size;
  if (*global % world != 0)
    RG_THROW(InvalidArgument, "--auto-resume: checkpoint ", resume_path, " was written with a ",
             "global batch of ", *global, ", which ", world, " processes cannot share evenly; ",
             "run a number of processes that divides it, or start a new run with --init-from");
  const int per_process = static_cast<int>(*global / world);
  if (leader)
    log_warn("--auto-resume: keeping the checkpoint's global batch of ", *global, " on ", world,
             world == 1 ? " process: " : " processes: ", per_process,
             " images per process (--batch-size ", c.batch_size, " gave ",
             static_cast<int64_t>(c.batch_size) * world, ")");
  return per_process;
}

}  // namespace

TrainResult train(const TrainConfig& c) {
  RG_CHECK(c.epochs >= 1, "--epochs must be at least 1, got ", c.epochs);
  RG_CHECK(c.batch_size >= 1, "--batch-size must be at least 1, got ", c.batch_size);
  const Device device = select_training_device(c.device);
  RG_CHECK(c.backend != "nccl" || device.is_cuda(),
           "--backend nccl reduces CUDA tensors only: add --device cuda, or use --backend ring");
  comm::DistributedJob job = comm::join_distributed_job(c.backend, "ringgrad-train", device.type,
                                                        device.is_cuda() ? device.index : -1);
  // Default: OMP_NUM_THREADS when set (ringgrad-run sets 1, as torchrun), else the cores
  // shared among the processes of this node.
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
  const int world = job.env.world_size, rank = job.env.rank;
  if (c.checkpoint_every > 0 && c.save_path.empty())
    RG_THROW(InvalidArgument, "--checkpoint-every ", c.checkpoint_every,
             " writes checkpoints to --save, and there is none: add --save PATH");
  if (job.leader()) {  // the leader writes them; fail now rather than after the training
    check_output_path(c.save_path, "--save");
    check_output_path(c.log_json_path, "--log-json");
  }

  Splits data = load_data(c);
  Generator init_rng(c.seed, /*stream=*/0);
  auto model = make_model(c.model, init_rng);
  model->to(device);
  if (job.leader())  // the weights, buffers and one momentum buffer per parameter, with room
    check_free_space(c.save_path, checkpoint_bytes(*model) + (1u << 20), "--save");
  kernels::SgdParams sgd;
  sgd.lr = c.lr;
  sgd.momentum = c.momentum;
  sgd.weight_decay = c.weight_decay;
  sgd.nesterov = c.nesterov;
  Sgd optimizer(model->parameters(), sgd);
  const std::optional<DType> amp_dtype = amp::parse_amp_mode(c.amp);
  amp::GradScalerOptions scaler_options;
  scaler_options.enabled = amp_dtype == DType::f16;  // bf16 has f32's range: nothing underflows
  scaler_options.init_scale = c.amp_init_scale;
  amp::GradScaler scaler(scaler_options);
  if (job.leader() && device.is_cpu())
    log_info("CPU convolutions in ", dtype_name(amp_dtype.value_or(DType::f32)), ": ",
             kernels::cpu_conv_path(amp_dtype.value_or(DType::f32)));

  // Under ringgrad-run --max-restarts every restart runs the same command, so the checkpoint the
  // failed attempt left in --save is where it continues (torchrun's snapshot pattern).
  const std::string resume_path =
      c.resume_path.empty() && c.auto_resume && std::filesystem::exists(c.save_path)
          ? c.save_path
          : c.resume_path;
  const int batch_size = per_process_batch(c, resume_path, world, job.leader());
  DataLoader loader(data.train, DistributedSampler(data.train.size(), world, rank, true, c.seed),
                    batch_size);
  const int64_t steps_per_epoch = loader.num_batches();
  const int64_t total_steps = steps_per_epoch * c.epochs;
  LrSchedule schedule(parse_lr_schedule(c.lr_schedule), c.lr, total_steps, c.warmup_steps);
  const int64_t run_steps = c.max_steps > 0 ? std::min(c.max_steps, total_steps) : total_steps;
  if (job.leader() && c.warmup_steps > run_steps)
    log_warn("--warmup-steps ", c.warmup_steps, " is longer than the run (", run_steps,
             " steps): the learning rate rises the whole run and never reaches --lr ", c.lr);
  CheckpointInfo info{c.model, c.seed, total_steps};
  info.global_batch = static_cast<int64_t>(batch_size) * world;
  info.dataset_size = data.train.size();
  info.steps_per_epoch = steps_per_epoch;
  // Only a run that saves or resumes needs the fingerprint (a pass over the training set).
  if (!c.save_path.empty() || !c.resume_path.empty()) info.data_crc32 = fingerprint(data.train);
  TrainingPosition pos;
  // --init-from with --auto-resume: the first attempt starts from the weights, a restart
  // continues from the checkpoint that attempt left (--resume itself excludes --init-from).
  if (!resume_path.empty()) {
    pos = load_checkpoint(resume_path, *model, optimizer, info, &scaler);
    if (job.leader())
      log_info("resumed from ", resume_path, " at epoch ", pos.epoch + 1, ", step ",
               pos.global_step, resume_path == c.resume_path ? "" : " (--auto-resume)");
    if (c.max_steps > 0 && pos.global_step >= c.max_steps) {
      if (job.leader())
        log_info("the checkpoint is at step ", pos.global_step, ", at or past --max-steps ",
                 c.max_steps, ": nothing left to train");
      job.finish();
      TrainResult done;
      done.steps = pos.global_step;
      return done;
    }
  } else if (!c.init_from.empty()) {
    load_weights(c.init_from, *model);
    if (job.leader()) log_info("initialised the weights from ", c.init_from);
  }

  std::unique_ptr<DistributedDataParallel> ddp;
  if (job.group) {
    if (c.sync_bn) convert_sync_batchnorm(*model, *job.group);
    DdpOptions options;
    options.reducer.bucket_cap_bytes = static_cast<size_t>(c.bucket_cap_mb * (1 << 20));
    options.reducer.compression = comm::parse_grad_compression(c.grad_compression);
    ddp = std::make_unique<DistributedDataParallel>(model, *job.group, options);
  }
  auto forward = [&](const Variable& x) { return ddp ? ddp->forward(x) : model->forward(x); };
  auto save = [&](const TrainingPosition& at) {
    if (job.leader() && !c.save_path.empty())
      save_checkpoint(c.save_path, *model, optimizer, at, info, &scaler);
  };

  ProgressReporter progress(job.leader(), c.log_every);
  // A resumed run, or any restart of a --max-restarts job, adds to the records of the attempts
  // before it rather than replacing them.
  JsonLog json(job.leader() ? c.log_json_path : "",
               /*append=*/!resume_path.empty() || job.env.generation > 0);
  progress.line(str_cat("ringgrad-train: ", c.model, " (", model->num_parameters(),
                        " parameters), ", data.train.size(), " training images, ", world,
                        world == 1 ? " process" : " processes", " x batch ", batch_size, ", ",
                        threads, " threads each", device.is_cuda() ? ", " + device.str() : "",
                        job.group ? ", backend " + job.group->backend_name() : "",
                        amp_dtype ? ", amp " + c.amp : ""));
  TrainResult result;
  double train_seconds = 0;
  int64_t images_trained = 0;  // on this rank
  bool stop = false;
  for (int64_t epoch = pos.epoch; epoch < c.epochs && !stop; ++epoch) {
    const int64_t first_batch = epoch == pos.epoch ? pos.batch_in_epoch : 0;
    loader.start_epoch(epoch, first_batch);
    int64_t batch_index = first_batch;
    double epoch_loss = 0;
    int64_t epoch_correct = 0, epoch_images = 0;
    const auto epoch_start = Clock::now();
    Batch batch;
    while (loader.next(batch)) {
      const auto step_start = Clock::now();
      const Tensor images = batch.images.to(device), labels = batch.labels.to(device);
      optimizer.set_lr(schedule.lr(pos.global_step));
      if (auto m = schedule.momentum(pos.global_step)) optimizer.set_momentum(*m);
      optimizer.zero_grad();
      Variable logits, loss;
      {
        amp::AutocastGuard autocast(amp_dtype);
        logits = forward(Variable(images));
        loss = cross_entropy(logits, labels);
      }
      // A NaN or inf loss stops the run before it reaches the weights; with --amp fp16 too,
      // where overflowing gradients are the GradScaler's to skip but a non-finite loss is not.
      const double loss_value = loss.value().item();  // waits for the forward on a GPU
      if (!loss_finite_everywhere(loss_value, job.group.get(), device))
        RG_THROW(Error, "step ", pos.global_step + 1, " (epoch ", epoch + 1,
                 "): the training loss is not finite (", loss_value, " on rank ", rank,
                 "; check --lr, the data and a resumed checkpoint). Stopped before updating the "
                 "weights; --save was not written");
      backward(scaler.scale(loss));
      scaler.step(optimizer);
      scaler.update();

      const int64_t rows = labels.size(0);
      epoch_correct += kernels::count_correct(logits.value(), labels);
      train_seconds += seconds_since(step_start);
      images_trained += rows;
      epoch_loss += loss_value * static_cast<double>(rows);
      epoch_images += rows;
      ++batch_index;
      ++pos.global_step;
      result.final_train_loss = loss_value;

      StepStats s;
      s.epoch = static_cast<int>(epoch + 1);
      s.epochs = c.epochs;
      s.step_in_epoch = batch_index;
      s.steps_in_epoch = steps_per_epoch;
      s.global_step = pos.global_step;
      s.loss = loss_value;
      s.accuracy = static_cast<double>(epoch_correct) / epoch_images;
      s.lr = optimizer.options().lr;
      s.images_per_second = world * images_trained / std::max(1e-9, train_seconds);
      s.eta_seconds = (total_steps - pos.global_step) * batch_size * world /
                      std::max(1e-9, s.images_per_second);
      progress.step(s);
      if (pos.global_step % c.log_every == 0 || batch_index == steps_per_epoch) {
        nlohmann::json step{{"type", "step"},
                            {"epoch", s.epoch},
                            {"step", pos.global_step},
                            {"loss", loss_value},
                            {"accuracy", s.accuracy},
                            {"lr", s.lr},
                            {"img_per_s", s.images_per_second}};
        if (scaler.enabled()) step["loss_scale"] = scaler.get_scale();
        json.write(step.dump());
      }
      if (c.checkpoint_every > 0 && pos.global_step % c.checkpoint_every == 0)
        save({epoch, batch_index, pos.global_step});
      if (c.max_steps > 0 && pos.global_step >= c.max_steps) {
        stop = true;
        break;
      }
    }
    pos.epoch = stop ? epoch : epoch + 1;
    pos.batch_in_epoch = stop ? batch_index : 0;
    nlohmann::json record{
        {"type", "epoch"},
        {"epoch", epoch + 1},
        {"step", pos.global_step},
        {"train_loss", epoch_images ? epoch_loss / epoch_images : 0.0},
        {"train_accuracy", epoch_images ? double(epoch_correct) / epoch_images : 0.0},
        {"img_per_s", world * images_trained / std::max(1e-9, train_seconds)},
        {"seconds", seconds_since(epoch_start)}};
    if (c.eval && !stop) {
      amp::AutocastGuard autocast(amp_dtype);  // evaluate the model as it is trained
      EvalResult ev = evaluate(*model, data.test, c.eval_batch_size, job.group.get());
      result.test_loss = ev.loss;
      result.test_accuracy = ev.accuracy;
      record["test_loss"] = ev.loss;
      record["test_accuracy"] = ev.accuracy;
      progress.line(str_cat("epoch ", epoch + 1, "/", c.epochs, ": test loss ", ev.loss,
                            ", test accuracy ", 100.0 * ev.accuracy, "% (", ev.count, " images)"));
    }
    json.write(record.dump());
  }
  result.steps = pos.global_step;
  result.images_per_second = world * images_trained / std::max(1e-9, train_seconds);
  result.skipped_steps = scaler.skipped_steps();
  if (scaler.enabled())
    progress.line(str_cat("fp16 loss scaling: ", result.skipped_steps,
                          " steps of this run skipped (inf/NaN gradients), final scale ",
                          scaler.get_scale()));
  progress.line(str_cat("training throughput: ", static_cast<int64_t>(result.images_per_second),
                        " img/s (all ranks) over ", world * images_trained, " images"));
  save(pos);
  if (job.leader() && !c.save_path.empty()) progress.line("saved checkpoint " + c.save_path);
  job.finish();
  return result;
}

}  // namespace ringgrad::nn

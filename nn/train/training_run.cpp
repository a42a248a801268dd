// The steps of a training run (TrainingRun). Each step: set the scheduled learning rate (and
// momentum for onecycle), forward and cross-entropy (under autocast with --amp), backward of the
// loss (scaled for fp16), SGD step (skipped by the GradScaler when fp16 gradients overflowed), all
// on --device (each batch is copied there from the host DataLoader). Launched with WORLD_SIZE > 1
// (ringgrad-run, torchrun-style environment, mpirun or srun) the model is wrapped in
// DistributedDataParallel: each rank trains on its DistributedSampler shard with
// --batch-size images per step, the gradients are averaged by the bucketed all-reduce, and
// rank 0 alone prints, logs and writes checkpoints. Resume restores weights, BN buffers,
// momentum buffers, the loss scale and the position (epoch, batch); the sampler's order is a
// function of (seed, epoch), so the continued run sees exactly the batches the uninterrupted
// one would.
#include "nn/train/training_run.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/logging.h"
#include "core/output_path.h"
#include "kernels/ops.h"
#include "nn/amp/autocast.h"
#include "nn/autograd/ops.h"
#include "nn/train/evaluate.h"

namespace ringgrad::nn {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
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

// The model on its device, and (on the leader, which writes checkpoints) room for one: the
// weights, buffers and one momentum buffer per parameter, with a margin.
std::shared_ptr<ResNet> build_model(const TrainConfig& c, Device device, bool leader) {
  Generator init_rng(c.seed, /*stream=*/0);
  auto model = make_model(c.model, init_rng);
  model->to(device);
  if (leader) check_free_space(c.save_path, checkpoint_bytes(*model) + (1u << 20), "--save");
  return model;
}

kernels::SgdParams sgd_params(const TrainConfig& c) {
  kernels::SgdParams sgd;
  sgd.lr = c.lr;
  sgd.momentum = c.momentum;
  sgd.weight_decay = c.weight_decay;
  sgd.nesterov = c.nesterov;
  return sgd;
}

amp::GradScalerOptions scaler_options(const TrainConfig& c) {
  amp::GradScalerOptions options;
  options.enabled = c.amp == DType::f16;  // bf16 has f32's range: nothing underflows
  options.init_scale = c.amp_init_scale;
  return options;
}

// Under ringgrad-run --max-restarts every restart runs the same command, so the checkpoint the
// failed attempt left in --save is where it continues (torchrun's snapshot pattern).
std::string checkpoint_to_resume(const TrainConfig& c) {
  return c.resume_path.empty() && c.auto_resume && std::filesystem::exists(c.save_path)
             ? c.save_path
             : c.resume_path;
}

}  // namespace

struct TrainingRun::EpochTally {
  int64_t batches = 0;  // of the epoch, counting those a resumed run skipped
  double loss_sum = 0;  // loss x images
  int64_t correct = 0, images = 0;
  Clock::time_point start = Clock::now();
};

TrainingRun::Splits TrainingRun::load_data(const TrainConfig& c) {
  if (c.synthetic) return {synthetic_mnist(60000, c.seed), synthetic_mnist(10000, c.seed + 1)};
  RawSplit raw_train = read_mnist_split(c.data_dir, "train");
  if (raw_train.labels.numel() == 0)
    RG_THROW(InvalidArgument, "the training set in ", c.data_dir,
             " holds no images: nothing to train on");
  RawSplit raw_test = read_mnist_split(c.data_dir, "test");
  Normalization norm = compute_normalization(raw_train.images);
  return {to_dataset(raw_train, norm), to_dataset(raw_test, norm)};
}

TrainingRun::TrainingRun(const TrainConfig& c, Device device, comm::DistributedJob& job,
                         int threads)
    : c_(c),
      device_(device),
      job_(job),
      threads_(threads),
      world_(job.env.world_size),
      rank_(job.env.rank),
      data_(load_data(c)),
      model_(build_model(c, device, job.leader())),
      optimizer_(model_->parameters(), sgd_params(c)),
      scaler_(scaler_options(c)),
      resume_path_(checkpoint_to_resume(c)),
      batch_size_(per_process_batch(c, resume_path_, world_, job.leader())),
      loader_(data_.train, DistributedSampler(data_.train.size(), world_, rank_, true, c.seed),
              batch_size_),
      steps_per_epoch_(loader_.num_batches()),
      total_steps_(steps_per_epoch_ * c.epochs),
      schedule_(c.lr_schedule, c.lr, total_steps_, c.warmup_steps),
      info_{c.model, c.seed, total_steps_},
      progress_(job.leader(), c.log_every) {
  const DType compute = c.amp.value_or(DType::f32);
  if (job_.leader() && device_.is_cpu())
    log_info("CPU convolutions in ", dtype_name(compute), ": ", kernels::cpu_conv_path(compute));
  const int64_t run_steps = c.max_steps > 0 ? std::min(c.max_steps, total_steps_) : total_steps_;
  if (job_.leader() && c.warmup_steps > run_steps)
    log_warn("--warmup-steps ", c.warmup_steps, " is longer than the run (", run_steps,
             " steps): the learning rate rises the whole run and never reaches --lr ", c.lr);
  info_.global_batch = static_cast<int64_t>(batch_size_) * world_;
  info_.dataset_size = data_.train.size();
  info_.steps_per_epoch = steps_per_epoch_;
  // Only a run that saves or resumes needs the fingerprint (a pass over the training set).
  if (!c.save_path.empty() || !c.resume_path.empty()) info_.data_crc32 = fingerprint(data_.train);
  // --init-from with --auto-resume: the first attempt starts from the weights, a restart
  // continues from the checkpoint that attempt left (--resume itself excludes --init-from).
  if (!resume_path_.empty()) {
    pos_ = load_checkpoint(resume_path_, *model_, optimizer_, info_, &scaler_);
    if (job_.leader())
      log_info("resumed from ", resume_path_, " at epoch ", pos_.epoch + 1, ", step ",
               pos_.global_step, resume_path_ == c.resume_path ? "" : " (--auto-resume)");
  } else if (!c.init_from.empty()) {
    load_weights(c.init_from, *model_);
    if (job_.leader()) log_info("initialised the weights from ", c.init_from);
  }
}

void TrainingRun::start() {
  if (job_.group) {
    if (c_.sync_bn) convert_sync_batchnorm(*model_, *job_.group);
    DdpOptions options;
    options.reducer.bucket_cap_bytes = static_cast<size_t>(c_.bucket_cap_mb * (1 << 20));
    options.reducer.compression = c_.grad_compression;
    ddp_ = std::make_unique<DistributedDataParallel>(model_, *job_.group, options);
  }
  // A resumed run, or any restart of a --max-restarts job, adds to the records of the attempts
  // before it rather than replacing them.
  json_ = std::make_unique<JsonLog>(job_.leader() ? c_.log_json_path : "",
                                    /*append=*/!resume_path_.empty() || job_.env.generation > 0);
  progress_.line(str_cat("ringgrad-train: ", c_.model, " (", model_->num_parameters(),
                         " parameters), ", data_.train.size(), " training images, ", world_,
                         world_ == 1 ? " process" : " processes", " x batch ", batch_size_, ", ",
                         threads_, " threads each", device_.is_cuda() ? ", " + device_.str() : "",
                         job_.group ? ", backend " + job_.group->backend_name() : "",
                         c_.amp ? ", amp " + choice_name(amp::kAmpModes, c_.amp) : ""));
}

bool TrainingRun::run_epoch(int64_t epoch) {
  const int64_t first_batch = epoch == pos_.epoch ? pos_.batch_in_epoch : 0;
  loader_.start_epoch(epoch, first_batch);
  EpochTally tally;
  tally.batches = first_batch;
  bool stopped = false;
  Batch batch;
  while (!stopped && loader_.next(batch)) {
    const double loss = step(batch, epoch, tally);
    report_step(epoch, loss, tally);
    if (c_.checkpoint_every > 0 && pos_.global_step % c_.checkpoint_every == 0)
      save({epoch, tally.batches, pos_.global_step});
    stopped = c_.max_steps > 0 && pos_.global_step >= c_.max_steps;
  }
  pos_.epoch = stopped ? epoch : epoch + 1;
  pos_.batch_in_epoch = stopped ? tally.batches : 0;
  close_epoch(epoch, tally, /*evaluate_now=*/c_.eval && !stopped);
  return !stopped;
}

// One optimiser step: the scheduled learning rate (and momentum), forward and loss under
// autocast, a loss every rank agrees is finite, backward of the (scaled) loss, the SGD step
// (skipped by the GradScaler when fp16 gradients overflowed). Returns the loss.
double TrainingRun::step(const Batch& batch, int64_t epoch, EpochTally& tally) {
  const auto start = Clock::now();
  const Tensor images = batch.images.to(device_), labels = batch.labels.to(device_);
  optimizer_.set_lr(schedule_.lr(pos_.global_step));
  if (auto m = schedule_.momentum(pos_.global_step)) optimizer_.set_momentum(*m);
  optimizer_.zero_grad();
  Variable logits, loss;
  {
    amp::AutocastGuard autocast(c_.amp);
    logits = forward(Variable(images));
    loss = cross_entropy(logits, labels);
  }
  // A NaN or inf loss stops the run before it reaches the weights; with --amp fp16 too,
  // where overflowing gradients are the GradScaler's to skip but a non-finite loss is not.
  const double loss_value = loss.value().item();  // waits for the forward on a GPU
  if (!loss_finite_everywhere(loss_value, job_.group.get(), device_))
    RG_THROW(Error, "step ", pos_.global_step + 1, " (epoch ", epoch + 1,
             "): the training loss is not finite (", loss_value, " on rank ", rank_,
             "; check --lr, the data and a resumed checkpoint). Stopped before updating the "
             "weights; --save was not written");
  backward(scaler_.scale(loss));
  scaler_.step(optimizer_);
  scaler_.update();

  const int64_t rows = labels.size(0);
  tally.correct += kernels::count_correct(logits.value(), labels);
  train_seconds_ += seconds_since(start);
  images_trained_ += rows;
  tally.loss_sum += loss_value * static_cast<double>(rows);
  tally.images += rows;
  ++tally.batches;
  ++pos_.global_step;
  result_.final_train_loss = loss_value;
  return loss_value;
}

// The progress bar or line, and every --log-every steps (and at an epoch's end) a JSON record.
void TrainingRun::report_step(int64_t epoch, double loss, const EpochTally& tally) {
  StepStats s;
  s.epoch = static_cast<int>(epoch + 1);
  s.epochs = c_.epochs;
  s.step_in_epoch = tally.batches;
  s.steps_in_epoch = steps_per_epoch_;
  s.global_step = pos_.global_step;
  s.loss = loss;
  s.accuracy = static_cast<double>(tally.correct) / tally.images;
  s.lr = optimizer_.options().lr;
  s.images_per_second = images_per_second();
  s.eta_seconds = (total_steps_ - pos_.global_step) * batch_size_ * world_ /
                  std::max(1e-9, s.images_per_second);
  progress_.step(s);
  if (pos_.global_step % c_.log_every != 0 && tally.batches != steps_per_epoch_) return;
  nlohmann::json record{{"type", "step"},
                        {"epoch", s.epoch},
                        {"step", pos_.global_step},
                        {"loss", loss},
                        {"accuracy", s.accuracy},
                        {"lr", s.lr},
                        {"img_per_s", s.images_per_second}};
  if (scaler_.enabled()) record["loss_scale"] = scaler_.get_scale();
  json_->write(record.dump());
}

// The epoch's JSON record, with the test-set evaluation when `evaluate_now`.
void TrainingRun::close_epoch(int64_t epoch, const EpochTally& tally, bool evaluate_now) {
  const double images = static_cast<double>(tally.images);
  nlohmann::json record{{"type", "epoch"},
                        {"epoch", epoch + 1},
                        {"step", pos_.global_step},
                        {"train_loss", tally.images ? tally.loss_sum / images : 0.0},
                        {"train_accuracy", tally.images ? tally.correct / images : 0.0},
                        {"img_per_s", images_per_second()},
                        {"seconds", seconds_since(tally.start)}};
  if (evaluate_now) {
    amp::AutocastGuard autocast(c_.amp);  // evaluate the model as it is trained
    EvalResult ev = evaluate(*model_, data_.test, c_.eval_batch_size, job_.group.get());
    result_.test_loss = ev.loss;
    result_.test_accuracy = ev.accuracy;
    record["test_loss"] = ev.loss;
    record["test_accuracy"] = ev.accuracy;
    progress_.line(str_cat("epoch ", epoch + 1, "/", c_.epochs, ": test loss ", ev.loss,
                           ", test accuracy ", 100.0 * ev.accuracy, "% (", ev.count, " images)"));
  }
  json_->write(record.dump());
}

void TrainingRun::save(const TrainingPosition& at) {
  if (job_.leader() && !c_.save_path.empty())
    save_checkpoint(c_.save_path, *model_, optimizer_, at, info_, &scaler_);
}

double TrainingRun::images_per_second() const {
  return world_ * images_trained_ / std::max(1e-9, train_seconds_);
}

TrainResult TrainingRun::finish() {
  result_.steps = pos_.global_step;
  result_.images_per_second = images_per_second();
  result_.skipped_steps = scaler_.skipped_steps();
  if (scaler_.enabled())
    progress_.line(str_cat("fp16 loss scaling: ", result_.skipped_steps,
                           " steps of this run skipped (inf/NaN gradients), final scale ",
                           scaler_.get_scale()));
  progress_.line(str_cat("training throughput: ", static_cast<int64_t>(result_.images_per_second),
                         " img/s (all ranks) over ", world_ * images_trained_, " images"));
  save(pos_);
  if (job_.leader() && !c_.save_path.empty()) progress_.line("saved checkpoint " + c_.save_path);
  return result_;
}

}  // namespace ringgrad::nn

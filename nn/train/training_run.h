// One training run of ringgrad-train, in named steps: the constructor sets up the data, model,
// optimiser and the position to resume from; start() wraps the model in DDP and opens the
// logs; run_epoch() trains one epoch; finish() reports the totals and writes the final
// checkpoint. train() (trainer.cpp) calls them in order. Blocking; rank 0 alone prints, logs
// and saves; throws on bad data or a non-finite loss.
#pragma once
#include <memory>
#include <string>

#include "comm/process_group/from_environment.h"
#include "core/device.h"
#include "nn/amp/grad_scaler.h"
#include "nn/data/dataloader.h"
#include "nn/data/mnist.h"
#include "nn/models/resnet.h"
#include "nn/optim/lr_schedule.h"
#include "nn/optim/sgd.h"
#include "nn/parallel/distributed_data_parallel.h"
#include "nn/train/checkpoint.h"
#include "nn/train/progress.h"
#include "nn/train/train_config.h"

namespace ringgrad::nn {

class TrainingRun {
 public:
  // `c` and `job` must outlive the run; `threads` is only reported in the banner.
  TrainingRun(const TrainConfig& c, Device device, comm::DistributedJob& job, int threads);

  const TrainingPosition& position() const { return pos_; }
  // The checkpoint resumed is at or past --max-steps.
  bool nothing_left() const { return c_.max_steps > 0 && pos_.global_step >= c_.max_steps; }
  void start();                   // DDP, the logs and the banner
  bool run_epoch(int64_t epoch);  // false when --max-steps ended the run inside it
  TrainResult finish();           // the totals, the final checkpoint

 private:
  struct Splits {
    Dataset train, test;
  };
  struct EpochTally;  // one epoch's running sums on this rank

  static Splits load_data(const TrainConfig& c);
  double step(const Batch& batch, int64_t epoch, EpochTally& tally);
  void report_step(int64_t epoch, double loss, const EpochTally& tally);
  void close_epoch(int64_t epoch, const EpochTally& tally, bool evaluate_now);
  void save(const TrainingPosition& at);
  Variable forward(const Variable& x) { return ddp_ ? ddp_->forward(x) : model_->forward(x); }
  double images_per_second() const;

  const TrainConfig& c_;
  const Device device_;
  comm::DistributedJob& job_;
  const int threads_, world_, rank_;
  const Splits data_;
  const std::shared_ptr<ResNet> model_;
  Sgd optimizer_;
  amp::GradScaler scaler_;
  const std::string resume_path_;
  const int batch_size_;
  DataLoader loader_;
  const int64_t steps_per_epoch_, total_steps_;
  const LrSchedule schedule_;
  CheckpointInfo info_;
  TrainingPosition pos_;
  std::unique_ptr<DistributedDataParallel> ddp_;
  ProgressReporter progress_;
  std::unique_ptr<JsonLog> json_;
  // Over the whole run, on this rank.
  double train_seconds_ = 0;
  int64_t images_trained_ = 0;
  TrainResult result_;
};

}  // namespace ringgrad::nn

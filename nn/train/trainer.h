// The training loop of ringgrad-train: data, model, SGD with a learning-rate schedule,
// progress, per-epoch evaluation on the whole test set, checkpoints and resume. Launched as
// several processes (ringgrad-run), it trains data-parallel: the model is wrapped in DDP and
// each rank reads its shard. Blocking; prints progress to stdout; throws on bad configuration
// or data.
#pragma once
#include "nn/train/train_config.h"

namespace ringgrad::nn {

TrainResult train(const TrainConfig& config);

}  // namespace ringgrad::nn

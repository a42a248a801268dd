// The training loop of ringgrad-train: data, model, SGD with a learning-rate schedule,
// progress, per-epoch evaluation on the whole test set, checkpoints and resume. One process
// for now. Blocking; prints progress to stdout; throws on bad configuration or data.
#pragma once
#include "nn/train/train_config.h"

namespace ringgrad::nn {

TrainResult train(const TrainConfig& config);

}  // namespace ringgrad::nn

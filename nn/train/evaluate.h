// Test-set evaluation, sharded over the ranks of a data-parallel job: each rank scores the
// samples r, r + world, ... (no padding), and the sums (loss, correct, count) are all-reduced,
// so the accuracy is over the whole test set, each image counted exactly once.
#pragma once
#include "comm/process_group/process_group.h"
#include "nn/data/mnist.h"
#include "nn/modules/module.h"

namespace ringgrad::nn {

struct EvalResult {
  double loss = 0, accuracy = 0;
  int64_t count = 0;
};

// group may be null (one process). Runs under no_grad in eval mode, restores train mode.
// Batches are assembled on the host and scored on the device of the model's parameters.
EvalResult evaluate(Module& model, const Dataset& test, int64_t batch_size,
                    comm::ProcessGroup* group);

}  // namespace ringgrad::nn

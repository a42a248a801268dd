// Tests of a whole training step (model + loss + backward + SGD): it reduces the loss, and after
// the first iteration it takes no new memory from the system (every buffer comes from the
// caching allocator), as the foundation issue requires.
#include <doctest/doctest.h>

#include "core/cpu_allocator.h"
#include "nn/autograd/ops.h"
#include "nn/data/mnist.h"
#include "nn/models/resnet.h"
#include "nn/optim/sgd.h"

using namespace ringgrad;
using namespace ringgrad::nn;

TEST_CASE("training step: the loss falls and no tensor memory is allocated after step 1") {
  Generator rng(3);
  auto model = make_model("resnet8", rng);
  kernels::SgdParams opts;
  opts.lr = 0.05;
  opts.momentum = 0.9;
  opts.weight_decay = 5e-4;
  Sgd sgd(model->parameters(), opts);
  Dataset data = synthetic_mnist(32, 11);
  auto step = [&] {
    sgd.zero_grad();
    Variable loss = cross_entropy(model->forward(Variable(data.images)), data.labels);
    backward(loss);
    sgd.step();
    return loss.value().item();
  };
  const double first = step();
  step();  // lets the cache settle: step 1 kept some gradients that step 2 hands back
  const size_t allocations = cpu_cache_stats().system_allocations;
  double last = 0;
  for (int i = 0; i < 8; ++i) last = step();
  CHECK(cpu_cache_stats().system_allocations == allocations);
  CHECK(last < first);
}

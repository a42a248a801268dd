// Tests of the trainer's device plumbing that run without a GPU (nn/train/training_device.cpp,
// trainer.cpp): the CUDA refusal naming its reason before any rendezvous or
// data loading, --backend nccl needing CUDA tensors, and BatchNorm's batch counter (counted by
// kernels::increment_ on the buffer's own device). The CUDA side is tests/gpu.
#include <doctest/doctest.h>

#include "core/cuda_memory.h"
#include "nn/modules/layers.h"
#include "nn/train/trainer.h"
#include "nn/train/training_device.h"
#include "tests/skip.h"

using namespace ringgrad;
using namespace ringgrad::nn;

TEST_CASE("training device: cpu, and cuda or the reason there is none") {
  CHECK(select_training_device(DeviceType::cpu) == Device::cpu());
  if (cuda_device_count() > 0) {
    MESSAGE("a CUDA device is visible: the refusal without one is not exercised here");
    CHECK(select_training_device(DeviceType::cuda).is_cuda());
    return;
  }
  const std::string expected =
      "--device cuda: no usable CUDA device (" + cuda_unavailable_reason() + ")";
  CHECK_THROWS_WITH_AS(select_training_device(DeviceType::cuda),
                       doctest::Contains(expected.c_str()), Error);
}

TEST_CASE("training device: train() refuses cuda without a device before reading any data") {
  if (cuda_device_count() > 0)
    return ringgrad::testing::skip_test("a CUDA device is visible: nothing to refuse");
  TrainConfig c;
  c.device = DeviceType::cuda;
  c.data_dir = "/nonexistent";  // reading it would fail with another message
  CHECK_THROWS_WITH_AS(train(c), doctest::Contains("no usable CUDA device"), Error);
}

TEST_CASE("training device: --backend nccl needs --device cuda") {
  TrainConfig c;
  c.backend = comm::Backend::nccl;
  c.data_dir = "/nonexistent";
  CHECK_THROWS_WITH_AS(train(c), doctest::Contains("--backend nccl reduces CUDA tensors only"),
                       Error);
}

TEST_CASE("training device: BatchNorm2d counts training batches in its buffer, not eval ones") {
  BatchNorm2d bn(3);
  Tensor x = Tensor::full({2, 3, 4, 4}, 0.5);
  x.data<float>()[0] = 2.0f;  // some variance
  Tensor* counter = nullptr;
  for (auto& [name, buffer] : bn.named_buffers())
    if (name == "num_batches_tracked") counter = buffer;
  REQUIRE(counter != nullptr);
  bn.forward(Variable(x));
  bn.forward(Variable(x));
  CHECK(counter->item() == 2);
  bn.eval();
  NoGradGuard no_grad;
  bn.forward(Variable(x));
  CHECK(counter->item() == 2);
}

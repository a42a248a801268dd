// Checkpoints refuse to resume another run (seed, global batch, data), an incomplete optimizer
// state, a position the run never passes through and a weights-only file; load_weights takes
// weights alone, and a file that does not fit names every missing, misshapen and unexpected
// tensor while the model keeps its values.
#include <doctest/doctest.h>

#include <algorithm>

#include "core/rng.h"
#include "nn/autograd/ops.h"
#include "nn/data/mnist.h"
#include "nn/modules/layers.h"
#include "nn/serialize/safetensors.h"
#include "nn/train/checkpoint.h"
#include "tests/nn/temp_dir.h"

using namespace ringgrad;
using namespace ringgrad::nn;

namespace {

// A 4 -> 3 linear model after one SGD step with momentum, so that every momentum buffer exists.
struct Trained {
  Generator g{5};
  Linear model{4, 3, g};
  Sgd sgd{model.parameters(), [] {
            kernels::SgdParams o;
            o.lr = 0.1;
            o.momentum = 0.9;
            return o;
          }()};
  Trained() {
    Tensor x = Tensor::full({2, 4}, 0.5);
    backward(cross_entropy(model.forward(Variable(x)), Tensor::from_vector<int64_t>({0, 2}, {2})));
    sgd.step();
  }
};

// 5 epochs of 10 steps of 8 images on 80 images.
CheckpointInfo run_info() {
  CheckpointInfo info{"linear", /*seed=*/3, /*total_steps=*/50};
  info.global_batch = 8;
  info.dataset_size = 80;
  info.data_crc32 = 0x1234abcd;
  info.steps_per_epoch = 10;
  return info;
}

// The message of what `f` throws as InvalidArgument ("" when it throws nothing).
template <class F>
std::string invalid_argument_of(F&& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.message();
  }
  return "";
}

// The checkpoint at `from` rewritten to `to` with `edit` applied to its tensors and metadata.
template <class Edit>
void rewrite(const std::string& from, const std::string& to, Edit&& edit) {
  TensorFile file = load_safetensors(from);
  edit(file.tensors, file.metadata);
  save_safetensors(to, file.tensors, file.metadata);
}

std::vector<float> values(Module& m) {
  std::vector<float> out;
  for (auto& [name, t] : m.state_dict())
    for (float v : t.to_vector<float>()) out.push_back(v);
  return out;
}

}  // namespace

TEST_CASE("checkpoint: resuming with another seed, global batch or data set names both values") {
  nn::testing::TempDir dir;
  Trained run;
  const std::string path = dir.file("ck.safetensors");
  save_checkpoint(path, run.model, run.sgd, {1, 2, 12}, run_info());
  Trained other;
  const TrainingPosition pos = load_checkpoint(path, other.model, other.sgd, run_info());
  CHECK(pos.epoch == 1);
  CHECK(pos.global_step == 12);
  CHECK(values(other.model) == values(run.model));

  CheckpointInfo seed = run_info();
  seed.seed = 4;
  std::string msg =
      invalid_argument_of([&] { load_checkpoint(path, other.model, other.sgd, seed); });
  CHECK(msg.find("--seed 3, this run has 4") != std::string::npos);
  CHECK(msg.find("--init-from") != std::string::npos);

  CheckpointInfo batch = run_info();
  batch.global_batch = 16;
  msg = invalid_argument_of([&] { load_checkpoint(path, other.model, other.sgd, batch); });
  CHECK(msg.find("(--batch-size x processes) of 8, this run has 16") != std::string::npos);

  CheckpointInfo size = run_info();
  size.dataset_size = 60000;
  msg = invalid_argument_of([&] { load_checkpoint(path, other.model, other.sgd, size); });
  CHECK(msg.find("a training set of size 80, this run has 60000") != std::string::npos);

  CheckpointInfo data = run_info();
  data.data_crc32 = 0x0234abcd;  // same size, other content
  msg = invalid_argument_of([&] { load_checkpoint(path, other.model, other.sgd, data); });
  CHECK(msg.find("of CRC32 1234abcd, this run has 0234abcd") != std::string::npos);

  CheckpointInfo model = run_info();
  model.model = "resnet8";
  msg = invalid_argument_of([&] { load_checkpoint(path, other.model, other.sgd, model); });
  CHECK(msg.find("holds model 'linear', not 'resnet8'") != std::string::npos);
}

TEST_CASE("checkpoint: missing, stray or misshapen momentum buffers are refused, not zeroed") {
  nn::testing::TempDir dir;
  Trained run;
  const std::string path = dir.file("ck.safetensors"), edited = dir.file("edited.safetensors");
  save_checkpoint(path, run.model, run.sgd, {0, 1, 1}, run_info());
  CHECK(load_safetensors(path).metadata.at("momentum_buffers") == "2");
  Trained other;
  auto refusal = [&] {
    return invalid_argument_of(
        [&] { load_checkpoint(edited, other.model, other.sgd, run_info()); });
  };
  auto drop = [](const std::string& prefix) {
    return [prefix](NamedTensors& t, auto&) {
      t.erase(std::remove_if(t.begin(), t.end(),
                             [&](auto& e) { return e.first.rfind(prefix, 0) == 0; }),
              t.end());
    };
  };
  rewrite(path, edited, drop("optimizer.momentum_buffer.bias"));
  CHECK(refusal().find("holds 1 momentum buffers, its metadata says 2 (2 parameters)") !=
        std::string::npos);
  rewrite(path, edited, drop("optimizer."));  // as a user dropping PyTorch's optimizer entries
  CHECK(refusal().find("holds 0 momentum buffers, its metadata says 2") != std::string::npos);
  rewrite(path, edited, [](NamedTensors& t, auto&) {
    t.emplace_back("optimizer.momentum_buffer.fc.weight", Tensor::zeros({3, 4}));
  });
  CHECK(refusal().find("unexpected optimizer entry 'optimizer.momentum_buffer.fc.weight'") !=
        std::string::npos);
  rewrite(path, edited, [](NamedTensors& t, auto&) {
    for (auto& [name, tensor] : t)
      if (name == "optimizer.momentum_buffer.weight") tensor = Tensor::zeros({4, 3});
  });
  CHECK(
      refusal().find("'optimizer.momentum_buffer.weight' has shape [4, 3], its parameter [3, 4]") !=
      std::string::npos);

  // A file older than the count: all buffers are needed when this run uses momentum.
  rewrite(path, edited, [](NamedTensors& t, std::map<std::string, std::string>& meta) {
    meta.erase("momentum_buffers");
    t.pop_back();
  });
  CHECK(refusal().find("holds 1 momentum buffers, this run needs 2") != std::string::npos);

  // The buffers that are there come back bit for bit.
  load_checkpoint(path, other.model, other.sgd, run_info());
  for (size_t i = 0; i < 2; ++i)
    CHECK(other.sgd.momentum_buffers()[i].to_vector<float>() ==
          run.sgd.momentum_buffers()[i].to_vector<float>());
}

TEST_CASE("checkpoint: no momentum buffers yet (every fp16 step skipped so far) resumes") {
  nn::testing::TempDir dir;
  Generator g(5);
  Linear model(4, 3, g);
  kernels::SgdParams momentum;
  momentum.momentum = 0.9;
  Sgd sgd(model.parameters(), momentum);  // no step taken: no buffer exists
  save_checkpoint(dir.file("ck.safetensors"), model, sgd, {0, 3, 3}, run_info());
  Sgd resumed(model.parameters(), momentum);
  CHECK(load_checkpoint(dir.file("ck.safetensors"), model, resumed, run_info()).global_step == 3);
  CHECK_FALSE(resumed.momentum_buffers()[0].defined());
}

TEST_CASE("checkpoint: a position this run never passes through is refused") {
  nn::testing::TempDir dir;
  Trained run;
  const std::string path = dir.file("ck.safetensors"), edited = dir.file("edited.safetensors");
  save_checkpoint(path, run.model, run.sgd, {1, 10, 20}, run_info());  // the end of epoch 2
  Trained other;
  CHECK(load_checkpoint(path, other.model, other.sgd, run_info()).global_step == 20);
  const std::vector<std::map<std::string, std::string>> bad = {
      {{"step", "-5"}, {"epoch", "0"}, {"batch_in_epoch", "0"}},
      {{"step", "12"}, {"epoch", "0"}, {"batch_in_epoch", "2"}},   // step 12 is in epoch index 1
      {{"step", "15"}, {"epoch", "0"}, {"batch_in_epoch", "15"}},  // an epoch has 10 steps
      {{"step", "9223372036854775807"}, {"epoch", "0"}, {"batch_in_epoch", "7"}},
  };
  for (const auto& position : bad) {
    rewrite(path, edited, [&](auto&, std::map<std::string, std::string>& meta) {
      for (auto& [key, value] : position) meta[key] = value;
    });
    CAPTURE(position.at("step"));
    CHECK_THROWS_WITH_AS(load_checkpoint(edited, other.model, other.sgd, run_info()),
                         doctest::Contains("is impossible for a run of 10 steps per epoch"),
                         IoError);
  }
  // Consistent, but past the 50 steps of this run (5 epochs): a run with fewer --epochs.
  rewrite(path, edited, [](auto&, std::map<std::string, std::string>& meta) {
    meta["step"] = "60";
    meta["epoch"] = "5";
    meta["batch_in_epoch"] = "10";
  });
  CHECK(invalid_argument_of([&] {
          load_checkpoint(edited, other.model, other.sgd, run_info());
        }).find("is at step 60, past the 50 steps of this run") != std::string::npos);
  rewrite(path, edited,
          [](auto&, std::map<std::string, std::string>& meta) { meta["step"] = "2x"; });
  CHECK_THROWS_WITH_AS(load_checkpoint(edited, other.model, other.sgd, run_info()),
                       doctest::Contains("metadata 'step' = '2x' is not a valid number"), IoError);
}

TEST_CASE("checkpoint: a weights-only file is refused by resume and initialises a fresh run") {
  nn::testing::TempDir dir;
  Trained run;
  const std::string weights = dir.file("weights.safetensors");
  save_safetensors(weights, run.model.state_dict());  // as a PyTorch state dict: no metadata
  Trained other;
  const std::string msg =
      invalid_argument_of([&] { load_checkpoint(weights, other.model, other.sgd, run_info()); });
  CHECK(msg.find("is not a ringgrad-train checkpoint") != std::string::npos);
  CHECK(msg.find("--init-from " + weights) != std::string::npos);

  load_weights(weights, other.model);
  CHECK(values(other.model) == values(run.model));
  // A full checkpoint also initialises a fresh run: its optimizer entries are ignored.
  const std::string full = dir.file("full.safetensors");
  save_checkpoint(full, run.model, run.sgd, {0, 1, 1}, run_info());
  Generator g(9);
  Linear fresh(4, 3, g);
  load_weights(full, fresh);
  CHECK(values(fresh) == values(run.model));
}

TEST_CASE("checkpoint: weights that do not fit name every missing, misshapen, unexpected tensor") {
  nn::testing::TempDir dir;
  const std::string path = dir.file("w.safetensors");
  save_safetensors(path, {{"weight", Tensor::zeros({3, 5})}, {"extra.weight", Tensor::zeros({1})}});
  Generator g(1);
  Linear model(4, 3, g);
  const std::vector<float> before = values(model);
  const std::string msg = invalid_argument_of([&] { load_weights(path, model); });
  CHECK(msg.find(path) != std::string::npos);
  CHECK(msg.find("missing 'bias'") != std::string::npos);
  CHECK(msg.find("misshapen 'weight' ([3, 5] in the file, [3, 4] in the model)") !=
        std::string::npos);
  CHECK(msg.find("unexpected 'extra.weight'") != std::string::npos);
  CHECK(values(model) == before);  // nothing was copied
}

TEST_CASE("data fingerprint: equal data agree, one changed pixel or label does not") {
  const Dataset a = synthetic_mnist(50, 1), b = synthetic_mnist(50, 1);
  CHECK(fingerprint(a) == fingerprint(b));
  Dataset pixel = synthetic_mnist(50, 1);
  pixel.images.data<float>()[1000] += 1.0f;
  CHECK(fingerprint(pixel) != fingerprint(a));
  Dataset label = synthetic_mnist(50, 1);
  label.labels.data<int64_t>()[7] = (label.labels.data<int64_t>()[7] + 1) % 10;
  CHECK(fingerprint(label) != fingerprint(a));
  CHECK(fingerprint(synthetic_mnist(49, 1)) != fingerprint(a));
}

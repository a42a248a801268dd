// Weights move between ringgrad and PyTorch both ways: PyTorch loads a checkpoint that
// ringgrad-train wrote and scores the same test accuracy; ringgrad loads weights that PyTorch
// saved and computes PyTorch's logits. The PyTorch half is torch_interop.py, run with the
// system Python (/usr/bin/python3, Debian's python3-torch); without torch the cases skip.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/rng.h"
#include "nn/autograd/ops.h"
#include "nn/models/resnet.h"
#include "nn/serialize/safetensors.h"
#include "tests/integration/launch_harness.h"
#include "tests/skip.h"

using namespace ringgrad;
using namespace ringgrad::testing;
using std::chrono::seconds;

namespace {

constexpr const char* kPython = "/usr/bin/python3";
constexpr const char* kFashionMnist = "/usr/share/datasets/fashion-mnist";

// Empty when torch imports; else why not.
std::string torch_missing() {
  static const std::string why = []() -> std::string {
    try {
      if (run({kPython, "-c", "import torch, torchvision"}, seconds(120)).status.ok()) return "";
    } catch (const std::exception&) {
    }
    return std::string(kPython) +
           " cannot import torch and torchvision (Debian: python3-torch, "
           "python3-torchvision; scripts/test.sh installs them as root)";
  }();
  return why;
}

RunResult interop(std::vector<std::string> args, seconds deadline = seconds(300)) {
  args.insert(args.begin(), {kPython, TORCH_INTEROP_SCRIPT});
  RunResult r = run(args, deadline);
  INFO(r.err);
  REQUIRE(r.status.ok());
  return r;
}

// The last epoch record's test accuracy in a --log-json file.
double logged_test_accuracy(const std::string& path) {
  std::ifstream in(path);
  double accuracy = -1;
  for (std::string line; std::getline(in, line);) {
    const auto record = nlohmann::json::parse(line);
    if (record["type"] == "epoch") accuracy = record.at("test_accuracy").get<double>();
  }
  return accuracy;
}

}  // namespace

TEST_CASE("PyTorch scores a checkpoint that ringgrad-train wrote at ringgrad's test accuracy") {
  if (const std::string why = torch_missing(); !why.empty()) return skip_test(why);
  if (!std::filesystem::is_directory(kFashionMnist))
    return skip_test(std::string("no Fashion-MNIST in ") + kFashionMnist);
  TempDir dir;
  const std::string data = dir.path() + "/data", ckpt = dir.path() + "/resnet8.safetensors",
                    log = dir.path() + "/log.jsonl";
  // One epoch over 6000 images keeps the test short; the 1000 test images are scored by both.
  interop({"subset", kFashionMnist, data, "6000", "1000"});
  RunResult trained =
      run({RINGGRAD_TRAIN_PATH, "--data", data, "--model", "resnet8", "--epochs", "1",
           "--batch-size", "64", "--threads", "2", "--save", ckpt, "--log-json", log},
          seconds(600));
  INFO(trained.err);
  REQUIRE(trained.status.ok());
  const double ours = logged_test_accuracy(log);
  CHECK(ours > 0.5);  // it learned something, so agreeing is not agreeing on noise

  RunResult scored = interop({"evaluate", "resnet8", ckpt, data});
  double theirs = -1;
  std::istringstream(scored.out.substr(scored.out.find("pytorch accuracy ") + 17)) >> theirs;
  INFO(scored.out);
  // The same weights in two implementations: logits agree to ~1e-5, so at most an image
  // whose top two logits are that close may flip.
  CHECK(std::abs(theirs - ours) <= 0.001 + 1e-12);
}

TEST_CASE("ringgrad loads weights PyTorch saved and computes PyTorch's logits within 1e-5") {
  if (const std::string why = torch_missing(); !why.empty()) return skip_test(why);
  for (const std::string model_name : {"resnet8", "resnet20", "resnet18"}) {
    CAPTURE(model_name);
    TempDir dir;
    interop({"export", model_name, "7", dir.path()});
    const nn::TensorFile weights = nn::load_safetensors(dir.path() + "/weights.safetensors");
    const nn::TensorFile batch = nn::load_safetensors(dir.path() + "/batch.safetensors");

    Generator rng(0);  // any initial values: every one is overwritten by PyTorch's
    auto model = nn::make_model(model_name, rng);
    model->load_state_dict(weights.tensors);  // strict: every name and shape must match
    model->eval();
    nn::NoGradGuard no_grad;
    const Tensor logits = model->forward(nn::Variable(batch.at("input"))).value();
    const Tensor& want = batch.at("logits");
    REQUIRE(logits.shape() == want.shape());
    const auto got = logits.to_vector<float>(), expected = want.to_vector<float>();
    double worst = 0, largest = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      worst = std::max(worst, std::abs(double(got[i]) - expected[i]));
      largest = std::max(largest, std::abs(double(expected[i])));
    }
    CAPTURE(largest);
    CHECK(largest > 0.01);  // the logits are not all zero, so agreeing means something
    CHECK(worst <= 1e-5);
  }
}

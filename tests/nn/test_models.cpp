// Tests for nn/modules and nn/models: parameter counts, PyTorch/torchvision names and order.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <map>

#include "nn/models/resnet.h"

using namespace ringgrad;
using namespace ringgrad::nn;

TEST_CASE("models: parameter counts match torchvision's (1 input channel, 10 classes)") {
  Generator rng(0);
  CHECK(make_model("resnet18", rng)->num_parameters() == 11175370);
  CHECK(make_model("resnet20", rng)->num_parameters() == 272186);
  CHECK(make_model("resnet8", rng)->num_parameters() == 77754);
  CHECK_THROWS_AS(make_model("resnet19", rng), InvalidArgument);
}

TEST_CASE("models: state dict names and order are torchvision's") {
  Generator rng(0);
  auto model = make_model("resnet18", rng);
  auto sd = model->state_dict();
  std::vector<std::string> first;
  for (size_t i = 0; i < 8; ++i) first.push_back(sd[i].first);
  CHECK(first == std::vector<std::string>{"conv1.weight", "bn1.weight", "bn1.bias",
                                          "bn1.running_mean", "bn1.running_var",
                                          "bn1.num_batches_tracked", "layer1.0.conv1.weight",
                                          "layer1.0.bn1.weight"});
  std::map<std::string, Shape> shapes;
  for (auto& [n, t] : sd) shapes[n] = t.shape();
  CHECK(shapes.at("layer2.0.downsample.0.weight") == Shape{128, 64, 1, 1});
  CHECK(shapes.at("layer2.0.downsample.1.running_var") == Shape{128});
  CHECK(shapes.at("layer4.1.conv2.weight") == Shape{512, 512, 3, 3});
  CHECK(shapes.at("fc.weight") == Shape{10, 512});
  CHECK(shapes.at("bn1.num_batches_tracked").numel() == 1);
  CHECK(sd.back().first == "fc.bias");
  CHECK(sd.size() == 122);  // torchvision resnet18: 62 parameters + 60 BN buffers
  CHECK(shapes.count("layer1.0.downsample.0.weight") == 0);  // identity shortcut there
}

TEST_CASE("models: resnet20 layout") {
  Generator rng(0);
  auto model = make_model("resnet20", rng);
  std::map<std::string, Shape> shapes;
  for (auto& [n, t] : model->state_dict()) shapes[n] = t.shape();
  CHECK(shapes.at("conv1.weight") == Shape{16, 1, 3, 3});
  CHECK(shapes.at("layer3.2.conv2.weight") == Shape{64, 64, 3, 3});
  CHECK(shapes.at("layer3.0.downsample.0.weight") == Shape{64, 32, 1, 1});
  CHECK(shapes.count("layer4.0.conv1.weight") == 0);
  CHECK(shapes.at("fc.weight") == Shape{10, 64});
}

TEST_CASE("models: initialisation is PyTorch's") {
  Generator rng(1);
  auto model = make_model("resnet20", rng);
  auto sd = model->state_dict();
  std::map<std::string, Tensor> by_name(sd.begin(), sd.end());
  // kaiming normal, fan_out: std = sqrt(2 / (64 * 3 * 3)) for a 64-channel 3x3 conv
  Tensor w = by_name.at("layer3.1.conv1.weight");
  double sum_sq = 0;
  for (float v : w.to_vector<float>()) sum_sq += double(v) * v;
  CHECK(std::sqrt(sum_sq / w.numel()) == doctest::Approx(std::sqrt(2.0 / 576)).epsilon(0.03));
  for (float v : by_name.at("fc.weight").to_vector<float>()) CHECK(std::abs(v) <= 0.125f);
  for (float v : by_name.at("bn1.weight").to_vector<float>()) CHECK(v == 1.0f);
  for (float v : by_name.at("bn1.running_var").to_vector<float>()) CHECK(v == 1.0f);
}

TEST_CASE("models: load_state_dict copies by name and rejects mismatches") {
  Generator a_rng(1), b_rng(2);
  auto a = make_model("resnet8", a_rng), b = make_model("resnet8", b_rng);
  b->load_state_dict(a->state_dict());
  auto sa = a->state_dict(), sb = b->state_dict();
  for (size_t i = 0; i < sa.size(); ++i) {
    REQUIRE(sa[i].second.nbytes() == sb[i].second.nbytes());
    CHECK(std::memcmp(sa[i].second.raw_data(), sb[i].second.raw_data(), sa[i].second.nbytes()) ==
          0);
  }
  auto wrong = a->state_dict();
  wrong[0].second = Tensor::zeros({3});
  CHECK_THROWS_WITH_AS(b->load_state_dict(wrong), doctest::Contains("conv1.weight"),
                       InvalidArgument);
  auto extra = a->state_dict();
  extra.emplace_back("bogus.weight", Tensor::zeros({1}));
  CHECK_THROWS_AS(b->load_state_dict(extra), InvalidArgument);
  b->load_state_dict(extra, /*strict=*/false);
}

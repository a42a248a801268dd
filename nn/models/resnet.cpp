// ResNet construction and forward.
#include "nn/models/resnet.h"

namespace ringgrad::nn {

BasicBlock::BasicBlock(int in_channels, int out_channels, int stride, Generator& rng) {
  conv1_ = register_module(
      "conv1", std::make_shared<Conv2d>(in_channels, out_channels, 3, stride, 1, false, rng));
  bn1_ = register_module("bn1", std::make_shared<BatchNorm2d>(out_channels));
  conv2_ = register_module(
      "conv2", std::make_shared<Conv2d>(out_channels, out_channels, 3, 1, 1, false, rng));
  bn2_ = register_module("bn2", std::make_shared<BatchNorm2d>(out_channels));
  if (stride != 1 || in_channels != out_channels) {
    downsample_ = register_module("downsample", std::make_shared<Sequential>());
    downsample_->push_back(
        std::make_shared<Conv2d>(in_channels, out_channels, 1, stride, 0, false, rng));
    downsample_->push_back(std::make_shared<BatchNorm2d>(out_channels));
  }
}

Variable BasicBlock::forward(const Variable& x) {
  const Variable out = bn1_->forward_relu(conv1_->forward(x));
  return bn2_->forward_relu(conv2_->forward(out), downsample_ ? downsample_->forward(x) : x);
}

ResNet::ResNet(const ResNetConfig& config, Generator& rng) {
  RG_CHECK(!config.widths.empty() && config.widths.size() == config.blocks.size(),
           "ResNetConfig needs one width per stage");
  const int stem = config.widths[0];
  if (config.imagenet_stem) {
    conv1_ = register_module(
        "conv1", std::make_shared<Conv2d>(config.in_channels, stem, 7, 2, 3, false, rng));
    bn1_ = register_module("bn1", std::make_shared<BatchNorm2d>(stem));
    maxpool_ = register_module("maxpool", std::make_shared<MaxPool2d>(3, 2, 1));
  } else {
    conv1_ = register_module(
        "conv1", std::make_shared<Conv2d>(config.in_channels, stem, 3, 1, 1, false, rng));
    bn1_ = register_module("bn1", std::make_shared<BatchNorm2d>(stem));
  }
  int channels = stem;
  for (size_t s = 0; s < config.widths.size(); ++s) {
    auto stage = register_module("layer" + std::to_string(s + 1), std::make_shared<Sequential>());
    for (int b = 0; b < config.blocks[s]; ++b) {
      const int stride = (s > 0 && b == 0) ? 2 : 1;
      stage->push_back(std::make_shared<BasicBlock>(channels, config.widths[s], stride, rng));
      channels = config.widths[s];
    }
    stages_.push_back(stage);
  }
  fc_ = register_module("fc", std::make_shared<Linear>(channels, config.num_classes, rng));
}

Variable ResNet::forward(const Variable& x) {
  Variable h = bn1_->forward_relu(conv1_->forward(x));
  if (maxpool_) h = maxpool_->forward(h);
  for (auto& stage : stages_) h = stage->forward(h);
  return fc_->forward(global_avg_pool(h));
}

const std::vector<std::string>& model_names() {
  static const std::vector<std::string> names = {"resnet8", "resnet18", "resnet20"};
  return names;
}

std::shared_ptr<ResNet> make_model(const std::string& name, Generator& rng, int in_channels,
                                   int num_classes) {
  ResNetConfig c;
  c.in_channels = in_channels;
  c.num_classes = num_classes;
  if (name == "resnet18") {
    c.imagenet_stem = true;
    c.widths = {64, 128, 256, 512};
    c.blocks = {2, 2, 2, 2};
  } else if (name == "resnet20" || name == "resnet8") {
    c.imagenet_stem = false;
    c.widths = {16, 32, 64};
    const int n = name == "resnet20" ? 3 : 1;
    c.blocks = {n, n, n};
  } else {
    RG_THROW(InvalidArgument, "unknown model '", name, "' (choose resnet8, resnet18 or resnet20)");
  }
  return std::make_shared<ResNet>(c, rng);
}

}  // namespace ringgrad::nn

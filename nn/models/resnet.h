// ResNets with BasicBlocks, named and initialised as torchvision's ResNet:
//   resnet18: 7x7/2 stem + 3x3/2 max-pool, stages of 2 blocks at 64/128/256/512 channels
//             (1 input channel, 10 classes: 11,175,370 parameters);
//   resnet20 / resnet8: CIFAR-style 3x3 stem with 16 channels, three stages of 3 (or 1)
//             blocks at 16/32/64 channels (272,186 and 77,754 parameters).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "nn/modules/layers.h"

namespace ringgrad::nn {

// conv3x3-bn-relu-conv3x3-bn, plus the identity (or a 1x1 conv + BN "downsample" where the
// shape changes), then relu of the sum.
class BasicBlock : public Module {
 public:
  BasicBlock(int in_channels, int out_channels, int stride, Generator& rng);
  Variable forward(const Variable& x) override;

 private:
  std::shared_ptr<Conv2d> conv1_, conv2_;
  std::shared_ptr<BatchNorm2d> bn1_, bn2_;
  std::shared_ptr<Sequential> downsample_;  // null when the identity fits
};

struct ResNetConfig {
  bool imagenet_stem = true;  // 7x7/2 conv + max-pool (torchvision) or 3x3/1 conv (CIFAR)
  std::vector<int> widths;    // channels per stage
  std::vector<int> blocks;    // BasicBlocks per stage
  int in_channels = 1;
  int num_classes = 10;
};

class ResNet : public Module {
 public:
  ResNet(const ResNetConfig& config, Generator& rng);
  Variable forward(const Variable& x) override;  // x: (N, C, H, W) -> logits (N, classes)

 private:
  std::shared_ptr<Conv2d> conv1_;
  std::shared_ptr<BatchNorm2d> bn1_;
  std::shared_ptr<MaxPool2d> maxpool_;  // null for the CIFAR stem
  std::vector<std::shared_ptr<Sequential>> stages_;
  std::shared_ptr<Linear> fc_;
};

const std::vector<std::string>& model_names();  // resnet8, resnet18, resnet20
// Builds a model by name; parameters drawn from rng. Throws InvalidArgument for unknown names.
std::shared_ptr<ResNet> make_model(const std::string& name, Generator& rng, int in_channels = 1,
                                   int num_classes = 10);

}  // namespace ringgrad::nn

"""ringgrad's models written in PyTorch, with the parameter names of ringgrad's checkpoints.

The one copy used by every script that runs PyTorch beside ringgrad: the throughput
comparisons here in bench/, the weights-interchange test (tests/integration/torch_interop.py)
and the DDP-on-ringgrad test (tests/torch_plugin/ddp.py). resnet8 and resnet20 are the
CIFAR-style ResNets (a 3x3 stem, widths 16/32/64); resnet18 is torchvision's, with a 1-channel
stem for MNIST-shaped input unless asked for 3 channels.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, 0, bias=False),
                                            nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (self.downsample(x) if self.downsample is not None else x))


class CifarResNet(nn.Module):
    """resnet8 (blocks=1) and resnet20 (blocks=3): widths 16, 32, 64, a 3x3 stem."""

    def __init__(self, blocks):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        cin = 16
        for s, width in enumerate([16, 32, 64]):
            stage = []
            for b in range(blocks):
                stage.append(BasicBlock(cin, width, 2 if s > 0 and b == 0 else 1))
                cin = width
            setattr(self, f"layer{s + 1}", nn.Sequential(*stage))
        self.fc = nn.Linear(64, 10)

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = self.layer3(self.layer2(self.layer1(h)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(h, 1), 1))


def make_model(name, in_channels=1):
    if name == "resnet8":
        return CifarResNet(1)
    if name == "resnet20":
        return CifarResNet(3)
    if name == "resnet18":
        import torchvision
        model = torchvision.models.resnet18(num_classes=10)
        if in_channels == 1:
            model.conv1 = nn.Conv2d(1, 64, 7, 2, 3, bias=False)
        return model
    raise SystemExit(f"unknown model {name}")

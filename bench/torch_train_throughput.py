# The PyTorch side of compare_torch.sh: the same models (torchvision ResNet-18 with a 1-channel
# stem; CIFAR-style ResNet-20 written out below), batch, threads and SGD settings as
# train_throughput, on random MNIST-shaped data. Prints the same one-line format.
# Run with the system interpreter: /usr/bin/python3 (Debian's python3-torch).
import argparse
import resource
import time

import torch
import torch.nn as nn
import torchvision


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                            nn.BatchNorm2d(cout))

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + (self.downsample(x) if self.downsample is not None else x))


class CifarResNet(nn.Module):
    def __init__(self, blocks):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        layers, cin = [], 16
        for i, width in enumerate([16, 32, 64]):
            stage = []
            for b in range(blocks):
                stage.append(BasicBlock(cin, width, 2 if (i > 0 and b == 0) else 1))
                cin = width
            layers.append(nn.Sequential(*stage))
        self.layer1, self.layer2, self.layer3 = layers
        self.fc = nn.Linear(64, 10)

    def forward(self, x):
        x = torch.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def make_model(name):
    if name == "resnet18":
        m = torchvision.models.resnet18(num_classes=10)
        m.conv1 = nn.Conv2d(1, 64, 7, 2, 3, bias=False)
        return m
    return CifarResNet({"resnet20": 3, "resnet8": 1}[name])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="resnet20")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=20)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = make_model(a.model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    x = torch.randn(a.batch_size, 1, 28, 28)
    y = torch.randint(0, 10, (a.batch_size,))
    loss_fn = nn.CrossEntropyLoss()

    def step():
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()

    for _ in range(a.warmup):
        step()
    start = time.perf_counter()
    for _ in range(a.steps):
        step()
    seconds = time.perf_counter() - start
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(f"{a.model} batch {a.batch_size} threads {a.threads} img/s "
          f"{a.batch_size * a.steps / seconds:.1f} peak_rss_mb {rss_mb:.1f}")


if __name__ == "__main__":
    main()

# DDP on "ringgrad" against DDP on Gloo, in the same processes: two replicas of one resnet18
# (torchvision's when installed, else the local one below, same layout), the same inputs on
# each rank, 5 SGD steps; the averaged gradients and the parameters must agree within 1e-5
# relative every step. With --fp16-hook both use PyTorch's fp16 compression comm hook (a
# Future chained with .then). Also a Python all_reduce of the loss and a clean teardown.
import argparse
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

import ringgrad_torch  # noqa: F401  (registers the "ringgrad" backend)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from torch_models import BasicBlock  # noqa: E402  (ringgrad's models, one copy for all scripts)


def local_resnet18(classes=10):
    """torchvision's resnet18 shape: stem, 4 stages of 2 basic blocks, pool, fc."""
    layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
              nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for cout, stride in [(64, 1), (128, 2), (256, 2), (512, 2)]:
        layers += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
        cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, classes)]
    return nn.Sequential(*layers)


def resnet18():
    try:
        import torchvision
        return torchvision.models.resnet18(num_classes=10), "torchvision"
    except ImportError:
        return local_resnet18(), "local"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fp16-hook", action="store_true")
    p.add_argument("--steps", type=int, default=5)
    a = p.parse_args()
    dist.init_process_group("ringgrad")
    rank, world = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    torch.manual_seed(0)
    base, source = resnet18()
    replicas = {}
    for name, group in [("ringgrad", None), ("gloo", gloo)]:
        model = local_resnet18() if source == "local" else resnet18()[0]
        model.load_state_dict(base.state_dict())
        ddp = DDP(model, process_group=group)
        if a.fp16_hook:
            ddp.register_comm_hook(group, default_hooks.fp16_compress_hook)
        replicas[name] = (ddp, torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9))
    failures = []
    gen = torch.Generator().manual_seed(100 + rank)
    for step in range(a.steps):
        x = torch.randn(4, 3, 64, 64, generator=gen)
        y = torch.randint(0, 10, (4,), generator=gen)
        grads = {}
        for name, (ddp, opt) in replicas.items():
            opt.zero_grad()
            loss = nn.functional.cross_entropy(ddp(x), y)
            loss.backward()
            grads[name] = [q.grad.clone() for q in ddp.parameters()]
            opt.step()
            mean_loss = loss.detach().clone()
            dist.all_reduce(mean_loss, dist.ReduceOp.AVG if name == "ringgrad" else dist.ReduceOp.SUM,
                            group=None if name == "ringgrad" else gloo)
            if name == "gloo":
                mean_loss /= world
            grads[name + " loss"] = [mean_loss]
        for what in ["", " loss"]:
            for i, (g_ring, g_gloo) in enumerate(zip(grads["ringgrad" + what], grads["gloo" + what])):
                scale = g_gloo.abs().max().item() or 1.0
                err = (g_ring - g_gloo).abs().max().item() / scale
                if err > 1e-5:
                    failures.append(f"step {step}: {'loss' if what else f'gradient {i}'} differs "
                                    f"by {err:.2e} of its largest element")
    params = [(a_, b_) for a_, b_ in zip(replicas["ringgrad"][0].parameters(),
                                         replicas["gloo"][0].parameters())]
    worst = max(((a_ - b_).abs().max() / (b_.abs().max() + 1e-12)).item() for a_, b_ in params)
    if worst > 1e-5:
        failures.append(f"parameters after {a.steps} steps differ by {worst:.2e} relative")
    dist.destroy_process_group()
    for f in failures:
        print(f"rank {rank}: FAIL {f}")
    print(f"rank {rank}: {source} resnet18, {a.steps} steps, fp16 hook {a.fp16_hook}: "
          f"{'FAILED' if failures else 'gradients equal to Gloo'}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()

# PyTorch's DDP tutorial (the basic torchrun example: a toy model, one SGD step) with the
# backend named "ringgrad" instead of "gloo" and `import ringgrad_torch`: the two-line change
# docs/pytorch.md describes. Started by ringgrad-run (or torchrun), which sets the env:// vars.
# The last lines are the test's: each rank's parameters must match rank 0's after the step.
# --require-local-rank-arg: the legacy torch.distributed.launch form, where the script reads its
# local rank from a --local-rank=N argument (the test checks it is LOCAL_RANK's).
import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.optim as optim
from torch.nn.parallel import DistributedDataParallel as DDP

import ringgrad_torch  # noqa: F401  (change 1 of 2)


class ToyModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.net1 = nn.Linear(10, 10)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(10, 5)

    def forward(self, x):
        return self.net2(self.relu(self.net1(x)))


def demo_basic():
    dist.init_process_group("ringgrad")  # change 2 of 2: was "gloo"
    rank = dist.get_rank()
    print(f"Start running basic DDP example on rank {rank}.")
    model = ToyModel()
    ddp_model = DDP(model)
    loss_fn = nn.MSELoss()
    optimizer = optim.SGD(ddp_model.parameters(), lr=0.001)
    optimizer.zero_grad()
    outputs = ddp_model(torch.randn(20, 10))
    labels = torch.randn(20, 5)
    loss_fn(outputs, labels).backward()
    optimizer.step()

    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    on_rank0 = flat.clone()
    dist.broadcast(on_rank0, 0)
    assert torch.equal(flat, on_rank0), f"rank {rank}: parameters differ from rank 0's"
    dist.destroy_process_group()
    print(f"Finished running basic DDP example on rank {rank}.")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--local-rank", "--local_rank", type=int)
    parser.add_argument("--require-local-rank-arg", action="store_true")
    args = parser.parse_args()
    if args.require_local_rank_arg:
        assert args.local_rank == int(os.environ["LOCAL_RANK"]), f"--local-rank={args.local_rank}"
    demo_basic()

# Hugging Face Accelerate on the ringgrad backend: a toy model trained for a few steps with
# Accelerator.prepare (DDP, a sharded DataLoader) and accelerator.backward, started by
# `accelerate launch` or by ringgrad-run. On CPU, Accelerate 1.x chooses "gloo" itself and
# refuses any other backend it is asked for (InitProcessGroupKwargs(backend=...) raises
# "Your assigned backend ... is not available, please use gloo"); it keeps a process group that
# already exists, though, so the script creates the "ringgrad" one first (docs/pytorch.md).
# Checks: the group Accelerate trains on is ringgrad's, every rank ends with the same
# parameters, and they moved.
#   --expect-backend-kwarg-refused: instead, check that Accelerate still refuses
#   InitProcessGroupKwargs(backend="ringgrad") on CPU, as the docs say.
import argparse

import torch
import torch.distributed as dist
from accelerate import Accelerator
from accelerate.utils import InitProcessGroupKwargs


def refused_kwarg():
    try:
        Accelerator(cpu=True, kwargs_handlers=[InitProcessGroupKwargs(backend="ringgrad")])
    except ValueError as e:
        assert "ringgrad is not available, please use gloo" in str(e), e
        print(f"Accelerate refuses backend='ringgrad' on CPU: {e}")
        return
    raise AssertionError("Accelerate took backend='ringgrad' on CPU: update docs/pytorch.md")


def train():
    dist.init_process_group("ringgrad")  # before Accelerator, which then keeps it
    accelerator = Accelerator(cpu=True)
    assert dist.get_backend() == "ringgrad", dist.get_backend()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    before = torch.cat([p.detach().flatten() for p in model.parameters()]).clone()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(64, 8)
    data = torch.utils.data.TensorDataset(x, x.sum(dim=1, keepdim=True))
    loader = torch.utils.data.DataLoader(data, batch_size=8)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for inputs, targets in loader:
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        accelerator.backward(loss)
        optimizer.step()
    after = torch.cat([p.detach().flatten() for p in accelerator.unwrap_model(model).parameters()])
    everyone = accelerator.gather(after.unsqueeze(0))
    assert all(torch.equal(row, after) for row in everyone), "ranks' parameters differ"
    assert not torch.equal(after, before), "no training step changed the parameters"
    print(f"rank {accelerator.process_index} of {accelerator.num_processes}: trained on "
          f"{dist.get_backend()}, parameters equal on every rank")
    accelerator.end_training()  # destroys the process group too


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--expect-backend-kwarg-refused", action="store_true")
    if p.parse_args().expect_backend_kwarg_refused:
        refused_kwarg()
    else:
        train()

# A plain PyTorch DDP-style script, run under ringgrad-run by test_torch_gloo: it initialises
# torch.distributed from the environment the launcher set (env://, Gloo) and all-reduces a
# rank-dependent tensor; it prints the result for the test to check.
import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
assert rank == int(os.environ["RANK"]) and world == int(os.environ["WORLD_SIZE"])
x = torch.arange(5, dtype=torch.float64) + 1000.0 * rank
dist.all_reduce(x)
print(f"rank {rank} of {world} allreduce " + " ".join(f"{v:.1f}" for v in x.tolist()), flush=True)
dist.barrier()
dist.destroy_process_group()

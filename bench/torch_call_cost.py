# CPU time of one 8-byte all_reduce at three depths of PyTorch's stack, in a world of one
# rank, so no peer's scheduling enters the figure: the backend's own call
# (`pg._get_backend(cpu).allreduce([x], opts).wait()`), the ProcessGroup's (dispatcher and the
# pre/post hooks, the flight recorder's among them) and `dist.all_reduce` (its Python on top).
# Prints the least thread CPU time per call of 3 rounds, in microseconds.
# Usage: PYTHONPATH=build/lib python torch_call_cost.py BACKEND [CALLS]
# (TORCH_FR_BUFFER_SIZE=0 in the environment turns the flight recorder off, to compare.)
import os
import sys
import time

import torch
import torch.distributed as dist


def main():
    backend = sys.argv[1]
    calls = int(sys.argv[2]) if len(sys.argv) > 2 else 50000
    if backend == "ringgrad":
        import ringgrad_torch  # noqa: F401  (registers the backend)
    port = 20000 + os.getpid() % 20000
    dist.init_process_group(backend, rank=0, world_size=1, init_method=f"tcp://127.0.0.1:{port}")
    x = torch.zeros(2)
    group = dist.group.WORLD
    own = group._get_backend(torch.device("cpu"))
    opts = dist.AllreduceOptions()
    depths = {
        "backend": lambda: own.allreduce([x], opts).wait(),
        "process_group": lambda: group.allreduce([x]).wait(),
        "dist.all_reduce": lambda: dist.all_reduce(x),
    }
    best = {}
    for _ in range(3):
        for name, call in depths.items():
            for _ in range(calls // 4):
                call()
            t0 = time.thread_time()
            for _ in range(calls):
                call()
            us = (time.thread_time() - t0) / calls * 1e6
            best[name] = min(us, best.get(name, us))
    print(backend, " ".join(f"{k} {v:.2f} us" for k, v in best.items()), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

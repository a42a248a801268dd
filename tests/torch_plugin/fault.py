# A rank killed (SIGKILL) while the others run a collective: every survivor's all_reduce
# raises a RuntimeError naming the lost peer well within the group's 30 s timeout, and the
# group can still be destroyed. The killed rank is given to launch.py with --killed.
import os
import signal
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import ringgrad_torch  # noqa: F401

VICTIM = int(sys.argv[1])
TIMEOUT_S = 30
dist.init_process_group("ringgrad", timeout=timedelta(seconds=TIMEOUT_S))
rank = dist.get_rank()
t = torch.ones(1 << 20)
dist.all_reduce(t)  # connected and working
if rank == VICTIM:
    os.kill(os.getpid(), signal.SIGKILL)
start = time.monotonic()
try:
    for _ in range(1000):
        dist.all_reduce(t)
    print(f"rank {rank}: FAIL all_reduce kept succeeding without rank {VICTIM}")
    sys.exit(1)
except RuntimeError as e:
    elapsed = time.monotonic() - start
    message = str(e).splitlines()[0]
    print(f"rank {rank}: after {elapsed:.1f} s: {type(e).__name__}: {message}")
    ok = elapsed < TIMEOUT_S and "ringgrad" in message and f"rank {VICTIM}" in message
dist.destroy_process_group()
print(f"rank {rank}: {'ok' if ok else 'FAIL: error too late or does not name the lost rank'}")
sys.exit(0 if ok else 1)

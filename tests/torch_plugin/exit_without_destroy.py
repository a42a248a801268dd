# A script that ends without destroy_process_group exits cleanly (status 0), ten times over:
# the backend's threads are stopped from an atexit handler before Python finalizes (a finalizing
# Python ends a thread that takes the GIL, which aborted the process inside the completer
# thread's destructor calls: "terminate called without an active exception").
import subprocess
import sys

CHILD = """
import torch, torch.distributed as dist
import ringgrad_torch
dist.init_process_group("ringgrad", store=dist.HashStore(), rank=0, world_size=1)
x = torch.arange(4.0)
dist.all_reduce(x)
assert x.tolist() == [0.0, 1.0, 2.0, 3.0], x
"""

for run in range(10):
    child = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                           timeout=120)
    if child.returncode != 0:
        print(f"FAIL: run {run} of a script without destroy_process_group exited with status "
              f"{child.returncode}:\n{child.stderr[-2000:]}")
        sys.exit(1)
print("ok: 10 exits without destroy_process_group, all clean")

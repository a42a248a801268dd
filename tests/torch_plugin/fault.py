# A rank killed (SIGKILL) while the others run a collective: every survivor's all_reduce
# raises a RuntimeError naming the lost peer well within the group's 30 s timeout, and the
# group can still be destroyed. PyTorch's flight recorder, through the backend's abort hook,
# has then written each survivor's trace: the all_reduce before the kill completed, the
# failed one still scheduled. The killed rank is given to launch.py with --killed.
import os
import pickle
import re
import shutil
import signal
import sys
import tempfile
import time
from datetime import timedelta

TRACE = os.path.join(tempfile.mkdtemp(prefix="ringgrad_fr_"), "trace_")
os.environ["TORCH_FR_DUMP_TEMP_FILE"] = TRACE  # read by the recorder when it dumps

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _dump_fr_trace_json

import ringgrad_torch  # noqa: F401

VICTIM = int(sys.argv[1])
TIMEOUT_S = 30
dist.init_process_group("ringgrad", timeout=timedelta(seconds=TIMEOUT_S))
rank = dist.get_rank()
t = torch.ones(1 << 20)
dist.all_reduce(t)  # connected and working
if rank == VICTIM:
    os.kill(os.getpid(), signal.SIGKILL)
# The backend reports a completed collective to the recorder from its own thread, a moment
# after wait() returns; let that happen before the next one fails.
deadline = time.monotonic() + 10
while time.monotonic() < deadline and '"completed"' not in (
        _dump_fr_trace_json(backend="ringgrad").decode()):
    time.sleep(0.01)
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
    # The sentence, not ringgrad's "[file.cpp:42]" (that is for logs).
    ok = ok and not re.search(r"\[[\w./-]+\.(?:cpp|cu|h):\d+\]", str(e))
dist.destroy_process_group()
if not ok:
    print(f"rank {rank}: FAIL: error too late, does not name the lost rank, or shows a source location")
    sys.exit(1)
try:
    with open(f"{TRACE}{rank}", "rb") as f:
        states = [e["state"] for e in pickle.load(f)["entries"]]
except OSError as e:
    states = f"no trace written ({e})"
shutil.rmtree(os.path.dirname(TRACE), ignore_errors=True)
print(f"rank {rank}: flight recorder trace, one state per collective: {states}")
ok = isinstance(states, list) and len(states) >= 2 and states[-1] == "scheduled" and all(
    s == "completed" for s in states[:-1])
print(f"rank {rank}: {'ok' if ok else 'FAIL: the trace should end in the failed collective'}")
sys.exit(0 if ok else 1)

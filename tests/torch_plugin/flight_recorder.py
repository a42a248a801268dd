# PyTorch's flight recorder sees ringgrad's collectives finish (the backend's completion hooks;
# without them every entry read "scheduled", retired at issue). After all_reduces run on the
# waiting thread (8 bytes, waited at once) and on the comm thread (4 MiB: waited on, async, through a future), each entry is
# "completed" with a duration; one waiting for a late rank reads "scheduled" until it is done,
# which is what tells a hung collective from a finished one in a dump.
import json
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _dump_fr_trace_json

import ringgrad_torch  # noqa: F401


def trace():
    entries = json.loads(_dump_fr_trace_json(backend="ringgrad")).get("entries", [])
    return [(e["state"], e.get("duration_ms")) for e in entries]


dist.init_process_group("ringgrad")
rank = dist.get_rank()
small, big = torch.ones(2), torch.ones(1 << 20)
dist.all_reduce(small)
dist.all_reduce(big)
dist.all_reduce(big, async_op=True).wait()
dist.all_reduce(big, async_op=True).get_future().wait()

store = dist.distributed_c10d._get_default_store()
if rank == 0:  # rank 1 joins the fifth all_reduce only once rank 0 has looked at it
    work = dist.all_reduce(big, async_op=True)
    time.sleep(0.5)
    in_flight = trace()[-1][0]
    store.set("late_rank_may_go", "1")
    work.wait()
else:
    store.wait(["late_rank_may_go"], timedelta(seconds=60))
    dist.all_reduce(big)

# The comm thread's collectives are reported by the backend's completer thread.
deadline = time.monotonic() + 10
while any(state != "completed" for state, _ in trace()) and time.monotonic() < deadline:
    time.sleep(0.01)
entries = trace()
print(f"rank {rank}: (state, duration_ms) per collective: {entries}")
ok = len(entries) == 5 and all(s == "completed" and d is not None and d > 0 for s, d in entries)
if rank == 0:
    print(f"rank 0: the fifth all_reduce, waiting for rank 1, read {in_flight!r}")
    ok = ok and in_flight == "scheduled"
dist.destroy_process_group()
print(f"rank {rank}: {'ok' if ok else 'FAIL'}")
sys.exit(0 if ok else 1)

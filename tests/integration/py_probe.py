# py_probe: a stdlib-only Python worker for the launcher's invocation tests. It records how it
# was started (sys.argv, __name__, its interpreter, the torchrun variables) in $PROBE_OUT, and
# on rank $PROBE_FAIL_RANK raises an exception after writing it to TORCHELASTIC_ERROR_FILE in
# the format of PyTorch's @record (which needs torch; this does the same without it).
import json
import os
import sys
import time
import traceback

VARS = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR", "CUDA_VISIBLE_DEVICES",
        "TORCHELASTIC_ERROR_FILE", "TORCHELASTIC_SIGNALS_TO_HANDLE",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING"]


def fail_here(rank):
    raise ValueError(f"bad batch on rank {rank}")


def record(fn):
    try:
        fn()
    except Exception as e:
        with open(os.environ["TORCHELASTIC_ERROR_FILE"], "w") as f:
            json.dump({"message": {"message": f"{type(e).__name__}: {e}",
                                   "extraInfo": {"py_callstack": traceback.format_exc(),
                                                 "timestamp": str(int(time.time()))}}}, f)
        raise


def main():
    rank = os.environ["RANK"]
    with open(os.path.join(os.environ["PROBE_OUT"], f"run.{rank}.json"), "w") as f:
        json.dump({"argv": sys.argv, "name": __name__, "executable": sys.executable,
                   "env": {k: os.environ.get(k) for k in VARS}}, f)
    print(f"py_probe rank {rank} here", flush=True)
    if os.environ.get("PROBE_FAIL_RANK") == rank:
        fail_here(rank)
    time.sleep(float(os.environ.get("PROBE_SLEEP", "0")))


if __name__ == "__main__":
    record(main)

# Starts `world` copies of a test script as ranks of one job (RANK, WORLD_SIZE, LOCAL_RANK,
# MASTER_ADDR, MASTER_PORT set here, as torchrun would), waits at most --timeout seconds, and
# exits 0 only if every rank did. Skips (prints "SKIPPED: <why>", exits 77) when this Python
# cannot import torch or the ringgrad_torch module (build it with RINGGRAD_PYTHON=<this python>).
# --killed R: rank R is expected to die by SIGKILL (a fault test), the others to exit 0.
# --ringgrad-run PATH: start the ranks with `ringgrad-run --standalone` instead (the launcher
# sets their environment), and expect it to exit 0; --rdzv-conf K=V,... goes to it too.
# --torchrun: the same with the torchrun installed next to this Python (Skipped where there is
# none).
#   python launch.py --world 2 [--timeout S] [--killed R | --ringgrad-run PATH [--rdzv-conf C]
#                    | --torchrun] script.py [args...]
import argparse
import os
import socket
import subprocess
import sys
import time


def skip(reason):
    print(f"SKIPPED: {reason}")
    sys.exit(77)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--timeout", type=float, default=240)
    p.add_argument("--killed", type=int, default=-1)
    p.add_argument("--ringgrad-run")
    p.add_argument("--rdzv-conf")
    p.add_argument("--torchrun", action="store_true")
    p.add_argument("script")
    p.add_argument("args", nargs=argparse.REMAINDER)
    a = p.parse_args()
    try:
        import torch  # noqa: F401
    except ImportError as e:
        skip(f"{sys.executable} cannot import torch ({e}); configure with RINGGRAD_PYTHON=<a Python with torch 2.x>")
    try:
        import ringgrad_torch  # noqa: F401
    except ImportError as e:
        skip(f"the ringgrad_torch module is not built for {sys.executable} ({e})")

    standalone = ["--standalone", "--nproc-per-node", str(a.world)]
    if a.ringgrad_run:
        conf = ["--rdzv-conf", a.rdzv_conf] if a.rdzv_conf else []
        launcher = [a.ringgrad_run] + standalone + conf + [sys.executable]
    elif a.torchrun:
        torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
        if not os.access(torchrun, os.X_OK):
            skip(f"no torchrun next to {sys.executable}")
        launcher = [torchrun] + standalone
    if a.ringgrad_run or a.torchrun:
        name = os.path.basename(launcher[0])
        try:
            code = subprocess.run(launcher + [a.script] + a.args, timeout=a.timeout).returncode
        except subprocess.TimeoutExpired:
            print(f"launch: {name} still running after {a.timeout:.0f} s, killed")
            sys.exit(1)
        print(f"launch: {name} exit code {code}")
        sys.exit(0 if code == 0 else 1)

    port = free_port()
    procs = []
    for rank in range(a.world):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(a.world),
                   LOCAL_WORLD_SIZE=str(a.world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([sys.executable, a.script] + a.args, env=env))
    deadline = time.monotonic() + a.timeout
    codes = [None] * a.world
    while None in codes and time.monotonic() < deadline:
        codes = [p.poll() for p in procs]
        time.sleep(0.05)
    for rank, p in enumerate(procs):
        if codes[rank] is None:
            p.kill()
            p.wait()
            print(f"launch: rank {rank} still running after {a.timeout:.0f} s, killed")
    print(f"launch: exit codes {codes}")
    want = [-9 if rank == a.killed else 0 for rank in range(a.world)]
    sys.exit(0 if codes == want else 1)


if __name__ == "__main__":
    main()

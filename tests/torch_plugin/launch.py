# Starts `world` copies of a test script as ranks of one job (RANK, WORLD_SIZE, LOCAL_RANK,
# MASTER_ADDR, MASTER_PORT set here, as torchrun would), waits at most --timeout seconds, and
# exits 0 only if every rank did. Skips (prints "SKIPPED: <why>", exits 77) when this Python
# cannot import torch or the ringgrad_torch module (CTest runs it in the environment the
# torch_plugin_pip_install test pip-installs the module into).
# --killed R: rank R is expected to die by SIGKILL (a fault test), the others to exit 0.
# --ringgrad-run PATH: start the ranks with `ringgrad-run --standalone` instead (the launcher
# sets their environment), as torchrun is started: `ringgrad-run ... script.py` with this
# Python first on PATH, and expect it to exit 0; --module: as `ringgrad-run ... -m script`;
# --launcher-flag F (repeatable): more ringgrad-run flags; --expect-error TEXT (repeatable):
# expect exit 1 and each TEXT in the failure summary. --torchrun: the same with this Python's
# torchrun (python -m torch.distributed.run); --accelerate: with Hugging Face Accelerate's
# `accelerate launch` (Skipped where Accelerate is not installed).
#   python launch.py --world 2 [--timeout S]
#                    [--killed R | --ringgrad-run PATH | --torchrun | --accelerate]
#                    [--module] [--launcher-flag F]... [--expect-error TEXT] script.py [args...]
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
    p.add_argument("--accelerate", action="store_true")
    p.add_argument("--module", action="store_true")
    p.add_argument("--launcher-flag", action="append", default=[])
    p.add_argument("--expect-error", action="append", default=[])
    p.add_argument("script")
    p.add_argument("args", nargs=argparse.REMAINDER)
    a = p.parse_args()
    try:
        import torch  # noqa: F401
    except ImportError as e:
        skip(f"{sys.executable} cannot import torch ({e}); configure with RINGGRAD_PYTHON=<a Python with torch 2.x>")
    if a.accelerate or "accelerate" in os.path.basename(a.script):
        try:
            import accelerate  # noqa: F401
        except ImportError as e:
            skip(f"{sys.executable} cannot import accelerate ({e}): pip install accelerate")
    try:
        import ringgrad_torch  # noqa: F401
    except ImportError as e:
        skip(f"{sys.executable} cannot import ringgrad_torch ({e}); the torch_plugin_pip_install test installs it")

    standalone = ["--standalone", "--nproc-per-node", str(a.world)] + a.launcher_flag
    env = dict(os.environ)
    script = [a.script]
    if a.module:
        env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(a.script), env.get("PYTHONPATH", "")])
        script = ["-m", os.path.splitext(os.path.basename(a.script))[0]]
    if a.ringgrad_run:
        # No Python named: the launcher finds this one first on PATH, as torchrun uses its own.
        env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env["PATH"]])
        launcher = [a.ringgrad_run] + standalone
    elif a.torchrun:  # what the torchrun script runs
        launcher = [sys.executable, "-m", "torch.distributed.run"] + standalone
    elif a.accelerate:  # `accelerate launch`: on a machine without GPUs --multi_gpu runs CPU ranks
        launcher = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu",
                    "--num_processes", str(a.world), "--num_machines", "1", "--mixed_precision",
                    "no", "--dynamo_backend", "no", "--main_process_port", str(free_port())]
    if a.ringgrad_run or a.torchrun or a.accelerate:
        name = ("torchrun" if a.torchrun else "accelerate launch" if a.accelerate
                else os.path.basename(launcher[0]))
        try:
            done = subprocess.run(launcher + script + a.args, timeout=a.timeout, env=env,
                                  stderr=subprocess.PIPE, text=True)
        except subprocess.TimeoutExpired as e:
            sys.stderr.write(e.stderr.decode() if isinstance(e.stderr, bytes) else e.stderr or "")
            print(f"launch: {name} still running after {a.timeout:.0f} s, killed")
            sys.exit(1)
        sys.stderr.write(done.stderr)
        print(f"launch: {name} exit code {done.returncode}")
        if a.expect_error:
            missing = [text for text in a.expect_error if text not in done.stderr]
            for text in missing:
                print(f"launch: '{text}' is NOT in its stderr")
            sys.exit(0 if done.returncode == 1 and not missing else 1)
        sys.exit(0 if done.returncode == 0 else 1)

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

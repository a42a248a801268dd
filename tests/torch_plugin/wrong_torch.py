# Importing ringgrad_torch into a Python whose torch is not the one it was built for raises an
# ImportError naming both versions and the remedy, instead of crashing the interpreter when the
# extension loads (it did, with a segmentation fault, under Debian's torch 1.13). The other
# Python is Debian's /usr/bin/python3 with python3-torch; Skipped where that is absent.
#   python wrong_torch.py   (PYTHONPATH: the build tree's lib/, as CTest sets it)
import os
import subprocess
import sys

OTHER = "/usr/bin/python3"


def skip(reason):
    print(f"SKIPPED: {reason}")
    sys.exit(77)


try:
    import ringgrad_torch  # noqa: F401
except ImportError as e:
    skip(f"the ringgrad_torch module is not built for {sys.executable} ({e})")
import torch

probe = subprocess.run([OTHER, "-c", "import torch; print(torch.__version__)"],
                       capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=""))
if probe.returncode != 0:
    skip(f"{OTHER} cannot import torch (apt-get install python3-torch)")
other_version = probe.stdout.strip()
if other_version == torch.__version__:
    skip(f"{OTHER} has the same torch {other_version} as {sys.executable}")

r = subprocess.run([OTHER, "-c", "import ringgrad_torch"], capture_output=True, text=True,
                   timeout=120)
print(r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "(no error output)")
expected = [f"built for torch {torch.__version__}", f"has torch {other_version}", "RINGGRAD_PYTHON"]
if r.returncode != 1 or "ImportError" not in r.stderr or not all(s in r.stderr for s in expected):
    print(f"FAIL: exit code {r.returncode} (1 and an ImportError naming both versions expected)")
    sys.exit(1)
print("PASS")

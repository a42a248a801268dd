#!/usr/bin/env bash
# Makes a Python virtual environment with PyPI's current torch and torchvision for the
# ringgrad_torch tests (the PyTorch 2.x backend), scikit-build-core for its pip install and
# Hugging Face Accelerate for the `accelerate launch` tests, unless it already imports them, and
# prints that Python's path on stdout. PyPI's wheel brings CUDA 13 libraries even for CPU use:
# 5.4 GB on disk and 2-4 minutes on the 2-core build machine (docs/pytorch.md). Where it cannot be
# installed (no disk, no network, pip over 10 minutes, a third of CI's budget) it prints
# nothing and says why on stderr, and the torch tests are then reported Skipped; nothing else
# depends on it.
#   bash scripts/install_torch.sh VENV_DIR
set -euo pipefail
venv=${1:?usage: install_torch.sh VENV_DIR}
python=$venv/bin/python
check='import torch, torchvision'

if [[ -x $python ]] && "$python" -c "$check" 2>/dev/null; then
  # scikit-build-core (what `pip install` of the PyTorch backend builds with) and Accelerate:
  # small, and added to an environment made before they were needed.
  "$python" -c 'import scikit_build_core, accelerate' 2>/dev/null ||
    timeout 300 "$venv/bin/pip" install -q scikit-build-core accelerate >&2 ||
    echo "ringgrad: pip install scikit-build-core accelerate failed; the pip install test will try again" >&2
  echo "$python"
  exit 0
fi
skip() {
  echo "ringgrad: no PyTorch 2.x for the ringgrad_torch tests ($1); they will be Skipped" >&2
  exit 0
}
# The wheels and their unpacked copies need about 9 GB at the peak; refuse early rather than fill the disk.
mkdir -p "$(dirname "$venv")"
free_kb=$(df -Pk "$(dirname "$venv")" | awk 'NR == 2 { print $4 }')
((free_kb > 12 * 1024 * 1024)) || skip "less than 12 GB free on $(dirname "$venv")"
echo "ringgrad: installing torch and torchvision from PyPI into $venv (about 4 minutes)" >&2
python3 -m venv "$venv" >&2 || skip "python3 -m venv failed"
timeout 600 "$venv/bin/pip" install -q --no-cache-dir torch torchvision scikit-build-core accelerate >&2 ||
  skip "pip install torch torchvision failed or took over 10 minutes"
"$python" -c "$check" >&2 || skip "$python cannot import torch after installing it"
echo "$python"

#!/usr/bin/env bash
# `pip install` of the PyTorch backend as a user does it, into a fresh virtual environment that
# reuses the torch of TORCH_PYTHON's environment (a .pth file: no second 5 GB download):
#   1. pip install --no-build-isolation REPO builds ringgrad_torch against that torch;
#   2. import ringgrad_torch works from anywhere with no PYTHONPATH, from the environment;
#   3. pip wheel makes a wheel, which installs into a second fresh environment with the same
#      torch, where init_process_group("ringgrad") works without importing ringgrad_torch
#      (torch's backend auto-loading) and not once auto-loading is turned off.
# --no-deps: torch and what it needs are those of TORCH_PYTHON's environment, which pip would
# otherwise check against PyPI (torch's own requirements, say a newer setuptools), needing the
# network. The first environment is what the other torch tests then run in (the
# torch_installed fixture). WORK keeps scikit-build-core's build folder, so a rerun rebuilds only what changed.
# Skipped (77) where TORCH_PYTHON has no torch 2.x, or scikit-build-core cannot be had.
#   pip_install.sh TORCH_PYTHON REPO WORK
set -uo pipefail
torch_python=$1 repo=$2 work=$3
fail() { echo "FAIL: $*"; exit 1; }
skip() { echo "SKIPPED: $*"; exit 77; }
unset PYTHONPATH
"$torch_python" -c 'import torch, sys; sys.exit(int(torch.__version__.split(".")[0]) < 2)' 2>/dev/null ||
  skip "$torch_python has no torch 2.x (scripts/install_torch.sh makes one)"
base=$("$torch_python" -c 'import sys; print(sys._base_executable)')
torch_site=$("$torch_python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
mkdir -p "$work"
cd "$work" || fail "cannot enter $work"

new_env() {  # DIR: a fresh environment that sees TORCH_PYTHON's packages
  rm -rf "$1"
  "$base" -m venv "$1" || fail "$base -m venv $1 failed"
  local site
  site=$("$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "$torch_site" >"$site/torch_environment.pth"
}

new_env venv
if ! venv/bin/python -c 'import scikit_build_core' 2>/dev/null; then
  timeout 300 venv/bin/pip install -q scikit-build-core ||
    skip "scikit-build-core is not in $torch_python's environment and pip could not install it"
fi
# Hugging Face Accelerate, for the tests that run under `accelerate launch` (they skip without).
venv/bin/python -c 'import accelerate' 2>/dev/null || timeout 300 venv/bin/pip install -q accelerate ||
  echo "note: Accelerate is not in $torch_python's environment and pip could not install it"
# expecttest, which PyTorch's test utilities import, for pytorch_suite.py (it skips without).
venv/bin/python -c 'import expecttest' 2>/dev/null || timeout 300 venv/bin/pip install -q expecttest ||
  echo "note: expecttest is not in $torch_python's environment and pip could not install it"
echo "== pip install --no-build-isolation $repo"
timeout 1500 venv/bin/pip install --no-build-isolation --no-deps -C build-dir="$work/skbuild" "$repo" ||
  fail "pip install failed"
where=$(venv/bin/python -c 'import torch.distributed, ringgrad_torch; print(ringgrad_torch.__file__)') ||
  fail "import ringgrad_torch failed after pip install"
[[ $where == "$work/venv/"* ]] || fail "ringgrad_torch was imported from $where, not from the environment"
echo "ok: import ringgrad_torch from $where"

echo "== pip wheel, installed into a second environment"
rm -rf dist
timeout 1500 venv/bin/pip wheel --no-build-isolation --no-deps -C build-dir="$work/skbuild" \
  -w dist "$repo" || fail "pip wheel failed"
wheel=$(ls dist/ringgrad_torch-*.whl) || fail "no wheel in $work/dist"
new_env venv2
timeout 300 venv2/bin/pip install --no-deps "$wheel" || fail "pip install $wheel failed"
check='
import os, sys, torch, torch.distributed as dist
assert "ringgrad_torch" not in sys.modules
dist.init_process_group("ringgrad", store=dist.HashStore(), rank=0, world_size=1)
x = torch.arange(4.0)
dist.all_reduce(x)
assert x.tolist() == [0.0, 1.0, 2.0, 3.0], x
print("ok: init_process_group(\"ringgrad\") without the import, from", sys.modules["ringgrad_torch"].__file__)
'
venv2/bin/python -c "$check" || fail "the wheel's backend did not auto-load in a second environment"
if TORCH_DEVICE_BACKEND_AUTOLOAD=0 venv2/bin/python -c "$check" 2>/dev/null; then
  fail "ringgrad was usable with auto-loading off: the entry point was not what registered it"
fi
echo "ok: with TORCH_DEVICE_BACKEND_AUTOLOAD=0 it needs the import"

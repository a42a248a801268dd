#!/usr/bin/env bash
# Quick-start command 1: install what is missing, build Release, and run the main job.
# Extra arguments go to ringgrad-train (for example --data DIR or --epochs 2).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
exec build/bin/ringgrad-train "$@"

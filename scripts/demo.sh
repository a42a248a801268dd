#!/usr/bin/env bash
# Quick-start command 1: install what is missing, build Release, and run the main job: two
# data-parallel processes on this machine (ringgrad-run, our torchrun) train the default ResNet
# on Fashion-MNIST for one epoch and print test accuracy and throughput. Extra arguments go
# to ringgrad-train (for example --data DIR, --epochs 2, --model resnet18).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
exec build/bin/ringgrad-run --standalone --nproc-per-node 2 build/bin/ringgrad-train "$@"

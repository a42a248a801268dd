#!/usr/bin/env bash
# Training throughput, ours against PyTorch (PYTHON, default /usr/bin/python3: Debian 1.13) in one run:
# resnet20 and resnet18, batch 64, 2 threads, SGD momentum 0.9 / weight decay 5e-4, synthetic
# MNIST-shaped data. Prints img/s and peak RSS for both and the ratios ours/PyTorch.
#   PYTHON=/path/to/python bash bench/compare_torch.sh [--steps N] [--threads N] [--batch-size N]
set -euo pipefail
cd "$(dirname "$0")/.."
args=(--threads 2 --batch-size 64 --steps 20 "$@")
bin=${BIN:-build/bin}
python=${PYTHON:-/usr/bin/python3}
[[ -x $bin/train_throughput ]] || bash scripts/build.sh >/dev/null
if ! "$python" -c "import torch, torchvision" 2>/dev/null; then
  echo "compare_torch: $python cannot import torch and torchvision (apt-get install python3-torch python3-torchvision, or PYTHON=<a Python with them>)" >&2
  exit 1
fi
field() { awk -v k="$2" '{for (i = 1; i < NF; ++i) if ($i == k) print $(i + 1)}' <<<"$1"; }
echo "PyTorch $("$python" -c 'import torch; print(torch.__version__)') from $python"
printf '%-9s %12s %12s %7s %14s %14s %7s\n' model ours_img/s torch_img/s ratio ours_rss_mb torch_rss_mb ratio
for model in resnet20 resnet18; do
  ours=$("$bin"/train_throughput --model "$model" "${args[@]}")
  theirs=$(OMP_NUM_THREADS=2 "$python" bench/torch_train_throughput.py --model "$model" "${args[@]}")
  oi=$(field "$ours" img/s); ti=$(field "$theirs" img/s)
  om=$(field "$ours" peak_rss_mb); tm=$(field "$theirs" peak_rss_mb)
  awk -v m="$model" -v oi="$oi" -v ti="$ti" -v om="$om" -v tm="$tm" \
    'BEGIN { printf "%-9s %12s %12s %7.2f %14s %14s %7.2f\n", m, oi, ti, oi / ti, om, tm, om / tm }'
done

#!/usr/bin/env bash
# Training throughput, ours against PyTorch in one run: resnet20 and resnet18, batch 64, 2 threads,
# SGD momentum 0.9 / weight decay 5e-4, synthetic MNIST-shaped data, each side in f32 and under
# bf16 autocast (`--amp bf16`; PyTorch's torch.autocast("cpu", torch.bfloat16)), PyTorch also in
# channels_last (NHWC), the layout its CPU tuning guide recommends. Prints img/s of all six, peak
# RSS of the f32 runs, and the ratio of each side's best: ours against PyTorch at its best
# setting.
#   [PYTHON=...] [ROUNDS=N] bash bench/compare_torch.sh [--steps N] [--threads N] [--batch-size N]
# PYTHON: as bench_env.sh says (default: PyTorch 2.x in build/torch-venv, else Debian's 1.13).
# ROUNDS: as bench_env.sh says.
set -euo pipefail
cd "$(dirname "$0")/.."
args=(--threads 2 --batch-size 64 --steps 20 "$@")
bin=${BIN:-build/bin}
source bench/bench_env.sh
python=${PYTHON:-$(default_python)}
[[ -x $bin/train_throughput ]] || bash scripts/build.sh >/dev/null
if ! "$python" -c "import torch, torchvision" 2>/dev/null; then
  echo "compare_torch: $python cannot import torch and torchvision (bash scripts/install_torch.sh build/torch-venv, or apt-get install python3-torch python3-torchvision, or PYTHON=<a Python with them>)" >&2
  exit 1
fi
field() { awk -v k="$2" '{for (i = 1; i < NF; ++i) if ($i == k) print $(i + 1)}' <<<"$1"; }
threads=$(awk '{for (i = 1; i < NF; ++i) if ($i == "--threads") t = $(i + 1)} END {print t}' <<<"${args[*]}")
rounds=$(rounds)
cpu_header
((rounds > 1)) && echo "each figure: the median of $rounds interleaved rounds"
echo "PyTorch $("$python" -c 'import torch; print(torch.__version__)') from $python"
paths=$(mktemp)
trap 'rm -f "$paths"' EXIT
printf '%-9s %9s %9s %9s %9s %9s %9s %10s %8s %8s %6s\n' model ours_f32 ours_bf16 torch_f32 \
  torch_bf16 cl_f32 cl_bf16 best_ratio ours_MB torch_MB ratio
for model in resnet20 resnet18; do
  declare -A img=() rss=()
  # Interleaved: ours, then PyTorch in NCHW and NHWC, per precision, per round.
  for ((round = 0; round < rounds; round++)); do
    for amp in none bf16; do
      out=$("$bin"/train_throughput --model "$model" --amp "$amp" "${args[@]}" 2>>"$paths")
      img[ours_$amp]+="$(field "$out" img/s) " rss[ours_$amp]+="$(field "$out" peak_rss_mb) "
      for layout in nchw cl; do
        flags=()
        [[ $layout == cl ]] && flags=(--channels-last)
        out=$(OMP_NUM_THREADS=$threads "$python" bench/torch_train_throughput.py --model "$model" \
          --amp "$amp" "${flags[@]}" "${args[@]}")
        img[${layout}_$amp]+="$(field "$out" img/s) "
        rss[${layout}_$amp]+="$(field "$out" peak_rss_mb) "
      done
    done
  done
  for cell in "${!img[@]}"; do img[$cell]=$(median "${img[$cell]}"); done
  for cell in "${!rss[@]}"; do rss[$cell]=$(median "${rss[$cell]}"); done
  awk -v m="$model" -v of="${img[ours_none]}" -v ob="${img[ours_bf16]}" -v tf="${img[nchw_none]}" \
    -v tb="${img[nchw_bf16]}" -v cf="${img[cl_none]}" -v cb="${img[cl_bf16]}" \
    -v om="${rss[ours_none]}" -v tm="${rss[nchw_none]}" 'BEGIN {
      ours = of > ob ? of : ob; theirs = tf
      if (tb > theirs) theirs = tb
      if (cf > theirs) theirs = cf
      if (cb > theirs) theirs = cb
      printf "%-9s %9s %9s %9s %9s %9s %9s %10.2f %8s %8s %6.2f\n", m, of, ob, tf, tb, cf, cb,
        ours / theirs, om, tm, om / tm }'
done
echo "torch_*: PyTorch in NCHW; cl_*: PyTorch in channels_last (NHWC); ours are NCHW"
echo "best_ratio: our faster precision's img/s over PyTorch's fastest of the four; memory of the f32 NCHW runs"
sort -u "$paths"

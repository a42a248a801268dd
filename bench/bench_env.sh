# Sourced by the compare_*.sh scripts: which PyTorch they compare against, a header that says
# what the run was on, and the rounds each figure is the median of. PYTHON, when set, wins; else
# the PyTorch 2.x that scripts/install_torch.sh put in build/torch-venv (the current release: the
# anchor for every speed claim), else Debian's /usr/bin/python3 (PyTorch 1.13).
default_python() {
  local venv=${BUILD_DIR:-build}/torch-venv/bin/python
  if [[ -x $venv ]] && "$venv" -c "import torch" 2>/dev/null; then echo "$venv"; else echo /usr/bin/python3; fi
}

# The CPU's model and the widest of the instruction sets our kernels choose between.
cpu_header() {
  local model flags isa=baseline
  model=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
  flags=$(awk -F': ' '/^flags/ { print $2; exit }' /proc/cpuinfo)
  for f in avx2 avx512f avx512_bf16 amx_bf16; do
    [[ " $flags " == *" $f "* ]] && isa=$f
  done
  echo "CPU: $model, $(nproc) cores, widest ISA: ${isa/avx512f/avx512}; $(date -u '+%Y-%m-%d %H:%M UTC')"
}

# ROUNDS (default 1): how many times the compare scripts measure every cell, the cells of a round
# one after another, so that a slow minute of a shared machine hits both sides; each figure is
# then the median of its rounds.
rounds() {
  local r=${ROUNDS:-1}
  [[ $r =~ ^[1-9][0-9]*$ ]] || { echo "ROUNDS must be a positive integer, got '$r'" >&2; return 1; }
  echo "$r"
}

# The median of the numbers in $1 (separated by spaces).
median() {
  tr ' ' '\n' <<<"$1" | grep . | sort -g |
    awk '{ v[NR] = $1 }
      END { printf "%.1f\n", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

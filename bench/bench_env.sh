# Sourced by the compare_*.sh scripts: which PyTorch they compare against, and a header that says
# what the run was on. PYTHON, when set, wins; else the PyTorch 2.x that scripts/install_torch.sh
# put in build/torch-venv (the current release: the anchor for every speed claim), else
# Debian's /usr/bin/python3 (PyTorch 1.13).
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

#!/usr/bin/env bash
# The table under "## Flags" of a doc against the truth (flags compared with '_' read as '-',
# torchrun's and nccl-tests' two spellings of one flag):
#   help_table.sh help PROGRAM DOC: its second column lists exactly the long flags of
#     `PROGRAM --help` (docs/launcher.md: ringgrad-run; docs/benchmarks.md: all_reduce_perf);
#   help_table.sh torchrun PYTHON DOC: its first column lists exactly the flags of the torchrun
#     and torch.distributed.launch of PYTHON's PyTorch (Skipped where it has none).
# A flag added to one and not the other fails here, naming it.
set -uo pipefail
mode=$1 tool=$2 doc=$3
fail() { echo "FAIL: $*"; exit 1; }
# Column N (1-based) of the table under "## Flags": its --flag names, one per line, sorted.
column_flags() {
  sed -n '/^## Flags/,/^## /p' "$doc" | grep -E '^\| ' | tail -n +2 | sed 's/\\|/ /g' |
    awk -F'|' -v col=$(($1 + 1)) '{ print $col }' | grep -oE -- '--[a-z][a-z0-9_-]*' | tr _ - |
    sort -u
}
compare() {  # NAME_OF_TRUTH TRUTH TABLE_COLUMN
  [[ -n $2 && -n $3 ]] || fail "could not read the flags ($1 or the table changed shape)"
  local missing extra
  missing=$(comm -23 <(echo "$2") <(echo "$3"))
  extra=$(comm -13 <(echo "$2") <(echo "$3"))
  [[ -z $missing ]] || fail "in $1 but not in $doc's table: $(echo $missing)"
  [[ -z $extra ]] || fail "in $doc's table but not in $1: $(echo $extra)"
  echo "ok: $(wc -l <<<"$2") flags, the same in $1 and the table"
}
case $mode in
  help)
    help=$("$tool" --help) || fail "--help exited non-zero"
    from_help=$(grep -E '^  -' <<<"$help" | awk '{ print $1 }' | tr ',' '\n' |
                grep -E -- '^--[a-z][a-z0-9_-]*$' | grep -vx -- --help | tr _ - | sort -u)
    compare "$(basename "$tool") --help" "$from_help" "$(column_flags 2)" ;;
  torchrun)
    from_torch=$("$tool" - <<'PY'
import sys
try:
    import torch.distributed.launch  # noqa: F401  (its parser adds --use-env to torchrun's)
    from torch.distributed.launch import parse_args
except Exception as e:
    print(f"SKIPPED: {sys.executable} has no torch.distributed.launch ({e})")
    sys.exit(77)
import argparse
captured = []
real = argparse.ArgumentParser.parse_args
argparse.ArgumentParser.parse_args = lambda self, args=None, ns=None: captured.append(self) or sys.exit(0)
try:
    parse_args([])
except SystemExit:
    pass
for action in captured[0]._actions:
    for name in action.option_strings:
        if name.startswith("--") and name != "--help":
            print(name.replace("_", "-"))
PY
    )
    rc=$?
    [[ $rc == 77 ]] && { echo "$from_torch"; exit 77; }
    [[ $rc == 0 ]] || fail "$tool could not list torchrun's flags: $from_torch"
    compare "the installed torchrun and torch.distributed.launch" "$(sort -u <<<"$from_torch")" \
      "$(column_flags 1)" ;;
  *) fail "usage: help_table.sh help|torchrun TOOL DOC" ;;
esac

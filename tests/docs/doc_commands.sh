#!/usr/bin/env bash
# Runs every command block of docs/*.md marked for testing: a fenced block whose info string is
# `sh test` (it renders as an ordinary shell block). Each block runs in bash -euo pipefail, in
# its own empty directory holding links to the checkout's build/, scripts/, bench/ and docs/,
# under `timeout` (DOC_BLOCK_TIMEOUT, 240 s), loopback only. Any failing block fails the test;
# the report names the file and line of each block. Exit 77 (Skipped) when BUILD_DIR has no
# benchmarks, which the blocks run (RINGGRAD_BUILD_BENCH=OFF, as in the sanitizer builds).
# Usage: doc_commands.sh REPO BUILD_DIR [DOC.md...]
set -uo pipefail
repo=$(cd "$1" && pwd) build=$(cd "$2" && pwd); shift 2
if [[ ! -x $build/bin/ddp_throughput ]]; then
  echo "SKIPPED: $build has no benchmarks (built with RINGGRAD_BUILD_BENCH=OFF); the docs' blocks run them"
  exit 77
fi
docs=("$@")
((${#docs[@]})) || docs=("$repo"/docs/*.md)
limit=${DOC_BLOCK_TIMEOUT:-240}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Writes each block to $work/blocks/NNN.sh with a first line naming FILE:LINE.
mkdir -p "$work/blocks"
awk -v out="$work/blocks" '
  FNR == 1 { inblock = 0 }
  /^```sh test[[:space:]]*$/ && !inblock { inblock = 1; n++; f = sprintf("%s/%03d.sh", out, n);
                                        printf "# %s:%d\n", FILENAME, FNR > f; next }
  /^```/ && inblock { inblock = 0; close(f); next }
  inblock { print > f }
' "${docs[@]}"

blocks=("$work"/blocks/*.sh)
[[ -e ${blocks[0]} ]] || { echo "FAIL: no \`\`\`sh test blocks in ${docs[*]}"; exit 1; }
failed=0
for block in "${blocks[@]}"; do
  where=$(head -1 "$block" | cut -c3-)
  dir="$work/run-$(basename "$block" .sh)"
  mkdir -p "$dir"
  ln -s "$build" "$dir/build"
  for d in scripts bench docs; do ln -s "$repo/$d" "$dir/$d"; done
  start=$SECONDS
  (cd "$dir" && RINGGRAD_LOG=warn timeout -k 5 "$limit" bash -euo pipefail "$block") >"$dir.log" 2>&1
  rc=$?
  if ((rc == 0)); then
    echo "ok   $where ($((SECONDS - start)) s)"
  else
    failed=$((failed + 1))
    echo "FAIL $where: exit $rc$( ((rc == 124)) && echo " (timed out after $limit s)"); its commands and output:"
    sed 's/^/  | /' "$block"; echo "  --- output (last 40 lines)"; tail -40 "$dir.log" | sed 's/^/  > /'
  fi
done
echo "$((${#blocks[@]} - failed))/${#blocks[@]} doc command blocks passed"
((failed == 0))

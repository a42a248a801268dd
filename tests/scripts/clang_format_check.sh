#!/usr/bin/env bash
# Every C++, CUDA and C file git tracks is laid out as .clang-format says (docs/README.md).
# The layout is clang-format 14's (Debian 12); another version, or none, skips (exit 77), since
# versions differ in small ways. Usage: clang_format_check.sh REPO
set -uo pipefail
cd "$1" || exit 1
if ! command -v clang-format >/dev/null; then
  echo "SKIPPED: clang-format is not installed (apt-get install clang-format)"; exit 77
fi
version=$(clang-format --version | sed -n 's/.*version \([0-9]*\).*/\1/p')
if [[ $version != 14 ]]; then
  echo "SKIPPED: clang-format $version here; the tree is laid out by version 14"; exit 77
fi
if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  echo "SKIPPED: not a git checkout, so no list of tracked files"; exit 77
fi
mapfile -t files < <(git ls-files '*.cpp' '*.h' '*.cu' '*.cuh' '*.c')
# One clang-format for all files; each violation is reported as "FILE:LINE:COL: error: ...".
report=$(clang-format --dry-run -Werror "${files[@]}" 2>&1); status=$?
mapfile -t bad < <(sed -n 's/^\([^:]*\):[0-9]*:[0-9]*: error: .*/\1/p' <<<"$report" | sort -u)
if ((status != 0 && ${#bad[@]} == 0)); then  # it failed for another reason (say, a bad config)
  echo "FAIL: clang-format exited $status:"; head -5 <<<"$report"; exit 1
fi
if ((${#bad[@]})); then
  echo "FAIL: ${#bad[@]} of ${#files[@]} files are not laid out by .clang-format; run clang-format -i on:"
  printf '  %s\n' "${bad[@]}"
  exit 1
fi
echo "ok: ${#files[@]} files laid out by .clang-format"

#!/usr/bin/env bash
# A skipped test case exits 77 (CTest's SKIP_RETURN_CODE), a passing one 0, and one with a failed
# check 1 whether or not it also skipped: no output can turn a failure into a skip.
#   skip_exit_codes.sh PATH_TO_skip_probe
set -uo pipefail
probe=$1 status=0
expect() {
  local want=$1 name=$2
  "$probe" --test-case="$name" >/dev/null 2>&1
  local got=$?
  if ((got != want)); then
    echo "FAIL: '$name' exited $got, expected $want"; status=1
  else
    echo "ok: '$name' exited $got"
  fi
}
expect 0 "probe: passes"
expect 77 "probe: skips"
expect 1 "probe: fails then skips"
expect 1 "probe: skips then fails"
exit $status

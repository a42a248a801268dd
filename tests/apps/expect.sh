# Sourced by the tests of ringgrad-train's refusals, which set $bin: fail MESSAGE ends the test;
# expect CODE PATTERN ARGS... runs "$bin" ARGS and checks its exit code and that its stderr
# matches the extended regex PATTERN.
fail() { echo "FAIL: $*"; exit 1; }

expect() {
  local code=$1 pattern=$2; shift 2
  local err rc
  err=$("$bin" "$@" 2>&1 >/dev/null); rc=$?
  [[ $rc -eq $code ]] || fail "'$*' exited $rc, expected $code: $err"
  grep -qE -- "$pattern" <<<"$err" || fail "'$*' said '$err', expected /$pattern/"
  echo "ok: $* -> $rc: $err"
}

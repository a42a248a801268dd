# Sourced by the tests of ringgrad-train's refusals, which set $bin: fail MESSAGE ends the test;
# expect CODE PATTERN ARGS... runs "$bin" ARGS and checks its exit code, that its stderr
# matches the extended regex PATTERN and that it shows the user no source location
# ("[trainer.cpp:123]": core/error.h's policy); edit SRC DST PYTHON rewrites a checkpoint.
fail() { echo "FAIL: $*"; exit 1; }

expect() {
  local code=$1 pattern=$2; shift 2
  local err rc
  err=$("$bin" "$@" 2>&1 >/dev/null); rc=$?
  [[ $rc -eq $code ]] || fail "'$*' exited $rc, expected $code: $err"
  grep -qE -- "$pattern" <<<"$err" || fail "'$*' said '$err', expected /$pattern/"
  grep -qE -- '\.(cpp|h|cu):[0-9]+\]' <<<"$err" && fail "'$*' showed a source location: $err"
  echo "ok: $* -> $rc: $err"
}

# edit SRC DST PYTHON: a copy of safetensors file SRC whose header (h: the JSON of tensors and
# __metadata__) and tensor bytes (t[name]: a bytearray) a Python statement has changed.
edit() {
  python3 - "$1" "$2" "$3" <<'PY'
import json, struct, sys
src, dst, code = sys.argv[1:]
data = open(src, "rb").read()
n = struct.unpack("<Q", data[:8])[0]
h = json.loads(data[8:8 + n])
body = data[8 + n:]
t = {k: bytearray(body[v["data_offsets"][0]:v["data_offsets"][1]])
     for k, v in h.items() if k != "__metadata__"}
exec(code)
out = b""  # the remaining tensors' bytes, packed again in order
for k, v in sorted(((k, v) for k, v in h.items() if k != "__metadata__"),
                   key=lambda kv: kv[1]["data_offsets"][0]):
    data = t[k] if k in t else body[v["data_offsets"][0]:v["data_offsets"][1]]  # an added entry
    v["data_offsets"] = [len(out), len(out) + len(data)]
    out += bytes(data)
header = json.dumps(h).encode()
header += b" " * (-len(header) % 8)
open(dst, "wb").write(struct.pack("<Q", len(header)) + header + out)
PY
}

#!/usr/bin/env bash
# scripts/plot.sh on a small training log (the JSON lines ringgrad-train --log-json writes),
# on two real all_reduce_perf --json runs and on a ddp_throughput --timeline file: each PNG must exist, start with the PNG
# signature and have a plausible size. Exits 77 (skip) with the reason when gnuplot is missing.
set -uo pipefail
run=$1 perf=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

check_png() {  # FILE: the 8-byte PNG signature, 5 KB to 5 MB
  [[ -f $1 ]] || fail "$1 was not written"
  [[ $(head -c 8 "$1" | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a ]] ||
    fail "$1 does not start with the PNG signature"
  local size; size=$(stat -c %s "$1")
  ((size > 5000 && size < 5000000)) || fail "$1 has an implausible size of $size bytes"
  echo "ok: $1 ($size bytes)"
}

cat >"$dir/train.jsonl" <<'LOG'
{"accuracy":0.41,"epoch":1,"img_per_s":1510.0,"loss":1.62,"lr":0.1,"step":50,"type":"step"}
{"epoch":1,"img_per_s":1502.5,"seconds":21.3,"step":100,"test_accuracy":0.812,"test_loss":0.52,"train_accuracy":0.70,"train_loss":0.83,"type":"epoch"}
{"accuracy":0.86,"epoch":2,"img_per_s":1530.0,"loss":0.41,"lr":0.1,"step":150,"type":"step"}
{"epoch":2,"img_per_s":1544.1,"seconds":20.7,"step":200,"test_accuracy":0.871,"test_loss":0.36,"train_accuracy":0.86,"train_loss":0.40,"type":"epoch"}
{"epoch":3,"img_per_s":1539.9,"seconds":20.8,"step":300,"test_accuracy":0.889,"test_loss":0.31,"train_accuracy":0.89,"train_loss":0.31,"type":"epoch"}
LOG
bash scripts/plot.sh train "$dir/train.jsonl" "$dir/train.png"
rc=$?
if ((rc == 3)); then echo "SKIPPED: gnuplot is not available and could not be installed"; exit 77; fi
((rc == 0)) || fail "plot.sh train exited $rc"
check_png "$dir/train.png"

# Two real runs on 2 and 3 ranks (loopback), drawn as two lines, one of them labelled.
for n in 2 3; do
  RINGGRAD_LOG=warn timeout 120 "$run" --standalone --nproc-per-node $n "$perf" -b 8 -e 64K -f 4 \
    -n 2 -w 1 --json "$dir/run$n.json" >/dev/null || fail "all_reduce_perf on $n ranks failed"
done
bash scripts/plot.sh busbw "$dir/busbw.png" "$dir/run2.json" "$dir/run3.json=three ranks" ||
  fail "plot.sh busbw exited $?"
check_png "$dir/busbw.png"

# The DDP bucket timeline of docs/ddp-buckets.md (a real ddp_throughput --timeline file).
bash scripts/plot.sh timeline docs/figures/ddp-timeline.txt "$dir/timeline.png" ||
  fail "plot.sh timeline exited $?"
check_png "$dir/timeline.png"

# The ring schedule figure of docs/ring-allreduce.md; N outside 2-8 is a usage error.
bash scripts/plot.sh ring 4 "$dir/ring.png" || fail "plot.sh ring exited $?"
check_png "$dir/ring.png"
bash scripts/plot.sh ring 9 "$dir/ring9.png" >/dev/null 2>&1; [[ $? -eq 2 ]] || fail "ring 9 should exit 2"

# Bad input is one line and exit 1, not a half-drawn figure.
echo '{"type":"step"}' >"$dir/empty.jsonl"
err=$(bash scripts/plot.sh train "$dir/empty.jsonl" "$dir/x.png" 2>&1) && fail "a log without epochs was accepted"
grep -q "no epoch records" <<<"$err" || fail "unexpected message: $err"
bash scripts/plot.sh >/dev/null 2>&1; [[ $? -eq 2 ]] || fail "no arguments should exit 2"
echo "ok: bad input rejected: $err"

#!/usr/bin/env bash
# Figures from ringgrad's JSON outputs, drawn with gnuplot (Debian gnuplot-nox; installed here
# when missing and run as root, as scripts/build.sh does).
#   scripts/plot.sh train LOG.jsonl OUT.png
#       ringgrad-train --log-json LOG: training loss, test accuracy and img/s per epoch.
#   scripts/plot.sh busbw OUT.png RUN.json[=LABEL]...
#       all_reduce_perf --json RUN: bus bandwidth against message size (log scale), one line
#       per run (out of place); LABEL defaults to "backend, N ranks" from the file; PLOT_NOTE
#       (say the date and machine of the run) is added to the title.
#   scripts/plot.sh timeline TIMELINE.txt OUT.png
#       bench/ddp_throughput --timeline: each DDP bucket's all-reduce from launch to done,
#       against the end of backward (when the last gradient arrived).
#   scripts/plot.sh ring N OUT.png
#       the ring all-reduce's schedule for N ranks (2-8): who sends and receives which chunk at
#       each step, and the partial sum it then holds.
# Exit codes: 0 drawn, 1 bad input, 2 usage, 3 gnuplot missing and not installable (says why).
set -euo pipefail

usage() { sed -n '3,15p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

need_gnuplot() {
  command -v gnuplot >/dev/null && return 0
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
    echo "plot.sh: installing gnuplot-nox" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q gnuplot-nox >/dev/null 2>&1 ||
      { apt-get update -q >/dev/null 2>&1 &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q gnuplot-nox >/dev/null 2>&1; } || true
  fi
  command -v gnuplot >/dev/null && return 0
  echo "plot.sh: gnuplot is not installed (apt-get install gnuplot-nox as root)" >&2
  exit 3
}

# JSON to whitespace-separated columns; python3 is what the rest of the scripts use.
epoch_table() {  # LOG -> "epoch train_loss test_accuracy(%) img_per_s" per epoch record
  python3 - "$1" <<'PY'
import json, sys
rows = 0
for n, line in enumerate(open(sys.argv[1]), 1):
    if not line.strip():
        continue
    try:
        r = json.loads(line)
    except ValueError:
        sys.exit(f"plot.sh: {sys.argv[1]}:{n}: not a JSON line")
    if r.get("type") != "epoch":
        continue
    acc = r.get("test_accuracy")
    print(r["epoch"], r["train_loss"], "NaN" if acc is None else 100 * acc, r["img_per_s"])
    rows += 1
if rows == 0:
    sys.exit(f"plot.sh: {sys.argv[1]} has no epoch records (was it written by ringgrad-train --log-json?)")
PY
}

busbw_table() {  # RUN.json -> "size busbw" per row
  python3 - "$1" <<'PY'
import json, sys
try:
    rows = json.load(open(sys.argv[1]))["rows"]
except (ValueError, KeyError) as e:
    sys.exit(f"plot.sh: {sys.argv[1]} is not all_reduce_perf --json output ({e})")
for r in rows:
    print(r["size"], r["out_of_place"]["busbw"])
PY
}

run_label() {  # RUN.json -> "ring, 4 ranks"
  python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print("%s, %d ranks" % (j.get("backend","?"), j.get("world_size",0)))' "$1"
}

plot_train() {
  local log=$1 out=$2 dir
  dir=$(mktemp -d); trap 'rm -rf "$dir"' RETURN
  epoch_table "$log" >"$dir/epochs"
  gnuplot <<GP
set terminal pngcairo size 900,900 noenhanced
set output '$out'
set multiplot layout 3,1 title 'ringgrad-train: $(basename "$log")'
set grid
set xlabel 'epoch'
set xtics 1
set ylabel 'train loss'
plot '$dir/epochs' using 1:2 with linespoints lw 2 pt 7 title 'training loss'
set ylabel 'test accuracy (%)'
plot '$dir/epochs' using 1:3 with linespoints lw 2 pt 7 title 'test accuracy'
set ylabel 'images/s'
set yrange [0:*]
plot '$dir/epochs' using 1:4 with linespoints lw 2 pt 7 title 'throughput (all ranks)'
unset multiplot
GP
}

plot_busbw() {
  local out=$1 dir plots="" i=0; shift
  dir=$(mktemp -d); trap 'rm -rf "$dir"' RETURN
  for arg in "$@"; do
    local file=${arg%%=*} label
    busbw_table "$file" >"$dir/run$i"
    label=$([[ $arg == *=* ]] && echo "${arg#*=}" || run_label "$file")
    plots+="${plots:+, }'$dir/run$i' using 1:2 with linespoints lw 2 pt 7 title '${label//\'/}'"
    i=$((i + 1))
  done
  gnuplot <<GP
set terminal pngcairo size 900,600 noenhanced
set output '$out'
set title 'all-reduce bus bandwidth (out of place)${PLOT_NOTE:+: ${PLOT_NOTE//\'/}}'
set grid
set logscale x 2
set format x '%.0b %BB'
set xlabel 'message size'
set ylabel 'busbw (GB/s)'
set key top left
plot $plots
GP
}

plot_timeline() {
  local timeline=$1 out=$2 last xmax buckets ytics
  xmax=$(awk '!/^#/ && $6 > m { m = $6 } END { print m * 1000 * 1.25 }' "$timeline")
  last=$(sed -n 's/.*last gradient at \([0-9.e+-]*\) s.*/\1/p' "$timeline")
  [[ -n $last ]] || { echo "plot.sh: $timeline is not a ddp_throughput --timeline file" >&2; exit 1; }
  buckets=$(awk '!/^#/ { n++ } END { print n }' "$timeline")
  # One tick per bucket and one for backward's row (-1), none in between.
  ytics=$(awk '!/^#/ { printf "%s\"%d\" %d", (n++ ? ", " : ""), $1, $1 } END { print ", \"backward\" -1" }' "$timeline")
  gnuplot <<GP
set terminal pngcairo size 900,500 noenhanced
set output '$out'
set title 'DDP buckets in one backward: each all-reduce from launch to completion'
set grid x
set xlabel 'ms since the start of backward'
set ylabel 'bucket (launch order)'
set yrange [$buckets - 0.3:-1.7]
set ytics ($ytics)
set xrange [0:$xmax]
set key outside bottom center horizontal
set arrow from 0, -1 to $last*1000, -1 nohead lw 12 lc 'gray60'
set arrow from $last*1000, graph 0 to $last*1000, graph 1 nohead dt 2 lw 1 lc 'black'
plot '$timeline' using (1000*\$5):1:(1000*(\$6-\$5)):(0) with vectors nohead lw 12 lc 'steelblue' \
       title 'all-reduce: launched -> completed', \
     '' using (1000*\$4):1 with points pt 7 ps 1.5 lc 'orange' title 'bucket ready', \
     '' using (1000*\$6):1:(sprintf('%.1f MB', \$3/1e6)) with labels left offset 1,0 notitle, \
     NaN with lines lw 12 lc 'gray60' title 'backward (to the last gradient)'
GP
}

# The ring all-reduce's schedule for n ranks (docs/ring-allreduce.md): at step t rank r sends
# chunk (r - t) mod n right and receives chunk (r - t - 1) mod n from the left, summing it for
# t < n-1 (reduce-scatter) and storing it after (all-gather). One cell per rank and step.
ring_schedule() {  # N -> "step rank phase label" lines
  awk -v n="$1" 'function mod(x) { return ((x % n) + n) % n }
  BEGIN {
    for (t = 0; t < 2 * n - 2; t++)
      for (r = 0; r < n; r++) {
        c = mod(r - t - 1)
        if (t < n - 1) {
          sum = ""; for (k = 0; k <= t + 1; k++) had[mod(r - k)] = 1
          for (q = 0; q < n; q++) if (had[q]) { sum = sum (sum == "" ? "" : "+") q; delete had[q] }
          label = sprintf("sends c%d\\ngets c%d = %s", mod(r - t), c, sum)
          phase = (t == n - 2) ? 1 : 0
        } else {
          label = sprintf("sends c%d\\ngets c%d (final)", mod(r - t), c); phase = 2
        }
        printf "%d %d %d \"%s\"\n", t, r, phase, label
      }
  }'
}

plot_ring() {
  local n=$1 out=$2 dir
  [[ $n =~ ^[2-8]$ ]] || { echo "plot.sh ring: N must be 2 to 8, got '$n'" >&2; exit 2; }
  dir=$(mktemp -d); trap 'rm -rf "$dir"' RETURN
  ring_schedule "$n" >"$dir/cells"
  gnuplot <<GP
set terminal pngcairo size $((170 * n + 120)),$((70 * (2 * n - 2) + 140)) noenhanced
set output '$out'
set title "Ring all-reduce, $n ranks\nreduce-scatter (blue; dark: the chunk is now complete), then all-gather (green)"
set xrange [-0.5:$n - 0.5]
set yrange [$((2 * n - 2)) - 0.5:-0.5]
set xtics 0, 1, $n - 1 format 'rank %g'
set ytics 0, 1, $((2 * n - 3)) format 'step %g'
unset key
unset colorbox
set palette defined (0 '#c6dbef', 1 '#6baed6', 2 '#c7e9c0')
set cbrange [0:2]
plot '$dir/cells' using 2:1:(0.48):(0.45):3 with boxxy fc palette fs solid border lc 'gray40', \
     '' using 2:1:4 with labels font ',9'
GP
}

(($# >= 1)) || usage
case $1 in
  train) (($# == 3)) || usage; out=$3; need_gnuplot; plot_train "$2" "$3" ;;
  busbw) (($# >= 3)) || usage; out=$2; need_gnuplot; shift; plot_busbw "$@" ;;
  timeline) (($# == 3)) || usage; out=$3; need_gnuplot; plot_timeline "$2" "$3" ;;
  ring) (($# == 3)) || usage; out=$3; need_gnuplot; plot_ring "$2" "$3" ;;
  *) usage ;;
esac
echo "plot.sh: wrote $out" >&2

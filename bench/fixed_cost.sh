#!/usr/bin/env bash
# What zstd's per-call figures of bench/real.sh owe to fixed costs (start-up, the CLI's symbol reading,
# the end): interleaved rounds of the zstd builds of bench/real.sh (which must have run) compressing a
# 1,000-byte file (a few thousand calls: almost only the fixed cost) and the 20 MB input, untraced,
# under `ferrotrace record` and under `uftrace record --no-libcall`. Prints, per build and tracer, the
# fixed CPU cost (whole process tree, `perf stat -e task-clock`, median above the plain build's), the
# CPU per traced call with it (as bench/real.sh counts) and without it, and uftrace's over ferrotrace's.
# Usage: bench/fixed_cost.sh (RUNS=9 BUILDS=pg,fentry).
set -euo pipefail
RUNS=${RUNS:-9}
BUILDS=${BUILDS:-pg,fentry}
name=fixed_cost
source "$(dirname "$0")/zstd_real.sh"
head -c 1000 /dev/urandom > "$out/tiny"
log="$out/runs.txt"
: > "$log"
echo "fixed_cost: $RUNS rounds, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for _ in $(seq "$RUNS"); do
  for input in tiny big; do
    file="$out/tiny"; [ "$input" = big ] && file="$real/zstd-input"
    args="-q -9 -T4 -f $file -o $out/out.zst"
    echo "plain $input $(cpu_ms "$real/zstd-plain" $args)" >> "$log"
    for b in ${BUILDS//,/ }; do
      echo "ferrotrace-$b $input $(cpu_ms "$ft" record -o "$out/trace.data" -- "$real/zstd-$b" $args)" >> "$log"
      echo "uftrace-$b $input $(cpu_ms uftrace record --no-libcall -d "$out/uftrace.data" "$real/zstd-$b" $args)" >> "$log"
      rm -rf "$out/uftrace.data"
    done
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
calls=$("$ft" info --json -i "$out/trace.data" | python3 -c 'import json,sys; print(json.load(sys.stdin)["events"] // 2)')
python3 - "$log" "$calls" "$BUILDS" <<'PY'
import collections, statistics, sys
log, calls, builds = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(",")
runs = collections.defaultdict(list)
for line in open(log):
    name, size, ms = line.split()
    runs[name, size].append(float(ms))
med = {k: statistics.median(v) for k, v in runs.items()}
print(f"zstd -9 -T4: {calls / 1e6:.2f} M calls on 20 MB; CPU of the whole process tree, medians")
for b in builds:
    per = {}
    for t in ("ferrotrace", "uftrace"):
        fixed = med[f"{t}-{b}", "tiny"] - med["plain", "tiny"]
        with_fixed = (med[f"{t}-{b}", "big"] - med["plain", "big"]) * 1e6 / calls
        per[t] = (with_fixed, with_fixed - fixed * 1e6 / calls)
        print(f"  {b} {t}: fixed {fixed:.1f} ms; per call {with_fixed:.1f} ns with it, {per[t][1]:.1f} without")
    print(f"  {b} uftrace/ferrotrace: {per['uftrace'][0] / per['ferrotrace'][0]:.2f}x with the fixed cost,"
          f" {per['uftrace'][1] / per['ferrotrace'][1]:.2f}x without")
PY

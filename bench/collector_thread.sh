#!/usr/bin/env bash
# The collector thread's CPU time per traced call, for two (or more) builds of the preload runtime, on
# zstd's instrumented builds of bench/real.sh (which must have run), in interleaved rounds: each round
# runs `ferrotrace record` under each runtime (FERROTRACE_PRELOAD) inside `perf record -e task-clock
# -c 50000` (a sample per 50 µs of CPU) and counts the samples of the thread named `ferrotrace` in the
# traced process (the collector; `ferrotrace record`'s own process has the lower id). The whole process
# tree's CPU time varies by ±15 ms a run with zstd's own work, more than a change to the collector
# moves it (bench/runtime_ab.sh); the collector's own samples do not carry that noise.
# Prints, per runtime, the collector's CPU (median and fastest round) in ms and in ns per traced call.
# Usage: bench/collector_thread.sh A.so B.so ... (BUILD=fentry RUNS=15).
set -euo pipefail
RUNS=${RUNS:-15}
BUILD=${BUILD:-fentry}
[ $# -ge 1 ] || { echo "usage: bench/collector_thread.sh RUNTIME.so... (a libferrotrace_preload.so each)" >&2; exit 2; }
for so in "$@"; do
  [ -f "$so" ] || { echo "collector_thread: $so does not exist: give libferrotrace_preload.so builds" >&2; exit 2; }
done
command -v perf >/dev/null || { echo "collector_thread: perf is not installed" >&2; exit 2; }
name=collector_thread
source "$(dirname "$0")/zstd_real.sh"
log="$out/$BUILD.txt"
: > "$log"
echo "zstd $BUILD: $RUNS rounds, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for _ in $(seq "$RUNS"); do
  for so in "$@"; do
    FERROTRACE_PRELOAD=$so perf record -q -e task-clock -c 50000 -o "$out/perf.data" -- \
      "$ft" record -o "$out/trace.data" -- "$real/zstd-$BUILD" -q -9 -T4 -f "$real/zstd-input" -o "$out/out.zst" \
      >/dev/null 2>&1
    # Lines "SAMPLES TID:COMM"; the collector is the ferrotrace thread with the highest id.
    perf report -i "$out/perf.data" --sort pid --stdio -F sample,pid 2>/dev/null |
      awk -v so="$so" '$1 ~ /^[0-9]+$/ { split($2, t, ":"); if (t[2] == "ferrotrace" && t[1] + 0 > id) { id = t[1] + 0; n = $1 } }
        END { print so, n * 0.05 }' >> "$log"
  done
done
calls=$("$ft" info --json -i "$out/trace.data" | python3 -c 'import json,sys; print(json.load(sys.stdin)["events"] // 2)')
python3 - "$log" "$calls" "$BUILD" <<'PY'
import collections, statistics, sys
log, calls, build = sys.argv[1], int(sys.argv[2]), sys.argv[3]
ms = collections.defaultdict(list)
for line in open(log):
    so, v = line.split()
    ms[so].append(float(v))
print(f"zstd {build}: {calls / 1e6:.2f} M calls; the collector thread's CPU, median (fastest round)")
for so, v in ms.items():
    med, best = statistics.median(v), min(v)
    print(f"  {so}: {med:.1f} ms ({best:.1f}), {med * 1e6 / calls:.1f} ns per call ({best * 1e6 / calls:.1f})")
PY
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

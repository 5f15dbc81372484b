#!/usr/bin/env bash
# Two (or more) ferrotrace binaries against each other on one analysis command and one trace, in
# interleaved rounds (each round runs every binary once, in the order given): the CPU time of each run
# (`perf stat -e task-clock`, user+sys: what the machine's load disturbs least), best and median per
# binary, events per second of CPU time, and the median's ratio to the first binary's. The load
# average is printed with it.
# Usage: bench/analysis_ab.sh TRACE 'COMMAND ARGS' BINARY... (RUNS=11), e.g.
#   bench/analysis_ab.sh bench/out/lua14.data 'report --jobs 1' main/ferrotrace target/release/ferrotrace
set -euo pipefail
RUNS=${RUNS:-11}
[ $# -ge 3 ] || { echo "usage: bench/analysis_ab.sh TRACE 'COMMAND ARGS' BINARY..." >&2; exit 2; }
trace=$1 command=$2
shift 2
[ -f "$trace" ] || { echo "analysis_ab: no trace $trace: record one first (bench/analysis.sh, bench/real.sh)" >&2; exit 2; }
for b in "$@"; do
  [ -x "$b" ] || { echo "analysis_ab: $b is not an executable ferrotrace" >&2; exit 2; }
done
events=$("$1" info --json -i "$trace" | python3 -c 'import json,sys; print(json.load(sys.stdin)["events"])')
log=$(mktemp)
trap 'rm -f "$log"' EXIT
echo "$command -i $trace ($events events): $RUNS rounds, load $(cut -d' ' -f1-3 /proc/loadavg)"
for _ in $(seq "$RUNS"); do
  for b in "$@"; do
    # shellcheck disable=SC2086 # the command's words
    ms=$(perf stat -x, -e task-clock -- "$b" $command -i "$trace" 2>&1 >/dev/null | awk -F, '/task-clock/ { print $1 }')
    echo "$b $ms" >> "$log"
  done
done
echo "load afterwards $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$log" "$events" "$@" <<'PY'
import statistics, sys
log, events, binaries = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
runs = {b: [] for b in binaries}
for line in open(log):
    b, ms = line.rsplit(" ", 1)
    runs[b].append(float(ms))
first = statistics.median(runs[binaries[0]])
for b in binaries:
    best, med = min(runs[b]), statistics.median(runs[b])
    print(f"{b}: best {best:.0f} ms, median {med:.0f} ms CPU; "
          f"{events / best / 1e3:.1f} / {events / med / 1e3:.1f} M events/s; "
          f"median {med / first:.3f}x the first's")
PY

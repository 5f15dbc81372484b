#!/usr/bin/env bash
# Two (or more) builds of the preload runtime against each other and against uftrace, on zstd's
# instrumented builds of bench/real.sh (which must have run: it builds them in bench/out/real), in
# interleaved rounds: each round runs the plain build untraced, then `ferrotrace record` under each
# runtime (FERROTRACE_PRELOAD), then `uftrace record --no-libcall` (-P . on the NOP build; none on
# XRay). Prints, per build and runtime, the CPU time of the whole process tree (`perf stat -e
# task-clock`) per traced call above the plain build's, median and best, and uftrace's over it.
# Usage: bench/runtime_ab.sh A.so B.so ... (BUILDS=fentry,pg RUNS=15). CPU time is the figure that
# the machine's load disturbs least; the load average is printed with it.
set -euo pipefail
RUNS=${RUNS:-15}
BUILDS=${BUILDS:-fentry,pg}
[ $# -ge 1 ] || { echo "usage: bench/runtime_ab.sh RUNTIME.so... (a libferrotrace_preload.so each)" >&2; exit 2; }
for so in "$@"; do
  [ -f "$so" ] || { echo "runtime_ab: $so does not exist: give libferrotrace_preload.so builds" >&2; exit 2; }
done
name=runtime_ab
source "$(dirname "$0")/zstd_real.sh"
zstd_args() { echo "-q -9 -T4 -f $real/zstd-input -o $out/out.zst"; }
for b in ${BUILDS//,/ }; do
  log="$out/$b.txt"
  : > "$log"
  echo "zstd $b: $RUNS rounds, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
  for _ in $(seq "$RUNS"); do
    echo "plain $(cpu_ms "$real/zstd-plain" $(zstd_args))" >> "$log"
    for so in "$@"; do
      echo "$so $(FERROTRACE_PRELOAD=$so cpu_ms "$ft" record -o "$out/trace.data" -- "$real/zstd-$b" $(zstd_args))" >> "$log"
    done
    case $b in
      xray) ;;
      nop) echo "uftrace $(cpu_ms uftrace record --no-libcall -P . -d "$out/uftrace.data" "$real/zstd-$b" $(zstd_args))" >> "$log" ;;
      *) echo "uftrace $(cpu_ms uftrace record --no-libcall -d "$out/uftrace.data" "$real/zstd-$b" $(zstd_args))" >> "$log" ;;
    esac
    rm -rf "$out/uftrace.data"
  done
  calls=$("$ft" info --json -i "$out/trace.data" | python3 -c 'import json,sys; print(json.load(sys.stdin)["events"] // 2)' 2>/dev/null || echo 0)
  python3 - "$log" "$calls" "$b" <<'PY'
import collections, statistics, sys
log, calls, build = sys.argv[1], int(sys.argv[2]), sys.argv[3]
if calls <= 0:
    sys.exit(f"runtime_ab: could not read the number of calls from the last trace of zstd-{build}")
runs = collections.defaultdict(list)
for line in open(log):
    name, ms = line.split()
    runs[name].append(float(ms))
base_med, base_best = statistics.median(runs["plain"]), min(runs["plain"])
per_call = {n: ((statistics.median(v) - base_med) * 1e6 / calls, (min(v) - base_best) * 1e6 / calls)
            for n, v in runs.items() if n != "plain"}
u = per_call.get("uftrace")
print(f"zstd {build}: {calls / 1e6:.2f} M calls; ns of CPU per traced call, median (best)")
for n, (med, best) in per_call.items():
    ratio = f"  uftrace/this {u[0] / med:.2f}x ({u[1] / best:.2f}x)" if u and n != "uftrace" else ""
    print(f"  {n}: {med:.1f} ({best:.1f}){ratio}")
PY
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

#!/usr/bin/env bash
# Big traces: records `fib N` (2 events per call: fib 40 = 0.66 G events, 42 = 1.7 G, 44 = 4.5 G,
# 46 = 11.9 G, about 2 bytes each on disk) and runs every analysis command on it under
# /usr/bin/time -v, one command at a time, output to /dev/null or a file deleted at once. Prints a
# Markdown table (wall, CPU, events/s of CPU, peak RSS) for docs/performance.md: peak RSS must not
# grow with the trace. Not a test.
#
# Usage: bench/ten-billion.sh [N...]          (default: 40 42 44)
# Environment: FT (the ferrotrace binary; default target/release/ferrotrace, built if missing),
#   EXPORTS_MAX (largest N whose trace is also dumped to Perfetto and Parquet; default 40: the
#   exports are 5-25x slower than report and their output grows with the trace).
# A size runs only when the disk holds its trace (and its exports) plus 4 GB; the trace and every
# output are deleted after its commands.
set -euo pipefail
cd "$(dirname "$0")/.."
SIZES=${*:-40 42 44}
OUT=bench/out/big
EXPORTS_MAX=${EXPORTS_MAX:-40}
mkdir -p "$OUT"
if [ -z "${FT:-}" ]; then
  cargo build --release -j2 -q -p ferrotrace-cli -p ferrotrace-preload
  FT=target/release/ferrotrace
fi
FIB=testprogs/target/release/fib
[ -x "$FIB" ] || (cd testprogs && RUSTFLAGS="-Zinstrument-xray=always -Cforce-frame-pointers=yes" \
  cargo +nightly build --release -q --bin fib)
export FERROTRACE_PRELOAD=${FERROTRACE_PRELOAD:-target/release/libferrotrace_preload.so}

# measure LABEL EVENTS CMD... : CMD under /usr/bin/time -v, stdout to /dev/null; prints a table row.
measure() {
  local label=$1 events=$2; shift 2
  local log="$OUT/time.log"
  /usr/bin/time -v "$@" >/dev/null 2>"$log" || { echo "| $label | failed: $(tail -1 "$log") | | | |"; return; }
  local wall cpu rss rate
  wall=$(awk -F': ' '/Elapsed \(wall clock\)/{print $2}' "$log")
  cpu=$(awk -F': ' '/User time/{u=$2} /System time/{s=$2} END{print u+s}' "$log")
  rss=$(awk -F': ' '/Maximum resident/{printf "%.1f", $2/1024}' "$log")
  rate=$(awk -v e="$events" -v c="$cpu" 'BEGIN{if (c > 0) printf "%.1f M/s", e/c/1e6; else print "-"}')
  printf '| %s | %s | %.2f s | %s | %s MB |\n' "$label" "$wall" "$cpu" "$rate" "$rss"
}

echo "| command | wall | CPU (user+sys) | events/s (CPU) | peak RSS |"
echo "|---|---|---|---|---|"
for N in $SIZES; do
  T="$OUT/fib$N.data"
  # Events of fib N: 2 per call, calls(N) = 2 fib(N+1) - 1.
  EXPECT=$(python3 -c "a,b=0,1
for _ in range($N+1): a,b=b,a+b
print(2*(2*a-1))")
  # Its trace (about 2.1 bytes per event) and, where it is exported, the Parquet dataset (1.7), plus 4 GB.
  PER_EVENT=22
  [ "$N" -gt "$EXPORTS_MAX" ] || PER_EVENT=39
  NEED=$((EXPECT * PER_EVENT / 10 + (4 << 30)))
  FREE=$(df -B1 --output=avail "$OUT" | tail -1)
  if [ "$FREE" -lt "$NEED" ]; then
    echo "| **fib $N ($EXPECT events) skipped: $((FREE >> 30)) GB free, needs $((NEED >> 30)) GB** | | | | |"
    continue
  fi
  measure "record fib $N" "$EXPECT" "$FT" record -o "$T" -- "$FIB" "$N"
  EV=$("$FT" info -i "$T" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["events"])')
  echo "| **fib $N: $EV events, $(stat -c %s "$T") bytes** | | | | |"
  measure "info" "$EV" "$FT" info -i "$T"
  measure "report" "$EV" "$FT" report -i "$T"
  measure "graph" "$EV" "$FT" graph -i "$T"
  measure "replay > /dev/null" "$EV" "$FT" replay -i "$T"
  measure "flame --folded" "$EV" "$FT" flame -i "$T" --folded
  if [ "$N" -le "$EXPORTS_MAX" ]; then
    measure "dump --format perfetto" "$EV" "$FT" dump -i "$T" --format perfetto -o "$OUT/fib$N.pftrace"
    echo "| (Perfetto output: $(stat -c %s "$OUT/fib$N.pftrace") bytes) | | | | |"
    rm -f "$OUT/fib$N.pftrace"
    rm -rf "$OUT/fib$N.parquet"
    measure "dump --format parquet" "$EV" "$FT" dump -i "$T" --format parquet -o "$OUT/fib$N.parquet"
    echo "| (Parquet output: $(du -sb "$OUT/fib$N.parquet" | cut -f1) bytes) | | | | |"
    rm -rf "$OUT/fib$N.parquet"
  fi
  rm -f "$T"
done

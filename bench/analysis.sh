#!/usr/bin/env bash
# Analysis speed and memory: ferrotrace report/replay vs uftrace report/replay on the same trace
# (dumped to uftrace format), at two trace sizes; Perfetto output size vs uftrace's Chrome JSON.
# Not a test: prints a Markdown table for docs/performance.md, then the Perfetto and Parquet export rates
# (events per second of wall and of CPU time: Perfetto compresses on a second thread).
# Usage: bench/analysis.sh [N_SMALL N_BIG]
set -euo pipefail
cd "$(dirname "$0")/.."
SMALL=${1:-27}
BIG=${2:-31}
OUT=${BENCH_DIR:-/tmp/ferrotrace-bench}
mkdir -p "$OUT"
cargo build --release -j2 -q -p ferrotrace-cli -p ferrotrace-preload
(cd testprogs && RUSTFLAGS="-Zinstrument-xray=always -Cforce-frame-pointers=yes" cargo +nightly build --release -q)
FT=target/release/ferrotrace
export FERROTRACE_PRELOAD=target/release/libferrotrace_preload.so

# measure LABEL EVENTS CMD... : runs CMD under /usr/bin/time -v (stdout to /dev/null), prints a row.
measure() {
  local label=$1 events=$2; shift 2
  local log="$OUT/time.log"
  /usr/bin/time -v "$@" >/dev/null 2>"$log"
  local wall user sys rss
  wall=$(awk -F': ' '/Elapsed \(wall clock\)/{print $2}' "$log")
  user=$(awk -F': ' '/User time/{print $2}' "$log")
  sys=$(awk -F': ' '/System time/{print $2}' "$log")
  rss=$(awk -F': ' '/Maximum resident/{print $2}' "$log")
  local cpu rate
  cpu=$(echo "$user + $sys" | bc -l)
  # Below the timer's 10 ms resolution the rate is unknown, not infinite.
  if [ "$(echo "$cpu > 0" | bc -l)" = 1 ]; then
    rate=$(printf '%.1f M/s' "$(echo "$events / $cpu / 1000000" | bc -l)")
  else
    rate="(< 10 ms)"
  fi
  printf '| %s | %s | %.2f s | %s | %.1f MB |\n' "$label" "$wall" "$cpu" "$rate" "$(echo "$rss/1024" | bc -l)"
}

# rate LABEL EVENTS CMD... : runs CMD under /usr/bin/time, prints events/s of wall and of CPU time.
rate() {
  local label=$1 events=$2; shift 2
  local log="$OUT/rate.log"
  /usr/bin/time -f '%e %U %S' "$@" >/dev/null 2>"$log"
  read -r wall user sys < <(tail -1 "$log")
  printf '%s: %.1f M events/s wall (%.2f s), %.1f M events/s CPU (%.2f s user+sys)\n' "$label" \
    "$(echo "$events / $wall / 1000000" | bc -l)" "$wall" \
    "$(echo "$events / ($user + $sys) / 1000000" | bc -l)" "$(echo "$user + $sys" | bc -l)"
}

echo "| command | wall | CPU (user+sys) | events/s (CPU) | peak RSS |"
echo "|---|---|---|---|---|"
for N in $SMALL $BIG; do
  T="$OUT/fib$N.data"
  $FT record -o "$T" -- testprogs/target/release/fib "$N" >/dev/null 2>&1
  EV=$($FT info -i "$T" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["events"])')
  rm -rf "$OUT/fib$N.uftrace"
  $FT dump -i "$T" --format uftrace -o "$OUT/fib$N.uftrace" 2>/dev/null
  echo "| **fib $N: $EV events, $(stat -c %s "$T") bytes** | | | | |"
  measure "ferrotrace report --jobs 1" "$EV" $FT report --jobs 1 -i "$T"
  measure "ferrotrace report --jobs 2 (decodes on a second core)" "$EV" $FT report --jobs 2 -i "$T"
  measure "uftrace report" "$EV" uftrace report -d "$OUT/fib$N.uftrace"
  measure "ferrotrace replay > /dev/null" "$EV" $FT replay -i "$T"
  measure "uftrace replay > /dev/null" "$EV" uftrace replay -d "$OUT/fib$N.uftrace"
  measure "ferrotrace graph" "$EV" $FT graph -i "$T"
  measure "ferrotrace dump --format perfetto" "$EV" $FT dump -i "$T" --format perfetto -o "$OUT/fib$N.pftrace"
  measure "ferrotrace dump --format chrome" "$EV" $FT dump -i "$T" --format chrome -o "$OUT/fib$N.json"
  measure "uftrace dump --chrome" "$EV" sh -c "uftrace dump --chrome -d '$OUT/fib$N.uftrace' > '$OUT/fib$N.uftrace.json'"
  $FT dump -i "$T" --format perfetto --uncompressed -o "$OUT/fib$N.plain.pftrace" 2>/dev/null
  echo
  rate "fib $N dump --format perfetto" "$EV" $FT dump -i "$T" --format perfetto -o "$OUT/fib$N.pftrace"
  rate "fib $N dump --format perfetto --uncompressed" "$EV" $FT dump -i "$T" --format perfetto --uncompressed -o "$OUT/fib$N.plain.pftrace"
  rm -rf "$OUT/fib$N.parquet"
  rate "fib $N dump --format parquet" "$EV" $FT dump -i "$T" --format parquet -o "$OUT/fib$N.parquet"
  PQ=$(du -sb "$OUT/fib$N.parquet" | cut -f1)
  echo "parquet fib $N: $PQ B, $(echo "$PQ / $EV" | bc -l | xargs printf '%.2f') B/event"
  echo "sizes fib $N ($EV events): ferrotrace $(stat -c %s "$T") B;" \
    "perfetto $(stat -c %s "$OUT/fib$N.pftrace") B (uncompressed $(stat -c %s "$OUT/fib$N.plain.pftrace") B);" \
    "ferrotrace chrome $(stat -c %s "$OUT/fib$N.json") B; uftrace chrome $(stat -c %s "$OUT/fib$N.uftrace.json") B"
  echo
done

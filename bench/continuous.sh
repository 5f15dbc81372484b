#!/usr/bin/env bash
# Continuous profiling over a long run (issue 40): `profile --bpf -a -F 99 --every 60s --parquet DIR`
# for MINUTES (default 30) while one busy load runs (nice 19: a gcc compile loop, one compiler at a
# time, over testprogs/c, so processes start and end all the time; or LOAD=spin, one shell loop).
# Every minute it reads the profiler's CPU time (/proc/PID/stat utime + stime, every thread: the
# recording loop, the table builders and the part writer) and resident memory (VmRSS), and prints:
#   minute  cpu s  cpu %  rss MB  parts
# (cpu % of one core over that minute), then:
#   CPU % of one core over the whole run, RSS at the start (after the first minute), middle and end,
#   the dataset's bytes per sample (every part, and the median part: one period), and the same load
#   under `perf record -F 99 -a -g` for one period: perf.data bytes per sample.
# Usage: bench/continuous.sh [MINUTES]   (root; env: FT=path/to/ferrotrace, default this checkout's
#        release build; LOAD=gcc|spin; PERIOD=60s)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=$ROOT/bench/out/continuous
MINUTES=${1:-30}
PERIOD=${PERIOD:-60s}
LOAD=${LOAD:-gcc}
if [ -z "${FT:-}" ]; then
  (cd "$ROOT" && nice -n 10 cargo build --release -q -p ferrotrace-cli)
  FT=$ROOT/target/release/ferrotrace
fi
rm -rf "$OUT"
mkdir -p "$OUT"
ds=$OUT/ds

# The load: one process busy at a time, at the lowest priority.
case $LOAD in
  gcc)
    nice -n 19 bash -c "while true; do for f in $ROOT/testprogs/c/*.c; do
      gcc -O2 -c \"\$f\" -o /dev/null 2>/dev/null || true; done; done" &
    ;;
  spin) nice -n 19 bash -c 'while true; do :; done' & ;;
  *) echo "LOAD: gcc or spin" >&2; exit 2 ;;
esac
load=$!
profiler=
cleanup() {
  [ -n "$profiler" ] && kill -INT "$profiler" 2>/dev/null || true
  kill "$load" 2>/dev/null || true
  pkill -P "$load" 2>/dev/null || true
}
trap cleanup EXIT
sleep 2

hz=$(getconf CLK_TCK)
cpu_s() { # PID -> CPU seconds of every thread (utime + stime, fields 14 and 15; comm has no space)
  awk -v hz="$hz" '{ printf "%.2f\n", ($14 + $15) / hz }' "/proc/$1/stat"
}
rss_mb() { awk '/^VmRSS:/ { printf "%.1f\n", $2 / 1024 }' "/proc/$1/status"; }
parts() { find "$ds" -mindepth 4 -maxdepth 4 -name 'part-*' 2>/dev/null | wc -l; }

echo "load ($LOAD) before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) CPUs; $MINUTES min at 99 Hz, periods of $PERIOD"
"$FT" profile --bpf -a -F 99 --every "$PERIOD" --parquet "$ds" 2>"$OUT/profiler.err" &
profiler=$!
start=$(date +%s.%N)
printf '%6s %8s %6s %7s %6s\n' minute 'cpu s' 'cpu %' 'rss MB' parts | tee "$OUT/minutes.txt"
last=0
rss=()
for m in $(seq "$MINUTES"); do
  # Each reading a minute after the profiler's start, whatever the readings took.
  sleep "$(awk -v s="$start" -v m="$m" -v now="$(date +%s.%N)" 'BEGIN { d = s + 60 * m - now; print (d > 0 ? d : 0) }')"
  kill -0 "$profiler" 2>/dev/null || { echo "the profiler ended:"; cat "$OUT/profiler.err"; exit 1; }
  c=$(cpu_s "$profiler")
  r=$(rss_mb "$profiler")
  rss+=("$r")
  awk -v m="$m" -v c="$c" -v l="$last" -v r="$r" -v p="$(parts)" \
    'BEGIN { printf "%6d %8.2f %6.1f %7.1f %6d\n", m, c, 100 * (c - l) / 60, r, p }' | tee -a "$OUT/minutes.txt"
  last=$c
done
wall=$(awk -v s="$start" -v now="$(date +%s.%N)" 'BEGIN { print now - s }')
kill -INT "$profiler"
wait "$profiler" || { echo "the profiler failed:"; cat "$OUT/profiler.err"; exit 1; }
profiler=

# The dataset: samples by report -i, bytes of the parts (nothing staged is left).
samples=$("$FT" report -i "$ds" --json 2>/dev/null | python3 -c 'import json, sys; print(json.load(sys.stdin)["samples"])')
bytes=$(du -sb --exclude=.staging "$ds" | cut -f1)
# One period: the part whose samples are the median (its directory's bytes over its samples).
median_part=$(python3 - "$ds" <<'EOF'
import duckdb, sys
rows = duckdb.sql(f"""select split_part(filename, '/', -2) part, count(*) n
  from read_parquet('{sys.argv[1]}/host=*/date=*/hour=*/part-*/samples.parquet', filename = true)
  group by all order by n""").fetchall()
print(*rows[len(rows) // 2])
EOF
)
read -r mpart msamples <<<"$median_part"
mbytes=$(du -sb "$(find "$ds" -type d -name "$mpart")" | cut -f1)

# perf over the same load, one period.
period_s=$(awk -v p="$PERIOD" 'BEGIN { n = p + 0; if (p ~ /m$/) n *= 60; print n }')
perf record -q -F 99 -a -g -o "$OUT/perf.data" -- sleep "$period_s" 2>"$OUT/perf.err"
perf_samples=$(perf report -i "$OUT/perf.data" --stats 2>/dev/null | awk '/SAMPLE events:/ { print $3; exit }')
perf_bytes=$(stat -c %s "$OUT/perf.data")
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"

n=${#rss[@]}
awk -v c="$last" -v w="$wall" -v r0="${rss[0]}" -v rm="${rss[$((n / 2))]}" -v r1="${rss[$((n - 1))]}" \
  -v s="$samples" -v b="$bytes" -v p="$(parts)" -v ms="$msamples" -v mb="$mbytes" \
  -v ps="$perf_samples" -v pb="$perf_bytes" -v per="$PERIOD" 'BEGIN {
  printf "profiler CPU: %.1f s in %.0f s, %.2f %% of one core\n", c, w, 100 * c / w
  printf "profiler RSS: %.1f MB after the first minute, %.1f MB mid-run, %.1f MB at the end\n", r0, rm, r1
  printf "dataset: %d parts, %d samples, %d bytes: %.1f bytes per sample (median part: %d samples, %.1f bytes per sample)\n", p, s, b, b / s, ms, mb / ms
  printf "perf record -F 99 -a -g, one period (%s): %d samples, %d bytes: %.1f bytes per sample\n", per, ps, pb, pb / ps
}' | tee "$OUT/summary.txt"
echo "(files in $OUT; delete it when done)"

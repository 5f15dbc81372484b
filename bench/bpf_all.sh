#!/usr/bin/env bash
# `profile --bpf -a` beside a parallel build (issue 37 item 3): every process's unwind tables were
# built on the sampling loop's thread, so with a build starting compilers the counts went unread for
# seconds and `--duration` overran. While `gcc -O2 -c` of each of Lua 5.4's sources (Debian's source
# package) runs two at a time in a loop, each build of ferrotrace records `-a` for DURATION seconds
# at 999 Hz, rounds interleaved; per run it prints:
#   start s   from the command's start to its "recording every process" line
#   total s   the command's wall time (DURATION, plus start-up and finishing)
#   gap s     the longest time between two reads of the counts (distinct sample times in `replay`)
#   reads     how many times the counts were read (every 0.25 s when nothing stalls)
#   samples   samples recorded
#   early %   of them, stopped "before the process's mappings were loaded" (their tables not in yet)
# Usage: bench/bpf_all.sh   (root; env: RUNS=3 DURATION=10 FTS="new=target/release/ferrotrace
#        old=/path/to/the/previous/build"; the default is this checkout's release build alone)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=$ROOT/bench/out/bpf_all
mkdir -p "$OUT"
RUNS=${RUNS:-3}
DURATION=${DURATION:-10}
if [ -z "${FTS:-}" ]; then
  (cd "$ROOT" && cargo build --release -q -p ferrotrace-cli)
  FTS="new=$ROOT/target/release/ferrotrace"
fi
src=$ROOT/bench/out/real/src out=$OUT
mkdir -p "$src"
source "$ROOT/bench/programs.sh"
lua=$(fetch lua5.4 'lua5.4-*')

# The build: every Lua source compiled, two at a time, over and over until killed.
(
  while true; do
    ls "$lua"/src/*.c | grep -v -e '/lua\.c$' -e '/luac\.c$' |
      xargs -P2 -I{} gcc -O2 '-DDEB_HOST_MULTIARCH="x86_64-linux-gnu"' -c {} -o /dev/null
  done
) &
build=$!
trap 'kill $build 2>/dev/null; pkill -P $build 2>/dev/null || true' EXIT
sleep 2

now() { date +%s.%N; }
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) CPUs; ${DURATION} s per run"
printf '%-6s %4s %8s %8s %7s %6s %8s %8s\n' build run 'start s' 'total s' 'gap s' reads samples 'early %'
for run in $(seq "$RUNS"); do
  for entry in $FTS; do
    name=${entry%%=*} ft=${entry#*=}
    data=$OUT/all-$name-$run.data
    t0=$(now)
    # Each line of the recorder's stderr stamped as it comes.
    "$ft" profile --bpf -a -F 999 --duration "${DURATION}s" -o "$data" 2>&1 >/dev/null |
      while IFS= read -r line; do echo "$(now) $line"; done >"$data.err"
    t1=$(now)
    started=$(awk '/recording every process/ { print $1; exit }' "$data.err")
    read -r gap reads < <("$ft" replay -i "$data" 2>/dev/null | awk '
      $2 == "s" { t = $1 + 0; if (!(t in seen)) { seen[t] = 1; n++; if (n > 1 && t - last > gap) gap = t - last; last = t } }
      $2 == "ms" { t = $1 / 1000; if (!(t in seen)) { seen[t] = 1; n++; if (n > 1 && t - last > gap) gap = t - last; last = t } }
      END { printf "%.2f %d\n", gap, n }')
    samples=$(grep -o ': [0-9]* samples' "$data.err" | head -1 | tr -dc '0-9')
    early=$(grep -o '[0-9]* before the process.s mappings were loaded' "$data.err" | awk '{ print $1 }' | head -1)
    awk -v n="$name" -v r="$run" -v a="$t0" -v s="${started:-$t1}" -v b="$t1" -v g="$gap" -v k="$reads" \
      -v m="${samples:-0}" -v e="${early:-0}" 'BEGIN {
      printf "%-6s %4d %8.2f %8.2f %7.2f %6d %8d %8.1f\n", n, r, s - a, b - a, g, k, m, m ? 100 * e / m : 0 }'
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"

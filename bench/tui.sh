#!/usr/bin/env bash
# Time to the first screen of `ferrotrace tui` (the report, drawn in a pseudo-terminal by
# `script` from util-linux, then exit: the hidden --first-screen-and-exit) on a trace of fib N
# (fib 36: about 97 M events), against `ferrotrace report` on the same trace (ratio printed) and,
# when uftrace is installed, `uftrace report` on the trace dumped to uftrace's format (uftrace tui
# cannot be timed to its first screen from a script). Best of RUNS wall times, peak RSS of the last.
# Not a test: prints lines for docs/performance.md.
# Usage: bench/tui.sh [N] [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-36}
RUNS=${2:-3}
OUT=${BENCH_DIR:-/tmp/ferrotrace-bench}
mkdir -p "$OUT"
cargo build --release -j2 -q -p ferrotrace-cli -p ferrotrace-preload
(cd testprogs && RUSTFLAGS="-Zinstrument-xray=always -Cforce-frame-pointers=yes" cargo +nightly build --release -q)
FT=$PWD/target/release/ferrotrace
export FERROTRACE_PRELOAD=$PWD/target/release/libferrotrace_preload.so
T="$OUT/tui-fib$N.data"
[ -f "$T" ] || $FT record -o "$T" -- testprogs/target/release/fib "$N" >/dev/null 2>&1
EV=$($FT info -i "$T" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["events"])')
echo "fib $N: $EV events, $(stat -c %s "$T") bytes; $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg)"

# best LABEL CMD... : best wall time of RUNS runs of CMD (stdout to /dev/null) and the last run's
# peak RSS; sets BEST (seconds).
best() {
  local label=$1; shift
  local log="$OUT/tui-time.log" t
  BEST=
  for _ in $(seq "$RUNS"); do
    /usr/bin/time -f '%e %M' -o "$log" "$@" >/dev/null 2>&1
    t=$(cut -d' ' -f1 "$log")
    if [ -z "$BEST" ] || [ "$(echo "$t < $BEST" | bc -l)" = 1 ]; then BEST=$t; fi
  done
  printf '%-52s %6.2f s  peak RSS %6.1f MB\n' "$label" "$BEST" "$(echo "$(cut -d' ' -f2 "$log") / 1024" | bc -l)"
}

# The TUI needs a terminal: `script` gives it one (40 x 160), its output (the screen) goes to a file.
best "ferrotrace tui: first screen (report) and exit" \
  script -qfec "stty rows 40 cols 160; $FT tui -i $T --first-screen-and-exit" "$OUT/tui-screen.txt"
TUI=$BEST
grep -q "fib::fib" "$OUT/tui-screen.txt" || { echo "bench/tui.sh: the first screen does not show fib::fib" >&2; exit 1; }
best "ferrotrace report" $FT report -i "$T"
printf 'tui first screen / report: %.2f\n' "$(echo "$TUI / $BEST" | bc -l)"
if command -v uftrace >/dev/null; then
  U="$OUT/tui-fib$N.uftrace"
  [ -d "$U" ] || $FT dump -i "$T" --format uftrace -o "$U" 2>/dev/null
  best "uftrace report" uftrace report -d "$U"
  printf 'tui first screen / uftrace report: %.2f\n' "$(echo "$TUI / $BEST" | bc -l)"
else
  echo "uftrace not installed: no uftrace figure"
fi

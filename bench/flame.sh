#!/usr/bin/env bash
# Memory of flame graphs as the trace grows: peak RSS and time of `ferrotrace flame -o x.svg` (and of
# `flame --folded`) against `uftrace dump --flame-graph` (uftrace's folded stacks, the input of its
# flame graphs) on the same programs at three sizes each:
#   fib 25, 30, 33: few call paths (recursion depth), events x 94;
#   testprogs/workload 1000, 4000, 16000 (serde_json + regex + rayon): the call paths grow with N.
# ferrotrace traces the XRay builds, uftrace records the -Zinstrument-mcount builds of the same code.
# Not a test: prints a Markdown table for docs/performance.md.
# Usage: bench/flame.sh   (FT=path/to/ferrotrace measures another build, e.g. an older commit's;
#                          FIB="25 30 33" WORKLOAD="1000 4000 16000" choose the sizes)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/fib.sh
OUT=${BENCH_DIR:-/tmp/ferrotrace-bench}/flame
FIB=${FIB:-25 30 33}
WORKLOAD=${WORKLOAD:-1000 4000 16000}
mkdir -p "$OUT"
cargo build --release -j2 -q -p ferrotrace-cli -p ferrotrace-preload
export FERROTRACE_PRELOAD=$PWD/target/release/libferrotrace_preload.so
FT=${FT:-$PWD/target/release/ferrotrace}
build_fib "$OUT/fib-xray" "-Zinstrument-xray=always -Cforce-frame-pointers=yes"
build_fib "$OUT/fib-mcount" "-Zinstrument-mcount -Cforce-frame-pointers=yes"
# build_workload TARGET_DIR RUSTFLAGS: builds testprogs/workload with nightly into TARGET_DIR.
build_workload() {
  (cd testprogs/workload && CARGO_TARGET_DIR="$1" RUSTFLAGS="$2" cargo +nightly build --release -q --locked)
}
build_workload "$OUT/workload-xray" "-Zinstrument-xray=always -Cforce-frame-pointers=yes"
build_workload "$OUT/workload-mcount" "-Zinstrument-mcount -Cforce-frame-pointers=yes"

# measure LABEL CMD...: runs CMD under /usr/bin/time -v (stdout to /dev/null), prints a row.
measure() {
  local label=$1; shift
  local log="$OUT/time.log"
  /usr/bin/time -v "$@" >/dev/null 2>"$log"
  local wall rss
  wall=$(awk -F': ' '/Elapsed \(wall clock\)/{print $2}' "$log")
  rss=$(awk -F': ' '/Maximum resident/{print $2}' "$log")
  printf '| %s | %s | %.1f MB |\n' "$label" "$wall" "$(echo "$rss/1024" | bc -l)"
}

# trace NAME XRAY_BIN MCOUNT_BIN ARG: records both, prints the rows of the three commands.
trace() {
  local name=$1 xray=$2 mcount=$3 arg=$4
  local t="$OUT/$name$arg.data" u="$OUT/$name$arg.uftrace"
  "$FT" record -o "$t" -- "$xray" "$arg" >/dev/null 2>&1
  rm -rf "$u"
  uftrace record -d "$u" "$mcount" "$arg" >/dev/null
  local events paths
  events=$("$FT" info -i "$t" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["events"])')
  paths=$("$FT" flame -i "$t" --folded | wc -l)
  echo "| **$name $arg: $events events, $paths call paths with self time** | | |"
  measure "ferrotrace flame -o x.svg" "$FT" flame -i "$t" -o "$OUT/x.svg"
  measure "ferrotrace flame --folded" "$FT" flame -i "$t" --folded
  measure "uftrace dump --flame-graph" uftrace dump --flame-graph -d "$u"
}

echo "| command | wall | peak RSS |"
echo "|---|---|---|"
for n in $FIB; do
  trace fib "$OUT/fib-xray/release/fib" "$OUT/fib-mcount/release/fib" "$n"
done
for n in $WORKLOAD; do
  trace workload "$OUT/workload-xray/release/ft-workload" "$OUT/workload-mcount/release/ft-workload" "$n"
done

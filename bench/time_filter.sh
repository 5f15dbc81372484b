#!/usr/bin/env bash
# What `record -t` (and a `-T time=` trigger) costs the traced program and what it saves on disk
# (issue 38 item 2), every variant in one run, interleaved round after round (medians):
#   C fib (testprogs/c/mcwork.c, gcc -O2 -pg): the uninstrumented build, ferrotrace record, ferrotrace
#   record -t 10us, uftrace record, uftrace record -t 10us; Rust fib (XRay sleds): ferrotrace record
#   with and without -t 10us.
# Every fib call is shorter than 10 µs, so -t leaves out all but the outermost few: the program still
# pays the recording of each call (the filter runs on the collector, not in the hooks), the file holds
# almost nothing. Prints ns per call and overhead per call (each program times its own fib(N)), the
# ratio of uftrace's overhead to ferrotrace's with the same option, and each trace's size.
# Usage: bench/time_filter.sh [N=30] (RUNS=7 rounds)
set -euo pipefail
N=${1:-30}
RUNS=${RUNS:-7}
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/bench/fib.sh"
setup_fib_builds time_filter
cflags="-O2 -fno-optimize-sibling-calls -pthread"
gcc $cflags -o "$out/c_plain" "$root/testprogs/c/mcwork.c"
gcc $cflags -pg -o "$out/c_pg" "$root/testprogs/c/mcwork.c"

declare -A samples ns calls
cd "$out"
rust="$out/xray/release/fib"
for round in $(seq "$RUNS"); do
  echo "round $round/$RUNS ..." >&2
  run c_plain "$out/c_plain" fib "$N"
  run c_all "$ft" record -o "$out/c-all.data" -- "$out/c_pg" fib "$N"
  run c_t "$ft" record -t 10us -o "$out/c-t.data" -- "$out/c_pg" fib "$N"
  run c_uf uftrace record -d "$out/c-all.uftrace" "$out/c_pg" fib "$N"
  run c_uf_t uftrace record -t 10us -d "$out/c-t.uftrace" "$out/c_pg" fib "$N"
  run r_plain "$out/plain/release/fib" "$N"
  run r_all "$ft" record -o "$out/r-all.data" -- "$rust" "$N"
  run r_t "$ft" record -t 10us -o "$out/r-t.data" -- "$rust" "$N"
done
for name in "${!samples[@]}"; do
  ns[$name]=$(printf '%s\n' ${samples[$name]} | median)
done

echo
echo "fib($N): ${calls[c_plain]} calls; median of $RUNS rounds, load $(cut -d' ' -f1-3 /proc/loadavg)"
ROW_WIDTH=40
printf '%-40s %12s %14s %16s\n' variant "ns/call" "overhead/call" "uftrace/this"
echo "C, gcc -O2 -pg:"
row c_plain c_plain "" "  uninstrumented build"
row c_all c_plain c_uf "  ferrotrace record"
row c_t c_plain c_uf_t "  ferrotrace record -t 10us"
row c_uf c_plain "" "  uftrace record"
row c_uf_t c_plain "" "  uftrace record -t 10us"
echo "Rust, XRay sleds:"
row r_plain r_plain "" "  uninstrumented build"
row r_all r_plain "" "  ferrotrace record"
row r_t r_plain "" "  ferrotrace record -t 10us"
echo "trace sizes (bytes):"
for f in c-all.data c-t.data r-all.data r-t.data; do printf '  %-16s %12s\n' "$f" "$(stat -c %s "$out/$f")"; done
for d in c-all.uftrace c-t.uftrace; do printf '  %-16s %12s\n' "$d" "$(du -sb "$out/$d" | cut -f1)"; done

#!/usr/bin/env bash
# Cost per traced call of mcount tracing, every variant measured in one run, interleaved round after
# round (medians):
#   Rust fib built with -Zinstrument-mcount -Cforce-frame-pointers=yes: the uninstrumented build, the
#   mcount build run alone (glibc's mcount: gprof profiling), ferrotrace record, ferrotrace record with fib
#   left unpatched (-P main), uftrace 0.13 record; for reference in the same conditions, the floor (the
#   uninstrumented program reading rdtsc at entry and exit of every call) and ferrotrace record of the
#   XRay build;
#   C fib (testprogs/c/mcwork.c, gcc -O2 -pg): the same five;
#   C fib with -pg -mnop-mcount -mrecord-mcount (NOPs patched at run time): uninstrumented, the NOP build
#   alone, ferrotrace record with fib left unpatched (-N), ferrotrace record.
# Prints ns per call (each program times its own fib(N) computation: start-up is excluded), the overhead
# per call over the uninstrumented build, and uftrace's overhead over ferrotrace's.
# Usage: bench/mcount.sh [N=30] (RUNS=7 rounds)
set -euo pipefail
N=${1:-30}
RUNS=${RUNS:-7}
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/bench/fib.sh"
setup_fib_builds mcount
src="$root/testprogs/c/mcwork.c"
cflags="-O2 -fno-optimize-sibling-calls -pthread"
gcc $cflags -o "$out/c_plain" "$src"
gcc $cflags -pg -o "$out/c_pg" "$src"
gcc $cflags -fno-pie -no-pie -o "$out/c_plain_nopie" "$src"
gcc $cflags -pg -mnop-mcount -mrecord-mcount -fno-pie -no-pie -o "$out/c_nop" "$src"

declare -A samples ns calls
cd "$out" # gmon.out of the runs without a tracer lands here
have_uftrace=$(command -v uftrace >/dev/null && echo 1 || true)
rust="$out/mcount/release/fib"
for round in $(seq "$RUNS"); do
  echo "round $round/$RUNS ..." >&2
  run r_plain "$out/plain/release/fib" "$N"
  run r_floor "$out/plain/release/fib" "$N" rdtsc
  run r_xray "$ft" record -o "$out/x.data" -- "$out/xray/release/fib" "$N"
  run r_alone "$rust" "$N"
  run r_ferrotrace "$ft" record -o "$out/r.data" -- "$rust" "$N"
  run r_filtered "$ft" record -o "$out/r-filtered.data" -P '^fib::main$' -- "$rust" "$N"
  [ -z "$have_uftrace" ] || run r_uftrace uftrace record -d "$out/r.uftrace" "$rust" "$N"
  run c_plain "$out/c_plain" fib "$N"
  run c_alone "$out/c_pg" fib "$N"
  run c_ferrotrace "$ft" record -o "$out/c.data" -- "$out/c_pg" fib "$N"
  run c_filtered "$ft" record -o "$out/c-filtered.data" -P '^main$' -- "$out/c_pg" fib "$N"
  [ -z "$have_uftrace" ] || run c_uftrace uftrace record -d "$out/c.uftrace" "$out/c_pg" fib "$N"
  run n_plain "$out/c_plain_nopie" fib "$N"
  run n_alone "$out/c_nop" fib "$N"
  run n_filtered "$ft" record -o "$out/n-filtered.data" -P '^main$' -- "$out/c_nop" fib "$N"
  run n_ferrotrace "$ft" record -o "$out/n.data" -- "$out/c_nop" fib "$N"
done
for name in "${!samples[@]}"; do
  ns[$name]=$(printf '%s\n' ${samples[$name]} | median)
done

echo
echo "fib($N): ${calls[r_plain]} calls (Rust), ${calls[c_plain]} (C); median of $RUNS rounds, $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
ROW_WIDTH=46
printf '%-46s %12s %14s %16s\n' variant "ns/call" "overhead/call" "uftrace/this"
echo "Rust, -Zinstrument-mcount -Cforce-frame-pointers=yes:"
row r_plain r_plain "" "  uninstrumented build"
row r_alone r_plain "" "  mcount build alone (glibc mcount)"
row r_filtered r_plain "" "  ferrotrace record, fib not patched (-P)"
row r_ferrotrace r_plain r_uftrace "  ferrotrace record"
row r_uftrace r_plain "" "  uftrace record"
row r_floor r_plain "" "  floor: rdtsc at entry and exit (no tracer)"
row r_xray r_plain r_uftrace "  XRay build, ferrotrace record"
echo "C, gcc -O2 -pg:"
row c_plain c_plain "" "  uninstrumented build"
row c_alone c_plain "" "  -pg build alone (glibc mcount)"
row c_filtered c_plain "" "  ferrotrace record, fib not patched (-P)"
row c_ferrotrace c_plain c_uftrace "  ferrotrace record"
row c_uftrace c_plain "" "  uftrace record"
echo "C, gcc -O2 -pg -mnop-mcount -mrecord-mcount -no-pie:"
row n_plain n_plain "" "  uninstrumented build"
row n_alone n_plain "" "  NOP build alone"
row n_filtered n_plain "" "  ferrotrace record, fib not patched (-P)"
row n_ferrotrace n_plain "" "  ferrotrace record (NOPs patched)"

#!/usr/bin/env bash
# Cost per traced call of function tracing, all variants measured in one run on the same fib program:
#   uninstrumented | XRay sleds, unpatched | sleds of fib left unpatched (-P main) | traced by ferrotrace |
#   uftrace 0.13 on the -Zinstrument-mcount build; and the floor of any tracer that timestamps entry and
#   exit: the uninstrumented program reading rdtsc twice per call. Then the same three-way comparison
#   (uninstrumented, ferrotrace, uftrace) on `fib N locked`, which counts its calls with a locked
#   fetch_add: a full barrier in every call, so a tracer's stores must drain before the call goes on.
# Prints ns per call (the program times its own fib(N) computation; start-up is excluded), the overhead
# per traced call over the uninstrumented build, the ratio to uftrace, and bytes per event on disk.
# Usage: bench/xray.sh [N=30] (RUNS=5 rounds, every variant once per round; medians reported)
set -euo pipefail
N=${1:-30}
RUNS=${RUNS:-5}
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/bench/fib.sh"
setup_fib_builds xray

declare -A samples ns calls
cd "$out"
have_uftrace=$(command -v uftrace >/dev/null && echo 1 || true)
for round in $(seq "$RUNS"); do
  echo "round $round/$RUNS ..." >&2
  run plain "$out/plain/release/fib" "$N"
  run floor "$out/plain/release/fib" "$N" rdtsc
  run unpatched "$out/xray/release/fib" "$N"
  run filtered "$ft" record -o "$out/filtered.data" -P '^fib::main$' -- "$out/xray/release/fib" "$N"
  run ferrotrace "$ft" record -o "$out/traced.data" -- "$out/xray/release/fib" "$N"
  [ -z "$have_uftrace" ] || run uftrace uftrace record -d "$out/uftrace.data" "$out/mcount/release/fib" "$N"
  run plain_locked "$out/plain/release/fib" "$N" locked
  run ferrotrace_locked "$ft" record -o "$out/traced-locked.data" -- "$out/xray/release/fib" "$N" locked
  [ -z "$have_uftrace" ] ||
    run uftrace_locked uftrace record -d "$out/uftrace-locked.data" "$out/mcount/release/fib" "$N" locked
done
for name in "${!samples[@]}"; do
  ns[$name]=$(printf '%s\n' ${samples[$name]} | median)
done
events=$("$ft" info -i "$out/traced.data" --json | sed -n 's/.*"events":\([0-9]*\).*/\1/p')
bytes=$(stat -c %s "$out/traced.data")
waited=$("$ft" info -i "$out/traced.data" --json | grep -o '"waited_ns":[0-9]*' | cut -d: -f2 | paste -sd+ | bc)

echo
echo "fib($N): ${calls[plain]} calls, median of $RUNS runs, $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
printf '%-34s %12s %14s %16s\n' variant "ns/call" "overhead/call" "vs uftrace"
row plain plain "" "uninstrumented"
row floor plain "" "floor: rdtsc at entry and exit"
row unpatched plain "" "XRay sleds, not patched"
row filtered plain "" "ferrotrace record, fib not patched (-P)"
row ferrotrace plain uftrace "ferrotrace record (all functions)"
row uftrace plain "" "uftrace record (mcount build)"
echo "ferrotrace above the floor: $(echo "scale=2; (${ns[ferrotrace]} - ${ns[floor]}) / ${calls[floor]}" | bc) ns per call"
echo "with a locked fetch_add in every call (fib $N locked):"
row plain_locked plain_locked "" "uninstrumented"
row ferrotrace_locked plain_locked uftrace_locked "ferrotrace record"
row uftrace_locked plain_locked "" "uftrace record"
echo
echo "ferrotrace trace: $events events, $bytes bytes, $(echo "scale=2; $bytes / $events" | bc) bytes/event; traced thread waited ${waited:-0} ns for buffers"

#!/usr/bin/env bash
# Cost of allocation tracing per malloc+free pair, all variants measured in one run on the same program
# (testprogs/c/allocs.c `loop N`: N × { p = malloc(64); free(p); }, built with gcc -O1 and frame
# pointers; it times its own loop in thread CPU time, so start-up, the writing of the trace at exit, and
# the time this shared machine gave to other processes are excluded; the collector thread's work is
# excluded too: it runs beside the program, on the other core):
#   untraced | ferrotrace record --alloc (stacks, 64 frames deep) | --alloc-stack-depth 0 (no stacks) |
#   --alloc-sample 512K | heaptrack (Debian package; libunwind stacks).
# Prints ns per pair (medians of RUNS interleaved rounds), the overhead over untraced, heaptrack's
# overhead divided by each, and ferrotrace's bytes per event on disk.
# Usage: bench/alloc.sh [N=5000000] (RUNS=5)
set -euo pipefail
N=${1:-5000000}
RUNS=${RUNS:-5}
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/bench/fib.sh" # setup_release, median, field
setup_release alloc
gcc -O1 -g -fno-omit-frame-pointer -pthread -o "$out/allocs" testprogs/c/allocs.c

declare -A samples ps
run() {
  local name=$1; shift
  samples[$name]+="$("$@" 2>/dev/null | field ps_per_pair) "
}
cd "$out"
have_heaptrack=$(command -v heaptrack >/dev/null && echo 1 || true)
for round in $(seq "$RUNS"); do
  echo "round $round/$RUNS ..." >&2
  run untraced "$out/allocs" loop "$N"
  run stacks "$ft" record --alloc -o "$out/stacks.data" -- "$out/allocs" loop "$N"
  run nostacks "$ft" record --alloc --alloc-stack-depth 0 -o "$out/nostacks.data" -- "$out/allocs" loop "$N"
  run sampled "$ft" record --alloc --alloc-sample 512K -o "$out/sampled.data" -- "$out/allocs" loop "$N"
  if [ -n "$have_heaptrack" ]; then
    rm -f "$out"/heaptrack.*
    run heaptrack heaptrack -o "$out/heaptrack" "$out/allocs" loop "$N"
  fi
done
for name in "${!samples[@]}"; do
  ps[$name]=$(printf '%s\n' ${samples[$name]} | median)
done
ns() { echo "scale=2; $1 / 1000" | bc; }
over() { echo "scale=2; (${ps[$1]} - ${ps[untraced]}) / 1000" | bc; }
per_event() {
  local events bytes
  events=$("$ft" info -i "$1" --json | sed -n 's/.*"events":\([0-9]*\).*/\1/p')
  bytes=$(stat -c %s "$1")
  echo "scale=2; $bytes / $events" | bc
}
echo
echo "malloc(64)+free pairs: $N per run, $RUNS interleaved rounds, medians"
printf '%-34s %10s %12s %16s %14s\n' variant "ns/pair" "overhead" "heaptrack/this" "bytes/event"
for name in untraced stacks nostacks sampled heaptrack; do
  [ -n "${ps[$name]:-}" ] || continue
  ratio="" bpe=""
  if [ "$name" != untraced ] && [ -n "${ps[heaptrack]:-}" ]; then
    ratio=$(echo "scale=1; (${ps[heaptrack]} - ${ps[untraced]}) / (${ps[$name]} - ${ps[untraced]})" | bc)
  fi
  case $name in stacks|nostacks|sampled) bpe=$(per_event "$out/$name.data");; esac
  label=$name
  case $name in
    stacks) label="ferrotrace --alloc (stacks)";;
    nostacks) label="ferrotrace --alloc-stack-depth 0";;
    sampled) label="ferrotrace --alloc-sample 512K";;
  esac
  printf '%-34s %10s %12s %16s %14s\n' "$label" "$(ns "${ps[$name]}")" \
    "$([ "$name" = untraced ] && echo - || over "$name")" "$ratio" "$bpe"
done

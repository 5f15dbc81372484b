#!/usr/bin/env bash
# Cost of allocation tracing per malloc+free pair, all variants measured in one run on the same program
# (testprogs/c/allocs.c `loop N`: N × { p = malloc(64); free(p); }, built with gcc -O1 and frame
# pointers, so that both stack walks see the whole stack), two ways:
#   * thread CPU: the program times its own loop in thread CPU time, so start-up, the writing of the
#     trace at exit, the collector thread's work and the time this shared machine gave to other
#     processes are excluded;
#   * tree CPU: user + system time of the whole process tree (bench/treecpu.py: the tracer, the
#     program and all its threads, heaptrack's interpreter and compressor), minus untraced, over N.
# Variants:
#   untraced | ferrotrace record --alloc (stacks by unwind rules, 64 frames deep) |
#   FERROTRACE_ALLOC_UNWIND=fp (stacks along frame pointers only) | --alloc-stack-depth 0 (no stacks) |
#   --alloc-sample 512K | heaptrack (Debian package; libunwind stacks) |
#   nofp: the same loop built -O2 -fomit-frame-pointer, with unwind rules, and under heaptrack.
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
gcc -O2 -g -fomit-frame-pointer -pthread -o "$out/allocs-nofp" testprogs/c/allocs.c
tree="$root/bench/treecpu.py"

declare -A samples tree_samples ps tps
run() {
  local name=$1; shift
  local o
  o=$(python3 "$tree" "$@" 2>/dev/null)
  samples[$name]+="$(echo "$o" | field ps_per_pair) "
  tree_samples[$name]+="$(echo "$o" | field tree_us) "
}
cd "$out"
have_heaptrack=$(command -v heaptrack >/dev/null && echo 1 || true)
for round in $(seq "$RUNS"); do
  echo "round $round/$RUNS ..." >&2
  rm -f "$out"/{stacks,fp,nostacks,sampled,nofp}.data
  run untraced "$out/allocs" loop "$N"
  run stacks "$ft" record --alloc -o "$out/stacks.data" -- "$out/allocs" loop "$N"
  run fp env FERROTRACE_ALLOC_UNWIND=fp "$ft" record --alloc -o "$out/fp.data" -- "$out/allocs" loop "$N"
  run nostacks "$ft" record --alloc --alloc-stack-depth 0 -o "$out/nostacks.data" -- "$out/allocs" loop "$N"
  run sampled "$ft" record --alloc --alloc-sample 512K -o "$out/sampled.data" -- "$out/allocs" loop "$N"
  run nofp_untraced "$out/allocs-nofp" loop "$N"
  run nofp "$ft" record --alloc -o "$out/nofp.data" -- "$out/allocs-nofp" loop "$N"
  if [ -n "$have_heaptrack" ]; then
    rm -f "$out"/heaptrack.*
    run heaptrack heaptrack -o "$out/heaptrack" "$out/allocs" loop "$N"
    rm -f "$out"/heaptrack.*
    run nofp_heaptrack heaptrack -o "$out/heaptrack" "$out/allocs-nofp" loop "$N"
  fi
done
for name in "${!samples[@]}"; do
  ps[$name]=$(printf '%s\n' ${samples[$name]} | median)
  tps[$name]=$(printf '%s\n' ${tree_samples[$name]} | median)
done
ns() { echo "scale=2; $1 / 1000" | bc; }
base() { case $1 in nofp*) echo nofp_untraced;; *) echo untraced;; esac; }
ht() { case $1 in nofp*) echo nofp_heaptrack;; *) echo heaptrack;; esac; }
over() { echo "scale=2; (${ps[$1]} - ${ps[$(base "$1")]}) / 1000" | bc; }
# Tree CPU over untraced, in ns per pair (tree_us is in microseconds).
tover() { echo "scale=2; (${tps[$1]} - ${tps[$(base "$1")]}) * 1000 / $N" | bc; }
per_event() {
  local events bytes
  events=$("$ft" info -i "$1" --json | sed -n 's/.*"events":\([0-9]*\).*/\1/p')
  bytes=$(stat -c %s "$1")
  echo "scale=2; $bytes / $events" | bc
}
echo
echo "malloc(64)+free pairs: $N per run, $RUNS interleaved rounds, medians"
printf '%-36s %9s %9s %10s %10s %10s %10s %8s\n' variant "ns/pair" overhead "ht/this" \
  "tree ms" "tree ns" "ht/this" "B/event"
for name in untraced stacks fp nostacks sampled heaptrack nofp_untraced nofp nofp_heaptrack; do
  [ -n "${ps[$name]:-}" ] || continue
  ratio="" tratio="" bpe="" o="-" to="-"
  h=$(ht "$name")
  if [ "$name" != "$(base "$name")" ]; then
    o=$(over "$name") to=$(tover "$name")
    if [ -n "${ps[$h]:-}" ] && [ "$name" != "$h" ]; then
      ratio=$(echo "scale=1; (${ps[$h]} - ${ps[$(base "$name")]}) / (${ps[$name]} - ${ps[$(base "$name")]})" | bc)
      tratio=$(echo "scale=1; (${tps[$h]} - ${tps[$(base "$name")]}) / (${tps[$name]} - ${tps[$(base "$name")]})" | bc)
    fi
  fi
  case $name in stacks|fp|nostacks|sampled|nofp) bpe=$(per_event "$out/$name.data");; esac
  label=$name
  case $name in
    stacks) label="ferrotrace --alloc (unwind rules)";;
    fp) label="ferrotrace --alloc, frame pointers";;
    nostacks) label="ferrotrace --alloc-stack-depth 0";;
    sampled) label="ferrotrace --alloc-sample 512K";;
    nofp_untraced) label="nofp: untraced";;
    nofp) label="nofp: ferrotrace (unwind rules)";;
    nofp_heaptrack) label="nofp: heaptrack";;
  esac
  printf '%-36s %9s %9s %10s %10s %10s %10s %8s\n' "$label" "$(ns "${ps[$name]}")" "$o" "$ratio" \
    "$(echo "scale=1; ${tps[$name]} / 1000" | bc)" "$to" "$tratio" "$bpe"
done

#!/usr/bin/env bash
# Cost per traced call of tracing a program nobody rebuilt, whole-process CPU, all tools in one run on
# testprogs/c/fibcount.c (a fib that counts its own calls):
#   ferrotrace, entry patching   plain gcc -O2 build, `record -P '^fib$'` (fib's entry patched)
#   ferrotrace, XRay             the same source built with clang-16 -fxray-instrument (sleds), `record`
#   uftrace, dynamic             plain build, `uftrace record --force -P '^fib$'`
#   bpftrace uprobe              plain build, `bpftrace -e 'uprobe:BIN:fib { @ = count(); }' -c BIN`
# Each tool also runs the same command selecting only `main` (one call), so that its start-up and
# tear-down (bpftrace's is seconds of CPU) cancel out: ns per call = (tree CPU with fib selected − tree
# CPU with main selected) / fib's calls. Tree CPU is user + system of the process and everything it
# waited for (bench/treecpu.py: the tool, its threads and helpers). Medians of RUNS interleaved rounds.
# Usage: bench/dynamic.sh [N=27] (RUNS=5). Needs root for bpftrace (skipped without it).
set -euo pipefail
N=${1:-27}
RUNS=${RUNS:-5}
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/bench/fib.sh"
# Only the recorder and its preload library (setup_release builds the whole workspace).
out="$root/bench/out/dynamic"
mkdir -p "$out"
echo "building (release) ..." >&2
(cd "$root" && cargo build --release -q -p ferrotrace-cli -p ferrotrace-preload)
ft="$root/target/release/ferrotrace"
src="$root/testprogs/c/fibcount.c"
gcc -O2 -o "$out/plain" "$src"
clang-16 -O2 -fxray-instrument -fxray-instruction-threshold=1 -o "$out/xray" "$src"
treecpu=("python3" "$root/bench/treecpu.py")
have_bpftrace=$(bpftrace -e 'BEGIN { exit(); }' >/dev/null 2>&1 && echo 1 || true)

declare -A samples
calls=0
# sample NAME CMD...: runs CMD under treecpu.py, appends its tree CPU (us) to NAME's samples.
sample() {
  local name=$1 o
  shift
  o=$("${treecpu[@]}" "$@" 2>/dev/null)
  samples[$name]+="$(echo "$o" | field tree_us) "
  local c
  c=$(echo "$o" | field calls | head -1)
  [ -z "$c" ] || [ "$c" -lt 2 ] || calls=$c
}
cd "$out"
for round in $(seq "$RUNS"); do
  echo "round $round/$RUNS ..." >&2
  sample plain ./plain "$N"
  sample dyn_main "$ft" record -o dyn-main.data -P '^main$' -- ./plain "$N"
  sample dyn_fib "$ft" record -o dyn-fib.data -P '^fib$' -- ./plain "$N"
  sample xray_main "$ft" record -o xray-main.data -P '^main$' -- ./xray "$N"
  sample xray_fib "$ft" record -o xray-fib.data -P '^fib$' -- ./xray "$N"
  sample uftrace_main uftrace record -d uftrace-main.data --force -P '^main$' ./plain "$N"
  sample uftrace_fib uftrace record -d uftrace-fib.data --force -P '^fib$' ./plain "$N"
  if [ -n "$have_bpftrace" ]; then
    sample uprobe_main bpftrace -q -e "uprobe:$out/plain:main { @n = count(); }" -c "$out/plain $N"
    sample uprobe_fib bpftrace -q -e "uprobe:$out/plain:fib { @n = count(); }" -c "$out/plain $N"
  fi
done
med() { printf '%s\n' ${samples[$1]} | median; }
per_call() { echo "scale=1; ($(med "$1_fib") - $(med "$1_main")) * 1000 / $calls" | bc; }
dyn=$(per_call dyn)
xray=$(per_call xray)
echo
echo "fib($N): $calls calls; tree CPU, median of $RUNS rounds; $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "$("$ft" record -o dyn-fib.data -P '^fib$' -- ./plain 20 2>&1 >/dev/null | head -1)" >&2
printf '%-44s %10s %12s\n' tool "ns/call" "vs entry patching"
printf '%-44s %10s %12s\n' "ferrotrace, entry patching (plain gcc -O2)" "$dyn" "1.00"
ratio() { printf '%.2f' "$(echo "scale=3; $1 / $2" | bc)"; }
printf '%-44s %10s %12s\n' "ferrotrace, XRay (clang-16 -fxray-instrument)" "$xray" "$(ratio "$xray" "$dyn")"
u=$(per_call uftrace)
printf '%-44s %10s %12s\n' "uftrace --force -P (dynamic)" "$u" "$(ratio "$u" "$dyn")"
if [ -n "$have_bpftrace" ]; then
  b=$(per_call uprobe)
  printf '%-44s %10s %12s\n' "bpftrace uprobe (count only, no exit)" "$b" "$(ratio "$b" "$dyn")"
else
  echo "bpftrace uprobe: skipped (bpftrace cannot run here: needs root and BPF)"
fi
echo "entry patching / XRay: $(ratio "$dyn" "$xray")"
echo "untraced plain run: $(med plain) us tree CPU"

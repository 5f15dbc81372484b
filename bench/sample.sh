#!/usr/bin/env bash
# record --sample against perf record on the same traced run: what sampling adds to function tracing.
#
# Variants, interleaved round after round (ROUNDS, default 7), of the traced fib N (XRay sleds, frame
# pointers; N default 32, about 7 M traced calls):
#   traced        ferrotrace record -- fib N
#   +sample       ferrotrace record --sample --sample-freq 999 [--call-graph CG] -- fib N
#   +perf         perf record -F 999 -g (or --call-graph dwarf) -- ferrotrace record -- fib N
# For each: the median of fib's own computation time (it measures itself: elapsed_ns) and of the whole
# command's wall time. Prints what each sampler adds to the traced run and the ratio
#   (+perf − traced) / (+sample − traced): above 1 means record --sample adds less than perf record.
# Not a test: numbers vary with the machine; compare them side by side in one run.
# Usage: bench/sample.sh [N]        (env: ROUNDS=7 CG="fp dwarf" PERF=/usr/bin/perf)
set -euo pipefail
source "$(dirname "$0")/fib.sh"
N=${1:-32}
ROUNDS=${ROUNDS:-7}
CG=${CG:-fp dwarf}
PERF=${PERF:-/usr/bin/perf}
[ -x "$PERF" ] || { echo "perf not found at $PERF (apt-get install linux-perf)" >&2; exit 1; }

setup_release sample
build_fib "$out/xray" "-Zinstrument-xray=always -Cforce-frame-pointers=yes"
fib="$out/xray/release/fib"

declare -A samples calls wall
# timed NAME CMD...: `run` (fib's computation time) and the command's wall time in ns.
timed() {
  local name=$1; shift
  local t0 t1
  t0=$(date +%s%N)
  run "$name" "$@"
  t1=$(date +%s%N)
  wall[$name]+="$((t1 - t0)) "
}

variants=(traced)
for cg in $CG; do variants+=("sample-$cg" "perf-$cg"); done
for r in $(seq "$ROUNDS"); do
  echo "round $r/$ROUNDS ..." >&2
  for v in "${variants[@]}"; do
    case $v in
      traced) timed "$v" "$ft" record -o "$out/t.data" -- "$fib" "$N" ;;
      sample-*) timed "$v" "$ft" record --sample --sample-freq 999 --call-graph "${v#sample-}" \
                  -o "$out/t.data" -- "$fib" "$N" ;;
      perf-fp) timed "$v" "$PERF" record -q -F 999 -g -o "$out/perf.data" -- \
                 "$ft" record -o "$out/t.data" -- "$fib" "$N" ;;
      perf-dwarf) timed "$v" "$PERF" record -q -F 999 --call-graph dwarf -o "$out/perf.data" -- \
                    "$ft" record -o "$out/t.data" -- "$fib" "$N" ;;
    esac
  done
done

declare -A ns wns
for v in "${variants[@]}"; do
  ns[$v]=$(echo "${samples[$v]}" | tr ' ' '\n' | grep . | median)
  wns[$v]=$(echo "${wall[$v]}" | tr ' ' '\n' | grep . | median)
done
ms() { echo "scale=1; $1 / 1000000" | bc; }
echo
echo "fib $N traced (${calls[traced]} calls), medians of $ROUNDS interleaved rounds, 999 Hz"
printf "%-14s %14s %14s %14s %14s\n" variant "compute ms" "adds ms" "wall ms" "adds ms"
for v in "${variants[@]}"; do
  printf "%-14s %14s %14s %14s %14s\n" "$v" "$(ms "${ns[$v]}")" \
    "$(ms "$((${ns[$v]%.*} - ${ns[traced]%.*}))")" "$(ms "${wns[$v]}")" \
    "$(ms "$((${wns[$v]%.*} - ${wns[traced]%.*}))")"
done
for cg in $CG; do
  s=sample-$cg p=perf-$cg
  echo "$cg: perf record adds / record --sample adds: compute $(echo "scale=2; (${ns[$p]} - ${ns[traced]}) / (${ns[$s]} - ${ns[traced]} + 1)" | bc)x," \
    "wall $(echo "scale=2; (${wns[$p]} - ${wns[traced]}) / (${wns[$s]} - ${wns[traced]} + 1)" | bc)x"
done
rm -f "$out/t.data" "$out/t.data.old" "$out/perf.data" "$out/perf.data.old"

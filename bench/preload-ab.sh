#!/usr/bin/env bash
# A/B of runtime builds: runs `ferrotrace record` on the same fib binary with each given preload library
# (FERROTRACE_PRELOAD), interleaved round after round, and prints median and minimum ns per call next to
# the uninstrumented program. How the experiments in docs/performance.md were measured: build the
# runtime once per variant (`cargo build --release -p ferrotrace-preload`, copy
# target/release/libferrotrace_preload.so aside), then compare the copies.
# Usage: bench/preload-ab.sh [-n N=30] [-a FIB_ARG] [-r ROUNDS=15] LIB.so...   (FIB_ARG: locked)
set -euo pipefail
N=30 ARG="" ROUNDS=15
while getopts n:a:r: o; do
  case $o in n) N=$OPTARG ;; a) ARG=$OPTARG ;; r) ROUNDS=$OPTARG ;; *) exit 2 ;; esac
done
shift $((OPTIND - 1))
[ $# -gt 0 ] || { echo "usage: $0 [-n N] [-a locked] [-r ROUNDS] LIB.so..." >&2; exit 2; }
libs=()
for l in "$@"; do
  [ -f "$l" ] || { echo "$l: no such file" >&2; exit 2; }
  libs+=("$(realpath "$l")")
done
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/bench/fib.sh"
out="$root/bench/out/preload-ab"
mkdir -p "$out"
cd "$root"
cargo build --release -q -p ferrotrace-cli
build_fib "$out/plain" "-Cforce-frame-pointers=yes"
build_fib "$out/xray" "-Zinstrument-xray=always -Cforce-frame-pointers=yes"
ft="$root/target/release/ferrotrace"
elapsed() { "$@" 2>/dev/null | field elapsed_ns; }
calls=$("$out/plain/release/fib" "$N" $ARG | field calls)
declare -A samples
for round in $(seq "$ROUNDS"); do
  echo "round $round/$ROUNDS ..." >&2
  samples[uninstrumented]+="$(elapsed "$out/plain/release/fib" "$N" $ARG) "
  for l in "${libs[@]}"; do
    samples[$l]+="$(FERROTRACE_PRELOAD="$l" elapsed "$ft" record -o "$out/t.data" -- "$out/xray/release/fib" "$N" $ARG) "
  done
done
echo "fib($N${ARG:+ $ARG}): $calls calls, $ROUNDS rounds; ns per call"
for k in uninstrumented "${libs[@]}"; do
  med=$(printf '%s\n' ${samples[$k]} | median)
  min=$(printf '%s\n' ${samples[$k]} | sort -n | head -1)
  printf '%-60s median %7.2f  min %7.2f\n' "$k" "$(echo "scale=2; $med / $calls" | bc)" \
    "$(echo "scale=2; $min / $calls" | bc)"
done

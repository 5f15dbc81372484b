#!/usr/bin/env bash
# Cost per traced call of ferrotrace-embedded, every variant measured in one run, interleaved round
# after round (medians):
#   the freestanding program (testprogs/freestanding: no std, no libc, fib(N) REPS times in its main
#   thread alone) built without instrumentation, built with -Zinstrument-mcount with tracing off, and
#   traced by ferrotrace-embedded;
#   for the peer, in the same rounds: the hosted runtime's mcount path (`ferrotrace record` of
#   testprogs' fib built with -Zinstrument-mcount), its uninstrumented fib and the floor (rdtsc at
#   entry and exit of every call).
# Prints ns per call (each program times its own computation: start-up is excluded), the overhead per
# call over the program's uninstrumented build, and the embedded overhead over the hosted one (target:
# within 10 %).
# Usage: bench/embedded.sh [N=25] (REPS=8, RUNS=7 rounds)
set -euo pipefail
N=${1:-25}
REPS=${REPS:-8}
RUNS=${RUNS:-7}
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/bench/fib.sh"
setup_fib_builds embedded
freestanding_flags="-Cforce-frame-pointers=yes -Cpanic=abort -Crelocation-model=static -Ctarget-feature=+crt-static"
build_freestanding() { # TARGET_DIR EXTRA_RUSTFLAGS
  (cd "$root/testprogs/freestanding" &&
    CARGO_TARGET_DIR="$1" RUSTFLAGS="$2 $freestanding_flags" cargo +nightly build --release -q)
}
build_freestanding "$out/fs-plain" ""
build_freestanding "$out/fs-mcount" "-Zinstrument-mcount"
fs_plain="$out/fs-plain/release/ft-freestanding"
fs_mcount="$out/fs-mcount/release/ft-freestanding"

declare -A samples ns calls
cd "$out"
fib_n=$((N + 3)) # about as many calls as 8 runs of fib(N)
for round in $(seq "$RUNS"); do
  echo "round $round/$RUNS ..." >&2
  rm -f fs.data
  run fs_plain "$fs_plain" fs.data "$N" "$REPS" untraced single
  run fs_off "$fs_mcount" fs.data "$N" "$REPS" untraced single
  run fs_traced "$fs_mcount" fs.data "$N" "$REPS" single
  run fib_plain "$out/plain/release/fib" "$fib_n"
  run fib_floor "$out/plain/release/fib" "$fib_n" rdtsc
  run hosted "$ft" record -o hosted.data -- "$out/mcount/release/fib" "$fib_n"
done
for name in "${!samples[@]}"; do
  ns[$name]=$(printf '%s\n' ${samples[$name]} | median)
done
"$ft" info -i fs.data --symbols "$fs_mcount" | grep -q ', 0 lost' || { echo "the traced run lost events: raise its memory" >&2; exit 1; }

echo
echo "median of $RUNS rounds, $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
ROW_WIDTH=50
printf "%-${ROW_WIDTH}s %12s %14s %16s\n" variant "ns/call" "overhead/call" ""
echo "freestanding fib($N) x $REPS, ${calls[fs_traced]} calls:"
row fs_plain fs_plain "" "  uninstrumented"
row fs_off fs_plain "" "  -Zinstrument-mcount, tracing off"
row fs_traced fs_plain "" "  traced by ferrotrace-embedded"
echo "testprogs fib($fib_n), ${calls[hosted]} calls:"
row fib_plain fib_plain "" "  uninstrumented"
row fib_floor fib_plain "" "  floor: rdtsc at entry and exit"
row hosted fib_plain "" "  ferrotrace record (hosted runtime, mcount)"
embedded=$(echo "scale=4; (${ns[fs_traced]} - ${ns[fs_plain]}) / ${calls[fs_traced]}" | bc)
hosted=$(echo "scale=4; (${ns[hosted]} - ${ns[fib_plain]}) / ${calls[hosted]}" | bc)
echo "embedded overhead / hosted overhead per traced call: $(echo "scale=3; $embedded / $hosted" | bc)"
echo "trace of the last traced run: $(stat -c %s fs.data) bytes"

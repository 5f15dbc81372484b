#!/usr/bin/env bash
# Cost per traced call of ferrotrace-embedded, measured in one run, variants interleaved round after
# round: the freestanding program (testprogs/freestanding: no std, no libc, fib(N) REPS times in one
# thread, `single`) built without instrumentation | built with -Zinstrument-mcount, tracing off |
# traced; and, on the same machine in the same rounds, the hosted runtime's mcount path (issue 11:
# `ferrotrace record` of testprogs' fib built with -Zinstrument-mcount), with its uninstrumented fib
# and its rdtsc floor as the baseline. The hosted row is left out, saying why, while `ferrotrace record`
# cannot trace mcount programs (before issue 11 landed on this branch).
# Prints ns per call (each program times its own computation), the overhead per call over its
# uninstrumented build, and the embedded overhead against the hosted one (target: within 10 %).
# Usage: bench/embedded.sh [N=25] (REPS=8, RUNS=7; medians; FERROTRACE=PATH: the hosted path of another
# build of the CLI)
set -euo pipefail
N=${1:-25}
REPS=${REPS:-8}
RUNS=${RUNS:-7}
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/bench/fib.sh"
out="$root/bench/out/embedded"
mkdir -p "$out"
cd "$root"
echo "building (release) ..." >&2
cargo build --release -q -p ferrotrace-cli -p ferrotrace-preload
# FERROTRACE=PATH measures another build of the CLI (another branch's) as the hosted path.
ft=${FERROTRACE:-$root/target/release/ferrotrace}
freestanding_flags="-Cforce-frame-pointers=yes -Cpanic=abort -Crelocation-model=static -Ctarget-feature=+crt-static"
build_freestanding() { # TARGET_DIR EXTRA_RUSTFLAGS
  (cd testprogs/freestanding &&
    CARGO_TARGET_DIR="$1" RUSTFLAGS="$2 $freestanding_flags" cargo +nightly build --release -q)
}
build_freestanding "$out/fs-plain" ""
build_freestanding "$out/fs-mcount" "-Zinstrument-mcount"
build_fib "$out/fib-plain" "-Cforce-frame-pointers=yes"
build_fib "$out/fib-mcount" "-Zinstrument-mcount -Cforce-frame-pointers=yes"
fs_plain="$out/fs-plain/release/ft-freestanding"
fs_mcount="$out/fs-mcount/release/ft-freestanding"

hosted=1
if ! "$ft" record -o "$out/probe.data" -- "$out/fib-mcount/release/fib" 5 >/dev/null 2>"$out/probe.err"; then
  hosted=""
  why=$(head -n1 "$out/probe.err")
fi
rm -f "$out/probe.data"

declare -A samples ns percall
fs_calls=0
fib_calls=0
# fs NAME ARGS...: one run of the freestanding program; its main thread's ns and calls.
fs() {
  local name=$1; shift
  local line
  rm -f "$out/fs.data"
  line=$("$@")
  [ "$(echo "$line" | field lost)" = 0 ] || { echo "$name lost events: $line" >&2; exit 1; }
  samples[$name]+="$(echo "$line" | sed -n 's/.*ns=\([0-9]*\),.*/\1/p') "
  fs_calls=$(echo "$line" | sed -n 's/.*calls=\([0-9]*\),.*/\1/p')
}
# fib NAME CMD...: one run of testprogs' fib; its elapsed_ns and calls.
fib() {
  local name=$1; shift
  local line
  line=$("$@" 2>/dev/null | grep elapsed_ns=)
  samples[$name]+="$(echo "$line" | field elapsed_ns) "
  fib_calls=$(echo "$line" | field calls)
}
fib_n=$((N + 3)) # about as many calls as REPS=8 runs of fib(N)
for round in $(seq "$RUNS"); do
  echo "round $round/$RUNS ..." >&2
  fs fs_plain "$fs_plain" "$out/fs.data" "$N" "$REPS" untraced single
  fs fs_off "$fs_mcount" "$out/fs.data" "$N" "$REPS" untraced single
  fs fs_traced "$fs_mcount" "$out/fs.data" "$N" "$REPS" single
  if [ -n "$hosted" ]; then
    fib fib_plain "$out/fib-plain/release/fib" "$fib_n"
    fib fib_floor "$out/fib-plain/release/fib" "$fib_n" rdtsc
    fib hosted "$ft" record -o "$out/hosted.data" -- "$out/fib-mcount/release/fib" "$fib_n"
  fi
done
for name in "${!samples[@]}"; do
  ns[$name]=$(printf '%s\n' ${samples[$name]} | median)
done
for name in fs_plain fs_off fs_traced; do
  percall[$name]=$(echo "scale=2; ${ns[$name]} / $fs_calls" | bc)
done
if [ -n "$hosted" ]; then
  for name in fib_plain fib_floor hosted; do
    percall[$name]=$(echo "scale=2; ${ns[$name]} / $fib_calls" | bc)
  done
fi

echo
echo "median of $RUNS rounds, $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
printf '%-52s %10s %14s\n' variant "ns/call" "overhead/call"
row() { # NAME BASE LABEL
  printf '%-52s %10s %14s\n' "$3" "${percall[$1]}" "$(echo "scale=2; ${percall[$1]} - ${percall[$2]}" | bc)"
}
echo "freestanding fib($N) x $REPS, $fs_calls calls:"
row fs_plain fs_plain "  uninstrumented"
row fs_off fs_plain "  -Zinstrument-mcount, tracing off"
row fs_traced fs_plain "  traced by ferrotrace-embedded"
if [ -n "$hosted" ]; then
  echo "testprogs fib($fib_n), $fib_calls calls:"
  row fib_plain fib_plain "  uninstrumented"
  row fib_floor fib_plain "  floor: rdtsc at entry and exit"
  row hosted fib_plain "  ferrotrace record, mcount path (hosted runtime)"
  embedded=$(echo "${percall[fs_traced]} - ${percall[fs_plain]}" | bc)
  host=$(echo "${percall[hosted]} - ${percall[fib_plain]}" | bc)
  echo "embedded overhead / hosted overhead: $(echo "scale=3; $embedded / $host" | bc)"
else
  echo "hosted mcount path: not measured: ferrotrace record cannot trace this mcount build here ($why)"
fi
bytes=$(stat -c %s "$out/fs.data" 2>/dev/null || echo 0)
echo "trace of the last traced run: $bytes bytes"

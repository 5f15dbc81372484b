#!/usr/bin/env bash
# ferrotrace profile vs perf record on the same CPU-bound program at the same frequency.
#
# For each of fp and DWARF stacks it runs the program (fixed work: CALLS calls of hot_loop) RUNS times
# alone, under `perf record`, and under `ferrotrace profile` (the example binary of ferrotrace-profile),
# and prints medians of:
#   - the program's own run time (it measures itself) -> overhead vs. running alone;
#   - bytes written (perf.data vs. the ferrotrace trace file);
#   - time from the program's exit to a finished flame graph SVG:
#       perf:       perf record finishing + perf script | inferno-collapse-perf | inferno-flamegraph
#       ferrotrace: recording finishing (incl. symbolization) + `profile flame`.
# Not a test: numbers vary with the machine; compare them side by side in one run.
# Usage: bench/profile.sh            (env: FREQ=999 CALLS=3000 RUNS=3 PERF=/usr/bin/perf)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=$ROOT/bench/out/profile
mkdir -p "$OUT"
FREQ=${FREQ:-999}
CALLS=${CALLS:-3000}
RUNS=${RUNS:-3}
PERF=${PERF:-/usr/bin/perf}
export PATH="$HOME/.cargo/bin:$PATH"

if ! command -v inferno-flamegraph >/dev/null || ! command -v inferno-collapse-perf >/dev/null; then
    echo "installing inferno (for the perf pipeline)..." >&2
    cargo install -j1 inferno --locked >&2
fi
[ -x "$PERF" ] || { echo "perf not found at $PERF (apt-get install linux-perf)" >&2; exit 1; }

(cd "$ROOT" && cargo build -j1 --release -q -p ferrotrace-profile --example profile)
FT=$ROOT/target/release/examples/profile
rustc -O -g -Cforce-frame-pointers=yes "$ROOT/crates/ferrotrace-launch/tests/programs/cpu_hot.rs" -o "$OUT/cpu_hot"
PROG=("$OUT/cpu_hot" calls "$CALLS")

now() { date +%s.%N; }
field() { grep -o "$2=[0-9.]*" "$1" | tail -1 | cut -d= -f2; }
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
sub() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", a - b}'; }

base=()
for _ in $(seq "$RUNS"); do
    "${PROG[@]}" >/dev/null 2>"$OUT/base.err"
    base+=("$(field "$OUT/base.err" elapsed_ms)")
done
BASE=$(printf '%s\n' "${base[@]}" | median)

printf '%-22s %10s %9s %12s %14s\n' "tool (${FREQ} Hz)" "prog ms" "overhead" "bytes" "exit->SVG s"
printf '%-22s %10s %9s %12s %14s\n' "program alone" "$BASE" "" "" ""

for cg in fp dwarf; do
    for tool in perf ferrotrace; do
        ms=(); bytes=(); post=()
        for _ in $(seq "$RUNS"); do
            if [ $tool = perf ]; then
                if [ $cg = fp ]; then g=(-g); else g=(--call-graph dwarf); fi
                "$PERF" record -q -F "$FREQ" "${g[@]}" -o "$OUT/perf.data" -- "${PROG[@]}" >/dev/null 2>"$OUT/run.err"
                "$PERF" script -i "$OUT/perf.data" 2>/dev/null | inferno-collapse-perf | inferno-flamegraph >"$OUT/perf-$cg.svg"
                f="$OUT/perf.data"
            else
                "$FT" record -F "$FREQ" --call-graph $cg -o "$OUT/ft.data" -- "${PROG[@]}" >/dev/null 2>"$OUT/run.err"
                "$FT" flame "$OUT/ft.data" -o "$OUT/ft-$cg.svg"
                f="$OUT/ft.data"
            fi
            done_at=$(now)
            ms+=("$(field "$OUT/run.err" elapsed_ms)")
            bytes+=("$(stat -c %s "$f")")
            post+=("$(sub "$done_at" "$(field "$OUT/run.err" end_unix_s)")")
        done
        M=$(printf '%s\n' "${ms[@]}" | median)
        OV=$(awk -v m="$M" -v b="$BASE" 'BEGIN {printf "%+.2f%%", (m / b - 1) * 100}')
        B=$(printf '%s\n' "${bytes[@]}" | median)
        P=$(printf '%s\n' "${post[@]}" | median)
        printf '%-22s %10s %9s %12s %14s\n' "$tool $cg" "$M" "$OV" "$B" "$P"
    done
done
echo "(medians of $RUNS runs; program: cpu_hot calls $CALLS; SVGs in $OUT)"

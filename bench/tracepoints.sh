#!/usr/bin/env bash
# Tracepoint costs, side by side with `tracing::event!` (crates/ferrotrace/benches/tracepoints.rs).
#
#  1. Disabled cost: instructions per loop iteration counted by callgrind, for the same loop without
#     instrumentation, with a disabled tracepoint (2 integer args), and with a `tracing::event!` (2 integer
#     fields, no subscriber). Per-iteration counts are (Ir(2N) - Ir(N)) / N, so start-up cancels out.
#  2. Enabled path: instructions per recorded event (callgrind, counted in the loop and its callees only,
#     so that the collector thread's work is left out).
#  3. Enabled cost: ns per event (best of RUNS runs) for a recorded tracepoint (FERROTRACE_TRACE, events
#     written into the trace) and for `tracing::event!` delivered to a subscriber that stores TSC and
#     fields in memory; the bare loop and a loop with one `rdtsc` for reference, and the two ways of
#     learning an event's CPU that were weighed (`rdtscp`, a load from the rseq area).
#
# Usage: bench/tracepoints.sh [N] [RUNS]     (defaults 1000000, 5)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-1000000}
RUNS=${2:-5}
BIN=$(cargo build -j2 --release --bench tracepoints -p ferrotrace --message-format=json 2>/dev/null |
    python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "tracepoints":
        print(m["executable"])')
echo "binary: $BIN"
echo
echo "== disabled cost: instructions per iteration (callgrind) =="
ir() {
    valgrind --tool=callgrind --callgrind-out-file=/dev/null "$BIN" "$1" "$2" 2>&1 >/dev/null |
        sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
declare -A PER
for mode in none disabled tracing-off; do
    a=$(ir "$mode" "$N")
    b=$(ir "$mode" $((2 * N)))
    PER[$mode]=$(python3 -c "print(($b - $a) / $N)")
    printf '%-12s %6.2f instructions/iteration\n' "$mode" "${PER[$mode]}"
done
python3 -c "print('disabled tracepoint: %+.2f instructions; tracing::event! (no subscriber): %+.2f' % (${PER[disabled]} - ${PER[none]}, ${PER[tracing-off]} - ${PER[none]}))"
echo
echo "== enabled path: instructions per event, recorded (callgrind, in the loop function and its callees) =="
ir_enabled() {
    local d
    d=$(mktemp -d)
    (cd "$d" && FERROTRACE_TRACE=bench_tp FERROTRACE_OUTPUT="$d/t.data" \
        valgrind --tool=callgrind --callgrind-out-file=/dev/null --smc-check=all \
        '--toggle-collect=*loop_tracepoint*' "$BIN" enabled "$1" 2>&1 >/dev/null |
        sed -n 's/.*Collected : \([0-9]*\).*/\1/p')
    rm -rf "$d"
}
M=$((N / 5))
a=$(ir_enabled "$M")
b=$(ir_enabled $((2 * M)))
python3 -c "print('%.2f instructions per enabled event (loop included)' % (($b - $a) / $M))"
echo
echo "== enabled cost: ns per iteration, best of $RUNS =="
best() {
    local mode=$1 best=""
    for _ in $(seq "$RUNS"); do
        v=$(env "${@:2}" "$BIN" "$mode" "$N" 2>/dev/null | awk '{print $3}')
        best=$(python3 -c "print(min(float('$v'), float('${best:-inf}')))")
    done
    echo "$best"
}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
NONE=$(best none)
RDTSC=$(best rdtsc)
RDTSCP=$(best rdtscp)
RSEQ=$(best rseq-cpu)
EN=$(best enabled FERROTRACE_TRACE=bench_tp FERROTRACE_OUTPUT="$OUT/t.data" FERROTRACE_BUFFER_SIZE=256M)
TR=$(best tracing-on)
printf '%-40s %7.2f ns\n' "loop alone" "$NONE"
printf '%-40s %7.2f ns\n' "loop + rdtsc" "$RDTSC"
printf '%-40s %7.2f ns\n' "loop + rdtscp (timestamp and CPU)" "$RDTSCP"
printf '%-40s %7.2f ns\n' "loop + CPU from rseq (one load)" "$RSEQ"
printf '%-40s %7.2f ns\n' "loop + tracepoint enabled (recorded)" "$EN"
printf '%-40s %7.2f ns\n' "loop + tracing::event! into memory" "$TR"
python3 -c "print('per event: tracepoint %.2f ns, tracing %.2f ns (rdtsc alone %.2f ns)' % ($EN - $NONE, $TR - $NONE, $RDTSC - $NONE))"

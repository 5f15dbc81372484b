#!/usr/bin/env bash
# The recording cost of `tracing` layers, in one run: ferrotrace-tracing (recording into a file of its
# own with record_to_file) against tracing-chrome, tracing-perfetto and tracing-tracy (each writing
# its own way: a JSON file from a writer thread, protobuf through a buffered file, Tracy's client
# queue), a subscriber that does nothing, the registry alone (what every layer stands on), a layer
# that only reads `rdtsc` at every event, enter and exit (the floor of any layer that stamps its
# records with the timestamp counter, as ferrotrace's does), and a
# disabled callsite (level filter; and the ferrotrace layer while nothing records, which answers
# `never`). Program: bench/tracing-layers (its own workspace). Each variant runs in its own process,
# ROUNDS times, alternating; per variant the best of its rounds (each itself the best of 5 loops of
# 50,000 iterations) for: one `info!` event with one field and a message, one with two fields and no
# message (no `core::fmt` on its way), one enter+exit of a live
# span, one span's whole life (new with one field, enter, exit, close). Ratios against ferrotrace.
#
# Usage: bench/tracing-layers.sh [ROUNDS]     (default 5)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-5}
OUT=bench/out/tracing-layers
mkdir -p "$OUT"
(cd bench/tracing-layers && cargo build --release --quiet --locked)
BIN=bench/tracing-layers/target/release/ft-tracing-bench
VARIANTS="disabled ferrotrace-off noop registry rdtsc-floor ferrotrace chrome perfetto tracy"
: >"$OUT/runs.txt"
for _ in $(seq "$ROUNDS"); do
    for v in $VARIANTS; do
        "$BIN" "$v" "$OUT" | tail -1 >>"$OUT/runs.txt"
    done
done
python3 - "$OUT/runs.txt" <<'PY'
import sys
best = {}
for line in open(sys.argv[1]):
    v, *kv = line.split()
    m = {k: float(x) for k, x in (p.split("=") for p in kv)}
    b = best.setdefault(v, m)
    for k in m:
        b[k] = min(b[k], m[k])
ft = best["ferrotrace"]
cols = [("event", "ns/event"), ("fields", "ns/event, no message"), ("enter_exit", "ns/span enter+exit"), ("span", "ns/span life")]
print("| variant | " + " | ".join(c for _, c in cols) + " |")
print("|---|" + "---|" * len(cols))
for v, m in best.items():
    cells = []
    for k, _ in cols:
        r = "" if v == "ferrotrace" or m[k] < ft[k] else f" ({m[k] / ft[k]:.1f}x)"
        cells.append(f"{m[k]:.1f}{r}")
    print(f"| {v} | " + " | ".join(cells) + " |")
PY
rm -f "$OUT"/bench.*

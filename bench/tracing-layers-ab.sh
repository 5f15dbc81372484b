#!/usr/bin/env bash
# Builds of bench/tracing-layers' program (ft-tracing-bench) against each other, in one run: each round
# runs the `ferrotrace` variant of every build given, then the first build's `rdtsc-floor` and `noop`
# (the floor of a layer that stamps with `rdtsc`, and what `tracing` costs with a subscriber: the peers
# that say how fast the host is during the run). Prints, per build, the best and the median over the
# rounds of each loop's ns (event with a message, event without, span enter+exit), and each build's
# event figures as a ratio to `rdtsc-floor`'s, which a slower or busier host changes less than the ns.
# For changes of a few tenths of a nanosecond, which bench/tracing-layers.sh's best-of-rounds table
# cannot tell from the host's drift: the builds alternate, so the drift falls on all alike.
#
# Usage: bench/tracing-layers-ab.sh BIN... (copies of bench/tracing-layers/target/release/ft-tracing-bench
# built from the trees to compare; ROUNDS=25)
set -euo pipefail
ROUNDS=${ROUNDS:-25}
[ $# -ge 1 ] || { echo "usage: bench/tracing-layers-ab.sh FT_TRACING_BENCH... (builds of bench/tracing-layers)" >&2; exit 2; }
for b in "$@"; do
  [ -x "$b" ] || { echo "tracing-layers-ab: $b is not an executable: give builds of bench/tracing-layers" >&2; exit 2; }
done
bins=()
for b in "$@"; do bins+=("$(readlink -f "$b")"); done
set -- "${bins[@]}"
cd "$(dirname "$0")/.."
OUT=bench/out/tracing-layers-ab
mkdir -p "$OUT"
: >"$OUT/runs.txt"
echo "$ROUNDS rounds, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for _ in $(seq "$ROUNDS"); do
  for b in "$@"; do
    echo "$b $("$b" ferrotrace "$OUT" | tail -1 | cut -d' ' -f2-)" >>"$OUT/runs.txt"
  done
  echo "rdtsc-floor $("$1" rdtsc-floor "$OUT" | tail -1 | cut -d' ' -f2-)" >>"$OUT/runs.txt"
  echo "noop $("$1" noop "$OUT" | tail -1 | cut -d' ' -f2-)" >>"$OUT/runs.txt"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
python3 - "$OUT/runs.txt" <<'PY'
import os, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    name, *kv = line.split()
    name = os.path.basename(name)
    for k, x in (p.split("=") for p in kv):
        runs.setdefault(name, {}).setdefault(k, []).append(float(x))
floor = runs["rdtsc-floor"]
cols = [("event", "event"), ("fields", "event, no message"), ("enter_exit", "span enter+exit")]
print("| build | " + " | ".join(f"{c} best / median" for _, c in cols) + " | event / floor (median) |")
print("|---|" + "---|" * (len(cols) + 1))
for name, r in runs.items():
    cells = [f"{min(r[k]):.1f} / {statistics.median(r[k]):.2f}" for k, _ in cols]
    ratio = statistics.median(r["event"]) / statistics.median(floor["event"])
    print(f"| {name} | " + " | ".join(cells) + f" | {ratio:.3f} |")
PY
rm -f "$OUT"/bench.*

# Sourced by the scripts that time zstd's builds of bench/real.sh (runtime_ab.sh, fixed_cost.sh): sets
# `root`, `real` (the builds and the input), `ft` (the release ferrotrace) and `out`
# (bench/out/$name, made), after checking the builds and ferrotrace are there, and defines `cpu_ms`.
# Set `name` (the script's, for its messages and its output directory) before sourcing it.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
real="$root/bench/out/real" out="$root/bench/out/$name" ft="$root/target/release/ferrotrace"
[ -x "$real/zstd-plain" ] || { echo "$name: no $real/zstd-plain: run RUNS=1 bench/real.sh zstd first" >&2; exit 2; }
[ -x "$ft" ] || { echo "$name: no $ft: run cargo build --release first" >&2; exit 2; }
mkdir -p "$out"

# The task-clock (ms) of a command and its children.
cpu_ms() {
  perf stat -x, -e task-clock -o "$out/stat" -- "$@" >/dev/null 2>&1
  awk -F, '/task-clock/ { print $1 }' "$out/stat"
}

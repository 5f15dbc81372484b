#!/usr/bin/env bash
# The collector's encoding rate (issue 21 item 2): ns per event and events per second of the data path
# the collector thread runs for each full chunk (encode, follow the calls, frame with a checksum,
# write), on the function events of a real trace, against a textbook byte-at-a-time LEB128 writer
# timed in the same run (crates/ferrotrace-core/examples/encode_rate.rs says what each row is).
# The records take EVENTS × 16 bytes (in the cache by default); in a traced process the collector reads
# each chunk just after the traced thread's core wrote it (bench/real.sh measures the whole process's cost).
# Usage: bench/collector.sh [TRACE] (EVENTS=200000 ROUNDS=15). Without TRACE: Lua binary-trees' trace
# from bench/real.sh (bench/out/real/lua-xray.data), recorded first if missing and Lua's XRay build is
# there; else fib(30)'s (XRay).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/bench/fib.sh" # setup_release, setup_fib_builds
trace=${1:-}
if [ -z "$trace" ]; then
  real="$root/bench/out/real"
  if [ -x "$real/lua-xray" ]; then
    setup_release collector
    trace="$real/lua-xray.data"
    [ -f "$trace" ] || "$ft" record -o "$trace" -- "$real/lua-xray" "$real/binarytrees.lua" 14 >/dev/null
  else
    setup_fib_builds collector
    trace="$out/fib.data"
    "$ft" record -o "$trace" -- "$out/xray/release/fib" 30 >/dev/null
  fi
else
  mkdir -p "$root/bench/out/collector"
  out="$root/bench/out/collector"
fi
cd "$root"
cargo build --release -q -p ferrotrace-core --features std --example encode_rate
OUT="$out" target/release/examples/encode_rate "$trace" "${EVENTS:-200000}" "${ROUNDS:-15}"

#!/usr/bin/env bash
# Lossless mode when the collector's core is busy (issue 21 item 2): Lua 5.4 binary-trees (bench/real.sh's
# clang XRay build, 141 M events) under `ferrotrace record`, untraced, and under uftrace (its -pg
# build), with one busy loop per CPU running beside them (a `stress`-like load at the same priority).
# Prints the medians of wall and CPU seconds (the program's process tree, not the busy loops), and the
# time the traced thread waited for a free chunk (the trace's Wait events: `info --json` waited_ns).
# Needs bench/real.sh's builds (bench/out/real/lua-{plain,xray,pg}).
# Usage: bench/stall.sh [ROUNDS=5]
set -euo pipefail
ROUNDS=${1:-5}
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/bench/fib.sh" # setup_release, median
setup_release real
for b in plain xray pg; do
  [ -x "$out/lua-$b" ] || { echo "bench/out/real/lua-$b missing: run bench/real.sh lua first" >&2; exit 1; }
done
busy=()
cleanup() { for p in "${busy[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
for _ in $(seq "$(nproc)"); do
  bash -c 'while :; do :; done' &
  busy+=($!)
done
args=("$out/binarytrees.lua" 14)
declare -A wall cpu waited
timed() { # timed NAME CMD...
  local name=$1 t
  shift
  t=$( { TIMEFORMAT='%R %U %S'; time "$@" >/dev/null 2>&1; } 2>&1 | tail -1)
  wall[$name]+="$(echo "$t" | awk '{print $1}') "
  cpu[$name]+="$(echo "$t" | awk '{print $2 + $3}') "
}
for round in $(seq "$ROUNDS"); do
  echo "round $round/$ROUNDS ..." >&2
  timed plain "$out/lua-plain" "${args[@]}"
  timed ferrotrace "$ft" record -o "$out/stall.data" -- "$out/lua-xray" "${args[@]}"
  waited[ferrotrace]+="$("$ft" info --json -i "$out/stall.data" |
    python3 -c 'import json,sys; print(sum(t["waited_ns"] for t in json.load(sys.stdin)["threads"]) / 1e9)') "
  if command -v uftrace >/dev/null; then
    timed uftrace uftrace record --no-libcall -d "$out/stall.uftrace" "$out/lua-pg" "${args[@]}"
  fi
done
rm -rf "$out/stall.data" "$out/stall.uftrace"
echo
echo "median of $ROUNDS rounds, $(nproc) busy loops beside the program"
printf '%-12s %10s %10s %12s\n' run "wall s" "CPU s" "waited s"
for name in plain ferrotrace uftrace; do
  [ -n "${wall[$name]:-}" ] || continue
  w=$(printf '%s\n' ${wall[$name]} | median)
  c=$(printf '%s\n' ${cpu[$name]} | median)
  q=-
  [ -n "${waited[$name]:-}" ] && q=$(printf '%s\n' ${waited[$name]} | median)
  printf '%-12s %10s %10s %12s\n' "$name" "$w" "$c" "$q"
done

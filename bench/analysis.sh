#!/usr/bin/env bash
# Analysis speed and memory against uftrace: every command and export of ferrotrace (report, replay,
# graph, flame, each `dump --format`) on three traces -- fib (testprogs, XRay), Lua 5.4 binary-trees
# (clang XRay build, bench/programs.sh) and binary-trees recorded with `record --sample` -- and
# uftrace 0.13's report, replay and `dump --chrome` on our uftrace export of the same trace, in
# interleaved rounds (every command of every trace once per round, so that a slow spell of this shared
# machine falls on all of them). Each run is timed by `/usr/bin/time` (wall, user+sys, peak RSS), with
# its output to /dev/null (directories for the uftrace and Parquet formats, removed between runs).
# Prints, per trace and command, the medians, events per second of wall and of CPU time, the ratio
# of uftrace's median to ours (report to uftrace report, replay to uftrace replay, everything else to
# uftrace dump --chrome), and graph's and flame's time over report's; the load average with it.
# Not a test.
#
# Usage: bench/analysis.sh             (RUNS=3 rounds; fib 35, Lua 14, sampled Lua 12)
#   SMALL=1            quick: fib 30, Lua 10, sampled Lua 10
#   FIB_N, LUA_N, SAMPLE_N, SAMPLE_FREQ  the sizes, and --sample-freq of the sampled trace (4999)
#   TRACES=fib,lua,sample   which traces
#   BASE=PATH          another ferrotrace binary (e.g. main's) run beside ours on every command, with
#                      its median's ratio to ours (> 1: ours is faster)
#   FT=PATH            the ferrotrace binary to measure (default: this tree's, built here)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
source bench/programs.sh
RUNS=${RUNS:-3}
if [ -n "${SMALL:-}" ]; then
  FIB_N=${FIB_N:-30} LUA_N=${LUA_N:-10} SAMPLE_N=${SAMPLE_N:-10}
fi
FIB_N=${FIB_N:-35} LUA_N=${LUA_N:-14} SAMPLE_N=${SAMPLE_N:-12} SAMPLE_FREQ=${SAMPLE_FREQ:-4999}
TRACES=${TRACES:-fib,lua,sample}
out=$root/bench/out/analysis
src=$out/src
mkdir -p "$src"
command -v uftrace >/dev/null || { echo "analysis: uftrace is not installed (scripts/setup.sh)" >&2; exit 2; }

echo "building ..." >&2
if [ -z "${FT:-}" ]; then
  cargo build --release -q -p ferrotrace-cli -p ferrotrace-preload
  FT=$root/target/release/ferrotrace
fi
export FERROTRACE_PRELOAD=${FERROTRACE_PRELOAD:-$root/target/release/libferrotrace_preload.so}
(cd testprogs && RUSTFLAGS="-Zinstrument-xray=always -Cforce-frame-pointers=yes" \
  cargo +nightly build --release -q --bin fib)
build_lua xray
write_binarytrees "$out/binarytrees.lua"

# The traces, recorded once (kept between runs of the script: delete bench/out/analysis to record
# again), and each one's uftrace export for uftrace's commands.
declare -A trace events
IFS=, read -r -a names <<< "$TRACES"
for name in "${names[@]}"; do
  case $name in
    fib) t=$out/fib$FIB_N.data; cmd=(testprogs/target/release/fib "$FIB_N") ;;
    lua) t=$out/lua$LUA_N.data; cmd=("$out/lua-xray" "$out/binarytrees.lua" "$LUA_N") ;;
    sample) t=$out/lua${SAMPLE_N}s$SAMPLE_FREQ.data
      cmd=(--sample --sample-freq "$SAMPLE_FREQ" -- "$out/lua-xray" "$out/binarytrees.lua" "$SAMPLE_N") ;;
    *) echo "analysis: unknown trace $name (fib, lua, sample)" >&2; exit 2 ;;
  esac
  [ "${cmd[0]}" = --sample ] || cmd=(-- "${cmd[@]}")
  if [ ! -f "$t" ]; then
    echo "recording $name ..." >&2
    "$FT" record -o "$t" "${cmd[@]}" >/dev/null 2>"$out/record.log" || { cat "$out/record.log" >&2; exit 1; }
  fi
  [ -d "$t.uftrace" ] || "$FT" dump -i "$t" --format uftrace -o "$t.uftrace" 2>/dev/null
  trace[$name]=$t
  events[$name]=$("$FT" info -i "$t" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["events"])')
done

# The commands: LABEL|COMMAND (ferrotrace's words after the binary; uftrace's in full). %T is the
# trace, %U its uftrace export, %O a scratch path.
ours=(
  "report --jobs 1|report --jobs 1 -i %T"
  "report --jobs 2|report --jobs 2 -i %T"
  "replay|replay -i %T"
  "graph|graph -i %T"
  "flame|flame -i %T -o -"
)
for f in uftrace chrome perfetto folded parquet pprof firefox; do
  case $f in
    uftrace | parquet) ours+=("dump --format $f|dump -i %T --format $f -o %O") ;;
    *) ours+=("dump --format $f|dump -i %T --format $f") ;;
  esac
done
peers=(
  "uftrace report|uftrace report -d %U"
  "uftrace replay|uftrace replay -d %U"
  "uftrace dump --chrome|uftrace dump --chrome -d %U"
)

# run LOG BINARY|'' NAME CMD: runs CMD once (stdout to /dev/null), appends "wall cpu rss_kb" to LOG.
# A command that fails (firefox on a trace without samples) is noted once and not timed again.
declare -A failed
run() {
  local log=$1 bin=$2 name=$3 cmd=$4
  local t=${trace[$name]}
  cmd=${cmd//%T/$t}
  cmd=${cmd//%U/$t.uftrace}
  cmd=${cmd//%O/$out/scratch}
  rm -rf "$out/scratch"
  local key="$name $bin $cmd"
  [ -z "${failed[$key]:-}" ] || return 0
  # shellcheck disable=SC2086 # the command's words
  if /usr/bin/time -o "$out/time" -f '%e %U %S %M' $bin $cmd >/dev/null 2>"$out/stderr"; then
    awk '{ printf "%s %.2f %s\n", $1, $2 + $3, $4 }' "$out/time" >> "$log"
  else
    failed[$key]=1
    echo "($name: $bin $cmd: $(grep -v '^Command exited' "$out/stderr" | tail -1))" >&2
  fi
}

results=$out/results
rm -rf "$results"
mkdir -p "$results"
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for round in $(seq "$RUNS"); do
  echo "round $round/$RUNS ..." >&2
  for name in "${names[@]}"; do
    i=0
    for c in "${ours[@]}"; do
      run "$results/$name.ours.$i" "$FT" "$name" "${c#*|}"
      [ -z "${BASE:-}" ] || run "$results/$name.base.$i" "$BASE" "$name" "${c#*|}"
      i=$((i + 1))
    done
    i=0
    for c in "${peers[@]}"; do
      run "$results/$name.peer.$i" "" "$name" "${c#*|}"
      i=$((i + 1))
    done
  done
done
rm -rf "$out/scratch"

echo
echo "bench/analysis.sh: $RUNS rounds, medians; $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs);" \
  "load average $load_before before, $(cut -d' ' -f1-3 /proc/loadavg) after; $(date -u '+%Y-%m-%d %H:%M UTC')"
labels() { for c in "$@"; do echo "${c%%|*}"; done; }
for name in "${names[@]}"; do
  echo
  echo "### $name: $(basename "${trace[$name]}"), ${events[$name]} events, $(stat -c %s "${trace[$name]}") bytes"
  python3 - "$results" "$name" "${events[$name]}" "${BASE:+base}" \
    "$(labels "${ours[@]}")" "$(labels "${peers[@]}")" <<'PY'
import os, statistics, sys
results, name, events, base, ours, peers = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], \
    sys.argv[5].split("\n"), sys.argv[6].split("\n")

def load(kind, i):
    p = os.path.join(results, f"{name}.{kind}.{i}")
    if not os.path.exists(p):
        return None
    rows = [tuple(map(float, l.split())) for l in open(p)]
    return tuple(statistics.median(r[k] for r in rows) for k in range(3))

peer = {l: load("peer", i) for i, l in enumerate(peers)}
mine = {l: load("ours", i) for i, l in enumerate(ours)}
def peer_of(label):
    if label.startswith("report"):
        return "uftrace report"
    if label == "replay":
        return "uftrace replay"
    return "uftrace dump --chrome"
def rate(s):
    return f"{events / s / 1e6:.1f}" if s > 0 else "-"
cols = "| command | wall | CPU | M events/s wall | M events/s CPU | uftrace's wall ÷ ours | uftrace's CPU ÷ ours | wall ÷ report's | peak RSS |"
if base:
    cols += " base's wall ÷ ours | base's CPU ÷ ours |"
print(cols)
print("|" + "---|" * (cols.count("|") - 1))
report = mine.get("report --jobs 1")
for i, label in enumerate(ours):
    m = mine[label]
    if m is None:
        continue
    wall, cpu, rss = m
    p = peer[peer_of(label)]
    ratio = lambda a, b: f"{a / b:.1f}×" if b > 0 else "-"
    vs_report = ratio(wall, report[0]) if report and label in ("graph", "flame") else ""
    row = (f"| {label} | {wall:.2f} s | {cpu:.2f} s | {rate(wall)} | {rate(cpu)} | "
           f"{ratio(p[0], wall) if p else '-'} | {ratio(p[1], cpu) if p else '-'} | {vs_report} | {rss / 1024:.1f} MB |")
    if base:
        b = load("base", i)
        row += f" {ratio(b[0], wall)} | {ratio(b[1], cpu)} |" if b else " - | - |"
    print(row)
for label in peers:
    if peer[label] is None:
        continue
    wall, cpu, rss = peer[label]
    print(f"| {label} | {wall:.2f} s | {cpu:.2f} s | {rate(wall)} | {rate(cpu)} | | | | {rss / 1024:.1f} MB |"
          + (" | |" if base else ""))
PY
done

#!/usr/bin/env bash
# Attaching to a running process (`ferrotrace record -p`), two figures:
#
# 1. Cost per traced call while attached, against a bpftrace uprobe on the same function, in one run of
#    one process: testprogs' call_loop (XRay build) reads N from stdin, calls the traced `work` N times
#    and prints the loop's thread CPU time. Each round asks it for N calls untraced, then with
#    `ferrotrace record -p PID -F work` attached, then with
#    `bpftrace -e 'uprobe:BIN:work { @ = count(); }' -p PID` attached (BPF_N calls: a uprobe costs
#    microseconds). Prints the medians in ns per call and the ratio of the overheads.
# 2. The pause the target sees while attaching (from the ptrace seize to the release: the dlopen, the
#    runtime's start, discovery and the patching, as `record -p` prints it), on ripgrep built with
#    XRay sleds (bench/ripgrep.sh; 62 MB, 7,249 functions) waiting on its stdin: every function
#    patched, and one (`-F '^grep_cli::'`).
# Usage: bench/attach.sh [N=20000000] (BPF_N=500000 RUNS=5 PAUSES=5; needs nightly and bpftrace)
set -euo pipefail
N=${1:-20000000}
BPF_N=${BPF_N:-500000}
RUNS=${RUNS:-5}
PAUSES=${PAUSES:-5}
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/bench/fib.sh" # setup_release, median, field
setup_release attach
export FERROTRACE_PRELOAD=$root/target/release/libferrotrace_preload.so
(cd testprogs && CARGO_TARGET_DIR="$out/xray" RUSTFLAGS="-Zinstrument-xray=always -Cforce-frame-pointers=yes" \
  cargo +nightly build --release -q --bin call_loop)
bin=$out/xray/release/call_loop
sym=$(nm "$bin" | awk '/call_loop4work/ && !s {s = $3} END {print s}')
ulimit -l unlimited 2>/dev/null || true

fifo=$out/in
rm -f "$fifo" && mkfifo "$fifo"
"$bin" <"$fifo" >"$out/loop.out" &
pid=$!
exec 7>"$fifo"
trap 'exec 7>&-; kill $pid 2>/dev/null || true' EXIT
# ask N: runs N calls in the target, prints its ns.
ask() {
  local before
  before=$(wc -l <"$out/loop.out")
  echo "$1" >&7
  while [ "$(wc -l <"$out/loop.out")" -le "$before" ]; do sleep 0.05; done
  tail -1 "$out/loop.out" | field ns
}
# wait_for FILE TEXT: until FILE contains TEXT (30 s at most).
wait_for() {
  for _ in $(seq 300); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  echo "timed out waiting for '$2' in $1" >&2; cat "$1" >&2; return 1
}

declare -A samples
for round in $(seq "$RUNS"); do
  echo "round $round/$RUNS ..." >&2
  samples[untraced]+="$(ask "$N") "
  "$ft" record -p "$pid" -F work -o "$out/attached.data" 2>"$out/record.err" &
  rec=$!
  wait_for "$out/record.err" "recording process"
  samples[ferrotrace]+="$(ask "$N") "
  kill -INT $rec; wait $rec
  samples[bpf_untraced]+="$(ask "$BPF_N") "
  bpftrace -e "uprobe:$bin:$sym { @ = count(); }" -p "$pid" >"$out/bpf.out" 2>&1 &
  bpf=$!
  wait_for "$out/bpf.out" "Attaching"
  sleep 0.5
  samples[bpftrace]+="$(ask "$BPF_N") "
  kill -INT $bpf; wait $bpf || true
done
m() { printf '%s\n' ${samples[$1]} | median; }
per() { echo "scale=2; $1 / $2" | bc; }
u=$(per "$(m untraced)" "$N")
f=$(per "$(m ferrotrace)" "$N")
bu=$(per "$(m bpf_untraced)" "$BPF_N")
b=$(per "$(m bpftrace)" "$BPF_N")
echo
echo "cost per call of work() (ns, medians of $RUNS rounds; thread CPU time of the calling loop):"
printf '  %-36s %8s\n' "untraced ($N calls)" "$u"
printf '  %-36s %8s   overhead %s\n' "ferrotrace record -p (attached)" "$f" "$(echo "scale=2; $f - $u" | bc)"
printf '  %-36s %8s\n' "untraced ($BPF_N calls)" "$bu"
printf '  %-36s %8s   overhead %s\n' "bpftrace uprobe (attached)" "$b" "$(echo "scale=2; $b - $bu" | bc)"
echo "  bpftrace's overhead / ferrotrace's: $(echo "scale=1; ($b - $bu) / ($f - $u)" | bc)x"
"$ft" info -i "$out/attached.data" | sed -n 1,8p

# 2. The pause, on ripgrep.
source "$root/bench/ripgrep.sh"
build_rg xray "-Zinstrument-xray=always -Cforce-frame-pointers=yes"
rg=$RG_DIR/xray/bin/rg
rgfifo=$out/rg.in
rm -f "$rgfifo" && mkfifo "$rgfifo"
"$rg" needle <"$rgfifo" >/dev/null &
rgpid=$!
exec 8>"$rgfifo"
trap 'exec 7>&- 8>&-; kill $pid $rgpid 2>/dev/null || true' EXIT
sleep 0.5
for filter in "" "^grep_cli::"; do
  pauses=""
  for i in $(seq "$PAUSES"); do
    args=(record -p "$rgpid" --duration 0.2s -o "$out/rg.data")
    [ -n "$filter" ] && args+=(-F "$filter")
    p=$("$ft" "${args[@]}" 2>&1 | sed -n 's/.*held for \([0-9.]*\) ms.*/\1/p')
    pauses+="$p "
  done
  echo "ripgrep ($(stat -c %s "$rg") bytes), -F '${filter:-(all)}': pause while attaching (ms): $pauses; median $(printf '%s\n' $pauses | median)"
done

#!/usr/bin/env bash
# The pause `record -p` imposes (from the seize of the borrowed thread to its release, as it prints
# it) and how long every thread is stopped for the entry jumps, on a plain gcc -O2 program with 0, 64
# and 256 threads spinning (testprogs/c/busy_threads.c; its main thread blocked in read). With
# BASELINE=/path/to/another/ferrotrace, each run alternates with that build (issue 41 item 7: the
# previous main, calls returning to address 0 and threads stopped one at a time).
# Usage: bench/attach_busy.sh [RUNS=3]   (root, or ptrace rights over your own processes)
set -euo pipefail
RUNS=${1:-3}
root=$(cd "$(dirname "$0")/.." && pwd)
cargo build -q -p ferrotrace-cli -p ferrotrace-preload --manifest-path "$root/Cargo.toml"
ours=$root/target/debug/ferrotrace
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
gcc -O2 -pthread -o "$work/busy_threads" "$root/testprogs/c/busy_threads.c"
pause() { # BINARY PID: "pause ms, stopped ms"
  "$1" record -p "$2" -P '^work$' -o "$work/t.data" --duration 0.2 2>&1 |
    awk '/stopped for/ { for (i = 1; i <= NF; i++) if ($i == "for" && $(i + 2) == "ms") s = $(i + 1) }
         /held for/ { for (i = 1; i <= NF; i++) if ($i == "for" && $(i + 2) == "ms") h = $(i + 1) }
         END { printf "%s ms (threads stopped %s ms)", h, (s == "" ? "-" : s) }'
}
mkfifo "$work/stdin"
exec 3<>"$work/stdin" # held open: the program's read blocks, and never sees its end
for threads in 0 64 256; do
  "$work/busy_threads" "$threads" <"$work/stdin" &
  pid=$!
  sleep 1
  for run in $(seq "$RUNS"); do
    if [ -n "${BASELINE:-}" ]; then
      echo "threads=$threads run=$run baseline: $(pause "$BASELINE" "$pid")"
    fi
    echo "threads=$threads run=$run ours:     $(pause "$ours" "$pid")"
  done
  kill "$pid"
  sleep 0.5
done

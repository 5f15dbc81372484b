#!/usr/bin/env bash
# The in-kernel cost of `ferrotrace profile --bpf`, measured by the kernel itself: with
# `kernel.bpf_stats_enabled=1` the kernel sums each BPF program's run time (run_time_ns) and runs
# (run_cnt), shown in /proc/PID/fdinfo of the program's descriptor. This script reads them for the
# cpu-clock program (prog_type 7, perf_event) of ferrotrace while it records, and prints ns per sample
# and, with the user frames the unwinder went through (ferrotrace's last line), ns per frame and
# its reads of user memory per sample (a stack window each, a word per saved value beyond it).
# Other load on the machine changes these little (they count the program's own time on its CPU).
# Usage: bench/bpf_stats.sh [FT=ferrotrace] [HZ=9999] [RUNS=3] -- PROGRAM ARGS...
#   e.g. bench/bpf_stats.sh -- bench/out/bpf/recurse recurse 40 3000
#        SQL_ROWS=2000000 bench/bpf_stats.sh sqlite
# Several FT binaries (FT="old new") are run interleaved, RUNS rounds.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=$ROOT/bench/out/bpf_stats
mkdir -p "$OUT"
FT=${FT:-$ROOT/target/release/ferrotrace}
HZ=${HZ:-9999}
RUNS=${RUNS:-3}
STDIN=/dev/null
if [ "${1:-}" = sqlite ]; then
    SQLITE=${SQLITE:-$ROOT/bench/out/real/sqlite-plain}
    [ -x "$SQLITE" ] || SQLITE=/work/main/bench/out/real/sqlite-plain
    printf '%s\n' "CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT, c REAL);
WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM s WHERE i<${SQL_ROWS:-300000})
INSERT INTO t(b,c) SELECT printf('%08x-%d', (i*2654435761)%4294967296, i), i*1.5 FROM s;
CREATE INDEX ib ON t(b); SELECT count(*), sum(c) FROM t WHERE b LIKE 'a%';" >"$OUT/sql"
    STDIN=$OUT/sql
    set -- "$SQLITE" :memory:
else
    [ "${1:-}" = -- ] && shift
fi
[ $# -gt 0 ] || { echo "usage: bench/bpf_stats.sh [sqlite | -- PROGRAM ARGS...]" >&2; exit 2; }

was=$(sysctl -n kernel.bpf_stats_enabled)
sysctl -qw kernel.bpf_stats_enabled=1
trap 'sysctl -qw kernel.bpf_stats_enabled=$was' EXIT

# Prints "run_cnt run_time_ns" of process $1's perf_event BPF program (the largest, if several).
prog_stats() {
    local best="0 0" f
    for f in /proc/"$1"/fdinfo/*; do
        grep -q '^prog_type:[[:space:]]*7$' "$f" 2>/dev/null || continue
        local cnt ns
        # Both from one read of the file (the process may end between two).
        read -r cnt ns < <(awk '/^run_cnt:/ {c = $2} /^run_time_ns:/ {t = $2} END {print c, t}' "$f" 2>/dev/null)
        [ -n "$cnt" ] && [ -n "$ns" ] && [ "$cnt" -ge "${best% *}" ] && best="$cnt $ns"
    done
    echo "$best"
}

echo "load: $(cut -d' ' -f1-3 /proc/loadavg)   $HZ Hz   $*"
printf '%-50s %10s %12s %10s %10s %10s\n' binary runs ns/sample frames ns/frame reads
for round in $(seq "$RUNS"); do
    for ft in $FT; do
        "$ft" profile --bpf -F "$HZ" -o "$OUT/trace.ft" -- "$@" <"$STDIN" >/dev/null 2>"$OUT/err" &
        pid=$!
        last="0 0"
        while kill -0 "$pid" 2>/dev/null; do
            now=$(prog_stats "$pid")
            [ "${now% *}" -ge "${last% *}" ] && last=$now
            sleep 0.05
        done
        wait "$pid" || { cat "$OUT/err" >&2; exit 1; }
        frames=$(sed -n 's/.*went through \([0-9]*\) user frames.*/\1/p' "$OUT/err")
        samples=$(sed -n 's/.*: \([0-9]*\) samples from.*/\1/p' "$OUT/err")
        reads=$(sed -n 's/.*with \([0-9.]*\) reads of user memory.*/\1/p' "$OUT/err")
        echo "$ft ${last% *} ${last#* } ${frames:--} ${samples:--} ${reads:--}" | awk '{
            ns = $2 ? $3 / $2 : 0
            fps = ($4 != "-" && $5 > 0) ? $4 / $5 : 0
            printf "%-50s %10d %12.0f %10.1f %10s %10s\n", $1, $2, ns, fps, fps ? sprintf("%.0f", ns / fps) : "-", $6
        }'
    done
done
rm -f "$OUT/trace.ft"
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"

#!/usr/bin/env bash
# ferrotrace profile --bpf (stacks unwound and counted in the kernel) against ferrotrace's perf_event
# backend (--call-graph dwarf: stack copies unwound while recording), `perf record -g` and
# `perf record --call-graph dwarf`, in one run, on programs built without frame pointers:
#   rust    testprogs/bpf/recurse.rs (rustc -O: a recursion 40 deep under a spinning leaf)
#   rg      ripgrep 14.1.1 (cargo install with default flags, no frame pointers) searching
#           /usr/include and /usr/share/doc (286 MB here) with two threads
#   python  CPython (this machine's python3) running a pure-Python loop
#   sqlite  sqlite3 built gcc -O2 (bench/real.sh's plain build): 300,000 rows inserted, indexed, queried
#   gcc     `gcc -O2 -c` of each of Lua 5.4's sources (Debian's source package), one after another:
#           a process tree of short-lived compilers (gcc, cc1, as), each exec'd while recording
# For each program and frequency (999 and 9,999 Hz) it prints, per tool:
#   prog s    median of RUNS runs of the program's own wall time (/usr/bin/time inside the tool: the
#             tool's start-up and finishing left out), and the overhead against the program alone
#   cpu s     median of the program's CPU time (user + system, the same /usr/bin/time; the BPF
#             programs run in the sampled thread's context, so their time is in it), and its overhead
#   rec cpu   median CPU time of the recorder itself: the whole command's user + system time (an outer
#             /usr/bin/time, which counts the children the tool reaped) minus the program's
#   total s   median wall time of the whole command (tool start-up, BPF loading, finishing included)
#   complete  share of samples whose stack reaches `main` or a thread's start (_start, clone3, start_thread),
#             from one more run of each tool without /usr/bin/time (under it the program is a child
#             process, which --bpf does not hold at its start)
#   top10     largest difference, in percentage points, between the tool's self-time share and
#             perf --call-graph dwarf's, over perf dwarf's 10 functions with the most self time
#   B/sample  bytes read from the kernel per sample: perf.data size / samples for perf (what perf
#             copied out of its rings), the count ferrotrace prints for its two backends
#   samples   samples of the profile the complete and top10 columns come from
# The rounds are interleaved (round 1 of every tool, then round 2, ...) so that a change in the
# machine's load falls on every tool alike; the load average is printed before and after.
# Not a test: figures vary with the machine and its load; compare the lines of one run.
# Usage: bench/bpf.sh [PROGRAMS=rust,rg,python,sqlite,gcc]   (env: RUNS=3 FREQS="999 9999", FT=a built
# ferrotrace; longer programs for the top10 column, which needs >= 20k samples to mean something:
# RUST_MS=2500 PY_N=3000000 SQL_ROWS=300000 RG_CORPUS="/usr/include /usr/share/doc")
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=$ROOT/bench/out/bpf
mkdir -p "$OUT"
RUNS=${RUNS:-3}
FREQS=${FREQS:-999 9999}
PROGRAMS=${1:-rust,rg,python,sqlite,gcc}
export CARGO_INCREMENTAL=0

if [ -z "${FT:-}" ]; then
    (cd "$ROOT" && cargo build --release -q -p ferrotrace-cli)
    FT=$ROOT/target/release/ferrotrace
fi
rustc --edition 2021 -O -g "$ROOT/testprogs/bpf/recurse.rs" -o "$OUT/recurse"
source "$ROOT/bench/ripgrep.sh"
SQLITE=${SQLITE:-$ROOT/bench/out/real/sqlite-plain}
[ -x "$SQLITE" ] || SQLITE=/work/main/bench/out/real/sqlite-plain
PYTHON=$(python3 -c 'import sys, os; print(os.path.realpath(sys.executable))')
RG_CORPUS=${RG_CORPUS:-/usr/include /usr/share/doc}
cat >"$OUT/loop.py" <<PY
def work(n):
    s = 0
    for i in range(n):
        s += i * i % 7
    return s
print(work(${PY_N:-3000000}))
PY
if [[ ,$PROGRAMS, == *,gcc,* ]]; then
    src=$ROOT/bench/out/real/src out=$OUT
    mkdir -p "$src"
    source "$ROOT/bench/programs.sh"
    lua=$(fetch lua5.4 'lua5.4-*')
    {
        echo 'set -e'
        # Debian's luaconf.h names the library directory by the multiarch its build defines.
        for c in "$lua"/src/*.c; do echo "gcc -O2 '-DDEB_HOST_MULTIARCH=\"x86_64-linux-gnu\"' -c $c -o /dev/null"; done
    } >"$OUT/lua_compile.sh"
fi
SQL="CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT, c REAL);
WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM s WHERE i<${SQL_ROWS:-300000})
INSERT INTO t(b,c) SELECT printf('%08x-%d', (i*2654435761)%4294967296, i), i*1.5 FROM s;
CREATE INDEX ib ON t(b); SELECT count(*), sum(c) FROM t WHERE b LIKE 'a%';"

cmd_of() {
    case $1 in
    rust) echo "$OUT/recurse recurse 40 ${RUST_MS:-2500}" ;;
    rg)
        if [ ! -x "$RG_DIR/plain/bin/rg" ]; then
            echo "building ripgrep without frame pointers (once) ..." >&2
            build_rg plain "" >&2
        fi
        echo "$RG_DIR/plain/bin/rg -j2 -c [a-z]+_[a-z]+[(] $RG_CORPUS" ;;
    python) echo "$PYTHON $OUT/loop.py" ;;
    sqlite) echo "$SQLITE :memory:" ;;
    gcc) echo "sh $OUT/lua_compile.sh" ;;
    esac
}
stdin_of() { if [ "$1" = sqlite ]; then printf '%s\n' "$SQL"; else true; fi; }

now() { date +%s.%N; }
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# run PROGRAM TOOL FREQ [timed] -> prints "program-seconds program-cpu total-seconds recorder-cpu";
# leaves the profile in
# $OUT/PROGRAM-TOOL-FREQ.* (timed: $OUT/PROGRAM-TOOL-FREQ-timed.*, the program run under /usr/bin/time)
run() {
    local p=$1 tool=$2 f=$3 t0 t1 cmd
    local base=$OUT/$p-$tool-$f
    if [ "${4:-}" = timed ]; then
        base=$base-timed
        read -r -a cmd <<<"/usr/bin/time -f %e_%U_%S -o $base.time $(cmd_of "$p")"
    else
        echo 0_0_0 >"$base.time"
        read -r -a cmd <<<"$(cmd_of "$p")"
    fi
    rm -f "$base.data" "$base.perf"
    local whole=(/usr/bin/time -f %U_%S -o "$base.whole")
    t0=$(now)
    case $tool in
    alone) stdin_of "$p" | "${whole[@]}" "${cmd[@]}" >/dev/null ;;
    perf-g) stdin_of "$p" | "${whole[@]}" perf record -q -F "$f" -g -o "$base.perf" -- "${cmd[@]}" >/dev/null 2>"$base.err" ;;
    perf-dwarf) stdin_of "$p" | "${whole[@]}" perf record -q -F "$f" --call-graph dwarf -o "$base.perf" -- "${cmd[@]}" >/dev/null 2>"$base.err" ;;
    ft-perf) stdin_of "$p" | "${whole[@]}" "$FT" profile -F "$f" --call-graph dwarf -o "$base.data" -- "${cmd[@]}" >/dev/null 2>"$base.err" ;;
    ft-bpf) stdin_of "$p" | "${whole[@]}" "$FT" profile --bpf -F "$f" -o "$base.data" -- "${cmd[@]}" >/dev/null 2>"$base.err" ;;
    esac
    t1=$(now)
    awk -v a="$t0" -v b="$t1" -v p="$(tail -1 "$base.time")" -v w="$(tail -1 "$base.whole")" 'BEGIN {
        split(p, q, "_"); split(w, v, "_"); cpu = q[2] + q[3]
        rec = v[1] + v[2] - cpu; if (rec < 0) rec = 0
        printf "%s %.2f %.3f %.2f\n", q[1], cpu, b - a, rec }'
}

stats() { # PROGRAM TOOL FREQ -> JSON of bench/bpf_compare.py
    local base=$OUT/$1-$2-$3
    case $2 in
    perf-*) python3 "$ROOT/bench/bpf_compare.py" perf "$base.perf" ;;
    ft-*) python3 "$ROOT/bench/bpf_compare.py" ft "$base.data" "$FT" ;;
    esac
}

bytes_per_sample() { # PROGRAM TOOL FREQ SAMPLES
    local base=$OUT/$1-$2-$3
    case $2 in
    perf-*) awk -v b="$(stat -c %s "$base.perf")" -v n="$4" 'BEGIN {printf "%.0f", n ? b / n : 0}' ;;
    ft-*) grep -o '([0-9.]* per sample)' "$base.err" | tr -dc '0-9.' ;;
    esac
}

IFS=, read -r -a progs <<<"$PROGRAMS"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) CPUs"
for p in "${progs[@]}"; do
    for f in $FREQS; do
        printf '\n%s at %s Hz\n' "$p" "$f"
        printf '%-11s %7s %8s %6s %8s %7s %7s %8s %6s %8s %8s\n' tool 'prog s' overhead 'cpu s' 'cpu ovh' \
            'rec cpu' 'total s' complete top10 B/sample samples
        declare -A wall=() cpu=() rec=() total=()
        declare -A ws=() cs=() rs=() ts=()
        for _ in $(seq "$RUNS"); do
            for tool in alone perf-g perf-dwarf ft-perf ft-bpf; do
                read -r w c t r < <(run "$p" "$tool" "$f" timed)
                ws[$tool]+="$w " cs[$tool]+="$c " rs[$tool]+="$r " ts[$tool]+="$t "
            done
        done
        for tool in alone perf-g perf-dwarf ft-perf ft-bpf; do
            run "$p" "$tool" "$f" >/dev/null
            wall[$tool]=$(printf '%s\n' ${ws[$tool]} | median)
            cpu[$tool]=$(printf '%s\n' ${cs[$tool]} | median)
            rec[$tool]=$(printf '%s\n' ${rs[$tool]} | median)
            total[$tool]=$(printf '%s\n' ${ts[$tool]} | median)
        done
        stats "$p" perf-dwarf "$f" >"$OUT/$p-ref-$f.json"
        for tool in alone perf-g perf-dwarf ft-perf ft-bpf; do
            ov=$(awk -v m="${wall[$tool]}" -v b="${wall[alone]}" 'BEGIN {printf "%+.1f%%", (m / b - 1) * 100}')
            cov=$(awk -v m="${cpu[$tool]}" -v b="${cpu[alone]}" 'BEGIN {printf "%+.1f%%", b ? (m / b - 1) * 100 : 0}')
            if [ $tool = alone ]; then
                printf '%-11s %7s %8s %6s %8s %7s %7s\n' "$tool" "${wall[$tool]}" "" "${cpu[$tool]}" "" "" "${total[$tool]}"
                continue
            fi
            stats "$p" "$tool" "$f" >"$OUT/$p-$tool-$f.json"
            read -r samples complete top10 < <(python3 - "$OUT/$p-$tool-$f.json" "$OUT/$p-ref-$f.json" <<'PY'
import json, sys
me, ref = (json.load(open(p)) for p in sys.argv[1:3])
top = sorted(ref["self"], key=ref["self"].get, reverse=True)[:10]
dev = max(abs(me["self"].get(f, 0) - ref["self"][f]) for f in top) * 100 if top else 0
print(me["samples"], f"{me['complete'] * 100:.1f}%", f"{dev:.1f}")
PY
)
            bps=$(bytes_per_sample "$p" "$tool" "$f" "$samples")
            printf '%-11s %7s %8s %6s %8s %7s %7s %8s %6s %8s %8s\n' "$tool" "${wall[$tool]}" "$ov" "${cpu[$tool]}" "$cov" \
                "${rec[$tool]}" "${total[$tool]}" "$complete" "$top10" "$bps" "$samples"
        done
        unset wall cpu rec total ws cs rs ts
    done
done
echo
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) CPUs"
echo "(medians of $RUNS runs; profiles and their stats in $OUT; delete it when done: perf dwarf files are large)"

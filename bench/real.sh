#!/usr/bin/env bash
# The whole process's cost per traced call on real programs, against uftrace, in interleaved rounds:
#   sqlite3 (the shell: 100,000 rows inserted, indexed and queried in memory), Lua 5.4 (binary-trees)
#   and zstd (-9 on 4 threads, 20 MB), built from Debian's source packages with gcc -pg, gcc -pg
#   -mfentry, gcc -pg -mnop-mcount -mrecord-mcount and clang-16 -fxray-instrument, each run untraced
#   (its plain -O2 build), under `ferrotrace record` and under `uftrace record --no-libcall` (uftrace
#   cannot read XRay sleds; -mnop-mcount builds are patched by its -P .).
# Prints, per program and build, the medians of: wall time and CPU time (user + system of the whole
# process tree, the tracer's threads and processes included) per traced call above the plain build's,
# ferrotrace's bytes per event, and uftrace's cost over ferrotrace's; and the same CPU figures from the
# best rounds (each variant's fastest against the plain build's fastest). The load average printed
# with them says how busy the machine was: CPU time is the figure to compare on a shared machine.
# Usage: bench/real.sh [PROGRAMS=sqlite,lua,zstd] (RUNS=5 rounds). Needs root for apt-get source.
set -euo pipefail
RUNS=${RUNS:-5}
PROGRAMS=${1:-sqlite,lua,zstd}
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/bench/fib.sh"
source "$root/bench/programs.sh"
setup_release real
src="$out/src"
mkdir -p "$src"

# --- sources and builds (fetch, cc_flags, build_lua, write_binarytrees: bench/programs.sh) ---
builds=(pg fentry nop xray)

build_sqlite() { # $1: build
  local d
  d=$(fetch sqlite3 'sqlite3-*')
  if [ ! -f "$d/bld/sqlite3.c" ]; then
    echo "sqlite: making the amalgamation ..." >&2
    (mkdir -p "$d/bld" && cd "$d/bld" && ../configure -q >/dev/null && make -s sqlite3.c shell.c >/dev/null 2>&1)
  fi
  [ -x "$out/sqlite-$1" ] || ${cc_flags[$1]} -DSQLITE_THREADSAFE=0 -DSQLITE_OMIT_LOAD_EXTENSION \
    -I"$d/bld" "$d/bld/sqlite3.c" "$d/bld/shell.c" -o "$out/sqlite-$1" -lm
}
build_zstd() {
  local d
  d=$(fetch libzstd 'libzstd-*')
  if [ ! -x "$out/zstd-$1" ]; then
    rm -rf "$out/zstd-build-$1" && cp -r "$d" "$out/zstd-build-$1"
    # shellcheck disable=SC2086
    set -- $1 ${cc_flags[$1]}
    local b=$1 cc=$2; shift 2
    make -s -C "$out/zstd-build-$b/programs" zstd CC="$cc" CFLAGS="$*" MOREFLAGS="$*" \
      HAVE_ZLIB=0 HAVE_LZMA=0 HAVE_LZ4=0 >/dev/null 2>&1
    cp "$out/zstd-build-$b/programs/zstd" "$out/zstd-$b"
  fi
}

# --- workloads ---
sql="CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT, c REAL);
WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM s WHERE i<100000)
INSERT INTO t(b,c) SELECT printf('%08x-%d', (i*2654435761)%4294967296, i), i*1.5 FROM s;
CREATE INDEX ib ON t(b); SELECT count(*), sum(c) FROM t WHERE b LIKE 'a%';"
write_binarytrees "$out/binarytrees.lua"
if [ ! -f "$out/zstd-input" ]; then
  tar cf - /usr/include /usr/share/doc 2>/dev/null | head -c 20000000 > "$out/zstd-input"
fi
workload() { # workload PROGRAM BUILD: the command line
  case $1 in
    sqlite) echo "$out/sqlite-$2 :memory:" ;;
    lua) echo "$out/lua-$2 $out/binarytrees.lua ${LUA_N:-14}" ;;
    zstd) echo "$out/zstd-$2 -q -9 -T4 -f $out/zstd-input -o $out/zstd-output-$2.zst" ;;
  esac
}
stdin_of() { if [ "$1" = sqlite ]; then echo "$sql"; else echo; fi; }

# timed NAME CMD...: runs CMD (stdin: the workload's), appends wall and CPU seconds (user+system of
# the whole process tree) to samples.
declare -A wall cpu events bytes
timed() {
  local name=$1 prog=$2; shift 2
  local t
  t=$( { TIMEFORMAT='%R %U %S'; time (stdin_of "$prog" | "$@" >/dev/null 2>"$out/last-stderr"); } 2>&1 | tail -1) ||
    { echo "failed: $* ($(tail -1 "$out/last-stderr"))" >&2; return 0; }
  wall[$name]+="$(echo "$t" | awk '{print $1}') "
  cpu[$name]+="$(echo "$t" | awk '{print $2 + $3}') "
}

IFS=, read -r -a programs <<< "$PROGRAMS"
for p in "${programs[@]}"; do
  for b in plain "${builds[@]}"; do
    echo "building $p ($b) ..." >&2
    "build_$p" "$b"
  done
done

have_uftrace=$(command -v uftrace >/dev/null && echo 1 || true)
for round in $(seq "$RUNS"); do
  echo "round $round/$RUNS ..." >&2
  for p in "${programs[@]}"; do
    # shellcheck disable=SC2046
    timed "$p/plain" "$p" $(workload "$p" plain)
    for b in "${builds[@]}"; do
      # shellcheck disable=SC2046
      timed "$p/$b/ft" "$p" "$ft" record -o "$out/$p-$b.data" -- $(workload "$p" "$b")
      if [ -n "$have_uftrace" ] && [ "$b" != xray ]; then
        patch=(); [ "$b" = nop ] && patch=(-P .)
        # shellcheck disable=SC2046
        timed "$p/$b/uf" "$p" uftrace record --no-libcall "${patch[@]}" -d "$out/$p-$b.uftrace" \
          $(workload "$p" "$b")
      fi
    done
  done
done

echo
echo "median of $RUNS rounds (best: each variant's fastest round against the plain build's), $(nproc) CPUs," \
  "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-8s %-7s %10s %9s %9s %8s %8s %9s %9s %9s %8s %8s\n' program build calls "ft wall" "ft cpu" \
  "(best)" "B/event" "uf wall" "uf cpu" "(best)" "uf/ft" "(best)"
best() { sort -n | head -1; }
for p in "${programs[@]}"; do
  base_w=$(printf '%s\n' ${wall[$p/plain]} | median)
  base_c=$(printf '%s\n' ${cpu[$p/plain]} | median)
  best_c=$(printf '%s\n' ${cpu[$p/plain]} | best)
  for b in "${builds[@]}"; do
    info=$("$ft" info --json -i "$out/$p-$b.data" 2>/dev/null)
    n=$(echo "$info" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(sum(t["entries"] for t in d["threads"]))')
    bpe=$(echo "$info" | python3 -c 'import json,sys; print("%.2f" % json.load(sys.stdin)["bytes_per_event"])')
    # per SAMPLES BASE [STAT]: ns per call of the samples' STAT (median) above BASE.
    per() { echo "scale=1; ($(printf '%s\n' $1 | ${3:-median}) - $2) * 1000000000 / $n" | bc; }
    fw=$(per "${wall[$p/$b/ft]}" "$base_w")
    fc=$(per "${cpu[$p/$b/ft]}" "$base_c")
    fb=$(per "${cpu[$p/$b/ft]}" "$best_c" best)
    uw=-; uc=-; ub=-; ratio=-; ratio_b=-
    if [ -n "${cpu[$p/$b/uf]:-}" ]; then
      uw=$(per "${wall[$p/$b/uf]}" "$base_w")
      uc=$(per "${cpu[$p/$b/uf]}" "$base_c")
      ub=$(per "${cpu[$p/$b/uf]}" "$best_c" best)
      ratio=$(echo "scale=2; $uc / $fc" | bc)x
      ratio_b=$(echo "scale=2; $ub / $fb" | bc)x
    fi
    printf '%-8s %-7s %10s %9s %9s %8s %8s %9s %9s %9s %8s %8s\n' "$p" "$b" "$n" "$fw" "$fc" "$fb" "$bpe" \
      "$uw" "$uc" "$ub" "$ratio" "$ratio_b"
  done
done

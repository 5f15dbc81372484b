#!/usr/bin/env bash
# What the preload library costs a program whose allocations are not recorded (issue 21 item 1): the
# program alone against the program under libferrotrace_preload.so as `ferrotrace record -P '^main$'`
# runs it without --alloc (the runtime started, main's sleds patched, the trace written at exit), and,
# for comparison, the same with libferrotrace_alloc.so in front of it (the malloc family interposed but
# not recording: what every run without --alloc paid while the preload library exported malloc itself),
# and the program with one more thread that only sleeps (a 10-line preloaded library): the collector
# thread makes the process multi-threaded, after which glibc's malloc takes its arena lock for every
# block that misses the thread cache (and stdio its locks), which no hook of ours causes.
# The variants run interleaved, round after round; medians.
#
# Programs, both built with clang-16 -fxray-instrument (sleds everywhere, only main's patched):
#   allocs loop N   testprogs/c/allocs.c: N × { p = malloc(64); free(p); }; besides the process's times,
#                   the loop's own thread CPU time per pair (what the interposition costs per call)
#   lua alloc.lua   Lua 5.4 making and dropping tables and strings (its collector frees them); only with
#                   LUA_SRC=the upstream sources, a directory or the .tar.gz (Debian: add a deb-src line,
#                   `apt-get source lua5.4`, use lua5.4_*.orig.tar.gz); skipped without
# Prints wall and CPU (user + sys, every thread) milliseconds per variant and their ratio to untraced.
# Usage: bench/untouched.sh [ROUNDS=11] (N=20000000, LUA_N=2000000, LUA_SRC=...)
set -euo pipefail
ROUNDS=${1:-11}
N=${N:-20000000}
LUA_N=${LUA_N:-2000000}
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/bench/fib.sh" # setup_release, median, field
setup_release untouched
rel="$root/target/release"
xray=(-O2 -g -fno-omit-frame-pointer -fxray-instrument -fxray-instruction-threshold=1)
clang-16 "${xray[@]}" -pthread -o "$out/allocs" testprogs/c/allocs.c
cat >"$out/sleeper.c" <<'EOF'
#include <pthread.h>
#include <unistd.h>
static void *sleep_forever(void *arg) { for (;;) pause(); return arg; }
__attribute__((constructor)) static void start(void) {
    pthread_t t;
    pthread_create(&t, 0, sleep_forever, 0);
}
EOF
gcc -O2 -shared -fPIC -pthread -o "$out/libsleeper.so" "$out/sleeper.c"

programs=(allocs)
declare -A cmdline
cmdline[allocs]="$out/allocs loop $N"
if [ -n "${LUA_SRC:-}" ]; then
  if [ ! -x "$out/lua/src/lua" ]; then
    echo "building Lua from $LUA_SRC ..." >&2
    rm -rf "$out/lua" && mkdir -p "$out/lua"
    if [ -d "$LUA_SRC" ]; then cp -r "$LUA_SRC"/. "$out/lua"; else tar -xzf "$LUA_SRC" -C "$out/lua" --strip-components=1; fi
    make -s -C "$out/lua/src" linux CC="clang-16 -std=gnu99" MYCFLAGS="${xray[*]:1}" \
      MYLDFLAGS="-fxray-instrument" >/dev/null 2>&1
  fi
  cat >"$out/alloc.lua" <<'EOF'
-- Tables and strings made and dropped: the collector frees them.
local n = tonumber(arg[1])
local keep = {}
for i = 1, n do
  keep[i % 1024 + 1] = { i, tostring(i) .. "x", { i } }
end
print(#keep)
EOF
  programs+=(lua)
  cmdline[lua]="$out/lua/src/lua $out/alloc.lua $LUA_N"
else
  echo "LUA_SRC unset: Lua skipped" >&2
fi

# run NAME VARIANT: one run; appends "wall_ms cpu_ms ps_per_pair" to samples[NAME.VARIANT].
declare -A samples
run() {
  local name=$1 variant=$2 t pre=()
  case $variant in
    preload) pre=(env "LD_PRELOAD=$rel/libferrotrace_preload.so");;
    hooks) pre=(env "LD_PRELOAD=$rel/libferrotrace_alloc.so:$rel/libferrotrace_preload.so");;
    thread) pre=(env "LD_PRELOAD=$out/libsleeper.so");;
  esac
  [ "$variant" = untraced ] || [ "$variant" = thread ] || pre+=(FERROTRACE_RUNTIME=preload "FERROTRACE_OUTPUT=$out/$name.data"
    "FERROTRACE_PATCH=^main$" FERROTRACE_MODE=lossless)
  local TIMEFORMAT='%3R %3U %3S'
  # shellcheck disable=SC2086 # the command line splits into words
  t=$({ time "${pre[@]}" ${cmdline[$name]} >"$out/stdout" 2>/dev/null; } 2>&1)
  read -r wall user sys <<<"$t"
  local ps
  ps=$(field ps_per_pair <"$out/stdout")
  samples[$name.$variant]+="$(echo "$wall * 1000" | bc) $(echo "($user + $sys) * 1000" | bc) ${ps:-0};"
}
med() { # med NAME.VARIANT COLUMN
  tr ';' '\n' <<<"${samples[$1]}" | awk -v c="$2" 'NF {print $c}' | median
}
variants=(untraced preload hooks thread)
for round in $(seq "$ROUNDS"); do
  echo "round $round/$ROUNDS ..." >&2
  for name in "${programs[@]}"; do
    for v in "${variants[@]}"; do run "$name" "$v"; done
  done
done
echo
echo "$ROUNDS interleaved rounds, medians; preload = LD_PRELOAD=libferrotrace_preload.so, FERROTRACE_PATCH=^main\$, no --alloc"
printf '%-8s %-9s %10s %10s %8s %8s %10s\n' program variant "wall ms" "CPU ms" "wall/u" "CPU/u" "ns/pair"
for name in "${programs[@]}"; do
  uw=$(med "$name.untraced" 1) uc=$(med "$name.untraced" 2)
  for v in "${variants[@]}"; do
    w=$(med "$name.$v" 1) c=$(med "$name.$v" 2) p=$(med "$name.$v" 3)
    printf '%-8s %-9s %10.0f %10.0f %8.3f %8.3f %10s\n' "$name" "$v" "$w" "$c" \
      "$(echo "scale=4; $w / $uw" | bc)" "$(echo "scale=4; $c / $uc" | bc)" \
      "$([ "$name" = allocs ] && echo "scale=2; $p / 1000" | bc || echo -)"
  done
done

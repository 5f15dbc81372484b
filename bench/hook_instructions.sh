#!/usr/bin/env bash
# Instructions per traced call, counted by callgrind, on one real workload: the zstd CLI built by
# bench/real.sh (Debian's source; gcc -pg, -pg -mfentry, -pg -mnop-mcount, clang XRay) compressing
# 20 MB at -9 on 4 threads, under `ferrotrace record` and `uftrace record --no-libcall`.
# Instruction counts do not depend on the machine's load; they do not show the cost of mispredicted
# branches (a hooked function's `ret` into the return stub, the trampoline's jump back), cache misses
# or rdtsc's latency, which the timings of bench/real.sh include.
# Prints, per build and tracer, instructions per traced call:
#   entry, exit  ferrotrace's entry hook (`__fentry__`/`mcount` and the hook they jump to, or the XRay
#                entry trampoline) and exit path (return stub and trampoline, or the XRay exit);
#   hooks        uftrace: everything in libmcount's own code (its hooks, the return trampoline and
#                what they call within libmcount);
#   threads      all the tracer adds on the program's threads: their instructions outside the program's
#                own code, less those of the untraced plain build (the C library's share of the work);
#                the slow paths, libc calls made by the tracer (uftrace's clock_gettime,
#                pthread_getspecific) and start-up included;
#   recorder     the tracer's other threads and processes: ferrotrace's collector thread and CLI,
#                uftrace's recorder process;
#   total        threads + recorder.
# Usage: bench/hook_instructions.sh [BUILDS=pg,fentry,nop,xray]. Needs the zstd builds of bench/real.sh
# (in bench/out/real; REAL_OUT=DIR to use another run's) and valgrind. FERROTRACE_PRELOAD=SO compares
# another build of the preload runtime.
set -euo pipefail
BUILDS=${1:-pg,fentry,nop,xray}
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/bench/fib.sh"
real=${REAL_OUT:-$root/bench/out/real}
setup_release hook-instructions
for b in plain ${BUILDS//,/ }; do
  [ -x "$real/zstd-$b" ] || { echo "no $real/zstd-$b: run bench/real.sh zstd first (or set REAL_OUT)" >&2; exit 1; }
done
[ -f "$real/zstd-input" ] || { echo "no $real/zstd-input: run bench/real.sh zstd first" >&2; exit 1; }
command -v valgrind >/dev/null || { echo "valgrind is not installed" >&2; exit 1; }
have_uftrace=$(command -v uftrace >/dev/null && echo 1 || true)
self="python3 $root/bench/callgrind_self.py"
rm -rf "$out/cg" && mkdir -p "$out/cg"

# grind NAME CMD...: callgrind over CMD and its children, one output file per process and thread.
grind() {
  local name=$1; shift
  valgrind --tool=callgrind --separate-threads=yes --trace-children=yes \
    --callgrind-out-file="$out/cg/$name.%p" "$@" >/dev/null 2>"$out/cg/$name.log" ||
    { echo "failed: $* (see $out/cg/$name.log)" >&2; exit 1; }
}
# files NAME zstd|other: NAME's per-thread files of the zstd process, or of the other processes.
files() {
  local f
  for f in "$out/cg/$1".*-*; do
    if grep -q -m1 "^cmd: *[^ ]*/zstd-[a-z]* " "$f"; then [ "$2" = zstd ] && echo "$f"; else [ "$2" = other ] && echo "$f"; fi
  done
}
# ir REGEX FILES...: Ir of the object/function lines (object TAB function) matching REGEX.
ir() {
  local re=$1; shift
  [ $# -gt 0 ] || { echo 0; return; }
  $self "$@" | awk -F"\t" -v re="$re" '($2 "\t" $3) ~ re {s += $1} END {printf "%.0f\n", s}'
}
zstd_args() { echo "-q -9 -T4 -f $real/zstd-input -o $out/zstd-out-$1.zst"; }

echo "callgrind: plain ..." >&2
# shellcheck disable=SC2046
grind plain "$real/zstd-plain" $(zstd_args plain)
mapfile -t plain_files < <(files plain zstd)
plain_outside=$(ir "^" "${plain_files[@]}")
plain_outside=$((plain_outside - $(ir "/zstd-plain\t" "${plain_files[@]}")))

# Callgrind names a function's recursive activations NAME'2; the return stubs' pages are object ???.
entry_re='libferrotrace_preload[^\t]*\t(ferrotrace_fentry_hook|ferrotrace_mcount_hook|__fentry__|_?mcount|ferrotrace_xray_entry|ferrotrace_xray_tail)('"'"'[0-9]+)?$'
exit_re='libferrotrace_preload[^\t]*\t(ferrotrace_mcount_return|ferrotrace_xray_exit)('"'"'[0-9]+)?$|^[?][?][?]\t'
printf '%-7s %-10s %10s %8s %8s %8s %8s %9s %8s\n' build tracer calls entry exit hooks threads recorder total
for b in ${BUILDS//,/ }; do
  echo "callgrind: $b ..." >&2
  # shellcheck disable=SC2046
  grind "ft-$b" "$ft" record -o "$out/zstd-$b.data" -- "$real/zstd-$b" $(zstd_args "$b")
  calls=$("$ft" info --json -i "$out/zstd-$b.data" |
    python3 -c 'import json,sys; print(sum(t["entries"] for t in json.load(sys.stdin)["threads"]))')
  # Threads of the zstd process: the program's, and the collector (the one running collector::run).
  prog=(); rec=()
  while read -r f; do
    if $self "$f" | grep 'collector::run' >/dev/null; then rec+=("$f"); else prog+=("$f"); fi
  done < <(files "ft-$b" zstd)
  mapfile -t -O "${#rec[@]}" rec < <(files "ft-$b" other)
  entry=$(ir "$entry_re" "${prog[@]}")
  exits=$(ir "$exit_re" "${prog[@]}")
  outside=$(( $(ir "^" "${prog[@]}") - $(ir "/zstd-$b\t" "${prog[@]}") - plain_outside ))
  recorder=$(ir "^" "${rec[@]}")
  awk -v b="$b" -v c="$calls" -v e="$entry" -v x="$exits" -v t="$outside" -v r="$recorder" 'BEGIN {
    printf "%-7s %-10s %10d %8.1f %8.1f %8s %8.1f %9.1f %8.1f\n", b, "ferrotrace", c, e/c, x/c, "-", t/c, r/c, (t+r)/c }'
  if [ -n "$have_uftrace" ] && [ "$b" != xray ]; then
    patch=(); [ "$b" = nop ] && patch=(-P .)
    rm -rf "$out/zstd-$b.uftrace"
    # shellcheck disable=SC2046
    grind "uf-$b" uftrace record --no-libcall "${patch[@]}" -d "$out/zstd-$b.uftrace" "$real/zstd-$b" $(zstd_args "$b")
    mapfile -t prog < <(files "uf-$b" zstd)
    mapfile -t rec < <(files "uf-$b" other)
    hooks=$(ir "/libmcount[^/]*\.so\t" "${prog[@]}")
    outside=$(( $(ir "^" "${prog[@]}") - $(ir "/zstd-$b\t" "${prog[@]}") - plain_outside ))
    recorder=$(ir "^" "${rec[@]}")
    awk -v b="$b" -v c="$calls" -v h="$hooks" -v t="$outside" -v r="$recorder" 'BEGIN {
      printf "%-7s %-10s %10d %8s %8s %8.1f %8.1f %9.1f %8.1f\n", b, "uftrace", c, "-", "-", h/c, t/c, r/c, (t+r)/c }'
    rm -rf "$out/zstd-$b.uftrace"
  fi
  rm -f "$out/zstd-$b.data"
done
rm -f "$out"/zstd-out-*.zst

#!/usr/bin/env bash
# What recording two integer arguments (and the return value) costs per call (issue 38 item 1, target
# at most +5 ns over a call recorded without them), against uftrace record -A, every variant in one
# run, interleaved round after round (medians):
#   C fib (testprogs/c/mcwork.c, gcc -O2 -pg): the uninstrumented build; ferrotrace record; with
#   -A 'fib@arg1,arg2'; with -A and -R 'fib@retval'; uftrace record, with -A, with -A and -R.
#   Rust fib (XRay sleds): ferrotrace record, with -A 'fib::fib$@arg1,arg2', with -A and -R.
# Prints ns per call, overhead per call, the ratio of uftrace's overhead to ferrotrace's with the
# same options, and, robust to the machine's load, callgrind's instructions per call of the C fib
# under ferrotrace (the hook, return trampoline and everything else the thread runs) without and
# with -A and -R.
# Usage: bench/args.sh [N=27] (RUNS=7 rounds; CALLGRIND=0 leaves the instruction counts out)
set -euo pipefail
N=${1:-27}
RUNS=${RUNS:-7}
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/bench/fib.sh"
setup_fib_builds args
cflags="-O2 -fno-optimize-sibling-calls -pthread"
gcc $cflags -o "$out/c_plain" "$root/testprogs/c/mcwork.c"
gcc $cflags -pg -o "$out/c_pg" "$root/testprogs/c/mcwork.c"

A=(-A 'fib@arg1,arg2')
R=(-R 'fib@retval')
RA=(-A 'fib::fib$@arg1,arg2')
RR=(-R 'fib::fib$@retval')
declare -A samples ns calls
cd "$out"
rust="$out/xray/release/fib"
for round in $(seq "$RUNS"); do
  echo "round $round/$RUNS ..." >&2
  run c_plain "$out/c_plain" fib "$N"
  run c_ft "$ft" record -o "$out/c.data" -- "$out/c_pg" fib "$N"
  run c_ft_a "$ft" record "${A[@]}" -o "$out/c-a.data" -- "$out/c_pg" fib "$N"
  run c_ft_ar "$ft" record "${A[@]}" "${R[@]}" -o "$out/c-ar.data" -- "$out/c_pg" fib "$N"
  run c_uf uftrace record -d "$out/c.uftrace" "$out/c_pg" fib "$N"
  run c_uf_a uftrace record "${A[@]}" -d "$out/c-a.uftrace" "$out/c_pg" fib "$N"
  run c_uf_ar uftrace record "${A[@]}" "${R[@]}" -d "$out/c-ar.uftrace" "$out/c_pg" fib "$N"
  run r_plain "$out/plain/release/fib" "$N"
  run r_ft "$ft" record -o "$out/r.data" -- "$rust" "$N"
  run r_ft_a "$ft" record "${RA[@]}" -o "$out/r-a.data" -- "$rust" "$N"
  run r_ft_ar "$ft" record "${RA[@]}" "${RR[@]}" -o "$out/r-ar.data" -- "$rust" "$N"
done
for name in "${!samples[@]}"; do
  ns[$name]=$(printf '%s\n' ${samples[$name]} | median)
done
# per NAME: median ns per call.
per() { echo "scale=2; ${ns[$1]} / ${calls[$1]}" | bc; }

echo
echo "fib($N): ${calls[c_plain]} calls; median of $RUNS rounds, load $(cut -d' ' -f1-3 /proc/loadavg)"
ROW_WIDTH=44
printf '%-44s %12s %14s %16s\n' variant "ns/call" "overhead/call" "uftrace/this"
echo "C, gcc -O2 -pg:"
row c_plain c_plain "" "  uninstrumented build"
row c_ft c_plain c_uf "  ferrotrace record"
row c_ft_a c_plain c_uf_a "  ferrotrace record -A fib@arg1,arg2"
row c_ft_ar c_plain c_uf_ar "  ferrotrace record -A ... -R fib@retval"
row c_uf c_plain "" "  uftrace record"
row c_uf_a c_plain "" "  uftrace record -A fib@arg1,arg2"
row c_uf_ar c_plain "" "  uftrace record -A ... -R fib@retval"
echo "Rust, XRay sleds:"
row r_plain r_plain "" "  uninstrumented build"
row r_ft r_plain "" "  ferrotrace record"
row r_ft_a r_plain "" "  ferrotrace record -A 'fib::fib\$@arg1,arg2'"
row r_ft_ar r_plain "" "  ferrotrace record -A ... -R"
echo "what the values add per call (ns), over the same tracer without them:"
printf '  %-42s %8s\n' "ferrotrace, mcount, -A" "$(echo "$(per c_ft_a) - $(per c_ft)" | bc)"
printf '  %-42s %8s\n' "ferrotrace, mcount, -A -R" "$(echo "$(per c_ft_ar) - $(per c_ft)" | bc)"
printf '  %-42s %8s\n' "ferrotrace, XRay, -A" "$(echo "$(per r_ft_a) - $(per r_ft)" | bc)"
printf '  %-42s %8s\n' "ferrotrace, XRay, -A -R" "$(echo "$(per r_ft_ar) - $(per r_ft)" | bc)"
printf '  %-42s %8s\n' "uftrace, -A" "$(echo "$(per c_uf_a) - $(per c_uf)" | bc)"
printf '  %-42s %8s\n' "uftrace, -A -R" "$(echo "$(per c_uf_ar) - $(per c_uf)" | bc)"
echo "trace sizes (bytes):"
for f in c.data c-a.data c-ar.data r.data r-a.data r-ar.data; do
  printf '  %-16s %12s\n' "$f" "$(stat -c %s "$out/$f")"
done
for d in c.uftrace c-a.uftrace c-ar.uftrace; do printf '  %-16s %12s\n' "$d" "$(du -sb "$out/$d" | cut -f1)"; done

[ "${CALLGRIND:-1}" = 0 ] && exit 0
command -v valgrind >/dev/null || { echo "valgrind is not installed: no instruction counts" >&2; exit 0; }
# Instructions of the traced thread per call (the whole process's main thread: the hooks, the
# program, the slow paths), from callgrind's per-thread totals, over fib(20).
echo "callgrind, C fib(20), instructions of the program's thread per call:"
cg() {
  local name=$1; shift
  rm -f "$out/cg-$name".*
  valgrind --tool=callgrind --separate-threads=yes --trace-children=yes \
    --callgrind-out-file="$out/cg-$name.%p" "$@" >/dev/null 2>"$out/cg-$name.log"
  local f total
  for f in "$out/cg-$name".*-01; do
    grep -q -m1 "^cmd: .*c_pg\|^cmd: .*c_plain" "$f" && total=$(sed -n 's/^totals: *//p' "$f")
  done
  echo "$total"
}
base=$(cg plain "$out/c_plain" fib 20)
c20=21891
for v in "ft:" "ft_a:${A[*]}" "ft_ar:${A[*]} ${R[*]}"; do
  name=${v%%:*}
  IFS=' ' read -r -a opts <<<"${v#*:}"
  n=$(cg "$name" "$ft" record "${opts[@]}" -o "$out/cg.data" -- "$out/c_pg" fib 20)
  printf '  %-42s %8s\n' "ferrotrace record ${v#*:}" "$(echo "scale=1; ($n - $base) / $c20" | bc)"
done

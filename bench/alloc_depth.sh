#!/usr/bin/env bash
# Depth of allocation stacks on real programs, ferrotrace against heaptrack: the mean number of frames
# of each allocation's stack (bench/alloc_depth.py), and the share of allocations with at most 2;
# and the CPU time of the whole process tree (bench/treecpu.py; medians of RUNS interleaved rounds),
# untraced, under ferrotrace and under heaptrack, with heaptrack's overhead over ferrotrace's.
# ferrotrace: `record --alloc --no-functions`, counted on `flame --weight allocations --folded`
# (git, python3.11 and cc1 are Debian's, without debug information: one folded frame per return
# address; a program with debug information gets its inlined frames folded in too, which heaptrack's
# trace tree does not count); heaptrack: the trace-tree depth of each allocation in its data file.
# FERROTRACE_ALLOC_UNWIND=fp in the environment: ferrotrace walks frame pointers only.
# Programs: git log -n 50 (this repository), python3.11 (a JSON round trip), cc1 -O2 on allocs.c,
# and ripgrep if bench/ripgrep.sh built it (debug information: its depth counts inlined frames).
# Usage: bench/alloc_depth.sh (RUNS=3)
set -euo pipefail
RUNS=${RUNS:-3}
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/bench/fib.sh" # setup_release, median, field
setup_release alloc_depth
tree="$root/bench/treecpu.py"
depth="$root/bench/alloc_depth.py"
cc1=$(gcc -print-prog-name=cc1)
py='import json; d=[{"k%d" % i: [i, str(i), {"x": i * 1.5}]} for i in range(20000)]; assert json.loads(json.dumps(d)) == d'
declare -A cmds=(
  [git]="git -C $root --no-pager log -n 50"
  [python3]="/usr/bin/python3.11 -c"
  [cc1]="$cc1 -quiet -O2 -imultiarch x86_64-linux-gnu $root/testprogs/c/allocs.c -o $out/allocs.s"
)
programs=(git python3 cc1)
# ripgrep with frame pointers (bench/ripgrep.sh's XRay build), when built: __alloc_dir's stacks.
rg=${RG_DIR:-/tmp/ferrotrace-bench/ripgrep}/xray/bin/rg
if [ -x "$rg" ]; then
  cmds[rg]="$rg -j1 -c malloc $root/crates"
  programs+=(rg)
fi
cd "$out"
declare -A t
tree_ms() { python3 "$tree" "$@" 2>/dev/null | tail -1 | sed 's/tree_us=//'; }
label="ferrotrace${FERROTRACE_ALLOC_UNWIND:+ ($FERROTRACE_ALLOC_UNWIND)}"
printf '%-8s %-18s %11s %7s %6s %9s %9s\n' program tracer allocations depth "<=2" "tree ms" "ht/this"
for p in "${programs[@]}"; do
  # shellcheck disable=SC2206
  cmd=(${cmds[$p]})
  [ "$p" = python3 ] && cmd+=("$py")
  t=([untraced]="" [ft]="" [ht]="")
  for round in $(seq "$RUNS"); do
    t[untraced]+="$(tree_ms "${cmd[@]}") "
    rm -f "$out/$p.data"*
    t[ft]+="$(tree_ms "$ft" record --alloc --no-functions -o "$out/$p.data" -- "${cmd[@]}") "
    rm -f "$out"/heaptrack."$p".*
    t[ht]+="$(tree_ms heaptrack -o "$out/heaptrack.$p" "${cmd[@]}") "
  done
  for k in untraced ft ht; do
    t[$k]=$(printf '%s\n' ${t[$k]} | median)
  done
  ratio=$(echo "scale=1; (${t[ht]} - ${t[untraced]}) / (${t[ft]} - ${t[untraced]})" | bc)
  "$ft" flame --weight allocations --folded -i "$out/$p.data" >"$out/$p.folded"
  printf '%-8s %-18s %11s %7s %6s %9s\n' "$p" untraced "" "" "" "$((${t[untraced]%.*} / 1000))"
  read -r n d s < <(python3 "$depth" folded "$out/$p.folded")
  printf '%-8s %-18s %11s %7s %6s %9s %9s\n' "$p" "$label" "$n" "$d" "$s" "$((${t[ft]%.*} / 1000))" "$ratio"
  read -r n d s < <(python3 "$depth" heaptrack "$out/heaptrack.$p.zst")
  printf '%-8s %-18s %11s %7s %6s %9s\n' "$p" heaptrack "$n" "$d" "$s" "$((${t[ht]%.*} / 1000))"
done

#!/usr/bin/env bash
# Depth of allocation stacks on real programs, ferrotrace against heaptrack: the mean number of frames
# of each allocation's stack (bench/alloc_depth.py), and the share of allocations with at most 2.
# ferrotrace: `record --alloc --no-functions`, counted on `flame --weight allocations --folded`
# (these Debian binaries carry no debug information: one folded frame per return address);
# heaptrack: the trace-tree depth of each allocation in its data file. Also prints both's tree CPU
# time (bench/treecpu.py). FERROTRACE_ALLOC_UNWIND=fp in the environment: the frame-pointer walk.
# Programs: git log -n 50 (this repository), python3.11 (a JSON round trip), cc1 -O2 on allocs.c.
# Usage: bench/alloc_depth.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/bench/fib.sh" # setup_release
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
cd "$out"
printf '%-8s %-28s %10s %8s %8s %10s\n' program tracer allocations depth "<=2" "tree ms"
for p in git python3 cc1; do
  # shellcheck disable=SC2206
  cmd=(${cmds[$p]})
  [ "$p" = python3 ] && cmd+=("$py")
  t=$(python3 "$tree" "$ft" record --alloc --no-functions -o "$out/$p.data" -- "${cmd[@]}" 2>/dev/null >"$out/$p.out"; tail -1 "$out/$p.out")
  "$ft" flame --weight allocations --folded -i "$out/$p.data" >"$out/$p.folded"
  read -r n d s < <(python3 "$depth" folded "$out/$p.folded")
  label="ferrotrace${FERROTRACE_ALLOC_UNWIND:+ ($FERROTRACE_ALLOC_UNWIND)}"
  printf '%-8s %-28s %10s %8s %8s %10s\n' "$p" "$label" "$n" "$d" "$s" "$(( ${t#tree_us=} / 1000 ))"
  rm -f "$out"/heaptrack.*
  t=$(python3 "$tree" heaptrack -o "$out/heaptrack.$p" "${cmd[@]}" 2>/dev/null >"$out/$p.ht.out"; tail -1 "$out/$p.ht.out")
  read -r n d s < <(python3 "$depth" heaptrack "$out/heaptrack.$p.zst")
  printf '%-8s %-28s %10s %8s %8s %10s\n' "$p" heaptrack "$n" "$d" "$s" "$(( ${t#tree_us=} / 1000 ))"
done

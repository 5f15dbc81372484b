#!/usr/bin/env bash
# What attaching again and again leaves in a process (`ferrotrace record -p`): testprogs' line_server
# (XRay build) is recorded CYCLES times in a row (`record -p PID -F handle --duration 0.2s`, three
# requests answered during each), and its resident memory, heap, mappings and descriptors are printed
# after the first, the second and the last cycle, with the growth per cycle from the second on (the
# first loads the preload library and maps what stays: its code, its static TLS, the stub pages, the
# pool's address range). There is no peer to compare with: no other function tracer attaches.
# Usage: bench/attach_cycles.sh [CYCLES=20] (needs nightly)
set -euo pipefail
CYCLES=${1:-20}
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/bench/fib.sh" # setup_release
setup_release attach_cycles
export FERROTRACE_PRELOAD=$root/target/release/libferrotrace_preload.so
(cd testprogs && CARGO_TARGET_DIR="$out/xray" RUSTFLAGS="-Zinstrument-xray=always -Cforce-frame-pointers=yes" \
  cargo +nightly build --release -q --bin line_server)
"$out/xray/release/line_server" >"$out/port" &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
while ! grep -q port= "$out/port" 2>/dev/null; do sleep 0.05; done
port=$(cut -d= -f2 "$out/port")
# footprint: RSS (KiB), heap RSS (KiB), mappings, descriptors of the server.
footprint() {
  echo "$(awk '/VmRSS/{print $2}' /proc/$pid/status) \
$(awk '/^[0-9a-f]+-/{h=($6=="[heap]")} /^Rss:/{if(h)s+=$2} END{print s+0}' /proc/$pid/smaps) \
$(wc -l </proc/$pid/maps) $(ls /proc/$pid/fd | wc -l)"
}
before=$(footprint)
for i in $(seq "$CYCLES"); do
  rm -f "$out/record.err"
  "$ft" record -p "$pid" -F handle --duration 0.2s -o "$out/t.data" 2>"$out/record.err" &
  rec=$!
  while ! grep -q "recording process" "$out/record.err" 2>/dev/null; do sleep 0.01; done
  for q in 1 2 3; do
    exec 3<>/dev/tcp/127.0.0.1/"$port"; echo "q $q" >&3; read -r _ <&3; exec 3>&-
  done
  wait $rec
  [ "$i" -eq 1 ] && first=$(footprint)
  [ "$i" -eq 2 ] && second=$(footprint)
done
last=$(footprint)
printf '%-22s %10s %10s %6s %4s\n' "" "RSS KiB" "heap KiB" "maps" "fds"
printf '%-22s %10s %10s %6s %4s\n' "before" $before
printf '%-22s %10s %10s %6s %4s\n' "after cycle 1" $first
printf '%-22s %10s %10s %6s %4s\n' "after cycle 2" $second
printf '%-22s %10s %10s %6s %4s\n' "after cycle $CYCLES" $last
read -r r2 h2 m2 f2 <<<"$second"
read -r rn hn mn fn <<<"$last"
n=$((CYCLES - 2))
echo "per cycle after the second: RSS $(echo "scale=1; ($rn - $r2) / $n" | bc) KiB, heap $(echo "scale=1; ($hn - $h2) / $n" | bc) KiB, mappings $(echo "scale=2; ($mn - $m2) / $n" | bc), descriptors $(echo "scale=2; ($fn - $f2) / $n" | bc)"

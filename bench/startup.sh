#!/usr/bin/env bash
# Start-up on a big binary: `ferrotrace record -- rg --version` against `uftrace record rg --version`,
# ripgrep built from crates.io with XRay sleds (ferrotrace) and with mcount calls (uftrace), side by side
# in one hyperfine run (interleaving is not offered by hyperfine: each command runs RUNS times in turn,
# after WARMUP runs). Not a test: prints hyperfine's table for docs/performance.md.
# Usage: bench/startup.sh   (RUNS=30 WARMUP=3; needs nightly, uftrace, hyperfine)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/ripgrep.sh
RUNS=${RUNS:-30}
WARMUP=${WARMUP:-3}
OUT=${BENCH_DIR:-/tmp/ferrotrace-bench}
mkdir -p "$OUT"
build_rg_all
cargo build --release -j2 -q -p ferrotrace-cli -p ferrotrace-preload
FT=$PWD/target/release/ferrotrace
export FERROTRACE_PRELOAD=$PWD/target/release/libferrotrace_preload.so
RX=$RG_DIR/xray/bin/rg
RM=$RG_DIR/mcount/bin/rg
echo "ripgrep $RG_VERSION: XRay build $(stat -c %s "$RX") bytes, $($FT list --functions "$RX" | head -1)"
cd "$OUT"
hyperfine -N -w "$WARMUP" -r "$RUNS" --export-markdown "$OUT/startup.md" \
  -n "rg --version (XRay build, untraced)" "$RX --version" \
  -n "ferrotrace record (every function)" "$FT record -o $OUT/rg.data -- $RX --version" \
  -n "ferrotrace record -N . (nothing selected)" "$FT record -N . -o $OUT/rg-none.data -- $RX --version" \
  -n "ferrotrace record -F nothing_matches" "$FT record -F nothing_matches -o $OUT/rg-nomatch.data -- $RX --version" \
  -n "ferrotrace record -F '^grep_cli::'" "$FT record -F ^grep_cli:: -o $OUT/rg-cli.data -- $RX --version" \
  -n "rg --version (mcount build, untraced)" "$RM --version" \
  -n "uftrace record" "uftrace record -d $OUT/rg.uftrace $RM --version" \
  >/dev/null
cat "$OUT/startup.md"

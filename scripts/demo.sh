#!/usr/bin/env bash
# The main job: builds ferrotrace, traces the bundled example program (examples/wordfreq, four threads)
# with `cargo ferrotrace record`, and shows what the trace holds.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
echo "demo: building ferrotrace (release) ..." >&2
cargo build --release -q --workspace
export PATH="$root/target/release:$PATH"
cd examples/wordfreq
cargo ferrotrace record --release -o "$root/target/wordfreq.data"
echo
ferrotrace info -i "$root/target/wordfreq.data"

#!/usr/bin/env bash
# The main job: builds ferrotrace, traces the bundled example program (examples/wordfreq, four threads)
# with `cargo ferrotrace record`, and shows what the trace holds, its report and the start of its
# replay; writes a flame graph and a Perfetto file next to the trace.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
echo "demo: building ferrotrace (release) ..." >&2
cargo build --release -q --workspace
export PATH="$root/target/release:$PATH"
cd examples/wordfreq
cargo ferrotrace record --release -F "^wordfreq::" -o "$root/target/wordfreq.data"
trace="$root/target/wordfreq.data"
echo; echo "== ferrotrace info"
ferrotrace info -i "$trace"
echo; echo "== ferrotrace report (top 15 by total time)"
ferrotrace report -i "$trace" | head -17
echo; echo "== ferrotrace replay -D 4 (first 25 lines)"
ferrotrace replay -i "$trace" -D 4 | head -25
ferrotrace flame -i "$trace" -o "$root/target/wordfreq.svg"
ferrotrace dump -i "$trace" --format perfetto -o "$root/target/wordfreq.perfetto"
echo "open $root/target/wordfreq.perfetto in ui.perfetto.dev, $root/target/wordfreq.svg in a browser"

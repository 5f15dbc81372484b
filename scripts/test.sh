#!/usr/bin/env bash
# The README's test command: `cargo test --workspace` (or `cargo test ARGS` when given arguments, as
# `bash scripts/test.sh -p ferrotrace-core`), which also times
# every test binary and, at the end, prints the slowest binaries, the tests libtest flagged as running
# over 60 s, and one closing line with the totals of every `test result:` line.
#
# Per-test times need libtest's unstable --report-time, so the unit here is the test binary: cargo runs
# each one through scripts/timed-test-binary.sh (a target runner), which appends "SECONDS NAME" to a file.
set -uo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export FERROTRACE_TEST_TIMES="$work/times"
export CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER="$PWD/scripts/timed-test-binary.sh"
start=$SECONDS
if [ $# -eq 0 ]; then set -- --workspace; fi
cargo test "$@" 2>&1 | tee "$work/log"
status=${PIPESTATUS[0]}
echo
echo "slowest test binaries (wall seconds; $((SECONDS - start)) s for the whole run):"
# Doc tests run one binary each, all named rust_out: summed as one line.
awk '{ t[$2] += $1; n[$2]++ } END { for (b in t) printf "%.1f %s\n", t[b], (b == "rust_out" ? n[b] " doc tests" : b) }' \
  "$work/times" 2>/dev/null | sort -rn | head -n 10 | awk '{ s = $1; $1 = ""; printf "  %8.1f %s\n", s, $0 }'
slow=$(grep -o 'test [^ ]* has been running for over 60 seconds' "$work/log" | awk '{ print "  " $2 }' | sort -u)
if [ -n "$slow" ]; then
  echo "tests that ran over 60 s:"
  echo "$slow"
fi
# Sums "test result: ok. 12 passed; 0 failed; ..." over every binary, doc tests included.
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i) ~ /^passed;?$/) p += $(i-1); if ($(i) ~ /^failed;?$/) f += $(i-1) } }
     END { printf "tests: %d passed, %d failed\n", p, f }' "$work/log"
exit "$status"

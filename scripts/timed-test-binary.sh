#!/usr/bin/env bash
# Cargo's target runner for scripts/test.sh: runs one test binary as it is and appends its wall time
# and name (the file name without cargo's hash) to $FERROTRACE_TEST_TIMES.
start=$EPOCHREALTIME
"$@"
status=$?
if [ -n "${FERROTRACE_TEST_TIMES:-}" ]; then
  name=$(basename "$1")
  awk -v s="$start" -v e="$EPOCHREALTIME" -v n="${name%-*}" 'BEGIN { printf "%.1f %s\n", e - s, n }' >> "$FERROTRACE_TEST_TIMES"
fi
exit "$status"

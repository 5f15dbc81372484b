# Shared by the benchmarks in bench/ (sourced, not run): builds ferrotrace and testprogs' fib, and reads
# what fib prints.

# setup_release NAME: builds ferrotrace (release); sets $out (bench/out/NAME, created) and $ft (the
# ferrotrace binary); leaves the working directory at the repository's root.
setup_release() {
  local root
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  out="$root/bench/out/$1"
  mkdir -p "$out"
  cd "$root"
  echo "building (release) ..." >&2
  cargo build --release -q --workspace
  ft="$root/target/release/ferrotrace"
}

# setup_fib_builds NAME: setup_release NAME, and fib built three ways (uninstrumented, XRay sleds,
# mcount calls) under $out/{plain,xray,mcount}.
setup_fib_builds() {
  setup_release "$1"
  build_fib "$out/plain" "-Cforce-frame-pointers=yes"
  build_fib "$out/xray" "-Zinstrument-xray=always -Cforce-frame-pointers=yes"
  build_fib "$out/mcount" "-Zinstrument-mcount -Cforce-frame-pointers=yes"
}

# build_fib TARGET_DIR RUSTFLAGS: builds fib with nightly into TARGET_DIR (binary: TARGET_DIR/release/fib).
build_fib() {
  (cd "$(dirname "${BASH_SOURCE[0]}")/../testprogs" &&
    CARGO_TARGET_DIR="$1" RUSTFLAGS="$2" cargo +nightly build --release -q --bin fib)
}

# field NAME: the number after NAME= in fib's output line (stdin).
field() { sed -n "s/.*$1=\([0-9]*\).*/\1/p"; }

# median: of the numbers on stdin, one per line (the mean of the middle two for an even count).
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

# run NAME CMD...: runs CMD once, appends the elapsed_ns of its fib computation to NAME's samples and
# keeps its call count in calls[NAME] (the caller declares the associative arrays samples and calls).
# Benchmarks run their variants interleaved, round after round, so that a slow spell of this shared
# machine falls on all of them rather than on whichever was running.
run() {
  local name=$1; shift
  local line
  line=$("$@" 2>/dev/null | grep elapsed_ns=)
  samples[$name]+="$(echo "$line" | field elapsed_ns) "
  calls[$name]=$(echo "$line" | field calls)
}

# row VARIANT BASELINE UFTRACE_VARIANT LABEL: prints LABEL (ROW_WIDTH wide), ns per call of VARIANT, its
# overhead over BASELINE, and the ratio of UFTRACE_VARIANT's overhead to VARIANT's (from the medians in
# ns[] and the counts in calls[]).
row() {
  local v=$1 base=$2 uf=$3 label=$4
  [ -n "${ns[$v]:-}" ] || return 0
  local c=${calls[$v]} per over ratio="-"
  per=$(echo "scale=2; ${ns[$v]} / $c" | bc)
  over=$(echo "scale=2; (${ns[$v]} - ${ns[$base]}) / $c" | bc)
  if [ -n "$uf" ] && [ -n "${ns[$uf]:-}" ]; then
    ratio=$(echo "scale=1; (${ns[$uf]} - ${ns[$base]}) / (${ns[$v]} - ${ns[$base]} + 0.000001)" | bc)x
  fi
  printf "%-${ROW_WIDTH:-34}s %12s %14s %16s\n" "$label" "$per" "$over" "$ratio"
}

# Shared by bench/xray.sh and bench/preload-ab.sh (sourced, not run): builds testprogs' fib and reads
# what it prints.

# build_fib TARGET_DIR RUSTFLAGS: builds fib with nightly into TARGET_DIR (binary: TARGET_DIR/release/fib).
build_fib() {
  (cd "$(dirname "${BASH_SOURCE[0]}")/../testprogs" &&
    CARGO_TARGET_DIR="$1" RUSTFLAGS="$2" cargo +nightly build --release -q --bin fib)
}

# field NAME: the number after NAME= in fib's output line (stdin).
field() { sed -n "s/.*$1=\([0-9]*\).*/\1/p"; }

# median: of the numbers on stdin, one per line (the mean of the middle two for an even count).
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

# Shared by bench/startup.sh (sourced, not run): builds ripgrep from crates.io with XRay sleds (for
# ferrotrace) and with mcount calls (for uftrace), both with frame pointers and debug info, into
# $RG_DIR (default /tmp/ferrotrace-bench/ripgrep). Builds are kept: a second call costs nothing.

RG_DIR=${RG_DIR:-/tmp/ferrotrace-bench/ripgrep}
RG_VERSION=${RG_VERSION:-14.1.1}

# build_rg NAME RUSTFLAGS: installs ripgrep $RG_VERSION into $RG_DIR/NAME/bin/rg with nightly.
build_rg() {
  local root="$RG_DIR/$1"
  [ -x "$root/bin/rg" ] && return 0
  CARGO_TARGET_DIR="$RG_DIR/target-$1" RUSTFLAGS="$2" CARGO_PROFILE_RELEASE_DEBUG=true \
    cargo +nightly install -q --locked --root "$root" --version "$RG_VERSION" ripgrep
}

build_rg_all() {
  build_rg xray "-Zinstrument-xray=always -Cforce-frame-pointers=yes"
  build_rg mcount "-Zinstrument-mcount -Cforce-frame-pointers=yes"
}

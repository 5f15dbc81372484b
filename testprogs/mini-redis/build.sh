#!/usr/bin/env bash
# Builds mini-redis 0.4.1 (tokio's example Redis server and client, as published on crates.io) with the
# ferrotrace `tracing` layer added to its server's subscriber, and XRay sleds (nightly), so that under
# `ferrotrace record` its functions and its `tracing` spans and events interleave in one trace.
#
# The source is the published crate, fetched by cargo (testprogs/mini-redis/source, whose lock file
# pins its checksum) and unpacked into DEST; mini-redis.patch then moves it to tracing-subscriber 0.3
# and adds the layer to `src/bin/server.rs` (the only code change); Cargo.lock here pins the
# dependencies of the patched crate. DEST is kept between runs: an unchanged source and patch are not
# unpacked again, and cargo rebuilds only what changed.
#
# Usage: testprogs/mini-redis/build.sh [DEST]   (default testprogs/target/mini-redis-0.4.1; DEST must
# be three directories below the repository, as the patch's path to crates/ferrotrace-tracing is)
# Prints the directory of the two binaries, mini-redis-server and mini-redis-cli.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
DEST=${1:-$ROOT/testprogs/target/mini-redis-0.4.1}
CARGO_HOME=${CARGO_HOME:-$HOME/.cargo}

cargo fetch --quiet --locked --manifest-path "$HERE/source/Cargo.toml"
CRATE=$(ls "$CARGO_HOME"/registry/cache/*/mini-redis-0.4.1.crate | head -1)
STAMP="$(sha256sum "$CRATE" "$HERE/mini-redis.patch" "$HERE/Cargo.lock" | sha256sum | cut -c1-64)"
if [ "$(cat "$DEST/.ferrotrace-stamp" 2>/dev/null)" != "$STAMP" ]; then
    mkdir -p "$DEST"
    tar -xzf "$CRATE" -C "$DEST" --strip-components=1
    # The manifest as its authors wrote it (the published Cargo.toml is cargo's rewrite of it).
    cp "$DEST/Cargo.toml.orig" "$DEST/Cargo.toml"
    patch --quiet --forward -p1 -d "$DEST" <"$HERE/mini-redis.patch"
    cp "$HERE/Cargo.lock" "$DEST/Cargo.lock"
    echo "$STAMP" >"$DEST/.ferrotrace-stamp"
fi
# Cargo variables of an enclosing cargo (a test run) would point this build at the wrong toolchain.
unset RUSTC RUSTDOC RUSTC_WRAPPER RUSTFLAGS CARGO_ENCODED_RUSTFLAGS CARGO_TARGET_DIR CARGO
(cd "$DEST" && RUSTFLAGS="-Zinstrument-xray=always -Cforce-frame-pointers=yes" \
    rustup run nightly cargo build --release --quiet --locked --bins)
echo "$DEST/target/release"

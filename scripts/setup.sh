#!/usr/bin/env bash
# Installs what ferrotrace's tests, benchmarks and demo need on a Debian machine, and checks the
# toolchains. Uses sudo for apt-get when not run as root. Idempotent.
set -euo pipefail
as_root=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup: not root and no sudo: run this script as root" >&2; exit 1; }
  as_root=(sudo)
fi

packages=(gcc g++ uftrace clang-16 libelf-dev zlib1g-dev pkg-config make patch time libclang-rt-16-dev llvm protobuf-compiler linux-perf bpftrace valgrind hyperfine bc util-linux libc6-dbg strace chromium heaptrack python3-pip sqlite3 python3 golang-go)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  "${as_root[@]}" apt-get update -qq
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# Node and npm (for viewers the tests open): Debian's, unless a node is already installed.
if ! command -v npm >/dev/null; then
  "${as_root[@]}" apt-get update -qq
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
fi
# speedscope's web app, opened by tests/viewers.rs in headless Chromium.
tools=${FERROTRACE_TEST_TOOLS:-/usr/local/lib/ferrotrace-test-tools}
if [ ! -f "$tools/node_modules/speedscope/dist/release/index.html" ]; then
  echo "setup: installing speedscope into $tools" >&2
  "${as_root[@]}" npm install --no-audit --no-fund --prefix "$tools" speedscope@1.22.2 >/dev/null
fi
# DuckDB for Python: tests/exports.rs queries `dump --format parquet` datasets with it.
if ! python3 -c 'import duckdb' 2>/dev/null; then
  echo "setup: installing duckdb (pip)" >&2
  "${as_root[@]}" python3 -m pip install -q --break-system-packages duckdb \
    || "${as_root[@]}" python3 -m pip install -q duckdb
fi
# Spark (PySpark in local mode, on Debian's JDK 17): tests/spark.rs reads a continuous-profiling
# dataset with it. About 1.5 minutes and 500 MB (PySpark and its jars) the first time.
if ! dpkg-query -W -f='${Status}' openjdk-17-jre-headless 2>/dev/null | grep -q "install ok installed"; then
  echo "setup: installing openjdk-17-jre-headless" >&2
  "${as_root[@]}" apt-get update -qq
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless >/dev/null
fi
if ! python3 -c 'import pyspark' 2>/dev/null; then
  echo "setup: installing pyspark (pip)" >&2
  "${as_root[@]}" python3 -m pip install -q --break-system-packages pyspark \
    || "${as_root[@]}" python3 -m pip install -q pyspark
fi
# Perfetto's own protos for Python: tests/sample.rs decodes `dump --format perfetto` with them.
if ! python3 -c 'import perfetto.protos.perfetto.trace.perfetto_trace_pb2' 2>/dev/null; then
  echo "setup: installing perfetto (pip)" >&2
  "${as_root[@]}" python3 -m pip install -q --break-system-packages perfetto \
    || "${as_root[@]}" python3 -m pip install -q perfetto
fi
if ! rustup run nightly rustc --version >/dev/null 2>&1; then
  echo "setup: the nightly Rust toolchain is missing: it is needed to build instrumented programs" >&2
  echo "setup: (-Zinstrument-xray). Install it with: rustup toolchain install nightly" >&2
  exit 1
fi
# tracefs, for uprobes and kernel tracepoints (profile, the USDT tests): a fresh machine may not have it
# mounted; without it a test that adds a uprobe depends on which test happened to mount it first.
if [ ! -e /sys/kernel/tracing/uprobe_events ]; then
  "${as_root[@]}" mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null \
    || echo "setup: warning: cannot mount tracefs at /sys/kernel/tracing: uprobe and tracepoint tests will fail" >&2
fi
echo "setup: $(rustc --version); nightly: $(rustup run nightly rustc --version)" >&2

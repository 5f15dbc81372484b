#!/usr/bin/env bash
# Issue 41 item 1 at scale: root attaching (`record -p`, `live -p`) to a process of user `nobody` while
# nobody races it in the attach's private directory with testprogs/c/attach_racer.c, the racer of
# tests/security.rs (`root_attaching_to_a_user_s_process_never_goes_through_the_user_s_links`, which
# runs 21 attaches): links to root-only files put, as fast as it can, in the place of `error` (the
# refusal root prints), `control` and `live` (the FIFOs root used to chown by path). As in the test,
# the target is testprogs' linked_server (XRay build, the runtime linked) and `--trace 'no_such_*'`
# makes every attach end in a refusal that root reads from the directory. One attempt is one attach,
# record -p and live -p in turn. A win is root printing a root-only file, or one of them changed
# (owner, mode or contents; put back afterwards, so that each attempt is judged alone). Prints wins /
# attempts, and how often each line was said (digits as N): the racer's links show there as refusals.
# Usage: bench/attach_races.sh [ATTEMPTS=1000]   (as root: the racer and the target run as nobody)
set -euo pipefail
N=${1:-1000}
if [ "$(id -u)" -ne 0 ]; then
  echo "attach_races.sh: run as root (the racer and its target run as nobody, against root's attach)" >&2
  exit 1
fi
root=$(cd "$(dirname "$0")/.." && pwd)
cargo build -q -p ferrotrace-cli -p ferrotrace-preload --manifest-path "$root/Cargo.toml"
# The tests' build of testprogs (tests/common: nightly, XRay sleds), linked_server alone.
(cd "$root/testprogs" && RUSTFLAGS="-Zinstrument-xray=always -Cforce-frame-pointers=yes" \
  cargo +nightly build --release -q --bin linked_server)

work=$(mktemp -d)
chmod 755 "$work" # nobody enters it (its programs are here), and writes nowhere in it but below
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"' EXIT
tmp=$work/tmp # ferrotrace's TMPDIR, where it makes its private directories (root's, 0755 as in the test)
out=$work/nobody-s # where root's record -p writes, a directory of nobody's
mkdir -m 755 "$tmp" "$out"
chown 65534:65534 "$out"
secret() { echo "root's secret behind $1"; }
put_back() { # NAME: the root-only file as it was
  rm -f "$work/root-only-$1"
  secret "$1" >"$work/root-only-$1"
  chmod 600 "$work/root-only-$1"
}
for n in error control live; do put_back "$n"; done
# Copies: a build meanwhile does not change what runs (the library is looked for beside ferrotrace).
cp "$root/testprogs/target/release/linked_server" "$root/target/debug/ferrotrace" \
  "$root/target/debug/libferrotrace_preload.so" "$work/"
ft=$work/ferrotrace
gcc -O2 -o "$work/attach_racer" "$root/testprogs/c/attach_racer.c"
# Run with &: exec, so that the job ($!) is the program itself, not a subshell waiting for it.
as_nobody() { exec setpriv --reuid=65534 --regid=65534 --clear-groups -- "$@"; }

as_nobody "$work/linked_server" >"$work/server.out" &
pids+=($!)
server=$!
for _ in $(seq 100); do grep -q '^port=' "$work/server.out" && break; sleep 0.1; done
grep -q '^port=' "$work/server.out" || { echo "linked_server did not start" >&2; exit 1; }
as_nobody "$work/attach_racer" "$tmp" "$work/root-only-error" "$work/root-only-control" \
  "$work/root-only-live" &
pids+=($!)

wins=0
declare -A said_count
start=$(date +%s)
for i in $(seq "$N"); do
  if ((i % 2)); then
    said=$(TMPDIR=$tmp "$ft" record -p "$server" -o "$out/t$i.data" --trace 'no_such_*' 2>&1) || true
  else
    said=$(TMPDIR=$tmp "$ft" live -p "$server" --trace 'no_such_*' 2>&1) || true
  fi
  won=""
  [[ $said == *"root's secret"* ]] && won="printed a root-only file"
  for n in error control live; do
    f=$work/root-only-$n
    if [ "$(stat -c '%u %a %F' "$f")" != "0 600 regular file" ] || [ "$(cat "$f")" != "$(secret "$n")" ]; then
      won="$won; root-only-$n changed ($(stat -c '%u %a %F' "$f"))"
      put_back "$n"
    fi
  done
  if [ -n "$won" ]; then
    wins=$((wins + 1))
    echo "attempt $i: the racer won: $won" >&2
  fi
  key=$(printf '%s' "$said" | sed 's/[0-9][0-9]*/N/g' | tr '\n' '|')
  said_count[$key]=$((${said_count[$key]:-0} + 1))
done
echo "wins $wins / attempts $N ($(((N + 1) / 2)) record -p, $((N / 2)) live -p; $(($(date +%s) - start)) s)"
for key in "${!said_count[@]}"; do echo "${said_count[$key]}× $key"; done | sort -rn

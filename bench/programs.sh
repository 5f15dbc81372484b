# Real programs from Debian's sources, shared by the benchmarks in bench/ (sourced, not run): the
# source packages, the compilers' instrumentation flags, Lua 5.4 and its binary-trees workload.
# The sourcing script sets $src (where sources are unpacked) and $out (where builds go).

# The builds, by name: plain, pg, fentry, nop (patched at run time), xray.
declare -A cc_flags=(
  [plain]="gcc -O2 -fno-pie -no-pie"
  [pg]="gcc -O2 -pg"
  [fentry]="gcc -O2 -pg -mfentry"
  [nop]="gcc -O2 -pg -mnop-mcount -mrecord-mcount -fno-pie -no-pie"
  [xray]="clang-16 -O2 -fxray-instrument -fxray-instruction-threshold=1"
)

# fetch PACKAGE GLOB: unpacks Debian's (bookworm) source package into $src unless a directory matching
# GLOB exists there; prints that directory. Needs root the first time (deb-src, apt-get source).
fetch() {
  local dir
  dir=$(ls -d "$src"/$2 2>/dev/null | head -1 || true)
  if [ -z "$dir" ]; then
    if ! grep -rqs '^Types: deb-src' /etc/apt/sources.list.d/ /etc/apt/sources.list 2>/dev/null; then
      printf 'Types: deb-src\nURIs: http://deb.debian.org/debian\nSuites: bookworm\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
        > /etc/apt/sources.list.d/ferrotrace-bench-src.sources
      apt-get update -qq
    fi
    (cd "$src" && apt-get source -qq "$1" >/dev/null 2>&1)
    dir=$(ls -d "$src"/$2 | head -1)
  fi
  echo "$dir"
}

# build_lua BUILD: $out/lua-BUILD, the Lua 5.4 interpreter built with cc_flags[BUILD].
build_lua() {
  local d
  d=$(fetch lua5.4 'lua5.4-*')
  # Debian's patches include the header its packaging generates: the multiarch module paths.
  [ -f "$d/src/lua5.4-deb-multiarch.h" ] ||
    echo "#define DEB_HOST_MULTIARCH \"$(gcc -print-multiarch)\"" > "$d/src/lua5.4-deb-multiarch.h"
  # shellcheck disable=SC2046 # the compiler's words and the source files
  [ -x "$out/lua-$1" ] || ${cc_flags[$1]} -DLUA_USE_LINUX -I"$d/src" \
    $(ls "$d"/src/*.c | grep -v luac.c) -o "$out/lua-$1" -lm -ldl
}

# write_binarytrees FILE: the binary-trees workload (its depth is the script's argument).
write_binarytrees() {
  cat > "$1" <<'EOF'
-- The Computer Language Benchmarks Game's binary-trees, as Lua's own test suite has it.
local function BottomUpTree(depth)
  if depth > 0 then depth = depth - 1
    return { BottomUpTree(depth), BottomUpTree(depth) }
  else return {} end
end
local function ItemCheck(tree)
  if tree[1] then return 1 + ItemCheck(tree[1]) + ItemCheck(tree[2]) else return 1 end
end
local N = tonumber(arg and arg[1]) or 14
local maxdepth = math.max(6, N)
local check = 0
for depth = 4, maxdepth, 2 do
  local iterations = 2 ^ (maxdepth - depth + 4)
  for _ = 1, iterations do check = check + ItemCheck(BottomUpTree(depth)) end
end
print(check)
EOF
}

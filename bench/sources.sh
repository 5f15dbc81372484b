# Debian's source packages for the benches (bookworm), sourced by them: `fetch_source PACKAGE GLOB DIR`
# unpacks PACKAGE's sources into DIR (adding a deb-src entry once) unless a directory matching GLOB is
# there already, and prints that directory. Needs root for apt-get.
fetch_source() {
  local dir
  mkdir -p "$3"
  dir=$(ls -d "$3"/$2 2>/dev/null | head -1 || true)
  if [ -z "$dir" ]; then
    if ! grep -rqs '^Types: deb-src' /etc/apt/sources.list.d/ /etc/apt/sources.list 2>/dev/null; then
      printf 'Types: deb-src\nURIs: http://deb.debian.org/debian\nSuites: bookworm\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
        > /etc/apt/sources.list.d/ferrotrace-bench-src.sources
      apt-get update -qq
    fi
    (cd "$3" && apt-get source -qq "$1" >/dev/null 2>&1)
    dir=$(ls -d "$3"/$2 | head -1)
  fi
  echo "$dir"
}

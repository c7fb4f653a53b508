#!/usr/bin/env bash
# Install cargo-deb, the Cargo subcommand that builds tessera's Debian package, into a
# cache of its own (not ~/.cargo/bin), once; prints the directory holding `cargo-deb`.
#
# usage: scripts/install-cargo-deb.sh
#   TESSERA_CACHE chooses the cache (default ~/.cache/tessera).
set -euo pipefail
version="3.6.2"
cache="${TESSERA_CACHE:-$HOME/.cache/tessera}"
root="$cache/cargo-deb-$version"
if [ ! -x "$root/bin/cargo-deb" ]; then
  echo "installing cargo-deb $version into $root (a few minutes, once)..." >&2
  cargo install --quiet --locked --version "=$version" --root "$root" cargo-deb >&2
fi
echo "$root/bin"

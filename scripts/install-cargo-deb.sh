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
  echo "installing cargo-deb $version into $root: compiling it and its dependencies, about 100 crates, from crates.io (about 5 minutes on 2 cores, once)" >&2
  # not --quiet: cargo says what it downloads and compiles, crate by crate, and draws a
  # progress bar when stderr is a terminal
  cargo install --locked --version "=$version" --root "$root" cargo-deb >&2
fi
echo "$root/bin"

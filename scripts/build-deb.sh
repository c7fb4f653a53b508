#!/usr/bin/env bash
# Build tessera's Debian package with cargo-deb (installed by
# scripts/install-cargo-deb.sh): a release build of the command, the interposer and the
# C clients, then the package, whose contents crates/tessera/Cargo.toml lists under
# [package.metadata.deb]. Prints the .deb's path.
#
# usage: scripts/build-deb.sh [OUTPUT_DIR]
#   OUTPUT_DIR defaults to target/debian. CARGO_TARGET_DIR is honoured.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$root/target/debian}"
cargo_deb="$(bash "$root/scripts/install-cargo-deb.sh")/cargo-deb"
cd "$root"
echo "building tessera (release; 5-7 minutes from scratch on 2 cores)..." >&2
cargo build --release --quiet -p tessera -p tessera-cuda -p tessera-ledger -p tessera-client >&2
mkdir -p "$out"
"$cargo_deb" --package tessera --no-build --output "$out" --quiet

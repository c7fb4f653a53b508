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
# TESSERA_DEB_PROFILE=test packages the build `cargo test` makes (target/debug; only
# what it lacks is built): the test suite's check of the packaging itself, without a
# release build of its own. The default is a release build.
profile="${TESSERA_DEB_PROFILE:-release}"
if [ "$profile" = release ]; then
  echo "building tessera, its interposer and C libraries (cargo build --release; 5-7 minutes from scratch on 2 cores)" >&2
else
  echo "building what the $profile profile's build lacks of tessera, its interposer and C libraries" >&2
fi
# not --quiet: cargo says what it compiles, crate by crate, and draws a progress bar
# when stderr is a terminal
cargo build --profile "$profile" -p tessera -p tessera-cuda -p tessera-ledger -p tessera-client >&2
mkdir -p "$out"
# cargo-deb's own output stays quiet: its stdout is the .deb's path, which this
# script prints
echo "packaging them with cargo-deb into $out: stripped, their debug symbols in a separate tessera-dbgsym package (about 130 MB of binaries to strip and compress: under a minute)" >&2
# --dbgsym: the installed binaries are stripped (the interposer is loaded into every
# tenant process); their debug info goes into tessera-dbgsym_*.ddeb beside the .deb
# (cargo puts the test profile's build in target/debug, which cargo-deb calls dev's)
deb_profile="$profile"
[ "$profile" != test ] || deb_profile=dev
"$cargo_deb" --package tessera --profile "$deb_profile" --no-build --dbgsym --output "$out" --quiet

#!/usr/bin/env bash
# The kubelet's own .proto files that a registry carries, for the Kubernetes test's
# kubelet stand-in (crates/tessera/tests/k8s.rs; docs/kubernetes.md says what is
# tested against what): the device plugin API v1beta1 and plugin registration v1, as
# published in k8s.io/kubelet v0.21.0, copied verbatim into the `kubelet` crate
# 1.0.0-alpha.1 on crates.io (Apache-2.0). Its checksum is checked against the
# crates.io index's. No registry carries the pod resources v1 or DRA v1 files.
#
# usage: scripts/kubelet-protos.sh [CACHE_DIR]
#   CACHE_DIR defaults to $TESSERA_PYTHON_CACHE/kubelet-protos, else
#   ~/.cache/tessera/kubelet-protos
# Prints the directory holding deviceplugin/v1beta1/deviceplugin.proto and
# pluginregistration/v1/pluginregistration.proto.
set -euo pipefail
crate=kubelet
version=1.0.0-alpha.1
cache="${1:-${TESSERA_PYTHON_CACHE:-$HOME/.cache/tessera}/kubelet-protos}"
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if [ ! -f "$cache/.complete" ]; then
  echo "fetching the kubelet's .proto files from crates.io ($crate $version, about 100 kB)" >&2
  want=$(curl -sSf "https://index.crates.io/ku/be/$crate" \
    | python3 -c 'import json,sys; v=sys.argv[1]; print([d["cksum"] for d in map(json.loads, sys.stdin) if d["vers"]==v][0])' "$version")
  curl -sSfL -o "$cache/crate.tar.gz" "https://static.crates.io/crates/$crate/$crate-$version.crate"
  got=$(sha256sum "$cache/crate.tar.gz" | cut -d' ' -f1)
  if [ "$got" != "$want" ]; then
    echo "checksum mismatch for $crate $version: $got, the index says $want" >&2
    exit 1
  fi
  rm -rf "$cache/proto"
  tar -xzf "$cache/crate.tar.gz" -C "$cache" --strip-components=1 "$crate-$version/proto"
  rm "$cache/crate.tar.gz"
  touch "$cache/.complete"
fi
echo "$cache/proto"

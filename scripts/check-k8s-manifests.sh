#!/usr/bin/env bash
# Check tessera's Kubernetes manifests (deploy/kubernetes/ with its examples/ and dra/,
# or the files given) against Kubernetes' published OpenAPI schemas, strictly (an
# unknown field is an error), with PyPI's kubernetes-validate (installed into a cache by
# scripts/python-client.sh).
# usage: scripts/check-k8s-manifests.sh [KUBERNETES_VERSION [FILE...]]
#   KUBERNETES_VERSION defaults to 1.34.0 (the oldest release the DRA driver serves)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
version="${1:-1.34.0}"
shift || true
if [ $# -eq 0 ]; then
  set -- "$here"/../deploy/kubernetes/*.yaml "$here"/../deploy/kubernetes/examples/*.yaml \
    "$here"/../deploy/kubernetes/dra/*.yaml
fi
python=$(bash "$here/python-client.sh" kubernetes-validate)
exec "$(dirname "$python")/kubernetes-validate" --strict -k "$version" "$@"

#!/usr/bin/env bash
# Install numba-cuda — a real, third-party CUDA client: NVIDIA's Python CUDA target
# for numba, which loads the driver itself through cuda-bindings — into a virtual
# environment in a cache, for tessera's test that runs it under `tessera run`
# (crates/tessera/tests/numba_cuda.rs). Pinned, with its CUDA 12 extra (NVVM, NVRTC,
# nvJitLink and the runtime from PyPI; about 400 MB to download the first time).
#
# usage: scripts/fetch-numba-cuda.sh [CACHE_DIR]
#   CACHE_DIR defaults to $TESSERA_NUMBA_CACHE, else ~/.cache/tessera/numba-cuda-0.30.4
# Prints the environment's python. Safe to run concurrently (a lock) and again (does
# nothing when complete).
set -euo pipefail
version=0.30.4
cache="${1:-${TESSERA_NUMBA_CACHE:-$HOME/.cache/tessera/numba-cuda-$version}}"
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if [ ! -f "$cache/.complete" ]; then
  rm -rf "$cache/venv"
  python3 -m venv "$cache/venv" >&2
  "$cache/venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    "numba-cuda[cu12]==$version" >&2
  touch "$cache/.complete"
fi
echo "$cache/venv/bin/python"

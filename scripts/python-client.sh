#!/usr/bin/env bash
# Install a real, third-party Python CUDA client into a virtual environment in a cache,
# for tessera's tests that run it under `tessera run`:
#   numba-cuda  NVIDIA's Python CUDA target for numba, which loads the driver itself
#               through cuda-bindings (crates/tessera/tests/numba_cuda.rs); pinned, with
#               its CUDA 12 extra (NVVM, NVRTC, nvJitLink and the runtime from PyPI;
#               about 400 MB to download the first time);
#   pynvml      NVIDIA's NVML bindings (PyPI's nvidia-ml-py), which dlopen
#               libnvidia-ml.so.1 (crates/tessera/tests/pynvml.rs);
#   grpcio-tools  gRPC's Python code generator and runtime, from which the Kubernetes
#               test builds its kubelet stand-in from the kubelet's own .proto files
#               (crates/tessera/tests/k8s.rs; scripts/kubelet-protos.sh);
#   kubernetes-validate
#               checks manifests against Kubernetes' published OpenAPI schemas
#               (crates/tessera/tests/k8s_manifests.rs);
#   cuda-bindings12, cuda-bindings13
#               NVIDIA's Python driver API bindings alone (PyPI's cuda-bindings), the
#               newest of the 12.9 line and of 13.x: the layer numba-cuda loads the
#               driver through, whose 13.x asks the driver for CUDA 13 entry points
#               (crates/tessera/tests/cuda_bindings.rs).
#
# usage: scripts/python-client.sh numba-cuda|pynvml|grpcio-tools|kubernetes-validate|cuda-bindings12|cuda-bindings13 [CACHE_DIR]
#   CACHE_DIR defaults to $TESSERA_PYTHON_CACHE/<client>-<version>, else
#   ~/.cache/tessera/<client>-<version>
# Prints the environment's python. Safe to run concurrently (a lock) and again (does
# nothing when complete). The first time, says on stderr what it installs, how much,
# and pip's progress.
set -euo pipefail
# size: what the first install downloads (the wheels, roughly), for the line that says
# what it does
case "${1:-}" in
  numba-cuda) version=0.30.4; spec="numba-cuda[cu12]==$version"; size="about 400 MB, 5 minutes or more" ;;
  pynvml) version=12.575.51; spec="nvidia-ml-py==$version"; size="under 1 MB" ;;
  grpcio-tools) version=1.85.1; spec="grpcio-tools==$version"; size="about 10 MB" ;;
  kubernetes-validate) version=1.37.0; spec="kubernetes-validate==$version"; size="about 30 MB" ;;
  cuda-bindings12) version=12.9.10; spec="cuda-bindings==$version"; size="about 15 MB" ;;
  cuda-bindings13) version=13.5.0; spec="cuda-bindings==$version"; size="about 15 MB" ;;
  *) echo "usage: $0 numba-cuda|pynvml|grpcio-tools|kubernetes-validate|cuda-bindings12|cuda-bindings13 [CACHE_DIR]" >&2; exit 64 ;;
esac
cache="${2:-${TESSERA_PYTHON_CACHE:-$HOME/.cache/tessera}/$1-$version}"
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if [ ! -f "$cache/.complete" ]; then
  echo "installing $spec from PyPI ($size) into $cache/venv" >&2
  rm -rf "$cache/venv"
  python3 -m venv "$cache/venv" >&2
  # not --quiet: pip says what it collects and downloads, each wheel with its size, and
  # draws a progress bar while it downloads when stderr is a terminal
  "$cache/venv/bin/python" -m pip install --disable-pip-version-check "$spec" >&2
  touch "$cache/.complete"
fi
echo "$cache/venv/bin/python"

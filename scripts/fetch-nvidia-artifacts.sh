#!/usr/bin/env bash
# Fetch NVIDIA's published CUDA 12.9 artefacts that tessera's tests check against —
# the driver API header (cuda.h), the CUDA runtime (libcudart.so.12), the PTX
# assembler (ptxas) and the NVML header (nvml.h) — from PyPI's nvidia-cuda-runtime-cu12,
# nvidia-cuda-nvcc-cu12 and nvidia-nvml-dev-cu12 wheels, into a cache. No GPU and no CUDA installation are needed.
#
# usage: scripts/fetch-nvidia-artifacts.sh [CACHE_DIR]
#   CACHE_DIR defaults to $TESSERA_NVIDIA_CACHE, else ~/.cache/tessera/nvidia-cu12.9
# Prints the cache directory, which then holds include/ (cuda.h, cuda_runtime_api.h and
# what it includes, nvml.h), lib/libcudart.so.12 and bin/ptxas. Safe to run concurrently (a lock) and again (does nothing when complete).
set -euo pipefail
cache="${1:-${TESSERA_NVIDIA_CACHE:-$HOME/.cache/tessera/nvidia-cu12.9}}"
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if [ ! -f "$cache/.complete-3" ]; then
  # the versions cudarc's cuda-12090 bindings were generated for
  python3 -m pip download --quiet --no-deps --only-binary=:all: \
    --platform manylinux2014_x86_64 --python-version 3.11 \
    --dest "$cache/wheels" \
    "nvidia-cuda-runtime-cu12==12.9.79" "nvidia-cuda-nvcc-cu12==12.9.86" \
    "nvidia-nvml-dev-cu12==12.9.79" >&2
  python3 - "$cache" <<'PY'
import pathlib, sys, zipfile, stat
cache = pathlib.Path(sys.argv[1])
wanted = {
    "nvidia/cuda_runtime/include/": "include/",
    # crt/host_defines.h and friends, which cuda_runtime_api.h includes
    "nvidia/cuda_nvcc/include/": "include/",
    "nvidia/nvml_dev/include/": "include/",
    "nvidia/cuda_runtime/lib/libcudart.so.12": "lib/libcudart.so.12",
    "nvidia/cuda_nvcc/bin/ptxas": "bin/ptxas",
}
for wheel in (cache / "wheels").glob("*.whl"):
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            for src, dst in wanted.items():
                if name.startswith(src) and not name.endswith("/"):
                    out = cache / (dst + name[len(src):] if src.endswith("/") else dst)
                    out.parent.mkdir(parents=True, exist_ok=True)
                    out.write_bytes(z.read(name))
                    if dst == "bin/ptxas":
                        out.chmod(out.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
for need in ["include/cuda.h", "include/nvml.h", "include/crt/host_defines.h", "lib/libcudart.so.12", "bin/ptxas"]:
    if not (cache / need).is_file():
        sys.exit(f"{need} not found in the wheels")
PY
  rm -rf "$cache/wheels"
  touch "$cache/.complete-3"
fi
echo "$cache"

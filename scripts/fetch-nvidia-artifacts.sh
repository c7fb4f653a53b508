#!/usr/bin/env bash
# Fetch NVIDIA's published CUDA artefacts that tessera's tests check against — the
# driver API header (cuda.h), the CUDA runtime (libcudart.so.N), the PTX assembler
# (ptxas) and the NVML header (nvml.h) — from PyPI's CUDA wheels, into a cache. No GPU
# and no CUDA installation are needed. Two CUDA versions: 12.9 (the default; the
# nvidia-*-cu12 wheels) and 13.0 (what driver 580 runs; the nvidia-cuda-runtime,
# nvidia-cuda-nvcc, nvidia-cuda-crt and nvidia-nvml-dev 13.0 wheels), chosen by
# TESSERA_CUDA_VERSION.
#
# usage: [TESSERA_CUDA_VERSION=12.9|13.0] scripts/fetch-nvidia-artifacts.sh [CACHE_DIR]
#   CACHE_DIR defaults to $TESSERA_NVIDIA_CACHE (12.9 only), else
#   ~/.cache/tessera/nvidia-cu<version>
# Prints the cache directory, which then holds include/ (cuda.h, cuda_runtime_api.h and
# what it includes, nvml.h), lib/libcudart.so.<major> and bin/ptxas (and, for 13.0,
# bin/fatbinary: CUDA 12.9's nvcc wheel has none). Safe to run
# concurrently (a lock) and again (does nothing when complete). Says what it fetches,
# and how much, on stderr: the first run downloads about 40 MB.
set -euo pipefail
version="${TESSERA_CUDA_VERSION:-12.9}"
case "$version" in
  12.9)
    cache="${1:-${TESSERA_NVIDIA_CACHE:-$HOME/.cache/tessera/nvidia-cu12.9}}"
    # the versions cudarc's cuda-12090 bindings were generated for
    wheels=("nvidia-cuda-runtime-cu12==12.9.79" "nvidia-cuda-nvcc-cu12==12.9.86" "nvidia-nvml-dev-cu12==12.9.79")
    prefix="nvidia/"; major=12
    ;;
  13.0)
    cache="${1:-$HOME/.cache/tessera/nvidia-cu13.0}"
    # CUDA 13.0, which NVIDIA's 580-series driver runs
    # (CUDA 13 moved crt/, which cuda_runtime_api.h includes, into a wheel of its own)
    wheels=("nvidia-cuda-runtime==13.0.96" "nvidia-cuda-nvcc==13.0.88" "nvidia-nvml-dev==13.0.87" "nvidia-cuda-crt==13.0.88")
    prefix="nvidia/cu13/"; major=13
    ;;
  *)
    echo "TESSERA_CUDA_VERSION must be 12.9 or 13.0, not $version" >&2
    exit 2
    ;;
esac
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if [ ! -f "$cache/.complete-5" ]; then
  echo "fetching CUDA $version's headers, runtime and ptxas from PyPI (about 40 MB) into $cache" >&2
  # not --quiet: pip names each wheel with its size as it downloads it, with a progress
  # bar when stderr is a terminal
  python3 -m pip download --disable-pip-version-check --no-deps --only-binary=:all: \
    --platform manylinux2014_x86_64 --python-version 3.11 \
    --dest "$cache/wheels" "${wheels[@]}" >&2
  echo "extracting cuda.h, nvml.h, libcudart.so.$major and ptxas from the wheels" >&2
  python3 - "$cache" "$prefix" "$major" <<'PY'
import pathlib, sys, zipfile, stat
cache, prefix, major = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3]
if prefix == "nvidia/":
    wanted = {
        "nvidia/cuda_runtime/include/": "include/",
        # crt/host_defines.h and friends, which cuda_runtime_api.h includes
        "nvidia/cuda_nvcc/include/": "include/",
        "nvidia/nvml_dev/include/": "include/",
        "nvidia/cuda_runtime/lib/libcudart.so.12": "lib/libcudart.so.12",
        "nvidia/cuda_nvcc/bin/ptxas": "bin/ptxas",
    }
else:
    # CUDA 13's wheels share one tree, nvidia/cu13/
    wanted = {
        prefix + "include/": "include/",
        prefix + f"lib/libcudart.so.{major}": f"lib/libcudart.so.{major}",
        prefix + "bin/ptxas": "bin/ptxas",
        prefix + "bin/fatbinary": "bin/fatbinary",
    }
for wheel in (cache / "wheels").glob("*.whl"):
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            for src, dst in wanted.items():
                if name.startswith(src) and not name.endswith("/"):
                    out = cache / (dst + name[len(src):] if src.endswith("/") else dst)
                    out.parent.mkdir(parents=True, exist_ok=True)
                    out.write_bytes(z.read(name))
                    if dst.startswith("bin/"):
                        out.chmod(out.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
needs = ["include/cuda.h", "include/nvml.h", f"lib/libcudart.so.{major}", "bin/ptxas"]
if prefix != "nvidia/":
    needs.append("bin/fatbinary")
for need in needs:
    if not (cache / need).is_file():
        sys.exit(f"{need} not found in the wheels")
if not (cache / "include" / "crt" / "host_defines.h").is_file():
    sys.exit("crt/host_defines.h (which cuda_runtime_api.h includes) not found in the wheels")
PY
  rm -rf "$cache/wheels"
  touch "$cache/.complete-5"
fi
echo "$cache"

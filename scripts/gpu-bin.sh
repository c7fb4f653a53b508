#!/usr/bin/env bash
# Build here what scripts/gpu-check.sh takes to the lent GPU machine, which has no Rust:
# the release `tessera` and the interposer `libtessera_cuda.so`, stripped (a release
# build carries symbols and debug sections that would take much of the 64 MiB the run
# tool may carry), copied into gpu-bin/ (git-ignored: the run tool's carry names it).
# A BUILD-INFO beside them says which tree they were built from; gpu-check.sh copies it
# into versions.txt.
#
# usage: scripts/gpu-bin.sh [DEST]     (DEST defaults to gpu-bin/ in the repository)
# Then: run(command="bash scripts/gpu-check.sh", carry=["gpu-bin"], timeout_s=600)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dest="${1:-$root/gpu-bin}"
target="${CARGO_TARGET_DIR:-$root/target}"
cd "$root"
# the two packages: the command line (crates/tessera) and the interposer (crates/tessera-cuda)
cargo build --release -p tessera -p tessera-cuda
mkdir -p "$dest"
install -m 0755 "$target/release/tessera" "$dest/tessera"
install -m 0755 "$target/release/libtessera_cuda.so" "$dest/libtessera_cuda.so"
strip --strip-all "$dest/tessera"
# --strip-unneeded keeps the dynamic symbol table: the exported CUDA and NVML entry
# points (and dlsym) are what the loader binds a preloaded interposer by
strip --strip-unneeded "$dest/libtessera_cuda.so"
# the slicing check's spin kernel as a fat binary, its PTX compressed as nvcc packs it
# (NVIDIA's fatbinary, CUDA 13.0's nvcc wheel): the interposer takes the PTX out
cuda13="$(TESSERA_CUDA_VERSION=13.0 bash "$root/scripts/fetch-nvidia-artifacts.sh")"
"$cuda13/bin/fatbinary" --64 --create="$dest/slicing_spin.fatbin" \
  --image3=kind=ptx,sm=80,file="$root/scripts/gpu-check/slicing_spin.ptx"
# the slicing check's CUDA-runtime program, its kernel in a fat binary the runtime
# loads, and CUDA 13.0's runtime beside it
bash "$root/scripts/gpu-check/build-runtime-program.sh" "$dest"
{
  echo "built: $(date -u '+%Y-%m-%dT%H:%M:%SZ') on $(uname -m), $(ldd --version 2>/dev/null | head -n 1)"
  echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)"
  echo "uncommitted changes: $(git status --porcelain 2>/dev/null | wc -l) files"
  echo "rustc: $(rustc --version 2>/dev/null || echo unknown)"
  echo "tessera: $("$dest/tessera" --version)"
  echo "interposer's exported symbols: $(nm -D --defined-only "$dest/libtessera_cuda.so" | wc -l)"
} >"$dest/BUILD-INFO"
cat "$dest/BUILD-INFO"
ls -l "$dest"
echo "gpu-bin: $(du -sh "$dest" | cut -f1) to carry (the run tool carries at most 64 MiB in all)"

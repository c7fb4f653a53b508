#!/usr/bin/env bash
# Try tessera on a machine without a GPU: a real program, unmodified, run under
# `tessera run` beside a tesserad, on tessera's fake CUDA driver and fake NVML.
#
# The fake driver (crates/tessera-driver/fake/fake_libcuda.c, compiled here against
# NVIDIA's real cuda.h from PyPI) is a STAND-IN: it runs no real kernel — it keeps the
# books a driver keeps (devices, contexts, memory) in host memory and computes only a
# few test kernels, axpy among them, on the CPU. The fake NVML (fake_libnvml.c, against
# the real nvml.h) shows the same machine, and what runs on it from the driver's books
# (FAKE_CUDA_TIMELINE). What this shows is tessera's side: the program sees only the
# GPUs and the memory share the daemon gives it, in CUDA and in NVML (nvidia-ml-py,
# nvidia-smi-like tools), its allocations are admitted by the node's ledger, its
# launches pass the launch gate.
#
# usage: scripts/try-without-gpu.sh [PROGRAM ARGS...]
#   without a program, examples/cuda_axpy.c is built and run. The daemon gets as many
#   emulated GPUs, of the same size, as the fake driver reports (FAKE_CUDA_DEVICES,
#   default 2, of FAKE_CUDA_DEVICE_MIB, default 4096). TESSERA_BIN_DIR chooses the
#   built binaries (default target/release, built when missing); TESSERA_TRY_DIR the
#   scratch directory (default target/try), which holds libcuda.so.1 and
#   libnvidia-ml.so.1 (on the program's LD_LIBRARY_PATH) and the daemon's log.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${TESSERA_BIN_DIR:-$root/target/release}"
work="${TESSERA_TRY_DIR:-$root/target/try}"
devices="${FAKE_CUDA_DEVICES:-2}"
mib="${FAKE_CUDA_DEVICE_MIB:-4096}"
cc="${CC:-cc}"

if [ ! -x "$bin/tessera" ] || [ ! -f "$bin/libtessera_cuda.so" ]; then
  # cargo shows its progress: each crate it compiles, and a bar on a terminal
  echo "tessera: building tessera and its interposer (cargo build --release; 5-7 minutes from scratch on 2 cores)" >&2
  (cd "$root" && cargo build --release -p tessera -p tessera-cuda)
fi
nvidia="$(bash "$root/scripts/fetch-nvidia-artifacts.sh")"
mkdir -p "$work"
echo "tessera: compiling the fake CUDA driver and the fake NVML against $nvidia/include into $work" >&2
# each named as the library it stands for (its soname), so that a program linked
# with it, or one that dlopens it by that name (pynvml: libnvidia-ml.so.1), finds it on
# LD_LIBRARY_PATH; -Bsymbolic, as NVIDIA's own libraries, so that the interposer does
# not capture the library's calls to itself
for lib in libcuda.so.1:fake_libcuda.c libnvidia-ml.so.1:fake_libnvml.c; do
  "$cc" -shared -fPIC -Wl,-Bsymbolic -Wl,-soname,"${lib%%:*}" -O1 -I "$nvidia/include" \
    -o "$work/${lib%%:*}" "$root/crates/tessera-driver/fake/${lib#*:}" -lpthread
done
ln -sf libcuda.so.1 "$work/libcuda.so"
if [ "$#" -eq 0 ]; then
  "$cc" -O1 -I "$nvidia/include" -o "$work/cuda_axpy" "$root/examples/cuda_axpy.c" -L "$work" -lcuda
  set -- "$work/cuda_axpy"
fi

# FAKE_CUDA_TIMELINE: the driver's books of who holds what on which GPU, shared by
# every process of the fake machine, which the fake NVML reads (its processes and
# memory used); a run's books are its own
timeline="$work/timeline"
rm -f "$timeline".*
export FAKE_CUDA_DEVICES="$devices" FAKE_CUDA_DEVICE_MIB="$mib" FAKE_CUDA_STATS=0
export FAKE_CUDA_TIMELINE="$timeline"
export LD_LIBRARY_PATH="$work${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
socket="$work/tesserad.sock"
rm -f "$socket" "$work/ledger"
"$bin/tessera" daemon --emulate --gpus "$devices" --gpu-memory-mib "$mib" \
  --socket "$socket" --ledger "$work/ledger" >"$work/tesserad.log" 2>&1 &
daemon=$!
trap 'kill "$daemon" 2>/dev/null; wait "$daemon" 2>/dev/null || true' EXIT
for _ in $(seq 100); do
  [ -S "$socket" ] && break
  kill -0 "$daemon" 2>/dev/null || { cat "$work/tesserad.log" >&2; exit 1; }
  sleep 0.05
done
echo "tessera: a daemon on $devices emulated GPUs of $mib MiB; libcuda.so.1 is tessera's FAKE driver (a stand-in that runs no real kernels) and libnvidia-ml.so.1 its FAKE NVML" >&2
echo "tessera: running $* as a tenant with a 1 GiB memory limit" >&2
"$bin/tessera" run --socket "$socket" --memory 1GiB -- "$@"

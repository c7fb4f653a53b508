#!/usr/bin/env bash
# Instructions the interposer's launch hook adds to each cuLaunchKernel, counted with
# callgrind (valgrind, from Debian; installed with apt-get when missing and root), on
# tessera's fake driver beside an emulated fair daemon: the bench program
# (crates/tessera-cuda/bench/interposer_bench.c) launches 200 batches of 64 no-op
# kernels inside one granted slice, and the count is the hook's inclusive instructions
# less the fake driver's own cuLaunchKernel, over the launches. Instruction counts do
# not depend on the machine's load, unlike times: on the H200 the same hook measured
# 36-96 ns at 249 instructions and 94-168 ns at 315 (docs/results/gpu/2026-12-04-h200).
#
# usage: scripts/interposer-instructions.sh [INTERPOSER] [TESSERA]
#   INTERPOSER  a release libtessera_cuda.so with its symbols (default
#               target/release/libtessera_cuda.so, built when missing; gpu-bin/'s is
#               stripped and cannot be read)
#   TESSERA     the tessera that runs the daemon (default target/release/tessera, else
#               target/debug/tessera, built when neither is there)
# Prints one line: launches, instructions per launch (the hook's own).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
lib="${1:-$root/target/release/libtessera_cuda.so}"
tessera="${2:-}"
bash "$root/scripts/ensure-valgrind.sh"
if [ ! -f "$lib" ]; then
  (cd "$root" && cargo build --release -p tessera-cuda >&2)
fi
if [ -z "$tessera" ]; then
  for t in "$root/target/release/tessera" "$root/target/debug/tessera"; do
    if [ -x "$t" ]; then tessera="$t"; break; fi
  done
fi
if [ -z "$tessera" ]; then
  (cd "$root" && cargo build --release -p tessera >&2)
  tessera="$root/target/release/tessera"
fi
nvidia="$(TESSERA_CUDA_VERSION=13.0 bash "$root/scripts/fetch-nvidia-artifacts.sh")"
work=$(mktemp -d)
daemon=""
cleanup() {
  if [ -n "$daemon" ]; then kill -TERM "$daemon" 2>/dev/null || true; wait "$daemon" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
cc -shared -fPIC -Wl,-Bsymbolic -Wl,-soname,libcuda.so.1 -O1 -I "$nvidia/include" \
  -o "$work/libcuda.so.1" "$root/crates/tessera-driver/fake/fake_libcuda.c" -lpthread
cc -O2 -std=c11 -I "$nvidia/include" -o "$work/bench" \
  "$root/crates/tessera-cuda/bench/interposer_bench.c" -ldl
"$tessera" daemon --emulate --gpus 1 --policy fair --socket "$work/d.sock" \
  --ledger "$work/ledger" >"$work/daemon.log" 2>&1 &
daemon=$!
for _ in $(seq 100); do
  "$tessera" status --socket "$work/d.sock" >/dev/null 2>&1 && break
  sleep 0.1
done
batches=200
# a slice far longer than the run: every measured launch is inside it
LD_LIBRARY_PATH="$work" TESSERA_SOCKET="$work/d.sock" TESSERA_LEDGER="$work/ledger" \
  TESSERA_SLICE_MS=10000 FAKE_CUDA_STATS=0 LD_PRELOAD="$lib" \
  valgrind --tool=callgrind --callgrind-out-file="$work/cg.out" \
  "$work/bench" launch counted "$batches" >"$work/bench.out" 2>"$work/vg.err" || {
  cat "$work/vg.err" "$work/daemon.log" >&2
  exit 1
}
# the bench's warm-up launch and its batches of 64
launches=$((batches * 64 + 1))
callgrind_annotate --inclusive=yes "$work/cg.out" 2>/dev/null | awk -v n="$launches" '
  # the hook (named by its source file) and the entry point of the same name in the fake driver
  / [^ ]*hooks\/launch\.rs:cuLaunchKernel / { gsub(",", "", $1); hook = $1 }
  /\?\?\?:cuLaunchKernel \[.*libcuda\.so\.1\]/ { gsub(",", "", $1); fake = $1 }
  END {
    if (hook == "" || fake == "") { print "the hook or the fake driver was not found in the profile" > "/dev/stderr"; exit 1 }
    printf "launches %d, instructions per launch %.1f (hook %d, fake driver %d)\n", n, (hook - fake) / n, hook, fake
  }'

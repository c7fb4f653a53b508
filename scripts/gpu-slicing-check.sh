#!/usr/bin/env bash
# Kernel slicing on a GPU (issue 58, item 3), in one short call on the lent GPU
# machine: scripts/gpu-check/slicing_check.py with the tessera binary built here. Its
# twins (`tessera ptx slice`) of four real kernels (NVRTC's PTX, compute_80: a 2-D
# matrix multiply, a 3-D stencil reading gridDim, a grid-stride loop, a reduction in
# dynamic shared memory) must compute bit for bit what the originals compute, and
# FairGV's Table 4 is measured (a matrix multiply of 600 x 600 and 900 x 900 blocks
# sliced into the paper's numbers of sub-kernels) beside the paper's numbers
# (data/fairgv/table4.csv). Judged: every identity step bit for bit; Table 4's claim,
# with at least 1,500 blocks per sub-kernel the slowdown stays under 5%.
#
# usage: scripts/gpu-slicing-check.sh [--fake] [BIN_DIR]
#   BIN_DIR   holds tessera (default gpu-bin/, made by scripts/gpu-bin.sh)
#   --fake    a dry run without a GPU: tessera's fake CUDA driver (compiled here
#             against CUDA 12.9's headers), small sizes; the kernels compute nothing
#             there, so it checks the script, not slicing
# Python: TESSERA_GPU_CHECK_PYTHON (default python3), with numpy and cuda-bindings.
# Results go to ${OUT:-gpu-slicing-out}/: summary.txt (PASS/FAIL per step, the Table 4
# rows beside the paper's), slicing.json (the check's report), log.txt (its stderr).
# Exit status 0 when nothing FAILED.
#
# Run there with the device tool, carrying the build:
#   bash scripts/gpu-bin.sh
#   run(command="bash scripts/gpu-slicing-check.sh", carry=["gpu-bin"], timeout_s=300)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
fake=0
bin_arg=""
for arg in "$@"; do
  case "$arg" in
    --fake) fake=1 ;;
    -*) echo "gpu-slicing-check: unknown option $arg" >&2; exit 64 ;;
    *) bin_arg="$arg" ;;
  esac
done
bin_dir="${bin_arg:-$root/gpu-bin}"
if [ ! -x "$bin_dir/tessera" ]; then
  echo "gpu-slicing-check: $bin_dir must hold tessera: build it here with scripts/gpu-bin.sh (and carry gpu-bin)" >&2
  exit 66
fi
bin_dir="$(cd "$bin_dir" && pwd)"
out="${OUT:-$root/gpu-slicing-out}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
python="${TESSERA_GPU_CHECK_PYTHON:-python3}"
small=()
if [ "$fake" = 1 ]; then
  nvidia="$(bash "$root/scripts/fetch-nvidia-artifacts.sh")"
  fakedir="$(mktemp -d /tmp/tessera-slicing-check.XXXXXX)"
  trap 'rm -rf "$fakedir"' EXIT
  cc -shared -fPIC -Wl,-Bsymbolic -Wl,-soname,libcuda.so.1 -O1 -I "$nvidia/include" \
    -o "$fakedir/libcuda.so.1" "$root/crates/tessera-driver/fake/fake_libcuda.c" -lpthread
  ln -sf libcuda.so.1 "$fakedir/libcuda.so"
  export LD_LIBRARY_PATH="$fakedir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export FAKE_CUDA_DEVICES=1 FAKE_CUDA_DEVICE_MIB=8192 FAKE_CUDA_STATS=0
  small=(--small)
fi
status=0
(cd "$root/scripts/gpu-check" && "$python" slicing_check.py "$bin_dir/tessera" \
  "$root/scripts/gpu-check/slicing_kernels.ptx" "$root/data/fairgv/table4.csv" "$out" "${small[@]}") \
  >"$out/reports.jsonl" 2>"$out/log.txt" || status=$?
tail -n 1 "$out/reports.jsonl" >"$out/slicing.json"
rm -f "$out/reports.jsonl" "$out/slicing_sliced.ptx"
"$python" - "$out/slicing.json" "$fake" "$status" >"$out/summary.txt" <<'PY'
import json, sys
path, fake, status = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3])
try:
    r = json.load(open(path))
except Exception as e:  # noqa: BLE001 - a run that wrote nothing is a finding
    print(f"FAIL  slicing_check: no report ({type(e).__name__}: {e}); exit status {status}")
    sys.exit(1)
if fake:
    print("FAKE MODE: tessera's fake driver; the kernels compute nothing, so this checks the script")
if r.get("skipped"):
    print(f"SKIPPED  slicing_check: {r['skipped']}")
    sys.exit(0)
failed = status != 0
for name, step in r["steps"].items():
    ok = step.get("ok", False)
    if name.startswith("identity.") and not step.get("bit_identical", False):
        ok = False
    verdict = "PASS" if ok else "FAIL"
    failed |= not ok
    detail = step.get("error", "")
    if name.startswith("identity."):
        detail = f"{step.get('sub_kernels')} sub-kernels of {step.get('blocks_per_sub_kernel')} blocks; differing outputs: {step.get('differing')}" + (f"; {detail}" if detail else "")
    print(f"{verdict:5} {name}  {detail}")
    for row in step.get("rows", []):
        print(f"        {row['sub_kernels']:5} sub-kernels of {row['blocks_each']:6} blocks: "
              f"{row['slowdown_pct']:7.1f}% slower (paper {row['paper_pct']:.1f}%)")
rows = [x for s in r["steps"].values() for x in s.get("rows", [])]
big = [x for x in rows if x["blocks_each"] >= 1500]
if big and not fake:
    worst = max(x["slowdown_pct"] for x in big)
    holds = worst < 5.0
    failed |= not holds
    print(f"{'PASS' if holds else 'FAIL':5} table4: with at least 1,500 blocks per sub-kernel the slowdown stays under 5% (worst {worst:.1f}%)")
print("device:", r["steps"].get("init", {}).get("gpu", "?"))
sys.exit(1 if failed else 0)
PY

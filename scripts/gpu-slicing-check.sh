#!/usr/bin/env bash
# Kernel slicing on a GPU (issue 58, item 3), in one short call on the lent GPU
# machine: scripts/gpu-check/slicing_check.py with the tessera binary built here. Its
# twins (`tessera ptx slice`) of four real kernels (NVRTC's PTX, compute_80: a 2-D
# matrix multiply, a 3-D stencil reading gridDim, a grid-stride loop, a reduction in
# dynamic shared memory) must compute bit for bit what the originals compute, and
# FairGV's Table 4 is measured (a matrix multiply of 600 x 600 and 900 x 900 blocks
# sliced into the paper's numbers of sub-kernels) beside the paper's numbers
# (data/fairgv/table4.csv). Judged: every identity step bit for bit; Table 4's claim,
# with at least 1,500 blocks per sub-kernel the slowdown stays under 5%; and the case
# slicing exists for, under a daemon of this build (`--cuda --policy fair`): a program
# of 10 s kernels beside one of 1 ms kernels at weights 1:1 receives 0.5 +- 0.1 of the
# GPU time with TESSERA_KERNEL_SLICING=1, far from it without (2 x 40 s,
# TESSERA_SLICING_FAIR_SECONDS); and sliced again with the spin module loaded from a
# fat binary whose PTX is compressed, as nvcc packs it (gpu-bin/slicing_spin.fatbin, made
# by scripts/gpu-bin.sh; 20 s, TESSERA_SLICING_FATBIN_SECONDS). Also numba-cuda's own
# kernel (LTO-IR that nvJitLink links into a cubin), sliced through the interposer's
# nvJitLink hooks and whole: bit-identical outputs, equal to numpy's (numba.json); and
# a CUDA-runtime program whose fat binary the runtime itself loads
# (gpu-bin/runtime_fatbin, made by scripts/gpu-bin.sh), sliced and whole (runtime.json).
#
# usage: scripts/gpu-slicing-check.sh [--fake] [BIN_DIR]
#   BIN_DIR   holds tessera (default gpu-bin/, made by scripts/gpu-bin.sh)
#   --fake    a dry run without a GPU: tessera's fake CUDA driver (compiled here
#             against CUDA 12.9's headers), small sizes; the kernels compute nothing
#             there, so it checks the script, not slicing
# Python: TESSERA_GPU_CHECK_PYTHON (default python3), with numpy and cuda-bindings, and
# numba-cuda for the numba step (SKIPPED without it; numba finds NVVM under CUDA_HOME,
# set to /usr/local/cuda when unset and present, as scripts/gpu-check.sh does).
# Results go to ${OUT:-gpu-slicing-out}/: summary.txt (PASS/FAIL per step, the Table 4
# rows beside the paper's), slicing.json (the check's report), fair.json (each run's
# GPU time per tenant), log.txt (stderr of everything).
# Exit status 0 when nothing FAILED.
#
# Run there with the device tool, carrying the build:
#   bash scripts/gpu-bin.sh
#   run(command="bash scripts/gpu-slicing-check.sh", carry=["gpu-bin"], timeout_s=420)  (numba compiles twice)
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
if [ -z "${CUDA_HOME:-}" ] && [ -d /usr/local/cuda ]; then
  export CUDA_HOME=/usr/local/cuda
fi
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
here="$root/scripts/gpu-check"
(cd "$here" && "$python" slicing_check.py "$bin_dir/tessera" \
  "$root/scripts/gpu-check/slicing_kernels.ptx" "$root/data/fairgv/table4.csv" "$out" "${small[@]}") \
  >"$out/reports.jsonl" 2>"$out/log.txt" || status=$?
tail -n 1 "$out/reports.jsonl" >"$out/slicing.json"
rm -f "$out/reports.jsonl" "$out/slicing_sliced.ptx"

# The case slicing exists for: a program of 10 s kernels (361,000 blocks of 1,024
# threads) beside one of 1 ms kernels (132 blocks), at weights 1:1 under the daemon's
# fair policy, with slicing and then without; each tenant's GPU time as the daemon
# charged it (`tessera status`) near the end of each run. Each spin's length comes from
# a short launch timed alone, before either run.
fair_seconds="${TESSERA_SLICING_FAIR_SECONDS:-40}"
long_ms=10000
if [ "$fake" = 1 ]; then fair_seconds="${TESSERA_SLICING_FAIR_SECONDS:-4}"; long_ms=200; fi
spin="$here/slicing_spin.ptx"
fatbin_seconds="${TESSERA_SLICING_FATBIN_SECONDS:-20}"
spin_fatbin="$bin_dir/slicing_spin.fatbin"
if [ "$fake" = 1 ]; then
  fatbin_seconds="${TESSERA_SLICING_FATBIN_SECONDS:-4}"
  cuda13="$(TESSERA_CUDA_VERSION=13.0 bash "$root/scripts/fetch-nvidia-artifacts.sh")"
  spin_fatbin="$fakedir/slicing_spin.fatbin"
  "$cuda13/bin/fatbinary" --64 --create="$spin_fatbin" --image3=kind=ptx,sm=80,file="$spin"
fi
runtime="$(mktemp -d /tmp/tessera-slicing-fair.XXXXXX)"
fair_log="$out/log.txt"
if [ "$fake" = 1 ]; then
  kind=(--emulate --gpus 1 --gpu-memory-mib 8192 --speedup 1)
else
  kind=(--cuda)
fi
# A daemon of this build on socket $1 (ledger $2), its pid in $daemon once it answers.
start_daemon() {
  "$bin_dir/tessera" daemon "${kind[@]}" --policy fair --socket "$1" --ledger "$2" \
    >>"$fair_log" 2>&1 &
  daemon=$!
  for _ in $(seq 300); do
    "$bin_dir/tessera" status --socket "$1" >/dev/null 2>&1 && break
    sleep 0.1
  done
}

# numba-cuda's own kernel (LTO-IR linked by nvJitLink into a cubin: no PTX reaches the
# driver), sliced through the interposer's nvJitLink hooks, and whole: 3,000 blocks,
# sliced above 1,000 into sub-kernels of 700; the outputs must be bit-identical and what
# numpy computes. Then the PTX corpus's four numba kernels (saxpy, a grid-stride loop, a
# 3-D grid reading gridsize, a reduction in shared memory), 1,200-2,048 blocks each, the
# same way. The interposer's log says which path each kernel took.
start_daemon "$runtime/numba.sock" "$runtime/ledger-numba"
for slicing in 1 0; do
  (cd "$here" && exec env TESSERA_KERNEL_SLICING=$slicing TESSERA_KERNEL_SLICE_MIN_BLOCKS=1000 \
    TESSERA_KERNEL_SLICE_BLOCKS=700 TESSERA_CUDA_LOG="$runtime/numba-interposer$slicing.log" \
    timeout 120 "$bin_dir/tessera" run --socket "$runtime/numba.sock" --memory 1GiB -- \
    "$python" numba_sliced_check.py 60 50) >"$runtime/numba$slicing.json" 2>>"$fair_log" || true
done
# A CUDA-runtime program's own load of its fat binary (runtime_fatbin.c, built by
# scripts/gpu-check/build-runtime-program.sh: nvcc's registration by hand, its PTX
# compressed in the fat binary), sliced and whole: 6,000 blocks, sliced above 1,000
# into sub-kernels of 1,500. The fake driver cannot start the runtime: there the
# program is built and run to its first failing call only.
runtime_program="$bin_dir/runtime_fatbin"
if [ "$fake" = 1 ]; then
  bash "$here/build-runtime-program.sh" "$fakedir" >>"$fair_log" 2>&1 || true
  runtime_program="$fakedir/runtime_fatbin"
fi
for slicing in 1 0; do
  if [ -x "$runtime_program" ]; then
    (cd "$here" && exec env TESSERA_KERNEL_SLICING=$slicing TESSERA_KERNEL_SLICE_MIN_BLOCKS=1000 \
      TESSERA_KERNEL_SLICE_BLOCKS=1500 TESSERA_CUDA_LOG="$runtime/runtime-interposer$slicing.log" \
      timeout 120 "$bin_dir/tessera" run --socket "$runtime/numba.sock" --memory 1GiB -- \
      "$runtime_program" 2000 3) >"$runtime/runtime$slicing.json" 2>>"$fair_log" || true
  fi
done
kill -TERM "$daemon" 2>/dev/null || true
wait "$daemon" 2>/dev/null || true
# The sliced (1) and whole (0) runs of the program whose files in $runtime begin
# with $1 (its report: $1{1,0}.json; the interposer's log: $1-interposer{1,0}.log), as
# one JSON object on stdout: each run's report and what the log says of slicing.
collect_runs() {
  "$python" - "$runtime" "$1" 2>>"$fair_log" <<'PY'
import json, sys
runtime, prefix = sys.argv[1], sys.argv[2]
result = {}
for slicing, name in (("1", "sliced"), ("0", "whole")):
    try:
        r = json.loads(open(f"{runtime}/{prefix}{slicing}.json").read().strip().splitlines()[-1])
    except Exception as e:  # noqa: BLE001 - a run without a report is a finding
        r = {"error": f"no report: {type(e).__name__}: {e}"}
    try:
        log = open(f"{runtime}/{prefix}-interposer{slicing}.log").read()
    except OSError:
        log = ""
    r["ptx_from_nvjitlink"] = "a cubin nvJitLink linked: its link's PTX, with twins" in log
    r["sliced_launches"] = [l for l in log.splitlines() if "kernel slicing: a launch of" in l]
    r["whole_said"] = [l for l in log.splitlines() if "loaded as given" in l or "runs whole" in l]
    result[name] = r
json.dump(result, sys.stdout)
PY
}
collect_runs runtime >"$out/runtime.json"
collect_runs numba >"$out/numba.json"
long_ns="$(cd "$here" && "$python" slicing_fair.py calibrate "$spin" "$long_ms" 361000 2>>"$fair_log" || echo 0)"
short_ns="$(cd "$here" && "$python" slicing_fair.py calibrate "$spin" 1 132 2>>"$fair_log" || echo 0)"
echo "calibrated: $long_ns ns per block of the long kernel, $short_ns of the short" >>"$fair_log"
# runs: 1 (sliced), 0 (whole), fatbin (sliced, the module from the fat binary)
for run in 1 0 fatbin; do
  slicing=1 module="$spin" seconds="$fair_seconds"
  if [ "$run" = 0 ]; then slicing=0; fi
  if [ "$run" = fatbin ]; then
    [ -f "$spin_fatbin" ] || { echo "no $spin_fatbin: the fat-binary run is skipped" >>"$fair_log"; continue; }
    module="$spin_fatbin" seconds="$fatbin_seconds"
  fi
  sock="$runtime/d$run.sock"
  start_daemon "$sock" "$runtime/ledger$run"
  programs=()
  for which in long short; do
    shape="$long_ns 361000"
    if [ "$which" = short ]; then shape="$short_ns 132"; fi
    # shellcheck disable=SC2086 # the shape is two words
    # exec: the job's pid is the program's (tessera run execs it too), which the
    # daemon's status names each tenant by
    (cd "$here" && exec env TESSERA_KERNEL_SLICING=$slicing "$bin_dir/tessera" run --socket "$sock" \
      --weight 1 --memory 1GiB -- "$python" slicing_fair.py run "$module" $shape "$seconds") \
      >"$runtime/$which$run.json" 2>>"$fair_log" &
    programs+=($!)
  done
  echo "${programs[0]}" >"$runtime/long$run.pid"
  sleep "$(awk -v s="$seconds" 'BEGIN { print (s > 3 ? s - 2 : s / 2) }')"
  "$bin_dir/tessera" status --socket "$sock" --json >"$runtime/status$run.json" 2>>"$fair_log" || true
  # a long kernel launched just before the end runs on (for its length, unsliced)
  for p in "${programs[@]}"; do
    for _ in $(seq 600); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  kill -TERM "$daemon" 2>/dev/null || true
  wait "$daemon" 2>/dev/null || true
done
"$python" - "$runtime" "$long_ns" "$short_ns" >"$out/fair.json" 2>>"$fair_log" <<'PY'
import json, sys
runtime, long_ns, short_ns = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
WINDOW = 2.0  # seconds: many 30 ms slices, a fifth of a long kernel


def windows(run):
    """The short tenant's share of the GPU in each WINDOW-second window, by its own
    clock: its launches that ended in the window times its kernel's length (one wave of
    132 blocks, each spinning short_ns on the GPU's timer), over the window; from 1 s
    after both programs started to the short program's last end."""
    progs = {}
    for which in ("long", "short"):
        lines = open(f"{runtime}/{which}{run}.json").read().strip().splitlines()
        progs[which] = json.loads(lines[-1])
    short = progs["short"]["ends"]
    t0 = max(progs["long"]["start"], progs["short"]["start"]) + 1.0
    t1 = short[-1] if short else t0
    count = int((t1 - t0) // WINDOW)
    shares = [0.0] * count
    for t in short:
        k = int((t - t0) // WINDOW)
        if 0 <= k < count:
            shares[k] += short_ns * 1e-9 / WINDOW
    in_run = [t for t in short if t >= t0]
    gaps = [b - a for a, b in zip([t0] + in_run, in_run)]
    deviations = sorted(abs(x - 0.5) for x in shares)
    return {
        "window_s": WINDOW,
        "short_shares": [round(x, 3) for x in shares],
        "within_0_1": sum(d <= 0.1 for d in deviations) / len(deviations) if deviations else None,
        "median_deviation": deviations[len(deviations) // 2] if deviations else None,
        "short_longest_wait_s": max(gaps) if gaps else None,
        # the long program's launches end every 10 s or so on a GPU (the first 50 kept:
        # the dry run's kernels end at once)
        "long_ends": [round(t - t0, 3) for t in progs["long"]["ends"][:50]],
    }


result = {}
for slicing in ("1", "0", "fatbin"):
    try:
        tenants = json.load(open(f"{runtime}/status{slicing}.json"))["tenants"]
    except Exception as e:  # noqa: BLE001 - a run without a report is a finding
        result[slicing] = {"error": f"{type(e).__name__}: {e}"}
        continue
    long_pid = int(open(f"{runtime}/long{slicing}.pid").read())
    long_ms = [t["gpu_ms"] for t in tenants if t["pid"] == long_pid]
    short_ms = [t["gpu_ms"] for t in tenants if t["pid"] != long_pid]
    total = sum(long_ms) + sum(short_ms)
    share = sum(long_ms) / total if len(long_ms) == 1 and len(short_ms) == 1 and total > 0 else None
    result[slicing] = {"long_gpu_ms": long_ms, "short_gpu_ms": short_ms, "long_share": share}
    try:
        result[slicing]["windows"] = windows(slicing)
    except Exception as e:  # noqa: BLE001 - a program without a report is a finding
        result[slicing]["windows"] = {"error": f"{type(e).__name__}: {e}"}
json.dump({"with_slicing": result["1"], "without_slicing": result["0"],
           "with_slicing_fatbin": result["fatbin"], "long_ns_per_block": long_ns}, sys.stdout)
PY
rm -rf "$runtime"
"$python" - "$out/slicing.json" "$fake" "$status" "$out/fair.json" "$out/numba.json" "$out/runtime.json" >"$out/summary.txt" <<'PY'
import json, sys
path, fake, status, fair_path, numba_path, runtime_path = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6]
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
per_sm = [x for s in r["steps"].values() for x in s.get("per_sm_rows", [])]
for x in per_sm:
    print(f"        {x['sub_kernels']:5} sub-kernels of {x['blocks_each']:6} blocks "
          f"({x['blocks_per_sm']:.1f} a multiprocessor): {x['slowdown_pct']:7.1f}% slower")
if per_sm and not fake:
    # the paper's 1,500 blocks on its 24-SM TitanX scaled to this GPU's multiprocessors:
    # a hypothesis from the first H200 run, judged at sizes that run did not measure
    worst = max(x["slowdown_pct"] for x in per_sm)
    holds = worst < 5.0
    failed |= not holds
    print(f"{'PASS' if holds else 'FAIL':5} table4.per_sm: with at least 62.5 blocks a multiprocessor (1,500 on the paper's 24) the slowdown stays under 5% (worst {worst:.1f}%)")
try:
    fair = json.load(open(fair_path))
except Exception as e:  # noqa: BLE001
    fair = None
    failed = True
    print(f"FAIL  fairness: no result ({type(e).__name__}: {e})")
if fair is not None:
    on, off = fair["with_slicing"].get("long_share"), fair["without_slicing"].get("long_share")
    show = lambda x: "none" if x is None else f"{x:.3f}"
    win = lambda run: fair.get(run, {}).get("windows", {})
    def win_detail(run):
        w = win(run)
        if "error" in w or w.get("within_0_1") is None:
            return f"no windows ({w.get('error', 'none')})"
        return (f"short tenant's share within 0.5 +- 0.1 in {w['within_0_1']:.0%} of "
                f"{len(w['short_shares'])} {w['window_s']:.0f}-s windows, median distance "
                f"{w['median_deviation']:.2f}, longest wait {w['short_longest_wait_s']:.2f} s")
    detail = f"10 s kernels' tenant received {show(on)} of the GPU time with slicing, {show(off)} without (weights 1:1, the daemon's charges over the run)"
    if fake:
        ok = on is not None and off is not None and "error" not in win("with_slicing")
        print(f"{'PASS' if ok else 'FAIL':5} fairness.dry  {detail}; with: {win_detail('with_slicing')}")
    else:
        # Judged window by window (committed before the run that judges it, 2026-12-04):
        # over the whole run the fair queue's late charges even out an unsliced 10 s
        # kernel too (the first H200 run: 0.532 without slicing), so "far from 0.5
        # without" is a claim about what each tenant receives while it runs: with
        # slicing at least 80% of 2-s windows within 0.5 +- 0.1, without the median
        # window more than 0.2 away from 0.5.
        w_on = win("with_slicing").get("within_0_1")
        ok = on is not None and abs(on - 0.5) <= 0.1 and w_on is not None and w_on >= 0.8
        print(f"{'PASS' if ok else 'FAIL':5} fairness.with_slicing  {detail} (0.5 +- 0.1); "
              f"windows: {win_detail('with_slicing')} (at least 80%)")
        m_off = win("without_slicing").get("median_deviation")
        far = m_off is not None and m_off > 0.2
        print(f"{'PASS' if far else 'FAIL':5} fairness.without_slicing  far from 0.5 without "
              f"slicing: {win_detail('without_slicing')} (median distance over 0.2)")
        ok = ok and far
    fat = fair.get("with_slicing_fatbin", {}).get("long_share")
    fat_w = win("with_slicing_fatbin").get("within_0_1")
    fat_detail = (f"with the module from a fat binary (compressed PTX): {show(fat)}; "
                  f"{win_detail('with_slicing_fatbin')}")
    fat_ok = fat is not None and (fake or (abs(fat - 0.5) <= 0.1 and fat_w is not None and fat_w >= 0.8))
    print(f"{'PASS' if fat_ok else 'FAIL':5} fairness.fatbin  {fat_detail}" + ("" if fake else " (0.5 +- 0.1; at least 80%)"))
    ok = ok and fat_ok
    failed |= not ok
try:
    numba = json.load(open(numba_path))
except Exception as e:  # noqa: BLE001
    numba = None
    failed = True
    print(f"FAIL  numba: no result ({type(e).__name__}: {e})")
if numba is not None:
    on, off = numba["sliced"], numba["whole"]
    if on.get("skipped") or off.get("skipped"):
        print(f"SKIPPED  numba: {on.get('skipped') or off.get('skipped')}")
    else:
        # the stamp kernel and the PTX corpus's four numba kernels, each one launch
        kernels = ["stamp"] + sorted((on.get("corpus") or {}).keys())
        took = on.get("ptx_from_nvjitlink") and len(on.get("sliced_launches", [])) == len(kernels) == 5
        detail = (f"nvJitLink's PTX loaded: {on.get('ptx_from_nvjitlink')}; sliced launches: "
                  f"{len(on.get('sliced_launches', []))} of {len(kernels)} kernels "
                  f"({', '.join(kernels)}); whole: {off.get('whole_said') or 'none said'}; "
                  f"errors: {on.get('error')} {off.get('error')}")
        c_on, c_off = on.get("corpus") or {}, off.get("corpus") or {}
        same_corpus = {k: k in c_off and c_on[k]["digest"] == c_off[k]["digest"] for k in c_on}
        if fake:
            ok = (took and "digest" in on and "digest" in off and not off.get("sliced_launches")
                  and all(same_corpus.values()))
            print(f"{'PASS' if ok else 'FAIL':5} numba.dry  {detail}")
        else:
            same = on.get("digest") is not None and on.get("digest") == off.get("digest")
            right = on.get("matches_expected") and off.get("matches_expected")
            right_corpus = {k: c_on[k]["matches_expected"] and c_off.get(k, {}).get("matches_expected")
                            for k in c_on}
            ok = (took and same and right and not off.get("sliced_launches")
                  and all(same_corpus.values()) and all(right_corpus.values()))
            print(f"{'PASS' if ok else 'FAIL':5} numba.identity  numba-cuda {on.get('numba_cuda')}: "
                  f"sliced and whole outputs bit-identical: {same}, as numpy computes: {right} "
                  f"(differing {on.get('differing')}, {off.get('differing')}); the corpus's "
                  f"kernels bit-identical: {same_corpus}, as numpy computes: {right_corpus}; {detail}")
        failed |= not ok
try:
    rt = json.load(open(runtime_path))
except Exception as e:  # noqa: BLE001
    rt = None
    failed = True
    print(f"FAIL  runtime: no result ({type(e).__name__}: {e})")
if rt is not None:
    on, off = rt["sliced"], rt["whole"]
    detail = (f"sliced: {on.get('sliced_launches')}, error {on.get('error')}, differing "
              f"{on.get('differing')}; whole: error {off.get('error')}, differing "
              f"{off.get('differing')}, said {off.get('whole_said') or 'nothing'}")
    if fake:
        # the runtime refuses the fake driver: the program must have been built and run
        ok = on.get("error", "").startswith("cuda") and off.get("error", "").startswith("cuda")
        print(f"{'SKIPPED' if ok else 'FAIL':5} runtime  the fake driver cannot start the CUDA runtime; "
              f"the program was built and ran to its first call ({on.get('error')})")
    else:
        ok = (on.get("error") == "none" and off.get("error") == "none"
              and on.get("differing") == 0 and off.get("differing") == 0
              and on.get("digest") == off.get("digest")
              and len(on.get("sliced_launches", [])) == 1 and not off.get("sliced_launches"))
        print(f"{'PASS' if ok else 'FAIL':5} runtime.identity  a CUDA-runtime program's own fat "
              f"binary (compressed PTX), 6,000 blocks as sub-kernels and whole, bit-identical and "
              f"as computed on the CPU: {detail}")
    failed |= not ok
print("device:", r["steps"].get("init", {}).get("gpu", "?"))
sys.exit(1 if failed else 0)
PY

#!/usr/bin/env bash
# The GPU check (issue 52, item 3): tessera on a real GPU, in one call of at most 10
# minutes on the lent GPU machine (one H100 or H200, driver 580, CUDA 13, PyTorch, CuPy,
# numba-cuda, cuda-core; no network, no Rust). It takes the release build made here
# (scripts/gpu-bin.sh: tessera and libtessera_cuda.so, stripped, in gpu-bin/), starts
# its own daemon on the GPU (`tessera daemon --cuda --policy fair`), and runs:
#   selftest          `tessera selftest --json` (and, last, its text table)
#   nvidia-smi        nvidia-smi inside a tenant: the tenant's GPU and memory limit
#   c.axpy            examples/cuda_axpy.c, a plain driver-API program
#   torch.limits      mem_get_info shows the limit; past it torch.OutOfMemoryError;
#                     empty_cache and a smaller retry succeed
#   torch.train       ResNet-18 training steps: the interposer's cost (at most 5%)
#   torch.share       two programs at weights 1:3 receive 0.25 +- 0.05 of the GPU
#   torch.graph       a CUDA graph captured and replayed gives the same result
#   torch.dataloader  a DataLoader with forked workers runs
#   cupy, numba, cuda-core  a kernel with a checked result; the memory limit respected
# Each program runs twice in the same call: directly, and under `tessera run` (so every
# number has its baseline beside it, on the same GPU, minutes apart). The programs are
# in scripts/gpu-check/; scripts/gpu-check/judge.py turns their JSON into PASS, FAIL or
# SKIPPED, with the tolerances its header lists.
#
# usage: scripts/gpu-check.sh [--fake] [BIN_DIR]
#   BIN_DIR   tessera and libtessera_cuda.so (default gpu-bin/, made by
#             scripts/gpu-bin.sh; git-ignored, so the run tool must carry it)
#   --fake    (or TESSERA_GPU_CHECK_FAKE=1) a dry run without a GPU: tessera's fake
#             CUDA driver and NVML (compiled here against CUDA 13.0's headers) and an
#             emulated daemon; frameworks that are not installed are SKIPPED
# Results go to ${OUT:-gpu-check-out}/ (gpu-check-out/ is emptied first; the run tool's
# $OUT is already empty). The run tool brings back at most 8 files, so there are 7:
#   summary.txt  results.json  versions.txt  nvidia-smi.txt  selftest.json
#   selftest.txt  logs.tar.gz (every run's stdout and stderr, runs.jsonl, the daemon's
#                 log and events, tessera status snapshots)
# summary.txt and results.json are rewritten after every check, so a run cut short
# still says what it found. Exit status: 0 when no check FAILED, 1 when one did.
#
# Time: each check has its own limit, and the whole is held to a budget
# (TESSERA_GPU_CHECK_BUDGET_S, default 510 s): a check that would start with less than
# 15 s of it left is SKIPPED, and a check's limit is cut to what is left, so the script
# ends within about 9 minutes whatever hangs. A check that hangs is killed and FAILS
# "timed out"; a failing check never stops the others.
#
# Other settings: TESSERA_GPU_CHECK_SELFTEST_SECONDS (each fair-share check of the
# self-test, default 10; the test suite's dry run uses less), TESSERA_GPU_CHECK_REPEAT
# (runs of the self-test's launch and fair-weights checks after the rest, default 0), TESSERA_GPU_CHECK_PYTHON (default python3), TESSERA_GPU_CHECK_MEMORY
# (the tenants' limit, default 4GiB; training gets 16GiB, so that its step time is the
# interposer's and not the limit's).
#
# Run there with the device tool, carrying the build:
#   bash scripts/gpu-bin.sh                        # here: build, strip, copy to gpu-bin/
#   run(command="bash scripts/gpu-check.sh", carry=["gpu-bin"], timeout_s=600)
set -euo pipefail
export LC_ALL=C  # a decimal point in $EPOCHREALTIME and awk, whatever the locale

usage() {
  sed -n '/^# usage:/,/^# Results go/p' "$0" | sed '$d; s/^# \{0,1\}//'
}

root="$(cd "$(dirname "$0")/.." && pwd)"
here="$root/scripts/gpu-check"
fake="${TESSERA_GPU_CHECK_FAKE:-0}"
selftest_seconds="${TESSERA_GPU_CHECK_SELFTEST_SECONDS:-10}"
repeat="${TESSERA_GPU_CHECK_REPEAT:-0}"
case "$repeat" in '' | *[!0-9]*) echo "gpu-check: TESSERA_GPU_CHECK_REPEAT must be a count, not $repeat" >&2; exit 64 ;; esac
bin_arg=""
for arg in "$@"; do
  case "$arg" in
    --fake) fake=1 ;;
    -h | --help) usage; exit 0 ;;
    -*) echo "gpu-check: unknown option $arg" >&2; usage >&2; exit 64 ;;
    *) bin_arg="$arg" ;;
  esac
done
[ "$fake" = 1 ] || fake=0
mode_name=real
[ "$fake" = 0 ] || mode_name=fake

bin_dir="${bin_arg:-$root/gpu-bin}"
if [ ! -x "$bin_dir/tessera" ] || [ ! -f "$bin_dir/libtessera_cuda.so" ]; then
  echo "gpu-check: $bin_dir must hold tessera and libtessera_cuda.so: build them here with scripts/gpu-bin.sh (and carry gpu-bin)" >&2
  exit 66
fi
bin="$(cd "$bin_dir" && pwd)"

if [ -n "${OUT:-}" ]; then
  out="$OUT"
else
  out="$root/gpu-check-out"
  rm -rf "$out"
fi
mkdir -p "$out"
out="$(cd "$out" && pwd)"

python="${TESSERA_GPU_CHECK_PYTHON:-python3}"
budget="${TESSERA_GPU_CHECK_BUDGET_S:-510}"
memory="${TESSERA_GPU_CHECK_MEMORY:-4GiB}"
train_memory=16GiB
fake_mib=8192
# whatever the calling environment says of tessera, the runs here set it themselves
while IFS= read -r var; do unset "$var"; done < <(compgen -e | grep '^TESSERA_' || true)
unset LD_PRELOAD
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1

start_s=$SECONDS
# runtime files (sockets, ledgers, the fake driver, logs before packing) live in /tmp:
# a socket path must stay short, and $OUT must end with no more than 8 files
tmp="$(mktemp -d /tmp/tessera-gpu-check.XXXXXX)"
logs="$tmp/logs"
mkdir -p "$logs"
runs="$logs/runs.jsonl"
: >"$runs"
running=() # the runs in flight, for the exit trap to stop
daemon_pid=""
daemon_starts=0
sock=""

# record key=value ...: one line of runs.jsonl (numbers and true/false typed), written
# by Python so that any text in a reason is escaped properly
record() {
  python3 -c '
import json, sys
d = {}
for a in sys.argv[1:]:
    k, _, v = a.partition("=")
    if v in ("true", "false"):
        v = v == "true"
    else:
        for cast in (int, float):
            try:
                v = cast(v)
                break
            except ValueError:
                pass
    d[k] = v
print(json.dumps(d))' "$@" >>"$runs"
}

seconds_between() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b - a }'; }

judge() {
  python3 "$here/judge.py" --logs "$logs" --out "$out" --mode "$mode_name" "$@"
}

# The limit a check may run under: its own, or what is left of the budget when that is
# less; 0 when under 15 s are left (the check is then SKIPPED, not started)
time_for() {
  local want=$1 left
  left=$((budget - (SECONDS - start_s)))
  if ((left < 15)); then
    echo 0
  elif ((want < left)); then
    echo "$want"
  else
    echo "$left"
  fi
}

# run_one CHECK MODE LIMIT_S [key=value ...] -- COMMAND...
# One run under its own time limit, recorded in runs.jsonl however it ends. It runs in
# the background and is waited for, so that a TERM to this script is handled at once
# (bash runs traps only between foreground commands). key=value pairs go into the
# record; out=PATH sends stdout there instead of the logs.
run_one() {
  local check=$1 mode=$2 want=$3
  shift 3
  local extra=() stdout_file="$logs/$check.$mode.out" err="$logs/$check.$mode.err"
  while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do
    case "$1" in out=*) stdout_file="${1#out=}" ;; esac
    extra+=("$1")
    shift
  done
  shift
  local limit
  limit=$(time_for "$want")
  if [ "$limit" -eq 0 ]; then
    record check="$check" mode="$mode" skipped="not started: under 15 s left of the script's ${budget} s budget" "${extra[@]}"
    return 0
  fi
  echo "gpu-check: $check ($mode), at most $limit s" >&2
  local t0 t1 rc=0 pid timed_out=false
  t0=$EPOCHREALTIME
  timeout --kill-after=5 "$limit" "$@" >"$stdout_file" 2>"$err" </dev/null &
  pid=$!
  running=("$pid")
  wait "$pid" || rc=$?
  running=()
  t1=$EPOCHREALTIME
  # 124: timeout's TERM; 137: its KILL 5 s later. Either only counts as a timeout when
  # the limit was reached (a program may exit 124 itself, or be killed for memory).
  if { [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; } && awk -v a="$t0" -v b="$t1" -v l="$limit" 'BEGIN { exit !(b - a >= l - 1) }'; then
    timed_out=true
  fi
  record check="$check" mode="$mode" rc="$rc" wall_s="$(seconds_between "$t0" "$t1")" limit_s="$limit" \
    timed_out="$timed_out" out="$stdout_file" err="$err" "${extra[@]}"
  judge || echo "gpu-check: the judge failed (see above); going on" >&2
}

# The daemon the tenants run under: on the GPU machine `--cuda` (tessera's CUDA
# executor); in fake mode emulated GPUs matching the fake driver's one device. Should
# the CUDA executor not start, the check falls back to an emulated daemon of the real
# GPU's size ("fallback"): the tenants then still run on the real GPU under the
# interposer, so the framework checks still say what they can, and the summary says
# loudly that the daemon was not the CUDA one.
daemon_kind=cuda
[ "$fake" = 0 ] || daemon_kind=fake
daemon_gave_up=0

# The CPUs this script may use but the last (which `tessera selftest` gives its launch
# check), as taskset's list; empty where taskset is missing or there is one CPU.
cpus_but_last() {
  command -v taskset >/dev/null 2>&1 || return 0
  local allowed part a b i cpus=()
  allowed="$(awk '/^Cpus_allowed_list/ {print $2}' /proc/self/status 2>/dev/null)"
  IFS=, read -ra parts <<<"$allowed"
  for part in "${parts[@]}"; do
    if [[ "$part" == *-* ]]; then
      a="${part%-*}" b="${part#*-}"
      for ((i = a; i <= b; i++)); do cpus+=("$i"); done
    elif [ -n "$part" ]; then
      cpus+=("$part")
    fi
  done
  [ "${#cpus[@]}" -gt 1 ] || return 0
  unset 'cpus[-1]'
  (IFS=,; echo "${cpus[*]}")
}
daemon_cpus="$(cpus_but_last)"

start_daemon() {
  daemon_starts=$((daemon_starts + 1))
  sock="$tmp/d$daemon_starts.sock"
  local args=(--policy fair --socket "$sock" --ledger "$tmp/ledger$daemon_starts" --events "$logs/events.jsonl")
  case "$daemon_kind" in
    # slices in real time (speedup 1): the tenants' programs run at the wall clock's pace
    fake) args+=(--emulate --gpus 1 --gpu-memory-mib "$fake_mib" --speedup 1) ;;
    fallback) args+=(--emulate --gpus 1 --gpu-memory-mib "$gpu_mib" --speedup 1) ;;
    *) args+=(--cuda) ;;
  esac
  # the daemon kept off the last CPU, where the self-test's launch check runs its
  # programs (its threads there moved that check's numbers)
  local pin=()
  if [ -n "$daemon_cpus" ]; then pin=(taskset -c "$daemon_cpus"); fi
  echo "== start $daemon_starts ($daemon_kind): ${pin[*]} tessera daemon ${args[*]}" >>"$logs/daemon.log"
  RUST_LOG="${RUST_LOG:-info}" "${pin[@]}" "$bin/tessera" daemon "${args[@]}" >>"$logs/daemon.log" 2>&1 &
  daemon_pid=$!
  local t0=$EPOCHREALTIME i
  # the CUDA executor initialises the driver and every GPU before it listens
  for ((i = 0; i < 300; i++)); do
    if [ -S "$sock" ]; then
      record check=daemon mode="start.$daemon_starts" kind="$daemon_kind" rc=0 wall_s="$(seconds_between "$t0" "$EPOCHREALTIME")" \
        note="$daemon_kind daemon listening after $(seconds_between "$t0" "$EPOCHREALTIME") s: $(grep 'tesserad listening' "$logs/daemon.log" | tail -n 1 | tail -c 300 || true)"
      return 0
    fi
    if ! kill -0 "$daemon_pid" 2>/dev/null; then
      local rc=0
      wait "$daemon_pid" || rc=$?
      daemon_pid=""
      record check=daemon mode="start.$daemon_starts" kind="$daemon_kind" rc="$rc" \
        error="the $daemon_kind daemon exited with status $rc before listening: $(grep -v '^==' "$logs/daemon.log" | tail -n 2 | tr '\n' ' ' | tail -c 400)"
      return 1
    fi
    sleep 0.1
  done
  record check=daemon mode="start.$daemon_starts" kind="$daemon_kind" error="the $daemon_kind daemon was not listening after 30 s"
  stop_daemon
  return 1
}

stop_daemon() {
  [ -n "$daemon_pid" ] || return 0
  local i rc=0
  # SIGTERM drains: the daemon removes its socket, locks and ledger
  kill -TERM "$daemon_pid" 2>/dev/null || true
  for ((i = 0; i < 100; i++)); do
    kill -0 "$daemon_pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "$daemon_pid" 2>/dev/null || true
  wait "$daemon_pid" 2>/dev/null || rc=$?
  record check=daemon mode="stop.$daemon_starts" rc="$rc"
  daemon_pid=""
}

# The first start: the CUDA daemon, else the fallback.
first_daemon() {
  start_daemon && return 0
  if [ "$daemon_kind" = cuda ]; then
    echo "gpu-check: the --cuda daemon did not start (daemon.log in logs.tar.gz); FALLING BACK to an emulated daemon of the GPU's size" >&2
    daemon_kind=fallback
    start_daemon && return 0
  fi
  echo "gpu-check: no daemon started; the tenant runs will FAIL" >&2
  daemon_gave_up=1
  return 1
}

# A daemon that died is started again (three starts in all at most), so that one crash
# does not fail every later check; the death is recorded and shows in the summary.
ensure_daemon() {
  if [ -n "$daemon_pid" ] && kill -0 "$daemon_pid" 2>/dev/null; then
    return 0
  fi
  if [ -n "$daemon_pid" ]; then
    local rc=0
    wait "$daemon_pid" || rc=$?
    daemon_pid=""
    record check=daemon mode="died.$daemon_starts" kind="$daemon_kind" rc="$rc" \
      error="the $daemon_kind daemon exited with status $rc while the checks ran: $(tail -n 2 "$logs/daemon.log" | tr '\n' ' ' | tail -c 400)"
  fi
  if [ "$daemon_gave_up" = 1 ] || [ "$daemon_starts" -ge 4 ]; then
    return 1
  fi
  start_daemon
}

# run_tenant CHECK MODE LIMIT_S MEMORY WEIGHT -- COMMAND...: the command under
# `tessera run` (WEIGHT - for the default)
run_tenant() {
  local check=$1 mode=$2 want=$3 mem=$4 weight=$5
  shift 5
  if [ "$1" = "--" ]; then shift; fi
  local flags
  if ! ensure_daemon; then
    record check="$check" mode="$mode" memory="$mem" error="no daemon to run under: $(grep -v '^==' "$logs/daemon.log" | tail -n 1 | tail -c 300)"
    return 0
  fi
  # after ensure_daemon: a restarted daemon listens on a socket of its own
  flags=(--socket "$sock" --preload "$bin/libtessera_cuda.so" --memory "$mem")
  [ "$weight" = - ] || flags+=(--weight "$weight")
  run_one "$check" "$mode" "$want" memory="$mem" weight="$weight" -- "$bin/tessera" run "${flags[@]}" -- "$@"
}

# both CHECK LIMIT_S MEMORY -- COMMAND...: the program directly, then as a tenant
both() {
  local check=$1 want=$2 mem=$3
  shift 3
  if [ "$1" = "--" ]; then shift; fi
  run_one "$check" direct "$want" -- "$@"
  run_tenant "$check" tessera "$want" "$mem" - -- "$@"
}

# share_pair MODE LIMIT_S: two torch_share.py programs at once, each under its own
# time limit; under tessera at weights 1 and 3, with `tessera status --json` saved
# every second meanwhile (the daemon's own view of their shares)
share_pair() {
  local mode=$1 want=$2 limit
  limit=$(time_for "$want")
  local names=(a b) weights=(- -)
  if [ "$mode" = tessera ]; then
    names=(w1 w3)
    weights=(1 3)
  fi
  if [ "$limit" -eq 0 ]; then
    record check=torch.share mode="$mode.${names[0]}" skipped="not started: under 15 s left of the script's ${budget} s budget"
    record check=torch.share mode="$mode.${names[1]}" skipped="not started: under 15 s left of the script's ${budget} s budget"
    return 0
  fi
  if [ "$mode" = tessera ] && ! ensure_daemon; then
    record check=torch.share mode="$mode.w1" error="no daemon to run under"
    record check=torch.share mode="$mode.w3" error="no daemon to run under"
    return 0
  fi
  local barrier="$tmp/barrier.$mode" pids=() t0s=() i cmd
  mkdir -p "$barrier"
  echo "gpu-check: torch.share ($mode pair), at most $limit s" >&2
  for i in 0 1; do
    cmd=("$python" "$here/torch_share.py" --name "${names[$i]}" --barrier "$barrier")
    if [ "$mode" = tessera ]; then
      cmd=("$bin/tessera" run --socket "$sock" --preload "$bin/libtessera_cuda.so" --memory "$memory" --weight "${weights[$i]}" -- "${cmd[@]}")
    fi
    t0s[i]=$EPOCHREALTIME
    timeout --kill-after=5 "$limit" "${cmd[@]}" >"$logs/torch.share.$mode.${names[$i]}.out" \
      2>"$logs/torch.share.$mode.${names[$i]}.err" </dev/null &
    pids[i]=$!
  done
  running=("${pids[@]}")
  local n=0
  while kill -0 "${pids[0]}" 2>/dev/null || kill -0 "${pids[1]}" 2>/dev/null; do
    sleep 1
    if [ "$mode" = tessera ]; then
      n=$((n + 1))
      timeout 5 "$bin/tessera" status --socket "$sock" --json >"$logs/torch.share.status.$n.json" 2>/dev/null || true
    fi
  done
  local rc t1 timed_out
  for i in 0 1; do
    rc=0
    wait "${pids[$i]}" || rc=$?
    t1=$EPOCHREALTIME
    timed_out=false
    if { [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; } && awk -v a="${t0s[$i]}" -v b="$t1" -v l="$limit" 'BEGIN { exit !(b - a >= l - 1) }'; then
      timed_out=true
    fi
    record check=torch.share mode="$mode.${names[$i]}" rc="$rc" wall_s="$(seconds_between "${t0s[$i]}" "$t1")" \
      limit_s="$limit" timed_out="$timed_out" out="$logs/torch.share.$mode.${names[$i]}.out" \
      err="$logs/torch.share.$mode.${names[$i]}.err" memory="$memory" weight="${weights[$i]}"
  done
  running=()
  judge || true
}

# What the check ran on, before anything else touches the GPU.
write_versions() {
  {
    echo "== tessera GPU check, $mode_name mode"
    echo "date: $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
    echo "host: $(uname -a)"
    if [ "$fake" = 1 ]; then
      echo "GPU: none -- tessera's FAKE CUDA driver and NVML (compiled against CUDA 13.0's headers), an emulated daemon"
    fi
    echo
    echo "== nvidia-smi -q (header)"
    if command -v nvidia-smi >/dev/null; then
      timeout 20 nvidia-smi -q 2>&1 | sed -n '1,/^GPU /p' | head -n 30 || true
      echo
      echo "== GPUs"
      timeout 20 nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total,compute_cap,pci.bus_id --format=csv 2>&1 || true
    else
      echo "nvidia-smi: not on the PATH"
    fi
    echo
    echo "== tessera"
    "$bin/tessera" --version 2>&1 || true
    cat "$bin/BUILD-INFO" 2>/dev/null || echo "(no BUILD-INFO beside the binaries)"
    sha256sum "$bin/tessera" "$bin/libtessera_cuda.so" 2>/dev/null | sed "s|$bin/||" || true
    echo
    echo "== python ($python)"
    timeout 45 "$python" - <<'PY' 2>&1 || echo "(the Python probe failed or timed out)"
import importlib.metadata as md, platform, sys
print("python", sys.version.replace("\n", " "), "at", sys.executable)
for name in ["torch", "torchvision", "cupy-cuda13x", "cupy-cuda12x", "numba", "numba-cuda",
             "cuda-core", "cuda-bindings", "cuda-python", "nvidia-ml-py", "numpy",
             "nvidia-cuda-nvrtc", "nvidia-cudnn-cu13", "cuda-toolkit"]:
    try:
        print(f"{name:<20} {md.version(name)}")
    except md.PackageNotFoundError:
        print(f"{name:<20} not installed")
try:
    import torch
    print("torch.version.cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())
except Exception as e:
    print("import torch:", type(e).__name__, e)
PY
    echo
    echo "== CUDA toolkit"
    if command -v nvcc >/dev/null; then nvcc --version 2>&1 | tail -n 2; else echo "nvcc: not on the PATH"; fi
    echo "cc: $(cc --version 2>/dev/null | head -n 1 || echo none)"
  } >"$out/versions.txt" 2>&1
  if command -v nvidia-smi >/dev/null; then
    { echo "== nvidia-smi at the start"; timeout 20 nvidia-smi 2>&1; echo; echo "== nvidia-smi -q"; timeout 20 nvidia-smi -q 2>&1; } >"$out/nvidia-smi.txt" || true
    timeout 20 nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -n 1 >"$logs/gpu-name.txt" || true
  else
    echo "nvidia-smi is not on the PATH ($mode_name mode)" >"$out/nvidia-smi.txt"
    [ "$fake" = 0 ] || echo "none: tessera's fake CUDA driver ($fake_mib MiB device)" >"$logs/gpu-name.txt"
  fi
}

# shellcheck disable=SC2317 # reached through the EXIT trap
finish() {
  local status=$? judged=0 p f
  set +e
  trap - EXIT INT TERM
  # runs still in flight (the script was interrupted): timeout passes the TERM on
  for p in "${running[@]}"; do
    kill -TERM "$p" 2>/dev/null
  done
  stop_daemon
  if command -v nvidia-smi >/dev/null; then
    { echo; echo "== nvidia-smi at the end"; timeout 20 nvidia-smi 2>&1; } >>"$out/nvidia-smi.txt"
  fi
  echo $((SECONDS - start_s)) >"$logs/elapsed.txt"
  judge --final || judged=$?
  # the run tool brings back files of up to 16 MiB: a runaway log keeps its last 4 MiB
  for f in "$logs"/*; do
    if [ -f "$f" ] && [ "$(stat -c %s "$f")" -gt 4194304 ]; then
      tail -c 4194304 "$f" >"$f.tail" && mv "$f.tail" "$f"
    fi
  done
  tar -czf "$out/logs.tar.gz" -C "$tmp" logs
  rm -rf "$tmp"
  echo "gpu-check: results in $out (summary.txt, results.json, logs.tar.gz)" >&2
  if [ "$status" -eq 0 ] && [ "$judged" -ne 0 ]; then
    status=1
  fi
  exit "$status"
}
trap finish EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [ "$fake" = 1 ]; then
  # tessera's fake driver and NVML stand in for NVIDIA's, compiled against CUDA 13.0's
  # headers as the tests do (fetched from PyPI into ~/.cache/tessera the first time)
  nvidia="$(TESSERA_CUDA_VERSION=13.0 bash "$root/scripts/fetch-nvidia-artifacts.sh")"
  fakedir="$tmp/fake"
  mkdir -p "$fakedir"
  for lib in libcuda.so.1:fake_libcuda.c libnvidia-ml.so.1:fake_libnvml.c; do
    if ! cc -shared -fPIC -Wl,-Bsymbolic -Wl,-soname,"${lib%%:*}" -O1 -I "$nvidia/include" -o "$fakedir/${lib%%:*}" \
      "$root/crates/tessera-driver/fake/${lib#*:}" -lpthread 2>>"$logs/fake-build.log"; then
      echo "gpu-check: building the fake ${lib%%:*} failed:" >&2
      tail -n 5 "$logs/fake-build.log" >&2
      exit 1
    fi
  done
  ln -sf libcuda.so.1 "$fakedir/libcuda.so"
  export LD_LIBRARY_PATH="$fakedir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export FAKE_CUDA_DEVICES=1 FAKE_CUDA_DEVICE_MIB="$fake_mib" FAKE_CUDA_STATS=0
  cuda_include="$nvidia/include"
  cuda_link=(-L "$fakedir" -lcuda)
else
  # numba-cuda finds NVVM and libdevice under CUDA_HOME when no wheel brings them
  if [ -z "${CUDA_HOME:-}" ] && [ -d /usr/local/cuda ]; then
    export CUDA_HOME=/usr/local/cuda
  fi
  cuda_include=""
  cuda_link=()
  for d in "${CUDA_HOME:-}" /usr/local/cuda /usr/local/cuda-13.0 /usr/local/cuda-13; do
    if [ -n "$d" ] && [ -f "$d/include/cuda.h" ]; then
      cuda_include="$d/include"
      for stubs in "$d/lib64/stubs" "$d/targets/x86_64-linux/lib/stubs"; do
        if [ -f "$stubs/libcuda.so" ]; then
          cuda_link=(-L "$stubs" -lcuda)
          break
        fi
      done
      break
    fi
  done
  if [ "${#cuda_link[@]}" -eq 0 ]; then
    # no toolkit stub: link against the driver itself
    libcuda="$(ldconfig -p 2>/dev/null | awk '/libcuda\.so\.1 / { print $NF; exit }')"
    if [ -n "$libcuda" ]; then
      cuda_link=("$libcuda")
    fi
  fi
fi

write_versions
# the GPU's memory, MiB: the fallback daemon's emulated GPU is that size
gpu_mib="$(timeout 20 nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -n 1 | tr -dc 0-9 || true)"
gpu_mib="${gpu_mib:-81920}"

first_daemon || true

# --- selftest: tessera's own check of the node (tenants' share, memory limits, a killed
# program's memory, the launch path's cost, fair shares), through this daemon. Its
# text table is run again at the very end, with whatever time is left.
if ensure_daemon; then
  run_one selftest tessera.json 150 out="$out/selftest.json" -- "$bin/tessera" selftest --socket "$sock" --seconds "$selftest_seconds" --json
else
  record check=selftest mode=tessera.json error="no daemon to test"
fi

# --- nvidia-smi inside a tenant
both nvidia-smi 30 "$memory" -- "$python" "$here/nvidia_smi_check.py"

# --- a plain C driver-API program, built here
axpy="$tmp/cuda_axpy"
if [ -z "$cuda_include" ] || [ "${#cuda_link[@]}" -eq 0 ]; then
  why="no cuda.h or libcuda to build examples/cuda_axpy.c with (looked in CUDA_HOME, /usr/local/cuda)"
  record check=c.axpy mode=direct skipped="$why"
  record check=c.axpy mode=tessera skipped="$why" memory="$memory"
elif ! timeout 60 cc -O1 -I "$cuda_include" -o "$axpy" "$root/examples/cuda_axpy.c" "${cuda_link[@]}" >"$logs/c.axpy.build.log" 2>&1; then
  why="examples/cuda_axpy.c did not build: $(tail -n 1 "$logs/c.axpy.build.log")"
  record check=c.axpy mode=direct skipped="$why"
  record check=c.axpy mode=tessera skipped="$why" memory="$memory"
else
  both c.axpy 30 "$memory" -- "$axpy" 4000000 50
fi

# --- PyTorch
both torch.limits 90 "$memory" -- "$python" "$here/torch_check.py" limits
run_one torch.train direct 150 -- "$python" "$here/torch_check.py" train
run_tenant torch.train tessera 150 "$train_memory" - -- "$python" "$here/torch_check.py" train
share_pair direct 90
share_pair tessera 90
both torch.graph 90 "$memory" -- "$python" "$here/torch_check.py" graph
both torch.dataloader 120 "$memory" -- "$python" "$here/torch_check.py" dataloader

# --- the other frameworks users run
both cupy 90 "$memory" -- "$python" "$here/cupy_check.py"
both numba 120 "$memory" -- "$python" "$here/numba_check.py"
both cuda-core 90 "$memory" -- "$python" "$here/cuda_core_check.py"

# --- the self-test's two noisiest checks again (the launch path's cost, 1:3 shares),
# TESSERA_GPU_CHECK_REPEAT times (default 0): more samples of the same claims, each
# judged like the first (logs/selftest.repeat.K.out)
for ((k = 1; k <= repeat; k++)); do
  if ensure_daemon; then
    run_one selftest "repeat.$k" 60 -- "$bin/tessera" selftest --socket "$sock" --seconds "$selftest_seconds" --only launch,fair-weights --json
  fi
done

# --- selftest's text table, for a person (the same checks as selftest.json)
if grep '"check": "selftest"' "$runs" | grep -q '"timed_out": true'; then
  record check=selftest mode=tessera.text skipped="the --json run timed out"
elif ensure_daemon; then
  run_one selftest tessera.text 120 out="$out/selftest.txt" -- "$bin/tessera" selftest --socket "$sock" --seconds "$selftest_seconds"
else
  record check=selftest mode=tessera.text error="no daemon to test"
fi

exit 0

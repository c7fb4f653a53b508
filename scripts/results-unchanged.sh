#!/usr/bin/env bash
# Re-run every paper's experiment into a scratch directory and compare each
# results.json with the committed one under docs/results/: what a change that should
# not move any number must leave alone. Byte for byte, except wall-clock measurements
# (gpu-lets' scheduler decision times, keys starting "decision_us"), which differ on
# every run and are compared by key only. Prints each experiment's CPU time (user and
# system, from bash's `time`), the figure issue 55's budgets are stated in. Usage:
#   scripts/results-unchanged.sh [experiment ...]     (default: all six)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p tessera
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
status=0
for e in ${@:-flexy schedgpu dcuda fairgv gpulets node}; do
  TIMEFORMAT="$e: %U s user, %S s system, %R s wall"
  time target/release/tessera sim "$e" --out "$out/$e" > /dev/null
  if python3 - "$out/$e/results.json" "docs/results/$e/results.json" <<'PY'
import json, sys
def strip(v):
    if isinstance(v, dict):
        return {k: (None if k.startswith("decision_us") else strip(x)) for k, x in v.items()}
    if isinstance(v, list):
        return [strip(x) for x in v]
    return v
a, b = (strip(json.load(open(p))) for p in sys.argv[1:3])
sys.exit(0 if a == b else 1)
PY
  then
    echo "$e: results.json unchanged"
  else
    echo "$e: results.json CHANGED"
    status=1
  fi
done
exit $status

#!/usr/bin/env bash
# Instructions per task completed of the simulator, per policy and node scale, counted
# with callgrind (valgrind, from Debian; installed with apt-get when missing and root):
# only what runs inside the bench's `measure_scaled` is counted (--toggle-collect: the
# scaled rows' simulations, not the Flexy rows, the warm-up or the floor), and divided
# by the tasks those simulations completed (from `tessera bench sim --json`). Instruction
# counts do not depend on the machine's load, unlike times (issue 55).
#
# usage: scripts/sim-instructions.sh [TESSERA_BINARY] [SCALES] [POLICY_FILTER]
#   TESSERA_BINARY defaults to target/release/tessera (built if missing)
#   SCALES defaults to 1,100; POLICY_FILTER (a label substring, e.g. Node) to all
# Prints one line per policy and scale: policy, scale, tasks, instructions per task,
# and per policy the 100x/1x ratio.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin="${1:-$root/target/release/tessera}"
scales="${2:-1,100}"
only="${3:-}"
bash "$root/scripts/ensure-valgrind.sh"
[ -x "$bin" ] || (cd "$root" && cargo build --release -p tessera >&2)
labels=$("$bin" bench sim --runs 1 --scales 1 --floor-ms 1 --json 2>/dev/null \
  | python3 -c 'import json,sys; print("\n".join(sorted({l["policy"] for l in map(json.loads, sys.stdin) if l.get("workload")=="colocated"})))')
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf "%-14s %6s %9s %14s\n" policy scale tasks instr/task
while IFS= read -r label; do
  [ -n "$label" ] || continue
  case "$label" in *"$only"*) ;; *) continue ;; esac
  first=""
  for scale in ${scales//,/ }; do
    out="$work/out.json"
    valgrind --tool=callgrind --callgrind-out-file="$work/cg.out" \
      --toggle-collect='tessera::bench::sim::measure_scaled' \
      "$bin" bench sim --runs 1 --scales "$scale" --only "$label" --floor-ms 1 --json \
      > "$out" 2> "$work/vg.err"
    ir=$(sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$work/vg.err" | tail -1)
    tasks=$(python3 -c 'import json,sys; print(sum(l["tasks"] for l in map(json.loads, open(sys.argv[1])) if l.get("workload")=="colocated" and l["policy"]==sys.argv[2]))' "$out" "$label")
    per=$(( ir / tasks ))
    printf "%-14s %6s %9s %14s\n" "$label" "${scale}x" "$tasks" "$per"
    if [ -z "$first" ]; then first=$per; else
      python3 -c 'import sys; print(f"{sys.argv[1]:<14} {int(sys.argv[3])/int(sys.argv[2]):.2f}x from the first scale")' "$label" "$first" "$per"
    fi
  done
done <<< "$labels"

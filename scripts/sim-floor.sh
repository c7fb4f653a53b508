#!/usr/bin/env bash
# Instructions per task of the simulator's floor (crates/tessera-sim/examples/
# engine_floor.rs: an engine of the same shape doing only what round robin needs, on
# `tessera bench sim`'s co-location workload), counted with callgrind as
# scripts/sim-instructions.sh counts the engine's (issue 55): with the real RoundRobin
# policy (`lean`) and with a round robin holding only the state it needs (`leanest`).
# The example checks itself against the engine (events, makespan, longest wait) first.
#
# usage: scripts/sim-floor.sh [SCALES]     (default 1,100)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
scales="${1:-1,100}"
bash "$root/scripts/ensure-valgrind.sh"
(cd "$root" && cargo build --release -q -p tessera-sim --example engine_floor >&2)
bin="$root/target/release/examples/engine_floor"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf "%-10s %6s %9s %14s\n" floor scale tasks instr/task
for scale in ${scales//,/ }; do
  for f in lean leanest; do
    valgrind --tool=callgrind --callgrind-out-file="$work/cg.out" \
      --toggle-collect="engine_floor::measure_$f" "$bin" "$scale" > "$work/out" 2> "$work/vg.err"
    ir=$(sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$work/vg.err" | tail -1)
    tasks=$(sed -n 's/^tasks \([0-9]*\):.*/\1/p' "$work/out")
    printf "%-10s %6s %9s %14s\n" "$f" "${scale}x" "$tasks" "$(( ir / tasks ))"
  done
done

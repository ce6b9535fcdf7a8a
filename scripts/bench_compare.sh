#!/usr/bin/env bash
# Before/after check of the CPU benchmarks: builds the tessera rows of the given benchmarks at
# REV and at the working tree, each with that version's default options, runs them one after the
# other on the same machine and prints, per benchmark, the time after / the time before (medians
# of the repetitions). Above 1 is slower now. The machine is shared and noisy: rerun what moves.
#
#   scripts/bench_compare.sh REV [BENCH...]   default: bench_elementwise bench_matmul bench_pool
#                                             bench_conv; REPS (default 3) repetitions each
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
rev="${1:?usage: scripts/bench_compare.sh REV [BENCH...]}"
shift
benches=("$@")
((${#benches[@]})) || benches=(bench_elementwise bench_matmul bench_pool bench_conv)
reps="${REPS:-3}"
work="$(mktemp -d)"
trap 'git worktree remove --force "$work/src" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT

git worktree add --detach "$work/src" "$rev" >/dev/null 2>&1
opts=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSERA_BUILD_TESTS=OFF -DTESSERA_BUILD_EXAMPLES=OFF)
cmake -S "$work/src" -B "$work/before" "${opts[@]}" >/dev/null
cmake -S . -B "$work/after" "${opts[@]}" >/dev/null
for side in before after; do
  cmake --build "$work/$side" --target "${benches[@]}" >/dev/null
done

args=(--benchmark_filter='[Tt]essera' --benchmark_repetitions="$reps"
      --benchmark_report_aggregates_only=true --benchmark_format=json)
for b in "${benches[@]}"; do
  for side in before after; do
    "$work/$side/bench/$b" "${args[@]}" >"$work/$b.$side.json" 2>/dev/null
  done
  /usr/bin/env python3 - "$b" "$work/$b.before.json" "$work/$b.after.json" <<'PY'
import json, sys
def medians(path):
    rows = json.load(open(path))["benchmarks"]
    return {r["run_name"]: r["real_time"] for r in rows if r.get("aggregate_name") == "median"}
name, before, after = sys.argv[1], medians(sys.argv[2]), medians(sys.argv[3])
common = [k for k in after if k in before]
print(f"== {name}: after / before time, median of each ({len(common)} benchmarks)")
for k in common:
    print(f"  {after[k] / before[k]:6.3f}  {k}")
ratios = sorted(after[k] / before[k] for k in common)
if ratios:
    print(f"  median {ratios[len(ratios) // 2]:.3f}, worst {ratios[-1]:.3f}, best {ratios[0]:.3f}")
PY
done

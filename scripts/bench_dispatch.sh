#!/usr/bin/env bash
# Compares what a user's program gets from tessera built with plain -O2 (the CPU kernels choose
# their instruction set at run time) against the same program built with -O2 -march=native.
# Installs tessera from this checkout into a temporary prefix, builds bench/dispatch against it
# as a consumer would (find_package), runs both binaries alternately and prints the ratios.
#
#   scripts/bench_dispatch.sh [REPETITIONS]     default 5; the median of each is compared
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
reps="${1:-5}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

cmake -S . -B "$work/tessera" -G Ninja -DTESSERA_BUILD_TESTS=OFF -DTESSERA_BUILD_BENCH=OFF \
  -DTESSERA_BUILD_EXAMPLES=OFF >/dev/null
cmake --install "$work/tessera" --prefix "$work/prefix" >/dev/null
cmake -S bench/dispatch -B "$work/consumer" -G Ninja -DCMAKE_BUILD_TYPE=None \
  -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/consumer" >/dev/null

args=(--benchmark_repetitions="$reps" --benchmark_report_aggregates_only=true
      --benchmark_format=json)
"$work/consumer/dispatch_plain" "${args[@]}" >"$work/plain.json"
"$work/consumer/dispatch_native" "${args[@]}" >"$work/native.json"
/usr/bin/env python3 - "$work/plain.json" "$work/native.json" <<'PY'
import json, sys
def medians(path):
    rows = json.load(open(path))["benchmarks"]
    return {r["run_name"].split("/")[0]: (r["real_time"], r["run_name"])
            for r in rows if r.get("aggregate_name") == "median"}
plain, native = medians(sys.argv[1]), medians(sys.argv[2])
print(f"{'op':28} {'plain -O2 (ms)':>15} {'-march=native (ms)':>19} {'plain / native':>15}")
for op in plain:
    p, pn = plain[op]; n, nn = native[op]
    print(f"{op:28} {p:15.3f} {n:19.3f} {p / n:15.3f}   ({pn.split('/')[2]} vs {nn.split('/')[2]})")
PY

#!/usr/bin/env bash
# Compares tessera's SIMD layer with xsimd and Google Highway on the GEMM micro-kernel and on
# elementwise exp and tanh (bench/simd_libs): one binary per instruction set (AVX2 as on Haswell,
# and -march=native), one thread. Each binary first prints every library's worst exp and tanh
# error in ulp. Needs libxsimd-dev and libhwy-dev (scripts/bootstrap.sh bench).
#
#   scripts/bench_simd_libs.sh [REPETITIONS]     default 5; medians are printed
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
reps="${1:-5}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

cmake -S bench/simd_libs -B "$work" -G Ninja -DCMAKE_BUILD_TYPE=None >/dev/null
cmake --build "$work" >/dev/null
for isa in avx2 native; do
  echo "== simd_libs_$isa"
  "$work/simd_libs_$isa" --benchmark_repetitions="$reps" --benchmark_report_aggregates_only=true \
    --benchmark_counters_tabular=true 2>/dev/null | grep -v '_mean\|_stddev\|_cv'
done

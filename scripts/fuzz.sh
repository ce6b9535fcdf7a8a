#!/usr/bin/env bash
# Builds and runs tessera's libFuzzer harnesses (fuzz/): the .npy, .npz, IDX and safetensors
# readers, and a structured harness of shape, view, broadcast, reduction and matmul calls checked
# against a reference. Each harness is built with clang++ -fsanitize=fuzzer,address,undefined.
#
#   scripts/fuzz.sh run SECONDS [HARNESS...]   build, then fuzz each for SECONDS (default: all)
#   scripts/fuzz.sh runs N [HARNESS...]        build, then fuzz each for N executions
#   scripts/fuzz.sh ci                         build, then the fixed runs CI makes (below)
#   scripts/fuzz.sh build                      build only
#
# `ci` runs each harness for a fixed number of executions (about 8 s each) with a fixed seed,
# so a run that passed passes again on the same code: CI is a gate, long runs are for finding.
# Otherwise the seed is libFuzzer's random one, or TESSERA_FUZZ_SEED when set.
# Each run starts from the committed corpus fuzz/corpus/HARNESS and writes the inputs it finds
# to build-fuzz/corpus/HARNESS (the committed corpus is not changed). A crash, a sanitizer report
# or a mismatch with the reference stops the run, exits non-zero and leaves the input in
# build-fuzz/artifacts/ (replay it: build-fuzz/fuzz_HARNESS FILE; FUZZ_OPS_TRACE=1 prints the
# calls fuzz_ops makes). Needs clang and its fuzzer runtime: scripts/bootstrap.sh fuzz.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
all=(npy npz idx safetensors ops)
out=build-fuzz
cxx="${FUZZ_CXX:-clang++}"
seed="${TESSERA_FUZZ_SEED:-0}"  # 0: libFuzzer picks one

build() {
  mkdir -p "$out"
  for h in "${all[@]}"; do
    local bin="$out/fuzz_$h" src="fuzz/fuzz_$h.cpp"
    # Rebuild when the harness or any header is newer than the binary.
    if [[ -x "$bin" && -z "$(find "$src" fuzz/harness.hpp include -newer "$bin" -print -quit)" ]]; then
      continue
    fi
    echo "fuzz.sh: building $bin"
    # -march=native: one kernel pass, the one the dispatch would run on this machine (the
    # others would be compiled and never executed).
    "$cxx" -std=c++20 -O1 -g -fno-omit-frame-pointer -march=native \
      -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
      -Iinclude "$src" -o "$bin" -lz
  done
}

fuzz() {
  local mode="$1" amount="$2"
  shift 2
  local names=("$@")
  ((${#names[@]})) || names=("${all[@]}")
  mkdir -p "$out/artifacts"
  for h in "${names[@]}"; do
    [[ -f "fuzz/fuzz_$h.cpp" ]] || {
      echo "fuzz.sh: no harness '$h' (have: ${all[*]})" >&2
      exit 2
    }
    mkdir -p "$out/corpus/$h"
    local limit=(-max_total_time="$amount")
    [[ "$mode" == runs ]] && limit=(-runs="$amount")
    echo "fuzz.sh: fuzz_$h, ${mode/runs/executions} $amount"
    # -malloc_limit_mb: no input may make the reader allocate more than 2 GiB at once.
    # -rss_limit_mb: the whole process; libFuzzer's own tables grow over a long run (about
    # 110 MB per million executions of fuzz_ops), so runs past a few million need more
    # (FUZZ_RSS_LIMIT_MB).
    "$out/fuzz_$h" "${limit[@]}" -seed="$seed" -malloc_limit_mb=2048 \
      -rss_limit_mb="${FUZZ_RSS_LIMIT_MB:-2048}" -print_final_stats=1 \
      -artifact_prefix="$out/artifacts/$h-" "$out/corpus/$h" "fuzz/corpus/$h" \
      2>"$out/fuzz_$h.log" || {
      tail -n 40 "$out/fuzz_$h.log" >&2
      echo "fuzz.sh: fuzz_$h found a failure (input in $out/artifacts/)" >&2
      exit 1
    }
    grep -E 'stat::number_of_executed_units|stat::average_exec_per_sec' "$out/fuzz_$h.log" |
      sed "s/^/  fuzz_$h /"
  done
}

case "${1:-}" in
  build) build ;;
  run) build && fuzz time "${2:?seconds}" "${@:3}" ;;
  runs) build && fuzz runs "${2:?count}" "${@:3}" ;;
  ci)
    build
    seed=1
    for h_n in npy:40000 npz:125000 idx:15000 safetensors:40000 ops:20000; do fuzz runs "${h_n#*:}" "${h_n%%:*}"; done
    ;;
  *)
    sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac

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
# calls fuzz_ops makes). Builds and runs FUZZ_JOBS harnesses at once (default: one per core).
# Needs clang and its fuzzer runtime: scripts/bootstrap.sh fuzz.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
self="$PWD/scripts/fuzz.sh"
# Longest build first, so that the short ones fill the other cores.
all=(ops safetensors npz npy idx)
out=build-fuzz
cxx="${FUZZ_CXX:-clang++}"
seed="${TESSERA_FUZZ_SEED:-0}"  # 0: libFuzzer picks one
jobs="${FUZZ_JOBS:-$(nproc)}"    # harnesses built, and fuzzed, at once

build_one() {
  local h="$1"
  local bin="$out/fuzz_$h" src="fuzz/fuzz_$h.cpp"
  # Rebuild when the harness or any header is newer than the binary.
  if [[ -x "$bin" && -z "$(find "$src" fuzz/harness.hpp include -newer "$bin" -print -quit)" ]]; then
    return
  fi
  echo "fuzz.sh: building $bin"
  # -march=native: one kernel pass, the one the dispatch would run on this machine (the
  # others would be compiled and never executed).
  "$cxx" -std=c++20 -O1 -g -fno-omit-frame-pointer -march=native \
    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -Iinclude "$src" -o "$bin" -lz
}

build() {
  mkdir -p "$out"
  printf '%s\n' "${all[@]}" | xargs -P "$jobs" -I{} "$self" _build {} || {
    echo "fuzz.sh: a harness did not build" >&2
    exit 1
  }
}

# fuzz_one MODE AMOUNT HARNESS: one harness for AMOUNT seconds (time) or executions (runs).
fuzz_one() {
  local mode="$1" amount="$2" h="$3"
  [[ -f "fuzz/fuzz_$h.cpp" ]] || {
    echo "fuzz.sh: no harness '$h' (have: ${all[*]})" >&2
    exit 2
  }
  mkdir -p "$out/corpus/$h" "$out/artifacts"
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
}

# fuzz MODE: reads "HARNESS AMOUNT" lines and fuzzes `jobs` harnesses at once (each run is
# single-threaded; a fixed number of executions with a fixed seed gives the same run).
fuzz() {
  local mode="$1"
  xargs -P "$jobs" -L 1 "$self" "_$mode" || {
    echo "fuzz.sh: a harness failed (see above)" >&2
    exit 1
  }
}

# Every named harness (default: all) with the same AMOUNT.
each() {
  local amount="$1"
  shift
  local names=("$@")
  ((${#names[@]})) || names=("${all[@]}")
  for h in "${names[@]}"; do echo "$h $amount"; done
}

case "${1:-}" in
  build) build ;;
  run) build && each "${2:?seconds}" "${@:3}" | fuzz time ;;
  runs) build && each "${2:?count}" "${@:3}" | fuzz runs ;;
  ci)
    build
    export TESSERA_FUZZ_SEED=1
    printf '%s\n' "ops 20000" "safetensors 40000" "npz 125000" "npy 40000" "idx 15000" | fuzz runs
    ;;
  # Internal: one harness, run by xargs above.
  _build) build_one "$2" ;;
  _time | _runs) fuzz_one "${1#_}" "$3" "$2" ;;
  *)
    sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac

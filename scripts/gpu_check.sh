#!/usr/bin/env bash
# gpu_check.sh - what a session with a GPU should run, in one call: the CUDA test suite, the same
# under compute-sanitizer (memcheck, racecheck, synccheck), the CUDA benchmarks (GEMM and
# bandwidth vs cuBLAS, convolution vs cuDNN, the training step vs PyTorch), the example trained
# on the GPU next to the CPU run, and the report tables (scripts/cuda_report.py).
#
#   scripts/gpu_check.sh bundle [BUILD_DIR] [BUNDLE]   on the build machine
#   scripts/gpu_check.sh run [BUNDLE] [OUT_DIR] [STEP...]   on the GPU machine
#
# STEPs (default: all, in this order): tests memcheck racecheck synccheck bench_cuda
# bench_cuda_train bench_cuda_conv torch example; a device call is limited to 10 minutes, so a
# session runs them over several calls into one OUT_DIR (the report reads whatever is there).
# Each step is stopped after TESSERA_GPU_STEP_SECONDS (default 540; rc 124): a kernel that
# hangs costs one step, not the call.
# Defaults: BUILD_DIR build-cuda, BUNDLE gpu-bundle, OUT_DIR gpu-results. `bundle` also packs the
# folder into BUNDLE.tgz (a build for one architecture: 84 MB unpacked, 48 MB packed, under the
# 64 MiB a device call carries); `run` accepts the folder or the .tgz. `bundle` copies the
# programs (tessera_cuda_tests, bench_cuda, bench_cuda_conv, bench_cuda_train, fashion_mnist,
# fashion_mnist_cuda: build them with the test-cuda preset for the GPU's architecture, e.g.
# CMAKE_CUDA_ARCHITECTURES=90, which also keeps the bundle small), the PyTorch script and the
# report script, the shared libraries they need that a CUDA image lacks (Google Benchmark), and
# the Fashion-MNIST files, so a GPU machine with the CUDA driver, toolkit and PyTorch can run
# them. cuDNN is found at run time in the toolkit or in PyTorch's nvidia-cudnn package. `run`
# writes each step's log to OUT_DIR, goes on after a failure, and
# ends with a short summary (the end of the output is what a remote call returns).
set -uo pipefail

mode="${1:-run}"

if [[ "$mode" == bundle ]]; then
  set -e
  build="${2:-build-cuda}"
  dest="${3:-gpu-bundle}"
  mkdir -p "$dest/bin" "$dest/lib" "$dest/data"
  cp "$build/tests/cuda/tessera_cuda_tests" "$build/bench/bench_cuda" "$build/bench/bench_cuda_conv" \
    "$build/bench/bench_cuda_train" "$build/examples/fashion_mnist" \
    "$build/examples/fashion_mnist_cuda" "$dest/bin/"
  cp bench/torch_cuda_step.py scripts/cuda_report.py "$dest/bin/"
  ldd "$dest"/bin/tessera_cuda_tests "$dest"/bin/bench_cuda* "$dest"/bin/fashion_mnist* |
    awk '/libbenchmark/ { print $3 }' | sort -u |
    while read -r lib; do cp -L "$lib" "$dest/lib/"; done
  cp "${TESSERA_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}"/*.gz "$dest/data/"
  du -sh "$dest"
  tar -czf "${dest%/}.tgz" -C "$(dirname "$dest")" "$(basename "$dest")"
  du -sh "${dest%/}.tgz"
  exit 0
fi
if [[ "$mode" != run ]]; then
  echo "usage: gpu_check.sh bundle [BUILD_DIR] [BUNDLE] | run [BUNDLE] [OUT_DIR]" >&2
  exit 2
fi

bundle="${2:-gpu-bundle}"
out="${3:-gpu-results}"
mkdir -p "$out"
if [[ "$bundle" == *.tgz ]]; then  # unpack next to the results
  tar -xzf "$bundle" -C "$out"
  bundle="$out/$(basename "${bundle%.tgz}")"
fi
export LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# cuDNN and cuBLAS: the toolkit's, else the ones PyTorch's nvidia-* packages carry.
for pkg in cudnn cublas; do
  dir="$(python3 -c "import nvidia.$pkg as m; print(list(m.__path__)[0] + '/lib')" 2>/dev/null)"
  [[ -n "$dir" && -d "$dir" ]] && LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$dir"
done
[[ -d /usr/local/cuda/lib64 ]] && LD_LIBRARY_PATH="/usr/local/cuda/lib64:$LD_LIBRARY_PATH"
export TESSERA_FASHION_MNIST_DIR="$bundle/data"
bin="$bundle/bin"
summary=()

steps=("${@:4}")
wanted() {  # wanted STEP: whether STEP was asked for (all are when none is named)
  [[ ${#steps[@]} -eq 0 ]] && return 0
  local s
  for s in "${steps[@]}"; do [[ "$s" == "$1" ]] && return 0; done
  return 1
}
limit="${TESSERA_GPU_STEP_SECONDS:-540}"

step() {  # step NAME COMMAND...: runs COMMAND (at most $limit s) with its log in $out/NAME.log
  local name="$1"
  shift
  local start=$SECONDS
  timeout -k 10 "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  summary+=("$(printf '%-20s rc=%-4s %5ss' "$name" "$rc" "$((SECONDS - start))")")
}

nvidia-smi >"$out/nvidia-smi.txt" 2>&1
sanitizer="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"

wanted tests && step tests "$bin/tessera_cuda_tests"
for tool in memcheck racecheck synccheck; do
  wanted "$tool" &&
    step "sanitizer_$tool" "$sanitizer" --tool "$tool" --error-exitcode 1 "$bin/tessera_cuda_tests"
done
for b in bench_cuda bench_cuda_train bench_cuda_conv; do
  wanted "$b" && step "$b" "$bin/$b" --benchmark_counters_tabular=true \
    "--benchmark_out=$out/$b.json" --benchmark_out_format=json
done
wanted torch &&
  step torch_cuda_step python3 "$bin/torch_cuda_step.py" --out "$out/torch_cuda_step.json"
if wanted example; then
  step example_cuda "$bin/fashion_mnist_cuda" --device cuda --epochs 2 \
    --save "$out/fashion_mnist_cuda.npz"
  step example_cpu "$bin/fashion_mnist" --epochs 2 --threads "$(nproc)" \
    --save "$out/fashion_mnist_cpu.npz"
fi

python3 "$bin/cuda_report.py" "$out" "$out/cuda_gemm.png" >"$out/report.md" 2>"$out/report.err"
echo "== acceptance =="
sed -n '/acceptance target/,$p' "$out/report.md"
echo "== accuracy and epoch times (cpu, then cuda) =="
grep -hs "test accuracy" "$out/example_cpu.log" "$out/example_cuda.log"
echo "== failures =="
grep -hs "FAILED\|ERROR SUMMARY" "$out"/tests.log "$out"/sanitizer_*.log | sort -u | head -n 30
echo "== summary =="
printf '%s\n' "${summary[@]}"

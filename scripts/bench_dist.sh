#!/usr/bin/env bash
# Distributed benchmarks on this machine, 2 ranks (scripts/bench_dist.sh [build dir]):
#   1. all_reduce: tessera's ProcessGroup against MPI_Allreduce (bench_all_reduce) and against
#      torch.distributed over gloo (Debian's python3-torch), 1 KiB to 256 MiB;
#   2. DataParallel training of the Fashion-MNIST CNN: 2 ranks x 1 thread against one process
#      with 2 threads (the main example, one epoch on 8192 images), and how much of the
#      all-reduce hides behind backward (bench_data_parallel);
#   3. the alpha-beta cost model fitted to the all_reduce times (over TCP between two network
#      namespaces where they can be made, else on this machine), projected to 8, 64 and 512
#      machines (scripts/dist_cost_model.py).
# Needs OpenMPI (scripts/bootstrap.sh test) and the build with tessera::dist.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build="${1:-build}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
cmake --build "$build" --target bench_all_reduce bench_data_parallel fashion_mnist
results="$build/bench-results"
mkdir -p "$results"

echo "== all_reduce, tessera and MPI, 2 ranks on this machine (shared memory)"
OMP_NUM_THREADS=1 mpiexec -n 2 "$build/bench/bench_all_reduce" | tee "$results/all_reduce.txt"
# The same over TCP between two network namespaces (tests/dist/two_hosts.sh), where allowed.
echo "== all_reduce over TCP between two network namespaces (a veth pair)"
table="$results/all_reduce.txt"
if OMP_NUM_THREADS=1 tests/dist/two_hosts.sh "$build/bench/bench_all_reduce" \
  >"$results/all_reduce_tcp.txt"; then
  cat "$results/all_reduce_tcp.txt"
  table="$results/all_reduce_tcp.txt"
else
  echo "(network namespaces not available here: skipped)"
fi
if /usr/bin/python3 -c "import torch.distributed" 2>/dev/null; then
  echo "== all_reduce, torch.distributed (gloo)"
  /usr/bin/python3 bench/dist/all_reduce_torch.py 2
else
  echo "== torch.distributed: not installed (Debian python3-torch), skipped"
fi

echo "== Fashion-MNIST CNN, one epoch on 8192 images, global batch 64"
(
  cd "$build/examples"
  echo "-- one process, 2 threads"
  ./fashion_mnist --threads 2 --epochs 1 --limit 8192 --batch 64 --save /tmp/tessera_bench_1.npz |
    grep "epoch 1:"
  echo "-- 2 ranks x 1 thread (DataParallel, 32 per rank)"
  mpiexec -n 2 ./fashion_mnist --distributed --threads 1 --epochs 1 --limit 8192 --batch 32 \
    --save /tmp/tessera_bench_2.npz | grep "epoch 1:"
)

echo "== DataParallel: the all-reduce hidden behind backward"
OMP_NUM_THREADS=1 mpiexec -n 2 "$build/bench/bench_data_parallel"

echo "== alpha-beta cost model (docs/distributed.md)"
py=python3
[[ -x /usr/bin/python3 ]] && py=/usr/bin/python3
"$py" scripts/dist_cost_model.py "$table"

// median_seconds.hpp - timing for the MPI benchmarks: every rank makes the same calls, so
// Google Benchmark's adaptive iteration counts (which differ between ranks) cannot be used.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <vector>

namespace bench_dist {

/// Median seconds of `reps` calls of f (after two untimed ones), the ranks aligned by a barrier
/// before each call; the slowest rank's time counts, as it decides a collective's.
template <class F>
double median_seconds(MPI_Comm comm, int reps, F&& f) {
  std::vector<double> t;
  for (int i = 0; i < reps + 2; ++i) {
    MPI_Barrier(comm);
    const double start = MPI_Wtime();
    f();
    if (i >= 2) t.push_back(MPI_Wtime() - start);
  }
  std::vector<double> slowest(t.size());
  MPI_Allreduce(t.data(), slowest.data(), static_cast<int>(t.size()), MPI_DOUBLE, MPI_MAX, comm);
  std::sort(slowest.begin(), slowest.end());
  return slowest[slowest.size() / 2];
}

}  // namespace bench_dist

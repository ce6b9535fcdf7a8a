// bench_all_reduce - all_reduce of float32 tensors, 1 KiB to 256 MiB: tessera's ProcessGroup
// (with and without the per-call check) against MPI_Allreduce on the same buffer, in one program.
// Run under mpirun (scripts/bench_dist.sh); rank 0 prints one row per size: the median time of
// each and the bus bandwidth, 2 (n - 1) / n * bytes / time, as NCCL's tests define it.
//
// Not Google Benchmark: its adaptive iteration counts differ between ranks, and every rank must
// make the same collective calls.
#include <algorithm>
#include <cstdio>
#include <tessera/dist.hpp>
#include <vector>

#include "median_seconds.hpp"

namespace ts = tessera;

using bench_dist::median_seconds;

int main() {
  auto pg = ts::dist::init();
  ts::dist::options unchecked_opts;
  unchecked_opts.check_calls = false;
  ts::dist::ProcessGroup unchecked(MPI_COMM_WORLD, unchecked_opts);
  const int n = pg.size();
  if (pg.rank() == 0)
    std::printf(
        "all_reduce(sum) of float32 over %d ranks; median times, bus bandwidth in GB/s\n"
        "%10s %12s %12s %12s %9s %9s %9s\n",
        n, "bytes", "tessera us", "unchecked", "MPI us", "tessera", "MPI", "ratio");
  for (int64_t bytes = 1024; bytes <= (int64_t{256} << 20); bytes *= 4) {
    const int64_t count = bytes / 4;
    auto t = ts::full<float, ts::cpu>(ts::Shape{count}, 1.0f);
    const int reps = static_cast<int>(std::clamp<int64_t>((int64_t{256} << 20) / bytes, 5, 200));
    const double ours = median_seconds(pg.comm(), reps, [&] { pg.all_reduce(t); });
    const double fast = median_seconds(pg.comm(), reps, [&] { unchecked.all_reduce(t); });
    const double raw = median_seconds(pg.comm(), reps, [&] {
      MPI_Allreduce(MPI_IN_PLACE, t.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, pg.comm());
    });
    const double bus = 2.0 * (n - 1) / n * static_cast<double>(bytes) / 1e9;
    if (pg.rank() == 0)
      std::printf("%10lld %12.1f %12.1f %12.1f %9.2f %9.2f %9.2f\n", static_cast<long long>(bytes),
                  ours * 1e6, fast * 1e6, raw * 1e6, bus / ours, bus / raw, ours / raw);
  }
  return 0;
}

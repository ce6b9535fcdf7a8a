// bench_data_parallel - how much of DataParallel's all-reduce hides behind backward. Run under
// mpirun (scripts/bench_dist.sh), one thread per rank. For each bucket size, training steps of
// the Fashion-MNIST CNN (32 random images per rank, SGD) are timed three ways:
//   synced:  the usual step, gradients averaged across the ranks;
//   local:   the same step under no_sync (no communication);
//   comm:    the bucketed all-reduces alone, one per bucket of the same sizes, no compute.
// The communication left on the step's critical path is synced - local; the hidden share is
// 1 - (synced - local) / comm. Rank 0 prints one row per bucket size (medians, slowest rank).
#include <algorithm>
#include <cstdio>
#include <tessera/dist.hpp>
#include <tessera/nn.hpp>
#include <tessera/optim.hpp>
#include <vector>

#include "../../examples/fashion_mnist_model.hpp"
#include "median_seconds.hpp"

namespace ts = tessera;

using bench_dist::median_seconds;

int main() {
  auto pg = ts::dist::init();
  ts::set_num_threads(1);
  ts::nn::manual_seed(1);
  auto model = fashion_mnist::make_model<ts::cpu>("cnn");
  ts::Generator rng(10 + static_cast<uint64_t>(pg.rank()));
  const auto images = ts::randn<float>({32, 1, 28, 28}, rng);
  const auto labels = ts::randint<int64_t>(0, 10, {32}, rng);
  int64_t grad_bytes = 0;
  for (const auto& p : model.parameters()) grad_bytes += p.value().numel() * 4;
  if (pg.rank() == 0)
    std::printf(
        "DataParallel, Fashion-MNIST CNN, %d ranks x 1 thread, 32 images per rank, %lld bytes of "
        "gradients; median ms per step\n%12s %8s %9s %9s %9s %9s %8s\n",
        pg.size(), static_cast<long long>(grad_bytes), "bucket", "buckets", "synced", "local",
        "comm", "exposed", "hidden");
  for (const int64_t bucket : {int64_t{25} << 20, int64_t{256} << 10, int64_t{64} << 10}) {
    ts::dist::DataParallel dp(model, pg, bucket);
    ts::optim::SGD<float, ts::cpu> opt(model.parameters(), {.lr = 0.01, .momentum = 0.9});
    auto step = [&] {
      opt.zero_grad();
      ts::nn::cross_entropy(dp(images), labels).backward();
      opt.step();
    };
    const double synced = median_seconds(pg.comm(), 20, step);
    double local = 0;
    {
      auto guard = dp.no_sync();
      local = median_seconds(pg.comm(), 20, step);
    }
    // The buckets' all-reduces alone: the same count and sizes, one after another.
    std::vector<ts::Tensor<float>> buffers;
    for (int64_t left = grad_bytes; left > 0; left -= bucket)
      buffers.push_back(ts::zeros<float>({std::min(left, bucket) / 4}));
    const double comm = median_seconds(pg.comm(), 20, [&] {
      std::vector<ts::dist::Work> work;
      for (const auto& b : buffers) work.push_back(pg.all_reduce_async(b));
      for (auto& w : work) w.wait();
    });
    const double exposed = std::max(0.0, synced - local);
    if (pg.rank() == 0)
      std::printf("%12lld %8zu %9.2f %9.2f %9.2f %9.2f %7.0f%%\n", static_cast<long long>(bucket),
                  buffers.size(), synced * 1e3, local * 1e3, comm * 1e3, exposed * 1e3,
                  100.0 * std::max(0.0, 1.0 - exposed / comm));
  }
  return 0;
}

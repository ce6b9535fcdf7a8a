// Several std::threads using the library at once: each runs the same work (products,
// convolutions, elementwise and reductions on tensors it makes, ops on one tensor all threads
// read, a few training steps of its own model, a checkpoint round trip) and must get exactly
// the results one thread gets alone. Shared state (the caching allocator, tables built on first
// use, version counters of the shared tensor) is what this exercises; the ThreadSanitizer build
// (CMake preset tsan, OpenMP off, since libgomp is not instrumented) runs it to find races.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>
#include <tessera/autograd.hpp>
#include <tessera/nn.hpp>
#include <tessera/nn/checkpoint.hpp>
#include <tessera/optim.hpp>
#include <tessera/tessera.hpp>
#include <thread>
#include <vector>

namespace {
namespace ts = tessera;
using Ten = ts::Tensor<float, ts::cpu>;

/// Every value the work produces, in order, to compare runs bit for bit.
using results = std::vector<std::vector<float>>;

results work(int seed, const Ten& shared, const std::filesystem::path& dir) {
  results r;
  ts::Generator g(static_cast<uint64_t>(seed));
  // Large enough for the GEMM's packing buffers.
  const Ten a = ts::randn<float>({256, 300}, g), b = ts::randn<float>({300, 280}, g);
  r.push_back(ts::matmul(a, b).to_vector());
  r.push_back(ts::matmul(a.transpose(0, 1).contiguous().transpose(0, 1), b).to_vector());
  const Ten x = ts::randn<float>({2, 3, 20, 20}, g), w = ts::randn<float>({4, 3, 3, 3}, g);
  r.push_back(ts::conv2d(x, w, Ten(), {.padding = {1, 1}}).to_vector());
  r.push_back(ts::max_pool2d(x, {.kernel = {2, 2}}).to_vector());
  r.push_back(ts::softmax(ts::exp(a * 0.1f) + 1.0f, 1).to_vector());
  r.push_back(ts::sum(a, {0}).to_vector());
  // Blocks of 1 MiB and more go through the allocator's shared cache.
  const Ten big = ts::randn<float>({512, 600}, g);
  r.push_back(ts::sum(ts::exp(big * 0.01f), {0}).to_vector());
  // Every thread reads the shared tensor (never writes it).
  r.push_back((shared * 2.0f + ts::tanh(shared)).to_vector());
  r.push_back(ts::mean(shared, {1}).to_vector());
  // A few training steps of a model of its own.
  ts::nn::manual_seed(static_cast<uint64_t>(seed));
  ts::nn::Sequential<float, ts::cpu> model{ts::nn::Linear<float, ts::cpu>(20, 16),
                                           ts::nn::ReLU<float, ts::cpu>(),
                                           ts::nn::Linear<float, ts::cpu>(16, 3)};
  ts::optim::Adam<float, ts::cpu> opt(model.parameters(), {.lr = 1e-2});
  const Ten in = ts::randn<float>({32, 20}, g);
  const ts::Tensor<int64_t, ts::cpu> labels = ts::randint<int64_t>(0, 3, ts::Shape{32}, g);
  for (int step = 0; step < 4; ++step) {
    opt.zero_grad();
    ts::cross_entropy(model(ts::Variable<float, ts::cpu>(in)), labels).backward();
    opt.step();
  }
  for (const auto& p : model.parameters()) r.push_back(p.value().to_vector());
  // A checkpoint round trip through a file of its own.
  const auto path = dir / ("model" + std::to_string(seed) + ".npz");
  ts::io::save(model, path);
  ts::io::load(model, path);
  for (const auto& p : model.parameters()) r.push_back(p.value().to_vector());
  return r;
}

TEST(Threads, ConcurrentUsersGetTheSingleThreadResults) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("tessera_threads_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  ts::Generator g(99);
  const Ten shared = ts::randn<float>({64, 128}, g);
  constexpr int threads = 4;
  std::vector<results> alone;
  for (int t = 0; t < threads; ++t) alone.push_back(work(t, shared, dir));

  std::vector<results> together(threads);
  std::vector<std::string> errors(threads);
  std::atomic<int> ready{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      // Start together, so the threads overlap.
      ++ready;
      while (ready.load() < threads) std::this_thread::yield();
      try {
        for (int round = 0; round < 3; ++round) together[t] = work(t, shared, dir);
      } catch (const std::exception& e) {
        errors[t] = e.what();
      }
    });
  }
  for (auto& th : pool) th.join();
  std::filesystem::remove_all(dir);
  for (int t = 0; t < threads; ++t) {
    EXPECT_EQ(errors[t], "") << "thread " << t;
    ASSERT_EQ(together[t].size(), alone[t].size()) << "thread " << t;
    for (size_t i = 0; i < alone[t].size(); ++i)
      EXPECT_EQ(together[t][i], alone[t][i]) << "thread " << t << ", result " << i;
  }
}

}  // namespace

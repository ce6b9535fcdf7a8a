// bench_train - one training step (forward, backward, SGD update) of the Fashion-MNIST CNN and
// MLP at batch 64, and inference over 10k images, for tessera and (when found) LibTorch on the
// same inputs and thread count. Counter: samples/s.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <tessera/nn.hpp>
#include <tessera/optim.hpp>
#include <tessera/tessera.hpp>

#include "../examples/fashion_mnist_model.hpp"

#if defined(TESSERA_BENCH_HAVE_TORCH)
#include <torch/torch.h>
#endif

namespace ts = tessera;

namespace {

constexpr int64_t kBatch = 64;
constexpr int64_t kInferBatch = 1000;
constexpr int64_t kInferImages = 10000;
// Threads for both libraries: TESSERA_BENCH_THREADS, default 2 (the acceptance setting).
const int kThreads = [] {
  const char* env = std::getenv("TESSERA_BENCH_THREADS");
  return env && std::atoi(env) > 0 ? std::atoi(env) : 2;
}();

struct Inputs {
  ts::Tensor<float, ts::cpu> images, test_images;
  ts::Tensor<int64_t, ts::cpu> labels;
  Inputs() {
    ts::Generator rng(7);
    images = ts::randn<float>({kBatch, 1, 28, 28}, rng);
    labels = ts::randint<int64_t>(0, 10, {kBatch}, rng);
    test_images = ts::randn<float>({kInferImages, 1, 28, 28}, rng);
  }
};
const Inputs& inputs() {
  static const Inputs in;
  return in;
}

ts::nn::Sequential<float> tessera_model(bool cnn) {
  return fashion_mnist::make_model<ts::cpu>(cnn ? "cnn" : "mlp");
}

void tessera_train_step(benchmark::State& state, bool cnn) {
  ts::set_num_threads(kThreads);
  auto model = tessera_model(cnn);
  ts::optim::SGD opt(model.parameters(), {.lr = 0.01, .momentum = 0.9});
  const auto& in = inputs();
  for (auto _ : state) {
    auto loss = ts::nn::cross_entropy(model(in.images), in.labels);
    opt.zero_grad();
    loss.backward();
    opt.step();
    benchmark::DoNotOptimize(loss.item());
  }
  state.counters["samples/s"] = benchmark::Counter(static_cast<double>(kBatch),
                                                   benchmark::Counter::kIsIterationInvariantRate);
}

void tessera_inference(benchmark::State& state, bool cnn) {
  ts::set_num_threads(kThreads);
  auto model = tessera_model(cnn);
  model.eval();
  const auto& in = inputs();
  for (auto _ : state) {
    ts::no_grad guard;
    for (int64_t b = 0; b < kInferImages; b += kInferBatch) {
      auto classes = ts::argmax(model(in.test_images.slice(0, b, b + kInferBatch)).value(), 1);
      benchmark::DoNotOptimize(classes.data());
    }
  }
  state.counters["samples/s"] = benchmark::Counter(static_cast<double>(kInferImages),
                                                   benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK_CAPTURE(tessera_train_step, cnn, true)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(tessera_train_step, mlp, false)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(tessera_inference, cnn, true)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(tessera_inference, mlp, false)->Unit(benchmark::kMillisecond)->UseRealTime();

#if defined(TESSERA_BENCH_HAVE_TORCH)
torch::nn::Sequential torch_model(bool cnn) {
  namespace tn = torch::nn;
  if (cnn)
    return tn::Sequential(tn::Conv2d(tn::Conv2dOptions(1, 32, 3).padding(1)), tn::ReLU(),
                          tn::MaxPool2d(2), tn::Conv2d(tn::Conv2dOptions(32, 64, 3).padding(1)),
                          tn::ReLU(), tn::MaxPool2d(2), tn::Flatten(), tn::Linear(64 * 7 * 7, 128),
                          tn::ReLU(), tn::Linear(128, 10));
  return tn::Sequential(tn::Flatten(), tn::Linear(784, 256), tn::ReLU(), tn::Linear(256, 128),
                        tn::ReLU(), tn::Linear(128, 10));
}
// The same bytes as tessera's inputs, without a copy.
torch::Tensor as_torch(const ts::Tensor<float, ts::cpu>& t) {
  std::vector<int64_t> dims(t.shape().begin(), t.shape().end());
  return torch::from_blob(t.data(), dims, torch::kFloat32);
}

void torch_train_step(benchmark::State& state, bool cnn) {
  torch::set_num_threads(kThreads);
  auto model = torch_model(cnn);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  const auto& in = inputs();
  const auto images = as_torch(in.images);
  const auto labels = torch::from_blob(in.labels.data(), {kBatch}, torch::kInt64);
  for (auto _ : state) {
    auto loss = torch::nn::functional::cross_entropy(model->forward(images), labels);
    opt.zero_grad();
    loss.backward();
    opt.step();
    benchmark::DoNotOptimize(loss.item<float>());
  }
  state.counters["samples/s"] = benchmark::Counter(static_cast<double>(kBatch),
                                                   benchmark::Counter::kIsIterationInvariantRate);
}

void torch_inference(benchmark::State& state, bool cnn) {
  torch::set_num_threads(kThreads);
  auto model = torch_model(cnn);
  model->eval();
  const auto images = as_torch(inputs().test_images);
  for (auto _ : state) {
    torch::NoGradGuard guard;
    for (int64_t b = 0; b < kInferImages; b += kInferBatch) {
      auto classes = model->forward(images.slice(0, b, b + kInferBatch)).argmax(1);
      benchmark::DoNotOptimize(classes.data_ptr());
    }
  }
  state.counters["samples/s"] = benchmark::Counter(static_cast<double>(kInferImages),
                                                   benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK_CAPTURE(torch_train_step, cnn, true)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(torch_train_step, mlp, false)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(torch_inference, cnn, true)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(torch_inference, mlp, false)->Unit(benchmark::kMillisecond)->UseRealTime();
#endif

}  // namespace

BENCHMARK_MAIN();

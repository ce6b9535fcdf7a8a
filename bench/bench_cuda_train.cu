// bench_cuda_train - one training step (forward, cross-entropy, backward, SGD with momentum) of
// the Fashion-MNIST CNN and MLP at batch 64 on CUDA tensors: the example's models
// (examples/fashion_mnist_model.hpp), with the options and input sizes of bench_train (CPU). Its
// PyTorch counterpart on the same GPU is bench/torch_cuda_step.py (PyTorch's CUDA build is a Python
// package on GPU machines; this project's LibTorch is CPU-only), which prints its medians in the
// same units; scripts/cuda_report.py pairs them.
//
//   train_step/<model>/tessera/64     counters: median_us, samples/s (from the median),
//                                     launches/step, waits/step (cuda_activity_counts)
//
// Each step is timed with events on tessera's stream, from before the forward pass to after the
// optimizer's update; nothing is read back to the host inside the step (waits/step says whether
// tessera itself waited: it should be 0). Without a GPU the program says so and exits 0.
//
//   train_loop/<model>/tessera/64     the step in a training loop: each step first uploads its
//                                     batch from host memory (8 batches in turn), 25 steps back to
//                                     back per timed loop, wall clock per step (host and device
//                                     overlapping); counters: median_us, samples/s, waits/step
//                                     (a deferred label check per step: one device wait per 64)
#include <cstdio>
#include <tessera/nn.hpp>
#include <tessera/optim.hpp>

#include "../examples/fashion_mnist_model.hpp"
#include "cuda_bench.cuh"

namespace {
using namespace cuda_bench;

constexpr int64_t kBatch = 64;

void bm_train_step(benchmark::State& st, bool cnn) {
  auto model = fashion_mnist::make_model<ts::cuda>(cnn ? "cnn" : "mlp");
  ts::optim::SGD opt(model.parameters(), {.lr = 0.01, .momentum = 0.9});
  ts::Generator rng(7);
  const auto images = ts::randn<float, ts::cpu>({kBatch, 1, 28, 28}, rng).to<ts::cuda>();
  const auto labels = ts::randint<int64_t, ts::cpu>(0, 10, {kBatch}, rng).to<ts::cuda>();
  const auto step = [&] {
    auto loss = ts::nn::cross_entropy(model(images), labels);
    opt.zero_grad();
    loss.backward();
    opt.step();
  };
  // A finite loss after a few steps: the step trains (a NaN here means a broken kernel).
  for (int i = 0; i < 3; ++i) step();
  const float loss = ts::nn::cross_entropy(model(images), labels).item();
  if (!std::isfinite(loss)) {
    st.SkipWithError(("training step gave loss " + std::to_string(loss)).c_str());
    return;
  }
  st.counters["loss"] = loss;
  const ts::cuda_activity before = ts::cuda_activity_counts();
  step();
  const ts::cuda_activity after = ts::cuda_activity_counts();
  st.counters["launches/step"] = double(after.launches - before.launches);
  st.counters["waits/step"] = double(after.host_waits - before.host_waits);
  time_calls(st, step);
  st.counters["samples/s"] = double(kBatch) / (st.counters["median_us"] * 1e-6);
}

/// The step of a training loop: upload the batch, then forward, loss, backward, update.
void bm_train_loop(benchmark::State& st, bool cnn) {
  constexpr int kSteps = 25, kBatches = 8;
  auto model = fashion_mnist::make_model<ts::cuda>(cnn ? "cnn" : "mlp");
  ts::optim::SGD opt(model.parameters(), {.lr = 0.01, .momentum = 0.9});
  ts::Generator rng(7);
  std::vector<ts::Tensor<float>> images;
  std::vector<ts::Tensor<int64_t>> labels;
  for (int b = 0; b < kBatches; ++b) {
    images.push_back(ts::randn<float, ts::cpu>({kBatch, 1, 28, 28}, rng));
    labels.push_back(ts::randint<int64_t, ts::cpu>(0, 10, {kBatch}, rng));
  }
  const auto step = [&](int64_t i) {
    const auto b = static_cast<size_t>(i % kBatches);
    auto loss = ts::nn::cross_entropy(model(images[b].to<ts::cuda>()), labels[b].to<ts::cuda>());
    opt.zero_grad();
    loss.backward();
    opt.step();
  };
  for (int i = 0; i < 3; ++i) step(i);
  const ts::cuda_activity before = ts::cuda_activity_counts();
  for (int i = 0; i < kSteps; ++i) step(i);
  const ts::cuda_activity after = ts::cuda_activity_counts();
  st.counters["waits/step"] = double(after.host_waits - before.host_waits) / kSteps;
  time_loop(st, kSteps, step);
  st.counters["samples/s"] = double(kBatch) / (st.counters["median_us"] * 1e-6);
}

/// Registers every benchmark of this program (called only when a GPU is visible).
void add_benchmarks() {
  add_timed("train_step/cnn/tessera/64", 200,
            [](benchmark::State& st) { bm_train_step(st, true); });
  add_timed("train_step/mlp/tessera/64", 200,
            [](benchmark::State& st) { bm_train_step(st, false); });
  add_timed("train_loop/cnn/tessera/64", 20, [](benchmark::State& st) { bm_train_loop(st, true); });
  add_timed("train_loop/mlp/tessera/64", 20,
            [](benchmark::State& st) { bm_train_loop(st, false); });
}

}  // namespace

int main(int argc, char** argv) {
  return cuda_bench::run_main(argc, argv, "bench_cuda_train", add_benchmarks);
}

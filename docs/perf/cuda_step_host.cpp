// cuda_step_host.cpp - what tessera's host code costs per training step, measured in the host
// emulation of CUDA (tests/cuda_emu): the Fashion-MNIST CNN and MLP at batch 64 (the step of
// bench_cuda_train), timed over many steps with TESSERA_CUDA_EMU_SKIP_KERNELS set (launches
// return at once, so the time is the host code between them: autograd, shapes, allocation,
// launch arguments), and a few steps with kernels running for the launch and wait counts.
// Not part of the build; from the repository root:
//
//   c++ -std=gnu++20 -O2 -march=native -fopenmp -DTESSERA_CUDA_HOST_EMULATION \
//       -Itests/cuda_emu/include -Iinclude -x c++ docs/perf/cuda_step_host.cpp -o /tmp/step_host
//   TESSERA_CUDA_EMU_SKIP_KERNELS=1 /tmp/step_host; /tmp/step_host
//
// On a GPU the driver adds its own cost per launch (a few microseconds) to the host side.
#include <chrono>
#include <cstdio>
#include <tessera/cuda.hpp>
#include <tessera/nn.hpp>
#include <tessera/optim.hpp>

#include "../../examples/fashion_mnist_model.hpp"

namespace ts = tessera;

int main() {
  const bool skip = tessera_cuda_emulation::skip_kernels;
  for (const char* kind : {"cnn", "mlp"}) {
    auto model = fashion_mnist::make_model<ts::cuda>(kind);
    ts::optim::SGD opt(model.parameters(), {.lr = 0.01, .momentum = 0.9});
    ts::Generator rng(7);
    const auto images = ts::randn<float, ts::cpu>({64, 1, 28, 28}, rng).to<ts::cuda>();
    const auto labels = ts::randint<int64_t, ts::cpu>(0, 10, {64}, rng).to<ts::cuda>();
    const auto step = [&] {
      auto loss = ts::nn::cross_entropy(model(images), labels);
      opt.zero_grad();
      loss.backward();
      opt.step();
    };
    step(), step();  // first uses build what ops keep
    const int reps = skip ? 2000 : 3;
    const ts::cuda_activity a = ts::cuda_activity_counts();
    const double k0 = tessera_cuda_emulation::kernel_seconds;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) step();
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double kernels = tessera_cuda_emulation::kernel_seconds - k0;
    const ts::cuda_activity b = ts::cuda_activity_counts();
    std::printf("%s: %lld launches, %lld waits, host code %.1f us per step%s\n", kind,
                static_cast<long long>((b.launches - a.launches) / reps),
                static_cast<long long>((b.host_waits - a.host_waits) / reps),
                (wall - kernels) / reps * 1e6,
                skip ? "" : " (kernels ran: host time includes their cache damage)");
  }
}

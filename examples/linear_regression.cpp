// linear_regression - the smallest training loop: fit y = X·w + b to synthetic data by gradient
// descent, printing the loss curve, then the learned and the true parameters.
//
//   linear_regression [--steps N] [--lr L]      (defaults: 200 steps, lr 0.02)
//
// The bar beside each loss is on a log scale (one '#' per factor of ~1.5), so the curve stays
// readable from the first step down to the noise floor (about 0.01 here).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <tessera/nn.hpp>
#include <tessera/optim.hpp>

namespace ts = tessera;

int main(int argc, char** argv) {
  int steps = 200;
  double lr = 0.02;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--steps") steps = std::atoi(argv[i + 1]);
    else if (k == "--lr") lr = std::atof(argv[i + 1]);
  }

  // 1000 samples with 5 features; the targets come from known weights plus a little noise.
  ts::Generator rng(42);
  const auto x = ts::randn<float>({1000, 5}, rng);
  const auto w_true = ts::from_vector<float>({2.0f, -1.0f, 0.5f, 3.0f, -2.5f}, {5, 1});
  const float b_true = 0.8f;
  const auto noise = ts::randn<float>({1000, 1}, rng, 0.0, 0.1);
  const ts::Variable<float> y(ts::matmul(x, w_true) + b_true + noise);

  // The model is one Linear layer; the loss is the mean squared error; full-batch SGD.
  ts::nn::Linear model(5, 1);
  ts::optim::SGD opt(model.parameters(), {.lr = lr});
  for (int step = 0; step <= steps; ++step) {
    auto loss = ts::nn::mse_loss(model(x), y);
    if (step % 10 == 0) {
      const double decades = std::log10(std::max(static_cast<double>(loss.item()), 1e-3)) + 3.0;  // 0 at 1e-3
      const int bar = std::clamp(static_cast<int>(decades * 6.0), 0, 60);
      std::printf("step %4d  loss %9.5f  %s\n", step, loss.item(), std::string(bar, '#').c_str());
    }
    opt.zero_grad();
    loss.backward();
    opt.step();
  }

  const auto w = model.weight.value().to_vector();
  std::printf("\n%-8s %8s %8s\n", "", "learned", "true");
  for (int i = 0; i < 5; ++i)
    std::printf("w[%d]     %8.4f %8.4f\n", i, w[i], w_true.to_vector()[i]);
  std::printf("b        %8.4f %8.4f\n", model.bias.value().item(), b_true);
  return 0;
}

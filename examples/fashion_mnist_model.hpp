// fashion_mnist_model.hpp - the two models of the Fashion-MNIST example (a small CNN and an
// MLP), on any backend; the training benchmarks (bench_train, bench_cuda_train) build the same.
#pragma once

#include <string>
#include <tessera/nn.hpp>

namespace fashion_mnist {

// Built on backend B: the same seed gives the same initial weights on every backend.
template <class B>
tessera::nn::Sequential<float, B> make_model(const std::string& kind) {
  namespace nn = tessera::nn;
  using Conv2d = nn::Conv2d<float, B>;
  using Linear = nn::Linear<float, B>;
  using ReLU = nn::ReLU<float, B>;
  using MaxPool2d = nn::MaxPool2d<float, B>;
  using Flatten = nn::Flatten<float, B>;
  if (kind == "cnn")
    return nn::Sequential{Conv2d(1, 32, 3, {.padding = {1, 1}}),
                          ReLU(),
                          MaxPool2d(2),
                          Conv2d(32, 64, 3, {.padding = {1, 1}}),
                          ReLU(),
                          MaxPool2d(2),
                          Flatten(),
                          Linear(64 * 7 * 7, 128),
                          ReLU(),
                          Linear(128, 10)};
  return nn::Sequential{Flatten(),        Linear(784, 256), ReLU(),
                        Linear(256, 128), ReLU(),           Linear(128, 10)};
}

}  // namespace fashion_mnist

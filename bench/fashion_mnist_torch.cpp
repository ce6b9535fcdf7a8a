// fashion_mnist_torch - the LibTorch reference for the Fashion-MNIST training benchmark.
//
//   fashion_mnist_torch [--model cnn|mlp] [--epochs N] [--batch B] [--lr L] [--threads T]
//                       [--seed S] [--data DIR]
//
// Trains with the recipe tessera's training benchmark uses, on the same data: tessera's data
// layer loads Fashion-MNIST (standardised with mean 0.2860 / std 0.3530) and yields the same
// shuffled mini-batches for the same seed; each batch is handed to LibTorch with
// torch::from_blob (no copy), so data handling costs the same on both sides.
//
//   cnn: Conv2d(1, 32, 3, pad 1) ReLU MaxPool2d(2) Conv2d(32, 64, 3, pad 1) ReLU MaxPool2d(2)
//        Flatten Linear(3136, 128) ReLU Linear(128, 10)
//   mlp: Flatten Linear(784, 256) ReLU Linear(256, 128) ReLU Linear(128, 10)
//   SGD with momentum 0.9, cross-entropy loss, torch::set_num_threads(T).
//
// Output, one `key=value` record per line (stable, for scripts):
//   model=cnn epochs=2 batch=64 lr=0.05 threads=2 seed=0 torch=1.13.1 train_examples=60000
//       test_examples=10000 load_s=...                       (one line: configuration)
//   epoch 1: train_time_s=... loss=...   wall time of the epoch's training loop (batch gather,
//                                        forward, backward, step; loading excluded) and the
//                                        mean training loss over the epoch's examples
//   test_accuracy=...                    fraction of the 10000 test images classified correctly
//   inference_s=...                      wall time of the forward pass over the test set in
//                                        batches of 1000 under NoGradGuard (gather and argmax
//                                        included)
#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <string_view>
#include <tessera/data/fashion_mnist.hpp>

namespace ts = tessera;

namespace {

struct options {
  std::string model = "cnn";
  int epochs = 2;
  int64_t batch = 64;
  double lr = 0.05;
  int threads = 2;
  uint64_t seed = 0;
  std::filesystem::path data = ts::io::fashion_mnist_dir();
};

[[noreturn]] void usage(int code) {
  (code ? std::cerr : std::cout)
      << "usage: fashion_mnist_torch [--model cnn|mlp] [--epochs N] [--batch B] [--lr L]\n"
         "                           [--threads T] [--seed S] [--data DIR]\n"
         "defaults: cnn, 2 epochs, batch 64, lr 0.05, 2 threads, seed 0, data "
      << ts::io::fashion_mnist_dir().string() << "\n";
  std::exit(code);
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "-h" || a == "--help") usage(0);
    std::string key(a), value;
    if (const auto eq = a.find('='); eq != std::string_view::npos) {
      key = a.substr(0, eq);
      value = a.substr(eq + 1);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      std::cerr << "fashion_mnist_torch: " << a << " needs a value\n";
      usage(2);
    }
    try {
      if (key == "--model")
        o.model = value;
      else if (key == "--epochs")
        o.epochs = std::stoi(value);
      else if (key == "--batch")
        o.batch = std::stoll(value);
      else if (key == "--lr")
        o.lr = std::stod(value);
      else if (key == "--threads")
        o.threads = std::stoi(value);
      else if (key == "--seed")
        o.seed = std::stoull(value);
      else if (key == "--data")
        o.data = value;
      else {
        std::cerr << "fashion_mnist_torch: unknown option " << key << "\n";
        usage(2);
      }
    } catch (const std::logic_error&) {
      std::cerr << "fashion_mnist_torch: bad value '" << value << "' for " << key << "\n";
      usage(2);
    }
  }
  if ((o.model != "cnn" && o.model != "mlp") || o.epochs < 0 || o.batch < 1 || o.threads < 1 ||
      !(o.lr > 0)) {
    std::cerr << "fashion_mnist_torch: invalid option value\n";
    usage(2);
  }
  return o;
}

torch::nn::Sequential make_model(const std::string& kind) {
  namespace nn = torch::nn;
  if (kind == "cnn")
    return nn::Sequential(nn::Conv2d(nn::Conv2dOptions(1, 32, 3).padding(1)), nn::ReLU(),
                          nn::MaxPool2d(nn::MaxPool2dOptions(2)),
                          nn::Conv2d(nn::Conv2dOptions(32, 64, 3).padding(1)), nn::ReLU(),
                          nn::MaxPool2d(nn::MaxPool2dOptions(2)), nn::Flatten(),
                          nn::Linear(64 * 7 * 7, 128), nn::ReLU(), nn::Linear(128, 10));
  return nn::Sequential(nn::Flatten(), nn::Linear(28 * 28, 256), nn::ReLU(), nn::Linear(256, 128),
                        nn::ReLU(), nn::Linear(128, 10));
}

// A view of a tessera batch as LibTorch tensors (no copy: the batch must outlive them).
torch::Tensor as_torch(const ts::Tensor<float, ts::cpu>& t) {
  const auto s = t.shape();
  return torch::from_blob(t.data(), std::vector<int64_t>(s.begin(), s.end()), torch::kFloat32);
}
torch::Tensor as_torch(const ts::Tensor<int64_t, ts::cpu>& t) {
  return torch::from_blob(t.data(), {t.numel()}, torch::kInt64);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  const options o = parse(argc, argv);
  torch::set_num_threads(o.threads);
  ts::set_num_threads(o.threads);
  torch::manual_seed(o.seed);

  ts::data::Dataset train, test;
  const auto t_load = std::chrono::steady_clock::now();
  try {
    train = ts::data::fashion_mnist("train", o.data);
    test = ts::data::fashion_mnist("test", o.data);
  } catch (const ts::error& e) {
    std::cerr << "fashion_mnist_torch: " << e.what() << "\n";
    return 1;
  }
  const double load_s = seconds_since(t_load);
  std::printf(
      "model=%s epochs=%d batch=%lld lr=%g threads=%d seed=%llu torch=%s train_examples=%lld "
      "test_examples=%lld load_s=%.3f\n",
      o.model.c_str(), o.epochs, static_cast<long long>(o.batch), o.lr, o.threads,
      static_cast<unsigned long long>(o.seed), TORCH_VERSION, static_cast<long long>(train.size()),
      static_cast<long long>(test.size()), load_s);
  std::fflush(stdout);

  auto model = make_model(o.model);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(o.lr).momentum(0.9));
  ts::Generator rng(o.seed);  // the shuffling stream tessera's benchmark uses for this seed

  for (int epoch = 1; epoch <= o.epochs; ++epoch) {
    model->train();
    double loss_sum = 0;
    int64_t seen = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (auto [images, labels] : ts::data::batches(train, o.batch, rng)) {
      const auto x = as_torch(images), y = as_torch(labels);
      opt.zero_grad();
      auto loss = torch::nn::functional::cross_entropy(model->forward(x), y);
      loss.backward();
      opt.step();
      loss_sum += loss.item<double>() * static_cast<double>(labels.numel());
      seen += labels.numel();
    }
    const double train_s = seconds_since(t0);
    std::printf("epoch %d: train_time_s=%.3f loss=%.4f\n", epoch, train_s,
                seen ? loss_sum / static_cast<double>(seen) : 0.0);
    std::fflush(stdout);
  }

  model->eval();
  int64_t correct = 0;
  const auto t_inf = std::chrono::steady_clock::now();
  {
    torch::NoGradGuard no_grad;
    for (auto [images, labels] : ts::data::batches(test, 1000)) {
      const auto predicted = model->forward(as_torch(images)).argmax(1);
      correct += predicted.eq(as_torch(labels)).sum().item<int64_t>();
    }
  }
  const double inference_s = seconds_since(t_inf);
  std::printf("test_accuracy=%.4f\ninference_s=%.3f\n",
              static_cast<double>(correct) / static_cast<double>(test.size()), inference_s);
  return 0;
}

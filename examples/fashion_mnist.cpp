// fashion_mnist - trains a CNN or an MLP on Fashion-MNIST with tessera's autograd, modules and
// SGD, prints a progress bar per epoch and the test accuracy, then saves the model as a NumPy
// .npz checkpoint, reloads it into a fresh model and checks that it predicts the same.
//
//   fashion_mnist [--model cnn|mlp] [--device cpu|cuda] [--epochs N] [--batch B] [--lr L]
//                 [--threads T] [--data DIR] [--save FILE] [--eval FILE] [--seed S] [--limit N]
//                 [--conv gemm|winograd] [--distributed] [--quantize int8]
//
// Defaults: cnn, cpu, 2 epochs, batch 64, lr 0.05 (SGD, momentum 0.9), 2 threads, the data in
// $TESSERA_FASHION_MNIST_DIR or /usr/share/datasets/fashion-mnist, checkpoint
// fashion_mnist_<model>.npz. --eval FILE only loads FILE and reports its test accuracy.
// --device cuda trains on the GPU: it needs the build of this file by nvcc (fashion_mnist_cuda,
// built when CMake runs with -DTESSERA_ENABLE_CUDA=ON). --limit N uses only the first N training
// and N test images. --conv winograd runs the CNN's second convolution (3x3, 32 -> 64 channels)
// as Winograd F(4x4, 3x3) forward and in its input gradient (set_float32_conv_algorithm; the
// first has one input channel and stays direct).
// --quantize int8 also quantizes the trained (or --eval) model statically for int8 inference
// (ts::nn::quant: calibrated on 512 training images) and prints its test accuracy and inference
// speed next to float32's.
// --distributed trains data-parallel across the ranks of an MPI job (tessera::dist):
// `mpirun -np 2 ./fashion_mnist --distributed --threads 1`. Each rank takes --batch examples of
// every global batch; rank 0 prints and saves. It needs the build linked with tessera::dist.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <stdexcept>
#include <string>
#include <tessera/data/fashion_mnist.hpp>
#include <tessera/nn.hpp>
#include <tessera/nn/checkpoint.hpp>
#include <tessera/nn/quant.hpp>
#include <tessera/optim.hpp>
#include <tessera/tessera.hpp>
#include <type_traits>

#include "fashion_mnist_model.hpp"

#if defined(__CUDACC__) || defined(TESSERA_CUDA_HOST_EMULATION)
#include <tessera/cuda.hpp>
#define FASHION_MNIST_CUDA 1
#endif
#if defined(TESSERA_EXAMPLE_MPI) && !defined(FASHION_MNIST_CUDA)
#include <optional>
#include <tessera/dist.hpp>
#define FASHION_MNIST_MPI 1
#endif

namespace ts = tessera;
using clock_type = std::chrono::steady_clock;

namespace {

struct Args {
  std::string model = "cnn";
  std::string device = "cpu";
  int epochs = 2;
  int64_t batch = 64;
  double lr = 0.05;
  int threads = 2;
  std::string data, save, eval;
  uint64_t seed = 1;
  int64_t limit = 0;  // 0: every image
  std::string conv = "gemm";
  bool distributed = false;
  std::string quantize;  // "" or "int8"
};

[[noreturn]] void usage(const std::string& why) {
  std::cerr << "fashion_mnist: " << why << "\n"
            << "usage: fashion_mnist [--model cnn|mlp] [--device cpu|cuda] [--epochs N] "
               "[--batch B] [--lr L] [--threads T] [--data DIR] [--save FILE] [--eval FILE] "
               "[--seed S] [--limit N] [--conv gemm|winograd] [--distributed] "
               "[--quantize int8]\n";
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "-h" || k == "--help") usage("trains a model on Fashion-MNIST");
    if (k == "--distributed") {
      a.distributed = true;
      continue;
    }
    if (i + 1 >= argc) usage("missing value after " + k);
    const std::string v = argv[++i];
    try {
      if (k == "--model")
        a.model = v;
      else if (k == "--device")
        a.device = v;
      else if (k == "--limit")
        a.limit = std::stoll(v);
      else if (k == "--epochs")
        a.epochs = std::stoi(v);
      else if (k == "--batch")
        a.batch = std::stoll(v);
      else if (k == "--lr")
        a.lr = std::stod(v);
      else if (k == "--threads")
        a.threads = std::stoi(v);
      else if (k == "--data")
        a.data = v;
      else if (k == "--save")
        a.save = v;
      else if (k == "--eval")
        a.eval = v;
      else if (k == "--seed")
        a.seed = std::stoull(v);
      else if (k == "--conv")
        a.conv = v;
      else if (k == "--quantize")
        a.quantize = v;
      else
        usage("unknown option " + k);
    } catch (const std::logic_error&) {
      usage("bad value '" + v + "' for " + k);
    }
  }
  if (a.model != "cnn" && a.model != "mlp") usage("--model is cnn or mlp, not " + a.model);
  if (a.device != "cpu" && a.device != "cuda") usage("--device is cpu or cuda, not " + a.device);
  if (a.conv != "gemm" && a.conv != "winograd") usage("--conv is gemm or winograd, not " + a.conv);
  if (!a.quantize.empty() && a.quantize != "int8") usage("--quantize is int8, not " + a.quantize);
  if (a.epochs < 0 || a.batch < 1 || !(a.lr > 0) || a.threads < 1 || a.limit < 0)
    usage("bad numeric option");
  if (a.save.empty()) a.save = "fashion_mnist_" + a.model + ".npz";
#if !defined(FASHION_MNIST_MPI)
  if (a.distributed)
    usage("--distributed needs the build linked with tessera::dist (MPI found by CMake)");
#endif
  return a;
}

// The models (fashion_mnist_model.hpp, shared with the training benchmarks): the README's CNN,
// conv(1->32)-relu-pool-conv(32->64)-relu-pool-fc(3136->128)-relu-fc(10), and an MLP
// 784-256-128-10.

// A batch on backend B (the dataset lives in host memory).
template <class B, class T>
ts::Tensor<T, B> on(const ts::Tensor<T, ts::cpu>& t) {
  if constexpr (std::is_same_v<B, ts::cpu>)
    return t;
  else
    return t.template to<B>();
}

// The first n examples (all of them for n = 0).
ts::data::Dataset first(const ts::data::Dataset& ds, int64_t n) {
  if (n == 0 || n >= ds.size()) return ds;
  return {ds.images.slice(0, 0, n), ds.labels.slice(0, 0, n)};
}

double seconds_since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

// Predicted class of every test image (batches of 1000, evaluation mode, no tape).
template <class B>
std::vector<int64_t> predict(ts::nn::Sequential<float, B>& model, const ts::data::Dataset& test) {
  model.eval();
  ts::no_grad guard;
  std::vector<int64_t> out;
  for (auto [images, labels] : ts::data::batches(test, 1000)) {
    const auto classes = ts::argmax(model(on<B>(images)).value(), 1).to_vector();
    out.insert(out.end(), classes.begin(), classes.end());
  }
  model.train();
  return out;
}

double accuracy(const std::vector<int64_t>& predicted, const ts::data::Dataset& test) {
  const auto labels = test.labels.to_vector();
  int64_t right = 0;
  for (size_t i = 0; i < labels.size(); ++i) right += predicted[i] == labels[i];
  return 100.0 * static_cast<double>(right) / static_cast<double>(labels.size());
}

// Static int8 quantization of the trained model (calibrated on the first 512 training images),
// then the test accuracy and inference speed of both, each timed as the best of three passes
// over the test set.
template <class B>
void report_int8(ts::nn::Sequential<float, B>& model, const ts::data::Dataset& train,
                 const ts::data::Dataset& test) {
  std::vector<ts::Tensor<float, B>> calibration;
  for (auto [images, labels] : ts::data::batches(train, 64)) {
    if (calibration.size() == 8) break;
    calibration.push_back(on<B>(images));
  }
  const auto q = ts::nn::quant::quantize_static(model, calibration);
  auto predict_int8 = [&] {
    std::vector<int64_t> out;
    for (auto [images, labels] : ts::data::batches(test, 1000)) {
      const auto classes = ts::argmax(q(on<B>(images)), 1).to_vector();
      out.insert(out.end(), classes.begin(), classes.end());
    }
    return out;
  };
  auto best_of_3 = [](auto&& f) {
    double best = 1e300;
    for (int i = 0; i < 3; ++i) {
      const auto t = clock_type::now();
      f();
      best = std::min(best, seconds_since(t));
    }
    return best;
  };
  const double acc32 = accuracy(predict(model, test), test);
  const double acc8 = accuracy(predict_int8(), test);
  const double s32 = best_of_3([&] { predict(model, test); });
  const double s8 = best_of_3([&] { predict_int8(); });
  const double n = static_cast<double>(test.size());
  std::printf(
      "int8 (static, %lld of %lld layers in int8): test accuracy %.2f%% (float32 %.2f%%, "
      "%+.2f points); inference %.0f images/s (float32 %.0f: %.2fx)\n",
      static_cast<long long>(q.quantized_layers()), static_cast<long long>(model.size()), acc8,
      acc32, acc8 - acc32, n / s8, n / s32, s32 / s8);
}

// One line, redrawn in place on a terminal; on a pipe, a line at each quarter of the epoch.
void progress(int epoch, int epochs, int64_t done, int64_t total, double loss, double samples_s,
              double eta, bool tty) {
  // Called every 16 batches and at the last: a quarter is crossed within the last 16.
  const bool quarter = done == total || (done * 4 / total) != ((done - 16) * 4 / total);
  if (!tty && !quarter) return;
  constexpr int width = 30;
  const int filled = static_cast<int>(width * done / total);
  std::printf("%sepoch %d/%d [%s%s] %lld/%lld loss %.4f %6.0f samples/s ETA %4.1fs%s",
              tty ? "\r" : "", epoch, epochs, std::string(filled, '=').c_str(),
              std::string(width - filled, ' ').c_str(), static_cast<long long>(done),
              static_cast<long long>(total), loss, samples_s, eta, tty ? "" : "\n");
  std::fflush(stdout);
}

// Trains (or, with --eval, evaluates) the model on backend B; returns the exit status.
template <class B>
int run(const Args& args, const ts::data::Dataset& train, const ts::data::Dataset& test) {
  auto model = fashion_mnist::make_model<B>(args.model);
  if (!args.eval.empty()) {
    ts::io::load(model, args.eval);
    const auto t = clock_type::now();
    const double acc = accuracy(predict(model, test), test);
    std::printf("%s: test accuracy %.2f%% (inference %.3f s)\n", args.eval.c_str(), acc,
                seconds_since(t));
    if (!args.quantize.empty()) report_int8(model, train, test);
    return 0;
  }
  // With --distributed: the process group and the DataParallel that averages the gradients
  // (its hooks are on the model's parameters, so the model is called as before).
  int rank = 0, ranks = 1;
#if defined(FASHION_MNIST_MPI)
  std::optional<ts::dist::ProcessGroup> pg;
  std::optional<ts::dist::DataParallel<ts::nn::Sequential<float, B>>> dp;
  if (args.distributed) {
    pg.emplace(ts::dist::init());
    dp.emplace(model, *pg);
    rank = pg->rank();
    ranks = pg->size();
  }
#endif
  const bool lead = rank == 0;  // prints and saves
  if (lead)
    std::printf("training %d epochs on %s, batch %lld%s, SGD lr %g momentum 0.9, %d threads%s\n",
                args.epochs, args.device.c_str(), static_cast<long long>(args.batch * ranks),
                ranks > 1 ? (" over " + std::to_string(ranks) + " ranks").c_str() : "", args.lr,
                args.threads, args.conv == "winograd" ? ", Winograd convolutions" : "");

  ts::optim::SGD opt(model.parameters(), {.lr = args.lr, .momentum = 0.9});
  ts::Generator rng(args.seed);
  const bool tty = lead && isatty(fileno(stdout));
  std::vector<int64_t> predicted;
  for (int epoch = 1; epoch <= args.epochs; ++epoch) {
    const auto t_epoch = clock_type::now();
    auto epoch_batches = ts::data::batches(train, args.batch, rng, ts::data::shard{rank, ranks});
    const int64_t total = static_cast<int64_t>(epoch_batches.size());
    int64_t done = 0, seen = 0;
    double loss_sum = 0;
    // The losses are added where they live and read back for the progress line only: on a GPU
    // every read is a wait for the device, which would otherwise stall each step.
    ts::Tensor<float, B> losses = ts::zeros<float, B>({});
    for (auto [images, labels] : epoch_batches) {
      auto loss = ts::nn::cross_entropy(model(on<B>(images)), on<B>(labels));
      opt.zero_grad();
      loss.backward();
      opt.step();
      losses += loss.value();
      ++done;
      seen += labels.numel();
      if (done % 16 != 0 && done != total) continue;
      loss_sum = losses.item();
      const double rate = static_cast<double>(seen * ranks) / seconds_since(t_epoch);
      const double eta = static_cast<double>(train.size() - seen * ranks) / rate;
      if (lead)
        progress(epoch, args.epochs, done, total, loss_sum / static_cast<double>(done), rate, eta,
                 tty);
    }
    const double train_s = seconds_since(t_epoch);
    const auto t_eval = clock_type::now();
    predicted = predict(model, test);
    const double infer_s = seconds_since(t_eval);
    if (lead)
      std::printf(
          "%sepoch %d: loss %.4f, train %.2f s (%.0f samples/s), test accuracy %.2f%%, "
          "inference %.3f s\n",
          tty ? "\n" : "", epoch, loss_sum / static_cast<double>(total), train_s,
          static_cast<double>(seen * ranks) / train_s, accuracy(predicted, test), infer_s);
  }
  if (!lead) return 0;  // every rank holds the same model: rank 0 saves it

  ts::io::save(model, args.save);
  auto reloaded = fashion_mnist::make_model<B>(args.model);
  ts::io::load(reloaded, args.save);
  const auto again = predict(reloaded, test);
  if (args.epochs > 0 && again != predicted) {
    std::fprintf(stderr, "fashion_mnist: the reloaded model predicts differently\n");
    return 1;
  }
  std::printf("saved %s; reloaded it: test accuracy %.2f%%, same predictions\n", args.save.c_str(),
              accuracy(again, test));
  if (!args.quantize.empty()) report_int8(model, train, test);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
#if !defined(FASHION_MNIST_CUDA)
  if (args.device == "cuda") {  // said before the dataset is loaded
    std::fprintf(
        stderr,
        "fashion_mnist: this build has no CUDA backend; --device cuda needs "
        "fashion_mnist_cuda (built by nvcc when CMake runs with -DTESSERA_ENABLE_CUDA=ON)\n");
    return 2;
  }
#endif
  ts::set_num_threads(args.threads);
  ts::set_float32_conv_algorithm(args.conv == "winograd" ? ts::conv_algorithm::winograd
                                                         : ts::conv_algorithm::gemm);
  ts::nn::manual_seed(args.seed);
  try {
    const auto t_load = clock_type::now();
    const auto train = first(ts::data::fashion_mnist("train", args.data), args.limit);
    const auto test = first(ts::data::fashion_mnist("test", args.data), args.limit);
    std::printf(
        "tessera fashion_mnist: %s, %lld training and %lld test images (loaded in %.1f s)\n",
        args.model.c_str(), static_cast<long long>(train.size()),
        static_cast<long long>(test.size()), seconds_since(t_load));
#if defined(FASHION_MNIST_CUDA)
    if (args.device == "cuda") return run<ts::cuda>(args, train, test);
#endif
    return run<ts::cpu>(args, train, test);
  } catch (const ts::error& e) {
    std::fprintf(stderr, "fashion_mnist: %s\n", e.what());
    return 1;
  }
}

// fashion_mnist_stats - loads the Fashion-MNIST training set, normalises it per pixel with
// tessera's reductions and broadcasting, and prints statistics and the mean image of each class.
//
//   fashion_mnist_stats [--data DIR]
//
// DIR defaults to $TESSERA_FASHION_MNIST_DIR, then /usr/share/datasets/fashion-mnist (Debian
// package dataset-fashion-mnist). Exits with code 1 when the data is missing or unreadable.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <string_view>
#include <tessera/io/idx.hpp>
#include <tessera/tessera.hpp>
#include <vector>

namespace ts = tessera;
namespace fs = std::filesystem;

namespace {

constexpr int kClasses = 10;
constexpr const char* kClassNames[kClasses] = {"T-shirt/top", "Trouser",   "Pullover", "Dress",
                                               "Coat",        "Sandal",    "Shirt",    "Sneaker",
                                               "Bag",         "Ankle boot"};
constexpr std::string_view kRamp = " .:-=+*#%@";  // darkest to brightest
constexpr int kArtPerRow = 3;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void usage(std::ostream& os) {
  os << "usage: fashion_mnist_stats [--data DIR]\n"
        "  DIR holds train-images-idx3-ubyte.gz and train-labels-idx1-ubyte.gz\n"
        "  (default: $TESSERA_FASHION_MNIST_DIR if set, else /usr/share/datasets/fashion-mnist;\n"
        "  now "
     << ts::io::fashion_mnist_dir().string() << ")\n";
}

// Name of the brightest 7x7 block of a 28x28 image, as a 4x4 grid position.
std::string brightest_block(const ts::Tensor<float, ts::cpu>& img) {
  static constexpr const char* rows[] = {"top", "upper-mid", "lower-mid", "bottom"};
  static constexpr const char* cols[] = {"left", "centre-left", "centre-right", "right"};
  // [28, 28] -> [4, 7, 4, 7]: block (r, c) is [r, :, c, :]; averaging dims 1 and 3 gives [4, 4].
  const auto blocks = ts::mean(img.view({4, 7, 4, 7}), {1, 3});
  const int64_t k = ts::argmax(blocks).item();
  const int64_t r = k / 4, c = k % 4;
  char buf[96];
  std::snprintf(buf, sizeof buf, "%s %s (rows %2lld-%2lld, cols %2lld-%2lld)", rows[r], cols[c],
                static_cast<long long>(7 * r), static_cast<long long>(7 * r + 6),
                static_cast<long long>(7 * c), static_cast<long long>(7 * c + 6));
  return buf;
}

// 28 columns x 14 rows of characters (two pixel rows per character keeps the aspect ratio),
// brightness scaled to the image's own maximum.
std::vector<std::string> ascii_art(const ts::Tensor<float, ts::cpu>& img) {
  const auto half_rows = ts::mean(img.view({14, 2, 28}), {1});
  const float hi = std::max(ts::max(half_rows).item(), 1e-6f);
  const auto level = ts::map(
      [hi](float v) {
        const int l = static_cast<int>(v / hi * static_cast<float>(kRamp.size()));
        return static_cast<int32_t>(std::clamp(l, 0, static_cast<int>(kRamp.size()) - 1));
      },
      half_rows);
  std::vector<std::string> lines(14, std::string(28, ' '));
  for (int64_t r = 0; r < 14; ++r)
    for (int64_t c = 0; c < 28; ++c) lines[r][c] = kRamp[static_cast<size_t>(level(r, c))];
  return lines;
}

}  // namespace

int main(int argc, char** argv) {
  fs::path dir = ts::io::fashion_mnist_dir();
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--data" && i + 1 < argc) {
      dir = argv[++i];
    } else if (a.starts_with("--data=")) {
      dir = std::string(a.substr(7));
    } else if (a == "-h" || a == "--help") {
      usage(std::cout);
      return 0;
    } else {
      std::cerr << "fashion_mnist_stats: unknown argument '" << a << "'\n";
      usage(std::cerr);
      return 2;
    }
  }
  const fs::path images_path = dir / "train-images-idx3-ubyte.gz";
  const fs::path labels_path = dir / "train-labels-idx1-ubyte.gz";
  for (const fs::path& p : {images_path, labels_path}) {
    if (!fs::exists(p)) {
      std::cerr << "fashion_mnist_stats: Fashion-MNIST not found: " << p.string()
                << " does not exist.\n"
                << "Install the Debian package dataset-fashion-mnist (apt-get install "
                   "dataset-fashion-mnist), or point --data DIR or TESSERA_FASHION_MNIST_DIR at a "
                   "folder holding train-images-idx3-ubyte.gz and train-labels-idx1-ubyte.gz.\n";
      return 1;
    }
  }

  try {
    // ---- load ----
    const auto t_load = std::chrono::steady_clock::now();
    const auto images = ts::io::read_idx<uint8_t>(images_path);  // [N, 28, 28]
    const auto labels = ts::io::read_idx<uint8_t>(labels_path);  // [N]
    const double load_s = seconds_since(t_load);
    if (images.rank() != 3 || images.size(1) != 28 || images.size(2) != 28 || labels.rank() != 1 ||
        labels.size(0) != images.size(0)) {
      std::cerr << "fashion_mnist_stats: unexpected shapes: images " << images.shape()
                << ", labels " << labels.shape() << " (expected [N, 28, 28] and [N])\n";
      return 1;
    }
    if (ts::max(labels).item() >= kClasses) {
      std::cerr << "fashion_mnist_stats: labels outside 0..9 in " << labels_path.string() << "\n";
      return 1;
    }
    const int64_t n = images.size(0);

    // ---- per-pixel normalisation ----
    const auto t_norm = std::chrono::steady_clock::now();
    constexpr float eps = 1e-6f;
    // One pass from bytes to floats in [0, 1].
    const auto x =
        ts::map([](uint8_t p) { return static_cast<float>(p) * (1.0f / 255.0f); }, images);
    const auto mean = ts::mean(x, {0});      // [28, 28]
    const auto sd = ts::std(x, {0});         // [28, 28]
    const auto z = (x - mean) / (sd + eps);  // [N, 28, 28] - [28, 28]: broadcast over images
    const float z_mean = ts::mean(z).item(), z_std = ts::std(z).item();
    const double norm_s = seconds_since(t_norm);

    // ---- per class: one-hot labels, class sums as a broadcast product ----
    const auto t_class = std::chrono::steady_clock::now();
    const auto classes = ts::arange<int32_t, ts::cpu>(kClasses);
    const auto onehot = (labels.view({n, 1}) == classes).astype<float>();  // [N, 10]
    const auto counts = ts::sum(onehot, {0});                              // [10]
    // class_sums[c, p] = sum_i onehot[i, c] * x[i, p]: [B, 10, 1] * [B, 1, 784] summed over the
    // B images of a chunk. Chunks keep the [B, 10, 784] temporary in cache.
    const auto xf = x.view({n, 28 * 28});
    auto class_sums = ts::zeros<float, ts::cpu>(ts::Shape{kClasses, 28 * 28});
    constexpr int64_t chunk = 1024;
    for (int64_t i = 0; i < n; i += chunk) {
      const int64_t end = std::min(n, i + chunk);
      class_sums +=
          ts::sum(onehot.slice(0, i, end).unsqueeze(2) * xf.slice(0, i, end).unsqueeze(1), {0});
    }
    const auto class_images = (class_sums / counts.view({kClasses, 1})).view({kClasses, 28, 28});
    // z is affine in x per pixel, so a class's mean z image is its mean image normalised.
    const auto class_z = (class_images - mean) / (sd + eps);  // [10, 28, 28]
    const auto intensity = ts::mean(class_images, {1, 2}), normalised = ts::mean(class_z, {1, 2});
    struct class_stats {
      int64_t count;
      float intensity, normalised;
      ts::Tensor<float, ts::cpu> image;
    };
    std::vector<class_stats> stats;
    for (int c = 0; c < kClasses; ++c)
      stats.push_back({static_cast<int64_t>(counts(c)), intensity(c), normalised(c),
                       class_images.select(0, c)});
    const double class_s = seconds_since(t_class);

    // ---- report ----
    std::printf("Fashion-MNIST training set from %s\n", dir.string().c_str());
    std::printf("images %s uint8, labels %s uint8; %d CPU thread(s)\n\n",
                images.shape().to_string().c_str(), labels.shape().to_string().c_str(),
                ts::get_num_threads());
    std::printf("per-pixel mean  : %.4f .. %.4f  (overall intensity %.4f)\n", ts::min(mean).item(),
                ts::max(mean).item(), ts::mean(x).item());
    std::printf("per-pixel std   : %.4f .. %.4f\n", ts::min(sd).item(), ts::max(sd).item());
    std::printf("normalised z = (x - mean) / (std + %.0e): mean %+.2e, std %.4f\n\n", eps, z_mean,
                z_std);

    std::printf("%-12s %6s %9s %11s  %s\n", "class", "count", "intensity", "normalised",
                "brightest 7x7 block");
    for (int c = 0; c < kClasses; ++c)
      std::printf("%-12s %6lld %9.4f %+11.4f  %s\n", kClassNames[c],
                  static_cast<long long>(stats[c].count), stats[c].intensity, stats[c].normalised,
                  brightest_block(stats[c].image).c_str());

    std::printf("\nmean image per class (each scaled to its own maximum, ramp \"%s\"):\n",
                std::string(kRamp).c_str());
    for (int first = 0; first < kClasses; first += kArtPerRow) {
      const int last = std::min(first + kArtPerRow, kClasses);
      std::vector<std::vector<std::string>> art;
      std::string title;
      for (int c = first; c < last; ++c) {
        art.push_back(ascii_art(stats[c].image));
        std::string name = kClassNames[c];
        name.resize(31, ' ');
        title += name;
      }
      std::printf("\n%s\n", title.c_str());
      for (int r = 0; r < 14; ++r) {
        std::string line;
        for (const auto& a : art) line += "|" + a[r] + "| ";
        std::printf("%s\n", line.c_str());
      }
    }

    std::printf("\ntiming: load %.3f s, normalisation %.3f s, per-class statistics %.3f s\n",
                load_s, norm_s, class_s);
  } catch (const ts::error& e) {
    std::cerr << "fashion_mnist_stats: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

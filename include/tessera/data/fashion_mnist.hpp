// tessera/data/fashion_mnist.hpp - the Fashion-MNIST dataset as a tessera::data::Dataset.
//
// Needs zlib (it reads the gzip'd IDX files with tessera/io/idx.hpp): link ZLIB::ZLIB.
//
//   auto train = ts::data::fashion_mnist("train");   // images [60000, 1, 28, 28], standardised
//   auto test = ts::data::fashion_mnist("test");     // images [10000, 1, 28, 28]
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "../io/idx.hpp"
#include "dataset.hpp"

TESSERA_BEGIN_NAMESPACE
namespace data {

/// Mean pixel value of the Fashion-MNIST training images after scaling to [0, 1].
inline constexpr float fashion_mnist_mean = 0.2860f;
/// Standard deviation of the Fashion-MNIST training pixels after scaling to [0, 1].
inline constexpr float fashion_mnist_std = 0.3530f;

namespace detail {

// `<dir>/<name>.gz`, or `<dir>/<name>` when only the uncompressed file is there (as left by
// gunzip); the .gz path when neither exists, so the error names the expected file.
inline std::filesystem::path idx_file(const std::filesystem::path& dir, const std::string& name) {
  std::filesystem::path gz = dir / (name + ".gz"), plain = dir / name;
  std::error_code ec;
  if (!std::filesystem::exists(gz, ec) && std::filesystem::exists(plain, ec)) return plain;
  return gz;
}

inline bool integer_idx_type(uint8_t code) {
  return code == 0x08 || code == 0x09 || code == 0x0B || code == 0x0C;
}

}  // namespace detail

/// Loads a Fashion-MNIST split from the IDX files in `dir`: "train" (60000 examples, files
/// train-images-idx3-ubyte.gz and train-labels-idx1-ubyte.gz) or "test" (10000, t10k-...);
/// the uncompressed files (same names without .gz) are read when the .gz ones are absent. An
/// empty `dir` means io::fashion_mnist_dir() ($TESSERA_FASHION_MNIST_DIR, else the Debian
/// package's /usr/share/datasets/fashion-mnist).
///
/// Returns images as float [N, 1, 28, 28] scaled to [0, 1] and, when `normalize` is true,
/// standardised to (x - fashion_mnist_mean) / fashion_mnist_std (the same values as
/// data::normalize gives), and labels as int64 [N] in 0..9.
///
/// Throws tessera::error for a split other than "train" or "test", and io_error naming the
/// path and the offending value when a file is missing or unreadable (everything io::read_idx
/// rejects), the images are not [N, 28, 28] uint8, the labels are not [N] of an integer type,
/// the two counts differ, or a label is outside 0..9.
inline Dataset fashion_mnist(std::string_view split, const std::filesystem::path& dir = {},
                             bool normalize = true) {
  constexpr std::string_view op = "fashion_mnist";
  using ::tessera::detail::fail;
  std::string prefix;
  if (split == "train")
    prefix = "train";
  else if (split == "test")
    prefix = "t10k";
  else
    fail<error>(op, "unknown split '", split, "' (expected \"train\" or \"test\")");
  const std::filesystem::path folder = dir.empty() ? io::fashion_mnist_dir() : dir;
  const auto images_path = detail::idx_file(folder, prefix + "-images-idx3-ubyte");
  const auto labels_path = detail::idx_file(folder, prefix + "-labels-idx1-ubyte");

  for (const auto& p : {images_path, labels_path}) {
    std::error_code ec;
    if (!std::filesystem::exists(p, ec))
      fail<io_error>(op, "'", p.string(),
                     "': no such file (install the Debian package "
                     "dataset-fashion-mnist, or pass the folder holding the IDX files as `dir` "
                     "or in TESSERA_FASHION_MNIST_DIR)");
  }
  // Headers first: a wrong file fails before 47 MB are decompressed.
  const io::idx_header ih = io::read_idx_header(images_path);
  if (ih.type_code != 0x08 || ih.shape.rank() != 3 || ih.shape[1] != 28 || ih.shape[2] != 28)
    fail<io_error>(op, "'", images_path.string(), "': images of shape ", ih.shape, " ",
                   ih.type_name(), " (expected [N, 28, 28] uint8)");
  const io::idx_header lh = io::read_idx_header(labels_path);
  if (!detail::integer_idx_type(lh.type_code) || lh.shape.rank() != 1)
    fail<io_error>(op, "'", labels_path.string(), "': labels of shape ", lh.shape, " ",
                   lh.type_name(), " (expected [N] of uint8 or another integer type)");
  if (lh.shape[0] != ih.shape[0])
    fail<io_error>(op, "'", images_path.string(), "' holds ", ih.shape[0], " images but '",
                   labels_path.string(), "' holds ", lh.shape[0], " labels");

  const auto raw = io::read_idx<uint8_t>(images_path);
  auto labels = io::read_idx<int64_t>(labels_path);  // exact for every integer IDX type
  const int64_t n = raw.size(0);
  const int64_t* lab = labels.data();
  for (int64_t i = 0; i < n; ++i)
    if (lab[i] < 0 || lab[i] > 9)
      fail<io_error>(op, "'", labels_path.string(), "': label ", lab[i], " at index ", i,
                     " is not a class in 0..9");

  // Every pixel is one of 256 bytes: convert through a table computed with the same float
  // operations as data::normalize, so both give identical values.
  std::array<float, 256> table;
  for (int p = 0; p < 256; ++p) {
    const float x = static_cast<float>(p) / 255.0f;
    table[static_cast<size_t>(p)] = normalize ? (x - fashion_mnist_mean) / fashion_mnist_std : x;
  }
  Tensor<float, cpu> images(Shape{n, 1, 28, 28});
  const uint8_t* src = raw.data();
  float* dst = images.data();
  ::tessera::detail::parallel_for(n * 784, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) dst[i] = table[src[i]];
  });
  return {images, labels};
}

}  // namespace data
TESSERA_END_NAMESPACE

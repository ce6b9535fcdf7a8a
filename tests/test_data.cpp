// Tests of the data layer (tessera/data): mini-batch iteration (coverage, order, contents,
// determinism, errors), normalize, and the Fashion-MNIST loader on the real files (skipped when
// absent) and on small synthetic IDX files that exercise its validation.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <iterator>
#include <optional>
#include <ranges>
#include <string>
#include <tessera/data/fashion_mnist.hpp>
#include <vector>

// A namespace of its own: test_layers compiles its sources as one (tests/CMakeLists.txt).
namespace test_data {

namespace ts = tessera;
namespace fs = std::filesystem;

static_assert(std::input_iterator<ts::data::batch_range::iterator>);
static_assert(std::ranges::input_range<ts::data::batch_range>);
static_assert(std::ranges::sized_range<ts::data::batch_range>);

// n examples of shape [n, 1, 2, 3]: element j of row i is 100 * i + j; label i is i, so a
// batch's labels say which rows it holds.
ts::data::Dataset numbered(int64_t n) {
  std::vector<float> img;
  for (int64_t i = 0; i < n; ++i)
    for (int j = 0; j < 6; ++j) img.push_back(static_cast<float>(100 * i + j));
  std::vector<int64_t> lab(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) lab[static_cast<size_t>(i)] = i;
  return {ts::from_vector<float, ts::cpu>(img, {n, 1, 2, 3}),
          ts::from_vector<int64_t, ts::cpu>(lab, {n})};
}

// Checks one pass: batch sizes, contents against the source rows, and that every index is
// visited exactly once (or, with drop_last, that the visited ones are distinct and all but the
// remainder). Returns the visiting order.
std::vector<int64_t> check_pass(const ts::data::Dataset& ds, const ts::data::batch_range& range,
                                int64_t bs, bool drop_last) {
  const int64_t n = ds.size();
  const int64_t full = n / bs, rest = n % bs;
  const int64_t expect_batches = full + (!drop_last && rest ? 1 : 0);
  EXPECT_EQ(range.size(), expect_batches);
  std::vector<int64_t> order;
  std::vector<int> seen(static_cast<size_t>(n), 0);
  int64_t k = 0;
  for (auto [images, labels] : range) {
    const int64_t b = k < full ? bs : rest;
    EXPECT_EQ(images.shape(), (ts::Shape{b, 1, 2, 3})) << "batch " << k;
    EXPECT_EQ(labels.shape(), (ts::Shape{b})) << "batch " << k;
    EXPECT_TRUE(images.is_contiguous() && labels.is_contiguous());
    EXPECT_FALSE(images.shares_storage_with(ds.images));
    EXPECT_FALSE(labels.shares_storage_with(ds.labels));
    for (int64_t r = 0; r < labels.size(0); ++r) {
      const int64_t i = labels(r);
      EXPECT_TRUE(i >= 0 && i < n);
      if (i < 0 || i >= n) continue;
      ++seen[static_cast<size_t>(i)];
      order.push_back(i);
      for (int64_t c = 0; c < 3; ++c)
        for (int64_t h = 0; h < 2; ++h)
          EXPECT_EQ(images(r, 0, h, c), ds.images(i, 0, h, c)) << "batch " << k << " row " << r;
    }
    ++k;
  }
  EXPECT_EQ(k, expect_batches);
  int64_t visited = 0;
  for (int s : seen) {
    EXPECT_LE(s, 1);
    visited += s;
  }
  EXPECT_EQ(visited, drop_last ? full * bs : n);
  return order;
}

std::vector<int64_t> identity(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = i;
  return v;
}

template <class E>
void expect_error(const std::function<void()>& f, std::initializer_list<std::string> parts) {
  try {
    f();
    ADD_FAILURE() << "no exception";
  } catch (const E& e) {
    const std::string msg = e.what();
    for (const auto& p : parts)
      EXPECT_NE(msg.find(p), std::string::npos) << msg << "\nmissing: " << p;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
}

TEST(Batches, EveryIndexOncePerEpoch) {
  const int64_t n = 130;
  const auto ds = numbered(n);
  for (int64_t bs : {int64_t{1}, int64_t{7}, int64_t{64}, n, n + 1}) {
    for (bool drop_last : {false, true}) {
      SCOPED_TRACE("batch " + std::to_string(bs) + " drop_last " + std::to_string(drop_last));
      // In order, with and without a generator.
      const auto in_order = check_pass(ds, ts::data::batches(ds, bs, drop_last), bs, drop_last);
      auto prefix = identity(n);
      prefix.resize(in_order.size());
      EXPECT_EQ(in_order, prefix);
      ts::Generator rng(3);
      const auto unshuffled = check_pass(
          ds, ts::data::batches(ds, bs, rng, /*shuffle=*/false, drop_last), bs, drop_last);
      EXPECT_EQ(unshuffled, in_order);
      // Shuffled.
      const auto range = ts::data::batches(ds, bs, rng, /*shuffle=*/true, drop_last);
      const auto shuffled = check_pass(ds, range, bs, drop_last);
      if (!drop_last || bs <= n) {
        EXPECT_NE(shuffled, in_order);
      }
      // The range's order() is the permutation the batches follow.
      auto perm = range.order();
      ASSERT_EQ(perm.size(), static_cast<size_t>(n));
      perm.resize(shuffled.size());
      EXPECT_EQ(perm, shuffled);
    }
  }
}

TEST(Batches, SameSeedSameOrderOtherSeedOther) {
  const auto ds = numbered(200);
  ts::Generator a(42), b(42), c(43);
  const auto oa = ts::data::batches(ds, 16, a).order();
  const auto ob = ts::data::batches(ds, 16, b).order();
  const auto oc = ts::data::batches(ds, 16, c).order();
  EXPECT_EQ(oa, ob);
  EXPECT_NE(oa, oc);
  // The next call draws the next epoch's order from the same stream.
  const auto oa2 = ts::data::batches(ds, 16, a).order();
  EXPECT_NE(oa, oa2);
  EXPECT_EQ(oa2, ts::data::batches(ds, 16, b).order());
}

TEST(Batches, OrderIsPinnedAcrossPlatforms) {
  // Fisher-Yates (i = N-1 .. 1, swap with rng.below(i + 1)) on xoshiro256** seeded 42: this
  // sequence is the contract, independent of compiler and standard library.
  ts::Generator rng(42);
  const auto order = ts::data::batches(numbered(10), 4, rng).order();
  EXPECT_EQ(order, (std::vector<int64_t>{7, 3, 8, 9, 5, 6, 4, 1, 0, 2}));
}

TEST(Batches, NoShuffleDoesNotDraw) {
  const auto ds = numbered(50);
  ts::Generator rng(5), fresh(5);
  (void)ts::data::batches(ds, 8, rng, /*shuffle=*/false);
  EXPECT_EQ(rng.next(), fresh.next());
}

TEST(Batches, BatchesAreFreshCopies) {
  const auto ds = numbered(10);
  ts::Generator rng(1);
  for (auto [images, labels] : ts::data::batches(ds, 4, rng)) {
    images.fill_(-1.0f);
    labels.fill_(-1);
  }
  const auto again = numbered(10);
  EXPECT_EQ(ds.images.to_vector(), again.images.to_vector());
  EXPECT_EQ(ds.labels.to_vector(), again.labels.to_vector());
}

TEST(Batches, RangeOutlivesTemporaryDataset) {
  int64_t rows = 0;
  for (auto [images, labels] : ts::data::batches(numbered(25), 10)) {
    rows += labels.size(0);
    EXPECT_EQ(images(0, 0, 0, 0), 100.0f * static_cast<float>(labels(0)));
  }
  EXPECT_EQ(rows, 25);
}

TEST(Batches, IndexingAndIterators) {
  const auto ds = numbered(23);
  ts::Generator rng(9);
  const auto range = ts::data::batches(ds, 5, rng);
  ASSERT_EQ(range.size(), 5);
  EXPECT_FALSE(range.empty());
  // operator[] and dereferencing give the same batch; dereferencing twice gathers twice.
  auto it = range.begin();
  std::advance(it, 2);
  const ts::data::Batch a = *it, b = range[2];
  EXPECT_EQ(a.labels.to_vector(), b.labels.to_vector());
  EXPECT_EQ(a.images.to_vector(), b.images.to_vector());
  EXPECT_FALSE(a.images.shares_storage_with(b.images));
  EXPECT_EQ(range[4].labels.size(0), 3);
  EXPECT_EQ(std::ranges::distance(range), 5);
  expect_error<ts::index_error>([&] { (void)range[5]; }, {"batches", "batch 5", "5 batches"});
  expect_error<ts::index_error>([&] { (void)range[-1]; }, {"batches"});
}

TEST(Batches, OtherImageShapesAndStridedSources) {
  // [N, 4] rows, and a dataset whose tensors are non-contiguous views.
  const auto base = ts::arange<float, ts::cpu>(0, 40).view({4, 10});
  // images [10, 4] with strides {1, 10}; labels 0, 2, ..., 18 (stride 2): row i has label 2i.
  const ts::data::Dataset strided{base.transpose(0, 1),
                                  ts::arange<int64_t, ts::cpu>(0, 20).slice(0, 0, 20, 2)};
  ASSERT_EQ(strided.size(), 10);
  ASSERT_FALSE(strided.images.is_contiguous());
  ASSERT_FALSE(strided.labels.is_contiguous());
  ts::Generator rng(2);
  for (auto [images, labels] : ts::data::batches(strided, 3, rng)) {
    ASSERT_EQ(images.rank(), 2);
    for (int64_t r = 0; r < labels.size(0); ++r) {
      const int64_t i = labels(r) / 2;
      for (int64_t c = 0; c < 4; ++c) EXPECT_EQ(images(r, c), base(c, i));
    }
  }
}

TEST(Batches, EmptyDataset) {
  const auto ds = numbered(0);
  ts::Generator rng(0);
  const auto range = ts::data::batches(ds, 8, rng);
  EXPECT_EQ(range.size(), 0);
  EXPECT_TRUE(range.empty());
  EXPECT_EQ(range.begin(), range.end());
  EXPECT_EQ(ts::data::Dataset{}.size(), 0);
}

TEST(Batches, Errors) {
  const auto ds = numbered(10);
  ts::Generator rng(0);
  for (int64_t bs : {int64_t{0}, int64_t{-3}}) {
    expect_error<ts::shape_error>([&] { (void)ts::data::batches(ds, bs, rng); },
                                  {"tessera::batches", "batch_size " + std::to_string(bs)});
    expect_error<ts::shape_error>([&] { (void)ts::data::batches(ds, bs); }, {"batches"});
  }
  ts::data::Dataset bad{ds.images, ds.labels.slice(0, 0, 9)};
  expect_error<ts::shape_error>([&] { (void)ts::data::batches(bad, 2, rng); },
                                {"batches", "[9]", "[10, 1, 2, 3]"});
  ts::data::Dataset scalar{ts::full<float, ts::cpu>({}, 1.0f), ds.labels};
  expect_error<ts::shape_error>([&] { (void)ts::data::batches(scalar, 2); }, {"batches"});
  expect_error<ts::error>([&] { (void)ts::data::batches(ts::data::Dataset{}, 2); },
                          {"batches", "undefined"});
}

TEST(Normalize, ValuesShapesAndInPlace) {
  ts::Generator g(11);
  const auto x = ts::rand<float, ts::cpu>({3, 37}, g);  // 37: a SIMD tail
  const auto y = ts::data::normalize(x, 0.25f, 0.5f);
  ASSERT_EQ(y.shape(), x.shape());
  const auto xv = x.to_vector(), yv = y.to_vector();
  for (size_t i = 0; i < xv.size(); ++i) EXPECT_EQ(yv[i], (xv[i] - 0.25f) / 0.5f);
  // Strided input.
  const auto t = ts::data::normalize(x.transpose(0, 1), 0.1f, 3.0f);
  for (int64_t i = 0; i < 37; ++i)
    for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(t(i, j), (x(j, i) - 0.1f) / 3.0f);
  // In place.
  auto z = x.clone();
  EXPECT_EQ(ts::data::normalize_(z, 0.25f, 0.5f).data(), z.data());
  EXPECT_EQ(z.to_vector(), yv);
}

TEST(Normalize, Errors) {
  const auto x = ts::ones<float, ts::cpu>({4});
  for (float s : {0.0f, -1.0f, NAN, INFINITY})
    expect_error<ts::error>([&] { (void)ts::data::normalize(x, 0.0f, s); }, {"normalize", "std"});
  expect_error<ts::error>([&] { (void)ts::data::normalize(x, NAN, 1.0f); }, {"normalize"});
  expect_error<ts::error>([&] { (void)ts::data::normalize_(x, 0.0f, 0.0f); }, {"normalize_"});
}

// ---- Fashion-MNIST ----------------------------------------------------------------------

bool have_fashion_mnist() {
  const fs::path d = ts::io::fashion_mnist_dir();
  for (const char* f : {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                        "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"})
    if (!fs::exists(d / f)) return false;
  return true;
}

class FashionMnist : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (have_fashion_mnist()) train_ = ts::data::fashion_mnist("train");
  }
  static void TearDownTestSuite() { train_.reset(); }
  void SetUp() override {
    if (!have_fashion_mnist())
      GTEST_SKIP() << "Fashion-MNIST not found in " << ts::io::fashion_mnist_dir()
                   << " (Debian package dataset-fashion-mnist)";
  }
  static inline std::optional<ts::data::Dataset> train_;
};

TEST_F(FashionMnist, TrainSplit) {
  const auto& train = *train_;
  EXPECT_EQ(train.size(), 60000);
  EXPECT_EQ(train.images.shape(), (ts::Shape{60000, 1, 28, 28}));
  EXPECT_EQ(train.labels.shape(), (ts::Shape{60000}));
  EXPECT_EQ(ts::min(train.labels).item(), 0);
  EXPECT_EQ(ts::max(train.labels).item(), 9);
  // 6000 of each class.
  std::vector<int64_t> count(10, 0);
  for (int64_t l : train.labels.to_vector()) ++count[static_cast<size_t>(l)];
  for (int64_t c : count) EXPECT_EQ(c, 6000);
  // Standardised with the training statistics.
  EXPECT_NEAR(ts::mean(train.images).item(), 0.0, 2e-3);
  EXPECT_NEAR(ts::std(train.images).item(), 1.0, 2e-3);
}

TEST_F(FashionMnist, TestSplitAndRawScale) {
  const auto test = ts::data::fashion_mnist("test", ts::io::fashion_mnist_dir(), false);
  EXPECT_EQ(test.images.shape(), (ts::Shape{10000, 1, 28, 28}));
  EXPECT_EQ(test.labels.shape(), (ts::Shape{10000}));
  EXPECT_EQ(ts::min(test.labels).item(), 0);
  EXPECT_EQ(ts::max(test.labels).item(), 9);
  EXPECT_EQ(ts::min(test.images).item(), 0.0f);
  EXPECT_EQ(ts::max(test.images).item(), 1.0f);
  // normalize = true gives exactly data::normalize of the [0, 1] images.
  const auto norm = ts::data::fashion_mnist("test");
  const auto ref =
      ts::data::normalize(test.images, ts::data::fashion_mnist_mean, ts::data::fashion_mnist_std);
  EXPECT_EQ(norm.images.to_vector(), ref.to_vector());
  EXPECT_EQ(norm.labels.to_vector(), test.labels.to_vector());
}

TEST_F(FashionMnist, RawTrainStatisticsMatchTheConstants) {
  const auto& train = *train_;
  // Undo the standardisation: the [0, 1] pixels' mean and std are the published constants.
  const auto x = train.images * ts::data::fashion_mnist_std + ts::data::fashion_mnist_mean;
  EXPECT_NEAR(ts::mean(x).item(), 0.2860, 5e-4);
  EXPECT_NEAR(ts::std(x).item(), 0.3530, 5e-4);
}

TEST_F(FashionMnist, BatchesOfAnEpoch) {
  ts::Generator rng(0);
  const auto range = ts::data::batches(*train_, 64, rng);
  EXPECT_EQ(range.size(), 938);
  int64_t rows = 0, k = 0;
  for (auto [images, labels] : range) {
    EXPECT_EQ(images.size(0), labels.size(0));
    EXPECT_EQ(images.size(0), ++k < 938 ? 64 : 60000 % 64);
    rows += labels.size(0);
  }
  EXPECT_EQ(rows, 60000);
}

// ---- Fashion-MNIST validation on synthetic files ----------------------------------------

using bytes = std::vector<unsigned char>;

void put_be32(bytes& b, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<unsigned char>(v >> s));
}
bytes idx_u8(const std::vector<int64_t>& dims, const std::vector<uint8_t>& values,
             uint8_t code = 0x08) {
  bytes b = {0, 0, code, static_cast<unsigned char>(dims.size())};
  for (int64_t d : dims) put_be32(b, static_cast<uint32_t>(d));
  b.insert(b.end(), values.begin(), values.end());
  return b;
}

// A fresh folder per test, removed afterwards.
class synthetic_dir {
 public:
  explicit synthetic_dir(const std::string& name) {
    path_ = fs::temp_directory_path() /
            ("tessera_test_data_" + std::to_string(::getpid()) + "_" + name);
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~synthetic_dir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }
  fs::path gz(const std::string& name, const bytes& b) const {
    const fs::path p = path_ / (name + ".gz");
    gzFile f = gzopen(p.c_str(), "wb");
    EXPECT_NE(f, nullptr);
    if (f) {
      EXPECT_EQ(gzwrite(f, b.data(), static_cast<unsigned>(b.size())), static_cast<int>(b.size()));
      gzclose(f);
    }
    return p;
  }
  fs::path plain(const std::string& name, const bytes& b) const {
    const fs::path p = path_ / name;
    std::ofstream(p, std::ios::binary)
        .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
    return p;
  }

 private:
  fs::path path_;
};

// n images of 28x28 whose pixel k of image i is (i + k) % 256, and labels l.
bytes images_bytes(int64_t n, int64_t h = 28, int64_t w = 28) {
  std::vector<uint8_t> v;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < h * w; ++k) v.push_back(static_cast<uint8_t>((i + k) % 256));
  return idx_u8({n, h, w}, v);
}
bytes labels_bytes(const std::vector<uint8_t>& l) {
  return idx_u8({static_cast<int64_t>(l.size())}, l);
}

TEST(FashionMnistFiles, LoadsSmallGzipAndPlainFiles) {
  synthetic_dir d("ok");
  d.gz("train-images-idx3-ubyte", images_bytes(5));
  d.gz("train-labels-idx1-ubyte", labels_bytes({3, 0, 9, 1, 7}));
  // The test split as uncompressed files (no .gz name).
  d.plain("t10k-images-idx3-ubyte", images_bytes(2));
  d.plain("t10k-labels-idx1-ubyte", labels_bytes({4, 5}));

  const auto raw = ts::data::fashion_mnist("train", d.path(), false);
  ASSERT_EQ(raw.images.shape(), (ts::Shape{5, 1, 28, 28}));
  EXPECT_EQ(raw.labels.to_vector(), (std::vector<int64_t>{3, 0, 9, 1, 7}));
  for (int64_t i : {0, 4})
    for (int64_t k : {0, 100, 783})
      EXPECT_EQ(raw.images(i, 0, k / 28, k % 28), static_cast<float>((i + k) % 256) / 255.0f);
  const auto norm = ts::data::fashion_mnist("train", d.path());
  const float p = static_cast<float>((4 + 100) % 256) / 255.0f;
  EXPECT_EQ(norm.images(4, 0, 100 / 28, 100 % 28),
            (p - ts::data::fashion_mnist_mean) / ts::data::fashion_mnist_std);

  const auto test = ts::data::fashion_mnist("test", d.path());
  EXPECT_EQ(test.images.shape(), (ts::Shape{2, 1, 28, 28}));
  EXPECT_EQ(test.labels.to_vector(), (std::vector<int64_t>{4, 5}));
}

TEST(FashionMnistFiles, EmptyDirMeansTheEnvironmentFolder) {
  synthetic_dir d("env");
  d.gz("t10k-images-idx3-ubyte", images_bytes(3));
  d.gz("t10k-labels-idx1-ubyte", labels_bytes({1, 2, 3}));
  const char* old = std::getenv("TESSERA_FASHION_MNIST_DIR");
  const std::optional<std::string> saved = old ? std::optional<std::string>(old) : std::nullopt;
  ::setenv("TESSERA_FASHION_MNIST_DIR", d.path().c_str(), 1);
  const auto test = ts::data::fashion_mnist("test");
  if (saved)
    ::setenv("TESSERA_FASHION_MNIST_DIR", saved->c_str(), 1);
  else
    ::unsetenv("TESSERA_FASHION_MNIST_DIR");
  EXPECT_EQ(test.size(), 3);
}

TEST(FashionMnistFiles, CountMismatch) {
  synthetic_dir d("count");
  const auto ip = d.gz("train-images-idx3-ubyte", images_bytes(5));
  const auto lp = d.gz("train-labels-idx1-ubyte", labels_bytes({1, 2, 3, 4}));
  expect_error<ts::io_error>([&] { (void)ts::data::fashion_mnist("train", d.path()); },
                             {"fashion_mnist", ip.string(), lp.string(), "5 images", "4 labels"});
}

TEST(FashionMnistFiles, LabelOutOfRange) {
  synthetic_dir d("label");
  d.gz("train-images-idx3-ubyte", images_bytes(4));
  const auto lp = d.gz("train-labels-idx1-ubyte", labels_bytes({0, 9, 10, 2}));
  expect_error<ts::io_error>([&] { (void)ts::data::fashion_mnist("train", d.path()); },
                             {"fashion_mnist", lp.string(), "label 10", "index 2"});
}

TEST(FashionMnistFiles, WrongImageDimsAndTypes) {
  synthetic_dir d("dims");
  d.gz("train-labels-idx1-ubyte", labels_bytes({0, 1}));
  auto ip = d.gz("train-images-idx3-ubyte", images_bytes(2, 28, 27));
  expect_error<ts::io_error>([&] { (void)ts::data::fashion_mnist("train", d.path()); },
                             {"fashion_mnist", ip.string(), "[2, 28, 27]", "[N, 28, 28] uint8"});
  // Rank 2 images.
  ip = d.gz("train-images-idx3-ubyte", idx_u8({2, 784}, std::vector<uint8_t>(2 * 784, 1)));
  expect_error<ts::io_error>([&] { (void)ts::data::fashion_mnist("train", d.path()); },
                             {ip.string(), "[2, 784]"});
  // int8 pixels.
  ip = d.gz("train-images-idx3-ubyte",
            idx_u8({2, 28, 28}, std::vector<uint8_t>(2 * 784, 1), /*code=*/0x09));
  expect_error<ts::io_error>([&] { (void)ts::data::fashion_mnist("train", d.path()); },
                             {ip.string(), "int8"});
  // Labels of rank 2.
  d.gz("train-images-idx3-ubyte", images_bytes(2));
  const auto lp = d.gz("train-labels-idx1-ubyte", idx_u8({2, 1}, {0, 1}));
  expect_error<ts::io_error>([&] { (void)ts::data::fashion_mnist("train", d.path()); },
                             {lp.string(), "[2, 1]"});
}

TEST(FashionMnistFiles, MissingFilesAndCorruptData) {
  synthetic_dir d("missing");
  expect_error<ts::io_error>([&] { (void)ts::data::fashion_mnist("train", d.path()); },
                             {"train-images-idx3-ubyte.gz", "no such file"});
  d.gz("train-images-idx3-ubyte", images_bytes(3));
  expect_error<ts::io_error>([&] { (void)ts::data::fashion_mnist("train", d.path()); },
                             {"train-labels-idx1-ubyte.gz", "no such file"});
  // Truncated image data: the header says 3 images, the file holds 2.
  d.gz("train-images-idx3-ubyte", idx_u8({3, 28, 28}, std::vector<uint8_t>(2 * 784, 7)));
  d.gz("train-labels-idx1-ubyte", labels_bytes({1, 2, 3}));
  expect_error<ts::io_error>([&] { (void)ts::data::fashion_mnist("train", d.path()); },
                             {"train-images-idx3-ubyte.gz", "truncated data"});
}

TEST(FashionMnistFiles, UnknownSplit) {
  for (const char* split : {"valid", "", "TRAIN"}) {
    try {
      (void)ts::data::fashion_mnist(split, "/nonexistent");
      ADD_FAILURE() << "no exception for split '" << split << "'";
    } catch (const ts::io_error& e) {
      ADD_FAILURE() << "an unknown split is not a file problem: " << e.what();
    } catch (const ts::error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("fashion_mnist"), std::string::npos) << msg;
      std::string quoted = "unknown split '";
      quoted.append(split).push_back('\'');  // (not operator+: GCC 12's -Wrestrict false alarm)
      EXPECT_NE(msg.find(quoted), std::string::npos) << msg;
    }
  }
}

}  // namespace test_data

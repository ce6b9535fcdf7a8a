// Tests of the IDX reader (tessera/io/idx.hpp): round trips of every stored type, plain and
// gzip'd, conversions, every kind of corrupt file, and the real Fashion-MNIST files if present.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <string>
#include <tessera/io/idx.hpp>
#include <vector>

#include "temp_dir.hpp"

// A namespace of its own: test_layers compiles its sources as one (tests/CMakeLists.txt).
namespace test_idx {

namespace ts = tessera;
namespace fs = std::filesystem;

using bytes = std::vector<unsigned char>;

const tt::temp_dir& tmp() { return tt::scratch("idx"); }

void put_be32(bytes& b, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<unsigned char>(v >> s));
}

// IDX type code of a stored C++ type.
template <class S>
constexpr uint8_t code_of() {
  if constexpr (std::is_same_v<S, uint8_t>)
    return 0x08;
  else if constexpr (std::is_same_v<S, int8_t>)
    return 0x09;
  else if constexpr (std::is_same_v<S, int16_t>)
    return 0x0B;
  else if constexpr (std::is_same_v<S, int32_t>)
    return 0x0C;
  else if constexpr (std::is_same_v<S, float>)
    return 0x0D;
  else
    return 0x0E;
}

// The bytes of an IDX file holding `values` (row-major) with the given dims.
template <class S>
bytes idx_bytes(const std::vector<int64_t>& dims, const std::vector<S>& values) {
  bytes b = {0, 0, code_of<S>(), static_cast<unsigned char>(dims.size())};
  for (int64_t d : dims) put_be32(b, static_cast<uint32_t>(d));
  for (S v : values) {
    using U = std::conditional_t<
        sizeof(S) == 1, uint8_t,
        std::conditional_t<sizeof(S) == 2, uint16_t,
                           std::conditional_t<sizeof(S) == 4, uint32_t, uint64_t>>>;
    const U u = std::bit_cast<U>(v);
    for (int s = 8 * static_cast<int>(sizeof(S)) - 8; s >= 0; s -= 8)
      b.push_back(static_cast<unsigned char>(u >> s));
  }
  return b;
}

fs::path write_plain(const std::string& name, const bytes& b) {
  const fs::path p = tmp().file(name);
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  return p;
}

fs::path write_gz(const std::string& name, const bytes& b) {
  const fs::path p = tmp().file(name);
  gzFile f = gzopen(p.c_str(), "wb");
  EXPECT_NE(f, nullptr);
  if (!b.empty()) {
    EXPECT_EQ(gzwrite(f, b.data(), static_cast<unsigned>(b.size())), static_cast<int>(b.size()));
  }
  gzclose(f);
  return p;
}

bytes read_all(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return bytes(std::istreambuf_iterator<char>(f), {});
}

// Expects read_idx<T>(path) to throw io_error whose message names the path and every one of
// `parts`.
template <class T = uint8_t>
void expect_io_error(const fs::path& path, std::initializer_list<std::string> parts) {
  try {
    (void)ts::io::read_idx<T>(path);
    ADD_FAILURE() << "no io_error for " << path;
  } catch (const ts::io_error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path.string()), std::string::npos) << msg;
    EXPECT_NE(msg.find("read_idx"), std::string::npos) << msg;
    for (const auto& part : parts)
      EXPECT_NE(msg.find(part), std::string::npos) << "'" << part << "' in: " << msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type for " << path << ": " << e.what();
  }
}

// Writes `values` as stored type S in both encodings and checks read_idx<T> gives `expect`.
template <class S, class T>
void check_round_trip(const std::string& name, const std::vector<int64_t>& dims,
                      const std::vector<S>& values, const std::vector<T>& expect) {
  const bytes b = idx_bytes(dims, values);
  for (const fs::path& p : {write_plain(name, b), write_gz(name + ".gz", b)}) {
    SCOPED_TRACE(p.string());
    const auto t = ts::io::read_idx<T>(p);
    ASSERT_EQ(t.rank(), static_cast<int>(dims.size()));
    for (int i = 0; i < t.rank(); ++i) EXPECT_EQ(t.size(i), dims[i]);
    EXPECT_TRUE(t.is_contiguous());
    ASSERT_EQ(t.numel(), static_cast<int64_t>(expect.size()));
    for (size_t i = 0; i < expect.size(); ++i) {
      if constexpr (std::is_floating_point_v<T>) {
        if (std::isnan(expect[i])) {
          EXPECT_TRUE(std::isnan(t.data()[i])) << "at " << i;
          continue;
        }
      }
      EXPECT_EQ(t.data()[i], expect[i]) << "at " << i;
    }
    const auto h = ts::io::read_idx_header(p);
    EXPECT_EQ(h.type_code, code_of<S>());
    EXPECT_EQ(h.element_size(), sizeof(S));
    EXPECT_EQ(h.shape.rank(), static_cast<int>(dims.size()));
  }
}

template <class S>
std::vector<S> ramp(size_t n, double scale, double shift) {
  std::vector<S> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<S>(static_cast<double>(i) * scale + shift);
  return v;
}

// ---- round trips, stored type read as itself ----

TEST(Idx, Uint8Rank1) {
  auto v = ramp<uint8_t>(256, 1, 0);
  check_round_trip<uint8_t, uint8_t>("u8_r1", {256}, v, v);
}
TEST(Idx, Int8Rank2) {
  auto v = ramp<int8_t>(12, 21, -128);
  check_round_trip<int8_t, int8_t>("i8_r2", {3, 4}, v, v);
}
TEST(Idx, Int16Rank3AsInt32) {
  auto v = ramp<int16_t>(24, 2800.5, -32768);
  std::vector<int32_t> e(v.begin(), v.end());
  check_round_trip<int16_t, int32_t>("i16_r3", {2, 3, 4}, v, e);
}
TEST(Idx, Int32Rank2) {
  std::vector<int32_t> v = {
      0,         1, -1, std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min(),
      0x01020304};
  check_round_trip<int32_t, int32_t>("i32_r2", {2, 3}, v, v);
}
TEST(Idx, Float32Rank4) {
  std::vector<float> v = ramp<float>(2 * 3 * 2 * 5, 0.37, -9.5);
  v[3] = std::numeric_limits<float>::infinity();
  v[4] = -0.0f;
  v[5] = std::numeric_limits<float>::denorm_min();
  v[6] = std::numeric_limits<float>::quiet_NaN();
  check_round_trip<float, float>("f32_r4", {2, 3, 2, 5}, v, v);
}
TEST(Idx, Float64Rank1) {
  std::vector<double> v = {1.0 / 3, -1e300, 5e-324, 0.0, std::numeric_limits<double>::quiet_NaN()};
  check_round_trip<double, double>("f64_r1", {5}, v, v);
}
TEST(Idx, Rank8) {
  auto v = ramp<int32_t>(2 * 1 * 2 * 1 * 3 * 1 * 2 * 2, 7, -50);
  check_round_trip<int32_t, int32_t>("i32_r8", {2, 1, 2, 1, 3, 1, 2, 2}, v, v);
}
TEST(Idx, ZeroSizeDimension) {
  check_round_trip<float, float>("f32_empty", {0, 7}, {}, {});
  check_round_trip<uint8_t, uint8_t>("u8_empty", {4, 0, 2}, {}, {});
}
TEST(Idx, LargerThanOneChunkGz) {
  // More than the reader's buffer growth steps, to exercise incremental reads.
  const size_t n = (size_t{17} << 20) + 3;
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 31 + (i >> 12));
  const fs::path p = write_gz("big.gz", idx_bytes<uint8_t>({static_cast<int64_t>(n)}, v));
  const auto t = ts::io::read_idx<uint8_t>(p);
  ASSERT_EQ(t.numel(), static_cast<int64_t>(n));
  EXPECT_EQ(std::memcmp(t.data(), v.data(), n), 0);
}

// ---- conversions on read ----

TEST(Idx, Uint8ToFloatAndDouble) {
  auto v = ramp<uint8_t>(10, 25, 3);
  check_round_trip<uint8_t, float>("u8_f", {10}, v, std::vector<float>(v.begin(), v.end()));
  check_round_trip<uint8_t, double>("u8_d", {2, 5}, v, std::vector<double>(v.begin(), v.end()));
}
TEST(Idx, Int8ToInt64) {
  std::vector<int8_t> v = {-128, -1, 0, 1, 127};
  check_round_trip<int8_t, int64_t>("i8_i64", {5}, v, std::vector<int64_t>(v.begin(), v.end()));
}
TEST(Idx, Float64ToFloat32) {
  std::vector<double> v = {0.1, -2.5, 1e40};
  std::vector<float> e = {0.1f, -2.5f, std::numeric_limits<float>::infinity()};
  check_round_trip<double, float>("f64_f32", {3}, v, e);
}
TEST(Idx, FloatToIntegerTruncatesAndSaturates) {
  std::vector<float> v = {2.9f, -2.9f, 1e10f, -1e10f, std::numeric_limits<float>::quiet_NaN(),
                          300.f};
  check_round_trip<float, int32_t>(
      "f32_i32", {6}, v,
      {2, -2, std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min(), 0, 300});
  check_round_trip<float, uint8_t>("f32_u8", {6}, v, {2, 0, 255, 0, 0, 255});
}
TEST(Idx, ToBool) {
  std::vector<int32_t> v = {0, 5, -1, 0};
  check_round_trip<int32_t, bool>("i32_b", {4}, v, {false, true, true, false});
}
TEST(Idx, ToHalf) {
  std::vector<uint8_t> v = {0, 1, 255};
  check_round_trip<uint8_t, ts::half>("u8_h", {3}, v,
                                      {ts::half(0.f), ts::half(1.f), ts::half(255.f)});
}

// ---- header only ----

TEST(Idx, ReadHeader) {
  const fs::path p = write_gz("hdr.gz", idx_bytes<int16_t>({3, 4, 5}, ramp<int16_t>(60, 1, 0)));
  const auto h = ts::io::read_idx_header(p);
  EXPECT_EQ(h.type_code, 0x0B);
  EXPECT_EQ(h.type_name(), "int16");
  EXPECT_EQ(h.shape, (ts::Shape{3, 4, 5}));
}

// ---- corrupt and missing files ----

TEST(IdxErrors, MissingFile) { expect_io_error(tmp().file("does_not_exist.gz"), {"no such file"}); }
TEST(IdxErrors, Directory) { expect_io_error(tmp().file(""), {"directory"}); }
TEST(IdxErrors, EmptyFile) {
  expect_io_error(write_plain("empty", {}), {"empty"});
  expect_io_error(write_gz("empty.gz", {}), {"empty"});
}
TEST(IdxErrors, TruncatedMagic) {
  expect_io_error(write_plain("magic2", {0, 0}), {"truncated header"});
  expect_io_error(write_gz("magic3.gz", {0, 0, 8}), {"truncated header"});
}
TEST(IdxErrors, TruncatedDims) {
  bytes b = {0, 0, 0x08, 3};
  put_be32(b, 2);
  put_be32(b, 3);
  b.push_back(0);
  expect_io_error(write_plain("dims", b), {"truncated header", "9 of 12"});
  expect_io_error(write_gz("dims.gz", b), {"truncated header"});
}
TEST(IdxErrors, WrongMagic) {
  bytes b = idx_bytes<uint8_t>({2}, {1, 2});
  b[0] = 0x01;
  expect_io_error(write_plain("magic", b), {"wrong magic", "0x01"});
  b[0] = 0;
  b[1] = 0x08;
  expect_io_error(write_gz("magic.gz", b), {"wrong magic"});
  // Text that happens to be a file.
  expect_io_error(write_plain("text", {'h', 'e', 'l', 'l', 'o'}), {"wrong magic"});
}
TEST(IdxErrors, UnknownTypeCode) {
  for (unsigned char code : {0x00, 0x07, 0x0A, 0x0F, 0xFF}) {
    bytes b = idx_bytes<uint8_t>({2}, {1, 2});
    b[2] = code;
    expect_io_error(write_plain("type", b), {"unknown data type code"});
  }
}
TEST(IdxErrors, BadRank) {
  expect_io_error(write_plain("rank0", {0, 0, 0x08, 0}), {"rank 0"});
  bytes b = {0, 0, 0x08, 9};
  for (int i = 0; i < 9; ++i) put_be32(b, 1);
  b.push_back(7);
  expect_io_error(write_plain("rank9", b), {"rank 9"});
  expect_io_error(write_gz("rank9.gz", b), {"rank 9"});
}
TEST(IdxErrors, NegativeDimension) {
  bytes b = {0, 0, 0x08, 2};
  put_be32(b, 2);
  put_be32(b, 0xFFFFFFFEu);
  expect_io_error(write_plain("neg", b), {"negative", "-2"});
}
TEST(IdxErrors, OverflowingShape) {
  // 2^31-1 cubed overflows int64: rejected from the header alone.
  bytes b = {0, 0, 0x0E, 3};
  for (int i = 0; i < 3; ++i) put_be32(b, 0x7FFFFFFFu);
  expect_io_error(write_plain("huge3", b), {"too large"});
  expect_io_error(write_gz("huge3.gz", b), {"too large"});
  // Elements fit int64, bytes (x8) do not.
  bytes c = {0, 0, 0x0E, 3};
  put_be32(c, 0x7FFFFFFFu);
  put_be32(c, 0x7FFFFFFFu);
  put_be32(c, 4);
  expect_io_error(write_plain("hugebytes", c), {"too large"});
}
TEST(IdxErrors, HugeDeclaredShapeWithLittleData) {
  // 2^62 bytes declared, a few present: fails without trying to allocate the declared size.
  bytes b = {0, 0, 0x08, 2};
  put_be32(b, 0x7FFFFFFFu);
  put_be32(b, 0x7FFFFFFFu);
  for (int i = 0; i < 100; ++i) b.push_back(1);
  expect_io_error(write_plain("hugeshape", b), {"truncated data", "holds 100"});
  expect_io_error(write_gz("hugeshape.gz", b), {"truncated data", "holds 100"});
}
TEST(IdxErrors, TruncatedData) {
  bytes b = idx_bytes<int32_t>({3, 4}, ramp<int32_t>(12, 3, 1));
  b.erase(b.end() - 3, b.end());  // (resize(size - 3) trips GCC 12 -Wstringop-overflow at -O1)
  expect_io_error<int32_t>(write_plain("short", b), {"truncated data", "48 bytes", "holds 45"});
  expect_io_error<float>(write_gz("short.gz", b), {"truncated data", "holds 45"});
}
TEST(IdxErrors, TrailingBytes) {
  bytes b = idx_bytes<uint8_t>({4}, {1, 2, 3, 4});
  b.push_back(5);
  expect_io_error(write_plain("trail", b), {"unexpected bytes"});
  expect_io_error(write_gz("trail.gz", b), {"unexpected bytes"});
}
TEST(IdxErrors, TruncatedGzipStream) {
  const fs::path full =
      write_gz("cut_src.gz", idx_bytes<float>({64, 64}, ramp<float>(4096, 0.123, 1)));
  bytes z = read_all(full);
  ASSERT_GT(z.size(), 40u);
  z.resize(z.size() / 2);
  expect_io_error(write_plain("cut.gz", z), {"truncated data"});
}
TEST(IdxErrors, CorruptGzipStream) {
  const fs::path full =
      write_gz("bad_src.gz", idx_bytes<float>({64, 64}, ramp<float>(4096, 0.123, 1)));
  bytes z = read_all(full);
  ASSERT_GT(z.size(), 40u);
  // Flip bits in the deflate stream and in the CRC trailer: either zlib reports corrupt data or
  // the data comes out wrong and the trailer check catches it.
  for (size_t i = 20; i < z.size() - 8; i += 7) z[i] ^= 0x5A;
  expect_io_error<float>(write_plain("bad.gz", z), {});
  bytes crc = read_all(full);
  crc[crc.size() - 6] ^= 0xFF;
  expect_io_error<float>(write_plain("badcrc.gz", crc), {"corrupt gzip"});
}
TEST(IdxErrors, HeaderOnlyReaderRejectsToo) {
  const fs::path p = write_plain("hdr_bad", {0, 0, 0x08, 9});
  EXPECT_THROW((void)ts::io::read_idx_header(p), ts::io_error);
  EXPECT_THROW((void)ts::io::read_idx_header(tmp().file("nope")), ts::io_error);
}

// ---- dataset location ----

TEST(FashionMnistFolder, DirFromEnvironment) {
  const char* old = std::getenv("TESSERA_FASHION_MNIST_DIR");
  const std::string saved = old ? old : "";
  ::setenv("TESSERA_FASHION_MNIST_DIR", "/some/where", 1);
  EXPECT_EQ(ts::io::fashion_mnist_dir(), fs::path("/some/where"));
  ::setenv("TESSERA_FASHION_MNIST_DIR", "", 1);  // empty counts as unset
  EXPECT_EQ(ts::io::fashion_mnist_dir(), fs::path("/usr/share/datasets/fashion-mnist"));
  ::unsetenv("TESSERA_FASHION_MNIST_DIR");
  EXPECT_EQ(ts::io::fashion_mnist_dir(), fs::path("/usr/share/datasets/fashion-mnist"));
  if (old) ::setenv("TESSERA_FASHION_MNIST_DIR", saved.c_str(), 1);
}

TEST(FashionMnistFolder, RealFiles) {
  const fs::path dir = ts::io::fashion_mnist_dir();
  const fs::path images = dir / "train-images-idx3-ubyte.gz",
                 labels = dir / "train-labels-idx1-ubyte.gz";
  const fs::path t_images = dir / "t10k-images-idx3-ubyte.gz",
                 t_labels = dir / "t10k-labels-idx1-ubyte.gz";
  for (const auto& p : {images, labels, t_images, t_labels})
    if (!fs::exists(p)) GTEST_SKIP() << p << " not found (Debian package dataset-fashion-mnist)";

  const auto x = ts::io::read_idx<uint8_t>(images);
  EXPECT_EQ(x.shape(), (ts::Shape{60000, 28, 28}));
  const auto y = ts::io::read_idx<uint8_t>(labels);
  EXPECT_EQ(y.shape(), (ts::Shape{60000}));
  int64_t counts[10] = {};
  for (int64_t i = 0; i < y.numel(); ++i) {
    ASSERT_LT(y.data()[i], 10) << "label " << i;
    ++counts[y.data()[i]];
  }
  for (int c = 0; c < 10; ++c) EXPECT_EQ(counts[c], 6000) << "class " << c;  // balanced classes
  uint8_t hi = 0;
  for (int64_t i = 0; i < x.numel(); ++i) hi = std::max(hi, x.data()[i]);
  EXPECT_EQ(hi, 255);

  EXPECT_EQ(ts::io::read_idx_header(t_images).shape, (ts::Shape{10000, 28, 28}));
  const auto ty = ts::io::read_idx<int64_t>(t_labels);
  EXPECT_EQ(ty.shape(), (ts::Shape{10000}));
  for (int64_t i = 0; i < ty.numel(); ++i) ASSERT_TRUE(ty.data()[i] >= 0 && ty.data()[i] < 10);
}

}  // namespace test_idx

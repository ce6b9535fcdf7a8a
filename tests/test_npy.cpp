// Tests of NumPy .npy / .npz files (tessera/io/npy.hpp): bit-exact round trips of every dtype
// NumPy shares with tessera, strided views, hand-written headers in every accepted spelling,
// every kind of corrupt file and archive, and a cross-check against NumPy itself when python3
// with numpy is installed.
#include <tessera/io/npy.hpp>  // first, so that the header is seen to include what it needs
// (comment keeps clang-format from sorting the line above below the others)
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <random>
#include <string>
#include <tessera/io/idx.hpp>
#include <tessera/nn/checkpoint.hpp>
#include <tessera/tessera.hpp>
#include <vector>

#include "temp_dir.hpp"

// A namespace of its own: test_layers compiles its sources as one (tests/CMakeLists.txt).
namespace test_npy {

namespace ts = tessera;
namespace fs = std::filesystem;

using bytes = std::vector<unsigned char>;

const tt::temp_dir& tmp() { return tt::scratch("npy"); }

fs::path write_file(const std::string& name, const bytes& b) {
  const fs::path p = tmp().file(name);
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  return p;
}
bytes read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return bytes(std::istreambuf_iterator<char>(f), {});
}

void put16(bytes& b, uint32_t v) {
  b.push_back(static_cast<unsigned char>(v));
  b.push_back(static_cast<unsigned char>(v >> 8));
}
void put32(bytes& b, uint32_t v) {
  put16(b, v & 0xffff);
  put16(b, v >> 16);
}
void append(bytes& b, const std::string& s) { b.insert(b.end(), s.begin(), s.end()); }
void append(bytes& b, const bytes& s) { b.insert(b.end(), s.begin(), s.end()); }

// .npy bytes with the given header dict text, written by hand (padded as NumPy does unless
// `pad` is false).
bytes npy_bytes(const std::string& dict, const bytes& data, int major = 1, bool pad = true) {
  bytes b = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<unsigned char>(major), 0};
  const size_t pre = major == 1 ? 10 : 12;
  std::string h = dict;
  if (pad) {
    while ((pre + h.size() + 1) % 64 != 0) h += ' ';
    h += '\n';
  }
  if (major == 1)
    put16(b, static_cast<uint32_t>(h.size()));
  else
    put32(b, static_cast<uint32_t>(h.size()));
  append(b, h);
  append(b, data);
  return b;
}

template <class T>
bytes raw_bytes(const std::vector<T>& v) {
  bytes b(v.size() * sizeof(T));
  if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}
template <class T>
bytes big_endian_bytes(const std::vector<T>& v) {
  bytes b = raw_bytes(v);
  for (size_t i = 0; i < b.size(); i += sizeof(T))
    std::reverse(b.begin() + i, b.begin() + i + sizeof(T));
  return b;
}

// The message of the E that f throws; a test failure if it throws something else or nothing.
template <class E, class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
    return {};
  }
  ADD_FAILURE() << "no exception thrown";
  return {};
}
void expect_has(const std::string& msg, std::initializer_list<std::string> parts) {
  for (const auto& p : parts)
    EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' in: " << msg;
}
// load_npy<T>(p) throws io_error naming load_npy, the path and every part.
template <class T = float>
std::string expect_load_error(const fs::path& p, std::initializer_list<std::string> parts) {
  const std::string msg = error_of<ts::io_error>([&] { (void)ts::io::load_npy<T>(p); });
  expect_has(msg, {"load_npy", p.string()});
  expect_has(msg, parts);
  return msg;
}
template <class T = float>
std::string expect_npz_error(const fs::path& p, std::initializer_list<std::string> parts) {
  const std::string msg = error_of<ts::io_error>([&] { (void)ts::io::load_npz<T>(p); });
  expect_has(msg, {"load_npz", p.string()});
  expect_has(msg, parts);
  return msg;
}

// ---- data with every interesting bit pattern ----

// Bit patterns (little-endian low bytes) placed at the front of test data: NaNs with payloads,
// signed and signalling NaNs, -0, infinities, subnormals, extremes.
template <class T>
std::vector<uint64_t> special_bits() {
  if constexpr (std::is_same_v<T, float>)
    return {0x7fc01234, 0x7f800001, 0xffc00005, 0x80000000, 0x7f800000,
            0xff800000, 0x00000001, 0x807fffff, 0x7f7fffff, 0x00800000};
  else if constexpr (std::is_same_v<T, double>)
    return {0x7ff8000000abcdefull, 0x7ff0000000000001ull, 0xfff8000000000005ull,
            0x8000000000000000ull, 0x7ff0000000000000ull, 0xfff0000000000000ull,
            0x0000000000000001ull, 0x800fffffffffffffull, 0x7fefffffffffffffull};
  else if constexpr (std::is_same_v<T, ts::half>)
    return {0x7e01, 0x7c01, 0xfe05, 0x8000, 0x7c00, 0xfc00, 0x0001, 0x83ff, 0x7bff, 0x0400};
  else if constexpr (std::is_same_v<T, bool>)
    return {1, 0, 1, 1};
  else if constexpr (std::is_unsigned_v<T>)
    return {0, static_cast<uint64_t>(std::numeric_limits<T>::max()), 1, 0x80};
  else
    return {static_cast<uint64_t>(std::numeric_limits<T>::min()),
            static_cast<uint64_t>(std::numeric_limits<T>::max()), 0, ~uint64_t{0},
            static_cast<uint64_t>(T(1))};
}

// A contiguous tensor of random bit patterns (0/1 for bool) starting with special_bits<T>().
template <class T>
ts::Tensor<T, ts::cpu> random_bits(const ts::Shape& s, uint64_t seed) {
  ts::Tensor<T, ts::cpu> t(s);
  auto* p = reinterpret_cast<unsigned char*>(t.data());
  const size_t n = static_cast<size_t>(t.numel());
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < n * sizeof(T); ++i) p[i] = static_cast<unsigned char>(rng());
  if constexpr (std::is_same_v<T, bool>)
    for (size_t i = 0; i < n; ++i) p[i] &= 1;
  const auto sp = special_bits<T>();
  for (size_t i = 0; i < std::min(n, sp.size()); ++i)
    std::memcpy(p + i * sizeof(T), &sp[i], sizeof(T));
  return t;
}

// The elements of any view in row-major order, as raw bytes, read through at() (no kernel that
// might quiet a NaN or canonicalise a value).
template <class T>
bytes logical_bytes(const ts::Tensor<T, ts::cpu>& t) {
  bytes out;
  const int64_t n = t.numel();
  std::vector<int64_t> idx(static_cast<size_t>(t.rank()), 0);
  for (int64_t k = 0; k < n; ++k) {
    const T& v = t.at(std::span<const int64_t>(idx.data(), idx.size()));
    const auto* p = reinterpret_cast<const unsigned char*>(&v);
    out.insert(out.end(), p, p + sizeof(T));
    for (int d = t.rank() - 1; d >= 0; --d) {
      if (++idx[static_cast<size_t>(d)] < t.size(d)) break;
      idx[static_cast<size_t>(d)] = 0;
    }
  }
  return out;
}

// Same shape, contiguous, and the same bits.
template <class T>
void expect_same_bits(const ts::Tensor<T, ts::cpu>& got, const bytes& want,
                      const ts::Shape& shape) {
  ASSERT_EQ(got.shape(), shape);
  ASSERT_TRUE(got.is_contiguous());
  ASSERT_EQ(static_cast<size_t>(got.numel()) * sizeof(T), want.size());
  const auto* p = reinterpret_cast<const unsigned char*>(got.data());
  for (size_t i = 0; i < want.size(); ++i)
    if (p[i] != want[i]) {
      ADD_FAILURE() << "byte " << i << " (element " << i / sizeof(T) << ") differs: got "
                    << int(p[i]) << ", want " << int(want[i]);
      return;
    }
}

std::string header_dict_of(const bytes& file) {
  const size_t len = file[8] | (size_t{file[9]} << 8);
  return std::string(file.begin() + 10, file.begin() + 10 + static_cast<std::ptrdiff_t>(len));
}

std::string unique_name(const std::string& stem, const std::string& ext) {
  static int counter = 0;
  return stem + "_" + std::to_string(counter++) + ext;
}

template <class T>
class NpyTyped : public ::testing::Test {};
using npy_types =
    ::testing::Types<float, double, ts::half, int8_t, uint8_t, int32_t, int64_t, bool>;
TYPED_TEST_SUITE(NpyTyped, npy_types);

template <class T>
std::string expected_descr() {
  if constexpr (std::is_same_v<T, float>) return "<f4";
  if constexpr (std::is_same_v<T, double>) return "<f8";
  if constexpr (std::is_same_v<T, ts::half>) return "<f2";
  if constexpr (std::is_same_v<T, int8_t>) return "|i1";
  if constexpr (std::is_same_v<T, uint8_t>) return "|u1";
  if constexpr (std::is_same_v<T, int32_t>) return "<i4";
  if constexpr (std::is_same_v<T, int64_t>) return "<i8";
  return "|b1";
}

// ---- round trips ----

TYPED_TEST(NpyTyped, RoundTripIsBitExact) {
  using T = TypeParam;
  const std::vector<ts::Shape> shapes = {
      ts::Shape{},     ts::Shape{0},          ts::Shape{0, 3},
      ts::Shape{1},    ts::Shape{7},          ts::Shape{3, 5, 2},
      ts::Shape{1000}, ts::Shape{2, 3, 4, 5}, ts::Shape{1, 2, 1, 2, 1, 2, 1, 3}};
  uint64_t seed = 1;
  for (const ts::Shape& s : shapes) {
    SCOPED_TRACE(s.to_string());
    const auto t = random_bits<T>(s, seed++);
    const fs::path p = tmp().file(unique_name("rt", ".npy"));
    ts::io::save_npy(p, t);
    const bytes file = read_file(p);
    // The header is NumPy's: version 1.0, the descr, C order, 64-byte aligned data.
    ASSERT_GE(file.size(), 10u);
    EXPECT_EQ(file[6], 1);
    EXPECT_EQ(file[7], 0);
    const std::string dict = header_dict_of(file);
    EXPECT_EQ((10 + dict.size()) % 64, 0u);
    EXPECT_EQ(dict.back(), '\n');
    expect_has(dict, {"'descr': '" + expected_descr<T>() + "'", "'fortran_order': False"});
    EXPECT_EQ(file.size(), 10 + dict.size() + static_cast<size_t>(t.numel()) * sizeof(T));
    const auto back = ts::io::load_npy<T>(p);
    expect_same_bits(back, logical_bytes(t), s);
  }
}

TYPED_TEST(NpyTyped, StridedViewsAreSavedByValue) {
  using T = TypeParam;
  const auto base = random_bits<T>(ts::Shape{4, 5, 6}, 99);
  const std::vector<ts::Tensor<T, ts::cpu>> views = {
      base.transpose(0, 2),                                        // [6, 5, 4]
      base.slice(1, 1, 5, 2),                                      // [4, 2, 6]
      base.permute({1, 2, 0}).slice(2, 3, 0 + 4, 1),               // [5, 6, 1]
      base.select(0, 2).transpose(0, 1),                           // [6, 5]
      base.slice(2, 0, 6, 3).select(2, 1),                         // [4, 5] with an offset
      base.select(1, 3).select(1, 4).unsqueeze(1).expand({4, 3}),  // stride 0
      base.select(0, 3).select(0, 1).select(0, 5),                 // 0-d with an offset
      base.slice(0, 2, 2),                                         // [0, 5, 6]
  };
  for (const auto& v : views) {
    SCOPED_TRACE(v.shape().to_string());
    const fs::path p = tmp().file(unique_name("view", ".npy"));
    ts::io::save_npy(p, v);
    expect_same_bits(ts::io::load_npy<T>(p), logical_bytes(v), v.shape());
  }
  // Saving views never wrote through to the base.
  const auto again = random_bits<T>(ts::Shape{4, 5, 6}, 99);
  EXPECT_EQ(logical_bytes(base), logical_bytes(again));
}

TYPED_TEST(NpyTyped, NpzRoundTripKeepsNamesAndOrder) {
  using T = TypeParam;
  std::vector<std::pair<std::string, ts::Tensor<T, ts::cpu>>> arrays = {
      {"zeta", random_bits<T>(ts::Shape{3, 4}, 1)},
      {"alpha", random_bits<T>(ts::Shape{}, 2)},
      {"layer1.weight", random_bits<T>(ts::Shape{2, 3, 5}, 3).transpose(0, 2)},
      {"empty", random_bits<T>(ts::Shape{0, 3}, 4)},
      {"m", random_bits<T>(ts::Shape{17}, 5)},
  };
  const fs::path p = tmp().file(unique_name("rt", ".npz"));
  ts::io::save_npz(p, arrays);
  const auto back = ts::io::load_npz<T>(p);
  ASSERT_EQ(back.size(), arrays.size());
  for (size_t i = 0; i < arrays.size(); ++i) {
    SCOPED_TRACE(arrays[i].first);
    EXPECT_EQ(back[i].first, arrays[i].first);
    expect_same_bits(back[i].second, logical_bytes(arrays[i].second), arrays[i].second.shape());
  }
}

TEST(Npy, HeaderTextMatchesNumPy) {
  const auto t = ts::from_vector<float, ts::cpu>({1, 2, 3, 4, 5, 6}, {3, 1, 2});
  const fs::path p = tmp().file("hdr.npy");
  ts::io::save_npy(p, t);
  std::string dict = header_dict_of(read_file(p));
  EXPECT_EQ(dict.substr(0, dict.find('}') + 1),
            "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 1, 2), }");
  ts::io::save_npy(p, ts::from_vector<int64_t, ts::cpu>({1, 2, 3, 4, 5, 6, 7}));
  dict = header_dict_of(read_file(p));
  EXPECT_EQ(dict.substr(0, dict.find('}') + 1),
            "{'descr': '<i8', 'fortran_order': False, 'shape': (7,), }");
  ts::io::save_npy(p, ts::full<bool, ts::cpu>(ts::Shape{}, true));
  dict = header_dict_of(read_file(p));
  EXPECT_EQ(dict.substr(0, dict.find('}') + 1),
            "{'descr': '|b1', 'fortran_order': False, 'shape': (), }");
  const bytes b = read_file(p);
  EXPECT_EQ(b.back(), 1);
}

TEST(Npy, SaveReplacesAnExistingFileAndLeavesNoTemporaries) {
  const fs::path dir = tmp().file("replace_dir");
  fs::create_directories(dir);
  const fs::path p = dir / "x.npy";
  ts::io::save_npy(p, ts::full<float, ts::cpu>(ts::Shape{1000}, 1.0f));
  ts::io::save_npy(p, ts::full<double, ts::cpu>(ts::Shape{2}, 2.0));
  const auto back = ts::io::load_npy<double>(p);
  EXPECT_EQ(back.shape(), ts::Shape{2});
  EXPECT_EQ(back.data()[1], 2.0);
  ts::io::save_npz(p.parent_path() / "y.npz",
                   std::vector<std::pair<std::string, ts::Tensor<float, ts::cpu>>>{
                       {"a", ts::full<float, ts::cpu>(ts::Shape{2}, 1.0f)}});
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    ++files;
    EXPECT_TRUE(e.path().filename() == "x.npy" || e.path().filename() == "y.npz") << e.path();
  }
  EXPECT_EQ(files, 2);
}

// ---- hand-written headers ----

TEST(Npy, AcceptsEveryHeaderSpelling) {
  const std::vector<float> v = {1.5f, -2.0f, 3.25f, 0.0f, -0.0f, 6.0f};
  const bytes data = raw_bytes(v);
  struct variant {
    std::string dict;
    ts::Shape shape;
    int major = 1;
    bool pad = true;
  };
  const std::vector<variant> variants = {
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", {2, 3}},
      {"{'shape': (2, 3), 'fortran_order': False, 'descr': '<f4'}", {2, 3}},
      {"{ 'fortran_order' :False ,'descr':'<f4','shape':(2,3,) , }", {2, 3}},
      {"{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (6,)}", {6}},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (6)}", {6}},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (3L, 2L), }", {3, 2}},
      {"{'descr':\t'<f4',\n'fortran_order': False,\r\n'shape': ( 1 , 6 ) }", {1, 6}},
      {"{'descr': '=f4', 'fortran_order': False, 'shape': (6,), }", {6}},
      {"{'descr': 'f4', 'fortran_order': False, 'shape': (6,), }", {6}},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 1, 3), }", {2, 1, 3}, 2},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (6,), }", {6}, 3},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (6,), }", {6}, 1, false},
      {"{'descr': '<f4', 'fortran_order': True, 'shape': (6,), }", {6}},  // 1-D: same bytes
  };
  for (const auto& var : variants) {
    SCOPED_TRACE(var.dict);
    const fs::path p =
        write_file(unique_name("spell", ".npy"), npy_bytes(var.dict, data, var.major, var.pad));
    expect_same_bits(ts::io::load_npy<float>(p), data, var.shape);
  }
  // A 0-d array and an empty one.
  const fs::path p0 =
      write_file("scalar.npy", npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (), }",
                                         raw_bytes(std::vector<double>{2.5})));
  const auto s = ts::io::load_npy<double>(p0);
  EXPECT_EQ(s.rank(), 0);
  EXPECT_EQ(s.item(), 2.5);
  const fs::path pe = write_file(
      "empty.npy", npy_bytes("{'descr': '<i4', 'fortran_order': True, 'shape': (0, 3), }", {}));
  EXPECT_EQ(ts::io::load_npy<int32_t>(pe).shape(), (ts::Shape{0, 3}));
}

TEST(Npy, SwapsBigEndianData) {
  const std::vector<double> d = {1.0 / 3, -0.0, std::numeric_limits<double>::infinity(), 1e-310};
  const fs::path pd = write_file(
      "be_f8.npy", npy_bytes("{'descr': '>f8', 'fortran_order': False, 'shape': (2, 2), }",
                             big_endian_bytes(d)));
  expect_same_bits(ts::io::load_npy<double>(pd), raw_bytes(d), {2, 2});

  const std::vector<int32_t> i = {1, -2, 0x01020304, std::numeric_limits<int32_t>::min()};
  const fs::path pi = write_file(
      "be_i4.npy",
      npy_bytes("{'descr': '>i4', 'fortran_order': False, 'shape': (4,), }", big_endian_bytes(i)));
  expect_same_bits(ts::io::load_npy<int32_t>(pi), raw_bytes(i), {4});

  const std::vector<int64_t> l = {1, -2, 0x0102030405060708ll};
  const fs::path pl = write_file(
      "be_i8.npy",
      npy_bytes("{'descr': '>i8', 'fortran_order': False, 'shape': (3,), }", big_endian_bytes(l)));
  expect_same_bits(ts::io::load_npy<int64_t>(pl), raw_bytes(l), {3});

  const std::vector<uint16_t> h = {0x3c00, 0x7e01, 0x8001};
  const fs::path ph = write_file(
      "be_f2.npy",
      npy_bytes("{'descr': '>f2', 'fortran_order': False, 'shape': (3,), }", big_endian_bytes(h)));
  expect_same_bits(ts::io::load_npy<ts::half>(ph), raw_bytes(h), {3});

  const std::vector<int8_t> b = {-128, 127, 0};
  for (const char* descr : {"|i1", "<i1", ">i1", "=i1", "i1"}) {
    const fs::path p = write_file(unique_name("i1", ".npy"),
                                  npy_bytes(std::string("{'descr': '") + descr +
                                                "', 'fortran_order': False, 'shape': (3,), }",
                                            raw_bytes(b)));
    expect_same_bits(ts::io::load_npy<int8_t>(p), raw_bytes(b), {3});
  }
  const std::vector<uint8_t> bo = {1, 0, 1};
  const fs::path pb = write_file(
      "b1.npy",
      npy_bytes("{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }", raw_bytes(bo)));
  expect_same_bits(ts::io::load_npy<bool>(pb), raw_bytes(bo), {3});
}

TEST(Npy, FortranOrderIsReorderedIntoCOrder) {
  // Element (i, j, k) of a [2, 3, 4] array is 100 i + 10 j + k; Fortran order stores i fastest.
  std::vector<int32_t> fdata, cdata;
  for (int k = 0; k < 4; ++k)
    for (int j = 0; j < 3; ++j)
      for (int i = 0; i < 2; ++i) fdata.push_back(100 * i + 10 * j + k);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) cdata.push_back(100 * i + 10 * j + k);
  const fs::path p = write_file(
      "fortran.npy",
      npy_bytes("{'descr': '<i4', 'fortran_order': True, 'shape': (2, 3, 4), }", raw_bytes(fdata)));
  expect_same_bits(ts::io::load_npy<int32_t>(p), raw_bytes(cdata), {2, 3, 4});
  // Big-endian and Fortran order together.
  std::vector<double> f2 = {1, 4, 2, 5, 3, 6}, c2 = {1, 2, 3, 4, 5, 6};  // [[1,2,3],[4,5,6]]
  const fs::path pb = write_file(
      "fortran_be.npy", npy_bytes("{'descr': '>f8', 'fortran_order': True, 'shape': (2, 3), }",
                                  big_endian_bytes(f2)));
  expect_same_bits(ts::io::load_npy<double>(pb), raw_bytes(c2), {2, 3});
}

// ---- errors ----

TEST(NpyErrors, MissingFileAndDirectory) {
  expect_load_error(tmp().file("does_not_exist.npy"), {"no such file"});
  expect_load_error(tmp().path(), {"directory"});
  expect_npz_error(tmp().file("does_not_exist.npz"), {"no such file"});
}

TEST(NpyErrors, EveryPrefixOfAValidFileIsRejected) {
  const fs::path full = tmp().file("prefix_full.npy");
  ts::io::save_npy(full, random_bits<float>(ts::Shape{2, 3}, 7));
  const bytes b = read_file(full);
  ASSERT_GT(b.size(), 64u);
  for (size_t n = 0; n < b.size(); ++n) {
    SCOPED_TRACE(n);
    const fs::path p =
        write_file("prefix.npy", bytes(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(n)));
    expect_load_error(p, {});
  }
  // And the full file plus one byte.
  bytes longer = b;
  longer.push_back(0);
  expect_load_error(write_file("prefix_long.npy", longer),
                    {"1 unexpected bytes after the 24 data bytes"});
  expect_load_error(write_file("prefix_short.npy", bytes(b.begin(), b.end() - 1)),
                    {"truncated data", "needs 24 bytes", "only 23"});
}

TEST(NpyErrors, WrongMagicVersionAndHeaderLength) {
  const bytes good = npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }",
                               raw_bytes(std::vector<float>{1}));
  bytes b = good;
  b[0] = 0x92;
  expect_load_error(write_file("magic.npy", b), {"magic"});
  b = good;
  b[3] = 'n';
  expect_load_error(write_file("magic2.npy", b), {"magic"});
  expect_load_error(write_file("notnpy.npy", bytes{'P', 'K', 3, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0}),
                    {"magic"});
  b = good;
  b[6] = 4;
  expect_load_error(write_file("v4.npy", b), {"version 4.0"});
  b = good;
  b[7] = 1;
  expect_load_error(write_file("v11.npy", b), {"version 1.1"});
  b = good;
  b[8] = 0xff;
  b[9] = 0xff;
  expect_load_error(write_file("hlen.npy", b), {"header length 65535"});
  expect_load_error(write_file("empty_file.npy", {}), {"empty"});
}

TEST(NpyErrors, StoredDtypeMustEqualT) {
  const fs::path p = tmp().file("dtype.npy");
  ts::io::save_npy(p, ts::full<float, ts::cpu>(ts::Shape{2}, 1.0f));
  expect_load_error<double>(p, {"'<f4'", "float32", "requested float64"});
  expect_load_error<int32_t>(p, {"'<f4'", "int32"});
  expect_load_error<ts::half>(p, {"'<f4'", "float16"});
  expect_load_error<ts::bfloat16>(p, {"'<f4'", "bfloat16", "no NumPy dtype"});
  ts::io::save_npy(p, ts::full<uint8_t, ts::cpu>(ts::Shape{2}, 1));
  expect_load_error<int8_t>(p, {"'|u1'", "uint8", "int8"});
  expect_load_error<bool>(p, {"'|u1'", "bool"});
}

TEST(NpyErrors, UnknownDescr) {
  for (const char* d : {"<c8", "<i2", "<u4", "<U3", "O", "<f16", "", "<f4 ", "xf4", "<M8[s]"}) {
    SCOPED_TRACE(d);
    const fs::path p = write_file(
        unique_name("descr", ".npy"),
        npy_bytes(std::string("{'descr': '") + d + "', 'fortran_order': False, 'shape': (0,), }",
                  {}));
    expect_load_error(p, {"unknown or unsupported dtype descr '" + std::string(d) + "'"});
  }
  const fs::path p = write_file(
      "structured.npy",
      npy_bytes("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (0,), }", {}));
  expect_load_error(p, {"structured"});
}

TEST(NpyErrors, MalformedHeaders) {
  const std::vector<std::string> dicts = {
      "",
      "{",
      "{}",
      "[]",
      "{'descr': '<f4', 'fortran_order': False}",
      "{'descr': '<f4', 'shape': (1,)}",
      "{'fortran_order': False, 'shape': (1,)}",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'descr': '<f4'}",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'extra': 1}",
      "{'descr': '<f4', 'fortran_order': false, 'shape': (1,)}",
      "{'descr': '<f4', 'fortran_order': Falsey, 'shape': (1,)}",
      "{'descr': '<f4', 'fortran_order': 0, 'shape': (1,)}",
      "{'descr': '<f4', 'fortran_order': False, 'shape': 1}",
      "{'descr': '<f4', 'fortran_order': False, 'shape': [1]}",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (1,,)}",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (,)}",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (a,)}",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (1.0,)}",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (1 1)}",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (1,)",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (1,)} x",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (1,)}}",
      "{'descr': '<f4 , 'fortran_order': False, 'shape': (1,)}",
      "{'descr': \"<f4', 'fortran_order': False, 'shape': (1,)}",
      "{'de\\scr': '<f4', 'fortran_order': False, 'shape': (1,)}",
      "{descr: '<f4', 'fortran_order': False, 'shape': (1,)}",
      "{'descr' '<f4', 'fortran_order': False, 'shape': (1,)}",
      "{'descr': '<f4' 'fortran_order': False, 'shape': (1,)}",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (1,)\0}",
  };
  for (const auto& d : dicts) {
    SCOPED_TRACE(d);
    const fs::path p =
        write_file(unique_name("bad", ".npy"), npy_bytes(d, raw_bytes(std::vector<float>{1})));
    expect_load_error(p, {"malformed header"});
  }
  // The NUL case above was cut at the NUL by the std::string literal; add one for real.
  std::string with_nul = "{'descr': '<f4', 'fortran_order': False, 'shape': (1,)}";
  with_nul.insert(with_nul.size() - 1, 1, '\0');
  expect_load_error(write_file("nul.npy", npy_bytes(with_nul, raw_bytes(std::vector<float>{1}))),
                    {"malformed header"});
}

TEST(NpyErrors, BadShapes) {
  auto file = [](const std::string& shape) {
    return write_file(
        unique_name("shape", ".npy"),
        npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }",
                  raw_bytes(std::vector<float>{1, 2})));
  };
  expect_load_error(file("(-2,)"), {"negative dimension"});
  expect_load_error(file("(2, -1)"), {"negative dimension"});
  expect_load_error(file("(1, 1, 1, 1, 1, 1, 1, 1, 2)"), {"more than 8 dimensions"});
  expect_load_error(file("(99999999999999999999,)"), {"does not fit in int64"});
  expect_load_error(file("(1099511627776, 1099511627776)"),
                    {"[1099511627776, 1099511627776]", "too large"});
  expect_load_error(file("(4611686018427387904,)"),
                    {"[4611686018427387904]", "too large", "byte count"});
  expect_load_error(file("(3,)"), {"truncated data", "needs 12 bytes", "only 8"});
  expect_load_error(file("(1,)"), {"4 unexpected bytes"});
  expect_load_error(file("(0,)"), {"8 unexpected bytes"});
  expect_load_error(file("()"), {"4 unexpected bytes"});
}

TEST(NpyErrors, HugeDeclaredShapeFailsFastWithoutAllocating) {
  // 2^52 bytes of float: if the loader allocated before checking the file size, this would
  // throw bad_alloc (or abort under ASan), not io_error.
  const fs::path p = write_file(
      "huge.npy",
      npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1073741824, 1048576), }",
                raw_bytes(std::vector<float>{1, 2})));
  const auto start = std::chrono::steady_clock::now();
  expect_load_error(p, {"truncated data", "[1073741824, 1048576]", "needs 4503599627370496 bytes"});
  const fs::path pf = write_file(
      "huge_f.npy",
      npy_bytes("{'descr': '<f4', 'fortran_order': True, 'shape': (1073741824, 1048576), }",
                raw_bytes(std::vector<float>{1, 2})));
  expect_load_error(pf, {"truncated data"});
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(secs, 1.0);
}

TEST(NpyErrors, InvalidBoolBytes) {
  const fs::path p =
      write_file("bool2.npy",
                 npy_bytes("{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }", {1, 0, 2}));
  expect_load_error<bool>(p, {"bool element 2", "byte 2"});
}

TEST(NpyErrors, TypesWithoutANumPyDtypeCannotBeSaved) {
  const fs::path p = tmp().file("bf16.npy");
  const std::string m1 = error_of<ts::dtype_error>(
      [&] { ts::io::save_npy(p, ts::zeros<ts::bfloat16, ts::cpu>(ts::Shape{2})); });
  expect_has(m1, {"save_npy", "bfloat16", "no NumPy dtype", "astype<float>()", p.string()});
  const std::string m2 = error_of<ts::dtype_error>(
      [&] { ts::io::save_npy(p, ts::zeros<ts::float8_e4m3, ts::cpu>(ts::Shape{2})); });
  expect_has(m2, {"save_npy", "float8_e4m3", "astype<float>()"});
  const std::string m3 = error_of<ts::dtype_error>([&] {
    ts::io::save_npz(p,
                     std::vector<std::pair<std::string, ts::Tensor<ts::float8_e5m2, ts::cpu>>>{});
  });
  expect_has(m3, {"save_npz", "float8_e5m2"});
  EXPECT_FALSE(fs::exists(p));
}

TEST(NpyErrors, SaveFailuresNameThePath) {
  const fs::path p = tmp().file("no_such_dir") / "x.npy";
  const std::string m =
      error_of<ts::io_error>([&] { ts::io::save_npy(p, ts::zeros<float, ts::cpu>(ts::Shape{2})); });
  expect_has(m, {"save_npy", p.string(), "does not exist"});
  const std::string md = error_of<ts::io_error>(
      [&] { ts::io::save_npy(tmp().path(), ts::zeros<float, ts::cpu>(ts::Shape{2})); });
  expect_has(md, {"save_npy", "directory"});
  const std::string mu = error_of<ts::error>(
      [&] { ts::io::save_npy(tmp().file("undef.npy"), ts::Tensor<float, ts::cpu>()); });
  expect_has(mu, {"save_npy", "undefined"});
  // A write that fails is reported, and the target is not created. The failure is a file size
  // limit (EFBIG, with SIGXFSZ ignored), which binds root too; the limits are restored after.
  const fs::path big = tmp().file("too_big.npy");
  rlimit old_limit{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  rlimit small = old_limit;
  small.rlim_cur = 100;
  const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  const std::string mf = error_of<ts::io_error>(
      [&] { ts::io::save_npy(big, ts::zeros<float, ts::cpu>(ts::Shape{1000})); });
  ::setrlimit(RLIMIT_FSIZE, &old_limit);
  std::signal(SIGXFSZ, old_handler);
  expect_has(mf, {"save_npy", big.string(), "write failed"});
  EXPECT_FALSE(fs::exists(big));
}

TEST(Npy, SaveThroughASymlinkReplacesItsTarget) {
  const fs::path dir = tmp().file("link_dir");
  fs::create_directories(dir);
  ts::io::save_npy(dir / "real.npy", ts::full<float, ts::cpu>(ts::Shape{3}, 1.0f));
  fs::create_symlink("real.npy", dir / "link.npy");
  ts::io::save_npy(dir / "link.npy", ts::full<float, ts::cpu>(ts::Shape{2}, 2.0f));
  EXPECT_TRUE(fs::is_symlink(dir / "link.npy"));
  EXPECT_EQ(ts::io::load_npy<float>(dir / "real.npy").shape(), ts::Shape{2});
  EXPECT_EQ(ts::io::load_npy<float>(dir / "link.npy").shape(), ts::Shape{2});
}

// ---- npz ----

bytes raw_deflate(const bytes& in) {
  z_stream zs{};
  EXPECT_EQ(deflateInit2(&zs, 6, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  bytes out(deflateBound(&zs, static_cast<uLong>(in.size())));
  zs.next_in = const_cast<unsigned char*>(in.data());
  zs.avail_in = static_cast<uInt>(in.size());
  zs.next_out = out.data();
  zs.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

struct zip_member {
  std::string name;
  bytes data;
  uint16_t method = 0;  // 0 stored, 8 deflate; anything else is written as stored bytes
  uint16_t flags = 0;
  bool zip64_size = false;  // central sizes 0xffffffff
};

// A ZIP archive written by hand, independently of save_npz.
bytes make_zip(const std::vector<zip_member>& members, const std::string& comment = "") {
  bytes out, cd;
  for (const auto& m : members) {
    const bytes payload = m.method == 8 ? raw_deflate(m.data) : m.data;
    const auto crc =
        static_cast<uint32_t>(crc32(0, m.data.data(), static_cast<uInt>(m.data.size())));
    const auto offset = static_cast<uint32_t>(out.size());
    put32(out, 0x04034b50);
    put16(out, 20);
    put16(out, m.flags);
    put16(out, m.method);
    put16(out, 0);
    put16(out, 0x21);
    put32(out, crc);
    put32(out, static_cast<uint32_t>(payload.size()));
    put32(out, static_cast<uint32_t>(m.data.size()));
    put16(out, static_cast<uint32_t>(m.name.size()));
    put16(out, 4);  // an extra field (a tag with no data) that the reader must skip
    append(out, m.name);
    put32(out, 0xcafe);
    append(out, payload);
    put32(cd, 0x02014b50);
    put16(cd, 20);
    put16(cd, 20);
    put16(cd, m.flags);
    put16(cd, m.method);
    put16(cd, 0);
    put16(cd, 0x21);
    put32(cd, crc);
    put32(cd, m.zip64_size ? 0xffffffffu : static_cast<uint32_t>(payload.size()));
    put32(cd, m.zip64_size ? 0xffffffffu : static_cast<uint32_t>(m.data.size()));
    put16(cd, static_cast<uint32_t>(m.name.size()));
    put16(cd, 0);
    put16(cd, 0);
    put16(cd, 0);
    put16(cd, 0);
    put32(cd, 0);
    put32(cd, offset);
    append(cd, m.name);
  }
  const auto cd_offset = static_cast<uint32_t>(out.size());
  append(out, cd);
  put32(out, 0x06054b50);
  put16(out, 0);
  put16(out, 0);
  put16(out, static_cast<uint32_t>(members.size()));
  put16(out, static_cast<uint32_t>(members.size()));
  put32(out, static_cast<uint32_t>(cd.size()));
  put32(out, cd_offset);
  put16(out, static_cast<uint32_t>(comment.size()));
  append(out, comment);
  return out;
}

bytes npy_of(const std::vector<float>& v) {
  return npy_bytes(
      "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(v.size()) + ",), }",
      raw_bytes(v));
}

std::vector<float> ramp(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i) * 0.25f - 7;
  return v;
}

TEST(Npz, ReadsStoredAndDeflatedMembersAndComments) {
  const auto a = ramp(1000), b = ramp(3);
  const fs::path p = write_file(
      "hand.npz",
      make_zip({{"big.npy", npy_of(a), 8}, {"b.npy", npy_of(b), 0}, {"noext", npy_of(b), 8}},
               "a comment with PK\x05\x06 inside"));
  const auto z = ts::io::load_npz<float>(p);
  ASSERT_EQ(z.size(), 3u);
  EXPECT_EQ(z[0].first, "big");
  EXPECT_EQ(z[1].first, "b");
  EXPECT_EQ(z[2].first, "noext");
  expect_same_bits(z[0].second, raw_bytes(a), {1000});
  expect_same_bits(z[1].second, raw_bytes(b), {3});
  expect_same_bits(z[2].second, raw_bytes(b), {3});
  // An empty archive.
  const fs::path pe = tmp().file("empty.npz");
  ts::io::save_npz(pe, std::vector<std::pair<std::string, ts::Tensor<float, ts::cpu>>>{});
  EXPECT_TRUE(ts::io::load_npz<float>(pe).empty());
  EXPECT_EQ(read_file(pe).size(), 22u);
}

TEST(Npz, SaveRejectsBadNames) {
  const fs::path p = tmp().file("names.npz");
  using list = std::vector<std::pair<std::string, ts::Tensor<float, ts::cpu>>>;
  const auto t = ts::zeros<float, ts::cpu>(ts::Shape{2});
  expect_has(error_of<ts::io_error>([&] {
               ts::io::save_npz(p, list{{"a", t}, {"b", t}, {"a", t}});
             }),
             {"save_npz", p.string(), "'a'", "twice"});
  expect_has(error_of<ts::io_error>([&] {
               ts::io::save_npz(p, list{{"a", t}, {"", t}});
             }),
             {"save_npz", "empty"});
  expect_has(error_of<ts::io_error>([&] {
               ts::io::save_npz(p, list{{std::string("x\0y", 3), t}});
             }),
             {"save_npz", "'x\\x00y'", "NUL"});
  EXPECT_FALSE(fs::exists(p));
}

TEST(Npz, MemberErrorsNameTheMember) {
  std::vector<std::pair<std::string, ts::Tensor<float, ts::cpu>>> arrays = {
      {"w", ts::full<float, ts::cpu>(ts::Shape{4, 4}, 0.5f)},
      {"bias", ts::full<float, ts::cpu>(ts::Shape{4}, 1.5f)}};
  const fs::path p = tmp().file("crc.npz");
  ts::io::save_npz(p, arrays);
  const bytes good = read_file(p);
  // Member "bias.npy" starts after w's local header (30 + 5), w's npy (128 + 64), its own header.
  const size_t bias_data = 30 + 5 + 128 + 64 + 30 + 8 + 128;
  ASSERT_GT(good.size(), bias_data + 16);
  bytes b = good;
  b[bias_data + 3] ^= 0x40;  // a flipped bit in bias's data
  expect_npz_error(write_file("crc_data.npz", b), {"member 'bias.npy'", "CRC-32 mismatch"});
  b = good;
  b[14] ^= 1;  // w's CRC in its local header is not used; the central directory's is
  EXPECT_NO_THROW((void)ts::io::load_npz<float>(write_file("crc_local.npz", b)));
  b = good;
  const size_t cd = good.size() - 22 - 2 * 46 - 5 - 8;
  ASSERT_EQ(b[cd], 'P');
  b[cd + 16] ^= 1;  // w's CRC in the central directory
  expect_npz_error(write_file("crc_cd.npz", b), {"member 'w.npy'", "CRC-32"});
  expect_npz_error<double>(p, {"member 'w.npy'", "'<f4'", "float64"});

  // A member that is not an .npy file.
  expect_npz_error(write_file("notnpy.npz", make_zip({{"x.npy", bytes{'h', 'i'}}})),
                   {"member 'x.npy'", "magic"});
  // A member whose npy declares a huge shape.
  expect_npz_error(
      write_file(
          "hugemember.npz",
          make_zip(
              {{"h.npy",
                npy_bytes(
                    "{'descr': '<f4', 'fortran_order': False, 'shape': (1073741824, 1048576), }",
                    {}),
                8}})),
      {"member 'h.npy'", "truncated data"});
}

TEST(Npz, EveryPrefixOfAValidArchiveIsRejected) {
  const fs::path full = tmp().file("prefix_full.npz");
  ts::io::save_npz(full, std::vector<std::pair<std::string, ts::Tensor<int32_t, ts::cpu>>>{
                             {"a", random_bits<int32_t>(ts::Shape{3}, 1)},
                             {"bb", random_bits<int32_t>(ts::Shape{2, 2}, 2)}});
  const bytes b = read_file(full);
  for (size_t n = 0; n < b.size(); ++n) {
    SCOPED_TRACE(n);
    expect_npz_error<int32_t>(
        write_file("prefix.npz", bytes(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(n))), {});
  }
  // A deflated one too.
  const bytes d = make_zip({{"a.npy", npy_of(ramp(300)), 8}});
  for (size_t n = 0; n < d.size(); ++n) {
    SCOPED_TRACE(n);
    expect_npz_error(
        write_file("prefix_d.npz", bytes(d.begin(), d.begin() + static_cast<std::ptrdiff_t>(n))),
        {});
  }
}

TEST(Npz, CorruptArchives) {
  const bytes npy = npy_of(ramp(5));
  expect_npz_error(write_file("plain.npz", npy), {"not a ZIP archive"});
  expect_npz_error(write_file("tiny.npz", bytes{'P', 'K'}), {"not a ZIP archive"});
  expect_npz_error(write_file("enc.npz", make_zip({{"a.npy", npy, 0, 1}})),
                   {"member 'a.npy'", "encrypted"});
  expect_npz_error(write_file("bzip.npz", make_zip({{"a.npy", npy, 12}})),
                   {"member 'a.npy'", "compression method 12"});
  expect_npz_error(write_file("z64.npz", make_zip({{"a.npy", npy, 0, 0, true}})),
                   {"member 'a.npy'", "ZIP64"});
  expect_npz_error(write_file("dup.npz", make_zip({{"a.npy", npy}, {"a.npy", npy}})),
                   {"member 'a.npy'", "twice"});

  bytes z = make_zip({{"a.npy", npy, 8}});
  z[30 + 5 + 4 + 2] ^= 0xff;  // inside the deflate stream
  expect_npz_error(write_file("badinflate.npz", z), {"member 'a.npy'"});

  // Offsets pointing elsewhere.
  bytes good = make_zip({{"a.npy", npy}, {"b.npy", npy}});
  const size_t end = good.size() - 22;
  bytes b = good;
  b[end + 16] += 1;  // central directory offset off by one
  expect_npz_error(write_file("cdoff.npz", b), {"corrupt"});
  b = good;
  b[end + 10] = 3;  // three entries claimed, two present
  b[end + 8] = 3;
  expect_npz_error(write_file("count.npz", b), {"central directory"});
  b = good;
  const size_t cd0 = good[end + 16] | (size_t{good[end + 17]} << 8);
  b[cd0 + 42] = 7;  // first member's local header offset
  expect_npz_error(write_file("localoff.npz", b), {"member 'a.npy'", "local header"});
  b = good;
  b[cd0 + 21] = 1;  // first member's sizes grow by 256: its data runs into the next member
  b[cd0 + 25] = 1;
  expect_npz_error(write_file("csize.npz", b), {"member 'a.npy'", "run past"});
  b = good;
  b[end + 20] = 5;  // a comment length the file does not hold
  expect_npz_error(write_file("comment.npz", b), {"no end-of-central-directory record"});
  b = good;
  b.insert(b.end() - 22, {'P', 'K', 6, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0});
  expect_npz_error(write_file("locator.npz", b), {"ZIP64"});
}

// ---- misuse: modes, durability, paths that are not regular files, duplicate names ----

// The permission bits of `p`, read with stat: root reads any file, so trying to read it would
// prove nothing.
mode_t mode_of(const fs::path& p) {
  struct stat st {};
  EXPECT_EQ(::stat(p.c_str(), &st), 0) << p;
  return st.st_mode & 07777;
}

// Kills the test binary (SIGALRM) if a call meant not to block does block, so that a regression
// fails the run instead of hanging it.
class hang_guard {
 public:
  hang_guard() { ::alarm(20); }
  ~hang_guard() { ::alarm(0); }
};

// A FIFO in the temp folder, with no reader or writer.
fs::path make_fifo(const std::string& stem) {
  const fs::path p = tmp().file(unique_name(stem, ".fifo"));
  EXPECT_EQ(::mkfifo(p.c_str(), 0600), 0) << p << ": " << std::strerror(errno);
  return p;
}

using float_list = std::vector<std::pair<std::string, ts::Tensor<float, ts::cpu>>>;

// The fsync calls the library makes while `log` is set: this binary defines fsync (below), which
// the library's calls, compiled into it, bind to ahead of libc's.
struct fsync_event {
  fs::path path;        // what the descriptor names, from /proc/self/fd
  bool directory;       // whether it is a directory
  bool target_existed;  // whether `target` existed at the time
};
struct fsync_recorder {
  std::vector<fsync_event> events;
  fs::path target;
};
fsync_recorder* fsync_log = nullptr;

extern "C" int fsync(int fd) {
  if (fsync_log) {
    struct stat st {};
    ::fstat(fd, &st);
    char buf[4096];
    const std::string link = "/proc/self/fd/" + std::to_string(fd);
    const ssize_t n = ::readlink(link.c_str(), buf, sizeof buf);
    fsync_log->events.push_back({n > 0 ? fs::path(std::string(buf, static_cast<size_t>(n))) : "",
                                 S_ISDIR(st.st_mode), fs::exists(fsync_log->target)});
  }
  return static_cast<int>(::syscall(SYS_fsync, fd));
}

// A private checkpoint stays private: saving over a file keeps its permission bits.
TEST(NpySave, KeepsTheModeOfTheFileItReplaces) {
  const auto t = ts::zeros<float, ts::cpu>(ts::Shape{2});
  const fs::path p = tmp().file(unique_name("private", ".npy"));
  ts::io::save_npy(p, t);
  for (const mode_t m : {0600, 0640, 0755, 0604}) {
    ASSERT_EQ(::chmod(p.c_str(), m), 0);
    ts::io::save_npy(p, t);
    EXPECT_EQ(mode_of(p), m) << std::oct << m;
  }
  const fs::path z = tmp().file(unique_name("private", ".npz"));
  ts::io::save_npz(z, float_list{{"a", t}});
  ASSERT_EQ(::chmod(z.c_str(), 0600), 0);
  ts::io::save_npz(z, float_list{{"a", t}});
  EXPECT_EQ(mode_of(z), 0600u);
  // Through a symbolic link, the file it points to keeps its mode.
  const fs::path link = tmp().file(unique_name("private_link", ".npy"));
  fs::create_symlink(p, link);
  ASSERT_EQ(::chmod(p.c_str(), 0600), 0);
  ts::io::save_npy(link, t);
  EXPECT_EQ(mode_of(p), 0600u);
  EXPECT_TRUE(fs::is_symlink(link));
  // As root, the file's owner is kept too (root saving a user's model must not take it over).
  if (::geteuid() == 0) {
    ASSERT_EQ(::chown(p.c_str(), 4321, 4322), 0);
    ts::io::save_npy(p, t);
    struct stat st {};
    ASSERT_EQ(::stat(p.c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, 4321u);
    EXPECT_EQ(st.st_gid, 4322u);
    EXPECT_EQ(st.st_mode & 07777, 0600u);
  }
}

// A new file gets 0666 less the umask, as open(2) would create it.
TEST(NpySave, NewFilesGetTheModeOpenWouldGive) {
  const auto t = ts::zeros<float, ts::cpu>(ts::Shape{2});
  for (const mode_t mask : {022, 077, 002, 0}) {
    const mode_t old = ::umask(mask);
    const fs::path p = tmp().file(unique_name("new", ".npy"));
    ts::io::save_npy(p, t);
    ::umask(old);
    EXPECT_EQ(mode_of(p), 0666 & ~mask) << "umask " << std::oct << mask;
  }
}

// The written file is synced before it is renamed into place, and its directory after, so a
// power cut leaves the old file or the new one, never an empty one.
TEST(NpySave, SyncsTheFileBeforeTheRenameAndTheDirectoryAfter) {
#if !defined(__linux__)
  GTEST_SKIP() << "reads descriptors' paths from /proc/self/fd";
#endif
  const fs::path dir = tmp().file(unique_name("sync_dir", ""));
  fs::create_directories(dir);
  const fs::path real_dir = fs::canonical(dir);
  const auto check = [&](const fs::path& target, auto&& save) {
    SCOPED_TRACE(target.string());
    fsync_recorder rec{{}, target};
    fsync_log = &rec;
    save();
    fsync_log = nullptr;
    ASSERT_EQ(rec.events.size(), 2u);
    EXPECT_FALSE(rec.events[0].directory);
    EXPECT_EQ(rec.events[0].path.parent_path(), real_dir);
    EXPECT_NE(rec.events[0].path.filename(), target.filename());  // the temporary
    EXPECT_FALSE(rec.events[0].target_existed);                   // before the rename
    EXPECT_TRUE(rec.events[1].directory);
    EXPECT_EQ(rec.events[1].path, real_dir);
    EXPECT_TRUE(rec.events[1].target_existed);  // after it
  };
  const auto t = ts::ones<float, ts::cpu>(ts::Shape{3});
  check(dir / "x.npy", [&] { ts::io::save_npy(dir / "x.npy", t); });
  check(dir / "x.npz", [&] { ts::io::save_npz(dir / "x.npz", float_list{{"a", t}}); });
}

// Bad destinations give a message that names the op, the path and what is wrong, never an
// errno text left over from an unrelated call ("Success").
TEST(NpySave, BadPathsGiveClearErrors) {
  const auto t = ts::zeros<float, ts::cpu>(ts::Shape{2});
  const auto save_error = [&](const fs::path& p) {
    const std::string m = error_of<ts::io_error>([&] { ts::io::save_npy(p, t); });
    expect_has(m, {"save_npy", "'" + p.string() + "'"});
    EXPECT_EQ(m.find("Success"), std::string::npos) << m;
    return m;
  };
  expect_has(save_error(""), {"the path is empty"});
  expect_has(save_error(tmp().path()), {"is a directory"});
  const fs::path missing = tmp().file("no_such_parent") / "x.npy";
  expect_has(save_error(missing),
             {"directory '" + missing.parent_path().string() + "'", "does not exist"});
  const fs::path file = write_file(unique_name("plain", ".bin"), bytes{1});
  expect_has(save_error(file / "x.npy"), {"'" + file.string() + "'", "not a directory"});
  const std::string mz = error_of<ts::io_error>([&] {
    ts::io::save_npz("", float_list{{"a", t}});
  });
  expect_has(mz, {"save_npz", "the path is empty"});
}

// A destination that exists but is not a regular file is refused, and left as it is: saving to
// /dev/null must not replace /dev/null (as root it could) nor pretend to have saved.
TEST(NpySave, RefusesACharacterDevice) {
  const auto t = ts::zeros<float, ts::cpu>(ts::Shape{2});
  const std::string m = error_of<ts::io_error>([&] { ts::io::save_npy("/dev/null", t); });
  expect_has(m, {"save_npy", "'/dev/null'", "not a regular file", "character device"});
  EXPECT_TRUE(fs::is_character_file("/dev/null"));
  // Also through a symbolic link to it.
  const fs::path link = tmp().file(unique_name("null_link", ".npy"));
  fs::create_symlink("/dev/null", link);
  expect_has(error_of<ts::io_error>([&] {
               ts::io::save_npz(link, float_list{{"a", t}});
             }),
             {"save_npz", link.string(), "character device"});
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_TRUE(fs::is_character_file("/dev/null"));
}

// A FIFO without a reader would block an open for writing forever; it is refused at once.
TEST(NpySave, RefusesAFifoWithoutBlocking) {
  const fs::path p = make_fifo("save");
  const hang_guard guard;
  const std::string m =
      error_of<ts::io_error>([&] { ts::io::save_npy(p, ts::zeros<float, ts::cpu>(ts::Shape{2})); });
  expect_has(m, {"save_npy", p.string(), "not a regular file", "FIFO"});
  EXPECT_TRUE(fs::is_fifo(p));
}

// Loading from something that is not a regular file says so (it said "is empty" for
// /dev/urandom, whose size reads as 0).
TEST(NpyErrors, LoadRefusesACharacterDevice) {
  expect_load_error("/dev/urandom", {"not a regular file", "character device"});
  expect_npz_error("/dev/zero", {"not a regular file", "character device"});
}

// ... and does not block on a FIFO with no writer.
TEST(NpyErrors, LoadRefusesAFifoWithoutBlocking) {
  const fs::path p = make_fifo("load");
  const hang_guard guard;
  expect_load_error(p, {"not a regular file", "FIFO"});
  expect_npz_error(p, {"not a regular file", "FIFO"});
}

// The IDX reader (tessera/io/idx.hpp) opens files the same way, so it is checked here too.
TEST(NpyErrors, IdxRefusesFilesThatAreNotRegularWithoutBlocking) {
  const fs::path p = make_fifo("idx");
  const hang_guard guard;
  expect_has(error_of<ts::io_error>([&] { (void)ts::io::read_idx<uint8_t>(p); }),
             {"read_idx", p.string(), "not a regular file", "FIFO"});
  expect_has(error_of<ts::io_error>([&] { (void)ts::io::read_idx_header("/dev/zero"); }),
             {"read_idx_header", "'/dev/zero'", "not a regular file", "character device"});
}

// "w.npy" and "w" are different members but both load as the array "w": rejected, not the
// second silently winning.
TEST(Npz, LoadRejectsTwoMembersThatLoadUnderOneName) {
  const bytes a = npy_of(ramp(2)), b = npy_of(ramp(3));
  const fs::path p = write_file("dup_suffix.npz", make_zip({{"w.npy", a}, {"w", b}}));
  expect_npz_error(p, {"'w'", "twice"});
}

// A checkpoint whose archive names one parameter twice is rejected, and the model is unchanged.
TEST(Checkpoint, LoadRejectsADuplicateName) {
  ts::nn::Linear<float, ts::cpu> model(2, 1);
  const ts::Tensor<float, ts::cpu> before = model.weight.value().clone();
  const auto w = npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2), }",
                           raw_bytes(std::vector<float>{5, 6}));
  const fs::path p = write_file(
      "dup_ckpt.npz", make_zip({{"weight.npy", w}, {"bias.npy", npy_of({1})}, {"weight", w}}));
  const std::string m = error_of<ts::io_error>([&] { ts::io::load(model, p); });
  expect_has(m, {"load_npz", p.string(), "'weight'", "twice"});
  EXPECT_EQ(logical_bytes(model.weight.value()), logical_bytes(before));
}

// A module that (wrongly) registers two parameters under one name.
struct twice_named : ts::nn::Module<float, ts::cpu> {
  twice_named() {
    register_parameter("w", ts::ones<float, ts::cpu>(ts::Shape{2}));
    register_parameter("w", ts::ones<float, ts::cpu>(ts::Shape{3}));
  }
  variable forward(const variable& x) override { return x; }
};

// Saving two tensors under one name throws before anything is written: an existing file is
// left byte for byte as it was, and no temporary is left beside it.
TEST(Checkpoint, SaveRejectsADuplicateNameBeforeWriting) {
  const fs::path dir = tmp().file(unique_name("dup_save", ""));
  fs::create_directories(dir);
  const fs::path p = dir / "model.npz";
  ts::io::save_npz(p, float_list{{"old", ts::ones<float, ts::cpu>(ts::Shape{4})}});
  const bytes old = read_file(p);
  const std::string m = error_of<ts::io_error>([&] { ts::io::save(twice_named(), p); });
  expect_has(m, {"save_npz", p.string(), "'w'", "twice"});
  EXPECT_EQ(read_file(p), old);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
}

// ---- NumPy cross-check ----

bool have_numpy() {
  static const bool yes = std::system("python3 -c 'import numpy' >/dev/null 2>&1") == 0;
  return yes;
}

int run_python(const std::string& name, const std::string& script) {
  const fs::path p = tmp().file(name);
  std::ofstream(p) << script;
  return std::system(("python3 '" + p.string() + "'").c_str());
}

std::string py_shape(const ts::Shape& s) {
  std::string out = "(";
  for (int i = 0; i < s.rank(); ++i)
    out += std::to_string(s[i]) + (s.rank() == 1 ? "," : i + 1 < s.rank() ? ", " : "");
  return out + ")";
}

// Saves t from tessera and appends to `script` a check that NumPy loads the same dtype, shape
// and bytes.
template <class T>
void add_tessera_file(std::string& script, const std::string& name,
                      const ts::Tensor<T, ts::cpu>& t) {
  const fs::path p = tmp().file(name + ".npy"), bin = tmp().file(name + ".bin");
  ts::io::save_npy(p, t);
  std::ofstream(bin, std::ios::binary)
      .write(reinterpret_cast<const char*>(logical_bytes(t).data()),
             static_cast<std::streamsize>(logical_bytes(t).size()));
  script += "check(np.load(r'" + p.string() + "'), '" + expected_descr<T>() + "', " +
            py_shape(t.shape()) + ", r'" + bin.string() + "')\n";
}

TEST(NumPy, LoadsWhatTesseraWrites) {
  if (!have_numpy()) GTEST_SKIP() << "python3 with numpy is not installed";
  std::string script =
      "import sys\nimport numpy as np\n"
      "def check(a, dt, shape, binf):\n"
      "    assert a.dtype == np.dtype(dt), (a.dtype, dt)\n"
      "    assert a.shape == shape, (a.shape, shape)\n"
      "    assert a.flags.c_contiguous\n"
      "    want = open(binf, 'rb').read()\n"
      "    assert a.tobytes() == want, (binf, a.tobytes()[:32], want[:32])\n";
  add_tessera_file(script, "np_f4", random_bits<float>(ts::Shape{3, 5, 2}, 11));
  add_tessera_file(script, "np_f8", random_bits<double>(ts::Shape{4, 3}, 12));
  add_tessera_file(script, "np_f2", random_bits<ts::half>(ts::Shape{33}, 13));
  add_tessera_file(script, "np_i1", random_bits<int8_t>(ts::Shape{2, 2, 2}, 14));
  add_tessera_file(script, "np_u1", random_bits<uint8_t>(ts::Shape{5}, 15));
  add_tessera_file(script, "np_i4", random_bits<int32_t>(ts::Shape{1, 6}, 16));
  add_tessera_file(script, "np_i8", random_bits<int64_t>(ts::Shape{}, 17));
  add_tessera_file(script, "np_b1", random_bits<bool>(ts::Shape{7, 1}, 18));
  add_tessera_file(script, "np_empty", random_bits<float>(ts::Shape{0, 3}, 19));
  add_tessera_file(script, "np_view",
                   random_bits<double>(ts::Shape{4, 6}, 20).transpose(0, 1).slice(0, 1, 6, 2));
  add_tessera_file(script, "np_rank8", random_bits<int32_t>(ts::Shape{2, 1, 2, 1, 2, 1, 2, 3}, 21));

  const std::vector<std::pair<std::string, ts::Tensor<float, ts::cpu>>> arrays = {
      {"zeta", random_bits<float>(ts::Shape{3, 4}, 22)},
      {"alpha", random_bits<float>(ts::Shape{}, 23)},
      {"layer.w", random_bits<float>(ts::Shape{5, 2}, 24).transpose(0, 1)}};
  const fs::path pz = tmp().file("np_z.npz");
  ts::io::save_npz(pz, arrays);
  script += "z = np.load(r'" + pz.string() +
            "')\nassert list(z.keys()) == ['zeta', 'alpha', 'layer.w'], list(z.keys())\n";
  for (const auto& [name, t] : arrays) {
    const fs::path bin = tmp().file("np_z_" + name + ".bin");
    const bytes lb = logical_bytes(t);
    std::ofstream(bin, std::ios::binary)
        .write(reinterpret_cast<const char*>(lb.data()), static_cast<std::streamsize>(lb.size()));
    script +=
        "check(z['" + name + "'], '<f4', " + py_shape(t.shape()) + ", r'" + bin.string() + "')\n";
  }
  script += "print('numpy read', len(z.files) + 11, 'arrays written by tessera')\n";
  EXPECT_EQ(run_python("check_tessera.py", script), 0) << script;
}

TEST(NumPy, TesseraLoadsWhatNumPyWrites) {
  if (!have_numpy()) GTEST_SKIP() << "python3 with numpy is not installed";
  const fs::path d = tmp().path();
  // Each array goes to <name>.npy (or into an archive) and its C-order native bytes to
  // <name>.bin, so the comparison here needs no arithmetic.
  const std::string script = "import numpy as np\nd = r'" + d.string() + "'\n" + R"(
def raw(name, x):
    x = np.ascontiguousarray(x)
    open(d + '/' + name + '.bin', 'wb').write(x.astype(x.dtype.newbyteorder('=')).tobytes())
def save(name, x):
    np.save(d + '/' + name + '.npy', x)
    raw(name, x)
a = np.arange(24, dtype=np.float32).reshape(2, 3, 4) * np.float32(0.37) - np.float32(3)
a[0, 0, 0] = -0.0
a[1, 2, 3] = np.nan
save('py_c', a)
f = np.asfortranarray(a)
assert f.flags.f_contiguous and not f.flags.c_contiguous
save('py_f', f)
save('py_be', a.astype('>f8'))
save('py_be_f', np.asfortranarray(a.astype('>f8')))
save('py_bei8', (np.arange(6, dtype='>i8').reshape(2, 3) - 3) * 1000000000001)
save('py_h', a.astype(np.float16))
save('py_b', np.arange(5) % 2 == 0)
save('py_s', np.float64(2.5))
save('py_e', np.zeros((0, 3), dtype=np.int32))
save('py_u8f', np.asfortranarray(np.arange(60, dtype=np.uint8).reshape(3, 4, 5)))
save('py_i1', np.array([-128, 127, 0, -1], dtype=np.int8))
b = a[0] * 2
big = np.linspace(-1, 1, 10000, dtype=np.float32).reshape(100, 100)
np.savez(d + '/py_z.npz', w=a, b=b)
np.savez_compressed(d + '/py_zc.npz', w=a, b=b, big=big)
raw('py_z_w', a)
raw('py_z_b', b)
raw('py_z_big', big)
)";
  ASSERT_EQ(run_python("write_numpy.py", script), 0) << script;
  auto bin = [&](const std::string& name) { return read_file(d / (name + ".bin")); };
  auto npy = [&](const std::string& name) { return d / (name + ".npy"); };
  expect_same_bits(ts::io::load_npy<float>(npy("py_c")), bin("py_c"), {2, 3, 4});
  expect_same_bits(ts::io::load_npy<float>(npy("py_f")), bin("py_f"), {2, 3, 4});
  EXPECT_EQ(bin("py_f"), bin("py_c"));
  expect_same_bits(ts::io::load_npy<double>(npy("py_be")), bin("py_be"), {2, 3, 4});
  expect_same_bits(ts::io::load_npy<double>(npy("py_be_f")), bin("py_be"), {2, 3, 4});
  expect_same_bits(ts::io::load_npy<int64_t>(npy("py_bei8")), bin("py_bei8"), {2, 3});
  expect_same_bits(ts::io::load_npy<ts::half>(npy("py_h")), bin("py_h"), {2, 3, 4});
  expect_same_bits(ts::io::load_npy<bool>(npy("py_b")), bin("py_b"), {5});
  expect_same_bits(ts::io::load_npy<double>(npy("py_s")), bin("py_s"), ts::Shape{});
  expect_same_bits(ts::io::load_npy<int32_t>(npy("py_e")), bin("py_e"), {0, 3});
  expect_same_bits(ts::io::load_npy<uint8_t>(npy("py_u8f")), bin("py_u8f"), {3, 4, 5});
  expect_same_bits(ts::io::load_npy<int8_t>(npy("py_i1")), bin("py_i1"), {4});
  // Spot values, so the comparison does not only rest on NumPy's own bytes.
  const auto c = ts::io::load_npy<float>(npy("py_c"));
  EXPECT_TRUE(std::signbit(c.at({0, 0, 0})));
  EXPECT_TRUE(std::isnan(c.at({1, 2, 3})));
  const auto u8 = ts::io::load_npy<uint8_t>(npy("py_u8f"));
  EXPECT_EQ(u8.at({2, 3, 4}), 59);
  EXPECT_EQ(u8.at({1, 0, 2}), 22);
  const auto i8 = ts::io::load_npy<int64_t>(npy("py_bei8"));
  EXPECT_EQ(i8.at({1, 2}), 2 * 1000000000001ll);

  for (const char* archive : {"py_z.npz", "py_zc.npz"}) {
    SCOPED_TRACE(archive);
    const auto z = ts::io::load_npz<float>(d / archive);
    ASSERT_EQ(z.size(), std::string(archive) == "py_z.npz" ? 2u : 3u);
    EXPECT_EQ(z[0].first, "w");
    EXPECT_EQ(z[1].first, "b");
    expect_same_bits(z[0].second, bin("py_z_w"), {2, 3, 4});
    expect_same_bits(z[1].second, bin("py_z_b"), {3, 4});
    if (z.size() == 3) {
      EXPECT_EQ(z[2].first, "big");
      expect_same_bits(z[2].second, bin("py_z_big"), {100, 100});
    }
  }
  // The compressed archive really is deflated (method 8 in its first local header).
  const bytes zc = read_file(d / "py_zc.npz");
  ASSERT_GT(zc.size(), 10u);
  EXPECT_EQ(zc[8], 8);
}

}  // namespace test_npy

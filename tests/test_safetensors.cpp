// safetensors: files written by the reference implementation read back to the values it was
// given, tessera's writer byte for byte equal to it, round trips of every dtype, view, backend
// and load mode, and every kind of corrupt header as an io_error naming the file and tensor.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <tessera/io/safetensors.hpp>
#include <tessera/tessera.hpp>
#include <vector>

#include "temp_dir.hpp"

// A namespace of its own: test_layers compiles its sources as one (tests/CMakeLists.txt).
namespace test_safetensors {

namespace ts = tessera;
namespace fs = std::filesystem;
using ts::io::named_tensor;
using ts::io::safetensors_file;
using ts::io::safetensors_mode;
using bytes = std::string;

const fs::path fixtures = fs::path(TESSERA_TEST_DATA_DIR) / "safetensors";

const tt::temp_dir& tmp() { return tt::scratch("st"); }

bytes read_all(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return bytes(std::istreambuf_iterator<char>(f), {});
}
fs::path write_file(const std::string& name, const bytes& b) {
  const fs::path p = tmp().file(name);
  std::ofstream(p, std::ios::binary) << b;
  return p;
}

/// A file of the given header text (padded to 8 bytes) and data bytes.
bytes make_file(const std::string& header, const bytes& data) {
  std::string h = header;
  h.append((8 - h.size() % 8) % 8, ' ');
  bytes out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(uint64_t{h.size()} >> (8 * i));
  return out + h + data;
}

template <class T>
ts::Tensor<T, ts::cpu> from_bits(std::initializer_list<uint16_t> bits, ts::Shape shape) {
  std::vector<T> v;
  for (uint16_t b : bits) v.push_back(T::from_bits(b));
  return ts::from_vector<T>(v, shape);
}
template <class T>
ts::Tensor<T, ts::cpu> from_bytes(std::initializer_list<uint8_t> bits, ts::Shape shape) {
  std::vector<T> v;
  for (uint8_t b : bits) {
    T x;
    x.bits = b;
    v.push_back(x);
  }
  return ts::from_vector<T>(v, shape);
}

/// The tensors tests/data/safetensors/make_fixtures.py writes, built here.
std::vector<named_tensor> reference_tensors() {
  std::vector<named_tensor> t;
  t.emplace_back("f64", ts::arange<double>(6).reshape({2, 3}) / 3.0);
  t.emplace_back("f32", ts::arange<float>(12).reshape({3, 4}) * 0.5f - 1.0f);
  t.emplace_back("f16", ts::from_vector<float>({1, -2, 0.5f, 65504}, {4}).astype<ts::half>());
  t.emplace_back("bf16", from_bits<ts::bfloat16>({0x3F80, 0xC000, 0x7F80, 0x0000}, {2, 2}));
  t.emplace_back("f8e4m3", from_bytes<ts::float8_e4m3>({0x38, 0x40, 0xB8, 0x7E}, {4}));
  t.emplace_back("f8e5m2", from_bytes<ts::float8_e5m2>({0x3C, 0xC0, 0x7C, 0x00}, {4}));
  t.emplace_back("i64",
                 ts::from_vector<int64_t>({-(int64_t{1} << 62), 0, (int64_t{1} << 62) - 1}, {3}));
  t.emplace_back("i32", ts::arange<int32_t>(-3, 3).reshape({2, 3}));
  t.emplace_back("i8", ts::from_vector<int8_t>({-128, 0, 127}, {3}));
  t.emplace_back("u8", ts::from_vector<uint8_t>({0, 255, 7}, {3}));
  t.emplace_back("flags", ts::from_vector<bool>({true, false, true}, {3}));
  t.emplace_back("scalar", ts::full<float>({}, 3.25f));
  t.emplace_back("empty", ts::zeros<float>({0, 3}));
  return t;
}

template <class T>
void expect_same(const ts::Tensor<T, ts::cpu>& got, const ts::Tensor<T, ts::cpu>& want) {
  ASSERT_EQ(got.shape(), want.shape());
  const auto g = got.contiguous(), w = want.contiguous();
  EXPECT_EQ(std::memcmp(g.data(), w.data(), static_cast<size_t>(w.numel()) * sizeof(T)), 0);
}

/// Checks every fixture tensor through f (copy or map mode).
void expect_reference_values(const safetensors_file& f) {
  ASSERT_EQ(f.size(), 13u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.dtype_name("bf16"), "BF16");
  EXPECT_EQ(f.shape("i32"), (ts::Shape{2, 3}));
  for (const named_tensor& t : reference_tensors()) {
    SCOPED_TRACE(t.name);
    switch (t.type) {
#define TT_CASE(TAG, T)                                                     \
  case ts::dtype::TAG: {                                                    \
    const auto got = f.get<T>(t.name);                                      \
    ASSERT_EQ(got.shape(), t.shape);                                        \
    ASSERT_EQ(static_cast<size_t>(got.numel()) * sizeof(T), t.bytes->size); \
    EXPECT_EQ(std::memcmp(got.data(), t.bytes->data, t.bytes->size), 0);    \
    break;                                                                  \
  }
      TT_CASE(float64, double)
      TT_CASE(float32, float)
      TT_CASE(float16, ts::half)
      TT_CASE(bfloat16, ts::bfloat16)
      TT_CASE(float8_e4m3, ts::float8_e4m3)
      TT_CASE(float8_e5m2, ts::float8_e5m2)
      TT_CASE(int64, int64_t)
      TT_CASE(int32, int32_t)
      TT_CASE(int8, int8_t)
      TT_CASE(uint8, uint8_t)
      TT_CASE(boolean, bool)
#undef TT_CASE
    }
  }
}

TEST(Safetensors, ReadsTheReferenceWritersFileInBothModes) {
  for (const auto mode : {safetensors_mode::copy, safetensors_mode::map}) {
    SCOPED_TRACE(mode == safetensors_mode::copy ? "copy" : "map");
    expect_reference_values(safetensors_file::open(fixtures / "all_dtypes.safetensors", mode));
  }
  // Spot values, independent of the writer code above.
  const auto f = safetensors_file::open(fixtures / "all_dtypes.safetensors");
  EXPECT_FLOAT_EQ(f.get<float>("f32").at({2, 3}), 4.5f);
  EXPECT_EQ(f.get<int64_t>("i64").at({0}), -(int64_t{1} << 62));
  EXPECT_EQ(static_cast<float>(f.get<ts::bfloat16>("bf16").at({0, 1})), -2.0f);
  EXPECT_EQ(static_cast<float>(f.get<ts::float8_e4m3>("f8e4m3").at({3})), 448.0f);
  EXPECT_EQ(f.get<float>("scalar").item(), 3.25f);
  EXPECT_EQ(f.get<float>("empty").numel(), 0);
}

TEST(Safetensors, WritesTheSameBytesAsTheReference) {
  const fs::path p = tmp().file("same.safetensors");
  ts::io::save_safetensors(p, reference_tensors(), {{"format", "pt"}});
  EXPECT_EQ(read_all(p), read_all(fixtures / "all_dtypes.safetensors"));
}

TEST(Safetensors, RoundTripsViewsAndEveryDtypeInEitherMode) {
  ts::Generator g(3);
  const auto base = ts::randn<float>({4, 5, 6}, g);
  const auto view = base.transpose(0, 2).slice(1, 1, 5, 2);  // strided, offset
  std::vector<named_tensor> t = reference_tensors();
  t.emplace_back("view", view);
  t.emplace_back("half_view", view.astype<ts::half>());
  const fs::path p = tmp().file("views.safetensors");
  ts::io::save_safetensors(p, t);
  for (const auto mode : {safetensors_mode::copy, safetensors_mode::map}) {
    const auto f = safetensors_file::open(p, mode);
    expect_same(f.get<float>("view"), view);
    expect_same(f.get<ts::half>("half_view"), view.astype<ts::half>());
    EXPECT_TRUE(f.metadata().empty());
  }
  const fs::path q = tmp().file("one_type.safetensors");
  ts::io::save_safetensors<float>(q, {{"b", view}, {"a", base}});
  const auto all = ts::io::load_safetensors<float>(q, safetensors_mode::map);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].first, "a");  // same dtype: by name
  expect_same(all[0].second, base);
  expect_same(all[1].second, view);
}

TEST(Safetensors, MappedViewsOutliveTheFileObjectAndNeverWriteTheFile) {
  const fs::path p = tmp().file("mapped.safetensors");
  ts::io::save_safetensors<float>(p, {{"w", ts::arange<float>(1000)}});
  const bytes before = read_all(p);
  ts::Tensor<float> w;
  {
    const auto f = safetensors_file::open(p, safetensors_mode::map);
    w = f.get<float>("w");
  }
  EXPECT_EQ(w.at({999}), 999.0f);
  w.fill_(-1.0f);  // private to this process
  EXPECT_EQ(w.at({10}), -1.0f);
  EXPECT_EQ(read_all(p), before);
  EXPECT_EQ(safetensors_file::open(p, safetensors_mode::map).get<float>("w").at({10}), 10.0f);
}

TEST(Safetensors, UnalignedTensorsAreCopiedInMapMode) {
  // An int8 first puts the float at offset 1: not a valid float address, so map mode copies.
  std::string data = "\x05";
  const float v = 2.5f;
  data.append(reinterpret_cast<const char*>(&v), 4);
  const fs::path p = write_file(
      "unaligned.safetensors", make_file(R"({"a":{"dtype":"I8","shape":[1],"data_offsets":[0,1]},)"
                                         R"("b":{"dtype":"F32","shape":[1],"data_offsets":[1,5]}})",
                                         data));
  const auto f = safetensors_file::open(p, safetensors_mode::map);
  const auto b = f.get<float>("b");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % alignof(float), 0u);
  EXPECT_EQ(b.at({0}), 2.5f);
  EXPECT_EQ(f.get<int8_t>("a").at({0}), 5);
}

TEST(Safetensors, DtypesWithoutATesseraTypeAreListedButNotLoaded) {
  const auto f = safetensors_file::open(fixtures / "unsupported_dtype.safetensors");
  EXPECT_EQ(f.dtype_name("short"), "I16");
  EXPECT_EQ(f.get<float>("w").at({1}), -2.5f);
  try {
    (void)f.get<int32_t>("short");
    FAIL() << "no error";
  } catch (const ts::io_error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'short': has dtype I16, which tessera has no "
                                         "type for"),
              std::string::npos)
        << e.what();
  }
}

/// Expects opening (or, with `tensor`, getting that tensor of) the file to throw io_error whose
/// message holds every fragment.
void expect_error(const fs::path& p, std::vector<std::string> fragments, const char* tensor = "",
                  safetensors_mode mode = safetensors_mode::copy) {
  try {
    const auto f = safetensors_file::open(p, mode);
    if (*tensor) {
      if (f.dtype_name(tensor) == "BOOL")
        (void)f.get<bool>(tensor);
      else
        (void)f.get<float>(tensor);
    }
    ADD_FAILURE() << p << ": no error, expected " << fragments[0];
  } catch (const ts::io_error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("tessera::load_safetensors: '" + p.string() + "'"), std::string::npos) << m;
    for (const std::string& s : fragments) EXPECT_NE(m.find(s), std::string::npos) << m;
  }
}

TEST(Safetensors, CorruptHeadersAreIoErrorsNamingFileAndTensor) {
  const std::string f32 = R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  const bytes eight(8, '\0');
  struct bad {
    const char* name;
    bytes file;
    std::vector<std::string> fragments;
  };
  bytes huge_len(8, '\0');
  huge_len[5] = 1;  // 2^40
  bytes past_end = make_file("{}", "");
  past_end[0] = 100;
  const std::vector<bad> cases = {
      {"empty", "", {"is empty"}},
      {"short", "abc", {"too short"}},
      {"huge_header", huge_len + "{}", {"over the limit of 100000000"}},
      {"header_past_end", past_end, {"header length 100 runs past the end"}},
      {"not_object", make_file("[1, 2]", ""), {"not a JSON object"}},
      {"bad_json", make_file(R"({"a": )", ""), {"not valid JSON"}},
      {"bad_utf8", make_file("{\"a\xff\":" + f32 + "}", eight), {"ill-formed UTF-8"}},
      {"duplicate",
       make_file(R"({"a":)" + f32 + R"(,"a":)" + f32 + "}", eight),
       {"names 'a' twice"}},
      {"entry_not_object", make_file(R"({"a":3})", ""), {"tensor 'a'", "must be an object"}},
      {"no_dtype",
       make_file(R"({"a":{"shape":[2],"data_offsets":[0,8]}})", eight),
       {"tensor 'a'", "no \"dtype\""}},
      {"unknown_dtype",
       make_file(R"({"a":{"dtype":"F31","shape":[2],"data_offsets":[0,8]}})", eight),
       {"tensor 'a'", "unknown dtype 'F31'"}},
      {"no_shape",
       make_file(R"({"a":{"dtype":"F32","data_offsets":[0,8]}})", eight),
       {"no \"shape\""}},
      {"negative_dim",
       make_file(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", eight),
       {"a dimension must be a non-negative integer, not -2"}},
      {"float_dim",
       make_file(R"({"a":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", eight),
       {"non-negative integer"}},
      {"rank_9",
       make_file(R"({"a":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,2],"data_offsets":[0,8]}})",
                 eight),
       {"rank 9 is over"}},
      {"overflowing_shape",
       make_file(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})",
                 eight),
       {"more elements than fit in int64"}},
      {"bytes_overflow",
       make_file(R"({"a":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,8]}})",
                 eight),
       {"tensor 'a'", "needs"}},
      {"no_offsets",
       make_file(R"({"a":{"dtype":"F32","shape":[2]}})", eight),
       {"no \"data_offsets\""}},
      {"three_offsets",
       make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4,8]}})", eight),
       {"no \"data_offsets\" array of two"}},
      {"reversed_offsets",
       make_file(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", eight),
       {"end before they begin"}},
      {"size_mismatch",
       make_file(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight),
       {"tensor 'a'", "needs 12 bytes, but data_offsets [0,8] hold 8"}},
      {"past_data",
       make_file(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", eight),
       {"tensor 'a'", "run past the end of the data (8 bytes)"}},
      {"overlap",
       make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                 R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                 eight),
       {"tensor 'b'", "overlap"}},
      {"gap",
       make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", eight),
       {"tensor 'a'", "leave a gap after byte 0"}},
      {"trailing",
       make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", eight),
       {"bytes after the last tensor"}},
      {"metadata_not_object", make_file(R"({"__metadata__":[1]})", ""), {"__metadata__"}},
      {"metadata_not_string",
       make_file(R"({"__metadata__":{"k":1}})", ""),
       {"value of 'k' is not a string"}},
  };
  for (const bad& c : cases) {
    SCOPED_TRACE(c.name);
    const fs::path p = write_file(std::string(c.name) + ".safetensors", c.file);
    expect_error(p, c.fragments);
    expect_error(p, c.fragments, "", safetensors_mode::map);
  }
  // Caught when the tensor is read: bool bytes other than 0 and 1.
  const fs::path p = write_file(
      "bad_bool.safetensors",
      make_file(R"({"b":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})", bytes("\x01\x02")));
  for (const auto mode : {safetensors_mode::copy, safetensors_mode::map})
    expect_error(p, {"tensor 'b'", "bool element 1 is byte 2"}, "b", mode);
  expect_error(p, {"tensor 'nope'", "no such tensor"}, "nope");
}

TEST(Safetensors, PathsThatAreNotRegularFilesAreRefused) {
  expect_error(tmp().file("missing.safetensors"), {"no such file"});
  expect_error(fs::temp_directory_path(), {"is a directory"});
  expect_error("/dev/urandom", {"not a regular file"});
}

TEST(Safetensors, SaveRefusesBadNamesBeforeWriting) {
  const fs::path p = tmp().file("names.safetensors");
  const auto x = ts::ones<float>({2});
  auto expect_save_error = [&](std::vector<named_tensor> t, std::string fragment) {
    try {
      ts::io::save_safetensors(p, t);
      ADD_FAILURE() << "no error, expected " << fragment;
    } catch (const ts::io_error& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
    EXPECT_FALSE(fs::exists(p));
  };
  expect_save_error({{"a", x}, {"a", x}}, "tensor 'a': the name is given twice");
  expect_save_error({{"", x}}, "a tensor name is empty");
  expect_save_error({{"__metadata__", x}}, "reserved");
  expect_save_error({{"bad\xff", x}}, "not valid UTF-8");
  try {
    ts::io::save_safetensors(p, {named_tensor("a", x)}, {{"k", "\xfe"}});
    ADD_FAILURE() << "no error";
  } catch (const ts::io_error& e) {
    EXPECT_NE(std::string(e.what()).find("not valid UTF-8"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ts::io::save_safetensors(tmp().file("no/such/dir.safetensors"), {{"a", x}}),
               ts::io_error);
}

TEST(Safetensors, SaveKeepsTheReplacedFilesMode) {
  const fs::path p = tmp().file("mode.safetensors");
  ts::io::save_safetensors<float>(p, {{"a", ts::ones<float>({2})}});
  ASSERT_EQ(::chmod(p.c_str(), 0600), 0);
  ts::io::save_safetensors<float>(p, {{"a", ts::zeros<float>({3})}});
  struct stat st {};
  ASSERT_EQ(::stat(p.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(safetensors_file::open(p).shape("a"), ts::Shape{3});
}

}  // namespace test_safetensors

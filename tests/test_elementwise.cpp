// Elementwise ops and map: every dtype against a double reference, over broadcast patterns,
// SIMD-tail sizes, non-contiguous layouts, special values and bad input.
#include <gtest/gtest.h>

#include <functional>
#include <limits>

#include "test_util.hpp"

namespace {
namespace ts = tessera;
using tt::layout;

template <class T>
class Arithmetic : public ::testing::Test {};
using AllTypes = ::testing::Types<float, double, ts::half, ts::bfloat16, ts::float8_e4m3,
                                  ts::float8_e5m2, int8_t, uint8_t, int32_t, int64_t>;
TYPED_TEST_SUITE(Arithmetic, AllTypes);

// The value a result of type T holds for an exact double result: rounding for floating types
// (checked by tolerance), wrap-around for integers (C++20 defines narrowing modulo 2^n).
template <class T>
double as_stored(double w) {
  if constexpr (std::is_integral_v<T>)
    return static_cast<double>(static_cast<T>(static_cast<int64_t>(w)));
  else
    return w;
}

struct shape_pair {
  ts::Shape a, b;
};
std::vector<shape_pair> broadcast_cases() {
  std::vector<shape_pair> c = {{{}, {}},
                               {{5}, {}},
                               {{}, {5}},
                               {{3, 4}, {4}},
                               {{4}, {3, 4}},
                               {{3, 1}, {1, 4}},
                               {{2, 3, 4}, {3, 1}},
                               {{2, 1, 4}, {1, 3, 1}},
                               {{1, 0, 3}, {3}},
                               {{0}, {1}},
                               {{2, 3}, {2, 3}},
                               {{1}, {7}},
                               {{6, 1}, {6, 5}},
                               {{2, 1, 3, 1}, {4, 1, 5}}};
  for (int64_t n = 1; n <= 33; ++n) c.push_back({{n}, {n}});
  c.push_back({{812}, {812}});
  // Above 2 * parallel_grain elements: the threaded path, with odd tails on both dims.
  c.push_back({{263, 509}, {509}});
  return c;
}

/// The binary op under test, type-erased: check_binary's loops compile once per element type,
/// not once per op. An op whose result is not of type T does not convert (tensors of different
/// element types do not convert implicitly).
template <class T>
using binary_op = std::function<ts::Tensor<T, ts::cpu>(const ts::Tensor<T, ts::cpu>&,
                                                       const ts::Tensor<T, ts::cpu>&)>;

template <class T>
void check_binary(const char* name, const binary_op<T>& op, double (*ref)(double, double),
                  bool nonzero_b = false) {
  ts::Generator g(42);
  for (const auto& [sa, sb] : broadcast_cases()) {
    for (layout la : {layout::contiguous, layout::transposed, layout::strided}) {
      if (sa.numel() > 100000 && la == layout::strided) continue;  // keeps the suite fast
      auto a = tt::relayout(tt::random_tensor<T>(sa, g), la);
      auto b = tt::random_tensor<T>(sb, g, nonzero_b ? 1 : -3, 3);
      if (nonzero_b && std::is_signed_v<T>)
        b = tt::relayout(b, la == layout::strided ? layout::transposed : layout::strided);
      auto got = op(a, b);
      ASSERT_EQ(got.shape(), ts::broadcast_shapes(sa, sb));
      auto want = tt::reference_binary(a, b, ref);
      for (auto& w : want) w = as_stored<T>(w);
      tt::expect_close(tt::to_doubles(got), want, tt::tolerance<T>(),
                       std::string(name) + " " + sa.to_string() + " " + sb.to_string() +
                           " layout " + std::to_string(static_cast<int>(la)));
      if (::testing::Test::HasFailure()) return;
    }
  }
}

TYPED_TEST(Arithmetic, AddSubMulDivMaxMinBroadcast) {
  using T = TypeParam;
  check_binary<T>(
      "add", [](auto& a, auto& b) { return a + b; }, [](double x, double y) { return x + y; });
  check_binary<T>(
      "sub", [](auto& a, auto& b) { return a - b; }, [](double x, double y) { return x - y; });
  check_binary<T>(
      "mul", [](auto& a, auto& b) { return ts::mul(a, b); },
      [](double x, double y) { return x * y; });
  check_binary<T>(
      "maximum", [](auto& a, auto& b) { return ts::maximum(a, b); },
      [](double x, double y) { return std::max(x, y); });
  check_binary<T>(
      "minimum", [](auto& a, auto& b) { return ts::minimum(a, b); },
      [](double x, double y) { return std::min(x, y); });
  if constexpr (std::is_integral_v<T>) {
    check_binary<T>(
        "div", [](auto& a, auto& b) { return a / b; },
        [](double x, double y) { return std::trunc(x / y); }, true);
    check_binary<T>(
        "fmod", [](auto& a, auto& b) { return ts::fmod(a, b); },
        [](double x, double y) { return std::fmod(x, y); }, true);
  } else {
    check_binary<T>(
        "div", [](auto& a, auto& b) { return a / b; }, [](double x, double y) { return x / y; },
        true);
    check_binary<T>(
        "fmod", [](auto& a, auto& b) { return ts::fmod(a, b); },
        [](double x, double y) { return std::fmod(x, y); }, true);
  }
}

TYPED_TEST(Arithmetic, ComparisonsGiveBool) {
  using T = TypeParam;
  ts::Generator g(7);
  auto a = tt::random_tensor<T>({5, 6}, g), b = tt::random_tensor<T>({6}, g);
  const auto da = tt::to_doubles(a), db = tt::to_doubles(b);
  const std::pair<ts::Tensor<bool>, std::function<bool(double, double)>> cases[] = {
      {a == b, std::equal_to<double>()}, {a != b, std::not_equal_to<double>()},
      {a < b, std::less<double>()},      {a <= b, std::less_equal<double>()},
      {a > b, std::greater<double>()},   {a >= b, std::greater_equal<double>()}};
  for (const auto& [got, f] : cases) {
    auto v = got.to_vector();
    for (int i = 0; i < 30; ++i) EXPECT_EQ(v[i], f(da[i], db[i % 6])) << i;
  }
}

TYPED_TEST(Arithmetic, ScalarOperandsAndCompoundAssignment) {
  using T = TypeParam;
  ts::Generator g(3);
  auto a = tt::random_tensor<T>({4, 9}, g);
  const auto da = tt::to_doubles(a);
  auto p = tt::to_doubles(a + 2), q = tt::to_doubles(2 - a), r = tt::to_doubles(a * 3);
  for (size_t i = 0; i < da.size(); ++i) {
    EXPECT_NEAR(p[i], as_stored<T>(da[i] + 2),
                tt::tolerance<T>() * std::max(1.0, std::abs(da[i] + 2)));
    EXPECT_NEAR(q[i], as_stored<T>(2 - da[i]),
                tt::tolerance<T>() * std::max(1.0, std::abs(2 - da[i])));
    EXPECT_NEAR(r[i], as_stored<T>(da[i] * 3),
                tt::tolerance<T>() * std::max(1.0, std::abs(da[i] * 3)));
  }
  // A floating scalar makes an integer tensor's result float (as in LibTorch).
  auto f = a * 0.5;
  if constexpr (std::is_integral_v<T>)
    static_assert(std::is_same_v<typename decltype(f)::value_type, float>);
  else
    static_assert(std::is_same_v<typename decltype(f)::value_type, T>);

  auto c = a.clone();
  auto row = tt::random_tensor<T>({9}, g);
  c += row;  // broadcast into c, in place
  c -= 1;
  auto want = tt::reference_binary(a, row, [](double x, double y) { return x + y; });
  for (auto& w : want) w = as_stored<T>(as_stored<T>(w) - 1);
  tt::expect_close(tt::to_doubles(c), want, 2 * tt::tolerance<T>(), "compound");
  EXPECT_THROW(row += a, ts::shape_error);  // would have to grow row
}

template <class T>
class FloatMath : public ::testing::Test {};
using FloatTypes = ::testing::Types<float, double, ts::half, ts::bfloat16>;
TYPED_TEST_SUITE(FloatMath, FloatTypes);

TYPED_TEST(FloatMath, UnaryAgainstStd) {
  using T = TypeParam;
  using C = ts::compute_t<T>;
  ts::Generator g(11);
  struct unary_case {
    const char* name;
    std::function<ts::Tensor<T>(const ts::Tensor<T>&)> op;
    double (*ref)(double);
    double lo, hi, tol_scale;
  };
  const unary_case cases[] = {
      {"neg", [](auto& x) { return -x; }, [](double x) { return -x; }, -5, 5, 1},
      {"abs", [](auto& x) { return ts::abs(x); }, [](double x) { return std::abs(x); }, -5, 5, 1},
      {"exp", [](auto& x) { return ts::exp(x); }, [](double x) { return std::exp(x); }, -80, 80, 4},
      {"log", [](auto& x) { return ts::log(x); }, [](double x) { return std::log(x); }, 1e-3, 1e3,
       4},
      {"log1p", [](auto& x) { return ts::log1p(x); }, [](double x) { return std::log1p(x); }, -0.9,
       10, 4},
      {"expm1", [](auto& x) { return ts::expm1(x); }, [](double x) { return std::expm1(x); }, -5, 5,
       4},
      {"sqrt", [](auto& x) { return ts::sqrt(x); }, [](double x) { return std::sqrt(x); }, 0, 100,
       2},
      {"rsqrt", [](auto& x) { return ts::rsqrt(x); }, [](double x) { return 1 / std::sqrt(x); },
       0.01, 100, 4},
      {"sin", [](auto& x) { return ts::sin(x); }, [](double x) { return std::sin(x); }, -6, 6, 4},
      {"cos", [](auto& x) { return ts::cos(x); }, [](double x) { return std::cos(x); }, -6, 6, 4},
      {"tanh", [](auto& x) { return ts::tanh(x); }, [](double x) { return std::tanh(x); }, -10, 10,
       4},
      {"sigmoid", [](auto& x) { return ts::sigmoid(x); },
       [](double x) { return 1 / (1 + std::exp(-x)); }, -20, 20, 4},
      {"relu", [](auto& x) { return ts::relu(x); }, [](double x) { return x > 0 ? x : 0; }, -5, 5,
       1},
      {"gelu", [](auto& x) { return ts::gelu(x); },
       [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }, -6, 6, 4},
      {"gelu_tanh", [](auto& x) { return ts::gelu_tanh(x); },
       [](double x) {
         return 0.5 * x * (1 + std::tanh(0.79788456080286535588 * (x + 0.044715 * x * x * x)));
       },
       -6, 6, 4},
      {"erf", [](auto& x) { return ts::erf(x); }, [](double x) { return std::erf(x); }, -3, 3, 4},
      {"floor", [](auto& x) { return ts::floor(x); }, [](double x) { return std::floor(x); }, -50,
       50, 1},
      {"ceil", [](auto& x) { return ts::ceil(x); }, [](double x) { return std::ceil(x); }, -50, 50,
       1},
      {"round", [](auto& x) { return ts::round(x); }, [](double x) { return std::nearbyint(x); },
       -50, 50, 1},
      {"sign", [](auto& x) { return ts::sign(x); },
       [](double x) { return double((x > 0) - (x < 0)); }, -5, 5, 1},
      {"clamp", [](auto& x) { return ts::clamp(x, -1.5, 2.0); },
       [](double x) { return std::clamp(x, -1.5, 2.0); }, -5, 5, 1},
  };
  std::vector<int64_t> sizes;
  for (int64_t n = 1; n <= 33; ++n) sizes.push_back(n);
  sizes.push_back(812);
  sizes.push_back(40000);  // large enough to run on several threads
  for (const auto& c : cases) {
    for (int64_t n : sizes) {
      for (layout l : {layout::contiguous, layout::strided}) {
        auto x = tt::relayout(ts::rand<T>({n}, g, c.lo, c.hi), l);
        auto y = c.op(x);
        auto dx = tt::to_doubles(x), got = tt::to_doubles(y);
        std::vector<double> want(dx.size());
        // The reference sees the input in the compute type, then rounds to T like the op does.
        for (size_t i = 0; i < dx.size(); ++i)
          want[i] = static_cast<double>(static_cast<T>(static_cast<C>(c.ref(dx[i]))));
        const double tol =
            std::max(tt::tolerance<T>(), c.tol_scale * std::numeric_limits<C>::epsilon());
        tt::expect_close(got, want, tol, std::string(c.name) + " n=" + std::to_string(n));
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
}

TYPED_TEST(FloatMath, SpecialValuesPropagate) {
  using T = TypeParam;
  const double inf = std::numeric_limits<double>::infinity(),
               nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<T> v;
  for (double d : {nan, inf, -inf, 0.0, -0.0, 1.0}) v.push_back(static_cast<T>(d));
  // Repeat to cover SIMD body and tail.
  std::vector<T> big;
  for (int r = 0; r < 7; ++r) big.insert(big.end(), v.begin(), v.end());
  auto x = ts::from_vector<T>(big);
  auto chk = [&](const auto& t, std::vector<double> want6, const char* what) {
    auto got = tt::to_doubles(t);
    std::vector<double> want;
    for (int r = 0; r < 7; ++r) want.insert(want.end(), want6.begin(), want6.end());
    tt::expect_close(got, want, std::max(1e-6, tt::tolerance<T>()), what);
  };
  chk(x + x, {nan, inf, -inf, 0, 0, 2}, "add");
  chk(x * x, {nan, inf, inf, 0, 0, 1}, "mul");
  chk(ts::exp(x), {nan, inf, 0, 1, 1, std::exp(1.0)}, "exp");
  chk(ts::log(x), {nan, inf, nan, -inf, -inf, 0}, "log");
  chk(ts::sqrt(x), {nan, inf, nan, 0, 0, 1}, "sqrt");
  chk(ts::tanh(x), {nan, 1, -1, 0, 0, std::tanh(1.0)}, "tanh");
  chk(ts::sigmoid(x), {nan, 1, 0, 0.5, 0.5, 1 / (1 + std::exp(-1.0))}, "sigmoid");
  chk(ts::relu(x), {nan, inf, 0, 0, 0, 1}, "relu");
  chk(ts::maximum(x, ts::full<T>({1}, T(0.5f))), {nan, inf, 0.5, 0.5, 0.5, 1}, "maximum");
  chk(ts::minimum(x, ts::full<T>({1}, T(0.5f))), {nan, 0.5, -inf, 0, 0, 0.5}, "minimum");
  chk(ts::abs(x), {nan, inf, inf, 0, 0, 1}, "abs");
}

TEST(HalfRange, NearMaxAndOverflow) {
  auto a = ts::full<ts::half>({17}, ts::half(65504.0f));
  EXPECT_EQ(static_cast<float>((a + ts::full<ts::half>({17}, ts::half(8.0f))).to_vector()[16]),
            65504.0f);  // rounds back
  EXPECT_TRUE(std::isinf(static_cast<float>((a * 2).to_vector()[3])));
  EXPECT_TRUE(std::isinf(static_cast<float>((a + a).to_vector()[0])));
  EXPECT_EQ(static_cast<float>((a - a).to_vector()[5]), 0.0f);
  EXPECT_EQ(static_cast<float>((a / 2).to_vector()[9]), 32752.0f);
}

TEST(Map, FusedNaryBroadcastAndOutForm) {
  ts::Generator g(5);
  auto x = ts::randn<float>({37, 13}, g), y = ts::randn<float>({13}, g);
  auto z = ts::map([](auto a, auto b) { return a * 2 + b; }, x, y);
  auto want = tt::reference_binary(x, y, [](double a, double b) { return a * 2 + b; });
  tt::expect_close(tt::to_doubles(z), want, 1e-6, "map");
  // Vectorized user functor: same result.
  auto zv = ts::map(ts::vectorized([](auto a, auto b) { return a * 2 + b; }), x, y);
  tt::expect_close(tt::to_doubles(zv), want, 1e-6, "vectorized map");
  // Out-parameter form into a transposed view (strided output).
  auto out_t = ts::zeros<float>({13, 37});
  ts::map_to(
      out_t.transpose(0, 1), [](auto a, auto b) { return a - b; }, x, y);
  auto want2 = tt::reference_binary(x, y, [](double a, double b) { return a - b; });
  tt::expect_close(tt::to_doubles(out_t.transpose(0, 1)), want2, 1e-6, "map_to strided");
  // Three inputs, mixed types; the result type is the functor's.
  auto mask = x > 0.0f;
  auto w = ts::map([](bool m, float a, float b) { return m ? double(a) : double(b); }, mask, x, y);
  static_assert(std::is_same_v<decltype(w)::value_type, double>);
  auto dw = tt::to_doubles(w), dx = tt::to_doubles(x), dy = tt::to_doubles(y);
  for (int i = 0; i < 37 * 13; ++i) EXPECT_EQ(dw[i], dx[i] > 0 ? dx[i] : dy[i % 13]);
  // Zero inputs: fill.
  auto f = ts::empty<int32_t>({3, 3});
  ts::map_to(f, [] { return 7; });
  for (int v : f.to_vector()) EXPECT_EQ(v, 7);
}

// Rows where some operands are one value (a per-channel scale over an image plane) and the
// types differ: the kernel spreads those values into a buffer, in blocks of 128. Rows of 15
// (below the spreading threshold), 128 (one block) and 300 (three, the last partial).
TEST(Map, PerChannelOperandsOfMixedTypes) {
  ts::Generator g(6);
  for (const int64_t plane : {15, 128, 300}) {
    SCOPED_TRACE(plane);
    const auto acc = ts::randint<int32_t>(-5000, 5000, {2, 3, plane}, g);
    const auto scale = ts::rand<float>({3, 1}, g, 0.01f, 0.05f), bias = ts::randn<float>({3, 1}, g);
    const auto y = ts::map(
        [](int32_t a, float s, float b) {
          const float v = std::nearbyint(static_cast<float>(a) * s + b);
          return static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
        },
        acc, scale, bias);
    const auto av = acc.to_vector();
    const auto yv = y.to_vector();
    const auto sv = scale.to_vector(), bv = bias.to_vector();
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t c = 0; c < 3; ++c)
        for (int64_t i = 0; i < plane; ++i) {
          const size_t at = static_cast<size_t>((n * 3 + c) * plane + i);
          const float v = std::nearbyint(static_cast<float>(av[at]) * sv[c] + bv[c]);
          ASSERT_EQ(yv[at], static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v)) << n << c << i;
        }
  }
}

TEST(Map, AliasingInPlaceAndOverlap) {
  auto x = ts::arange<float>(10);
  ts::map_to(
      x, [](float a) { return a * 10; }, x);  // exact alias: in place
  EXPECT_EQ(x.to_vector()[9], 90.0f);
  // Overlapping shifted views: the output must read the inputs as they were (as if copied).
  auto y = ts::arange<float>(10);
  ts::map_to(
      y.slice(0, 1, 10), [](float a) { return a; }, y.slice(0, 0, 9));
  std::vector<float> want = {0, 0, 1, 2, 3, 4, 5, 6, 7, 8};
  EXPECT_EQ(y.to_vector(), want);
  auto e = ts::zeros<float>({1}).expand({4});
  EXPECT_THROW(ts::map_to(
                   e, [](float a) { return a; }, ts::ones<float>({4})),
               ts::shape_error);
}

TEST(Map, StreamingStoresForLargeOutputs) {
  // Outputs of 32 MiB and more are written with non-temporal stores; check both the SIMD-functor
  // and the plain-lambda paths, into a misaligned destination (so the alignment peel runs), with
  // an odd length (so the tail runs), on two threads.
  const int64_t n = (int64_t{1} << 23) + 13;
  ts::Generator g(77);
  auto x = ts::rand<float>({n}, g), y = ts::rand<float>({n}, g);
  auto buf = ts::zeros<float>({n + 1});
  auto out = buf.slice(0, 1, n + 1);
  ts::set_num_threads(2);
  ts::map_to(
      out, [](float a, float b) { return 3 * a - b; }, x, y);
  auto vx = x.to_vector(), vy = y.to_vector(), vo = out.to_vector();
  int64_t bad = 0;
  // The vector passes may fuse 3 * a - b into one FMA (as -march=native would): within rounding.
  for (int64_t i = 0; i < n; ++i) bad += std::abs(vo[i] - (3 * vx[i] - vy[i])) > 1e-6f;
  EXPECT_EQ(bad, 0);
  auto z = ts::map(ts::fn::axpy<float>{2.0f}, x, y);  // SIMD functor, fresh (aligned) output
  auto vz = z.to_vector();
  bad = 0;
  for (int64_t i = 0; i < n; ++i) bad += std::abs(vz[i] - (2 * vx[i] + vy[i])) > 1e-6f;
  EXPECT_EQ(bad, 0);
  auto d = ts::rand<double>({n / 2}, g);
  auto dd = (d + d).to_vector();
  auto vd = d.to_vector();
  bad = 0;
  for (size_t i = 0; i < vd.size(); ++i) bad += dd[i] != 2 * vd[i];
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(buf.to_vector()[0], 0.0f);  // the element before the output was not touched
  ts::set_num_threads(0);
}

TEST(Where, BroadcastsAllThree) {
  auto c = ts::from_vector<bool>({true, false, true}, {3, 1});
  auto a = ts::arange<float>(4);
  auto b = ts::full<int32_t>({}, -1);
  auto w = ts::where(c, a, b);
  static_assert(std::is_same_v<decltype(w)::value_type, float>);
  std::vector<float> want = {0, 1, 2, 3, -1, -1, -1, -1, 0, 1, 2, 3};
  EXPECT_EQ(w.to_vector(), want);
}

TEST(Logical, AndOrXorNot) {
  auto a = ts::from_vector<int32_t>({0, 1, 2, 0});
  auto b = ts::from_vector<float>({0, 0, 3, 1});
  EXPECT_EQ(ts::logical_and(a, b).to_vector(), (std::vector<bool>{false, false, true, false}));
  EXPECT_EQ(ts::logical_or(a, b).to_vector(), (std::vector<bool>{false, true, true, true}));
  EXPECT_EQ(ts::logical_xor(a, b).to_vector(), (std::vector<bool>{false, true, false, true}));
  EXPECT_EQ(ts::logical_not(a).to_vector(), (std::vector<bool>{true, false, false, true}));
}

TEST(Pow, FloatAndInteger) {
  auto a = ts::from_vector<int32_t>({2, 3, -2, 1, 5});
  auto b = ts::from_vector<int32_t>({10, 3, 3, -4, 0});
  EXPECT_EQ(ts::pow(a, b).to_vector(), (std::vector<int32_t>{1024, 27, -8, 1, 1}));
  auto f = ts::pow(ts::from_vector<float>({4.0f, 2.0f}), 0.5);
  EXPECT_FLOAT_EQ(f.to_vector()[0], 2.0f);
  EXPECT_FLOAT_EQ(f.to_vector()[1], std::sqrt(2.0f));
}

// Integer edge cases (issue 37): every result is defined, wraps modulo 2^N as NumPy and PyTorch
// do, and nothing traps (INT32_MIN / -1 used to raise SIGFPE) or overflows a signed type (UB).
template <class T>
class IntegerEdges : public ::testing::Test {};
using IntTypes = ::testing::Types<int8_t, uint8_t, int32_t, int64_t>;
TYPED_TEST_SUITE(IntegerEdges, IntTypes);

// a op b computed modulo 2^64 and narrowed (the two's-complement wrap), for the expectations.
template <class T>
T wrap_add(T a, T b) {
  return static_cast<T>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}
template <class T>
T wrap_sub(T a, T b) {
  return static_cast<T>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
}
template <class T>
T wrap_mul(T a, T b) {
  return static_cast<T>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
}
template <class T>
T wrap_pow(T a, int e) {
  T r = 1;
  while (e-- > 0) r = wrap_mul(r, a);
  return r;
}

TYPED_TEST(IntegerEdges, DivAndFmodAtMinusOneAndZero) {
  using T = TypeParam;
  constexpr T lo = std::numeric_limits<T>::min(), hi = std::numeric_limits<T>::max();
  if constexpr (std::is_signed_v<T>) {
    // MIN / -1 wraps to MIN; MIN % -1 is 0; / 0 and % 0 give 0.
    auto a = ts::from_vector<T>({lo, lo, hi, 7, -7, lo, hi});
    auto b = ts::from_vector<T>({-1, 0, -1, 0, 2, 1, -1});
    EXPECT_EQ(ts::div(a, b).to_vector(), (std::vector<T>{lo, 0, T(-hi), 0, -3, lo, T(-hi)}));
    EXPECT_EQ(ts::fmod(a, b).to_vector(), (std::vector<T>{0, 0, 0, 0, -1, 0, 0}));
    // The scalar forms and compound assignment run the same functors.
    auto m = ts::from_vector<T>({lo, hi, -1});
    EXPECT_EQ(ts::div(m, -1).to_vector(), (std::vector<T>{lo, T(-hi), 1}));
    EXPECT_EQ(ts::fmod(m, -1).to_vector(), (std::vector<T>{0, 0, 0}));
    EXPECT_EQ(ts::div(lo, ts::from_vector<T>({-1})).to_vector(), (std::vector<T>{lo}));
    auto c = m.clone();
    c /= -1;
    EXPECT_EQ(c.to_vector(), (std::vector<T>{lo, T(-hi), 1}));
  } else {
    auto a = ts::from_vector<T>({hi, hi, 7, 0, 200});
    auto b = ts::from_vector<T>({hi, 0, 2, 0, 7});
    EXPECT_EQ(ts::div(a, b).to_vector(), (std::vector<T>{1, 0, 3, 0, 28}));
    EXPECT_EQ(ts::fmod(a, b).to_vector(), (std::vector<T>{0, 0, 1, 0, 4}));
  }
}

TYPED_TEST(IntegerEdges, NegAbsSignAtMinimum) {
  using T = TypeParam;
  constexpr T lo = std::numeric_limits<T>::min(), hi = std::numeric_limits<T>::max();
  if constexpr (std::is_signed_v<T>) {
    // -MIN and |MIN| wrap to MIN (NumPy, PyTorch).
    auto a = ts::from_vector<T>({lo, hi, 0, -1, 5});
    EXPECT_EQ(ts::neg(a).to_vector(), (std::vector<T>{lo, T(-hi), 0, 1, -5}));
    EXPECT_EQ((-a).to_vector(), (std::vector<T>{lo, T(-hi), 0, 1, -5}));
    EXPECT_EQ(ts::abs(a).to_vector(), (std::vector<T>{lo, hi, 0, 1, 5}));
    EXPECT_EQ(ts::sign(a).to_vector(), (std::vector<T>{-1, 1, 0, -1, 1}));
    EXPECT_EQ(ts::relu(a).to_vector(), (std::vector<T>{0, hi, 0, 0, 5}));
  } else {
    // Unsigned negation is modulo 2^N; abs is the identity.
    auto a = ts::from_vector<T>({0, 1, hi});
    EXPECT_EQ(ts::neg(a).to_vector(), (std::vector<T>{0, hi, 1}));
    EXPECT_EQ(ts::abs(a).to_vector(), (std::vector<T>{0, 1, hi}));
    EXPECT_EQ(ts::sign(a).to_vector(), (std::vector<T>{0, 1, 1}));
  }
}

TYPED_TEST(IntegerEdges, AddSubMulPowWrap) {
  using T = TypeParam;
  constexpr T lo = std::numeric_limits<T>::min(), hi = std::numeric_limits<T>::max();
  const T m1 = static_cast<T>(-1);  // -1, or the unsigned maximum
  const std::vector<T> va = {hi, lo, hi, lo, m1, 3}, vb = {1, 1, 2, m1, m1, 3};
  auto a = ts::from_vector<T>(va), b = ts::from_vector<T>(vb);
  std::vector<T> sum, diff, prod;
  for (size_t i = 0; i < va.size(); ++i) {
    sum.push_back(wrap_add(va[i], vb[i]));
    diff.push_back(wrap_sub(va[i], vb[i]));
    prod.push_back(wrap_mul(va[i], vb[i]));
  }
  EXPECT_EQ((a + b).to_vector(), sum);
  EXPECT_EQ((a - b).to_vector(), diff);
  EXPECT_EQ((a * b).to_vector(), prod);
  EXPECT_EQ((a + T(1)).to_vector()[0], lo);  // MAX + 1 wraps to MIN
  EXPECT_EQ((a - T(1)).to_vector()[1], hi);  // MIN - 1 wraps to MAX
  auto c = a.clone();
  c *= b;
  EXPECT_EQ(c.to_vector(), prod);
  // Integer powers wrap the same way as repeated multiplication.
  auto base = ts::from_vector<T>({hi, lo, 3, 3, m1, 2});
  auto e = ts::from_vector<T>({2, 3, 41, 5, 3, 0});
  EXPECT_EQ(ts::pow(base, e).to_vector(),
            (std::vector<T>{wrap_pow(hi, 2), wrap_pow(lo, 3), wrap_pow(T(3), 41), wrap_pow(T(3), 5),
                            wrap_pow(m1, 3), 1}));
  EXPECT_EQ(ts::pow(base, 2).to_vector()[0], wrap_pow(hi, 2));
}

TYPED_TEST(IntegerEdges, FloorCeilRoundAreExact) {
  // Integer inputs are already integral: no trip through double, which rounded INT64_MAX up to
  // 2^63 and then converted that out of range (INT64_MIN on x86).
  using T = TypeParam;
  constexpr T lo = std::numeric_limits<T>::min(), hi = std::numeric_limits<T>::max();
  const std::vector<T> v = {lo, hi, static_cast<T>(hi - 1), 0, static_cast<T>(lo + 1)};
  auto a = ts::from_vector<T>(v);
  EXPECT_EQ(ts::floor(a).to_vector(), v);
  EXPECT_EQ(ts::ceil(a).to_vector(), v);
  EXPECT_EQ(ts::round(a).to_vector(), v);
  if constexpr (sizeof(T) == 8) {
    const T odd = (T(1) << 53) + 1;  // not a double
    EXPECT_EQ(ts::round(ts::from_vector<T>({odd})).item(), odd);
  }
}

TEST(Promotion, Table) {
  static_assert(std::is_same_v<ts::promote_t<ts::half, float>, float>);
  static_assert(std::is_same_v<ts::promote_t<int8_t, float>, float>);
  static_assert(std::is_same_v<ts::promote_t<int8_t, ts::half>, ts::half>);
  static_assert(std::is_same_v<ts::promote_t<ts::half, ts::bfloat16>, float>);
  static_assert(std::is_same_v<ts::promote_t<ts::float8_e4m3, ts::float8_e5m2>, float>);
  static_assert(std::is_same_v<ts::promote_t<ts::float8_e4m3, ts::bfloat16>, ts::bfloat16>);
  static_assert(std::is_same_v<ts::promote_t<int8_t, uint8_t>, int32_t>);
  static_assert(std::is_same_v<ts::promote_t<int32_t, int64_t>, int64_t>);
  static_assert(std::is_same_v<ts::promote_t<bool, uint8_t>, uint8_t>);
  static_assert(std::is_same_v<ts::promote_t<float, double>, double>);
  auto r = ts::ones<ts::half>({3}) + ts::ones<float>({3});
  static_assert(std::is_same_v<decltype(r)::value_type, float>);
  auto i = ts::ones<int8_t>({2}) + ts::ones<uint8_t>({2});
  static_assert(std::is_same_v<decltype(i)::value_type, int32_t>);
  EXPECT_EQ(i.to_vector(), (std::vector<int32_t>{2, 2}));
}

TEST(Errors, BroadcastAndUndefined) {
  auto a = ts::zeros<float>({3, 4}), b = ts::zeros<float>({5});
  try {
    (void)(a + b);
    FAIL() << "no throw";
  } catch (const ts::shape_error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("add"), std::string::npos) << m;
    EXPECT_NE(m.find("[3, 4]"), std::string::npos) << m;
    EXPECT_NE(m.find("[5]"), std::string::npos) << m;
  }
  EXPECT_THROW(ts::maximum(a, b), ts::shape_error);
  EXPECT_THROW(ts::where(a > 0.0f, a, b), ts::shape_error);
  EXPECT_THROW(ts::add(a, a, ts::zeros<float>({4, 3})), ts::shape_error);
  ts::Tensor<float> undefined;
  EXPECT_THROW(ts::exp(undefined), ts::error);
  EXPECT_THROW(a + undefined, ts::error);
  EXPECT_THROW(ts::clamp(a, 2, 1), ts::error);
}

TEST(Threads, SameResultForAnyThreadCount) {
  ts::Generator g(9);
  auto x = ts::randn<float>({1 << 18}, g), y = ts::randn<float>({1 << 18}, g);
  ts::set_num_threads(1);
  auto a = ts::tanh(x) * y + x;
  ts::set_num_threads(2);
  auto b = ts::tanh(x) * y + x;
  ts::set_num_threads(0);
  EXPECT_EQ(a.to_vector(), b.to_vector());
}

}  // namespace

// Reductions: every op over every axis subset, keepdim, layouts, dtypes, against a double
// reference; accuracy of long sums, determinism across thread counts, NaN/Inf, bad axes.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <numeric>

#include "test_util.hpp"

namespace {
namespace ts = tessera;
using tt::layout;

/// Groups the elements of x (as double) by output position for reduction over `axes`.
std::vector<std::vector<double>> groups(const std::vector<double>& v, const ts::Shape& s,
                                        const std::vector<int>& axes) {
  std::vector<bool> red(s.rank(), axes.empty());
  for (int a : axes) red[a] = true;
  int64_t nout = 1;
  for (int d = 0; d < s.rank(); ++d)
    if (!red[d]) nout *= s[d];
  std::vector<std::vector<double>> g(static_cast<size_t>(nout));
  for (int64_t i = 0; i < s.numel(); ++i) {
    const auto idx = tt::unravel(i, s);
    int64_t o = 0;
    for (int d = 0; d < s.rank(); ++d)
      if (!red[d]) o = o * s[d] + idx[d];
    g[o].push_back(v[i]);
  }
  return g;
}

using ref_fn = double (*)(const std::vector<double>&);
double ref_sum(const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0); }
double ref_mean(const std::vector<double>& v) { return v.empty() ? NAN : ref_sum(v) / v.size(); }
double ref_prod(const std::vector<double>& v) {
  return std::accumulate(v.begin(), v.end(), 1.0, std::multiplies<>());
}
double ref_max(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }
double ref_min(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }
double ref_argmax(const std::vector<double>& v) {
  return double(std::max_element(v.begin(), v.end()) - v.begin());
}
double ref_argmin(const std::vector<double>& v) {
  return double(std::min_element(v.begin(), v.end()) - v.begin());
}
double ref_var(const std::vector<double>& v, double corr) {
  const double m = ref_mean(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return v.size() - corr > 0 ? s / (v.size() - corr) : NAN;
}
double ref_var1(const std::vector<double>& v) { return ref_var(v, 1); }
double ref_var0(const std::vector<double>& v) { return ref_var(v, 0); }
double ref_std1(const std::vector<double>& v) { return std::sqrt(ref_var(v, 1)); }
double ref_norm2(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x * x;
  return std::sqrt(s);
}
double ref_norm1(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += std::abs(x);
  return s;
}
double ref_norm3(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += std::pow(std::abs(x), 3);
  return std::cbrt(s);
}
double ref_norminf(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s = std::max(s, std::abs(x));
  return s;
}
double ref_lse(const std::vector<double>& v) {
  const double m = ref_max(v);
  double s = 0;
  for (double x : v) s += std::exp(x - m);
  return m + std::log(s);
}

std::vector<std::vector<int>> axis_subsets(int rank) {
  std::vector<std::vector<int>> out;
  for (int mask = 0; mask < (1 << rank); ++mask) {
    std::vector<int> a;
    for (int d = 0; d < rank; ++d)
      if (mask >> d & 1) a.push_back(d);
    out.push_back(a);
  }
  return out;
}

std::vector<ts::Shape> shapes() {
  return {{},     {1},       {5},       {17},         {33},     {812},     {3, 4},
          {1, 1}, {4, 1, 6}, {3, 4, 5}, {2, 3, 4, 5}, {7, 130}, {300, 19}, {2, 1, 3, 1, 2}};
}

template <class T>
class Reduce : public ::testing::Test {};
using ReduceTypes =
    ::testing::Types<float, double, ts::half, ts::bfloat16, int32_t, int8_t, uint8_t>;
TYPED_TEST_SUITE(Reduce, ReduceTypes);

/// The reduction op under test, type-erased: check_op's loops compile once per (input, result)
/// type pair, not once per op.
template <class T, class R>
using reduce_op =
    std::function<ts::Tensor<R, ts::cpu>(const ts::Tensor<T, ts::cpu>&, const ts::Axes&, bool)>;

template <class T, class R>
void check_op_erased(const char* name, const reduce_op<T, R>& op, ref_fn ref, double lo, double hi,
                     double tol, bool needs_nonempty) {
  ts::Generator g(17);
  for (const auto& s : shapes()) {
    for (layout l : {layout::contiguous, layout::transposed, layout::strided}) {
      auto x = tt::relayout(tt::random_tensor<T>(s, g, lo, hi), l);
      const auto dx = tt::to_doubles(x);
      for (const auto& axes : axis_subsets(s.rank())) {
        ts::Axes ax;
        for (int a : axes) ax.push_back(a - ((a & 1) ? s.rank() : 0));  // mix negative axes in
        for (bool keep : {false, true}) {
          auto got = op(x, ax, keep);
          auto gr = groups(dx, s, axes);
          // Expected shape.
          ts::Shape want_shape;
          for (int d = 0; d < s.rank(); ++d) {
            const bool r = axes.empty() || std::find(axes.begin(), axes.end(), d) != axes.end();
            if (!r)
              want_shape.push_back(s[d]);
            else if (keep)
              want_shape.push_back(1);
          }
          ASSERT_EQ(got.shape(), want_shape) << name << " " << s << " axes " << ax.to_string();
          std::vector<double> want;
          for (auto& v : gr) want.push_back(needs_nonempty && v.empty() ? NAN : ref(v));
          // Results stored in R: round the reference the same way.
          if constexpr (!std::is_integral_v<R>)
            for (auto& w : want) w = static_cast<double>(static_cast<R>(w));
          tt::expect_close(tt::to_doubles(got), want, tol,
                           std::string(name) + " " + s.to_string() + " axes " + ax.to_string() +
                               (keep ? " keepdim" : "") + " layout " + std::to_string(int(l)));
          if (::testing::Test::HasFailure()) return;
        }
      }
    }
  }
}

template <class T, class Op>
void check_op(const char* name, Op op, ref_fn ref, double lo, double hi, double tol,
              bool needs_nonempty) {
  using R = typename std::invoke_result_t<Op&, const ts::Tensor<T, ts::cpu>&, const ts::Axes&,
                                          bool>::value_type;
  check_op_erased<T, R>(name, reduce_op<T, R>(op), ref, lo, hi, tol, needs_nonempty);
}

TYPED_TEST(Reduce, AllOpsAllAxes) {
  using T = TypeParam;
  constexpr bool fl = ts::is_floating_v<T>;
  const double tol = fl ? std::max(tt::tolerance<T>(), 1e-5) : 1e-9;
  check_op<T>(
      "sum", [](auto& x, auto& a, bool k) { return ts::sum(x, a, k); }, ref_sum, -3, 3, tol, false);
  check_op<T>(
      "mean", [](auto& x, auto& a, bool k) { return ts::mean(x, a, k); }, ref_mean, -3, 3,
      fl ? tol : 1e-6, false);
  check_op<T>(
      "max", [](auto& x, auto& a, bool k) { return ts::max(x, a, k); }, ref_max, -3, 3, tol, true);
  check_op<T>(
      "min", [](auto& x, auto& a, bool k) { return ts::min(x, a, k); }, ref_min, -3, 3, tol, true);
  check_op<T>(
      "prod", [](auto& x, auto& a, bool k) { return ts::prod(x, a, k); }, ref_prod, fl ? 0.5 : 1,
      fl ? 1.5 : 1, std::max(tol, 1e-4), false);
  check_op<T>(
      "var", [](auto& x, auto& a, bool k) { return ts::var(x, a, k); }, ref_var1, -3, 3,
      std::max(tol, 1e-5) * 4, false);
  check_op<T>(
      "var0", [](auto& x, auto& a, bool k) { return ts::var(x, a, k, 0.0); }, ref_var0, -3, 3,
      std::max(tol, 1e-5) * 4, false);
  check_op<T>(
      "std", [](auto& x, auto& a, bool k) { return ts::std(x, a, k); }, ref_std1, -3, 3,
      std::max(tol, 1e-5) * 4, false);
  check_op<T>(
      "norm2", [](auto& x, auto& a, bool k) { return ts::norm(x, 2.0, a, k); }, ref_norm2, -3, 3,
      std::max(tol, 1e-5), false);
  check_op<T>(
      "norm1", [](auto& x, auto& a, bool k) { return ts::norm(x, 1.0, a, k); }, ref_norm1, -3, 3,
      std::max(tol, 1e-5), false);
  check_op<T>(
      "norm3", [](auto& x, auto& a, bool k) { return ts::norm(x, 3.0, a, k); }, ref_norm3, -3, 3,
      std::max(tol, 1e-5), false);
  check_op<T>(
      "norminf", [](auto& x, auto& a, bool k) { return ts::norm(x, INFINITY, a, k); }, ref_norminf,
      -3, 3, std::max(tol, 1e-5), false);
  check_op<T>(
      "logsumexp", [](auto& x, auto& a, bool k) { return ts::logsumexp(x, a, k); }, ref_lse, -3, 3,
      std::max(tol, 1e-5), false);
}

TYPED_TEST(Reduce, ArgmaxArgminEveryAxis) {
  using T = TypeParam;
  ts::Generator g(23);
  for (const auto& s : shapes()) {
    if (s.numel() == 0) continue;
    for (layout l : {layout::contiguous, layout::transposed}) {
      // Integer types have ties: the reference's max_element also returns the first.
      auto x = tt::relayout(tt::random_tensor<T>(s, g), l);
      const auto dx = tt::to_doubles(x);
      for (int d = 0; d < std::max(1, s.rank()); ++d) {
        for (bool keep : {false, true}) {
          auto gmax = ts::argmax(x, d, keep), gmin = ts::argmin(x, d, keep);
          static_assert(std::is_same_v<typename decltype(gmax)::value_type, int64_t>);
          std::vector<int> ax;
          if (s.rank()) ax = {d};
          auto gr = groups(dx, s, ax);
          std::vector<double> wmax, wmin;
          for (auto& v : gr) wmax.push_back(ref_argmax(v)), wmin.push_back(ref_argmin(v));
          tt::expect_close(tt::to_doubles(gmax), wmax, 0, "argmax " + s.to_string());
          tt::expect_close(tt::to_doubles(gmin), wmin, 0, "argmin " + s.to_string());
        }
      }
      // No axis: index into the flattened tensor.
      EXPECT_EQ(ts::argmax(x).item(), static_cast<int64_t>(ref_argmax(dx)));
      EXPECT_EQ(ts::argmin(x).item(), static_cast<int64_t>(ref_argmin(dx)));
    }
  }
}

TEST(ReduceAccuracy, LongFloatSumIsPairwiseAccurate) {
  // 2^24 + 1 values of 0.1f: naive float accumulation stalls at 2^21 or so; blocked pairwise
  // summation stays within a few ulps of the exact sum.
  const int64_t n = (int64_t{1} << 24) + 1;
  auto x = ts::full<float>({n}, 0.1f);
  const double exact = double(0.1f) * double(n);
  EXPECT_NEAR(ts::sum(x).item(), exact, exact * 1e-6);
  EXPECT_NEAR(ts::mean(x).item(), double(0.1f), 1e-7);
  // Column sums of a tall matrix use the column kernel; check it too.
  auto m = ts::full<float>({1 << 20, 16}, 0.1f);
  auto cs = ts::sum(m, {0}).to_vector();
  for (float v : cs) EXPECT_NEAR(v, double(0.1f) * (1 << 20), double(0.1f) * (1 << 20) * 1e-6);
}

TEST(ReduceAccuracy, Bfloat16AndHalfAccumulateInFloat) {
  auto b = ts::ones<ts::bfloat16>({100000});
  EXPECT_EQ(static_cast<float>(ts::sum(b).item()), static_cast<float>(ts::bfloat16(100000.0f)));
  EXPECT_EQ(static_cast<float>(ts::mean(b).item()), 1.0f);
  auto h = ts::full<ts::half>({4096}, ts::half(16.0f));
  EXPECT_TRUE(std::isinf(static_cast<float>(ts::sum(h).item())));  // 65536 overflows half
  EXPECT_EQ(static_cast<float>(ts::mean(h).item()), 16.0f);  // but the float accumulator did not
  auto hm = ts::full<ts::half>({3}, ts::half(65504.0f));
  EXPECT_EQ(static_cast<float>(ts::mean(hm).item()), 65504.0f);
}

TEST(ReduceDeterminism, SameBitsForAnyThreadCount) {
  ts::Generator g(31);
  auto x = ts::randn<float>({3, 1 << 20}, g);
  auto big = ts::randn<float>({1 << 22}, g);
  auto tall = ts::randn<float>({1 << 16, 40}, g);
  std::vector<std::vector<float>> r[2];
  for (int t : {1, 2}) {
    ts::set_num_threads(t);
    r[t - 1] = {ts::sum(x, {1}).to_vector(),          ts::sum(big).to_vector(),
                ts::sum(tall, {0}).to_vector(),       ts::var(big).to_vector(),
                ts::logsumexp(tall, {0}).to_vector(), ts::norm(x).to_vector()};
  }
  ts::set_num_threads(0);
  for (size_t i = 0; i < r[0].size(); ++i) EXPECT_EQ(r[0][i], r[1][i]) << "result " << i;
}

TEST(ReduceSpecial, NanInfAndEmpty) {
  const float nan = NAN, inf = INFINITY;
  auto x = ts::from_vector<float>({1, nan, 3, 7, inf, -inf, 2, 2}, {2, 4});
  auto s = ts::sum(x, {1}).to_vector();
  EXPECT_TRUE(std::isnan(s[0]));
  EXPECT_TRUE(std::isnan(s[1]));  // inf + -inf
  EXPECT_TRUE(std::isnan(ts::max(x, {1}).to_vector()[0]));
  EXPECT_EQ(ts::max(x, {1}).to_vector()[1], inf);
  EXPECT_EQ(ts::min(x, {1}).to_vector()[1], -inf);
  EXPECT_EQ(ts::argmax(x, 1).to_vector()[0], 1);  // NaN counts as the maximum
  EXPECT_EQ(ts::argmin(x, 1).to_vector()[0], 1);
  EXPECT_EQ(ts::argmax(x, 1).to_vector()[1], 0);
  auto l = ts::logsumexp(ts::full<float>({3}, -inf)).item();
  EXPECT_EQ(l, -inf);
  EXPECT_EQ(ts::logsumexp(ts::from_vector<float>({1, inf})).item(), inf);
  EXPECT_NEAR(ts::logsumexp(ts::from_vector<float>({1000, 1000})).item(), 1000 + std::log(2.0),
              1e-3);
  // Empty reductions: identities, or NaN for mean, or an error where there is no identity.
  auto e = ts::zeros<float>({1, 0, 3});
  EXPECT_EQ(ts::sum(e).item(), 0.0f);
  EXPECT_EQ(ts::prod(e).item(), 1.0f);
  EXPECT_TRUE(std::isnan(ts::mean(e).item()));
  EXPECT_EQ(ts::sum(e, {1}).shape(), (ts::Shape{1, 3}));
  EXPECT_EQ(ts::sum(e, {2}).shape(), (ts::Shape{1, 0}));
  EXPECT_EQ(ts::max(e, {2}).shape(), (ts::Shape{1, 0}));  // nothing reduced to nothing: fine
  EXPECT_THROW(ts::max(e), ts::shape_error);
  EXPECT_THROW(ts::argmax(e), ts::shape_error);
  EXPECT_THROW(ts::min(e, {1}), ts::shape_error);
  // Scalars reduce to themselves.
  auto sc = ts::full<float>({}, 4.0f);
  EXPECT_EQ(ts::sum(sc).item(), 4.0f);
  EXPECT_EQ(ts::sum(sc, {0}).item(), 4.0f);
  EXPECT_EQ(ts::argmax(sc).item(), 0);
  // Integer sums widen to int64 and do not wrap.
  auto i8 = ts::full<int8_t>({1000}, int8_t(100));
  auto is = ts::sum(i8);
  static_assert(std::is_same_v<decltype(is)::value_type, int64_t>);
  EXPECT_EQ(is.item(), 100000);
  auto bs = ts::sum(ts::from_vector<bool>({true, false, true}));
  EXPECT_EQ(bs.item(), 2);
}

// Integer sums and products accumulate in int64 and wrap there, as NumPy's do (they were
// signed overflow, undefined behaviour, which the sanitizer build reports).
TEST(ReduceSpecial, IntegerSumAndProdWrapInInt64) {
  constexpr int64_t max = std::numeric_limits<int64_t>::max(),
                    min = std::numeric_limits<int64_t>::min();
  const auto x = ts::from_vector<int64_t>({max, 1, min, -1}, {2, 2});
  EXPECT_EQ(ts::sum(x, {1}).to_vector(), (std::vector<int64_t>{min, max}));
  EXPECT_EQ(ts::prod(ts::from_vector<int64_t>({max, 2})).item(), -2);
  EXPECT_EQ(ts::prod(ts::from_vector<int64_t>({min, -1})).item(), min);
  // int32 inputs accumulate in int64: no wrap at 2^31.
  const auto y = ts::from_vector<int32_t>({std::numeric_limits<int32_t>::max(), 1});
  EXPECT_EQ(ts::sum(y).item(), int64_t{1} << 31);
}

TEST(ReduceSpecial, NanInsideVectorChunks) {
  // Long enough for the SIMD chunk path; the NaN sits in a chunk body, a chunk tail and a
  // block boundary in turn.
  for (int64_t pos : {int64_t{0}, int64_t{77}, int64_t{255}, int64_t{4999}, int64_t{65536}}) {
    auto v = ts::ones<float>({70000});
    v.at({pos}) = NAN;
    EXPECT_TRUE(std::isnan(ts::max(v).item())) << pos;
    EXPECT_TRUE(std::isnan(ts::min(v).item())) << pos;
    EXPECT_TRUE(std::isnan(ts::sum(v).item())) << pos;
    EXPECT_TRUE(std::isnan(ts::norm(v).item())) << pos;
    EXPECT_TRUE(std::isnan(ts::norm(v, INFINITY).item())) << pos;
    EXPECT_EQ(ts::argmax(v).item(), pos);
    v.at({pos}) = -INFINITY;
    EXPECT_EQ(ts::min(v).item(), -INFINITY) << pos;
    EXPECT_EQ(ts::max(v).item(), 1.0f) << pos;
    EXPECT_EQ(ts::norm(v, INFINITY).item(), INFINITY) << pos;
    EXPECT_EQ(ts::argmin(v).item(), pos);
  }
}

// Reductions over the rows of a wide matrix take the column path, whose SIMD reducers keep a
// vector of columns in a register down each block of rows. A NaN in a vector's columns or in
// the scalar tail (37 columns) makes exactly its column NaN, in the first, a middle or the last
// block of rows; the other columns equal the same reduction along contiguous rows.
TEST(ReduceSpecial, NanInColumnReductions) {
  ts::Generator g(41);
  const auto base = ts::rand<float>({45, 37}, g, -3, 3);
  const auto rows_of = [](const ts::Tensor<float>& t) { return t.transpose(0, 1).contiguous(); };
  for (int64_t col : {int64_t{0}, int64_t{9}, int64_t{35}})
    for (int64_t row : {int64_t{0}, int64_t{20}, int64_t{44}}) {
      auto x = base.clone();
      x.at({row, col}) = NAN;
      const std::string at = std::to_string(row) + ", " + std::to_string(col);
      const auto xt = rows_of(x);
      for (const auto& [name, got, want] :
           {std::tuple{"max", ts::max(x, {0}), ts::max(xt, {1})},
            std::tuple{"min", ts::min(x, {0}), ts::min(xt, {1})},
            std::tuple{"norminf", ts::norm(x, INFINITY, {0}), ts::norm(xt, INFINITY, {1})},
            std::tuple{"sum", ts::sum(x, {0}), ts::sum(xt, {1})}}) {
        const auto gv = got.to_vector(), wv = want.to_vector();
        for (int64_t j = 0; j < 37; ++j) {
          if (j == col) {
            EXPECT_TRUE(std::isnan(gv[j])) << name << " NaN at " << at;
          } else if (std::string(name) == "sum") {
            EXPECT_NEAR(gv[j], wv[j], 1e-4) << name << " column " << j << " NaN at " << at;
          } else {
            EXPECT_EQ(gv[j], wv[j]) << name << " column " << j << " NaN at " << at;
          }
        }
      }
    }
}

// softmax and log_softmax of rows holding +inf, only -inf, or NaN are NaN throughout, as in
// PyTorch (the maximum is inf, so x - max is NaN for it and -inf for the rest: the sum is NaN).
// softmax([inf, 0]) used to give [nan, 0], and log_softmax [nan, -inf].
template <class T>
void check_softmax_special_rows() {
  const float inf = INFINITY, nan = NAN;
  const std::vector<float> rows = {inf, 0,   -inf, -inf, inf,  -inf, inf,
                                   inf, nan, 0,    0,    -inf, 100,  99};
  std::vector<T> v;
  for (float r : rows) v.push_back(static_cast<T>(r));
  const auto x = ts::from_vector<T>(v, {7, 2});
  const double e1 = 1 / (1 + std::exp(-1.0));  // softmax([100, 99])[0]
  for (bool transposed : {false, true}) {
    // The same rows along dim 0 of a transposed copy: a strided reduction.
    const auto xt = transposed ? x.transpose(0, 1).contiguous().transpose(0, 1) : x;
    const auto p = tt::to_doubles(ts::softmax(xt, 1)), lp = tt::to_doubles(ts::log_softmax(xt, 1));
    for (int i = 0; i < 10; ++i) {  // the first five rows: NaN throughout
      EXPECT_TRUE(std::isnan(p[i])) << "softmax element " << i << " = " << p[i];
      EXPECT_TRUE(std::isnan(lp[i])) << "log_softmax element " << i << " = " << lp[i];
    }
    EXPECT_EQ(p[10], 1);  // [0, -inf]
    EXPECT_EQ(p[11], 0);
    EXPECT_EQ(lp[10], 0);
    EXPECT_EQ(lp[11], -INFINITY);
    EXPECT_NEAR(p[12], e1, 1e-2);  // finite rows still shift by the maximum
    EXPECT_NEAR(lp[13], std::log(1 - e1), 1e-2);
  }
}
TEST(Softmax, RowsWithInfOrNanAreNanAsInPyTorch) {
  check_softmax_special_rows<float>();
  check_softmax_special_rows<double>();
  check_softmax_special_rows<ts::half>();
  check_softmax_special_rows<ts::bfloat16>();
}

TEST(ReduceErrors, BadAxes) {
  auto x = ts::zeros<float>({2, 3});
  try {
    (void)ts::sum(x, {2});
    FAIL() << "no throw";
  } catch (const ts::index_error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("sum"), std::string::npos) << m;
    EXPECT_NE(m.find("axis 2"), std::string::npos) << m;
  }
  EXPECT_THROW(ts::mean(x, {-3}), ts::index_error);
  EXPECT_THROW(ts::sum(x, {0, 0}), ts::index_error);
  EXPECT_THROW(ts::sum(x, {1, -1}), ts::index_error);
  EXPECT_THROW(ts::argmax(x, 5), ts::index_error);
  EXPECT_THROW(ts::norm(x, -1.0), ts::error);
  ts::Tensor<float> u;
  EXPECT_THROW(ts::sum(u), ts::error);
}

}  // namespace

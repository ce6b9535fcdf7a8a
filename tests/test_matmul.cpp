// Matrix multiplication: matmul, gemm and linear against references computed with plain loops in
// long double. A netlib-style matrix of sizes around the micro-tile and the cache blocks, every
// transpose combination, alpha/beta, a padded C whose padding must survive bit for bit, the rules
// for NaN in operands that must not be read; every dtype (low precision rounded once, exact int8
// products into int32), batching and broadcasting, the out= form with aliasing, thread counts,
// random shapes and strides, and the errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <tessera/ops/packed_linear.hpp>
#include <vector>

#include "test_util.hpp"

namespace {
namespace ts = tessera;

// ---- references ---------------------------------------------------------------------------

/// The reference of a matmul with NumPy semantics: the exact-ish sums (long double) and the sums
/// of |a||b| that scale the error bound, over the result shape.
struct product_ref {
  ts::Shape shape;
  int64_t k = 0;
  std::vector<long double> sum;
  std::vector<double> abs;
};

/// Plain-loop product of row-major a [m, k] and b [k, n] (offsets into the flat vectors), added
/// into sum/abs at out_off.
void ref_block(const std::vector<double>& a, int64_t a_off, const std::vector<double>& b,
               int64_t b_off, int64_t m, int64_t n, int64_t k, product_ref& r, int64_t out_off) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p) {
      const long double av = a[a_off + i * k + p];
      const double aa = std::abs(a[a_off + i * k + p]);
      for (int64_t j = 0; j < n; ++j) {
        r.sum[out_off + i * n + j] += av * b[b_off + p * n + j];
        r.abs[out_off + i * n + j] += aa * std::abs(b[b_off + p * n + j]);
      }
    }
}

/// Reference of matmul(a, b): 1-D operands promoted as NumPy does, batch dims broadcast.
template <class TA, class TB>
product_ref reference_matmul(const ts::Tensor<TA>& a, const ts::Tensor<TB>& b) {
  ts::Shape sa = a.shape(), sb = b.shape();
  const bool a1 = sa.rank() == 1, b1 = sb.rank() == 1;
  if (a1) sa = ts::Shape{1, sa[0]};
  if (b1) sb = ts::Shape{sb[0], 1};
  ts::Shape ba, bb;
  for (int d = 0; d < sa.rank() - 2; ++d) ba.push_back(sa[d]);
  for (int d = 0; d < sb.rank() - 2; ++d) bb.push_back(sb[d]);
  const ts::Shape batch = ts::broadcast_shapes(ba, bb);
  const int64_t m = sa[sa.rank() - 2], k = sa[sa.rank() - 1], n = sb[sb.rank() - 1];
  product_ref r;
  r.shape = batch;
  if (!a1) r.shape.push_back(m);
  if (!b1) r.shape.push_back(n);
  r.k = k;
  r.sum.assign(static_cast<size_t>(batch.numel() * m * n), 0.0L);
  r.abs.assign(r.sum.size(), 0.0);
  const auto da = tt::to_doubles(a), db = tt::to_doubles(b);
  for (int64_t bi = 0; bi < batch.numel(); ++bi) {
    const auto idx = tt::unravel(bi, batch);
    const int64_t ia = tt::broadcast_source(idx, ba), ib = tt::broadcast_source(idx, bb);
    ref_block(da, ia * m * k, db, ib * k * n, m, n, k, r, bi * m * n);
  }
  return r;
}

/// Precision (significand bits, implicit one included) and minimum normal exponent of T.
template <class T>
constexpr std::pair<int, int> format_of() {
  if constexpr (std::is_same_v<T, float>)
    return {24, -126};
  else if constexpr (std::is_same_v<T, ts::half>)
    return {11, -14};
  else if constexpr (std::is_same_v<T, ts::bfloat16>)
    return {8, -126};
  else if constexpr (std::is_same_v<T, ts::float8_e4m3>)
    return {4, -6};
  else if constexpr (std::is_same_v<T, ts::float8_e5m2>)
    return {3, -14};
  else
    return {53, -1022};
}
/// Spacing of T's values at magnitude x (the subnormal spacing below the normal range).
template <class T>
double ulp_of(double x) {
  const auto [p, emin] = format_of<T>();
  const int e = x == 0 || !std::isfinite(x) ? emin : std::max(std::ilogb(x), emin);
  return std::ldexp(1.0, e - (p - 1));
}

/// Machine epsilon of the accumulation type: double for double, 0 for the exact int32
/// accumulation of 8-bit integers, float otherwise.
template <class TA, class TB>
double acc_eps() {
  using R = ts::matmul_t<TA, TB>;
  if constexpr (std::is_same_v<R, double>)
    return std::numeric_limits<double>::epsilon();
  else if constexpr (std::is_integral_v<R>)
    return 0.0;
  else
    return std::numeric_limits<float>::epsilon();
}

constexpr double bound_c = 2.0;  // times machine epsilon: 4 units of roundoff per operation

/// got (row-major values of a result stored in Tout) against r. Floating: |got - want| <=
/// c*(k+2)*eps_acc*(|A||B|)_ij, where want is the reference rounded to Tout and one ulp of Tout is
/// allowed when Tout is narrower than double (the accumulated value may sit on the other side of
/// a rounding boundary). Integers: exact. Returns whether every element passed; reports at most 4.
template <class Tout>
bool check_values(const std::vector<double>& got, const product_ref& r, double eps_acc,
                  const std::string& what) {
  EXPECT_EQ(got.size(), r.sum.size()) << what;
  if (got.size() != r.sum.size()) return false;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double ref = static_cast<double>(r.sum[i]);
    double want = ref, tol = 0;
    if constexpr (std::is_integral_v<Tout>) {
      want = static_cast<double>(r.sum[i]);
    } else {
      const double delta = bound_c * static_cast<double>(r.k + 2) * eps_acc * r.abs[i];
      tol = delta;
      if constexpr (!std::is_same_v<Tout, double>) {
        want = static_cast<double>(static_cast<float>(static_cast<Tout>(ref)));
        tol += ulp_of<Tout>(std::max(std::abs(want), std::abs(ref) + delta));
      }
    }
    const bool ok = !std::isnan(got[i]) && std::abs(got[i] - want) <= tol;
    if (!ok && ++bad <= 4) {
      const auto idx = tt::unravel(static_cast<int64_t>(i), r.shape);
      std::ostringstream os;
      os << "[";
      for (size_t d = 0; d < idx.size(); ++d) os << (d ? ", " : "") << idx[d];
      os << "]";
      ADD_FAILURE() << what << ": element " << os.str() << " of " << r.shape << " (k=" << r.k
                    << "): got " << got[i] << ", want " << want << " (tolerance " << tol
                    << ", diff " << got[i] - want << ")";
    }
  }
  if (bad > 4) ADD_FAILURE() << what << ": " << bad << " bad elements in all";
  return bad == 0;
}

/// Checks matmul(a, b) (shape, dtype, values) and returns whether it passed.
template <class TA, class TB>
bool check_matmul(const ts::Tensor<TA>& a, const ts::Tensor<TB>& b, const std::string& what) {
  auto got = ts::matmul(a, b);
  using R = typename decltype(got)::value_type;
  static_assert(std::is_same_v<R, ts::matmul_t<TA, TB>>);
  const auto r = reference_matmul(a, b);
  EXPECT_EQ(got.shape(), r.shape) << what;
  if (got.shape() != r.shape) return false;
  return check_values<R>(tt::to_doubles(got), r, acc_eps<TA, TB>(), what);
}

std::string shape_str(const auto& t) {
  std::ostringstream os;
  os << t.shape() << " strides " << t.strides();
  return os.str();
}

// ---- operands with odd layouts --------------------------------------------------------------

/// A [r, c] operand with random values in [lo, hi) reached through one of several layouts:
/// 0 contiguous, 1 transposed view of a contiguous [c, r], 2 every other column of [r, 2c],
/// 3 transposed view with both strides non-unit, 4 a window into a padded buffer (leading
/// dimension > c), 5 a row broadcast down the rows (stride 0), 6 a column broadcast (stride 0).
template <class T>
ts::Tensor<T> make_operand(int64_t r, int64_t c, int kind, ts::Generator& g, double lo = -3,
                           double hi = 3) {
  auto rnd = [&](const ts::Shape& s) { return tt::random_tensor<T>(s, g, lo, hi); };
  switch (kind) {
    case 1:
      return rnd({c, r}).transpose(0, 1);
    case 2:
      return rnd({r, 2 * c}).slice(1, 0, 2 * c, 2);
    case 3:
      return rnd({c, 2 * r}).slice(1, 0, 2 * r, 2).transpose(0, 1);
    case 4:
      return rnd({r + 2, c + 7}).slice(0, 1, 1 + r).slice(1, 3, 3 + c);
    case 5:
      return rnd({1, c}).expand({r, c});
    case 6:
      return rnd({r, 1}).expand({r, c});
    default:
      return rnd({r, c});
  }
}
constexpr int operand_kinds = 7;

/// C as an [m, n] window of a larger buffer (row-major with leading dimension n + 5, or
/// column-major with leading dimension m + 5); everything outside the window is padding.
template <class T>
struct padded {
  ts::Tensor<T> buf, view;
  static T pad() { return T(-1e10); }
  padded(int64_t m, int64_t n, bool col_major) {
    if (!col_major) {
      buf = ts::full<T>({m + 3, n + 5}, pad());
      view = buf.slice(0, 1, 1 + m).slice(1, 2, 2 + n);
    } else {
      buf = ts::full<T>({n + 3, m + 5}, pad());
      view = buf.slice(0, 1, 1 + n).slice(1, 2, 2 + m).transpose(0, 1);
    }
  }
  /// Every buffer element outside the window still holds pad(), bit for bit.
  bool padding_intact(const std::string& what) const {
    const auto v = buf.to_vector();
    std::vector<bool> inside(v.size(), false);
    const int64_t base = view.numel() ? view.offset() - buf.offset() : 0;
    for (int64_t i = 0; i < view.size(0); ++i)
      for (int64_t j = 0; j < view.size(1); ++j)
        inside[static_cast<size_t>(base + i * view.stride(0) + j * view.stride(1))] = true;
    const T p = pad();
    int bad = 0;
    for (size_t i = 0; i < v.size(); ++i)
      if (!inside[i] && std::memcmp(&v[i], &p, sizeof(T)) != 0 && ++bad <= 3)
        ADD_FAILURE() << what << ": padding element " << i << " of buffer " << buf.shape()
                      << " changed to " << static_cast<double>(v[i]);
    return bad == 0;
  }
};

// ---- gemm against the reference ---------------------------------------------------------------

/// c_after against alpha*a*b + beta*c_before within c*(k+2)*eps*(|alpha|(|A||B|)_ij +
/// |beta*C_ij|). The product is left out of the reference when alpha == 0 and C when beta == 0
/// (their operands may hold NaN that must not be read). Returns whether all passed.
template <class T>
bool check_gemm(const std::vector<double>& got, const std::vector<double>& a,
                const std::vector<double>& b, const std::vector<double>& c0, int64_t m, int64_t n,
                int64_t k, double alpha, double beta, const std::string& what) {
  const double eps = std::numeric_limits<T>::epsilon();
  product_ref r;
  r.shape = ts::Shape{m, n};
  r.k = k;
  r.sum.assign(static_cast<size_t>(m * n), 0.0L);
  r.abs.assign(r.sum.size(), 0.0);
  if (alpha != 0) ref_block(a, 0, b, 0, m, n, k, r, 0);
  int bad = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const size_t e = static_cast<size_t>(i * n + j);
      long double want = 0;
      double mag = 0;
      if (alpha != 0)
        want += static_cast<long double>(alpha) * r.sum[e], mag += std::abs(alpha) * r.abs[e];
      if (beta != 0) want += static_cast<long double>(beta) * c0[e], mag += std::abs(beta * c0[e]);
      const double w = static_cast<double>(want);
      const double tol = bound_c * static_cast<double>(k + 2) * eps * mag;
      if ((std::isnan(got[e]) || std::abs(got[e] - w) > tol) && ++bad <= 3)
        ADD_FAILURE() << what << ": C(" << i << ", " << j << ") got " << got[e] << ", want " << w
                      << " (tolerance " << tol << ", diff " << got[e] - w << ")";
    }
  if (bad > 3) ADD_FAILURE() << what << ": " << bad << " bad elements in all";
  return bad == 0;
}

struct gemm_case {
  int64_t m, n, k;
  bool ta, tb, c_col;
  double alpha, beta;
};
std::string describe(const gemm_case& c) {
  std::ostringstream os;
  os << "m=" << c.m << " n=" << c.n << " k=" << c.k << " A" << (c.ta ? "^T" : "") << " B"
     << (c.tb ? "^T" : "") << " C " << (c.c_col ? "col-major" : "row-major") << " alpha=" << c.alpha
     << " beta=" << c.beta;
  return os.str();
}

/// One netlib-style gemm: A and B contiguous or transposed views (NaN everywhere when alpha is
/// 0), C a padded window (NaN everywhere when beta is 0). Returns whether it passed.
template <class T>
bool run_gemm_case(const gemm_case& gc, ts::Generator& g) {
  const std::string what = std::string(ts::dtype_name<T>) + " gemm " + describe(gc);
  const T nan = std::numeric_limits<T>::quiet_NaN();
  auto A = make_operand<T>(gc.m, gc.k, gc.ta ? 1 : 0, g);
  auto B = make_operand<T>(gc.k, gc.n, gc.tb ? 1 : 0, g);
  if (gc.alpha == 0) A.fill_(nan), B.fill_(nan);
  padded<T> C(gc.m, gc.n, gc.c_col);
  if (gc.beta == 0)
    C.view.fill_(nan);
  else
    C.view.copy_(tt::random_tensor<T>({gc.m, gc.n}, g));
  const auto a = tt::to_doubles(A), b = tt::to_doubles(B), c0 = tt::to_doubles(C.view);
  ts::gemm(gc.alpha, A, B, gc.beta, C.view);
  const bool ok =
      check_gemm<T>(tt::to_doubles(C.view), a, b, c0, gc.m, gc.n, gc.k, gc.alpha, gc.beta, what);
  return C.padding_intact(what) && ok;
}

template <class T>
int64_t tile_mr() {
  return static_cast<int64_t>(TT_IN_ACTIVE_PASS(detail::gemm_tile<T>::mr));
}
template <class T>
int64_t tile_nr() {
  return static_cast<int64_t>(TT_IN_ACTIVE_PASS(detail::gemm_tile<T>::nr));
}

/// {0, 1, 2, 3, 5, 9} and the sizes around the micro-tile.
template <class T>
std::vector<int64_t> netlib_sizes() {
  const int64_t mr = tile_mr<T>(), nr = tile_nr<T>();
  std::set<int64_t> s = {0, 1, 2, 3, 5, 9, mr - 1, mr, mr + 1, nr - 1, nr, nr + 1};
  s.erase(-1);
  return {s.begin(), s.end()};
}

/// Runs cases until 10 of them have failed.
template <class T>
void run_cases(const std::vector<gemm_case>& cases, ts::Generator& g) {
  int failed = 0;
  for (const auto& c : cases)
    if (!run_gemm_case<T>(c, g) && ++failed >= 10) {
      ADD_FAILURE() << "stopping after 10 failing cases";
      return;
    }
}

template <class T>
class GemmNetlib : public ::testing::Test {};
using GemmTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(GemmNetlib, GemmTypes);

TYPED_TEST(GemmNetlib, TileSizesAllTransposes) {
  // Every (m, n, k) from the size set, every transpose combination, alpha = 0.7, beta = 1.3.
  using T = TypeParam;
  const auto sizes = netlib_sizes<T>();
  ts::Generator g(101);
  std::vector<gemm_case> cases;
  for (int64_t m : sizes)
    for (int64_t n : sizes)
      for (int64_t k : sizes)
        for (int t = 0; t < 4; ++t)
          cases.push_back({m, n, k, bool(t & 1), bool(t & 2), false, 0.7, 1.3});
  run_cases<T>(cases, g);
}

TYPED_TEST(GemmNetlib, AlphaBetaCombinations) {
  // Every alpha in {0, 1, 0.7} with every beta in {0, 1, 1.3} on a smaller size set, with C
  // row- and column-major; NaN fills A and B when alpha == 0 and C when beta == 0.
  using T = TypeParam;
  const int64_t mr = tile_mr<T>(), nr = tile_nr<T>();
  std::set<int64_t> ss = {0, 1, 2, mr, mr + 1, nr + 1};
  const std::vector<int64_t> sizes(ss.begin(), ss.end());
  ts::Generator g(202);
  std::vector<gemm_case> cases;
  for (double alpha : {0.0, 1.0, 0.7})
    for (double beta : {0.0, 1.0, 1.3})
      for (int64_t m : sizes)
        for (int64_t n : sizes)
          for (int64_t k : sizes)
            for (int t = 0; t < 8; ++t)
              cases.push_back({m, n, k, bool(t & 1), bool(t & 2), bool(t & 4), alpha, beta});
  run_cases<T>(cases, g);
}

TYPED_TEST(GemmNetlib, CacheBlockBoundaries) {
  // Sizes around kc, mc and nc, one dimension at a time with the others small, with every
  // transpose combination; then two or three dimensions past their blocks at once in one layout
  // each (mc is large on big-L3 machines, so the products over all of mc, nc and kc are kept to
  // a few tens of millions of multiply-adds: the reference is a plain loop).
  using T = TypeParam;
  const int64_t kc = TT_IN_ACTIVE_PASS(detail::gemm_blocks<T>().kc),
                mc = TT_IN_ACTIVE_PASS(detail::gemm_blocks<T>().mc),
                nc = TT_IN_ACTIVE_PASS(detail::gemm_blocks<T>().nc), mr = tile_mr<T>(),
                nr = tile_nr<T>();
  ASSERT_GT(kc, 0);
  ASSERT_GT(mc, 0);
  ASSERT_GT(nc, 0);
  const std::vector<std::array<int64_t, 3>> shapes = {
      {mr + 1, nr + 1, kc - 1}, {mr + 1, nr + 1, kc},
      {mr + 1, nr + 1, kc + 1}, {2 * mr + 1, nr - 1, 2 * kc + 1},
      {mc - 1, nr + 1, 9},      {mc, nr + 1, 9},
      {mc + 1, nr + 1, 9},      {2 * mc + 1, 3, 5},
      {3, nc - 1, 5},           {3, nc, 5},
      {mr + 1, nc + 1, 9},      {2, 2 * nc + 1, 3}};
  ts::Generator g(303);
  std::vector<gemm_case> cases;
  for (const auto& s : shapes)
    for (int t = 0; t < 4; ++t)
      cases.push_back({s[0], s[1], s[2], bool(t & 1), bool(t & 2), false, 0.7, 1.3});
  cases.push_back({mc + 1, nr + 1, kc + 1, true, false, false, 0.7, 1.3});
  cases.push_back({mc + 1, nr - 1, kc + 1, false, true, true, 1.0, 0.0});
  cases.push_back({mr + 1, nc + 1, kc + 1, false, false, false, 0.7, 0.0});
  cases.push_back({3 * mr - 1, nc + 1, kc + 1, true, true, true, 0.7, 1.3});
  cases.push_back({mc + 1, nc + 1, 2, false, false, false, 0.7, 1.3});
  cases.push_back({mc + 1, nc + 1, 3, true, true, true, 1.0, 0.0});
  SCOPED_TRACE("kc=" + std::to_string(kc) + " mc=" + std::to_string(mc) +
               " nc=" + std::to_string(nc));
  run_cases<T>(cases, g);
}

TEST(GemmNetlib, BlockParametersAreSane) {
  // Every dtype the CPU kernel has tiles for reports positive tiles and blocks that are whole
  // multiples of the tile where a packing scheme needs it.
  auto check = [](auto tag, const char* name) {
    using T = decltype(tag);
    const int64_t kc = TT_IN_ACTIVE_PASS(detail::gemm_blocks<T>().kc),
                  mc = TT_IN_ACTIVE_PASS(detail::gemm_blocks<T>().mc),
                  nc = TT_IN_ACTIVE_PASS(detail::gemm_blocks<T>().nc);
    EXPECT_GT(tile_mr<T>(), 0) << name;
    EXPECT_GT(tile_nr<T>(), 0) << name;
    EXPECT_GT(kc, 0) << name;
    EXPECT_GE(mc, tile_mr<T>()) << name;
    EXPECT_GE(nc, tile_nr<T>()) << name;
  };
  check(float{}, "float");
  check(double{}, "double");
  check(int32_t{}, "int32");
}

// ---- every dtype ------------------------------------------------------------------------------

template <class T>
class MatmulLowp : public ::testing::Test {};
using LowpTypes = ::testing::Types<ts::half, ts::bfloat16, ts::float8_e4m3, ts::float8_e5m2>;
TYPED_TEST_SUITE(MatmulLowp, LowpTypes);

TYPED_TEST(MatmulLowp, RoundedOnceFromFloatAccumulation) {
  using T = TypeParam;
  static_assert(std::is_same_v<ts::matmul_t<T, T>, T>);
  const bool fp8 = sizeof(T) == 1;
  const double lo = fp8 ? -2 : -3, hi = fp8 ? 2 : 3;
  const int64_t mr = tile_mr<float>(), nr = tile_nr<float>();
  const std::vector<std::array<int64_t, 3>> shapes = {
      {1, 1, 1}, {3, 5, 7}, {mr + 1, nr + 1, 33}, {17, 19, 40}, {2, 3, 0}, {mr, 2 * nr - 1, 64}};
  ts::Generator g(404);
  for (const auto& s : shapes)
    for (int t = 0; t < 4; ++t) {
      const std::string what = std::string(ts::dtype_name<T>) + " m=" + std::to_string(s[0]) +
                               " n=" + std::to_string(s[1]) + " k=" + std::to_string(s[2]) +
                               " transposes " + std::to_string(t);
      auto a = make_operand<T>(s[0], s[2], t & 1, g, lo, hi);
      auto b = make_operand<T>(s[2], s[1], (t & 2) ? 1 : 0, g, lo, hi);
      if (!check_matmul(a, b, what)) return;
      // The out= form into float: only the float accumulation's error.
      auto out = ts::full<float>({s[0], s[1]}, NAN);
      ts::matmul(a, b, out);
      if (!check_values<float>(tt::to_doubles(out), reference_matmul(a, b),
                               std::numeric_limits<float>::epsilon(), what + " out=float"))
        return;
    }
  // Batched with a broadcast operand.
  auto a = tt::random_tensor<T>({2, 5, 9}, g, lo, hi);
  auto b = tt::random_tensor<T>({9, 6}, g, lo, hi);
  check_matmul(a, b, std::string(ts::dtype_name<T>) + " batched");
}

TEST(MatmulFloat8, EveryCodeConvertsExactlyWhilePacking) {
  // B holds all 256 codes of an 8-bit float in one row (rows of B contiguous: the packing's
  // vector conversion on x86; transposed: its per-element path), A picks that row: each result
  // is the code's value, NaN where the code is NaN.
  const auto check = [](auto tag, const char* name) {
    using T = decltype(tag);
    std::vector<T> codes(256);
    for (int c = 0; c < 256; ++c) codes[c] = T::from_bits(static_cast<uint8_t>(c));
    auto b = ts::zeros<T>({2, 256});
    b.select(0, 0).copy_(ts::from_vector<T>(codes));
    const auto a = ts::from_vector<float>({1, 0}).reshape({1, 2});
    for (bool transposed : {false, true}) {
      const auto bb = transposed ? b.transpose(0, 1).contiguous().transpose(0, 1) : b;
      const auto got = ts::matmul(a, bb).to_vector();
      ASSERT_EQ(got.size(), 256u);
      for (int c = 0; c < 256; ++c) {
        const float want = static_cast<float>(codes[c]);
        if (std::isnan(want))
          EXPECT_TRUE(std::isnan(got[c])) << name << " code " << c;
        else
          EXPECT_EQ(got[c], want) << name << " code " << c << (transposed ? " transposed" : "");
      }
    }
  };
  check(ts::float8_e4m3{}, "e4m3");
  check(ts::float8_e5m2{}, "e5m2");
}

TEST(MatmulBf16, PairKernelAcrossBlocksLayoutsAndThreads) {
  // bfloat16 B is packed in pairs of k (gemm/kernel_bf16.hpp); A is packed in pairs too where
  // the CPU has the bf16 dot product and A is bfloat16, else to float. Odd k inside and at the
  // end of k blocks (a lone last k pads its pair), ragged row and column tiles, B read along and
  // across k, A of three types, one and two threads: each within the float bound.
  const int64_t kc = TT_IN_ACTIVE_PASS(detail::gemm_blocks<float>().kc), mr = tile_mr<float>(),
                nr = tile_nr<float>();
  RecordProperty("bf16_dot_product", ts::cpu_has_avx512_bf16() ? "yes" : "no");
  const std::vector<std::array<int64_t, 3>> shapes = {{3 * mr + 1, 2 * nr + 3, 2 * kc + 5},
                                                      {1, nr, 2 * kc + 1},
                                                      {mr, 3 * nr - 1, kc + 1},
                                                      {2, 5, 1},
                                                      {mr + 2, nr + 1, 2}};
  ts::Generator g(431);
  const auto run = [&](auto a_tag, const char* a_name) {
    using TA = decltype(a_tag);
    for (const auto& s : shapes)
      for (int t = 0; t < 4; ++t)
        for (int threads : {1, 2}) {
          ts::set_num_threads(threads);
          const std::string what = std::string(a_name) + " x bfloat16 m=" + std::to_string(s[0]) +
                                   " n=" + std::to_string(s[1]) + " k=" + std::to_string(s[2]) +
                                   " transposes " + std::to_string(t) + ", " +
                                   std::to_string(threads) + " thread(s)";
          auto a = make_operand<TA>(s[0], s[2], t & 1, g);
          auto b = make_operand<ts::bfloat16>(s[2], s[1], (t & 2) ? 1 : 0, g);
          if (!check_matmul(a, b, what)) {
            ts::set_num_threads(0);
            return;
          }
        }
    ts::set_num_threads(0);
  };
  run(ts::bfloat16{}, "bfloat16");
  run(float{}, "float");
  run(ts::half{}, "half");
}

TEST(MatmulDtypes, MixedTypesPromote) {
  static_assert(std::is_same_v<ts::matmul_t<float, ts::half>, float>);
  static_assert(std::is_same_v<ts::matmul_t<ts::half, ts::bfloat16>, float>);
  static_assert(std::is_same_v<ts::matmul_t<ts::float8_e4m3, ts::float8_e5m2>, float>);
  static_assert(std::is_same_v<ts::matmul_t<ts::bfloat16, double>, double>);
  static_assert(std::is_same_v<ts::matmul_t<ts::half, ts::float8_e4m3>, ts::half>);
  static_assert(std::is_same_v<ts::matmul_t<int8_t, int8_t>, int32_t>);
  static_assert(std::is_same_v<ts::matmul_t<uint8_t, int8_t>, int32_t>);
  static_assert(std::is_same_v<ts::matmul_t<int8_t, uint8_t>, int32_t>);
  static_assert(std::is_same_v<ts::matmul_t<uint8_t, uint8_t>, int32_t>);
  ts::Generator g(505);
  auto f = make_operand<float>(13, 21, 1, g);
  auto h = make_operand<ts::half>(21, 11, 0, g);
  check_matmul(f, h, "float x half");
  check_matmul(h.transpose(0, 1), f.transpose(0, 1), "half^T x float^T");
  auto bf = make_operand<ts::bfloat16>(21, 11, 2, g);
  check_matmul(h.transpose(0, 1), bf, "half x bfloat16");
  auto e4 = make_operand<ts::float8_e4m3>(7, 21, 0, g, -2, 2);
  auto e5 = make_operand<ts::float8_e5m2>(21, 9, 1, g, -2, 2);
  check_matmul(e4, e5, "e4m3 x e5m2");
  auto d = make_operand<double>(21, 4, 0, g);
  check_matmul(bf.transpose(0, 1), d, "bfloat16 x double");
  check_matmul(h.transpose(0, 1), e4.transpose(0, 1), "half x e4m3");
  // A already in the accumulation type (read in place), B converted while packed.
  check_matmul(d.transpose(0, 1), f.transpose(0, 1), "double x float");
  check_matmul(make_operand<float>(3, 8, 0, g), make_operand<ts::bfloat16>(8, 8, 0, g),
               "float x bfloat16 (3x8x8)");
  check_matmul(make_operand<float>(200, 200, 0, g), make_operand<ts::half>(200, 200, 0, g),
               "float x half (200^3)");
}

TEST(MatmulDtypes, Int8WithFloatPromotesToFloat) {
  // promote_t<int8_t, float> is float: not the int8 path, an ordinary float product.
  static_assert(std::is_same_v<ts::matmul_t<int8_t, float>, float>);
  ts::Generator g(506);
  auto a = ts::randint<int8_t>(-128, 128, {9, 30}, g);
  auto b = make_operand<float>(30, 7, 1, g);
  check_matmul(a, b, "int8 x float");
}

// ---- 8-bit integers ---------------------------------------------------------------------------

template <class T>
ts::Tensor<T> full_range(const ts::Shape& s, ts::Generator& g) {
  return ts::randint<T>(std::numeric_limits<T>::min(), int64_t{std::numeric_limits<T>::max()} + 1,
                        s, g);
}

/// An [r, c] 8-bit operand through layout `kind` (0 contiguous, 1 transposed, 2 column step 2).
template <class T>
ts::Tensor<T> int_operand(int64_t r, int64_t c, int kind, ts::Generator& g) {
  if (kind == 1) return full_range<T>({c, r}, g).transpose(0, 1);
  if (kind == 2) return full_range<T>({r, 2 * c}, g).slice(1, 0, 2 * c, 2);
  return full_range<T>({r, c}, g);
}

template <class TA, class TB>
void int8_suite(uint64_t seed) {
  const std::string names =
      std::string(ts::dtype_name<TA>) + " x " + std::string(ts::dtype_name<TB>);
  const int64_t mr = tile_mr<int32_t>(), nr = tile_nr<int32_t>();
  const std::vector<std::array<int64_t, 3>> shapes = {
      {1, 1, 1},    {3, 5, 7},           {mr + 1, nr + 1, 1001},       {5, 7, 1003},
      {2, 3, 2050}, {mr - 1, nr - 1, 2}, {2 * mr + 3, 2 * nr + 5, 67}, {4, 4, 0}};
  ts::Generator g(seed);
  for (const auto& s : shapes)
    for (int t = 0; t < 9; ++t) {
      const std::string what = names + " m=" + std::to_string(s[0]) + " n=" + std::to_string(s[1]) +
                               " k=" + std::to_string(s[2]) + " layouts " + std::to_string(t % 3) +
                               "," + std::to_string(t / 3);
      auto a = int_operand<TA>(s[0], s[2], t % 3, g);
      auto b = int_operand<TB>(s[2], s[1], t / 3, g);
      if (!check_matmul(a, b, what)) return;
    }
  // A in the narrow range ([-64, 63] for int8, [0, 127] for uint8), which AVX2 without VNNI
  // multiplies with vpmaddubsw (gemm/kernel_int8.hpp); one value just outside sends its block
  // back to the widened kernel.
  const int64_t narrow_lo = std::is_signed_v<TA> ? -64 : 0, narrow_hi = narrow_lo + 127;
  for (const auto& s : shapes)
    for (int t = 0; t < 3; ++t) {
      const std::string what = names + " narrow A m=" + std::to_string(s[0]) +
                               " n=" + std::to_string(s[1]) + " k=" + std::to_string(s[2]) +
                               " layout " + std::to_string(t);
      auto a = ts::randint<TA>(narrow_lo, narrow_hi + 1, {s[0], s[2]}, g);
      auto b = int_operand<TB>(s[2], s[1], t, g);
      if (!check_matmul(a, b, what)) return;
      if (a.numel() > 0) {
        a.flatten()
            .slice(0, a.numel() / 2, a.numel() / 2 + 1)
            .fill_(static_cast<TA>(narrow_hi + 1));
        if (!check_matmul(a, b, what + " one value outside")) return;
      }
    }
  // B in its narrow range ([-64, 64] for int8, [64, 192] for uint8: biased to signed, the
  // same), which allows the narrow kernel whatever A is; one value just outside does not.
  const int64_t b_lo = std::is_signed_v<TB> ? -64 : 64, b_hi = b_lo + 128;
  for (const auto& s : shapes)
    for (int t = 0; t < 3; ++t) {
      const std::string what = names + " narrow B m=" + std::to_string(s[0]) +
                               " n=" + std::to_string(s[1]) + " k=" + std::to_string(s[2]) +
                               " layout " + std::to_string(t);
      auto a = int_operand<TA>(s[0], s[2], t, g);
      auto b = ts::randint<TB>(b_lo, b_hi + 1, {s[2], s[1]}, g);
      if (!check_matmul(a, b, what)) return;
      if (b.numel() > 0) {
        b.flatten().slice(0, b.numel() / 2, b.numel() / 2 + 1).fill_(static_cast<TB>(b_hi + 1));
        if (!check_matmul(a, b, what + " one value outside")) return;
      }
    }
  // Extremes: every product at the edge of the range, k large enough that a 16-bit
  // intermediate (e.g. a saturating pairwise multiply-add) overflows; k not a multiple of 4; the
  // narrow ranges' ends and the values just past them too.
  for (int64_t k : {int64_t{1}, int64_t{3}, int64_t{1001}, int64_t{2051}})
    for (TA va : {std::numeric_limits<TA>::min(), std::numeric_limits<TA>::max(),
                  static_cast<TA>(narrow_lo), static_cast<TA>(narrow_hi)})
      for (TB vb :
           {std::numeric_limits<TB>::min(), std::numeric_limits<TB>::max(), static_cast<TB>(b_lo),
            static_cast<TB>(b_hi), static_cast<TB>(b_lo - 1), static_cast<TB>(b_hi + 1)}) {
        const std::string what = names + " extremes " + std::to_string(int(va)) + " * " +
                                 std::to_string(int(vb)) + " k=" + std::to_string(k);
        auto a = ts::full<TA>({mr + 2, k}, va);
        auto b = ts::full<TB>({k, nr + 3}, vb).transpose(0, 1).contiguous().transpose(0, 1);
        auto c = ts::matmul(a, b);
        const int64_t want = int64_t{va} * int64_t{vb} * k;
        const auto got = c.to_vector();
        ASSERT_EQ(c.shape(), (ts::Shape{mr + 2, nr + 3})) << what;
        int bad = 0;
        for (size_t i = 0; i < got.size(); ++i)
          if (got[i] != want && ++bad <= 2)
            ADD_FAILURE() << what << ": element " << i << " got " << got[i] << ", want " << want;
        if (bad) return;
      }
  // Mixed extremes in one dot product: alternating min and max along k, so partial sums swing.
  {
    const int64_t k = 1027;
    std::vector<TA> av(static_cast<size_t>(k));
    std::vector<TB> bv(static_cast<size_t>(k));
    for (int64_t p = 0; p < k; ++p) {
      av[p] = (p % 3) ? std::numeric_limits<TA>::min() : std::numeric_limits<TA>::max();
      bv[p] = (p % 2) ? std::numeric_limits<TB>::max() : std::numeric_limits<TB>::min();
    }
    auto a = ts::from_vector<TA>(av, {1, k}).expand({3, k});
    auto b = ts::from_vector<TB>(bv, {k, 1}).expand({k, 5});
    check_matmul(a, b, names + " alternating extremes");
    check_matmul(ts::from_vector<TA>(av), ts::from_vector<TB>(bv), names + " 1-D dot extremes");
  }
}

TEST(MatmulInt8, Int8Int8ExactInt32) { int8_suite<int8_t, int8_t>(601); }
TEST(MatmulInt8, Uint8Int8ExactInt32) { int8_suite<uint8_t, int8_t>(602); }
TEST(MatmulInt8, Int8Uint8ExactInt32) { int8_suite<int8_t, uint8_t>(603); }
TEST(MatmulInt8, Uint8Uint8ExactInt32) { int8_suite<uint8_t, uint8_t>(604); }

TEST(MatmulInt8, BatchedBroadcast) {
  ts::Generator g(605);
  auto a = full_range<int8_t>({3, 1, 5, 70}, g);
  auto b = full_range<uint8_t>({2, 70, 9}, g);
  check_matmul(a, b, "int8 [3,1,5,70] x uint8 [2,70,9]");
  check_matmul(full_range<uint8_t>({70}, g), b, "uint8 [70] x uint8 [2,70,9]");
}

// ---- batching and broadcasting ----------------------------------------------------------------

TEST(MatmulBatched, ShapesAndBroadcasting) {
  ts::Generator g(701);
  auto r = [&](ts::Shape s) { return tt::random_tensor<float>(s, g); };
  struct pair_case {
    ts::Shape a, b, want;
  };
  const std::vector<pair_case> cases = {
      {{4, 5, 6}, {4, 6, 7}, {4, 5, 7}},                          // [b,m,k] x [b,k,n]
      {{1, 5, 6}, {4, 6, 7}, {4, 5, 7}},                          // broadcast a's batch
      {{4, 5, 6}, {1, 6, 7}, {4, 5, 7}},                          // broadcast b's batch
      {{5, 6}, {2, 3, 6, 7}, {2, 3, 5, 7}},                       // [m,k] x [b1,b2,k,n]
      {{2, 3, 5, 6}, {6, 7}, {2, 3, 5, 7}},                       // [b1,b2,m,k] x [k,n]
      {{2, 1, 5, 6}, {3, 6, 7}, {2, 3, 5, 7}},                    // batch dims broadcast both ways
      {{6}, {6, 7}, {7}},                                         // 1-D x 2-D
      {{5, 6}, {6}, {5}},                                         // 2-D x 1-D
      {{6}, {3, 6, 7}, {3, 7}},                                   // 1-D x batched
      {{3, 5, 6}, {6}, {3, 5}},                                   // batched x 1-D
      {{6}, {6}, {}},                                             // dot: 0-D
      {{0}, {0}, {}},                                             // empty dot: 0
      {{0, 5, 6}, {0, 6, 7}, {0, 5, 7}},                          // zero batch
      {{0, 5, 6}, {1, 6, 7}, {0, 5, 7}},                          // zero batch broadcast
      {{3, 0, 6}, {3, 6, 7}, {3, 0, 7}},                          // m = 0
      {{3, 5, 6}, {3, 6, 0}, {3, 5, 0}},                          // n = 0
      {{3, 5, 0}, {3, 0, 7}, {3, 5, 7}},                          // k = 0: zeros
      {{5, 0}, {0}, {5}},                                         // k = 0, 2-D x 1-D
      {{1, 1}, {1, 1}, {1, 1}},                                   // 1x1
      {{2, 2, 2, 2, 3, 4}, {2, 1, 2, 4, 5}, {2, 2, 2, 2, 3, 5}},  // rank 6
  };
  for (const auto& c : cases) {
    const std::string what = "float " + c.a.to_string() + " x " + c.b.to_string();
    auto a = r(c.a), b = r(c.b);
    auto got = ts::matmul(a, b);
    ASSERT_EQ(got.shape(), c.want) << what;
    check_matmul(a, b, what);
    // The same through non-contiguous views of the same values.
    check_matmul(tt::relayout(a, tt::layout::transposed), tt::relayout(b, tt::layout::strided),
                 what + " (strided views)");
    check_matmul(tt::relayout(a, tt::layout::strided), tt::relayout(b, tt::layout::transposed),
                 what + " (strided views 2)");
  }
  // The k = 0 products are exact zeros; the empty dot is a 0-D zero.
  auto z = ts::matmul(r({3, 5, 0}), r({3, 0, 7}));
  for (float v : z.to_vector()) EXPECT_EQ(v, 0.0f);
  auto d = ts::matmul(r({0}), r({0}));
  EXPECT_EQ(d.rank(), 0);
  EXPECT_EQ(d.item(), 0.0f);
  // 0-D dot of known values.
  auto dot = ts::matmul(ts::from_vector<double>({1, 2, 3}), ts::from_vector<double>({4, -5, 6}));
  EXPECT_EQ(dot.rank(), 0);
  EXPECT_EQ(dot.item(), 12.0);
  // Small exact example: [[1,2],[3,4]] x [[5,6],[7,8]].
  auto e = ts::matmul(ts::from_vector<float>({1, 2, 3, 4}, {2, 2}),
                      ts::from_vector<float>({5, 6, 7, 8}, {2, 2}));
  EXPECT_EQ(e.to_vector(), (std::vector<float>{19, 22, 43, 50}));
}

TEST(MatmulBatched, BatchDimsWithOddStrides) {
  // Batch dims that are permuted, sliced and expanded (stride 0) rather than contiguous.
  ts::Generator g(702);
  auto a = tt::random_tensor<double>({6, 4, 9}, g).permute({1, 0, 2}).slice(0, 0, 4, 2);  // [2,6,9]
  auto b =
      tt::random_tensor<double>({9, 1, 5}, g).permute({1, 0, 2}).expand({2, 9, 5});  // stride 0
  check_matmul(a, b, "double permuted/sliced x expanded batch");
  auto a2 = tt::random_tensor<float>({3, 8, 2, 7}, g).permute({2, 0, 3, 1});  // [2,3,7,8]
  auto b2 = tt::random_tensor<float>({8, 3}, g);
  check_matmul(a2, b2, "float permuted 4-D x 2-D");
}

// ---- out= form ------------------------------------------------------------------------------

TEST(MatmulOut, IntoStridedViews) {
  ts::Generator g(801);
  auto a = make_operand<float>(23, 17, 1, g), b = make_operand<float>(17, 29, 0, g);
  const auto r = reference_matmul(a, b);
  const double eps = std::numeric_limits<float>::epsilon();
  for (bool col : {false, true}) {
    padded<float> out(23, 29, col);
    ts::matmul(a, b, out.view);
    check_values<float>(tt::to_doubles(out.view), r, eps, col ? "out col-major" : "out row-major");
    out.padding_intact("out padding");
  }
  // Every other column of a wider buffer.
  auto buf = ts::full<float>({23, 58}, -7.0f);
  auto view = buf.slice(1, 1, 58, 2);
  ts::matmul(a, b, view);
  check_values<float>(tt::to_doubles(view), r, eps, "out step-2 columns");
  auto left = buf.slice(1, 0, 58, 2).to_vector();
  for (float v : left) ASSERT_EQ(v, -7.0f) << "columns between the out view were written";
  // A batched out that is a permuted view.
  auto ba = tt::random_tensor<float>({3, 6, 5}, g), bb = tt::random_tensor<float>({5, 4}, g);
  auto bo = ts::empty<float>({6, 3, 4}).permute({1, 0, 2});
  ts::matmul(ba, bb, bo);
  check_values<float>(tt::to_doubles(bo), reference_matmul(ba, bb), eps, "batched permuted out");
  // Out of another floating type: half for float inputs (accumulate in float, round once).
  auto ho = ts::empty<ts::half>({23, 29});
  ts::matmul(a, b, ho);
  check_values<ts::half>(tt::to_doubles(ho), r, eps, "float inputs, half out");
  auto dout = ts::empty<double>({23, 29});
  ts::matmul(a, b, dout);
  check_values<double>(tt::to_doubles(dout), r, eps, "float inputs, double out");
  // 8-bit inputs into an int32 view.
  auto ia = full_range<int8_t>({5, 300}, g);
  auto ib = full_range<uint8_t>({300, 6}, g);
  auto io = ts::full<int32_t>({6, 5}, 0).transpose(0, 1);
  ts::matmul(ia, ib, io);
  check_values<int32_t>(tt::to_doubles(io), reference_matmul(ia, ib), 0, "int8 into int32 view");
  // 1-D operands into strided outs (the out gets a size-1 dim inserted internally).
  auto vk = tt::random_tensor<float>({17}, g);
  auto bk = tt::random_tensor<float>({3, 17, 10}, g);
  auto po = ts::full<float>({10, 3}, NAN).transpose(0, 1);
  ts::matmul(vk, bk, po);
  check_values<float>(tt::to_doubles(po), reference_matmul(vk, bk), eps,
                      "1-D x batched into [3,10]^T");
  auto so = ts::full<float>({46}, NAN).slice(0, 0, 46, 2);
  ts::matmul(a, vk, so);
  check_values<float>(tt::to_doubles(so), reference_matmul(a, vk), eps,
                      "2-D x 1-D into step-2 out");
  // 0-D out for a dot product.
  auto v1 = tt::random_tensor<float>({40}, g), v2 = tt::random_tensor<float>({40}, g);
  auto o0 = ts::empty<float>(ts::Shape{});
  ts::matmul(v1, v2, o0);
  check_values<float>(tt::to_doubles(o0), reference_matmul(v1, v2), eps, "0-D out");
}

TEST(MatmulOut, AliasingInputs) {
  // out overlapping a or b: the result is as if the inputs had been copied first.
  ts::Generator g(802);
  const double eps = std::numeric_limits<float>::epsilon();
  for (int64_t n : {int64_t{5}, int64_t{37}, int64_t{130}}) {
    const std::string sz = " n=" + std::to_string(n);
    {  // out is a
      auto a = tt::random_tensor<float>({n, n}, g), b = tt::random_tensor<float>({n, n}, g);
      const auto r = reference_matmul(a.clone(), b.clone());
      ts::matmul(a, b, a);
      check_values<float>(tt::to_doubles(a), r, eps, "matmul(a, b, a)" + sz);
    }
    {  // out is b
      auto a = tt::random_tensor<float>({n, n}, g), b = tt::random_tensor<float>({n, n}, g);
      const auto r = reference_matmul(a.clone(), b.clone());
      ts::matmul(a, b, b);
      check_values<float>(tt::to_doubles(b), r, eps, "matmul(a, b, b)" + sz);
    }
    {  // a * a into a
      auto a = tt::random_tensor<float>({n, n}, g);
      const auto r = reference_matmul(a.clone(), a.clone());
      ts::matmul(a, a, a);
      check_values<float>(tt::to_doubles(a), r, eps, "matmul(a, a, a)" + sz);
    }
    {  // out is the transpose of a (same memory, permuted)
      auto a = tt::random_tensor<float>({n, n}, g), b = tt::random_tensor<float>({n, n}, g);
      const auto r = reference_matmul(a.clone(), b.clone());
      auto at = a.transpose(0, 1);
      ts::matmul(a, b, at);
      check_values<float>(tt::to_doubles(at), r, eps, "matmul(a, b, a^T)" + sz);
    }
    {  // a is a transposed view of out
      auto c = tt::random_tensor<float>({n, n}, g), b = tt::random_tensor<float>({n, n}, g);
      auto a = c.transpose(0, 1);
      const auto r = reference_matmul(a.clone(), b.clone());
      ts::matmul(a, b, c);
      check_values<float>(tt::to_doubles(c), r, eps, "matmul(c^T, b, c)" + sz);
    }
    {  // partial overlap: out is a shifted window of the buffer a lives in
      auto buf = tt::random_tensor<float>({n + 1, n}, g);
      auto a = buf.slice(0, 0, n), out = buf.slice(0, 1, n + 1);
      auto b = tt::random_tensor<float>({n, n}, g);
      const auto r = reference_matmul(a.clone(), b.clone());
      ts::matmul(a, b, out);
      check_values<float>(tt::to_doubles(out), r, eps, "out shifted by one row over a" + sz);
    }
  }
  // Batched: out is a.
  auto a = tt::random_tensor<double>({3, 8, 8}, g), b = tt::random_tensor<double>({8, 8}, g);
  const auto r = reference_matmul(a.clone(), b.clone());
  ts::matmul(a, b, a);
  check_values<double>(tt::to_doubles(a), r, std::numeric_limits<double>::epsilon(),
                       "batched matmul(a, b, a)");
  // int8 inputs cannot alias an int32 out; half inputs into a float out that shares nothing
  // are covered above.
}

TEST(MatmulOut, WrongShapeThrows) {
  auto a = ts::ones<float>({3, 4}), b = ts::ones<float>({4, 5});
  auto sentinel = ts::full<float>({3, 6}, 9.0f);
  EXPECT_THROW(ts::matmul(a, b, sentinel), ts::shape_error);
  for (float v : sentinel.to_vector()) EXPECT_EQ(v, 9.0f) << "out written before the throw";
  auto o1 = ts::empty<float>({1, 3, 5});
  EXPECT_THROW(ts::matmul(a, b, o1), ts::shape_error);  // broadcastable is not enough
  auto o2 = ts::empty<float>({5, 3});
  EXPECT_THROW(ts::matmul(a, b, o2), ts::shape_error);
  auto o3 = ts::empty<float>({3, 5});
  EXPECT_THROW(ts::matmul(ts::ones<float>({2, 3, 4}), b, o3), ts::shape_error);
  auto o4 = ts::empty<float>({1});
  EXPECT_THROW(ts::matmul(ts::ones<float>({4}), ts::ones<float>({4}), o4), ts::shape_error);
  try {
    ts::matmul(a, b, sentinel);
  } catch (const ts::shape_error& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.rfind("tessera::matmul:", 0), 0u) << m;
    EXPECT_NE(m.find("[3, 6]"), std::string::npos) << m;
  }
}

// ---- gemm -----------------------------------------------------------------------------------

TEST(Gemm, BatchedCWithBroadcastOperands) {
  ts::Generator g(901);
  const double eps = std::numeric_limits<float>::epsilon();
  struct bcase {
    ts::Shape a, b, c;
  };
  const std::vector<bcase> cases = {
      {{7, 5}, {3, 5, 9}, {3, 7, 9}},             // a broadcast over c's batch
      {{3, 7, 5}, {5, 9}, {3, 7, 9}},             // b broadcast
      {{1, 7, 5}, {2, 1, 5, 9}, {2, 3, 7, 9}},    // both broadcast, into a rank-4 c
      {{2, 3, 7, 5}, {2, 3, 5, 9}, {2, 3, 7, 9}}  // no broadcast
  };
  for (const auto& bc : cases) {
    const std::string what =
        "gemm " + bc.a.to_string() + " x " + bc.b.to_string() + " -> " + bc.c.to_string();
    auto a = tt::random_tensor<float>(bc.a, g), b = tt::random_tensor<float>(bc.b, g);
    auto c = tt::relayout(tt::random_tensor<float>(bc.c, g), tt::layout::transposed);
    const auto c0 = tt::to_doubles(c);
    ts::gemm(0.5, a, b, -2.0, c);
    // Reference: 0.5 * matmul + (-2) * c0, with a and b expanded to c's batch dims.
    auto to_batch = [&](auto t) {
      ts::Shape s = bc.c;
      s[s.rank() - 2] = t.size(-2);
      s[s.rank() - 1] = t.size(-1);
      return t.expand(s);
    };
    auto r = reference_matmul(to_batch(a), to_batch(b));
    ASSERT_EQ(r.shape, bc.c) << what;
    for (size_t i = 0; i < r.sum.size(); ++i) {
      r.sum[i] = 0.5L * r.sum[i] - 2.0L * c0[i];
      r.abs[i] = 0.5 * r.abs[i] + 2.0 * std::abs(c0[i]);
    }
    check_values<float>(tt::to_doubles(c), r, eps, what);
  }
}

TEST(Gemm, Int32AccumulatorWithIntegerScalars) {
  ts::Generator g(902);
  const std::pair<double, double> scalars[] = {{2.0, 1.0}, {-3.0, -1.0}, {1.0, 0.0}, {0.0, 5.0}};
  for (auto [alpha, beta] : scalars) {
    const std::string what =
        "int8 gemm alpha=" + std::to_string(alpha) + " beta=" + std::to_string(beta);
    auto a = full_range<int8_t>({2, 13, 301}, g);
    auto b = full_range<uint8_t>({21, 301}, g).transpose(0, 1);
    auto c = ts::randint<int32_t>(-100000, 100000, {2, 13, 21}, g);
    const auto c0 = tt::to_doubles(c);
    ts::gemm(alpha, a, b, beta, c);
    auto r = reference_matmul(a, b);
    for (size_t i = 0; i < r.sum.size(); ++i)
      r.sum[i] =
          static_cast<long double>(alpha) * r.sum[i] + static_cast<long double>(beta) * c0[i];
    check_values<int32_t>(tt::to_doubles(c), r, 0, what);
  }
  auto a = ts::ones<int8_t>({2, 3}), b = ts::ones<int8_t>({3, 2});
  auto c = ts::zeros<int32_t>({2, 2});
  EXPECT_THROW(ts::gemm(0.5, a, b, 1.0, c), ts::dtype_error);
  EXPECT_THROW(ts::gemm(1.0, a, b, 0.5, c), ts::dtype_error);
  EXPECT_THROW(ts::gemm(NAN, a, b, 1.0, c), ts::dtype_error);
}

TEST(Gemm, ZeroAlphaAndEmptyKNeverReadOperands) {
  // alpha == 0 or k == 0: c = beta * c, even with NaN/Inf in a and b; beta == 0: c's NaN gone.
  const float nan = NAN, inf = INFINITY;
  auto a = ts::full<float>({4, 6}, nan), b = ts::full<float>({6, 3}, inf);
  auto c = ts::full<float>({4, 3}, 2.0f);
  ts::gemm(0.0, a, b, 1.5, c);
  for (float v : c.to_vector()) EXPECT_EQ(v, 3.0f);
  ts::gemm(0.0, a, b, 0.0, c);
  for (float v : c.to_vector()) EXPECT_EQ(v, 0.0f);
  auto cn = ts::full<float>({4, 3}, nan);
  ts::gemm(0.0, a, b, 0.0, cn);
  for (float v : cn.to_vector()) EXPECT_EQ(v, 0.0f);
  auto e1 = ts::empty<float>({4, 0}), e2 = ts::empty<float>({0, 3});
  auto ck = ts::full<float>({4, 3}, 2.0f);
  ts::gemm(1.0, e1, e2, 3.0, ck);
  for (float v : ck.to_vector()) EXPECT_EQ(v, 6.0f);
  auto ckn = ts::full<float>({4, 3}, nan);
  ts::gemm(1.0, e1, e2, 0.0, ckn);
  for (float v : ckn.to_vector()) EXPECT_EQ(v, 0.0f);
  // beta == 0 with finite a, b: C's NaN and Inf do not leak.
  auto ones = ts::ones<double>({3, 5});
  auto cd = ts::from_vector<double>({NAN, INFINITY, -INFINITY, NAN, 1, 2, 3, 4, 5}, {3, 3});
  ts::gemm(2.0, ones, ones.transpose(0, 1), 0.0, cd);
  for (double v : cd.to_vector()) EXPECT_EQ(v, 10.0);
  // ... and a NaN in a does propagate when alpha != 0 (the product is really computed).
  auto an = ts::ones<float>({2, 2});
  an.at({0, 1}) = nan;
  auto cp = ts::zeros<float>({2, 2});
  ts::gemm(1.0, an, ts::ones<float>({2, 2}), 0.0, cp);
  auto cpv = cp.to_vector();
  EXPECT_TRUE(std::isnan(cpv[0]) && std::isnan(cpv[1]));
  EXPECT_EQ(cpv[2], 2.0f);
  EXPECT_EQ(cpv[3], 2.0f);
}

TEST(Gemm, Errors) {
  auto a = ts::ones<float>({3, 4}), b = ts::ones<float>({4, 5});
  auto expect_gemm_shape_error = [](auto f, const std::string& what) {
    try {
      f();
      ADD_FAILURE() << what << ": no throw";
    } catch (const ts::shape_error& e) {
      const std::string m = e.what();
      EXPECT_EQ(m.rfind("tessera::gemm:", 0), 0u) << what << ": " << m;
    } catch (const std::exception& e) {
      ADD_FAILURE() << what << ": wrong exception: " << e.what();
    }
  };
  auto c_bad = ts::zeros<float>({3, 6});
  expect_gemm_shape_error([&] { ts::gemm(1.0, a, b, 0.0, c_bad); }, "c has the wrong n");
  auto c_bad_m = ts::zeros<float>({2, 5});
  expect_gemm_shape_error([&] { ts::gemm(1.0, a, b, 0.0, c_bad_m); }, "c has the wrong m");
  auto c = ts::zeros<float>({3, 5});
  expect_gemm_shape_error([&] { ts::gemm(1.0, a, ts::ones<float>({3, 5}), 0.0, c); }, "k mismatch");
  expect_gemm_shape_error([&] { ts::gemm(1.0, ts::ones<float>({4}), b, 0.0, c); }, "1-D a");
  auto cb = ts::zeros<float>({2, 3, 5});
  expect_gemm_shape_error(
      [&] {
        ts::gemm(1.0, ts::ones<float>({3, 3, 4}), b, 0.0, cb);
      },
      "a's batch does not broadcast to c's");
  auto c1 = ts::zeros<float>({1, 3, 5});
  expect_gemm_shape_error(
      [&] {
        ts::gemm(1.0, ts::ones<float>({2, 3, 4}), b, 0.0, c1);
      },
      "c's batch is not broadcast");
  // Nothing was written by the failed calls.
  for (float v : c_bad.to_vector()) EXPECT_EQ(v, 0.0f);
}

TEST(GemmLayouts, EveryOperandLayout) {
  // Every pair of operand layouts (contiguous, transposed, column step 2, both strides
  // non-unit, padded leading dimension, stride-0 rows, stride-0 columns) on sizes that take the
  // in-place A and B paths (small problems, short A) and the packed ones.
  using T = float;
  const int64_t mr = tile_mr<T>(), nr = tile_nr<T>();
  const std::vector<std::array<int64_t, 3>> shapes = {
      {5, 2 * nr + 3, 17}, {5 * mr + 1, nr + 1, 33}, {2, 7, 300}, {70, 70, 70}, {130, 140, 150}};
  ts::Generator g(1201);
  int failed = 0;
  for (const auto& s : shapes)
    for (int ka = 0; ka < operand_kinds; ++ka)
      for (int kb = 0; kb < operand_kinds; ++kb) {
        std::ostringstream os;
        os << "m=" << s[0] << " n=" << s[1] << " k=" << s[2] << " A layout " << ka << " B layout "
           << kb;
        auto A = make_operand<T>(s[0], s[2], ka, g), B = make_operand<T>(s[2], s[1], kb, g);
        padded<T> C(s[0], s[1], (ka + kb) % 2 == 1);
        C.view.copy_(tt::random_tensor<T>({s[0], s[1]}, g));
        const auto a = tt::to_doubles(A), b = tt::to_doubles(B), c0 = tt::to_doubles(C.view);
        ts::gemm(0.7, A, B, 1.3, C.view);
        const std::string what = os.str() + " A " + shape_str(A) + " B " + shape_str(B);
        const bool ok =
            check_gemm<T>(tt::to_doubles(C.view), a, b, c0, s[0], s[1], s[2], 0.7, 1.3, what);
        if (!(C.padding_intact(what) && ok) && ++failed >= 5) return;
      }
}

TEST(Gemm, OutputOfAnotherFloatingType) {
  // The product is formed in the accumulation type and rounded once into c: half inputs into a
  // float c (mixed precision), float inputs into a half c, with and without beta.
  ts::Generator g(1202);
  const double eps = std::numeric_limits<float>::epsilon();
  auto ha = make_operand<ts::half>(19, 45, 1, g), hb = make_operand<ts::half>(45, 23, 0, g);
  for (double beta : {0.0, 1.3}) {
    const std::string what = "half x half -> float c, beta=" + std::to_string(beta);
    padded<float> c(19, 23, true);
    if (beta == 0)
      c.view.fill_(NAN);
    else
      c.view.copy_(tt::random_tensor<float>({19, 23}, g));
    const auto c0 = tt::to_doubles(c.view);
    ts::gemm(0.7, ha, hb, beta, c.view);
    check_gemm<float>(tt::to_doubles(c.view), tt::to_doubles(ha), tt::to_doubles(hb), c0, 19, 23,
                      45, 0.7, beta, what);
    c.padding_intact(what);
  }
  auto fa = make_operand<float>(19, 45, 0, g), fb = make_operand<float>(45, 23, 1, g);
  for (double beta : {0.0, 1.3}) {
    const std::string what = "float x float -> half c, beta=" + std::to_string(beta);
    auto c = ts::full<ts::half>({19, 23}, ts::half(NAN));
    if (beta != 0) c.copy_(tt::random_tensor<ts::half>({19, 23}, g));
    const auto c0 = tt::to_doubles(c);
    ts::gemm(0.7, fa, fb, beta, c);
    auto r = reference_matmul(fa, fb);
    for (size_t i = 0; i < r.sum.size(); ++i) {
      r.sum[i] = 0.7L * r.sum[i] + (beta != 0 ? static_cast<long double>(beta) * c0[i] : 0.0L);
      r.abs[i] = 0.7 * r.abs[i] + (beta != 0 ? std::abs(beta * c0[i]) : 0.0);
    }
    check_values<ts::half>(tt::to_doubles(c), r, eps, what);
  }
}

TEST(Gemm, CAliasingAnInput) {
  // c sharing memory with a or b: the inputs are read as they were before the call.
  ts::Generator g(1203);
  for (int64_t n : {int64_t{6}, int64_t{90}}) {
    auto a = tt::random_tensor<double>({n, n}, g), b = tt::random_tensor<double>({n, n}, g);
    const auto a0 = tt::to_doubles(a), b0 = tt::to_doubles(b);
    ts::gemm(0.7, a, b, 1.3, a);
    check_gemm<double>(tt::to_doubles(a), a0, b0, a0, n, n, n, 0.7, 1.3,
                       "gemm(0.7, a, b, 1.3, a) n=" + std::to_string(n));
    auto c = tt::random_tensor<double>({n, n}, g);
    const auto c0 = tt::to_doubles(c);
    auto ct = c.transpose(0, 1);
    const auto ct0 = tt::to_doubles(ct);
    ts::gemm(1.0, ct, b, 0.5, c);
    check_gemm<double>(tt::to_doubles(c), ct0, b0, c0, n, n, n, 1.0, 0.5,
                       "gemm(1, c^T, b, 0.5, c) n=" + std::to_string(n));
  }
}

// ---- linear ---------------------------------------------------------------------------------

/// x . w^T + bias in long double, over x's leading dims.
template <class T>
product_ref linear_ref(const ts::Tensor<T>& x, const ts::Tensor<T>& w, const ts::Tensor<T>* bias) {
  auto r = reference_matmul(x, w.transpose(0, 1));
  if (bias) {
    const auto bv = tt::to_doubles(*bias);
    const size_t out = bv.size();
    for (size_t i = 0; i < r.sum.size(); ++i) {
      r.sum[i] += bv[i % out];
      r.abs[i] += std::abs(bv[i % out]);
    }
  }
  return r;
}

TEST(Linear, WithAndWithoutBias) {
  ts::Generator g(1001);
  const double eps = std::numeric_limits<float>::epsilon();
  const int64_t in = 37, out = 19;
  auto w = tt::random_tensor<float>({out, in}, g);
  auto bias = tt::random_tensor<float>({out}, g);
  const std::vector<ts::Shape> xs = {{in}, {5, in}, {2, 3, in}, {0, in}, {2, 1, 4, in}};
  for (const auto& xs_shape : xs)
    for (int lay = 0; lay < 3; ++lay) {
      const std::string what =
          "linear x " + xs_shape.to_string() + " layout " + std::to_string(lay);
      auto x =
          tt::relayout(tt::random_tensor<float>(xs_shape, g), lay == 0   ? tt::layout::contiguous
                                                              : lay == 1 ? tt::layout::transposed
                                                                         : tt::layout::strided);
      // w: contiguous, or a transposed view of a contiguous [in, out].
      auto wv = lay == 1 ? w.transpose(0, 1).contiguous().transpose(0, 1) : w;
      auto y = ts::linear(x, wv);
      static_assert(std::is_same_v<decltype(y)::value_type, float>);
      ts::Shape want = xs_shape;
      want[want.rank() - 1] = out;
      ASSERT_EQ(y.shape(), want) << what;
      check_values<float>(tt::to_doubles(y), linear_ref<float>(x, wv, nullptr), eps, what);
      auto bv = lay == 2 ? tt::relayout(bias, tt::layout::strided) : bias;
      auto yb = ts::linear(x, wv, bv);
      ASSERT_EQ(yb.shape(), want) << what << " bias";
      check_values<float>(tt::to_doubles(yb), linear_ref(x, wv, &bv), eps, what + " bias");
    }
}

TEST(Linear, EmptyFeatures) {
  // in = 0: x . w^T is a zero matrix, so the result is the bias alone (as
  // torch.nn.functional.linear); out = 0 or no rows: an empty result. Each case on its own, so
  // one throwing does not hide the others.
  auto attempt = [](const std::string& what, auto f) {
    try {
      f();
    } catch (const std::exception& e) {
      ADD_FAILURE() << what << ": threw " << e.what();
    }
  };
  auto x0 = ts::empty<double>({3, 0});
  auto w0 = ts::empty<double>({4, 0});
  auto b0 = ts::from_vector<double>({1, 2, 3, 4});
  attempt("linear([3,0], [4,0], bias)", [&] {
    auto y = ts::linear(x0, w0, b0);
    ASSERT_EQ(y.shape(), (ts::Shape{3, 4}));
    EXPECT_EQ(y.to_vector(), (std::vector<double>{1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4}));
  });
  attempt("linear([3,0], [4,0])", [&] {
    auto y = ts::linear(x0, w0);
    ASSERT_EQ(y.shape(), (ts::Shape{3, 4}));
    for (double v : y.to_vector()) EXPECT_EQ(v, 0.0);
  });
  attempt("linear([0], [4,0], bias)", [&] {
    auto y = ts::linear(ts::empty<double>(ts::Shape{0}), w0, b0);
    ASSERT_EQ(y.shape(), (ts::Shape{4}));
    EXPECT_EQ(y.to_vector(), (std::vector<double>{1, 2, 3, 4}));
  });
  attempt("linear([2,5,6], [0,6], [0])", [&] {
    auto y = ts::linear(ts::ones<float>({2, 5, 6}), ts::empty<float>({0, 6}),
                        ts::empty<float>(ts::Shape{0}));
    EXPECT_EQ(y.shape(), (ts::Shape{2, 5, 0}));
  });
  attempt("linear([0,6], [3,6])", [&] {
    auto y = ts::linear(ts::empty<float>({0, 6}), ts::ones<float>({3, 6}));
    EXPECT_EQ(y.shape(), (ts::Shape{0, 3}));
  });
  attempt("linear([2,0,6], [3,6], bias)", [&] {
    auto y = ts::linear(ts::empty<float>({2, 0, 6}), ts::ones<float>({3, 6}), ts::ones<float>({3}));
    EXPECT_EQ(y.shape(), (ts::Shape{2, 0, 3}));
  });
}

TEST(Linear, Errors) {
  const int64_t in = 37, out = 19;
  auto w = ts::ones<float>({out, in});
  auto expect_linear_shape_error = [](auto f, const std::string& what) {
    try {
      f();
      ADD_FAILURE() << what << ": no throw";
    } catch (const ts::shape_error& e) {
      const std::string m = e.what();
      EXPECT_EQ(m.rfind("tessera::linear:", 0), 0u) << what << ": " << m;
    } catch (const std::exception& e) {
      ADD_FAILURE() << what << ": wrong exception: " << e.what();
    }
  };
  auto x = ts::ones<float>({2, in});
  expect_linear_shape_error(
      [&] {
        (void)ts::linear(x, ts::ones<float>({out, in + 1}));
      },
      "in mismatch");
  expect_linear_shape_error([&] { (void)ts::linear(x, w, ts::ones<float>({out + 1})); },
                            "bias size");
  expect_linear_shape_error([&] { (void)ts::linear(x, ts::ones<float>({in})); }, "1-D weight");
}

// ---- packed weights (ops/packed_linear.hpp) --------------------------------------------------

// linear with a weight packed once against the same reference as linear: sizes around the panel
// (32 columns) and the micro-tiles, k across a cache block, few rows (B read in place) and many,
// x contiguous, transposed or strided, one and two threads. The kernel suite runs again under
// every instruction set the machine has, so each pass's tile width meets the panel width.
template <class T>
void packed_linear_suite(uint64_t seed) {
  ts::Generator g(seed);
  const double eps = std::numeric_limits<T>::epsilon();
  struct dims {
    int64_t rows, in, out;
  };
  const std::vector<dims> cases = {{1, 1, 1},     {1, 7, 31},   {3, 37, 32},  {16, 64, 33},
                                   {5, 33, 150},  {70, 50, 47}, {2, 700, 65}, {49, 130, 96},
                                   {16, 384, 97}, {1, 5, 4},    {9, 1, 80}};
  const int saved = ts::get_num_threads();
  for (int threads : {1, 2}) {
    ts::set_num_threads(threads);
    for (const dims& d : cases)
      for (int lay = 0; lay < 3; ++lay) {
        const std::string what = "packed linear rows " + std::to_string(d.rows) + " in " +
                                 std::to_string(d.in) + " out " + std::to_string(d.out) +
                                 " layout " + std::to_string(lay) + " threads " +
                                 std::to_string(threads);
        auto w = tt::random_tensor<T>({d.out, d.in}, g);
        auto bias = tt::random_tensor<T>({d.out}, g);
        auto x = tt::relayout(tt::random_tensor<T>({d.rows, d.in}, g),
                              lay == 0   ? tt::layout::contiguous
                              : lay == 1 ? tt::layout::transposed
                                         : tt::layout::strided);
        const auto packed = ts::pack_linear(w);
        ASSERT_GT(packed.panel, 0) << what;
        auto y = ts::linear(x, packed);
        ASSERT_EQ(y.shape(), (ts::Shape{d.rows, d.out})) << what;
        if (!check_values<T>(tt::to_doubles(y), linear_ref<T>(x, w, nullptr), eps, what)) return;
        auto yb = ts::linear(x, packed, bias);
        if (!check_values<T>(tt::to_doubles(yb), linear_ref<T>(x, w, &bias), eps, what + " bias"))
          return;
      }
  }
  ts::set_num_threads(saved);
}
TEST(PackedLinear, FloatMatchesTheReference) { packed_linear_suite<float>(1201); }
TEST(PackedLinear, DoubleMatchesTheReference) { packed_linear_suite<double>(1202); }

TEST(PackedLinear, LayoutAndBatchDims) {
  ts::Generator g(1203);
  auto w = tt::random_tensor<float>({45, 20}, g);
  auto bias = tt::random_tensor<float>({45}, g);
  const auto p = ts::pack_linear(w);
  EXPECT_EQ(p.in_features, 20);
  EXPECT_EQ(p.out_features, 45);
  // [panels, in, panel], the columns past 45 zero.
  const int64_t panels = (45 + p.panel - 1) / p.panel;
  ASSERT_EQ(p.data.shape(), (ts::Shape{panels, 20, p.panel}));
  for (int64_t j = 0; j < panels * p.panel; ++j)
    for (int64_t i : {int64_t{0}, int64_t{7}, int64_t{19}}) {
      const float got = p.data.at({j / p.panel, i, j % p.panel});
      EXPECT_EQ(got, j < 45 ? w.at({j, i}) : 0.0f) << "column " << j << " row " << i;
    }
  // unpack_linear gives the weight back.
  const auto back = ts::unpack_linear(p);
  ASSERT_EQ(back.shape(), w.shape());
  EXPECT_EQ(back.to_vector(), w.contiguous().to_vector());
  // The packed copy does not follow later writes to the weight.
  auto x = tt::random_tensor<float>({2, 3, 20}, g);
  auto before = ts::linear(x, p, bias);
  w.fill_(0.0f);
  EXPECT_EQ(ts::linear(x, p, bias).to_vector(), before.to_vector());
  ASSERT_EQ(before.shape(), (ts::Shape{2, 3, 45}));
  // A strided bias is read in place, to the same values.
  auto strided_bias = tt::relayout(bias, tt::layout::strided);
  ASSERT_NE(strided_bias.strides()[0], 1);
  EXPECT_EQ(ts::linear(x, p, strided_bias).to_vector(), before.to_vector());
  // A 1-D x is one row.
  auto x1 = tt::random_tensor<float>({20}, g);
  EXPECT_EQ(ts::linear(x1, p, bias).to_vector(),
            ts::linear(x1.reshape({1, 20}), p, bias).to_vector());
  // A few input features' weights from the panels, in the order asked, repeats allowed; and
  // from bfloat16 panels (two features of a column together, 21: one pair half padding).
  const auto wb = tt::random_tensor<float>({45, 21}, g).astype<ts::bfloat16>();
  const auto pb = ts::pack_linear(wb);
  ASSERT_GT(pb.panel, 0);
  const std::vector<int64_t> features = {19, 0, 7, 7}, features_b = {20, 0, 13, 13};
  const auto rows = ts::detail::packed_feature_rows(p, features);
  const auto rows_b = ts::detail::packed_feature_rows(pb, features_b);
  ASSERT_EQ(rows.shape(), (ts::Shape{4, 45}));
  ASSERT_EQ(rows_b.shape(), (ts::Shape{4, 45}));
  for (int64_t r = 0; r < 4; ++r) {
    const auto at = static_cast<size_t>(r);
    EXPECT_EQ(rows.select(0, r).to_vector(), back.select(1, features[at]).to_vector())
        << "feature " << features[at];
    EXPECT_EQ(rows_b.select(0, r).to_vector(), wb.select(1, features_b[at]).to_vector())
        << "bf16 feature " << features_b[at];
  }
  EXPECT_EQ(ts::detail::packed_feature_rows(p, {}).shape(), (ts::Shape{0, 45}));
  EXPECT_THROW((void)ts::detail::packed_feature_rows(p, {20}), ts::index_error);
  EXPECT_THROW((void)ts::detail::packed_feature_rows(pb, {-1}), ts::index_error);
}

// int8 weights in panels (four input features of a column together, with column sums): the
// int8 GEMM reads them in place and applies the sums' correction once, in the first k block.
// Exact against the int8 matmul, for k past one block (2100), k and out not multiples of the
// tile, any A layout, with and without a bias, on one and two threads.
TEST(PackedLinear, Int8PanelsMatchTheInt8Product) {
  // Not measured by pack_linear: no bound beyond int8's own.
  ASSERT_EQ((ts::packed_linear<int8_t, ts::cpu>{}.max_abs), 128);
  ts::Generator g(1204);
  struct dims {
    int64_t rows, in, out;
  };
  const std::vector<dims> cases = {{1, 1, 1},    {1, 7, 31},   {3, 37, 32},   {16, 64, 33},
                                   {5, 33, 150}, {70, 50, 47}, {2, 2100, 65}, {16, 384, 97},
                                   {9, 3, 80},   {130, 5, 40}};
  const int saved = ts::get_num_threads();
  for (int threads : {1, 2}) {
    ts::set_num_threads(threads);
    for (const dims& d : cases)
      for (int lay = 0; lay < 6; ++lay) {
        const std::string what = "int8 panels rows " + std::to_string(d.rows) + " in " +
                                 std::to_string(d.in) + " out " + std::to_string(d.out) +
                                 " layout " + std::to_string(lay) + " threads " +
                                 std::to_string(threads);
        // Layouts 4 and 5: 7-bit weights ([-64, 64]), whose bound lets the narrow kernel take
        // any A, in every k block (the column sums' correction must then see no shift).
        const auto w = lay >= 4 ? ts::randint<int8_t>(-64, 65, {d.out, d.in}, g)
                                : full_range<int8_t>({d.out, d.in}, g);
        // Layouts 3 and 5: contiguous, in A's narrow range (the narrow kernel where the pass
        // has it); 4: contiguous, full range.
        const auto x = lay == 3 || lay == 5 ? ts::randint<int8_t>(-64, 64, {d.rows, d.in}, g)
                       : lay == 4           ? full_range<int8_t>({d.rows, d.in}, g)
                                            : int_operand<int8_t>(d.rows, d.in, lay, g);
        const auto bias = ts::randint<int32_t>(-1000, 1000, {d.out}, g);
        const auto p = ts::pack_linear(w);
        ASSERT_GT(p.panel, 0) << what;
        ASSERT_EQ(p.max_abs, ts::max(ts::abs(w.astype<int32_t>())).item()) << what;
        const int64_t panels = (d.out + p.panel - 1) / p.panel;
        ASSERT_EQ(p.data.shape(), (ts::Shape{panels, (d.in + 3) / 4, p.panel, 4})) << what;
        ASSERT_EQ(p.col_sums.shape(), (ts::Shape{panels * p.panel})) << what;
        const auto want = ts::matmul(x, w.transpose(0, 1));
        const auto got = ts::detail::panel_product<int32_t>(x, p, nullptr);
        ASSERT_EQ(got.shape(), want.shape()) << what;
        ASSERT_EQ(got.to_vector(), want.to_vector()) << what;
        ASSERT_EQ(ts::detail::panel_product<int32_t>(x, p, &bias).to_vector(),
                  (want + bias).to_vector())
            << what << " bias";
        ASSERT_EQ(ts::unpack_linear(p).to_vector(), w.to_vector()) << what;
        // A few input features' weights without unpacking: rows of the [in, out] transpose.
        const std::vector<int64_t> features = {d.in - 1, 0, d.in / 2};
        const auto rows = ts::detail::packed_feature_rows(p, features);
        ASSERT_EQ(rows.shape(), (ts::Shape{3, d.out})) << what;
        for (int64_t r = 0; r < 3; ++r)
          ASSERT_EQ(rows.select(0, r).to_vector(),
                    w.select(1, features[static_cast<size_t>(r)]).to_vector())
              << what << " feature " << features[static_cast<size_t>(r)];
      }
  }
  ts::set_num_threads(saved);
}

TEST(PackedLinear, EmptyFeaturesAndRows) {
  auto b = ts::from_vector<double>({1, 2, 3, 4});
  auto y = ts::linear(ts::empty<double>({3, 0}), ts::pack_linear(ts::empty<double>({4, 0})), b);
  ASSERT_EQ(y.shape(), (ts::Shape{3, 4}));
  EXPECT_EQ(y.to_vector(), (std::vector<double>{1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4}));
  auto y0 = ts::linear(ts::ones<double>({3, 6}), ts::pack_linear(ts::empty<double>({0, 6})));
  EXPECT_EQ(y0.shape(), (ts::Shape{3, 0}));
  auto r0 = ts::linear(ts::empty<double>({2, 0, 6}), ts::pack_linear(ts::ones<double>({5, 6})));
  EXPECT_EQ(r0.shape(), (ts::Shape{2, 0, 5}));
}

TEST(PackedLinear, Errors) {
  const auto p = ts::pack_linear(ts::ones<float>({19, 37}));
  auto expect_error = [](auto f, const std::string& op, const std::string& what) {
    try {
      f();
      ADD_FAILURE() << what << ": no throw";
    } catch (const ts::error& e) {
      const std::string m = e.what();
      EXPECT_EQ(m.rfind("tessera::" + op + ":", 0), 0u) << what << ": " << m;
    }
  };
  expect_error([&] { (void)ts::linear(ts::ones<float>({2, 36}), p); }, "linear", "in mismatch");
  expect_error(
      [&] {
        (void)ts::linear(ts::ones<float>({2, 37}), p, ts::ones<float>({18}));
      },
      "linear", "bias size");
  expect_error([&] { (void)ts::pack_linear(ts::ones<float>({37})); }, "pack_linear", "1-D");
  expect_error(
      [&] {
        (void)ts::linear(ts::ones<float>({2, 37}), ts::packed_linear<float, ts::cpu>{});
      },
      "linear", "empty packed weight");
  expect_error([&] { (void)ts::unpack_linear(ts::packed_linear<float, ts::cpu>{}); },
               "unpack_linear", "empty packed weight");
  // The GEMM reads panels only of its accumulation type (or bfloat16, or int8), and of a width
  // its tiles divide.
  std::vector<ts::half> a16(8), b16(8 * 32);
  std::vector<float> a32(8), b32(8 * 33), c(33);
  ts::detail::gemm_problem<ts::half, ts::half, float> p16;
  p16.m = 1, p16.n = 32, p16.k = 8, p16.a = a16.data(), p16.a_rs = 8, p16.a_cs = 1;
  p16.b = b16.data(), p16.b_rs = 32, p16.b_cs = 8 * 32, p16.b_panel = 32;
  p16.c = c.data(), p16.c_rs = 32, p16.c_cs = 1;
  expect_error([&] { ts::backend::gemm_kernel<ts::cpu>::run(p16); }, "gemm", "half panels");
  ts::detail::gemm_problem<float, float, float> p33;
  p33.m = 1, p33.n = 33, p33.k = 8, p33.a = a32.data(), p33.a_rs = 8, p33.a_cs = 1;
  p33.b = b32.data(), p33.b_rs = 33, p33.b_cs = 8 * 33, p33.b_panel = 33;
  p33.c = c.data(), p33.c_rs = 33, p33.c_cs = 1;
  expect_error([&] { ts::backend::gemm_kernel<ts::cpu>::run(p33); }, "gemm", "panel of 33");
  // int8 panels need their column sums.
  std::vector<int8_t> a8(8), b8(8 * 32);
  std::vector<int32_t> c8(32);
  ts::detail::gemm_problem<int8_t, int8_t, int32_t> pi8;
  pi8.m = 1, pi8.n = 32, pi8.k = 8, pi8.a = a8.data(), pi8.a_rs = 8, pi8.a_cs = 1;
  pi8.b = b8.data(), pi8.b_rs = 4 * 32, pi8.b_cs = 8 * 32, pi8.b_panel = 32;
  pi8.c = c8.data(), pi8.c_rs = 32, pi8.c_cs = 1;
  expect_error([&] { ts::backend::gemm_kernel<ts::cpu>::run(pi8); }, "gemm", "int8 without sums");
  // Float results scaled back (gemm_dequant) are for plain int8 panel products only.
  std::vector<int32_t> sums(32);
  std::vector<float> steps(32, 1.0f);
  pi8.b_col_sums = sums.data();
  pi8.dequant = {c.data(), 32, steps.data(), steps.data(), nullptr};
  pi8.alpha = 2;
  expect_error([&] { ts::backend::gemm_kernel<ts::cpu>::run(pi8); }, "gemm", "dequant alpha 2");
  pi8.alpha = 1, pi8.relu = true;
  expect_error([&] { ts::backend::gemm_kernel<ts::cpu>::run(pi8); }, "gemm", "dequant relu");
  p33.b_panel = 0, p33.b_rs = 33, p33.b_cs = 1;
  p33.dequant = pi8.dequant;
  expect_error([&] { ts::backend::gemm_kernel<ts::cpu>::run(p33); }, "gemm", "dequant float");
}

// ---- random shapes and layouts --------------------------------------------------------------

TEST(GemmRandom, ShapesLayoutsAndScalars) {
  const uint64_t seed = 20240611;
  ts::Generator g(seed);
  int failed = 0;
  for (int i = 0; i < 30 && failed < 5; ++i) {
    auto dim = [&] {
      return g.below(12) == 0 ? int64_t{0} : 1 + static_cast<int64_t>(g.below(300));
    };
    const int64_t m = dim(), n = dim(), k = dim();
    const int ka = static_cast<int>(g.below(operand_kinds)),
              kb = static_cast<int>(g.below(operand_kinds));
    const bool c_col = g.below(2) == 1, dbl = i % 3 == 2, use_matmul = i % 4 == 3;
    const double alphas[] = {1.0, 0.7, -1.5}, betas[] = {0.0, 1.0, 1.3};
    const double alpha = use_matmul ? 1.0 : alphas[g.below(3)];
    const double beta = use_matmul ? 0.0 : betas[g.below(3)];
    std::ostringstream os;
    os << "seed " << seed << " case " << i << ": " << (dbl ? "double" : "float") << " m=" << m
       << " n=" << n << " k=" << k << " A layout " << ka << " B layout " << kb << " C "
       << (c_col ? "col" : "row") << "-major alpha=" << alpha << " beta=" << beta
       << (use_matmul ? " via matmul(a, b, out)" : "");
    SCOPED_TRACE(os.str());
    auto run = [&](auto tag) {
      using T = decltype(tag);
      auto A = make_operand<T>(m, k, ka, g), B = make_operand<T>(k, n, kb, g);
      padded<T> C(m, n, c_col);
      if (beta == 0)
        C.view.fill_(std::numeric_limits<T>::quiet_NaN());
      else
        C.view.copy_(tt::random_tensor<T>({m, n}, g));
      const auto a = tt::to_doubles(A), b = tt::to_doubles(B), c0 = tt::to_doubles(C.view);
      if (use_matmul)
        ts::matmul(A, B, C.view);
      else
        ts::gemm(alpha, A, B, beta, C.view);
      const bool ok = check_gemm<T>(tt::to_doubles(C.view), a, b, c0, m, n, k, alpha, beta,
                                    os.str() + " A " + shape_str(A) + " B " + shape_str(B));
      return C.padding_intact(os.str()) && ok;
    };
    if (!(dbl ? run(double{}) : run(float{}))) ++failed;
  }
}

// ---- threads --------------------------------------------------------------------------------

TEST(GemmThreads, SameResultForOneAndTwoThreads) {
  // 300^3 (split over rows or columns), a tall product (row split), a short wide one whose B is
  // read in place (column split), and a batch of small matrices (split over the batch); each
  // within the bound with 1 and with 2 threads.
  ts::Generator g(1101);
  struct tcase {
    ts::Shape a, b;
    bool bt;
  };
  const std::vector<tcase> cases = {{{300, 300}, {300, 300}, true},
                                    {{1000, 300}, {300, 40}, false},
                                    {{20, 300}, {300, 2000}, false},
                                    {{64, 9, 30}, {64, 30, 11}, false}};
  for (const auto& tc : cases) {
    auto a = tt::random_tensor<float>(tc.a, g);
    auto b = tt::random_tensor<float>(tc.b, g);
    if (tc.bt) b = b.transpose(-1, -2).contiguous().transpose(-1, -2);
    const auto r = reference_matmul(a, b);
    std::vector<float> res[2];
    for (int t : {1, 2}) {
      ts::set_num_threads(t);
      auto c = ts::matmul(a, b);
      res[t - 1] = c.to_vector();
      check_values<float>(tt::to_doubles(c), r, std::numeric_limits<float>::epsilon(),
                          tc.a.to_string() + " x " + tc.b.to_string() + " with " +
                              std::to_string(t) + " thread(s)");
    }
    ts::set_num_threads(0);
    size_t differ = 0;
    for (size_t i = 0; i < res[0].size(); ++i) differ += res[0][i] != res[1][i];
    RecordProperty("differing_" + tc.a.to_string(), static_cast<int>(differ));
  }
  ts::set_num_threads(0);
}

TEST(GemmThreads, CalledInsideAnOpenMPRegion) {
  // A product called from the user's own parallel region gets a team of one thread there
  // (nested parallelism is off): that thread must still compute every block of the split.
  ts::Generator g(1102);
  const auto a = tt::random_tensor<float>({300, 300}, g);
  const auto b = tt::random_tensor<float>({300, 300}, g);
  const auto r = reference_matmul(a, b);
  ts::set_num_threads(2);
  std::vector<float> got[2];
#if defined(_OPENMP)
#pragma omp parallel for num_threads(2)
#endif
  for (int t = 0; t < 2; ++t) got[t] = ts::matmul(a, b).to_vector();
  ts::set_num_threads(0);
  for (int t = 0; t < 2; ++t) {
    std::vector<double> d(got[t].begin(), got[t].end());
    check_values<float>(d, r, std::numeric_limits<float>::epsilon(),
                        "inside a parallel region, iteration " + std::to_string(t));
  }
}

// ---- errors ---------------------------------------------------------------------------------

template <class E, class F>
void expect_error(F f, const std::string& what, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << what << ": no throw";
  } catch (const E& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.rfind("tessera::matmul:", 0), 0u) << what << ": " << m;
    for (const auto& p : parts) EXPECT_NE(m.find(p), std::string::npos) << what << ": " << m;
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": wrong exception: " << e.what();
  }
}

TEST(MatmulErrors, ShapesAndDtypes) {
  auto f = [](ts::Shape s) { return ts::ones<float>(s); };
  expect_error<ts::shape_error>(
      [&] {
        (void)ts::matmul(f({2, 3}), f({4, 5}));
      },
      "k mismatch", {"[2, 3]", "[4, 5]"});
  expect_error<ts::shape_error>([&] { (void)ts::matmul(f({3}), f({4})); }, "1-D k mismatch",
                                {"[3]", "[4]"});
  expect_error<ts::shape_error>(
      [&] {
        (void)ts::matmul(f({2, 3}), f({2}));
      },
      "2-D x 1-D k", {"[2, 3]", "[2]"});
  expect_error<ts::shape_error>(
      [&] {
        (void)ts::matmul(f({2, 3, 4}), f({3, 4, 5}));
      },
      "batch mismatch", {"[2, 3, 4]", "[3, 4, 5]"});
  expect_error<ts::shape_error>([&] { (void)ts::matmul(f({}), f({3})); }, "rank-0 a", {});
  expect_error<ts::shape_error>([&] { (void)ts::matmul(f({3, 3}), f({})); }, "rank-0 b", {});
  expect_error<ts::dtype_error>(
      [] {
        (void)ts::matmul(ts::ones<bool>({2, 2}), ts::ones<bool>({2, 2}));
      },
      "bool", {});
  expect_error<ts::dtype_error>(
      [] {
        (void)ts::matmul(ts::ones<int32_t>({2, 2}), ts::ones<int32_t>({2, 2}));
      },
      "int32", {});
  expect_error<ts::dtype_error>(
      [] {
        (void)ts::matmul(ts::ones<int64_t>({2, 2}), ts::ones<int64_t>({2, 2}));
      },
      "int64", {});
  expect_error<ts::dtype_error>(
      [] {
        (void)ts::matmul(ts::ones<int8_t>({2, 2}), ts::ones<int32_t>({2, 2}));
      },
      "int8 x int32", {});
  ts::Tensor<float> undefined;
  EXPECT_THROW((void)ts::matmul(undefined, f({2, 2})), ts::error);
}

}  // namespace

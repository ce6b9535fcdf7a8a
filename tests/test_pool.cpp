// Pooling: max_pool2d (values and indices), avg_pool2d, adaptive / global average pooling and
// their backward passes against plain-loop references in double written from PyTorch's
// definitions (not from the library's window helpers). A sweep over kernel 1..3 (square and
// not), stride 1..3, padding 0..kernel/2, dilation 1 and 2, ceil_mode and count_include_pad on
// every dtype, with widths 1..19, 33 and 40 (SIMD tails on either side of the vector paths);
// the vectorised 2x2/2 and 3x3/2 shapes at many widths; non-contiguous inputs, rank 3, zero
// batch, out= forms with aliasing, thread counts, NaN, overlapping windows in backward, and
// every documented error.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.hpp"

namespace {
namespace ts = tessera;

// ---- references (double, PyTorch's definitions) ---------------------------------------------

/// Test-side pooling geometry.
struct geo {
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
  bool ceil_mode = false, count_include_pad = true;
  ts::Pool2dOptions options() const {
    return {.kernel = {kh, kw},
            .stride = {sh, sw},
            .padding = {ph, pw},
            .dilation = {dh, dw},
            .ceil_mode = ceil_mode,
            .count_include_pad = count_include_pad};
  }
  std::string str() const {
    std::ostringstream os;
    os << "k" << kh << "x" << kw << " s" << sh << "x" << sw << " p" << ph << "x" << pw << " d" << dh
       << "x" << dw << (ceil_mode ? " ceil" : "") << (count_include_pad ? "" : " nopad");
    return os.str();
  }
};

/// PyTorch's pooling_output_shape, computed in double.
int64_t ref_extent(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  const double v = static_cast<double>(in + 2 * p - d * (k - 1) - 1) / static_cast<double>(s);
  int64_t o = static_cast<int64_t>(ceil_mode ? std::ceil(v) : std::floor(v)) + 1;
  if (ceil_mode && (o - 1) * s >= in + p) --o;
  return o;
}

struct plane_dims {
  int64_t planes, h, w;
};
plane_dims dims_of(const ts::Shape& s) {
  int64_t planes = 1;
  for (int d = 0; d + 2 < s.rank(); ++d) planes *= s[d];
  return {planes, s[s.rank() - 2], s[s.rank() - 1]};
}
ts::Shape with_hw(ts::Shape s, int64_t h, int64_t w) {
  s[s.rank() - 2] = h, s[s.rank() - 1] = w;
  return s;
}

struct max_ref {
  bool valid = true;  // false: the op must throw shape_error
  ts::Shape shape;
  std::vector<double> values;
  std::vector<int64_t> indices;
};

/// Max pooling by scanning each window in row-major order: the first maximum, NaN always taken.
max_ref reference_max(const std::vector<double>& x, const ts::Shape& in, const geo& g) {
  const auto [planes, h, w] = dims_of(in);
  max_ref r;
  const int64_t oh = ref_extent(h, g.kh, g.sh, g.ph, g.dh, g.ceil_mode);
  const int64_t ow = ref_extent(w, g.kw, g.sw, g.pw, g.dw, g.ceil_mode);
  if (h == 0 || w == 0 || oh <= 0 || ow <= 0) return r.valid = false, r;
  r.shape = with_hw(in, oh, ow);
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t oy = 0; oy < oh; ++oy)
      for (int64_t ox = 0; ox < ow; ++ox) {
        int64_t best = -1;
        double m = 0;
        for (int64_t i = 0; i < g.kh; ++i) {
          const int64_t y = oy * g.sh - g.ph + i * g.dh;
          if (y < 0 || y >= h) continue;
          for (int64_t j = 0; j < g.kw; ++j) {
            const int64_t c = ox * g.sw - g.pw + j * g.dw;
            if (c < 0 || c >= w) continue;
            const double v = x[static_cast<size_t>(p * h * w + y * w + c)];
            if (best < 0 || v > m || std::isnan(v)) m = v, best = y * w + c;
          }
        }
        if (best < 0) return r.valid = false, r;  // a window of padding only
        r.values.push_back(m);
        r.indices.push_back(best);
      }
  return r;
}

struct avg_ref {
  bool valid = true;
  ts::Shape shape;
  std::vector<double> values;
};

/// Average pooling: sum of the window's input elements / PyTorch's divisor.
avg_ref reference_avg(const std::vector<double>& x, const ts::Shape& in, const geo& g) {
  const auto [planes, h, w] = dims_of(in);
  avg_ref r;
  const int64_t oh = ref_extent(h, g.kh, g.sh, g.ph, 1, g.ceil_mode);
  const int64_t ow = ref_extent(w, g.kw, g.sw, g.pw, 1, g.ceil_mode);
  if (h == 0 || w == 0 || oh <= 0 || ow <= 0) return r.valid = false, r;
  r.shape = with_hw(in, oh, ow);
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t oy = 0; oy < oh; ++oy)
      for (int64_t ox = 0; ox < ow; ++ox) {
        const int64_t y0 = oy * g.sh - g.ph, x0 = ox * g.sw - g.pw;
        const int64_t y1 = std::min(y0 + g.kh, h + g.ph), x1 = std::min(x0 + g.kw, w + g.pw);
        const int64_t pool = (y1 - y0) * (x1 - x0);
        double s = 0;
        int64_t n = 0;
        for (int64_t y = std::max<int64_t>(y0, 0); y < std::min(y1, h); ++y)
          for (int64_t c = std::max<int64_t>(x0, 0); c < std::min(x1, w); ++c)
            s += x[static_cast<size_t>(p * h * w + y * w + c)], ++n;
        r.values.push_back(s / static_cast<double>(g.count_include_pad ? pool : n));
      }
  return r;
}

/// Adaptive bins: [floor(i * in / out), ceil((i + 1) * in / out)).
std::pair<int64_t, int64_t> bin(int64_t i, int64_t in, int64_t out) {
  return {static_cast<int64_t>(std::floor(static_cast<double>(i * in) / static_cast<double>(out))),
          static_cast<int64_t>(
              std::ceil(static_cast<double>((i + 1) * in) / static_cast<double>(out)))};
}

avg_ref reference_adaptive(const std::vector<double>& x, const ts::Shape& in, int64_t oh,
                           int64_t ow) {
  const auto [planes, h, w] = dims_of(in);
  avg_ref r;
  r.shape = with_hw(in, oh, ow);
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t oy = 0; oy < oh; ++oy)
      for (int64_t ox = 0; ox < ow; ++ox) {
        const auto [y0, y1] = bin(oy, h, oh);
        const auto [x0, x1] = bin(ox, w, ow);
        double s = 0;
        for (int64_t y = y0; y < y1; ++y)
          for (int64_t c = x0; c < x1; ++c) s += x[static_cast<size_t>(p * h * w + y * w + c)];
        r.values.push_back(s / static_cast<double>((y1 - y0) * (x1 - x0)));
      }
  return r;
}

/// Max backward: zeros of the input shape, each gradient added at its index.
std::vector<double> reference_max_backward(const std::vector<double>& gy,
                                           const std::vector<int64_t>& idx, const ts::Shape& in,
                                           int64_t ohw) {
  const auto [planes, h, w] = dims_of(in);
  std::vector<double> gx(static_cast<size_t>(planes * h * w), 0.0);
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t k = 0; k < ohw; ++k)
      gx[static_cast<size_t>(p * h * w + idx[p * ohw + k])] += gy[p * ohw + k];
  return gx;
}

/// Average backward: each gradient / divisor added over its window's input elements.
std::vector<double> reference_avg_backward(const std::vector<double>& gy, const ts::Shape& in,
                                           const geo& g, int64_t oh, int64_t ow) {
  const auto [planes, h, w] = dims_of(in);
  std::vector<double> gx(static_cast<size_t>(planes * h * w), 0.0);
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t oy = 0; oy < oh; ++oy)
      for (int64_t ox = 0; ox < ow; ++ox) {
        const int64_t y0 = oy * g.sh - g.ph, x0 = ox * g.sw - g.pw;
        const int64_t y1 = std::min(y0 + g.kh, h + g.ph), x1 = std::min(x0 + g.kw, w + g.pw);
        const int64_t ya = std::max<int64_t>(y0, 0), yb = std::min(y1, h);
        const int64_t xa = std::max<int64_t>(x0, 0), xb = std::min(x1, w);
        const int64_t div = g.count_include_pad ? (y1 - y0) * (x1 - x0) : (yb - ya) * (xb - xa);
        const double v =
            gy[static_cast<size_t>((p * oh + oy) * ow + ox)] / static_cast<double>(div);
        for (int64_t y = ya; y < yb; ++y)
          for (int64_t c = xa; c < xb; ++c) gx[static_cast<size_t>(p * h * w + y * w + c)] += v;
      }
  return gx;
}

std::vector<double> reference_adaptive_backward(const std::vector<double>& gy, const ts::Shape& in,
                                                int64_t oh, int64_t ow) {
  const auto [planes, h, w] = dims_of(in);
  std::vector<double> gx(static_cast<size_t>(planes * h * w), 0.0);
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t oy = 0; oy < oh; ++oy)
      for (int64_t ox = 0; ox < ow; ++ox) {
        const auto [y0, y1] = bin(oy, h, oh);
        const auto [x0, x1] = bin(ox, w, ow);
        const double v = gy[static_cast<size_t>((p * oh + oy) * ow + ox)] /
                         static_cast<double>((y1 - y0) * (x1 - x0));
        for (int64_t y = y0; y < y1; ++y)
          for (int64_t c = x0; c < x1; ++c) gx[static_cast<size_t>(p * h * w + y * w + c)] += v;
      }
  return gx;
}

// ---- helpers --------------------------------------------------------------------------------

/// Integer values in [lo, hi], exact in every dtype tested (sums of a few of them too).
template <class T>
ts::Tensor<T> int_valued(const ts::Shape& s, ts::Generator& g, int64_t lo = -8, int64_t hi = 8) {
  if constexpr (std::is_unsigned_v<T>) lo = 0;
  return ts::randint<T>(lo, hi + 1, s, g);
}

/// Rounds a double reference to T and back (what an exact result stored in T reads as).
template <class T>
std::vector<double> rounded(const std::vector<double>& v) {
  std::vector<double> r(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    r[i] = static_cast<double>(static_cast<ts::compute_t<T>>(static_cast<T>(v[i])));
  return r;
}

void expect_indices(const ts::Tensor<int64_t>& got, const std::vector<int64_t>& want,
                    const std::string& what) {
  const auto v = got.to_vector();
  ASSERT_EQ(v.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < v.size() && bad < 5; ++i)
    if (v[i] != want[i]) {
      ++bad;
      ADD_FAILURE() << what << " index " << i << ": got " << v[i] << ", want " << want[i];
    }
}

/// Error test: E is thrown and the message starts with "tessera::<op>:" and contains parts.
template <class E, class F>
void expect_error(F f, const std::string& op, const std::vector<std::string>& parts = {}) {
  try {
    f();
    ADD_FAILURE() << op << ": no throw";
  } catch (const E& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.rfind("tessera::" + op + ":", 0), 0u) << m;
    for (const auto& p : parts) EXPECT_NE(m.find(p), std::string::npos) << op << ": " << m;
  } catch (const std::exception& e) {
    ADD_FAILURE() << op << ": wrong exception type: " << e.what();
  }
}

/// The sweep's geometries: kernel 1..3 per axis, stride 1..3, padding 0 or 1 (where allowed),
/// dilation 1 or 2, ceil_mode off and on.
std::vector<geo> sweep_geos(bool with_dilation) {
  std::vector<geo> v;
  for (int64_t kh = 1; kh <= 3; ++kh)
    for (int64_t kw = 1; kw <= 3; ++kw)
      for (int64_t s = 1; s <= 3; ++s)
        for (int64_t p = 0; p <= 1; ++p)
          for (int64_t d = 1; d <= (with_dilation ? 2 : 1); ++d)
            for (bool c : {false, true}) {
              geo g;
              g.kh = kh, g.kw = kw, g.sh = s, g.sw = kh == kw ? s : 4 - s;
              g.ph = std::min(p, kh / 2), g.pw = std::min(p, kw / 2);
              if (p == 1 && g.ph == 0 && g.pw == 0) continue;
              g.dh = d, g.dw = kh == 1 ? 1 : d;
              g.ceil_mode = c;
              g.count_include_pad = (kh + kw + s) % 2 == 0;
              v.push_back(g);
            }
  return v;
}
/// Spatial sizes: every width 1..19 plus 33 and 40, heights cycling through a few values.
std::vector<std::pair<int64_t, int64_t>> sweep_sizes() {
  std::vector<std::pair<int64_t, int64_t>> v;
  const int64_t hs[] = {1, 2, 3, 5, 8, 4, 7};
  int i = 0;
  for (int64_t w = 1; w <= 19; ++w) v.push_back({hs[i++ % 7], w});
  v.push_back({6, 33});
  v.push_back({3, 40});
  return v;
}

template <class T>
class PoolFloating : public ::testing::Test {};
using FloatingTypes = ::testing::Types<float, double, ts::half, ts::bfloat16>;
TYPED_TEST_SUITE(PoolFloating, FloatingTypes);

template <class T>
class PoolMaxTypes : public ::testing::Test {};
using MaxTypes =
    ::testing::Types<float, double, ts::half, ts::bfloat16, int8_t, uint8_t, int32_t, int64_t>;
TYPED_TEST_SUITE(PoolMaxTypes, MaxTypes);

// ---- max pooling ----------------------------------------------------------------------------

/// max_pool2d, max_pool2d_with_indices and (floating T) max_pool2d_backward of x against the
/// references; expects shape_error where the reference says the geometry is invalid.
template <class T>
void check_max(const ts::Tensor<T>& x, const geo& g, ts::Generator& gen, const std::string& what) {
  const auto xd = tt::to_doubles(x);
  const max_ref r = reference_max(xd, x.shape(), g);
  if (!r.valid) {
    EXPECT_THROW((void)ts::max_pool2d(x, g.options()), ts::shape_error) << what;
    EXPECT_THROW((void)ts::max_pool2d_with_indices(x, g.options()), ts::shape_error) << what;
    return;
  }
  const auto [v, i] = ts::max_pool2d_with_indices(x, g.options());
  ASSERT_EQ(v.shape(), r.shape) << what;
  ASSERT_EQ(i.shape(), r.shape) << what;
  tt::expect_close(tt::to_doubles(v), r.values, 0, what + " values");
  expect_indices(i, r.indices, what + " indices");
  const auto plain = ts::max_pool2d(x, g.options());
  ASSERT_EQ(plain.shape(), r.shape) << what;
  tt::expect_close(tt::to_doubles(plain), r.values, 0, what + " values (no indices)");
  if constexpr (ts::is_floating_v<T>) {
    const auto gy = int_valued<T>(r.shape, gen);
    const auto gx = ts::max_pool2d_backward(gy, i, x.shape());
    ASSERT_EQ(gx.shape(), x.shape()) << what;
    const int64_t ohw = r.shape[r.shape.rank() - 2] * r.shape[r.shape.rank() - 1];
    tt::expect_close(tt::to_doubles(gx),
                     reference_max_backward(tt::to_doubles(gy), r.indices, x.shape(), ohw), 0,
                     what + " backward");
  }
}

TYPED_TEST(PoolMaxTypes, SweepAgainstReference) {
  using T = TypeParam;
  ts::Generator gen(11);
  for (const auto& [h, w] : sweep_sizes()) {
    // Integer-valued data has many ties: the first maximum must win. Real data elsewhere.
    const auto x = int_valued<T>({2, 3, h, w}, gen, -4, 4);
    for (const geo& g : sweep_geos(true)) {
      check_max(x, g, gen,
                "[2, 3, " + std::to_string(h) + ", " + std::to_string(w) + "] " + g.str());
      if (::testing::Test::HasFailure()) return;
    }
  }
}

TYPED_TEST(PoolFloating, MaxRealValuesAndVectorPaths) {
  using T = TypeParam;
  ts::Generator gen(12);
  // The shapes the vector kernels take (2- and 3-wide windows, stride 2) at widths around and
  // between multiples of 8 outputs, odd and even heights, with padding and ceil_mode.
  std::vector<geo> gs;
  for (int64_t k : {2, 3})
    for (int64_t p = 0; p <= 1; ++p)
      for (bool c : {false, true}) {
        geo g;
        g.kh = g.kw = k, g.sh = g.sw = 2, g.ph = g.pw = p, g.ceil_mode = c;
        gs.push_back(g);
      }
  geo tall;  // 3 rows, stride 1 vertically, 2-wide windows stride 2 horizontally
  tall.kh = 3, tall.kw = 2, tall.sh = 1, tall.sw = 2, tall.dh = 2;
  gs.push_back(tall);
  for (int64_t w = 15; w <= 52; ++w) {
    const int64_t h = 2 + w % 6;
    const auto x = ts::rand<T>({1, 2, h, w}, gen, -3, 3);
    for (const geo& g : gs) {
      check_max(x, g, gen,
                "[1, 2, " + std::to_string(h) + ", " + std::to_string(w) + "] " + g.str());
      if (::testing::Test::HasFailure()) return;
    }
  }
}

TYPED_TEST(PoolFloating, MaxNaNPropagatesAndLastNaNIsTheIndex) {
  using T = TypeParam;
  const T nan = static_cast<T>(std::numeric_limits<float>::quiet_NaN());
  for (int64_t w : {4, 20, 40}) {  // scalar and vector paths
    auto x = ts::full<T>({1, 1, 4, w}, T(1));
    x(0, 0, 0, 1) = nan;  // window (0, 0) of 2x2/2: NaN at flat 1 and 1 * w + 1
    x(0, 0, 1, 1) = nan;
    x(0, 0, 1, 2) = T(5);  // window (0, 1): a plain maximum
    x(0, 0, 3, w - 1) = nan;
    for (int64_t k : {2, 3}) {
      geo g;
      g.kh = g.kw = k, g.sh = g.sw = 2;
      ts::Generator gen(1);
      check_max(x, g, gen, "NaN w=" + std::to_string(w) + " k=" + std::to_string(k));
    }
    const auto [v, i] = ts::max_pool2d_with_indices(x, {.kernel = {2, 2}});
    EXPECT_TRUE(std::isnan(static_cast<double>(static_cast<float>(v(0, 0, 0, 0)))));
    EXPECT_EQ(i(0, 0, 0, 0), w + 1);
    EXPECT_EQ(static_cast<float>(v(0, 0, 0, 1)), 5.f);
    EXPECT_TRUE(std::isnan(static_cast<double>(static_cast<float>(v(0, 0, 1, w / 2 - 1)))));
    EXPECT_TRUE(std::isnan(static_cast<double>(
        static_cast<float>(ts::avg_pool2d(x, {.kernel = {2, 2}})(0, 0, 0, 0)))));
  }
  // All -inf: the value is -inf and the index the window's first element.
  const T ninf = static_cast<T>(-std::numeric_limits<float>::infinity());
  const auto x = ts::full<T>({1, 1, 4, 20}, ninf);
  const auto [v, i] = ts::max_pool2d_with_indices(x, {.kernel = {2, 2}});
  for (int64_t ox = 0; ox < 10; ++ox) {
    EXPECT_EQ(static_cast<float>(v(0, 0, 1, ox)), -std::numeric_limits<float>::infinity());
    EXPECT_EQ(i(0, 0, 1, ox), 2 * 20 + 2 * ox);
  }
}

TEST(PoolMax, CeilModeRule) {
  // ceil_mode keeps a last window only if it starts inside the input or its left padding.
  auto x = ts::arange<float>(9).reshape({1, 1, 3, 3});
  // 3 + 2 - 1 - 1 = 3, ceil(3 / 2) + 1 = 3, but window 2 would start at 2 * 2 - 1 = 3 (right
  // padding): dropped, 2 outputs.
  EXPECT_EQ(
      ts::max_pool2d(x, {.kernel = {2, 2}, .stride = {2, 2}, .padding = {1, 1}, .ceil_mode = true})
          .shape(),
      (ts::Shape{1, 1, 2, 2}));
  // Without padding, the third window starts at 2 < 3: kept (and partial).
  auto y = ts::max_pool2d(x, {.kernel = {2, 2}, .ceil_mode = true});
  EXPECT_EQ(y.shape(), (ts::Shape{1, 1, 2, 2}));
  EXPECT_EQ(y(0, 0, 1, 1), 8.f);
  auto x5 = ts::arange<float>(25).reshape({1, 1, 5, 5});
  EXPECT_EQ(ts::max_pool2d(x5, {.kernel = {2, 2}}).shape(), (ts::Shape{1, 1, 2, 2}));
  auto y5 = ts::max_pool2d(x5, {.kernel = {2, 2}, .ceil_mode = true});
  EXPECT_EQ(y5.shape(), (ts::Shape{1, 1, 3, 3}));
  EXPECT_EQ(y5(0, 0, 2, 2), 24.f);
  EXPECT_EQ(ts::max_pool2d(x5, {.kernel = {3, 3}, .stride = {3, 3}, .ceil_mode = true}).shape(),
            (ts::Shape{1, 1, 2, 2}));
  // avg: the partial last window divides by the part inside the padded input.
  auto a5 = ts::avg_pool2d(x5, {.kernel = {2, 2}, .ceil_mode = true});
  EXPECT_EQ(a5(0, 0, 2, 2), 24.f);
  EXPECT_EQ(a5(0, 0, 0, 2), (4.f + 9.f) / 2.f);
}

TYPED_TEST(PoolMaxTypes, BackwardOverlappingWindowsAccumulate) {
  using T = TypeParam;
  if constexpr (ts::is_floating_v<T>) {
    ts::Generator gen(13);
    // Constant input: every window's first element wins, and windows overlap (stride < kernel).
    const auto x = ts::full<T>({2, 2, 6, 7}, T(1));
    for (int64_t s : {1, 2}) {
      geo g;
      g.kh = g.kw = 3, g.sh = g.sw = s, g.ph = g.pw = 1;
      check_max(x, g, gen, "overlap s=" + std::to_string(s));
    }
    // Hand-built: all four outputs point at one element.
    const auto gy = ts::from_vector<T>({T(1), T(2), T(3), T(4)}, {1, 1, 2, 2});
    const auto idx = ts::from_vector<int64_t>({4, 4, 4, 4}, {1, 1, 2, 2});
    const auto gx = ts::max_pool2d_backward(gy, idx, {1, 1, 3, 3});
    EXPECT_EQ(static_cast<float>(gx(0, 0, 1, 1)), 10.f);
    EXPECT_EQ(static_cast<float>(gx(0, 0, 0, 0)), 0.f);
  }
}

TYPED_TEST(PoolFloating, MaxBackwardAnyIndices) {
  // Indices are only required to lie in their plane: ones outside their own window (even
  // pointing into another window, so two outputs share an element) must scatter exactly, also
  // where the geometry looks like 2x2/2 pooling (oh = h / 2, ow = w / 2) and a kernel writes
  // windows directly until it meets such an index.
  using T = TypeParam;
  ts::Generator gen(14);
  for (auto [h, w] : std::vector<std::pair<int64_t, int64_t>>{{8, 40}, {7, 35}, {4, 6}}) {
    const ts::Shape in{2, 3, h, w};
    const auto x = ts::rand<T>(in, gen, -3, 3);
    const auto [v, i] = ts::max_pool2d_with_indices(x, {.kernel = {2, 2}});
    const auto gy = int_valued<T>(v.shape(), gen);
    const int64_t ohw = v.shape()[2] * v.shape()[3];
    auto check = [&](const ts::Tensor<int64_t>& idx, const std::string& what) {
      tt::expect_close(tt::to_doubles(ts::max_pool2d_backward(gy, idx, in)),
                       reference_max_backward(tt::to_doubles(gy), idx.to_vector(), in, ohw), 0,
                       what);
    };
    check(i, "2x2 indices");
    auto moved = i.clone();
    moved(1, 2, v.shape()[2] - 1, v.shape()[3] - 1) = 0;  // the last window's gradient to (0, 0)
    moved(0, 1, 0, 0) = h * w - 1;
    check(moved, "indices outside their windows");
    auto bad = i.clone();
    bad(1, 0, 1, v.shape()[3] - 1) = h * w;  // one past the plane, in a late block
    EXPECT_THROW((void)ts::max_pool2d_backward(gy, bad, in), ts::index_error);
    bad(1, 0, 1, v.shape()[3] - 1) = (int64_t{1} << 32) + i(1, 0, 1, v.shape()[3] - 1);
    EXPECT_THROW((void)ts::max_pool2d_backward(gy, bad, in), ts::index_error) << "2^32 + valid";
    bad(1, 0, 1, v.shape()[3] - 1) = -1;
    EXPECT_THROW((void)ts::max_pool2d_backward(gy, bad, in), ts::index_error);
  }
}

// ---- average pooling ------------------------------------------------------------------------

template <class T>
void check_avg(const ts::Tensor<T>& x, const geo& g, ts::Generator& gen, double rel,
               const std::string& what) {
  const auto xd = tt::to_doubles(x);
  const avg_ref r = reference_avg(xd, x.shape(), g);
  if (!r.valid) {
    EXPECT_THROW((void)ts::avg_pool2d(x, g.options()), ts::shape_error) << what;
    return;
  }
  const auto y = ts::avg_pool2d(x, g.options());
  ASSERT_EQ(y.shape(), r.shape) << what;
  tt::expect_close(tt::to_doubles(y), rounded<T>(r.values), rel, what);
  const auto gy = int_valued<T>(r.shape, gen);
  const auto gx = ts::avg_pool2d_backward(gy, x.shape(), g.options());
  ASSERT_EQ(gx.shape(), x.shape()) << what;
  const auto want = reference_avg_backward(
      tt::to_doubles(gy), x.shape(), g, r.shape[r.shape.rank() - 2], r.shape[r.shape.rank() - 1]);
  // Each term g / divisor is rounded in float before up to kh * kw of them add up.
  const double brel = std::is_same_v<T, float> ? 2e-5 : tt::tolerance<T>();
  tt::expect_close(tt::to_doubles(gx), rounded<T>(want), brel, what + " backward");
}

TYPED_TEST(PoolFloating, AvgSweepAgainstReference) {
  using T = TypeParam;
  ts::Generator gen(21);
  // Integer data: window sums are exact, so the result is the reference rounded once (within the
  // rounding of the float quotient before the final rounding to T).
  for (const auto& [h, w] : sweep_sizes()) {
    const auto x = int_valued<T>({2, 3, h, w}, gen);
    for (const geo& g : sweep_geos(false)) {
      check_avg(x, g, gen, tt::tolerance<T>(),
                "[2, 3, " + std::to_string(h) + ", " + std::to_string(w) + "] " + g.str());
      if (::testing::Test::HasFailure()) return;
    }
  }
}

TYPED_TEST(PoolFloating, AvgRealValuesAndVectorPaths) {
  using T = TypeParam;
  ts::Generator gen(22);
  std::vector<geo> gs;
  for (int64_t k : {2, 3})
    for (int64_t p = 0; p <= 1; ++p)
      for (bool c : {false, true})
        for (bool cip : {false, true}) {
          geo g;
          g.kh = g.kw = k, g.sh = g.sw = 2, g.ph = g.pw = p, g.ceil_mode = c;
          g.count_include_pad = cip;
          gs.push_back(g);
        }
  for (int64_t w = 15; w <= 52; ++w) {
    const int64_t h = 2 + w % 6;
    const auto x = ts::rand<T>({1, 2, h, w}, gen, -3, 3);
    for (const geo& g : gs) {
      // Sums of <= 9 values of magnitude <= 3 in float: a few float ulps on top of T's rounding.
      check_avg(x, g, gen, tt::tolerance<T>() + 1e-6,
                "[1, 2, " + std::to_string(h) + ", " + std::to_string(w) + "] " + g.str());
      if (::testing::Test::HasFailure()) return;
    }
  }
}

// ---- adaptive and global average pooling ----------------------------------------------------

TYPED_TEST(PoolFloating, AdaptiveAgainstReference) {
  using T = TypeParam;
  ts::Generator gen(31);
  const std::vector<std::array<int64_t, 4>> cases = {
      // h, w, oh, ow: bins that do not divide, overlap, grow, and the global case
      {7, 7, 3, 3},   {5, 5, 2, 2},  {7, 5, 3, 2}, {6, 6, 3, 3},  {3, 4, 5, 7}, {1, 1, 2, 3},
      {10, 13, 4, 5}, {9, 33, 1, 1}, {7, 7, 1, 1}, {1, 19, 1, 4}, {8, 8, 8, 8}, {17, 3, 6, 1}};
  for (const auto& c : cases) {
    const auto x = int_valued<T>({2, 3, c[0], c[1]}, gen);
    const std::string what = "[2, 3, " + std::to_string(c[0]) + ", " + std::to_string(c[1]) +
                             "] -> [" + std::to_string(c[2]) + ", " + std::to_string(c[3]) + "]";
    const auto r = reference_adaptive(tt::to_doubles(x), x.shape(), c[2], c[3]);
    const auto y = ts::adaptive_avg_pool2d(x, {c[2], c[3]});
    ASSERT_EQ(y.shape(), r.shape) << what;
    tt::expect_close(tt::to_doubles(y), rounded<T>(r.values), tt::tolerance<T>(), what);
    const auto gy = int_valued<T>(r.shape, gen);
    const auto gx = ts::adaptive_avg_pool2d_backward(gy, x.shape());
    ASSERT_EQ(gx.shape(), x.shape()) << what;
    tt::expect_close(
        tt::to_doubles(gx),
        rounded<T>(reference_adaptive_backward(tt::to_doubles(gy), x.shape(), c[2], c[3])),
        tt::tolerance<T>(), what + " backward");
  }
}

TYPED_TEST(PoolFloating, GlobalAveragePool) {
  using T = TypeParam;
  ts::Generator gen(32);
  for (auto [h, w] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 1}, {7, 7}, {3, 5}, {1, 33}, {56, 56}, {9, 17}, {2, 31}}) {
    const auto x = int_valued<T>({3, 5, h, w}, gen);
    const auto r = reference_adaptive(tt::to_doubles(x), x.shape(), 1, 1);
    const auto y = ts::global_avg_pool2d(x);
    ASSERT_EQ(y.shape(), (ts::Shape{3, 5, 1, 1}));
    tt::expect_close(tt::to_doubles(y), rounded<T>(r.values), tt::tolerance<T>(),
                     "global " + std::to_string(h) + "x" + std::to_string(w));
    tt::expect_close(tt::to_doubles(ts::adaptive_avg_pool2d(x, {1, 1})), tt::to_doubles(y), 0,
                     "adaptive {1, 1} is global");
    // Real values: the mean within float accumulation error.
    const auto xr = ts::rand<T>({2, 3, h, w}, gen, -3, 3);
    const auto rr = reference_adaptive(tt::to_doubles(xr), xr.shape(), 1, 1);
    tt::expect_close(tt::to_doubles(ts::global_avg_pool2d(xr)), rr.values,
                     tt::tolerance<T>() + 2e-6, "global real");
  }
}

// ---- layouts, ranks, sizes, out= ------------------------------------------------------------

/// Every op on x (a view) must equal the op on x's contiguous copy.
template <class T>
void expect_same_as_contiguous(const ts::Tensor<T>& x, const std::string& what) {
  const auto c = x.contiguous().clone();
  const ts::Pool2dOptions o3{.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}};
  const ts::Pool2dOptions o2{.kernel = {2, 2}};
  for (const auto& o : {o2, o3}) {
    const auto [v, i] = ts::max_pool2d_with_indices(x, o);
    const auto [cv, ci] = ts::max_pool2d_with_indices(c, o);
    tt::expect_close(tt::to_doubles(v), tt::to_doubles(cv), 0, what + " max");
    expect_indices(i, ci.to_vector(), what + " max indices");
    tt::expect_close(tt::to_doubles(ts::avg_pool2d(x, o)), tt::to_doubles(ts::avg_pool2d(c, o)), 0,
                     what + " avg");
  }
  tt::expect_close(tt::to_doubles(ts::adaptive_avg_pool2d(x, {3, 2})),
                   tt::to_doubles(ts::adaptive_avg_pool2d(c, {3, 2})), 0, what + " adaptive");
  tt::expect_close(tt::to_doubles(ts::global_avg_pool2d(x)),
                   tt::to_doubles(ts::global_avg_pool2d(c)), 0, what + " global");
}

TYPED_TEST(PoolFloating, NonContiguousInputs) {
  using T = TypeParam;
  ts::Generator gen(41);
  const auto x = ts::rand<T>({2, 3, 9, 21}, gen, -3, 3);
  expect_same_as_contiguous(tt::relayout(x, tt::layout::transposed), "transposed storage");
  expect_same_as_contiguous(tt::relayout(x, tt::layout::strided), "every other column");
  // Channels-last storage viewed as NCHW, and a window cut out of a larger tensor.
  expect_same_as_contiguous(x.permute({0, 2, 3, 1}).contiguous().permute({0, 3, 1, 2}),
                            "channels-last");
  const auto big = ts::rand<T>({3, 4, 12, 30}, gen, -3, 3);
  expect_same_as_contiguous(big.slice(0, 1, 3).slice(1, 1, 4).slice(2, 2, 11).slice(3, 3, 24),
                            "sliced");
  // Broadcast (stride 0) input.
  expect_same_as_contiguous(ts::rand<T>({1, 1, 9, 21}, gen).expand({2, 3, 9, 21}), "expanded");
}

TYPED_TEST(PoolMaxTypes, Rank3AndZeroBatch) {
  using T = TypeParam;
  ts::Generator gen(42);
  const auto x = int_valued<T>({3, 7, 10}, gen);
  const ts::Pool2dOptions o{.kernel = {3, 2}, .stride = {2, 1}, .padding = {1, 1}};
  const auto [v3, i3] = ts::max_pool2d_with_indices(x, o);
  const auto [v4, i4] = ts::max_pool2d_with_indices(x.unsqueeze(0), o);
  EXPECT_EQ(v3.shape(), (ts::Shape{3, 4, 11}));
  tt::expect_close(tt::to_doubles(v3), tt::to_doubles(v4), 0, "rank 3 values");
  expect_indices(i3, i4.to_vector(), "rank 3 indices");
  const auto z = ts::zeros<T>({0, 3, 5, 6});
  const auto [vz, iz] = ts::max_pool2d_with_indices(z, {.kernel = {2, 2}});
  EXPECT_EQ(vz.shape(), (ts::Shape{0, 3, 2, 3}));
  EXPECT_EQ(iz.shape(), (ts::Shape{0, 3, 2, 3}));
  EXPECT_EQ(ts::max_pool2d(ts::zeros<T>({4, 0, 5, 6}), {.kernel = {2, 2}}).shape(),
            (ts::Shape{4, 0, 2, 3}));
  if constexpr (ts::is_floating_v<T>) {
    EXPECT_EQ(ts::max_pool2d_backward(vz, iz, z.shape()).shape(), z.shape());
    EXPECT_EQ(ts::avg_pool2d(z, {.kernel = {2, 2}}).shape(), (ts::Shape{0, 3, 2, 3}));
    EXPECT_EQ(ts::avg_pool2d_backward(vz, z.shape(), {.kernel = {2, 2}}).shape(), z.shape());
    EXPECT_EQ(ts::adaptive_avg_pool2d(z, {2, 2}).shape(), (ts::Shape{0, 3, 2, 2}));
    EXPECT_EQ(ts::global_avg_pool2d(z).shape(), (ts::Shape{0, 3, 1, 1}));
    EXPECT_EQ(ts::adaptive_avg_pool2d_backward(ts::zeros<T>({0, 3, 2, 2}), z.shape()).shape(),
              z.shape());
    // Rank 3 for the average ops and backward passes.
    const auto a3 = ts::avg_pool2d(x, o);
    tt::expect_close(tt::to_doubles(a3), tt::to_doubles(ts::avg_pool2d(x.unsqueeze(0), o)), 0,
                     "rank 3 avg");
    const auto gx = ts::max_pool2d_backward(v3, i3, x.shape());
    tt::expect_close(tt::to_doubles(gx),
                     tt::to_doubles(ts::max_pool2d_backward(v4, i4, x.unsqueeze(0).shape())), 0,
                     "rank 3 max backward");
    EXPECT_EQ(ts::global_avg_pool2d(x).shape(), (ts::Shape{3, 1, 1}));
    EXPECT_EQ(ts::avg_pool2d_backward(a3, x.shape(), o).shape(), x.shape());
    EXPECT_EQ(ts::adaptive_avg_pool2d_backward(ts::ones<T>({3, 2, 4}), x.shape()).shape(),
              x.shape());
  }
}

TEST(PoolOut, WritesIntoOutAnyLayoutAndAliasing) {
  ts::Generator gen(51);
  const auto x = ts::rand<float>({2, 3, 8, 18}, gen, -3, 3);
  const ts::Pool2dOptions o{.kernel = {2, 2}};
  const auto want = ts::max_pool2d(x, o);
  const auto want_avg = ts::avg_pool2d(x, o);
  // Contiguous out: written in place, returned.
  auto out = ts::full<float>({2, 3, 4, 9}, -1.f);
  const auto& r = ts::max_pool2d(x, o, out);
  EXPECT_EQ(r.data(), out.data());
  tt::expect_close(tt::to_doubles(out), tt::to_doubles(want), 0, "out");
  ts::avg_pool2d(x, o, out);
  tt::expect_close(tt::to_doubles(out), tt::to_doubles(want_avg), 0, "avg out");
  // Strided out: a transposed view.
  auto buf = ts::zeros<float>({2, 3, 9, 4});
  auto tout = buf.transpose(2, 3);
  ts::max_pool2d(x, o, tout);
  tt::expect_close(tt::to_doubles(tout), tt::to_doubles(want), 0, "transposed out");
  // With indices into strided outputs.
  auto ibuf = ts::zeros<int64_t>({2, 3, 9, 4});
  auto iout = ibuf.transpose(2, 3);
  ts::max_pool2d_with_indices(x, o, tout, iout);
  expect_indices(iout, ts::max_pool2d_with_indices(x, o).indices.to_vector(), "indices out");
  // Out overlapping the input: read as if the input were copied first.
  auto y = x.clone();
  auto alias = y.slice(2, 0, 4).slice(3, 0, 9);
  ts::max_pool2d(y, o, alias);
  tt::expect_close(tt::to_doubles(alias), tt::to_doubles(want), 0, "aliased out");
  auto y2 = x.clone();
  auto alias2 = y2.slice(2, 4, 8).slice(3, 9, 18);
  ts::avg_pool2d(y2, o, alias2);
  tt::expect_close(tt::to_doubles(alias2), tt::to_doubles(want_avg), 0, "aliased avg out");
  // Adaptive and global out.
  auto aout = ts::zeros<float>({2, 3, 3, 5});
  ts::adaptive_avg_pool2d(x, {3, 5}, aout);
  tt::expect_close(tt::to_doubles(aout), tt::to_doubles(ts::adaptive_avg_pool2d(x, {3, 5})), 0,
                   "adaptive out");
  auto gout = ts::zeros<float>({2, 3, 1, 1});
  ts::global_avg_pool2d(x, gout);
  tt::expect_close(tt::to_doubles(gout), tt::to_doubles(ts::global_avg_pool2d(x)), 0, "global out");
}

TEST(PoolThreads, LargeInputsAnyThreadCount) {
  ts::Generator gen(61);
  const auto x = ts::rand<float>({3, 5, 37, 75}, gen, -3, 3);
  const auto xd = tt::to_doubles(x);
  const auto small = ts::rand<float>({7, 37, 7, 7}, gen, -3, 3);
  tt::expect_close(tt::to_doubles(ts::global_avg_pool2d(small)),
                   reference_adaptive(tt::to_doubles(small), small.shape(), 1, 1).values, 2e-6,
                   "global, small planes");
  const int saved = ts::get_num_threads();
  std::vector<std::vector<double>> first;
  for (int threads : {1, 2, 3}) {
    ts::set_num_threads(threads);
    std::vector<std::vector<double>> results;
    for (const auto& o : {ts::Pool2dOptions{.kernel = {2, 2}},
                          ts::Pool2dOptions{.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}},
                          ts::Pool2dOptions{.kernel = {3, 3}, .stride = {1, 1}}}) {
      geo g;
      g.kh = o.kernel[0], g.kw = o.kernel[1], g.sh = o.stride[0] ? o.stride[0] : g.kh;
      g.sw = o.stride[1] ? o.stride[1] : g.kw, g.ph = o.padding[0], g.pw = o.padding[1];
      const auto r = reference_max(xd, x.shape(), g);
      const auto [v, i] = ts::max_pool2d_with_indices(x, o);
      tt::expect_close(tt::to_doubles(v), r.values, 0, "threads max");
      expect_indices(i, r.indices, "threads indices");
      const auto a = ts::avg_pool2d(x, o);
      tt::expect_close(tt::to_doubles(a), reference_avg(xd, x.shape(), g).values, 2e-6,
                       "threads avg");
      results.push_back(tt::to_doubles(a));
      const auto gx = ts::max_pool2d_backward(v, i, x.shape());
      results.push_back(tt::to_doubles(gx));
      results.push_back(tt::to_doubles(ts::avg_pool2d_backward(a, x.shape(), o)));
    }
    results.push_back(tt::to_doubles(ts::global_avg_pool2d(x)));
    results.push_back(tt::to_doubles(ts::global_avg_pool2d(small)));  // many small planes
    results.push_back(tt::to_doubles(ts::adaptive_avg_pool2d(x, {7, 9})));
    if (first.empty())
      first = results;
    else
      for (size_t k = 0; k < results.size(); ++k)
        EXPECT_EQ(results[k], first[k])
            << "result " << k << " differs at " << threads << " threads";
  }
  ts::set_num_threads(saved);
}

// ---- errors ---------------------------------------------------------------------------------

TEST(PoolErrors, Options) {
  const auto x = ts::ones<float>({2, 3, 6, 6});
  auto max = [&](ts::Pool2dOptions o) { return [=] { (void)ts::max_pool2d(x, o); }; };
  auto avg = [&](ts::Pool2dOptions o) { return [=] { (void)ts::avg_pool2d(x, o); }; };
  expect_error<ts::shape_error>(max({.kernel = {0, 2}}), "max_pool2d", {"kernel", "[0, 2]"});
  expect_error<ts::shape_error>(max({.kernel = {2, -1}}), "max_pool2d", {"kernel"});
  expect_error<ts::shape_error>(max({.kernel = {2, 2}, .stride = {-1, 1}}), "max_pool2d",
                                {"stride", "[-1, 1]"});
  expect_error<ts::shape_error>(max({.kernel = {2, 2}, .dilation = {0, 1}}), "max_pool2d",
                                {"dilation"});
  expect_error<ts::shape_error>(max({.kernel = {2, 2}, .padding = {-1, 0}}), "max_pool2d",
                                {"padding", "[-1, 0]"});
  expect_error<ts::shape_error>(max({.kernel = {3, 3}, .padding = {2, 1}}), "max_pool2d",
                                {"padding", "[2, 1]", "[3, 3]"});
  expect_error<ts::shape_error>(max({.kernel = {7, 2}}), "max_pool2d",
                                {"too small", "[2, 3, 6, 6]"});
  expect_error<ts::shape_error>(max({.kernel = {3, 3}, .dilation = {3, 3}}), "max_pool2d",
                                {"too small"});
  expect_error<ts::shape_error>(
      [] {
        (void)ts::max_pool2d(
            ts::ones<float>({1, 1, 2, 2}),
            {.kernel = {2, 2}, .stride = {1, 1}, .padding = {1, 1}, .dilation = {3, 3}});
      },
      "max_pool2d", {"only padding"});
  expect_error<ts::shape_error>(
      [&] {
        (void)ts::max_pool2d_with_indices(x, {.kernel = {0, 0}});
      },
      "max_pool2d_with_indices", {"kernel"});
  expect_error<ts::shape_error>(avg({.kernel = {2, 2}, .dilation = {2, 1}}), "avg_pool2d",
                                {"dilation", "[2, 1]"});
  expect_error<ts::shape_error>(avg({.kernel = {2, 2}, .padding = {0, 2}}), "avg_pool2d",
                                {"padding"});
  expect_error<ts::shape_error>(avg({.kernel = {2, 9}}), "avg_pool2d", {"too small"});
}

TEST(PoolErrors, InputsAndDtypes) {
  const ts::Pool2dOptions o{.kernel = {2, 2}};
  expect_error<ts::shape_error>(
      [&] {
        (void)ts::max_pool2d(ts::ones<float>({6, 6}), o);
      },
      "max_pool2d", {"[6, 6]"});
  expect_error<ts::shape_error>(
      [&] {
        (void)ts::max_pool2d(ts::ones<float>({1, 1, 1, 6, 6}), o);
      },
      "max_pool2d", {"[1, 1, 1, 6, 6]"});
  expect_error<ts::shape_error>(
      [&] {
        (void)ts::max_pool2d(ts::ones<float>({1, 2, 0, 6}), o);
      },
      "max_pool2d", {"empty"});
  expect_error<ts::shape_error>(
      [&] {
        (void)ts::avg_pool2d(ts::ones<float>({1, 2, 6, 0}), o);
      },
      "avg_pool2d", {"empty"});
  expect_error<ts::dtype_error>(
      [&] {
        (void)ts::max_pool2d(ts::ones<bool>({1, 1, 4, 4}), o);
      },
      "max_pool2d", {"bool"});
  expect_error<ts::dtype_error>(
      [&] {
        (void)ts::avg_pool2d(ts::ones<int32_t>({1, 1, 4, 4}), o);
      },
      "avg_pool2d", {"int32"});
  expect_error<ts::dtype_error>(
      [&] {
        (void)ts::global_avg_pool2d(ts::ones<int8_t>({1, 1, 4, 4}));
      },
      "global_avg_pool2d", {"int8"});
  expect_error<ts::shape_error>(
      [&] {
        (void)ts::adaptive_avg_pool2d(ts::ones<float>({1, 1, 4, 4}), {0, 2});
      },
      "adaptive_avg_pool2d", {"output_size", "[0, 2]"});
  expect_error<ts::shape_error>(
      [&] {
        (void)ts::adaptive_avg_pool2d(ts::ones<float>({1, 1, 4, 4}), {2, -3});
      },
      "adaptive_avg_pool2d", {"[2, -3]"});
  expect_error<ts::shape_error>(
      [&] {
        (void)ts::adaptive_avg_pool2d(ts::ones<float>({4, 4}), {2, 2});
      },
      "adaptive_avg_pool2d", {"[4, 4]"});
  expect_error<ts::shape_error>(
      [&] {
        (void)ts::global_avg_pool2d(ts::ones<float>({1, 0, 4}));
      },
      "global_avg_pool2d", {"empty"});
  expect_error<ts::shape_error>([&] { (void)ts::global_avg_pool2d(ts::ones<float>({4})); },
                                "global_avg_pool2d", {"[4]"});
  ts::Tensor<float> undefined;
  EXPECT_THROW((void)ts::max_pool2d(undefined, o), ts::error);
  EXPECT_THROW((void)ts::avg_pool2d(undefined, o), ts::error);
  EXPECT_THROW((void)ts::global_avg_pool2d(undefined), ts::error);
}

TEST(PoolErrors, OutParameters) {
  const auto x = ts::ones<float>({2, 3, 6, 6});
  const ts::Pool2dOptions o{.kernel = {2, 2}};
  expect_error<ts::shape_error>(
      [&] {
        ts::max_pool2d(x, o, ts::zeros<float>({2, 3, 3, 4}));
      },
      "max_pool2d", {"[2, 3, 3, 4]", "[2, 3, 3, 3]"});
  expect_error<ts::shape_error>(
      [&] {
        ts::max_pool2d(x, o, ts::zeros<float>({1, 3, 3, 3}).expand({2, 3, 3, 3}));
      },
      "max_pool2d", {"stride 0"});
  expect_error<ts::shape_error>(
      [&] {
        ts::max_pool2d_with_indices(x, o, ts::zeros<float>({2, 3, 3, 3}),
                                    ts::zeros<int64_t>({2, 3, 3}));
      },
      "max_pool2d_with_indices", {"[2, 3, 3]"});
  expect_error<ts::shape_error>(
      [&] {
        ts::avg_pool2d(x, o, ts::zeros<float>({2, 3, 2, 3}));
      },
      "avg_pool2d", {"[2, 3, 2, 3]"});
  expect_error<ts::shape_error>(
      [&] {
        ts::adaptive_avg_pool2d(x, {2, 2}, ts::zeros<float>({2, 3, 3, 3}));
      },
      "adaptive_avg_pool2d", {"[2, 3, 3, 3]"});
  expect_error<ts::shape_error>(
      [&] {
        ts::global_avg_pool2d(x, ts::zeros<float>({2, 3, 1}));
      },
      "global_avg_pool2d", {"[2, 3, 1]"});
}

TEST(PoolErrors, Backward) {
  const auto gy = ts::ones<float>({1, 2, 2, 2});
  const auto idx = ts::zeros<int64_t>({1, 2, 2, 2});
  const ts::Shape in{1, 2, 4, 4};
  expect_error<ts::index_error>(
      [&] {
        auto bad = idx.clone();
        bad(0, 1, 1, 0) = 16;  // one past the plane
        (void)ts::max_pool2d_backward(gy, bad, in);
      },
      "max_pool2d_backward", {"16", "4 x 4"});
  expect_error<ts::index_error>(
      [&] {
        auto bad = idx.clone();
        bad(0, 0, 0, 1) = -1;
        (void)ts::max_pool2d_backward(gy, bad, in);
      },
      "max_pool2d_backward", {"-1"});
  expect_error<ts::shape_error>(
      [&] {
        (void)ts::max_pool2d_backward(gy, ts::zeros<int64_t>({1, 2, 2, 3}), in);
      },
      "max_pool2d_backward", {"[1, 2, 2, 3]"});
  expect_error<ts::shape_error>(
      [&] {
        (void)ts::max_pool2d_backward(gy, idx, ts::Shape{2, 4, 4});
      },
      "max_pool2d_backward", {"rank"});
  expect_error<ts::shape_error>(
      [&] {
        (void)ts::max_pool2d_backward(gy, idx, ts::Shape{1, 3, 4, 4});
      },
      "max_pool2d_backward", {"[1, 3, 4, 4]"});
  expect_error<ts::shape_error>(
      [&] {
        (void)ts::max_pool2d_backward(gy, idx, ts::Shape{1, 2, 0, 4});
      },
      "max_pool2d_backward", {"empty"});
  expect_error<ts::dtype_error>(
      [&] {
        (void)ts::max_pool2d_backward(ts::ones<int32_t>({1, 2, 2, 2}), idx, in);
      },
      "max_pool2d_backward", {"int32"});
  expect_error<ts::shape_error>(
      [&] {
        (void)ts::avg_pool2d_backward(gy, in, {.kernel = {3, 3}});
      },
      "avg_pool2d_backward", {"[1, 2, 2, 2]", "[1, 2, 1, 1]"});
  expect_error<ts::shape_error>(
      [&] {
        (void)ts::avg_pool2d_backward(gy, in, {.kernel = {2, 2}, .dilation = {2, 2}});
      },
      "avg_pool2d_backward", {"dilation"});
  expect_error<ts::shape_error>(
      [&] {
        (void)ts::adaptive_avg_pool2d_backward(gy, ts::Shape{2, 2, 4, 4});
      },
      "adaptive_avg_pool2d_backward", {"[2, 2, 4, 4]"});
  expect_error<ts::shape_error>(
      [&] {
        (void)ts::adaptive_avg_pool2d_backward(ts::ones<float>({2, 2}), ts::Shape{2, 2});
      },
      "adaptive_avg_pool2d_backward", {"[2, 2]"});
}

}  // namespace

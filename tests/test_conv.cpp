// Convolution: conv2d, conv1d and conv_transpose2d and their backward passes against a naive
// direct reference in double written from the definition
//   y[n, k, oh, ow] = bias[k] + sum_{c in k's group, i, j}
//                     x[n, c, oh * sh - pad_top + i * dh, ow * sw - pad_left + j * dw] *
//                     w[k, c - g * C / G, i, j]            (zero outside the input)
// and its adjoints (input and weight gradients; the transposed convolution is the input gradient
// of the convolution whose input has its output shape). oneDNN-style shape sets (ResNet-50 and
// MobileNet layers scaled down, first layers, channel and stride tails, dilation, groups, odd and
// empty sizes, asymmetric and oversized padding, rectangular kernels, few channels per group,
// random geometries, large layers on one and two threads) with small-integer operands, so float
// and double results are exact; half, bfloat16 and fp8 rounded once; exact int8/uint8 into int32
// near the extremes; NaN and Inf confined to their windows; finite differences in double;
// options, out= views and aliasing, non-contiguous operands; the errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

#include "test_util.hpp"
#include "winograd_test_util.hpp"

namespace {
namespace ts = tessera;
using vec = std::vector<double>;

// ---- the reference ------------------------------------------------------------------------------

/// One 2-D convolution as the definition reads it: x [n, c, h, w], weights [k, c / groups, r, s],
/// y [n, k, ho, wo]; ho and wo are stored (not derived) so that a transposed convolution can use
/// its input's size, which may be smaller than what the convolution would give.
struct geom {
  int64_t n = 0, c = 0, h = 0, w = 0;
  int64_t k = 0, r = 1, s = 1;
  int64_t ho = 0, wo = 0;
  int64_t sh = 1, sw = 1, pt = 0, pl = 0, dh = 1, dw = 1, groups = 1;
  int64_t cg() const { return c / groups; }
  int64_t kg() const { return k / groups; }
  ts::Shape x_shape() const { return {n, c, h, w}; }
  ts::Shape w_shape() const { return {k, cg(), r, s}; }
  ts::Shape y_shape() const { return {n, k, ho, wo}; }
};

/// The geometry of conv2d(x, w, opts), with PyTorch's output size.
geom geom_of(const ts::Shape& x, const ts::Shape& w, const ts::Conv2dOptions& o) {
  geom g;
  g.n = x[0], g.c = x[1], g.h = x[2], g.w = x[3], g.k = w[0], g.r = w[2], g.s = w[3];
  g.sh = o.stride[0], g.sw = o.stride[1], g.pt = o.padding[0], g.pl = o.padding[1];
  g.dh = o.dilation[0], g.dw = o.dilation[1], g.groups = o.groups;
  const int64_t pb = o.padding_end[0] == -1 ? o.padding[0] : o.padding_end[0];
  const int64_t pr = o.padding_end[1] == -1 ? o.padding[1] : o.padding_end[1];
  g.ho = (g.h + g.pt + pb - g.dh * (g.r - 1) - 1) / g.sh + 1;
  g.wo = (g.w + g.pl + pr - g.dw * (g.s - 1) - 1) / g.sw + 1;
  return g;
}

/// conv1d as a convolution of unit height.
ts::Conv2dOptions as_2d(const ts::Conv1dOptions& o) {
  return {.stride = {1, o.stride},
          .padding = {0, o.padding},
          .dilation = {1, o.dilation},
          .groups = o.groups,
          .padding_end = {0, o.padding_end},
          .relu = o.relu};
}

/// The convolution whose input gradient conv_transpose2d(x [N, Cin, H, W], w [Cin, Cout / G, R,
/// S]) is: input [N, Cout, Ho, Wo] (Ho = (H - 1) * stride - 2 * pad + dil * (R - 1) +
/// output_padding + 1), weights w read as [K = Cin, Cout / G, R, S], output H x W.
geom transpose_geom_of(const ts::Shape& x, const ts::Shape& w,
                       const ts::ConvTranspose2dOptions& o) {
  geom g;
  g.n = x[0], g.k = x[1], g.c = w[1] * o.groups, g.r = w[2], g.s = w[3], g.groups = o.groups;
  g.ho = x[2], g.wo = x[3];
  g.sh = o.stride[0], g.sw = o.stride[1], g.pt = o.padding[0], g.pl = o.padding[1];
  g.dh = o.dilation[0], g.dw = o.dilation[1];
  g.h = (x[2] - 1) * g.sh - 2 * g.pt + g.dh * (g.r - 1) + o.output_padding[0] + 1;
  g.w = (x[3] - 1) * g.sw - 2 * g.pl + g.dw * (g.s - 1) + o.output_padding[1] + 1;
  return g;
}

/// Calls f(y index, x index, w index) for every term x * w of the sum that defines each output,
/// taps in the padding left out.
template <class F>
void for_each_term(const geom& g, F&& f) {
  const int64_t cg = g.cg(), kg = g.kg();
  for (int64_t b = 0; b < g.n; ++b)
    for (int64_t kk = 0; kk < g.k; ++kk)
      for (int64_t oh = 0; oh < g.ho; ++oh)
        for (int64_t ow = 0; ow < g.wo; ++ow) {
          const int64_t yi = ((b * g.k + kk) * g.ho + oh) * g.wo + ow;
          for (int64_t cl = 0; cl < cg; ++cl) {
            const int64_t ci = kk / kg * cg + cl;
            for (int64_t i = 0; i < g.r; ++i) {
              const int64_t ih = oh * g.sh - g.pt + i * g.dh;
              if (ih < 0 || ih >= g.h) continue;
              for (int64_t j = 0; j < g.s; ++j) {
                const int64_t iw = ow * g.sw - g.pl + j * g.dw;
                if (iw < 0 || iw >= g.w) continue;
                f(yi, ((b * g.c + ci) * g.h + ih) * g.w + iw, ((kk * cg + cl) * g.r + i) * g.s + j);
              }
            }
          }
        }
}

vec ref_forward(const vec& x, const vec& w, const vec* bias, const geom& g, bool relu) {
  vec y(static_cast<size_t>(g.y_shape().numel()), 0.0);
  for_each_term(g, [&](int64_t yi, int64_t xi, int64_t wi) { y[yi] += x[xi] * w[wi]; });
  const int64_t plane = g.ho * g.wo;
  for (size_t i = 0; i < y.size(); ++i) {
    if (bias) y[i] += (*bias)[static_cast<size_t>(static_cast<int64_t>(i) / plane % g.k)];
    if (relu) y[i] = std::max(y[i], 0.0);
  }
  return y;
}
vec ref_backward_input(const vec& dy, const vec& w, const geom& g) {
  vec dx(static_cast<size_t>(g.x_shape().numel()), 0.0);
  for_each_term(g, [&](int64_t yi, int64_t xi, int64_t wi) { dx[xi] += dy[yi] * w[wi]; });
  return dx;
}
vec ref_backward_weight(const vec& dy, const vec& x, const geom& g) {
  vec dw(static_cast<size_t>(g.w_shape().numel()), 0.0);
  for_each_term(g, [&](int64_t yi, int64_t xi, int64_t wi) { dw[wi] += dy[yi] * x[xi]; });
  return dw;
}
/// dy [n, k, ...] summed over every dim but k.
vec ref_bias_grad(const vec& dy, int64_t k, int64_t plane) {
  vec db(static_cast<size_t>(k), 0.0);
  for (size_t i = 0; i < dy.size(); ++i)
    db[static_cast<size_t>(static_cast<int64_t>(i) / plane % k)] += dy[i];
  return db;
}
/// v + bias[c] over [n, c, plane].
vec add_channel_bias(vec v, const vec& bias, int64_t plane) {
  const int64_t c = static_cast<int64_t>(bias.size());
  for (size_t i = 0; i < v.size(); ++i)
    v[i] += bias[static_cast<size_t>(static_cast<int64_t>(i) / plane % c)];
  return v;
}

// ---- values and comparisons ---------------------------------------------------------------------

/// Uniform integers in [lo, hi] clamped to T's range: every one is exact in every dtype used
/// here with the default [-3, 3] (fp8 included), so sums of products are exact in float.
template <class T>
ts::Tensor<T> ints(const ts::Shape& s, ts::Generator& g, int64_t lo = -3, int64_t hi = 3) {
  if constexpr (std::is_integral_v<T>) {
    lo = std::max<int64_t>(lo, std::numeric_limits<T>::min());
    hi = std::min<int64_t>(hi, std::numeric_limits<T>::max());
  }
  return ts::randint<T>(lo, hi + 1, s, g);
}

/// v rounded once to T (the exact result stored in T).
template <class T>
vec round_to(vec v) {
  if constexpr (!std::is_same_v<T, double> && !std::is_integral_v<T>)
    for (auto& e : v) e = static_cast<double>(static_cast<float>(static_cast<T>(e)));
  return v;
}

std::string index_str(int64_t i, const ts::Shape& s) {
  const auto idx = tt::unravel(i, s);
  std::ostringstream os;
  os << "[";
  for (size_t d = 0; d < idx.size(); ++d) os << (d ? ", " : "") << idx[d];
  os << "]";
  return os.str();
}

/// |got - want| <= tol * max(1, |want|) elementwise (tol = 0: exact); reports the first few
/// differences with their index in shape. Returns whether all matched.
bool expect_match(const vec& got, const vec& want, const ts::Shape& shape, const std::string& what,
                  double tol = 0) {
  EXPECT_EQ(got.size(), want.size()) << what;
  if (got.size() != want.size()) return false;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool ok = tol == 0 ? got[i] == want[i]
                             : std::abs(got[i] - want[i]) <= tol * std::max(1.0, std::abs(want[i]));
    if (!ok && ++bad <= 4)
      ADD_FAILURE() << what << ": element " << index_str(static_cast<int64_t>(i), shape) << " of "
                    << shape << ": got " << got[i] << ", want " << want[i];
  }
  if (bad > 4) ADD_FAILURE() << what << ": " << bad << " of " << got.size() << " elements differ";
  return bad == 0;
}

/// A case proves something only when most of its reference is not zero.
void expect_mostly_nonzero(const vec& ref, const std::string& what) {
  if (ref.empty()) return;
  const auto nz = std::count_if(ref.begin(), ref.end(), [](double v) { return v != 0; });
  EXPECT_GE(static_cast<double>(nz), 0.5 * static_cast<double>(ref.size()))
      << what << ": the reference is mostly zeros (" << nz << " of " << ref.size() << " nonzero)";
}

std::string describe(const ts::Conv2dOptions& o) {
  std::ostringstream os;
  os << " stride " << o.stride[0] << "," << o.stride[1] << " pad " << o.padding[0] << ","
     << o.padding[1] << " pad_end " << o.padding_end[0] << "," << o.padding_end[1] << " dil "
     << o.dilation[0] << "," << o.dilation[1] << " groups " << o.groups << (o.relu ? " relu" : "");
  return os.str();
}

template <class T>
std::string name_of() {
  return std::string(ts::dtype_name<T>);
}

// ---- one shape case, every pass -----------------------------------------------------------------

struct conv_case {
  std::string name;
  ts::Shape x, w;
  ts::Conv2dOptions o{};
  int sparse = 0;  // results zero in most places by construction (sparse_y/dx/dw), unchecked
};
/// Results that are mostly zero by construction: outputs that see only padding, input pixels
/// that a stride skips, kernel taps that only ever read padding.
constexpr int sparse_y = 1, sparse_dx = 2, sparse_dw = 4;

/// conv2d(x, w) and conv2d(x, w, bias) of TX by TW and, for floating types, the three
/// gradients, each against the reference rounded once to its dtype. Integer operands span
/// [lo, hi] (clamped to each type's range). Returns whether everything matched.
template <class TX, class TW>
bool check_case(const conv_case& cc, ts::Generator& gen, int64_t lo = -3, int64_t hi = 3) {
  using TY = ts::conv_t<TX, TW>;
  const std::string what = name_of<TX>() + " x " + name_of<TW>() + " " + cc.name + ": x " +
                           cc.x.to_string() + " w " + cc.w.to_string() + describe(cc.o);
  const geom g = geom_of(cc.x, cc.w, cc.o);
  const auto x = ints<TX>(cc.x, gen, lo, hi);
  const auto w = ints<TW>(cc.w, gen, lo, hi);
  const auto bias =
      std::is_integral_v<TY> ? ints<TY>({cc.w[0]}, gen, -5000, 5000) : ints<TY>({cc.w[0]}, gen);
  const vec xd = tt::to_doubles(x), wd = tt::to_doubles(w), bd = tt::to_doubles(bias);
  bool ok = true;

  const auto y0 = ts::conv2d(x, w, cc.o);
  static_assert(std::is_same_v<typename decltype(y0)::value_type, TY>);
  EXPECT_EQ(y0.shape(), g.y_shape()) << what;
  if (y0.shape() != g.y_shape()) return false;
  const vec want0 = ref_forward(xd, wd, nullptr, g, cc.o.relu);
  if (!(cc.sparse & sparse_y))
    expect_mostly_nonzero(cc.o.relu ? ref_forward(xd, wd, nullptr, g, false) : want0,
                          what + " forward");
  ok &= expect_match(tt::to_doubles(y0), round_to<TY>(want0), g.y_shape(), what + " forward");
  const auto y = ts::conv2d(x, w, bias, cc.o);
  EXPECT_EQ(y.shape(), g.y_shape()) << what;
  if (y.shape() != g.y_shape()) return false;
  ok &= expect_match(tt::to_doubles(y), round_to<TY>(ref_forward(xd, wd, &bd, g, cc.o.relu)),
                     g.y_shape(), what + " forward with bias");

  if constexpr (ts::is_floating_v<TX> && ts::is_floating_v<TW>) {
    const auto dy = ints<TY>(g.y_shape(), gen);
    const vec dyd = tt::to_doubles(dy);
    const auto dx = ts::conv2d_backward_input(dy, w, cc.x, cc.o);
    using TDX = typename decltype(dx)::value_type;
    EXPECT_EQ(dx.shape(), cc.x) << what;
    const vec want_dx = ref_backward_input(dyd, wd, g);
    if (!(cc.sparse & sparse_dx)) expect_mostly_nonzero(want_dx, what + " backward_input");
    ok &= dx.shape() == cc.x &&
          expect_match(tt::to_doubles(dx), round_to<TDX>(want_dx), cc.x, what + " backward_input");

    const auto dw = ts::conv2d_backward_weight(dy, x, cc.w, cc.o);
    using TDW = typename decltype(dw)::value_type;
    EXPECT_EQ(dw.shape(), cc.w) << what;
    const vec want_dw = ref_backward_weight(dyd, xd, g);
    if (g.n > 0 && !(cc.sparse & sparse_dw))
      expect_mostly_nonzero(want_dw, what + " backward_weight");
    ok &= dw.shape() == cc.w &&
          expect_match(tt::to_doubles(dw), round_to<TDW>(want_dw), cc.w, what + " backward_weight");

    const auto db = ts::conv2d_backward_bias(dy);
    EXPECT_EQ(db.shape(), (ts::Shape{g.k})) << what;
    ok &= expect_match(tt::to_doubles(db), round_to<TY>(ref_bias_grad(dyd, g.k, g.ho * g.wo)),
                       ts::Shape{g.k}, what + " backward_bias");
  }
  return ok;
}

/// Runs every case, stopping after 5 failing ones.
template <class TX, class TW = TX>
void run_cases(const std::vector<conv_case>& cases, uint64_t seed, int64_t lo = -3,
               int64_t hi = 3) {
  ts::Generator gen(seed);
  int failed = 0;
  for (const auto& c : cases)
    if (!check_case<TX, TW>(c, gen, lo, hi) && ++failed >= 5) {
      ADD_FAILURE() << "stopping after 5 failing cases";
      return;
    }
}

// ---- shape sets ---------------------------------------------------------------------------------

std::vector<conv_case> resnet_cases() {
  return {
      {"1x1 64->256 (pointwise)", {2, 64, 7, 7}, {256, 64, 1, 1}},
      {"3x3 64->64 pad 1", {2, 64, 8, 8}, {64, 64, 3, 3}, {.padding = {1, 1}}},
      {"1x1 stride 2 downsample", {2, 64, 9, 9}, {128, 64, 1, 1}, {.stride = {2, 2}}, sparse_dx},
      {"3x3 stride 2 pad 1", {2, 32, 9, 9}, {64, 32, 3, 3}, {.stride = {2, 2}, .padding = {1, 1}}},
      {"7x7 stride 2 pad 3 first layer",
       {2, 3, 32, 32},
       {16, 3, 7, 7},
       {.stride = {2, 2}, .padding = {3, 3}}},
  };
}

std::vector<conv_case> mobilenet_cases() {
  return {
      {"depthwise 3x3 pad 1", {2, 32, 10, 10}, {32, 1, 3, 3}, {.padding = {1, 1}, .groups = 32}},
      {"depthwise 3x3 stride 2 pad 1",
       {2, 32, 11, 11},
       {32, 1, 3, 3},
       {.stride = {2, 2}, .padding = {1, 1}, .groups = 32}},
      {"depthwise 3x3, 19 channels (SIMD tail)",
       {1, 19, 9, 7},
       {19, 1, 3, 3},
       {.padding = {1, 1}, .groups = 19}},
      {"depthwise multiplier 2", {2, 8, 8, 8}, {16, 1, 3, 3}, {.padding = {1, 1}, .groups = 8}},
      {"pointwise after depthwise", {2, 32, 6, 6}, {48, 32, 1, 1}},
  };
}

std::vector<conv_case> first_layer_cases() {
  return {
      {"LeNet C=1 28x28 -> 32, 3x3 pad 1", {4, 1, 28, 28}, {32, 1, 3, 3}, {.padding = {1, 1}}},
      {"C=1 5x5 no pad", {2, 1, 12, 12}, {6, 1, 5, 5}},
      {"C=3 3x3 pad 1", {2, 3, 16, 16}, {8, 3, 3, 3}, {.padding = {1, 1}}},
      {"C=3 3x3 stride 2 no pad", {2, 3, 15, 15}, {16, 3, 3, 3}, {.stride = {2, 2}}},
  };
}

std::vector<conv_case> tail_cases() {
  return {
      {"C=13 K=17 3x3", {2, 13, 9, 9}, {17, 13, 3, 3}},
      {"C=17 K=13 3x3 pad 1", {2, 17, 8, 10}, {13, 17, 3, 3}, {.padding = {1, 1}}},
      {"C=19 K=65 1x1", {2, 19, 6, 5}, {65, 19, 1, 1}},
      {"C=65 K=19 3x3 pad 1", {1, 65, 7, 7}, {19, 65, 3, 3}, {.padding = {1, 1}}},
      {"C=65 K=65 1x1 odd pixels", {1, 65, 5, 3}, {65, 65, 1, 1}},
      {"stride 2 on odd 11x13", {2, 5, 11, 13}, {7, 5, 3, 3}, {.stride = {2, 2}}},
      {"stride 2 pad 1 on odd 9x7",
       {2, 6, 9, 7},
       {5, 6, 3, 3},
       {.stride = {2, 2}, .padding = {1, 1}}},
      {"stride 3x2 on 14x11", {1, 4, 14, 11}, {6, 4, 2, 2}, {.stride = {3, 2}}, sparse_dx},
      {"1x1 stride 3 (skipped pixels)",
       {2, 5, 10, 10},
       {6, 5, 1, 1},
       {.stride = {3, 3}},
       sparse_dx},
  };
}

std::vector<conv_case> dilation_group_cases() {
  return {
      {"dilation 2 pad 2", {2, 8, 12, 12}, {8, 8, 3, 3}, {.padding = {2, 2}, .dilation = {2, 2}}},
      {"dilation 2 no pad", {1, 5, 11, 9}, {7, 5, 3, 3}, {.dilation = {2, 2}}},
      {"dilation 2x3 pad 1 stride 2",
       {2, 4, 13, 14},
       {6, 4, 3, 3},
       {.stride = {2, 2}, .padding = {1, 1}, .dilation = {2, 3}},
       sparse_dx},  // stride 2 and dilation 2 reach only the odd rows
      {"groups 2", {2, 8, 9, 9}, {12, 4, 3, 3}, {.padding = {1, 1}, .groups = 2}},
      {"groups 4 stride 2", {2, 16, 7, 7}, {8, 4, 3, 3}, {.stride = {2, 2}, .groups = 4}},
      {"groups 4 1x1 (pointwise, grouped)", {2, 16, 5, 5}, {20, 4, 1, 1}, {.groups = 4}},
      {"groups 2 dilation 2 pad 3",
       {2, 6, 8, 9},
       {4, 3, 3, 3},
       {.padding = {3, 3}, .dilation = {2, 2}, .groups = 2}},
  };
}

std::vector<conv_case> odd_size_cases() {
  return {
      {"7x9 image 3x3", {2, 4, 7, 9}, {5, 4, 3, 3}},
      {"1x1 images, 1x1 kernel", {3, 8, 1, 1}, {6, 8, 1, 1}},
      {"1x1 images, 3x3 kernel pad 1",
       {3, 8, 1, 1},
       {6, 8, 3, 3},
       {.padding = {1, 1}},
       sparse_dw},  // only the centre tap sees the image
      {"W=1, 3x1 kernel pad (1, 0)", {2, 4, 9, 1}, {5, 4, 3, 1}, {.padding = {1, 0}}},
      {"H=1, 1x3 kernel", {2, 4, 1, 11}, {5, 4, 1, 3}},
      {"kernel covers the whole image", {2, 3, 5, 4}, {7, 3, 5, 4}},
      {"1x1 kernel with padding (output larger than input)",
       {2, 5, 4, 6},
       {3, 5, 1, 1},
       {.padding = {1, 2}},
       sparse_y},  // the border rows and columns see only padding
  };
}

std::vector<conv_case> padding_cases() {
  return {
      {"asymmetric padding (1,0) end (2,3)",
       {2, 4, 8, 7},
       {5, 4, 3, 3},
       {.padding = {1, 0}, .padding_end = {2, 3}}},
      {"padding 2, end 0", {2, 4, 7, 8}, {6, 4, 3, 3}, {.padding = {2, 2}, .padding_end = {0, 0}}},
      {"padding 0, end 2 stride 2",
       {2, 4, 9, 8},
       {6, 4, 3, 3},
       {.stride = {2, 2}, .padding_end = {2, 2}}},
      {"1x1 with end padding only", {2, 6, 5, 5}, {4, 6, 1, 1}, {.padding_end = {1, 0}}},
      {"padding 3 > 3x3 kernel", {1, 4, 8, 8}, {5, 4, 3, 3}, {.padding = {3, 3}}},
      {"padding 4 with 2x2 kernel stride 2",
       {2, 3, 6, 6},
       {4, 3, 2, 2},
       {.stride = {2, 2}, .padding = {4, 4}},
       sparse_y},
  };
}

std::vector<conv_case> rect_kernel_cases() {
  return {
      {"1x3", {2, 6, 7, 9}, {8, 6, 1, 3}, {.padding = {0, 1}}},
      {"3x1", {2, 6, 9, 7}, {8, 6, 3, 1}, {.padding = {1, 0}}},
      {"5x2", {2, 5, 11, 8}, {7, 5, 5, 2}},
      {"5x2 stride (2,1) pad (2,1) dilation (1,2)",
       {1, 5, 12, 9},
       {4, 5, 5, 2},
       {.stride = {2, 1}, .padding = {2, 1}, .dilation = {1, 2}}},
      {"2x5 groups 3", {2, 6, 6, 10}, {9, 2, 2, 5}, {.groups = 3}},
  };
}

/// Few input channels per group (first layers, depthwise): register blocks of 4 output channels
/// and of 1 (kg = 5, 9), rows narrower than a vector, rows ending in a partial block, wide
/// strides and dilations, the largest kernel such a path may take (4 channels x 32 x 32) and
/// one beyond it.
std::vector<conv_case> few_channel_cases() {
  return {
      {"depthwise, rows of 37 (last block partial)",
       {1, 8, 5, 37},
       {8, 1, 3, 3},
       {.padding = {1, 1}, .groups = 8}},
      {"depthwise multiplier 4, rows of 21",
       {1, 4, 6, 21},
       {16, 1, 3, 3},
       {.padding = {1, 1}, .groups = 4}},
      {"4 channels per group, kg = 5",
       {2, 8, 7, 19},
       {10, 4, 3, 3},
       {.padding = {1, 1}, .groups = 2}},
      {"3 channels, kg = 9, rows of 3", {2, 3, 9, 3}, {9, 3, 3, 3}, {.padding = {1, 1}}},
      {"2 channels, stride 3, dilation 2",
       {1, 2, 17, 40},
       {6, 2, 3, 3},
       {.stride = {3, 3}, .padding = {2, 2}, .dilation = {2, 2}},
       sparse_dx},
      {"1 channel, stride (1, 2), 5x5",
       {3, 1, 12, 33},
       {4, 1, 5, 5},
       {.stride = {1, 2}, .padding = {2, 2}}},
      {"4 channels x 32x32 kernel, groups 2", {1, 8, 34, 35}, {4, 4, 32, 32}, {.groups = 2}},
      {"33x2 kernel (past the direct limit)", {1, 2, 35, 5}, {3, 2, 33, 2}},
      {"depthwise 7x7 pad 3 relu",
       {2, 6, 10, 11},
       {6, 1, 7, 7},
       {.padding = {3, 3}, .groups = 6, .relu = true}},
  };
}

std::vector<conv_case> empty_cases() {
  return {
      {"zero batch 3x3 pad 1", {0, 4, 6, 6}, {5, 4, 3, 3}, {.padding = {1, 1}}},
      {"zero batch 1x1 (pointwise)", {0, 8, 5, 5}, {3, 8, 1, 1}},
      {"zero batch stride 2 groups 2", {0, 4, 7, 7}, {6, 2, 3, 3}, {.stride = {2, 2}, .groups = 2}},
  };
}

template <class T>
class ConvShapes : public ::testing::Test {};
using ExactTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(ConvShapes, ExactTypes);

TYPED_TEST(ConvShapes, ResNet50Layers) { run_cases<TypeParam>(resnet_cases(), 11); }
TYPED_TEST(ConvShapes, MobileNetDepthwise) { run_cases<TypeParam>(mobilenet_cases(), 12); }
TYPED_TEST(ConvShapes, FirstLayers) { run_cases<TypeParam>(first_layer_cases(), 13); }
TYPED_TEST(ConvShapes, ChannelAndStrideTails) { run_cases<TypeParam>(tail_cases(), 14); }
TYPED_TEST(ConvShapes, DilationAndGroups) { run_cases<TypeParam>(dilation_group_cases(), 15); }
TYPED_TEST(ConvShapes, OddSpatialSizes) { run_cases<TypeParam>(odd_size_cases(), 16); }
TYPED_TEST(ConvShapes, AsymmetricAndLargePadding) { run_cases<TypeParam>(padding_cases(), 17); }
TYPED_TEST(ConvShapes, RectangularKernels) { run_cases<TypeParam>(rect_kernel_cases(), 18); }
TYPED_TEST(ConvShapes, FewChannelsPerGroup) { run_cases<TypeParam>(few_channel_cases(), 23); }

/// Stride-2 rows wide enough for whole vectors and every tail: the padded input rows split into
/// two phases and the input gradient's scatter-add run on vectors there (short_copy.hpp's
/// stride-2 copies); input widths 31 to 71 give phase rows of 15 to 36 elements. Lowered (8
/// channels) and direct (2 channels) paths, 3x3 and 1x1, paddings 0 to 2, one side each.
std::vector<conv_case> wide_stride2_cases() {
  std::vector<conv_case> cases;
  for (int64_t w : {31, 32, 33, 34, 47, 48, 63, 64, 65, 71})
    for (int64_t pad : {0, 1, 2}) {
      const int64_t c = w % 2 ? 8 : 2;
      cases.push_back({"stride 2, width " + std::to_string(w) + ", pad " + std::to_string(pad),
                       {2, c, 5, w},
                       {3, c, 3, 3},
                       {.stride = {2, 2}, .padding = {1, pad}, .padding_end = {1, 2 - pad}}});
    }
  cases.push_back(
      {"1x1 stride 2, width 67", {1, 9, 3, 67}, {4, 9, 1, 1}, {.stride = {1, 2}}, sparse_dx});
  cases.push_back({"stride 2, dilation 2, width 70",
                   {1, 6, 6, 70},
                   {5, 6, 2, 3},
                   {.stride = {1, 2}, .padding = {0, 2}, .dilation = {1, 2}},
                   sparse_dx});  // stride 2 and dilation 2 reach only the even columns
  return cases;
}
TYPED_TEST(ConvShapes, WideStrideTwoRows) { run_cases<TypeParam>(wide_stride2_cases(), 26); }

#if (TESSERA_DETAIL_CPU_HAS_PASS_1 || TESSERA_DETAIL_CPU_HAS_PASS_2) && defined(__linux__)
/// `count` floats that end exactly where an inaccessible page begins: touching one element past
/// them faults (the test dies), which no comparison of values could show for an element that a
/// masked vector loads and stores back unchanged.
class floats_before_guard_page {
 public:
  explicit floats_before_guard_page(int64_t count) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t bytes = static_cast<size_t>(count) * sizeof(float);
    span_ = (bytes + page - 1) / page * page + page;
    base_ = mmap(nullptr, span_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base_ == MAP_FAILED) throw std::runtime_error("mmap failed");
    char* guard = static_cast<char*>(base_) + span_ - page;
    if (mprotect(guard, page, PROT_NONE) != 0) throw std::runtime_error("mprotect failed");
    data_ = reinterpret_cast<float*>(guard) - count;
  }
  ~floats_before_guard_page() { munmap(base_, span_); }
  floats_before_guard_page(const floats_before_guard_page&) = delete;
  floats_before_guard_page& operator=(const floats_before_guard_page&) = delete;
  float* data() const { return data_; }

 private:
  void* base_ = nullptr;
  size_t span_ = 0;
  float* data_ = nullptr;
};

// The stride-2 vector copies themselves, element by element, for every length up to three
// vectors and one: each writes (copy) or adds to (scatter-add) exactly its elements, leaves the
// elements before them alone (canaries), and touches nothing past its last element (a guard
// page: a masked load or store one element too wide faults there).
template <class Copy, class Add>
void check_stride_two_runs(int64_t lanes, Copy copy_stride2_float, Add add_stride2_float) {
  constexpr float canary = -777.0f;
  for (int64_t n = 1; n <= 3 * lanes + 1; ++n) {
    floats_before_guard_page src(2 * n - 1);
    for (int64_t i = 0; i < 2 * n - 1; ++i) src.data()[i] = float(i + 1);
    std::vector<float> dst(static_cast<size_t>(n + 32), canary);
    copy_stride2_float(dst.data() + 16, src.data(), n);
    for (int64_t i = 0; i < static_cast<int64_t>(dst.size()); ++i) {
      const int64_t at = i - 16;
      const float want = at >= 0 && at < n ? float(2 * at + 1) : canary;
      ASSERT_EQ(dst[static_cast<size_t>(i)], want) << "copy, n = " << n << ", element " << at;
    }
    floats_before_guard_page run(n), acc(2 * n - 1);
    for (int64_t i = 0; i < n; ++i) run.data()[i] = float(i + 1);
    for (int64_t i = 0; i < 2 * n - 1; ++i) acc.data()[i] = float(1000 * i);
    add_stride2_float(acc.data(), run.data(), n);
    for (int64_t at = 0; at < 2 * n - 1; ++at)
      ASSERT_EQ(acc.data()[at], float(1000 * at) + (at % 2 ? 0.0f : float(at / 2 + 1)))
          << "scatter-add, n = " << n << ", element " << at;
  }
}

// The copies of every vector pass compiled here that this CPU runs.
// (Through pointers to their out-of-line forms: the copies are compiled for the pass's
// instruction set.)
#define TT_CHECK_STRIDE_TWO_RUNS(ns)                                                               \
  check_stride_two_runs(ts::ns::detail::float_lanes, &ts::ns::detail::copy_stride2_float_outlined, \
                        &ts::ns::detail::add_stride2_float_outlined)
#if TESSERA_DETAIL_CPU_HAS_PASS_1
TEST(ConvCopies, StrideTwoRunsTouchExactlyTheirElementsAvx2) {
  if (!ts::cpu_supports(ts::cpu_isa::avx2)) GTEST_SKIP() << "this CPU has no AVX2";
  TT_CHECK_STRIDE_TWO_RUNS(isa_avx2);
}
#endif
#if TESSERA_DETAIL_CPU_HAS_PASS_2
TEST(ConvCopies, StrideTwoRunsTouchExactlyTheirElementsAvx512) {
  if (!ts::cpu_supports(ts::cpu_isa::avx512)) GTEST_SKIP() << "this CPU has no AVX-512";
  TT_CHECK_STRIDE_TWO_RUNS(isa_avx512);
}
#endif
#endif

TYPED_TEST(ConvShapes, ZeroBatch) {
  // N = 0: an empty result of the right shape, an empty input gradient, a zero weight gradient
  // and a zero bias gradient (check_case compares them with the all-zero reference).
  using T = TypeParam;
  run_cases<T>(empty_cases(), 19);
  // The weight gradient really is written: zeros, not whatever the allocation held.
  for (int rep = 0; rep < 3; ++rep) {
    auto junk = ts::full<T>({64, 64, 3, 3}, T(7));  // freed, then likely reused below
    junk = {};
    auto dw = ts::conv2d_backward_weight(ts::empty<T>({0, 64, 4, 4}), ts::empty<T>({0, 64, 4, 4}),
                                         ts::Shape{64, 64, 3, 3}, {.padding = {1, 1}});
    for (T v : dw.to_vector()) ASSERT_EQ(v, T(0)) << "backward_weight with N = 0";
  }
}

TYPED_TEST(ConvShapes, ZeroOutputChannels) {
  // K = 0: empty outputs; the input gradient (no output reads the input) is all zeros.
  using T = TypeParam;
  ts::Generator gen(20);
  for (int64_t groups : {1, 2}) {
    const std::string what = "K = 0 groups " + std::to_string(groups);
    const ts::Conv2dOptions o{.padding = {1, 1}, .groups = groups};
    auto x = ints<T>({2, 4, 5, 6}, gen);
    auto w = ts::empty<T>({0, 4 / groups, 3, 3});
    auto y = ts::conv2d(x, w, ts::empty<T>(ts::Shape{0}), o);
    EXPECT_EQ(y.shape(), (ts::Shape{2, 0, 5, 6})) << what;
    auto dy = ts::empty<T>({2, 0, 5, 6});
    for (int rep = 0; rep < 2; ++rep) {
      auto junk = ts::full<T>({2, 4, 5, 6}, T(7));
      junk = {};
      auto dx = ts::conv2d_backward_input(dy, w, x.shape(), o);
      ASSERT_EQ(dx.shape(), x.shape()) << what;
      for (T v : dx.to_vector()) ASSERT_EQ(v, T(0)) << what << " backward_input";
    }
    EXPECT_EQ(ts::conv2d_backward_weight(dy, x, w.shape(), o).shape(), w.shape()) << what;
    EXPECT_EQ(ts::conv2d_backward_bias(dy).shape(), (ts::Shape{0})) << what;
  }
}

TYPED_TEST(ConvShapes, EmptyImageWithPadding) {
  // H = 0 with padding 1 and a 1x1 kernel: every tap reads padding, so y is the bias alone.
  using T = TypeParam;
  const ts::Conv2dOptions o{.padding = {1, 1}};
  auto x = ts::empty<T>({2, 3, 0, 4});
  auto w = ts::ones<T>({2, 3, 1, 1});
  auto bias = ts::from_vector<T>({T(5), T(-2)});
  auto y = ts::conv2d(x, w, bias, o);
  ASSERT_EQ(y.shape(), (ts::Shape{2, 2, 2, 6}));
  const auto v = y.to_vector();
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(v[i], (i / 12) % 2 ? T(-2) : T(5)) << i;
  auto dw = ts::conv2d_backward_weight(ts::ones<T>({2, 2, 2, 6}), x, w.shape(), o);
  for (T e : dw.to_vector()) EXPECT_EQ(e, T(0));
  EXPECT_EQ(ts::conv2d_backward_input(ts::ones<T>({2, 2, 2, 6}), w, x.shape(), o).shape(),
            x.shape());
}

TEST(ConvEmpty, ZeroInputChannelsAndEmptyTransposed) {
  // C = 0: every sum is empty, so y is the bias alone; the gradients are empty or zero.
  const ts::Conv2dOptions o{.padding = {1, 1}};
  auto y = ts::conv2d(ts::empty<float>({2, 0, 5, 4}), ts::empty<float>({3, 0, 3, 3}),
                      ts::from_vector<float>({1, -2, 3}), o);
  ASSERT_EQ(y.shape(), (ts::Shape{2, 3, 5, 4}));
  const auto v = y.to_vector();
  for (size_t i = 0; i < v.size(); ++i)
    EXPECT_EQ(v[i], float(i / 20 % 3 == 0 ? 1 : i / 20 % 3 == 1 ? -2 : 3)) << i;
  // The same with a kernel taller than 32 (past the few-channel kernels: the lowered path) and
  // with 8-bit operands.
  auto yt = ts::conv2d(ts::empty<float>({1, 0, 40, 5}), ts::empty<float>({2, 0, 33, 1}),
                       ts::from_vector<float>({4, -5}));
  ASSERT_EQ(yt.shape(), (ts::Shape{1, 2, 8, 5}));
  const auto vt = yt.to_vector();
  for (size_t i = 0; i < vt.size(); ++i) EXPECT_EQ(vt[i], i < 40 ? 4.0f : -5.0f) << i;
  auto y8 = ts::conv2d(ts::empty<int8_t>({2, 0, 5, 4}), ts::empty<int8_t>({3, 0, 3, 3}),
                       ts::from_vector<int32_t>({1, -2, 3}), o);
  ASSERT_EQ(y8.shape(), (ts::Shape{2, 3, 5, 4}));
  const auto v8 = y8.to_vector();
  for (size_t i = 0; i < v8.size(); ++i)
    EXPECT_EQ(v8[i], i / 20 % 3 == 0 ? 1 : i / 20 % 3 == 1 ? -2 : 3) << i;
  EXPECT_EQ(ts::conv2d_backward_input(ts::ones<float>({2, 3, 5, 4}), ts::empty<float>({3, 0, 3, 3}),
                                      ts::Shape{2, 0, 5, 4}, o)
                .shape(),
            (ts::Shape{2, 0, 5, 4}));
  EXPECT_EQ(ts::conv2d_backward_weight(ts::ones<float>({2, 3, 5, 4}),
                                       ts::empty<float>({2, 0, 5, 4}), ts::Shape{3, 0, 3, 3}, o)
                .shape(),
            (ts::Shape{3, 0, 3, 3}));
  // conv_transpose2d with N = 0, C_out = 0 and C_in = 0 (no input: zeros).
  EXPECT_EQ(ts::conv_transpose2d(ts::empty<float>({0, 4, 5, 5}), ts::ones<float>({4, 3, 3, 3}),
                                 {.stride = {2, 2}})
                .shape(),
            (ts::Shape{0, 3, 11, 11}));
  EXPECT_EQ(
      ts::conv_transpose2d(ts::ones<float>({1, 4, 5, 5}), ts::empty<float>({4, 0, 3, 3})).shape(),
      (ts::Shape{1, 0, 7, 7}));
  auto t0 = ts::conv_transpose2d(ts::empty<double>({1, 0, 5, 5}), ts::empty<double>({0, 3, 3, 3}));
  ASSERT_EQ(t0.shape(), (ts::Shape{1, 3, 7, 7}));
  for (double e : t0.to_vector()) EXPECT_EQ(e, 0.0);
}

/// The literal reading of zero padding, where taps in the padding multiply a zero (so that an
/// infinite weight or gradient makes NaN there): y = conv(x, w) or, with weight_grad, dw from dy
/// (passed as a) and x (passed as b).
vec ref_with_padding_products(const vec& a, const vec& b, const geom& g, bool weight_grad) {
  vec out(static_cast<size_t>(weight_grad ? g.w_shape().numel() : g.y_shape().numel()), 0.0);
  const int64_t cg = g.cg(), kg = g.kg();
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t kk = 0; kk < g.k; ++kk)
      for (int64_t oh = 0; oh < g.ho; ++oh)
        for (int64_t ow = 0; ow < g.wo; ++ow)
          for (int64_t cl = 0; cl < cg; ++cl)
            for (int64_t i = 0; i < g.r; ++i)
              for (int64_t j = 0; j < g.s; ++j) {
                const int64_t ih = oh * g.sh - g.pt + i * g.dh, iw = ow * g.sw - g.pl + j * g.dw;
                const bool inside = ih >= 0 && ih < g.h && iw >= 0 && iw < g.w;
                const int64_t yi = ((n * g.k + kk) * g.ho + oh) * g.wo + ow;
                const int64_t wi = ((kk * cg + cl) * g.r + i) * g.s + j;
                const int64_t xi = ((n * g.c + kk / kg * cg + cl) * g.h + ih) * g.w + iw;
                if (weight_grad)
                  out[wi] += a[yi] * (inside ? b[xi] : 0.0);
                else
                  out[yi] += (inside ? a[xi] : 0.0) * b[wi];
              }
  return out;
}

/// got against want where want may hold NaN (got must be NaN there) or infinities (equal); where
/// `alt` is given, got may match it instead (the padding-product reading of the same sum).
void expect_match_special(const vec& got, const vec& want, const ts::Shape& shape,
                          const std::string& what, const vec* alt = nullptr) {
  ASSERT_EQ(got.size(), want.size()) << what;
  auto same = [](double a, double b) { return std::isnan(b) ? std::isnan(a) : a == b; };
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool ok = same(got[i], want[i]) || (alt && same(got[i], (*alt)[i]));
    if (!ok && ++bad <= 4)
      ADD_FAILURE() << what << ": element " << index_str(static_cast<int64_t>(i), shape) << " of "
                    << shape << ": got " << got[i] << ", want " << want[i];
  }
  if (bad > 4) ADD_FAILURE() << what << ": " << bad << " elements differ";
}

TEST(ConvSpecialValues, NanAndInfReachOnlyTheirWindows) {
  // One NaN and one Inf in x, in w and in dy: every result that sums a term with one of them is
  // NaN / Inf exactly as in the reference, and nothing else is (the unused rows and columns of
  // register blocks and packed panels, and the outputs of other windows never pick one up).
  // Operands in [1, 3], so no Inf meets a zero inside the image; an infinite weight or gradient
  // that meets the zero padding may give NaN there (as frameworks that multiply the padding do)
  // or skip it: both readings are accepted, nothing else.
  const std::vector<conv_case> cases = {
      {"3x3 pad 1 C=8 (lowered)", {2, 8, 7, 9}, {5, 8, 3, 3}, {.padding = {1, 1}}},
      {"C=1 3x3 pad 1 (few channels)", {2, 1, 9, 11}, {6, 1, 3, 3}, {.padding = {1, 1}}},
      {"depthwise stride 2",
       {1, 4, 9, 9},
       {4, 1, 3, 3},
       {.stride = {2, 2}, .padding = {1, 1}, .groups = 4}},
      {"1x1 (pointwise)", {2, 6, 4, 5}, {7, 6, 1, 1}},
      {"3x3 stride 2 C=8", {1, 8, 9, 8}, {4, 8, 3, 3}, {.stride = {2, 2}, .padding = {1, 1}}},
  };
  ts::Generator gen(26);
  const float nan = std::numeric_limits<float>::quiet_NaN(),
              inf = std::numeric_limits<float>::infinity();
  for (const auto& c : cases) {
    const geom g = geom_of(c.x, c.w, c.o);
    const std::string what = c.name;
    auto x = ints<float>(c.x, gen, 1, 3), w = ints<float>(c.w, gen, 1, 3);
    auto dy = ints<float>(g.y_shape(), gen, 1, 3);
    const ts::Shape xs = c.x;
    x.at({0, xs[1] - 1, xs[2] / 2, xs[3] - 1}) = nan;
    x.at({xs[0] - 1, 0, 1, 0}) = -inf;
    const vec xd = tt::to_doubles(x), wd = tt::to_doubles(w), dyd = tt::to_doubles(dy);
    expect_match_special(tt::to_doubles(ts::conv2d(x, w, c.o)),
                         ref_forward(xd, wd, nullptr, g, false), g.y_shape(),
                         what + " NaN/Inf in x");
    expect_match_special(tt::to_doubles(ts::conv2d_backward_weight(dy, x, c.w, c.o)),
                         ref_backward_weight(dyd, xd, g), c.w, what + " NaN/Inf in x, dw");
    auto w2 = ints<float>(c.w, gen, 1, 3);
    w2.at({c.w[0] - 1, 0, c.w[2] - 1, 0}) = nan;
    w2.at({0, c.w[1] - 1, 0, c.w[3] - 1}) = inf;
    auto x2 = ints<float>(c.x, gen, 1, 3);
    const vec w2d = tt::to_doubles(w2), x2d = tt::to_doubles(x2);
    const vec alt_y = ref_with_padding_products(x2d, w2d, g, false);
    expect_match_special(tt::to_doubles(ts::conv2d(x2, w2, c.o)),
                         ref_forward(x2d, w2d, nullptr, g, false), g.y_shape(),
                         what + " NaN/Inf in w", &alt_y);
    auto dy2 = ints<float>(g.y_shape(), gen, 1, 3);
    dy2.at({0, 0, 0, 0}) = inf;
    dy2.at({g.n - 1, g.k - 1, g.ho - 1, g.wo / 2}) = nan;
    const vec dy2d = tt::to_doubles(dy2);
    expect_match_special(tt::to_doubles(ts::conv2d_backward_input(dy2, w, c.x, c.o)),
                         ref_backward_input(dy2d, wd, g), c.x, what + " NaN/Inf in dy, dx");
    const vec alt_dw = ref_with_padding_products(dy2d, x2d, g, true);
    expect_match_special(tt::to_doubles(ts::conv2d_backward_weight(dy2, x2, c.w, c.o)),
                         ref_backward_weight(dy2d, x2d, g), c.w, what + " NaN/Inf in dy, dw",
                         &alt_dw);
  }
}

TEST(ConvRandom, GeometriesAgainstTheReference) {
  // Random small geometries: strides, dilations, asymmetric paddings, groups and kernel sizes
  // drawn together, so combinations no list above names are met too; every pass exact in float.
  // (Random geometries may be sparse by construction: no density check here.)
  const uint64_t seed = 20241122;
  ts::Generator g(seed);
  auto pick = [&](int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(g.below(static_cast<uint64_t>(hi - lo + 1)));
  };
  std::vector<conv_case> cases;
  while (cases.size() < 80) {
    const int64_t groups = pick(1, 3), cg = pick(1, 5), kg = pick(1, 5), r = pick(1, 5),
                  s = pick(1, 5), h = pick(1, 12), w = pick(1, 12);
    const int64_t n = pick(0, 7) == 0 ? 0 : pick(1, 2);
    ts::Conv2dOptions o;
    o.stride = {pick(1, 3), pick(1, 3)};
    o.dilation = {pick(1, 3), pick(1, 3)};
    o.padding = {pick(0, 3), pick(0, 3)};
    o.padding_end = {pick(-1, 3), pick(-1, 3)};
    o.groups = groups;
    o.relu = pick(0, 3) == 0;
    const int64_t pb = o.padding_end[0] == -1 ? o.padding[0] : o.padding_end[0];
    const int64_t pr = o.padding_end[1] == -1 ? o.padding[1] : o.padding_end[1];
    if (o.dilation[0] * (r - 1) + 1 > h + o.padding[0] + pb ||
        o.dilation[1] * (s - 1) + 1 > w + o.padding[1] + pr)
      continue;
    cases.push_back(
        {"random case " + std::to_string(cases.size()) + " (seed " + std::to_string(seed) + ")",
         {n, groups * cg, h, w},
         {groups * kg, cg, r, s},
         o,
         sparse_y | sparse_dx | sparse_dw});
  }
  run_cases<float>(cases, seed + 1);
}

/// Every pass of one float case exact against the reference with 1 and with 2 threads; then
/// real values, where the two thread counts agree to rounding (the weight gradient's partial sums
/// are combined in another order).
void check_thread_counts(const ts::Shape& xs, const ts::Shape& ws, const ts::Conv2dOptions& o,
                         uint64_t seed) {
  const geom g = geom_of(xs, ws, o);
  const std::string name = "x " + xs.to_string() + " w " + ws.to_string() + describe(o);
  ts::Generator gen(seed);
  auto x = ints<float>(xs, gen), w = ints<float>(ws, gen), bias = ints<float>({ws[0]}, gen);
  auto dy = ints<float>(g.y_shape(), gen);
  const vec xd = tt::to_doubles(x), wd = tt::to_doubles(w), bd = tt::to_doubles(bias),
            dyd = tt::to_doubles(dy);
  const vec want_y = ref_forward(xd, wd, &bd, g, o.relu);
  const vec want_dx = ref_backward_input(dyd, wd, g), want_dw = ref_backward_weight(dyd, xd, g);
  expect_mostly_nonzero(want_y, name + " forward");
  expect_mostly_nonzero(want_dx, name + " backward_input");
  expect_mostly_nonzero(want_dw, name + " backward_weight");
  for (int t : {1, 2}) {
    ts::set_num_threads(t);
    const std::string what = name + ", " + std::to_string(t) + " thread(s)";
    expect_match(tt::to_doubles(ts::conv2d(x, w, bias, o)), want_y, g.y_shape(), what + " forward");
    expect_match(tt::to_doubles(ts::conv2d_backward_input(dy, w, xs, o)), want_dx, xs,
                 what + " backward_input");
    expect_match(tt::to_doubles(ts::conv2d_backward_weight(dy, x, ws, o)), want_dw, ws,
                 what + " backward_weight");
  }
  auto xr = ts::randn<float>(xs, gen), wr = ts::randn<float>(ws, gen);
  auto dyr = ts::randn<float>(g.y_shape(), gen);
  vec res[2][3];
  for (int t : {1, 2}) {
    ts::set_num_threads(t);
    res[t - 1][0] = tt::to_doubles(ts::conv2d(xr, wr, o));
    res[t - 1][1] = tt::to_doubles(ts::conv2d_backward_input(dyr, wr, xs, o));
    res[t - 1][2] = tt::to_doubles(ts::conv2d_backward_weight(dyr, xr, ws, o));
  }
  ts::set_num_threads(0);
  expect_match(res[1][0], res[0][0], g.y_shape(), name + " real values: forward, 2 vs 1 thread",
               1e-5);
  expect_match(res[1][1], res[0][1], xs, name + " real values: backward_input, 2 vs 1 thread",
               1e-5);
  expect_match(res[1][2], res[0][2], ws, name + " real values: backward_weight, 2 vs 1 thread",
               1e-4);
}

TEST(ConvThreads, ManyTilesOneAndTwoThreads) {
  // [2, 64, 40, 40] * 3x3 64 pad 1: 1600 output pixels per image, several im2col tiles of 576
  // rows.
  ASSERT_LT(TT_IN_ACTIVE_PASS(detail::conv_tile_columns<float>(64 * 9, sizeof(float), 1600)), 1600)
      << "the case no longer spans several tiles";
  check_thread_counts({2, 64, 40, 40}, {64, 64, 3, 3}, {.padding = {1, 1}}, 21);
}

TEST(ConvThreads, OnePixelWideImageManyRunsPerTile) {
  // W = 1: every output row is a lowering run of one pixel, so a tile holds more runs than the
  // lowering batches at once (64) and ends in a short batch. The lowering's whole-vector stores
  // past a run once wrote into the next tile row (and past the tile buffer) there; found by the
  // CUDA suite's CPU reference under AddressSanitizer.
  check_thread_counts({1, 6, 200, 1}, {4, 6, 3, 1}, {.padding = {1, 0}}, 23);
  check_thread_counts({2, 5, 131, 2}, {3, 5, 3, 2}, {.padding = {1, 1}}, 24);
}

TEST(ConvThreads, FewChannelLayersOneAndTwoThreads) {
  // A first layer (one image: its rows are split between threads) and a depthwise layer.
  check_thread_counts({1, 3, 64, 64}, {16, 3, 7, 7}, {.stride = {2, 2}, .padding = {3, 3}}, 24);
  check_thread_counts({2, 64, 32, 32}, {64, 1, 3, 3}, {.padding = {1, 1}, .groups = 64}, 25);
}

// Winograd's one-dimensional transforms (detail/winograd.hpp, shared by the CPU and CUDA
// backends): A^T [(G g) * (B^T d)] is the correlation y_i = sum_j d_{i+j} g_j, in double to
// rounding, for integer inputs and for every unit input and tap (each coefficient); for F(4, 3)
// (3 taps) and F(3, 4) (4 taps: the weight gradient's dy rows).
TEST(ConvWinograd, TransformsComputeTheCorrelation) {
  namespace d = ts::detail;
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> small(-9, 9);
  int checked = 0;
  for (int trial = 0; trial < 6 * 4 + 200; ++trial) {
    double in[6] = {}, taps[4] = {};
    if (trial < 24) {
      in[trial / 4] = 1, taps[trial % 4] = 1;
    } else {
      for (double& v : in) v = small(rng);
      for (double& v : taps) v = small(rng);
    }
    double bd[6], gg[6], prod[6], y[4];
    d::winograd_input_1d(in, bd);
    // F(4, 3): 3 taps, 4 outputs (forward and input gradient).
    const double taps3[3] = {taps[0], taps[1], taps[2]};
    d::winograd_weight_1d(taps3, gg);
    for (int i = 0; i < 6; ++i) prod[i] = bd[i] * gg[i];
    d::winograd_output_1d(prod, y);
    for (int i = 0; i < 4; ++i) {
      const double want = in[i] * taps[0] + in[i + 1] * taps[1] + in[i + 2] * taps[2];
      ASSERT_NEAR(y[i], want, 1e-12) << "F(4, 3) output " << i << " of trial " << trial;
      ++checked;
    }
    // F(3, 4): 4 "taps" (a dy row), 3 outputs (the weight gradient's taps).
    double y3[3];
    d::winograd_grad_1d(taps, gg);
    for (int i = 0; i < 6; ++i) prod[i] = bd[i] * gg[i];
    d::winograd_taps_1d(prod, y3);
    for (int i = 0; i < 3; ++i) {
      double want = 0;
      for (int j = 0; j < 4; ++j) want += in[i + j] * taps[j];
      ASSERT_NEAR(y3[i], want, 1e-12) << "F(3, 4) output " << i << " of trial " << trial;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 7 * 224);
}

using winograd_test::winograd_error;
using winograd_test::winograd_scope;

bool same_bits(const ts::Tensor<float>& a, const ts::Tensor<float>& b) {
  const auto x = a.to_vector(), y = b.to_vector();
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

// Winograd F(4x4, 3x3) on the CPU (conv/winograd.hpp) against the direct sums of
// conv_algorithm::gemm: tails of 1 to 3 outputs, no padding, padding 2, asymmetric padding, bias
// and ReLU, 17 channels, blocks of tiles from several images, several blocks per image and
// several slices of output channels (60 x 60 images, 40 output channels: several blocks of the
// weight gradient too), on one and two threads; forward, input and weight gradients. Each result
// must differ from the direct one in its bits (the Winograd path ran) and stay within the
// transforms' rounding (bound 1e-4 of the magnitude; one changed coefficient gives about 5e-2).
TEST(ConvWinograd, EveryPassWithinItsRounding) {
  if (ts::get_isa() == ts::cpu_isa::scalar)
    GTEST_SKIP() << "the CPU's Winograd needs SIMD vectors (the scalar kernels run)";
  const conv_case cases[] = {
      {"pad 1, tails of 1 and 3", {2, 16, 9, 11}, {16, 16, 3, 3}, {.padding = {1, 1}}},
      {"no padding, 17 channels", {3, 17, 8, 8}, {20, 17, 3, 3}, {}},
      {"pad 2", {1, 16, 6, 13}, {24, 16, 3, 3}, {.padding = {2, 2}}},
      {"asymmetric", {2, 16, 7, 7}, {16, 16, 3, 3}, {.padding = {1, 1}, .padding_end = {0, 2}}},
      {"many small images", {9, 16, 6, 7}, {16, 16, 3, 3}, {.padding = {1, 1}}},
      {"blocks and slices", {2, 16, 60, 60}, {40, 16, 3, 3}, {.padding = {1, 1}}},
  };
  const int64_t nt = TT_IN_ACTIVE_PASS(detail::winograd_cpu_blocking(16, 40, 2 * 15 * 15).nt),
                kb = TT_IN_ACTIVE_PASS(detail::winograd_cpu_blocking(16, 40, 2 * 15 * 15).kb);
  ASSERT_LT(nt, 2 * 15 * 15) << "the last case no longer spans several blocks of tiles";
  ASSERT_NE(15 * 15 % nt, 0) << "the last case's blocks no longer straddle its images";
  ASSERT_LT(kb, 40) << "the last case no longer spans several slices of channels";
  constexpr double bound = 1e-4;
  uint64_t seed = 1300;
  for (const auto& c : cases) {
    ts::Generator gen(seed++);
    const auto x = ts::randn<float>(c.x, gen), w = ts::randn<float>(c.w, gen);
    const auto bias = ts::randn<float>({c.w[0]}, gen);
    const auto want = ts::conv2d(x, w, bias, c.o);
    const auto magnitude = ts::conv2d(ts::abs(x), ts::abs(w), ts::abs(bias), c.o);
    const auto dy = ts::randn<float>(want.shape(), gen);
    const auto dx_want = ts::conv2d_backward_input(dy, w, c.x, c.o);
    const auto dx_magnitude = ts::conv2d_backward_input(ts::abs(dy), ts::abs(w), c.x, c.o);
    const auto dw_want = ts::conv2d_backward_weight(dy, x, c.w, c.o);
    const auto dw_magnitude = ts::conv2d_backward_weight(ts::abs(dy), ts::abs(x), c.w, c.o);
    auto relu = c.o;
    relu.relu = true;
    const auto relu_want = ts::conv2d(x, w, bias, relu);
    const winograd_scope scope;
    for (const int threads : {1, 2}) {
      ts::set_num_threads(threads);
      const std::string what = c.name + std::string(threads == 1 ? ", 1 thread" : ", 2 threads");
      const auto got = ts::conv2d(x, w, bias, c.o);
      EXPECT_FALSE(same_bits(got, want)) << what << ": Winograd did not run";
      EXPECT_LE(winograd_error(got, want, magnitude), bound) << what << " forward";
      EXPECT_LE(winograd_error(ts::conv2d(x, w, bias, relu), relu_want, magnitude), bound)
          << what << " relu";
      const auto dx = ts::conv2d_backward_input(dy, w, c.x, c.o);
      EXPECT_FALSE(same_bits(dx, dx_want)) << what << ": Winograd did not run for dx";
      EXPECT_LE(winograd_error(dx, dx_want, dx_magnitude), bound) << what << " input gradient";
      const auto dw = ts::conv2d_backward_weight(dy, x, c.w, c.o);
      EXPECT_FALSE(same_bits(dw, dw_want)) << what << ": Winograd did not run for dw";
      EXPECT_LE(winograd_error(dw, dw_want, dw_magnitude), bound) << what << " weight gradient";
    }
    ts::set_num_threads(0);
  }
}

// What Winograd does not take computes as with conv_algorithm::gemm, bit for bit (forward and
// weight gradient): stride 2, 15 channels in or out, two groups, 5x5, dilation 2; double.
TEST(ConvWinograd, LeavesOtherLayersAlone) {
  const ts::Conv2dOptions pad1{.padding = {1, 1}};
  const conv_case cases[] = {
      {"stride 2", {2, 16, 9, 9}, {16, 16, 3, 3}, {.stride = {2, 2}, .padding = {1, 1}}},
      {"15 input channels", {2, 15, 9, 9}, {16, 15, 3, 3}, pad1},
      {"15 output channels", {2, 16, 9, 9}, {15, 16, 3, 3}, pad1},
      {"two groups", {2, 32, 9, 9}, {32, 16, 3, 3}, {.padding = {1, 1}, .groups = 2}},
      {"5x5", {2, 16, 9, 9}, {16, 16, 5, 5}, {.padding = {2, 2}}},
      {"dilation 2", {2, 16, 9, 9}, {16, 16, 3, 3}, {.padding = {2, 2}, .dilation = {2, 2}}},
  };
  uint64_t seed = 1400;
  for (const auto& c : cases) {
    ts::Generator gen(seed++);
    const auto x = ts::randn<float>(c.x, gen), w = ts::randn<float>(c.w, gen);
    const auto want = ts::conv2d(x, w, c.o);
    const auto dy = ts::randn<float>(want.shape(), gen);
    const auto dw_want = ts::conv2d_backward_weight(dy, x, c.w, c.o);
    const winograd_scope scope;
    EXPECT_TRUE(same_bits(ts::conv2d(x, w, c.o), want)) << c.name;
    EXPECT_TRUE(same_bits(ts::conv2d_backward_weight(dy, x, c.w, c.o), dw_want))
        << c.name << " weight gradient";
  }
  ts::Generator gen(1500);
  const auto x = ts::randn<float>({2, 16, 9, 9}, gen), w = ts::randn<float>({16, 16, 3, 3}, gen);
  const auto xd = x.astype<double>(), wd = w.astype<double>();
  const auto double_want = ts::conv2d(xd, wd, pad1).to_vector();
  const winograd_scope scope;
  EXPECT_EQ(ts::conv2d(xd, wd, pad1).to_vector(), double_want) << "double";
}

// ---- low precision and mixed dtypes -------------------------------------------------------------

std::vector<conv_case> lowp_cases() {
  return {
      {"C=13 K=17 3x3 pad 1", {2, 13, 9, 8}, {17, 13, 3, 3}, {.padding = {1, 1}}},
      {"1x1 64->19 (pointwise)", {2, 64, 5, 5}, {19, 64, 1, 1}},
      {"depthwise stride 2",
       {2, 16, 9, 9},
       {16, 1, 3, 3},
       {.stride = {2, 2}, .padding = {1, 1}, .groups = 16}},
      {"groups 2 dilation 2",
       {2, 8, 10, 9},
       {6, 4, 3, 3},
       {.padding = {2, 1}, .dilation = {2, 2}, .groups = 2}},
      {"7x7 stride 2 pad 3 C=3",
       {1, 3, 17, 17},
       {8, 3, 7, 7},
       {.stride = {2, 2}, .padding = {3, 3}}},
  };
}

/// Operands in [1, 3]: 576 taps give sums around 2300, past the integers half (2048) and bfloat16
/// (256) hold exactly, so a result rounded once differs from one rounded along the way.
std::vector<conv_case> lowp_large_sum_cases() {
  return {
      {"C=64 3x3 pad 1, sums past 2048", {2, 64, 6, 5}, {9, 64, 3, 3}, {.padding = {1, 1}}},
      {"1x1 C=600 (pointwise), sums past 2048", {1, 600, 3, 3}, {5, 600, 1, 1}},
  };
}

TEST(ConvLowp, HalfRoundedOnce) {
  run_cases<ts::half>(lowp_cases(), 31);
  run_cases<ts::half>(lowp_large_sum_cases(), 131, 1, 3);
}
TEST(ConvLowp, Bfloat16RoundedOnce) {
  run_cases<ts::bfloat16>(lowp_cases(), 32);
  run_cases<ts::bfloat16>(lowp_large_sum_cases(), 132, 1, 3);
}

std::vector<conv_case> fp8_cases() {
  // Small enough that no result nears e4m3's largest finite value (448) with operands in [-2, 2].
  return {
      {"3x3 pad 1", {2, 3, 5, 6}, {4, 3, 3, 3}, {.padding = {1, 1}}},
      {"1x1 (pointwise)", {1, 8, 3, 3}, {5, 8, 1, 1}},
      {"stride 2 groups 2", {1, 4, 7, 6}, {4, 2, 3, 3}, {.stride = {2, 2}, .groups = 2}},
  };
}

TEST(ConvLowp, Float8RoundedOnce) {
  run_cases<ts::float8_e4m3>(fp8_cases(), 33, -2, 2);
  run_cases<ts::float8_e5m2>(fp8_cases(), 34, -2, 2);
  static_assert(std::is_same_v<ts::conv_t<ts::float8_e4m3, ts::float8_e5m2>, float>);
  run_cases<ts::float8_e4m3, ts::float8_e5m2>(fp8_cases(), 35, -2, 2);
}

TEST(ConvLowp, MixedHalfInputFloatWeights) {
  static_assert(std::is_same_v<ts::conv_t<ts::half, float>, float>);
  static_assert(std::is_same_v<ts::conv_t<ts::half, ts::half>, ts::half>);
  static_assert(std::is_same_v<ts::conv_t<ts::bfloat16, ts::bfloat16>, ts::bfloat16>);
  run_cases<ts::half, float>(lowp_cases(), 36);
}

TEST(ConvLowp, Int8WithFloatIsAFloatConvolution) {
  static_assert(std::is_same_v<ts::conv_t<int8_t, float>, float>);
  run_cases<int8_t, float>({lowp_cases()[0], lowp_cases()[2]}, 37);
}

// ---- 8-bit integers -----------------------------------------------------------------------------

std::vector<conv_case> int8_cases() {
  return {
      {"3x3 pad 1 C=19 K=17", {2, 19, 7, 9}, {17, 19, 3, 3}, {.padding = {1, 1}}},
      {"1x1 (pointwise) C=65 K=13", {2, 65, 4, 5}, {13, 65, 1, 1}},
      {"depthwise stride 2",
       {2, 13, 9, 9},
       {13, 1, 3, 3},
       {.stride = {2, 2}, .padding = {1, 1}, .groups = 13}},
      {"groups 2 dilation 2 relu",
       {1, 8, 10, 10},
       {6, 4, 3, 3},
       {.padding = {2, 2}, .dilation = {2, 2}, .groups = 2, .relu = true}},
      {"5x2 asymmetric padding",
       {2, 7, 9, 8},
       {5, 7, 5, 2},
       {.padding = {1, 0}, .padding_end = {3, 2}}},
      {"C=128 3x3 (long dot products)", {1, 128, 6, 6}, {9, 128, 3, 3}, {.padding = {1, 1}}},
  };
}

/// Every operand at one extreme: products at the edge of the range summed over long taps, where
/// a 16-bit intermediate (a saturating pairwise multiply-add) would overflow.
template <class TX, class TW>
void int8_extremes() {
  const std::string names = name_of<TX>() + " x " + name_of<TW>();
  for (TX vx : {std::numeric_limits<TX>::min(), std::numeric_limits<TX>::max()})
    for (TW vw : {std::numeric_limits<TW>::min(), std::numeric_limits<TW>::max()})
      for (const auto& [ws, o] : {std::pair{ts::Shape{5, 67, 3, 3}, ts::Conv2dOptions{}},
                                  std::pair{ts::Shape{5, 67, 1, 1}, ts::Conv2dOptions{}}}) {
        const std::string what = names + " all " + std::to_string(int(vx)) + " * " +
                                 std::to_string(int(vw)) + " w " + ws.to_string();
        auto x = ts::full<TX>({2, 67, 5, 4}, vx);
        auto w = ts::full<TW>(ws, vw);
        auto y = ts::conv2d(x, w, o);
        const int64_t want = int64_t{vx} * int64_t{vw} * 67 * ws[2] * ws[3];
        const auto got = y.to_vector();
        ASSERT_FALSE(got.empty()) << what;
        int bad = 0;
        for (size_t i = 0; i < got.size(); ++i)
          if (got[i] != want && ++bad <= 2)
            ADD_FAILURE() << what << ": element " << i << " got " << got[i] << ", want " << want;
      }
}

TEST(ConvInt8, Int8Int8ExactInt32) {
  static_assert(std::is_same_v<ts::conv_t<int8_t, int8_t>, int32_t>);
  run_cases<int8_t, int8_t>(int8_cases(), 41, -128, 127);
  int8_extremes<int8_t, int8_t>();
}

TEST(ConvInt8, Uint8Int8ExactInt32) {
  static_assert(std::is_same_v<ts::conv_t<uint8_t, int8_t>, int32_t>);
  run_cases<uint8_t, int8_t>(int8_cases(), 42, -128, 255);
  int8_extremes<uint8_t, int8_t>();
}

TEST(ConvInt8, IntoStridedInt32Out) {
  ts::Generator gen(43);
  const ts::Conv2dOptions o{.padding = {1, 1}, .relu = true};
  auto x = ints<uint8_t>({2, 9, 6, 7}, gen, 0, 255);
  auto w = ints<int8_t>({5, 9, 3, 3}, gen, -128, 127);
  auto bias = ints<int32_t>({5}, gen, -20000, 20000);
  const geom g = geom_of(x.shape(), w.shape(), o);
  auto buf = ts::full<int32_t>({2, 5, 6, 14}, -7);
  auto out = buf.slice(3, 1, 14, 2);
  ts::conv2d(x, w, bias, o, out);
  const vec bd = tt::to_doubles(bias);
  const vec want = ref_forward(tt::to_doubles(x), tt::to_doubles(w), &bd, g, true);
  expect_match(tt::to_doubles(out), want, g.y_shape(), "uint8 x int8 into int32 step-2 view");
  for (int32_t v : buf.slice(3, 0, 14, 2).to_vector()) ASSERT_EQ(v, -7) << "padding written";
}

// ---- finite differences in double ---------------------------------------------------------------

/// For every element of p (contiguous; f reads it), the central difference of L = sum(f() * gy)
/// against grad, the analytic dL/dp. L is linear in p, so only rounding separates the two.
void fd_check(const ts::Tensor<double>& p, const std::function<ts::Tensor<double>()>& f,
              const ts::Tensor<double>& gy, const ts::Tensor<double>& grad, const std::string& what,
              bool sparse = false) {
  ASSERT_TRUE(p.is_contiguous());
  ASSERT_EQ(grad.shape(), p.shape()) << what;
  const vec gv = tt::to_doubles(gy), an = tt::to_doubles(grad);
  auto loss = [&] {
    const vec y = tt::to_doubles(f());
    long double l = 0;
    for (size_t i = 0; i < y.size(); ++i) l += static_cast<long double>(y[i]) * gv[i];
    return static_cast<double>(l);
  };
  const double eps = 1e-3;
  vec num(an.size());
  double* d = p.data();
  for (size_t i = 0; i < an.size(); ++i) {
    const double v = d[i];
    d[i] = v + eps;
    const double lp = loss();
    d[i] = v - eps;
    const double lm = loss();
    d[i] = v;
    num[i] = (lp - lm) / (2 * eps);
  }
  if (!sparse) expect_mostly_nonzero(an, what);
  expect_match(an, num, p.shape(), what, 1e-7);
}

struct fd_case {
  std::string name;
  ts::Shape x, w;
  ts::Conv2dOptions o;
  bool sparse_dx = false;
};

TEST(ConvGradcheck, Conv2dFiniteDifferences) {
  const std::vector<fd_case> cases = {
      {"3x3 pad 1", {2, 3, 6, 5}, {4, 3, 3, 3}, {.padding = {1, 1}}},
      {"strided (2,3), asymmetric padding",
       {2, 3, 7, 8},
       {4, 3, 3, 2},
       {.stride = {2, 3}, .padding = {1, 0}, .padding_end = {0, 2}}},
      {"groups 2 dilation (2,1)",
       {2, 4, 9, 8},
       {6, 2, 3, 3},
       {.padding = {2, 1}, .dilation = {2, 1}, .groups = 2}},
      {"depthwise stride 2 dilation 2",
       {1, 3, 9, 9},
       {3, 1, 3, 3},
       {.stride = {2, 2}, .padding = {1, 1}, .dilation = {2, 2}, .groups = 3},
       true},  // stride 2 and dilation 2 reach only the odd rows and columns
  };
  ts::Generator gen(51);
  for (const auto& c : cases) {
    const std::string what = "conv2d " + c.name;
    auto x = ts::rand<double>(c.x, gen, -1, 1), w = ts::rand<double>(c.w, gen, -1, 1);
    auto bias = ts::rand<double>({c.w[0]}, gen, -1, 1);
    auto f = [&] { return ts::conv2d(x, w, bias, c.o); };
    auto gy = ts::rand<double>(f().shape(), gen, -1, 1);
    fd_check(x, f, gy, ts::conv2d_backward_input(gy, w, c.x, c.o), what + " d/dx", c.sparse_dx);
    fd_check(w, f, gy, ts::conv2d_backward_weight(gy, x, c.w, c.o), what + " d/dw");
    fd_check(bias, f, gy, ts::conv2d_backward_bias(gy), what + " d/dbias");
  }
}

TEST(ConvGradcheck, Conv1dFiniteDifferences) {
  ts::Generator gen(52);
  const ts::Conv1dOptions o{.stride = 2, .padding = 2, .dilation = 2, .groups = 2};
  auto x = ts::rand<double>({2, 4, 13}, gen, -1, 1), w = ts::rand<double>({6, 2, 3}, gen, -1, 1);
  auto bias = ts::rand<double>({6}, gen, -1, 1);
  auto f = [&] { return ts::conv1d(x, w, bias, o); };
  auto gy = ts::rand<double>(f().shape(), gen, -1, 1);
  fd_check(x, f, gy, ts::conv1d_backward_input(gy, w, x.shape(), o), "conv1d d/dx");
  fd_check(w, f, gy, ts::conv1d_backward_weight(gy, x, w.shape(), o), "conv1d d/dw");
  fd_check(bias, f, gy, ts::conv1d_backward_bias(gy), "conv1d d/dbias");
}

TEST(ConvGradcheck, ConvTranspose2dFiniteDifferences) {
  ts::Generator gen(53);
  for (const auto& o :
       {ts::ConvTranspose2dOptions{.stride = {2, 2},
       .padding = {1, 1},
       .output_padding = {1, 1},
       .dilation = {2, 2},
       .groups = 2},
        ts::ConvTranspose2dOptions{
            .stride = {1, 2}, .padding = {0, 1}, .output_padding = {1, 0}, .dilation = {2, 1}}}) {
    const std::string what = "conv_transpose2d stride " + std::to_string(o.stride[0]) + "," +
                             std::to_string(o.stride[1]);
    auto x = ts::rand<double>({2, 4, 3, 4}, gen, -1, 1);
    auto w = ts::rand<double>({4, 3, 3, 3}, gen, -1, 1);
    auto bias = ts::rand<double>({3 * o.groups}, gen, -1, 1);
    auto f = [&] { return ts::conv_transpose2d(x, w, bias, o); };
    auto gy = ts::rand<double>(f().shape(), gen, -1, 1);
    fd_check(x, f, gy, ts::conv_transpose2d_backward_input(gy, w, x.shape(), o), what + " d/dx");
    fd_check(w, f, gy, ts::conv_transpose2d_backward_weight(gy, x, w.shape(), o), what + " d/dw");
    fd_check(bias, f, gy, ts::conv2d_backward_bias(gy), what + " d/dbias");
  }
}

// ---- conv1d -------------------------------------------------------------------------------------

TEST(Conv1d, ForwardAndBackwardExact) {
  struct c1 {
    ts::Shape x, w;
    ts::Conv1dOptions o;
  };
  const std::vector<c1> cases = {
      {{3, 5, 17}, {7, 5, 3}, {.padding = 1}},
      {{2, 6, 20},
       {4, 3, 5},
       {.stride = 2, .padding = 3, .dilation = 2, .groups = 2, .padding_end = 1}},
      {{2, 16, 9}, {16, 1, 3}, {.padding = 1, .groups = 16}},
      {{1, 13, 8}, {17, 13, 1}, {}},
      {{2, 4, 11}, {5, 4, 4}, {.stride = 3, .relu = true}},
      {{0, 4, 11}, {5, 4, 3}, {}},
  };
  ts::Generator gen(61);
  for (const auto& c : cases) {
    const ts::Conv2dOptions o2 = as_2d(c.o);
    const geom g = geom_of({c.x[0], c.x[1], 1, c.x[2]}, {c.w[0], c.w[1], 1, c.w[2]}, o2);
    const std::string what = "conv1d x " + c.x.to_string() + " w " + c.w.to_string() + describe(o2);
    auto x = ints<float>(c.x, gen), w = ints<float>(c.w, gen), bias = ints<float>({c.w[0]}, gen);
    const vec xd = tt::to_doubles(x), wd = tt::to_doubles(w), bd = tt::to_doubles(bias);
    const ts::Shape ys{g.n, g.k, g.wo};
    auto y = ts::conv1d(x, w, bias, c.o);
    ASSERT_EQ(y.shape(), ys) << what;
    const vec want = ref_forward(xd, wd, &bd, g, c.o.relu);
    expect_mostly_nonzero(ref_forward(xd, wd, &bd, g, false), what);
    expect_match(tt::to_doubles(y), want, ys, what + " forward");
    expect_match(tt::to_doubles(ts::conv1d(x, w, c.o)), ref_forward(xd, wd, nullptr, g, c.o.relu),
                 ys, what + " forward without bias");
    auto dy = ints<float>(ys, gen);
    const vec dyd = tt::to_doubles(dy);
    auto dx = ts::conv1d_backward_input(dy, w, c.x, c.o);
    ASSERT_EQ(dx.shape(), c.x) << what;
    expect_match(tt::to_doubles(dx), ref_backward_input(dyd, wd, g), c.x, what + " backward_input");
    auto dw = ts::conv1d_backward_weight(dy, x, c.w, c.o);
    ASSERT_EQ(dw.shape(), c.w) << what;
    expect_match(tt::to_doubles(dw), ref_backward_weight(dyd, xd, g), c.w,
                 what + " backward_weight");
    expect_match(tt::to_doubles(ts::conv1d_backward_bias(dy)), ref_bias_grad(dyd, g.k, g.wo),
                 ts::Shape{g.k}, what + " backward_bias");
  }
}

// ---- conv_transpose2d ---------------------------------------------------------------------------

struct tconv_case {
  std::string name;
  ts::Shape x, w;
  ts::ConvTranspose2dOptions o;
  bool sparse = false;  // stride 2 with dilation 2: only odd output rows / columns are reached
};

/// conv_transpose2d and its gradients against the definition: the forward is the input gradient
/// of the convolution geometry transpose_geom_of gives; its input gradient is that convolution's
/// forward (of grad_output, to the transposed conv's input size); its weight gradient that
/// convolution's weight gradient with the roles of input and output gradient exchanged.
template <class T>
void check_transpose(const tconv_case& c, ts::Generator& gen) {
  const std::string what = name_of<T>() + " conv_transpose2d " + c.name + ": x " + c.x.to_string() +
                           " w " + c.w.to_string();
  const geom g = transpose_geom_of(c.x, c.w, c.o);
  const ts::Shape ys = g.x_shape();
  auto x = ints<T>(c.x, gen), w = ints<T>(c.w, gen), bias = ints<T>({g.c}, gen);
  const vec xd = tt::to_doubles(x), wd = tt::to_doubles(w), bd = tt::to_doubles(bias);
  auto y0 = ts::conv_transpose2d(x, w, c.o);
  ASSERT_EQ(y0.shape(), ys) << what;
  const vec want0 = ref_backward_input(xd, wd, g);
  if (!c.sparse) expect_mostly_nonzero(want0, what);
  expect_match(tt::to_doubles(y0), want0, ys, what + " forward");
  auto y = ts::conv_transpose2d(x, w, bias, c.o);
  ASSERT_EQ(y.shape(), ys) << what;
  expect_match(tt::to_doubles(y), add_channel_bias(want0, bd, g.h * g.w), ys,
               what + " forward with bias");
  auto gy = ints<T>(ys, gen);
  const vec gyd = tt::to_doubles(gy);
  auto dx = ts::conv_transpose2d_backward_input(gy, w, c.x, c.o);
  ASSERT_EQ(dx.shape(), c.x) << what;
  const vec want_dx = ref_forward(gyd, wd, nullptr, g, false);
  expect_mostly_nonzero(want_dx, what + " backward_input");
  expect_match(tt::to_doubles(dx), want_dx, c.x, what + " backward_input");
  auto dw = ts::conv_transpose2d_backward_weight(gy, x, c.w, c.o);
  ASSERT_EQ(dw.shape(), c.w) << what;
  const vec want_dw = ref_backward_weight(xd, gyd, g);
  expect_mostly_nonzero(want_dw, what + " backward_weight");
  expect_match(tt::to_doubles(dw), want_dw, c.w, what + " backward_weight");
  expect_match(tt::to_doubles(ts::conv2d_backward_bias(gy)), ref_bias_grad(gyd, g.c, g.h * g.w),
               ts::Shape{g.c}, what + " backward_bias");
}

std::vector<tconv_case> transpose_cases() {
  return {
      {"stride 2 pad 1 output_padding 1 groups 2 dilation 2",
       {2, 4, 5, 6},
       {4, 3, 3, 3},
       {.stride = {2, 2},
        .padding = {1, 1},
        .output_padding = {1, 1},
        .dilation = {2, 2},
        .groups = 2},
       true},
      {"stride 2 pad 1 output_padding 1 (decoder upsampling)",
       {2, 8, 4, 5},
       {8, 5, 3, 3},
       {.stride = {2, 2}, .padding = {1, 1}, .output_padding = {1, 1}}},
      {"stride 1 dilation 2 output_padding 1 pad 0 (output_padding below dilation)",
       {1, 3, 4, 5},
       {3, 4, 3, 3},
       {.output_padding = {1, 1}, .dilation = {2, 2}}},
      {"stride 1 dilation 2 output_padding 1 pad 1",
       {1, 3, 6, 5},
       {3, 4, 3, 3},
       {.padding = {1, 1}, .output_padding = {1, 1}, .dilation = {2, 2}}},
      {"stride 3 output_padding 2",
       {2, 3, 4, 3},
       {3, 2, 3, 3},
       {.stride = {3, 3}, .output_padding = {2, 2}}},
      {"stride 1 no padding (full convolution)", {2, 5, 4, 4}, {5, 6, 3, 3}, {}},
      {"1x1 (pointwise)", {2, 7, 3, 4}, {7, 5, 1, 1}, {}},
      {"rectangular 3x2 stride (2,1) pad (1,0)",
       {1, 4, 5, 6},
       {4, 3, 3, 2},
       {.stride = {2, 1}, .padding = {1, 0}, .output_padding = {1, 0}}},
  };
}

template <class T>
class ConvTranspose : public ::testing::Test {};
TYPED_TEST_SUITE(ConvTranspose, ExactTypes);

TYPED_TEST(ConvTranspose, AgainstTheDefinition) {
  ts::Generator gen(71);
  for (const auto& c : transpose_cases()) check_transpose<TypeParam>(c, gen);
}

TEST(ConvTranspose, OutputShape) {
  // Ho = (H - 1) * stride - 2 * padding + dilation * (R - 1) + output_padding + 1.
  auto y = ts::conv_transpose2d(ts::ones<float>({1, 4, 5, 6}), ts::ones<float>({4, 3, 3, 3}),
                                {.stride = {2, 2},
                                 .padding = {1, 1},
                                 .output_padding = {1, 1},
                                 .dilation = {2, 2},
                                 .groups = 2});
  EXPECT_EQ(y.shape(), (ts::Shape{1, 6, 12, 14}));
}

// ---- options ------------------------------------------------------------------------------------

TEST(ConvOptions, FusedReluIsMaxOfConvAndZero) {
  ts::Generator gen(81);
  const std::vector<conv_case> cases = {
      {"3x3 pad 1", {2, 5, 9, 9}, {7, 5, 3, 3}, {.padding = {1, 1}}},
      {"1x1 (pointwise)", {2, 8, 5, 5}, {6, 8, 1, 1}},
      {"3x3 C=64: 576 taps, several k blocks", {1, 64, 6, 6}, {9, 64, 3, 3}, {.padding = {1, 1}}},
      {"1x1 C=700 (pointwise, several k blocks)", {1, 700, 3, 3}, {5, 700, 1, 1}},
      {"depthwise stride 2",
       {1, 6, 8, 8},
       {6, 1, 3, 3},
       {.stride = {2, 2}, .padding = {1, 1}, .groups = 6}},
  };
  for (auto c : cases) {
    auto x = ints<float>(c.x, gen), w = ints<float>(c.w, gen), bias = ints<float>({c.w[0]}, gen);
    const geom g = geom_of(c.x, c.w, c.o);
    const vec xd = tt::to_doubles(x), wd = tt::to_doubles(w), bd = tt::to_doubles(bias);
    const vec plain = ref_forward(xd, wd, &bd, g, false);
    // Both signs occur, so the relu has something to do.
    ASSERT_GT(std::count_if(plain.begin(), plain.end(), [](double v) { return v < 0; }), 0);
    ASSERT_GT(std::count_if(plain.begin(), plain.end(), [](double v) { return v > 0; }), 0);
    vec want = plain;
    for (auto& v : want) v = std::max(v, 0.0);
    c.o.relu = true;
    expect_match(tt::to_doubles(ts::conv2d(x, w, bias, c.o)), want, g.y_shape(),
                 c.name + " relu with bias");
    expect_match(tt::to_doubles(ts::conv2d(x, w, c.o)), ref_forward(xd, wd, nullptr, g, true),
                 g.y_shape(), c.name + " relu without bias");
    auto out = ts::full<float>(g.y_shape(), NAN).transpose(1, 3).contiguous().transpose(1, 3);
    ts::conv2d(x, w, bias, c.o, out);
    expect_match(tt::to_doubles(out), want, g.y_shape(), c.name + " relu into a strided out");
  }
  // conv1d's relu.
  auto x1 = ints<float>({2, 3, 10}, gen), w1 = ints<float>({4, 3, 3}, gen);
  auto y1 = ts::conv1d(x1, w1, {.padding = 1, .relu = true});
  auto y1p = ts::conv1d(x1, w1, {.padding = 1});
  const auto a = y1.to_vector(), b = y1p.to_vector();
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(a[i], std::max(b[i], 0.0f)) << "conv1d relu " << i;
}

TEST(ConvOptions, OutFormIntoViewsAndOtherDtypes) {
  ts::Generator gen(82);
  const ts::Conv2dOptions o{.stride = {2, 1}, .padding = {1, 1}};
  // Operands in [1, 3]: sums around 2300, past 2048, so a half out shows it was rounded once.
  auto x = ints<float>({2, 64, 9, 8}, gen, 1, 3), w = ints<float>({10, 64, 3, 3}, gen, 1, 3);
  auto bias = ints<float>({10}, gen);
  const geom g = geom_of(x.shape(), w.shape(), o);
  const vec bd = tt::to_doubles(bias);
  const vec want = ref_forward(tt::to_doubles(x), tt::to_doubles(w), &bd, g, false);
  ASSERT_GT(*std::max_element(want.begin(), want.end()), 2048.0);
  const ts::Shape ys = g.y_shape();
  {  // A step-2 slice of a wider buffer: the columns between must survive.
    auto buf = ts::full<float>({ys[0], ys[1], ys[2], 2 * ys[3]}, -7.0f);
    auto view = buf.slice(3, 1, 2 * ys[3], 2);
    const auto& r = ts::conv2d(x, w, bias, o, view);
    EXPECT_EQ(r.data(), view.data());
    expect_match(tt::to_doubles(view), want, ys, "out = step-2 slice");
    for (float v : buf.slice(3, 0, 2 * ys[3], 2).to_vector()) ASSERT_EQ(v, -7.0f);
  }
  {  // A channels-last (permuted) out.
    auto out = ts::full<float>({ys[0], ys[2], ys[3], ys[1]}, NAN).permute({0, 3, 1, 2});
    ts::conv2d(x, w, bias, o, out);
    expect_match(tt::to_doubles(out), want, ys, "out = NHWC view");
  }
  {  // A channel window of a bigger contiguous tensor.
    auto buf = ts::full<float>({ys[0], ys[1] + 4, ys[2], ys[3]}, -7.0f);
    auto view = buf.slice(1, 2, 2 + ys[1]);
    ts::conv2d(x, w, bias, o, view);
    expect_match(tt::to_doubles(view), want, ys, "out = channel slice");
    for (float v : buf.slice(1, 0, 2).to_vector()) ASSERT_EQ(v, -7.0f);
    for (float v : buf.slice(1, 2 + ys[1], 4 + ys[1]).to_vector()) ASSERT_EQ(v, -7.0f);
  }
  {  // Half out: accumulated in float, rounded once.
    auto out = ts::full<ts::half>(ys, ts::half(NAN));
    ts::conv2d(x, w, bias, o, out);
    expect_match(tt::to_doubles(out), round_to<ts::half>(want), ys, "float inputs, half out");
    auto hv = ts::full<ts::half>({ys[0], ys[1], ys[2], 2 * ys[3]}, ts::half(NAN))
                  .slice(3, 0, 2 * ys[3], 2);
    ts::conv2d(x, w, bias, o, hv);
    expect_match(tt::to_doubles(hv), round_to<ts::half>(want), ys, "float inputs, half view out");
  }
  {  // Double out of float inputs, and a float out of half inputs (mixed precision).
    auto out = ts::empty<double>(ys);
    ts::conv2d(x, w, bias, o, out);
    expect_match(tt::to_doubles(out), want, ys, "float inputs, double out");
    auto fo = ts::full<float>(ys, NAN);
    ts::conv2d(x.astype<ts::half>(), w.astype<ts::half>(), bias.astype<ts::half>(), o, fo);
    expect_match(tt::to_doubles(fo), want, ys, "half inputs, float out (no rounding to half)");
  }
}

TEST(ConvOptions, OutAliasingTheInput) {
  // out is x (same shape when K == C and the padding keeps the size): the result is as if x had
  // been copied first.
  ts::Generator gen(83);
  for (const auto& [ws, o] :
       {std::pair{ts::Shape{6, 6, 1, 1}, ts::Conv2dOptions{}},
        std::pair{ts::Shape{6, 6, 3, 3}, ts::Conv2dOptions{.padding = {1, 1}}},
        std::pair{ts::Shape{6, 3, 3, 3}, ts::Conv2dOptions{.padding = {1, 1}, .groups = 2}}}) {
    const std::string what = "conv2d(x, w, bias, opts, x) w " + ws.to_string();
    auto x = ints<float>({2, 6, 7, 5}, gen), w = ints<float>(ws, gen), bias = ints<float>({6}, gen);
    const geom g = geom_of(x.shape(), ws, o);
    const vec bd = tt::to_doubles(bias);
    const vec want = ref_forward(tt::to_doubles(x), tt::to_doubles(w), &bd, g, false);
    ts::conv2d(x, w, bias, o, x);
    expect_match(tt::to_doubles(x), want, g.y_shape(), what);
  }
}

TEST(ConvOptions, UnbatchedInput) {
  // x [C, H, W] gives y [K, Ho, Wo], the batch-of-one result without its batch dim.
  ts::Generator gen(84);
  const ts::Conv2dOptions o{.stride = {2, 2}, .padding = {1, 1}};
  auto x = ints<float>({5, 9, 8}, gen), w = ints<float>({7, 5, 3, 3}, gen);
  auto bias = ints<float>({7}, gen);
  const geom g = geom_of({1, 5, 9, 8}, w.shape(), o);
  const vec bd = tt::to_doubles(bias), xd = tt::to_doubles(x), wd = tt::to_doubles(w);
  auto y = ts::conv2d(x, w, bias, o);
  ASSERT_EQ(y.shape(), (ts::Shape{7, g.ho, g.wo}));
  expect_match(tt::to_doubles(y), ref_forward(xd, wd, &bd, g, false), y.shape(), "unbatched");
  auto y0 = ts::conv2d(x, w, o);
  ASSERT_EQ(y0.shape(), (ts::Shape{7, g.ho, g.wo}));
  expect_match(tt::to_doubles(y0), ref_forward(xd, wd, nullptr, g, false), y0.shape(),
               "unbatched without bias");
}

TEST(ConvOptions, NonContiguousOperands) {
  // The same values through transposed, step-2 and window views give the contiguous result.
  ts::Generator gen(85);
  const conv_case c{"3x3 stride 2 pad 1 groups 2",
                    {2, 6, 9, 8},
                    {8, 3, 3, 3},
                    {.stride = {2, 2}, .padding = {1, 1}, .groups = 2}};
  const geom g = geom_of(c.x, c.w, c.o);
  auto x = ints<double>(c.x, gen), w = ints<double>(c.w, gen), bias = ints<double>({8}, gen);
  auto dy = ints<double>(g.y_shape(), gen);
  const vec xd = tt::to_doubles(x), wd = tt::to_doubles(w), bd = tt::to_doubles(bias),
            dyd = tt::to_doubles(dy);
  const vec want_y = ref_forward(xd, wd, &bd, g, false), want_dx = ref_backward_input(dyd, wd, g),
            want_dw = ref_backward_weight(dyd, xd, g);
  const tt::layout layouts[] = {tt::layout::transposed, tt::layout::strided};
  for (auto lx : layouts)
    for (auto lw : layouts) {
      const std::string what =
          "layouts x " + std::to_string(int(lx)) + " w/dy " + std::to_string(int(lw));
      auto xv = tt::relayout(x, lx), wv = tt::relayout(w, lw), bv = tt::relayout(bias, lx),
           dyv = tt::relayout(dy, lw);
      ASSERT_FALSE(xv.is_contiguous());
      ASSERT_FALSE(wv.is_contiguous());
      expect_match(tt::to_doubles(ts::conv2d(xv, wv, bv, c.o)), want_y, g.y_shape(),
                   what + " forward");
      expect_match(tt::to_doubles(ts::conv2d_backward_input(dyv, wv, c.x, c.o)), want_dx, c.x,
                   what + " backward_input");
      expect_match(tt::to_doubles(ts::conv2d_backward_weight(dyv, xv, c.w, c.o)), want_dw, c.w,
                   what + " backward_weight");
      expect_match(tt::to_doubles(ts::conv2d_backward_bias(dyv)),
                   ref_bias_grad(dyd, 8, g.ho * g.wo), ts::Shape{8}, what + " backward_bias");
    }
  // A channel window and every other image of bigger batches; NHWC storage.
  auto big = ints<double>({5, 10, 9, 8}, gen);
  auto xs = big.slice(0, 0, 4, 2).slice(1, 3, 9);
  auto nhwc = ints<double>({2, 9, 8, 6}, gen).permute({0, 3, 1, 2});
  for (const auto& xv : {xs, nhwc}) {
    const vec xvd = tt::to_doubles(xv);
    expect_match(tt::to_doubles(ts::conv2d(xv, w, bias, c.o)), ref_forward(xvd, wd, &bd, g, false),
                 g.y_shape(), "sliced / NHWC input " + xv.strides().to_string());
    expect_match(tt::to_doubles(ts::conv2d_backward_weight(dy, xv, c.w, c.o)),
                 ref_backward_weight(dyd, xvd, g), c.w,
                 "sliced / NHWC input, backward_weight " + xv.strides().to_string());
  }
  // A transposed-conv operand pair through views.
  const tconv_case tc = transpose_cases()[0];
  const geom tg = transpose_geom_of(tc.x, tc.w, tc.o);
  auto tx = ints<float>(tc.x, gen), tw = ints<float>(tc.w, gen);
  expect_match(tt::to_doubles(ts::conv_transpose2d(tt::relayout(tx, tt::layout::transposed),
                                                   tt::relayout(tw, tt::layout::strided), tc.o)),
               ref_backward_input(tt::to_doubles(tx), tt::to_doubles(tw), tg), tg.x_shape(),
               "conv_transpose2d through views");
}

// ---- errors -------------------------------------------------------------------------------------

/// f throws E whose message starts with "tessera::<op>:" and contains every part.
template <class E, class F>
void expect_error(F f, const std::string& op, const std::vector<std::string>& parts,
                  const std::string& what) {
  try {
    f();
    ADD_FAILURE() << what << ": no throw";
  } catch (const E& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.rfind("tessera::" + op + ":", 0), 0u) << what << ": " << m;
    for (const auto& p : parts)
      EXPECT_NE(m.find(p), std::string::npos) << what << ": '" << p << "' not in: " << m;
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": wrong exception: " << e.what();
  }
}

/// The fused ReLU-mask + bias-gradient pass the autograd conv backward uses: g = dy * (y > 0)
/// and db = g summed per channel, against the definition, on planes below, at and across the
/// 1024-element summation block; the same bits on one and two threads.
template <class T>
void check_bias_backward_masked() {
  ts::Generator gen(71);
  for (const ts::Shape& s : {ts::Shape{3, 5, 1}, ts::Shape{2, 3, 7, 3}, ts::Shape{2, 4, 32, 32},
                             ts::Shape{3, 2, 1500}, ts::Shape{1, 1, 2049}}) {
    const std::string what = name_of<T>() + " bias backward " + s.to_string();
    const int64_t k = s[1], plane = s.numel() / (s[0] * k);
    auto dy = ints<T>(s, gen), y = ints<T>(s, gen);
    const vec dyd = tt::to_doubles(dy), yd = tt::to_doubles(y);
    vec masked = dyd;
    for (size_t i = 0; i < masked.size(); ++i) masked[i] = yd[i] > 0 ? dyd[i] : 0.0;
    ts::set_num_threads(1);
    auto [g1, db1] = ts::detail::bias_and_relu_backward("test", dy, y, true);
    ts::set_num_threads(2);
    auto [g2, db2] = ts::detail::bias_and_relu_backward("test", dy, y, true);
    auto [none, db_only] = ts::detail::bias_and_relu_backward("test", dy, y, false);
    auto [copy, db_plain] = ts::detail::bias_and_relu_backward("test", dy, ts::Tensor<T>(), true);
    ts::set_num_threads(0);
    EXPECT_FALSE(none.defined()) << what;
    expect_match(tt::to_doubles(g1), masked, s, what + " mask");
    expect_match(tt::to_doubles(db1), ref_bias_grad(masked, k, plane), ts::Shape{k}, what + " db");
    expect_match(tt::to_doubles(copy), dyd, s, what + " unmasked copy");
    expect_match(tt::to_doubles(db_plain), ref_bias_grad(dyd, k, plane), ts::Shape{k},
                 what + " db without relu");
    EXPECT_EQ(tt::to_doubles(db1), tt::to_doubles(db2)) << what << ": thread count changed bits";
    EXPECT_EQ(tt::to_doubles(db1), tt::to_doubles(db_only)) << what;
    EXPECT_EQ(tt::to_doubles(g1), tt::to_doubles(g2)) << what;
  }
  expect_error<ts::shape_error>(
      [] {
        ts::detail::bias_and_relu_backward("conv backward", ts::Tensor<T>({2, 3}),
                                           ts::Tensor<T>({3, 2}), true);
      },
      "conv backward", {"relu output", "[3, 2]", "[2, 3]"}, "bias backward shape");
}
TEST(ConvBiasBackward, MaskedFloat) { check_bias_backward_masked<float>(); }
TEST(ConvBiasBackward, MaskedDouble) { check_bias_backward_masked<double>(); }

TEST(ConvErrors, Conv2dArguments) {
  auto f = [](ts::Shape s) { return ts::ones<float>(s); };
  auto x = f({1, 6, 5, 5});
  auto conv = [&](const ts::Tensor<float>& xx, const ts::Tensor<float>& ww,
                  const ts::Conv2dOptions& o) { return [=] { (void)ts::conv2d(xx, ww, o); }; };
  using SE = ts::shape_error;
  expect_error<SE>(conv(x, f({4, 2, 3, 3}), {.groups = 4}), "conv2d", {"groups 4", "6"},
                   "groups not dividing C");
  expect_error<SE>(conv(x, f({5, 3, 3, 3}), {.groups = 2}), "conv2d", {"groups 2", "5"},
                   "groups not dividing K");
  expect_error<SE>(conv(x, f({4, 6, 3, 3}), {.groups = 0}), "conv2d", {"groups 0"}, "groups 0");
  expect_error<SE>(conv(x, f({4, 5, 3, 3}), {}), "conv2d", {"[4, 5, 3, 3]", "6"},
                   "weight channel mismatch");
  expect_error<SE>(conv(x, f({4, 6, 3, 3}), {.groups = 2}), "conv2d", {"[4, 6, 3, 3]", "3"},
                   "weight channels with groups 2");
  expect_error<SE>(conv(x, f({4, 6, 3, 3}), {.stride = {1, 0}}), "conv2d", {"stride 0"},
                   "stride 0");
  expect_error<SE>(conv(x, f({4, 6, 3, 3}), {.stride = {-2, 1}}), "conv2d", {"stride -2"},
                   "negative stride");
  expect_error<SE>(conv(x, f({4, 6, 3, 3}), {.stride = {1, int64_t{1} << 21}}), "conv2d",
                   {"stride 2097152"}, "absurd stride");
  expect_error<SE>(conv(x, f({4, 6, 3, 3}), {.dilation = {0, 1}}), "conv2d", {"dilation 0"},
                   "dilation 0");
  expect_error<SE>(conv(x, f({4, 6, 3, 3}), {.padding = {-1, 0}}), "conv2d", {"padding -1"},
                   "negative padding");
  expect_error<SE>(conv(x, f({4, 6, 3, 3}), {.padding_end = {0, -2}}), "conv2d", {"-2"},
                   "negative padding_end");
  expect_error<SE>(conv(f({1, 1, 2, 2}), f({1, 1, 3, 3}), {}), "conv2d", {"3x3", "2x2"},
                   "kernel larger than the input");
  expect_error<SE>(conv(x, f({4, 6, 3, 3}), {.dilation = {3, 3}}), "conv2d", {"7x7", "5x5"},
                   "dilated kernel larger than the input");
  expect_error<SE>(conv(f({1, 6, 2, 5}), f({4, 6, 3, 3}), {.padding_end = {0, 0}}), "conv2d",
                   {"3x3"}, "kernel larger than the input with end padding only");
  expect_error<SE>(conv(x, f({4, 6, 3}), {}), "conv2d", {"[4, 6, 3]"}, "3-D weight");
  expect_error<SE>(conv(x, f({4, 6, 3, 3, 1}), {}), "conv2d", {"[4, 6, 3, 3, 1]"}, "5-D weight");
  expect_error<SE>(conv(f({5, 5}), f({4, 1, 3, 3}), {}), "conv2d", {"[5, 5]"}, "2-D input");
  expect_error<SE>(conv(f({1, 1, 6, 5, 5}), f({4, 6, 3, 3}), {}), "conv2d", {"[1, 1, 6, 5, 5]"},
                   "5-D input");
  expect_error<SE>(conv(x, f({4, 6, 0, 3}), {.padding = {1, 1}}), "conv2d", {"[4, 6, 0, 3]"},
                   "empty kernel");
  expect_error<SE>(
      [&] {
        (void)ts::conv2d(x, f({4, 6, 3, 3}), f({5}));
      },
      "conv2d", {"bias", "[5]", "4"}, "bias of the wrong length");
  expect_error<SE>(
      [&] {
        (void)ts::conv2d(x, f({4, 6, 3, 3}), f({4, 1}));
      },
      "conv2d", {"bias", "[4, 1]"}, "2-D bias");
  EXPECT_THROW((void)ts::conv2d(ts::Tensor<float>{}, f({4, 6, 3, 3})), ts::error);
  EXPECT_THROW((void)ts::conv2d(x, ts::Tensor<float>{}), ts::error);
}

TEST(ConvErrors, BackwardArguments) {
  auto f = [](ts::Shape s) { return ts::ones<float>(s); };
  const ts::Conv2dOptions o{.padding = {1, 1}};
  const ts::Shape xs{2, 6, 5, 5}, ws{4, 6, 3, 3};
  using SE = ts::shape_error;
  expect_error<SE>(
      [&] {
        (void)ts::conv2d_backward_input(f({2, 4, 5, 6}), f(ws), xs, o);
      },
      "conv2d_backward_input", {"[2, 4, 5, 6]", "[2, 4, 5, 5]"}, "grad_output of the wrong width");
  expect_error<SE>(
      [&] {
        (void)ts::conv2d_backward_input(f({2, 3, 5, 5}), f(ws), xs, o);
      },
      "conv2d_backward_input", {"[2, 3, 5, 5]"}, "grad_output of the wrong K");
  expect_error<SE>(
      [&] {
        (void)ts::conv2d_backward_input(f({4, 5, 5}), f(ws), xs, o);
      },
      "conv2d_backward_input", {"[4, 5, 5]"}, "3-D grad_output");
  expect_error<SE>(
      [&] {
        (void)ts::conv2d_backward_input(f({2, 4, 5, 5}), f(ws), {2, 5, 5, 5}, o);
      },
      "conv2d_backward_input", {"[4, 6, 3, 3]"}, "x_shape channel mismatch");
  expect_error<SE>(
      [&] {
        (void)ts::conv2d_backward_input(f({2, 4, 5, 5}), f(ws), xs, {.stride = {0, 1}});
      },
      "conv2d_backward_input", {"stride 0"}, "stride 0");
  expect_error<SE>(
      [&] {
        (void)ts::conv2d_backward_weight(f({1, 4, 5, 5}), f(xs), ws, o);
      },
      "conv2d_backward_weight", {"[1, 4, 5, 5]", "[2, 4, 5, 5]"}, "grad_output of the wrong batch");
  expect_error<SE>(
      [&] {
        (void)ts::conv2d_backward_weight(f({2, 4, 5, 5}), f(xs), {4, 6, 3}, o);
      },
      "conv2d_backward_weight", {"[4, 6, 3]"}, "3-D w_shape");
  expect_error<SE>(
      [&] {
        (void)ts::conv2d_backward_weight(f({2, 4, 5, 5}), f(xs), ws, {.padding = {-1, 1}});
      },
      "conv2d_backward_weight", {"padding -1"}, "negative padding");
  expect_error<SE>([&] { (void)ts::conv2d_backward_bias(f({4})); }, "conv2d_backward_bias", {"[4]"},
                   "1-D grad_output");
  // conv1d.
  expect_error<SE>(
      [&] {
        (void)ts::conv1d(f({2, 6, 5, 5}), f({4, 6, 3}));
      },
      "conv1d", {"[2, 6, 5, 5]"}, "4-D input to conv1d");
  expect_error<SE>(
      [&] {
        (void)ts::conv1d(f({2, 6, 9}), f({4, 6, 3, 3}));
      },
      "conv1d", {"[4, 6, 3, 3]"}, "4-D weight to conv1d");
  expect_error<SE>(
      [&] {
        (void)ts::conv1d(f({2, 6, 9}), f({4, 5, 3}));
      },
      "conv1d", {"5", "6"}, "conv1d channel mismatch");
  expect_error<SE>(
      [&] {
        (void)ts::conv1d(f({2, 6, 9}), f({4, 6, 3}), {.stride = 0});
      },
      "conv1d", {"stride 0"}, "conv1d stride 0");
  expect_error<SE>(
      [&] {
        (void)ts::conv1d(f({2, 6, 9}), f({4, 6, 3}), f({3}));
      },
      "conv1d", {"bias", "[3]"}, "conv1d bias length");
  expect_error<SE>(
      [&] {
        (void)ts::conv1d_backward_input(f({2, 4, 8}), f({4, 6, 3}), {2, 6, 9}, {});
      },
      "conv1d_backward_input", {"[2, 4, 1, 8]"}, "conv1d grad_output of the wrong length");
  expect_error<SE>(
      [&] {
        (void)ts::conv1d_backward_weight(f({2, 4, 8}), f({2, 6, 9}), {4, 6, 3}, {});
      },
      "conv1d_backward_weight", {"grad_output"}, "conv1d_backward_weight grad_output");
}

TEST(ConvErrors, ConvTranspose2dArguments) {
  auto f = [](ts::Shape s) { return ts::ones<float>(s); };
  auto x = f({1, 4, 5, 5});
  auto tconv = [&](const ts::Tensor<float>& ww, const ts::ConvTranspose2dOptions& o) {
    return [=] { (void)ts::conv_transpose2d(x, ww, o); };
  };
  using SE = ts::shape_error;
  expect_error<SE>(tconv(f({4, 3, 3, 3}), {.stride = {2, 2}, .output_padding = {2, 0}}),
                   "conv_transpose2d", {"output_padding 2"}, "output_padding == stride");
  expect_error<SE>(tconv(f({4, 3, 3, 3}), {.output_padding = {0, 1}}), "conv_transpose2d",
                   {"output_padding 1"}, "output_padding >= stride 1 and dilation 1");
  expect_error<SE>(
      tconv(f({4, 3, 3, 3}), {.stride = {2, 2}, .output_padding = {3, 0}, .dilation = {3, 1}}),
      "conv_transpose2d", {"output_padding 3"}, "output_padding >= stride 2 and >= dilation 3");
  expect_error<SE>(tconv(f({4, 3, 3, 3}), {.output_padding = {-1, 0}}), "conv_transpose2d",
                   {"output_padding -1"}, "negative output_padding");
  expect_error<SE>(tconv(f({5, 3, 3, 3}), {}), "conv_transpose2d", {"[5, 3, 3, 3]", "4"},
                   "weight C_in mismatch");
  expect_error<SE>(tconv(f({4, 3, 3, 3}), {.groups = 3}), "conv_transpose2d", {"groups 3"},
                   "groups not dividing C_in");
  expect_error<SE>(tconv(f({4, 3, 3, 3}), {.stride = {0, 1}}), "conv_transpose2d", {"stride 0"},
                   "stride 0");
  expect_error<SE>(tconv(f({4, 3, 3, 3}), {.dilation = {1, 0}}), "conv_transpose2d", {"dilation 0"},
                   "dilation 0");
  expect_error<SE>(tconv(f({4, 3, 3, 3}), {.padding = {4, 4}}), "conv_transpose2d", {"-1"},
                   "padding leaves no output");
  expect_error<SE>(tconv(f({4, 3, 3}), {}), "conv_transpose2d", {"[4, 3, 3]"}, "3-D weight");
  expect_error<SE>(
      [&] {
        (void)ts::conv_transpose2d(x, f({4, 3, 3, 3}), f({4}));
      },
      "conv_transpose2d", {"bias", "[4]", "3"}, "bias of the wrong length");
  expect_error<SE>(
      [&] {
        (void)ts::conv_transpose2d_backward_input(f({1, 3, 7, 8}), f({4, 3, 3, 3}), x.shape(), {});
      },
      "conv_transpose2d_backward_input", {"[1, 3, 7, 8]", "[1, 3, 7, 7]"},
      "backward_input grad_output shape");
  expect_error<SE>(
      [&] {
        (void)ts::conv_transpose2d_backward_weight(f({1, 3, 7, 6}), x, {4, 3, 3, 3}, {});
      },
      "conv_transpose2d_backward_weight", {"[1, 3, 7, 6]", "[1, 3, 7, 7]"},
      "backward_weight grad_output shape");
}

TEST(ConvErrors, OutFormLeavesOutUntouched) {
  auto x = ts::ones<float>({1, 6, 5, 5}), w = ts::ones<float>({4, 6, 3, 3});
  auto sentinel = ts::full<float>({1, 4, 3, 4}, 9.0f);
  expect_error<ts::shape_error>([&] { ts::conv2d(x, w, ts::Tensor<float>{}, {}, sentinel); },
                                "conv2d", {"output has shape [1, 4, 3, 4]", "[1, 4, 3, 3]"},
                                "out of the wrong shape");
  auto good = ts::full<float>({1, 4, 3, 3}, 9.0f);
  expect_error<ts::shape_error>([&] { ts::conv2d(x, w, ts::ones<float>({3}), {}, good); }, "conv2d",
                                {"bias", "[3]"}, "out= with a bias of the wrong length");
  expect_error<ts::shape_error>(
      [&] {
        ts::conv2d(x, w, ts::Tensor<float>{}, {.stride = {0, 0}}, good);
      },
      "conv2d", {"stride 0"}, "out= with stride 0");
  for (float v : sentinel.to_vector()) EXPECT_EQ(v, 9.0f) << "out written before the throw";
  for (float v : good.to_vector()) EXPECT_EQ(v, 9.0f) << "out written before the throw";
  auto i8 = ts::ones<int8_t>({1, 6, 5, 5}), w8 = ts::ones<int8_t>({4, 6, 3, 3});
  expect_error<ts::dtype_error>([&] { ts::conv2d(i8, w8, ts::Tensor<int32_t>{}, {}, good); },
                                "conv2d", {"int32"}, "int8 convolution into a float out");
  for (float v : good.to_vector()) EXPECT_EQ(v, 9.0f) << "out written before the dtype_error";
  auto i32 = ts::zeros<int32_t>({1, 4, 3, 3});
  expect_error<ts::dtype_error>([&] { ts::conv2d(x, w, ts::Tensor<float>{}, {}, i32); }, "conv2d",
                                {"int32"}, "float convolution into an int32 out");
}

TEST(ConvErrors, Dtypes) {
  auto i8 = ts::ones<int8_t>({1, 6, 5, 5}), w8 = ts::ones<int8_t>({4, 6, 3, 3});
  auto dy8 = ts::ones<int8_t>({1, 4, 3, 3});
  using DE = ts::dtype_error;
  expect_error<DE>([&] { (void)ts::conv2d_backward_input(dy8, w8, i8.shape()); },
                   "conv2d_backward_input", {"int8"}, "int8 backward_input");
  expect_error<DE>([&] { (void)ts::conv2d_backward_weight(dy8, i8, w8.shape()); },
                   "conv2d_backward_weight", {"int8"}, "int8 backward_weight");
  expect_error<DE>(
      [&] {
        (void)ts::conv2d_backward_bias(ts::ones<int32_t>({1, 4, 3, 3}));
      },
      "conv2d_backward_bias", {"int32"}, "int32 backward_bias");
  expect_error<DE>(
      [&] {
        (void)ts::conv_transpose2d(i8, ts::ones<int8_t>({6, 2, 3, 3}));
      },
      "conv_transpose2d", {"int8"}, "int8 conv_transpose2d");
  // (The value-returning conv2d of int32 operands is left out: GCC 12 reports
  // -Winfinite-recursion on its unbatched branch there, see the report.)
  auto o32 = ts::zeros<int32_t>({1, 4, 3, 3});
  expect_error<DE>(
      [&] {
        ts::conv2d(ts::ones<int32_t>({1, 6, 5, 5}), ts::ones<int32_t>({4, 6, 3, 3}),
                   ts::Tensor<int32_t>{}, {}, o32);
      },
      "conv2d", {"int32"}, "int32 convolution");
  expect_error<DE>(
      [&] {
        (void)ts::conv1d(ts::ones<int32_t>({1, 6, 5}), ts::ones<int32_t>({4, 6, 3}));
      },
      "conv1d", {"int32"}, "int32 conv1d");
  expect_error<DE>(
      [&] {
        (void)ts::conv1d_backward_input(ts::ones<int8_t>({1, 4, 3}), ts::ones<int8_t>({4, 6, 3}),
                                        ts::Shape{1, 6, 5});
      },
      "conv1d_backward_input", {"int8"}, "int8 conv1d_backward_input");
}

}  // namespace

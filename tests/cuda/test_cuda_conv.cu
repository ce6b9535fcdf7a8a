// Tests of the CUDA convolution (conv_kernel<cuda>: conv2d / conv1d / conv_transpose2d forward,
// input, weight and bias gradients) and pooling (pool_kernel<cuda>), each against the CPU backend
// on the same inputs. Convolutions use small integers, so every floating dtype's result is exact
// (the CPU's and the device's summation orders give the same value) and must match bit for bit;
// average pooling divides, so it is compared to rounding. Every test skips, with a message, when
// no CUDA device is visible.
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "cuda_test_util.cuh"
// after the CUDA backend's headers (it includes the library's common header)
#include "../winograd_test_util.hpp"

namespace {
using namespace cuda_test;

template <class T>
HostT<T> ints(const ts::Shape& s, uint64_t seed, int64_t lo = -3, int64_t hi = 3) {
  ts::Generator g(seed);
  return ts::randint<T, ts::cpu>(lo, hi + 1, s, g);
}

/// At least half of the reference's elements are nonzero (a test of zeros proves nothing).
template <class T>
void expect_mostly_nonzero(const HostT<T>& t, const std::string& what) {
  int64_t nz = 0;
  for (const auto& v : t.to_vector()) nz += as_double(v) != 0;
  EXPECT_GE(2 * nz, t.numel()) << what << ": the reference is mostly zeros";
}

struct conv_case {
  ts::Shape x, w;
  ts::Conv2dOptions o;
  const char* name;
};

// Tails and every path: 3x3, strided / dilated / asymmetric padding, the same at stride 1 (an
// implicit-GEMM input gradient with uneven transposed padding), a padded 1x1 (negative padding
// in the input gradient's convolution), groups, depthwise, pointwise (no lowering) with and
// without groups, 1x1 stride 2 (lowered), kernel = image, a GEMM with several tiles, and an
// empty batch.
const conv_case conv_cases[] = {
    {{2, 5, 9, 11}, {7, 5, 3, 3}, {.padding = {1, 1}}, "3x3 pad 1"},
    {{3, 4, 13, 10},
     {6, 4, 3, 2},
     {.stride = {2, 1}, .padding = {1, 0}, .dilation = {2, 1}, .padding_end = {0, 2}},
     "strided dilated asymmetric"},
    {{2, 3, 9, 10},
     {4, 3, 3, 2},
     {.padding = {2, 0}, .dilation = {2, 3}, .padding_end = {1, 3}},
     "dilated asymmetric stride 1"},
    {{2, 3, 5, 6}, {4, 3, 1, 1}, {.padding = {1, 1}}, "1x1 padded"},
    {{2, 6, 8, 8}, {4, 3, 3, 3}, {.padding = {1, 1}, .groups = 2}, "groups 2"},
    {{2, 4, 7, 9}, {4, 1, 3, 3}, {.stride = {2, 2}, .padding = {1, 1}, .groups = 4}, "depthwise"},
    {{3, 5, 6, 7},
     {5, 1, 5, 3},
     {.padding = {2, 1}, .groups = 5, .padding_end = {1, 0}},
     "depthwise 5x3 stride 1"},
    {{2, 3, 9, 8},
     {6, 1, 3, 3},
     {.stride = {1, 2}, .padding = {2, 1}, .dilation = {2, 1}, .groups = 3},
     "depthwise two per channel, dilated"},
    {{3, 8, 5, 6}, {5, 8, 1, 1}, {}, "pointwise"},
    {{2, 6, 4, 4}, {6, 3, 1, 1}, {.groups = 2}, "pointwise groups"},
    {{2, 3, 7, 7}, {4, 3, 1, 1}, {.stride = {2, 2}}, "1x1 stride 2"},
    {{2, 3, 4, 4}, {5, 3, 4, 4}, {}, "kernel = image"},
    {{3, 16, 20, 20}, {136, 16, 3, 3}, {.padding = {1, 1}}, "several GEMM tiles"},
    {{0, 3, 5, 5}, {4, 3, 3, 3}, {.padding = {1, 1}}, "empty batch"},
    // Strided input gradients by stride phase (cuda_conv_phases): 2x2, uneven 3x2 with dilations
    // sharing a factor with the stride, groups with padding beyond the kernel, 4x4 (16 phases,
    // the most), 5x5 (25: the column matrix), a phase with no taps (2x2 kernel, stride 3).
    {{2, 5, 11, 9}, {6, 5, 3, 3}, {.stride = {2, 2}, .padding = {1, 1}}, "3x3 stride 2 pad 1"},
    {{1, 4, 13, 14},
     {5, 4, 2, 3},
     {.stride = {3, 2}, .padding = {2, 1}, .dilation = {3, 2}, .padding_end = {0, 2}},
     "stride 3x2 dilated"},
    {{2, 6, 9, 8},
     {4, 3, 3, 3},
     {.stride = {2, 2}, .padding = {3, 0}, .groups = 2},
     "groups stride 2 padding 3"},
    {{1, 3, 17, 16}, {4, 3, 5, 5}, {.stride = {4, 4}, .padding = {2, 2}}, "stride 4, 16 phases"},
    {{1, 2, 11, 12}, {3, 2, 3, 3}, {.stride = {5, 5}}, "stride 5 (column matrix)"},
    {{2, 3, 10, 10}, {4, 3, 2, 2}, {.stride = {3, 3}, .padding = {1, 1}}, "a phase without taps"},
};

// The gathers' division of pixel indices by the output row length (no device needed: the same
// constants and formula run on the host). Every divisor up to 2^12 and divisors near powers of
// two up to 2^31 - 1, each at the edges of its quotients and at random values below 2^31.
TEST(CudaFastDiv, EqualsIntegerDivisionBelow2To31) {
  std::vector<uint32_t> divisors;
  for (uint32_t d = 1; d <= 4096; ++d) divisors.push_back(d);
  for (int b = 12; b <= 31; ++b)
    for (int64_t e : {-1, 0, 1, 3}) {
      const int64_t d = (int64_t{1} << b) + e;
      if (d < (int64_t{1} << 31)) divisors.push_back(static_cast<uint32_t>(d));
    }
  std::mt19937 rng(7);
  constexpr uint32_t top = (uint32_t{1} << 31) - 1;
  int64_t checked = 0;
  for (const uint32_t d : divisors) {
    const ts::detail::cuda_fast_div div(d);
    std::vector<uint32_t> qs = {
        0, 1, d - 1, d, d + 1, 2 * d - 1, top, top - d, top - top % d, top - top % d - 1};
    for (int i = 0; i < 64; ++i) qs.push_back(rng() & top);
    for (const uint32_t q : qs) {
      if (q > top) continue;
      ASSERT_EQ(div(q), q / d) << q << " / " << d << " (mul " << div.mul << ", shift " << div.shift
                               << ")";
      ++checked;
    }
  }
  EXPECT_GT(checked, 4096 * 70);
}

// The stride phases' taps (no device needed): for every phase, kernel size, stride, dilation
// and padding up to small bounds, cuda_conv_phase_taps_of's progression is exactly the taps i
// with (a + pad - i dil) divisible by the stride, in order, and `first` the dy offset of the last.
TEST(CudaConvPhases, TapsAreExactlyThoseOnTheStride) {
  int64_t checked = 0;
  for (int64_t st = 1; st <= 5; ++st)
    for (int64_t a = 0; a < st; ++a)
      for (int64_t r = 1; r <= 7; ++r)
        for (int64_t d = 1; d <= 6; ++d)
          for (int64_t p = 0; p <= 8; ++p) {
            std::vector<int64_t> want;
            for (int64_t i = 0; i < r; ++i)
              if ((a + p - i * d) % st == 0) want.push_back(i);  // C++ %: 0 for multiples
            const auto t = ts::detail::cuda_conv_phase_taps_of(a, r, st, d, p);
            std::vector<int64_t> got;
            for (int64_t k = 0; k < t.count; ++k) got.push_back(t.i0 + k * t.step);
            ASSERT_EQ(got, want) << "phase " << a << " r " << r << " stride " << st << " dil " << d
                                 << " pad " << p;
            if (!want.empty()) {
              ASSERT_EQ(t.first, (a + p - want.back() * d) / st)
                  << "phase " << a << " r " << r << " stride " << st << " dil " << d << " pad "
                  << p;
            }
            ++checked;
          }
  EXPECT_EQ(checked, 15 * 7 * 6 * 9);
}

class CudaConvOps : public CudaFixture {};
class CudaPoolOps : public CudaFixture {};

template <class T>
class CudaConv : public CudaFixture {};
using ConvDtypes = ::testing::Types<float, double, ts::half, ts::bfloat16>;
TYPED_TEST_SUITE(CudaConv, ConvDtypes);

// Implicit GEMM switched off for a test's duration (restored however the test ends).
struct lowering_only {
  lowering_only() { ts::detail::cuda_conv_implicit_gemm() = false; }
  ~lowering_only() { ts::detail::cuda_conv_implicit_gemm() = true; }
};

// Depthwise layers' direct kernels switched off for a test's duration: they then run as GEMMs,
// one per group.
struct implicit_gemm_depthwise {
  implicit_gemm_depthwise() { ts::detail::cuda_conv_direct_depthwise() = false; }
  ~implicit_gemm_depthwise() { ts::detail::cuda_conv_direct_depthwise() = true; }
};

// Every forward case on the device against the CPU, with and without bias and ReLU.
template <class T>
void expect_forward_matches_cpu(const std::string& tag) {
  uint64_t seed = 1;
  for (const auto& c : conv_cases) {
    const auto x = ints<T>(c.x, seed++), w = ints<T>(c.w, seed++);
    const auto bias = ints<T>({c.w[0]}, seed++);
    const std::string what = tag + c.name;
    const auto want = ts::conv2d(x, w, bias, c.o);
    if (c.x[0] > 0) expect_mostly_nonzero(want, what);
    expect_close(ts::conv2d(x.template to<ts::cuda>(), w.template to<ts::cuda>(),
                            bias.template to<ts::cuda>(), c.o)
                     .template to<ts::cpu>(),
                 want, 0, 0, what + " with bias");
    auto o = c.o;
    o.relu = true;
    expect_same(
        what + " no bias, relu", 0, 0,
        [&](const auto& a, const auto& b) { return ts::conv2d(a, b, o); }, x, w);
  }
}

TYPED_TEST(CudaConv, ForwardMatchesCpuWithBiasAndRelu) {
  expect_forward_matches_cpu<TypeParam>("conv2d (implicit GEMM) ");
}

// The im2col lowering that geometries beyond the implicit GEMM's 32-bit positions take.
TYPED_TEST(CudaConv, ForwardThroughLoweringMatchesCpu) {
  const lowering_only scope;
  expect_forward_matches_cpu<TypeParam>("conv2d (im2col) ");
}

// Every case's input and weight gradients on the device against the CPU.
template <class T>
void expect_gradients_match_cpu(const std::string& tag) {
  uint64_t seed = 100;
  for (const auto& c : conv_cases) {
    const auto x = ints<T>(c.x, seed++), w = ints<T>(c.w, seed++);
    const auto dy = ints<T>(ts::conv2d(x, w, c.o).shape(), seed++);
    const std::string what = tag + c.name;
    const auto dx = ts::conv2d_backward_input(dy, w, c.x, c.o);
    const auto dw = ts::conv2d_backward_weight(dy, x, c.w, c.o);
    if (c.x[0] > 0) {
      expect_mostly_nonzero(dw, what);
      // Strides skip input pixels, whose gradient is then zero.
      if (c.o.stride == std::array<int64_t, 2>{1, 1}) expect_mostly_nonzero(dx, what);
    }
    const auto dyd = dy.template to<ts::cuda>();
    expect_close(
        ts::conv2d_backward_input(dyd, w.template to<ts::cuda>(), c.x, c.o).template to<ts::cpu>(),
        dx, 0, 0, what + " input");
    expect_close(
        ts::conv2d_backward_weight(dyd, x.template to<ts::cuda>(), c.w, c.o).template to<ts::cpu>(),
        dw, 0, 0, what + " weight");
  }
}

// Input gradients of stride-1 convolutions as implicit GEMM; the others lowered.
TYPED_TEST(CudaConv, InputAndWeightGradientsMatchCpu) {
  expect_gradients_match_cpu<TypeParam>("conv2d backward ");
}

// Depthwise layers (one input channel per group) run direct kernels: the forward pass, the
// input gradients built from it (stride 1, and each stride phase) and the weight gradient, one
// launch per product.
// Here the same cases with them switched off, through the implicit GEMM, one product per group.

TYPED_TEST(CudaConv, DepthwiseThroughImplicitGemmMatchesCpu) {
  const implicit_gemm_depthwise scope;
  expect_forward_matches_cpu<TypeParam>("conv2d (depthwise as GEMM) ");
  expect_gradients_match_cpu<TypeParam>("conv2d backward (depthwise as GEMM) ");
}

// The direct kernels are one launch for every group; switched off, one GEMM per group.
TEST_F(CudaConvOps, DepthwiseForwardAndWeightGradientAreOneLaunch) {
  const auto x = ints<float>({2, 6, 9, 8}, 5).to<ts::cuda>();
  const auto w = ints<float>({12, 1, 3, 3}, 6).to<ts::cuda>();
  const auto dy = ints<float>({2, 12, 9, 8}, 7).to<ts::cuda>();
  const ts::Conv2dOptions o{.padding = {1, 1}, .groups = 6};
  const auto launches = [](auto op) {
    const int64_t before = ts::cuda_activity_counts().launches;
    (void)op();
    return ts::cuda_activity_counts().launches - before;
  };
  const auto forward = [&] { return ts::conv2d(x, w, o); };
  const auto weight_grad = [&] { return ts::conv2d_backward_weight(dy, x, w.shape(), o); };
  EXPECT_EQ(launches(forward), 1);
  EXPECT_EQ(launches(weight_grad), 1);
  const implicit_gemm_depthwise scope;
  EXPECT_GE(launches(forward), 6);
  EXPECT_GE(launches(weight_grad), 6);
}

// Depthwise layers with more work than one grid of the direct kernels holds (the grid is capped
// at 32 blocks per SM: on the emulation's 2 SMs, 16384 strips of the forward pass, 64 weights of
// the gradient), so their grid-stride loops take a second turn: 3 x 8 x 40 x 70 (17,280 strips)
// and a 5x5 kernel (200 weights, one block each).
TEST_F(CudaConvOps, DepthwiseLayersBeyondOneGridMatchCpu) {
  const std::pair<ts::Shape, ts::Shape> shapes[] = {{{3, 8, 40, 70}, {8, 1, 3, 3}},
                                                    {{1, 8, 9, 9}, {8, 1, 5, 5}}};
  uint64_t seed = 900;
  for (const auto& [xs, ws] : shapes) {
    const ts::Conv2dOptions o{.padding = {ws[2] / 2, ws[3] / 2}, .groups = 8};
    const auto x = ints<float>(xs, seed++), w = ints<float>(ws, seed++);
    const auto dy = ints<float>(ts::conv2d(x, w, o).shape(), seed++);
    const auto xd = x.to<ts::cuda>(), wd = w.to<ts::cuda>(), dyd = dy.to<ts::cuda>();
    const std::string what = "depthwise " + std::to_string(ws[2]) + "x" + std::to_string(ws[3]);
    expect_close(ts::conv2d(xd, wd, o).to<ts::cpu>(), ts::conv2d(x, w, o), 0, 0, what);
    expect_close(ts::conv2d_backward_input(dyd, wd, xs, o).to<ts::cpu>(),
                 ts::conv2d_backward_input(dy, w, xs, o), 0, 0, what + " input gradient");
    expect_close(ts::conv2d_backward_weight(dyd, xd, ws, o).to<ts::cpu>(),
                 ts::conv2d_backward_weight(dy, x, ws, o), 0, 0, what + " weight gradient");
  }
}

// Every input gradient through the column matrix and col2im (what strided convolutions and
// geometries beyond the implicit GEMM's 32-bit positions take).
TYPED_TEST(CudaConv, GradientsThroughLoweringMatchCpu) {
  const lowering_only scope;
  expect_gradients_match_cpu<TypeParam>("conv2d backward (lowered) ");
}

// Channels last on the pipelined kernels: half, bfloat16 and (tf32) float convolutions with a
// multiple of 16 bytes of channels per group copy the images to [n][h][w][c] and the weights to
// [k][r][s][cg], then gather 16-byte chunks of channels on the wgmma kernel (where built for
// sm_90a; the host emulation models it) or the mma.sync kernel; with both switched off, the
// planar implicit GEMM of the register-staged kernel. Small integers: every result equals the
// CPU's bit for bit. Each case also checks which kernel ran.
template <class T>
class CudaConvChannelsLast : public CudaFixture {
 protected:
  void SetUp() override {
    CudaFixture::SetUp();
    saved_ = ts::get_float32_matmul_precision();
    ts::set_float32_matmul_precision(ts::matmul_precision::high);  // float: tf32
  }
  void TearDown() override {
    ts::set_float32_matmul_precision(saved_);
    ts::detail::cuda_gemm_start_at(ts::detail::cuda_gemm_pipeline::wgmma);
  }

 private:
  ts::matmul_precision saved_ = ts::matmul_precision::highest;
};
using ChannelsLastDtypes = ::testing::Types<ts::half, ts::bfloat16, float>;
TYPED_TEST_SUITE(CudaConvChannelsLast, ChannelsLastDtypes);

// Tails in pixels, output channels and k; strides, dilation and asymmetric padding (stride 1 and
// not); groups; a 1x1 stride-2 layer; a long k; several tiles of pixels and of output channels.
const conv_case channels_last_cases[] = {
    {{2, 16, 9, 11}, {24, 16, 3, 3}, {.padding = {1, 1}}, "3x3 pad 1"},
    {{3, 8, 13, 10},
     {12, 8, 3, 2},
     {.stride = {2, 1}, .padding = {1, 0}, .dilation = {2, 1}, .padding_end = {0, 2}},
     "strided dilated asymmetric"},
    {{2, 8, 9, 10},
     {4, 8, 3, 2},
     {.padding = {2, 0}, .dilation = {2, 3}, .padding_end = {1, 3}},
     "dilated asymmetric stride 1"},
    {{2, 32, 8, 8}, {16, 16, 3, 3}, {.padding = {1, 1}, .groups = 2}, "groups 2"},
    {{1, 24, 12, 12}, {130, 24, 1, 1}, {.stride = {2, 2}}, "1x1 stride 2, 130 outputs"},
    {{2, 64, 6, 6}, {8, 64, 3, 3}, {.padding = {1, 1}}, "64 channels (k = 576)"},
    {{1, 8, 20, 20}, {8, 8, 3, 3}, {.padding = {1, 1}}, "400 pixels"},
};

TYPED_TEST(CudaConvChannelsLast, ForwardAndInputGradientOnEveryKernelMatchCpu) {
  using T = TypeParam;
  namespace d = ts::detail;
  using kernel = d::cuda_gemm_pipeline;
  using Cfg = typename d::cuda_tc_select<T, T, float>::type;
  const bool tensor_cores = d::cuda_built_for(d::cuda_gemm_tc<Cfg, T, T>, 80);
  const bool wgmma_takes = tensor_cores && d::cuda_wgmma_built();
  const auto launches = [](kernel k) { return d::cuda_gemm_choice(k).launches.load(); };
  uint64_t seed = 900;
  for (const auto& c : channels_last_cases) {
    const auto x = ints<T>(c.x, seed++), w = ints<T>(c.w, seed++);
    const auto bias = ints<T>({c.w[0]}, seed++);
    auto o = c.o;
    o.relu = true;
    const auto want = ts::conv2d(x, w, bias, o);
    const auto dy = ints<T>(want.shape(), seed++);
    const bool stride1 = c.o.stride == std::array<int64_t, 2>{1, 1};
    const auto dx = stride1 ? ts::conv2d_backward_input(dy, w, c.x, c.o) : HostT<T>();
    expect_mostly_nonzero(ts::conv2d(x, w, bias, c.o), c.name);  // before the ReLU
    // Every kernel with k whole and split in 3 parts (where k has 2 granules of 128 or more: 2
    // or 3 parts).
    const int64_t k_rows = c.w[1] * c.w[2] * c.w[3];
    for (const auto& [k, parts] :
         {std::pair{kernel::wgmma, 1}, std::pair{kernel::wgmma, 3}, std::pair{kernel::mma_sync, 1},
          std::pair{kernel::mma_sync, 3}, std::pair{kernel::none, 1}, std::pair{kernel::none, 3}}) {
      d::cuda_gemm_start_at(k);
      const split_k_scope split(parts);
      const std::string what = std::string(c.name) +
                               (k == kernel::wgmma      ? " (wgmma"
                                : k == kernel::mma_sync ? " (mma.sync"
                                                        : " (planar") +
                               (parts > 1 ? ", k in 3 parts)" : ")");
      const int64_t wgmma_before = launches(kernel::wgmma), mma_before = launches(kernel::mma_sync);
      const int64_t splits_before = d::cuda_gemm_split_products().load();
      expect_close(ts::conv2d(x.template to<ts::cuda>(), w.template to<ts::cuda>(),
                              bias.template to<ts::cuda>(), o)
                       .template to<ts::cpu>(),
                   want, 0, 0, what + " forward");
      // One product per group, on the first kernel of the pass that takes it.
      const int64_t groups = c.o.groups;
      const bool wgmma_runs = k == kernel::wgmma && wgmma_takes;
      const bool mma_runs = tensor_cores && k != kernel::none && !wgmma_runs;
      EXPECT_EQ(launches(kernel::wgmma) - wgmma_before, wgmma_runs ? groups : 0)
          << what << ": which kernel ran";
      EXPECT_EQ(launches(kernel::mma_sync) - mma_before, mma_runs ? groups : 0)
          << what << ": which kernel ran";
      EXPECT_EQ(d::cuda_gemm_split_products().load() - splits_before,
                parts > 1 && k_rows > 128 ? groups : 0)
          << what << ": products split";
      if (stride1) {  // the input gradient is a stride-1 forward convolution of dy
        expect_mostly_nonzero(dx, what);
        expect_close(ts::conv2d_backward_input(dy.template to<ts::cuda>(),
                                               w.template to<ts::cuda>(), c.x, c.o)
                         .template to<ts::cpu>(),
                     dx, 0, 0, what + " input gradient");
      }
    }
  }
}

TEST_F(CudaConvOps, ConvBiasGradientAndReluMask) {
  const auto dy = ints<float>({5, 7, 13, 17}, 200), y = ints<float>({5, 7, 13, 17}, 201);
  expect_same(
      "conv2d_backward_bias", 0, 0, [](const auto& g) { return ts::conv2d_backward_bias(g); }, dy);
  const auto [g_cpu, db_cpu] = ts::detail::bias_and_relu_backward("test", dy, y, true);
  const auto [g_dev, db_dev] =
      ts::detail::bias_and_relu_backward("test", dy.to<ts::cuda>(), y.to<ts::cuda>(), true);
  expect_close(g_dev.to<ts::cpu>(), g_cpu, 0, 0, "relu-masked gradient");
  expect_close(db_dev.to<ts::cpu>(), db_cpu, 0, 0, "masked bias gradient");
  expect_mostly_nonzero(db_cpu, "masked bias gradient");
  // A long plane (several strides of the block) in double.
  const auto big = ints<double>({2, 3, 301, 257}, 202);
  expect_same(
      "conv2d_backward_bias long planes", 0, 0,
      [](const auto& g) { return ts::conv2d_backward_bias(g); }, big);
}

TEST_F(CudaConvOps, Int8ConvolutionIsExact) {
  const auto x = ints<int8_t>({2, 5, 9, 9}, 300, -128, 127);
  const auto w = ints<int8_t>({6, 5, 3, 3}, 301, -128, 127);
  const auto bias = ints<int32_t>({6}, 302, -1000, 1000);
  const ts::Conv2dOptions o{.stride = {2, 1}, .padding = {1, 1}};
  expect_same(
      "int8 conv2d", 0, 0,
      [&](const auto& a, const auto& b, const auto& c) { return ts::conv2d(a, b, c, o); }, x, w,
      bias);
}

TEST_F(CudaConvOps, Conv1dAndTransposedConvolution) {
  const auto x = ints<float>({3, 4, 29}, 400), w = ints<float>({5, 4, 3}, 401);
  const ts::Conv1dOptions o1{.stride = 2, .padding = 1, .dilation = 2};
  expect_same(
      "conv1d", 0, 0, [&](const auto& a, const auto& b) { return ts::conv1d(a, b, o1); }, x, w);
  const auto xt = ints<float>({2, 6, 5, 7}, 402), wt = ints<float>({6, 2, 3, 3}, 403);
  const ts::ConvTranspose2dOptions ot{
      .stride = {2, 2}, .padding = {1, 0}, .output_padding = {1, 0}, .groups = 2};
  expect_same(
      "conv_transpose2d", 0, 0,
      [&](const auto& a, const auto& b) { return ts::conv_transpose2d(a, b, ot); }, xt, wt);
}

// The implicit GEMM's tap table depends on the geometry alone: it is built by the first forward
// pass of a geometry and reused by the next (one launch fewer), with the same result.
TEST_F(CudaConvOps, TapTablesAreBuiltOncePerGeometry) {
  const auto x = ints<float>({2, 3, 13, 11}, 420), w = ints<float>({4, 3, 3, 2}, 421);
  const ts::Conv2dOptions o{.padding = {1, 0}, .dilation = {1, 2}};
  const auto xd = x.to<ts::cuda>(), wd = w.to<ts::cuda>();
  const ts::cuda_activity a = ts::cuda_activity_counts();
  const auto first = ts::conv2d(xd, wd, o);
  const ts::cuda_activity b = ts::cuda_activity_counts();
  const auto second = ts::conv2d(xd, wd, o);
  const ts::cuda_activity c = ts::cuda_activity_counts();
  EXPECT_EQ(c.launches - b.launches, b.launches - a.launches - 1);
  EXPECT_EQ(c.host_waits, a.host_waits);
  expect_close(first.to<ts::cpu>(), ts::conv2d(x, w, o), 0, 0, "conv2d, table built");
  expect_close(second.to<ts::cpu>(), ts::conv2d(x, w, o), 0, 0, "conv2d, table reused");
}

// A table is built on the stream of its first use; another stream that then uses it waits for
// the build on the device (an event), not for the first stream's other work. (In the emulation
// the second stream's work runs before the first's unless that wait orders it.)
TEST_F(CudaConvOps, ATapTableBuiltOnOneStreamServesAnother) {
  const auto x = ints<float>({1, 5, 17, 19}, 430), w = ints<float>({3, 5, 3, 3}, 431);
  const ts::Conv2dOptions o{.padding = {2, 1}, .dilation = {3, 1}};  // a geometry of its own
  const auto want = ts::conv2d(x, w, o);
  const auto xd = x.to<ts::cuda>(), wd = w.to<ts::cuda>();
  ts::backend::memory<ts::cuda>::synchronize();
  cudaStream_t a = nullptr, b = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking), cudaSuccess);
  {
    ts::Tensor<float, ts::cuda> ya, yb;
    int64_t on_a = 0, on_b = 0;
    {
      const ts::cuda_stream_guard g(a);
      const int64_t before = ts::cuda_activity_counts().launches;
      ya = ts::conv2d(xd, wd, o);  // builds the table
      on_a = ts::cuda_activity_counts().launches - before;
    }
    {
      const ts::cuda_stream_guard g(b);
      const int64_t before = ts::cuda_activity_counts().launches;
      yb = ts::conv2d(xd, wd, o);
      on_b = ts::cuda_activity_counts().launches - before;
      expect_close(yb.to<ts::cpu>(), want, 0, 0, "conv2d on the second stream");  // waits on b
    }
    EXPECT_EQ(on_b, on_a - 1) << "the second stream built the table again";
    const ts::cuda_stream_guard g(a);
    expect_close(ya.to<ts::cpu>(), want, 0, 0, "conv2d on the first stream");
  }
  ts::backend::memory<ts::cuda>::synchronize();
  ASSERT_EQ(cudaStreamDestroy(a), cudaSuccess);
  ASSERT_EQ(cudaStreamDestroy(b), cudaSuccess);
}

// The weight gradient as implicit GEMM: one launch per group with k whole, two (product and
// reduction) with k split, none of them lowering the input or regrouping dy; the same sums as the
// CPU's, exactly (small integers), on every case. float and double run on the SIMT kernel; half,
// bfloat16 and float under tf32 on the register-staged tensor-core kernel where it was built for
// sm_80+ (each case checks which), else on the SIMT kernel too.
template <class T>
void expect_implicit_weight_gradients(const std::string& tag, bool tensor_core_type) {
  namespace d = ts::detail;
  using Cfg = typename d::cuda_tc_select<T, T, float>::type;
  bool tensor_cores = false;
  if constexpr (!std::is_void_v<Cfg>)
    tensor_cores = tensor_core_type && d::cuda_built_for(d::cuda_gemm_tc<Cfg, T, T>, 80);
  const implicit_gemm_depthwise gemm_only;  // depthwise layers too
  uint64_t seed = 700;
  for (const auto& c : conv_cases) {
    const auto x = ints<T>(c.x, seed++), w = ints<T>(c.w, seed++);
    const auto dy = ints<T>(ts::conv2d(x, w, c.o).shape(), seed++);
    const auto want = ts::conv2d_backward_weight(dy, x, c.w, c.o);
    const auto xd = x.template to<ts::cuda>(), dyd = dy.template to<ts::cuda>();
    (void)ts::conv2d_backward_weight(dyd, xd, c.w, c.o);  // builds the tap table
    for (const int parts : {1, 3}) {
      const split_k_scope split(parts);
      const std::string what = tag + c.name + (parts > 1 ? " (k in 3 parts)" : " (k whole)");
      const int64_t before = ts::cuda_activity_counts().launches;
      const int64_t tc_before = d::cuda_gemm_tc_choice().launches.load();
      const auto got = ts::conv2d_backward_weight(dyd, xd, c.w, c.o);
      const int64_t launches = ts::cuda_activity_counts().launches - before;
      const int64_t tc_launches = d::cuda_gemm_tc_choice().launches.load() - tc_before;
      const int64_t pairs = c.x[0] * want.numel() == 0 ? 0 : dy.numel() / dy.shape()[1];
      // A split needs 2 granules of 128 pairs; then every group is a product and its reduction.
      // 16-bit gradients are summed in float, then converted (one launch).
      const bool split_taken = parts > 1 && pairs > 128;
      const int converts = sizeof(T) == 2 ? 1 : 0;
      EXPECT_EQ(launches, c.o.groups * (split_taken ? 2 : 1) + converts) << what;
      EXPECT_EQ(tc_launches, tensor_cores ? c.o.groups : 0) << what << ": which kernel";
      expect_close(got.template to<ts::cpu>(), want, 0, 0, what);
    }
  }
}

TEST_F(CudaConvOps, WeightGradientsAsImplicitGemm) {
  expect_implicit_weight_gradients<float>("float ", false);
  expect_implicit_weight_gradients<double>("double ", false);
  expect_implicit_weight_gradients<ts::half>("half ", true);
  expect_implicit_weight_gradients<ts::bfloat16>("bfloat16 ", true);
  const ts::matmul_precision saved = ts::get_float32_matmul_precision();
  ts::set_float32_matmul_precision(ts::matmul_precision::high);
  expect_implicit_weight_gradients<float>("float (tf32) ", true);
  ts::set_float32_matmul_precision(saved);
  // Switched off, the tensor-core types run on the SIMT kernel, with the same sums.
  ts::detail::cuda_gemm_tc_choice().enabled = false;
  expect_implicit_weight_gradients<ts::bfloat16>("bfloat16 (SIMT) ", false);
  ts::detail::cuda_gemm_tc_choice().enabled = true;
}

using winograd_test::winograd_error;
using winograd_test::winograd_scope;

// Winograd F(4x4, 3x3) (winograd.cuh) on the layers it takes: tails of 1 to 3 outputs in both
// directions, no padding, padding 2, asymmetric padding, bias and ReLU, odd channel counts, images
// in one chunk and in chunks of one image (or two); forward and input gradients against the CPU's
// direct sums, and weight gradients (F(3x3, 4x4)) likewise, within a bound that a wrong
// coefficient or a misplaced tile exceeds by orders of magnitude; each checks that the Winograd
// path ran (one output transform, or one dy transform, per chunk).
TEST_F(CudaConvOps, WinogradEveryPassWithinItsRounding) {
  namespace d = ts::detail;
  const conv_case cases[] = {
      {{2, 16, 9, 11}, {16, 16, 3, 3}, {.padding = {1, 1}}, "pad 1, tails of 1 and 3"},
      {{3, 17, 8, 8}, {20, 17, 3, 3}, {}, "no padding, 17 channels"},
      {{1, 16, 6, 13}, {24, 16, 3, 3}, {.padding = {2, 2}}, "pad 2"},
      {{2, 16, 7, 7}, {16, 16, 3, 3}, {.padding = {1, 1}, .padding_end = {0, 2}}, "asymmetric"},
  };
  // Measured in the host emulation: at most 1.1e-5 (an input gradient's border pixel, whose own
  // taps are few and small beside its tile's); one coefficient changed (1/12 to 1/11) gives 5e-2.
  constexpr double bound = 1e-4;
  uint64_t seed = 900;
  for (const auto& c : cases) {
    ts::Generator gen(seed++);
    const auto x = ts::randn<float, ts::cpu>(c.x, gen), w = ts::randn<float, ts::cpu>(c.w, gen);
    const auto bias = ts::randn<float, ts::cpu>({c.w[0]}, gen);
    const auto xd = x.to<ts::cuda>(), wd = w.to<ts::cuda>(), bd = bias.to<ts::cuda>();
    const auto magnitude = ts::conv2d(ts::abs(x), ts::abs(w), ts::abs(bias), c.o);
    const auto want = ts::conv2d(x, w, bias, c.o);
    const auto dy = ts::randn<float, ts::cpu>(want.shape(), gen);
    const auto dx_want = ts::conv2d_backward_input(dy, w, c.x, c.o);
    const auto dx_magnitude = ts::conv2d_backward_input(ts::abs(dy), ts::abs(w), c.x, c.o);
    const auto dw_want = ts::conv2d_backward_weight(dy, x, c.w, c.o);
    const auto dw_magnitude = ts::conv2d_backward_weight(ts::abs(dy), ts::abs(x), c.w, c.o);
    // V and M of one image of a pass with `channels` in and out, ho x wo outputs; the chunks.
    const auto image_bytes = [](int64_t channels, int64_t ho, int64_t wo) {
      return 36 * channels * ((ho + 3) / 4) * ((wo + 3) / 4) * 4;
    };
    const int64_t fwd_bytes = image_bytes(c.w[0] + c.w[1], want.shape()[2], want.shape()[3]);
    const int64_t dx_bytes = image_bytes(c.w[0] + c.w[1], c.x[2], c.x[3]);
    const auto chunks = [&](int64_t per_image) {
      const int64_t per_chunk = std::max<int64_t>(1, d::cuda_winograd_scratch_bytes() / per_image);
      return (c.x[0] + per_chunk - 1) / per_chunk;
    };
    const winograd_scope scope;  // after the CPU's direct sums (the CPU honours it too)
    for (const bool small_chunks : {false, true}) {
      const int64_t saved = d::cuda_winograd_scratch_bytes();
      // Room for one image of the larger pass: the other may fit more than one.
      if (small_chunks) d::cuda_winograd_scratch_bytes() = std::max(fwd_bytes, dx_bytes);
      const std::string what = std::string(c.name) + (small_chunks ? ", small chunks" : "");
      const int64_t before = d::cuda_winograd_choice().launches.load();
      const auto got = ts::conv2d(xd, wd, bd, c.o).to<ts::cpu>();
      EXPECT_EQ(d::cuda_winograd_choice().launches.load() - before, chunks(fwd_bytes))
          << what << ": Winograd output transforms";
      EXPECT_LE(winograd_error(got, want, magnitude), bound) << what << " forward";
      auto o = c.o;
      o.relu = true;
      const auto relu_got = ts::conv2d(xd, wd, bd, o).to<ts::cpu>();
      EXPECT_LE(winograd_error(relu_got, ts::relu(want), magnitude), bound) << what << " relu";
      // The input gradient is a stride-1 convolution of dy (c.w[0] channels in, c.x[1] out).
      const int64_t before_dx = d::cuda_winograd_choice().launches.load();
      const auto dx = ts::conv2d_backward_input(dy.to<ts::cuda>(), wd, c.x, c.o).to<ts::cpu>();
      EXPECT_EQ(d::cuda_winograd_choice().launches.load() - before_dx, chunks(dx_bytes))
          << what << ": Winograd output transforms of dx";
      EXPECT_LE(winograd_error(dx, dx_want, dx_magnitude), bound) << what << " input gradient";
      // The weight gradient (F(3x3, 4x4)): the forward pass's tiles, a dy transform per chunk.
      const int64_t before_dw = d::cuda_winograd_choice().launches.load();
      const auto dw = ts::conv2d_backward_weight(dy.to<ts::cuda>(), xd, c.w, c.o).to<ts::cpu>();
      EXPECT_EQ(d::cuda_winograd_choice().launches.load() - before_dw, chunks(fwd_bytes))
          << what << ": Winograd chunks of dw";
      EXPECT_LE(winograd_error(dw, dw_want, dw_magnitude), bound) << what << " weight gradient";
      d::cuda_winograd_scratch_bytes() = saved;
    }
  }
}

// What Winograd does not take runs as before, bit for bit: conv_algorithm::gemm, stride 2,
// 15 input channels, 15 output channels, two groups, 5x5 taps, dilation 2, double, float under
// tf32, and the path switched off.
TEST_F(CudaConvOps, WinogradLeavesOtherLayersAlone) {
  namespace d = ts::detail;
  const ts::Conv2dOptions pad1{.padding = {1, 1}};
  struct layer {
    ts::Shape x, w;
    ts::Conv2dOptions o;
    const char* name;
  };
  const layer layers[] = {
      {{2, 16, 9, 9}, {16, 16, 3, 3}, {.stride = {2, 2}, .padding = {1, 1}}, "stride 2"},
      {{2, 15, 9, 9}, {16, 15, 3, 3}, pad1, "15 input channels"},
      {{2, 16, 9, 9}, {15, 16, 3, 3}, pad1, "15 output channels"},
      {{2, 32, 9, 9}, {32, 16, 3, 3}, {.padding = {1, 1}, .groups = 2}, "two groups"},
      {{2, 16, 9, 9}, {16, 16, 5, 5}, {.padding = {2, 2}}, "5x5"},
      {{2, 16, 9, 9}, {16, 16, 3, 3}, {.padding = {2, 2}, .dilation = {2, 2}}, "dilation 2"},
  };
  uint64_t seed = 950;
  const auto expect_untouched = [&](const layer& l, const std::string& what) {
    const auto x = ints<float>(l.x, seed++), w = ints<float>(l.w, seed++);
    // The CPU's direct sums: the CPU takes the same layers as Winograd under the setting.
    const ts::conv_algorithm chosen = ts::get_float32_conv_algorithm();
    ts::set_float32_conv_algorithm(ts::conv_algorithm::gemm);
    const auto want = ts::conv2d(x, w, l.o);
    const auto dy = ints<float>(want.shape(), seed++);
    const auto want_dw = ts::conv2d_backward_weight(dy, x, l.w, l.o);
    ts::set_float32_conv_algorithm(chosen);
    const int64_t before = d::cuda_winograd_choice().launches.load();
    expect_close(ts::conv2d(x.to<ts::cuda>(), w.to<ts::cuda>(), l.o).to<ts::cpu>(), want, 0, 0,
                 what);
    expect_close(
        ts::conv2d_backward_weight(dy.to<ts::cuda>(), x.to<ts::cuda>(), l.w, l.o).to<ts::cpu>(),
        want_dw, 0, 0, what + " weight gradient");
    EXPECT_EQ(d::cuda_winograd_choice().launches.load(), before) << what;
  };
  const layer same_as_winograd{{2, 16, 9, 9}, {16, 16, 3, 3}, pad1, "3x3"};
  expect_untouched(same_as_winograd, "conv_algorithm::gemm");
  const winograd_scope scope;
  for (const auto& l : layers) expect_untouched(l, std::string("winograd chosen, ") + l.name);
  {
    const auto x = ints<double>({2, 16, 9, 9}, seed++), w = ints<double>({16, 16, 3, 3}, seed++);
    const int64_t before = d::cuda_winograd_choice().launches.load();
    expect_same(
        "double", 0, 0, [&](const auto& a, const auto& b) { return ts::conv2d(a, b, pad1); }, x, w);
    EXPECT_EQ(d::cuda_winograd_choice().launches.load(), before) << "double";
  }
  const ts::matmul_precision saved = ts::get_float32_matmul_precision();
  ts::set_float32_matmul_precision(ts::matmul_precision::high);
  {
    const int64_t before = d::cuda_winograd_choice().launches.load();
    const auto x = ints<float>({2, 16, 9, 9}, seed++), w = ints<float>({16, 16, 3, 3}, seed++);
    (void)ts::conv2d(x.to<ts::cuda>(), w.to<ts::cuda>(), pad1).to<ts::cpu>();
    const auto dy = ints<float>({2, 16, 9, 9}, seed++);
    (void)ts::conv2d_backward_weight(dy.to<ts::cuda>(), x.to<ts::cuda>(), {16, 16, 3, 3}, pad1)
        .to<ts::cpu>();
    EXPECT_EQ(d::cuda_winograd_choice().launches.load(), before) << "tf32";
  }
  ts::set_float32_matmul_precision(saved);
  d::cuda_winograd_choice().enabled = false;
  expect_untouched(same_as_winograd, "switched off");
  d::cuda_winograd_choice().enabled = true;
}

TEST_F(CudaConvOps, ConvErrorsAreThrownBeforeAnyLaunch) {
  const auto x = ts::zeros<float, ts::cuda>({2, 5, 9, 9});
  const auto w = ts::zeros<float, ts::cuda>({6, 4, 3, 3});
  EXPECT_THROW(ts::conv2d(x, w), ts::shape_error);
}

// ---------------------------------------------------------------------------------------------
// Pooling.

struct pool_case {
  ts::Shape x;
  ts::Pool2dOptions o;
  const char* name;
};
const pool_case pool_cases[] = {
    {{2, 3, 8, 8}, {.kernel = {2, 2}}, "2x2/2"},
    {{2, 3, 11, 9}, {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}}, "3x3/2 pad 1"},
    {{1, 2, 10, 13}, {.kernel = {3, 2}, .stride = {2, 3}, .ceil_mode = true}, "ceil mode"},
    {{2, 2, 12, 12}, {.kernel = {3, 3}, .stride = {1, 1}, .padding = {1, 1}}, "overlapping"},
    {{3, 1, 7, 5}, {.kernel = {2, 3}, .stride = {1, 2}, .padding = {1, 1}}, "uneven"},
};

template <class T>
class CudaPool : public CudaFixture {};
using PoolDtypes = ::testing::Types<float, double, ts::half>;
TYPED_TEST_SUITE(CudaPool, PoolDtypes);

/// Autograd's max pooling backward (the gather over the forward pass's windows) gives `want`,
/// the CPU's scatter, exactly, in one launch and without waiting for the device.
template <class T>
void expect_gathered_max_backward(const ts::Tensor<T, ts::cpu>& x, const ts::Pool2dOptions& o,
                                  const ts::Tensor<T, ts::cpu>& g,
                                  const ts::Tensor<int64_t, ts::cuda>& indices,
                                  const ts::Tensor<T, ts::cpu>& want, const std::string& what) {
  const auto plan = ts::detail::max_pool_plan("max_pool2d", x, o);
  const auto gd = g.template to<ts::cuda>();
  const ts::cuda_activity before = ts::cuda_activity_counts();
  const auto got = ts::detail::max_pool2d_backward_of_forward(plan, gd, indices, x.shape());
  const ts::cuda_activity after = ts::cuda_activity_counts();
  EXPECT_EQ(after.launches - before.launches, 1) << what;
  EXPECT_EQ(after.host_waits - before.host_waits, 0) << what;
  expect_close(got.template to<ts::cpu>(), want, 0, 0, what + " backward (gather)");
}

TYPED_TEST(CudaPool, MaxPoolingValuesIndicesAndGradient) {
  using T = TypeParam;
  uint64_t seed = 500;
  for (auto c : pool_cases) {
    const std::string what = std::string("max_pool2d ") + c.name;
    const auto x = sample<T>(c.x, seed++);
    const auto want = ts::max_pool2d_with_indices(x, c.o);
    const auto got = ts::max_pool2d_with_indices(x.template to<ts::cuda>(), c.o);
    expect_close(got.values.template to<ts::cpu>(), want.values, 0, 0, what);
    EXPECT_TRUE(same_bits(got.indices.template to<ts::cpu>(), want.indices)) << what;
    const auto g = ints<T>(want.values.shape(), seed++);
    const auto gx = ts::max_pool2d_backward(g, want.indices, c.x);
    expect_mostly_nonzero(g, what);
    expect_close(
        ts::max_pool2d_backward(g.template to<ts::cuda>(), got.indices, c.x).template to<ts::cpu>(),
        gx, 0, 0, what + " backward");
    expect_gathered_max_backward(x, c.o, g, got.indices, gx, what);
    c.o.dilation = {2, 1};  // dilation is max pooling's alone
    if (c.o.padding[0] == 0) {
      const auto wd = ts::max_pool2d_with_indices(x, c.o);
      const auto gd = ts::max_pool2d_with_indices(x.template to<ts::cuda>(), c.o);
      EXPECT_TRUE(same_bits(gd.indices.template to<ts::cpu>(), wd.indices)) << what << " dilated";
      const auto gg = ints<T>(wd.values.shape(), seed++);
      expect_gathered_max_backward(x, c.o, gg, gd.indices,
                                   ts::max_pool2d_backward(gg, wd.indices, c.x), what + " dilated");
    }
  }
}

TYPED_TEST(CudaPool, AverageAndAdaptivePoolingWithGradients) {
  using T = TypeParam;
  const double tol = ulps2<T>();
  uint64_t seed = 600;
  for (auto c : pool_cases) {
    const std::string what = std::string("avg_pool2d ") + c.name;
    const auto x = sample<T>(c.x, seed++);
    for (bool include : {true, false}) {
      c.o.count_include_pad = include;
      const auto o = c.o;
      expect_same(
          what + (include ? " include pad" : " exclude pad"), tol, tol,
          [&](const auto& a) { return ts::avg_pool2d(a, o); }, x);
      const auto g = sample<T>(ts::avg_pool2d(x, o).shape(), seed++);
      expect_same(
          what + " backward", tol, tol,
          [&](const auto& a) { return ts::avg_pool2d_backward(a, c.x, o); }, g);
    }
  }
  const auto x = sample<T>({2, 3, 10, 7}, seed++);
  for (std::array<int64_t, 2> out : {std::array<int64_t, 2>{1, 1}, {3, 4}, {10, 7}, {4, 7}}) {
    const std::string what =
        "adaptive_avg_pool2d to " + std::to_string(out[0]) + "x" + std::to_string(out[1]);
    expect_same(
        what, tol, tol, [&](const auto& a) { return ts::adaptive_avg_pool2d(a, out); }, x);
    const auto g = sample<T>({2, 3, out[0], out[1]}, seed++);
    const ts::Shape in = x.shape();
    expect_same(
        what + " backward", tol, tol,
        [&](const auto& a) { return ts::adaptive_avg_pool2d_backward(a, in); }, g);
  }
  expect_same(
      "global_avg_pool2d", tol, tol, [](const auto& a) { return ts::global_avg_pool2d(a); }, x);
}

TEST_F(CudaPoolOps, MaxPoolingOfIntegersAndNaN) {
  const ts::Pool2dOptions o{.kernel = {2, 2}};
  const auto xi = ints<int32_t>({2, 2, 6, 6}, 700, -50, 50);
  expect_same(
      "max_pool2d int32", 0, 0, [&](const auto& a) { return ts::max_pool2d(a, o); }, xi);
  auto xf = sample<float>({1, 1, 4, 4}, 701);
  xf.data()[5] = std::numeric_limits<float>::quiet_NaN();
  const auto got = ts::max_pool2d_with_indices(xf.to<ts::cuda>(), o);
  EXPECT_TRUE(std::isnan(got.values.to<ts::cpu>().data()[0]));
  EXPECT_EQ(got.indices.to<ts::cpu>().data()[0], 5);
}

TEST_F(CudaPoolOps, MaxPoolBackwardRejectsABadIndex) {
  const auto g = ts::ones<float, ts::cuda>({1, 2, 2, 2});
  auto idx = ts::zeros<int64_t, ts::cpu>({1, 2, 2, 2});
  idx.data()[6] = 16;  // the plane is 4 x 4
  EXPECT_THROW(ts::max_pool2d_backward(g, idx.to<ts::cuda>(), ts::Shape{1, 2, 4, 4}),
               ts::index_error);
  idx.data()[6] = -1;
  EXPECT_THROW(ts::max_pool2d_backward(g, idx.to<ts::cuda>(), ts::Shape{1, 2, 4, 4}),
               ts::index_error);
}

}  // namespace

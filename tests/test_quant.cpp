// Linear layers with narrow weights. int8 dynamic quantization: the per-row quantization
// against its definition, int8_linear against a float64 reference of the same quantized
// operands (exact up to float rounding) and against the float layer (within the quantization
// error bound). bfloat16, half and 8-bit float weights: the stored values against rounding by
// definition, lowp_linear against a float64 product of the same rounded operands. Edge cases and
// bad input for both.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <tessera/ops/quant.hpp>
#include <vector>

#include "test_util.hpp"

// A namespace of its own: test_layers compiles its sources as one (tests/CMakeLists.txt).
namespace test_quant {

namespace ts = tessera;
using ts::cpu;

// 8 bits (top 127, the default) and 7 bits (top 63).
TEST(QuantizeInt8Rows, RoundsEachRowToItsOwnStep) {
  ts::Generator g(1);
  auto x = ts::rand<float>({5, 37}, g, -4, 4);
  x.slice(0, 2, 3).fill_(0.0f);  // an all-zero row: step 0, values 0
  for (const int top : {127, 63}) {
    const auto q = top == 127 ? ts::quantize_int8_rows(x) : ts::quantize_int8_rows(x, top);
    ASSERT_EQ(q.values.shape(), x.shape());
    ASSERT_EQ(q.steps.shape(), ts::Shape({5, 1}));
    const auto xv = tt::to_doubles(x), qv = tt::to_doubles(q.values), sv = tt::to_doubles(q.steps);
    for (int64_t r = 0; r < 5; ++r) {
      double m = 0;
      for (int64_t c = 0; c < 37; ++c) m = std::max(m, std::abs(xv[r * 37 + c]));
      EXPECT_FLOAT_EQ(sv[r], m / top) << "top " << top << " row " << r;
      for (int64_t c = 0; c < 37; ++c) {
        const double want = sv[r] > 0 ? std::nearbyint(xv[r * 37 + c] / sv[r]) : 0.0;
        EXPECT_NEAR(qv[r * 37 + c], want, 1.0 + 1e-9) << r << ", " << c;  // float division
        EXPECT_LE(std::abs(qv[r * 37 + c]), top);
        EXPECT_LE(std::abs(qv[r * 37 + c] * sv[r] - xv[r * 37 + c]), sv[r] * 0.5 + 1e-6);
      }
    }
  }
  EXPECT_THROW((void)ts::quantize_int8_rows(x, 0), ts::error);
  EXPECT_THROW((void)ts::quantize_int8_rows(x, 128), ts::error);
}

// The CPU quantizes rows in one fused kernel (norm_kernel<cpu>::int8_rows); its values and steps
// equal the composed definition (the inf-norm of each row of x * keep, then int8_quantize) bit
// for bit: row lengths around the vector width, features left out (keep 0), an all-zero row, a
// row holding a NaN, rank 3, a strided x, 8 and 7 bits, and no columns at all.
TEST(QuantizeInt8Rows, FusedKernelEqualsTheComposedDefinition) {
  static_assert(ts::detail::has_int8_rows_kernel<cpu>);
  ts::Generator g(3);
  const auto composed = [](const ts::Tensor<float>& v, int top) {
    const auto steps = ts::detail::int8_row_steps(v, top);
    return ts::int8_rows<cpu>{ts::map(ts::detail::int8_quantize{static_cast<float>(top)}, v, steps),
                              steps};
  };
  for (int64_t c : {1, 7, 8, 9, 31, 384, 1537})
    for (const bool masked : {false, true})
      for (const int top : {127, 63}) {
        auto x = ts::randn<float>({6, c}, g) * 3.0f;
        x.slice(0, 1, 2).fill_(0.0f);
        x.at({4, c / 2}) = NAN;
        ts::Tensor<float> keep;
        if (masked) {
          std::vector<float> k(static_cast<size_t>(c), 1.0f);
          for (int64_t j = 0; j < c; j += 5) k[static_cast<size_t>(j)] = 0.0f;
          keep = ts::from_vector<float>(k);
          x.at({2, 0}) = 1000.0f;  // left out: must not set the row's step
        }
        const std::string what =
            "c " + std::to_string(c) + (masked ? " masked" : "") + " top " + std::to_string(top);
        const auto got = ts::detail::quantize_kept_rows(x, keep, top);
        const auto want = composed(masked ? x * keep : x, top);
        EXPECT_EQ(got.values.to_vector(), want.values.to_vector()) << what;
        const auto gs = got.steps.to_vector(), ws = want.steps.to_vector();
        ASSERT_EQ(got.steps.shape(), ts::Shape({6, 1})) << what;
        for (size_t r = 0; r < gs.size(); ++r) {
          if (r == 4) {
            EXPECT_TRUE(std::isnan(gs[r])) << what << ": the NaN row's step";
          } else {
            EXPECT_EQ(gs[r], ws[r]) << what << " row " << r;
          }
        }
        if (masked) {
          EXPECT_LT(gs[2], 100.0f / top) << what;
        }
      }
  // Rank 3 and a transposed (strided) x through the public op.
  const auto x3 = ts::randn<float>({2, 3, 40}, g);
  const auto xt = ts::randn<float>({40, 6}, g).transpose(0, 1);
  for (const auto& x : {x3, xt}) {
    const auto got = ts::quantize_int8_rows(x), want = composed(x.contiguous(), 127);
    EXPECT_EQ(got.values.shape(), x.shape());
    EXPECT_EQ(got.values.to_vector(), want.values.to_vector());
    EXPECT_EQ(got.steps.to_vector(), want.steps.to_vector());
  }
  // No columns: every step 0.
  const auto empty = ts::quantize_int8_rows(ts::Tensor<float>({3, 0}));
  EXPECT_EQ(empty.steps.shape(), ts::Shape({3, 1}));
  EXPECT_EQ(empty.steps.to_vector(), std::vector<float>(3, 0.0f));
}

TEST(Int8Linear, EqualsTheProductOfTheQuantizedOperands) {
  ts::Generator g(2);
  for (int64_t in : {1, 7, 64, 300}) {
    const auto x = ts::rand<float>({3, 11, in}, g, -2, 2), w = ts::rand<float>({29, in}, g, -1, 1),
               b = ts::rand<float>({29}, g, -1, 1);
    const auto qw = ts::quantize_linear_int8(w, b);
    const auto y = ts::int8_linear(x, qw);
    ASSERT_EQ(y.shape(), ts::Shape({3, 11, 29}));
    // Reference: the same quantized operands multiplied in double.
    const auto qx = ts::quantize_int8_rows(x.reshape({33, in}));
    const auto xv = tt::to_doubles(qx.values), xs = tt::to_doubles(qx.steps),
               wv = tt::to_doubles(qw.weight.values), ws = tt::to_doubles(qw.weight.steps),
               bv = tt::to_doubles(b), fx = tt::to_doubles(x), fw = tt::to_doubles(w);
    const auto yv = tt::to_doubles(y);
    for (int64_t i = 0; i < 33; ++i)
      for (int64_t j = 0; j < 29; ++j) {
        double acc = 0, exact = 0, bound = 0;
        for (int64_t k = 0; k < in; ++k) {
          acc += xv[i * in + k] * wv[j * in + k];
          exact += fx[i * in + k] * fw[j * in + k];
          bound += std::abs(fx[i * in + k]) * ws[j] / 2 + std::abs(fw[j * in + k]) * xs[i] / 2 +
                   xs[i] * ws[j] / 4;
        }
        const double want = acc * xs[i] * ws[j] + bv[j];
        ASSERT_NEAR(yv[i * 29 + j], want, 1e-5 * (1 + std::abs(want)))
            << in << ": " << i << ", " << j;
        ASSERT_LE(std::abs(yv[i * 29 + j] - (exact + bv[j])), bound + 1e-5) << "error bound";
      }
  }
}

// Features above the threshold skip the activation quantization: the result is the int8
// product of the other features plus the outlier features times their dequantized weights, in
// float. It is closer to the float layer than without the threshold.
TEST(Int8Linear, OutlierFeaturesStayOutOfTheInt8Product) {
  ts::Generator g(7);
  const int64_t rows = 9, in = 40, out = 11;
  auto x = ts::rand<float>({rows, in}, g, -1, 1);
  x.slice(1, 5, 6).copy_(x.slice(1, 5, 6) * 25.0f);  // a feature large in every row
  x.slice(0, 3, 4).slice(1, 17, 18).fill_(-9.0f);    // one large value in one row
  const auto w = ts::rand<float>({out, in}, g, -1, 1), b = ts::rand<float>({out}, g, -1, 1);
  const auto plain = ts::quantize_linear_int8(w, b), split = ts::quantize_linear_int8(w, b, 6.0f);
  const auto y = ts::int8_linear(x, split);
  // Reference in double: features 5 and 17 zeroed before the row quantization, then added back
  // in float with the dequantized weights.
  auto inliers = x.clone();
  inliers.slice(1, 5, 6).fill_(0.0f);
  inliers.slice(1, 17, 18).fill_(0.0f);
  const auto qx = ts::quantize_int8_rows(inliers);
  const auto xv = tt::to_doubles(qx.values), xs = tt::to_doubles(qx.steps), fx = tt::to_doubles(x),
             wv = tt::to_doubles(split.weight.values), ws = tt::to_doubles(split.weight.steps),
             bv = tt::to_doubles(b), fw = tt::to_doubles(w), yv = tt::to_doubles(y),
             y0 = tt::to_doubles(ts::int8_linear(x, plain));
  double err_split = 0, err_plain = 0;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < out; ++j) {
      double acc = 0, exact = bv[j];
      for (int64_t k = 0; k < in; ++k) exact += fx[i * in + k] * fw[j * in + k];
      for (int64_t k = 0; k < in; ++k) acc += xv[i * in + k] * wv[j * in + k];
      double want = acc * xs[i] * ws[j] + bv[j];
      for (const int64_t k : {5, 17}) want += fx[i * in + k] * wv[j * in + k] * ws[j];
      ASSERT_NEAR(yv[i * out + j], want, 1e-4 * (1 + std::abs(want))) << i << ", " << j;
      err_split += std::abs(yv[i * out + j] - exact),
          err_plain += std::abs(y0[i * out + j] - exact);
    }
  EXPECT_LT(err_split, err_plain / 2);
  EXPECT_THROW((void)ts::quantize_linear_int8(w, b, -1.0f), ts::error);
}

// pack_linear lays the int8 values out once for the backend's GEMM: the same results, bit for
// bit, with and without outlier features, at one row and many, for in not a multiple of 4, out
// past one panel, and in past one k block of the GEMM on every CPU (4000: its sums then meet in
// int32 before they are scaled back to float; below, the micro-kernel scales them back).
TEST(Int8Linear, PackedWeightsGiveTheSameResults) {
  ts::Generator g(8);
  for (int64_t in : {1, 6, 40, 301, 4000})
    for (int64_t rows : {1, 17, 70}) {
      auto x = ts::rand<float>({rows, in}, g, -1, 1);
      x.slice(1, in / 2, in / 2 + 1).copy_(x.slice(1, in / 2, in / 2 + 1) * 25.0f);
      const auto w = ts::rand<float>({45, in}, g, -1, 1), b = ts::rand<float>({45}, g, -1, 1);
      for (float threshold : {0.0f, 6.0f}) {
        const std::string what = "in " + std::to_string(in) + " rows " + std::to_string(rows) +
                                 " threshold " + std::to_string(threshold);
        const auto q = ts::quantize_linear_int8(w, b, threshold);
        const auto p = ts::pack_linear(q);
        EXPECT_FALSE(p.weight.values.defined()) << what << ": the values are held once";
        EXPECT_EQ(ts::unpack_linear(p.packed).to_vector(), q.weight.values.contiguous().to_vector())
            << what;
        const auto y = ts::int8_linear(x, p);
        ASSERT_EQ(y.shape(), ts::Shape({rows, 45})) << what;
        EXPECT_EQ(y.to_vector(), ts::int8_linear(x, q).to_vector()) << what;
        // Packing packed weights keeps them.
        EXPECT_EQ(ts::pack_linear(p).packed.data.data(), p.packed.data.data()) << what;
      }
    }
}

// 7-bit activations (activation_max 63): int8_linear's result is the product of the operands
// quantized with top 63, plain and packed (the packed product takes the narrow kernel on AVX2
// without VNNI). An out-of-range setting is an error.
TEST(Int8Linear, SevenBitActivations) {
  ts::Generator g(9);
  const auto x = ts::rand<float>({13, 70}, g, -2, 2);
  const auto q7 = ts::quantize_int8_rows(x, 63);
  const auto qv = tt::to_doubles(q7.values), sv = tt::to_doubles(q7.steps);
  for (const double v : qv) ASSERT_LE(std::abs(v), 63);
  const auto w = ts::rand<float>({40, 70}, g, -1, 1), b = ts::rand<float>({40}, g, -1, 1);
  auto qw = ts::quantize_linear_int8(w, b);
  qw.activation_max = 63;
  const auto wv = tt::to_doubles(qw.weight.values), ws = tt::to_doubles(qw.weight.steps),
             bv = tt::to_doubles(b);
  const auto y = ts::int8_linear(x, qw), yp = ts::int8_linear(x, ts::pack_linear(qw));
  EXPECT_EQ(yp.to_vector(), y.to_vector());
  const auto yv = tt::to_doubles(y);
  for (int64_t i = 0; i < 13; ++i)
    for (int64_t j = 0; j < 40; ++j) {
      double acc = 0;
      for (int64_t k = 0; k < 70; ++k) acc += qv[i * 70 + k] * wv[j * 70 + k];
      const double want = acc * sv[i] * ws[j] + bv[j];
      ASSERT_NEAR(yv[i * 40 + j], want, 1e-5 * (1 + std::abs(want))) << i << ", " << j;
    }
  qw.activation_max = 200;
  EXPECT_THROW((void)ts::int8_linear(x, qw), ts::error);
}

// 7-bit weights (weight_max 64): values in [-64, 64] with steps of the row's magnitude / 64,
// rounded to nearest or by GPTQ; int8_linear's result is the product of the quantized operands,
// plain and packed (the packed bound lets AVX2 without VNNI take the narrow kernel for any
// activations, over k blocks past the first). An out-of-range weight_max is an error.
TEST(Int8Linear, SevenBitWeights) {
  ts::Generator g(13);
  const int64_t in = 1100;  // more than one k block of the GEMM
  const auto x = ts::rand<float>({9, in}, g, -2, 2), w = ts::randn<float>({70, in}, g),
             b = ts::rand<float>({70}, g, -1, 1);
  const auto xd = x.astype<double>();
  for (const bool gptq : {false, true}) {
    const auto qw =
        gptq ? ts::quantize_linear_int8(w, b, 0.0f, ts::matmul(xd.transpose(0, 1), xd), 64)
             : ts::quantize_linear_int8(w, b, 0.0f, 64);
    const auto wv = tt::to_doubles(qw.weight.values), ws = tt::to_doubles(qw.weight.steps),
               fw = tt::to_doubles(w), bv = tt::to_doubles(b);
    for (int64_t j = 0; j < 70; ++j) {
      double m = 0;
      for (int64_t k = 0; k < in; ++k) m = std::max(m, std::abs(fw[j * in + k]));
      ASSERT_FLOAT_EQ(ws[j], m / 64) << "gptq " << gptq << " row " << j;
      for (int64_t k = 0; k < in; ++k) {
        ASSERT_LE(std::abs(wv[j * in + k]), 64);
        if (!gptq) {
          ASSERT_LE(std::abs(wv[j * in + k] * ws[j] - fw[j * in + k]), ws[j] * 0.5 + 1e-6);
        }
      }
    }
    const auto packed = ts::pack_linear(qw);
    EXPECT_LE(packed.packed.max_abs, 64);
    const auto y = ts::int8_linear(x, qw), yp = ts::int8_linear(x, packed);
    EXPECT_EQ(yp.to_vector(), y.to_vector()) << "gptq " << gptq;
    const auto qx = ts::quantize_int8_rows(x);
    const auto xv = tt::to_doubles(qx.values), xs = tt::to_doubles(qx.steps);
    const auto yv = tt::to_doubles(y);
    for (int64_t i = 0; i < 9; ++i)
      for (int64_t j = 0; j < 70; ++j) {
        double acc = 0;
        for (int64_t k = 0; k < in; ++k) acc += xv[i * in + k] * wv[j * in + k];
        const double want = acc * xs[i] * ws[j] + bv[j];
        ASSERT_NEAR(yv[i * 70 + j], want, 1e-5 * (1 + std::abs(want))) << i << ", " << j;
      }
  }
  EXPECT_THROW((void)ts::quantize_linear_int8(w, b, 0.0f, 0), ts::error);
  EXPECT_THROW((void)ts::quantize_linear_int8(w, b, 0.0f, 128), ts::error);
  // 64 exactly where the running pass is AVX2 (whose int8 kernel lacks VNNI).
  EXPECT_EQ(ts::int8_fast_weight_max<ts::cpu>(), ts::get_isa() == ts::cpu_isa::avx2 ? 64 : 127);
}

TEST(Int8Linear, EmptyInputsNoBiasAndBadShapes) {
  ts::Generator g(3);
  const auto w = ts::rand<float>({4, 6}, g);
  const auto qw = ts::quantize_linear_int8(w);
  EXPECT_EQ(ts::int8_linear(ts::zeros<float>({0, 6}), qw).shape(), ts::Shape({0, 4}));
  const auto y = ts::int8_linear(ts::zeros<float>({2, 6}), qw);
  for (double v : tt::to_doubles(y)) EXPECT_EQ(v, 0.0);
  EXPECT_THROW((void)ts::int8_linear(ts::zeros<float>({2, 5}), qw), ts::shape_error);
  EXPECT_THROW((void)ts::quantize_linear_int8(w, ts::zeros<float>({5})), ts::shape_error);
  EXPECT_THROW((void)ts::quantize_int8_rows(ts::full<float>({}, 1.0f)), ts::shape_error);
}

template <class T>
class LowpLinear : public ::testing::Test {};
using LowpTypes = ::testing::Types<ts::bfloat16, ts::half, ts::float8_e4m3, ts::float8_e5m2>;
TYPED_TEST_SUITE(LowpLinear, LowpTypes);

TYPED_TEST(LowpLinear, EqualsTheProductOfTheRoundedOperands) {
  using T = TypeParam;
  constexpr bool fp8 = ts::detail::is_float8_v<T>;
  const double top = static_cast<float>(std::numeric_limits<T>::max());
  ts::Generator g(4);
  for (int64_t in : {1, 9, 64, 300}) {
    SCOPED_TRACE(in);
    const auto x = ts::rand<float>({2, 7, in}, g, -2, 2), b = ts::rand<float>({13}, g, -1, 1);
    auto w = ts::rand<float>({13, in}, g, -0.2f, 0.2f);
    w.slice(0, 3, 4).fill_(0.0f);  // an all-zero channel: scale 0 for the 8-bit formats
    const auto q = ts::quantize_linear_lowp<T>(w, b);
    ASSERT_EQ(q.values.shape(), w.shape());
    ASSERT_EQ(q.scales.defined(), fp8);
    const auto wv = tt::to_doubles(w), qv = tt::to_doubles(q.values);
    std::vector<double> scale(13, 1.0);
    for (int64_t j = 0; j < 13; ++j) {
      double m = 0;
      for (int64_t k = 0; k < in; ++k) m = std::max(m, std::abs(wv[j * in + k]));
      if (fp8) {
        scale[j] = tt::to_doubles(q.scales)[j];
        EXPECT_NEAR(scale[j], m / top, 1e-6 * m) << "channel " << j;
      }
      for (int64_t k = 0; k < in; ++k) {
        const float scaled = static_cast<float>(wv[j * in + k]) / static_cast<float>(scale[j]);
        const double want = scale[j] > 0 ? static_cast<float>(T(scaled)) : 0.0;
        ASSERT_EQ(qv[j * in + k], want) << j << ", " << k;
      }
    }
    const auto y = ts::lowp_linear(x, q);
    ASSERT_EQ(y.shape(), ts::Shape({2, 7, 13}));
    // Reference: the rounded operands (x rounded too for bfloat16 and half) in double.
    const auto xv = fp8 ? tt::to_doubles(x) : tt::to_doubles(x.template astype<T>());
    const auto yv = tt::to_doubles(y), bv = tt::to_doubles(b);
    for (int64_t i = 0; i < 14; ++i)
      for (int64_t j = 0; j < 13; ++j) {
        double acc = 0, size = 0;
        for (int64_t k = 0; k < in; ++k)
          acc += xv[i * in + k] * qv[j * in + k], size += std::abs(xv[i * in + k] * qv[j * in + k]);
        const double want = acc * scale[j] + bv[j];
        ASSERT_NEAR(yv[i * 13 + j], want, 1e-5 * (size * scale[j] + std::abs(want)) + 1e-7)
            << i << ", " << j;
      }
  }
}

// bfloat16 weights packed once (pairs of input features in panels, read in place by the GEMM):
// the same results as the unpacked layer, bit for bit (the same pairs and the same kernel, only
// packed earlier), the values held once, and unpack_linear gives them back.
TEST(LowpLinear, PackedBf16MatchesUnpacked) {
  ts::Generator g(6);
  struct dims {
    int64_t rows, in, out;
  };
  const int saved = ts::get_num_threads();
  for (int threads : {1, 2})
    for (const dims d : {dims{1, 1, 1}, dims{1, 7, 31}, dims{5, 33, 150}, dims{70, 384, 47},
                         dims{16, 385, 97}, dims{3, 1537, 33}}) {
      ts::set_num_threads(threads);
      const std::string what = "rows " + std::to_string(d.rows) + " in " + std::to_string(d.in) +
                               " out " + std::to_string(d.out) + " threads " +
                               std::to_string(threads);
      const auto w = ts::rand<float>({d.out, d.in}, g, -0.2f, 0.2f);
      const auto b = ts::rand<float>({d.out}, g, -1, 1);
      const auto x = ts::rand<float>({d.rows, d.in}, g, -2, 2);
      const auto q = ts::quantize_linear_lowp<ts::bfloat16>(w, b);
      const auto p = ts::pack_linear(q);
      EXPECT_FALSE(p.values.defined()) << what << ": the values are held once";
      ASSERT_GT(p.packed.panel, 0) << what;
      EXPECT_EQ(p.packed.data.shape(), ts::Shape({(d.out + p.packed.panel - 1) / p.packed.panel,
                                                  (d.in + 1) / 2, p.packed.panel, 2}))
          << what;
      EXPECT_EQ(tt::to_doubles(ts::unpack_linear(p.packed)), tt::to_doubles(q.values)) << what;
      EXPECT_EQ(tt::to_doubles(ts::lowp_linear(x, p)), tt::to_doubles(ts::lowp_linear(x, q)))
          << what;
      EXPECT_EQ(ts::pack_linear(p).packed.data.data(), p.packed.data.data()) << what;
    }
  ts::set_num_threads(saved);
  const auto p =
      ts::pack_linear(ts::quantize_linear_lowp<ts::bfloat16>(ts::rand<float>({4, 6}, g)));
  EXPECT_EQ(ts::lowp_linear(ts::zeros<float>({0, 6}), p).shape(), ts::Shape({0, 4}));
  EXPECT_EQ(ts::lowp_linear(ts::zeros<float>({3, 2, 6}), p).shape(), ts::Shape({3, 2, 4}));
  EXPECT_THROW((void)ts::lowp_linear(ts::zeros<float>({2, 5}), p), ts::shape_error);
  EXPECT_THROW((void)ts::pack_linear(ts::lowp_linear_weights<ts::bfloat16, ts::cpu>{}), ts::error);
}

TYPED_TEST(LowpLinear, EmptyInputsNoBiasAndBadShapes) {
  using T = TypeParam;
  ts::Generator g(5);
  const auto w = ts::rand<float>({4, 6}, g);
  const auto q = ts::quantize_linear_lowp<T>(w);
  EXPECT_EQ(ts::lowp_linear(ts::zeros<float>({0, 6}), q).shape(), ts::Shape({0, 4}));
  EXPECT_EQ(ts::lowp_linear(ts::zeros<float>({3, 0, 6}), q).shape(), ts::Shape({3, 0, 4}));
  for (double v : tt::to_doubles(ts::lowp_linear(ts::zeros<float>({2, 6}), q))) EXPECT_EQ(v, 0.0);
  EXPECT_THROW((void)ts::lowp_linear(ts::zeros<float>({2, 5}), q), ts::shape_error);
  EXPECT_THROW((void)ts::lowp_linear(ts::full<float>({}, 1.0f), q), ts::shape_error);
  EXPECT_THROW((void)ts::quantize_linear_lowp<T>(w, ts::zeros<float>({5})), ts::shape_error);
  EXPECT_THROW((void)ts::quantize_linear_lowp<T>(ts::zeros<float>({4})), ts::shape_error);
}

// GPTQ (ops/gptq.hpp): the factor of the damped inverse, then the rounding it drives.
TEST(Gptq, InverseFactorMultipliesBackToTheIdentity) {
  ts::Generator g(6);
  for (int64_t n : {1, 2, 5, 33}) {
    SCOPED_TRACE(n);
    // H = X^T X for 3n random rows; damped by 1% of its mean diagonal.
    const auto x = tt::to_doubles(ts::randn<float>({3 * n, n}, g));
    std::vector<double> h(static_cast<size_t>(n * n), 0.0);
    for (int64_t r = 0; r < 3 * n; ++r)
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < n; ++j) h[i * n + j] += x[r * n + i] * x[r * n + j];
    double mean_diag = 0;
    for (int64_t i = 0; i < n; ++i) mean_diag += h[i * n + i] / static_cast<double>(n);
    const auto u = ts::detail::gptq_inverse_factor(h, n);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < i; ++j) ASSERT_EQ(u[i * n + j], 0.0) << "U is upper triangular";
    // (H + d I) U^T U == I.
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t k = 0; k < n; ++k) {
          double utu = 0;  // (U^T U)[k][j]
          for (int64_t p = 0; p <= std::min(k, j); ++p) utu += u[p * n + k] * u[p * n + j];
          acc += (h[i * n + k] + (i == k ? 0.01 * mean_diag : 0.0)) * utu;
        }
        EXPECT_NEAR(acc, i == j ? 1.0 : 0.0, 1e-9) << i << ", " << j;
      }
  }
  // All-zero H (no calibration input reached the layer): U = I.
  const auto u = ts::detail::gptq_inverse_factor(std::vector<double>(9, 0.0), 3);
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(u[i * 3 + j], i == j ? 1.0 : 0.0);
}

template <class T>
class GptqLinear : public ::testing::Test {};
using GptqTypes = ::testing::Types<ts::float8_e4m3, ts::float8_e5m2>;
TYPED_TEST_SUITE(GptqLinear, GptqTypes);

// Uncorrelated features: nothing to compensate, GPTQ rounds to nearest.
TYPED_TEST(GptqLinear, DiagonalHessianRoundsToNearest) {
  using T = TypeParam;
  ts::Generator g(7);
  const auto w = ts::randn<float>({9, 17}, g), b = ts::randn<float>({9}, g);
  auto h = ts::zeros<double>({17, 17});
  for (int64_t j = 0; j < 17; ++j) h.slice(0, j, j + 1).slice(1, j, j + 1).fill_(1.0 + j);
  const auto nearest = ts::quantize_linear_lowp<T>(w, b);
  const auto q = ts::quantize_linear_lowp<T>(w, b, h);
  EXPECT_EQ(tt::to_doubles(q.values), tt::to_doubles(nearest.values));
  EXPECT_EQ(tt::to_doubles(q.scales), tt::to_doubles(nearest.scales));
  EXPECT_EQ(tt::to_doubles(q.bias), tt::to_doubles(b));
}

// Correlated features (inputs near a low-dimensional subspace): the layer's output on those
// inputs moves less than with rounding to nearest, with the same per-channel scales.
TYPED_TEST(GptqLinear, CorrelatedInputsMoveTheOutputLess) {
  using T = TypeParam;
  ts::Generator g(8);
  const int64_t rows = 512, in = 48, out = 24;
  const auto x = ts::matmul(ts::randn<float>({rows, 6}, g), ts::randn<float>({6, in}, g)) +
                 0.05f * ts::randn<float>({rows, in}, g);
  const auto w = ts::randn<float>({out, in}, g);
  const auto xd = x.template astype<double>();
  const auto h = ts::matmul(xd.transpose(0, 1), xd);
  const auto nearest = ts::quantize_linear_lowp<T>(w, {});
  const auto q = ts::quantize_linear_lowp<T>(w, {}, h);
  EXPECT_EQ(tt::to_doubles(q.scales), tt::to_doubles(nearest.scales));
  const double top = static_cast<float>(std::numeric_limits<T>::max());
  for (double v : tt::to_doubles(q.values)) ASSERT_LE(std::abs(v), top);
  const auto exact = ts::matmul(xd, w.template astype<double>().transpose(0, 1));
  auto error = [&](const ts::lowp_linear_weights<T, ts::cpu>& l) {
    const auto y = ts::lowp_linear(x, l).template astype<double>();
    return ts::sum((y - exact) * (y - exact)).item();
  };
  const double e_nearest = error(nearest), e_gptq = error(q);
  EXPECT_LT(e_gptq, 0.5 * e_nearest) << "nearest " << e_nearest << ", GPTQ " << e_gptq;
}

TYPED_TEST(GptqLinear, BadHessians) {
  using T = TypeParam;
  ts::Generator g(9);
  const auto w = ts::randn<float>({4, 6}, g);
  EXPECT_THROW((void)ts::quantize_linear_lowp<T>(w, {}, ts::zeros<double>({5, 5})),
               ts::shape_error);
  EXPECT_THROW((void)ts::quantize_linear_lowp<T>(w, {}, ts::zeros<double>({6})), ts::shape_error);
  // Not positive semi-definite: a large negative diagonal entry.
  auto h = ts::zeros<double>({6, 6});
  h.slice(0, 0, 1).slice(1, 0, 1).fill_(-100.0);
  h.slice(0, 1, 2).slice(1, 1, 2).fill_(1.0);
  EXPECT_THROW((void)ts::quantize_linear_lowp<T>(w, {}, h), ts::error);
}

// int8 weights rounded by GPTQ: the same steps as rounding to nearest; a diagonal H gives exactly
// rounding to nearest, correlated inputs a smaller output error.
TEST(GptqInt8Linear, DiagonalHessianRoundsToNearest) {
  ts::Generator g(10);
  const auto w = ts::randn<float>({9, 17}, g), b = ts::randn<float>({9}, g);
  auto h = ts::zeros<double>({17, 17});
  for (int64_t j = 0; j < 17; ++j) h.slice(0, j, j + 1).slice(1, j, j + 1).fill_(2.0 + j);
  const auto nearest = ts::quantize_linear_int8(w, b, 3.0f);
  const auto q = ts::quantize_linear_int8(w, b, 3.0f, h);
  EXPECT_EQ(tt::to_doubles(q.weight.values), tt::to_doubles(nearest.weight.values));
  EXPECT_EQ(tt::to_doubles(q.weight.steps), tt::to_doubles(nearest.weight.steps));
  EXPECT_EQ(q.weight.steps.shape(), nearest.weight.steps.shape());
  EXPECT_EQ(tt::to_doubles(q.bias), tt::to_doubles(b));
  EXPECT_EQ(q.outlier_threshold, 3.0f);
}

TEST(GptqInt8Linear, CorrelatedInputsMoveTheOutputLess) {
  ts::Generator g(11);
  const int64_t rows = 512, in = 48, out = 24;
  const auto x = ts::matmul(ts::randn<float>({rows, 6}, g), ts::randn<float>({6, in}, g)) +
                 0.05f * ts::randn<float>({rows, in}, g);
  const auto w = ts::randn<float>({out, in}, g);
  const auto xd = x.astype<double>();
  const auto h = ts::matmul(xd.transpose(0, 1), xd);
  const auto nearest = ts::quantize_linear_int8(w);
  const auto q = ts::quantize_linear_int8(w, {}, 0.0f, h);
  EXPECT_EQ(tt::to_doubles(q.weight.steps), tt::to_doubles(nearest.weight.steps));
  // The weights' own error, seen through the inputs: x (w - dequantized)^T.
  auto error = [&](const ts::int8_linear_weights<ts::cpu>& l) {
    const auto deq =
        l.weight.values.astype<double>() * l.weight.steps.reshape({out, 1}).astype<double>();
    const auto d = ts::matmul(xd, (w.astype<double>() - deq).transpose(0, 1));
    return ts::sum(d * d).item();
  };
  const double e_nearest = error(nearest), e_gptq = error(q);
  EXPECT_LT(e_gptq, 0.5 * e_nearest) << "nearest " << e_nearest << ", GPTQ " << e_gptq;
}

TEST(GptqInt8Linear, BadHessiansAndThresholds) {
  ts::Generator g(12);
  const auto w = ts::randn<float>({4, 6}, g);
  EXPECT_THROW((void)ts::quantize_linear_int8(w, {}, 0.0f, ts::zeros<double>({5, 5})),
               ts::shape_error);
  EXPECT_THROW((void)ts::quantize_linear_int8(w, {}, -1.0f, ts::zeros<double>({6, 6})), ts::error);
}

}  // namespace test_quant

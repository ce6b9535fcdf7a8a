// Static int8 quantization of a Sequential (nn/quant.hpp): the quantized model against the same
// quantization done by hand in float (calibrated input steps, per-channel weight steps, the
// float layers in between), with uint8 and int8 inputs, requantized byte paths and layers that
// stay float; then bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <tessera/nn.hpp>
#include <tessera/nn/quant.hpp>
#include <vector>

#include "test_util.hpp"

// A namespace of its own: test_layers compiles its sources as one (tests/CMakeLists.txt).
namespace test_nn_quant {

namespace ts = tessera;
namespace nn = ts::nn;
using T = ts::Tensor<float>;

/// x rounded to its calibrated grid: uint8 steps of hi / 255 when lo >= 0, else int8 steps of
/// max(|lo|, |hi|) / 127, clamped to the grid's range.
T fake_quant(const T& x, float lo, float hi) {
  const bool u = lo >= 0;
  float step = u ? hi / 255.0f : std::max(std::abs(lo), std::abs(hi)) / 127.0f;
  if (!(step > 0)) step = 1;
  const float qlo = u ? 0.0f : -127.0f, qhi = u ? 255.0f : 127.0f;
  return ts::map([=](float v) { return std::clamp(std::nearbyint(v / step), qlo, qhi) * step; }, x);
}
/// A weight rounded per output channel (steps of max|channel| / 127).
T fake_quant_weight(const T& w) {
  const int64_t k = w.shape()[0];
  const auto q = ts::quantize_int8_rows(w.reshape({k, w.numel() / k}));
  return (q.values.astype<float>() * q.steps).reshape(w.shape().span());
}

/// The reference: each product's input rounded to the grid calibrated on `calibration` (the
/// float inputs' min and max), weights rounded per channel, everything else float.
T reference(nn::Sequential<float>& model, const std::vector<T>& calibration, const T& x) {
  ts::autograd::no_grad guard;
  std::vector<float> lo(model.size(), INFINITY), hi(model.size(), -INFINITY);
  for (const T& batch : calibration) {
    ts::Variable<float> y(batch);
    for (size_t i = 0; i < model.size(); ++i) {
      lo[i] = std::min(lo[i], ts::min(y.value()).item());
      hi[i] = std::max(hi[i], ts::max(y.value()).item());
      y = model[i].forward(y);
    }
  }
  T y = x;
  for (size_t i = 0; i < model.size(); ++i) {
    if (auto* c = dynamic_cast<nn::Conv2d<float>*>(&model[i])) {
      y = ts::conv2d(fake_quant(y, lo[i], hi[i]), fake_quant_weight(c->weight.value()),
                     c->bias.value(), c->options);
    } else if (auto* l = dynamic_cast<nn::Linear<float>*>(&model[i])) {
      const T xq = fake_quant(y, lo[i], hi[i]), wq = fake_quant_weight(l->weight.value());
      y = l->bias.defined() ? ts::linear(xq, wq, l->bias.value()) : ts::linear(xq, wq);
    } else {
      y = model[i].forward(ts::Variable<float>(y)).value();
    }
  }
  return y;
}

std::vector<T> batches(ts::Generator& g, ts::Shape shape, int count, float lo, float hi) {
  std::vector<T> out;
  for (int i = 0; i < count; ++i) out.push_back(ts::rand<float>(shape, g, lo, hi));
  return out;
}

/// Largest difference between a and b, relative to b's largest magnitude.
double relative_gap(const T& a, const T& b) {
  const auto x = tt::to_doubles(a), y = tt::to_doubles(b);
  double gap = 0, size = 0;
  for (size_t i = 0; i < x.size(); ++i)
    gap = std::max(gap, std::abs(x[i] - y[i])), size = std::max(size, std::abs(y[i]));
  return gap / size;
}

TEST(QuantizeStatic, CnnMatchesTheSameQuantizationInFloat) {
  nn::manual_seed(3);
  nn::Sequential<float> model{nn::Conv2d<float>(1, 4, 3, {.padding = {1, 1}}),
                              nn::ReLU<float>(),
                              nn::MaxPool2d<float>(2),
                              nn::Conv2d<float>(4, 6, 3, {.padding = {1, 1}}),
                              nn::ReLU<float>(),
                              nn::MaxPool2d<float>(2),
                              nn::Flatten<float>(),
                              nn::Linear<float>(6 * 2 * 2, 16),
                              nn::ReLU<float>(),
                              nn::Linear<float>(16, 5)};
  ts::Generator g(4);
  const auto calibration = batches(g, {8, 1, 8, 8}, 3, 0, 1);  // images in [0, 1]: uint8
  const auto q = nn::quant::quantize_static(model, calibration);
  EXPECT_EQ(q.quantized_layers(), 4);
  EXPECT_EQ(q.byte_inputs(), 3);  // every product but the first takes bytes from the one before
  EXPECT_TRUE(model.is_training()) << "the model's mode is restored";
  for (const int64_t n : {1, 5, 8}) {
    const T x = ts::rand<float>({n, 1, 8, 8}, g, 0, 1.2f);  // beyond the calibrated range too
    const T got = q(x), want = reference(model, calibration, x);
    ASSERT_EQ(got.shape(), ts::Shape({n, 5}));
    EXPECT_LT(relative_gap(got, want), 1e-4) << n;  // measured: about 1e-7
    ts::autograd::no_grad guard;
    model.eval();
    const T fp32 = model(x).value();
    model.train();
    EXPECT_LT(relative_gap(got, fp32), 0.1) << "int8 stays near float32";
    EXPECT_GT(relative_gap(got, fp32), 1e-5) << "int8 should differ from float32 at all";
  }
}

TEST(QuantizeStatic, SignedInputsLinearChainsAndFloatLayers) {
  nn::manual_seed(5);
  // Signed inputs (int8), a Linear feeding a Linear with no ReLU (signed bytes between them),
  // an average pooling that runs in float between two products.
  nn::Sequential<float> model{nn::Conv2d<float>(2, 3, 3), nn::AvgPool2d<float>(2),
                              nn::Flatten<float>(),       nn::Linear<float>(3 * 3 * 3, 7),
                              nn::Dropout<float>(0.5),    nn::Linear<float>(7, 4, false),
                              nn::ReLU<float>(),          nn::Linear<float>(4, 3)};
  ts::Generator g(6);
  const auto calibration = batches(g, {6, 2, 8, 8}, 2, -1, 1);
  const auto q = nn::quant::quantize_static(model, calibration);
  EXPECT_EQ(q.quantized_layers(), 4);
  EXPECT_EQ(q.byte_inputs(), 2);  // the second and third Linear; AvgPool2d breaks the first
  const T x = ts::rand<float>({5, 2, 8, 8}, g, -1, 1);
  model.eval();  // Dropout: the reference runs the layers in evaluation mode
  const T got = q(x), want = reference(model, calibration, x);
  EXPECT_LT(relative_gap(got, want), 1e-4);
}

TEST(QuantizeStatic, BadInput) {
  nn::Sequential<float> model{nn::Linear<float>(4, 2)};
  EXPECT_THROW((void)nn::quant::quantize_static(model, std::vector<T>{}), ts::error);
  nn::Sequential<float> nested;
  nested.push_back(nn::Sequential<float>{nn::Linear<float>(4, 2)});
  EXPECT_THROW((void)nn::quant::quantize_static(nested, std::vector<T>{ts::zeros<float>({1, 4})}),
               ts::error);
  // All-zero calibration: a step of 1, zeros stay zeros; a wrong feature count is a shape_error.
  const auto q = nn::quant::quantize_static(model, std::vector<T>{ts::zeros<float>({3, 4})});
  EXPECT_EQ(q(ts::zeros<float>({2, 4})).shape(), ts::Shape({2, 2}));
  EXPECT_THROW((void)q(ts::zeros<float>({2, 5})), ts::shape_error);
  EXPECT_EQ(q(ts::zeros<float>({0, 4})).shape(), ts::Shape({0, 2}));
}

}  // namespace test_nn_quant

// Tests of the nn layer: modules, parameters and state, initialization, each layer's forward
// against a reference and its gradients by gradcheck, train/eval behaviour.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <tessera/nn.hpp>
#include <tessera/tessera.hpp>

namespace {
namespace ts = tessera;
namespace nn = ts::nn;
using D = ts::Variable<double, ts::cpu>;

ts::Tensor<double, ts::cpu> rnd(const ts::Shape& s, uint64_t seed) {
  ts::Generator g(seed);
  return ts::rand<double, ts::cpu>(s, g, -1, 1);
}

// gradcheck of a module's forward with respect to its input and every parameter: the
// parameters' values are swapped for gradcheck's perturbable copies.
template <class M>
void expect_module_gradients(M& m, const ts::Tensor<double, ts::cpu>& x) {
  auto params = m.parameters();
  std::vector<ts::Tensor<double, ts::cpu>> inputs{x};
  for (auto& p : params) inputs.push_back(p.value());
  auto r = ts::gradcheck(
      [&](const std::vector<D>& v) {
        // The module's parameters share the tensors gradcheck perturbs; the gradient reaches
        // them through the module's own Variables, and flows to v[0] through the input.
        return m(v[0]);
      },
      {x});
  EXPECT_TRUE(r) << r.message;
  // Parameters: compare each parameter gradient to finite differences on a scalar objective.
  ts::Generator g(99);
  const auto proj = ts::randn<double, ts::cpu>(m(D(x)).shape(), g);
  m.zero_grad();
  ts::sum(m(D(x)) * proj).backward();
  for (auto& p : params) {
    const auto grad = p.grad();
    ASSERT_TRUE(grad.defined());
    auto v = p.value();
    for (int64_t k = 0; k < std::min<int64_t>(v.numel(), 40); ++k) {
      double* e = v.data() + k;
      const double orig = *e;
      ts::no_grad guard;
      *e = orig + 1e-6;
      const double plus = ts::sum(m(D(x)).value() * proj).item();
      *e = orig - 1e-6;
      const double minus = ts::sum(m(D(x)).value() * proj).item();
      *e = orig;
      const double numeric = (plus - minus) / 2e-6;
      EXPECT_NEAR(grad.data()[k], numeric, 1e-5 + 1e-3 * std::abs(numeric)) << "element " << k;
    }
  }
}

TEST(Module, ParametersAreNamedByPositionAndShared) {
  nn::Sequential model{nn::Linear(4, 3), nn::ReLU(), nn::Linear(3, 2, false)};
  const auto named = model.named_parameters();
  ASSERT_EQ(named.size(), 3u);
  EXPECT_EQ(named[0].first, "0.weight");
  EXPECT_EQ(named[1].first, "0.bias");
  EXPECT_EQ(named[2].first, "2.weight");
  EXPECT_EQ(named[0].second.shape(), (ts::Shape{3, 4}));
  EXPECT_EQ(named[2].second.shape(), (ts::Shape{2, 3}));
  // A layer copied into a Sequential is the same layer.
  nn::Linear<float> fc(2, 2);
  nn::Sequential seq{fc};
  fc.weight.value().fill_(7.0f);
  EXPECT_EQ(seq.parameters()[0].value().to_vector()[0], 7.0f);
  EXPECT_EQ(model.size(), 3u);
  EXPECT_THROW(model[3], ts::index_error);
}

TEST(Module, TrainEvalReachesSubmodules) {
  nn::Sequential model{nn::Linear(2, 2), nn::Dropout(0.5)};
  EXPECT_TRUE(model.is_training());
  model.eval();
  EXPECT_FALSE(model.is_training());
  EXPECT_FALSE(model[1].is_training());
  model.train();
  EXPECT_TRUE(model[1].is_training());
}

TEST(Module, StateDictRoundTripAndStrictErrors) {
  nn::manual_seed(1);
  nn::Sequential a{nn::Linear(3, 4), nn::BatchNorm1d(4)};
  nn::manual_seed(2);
  nn::Sequential b{nn::Linear(3, 4), nn::BatchNorm1d(4)};
  const auto state = a.state_dict();
  ASSERT_EQ(state.size(), 6u);  // weight, bias, bn weight, bn bias, running mean, running var
  EXPECT_EQ(state[4].first, "1.running_mean");
  EXPECT_NE(a.state_dict()[0].second.to_vector(), b.state_dict()[0].second.to_vector());
  b.load_state_dict(state);
  for (size_t i = 0; i < state.size(); ++i)
    EXPECT_EQ(a.state_dict()[i].second.to_vector(), b.state_dict()[i].second.to_vector());
  // The values were copied, not shared.
  a.parameters()[0].value().fill_(0.f);
  EXPECT_NE(b.parameters()[0].value().to_vector()[0], 0.f);

  auto missing = state;
  missing.pop_back();
  EXPECT_THROW(b.load_state_dict(missing), ts::error);
  auto extra = state;
  extra.emplace_back("nope", ts::zeros<float>(ts::Shape{1}));
  try {
    b.load_state_dict(extra);
    FAIL();
  } catch (const ts::error& e) {
    EXPECT_NE(std::string(e.what()).find("nope"), std::string::npos);
  }
  auto wrong = state;
  wrong[0].second = ts::zeros<float>({4, 4});
  const auto before = b.state_dict()[1].second.to_vector();
  EXPECT_THROW(b.load_state_dict(wrong), ts::shape_error);
  EXPECT_EQ(b.state_dict()[1].second.to_vector(), before);  // nothing written on failure
  b.load_state_dict(extra, /*strict=*/false);
  // A repeated key is refused, in strict mode or not, before anything is written.
  auto twice = state;
  twice.emplace_back(state[0].first, ts::zeros<float>(state[0].second.shape()));
  for (bool strict : {true, false}) {
    try {
      b.load_state_dict(twice, strict);
      FAIL() << "a repeated key was accepted";
    } catch (const ts::error& e) {
      EXPECT_NE(std::string(e.what()).find("\"0.weight\" appears twice"), std::string::npos)
          << e.what();
    }
    EXPECT_EQ(b.state_dict()[0].second.to_vector(), state[0].second.to_vector());
  }
}

TEST(Init, DefaultBoundsAndSeeding) {
  nn::manual_seed(5);
  nn::Linear<double> fc(400, 300);
  const double bound = 1.0 / std::sqrt(400.0);
  auto w = fc.weight.value().to_vector();
  double mx = 0, sum2 = 0;
  for (double v : w) mx = std::max(mx, std::abs(v)), sum2 += v * v;
  EXPECT_LE(mx, bound);
  EXPECT_GT(mx, 0.95 * bound);
  EXPECT_NEAR(std::sqrt(sum2 / w.size()), bound / std::sqrt(3.0), 0.02 * bound);
  nn::manual_seed(5);
  nn::Linear<double> again(400, 300);
  EXPECT_EQ(again.weight.value().to_vector(), w);

  ts::Generator g(3);
  auto t = ts::zeros<double>({256, 128, 3, 3});
  nn::init::kaiming_normal_(t, 0.0, nn::init::fan_mode::fan_in, g);
  auto v = t.to_vector();
  double s2 = 0;
  for (double x : v) s2 += x * x;
  EXPECT_NEAR(std::sqrt(s2 / v.size()), std::sqrt(2.0 / (128 * 9)),
              0.01 * std::sqrt(2.0 / (128 * 9)));
  nn::init::xavier_uniform_(t, 1.0, g);
  mx = 0;
  for (double x : t.to_vector()) mx = std::max(mx, std::abs(x));
  const double xb = std::sqrt(6.0 / (128 * 9 + 256 * 9));
  EXPECT_LE(mx, xb);
  EXPECT_GT(mx, 0.95 * xb);
  EXPECT_THROW(nn::init::fans(ts::Shape{}), ts::shape_error);
}

TEST(Layers, LinearMatchesReferenceAndGradients) {
  nn::Linear<double, ts::cpu> fc(5, 3);
  const auto x = rnd({4, 5}, 1);
  const auto y = fc(x).value();
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t o = 0; o < 3; ++o) {
      double r = fc.bias.value()(o);
      for (int64_t k = 0; k < 5; ++k) r += x(i, k) * fc.weight.value()(o, k);
      EXPECT_NEAR(y(i, o), r, 1e-12);
    }
  expect_module_gradients(fc, x);
  EXPECT_THROW(fc(rnd({4, 6}, 2)), ts::shape_error);
}

TEST(Layers, ConvolutionLayersGradients) {
  nn::Conv2d<double, ts::cpu> conv(2, 3, 3, {.stride = {2, 1}, .padding = {1, 1}});
  expect_module_gradients(conv, rnd({2, 2, 5, 4}, 3));
  nn::Conv1d<double, ts::cpu> c1(2, 4, 3, {.padding = 1, .groups = 2});
  expect_module_gradients(c1, rnd({2, 2, 7}, 4));
  nn::ConvTranspose2d<double, ts::cpu> ct(3, 2, 3, {.stride = {2, 2}, .padding = {1, 1}});
  expect_module_gradients(ct, rnd({1, 3, 3, 3}, 5));
  EXPECT_THROW((nn::Conv2d<double, ts::cpu>(3, 4, 3, {.groups = 2})), ts::shape_error);
  EXPECT_THROW((nn::Linear<float>(0, 3)), ts::shape_error);
}

TEST(Layers, PoolingActivationsFlattenSoftmax) {
  const auto x = rnd({2, 3, 4, 4}, 6);
  using M = nn::MaxPool2d<double, ts::cpu>;
  using A = nn::AvgPool2d<double, ts::cpu>;
  using AA = nn::AdaptiveAvgPool2d<double, ts::cpu>;
  using F = nn::Flatten<double, ts::cpu>;
  EXPECT_EQ(M(2)(x).shape(), (ts::Shape{2, 3, 2, 2}));
  EXPECT_EQ(A(2)(x).shape(), (ts::Shape{2, 3, 2, 2}));
  EXPECT_EQ(AA({1, 3})(x).shape(), (ts::Shape{2, 3, 1, 3}));
  EXPECT_EQ(F()(x).shape(), (ts::Shape{2, 48}));
  EXPECT_EQ(F(2)(x).shape(), (ts::Shape{2, 3, 16}));
  const auto v = x.to_vector();
  const auto relu = nn::ReLU<double, ts::cpu>()(x).value().to_vector();
  const auto tanh = nn::Tanh<double, ts::cpu>()(x).value().to_vector();
  const auto sig = nn::Sigmoid<double, ts::cpu>()(x).value().to_vector();
  const auto gelu = nn::GELU<double, ts::cpu>()(x).value().to_vector();
  const auto gelu_t = nn::GELUTanh<double, ts::cpu>()(x).value().to_vector();
  for (size_t i = 0; i < v.size(); ++i) {
    EXPECT_EQ(relu[i], std::max(v[i], 0.0));
    EXPECT_NEAR(tanh[i], std::tanh(v[i]), 1e-12);
    EXPECT_NEAR(sig[i], 1 / (1 + std::exp(-v[i])), 1e-12);
    EXPECT_NEAR(gelu[i], 0.5 * v[i] * (1 + std::erf(v[i] / std::sqrt(2.0))), 1e-12);
    EXPECT_NEAR(
        gelu_t[i],
        0.5 * v[i] *
            (1 + std::tanh(0.79788456080286535588 * (v[i] + 0.044715 * v[i] * v[i] * v[i]))),
        1e-12);
  }
  const auto s = nn::Softmax<double, ts::cpu>(1)(rnd({3, 5}, 7)).value();
  for (int64_t i = 0; i < 3; ++i) {
    double t = 0;
    for (int64_t j = 0; j < 5; ++j) t += s(i, j);
    EXPECT_NEAR(t, 1.0, 1e-12);
  }
}

TEST(Layers, DropoutTrainAndEval) {
  nn::manual_seed(11);
  nn::Dropout<float> drop(0.25);
  const auto x = ts::ones<float>({100000});
  const auto y = drop(x).value().to_vector();
  int64_t zeros = 0;
  for (float v : y) {
    if (v == 0.f)
      ++zeros;
    else
      EXPECT_FLOAT_EQ(v, 1.f / 0.75f);
  }
  EXPECT_NEAR(static_cast<double>(zeros) / 100000.0, 0.25, 0.01);
  drop.eval();
  EXPECT_EQ(drop(x).value().to_vector(), x.to_vector());
  // Gradient flows through the kept elements only, scaled.
  drop.train();
  auto p = ts::param(ts::ones<float>({1000}));
  auto out = drop(p);
  ts::sum(out).backward();
  EXPECT_EQ(p.grad().to_vector(), out.value().to_vector());
  EXPECT_THROW(nn::Dropout<float>(1.5), ts::error);
}

TEST(Layers, BatchNormMatchesReferenceAndTracksRunningStats) {
  nn::BatchNorm2d<double, ts::cpu> bn(3, 1e-5, 0.1);
  bn.weight.value().copy_(ts::from_vector<double, ts::cpu>({1.5, -0.5, 2.0}));
  bn.bias.value().copy_(ts::from_vector<double, ts::cpu>({0.1, 0.2, -0.3}));
  const auto x = rnd({4, 3, 2, 5}, 8);
  const auto y = bn(x).value();
  for (int64_t c = 0; c < 3; ++c) {
    double m = 0, v = 0;
    for (int64_t n = 0; n < 4; ++n)
      for (int64_t i = 0; i < 10; ++i) m += x(n, c, i / 5, i % 5);
    m /= 40;
    for (int64_t n = 0; n < 4; ++n)
      for (int64_t i = 0; i < 10; ++i) v += std::pow(x(n, c, i / 5, i % 5) - m, 2);
    v /= 40;
    const double w = bn.weight.value()(c), b = bn.bias.value()(c);
    for (int64_t n = 0; n < 4; ++n)
      for (int64_t i = 0; i < 10; ++i)
        EXPECT_NEAR(y(n, c, i / 5, i % 5),
                    (x(n, c, i / 5, i % 5) - m) / std::sqrt(v + 1e-5) * w + b, 1e-10);
    EXPECT_NEAR(bn.running_mean(c), 0.1 * m, 1e-12);
    EXPECT_NEAR(bn.running_var(c), 0.9 + 0.1 * v * 40 / 39, 1e-12);
  }
  // Evaluation uses the running statistics.
  bn.eval();
  const auto e = bn(x).value();
  const double rm = bn.running_mean(1), rv = bn.running_var(1);
  EXPECT_NEAR(e(0, 1, 0, 0), (x(0, 1, 0, 0) - rm) / std::sqrt(rv + 1e-5) * -0.5 + 0.2, 1e-10);
  bn.train();
  expect_module_gradients(bn, x);
  EXPECT_THROW(bn(rnd({4, 2, 2, 2}, 9)), ts::shape_error);
  EXPECT_THROW(bn(rnd({1, 3, 1, 1}, 9)), ts::shape_error);
  nn::BatchNorm1d<double, ts::cpu> bn1(4);
  expect_module_gradients(bn1, rnd({6, 4}, 10));
  EXPECT_THROW(bn1(rnd({6, 4, 2, 2}, 9)), ts::shape_error);
}

TEST(Layers, LayerNormMatchesReferenceAndGradients) {
  nn::LayerNorm<double, ts::cpu> ln(ts::Shape{6});
  ln.weight.value().copy_(rnd({6}, 11));
  ln.bias.value().copy_(rnd({6}, 12));
  const auto x = rnd({2, 3, 6}, 13);
  const auto y = ln(x).value();
  for (int64_t a = 0; a < 2; ++a)
    for (int64_t b = 0; b < 3; ++b) {
      double m = 0, v = 0;
      for (int64_t k = 0; k < 6; ++k) m += x(a, b, k) / 6;
      for (int64_t k = 0; k < 6; ++k) v += std::pow(x(a, b, k) - m, 2) / 6;
      for (int64_t k = 0; k < 6; ++k)
        EXPECT_NEAR(
            y(a, b, k),
            (x(a, b, k) - m) / std::sqrt(v + 1e-5) * ln.weight.value()(k) + ln.bias.value()(k),
            1e-10);
    }
  expect_module_gradients(ln, x);
  EXPECT_THROW(ln(rnd({2, 5}, 14)), ts::shape_error);
}

TEST(Layers, SequentialEqualsManualComposition) {
  nn::manual_seed(3);
  nn::Linear<double, ts::cpu> a(4, 5), b(5, 2);
  nn::Sequential seq{a, nn::Tanh<double, ts::cpu>(), b};
  const auto x = rnd({3, 4}, 15);
  const auto want = b(ts::tanh(a(x))).value().to_vector();
  EXPECT_EQ(seq(x).value().to_vector(), want);
  expect_module_gradients(seq, x);
}

TEST(Layers, SequentialFusesReluIntoLinearAndConv) {
  nn::manual_seed(4);
  nn::Conv2d<double, ts::cpu> conv(2, 3, 3, {.padding = {1, 1}});
  nn::Linear<double, ts::cpu> fc(3 * 4 * 4, 5);
  nn::Sequential seq{conv, nn::ReLU<double, ts::cpu>(), nn::Flatten<double, ts::cpu>(), fc,
                     nn::ReLU<double, ts::cpu>()};
  const auto x = rnd({2, 2, 4, 4}, 16);
  const auto fused = seq(x).value().to_vector();
  const auto manual = ts::relu(fc(ts::flatten(ts::relu(conv(x)), 1))).value().to_vector();
  ASSERT_EQ(fused.size(), manual.size());
  for (size_t i = 0; i < fused.size(); ++i) EXPECT_NEAR(fused[i], manual[i], 1e-12);
  int zeros = 0;
  for (double v : fused) zeros += v == 0;
  EXPECT_GT(zeros, 0);  // the ReLU did clip something, so its gradient mask matters
  expect_module_gradients(seq, x);
}

// Sequential runs Conv2d, ReLU, MaxPool2d as one node (the ReLU mask and the bias gradient taken
// on the pooled tensor). It must give what the three separate ops give: the output and the input
// and weight gradients bit for bit, the bias gradient to rounding (the same terms added in
// another order). Pooled windows whose maximum the ReLU clipped are required, so that the mask
// matters; overlapping windows, padding and windows off the edge included.
template <class T>
void expect_conv_relu_pool_fused_exactly(const ts::Pool2dOptions& pool, const ts::Shape& in,
                                         bool input_grad, bool with_bias, const char* what) {
  SCOPED_TRACE(what);
  nn::manual_seed(5);
  nn::Conv2d<T, ts::cpu> conv(in[1], 4, 3, {.padding = {1, 1}}, with_bias);
  if (with_bias) conv.bias.value().fill_(T(-0.3));  // clips whole windows
  nn::Sequential seq{conv, nn::ReLU<T, ts::cpu>(), nn::MaxPool2d<T, ts::cpu>(pool)};
  ts::Generator gen(17);
  const auto x = ts::randn<T, ts::cpu>(in, gen);
  ts::Variable<T, ts::cpu> xf(x, input_grad), xm(x, input_grad);
  const auto fused = seq(xf);
  ASSERT_EQ(fused.impl()->inputs.size(), 3u) << "not one node of (x, weight, bias)";
  const auto manual = ts::max_pool2d(ts::relu(conv(xm)), pool);
  const auto yf = fused.value().to_vector(), ym = manual.value().to_vector();
  ASSERT_EQ(yf, ym);
  EXPECT_GT(std::count(yf.begin(), yf.end(), T(0)), 0) << "no window clipped by the ReLU";
  const auto g = ts::randn<T, ts::cpu>(fused.shape(), gen);
  conv.zero_grad();
  fused.backward(g);
  const auto wf = conv.weight.grad().to_vector();
  const auto bf = with_bias ? conv.bias.grad().to_vector() : std::vector<T>();
  conv.zero_grad();
  manual.backward(g);
  EXPECT_EQ(wf, conv.weight.grad().to_vector());
  if (input_grad) {
    EXPECT_EQ(xf.grad().to_vector(), xm.grad().to_vector());
    EXPECT_NE(xf.grad().to_vector(), std::vector<T>(x.numel(), T(0)));
  }
  if (with_bias) {
    const auto bm = conv.bias.grad().to_vector();
    ASSERT_EQ(bf.size(), bm.size());
    for (size_t k = 0; k < bf.size(); ++k) EXPECT_NEAR(bf[k], bm[k], 1e-5 * (1 + std::abs(bm[k])));
  }
}

TEST(Layers, SequentialFusesConvReluMaxPool) {
  const ts::Pool2dOptions p2{.kernel = {2, 2}};
  const ts::Pool2dOptions p3{.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}};
  const ts::Pool2dOptions p3s1{.kernel = {3, 3}, .stride = {1, 1}};
  const ts::Pool2dOptions ceil{.kernel = {2, 2}, .ceil_mode = true};
  for (bool input_grad : {false, true}) {
    expect_conv_relu_pool_fused_exactly<float>(p2, {3, 2, 8, 8}, input_grad, true, "2x2 float");
    expect_conv_relu_pool_fused_exactly<double>(p2, {3, 2, 7, 9}, input_grad, true,
                                                "2x2 odd sizes double");
    expect_conv_relu_pool_fused_exactly<float>(p3, {2, 3, 9, 10}, input_grad, true,
                                               "3x3/2 pad 1 float");
    expect_conv_relu_pool_fused_exactly<double>(p3s1, {2, 2, 6, 6}, input_grad, true,
                                                "3x3/1 double");
    expect_conv_relu_pool_fused_exactly<float>(ceil, {2, 2, 7, 7}, input_grad, true,
                                               "2x2 ceil mode float");
    expect_conv_relu_pool_fused_exactly<float>(p2, {2, 2, 6, 6}, input_grad, false,
                                               "2x2 without bias float");
  }
}

TEST(Layers, FusedConvReluMaxPoolGradcheck) {
  nn::manual_seed(6);
  nn::Sequential seq{nn::Conv2d<double, ts::cpu>(2, 3, 3, {.padding = {1, 1}}),
                     nn::ReLU<double, ts::cpu>(),
                     nn::MaxPool2d<double, ts::cpu>(
                         ts::Pool2dOptions{.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}})};
  expect_module_gradients(seq, rnd({2, 2, 6, 5}, 18));
}

TEST(Layers, FusedConvReluMaxPoolRecordsNothingUnderNoGrad) {
  nn::manual_seed(7);
  nn::Conv2d<float, ts::cpu> conv(1, 2, 3, {.padding = {1, 1}});
  nn::Sequential seq{conv, nn::ReLU<float, ts::cpu>(), nn::MaxPool2d<float, ts::cpu>(2)};
  ts::Generator gen(19);
  const auto x = ts::randn<float, ts::cpu>({2, 1, 6, 6}, gen);
  const auto taped = seq(x).value().to_vector();
  ts::no_grad guard;
  const auto y = seq(x);
  EXPECT_FALSE(y.requires_grad());
  EXPECT_EQ(y.value().to_vector(), taped);
  EXPECT_THROW(seq(ts::randn<float, ts::cpu>({2, 1, 1, 1}, gen)), ts::shape_error);
}

TEST(Layers, FusedConvReluMaxPoolTakesAnEmptyBatch) {
  nn::manual_seed(8);
  nn::Conv2d<float, ts::cpu> conv(2, 3, 3, {.padding = {1, 1}});
  nn::Sequential seq{conv, nn::ReLU<float, ts::cpu>(), nn::MaxPool2d<float, ts::cpu>(2)};
  ts::Variable<float, ts::cpu> x(ts::zeros<float, ts::cpu>({0, 2, 6, 6}), true);
  const auto y = seq(x);
  EXPECT_EQ(y.shape(), (ts::Shape{0, 3, 3, 3}));
  ts::sum(y).backward();
  EXPECT_EQ(x.grad().shape(), (ts::Shape{0, 2, 6, 6}));
  for (float v : conv.weight.grad().to_vector()) EXPECT_EQ(v, 0.0f);
  for (float v : conv.bias.grad().to_vector()) EXPECT_EQ(v, 0.0f);
}

}  // namespace

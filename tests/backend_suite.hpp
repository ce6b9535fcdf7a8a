// tests/backend_suite.hpp - one test body per op family, typed over the backend: each body builds
// its inputs on the host, runs the op on backend B and checks the result against a plain
// double-precision loop. Instantiated for cpu and the user-defined backend of
// examples/counted_backend.hpp (tests/test_backends.cpp), and for cuda
// (tests/cuda/test_cuda_backends.cu: on a GPU, and on the host emulation of the CUDA runtime).
// The CPU suite runs once more under every lower instruction set (TESSERA_ISA), like the other
// kernel suites. A backend that is not usable here (cuda without a GPU) specialises
// backend_unavailable<B> to say why; its tests then skip.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tessera/tessera.hpp>
#include <vector>

namespace backend_suite {
namespace ts = tessera;

/// Why backend B cannot run here; empty when it can.
template <class B>
std::string backend_unavailable() {
  return {};
}

template <class B>
class BackendSuite : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = backend_unavailable<B>(); !why.empty()) GTEST_SKIP() << why;
  }
};
TYPED_TEST_SUITE_P(BackendSuite);

/// Host values of a tensor on any backend, as doubles.
template <class T, class B>
std::vector<double> host(const ts::Tensor<T, B>& t) {
  const auto v = t.template to<ts::cpu>().contiguous().to_vector();
  return std::vector<double>(v.begin(), v.end());
}

inline void expect_near(const std::vector<double>& got, const std::vector<double>& want, double tol,
                        const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << what << ", element " << i;
}

/// Uniform floats in [-2, 2) on the host.
inline ts::Tensor<float, ts::cpu> sample(const ts::Shape& s, uint64_t seed) {
  ts::Generator g(seed);
  return ts::rand<float>(s, g, -2.0f, 2.0f);
}

TYPED_TEST_P(BackendSuite, ElementwiseBroadcastsAndRunsVectorMath) {
  using B = TypeParam;
  const auto x = sample({3, 1, 37}, 1), y = sample({1, 4, 37}, 2);
  const auto xb = x.template to<B>(), yb = y.template to<B>();
  const auto got = host(ts::where(xb > yb, ts::exp(xb), ts::relu(xb * 2.0f - yb)));
  const auto vx = host(x), vy = host(y);
  std::vector<double> want;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j)
      for (int k = 0; k < 37; ++k) {
        const double a = vx[i * 37 + k], b = vy[j * 37 + k];
        want.push_back(a > b ? std::exp(a) : std::max(2 * a - b, 0.0));
      }
  expect_near(got, want, 1e-5, "where(x > y, exp(x), relu(2x - y))");
  // A strided (transposed) input.
  const auto t = host(ts::tanh(xb.reshape({3, 37}).transpose(0, 1)));
  std::vector<double> want_t;
  for (int k = 0; k < 37; ++k)
    for (int i = 0; i < 3; ++i) want_t.push_back(std::tanh(vx[i * 37 + k]));
  expect_near(t, want_t, 1e-5, "tanh of a transposed view");
}

TYPED_TEST_P(BackendSuite, ReductionsOverEachAxis) {
  using B = TypeParam;
  const auto x = sample({5, 67}, 3);
  const auto xb = x.template to<B>();
  const auto v = host(x);
  std::vector<double> rows(5, 0), cols(67, 0), row_max(5, -1e300);
  std::vector<double> row_arg(5, 0);
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 67; ++j) {
      const double a = v[i * 67 + j];
      rows[i] += a;
      cols[j] += a / 5;
      if (a > row_max[i]) row_max[i] = a, row_arg[i] = j;
    }
  expect_near(host(ts::sum(xb, {1})), rows, 1e-5, "sum over axis 1");
  expect_near(host(ts::mean(xb, {0})), cols, 1e-5, "mean over axis 0");
  expect_near(host(ts::max(xb, {1})), row_max, 0, "max over axis 1");
  expect_near(host(ts::argmax(xb, 1)), row_arg, 0, "argmax over axis 1");
}

TYPED_TEST_P(BackendSuite, MatmulOfOddShapesAndATransposedOperand) {
  using B = TypeParam;
  const auto a = sample({33, 70}, 4), b = sample({29, 70}, 5);
  const auto got = host(ts::matmul(a.template to<B>(), b.template to<B>().transpose(0, 1)));
  const auto va = host(a), vb = host(b);
  std::vector<double> want(33 * 29, 0);
  for (int i = 0; i < 33; ++i)
    for (int j = 0; j < 29; ++j)
      for (int k = 0; k < 70; ++k) want[i * 29 + j] += va[i * 70 + k] * vb[j * 70 + k];
  expect_near(got, want, 1e-4, "a [33, 70] @ b^T [70, 29]");
}

TYPED_TEST_P(BackendSuite, Conv2dWithStridePaddingAndBias) {
  using B = TypeParam;
  const int64_t n = 2, c = 3, h = 9, w = 8, k = 4, r = 3, stride = 2, pad = 1;
  const int64_t oh = (h + 2 * pad - r) / stride + 1, ow = (w + 2 * pad - r) / stride + 1;
  const auto x = sample({n, c, h, w}, 6), wt = sample({k, c, r, r}, 7), bias = sample({k}, 8);
  const auto got = host(ts::conv2d(x.template to<B>(), wt.template to<B>(), bias.template to<B>(),
                                   {.stride = {stride, stride}, .padding = {pad, pad}}));
  const auto vx = host(x), vw = host(wt), vb = host(bias);
  std::vector<double> want;
  for (int64_t in = 0; in < n; ++in)
    for (int64_t o = 0; o < k; ++o)
      for (int64_t y = 0; y < oh; ++y)
        for (int64_t xx = 0; xx < ow; ++xx) {
          double s = vb[o];
          for (int64_t ci = 0; ci < c; ++ci)
            for (int64_t dy = 0; dy < r; ++dy)
              for (int64_t dx = 0; dx < r; ++dx) {
                const int64_t iy = y * stride - pad + dy, ix = xx * stride - pad + dx;
                if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
                s += vx[((in * c + ci) * h + iy) * w + ix] * vw[((o * c + ci) * r + dy) * r + dx];
              }
          want.push_back(s);
        }
  expect_near(got, want, 1e-4, "conv2d 3x3, stride 2, padding 1, bias");
}

TYPED_TEST_P(BackendSuite, MaxAndAveragePooling) {
  using B = TypeParam;
  const auto x = sample({2, 3, 7, 6}, 9);
  const auto xb = x.template to<B>();
  const auto mx = host(ts::max_pool2d(xb, {.kernel = {2, 2}, .stride = {2, 2}}));
  const auto av = host(ts::avg_pool2d(xb, {.kernel = {3, 3}, .stride = {2, 2}}));
  const auto v = host(x);
  std::vector<double> want_max, want_avg;
  for (int p = 0; p < 6; ++p) {
    const double* plane = v.data() + p * 42;
    for (int y = 0; y < 3; ++y)
      for (int xx = 0; xx < 3; ++xx) {
        double m = -1e300;
        for (int dy = 0; dy < 2; ++dy)
          for (int dx = 0; dx < 2; ++dx) m = std::max(m, plane[(2 * y + dy) * 6 + 2 * xx + dx]);
        want_max.push_back(m);
      }
    for (int y = 0; y < 3; ++y)
      for (int xx = 0; xx < 2; ++xx) {
        double s = 0;
        for (int dy = 0; dy < 3; ++dy)
          for (int dx = 0; dx < 3; ++dx) s += plane[(2 * y + dy) * 6 + 2 * xx + dx];
        want_avg.push_back(s / 9);
      }
  }
  expect_near(mx, want_max, 0, "max_pool2d 2x2 stride 2");
  expect_near(av, want_avg, 1e-6, "avg_pool2d 3x3 stride 2");
}

TYPED_TEST_P(BackendSuite, SgdAndAdamSteps) {
  using B = TypeParam;
  const auto p0 = sample({1001}, 10), g0 = sample({1001}, 11);
  auto p = p0.template to<B>(), buf = ts::zeros<float, B>({1001});
  const auto g = g0.template to<B>();
  ts::sgd_step(p, g, buf, {.lr = 0.1, .momentum = 0.9}, true);
  const auto vp = host(p0), vg = host(g0);
  std::vector<double> want(vp.size());
  for (size_t i = 0; i < vp.size(); ++i) want[i] = vp[i] - 0.1 * vg[i];
  expect_near(host(p), want, 1e-6, "sgd_step, first step with momentum");
  expect_near(host(buf), vg, 0, "sgd_step's momentum buffer");
  auto q = p0.template to<B>(), m = ts::zeros<float, B>({1001}), s = ts::zeros<float, B>({1001});
  ts::adam_step(q, g, m, s, {}, 1, {.lr = 0.01});
  // Step 1 with bias correction: m_hat = g, v_hat = g^2, so q = p - lr * g / (|g| + eps).
  for (size_t i = 0; i < vp.size(); ++i) want[i] = vp[i] - 0.01 * vg[i] / (std::abs(vg[i]) + 1e-8);
  expect_near(host(q), want, 1e-5, "adam_step, first step");
}

TYPED_TEST_P(BackendSuite, CrossEntropyOfLabels) {
  using B = TypeParam;
  const auto logits = sample({6, 5}, 12);
  ts::Generator g(13);
  const auto labels = ts::randint<int64_t>(0, 5, {6}, g);
  const double got = host(ts::cross_entropy(logits.template to<B>(), labels.template to<B>()))[0];
  const auto v = host(logits), l = host(labels);
  double want = 0;
  for (int i = 0; i < 6; ++i) {
    double mx = -1e300, se = 0;
    for (int j = 0; j < 5; ++j) mx = std::max(mx, v[i * 5 + j]);
    for (int j = 0; j < 5; ++j) se += std::exp(v[i * 5 + j] - mx);
    want += (mx + std::log(se) - v[i * 5 + static_cast<int>(l[i])]) / 6;
  }
  EXPECT_NEAR(got, want, 1e-5);
}

REGISTER_TYPED_TEST_SUITE_P(BackendSuite, ElementwiseBroadcastsAndRunsVectorMath,
                            ReductionsOverEachAxis, MatmulOfOddShapesAndATransposedOperand,
                            Conv2dWithStridePaddingAndBias, MaxAndAveragePooling, SgdAndAdamSteps,
                            CrossEntropyOfLabels);

}  // namespace backend_suite

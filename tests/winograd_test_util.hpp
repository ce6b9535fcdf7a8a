// winograd_test_util.hpp - what the CPU and CUDA Winograd tests share (tests/test_conv.cpp,
// tests/cuda/test_cuda_conv.cu): the setting for a test's duration and the error measure.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <tessera/tessera.hpp>

namespace winograd_test {
namespace ts = tessera;

/// conv_algorithm::winograd for a test's duration (restored however the test ends).
struct winograd_scope {
  winograd_scope() { ts::set_float32_conv_algorithm(ts::conv_algorithm::winograd); }
  ~winograd_scope() { ts::set_float32_conv_algorithm(ts::conv_algorithm::gemm); }
};

/// How far a Winograd result is from the direct sums, relative to what rounding may cost: the
/// largest |got - want| / (magnitude + tiny) over the elements, magnitude being the sum of |x| |w|
/// (+ |bias|) over each output's taps (the convolution of |x| by |w|). NaN anywhere gives 1.
inline double winograd_error(const ts::Tensor<float, ts::cpu>& got,
                             const ts::Tensor<float, ts::cpu>& want,
                             const ts::Tensor<float, ts::cpu>& magnitude) {
  EXPECT_EQ(got.shape(), want.shape());
  const auto g = got.to_vector(), w = want.to_vector(), m = magnitude.to_vector();
  double worst = 0;
  for (size_t i = 0; i < g.size(); ++i)
    worst = std::max(worst, std::fabs(double(g[i]) - w[i]) / (double(m[i]) + 1e-30));
  return std::isnan(worst) ? 1 : worst;
}

}  // namespace winograd_test

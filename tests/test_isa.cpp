// tests/test_isa.cpp - the CPU kernels' instruction set, chosen at run time: the environment and
// set_isa choose it, a set the CPU lacks is refused, and every set this CPU runs gives the scalar
// kernels' results (within the rounding that fused multiply-adds and vector math change).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "test_util.hpp"

namespace {
namespace ts = tessera;

const ts::cpu_isa all_isas[] = {ts::cpu_isa::scalar, ts::cpu_isa::avx2, ts::cpu_isa::avx512,
                                ts::cpu_isa::neon};

TEST(Isa, EnvironmentChoosesTheSet) {
  std::printf("[   ISA    ] running %s, best %s\n", ts::isa_name(ts::get_isa()),
              ts::isa_name(ts::detail::best_cpu_isa()));
  ts::cpu_isa asked;
  const char* env = std::getenv("TESSERA_ISA");
  if (env && ts::detail::parse_cpu_isa(env, asked) && ts::cpu_supports(asked))
    EXPECT_EQ(ts::get_isa(), asked);
  else
    EXPECT_EQ(ts::get_isa(), ts::detail::best_cpu_isa());
}

TEST(Isa, SetIsaRefusesWhatTheCpuLacks) {
  tt::isa_guard guard;
  EXPECT_TRUE(ts::cpu_supports(ts::cpu_isa::scalar));
  for (ts::cpu_isa isa : all_isas) {
    if (ts::cpu_supports(isa)) {
      ts::set_isa(isa);
      EXPECT_EQ(ts::get_isa(), isa);
      continue;
    }
    try {
      ts::set_isa(isa);
      ADD_FAILURE() << "set_isa(" << ts::isa_name(isa) << ") did not throw";
    } catch (const ts::backend_error& e) {
      EXPECT_NE(std::string(e.what()).find(ts::isa_name(isa)), std::string::npos) << e.what();
    }
  }
}

/// The results of a handful of kernels of every family, as doubles. The bf16 product is compared
/// in float (before its final rounding to bf16, which an ulp of difference could flip).
std::vector<std::vector<double>> run_every_family() {
  ts::Generator g(11);
  std::vector<std::vector<double>> out;
  // GEMM: odd sizes (tails of every tile), float, double, bf16, int8.
  const auto a = ts::rand<float>({67, 45}, g, -1, 1), b = ts::rand<float>({45, 33}, g, -1, 1);
  out.push_back(tt::to_doubles(ts::matmul(a, b)));
  out.push_back(tt::to_doubles(ts::matmul(a.astype<double>(), b.astype<double>())));
  auto ab = ts::empty<float>({67, 33});
  ts::matmul(a.astype<ts::bfloat16>(), b.astype<ts::bfloat16>(), ab);
  out.push_back(tt::to_doubles(ab));
  const auto ai = ts::randint<int8_t>(-100, 100, {37, 70}, g),
             bi = ts::randint<int8_t>(-100, 100, {70, 29}, g);
  out.push_back(tt::to_doubles(ts::matmul(ai, bi)));
  // Convolution (3x3, stride 1 and 2) and pooling.
  const auto x = ts::rand<float>({2, 5, 13, 11}, g, -1, 1);
  const auto w = ts::rand<float>({7, 5, 3, 3}, g, -1, 1);
  out.push_back(tt::to_doubles(ts::conv2d(x, w, {.padding = {1, 1}})));
  out.push_back(tt::to_doubles(ts::conv2d(x, w, {.stride = {2, 2}})));
  out.push_back(tt::to_doubles(ts::max_pool2d(x, {.kernel = {3, 3}, .stride = {2, 2}})));
  out.push_back(tt::to_doubles(ts::avg_pool2d(x, {.kernel = {2, 2}, .stride = {2, 2}})));
  // Elementwise (vector math) and reductions, with tails.
  const auto v = ts::rand<float>({3, 1001}, g, -4, 4);
  out.push_back(tt::to_doubles(ts::exp(v)));
  out.push_back(tt::to_doubles(ts::tanh(v)));
  out.push_back(tt::to_doubles(v * 2.0f + 1.0f));
  out.push_back(tt::to_doubles(ts::sum(v, {1})));
  out.push_back(tt::to_doubles(ts::max(v, {0})));
  out.push_back(tt::to_doubles(ts::softmax(v, 1)));
  // An optimizer step.
  auto p = ts::rand<float>({1003}, g, -1, 1), m = ts::zeros<float>({1003}),
       s = ts::zeros<float>({1003});
  const auto grad = ts::rand<float>({1003}, g, -1, 1);
  ts::adam_step(p, grad, m, s, {}, 1, {.lr = 0.01});
  out.push_back(tt::to_doubles(p));
  return out;
}

TEST(Isa, EverySetTheCpuRunsMatchesTheScalarKernels) {
  tt::isa_guard guard;
  ts::set_isa(ts::cpu_isa::scalar);
  const auto want = run_every_family();
  int checked = 0;
  for (ts::cpu_isa isa : all_isas) {
    if (isa == ts::cpu_isa::scalar || !ts::cpu_supports(isa)) continue;
    ts::set_isa(isa);
    const auto got = run_every_family();
    ASSERT_EQ(got.size(), want.size());
    for (size_t r = 0; r < want.size(); ++r) {
      ASSERT_EQ(got[r].size(), want[r].size()) << ts::isa_name(isa) << ", result " << r;
      for (size_t i = 0; i < want[r].size(); ++i)
        ASSERT_NEAR(got[r][i], want[r][i], 2e-5 * (1 + std::abs(want[r][i])))
            << ts::isa_name(isa) << ", result " << r << ", element " << i;
    }
    ++checked;
  }
  std::printf("[   ISA    ] %d vector set(s) checked against scalar\n", checked);
}

}  // namespace

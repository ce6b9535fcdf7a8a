// tests/test_isa_no_avx512.cpp - TESSERA_NO_AVX512 (backend/cpu/kernels.hpp): the avx512 pass is
// not compiled, and a CPU with AVX-512 runs the avx2 pass, not the scalar one.
#ifndef TESSERA_NO_AVX512  // the test build defines it on machines without AVX-512
#define TESSERA_NO_AVX512
#endif
#include <gtest/gtest.h>

#include <vector>

#include "test_util.hpp"

namespace {
namespace ts = tessera;

#if TESSERA_DETAIL_CPU_BASELINE < 2
static_assert(!TESSERA_DETAIL_CPU_HAS_PASS_2, "TESSERA_NO_AVX512 still compiled the avx512 pass");
#endif

/// A float sum, exp and matmul: their rounding depends on the vector width, so the avx512 and
/// avx2 kernels give different bits, and the scalar ones others again.
std::vector<std::vector<float>> results() {
  ts::Generator gen(7);
  const auto x = ts::randn<float>({100003}, gen);
  const auto a = ts::randn<float>({67, 129}, gen), b = ts::randn<float>({129, 45}, gen);
  return {ts::sum(x).to_vector(), ts::exp(x).to_vector(), ts::matmul(a, b).to_vector()};
}

TEST(IsaWithoutAvx512, AnAvx512CpuRunsTheAvx2Kernels) {
  if (!ts::cpu_supports(ts::cpu_isa::avx512)) GTEST_SKIP() << "this CPU has no AVX-512";
  tt::isa_guard guard;
  ts::set_isa(ts::cpu_isa::avx2);
  const auto avx2 = results();
  ts::set_isa(ts::cpu_isa::avx512);
  EXPECT_EQ(results(), avx2);
}

TEST(IsaWithoutAvx512, TheAvx2KernelsAreNotTheScalarOnes) {
  if (!ts::cpu_supports(ts::cpu_isa::avx2)) GTEST_SKIP() << "this CPU has no AVX2";
  if (!(TESSERA_DETAIL_CPU_HAS_PASS_0 && TESSERA_DETAIL_CPU_HAS_PASS_1))
    GTEST_SKIP() << "one kernel pass in this build (-march=native or TESSERA_NO_ISA_DISPATCH)";
  tt::isa_guard guard;
  ts::set_isa(ts::cpu_isa::scalar);
  const auto scalar = results();
  ts::set_isa(ts::cpu_isa::avx2);
  const auto avx2 = results();
  // The first test's equality means something only if the sets' results differ.
  EXPECT_NE(avx2, scalar);
  for (size_t i = 0; i < avx2.size(); ++i) {
    ASSERT_EQ(avx2[i].size(), scalar[i].size());
    for (size_t j = 0; j < avx2[i].size(); ++j)
      ASSERT_NEAR(avx2[i][j], scalar[i][j], 1e-3 * (1 + std::abs(scalar[i][j]))) << i << " " << j;
  }
}

}  // namespace

// Shared helpers of the CUDA test suites: the GPU-presence fixture, deterministic inputs, and
// comparison of device results with the CPU backend's results on the same inputs.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <tessera/cuda.hpp>
#include <type_traits>
#include <vector>

namespace cuda_test {
namespace ts = tessera;

// ---------------------------------------------------------------------------------------------
// Device presence.

/// Empty when a device is usable; otherwise why not.
inline const std::string& no_gpu_reason() {
  static const std::string reason = [] {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      return std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e);
    }
    return n > 0 ? std::string() : std::string("cudaGetDeviceCount returned 0 devices");
  }();
  return reason;
}

/// Base of every CUDA test: skips the test, saying why, when no device is usable.
class CudaFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!no_gpu_reason().empty())
      GTEST_SKIP() << "no CUDA device visible (" << no_gpu_reason() << "); CUDA test skipped";
  }
};

/// Splits the k of every pipelined product into n parts (where k has n granules of 128) for
/// the scope (gemm_split.cuh; 1: never), then lets dispatch decide again.
struct split_k_scope {
  explicit split_k_scope(int n) { ts::detail::cuda_gemm_split_k() = n; }
  ~split_k_scope() { ts::detail::cuda_gemm_split_k() = 0; }
  split_k_scope(const split_k_scope&) = delete;
  split_k_scope& operator=(const split_k_scope&) = delete;
};

/// Lets the wgmma pipeline feed its products through TMA (gemm_wgmma_tma.cuh) or not for the
/// scope, then switches it back on (the default).
struct tma_scope {
  explicit tma_scope(bool on) { ts::detail::cuda_wgmma_tma_choice().enabled = on; }
  ~tma_scope() { ts::detail::cuda_wgmma_tma_choice().enabled = true; }
  tma_scope(const tma_scope&) = delete;
  tma_scope& operator=(const tma_scope&) = delete;
};

/// The dtypes the typed suites run over.
using Dtypes = ::testing::Types<float, double, ts::half, ts::bfloat16, int32_t>;

// ---------------------------------------------------------------------------------------------
// Helpers.

template <class T>
using HostT = ts::Tensor<T, ts::cpu>;
template <class T>
using DevT = ts::Tensor<T, ts::cuda>;

/// Deterministic inputs every dtype represents: normals for floating types, small integers
/// otherwise.
template <class T>
HostT<T> sample(const ts::Shape& s, uint64_t seed) {
  ts::Generator g(seed);
  if constexpr (std::is_same_v<T, bool>)
    return ts::randint<T, ts::cpu>(0, 2, s, g);
  else if constexpr (std::is_integral_v<T>)
    return ts::randint<T, ts::cpu>(-20, 21, s, g);
  else
    return ts::randn<T, ts::cpu>(s, g);
}

template <class T>
double as_double(T v) {
  return static_cast<double>(static_cast<ts::compute_t<T>>(v));
}

/// Relative tolerance for a result stored in T: two units in its last place (device and host
/// math libraries may round transcendental functions differently); exact for integers.
template <class T>
double ulps2() {
  if constexpr (std::is_same_v<T, double>)
    return 1e-13;
  else if constexpr (std::is_same_v<T, float>)
    return 5e-7;
  else if constexpr (std::is_same_v<T, ts::half>)
    return 2e-3;
  else if constexpr (std::is_same_v<T, ts::bfloat16>)
    return 1.6e-2;
  else
    return 0;
}

/// got (copied back from the device) against want (CPU): same shape, and every element within
/// atol + rtol * |want|; NaN matches NaN, infinities match exactly.
template <class T>
void expect_close(const HostT<T>& got, const HostT<T>& want, double rtol, double atol = 0,
                  const std::string& what = "") {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const auto g = got.to_vector(), w = want.to_vector();
  int bad = 0;
  for (size_t i = 0; i < g.size() && bad < 5; ++i) {
    const double a = as_double(g[i]), b = as_double(w[i]);
    const bool ok = (std::isnan(a) && std::isnan(b)) || a == b ||
                    (std::isfinite(b) && std::fabs(a - b) <= atol + rtol * std::fabs(b));
    if (!ok) {
      ++bad;
      ADD_FAILURE() << what << " element " << i << " of " << want.shape() << ": cuda " << a
                    << " vs cpu " << b;
    }
  }
}

/// Runs op on the host tensors and on device copies of them; compares the results.
template <class Op, class... T>
void expect_same(const std::string& what, double rtol, double atol, Op op, const HostT<T>&... xs) {
  const auto want = op(xs...);
  const auto got = op(xs.template to<ts::cuda>()...).template to<ts::cpu>();
  expect_close(got, want, rtol, atol, what);
}

/// Bitwise equality (for copies, and for determinism).
template <class T>
bool same_bits(const HostT<T>& a, const HostT<T>& b) {
  if (!(a.shape() == b.shape())) return false;
  if (a.numel() == 0) return true;
  const auto x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.data(), y.data(), static_cast<size_t>(x.numel()) * sizeof(T)) == 0;
}

/// The axis sets every reduction is tried over, for a rank-3 input.
inline const std::vector<ts::Axes>& axis_sets() {
  static const std::vector<ts::Axes> sets = {{}, {0}, {1}, {2}, {-1}, {0, 2}, {1, 2}, {0, 1, 2}};
  return sets;
}

}  // namespace cuda_test

// tessera/core/matmul_precision.hpp - how float x float matrix products may round their inputs:
// exactly in float (the default), or on tf32 tensor cores where a GPU has them.
#pragma once

#include <atomic>

#include "../config.hpp"

TESSERA_BEGIN_NAMESPACE

/// The precision of float x float matrix products (matmul, gemm, linear, and the convolutions
/// that lower to them), process-wide; the names and meaning follow PyTorch's
/// torch.set_float32_matmul_precision.
/// - highest: float inputs, float accumulation, on every backend (the default).
/// - high: on CUDA devices with tf32 tensor cores (sm_80 and newer, code built for them) the
///   inputs are rounded to tf32 (float's exponent, a 10-bit mantissa: relative error up to
///   2^-11 per input) and accumulated in float, several times faster. The CPU backend and older
///   GPUs compute as with highest.
enum class matmul_precision { highest, high };

namespace detail {
inline std::atomic<matmul_precision>& float32_matmul_precision_setting() noexcept {
  static std::atomic<matmul_precision> setting{matmul_precision::highest};
  return setting;
}
}  // namespace detail

/// Sets the precision of float x float matrix products for the whole process (see
/// matmul_precision). Products already queued on a stream keep the precision they started with.
inline void set_float32_matmul_precision(matmul_precision p) noexcept {
  detail::float32_matmul_precision_setting().store(p, std::memory_order_relaxed);
}

/// The current precision of float x float matrix products.
inline matmul_precision get_float32_matmul_precision() noexcept {
  return detail::float32_matmul_precision_setting().load(std::memory_order_relaxed);
}

TESSERA_END_NAMESPACE

// tessera/core/conv_algorithm.hpp - which algorithm float convolutions may use: every output the
// dot product of its taps (the default), or Winograd's minimal filtering where a backend has it.
#pragma once

#include <atomic>

#include "../config.hpp"

TESSERA_BEGIN_NAMESPACE

/// The algorithm of float x float 2-D convolutions (conv2d, conv1d, conv_transpose2d, and their
/// backward passes), process-wide, like set_float32_matmul_precision.
/// - gemm: each output is the sum of its taps' products in float (implicit GEMM; the default),
///   rounded as the matrix products are.
/// - winograd: 3x3 convolutions of stride 1 and dilation 1, one group, at least 16 channels in
///   and out, compute the forward pass and the input gradient as Winograd F(4x4, 3x3) (and on
///   the CPU the weight gradient as F(3x3, 4x4), the same transforms over dy's tiles): tiles of
///   4x4 outputs from 6x6 inputs, 36 products of transformed channels per tile instead of 144
///   multiplies (4x fewer), at the cost of rounding in the transforms (outputs off by up to about
///   1e-5 of the sums of |x| |w|, against about 1e-7 for gemm). What cuDNN and oneDNN call their
///   Winograd algorithms. On the CPU (builds with SIMD vectors) 1.5-2.2x faster than gemm on
///   such layers' forward passes, 1.3-2.3x on forward + backward (docs/perf/conv.md); on CUDA
///   under matmul_precision::highest only (under high, tf32 tensor cores are faster still),
///   weight gradients as with gemm. Other layers and types compute as with gemm.
enum class conv_algorithm { gemm, winograd };

namespace detail {
inline std::atomic<conv_algorithm>& float32_conv_algorithm_setting() noexcept {
  static std::atomic<conv_algorithm> setting{conv_algorithm::gemm};
  return setting;
}
}  // namespace detail

/// Sets the algorithm of float convolutions for the whole process (see conv_algorithm).
/// Convolutions already queued on a stream keep the algorithm they started with.
inline void set_float32_conv_algorithm(conv_algorithm a) noexcept {
  detail::float32_conv_algorithm_setting().store(a, std::memory_order_relaxed);
}

/// The current algorithm of float convolutions.
inline conv_algorithm get_float32_conv_algorithm() noexcept {
  return detail::float32_conv_algorithm_setting().load(std::memory_order_relaxed);
}

TESSERA_END_NAMESPACE

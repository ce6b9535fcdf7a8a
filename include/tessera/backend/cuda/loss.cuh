// tessera/backend/cuda/loss.cuh - loss_kernel<cuda>: the losses' class-label check and count on
// the device, with the verdict deferred to the next wait (deferred_check.hpp), and cross-entropy's
// forward pass fused into one launch for small problems.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <utility>

#include "../../core/backend.hpp"
#include "../../kernel/loss_problem.hpp"
#include "block_shared.cuh"
#include "launch.hpp"

TESSERA_BEGIN_NAMESPACE
namespace detail {

inline constexpr int cuda_label_threads = 256;

/// One block: thread t takes labels t, t + 256, ...; a label other than `ignore` outside [0, c)
/// sets *fault (every writer stores the same value), the others in range are counted, and the
/// block's shared-memory tree sums the counts (integers: the same total in any order) into
/// *counted, the divisor of the mean.
template <class T>
__global__ void __launch_bounds__(cuda_label_threads)
    cuda_check_labels(const int64_t* labels, int64_t n, int64_t c, int64_t ignore, T* counted,
                      int* fault) {
  TESSERA_CUDA_SHARED(int64_t, sh, [cuda_label_threads]);
  const int t = threadIdx.x;
  int64_t k = 0;
  for (int64_t i = t; i < n; i += cuda_label_threads) {
    const int64_t v = labels[i];
    if (v == ignore) continue;
    if (v < 0 || v >= c)
      *fault = 1;
    else
      ++k;
  }
  sh[t] = k;
  __syncthreads();
  for (int s = cuda_label_threads / 2; s > 0; s >>= 1) {
    if (t < s) sh[t] += sh[t + s];
    __syncthreads();
  }
  if (t == 0) *counted = static_cast<T>(sh[0]);
}

/// Cross-entropy's whole forward pass in one block: thread t takes rows t, t + 256, ... in order
/// (cross_entropy_row, in double, as the CPU), writes each row's logsumexp and either its loss
/// or, to reduce, adds its loss rounded to T as the CPU's sum would see it; a label outside
/// [0, c) sets *fault and makes its loss NaN. The block's shared-memory trees then sum the losses
/// and the counted labels in a fixed order, and thread 0 writes the sum (or the mean, scaled by
/// 1 / count as ops/loss.hpp's loss_times_reciprocal) and the count.
template <class T>
__global__ void __launch_bounds__(cuda_label_threads)
    cuda_cross_entropy_block(cross_entropy_problem<T> p, int* fault) {
  TESSERA_CUDA_SHARED(double, sh_loss, [cuda_label_threads]);
  TESSERA_CUDA_SHARED(int64_t, sh_count, [cuda_label_threads]);
  const int t = threadIdx.x;
  double total = 0;
  int64_t k = 0;
  for (int64_t i = t; i < p.n; i += cuda_label_threads) {
    const int64_t v = p.labels[i];
    const bool bad = v != p.ignore_index && (v < 0 || v >= p.c);
    double lse = 0;
    double loss = cross_entropy_row(p.x + i * p.c, p.c, bad ? p.ignore_index : v, p.ignore_index,
                                    p.keep, p.smooth_per_class, lse);
    if (bad) {
      *fault = 1;                       // every writer stores the same value
      loss = static_cast<double>(NAN);  // this loss means nothing
    } else if (v != p.ignore_index) {
      ++k;
    }
    p.lse[i] = static_cast<T>(lse);
    if (p.reduce)
      total += static_cast<double>(static_cast<T>(loss));
    else
      p.out[i] = static_cast<T>(loss);
  }
  sh_loss[t] = total;
  sh_count[t] = k;
  __syncthreads();
  for (int s = cuda_label_threads / 2; s > 0; s >>= 1) {
    if (t < s) sh_loss[t] += sh_loss[t + s], sh_count[t] += sh_count[t + s];
    __syncthreads();
  }
  if (t == 0) {
    const T count = static_cast<T>(sh_count[0]);
    const T sum = static_cast<T>(sh_loss[0]);
    if (p.reduce) p.out[0] = p.mean ? sum * (T(1) / count) : sum;
    *p.counted = count;
  }
}

}  // namespace detail

namespace backend {

template <>
struct loss_kernel<cuda> {
  /// Checks the n contiguous labels against c classes (each in [0, c) or `ignore`) and writes how
  /// many are not `ignore` to the device scalar *counted, in one launch and without waiting. A
  /// bad label runs on_fault (which finds it on the host and throws) at the next wait.
  template <class T>
  static void check_labels(const int64_t* labels, int64_t n, int64_t c, int64_t ignore, T* counted,
                           std::function<void()> on_fault) {
    int* fault = detail::cuda_arm_check(std::move(on_fault));
    detail::cuda_launch("cuda_check_labels", detail::cuda_check_labels<T>, dim3(1),
                        dim3(detail::cuda_label_threads), labels, n, c, ignore, counted, fault);
  }

  /// Limits of the one-block cross-entropy: at most this many logits, and this many classes (a
  /// thread walks its rows three times; 256 classes keep that under 800 loads a thread, a few
  /// microseconds on one SM, where the composed path costs about a dozen launches).
  static constexpr int64_t fused_cross_entropy_logits = int64_t{1} << 16;
  static constexpr int64_t fused_cross_entropy_classes = 256;

  /// Cross-entropy's forward pass in one launch, labels checked as check_labels does (a bad one
  /// runs on_fault at the next wait); false, launching nothing, past the limits above (the
  /// caller composes it from map and reductions instead).
  template <class T>
  static bool cross_entropy(const detail::cross_entropy_problem<T>& p,
                            std::function<void()> on_fault) {
    if (p.c > fused_cross_entropy_classes) return false;
    if (p.c > 0 && p.n > fused_cross_entropy_logits / p.c) return false;
    int* fault = detail::cuda_arm_check(std::move(on_fault));
    detail::cuda_launch("cuda_cross_entropy_block", detail::cuda_cross_entropy_block<T>, dim3(1),
                        dim3(detail::cuda_label_threads), p, fault);
    return true;
  }
};

}  // namespace backend
TESSERA_END_NAMESPACE

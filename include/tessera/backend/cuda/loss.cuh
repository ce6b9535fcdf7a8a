// tessera/backend/cuda/loss.cuh - loss_kernel<cuda>: the losses' class-label check and count on
// the device, with the verdict deferred to the next wait (deferred_check.hpp).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <utility>

#include "../tags.hpp"
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
  __shared__ int64_t sh[cuda_label_threads];
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
};

}  // namespace backend
TESSERA_END_NAMESPACE

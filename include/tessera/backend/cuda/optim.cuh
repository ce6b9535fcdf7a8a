// tessera/backend/cuda/optim.cuh - optim_kernel<cuda>: the fused SGD and Adam / AdamW updates as
// grid-stride kernels, one thread per element. The update formula is the CPU backend's own
// scalar body (detail::optim::sgd_range / adam_range, host-device), so both backends compute
// the same IEEE operations per element.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../../ops/optim_step.hpp"
#include "../cpu/optim.hpp"
#include "error.hpp"
#include "launch.hpp"

TESSERA_BEGIN_NAMESPACE
namespace detail {

inline constexpr int cuda_optim_threads = 256;

template <class T, bool WD, bool MOM, bool FIRST, bool NEST>
__global__ void __launch_bounds__(cuda_optim_threads) cuda_sgd_step(sgd_problem<T> pr) {
  const int64_t step = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < pr.n; i += step)
    optim::sgd_range<T, WD, MOM, FIRST, NEST>(pr, i, i + 1);
}

template <class T, bool WD, bool AMS>
__global__ void __launch_bounds__(cuda_optim_threads) cuda_adam_step(adam_problem<T> pr) {
  const int64_t step = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < pr.n; i += step)
    optim::adam_range<T, WD, AMS>(pr, i, i + 1);
}

}  // namespace detail

namespace backend {

template <>
struct optim_kernel<cuda> {
  /// One SGD step over pr.n contiguous device elements (see detail::sgd_problem).
  template <class T>
  static void sgd(const detail::sgd_problem<T>& pr) {
    if (pr.n <= 0) return;
    detail::optim::with_sgd_flags(pr, [&]<bool WD, bool MOM, bool FIRST, bool NEST>() {
      detail::cuda_launch("cuda_sgd_step", detail::cuda_sgd_step<T, WD, MOM, FIRST, NEST>,
                          detail::cuda_grid(pr.n, detail::cuda_optim_threads),
                          dim3(detail::cuda_optim_threads), pr);
    });
  }

  /// One Adam / AdamW step over pr.n contiguous device elements (see detail::adam_problem).
  template <class T>
  static void adam(const detail::adam_problem<T>& pr) {
    if (pr.n <= 0) return;
    detail::optim::with_adam_flags(pr, [&]<bool WD, bool AMS>() {
      detail::cuda_launch("cuda_adam_step", detail::cuda_adam_step<T, WD, AMS>,
                          detail::cuda_grid(pr.n, detail::cuda_optim_threads),
                          dim3(detail::cuda_optim_threads), pr);
    });
  }
};

}  // namespace backend
TESSERA_END_NAMESPACE

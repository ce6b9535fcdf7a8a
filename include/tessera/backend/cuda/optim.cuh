// tessera/backend/cuda/optim.cuh - optim_kernel<cuda>: the fused SGD and Adam / AdamW updates as
// grid-stride kernels, one thread per element, and their multi-tensor forms (sgd_many,
// adam_many: up to 16 tensors a launch). The update formula is the scalar body both backends
// share (kernel/optim_update.hpp: detail::optim::sgd_range / adam_range, host-device).
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <span>
#include <vector>

#include "../../core/backend.hpp"
#include "../../kernel/optim_update.hpp"
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

/// The multi-tensor updates: up to cuda_optim_batch problems of one flag combination per launch,
/// passed by value (kernel parameters: no copy to the device, no wait), each cut into blocks of
/// cuda_optim_chunk elements; block b works on the problem whose first_block range holds it.
inline constexpr int cuda_optim_batch = 16;
inline constexpr int64_t cuda_optim_chunk = 4 * cuda_optim_threads;

template <class Problem>
struct cuda_optim_batch_args {
  Problem pr[cuda_optim_batch];
  int64_t first_block[cuda_optim_batch + 1];  // problem i's blocks: [first_block[i], [i + 1])
  int count;
};

/// The problem of this block and the range [begin, end) of its elements the block updates.
template <class Problem>
__device__ __forceinline__ const Problem& cuda_optim_block_problem(
    const cuda_optim_batch_args<Problem>& b, int64_t& begin, int64_t& end) {
  const int64_t block = blockIdx.x;
  int i = 0;
  while (i + 1 < b.count && block >= b.first_block[i + 1]) ++i;
  begin = (block - b.first_block[i]) * cuda_optim_chunk;
  end = begin + cuda_optim_chunk < b.pr[i].n ? begin + cuda_optim_chunk : b.pr[i].n;
  return b.pr[i];
}

template <class T, bool WD, bool MOM, bool FIRST, bool NEST>
__global__ void __launch_bounds__(cuda_optim_threads)
    cuda_sgd_many(const cuda_optim_batch_args<sgd_problem<T>> b) {
  int64_t begin, end;
  const sgd_problem<T>& pr = cuda_optim_block_problem(b, begin, end);
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x)
    optim::sgd_range<T, WD, MOM, FIRST, NEST>(pr, i, i + 1);
}

template <class T, bool WD, bool AMS>
__global__ void __launch_bounds__(cuda_optim_threads)
    cuda_adam_many(const cuda_optim_batch_args<adam_problem<T>> b) {
  int64_t begin, end;
  const adam_problem<T>& pr = cuda_optim_block_problem(b, begin, end);
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x)
    optim::adam_range<T, WD, AMS>(pr, i, i + 1);
}

/// Multi-tensor launches (tests count them).
inline std::atomic<int64_t>& cuda_optim_batches() {
  static std::atomic<int64_t> n{0};
  return n;
}

/// Runs problems (of one type) as few multi-tensor launches: grouped by their flag combination
/// (key(pr), which with_flags turns into template flags), up to cuda_optim_batch a launch.
/// launch(batch_args, blocks, first_problem) starts the kernel for the group's flags.
template <class Problem, class Key, class Launch>
void cuda_optim_run_batches(std::span<const Problem> problems, Key key, Launch launch) {
  std::vector<bool> done(problems.size(), false);
  for (size_t first = 0; first < problems.size(); ++first) {
    if (done[first] || problems[first].n <= 0) continue;
    cuda_optim_batch_args<Problem> b{};
    b.count = 0;
    b.first_block[0] = 0;
    for (size_t i = first; i < problems.size() && b.count < cuda_optim_batch; ++i) {
      if (done[i] || problems[i].n <= 0 || key(problems[i]) != key(problems[first])) continue;
      const int64_t blocks = (problems[i].n + cuda_optim_chunk - 1) / cuda_optim_chunk;
      if (b.count > 0 && b.first_block[b.count] + blocks > 0x7fffffff) break;  // grid.x limit
      b.pr[b.count] = problems[i];
      b.first_block[b.count + 1] = b.first_block[b.count] + blocks;
      ++b.count;
      done[i] = true;
    }
    launch(b, b.first_block[b.count], problems[first]);
    cuda_optim_batches().fetch_add(1, std::memory_order_relaxed);
  }
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

  /// SGD steps of many tensors (one optimizer step), in as few launches as their flags allow.
  template <class T>
  static void sgd_many(std::span<const detail::sgd_problem<T>> problems) {
    using P = detail::sgd_problem<T>;
    const auto key = [](const P& pr) {
      return (pr.weight_decay != T(0)) + 2 * (pr.momentum_buffer != nullptr) + 4 * pr.first_step +
             8 * pr.nesterov;
    };
    detail::cuda_optim_run_batches(
        problems, key, [](const detail::cuda_optim_batch_args<P>& b, int64_t blocks, const P& pr) {
          detail::optim::with_sgd_flags(pr, [&]<bool WD, bool MOM, bool FIRST, bool NEST>() {
            detail::cuda_launch("cuda_sgd_many", detail::cuda_sgd_many<T, WD, MOM, FIRST, NEST>,
                                dim3(static_cast<unsigned>(blocks)),
                                dim3(detail::cuda_optim_threads), b);
          });
        });
  }

  /// Adam / AdamW steps of many tensors, in as few launches as their flags allow.
  template <class T>
  static void adam_many(std::span<const detail::adam_problem<T>> problems) {
    using P = detail::adam_problem<T>;
    const auto key = [](const P& pr) { return (pr.weight_decay != T(0)) + 2 * pr.amsgrad; };
    detail::cuda_optim_run_batches(
        problems, key, [](const detail::cuda_optim_batch_args<P>& b, int64_t blocks, const P& pr) {
          detail::optim::with_adam_flags(pr, [&]<bool WD, bool AMS>() {
            detail::cuda_launch("cuda_adam_many", detail::cuda_adam_many<T, WD, AMS>,
                                dim3(static_cast<unsigned>(blocks)),
                                dim3(detail::cuda_optim_threads), b);
          });
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

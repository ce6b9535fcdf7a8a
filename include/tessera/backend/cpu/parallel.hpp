// tessera/backend/cpu/parallel.hpp - the CPU backend's thread count and parallel-for.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "../../config.hpp"

#if defined(_OPENMP)
#include <omp.h>
#endif

TESSERA_BEGIN_NAMESPACE

namespace detail {
inline std::atomic<int>& thread_setting() {
  static std::atomic<int> n{0};  // 0: OpenMP's default (OMP_NUM_THREADS or the core count)
  return n;
}
}  // namespace detail

/// Sets the number of threads CPU kernels use (n <= 0 restores the OpenMP default).
inline void set_num_threads(int n) { detail::thread_setting() = std::max(n, 0); }

/// Number of threads CPU kernels use for large work.
inline int get_num_threads() {
#if defined(_OPENMP)
  int n = detail::thread_setting();
  return n > 0 ? n : omp_get_max_threads();
#else
  return 1;
#endif
}

namespace detail {

/// Work below this many element-operations stays on one thread: forking costs a few
/// microseconds, which is what ~32k simple element operations take.
inline constexpr int64_t parallel_grain = 32768;

/// Runs body(begin, end) over [0, n) split into contiguous chunks, one per thread, when the
/// work (n * cost_per_item element-operations) is large enough; serially otherwise. The split
/// depends on the thread count, so bodies must not let it change results (reductions combine
/// fixed-size blocks instead).
template <class Body>
void parallel_for(int64_t n, int64_t cost_per_item, Body&& body) {
  if (n <= 0) return;
  int nt = get_num_threads();
  const int64_t work = n * std::max<int64_t>(cost_per_item, 1);
  if (nt <= 1 || work < 2 * parallel_grain || n < 2) {
    body(int64_t{0}, n);
    return;
  }
  nt = static_cast<int>(std::min<int64_t>({nt, n, work / parallel_grain}));
#if defined(_OPENMP)
#pragma omp parallel num_threads(nt)
  {
    const int t = omp_get_thread_num(), T = omp_get_num_threads();
    const int64_t b = n * t / T, e = n * (t + 1) / T;
    if (b < e) body(b, e);
  }
#else
  body(int64_t{0}, n);
#endif
}

}  // namespace detail

TESSERA_END_NAMESPACE

// tessera/backend/cpu/conv/buffers.hpp - what the CPU convolution kernels share: per-thread
// buffers kept between calls, and the split of a convolution's work items over threads.
// Part of a kernel pass: included by isa_pass.hpp once per instruction set, no include guard.

#include <algorithm>
#include <cstdint>

#include "../parallel.hpp"

TESSERA_BEGIN_NAMESPACE
namespace detail {

/// What a per-thread convolution buffer holds. Buffers are kept between calls: a fresh
/// multi-megabyte block page-faults on every first touch (measured: 11% of a [8, 256, 14, 14]
/// 3x3 forward when the packed weights were allocated per call).
enum class conv_buffer {
  tile,      // im2col / col2im tile, the padded input rows of the direct kernels, or
             // Winograd's transformed input tiles
  weights,   // packed (Winograd: transformed and packed) weights (calling thread)
  partials,  // weight-gradient partial sums of the other threads, or every thread's Winograd
             // weight-gradient sums (calling thread)
  aux,       // zero-padded output-gradient rows of the direct weight gradient
  lowering,  // zero-padded input rows and tap offsets that conv_lower_tile lowers from
  products,  // Winograd's per-position products of a block of tiles, or its transformed dy
             // (conv/winograd.hpp)
};
template <conv_buffer Role>
gemm_buffer& thread_conv_buffer() {
  static thread_local gemm_buffer b;
  return b;
}

/// Runs body(item) for items [0, n) on up to get_num_threads() threads, thread t taking items
/// t, t + T, ...; body(item, t) also gets the thread index (for per-thread accumulators).
/// Serial when the whole work (n * cost multiply-adds) is below the GEMM's fork threshold.
template <class Body>
void conv_parallel_items(int64_t n, int64_t cost, int threads, Body&& body) {
  if (n <= 0) return;
#if defined(_OPENMP)
  const int64_t work = gemm_work(n, std::max<int64_t>(cost, 1), 1);
  const int nt = static_cast<int>(std::clamp<int64_t>(
      std::min<int64_t>(n, work / gemm_parallel_grain), 1, std::max(threads, 1)));
  if (nt > 1) {
#pragma omp parallel num_threads(nt)
    {
      const int t = omp_get_thread_num(), T = omp_get_num_threads();
      for (int64_t i = t; i < n; i += T) body(i, t);
    }
    return;
  }
#else
  (void)cost, (void)threads;  // one thread without OpenMP
#endif
  for (int64_t i = 0; i < n; ++i) body(i, 0);
}

}  // namespace detail
TESSERA_END_NAMESPACE

// tessera/backend/cpu/optim.hpp - the CPU optimizer-update kernels: SGD (momentum, dampening,
// Nesterov, weight decay) and Adam / AdamW (AMSGrad), each one fused pass over contiguous arrays.
//
// Every element is independent, so an update reads each operand once and writes each written
// operand once: SGD moves 4-5 values per element, Adam 7-9, which makes both memory-bound on
// large tensors. The option flags that change the formula are template parameters (one
// instantiation per combination actually called), so the inner loop has no branches.
//
// The update bodies are kernel/optim_update.hpp's, shared with CUDA; this header adds their SIMD
// lanes and the parallel split. The SIMD body and the scalar tail do exactly the same IEEE
// operations, so an update is bit-identical for every thread count.
// Part of a kernel pass: included by isa_pass.hpp once per instruction set, no include guard.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "../../config.hpp"
#include "../../core/backend.hpp"
#include "../../kernel/optim_update.hpp"
#include "parallel.hpp"

// The pack lanes of this pass's vectors, beside the primary template (outside the pass's
// namespace, still inside its target region).
namespace tessera {
inline namespace TESSERA_ABI_NAMESPACE {
namespace detail::optim {
template <class T>
requires TESSERA_DETAIL_SIMD_NS::detail::simd::available<T>
struct lanes<TESSERA_DETAIL_SIMD_NS::detail::simd::vec<T>> {
  using V = TESSERA_DETAIL_SIMD_NS::detail::simd::vec<T>;
  static constexpr int width = V::width;
  static V load(const T* p) { return V::load(p); }
  static void store(V v, T* p) { v.store(p); }
  static V splat(T x) { return V::broadcast(x); }
  static V fma(V a, V b, V c) { return TESSERA_DETAIL_SIMD_NS::detail::simd::fma(a, b, c); }
  static V sqrt(V a) { return TESSERA_DETAIL_SIMD_NS::detail::simd::sqrt(a); }
  static V max(V a, V b) { return TESSERA_DETAIL_SIMD_NS::detail::simd::max(a, b); }
};
}  // namespace detail::optim
}  // namespace TESSERA_ABI_NAMESPACE
}  // namespace tessera

TESSERA_BEGIN_NAMESPACE
namespace detail {

namespace optim {
using namespace ::tessera::TESSERA_ABI_NAMESPACE::detail::optim;

/// Elements per parallel work item: a multiple of every vector width and of a cache line, so
/// two threads never write one line.
inline constexpr int64_t block = 64;

/// Runs range<pack> then range<scalar> for the tail over [b, e).
template <class T, class F>
TESSERA_ISA_FLATTEN void vector_then_tail(int64_t b, int64_t e, F&& range) {
  if constexpr (simd::available<T>) b = range(simd::vec<T>{}, b, e);
  range(T{}, b, e);
}

/// Splits [0, n) into block-aligned chunks across threads (cost: element-operations per item).
template <class T, class F>
void run_blocks(int64_t n, int64_t cost, F&& range) {
  const int64_t blocks = (n + block - 1) / block;
  parallel_for(blocks, block * cost, [&](int64_t bb, int64_t be) {
    vector_then_tail<T>(bb * block, std::min(be * block, n), range);
  });
}

}  // namespace optim
}  // namespace detail

namespace backend {

struct cpu_optim {
  /// One SGD step over pr.n contiguous elements (see detail::sgd_problem).
  template <class T>
  static void sgd(const detail::sgd_problem<T>& pr) {
    detail::optim::with_sgd_flags(pr, [&]<bool WD, bool MOM, bool FIRST, bool NEST>() {
      detail::optim::run_blocks<T>(pr.n, 8, [&]<class V>(V, int64_t b, int64_t e) {
        return detail::optim::sgd_range<V, WD, MOM, FIRST, NEST>(pr, b, e);
      });
    });
  }

  /// One Adam / AdamW step over pr.n contiguous elements (see detail::adam_problem).
  template <class T>
  static void adam(const detail::adam_problem<T>& pr) {
    detail::optim::with_adam_flags(pr, [&]<bool WD, bool AMS>() {
      detail::optim::run_blocks<T>(pr.n, 16, [&]<class V>(V, int64_t b, int64_t e) {
        return detail::optim::adam_range<V, WD, AMS>(pr, b, e);
      });
    });
  }
};

}  // namespace backend
TESSERA_END_NAMESPACE

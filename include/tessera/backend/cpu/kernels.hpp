// tessera/backend/cpu/kernels.hpp - every CPU kernel family, compiled once per instruction set
// in this translation unit and chosen at run time (isa.hpp says which one runs).
//
// isa_pass.hpp holds the kernels' code and is included once per compiled set ("pass"), each
// time inside a namespace of its own (isa_scalar, isa_avx2, isa_avx512, isa_neon) and, above
// the compiler's baseline, under a target pragma: so a program built with plain -O2 still has
// the AVX2 and AVX-512 kernels, and runs the best its CPU has. The passes compiled:
//   x86-64 with GCC or Clang: every set from the compiler's baseline up to avx512 (-O2: scalar,
//     avx2, avx512; -march=native on an AVX-512 machine: avx512 only);
//   AArch64: neon; elsewhere, nvcc's host and device passes, MSVC: the baseline only;
//   TESSERA_SIMD_SCALAR: scalar only; TESSERA_NO_ISA_DISPATCH: the baseline only;
//   TESSERA_NO_AVX512: no avx512 pass (a CPU with AVX-512 runs the avx2 one), for programs
//     whose CPUs lack it: 5 to 12% less compile time in the test suites (docs/perf/build_time.md).
// The families (map_kernel<cpu>, ...) are defined below the passes and forward each call to the
// pass of the chosen set. Everything the passes include is included here first, outside any
// target pragma, so that no inline function outside the pass namespaces is compiled for a
// wider instruction set than the program's baseline.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>
#if defined(__unix__) || defined(__APPLE__)
#include <unistd.h>
#endif

#include "../../config.hpp"
#include "../../core/backend.hpp"
#include "../../core/bfloat16.hpp"
#include "../../core/dtype.hpp"
#include "../../core/float8.hpp"
#include "../../core/half.hpp"
#include "../../core/storage.hpp"
#include "../../kernel/attention_problem.hpp"
#include "../../kernel/contract.hpp"
#include "../../kernel/conv_problem.hpp"
#include "../../kernel/functors.hpp"
#include "../../kernel/gemm_problem.hpp"
#include "../../kernel/layout.hpp"
#include "../../kernel/norm_problem.hpp"
#include "../../kernel/optim_update.hpp"
#include "../../kernel/pool_problem.hpp"
#include "../../kernel/winograd.hpp"
#include "gemm/epilogue.hpp"
#include "isa.hpp"
#include "memory.hpp"
#include "parallel.hpp"

// ---- which passes this translation unit compiles (0 scalar, 1 avx2, 2 avx512, 3 neon) --------
#if defined(__x86_64__) && !defined(TESSERA_SIMD_SCALAR) && !defined(__CUDA_ARCH__)
// GCC 12's AVX-512 intrinsics self-initialize placeholder registers (`__m512 __Y = __Y;`), which
// -Wmaybe-uninitialized reports wherever they are inlined (GCC 13 silenced it in the header).
// The AVX-512 pass is compiled in every translation unit, so silence it for the header's lines
// here rather than in every user's -Werror build.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#else
#include <immintrin.h>
#endif
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) &&                    \
    defined(__AVX512VL__) && defined(__AVX512VNNI__) && defined(__AVX2__) && defined(__FMA__) && \
    defined(__F16C__)
#define TESSERA_DETAIL_CPU_BASELINE 2
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define TESSERA_DETAIL_CPU_BASELINE 1
#else
#define TESSERA_DETAIL_CPU_BASELINE 0
#endif
#if (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__) && \
    !defined(TESSERA_NO_ISA_DISPATCH)
#if defined(TESSERA_NO_AVX512) && TESSERA_DETAIL_CPU_BASELINE < 2
#define TESSERA_DETAIL_CPU_TOP 1
#else
#define TESSERA_DETAIL_CPU_TOP 2
#endif
#else
#define TESSERA_DETAIL_CPU_TOP TESSERA_DETAIL_CPU_BASELINE
#endif
#elif defined(__aarch64__) && defined(__ARM_NEON) && !defined(TESSERA_SIMD_SCALAR) && \
    !defined(__CUDA_ARCH__)
#include <arm_neon.h>
#define TESSERA_DETAIL_CPU_BASELINE 3
#define TESSERA_DETAIL_CPU_TOP 3
#else
#define TESSERA_DETAIL_CPU_BASELINE 0
#define TESSERA_DETAIL_CPU_TOP 0
#endif

// TESSERA_DETAIL_CPU_HAS_PASS_<n>: 1 when pass n is compiled here.
#define TESSERA_DETAIL_CPU_HAS_PASS_0 (TESSERA_DETAIL_CPU_BASELINE == 0)
#define TESSERA_DETAIL_CPU_HAS_PASS_1 \
  (TESSERA_DETAIL_CPU_BASELINE <= 1 && TESSERA_DETAIL_CPU_TOP >= 1 && TESSERA_DETAIL_CPU_TOP <= 2)
#define TESSERA_DETAIL_CPU_HAS_PASS_2 \
  (TESSERA_DETAIL_CPU_BASELINE <= 2 && TESSERA_DETAIL_CPU_TOP == 2)
#define TESSERA_DETAIL_CPU_HAS_PASS_3 (TESSERA_DETAIL_CPU_BASELINE == 3)

// ---- the passes ------------------------------------------------------------------------------
// Clang warns (-Wpass-failed) at every loop under `omp simd` (TESSERA_OMP_SIMD) that it does not
// vectorize in some instantiation (a functor whose step does not vectorize, a type without
// vectors): noise to a user, hundreds of lines per translation unit, and an error under -Werror.
// The loops stay correct scalar loops; the warning is off for the kernels only.
#if defined(__clang__)
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wpass-failed"
#endif
#if TESSERA_DETAIL_CPU_HAS_PASS_0
#define TESSERA_DETAIL_CPU_PASS 0
#include "isa_pass.hpp"
#undef TESSERA_DETAIL_CPU_PASS
#endif
#if TESSERA_DETAIL_CPU_HAS_PASS_1
#define TESSERA_DETAIL_CPU_PASS 1
#include "isa_pass.hpp"
#undef TESSERA_DETAIL_CPU_PASS
#endif
#if TESSERA_DETAIL_CPU_HAS_PASS_2
#define TESSERA_DETAIL_CPU_PASS 2
#include "isa_pass.hpp"
#undef TESSERA_DETAIL_CPU_PASS
#endif
#if TESSERA_DETAIL_CPU_HAS_PASS_3
#define TESSERA_DETAIL_CPU_PASS 3
#include "isa_pass.hpp"
#undef TESSERA_DETAIL_CPU_PASS
#endif
#if defined(__clang__)
#pragma clang diagnostic pop
#endif

// ---- dispatch ----------------------------------------------------------------------------------
// TESSERA_DETAIL_CPU_DISPATCH(call) runs `isa_X::call` for the chosen instruction set: its pass
// when compiled here, else the avx2 pass for avx512 under TESSERA_NO_AVX512, else the baseline
// pass (a set below the baseline was asked for, or the translation unit compiles one pass only).
#define TESSERA_DETAIL_CPU_NS_0 isa_scalar
#define TESSERA_DETAIL_CPU_NS_1 isa_avx2
#define TESSERA_DETAIL_CPU_NS_2 isa_avx512
#define TESSERA_DETAIL_CPU_NS_3 isa_neon
#define TESSERA_DETAIL_CPU_CAT_(a, b) a##b
#define TESSERA_DETAIL_CPU_CAT(a, b) TESSERA_DETAIL_CPU_CAT_(a, b)
#define TESSERA_DETAIL_CPU_BASELINE_NS \
  TESSERA_DETAIL_CPU_CAT(TESSERA_DETAIL_CPU_NS_, TESSERA_DETAIL_CPU_BASELINE)
#if TESSERA_DETAIL_CPU_HAS_PASS_1 && TESSERA_DETAIL_CPU_BASELINE < 1 && \
    !TESSERA_DETAIL_CPU_HAS_PASS_2
#define TESSERA_DETAIL_CPU_CASE_1(call) \
  case ::tessera::cpu_isa::avx512:      \
  case ::tessera::cpu_isa::avx2:        \
    return ::tessera::isa_avx2::call;
#elif TESSERA_DETAIL_CPU_HAS_PASS_1 && TESSERA_DETAIL_CPU_BASELINE < 1
#define TESSERA_DETAIL_CPU_CASE_1(call) \
  case ::tessera::cpu_isa::avx2:        \
    return ::tessera::isa_avx2::call;
#else
#define TESSERA_DETAIL_CPU_CASE_1(call)
#endif
#if TESSERA_DETAIL_CPU_HAS_PASS_2 && TESSERA_DETAIL_CPU_BASELINE < 2
#define TESSERA_DETAIL_CPU_CASE_2(call) \
  case ::tessera::cpu_isa::avx512:      \
    return ::tessera::isa_avx512::call;
#else
#define TESSERA_DETAIL_CPU_CASE_2(call)
#endif
#define TESSERA_DETAIL_CPU_DISPATCH(call)                     \
  switch (::tessera::get_isa()) {                             \
    TESSERA_DETAIL_CPU_CASE_2(call)                           \
    TESSERA_DETAIL_CPU_CASE_1(call)                           \
    default:                                                  \
      return ::tessera::TESSERA_DETAIL_CPU_BASELINE_NS::call; \
  }

// TESSERA_DETAIL_CPU_DISPATCH_PLAIN(call): the same for work without hand-written vector code
// that is not all-float or all-double (comparisons, where, integer math, reducers without
// packs): the AVX-512 set runs the AVX2 pass there, so such ops compile one pass fewer (the
// compile-time test measured 9.3 s with three, against a 10 s limit). Plain float/double maps
// (user lambdas) keep the AVX-512 pass: 256-bit loops lost 6-19% on memory-bound maps.
#if TESSERA_DETAIL_CPU_HAS_PASS_1 && TESSERA_DETAIL_CPU_BASELINE < 1
#define TESSERA_DETAIL_CPU_DISPATCH_PLAIN(call)               \
  switch (::tessera::get_isa()) {                             \
    case ::tessera::cpu_isa::avx2:                            \
    case ::tessera::cpu_isa::avx512:                          \
      return ::tessera::isa_avx2::call;                       \
    default:                                                  \
      return ::tessera::TESSERA_DETAIL_CPU_BASELINE_NS::call; \
  }
#else
#define TESSERA_DETAIL_CPU_DISPATCH_PLAIN(call) TESSERA_DETAIL_CPU_DISPATCH(call)
#endif

TESSERA_BEGIN_NAMESPACE
namespace detail {
/// Whether every operand is float, or every one double: the types of the vector packs
/// (simd/vec.hpp), and of the loops where 512-bit vectors pay even without packs.
template <class Out, class... In>
inline constexpr bool cpu_vector_types = (std::is_same_v<In, Out> && ...) &&
                                         (std::is_same_v<Out, float> ||
                                          std::is_same_v<Out, double>);

/// A packed weight's panel width on the CPU: a multiple of every compiled pass's micro-tile
/// width nr for float and double (x86-64: 32, 16, 8 and 4; NEON: 12 and 6; scalar: 4), so one
/// layout serves whichever instruction set runs (gemm/blocking.hpp).
#if defined(__x86_64__)
template <>
inline constexpr int64_t gemm_weight_panel_v<cpu> = 32;
#elif defined(__aarch64__)
template <>
inline constexpr int64_t gemm_weight_panel_v<cpu> = 12;
#else
template <>
inline constexpr int64_t gemm_weight_panel_v<cpu> = 4;
#endif
}  // namespace detail

namespace backend {

template <>
struct map_kernel<cpu> {
  /// out[i] = static_cast<Out>(f(i)) for i < n over contiguous out (elementwise.hpp).
  template <class Out, class F>
  static void generate(const F& f, Out* out, int64_t n) {
    TESSERA_DETAIL_CPU_DISPATCH_PLAIN(backend::cpu_map::generate<Out>(f, out, n))
  }
  /// out[i] = static_cast<Out>(f(in[i]...)) over out's shape (elementwise.hpp).
  template <class Out, class F, class... In>
  static void run(const F& f, detail::strided<Out> out, detail::strided<const In>... in) {
    if constexpr (detail::cpu_vector_types<Out, In...>) {
      TESSERA_DETAIL_CPU_DISPATCH(backend::cpu_map::run<Out>(f, out, in...))
    } else {
      TESSERA_DETAIL_CPU_DISPATCH_PLAIN(backend::cpu_map::run<Out>(f, out, in...))
    }
  }
};

template <>
struct reduce_kernel<cpu> {
  template <class R, class In, class Out>
  static void run(const R& red, detail::strided<const In> in, int kept, detail::strided<Out> out) {
    if constexpr (fn::simd_of<R>() && detail::cpu_vector_types<In>) {
      TESSERA_DETAIL_CPU_DISPATCH(backend::cpu_reduce::run(red, in, kept, out))
    } else {
      TESSERA_DETAIL_CPU_DISPATCH_PLAIN(backend::cpu_reduce::run(red, in, kept, out))
    }
  }
};

template <>
struct gemm_kernel<cpu> {
  template <class TA, class TB, class Acc>
  static void run(const detail::gemm_problem<TA, TB, Acc>& pr) {
    TESSERA_DETAIL_CPU_DISPATCH(backend::cpu_gemm::run(pr))
  }
  /// Optional member (ops/quant.hpp, int8_fast_weight_max): the int8 weight range at which the
  /// instruction set running now multiplies fastest.
  static int int8_full_rate_b_max() {
    TESSERA_DETAIL_CPU_DISPATCH(backend::cpu_gemm::int8_full_rate_b_max())
  }
};

template <>
struct conv_kernel<cpu> {
  /// Forward, input gradient, weight gradient and bias gradient, told apart by the problem.
  template <class Problem>
  static void run(const Problem& p) {
    TESSERA_DETAIL_CPU_DISPATCH(backend::cpu_conv::run(p))
  }
};

template <>
struct pool_kernel<cpu> {
  template <class T>
  static void max_forward(const detail::pool_problem& pr, const T* x, T* y, int64_t* indices) {
    TESSERA_DETAIL_CPU_DISPATCH(backend::cpu_pool::max_forward(pr, x, y, indices))
  }
  template <class T>
  static void avg_forward(const detail::pool_problem& pr, const T* x, T* y) {
    TESSERA_DETAIL_CPU_DISPATCH(backend::cpu_pool::avg_forward(pr, x, y))
  }
  template <class T>
  static void adaptive_avg_forward(const detail::pool_problem& pr, const T* x, T* y) {
    TESSERA_DETAIL_CPU_DISPATCH(backend::cpu_pool::adaptive_avg_forward(pr, x, y))
  }
  template <class T>
  [[nodiscard]] static bool max_backward(const detail::pool_problem& pr, const T* gy,
                                         const int64_t* indices, T* gx) {
    TESSERA_DETAIL_CPU_DISPATCH(backend::cpu_pool::max_backward(pr, gy, indices, gx))
  }
  template <class T>
  static void avg_backward(const detail::pool_problem& pr, const T* gy, T* gx) {
    TESSERA_DETAIL_CPU_DISPATCH(backend::cpu_pool::avg_backward(pr, gy, gx))
  }
  template <class T>
  static void adaptive_avg_backward(const detail::pool_problem& pr, const T* gy, T* gx) {
    TESSERA_DETAIL_CPU_DISPATCH(backend::cpu_pool::adaptive_avg_backward(pr, gy, gx))
  }
};

template <>
struct optim_kernel<cpu> {
  template <class T>
  static void sgd(const detail::sgd_problem<T>& pr) {
    TESSERA_DETAIL_CPU_DISPATCH(backend::cpu_optim::sgd(pr))
  }
  template <class T>
  static void adam(const detail::adam_problem<T>& pr) {
    TESSERA_DETAIL_CPU_DISPATCH(backend::cpu_optim::adam(pr))
  }
};

/// Fused attention (attention.hpp), float and double; ops/attention.hpp converts other types.
template <>
struct attention_kernel<cpu> {
  template <class T>
  static void forward(const detail::attention_problem<T>& p) {
    TESSERA_DETAIL_CPU_DISPATCH(backend::cpu_attention::forward(p))
  }
  template <class T>
  static void backward(const detail::attention_backward_problem<T>& g) {
    TESSERA_DETAIL_CPU_DISPATCH(backend::cpu_attention::backward(g))
  }
};

/// Fused row-wise kernels (norm.hpp): layer normalization (float and double) and int8 row
/// quantization.
template <>
struct norm_kernel<cpu> {
  template <class T>
  static void layer_norm(const detail::layer_norm_problem<T>& p) {
    TESSERA_DETAIL_CPU_DISPATCH(backend::cpu_norm::layer_norm(p))
  }
  static void int8_rows(const detail::int8_rows_problem& p) {
    TESSERA_DETAIL_CPU_DISPATCH(backend::cpu_norm::int8_rows(p))
  }
};

}  // namespace backend
TESSERA_END_NAMESPACE

static_assert(tessera::complete_backend<tessera::cpu>,
              "the CPU backend misses a kernel family (kernel/contract.hpp)");

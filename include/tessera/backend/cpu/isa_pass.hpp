// tessera/backend/cpu/isa_pass.hpp - one pass of the CPU kernels: their code compiled for the
// instruction set TESSERA_DETAIL_CPU_PASS names (0 scalar, 1 avx2, 2 avx512, 3 neon), inside the
// namespace isa_<set>. Included by kernels.hpp only, once per pass; no include guard.
//
// The kernel headers below see tessera's own feature macros, not the compiler's: TESSERA_ISA_AVX2
// (AVX2, FMA, F16C), TESSERA_ISA_AVX512 (AVX-512 F/BW/DQ/VL and VNNI; implies TESSERA_ISA_AVX2)
// and TESSERA_ISA_NEON. Inside the pass namespace, detail:: and backend:: also find the names of
// the layers below (a using-directive in each), so the kernel headers read as before.
#if !defined(TESSERA_DETAIL_CPU_PASS)
#error "tessera/backend/cpu/isa_pass.hpp is included by tessera/backend/cpu/kernels.hpp only"
#endif

#if TESSERA_DETAIL_CPU_PASS == 0
#define TESSERA_DETAIL_SIMD_NS isa_scalar
#elif TESSERA_DETAIL_CPU_PASS == 1
#define TESSERA_DETAIL_SIMD_NS isa_avx2
#define TESSERA_ISA_AVX2 1
#elif TESSERA_DETAIL_CPU_PASS == 2
#define TESSERA_DETAIL_SIMD_NS isa_avx512
#define TESSERA_ISA_AVX2 1
#define TESSERA_ISA_AVX512 1
#else
#define TESSERA_DETAIL_SIMD_NS isa_neon
#define TESSERA_ISA_NEON 1
#endif

// Above the baseline: every function defined in the pass (templates and lambdas included) is
// compiled for the pass's instruction set.
#if TESSERA_DETAIL_CPU_PASS != TESSERA_DETAIL_CPU_BASELINE
#define TESSERA_DETAIL_CPU_TARGETED 1
#if defined(__clang__)
#if TESSERA_DETAIL_CPU_PASS == 1
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,bmi,bmi2,lzcnt,popcnt"))), \
                             apply_to = function)
#else
#pragma clang attribute push(                                                                   \
    __attribute__((target(                                                                      \
        "avx2,fma,f16c,bmi,bmi2,lzcnt,popcnt,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni"))), \
    apply_to = function)
#endif
#else
#pragma GCC push_options
#if TESSERA_DETAIL_CPU_PASS == 1
#pragma GCC target("avx2,fma,f16c,bmi,bmi2,lzcnt,popcnt")
#else
#pragma GCC target( \
    "avx2,fma,f16c,bmi,bmi2,lzcnt,popcnt,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,prefer-vector-width=512")
#endif
#endif
#endif

// GCC does not inline a vector operation into a function compiled for the baseline (a functor
// of kernel/functors.hpp taking packs) even once that function is inlined into a pass function;
// the leaf loops that call such functors are flattened, which inlines the whole call tree.
#if defined(TESSERA_DETAIL_CPU_TARGETED) && defined(__GNUC__) && !defined(__clang__)
#define TESSERA_ISA_FLATTEN __attribute__((flatten))
#else
#define TESSERA_ISA_FLATTEN
#endif

#pragma push_macro("TESSERA_BEGIN_NAMESPACE")
#pragma push_macro("TESSERA_END_NAMESPACE")
#undef TESSERA_BEGIN_NAMESPACE
#undef TESSERA_END_NAMESPACE
#define TESSERA_BEGIN_NAMESPACE            \
  namespace tessera {                      \
  inline namespace TESSERA_ABI_NAMESPACE { \
  namespace TESSERA_DETAIL_SIMD_NS {
#define TESSERA_END_NAMESPACE \
  }                           \
  }                           \
  }

TESSERA_BEGIN_NAMESPACE
namespace detail {
using namespace ::tessera::TESSERA_ABI_NAMESPACE::detail;
}
namespace backend {
using namespace ::tessera::TESSERA_ABI_NAMESPACE::backend;
}
TESSERA_END_NAMESPACE

// clang-format off
#include "simd/vec.hpp"
#include "gemm/blocking.hpp"
#include "gemm/pack.hpp"
#include "gemm/kernel_fp.hpp"
#include "gemm/kernel_int8.hpp"
#include "gemm/kernel_bf16.hpp"
#include "gemm.hpp"
#include "elementwise.hpp"
#include "reduce.hpp"
#include "simd/short_copy.hpp"
#include "conv/direct.hpp"
#include "conv/im2col.hpp"
#include "conv/buffers.hpp"
#include "conv/winograd.hpp"
#include "conv.hpp"
#include "pool.hpp"
#include "optim.hpp"
#include "attention.hpp"
#include "norm.hpp"
// clang-format on

#undef TESSERA_BEGIN_NAMESPACE
#undef TESSERA_END_NAMESPACE
#pragma pop_macro("TESSERA_BEGIN_NAMESPACE")
#pragma pop_macro("TESSERA_END_NAMESPACE")

#if defined(TESSERA_DETAIL_CPU_TARGETED)
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#undef TESSERA_DETAIL_CPU_TARGETED
#endif
#undef TESSERA_ISA_FLATTEN
#undef TESSERA_DETAIL_HAVE_INT8_ISA
#undef TESSERA_DETAIL_INT8_NARROW_DOT
#undef TESSERA_DETAIL_HAVE_BF16_ISA
#undef TESSERA_DETAIL_HAVE_BF16_DOT
#undef TESSERA_DETAIL_HAVE_TRANSPOSE_8X8
#undef TESSERA_DETAIL_HAVE_FLOAT8_VECTOR
#undef TESSERA_DETAIL_KEEP_LOOPS
#undef TESSERA_DETAIL_MASKED_TAILS
#undef TESSERA_DETAIL_POOL_AVX512
#undef TESSERA_DETAIL_POOL_AVX2
#undef TESSERA_DETAIL_SIMD_NS
#undef TESSERA_ISA_AVX2
#undef TESSERA_ISA_AVX512
#undef TESSERA_ISA_NEON

// tessera/backend/cpu/simd/scalar.hpp - no SIMD: the fallback when no supported ISA is enabled or
// TESSERA_SIMD_SCALAR is defined. Internal: included by vec.hpp only.
//
// vec<T> stays undefined and available<T> keeps its primary value, false, for every T, so kernels
// take their scalar path (`if constexpr (simd::available<T>)`) and any stray use of vec<T> is a
// compile error rather than a slow emulation.
// Part of a kernel pass: included by isa_pass.hpp once per instruction set, no include guard.

#ifndef TESSERA_DETAIL_SIMD_NS
#error "include tessera/backend/cpu/simd/vec.hpp instead of this file"
#endif

TESSERA_BEGIN_NAMESPACE
namespace detail::simd {
inline namespace TESSERA_DETAIL_SIMD_NS {

inline constexpr const char* isa_name = "scalar";

/// Orders earlier non-temporal stores before later stores (needed before another thread may
/// read what vec::stream wrote).
inline void stream_fence() {}

static_assert(!available<float> && !available<double>);

}  // namespace TESSERA_DETAIL_SIMD_NS
}  // namespace detail::simd
TESSERA_END_NAMESPACE

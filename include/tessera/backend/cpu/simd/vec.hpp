// tessera/backend/cpu/simd/vec.hpp - fixed-width SIMD vectors for the CPU kernels.
//
// One pass of the kernels includes exactly one of avx512.hpp (TESSERA_ISA_AVX512), avx2.hpp
// (TESSERA_ISA_AVX2), neon.hpp (TESSERA_ISA_NEON) or scalar.hpp, then math.hpp. In the scalar
// pass available<T> is false and vec<T> is left undefined.
//
// Interface, for V = vec<float> and vec<double> when available<T> (all found by ADL on V):
//   V::width, V::value_type, V::mask_t, member `r` (the native register),
//   V::load(p) / v.store(p) (unaligned), V::broadcast(x);
//   + - * / and unary -, also with any arithmetic scalar on either side (converted to T first),
//   and += -= *= /=;
//   fma(a, b, c) = a * b + c rounded once; min / max (NaN if either input is NaN; the sign of a
//   zero result from +0 and -0 is unspecified); relu (NaN stays NaN); abs, sqrt, floor, ceil,
//   trunc, round (half to even);
//   lt le gt ge eq ne isnan -> mask_t (ordered compares: false with a NaN, except ne);
//   select(m, a, b) = m ? a : b per lane; any(m), all(m), mask_and, mask_or, mask_not.
//   Masks are builtin types (__m256, __mmask16, uint32x4_t), which carry no namespace for ADL:
//   call the mask functions qualified (simd::any(m)). Combine them with mask_and/mask_or/
//   mask_not, not & | ~ (those do not compile for __m256 and yield int for __mmask16).
//   Helpers, used by math.hpp: pow2n(n) = 2^n for integral n in [min_exponent - 1,
//   max_exponent - 1] (one past the top gives inf); ldexp(x, n) = x * 2^n for integral n up to
//   twice that range, rounded once (subnormal results correct); exponent(x) = floor(log2 x) and
//   mantissa(x) = x / 2^exponent(x) in [1, 2), both for positive normal finite x only.
// math.hpp adds exp, expm1, log, log1p, tanh, sigmoid for both types.
//
// Everything lives in the pass's namespace (tessera::isa_avx2::detail::simd, ...; see
// ../isa_pass.hpp), so each instruction set's vec<float> is its own type.
// Part of a kernel pass: included by isa_pass.hpp once per instruction set, no include guard.

#include <type_traits>

#include "../../../config.hpp"

TESSERA_BEGIN_NAMESPACE
namespace detail::simd {
inline namespace TESSERA_DETAIL_SIMD_NS {

/// One native register of T. Specialised by the ISA header for float and double; never defined
/// for other T, and not defined at all by the scalar fallback.
template <class T>
struct vec;

/// True when vec<T> is defined. Kernels test it with `if constexpr` and fall back to scalar loops.
template <class T>
inline constexpr bool available = false;

template <class... A>
inline constexpr bool never_viable = false;

// The ISA headers define these as plain overloads; the scalar fallback defines none. These
// never-viable declarations make the names exist on every ISA, so a qualified call such as
// simd::any(m) in a discarded `if constexpr (simd::available<T>)` branch still compiles in the
// scalar build. (Qualification is needed for masks anyway: __m256 or __mmask16 arguments bring no
// namespace for argument-dependent lookup.) They never take part in overload resolution.
#define TESSERA_DETAIL_SIMD_DECLARE_NAME(name) \
  template <class... A>                        \
  requires never_viable<A...>                  \
  void name(A&&...) = delete;
TESSERA_DETAIL_SIMD_DECLARE_NAME(fma)
TESSERA_DETAIL_SIMD_DECLARE_NAME(min)
TESSERA_DETAIL_SIMD_DECLARE_NAME(max)
TESSERA_DETAIL_SIMD_DECLARE_NAME(abs)
TESSERA_DETAIL_SIMD_DECLARE_NAME(sqrt)
TESSERA_DETAIL_SIMD_DECLARE_NAME(floor)
TESSERA_DETAIL_SIMD_DECLARE_NAME(ceil)
TESSERA_DETAIL_SIMD_DECLARE_NAME(round)
TESSERA_DETAIL_SIMD_DECLARE_NAME(trunc)
TESSERA_DETAIL_SIMD_DECLARE_NAME(lt)
TESSERA_DETAIL_SIMD_DECLARE_NAME(le)
TESSERA_DETAIL_SIMD_DECLARE_NAME(gt)
TESSERA_DETAIL_SIMD_DECLARE_NAME(ge)
TESSERA_DETAIL_SIMD_DECLARE_NAME(eq)
TESSERA_DETAIL_SIMD_DECLARE_NAME(ne)
TESSERA_DETAIL_SIMD_DECLARE_NAME(isnan)
TESSERA_DETAIL_SIMD_DECLARE_NAME(select)
TESSERA_DETAIL_SIMD_DECLARE_NAME(any)
TESSERA_DETAIL_SIMD_DECLARE_NAME(all)
TESSERA_DETAIL_SIMD_DECLARE_NAME(mask_and)
TESSERA_DETAIL_SIMD_DECLARE_NAME(mask_or)
TESSERA_DETAIL_SIMD_DECLARE_NAME(mask_not)
TESSERA_DETAIL_SIMD_DECLARE_NAME(pow2n)
TESSERA_DETAIL_SIMD_DECLARE_NAME(ldexp)
TESSERA_DETAIL_SIMD_DECLARE_NAME(exponent)
TESSERA_DETAIL_SIMD_DECLARE_NAME(mantissa)
#undef TESSERA_DETAIL_SIMD_DECLARE_NAME

}  // namespace TESSERA_DETAIL_SIMD_NS
}  // namespace detail::simd
TESSERA_END_NAMESPACE

#if defined(TESSERA_ISA_AVX512)
#include "avx512.hpp"
#elif defined(TESSERA_ISA_AVX2)
#include "avx2.hpp"
#elif defined(TESSERA_ISA_NEON)
#include "neon.hpp"
#else
#include "scalar.hpp"
#endif

TESSERA_BEGIN_NAMESPACE
namespace detail::simd {
inline namespace TESSERA_DETAIL_SIMD_NS {

// Mixed vector/scalar arithmetic and the compound assignments are the same on every ISA, so they
// are written once here on top of the per-ISA vector-vector operators. The scalar is converted to
// T first, which makes `2 * v` and `v * 0.5` work for vec<float> without narrowing warnings.

template <class T>
concept simd_element = available<T>;

template <class S>
concept simd_scalar = std::is_arithmetic_v<S>;

template <simd_element T, simd_scalar S>
inline vec<T> operator+(vec<T> a, S b) {
  return a + vec<T>::broadcast(static_cast<T>(b));
}
template <simd_element T, simd_scalar S>
inline vec<T> operator-(vec<T> a, S b) {
  return a - vec<T>::broadcast(static_cast<T>(b));
}
template <simd_element T, simd_scalar S>
inline vec<T> operator*(vec<T> a, S b) {
  return a * vec<T>::broadcast(static_cast<T>(b));
}
template <simd_element T, simd_scalar S>
inline vec<T> operator/(vec<T> a, S b) {
  return a / vec<T>::broadcast(static_cast<T>(b));
}
template <simd_element T, simd_scalar S>
inline vec<T> operator+(S a, vec<T> b) {
  return vec<T>::broadcast(static_cast<T>(a)) + b;
}
template <simd_element T, simd_scalar S>
inline vec<T> operator-(S a, vec<T> b) {
  return vec<T>::broadcast(static_cast<T>(a)) - b;
}
template <simd_element T, simd_scalar S>
inline vec<T> operator*(S a, vec<T> b) {
  return vec<T>::broadcast(static_cast<T>(a)) * b;
}
template <simd_element T, simd_scalar S>
inline vec<T> operator/(S a, vec<T> b) {
  return vec<T>::broadcast(static_cast<T>(a)) / b;
}

template <simd_element T>
inline vec<T>& operator+=(vec<T>& a, vec<T> b) {
  return a = a + b;
}
template <simd_element T>
inline vec<T>& operator-=(vec<T>& a, vec<T> b) {
  return a = a - b;
}
template <simd_element T>
inline vec<T>& operator*=(vec<T>& a, vec<T> b) {
  return a = a * b;
}
template <simd_element T>
inline vec<T>& operator/=(vec<T>& a, vec<T> b) {
  return a = a / b;
}
template <simd_element T, simd_scalar S>
inline vec<T>& operator+=(vec<T>& a, S b) {
  return a = a + b;
}
template <simd_element T, simd_scalar S>
inline vec<T>& operator-=(vec<T>& a, S b) {
  return a = a - b;
}
template <simd_element T, simd_scalar S>
inline vec<T>& operator*=(vec<T>& a, S b) {
  return a = a * b;
}
template <simd_element T, simd_scalar S>
inline vec<T>& operator/=(vec<T>& a, S b) {
  return a = a / b;
}

/// max(x, 0), except that NaN stays NaN (max() propagates it) as torch.relu does.
template <simd_element T>
inline vec<T> relu(vec<T> x) {
  return max(x, vec<T>::broadcast(T(0)));
}

/// g where y > 0, else 0 (relu's derivative times g, from relu's output y). Here rather than in
/// autograd: a mask is a bare vector register, which Clang refuses to pass or return in a
/// function compiled without the pass's instruction set (an error, not GCC's -Wpsabi note).
template <simd_element T>
inline vec<T> where_positive(vec<T> g, vec<T> y) {
  const vec<T> zero = vec<T>::broadcast(T(0));
  return select(gt(y, zero), g, zero);
}

}  // namespace TESSERA_DETAIL_SIMD_NS
}  // namespace detail::simd
TESSERA_END_NAMESPACE

#include "math.hpp"

// tessera/backend/cpu/simd/avx512.hpp - vec<float> and vec<double> on AVX-512F (512-bit).
// Internal: included by vec.hpp only. Needs AVX512F alone: the bitwise float operations go
// through the integer forms because _mm512_and_ps and friends are AVX512DQ.
// Part of a kernel pass: included by isa_pass.hpp once per instruction set, no include guard.

#ifndef TESSERA_DETAIL_SIMD_NS
#error "include tessera/backend/cpu/simd/vec.hpp instead of this file"
#endif

#include <immintrin.h>

#include <cstdint>

TESSERA_BEGIN_NAMESPACE
namespace detail::simd {
inline namespace TESSERA_DETAIL_SIMD_NS {

inline constexpr const char* isa_name = "avx512";

/// Orders earlier non-temporal stores before later stores (needed before another thread may
/// read what vec::stream wrote).
inline void stream_fence() { _mm_sfence(); }

template <>
inline constexpr bool available<float> = true;
template <>
inline constexpr bool available<double> = true;

template <>
struct vec<float> {
  static constexpr int width = 16;
  using value_type = float;
  /// One bit per lane. Combine masks with mask_and/mask_or/mask_not: `&` on them yields int.
  using mask_t = __mmask16;
  __m512 r;

  static vec load(const float* p) { return {_mm512_loadu_ps(p)}; }
  static vec broadcast(float x) { return {_mm512_set1_ps(x)}; }
  void store(float* p) const { _mm512_storeu_ps(p, r); }
  /// Non-temporal store (bypasses the caches); p must be 64-byte aligned.
  void stream(float* p) const { _mm512_stream_ps(p, r); }
};

template <>
struct vec<double> {
  static constexpr int width = 8;
  using value_type = double;
  using mask_t = __mmask8;
  __m512d r;

  static vec load(const double* p) { return {_mm512_loadu_pd(p)}; }
  static vec broadcast(double x) { return {_mm512_set1_pd(x)}; }
  void store(double* p) const { _mm512_storeu_pd(p, r); }
  void stream(double* p) const { _mm512_stream_pd(p, r); }
};

// The float and double operations differ only in the intrinsic suffix (ps / pd) and in the
// integer lane width used for bitwise operations (epi32 / epi64), so they are stamped out from one
// definition to keep the two in step.
#define TESSERA_DETAIL_SIMD_AVX512_OPS(T, S, I, M)                                                 \
  inline vec<T> operator+(vec<T> a, vec<T> b) { return {_mm512_add_##S(a.r, b.r)}; }               \
  inline vec<T> operator-(vec<T> a, vec<T> b) { return {_mm512_sub_##S(a.r, b.r)}; }               \
  inline vec<T> operator*(vec<T> a, vec<T> b) { return {_mm512_mul_##S(a.r, b.r)}; }               \
  inline vec<T> operator/(vec<T> a, vec<T> b) { return {_mm512_div_##S(a.r, b.r)}; }               \
  inline vec<T> operator-(vec<T> a) {                                                              \
    return {_mm512_castsi512_##S(_mm512_xor_##I(                                                   \
        _mm512_cast##S##_si512(a.r), _mm512_cast##S##_si512(_mm512_set1_##S(T(-0.0)))))};          \
  }                                                                                                \
  inline vec<T> fma(vec<T> a, vec<T> b, vec<T> c) { return {_mm512_fmadd_##S(a.r, b.r, c.r)}; }    \
                                                                                                   \
  inline M lt(vec<T> a, vec<T> b) { return _mm512_cmp_##S##_mask(a.r, b.r, _CMP_LT_OQ); }          \
  inline M le(vec<T> a, vec<T> b) { return _mm512_cmp_##S##_mask(a.r, b.r, _CMP_LE_OQ); }          \
  inline M gt(vec<T> a, vec<T> b) { return _mm512_cmp_##S##_mask(a.r, b.r, _CMP_GT_OQ); }          \
  inline M ge(vec<T> a, vec<T> b) { return _mm512_cmp_##S##_mask(a.r, b.r, _CMP_GE_OQ); }          \
  inline M eq(vec<T> a, vec<T> b) { return _mm512_cmp_##S##_mask(a.r, b.r, _CMP_EQ_OQ); }          \
  /* unordered: NaN != anything is true, as for the scalar operator. */                            \
  inline M ne(vec<T> a, vec<T> b) { return _mm512_cmp_##S##_mask(a.r, b.r, _CMP_NEQ_UQ); }         \
  inline M isnan(vec<T> a) { return _mm512_cmp_##S##_mask(a.r, a.r, _CMP_UNORD_Q); }               \
  inline vec<T> select(M m, vec<T> a, vec<T> b) { return {_mm512_mask_blend_##S(m, b.r, a.r)}; }   \
  inline bool any(M m) { return m != 0; }                                                          \
  inline bool all(M m) { return m == static_cast<M>((1u << vec<T>::width) - 1); }                  \
  inline M mask_and(M a, M b) { return static_cast<M>(a & b); }                                    \
  inline M mask_or(M a, M b) { return static_cast<M>(a | b); }                                     \
  inline M mask_not(M a) { return static_cast<M>(~a); }                                            \
                                                                                                   \
  /* Merge-masking keeps `a` where it is NaN; elsewhere vminps/vmaxps already return the second    \
     operand if that is NaN. Every non-masked-off form below also passes an explicit source:       \
     the unmasked intrinsics read _mm512_undefined_*(), which gcc 12 reports as                    \
     -Wmaybe-uninitialized. */                                                                     \
  inline vec<T> min(vec<T> a, vec<T> b) {                                                          \
    return {_mm512_mask_min_##S(a.r, mask_not(isnan(a)), a.r, b.r)};                               \
  }                                                                                                \
  inline vec<T> max(vec<T> a, vec<T> b) {                                                          \
    return {_mm512_mask_max_##S(a.r, mask_not(isnan(a)), a.r, b.r)};                               \
  }                                                                                                \
  inline vec<T> abs(vec<T> a) { return {_mm512_abs_##S(a.r)}; }                                    \
  inline vec<T> sqrt(vec<T> a) { return {_mm512_mask_sqrt_##S(a.r, M(~0u), a.r)}; }                \
  inline vec<T> floor(vec<T> a) {                                                                  \
    return {                                                                                       \
        _mm512_mask_roundscale_##S(a.r, M(~0u), a.r, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC)};  \
  }                                                                                                \
  inline vec<T> ceil(vec<T> a) {                                                                   \
    return {                                                                                       \
        _mm512_mask_roundscale_##S(a.r, M(~0u), a.r, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC)};  \
  }                                                                                                \
  inline vec<T> round(vec<T> a) {                                                                  \
    return {_mm512_mask_roundscale_##S(a.r, M(~0u), a.r,                                           \
                                       _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)};            \
  }                                                                                                \
  inline vec<T> trunc(vec<T> a) {                                                                  \
    return {_mm512_mask_roundscale_##S(a.r, M(~0u), a.r, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC)}; \
  }                                                                                                \
                                                                                                   \
  /* Helpers for math.hpp (contracts in vec.hpp). vscalefps computes x * 2^floor(n)                \
     with a single rounding over the whole exponent range, overflow and underflow included, and    \
     vgetexp/vgetmant are exactly the exponent/mantissa split. */                                  \
  inline vec<T> pow2n(vec<T> n) {                                                                  \
    return {_mm512_mask_scalef_##S(n.r, M(~0u), _mm512_set1_##S(T(1)), n.r)};                      \
  }                                                                                                \
  inline vec<T> ldexp(vec<T> x, vec<T> n) {                                                        \
    return {_mm512_mask_scalef_##S(x.r, M(~0u), x.r, n.r)};                                        \
  }                                                                                                \
  inline vec<T> exponent(vec<T> x) { return {_mm512_mask_getexp_##S(x.r, M(~0u), x.r)}; }          \
  inline vec<T> mantissa(vec<T> x) {                                                               \
    return {_mm512_mask_getmant_##S(x.r, M(~0u), x.r, _MM_MANT_NORM_1_2, _MM_MANT_SIGN_zero)};     \
  }

TESSERA_DETAIL_SIMD_AVX512_OPS(float, ps, epi32, __mmask16)
TESSERA_DETAIL_SIMD_AVX512_OPS(double, pd, epi64, __mmask8)
#undef TESSERA_DETAIL_SIMD_AVX512_OPS

}  // namespace TESSERA_DETAIL_SIMD_NS
}  // namespace detail::simd
TESSERA_END_NAMESPACE

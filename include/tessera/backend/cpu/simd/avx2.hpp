// tessera/backend/cpu/simd/avx2.hpp - vec<float> and vec<double> on AVX2 + FMA (256-bit).
// Internal: included by vec.hpp only.
// Part of a kernel pass: included by isa_pass.hpp once per instruction set, no include guard.

#ifndef TESSERA_DETAIL_SIMD_NS
#error "include tessera/backend/cpu/simd/vec.hpp instead of this file"
#endif

#include <immintrin.h>

#include <cstdint>

TESSERA_BEGIN_NAMESPACE
namespace detail::simd {
inline namespace TESSERA_DETAIL_SIMD_NS {

inline constexpr const char* isa_name = "avx2";

/// Orders earlier non-temporal stores before later stores (needed before another thread may
/// read what vec::stream wrote).
inline void stream_fence() { _mm_sfence(); }

template <>
inline constexpr bool available<float> = true;
template <>
inline constexpr bool available<double> = true;

template <>
struct vec<float> {
  static constexpr int width = 8;
  using value_type = float;
  /// All-ones / all-zeros lanes, as the compare instructions produce them.
  using mask_t = __m256;
  __m256 r;

  static vec load(const float* p) { return {_mm256_loadu_ps(p)}; }
  static vec broadcast(float x) { return {_mm256_set1_ps(x)}; }
  void store(float* p) const { _mm256_storeu_ps(p, r); }
  /// Non-temporal store (bypasses the caches); p must be 32-byte aligned.
  void stream(float* p) const { _mm256_stream_ps(p, r); }
};

template <>
struct vec<double> {
  static constexpr int width = 4;
  using value_type = double;
  using mask_t = __m256d;
  __m256d r;

  static vec load(const double* p) { return {_mm256_loadu_pd(p)}; }
  static vec broadcast(double x) { return {_mm256_set1_pd(x)}; }
  void store(double* p) const { _mm256_storeu_pd(p, r); }
  void stream(double* p) const { _mm256_stream_pd(p, r); }
};

// The float and double operations differ only in the intrinsic suffix (ps / pd), so they are
// stamped out from one definition to keep the two in step.
#define TESSERA_DETAIL_SIMD_AVX2_OPS(T, S, ALLBITS)                                                \
  inline vec<T> operator+(vec<T> a, vec<T> b) { return {_mm256_add_##S(a.r, b.r)}; }               \
  inline vec<T> operator-(vec<T> a, vec<T> b) { return {_mm256_sub_##S(a.r, b.r)}; }               \
  inline vec<T> operator*(vec<T> a, vec<T> b) { return {_mm256_mul_##S(a.r, b.r)}; }               \
  inline vec<T> operator/(vec<T> a, vec<T> b) { return {_mm256_div_##S(a.r, b.r)}; }               \
  inline vec<T> operator-(vec<T> a) { return {_mm256_xor_##S(a.r, _mm256_set1_##S(T(-0.0)))}; }    \
  inline vec<T> fma(vec<T> a, vec<T> b, vec<T> c) { return {_mm256_fmadd_##S(a.r, b.r, c.r)}; }    \
                                                                                                   \
  inline vec<T>::mask_t lt(vec<T> a, vec<T> b) { return _mm256_cmp_##S(a.r, b.r, _CMP_LT_OQ); }    \
  inline vec<T>::mask_t le(vec<T> a, vec<T> b) { return _mm256_cmp_##S(a.r, b.r, _CMP_LE_OQ); }    \
  inline vec<T>::mask_t gt(vec<T> a, vec<T> b) { return _mm256_cmp_##S(a.r, b.r, _CMP_GT_OQ); }    \
  inline vec<T>::mask_t ge(vec<T> a, vec<T> b) { return _mm256_cmp_##S(a.r, b.r, _CMP_GE_OQ); }    \
  inline vec<T>::mask_t eq(vec<T> a, vec<T> b) { return _mm256_cmp_##S(a.r, b.r, _CMP_EQ_OQ); }    \
  /* unordered: NaN != anything is true, as for the scalar operator. */                            \
  inline vec<T>::mask_t ne(vec<T> a, vec<T> b) { return _mm256_cmp_##S(a.r, b.r, _CMP_NEQ_UQ); }   \
  inline vec<T>::mask_t isnan(vec<T> a) { return _mm256_cmp_##S(a.r, a.r, _CMP_UNORD_Q); }         \
  inline vec<T> select(vec<T>::mask_t m, vec<T> a, vec<T> b) {                                     \
    return {_mm256_blendv_##S(b.r, a.r, m)};                                                       \
  }                                                                                                \
  inline bool any(vec<T>::mask_t m) { return _mm256_movemask_##S(m) != 0; }                        \
  inline bool all(vec<T>::mask_t m) { return _mm256_movemask_##S(m) == (1 << vec<T>::width) - 1; } \
  inline vec<T>::mask_t mask_and(vec<T>::mask_t a, vec<T>::mask_t b) {                             \
    return _mm256_and_##S(a, b);                                                                   \
  }                                                                                                \
  inline vec<T>::mask_t mask_or(vec<T>::mask_t a, vec<T>::mask_t b) {                              \
    return _mm256_or_##S(a, b);                                                                    \
  }                                                                                                \
  inline vec<T>::mask_t mask_not(vec<T>::mask_t a) { return _mm256_xor_##S(a, ALLBITS); }          \
                                                                                                   \
  /* vminps/vmaxps return the second operand when either is NaN, so only a NaN in `a` needs the    \
     blend; the result is NaN whenever either input is. */                                         \
  inline vec<T> min(vec<T> a, vec<T> b) {                                                          \
    return select(isnan(a), a, vec<T>{_mm256_min_##S(a.r, b.r)});                                  \
  }                                                                                                \
  inline vec<T> max(vec<T> a, vec<T> b) {                                                          \
    return select(isnan(a), a, vec<T>{_mm256_max_##S(a.r, b.r)});                                  \
  }                                                                                                \
  inline vec<T> abs(vec<T> a) { return {_mm256_andnot_##S(_mm256_set1_##S(T(-0.0)), a.r)}; }       \
  inline vec<T> sqrt(vec<T> a) { return {_mm256_sqrt_##S(a.r)}; }                                  \
  inline vec<T> floor(vec<T> a) {                                                                  \
    return {_mm256_round_##S(a.r, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC)};                     \
  }                                                                                                \
  inline vec<T> ceil(vec<T> a) {                                                                   \
    return {_mm256_round_##S(a.r, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC)};                     \
  }                                                                                                \
  inline vec<T> round(vec<T> a) {                                                                  \
    return {_mm256_round_##S(a.r, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)};                 \
  }                                                                                                \
  inline vec<T> trunc(vec<T> a) {                                                                  \
    return {_mm256_round_##S(a.r, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC)};                        \
  }                                                                                                \
  /* x * 2^n for integral n, up to twice the exponent range. When every lane's 2^n is normal       \
     (exp's usual case) one multiply does it. Otherwise splitting n keeps both factors normal, so  \
     only the last multiply rounds and subnormal results are correctly rounded. */                 \
  inline vec<T> ldexp(vec<T> x, vec<T> n) {                                                        \
    constexpr T lo = sizeof(T) == 4 ? T(-126) : T(-1022), hi = sizeof(T) == 4 ? T(127) : T(1023);  \
    constexpr int all_lanes = (1 << vec<T>::width) - 1;                                            \
    const auto normal = _mm256_and_##S(_mm256_cmp_##S(n.r, _mm256_set1_##S(lo), _CMP_GE_OQ),       \
                                       _mm256_cmp_##S(n.r, _mm256_set1_##S(hi), _CMP_LE_OQ));      \
    if (_mm256_movemask_##S(normal) == all_lanes) return x * pow2n(n);                             \
    vec<T> h = floor(n * vec<T>::broadcast(T(0.5)));                                               \
    return x * pow2n(h) * pow2n(n - h);                                                            \
  }

// Helpers for math.hpp (contracts in vec.hpp), straight from the IEEE bit layout.

inline vec<float> pow2n(vec<float> n) {
  __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n.r), _mm256_set1_epi32(127));
  return {_mm256_castsi256_ps(_mm256_slli_epi32(e, 23))};
}
inline vec<float> exponent(vec<float> x) {
  __m256i e = _mm256_srli_epi32(_mm256_castps_si256(x.r), 23);
  e = _mm256_sub_epi32(_mm256_and_si256(e, _mm256_set1_epi32(0xff)), _mm256_set1_epi32(127));
  return {_mm256_cvtepi32_ps(e)};
}
inline vec<float> mantissa(vec<float> x) {
  __m256i m = _mm256_and_si256(_mm256_castps_si256(x.r), _mm256_set1_epi32(0x007fffff));
  return {_mm256_castsi256_ps(_mm256_or_si256(m, _mm256_set1_epi32(0x3f800000)))};
}

// AVX2 has no double <-> int64 conversion. Adding 2^52 to a small integer-valued double puts the
// integer in the low mantissa bits, where integer shifts can reach it.
inline vec<double> pow2n(vec<double> n) {
  __m256d t = _mm256_add_pd(n.r, _mm256_set1_pd(4503599627370496.0 + 1023.0));  // 2^52 + bias
  return {_mm256_castsi256_pd(_mm256_slli_epi64(_mm256_castpd_si256(t), 52))};
}
inline vec<double> exponent(vec<double> x) {
  __m256i e = _mm256_srli_epi64(_mm256_castpd_si256(x.r), 52);
  e = _mm256_and_si256(e, _mm256_set1_epi64x(0x7ff));
  __m256d biased =
      _mm256_sub_pd(_mm256_castsi256_pd(_mm256_or_si256(e, _mm256_set1_epi64x(0x4330000000000000))),
                    _mm256_set1_pd(4503599627370496.0));
  return {_mm256_sub_pd(biased, _mm256_set1_pd(1023.0))};
}
inline vec<double> mantissa(vec<double> x) {
  __m256i m = _mm256_and_si256(_mm256_castpd_si256(x.r), _mm256_set1_epi64x(0x000fffffffffffff));
  return {_mm256_castsi256_pd(_mm256_or_si256(m, _mm256_set1_epi64x(0x3ff0000000000000)))};
}

TESSERA_DETAIL_SIMD_AVX2_OPS(float, ps, _mm256_castsi256_ps(_mm256_set1_epi32(-1)))
TESSERA_DETAIL_SIMD_AVX2_OPS(double, pd, _mm256_castsi256_pd(_mm256_set1_epi32(-1)))
#undef TESSERA_DETAIL_SIMD_AVX2_OPS

}  // namespace TESSERA_DETAIL_SIMD_NS
}  // namespace detail::simd
TESSERA_END_NAMESPACE

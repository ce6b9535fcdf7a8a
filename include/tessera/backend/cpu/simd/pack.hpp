// tessera/backend/cpu/simd/pack.hpp - the instruction-set-specific steps of GEMM packing
// (gemm/pack.hpp): half -> float of one value (F16C), one vector of floats from half, bfloat16
// or (x86) 8-bit float values, and 8 x 8 and 6 x 8 float transposes (AVX2; defines
// TESSERA_DETAIL_HAVE_TRANSPOSE_8X8 where they exist).
// Part of a kernel pass: included by gemm/pack.hpp once per instruction set, no include guard.

#include <cstdint>
#include <type_traits>

#include "../../../core/dtype.hpp"
#include "../../../core/half.hpp"

#if defined(TESSERA_ISA_AVX2)
#include <immintrin.h>
#endif

TESSERA_BEGIN_NAMESPACE
namespace detail {

/// x as float: one F16C instruction where the pass has it.
TESSERA_ALWAYS_INLINE float half_to_float(half x) {
#if defined(TESSERA_ISA_AVX2)
  return _cvtsh_ss(x.bits);
#else
  return static_cast<float>(x);
#endif
}

#if defined(TESSERA_ISA_AVX2)
/// The 8-bit float codes in the low bytes of 32-bit lanes as float bits (x86 passes). e4m3 has
/// no table lookup here: a normal code's exponent and mantissa move into place and the exponent
/// bias changes (7 to 127); a subnormal one (exponent 0) is its mantissa times 2^-9, through an
/// integer conversion, so that DAZ does not flush it; S.1111.111 is NaN.
#define TESSERA_DETAIL_HAVE_FLOAT8_VECTOR 1
#endif

/// Loads one vector of floats from W consecutive half, bfloat16 or (x86 passes) 8-bit float
/// values: F16C for half, a 16-bit shift for bfloat16, e5m2 as the top byte of a half, e4m3 by
/// its fields (above). Only called where simd::vec<float> exists.
template <class S>
TESSERA_ALWAYS_INLINE auto load_as_float(const S* p) {
  using V = simd::vec<compute_t<S>>;  // vec<float>, named dependently: undefined in scalar builds
#if defined(TESSERA_ISA_AVX512)
  if constexpr (std::is_same_v<S, float8_e5m2>) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return V{_mm512_cvtph_ps(_mm256_slli_epi16(_mm256_cvtepu8_epi16(raw), 8))};
  } else if constexpr (std::is_same_v<S, float8_e4m3>) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m512i x = _mm512_cvtepu8_epi32(raw);
    const __m512i mag = _mm512_and_si512(x, _mm512_set1_epi32(0x7f));
    const __m512 normal = _mm512_castsi512_ps(
        _mm512_add_epi32(_mm512_slli_epi32(mag, 20), _mm512_set1_epi32(120 << 23)));
    const __m512 sub = _mm512_mul_ps(_mm512_cvtepi32_ps(mag), _mm512_set1_ps(0x1p-9f));
    __m512 v =
        _mm512_mask_blend_ps(_mm512_cmplt_epi32_mask(mag, _mm512_set1_epi32(8)), normal, sub);
    v = _mm512_mask_blend_ps(_mm512_cmpeq_epi32_mask(mag, _mm512_set1_epi32(0x7f)), v,
                             _mm512_set1_ps(__builtin_nanf("")));
    const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(x, _mm512_set1_epi32(0x80)), 24);
    return V{_mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(v), sign))};
  } else {
    const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    if constexpr (std::is_same_v<S, half>)
      return V{_mm512_cvtph_ps(raw)};
    else
      return V{_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16))};
  }
#elif defined(TESSERA_ISA_AVX2)
  if constexpr (std::is_same_v<S, float8_e5m2>) {
    const __m128i raw = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    return V{_mm256_cvtph_ps(_mm_slli_epi16(_mm_cvtepu8_epi16(raw), 8))};
  } else if constexpr (std::is_same_v<S, float8_e4m3>) {
    const __m128i raw = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    const __m256i x = _mm256_cvtepu8_epi32(raw);
    const __m256i mag = _mm256_and_si256(x, _mm256_set1_epi32(0x7f));
    const __m256 normal = _mm256_castsi256_ps(
        _mm256_add_epi32(_mm256_slli_epi32(mag, 20), _mm256_set1_epi32(120 << 23)));
    const __m256 sub = _mm256_mul_ps(_mm256_cvtepi32_ps(mag), _mm256_set1_ps(0x1p-9f));
    __m256 v = _mm256_blendv_ps(normal, sub,
                                _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(8), mag)));
    v = _mm256_blendv_ps(v, _mm256_set1_ps(__builtin_nanf("")),
                         _mm256_castsi256_ps(_mm256_cmpeq_epi32(mag, _mm256_set1_epi32(0x7f))));
    const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x80)), 24);
    return V{_mm256_castsi256_ps(_mm256_or_si256(_mm256_castps_si256(v), sign))};
  } else {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    if constexpr (std::is_same_v<S, half>)
      return V{_mm256_cvtph_ps(raw)};
    else
      return V{_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16))};
  }
#else
  alignas(64) float tmp[V::width];
  for (int i = 0; i < V::width; ++i) tmp[i] = static_cast<float>(p[i]);
  return V::load(tmp);
#endif
}

#if defined(TESSERA_ISA_AVX2)
/// The columns of an 8 x 8 float block held as 8 row vectors: col[j] = (r[0][j], ..., r[7][j]).
TESSERA_ALWAYS_INLINE void transpose_8x8_columns(const __m256 (&r)[8], __m256 (&col)[8]) {
  __m256 t[8], q[8];
  TESSERA_UNROLL(4)
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);      // k0 k1 | k4 k5 of rows i, i+1
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);  // k2 k3 | k6 k7
  }
  for (int h = 0; h < 8; h += 4) {                           // rows h..h+3
    q[h] = _mm256_shuffle_ps(t[h], t[h + 2], 0x44);          // k0 | k4
    q[h + 1] = _mm256_shuffle_ps(t[h], t[h + 2], 0xee);      // k1 | k5
    q[h + 2] = _mm256_shuffle_ps(t[h + 1], t[h + 3], 0x44);  // k2 | k6
    q[h + 3] = _mm256_shuffle_ps(t[h + 1], t[h + 3], 0xee);  // k3 | k7
  }
  TESSERA_UNROLL(4)
  for (int j = 0; j < 4; ++j) {
    col[j] = _mm256_permute2f128_ps(q[j], q[j + 4], 0x20);
    col[j + 4] = _mm256_permute2f128_ps(q[j], q[j + 4], 0x31);
  }
}

/// Transposes an 8 x 8 float block: row r of src at src + r * ld becomes column r of dst, whose
/// rows are ld_dst apart.
TESSERA_ALWAYS_INLINE void transpose_8x8(const float* src, int64_t ld, float* dst, int64_t ld_dst) {
  __m256 r[8], col[8];
  TESSERA_UNROLL(8)
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * ld);
  transpose_8x8_columns(r, col);
  TESSERA_UNROLL(8)
  for (int j = 0; j < 8; ++j) _mm256_storeu_ps(dst + j * ld_dst, col[j]);
}

/// Transposes 6 rows of 8 floats (row r at src + r * ld) into 8 contiguous groups of 6 at dst:
/// eight k steps of the AVX2 float GEMM's A micro-panel ([k][6], mr = 6), which the 8 x 8
/// transpose does not fit. Each group is stored as 4 + 2 floats: nothing past the 48 is written.
TESSERA_ALWAYS_INLINE void transpose_6x8(const float* src, int64_t ld, float* dst) {
  __m256 r[8], col[8];
  TESSERA_UNROLL(6)
  for (int i = 0; i < 6; ++i) r[i] = _mm256_loadu_ps(src + i * ld);
  r[6] = r[7] = _mm256_setzero_ps();
  transpose_8x8_columns(r, col);
  TESSERA_UNROLL(8)
  for (int j = 0; j < 8; ++j) {
    _mm_storeu_ps(dst + j * 6, _mm256_castps256_ps128(col[j]));
    _mm_storel_pi(reinterpret_cast<__m64*>(dst + j * 6 + 4), _mm256_extractf128_ps(col[j], 1));
  }
}
#define TESSERA_DETAIL_HAVE_TRANSPOSE_8X8 1
#endif

}  // namespace detail
TESSERA_END_NAMESPACE

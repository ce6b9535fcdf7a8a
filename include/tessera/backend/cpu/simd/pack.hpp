// tessera/backend/cpu/simd/pack.hpp - the instruction-set-specific steps of GEMM packing
// (gemm/pack.hpp): half -> float of one value (F16C), one vector of floats from half or
// bfloat16 values (F16C, or a 16-bit shift), and an 8 x 8 float transpose (AVX2; defines
// TESSERA_DETAIL_HAVE_TRANSPOSE_8X8 where it exists).
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

/// Loads one vector of floats from W consecutive half or bfloat16 values (vector conversion: F16C
/// for half, a 16-bit shift for bfloat16). Only called where simd::vec<float> exists.
template <class S>
TESSERA_ALWAYS_INLINE auto load_as_float(const S* p) {
  using V = simd::vec<compute_t<S>>;  // vec<float>, named dependently: undefined in scalar builds
#if defined(TESSERA_ISA_AVX512)
  const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  if constexpr (std::is_same_v<S, half>)
    return V{_mm512_cvtph_ps(raw)};
  else
    return V{_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16))};
#elif defined(TESSERA_ISA_AVX2)
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if constexpr (std::is_same_v<S, half>)
    return V{_mm256_cvtph_ps(raw)};
  else
    return V{_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16))};
#else
  alignas(64) float tmp[V::width];
  for (int i = 0; i < V::width; ++i) tmp[i] = static_cast<float>(p[i]);
  return V::load(tmp);
#endif
}

#if defined(TESSERA_ISA_AVX2)
/// Transposes an 8 x 8 float block: row r of src at src + r * ld becomes column r of dst, whose
/// rows are ld_dst apart.
TESSERA_ALWAYS_INLINE void transpose_8x8(const float* src, int64_t ld, float* dst, int64_t ld_dst) {
  __m256 r[8], t[8], q[8];
  TESSERA_UNROLL(8)
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * ld);
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
    _mm256_storeu_ps(dst + j * ld_dst, _mm256_permute2f128_ps(q[j], q[j + 4], 0x20));
    _mm256_storeu_ps(dst + (j + 4) * ld_dst, _mm256_permute2f128_ps(q[j], q[j + 4], 0x31));
  }
}
#define TESSERA_DETAIL_HAVE_TRANSPOSE_8X8 1
#endif

}  // namespace detail
TESSERA_END_NAMESPACE

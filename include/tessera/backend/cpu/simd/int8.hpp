// tessera/backend/cpu/simd/int8.hpp - the registers of the 8-bit integer GEMM micro-kernel
// (gemm/kernel_int8.hpp): int8_isa holds int32 lanes, and dot4(acc, a, b) adds to each lane the
// four products of unsigned bytes of a and signed bytes of b:
//   AVX-512 (the pass requires VNNI) and AVX-VNNI: vpdpbusd, one instruction;
//   AVX2 without VNNI: the bytes are widened to 16 bits (even and odd bytes apart) and
//   multiplied with vpmaddwd, which cannot saturate. vpmaddubsw can (two products of 255 and
//   -128 overflow its 16-bit sums), so it serves only dot4_narrow: bytes of a at most 127, or
//   bytes of b in [-64, 64], where 2 * 127 * 128 and 2 * 255 * 64 < 2^15 keep it exact. Then
//   vpmaddubsw and vpmaddwd by ones run on two ports, 32 multiply-adds per pair, about 1.6x the
//   widened form (docs/perf/bert.md).
// Elsewhere int8_isa is not defined (nor TESSERA_DETAIL_HAVE_INT8_ISA): the kernel loops in C++.
// Part of a kernel pass: included by gemm/kernel_int8.hpp once per instruction set.

#include <cstdint>
#include <cstring>

#if defined(TESSERA_ISA_AVX2)
#include <immintrin.h>
#endif

TESSERA_BEGIN_NAMESPACE
namespace detail {

#if defined(TESSERA_ISA_AVX512)
struct int8_isa {
  using reg = __m512i;
  static constexpr int lanes = 16;
  static reg zero() { return _mm512_setzero_si512(); }
  static reg load(const int8_t* p) { return _mm512_loadu_si512(p); }
  static reg broadcast4(const uint8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
  }
  static reg dot4(reg acc, reg a, reg b) { return _mm512_dpbusd_epi32(acc, a, b); }
  static void store(int32_t* p, reg v) { _mm512_storeu_si512(p, v); }
  static reg load32(const int32_t* p) { return _mm512_loadu_si512(p); }
  static reg set1(int32_t v) { return _mm512_set1_epi32(v); }
  static reg add(reg x, reg y) { return _mm512_add_epi32(x, y); }
  static reg mul(reg x, reg y) { return _mm512_mullo_epi32(x, y); }
  static reg relu(reg x) { return _mm512_max_epi32(x, _mm512_setzero_si512()); }
  /// The lanes as float (rounded to nearest), a native float register.
  static __m512 to_float(reg v) { return _mm512_cvtepi32_ps(v); }
};
#define TESSERA_DETAIL_HAVE_INT8_ISA 1
#elif defined(TESSERA_ISA_AVX2)
struct int8_isa {
  using reg = __m256i;
  static constexpr int lanes = 8;
  static reg zero() { return _mm256_setzero_si256(); }
  static reg load(const int8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const reg*>(p)); }
  static reg broadcast4(const uint8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
  }
  static reg dot4(reg acc, reg a, reg b) {
#if defined(TESSERA_ISA_AVXVNNI)
    return _mm256_dpbusd_avx_epi32(acc, a, b);
#else
    const reg lo8 = _mm256_set1_epi16(0x00ff);
    const reg a_even = _mm256_and_si256(a, lo8), a_odd = _mm256_srli_epi16(a, 8);
    const reg b_even = _mm256_srai_epi16(_mm256_slli_epi16(b, 8), 8);
    const reg b_odd = _mm256_srai_epi16(b, 8);
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(a_even, b_even));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(a_odd, b_odd));
#endif
  }
#if !defined(TESSERA_ISA_AVXVNNI)
  /// dot4 where the bytes of a are at most 127 or those of b in [-64, 64] (exact, see above).
  static reg dot4_narrow(reg acc, reg a, reg b) {
    const reg pairs = _mm256_maddubs_epi16(a, b);
    return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
  }
  /// Each byte of a minus s (wrapping).
  static reg sub_bytes(reg a, int8_t s) { return _mm256_sub_epi8(a, _mm256_set1_epi8(s)); }
#define TESSERA_DETAIL_INT8_NARROW_DOT 1
#endif
  static void store(int32_t* p, reg v) { _mm256_storeu_si256(reinterpret_cast<reg*>(p), v); }
  static reg load32(const int32_t* p) {
    return _mm256_loadu_si256(reinterpret_cast<const reg*>(p));
  }
  static reg set1(int32_t v) { return _mm256_set1_epi32(v); }
  static reg add(reg x, reg y) { return _mm256_add_epi32(x, y); }
  static reg mul(reg x, reg y) { return _mm256_mullo_epi32(x, y); }
  static reg relu(reg x) { return _mm256_max_epi32(x, _mm256_setzero_si256()); }
  /// The lanes as float (rounded to nearest), a native float register.
  static __m256 to_float(reg v) { return _mm256_cvtepi32_ps(v); }
};
#define TESSERA_DETAIL_HAVE_INT8_ISA 1
#endif

}  // namespace detail
TESSERA_END_NAMESPACE

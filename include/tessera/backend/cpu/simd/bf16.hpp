// tessera/backend/cpu/simd/bf16.hpp - the registers of the bfloat16 GEMM micro-kernel
// (gemm/kernel_bf16.hpp). Its operands are packed in pairs: one 32-bit word holds the bfloat16
// values of k and k + 1 (k in the low half). bf16_isa reads a vector of such words as the floats
// of either half (a bfloat16 is the top half of a float: a shift or a mask, exact), and on
// AVX-512, dot2 multiplies whole pairs with vdpbf16ps: acc + a.hi * b.hi + a.lo * b.lo per lane,
// twice the multiply-adds of an FMA. That instruction needs AVX512_BF16, which the avx512 pass
// does not require: the kernel calls dot2 only where cpu_has_avx512_bf16() (backend/cpu/isa.hpp).
// It is written as inline assembly so that the pass needs no compiler target beyond its own.
// AVX2 and NEON split the pairs only. In the scalar pass bf16_isa is not defined (nor
// TESSERA_DETAIL_HAVE_BF16_ISA): the kernel loops in C++.
// Part of a kernel pass: included by gemm/kernel_bf16.hpp once per instruction set.

#include <cstdint>

#if defined(TESSERA_ISA_AVX2)
#include <immintrin.h>
#elif defined(TESSERA_ISA_NEON)
#include <arm_neon.h>
#endif

TESSERA_BEGIN_NAMESPACE
namespace detail {

#if defined(TESSERA_ISA_AVX512)
struct bf16_isa {
  using V = simd::vec<float>;
  using pairs = __m512i;
  static pairs load(const uint32_t* p) { return _mm512_loadu_si512(p); }
  static pairs broadcast(const uint32_t* p) { return _mm512_set1_epi32(static_cast<int32_t>(*p)); }
  /// The bfloat16 values of k (low halves) and of k + 1 (high halves), as floats.
  static V low(pairs x) { return {_mm512_castsi512_ps(_mm512_slli_epi32(x, 16))}; }
  static V high(pairs x) {
    return {_mm512_castsi512_ps(_mm512_and_si512(x, _mm512_set1_epi32(-65536)))};
  }
  /// acc + a.hi * b.hi + a.lo * b.lo per lane (vdpbf16ps; AVX512_BF16 only).
  static V dot2(V acc, pairs a, pairs b) {
    __asm__("vdpbf16ps %2, %1, %0" : "+v"(acc.r) : "v"(a), "v"(b));
    return acc;
  }
};
#define TESSERA_DETAIL_HAVE_BF16_ISA 1
#define TESSERA_DETAIL_HAVE_BF16_DOT 1
#elif defined(TESSERA_ISA_AVX2)
struct bf16_isa {
  using V = simd::vec<float>;
  using pairs = __m256i;
  static pairs load(const uint32_t* p) {
    return _mm256_loadu_si256(reinterpret_cast<const pairs*>(p));
  }
  static V low(pairs x) { return {_mm256_castsi256_ps(_mm256_slli_epi32(x, 16))}; }
  // Two shifts rather than a mask: a mask constant would take the 16th register, and the 6 x 16
  // tile then spills.
  static V high(pairs x) {
    return {_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_srli_epi32(x, 16), 16))};
  }
};
#define TESSERA_DETAIL_HAVE_BF16_ISA 1
#elif defined(TESSERA_ISA_NEON)
struct bf16_isa {
  using V = simd::vec<float>;
  using pairs = uint32x4_t;
  static pairs load(const uint32_t* p) { return vld1q_u32(p); }
  static V low(pairs x) { return {vreinterpretq_f32_u32(vshlq_n_u32(x, 16))}; }
  static V high(pairs x) { return {vreinterpretq_f32_u32(vandq_u32(x, vdupq_n_u32(0xffff0000u)))}; }
};
#define TESSERA_DETAIL_HAVE_BF16_ISA 1
#endif

}  // namespace detail
TESSERA_END_NAMESPACE

// tessera/backend/cpu/gemm/kernel_bf16.hpp - the micro-kernels of products with bfloat16 B,
// accumulated in float. B is packed in pairs ([kc/2][NR] 32-bit words, k and k + 1 of a column
// in one word, pack_pairs in pack.hpp): half the bytes of float panels, and the layout of the
// bf16 dot-product instruction.
//   gemm_micro_bf16: A in float panels (as the float kernel packs it, exact for bfloat16 A).
//     Each k pair splits B's words into two float vectors (shifts or a mask) and runs the float
//     kernel's FMAs: float's rate, for any A type.
//   gemm_micro_bf16_dot: A in pairs too, both bfloat16; one vdpbf16ps per pair does two FMAs'
//     work. AVX-512 only, where the CPU has AVX512_BF16 (simd/bf16.hpp).
// Both round nothing: products of bfloat16 values are exact in float, so they differ from the
// float path of converted operands only in the order of the sums.
// Part of a kernel pass: included by isa_pass.hpp once per instruction set, no include guard.

#include <cstdint>
#include <cstring>

#include "../simd/bf16.hpp"
#include "epilogue.hpp"

TESSERA_BEGIN_NAMESPACE
namespace detail {

/// Whether this pass multiplies bfloat16 pairs with the dot-product instruction: the avx512 pass
/// on a CPU with AVX512_BF16.
inline bool bf16_dot_available() {
#if defined(TESSERA_DETAIL_HAVE_BF16_DOT)
  return cpu_has_avx512_bf16();
#else
  return false;
#endif
}

/// The float value of the bfloat16 in the low (hi == false) or high half of a packed pair.
TESSERA_ALWAYS_INLINE float bf16_pair_half(uint32_t pair, bool hi) {
  const uint32_t bits = hi ? pair & 0xffff0000u : pair << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

/// C tile (mr_eff <= MR rows x nr_eff columns at c) from A in float panels ([kc][MR]) and B in
/// pairs (ceil(kc / 2) words per column, ldb words from one pair of k to the next). b_ahead: each
/// pair of k also prefetches b[b_ahead] (words) from its row of B, as in gemm_micro_fp.
template <int MR>
TESSERA_NOINLINE void gemm_micro_bf16(int64_t kc, const float* __restrict a,
                                      const uint32_t* __restrict b, int64_t ldb, float* c,
                                      int64_t c_rs, int64_t c_cs, int mr_eff, int nr_eff,
                                      const gemm_epilogue<float>& ep, int64_t i0, int64_t j0,
                                      int64_t b_ahead = 0) {
  constexpr int NR = gemm_tile<float>::nr;
  (void)b_ahead;
#if defined(TESSERA_DETAIL_HAVE_BF16_ISA)
  using isa = bf16_isa;
  using V = simd::vec<float>;
  constexpr int W = V::width, NV = NR / W;
  static_assert(NR % W == 0);
  V acc[MR][NV];
  gemm_zero_acc(acc);
  // One half of a pair: B's floats of that half times A's row of that k. Each half loads B's
  // words again (from L1) rather than keep them: AVX2 has 16 registers, 12 hold the tile.
  const auto half_step = [&](const uint32_t* bk, bool hi, const float* ak) {
    V bv[NV];
    TESSERA_UNROLL(4)
    for (int j = 0; j < NV; ++j) {
      const auto words = isa::load(bk + j * W);
      bv[j] = hi ? isa::high(words) : isa::low(words);
    }
    TESSERA_UNROLL(32)
    for (int i = 0; i < MR; ++i) {
      const V av = V::broadcast(ak[i]);
      TESSERA_UNROLL(4)
      for (int j = 0; j < NV; ++j) acc[i][j] = fma(av, bv[j], acc[i][j]);
    }
  };
  const int64_t full = kc / 2;
  for (int64_t p = 0; p < full; ++p) {
    __builtin_prefetch(b + b_ahead);
    half_step(b, false, a);
    half_step(b, true, a + MR);
    a += 2 * MR;
    b += ldb;
  }
  if (kc % 2) half_step(b, false, a);  // the last k alone: its pair's high half is padding
  gemm_store_acc(acc, c, c_rs, c_cs, mr_eff, nr_eff, ep, i0, j0);
#else
  float acc[MR][NR] = {};
  for (int64_t p = 0; p < kc; ++p) {
    const uint32_t* row = b + (p / 2) * ldb;
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NR; ++j) acc[i][j] += a[i] * bf16_pair_half(row[j], p % 2 != 0);
    a += MR;
  }
  gemm_store_tile(&acc[0][0], NR, mr_eff, nr_eff, c, c_rs, c_cs, ep, i0, j0);
#endif
}

#if defined(TESSERA_DETAIL_HAVE_BF16_DOT)
/// As gemm_micro_bf16 with A in pairs too ([ceil(kc / 2)][MR] words): one dot2 per pair.
/// AVX512_BF16 only (cpu_has_avx512_bf16).
template <int MR>
TESSERA_NOINLINE void gemm_micro_bf16_dot(int64_t kc, const uint32_t* __restrict a,
                                          const uint32_t* __restrict b, int64_t ldb, float* c,
                                          int64_t c_rs, int64_t c_cs, int mr_eff, int nr_eff,
                                          const gemm_epilogue<float>& ep, int64_t i0, int64_t j0,
                                          int64_t b_ahead = 0) {
  using isa = bf16_isa;
  using V = simd::vec<float>;
  constexpr int NR = gemm_tile<float>::nr, W = V::width, NV = NR / W;
  static_assert(NR % W == 0);
  V acc[MR][NV];
  gemm_zero_acc(acc);
  const int64_t pairs = (kc + 1) / 2;  // padding halves are zero in both operands
  for (int64_t p = 0; p < pairs; ++p) {
    __builtin_prefetch(b + b_ahead);
    typename isa::pairs bp[NV];
    TESSERA_UNROLL(4)
    for (int j = 0; j < NV; ++j) bp[j] = isa::load(b + j * W);
    TESSERA_UNROLL(32)
    for (int i = 0; i < MR; ++i) {
      const auto ap = isa::broadcast(a + i);
      TESSERA_UNROLL(4)
      for (int j = 0; j < NV; ++j) acc[i][j] = isa::dot2(acc[i][j], ap, bp[j]);
    }
    a += MR;
    b += ldb;
  }
  gemm_store_acc(acc, c, c_rs, c_cs, mr_eff, nr_eff, ep, i0, j0);
}
#endif

}  // namespace detail
TESSERA_END_NAMESPACE

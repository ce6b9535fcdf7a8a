// tessera/backend/cpu/gemm/kernel_int8.hpp - the 8-bit integer micro-kernel: unsigned bytes of A
// times signed bytes of B, four k values per 32-bit lane, exact int32 accumulation. The vector
// registers and their dot4 (vpdpbusd, or widened vpmaddwd without VNNI) are in simd/int8.hpp;
// elsewhere (NEON included, for now) the kernel runs plain scalar loops.
// Part of a kernel pass: included by isa_pass.hpp once per instruction set, no include guard.

#include <cstring>

#include "../simd/int8.hpp"
#include "epilogue.hpp"

TESSERA_BEGIN_NAMESPACE
namespace detail {

/// Whether this pass has the narrow dot product (simd/int8.hpp): faster where every packed byte
/// of A, less a shift, lies in [0, 127], or every value of B in [-64, 64] (gemm_block checks
/// both while packing, and takes B's bound from the caller for panels).
#if defined(TESSERA_DETAIL_INT8_NARROW_DOT)
inline constexpr bool int8_narrow_dot = true;
#else
inline constexpr bool int8_narrow_dot = false;
#endif

#if defined(TESSERA_DETAIL_HAVE_INT8_ISA)
/// The k loop of gemm_micro_int8: out[i][j] = the sum of dot(prep(broadcast of A's row i), B's
/// vector j) over the groups of 4 k values. A function of its own, on local accumulators:
/// inlined into the kernel, GCC (at some tunings, -O3 -march=znver3 among them) and Clang (at
/// -march=native) kept an accumulator of the narrow kernel in memory, a store and a load per
/// group, and it ran at 0.7x. A call per tile (and the tile's stores to out) is small against
/// its 96 or more groups.
template <int MR, int NV, class Prep, class Dot>
TESSERA_NOINLINE void int8_k_loop(int64_t groups, const uint8_t* __restrict a,
                                  const int8_t* __restrict b, int64_t ldb, int64_t b_ahead,
                                  typename int8_isa::reg (&out)[MR][NV], Prep prep, Dot dot) {
  using isa = int8_isa;
  using reg = isa::reg;
  reg acc[MR][NV];
  TESSERA_UNROLL(32)
  for (int i = 0; i < MR; ++i) {
    TESSERA_UNROLL(4)
    for (int j = 0; j < NV; ++j) acc[i][j] = isa::zero();
  }
  for (int64_t g = 0; g < groups; ++g) {
    __builtin_prefetch(b + b_ahead);
    reg bv[NV];
    TESSERA_UNROLL(4)
    for (int j = 0; j < NV; ++j) bv[j] = isa::load(b + j * isa::lanes * 4);
    TESSERA_UNROLL(32)
    for (int i = 0; i < MR; ++i) {
      const reg av = prep(isa::broadcast4(a + i * 4));
      TESSERA_UNROLL(4)
      for (int j = 0; j < NV; ++j) acc[i][j] = dot(acc[i][j], av, bv[j]);
    }
    a += MR * 4;
    b += ldb;
  }
  TESSERA_UNROLL(32)
  for (int i = 0; i < MR; ++i) {
    TESSERA_UNROLL(4)
    for (int j = 0; j < NV; ++j) out[i][j] = acc[i][j];
  }
}
#endif

/// C tile from packed A ([kc/4][MR][4] unsigned bytes) and packed B ([kc/4][NR][4] signed
/// bytes, ldb bytes from one group of 4 k values to the next: NR * 4 as gemm_block packs it, more
/// in a weight's wider panels). row_corr[i] + col_corr[j] is added to each raw sum before the
/// epilogue: it removes the zero-point biases of the packing (pack.hpp). narrow_shift >= 0 (only
/// where int8_narrow_dot): multiply A's bytes less that shift with the narrow dot product, which
/// is exact where they all lie in [0, 127] or B's all lie in [-64, 64] (shift 0); the
/// corrections then account for the shift. b_ahead: each group of k also prefetches b[b_ahead]
/// from its row of B, as in gemm_micro_fp (0 where B is packed: its own row, in cache already).
TESSERA_NOINLINE inline void gemm_micro_int8(int64_t kc, const uint8_t* __restrict a,
                                             const int8_t* __restrict b, int64_t ldb, int32_t* c,
                                             int64_t c_rs, int64_t c_cs, int mr_eff, int nr_eff,
                                             const int32_t* row_corr, const int32_t* col_corr,
                                             const gemm_epilogue<int32_t>& ep, int64_t i0,
                                             int64_t j0, int narrow_shift = -1,
                                             int64_t b_ahead = 0) {
  constexpr int MR = gemm_tile<int32_t>::mr, NR = gemm_tile<int32_t>::nr;
  (void)narrow_shift, (void)b_ahead;
  const int64_t groups = (kc + 3) / 4;
  alignas(64) int32_t buf[MR * NR];
#if defined(TESSERA_DETAIL_HAVE_INT8_ISA)
  using isa = int8_isa;
  using reg = isa::reg;
  constexpr int NV = NR / isa::lanes;
  static_assert(NR % isa::lanes == 0);
  reg acc[MR][NV];  // set by int8_k_loop
  // The output tile is written only after the k loop: fetch its lines now, so that their
  // misses overlap the loop instead of stalling the stores (as gemm_micro_fp does).
  for (int i = 0; i < mr_eff; ++i) {
    const void* row = nullptr;
    int64_t bytes = 0;
    if (ep.dequant) {
      row = ep.dequant->out + (i0 + i) * ep.dequant->out_rs + j0;
      bytes = int64_t{nr_eff} * static_cast<int64_t>(sizeof(float));
    } else if (c_cs == 1) {
      row = c + i * c_rs;
      bytes = int64_t{nr_eff} * static_cast<int64_t>(sizeof(int32_t));
    }
    for (int64_t at = 0; at < bytes; at += 64)
      __builtin_prefetch(static_cast<const char*>(row) + at, 1);
    if (bytes > 0) __builtin_prefetch(static_cast<const char*>(row) + bytes - 1, 1);
  }
  const auto same = [](reg v) { return v; };
#if defined(TESSERA_DETAIL_INT8_NARROW_DOT)
  const auto narrow = [](reg c, reg x, reg y) { return isa::dot4_narrow(c, x, y); };
  if (narrow_shift > 0) {
    const auto shift = static_cast<int8_t>(narrow_shift);
    const auto less_shift = [shift](reg v) { return isa::sub_bytes(v, shift); };
    int8_k_loop(groups, a, b, ldb, b_ahead, acc, less_shift, narrow);
  } else if (narrow_shift == 0) {
    int8_k_loop(groups, a, b, ldb, b_ahead, acc, same, narrow);
  } else
#endif
    int8_k_loop(groups, a, b, ldb, b_ahead, acc, same,
                [](reg c, reg x, reg y) { return isa::dot4(c, x, y); });
  if (ep.dequant && mr_eff == MR && nr_eff == NR) {
    // Whole tile scaled back to float (gemm_dequant): corrections added in registers, the
    // float part on simd::vec<float>, whose lanes match the int32 registers'.
    using F = simd::vec<float>;
    static_assert(F::width == isa::lanes);
    const gemm_dequant& dq = *ep.dequant;
    TESSERA_UNROLL(32)
    for (int i = 0; i < MR; ++i) {
      const reg rowc = isa::set1(row_corr[i]);
      const F row_scale = F::broadcast(dq.row_scale[i0 + i]);
      const float* xa = dq.extra_k > 0 ? dq.extra_a + (i0 + i) * dq.extra_a_rs : nullptr;
      float* out = dq.out + (i0 + i) * dq.out_rs + j0;
      TESSERA_UNROLL(4)
      for (int j = 0; j < NV; ++j) {
        const int64_t col = j0 + j * isa::lanes;
        const reg v = isa::add(acc[i][j], isa::add(rowc, isa::load32(col_corr + j * isa::lanes)));
        // gemm_dequant::apply, then the float features' product added last.
        F y = fma(F{isa::to_float(v)}, row_scale * F::load(dq.col_scale + col),
                  dq.bias ? F::load(dq.bias + col) : F::broadcast(0.0f));
        if (dq.extra_k > 0) {
          F e = F::broadcast(0.0f);
          for (int64_t o = 0; o < dq.extra_k; ++o)
            e = fma(F::broadcast(xa[o * dq.extra_a_cs]),
                    F::load(dq.extra_b + o * dq.extra_b_rs + col), e);
          y = y + e;
        }
        y.store(out + j * isa::lanes);
      }
    }
    return;
  }
  const bool vector_bias = ep.bias_kind != gemm_bias::per_col || ep.bias_stride == 1;
  if (!ep.dequant && mr_eff == MR && nr_eff == NR && c_cs == 1 && vector_bias) {
    // Whole tile: corrections and epilogue in registers (wrapping int32 arithmetic).
    const reg alpha = isa::set1(ep.alpha), beta = isa::set1(ep.beta);
    reg colc[NV];
    TESSERA_UNROLL(4)
    for (int j = 0; j < NV; ++j) colc[j] = isa::load32(col_corr + j * isa::lanes);
    TESSERA_UNROLL(32)
    for (int i = 0; i < MR; ++i) {
      const reg rowc = isa::set1(row_corr[i]);
      TESSERA_UNROLL(4)
      for (int j = 0; j < NV; ++j) {
        int32_t* out = c + i * c_rs + j * isa::lanes;
        reg v = isa::add(acc[i][j], isa::add(rowc, colc[j]));
        if (ep.alpha != 1) v = isa::mul(v, alpha);
        if (ep.read_c)
          v = isa::add(v, ep.beta == 1 ? isa::load32(out) : isa::mul(beta, isa::load32(out)));
        if (ep.bias_kind == gemm_bias::per_row)
          v = isa::add(v, isa::set1(ep.bias[(i0 + i) * ep.bias_stride]));
        else if (ep.bias_kind == gemm_bias::per_col)
          v = isa::add(v, isa::load32(ep.bias + j0 + j * isa::lanes));
        if (ep.relu) v = isa::relu(v);
        isa::store(out, v);
      }
    }
    return;
  }
  TESSERA_UNROLL(32)
  for (int i = 0; i < MR; ++i) {
    TESSERA_UNROLL(4)
    for (int j = 0; j < NV; ++j) isa::store(buf + i * NR + j * isa::lanes, acc[i][j]);
  }
#else
  for (int t = 0; t < MR * NR; ++t) buf[t] = 0;
  for (int64_t g = 0; g < groups; ++g) {
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NR; ++j) {
        int32_t s = 0;
        for (int q = 0; q < 4; ++q) s += int32_t{a[i * 4 + q]} * int32_t{b[j * 4 + q]};
        buf[i * NR + j] =
            static_cast<int32_t>(static_cast<uint32_t>(buf[i * NR + j]) + static_cast<uint32_t>(s));
      }
    a += MR * 4;
    b += ldb;
  }
#endif
  for (int i = 0; i < mr_eff; ++i)
    for (int j = 0; j < nr_eff; ++j)
      buf[i * NR + j] = static_cast<int32_t>(static_cast<uint32_t>(buf[i * NR + j]) +
                                             static_cast<uint32_t>(row_corr[i]) +
                                             static_cast<uint32_t>(col_corr[j]));
  if (ep.dequant)
    gemm_store_dequant(buf, NR, mr_eff, nr_eff, *ep.dequant, i0, j0);
  else
    gemm_store_tile(buf, NR, mr_eff, nr_eff, c, c_rs, c_cs, ep, i0, j0);
}

}  // namespace detail
TESSERA_END_NAMESPACE

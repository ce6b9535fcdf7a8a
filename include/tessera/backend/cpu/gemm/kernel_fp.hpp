// tessera/backend/cpu/gemm/kernel_fp.hpp - the register-blocked float/double micro-kernel.
//
// Per k step: NV vector loads of B (nr = NV * width columns) and MR broadcasts of A, MR * NV
// FMAs into accumulators that stay in registers for the whole k block. One template serves every
// ISA through simd::vec<T>; the tile shape comes from gemm_tile<T> (blocking.hpp).
// Part of a kernel pass: included by isa_pass.hpp once per instruction set, no include guard.

#include <type_traits>

#include "epilogue.hpp"

TESSERA_BEGIN_NAMESPACE
namespace detail {

/// Zeroes the accumulators of a micro-tile (MR rows of NV vectors).
template <class V, int MR, int NV>
TESSERA_ALWAYS_INLINE void gemm_zero_acc(V (&acc)[MR][NV]) {
  TESSERA_UNROLL(32)
  for (int i = 0; i < MR; ++i) {
    TESSERA_UNROLL(4)
    for (int j = 0; j < NV; ++j) acc[i][j] = V::broadcast(typename V::value_type(0));
  }
}

/// Applies the epilogue to the accumulators of a micro-tile (MR rows of NV vectors) and stores
/// them at c: in registers for a whole tile with unit column stride, else through gemm_store_tile.
template <class V, int MR, int NV>
TESSERA_ALWAYS_INLINE void gemm_store_acc(const V (&acc)[MR][NV], typename V::value_type* c,
                                          int64_t c_rs, int64_t c_cs, int mr_eff, int nr_eff,
                                          const gemm_epilogue<typename V::value_type>& ep,
                                          int64_t i0, int64_t j0) {
  using T = typename V::value_type;
  constexpr int W = V::width, NR = NV * W;
  const bool vector_bias = ep.bias_kind != gemm_bias::per_col || ep.bias_stride == 1;
  if (mr_eff == MR && nr_eff == NR && c_cs == 1 && vector_bias) {
    const V alpha = V::broadcast(ep.alpha), beta = V::broadcast(ep.beta);
    TESSERA_UNROLL(32)
    for (int i = 0; i < MR; ++i) {
      TESSERA_UNROLL(4)
      for (int j = 0; j < NV; ++j) {
        T* out = c + i * c_rs + j * W;
        V v = acc[i][j] * alpha;
        if (ep.read_c) v = fma(beta, V::load(out), v);
        if (ep.bias_kind == gemm_bias::per_row)
          v = v + V::broadcast(ep.bias[(i0 + i) * ep.bias_stride]);
        else if (ep.bias_kind == gemm_bias::per_col)
          v = v + V::load(ep.bias + j0 + j * W);
        if (ep.relu) v = relu(v);
        v.store(out);
      }
    }
    return;
  }
  alignas(64) T buf[MR * NR];
  TESSERA_UNROLL(32)
  for (int i = 0; i < MR; ++i) {
    TESSERA_UNROLL(4)
    for (int j = 0; j < NV; ++j) acc[i][j].store(buf + i * NR + j * W);
  }
  gemm_store_tile(buf, NR, mr_eff, nr_eff, c, c_rs, c_cs, ep, i0, j0);
}

/// Where the micro-kernel finds A: packed ([kc][MR], compile-time offsets), or in place with
/// element (i, p) at a[i * rs + p * cs] (small problems, where packing would cost more than the
/// strided broadcasts).
struct a_in_place {
  int64_t rs, cs;
};
struct a_packed {};

/// C tile (mr_eff <= MR rows x nr_eff columns at c) from the A micro-panel a (see a_packed /
/// a_in_place) and the B micro-panel b ([kc] rows of NR values, row stride ldb: NR when packed, the
/// matrix's row stride when B is read in place). b_ahead: where B is read in place (a weight in
/// panels, or rows of B), each k step also prefetches b[b_ahead] (elements from that step's row
/// of B): b_prefetch_rows rows further down the strip, or the same row of the strip that comes
/// next (gemm_block). The hardware prefetchers do not run far enough ahead on such strips: BERT
/// at 16 tokens ran about 1.2x faster with it (docs/perf/bert.md). 0: no prefetch (packed B is in
/// cache).
inline constexpr int64_t b_prefetch_rows = 64;
template <class T, int MR, class ALayout = a_packed>
TESSERA_NOINLINE void gemm_micro_fp(int64_t kc, const T* __restrict a, const T* __restrict b,
                                    int64_t ldb, T* c, int64_t c_rs, int64_t c_cs, int mr_eff,
                                    int nr_eff, const gemm_epilogue<T>& ep, int64_t i0, int64_t j0,
                                    ALayout al = {}, int64_t b_ahead = 0) {
  constexpr bool packed = std::is_same_v<ALayout, a_packed>;
  const auto a_at = [&](int i) -> T {
    if constexpr (packed)
      return a[i];
    else
      return a[i * al.rs];
  };
  int64_t a_step = 0;
  if constexpr (packed)
    a_step = MR;
  else
    a_step = al.cs;
  constexpr int NR = gemm_tile<T>::nr;
  if constexpr (simd::available<T>) {
    using V = simd::vec<T>;
    constexpr int W = V::width, NV = NR / W;
    static_assert(NR % W == 0);
    // The C tile is needed only after the k loop: fetch its lines now, so that its cache misses
    // overlap the loop instead of stalling the stores (an mr x nr tile spans mr rows).
    if (mr_eff == MR && nr_eff == NR && c_cs == 1)
      for (int i = 0; i < MR; ++i)
        for (int j = 0; j < NR; j += 64 / static_cast<int>(sizeof(T)))
          __builtin_prefetch(c + i * c_rs + j, 1);
    V acc[MR][NV];
    gemm_zero_acc(acc);
    const auto k_loop = [&](auto prefetch) {
      for (int64_t p = 0; p < kc; ++p) {
        if constexpr (prefetch) __builtin_prefetch(b + b_ahead);
        V bv[NV];
        TESSERA_UNROLL(4)
        for (int j = 0; j < NV; ++j) bv[j] = V::load(b + j * W);
        TESSERA_UNROLL(32)
        for (int i = 0; i < MR; ++i) {
          const V av = V::broadcast(a_at(i));
          TESSERA_UNROLL(4)
          for (int j = 0; j < NV; ++j) acc[i][j] = fma(av, bv[j], acc[i][j]);
        }
        a += a_step;
        b += ldb;
      }
    };
    if (b_ahead != 0)
      k_loop(std::true_type{});
    else
      k_loop(std::false_type{});
    gemm_store_acc(acc, c, c_rs, c_cs, mr_eff, nr_eff, ep, i0, j0);
  } else {
    T acc[MR][NR] = {};
    for (int64_t p = 0; p < kc; ++p) {
      for (int i = 0; i < MR; ++i)
        for (int j = 0; j < NR; ++j) acc[i][j] += a_at(i) * b[j];
      a += a_step;
      b += ldb;
    }
    gemm_store_tile(&acc[0][0], NR, mr_eff, nr_eff, c, c_rs, c_cs, ep, i0, j0);
  }
}

}  // namespace detail
TESSERA_END_NAMESPACE

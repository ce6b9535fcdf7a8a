// tessera/backend/cuda/gemm_wgmma_tma.cuh - the wgmma matrix product fed by TMA (device code
// built for sm_90a): the same products, tiles, instructions and epilogue as the cp.async-fed
// kernel (gemm_wgmma.cuh), with the copies taken off the threads that multiply.
//
// Warp-specialised: 288 threads. Warpgroups 0 and 1 multiply (64 x 128 outputs each, as in the
// cp.async kernel); warp 8 produces: one of its threads issues, per k step, the TMA copies of the
// A and B tiles (one box each where k is contiguous, two 64-column boxes where m or n is) into
// the stage's slot, announcing their 32 KiB on the slot's `full` mbarrier. The consumers wait on
// `full`, issue their 4 wgmma, and once wgmma.wait_group says a step's group is done (one group
// stays in flight, as in the cp.async kernel) every consumer thread arrives on that slot's
// `empty` barrier (256 arrivals complete it), which the producer waits on before refilling the
// slot. Six slots (192 KiB): the copies run up to six steps ahead of the products, with no
// __syncthreads in the loop and none between the batch's matrices (the producer fills the next
// matrix's first stages while the consumers store this one's tile).
//
// TMA zero-fills what lies outside the operands, so edges need no code; split k parts are whole
// stages except the last, which ends at k (cuda_gemm_splits' granule is a multiple of a stage).
// Where it does not apply, dispatch keeps the cp.async kernel: tf32 (each thread rounds its
// copies to tf32 in shared memory there; the TMA copies bits as they are), the channels-last
// convolution's gathered B, batch offsets held in device arrays rather than strides, extents
// of 2^31 or more, or no tensor-map encoder in the driver.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "async_copy.cuh"
#include "gemm_args.cuh"
#include "gemm_choice.cuh"
#include "gemm_mma.cuh"
#include "launch.hpp"
#include "tma.cuh"
#include "wgmma.cuh"

TESSERA_BEGIN_NAMESPACE
namespace detail {

inline constexpr int cuda_wgmma_tma_consumers = 256;  // 2 warpgroups, 64 x 128 outputs each
inline constexpr int cuda_wgmma_tma_threads = cuda_wgmma_tma_consumers + 32;  // + the producer
inline constexpr int cuda_wgmma_tma_stages = 6;
/// The stages, their full and empty barriers, and room to align the stages to an atom.
inline constexpr int cuda_wgmma_tma_smem_bytes = cuda_wgmma_tma_stages * 2 * cuda_wgmma_tile_bytes +
                                                 2 * cuda_wgmma_tma_stages * 8 + cuda_wgmma_atom;

/// The tensor maps of a product's A and B (cuda_tma_operand_of), passed as a __grid_constant__
/// kernel parameter: TMA reads them where the parameters live.
struct cuda_wgmma_tma_maps {
  cuda_tma_operand a, b;
};

/// The TMA copies of one operand's stage: a 128-row box at (k, o) where k is contiguous (Col
/// false for A, true for B), else two 64-column boxes at (o, k) and (o + 64, k), 8 KiB apart
/// (cuda_wgmma_mn_major's atom columns).
template <bool KMajor>
__device__ __forceinline__ void cuda_wgmma_tma_tile(uint32_t dst, const cuda_tma_operand& op,
                                                    int64_t k, int64_t o, int64_t z, uint32_t bar) {
  const auto k32 = static_cast<int32_t>(k), o32 = static_cast<int32_t>(o),
             z32 = static_cast<int32_t>(z);
  if constexpr (KMajor) {
    cuda_tma_load(dst, op, k32, o32, z32, bar);
  } else {
    cuda_tma_load(dst, op, o32, k32, z32, bar);
    cuda_tma_load(dst + cuda_wgmma_mn_major::column_bytes, op, o32 + 64, k32, z32, bar);
  }
}

/// One 128 x 128 tile of matrix blockIdx.z per block, on wgmma with In inputs (16-bit, 8-bit
/// integers or fp8; not tf32) fed by TMA; layouts and results as cuda_gemm_wgmma's.
template <class In, class TA, class TB, bool ACol, bool BCol, class TC>
__global__ void __launch_bounds__(cuda_wgmma_tma_threads, 1)
    cuda_gemm_wgmma_tma(cuda_gemm_args<TA, TB, typename cuda_mma_op<In>::acc, TC> p, int64_t batch,
                        const __grid_constant__ cuda_wgmma_tma_maps maps) {
#if !TESSERA_CUDA_WGMMA
  (void)p, (void)batch, (void)maps;  // launched only where cuda_wgmma_built() holds
  __trap();
#else
  using Op = cuda_mma_op<In>;
  using E = typename Op::elem;
  using Acc = typename Op::acc;
  static_assert(!Op::tf32, "tf32 operands are rounded by the threads that copy them");
  static_assert(sizeof(TA) == sizeof(E) && sizeof(TB) == sizeof(E));
  static_assert(Op::size == 2 || (!ACol && BCol), "only 16-bit operands may be m/n-contiguous");
  constexpr int BK = cuda_wgmma_row_bytes / Op::size, S = cuda_wgmma_tma_stages;
  constexpr uint32_t stage_bytes = 2 * cuda_wgmma_tile_bytes;
  const uint32_t raw = cuda_smem_address(cuda_dynamic_smem());
  const uint32_t stages = raw + (cuda_wgmma_atom - raw % cuda_wgmma_atom) % cuda_wgmma_atom;
  const uint32_t bars = stages + S * stage_bytes;  // full[S], then empty[S]
  const auto full = [&](int s) { return bars + 8u * static_cast<uint32_t>(s); };
  const auto empty = [&](int s) { return bars + 8u * static_cast<uint32_t>(S + s); };
  const int t = static_cast<int>(threadIdx.x);
  if (t == 0) {
    for (int s = 0; s < S; ++s) {
      cuda_mbarrier_init(full(s), 1);  // the producer's arrival, with the copies' bytes
      cuda_mbarrier_init(empty(s), cuda_wgmma_tma_consumers);
    }
    cuda_mbarrier_init_fence();
  }
  __syncthreads();  // the only block barrier: the barriers exist before anyone uses them
  const int64_t m0 = int64_t{blockIdx.y} * cuda_wgmma_tile_rows,
                n0 = int64_t{blockIdx.x} * cuda_wgmma_tile_rows;
  const bool multiply = p.alpha != Acc(0);  // else the epilogue alone (c = beta c ...)

  if (t >= cuda_wgmma_tma_consumers) {  // the producer warp: one thread issues the copies
    if (t != cuda_wgmma_tma_consumers || !multiply) return;
    int64_t it = 0;  // k steps issued by this block, over every matrix: slot it % S
    for (int64_t z = blockIdx.z; z < batch * p.splits; z += gridDim.z) {
      const auto [zb, k0, steps] = cuda_split_of<BK>(p, z, batch);
      for (int64_t kt = 0; kt < steps; ++kt, ++it) {
        const int s = static_cast<int>(it % S);
        // Round r of slot s may start once the consumers released round r - 1 (phase r - 1).
        if (it >= S) cuda_mbarrier_wait(empty(s), static_cast<unsigned>((it / S - 1) & 1));
        cuda_mbarrier_arrive_expect_tx(full(s), stage_bytes);
        const uint32_t as = stages + static_cast<uint32_t>(s) * stage_bytes;
        const int64_t k = k0 + kt * BK;
        cuda_wgmma_tma_tile<!ACol>(as, maps.a, k, m0, zb, full(s));
        cuda_wgmma_tma_tile<BCol>(as + cuda_wgmma_tile_bytes, maps.b, k, n0, zb, full(s));
      }
    }
    return;
  }

  // The consumers.
  const int wg = t / 128, l = t % 128;
  // A warpgroup whose 64 rows lie past the product issues no wgmma (as in cuda_gemm_wgmma) but
  // still waits for and releases every stage.
  const bool rows_inside = m0 + 64 * wg < p.m;
  int64_t it = 0;
  for (int64_t z = blockIdx.z; z < batch * p.splits; z += gridDim.z) {
    const auto [zb, k0, steps] = cuda_split_of<BK>(p, z, batch);
    (void)k0;
    Acc acc[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = Acc(0);
    if (multiply) {
      for (int64_t kt = 0; kt < steps; ++kt, ++it) {
        const int s = static_cast<int>(it % S);
        cuda_mbarrier_wait(full(s), static_cast<unsigned>((it / S) & 1));
        // After it the previous step's group is done: that slot may be refilled.
        if (rows_inside)
          cuda_wgmma_stage<In, ACol, BCol>(acc, stages + static_cast<uint32_t>(s) * stage_bytes,
                                           wg);
        if (kt > 0) cuda_mbarrier_arrive(empty(static_cast<int>((it - 1) % S)));
      }
      cuda_wgmma_wait<0>();  // the accumulators are complete, the last slot read
      if (steps > 0) cuda_mbarrier_arrive(empty(static_cast<int>((it - 1) % S)));
    }
    const auto [a, b, c] = cuda_batch_matrix_at<E, E>(p, zb);
    (void)a, (void)b;
    cuda_wgmma_store_tile(p, c, cuda_gemm_part_of(p, z), m0, n0, wg, l, acc);
  }
#endif
}

/// Launches cuda_gemm_wgmma_tma for one layout pair when it applies (see the file comment):
/// the operands' tensor maps encoded, counted both in cuda_wgmma_tma_choice() and as a wgmma
/// launch; false, launching nothing, otherwise (switched off, no encoder, an operand the
/// driver refuses, the shared memory refused): the caller then runs the cp.async kernel.
template <class In, bool ACol, bool BCol, class TA, class TB, class TC>
bool cuda_gemm_wgmma_tma_launch(dim3 grid,
                                const cuda_gemm_args<TA, TB, typename cuda_mma_op<In>::acc, TC>& p,
                                int64_t batch) {
  if constexpr (cuda_mma_op<In>::tf32) {
    (void)grid, (void)p, (void)batch;
    return false;
  } else {
    constexpr int64_t limit = int64_t{1} << 31;  // TMA coordinates are signed 32-bit
    if (!cuda_wgmma_tma_choice().enabled.load(std::memory_order_relaxed) || p.a_off || p.b_off ||
        p.m >= limit || p.n >= limit || p.k >= limit || batch >= limit)
      return false;
    constexpr int bytes = cuda_mma_op<In>::size;
    constexpr auto rows_of = [](bool k_major) { return k_major ? cuda_wgmma_tile_rows : 64; };
    cuda_wgmma_tma_maps maps;
    const bool encoded = (ACol ? cuda_tma_operand_of(maps.a, p.a, bytes, p.m, p.k, p.a_cs, batch,
                                                     p.a_bs, rows_of(false))
                               : cuda_tma_operand_of(maps.a, p.a, bytes, p.k, p.m, p.a_rs, batch,
                                                     p.a_bs, rows_of(true))) &&
                         (BCol ? cuda_tma_operand_of(maps.b, p.b, bytes, p.k, p.n, p.b_cs, batch,
                                                     p.b_bs, rows_of(true))
                               : cuda_tma_operand_of(maps.b, p.b, bytes, p.n, p.k, p.b_rs, batch,
                                                     p.b_bs, rows_of(false)));
    if (!encoded || !cuda_try_launch_smem<cuda_gemm_wgmma_tma<In, TA, TB, ACol, BCol, TC>,
                                          cuda_wgmma_tma_smem_bytes>(
                        cuda_wgmma_tma_choice(), "cuda_gemm_wgmma_tma", grid,
                        dim3(cuda_wgmma_tma_threads), p, batch, maps))
      return false;
    cuda_gemm_choice(cuda_gemm_pipeline::wgmma).launches.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
}

}  // namespace detail
TESSERA_END_NAMESPACE

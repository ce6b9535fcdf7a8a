// tessera/backend/cuda/gemm_wgmma_tma.cuh - the wgmma matrix product fed by TMA (device code
// built for sm_90a): the same products, tiles, instructions and epilogue as the cp.async-fed
// kernel (gemm_wgmma.cuh), with the copies taken off the threads that multiply.
//
// Warp-specialised: 384 threads. Warpgroups 0 and 1 multiply, each 64 rows of the block's tile
// of 128 x 128 or 128 x 256 (one or two m64n128 accumulator sets per thread); warpgroup 2
// produces: it gives most of its registers to the consumers (setmaxnreg: 40 for it, 232 for
// them; ptxas still fits the wide tile's 128 accumulators per thread in the 168 registers of
// a 384-thread block, with nothing to spare), and one of its
// threads issues, per k step, the TMA copies of the A and B tiles (one box each where k is
// contiguous, 64-column boxes where m or n is) into the step's slot, announcing their bytes on
// the slot's `full` mbarrier. The consumers wait on `full`, issue their wgmma, and once
// wgmma.wait_group says a step's group is done (one group stays in flight, as in the cp.async
// kernel) every consumer thread arrives on that slot's `empty` barrier (256 arrivals complete
// it), which the producer waits on before refilling the slot. 192 KiB of slots: six of 32 KiB
// for narrow tiles, four of 48 KiB for wide ones; the copies run that many steps ahead of the
// products, with no __syncthreads in the loop and none between the batch's matrices (the
// producer fills the next matrix's first slots while the consumers store this one's tile).
// Wide tiles (cuda_wgmma_tma_wide) where n spans more than 128 columns and they alone give every
// SM a block: each A tile then serves 256 columns.
//
// TMA zero-fills what lies outside the operands, so edges need no code; split k parts are whole
// stages except the last, which ends at k (cuda_gemm_splits' granule is a multiple of a stage).
// tf32: TMA copies float bits as they are, and the instruction would truncate them; tessera
// rounds (to nearest, ties away, as the cp.async kernels' threads round what they copy) in the
// k-contiguous copies it makes of both operands first (cuda_gemm_k_major), and this kernel takes
// only operands so rounded (tf32_rounded). Rounding each slot in shared memory instead, by the
// producer warpgroup's idle warps, cost a read and a write of every slot on the path between
// TMA and wgmma: 0.29 of cuBLAS's speed at 8192^3 on an H200 (docs/perf/cuda_gemm.md).
// Where it does not apply, dispatch keeps the cp.async kernel: the channels-last convolution's
// gathered B, batch offsets held in device arrays rather than strides, extents
// of 2^31 or more, or no tensor-map encoder in the driver.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

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
// + the producer warpgroup: a whole one, so that setmaxnreg can move its registers to the
// consumers (a 9-warp block would leave the consumers 168 registers: 3 warps on some of the
// SM's 4 quarters of 16 K registers).
inline constexpr int cuda_wgmma_tma_threads = cuda_wgmma_tma_consumers + 128;
inline constexpr int cuda_wgmma_tma_producer_regs = 40, cuda_wgmma_tma_consumer_regs = 232;
static_assert(cuda_wgmma_tma_producer_regs * 128 + cuda_wgmma_tma_consumer_regs * 256 <= 65536);
/// Slots for tiles BN columns wide (128 or 256): 6 of 32 KiB, or 4 of 48 KiB.
template <int BN>
inline constexpr int cuda_wgmma_tma_stages = BN == 256 ? 4 : 6;
/// The bytes of one slot: A's tile (128 rows) and B's (BN columns), 128 bytes of k each.
template <int BN>
inline constexpr int cuda_wgmma_tma_slot_bytes = (cuda_wgmma_tile_rows + BN) * cuda_wgmma_row_bytes;
/// The slots, their full and empty barriers, and room to align the slots to an atom.
template <int BN>
inline constexpr int cuda_wgmma_tma_smem_bytes =
    cuda_wgmma_tma_stages<BN>*(cuda_wgmma_tma_slot_bytes<BN> + 16) + cuda_wgmma_atom;

/// The tensor maps of a product's A and B (cuda_tma_operand_of), passed as a __grid_constant__
/// kernel parameter: TMA reads them where the parameters live.
struct cuda_wgmma_tma_maps {
  cuda_tma_operand a, b;
  int32_t group_rows;  // of the tile order (cuda_grouped_tile)
};

/// The output tile of a block, its row and column among the grid's tiles.
struct cuda_tile_at {
  int64_t m, n;
};
/// Block (x, y)'s tile in a grid of gx x gy tiles, in grouped order: blocks start in order of
/// their linear index (x fastest), and group_rows rows of tiles go column by column,
/// so the blocks in flight at once share a few A row tiles and a few B column tiles, which stay
/// in L2, rather than one A row tile and all of B (at 8192, B alone is 128 MiB of bf16 against
/// 50 MiB of L2). A bijection of the grid's tiles (the last group may have fewer rows); with
/// group_rows 1, the linear order.
__host__ __device__ __forceinline__ cuda_tile_at cuda_grouped_tile(int64_t gx, int64_t gy,
                                                                   int64_t x, int64_t y,
                                                                   int64_t group_rows) {
  const int64_t id = y * gx + x, per_group = group_rows * gx;
  const int64_t first = id / per_group * group_rows;
  const int64_t rows = gy - first < group_rows ? gy - first : group_rows;
  const int64_t in_group = id % per_group;
  return {first + in_group % rows, in_group / rows};
}

/// The TMA copies of one operand's stage of Rows rows (of A) or columns (of B): one box of Rows
/// rows at (k, o) where k is contiguous, else Rows / 64 boxes of 64 columns at (o + 64 i, k),
/// 8 KiB apart (cuda_wgmma_mn_major's atom columns).
template <bool KMajor, int Rows>
__device__ __forceinline__ void cuda_wgmma_tma_tile(uint32_t dst, const cuda_tma_operand& op,
                                                    int64_t k, int64_t o, int64_t z, uint32_t bar) {
  const auto k32 = static_cast<int32_t>(k), o32 = static_cast<int32_t>(o),
             z32 = static_cast<int32_t>(z);
  if constexpr (KMajor) {
    cuda_tma_load(dst, op, k32, o32, z32, bar);
  } else {
#pragma unroll
    for (int i = 0; i < Rows / 64; ++i)
      cuda_tma_load(dst + static_cast<uint32_t>(i) * cuda_wgmma_mn_major::column_bytes, op,
                    o32 + 64 * i, k32, z32, bar);
  }
}

/// One 128 x BN tile (BN 128 or 256) of matrix blockIdx.z per block, on wgmma with In inputs
/// (16-bit, tf32, 8-bit integers or fp8) fed by TMA; layouts and results as cuda_gemm_wgmma's
/// (each output's sums in the same order whatever BN).
template <class In, class TA, class TB, bool ACol, bool BCol, class TC, int BN>
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
  static_assert(sizeof(TA) == sizeof(E) && sizeof(TB) == sizeof(E));
  static_assert(Op::size == 2 || (!ACol && BCol), "only 16-bit operands may be m/n-contiguous");
  static_assert(BN == 128 || BN == 256);
  constexpr int BK = cuda_wgmma_row_bytes / Op::size, S = cuda_wgmma_tma_stages<BN>;
  constexpr int NT = BN / 128;  // 128-column tiles per warpgroup
  constexpr uint32_t stage_bytes = cuda_wgmma_tma_slot_bytes<BN>;
  const uint32_t raw = cuda_smem_address(cuda_dynamic_smem());
  const uint32_t stages = raw + (cuda_wgmma_atom - raw % cuda_wgmma_atom) % cuda_wgmma_atom;
  const uint32_t bars = stages + S * stage_bytes;  // full[S], empty[S]
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
  // The block's tile origin (row, column), found where needed rather than held in registers
  // through the k loop: the wide tile's accumulators leave no room for them.
  const auto origin = [&] {
    const cuda_tile_at tile =
        cuda_grouped_tile(gridDim.x, gridDim.y, blockIdx.x, blockIdx.y, maps.group_rows);
    return cuda_tile_at{tile.m * cuda_wgmma_tile_rows, tile.n * BN};
  };
  const bool multiply = p.alpha != Acc(0);  // else the epilogue alone (c = beta c ...)

  if (t >= cuda_wgmma_tma_consumers) {  // the producer warpgroup: one thread issues the copies
    cuda_setmaxnreg<false, cuda_wgmma_tma_producer_regs>();
    if (!multiply) return;
    if (t != cuda_wgmma_tma_consumers) return;
    const auto [m0, n0] = origin();
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
        cuda_wgmma_tma_tile<!ACol, cuda_wgmma_tile_rows>(as, maps.a, k, m0, zb, full(s));
        cuda_wgmma_tma_tile<BCol, BN>(as + cuda_wgmma_tile_bytes, maps.b, k, n0, zb, full(s));
      }
    }
    return;
  }

  // The consumers.
  cuda_setmaxnreg<true, cuda_wgmma_tma_consumer_regs>();
  const int wg = t / 128, l = t % 128;
  // A warpgroup whose 64 rows lie past the product issues no wgmma (as in cuda_gemm_wgmma) but
  // still waits for and releases every stage.
  const bool rows_inside = origin().m + 64 * wg < p.m;
  int64_t it = 0;
  for (int64_t z = blockIdx.z; z < batch * p.splits; z += gridDim.z) {
    const auto [zb, k0, steps] = cuda_split_of<BK>(p, z, batch);
    (void)k0;
    constexpr bool promote = cuda_wgmma_promotes<In>;
    static_assert(!promote || NT == 1, "promoted sums of wide tiles would not fit in registers");
    Acc acc[NT][64];
    Acc sum[NT][promote ? 64 : 1];  // the promoted sums (fp8)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int i = 0; i < 64; ++i) acc[nt][i] = Acc(0);
#pragma unroll
      for (int i = 0; i < (promote ? 64 : 1); ++i) sum[nt][i] = Acc(0);
    }
    if (multiply) {
      for (int64_t kt = 0; kt < steps; ++kt, ++it) {
        const int s = static_cast<int>(it % S);
        cuda_mbarrier_wait(full(s), static_cast<unsigned>((it / S) & 1));
        // After it the previous step's group is done: that slot may be refilled.
        if (rows_inside) {
          const uint32_t as = stages + static_cast<uint32_t>(s) * stage_bytes;
          if constexpr (promote)
            cuda_wgmma_stage_promoted<In, ACol, BCol>(acc, sum, as, as + cuda_wgmma_tile_bytes, wg);
          else
            cuda_wgmma_stage<In, ACol, BCol>(acc, as, as + cuda_wgmma_tile_bytes, wg);
        }
        if (kt > 0) cuda_mbarrier_arrive(empty(static_cast<int>((it - 1) % S)));
      }
      cuda_wgmma_wait<0>();  // the accumulators are complete, the last slot read
      if (steps > 0) cuda_mbarrier_arrive(empty(static_cast<int>((it - 1) % S)));
    }
    const auto [a, b, c] = cuda_batch_matrix_at<E, E>(p, zb);
    (void)a, (void)b;
    Acc* const part = cuda_gemm_part_of(p, z);
    const auto [m0, n0] = origin();
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      if constexpr (promote)
        cuda_wgmma_store_tile(p, c, part, m0, n0 + 128 * nt, wg, l, sum[nt]);
      else
        cuda_wgmma_store_tile(p, c, part, m0, n0 + 128 * nt, wg, l, acc[nt]);
    }
  }
#endif
}

/// The rows of tiles per group of the TMA kernel's tile order (cuda_grouped_tile): 8; 1 gives the
/// linear order (benchmarks compare the two).
inline int32_t& cuda_tile_group_rows() {
  static int32_t rows = 8;
  return rows;
}

/// How many wide tiles a product needs for them: 0 (the default) means one per SM; tests set 1
/// to give wide tiles to every product they may take.
inline int64_t& cuda_wgmma_tma_wide_min_tiles() {
  static int64_t tiles = 0;
  return tiles;
}

/// Whether a product is given 128 x 256 tiles rather than 128 x 128 (cuda_wgmma_tma_wide_choice
/// allowing): where n spans more than one 128-column tile and the wide tiles alone still give
/// every SM a block (fewer blocks than SMs would leave tensor cores idle, and then k is split
/// over the narrow ones instead: no split product is widened). Wider tiles read each A tile once
/// for 256 columns: a quarter less traffic into shared memory per product.
template <class TA, class TB, class Acc, class TC>
bool cuda_wgmma_tma_wide(const cuda_gemm_args<TA, TB, Acc, TC>& p, int64_t batch) {
  if (!cuda_wgmma_tma_wide_choice().enabled.load(std::memory_order_relaxed) || p.splits != 1 ||
      p.n <= 128)
    return false;
  const int64_t tiles = (p.m + 127) / 128 * ((p.n + 255) / 256) * batch;
  const int64_t min_tiles = cuda_wgmma_tma_wide_min_tiles();
  return tiles >= (min_tiles > 0 ? min_tiles : int64_t{cuda_sm_count()});
}

/// Launches cuda_gemm_wgmma_tma for one layout pair when it applies (see the file comment), 128
/// x 256 tiles where cuda_wgmma_tma_wide says so (grid.x then covers n in 256s), else 128 x 128
/// (grid as given): the operands' tensor maps encoded, the launch counted in
/// cuda_wgmma_tma_choice(), as a wgmma launch, and when wide in cuda_wgmma_tma_wide_choice();
/// false, launching nothing, otherwise (switched off, no encoder, an operand the driver
/// refuses, the shared memory refused): the caller then runs the cp.async kernel.
template <class In, bool ACol, bool BCol, class TA, class TB, class TC>
bool cuda_gemm_wgmma_tma_launch(dim3 grid,
                                const cuda_gemm_args<TA, TB, typename cuda_mma_op<In>::acc, TC>& p,
                                int64_t batch) {
  constexpr int64_t limit = int64_t{1} << 31;  // TMA coordinates are signed 32-bit
  if (!cuda_wgmma_tma_choice().enabled.load(std::memory_order_relaxed) || p.a_off || p.b_off ||
      p.m >= limit || p.n >= limit || p.k >= limit || batch >= limit ||
      (cuda_mma_op<In>::tf32 && !p.tf32_rounded))
    return false;
  const bool wide = !cuda_wgmma_promotes<In> && cuda_wgmma_tma_wide(p, batch);
  constexpr int bytes = cuda_mma_op<In>::size;
  const uint32_t b_rows = wide ? 256 : 128;  // B's k-major box: the tile's columns
  cuda_wgmma_tma_maps maps;
  maps.group_rows = cuda_tile_group_rows();
  const bool encoded =
      (ACol
           ? cuda_tma_operand_of(maps.a, p.a, bytes, p.m, p.k, p.a_cs, batch, p.a_bs, cuda_wgmma_bk)
           : cuda_tma_operand_of(maps.a, p.a, bytes, p.k, p.m, p.a_rs, batch, p.a_bs,
                                 cuda_wgmma_tile_rows)) &&
      (BCol ? cuda_tma_operand_of(maps.b, p.b, bytes, p.k, p.n, p.b_cs, batch, p.b_bs, b_rows)
            : cuda_tma_operand_of(maps.b, p.b, bytes, p.n, p.k, p.b_rs, batch, p.b_bs,
                                  cuda_wgmma_bk));
  if (!encoded) return false;
  const auto launch = [&](auto bn, cuda_kernel_choice& choice, dim3 g) {
    constexpr int BN = decltype(bn)::value;
    return cuda_try_launch_smem<cuda_gemm_wgmma_tma<In, TA, TB, ACol, BCol, TC, BN>,
                                cuda_wgmma_tma_smem_bytes<BN>>(
        choice, "cuda_gemm_wgmma_tma", g, dim3(cuda_wgmma_tma_threads), p, batch, maps);
  };
  if constexpr (cuda_wgmma_promotes<In>) {  // narrow tiles only (their sums fit in registers)
    if (!launch(std::integral_constant<int, 128>{}, cuda_wgmma_tma_choice(), grid)) return false;
  } else if (wide) {
    const dim3 g(static_cast<unsigned>((p.n + 255) / 256), grid.y, grid.z);
    if (!launch(std::integral_constant<int, 256>{}, cuda_wgmma_tma_wide_choice(), g)) return false;
    cuda_wgmma_tma_choice().launches.fetch_add(1, std::memory_order_relaxed);
  } else if (!launch(std::integral_constant<int, 128>{}, cuda_wgmma_tma_choice(), grid)) {
    return false;
  }
  cuda_gemm_choice(cuda_gemm_pipeline::wgmma).launches.fetch_add(1, std::memory_order_relaxed);
  return true;
}

}  // namespace detail
TESSERA_END_NAMESPACE

// tessera/backend/cuda/gemm_wgmma.cuh - the tensor-core matrix product on Hopper's warpgroup
// instructions (wgmma.mma_async, device code built for sm_90a), for the inputs the mma.sync
// kernel takes (cuda_mma_op): half x half and bfloat16 x bfloat16 row- or column-major; tf32
// (float under set_float32_matmul_precision(high)), int8 x int8, uint8 x uint8 and fp8 x fp8 of
// one format with k contiguous in both operands (A row-major, B column-major; the dispatch
// packs those operands so where they are not, cuda_gemm_k_major); 16-byte aligned
// rows. Where it is built and the device runs it (cuda_wgmma_built), the dispatch gives those
// products to it before the mma.sync kernel. On sm_90 this is the only native fp8 path: the
// mma.sync fp8 form is emulated there by the compiler.
//
// The kernel: 128 x 128 output tiles, 256 threads = 2 warpgroups of 64 x 128 outputs (64 float
// or int32 accumulators per thread); k in stages of 128 bytes (64 16-bit elements, 32 tf32, 128
// bytes) through the same cp.async pipeline as the other pipelined kernels
// (cuda_pipelined_k_loop: one barrier per step, partial edge chunks zeroed; five slots). What
// differs from the mma.sync kernel:
//  - No fragments in registers: each warpgroup issues 4 wgmma m64n128 per stage (32 bytes of k
//    each: k16, k8 for tf32, k32 for 8-bit inputs), whose operands the tensor cores read from
//    shared memory through descriptors. The tiles must be in a canonical layout: here the
//    128-byte swizzled ones, in which a 128-byte row of 8 chunks is stored with chunk c at c ^
//    (row % 8) within 1024-byte atoms of 8 rows (the hardware applies the XOR to address bits
//    4-6 from bits 7-9, so atoms must be 1024-byte aligned). Counted in bytes, the k-contiguous
//    tile and its descriptors are the same for every input type. 16-bit operands may also be m /
//    n-contiguous, a canonical layout the instruction reads with its transpose bit, so no 16-bit
//    operand is packed; the ISA has the transpose for 16-bit inputs only.
//  - The cp.async copies are writes of the generic proxy and wgmma reads through the async
//    proxy: each thread fences (fence.proxy.async) after its wait (and, for tf32, after rounding
//    what it copied) and before the barrier.
//  - One group of wgmma stays in flight: each warpgroup waits (wait_group 1) only for the
//    previous step's group after issuing this step's, so the tensor cores have the next stage's
//    products queued while a warpgroup reaches the barrier. That slot is rewritten two steps
//    later, not one (cuda_pipelined_k_loop's Lag = 1), so with five slots the copies still run
//    three steps ahead (161 KiB of shared memory).
// The TMA-fed, warp-specialised variant (gemm_wgmma_tma.cuh) takes the products it can (not
// the channels-last gather, not batch offsets held in device arrays); this kernel the rest. Not
// yet: clusters (multicast).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <type_traits>

#include "async_copy.cuh"
#include "error.hpp"
#include "gemm_args.cuh"
#include "gemm_choice.cuh"
#include "gemm_mma.cuh"
#include "gemm_tc.cuh"
#include "gemm_wgmma_tma.cuh"
#include "launch.hpp"
#include "memory.hpp"
#include "wgmma.cuh"

TESSERA_BEGIN_NAMESPACE
namespace detail {

inline constexpr int cuda_wgmma_threads = 256;  // 2 warpgroups, 64 x 128 outputs each
inline constexpr int cuda_wgmma_stages = 5;     // copies 3 steps ahead, 1 product in flight
/// The stages, and room to align them to an atom.
inline constexpr int cuda_wgmma_smem_bytes =
    cuda_wgmma_stages * 2 * cuda_wgmma_tile_bytes + cuda_wgmma_atom;

/// One 128 x 128 tile of matrix blockIdx.z per block on wgmma with In inputs (cuda_mma_op's
/// types; TA, TB of In's size): A row-major (a_cs == 1) or column-major (ACol), B likewise (only
/// 16-bit inputs may be m- or n-contiguous: the others need A row-major and B column-major),
/// rows and batch matrices 16-byte aligned (cuda_tc_async_fits). Results as cuda_gemm_mma's:
/// float sums up to the order of additions within one instruction's k, exact (wrapping) int32
/// sums for 8-bit integers; tf32 inputs rounded to nearest, ties away, in shared memory. With
/// Gather, B is a channels-last convolution input (cuda_copy_pipelined_step).
template <class In, class TA, class TB, bool ACol, bool BCol, class TC, bool Gather = false>
__global__ void __launch_bounds__(cuda_wgmma_threads, 1)
    cuda_gemm_wgmma(cuda_gemm_args<TA, TB, typename cuda_mma_op<In>::acc, TC> p, int64_t batch) {
#if !TESSERA_CUDA_WGMMA
  (void)p, (void)batch;  // launched only where cuda_wgmma_built() holds
  __trap();
#else
  using Op = cuda_mma_op<In>;
  using E = typename Op::elem;
  using Acc = typename Op::acc;
  constexpr int V = Op::v;
  static_assert(sizeof(TA) == sizeof(E) && sizeof(TB) == sizeof(E));
  static_assert(Op::size == 2 || (!ACol && BCol), "only 16-bit operands may be m/n-contiguous");
  static_assert(cuda_tc_bm == cuda_wgmma_tile_rows && cuda_tc_bn == cuda_wgmma_tile_rows);
  using ATile = std::conditional_t<ACol, cuda_wgmma_mn_major, cuda_wgmma_k_major<V> >;
  using BTile = std::conditional_t<BCol, cuda_wgmma_k_major<V>, cuda_wgmma_mn_major>;
  constexpr int BM = cuda_tc_bm, BN = cuda_tc_bn, BK = cuda_wgmma_row_bytes / Op::size;
  constexpr int S = cuda_wgmma_stages, T = cuda_wgmma_threads;
  constexpr int tile = cuda_wgmma_tile_bytes / Op::size;  // elements
  unsigned char* const raw = cuda_dynamic_smem();
  const uint32_t raw_address = cuda_smem_address(raw);
  const uint32_t pad = (cuda_wgmma_atom - raw_address % cuda_wgmma_atom) % cuda_wgmma_atom;
  E* const smem = reinterpret_cast<E*>(raw + pad);  // atom-aligned stages
  const uint32_t smem_address = raw_address + pad;
  const int wg = static_cast<int>(threadIdx.x) / 128, l = static_cast<int>(threadIdx.x) % 128;
  const auto [m0, n0, lda, ldb] = cuda_pipelined_block_of<BM, BN, ACol, BCol>(p);
  // A warpgroup whose 64 rows lie past the product (m <= 64, or the last row tile) issues no
  // wgmma: the other has the SM's tensor cores to itself (a convolution with 64 output channels
  // is such a product at every tile). It still copies and meets every barrier.
  const bool rows_inside = m0 + 64 * wg < p.m;
  for (int64_t z = blockIdx.z; z < batch * p.splits; z += gridDim.z) {
    const auto [zb, k0, steps] = cuda_split_of<BK>(p, z, batch);
    const auto [a, b, c] = cuda_batch_matrix_at<E, E>(p, zb);
    const auto a_at = [](int o, int i) { return ATile::at(o, i); };
    const auto b_at = [](int o, int i) { return BTile::at(o, i); };
    const auto slot = [&](int64_t kt) { return static_cast<int>(kt % S) * 2 * tile; };  // A, B
    constexpr bool promote = cuda_wgmma_promotes<In>;
    Acc acc[1][64];                // one 128-column tile (cuda_wgmma_stage)
    Acc sum[1][promote ? 64 : 1];  // the promoted sums (fp8)
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[0][i] = Acc(0);
#pragma unroll
    for (int i = 0; i < (promote ? 64 : 1); ++i) sum[0][i] = Acc(0);

    if (p.alpha != Acc(0))
      cuda_pipelined_k_loop<S, 1>(  // one group of wgmma left in flight per warpgroup
          steps,
          [&](int64_t kt) {
            E* const as = smem + slot(kt);
            cuda_copy_pipelined_step<BM, BN, BK, T, ACol, BCol, Gather>(
                as, a_at, as + tile, b_at, a, lda, b, ldb, p, m0, n0, k0 + kt * BK);
          },
          [&](int64_t kt) {
            if constexpr (Op::tf32) {  // each thread rounds what it copied (k-major tiles)
              cuda_round_tf32_copies<BM, BK, T>(smem + slot(kt), a_at);
              cuda_round_tf32_copies<BN, BK, T>(smem + slot(kt) + tile, b_at);
            }
            cuda_fence_proxy_async();  // this thread's copies and stores, to wgmma's proxy
          },
          [&](int64_t kt) {
            // After it step kt - 1's group is done: its slot may be rewritten once every
            // warpgroup has passed the next barrier. Step kt's reads its slot while the next
            // step's copies land.
            const uint32_t as = smem_address + static_cast<uint32_t>(slot(kt) * Op::size);
            if (!rows_inside) return;
            if constexpr (promote)
              cuda_wgmma_stage_promoted<In, ACol, BCol>(acc, sum, as, as + cuda_wgmma_tile_bytes,
                                                        wg);
            else
              cuda_wgmma_stage<In, ACol, BCol>(acc, as, as + cuda_wgmma_tile_bytes, wg);
          });
    cuda_wgmma_wait<0>();                       // the accumulators are complete
    Acc* const part = cuda_gemm_part_of(p, z);  // split k: raw sums, else null
    if constexpr (promote)
      cuda_wgmma_store_tile(p, c, part, m0, n0, wg, l, sum[0]);
    else
      cuda_wgmma_store_tile(p, c, part, m0, n0, wg, l, acc[0]);
    __syncthreads();  // every warpgroup is done with the stages before the next matrix's copies
  }
#endif
}

/// Writes whether this device code has wgmma. A template only so that the header may define it
/// in every translation unit.
template <int = 0>
__global__ void cuda_wgmma_probe(int* built) {
  *built = TESSERA_CUDA_WGMMA;
}

/// Whether the code that runs on the current device has wgmma (built for sm_90a, the device an
/// sm_90 one). Asked of the device once per process (like the other kernel choices) by a
/// one-thread kernel: cudaFuncGetAttributes reports 90 for sm_90 and sm_90a code alike.
inline bool cuda_wgmma_built() {
  static const bool built = [] {
    cuda_scratch flag(sizeof(int));
    int* const f = static_cast<int*>(flag.get());
    cuda_launch("cuda_wgmma_probe", cuda_wgmma_probe<>, dim3(1), dim3(1), f);
    int host = 0;
    TESSERA_CUDA_CHECK(cudaMemcpy(&host, f, sizeof host, cudaMemcpyDeviceToHost));
    return host != 0;
  }();
  return built;
}

/// Launches a wgmma kernel for one layout pair: the TMA-fed one where it applies
/// (cuda_gemm_wgmma_tma_launch), else cuda_gemm_wgmma (with Gather: a channels-last
/// convolution, cuda_copy_pipelined_step); false when not built for sm_90a, switched off
/// (cuda_gemm_choice(cuda_gemm_pipeline::wgmma)) or the device refuses the shared memory.
template <class In, bool ACol, bool BCol, bool Gather = false, class TA, class TB, class TC>
bool cuda_gemm_wgmma_launch(dim3 grid,
                            const cuda_gemm_args<TA, TB, typename cuda_mma_op<In>::acc, TC>& p,
                            int64_t batch) {
  if (!cuda_wgmma_built() || !cuda_gemm_choice(cuda_gemm_pipeline::wgmma).enabled) return false;
  if constexpr (!Gather)
    if (cuda_gemm_wgmma_tma_launch<In, ACol, BCol>(grid, p, batch)) return true;
  return cuda_try_launch_smem<cuda_gemm_wgmma<In, TA, TB, ACol, BCol, TC, Gather>,
                              cuda_wgmma_smem_bytes>(cuda_gemm_choice(cuda_gemm_pipeline::wgmma),
                                                     "cuda_gemm_wgmma", grid,
                                                     dim3(cuda_wgmma_threads), p, batch);
}

}  // namespace detail
TESSERA_END_NAMESPACE

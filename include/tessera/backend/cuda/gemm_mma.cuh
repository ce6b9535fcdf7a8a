// tessera/backend/cuda/gemm_mma.cuh - the tensor-core matrix product on raw mma.sync:
//  - half x half, bfloat16 x bfloat16 (m16n8k16) and tf32 (float x float under
//    set_float32_matmul_precision(high), m16n8k8; inputs rounded to nearest tf32, ties away, in
//    shared memory), float accumulation, when both operands are row- or column-major with
//    16-byte aligned rows: the operands the WMMA pipeline (gemm_tc_async.cuh) takes;
//  - int8 x int8 and uint8 x uint8 (int32 accumulation, m16n8k32) and, built for sm_89+, fp8 x
//    fp8 of one format (e4m3 or e5m2, float accumulation, m16n8k32) with A row-major and B
//    column-major, i.e. k contiguous in both: ldmatrix's .trans moves 16-bit elements, so it
//    cannot transpose bytes. Other 8-bit operands are first packed k-contiguous (gemm_pack.cuh).
//
// What it changes against the WMMA pipeline, and why:
//  - Shared tiles are XOR-swizzled instead of padded. A 16-byte chunk c of tile row r is stored
//    at chunk c ^ f(r), so the 8 rows one ldmatrix phase reads, and the 8 chunks consecutive
//    threads copy, fall on 8 different groups of 4 banks: no bank conflicts on either side, and
//    no padding (64 KB for four stages). WMMA reads fragments from pointer + leading dimension
//    only, which a swizzle breaks; ldmatrix takes one row address per lane.
//  - Fragments come from ldmatrix (x4: four 8 x 8 matrices per instruction, .trans for the
//    operands whose contiguous direction is m or n), so both layouts of each operand need no
//    second copy and no register shuffles. tf32 operands with m or n contiguous are the
//    exception: .trans moves 16-bit elements, so their fragments come from 32-bit shared loads,
//    four per ldmatrix.x4, the same bytes (cuda_mma_tf32_mn_frag_at).
//  - 4 warps of 64 x 64 outputs (128 accumulators per thread) instead of 8 of 64 x 32: per k
//    step of 16 a warp issues 8 ldmatrix.x4 (4 KB) for 32 mma.sync, 32 FLOP per shared byte
//    against the WMMA kernel's 21 (docs/perf/cuda_gemm.md).
//  - The epilogue writes straight from the accumulator registers, whose positions mma.sync
//    specifies (no staging tile in shared memory).
// The pipeline itself is the WMMA one's: cuda_mma_stages slots, cp.async copies of 16 bytes,
// one barrier per k step, partial chunks at the edges zeroed by cp.async's source size.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <type_traits>

#include "async_copy.cuh"
#include "gemm_args.cuh"
#include "gemm_choice.cuh"
#include "gemm_tc.cuh"
#include "launch.hpp"
#include "mma_sync.cuh"

TESSERA_BEGIN_NAMESPACE
namespace detail {

inline constexpr int cuda_mma_threads = 128;  // 4 warps in a 2 x 2 grid, 64 x 64 outputs each
inline constexpr int cuda_mma_stages = 4;
inline constexpr int cuda_mma_row_bytes = 64;  // of k per operand row and stage, any element size

/// A stage's tile with k contiguous (A row-major, B column-major): [128][4 V] elements of V per
/// 16-byte chunk, 64-byte rows of 4 chunks; chunk c of row o is stored at c ^ (o / 2 % 4). Rows
/// o and o + 1 share 128 bytes of banks, so the 8 rows an ldmatrix phase reads (o0 .. o0 + 7,
/// one chunk) land on 8 distinct 16-byte bank groups.
template <int V = 8>
struct cuda_mma_k_major {
  __host__ __device__ static int at(int o, int k) {
    return o * 4 * V + ((k / V) ^ ((o >> 1) & 3)) * V + k % V;
  }
};

/// A stage's tile with m or n contiguous (A column-major, B row-major; not 8-bit elements):
///  - 16-bit (V = 8): [32][128], 256-byte rows of 16 chunks; chunk c of row k is stored at
///    c ^ (k % 8), so the 8 rows of an ldmatrix.trans phase land on 8 distinct bank groups;
///  - tf32 (V = 4): [16][128 + 8], rows padded by 32 bytes, not swizzled. Its fragments come
///    from 32-bit loads (cuda_mma_tf32_mn_frag_at), each reading 8 consecutive floats from 4
///    consecutive rows: rows 8 banks apart put them in 32 distinct banks. Padding keeps each
///    load's address a lane constant plus a compile-time offset; an XOR swizzle mixes the two
///    (ptxas, sm_90: 255 registers and 56-72 bytes of spills with c ^ 2 (k % 4), none padded).
/// The 8 chunks consecutive threads copy stay on 8 distinct bank groups either way.
template <int V = 8>
struct cuda_mma_mn_major {
  static constexpr int ld = V == 4 ? cuda_tc_bn + 8 : cuda_tc_bn;  // elements per row
  static constexpr int elems = 4 * V * ld;                         // bk rows
  __host__ __device__ static int at(int k, int o) {
    static_assert(V == 8 || V == 4);
    if constexpr (V == 4)
      return k * ld + o;
    else
      return k * ld + ((o >> 3) ^ (k & 7)) * 8 + (o & 7);
  }
};

/// The kernel's geometry for inputs In (__half, __nv_bfloat16: m16n8k16, float sums;
/// cuda_tf32_tag: m16n8k8 on float bits, float sums; signed / unsigned char: m16n8k32, int32
/// sums; float8_e4m3 / float8_e5m2: m16n8k32, float sums, from sm_89 on; the instruction itself
/// is cuda_mma_sync<In>). Counted in bytes they are one geometry: a 16-byte chunk holds v
/// elements, a stage 4 chunks of k per row (bk = 4v), one instruction 2v of k, and the
/// fragments' bytes sit in the same lanes (mma_sync.cuh).
template <class In>
struct cuda_mma_op {
  static constexpr bool tf32 = std::is_same_v<In, cuda_tf32_tag>;
  static constexpr int size = tf32 ? 4 : static_cast<int>(sizeof(In));  // bytes per element
  static constexpr bool bytes8 = size == 1, fp8 = is_float8_v<In>;
  using elem = std::conditional_t<bytes8, std::uint8_t,  // what the tiles hold
                                  std::conditional_t<tf32, std::uint32_t, std::uint16_t>>;
  using acc = typename cuda_tc_input<In>::acc;
  static constexpr int v = 16 / size;
  static constexpr int bk = cuda_mma_row_bytes / size;
  static constexpr int ik = 2 * v;
  static constexpr int arch = fp8 ? 89 : 80;  // the first architecture with the instruction
  /// Elements of one operand's stage tile: [128][bk], or the (padded, tf32) mn-major tile.
  static constexpr int tile = tf32 ? cuda_mma_mn_major<4>::elems : cuda_tc_bm * bk;
  static_assert(tile >= cuda_tc_bm * bk);
  /// The kernel's dynamic shared memory: the stages, an A and a B tile each.
  static constexpr int smem_bytes = cuda_mma_stages * 2 * tile * size;
};
static_assert(cuda_tc_bm == cuda_tc_bn);  // both operands' tiles are [128][bk] or [bk][128]

/// Where in A's stage tile `lane` points ldmatrix for the A fragment (16 x 2V) of rows m .. m +
/// 15 and k kk .. kk + 2V - 1 (V elements per 16 bytes): lanes 0-7, 8-15, 16-23, 24-31 give the
/// rows of matrices (rows 0-7, first V of k), (rows 8-15, first V), (rows 0-7, second V), (rows
/// 8-15, second V), i.e. a[0..3] of mma_sync.cuh. Column-major A (ACol, 16-bit only) is stored k
/// by m and read transposed.
template <bool ACol, int V = 8>
__host__ __device__ __forceinline__ int cuda_mma_a_frag_at(int lane, int m, int kk) {
  const int lr = lane & 7, l8 = (lane >> 3 & 1) * 8, l16 = (lane >> 4) * V;
  return ACol ? cuda_mma_mn_major<>::at(kk + lr + l16, m + l8)
              : cuda_mma_k_major<V>::at(m + lr + l8, kk + l16);
}

/// Where in B's stage tile `lane` points ldmatrix for the B fragments of columns n .. n + 15
/// (two 2V x 8 tiles) and k kk .. kk + 2V - 1: matrices (first V of k, n 0-7), (second V, n 0-7),
/// (first V, n 8-15), (second V, n 8-15), i.e. b[0], b[1] of the first tile, then of the second.
/// Row-major B (not BCol, 16-bit only) is stored k by n and read transposed.
template <bool BCol, int V = 8>
__host__ __device__ __forceinline__ int cuda_mma_b_frag_at(int lane, int n, int kk) {
  const int lr = lane & 7, l8 = (lane >> 3 & 1) * V, l16 = (lane >> 4) * 8;
  return BCol ? cuda_mma_k_major<V>::at(n + lr + l16, kk + l8)
              : cuda_mma_mn_major<>::at(kk + lr + l8, n + l16);
}

/// Where in an mn-major tf32 stage tile (cuda_mma_mn_major<4>) lane's register q of a fragment
/// lies: for A (column-major), the A fragment of rows o .. o + 15 and k kk .. kk + 7 (registers
/// in mma_sync.cuh's order: A(g, t), A(g + 8, t), A(g, t + 4), A(g + 8, t + 4)); for B
/// (row-major, IsB), the B fragments of columns o .. o + 15 in cuda_mma_b_frag_at's order
/// (B(t, g), B(t + 4, g) of columns o .., then of columns o + 8 ..). g = lane / 4, t = lane % 4.
template <bool IsB>
__host__ __device__ __forceinline__ int cuda_mma_tf32_mn_frag_at(int lane, int o, int kk, int q) {
  const int g = lane / 4, t = lane % 4;
  const int dk = (IsB ? q % 2 : q / 2) * 4, dn = (IsB ? q / 2 : q % 2) * 8;
  return cuda_mma_mn_major<4>::at(kk + t + dk, o + g + dn);
}

/// The A fragment of rows m .. m + 15 and k kk .. kk + 2V - 1 from A's stage tile.
template <class Op, bool ACol, class E>
__device__ __forceinline__ void cuda_mma_load_a(uint32_t (&a)[4], const E* tile, int lane, int m,
                                                int kk) {
  if constexpr (Op::tf32 && ACol) {
#pragma unroll
    for (int q = 0; q < 4; ++q) a[q] = tile[cuda_mma_tf32_mn_frag_at<false>(lane, m, kk, q)];
  } else {
    cuda_ldmatrix_x4<ACol>(a, tile + cuda_mma_a_frag_at<ACol, Op::v>(lane, m, kk));
  }
}

/// The B fragments of columns n .. n + 15 (two n8 tiles) and k kk .. kk + 2V - 1 from B's stage
/// tile.
template <class Op, bool BCol, class E>
__device__ __forceinline__ void cuda_mma_load_b(uint32_t (&b)[4], const E* tile, int lane, int n,
                                                int kk) {
  if constexpr (Op::tf32 && !BCol) {
#pragma unroll
    for (int q = 0; q < 4; ++q) b[q] = tile[cuda_mma_tf32_mn_frag_at<true>(lane, n, kk, q)];
  } else {
    cuda_ldmatrix_x4<!BCol>(b, tile + cuda_mma_b_frag_at<BCol, Op::v>(lane, n, kk));
  }
}

/// Rounds to tf32 (cuda_tc_tf32::convert), in place, the chunks of an [Outer x Inner] float
/// tile at tile + at(o, i) that this thread (of Threads) copied: each thread rounds its own
/// copies after its wait and before the barrier that publishes them, so every element is
/// rounded once, not once per fragment load. Both pipelined kernels do this for tf32.
template <int Outer, int Inner, int Threads, class At>
__device__ __forceinline__ void cuda_round_tf32_copies(void* tile, At at) {
  float* const f = static_cast<float*>(tile);
  cuda_each_chunk<Outer, Inner, float, Threads>([&](int o, int i) {
    float* const chunk = f + at(o, i);
#pragma unroll
    for (int v = 0; v < 4; ++v) chunk[v] = cuda_tc_tf32::convert(chunk[v]);
  });
}

/// One 128 x 128 tile of matrix blockIdx.z per block, on mma.sync with In inputs (cuda_mma_op):
/// A row-major (a_cs == 1) or column-major (ACol: a_rs == 1), B likewise (8-bit inputs: A
/// row-major and B column-major only), rows and batch matrices 16-byte aligned
/// (cuda_tc_async_fits). Results as cuda_gemm_tc's, up to the order of float additions inside
/// one instruction's k for 16-bit, tf32 and fp8 inputs; exact (wrapping) int32 sums for 8-bit
/// integers. With Gather, B is a channels-last convolution input (cuda_copy_pipelined_step).
template <class In, class TA, class TB, bool ACol, bool BCol, class TC, bool Gather = false>
__global__ void __launch_bounds__(cuda_mma_threads, 2)
    cuda_gemm_mma(cuda_gemm_args<TA, TB, typename cuda_mma_op<In>::acc, TC> p, int64_t batch) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  (void)p, (void)batch;  // launched only where cuda_built_for(..., 80) holds
  __trap();
#else
  using Op = cuda_mma_op<In>;
  using E = typename Op::elem;
  using Acc = typename Op::acc;
  constexpr int V = Op::v;
  static_assert(sizeof(TA) == sizeof(E) && sizeof(TB) == sizeof(E));
  static_assert(!Op::bytes8 || (!ACol && BCol), "8-bit operands must have k contiguous");
  using ATile = std::conditional_t<ACol, cuda_mma_mn_major<V>, cuda_mma_k_major<V>>;
  using BTile = std::conditional_t<BCol, cuda_mma_k_major<V>, cuda_mma_mn_major<V>>;
  constexpr int BM = cuda_tc_bm, BN = cuda_tc_bn, BK = Op::bk, S = cuda_mma_stages;
  constexpr int T = cuda_mma_threads, tile = Op::tile;
  E* const smem = reinterpret_cast<E*>(cuda_dynamic_smem());
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int wm = warp / 2 * 64, wn = warp % 2 * 64;  // the warp's 64 x 64 piece of the tile
  const auto [m0, n0, lda, ldb] = cuda_pipelined_block_of<BM, BN, ACol, BCol>(p);
  for (int64_t z = blockIdx.z; z < batch * p.splits; z += gridDim.z) {
    const auto [zb, k0, steps] = cuda_split_of<BK>(p, z, batch);
    const auto [a, b, c] = cuda_batch_matrix_at<E, E>(p, zb);
    const auto a_at = [](int o, int i) { return ATile::at(o, i); };
    const auto b_at = [](int o, int i) { return BTile::at(o, i); };
    const auto slot = [&](int64_t kt) { return smem + (kt % S) * 2 * tile; };  // A, then B
    // acc[i][j]: rows wm + 16 i .., columns wn + 8 j .. (mma.sync's D fragment).
    Acc acc[4][8][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int r = 0; r < 4; ++r) acc[i][j][r] = Acc(0);

    if (p.alpha != Acc(0))
      cuda_pipelined_k_loop<S>(
          steps,
          [&](int64_t kt) {
            cuda_copy_pipelined_step<BM, BN, BK, T, ACol, BCol, Gather>(
                slot(kt), a_at, slot(kt) + tile, b_at, a, lda, b, ldb, p, m0, n0, k0 + kt * BK);
          },
          [&](int64_t kt) {
            if constexpr (Op::tf32) {  // each thread rounds what it copied, before the barrier
              cuda_round_tf32_copies<ACol ? BK : BM, ACol ? BM : BK, T>(slot(kt), a_at);
              cuda_round_tf32_copies<BCol ? BN : BK, BCol ? BK : BN, T>(slot(kt) + tile, b_at);
            }
          },
          [&](int64_t kt) {
            const E* const as = slot(kt);
            const E* const bs = as + tile;
#pragma unroll
            for (int kk = 0; kk < BK; kk += Op::ik) {
              uint32_t fa[4][4], fb[4][4];  // A rows wm + 16 i; B columns wn + 16 j (2 n8 tiles)
#pragma unroll
              for (int i = 0; i < 4; ++i)
                cuda_mma_load_a<Op, ACol>(fa[i], as, lane, wm + 16 * i, kk);
#pragma unroll
              for (int j = 0; j < 4; ++j)
                cuda_mma_load_b<Op, BCol>(fb[j], bs, lane, wn + 16 * j, kk);
#pragma unroll
              for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 8; ++j) {
                  const uint32_t fbj[2] = {fb[j / 2][j % 2 * 2], fb[j / 2][j % 2 * 2 + 1]};
                  cuda_mma_sync<In>(acc[i][j], fa[i], fbj);
                }
            }
          });
    Acc* const part = cuda_gemm_part_of(p, z);  // split k: raw sums, else null
    // Epilogue from the registers: lane (g, t) = (lane / 4, lane % 4) holds rows g and g + 8,
    // columns 2t and 2t + 1 of each 16 x 8 tile.
    const int64_t r0 = m0 + wm + lane / 4, c0 = n0 + wn + lane % 4 * 2;
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const int64_t gi = r0 + 16 * i + (r >> 1) * 8, gj = c0 + 8 * j + (r & 1);
          if (gi < p.m && gj < p.n) cuda_gemm_store_part(p, c, part, gi, gj, acc[i][j][r]);
        }
    __syncthreads();  // every warp is done with the stages before the next matrix's requests
  }
#endif
}

/// Launches cuda_gemm_mma for one layout pair (with Gather: a channels-last convolution,
/// cuda_copy_pipelined_step); false when switched off
/// (cuda_gemm_choice(cuda_gemm_pipeline::mma_sync)) or the device refuses its shared memory.
template <class In, bool ACol, bool BCol, bool Gather = false, class TA, class TB, class TC>
bool cuda_gemm_mma_launch(dim3 grid,
                          const cuda_gemm_args<TA, TB, typename cuda_mma_op<In>::acc, TC>& p,
                          int64_t batch) {
  return cuda_try_launch_smem<cuda_gemm_mma<In, TA, TB, ACol, BCol, TC, Gather>,
                              cuda_mma_op<In>::smem_bytes>(
      cuda_gemm_choice(cuda_gemm_pipeline::mma_sync), "cuda_gemm_mma", grid, dim3(cuda_mma_threads),
      p, batch);
}

}  // namespace detail
TESSERA_END_NAMESPACE

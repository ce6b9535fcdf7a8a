// tessera/backend/cuda/gemm_tc_async.cuh - the tensor-core matrix product fed by a multi-stage
// pipeline of asynchronous copies (cp.async, sm_80 and newer), for half x half, bfloat16 x
// bfloat16 and (under set_float32_matmul_precision(high)) float x float when both operands are
// row- or column-major with 16-byte aligned rows; and the dispatch among the pipelined kernels
// (cuda_gemm_try_async), which gives those products to the wgmma kernel (gemm_wgmma.cuh, where
// built for sm_90a; tf32 operands packed k-contiguous first where they are not) first, then to
// the mma.sync kernel (gemm_mma.cuh). This WMMA pipeline is their fallback and the benchmarks'
// point of comparison.
//
// Why a second kernel beside cuda_gemm_tc: that one takes any strides and any input type by
// loading through registers, converting on the way (one k step ahead, two shared buffers). When
// the inputs are already the tensor cores' type and 16 bytes at a time are contiguous, the
// copies can go from global to shared memory directly: no registers held for the next step, no
// conversion instructions, and cuda_tc_stages steps in flight instead of one, which is what hides
// the memory latency of a product that runs from L2 at 4096 and beyond.
//
// The pipeline: stage kt of the k loop lives in slot kt % S of dynamic shared memory. Before the
// loop, steps 0 .. S - 2 are requested; at step kt each thread waits for its own copies of step
// kt (all but the newest S - 2 groups), a barrier makes every thread's copies visible (and
// guarantees every warp finished step kt - 1), then step kt + S - 1 is requested into the slot
// step kt - 1 used, and step kt is multiplied. Every thread commits one group per step, empty or
// not, so group counts agree. Edge chunks copy only the bytes inside the matrix and zero the rest
// (cp.async's source size), so tails need no second path.
//
// Each operand keeps its global layout in shared memory (WMMA reads row- or column-major
// fragments), so a 16-byte global chunk is a 16-byte shared chunk. Rows are padded by 16 bytes:
// consecutive rows start 4 banks apart, so fragment loads and copies spread over the banks while
// every chunk stays 16-byte and every fragment 32-byte aligned (WMMA's fragment pointers rule out
// XOR swizzles, which would move elements within a fragment's rows).
//
// tf32: the copies bring float bits; each thread rounds the elements it copied, after its wait
// and before the barrier, exactly as cuda_gemm_tc rounds on its way into shared memory.
#pragma once

#include <cuda_runtime.h>
#include <mma.h>

#include <atomic>
#include <cstdint>
#include <type_traits>

#include "../../kernel/gemm_problem.hpp"
#include "async_copy.cuh"
#include "gemm_args.cuh"
#include "gemm_choice.cuh"
#include "gemm_mma.cuh"
#include "gemm_pack.cuh"
#include "gemm_split.cuh"
#include "gemm_tc.cuh"
#include "gemm_wgmma.cuh"
#include "launch.hpp"

TESSERA_BEGIN_NAMESPACE
namespace detail {

inline constexpr int cuda_tc_stages = 4;

/// One pipeline stage's shared tiles for elements E, k step BK: A [128][BK + pad] (row-major) or
/// [BK][128 + pad] (ACol), then B [BK][128 + pad] or [128][BK + pad] (BCol); pad is 16 bytes.
template <class E, int BK, bool ACol, bool BCol>
struct cuda_tc_async_tiles {
  static constexpr int pad = 16 / static_cast<int>(sizeof(E));
  static constexpr int lda = ACol ? cuda_tc_bm + pad : BK + pad;
  static constexpr int ldb = BCol ? BK + pad : cuda_tc_bn + pad;
  static constexpr int a_elems = ACol ? BK * lda : cuda_tc_bm * lda;
  static constexpr int b_elems = BCol ? cuda_tc_bn * ldb : BK * ldb;
  static constexpr int stage_elems = a_elems + b_elems;
  static constexpr int bytes = cuda_tc_stages * stage_elems * static_cast<int>(sizeof(E));
  // Every tile and stage starts 32-byte aligned (WMMA fragment pointers).
  static_assert(a_elems * sizeof(E) % 32 == 0 && stage_elems * sizeof(E) % 32 == 0);
  __device__ static int a_at(int row, int k) { return ACol ? k * lda + row : row * lda + k; }
  __device__ static int b_at(int k, int col) { return BCol ? col * ldb + k : k * ldb + col; }
};

/// Dynamic shared memory of the pipelined kernel: the stages, or the warps' staging tiles after
/// the loop, whichever is larger.
template <class Cfg, bool ACol, bool BCol>
inline constexpr int cuda_tc_async_smem_bytes = [] {
  const int stages = cuda_tc_async_tiles<typename Cfg::elem, Cfg::bk, ACol, BCol>::bytes;
  const int staging = 8 * 16 * cuda_tc_ldc * static_cast<int>(sizeof(typename Cfg::acc));
  return stages > staging ? stages : staging;
}();

/// The pipelined tensor-core product: the same blocks, results and epilogue as cuda_gemm_tc<Cfg,
/// TA, TB> (one 128 x 128 tile of matrix blockIdx.z per block, 8 warps of 64 x 32), for TA and
/// TB that are Cfg's element type, A row-major (a_cs == 1) or column-major (ACol: a_rs == 1), B
/// likewise, every row (column) and batch matrix starting 16-byte aligned (cuda_tc_async_fits).
template <class Cfg, class TA, class TB, bool ACol, bool BCol, class TC = typename Cfg::acc>
__global__ void __launch_bounds__(cuda_tc_threads, 2)
    cuda_gemm_tc_async(cuda_gemm_args<TA, TB, typename Cfg::acc, TC> p, int64_t batch) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  (void)p, (void)batch;  // launched only where cuda_built_for(..., 80) holds
  __trap();
#else
  namespace wmma = nvcuda::wmma;
  using E = typename Cfg::elem;
  using F = typename Cfg::frag_ptr;
  using Acc = typename Cfg::acc;
  using Tiles = cuda_tc_async_tiles<E, Cfg::bk, ACol, BCol>;
  static_assert(sizeof(TA) == sizeof(E) && sizeof(TB) == sizeof(E));
  constexpr int BM = cuda_tc_bm, BN = cuda_tc_bn, BK = Cfg::bk, FK = Cfg::fk, S = cuda_tc_stages;
  constexpr bool tf32 = std::is_same_v<typename Cfg::frag, cuda_tf32_tag>;
  E* const smem = reinterpret_cast<E*>(cuda_dynamic_smem());
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int wm = warp / 4, wn = warp % 4;  // the warp's 64 x 32 piece of the tile
  Acc* const Cs = reinterpret_cast<Acc*>(smem) + warp * 16 * cuda_tc_ldc;
  const auto [m0, n0, lda, ldb] = cuda_pipelined_block_of<BM, BN, ACol, BCol>(p);
  for (int64_t z = blockIdx.z; z < batch * p.splits; z += gridDim.z) {
    const auto [zb, k0, steps] = cuda_split_of<BK>(p, z, batch);
    const auto [a, b, c] = cuda_batch_matrix_at<E, E>(p, zb);
    const auto a_at = [](int o, int i) { return o * Tiles::lda + i; };
    const auto b_at = [](int o, int i) { return o * Tiles::ldb + i; };
    const auto slot = [&](int64_t kt) { return smem + (kt % S) * Tiles::stage_elems; };
    wmma::fragment<wmma::accumulator, 16, 16, FK, Acc> acc[4][2];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], Acc(0));

    if (p.alpha != Acc(0))
      cuda_pipelined_k_loop<S>(
          steps,
          [&](int64_t kt) {
            cuda_copy_gemm_step<BM, BN, BK, cuda_tc_threads, ACol, BCol>(
                slot(kt), a_at, slot(kt) + Tiles::a_elems, b_at, a, lda, b, ldb, m0, n0,
                k0 + kt * BK, p.m, p.n, p.k);
          },
          [&](int64_t kt) {
            if constexpr (tf32) {  // each thread rounds what it copied, before the barrier
              constexpr int T = cuda_tc_threads;
              cuda_round_tf32_copies<ACol ? BK : BM, ACol ? BM : BK, T>(slot(kt), a_at);
              cuda_round_tf32_copies<BCol ? BN : BK, BCol ? BK : BN, T>(slot(kt) + Tiles::a_elems,
                                                                        b_at);
            }
          },
          [&](int64_t kt) {
            cuda_tc_multiply_step<Cfg, Tiles, ACol, BCol>(
                acc, reinterpret_cast<const F*>(slot(kt)),
                reinterpret_cast<const F*>(slot(kt) + Tiles::a_elems), wm, wn);
          });
    __syncthreads();  // every warp is done with the stages: the staging tiles overlay them
    Acc* const part = cuda_gemm_part_of(p, z);  // split k: raw sums, else null
    cuda_tc_epilogue(p, c, part, acc, Cs, m0 + wm * 64, n0 + wn * 32, lane);
    __syncthreads();  // the next batch matrix reuses the stages
  }
#endif
}

/// Whether the pipelined kernel may be tried for TA x TB on family Cfg: the inputs are Cfg's
/// element type already (no conversion on the way in).
template <class Cfg, class TA, class TB>
inline constexpr bool cuda_tc_async_family =
    std::is_same_v<TA, TB> &&
    ((std::is_same_v<Cfg, cuda_tc_16bit<__half>> && std::is_same_v<TA, half>) ||
     (std::is_same_v<Cfg, cuda_tc_16bit<__nv_bfloat16>> && std::is_same_v<TA, bfloat16>) ||
     (std::is_same_v<Cfg, cuda_tc_tf32> && std::is_same_v<TA, float>));

/// Whether an operand of elem_bytes-byte elements at x with strides (rs, cs) and batch offsets
/// (an array of `batch`, or multiples of `stride` when the array is null) can be copied in
/// 16-byte chunks; col says whether it is column-major (rs == 1) rather than row-major.
inline bool cuda_tc_async_fits(const void* x, int64_t rs, int64_t cs, const int64_t* offsets,
                               int64_t stride, int64_t batch, int64_t elem_bytes, bool& col) {
  const int64_t v = 16 / elem_bytes;  // elements per chunk
  if (reinterpret_cast<uintptr_t>(x) % 16 != 0) return false;
  if (cs == 1 && rs % v == 0)
    col = false;
  else if (rs == 1 && cs % v == 0)
    col = true;
  else
    return false;
  if (!offsets) return stride % v == 0;
  for (int64_t z = 0; z < batch; ++z)
    if (offsets[z] % v != 0) return false;
  return true;
}

/// Launches cuda_gemm_tc_async for one layout pair; false when switched off
/// (cuda_gemm_choice(cuda_gemm_pipeline::wmma)) or the device refuses its shared memory (the
/// caller falls back to cuda_gemm_tc).
template <class Cfg, class TA, class TB, bool ACol, bool BCol, class TC>
bool cuda_gemm_tc_async_launch(dim3 grid, const cuda_gemm_args<TA, TB, typename Cfg::acc, TC>& p,
                               int64_t batch) {
  return cuda_try_launch_smem<cuda_gemm_tc_async<Cfg, TA, TB, ACol, BCol, TC>,
                              cuda_tc_async_smem_bytes<Cfg, ACol, BCol>>(
      cuda_gemm_choice(cuda_gemm_pipeline::wmma), "cuda_gemm_tc_async", grid, dim3(cuda_tc_threads),
      p, batch);
}

/// Which of a product's operands the pipelined kernels can copy in 16-byte chunks
/// (cuda_tc_async_fits), and along which direction each is contiguous: found once per product.
struct cuda_tc_layout {
  bool a_fits = false, a_col = false;  // A column-major (m-contiguous) rather than row-major
  bool b_fits = false, b_col = false;  // B column-major (k-contiguous) rather than row-major
};

/// cuda_tc_async_fits of pr's two operands (p's batch strides; pr's host offset arrays).
template <class TA, class TB, class Acc, class TC>
cuda_tc_layout cuda_tc_async_layout(const gemm_problem<TA, TB, Acc, TC>& pr,
                                    const cuda_gemm_args<TA, TB, Acc, TC>& p) {
  cuda_tc_layout l;
  l.a_fits = cuda_tc_async_fits(pr.a, pr.a_rs, pr.a_cs, pr.a_offsets, p.a_bs, pr.batch,
                                int64_t{sizeof(TA)}, l.a_col);
  l.b_fits = cuda_tc_async_fits(pr.b, pr.b_rs, pr.b_cs, pr.b_offsets, p.b_bs, pr.batch,
                                int64_t{sizeof(TB)}, l.b_col);
  return l;
}

/// p with both operands k-contiguous with 16-byte aligned rows (A row-major, B column-major): each
/// read in place when it is so already (layout l, of p's operands), else from a k-contiguous copy
/// (cuda_pack_operand) in packed_a / packed_b, which must live until the product has been
/// launched. With tf32, both are copied and rounded to tf32 on the way (tf32_rounded set), so
/// the kernels read tf32 values without rounding in the product's loop: the copy costs a read
/// and a write of each operand, against rounding every tile that every block loads.
template <class TA, class TB, class Acc, class TC>
cuda_gemm_args<TA, TB, Acc, TC> cuda_gemm_k_major(const gemm_problem<TA, TB, Acc, TC>& pr,
                                                  cuda_gemm_args<TA, TB, Acc, TC> p,
                                                  const cuda_tc_layout& l,
                                                  std::optional<cuda_scratch>& packed_a,
                                                  std::optional<cuda_scratch>& packed_b,
                                                  bool tf32 = false) {
  if (p.alpha == Acc(0)) return p;  // neither operand is read
  if (tf32 || !(l.a_fits && !l.a_col)) {
    const auto a = cuda_pack_operand(cuda_gemm_operand<TA>{p.a, p.a_rs, p.a_cs, p.a_off, p.a_bs},
                                     pr.batch, p.m, p.k, packed_a, tf32);
    p.a = a.x, p.a_rs = a.s_outer, p.a_cs = a.s_k, p.a_off = a.off, p.a_bs = a.bs;
  }
  if (tf32 || !(l.b_fits && l.b_col)) {
    const auto b = cuda_pack_operand(cuda_gemm_operand<TB>{p.b, p.b_cs, p.b_rs, p.b_off, p.b_bs},
                                     pr.batch, p.n, p.k, packed_b, tf32);
    p.b = b.x, p.b_cs = b.s_outer, p.b_rs = b.s_k, p.b_off = b.off, p.b_bs = b.bs;
  }
  p.tf32_rounded = tf32;
  return p;
}

/// Runs an 8-bit product (In = signed / unsigned char, float8_e4m3, float8_e5m2) on the wgmma
/// kernel where built for sm_90a, else on the mma.sync kernel, both operands k-contiguous
/// (cuda_gemm_k_major), k split where the tiles are few (cuda_gemm_run_split); false when both
/// kernels are switched off or not built for an architecture with In's instruction, or their
/// shared memory is refused.
template <class In, class TA, class TB, class Acc, class TC>
bool cuda_gemm_try_mma8(const gemm_problem<TA, TB, Acc, TC>& pr,
                        const cuda_gemm_args<TA, TB, Acc, TC>& p, dim3 grid) {
  // Once per kernel (per process, like the other kernel choices).
  static const bool mma_built =
      cuda_built_for(cuda_gemm_mma<In, TA, TB, false, true, TC>, cuda_mma_op<In>::arch);
  const bool wgmma = cuda_gemm_choice(cuda_gemm_pipeline::wgmma).enabled && cuda_wgmma_built();
  const bool mma = cuda_gemm_choice(cuda_gemm_pipeline::mma_sync).enabled && mma_built;
  if (!wgmma && !mma) return false;                // before any pack
  std::optional<cuda_scratch> packed_a, packed_b;  // alive until the product is launched
  const auto q = cuda_gemm_k_major(pr, p, cuda_tc_async_layout(pr, p), packed_a, packed_b);
  return cuda_gemm_run_split(q, pr.batch, grid, cuda_split_min_tc, [&](dim3 g, const auto& r) {
    return (wgmma && cuda_gemm_wgmma_launch<In, false, true>(g, r, pr.batch)) ||
           (mma && cuda_gemm_mma_launch<In, false, true>(g, r, pr.batch));
  });
}

/// Runs pr on a pipelined kernel when it qualifies (cuda_tc_async_family, cuda_tc_async_fits
/// for both operands): the wgmma one where built for sm_90a (gemm_wgmma.cuh; 16-bit inputs read
/// in place in every layout, tf32 operands packed k-contiguous where they are not), then the
/// mma.sync one (gemm_mma.cuh, every operand in place), then the WMMA one, each unless switched
/// off (cuda_gemm_choice) and with k split where the output tiles are few (cuda_gemm_run_split);
/// 8-bit integer products on the wgmma or mma.sync kernel whatever their
/// layout (cuda_gemm_try_mma8), and so fp8 x fp8 products of one format where a kernel was built
/// for their instructions (sm_90a for wgmma, sm_89+ for mma.sync; elsewhere they run exactly on
/// the fp16 tensor cores of the register-staged kernel). False when none runs it.
template <class Cfg, class TA, class TB, class Acc, class TC>
bool cuda_gemm_try_async(const gemm_problem<TA, TB, Acc, TC>& pr,
                         const cuda_gemm_args<TA, TB, Acc, TC>& p, dim3 grid) {
  constexpr bool ints8 = std::is_same_v<Cfg, cuda_tc_int8<typename Cfg::frag>>;
  constexpr bool fp8 = is_float8_v<TA> && std::is_same_v<TA, TB> && std::is_same_v<Acc, float>;
  if constexpr (ints8 || fp8) {
    using In = std::conditional_t<ints8, typename Cfg::frag, TA>;  // the instruction's input type
    return cuda_gemm_try_mma8<In>(pr, p, grid);
  } else if constexpr (!cuda_tc_async_family<Cfg, TA, TB>) {
    (void)pr, (void)p, (void)grid;
    return false;
  } else {
    const cuda_tc_layout l = cuda_tc_async_layout(pr, p);
    if (!l.a_fits || !l.b_fits) return false;
    const bool acol = l.a_col, bcol = l.b_col;
    // Calls launch(std::bool_constant<ACol>{}, std::bool_constant<BCol>{}) for the layouts found.
    const auto by_layout = [&](auto launch) {
      if (acol)
        return bcol ? launch(std::true_type{}, std::true_type{})
                    : launch(std::true_type{}, std::false_type{});
      return bcol ? launch(std::false_type{}, std::true_type{})
                  : launch(std::false_type{}, std::false_type{});
    };
    using In = typename Cfg::frag;
    const auto mma = [&](dim3 g, const auto& q) {
      return by_layout([&](auto ac, auto bc) {
        return cuda_gemm_mma_launch<In, decltype(ac)::value, decltype(bc)::value>(g, q, pr.batch);
      });
    };
    if constexpr (std::is_same_v<In, cuda_tf32_tag>) {  // wgmma reads tf32 only k-contiguous
      if (cuda_gemm_choice(cuda_gemm_pipeline::wgmma).enabled && cuda_wgmma_built()) {
        std::optional<cuda_scratch> packed_a, packed_b;  // alive until the product is launched
        if (cuda_gemm_run_split(cuda_gemm_k_major(pr, p, l, packed_a, packed_b, true), pr.batch,
                                grid, cuda_split_min_tc, [&](dim3 g, const auto& q) {
                                  return cuda_gemm_wgmma_launch<In, false, true>(g, q, pr.batch);
                                }))
          return true;
      }
      if (cuda_gemm_run_split(p, pr.batch, grid, cuda_split_min_tc, mma)) return true;
    } else if (cuda_gemm_run_split(
                   p, pr.batch, grid, cuda_split_min_tc, [&](dim3 g, const auto& q) {
                     return by_layout([&](auto ac, auto bc) {
                              return cuda_gemm_wgmma_launch<In, decltype(ac)::value,
                                                            decltype(bc)::value>(g, q, pr.batch);
                            }) ||
                            mma(g, q);
                   })) {
      return true;
    }
    return cuda_gemm_run_split(p, pr.batch, grid, cuda_split_min_tc, [&](dim3 g, const auto& q) {
      return by_layout([&](auto ac, auto bc) {
        return cuda_gemm_tc_async_launch<Cfg, TA, TB, decltype(ac)::value, decltype(bc)::value, TC>(
            g, q, pr.batch);
      });
    });
  }
}

/// Whether cuda_gemm_try_conv_chunks may run a product of family Cfg: Cfg allowed (tf32 only
/// when asked for), and a kernel switched on and built for the device (the shared memory is
/// asked for at the launch). Lets the convolution skip its channels-last copies where no kernel
/// would read them.
template <class Cfg, class TA, class TB, class TC>
bool cuda_gemm_conv_chunks_ready() {
  if constexpr (!cuda_tc_async_family<Cfg, TA, TB>) {
    return false;
  } else {
    using In = typename Cfg::frag;
    // Once per kernel (per process, like the other kernel choices).
    static const bool mma_built =
        cuda_built_for(cuda_gemm_mma<In, TA, TB, false, true, TC, true>, 80);
    return Cfg::allowed() &&
           ((cuda_gemm_choice(cuda_gemm_pipeline::wgmma).enabled && cuda_wgmma_built()) ||
            (cuda_gemm_choice(cuda_gemm_pipeline::mma_sync).enabled && mma_built));
  }
}

/// Runs a channels-last implicit-GEMM convolution (p.conv.pixel > 1: A row-major, B gathered
/// k-contiguous, see cuda_conv_gather) on the wgmma kernel where built for sm_90a, else on the
/// mma.sync kernel, k split where the tiles are few (cuda_gemm_run_split); false, having launched
/// nothing, when Cfg is not one of their input families (cuda_tc_async_family), or both are
/// switched off or refuse their shared memory.
template <class Cfg, class TA, class TB, class Acc, class TC>
bool cuda_gemm_try_conv_chunks(const cuda_gemm_args<TA, TB, Acc, TC>& p, int64_t batch, dim3 grid) {
  if constexpr (!cuda_tc_async_family<Cfg, TA, TB>) {
    (void)p, (void)batch, (void)grid;
    return false;
  } else {
    using In = typename Cfg::frag;
    return cuda_gemm_run_split(p, batch, grid, cuda_split_min_tc, [&](dim3 g, const auto& q) {
      return cuda_gemm_wgmma_launch<In, false, true, true>(g, q, batch) ||
             cuda_gemm_mma_launch<In, false, true, true>(g, q, batch);
    });
  }
}

}  // namespace detail
TESSERA_END_NAMESPACE

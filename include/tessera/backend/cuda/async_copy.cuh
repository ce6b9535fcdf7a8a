// tessera/backend/cuda/async_copy.cuh - asynchronous global-to-shared copies (cp.async, sm_80
// and newer), the block's dynamic shared memory, tile copies and the pipelined k loop: what the
// multi-stage GEMM pipelines (gemm_tc_async.cuh, gemm_mma.cuh) are built from.
//
// Each wrapper has one meaning on a GPU (inline PTX) and in the host emulation of the CUDA
// runtime (tests/cuda_emu), which queues a copy until its thread waits for it, so a kernel that
// reads a stage before waiting for it fails its tests there too.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

TESSERA_BEGIN_NAMESPACE
namespace detail {

/// The block's dynamic shared memory (the bytes its launch asked for, see cuda_launch_smem),
/// 128-byte aligned.
__device__ __forceinline__ unsigned char* cuda_dynamic_smem() {
#if defined(TESSERA_CUDA_HOST_EMULATION)
  return tessera_cuda_emulation::dynamic_smem;
#else
  extern __shared__ __align__(128) unsigned char tessera_dynamic_smem[];
  return tessera_dynamic_smem;
#endif
}

/// Starts copying `bytes` (0 to 16) from global src to shared dst, both 16-byte aligned, and
/// zeros the rest of dst's 16 bytes: a tile's edge chunks read only what lies inside the matrix.
/// The L1 is bypassed (.cg): tiles are read once per block. The copy is complete only after
/// cuda_cp_async_wait covers its group.
__device__ __forceinline__ void cuda_cp_async16(void* dst, const void* src, int bytes) {
#if defined(TESSERA_CUDA_HOST_EMULATION)
  tessera_cuda_emulation::cp_async16(dst, src, static_cast<unsigned>(bytes));
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const auto s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(bytes)
               : "memory");
#else
  (void)dst, (void)src, (void)bytes;  // callers run only where the code is built for sm_80
  __trap();
#endif
}

/// Closes the group of the copies this thread started since the last commit (an empty group
/// when there were none: waits count groups, so every thread commits the same number).
__device__ __forceinline__ void cuda_cp_async_commit() {
#if defined(TESSERA_CUDA_HOST_EMULATION)
  tessera_cuda_emulation::cp_async_commit();
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

/// Waits until all of this thread's groups but the newest Pending have landed. Other threads'
/// copies need a __syncthreads after their own waits.
template <int Pending>
__device__ __forceinline__ void cuda_cp_async_wait() {
#if defined(TESSERA_CUDA_HOST_EMULATION)
  tessera_cuda_emulation::cp_async_wait(Pending);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending) : "memory");
#endif
}

/// Calls f(o, i) for each 16-byte chunk of an [Outer x Inner] tile of E that this thread (of
/// Threads) copies: the chunk covers elements i .. i + 16 / sizeof(E) - 1 of row o. The same
/// chunks every step, so a thread can find again what it copied (the tf32 rounding does).
template <int Outer, int Inner, class E, int Threads, class F>
__device__ __forceinline__ void cuda_each_chunk(F f) {
  constexpr int V = 16 / static_cast<int>(sizeof(E)), per_row = Inner / V;
  constexpr int per_thread = Outer * per_row / Threads;
  static_assert(Inner % V == 0 && Outer * per_row % Threads == 0);
#pragma unroll
  for (int n = 0; n < per_thread; ++n) {
    const int c = static_cast<int>(threadIdx.x) + n * Threads;
    f(c / per_row, c % per_row * V);
  }
}

/// Starts this thread's copies (of Threads) of an [Outer x Inner] tile from src (element (o, i)
/// at src[o * src_ld + i]) to shared tile + at(o, i), where at keeps each chunk's elements
/// contiguous and 16-byte aligned (a padded or swizzled layout); elements past outer_left rows
/// or inner_left columns are zeros. Inner is the operand's contiguous direction in memory.
template <int Outer, int Inner, int Threads, class E, class At>
__device__ __forceinline__ void cuda_copy_tile(E* tile, At at, const E* src, int64_t src_ld,
                                               int64_t outer_left, int64_t inner_left) {
  constexpr int V = 16 / static_cast<int>(sizeof(E));
  cuda_each_chunk<Outer, Inner, E, Threads>([&](int o, int i) {
    const int64_t left = o < outer_left ? inner_left - i : 0;
    const int bytes = left <= 0 ? 0 : left >= V ? 16 : static_cast<int>(left * sizeof(E));
    // A chunk outside the matrix reads nothing, from an address that is aligned and valid.
    cuda_cp_async16(tile + at(o, i), bytes ? src + o * src_ld + i : src, bytes);
  });
}

/// Starts this thread's copies (of Threads) of one k step of a tiled product: the [BM x BK]
/// block of A at (m0, k0) into shared `as` at a_at and the [BK x BN] block of B at (k0, n0) into
/// `bs` at b_at, each operand read along its contiguous direction (A row-major, or column-major
/// when ACol; B likewise), zeros beyond the m x n x k product.
template <int BM, int BN, int BK, int Threads, bool ACol, bool BCol, class E, class AAt, class BAt>
__device__ __forceinline__ void cuda_copy_gemm_step(E* as, AAt a_at, E* bs, BAt b_at, const E* a,
                                                    int64_t lda, const E* b, int64_t ldb,
                                                    int64_t m0, int64_t n0, int64_t k0, int64_t m,
                                                    int64_t n, int64_t k) {
  if constexpr (ACol)
    cuda_copy_tile<BK, BM, Threads>(as, a_at, a + k0 * lda + m0, lda, k - k0, m - m0);
  else
    cuda_copy_tile<BM, BK, Threads>(as, a_at, a + m0 * lda + k0, lda, m - m0, k - k0);
  if constexpr (BCol)
    cuda_copy_tile<BN, BK, Threads>(bs, b_at, b + n0 * ldb + k0, ldb, n - n0, k - k0);
  else
    cuda_copy_tile<BK, BN, Threads>(bs, b_at, b + k0 * ldb + n0, ldb, k - k0, n - n0);
}

/// The k loop of a pipeline of S shared slots (step kt in slot kt % S), for every thread of the
/// block: request(kt) starts this thread's copies of step kt; landed(kt) runs once this thread's
/// copies of step kt have arrived, before the barrier that publishes everyone's (the tf32
/// rounding); multiply(kt) uses step kt. Lag: how many earlier steps' products may still be
/// reading their slots when multiply(kt) returns (asynchronous wgmma groups left in flight; 0
/// for products done when it returns). Steps 0 .. S - 2 - Lag are requested first; at step kt
/// each thread waits for its own copies (all but the newest S - 2 - Lag groups), a barrier makes
/// all of them visible and proves every warp finished multiply(kt - 1), and so the products of
/// step kt - 1 - Lag, then step kt + S - 1 - Lag goes into the slot step kt - 1 - Lag used. Every
/// thread commits one group per step, empty or not, so the group counts agree; the final wait
/// drains the (empty) groups, so none outlives the loop.
template <int S, int Lag = 0, class Request, class Landed, class Multiply>
__device__ __forceinline__ void cuda_pipelined_k_loop(int64_t steps, Request request, Landed landed,
                                                      Multiply multiply) {
  static_assert(Lag >= 0 && S >= 2 + Lag);
  constexpr int ahead = S - 1 - Lag;  // steps requested before the one multiplied
#pragma unroll
  for (int s = 0; s < ahead; ++s) {
    if (s < steps) request(int64_t{s});
    cuda_cp_async_commit();
  }
  for (int64_t kt = 0; kt < steps; ++kt) {
    cuda_cp_async_wait<ahead - 1>();
    landed(kt);
    __syncthreads();
    if (kt + ahead < steps) request(kt + ahead);
    cuda_cp_async_commit();
    multiply(kt);
  }
  cuda_cp_async_wait<0>();
}

}  // namespace detail
TESSERA_END_NAMESPACE

// tessera/backend/cuda/gemm_pack.cuh - GEMM operands copied with k contiguous: 8-bit ones for
// the mma.sync kernel (gemm_mma.cuh), which reads 8-bit fragments only from k-contiguous rows,
// and 8-bit and tf32 ones for the wgmma kernel (gemm_wgmma.cuh), whose instruction transposes
// only 16-bit operands. The convolution uses the same pack to copy images and weights to the
// channels-last order its pipelined implicit GEMM reads (conv.cuh).
//
// Why a pack rather than a transpose inside the product: ldmatrix.trans moves 16-bit elements,
// so an 8-bit operand whose contiguous direction is m or n would need every fragment's bytes
// transposed in registers (byte permutes and shuffles next to each mma), or copies through
// registers that transpose on their way to shared memory, which gives up cp.async; wgmma reads
// its operands from shared memory itself, in a layout it cannot transpose for these types. The
// pack reads and writes the operand once: k x n elements each way for B, against 2 m n k
// operations of product, so its share of the time falls as 1 / m (1 / n for A;
// docs/perf/cuda_gemm.md has the figures).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <optional>
#include <type_traits>

#include "block_shared.cuh"
#include "gemm_args.cuh"
#include "gemm_tc.cuh"
#include "launch.hpp"
#include "memory.hpp"

TESSERA_BEGIN_NAMESPACE
namespace detail {

inline constexpr int cuda_pack_tile = 64;  // a block moves 64 x 64 elements at a time
inline constexpr int cuda_pack_threads = 256;

/// dst[z][o][kk] = element (o, kk) of batch matrix z of src (src[off(z) + o * s_outer + kk *
/// s_k]) for o < outer, kk < k, and 0 for k <= kk < ld: rows of ld elements (16 bytes' worth a
/// multiple), so every row starts 16-byte aligned. T of 1, 2 or 4 bytes. Each 64 x 64 tile goes
/// through shared memory: read with consecutive threads along the source's unit stride (k when
/// s_k == 1, else o), written a 4-byte word per thread along k. Tf32 (T float): each element
/// written rounded to tf32 (to nearest, ties away, as the tensor-core kernels round what they
/// copy), so a kernel may read the copy as it is.
template <class T, bool Tf32 = false>
__global__ void __launch_bounds__(cuda_pack_threads)
    cuda_pack_k_major(const T* src, int64_t s_outer, int64_t s_k, const int64_t* off, int64_t bs,
                      int64_t batch, int64_t outer, int64_t k, T* dst, int64_t ld) {
  static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4);
  static_assert(!Tf32 || std::is_same_v<T, float>);
  constexpr int P = cuda_pack_tile, Threads = cuda_pack_threads;
  constexpr int W = 4 / static_cast<int>(sizeof(T));  // elements per word
  // Rows padded by one word: words stay 4-byte aligned, and a column read of 4-byte elements
  // meets 32 banks.
  TESSERA_CUDA_SHARED(__align__(16) T, sh, [P][P + W]);
  const int t = static_cast<int>(threadIdx.x);
  const int64_t tiles_k = (ld + P - 1) / P, tiles = (outer + P - 1) / P * tiles_k;
  const bool along_k = s_k == 1;
  for (int64_t z = blockIdx.y; z < batch; z += gridDim.y) {
    const T* s = src + cuda_batch_offset(off, bs, z);
    T* d = dst + z * outer * ld;
    for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
      const int64_t o0 = tile / tiles_k * P, k0 = tile % tiles_k * P;
#pragma unroll 4
      for (int i = 0; i < P * P / Threads; ++i) {
        const int e = t + Threads * i;
        const int o = along_k ? e / P : e % P, kk = along_k ? e % P : e / P;
        const int64_t go = o0 + o, gk = k0 + kk;
        sh[o][kk] = go < outer && gk < k ? s[go * s_outer + gk * s_k] : T(0);
      }
      __syncthreads();
#pragma unroll
      for (int i = 0; i < P * P / W / Threads; ++i) {
        const int w = t + Threads * i, o = w / (P / W), kk = w % (P / W) * W;
        const int64_t go = o0 + o, gk = k0 + kk;
        if (go < outer && gk < ld) {
          // A word of bytes moves as one uint32 (char storage may be read so); wider elements
          // move as themselves (a pun of them to uint32 would break strict aliasing).
          if constexpr (sizeof(T) == 1) {
            *reinterpret_cast<uint32_t*>(d + go * ld + gk) =
                *reinterpret_cast<const uint32_t*>(&sh[o][kk]);
          } else {
#pragma unroll
            for (int v = 0; v < W; ++v) {
              if constexpr (Tf32)
                d[go * ld + gk + v] = cuda_tc_tf32::convert(sh[o][kk + v]);
              else
                d[go * ld + gk + v] = sh[o][kk + v];
            }
          }
        }
      }
      __syncthreads();  // the next tile reuses sh
    }
  }
}

/// How many operands this process has packed k-contiguous (8-bit ones for the pipelined
/// kernels, tf32 ones for wgmma; tests check which operands were read in place).
inline std::atomic<int64_t>& cuda_gemm_packed_operands() {
  static std::atomic<int64_t> n{0};
  return n;
}

/// A GEMM operand as the kernels address it (cuda_gemm_args' fields for A or B), with o its
/// row (A) or column (B) index: element (o, kk) of batch matrix z is x[off(z) + o * s_outer + kk
/// * s_k], off(z) from the device array off, or z * bs without one.
template <class T>
struct cuda_gemm_operand {
  const T* x;
  int64_t s_outer, s_k;
  const int64_t* off;
  int64_t bs;
};

/// Packs operand v (outer x k per batch matrix) into scratch (created here, to live until the
/// product has been launched) with k contiguous, rows of k rounded up to 16 bytes, and returns
/// the packed operand. Batch matrices are packed once each,
/// or once in all when every batch index shares one (no offsets, batch stride 0). With tf32
/// (T float), every element rounded to tf32 on the way.
template <class T>
cuda_gemm_operand<T> cuda_pack_operand(const cuda_gemm_operand<T>& v, int64_t batch, int64_t outer,
                                       int64_t k, std::optional<cuda_scratch>& scratch,
                                       bool tf32 = false) {
  constexpr int64_t chunk = 16 / sizeof(T);  // elements per 16 bytes
  const int64_t ld = (k + chunk - 1) / chunk * chunk;
  const int64_t copies = v.off || v.bs ? batch : 1;
  T* dst =
      static_cast<T*>(scratch.emplace(static_cast<size_t>(copies * outer * ld) * sizeof(T)).get());
  const int64_t tiles =
      (outer + cuda_pack_tile - 1) / cuda_pack_tile * ((ld + cuda_pack_tile - 1) / cuda_pack_tile);
  const dim3 grid(cuda_grid(tiles * cuda_pack_threads, cuda_pack_threads),
                  static_cast<unsigned>(std::min<int64_t>(copies, 65535)));
  const auto launch = [&](auto kernel) {
    cuda_launch("cuda_pack_k_major", kernel, grid, dim3(cuda_pack_threads), v.x, v.s_outer, v.s_k,
                v.off, v.bs, copies, outer, k, dst, ld);
  };
  if constexpr (std::is_same_v<T, float>) {
    if (tf32) {
      launch(cuda_pack_k_major<T, true>);
    } else {
      launch(cuda_pack_k_major<T, false>);
    }
  } else {
    launch(cuda_pack_k_major<T, false>);
  }
  cuda_gemm_packed_operands().fetch_add(1, std::memory_order_relaxed);
  return {dst, ld, 1, nullptr, copies > 1 ? outer * ld : 0};
}

}  // namespace detail
TESSERA_END_NAMESPACE

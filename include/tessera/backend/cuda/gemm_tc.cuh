// tessera/backend/cuda/gemm_tc.cuh - the tensor-core matrix product (sm_80 and newer) through
// the WMMA API, for three families of inputs (cuda_tc_select picks one, or none):
//  - 16-bit floats: fp16 tensor cores when both operands convert to half exactly (half,
//    float8_e4m3, float8_e5m2), bf16 ones when both convert to bfloat16 exactly (bfloat16, fp8);
//    float accumulation;
//  - tf32: float x float when the user allowed it (set_float32_matmul_precision(high)): inputs
//    rounded to tf32 (round to nearest, ties away) on their way into shared memory, float
//    accumulation;
//  - 8-bit integers: int8 x int8 or uint8 x uint8, int32 accumulation (exact; wraps on overflow
//    like the SIMT kernel).
// The same epilogue as the SIMT kernel (alpha, beta, bias, ReLU), any strides and batches.
//
// Why WMMA rather than raw mma.sync first: WMMA's contract is stated per 16 x 16 tile (which
// element of a fragment a lane holds is opaque), so the host emulation of the CUDA runtime can
// model it exactly and check this kernel's tiling, tails and epilogue without a GPU. WMMA
// compiles to the same mma.sync instructions; ldmatrix, cp.async pipelines and wgmma are the
// next steps once a GPU can measure them (docs/cuda_internals.md).
//
// The kernel: 128 x 128 output tiles, 256 threads = 8 warps in a 2 x 4 grid, each warp 64 x 32
// outputs as 4 x 2 accumulator fragments of 16 x 16; k in steps of bk (32, or 16 for tf32's
// 4-byte elements) through shared memory, converted on the way in (zero outside the matrix),
// the next step loaded into registers while the current one is multiplied (two shared buffers,
// one barrier per step). The shared layouts are each family's (cuda_tc_16bit, cuda_tc_tf32,
// cuda_tc_int8): WMMA wants every fragment's first element 32-byte aligned.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <cstdint>
#include <type_traits>

#include "../../core/bfloat16.hpp"
#include "../../core/float8.hpp"
#include "../../core/half.hpp"
#include "../../core/matmul_precision.hpp"
#include "block_shared.cuh"
#include "error.hpp"
#include "gemm_args.cuh"
#include "mma_sync.cuh"

TESSERA_BEGIN_NAMESPACE
namespace detail {

inline constexpr int cuda_tc_bm = 128, cuda_tc_bn = 128;
inline constexpr int cuda_tc_threads = 256;
inline constexpr int cuda_tc_ldc = 16 + 4;  // a warp's staging tile for one accumulator fragment

/// Row-major shared tiles A [128][bk + 8] and B [bk][136], for the families whose elements are
/// at least 2 bytes: the row strides are multiples of 8 elements (WMMA wants 16-byte multiples)
/// that stagger rows across banks, and every fragment start is 32-byte aligned.
template <int BK>
struct cuda_tc_row_major_tiles {
  static constexpr bool b_col_major = false;  // how B's fragments are read
  static constexpr int bk = BK, lda = BK + 8, ldb = cuda_tc_bn + 8;
  static constexpr int a_elems = cuda_tc_bm * lda, b_elems = bk * ldb;
  __device__ static int a_at(int row, int k) { return row * lda + k; }
  __device__ static int b_at(int k, int col) { return k * ldb + col; }
};

/// 16-bit float inputs (In = __half or __nv_bfloat16): tiles [128][40] and [32][136].
template <class In>
struct cuda_tc_16bit : cuda_tc_row_major_tiles<32> {
  using elem = std::uint16_t;  // what the shared tiles hold: In's bits
  using frag = In;             // WMMA's input type (cuda_tf32_tag: precision::tf32)
  using frag_ptr = In;         // what load_matrix_sync reads
  using acc = float;
  static constexpr int fk = 16;
  static constexpr bool allowed() { return true; }
  /// v's bits in In (exact for the types cuda_tc_select admits).
  template <class T>
  __device__ static elem convert(T v) {
    if constexpr (std::is_same_v<In, __half>) {
      if constexpr (std::is_same_v<T, half>)
        return v.bits;
      else
        return half(static_cast<float>(v)).bits;
    } else {
      if constexpr (std::is_same_v<T, bfloat16>)
        return v.bits;
      else
        return bfloat16(static_cast<float>(v)).bits;
    }
  }
};

/// float inputs on tf32 tensor cores (16 x 16 x 8 fragments): float tiles [128][24] and
/// [16][136], k steps of 16 (two buffers of 32-wide float tiles would pass the 48 KB of static
/// shared memory). Rounding happens once, at the load into shared memory, not per fragment load
/// (each element is loaded into fragments by several warps).
struct cuda_tc_tf32 : cuda_tc_row_major_tiles<16> {
  using elem = float;
  using frag = cuda_tf32_tag;
  using frag_ptr = float;
  using acc = float;
  static constexpr int fk = 8;
  /// tf32 changes results: only when the user asked for it.
  static bool allowed() { return get_float32_matmul_precision() == matmul_precision::high; }
  template <class T>
  __device__ static elem convert(T v) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    return nvcuda::wmma::__float_to_tf32(static_cast<float>(v));
#else
    return static_cast<float>(v);  // not reached: the kernel traps below sm_80
#endif
  }
};

/// 8-bit integers (In = signed char or unsigned char), int32 accumulation. WMMA's 8-bit
/// fragments need 32-byte-aligned pointers, which a row-major [128][32 + pad] byte tile gives
/// only at k offset 0; so both tiles are k-block-major: [k / 16][128][16], A's rows and B's
/// columns 16 contiguous bytes each (B is read as a column-major fragment).
template <class In>
struct cuda_tc_int8 {
  using elem = In;
  using frag = In;
  using frag_ptr = In;
  using acc = int32_t;
  static constexpr bool b_col_major = true;
  static constexpr int fk = 16, bk = 32, lda = 16, ldb = 16;
  static constexpr int a_elems = cuda_tc_bm * bk, b_elems = bk * cuda_tc_bn;
  static constexpr bool allowed() { return true; }
  __device__ static int a_at(int row, int k) {
    return (k / 16) * (cuda_tc_bm * 16) + row * 16 + k % 16;
  }
  __device__ static int b_at(int k, int col) {
    return (k / 16) * (cuda_tc_bn * 16) + col * 16 + k % 16;
  }
  template <class T>
  __device__ static elem convert(T v) {
    return static_cast<In>(v);
  }
};

/// The tensor-core family for a product of TA x TB accumulated in Acc, or void (the SIMT kernel
/// runs). fp8 values are exact in both 16-bit formats; half is preferred.
template <class TA, class TB, class Acc>
struct cuda_tc_select {
  template <class T>
  static constexpr bool half_exact = std::is_same_v<T, half> || is_float8_v<T>;
  template <class T>
  static constexpr bool bf16_exact = std::is_same_v<T, bfloat16> || is_float8_v<T>;
  template <class T>
  static constexpr bool both = std::is_same_v<TA, T>&& std::is_same_v<TB, T>;
  using floats = std::conditional_t<
      half_exact<TA> && half_exact<TB>, cuda_tc_16bit<__half>,
      std::conditional_t<bf16_exact<TA> && bf16_exact<TB>, cuda_tc_16bit<__nv_bfloat16>,
                         std::conditional_t<both<float>, cuda_tc_tf32, void>>>;
  using ints =
      std::conditional_t<both<int8_t>, cuda_tc_int8<signed char>,
                         std::conditional_t<both<uint8_t>, cuda_tc_int8<unsigned char>, void>>;
  using type = std::conditional_t<std::is_same_v<Acc, float>, floats,
                                  std::conditional_t<std::is_same_v<Acc, int32_t>, ints, void>>;
};

/// Shared memory of the kernel for family Cfg: two buffers of each tile while multiplying, the
/// warps' staging tiles (8 x [16][20] accumulators) after.
template <class Cfg>
inline constexpr int cuda_tc_smem_bytes = [] {
  const int tiles =
      2 * (Cfg::a_elems + Cfg::b_elems) * static_cast<int>(sizeof(typename Cfg::elem));
  const int staging = 8 * 16 * cuda_tc_ldc * static_cast<int>(sizeof(typename Cfg::acc));
  return tiles > staging ? tiles : staging;
}();
static_assert(cuda_tc_smem_bytes<cuda_tc_16bit<__half>> <= 48 * 1024 &&
                  cuda_tc_smem_bytes<cuda_tc_tf32> <= 48 * 1024 &&
                  cuda_tc_smem_bytes<cuda_tc_int8<signed char>> <= 48 * 1024,
              "static shared memory limit");

/// Whether the code of kernel that runs on the current device was compiled with __CUDA_ARCH__ >=
/// arch * 10. That is the virtual architecture (ptxVersion), not the device's: a build for
/// compute_70 JIT-compiled for an sm_90 device still holds the compute_70 body.
template <class Kernel>
bool cuda_built_for(Kernel* kernel, int arch) {
  cudaFuncAttributes a{};
  TESSERA_CUDA_CHECK(cudaFuncGetAttributes(&a, kernel));
  return a.ptxVersion >= arch;
}

/// Where value i (of N) of this thread's share of a [Rows x Cols] slice lies in the slice.
/// Consecutive threads follow the operand's unit stride: along a row when by_row (column stride
/// 1), down a column otherwise. Recomputed at the store rather than kept from the load: N fewer
/// registers per operand in a kernel that is short of them.
template <int Rows, int Cols>
__device__ __forceinline__ void cuda_tc_pos(bool by_row, int i, int& row, int& col) {
  const int t = threadIdx.x;
  row = by_row ? t / Cols + (cuda_tc_threads / Cols) * i : t % Rows;
  col = by_row ? t % Cols : t / Rows + (cuda_tc_threads / Rows) * i;
}

/// Loads this thread's N values of the [Rows x Cols] slice at (r0, c0) of a [rows x cols]
/// operand with strides (rs, cs), converted for the shared tiles of family Cfg (0 outside the
/// matrix). Along i a thread moves by a fixed number of rows (by_row) or columns, so one base
/// pointer, one step and one bound serve all N (64-bit index arithmetic per element cost
/// registers and spills).
template <class Cfg, int Rows, int Cols, int N, class T>
__device__ __forceinline__ void cuda_tc_load(const T* x, int64_t rs, int64_t cs, int64_t rows,
                                             int64_t cols, int64_t r0, int64_t c0,
                                             typename Cfg::elem (&r)[N]) {
  static_assert(Rows * Cols == N * cuda_tc_threads);
  using E = typename Cfg::elem;
  const bool by_row = cs == 1;
  int row, col;
  cuda_tc_pos<Rows, Cols>(by_row, 0, row, col);
  const int di = by_row ? cuda_tc_threads / Cols : cuda_tc_threads / Rows;
  const int64_t step = di * (by_row ? rs : cs);
  const int64_t room = by_row ? rows - r0 - row : cols - c0 - col;  // inside while i * di < room
  const bool inside = by_row ? c0 + col < cols : r0 + row < rows;
  const T* const base = x + (r0 + row) * rs + (c0 + col) * cs;
#pragma unroll
  for (int i = 0; i < N; ++i) r[i] = inside && i * di < room ? Cfg::convert(base[i * step]) : E{0};
}

/// Stores what cuda_tc_load loaded into a shared tile; at(row, col) is the tile's layout.
template <int Rows, int Cols, int N, class E, class At>
__device__ __forceinline__ void cuda_tc_store(E* tile, bool by_row, const E (&r)[N], At at) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
    int row, col;
    cuda_tc_pos<Rows, Cols>(by_row, i, row, col);
    tile[at(row, col)] = r[i];
  }
}

/// acc += this warp's 64 x 32 share of one shared k step of family Cfg: A and B tiles at `at`
/// and `bt`, laid out as Tiles says (a_at, lda, b_at, ldb), read as ALayout and BLayout
/// fragments of Cfg's input type. The inner loop of both tensor-core kernels.
template <class Cfg, class Tiles, bool ACol, bool BCol, class Frag>
__device__ __forceinline__ void cuda_tc_multiply_step(Frag (&acc)[4][2],
                                                      const typename Cfg::frag_ptr* at,
                                                      const typename Cfg::frag_ptr* bt, int wm,
                                                      int wn) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800  // mma.h may not declare WMMA here
  (void)acc, (void)at, (void)bt, (void)wm, (void)wn;
#else
  namespace wmma = nvcuda::wmma;
  using In = std::conditional_t<std::is_same_v<typename Cfg::frag, cuda_tf32_tag>,
                                wmma::precision::tf32, typename Cfg::frag>;
  using ALayout = std::conditional_t<ACol, wmma::col_major, wmma::row_major>;
  using BLayout = std::conditional_t<BCol, wmma::col_major, wmma::row_major>;
  constexpr int FK = Cfg::fk;
#pragma unroll
  for (int kk = 0; kk < Cfg::bk; kk += FK) {
    wmma::fragment<wmma::matrix_a, 16, 16, FK, In, ALayout> fa[4];
    wmma::fragment<wmma::matrix_b, 16, 16, FK, In, BLayout> fb[2];
#pragma unroll
    for (int i = 0; i < 4; ++i)
      wmma::load_matrix_sync(fa[i], at + Tiles::a_at(wm * 64 + i * 16, kk), Tiles::lda);
#pragma unroll
    for (int j = 0; j < 2; ++j)
      wmma::load_matrix_sync(fb[j], bt + Tiles::b_at(kk, wn * 32 + j * 16), Tiles::ldb);
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
  }
#endif
}

/// The WMMA kernels' epilogue (cuda_gemm_store_part: into c, or the raw sums into part under a
/// split k) for a warp's 64 x 32 outputs at (r0, c0): one 16 x 16 accumulator fragment at a time
/// through the warp's staging tile Cs ([16][20]).
template <class TA, class TB, class Acc, class TC, class Frag>
__device__ __forceinline__ void cuda_tc_epilogue(const cuda_gemm_args<TA, TB, Acc, TC>& p, TC* c,
                                                 Acc* part, Frag (&acc)[4][2], Acc* Cs, int64_t r0,
                                                 int64_t c0, int lane) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800  // mma.h may not declare WMMA here
  (void)p, (void)c, (void)part, (void)acc, (void)Cs, (void)r0, (void)c0, (void)lane;
#else
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      nvcuda::wmma::store_matrix_sync(Cs, acc[i][j], cuda_tc_ldc, nvcuda::wmma::mem_row_major);
      __syncwarp();
#pragma unroll 1  // the epilogue is a small share of the time; unrolled, it costs registers
      for (int e = lane; e < 256; e += 32) {
        const int64_t gi = r0 + i * 16 + e / 16, gj = c0 + j * 16 + e % 16;
        if (gi < p.m && gj < p.n)
          cuda_gemm_store_part(p, c, part, gi, gj, Cs[(e / 16) * cuda_tc_ldc + e % 16]);
      }
      __syncwarp();  // the staging tile is rewritten by the next fragment
    }
#endif
}

/// One 128 x 128 tile of matrix blockIdx.z (+ 65535 * i for large batches) per block, on the
/// tensor cores of family Cfg; with Gather, B is a convolution's input read through p.conv; with
/// KGather, the product is a convolution's weight gradient, A (dy) and B (the lowered input)
/// gathered over (image, pixel) pairs through p.kgather and p.conv (cuda_conv_k_gather). Same
/// arguments and results as cuda_gemm_simt<TA, TB, Acc> up to the inputs' rounding (tf32 only) and
/// the order of the float additions inside a k step (which the hardware fixes: results do not
/// depend on the launch).
template <class Cfg, class TA, class TB, bool Gather = false, class TC = typename Cfg::acc,
          bool KGather = false>
__global__ void __launch_bounds__(cuda_tc_threads)
    cuda_gemm_tc(cuda_gemm_args<TA, TB, typename Cfg::acc, TC> p, int64_t batch) {
  static_assert(!(Gather && KGather), "one gather at a time");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  // bf16 and tf32 WMMA need sm_80 (int8 sm_72, fp16 sm_70: they wait for sm_80 too); the host
  // launches this kernel only where cuda_built_for(..., 80) holds, so this code is never reached.
  (void)p, (void)batch;
  __trap();
#else
  namespace wmma = nvcuda::wmma;
  using E = typename Cfg::elem;
  using F = typename Cfg::frag_ptr;
  using Acc = typename Cfg::acc;
  constexpr int BM = cuda_tc_bm, BN = cuda_tc_bn, BK = Cfg::bk, FK = Cfg::fk;
  constexpr int NA = BM * BK / cuda_tc_threads, NB = BK * BN / cuda_tc_threads;
  // A and B tiles (two buffers each) while multiplying; the warps' staging tiles after.
  TESSERA_CUDA_SHARED(__align__(128) unsigned char, smem, [cuda_tc_smem_bytes<Cfg>]);
  E* const As = reinterpret_cast<E*>(smem);
  E* const Bs = As + 2 * Cfg::a_elems;
  const int t = threadIdx.x, warp = t / 32, lane = t % 32;
  const int wm = warp / 4, wn = warp % 4;  // the warp's 64 x 32 piece of the tile
  Acc* const Cs = reinterpret_cast<Acc*>(smem) + warp * 16 * cuda_tc_ldc;
  const int64_t m0 = int64_t{blockIdx.y} * BM, n0 = int64_t{blockIdx.x} * BN;
  // The [128 x BK] slice of A at (m0, k0) and the [BK x 128] slice of B at (k0, n0), through
  // registers (ra, rb) into shared buffer buf.
  E ra[NA], rb[NB];
  const auto load = [&](const TA* a, const TB* b, int64_t k0) {
    int row, col;
    if constexpr (KGather) {
      cuda_tc_pos<BM, BK>(true, 0, row, col);
      cuda_k_gather_load_a(a, p.kgather, p.a_rs, p.m, p.k, m0, k0, row, col, cuda_tc_threads / BK,
                           ra, [](TA v) { return Cfg::convert(v); });
    } else {
      cuda_tc_load<Cfg, BM, BK>(a, p.a_rs, p.a_cs, p.m, p.k, m0, k0, ra);
    }
    if constexpr (Gather) {  // implicit GEMM: B from the image, laid out as by_row
      cuda_tc_pos<BK, BN>(true, 0, row, col);
      cuda_conv_gather_load(b, p.conv, p.k, p.n, k0, n0, row, col, cuda_tc_threads / BN, rb,
                            [](TB v) { return Cfg::convert(v); });
    } else if constexpr (KGather) {
      cuda_tc_pos<BK, BN>(false, 0, row, col);
      cuda_k_gather_load_b(b, p.conv, p.kgather, p.k, p.n, k0, n0, row, col, cuda_tc_threads / BK,
                           rb, [](TB v) { return Cfg::convert(v); });
    } else {
      cuda_tc_load<Cfg, BK, BN>(b, p.b_rs, p.b_cs, p.k, p.n, k0, n0, rb);
    }
  };
  const auto store = [&](int buf) {
    // KGather: A is read k-fast (by_row), B k-fast down its columns (not by_row), each thread's
    // k index one (image, pixel) pair. (Found here, from the parameters, rather than held
    // through the loop: the tf32 kernel has no register to spare.)
    cuda_tc_store<BM, BK>(As + buf * Cfg::a_elems, KGather || p.a_cs == 1, ra,
                          [](int r, int c) { return Cfg::a_at(r, c); });
    cuda_tc_store<BK, BN>(Bs + buf * Cfg::b_elems, Gather || (!KGather && p.b_cs == 1), rb,
                          [](int r, int c) { return Cfg::b_at(r, c); });
  };
  for (int64_t z = blockIdx.z; z < batch * p.splits; z += gridDim.z) {
    const auto [zb, k_begin, steps] = cuda_split_of<BK>(p, z, batch);
    const auto [a, b, c] = cuda_batch_matrix_at<TA, TB>(p, zb);
    const int64_t k_end = k_begin + steps * BK;
    wmma::fragment<wmma::accumulator, 16, 16, FK, Acc> acc[4][2];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], Acc(0));

    if (p.alpha != Acc(0)) {
      load(a, b, k_begin);
      int buf = 0;
      store(buf);
      __syncthreads();
      for (int64_t k0 = k_begin; k0 < k_end; k0 += BK) {
        const bool more = k0 + BK < k_end;
        if (more) load(a, b, k0 + BK);  // the next slice, into registers, while this one is used
        cuda_tc_multiply_step<Cfg, Cfg, false, Cfg::b_col_major>(
            acc, reinterpret_cast<const F*>(As + buf * Cfg::a_elems),
            reinterpret_cast<const F*>(Bs + buf * Cfg::b_elems), wm, wn);
        if (more) {
          // The other buffer was last read before the previous barrier: safe to overwrite.
          buf ^= 1;
          store(buf);
          __syncthreads();
        }
      }
    }
    __syncthreads();  // every warp is done with the tiles: the staging tiles overlay them

    Acc* const part = cuda_gemm_part_of(p, z);  // split k: raw sums, else null
    cuda_tc_epilogue(p, c, part, acc, Cs, m0 + wm * 64, n0 + wn * 32, lane);
    __syncthreads();  // the next batch matrix reuses the shared tiles
  }
#endif
}

}  // namespace detail
TESSERA_END_NAMESPACE

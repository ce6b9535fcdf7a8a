// tessera/backend/cuda/gemm_tc.cuh - the tensor-core matrix product for 16- and 8-bit float
// inputs (sm_80 and newer), through the WMMA API: fp16 tensor cores when both operands convert
// to half exactly (half, float8_e4m3, float8_e5m2), bf16 tensor cores when both convert to
// bfloat16 exactly (bfloat16, either fp8); float accumulation, the same epilogue as the SIMT
// kernel (alpha, beta, bias, ReLU), any strides and batches.
//
// Why WMMA rather than raw mma.sync first: WMMA's contract is stated per 16 x 16 tile (which
// element of a fragment a lane holds is opaque), so the host emulation of the CUDA runtime can
// model it exactly and check this kernel's tiling, tails and epilogue without a GPU. WMMA
// compiles to the same mma.sync instructions; ldmatrix, cp.async pipelines and wgmma are the
// next steps once a GPU can measure them (docs/cuda.md).
//
// The kernel: 128 x 128 output tiles, 256 threads = 8 warps in a 2 x 4 grid, each warp 64 x 32
// outputs as 4 x 2 accumulator fragments of 16 x 16; k in steps of 32 through shared memory,
// converted to 16-bit on the way in (zero outside the matrix), the next step loaded into
// registers while the current one is multiplied (two shared buffers, one barrier per step).
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
#include "error.hpp"
#include "gemm_args.cuh"

TESSERA_BEGIN_NAMESPACE
namespace detail {

template <class T>
inline constexpr bool cuda_is_fp8 =
    std::is_same_v<T, float8_e4m3> || std::is_same_v<T, float8_e5m2>;

/// The 16-bit tensor-core input type for a pair of operand types: __half when both are exact in
/// half, __nv_bfloat16 when both are exact in bfloat16 (and not both fp8: half is preferred),
/// void when neither (the SIMT kernel runs). fp8 values are exact in both 16-bit formats.
template <class TA, class TB, class Acc>
struct cuda_tc_input {
  template <class T>
  static constexpr bool half_exact = std::is_same_v<T, half> || cuda_is_fp8<T>;
  template <class T>
  static constexpr bool bf16_exact = std::is_same_v<T, bfloat16> || cuda_is_fp8<T>;
  using type =
      std::conditional_t<!std::is_same_v<Acc, float>, void,
                         std::conditional_t<half_exact<TA> && half_exact<TB>, __half,
                                            std::conditional_t<bf16_exact<TA> && bf16_exact<TB>,
                                                               __nv_bfloat16, void>>>;
};

inline constexpr int cuda_tc_bm = 128, cuda_tc_bn = 128, cuda_tc_bk = 32;
inline constexpr int cuda_tc_threads = 256;
// Row strides of the shared tiles, in elements: multiples of 8 (WMMA wants 16-byte multiples
// for 16-bit types, 4 floats for float) that stagger rows across banks.
inline constexpr int cuda_tc_lda = cuda_tc_bk + 8;  // A tile [128][40]
inline constexpr int cuda_tc_ldb = cuda_tc_bn + 8;  // B tile [32][136]
inline constexpr int cuda_tc_ldc = 16 + 4;          // a warp's float staging tile [16][20]
inline constexpr int cuda_tc_a_elems = cuda_tc_bm * cuda_tc_lda;
inline constexpr int cuda_tc_b_elems = cuda_tc_bk * cuda_tc_ldb;
inline constexpr int cuda_tc_smem_bytes = 2 * (cuda_tc_a_elems + cuda_tc_b_elems) * 2;
static_assert(cuda_tc_smem_bytes >= 8 * 16 * cuda_tc_ldc * 4, "staging must fit in the tiles");
static_assert(cuda_tc_smem_bytes <= 48 * 1024, "static shared memory limit");

/// Whether the code of kernel that runs on the current device was compiled with __CUDA_ARCH__ >=
/// arch * 10. That is the virtual architecture (ptxVersion), not the device's: a build for
/// compute_70 JIT-compiled for an sm_90 device still holds the compute_70 body.
template <class Kernel>
bool cuda_built_for(Kernel* kernel, int arch) {
  cudaFuncAttributes a{};
  TESSERA_CUDA_CHECK(cudaFuncGetAttributes(&a, kernel));
  return a.ptxVersion >= arch;
}

/// The bits of v in the 16-bit input format In (exact for the types cuda_tc_input admits).
template <class In, class T>
__device__ __forceinline__ std::uint16_t cuda_tc_bits(T v) {
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

/// Where value i (of 16) of this thread's share of a [Rows x Cols] slice lies in the slice.
/// Consecutive threads follow the operand's unit stride: along a row when by_row (column stride
/// 1), down a column otherwise. Recomputed at the store rather than kept from the load: 16 fewer
/// registers per operand in a kernel that is short of them.
template <int Rows, int Cols>
__device__ __forceinline__ void cuda_tc_pos(bool by_row, int i, int& row, int& col) {
  static_assert(Rows * Cols == 16 * cuda_tc_threads);
  const int t = threadIdx.x;
  row = by_row ? t / Cols + (cuda_tc_threads / Cols) * i : t % Rows;
  col = by_row ? t % Cols : t / Rows + (cuda_tc_threads / Rows) * i;
}

/// Loads this thread's 16 values of the [Rows x Cols] slice at (r0, c0) of a [rows x cols]
/// operand with strides (rs, cs) as 16-bit In values (0 outside the matrix). Along i a thread
/// moves by a fixed number of rows (by_row) or columns, so one base pointer, one step and one
/// bound serve all 16 (64-bit index arithmetic per element cost registers and spills).
template <class In, int Rows, int Cols, class T>
__device__ __forceinline__ void cuda_tc_load(const T* x, int64_t rs, int64_t cs, int64_t rows,
                                             int64_t cols, int64_t r0, int64_t c0,
                                             std::uint16_t (&r)[16]) {
  const bool by_row = cs == 1;
  int row, col;
  cuda_tc_pos<Rows, Cols>(by_row, 0, row, col);
  const int di = by_row ? cuda_tc_threads / Cols : cuda_tc_threads / Rows;
  const int64_t step = di * (by_row ? rs : cs);
  const int64_t room = by_row ? rows - r0 - row : cols - c0 - col;  // inside while i * di < room
  const bool inside = by_row ? c0 + col < cols : r0 + row < rows;
  const T* const base = x + (r0 + row) * rs + (c0 + col) * cs;
#pragma unroll
  for (int i = 0; i < 16; ++i)
    r[i] = inside && i * di < room ? cuda_tc_bits<In>(base[i * step]) : std::uint16_t{0};
}

/// Stores what cuda_tc_load loaded into a shared tile of row stride Ld.
template <int Rows, int Cols, int Ld>
__device__ __forceinline__ void cuda_tc_store(std::uint16_t* tile, bool by_row,
                                              const std::uint16_t (&r)[16]) {
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    int row, col;
    cuda_tc_pos<Rows, Cols>(by_row, i, row, col);
    tile[row * Ld + col] = r[i];
  }
}

/// One 128 x 128 tile of matrix blockIdx.z (+ 65535 * i for large batches) per block, on the
/// tensor cores. Same arguments and results as cuda_gemm_simt<TA, TB, float> up to the order
/// of the float additions inside a 16-wide k step (which the hardware fixes: results do not
/// depend on the launch).
template <class In, class TA, class TB>
__global__ void __launch_bounds__(cuda_tc_threads)
    cuda_gemm_tc(cuda_gemm_args<TA, TB, float> p, int64_t batch) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  // 16-bit WMMA with bf16 needs sm_80; the host launches this kernel only where
  // cuda_built_for(..., 80) holds, so this code is never reached.
  (void)p, (void)batch;
  __trap();
#else
  namespace wmma = nvcuda::wmma;
  constexpr int BM = cuda_tc_bm, BN = cuda_tc_bn, BK = cuda_tc_bk;
  // A and B tiles (two buffers each) while multiplying; the warps' float staging tiles after.
  __shared__ __align__(128) unsigned char smem[cuda_tc_smem_bytes];
  std::uint16_t* const As = reinterpret_cast<std::uint16_t*>(smem);
  std::uint16_t* const Bs = As + 2 * cuda_tc_a_elems;
  const int t = threadIdx.x, warp = t / 32, lane = t % 32;
  const int wm = warp / 4, wn = warp % 4;  // the warp's 64 x 32 piece of the tile
  float* const Cs = reinterpret_cast<float*>(smem) + warp * 16 * cuda_tc_ldc;
  const int64_t m0 = int64_t{blockIdx.y} * BM, n0 = int64_t{blockIdx.x} * BN;
  // The [128 x 32] slice of A at (m0, k0) and the [32 x 128] slice of B at (k0, n0), through
  // registers (ra, rb) into shared buffer buf.
  std::uint16_t ra[16], rb[16];
  const auto load = [&](const TA* a, const TB* b, int64_t k0) {
    cuda_tc_load<In, BM, BK>(a, p.a_rs, p.a_cs, p.m, p.k, m0, k0, ra);
    cuda_tc_load<In, BK, BN>(b, p.b_rs, p.b_cs, p.k, p.n, k0, n0, rb);
  };
  const auto store = [&](int buf) {
    cuda_tc_store<BM, BK, cuda_tc_lda>(As + buf * cuda_tc_a_elems, p.a_cs == 1, ra);
    cuda_tc_store<BK, BN, cuda_tc_ldb>(Bs + buf * cuda_tc_b_elems, p.b_cs == 1, rb);
  };
  for (int64_t z = blockIdx.z; z < batch; z += gridDim.z) {
    const TA* a = p.a + (p.a_off ? p.a_off[z] : 0);
    const TB* b = p.b + (p.b_off ? p.b_off[z] : 0);
    float* c = p.c + (p.c_off ? p.c_off[z] : 0);
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[4][2];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

    if (p.alpha != 0.0f) {
      load(a, b, 0);
      int buf = 0;
      store(buf);
      __syncthreads();
      for (int64_t k0 = 0; k0 < p.k; k0 += BK) {
        const bool more = k0 + BK < p.k;
        if (more) load(a, b, k0 + BK);  // the next slice, into registers, while this one is used
        const In* at = reinterpret_cast<const In*>(As + buf * cuda_tc_a_elems);
        const In* bt = reinterpret_cast<const In*>(Bs + buf * cuda_tc_b_elems);
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
          wmma::fragment<wmma::matrix_a, 16, 16, 16, In, wmma::row_major> fa[4];
          wmma::fragment<wmma::matrix_b, 16, 16, 16, In, wmma::row_major> fb[2];
#pragma unroll
          for (int i = 0; i < 4; ++i)
            wmma::load_matrix_sync(fa[i], at + (wm * 64 + i * 16) * cuda_tc_lda + kk, cuda_tc_lda);
#pragma unroll
          for (int j = 0; j < 2; ++j)
            wmma::load_matrix_sync(fb[j], bt + kk * cuda_tc_ldb + wn * 32 + j * 16, cuda_tc_ldb);
#pragma unroll
          for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
        }
        if (more) {
          // The other buffer was last read before the previous barrier: safe to overwrite.
          buf ^= 1;
          store(buf);
          __syncthreads();
        }
      }
    }
    __syncthreads();  // every warp is done with the tiles: the staging tiles overlay them

    // Epilogue (cuda_gemm_store), one 16 x 16 fragment at a time through the warp's staging
    // tile.
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        wmma::store_matrix_sync(Cs, acc[i][j], cuda_tc_ldc, wmma::mem_row_major);
        __syncwarp();
#pragma unroll 1  // the epilogue is a small share of the time; unrolled, it costs registers
        for (int e = lane; e < 256; e += 32) {
          const int64_t gi = m0 + wm * 64 + i * 16 + e / 16;
          const int64_t gj = n0 + wn * 32 + j * 16 + e % 16;
          if (gi < p.m && gj < p.n)
            cuda_gemm_store(p, c, gi, gj, Cs[(e / 16) * cuda_tc_ldc + e % 16]);
        }
        __syncwarp();  // the staging tile is rewritten by the next fragment
      }
    __syncthreads();  // the next batch matrix reuses the shared tiles
  }
#endif
}

}  // namespace detail
TESSERA_END_NAMESPACE

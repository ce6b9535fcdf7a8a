// tessera/backend/cuda/gemm.cuh - the CUDA matrix product: gemm_kernel<cuda> runs a
// detail::gemm_problem (any strides, batches, alpha/beta, bias, ReLU) with a tiled SIMT kernel
// for every input type the CPU GEMM takes (float, double, half, bfloat16, fp8 -> float; int8 /
// uint8 -> int32 exact).
//
// The kernel: 128 x 128 output tiles, 256 threads, each thread 8 x 8 outputs in registers (four
// 4 x 4 quads, read from shared memory as 4-wide vectors); float products of at most 64 rows
// (a batch-64 layer, a convolution's 32 or 64 channels) on 64 x 128 tiles, 4 x 8 outputs per
// thread, instead of half-empty 128-row ones (cuda_gemm_simt_short_choice); k in steps of 8 through
// shared memory, the next step's tile loaded into registers while the current one is multiplied
// (two shared buffers, one barrier per step). Loads follow whichever of the operand's strides is 1,
// so row- and column-major operands (transposes as views) both read whole 32-byte sectors per warp.
// Accumulation is in Acc in a fixed order (k ascending), so a result does not depend on the launch
// geometry. Where the code was built for sm_80 or newer, 16- and 8-bit floats, int8 x int8, uint8 x
// uint8, and float x float under set_float32_matmul_precision(high) run on the tensor cores instead
// (gemm_tc.cuh), through the multi-stage cp.async pipeline (gemm_tc_async.cuh) when the operands
// are half, bfloat16 or float in row- or column-major layouts with 16-byte aligned rows.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>
#include <vector>

#include "../../core/dtype.hpp"
#include "../../kernel/gemm_problem.hpp"
#include "block_shared.cuh"
#include "error.hpp"
#include "gemm_args.cuh"
#include "gemm_choice.cuh"
#include "gemm_tc.cuh"
#include "gemm_tc_async.cuh"
#include "launch.hpp"
#include "memory.hpp"

TESSERA_BEGIN_NAMESPACE
namespace detail {

inline constexpr int cuda_gemm_bm = 128, cuda_gemm_bn = 128, cuda_gemm_bk = 8;
inline constexpr int cuda_gemm_threads = 256;
/// Rows of the SIMT kernel's short tile: products with at most this many rows use it.
inline constexpr int cuda_gemm_bm_short = 64;

/// An input element in the accumulation type (low-precision floats through float).
template <class Acc, class T>
__device__ __forceinline__ Acc cuda_gemm_in(T v) {
  return static_cast<Acc>(static_cast<compute_t<T>>(v));
}

/// Loads the [BM x 8] slice of A at (row m0, column k0) into BM / 32 registers per thread (zero
/// outside the matrix). With a_cs == 1 eight consecutive threads read one row's 8 k values; else
/// consecutive threads read consecutive rows of one k column.
template <int BM, class Acc, class TA>
__device__ __forceinline__ void cuda_gemm_load_a(const TA* a, int64_t a_rs, int64_t a_cs, int64_t m,
                                                 int64_t k, int64_t m0, int64_t k0,
                                                 Acc (&r)[BM / 32], int (&row)[BM / 32],
                                                 int (&col)[BM / 32]) {
  const int t = threadIdx.x;
  const bool k_fast = a_cs == 1;
#pragma unroll
  for (int j = 0; j < BM / 32; ++j) {
    const int rr = k_fast ? t / 8 + 32 * j : t % BM;
    const int cc = k_fast ? t % 8 : t / BM + cuda_gemm_threads / BM * j;
    row[j] = rr, col[j] = cc;
    const int64_t gi = m0 + rr, gk = k0 + cc;
    r[j] = gi < m && gk < k ? cuda_gemm_in<Acc>(a[gi * a_rs + gk * a_cs]) : Acc(0);
  }
}

/// The [8 x 128] slice of B at (row k0, column n0), likewise: with b_cs == 1 consecutive threads
/// read consecutive columns of one k row.
template <class Acc, class TB>
__device__ __forceinline__ void cuda_gemm_load_b(const TB* b, int64_t b_rs, int64_t b_cs, int64_t k,
                                                 int64_t n, int64_t k0, int64_t n0, Acc (&r)[4],
                                                 int (&row)[4], int (&col)[4]) {
  const int t = threadIdx.x;
  const bool n_fast = b_cs == 1;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int rr = n_fast ? t / 128 + 2 * j : t % 8;
    const int cc = n_fast ? t % 128 : t / 8 + 32 * j;
    row[j] = rr, col[j] = cc;
    const int64_t gk = k0 + rr, gj = n0 + cc;
    r[j] = gk < k && gj < n ? cuda_gemm_in<Acc>(b[gk * b_rs + gj * b_cs]) : Acc(0);
  }
}

/// The [8 x 128] slice of an implicit-GEMM B (a convolution's input, see cuda_conv_gather) in
/// cuda_gemm_load_b's column-fast layout.
template <class Acc, class TA, class TB, class TC>
__device__ __forceinline__ void cuda_gemm_gather_b(const TB* image,
                                                   const cuda_gemm_args<TA, TB, Acc, TC>& p,
                                                   int64_t k0, int64_t n0, Acc (&r)[4],
                                                   int (&row)[4], int (&col)[4]) {
  const int t = threadIdx.x;
#pragma unroll
  for (int j = 0; j < 4; ++j) row[j] = t / 128 + 2 * j, col[j] = t % 128;
  cuda_conv_gather_load(image, p.conv, p.k, p.n, k0, n0, t / 128, t % 128, 2, r,
                        [](TB v) { return cuda_gemm_in<Acc>(v); });
}

/// The [BM x 8] slice of a weight gradient's A (dy; see cuda_conv_k_gather) at (row m0, k0) in
/// cuda_gemm_load_a's k-fast layout: eight consecutive threads read eight consecutive pixels of
/// a row of dy.
template <int BM, class Acc, class TA, class TB, class TC>
__device__ __forceinline__ void cuda_gemm_kgather_a(const TA* a,
                                                    const cuda_gemm_args<TA, TB, Acc, TC>& p,
                                                    int64_t m0, int64_t k0, Acc (&r)[BM / 32],
                                                    int (&row)[BM / 32], int (&col)[BM / 32]) {
  const int t = threadIdx.x;
#pragma unroll
  for (int j = 0; j < BM / 32; ++j) row[j] = t / 8 + 32 * j, col[j] = t % 8;
  cuda_k_gather_load_a(a, p.kgather, p.a_rs, p.m, p.k, m0, k0, t / 8, t % 8, 32, r,
                       [](TA v) { return cuda_gemm_in<Acc>(v); });
}

/// The [8 x 128] slice of a weight gradient's B (the lowered input; see cuda_conv_k_gather) at
/// (k0, column n0) in cuda_gemm_load_b's k-fast layout: each thread's row is one (image, pixel)
/// pair, its four columns taps read through the table.
template <class Acc, class TA, class TB, class TC>
__device__ __forceinline__ void cuda_gemm_kgather_b(const TB* x,
                                                    const cuda_gemm_args<TA, TB, Acc, TC>& p,
                                                    int64_t k0, int64_t n0, Acc (&r)[4],
                                                    int (&row)[4], int (&col)[4]) {
  const int t = threadIdx.x;
#pragma unroll
  for (int j = 0; j < 4; ++j) row[j] = t % 8, col[j] = t / 8 + 32 * j;
  cuda_k_gather_load_b(x, p.conv, p.kgather, p.k, p.n, k0, n0, t % 8, t / 8, 32, r,
                       [](TB v) { return cuda_gemm_in<Acc>(v); });
}

/// Where a SIMT thread's outputs lie in its block's BM x 128 tile. The 8 warps form a 4 x 2 grid
/// of (BM / 4) x 64 warp tiles; a warp's lanes a 4 x 8 grid of 4 x 4 quads, repeated BM / 64
/// times down (16 rows apart) and twice across (32 columns apart). Thread output (i, j),
/// i < BM / 16, j < 8, is at row row0 + 16 (i / 4) + i % 4 and column col0 + 32 (j / 4) + j % 4.
/// Why quads: each k step a thread reads its A and 8 B values as 4-wide shared loads (128-bit for
/// float and int32), and a warp's lanes read 64 (A) and 128 (B) consecutive bytes, so each load is
/// one shared-memory wavefront without conflicts: 4 load instructions per 64 FMAs (128-row
/// tiles), where one value per load took 16.
template <int BM>
struct cuda_simt_quads {
  int row0, col0;
  __device__ __forceinline__ explicit cuda_simt_quads(int t)
      : row0((t / 32) / 2 * (BM / 4) + (t % 32) / 8 * 4),
        col0((t / 32) % 2 * 64 + (t % 32) % 8 * 4) {}
  __device__ __forceinline__ int row(int i) const { return row0 + 16 * (i / 4) + i % 4; }
  __device__ __forceinline__ int col(int j) const { return col0 + 32 * (j / 4) + j % 4; }
};

/// Four consecutive values of a shared tile row, read as one vector (two for double).
template <class Acc>
struct alignas(4 * sizeof(Acc)) cuda_simt_quad {
  Acc v[4];
};

/// The shared tiles' row pitch: 4 more than the tile, so that the transposing stores of a
/// row-major A (and a column-major B) - eight k values of one row by eight consecutive threads -
/// fall in eight different bank groups rather than one, and rows stay aligned for quad reads.
inline constexpr int cuda_gemm_pitch = cuda_gemm_bm + 4;

/// Blocks of the SIMT kernel an SM must hold: two for plain float products on 128-row
/// tiles (ptxas then keeps them to 128 registers, spilling 232 bytes; alone, it took 231 and
/// left one block of 8 warps per SM, too few to hide the latencies: the FMA pipe was busy 40% of
/// the time on an H200; two blocks made 4096^3 and 8192^3 1.2x faster, 1024^3 7% slower), one
/// for the rest: the gathers and other types need more registers (not measured), and the 64-row
/// tiles' short products ran 1.3x slower with two (the spills, and too few blocks to gain from a
/// second).
template <class TA, class TB, class Acc, bool Gather, bool KGather, int BM>
inline constexpr int cuda_gemm_simt_min_blocks =
    std::is_same_v<TA, float>&& std::is_same_v<TB, float>&& std::is_same_v<Acc, float> && !Gather &&
            !KGather && BM == 128
        ? 2
        : 1;

/// One BM x 128 tile (BM 128, or 64 for products of at most 64 rows) of matrix blockIdx.z
/// (+ 65535 * i for large batches) per block, each thread BM / 16 x 8 outputs placed as
/// cuda_simt_quads says. Every output is the same sum in the same order for either BM.
template <class TA, class TB, class Acc, bool Gather = false, class TC = Acc, bool KGather = false,
          int BM = cuda_gemm_bm>
__global__ void __launch_bounds__(cuda_gemm_threads,
                                  cuda_gemm_simt_min_blocks<TA, TB, Acc, Gather, KGather, BM>)
    cuda_gemm_simt(cuda_gemm_args<TA, TB, Acc, TC> p, int64_t batch) {
  static_assert(!(Gather && KGather), "one gather at a time");
  static_assert((BM == 128 || BM == 64) && cuda_gemm_bn == 128 && cuda_gemm_threads == 256,
                "cuda_simt_quads places 256 threads on a 128- or 64-row tile 128 wide");
  constexpr int BK = cuda_gemm_bk, LD = cuda_gemm_pitch, LDA = BM + 4, MI = BM / 16, JA = BM / 32;
  using quad = cuda_simt_quad<Acc>;
  // Quads, so the tiles are aligned for quad reads.
  TESSERA_CUDA_SHARED(quad, As_, [2][BK][LDA / 4]);
  TESSERA_CUDA_SHARED(quad, Bs_, [2][BK][LD / 4]);
  auto As = reinterpret_cast<Acc(*)[BK][LDA]>(&As_[0][0][0]);
  auto Bs = reinterpret_cast<Acc(*)[BK][LD]>(&Bs_[0][0][0]);
  const cuda_simt_quads<BM> at(threadIdx.x);
  const int64_t m0 = int64_t{blockIdx.y} * BM, n0 = int64_t{blockIdx.x} * cuda_gemm_bn;
  for (int64_t z = blockIdx.z; z < batch * p.splits; z += gridDim.z) {
    const auto [zb, k_begin, steps] = cuda_split_of<BK>(p, z, batch);
    const auto [a, b, c] = cuda_batch_matrix_at<TA, TB>(p, zb);
    const int64_t k_end = k_begin + steps * BK;
    Acc acc[MI][8];
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[i][j] = Acc(0);

    if (p.alpha != Acc(0)) {
      Acc ra[JA], rb[4];
      int ar[JA], ac[JA], br[4], bc[4];
      const auto load_a = [&](int64_t k0) {
        if constexpr (KGather)
          cuda_gemm_kgather_a<BM>(a, p, m0, k0, ra, ar, ac);
        else
          cuda_gemm_load_a<BM, Acc>(a, p.a_rs, p.a_cs, p.m, p.k, m0, k0, ra, ar, ac);
      };
      const auto load_b = [&](int64_t k0) {
        if constexpr (Gather)
          cuda_gemm_gather_b(b, p, k0, n0, rb, br, bc);
        else if constexpr (KGather)
          cuda_gemm_kgather_b(b, p, k0, n0, rb, br, bc);
        else
          cuda_gemm_load_b<Acc>(b, p.b_rs, p.b_cs, p.k, p.n, k0, n0, rb, br, bc);
      };
      load_a(k_begin);
      load_b(k_begin);
      int buf = 0;
#pragma unroll
      for (int j = 0; j < JA; ++j) As[0][ac[j]][ar[j]] = ra[j];
#pragma unroll
      for (int j = 0; j < 4; ++j) Bs[0][br[j]][bc[j]] = rb[j];
      __syncthreads();
      for (int64_t k0 = k_begin; k0 < k_end; k0 += BK) {
        const bool more = k0 + BK < k_end;
        if (more) {  // the next slice, into registers, while this one is multiplied
          load_a(k0 + BK);
          load_b(k0 + BK);
        }
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
          quad av[MI / 4], bv[2];
#pragma unroll
          for (int h = 0; h < MI / 4; ++h) av[h] = As_[buf][kk][(at.row0 + 16 * h) / 4];
#pragma unroll
          for (int h = 0; h < 2; ++h) bv[h] = Bs_[buf][kk][(at.col0 + 32 * h) / 4];
#pragma unroll
          for (int i = 0; i < MI; ++i)
#pragma unroll
            for (int j = 0; j < 8; ++j)
              acc[i][j] = cuda_gemm_fma(av[i / 4].v[i % 4], bv[j / 4].v[j % 4], acc[i][j]);
        }
        if (more) {
          // The other buffer was last read before the previous barrier: safe to overwrite.
          buf ^= 1;
#pragma unroll
          for (int j = 0; j < JA; ++j) As[buf][ac[j]][ar[j]] = ra[j];
#pragma unroll
          for (int j = 0; j < 4; ++j) Bs[buf][br[j]][bc[j]] = rb[j];
          __syncthreads();
        }
      }
    }

    // Epilogue (cuda_gemm_store, or the raw sums of a split k's part): a vector store per quad
    // (double: one element at a time; its quads cost 120 bytes of spills, it is no target).
    Acc* const part = cuda_gemm_part_of(p, z);  // split k: raw sums, else null
#pragma unroll
    for (int i = 0; i < MI; ++i) {
      const int64_t gi = m0 + at.row(i);
      if (gi >= p.m) continue;
      if constexpr (sizeof(Acc) <= 4) {
#pragma unroll
        for (int h = 0; h < 2; ++h)  // the row's two quads of columns
          cuda_gemm_store_run<4>(
              p, c, part, gi, n0 + at.col(4 * h),
              {acc[i][4 * h], acc[i][4 * h + 1], acc[i][4 * h + 2], acc[i][4 * h + 3]});
      } else {
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const int64_t gj = n0 + at.col(j);
          if (gj < p.n) cuda_gemm_store_part(p, c, part, gi, gj, acc[i][j]);
        }
      }
    }
    __syncthreads();  // the next batch matrix reuses the shared buffers
  }
}

/// Whether the SIMT kernel has a 64-row tile for these types: float, whose products (under the
/// default matmul precision) are the fp32 training step's; the other types keep one SIMT kernel
/// each, which their compile time would otherwise double.
template <class TA, class TB, class Acc>
inline constexpr bool cuda_simt_has_short_tile =
    std::is_same_v<TA, float>&& std::is_same_v<TB, float>&& std::is_same_v<Acc, float>;

/// Launches the SIMT kernel for q on grid g (128 x 128 tiles over `batch`): on 64-row tiles
/// where q has at most 64 rows and the types have them (the grid is the same, one row of tiles;
/// each block does half the work), else on 128-row tiles.
template <bool Gather, bool KGather, class TA, class TB, class Acc, class TC>
void cuda_gemm_launch_simt(const cuda_gemm_args<TA, TB, Acc, TC>& q, dim3 g, int64_t batch) {
  if constexpr (cuda_simt_has_short_tile<TA, TB, Acc>) {
    constexpr auto short_tiles =
        cuda_gemm_simt<TA, TB, Acc, Gather, TC, KGather, cuda_gemm_bm_short>;
    if (q.m <= cuda_gemm_bm_short &&
        cuda_try_launch_smem<short_tiles, 0>(cuda_gemm_simt_short_choice(), "cuda_gemm_simt", g,
                                             dim3(cuda_gemm_threads), q, batch))
      return;
  }
  cuda_launch("cuda_gemm_simt", cuda_gemm_simt<TA, TB, Acc, Gather, TC, KGather>, g,
              dim3(cuda_gemm_threads), q, batch);
}

/// The batch offsets of a product as the kernels read them. Offsets that are multiples of the
/// batch index (contiguous batches, a convolution's images, broadcast operands: stride 0) become
/// strides, passed by value: no copy, and no wait for the GPU. Otherwise the three arrays go to
/// the device in one buffer (one copy, which waits for the stream) for the duration of the
/// product, freed to the cache after the kernel is queued (the stream orders the block's next
/// user after the kernel).
class cuda_batch_offsets {
 public:
  cuda_batch_offsets(const int64_t* a, const int64_t* b, const int64_t* c, int64_t batch) {
    if (batch <= 0) return;
    const bool affine = strided(a, batch, stride_[0]) && strided(b, batch, stride_[1]) &&
                        strided(c, batch, stride_[2]);
    if (affine) return;
    stride_[0] = stride_[1] = stride_[2] = 0;
    const size_t n = static_cast<size_t>(batch);
    std::vector<int64_t> host(3 * n, 0);
    for (size_t i = 0; i < n; ++i) {
      if (a) host[i] = a[i];
      if (b) host[n + i] = b[i];
      if (c) host[2 * n + i] = c[i];
    }
    bytes_ = host.size() * sizeof(int64_t);
    dev_ = static_cast<int64_t*>(backend::memory<cuda>::allocate(bytes_));
    backend::memory<cuda>::copy_from_host(dev_, host.data(), bytes_);
    batch_ = batch;
  }
  ~cuda_batch_offsets() {
    if (dev_) backend::memory<cuda>::deallocate(dev_, bytes_);
  }
  cuda_batch_offsets(const cuda_batch_offsets&) = delete;
  cuda_batch_offsets& operator=(const cuda_batch_offsets&) = delete;
  /// Device arrays (null when the offsets are strides).
  const int64_t* a() const { return dev_; }
  const int64_t* b() const { return dev_ ? dev_ + batch_ : nullptr; }
  const int64_t* c() const { return dev_ ? dev_ + 2 * batch_ : nullptr; }
  /// The strides (0 when the offsets are arrays or absent).
  int64_t a_stride() const { return stride_[0]; }
  int64_t b_stride() const { return stride_[1]; }
  int64_t c_stride() const { return stride_[2]; }

 private:
  /// Whether off[z] == z * stride for every z (a null array: stride 0).
  static bool strided(const int64_t* off, int64_t batch, int64_t& stride) {
    stride = off && batch > 1 ? off[1] - off[0] : 0;
    if (!off) return true;
    for (int64_t z = 0; z < batch; ++z)
      if (off[z] != z * stride) return false;
    return true;
  }
  int64_t* dev_ = nullptr;
  int64_t batch_ = 0;
  size_t bytes_ = 0;
  int64_t stride_[3] = {0, 0, 0};
};

/// Runs a gemm_problem on the device (see gemm_kernel<cuda>). With Gather (implicit-GEMM
/// convolution: only the convolution instantiates it), B is read through `gather` instead of
/// through pr.b's strides; pr.b then points to the images' first channel of the group, and
/// pr.b_offsets to each image. Only the pipelined tensor-core kernels take channels-last images
/// (gather.pixel > 1): false, having run nothing, when none of them runs the product
/// (cuda_gemm_try_conv_chunks); true otherwise.
/// The kernel arguments of pr with its batch offsets `off` and the convolution gather (if any).
/// With k == 0 alpha becomes 0: a and b are not read (the kernels skip the product loop).
template <class TA, class TB, class Acc, class TC>
cuda_gemm_args<TA, TB, Acc, TC> cuda_gemm_args_of(const gemm_problem<TA, TB, Acc, TC>& pr,
                                                  const cuda_batch_offsets& off,
                                                  const cuda_conv_gather& gather) {
  cuda_gemm_args<TA, TB, Acc, TC> p{
      pr.m,           pr.n,           pr.k,           pr.a,    pr.a_rs, pr.a_cs,  pr.b,
      pr.b_rs,        pr.b_cs,        pr.c,           pr.c_rs, pr.c_cs, pr.alpha, pr.beta,
      pr.bias,        pr.bias_stride, pr.bias_kind,   pr.relu, off.a(), off.b(),  off.c(),
      off.a_stride(), off.b_stride(), off.c_stride(), gather};
  if (pr.k == 0) p.alpha = Acc(0);
  return p;
}

/// The grid of 128 x 128 output tiles of an m x n product over `batch` matrices (grid.z capped;
/// the kernels loop over the rest); shape_error naming `op` beyond the grid's limits.
inline dim3 cuda_gemm_grid(const char* op, int64_t m, int64_t n, int64_t batch) {
  const int64_t gx = (n + cuda_gemm_bn - 1) / cuda_gemm_bn;
  const int64_t gy = (m + cuda_gemm_bm - 1) / cuda_gemm_bm;
  if (gx > 0x7fffffff || gy > 65535)
    fail<shape_error>(op, "matrix of ", m, " x ", n,
                      " exceeds the CUDA grid (at most 65535 * 128 rows)");
  return dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy),
              static_cast<unsigned>(batch < 65535 ? batch : 65535));
}

template <bool Gather, class TA, class TB, class Acc, class TC>
bool cuda_gemm_run(const gemm_problem<TA, TB, Acc, TC>& pr, const cuda_conv_gather& gather = {}) {
  if (pr.m <= 0 || pr.n <= 0 || pr.batch <= 0) return true;
  const cuda_batch_offsets off(pr.a_offsets, pr.b_offsets, pr.c_offsets, pr.batch);
  const cuda_gemm_args<TA, TB, Acc, TC> p = cuda_gemm_args_of(pr, off, gather);
  const dim3 grid = cuda_gemm_grid("matmul", pr.m, pr.n, pr.batch);
  using Cfg = typename cuda_tc_select<TA, TB, Acc>::type;
  if constexpr (!std::is_void_v<Cfg>) {
    static_assert(cuda_tc_bm == cuda_gemm_bm && cuda_tc_bn == cuda_gemm_bn);  // the same grid
    const auto kernel = cuda_gemm_tc<Cfg, TA, TB, Gather, TC>;
    // Once per kernel (not per device: a process is assumed to see one GPU generation).
    static const bool tensor_cores = cuda_built_for(kernel, 80);
    if (tensor_cores && Cfg::allowed()) {
      if constexpr (Gather) {
        if (gather.pixel > 1) return cuda_gemm_try_conv_chunks<Cfg>(p, pr.batch, grid);
      } else if (cuda_gemm_try_async<Cfg>(pr, p, grid)) {
        return true;
      }
      if (cuda_gemm_run_split(p, pr.batch, grid, cuda_split_min_tc, [&](dim3 g, const auto& q) {
            return cuda_try_launch_smem<cuda_gemm_tc<Cfg, TA, TB, Gather, TC>, 0>(
                cuda_gemm_tc_choice(), "cuda_gemm_tc", g, dim3(cuda_tc_threads), q, pr.batch);
          }))
        return true;
    }
  }
  if (Gather && gather.pixel > 1) return false;
  return cuda_gemm_run_split(p, pr.batch, grid, cuda_split_min_simt, [&](dim3 g, const auto& q) {
    cuda_gemm_launch_simt<Gather, false>(q, g, pr.batch);
    return true;
  });
}

/// A convolution's weight gradient as implicit GEMM (see cuda_conv_k_gather): pr gives m = kg,
/// n = K, k = images x pixels, a = dy's group rows (a_rs = P), b = the input's group channels,
/// c = dw (beta 0 or 1), batch 1; `gather` and `kg` the rest. On the register-staged tensor-core
/// kernel where the types have a family (half, bfloat16; float under tf32) and the code was
/// built for sm_80+, else on the SIMT kernel. k is split where the output tiles are few (a
/// weight gradient's usually are), the parts added in a fixed order.
template <class TA, class TB, class Acc, class TC>
void cuda_gemm_run_weight_grad(const gemm_problem<TA, TB, Acc, TC>& pr,
                               const cuda_conv_gather& gather, const cuda_conv_k_gather& kg) {
  if (pr.m <= 0 || pr.n <= 0) return;
  const cuda_batch_offsets off(nullptr, nullptr, nullptr, 1);
  cuda_gemm_args<TA, TB, Acc, TC> p = cuda_gemm_args_of(pr, off, gather);  // k == 0: zeros
  p.kgather = kg;
  const dim3 grid = cuda_gemm_grid("conv2d_backward_weight", pr.m, pr.n, 1);
  using Cfg = typename cuda_tc_select<TA, TB, Acc>::type;
  if constexpr (!std::is_void_v<Cfg>) {
    constexpr auto kernel = cuda_gemm_tc<Cfg, TA, TB, false, TC, true>;
    static const bool tensor_cores = cuda_built_for(kernel, 80);
    if (tensor_cores && Cfg::allowed() &&
        cuda_gemm_run_split(p, 1, grid, cuda_split_min_tc, [&](dim3 g, const auto& q) {
          return cuda_try_launch_smem<kernel, 0>(cuda_gemm_tc_choice(), "cuda_gemm_tc", g,
                                                 dim3(cuda_tc_threads), q, int64_t{1});
        }))
      return;
  }
  cuda_gemm_run_split(p, 1, grid, cuda_split_min_simt, [&](dim3 g, const auto& q) {
    cuda_gemm_launch_simt<false, true>(q, g, int64_t{1});
    return true;
  });
}

}  // namespace detail

namespace backend {

template <>
struct gemm_kernel<cuda> {
  /// c = alpha a·b + beta c (+ bias) (relu) for each batch matrix (see detail::gemm_problem);
  /// a, b, c, bias point to device memory; the offset arrays are host arrays. c is Acc, or
  /// half / bfloat16 under float accumulation (detail::gemm_stores_v).
  template <class TA, class TB, class Acc, class TC>
  static void run(const detail::gemm_problem<TA, TB, Acc, TC>& pr) {
    detail::cuda_gemm_run<false>(pr);
  }
};

}  // namespace backend

namespace detail {
// The CUDA GEMM rounds float results into 16-bit outputs in its epilogue: a half or bfloat16
// product writes its output once, instead of a float buffer written, read and converted.
template <>
inline constexpr bool gemm_stores_v<cuda, half, float> = true;
template <>
inline constexpr bool gemm_stores_v<cuda, bfloat16, float> = true;
}  // namespace detail
TESSERA_END_NAMESPACE

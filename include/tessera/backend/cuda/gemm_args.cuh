// tessera/backend/cuda/gemm_args.cuh - the arguments of the CUDA GEMM kernels (the SIMT one in
// gemm.cuh, the tensor-core ones in gemm_tc*.cuh, gemm_mma.cuh and gemm_wgmma.cuh), their shared
// epilogue, and the gathers through which they read a convolution's B operand straight from the
// images (implicit GEMM): element by element from planar images, or in 16-byte chunks of
// channels from channels-last copies of them (the pipelined kernels).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "../../kernel/gemm_problem.hpp"
#include "async_copy.cuh"

TESSERA_BEGIN_NAMESPACE
namespace detail {

/// Where a convolution's tap reads relative to an output pixel's top-left input position: one
/// per row kk = (ci * r + i) * s + j of the lowered input for planar images (offset = ci * h * w +
/// dy * w + dx), one per 16-byte chunk of rows kk = (i * s + j) * cg + ci for channels-last
/// images (offset = ci of the chunk's first row). See cuda_conv_gather.
struct alignas(16) cuda_conv_tap {
  int32_t offset;
  int32_t dy, dx;  // i * dil_h, j * dil_w
  int32_t unused;
};

/// Division of a value below 2^31 by a fixed divisor (1 <= d < 2^31) as a multiply-high, an add
/// and a shift: the GPU has no integer divider, and a 32-bit division by a kernel argument is a
/// sequence of about 20 instructions, which the gathers would run for every element or chunk of
/// every k step. The constants are found once on the host (Granlund and Montgomery's
/// round-up method): with l = ceil(log2 d) and mul = floor(2^32 (2^l - d) / d) + 1,
/// floor(q / d) = (mulhi(mul, q) + q) >> l for every q < 2^32; below 2^31 the sum fits 32 bits.
struct cuda_fast_div {
  uint32_t d = 1, mul = 1, shift = 0;

  cuda_fast_div() = default;
  explicit cuda_fast_div(uint32_t divisor) : d(divisor) {
    while ((uint64_t{1} << shift) < d) ++shift;
    mul = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << shift) - d)) / d + 1);
  }
  /// q / d for 0 <= q < 2^31.
  __host__ __device__ __forceinline__ uint32_t operator()(uint32_t q) const {
#ifdef __CUDA_ARCH__
    const uint32_t high = __umulhi(mul, q);
#else
    const auto high = static_cast<uint32_t>((uint64_t{mul} * q) >> 32);
#endif
    return (high + q) >> shift;
  }
};

/// Implicit GEMM: B of a convolution's forward product gathered from the input image on load
/// instead of read from a lowered matrix. Element (kk, p) of batch matrix z reads the image at
/// input position (y0 + dy, x0 + dx) of tap kk's (dy, dx), with (y0, x0) = (oy * stride_h -
/// pad_top, ox * stride_w - pad_left), p = oy * wo + ox, or is 0 when that lies outside the h x w
/// image; image = b + b_off[z] (the image's first channel of the group). Two layouts:
///  - planar (pixel == 1, NCHW, any kernel with Gather): image[(y0 * w + x0) + taps[kk].offset],
///    element by element (cuda_conv_gather_load);
///  - channels last (pixel = the image's channel count, NHWC; the pipelined kernels, B
///    k-contiguous): image[(y * w + x) * pixel + taps[kk / V].offset + kk % V] in chunks of V =
///    16 / sizeof(element) channels of one tap (cuda_copy_conv_tile), the group's channels a
///    multiple of V.
struct cuda_conv_gather {
  const cuda_conv_tap* taps = nullptr;  // device array: one per row, or per chunk of rows
  int32_t h = 0, w = 0;
  cuda_fast_div wo;  // output row length: p = oy * wo + ox (p below 2^31)
  int32_t stride_h = 1, stride_w = 1, pad_top = 0, pad_left = 0;
  int32_t pixel = 1;  // elements from one input pixel to the next

  /// The top-left input position (y0, x0) that output pixel p (0 <= p < 2^31) reads from.
  struct origin {
    int y0, x0;
  };
  __device__ __forceinline__ origin origin_of(int p) const {
    const int oy = static_cast<int>(wo(static_cast<uint32_t>(p))),
              ox = p - oy * static_cast<int>(wo.d);
    return {oy * stride_h - pad_top, ox * stride_w - pad_left};
  }
};

/// Implicit GEMM for a convolution's weight gradient (the SIMT kernel's KGather mode): per group,
/// dw [kg, K] = dy [kg, (image, pixel)] x lowered input [(image, pixel), K], k running over the
/// pairs q = b * P + p (b = q / P: `pixels`, below 2^31 pairs). A element (o, q) is dy at
/// a + b * a_image + o * a_rs + p; B element (q, kk) is the input gathered as in the forward
/// pass (`conv`, planar) from image b at b + b * b_image: so neither the lowered input nor a
/// regrouped dy is ever stored.
struct cuda_conv_k_gather {
  cuda_fast_div pixels;  // P, the output pixels of an image
  int64_t a_image = 0, b_image = 0;
};

/// A gemm_problem as the kernel reads it: the same fields, with the batch offsets as strides
/// when they are multiples of the batch index, else in device memory, and the gather of an
/// implicit-GEMM convolution (kernels instantiated with Gather = true read B through it). TC is
/// the output's type (Acc, or half / bfloat16 rounded once in the epilogue).
template <class TA, class TB, class Acc, class TC = Acc>
struct cuda_gemm_args {
  int64_t m, n, k;
  const TA* a;
  int64_t a_rs, a_cs;
  const TB* b;
  int64_t b_rs, b_cs;
  TC* c;
  int64_t c_rs, c_cs;
  Acc alpha, beta;
  const Acc* bias;
  int64_t bias_stride;
  gemm_bias bias_kind;
  bool relu;
  const int64_t* a_off;  // device arrays of `batch` offsets, or null: then z * a_bs, ...
  const int64_t* b_off;
  const int64_t* c_off;
  int64_t a_bs, b_bs, c_bs;  // batch strides (offsets that are multiples of the batch index)
  cuda_conv_gather conv;
  cuda_conv_k_gather kgather{};  // KGather kernels only (a convolution's weight gradient)
  // Split k (every GEMM kernel; gemm_split.cuh): with splits > 1, product z <
  // batch * splits multiplies batch matrix z % batch over k in [(z / batch) k_chunk, + k_chunk)
  // and stores its raw sums in partial[z][m][n]; cuda_gemm_split_reduce applies the epilogue.
  Acc* partial = nullptr;
  int64_t k_chunk = 0;
  int64_t splits = 1;
  // tf32 products: A and B hold tf32 values already (copies cuda_gemm_k_major rounded), which
  // the TMA-fed wgmma kernel requires (it has no threads that round what TMA copies).
  bool tf32_rounded = false;
};

/// The element offset of batch matrix z: from the offset array when there is one, else z times
/// the batch stride.
__device__ __forceinline__ int64_t cuda_batch_offset(const int64_t* off, int64_t stride,
                                                     int64_t z) {
  return off ? off[z] : z * stride;
}

/// Batch matrix z of a product: its A, B and C. The tensor-core kernels read A and B as EA and EB,
/// their instruction's element types of the same sizes (half and bfloat16 as 16-bit bits, for
/// instance); the others as TA and TB.
template <class EA, class EB, class TC>
struct cuda_batch_matrix {
  const EA* a;
  const EB* b;
  TC* c;
};
template <class EA, class EB, class TA, class TB, class Acc, class TC>
__device__ __forceinline__ cuda_batch_matrix<EA, EB, TC> cuda_batch_matrix_at(
    const cuda_gemm_args<TA, TB, Acc, TC>& p, int64_t z) {
  static_assert(sizeof(EA) == sizeof(TA) && sizeof(EB) == sizeof(TB));
  return {reinterpret_cast<const EA*>(p.a + cuda_batch_offset(p.a_off, p.a_bs, z)),
          reinterpret_cast<const EB*>(p.b + cuda_batch_offset(p.b_off, p.b_bs, z)),
          p.c + cuda_batch_offset(p.c_off, p.c_bs, z)};
}

/// What a pipelined kernel's block knows before its batch loop: the first row and column of its
/// BM x BN tile and the operands' leading dimensions in global memory (A column-major when ACol,
/// B k-contiguous when BCol).
struct cuda_pipelined_block {
  int64_t m0, n0, lda, ldb;
};
template <int BM, int BN, bool ACol, bool BCol, class TA, class TB, class Acc, class TC>
__device__ __forceinline__ cuda_pipelined_block
cuda_pipelined_block_of(const cuda_gemm_args<TA, TB, Acc, TC>& p) {
  return {int64_t{blockIdx.y} * BM, int64_t{blockIdx.x} * BN, ACol ? p.a_cs : p.a_rs,
          BCol ? p.b_cs : p.b_rs};
}

/// Product z of a pipelined kernel's loop (z < batch * p.splits): its batch matrix, the first k
/// it multiplies and its number of BK-deep steps. Without a split, matrix z over the whole k. A
/// split's k_chunk is a multiple of BK, so only the last split's last step can be partial (the
/// copies zero-fill past p.k as for any product).
struct cuda_split_part {
  int64_t z, k0, steps;
};
template <int BK, class TA, class TB, class Acc, class TC>
__device__ __forceinline__ cuda_split_part cuda_split_of(const cuda_gemm_args<TA, TB, Acc, TC>& p,
                                                         int64_t z, int64_t batch) {
  if (p.splits == 1) return {z, 0, (p.k + BK - 1) / BK};
  const int64_t part = z / batch, k0 = part * p.k_chunk;
  const int64_t k = p.k - k0 < p.k_chunk ? p.k - k0 : p.k_chunk;
  return {z - part * batch, k0, (k + BK - 1) / BK};
}

/// acc + a b, rounded once for float and double: the FFMA / DFMA that nvcc makes of the
/// expression anyway, written out so that the host emulation (whose compiler fuses or not in each
/// inlined copy as it sees fit) gives every kernel variant the GPU's bits. Integers as written.
template <class Acc>
__device__ __forceinline__ Acc cuda_gemm_fma(Acc a, Acc b, Acc acc) {
  if constexpr (std::is_same_v<Acc, float>)
    return fmaf(a, b, acc);
  else if constexpr (std::is_same_v<Acc, double>)
    return fma(a, b, acc);
  else
    return acc + a * b;
}

/// An output computed in Acc as an element of c: rounded once to TC (through float).
template <class TC, class Acc>
__device__ __forceinline__ TC cuda_gemm_out_of(Acc v) {
  if constexpr (std::is_same_v<TC, Acc>)
    return v;
  else
    return TC(static_cast<float>(v));
}

/// The epilogue of every GEMM kernel for output (gi, gj) of matrix c (inside the product), at
/// `out`: alpha * acc (+ beta * *out) (+ bias) (relu) in Acc, rounded once to TC; beta == 0
/// never reads c. cuda_gemm_store writes it.
template <class TA, class TB, class Acc, class TC>
__device__ __forceinline__ TC cuda_gemm_output(const cuda_gemm_args<TA, TB, Acc, TC>& p,
                                               const TC* out, int64_t gi, int64_t gj, Acc acc) {
  Acc v = p.alpha * acc;
  if constexpr (std::is_same_v<TC, Acc>) {
    if (p.beta != Acc(0)) v = cuda_gemm_fma(p.beta, *out, v);
  } else {
    if (p.beta != Acc(0)) v = cuda_gemm_fma(p.beta, static_cast<Acc>(static_cast<float>(*out)), v);
  }
  if (p.bias_kind == gemm_bias::per_row)
    v += p.bias[gi * p.bias_stride];
  else if (p.bias_kind == gemm_bias::per_col)
    v += p.bias[gj * p.bias_stride];
  if (p.relu && v < Acc(0)) v = Acc(0);  // NaN compares false: stays NaN, as on the CPU
  return cuda_gemm_out_of<TC>(v);
}
template <class TA, class TB, class Acc, class TC>
__device__ __forceinline__ void cuda_gemm_store(const cuda_gemm_args<TA, TB, Acc, TC>& p, TC* c,
                                                int64_t gi, int64_t gj, Acc acc) {
  TC* const out = c + gi * p.c_rs + gj * p.c_cs;
  *out = cuda_gemm_output(p, out, gi, gj, acc);
}

/// The [m][n] buffer of raw sums of product z of a kernel's loop under a split k (p.partial + z m
/// n), or null without one. Kernels ask for it after their k loop, so that it is not held in a
/// register through the loop.
template <class TA, class TB, class Acc, class TC>
__device__ __forceinline__ Acc* cuda_gemm_part_of(const cuda_gemm_args<TA, TB, Acc, TC>& p,
                                                  int64_t z) {
  return p.partial ? p.partial + z * p.m * p.n : nullptr;
}

/// The epilogue of every GEMM kernel: under a split k the raw sum into part (cuda_gemm_part_of;
/// cuda_gemm_split_reduce finishes it), else (part null) cuda_gemm_store into c, the product's
/// batch matrix.
template <class TA, class TB, class Acc, class TC>
__device__ __forceinline__ void cuda_gemm_store_part(const cuda_gemm_args<TA, TB, Acc, TC>& p,
                                                     TC* c, Acc* part, int64_t gi, int64_t gj,
                                                     Acc acc) {
  if (part)
    part[gi * p.n + gj] = acc;
  else
    cuda_gemm_store(p, c, gi, gj, acc);
}

/// Stores N consecutive values at `out` (global memory, aligned to N values) in one vector store
/// (two for N x sizeof(T) = 32 bytes). Written in PTX because nvcc splits a uint4 store assembled
/// from separately computed values back into four 32-bit stores.
template <int N, class T>
__device__ __forceinline__ void cuda_store_run(T* out, const T (&v)[N]) {
  constexpr int words = N * static_cast<int>(sizeof(T)) / 4;  // 32-bit words
  static_assert(words * 4 == N * static_cast<int>(sizeof(T)) &&
                (words == 1 || words == 2 || words == 4 || words == 8));
  uint32_t w[words];
  std::memcpy(w, v, sizeof(w));
#ifdef __CUDA_ARCH__
  if constexpr (words == 1) {
    asm volatile("st.global.b32 [%0], %1;\n" ::"l"(out), "r"(w[0]) : "memory");
  } else if constexpr (words == 2) {
    asm volatile("st.global.v2.b32 [%0], {%1, %2};\n" ::"l"(out), "r"(w[0]), "r"(w[1]) : "memory");
  } else {
    char* const bytes = reinterpret_cast<char*>(out);
#pragma unroll
    for (int h = 0; h < words / 4; ++h)
      asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"l"(bytes + 16 * h),
                   "r"(w[4 * h]), "r"(w[4 * h + 1]), "r"(w[4 * h + 2]), "r"(w[4 * h + 3])
                   : "memory");
  }
#else
  std::memcpy(out, w, sizeof(w));
#endif
}

/// Whether every output of c is alpha times its sum (no beta term, bias or ReLU) and c's rows
/// take runs of N outputs as aligned vectors (c_cs 1, c and c_rs aligned to N): the usual
/// product, for which the wgmma kernels keep a small epilogue (cuda_wgmma_store_tile).
template <int N, class TA, class TB, class Acc, class TC>
__device__ __forceinline__ bool cuda_gemm_scaled_runs(const cuda_gemm_args<TA, TB, Acc, TC>& p,
                                                      const TC* c) {
  return p.beta == Acc(0) && p.bias_kind == gemm_bias::none && !p.relu && p.c_cs == 1 &&
         p.c_rs % N == 0 && reinterpret_cast<uintptr_t>(c) % (N * sizeof(TC)) == 0;
}

/// alpha * acc as an output of c: cuda_gemm_output where cuda_gemm_scaled_runs holds.
template <class TA, class TB, class Acc, class TC>
__device__ __forceinline__ TC cuda_gemm_scaled(const cuda_gemm_args<TA, TB, Acc, TC>& p, Acc acc) {
  return cuda_gemm_out_of<TC>(p.alpha * acc);
}

/// cuda_gemm_store_part for outputs (gi, gj + e), e < N, of one row: one vector store where the
/// N lie inside the product, side by side (c_cs 1) and aligned to the vector; else one by one.
/// Lanes holding runs of consecutive columns then write whole sectors (or halves of them) per
/// instruction instead of scattered elements.
template <int N, class TA, class TB, class Acc, class TC>
__device__ __forceinline__ void cuda_gemm_store_run(const cuda_gemm_args<TA, TB, Acc, TC>& p, TC* c,
                                                    Acc* part, int64_t gi, int64_t gj,
                                                    const Acc (&acc)[N]) {
  const auto aligned = [](const void* q, size_t bytes) {
    return reinterpret_cast<uintptr_t>(q) % bytes == 0;
  };
  if (gj + N <= p.n) {
    if (part) {
      Acc* const out = part + gi * p.n + gj;
      if (aligned(out, N * sizeof(Acc))) return cuda_store_run<N>(out, acc);
    } else if (p.c_cs == 1) {
      TC* const out = c + gi * p.c_rs + gj;
      if (aligned(out, N * sizeof(TC))) {
        TC v[N];
#pragma unroll
        for (int e = 0; e < N; ++e) v[e] = cuda_gemm_output(p, out + e, gi, gj + e, acc[e]);
        return cuda_store_run<N>(out, v);
      }
    }
  }
#pragma unroll
  for (int e = 0; e < N; ++e)
    if (gj + e < p.n) cuda_gemm_store_part(p, c, part, gi, gj + e, acc[e]);
}

/// The input element that tap t reads for the output pixel whose window corner is (y0, x0),
/// converted by cvt, from `corner` (the image at that corner); 0 in the padding.
template <class T, class Cvt>
__device__ __forceinline__ auto cuda_conv_tap_value(const T* corner, const cuda_conv_gather& g,
                                                    cuda_conv_tap t, int y0, int x0, Cvt cvt)
    -> decltype(cvt(*corner)) {
  const int y = y0 + t.dy, x = x0 + t.dx;
  if (static_cast<unsigned>(y) < static_cast<unsigned>(g.h) &&
      static_cast<unsigned>(x) < static_cast<unsigned>(g.w))
    return cvt(corner[t.offset]);
  return decltype(cvt(*corner)){0};
}

/// Element (k0 + row + step * i, n0 + col) of an implicit-GEMM B operand (see cuda_conv_gather)
/// for i < N, converted by cvt, 0 outside the product or the image. The thread's column, and so
/// its output pixel, is fixed: its position is computed once, and each element costs a table
/// read, two bounds checks and a load.
template <int N, class T, class E, class Cvt>
__device__ __forceinline__ void cuda_conv_gather_load(const T* image, const cuda_conv_gather& g,
                                                      int64_t k, int64_t n, int64_t k0, int64_t n0,
                                                      int row, int col, int step, E (&r)[N],
                                                      Cvt cvt) {
  const int64_t p = n0 + col;
  const bool inside = p < n;
  // n, the pixels per image, is below 2^31.
  const auto [y0, x0] = g.origin_of(inside ? static_cast<int>(p) : 0);
  const int64_t corner = int64_t{y0} * g.w + x0;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const int64_t kk = k0 + row + step * i;
    r[i] =
        inside && kk < k ? cuda_conv_tap_value(image + corner, g, g.taps[kk], y0, x0, cvt) : E{0};
  }
}

/// The (image, pixel) pair of k index q of a weight gradient's product (see cuda_conv_k_gather);
/// (0, 0) and inside false beyond k.
struct cuda_k_pair {
  bool inside;
  int64_t image;
  int pixel;
};
__device__ __forceinline__ cuda_k_pair cuda_k_pair_of(const cuda_conv_k_gather& kg, int64_t k,
                                                      int64_t q) {
  if (q >= k) return {false, 0, 0};
  const int64_t b = kg.pixels(static_cast<uint32_t>(q));
  return {true, b, static_cast<int>(q - b * int64_t{kg.pixels.d})};
}

/// Elements (m0 + row + step * i, k0 + col) of a weight gradient's A (dy, rows a_rs apart; see
/// cuda_conv_k_gather) for i < N, converted by cvt, 0 beyond the product. The thread's k column
/// is one (image, pixel) pair, found once.
template <int N, class T, class E, class Cvt>
__device__ __forceinline__ void cuda_k_gather_load_a(const T* a, const cuda_conv_k_gather& kg,
                                                     int64_t a_rs, int64_t m, int64_t k, int64_t m0,
                                                     int64_t k0, int row, int col, int step,
                                                     E (&r)[N], Cvt cvt) {
  const auto [inside, b, pixel] = cuda_k_pair_of(kg, k, k0 + col);
  const T* const at = a + b * kg.a_image + pixel;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const int64_t gi = m0 + row + step * i;
    r[i] = inside && gi < m ? cvt(at[gi * a_rs]) : E{0};
  }
}

/// Elements (k0 + row, n0 + col + step * i) of a weight gradient's B (the lowered input: column
/// kk is tap kk of the table in g) for i < N, converted by cvt, 0 beyond the product or the
/// image. The thread's k row is one (image, pixel) pair, whose input corner is found once.
template <int N, class T, class E, class Cvt>
__device__ __forceinline__ void cuda_k_gather_load_b(const T* x, const cuda_conv_gather& g,
                                                     const cuda_conv_k_gather& kg, int64_t k,
                                                     int64_t n, int64_t k0, int64_t n0, int row,
                                                     int col, int step, E (&r)[N], Cvt cvt) {
  const auto [inside, b, pixel] = cuda_k_pair_of(kg, k, k0 + row);
  const auto [y0, x0] = g.origin_of(pixel);
  const T* const corner = x + b * kg.b_image + (int64_t{y0} * g.w + x0);
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const int64_t kk = n0 + col + step * i;
    r[i] = inside && kk < n ? cuda_conv_tap_value(corner, g, g.taps[kk], y0, x0, cvt) : E{0};
  }
}

/// Starts this thread's copies (of Threads) of a channels-last implicit GEMM's (k0, n0) B block
/// into the shared [BN x BK] k-contiguous tile at b_at(o, i) (o: output pixel n0 + o, i: row k0 +
/// i): each 16-byte chunk is V channels of one tap at one pixel, read from image (see
/// cuda_conv_gather), zeros beyond the product and in the padding. k is a multiple of V, n below
/// 2^31.
template <int BN, int BK, int Threads, class E, class At>
__device__ __forceinline__ void cuda_copy_conv_tile(E* bs, At b_at, const E* image,
                                                    const cuda_conv_gather& g, int64_t n0,
                                                    int64_t k0, int64_t n, int64_t k) {
  constexpr int V = 16 / static_cast<int>(sizeof(E));
  cuda_each_chunk<BN, BK, E, Threads>([&](int o, int i) {
    const int64_t p = n0 + o, kk = k0 + i;
    const E* src = image;  // aligned and valid where nothing is read
    int bytes = 0;
    if (p < n && kk < k) {
      // n, the pixels per image, is below 2^31: the position fits 32 bits (cuda_fast_div).
      const auto [y0, x0] = g.origin_of(static_cast<int>(p));
      const cuda_conv_tap t = g.taps[kk / V];
      const int y = y0 + t.dy, x = x0 + t.dx;
      if (static_cast<unsigned>(y) < static_cast<unsigned>(g.h) &&
          static_cast<unsigned>(x) < static_cast<unsigned>(g.w)) {
        src = image + (int64_t{y} * g.w + x) * g.pixel + t.offset;
        bytes = 16;
      }
    }
    cuda_cp_async16(bs + b_at(o, i), src, bytes);
  });
}

/// One k step's copies of a pipelined kernel (A row-major, or column-major when ACol; B likewise):
/// cuda_copy_gemm_step of p's m x n x k product at (m0, n0, k0) from a (leading dimension lda) and
/// b (ldb); with Gather, B is instead a channels-last convolution input gathered through p.conv
/// (cuda_copy_conv_tile), which needs A row-major and B k-contiguous.
template <int BM, int BN, int BK, int Threads, bool ACol, bool BCol, bool Gather, class E,
          class AAt, class BAt, class TA, class TB, class Acc, class TC>
__device__ __forceinline__ void cuda_copy_pipelined_step(E* as, AAt a_at, E* bs, BAt b_at,
                                                         const E* a, int64_t lda, const E* b,
                                                         int64_t ldb,
                                                         const cuda_gemm_args<TA, TB, Acc, TC>& p,
                                                         int64_t m0, int64_t n0, int64_t k0) {
  if constexpr (Gather) {
    static_assert(!ACol && BCol, "the channels-last gather fills k-contiguous B tiles");
    (void)ldb;
    cuda_copy_tile<BM, BK, Threads>(as, a_at, a + m0 * lda + k0, lda, p.m - m0, p.k - k0);
    cuda_copy_conv_tile<BN, BK, Threads>(bs, b_at, b, p.conv, n0, k0, p.n, p.k);
  } else {
    cuda_copy_gemm_step<BM, BN, BK, Threads, ACol, BCol>(as, a_at, bs, b_at, a, lda, b, ldb, m0, n0,
                                                         k0, p.m, p.n, p.k);
  }
}

}  // namespace detail
TESSERA_END_NAMESPACE

// tessera/backend/cuda/reduce.cuh - the CUDA reduction kernel: any set of axes, deterministic
// (a fixed reduction tree that depends only on the shape and layout; no atomics).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "../../core/storage.hpp"
#include "../../kernel/layout.hpp"
#include "block_shared.cuh"
#include "error.hpp"
#include "launch.hpp"
#include "memory.hpp"

TESSERA_BEGIN_NAMESPACE
namespace detail {

/// Where the elements of each reduction live, passed to kernels by value. Output o (row-major
/// over the kept dims) reads input base o_in(o) + r_off(t) for reduced positions t in
/// [0, count) and writes out + o_out(o). Positions are split into `parts` chunks of `chunk`.
struct cuda_reduce_geometry {
  int rrank;  // coalesced reduced dims
  int64_t rshape[max_rank];
  int64_t rstride[max_rank];
  int orank;  // coalesced kept dims, with input and output strides
  int64_t oshape[max_rank];
  int64_t ostride_in[max_rank];
  int64_t ostride_out[max_rank];
  int64_t nout, count, chunk, parts;
};

__device__ inline int64_t cuda_reduced_offset(const cuda_reduce_geometry& g, int64_t t) {
  int64_t off = 0;
  for (int d = g.rrank - 1; d > 0; --d) {
    const int64_t e = g.rshape[d], q = t / e;
    off += (t - q * e) * g.rstride[d];
    t = q;
  }
  return off + t * g.rstride[0];
}

__device__ inline void cuda_output_offsets(const cuda_reduce_geometry& g, int64_t o,
                                           int64_t& in_off, int64_t& out_off) {
  in_off = out_off = 0;
  for (int d = g.orank - 1; d >= 0; --d) {
    const int64_t e = g.oshape[d], q = o / e, c = o - q * e;
    in_off += c * g.ostride_in[d];
    out_off += c * g.ostride_out[d];
    o = q;
  }
}

inline constexpr int cuda_reduce_threads = 256;

/// Shared memory for one accumulator per thread, as bytes: __shared__ variables cannot have
/// constructors, which some accumulator types have.
template <class Acc>
struct alignas(Acc) cuda_reduce_shared {
  unsigned char bytes[sizeof(Acc) * cuda_reduce_threads];
};

/// Shared-memory tree over the blockDim.y threads (a power of two) of each of the blockDim.x
/// columns of a block: pairs (y, y + s) for s = Y/2, ..., 1. The result lands in row 0.
template <class R>
__device__ __forceinline__ void cuda_block_tree(const R& red, typename R::acc_type* sh) {
  const int x = threadIdx.x, y = threadIdx.y, X = blockDim.x;
  __syncthreads();
  for (int s = blockDim.y / 2; s > 0; s >>= 1) {
    if (y < s) sh[y * X + x] = red.combine(sh[y * X + x], sh[(y + s) * X + x]);
    __syncthreads();
  }
}

/// Elements per run of cuda_reduce_runs: one 16-byte load of In.
template <class In>
inline constexpr int cuda_reduce_run = sizeof(In) <= 16 && 16 % sizeof(In) == 0 ? 16 / sizeof(In)
                                                                                : 1;

/// Thread y of Y steps acc through positions [t0, t1) of one strided dim (stride s) in runs of
/// V = cuda_reduce_run<In> consecutive positions: runs y, y + Y, y + 2Y, ..., each in order.
/// Where the dim is contiguous and 16-byte aligned, a whole run is one vector load: four times
/// the bytes in flight per thread of one element per load, which the sum over 1 GiB needs to
/// approach the copy bandwidth. The order is the same either way (it depends on the shape and
/// strides only, never on alignment); t0 is a multiple of V.
template <class R, class In>
__device__ __forceinline__ typename R::acc_type cuda_reduce_runs(const R& red,
                                                                 typename R::acc_type acc,
                                                                 const In* base, int64_t s,
                                                                 int64_t t0, int64_t t1, int y,
                                                                 int Y) {
  constexpr int V = cuda_reduce_run<In>;
  struct alignas(16) run {
    In v[V];
  };
  const bool vector = V > 1 && s == 1 && reinterpret_cast<uintptr_t>(base) % 16 == 0;
  int64_t t = t0 + int64_t{y} * V;
  if (vector) {
    // Whole runs as vectors, eight loads in flight; the last, partial run element-wise.
#pragma unroll 8
    for (; t + V <= t1; t += int64_t{Y} * V) {
      const run r = *reinterpret_cast<const run*>(base + t);
#pragma unroll
      for (int j = 0; j < V; ++j) acc = red.step(acc, r.v[j], t + j);
    }
    if (t < t1)
      for (int64_t u = t; u < t1; ++u) acc = red.step(acc, base[u], u);
    return acc;
  }
#pragma unroll 4
  for (; t < t1; t += int64_t{Y} * V) {
#pragma unroll
    for (int j = 0; j < V; ++j)
      if (t + j < t1) acc = red.step(acc, base[(t + j) * s], t + j);
  }
  return acc;
}

/// Pass 1. A block of X * Y = 256 threads (X and Y from blockDim, one kernel for every layout)
/// handles X consecutive outputs times one chunk of positions; thread (x, y) steps through its
/// positions in order (runs of cuda_reduce_runs over one strided dim, else chunk_start + y,
/// + Y, + 2Y, ...), then the block tree combines the Y
/// partial results of each output. With one chunk per output the result is final; otherwise
/// it goes to part[p * nout + o] (p: the chunk) for pass 2.
template <class R, class In, class Out>
__global__ void __launch_bounds__(cuda_reduce_threads)
    cuda_reduce_pass(R red, const In* in, cuda_reduce_geometry g, Out* out,
                     typename R::acc_type* part) {
  using Acc = typename R::acc_type;
  TESSERA_CUDA_SHARED(cuda_reduce_shared<Acc>, raw);
  Acc* sh = reinterpret_cast<Acc*>(raw.bytes);
  const int x = threadIdx.x, y = threadIdx.y, X = blockDim.x, Y = blockDim.y;
  const int64_t groups = (g.nout + X - 1) / X, items = groups * g.parts;
  for (int64_t w = blockIdx.x; w < items; w += gridDim.x) {
    const int64_t grp = w / g.parts, p = w - grp * g.parts, o = grp * X + x;
    Acc acc = red.identity();
    int64_t in_off = 0, out_off = 0;
    if (o < g.nout) {
      cuda_output_offsets(g, o, in_off, out_off);
      const In* base = in + in_off;
      const int64_t t1 = g.count - p * g.chunk < g.chunk ? g.count : p * g.chunk + g.chunk;
      if (g.rrank <= 1) {  // one strided dim (or a scalar): no index arithmetic
        acc = cuda_reduce_runs(red, acc, base, g.rstride[0], p * g.chunk, t1, y, Y);
      } else {
        for (int64_t t = p * g.chunk + y; t < t1; t += Y)
          acc = red.step(acc, base[cuda_reduced_offset(g, t)], t);
      }
    }
    sh[y * X + x] = acc;
    cuda_block_tree(red, sh);
    if (y == 0 && o < g.nout) {
      if (g.parts == 1)
        out[out_off] = red.finish(sh[x]);
      else
        part[p * g.nout + o] = sh[x];
    }
    __syncthreads();  // sh is reused by the next work item
  }
}

/// Pass 2: combines each output's `parts` partial results, thread y taking parts y, y + Y, ...
/// in order, then the same block tree.
template <class R, class Out>
__global__ void __launch_bounds__(cuda_reduce_threads)
    cuda_reduce_combine(R red, const typename R::acc_type* part, cuda_reduce_geometry g, Out* out) {
  using Acc = typename R::acc_type;
  TESSERA_CUDA_SHARED(cuda_reduce_shared<Acc>, raw);
  Acc* sh = reinterpret_cast<Acc*>(raw.bytes);
  const int x = threadIdx.x, y = threadIdx.y, X = blockDim.x, Y = blockDim.y;
  const int64_t groups = (g.nout + X - 1) / X;
  for (int64_t grp = blockIdx.x; grp < groups; grp += gridDim.x) {
    const int64_t o = grp * X + x;
    Acc acc = red.identity();
    if (o < g.nout)
#pragma unroll 8
      for (int64_t p = y; p < g.parts; p += Y) acc = red.combine(acc, part[p * g.nout + o]);
    sh[y * X + x] = acc;
    cuda_block_tree(red, sh);
    if (y == 0 && o < g.nout) {
      int64_t in_off, out_off;
      cuda_output_offsets(g, o, in_off, out_off);
      out[out_off] = red.finish(sh[x]);
    }
    __syncthreads();
  }
}

}  // namespace detail

namespace backend {

template <>
struct reduce_kernel<cuda> {
  /// Reduces `in` over its trailing dims [kept, rank) into out (whose shape is in's first
  /// `kept` extents), with reducer R: acc_type, identity(), step(acc, x, index), combine(a, b),
  /// finish(acc), all callable on the device. `index` is the element's row-major position in
  /// the reduced dims. Deterministic: the order of combination depends only on the shapes and
  /// strides, never on the device or on timing. Runs asynchronously on cuda_stream().
  template <class R, class In, class Out>
  static void run(const R& red, detail::strided<const In> in, int kept, detail::strided<Out> out) {
    static_assert(std::is_trivially_copyable_v<typename R::acc_type>,
                  "tessera: CUDA reductions keep accumulators in shared memory; acc_type must be "
                  "trivially copyable");
    const int64_t nout = out.shape.numel();
    if (nout == 0) return;
    const detail::reduction_layout lay(in.shape, in.strides, kept, out.shape, out.strides);
    const detail::loop_nest<1>& rn = lay.reduced;
    const detail::loop_nest<2>& on = lay.outputs;

    detail::cuda_reduce_geometry g{};
    g.rrank = rn.rank;
    for (int d = 0; d < rn.rank; ++d) g.rshape[d] = rn.shape[d], g.rstride[d] = rn.strides[0][d];
    g.orank = on.rank;
    for (int d = 0; d < on.rank; ++d) {
      g.oshape[d] = on.shape[d];
      g.ostride_in[d] = on.strides[0][d];
      g.ostride_out[d] = on.strides[1][d];
    }
    g.nout = nout;
    g.count = lay.count;

    // Wide blocks (256 threads on one output) when outputs are few or each reduction is long
    // and either contiguous or not better served by the column layout; otherwise 32 outputs
    // side by side (coalesced when the kept dim is contiguous, as in a sum over rows of [N, C],
    // and no idle threads when reductions are short).
    const int64_t r_inner = rn.rank ? rn.strides[0][rn.rank - 1] : 1;
    const int64_t k_inner = on.rank ? on.strides[0][on.rank - 1] : 0;
    const bool wide = nout < 32 || (g.count >= 128 && (r_inner == 1 || k_inner != 1));
    // Long reductions give each thread four times the positions (128): a quarter of the block
    // trees and of the partial results pass 2 reads. 2^22 positions still make 128 chunks, a
    // block or more per SM; below it more, shorter chunks keep the SMs busy. The rule reads the
    // shape only, so results do not depend on the device.
    if (wide)
      launch(red, in.data, g, out.data, 1, 256, g.count >= (int64_t{1} << 22) ? 128 : 32);
    else
      launch(red, in.data, g, out.data, 32, 8, 64);
  }

 private:
  // Each thread steps through at most `per_thread` positions of a chunk, which bounds both
  // the serial rounding error and the work of one block; longer reductions take pass 2.
  template <class R, class In, class Out>
  static void launch(const R& red, const In* in, detail::cuda_reduce_geometry g, Out* out, int X,
                     int Y, int64_t per_thread) {
    using Acc = typename R::acc_type;
    g.chunk = Y * per_thread;
    g.parts = g.count > g.chunk ? (g.count + g.chunk - 1) / g.chunk : 1;
    const int64_t groups = (g.nout + X - 1) / X;
    const dim3 block(X, Y);
    detail::cuda_scratch scratch(g.parts > 1 ? static_cast<size_t>(g.nout * g.parts) * sizeof(Acc)
                                             : 0);
    Acc* part = static_cast<Acc*>(scratch.get());
    detail::cuda_launch("cuda_reduce_pass", detail::cuda_reduce_pass<R, In, Out>,
                        dim3(detail::cuda_grid(groups * g.parts, 1)), block, red, in, g, out, part);
    if (g.parts > 1)
      detail::cuda_launch("cuda_reduce_combine", detail::cuda_reduce_combine<R, Out>,
                          dim3(detail::cuda_grid(groups, 1)), block, red, part, g, out);
  }
};

}  // namespace backend
TESSERA_END_NAMESPACE

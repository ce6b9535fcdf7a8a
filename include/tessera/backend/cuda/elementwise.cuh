// tessera/backend/cuda/elementwise.cuh - the CUDA map kernel: n-ary elementwise over broadcast
// strided operands, one thread per element in a grid-stride loop.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "../../core/storage.hpp"
#include "../../kernel/functors.hpp"
#include "../../kernel/layout.hpp"
#include "error.hpp"
#include "launch.hpp"

TESSERA_BEGIN_NAMESPACE
namespace detail {

inline constexpr int cuda_map_threads = 256;

/// The coalesced iteration space of N operands (operand 0 is the output), passed to kernels by
/// value: a loop_nest without its host-only member functions.
template <int N>
struct cuda_map_geometry {
  int rank;
  int64_t shape[max_rank];
  int64_t strides[N][max_rank];
};

/// V consecutive elements as one aligned object, so a warp moves 16 bytes per thread.
template <class T, int V>
struct alignas(sizeof(T) * V) cuda_pack {
  T v[V];
};

/// Elements per 16-byte access for the widest operand (1 when nothing is gained).
template <class... T>
inline constexpr int cuda_vec_width = static_cast<int>(16 / std::max({sizeof(T)...}));

/// Whether every pointer is aligned to V of its elements (views with an offset may not be).
template <int V, class... T>
bool cuda_aligned(const T*... p) {
  return ((reinterpret_cast<uintptr_t>(p) % (sizeof(T) * V) == 0) && ...);
}

/// Offsets of each operand at linear (row-major) position i of the iteration space.
template <int N>
__device__ __forceinline__ void cuda_map_offsets(const cuda_map_geometry<N>& g, int64_t i,
                                                 int64_t (&off)[N]) {
  if (g.rank <= 1) {  // rank 0 has all strides 0 and only i = 0
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] = i * g.strides[k][0];
    return;
  }
#pragma unroll
  for (int k = 0; k < N; ++k) off[k] = 0;
  for (int d = g.rank - 1; d > 0; --d) {
    const int64_t e = g.shape[d], q = i / e, c = i - q * e;
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] += c * g.strides[k][d];
    i = q;
  }
#pragma unroll
  for (int k = 0; k < N; ++k) off[k] += i * g.strides[k][0];
}

/// dst = f(src...) for the V elements of one pack.
template <int V, class Out, class F, class... In>
__device__ __forceinline__ void cuda_map_pack(const F& f, cuda_pack<Out, V>* dst,
                                              const cuda_pack<In, V>&... src) {
  cuda_pack<Out, V> r;
#pragma unroll
  for (int j = 0; j < V; ++j) r.v[j] = static_cast<Out>(f(src.v[j]...));
  *dst = r;
}

/// Every operand dense with stride 1 (after coalescing) and aligned to V elements: V elements
/// per thread and iteration, then the tail one by one.
template <int V, class Out, class F, class... In>
__global__ void __launch_bounds__(cuda_map_threads)
    cuda_map_contiguous(F f, int64_t n, Out* out, const In*... in) {
  const int64_t tid = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  const int64_t step = int64_t{gridDim.x} * blockDim.x;
  int64_t done = 0;
  if constexpr (V > 1) {
    const int64_t nv = n / V;
    for (int64_t i = tid; i < nv; i += step)
      cuda_map_pack<V>(f, reinterpret_cast<cuda_pack<Out, V>*>(out) + i,
                       reinterpret_cast<const cuda_pack<In, V>*>(in)[i]...);
    done = nv * V;
  }
  for (int64_t i = done + tid; i < n; i += step) out[i] = static_cast<Out>(f(in[i]...));
}

/// Any strides (including 0 for broadcast inputs).
template <class Out, class F, int N, class... In, size_t... K>
__device__ __forceinline__ void cuda_map_strided_body(const F& f, const cuda_map_geometry<N>& g,
                                                      int64_t n, std::index_sequence<K...>,
                                                      Out* out, const In*... in) {
  const int64_t step = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += step) {
    int64_t off[N];
    cuda_map_offsets(g, i, off);
    out[off[0]] = static_cast<Out>(f(in[off[K + 1]]...));
  }
}
template <class Out, class F, int N, class... In>
__global__ void __launch_bounds__(cuda_map_threads)
    cuda_map_strided(F f, cuda_map_geometry<N> g, int64_t n, Out* out, const In*... in) {
  cuda_map_strided_body(f, g, n, std::index_sequence_for<In...>{}, out, in...);
}

/// out[i] = f(i): values from their index alone (map_kernel<cuda>::generate).
template <class Out, class F>
__global__ void __launch_bounds__(cuda_map_threads) cuda_generate(F f, int64_t n, Out* out) {
  const int64_t step = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += step)
    out[i] = static_cast<Out>(f(i));
}

}  // namespace detail

namespace backend {

template <>
struct map_kernel<cuda> {
  /// out[i] = static_cast<Out>(f(i)) for i < n over contiguous out, f callable in device code
  /// (as for run). Asynchronous, like run.
  template <class Out, class F>
  static void generate(const F& f, Out* out, int64_t n) {
    if (n <= 0) return;
    constexpr int T = detail::cuda_map_threads;
    detail::cuda_launch("cuda_generate", detail::cuda_generate<Out, F>,
                        dim3(detail::cuda_grid(n, T)), dim3(T), f, n, out);
  }

  /// out[i] = static_cast<Out>(f(in[i]...)) over out's shape; inputs arrive broadcast to it
  /// (stride 0 where repeated). f must be callable in device code: tessera's fn:: functors,
  /// a `__host__ __device__` functor, or an extended `__device__` lambda (nvcc
  /// --extended-lambda). Runs asynchronously on cuda_stream().
  template <class Out, class F, class... In>
  static void run(const F& f, detail::strided<Out> out, detail::strided<const In>... in) {
    constexpr int N = 1 + sizeof...(In);
    const int64_t n = out.shape.numel();
    if (n == 0) return;
    const detail::loop_nest<N> nest(out.shape, {&out.strides, &in.strides...});
    bool dense = nest.rank <= 1;
    for (int k = 0; k < N && nest.rank == 1; ++k) dense &= nest.strides[k][0] == 1;
    constexpr int T = detail::cuda_map_threads;
    if (dense) {
      constexpr int V = detail::cuda_vec_width<Out, In...>;
      if (V == 1 || detail::cuda_aligned<V>(out.data, in.data...)) {
        detail::cuda_launch("cuda_map_contiguous", detail::cuda_map_contiguous<V, Out, F, In...>,
                            dim3(detail::cuda_grid(n / V + 1, T)), dim3(T), f, n, out.data,
                            in.data...);
        return;
      }
    }
    detail::cuda_map_geometry<N> g{};
    g.rank = nest.rank;
    for (int d = 0; d < nest.rank; ++d) {
      g.shape[d] = nest.shape[d];
      for (int k = 0; k < N; ++k) g.strides[k][d] = nest.strides[k][d];
    }
    detail::cuda_launch("cuda_map_strided", detail::cuda_map_strided<Out, F, N, In...>,
                        dim3(detail::cuda_grid(n, T)), dim3(T), f, g, n, out.data, in.data...);
  }
};

}  // namespace backend
TESSERA_END_NAMESPACE

// tessera/backend/cuda/pool.cuh - pool_kernel<cuda>: max, average and adaptive average pooling,
// forward and backward, on contiguous NCHW planes (detail::pool_problem).
//
// Forward: one thread per output, the window rules of detail/pool_problem.hpp, the CPU's scan
// order and accumulation types (so max pooling and its indices match the CPU exactly, average
// pooling to rounding). Average backward: one thread per input element gathers the outputs whose
// windows hold it (no atomics). Max backward from indices alone (the public max_pool2d_backward,
// whose indices may name any position of the plane) has one thread per plane add each output's
// gradient at its index, in output order: the CPU's own order, deterministic and race-free, but
// serial within a plane. Autograd, which keeps the indices of its own forward pass and knows
// their windows, gathers instead (max_backward_windows): one thread per input element, the same
// sums in the same order, and no check to wait for.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "../../core/dtype.hpp"
#include "../../kernel/pool_problem.hpp"
#include "error.hpp"
#include "launch.hpp"
#include "memory.hpp"

TESSERA_BEGIN_NAMESPACE
namespace detail {

inline constexpr int cuda_pool_threads = 256;

/// The type max pooling compares in and average pooling sums in (as the CPU backend).
template <class T>
using cuda_pool_max_t = compute_t<T>;
template <class T>
using cuda_pool_sum_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

/// Which windows a kernel uses.
enum class cuda_pool_windows { fixed, adaptive };

template <cuda_pool_windows W>
__device__ __forceinline__ pool_window cuda_pool_row(const pool_problem& pr, int64_t oy) {
  if constexpr (W == cuda_pool_windows::adaptive)
    return adaptive_window_of(oy, pr.h, pr.oh);
  else
    return pool_window_of(oy, pr.h, pr.kh, pr.sh, pr.ph, pr.dh, pr.count_include_pad);
}
template <cuda_pool_windows W>
__device__ __forceinline__ pool_window cuda_pool_col(const pool_problem& pr, int64_t ox) {
  if constexpr (W == cuda_pool_windows::adaptive)
    return adaptive_window_of(ox, pr.w, pr.ow);
  else
    return pool_window_of(ox, pr.w, pr.kw, pr.sw, pr.pw, pr.dw, pr.count_include_pad);
}

/// Max pooling: the first maximum of the window in row-major order, or the last NaN.
template <class T>
__global__ void __launch_bounds__(cuda_pool_threads)
    cuda_pool_max(pool_problem pr, const T* x, T* y, int64_t* indices) {
  using V = cuda_pool_max_t<T>;
  const int64_t ohw = pr.oh * pr.ow, total = pr.planes * ohw;
  const int64_t step = int64_t{gridDim.x} * blockDim.x;
  for (int64_t e = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; e < total; e += step) {
    const int64_t p = e / ohw, oy = e % ohw / pr.ow, ox = e % pr.ow;
    const pool_window r = cuda_pool_row<cuda_pool_windows::fixed>(pr, oy);
    const pool_window c = cuda_pool_col<cuda_pool_windows::fixed>(pr, ox);
    const T* xp = x + p * pr.h * pr.w;
    int64_t best = r.begin * pr.w + c.begin;
    V m = static_cast<V>(xp[best]);
    for (int64_t row = r.begin; row < r.end; row += pr.dh)
      for (int64_t col = c.begin; col < c.end; col += pr.dw) {
        const V v = static_cast<V>(xp[row * pr.w + col]);
        if (v > m || v != v) m = v, best = row * pr.w + col;
      }
    y[e] = xp[best];
    if (indices) indices[e] = best;
  }
}

/// Average pooling: the window summed column by column (rows inside), as the CPU, over the
/// divisor of the window rule.
template <class T, cuda_pool_windows W>
__global__ void __launch_bounds__(cuda_pool_threads)
    cuda_pool_avg(pool_problem pr, const T* x, T* y) {
  using A = cuda_pool_sum_t<T>;
  const int64_t ohw = pr.oh * pr.ow, total = pr.planes * ohw;
  const int64_t step = int64_t{gridDim.x} * blockDim.x;
  for (int64_t e = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; e < total; e += step) {
    const int64_t p = e / ohw, oy = e % ohw / pr.ow, ox = e % pr.ow;
    const pool_window r = cuda_pool_row<W>(pr, oy), c = cuda_pool_col<W>(pr, ox);
    const T* xp = x + p * pr.h * pr.w;
    A acc = 0;
    for (int64_t col = c.begin; col < c.end; ++col) {
      A s = static_cast<A>(xp[r.begin * pr.w + col]);
      for (int64_t row = r.begin + 1; row < r.end; ++row) s += static_cast<A>(xp[row * pr.w + col]);
      acc = col == c.begin ? s : acc + s;
    }
    y[e] = static_cast<T>(acc / static_cast<A>(r.count * c.count));
  }
}

/// The outputs along one axis whose windows may hold input position i: a superset, each
/// candidate is then checked against its window.
template <cuda_pool_windows W>
__device__ __forceinline__ void cuda_pool_candidates(int64_t i, int64_t in, int64_t out, int64_t k,
                                                     int64_t s, int64_t pad, int64_t& lo,
                                                     int64_t& hi) {
  if constexpr (W == cuda_pool_windows::adaptive) {
    lo = i * out / in, hi = (i + 1) * out / in;  // see adaptive_window_of
  } else {
    const int64_t first = i + pad - k + 1;  // window start must be in (i + pad - k, i + pad]
    lo = first <= 0 ? 0 : (first + s - 1) / s, hi = (i + pad) / s;
  }
  if (hi > out - 1) hi = out - 1;
}

/// Average pooling backward (dilation 1): each input element sums gy / divisor over the outputs
/// whose windows hold it, rows then columns in order.
template <class T, cuda_pool_windows W>
__global__ void __launch_bounds__(cuda_pool_threads)
    cuda_pool_avg_backward(pool_problem pr, const T* gy, T* gx) {
  using A = cuda_pool_sum_t<T>;
  const int64_t hw = pr.h * pr.w, total = pr.planes * hw;
  const int64_t step = int64_t{gridDim.x} * blockDim.x;
  for (int64_t e = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; e < total; e += step) {
    const int64_t p = e / hw, iy = e % hw / pr.w, ix = e % pr.w;
    int64_t y0, y1, x0, x1;
    cuda_pool_candidates<W>(iy, pr.h, pr.oh, pr.kh, pr.sh, pr.ph, y0, y1);
    cuda_pool_candidates<W>(ix, pr.w, pr.ow, pr.kw, pr.sw, pr.pw, x0, x1);
    const T* g = gy + p * pr.oh * pr.ow;
    A acc = 0;
    for (int64_t oy = y0; oy <= y1; ++oy) {
      const pool_window r = cuda_pool_row<W>(pr, oy);
      if (iy < r.begin || iy >= r.end) continue;
      for (int64_t ox = x0; ox <= x1; ++ox) {
        const pool_window c = cuda_pool_col<W>(pr, ox);
        if (ix < c.begin || ix >= c.end) continue;
        acc += static_cast<A>(g[oy * pr.ow + ox]) / static_cast<A>(r.count * c.count);
      }
    }
    gx[e] = static_cast<T>(acc);
  }
}

/// Max pooling backward, one thread per plane: gx = 0, then gx[indices[k]] += gy[k] in output
/// order, summing in A (through `acc`, which is gx itself when A is T). An index outside the
/// plane is skipped and sets *bad.
template <class T>
__global__ void __launch_bounds__(cuda_pool_threads)
    cuda_pool_max_backward(pool_problem pr, const T* gy, const int64_t* indices, T* gx,
                           cuda_pool_sum_t<T>* acc, int* bad) {
  using A = cuda_pool_sum_t<T>;
  const int64_t hw = pr.h * pr.w, ohw = pr.oh * pr.ow;
  const int64_t step = int64_t{gridDim.x} * blockDim.x;
  for (int64_t p = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; p < pr.planes; p += step) {
    A* a = acc + p * hw;
    for (int64_t i = 0; i < hw; ++i) a[i] = A(0);
    const T* g = gy + p * ohw;
    const int64_t* id = indices + p * ohw;
    for (int64_t k = 0; k < ohw; ++k) {
      const int64_t i = id[k];
      if (static_cast<uint64_t>(i) < static_cast<uint64_t>(hw))
        a[i] += static_cast<A>(g[k]);
      else
        *bad = 1;  // every writer stores the same value
    }
    if constexpr (!std::is_same_v<A, T>)
      for (int64_t i = 0; i < hw; ++i) gx[p * hw + i] = static_cast<T>(a[i]);
  }
}

/// Max pooling backward for indices that max pooling with pr's windows gave: one thread per
/// input element adds, in output order, the gradients of the outputs whose windows may hold it
/// (cuda_pool_candidates over the dilated extent) and whose index names it. The sums and their
/// order are the scatter's (cuda_pool_max_backward), without a serial loop per plane. An index
/// outside its own window (which max pooling never gives) would be dropped, so only indices from
/// the forward pass may come here.
template <class T>
__global__ void __launch_bounds__(cuda_pool_threads)
    cuda_pool_max_backward_windows(pool_problem pr, const T* gy, const int64_t* indices, T* gx) {
  using A = cuda_pool_sum_t<T>;
  const int64_t hw = pr.h * pr.w, ohw = pr.oh * pr.ow, total = pr.planes * hw;
  const int64_t extent_h = (pr.kh - 1) * pr.dh + 1, extent_w = (pr.kw - 1) * pr.dw + 1;
  const int64_t step = int64_t{gridDim.x} * blockDim.x;
  for (int64_t e = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; e < total; e += step) {
    const int64_t p = e / hw, i = e % hw, iy = i / pr.w, ix = i % pr.w;
    int64_t y0, y1, x0, x1;
    cuda_pool_candidates<cuda_pool_windows::fixed>(iy, pr.h, pr.oh, extent_h, pr.sh, pr.ph, y0, y1);
    cuda_pool_candidates<cuda_pool_windows::fixed>(ix, pr.w, pr.ow, extent_w, pr.sw, pr.pw, x0, x1);
    const T* g = gy + p * ohw;
    const int64_t* id = indices + p * ohw;
    A acc = 0;
    for (int64_t oy = y0; oy <= y1; ++oy)
      for (int64_t ox = x0; ox <= x1; ++ox)
        if (id[oy * pr.ow + ox] == i) acc += static_cast<A>(g[oy * pr.ow + ox]);
    gx[e] = static_cast<T>(acc);
  }
}

template <class... P, class... A>
void cuda_pool_launch(const char* what, void (*kernel)(P...), int64_t items, A&&... args) {
  if (items <= 0) return;
  cuda_launch(what, kernel, dim3(cuda_grid(items, cuda_pool_threads)), dim3(cuda_pool_threads),
              args...);
}

}  // namespace detail

namespace backend {

/// The CUDA pooling kernels: the contract of pool_kernel<cpu> (contiguous NCHW planes, checked
/// by the ops layer), on device pointers.
template <>
struct pool_kernel<cuda> {
  template <class T>
  static void max_forward(const detail::pool_problem& pr, const T* x, T* y, int64_t* indices) {
    detail::cuda_pool_launch("cuda_pool_max", detail::cuda_pool_max<T>, pr.planes * pr.oh * pr.ow,
                             pr, x, y, indices);
  }
  template <class T>
  static void avg_forward(const detail::pool_problem& pr, const T* x, T* y) {
    detail::cuda_pool_launch("cuda_pool_avg",
                             detail::cuda_pool_avg<T, detail::cuda_pool_windows::fixed>,
                             pr.planes * pr.oh * pr.ow, pr, x, y);
  }
  template <class T>
  static void adaptive_avg_forward(const detail::pool_problem& pr, const T* x, T* y) {
    detail::cuda_pool_launch("cuda_pool_avg (adaptive)",
                             detail::cuda_pool_avg<T, detail::cuda_pool_windows::adaptive>,
                             pr.planes * pr.oh * pr.ow, pr, x, y);
  }
  /// Returns false when an index lies outside its plane (those are skipped). Waits for the
  /// kernel: the answer is needed on the host.
  template <class T>
  [[nodiscard]] static bool max_backward(const detail::pool_problem& pr, const T* gy,
                                         const int64_t* indices, T* gx) {
    using A = detail::cuda_pool_sum_t<T>;
    if (pr.planes <= 0) return true;
    const size_t acc_bytes =
        std::is_same_v<A, T> ? 0 : static_cast<size_t>(pr.planes * pr.h * pr.w) * sizeof(A);
    detail::cuda_scratch acc(acc_bytes), flag(sizeof(int));
    TESSERA_CUDA_CHECK(cudaMemsetAsync(flag.get(), 0, sizeof(int), cuda_stream()));
    A* a = acc_bytes ? static_cast<A*>(acc.get()) : reinterpret_cast<A*>(gx);
    detail::cuda_pool_launch("cuda_pool_max_backward", detail::cuda_pool_max_backward<T>, pr.planes,
                             pr, gy, indices, gx, a, static_cast<int*>(flag.get()));
    int bad = 0;
    memory<cuda>::copy_to_host(&bad, flag.get(), sizeof bad);
    return bad == 0;
  }
  /// Max pooling backward for the indices max pooling with pr's windows gave (pr as the forward
  /// pass had it): a gather, no check, no wait. Autograd's path (ops/pool.hpp,
  /// max_pool2d_backward_of_forward).
  template <class T>
  static void max_backward_windows(const detail::pool_problem& pr, const T* gy,
                                   const int64_t* indices, T* gx) {
    detail::cuda_pool_launch("cuda_pool_max_backward_windows",
                             detail::cuda_pool_max_backward_windows<T>, pr.planes * pr.h * pr.w, pr,
                             gy, indices, gx);
  }
  template <class T>
  static void avg_backward(const detail::pool_problem& pr, const T* gy, T* gx) {
    detail::cuda_pool_launch("cuda_pool_avg_backward",
                             detail::cuda_pool_avg_backward<T, detail::cuda_pool_windows::fixed>,
                             pr.planes * pr.h * pr.w, pr, gy, gx);
  }
  template <class T>
  static void adaptive_avg_backward(const detail::pool_problem& pr, const T* gy, T* gx) {
    detail::cuda_pool_launch("cuda_pool_avg_backward (adaptive)",
                             detail::cuda_pool_avg_backward<T, detail::cuda_pool_windows::adaptive>,
                             pr.planes * pr.h * pr.w, pr, gy, gx);
  }
};

}  // namespace backend
TESSERA_END_NAMESPACE

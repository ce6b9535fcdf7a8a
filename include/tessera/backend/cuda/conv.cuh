// tessera/backend/cuda/conv.cuh - conv_kernel<cuda>: 2-D convolution forward, input gradient and
// weight gradient as lowering kernels around the CUDA GEMM (gemm_kernel<cuda>), plus the fused
// ReLU-mask and bias gradient.
//
// Forward: implicit GEMM. Per group, one batched GEMM over all images multiplies the group's
// weights [kg, cg * r * s] by each image's lowered matrix [cg * r * s, ho * wo], with the bias
// (per row) and ReLU in its epilogue, but the lowered matrix is never stored: the GEMM kernels
// gather its tiles from the image while loading them (cuda_conv_gather, through a table of the
// taps' offsets). 1x1 stride-1 unpadded convolutions need no gather (the images are the
// matrices); geometries beyond 32-bit positions fall back to im2col into device memory. Input
// gradient of a stride-1 convolution: the forward implicit GEMM again, since dx is dy convolved
// (stride 1, padding (r - 1) * dil - pad) with the weights flipped in both taps and transposed
// in the channels (cuda_conv_flip_weights, a copy of w's size): no column matrix. Strided input
// gradients: the same per stride phase (cuda_conv_phases: the taps that reach one phase's pixels,
// a stride-1 convolution onto that phase's grid), the grids then interleaved into dx; beyond 16
// phases (or with implicit GEMM off), W^T dy into a column matrix, then col2im gathers each input
// element's taps (each element written once: no atomics). Under conv_algorithm::winograd, float
// 3x3 layers run the forward pass and stride-1 input gradients as Winograd F(4x4, 3x3) instead,
// and their weight gradients as F(3x3, 4x4) (winograd.cuh). Depthwise layers (one input channel
// per group) run their forward pass (and the input gradients made of it) and their weight
// gradient as direct kernels (conv_depthwise.cuh) rather than a GEMM per channel.
// Weight gradient: implicit GEMM (float and double on the SIMT kernel; half, bfloat16 and tf32
// on the register-staged tensor-core kernel), k running over every (image, pixel) pair, dy's
// rows and the input's taps gathered on load
// (cuda_conv_k_gather); elsewhere (other types, or positions beyond 32 bits) the chunk's columns
// and dy are laid side by side along the pixel axis, so one GEMM per chunk and group sums over the
// chunk's images, chunks accumulating with beta = 1 in order. Every sum has a fixed order, so
// results are reproducible run to run.
//
// The lowerings go through device memory (chunks of at most cuda_conv_chunk_bytes); see
// docs/cuda.md.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>
#include <type_traits>
#include <vector>

#include "../../kernel/conv_problem.hpp"
#include "../../kernel/gemm_problem.hpp"
#include "block_shared.cuh"
#include "conv_depthwise.cuh"
#include "error.hpp"
#include "gemm.cuh"
#include "launch.hpp"
#include "memory.hpp"
#include "winograd.cuh"

TESSERA_BEGIN_NAMESPACE
namespace detail {

inline constexpr int cuda_conv_threads = 256;
/// Largest lowered matrix kept in device memory at once (images are lowered in chunks).
inline constexpr int64_t cuda_conv_chunk_bytes = int64_t{256} << 20;

/// Where im2col stores element (image b, row kk, pixel p) of a chunk: b * b_stride + kk *
/// k_stride + p. Forward and input gradient: one matrix per image ({K * P, P}); weight
/// gradient: the images side by side along the pixels ({P, images * P}).
struct cuda_col_layout {
  int64_t b_stride, k_stride;
};

/// Lowers images n0 .. n0 + nb - 1, channels of group grp: row kk = (ci * r + i) * s + j, column
/// p = oy * wo + ox holds input (ci, oy * stride_h - pad_top + i * dil_h, ox * stride_w -
/// pad_left + j * dil_w), zero outside the image.
template <class T>
__global__ void __launch_bounds__(cuda_conv_threads)
    cuda_im2col(conv_geometry g, const T* x, int64_t n0, int64_t nb, int64_t grp,
                cuda_col_layout lay, T* col) {
  const int64_t cg = g.c / g.groups, P = g.ho * g.wo, K = cg * g.r * g.s;
  const int64_t total = nb * K * P, step = int64_t{gridDim.x} * blockDim.x;
  for (int64_t e = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; e < total; e += step) {
    const int64_t p = e % P, t = e / P, kk = t % K, b = t / K;
    const int64_t j = kk % g.s, i = kk / g.s % g.r, ci = kk / (g.r * g.s);
    const int64_t iy = p / g.wo * g.stride_h - g.pad_top + i * g.dil_h;
    const int64_t ix = p % g.wo * g.stride_w - g.pad_left + j * g.dil_w;
    T v{};
    if (iy >= 0 && iy < g.h && ix >= 0 && ix < g.w)
      v = x[(((n0 + b) * g.c + grp * cg + ci) * g.h + iy) * g.w + ix];
    col[b * lay.b_stride + kk * lay.k_stride + p] = v;
  }
}

/// dx for images n0 .. n0 + nb - 1, channels of group grp, from the column gradient dcol (one
/// [K, P] matrix per image): each input element sums, in tap order, the entries of the outputs
/// that read it.
template <class Acc>
__global__ void __launch_bounds__(cuda_conv_threads)
    cuda_col2im(conv_geometry g, const Acc* dcol, int64_t n0, int64_t nb, int64_t grp, Acc* dx) {
  const int64_t cg = g.c / g.groups, P = g.ho * g.wo, K = cg * g.r * g.s, hw = g.h * g.w;
  const int64_t total = nb * cg * hw, step = int64_t{gridDim.x} * blockDim.x;
  for (int64_t e = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; e < total; e += step) {
    const int64_t x = e % g.w, y = e / g.w % g.h, ci = e / hw % cg, b = e / (cg * hw);
    const Acc* base = dcol + (b * K + ci * g.r * g.s) * P;
    Acc acc = Acc(0);
    for (int64_t i = 0; i < g.r; ++i) {
      const int64_t ty = y + g.pad_top - i * g.dil_h;
      if (ty < 0 || ty % g.stride_h != 0 || ty / g.stride_h >= g.ho) continue;
      const int64_t oy = ty / g.stride_h;
      for (int64_t j = 0; j < g.s; ++j) {
        const int64_t tx = x + g.pad_left - j * g.dil_w;
        if (tx < 0 || tx % g.stride_w != 0 || tx / g.stride_w >= g.wo) continue;
        acc += base[(i * g.s + j) * P + oy * g.wo + tx / g.stride_w];
      }
    }
    dx[((n0 + b) * g.c + grp * cg + ci) * hw + y * g.w + x] = acc;
  }
}

/// dy of images n0 .. n0 + nb - 1, output channels of group grp, as one [kg, nb * P] matrix
/// (images side by side), the layout the weight-gradient GEMM sums over.
template <class T>
__global__ void __launch_bounds__(cuda_conv_threads)
    cuda_gather_dy(conv_geometry g, const T* dy, int64_t n0, int64_t nb, int64_t grp, T* out) {
  const int64_t kg = g.k / g.groups, P = g.ho * g.wo;
  const int64_t total = kg * nb * P, step = int64_t{gridDim.x} * blockDim.x;
  for (int64_t e = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; e < total; e += step) {
    const int64_t p = e % P, b = e / P % nb, o = e / (P * nb);
    out[e] = dy[((n0 + b) * g.k + grp * kg + o) * P + p];
  }
}

/// One block per channel (grid-stride): g = y ? (y > 0 ? dy : 0) : dy written to masked when
/// set, and db[ch] = the sum of g over images and plane: each thread sums positions t, t + 256,
/// ... in order, in double, then a fixed shared-memory tree.
template <class T>
__global__ void __launch_bounds__(cuda_conv_threads)
    cuda_conv_bias_backward(conv_bias_backward_problem<T> pr) {
  TESSERA_CUDA_SHARED(double, sh, [cuda_conv_threads]);
  const int t = threadIdx.x;
  const int64_t count = pr.n * pr.plane;
  for (int64_t ch = blockIdx.x; ch < pr.k; ch += gridDim.x) {
    double acc = 0;
    for (int64_t q = t; q < count; q += cuda_conv_threads) {
      const int64_t b = q / pr.plane, at = (b * pr.k + ch) * pr.plane + (q - b * pr.plane);
      const T v = pr.y && !(pr.y[at] > T(0)) ? T(0) : pr.dy[at];
      if (pr.masked) pr.masked[at] = v;
      acc += static_cast<double>(v);
    }
    sh[t] = acc;
    __syncthreads();
    for (int s = cuda_conv_threads / 2; s > 0; s >>= 1) {
      if (t < s) sh[t] += sh[t + s];
      __syncthreads();
    }
    if (t == 0) pr.db[ch] = static_cast<T>(sh[0]);
    __syncthreads();  // sh is reused by the next channel
  }
}

/// The taps of one stride phase of an input gradient (cuda_conv_phases): rows i = i0 + t * step_h
/// for t < r, columns j = j0 + u * step_w for u < s. The whole kernel at stride 1.
struct cuda_conv_tap_subset {
  int64_t i0 = 0, r = 0, step_h = 1, j0 = 0, s = 0, step_w = 1;
};

/// w'[grp * cg + ci][o][t][u] = w[grp * kg + o][ci][i0 + (r' - 1 - t) step_h][j0 + (s' - 1 - u)
/// step_w]: the taps `sub` of w ([k][cg][r][s]), flipped in both directions and transposed in the
/// channels ([c][kg][r'][s']): the weights of the forward convolution that computes an input
/// gradient (cuda_conv_input_grad_geometry with the whole kernel; cuda_conv_phases per phase).
template <class T>
__global__ void __launch_bounds__(cuda_conv_threads)
    cuda_conv_flip_weights(conv_geometry g, cuda_conv_tap_subset sub, const T* w, T* flipped) {
  const int64_t cg = g.c / g.groups, kg = g.k / g.groups, rs = sub.r * sub.s;
  const int64_t total = g.c * kg * rs, step = int64_t{gridDim.x} * blockDim.x;
  for (int64_t e = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; e < total; e += step) {
    const int64_t u = e % sub.s, t = e / sub.s % sub.r, o = e / rs % kg, c = e / (rs * kg);
    const int64_t grp = c / cg, ci = c % cg;
    const int64_t i = sub.i0 + (sub.r - 1 - t) * sub.step_h;
    const int64_t j = sub.j0 + (sub.s - 1 - u) * sub.step_w;
    flipped[e] = w[(((grp * kg + o) * cg + ci) * g.r + i) * g.s + j];
  }
}

/// A strided convolution's input gradient split by stride phase: input pixel (a + stride_h y',
/// b + stride_w x') receives dy only through the kernel rows i whose offset a + pad_top - i dil_h
/// is a multiple of stride_h (and likewise the columns), an arithmetic progression of taps that
/// is the same for every pixel of the phase. So each phase (a, b) is a stride-1 forward
/// convolution of dy with those taps (flipped, cuda_conv_flip_weights) onto the phase's own grid
/// of ceil((h - a) / stride_h) x ceil((w - b) / stride_w) pixels, written to scratch; one pass
/// (cuda_conv_phase_scatter) then interleaves the grids into dx, zeros where a phase has no taps.
/// No column matrix and no col2im: the products read dy where it lies (implicit GEMM).
struct cuda_conv_phases {
  static constexpr int max_phases = 16;  // stride_h * stride_w at most
  int64_t offset[max_phases];            // phase a * stride_w + b's grid in the scratch; -1: zero
  int64_t rows[max_phases], cols[max_phases];  // rows of phase a, columns of phase b
};

/// The taps of phase `a` along one dimension of kernel size r, stride st, dilation d, padding p:
/// the first tap, their number (0 if none) and step; and `first`, the dy offset (a + p - i d) /
/// st of the last of them (the smallest), where the phase's forward convolution starts.
struct cuda_conv_phase_taps {
  int64_t i0 = 0, count = 0, step = 1, first = 0;
};
inline cuda_conv_phase_taps cuda_conv_phase_taps_of(int64_t a, int64_t r, int64_t st, int64_t d,
                                                    int64_t p) {
  cuda_conv_phase_taps t;
  t.step = st / std::gcd(st, d);
  for (t.i0 = 0; t.i0 < std::min(r, t.step); ++t.i0)
    if (((a + p - t.i0 * d) % st + st) % st == 0) break;
  if (t.i0 >= std::min(r, t.step)) return {0, 0, t.step, 0};
  t.count = (r - 1 - t.i0) / t.step + 1;
  t.first = (a + p - (t.i0 + (t.count - 1) * t.step) * d) / st;  // exact
  return t;
}

/// dx of images n0 .. n0 + nb - 1 from the phases' grids in `scratch` (cuda_conv_phases).
template <class Acc>
__global__ void __launch_bounds__(cuda_conv_threads)
    cuda_conv_phase_scatter(conv_geometry g, cuda_conv_phases ph, const Acc* scratch, int64_t n0,
                            int64_t nb, Acc* dx) {
  const int64_t hw = g.h * g.w, total = nb * g.c * hw, step = int64_t{gridDim.x} * blockDim.x;
  for (int64_t e = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; e < total; e += step) {
    const int64_t x = e % g.w, y = e / g.w % g.h, bc = e / hw;  // bc = image * c + channel
    const int64_t a = y % g.stride_h, b = x % g.stride_w, q = a * g.stride_w + b;
    const int64_t off = ph.offset[q];
    dx[n0 * g.c * hw + e] =
        off < 0 ? Acc(0)
                : scratch[off + (bc * ph.rows[a] + y / g.stride_h) * ph.cols[b] + x / g.stride_w];
  }
}

/// The input gradient of a stride-1 convolution g as a forward convolution: its input is dy (k
/// channels of ho x wo), its output dx (c channels of h x w), its weights
/// cuda_conv_flip_weights', its padding (r - 1) * dil - pad (negative when pad is larger). Output
/// pixel (y, x), tap (i', j') = (r - 1 - i, s - 1 - j) then reads dy at (y + pad_top - i * dil_h,
/// x + pad_left - j * dil_w), which is what the gradient sums.
inline conv_geometry cuda_conv_input_grad_geometry(const conv_geometry& g) {
  conv_geometry t = g;
  t.c = g.k, t.h = g.ho, t.w = g.wo;
  t.k = g.c, t.ho = g.h, t.wo = g.w;
  t.pad_top = (g.r - 1) * g.dil_h - g.pad_top;
  t.pad_left = (g.s - 1) * g.dil_w - g.pad_left;
  return t;
}

/// The implicit-GEMM table of g's taps (one per row kk of the lowered matrix). A template only
/// so that the header may define it in every translation unit.
template <class Tap>
__global__ void __launch_bounds__(cuda_conv_threads) cuda_conv_taps(conv_geometry g, Tap* taps) {
  const int64_t rs = g.r * g.s, total = g.c / g.groups * rs;
  const int64_t step = int64_t{gridDim.x} * blockDim.x;
  for (int64_t kk = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; kk < total; kk += step) {
    const int64_t ci = kk / rs, i = kk % rs / g.s, j = kk % g.s;
    const int64_t dy = i * g.dil_h, dx = j * g.dil_w;
    taps[kk] = Tap{static_cast<int32_t>((ci * g.h + dy) * g.w + dx), static_cast<int32_t>(dy),
                   static_cast<int32_t>(dx), 0};
  }
}

/// The channels-last implicit-GEMM table of g's taps: one per chunk q of V rows kk = q * V = (i * s
/// + j) * cg + ci (cg a multiple of V, so a chunk never straddles two taps): its first channel ci
/// and its (dy, dx). A template only so that the header may define it in every translation unit.
template <class Tap>
__global__ void __launch_bounds__(cuda_conv_threads)
    cuda_conv_chunk_taps(conv_geometry g, int64_t v, Tap* taps) {
  const int64_t cg = g.c / g.groups, total = cg * g.r * g.s / v;
  const int64_t step = int64_t{gridDim.x} * blockDim.x;
  for (int64_t q = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; q < total; q += step) {
    const int64_t kk = q * v, tap = kk / cg, i = tap / g.s, j = tap % g.s;
    taps[q] = Tap{static_cast<int32_t>(kk % cg), static_cast<int32_t>(i * g.dil_h),
                  static_cast<int32_t>(j * g.dil_w), 0};
  }
}

/// The implicit-GEMM gather of g's forward product through the tap table `taps`, whose images
/// have `pixel` elements from one pixel to the next (1: planar; c: channels last).
inline cuda_conv_gather cuda_conv_gather_for(const conv_geometry& g, const cuda_conv_tap* taps,
                                             int64_t pixel) {
  return {taps,
          static_cast<int32_t>(g.h),
          static_cast<int32_t>(g.w),
          cuda_fast_div(static_cast<uint32_t>(g.wo)),
          static_cast<int32_t>(g.stride_h),
          static_cast<int32_t>(g.stride_w),
          static_cast<int32_t>(g.pad_top),
          static_cast<int32_t>(g.pad_left),
          static_cast<int32_t>(pixel)};
}

/// Whether the implicit GEMM's 32-bit positions hold g: every tap offset within a group's
/// channels ((ci * h + dy) * w + dx), and every input coordinate an output pixel reaches, below
/// 2^30; the output pixels of an image (divided in 32 bits by the gathers) below 2^31.
inline bool cuda_conv_implicit_fits(const conv_geometry& g) {
  constexpr int64_t lim = int64_t{1} << 30;
  if (g.h <= 0 || g.w <= 0 || g.h >= lim || g.w >= lim || g.pad_top >= lim || g.pad_left >= lim)
    return false;
  if (g.ho * g.stride_h + g.r * g.dil_h >= lim || g.wo * g.stride_w + g.s * g.dil_w >= lim)
    return false;
  if (g.ho * g.wo >= 2 * lim) return false;
  return (g.cg() * g.h + g.r * g.dil_h) < lim / g.w &&
         (g.cg() * g.h + g.r * g.dil_h) * g.w + g.s * g.dil_w < lim;
}

/// Whether the forward pass and stride-1 input gradients may use implicit GEMM (default true).
/// Tests set it to false to run the lowerings that geometries beyond cuda_conv_implicit_fits take.
inline bool& cuda_conv_implicit_gemm() {
  static bool enabled = true;
  return enabled;
}

/// The element types whose weight gradient may run as implicit GEMM (cuda_conv_k_gather): the
/// convolution's floating types, dy and the input of one type (float and double on the SIMT
/// kernel; half, bfloat16, and float under tf32, on the register-staged tensor-core kernel).
template <class TG, class TX>
inline constexpr bool cuda_conv_weight_grad_gathers = std::is_same_v<TG, TX> &&
                                                      (std::is_same_v<TX, float> ||
                                                       std::is_same_v<TX, double> ||
                                                       std::is_same_v<TX, half> ||
                                                       std::is_same_v<TX, bfloat16>);

/// Whether g's weight gradient runs as implicit GEMM: the types above, implicit GEMM switched on,
/// and every position, and the (image, pixel) pairs, within the gathers' 32 bits.
inline bool cuda_conv_weight_grad_implicit(const conv_geometry& g) {
  return cuda_conv_implicit_gemm() && cuda_conv_implicit_fits(g) &&
         g.n * g.ho * g.wo < (int64_t{1} << 31);
}

/// Images per chunk when each needs `bytes_per_image` of lowered data (0: no lowering).
inline int64_t cuda_conv_chunk(int64_t n, int64_t bytes_per_image) {
  if (bytes_per_image <= 0) return n < 1 ? 1 : n;
  const int64_t c = cuda_conv_chunk_bytes / bytes_per_image;
  return std::max<int64_t>(1, std::min(n, c));
}

/// A grid-stride launch of one of the lowering kernels over `items` elements.
template <class... P, class... A>
void cuda_conv_launch(const char* what, void (*kernel)(P...), int64_t items, A&&... args) {
  if (items <= 0) return;
  cuda_launch(what, kernel, dim3(cuda_grid(items, cuda_conv_threads)), dim3(cuda_conv_threads),
              args...);
}

/// Tap tables (cuda_conv_taps, cuda_conv_chunk_taps) built once per device and geometry and kept
/// for the process: a table depends only on the geometry, and building it is a launch, three per
/// training step of a two-convolution CNN. Blocks come from the caching allocator and are never
/// returned (like the losses' column numbers); past `capacity` geometries a table is built per
/// call into scratch that dies with it (`scratch`). A table is built on the stream current at its
/// first use; an event recorded behind the build makes any other stream that uses it wait for it
/// on the device (cudaStreamWaitEvent: no host wait).
class cuda_conv_tap_tables {
 public:
  static constexpr size_t capacity = 1024;

  static cuda_conv_tap_tables& instance() {
    static auto* t = new cuda_conv_tap_tables;  // never destroyed: device memory outlives main
    return *t;
  }

  /// The table for g with `chunk` rows per entry (0: planar, one entry per row), built on the
  /// device the first time, or into `scratch` once the cache is full.
  const cuda_conv_tap* get(const conv_geometry& g, int64_t chunk,
                           std::optional<cuda_scratch>& scratch) {
    const key k{cuda_current_device(), g.cg(), g.h, g.w, g.r, g.s, g.dil_h, g.dil_w, chunk};
    const cudaStream_t stream = cuda_stream();
    std::lock_guard lock(mu_);
    if (const auto it = tables_.find(k); it != tables_.end()) {
      if (it->second.built_on != stream)
        TESSERA_CUDA_CHECK(cudaStreamWaitEvent(stream, it->second.built, 0));
      return it->second.table;
    }
    const int64_t rows = g.cg() * g.r * g.s, entries = chunk ? rows / chunk : rows;
    const size_t bytes = static_cast<size_t>(entries) * sizeof(cuda_conv_tap);
    cuda_conv_tap* table = nullptr;
    if (tables_.size() < capacity) {
      table = static_cast<cuda_conv_tap*>(device_block_cache::instance().allocate(bytes));
    } else {
      scratch.emplace(bytes);
      table = static_cast<cuda_conv_tap*>(scratch->get());
    }
    if (chunk)
      cuda_conv_launch("cuda_conv_chunk_taps", cuda_conv_chunk_taps<cuda_conv_tap>, entries, g,
                       chunk, table);
    else
      cuda_conv_launch("cuda_conv_taps", cuda_conv_taps<cuda_conv_tap>, entries, g, table);
    if (!scratch) {
      cudaEvent_t built = nullptr;
      TESSERA_CUDA_CHECK(cudaEventCreateWithFlags(&built, cudaEventDisableTiming));
      TESSERA_CUDA_CHECK(cudaEventRecord(built, stream));
      tables_.emplace(k, entry{table, stream, built});
    }
    return table;
  }

 private:
  using key = std::array<int64_t, 9>;
  struct entry {
    const cuda_conv_tap* table;
    cudaStream_t built_on;
    cudaEvent_t built;  // recorded after the build on built_on
  };
  std::mutex mu_;
  std::map<key, entry> tables_;
};

}  // namespace detail

namespace backend {

template <>
struct conv_kernel<cuda> {
  /// y = conv(x, w) (+ bias) (relu); every pointer is device memory, contiguous NCHW.
  template <class TX, class TW, class Acc>
  static void run(const detail::conv_forward_problem<TX, TW, Acc>& p) {
    const detail::conv_geometry& g = p.g;
    const int64_t cg = g.c / g.groups, kg = g.k / g.groups, K = cg * g.r * g.s, P = g.ho * g.wo;
    if (g.n == 0 || g.k == 0 || P == 0) return;
    if (detail::cuda_conv_depthwise_forward(p)) return;
    const bool direct = g.is_pointwise();  // the images are the column matrices
    if (!direct && detail::cuda_conv_implicit_gemm() && detail::cuda_conv_implicit_fits(g))
      return run_implicit(p);
    const int64_t nb = detail::cuda_conv_chunk(g.n, direct ? 0 : K * P * int64_t{sizeof(TX)});
    detail::cuda_scratch col(direct ? 0 : static_cast<size_t>(nb * K * P) * sizeof(TX));
    std::vector<int64_t> b_off(static_cast<size_t>(nb)), c_off(static_cast<size_t>(nb));
    for (int64_t n0 = 0; n0 < g.n; n0 += nb) {
      const int64_t cnt = std::min(nb, g.n - n0);
      for (int64_t b = 0; b < cnt; ++b) {
        b_off[static_cast<size_t>(b)] = direct ? b * g.c * P : b * K * P;
        c_off[static_cast<size_t>(b)] = b * g.k * P;
      }
      for (int64_t grp = 0; grp < g.groups; ++grp) {
        const TX* cols = static_cast<const TX*>(col.get());
        if (direct)
          cols = p.x + (n0 * g.c + grp * cg) * P;
        else
          detail::cuda_conv_launch("cuda_im2col", detail::cuda_im2col<TX>, cnt * K * P, g, p.x, n0,
                                   cnt, grp, detail::cuda_col_layout{K * P, P},
                                   static_cast<TX*>(col.get()));
        detail::gemm_problem<TW, TX, Acc> q;
        q.m = kg, q.n = P, q.k = K;
        q.a = p.w + grp * kg * K, q.a_rs = K, q.a_cs = 1;
        q.b = cols, q.b_rs = P, q.b_cs = 1;
        q.c = p.y + (n0 * g.k + grp * kg) * P, q.c_rs = P, q.c_cs = 1;
        if (p.bias) {
          q.bias = p.bias + grp * kg, q.bias_stride = 1;
          q.bias_kind = detail::gemm_bias::per_row;
        }
        q.relu = p.relu;
        q.batch = cnt, q.b_offsets = b_off.data(), q.c_offsets = c_off.data();
        gemm_kernel<cuda>::run(q);
      }
    }
  }

  /// The forward pass as implicit GEMM: per group, one batched product over every image whose
  /// B operand the GEMM kernels gather from the image as they load it (cuda_conv_gather), so
  /// no lowered matrix is written or read; or as Winograd F(4x4, 3x3) where the user chose it
  /// and the layer qualifies (winograd.cuh). Channels last on the pipelined tensor-core kernels
  /// where they take it (run_channels_last), else from the planar images.
  template <class TX, class TW, class Acc>
  static void run_implicit(const detail::conv_forward_problem<TX, TW, Acc>& p) {
    if (detail::cuda_winograd_forward(p) || run_channels_last(p)) return;
    const detail::conv_geometry& g = p.g;
    std::optional<detail::cuda_scratch> scratch;
    const detail::cuda_conv_tap* table =
        detail::cuda_conv_tap_tables::instance().get(g, 0, scratch);
    run_gathered(p, detail::cuda_conv_gather_for(g, table, 1), p.w, p.x, g.cg() * g.h * g.w);
  }

  /// The products of an implicit-GEMM forward pass, one batched over the images per group: the
  /// weights w ([k][K] row-major), the images through `gather` from `images` (image b at b * c * h
  /// * w, group grp's first channel grp * group_stride further), bias and ReLU in the epilogue.
  /// False as cuda_gemm_run<true> (a channels-last gather no kernel took; nothing written).
  template <class TX, class TW, class Acc>
  static bool run_gathered(const detail::conv_forward_problem<TX, TW, Acc>& p,
                           const detail::cuda_conv_gather& gather, const TW* w, const TX* images,
                           int64_t group_stride) {
    const detail::conv_geometry& g = p.g;
    const int64_t kg = g.k / g.groups, K = g.cg() * g.r * g.s, P = g.ho * g.wo;
    std::vector<int64_t> b_off(static_cast<size_t>(g.n)), c_off(static_cast<size_t>(g.n));
    for (int64_t b = 0; b < g.n; ++b) {
      b_off[static_cast<size_t>(b)] = b * g.c * g.h * g.w;
      c_off[static_cast<size_t>(b)] = b * g.k * P;
    }
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      detail::gemm_problem<TW, TX, Acc> q;
      q.m = kg, q.n = P, q.k = K;
      q.a = w + grp * kg * K, q.a_rs = K, q.a_cs = 1;
      q.b = images + grp * group_stride, q.b_rs = P, q.b_cs = 1;  // read through the gather
      q.c = p.y + grp * kg * P, q.c_rs = P, q.c_cs = 1;
      if (p.bias) {
        q.bias = p.bias + grp * kg, q.bias_stride = 1;
        q.bias_kind = detail::gemm_bias::per_row;
      }
      q.relu = p.relu;
      q.batch = g.n, q.b_offsets = b_off.data(), q.c_offsets = c_off.data();
      // A kernel that refuses one group refuses them all (its answers are per process).
      if (!detail::cuda_gemm_run<true>(q, gather)) return false;
    }
    return true;
  }

  /// The forward pass as implicit GEMM on the pipelined tensor-core kernels (wgmma, mma.sync):
  /// half x half, bfloat16 x bfloat16, or float x float under tf32, with a multiple of 16 bytes
  /// of channels per group. Those kernels copy 16-byte chunks, which a planar image has only
  /// along a row of pixels, where the taps' bounds differ element by element; so the images are
  /// copied channels last ([n][h][w][c]) and the weights tap-major ([k][r][s][cg]) first (the
  /// GEMM operands' k-contiguous pack, cuda_pack_operand), and row kk = (i * s + j) * cg + ci of
  /// the lowered input is then 16-byte chunks of channels of one tap at one pixel, zeros in the
  /// padding (cuda_copy_conv_tile). False, having written nothing, where this does not apply or
  /// no such kernel runs (switched off, not built for the device, shared memory refused).
  template <class TX, class TW, class Acc>
  static bool run_channels_last(const detail::conv_forward_problem<TX, TW, Acc>& p) {
    using Cfg = typename detail::cuda_tc_select<TW, TX, Acc>::type;
    if constexpr (std::is_void_v<Cfg> || !detail::cuda_tc_async_family<Cfg, TW, TX>) {
      (void)p;
      return false;
    } else {
      const detail::conv_geometry& g = p.g;
      constexpr int64_t V = 16 / sizeof(TX);  // channels per chunk
      const int64_t cg = g.cg(), rs = g.r * g.s, K = cg * rs, hw = g.h * g.w;
      // Channel offsets within an image (32-bit in the taps) stay below 2^30 (pixel indices are
      // below 2^31: cuda_conv_implicit_fits holds).
      if (cg % V != 0 || g.c >= (int64_t{1} << 30) / hw ||
          !detail::cuda_gemm_conv_chunks_ready<Cfg, TW, TX, Acc>())
        return false;
      std::optional<detail::cuda_scratch> xs, ws;
      // x: [n][c][hw] -> [n][hw][c] (operand "pixel o, channel k"); w: [k][cg][rs] -> [k][rs][cg].
      const auto xt = detail::cuda_pack_operand(
          detail::cuda_gemm_operand<TX>{p.x, 1, hw, nullptr, g.c * hw}, g.n, hw, g.c, xs);
      const auto wt = detail::cuda_pack_operand(
          detail::cuda_gemm_operand<TW>{p.w, 1, rs, nullptr, K}, g.k, rs, cg, ws);
      std::optional<detail::cuda_scratch> scratch;
      const detail::cuda_conv_tap* table =
          detail::cuda_conv_tap_tables::instance().get(g, V, scratch);
      // On refusal the caller runs every group again on the planar images.
      return run_gathered(p, detail::cuda_conv_gather_for(g, table, g.c), wt.x, xt.x, cg);
    }
  }

  /// dx = the input gradient of conv, from dy and w (overwrites dx).
  template <class TG, class TW, class Acc>
  static void run(const detail::conv_backward_input_problem<TG, TW, Acc>& p) {
    const detail::conv_geometry& g = p.g;
    const int64_t cg = g.c / g.groups, kg = g.k / g.groups, K = cg * g.r * g.s, P = g.ho * g.wo;
    if (g.n == 0 || g.c == 0 || g.h * g.w == 0) return;
    const bool direct = g.is_pointwise();  // W^T dy is dx itself
    if (!direct && g.stride_h == 1 && g.stride_w == 1 && detail::cuda_conv_implicit_gemm()) {
      const detail::conv_geometry t = detail::cuda_conv_input_grad_geometry(g);
      if (detail::cuda_conv_implicit_fits(t)) {
        detail::cuda_scratch flipped(static_cast<size_t>(g.c * kg * g.r * g.s) * sizeof(TW));
        auto* wf = static_cast<TW*>(flipped.get());
        detail::cuda_conv_launch("cuda_conv_flip_weights", detail::cuda_conv_flip_weights<TW>,
                                 g.c * kg * g.r * g.s, g,
                                 detail::cuda_conv_tap_subset{0, g.r, 1, 0, g.s, 1}, p.w, wf);
        return run(detail::conv_forward_problem<TG, TW, Acc>{t, p.dy, wf, p.dx});
      }
    }
    if (!direct && detail::cuda_conv_implicit_gemm() && (g.stride_h > 1 || g.stride_w > 1) &&
        g.stride_h * g.stride_w <= detail::cuda_conv_phases::max_phases)
      return run_input_grad_phases(p);
    const int64_t nb = detail::cuda_conv_chunk(g.n, direct ? 0 : K * P * int64_t{sizeof(Acc)});
    detail::cuda_scratch dcol(direct ? 0 : static_cast<size_t>(nb * K * P) * sizeof(Acc));
    std::vector<int64_t> b_off(static_cast<size_t>(nb)), c_off(static_cast<size_t>(nb));
    for (int64_t n0 = 0; n0 < g.n; n0 += nb) {
      const int64_t cnt = std::min(nb, g.n - n0);
      for (int64_t b = 0; b < cnt; ++b) {
        b_off[static_cast<size_t>(b)] = b * g.k * P;
        c_off[static_cast<size_t>(b)] = direct ? b * g.c * P : b * K * P;
      }
      for (int64_t grp = 0; grp < g.groups; ++grp) {
        detail::gemm_problem<TW, TG, Acc> q;
        q.m = K, q.n = P, q.k = kg;
        q.a = p.w + grp * kg * K, q.a_rs = 1, q.a_cs = K;  // W_g^T
        q.b = p.dy + (n0 * g.k + grp * kg) * P, q.b_rs = P, q.b_cs = 1;
        q.c = direct ? p.dx + (n0 * g.c + grp * cg) * P : static_cast<Acc*>(dcol.get());
        q.c_rs = P, q.c_cs = 1;
        q.batch = cnt, q.b_offsets = b_off.data(), q.c_offsets = c_off.data();
        gemm_kernel<cuda>::run(q);
        if (!direct)
          detail::cuda_conv_launch("cuda_col2im", detail::cuda_col2im<Acc>, cnt * cg * g.h * g.w, g,
                                   static_cast<const Acc*>(dcol.get()), n0, cnt, grp, p.dx);
      }
    }
  }

  /// A strided input gradient by stride phase (cuda_conv_phases): per chunk of images, each
  /// phase with taps a forward convolution of dy into its grid in scratch (implicit GEMM where
  /// it fits), then one scatter into dx.
  template <class TG, class TW, class Acc>
  static void run_input_grad_phases(const detail::conv_backward_input_problem<TG, TW, Acc>& p) {
    const detail::conv_geometry& g = p.g;
    const int64_t sh = g.stride_h, sw = g.stride_w, kg = g.k / g.groups;
    detail::cuda_conv_phase_taps rt[detail::cuda_conv_phases::max_phases];
    detail::cuda_conv_phase_taps ct[detail::cuda_conv_phases::max_phases];
    detail::cuda_conv_phases ph{};
    for (int64_t a = 0; a < sh; ++a) {
      rt[a] = detail::cuda_conv_phase_taps_of(a, g.r, sh, g.dil_h, g.pad_top);
      ph.rows[a] = a < g.h ? (g.h - 1 - a) / sh + 1 : 0;
    }
    for (int64_t b = 0; b < sw; ++b) {
      ct[b] = detail::cuda_conv_phase_taps_of(b, g.s, sw, g.dil_w, g.pad_left);
      ph.cols[b] = b < g.w ? (g.w - 1 - b) / sw + 1 : 0;
    }
    // The phases' flipped weights side by side (each tap in one phase at most), once for every
    // chunk.
    int64_t w_at[detail::cuda_conv_phases::max_phases], w_total = 0;
    for (int64_t a = 0; a < sh; ++a)
      for (int64_t b = 0; b < sw; ++b)
        w_at[a * sw + b] = w_total, w_total += g.c * kg * rt[a].count * ct[b].count;
    detail::cuda_scratch weights(static_cast<size_t>(w_total) * sizeof(TW));
    TW* wf = static_cast<TW*>(weights.get());
    for (int64_t a = 0; a < sh; ++a)
      for (int64_t b = 0; b < sw; ++b) {
        const detail::cuda_conv_tap_subset sub{rt[a].i0, rt[a].count, rt[a].step,
                                               ct[b].i0, ct[b].count, ct[b].step};
        detail::cuda_conv_launch("cuda_conv_flip_weights", detail::cuda_conv_flip_weights<TW>,
                                 g.c * kg * sub.r * sub.s, g, sub, p.w, wf + w_at[a * sw + b]);
      }
    const int64_t image = g.c * g.h * g.w, P = g.ho * g.wo;
    const int64_t nb = detail::cuda_conv_chunk(g.n, image * int64_t{sizeof(Acc)});
    detail::cuda_scratch scratch(static_cast<size_t>(nb * image) * sizeof(Acc));
    Acc* grids = static_cast<Acc*>(scratch.get());
    for (int64_t n0 = 0; n0 < g.n; n0 += nb) {
      const int64_t cnt = std::min(nb, g.n - n0);
      int64_t at = 0;
      for (int64_t a = 0; a < sh; ++a)
        for (int64_t b = 0; b < sw; ++b) {
          const int64_t q = a * sw + b, pixels = ph.rows[a] * ph.cols[b];
          ph.offset[q] = -1;
          if (rt[a].count == 0 || ct[b].count == 0 || pixels == 0) continue;
          detail::conv_geometry t = g;
          t.n = cnt, t.c = g.k, t.h = g.ho, t.w = g.wo, t.k = g.c;
          t.r = rt[a].count, t.s = ct[b].count, t.ho = ph.rows[a], t.wo = ph.cols[b];
          t.stride_h = t.stride_w = 1;
          t.dil_h = g.dil_h / std::gcd(sh, g.dil_h), t.dil_w = g.dil_w / std::gcd(sw, g.dil_w);
          t.pad_top = -rt[a].first, t.pad_left = -ct[b].first;
          ph.offset[q] = at;
          run(detail::conv_forward_problem<TG, TW, Acc>{t, p.dy + n0 * g.k * P, wf + w_at[q],
                                                        grids + at});
          at += cnt * g.c * pixels;
        }
      detail::cuda_conv_launch("cuda_conv_phase_scatter", detail::cuda_conv_phase_scatter<Acc>,
                               cnt * image, g, ph, static_cast<const Acc*>(grids), n0, cnt, p.dx);
    }
  }

  /// dw = the weight gradient of conv, summed over the batch (overwrites dw).
  template <class TX, class TG, class Acc>
  static void run(const detail::conv_backward_weight_problem<TX, TG, Acc>& p) {
    const detail::conv_geometry& g = p.g;
    const int64_t cg = g.c / g.groups, kg = g.k / g.groups, K = cg * g.r * g.s, P = g.ho * g.wo;
    if (g.k == 0 || K == 0) return;
    if (detail::cuda_conv_depthwise_weight_grad_run(p)) return;
    if (detail::cuda_winograd_weight_grad(p)) return;  // conv_algorithm::winograd, 3x3 stride 1
    if constexpr (detail::cuda_conv_weight_grad_gathers<TG, TX>) {
      if (detail::cuda_conv_weight_grad_implicit(g)) return run_weight_grad_implicit(p);
    }
    const int64_t per_image = K * P * int64_t{sizeof(TX)} + kg * P * int64_t{sizeof(TG)};
    const int64_t nb = detail::cuda_conv_chunk(g.n, per_image);
    detail::cuda_scratch col(static_cast<size_t>(nb * K * P) * sizeof(TX));
    detail::cuda_scratch dyg(static_cast<size_t>(nb * kg * P) * sizeof(TG));
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      int64_t n0 = 0;
      do {  // at least once: with no images (or pixels) the k = 0 product writes zeros
        const int64_t cnt = std::min(nb, g.n - n0);
        detail::cuda_conv_launch("cuda_im2col", detail::cuda_im2col<TX>, cnt * K * P, g, p.x, n0,
                                 cnt, grp, detail::cuda_col_layout{P, cnt * P},
                                 static_cast<TX*>(col.get()));
        detail::cuda_conv_launch("cuda_gather_dy", detail::cuda_gather_dy<TG>, kg * cnt * P, g,
                                 p.dy, n0, cnt, grp, static_cast<TG*>(dyg.get()));
        detail::gemm_problem<TG, TX, Acc> q;
        q.m = kg, q.n = K, q.k = cnt * P;
        q.a = static_cast<const TG*>(dyg.get()), q.a_rs = cnt * P, q.a_cs = 1;
        q.b = static_cast<const TX*>(col.get()), q.b_rs = 1, q.b_cs = cnt * P;  // col^T
        q.c = p.dw + grp * kg * K, q.c_rs = K, q.c_cs = 1;
        q.beta = Acc(n0 == 0 ? 0 : 1);
        gemm_kernel<cuda>::run(q);
        n0 += cnt;
      } while (n0 < g.n);
    }
  }

  /// The weight gradient as implicit GEMM, one product per group over every (image, pixel)
  /// pair: dy's rows and the input's taps are gathered as the GEMM kernel loads them
  /// (cuda_conv_k_gather), so neither the lowered input nor a regrouped dy is written; k is split
  /// where the product has few output tiles. One launch per group (two with a split) instead of
  /// im2col, a dy gather and the product per chunk of images.
  template <class TX, class TG, class Acc>
  static void run_weight_grad_implicit(const detail::conv_backward_weight_problem<TX, TG, Acc>& p) {
    const detail::conv_geometry& g = p.g;
    const int64_t cg = g.cg(), kg = g.k / g.groups, K = cg * g.r * g.s, P = g.ho * g.wo;
    std::optional<detail::cuda_scratch> scratch;
    const detail::cuda_conv_tap* table =
        detail::cuda_conv_tap_tables::instance().get(g, 0, scratch);
    const detail::cuda_conv_gather gather = detail::cuda_conv_gather_for(g, table, 1);
    // P = 0 (or no images): k = 0, the product writes zeros; the divisor must still be valid.
    const detail::cuda_conv_k_gather kgather{
        detail::cuda_fast_div(static_cast<uint32_t>(P > 0 ? P : 1)), g.k * P, g.c * g.h * g.w};
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      detail::gemm_problem<TG, TX, Acc> q;
      q.m = kg, q.n = K, q.k = g.n * P;
      q.a = p.dy + grp * kg * P, q.a_rs = P, q.a_cs = 1;         // read through kgather
      q.b = p.x + grp * cg * g.h * g.w, q.b_rs = 1, q.b_cs = 1;  // read through gather
      q.c = p.dw + grp * kg * K, q.c_rs = K, q.c_cs = 1;
      detail::cuda_gemm_run_weight_grad(q, gather, kgather);
    }
  }

  /// The bias gradient with the optional ReLU mask (see detail::conv_bias_backward_problem).
  template <class T>
  static void run(const detail::conv_bias_backward_problem<T>& p) {
    if (p.k <= 0) return;
    detail::cuda_launch("cuda_conv_bias_backward", detail::cuda_conv_bias_backward<T>,
                        dim3(detail::cuda_grid(p.k, 1)), dim3(detail::cuda_conv_threads), p);
  }
};

}  // namespace backend
TESSERA_END_NAMESPACE

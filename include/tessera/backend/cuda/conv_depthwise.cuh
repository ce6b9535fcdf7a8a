// tessera/backend/cuda/conv_depthwise.cuh - depthwise convolutions (one input channel per
// group) as direct kernels: the forward pass, and the weight gradient.
//
// A depthwise layer is a GEMM of one row of k = r * s per group: as implicit GEMM it is one
// launch per channel, each a sliver of a tile (40x slower than cuDNN on an H200, 8 x 128 x 56 x
// 56, 3x3). Here each thread computes a strip of outputs of one row from their r * s taps, read
// through L1 from the one input plane the output channel sees: one launch for the layer (1.75x
// cuDNN there, fp32; docs/perf/cuda_depthwise.md). The weight gradient: one block per channel
// (3x3) or per weight, summing over every (image, pixel) pair, one launch.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../../kernel/conv_problem.hpp"
#include "block_shared.cuh"
#include "gemm_args.cuh"
#include "launch.hpp"

TESSERA_BEGIN_NAMESPACE
namespace detail {

inline constexpr int cuda_depthwise_threads = 256;

/// Whether depthwise layers run the direct kernels (default true; tests switch them off to run
/// the implicit GEMMs on depthwise layers too).
inline bool& cuda_conv_direct_depthwise() {
  static bool enabled = true;
  return enabled;
}

/// Whether g is depthwise: one input channel per group (any number of outputs per channel).
inline bool cuda_conv_is_depthwise(const conv_geometry& g) { return g.groups > 1 && g.cg() == 1; }

/// Outputs per thread of the forward kernel: consecutive pixels of one output row.
inline constexpr int cuda_depthwise_strip = 4;

/// The divisors of the forward kernel's index arithmetic, as multiply-shifts (cuda_fast_div):
/// strips per output row and per plane, output channels, outputs per input channel.
struct cuda_depthwise_divs {
  cuda_fast_div strips_per_row, strips_per_plane, k, kg;
};

/// y[b][o][oy][ox] = sum over taps (i, j) of x[b][o / kg][iy][ix] * w[o][i][j] (+ bias[o])
/// (relu), iy = oy * stride_h - pad_top + i * dil_h (likewise ix), taps outside the image
/// skipped; taps in row-major order, each an FMA in Acc. Each thread computes a strip of
/// cuda_depthwise_strip outputs of one row, so the divisions that place it (multiply-shifts)
/// and each tap's row check and weight serve four outputs; R x S taps known at compile time
/// (3 x 3) unroll completely, 0 x 0 reads them from g. Every index below 2^31
/// (cuda_conv_depthwise_narrow).
template <int R, int S, class TX, class TW, class Acc>
__global__ void __launch_bounds__(cuda_depthwise_threads)
    cuda_conv_depthwise(conv_forward_problem<TX, TW, Acc> p, cuda_depthwise_divs dv) {
  constexpr int V = cuda_depthwise_strip;
  const conv_geometry& g = p.g;
  const int32_t wo = static_cast<int32_t>(g.wo), h = static_cast<int32_t>(g.h);
  const int32_t w = static_cast<int32_t>(g.w), c = static_cast<int32_t>(g.c);
  const int32_t r = R ? R : static_cast<int32_t>(g.r), s = S ? S : static_cast<int32_t>(g.s);
  const int32_t sh = static_cast<int32_t>(g.stride_h), sw = static_cast<int32_t>(g.stride_w);
  const int32_t dh = static_cast<int32_t>(g.dil_h), dw = static_cast<int32_t>(g.dil_w);
  const uint32_t spr = dv.strips_per_row.d, spp = dv.strips_per_plane.d;
  const uint32_t k = dv.k.d, total = static_cast<uint32_t>(g.n) * k * spp;
  for (uint32_t e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += gridDim.x * blockDim.x) {
    const uint32_t plane = dv.strips_per_plane(e), strip = e - plane * spp;
    const uint32_t oy = dv.strips_per_row(strip), ox0 = (strip - oy * spr) * V;
    const uint32_t b = dv.k(plane), o = plane - b * k;
    const TX* const xp = p.x + static_cast<int64_t>(b * c + dv.kg(o)) * h * w;
    const TW* const wp = p.w + static_cast<int64_t>(o) * r * s;
    const int32_t y0 = static_cast<int32_t>(oy) * sh - static_cast<int32_t>(g.pad_top);
    const int32_t x0 = static_cast<int32_t>(ox0) * sw - static_cast<int32_t>(g.pad_left);
    Acc acc[V];
#pragma unroll
    for (int v = 0; v < V; ++v) acc[v] = Acc(0);
#pragma unroll
    for (int32_t i = 0; i < r; ++i) {
      const int32_t iy = y0 + i * dh;
      if (iy < 0 || iy >= h) continue;
      const TX* const row = xp + iy * w;
#pragma unroll
      for (int32_t j = 0; j < s; ++j) {
        const Acc wv = static_cast<Acc>(wp[i * s + j]);
#pragma unroll
        for (int v = 0; v < V; ++v) {  // strips past the row's end compute, but store nothing
          const int32_t ix = x0 + v * sw + j * dw;
          if (ix >= 0 && ix < w) acc[v] = cuda_gemm_fma(static_cast<Acc>(row[ix]), wv, acc[v]);
        }
      }
    }
    Acc* const yp = p.y + static_cast<int64_t>(plane) * g.ho * wo + oy * wo + ox0;
#pragma unroll
    for (int v = 0; v < V; ++v) {
      if (static_cast<int32_t>(ox0) + v >= wo) break;
      Acc out = acc[v];
      if (p.bias) out += p.bias[o];
      if (p.relu && out < Acc(0)) out = Acc(0);  // NaN stays NaN, as in the GEMM epilogue
      yp[v] = out;
    }
  }
}

/// dw[o][i][j] = the sum over images b and output pixels (oy, ox) of dy[b][o][oy][ox] *
/// x[b][o / kg][iy][ix] (taps outside the image skipped). Blocks take whole channels where the
/// taps are known at compile time (R x S: 3 x 3), summing every tap from one read of dy, else one
/// weight (channel, tap) each (R = S = 0); grid-stride. Each thread sums the (image, pixel)
/// pairs t, t + 256, ... in order with FMAs in Acc, then a fixed shared-memory tree per weight,
/// so the order depends on the shape alone. Every index below 2^31
/// (cuda_conv_depthwise_narrow); pixels per plane and per row divide as multiply-shifts.
template <int R, int S, class TX, class TG, class Acc>
__global__ void __launch_bounds__(cuda_depthwise_threads)
    cuda_conv_depthwise_weight_grad(conv_backward_weight_problem<TX, TG, Acc> p,
                                    cuda_fast_div per_plane, cuda_fast_div per_row) {
  constexpr int T = R * S > 0 ? R * S : 1;  // the weights a block sums at once
  TESSERA_CUDA_SHARED(Acc, sh, [cuda_depthwise_threads]);
  const conv_geometry& g = p.g;
  const int32_t wo = static_cast<int32_t>(per_row.d), P = static_cast<int32_t>(per_plane.d);
  const int32_t k = static_cast<int32_t>(g.k), kg = static_cast<int32_t>(g.k / g.groups);
  const int32_t h = static_cast<int32_t>(g.h), w = static_cast<int32_t>(g.w);
  const int32_t s = S ? S : static_cast<int32_t>(g.s);
  const int32_t taps = (R ? R : static_cast<int32_t>(g.r)) * s;
  const int32_t pairs = static_cast<int32_t>(g.n) * P, items = R ? k : k * taps;
  const int t = static_cast<int>(threadIdx.x);
  for (int32_t item = static_cast<int32_t>(blockIdx.x); item < items;
       item += static_cast<int32_t>(gridDim.x)) {
    const int32_t o = R ? item : item / taps, tap0 = R ? 0 : item % taps;
    const int32_t xc = o / kg;  // the input channel
    Acc acc[T];
#pragma unroll
    for (int q = 0; q < T; ++q) acc[q] = Acc(0);
    for (int32_t e = t; e < pairs; e += cuda_depthwise_threads) {
      const int32_t b = static_cast<int32_t>(per_plane(static_cast<uint32_t>(e)));
      const int32_t pix = e - b * P;
      const int32_t oy = static_cast<int32_t>(per_row(static_cast<uint32_t>(pix)));
      const int32_t ox = pix - oy * wo;
      const Acc d = static_cast<Acc>(p.dy[static_cast<int64_t>(b * k + o) * P + pix]);
      const TX* const xp = p.x + static_cast<int64_t>(b * (k / kg) + xc) * h * w;
#pragma unroll
      for (int q = 0; q < T; ++q) {
        const int32_t tap = tap0 + q, i = tap / s, j = tap - i * s;
        const int32_t iy = oy * static_cast<int32_t>(g.stride_h) - static_cast<int32_t>(g.pad_top) +
                           i * static_cast<int32_t>(g.dil_h);
        const int32_t ix = ox * static_cast<int32_t>(g.stride_w) -
                           static_cast<int32_t>(g.pad_left) + j * static_cast<int32_t>(g.dil_w);
        if (iy >= 0 && iy < h && ix >= 0 && ix < w)
          acc[q] = cuda_gemm_fma(d, static_cast<Acc>(xp[iy * w + ix]), acc[q]);
      }
    }
#pragma unroll
    for (int q = 0; q < T; ++q) {
      sh[t] = acc[q];
      __syncthreads();
      for (int half_ = cuda_depthwise_threads / 2; half_ > 0; half_ >>= 1) {
        if (t < half_) sh[t] += sh[t + half_];
        __syncthreads();
      }
      if (t == 0) p.dw[static_cast<int64_t>(o) * taps + tap0 + q] = sh[0];
      __syncthreads();  // sh is reused by the next weight
    }
  }
}

/// Whether every index the depthwise kernels form for g fits in 31 bits (then they run with
/// 32-bit divisions): outputs, input positions (padding reaches below 0 or past the image by a
/// kernel's reach), plane offsets, weights.
inline bool cuda_conv_depthwise_narrow(const conv_geometry& g) {
  constexpr int64_t lim = int64_t{1} << 30;
  const int64_t pad_h = g.pad_top < 0 ? -g.pad_top : g.pad_top;
  const int64_t pad_w = g.pad_left < 0 ? -g.pad_left : g.pad_left;
  return g.n * g.k * g.ho * g.wo < lim && g.n * g.c * g.h * g.w < lim && g.k * g.r * g.s < lim &&
         g.ho * g.stride_h + g.r * g.dil_h + pad_h < lim &&
         g.wo * g.stride_w + g.s * g.dil_w + pad_w < lim && g.h < lim && g.w < lim;
}

/// Runs p's weight gradient on the direct kernel when it applies (a depthwise layer, switched
/// on); false, having launched nothing, otherwise.
template <class TX, class TG, class Acc>
bool cuda_conv_depthwise_weight_grad_run(const conv_backward_weight_problem<TX, TG, Acc>& p) {
  const conv_geometry& g = p.g;
  if (!cuda_conv_direct_depthwise() || !cuda_conv_is_depthwise(g) || !cuda_conv_depthwise_narrow(g))
    return false;
  const bool three = g.r == 3 && g.s == 3;
  const int64_t items = three ? g.k : g.k * g.r * g.s;
  if (items <= 0) return true;
  const int64_t cap = int64_t{cuda_sm_count()} * 32;
  const dim3 grid(static_cast<unsigned>(items < cap ? items : cap)), block(cuda_depthwise_threads);
  // P = 0 (no pixels): no pairs, the sums are 0; the divisors must still be valid.
  const int64_t P = g.ho * g.wo;
  const cuda_fast_div per_plane(static_cast<uint32_t>(P > 0 ? P : 1));
  const cuda_fast_div per_row(static_cast<uint32_t>(g.wo > 0 ? g.wo : 1));
  if (three)
    cuda_launch("cuda_conv_depthwise_weight_grad",
                cuda_conv_depthwise_weight_grad<3, 3, TX, TG, Acc>, grid, block, p, per_plane,
                per_row);
  else
    cuda_launch("cuda_conv_depthwise_weight_grad",
                cuda_conv_depthwise_weight_grad<0, 0, TX, TG, Acc>, grid, block, p, per_plane,
                per_row);
  return true;
}

/// Runs p's forward pass on the direct kernel when it applies (a depthwise layer whose indices
/// fit in 31 bits, switched on); false, having launched nothing, otherwise.
template <class TX, class TW, class Acc>
bool cuda_conv_depthwise_forward(const conv_forward_problem<TX, TW, Acc>& p) {
  const conv_geometry& g = p.g;
  if (!cuda_conv_direct_depthwise() || !cuda_conv_is_depthwise(g) || !cuda_conv_depthwise_narrow(g))
    return false;
  const int64_t strips = (g.wo + cuda_depthwise_strip - 1) / cuda_depthwise_strip;
  const int64_t total = g.n * g.k * g.ho * strips;
  if (total <= 0) return true;
  const cuda_depthwise_divs dv{cuda_fast_div(static_cast<uint32_t>(strips)),
                               cuda_fast_div(static_cast<uint32_t>(g.ho * strips)),
                               cuda_fast_div(static_cast<uint32_t>(g.k)),
                               cuda_fast_div(static_cast<uint32_t>(g.k / g.groups))};
  const dim3 grid(cuda_grid(total, cuda_depthwise_threads)), block(cuda_depthwise_threads);
  if (g.r == 3 && g.s == 3)
    cuda_launch("cuda_conv_depthwise", cuda_conv_depthwise<3, 3, TX, TW, Acc>, grid, block, p, dv);
  else
    cuda_launch("cuda_conv_depthwise", cuda_conv_depthwise<0, 0, TX, TW, Acc>, grid, block, p, dv);
  return true;
}

}  // namespace detail
TESSERA_END_NAMESPACE

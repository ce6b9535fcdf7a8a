// tessera/backend/cpu/conv.hpp - the CPU backend's convolution: forward, input gradient and
// weight gradient as matrix products on the GEMM's packing and micro-kernels (gemm.hpp).
//
// Per image and group, with P = ho * wo output pixels and Q = (c / groups) * r * s taps:
//   forward          y[kg, P]  = w[kg, Q] · im2col(x)[Q, P]           (+ bias, relu in the store)
//   input gradient   dx        = col2im(w[kg, Q]ᵀ · dy[kg, P])         (stride 1: a forward conv
//                                                                       of dy, flipped weights)
//   weight gradient  dw[kg, Q] += dy[kg, P] · im2col(x)[Q, P]ᵀ           (summed over images)
// A 1x1 stride-1 unpadded convolution is the product itself, with no lowering. Otherwise the
// im2col matrix is built one tile of output pixels at a time (conv/im2col.hpp), small enough to
// stay in the cache between being written and being packed, so its full size never exists.
// Which path runs for which shape is written down in docs/conv.md.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "../../detail/conv_problem.hpp"
#include "../tags.hpp"
#include "conv/im2col.hpp"
#include "gemm.hpp"
#include "parallel.hpp"

TESSERA_BEGIN_NAMESPACE
namespace detail {

/// Element type of the im2col tiles: the accumulation type for floating inputs (converted once
/// while lowering, so the GEMM reads the tile in place or packs it with plain copies); the input
/// type for 8-bit integers, whose packing the int8 GEMM does itself.
template <class TX, class Acc>
using im2col_t = std::conditional_t<std::is_integral_v<Acc>, TX, Acc>;

/// Output pixels per im2col tile: the tile (rows x columns of elem bytes) takes about 128 KiB,
/// a quarter of a typical L2, so it is still cached when the GEMM packs it; a multiple of the
/// micro-tile width, at least one micro-tile, at most all pixels.
template <class Acc>
int64_t conv_tile_columns(int64_t rows, int64_t elem, int64_t pixels) {
  constexpr int64_t nr = gemm_tile<Acc>::nr;
  const int64_t budget = int64_t{128} << 10;
  int64_t np = budget / std::max<int64_t>(rows * elem, 1);
  np = std::max<int64_t>(np / nr, 1) * nr;
  return std::min(np, pixels);
}

/// This thread's im2col (or col2im) tile buffer.
inline gemm_buffer& thread_conv_tile() {
  static thread_local gemm_buffer b;
  return b;
}

/// Runs body(item) for items [0, n) on up to get_num_threads() threads, thread t taking items
/// t, t + T, ...; body(item, t) also gets the thread index (for per-thread accumulators).
/// Serial when the whole work (n * cost multiply-adds) is below the GEMM's fork threshold.
template <class Body>
void conv_parallel_items(int64_t n, int64_t cost, int threads, Body&& body) {
  if (n <= 0) return;
  const int64_t work = gemm_work(n, std::max<int64_t>(cost, 1), 1);
  const int nt = static_cast<int>(std::clamp<int64_t>(
      std::min<int64_t>(n, work / gemm_parallel_grain), 1, std::max(threads, 1)));
#if defined(_OPENMP)
  if (nt > 1) {
#pragma omp parallel num_threads(nt)
    {
      const int t = omp_get_thread_num(), T = omp_get_num_threads();
      for (int64_t i = t; i < n; i += T) body(i, t);
    }
    return;
  }
#endif
  for (int64_t i = 0; i < n; ++i) body(i, 0);
}

/// One lowered product m x n x k on this thread: gemm_block with the zero-k case handled as
/// gemm_run_cpu does (bias and relu only).
template <class TA, class TB, class Acc>
void conv_gemm_block(const gemm_problem<TA, TB, Acc>& pr) {
  if (pr.m == 0 || pr.n == 0) return;
  if (pr.k == 0)
    gemm_scale_only(pr, pr.c);
  else
    gemm_block(pr, pr.a, pr.b, pr.c, 0, pr.m, 0, pr.n);
}

// ------------------------------------------------------------------------------------ forward

/// 1x1, stride 1, no padding: per group, one batched product over the images.
template <class TX, class TW, class Acc>
void conv_forward_pointwise(const conv_forward_problem<TX, TW, Acc>& p) {
  const conv_geometry& g = p.g;
  const int64_t cg = g.cg(), kg = g.kg(), P = g.h * g.w;
  std::vector<int64_t> b_off(static_cast<size_t>(g.n)), c_off(b_off.size());
  for (int64_t t = 0; t < g.n; ++t) b_off[t] = t * g.c * P, c_off[t] = t * g.k * P;
  for (int64_t gi = 0; gi < g.groups; ++gi) {
    gemm_problem<TW, TX, Acc> pr;
    pr.m = kg, pr.n = P, pr.k = cg;
    pr.a = p.w + gi * kg * cg, pr.a_rs = cg, pr.a_cs = 1;
    pr.b = p.x + gi * cg * P, pr.b_rs = P, pr.b_cs = 1;
    pr.c = p.y + gi * kg * P, pr.c_rs = P, pr.c_cs = 1;
    if (p.bias) pr.bias = p.bias + gi * kg, pr.bias_stride = 1, pr.bias_kind = gemm_bias::per_row;
    pr.relu = p.relu;
    pr.batch = g.n, pr.b_offsets = b_off.data(), pr.c_offsets = c_off.data();
    gemm_run_cpu(pr);
  }
}

/// The general case: each work item is one tile of output pixels of one image-group, lowered to
/// an im2col tile and multiplied on one thread.
template <class TX, class TW, class Acc>
void conv_forward_lowered(const conv_forward_problem<TX, TW, Acc>& p) {
  using D = im2col_t<TX, Acc>;
  const conv_geometry& g = p.g;
  const int64_t cg = g.cg(), kg = g.kg(), Q = cg * g.taps(), P = g.ho * g.wo;
  const int64_t np = conv_tile_columns<Acc>(Q, sizeof(D), P);
  const int64_t tiles = (P + np - 1) / np, units = g.n * g.groups;
  conv_parallel_items(units * tiles, kg * Q * np, get_num_threads(), [&](int64_t item, int) {
    const int64_t unit = item / tiles, p0 = item % tiles * np, cols = std::min(np, P - p0);
    const int64_t img = unit / g.groups, gi = unit % g.groups;
    D* tile = static_cast<D*>(thread_conv_tile().get(sizeof(D) * static_cast<size_t>(Q * np)));
    im2col_tile(g, p.x + (img * g.c + gi * cg) * g.h * g.w, p0, cols, tile, cols);
    gemm_problem<TW, D, Acc> pr;
    pr.m = kg, pr.n = cols, pr.k = Q;
    pr.a = p.w + gi * kg * Q, pr.a_rs = Q, pr.a_cs = 1;
    pr.b = tile, pr.b_rs = cols, pr.b_cs = 1;
    pr.c = p.y + (img * g.k + gi * kg) * P + p0, pr.c_rs = P, pr.c_cs = 1;
    if (p.bias) pr.bias = p.bias + gi * kg, pr.bias_stride = 1, pr.bias_kind = gemm_bias::per_row;
    pr.relu = p.relu;
    conv_gemm_block(pr);
  });
}

template <class TX, class TW, class Acc>
void conv_forward_cpu(const conv_forward_problem<TX, TW, Acc>& p) {
  const conv_geometry& g = p.g;
  if (g.n == 0 || g.k == 0 || g.ho == 0 || g.wo == 0) return;
  if (g.is_pointwise())
    conv_forward_pointwise(p);
  else
    conv_forward_lowered(p);
}

// ----------------------------------------------------------------------------- input gradient

/// Stride 1 with padding at most the dilated kernel extent on every side: the input gradient is
/// the forward convolution of dy with the weights flipped in space and transposed per group
/// ([c, kg, r, s]), padded by dil * (r - 1) - pad.
template <class TG, class TW, class Acc>
bool conv_backward_input_as_forward(const conv_backward_input_problem<TG, TW, Acc>& p) {
  const conv_geometry& g = p.g;
  const int64_t ext_h = g.dil_h * (g.r - 1), ext_w = g.dil_w * (g.s - 1);
  const int64_t pad_bottom = g.ho - 1 + ext_h - g.h + 1 - g.pad_top;  // (h + pt + pb - ext_h) = ho
  const int64_t pad_right = g.wo - 1 + ext_w - g.w + 1 - g.pad_left;
  if (g.stride_h != 1 || g.stride_w != 1 || g.pad_top > ext_h || g.pad_left > ext_w ||
      pad_bottom > ext_h || pad_right > ext_w || pad_bottom < 0 || pad_right < 0)
    return false;
  const int64_t cg = g.cg(), kg = g.kg(), taps = g.taps();
  std::vector<TW> flipped(static_cast<size_t>(g.c * kg * taps));
  for (int64_t gi = 0; gi < g.groups; ++gi)
    for (int64_t kk = 0; kk < kg; ++kk)
      for (int64_t ci = 0; ci < cg; ++ci)
        for (int64_t t = 0; t < taps; ++t)
          flipped[((gi * cg + ci) * kg + kk) * taps + (taps - 1 - t)] =
              p.w[((gi * kg + kk) * cg + ci) * taps + t];
  conv_forward_problem<TG, TW, Acc> f;
  f.g.n = g.n, f.g.c = g.k, f.g.h = g.ho, f.g.w = g.wo;
  f.g.k = g.c, f.g.r = g.r, f.g.s = g.s, f.g.ho = g.h, f.g.wo = g.w;
  f.g.pad_top = ext_h - g.pad_top, f.g.pad_left = ext_w - g.pad_left;
  f.g.dil_h = g.dil_h, f.g.dil_w = g.dil_w, f.g.groups = g.groups;
  f.x = p.dy, f.w = flipped.data(), f.y = p.dx;
  conv_forward_cpu(f);
  return true;
}

template <class TG, class TW, class Acc>
void conv_backward_input_cpu(const conv_backward_input_problem<TG, TW, Acc>& p) {
  const conv_geometry& g = p.g;
  const int64_t cg = g.cg(), kg = g.kg(), Q = cg * g.taps(), P = g.ho * g.wo;
  const int64_t in_numel = g.n * g.c * g.h * g.w;
  if (in_numel == 0) return;
  if (g.k == 0 || P == 0) {
    std::fill(p.dx, p.dx + in_numel, Acc(0));
    return;
  }
  if (g.is_pointwise()) {  // dx[img, group] = w_gᵀ [cg, kg] · dy[img, group] [kg, P]
    std::vector<int64_t> b_off(static_cast<size_t>(g.n)), c_off(b_off.size());
    for (int64_t t = 0; t < g.n; ++t) b_off[t] = t * g.k * P, c_off[t] = t * g.c * P;
    for (int64_t gi = 0; gi < g.groups; ++gi) {
      gemm_problem<TW, TG, Acc> pr;
      pr.m = cg, pr.n = P, pr.k = kg;
      pr.a = p.w + gi * kg * cg, pr.a_rs = 1, pr.a_cs = cg;
      pr.b = p.dy + gi * kg * P, pr.b_rs = P, pr.b_cs = 1;
      pr.c = p.dx + gi * cg * P, pr.c_rs = P, pr.c_cs = 1;
      pr.batch = g.n, pr.b_offsets = b_off.data(), pr.c_offsets = c_off.data();
      gemm_run_cpu(pr);
    }
    return;
  }
  if (conv_backward_input_as_forward(p)) return;
  // General: per image-group (one thread owns its dx planes), tiles of dcol = w_gᵀ · dy, each
  // scattered back into dx.
  std::fill(p.dx, p.dx + in_numel, Acc(0));
  const int64_t np = conv_tile_columns<Acc>(Q, sizeof(Acc), P);
  conv_parallel_items(g.n * g.groups, kg * Q * P, get_num_threads(), [&](int64_t unit, int) {
    const int64_t img = unit / g.groups, gi = unit % g.groups;
    Acc* tile =
        static_cast<Acc*>(thread_conv_tile().get(sizeof(Acc) * static_cast<size_t>(Q * np)));
    for (int64_t p0 = 0; p0 < P; p0 += np) {
      const int64_t cols = std::min(np, P - p0);
      gemm_problem<TW, TG, Acc> pr;
      pr.m = Q, pr.n = cols, pr.k = kg;
      pr.a = p.w + gi * kg * Q, pr.a_rs = 1, pr.a_cs = Q;
      pr.b = p.dy + (img * g.k + gi * kg) * P + p0, pr.b_rs = P, pr.b_cs = 1;
      pr.c = tile, pr.c_rs = cols, pr.c_cs = 1;
      conv_gemm_block(pr);
      col2im_tile_add(g, tile, cols, p0, cols, p.dx + (img * g.c + gi * cg) * g.h * g.w);
    }
  });
}

// ---------------------------------------------------------------------------- weight gradient

/// Each thread sums its share of (image-group, pixel tile) items into its own copy of dw; the
/// copies are added in thread order at the end.
template <class TX, class TG, class Acc>
void conv_backward_weight_cpu(const conv_backward_weight_problem<TX, TG, Acc>& p) {
  using D = im2col_t<TX, Acc>;
  const conv_geometry& g = p.g;
  const int64_t cg = g.cg(), kg = g.kg(), Q = cg * g.taps(), P = g.ho * g.wo;
  const int64_t dw_numel = g.k * Q;
  if (dw_numel == 0) return;
  std::fill(p.dw, p.dw + dw_numel, Acc(0));
  if (g.n == 0 || P == 0) return;
  const bool pointwise = g.is_pointwise();
  const int64_t np = pointwise ? P : conv_tile_columns<Acc>(Q, sizeof(D), P);
  const int64_t tiles = (P + np - 1) / np, items = g.n * g.groups * tiles;
  const int threads = static_cast<int>(std::min<int64_t>(get_num_threads(), items));
  // Thread 0 accumulates into dw itself; the others into partial copies.
  std::vector<Acc> partial(static_cast<size_t>(std::max(threads - 1, 0) * dw_numel), Acc(0));
  conv_parallel_items(items, kg * Q * np, threads, [&](int64_t item, int t) {
    const int64_t unit = item / tiles, p0 = item % tiles * np, cols = std::min(np, P - p0);
    const int64_t img = unit / g.groups, gi = unit % g.groups;
    Acc* dw = t == 0 ? p.dw : partial.data() + (t - 1) * dw_numel;
    const TX* x = p.x + (img * g.c + gi * cg) * g.h * g.w;
    gemm_problem<TG, D, Acc> pr;
    pr.m = kg, pr.n = Q, pr.k = cols;
    pr.a = p.dy + (img * g.k + gi * kg) * P + p0, pr.a_rs = P, pr.a_cs = 1;
    pr.c = dw + gi * kg * Q, pr.c_rs = Q, pr.c_cs = 1;
    pr.beta = Acc(1);
    if constexpr (std::is_same_v<D, TX>) {
      if (pointwise) {  // im2col(x) is x itself: [cg, P]
        pr.b = x + p0, pr.b_rs = 1, pr.b_cs = P;
        conv_gemm_block(pr);
        return;
      }
    }
    D* tile = static_cast<D*>(thread_conv_tile().get(sizeof(D) * static_cast<size_t>(Q * np)));
    im2col_tile(g, x, p0, cols, tile, cols);
    pr.b = tile, pr.b_rs = 1, pr.b_cs = cols;
    conv_gemm_block(pr);
  });
  for (int t = 1; t < threads; ++t) {
    const Acc* src = partial.data() + (t - 1) * dw_numel;
    for (int64_t i = 0; i < dw_numel; ++i) p.dw[i] += src[i];
  }
}

}  // namespace detail

namespace backend {
template <>
struct conv_kernel<cpu> {
  template <class TX, class TW, class Acc>
  static void run(const detail::conv_forward_problem<TX, TW, Acc>& p) {
    detail::conv_forward_cpu(p);
  }
  template <class TG, class TW, class Acc>
  static void run(const detail::conv_backward_input_problem<TG, TW, Acc>& p) {
    detail::conv_backward_input_cpu(p);
  }
  template <class TX, class TG, class Acc>
  static void run(const detail::conv_backward_weight_problem<TX, TG, Acc>& p) {
    detail::conv_backward_weight_cpu(p);
  }
};
}  // namespace backend

TESSERA_END_NAMESPACE

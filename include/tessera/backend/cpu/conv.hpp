// tessera/backend/cpu/conv.hpp - the CPU backend's convolution: forward, input gradient and
// weight gradient as matrix products on the GEMM's packing and micro-kernels (gemm.hpp).
//
// Per image and group, with P = ho * wo output pixels and Q = (c / groups) * r * s taps:
//   forward          y[kg, P]  = w[kg, Q] · im2col(x)[Q, P]           (+ bias, relu in the store)
//   input gradient   dx        = col2im(w[kg, Q]ᵀ · dy[kg, P])         (stride 1: a forward conv
//                                                                       of dy, flipped weights)
//   weight gradient  dw[kg, Q] += dy[kg, P] · im2col(x)[Q, P]ᵀ           (summed over images)
// A 1x1 stride-1 unpadded convolution is the product itself, with no lowering. Under
// conv_algorithm::winograd, float 3x3 stride-1 layers run as Winograd F(4x4, 3x3) instead
// (conv/winograd.hpp; input gradients too, being forward convolutions of dy). Otherwise the
// im2col matrix is built one tile of output pixels at a time (conv/im2col.hpp), small enough to
// stay in the cache between being written and being packed, so its full size never exists.
// Which path runs for which shape is written down in docs/conv.md.
// Part of a kernel pass: included by isa_pass.hpp once per instruction set, no include guard.

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "../../core/backend.hpp"
#include "../../kernel/conv_problem.hpp"
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
int64_t conv_tile_columns(int64_t rows, int64_t elem, int64_t pixels,
                          int64_t budget = int64_t{128} << 10) {
  constexpr int64_t nr = gemm_tile<Acc>::nr;
  int64_t np = budget / std::max<int64_t>(rows * elem, 1);
  np = std::max<int64_t>(np / nr, 1) * nr;
  return std::min(np, pixels);
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

/// 8-bit integers: each work item is one tile of output pixels of one image-group, lowered to an
/// im2col tile and multiplied on one thread by the int8 GEMM (which packs it into its biased
/// byte layout; floating types take conv_forward_implicit).
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
    D* tile = static_cast<D*>(
        thread_conv_buffer<conv_buffer::tile>().get(sizeof(D) * static_cast<size_t>(Q * np)));
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

/// Whether the direct kernels (conv/direct.hpp) run instead of lowering: at most 4 input
/// channels per group (first layers, depthwise) and kernels up to 32 x 32, where the lowered
/// product's k = cg * r * s is too short for the GEMM micro-tiles; floating types with SIMD
/// vectors only.
template <class Acc>
bool conv_use_direct(const conv_geometry& g) {
  if constexpr (!simd::available<Acc> || std::is_integral_v<Acc>)
    return false;
  else
    return g.cg() <= 4 && g.r <= 32 && g.s <= 32;
}

/// Output rows per work item of the direct kernels: whole images when there are at least four
/// image-groups per thread, else rows split so that there are.
struct conv_row_split {
  int64_t chunks = 1, rows = 0;
};
inline conv_row_split conv_split_rows(int64_t units, int64_t ho, int threads) {
  const int64_t want = 4 * std::max(threads, 1);
  int64_t chunks =
      units >= want ? 1 : std::min(ho, (want + units - 1) / std::max<int64_t>(units, 1));
  chunks = std::max<int64_t>(chunks, 1);
  const int64_t rows = (ho + chunks - 1) / chunks;
  return {(ho + rows - 1) / rows, rows};
}

/// The padded input rows that output rows [oh0, oh1) of image-group x read, in this thread's
/// buffer.
template <class Acc, conv_buffer Role = conv_buffer::tile, class TX>
padded_rows<Acc> conv_padded_rows_for(const conv_geometry& g, const TX* x, int64_t oh0, int64_t oh1,
                                      int64_t wo_cover) {
  padded_rows<Acc> xp;
  xp.row0 = oh0 * g.stride_h;
  xp.rows = (oh1 - 1) * g.stride_h + g.dil_h * (g.r - 1) + 1 - xp.row0;
  xp.len = padded_rows_len(g, wo_cover);
  xp.stride_w = g.stride_w;
  const int64_t cg = g.cg();
  xp.data = static_cast<Acc*>(thread_conv_buffer<Role>().get(
      sizeof(Acc) * static_cast<size_t>(cg * xp.rows * xp.stride_w * xp.len)));
  fill_padded_rows(g, x, cg, xp);
  return xp;
}

/// Lowers output pixels [p0, p0 + cols) of image-group x into tile (row stride ld), as
/// im2col_tile. Where the lowered type is the input type and has SIMD vectors, the tile's input
/// rows are first copied zero-padded (a ninth of the lowered size for 3x3) and every run is then
/// a plain vector copy (im2col_tile_padded).
template <class D, class TX>
void conv_lower_tile(const conv_geometry& g, const TX* x, int64_t p0, int64_t cols, D* tile,
                     int64_t ld) {
  if constexpr (std::is_same_v<D, TX> && simd::available<D>) {
    constexpr int64_t width = simd::vec<D>::width;
    const int64_t oh0 = p0 / g.wo, oh1 = (p0 + cols - 1) / g.wo + 1, Q = g.cg() * g.taps();
    // A run starting at column ow0 loads whole vectors up to wo + width - 2.
    const int64_t wo_cover = g.wo + width;
    const padded_rows<D> xp =
        conv_padded_rows_for<D, conv_buffer::lowering>(g, x, oh0, oh1, wo_cover);
    static thread_local std::vector<int64_t> off;
    off.resize(static_cast<size_t>(Q));
    xp.tap_offsets(g, g.cg(), off.data());
    im2col_tile_padded(g, xp, off.data(), p0, cols, tile, ld);
  } else {
    im2col_tile(g, x, p0, cols, tile, ld);
  }
}

/// Direct forward: work items are row ranges of image-groups; blocks of 4 output channels x 2
/// vectors of columns, then single channels x 4 vectors.
template <class TX, class TW, class Acc>
void conv_forward_direct(const conv_forward_problem<TX, TW, Acc>& p) {
  const conv_geometry& g = p.g;
  const int64_t cg = g.cg(), kg = g.kg(), taps = g.taps(), P = g.ho * g.wo;
  std::vector<Acc> w_acc;
  const Acc* w = nullptr;
  if constexpr (std::is_same_v<TW, Acc>) {
    w = p.w;
  } else {
    const float* f8 = float8_table_for<TW>();
    w_acc.resize(static_cast<size_t>(g.k * cg * taps));
    for (size_t i = 0; i < w_acc.size(); ++i) w_acc[i] = pack_convert<Acc>(p.w[i], f8);
    w = w_acc.data();
  }
  constexpr int64_t width = simd::vec<Acc>::width, cover = 4 * width;  // widest column block
  const int64_t wo_pad = (g.wo + cover - 1) / cover * cover;
  const int64_t units = g.n * g.groups;
  const int threads = get_num_threads();
  const conv_row_split sp = conv_split_rows(units, g.ho, threads);
  conv_parallel_items(
      units * sp.chunks, kg * cg * taps * sp.rows * g.wo, threads, [&](int64_t item, int) {
        const int64_t unit = item / sp.chunks, img = unit / g.groups, gi = unit % g.groups;
        const int64_t oh0 = item % sp.chunks * sp.rows, oh1 = std::min(g.ho, oh0 + sp.rows);
        const padded_rows<Acc> xp =
            conv_padded_rows_for<Acc>(g, p.x + (img * g.c + gi * cg) * g.h * g.w, oh0, oh1, wo_pad);
        Acc* y = p.y + (img * g.k + gi * kg) * P;
        const Acc* wg = w + gi * kg * cg * taps;
        const Acc* bias = p.bias ? p.bias + gi * kg : nullptr;
        int64_t off[4096];  // conv_use_direct: cg <= 4 taps of at most 32 x 32
        xp.tap_offsets(g, cg, off);
        // Column blocks as wide as the row allows (a block wider than the row is computed through
        // a buffer): 4 channels x up to 2 vectors, single channels x up to 4 vectors.
        const int64_t vecs = g.wo / width;
        int64_t kk = 0;
        for (; kk + 4 <= kg; kk += 4) {
          const Acc* b = bias ? bias + kk : nullptr;
          if (vecs >= 2)
            conv_direct_rows<Acc, 4, 2>(g, xp, off, wg + kk * cg * taps, b, p.relu, y + kk * P, oh0,
                                        oh1);
          else
            conv_direct_rows<Acc, 4, 1>(g, xp, off, wg + kk * cg * taps, b, p.relu, y + kk * P, oh0,
                                        oh1);
        }
        for (; kk < kg; ++kk) {
          const Acc* b = bias ? bias + kk : nullptr;
          if (vecs >= 4)
            conv_direct_rows<Acc, 1, 4>(g, xp, off, wg + kk * cg * taps, b, p.relu, y + kk * P, oh0,
                                        oh1);
          else if (vecs >= 2)
            conv_direct_rows<Acc, 1, 2>(g, xp, off, wg + kk * cg * taps, b, p.relu, y + kk * P, oh0,
                                        oh1);
          else
            conv_direct_rows<Acc, 1, 1>(g, xp, off, wg + kk * cg * taps, b, p.relu, y + kk * P, oh0,
                                        oh1);
        }
      });
}

/// C [m, cols] (row stride ldc) = A [m, k] · B [k, cols] on the micro-kernel, A packed as its
/// panels (pack_panels<mr>: [k][mr] per block of mr rows) and B row-major [k][ld] read in place
/// (ld a multiple of nr, its columns past cols zero), over k blocks of kc; `last` (bias, ReLU)
/// applies to the last block's store. Each panel of B stays in L1 while every block of A
/// streams over it.
template <class Acc>
void conv_packed_product(int64_t m, int64_t k, int64_t cols, const Acc* a, const Acc* b, int64_t ld,
                         Acc* c, int64_t ldc, const gemm_epilogue<Acc>& last) {
  constexpr int MR = gemm_tile<Acc>::mr, NR = gemm_tile<Acc>::nr;
  const int64_t kc = balanced_k_block(k, cached_gemm_blocks<Acc>().kc);
  const int64_t panels = (cols + NR - 1) / NR;
  for (int64_t pc = 0; pc < k; pc += kc) {
    const int64_t kb = std::min(kc, k - pc);
    gemm_epilogue<Acc> ep = pc + kb == k ? last : gemm_epilogue<Acc>{};
    ep.beta = pc == 0 ? Acc(0) : Acc(1);
    ep.read_c = pc > 0;
    for (int64_t jp = 0; jp < panels; ++jp) {
      const int nr_eff = static_cast<int>(std::min<int64_t>(NR, cols - jp * NR));
      for (int64_t i0 = 0; i0 < m; i0 += MR) {
        const int mr_eff = static_cast<int>(std::min<int64_t>(MR, m - i0));
        gemm_micro_fp<Acc, MR>(kb, a + i0 * k + pc * MR, b + pc * ld + jp * NR, ld,
                               c + i0 * ldc + jp * NR, ldc, 1, mr_eff, nr_eff, ep, i0, 0);
      }
    }
  }
}

/// Floating types: implicit GEMM. The weights of every group are packed once into the
/// micro-kernel's A panels ([q][mr] per block of mr output channels); each work item (a tile of
/// output pixels of one image-group) lowers its pixels once into a row-major tile that the
/// micro-kernels read in place, over k blocks of kc taps: neither operand is copied twice and
/// nothing is packed per item but the image.
template <class TX, class TW, class Acc>
void conv_forward_implicit(const conv_forward_problem<TX, TW, Acc>& p) {
  constexpr int MR = gemm_tile<Acc>::mr, NR = gemm_tile<Acc>::nr;
  const conv_geometry& g = p.g;
  const int64_t cg = g.cg(), kg = g.kg(), Q = cg * g.taps(), P = g.ho * g.wo;
  const int64_t kg_pad = (kg + MR - 1) / MR * MR;
  Acc* wp = static_cast<Acc*>(thread_conv_buffer<conv_buffer::weights>().get(
      sizeof(Acc) * static_cast<size_t>(g.groups * kg_pad * Q)));
  for (int64_t gi = 0; gi < g.groups; ++gi)
    pack_panels<MR>(p.w + gi * kg * Q, Q, 1, kg, Q, wp + gi * kg_pad * Q);
  // B tile: half of L2, so that it stays there while all output channels stream over it.
  const int64_t budget = host_caches().l2 / 2;
  int64_t np = std::max<int64_t>(budget / (Q * static_cast<int64_t>(sizeof(Acc))) / NR, 1) * NR;
  np = std::min(np, (P + NR - 1) / NR * NR);
  const int64_t tiles = (P + np - 1) / np, units = g.n * g.groups;
  conv_parallel_items(units * tiles, kg * Q * np, get_num_threads(), [&](int64_t item, int) {
    const int64_t unit = item / tiles, p0 = item % tiles * np, cols = std::min(np, P - p0);
    const int64_t img = unit / g.groups, gi = unit % g.groups;
    const int64_t panels = (cols + NR - 1) / NR, ld = panels * NR;
    // The tile is row-major [Q][ld]: whole output rows are single runs of the lowering, and the
    // micro-kernel reads its B panels in place (row stride ld). Columns past cols are zero.
    Acc* bt = static_cast<Acc*>(
        thread_conv_buffer<conv_buffer::tile>().get(sizeof(Acc) * static_cast<size_t>(Q * ld)));
    conv_lower_tile(g, p.x + (img * g.c + gi * cg) * g.h * g.w, p0, cols, bt, ld);
    if (cols < ld)
      for (int64_t q = 0; q < Q; ++q) std::fill(bt + q * ld + cols, bt + (q + 1) * ld, Acc(0));
    gemm_epilogue<Acc> last;
    if (p.bias)
      last.bias = p.bias + gi * kg, last.bias_stride = 1, last.bias_kind = gemm_bias::per_row;
    last.relu = p.relu;
    conv_packed_product(kg, Q, cols, wp + gi * kg_pad * Q, bt, ld,
                        p.y + (img * g.k + gi * kg) * P + p0, P, last);
  });
}

template <class TX, class TW, class Acc>
void conv_forward_cpu(const conv_forward_problem<TX, TW, Acc>& p) {
  const conv_geometry& g = p.g;
  if (g.n == 0 || g.k == 0 || g.ho == 0 || g.wo == 0) return;
  if (g.c == 0) {  // no input channels: the bias (then relu) alone
    const int64_t P = g.ho * g.wo;
    for (int64_t i = 0; i < g.n * g.k; ++i) {
      Acc v = p.bias ? p.bias[i % g.k] : Acc(0);
      if (p.relu && v < Acc(0)) v = Acc(0);
      std::fill(p.y + i * P, p.y + (i + 1) * P, v);
    }
    return;
  }
  if (conv_forward_winograd(p)) return;  // conv_algorithm::winograd: 3x3 stride-1 float layers
  if constexpr (simd::available<Acc>) {
    if (conv_use_direct<Acc>(g)) return conv_forward_direct(p);
  }
  if (g.is_pointwise())
    conv_forward_pointwise(p);
  else if constexpr (std::is_integral_v<Acc>)
    conv_forward_lowered(p);
  else
    conv_forward_implicit(p);
}

// ----------------------------------------------------------------------------- input gradient

/// Stride 1 with padding at most the dilated kernel extent on every side: the input gradient is
/// the forward convolution of dy with the weights flipped in space and transposed per group
/// ([c, kg, r, s]), padded by dil * (r - 1) - pad.
template <class TG, class TW, class Acc>
bool conv_backward_input_as_forward(const conv_backward_input_problem<TG, TW, Acc>& p) {
  const conv_geometry& g = p.g;
  const int64_t ext_h = g.dil_h * (g.r - 1), ext_w = g.dil_w * (g.s - 1);
  // At stride 1, ho = h + pad_top + pad_bottom - ext_h.
  const int64_t pad_bottom = g.ho + ext_h - g.h - g.pad_top;
  const int64_t pad_right = g.wo + ext_w - g.w - g.pad_left;
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

/// The general input gradient (strides, or padding beyond the kernel's extent): per
/// image-group (one thread owns its dx planes), tiles of dcol = w_gᵀ [Q, kg] · dy [kg, P]
/// scattered back into dx (col2im_tile_add). wᵀ is packed once per call into the micro-kernel's
/// A panels ([kg][mr] per block of mr rows of Q), and each tile's dy columns are copied once into
/// a zero-padded row-major [kg][ld] block that the micro-kernel reads in place: nothing is packed
/// per tile (a GEMM per tile packed all of wᵀ again: 15% of a stride-2 input gradient).
template <class TG, class TW, class Acc>
void conv_backward_input_scatter(const conv_backward_input_problem<TG, TW, Acc>& p) {
  constexpr int MR = gemm_tile<Acc>::mr, NR = gemm_tile<Acc>::nr;
  const conv_geometry& g = p.g;
  const int64_t cg = g.cg(), kg = g.kg(), Q = cg * g.taps(), P = g.ho * g.wo;
  const int64_t q_pad = (Q + MR - 1) / MR * MR;
  Acc* wp = static_cast<Acc*>(thread_conv_buffer<conv_buffer::weights>().get(
      sizeof(Acc) * static_cast<size_t>(g.groups * q_pad * kg)));
  for (int64_t gi = 0; gi < g.groups; ++gi)  // line q of w_gᵀ: w[kk * Q + q] for kk < kg
    pack_panels<MR>(p.w + gi * kg * Q, 1, Q, Q, kg, wp + gi * q_pad * kg);
  std::fill(p.dx, p.dx + g.n * g.c * g.h * g.w, Acc(0));
  const int64_t np = conv_tile_columns<Acc>(Q, sizeof(Acc), P, host_caches().l2 / 2);
  const float* f8 = float8_table_for<TG>();
  conv_parallel_items(g.n * g.groups, kg * Q * P, get_num_threads(), [&](int64_t unit, int) {
    const int64_t img = unit / g.groups, gi = unit % g.groups;
    const int64_t ld_max = (np + NR - 1) / NR * NR;
    Acc* tile = static_cast<Acc*>(
        thread_conv_buffer<conv_buffer::tile>().get(sizeof(Acc) * static_cast<size_t>(Q * ld_max)));
    Acc* bt = static_cast<Acc*>(
        thread_conv_buffer<conv_buffer::aux>().get(sizeof(Acc) * static_cast<size_t>(kg * ld_max)));
    const TG* dy = p.dy + (img * g.k + gi * kg) * P;
    const Acc* a = wp + gi * q_pad * kg;
    for (int64_t p0 = 0; p0 < P; p0 += np) {
      const int64_t cols = std::min(np, P - p0), panels = (cols + NR - 1) / NR, ld = panels * NR;
      for (int64_t kk = 0; kk < kg; ++kk) {  // the micro-kernel reads whole NR-wide rows
        copy_short(bt + kk * ld, dy + kk * P + p0, cols, 1, f8);
        zero_short(bt + kk * ld + cols, ld - cols);
      }
      conv_packed_product(Q, kg, cols, a, bt, ld, tile, ld, gemm_epilogue<Acc>{});
      col2im_tile_add(g, tile, ld, p0, cols, p.dx + (img * g.c + gi * cg) * g.h * g.w);
    }
  });
}

template <class TG, class TW, class Acc>
void conv_backward_input_cpu(const conv_backward_input_problem<TG, TW, Acc>& p) {
  const conv_geometry& g = p.g;
  const int64_t cg = g.cg(), kg = g.kg(), P = g.ho * g.wo;
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
  conv_backward_input_scatter(p);
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
  if (conv_backward_weight_winograd(p)) return;  // conv_algorithm::winograd: 3x3 stride 1
  const bool direct = std::is_same_v<TG, Acc> && conv_use_direct<Acc>(g);
  const bool pointwise = g.is_pointwise();
  const int64_t units = g.n * g.groups;
  // Items: pixel tiles of image-groups (lowered), or row ranges of image-groups (direct).
  // Pixels per item are the GEMM's k: as many as half of L2 holds, and at least 256 (or the
  // whole image), since every item reads and writes all of its group's dw (2.4 MB for 256 x 256
  // 3x3 channels) while short items also read the dy panel in place, eight strided rows per step.
  // The image's pixels are then shared evenly between its items: a short last item (16 of 784
  // pixels at 256 per item) costs a whole pass over dw for little work.
  int64_t np = pointwise ? P
                         : std::max(conv_tile_columns<Acc>(Q, sizeof(D), P, host_caches().l2 / 2),
                                    std::min<int64_t>(P, 256));
  np = (P + (P + np - 1) / np - 1) / ((P + np - 1) / np);
  const conv_row_split sp = conv_split_rows(units, g.ho, get_num_threads());
  const int64_t per_unit = direct ? sp.chunks : (P + np - 1) / np;
  const int64_t items = units * per_unit;
  const int threads = static_cast<int>(std::min<int64_t>(get_num_threads(), items));
  // Thread 0 accumulates into dw itself; the others into partial copies.
  const size_t partial_numel = static_cast<size_t>(std::max(threads - 1, 0) * dw_numel);
  Acc* partial = static_cast<Acc*>(
      thread_conv_buffer<conv_buffer::partials>().get(sizeof(Acc) * partial_numel));
  std::fill(partial, partial + partial_numel, Acc(0));
  const int64_t cost = kg * Q * (direct ? sp.rows * g.wo : np);
  conv_parallel_items(items, cost, threads, [&](int64_t item, int t) {
    const int64_t unit = item / per_unit, img = unit / g.groups, gi = unit % g.groups;
    Acc* dw = t == 0 ? p.dw : partial + (t - 1) * dw_numel;
    const TX* x = p.x + (img * g.c + gi * cg) * g.h * g.w;
    const TG* dy = p.dy + (img * g.k + gi * kg) * P;
    if constexpr (std::is_same_v<TG, Acc> && simd::available<Acc>) {
      if (direct) {
        const int64_t oh0 = item % per_unit * sp.rows, oh1 = std::min(g.ho, oh0 + sp.rows);
        constexpr int64_t width = simd::vec<Acc>::width;
        const int64_t ld = (g.wo + width - 1) / width * width, rows = oh1 - oh0;
        const padded_rows<Acc> xp = conv_padded_rows_for<Acc>(g, x, oh0, oh1, ld);
        Acc* dyp = static_cast<Acc*>(thread_conv_buffer<conv_buffer::aux>().get(
            sizeof(Acc) * static_cast<size_t>(kg * rows * ld)));
        for (int64_t kk = 0; kk < kg; ++kk)
          copy_rows_padded(dy + kk * P + oh0 * g.wo, g.wo, rows, g.wo, dyp + kk * rows * ld, ld);
        conv_direct_weight_rows(g, xp, dyp, ld, dw + gi * kg * Q, oh0, oh1);
        return;
      }
    }
    const int64_t p0 = item % per_unit * np, cols = std::min(np, P - p0);
    gemm_problem<TG, D, Acc> pr;
    pr.m = kg, pr.n = Q, pr.k = cols;
    pr.a = dy + p0, pr.a_rs = P, pr.a_cs = 1;
    pr.c = dw + gi * kg * Q, pr.c_rs = Q, pr.c_cs = 1;
    pr.beta = Acc(1);
    if constexpr (std::is_same_v<D, TX>) {
      if (pointwise) {  // im2col(x) is x itself: [cg, P]
        pr.b = x + p0, pr.b_rs = 1, pr.b_cs = P;
        conv_gemm_block(pr);
        return;
      }
    }
    D* tile = static_cast<D*>(
        thread_conv_buffer<conv_buffer::tile>().get(sizeof(D) * static_cast<size_t>(Q * np)));
    conv_lower_tile(g, x, p0, cols, tile, cols);
    pr.b = tile, pr.b_rs = 1, pr.b_cs = cols;
    conv_gemm_block(pr);
  });
  for (int t = 1; t < threads; ++t) {
    const Acc* src = partial + (t - 1) * dw_numel;
    for (int64_t i = 0; i < dw_numel; ++i) p.dw[i] += src[i];
  }
}

/// Bias gradient (and ReLU mask) of conv_bias_backward_problem: threads split the channels;
/// each channel sums its planes in batch order, blocks of 1024 in T and the block sums in
/// double, so results do not depend on the thread count and stay accurate on large planes.
/// The pass streams dy and y from memory (the CNN's layers exceed the caches): it runs at memory
/// speed, which is why it reads dy once for both the mask and the sum.
template <class T>
void conv_bias_backward_cpu(const conv_bias_backward_problem<T>& p) {
  constexpr int64_t block = 1024;
  parallel_for(p.k, p.n * p.plane, [&](int64_t k0, int64_t k1) {
    for (int64_t ch = k0; ch < k1; ++ch) {
      double total = 0;
      for (int64_t b = 0; b < p.n; ++b) {
        const int64_t base = (b * p.k + ch) * p.plane;
        const T* dy = p.dy + base;
        const T* y = p.y ? p.y + base : nullptr;
        T* out = p.masked ? p.masked + base : nullptr;
        for (int64_t i0 = 0; i0 < p.plane; i0 += block) {
          const int64_t i1 = std::min(p.plane, i0 + block);
          T s = 0;
          if (y && out) {
            TESSERA_OMP_SIMD(reduction(+ : s))
            for (int64_t i = i0; i < i1; ++i) {
              const T g = y[i] > T(0) ? dy[i] : T(0);
              out[i] = g;
              s += g;
            }
          } else if (y) {
            TESSERA_OMP_SIMD(reduction(+ : s))
            for (int64_t i = i0; i < i1; ++i) s += y[i] > T(0) ? dy[i] : T(0);
          } else {
            TESSERA_OMP_SIMD(reduction(+ : s))
            for (int64_t i = i0; i < i1; ++i) s += dy[i];
            if (out) std::copy(dy + i0, dy + i1, out + i0);
          }
          total += static_cast<double>(s);
        }
      }
      p.db[ch] = static_cast<T>(total);
    }
  });
}

}  // namespace detail

namespace backend {
struct cpu_conv {
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
  template <class T>
  static void run(const detail::conv_bias_backward_problem<T>& p) {
    detail::conv_bias_backward_cpu(p);
  }
};
}  // namespace backend

TESSERA_END_NAMESPACE

// tessera/backend/cpu/conv/im2col.hpp - the lowering of a convolution to matrix products: tiles
// of the im2col matrix (one row per input channel and kernel tap, one column per output pixel),
// and the inverse scatter-add (col2im) for the input gradient.
//
// A tile covers every row of one image-group but only a range of output pixels, so the lowered
// matrix never exists whole: its size is bounded by the tile, not by the image.
// Part of a kernel pass: included by isa_pass.hpp once per instruction set, no include guard.

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "../../../kernel/conv_problem.hpp"

#if defined(TESSERA_ISA_AVX2)
#include <immintrin.h>
#endif

TESSERA_BEGIN_NAMESPACE
namespace detail {

/// The output columns [lo, hi) of one output row whose input column ow * stride + off lies
/// inside [0, w), clamped to [begin, end).
struct conv_span {
  int64_t lo, hi;
};
inline conv_span conv_valid_span(int64_t off, int64_t stride, int64_t w, int64_t begin,
                                 int64_t end) {
  // iw = ow * stride + off >= 0  <=>  ow >= ceil(-off / stride)
  const int64_t lo = off >= 0 ? 0 : (-off + stride - 1) / stride;
  // iw < w  <=>  ow < ceil((w - off) / stride)
  const int64_t hi = w - off > 0 ? (w - off + stride - 1) / stride : 0;
  const int64_t l = std::clamp(lo, begin, end), h = std::clamp(hi, l, end);
  return {l, h};
}

/// Calls f(q, ci, i, j, row_of_input_or_null, ow_begin, ow_end, col) for every tile row q =
/// (ci, i, j) and every run of output pixels [p0, p0 + np) that lies in one output row; col is
/// the run's first column within the tile. The input row is null where the tap falls into the
/// top or bottom padding. The runs are found once per tile (no divisions per row).
template <class S, class F>
TESSERA_ALWAYS_INLINE void for_each_tile_run(const conv_geometry& g, S* x, int64_t p0, int64_t np,
                                             F&& f) {
  struct run {
    int64_t oh, ow0, ow1, col;
  };
  constexpr int max_runs = 64;  // a tile over more rows (narrow images) goes in several batches
  run runs[max_runs];
  const int64_t cg = g.cg();
  for (int64_t p = p0; p < p0 + np;) {
    int nruns = 0;
    for (; p < p0 + np && nruns < max_runs; ++nruns) {
      const int64_t ow0 = p % g.wo, ow1 = std::min(g.wo, ow0 + (p0 + np - p));
      runs[nruns] = {p / g.wo, ow0, ow1, p - p0};
      p += ow1 - ow0;
    }
    int64_t q = 0;
    for (int64_t ci = 0; ci < cg; ++ci)
      for (int64_t i = 0; i < g.r; ++i)
        for (int64_t j = 0; j < g.s; ++j, ++q)
          for (int u = 0; u < nruns; ++u) {
            const run& rn = runs[u];
            const int64_t ih = rn.oh * g.stride_h - g.pad_top + i * g.dil_h;
            S* row = ih >= 0 && ih < g.h ? x + (ci * g.h + ih) * g.w : nullptr;
            f(q, ci, i, j, row, rn.ow0, rn.ow1, rn.col);
          }
  }
}

/// tile[q * ld + col] = x value for row q and output pixel p0 + col (zero in the padding),
/// converted to D. x is one image-group: [cg, h, w].
template <class D, class S>
TESSERA_DETAIL_KEEP_LOOPS void im2col_tile(const conv_geometry& g, const S* x, int64_t p0,
                                           int64_t np, D* tile, int64_t ld) {
  const float* f8 = float8_table_for<S>();
  // Valid output columns per kernel column j, found once (the divisions by the stride would
  // otherwise cost more than the copies they bound).
  constexpr int64_t max_cached = 64;
  conv_span valid[max_cached];
  for (int64_t j = 0; j < std::min(g.s, max_cached); ++j)
    valid[j] = conv_valid_span(j * g.dil_w - g.pad_left, g.stride_w, g.w, 0, g.wo);
  [[maybe_unused]] const S* x_end = x + g.cg() * g.h * g.w;
  for_each_tile_run(
      g, x, p0, np,
      [&](int64_t q, int64_t, int64_t, int64_t j, const S* row, int64_t ow0, int64_t ow1,
          int64_t col) {
        D* dst = tile + q * ld + col - ow0;  // indexed by ow
#if defined(TESSERA_DETAIL_MASKED_TAILS)
        // Within a row q, runs come in increasing col order (batches of runs too): a store past
        // a run's end lands where a later run of the row writes again. Runs that end within a
        // vector of the row's end are stored exactly (below): nothing spills into the next row.
        if constexpr (std::is_same_v<D, float> && std::is_same_v<S, float>) {
          const bool vector_stride = g.stride_w == 1 || g.stride_w == 2;
          if (vector_stride && col + (ow1 - ow0) + float_lanes <= np) {
            if (!row) return zero_run_float(dst + ow0, ow1 - ow0);
            const int64_t off = j * g.dil_w - g.pad_left;
            conv_span v =
                j < max_cached ? valid[j] : conv_valid_span(off, g.stride_w, g.w, 0, g.wo);
            v.lo = std::clamp(v.lo, ow0, ow1), v.hi = std::clamp(v.hi, v.lo, ow1);
            zero_run_float(dst + ow0, v.lo - ow0);
            if (g.stride_w == 1)
              copy_run_float(dst + v.lo, row + off + v.lo, v.hi - v.lo, x_end);
            else
              copy_stride2_float(dst + v.lo, row + off + 2 * v.lo, v.hi - v.lo);
            zero_run_float(dst + v.hi, ow1 - v.hi);
            return;
          }
        }
#endif
        if (!row) {
          zero_short(dst + ow0, ow1 - ow0);
          return;
        }
        const int64_t off = j * g.dil_w - g.pad_left;
        conv_span v = j < max_cached ? valid[j] : conv_valid_span(off, g.stride_w, g.w, 0, g.wo);
        v.lo = std::clamp(v.lo, ow0, ow1), v.hi = std::clamp(v.hi, v.lo, ow1);
        zero_short(dst + ow0, v.lo - ow0);
        copy_short(dst + v.lo, row + off + v.lo * g.stride_w, v.hi - v.lo, g.stride_w, f8);
        zero_short(dst + v.hi, ow1 - v.hi);
      });
}

/// im2col_tile from zero-padded input rows xp (padded_rows covering the tile's output rows, each
/// phase row long enough for wo rounded up to whole vectors) and the tap offsets off
/// (padded_rows::tap_offsets): every run of the lowering is a plain vector copy, with no padding
/// tests, clamps or zero fills. On small images (14 x 14, 3x3: runs of 14 pixels) the general
/// im2col_tile spent ~30 cycles per run on them, 19% of a CNN training step.
template <class D>
TESSERA_DETAIL_KEEP_LOOPS void im2col_tile_padded(const conv_geometry& g, const padded_rows<D>& xp,
                                                  const int64_t* off, int64_t p0, int64_t np,
                                                  D* tile, int64_t ld) {
  using V = simd::vec<D>;
  constexpr int64_t W = V::width;
  struct run {
    const D* src;  // the run's first input element for tap offset 0
    int64_t n, col;
  };
  constexpr int max_runs = 64;
  run runs[max_runs];
  const int64_t Q = g.cg() * g.taps();
  for (int64_t p = p0; p < p0 + np;) {
    int nruns = 0;
    for (; p < p0 + np && nruns < max_runs; ++nruns) {
      const int64_t oh = p / g.wo, ow0 = p % g.wo, ow1 = std::min(g.wo, ow0 + (p0 + np - p));
      runs[nruns] = {xp.row_base(g, oh) + ow0, ow1 - ow0, p - p0};
      p += ow1 - ow0;
    }
    // Whole vectors may store up to W - 1 elements past a run. That is harmless while the
    // stores stay inside the tile's np columns: later runs (of this batch, or of the next one,
    // which rewrites every row) own those columns and write them again. A run whose whole
    // vectors would pass column np (the tile's last runs) is copied exactly: past np lie the
    // next row's first columns, written by an earlier batch, and past the last row the end of
    // the tile buffer.
    for (int64_t q = 0; q < Q; ++q) {
      D* row = tile + q * ld;
      for (int u = 0; u < nruns; ++u) {
        const D* src = runs[u].src + off[q];
        D* dst = row + runs[u].col;
        const int64_t n = runs[u].n;
        if (runs[u].col + (n + W - 1) / W * W > np) {
          copy_short(dst, src, n, 1, nullptr);
          continue;
        }
        for (int64_t i = 0; i < n; i += W) V::load(src + i).store(dst + i);
      }
    }
  }
}

/// The inverse of im2col_tile, accumulating: x value for row q and output pixel p0 + col +=
/// tile[q * ld + col]; padding positions are dropped. x is one image-group: [cg, h, w].
template <class Acc>
void col2im_tile_add(const conv_geometry& g, const Acc* tile, int64_t ld, int64_t p0, int64_t np,
                     Acc* x) {
  constexpr int64_t max_cached = 64;  // as im2col_tile: no divisions per run
  conv_span valid[max_cached];
  for (int64_t j = 0; j < std::min(g.s, max_cached); ++j)
    valid[j] = conv_valid_span(j * g.dil_w - g.pad_left, g.stride_w, g.w, 0, g.wo);
  // The input rows the tile adds to, [ih_lo, ih_hi] of every channel: one short block per
  // channel, which the hardware prefetchers do not follow from one channel to the next. Each
  // channel's block is requested while the previous one is summed (the cold loads of x were
  // half of this function in a stride-2 input gradient).
  const int64_t ih_lo = std::max<int64_t>(p0 / g.wo * g.stride_h - g.pad_top, 0);
  const int64_t ih_hi = std::min<int64_t>(
      (p0 + np - 1) / g.wo * g.stride_h - g.pad_top + (g.r - 1) * g.dil_h, g.h - 1);
  int64_t next_prefetch = 1;  // the first channel whose rows are not yet requested
  for_each_tile_run(
      g, x, p0, np,
      [&](int64_t q, int64_t ci, int64_t, int64_t j, Acc* row, int64_t ow0, int64_t ow1,
          int64_t col) {
        if (ci + 1 == next_prefetch && next_prefetch < g.cg()) {
          const Acc* next = x + (next_prefetch * g.h + ih_lo) * g.w;
          for (int64_t e = 0; e < (ih_hi - ih_lo + 1) * g.w; e += 64 / int64_t{sizeof(Acc)})
            __builtin_prefetch(next + e, 1);
          ++next_prefetch;
        }
        if (!row) return;
        const Acc* src = tile + q * ld + col - ow0;  // indexed by ow
        const int64_t off = j * g.dil_w - g.pad_left;
        conv_span v = j < max_cached ? valid[j] : conv_valid_span(off, g.stride_w, g.w, 0, g.wo);
        v.lo = std::clamp(v.lo, ow0, ow1), v.hi = std::clamp(v.hi, v.lo, ow1);
        Acc* dst = row + off;
        if (g.stride_w == 1) {
          TESSERA_OMP_SIMD()
          for (int64_t ow = v.lo; ow < v.hi; ++ow) dst[ow] += src[ow];
#if defined(TESSERA_DETAIL_MASKED_TAILS)
        } else if (std::is_same_v<Acc, float> && g.stride_w == 2) {
          if constexpr (std::is_same_v<Acc, float>)
            add_stride2_float(dst + 2 * v.lo, src + v.lo, v.hi - v.lo);
#endif
        } else {
          for (int64_t ow = v.lo; ow < v.hi; ++ow) dst[ow * g.stride_w] += src[ow];
        }
      });
}

}  // namespace detail
TESSERA_END_NAMESPACE

// tessera/backend/cpu/conv/direct.hpp - direct convolution for few input channels per group
// (first layers with C = 1 or 3, depthwise layers): no lowering, vectors along the output row.
//
// A lowered product has k = (c / groups) * r * s, only 9 for a 3x3 layer on one channel: each
// micro-tile would load and store its accumulators after 9 multiply-adds, and a depthwise layer
// is a product with one row. Here each input row is padded and split into stride phases once
// (padded_rows), so that every tap of every output vector is one contiguous load at any stride;
// a register block of output channels x output vectors reuses each load.
// Part of a kernel pass: included by isa_pass.hpp once per instruction set, no include guard.

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "../../../kernel/conv_problem.hpp"

TESSERA_BEGIN_NAMESPACE
namespace detail {

/// Input rows of one image-group, zero-padded and split by the column stride: element
/// (ci, row, phase, m) is input column m * stride_w + phase - pad_left of padded row `row`
/// (input row row - pad_top), so output column ow of tap j reads phase (j * dil_w) % stride_w,
/// index ow + (j * dil_w) / stride_w: consecutive output columns are consecutive elements.
/// Rows [row0, row0 + rows) of the padded image are kept; each phase row holds `len` elements,
/// enough for `wo_pad` output columns (a multiple of the vector width) of every tap.
template <class D>
struct padded_rows {
  D* data = nullptr;
  int64_t row0 = 0, rows = 0, len = 0, stride_w = 1;
  D* at(int64_t ci, int64_t row, int64_t phase) const {
    return data + ((ci * rows + (row - row0)) * stride_w + phase) * len;
  }
  /// Offset of tap (ci, i, j) from the start of output row oh's first padded row (row0 + oh *
  /// stride_h), for taps in (ci, i, j) order: the inner loops then do no index arithmetic
  /// (no divisions by the stride).
  void tap_offsets(const conv_geometry& g, int64_t cg, int64_t* off) const {
    for (int64_t ci = 0; ci < cg; ++ci)
      for (int64_t i = 0; i < g.r; ++i)
        for (int64_t j = 0; j < g.s; ++j) {
          const int64_t jd = j * g.dil_w;
          *off++ = ((ci * rows + i * g.dil_h) * stride_w + jd % stride_w) * len + jd / stride_w;
        }
  }
  /// Start of output row oh's first padded row.
  const D* row_base(const conv_geometry& g, int64_t oh) const {
    return data + (oh * g.stride_h - row0) * stride_w * len;
  }
};

/// Elements of one phase row of padded_rows covering wo_pad output columns: the last tap reads
/// (dil_w * (s - 1)) / stride_w elements past them.
inline int64_t padded_rows_len(const conv_geometry& g, int64_t wo_pad) {
  return wo_pad + (g.dil_w * (g.s - 1)) / g.stride_w + 1;
}

/// Fills a padded_rows for padded rows [row0, row0 + rows) of the image-group x ([cg, h, w]).
/// The valid span of each phase row is found once per phase (no division per row), and rows are
/// filled with short vector copies: in small CNNs they are 14 to 30 elements long, where library
/// calls and per-row divisions cost more than the copies (5% of a training step).
template <class D, class S>
TESSERA_DETAIL_KEEP_LOOPS void fill_padded_rows(const conv_geometry& g, const S* x, int64_t cg,
                                                padded_rows<D>& pr) {
  const float* f8 = float8_table_for<S>();
  // Element m of phase ph reads input column m * stride + ph - pad_left, valid for m in
  // [lo(ph), hi(ph)).
  const auto span_of = [&](int64_t ph) {
    const int64_t off = ph - g.pad_left;
    const int64_t lo = std::min(pr.len, off >= 0 ? 0 : (-off + pr.stride_w - 1) / pr.stride_w);
    const int64_t hi = std::clamp<int64_t>(
        g.w - off > 0 ? (g.w - off + pr.stride_w - 1) / pr.stride_w : 0, lo, pr.len);
    return std::pair{lo, hi};
  };
  constexpr int64_t max_cached = 8;
  std::pair<int64_t, int64_t> spans[max_cached];
  for (int64_t ph = 0; ph < std::min(pr.stride_w, max_cached); ++ph) spans[ph] = span_of(ph);
  // Row by row, every phase of a row before the next (the row is read from memory once), and
  // the next channel's row requested ahead: a tile's rows are short runs, one per channel,
  // which the hardware prefetchers do not follow (the reads were a sixth of a stride-2 forward).
  for (int64_t ci = 0; ci < cg; ++ci)
    for (int64_t row = pr.row0; row < pr.row0 + pr.rows; ++row) {
      const int64_t ih = row - g.pad_top;
      const bool inside = ih >= 0 && ih < g.h;
      if (inside && ci + 1 < cg)
        for (int64_t e = 0; e < g.w; e += 64 / static_cast<int64_t>(sizeof(S)))
          __builtin_prefetch(x + ((ci + 1) * g.h + ih) * g.w + e);
      for (int64_t ph = 0; ph < pr.stride_w; ++ph) {
        D* dst = pr.at(ci, row, ph);
        if (!inside) {
          zero_short(dst, pr.len);
          continue;
        }
        const auto [lo, hi] = ph < max_cached ? spans[ph] : span_of(ph);
        const S* src = x + (ci * g.h + ih) * g.w + ph - g.pad_left;
        zero_short(dst, lo);
        copy_short(dst + lo, src + lo * pr.stride_w, hi - lo, pr.stride_w, f8);
        zero_short(dst + hi, pr.len - hi);
      }
    }
}

/// Output rows [oh0, oh1) of output channels [k0, k0 + KB) of one image-group (y at channel
/// k0, row 0), from padded rows xp (tap offsets off, padded_rows::tap_offsets) and weights w ([kg,
/// cg, r, s] of the group, at k0). Computes NV vectors of output columns at a time (xp covers wo
/// rounded up to NV vectors). bias (at k0) may be null.
template <class Acc, int KB, int NV>
void conv_direct_rows(const conv_geometry& g, const padded_rows<Acc>& xp, const int64_t* off,
                      const Acc* w, const Acc* bias, bool relu, Acc* y, int64_t oh0, int64_t oh1) {
  using V = simd::vec<Acc>;
  constexpr int W = V::width, CW = NV * W;
  const int64_t taps = g.cg() * g.taps(), P = g.ho * g.wo;
  for (int64_t oh = oh0; oh < oh1; ++oh) {
    const Acc* base = xp.row_base(g, oh);
    for (int64_t ow_next = 0; ow_next < g.wo;) {
      // The last block of a row at least CW wide is moved back to end at wo (recomputing a few
      // columns) so that every store is a full vector; narrower rows go through a buffer.
      const int64_t ow = ow_next + CW > g.wo && g.wo >= CW ? g.wo - CW : ow_next;
      ow_next = ow + CW;
      V acc[KB][NV];
      for (int kb = 0; kb < KB; ++kb) {
        const V b0 = V::broadcast(bias ? bias[kb] : Acc(0));
        for (int v = 0; v < NV; ++v) acc[kb][v] = b0;
      }
      for (int64_t t = 0; t < taps; ++t) {
        const Acc* src = base + off[t] + ow;
        V xv[NV];
        TESSERA_UNROLL(4)
        for (int v = 0; v < NV; ++v) xv[v] = V::load(src + v * W);
        TESSERA_UNROLL(8)
        for (int kb = 0; kb < KB; ++kb) {
          const V wv = V::broadcast(w[kb * taps + t]);
          TESSERA_UNROLL(4)
          for (int v = 0; v < NV; ++v) acc[kb][v] = fma(wv, xv[v], acc[kb][v]);
        }
      }
      const int64_t cols = std::min<int64_t>(CW, g.wo - ow);
      for (int kb = 0; kb < KB; ++kb) {
        Acc* out = y + kb * P + oh * g.wo + ow;
        if (cols == CW) {
          for (int v = 0; v < NV; ++v)
            (relu ? simd::relu(acc[kb][v]) : acc[kb][v]).store(out + v * W);
        } else {
          alignas(64) Acc buf[CW];
          for (int v = 0; v < NV; ++v)
            (relu ? simd::relu(acc[kb][v]) : acc[kb][v]).store(buf + v * W);
          for (int64_t q = 0; q < cols; ++q) out[q] = buf[q];
        }
      }
    }
  }
}

/// Weight gradient of JB taps (offsets off) of one output channel from output rows [oh0, oh1):
/// dw[jb] += sum over rows and columns of dy(oh, ow) * x(tap). dy holds the rows [oh0, oh1) of
/// the channel, ld apart, zero-padded to ld (a multiple of the vector width) columns, so that
/// every row is whole vectors; xp covers ld columns.
template <class Acc, int JB>
void conv_direct_weight_taps(const conv_geometry& g, const padded_rows<Acc>& xp, const Acc* dy,
                             int64_t ld, const int64_t* off, int64_t oh0, int64_t oh1, Acc* dw) {
  using V = simd::vec<Acc>;
  constexpr int W = V::width;
  V acc[JB];
  for (int jb = 0; jb < JB; ++jb) acc[jb] = V::broadcast(Acc(0));
  // The input past column wo of a tap is real data (an Inf there times dy's zero padding would
  // give NaN): the last vector of each row reads it through a lane mask.
  const int64_t full = g.wo / W * W;
  alignas(64) Acc lane_index[W];
  for (int l = 0; l < W; ++l) lane_index[l] = static_cast<Acc>(l);
  const auto tail = simd::lt(V::load(lane_index), V::broadcast(static_cast<Acc>(g.wo - full)));
  const V zero = V::broadcast(Acc(0));
  for (int64_t oh = oh0; oh < oh1; ++oh) {
    const Acc* base = xp.row_base(g, oh);
    const Acc* d = dy + (oh - oh0) * ld;
    for (int64_t ow = 0; ow < full; ow += W) {
      const V dv = V::load(d + ow);
      TESSERA_UNROLL(9)
      for (int jb = 0; jb < JB; ++jb) acc[jb] = fma(dv, V::load(base + off[jb] + ow), acc[jb]);
    }
    if (full < g.wo) {
      const V dv = V::load(d + full);
      TESSERA_UNROLL(9)
      for (int jb = 0; jb < JB; ++jb)
        acc[jb] = fma(dv, simd::select(tail, V::load(base + off[jb] + full), zero), acc[jb]);
    }
  }
  for (int jb = 0; jb < JB; ++jb) {
    alignas(64) Acc lanes[W];
    acc[jb].store(lanes);
    Acc sum = 0;
    for (int l = 0; l < W; ++l) sum += lanes[l];
    dw[jb] += sum;
  }
}

/// Weight gradient of output channels [0, kg) of one image-group from output rows [oh0, oh1):
/// dw ([kg, cg, r, s]) += the products of dy with the padded input. dy: the group's channels,
/// rows [oh0, oh1) each, zero-padded to ld columns (conv_direct_weight_taps); taps are taken
/// eight at a time, so each dy vector load serves eight multiply-adds.
template <class Acc>
void conv_direct_weight_rows(const conv_geometry& g, const padded_rows<Acc>& xp, const Acc* dy,
                             int64_t ld, Acc* dw, int64_t oh0, int64_t oh1) {
  const int64_t kg = g.kg(), taps = g.cg() * g.taps(), plane = (oh1 - oh0) * ld;
  int64_t off[4096];  // cg <= 4 taps of at most 32 x 32 (conv_use_direct)
  xp.tap_offsets(g, g.cg(), off);
  for (int64_t kk = 0; kk < kg; ++kk) {
    const Acc* d = dy + kk * plane;
    Acc* out = dw + kk * taps;
    int64_t t = 0;
    if (taps == 9) {  // one 3x3 kernel: a single pass
      conv_direct_weight_taps<Acc, 9>(g, xp, d, ld, off, oh0, oh1, out);
      continue;
    }
    for (; t + 8 <= taps; t += 8)
      conv_direct_weight_taps<Acc, 8>(g, xp, d, ld, off + t, oh0, oh1, out + t);
    for (; t + 4 <= taps; t += 4)
      conv_direct_weight_taps<Acc, 4>(g, xp, d, ld, off + t, oh0, oh1, out + t);
    for (; t < taps; ++t) conv_direct_weight_taps<Acc, 1>(g, xp, d, ld, off + t, oh0, oh1, out + t);
  }
}

}  // namespace detail
TESSERA_END_NAMESPACE

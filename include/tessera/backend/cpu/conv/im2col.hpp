// tessera/backend/cpu/conv/im2col.hpp - the lowering of a convolution to matrix products: tiles
// of the im2col matrix (one row per input channel and kernel tap, one column per output pixel),
// and the inverse scatter-add (col2im) for the input gradient.
//
// A tile covers every row of one image-group but only a range of output pixels, so the lowered
// matrix never exists whole: its size is bounded by the tile, not by the image.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "../../../detail/conv_problem.hpp"
#include "../gemm/pack.hpp"
#include "../simd/vec.hpp"

#if (defined(__AVX512F__) || defined(__AVX2__)) && !defined(TESSERA_SIMD_SCALAR) && \
    !defined(__CUDA_ARCH__)
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

// Runs of an im2col row are short (a panel is 16-32 pixels): a memcpy/memset call per run costs
// more than the copy (measured: a third of a 3x3 forward). GCC turns plain copy loops back into
// those calls; this keeps them as loops.
#if defined(__GNUC__) && !defined(__clang__)
#define TESSERA_DETAIL_KEEP_LOOPS __attribute__((optimize("no-tree-loop-distribute-patterns")))
#else
#define TESSERA_DETAIL_KEEP_LOOPS
#endif

#if (defined(__AVX512F__) || defined(__AVX2__)) && !defined(TESSERA_SIMD_SCALAR) && \
    !defined(__CUDA_ARCH__)
#define TESSERA_DETAIL_MASKED_TAILS 1
/// The last n < 16 (AVX-512) or n < 8 (AVX2) floats of a row, as one masked load and store:
/// a 14-pixel row is then two instructions instead of fourteen scalar copies.
TESSERA_ALWAYS_INLINE void copy_float_tail(float* dst, const float* src, int64_t n) {
#if defined(__AVX512F__)
  const __mmask16 m = static_cast<__mmask16>((1u << n) - 1);
  _mm512_mask_storeu_ps(dst, m, src ? _mm512_maskz_loadu_ps(m, src) : _mm512_setzero_ps());
#else
  const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)),
                                       _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  _mm256_maskstore_ps(dst, m, src ? _mm256_maskload_ps(src, m) : _mm256_setzero_ps());
#endif
}

inline constexpr int float_lanes =
#if defined(__AVX512F__)
    16;
#else
    8;
#endif

/// dst[0, n) = src[0, n) with whole-vector stores that may run up to a vector past n (where the
/// caller writes again later); src is read past n only below src_limit, masked beyond.
TESSERA_ALWAYS_INLINE void copy_run_float(float* dst, const float* src, int64_t n,
                                          const float* src_limit) {
  for (int64_t i = 0; i < n; i += float_lanes) {
    const int64_t c = std::min<int64_t>(n - i, float_lanes);
#if defined(__AVX512F__)
    if (src + i + float_lanes <= src_limit)
      _mm512_storeu_ps(dst + i, _mm512_loadu_ps(src + i));
    else
      _mm512_storeu_ps(dst + i,
                       _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << c) - 1), src + i));
#else
    if (src + i + float_lanes <= src_limit) {
      _mm256_storeu_ps(dst + i, _mm256_loadu_ps(src + i));
    } else {
      const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(c)),
                                           _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
      _mm256_storeu_ps(dst + i, _mm256_maskload_ps(src + i, m));
    }
#endif
  }
}
#if defined(__AVX512F__)
/// dst[0, n) = src[0, 2, 4, ...) (stride 2), as copy_run_float: two loads and one two-source
/// permute per 16 values instead of 16 scalar copies.
TESSERA_ALWAYS_INLINE void copy_run2_float(float* dst, const float* src, int64_t n,
                                           const float* src_limit) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  for (int64_t i = 0; i < n; i += 16) {
    const float* s = src + 2 * i;
    if (s + 32 <= src_limit) {
      _mm512_storeu_ps(dst + i,
                       _mm512_permutex2var_ps(_mm512_loadu_ps(s), even, _mm512_loadu_ps(s + 16)));
    } else {
      for (int64_t k = i; k < std::min<int64_t>(n, i + 16); ++k) dst[k] = src[2 * k];
    }
  }
}
inline constexpr bool have_copy_run2_float = true;
#else
inline constexpr bool have_copy_run2_float = false;
TESSERA_ALWAYS_INLINE void copy_run2_float(float*, const float*, int64_t, const float*) {}
#endif

/// dst[0, n) = 0 with whole-vector stores, as copy_run_float.
TESSERA_ALWAYS_INLINE void zero_run_float(float* dst, int64_t n) {
  for (int64_t i = 0; i < n; i += float_lanes)
#if defined(__AVX512F__)
    _mm512_storeu_ps(dst + i, _mm512_setzero_ps());
#else
    _mm256_storeu_ps(dst + i, _mm256_setzero_ps());
#endif
}
#endif

/// dst[0, n) = 0, for short n.
template <class D>
TESSERA_DETAIL_KEEP_LOOPS TESSERA_ALWAYS_INLINE void zero_short(D* dst, int64_t n) {
  int64_t i = 0;
  if constexpr (simd::available<D>) {
    using V = simd::vec<D>;
    for (; i + V::width <= n; i += V::width) V::broadcast(D(0)).store(dst + i);
#if defined(TESSERA_DETAIL_MASKED_TAILS)
    if constexpr (std::is_same_v<D, float>) {
      if (i < n) copy_float_tail(dst + i, nullptr, n - i);
      return;
    }
#endif
  }
  for (; i < n; ++i) dst[i] = D(0);
}

/// dst[i] = src[i * stride] converted to D for i in [0, n), for short n.
template <class D, class S>
TESSERA_DETAIL_KEEP_LOOPS TESSERA_ALWAYS_INLINE void copy_short(D* dst, const S* src, int64_t n,
                                                                int64_t stride, const float* f8) {
  int64_t i = 0;
  if constexpr (std::is_same_v<D, S> && simd::available<D>) {
    using V = simd::vec<D>;
    if (stride == 1) {
      for (; i + V::width <= n; i += V::width) V::load(src + i).store(dst + i);
#if defined(TESSERA_DETAIL_MASKED_TAILS)
      if constexpr (std::is_same_v<D, float>) {
        if (i < n) copy_float_tail(dst + i, src + i, n - i);
        return;
      }
#endif
    }
  }
  for (; i < n; ++i) dst[i] = pack_convert<D>(src[i * stride], f8);
}

/// rows x cols of src (row stride src_ld) into dst with row stride dst_ld >= cols, the columns
/// past cols zeroed.
template <class D>
TESSERA_DETAIL_KEEP_LOOPS void copy_rows_padded(const D* src, int64_t src_ld, int64_t rows,
                                                int64_t cols, D* dst, int64_t dst_ld) {
  for (int64_t r = 0; r < rows; ++r) {
    copy_short(dst + r * dst_ld, src + r * src_ld, cols, 1, nullptr);
    zero_short(dst + r * dst_ld + cols, dst_ld - cols);
  }
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
      const int64_t oh = p / g.wo, ow0 = p % g.wo, ow1 = std::min(g.wo, ow0 + (p0 + np - p));
      runs[nruns] = {oh, ow0, ow1, p - p0};
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
          const bool vector_stride = g.stride_w == 1 || (g.stride_w == 2 && have_copy_run2_float);
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
              copy_run2_float(dst + v.lo, row + off + 2 * v.lo, v.hi - v.lo, x_end);
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

/// The inverse of im2col_tile, accumulating: x value for row q and output pixel p0 + col +=
/// tile[q * ld + col]; padding positions are dropped. x is one image-group: [cg, h, w].
template <class Acc>
void col2im_tile_add(const conv_geometry& g, const Acc* tile, int64_t ld, int64_t p0, int64_t np,
                     Acc* x) {
  constexpr int64_t max_cached = 64;  // as im2col_tile: no divisions per run
  conv_span valid[max_cached];
  for (int64_t j = 0; j < std::min(g.s, max_cached); ++j)
    valid[j] = conv_valid_span(j * g.dil_w - g.pad_left, g.stride_w, g.w, 0, g.wo);
  for_each_tile_run(
      g, x, p0, np,
      [&](int64_t q, int64_t, int64_t, int64_t j, Acc* row, int64_t ow0, int64_t ow1, int64_t col) {
        if (!row) return;
        const Acc* src = tile + q * ld + col - ow0;  // indexed by ow
        const int64_t off = j * g.dil_w - g.pad_left;
        conv_span v = j < max_cached ? valid[j] : conv_valid_span(off, g.stride_w, g.w, 0, g.wo);
        v.lo = std::clamp(v.lo, ow0, ow1), v.hi = std::clamp(v.hi, v.lo, ow1);
        Acc* dst = row + off;
        if (g.stride_w == 1) {
#pragma omp simd
          for (int64_t ow = v.lo; ow < v.hi; ++ow) dst[ow] += src[ow];
        } else {
          for (int64_t ow = v.lo; ow < v.hi; ++ow) dst[ow * g.stride_w] += src[ow];
        }
      });
}

}  // namespace detail
TESSERA_END_NAMESPACE

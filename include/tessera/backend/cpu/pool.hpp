// tessera/backend/cpu/pool.hpp - the CPU pooling kernels: max, average and adaptive average
// pooling over contiguous NCHW planes, forward and backward.
//
// Forward work is split over output rows of all planes (so one large image still uses every
// thread); backward over planes (windows may overlap, and user indices may point anywhere in
// their plane). Windows along each axis are tabulated once per call (pool_window_of).
//
// Paths, for every dtype: max pooling with indices scans each window in row-major order and
// keeps the first maximum (a NaN always wins, the last NaN stays), exactly PyTorch's rule.
// Without indices, and for average pooling, windows are separable: the rows of one output row's
// window are combined elementwise first (simd::vec for float and double), then each output
// combines its columns. Average pooling sums in float (double for double); every path adds in
// the same order (rows, then columns), so results do not depend on the path or thread count.
//
// Float fast paths (AVX-512, else AVX2 + FMA): windows 2 or 3 wide with stride 2 (2x2/2,
// ResNet's 3x3/2 pad 1, ...) are computed directly, 16 (8) outputs per step, indices included:
// even and odd columns are split with permutes, the third tap is the even columns moved one
// lane. Output rows whose windows are not clipped run back to back, across planes when the
// planes tile exactly (2x2/2 on even sizes); only the clipped border outputs take the scalar
// path. Global average pooling is a sum per plane (16 small planes per step on AVX-512). Max
// backward of 2x2/2-shaped indices writes each window directly (AVX-512) instead of zero-filling
// and scattering; anything else scatters.
// Part of a kernel pass: included by isa_pass.hpp once per instruction set, no include guard.

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "../../core/backend.hpp"
#include "../../core/dtype.hpp"
#include "../../kernel/pool_problem.hpp"
#include "parallel.hpp"

// The direct stride-2 kernels: AVX-512 (16 outputs per step, masked edges) where the target has
// it, else AVX2 + FMA (8 per step), else none (the separable and scalar paths serve every case).
#if defined(TESSERA_ISA_AVX512)
#include <immintrin.h>
#define TESSERA_DETAIL_POOL_AVX512 1
#define TESSERA_DETAIL_POOL_AVX2 0
#elif defined(TESSERA_ISA_AVX2)
#include <immintrin.h>
#define TESSERA_DETAIL_POOL_AVX512 0
#define TESSERA_DETAIL_POOL_AVX2 1
#else
#define TESSERA_DETAIL_POOL_AVX512 0
#define TESSERA_DETAIL_POOL_AVX2 0
#endif

TESSERA_BEGIN_NAMESPACE
namespace detail {

/// Type max pooling compares in: float for the low-precision formats, T otherwise.
template <class T>
using pool_max_t = compute_t<T>;
/// Type average pooling sums in: double for double, float for the other floating types.
template <class T>
using pool_sum_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <class V>
TESSERA_ALWAYS_INLINE bool pool_isnan(V v) {
  if constexpr (std::is_floating_point_v<V>)
    return v != v;
  else
    return false;
}
/// Maximum that is NaN when either input is NaN.
template <class V>
TESSERA_ALWAYS_INLINE V pool_max(V a, V b) {
  return (a >= b || pool_isnan(a)) ? a : b;
}

/// Windows along one axis for every output position.
inline std::vector<pool_window> pool_windows(int64_t out, int64_t in, int64_t k, int64_t s,
                                             int64_t p, int64_t d, bool count_include_pad) {
  std::vector<pool_window> v(static_cast<size_t>(out));
  for (int64_t o = 0; o < out; ++o) v[o] = pool_window_of(o, in, k, s, p, d, count_include_pad);
  return v;
}
inline std::vector<pool_window> adaptive_windows(int64_t out, int64_t in) {
  std::vector<pool_window> v(static_cast<size_t>(out));
  for (int64_t o = 0; o < out; ++o) v[o] = adaptive_window_of(o, in, out);
  return v;
}

/// out[x] = a[x] op b[x] for x < w, op = NaN-propagating max or +, in A.
template <bool Max, class A, class Sa, class Sb>
TESSERA_ALWAYS_INLINE void pool_combine(const Sa* a, const Sb* b, A* out, int64_t w) {
  int64_t x = 0;
  if constexpr (std::is_same_v<Sa, A> && std::is_same_v<Sb, A> && simd::available<A>) {
    using V = simd::vec<A>;
    for (; x + V::width <= w; x += V::width) {
      const V va = V::load(a + x), vb = V::load(b + x);
      if constexpr (Max)
        simd::max(va, vb).store(out + x);
      else
        (va + vb).store(out + x);
    }
  }
  for (; x < w; ++x) {
    const A va = static_cast<A>(a[x]), vb = static_cast<A>(b[x]);
    out[x] = Max ? pool_max(va, vb) : va + vb;
  }
}

/// buf[x] = the maximum or the sum over rows r0, r0 + dr, ... < r1 of plane xp (width w), in
/// row order (buf holds w elements of A).
template <bool Max, class T, class A>
void pool_reduce_rows(const T* xp, int64_t w, int64_t r0, int64_t r1, int64_t dr, A* buf) {
  const T* first = xp + r0 * w;
  int64_t r = r0 + dr;
  if (r < r1) {
    pool_combine<Max>(first, xp + r * w, buf, w);
    r += dr;
  } else if constexpr (std::is_same_v<T, A>) {
    std::memcpy(buf, first, static_cast<size_t>(w) * sizeof(A));
  } else {
    for (int64_t x = 0; x < w; ++x) buf[x] = static_cast<A>(first[x]);
  }
  for (; r < r1; r += dr) pool_combine<Max>(buf, xp + r * w, buf, w);
}

/// Outputs [ox0, ox1) of one output row from its rows' combination buf: each combines the
/// columns of its window (max, or sum divided by the window's divisor).
template <bool Max, class T, class A>
void pool_reduce_cols(const A* buf, const pool_window* cw, int64_t dw, int64_t row_count,
                      int64_t ox0, int64_t ox1, T* y) {
  for (int64_t ox = ox0; ox < ox1; ++ox) {
    const pool_window& c = cw[ox];
    A acc = buf[c.begin];
    for (int64_t col = c.begin + dw; col < c.end; col += dw)
      acc = Max ? pool_max(acc, buf[col]) : acc + buf[col];
    if constexpr (!Max) acc = acc / static_cast<A>(row_count * c.count);
    y[ox] = static_cast<T>(acc);
  }
}

/// One max-pooling output by a row-major scan of its window: the first maximum, or the last NaN
/// (PyTorch's update rule `v > max || isnan(v)`). Writes the flat plane index when idx is set.
template <class T>
TESSERA_ALWAYS_INLINE void pool_max_at(const T* xp, int64_t w, const pool_window& r,
                                       const pool_window& c, int64_t dh, int64_t dw, T* y,
                                       int64_t* idx) {
  using V = pool_max_t<T>;
  int64_t best = r.begin * w + c.begin;
  V m = static_cast<V>(xp[best]);
  for (int64_t row = r.begin; row < r.end; row += dh)
    for (int64_t col = c.begin; col < c.end; col += dw) {
      const V v = static_cast<V>(xp[row * w + col]);
      const bool take = v > m || pool_isnan(v);  // written as selects: random data mispredicts
      m = take ? v : m;
      best = take ? row * w + col : best;
    }
  *y = xp[best];
  if (idx) *idx = best;
}

/// One average-pooling output, summed in the separable order of the vector paths (each column's
/// rows first, then the columns), so that every path rounds alike.
template <class T>
TESSERA_ALWAYS_INLINE void pool_avg_at(const T* xp, int64_t w, const pool_window& r,
                                       const pool_window& c, T* y) {
  using A = pool_sum_t<T>;
  A acc = 0;
  for (int64_t col = c.begin; col < c.end; ++col) {
    A s = static_cast<A>(xp[r.begin * w + col]);
    for (int64_t row = r.begin + 1; row < r.end; ++row) s += static_cast<A>(xp[row * w + col]);
    acc = col == c.begin ? s : acc + s;
  }
  *y = static_cast<T>(acc / static_cast<A>(r.count * c.count));
}

/// What a direct vector kernel computes.
enum class pool_vec_mode { max_values, max_indices, average };

/// A run of n output rows for the direct stride-2 kernels, each nout outputs whose windows lie
/// inside the plane's columns. Row i's first window column is p + i * row_step; a window's rows
/// are rstride apart (`rows` of them); outputs go to y + i * ow (and idx + i * ow). `base` is the
/// flat plane index of p; it advances with the rows and drops by plane_elems each time a run that
/// spans planes crosses into the next one (after plane_rows rows, counting from first_row).
struct pool_s2_run {
  const float* p = nullptr;
  int64_t n = 0, row_step = 0, rstride = 0, rows = 0;
  int64_t base = 0, plane_rows = std::numeric_limits<int64_t>::max(), first_row = 0,
          plane_elems = 0;
  int64_t nout = 0;
  float divisor = 1;
  float* y = nullptr;
  int64_t ow = 0;
  int64_t* idx = nullptr;
};

#if TESSERA_DETAIL_POOL_AVX512
namespace pool_simd {

using mode = pool_vec_mode;
inline constexpr int64_t min_outputs = 1;  // masks take any row length

/// Maximum, NaN when either is (vmaxps returns its second operand when one is NaN).
TESSERA_ALWAYS_INLINE __m512 nanmax(__m512 a, __m512 b) {
  return _mm512_mask_max_ps(a, _mm512_cmp_ps_mask(a, a, _CMP_ORD_Q), a, b);  // NaN a stays
}
/// PyTorch's scan step on 16 lanes: take candidate c (flat index ci) where c > m or c is NaN.
TESSERA_ALWAYS_INLINE void take_if_greater(__m512& m, __m512i& id, __m512 c, __m512i ci) {
  const __mmask16 upd = static_cast<__mmask16>(_mm512_cmp_ps_mask(c, m, _CMP_GT_OQ) |
                                               _mm512_cmp_ps_mask(c, c, _CMP_UNORD_Q));
  m = _mm512_mask_mov_ps(m, upd, c);
  id = _mm512_mask_mov_epi32(id, upd, ci);
}
/// The first n lanes (all for n >= 16, none for n <= 0).
inline __mmask16 lanes(int64_t n) {
  return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

/// Up to 16 outputs of one output row (stride-2, KW-wide, dilation-1 windows inside the plane's
/// columns): output lane k reads columns 2k .. 2k + KW - 1 from p of `rows` rows (R of them when
/// R > 0), rstride elements apart. in0 / in1 mask the two registers of columns 0 .. 31, in2 column
/// 32 (the third tap of lane 15); out masks the outputs written: y[k] and, for max_indices,
/// idx[k], whose flat plane index is base + its column. The third tap is the even columns moved
/// down one lane, so a 3-wide window costs no second pair of (unaligned) loads.
template <int KW, mode M, int R>
TESSERA_ALWAYS_INLINE void block_s2(const float* p, int64_t rstride, int64_t rows, int32_t base,
                                    __mmask16 in0, __mmask16 in1, __mmask16 in2, __mmask16 out,
                                    float divisor, float* y, int64_t* idx) {
  const __m512i even_idx =
      _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd_idx = _mm512_add_epi32(even_idx, _mm512_set1_epi32(1));
  const __m512i next_idx = _mm512_setr_epi32(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16);
  auto even = [&](__m512 a, __m512 c) { return _mm512_permutex2var_ps(a, even_idx, c); };
  auto odd = [&](__m512 a, __m512 c) { return _mm512_permutex2var_ps(a, odd_idx, c); };
  // Column 2k + 2: lane k + 1 of the even columns, column 32 (lane 0 of s) for lane 15.
  auto next = [&](__m512 e, __m512 s) { return _mm512_permutex2var_ps(e, next_idx, s); };
  auto load3 = [&](const float* q) {
    return KW == 3 ? _mm512_maskz_loadu_ps(in2, q + 32) : _mm512_setzero_ps();
  };
  const int64_t n = R > 0 ? R : rows;
  if constexpr (M == mode::max_indices) {
    const __m512i one = _mm512_set1_epi32(1), two = _mm512_set1_epi32(2);
    __m512i ci = _mm512_add_epi32(_mm512_set1_epi32(base), even_idx);  // column 0 of each window
    const __m512 va = _mm512_maskz_loadu_ps(in0, p), vb = _mm512_maskz_loadu_ps(in1, p + 16);
    const __m512 e0 = even(va, vb);
    __m512 m = e0;
    __m512i id = ci;
    take_if_greater(m, id, odd(va, vb), _mm512_add_epi32(ci, one));
    if constexpr (KW == 3) take_if_greater(m, id, next(e0, load3(p)), _mm512_add_epi32(ci, two));
    const __m512i step = _mm512_set1_epi32(static_cast<int32_t>(rstride));
    for (int64_t i = 1; i < n; ++i) {
      p += rstride, ci = _mm512_add_epi32(ci, step);
      const __m512 ra = _mm512_maskz_loadu_ps(in0, p), rb = _mm512_maskz_loadu_ps(in1, p + 16);
      const __m512 e = even(ra, rb);
      take_if_greater(m, id, e, ci);
      take_if_greater(m, id, odd(ra, rb), _mm512_add_epi32(ci, one));
      if constexpr (KW == 3) take_if_greater(m, id, next(e, load3(p)), _mm512_add_epi32(ci, two));
    }
    _mm512_mask_storeu_ps(y, out, m);
    _mm512_mask_storeu_epi64(idx, static_cast<__mmask8>(out),
                             _mm512_cvtepi32_epi64(_mm512_castsi512_si256(id)));
    _mm512_mask_storeu_epi64(idx + 8, static_cast<__mmask8>(out >> 8),
                             _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(id, 1)));
  } else {
    // Rows first (in row order, as pool_reduce_rows), then the window's columns.
    constexpr bool Max = M == mode::max_values;
    auto op = [](__m512 a, __m512 c) { return Max ? nanmax(a, c) : _mm512_add_ps(a, c); };
    __m512 va = _mm512_maskz_loadu_ps(in0, p), vb = _mm512_maskz_loadu_ps(in1, p + 16),
           vs = load3(p);
    for (int64_t i = 1; i < n; ++i) {
      p += rstride;
      va = op(va, _mm512_maskz_loadu_ps(in0, p)), vb = op(vb, _mm512_maskz_loadu_ps(in1, p + 16));
      if constexpr (KW == 3) vs = op(vs, load3(p));
    }
    const __m512 e = even(va, vb);
    __m512 acc = op(e, odd(va, vb));
    if constexpr (KW == 3) acc = op(acc, next(e, vs));
    if constexpr (!Max) acc = _mm512_div_ps(acc, _mm512_set1_ps(divisor));
    _mm512_mask_storeu_ps(y, out, acc);
  }
}

/// The run's outputs, 16 at a time and the rest masked.
template <int KW, mode M, int R>
void rows_run(const pool_s2_run& g) {
  const int64_t full = g.nout / 16, tail = g.nout % 16, cols = 2 * tail + (KW == 3);
  const __mmask16 t0 = lanes(cols), t1 = lanes(cols - 16), tout = lanes(tail);
  const __mmask16 f2 = KW == 3 ? 1 : 0;  // column 32 of a full block
  int64_t base = g.base, k = g.first_row;
  for (int64_t i = 0; i < g.n; ++i) {
    const float* q = g.p + i * g.row_step;
    int32_t bq = static_cast<int32_t>(base);
    float* yq = g.y + i * g.ow;
    int64_t* iq = M == mode::max_indices ? g.idx + i * g.ow : nullptr;
    for (int64_t j = 0; j < full; ++j, q += 32, bq += 32, yq += 16)
      block_s2<KW, M, R>(q, g.rstride, g.rows, bq, 0xFFFF, 0xFFFF, f2, 0xFFFF, g.divisor, yq,
                         M == mode::max_indices ? iq + 16 * j : nullptr);
    if (tail)
      block_s2<KW, M, R>(q, g.rstride, g.rows, bq, t0, t1, 0, tout, g.divisor, yq,
                         M == mode::max_indices ? iq + 16 * full : nullptr);
    base += g.row_step;
    if (++k == g.plane_rows) k = 0, base -= g.plane_elems;
  }
}

}  // namespace pool_simd
#elif TESSERA_DETAIL_POOL_AVX2
namespace pool_simd {

using mode = pool_vec_mode;
inline constexpr int64_t min_outputs = 8;  // one full step; shorter rows stay scalar

// Of 16 consecutive floats in (a, b), even() takes columns 0, 2, .., 14 and odd() 1, 3, .., 15;
// both leave output lane k at register position {0, 1, 4, 5, 2, 3, 6, 7}[k], which unshuffle()
// (a swap of the middle 64-bit quarters) restores.
TESSERA_ALWAYS_INLINE __m256 even(__m256 a, __m256 b) { return _mm256_shuffle_ps(a, b, 0x88); }
TESSERA_ALWAYS_INLINE __m256 odd(__m256 a, __m256 b) { return _mm256_shuffle_ps(a, b, 0xDD); }
TESSERA_ALWAYS_INLINE __m256 unshuffle(__m256 v) {
  return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(v), 0xD8));
}
TESSERA_ALWAYS_INLINE __m256i unshuffle(__m256i v) { return _mm256_permute4x64_epi64(v, 0xD8); }
/// Maximum, NaN when either is (vmaxps returns its second operand when one is NaN).
TESSERA_ALWAYS_INLINE __m256 nanmax(__m256 a, __m256 b) {
  return _mm256_blendv_ps(_mm256_max_ps(a, b), a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
}
/// PyTorch's scan step on 8 lanes: take candidate c (flat index ci) where c > m or c is NaN.
TESSERA_ALWAYS_INLINE void take_if_greater(__m256& m, __m256i& id, __m256 c, __m256i ci) {
  const __m256 upd =
      _mm256_or_ps(_mm256_cmp_ps(c, m, _CMP_GT_OQ), _mm256_cmp_ps(c, c, _CMP_UNORD_Q));
  m = _mm256_blendv_ps(m, c, upd);
  id = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(id), _mm256_castsi256_ps(ci), upd));
}

/// Eight outputs of one output row (stride-2, KW-wide, dilation-1 windows inside the plane's
/// columns): output lane k reads columns 2k .. 2k + KW - 1 from p of `rows` rows (R of them when
/// R > 0), rstride elements apart. Writes y[0 .. 8) and, for max_indices, idx[0 .. 8), the flat
/// plane index of column c of the first row being base + c.
template <int KW, mode M, int R>
TESSERA_ALWAYS_INLINE void block_s2(const float* p, int64_t rstride, int64_t rows, int32_t base,
                                    float divisor, float* y, int64_t* idx) {
  const int64_t n = R > 0 ? R : rows;
  if constexpr (M == mode::max_indices) {
    // Window column of each output lane (at its shuffled register position), from lane 0's.
    const __m256i lane_col = _mm256_setr_epi32(0, 2, 8, 10, 4, 6, 12, 14);
    const __m256i one = _mm256_set1_epi32(1), two = _mm256_set1_epi32(2);
    __m256i ci = _mm256_add_epi32(_mm256_set1_epi32(base), lane_col);
    const __m256 va = _mm256_loadu_ps(p), vb = _mm256_loadu_ps(p + 8);
    __m256 m = even(va, vb);
    __m256i id = ci;
    take_if_greater(m, id, odd(va, vb), _mm256_add_epi32(ci, one));
    if constexpr (KW == 3)
      take_if_greater(m, id, odd(_mm256_loadu_ps(p + 1), _mm256_loadu_ps(p + 9)),
                      _mm256_add_epi32(ci, two));
    const __m256i step = _mm256_set1_epi32(static_cast<int32_t>(rstride));
    for (int64_t i = 1; i < n; ++i) {
      p += rstride, ci = _mm256_add_epi32(ci, step);
      const __m256 ra = _mm256_loadu_ps(p), rb = _mm256_loadu_ps(p + 8);
      take_if_greater(m, id, even(ra, rb), ci);
      take_if_greater(m, id, odd(ra, rb), _mm256_add_epi32(ci, one));
      if constexpr (KW == 3)
        take_if_greater(m, id, odd(_mm256_loadu_ps(p + 1), _mm256_loadu_ps(p + 9)),
                        _mm256_add_epi32(ci, two));
    }
    _mm256_storeu_ps(y, unshuffle(m));
    const __m256i nat = unshuffle(id);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(idx),
                        _mm256_cvtepi32_epi64(_mm256_castsi256_si128(nat)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(idx + 4),
                        _mm256_cvtepi32_epi64(_mm256_extracti128_si256(nat, 1)));
  } else {
    // Rows first (in row order, as pool_reduce_rows), then the window's columns.
    constexpr bool Max = M == mode::max_values;
    auto op = [](__m256 a, __m256 c) { return Max ? nanmax(a, c) : _mm256_add_ps(a, c); };
    __m256 va = _mm256_loadu_ps(p), vb = _mm256_loadu_ps(p + 8), vc = va, vd = vb;
    if constexpr (KW == 3) vc = _mm256_loadu_ps(p + 1), vd = _mm256_loadu_ps(p + 9);
    for (int64_t i = 1; i < n; ++i) {
      p += rstride;
      va = op(va, _mm256_loadu_ps(p)), vb = op(vb, _mm256_loadu_ps(p + 8));
      if constexpr (KW == 3)
        vc = op(vc, _mm256_loadu_ps(p + 1)), vd = op(vd, _mm256_loadu_ps(p + 9));
    }
    __m256 acc = op(even(va, vb), odd(va, vb));
    if constexpr (KW == 3) acc = op(acc, odd(vc, vd));
    if constexpr (!Max) acc = _mm256_div_ps(acc, _mm256_set1_ps(divisor));
    _mm256_storeu_ps(y, unshuffle(acc));
  }
}

/// The run's outputs (nout >= 8), 8 at a time, then one overlapping block instead of a scalar
/// tail (it rewrites a few outputs identically).
template <int KW, mode M, int R>
void rows_run(const pool_s2_run& g) {
  int64_t base = g.base, k = g.first_row;
  for (int64_t i = 0; i < g.n; ++i) {
    const float* q = g.p + i * g.row_step;
    float* yq = g.y + i * g.ow;
    int64_t* iq = M == mode::max_indices ? g.idx + i * g.ow : nullptr;
    auto block = [&](int64_t j) {
      block_s2<KW, M, R>(q + 2 * j, g.rstride, g.rows, static_cast<int32_t>(base + 2 * j),
                         g.divisor, yq + j, M == mode::max_indices ? iq + j : nullptr);
    };
    int64_t j = 0;
    for (; j + 8 <= g.nout; j += 8) block(j);
    if (j < g.nout) block(g.nout - 8);
    base += g.row_step;
    if (++k == g.plane_rows) k = 0, base -= g.plane_elems;
  }
}

}  // namespace pool_simd
#endif

#if TESSERA_DETAIL_POOL_AVX512 || TESSERA_DETAIL_POOL_AVX2
namespace pool_simd {

/// Runs g with the compile-time window width kw (2 or 3) and row count (2, 3 or any).
template <mode M>
void run_s2(int64_t kw, const pool_s2_run& g) {
  auto with_rows = [&]<int KW>() {
    if (g.rows == 2)
      rows_run<KW, M, 2>(g);
    else if (g.rows == 3)
      rows_run<KW, M, 3>(g);
    else
      rows_run<KW, M, 0>(g);
  };
  if (kw == 2)
    with_rows.template operator()<2>();
  else
    with_rows.template operator()<3>();
}

/// Output rows [oy0, oy1) of one plane, outputs [ox0, ox1) of each: output row oy reads rows
/// rw[oy] (step dh) of plane xp, its output k the columns 2k - pw .. 2k - pw + kw - 1, all inside
/// the plane. Rows whose windows are not clipped form one run (each sh input rows further on);
/// clipped rows at either end go one at a time. y and idx point at the output plane (rows of
/// ow). For max_indices the plane must have fewer than 2^31 elements (int32 index lanes).
template <mode M>
void rows_s2(int64_t kw, const float* xp, int64_t w, const pool_window* rw, int64_t oy0,
             int64_t oy1, int64_t kh, int64_t sh, int64_t dh, int64_t pw, int64_t ox0, int64_t ox1,
             int64_t ow, float* y, int64_t* idx) {
  const int64_t span = (kh - 1) * dh + 1;
  auto full = [&](int64_t oy) { return rw[oy].end - rw[oy].begin == span; };
  int64_t a = oy0, b = oy1;
  while (a < b && !full(a)) ++a;
  while (b > a && !full(b - 1)) --b;
  auto run = [&](int64_t from, int64_t to, int64_t row_step) {
    const pool_window& r = rw[from];
    pool_s2_run g;
    const int64_t off = r.begin * w + 2 * ox0 - pw;
    g.p = xp + off, g.n = to - from, g.row_step = row_step, g.rstride = dh * w;
    g.rows = dh == 1 ? r.end - r.begin : (r.end - r.begin + dh - 1) / dh;
    g.base = off, g.nout = ox1 - ox0, g.divisor = static_cast<float>(r.count * kw);
    g.y = y + from * ow + ox0, g.ow = ow;
    if (M == mode::max_indices) g.idx = idx + from * ow + ox0;
    run_s2<M>(kw, g);
  };
  for (int64_t oy = oy0; oy < a; ++oy) run(oy, oy + 1, 0);
  if (a < b) run(a, b, sh * w);
  for (int64_t oy = b; oy < oy1; ++oy) run(oy, oy + 1, 0);
}

/// Whether every output row of every plane is one run: windows unclipped vertically (no top
/// padding, kernel span within the stride), planes exactly oh * sh rows tall (so the next
/// plane continues the stride), and the vector kernel taking whole rows.
inline bool pool_planes_uniform(const pool_problem& pr, int64_t lo, int64_t hi) {
  return hi > lo && lo == 0 && hi == pr.ow && pr.ph == 0 && pr.h == pr.oh * pr.sh &&
         (pr.kh - 1) * pr.dh + 1 <= pr.sh;
}

/// Output rows [b, e) counted over all planes as one run (pool_planes_uniform geometry).
template <mode M>
void rows_uniform(const pool_problem& pr, const float* x, int64_t b, int64_t e, float* y,
                  int64_t* idx) {
  pool_s2_run g;
  g.p = x + b * pr.sh * pr.w, g.n = e - b, g.row_step = pr.sh * pr.w, g.rstride = pr.dh * pr.w;
  g.rows = pr.kh, g.first_row = b % pr.oh, g.base = g.first_row * pr.sh * pr.w;
  g.plane_rows = pr.oh, g.plane_elems = pr.h * pr.w;
  g.nout = pr.ow, g.divisor = static_cast<float>(pr.kh * pr.kw);
  g.y = y + b * pr.ow, g.ow = pr.ow;
  if (M == mode::max_indices) g.idx = idx + b * pr.ow;
  run_s2<M>(pr.kw, g);
}

}  // namespace pool_simd
#endif

/// Outputs [lo, hi) of every row whose windows are 2 or 3 wide with stride 2 and dilation 1 and
/// lie inside the plane's columns: the range the vector row kernels may take. Empty ({0, 0}) when
/// the geometry or T does not qualify.
template <class T>
std::pair<int64_t, int64_t> pool_vector_columns([[maybe_unused]] const pool_problem& pr,
                                                [[maybe_unused]] bool with_indices) {
#if TESSERA_DETAIL_POOL_AVX512 || TESSERA_DETAIL_POOL_AVX2
  if constexpr (std::is_same_v<T, float>) {
    const bool fits = !with_indices || pr.h * pr.w <= std::numeric_limits<int32_t>::max();
    if (pr.sw == 2 && pr.dw == 1 && (pr.kw == 2 || pr.kw == 3) && fits &&
        pr.w - pr.kw + pr.pw >= 0) {
      const int64_t lo = std::min((pr.pw + 1) / 2, pr.ow);
      const int64_t hi = std::min((pr.w - pr.kw + pr.pw) / 2 + 1, pr.ow);
      if (hi - lo >= pool_simd::min_outputs) return {lo, hi};
    }
  }
#endif
  return {0, 0};
}

/// Runs body(plane, oy0, oy1, scratch) over every (plane, output row) pair, split among threads;
/// consecutive rows of one plane go to one call. Scratch is default-constructed once per thread.
template <class Scratch, class Body>
void pool_for_rows(const pool_problem& pr, int64_t cost_per_row, const Body& body) {
  parallel_for(pr.planes * pr.oh, cost_per_row, [&](int64_t b, int64_t e) {
    Scratch scratch{};
    int64_t p = b / pr.oh, oy = b % pr.oh;
    for (int64_t i = b; i < e; ++p, oy = 0) {
      const int64_t n = std::min(e - i, pr.oh - oy);
      body(p, oy, oy + n, scratch);
      i += n;
    }
  });
}

template <class T>
void pool_max_forward(const pool_problem& pr, const T* x, T* y, int64_t* indices) {
  using A = pool_max_t<T>;
  const auto rw = pool_windows(pr.oh, pr.h, pr.kh, pr.sh, pr.ph, pr.dh, true);
  const auto cw = pool_windows(pr.ow, pr.w, pr.kw, pr.sw, pr.pw, pr.dw, true);
  const int64_t hw = pr.h * pr.w, ohw = pr.oh * pr.ow;
  const auto vcols = pool_vector_columns<T>(pr, indices != nullptr);
  [[maybe_unused]] const int64_t vlo = vcols.first, vhi = vcols.second;
  const int64_t cost = pr.kh * (pr.w + pr.ow * pr.kw);
#if TESSERA_DETAIL_POOL_AVX512 || TESSERA_DETAIL_POOL_AVX2
  if constexpr (std::is_same_v<T, float>) {
    if (pool_simd::pool_planes_uniform(pr, vlo,
                                       vhi)) {  // e.g. 2x2/2 on even sizes: one run per thread
      parallel_for(pr.planes * pr.oh, cost, [&](int64_t b, int64_t e) {
        using pool_simd::mode;
        if (indices)
          pool_simd::rows_uniform<mode::max_indices>(pr, x, b, e, y, indices);
        else
          pool_simd::rows_uniform<mode::max_values>(pr, x, b, e, y, nullptr);
      });
      return;
    }
  }
#endif
  pool_for_rows<std::vector<A>>(
      pr, cost, [&](int64_t p, int64_t oy0, int64_t oy1, std::vector<A>& buf) {
        const T* xp = x + p * hw;
        T* yp = y + p * ohw;
        int64_t* ip = indices ? indices + p * ohw : nullptr;
        int64_t lo = 0, hi = 0;  // the columns a vector kernel did
#if TESSERA_DETAIL_POOL_AVX512 || TESSERA_DETAIL_POOL_AVX2
        if constexpr (std::is_same_v<T, float>) {
          using pool_simd::mode;
          if (vhi > vlo) {
            if (ip)
              pool_simd::rows_s2<mode::max_indices>(pr.kw, xp, pr.w, rw.data(), oy0, oy1, pr.kh,
                                                    pr.sh, pr.dh, pr.pw, vlo, vhi, pr.ow, yp, ip);
            else
              pool_simd::rows_s2<mode::max_values>(pr.kw, xp, pr.w, rw.data(), oy0, oy1, pr.kh,
                                                   pr.sh, pr.dh, pr.pw, vlo, vhi, pr.ow, yp,
                                                   nullptr);
            lo = vlo, hi = vhi;
          }
        }
#endif
        if (hi > lo && lo == 0 && hi == pr.ow) return;  // whole rows done
        for (int64_t oy = oy0; oy < oy1; ++oy) {
          const pool_window& r = rw[static_cast<size_t>(oy)];
          T* yr = yp + oy * pr.ow;
          int64_t* ir = ip ? ip + oy * pr.ow : nullptr;
          if (hi > lo || ir) {  // the rest one window at a time
            for (int64_t ox = lo > 0 ? 0 : hi; ox < pr.ow; ox = ox + 1 == lo ? hi : ox + 1)
              pool_max_at(xp, pr.w, r, cw[static_cast<size_t>(ox)], pr.dh, pr.dw, yr + ox,
                          ir ? ir + ox : nullptr);
          } else {
            buf.resize(static_cast<size_t>(pr.w));
            pool_reduce_rows<true>(xp, pr.w, r.begin, r.end, pr.dh, buf.data());
            pool_reduce_cols<true>(buf.data(), cw.data(), pr.dw, r.count, 0, pr.ow, yr);
          }
        }
      });
}

/// Average pooling (and adaptive average pooling, with its windows) forward. `regular`: the
/// windows are kernel/stride windows, which the vector kernel may take.
template <class T>
void pool_avg_forward(const pool_problem& pr, const T* x, T* y, const std::vector<pool_window>& rw,
                      const std::vector<pool_window>& cw, bool regular) {
  using A = pool_sum_t<T>;
  const int64_t hw = pr.h * pr.w, ohw = pr.oh * pr.ow;
  const auto vcols =
      regular ? pool_vector_columns<T>(pr, false) : std::pair<int64_t, int64_t>{0, 0};
  [[maybe_unused]] const int64_t vlo = vcols.first, vhi = vcols.second;
  int64_t rows = 1, cols = 1;  // widest window along each axis, for the cost estimate
  for (const pool_window& r : rw) rows = std::max(rows, r.end - r.begin);
  for (const pool_window& c : cw) cols = std::max(cols, c.end - c.begin);
#if TESSERA_DETAIL_POOL_AVX512 || TESSERA_DETAIL_POOL_AVX2
  if constexpr (std::is_same_v<T, float>) {
    if (pool_simd::pool_planes_uniform(pr, vlo, vhi)) {
      parallel_for(pr.planes * pr.oh, rows * pr.w + pr.ow * cols, [&](int64_t b, int64_t e) {
        pool_simd::rows_uniform<pool_simd::mode::average>(pr, x, b, e, y, nullptr);
      });
      return;
    }
  }
#endif
  pool_for_rows<std::vector<A>>(
      pr, rows * pr.w + pr.ow * cols,
      [&](int64_t p, int64_t oy0, int64_t oy1, std::vector<A>& buf) {
        const T* xp = x + p * hw;
        T* yp = y + p * ohw;
        int64_t lo = 0, hi = 0;
#if TESSERA_DETAIL_POOL_AVX512 || TESSERA_DETAIL_POOL_AVX2
        if constexpr (std::is_same_v<T, float>) {
          if (vhi > vlo) {
            pool_simd::rows_s2<pool_simd::mode::average>(pr.kw, xp, pr.w, rw.data(), oy0, oy1,
                                                         pr.kh, pr.sh, 1, pr.pw, vlo, vhi, pr.ow,
                                                         yp, nullptr);
            lo = vlo, hi = vhi;
          }
        }
#endif
        if (hi > lo && lo == 0 && hi == pr.ow) return;  // whole rows done
        for (int64_t oy = oy0; oy < oy1; ++oy) {
          const pool_window& r = rw[static_cast<size_t>(oy)];
          T* yr = yp + oy * pr.ow;
          if (hi > lo) {
            for (int64_t ox = lo > 0 ? 0 : hi; ox < pr.ow; ox = ox + 1 == lo ? hi : ox + 1)
              pool_avg_at(xp, pr.w, r, cw[static_cast<size_t>(ox)], yr + ox);
          } else {
            buf.resize(static_cast<size_t>(pr.w));
            pool_reduce_rows<false>(xp, pr.w, r.begin, r.end, 1, buf.data());
            pool_reduce_cols<false>(buf.data(), cw.data(), 1, r.count, 0, pr.ow, yr);
          }
        }
      });
}

/// Sum of n contiguous elements in A: four vector accumulators (eight scalar ones without SIMD),
/// combined pairwise, then the tail. Depends only on n, never on threads.
template <class T, class A>
A pool_plane_sum(const T* p, int64_t n) {
  int64_t i = 0;
  A s = 0;
  if constexpr (std::is_same_v<T, A> && simd::available<A>) {
    using V = simd::vec<A>;
    constexpr int L = V::width;
    V a0 = V::broadcast(0), a1 = a0, a2 = a0, a3 = a0;
    for (; i + 4 * L <= n; i += 4 * L) {
      a0 += V::load(p + i), a1 += V::load(p + i + L);
      a2 += V::load(p + i + 2 * L), a3 += V::load(p + i + 3 * L);
    }
    for (; i + L <= n; i += L) a0 += V::load(p + i);
    alignas(64) A lanes[L];
    ((a0 + a1) + (a2 + a3)).store(lanes);
    for (int half = L / 2; half >= 1; half /= 2)  // a tree: short dependency chains per plane
      for (int l = 0; l < half; ++l) lanes[l] += lanes[l + half];
    s = lanes[0];
  } else {
    A acc[8] = {};
    for (; i + 8 <= n; i += 8)
      for (int j = 0; j < 8; ++j) acc[j] += static_cast<A>(p[i + j]);
    s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  }
  for (; i < n; ++i) s += static_cast<A>(p[i]);
  return s;
}

#if TESSERA_DETAIL_POOL_AVX512
/// Sum of n contiguous floats: four 16-lane accumulators, a masked tail, one horizontal add.
/// Small planes (7 x 7 in ResNet's head) cost a few instructions each this way.
inline float pool_plane_sum_f32(const float* p, int64_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    a0 = _mm512_add_ps(a0, _mm512_loadu_ps(p + i));
    a1 = _mm512_add_ps(a1, _mm512_loadu_ps(p + i + 16));
    a2 = _mm512_add_ps(a2, _mm512_loadu_ps(p + i + 32));
    a3 = _mm512_add_ps(a3, _mm512_loadu_ps(p + i + 48));
  }
  for (; i + 16 <= n; i += 16) a0 = _mm512_add_ps(a0, _mm512_loadu_ps(p + i));
  if (i < n) a1 = _mm512_add_ps(a1, _mm512_maskz_loadu_ps(pool_simd::lanes(n - i), p + i));
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

/// Lane l of the result is the sum of lane l over the 16-float chunks of the hw floats at q (the
/// last chunk masked); a plane's sum is the sum of these 16 lanes.
inline __m512 pool_plane_lanes(const float* q, int64_t hw) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0;
  int64_t i = 0;
  for (; i + 32 <= hw; i += 32)
    a0 = _mm512_add_ps(a0, _mm512_loadu_ps(q + i)),
    a1 = _mm512_add_ps(a1, _mm512_loadu_ps(q + i + 16));
  if (i + 16 <= hw) a0 = _mm512_add_ps(a0, _mm512_loadu_ps(q + i)), i += 16;
  if (i < hw) a1 = _mm512_add_ps(a1, _mm512_maskz_loadu_ps(pool_simd::lanes(hw - i), q + i));
  return _mm512_add_ps(a0, a1);
}

/// The lane sums of 16 vectors at once (a transposing add tree, about 3 instructions per
/// vector instead of a horizontal reduction each): result lane p is the sum of v[p]'s lanes,
/// always added in the same order, whatever the other 15 vectors.
inline __m512 pool_sum16(const __m512* v) {
  __m512 u[8], w[4], x[2];
  for (int i = 0; i < 8; ++i)
    u[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44),
                         _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xEE));
  for (int i = 0; i < 4; ++i)
    w[i] = _mm512_add_ps(_mm512_shuffle_f32x4(u[2 * i], u[2 * i + 1], 0x88),
                         _mm512_shuffle_f32x4(u[2 * i], u[2 * i + 1], 0xDD));
  for (int i = 0; i < 2; ++i)
    x[i] = _mm512_add_ps(_mm512_shuffle_ps(w[2 * i], w[2 * i + 1], 0x44),
                         _mm512_shuffle_ps(w[2 * i], w[2 * i + 1], 0xEE));
  const __m512 t =
      _mm512_add_ps(_mm512_shuffle_ps(x[0], x[1], 0x88), _mm512_shuffle_ps(x[0], x[1], 0xDD));
  // The tree leaves the sums 4 x 4 transposed.
  return _mm512_permutexvar_ps(
      _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), t);
}

/// Means of planes [b, e) of hw floats each, 16 planes per step (for small planes, where a
/// horizontal reduction per plane would dominate).
inline void pool_global_avg_small_f32(const float* x, int64_t hw, int64_t b, int64_t e, float* y) {
  const __m512 n = _mm512_set1_ps(static_cast<float>(hw));
  for (int64_t p = b; p < e; p += 16) {
    const int64_t m = std::min<int64_t>(16, e - p);
    __m512 v[16];
    for (int64_t j = 0; j < 16; ++j)
      v[j] = j < m ? pool_plane_lanes(x + (p + j) * hw, hw) : _mm512_setzero_ps();
    _mm512_mask_storeu_ps(y + p, pool_simd::lanes(m), _mm512_div_ps(pool_sum16(v), n));
  }
}
#endif

template <class T>
void pool_global_avg(const pool_problem& pr, const T* x, T* y) {
  using A = pool_sum_t<T>;
  const int64_t hw = pr.h * pr.w;
  parallel_for(pr.planes, hw, [&](int64_t b, int64_t e) {
#if TESSERA_DETAIL_POOL_AVX512
    if constexpr (std::is_same_v<T, float>) {
      if (hw <= 256) return pool_global_avg_small_f32(x, hw, b, e, y);
    }
#endif
    for (int64_t p = b; p < e; ++p) {
      A sum;
#if TESSERA_DETAIL_POOL_AVX512
      if constexpr (std::is_same_v<T, float>)  // masked tail instead of scalar ones
        sum = pool_plane_sum_f32(x + p * hw, hw);
      else
#endif
        sum = pool_plane_sum<T, A>(x + p * hw, hw);
      y[p] = static_cast<T>(sum / static_cast<A>(hw));
    }
  });
}

/// Accumulation target of one input plane in a backward pass: gx's plane itself when T is the
/// accumulation type, otherwise a float scratch plane rounded into gx once at the end.
template <class T, class A>
struct pool_grad_plane {
  std::vector<A> scratch;
  explicit pool_grad_plane(int64_t hw) {
    if constexpr (!std::is_same_v<T, A>) scratch.resize(static_cast<size_t>(hw));
  }
  A* begin(T* gx_plane, int64_t hw) {
    A* acc;
    if constexpr (std::is_same_v<T, A>)
      acc = gx_plane;
    else
      acc = scratch.data();
    std::memset(static_cast<void*>(acc), 0, static_cast<size_t>(hw) * sizeof(A));
    return acc;
  }
  void finish(T* gx_plane, int64_t hw) {
    if constexpr (!std::is_same_v<T, A>)
      for (int64_t i = 0; i < hw; ++i) gx_plane[i] = static_cast<T>(scratch[i]);
  }
};

#if TESSERA_DETAIL_POOL_AVX512
/// Max pooling backward of one plane when every index lies in the 2x2 stride-2 window of its
/// output (what 2x2/2 pooling produces; oh = h / 2, ow = w / 2): each window's four gradient
/// elements are written directly, g where the index points and 0 elsewhere, 16 windows at a time,
/// with no zero fill and no scatter. Rows and columns outside every window are zeroed. Returns
/// false, having written an unspecified part of the plane, as soon as an index lies elsewhere
/// (or out of range): the caller then redoes the plane the general way.
inline bool pool_max_backward_2x2(const pool_problem& pr, const float* g, const int64_t* id,
                                  float* gx) {
  const int64_t w = pr.w;
  const __m512i even_idx =
      _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i ilo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i ihi = _mm512_add_epi32(ilo, _mm512_set1_epi32(8));
  const __m512i one = _mm512_set1_epi32(1), wv = _mm512_set1_epi32(static_cast<int32_t>(w));
  for (int64_t oy = 0; oy < pr.oh; ++oy) {
    float* r0 = gx + 2 * oy * w;
    float* r1 = r0 + w;
    for (int64_t ox = 0; ox < pr.ow; ox += 16) {
      const int64_t n = std::min<int64_t>(16, pr.ow - ox);
      const __mmask16 m = pool_simd::lanes(n);
      const int64_t* ip = id + oy * pr.ow + ox;
      // Saturating narrowing: a negative or >= 2^32 index becomes 0xffffffff, never a window's.
      const __m512i idx = _mm512_inserti64x4(
          _mm512_castsi256_si512(
              _mm512_cvtusepi64_epi32(_mm512_maskz_loadu_epi64(static_cast<__mmask8>(m), ip))),
          _mm512_cvtusepi64_epi32(_mm512_maskz_loadu_epi64(static_cast<__mmask8>(m >> 8), ip + 8)),
          1);
      const __m512i c0 =
          _mm512_add_epi32(_mm512_set1_epi32(static_cast<int32_t>(2 * oy * w + 2 * ox)), even_idx);
      const __m512i c2 = _mm512_add_epi32(c0, wv);
      const __mmask16 k0 = _mm512_cmpeq_epi32_mask(idx, c0),
                      k1 = _mm512_cmpeq_epi32_mask(idx, _mm512_add_epi32(c0, one)),
                      k2 = _mm512_cmpeq_epi32_mask(idx, c2),
                      k3 = _mm512_cmpeq_epi32_mask(idx, _mm512_add_epi32(c2, one));
      if (static_cast<__mmask16>(k0 | k1 | k2 | k3) != m) return false;
      const __m512 gv = _mm512_maskz_loadu_ps(m, g + oy * pr.ow + ox);
      const __m512 v0 = _mm512_maskz_mov_ps(k0, gv), v1 = _mm512_maskz_mov_ps(k1, gv);
      const __m512 v2 = _mm512_maskz_mov_ps(k2, gv), v3 = _mm512_maskz_mov_ps(k3, gv);
      const __mmask16 s0 = pool_simd::lanes(2 * n), s1 = pool_simd::lanes(2 * n - 16);
      _mm512_mask_storeu_ps(r0 + 2 * ox, s0, _mm512_permutex2var_ps(v0, ilo, v1));
      _mm512_mask_storeu_ps(r0 + 2 * ox + 16, s1, _mm512_permutex2var_ps(v0, ihi, v1));
      _mm512_mask_storeu_ps(r1 + 2 * ox, s0, _mm512_permutex2var_ps(v2, ilo, v3));
      _mm512_mask_storeu_ps(r1 + 2 * ox + 16, s1, _mm512_permutex2var_ps(v2, ihi, v3));
    }
    if (w > 2 * pr.ow) r0[w - 1] = 0.f, r1[w - 1] = 0.f;  // odd width: the last column
  }
  if (pr.h > 2 * pr.oh)
    std::memset(static_cast<void*>(gx + (pr.h - 1) * w), 0, static_cast<size_t>(w) * sizeof(float));
  return true;
}
#endif

template <class T>
bool pool_max_backward(const pool_problem& pr, const T* gy, const int64_t* indices, T* gx) {
  using A = pool_sum_t<T>;
  const int64_t hw = pr.h * pr.w, ohw = pr.oh * pr.ow;
  [[maybe_unused]] const bool windows_2x2 = pr.oh == pr.h / 2 && pr.ow == pr.w / 2 && pr.ow > 0 &&
                                            hw <= std::numeric_limits<int32_t>::max();
  std::atomic<bool> ok{true};
  parallel_for(pr.planes, hw + 2 * ohw, [&](int64_t b, int64_t e) {
    pool_grad_plane<T, A> plane(hw);
    bool good = true;
    for (int64_t p = b; p < e; ++p) {
#if TESSERA_DETAIL_POOL_AVX512
      if constexpr (std::is_same_v<T, float>)
        if (windows_2x2 && pool_max_backward_2x2(pr, gy + p * ohw, indices + p * ohw, gx + p * hw))
          continue;
#endif
      A* acc = plane.begin(gx + p * hw, hw);
      const T* g = gy + p * ohw;
      const int64_t* id = indices + p * ohw;
      for (int64_t k = 0; k < ohw; ++k) {
        const int64_t i = id[k];
        // One unsigned compare rejects negative and too-large indices alike.
        if (static_cast<uint64_t>(i) < static_cast<uint64_t>(hw))
          acc[i] += static_cast<A>(g[k]);
        else
          good = false;
      }
      plane.finish(gx + p * hw, hw);
    }
    if (!good) ok.store(false, std::memory_order_relaxed);
  });
  return ok.load(std::memory_order_relaxed);
}

/// Average (and adaptive average) pooling backward: each output's gradient divided by its
/// divisor is spread over its window. Per output row, the spread along the columns is formed once
/// in a row buffer, then added to every input row of the window.
template <class T>
void pool_avg_backward(const pool_problem& pr, const T* gy, T* gx,
                       const std::vector<pool_window>& rw, const std::vector<pool_window>& cw) {
  using A = pool_sum_t<T>;
  const int64_t hw = pr.h * pr.w, ohw = pr.oh * pr.ow;
  parallel_for(pr.planes, hw + ohw * (pr.kw + 1), [&](int64_t b, int64_t e) {
    pool_grad_plane<T, A> plane(hw);
    std::vector<A> row(static_cast<size_t>(pr.w));
    for (int64_t p = b; p < e; ++p) {
      A* acc = plane.begin(gx + p * hw, hw);
      const T* g = gy + p * ohw;
      for (int64_t oy = 0; oy < pr.oh; ++oy) {
        const pool_window& r = rw[static_cast<size_t>(oy)];
        std::fill(row.begin(), row.end(), A(0));
        for (int64_t ox = 0; ox < pr.ow; ++ox) {
          const pool_window& c = cw[static_cast<size_t>(ox)];
          const A v = static_cast<A>(g[oy * pr.ow + ox]) / static_cast<A>(r.count * c.count);
          for (int64_t col = c.begin; col < c.end; ++col) row[col] += v;
        }
        for (int64_t in = r.begin; in < r.end; ++in)
          pool_combine<false>(acc + in * pr.w, row.data(), acc + in * pr.w, pr.w);
      }
      plane.finish(gx + p * hw, hw);
    }
  });
}

}  // namespace detail

namespace backend {

/// The CPU pooling kernels. Every entry point takes contiguous NCHW planes described by
/// detail::pool_problem (whose contract the ops layer has checked) and never throws.
struct cpu_pool {
  /// y = the maximum of each window (NaN when the window holds a NaN). When indices is not null
  /// it receives, per output, the flat index row * w + col within the input plane of the first
  /// maximum in row-major window order (the last NaN if any), as PyTorch.
  template <class T>
  static void max_forward(const detail::pool_problem& pr, const T* x, T* y, int64_t* indices) {
    detail::pool_max_forward(pr, x, y, indices);
  }
  /// y = the sum of each window / its divisor (pool_problem::count_include_pad).
  template <class T>
  static void avg_forward(const detail::pool_problem& pr, const T* x, T* y) {
    detail::pool_avg_forward(
        pr, x, y, detail::pool_windows(pr.oh, pr.h, pr.kh, pr.sh, pr.ph, 1, pr.count_include_pad),
        detail::pool_windows(pr.ow, pr.w, pr.kw, pr.sw, pr.pw, 1, pr.count_include_pad), true);
  }
  /// Adaptive average pooling from [h, w] to [oh, ow] planes (adaptive_window_of); 1x1 output is
  /// a plane sum.
  template <class T>
  static void adaptive_avg_forward(const detail::pool_problem& pr, const T* x, T* y) {
    if (pr.oh == 1 && pr.ow == 1) return detail::pool_global_avg(pr, x, y);
    detail::pool_avg_forward(pr, x, y, detail::adaptive_windows(pr.oh, pr.h),
                             detail::adaptive_windows(pr.ow, pr.w), false);
  }
  /// gx = 0, then gx[plane][indices[k]] += gy[k] for every output k of each plane (overlapping
  /// windows accumulate). Indices outside [0, h * w) are skipped and make the result false.
  template <class T>
  [[nodiscard]] static bool max_backward(const detail::pool_problem& pr, const T* gy,
                                         const int64_t* indices, T* gx) {
    return detail::pool_max_backward(pr, gy, indices, gx);
  }
  /// gx = the gradient of avg_forward: each gy spread evenly (/ divisor) over its window.
  template <class T>
  static void avg_backward(const detail::pool_problem& pr, const T* gy, T* gx) {
    detail::pool_avg_backward(
        pr, gy, gx, detail::pool_windows(pr.oh, pr.h, pr.kh, pr.sh, pr.ph, 1, pr.count_include_pad),
        detail::pool_windows(pr.ow, pr.w, pr.kw, pr.sw, pr.pw, 1, pr.count_include_pad));
  }
  /// gx = the gradient of adaptive_avg_forward.
  template <class T>
  static void adaptive_avg_backward(const detail::pool_problem& pr, const T* gy, T* gx) {
    detail::pool_avg_backward(pr, gy, gx, detail::adaptive_windows(pr.oh, pr.h),
                              detail::adaptive_windows(pr.ow, pr.w));
  }
};

}  // namespace backend
TESSERA_END_NAMESPACE

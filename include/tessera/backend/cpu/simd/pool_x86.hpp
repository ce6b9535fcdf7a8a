// tessera/backend/cpu/simd/pool_x86.hpp - the x86 vector code of the CPU pooling kernels
// (pool.hpp): direct stride-2 windows (AVX-512, else AVX2 + FMA), global average pooling of
// small planes and the 2x2/2 max backward (AVX-512). What each computes is described in
// pool.hpp; the code here is the instruction-set-specific part, kept in the SIMD layer.
// Defines TESSERA_DETAIL_POOL_AVX512 and TESSERA_DETAIL_POOL_AVX2 (0 or 1) for pool.hpp.
// Part of a kernel pass: included by pool.hpp once per instruction set, no include guard.

#include <algorithm>
#include <cstdint>
#include <limits>

#include "../../../kernel/pool_problem.hpp"
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

}  // namespace detail
TESSERA_END_NAMESPACE

// tessera/backend/cpu/simd/short_copy.hpp - copies and zero fills of short runs (the 14 to 56
// elements of an image row in small CNNs) as whole or masked vectors, for the lowering
// (im2col.hpp) and the padded rows of the direct kernels (direct.hpp).
// Part of a kernel pass: included by isa_pass.hpp once per instruction set, no include guard.

#include <algorithm>
#include <cstdint>
#include <type_traits>

#if defined(TESSERA_ISA_AVX2)
#include <immintrin.h>
#endif

TESSERA_BEGIN_NAMESPACE
namespace detail {

// Runs of an im2col row are short (a panel is 16-32 pixels): a memcpy/memset call per run costs
// more than the copy (measured: a third of a 3x3 forward). GCC turns plain copy loops back into
// those calls; this keeps them as loops.
#if defined(__GNUC__) && !defined(__clang__)
#define TESSERA_DETAIL_KEEP_LOOPS __attribute__((optimize("no-tree-loop-distribute-patterns")))
#else
#define TESSERA_DETAIL_KEEP_LOOPS
#endif

#if defined(TESSERA_ISA_AVX2)
#define TESSERA_DETAIL_MASKED_TAILS 1
#if defined(TESSERA_ISA_AVX512)
/// The lowest n of 16 lanes (none for n <= 0, all for n >= 16).
TESSERA_ALWAYS_INLINE __mmask16 low_mask16(int64_t n) {
  return n <= 0    ? __mmask16{0}
         : n >= 16 ? __mmask16{0xffff}
                   : static_cast<__mmask16>((1u << n) - 1);
}
#else
/// The lowest n of 8 lanes as an AVX2 mask (none for n <= 0, all for n >= 8).
TESSERA_ALWAYS_INLINE __m256i low_mask8(int64_t n) {
  const int c = static_cast<int>(std::clamp<int64_t>(n, 0, 8));
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(c), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
#endif
/// The last n < 16 (AVX-512) or n < 8 (AVX2) floats of a row, as one masked load and store:
/// a 14-pixel row is then two instructions instead of fourteen scalar copies.
TESSERA_ALWAYS_INLINE void copy_float_tail(float* dst, const float* src, int64_t n) {
#if defined(TESSERA_ISA_AVX512)
  const __mmask16 m = low_mask16(n);
  _mm512_mask_storeu_ps(dst, m, src ? _mm512_maskz_loadu_ps(m, src) : _mm512_setzero_ps());
#else
  const __m256i m = low_mask8(n);
  _mm256_maskstore_ps(dst, m, src ? _mm256_maskload_ps(src, m) : _mm256_setzero_ps());
#endif
}

inline constexpr int float_lanes =
#if defined(TESSERA_ISA_AVX512)
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
#if defined(TESSERA_ISA_AVX512)
    if (src + i + float_lanes <= src_limit)
      _mm512_storeu_ps(dst + i, _mm512_loadu_ps(src + i));
    else
      _mm512_storeu_ps(dst + i, _mm512_maskz_loadu_ps(low_mask16(c), src + i));
#else
    if (src + i + float_lanes <= src_limit)
      _mm256_storeu_ps(dst + i, _mm256_loadu_ps(src + i));
    else
      _mm256_storeu_ps(dst + i, _mm256_maskload_ps(src + i, low_mask8(c)));
#endif
  }
}
/// dst[i] = src[2 i] for i in [0, n): two loads and a permute per vector instead of one scalar
/// copy per element (the stride-2 rows of a stride-2 convolution's padded input rows were 17% of
/// its forward pass). Reads src[0, 2 n - 1) only: the last vector's loads are masked.
TESSERA_ALWAYS_INLINE void copy_stride2_float(float* dst, const float* src, int64_t n) {
  for (int64_t i = 0; i < n; i += float_lanes) {
    const float* s = src + 2 * i;
    // Past the last vector, src[2 i + 2 * lanes - 1] is still inside the span read.
    const bool whole = i + float_lanes < n;
    const int64_t c = std::min<int64_t>(n - i, float_lanes), need = 2 * c - 1;
#if defined(TESSERA_ISA_AVX512)
    __m512 lo, hi;
    if (whole) {
      lo = _mm512_loadu_ps(s), hi = _mm512_loadu_ps(s + 16);
    } else {
      lo = _mm512_maskz_loadu_ps(low_mask16(need), s);
      hi = _mm512_maskz_loadu_ps(low_mask16(need - 16), s + 16);
    }
    const __m512i even =
        _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512 v = _mm512_permutex2var_ps(lo, even, hi);
    if (c == 16)
      _mm512_storeu_ps(dst + i, v);
    else
      _mm512_mask_storeu_ps(dst + i, low_mask16(c), v);
#else
    __m256 lo, hi;
    if (whole) {
      lo = _mm256_loadu_ps(s), hi = _mm256_loadu_ps(s + 8);
    } else {
      lo = _mm256_maskload_ps(s, low_mask8(need));
      hi = _mm256_maskload_ps(s + 8, low_mask8(need - 8));
    }
    // [lo0 lo2 hi0 hi2 | lo4 lo6 hi4 hi6], then the 64-bit pairs reordered.
    const __m256 ev = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0));
    const __m256 v =
        _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(ev), _MM_SHUFFLE(3, 1, 2, 0)));
    if (c == 8)
      _mm256_storeu_ps(dst + i, v);
    else
      _mm256_maskstore_ps(dst + i, low_mask8(c), v);
#endif
  }
}

/// dst[2 i] += src[i] for i in [0, n): the strided scatter-add of a stride-2 col2im, as vectors
/// (src spread to the even lanes, the odd lanes adding zero). Touches dst[0, 2 n - 1) only: the
/// last vector's loads and stores are masked, so an element just past the run (another thread's,
/// at the end of an image) is neither read nor written.
TESSERA_ALWAYS_INLINE void add_stride2_float(float* dst, const float* src, int64_t n) {
  for (int64_t i = 0; i < n; i += float_lanes) {
    float* d = dst + 2 * i;
    const bool whole = i + float_lanes < n;
    const int64_t c = std::min<int64_t>(n - i, float_lanes), need = 2 * c - 1;
#if defined(TESSERA_ISA_AVX512)
    const __m512 v =
        c == 16 ? _mm512_loadu_ps(src + i) : _mm512_maskz_loadu_ps(low_mask16(c), src + i);
    const __m512i lo_idx = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    const __m512i hi_idx =
        _mm512_setr_epi32(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
    const __m512 lo = _mm512_maskz_permutexvar_ps(0x5555, lo_idx, v);
    const __m512 hi = _mm512_maskz_permutexvar_ps(0x5555, hi_idx, v);
    if (whole) {
      _mm512_storeu_ps(d, _mm512_add_ps(_mm512_loadu_ps(d), lo));
      _mm512_storeu_ps(d + 16, _mm512_add_ps(_mm512_loadu_ps(d + 16), hi));
    } else {
      const __mmask16 ml = low_mask16(need), mh = low_mask16(need - 16);
      _mm512_mask_storeu_ps(d, ml, _mm512_add_ps(_mm512_maskz_loadu_ps(ml, d), lo));
      _mm512_mask_storeu_ps(d + 16, mh, _mm512_add_ps(_mm512_maskz_loadu_ps(mh, d + 16), hi));
    }
#else
    const __m256 v = c == 8 ? _mm256_loadu_ps(src + i) : _mm256_maskload_ps(src + i, low_mask8(c));
    // [s0 0 s1 0 | s4 0 s5 0] and [s2 0 s3 0 | s6 0 s7 0], then the 128-bit halves regrouped.
    const __m256 ul = _mm256_unpacklo_ps(v, _mm256_setzero_ps());
    const __m256 uh = _mm256_unpackhi_ps(v, _mm256_setzero_ps());
    const __m256 lo = _mm256_permute2f128_ps(ul, uh, 0x20),
                 hi = _mm256_permute2f128_ps(ul, uh, 0x31);
    if (whole) {
      _mm256_storeu_ps(d, _mm256_add_ps(_mm256_loadu_ps(d), lo));
      _mm256_storeu_ps(d + 8, _mm256_add_ps(_mm256_loadu_ps(d + 8), hi));
    } else {
      const __m256i ml = low_mask8(need), mh = low_mask8(need - 8);
      _mm256_maskstore_ps(d, ml, _mm256_add_ps(_mm256_maskload_ps(d, ml), lo));
      _mm256_maskstore_ps(d + 8, mh, _mm256_add_ps(_mm256_maskload_ps(d + 8, mh), hi));
    }
#endif
  }
}

/// The two copies as ordinary functions, for tests: a pointer to an always-inline function
/// cannot be called once the compiler resolves it.
inline void copy_stride2_float_outlined(float* dst, const float* src, int64_t n) {
  copy_stride2_float(dst, src, n);
}
inline void add_stride2_float_outlined(float* dst, const float* src, int64_t n) {
  add_stride2_float(dst, src, n);
}

/// dst[0, n) = 0 with whole-vector stores, as copy_run_float.
TESSERA_ALWAYS_INLINE void zero_run_float(float* dst, int64_t n) {
  for (int64_t i = 0; i < n; i += float_lanes)
#if defined(TESSERA_ISA_AVX512)
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
#if defined(TESSERA_DETAIL_MASKED_TAILS)
    if constexpr (std::is_same_v<D, float>) {
      if (stride == 2) return copy_stride2_float(dst, src, n);
    }
#endif
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

}  // namespace detail
TESSERA_END_NAMESPACE

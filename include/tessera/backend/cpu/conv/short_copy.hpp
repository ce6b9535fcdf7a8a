// tessera/backend/cpu/conv/short_copy.hpp - copies and zero fills of short runs (the 14 to 56
// elements of an image row in small CNNs) as whole or masked vectors, for the lowering
// (im2col.hpp) and the padded rows of the direct kernels (direct.hpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "../gemm/pack.hpp"
#include "../simd/vec.hpp"

#if (defined(__AVX512F__) || defined(__AVX2__)) && !defined(TESSERA_SIMD_SCALAR) && \
    !defined(__CUDA_ARCH__)
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

}  // namespace detail
TESSERA_END_NAMESPACE

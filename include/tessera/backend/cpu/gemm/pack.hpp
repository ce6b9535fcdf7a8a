// tessera/backend/cpu/gemm/pack.hpp - packing of A and B blocks into the micro-kernels' layouts,
// converting the element type on the way (half/bfloat16/fp8 -> float, int8/uint8 -> the biased
// bytes of the dot-product instructions). Packing reads any strides, so transposed operands are
// never copied first.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "../../../core/bfloat16.hpp"
#include "../../../core/float8.hpp"
#include "../../../core/half.hpp"
#include "blocking.hpp"

#if defined(__F16C__)
#include <immintrin.h>
#endif

TESSERA_BEGIN_NAMESPACE
namespace detail {

/// The 256 values of an 8-bit float format, decoded once.
template <class F8>
const std::array<float, 256>& float8_table() {
  static const std::array<float, 256> t = [] {
    std::array<float, 256> v{};
    for (int i = 0; i < 256; ++i) v[i] = static_cast<float>(F8::from_bits(static_cast<uint8_t>(i)));
    return v;
  }();
  return t;
}

/// Converts one input element to the packed floating type P (exact: every input type used
/// here is representable in P, except double -> float which does not occur).
template <class P, class S>
TESSERA_ALWAYS_INLINE P pack_convert(S x, [[maybe_unused]] const float* f8) {
  if constexpr (std::is_same_v<S, P>)
    return x;
  else if constexpr (std::is_same_v<S, half>) {
#if defined(__F16C__)
    return static_cast<P>(_cvtsh_ss(x.bits));
#else
    return static_cast<P>(static_cast<float>(x));
#endif
  } else if constexpr (std::is_same_v<S, float8_e4m3> || std::is_same_v<S, float8_e5m2>)
    return static_cast<P>(f8[x.bits]);
  else if constexpr (is_low_precision_v<S>)
    return static_cast<P>(static_cast<float>(x));
  else
    return static_cast<P>(x);
}

template <class S>
const float* float8_table_for() {
  if constexpr (std::is_same_v<S, float8_e4m3> || std::is_same_v<S, float8_e5m2>)
    return float8_table<S>().data();
  else
    return nullptr;
}

/// Packs rows [0, mb) x k [0, kb) of a (element (i, p) at a[i * rs + p * cs]) into micro-panels
/// of MR rows: panel r holds rows r*MR.. as [p][MR], rows past mb zero-filled.
template <int MR, class P, class S>
void pack_a_fp(const S* a, int64_t rs, int64_t cs, int64_t mb, int64_t kb, P* dst) {
  const float* f8 = float8_table_for<S>();
  for (int64_t r0 = 0; r0 < mb; r0 += MR, dst += MR * kb) {
    const int rows = static_cast<int>(std::min<int64_t>(MR, mb - r0));
    const S* src = a + r0 * rs;
    if (cs == 1) {
      for (int i = 0; i < rows; ++i)
        for (int64_t p = 0; p < kb; ++p) dst[p * MR + i] = pack_convert<P>(src[i * rs + p], f8);
    } else {
      for (int64_t p = 0; p < kb; ++p)
        for (int i = 0; i < rows; ++i) dst[p * MR + i] = pack_convert<P>(src[i * rs + p * cs], f8);
    }
    if (rows < MR)
      for (int64_t p = 0; p < kb; ++p)
        for (int i = rows; i < MR; ++i) dst[p * MR + i] = P(0);
  }
}

/// Packs k [0, kb) x columns [0, nb) of b into micro-panels of NR columns, [p][NR] each, columns
/// past nb zero-filled.
template <int NR, class P, class S>
void pack_b_fp(const S* b, int64_t rs, int64_t cs, int64_t kb, int64_t nb, P* dst) {
  const float* f8 = float8_table_for<S>();
  for (int64_t c0 = 0; c0 < nb; c0 += NR, dst += NR * kb) {
    const int cols = static_cast<int>(std::min<int64_t>(NR, nb - c0));
    const S* src = b + c0 * cs;
    if constexpr (std::is_same_v<S, P> && simd::available<P>) {
      using V = simd::vec<P>;
      if (cs == 1 && cols == NR) {  // the common case: rows of B are contiguous, copy vectors
        for (int64_t p = 0; p < kb; ++p)
#pragma GCC unroll 4
          for (int j = 0; j < NR; j += V::width) V::load(src + p * rs + j).store(dst + p * NR + j);
        continue;
      }
    }
    if (cs == 1) {
      for (int64_t p = 0; p < kb; ++p) {
        const S* row = src + p * rs;
        P* out = dst + p * NR;
        for (int j = 0; j < cols; ++j) out[j] = pack_convert<P>(row[j], f8);
        for (int j = cols; j < NR; ++j) out[j] = P(0);
      }
    } else {
      for (int j = 0; j < cols; ++j)
        for (int64_t p = 0; p < kb; ++p) dst[p * NR + j] = pack_convert<P>(src[j * cs + p * rs], f8);
      if (cols < NR)
        for (int64_t p = 0; p < kb; ++p)
          for (int j = cols; j < NR; ++j) dst[p * NR + j] = P(0);
    }
  }
}

// ---------------------------------------------------------------- 8-bit integers
// The dot-product instructions multiply unsigned bytes of A by signed bytes of B, four k values
// per 32-bit lane. A signed A is biased to unsigned (a + 128), an unsigned B to signed (b - 128);
// the bias terms are removed exactly in the epilogue from the row sums of packed A and the column
// sums of packed B (int32 arithmetic: no saturation anywhere).

/// Zero point of the packed form: packed = x + bias_a (A) or x - bias_b (B).
template <class S>
inline constexpr int32_t int8_a_bias = std::is_same_v<S, int8_t> ? 128 : 0;
template <class S>
inline constexpr int32_t int8_b_bias = std::is_same_v<S, uint8_t> ? 128 : 0;

/// A panel: [k/4][MR][4] bytes, k padded to a multiple of 4 and rows to MR with zeros;
/// row_sums[i] = sum over k of the packed bytes of row i.
template <int MR, class S>
void pack_a_int8(const S* a, int64_t rs, int64_t cs, int64_t mb, int64_t kb, uint8_t* dst,
                 int32_t* row_sums) {
  const int64_t kbp = (kb + 3) / 4 * 4, kb4 = kb / 4 * 4;
  for (int64_t r0 = 0; r0 < mb; r0 += MR, dst += MR * kbp) {
    const int rows = static_cast<int>(std::min<int64_t>(MR, mb - r0));
    std::memset(dst, 0, static_cast<size_t>(MR * kbp));
    for (int i = 0; i < rows; ++i) {
      const S* src = a + (r0 + i) * rs;
      uint32_t sum = 0;
      int64_t p = 0;
      if (cs == 1) {
        // Four k values are four contiguous bytes: move them as one word, biased at once.
        constexpr uint32_t flip = int8_a_bias<S> ? 0x80808080u : 0u;
        for (; p < kb4; p += 4) {
          uint32_t w;
          std::memcpy(&w, src + p, 4);
          w ^= flip;
          std::memcpy(dst + ((p >> 2) * MR + i) * 4, &w, 4);
          const uint32_t pairs = (w & 0x00ff00ffu) + ((w >> 8) & 0x00ff00ffu);
          sum += (pairs & 0xffffu) + (pairs >> 16);
        }
      }
      for (; p < kb; ++p) {
        const auto u = static_cast<uint8_t>(static_cast<int32_t>(src[p * cs]) + int8_a_bias<S>);
        dst[((p >> 2) * MR + i) * 4 + (p & 3)] = u;
        sum += u;
      }
      row_sums[r0 + i] = static_cast<int32_t>(sum);
    }
  }
}

/// B panel: [k/4][NR][4] bytes, padded with zeros; col_sums[j] = sum of the packed bytes.
template <int NR, class S>
void pack_b_int8(const S* b, int64_t rs, int64_t cs, int64_t kb, int64_t nb, int8_t* dst,
                 int32_t* col_sums) {
  const int64_t kbp = (kb + 3) / 4 * 4;
  for (int64_t c0 = 0; c0 < nb; c0 += NR, dst += NR * kbp) {
    const int cols = static_cast<int>(std::min<int64_t>(NR, nb - c0));
    int32_t sums[NR] = {};
    for (int64_t p0 = 0; p0 < kb; p0 += 4) {
      const int q_end = static_cast<int>(std::min<int64_t>(4, kb - p0));
      int8_t* out = dst + (p0 >> 2) * NR * 4;
      for (int q = 0; q < 4; ++q) {
        const S* row = b + (p0 + q) * rs + c0 * cs;
        if (q < q_end && cols == NR && cs == 1) {
#pragma GCC unroll 4
          for (int j = 0; j < NR; ++j) {
            const auto v = static_cast<int8_t>(static_cast<int32_t>(row[j]) - int8_b_bias<S>);
            out[j * 4 + q] = v;
            sums[j] += v;
          }
        } else {
          for (int j = 0; j < NR; ++j) {
            int8_t v = 0;
            if (q < q_end && j < cols)
              v = static_cast<int8_t>(static_cast<int32_t>(row[j * cs]) - int8_b_bias<S>);
            out[j * 4 + q] = v;
            sums[j] += v;
          }
        }
      }
    }
    if (kb == 0) std::memset(dst, 0, static_cast<size_t>(NR * kbp));
    for (int j = 0; j < cols; ++j) col_sums[c0 + j] = sums[j];
  }
}

}  // namespace detail
TESSERA_END_NAMESPACE

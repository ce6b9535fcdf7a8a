// tessera/backend/cpu/gemm/pack.hpp - packing of A and B blocks into the micro-kernels' layouts,
// converting the element type on the way (half/bfloat16/fp8 -> float, int8/uint8 -> the biased
// bytes of the dot-product instructions). Packing reads any strides, so transposed operands are
// never copied first.
// Part of a kernel pass: included by isa_pass.hpp once per instruction set, no include guard.

#include <array>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "../../../core/bfloat16.hpp"
#include "../../../core/dtype.hpp"
#include "../../../core/float8.hpp"
#include "../../../core/half.hpp"
#include "../simd/pack.hpp"

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
    return static_cast<P>(half_to_float(x));
  } else if constexpr (is_float8_v<S>)
    return static_cast<P>(f8[x.bits]);
  else if constexpr (is_low_precision_v<S>)
    return static_cast<P>(static_cast<float>(x));
  else
    return static_cast<P>(x);
}

template <class S>
const float* float8_table_for() {
  if constexpr (is_float8_v<S>)
    return float8_table<S>().data();
  else
    return nullptr;
}

#if defined(TESSERA_DETAIL_HAVE_FLOAT8_VECTOR)
inline constexpr bool float8_vector = true;
#else
inline constexpr bool float8_vector = false;
#endif
/// Whether load_as_float converts S to P a vector at a time (simd/pack.hpp).
template <class P, class S>
inline constexpr bool vector_convertible_v = std::is_same_v<P, float> &&
                                             (std::is_same_v<S, half> ||
                                              std::is_same_v<S, bfloat16> ||
                                              (float8_vector && is_float8_v<S>));

/// Packs `lines` lines of length kb (the rows of an A block, the columns of a B block) into
/// panels of W lines, [p][W] each, lines past `lines` zero-filled. Element p of line l is at
/// src[l * ls + p * ks]: A packs with (ls, ks) = (row stride, column stride), B with (column
/// stride, row stride). Fast paths: lines contiguous (ls == 1, row-major B) are vector copies or
/// conversions; k contiguous (ks == 1, row-major A, transposed B) are 8 x 8 register transposes
/// (6 x 8 for AVX2's 6-row panels of A).
template <int W, class P, class S>
void pack_panels(const S* src, int64_t ls, int64_t ks, int64_t lines, int64_t kb, P* dst) {
  const float* f8 = float8_table_for<S>();
  for (int64_t l0 = 0; l0 < lines; l0 += W, src += W * ls, dst += W * kb) {
    const int count = static_cast<int>(std::min<int64_t>(W, lines - l0));
    if constexpr ((std::is_same_v<S, P> || vector_convertible_v<P, S>)&&simd::available<P>) {
      using V = simd::vec<P>;
      if constexpr (W % V::width == 0) {
        if (ls == 1 && count == W) {
          for (int64_t p = 0; p < kb; ++p) {
            TESSERA_UNROLL(4)
            for (int j = 0; j < W; j += V::width) {
              if constexpr (std::is_same_v<S, P>)
                V::load(src + p * ks + j).store(dst + p * W + j);
              else
                load_as_float(src + p * ks + j).store(dst + p * W + j);
            }
          }
          continue;
        }
      }
    }
    int l = 0;  // lines done by the transposes
#if defined(TESSERA_DETAIL_HAVE_TRANSPOSE_8X8)
    if constexpr (std::is_same_v<S, float> && std::is_same_v<P, float> && W % 8 == 0) {
      if (ks == 1) {
        const int64_t kb8 = kb / 8 * 8;
        for (; l + 8 <= count; l += 8) {
          for (int64_t p = 0; p < kb8; p += 8)
            transpose_8x8(src + l * ls + p, ls, dst + p * W + l, W);
          for (int64_t p = kb8; p < kb; ++p)
            for (int j = l; j < l + 8; ++j) dst[p * W + j] = src[j * ls + p];
        }
      }
    }
    // AVX2's 6-row A panels, 8 k at a time (a value at a time, this packing took 14% of a
    // 4096 x 1536 x 384 product).
    if constexpr (std::is_same_v<S, float> && std::is_same_v<P, float> && W == 6) {
      if (ks == 1 && count == 6) {
        const int64_t kb8 = kb / 8 * 8;
        for (int64_t p = 0; p < kb8; p += 8) transpose_6x8(src + p, ls, dst + p * 6);
        for (int64_t p = kb8; p < kb; ++p)
          for (int j = 0; j < 6; ++j) dst[p * 6 + j] = src[j * ls + p];
        l = 6;
      }
    }
#endif
    if (ks == 1) {  // read along k
      for (int j = l; j < count; ++j)
        for (int64_t p = 0; p < kb; ++p) dst[p * W + j] = pack_convert<P>(src[j * ls + p], f8);
    } else {  // read across lines, one k at a time
      for (int64_t p = 0; p < kb; ++p)
        for (int j = l; j < count; ++j) dst[p * W + j] = pack_convert<P>(src[j * ls + p * ks], f8);
    }
    if (count < W)
      for (int64_t p = 0; p < kb; ++p)
        for (int j = count; j < W; ++j) dst[p * W + j] = P(0);
  }
}

/// Packs `lines` lines of bfloat16 values (addressed as in pack_panels) into panels of W lines
/// in pairs of k (gemm/kernel_bf16.hpp): word [q][l] of a panel holds element 2q of line l in its
/// low half and element 2q + 1 in its high half; ceil(kb / 2) words per line, padded with zeros
/// (lines past `lines`, the high half after an odd kb).
template <int W>
void pack_pairs(const bfloat16* src, int64_t ls, int64_t ks, int64_t lines, int64_t kb,
                uint32_t* dst) {
  const int64_t kp = (kb + 1) / 2, even = kb / 2 * 2;
  const auto word = [](const bfloat16& lo, const bfloat16& hi) {
    return uint32_t{lo.bits} | uint32_t{hi.bits} << 16;
  };
  for (int64_t l0 = 0; l0 < lines; l0 += W, src += W * ls, dst += W * kp) {
    const int count = static_cast<int>(std::min<int64_t>(W, lines - l0));
    if (ks == 1) {  // pairs adjacent in memory
      for (int j = 0; j < count; ++j) {
        const bfloat16* line = src + j * ls;
        for (int64_t p = 0; p < even; p += 2) dst[p / 2 * W + j] = word(line[p], line[p + 1]);
      }
    } else {  // two lines of k at a time, each read across
      for (int64_t p = 0; p < even; p += 2) {
        const bfloat16 *k0 = src + p * ks, *k1 = k0 + ks;
        uint32_t* out = dst + p / 2 * W;
        for (int j = 0; j < count; ++j) out[j] = word(k0[j * ls], k1[j * ls]);
      }
    }
    if (kb % 2) {
      uint32_t* out = dst + (kp - 1) * W;
      for (int j = 0; j < count; ++j) out[j] = src[j * ls + even * ks].bits;
    }
    if (count < W)
      for (int64_t q = 0; q < kp; ++q)
        for (int j = count; j < W; ++j) dst[q * W + j] = 0;
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

/// The narrow dot product's shift for A of type S (gemm/kernel_int8.hpp): packed bytes less it
/// must lie in [0, 127], i.e. int8 values in [-64, 63], uint8 values in [0, 127].
template <class S>
inline constexpr int32_t int8_a_narrow_shift = std::is_same_v<S, int8_t> ? 64 : 0;

/// Bits 7 of the bytes of w that are out of the narrow range (int8_a_narrow_shift): for int8 A
/// (bytes biased by 128) where bits 7 and 6 are equal, for uint8 A where bit 7 is set.
template <class S>
inline uint32_t int8_outside_narrow(uint32_t w) {
  if constexpr (std::is_same_v<S, int8_t>)
    return ~(w ^ (w << 1)) & 0x80808080u;
  else
    return w & 0x80808080u;
}

/// A panel: [k/4][MR][4] bytes, k padded to a multiple of 4 and rows to MR with zeros;
/// row_sums[i] = sum over k of the packed bytes of row i. Returns, with Check, whether every
/// value lies in A's narrow range (int8_a_narrow_shift); without, false.
template <int MR, bool Check, class S>
bool pack_a_int8(const S* a, int64_t rs, int64_t cs, int64_t mb, int64_t kb, uint8_t* dst,
                 int32_t* row_sums) {
  const int64_t kbp = (kb + 3) / 4 * 4, kb4 = kb / 4 * 4;
  uint32_t outside = 0;
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
          if constexpr (Check) outside |= int8_outside_narrow<S>(w);
          std::memcpy(dst + ((p >> 2) * MR + i) * 4, &w, 4);
          const uint32_t pairs = (w & 0x00ff00ffu) + ((w >> 8) & 0x00ff00ffu);
          sum += (pairs & 0xffffu) + (pairs >> 16);
        }
      }
      for (; p < kb; ++p) {
        const auto u = static_cast<uint8_t>(static_cast<int32_t>(src[p * cs]) + int8_a_bias<S>);
        if constexpr (Check) outside |= int8_outside_narrow<S>(u) & 0x80u;  // this byte only
        dst[((p >> 2) * MR + i) * 4 + (p & 3)] = u;
        sum += u;
      }
      row_sums[r0 + i] = static_cast<int32_t>(sum);
    }
  }
  return Check && outside == 0;
}

/// The narrow dot product's bound on B (gemm/kernel_int8.hpp): with every packed value of B in
/// [-64, 64], 2 * 255 * 64 < 2^15, so any unsigned bytes of A multiply exactly.
inline constexpr int32_t int8_b_narrow_max = 64;

/// B panel: [k/4][NR][4] bytes, padded with zeros; col_sums[j] = sum of the packed bytes.
/// Returns, with Check, whether every packed value lies in [-int8_b_narrow_max,
/// int8_b_narrow_max]; without, false.
template <int NR, bool Check, class S>
bool pack_b_int8(const S* b, int64_t rs, int64_t cs, int64_t kb, int64_t nb, int8_t* dst,
                 int32_t* col_sums) {
  const int64_t kbp = (kb + 3) / 4 * 4;
  // v + 64 as a byte is above 128 exactly where v is outside [-64, 64].
  const auto outside = [](int8_t v) {
    return static_cast<uint8_t>(v + int8_b_narrow_max) > 2 * int8_b_narrow_max;
  };
  bool any_outside = false;
  for (int64_t c0 = 0; c0 < nb; c0 += NR, dst += NR * kbp) {
    const int cols = static_cast<int>(std::min<int64_t>(NR, nb - c0));
    int32_t sums[NR] = {};
    for (int64_t p0 = 0; p0 < kb; p0 += 4) {
      const int q_end = static_cast<int>(std::min<int64_t>(4, kb - p0));
      int8_t* out = dst + (p0 >> 2) * NR * 4;
      for (int q = 0; q < 4; ++q) {
        const S* row = b + (p0 + q) * rs + c0 * cs;
        if (q < q_end && cols == NR && cs == 1) {
          TESSERA_UNROLL(4)
          for (int j = 0; j < NR; ++j) {
            const auto v = static_cast<int8_t>(static_cast<int32_t>(row[j]) - int8_b_bias<S>);
            out[j * 4 + q] = v;
            sums[j] += v;
            if constexpr (Check) any_outside |= outside(v);
          }
        } else {
          for (int j = 0; j < NR; ++j) {
            int8_t v = 0;
            if (q < q_end && j < cols)
              v = static_cast<int8_t>(static_cast<int32_t>(row[j * cs]) - int8_b_bias<S>);
            out[j * 4 + q] = v;
            sums[j] += v;
            if constexpr (Check) any_outside |= outside(v);
          }
        }
      }
    }
    for (int j = 0; j < cols; ++j) col_sums[c0 + j] = sums[j];
  }
  return Check && !any_outside;
}

}  // namespace detail
TESSERA_END_NAMESPACE

// tessera/core/bfloat16.hpp - bfloat16 storage type (the upper half of an IEEE binary32).
#pragma once

#include "../config.hpp"
#include "half.hpp"  // shared conversion machinery

TESSERA_BEGIN_NAMESPACE

namespace detail {

struct bf16_format : lowp_format<8, 7, false> {
  // bfloat16 is float with the low 16 bits rounded away, so rounding is pure integer work on the
  // float's bits: adding 0x7fff + lsb rounds to nearest-even, carries move into the exponent, the
  // largest floats carry into Inf, and subnormals line up with float's own.
  static TESSERA_HOST_DEVICE constexpr std::uint32_t from_float(float f) {
    const std::uint32_t x = float_to_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (x >> 16) | 0x40u;  // NaN: must not round to Inf
    return (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  }
};

}  // namespace detail

struct bfloat16;
namespace detail {
template <>
inline constexpr bool is_lowp_float_v<bfloat16> = true;
}  // namespace detail

/// bfloat16: 1 sign, 8 exponent (bias 127) and 7 mantissa bits, i.e. float's range at 8 bits of
/// precision; max ~3.39e38, subnormals down to 2^-133, with Inf and NaN. A storage type: it
/// converts implicitly and exactly to float, where all arithmetic and comparison happen.
/// Construction from any arithmetic value rounds once to nearest, ties to even (double and 64-bit
/// integers directly, not through float); overflow gives Inf. NaN stays NaN: quiet, same sign,
/// leading payload bits kept.
struct bfloat16 {
  std::uint16_t bits;

  bfloat16() = default;
  template <detail::arithmetic U>
  TESSERA_HOST_DEVICE constexpr explicit bfloat16(U v)
      : bits(static_cast<std::uint16_t>(detail::to_bits<detail::bf16_format>(v))) {}
  // From the other storage types: through float, which holds all of their values exactly.
  template <detail::other_lowp_float<bfloat16> U>
  TESSERA_HOST_DEVICE constexpr explicit bfloat16(U v) : bfloat16(static_cast<float>(v)) {}

  TESSERA_HOST_DEVICE constexpr operator float() const {
    return detail::bits_to_float(static_cast<std::uint32_t>(bits) << 16);
  }
  static TESSERA_HOST_DEVICE constexpr bfloat16 from_bits(std::uint16_t b) {
    bfloat16 h{};
    h.bits = b;
    return h;
  }
};

TESSERA_END_NAMESPACE

namespace std {
template <>
struct numeric_limits<tessera::bfloat16>
    : tessera::detail::lowp_limits<tessera::bfloat16, tessera::detail::bf16_format, false, -37,
                                   38> {};
}  // namespace std

// tessera/core/float8.hpp - OCP 8-bit floating-point storage types (E4M3FN and E5M2).
#pragma once

#include "../config.hpp"
#include "half.hpp"  // shared conversion machinery

TESSERA_BEGIN_NAMESPACE

namespace detail {

// float8 conversions are not inner-loop critical on the host, so they take the general exact path.
struct e4m3_format : lowp_format<4, 3, true> {
  static TESSERA_HOST_DEVICE constexpr std::uint32_t from_float(float f) {
    return encode<e4m3_format, 8, 23>(float_to_bits(f));
  }
};
struct e5m2_format : lowp_format<5, 2, false> {
  static TESSERA_HOST_DEVICE constexpr std::uint32_t from_float(float f) {
    return encode<e5m2_format, 8, 23>(float_to_bits(f));
  }
};

}  // namespace detail

struct float8_e4m3;
struct float8_e5m2;
namespace detail {
template <>
inline constexpr bool is_lowp_float_v<float8_e4m3> = true;
template <>
inline constexpr bool is_lowp_float_v<float8_e5m2> = true;
/// The two 8-bit float formats (their conversions to float read 256-entry tables).
template <class T>
inline constexpr bool is_float8_v =
    std::is_same_v<T, float8_e4m3> || std::is_same_v<T, float8_e5m2>;
}  // namespace detail

/// OCP FP8 E4M3 ("E4M3FN"): 1 sign, 4 exponent (bias 7) and 3 mantissa bits; max 448, normals down
/// to 2^-6, subnormals down to 2^-9. No infinities; NaN is only S.1111.111 (0x7f / 0xff).
/// Construction rounds once to nearest, ties to even, and SATURATES: finite values beyond the
/// range and +-Inf become +-448 (the OCP saturating mode). NaN becomes 0x7f / 0xff by sign.
struct float8_e4m3 {
  std::uint8_t bits;

  float8_e4m3() = default;
  template <detail::arithmetic U>
  TESSERA_HOST_DEVICE constexpr explicit float8_e4m3(U v)
      : bits(static_cast<std::uint8_t>(detail::to_bits<detail::e4m3_format>(v))) {}
  // From the other storage types: through float, which holds all of their values exactly.
  template <detail::other_lowp_float<float8_e4m3> U>
  TESSERA_HOST_DEVICE constexpr explicit float8_e4m3(U v) : float8_e4m3(static_cast<float>(v)) {}

  TESSERA_HOST_DEVICE constexpr operator float() const {
    return detail::decode<detail::e4m3_format>(bits);
  }
  static TESSERA_HOST_DEVICE constexpr float8_e4m3 from_bits(std::uint8_t b) {
    float8_e4m3 h{};
    h.bits = b;
    return h;
  }
};

/// OCP FP8 E5M2: 1 sign, 5 exponent (bias 15) and 2 mantissa bits, laid out like IEEE binary16
/// with the low 8 bits dropped; max 57344, normals down to 2^-14, subnormals down to 2^-16, with
/// Inf and NaN. Construction rounds once to nearest, ties to even, and does NOT saturate: as in
/// IEEE, magnitudes from 61440 (halfway to the next binade) up become Inf, and Inf stays Inf.
/// NaN stays NaN: quiet (0x7e / 0xfe, 0x7f / 0xff when the source payload's second bit is set).
struct float8_e5m2 {
  std::uint8_t bits;

  float8_e5m2() = default;
  template <detail::arithmetic U>
  TESSERA_HOST_DEVICE constexpr explicit float8_e5m2(U v)
      : bits(static_cast<std::uint8_t>(detail::to_bits<detail::e5m2_format>(v))) {}
  // From the other storage types: through float, which holds all of their values exactly.
  template <detail::other_lowp_float<float8_e5m2> U>
  TESSERA_HOST_DEVICE constexpr explicit float8_e5m2(U v) : float8_e5m2(static_cast<float>(v)) {}

  TESSERA_HOST_DEVICE constexpr operator float() const {
    return detail::decode<detail::e5m2_format>(bits);
  }
  static TESSERA_HOST_DEVICE constexpr float8_e5m2 from_bits(std::uint8_t b) {
    float8_e5m2 h{};
    h.bits = b;
    return h;
  }
};

TESSERA_END_NAMESPACE

namespace std {
template <>
struct numeric_limits<tessera::float8_e4m3>
    : tessera::detail::lowp_limits<tessera::float8_e4m3, tessera::detail::e4m3_format, false, -1,
                                   2> {};
template <>
struct numeric_limits<tessera::float8_e5m2>
    : tessera::detail::lowp_limits<tessera::float8_e5m2, tessera::detail::e5m2_format, false, -4,
                                   4> {};
}  // namespace std

// tessera/core/half.hpp - IEEE binary16 storage type.
//
// Also home of the conversion machinery shared by every low-precision storage type (bfloat16.hpp
// and float8.hpp include this header), so that all four formats round by the same audited code.
#pragma once

#include <bit>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "../config.hpp"

TESSERA_BEGIN_NAMESPACE

namespace detail {

// std::bit_cast is host-only; the CUDA intrinsics are device-only and not constexpr, so device
// code uses them at run time and the compiler builtin only for constant evaluation.
TESSERA_HOST_DEVICE constexpr std::uint32_t float_to_bits(float f) {
#if defined(__CUDA_ARCH__)
  if (!__builtin_is_constant_evaluated()) return __float_as_uint(f);
  return __builtin_bit_cast(std::uint32_t, f);
#else
  return std::bit_cast<std::uint32_t>(f);
#endif
}
TESSERA_HOST_DEVICE constexpr float bits_to_float(std::uint32_t b) {
#if defined(__CUDA_ARCH__)
  if (!__builtin_is_constant_evaluated()) return __uint_as_float(b);
  return __builtin_bit_cast(float, b);
#else
  return std::bit_cast<float>(b);
#endif
}
TESSERA_HOST_DEVICE constexpr std::uint64_t double_to_bits(double d) {
#if defined(__CUDA_ARCH__)
  if (!__builtin_is_constant_evaluated())
    return static_cast<std::uint64_t>(__double_as_longlong(d));
  return __builtin_bit_cast(std::uint64_t, d);
#else
  return std::bit_cast<std::uint64_t>(d);
#endif
}

TESSERA_HOST_DEVICE constexpr int bit_width64(std::uint64_t x) {
#if defined(__CUDA_ARCH__)
  if (!__builtin_is_constant_evaluated()) return 64 - __clzll(static_cast<long long>(x));
  int n = 0;
  for (; x != 0; x >>= 1) ++n;
  return n;
#else
  return static_cast<int>(std::bit_width(x));
#endif
}

// A binary interchange format with E exponent and M stored mantissa bits. FiniteOnly selects the
// OCP "FN" encoding: no infinities, a single NaN mantissa at the top exponent, and conversions
// that saturate to the largest finite value instead of overflowing.
template <int E, int M, bool FiniteOnly>
struct lowp_format {
  static constexpr int exp_bits = E;
  static constexpr int man_bits = M;
  static constexpr int bias = (1 << (E - 1)) - 1;
  static constexpr bool finite_only = FiniteOnly;
  static constexpr std::uint32_t sign_mask = 1u << (E + M);
  static constexpr std::uint32_t inf_bits = ((1u << E) - 1) << M;
  static constexpr std::uint32_t max_bits = FiniteOnly ? inf_bits | ((1u << M) - 2) : inf_bits - 1;
  static constexpr std::uint32_t nan_bits =
      FiniteOnly ? inf_bits | ((1u << M) - 1) : inf_bits | (1u << (M - 1));
  static constexpr std::uint32_t overflow_bits = FiniteOnly ? max_bits : inf_bits;
};

// Rounds sig * 2^exp (sig != 0) to nearest, ties to even, and returns the magnitude bits. Working
// on the exact integer significand, never through an intermediate float, is what makes double and
// 64-bit integer sources round exactly once.
template <class F>
TESSERA_HOST_DEVICE constexpr std::uint32_t round_pack(std::uint64_t sig, int exp) {
  int biased = exp + bit_width64(sig) - 1 + F::bias;
  if (biased < 1) biased = 1;  // subnormal results share the quantum of the smallest binade
  const int shift = (biased - F::bias - F::man_bits) - exp;  // source bits below that quantum
  std::uint64_t q;
  if (shift <= 0) {
    q = sig << -shift;
  } else if (shift >= 64) {  // only for tiny subnormal results: at most one quantum
    q = (shift == 64 && sig > (std::uint64_t{1} << 63)) ? 1 : 0;
  } else {
    const std::uint64_t rest = sig & ((std::uint64_t{1} << shift) - 1);
    const std::uint64_t halfway = std::uint64_t{1} << (shift - 1);
    q = sig >> shift;
    q += (rest > halfway || (rest == halfway && (q & 1))) ? 1 : 0;
  }
  // q carries the implicit bit of a normal result, so adding it onto the exponent field lets a
  // rounded-up mantissa carry into the next binade (and the largest subnormal into the smallest
  // normal) for free. Comparing against max after rounding gives the IEEE overflow threshold.
  const std::uint64_t bits = (static_cast<std::uint64_t>(biased - 1) << F::man_bits) + q;
  return bits > F::max_bits ? F::overflow_bits : static_cast<std::uint32_t>(bits);
}

// Converts a float (SrcE = 8, SrcM = 23) or double (11, 52) bit pattern to format F.
template <class F, int SrcE, int SrcM>
TESSERA_HOST_DEVICE constexpr std::uint32_t encode(std::uint64_t x) {
  const std::uint32_t sign = ((x >> (SrcE + SrcM)) & 1) ? F::sign_mask : 0u;
  const std::uint64_t man = x & ((std::uint64_t{1} << SrcM) - 1);
  const int e = static_cast<int>((x >> SrcM) & ((1u << SrcE) - 1));
  if (e == (1 << SrcE) - 1) {
    if (man == 0) return sign | F::overflow_bits;
    // Quiet NaN with the sign and, where the format has payload bits, the leading payload.
    if constexpr (F::finite_only) return sign | F::nan_bits;
    return sign | F::nan_bits | static_cast<std::uint32_t>(man >> (SrcM - F::man_bits));
  }
  if (e == 0 && man == 0) return sign;
  const std::uint64_t sig = e != 0 ? man | (std::uint64_t{1} << SrcM) : man;
  const int src_bias = (1 << (SrcE - 1)) - 1;
  return sign | round_pack<F>(sig, (e != 0 ? e : 1) - src_bias - SrcM);
}

// Exact decoding to float for formats whose range float covers with normal numbers (so the
// subnormal scale below is a normal float and the product is exact even under FTZ/DAZ).
template <class F>
TESSERA_HOST_DEVICE constexpr float decode(std::uint32_t b) {
  static_assert(F::bias + F::man_bits <= 127, "subnormal scale must be a normal float");
  const std::uint32_t sign = (b & F::sign_mask) ? 0x80000000u : 0u;
  const std::uint32_t mag = b & (F::sign_mask - 1);
  const std::uint32_t man = mag & ((1u << F::man_bits) - 1);
  if (F::finite_only ? mag == F::nan_bits : mag >= F::inf_bits) {
    // Quiet NaN with sign and payload; an FN NaN has no payload (its mantissa is the marker).
    if (F::finite_only) return bits_to_float(sign | 0x7fc00000u);
    if (man == 0) return bits_to_float(sign | 0x7f800000u);
    return bits_to_float(sign | 0x7fc00000u | (man << (23 - F::man_bits)));
  }
  if (mag < (1u << F::man_bits)) {
    const float v = static_cast<float>(man) *
                    bits_to_float(static_cast<std::uint32_t>(128 - F::bias - F::man_bits) << 23);
    return sign ? -v : v;
  }
  return bits_to_float(
      sign | ((mag << (23 - F::man_bits)) + (static_cast<std::uint32_t>(127 - F::bias) << 23)));
}

// Sources wider than double are first rounded to odd at 53 bits (nearest, then force the last bit
// if inexact). 53 >= target precision + 2, so the second rounding is then correct.
template <class L>
TESSERA_HOST_DEVICE constexpr double to_double_round_odd(L v) {
  double d = static_cast<double>(v);
#if !defined(__CUDA_ARCH__)
  const L back = static_cast<L>(d);
  const bool below = v<back, above = v> back;  // inexact: one of them (neither for NaN)
  const std::uint64_t b = std::bit_cast<std::uint64_t>(d);
  if ((below || above) && (b & 1) == 0 && ((b >> 52) & 0x7ff) != 0x7ff) {
    const bool toward_zero = below == ((b >> 63) == 0);
    d = std::bit_cast<double>(toward_zero ? b - 1 : b + 1);
  }
#endif
  return d;
}

// Constructor logic shared by all storage types. F::from_float is the per-format fast path; every
// other source rounds exactly once from its own exact value.
template <class F, class U>
TESSERA_HOST_DEVICE constexpr std::uint32_t to_bits(U v) {
  if constexpr (std::is_same_v<U, bool>) {
    return v ? static_cast<std::uint32_t>(F::bias) << F::man_bits : 0u;
  } else if constexpr (std::is_integral_v<U>) {
    static_assert(sizeof(U) <= 8, "integers wider than 64 bits are not supported");
    if constexpr (sizeof(U) <= 2) {
      return F::from_float(static_cast<float>(v));  // exact in float
    } else {
      if (v == 0) return 0;
      bool neg = false;
      if constexpr (std::is_signed_v<U>) neg = v < 0;
      const std::uint64_t u = static_cast<std::uint64_t>(v);
      return (neg ? F::sign_mask : 0u) | round_pack<F>(neg ? 0 - u : u, 0);
    }
  } else if constexpr (std::is_same_v<U, float>) {
    return F::from_float(v);
  } else if constexpr (std::is_same_v<U, double>) {
    return encode<F, 11, 52>(double_to_bits(v));
  } else {
    return encode<F, 11, 52>(double_to_bits(to_double_round_odd(v)));
  }
}

template <class U>
concept arithmetic = std::is_arithmetic_v<U>;

// Marks the storage types, which convert among themselves explicitly (through float).
template <class T>
inline constexpr bool is_lowp_float_v = false;
template <class U, class Self>
concept other_lowp_float = is_lowp_float_v<U> && !std::is_same_v<U, Self>;

// numeric_limits shared by the storage types; everything follows from the format.
template <class T, class F, bool IEC559, int MinExp10, int MaxExp10>
struct lowp_limits {
  static constexpr bool is_specialized = true;
  static constexpr bool is_signed = true;
  static constexpr bool is_integer = false;
  static constexpr bool is_exact = false;
  static constexpr bool has_infinity = !F::finite_only;
  static constexpr bool has_quiet_NaN = true;
  static constexpr bool has_signaling_NaN = !F::finite_only;
  static constexpr std::float_denorm_style has_denorm = std::denorm_present;
  static constexpr bool has_denorm_loss = false;
  static constexpr std::float_round_style round_style = std::round_to_nearest;
  static constexpr bool is_iec559 = IEC559;
  static constexpr bool is_bounded = true;
  static constexpr bool is_modulo = false;
  static constexpr int digits = F::man_bits + 1;
  static constexpr int digits10 = F::man_bits * 30103 / 100000;     // floor((p-1) log10 2)
  static constexpr int max_digits10 = 2 + digits * 30103 / 100000;  // ceil(1 + p log10 2)
  static constexpr int radix = 2;
  static constexpr int min_exponent = 2 - F::bias;
  static constexpr int max_exponent = F::bias + (F::finite_only ? 2 : 1);
  static constexpr int min_exponent10 = MinExp10;
  static constexpr int max_exponent10 = MaxExp10;
  static constexpr bool traps = false;
  static constexpr bool tinyness_before = false;

  static TESSERA_HOST_DEVICE constexpr T min() noexcept { return make(1u << F::man_bits); }
  static TESSERA_HOST_DEVICE constexpr T max() noexcept { return make(F::max_bits); }
  static TESSERA_HOST_DEVICE constexpr T lowest() noexcept {
    return make(F::sign_mask | F::max_bits);
  }
  static TESSERA_HOST_DEVICE constexpr T epsilon() noexcept {
    return make(static_cast<std::uint32_t>(F::bias - F::man_bits) << F::man_bits);
  }
  static TESSERA_HOST_DEVICE constexpr T round_error() noexcept {
    return make(static_cast<std::uint32_t>(F::bias - 1) << F::man_bits);
  }
  // Formats without infinity return 0 here, as numeric_limits does for "not meaningful".
  static TESSERA_HOST_DEVICE constexpr T infinity() noexcept {
    return make(F::finite_only ? 0u : F::inf_bits);
  }
  static TESSERA_HOST_DEVICE constexpr T quiet_NaN() noexcept { return make(F::nan_bits); }
  static TESSERA_HOST_DEVICE constexpr T signaling_NaN() noexcept {
    return make(F::finite_only ? 0u : F::inf_bits | (1u << (F::man_bits - 2)));
  }
  static TESSERA_HOST_DEVICE constexpr T denorm_min() noexcept { return make(1u); }

 private:
  static TESSERA_HOST_DEVICE constexpr T make(std::uint32_t b) {
    return T::from_bits(static_cast<decltype(T{}.bits)>(b));
  }
};

struct half_format : lowp_format<5, 10, false> {
  // The inner-loop path: integer rounding on the float's bits, branch-light, and free of
  // floating-point operations (hence of FTZ/DAZ and the dynamic rounding mode).
  static TESSERA_HOST_DEVICE constexpr std::uint32_t from_float(float f) {
    const std::uint32_t x = float_to_bits(f);
    const std::uint32_t sign = (x >> 16) & 0x8000u;
    const std::uint32_t a = x & 0x7fffffffu;
    if (a >= 0x47800000u) {  // |f| >= 2^16: Inf, NaN, or a certain overflow
      return sign | (a > 0x7f800000u ? 0x7e00u | ((a >> 13) & 0x3ffu) : 0x7c00u);
    }
    if (a >= 0x38800000u) {  // |f| >= 2^-14: normal. Adding 0xfff + lsb rounds to nearest-even;
      // the carry moves into the exponent, and from just below 65520 up it reaches Inf.
      return sign | (((a + 0xfffu + ((a >> 13) & 1u)) >> 13) - (112u << 10));
    }
    if (a <= 0x33000000u) return sign;  // |f| <= 2^-25: ties to even go to zero
    // Subnormal: align the full significand to the 2^-24 quantum (shift 14..24), same trick.
    const std::uint32_t s = 126u - (a >> 23);
    const std::uint32_t m = (a & 0x7fffffu) | 0x800000u;
    return sign | ((m + (1u << (s - 1)) - 1u + ((m >> s) & 1u)) >> s);
  }
};

}  // namespace detail

struct half;
namespace detail {
template <>
inline constexpr bool is_lowp_float_v<half> = true;
#if defined(__CUDA_ARCH__)
// The device's conversion instructions (cvt), one each: the same results as half_format's code
// for every value but NaN, whose payload that code keeps and cvt replaces. The format code is
// about 15 instructions each way, which every fp16 element a kernel reads or writes paid.
__device__ inline std::uint16_t cuda_half_bits_of(float f) {
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
__device__ inline float cuda_float_of_half_bits(std::uint16_t b) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(static_cast<unsigned short>(b)));
  return f;
}
#endif

/// The bits of half(v): on the device, floats other than NaN by cvt; everything else by the
/// format code.
template <class U>
TESSERA_HOST_DEVICE constexpr std::uint16_t half_bits_of(U v) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<U, float>) {
    if (!__builtin_is_constant_evaluated() && v == v) return cuda_half_bits_of(v);
  }
#endif
  return static_cast<std::uint16_t>(to_bits<half_format>(v));
}

}  // namespace detail

/// IEEE 754 binary16: 1 sign, 5 exponent (bias 15) and 10 mantissa bits; max 65504, normals down
/// to 2^-14, subnormals down to 2^-24, with Inf and NaN. A storage type: it converts implicitly
/// and exactly to float, where all arithmetic and comparison happen. Construction from any
/// arithmetic value rounds once to nearest, ties to even (double and 64-bit integers directly,
/// not through float); magnitudes from 65520 up become Inf. NaN stays NaN: quiet, same sign,
/// leading payload bits kept.
struct half {
  std::uint16_t bits;

  half() = default;
  template <detail::arithmetic U>
  TESSERA_HOST_DEVICE constexpr explicit half(U v) : bits(detail::half_bits_of(v)) {}
  // From the other storage types: through float, which holds all of their values exactly.
  template <detail::other_lowp_float<half> U>
  TESSERA_HOST_DEVICE constexpr explicit half(U v) : half(static_cast<float>(v)) {}

  TESSERA_HOST_DEVICE constexpr operator float() const {
#if defined(__CUDA_ARCH__)
    // Not NaN: the device's cvt (NaN keeps its payload through the format code).
    if (!__builtin_is_constant_evaluated() && (bits & 0x7fffu) <= 0x7c00u)
      return detail::cuda_float_of_half_bits(bits);
#endif
    return detail::decode<detail::half_format>(bits);
  }
  static TESSERA_HOST_DEVICE constexpr half from_bits(std::uint16_t b) {
    half h{};
    h.bits = b;
    return h;
  }
};

TESSERA_END_NAMESPACE

namespace std {
template <>
struct numeric_limits<tessera::half>
    : tessera::detail::lowp_limits<tessera::half, tessera::detail::half_format, true, -4, 4> {};
}  // namespace std

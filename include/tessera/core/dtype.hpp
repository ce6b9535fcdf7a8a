// tessera/core/dtype.hpp - the element types, their names, and the type promotion table.
#pragma once

#include <cstdint>
#include <string_view>
#include <type_traits>

#include "../config.hpp"
#include "bfloat16.hpp"
#include "float8.hpp"
#include "half.hpp"

TESSERA_BEGIN_NAMESPACE

/// Runtime tag of an element type (for printing, file headers and error messages).
enum class dtype : uint8_t {
  float32,
  float64,
  float16,
  bfloat16,
  float8_e4m3,
  float8_e5m2,
  int8,
  uint8,
  int32,
  int64,
  boolean
};

namespace detail {
template <class T>
struct dtype_info;
#define TESSERA_DTYPE_INFO(T, TAG, NAME)                \
  template <>                                           \
  struct dtype_info<T> {                                \
    static constexpr ::tessera::dtype tag = dtype::TAG; \
    static constexpr std::string_view name = NAME;      \
  };
TESSERA_DTYPE_INFO(float, float32, "float32")
TESSERA_DTYPE_INFO(double, float64, "float64")
TESSERA_DTYPE_INFO(half, float16, "float16")
TESSERA_DTYPE_INFO(bfloat16, bfloat16, "bfloat16")
TESSERA_DTYPE_INFO(float8_e4m3, float8_e4m3, "float8_e4m3")
TESSERA_DTYPE_INFO(float8_e5m2, float8_e5m2, "float8_e5m2")
TESSERA_DTYPE_INFO(int8_t, int8, "int8")
TESSERA_DTYPE_INFO(uint8_t, uint8, "uint8")
TESSERA_DTYPE_INFO(int32_t, int32, "int32")
TESSERA_DTYPE_INFO(int64_t, int64, "int64")
TESSERA_DTYPE_INFO(bool, boolean, "bool")
#undef TESSERA_DTYPE_INFO
}  // namespace detail

/// True for the eleven element types a Tensor can hold.
template <class T>
concept element_type = requires {
  detail::dtype_info<std::remove_cv_t<T>>::tag;
};

template <element_type T>
inline constexpr dtype dtype_of = detail::dtype_info<T>::tag;
template <element_type T>
inline constexpr std::string_view dtype_name = detail::dtype_info<T>::name;

/// Name of a runtime dtype ("float32", "bfloat16", ...).
constexpr std::string_view name_of(dtype d) {
  constexpr std::string_view names[] = {"float32",     "float64",     "float16", "bfloat16",
                                        "float8_e4m3", "float8_e5m2", "int8",    "uint8",
                                        "int32",       "int64",       "bool"};
  return names[static_cast<int>(d)];
}

/// Storage-only floating formats: arithmetic on them is done in float.
template <class T>
inline constexpr bool is_low_precision_v =
    std::is_same_v<T, half> || std::is_same_v<T, bfloat16> || std::is_same_v<T, float8_e4m3> ||
    std::is_same_v<T, float8_e5m2>;

/// float, double and the low-precision formats.
template <class T>
inline constexpr bool is_floating_v = std::is_floating_point_v<T> || is_low_precision_v<T>;

/// The type element arithmetic is carried out in: float for the low-precision formats.
template <class T>
using compute_t = std::conditional_t<is_low_precision_v<T>, float, T>;

/// The accumulator of sums: double for double, float for the other floating types, int64 for
/// integers and bool (as NumPy and LibTorch do, so sums of int8 do not wrap).
template <class T>
using accum_t = std::conditional_t<std::is_same_v<T, double>, double,
                                   std::conditional_t<is_floating_v<T>, float, int64_t>>;

namespace detail {
// Rank of the floating formats for promotion: a wider format absorbs a narrower one.
template <class T>
constexpr int float_rank() {
  if constexpr (std::is_same_v<T, double>)
    return 4;
  else if constexpr (std::is_same_v<T, float>)
    return 3;
  else if constexpr (std::is_same_v<T, half> || std::is_same_v<T, bfloat16>)
    return 2;
  else if constexpr (is_low_precision_v<T>)
    return 1;
  else
    return 0;
}

template <class A, class B>
constexpr auto promote_impl() {
  if constexpr (std::is_same_v<A, B>)
    return A{};
  else if constexpr (std::is_same_v<A, bool>)
    return B{};
  else if constexpr (std::is_same_v<B, bool>)
    return A{};
  else if constexpr (is_floating_v<A> && !is_floating_v<B>)
    return A{};
  else if constexpr (is_floating_v<B> && !is_floating_v<A>)
    return B{};
  else if constexpr (is_floating_v<A>) {
    // Two different floating formats: the wider one; two of equal width but different layout
    // (half/bfloat16, e4m3/e5m2) have no common format, so they meet in float.
    constexpr int ra = float_rank<A>(), rb = float_rank<B>();
    if constexpr (ra > rb)
      return A{};
    else if constexpr (rb > ra)
      return B{};
    else
      return float{};
  } else {
    // Two different integer types.
    if constexpr (std::is_same_v<A, int64_t> || std::is_same_v<B, int64_t>)
      return int64_t{};
    else
      return int32_t{};  // int8/uint8/int32 mixes
  }
}
}  // namespace detail

/// The result type of a binary op on A and B. The rules, as one table (docs/dtypes.md):
/// - equal types stay; bool yields to anything;
/// - integer with floating -> the floating type (int8 + half -> half, int64 + float -> float);
/// - floating with floating -> the wider (fp8 < half = bfloat16 < float < double);
///   half + bfloat16 -> float, float8_e4m3 + float8_e5m2 -> float;
/// - integer with integer -> int64 if either is int64, otherwise int32 (int8 + uint8 -> int32).
template <element_type A, element_type B>
using promote_t = decltype(detail::promote_impl<std::remove_cv_t<A>, std::remove_cv_t<B>>());

/// The element type of `tensor<T> op scalar S`: the tensor's type wins, unless the tensor is
/// integral or bool and the scalar floating, in which case the result is float (as in LibTorch).
template <element_type T, class S>
using scalar_promote_t =
    std::conditional_t<!is_floating_v<T> && std::is_floating_point_v<S>, float, T>;

TESSERA_END_NAMESPACE

// tessera/kernel/functors.hpp - the elementwise functors behind the named ops. Each is callable on
// scalars in host and device code; those marked `simd` also accept CPU SIMD packs, which the map
// kernel then uses. Functors with transcendental math declare their relative `cost`.
#pragma once

#include <cmath>
#include <limits>
#include <type_traits>

#include "../config.hpp"

TESSERA_BEGIN_NAMESPACE
namespace fn {

template <class T>
concept arith = std::is_arithmetic_v<T>;

// Inside `struct relu` the name relu is the struct itself, so the vector overloads call the
// SIMD functions through these (found by argument-dependent lookup on the pack type).
template <class V>
auto vec_relu(V x) -> decltype(relu(x)) {
  return relu(x);
}
template <class V>
auto vec_sigmoid(V x) -> decltype(sigmoid(x)) {
  return sigmoid(x);
}
/// Exact GELU on a pack: x Phi(x) = x (1 + erf(x / sqrt 2)) / 2.
template <class V>
auto vec_gelu(V x) -> decltype(erf(x)) {
  using T = typename V::value_type;
  return x * T(0.5) * (T(1) + erf(x * T(0.70710678118654752440)));
}
/// GELU's tanh approximation on a pack: x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) / 2.
template <class V>
auto vec_gelu_tanh(V x) -> decltype(tanh(x)) {
  using T = typename V::value_type;
  const V u = x * T(0.79788456080286535588) * (T(1) + T(0.044715) * x * x);
  return x * T(0.5) * (T(1) + tanh(u));
}

// numeric_limits members are host functions to nvcc; constexpr variables work on both sides.
template <class T>
inline constexpr T lowest_v = std::numeric_limits<T>::lowest();
template <class T>
inline constexpr T max_v = std::numeric_limits<T>::max();
template <class T>
inline constexpr T infinity_v = std::numeric_limits<T>::infinity();

// Integer arithmetic wraps modulo 2^N (two's complement), as in NumPy and PyTorch. Signed
// overflow is undefined in C++, so + - * and negation of integers run in an unsigned type and
// convert back (modulo 2^N since C++20); wrap_t is at least unsigned int, because narrower
// unsigned types promote to int and could overflow there (uint16 * uint16).
template <class T>
concept wrapping_int = std::is_integral_v<T> && !std::is_same_v<T, bool>;
template <wrapping_int T>
using wrap_t = std::common_type_t<std::make_unsigned_t<T>, unsigned>;

/// a + b, a - b, a * b, -a: wrapping for integers, the type's own operators otherwise (floats,
/// bool, CPU SIMD packs).
template <class T>
TESSERA_HOST_DEVICE T add_wrap(T a, T b) {
  if constexpr (wrapping_int<T>)
    return static_cast<T>(static_cast<wrap_t<T>>(a) + static_cast<wrap_t<T>>(b));
  else
    return a + b;
}
template <class T>
TESSERA_HOST_DEVICE T sub_wrap(T a, T b) {
  if constexpr (wrapping_int<T>)
    return static_cast<T>(static_cast<wrap_t<T>>(a) - static_cast<wrap_t<T>>(b));
  else
    return a - b;
}
template <class T>
TESSERA_HOST_DEVICE T mul_wrap(T a, T b) {
  if constexpr (wrapping_int<T>)
    return static_cast<T>(static_cast<wrap_t<T>>(a) * static_cast<wrap_t<T>>(b));
  else
    return a * b;
}
template <class T>
TESSERA_HOST_DEVICE T neg_wrap(T x) {
  if constexpr (wrapping_int<T>)
    return static_cast<T>(wrap_t<T>(0) - static_cast<wrap_t<T>>(x));
  else
    return static_cast<T>(-x);
}

// Unary functors on a scalar type T (after the ops layer converted to the compute type) and,
// where `simd` is set, on packs V for which the named vector function exists.
#define TESSERA_UNARY_FN(NAME, COST, SCALAR_EXPR, VEC_EXPR)                            \
  struct NAME {                                                                        \
    static constexpr bool simd = true;                                                 \
    static constexpr int cost = COST;                                                  \
    template <arith T>                                                                 \
    TESSERA_HOST_DEVICE T operator()(T x) const {                                      \
      using std::abs, std::sqrt, std::exp, std::log, std::tanh, std::floor, std::ceil; \
      using std::erf;                                                                  \
      return SCALAR_EXPR;                                                              \
    }                                                                                  \
    template <class V>                                                                 \
    requires(!arith<V>) && requires(V x) { VEC_EXPR; }                                 \
    V operator()(V x) const { return VEC_EXPR; }                                       \
  };

// Integer neg and abs wrap: -MIN and |MIN| are MIN (NumPy, PyTorch).
TESSERA_UNARY_FN(neg, 1, neg_wrap(x), -x)
TESSERA_UNARY_FN(abs_, 1, static_cast<T>(x < T(0) ? neg_wrap(x) : x), abs(x))
TESSERA_UNARY_FN(sqrt_, 2, static_cast<T>(sqrt(x)), sqrt(x))
TESSERA_UNARY_FN(exp_, 8, static_cast<T>(exp(x)), exp(x))
TESSERA_UNARY_FN(log_, 8, static_cast<T>(log(x)), log(x))
TESSERA_UNARY_FN(tanh_, 10, static_cast<T>(tanh(x)), tanh(x))
// Integers are already integral: a trip through double would round int64 values above 2^53 and
// turn INT64_MAX into 2^63, out of range for the conversion back.
TESSERA_UNARY_FN(floor_, 1, std::is_integral_v<T> ? x : static_cast<T>(floor(x)), floor(x))
TESSERA_UNARY_FN(ceil_, 1, std::is_integral_v<T> ? x : static_cast<T>(ceil(x)), ceil(x))
TESSERA_UNARY_FN(round_, 1, std::is_integral_v<T> ? x : static_cast<T>(std::nearbyint(x)), round(x))
TESSERA_UNARY_FN(relu, 1, static_cast<T>(x > T(0) ? x : (x != x ? x : T(0))), vec_relu(x))
TESSERA_UNARY_FN(sigmoid, 10, static_cast<T>(T(1) / (T(1) + exp(-x))), vec_sigmoid(x))
TESSERA_UNARY_FN(rsqrt, 3, static_cast<T>(T(1) / sqrt(x)), 1 / sqrt(x))
TESSERA_UNARY_FN(erf_, 10, static_cast<T>(erf(x)), erf(x))
// Exact GELU, x * Phi(x), as torch.nn.functional.gelu's default.
TESSERA_UNARY_FN(gelu, 12, static_cast<T>(x* T(0.5) * (T(1) + erf(x * T(0.70710678118654752440)))),
                 vec_gelu(x))
// GELU's tanh approximation, torch.nn.functional.gelu(x, approximate="tanh") (GPT-2, BERT
// variants that ask for gelu_new).
TESSERA_UNARY_FN(gelu_tanh, 12,
                 static_cast<T>(x* T(0.5) * (T(1) + tanh(x * T(0.79788456080286535588) *
                                                         (T(1) + T(0.044715) * x * x)))),
                 vec_gelu_tanh(x))
#undef TESSERA_UNARY_FN

// Scalar-only unary functors (no vector implementation: the compiler's auto-vectorizer, or the
// plain loop, handles them).
#define TESSERA_SCALAR_FN(NAME, COST, EXPR)                                  \
  struct NAME {                                                              \
    static constexpr int cost = COST;                                        \
    template <arith T>                                                       \
    TESSERA_HOST_DEVICE T operator()(T x) const {                            \
      using std::sin, std::cos, std::erf, std::log1p, std::expm1, std::sqrt; \
      return EXPR;                                                           \
    }                                                                        \
  };
TESSERA_SCALAR_FN(sign, 1, static_cast<T>(x != x ? x : (x > T(0)) - (x < T(0))))
TESSERA_SCALAR_FN(sin_, 10, static_cast<T>(sin(x)))
TESSERA_SCALAR_FN(cos_, 10, static_cast<T>(cos(x)))
TESSERA_SCALAR_FN(log1p_, 10, static_cast<T>(log1p(x)))
TESSERA_SCALAR_FN(expm1_, 10, static_cast<T>(expm1(x)))
#undef TESSERA_SCALAR_FN

#define TESSERA_BINARY_FN(NAME, SIMD, EXPR)            \
  struct NAME {                                        \
    static constexpr bool simd = SIMD;                 \
    template <class T>                                 \
    TESSERA_HOST_DEVICE T operator()(T a, T b) const { \
      return EXPR;                                     \
    }                                                  \
  };
TESSERA_BINARY_FN(add, true, add_wrap(a, b))
TESSERA_BINARY_FN(sub, true, sub_wrap(a, b))
TESSERA_BINARY_FN(mul, true, mul_wrap(a, b))
#undef TESSERA_BINARY_FN

/// max/min that propagate NaN (torch.maximum / torch.minimum).
struct maximum {
  static constexpr bool simd = true;
  template <arith T>
  TESSERA_HOST_DEVICE T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      if (a != a) return a;
      if (b != b) return b;
    }
    return a > b ? a : b;
  }
  template <class V>
  requires(!arith<V>) && requires(V v) { max(v, v); }
  V operator()(V a, V b) const { return max(a, b); }
};
struct minimum {
  static constexpr bool simd = true;
  template <arith T>
  TESSERA_HOST_DEVICE T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      if (a != a) return a;
      if (b != b) return b;
    }
    return a < b ? a : b;
  }
  template <class V>
  requires(!arith<V>) && requires(V v) { min(v, v); }
  V operator()(V a, V b) const { return min(a, b); }
};
/// a^b (std::pow; integer powers by repeated squaring, wrapping modulo 2^N like repeated
/// multiplication; negative exponents give 0 unless |a|=1).
struct pow_ {
  static constexpr int cost = 20;
  template <arith T>
  TESSERA_HOST_DEVICE T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      return static_cast<T>(std::pow(a, b));
    } else if constexpr (std::is_same_v<T, bool>) {
      return a || !b;
    } else {
      if constexpr (std::is_signed_v<T>)
        if (b < 0) return static_cast<T>(a == 1 ? 1 : (a == T(-1) ? ((b & 1) ? -1 : 1) : 0));
      wrap_t<T> r = 1, p = static_cast<wrap_t<T>>(a);
      for (; b; b >>= 1, p *= p)
        if (b & 1) r *= p;
      return static_cast<T>(r);
    }
  }
};
// Integer division and remainder never trap: b = 0 gives 0 for both, and for signed types
// b = -1 gives -a (MIN / -1 wraps to MIN, as NumPy and PyTorch) and remainder 0, where the
// hardware raises SIGFPE for MIN / -1 and MIN % -1 (undefined in C++).
/// C fmod semantics (result has the sign of a), as torch.fmod; integer b = 0 gives 0 instead of
/// trapping (documented).
struct fmod_ {
  template <arith T>
  TESSERA_HOST_DEVICE T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      return static_cast<T>(std::fmod(a, b));
    } else {
      if constexpr (std::is_signed_v<T>)
        if (b == T(-1)) return T(0);
      return b == 0 ? T(0) : static_cast<T>(a % b);
    }
  }
};
/// Integer division truncates; by zero it yields 0 rather than trapping (documented in the op).
struct safe_div {
  static constexpr bool simd = true;
  template <arith T>
  TESSERA_HOST_DEVICE T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      return a / b;
    } else {
      if constexpr (std::is_signed_v<T>)
        if (b == T(-1)) return neg_wrap(a);
      return b == 0 ? T(0) : static_cast<T>(a / b);
    }
  }
  template <class V>
  requires(!arith<V>) V operator()(V a, V b) const { return a / b; }
};

#define TESSERA_CMP_FN(NAME, OP)                          \
  struct NAME {                                           \
    template <class T>                                    \
    TESSERA_HOST_DEVICE bool operator()(T a, T b) const { \
      return a OP b;                                      \
    }                                                     \
  };
TESSERA_CMP_FN(eq, ==)
TESSERA_CMP_FN(ne, !=)
TESSERA_CMP_FN(lt, <)
TESSERA_CMP_FN(le, <=)
TESSERA_CMP_FN(gt, >)
TESSERA_CMP_FN(ge, >=)
#undef TESSERA_CMP_FN

struct logical_and {
  template <class T>
  TESSERA_HOST_DEVICE bool operator()(T a, T b) const {
    return static_cast<bool>(a) && static_cast<bool>(b);
  }
};
struct logical_or {
  template <class T>
  TESSERA_HOST_DEVICE bool operator()(T a, T b) const {
    return static_cast<bool>(a) || static_cast<bool>(b);
  }
};
struct logical_xor {
  template <class T>
  TESSERA_HOST_DEVICE bool operator()(T a, T b) const {
    return static_cast<bool>(a) != static_cast<bool>(b);
  }
};
struct logical_not {
  template <class T>
  TESSERA_HOST_DEVICE bool operator()(T a) const {
    return !static_cast<bool>(a);
  }
};
/// cond ? a : b, converted to R.
template <class R>
struct where_as {
  template <class C, class A, class B>
  TESSERA_HOST_DEVICE R operator()(C c, A a, B b) const {
    return static_cast<bool>(c) ? static_cast<R>(a) : static_cast<R>(b);
  }
};
/// Clamp into [lo, hi]; NaN stays NaN.
template <class T>
struct clamp_ {
  T lo, hi;
  TESSERA_HOST_DEVICE T operator()(T x) const { return x < lo ? lo : (x > hi ? hi : x); }
};
template <class F>
constexpr bool simd_of() {
  if constexpr (requires { F::simd; })
    return F::simd;
  else
    return false;
}
/// Element-operations one call of F costs, for the serial/parallel decision (and whether
/// streaming stores pay): functors with transcendental math declare `static constexpr int cost`.
template <class F>
constexpr int cost_of() {
  if constexpr (requires { F::cost; })
    return F::cost;
  else
    return 1;
}

/// Binds a scalar as the second (bind_right) or first (bind_left) operand of a binary functor.
template <class V, class S>
TESSERA_HOST_DEVICE V splat(S s) {
  if constexpr (std::is_arithmetic_v<V>)
    return static_cast<V>(s);
  else
    return V::broadcast(static_cast<typename V::value_type>(s));
}
template <class F, class S>
struct bind_right {
  F f;
  S s;
  static constexpr bool simd = simd_of<F>();
  static constexpr int cost = cost_of<F>();
  template <class V>
  TESSERA_HOST_DEVICE auto operator()(V x) const -> decltype(f(x, x)) {
    return f(x, splat<V>(s));
  }
};
template <class F, class S>
struct bind_left {
  F f;
  S s;
  static constexpr bool simd = simd_of<F>();
  static constexpr int cost = cost_of<F>();
  template <class V>
  TESSERA_HOST_DEVICE auto operator()(V x) const -> decltype(f(x, x)) {
    return f(splat<V>(s), x);
  }
};
/// Calls f after converting every argument to C (the compute type of low-precision inputs).
template <class C, class F>
struct cast_args {
  F f;
  template <class... A>
  TESSERA_HOST_DEVICE auto operator()(A... a) const {
    return f(static_cast<C>(a)...);
  }
};
/// y = a * x + y's map functor with a captured scalar (used by examples and benchmarks).
template <class T>
struct axpy {
  T a;
  static constexpr bool simd = true;
  template <class V>
  TESSERA_HOST_DEVICE V operator()(V x, V y) const {
    if constexpr (wrapping_int<V>)
      return add_wrap(mul_wrap(static_cast<V>(a), x), y);
    else
      return a * x + y;
  }
};

}  // namespace fn

/// Marks a generic callable as safe to call with CPU SIMD packs (its body uses only arithmetic
/// operators and tessera's vector-capable math), so `map` runs it vectorized:
/// `ts::map(ts::vectorized([](auto x, auto y) { return 2 * x + y; }), x, y)`.
template <class F>
struct vectorized_fn : F {
  static constexpr bool simd = true;
};
template <class F>
vectorized_fn<F> vectorized(F f) {
  return {f};
}

TESSERA_END_NAMESPACE

TESSERA_BEGIN_NAMESPACE
namespace fn {

/// Returns its argument (copies, contiguous()).
struct identity {
  static constexpr bool simd = true;
  template <class T>
  TESSERA_HOST_DEVICE T operator()(T x) const {
    return x;
  }
};
/// A constant with no inputs (fill).
template <class T>
struct constant {
  T v;
  TESSERA_HOST_DEVICE T operator()() const { return v; }
};
/// Element conversion to U: round-to-nearest-even into narrow floats; floating to integer
/// truncates toward zero, saturates at U's range and maps NaN to 0 (C++ leaves these undefined).
template <class U>
struct convert_to {
  template <class T>
  TESSERA_HOST_DEVICE U operator()(T x) const {
    if constexpr (std::is_integral_v<U> && !std::is_same_v<U, bool> && !std::is_integral_v<T> &&
                  !std::is_same_v<T, bool>) {
      const double d = static_cast<double>(x);
      if (d != d) return U(0);
      constexpr double lo = static_cast<double>(lowest_v<U>);
      constexpr double hi = static_cast<double>(max_v<U>);
      if (d <= lo) return lowest_v<U>;
      if (d >= hi) return max_v<U>;
      return static_cast<U>(d);
    } else if constexpr (std::is_same_v<U, bool>) {
      return static_cast<double>(x) != 0.0;
    } else {
      return static_cast<U>(x);
    }
  }
};

}  // namespace fn
TESSERA_END_NAMESPACE

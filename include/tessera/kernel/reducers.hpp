// tessera/kernel/reducers.hpp - the reducers the reduction ops hand to a backend's reduce_kernel:
// acc_type, identity(), step(acc, x, index), combine(a, b) (a before b), finish(acc).
// Host- and device-callable.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "../core/dtype.hpp"
#include "functors.hpp"

TESSERA_BEGIN_NAMESPACE
namespace red {

/// Sum in Acc of f(x) (Pre: 0 x, 1 |x|, 2 x^2), times scale, then the square root if Root
/// (the 2-norm).
template <class In, class Acc, class Out, int Pre = 0, bool Root = false>
struct sum {
  using acc_type = Acc;
  double scale = 1.0;  // 1/count for mean
  TESSERA_HOST_DEVICE Acc identity() const { return Acc(0); }
  TESSERA_HOST_DEVICE Acc step(Acc a, In x, int64_t) const {
    // Integer sums wrap modulo 2^64 (fn::add_wrap), as NumPy's: no signed overflow.
    const Acc v = static_cast<Acc>(static_cast<compute_t<In>>(x));
    if constexpr (Pre == 1)
      return fn::add_wrap(a, v < Acc(0) ? fn::neg_wrap(v) : v);  // L1
    else if constexpr (Pre == 2)
      return fn::add_wrap(a, fn::mul_wrap(v, v));  // squared L2
    else
      return fn::add_wrap(a, v);
  }
  TESSERA_HOST_DEVICE Acc combine(Acc a, Acc b) const { return fn::add_wrap(a, b); }
  /// The same step on CPU SIMD packs, when input and accumulator are one floating type.
  static constexpr bool simd = std::is_same_v<In, Acc> && std::is_floating_point_v<Acc>;
  template <class V>
  V vstep(V a, V x) const {
    if constexpr (Pre == 1)
      return a + abs(x);
    else if constexpr (Pre == 2)
      return fma(x, x, a);
    else
      return a + x;
  }
  template <class V>
  V vcombine(V a, V b) const {
    return a + b;
  }
  TESSERA_HOST_DEVICE Out finish(Acc a) const {
    if constexpr (Root)
      return static_cast<Out>(std::sqrt(static_cast<Acc>(a * static_cast<Acc>(scale))));
    else if (scale == 1.0)
      return static_cast<Out>(a);
    else
      return static_cast<Out>(static_cast<double>(a) * scale);
  }
};

template <class In, class Acc, class Out>
struct prod {
  using acc_type = Acc;
  TESSERA_HOST_DEVICE Acc identity() const { return Acc(1); }
  TESSERA_HOST_DEVICE Acc step(Acc a, In x, int64_t) const {
    return fn::mul_wrap(a, static_cast<Acc>(static_cast<compute_t<In>>(x)));
  }
  TESSERA_HOST_DEVICE Acc combine(Acc a, Acc b) const { return fn::mul_wrap(a, b); }
  TESSERA_HOST_DEVICE Out finish(Acc a) const { return static_cast<Out>(a); }
};

/// max (Max = true) or min, NaN-propagating; Abs reduces |x| (the inf-norm).
template <class In, bool Max, bool Abs = false>
struct extreme {
  using C = compute_t<In>;
  using acc_type = C;
  TESSERA_HOST_DEVICE C identity() const {
    if constexpr (Abs)
      return C(0);
    else if constexpr (std::numeric_limits<C>::has_infinity)
      return Max ? -fn::infinity_v<C> : fn::infinity_v<C>;
    else
      return Max ? fn::lowest_v<C> : fn::max_v<C>;
  }
  TESSERA_HOST_DEVICE C combine(C a, C b) const {
    if (a != a) return a;
    if (b != b) return b;
    return (Max ? b > a : b < a) ? b : a;
  }
  TESSERA_HOST_DEVICE C step(C a, In x, int64_t) const {
    C v = static_cast<C>(x);
    if constexpr (Abs) v = v < C(0) ? C(-v) : v;
    return combine(a, v);
  }
  static constexpr bool simd = std::is_same_v<In, C> && std::is_floating_point_v<C>;
  template <class V>
  V vcombine(V a, V b) const {
    if constexpr (Max)
      return max(a, b);  // NaN-propagating
    else
      return min(a, b);
  }
  template <class V>
  V vstep(V a, V x) const {
    if constexpr (Abs)
      return vcombine(a, abs(x));
    else
      return vcombine(a, x);
  }
  TESSERA_HOST_DEVICE In finish(C a) const { return static_cast<In>(a); }
};

/// argmax (Max = true) / argmin: first index of the extreme value; a NaN counts as the extreme
/// (as in NumPy and LibTorch), the first NaN wins.
template <class In, bool Max>
struct arg_extreme {
  using C = compute_t<In>;
  struct acc_type {
    C v;
    int64_t i;
  };
  TESSERA_HOST_DEVICE acc_type identity() const { return {C(0), -1}; }
  TESSERA_HOST_DEVICE acc_type combine(acc_type a, acc_type b) const {
    if (a.i < 0) return b;
    if (b.i < 0) return a;
    const bool an = a.v != a.v, bn = b.v != b.v;
    if (an || bn) {
      if (an && bn) return a.i < b.i ? a : b;
      return an ? a : b;
    }
    if (a.v == b.v) return a.i < b.i ? a : b;
    return (Max ? b.v > a.v : b.v < a.v) ? b : a;
  }
  TESSERA_HOST_DEVICE acc_type step(acc_type a, In x, int64_t i) const {
    return combine(a, acc_type{static_cast<C>(x), i});
  }
  TESSERA_HOST_DEVICE int64_t finish(acc_type a) const { return a.i; }
};

/// Sum of |x|^p, finished as (sum)^(1/p): the general p-norm.
template <class In, class Acc, class Out>
struct pnorm {
  using acc_type = Acc;
  Acc p;
  TESSERA_HOST_DEVICE Acc identity() const { return Acc(0); }
  TESSERA_HOST_DEVICE Acc step(Acc a, In x, int64_t) const {
    const Acc v = static_cast<Acc>(static_cast<compute_t<In>>(x));
    return a + static_cast<Acc>(std::pow(v < Acc(0) ? -v : v, p));
  }
  TESSERA_HOST_DEVICE Acc combine(Acc a, Acc b) const { return a + b; }
  TESSERA_HOST_DEVICE Out finish(Acc a) const { return static_cast<Out>(std::pow(a, Acc(1) / p)); }
};

}  // namespace red

namespace fn {
/// v if finite, else 0 (the logsumexp shift).
struct finite_or_zero {
  template <class C>
  TESSERA_HOST_DEVICE C operator()(C v) const {
    return v - v == C(0) ? v : C(0);
  }
};
/// exp(a - b).
struct exp_diff {
  template <class C>
  TESSERA_HOST_DEVICE C operator()(C a, C b) const {
    return static_cast<C>(std::exp(a - b));
  }
};
/// a + log(b).
struct add_log {
  template <class C>
  TESSERA_HOST_DEVICE C operator()(C a, C b) const {
    return static_cast<C>(a + std::log(b));
  }
};
}  // namespace fn
TESSERA_END_NAMESPACE

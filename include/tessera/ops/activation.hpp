// tessera/ops/activation.hpp - softmax and log_softmax along one axis.
#pragma once

#include "reduce.hpp"

TESSERA_BEGIN_NAMESPACE
namespace detail {

// The element functions of softmax and log_softmax, as host-device functors so that the same
// code runs on every backend (lambdas would be host-only under nvcc).

// Where the input and compute types agree (float, double), they also take the CPU kernels'
// vector packs: exp and the division then run on whole registers.

/// exp(v - m) in C: softmax's shifted exponentials.
template <class T, class C>
struct softmax_shifted_exp {
  static constexpr bool simd = std::is_same_v<T, C>;
  TESSERA_HOST_DEVICE C operator()(T v, T mv) const {
    using std::exp;
    return static_cast<C>(exp(C(v) - C(mv)));
  }
  template <class V>
  requires(!std::is_arithmetic_v<V>) && requires(V v) { exp(v); }
  V operator()(V v, V mv) const { return exp(v - mv); }
};
/// v / t as R.
template <class R, class C>
struct softmax_divide {
  static constexpr bool simd = std::is_same_v<R, C>;
  TESSERA_HOST_DEVICE R operator()(C v, C t) const { return static_cast<R>(v / t); }
  template <class V>
  requires(!std::is_arithmetic_v<V>) V operator()(V v, V t) const { return v / t; }
};
/// (v - m) - log(t) as T.
template <class T, class C>
struct log_softmax_finish {
  TESSERA_HOST_DEVICE T operator()(T v, T mv, C t) const {
    using std::log;
    return static_cast<T>((C(v) - C(mv)) - log(t));
  }
};

}  // namespace detail

/// exp(x) / sum(exp(x)) along `dim`, computed as exp(x - m) / sum(exp(x - m)) with m the
/// maximum, so that large inputs do not overflow. Same shape as x (empty in, empty out);
/// floating T. A slice holding +inf or NaN, or only -inf, is NaN throughout (as PyTorch).
/// Throws index_error for a bad dim.
template <element_type T, class B>
Tensor<T, B> softmax(const Tensor<T, B>& x, int64_t dim = -1) {
  static_assert(is_floating_v<T>, "tessera::softmax: floating element types only");
  if (x.numel() == 0) {  // max has no identity over an empty dim; the result is empty anyway
    (void)detail::wrap_axis("softmax", dim, x.rank());
    return Tensor<T, B>(x.shape());
  }
  // Shift by the maximum, not by logsumexp: exp(x - lse) carries lse's rounding to T, an error
  // that grows with |x| (1e-5 relative at x = 1000 in float), while x - m is exact near the top.
  // An infinite maximum stays (no finite_or_zero, unlike logsumexp): +inf - +inf is NaN and
  // makes the sum NaN, so the whole slice is NaN as in PyTorch, not [nan, 0] for [inf, 0].
  using C = compute_t<T>;
  const Tensor<T, B> m = max(x, {dim}, true);
  Tensor<C, B> e = map(detail::softmax_shifted_exp<T, C>{}, x, m);
  const Tensor<C, B> s = sum(e, {dim}, true);
  if constexpr (std::is_same_v<C, T>) {
    map_to(e, detail::softmax_divide<C, C>{}, e, s);
    return e;
  } else {
    return map(detail::softmax_divide<T, C>{}, e, s);
  }
}

/// x - logsumexp(x) along `dim`: the log of softmax, without its rounding to 0 for tiny
/// probabilities. Same shape as x; floating T. NaN where softmax is (as PyTorch). Throws
/// index_error for a bad dim.
template <element_type T, class B>
Tensor<T, B> log_softmax(const Tensor<T, B>& x, int64_t dim = -1) {
  static_assert(is_floating_v<T>, "tessera::log_softmax: floating element types only");
  if (x.numel() == 0) {  // max has no identity over an empty dim; the result is empty anyway
    (void)detail::wrap_axis("log_softmax", dim, x.rank());
    return Tensor<T, B>(x.shape());
  }
  // (x - m) - log(sum(exp(x - m))) rather than x - logsumexp(x), whose rounding of the large
  // logsumexp to T would cost precision proportional to |x| (as in softmax), and with the
  // infinite maximum kept (as in softmax) a slice holding +inf is NaN throughout.
  using C = compute_t<T>;
  const Tensor<T, B> m = max(x, {dim}, true);
  const Tensor<C, B> s = sum(map(detail::softmax_shifted_exp<T, C>{}, x, m), {dim}, true);
  return map(detail::log_softmax_finish<T, C>{}, x, m, s);
}

TESSERA_END_NAMESPACE

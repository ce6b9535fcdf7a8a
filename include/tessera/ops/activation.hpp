// tessera/ops/activation.hpp - softmax and log_softmax along one axis.
#pragma once

#include "reduce.hpp"

TESSERA_BEGIN_NAMESPACE

/// exp(x) / sum(exp(x)) along `dim`, computed as exp(x - m) / sum(exp(x - m)) with m the
/// maximum, so that large inputs do not overflow. Same shape as x (empty in, empty out);
/// floating T. Throws index_error for a bad dim.
template <element_type T, class B>
Tensor<T, B> softmax(const Tensor<T, B>& x, int64_t dim = -1) {
  static_assert(is_floating_v<T>, "tessera::softmax: floating element types only");
  if (x.numel() == 0) {  // max has no identity over an empty dim; the result is empty anyway
    (void)detail::wrap_axis("softmax", dim, x.rank());
    return Tensor<T, B>(x.shape());
  }
  // Shift by the maximum, not by logsumexp: exp(x - lse) carries lse's rounding to T, an error
  // that grows with |x| (1e-5 relative at x = 1000 in float), while x - m is exact near the top.
  using C = compute_t<T>;
  const Tensor<T, B> m = map(fn::finite_or_zero{}, max(x, {dim}, true));
  Tensor<C, B> e = map([](T v, T mv) { return static_cast<C>(std::exp(C(v) - C(mv))); }, x, m);
  const Tensor<C, B> s = sum(e, {dim}, true);
  if constexpr (std::is_same_v<C, T>) {
    map_to(
        e, [](C v, C t) { return static_cast<C>(v / t); }, e, s);
    return e;
  } else {
    return map([](C v, C t) { return static_cast<T>(v / t); }, e, s);
  }
}

/// x - logsumexp(x) along `dim`: the log of softmax, without its rounding to 0 for tiny
/// probabilities. Same shape as x; floating T. Throws index_error for a bad dim.
template <element_type T, class B>
Tensor<T, B> log_softmax(const Tensor<T, B>& x, int64_t dim = -1) {
  static_assert(is_floating_v<T>, "tessera::log_softmax: floating element types only");
  if (x.numel() == 0) {  // max has no identity over an empty dim; the result is empty anyway
    (void)detail::wrap_axis("log_softmax", dim, x.rank());
    return Tensor<T, B>(x.shape());
  }
  // (x - m) - log(sum(exp(x - m))) rather than x - logsumexp(x), whose rounding of the large
  // logsumexp to T would cost precision proportional to |x| (as in softmax).
  using C = compute_t<T>;
  const Tensor<T, B> m = map(fn::finite_or_zero{}, max(x, {dim}, true));
  const Tensor<C, B> s =
      sum(map([](T v, T mv) { return static_cast<C>(std::exp(C(v) - C(mv))); }, x, m), {dim}, true);
  return map([](T v, T mv, C t) { return static_cast<T>((C(v) - C(mv)) - std::log(t)); }, x, m, s);
}

TESSERA_END_NAMESPACE

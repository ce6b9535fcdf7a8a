// tessera/ops/activation.hpp - softmax and log_softmax along one axis.
#pragma once

#include "reduce.hpp"

TESSERA_BEGIN_NAMESPACE

/// exp(x) / sum(exp(x)) along `dim`, computed as exp(x - logsumexp(x)) so that large inputs do
/// not overflow. Same shape as x; floating T. Throws index_error for a bad dim.
template <element_type T, class B>
Tensor<T, B> softmax(const Tensor<T, B>& x, int64_t dim = -1) {
  static_assert(is_floating_v<T>, "tessera::softmax: floating element types only");
  const Tensor<T, B> lse = logsumexp(x, {dim}, true);
  return map([](T v, T l) { return static_cast<T>(std::exp(v - l)); }, x, lse);
}

/// x - logsumexp(x) along `dim`: the log of softmax, without its rounding to 0 for tiny
/// probabilities. Same shape as x; floating T. Throws index_error for a bad dim.
template <element_type T, class B>
Tensor<T, B> log_softmax(const Tensor<T, B>& x, int64_t dim = -1) {
  static_assert(is_floating_v<T>, "tessera::log_softmax: floating element types only");
  return x - logsumexp(x, {dim}, true);
}

TESSERA_END_NAMESPACE

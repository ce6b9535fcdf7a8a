// tessera/autograd/embedding.hpp - embedding lookup and layer normalization on Variables.
#pragma once

#include <vector>

#include "../ops/embedding.hpp"
#include "elementwise.hpp"
#include "reduce.hpp"

TESSERA_BEGIN_NAMESPACE

/// Rows of `table` [num, dim] chosen by `ids` (see ops/embedding.hpp). Backward adds each output
/// row's gradient into its table row (rows chosen twice get both). The accumulation runs on the
/// host, in the compute type, in id order (deterministic); a table on another backend is copied
/// there and back, so prefer the CPU for large vocabularies until a device scatter kernel exists.
/// `padding_idx` (>= 0) names a row whose gradient stays zero, as torch.nn.Embedding's.
template <element_type T, class B>
Variable<T, B> embedding(const Variable<T, B>& table, const Tensor<int64_t, B>& ids,
                         int64_t padding_idx = -1) {
  const Tensor<int64_t, B> flat = ids.contiguous();
  return autograd::detail::record(
      "embedding", embedding(table.value(), ids), {&table}, {autograd::detail::saved_version(flat)},
      [flat, shape = table.shape(), padding_idx](const autograd::backward_context<T, B>& c) {
        using C = compute_t<T>;
        const int64_t num = shape[0], dim = shape[1], n = flat.numel();
        std::vector<int64_t> id(static_cast<size_t>(n));
        backend::memory<B>::copy_to_host(id.data(), flat.data(), id.size() * sizeof(int64_t));
        const Tensor<T, B> g = c.grad().contiguous();
        std::vector<T> gh(static_cast<size_t>(n * dim));
        backend::memory<B>::copy_to_host(gh.data(), g.data(), gh.size() * sizeof(T));
        std::vector<C> acc(static_cast<size_t>(num * dim), C(0));
        for (int64_t i = 0; i < n; ++i) {
          if (id[i] == padding_idx) continue;
          C* row = acc.data() + id[i] * dim;
          const T* src = gh.data() + i * dim;
          for (int64_t j = 0; j < dim; ++j) row[j] += static_cast<C>(src[j]);
        }
        std::vector<T> out(acc.size());
        for (size_t k = 0; k < acc.size(); ++k) out[k] = static_cast<T>(acc[k]);
        c.give(0, tessera::detail::from_host<T, B>(out, shape));
      });
}

/// Layer normalization over the last dim (see ops/embedding.hpp), composed of differentiable ops.
template <element_type T, class B>
Variable<T, B> layer_norm(const Variable<T, B>& x, const Variable<T, B>& weight = {},
                          const Variable<T, B>& bias = {}, double eps = 1e-5) {
  return tessera::detail::layer_norm_composed<T>(x, weight, bias, eps);
}

TESSERA_END_NAMESPACE

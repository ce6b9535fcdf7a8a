// tessera/ops/embedding.hpp - embedding lookup (rows of a table chosen by integer ids) and
// functional layer normalization: the first and most frequent steps of a transformer.
#pragma once

#include <vector>

#include "creation.hpp"
#include "elementwise.hpp"
#include "reduce.hpp"
#include "tensor_copy.hpp"

TESSERA_BEGIN_NAMESPACE
namespace detail {

/// Element i of the [n, dim] result: column i % dim of table row ids[i / dim]. A host-device
/// functor, so that map_kernel<B>::generate runs it on every backend.
template <class T>
struct gather_rows {
  const T* table;
  int64_t row_stride, col_stride, dim;
  const int64_t* ids;
  TESSERA_HOST_DEVICE T operator()(int64_t i) const {
    return table[ids[i / dim] * row_stride + (i % dim) * col_stride];
  }
};

}  // namespace detail

/// Rows of `table` [num, dim] chosen by `ids` (any shape, int64): the result has shape
/// ids.shape + [dim] and holds table[ids[...], :], as torch.nn.functional.embedding. Any
/// strides; every dtype. Throws shape_error when table is not rank 2 and index_error naming the
/// first id outside [0, num) and its position (ids on another backend are checked through a
/// host copy).
template <element_type T, class B>
Tensor<T, B> embedding(const Tensor<T, B>& table, const Tensor<int64_t, B>& ids) {
  table.check_defined("embedding"), ids.check_defined("embedding");
  if (table.rank() != 2)
    detail::fail<shape_error>("embedding", "table must be [num, dim], got ", table.shape());
  const int64_t num = table.shape()[0], dim = table.shape()[1];
  const Tensor<int64_t, B> flat = ids.contiguous();
  {
    std::vector<int64_t> host(static_cast<size_t>(flat.numel()));
    backend::memory<B>::copy_to_host(host.data(), flat.data(), host.size() * sizeof(int64_t));
    for (size_t i = 0; i < host.size(); ++i)
      if (host[i] < 0 || host[i] >= num)
        detail::fail<index_error>("embedding", "id ", host[i], " at position ", i,
                                  " (row-major) is outside [0, ", num, ")");
  }
  Shape out_shape = ids.shape();
  out_shape.push_back(dim);
  if (out_shape.numel() == 0) return Tensor<T, B>(out_shape);
  const detail::gather_rows<T> f{table.data(), table.stride(0), table.stride(1), dim, flat.data()};
  return generate<T, B>(out_shape, f);
}

namespace detail {
/// Normalization over the last `dims` dims of x, for Tensors and Variables alike (X: the tensor
/// type, T its element type): (x - mean) * rsqrt(var + eps), then * weight and + bias where
/// defined, composed of ops found for X by argument-dependent lookup. No checks: layer_norm and
/// nn::LayerNorm make their own.
template <class T, class X>
X layer_norm_over(const X& x, int dims, const X& weight, const X& bias, double eps) {
  Axes axes;
  for (int d = x.rank() - dims; d < x.rank(); ++d) axes.push_back(d);
  const X m = mean(x, axes, true);
  const X v = var(x, axes, true, 0.0);
  X y = (x - m) * rsqrt(v + static_cast<T>(eps));
  if (weight.defined()) y = y * weight;
  if (bias.defined()) y = y + bias;
  return y;
}

/// layer_norm for Tensors and Variables alike: the checks, then layer_norm_over the last dim.
template <class T, class X>
X layer_norm_composed(const X& x, const X& weight, const X& bias, double eps) {
  if (x.rank() == 0) fail<shape_error>("layer_norm", "x must have at least one dim");
  const int64_t c = x.shape()[x.rank() - 1];
  for (const X* p : {&weight, &bias})
    if (p->defined() && (p->rank() != 1 || p->shape()[0] != c))
      fail<shape_error>("layer_norm", "weight and bias must be [", c, "], got ", p->shape());
  return layer_norm_over<T>(x, 1, weight, bias, eps);
}
}  // namespace detail

/// Layer normalization over the last dim: (x - mean) / sqrt(var + eps) * weight + bias, with
/// the biased variance, as torch.nn.functional.layer_norm(x, [C], weight, bias, eps). weight and
/// bias are [C] (either may be undefined: no scale, no shift). Floating T. Throws shape_error
/// for a rank-0 x or a weight or bias of another length.
template <element_type T, class B>
Tensor<T, B> layer_norm(const Tensor<T, B>& x, const Tensor<T, B>& weight = {},
                        const Tensor<T, B>& bias = {}, double eps = 1e-5) {
  x.check_defined("layer_norm");
  return detail::layer_norm_composed<T>(x, weight, bias, eps);
}

TESSERA_END_NAMESPACE

// tessera/ops/embedding.hpp - embedding lookup (rows of a table chosen by integer ids) and
// functional layer normalization: the first and most frequent steps of a transformer.
#pragma once

#include <type_traits>
#include <vector>

#include "../kernel/norm_problem.hpp"
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

/// layer_norm's checks, for Tensors and Variables alike (op: the name errors give).
template <class X>
void check_layer_norm(const char* op, const X& x, const X& weight, const X& bias) {
  if (x.rank() == 0) fail<shape_error>(op, "x must have at least one dim");
  const int64_t c = x.shape()[x.rank() - 1];
  for (const X* p : {&weight, &bias})
    if (p->defined() && (p->rank() != 1 || p->shape()[0] != c))
      fail<shape_error>(op, "weight and bias must be [", c, "], got ", p->shape());
}

/// layer_norm for Tensors and Variables alike: the checks, then layer_norm_over the last dim.
template <class T, class X>
X layer_norm_composed(const X& x, const X& weight, const X& bias, double eps) {
  check_layer_norm("layer_norm", x, weight, bias);
  return layer_norm_over<T>(x, 1, weight, bias, eps);
}

/// Whether backend B normalizes T in one fused kernel (norm_kernel<B>: the CPU, float and double).
template <class T, class B>
concept has_norm_kernel = (std::is_same_v<T, float> ||
                           std::is_same_v<T, double>)&&requires(const layer_norm_problem<T>& p) {
  backend::norm_kernel<B>::layer_norm(p);
};

/// The fused kernel over the last dim of x (plus residual, same shape, when defined). The caller
/// has checked the shapes (check_layer_norm).
template <class T, class B>
Tensor<T, B> layer_norm_fused(const Tensor<T, B>& x, const Tensor<T, B>& residual,
                              const Tensor<T, B>& weight, const Tensor<T, B>& bias, double eps) {
  const Tensor<T, B> xc = x.contiguous();
  Tensor<T, B> rc, wc, bc;
  if (residual.defined()) rc = residual.contiguous();
  if (weight.defined()) wc = weight.contiguous();
  if (bias.defined()) bc = bias.contiguous();
  Tensor<T, B> out(x.shape());
  layer_norm_problem<T> p;
  p.x = xc.data(), p.residual = rc.defined() ? rc.data() : nullptr;
  p.weight = wc.defined() ? wc.data() : nullptr, p.bias = bc.defined() ? bc.data() : nullptr;
  p.out = out.data();
  p.c = x.shape()[x.rank() - 1];
  p.rows = p.c == 0 ? 0 : x.numel() / p.c;
  p.eps = eps;
  if (p.rows > 0) backend::norm_kernel<B>::layer_norm(p);
  return out;
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
  if constexpr (detail::has_norm_kernel<T, B>) {
    detail::check_layer_norm("layer_norm", x, weight, bias);
    return detail::layer_norm_fused(x, Tensor<T, B>{}, weight, bias, eps);
  } else {
    return detail::layer_norm_composed<T>(x, weight, bias, eps);
  }
}

/// layer_norm(x + residual, weight, bias, eps), the sum of a transformer's residual connection
/// and its normalization: one pass over the rows where the backend fuses layer_norm (the CPU,
/// float and double), instead of a pass for the sum and several for the normalization. x and
/// residual have the same shape. Throws shape_error as layer_norm does, and for residual of
/// another shape.
template <element_type T, class B>
Tensor<T, B> residual_layer_norm(const Tensor<T, B>& x, const Tensor<T, B>& residual,
                                 const Tensor<T, B>& weight = {}, const Tensor<T, B>& bias = {},
                                 double eps = 1e-5) {
  x.check_defined("residual_layer_norm"), residual.check_defined("residual_layer_norm");
  if (residual.shape() != x.shape())
    detail::fail<shape_error>("residual_layer_norm", "x ", x.shape(), " and residual ",
                              residual.shape(), " must have the same shape");
  detail::check_layer_norm("residual_layer_norm", x, weight, bias);
  if constexpr (detail::has_norm_kernel<T, B>)
    return detail::layer_norm_fused(x, residual, weight, bias, eps);
  else
    return detail::layer_norm_over<T>(x + residual, 1, weight, bias, eps);
}

TESSERA_END_NAMESPACE

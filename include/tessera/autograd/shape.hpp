// tessera/autograd/shape.hpp - Variable overloads of the views (reshape, transpose, permute,
// slice, select, expand, squeeze, unsqueeze, flatten) and of cat / stack.
#pragma once

#include "../ops/join.hpp"
#include "elementwise.hpp"

TESSERA_BEGIN_NAMESPACE

namespace autograd::detail {
/// A view op: its gradient is the output gradient reshaped back to the input's shape.
template <class T, class B>
Variable<T, B> reshaped_view(Tensor<T, B> y, const Variable<T, B>& x) {
  return record("reshape", std::move(y), {&x}, {},
                [s = x.shape()](const backward_context<T, B>& c) {
                  c.give(0, c.grad().reshape(s.span()), false);
                });
}
}  // namespace autograd::detail

/// x with a new shape (one extent may be -1); a view when strides allow, else a copy.
template <element_type T, class B>
Variable<T, B> reshape(const Variable<T, B>& x, std::initializer_list<int64_t> dims) {
  return autograd::detail::reshaped_view(x.value().reshape(dims), x);
}
template <element_type T, class B>
Variable<T, B> reshape(const Variable<T, B>& x, std::span<const int64_t> dims) {
  return autograd::detail::reshaped_view(x.value().reshape(dims), x);
}
/// Dims start..end (inclusive, negative from the end) merged into one.
template <element_type T, class B>
Variable<T, B> flatten(const Variable<T, B>& x, int64_t start = 0, int64_t end = -1) {
  const Shape& s = x.shape();
  if (s.rank() == 0) return autograd::detail::reshaped_view(x.value().reshape({1}), x);
  const int a = tessera::detail::wrap_axis("flatten", start, s.rank());
  const int b = tessera::detail::wrap_axis("flatten", end, s.rank());
  if (a > b)
    tessera::detail::fail<index_error>("flatten", "start dim ", start, " is after end dim ", end,
                                       " for shape ", s);
  std::vector<int64_t> dims;
  int64_t merged = 1;
  for (int d = 0; d < s.rank(); ++d) {
    if (d < a || d > b)
      dims.push_back(s[d]);
    else {
      merged *= s[d];
      if (d == b) dims.push_back(merged);
    }
  }
  return autograd::detail::reshaped_view(x.value().reshape(std::span<const int64_t>(dims)), x);
}
/// Unit dims removed (all, or just `dim`).
template <element_type T, class B>
Variable<T, B> squeeze(const Variable<T, B>& x) {
  return autograd::detail::reshaped_view(x.value().squeeze(), x);
}
template <element_type T, class B>
Variable<T, B> squeeze(const Variable<T, B>& x, int64_t dim) {
  return autograd::detail::reshaped_view(x.value().squeeze(dim), x);
}
/// A unit dim inserted at `dim`.
template <element_type T, class B>
Variable<T, B> unsqueeze(const Variable<T, B>& x, int64_t dim) {
  return autograd::detail::reshaped_view(x.value().unsqueeze(dim), x);
}
/// Dims d0 and d1 swapped.
template <element_type T, class B>
Variable<T, B> transpose(const Variable<T, B>& x, int64_t d0, int64_t d1) {
  return autograd::detail::record("transpose", x.value().transpose(d0, d1), {&x}, {},
                                  [d0, d1](const autograd::backward_context<T, B>& c) {
                                    c.give(0, c.grad().transpose(d0, d1), false);
                                  });
}
/// Dims reordered: output dim i is input dim perm[i].
template <element_type T, class B>
Variable<T, B> permute(const Variable<T, B>& x, std::initializer_list<int64_t> perm) {
  Tensor<T, B> y = x.value().permute(perm);
  std::vector<int64_t> inverse(perm.size());
  int i = 0;
  for (int64_t p : perm) inverse[tessera::detail::wrap_axis("permute", p, x.rank())] = i++;
  return autograd::detail::record("permute", std::move(y), {&x}, {},
                                  [inverse](const autograd::backward_context<T, B>& c) {
                                    c.give(0, c.grad().permute(inverse), false);
                                  });
}
/// Elements start, start + step, ... < stop along dim (a view); the gradient is zero elsewhere.
template <element_type T, class B>
Variable<T, B> slice(const Variable<T, B>& x, int64_t dim, int64_t start, int64_t stop,
                     int64_t step = 1) {
  return autograd::detail::record(
      "slice", x.value().slice(dim, start, stop, step), {&x}, {},
      [s = x.shape(), dim, start, stop, step](const autograd::backward_context<T, B>& c) {
        Tensor<T, B> g = zeros<T, B>(s);
        g.slice(dim, start, stop, step).copy_(c.grad());
        c.give(0, g);
      });
}
/// The sub-tensor at `index` along dim (that dim removed).
template <element_type T, class B>
Variable<T, B> select(const Variable<T, B>& x, int64_t dim, int64_t index) {
  return autograd::detail::record(
      "select", x.value().select(dim, index), {&x}, {},
      [s = x.shape(), dim, index](const autograd::backward_context<T, B>& c) {
        Tensor<T, B> g = zeros<T, B>(s);
        g.select(dim, index).copy_(c.grad());
        c.give(0, g);
      });
}
/// x broadcast to `shape` (a view); the gradient is summed back over the expanded dims.
template <element_type T, class B>
Variable<T, B> expand(const Variable<T, B>& x, const Shape& shape) {
  return autograd::detail::record("expand", x.value().broadcast_to(shape), {&x}, {},
                                  [s = x.shape()](const autograd::backward_context<T, B>& c) {
                                    autograd::detail::give_summed(c, 0, c.grad(), s, false);
                                  });
}

/// Concatenation along dim, as tessera::cat; each input receives its slice of the gradient.
template <element_type T, class B>
Variable<T, B> cat(const std::vector<Variable<T, B>>& xs, int64_t dim = 0) {
  std::vector<Tensor<T, B>> values;
  values.reserve(xs.size());
  for (const auto& x : xs) values.push_back(x.value());
  Tensor<T, B> y = cat(values, dim);
  std::vector<int64_t> extents;
  const int d = tessera::detail::wrap_axis("cat", dim, y.rank());
  for (const auto& v : values) extents.push_back(v.shape()[d]);
  return autograd::detail::record_all(
      "cat", std::move(y), xs, [extents, d](const autograd::backward_context<T, B>& c) {
        int64_t offset = 0;
        for (size_t i = 0; i < extents.size(); ++i) {
          c.give(i, c.grad().slice(d, offset, offset + extents[i]), false);
          offset += extents[i];
        }
      });
}
/// Stacks equally shaped Variables along a new dim, as tessera::stack.
template <element_type T, class B>
Variable<T, B> stack(const std::vector<Variable<T, B>>& xs, int64_t dim = 0) {
  if (xs.empty()) tessera::detail::fail<shape_error>("stack", "needs at least one tensor");
  std::vector<Variable<T, B>> parts;
  const int d = tessera::detail::wrap_axis("stack", dim, xs[0].rank() + 1);
  for (size_t i = 0; i < xs.size(); ++i) {
    if (!(xs[i].shape() == xs[0].shape()))
      tessera::detail::fail<shape_error>("stack", "tensor ", i, " has shape ", xs[i].shape(),
                                         ", expected ", xs[0].shape());
    parts.push_back(unsqueeze(xs[i], d));
  }
  return cat(parts, d);
}

TESSERA_END_NAMESPACE

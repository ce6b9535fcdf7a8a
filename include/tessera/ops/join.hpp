// tessera/ops/join.hpp - cat and stack: join tensors along an existing or a new axis.
#pragma once

#include <vector>

#include "tensor_copy.hpp"

TESSERA_BEGIN_NAMESPACE

/// Concatenates tensors along `dim` (negative counts from the end): every tensor has the same
/// rank and the same extents except along dim. Returns a new contiguous tensor.
/// Throws shape_error for an empty list, rank 0, or differing ranks/extents; index_error for dim.
template <element_type T, class B>
Tensor<T, B> cat(const std::vector<Tensor<T, B>>& tensors, int64_t dim = 0) {
  if (tensors.empty()) detail::fail<shape_error>("cat", "needs at least one tensor");
  for (const auto& t : tensors) t.check_defined("cat");
  const Shape& first = tensors[0].shape();
  if (first.rank() == 0) detail::fail<shape_error>("cat", "cannot concatenate 0-d tensors");
  const int d = detail::wrap_axis("cat", dim, first.rank());
  Shape out_shape = first;
  int64_t total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Shape& s = tensors[i].shape();
    bool same = s.rank() == first.rank();
    for (int k = 0; same && k < s.rank(); ++k) same = k == d || s[k] == first[k];
    if (!same)
      detail::fail<shape_error>("cat", "tensor ", i, " has shape ", s, ", which does not match ",
                                first, " outside dim ", d);
    if (__builtin_add_overflow(total, s[d], &total))
      detail::fail<shape_error>("cat", "the joined extent along dim ", d, " overflows int64");
  }
  out_shape[d] = total;
  Tensor<T, B> out(out_shape);
  int64_t offset = 0;
  for (const auto& t : tensors) {
    const int64_t n = t.shape()[d];
    if (n > 0 && t.numel() > 0) out.slice(d, offset, offset + n).copy_(t);
    offset += n;
  }
  return out;
}

/// Stacks equally shaped tensors along a new axis `dim` (0..rank): the result has rank + 1 dims.
/// Throws shape_error for an empty list or differing shapes; index_error for dim.
template <element_type T, class B>
Tensor<T, B> stack(const std::vector<Tensor<T, B>>& tensors, int64_t dim = 0) {
  if (tensors.empty()) detail::fail<shape_error>("stack", "needs at least one tensor");
  for (const auto& t : tensors) t.check_defined("stack");
  const Shape& first = tensors[0].shape();
  const int d = detail::wrap_axis("stack", dim, first.rank() + 1);
  std::vector<Tensor<T, B>> parts;
  parts.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!(tensors[i].shape() == first))
      detail::fail<shape_error>("stack", "tensor ", i, " has shape ", tensors[i].shape(),
                                ", expected ", first);
    parts.push_back(tensors[i].unsqueeze(d));
  }
  return cat(parts, d);
}

TESSERA_END_NAMESPACE

// tessera/ops/creation.hpp - functions that make new tensors.
#pragma once

#include <cmath>
#include <vector>

#include "../core/random.hpp"
#include "tensor_copy.hpp"

TESSERA_BEGIN_NAMESPACE

/// A new contiguous tensor whose elements are uninitialised.
template <element_type T, backend_tag B = default_backend>
Tensor<T, B> empty(const Shape& shape) {
  return Tensor<T, B>(shape);
}
/// A new tensor with every element equal to v.
template <element_type T, backend_tag B = default_backend>
Tensor<T, B> full(const Shape& shape, T v) {
  Tensor<T, B> t(shape);
  t.fill_(v);
  return t;
}
/// A new tensor of zeros.
template <element_type T, backend_tag B = default_backend>
Tensor<T, B> zeros(const Shape& shape) {
  return full<T, B>(shape, T(0));
}
/// A new tensor of ones.
template <element_type T, backend_tag B = default_backend>
Tensor<T, B> ones(const Shape& shape) {
  return full<T, B>(shape, T(1));
}

namespace detail {
template <element_type T, backend_tag B>
Tensor<T, B> from_host(const std::vector<T>& v, const Shape& shape) {
  Tensor<T, B> t(shape);
  if constexpr (std::is_same_v<T, bool>) {  // vector<bool> is packed: stage through bytes
    std::vector<unsigned char> bytes(v.begin(), v.end());
    backend::memory<B>::copy_from_host(t.data(), bytes.data(), bytes.size());
  } else {
    backend::memory<B>::copy_from_host(t.data(), v.data(), v.size() * sizeof(T));
  }
  return t;
}
}  // namespace detail

/// Copies `values` (row-major) into a new tensor of the given shape; throws shape_error if the
/// counts differ. With no shape, the result is 1-D.
template <element_type T, backend_tag B = default_backend>
Tensor<T, B> from_vector(const std::vector<T>& values, const Shape& shape) {
  if (static_cast<int64_t>(values.size()) != shape.numel())
    detail::fail<shape_error>("from_vector", values.size(), " values for shape ", shape, " (",
                              shape.numel(), " elements)");
  return detail::from_host<T, B>(values, shape);
}
template <element_type T, backend_tag B = default_backend>
Tensor<T, B> from_vector(const std::vector<T>& values) {
  return from_vector<T, B>(values, Shape{static_cast<int64_t>(values.size())});
}
/// Copies shape.numel() elements from host memory at `data` (row-major) into a new tensor.
template <element_type T, backend_tag B = default_backend>
Tensor<T, B> from_data(const T* data, const Shape& shape) {
  if (!data && shape.numel() > 0)
    detail::fail<error>("from_data", "null pointer for shape ", shape);
  Tensor<T, B> t(shape);
  backend::memory<B>::copy_from_host(t.data(), data,
                                     static_cast<size_t>(shape.numel()) * sizeof(T));
  return t;
}

/// start, start+step, ... below stop (1-D), as numpy.arange; throws on step 0 or a count that
/// does not fit.
template <element_type T, backend_tag B = default_backend>
Tensor<T, B> arange(double start, double stop, double step = 1.0) {
  if (step == 0 || !std::isfinite(start) || !std::isfinite(stop) || !std::isfinite(step))
    detail::fail<shape_error>("arange", "invalid range start=", start, " stop=", stop,
                              " step=", step);
  const double n = std::ceil((stop - start) / step);
  if (n > 9.0e18) detail::fail<shape_error>("arange", "count ", n, " overflows int64");
  const int64_t count = n > 0 ? static_cast<int64_t>(n) : 0;
  std::vector<T> v(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) v[i] = static_cast<T>(start + static_cast<double>(i) * step);
  return detail::from_host<T, B>(v, Shape{count});
}
/// 0, 1, ..., n-1.
template <element_type T, backend_tag B = default_backend>
Tensor<T, B> arange(int64_t n) {
  return arange<T, B>(0.0, static_cast<double>(n), 1.0);
}
/// `steps` values evenly spaced from start to end inclusive (1-D).
template <element_type T, backend_tag B = default_backend>
Tensor<T, B> linspace(double start, double end, int64_t steps) {
  if (steps < 0) detail::fail<shape_error>("linspace", "steps ", steps, " is negative");
  std::vector<T> v(static_cast<size_t>(steps));
  const double d = steps > 1 ? (end - start) / static_cast<double>(steps - 1) : 0.0;
  // The second half counts back from `end`, so both ends are exact (as torch.linspace).
  for (int64_t i = 0; i < steps; ++i)
    v[i] = static_cast<T>(i < (steps + 1) / 2 ? start + d * static_cast<double>(i)
                                              : end - d * static_cast<double>(steps - 1 - i));
  return detail::from_host<T, B>(v, Shape{steps});
}
/// A new contiguous tensor whose element i (row-major) is f(i), for a functor of the element's
/// index (a host-device one on device backends): map_kernel<B>::generate where the backend has
/// it, else computed on the host and copied. Dropout's mask is made so, on the device itself.
template <element_type T, backend_tag B = default_backend, class F>
Tensor<T, B> generate(const Shape& shape, const F& f) {
  Tensor<T, B> out(shape);
  if constexpr (requires { backend::map_kernel<B>::generate(f, out.data(), out.numel()); }) {
    backend::map_kernel<B>::generate(f, out.data(), out.numel());
  } else {
    std::vector<T> host(static_cast<size_t>(out.numel()));
    for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<T>(f(static_cast<int64_t>(i)));
    backend::memory<B>::copy_from_host(out.data(), host.data(), host.size() * sizeof(T));
  }
  return out;
}

/// Uniform in [lo, hi) from gen (drawn on the host, so every backend gets the same values).
template <element_type T, backend_tag B = default_backend>
Tensor<T, B> rand(const Shape& shape, Generator& gen, double lo = 0.0, double hi = 1.0) {
  std::vector<T> v(static_cast<size_t>(shape.numel()));
  for (auto& x : v) x = static_cast<T>(lo + (hi - lo) * gen.uniform());
  return detail::from_host<T, B>(v, shape);
}
/// Normal with the given mean and standard deviation, from gen.
template <element_type T, backend_tag B = default_backend>
Tensor<T, B> randn(const Shape& shape, Generator& gen, double mean = 0.0, double std = 1.0) {
  std::vector<T> v(static_cast<size_t>(shape.numel()));
  for (auto& x : v) x = static_cast<T>(mean + std * gen.normal());
  return detail::from_host<T, B>(v, shape);
}
/// Uniform integers in [lo, hi) from gen.
template <element_type T, backend_tag B = default_backend>
Tensor<T, B> randint(int64_t lo, int64_t hi, const Shape& shape, Generator& gen) {
  if (hi <= lo) detail::fail<shape_error>("randint", "empty range [", lo, ", ", hi, ")");
  std::vector<T> v(static_cast<size_t>(shape.numel()));
  for (auto& x : v)
    x = static_cast<T>(lo + static_cast<int64_t>(gen.below(static_cast<uint64_t>(hi - lo))));
  return detail::from_host<T, B>(v, shape);
}

TESSERA_END_NAMESPACE

// tessera/ops/tensor_copy.hpp - Tensor members that copy or convert data (they run kernels, so
// they are defined after the backends are known).
#pragma once

#include <vector>

#include "map.hpp"

TESSERA_BEGIN_NAMESPACE

template <element_type T, backend_tag B>
Tensor<T, B> Tensor<T, B>::contiguous() const {
  check_defined("contiguous");
  return is_contiguous() ? *this : clone();
}

namespace detail {
/// A new contiguous tensor holding f(src) elementwise: clone and astype.
template <class U, class T, class B, class F>
Tensor<U, B> copy_through(const Tensor<T, B>& src, F f) {
  Tensor<U, B> out(src.shape());
  backend::map_kernel<B>::template run<U>(f, out.view_ref(),
                                          strided<const T>{src.data(), src.shape(), src.strides()});
  return out;
}
}  // namespace detail

template <element_type T, backend_tag B>
Tensor<T, B> Tensor<T, B>::clone() const {
  check_defined("clone");
  return detail::copy_through<T>(*this, fn::identity{});
}

template <element_type T, backend_tag B>
template <element_type U>
Tensor<U, B> Tensor<T, B>::astype() const {
  check_defined("astype");
  if constexpr (std::is_same_v<U, T>)
    return clone();
  else
    return detail::copy_through<U>(*this, fn::convert_to<U>{});
}

template <element_type T, backend_tag B>
template <backend_tag B2>
Tensor<T, B2> Tensor<T, B>::to() const {
  check_defined("to");
  if constexpr (std::is_same_v<B, B2>) {
    return clone();
  } else {
    const Tensor<T, B> src = contiguous();
    Tensor<T, B2> dst(shape_);
    const size_t bytes = static_cast<size_t>(numel()) * sizeof(T);
    if constexpr (backend::memory<B>::host_accessible) {
      backend::memory<B2>::copy_from_host(dst.data(), src.data(), bytes);
    } else if constexpr (backend::memory<B2>::host_accessible) {
      backend::memory<B>::copy_to_host(dst.data(), src.data(), bytes);
    } else {
      std::vector<T> staging(static_cast<size_t>(numel()));
      backend::memory<B>::copy_to_host(staging.data(), src.data(), bytes);
      backend::memory<B2>::copy_from_host(dst.data(), staging.data(), bytes);
    }
    return dst;
  }
}

template <element_type T, backend_tag B>
std::vector<T> Tensor<T, B>::to_vector() const {
  check_defined("to_vector");
  const Tensor<T, B> src = contiguous();
  if constexpr (std::is_same_v<T, bool>) {  // vector<bool> is packed: stage through bytes
    std::vector<unsigned char> bytes(static_cast<size_t>(numel()));
    backend::memory<B>::copy_to_host(bytes.data(), src.data(), bytes.size());
    return std::vector<bool>(bytes.begin(), bytes.end());
  } else {
    std::vector<T> v(static_cast<size_t>(numel()));
    backend::memory<B>::copy_to_host(v.data(), src.data(), v.size() * sizeof(T));
    return v;
  }
}

template <element_type T, backend_tag B>
T Tensor<T, B>::item() const {
  check_defined("item");
  if (numel() != 1)
    detail::fail<shape_error>("item", "tensor of shape ", shape_, " has ", numel(),
                              " elements, not 1");
  T v;
  backend::memory<B>::copy_to_host(&v, data(), sizeof(T));
  return v;
}

template <element_type T, backend_tag B>
const Tensor<T, B>& Tensor<T, B>::fill_(T v) const {
  detail::begin_write("fill_", *this);
  backend::map_kernel<B>::template run<T>(fn::constant<T>{v}, view_ref());
  return *this;
}

template <element_type T, backend_tag B>
template <element_type U>
const Tensor<T, B>& Tensor<T, B>::copy_(const Tensor<U, B>& src) const {
  return map_to(*this, fn::convert_to<T>{}, src);
}

TESSERA_END_NAMESPACE

// tessera/ops/map.hpp - map / map_to: fused n-ary elementwise over broadcast inputs, the building
// block of every named elementwise op.
#pragma once

#include <type_traits>

#include "../core/tensor.hpp"
#include "../kernel/functors.hpp"

TESSERA_BEGIN_NAMESPACE
namespace detail {

template <class T, class B>
strided<const T> broadcast_ref(const Tensor<T, B>& t, const Shape& s) {
  const Tensor<T, B> e = t.shape() == s ? t : t.broadcast_to(s);
  return {e.data(), e.shape(), e.strides()};
}

/// Output views must be defined and must not write one element twice (stride 0 over an
/// extent > 1).
template <class T, class B>
void check_writable(std::string_view op, const Tensor<T, B>& out) {
  out.check_defined(op);
  for (int d = 0; d < out.rank(); ++d)
    if (out.strides()[d] == 0 && out.shape()[d] > 1)
      fail<shape_error>(op, "output of shape ", out.shape(), " has stride 0 at dim ", d,
                        " (an expanded view cannot be written)");
}
/// Called by every op that writes into a tensor it did not allocate (out= forms, in-place ops)
/// once its other checks passed: check_writable, then the write is counted in out's version.
template <class T, class B>
void begin_write(std::string_view op, const Tensor<T, B>& out) {
  check_writable(op, out);
  out.bump_version();
}

/// An input that shares memory with the output but is not exactly the output (same first
/// element, same strides) could be overwritten before it is read: such inputs are copied first,
/// so every op behaves as if its inputs were copied. In-place (exact alias) needs no copy.
template <class O, class T, class B>
Tensor<T, B> unalias(const Tensor<O, B>& out, const Tensor<T, B>& in) {
  if (!in.shares_storage_with(out)) return in;
  if constexpr (std::is_same_v<O, T>)
    if (in.offset() == out.offset() && in.strides() == out.strides() && in.shape() == out.shape())
      return in;
  return in.clone();
}

/// Where a kernel that writes contiguous K elements puts the result meant for out: out itself
/// when it holds K, is contiguous and shares no memory with any input; otherwise a fresh
/// contiguous tensor of out's shape, which copy_result then copies (converting) into out, so
/// that overlapping inputs are read as if copied first.
template <class K, class TO, class B, class... In>
Tensor<K, B> kernel_target(const Tensor<TO, B>& out, const In&... in) {
  if constexpr (std::is_same_v<K, TO>) {
    if (out.is_contiguous() && !(in.shares_storage_with(out) || ...)) return out;
  }
  return Tensor<K, B>(out.shape());
}
/// Copies a kernel_target into out unless it is out itself.
template <class K, class TO, class B>
void copy_result(const Tensor<K, B>& target, const Tensor<TO, B>& out) {
  if (static_cast<const void*>(target.data()) != static_cast<const void*>(out.data()))
    out.copy_(target);
}

template <class... S>
Shape broadcast_all([[maybe_unused]] std::string_view op, const Shape& first, const S&... rest) {
  Shape s = first;
  ((s = broadcast_shapes(s, rest, op)), ...);
  return s;
}

/// Runs the backend's map kernel: out = f(in...) with inputs broadcast to out's shape.
template <class O, class B, class F, class... T>
void launch_map(const F& f, const Tensor<O, B>& out, const Tensor<T, B>&... in) {
  backend::map_kernel<B>::template run<O>(f, out.view_ref(),
                                          broadcast_ref(unalias(out, in), out.shape())...);
}

// F& rather than const F&: nvcc's host-side stand-in for a __device__ lambda has a non-const
// call operator.
template <class F, class... T>
using map_result_t = std::remove_cvref_t<std::invoke_result_t<F&, T...>>;

}  // namespace detail

/// Applies f elementwise to the inputs broadcast together (NumPy rules), in one pass with no
/// temporaries: `map([](auto a, auto b) { return a * 2 + b; }, x, y)`. f receives the inputs'
/// element types; the result's element type is f's return type. Wrap f in tessera::vectorized to
/// let the CPU backend call it on SIMD packs. On CUDA, f must be device-callable.
/// Throws shape_error when the shapes do not broadcast.
template <class F, element_type T0, element_type... T, class B>
auto map(F f, const Tensor<T0, B>& a, const Tensor<T, B>&... rest) {
#if defined(__CUDACC_EXTENDED_LAMBDA__)
  static_assert(!__nv_is_extended_device_lambda_closure_type(F) ||
                    __nv_is_extended_device_lambda_with_preserved_return_type(F),
                "tessera::map: give the __device__ lambda a trailing return type, or use map_to");
#endif
  using R = detail::map_result_t<F, T0, T...>;
  static_assert(element_type<R>,
                "tessera::map: the functor's result type is not a tensor element type");
  a.check_defined("map");
  (rest.check_defined("map"), ...);
  Tensor<R, B> out(detail::broadcast_all("map", a.shape(), rest.shape()...));
  detail::launch_map(f, out, a, rest...);
  return out;
}

/// Out-parameter form of map: writes f(inputs...) into out, converting to out's element type.
/// The inputs must broadcast to out's shape. out may be one of the inputs (in place); an input
/// that partially overlaps out is read as if copied first. Returns out.
template <element_type O, class B, class F, element_type... T>
const Tensor<O, B>& map_to(const Tensor<O, B>& out, F f, const Tensor<T, B>&... in) {
  out.check_defined("map_to");
  (in.check_defined("map_to"), ...);
  const Shape s = detail::broadcast_all("map_to", out.shape(), in.shape()...);
  if (!(s == out.shape()))
    detail::fail<shape_error>("map_to", "inputs broadcast to ", s, ", not to the output's shape ",
                              out.shape());
  detail::begin_write("map_to", out);
  detail::launch_map(f, out, in...);
  return out;
}

TESSERA_END_NAMESPACE

// tessera/autograd/reduce.hpp - Variable overloads of the reductions: sum, mean, var, std, max,
// min, logsumexp, norm.
#pragma once

#include "elementwise.hpp"
#include "grad_fn.hpp"

TESSERA_BEGIN_NAMESPACE
namespace autograd::detail {

/// x's shape with the reduced axes set to 1 (the keepdim shape of a reduction over axes).
inline Shape reduced_keep_shape(const Shape& x, const Axes& axes) {
  Shape s = x;
  if (axes.empty()) {
    for (int d = 0; d < s.rank(); ++d) s[d] = 1;
  } else {
    for (int64_t a : axes) s[tessera::detail::wrap_axis("backward", a, x.rank())] = 1;
  }
  return s;
}

/// g (the reduction's output gradient, keepdim or not) as a view broadcast over x's shape.
template <class T, class B>
Tensor<T, B> expand_reduced(const Tensor<T, B>& g, const Shape& x, const Axes& axes) {
  return g.reshape(reduced_keep_shape(x, axes).span()).broadcast_to(x);
}

}  // namespace autograd::detail

/// Sum over axes (all if empty); the gradient is broadcast back over the reduced axes.
template <element_type T, class B>
Variable<T, B> sum(const Variable<T, B>& x, const Axes& axes = {}, bool keepdim = false) {
  return autograd::detail::record("sum", sum(x.value(), axes, keepdim), {&x}, {},
                                  [s = x.shape(), axes](const autograd::backward_context<T, B>& c) {
                                    c.give(0, autograd::detail::expand_reduced(c.grad(), s, axes),
                                           false);
                                  });
}
/// Mean over axes (all if empty).
template <element_type T, class B>
Variable<T, B> mean(const Variable<T, B>& x, const Axes& axes = {}, bool keepdim = false) {
  Tensor<T, B> y = mean(x.value(), axes, keepdim);
  const int64_t count = y.numel() == 0 ? 0 : x.numel() / y.numel();
  return autograd::detail::record(
      "mean", y, {&x}, {}, [s = x.shape(), axes, count](const autograd::backward_context<T, B>& c) {
        const T scale = T(1) / static_cast<T>(count);
        c.give(0, autograd::detail::expand_reduced(c.grad(), s, axes) * scale);
      });
}
/// Variance over axes with the given correction (1: unbiased, as torch.var's default).
template <element_type T, class B>
Variable<T, B> var(const Variable<T, B>& x, const Axes& axes = {}, bool keepdim = false,
                   double correction = 1.0) {
  Tensor<T, B> y = var(x.value(), axes, keepdim, correction);
  const int64_t count = y.numel() == 0 ? 0 : x.numel() / y.numel();
  return autograd::detail::record(
      "var", y, {&x}, {x.value()},
      [xv = x.value(), axes, count, correction](const autograd::backward_context<T, B>& c) {
        const T scale = static_cast<T>(2.0 / (static_cast<double>(count) - correction));
        const Tensor<T, B> m = mean(xv, axes, true);
        const Tensor<T, B> g = autograd::detail::expand_reduced(c.grad(), xv.shape(), axes);
        c.give(0, map(autograd::grad_fn::var<T>{scale}, g, xv, m));
      });
}
/// Standard deviation over axes (sqrt of var with the same correction).
template <element_type T, class B>
Variable<T, B> std(const Variable<T, B>& x, const Axes& axes = {}, bool keepdim = false,
                   double correction = 1.0) {
  return sqrt(var(x, axes, keepdim, correction));
}

namespace autograd::detail {
/// max or min: the gradient goes to the elements equal to the extreme, split evenly among ties
/// (as torch.amax / torch.amin).
template <class T, class B>
Variable<T, B> extreme_of(std::string_view op, Tensor<T, B> y, const Variable<T, B>& x,
                          const Axes& axes) {
  return record(op, y, {&x}, {x.value(), y},
                [xv = x.value(), y, axes](const backward_context<T, B>& c) {
                  const Tensor<T, B> ye = expand_reduced(y, xv.shape(), axes);
                  const Tensor<T, B> hits = map(grad_fn::hit<T>{}, xv, ye);
                  const Tensor<T, B> g = expand_reduced(c.grad(), xv.shape(), axes);
                  // The tie count has the keepdim shape and broadcasts over the reduced axes.
                  c.give(0, map(grad_fn::share<T>{}, g, hits, sum(hits, axes, true)));
                });
}
}  // namespace autograd::detail

/// Maximum over axes (all if empty); tied maxima share the gradient equally.
template <element_type T, class B>
Variable<T, B> max(const Variable<T, B>& x, const Axes& axes = {}, bool keepdim = false) {
  return autograd::detail::extreme_of("max", max(x.value(), axes, keepdim), x, axes);
}
/// Minimum over axes (all if empty); tied minima share the gradient equally.
template <element_type T, class B>
Variable<T, B> min(const Variable<T, B>& x, const Axes& axes = {}, bool keepdim = false) {
  return autograd::detail::extreme_of("min", min(x.value(), axes, keepdim), x, axes);
}
/// log(sum(exp(x))) over axes, computed stably; the gradient is softmax(x) over those axes.
template <element_type T, class B>
Variable<T, B> logsumexp(const Variable<T, B>& x, const Axes& axes = {}, bool keepdim = false) {
  Tensor<T, B> y = logsumexp(x.value(), axes, keepdim);
  return autograd::detail::record(
      "logsumexp", y, {&x}, {x.value(), y},
      [xv = x.value(), y, axes](const autograd::backward_context<T, B>& c) {
        const Tensor<T, B> ye = autograd::detail::expand_reduced(y, xv.shape(), axes);
        const Tensor<T, B> g = autograd::detail::expand_reduced(c.grad(), xv.shape(), axes);
        c.give(0, map(autograd::grad_fn::logsumexp<T>{}, g, xv, ye));
      });
}
/// The 2-norm over axes (all if empty); the gradient is x / norm (0 where the norm is 0).
template <element_type T, class B>
Variable<T, B> norm(const Variable<T, B>& x, const Axes& axes = {}, bool keepdim = false) {
  Tensor<T, B> y = norm(x.value(), 2.0, axes, keepdim);
  return autograd::detail::record(
      "norm", y, {&x}, {x.value(), y},
      [xv = x.value(), y, axes](const autograd::backward_context<T, B>& c) {
        const Tensor<T, B> ye = autograd::detail::expand_reduced(y, xv.shape(), axes);
        const Tensor<T, B> g = autograd::detail::expand_reduced(c.grad(), xv.shape(), axes);
        c.give(0, map(autograd::grad_fn::norm<T>{}, g, xv, ye));
      });
}

TESSERA_END_NAMESPACE

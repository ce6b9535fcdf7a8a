// tessera/ops/reduce.hpp - reductions over any set of axes: sum, mean, var, std, min, max,
// argmin, argmax, prod, norm, logsumexp.
#pragma once

#include "../kernel/reducers.hpp"
#include "elementwise.hpp"

TESSERA_BEGIN_NAMESPACE

/// A set of axes to reduce (negative axes count from the end); empty means every axis.
using Axes = detail::dim_list;

namespace detail {

/// The reduction's geometry: which input dims are reduced, the permuted input (kept dims first,
/// reduced last), the output shape with and without keepdim, and the reduced element count.
template <class T, class B>
struct reduction_plan {
  Tensor<T, B> permuted;
  int kept = 0;
  Shape out_shape, keep_shape;
  int64_t count = 1;

  reduction_plan(std::string_view op, const Tensor<T, B>& x, const Axes& axes) {
    x.check_defined(op);
    const int r = x.rank();
    bool reduced[max_rank] = {};
    if (axes.empty()) {
      for (int d = 0; d < r; ++d) reduced[d] = true;
    } else {
      for (int64_t a : axes) {
        const int d = wrap_axis(op, a, r);
        if (r == 0) continue;  // a scalar reduces to itself
        if (reduced[d]) fail<index_error>(op, "axis ", a, " repeated in ", axes.to_string());
        reduced[d] = true;
      }
    }
    std::vector<int64_t> perm;
    for (int d = 0; d < r; ++d)
      if (!reduced[d]) perm.push_back(d), out_shape.push_back(x.shape()[d]);
    kept = static_cast<int>(perm.size());
    for (int d = 0; d < r; ++d)
      if (reduced[d]) perm.push_back(d), count *= x.shape()[d];
    for (int d = 0; d < r; ++d) keep_shape.push_back(reduced[d] ? 1 : x.shape()[d]);
    permuted = x.permute(perm);
  }
};

/// Runs reducer `red` over the plan and returns the output (with keepdim's unit dims if asked).
template <class Out, class R, class T, class B>
Tensor<Out, B> run_reduction(const R& red, const reduction_plan<T, B>& plan, bool keepdim) {
  Tensor<Out, B> out(plan.out_shape);
  const Tensor<T, B>& in = plan.permuted;
  backend::reduce_kernel<B>::run(red, strided<const T>{in.data(), in.shape(), in.strides()},
                                 plan.kept, out.view_ref());
  return keepdim ? out.view(plan.keep_shape) : out;
}

template <class T, class B>
void require_nonempty(std::string_view op, const reduction_plan<T, B>& plan,
                      const Tensor<T, B>& x) {
  if (plan.count == 0)
    fail<shape_error>(op, "cannot reduce zero elements of a tensor of shape ", x.shape(),
                      " (the result has no identity)");
}

/// Result type of sum/prod: the input type for floating inputs, int64 for integers and bool.
template <class T>
using sum_result_t = std::conditional_t<is_floating_v<T>, T, int64_t>;
/// Result type of mean/var/std/norm/logsumexp: the input type for floating inputs, else float.
template <class T>
using real_result_t = std::conditional_t<is_floating_v<T>, T, float>;

}  // namespace detail

/// Sum over `axes` (all if empty); keepdim keeps reduced dims with extent 1. Floating sums
/// accumulate in float (double for double) blockwise and pairwise: accurate and identical for
/// any thread count. Integer sums give int64.
template <element_type T, class B>
Tensor<detail::sum_result_t<T>, B> sum(const Tensor<T, B>& x, const Axes& axes = {},
                                       bool keepdim = false) {
  detail::reduction_plan<T, B> plan("sum", x, axes);
  using O = detail::sum_result_t<T>;
  return detail::run_reduction<O>(red::sum<T, accum_t<T>, O>{}, plan, keepdim);
}
/// Mean over axes; NaN for an empty reduction.
template <element_type T, class B>
Tensor<detail::real_result_t<T>, B> mean(const Tensor<T, B>& x, const Axes& axes = {},
                                         bool keepdim = false) {
  detail::reduction_plan<T, B> plan("mean", x, axes);
  using O = detail::real_result_t<T>;
  using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
  red::sum<T, Acc, O> r;
  r.scale =
      plan.count ? 1.0 / static_cast<double>(plan.count) : std::numeric_limits<double>::quiet_NaN();
  return detail::run_reduction<O>(r, plan, keepdim);
}
/// Product over axes (1 for an empty reduction).
template <element_type T, class B>
Tensor<detail::sum_result_t<T>, B> prod(const Tensor<T, B>& x, const Axes& axes = {},
                                        bool keepdim = false) {
  detail::reduction_plan<T, B> plan("prod", x, axes);
  using O = detail::sum_result_t<T>;
  return detail::run_reduction<O>(red::prod<T, accum_t<T>, O>{}, plan, keepdim);
}
/// Maximum over axes (NaN propagates); shape_error for an empty reduction.
template <element_type T, class B>
Tensor<T, B> max(const Tensor<T, B>& x, const Axes& axes = {}, bool keepdim = false) {
  detail::reduction_plan<T, B> plan("max", x, axes);
  detail::require_nonempty("max", plan, x);
  return detail::run_reduction<T>(red::extreme<T, true>{}, plan, keepdim);
}
/// Minimum over axes (NaN propagates); shape_error for an empty reduction.
template <element_type T, class B>
Tensor<T, B> min(const Tensor<T, B>& x, const Axes& axes = {}, bool keepdim = false) {
  detail::reduction_plan<T, B> plan("min", x, axes);
  detail::require_nonempty("min", plan, x);
  return detail::run_reduction<T>(red::extreme<T, false>{}, plan, keepdim);
}
/// Index of the first maximum along `axis` (over the flattened tensor when axis is omitted);
/// a NaN counts as the maximum. int64 result.
template <element_type T, class B>
Tensor<int64_t, B> argmax(const Tensor<T, B>& x, std::optional<int64_t> axis = {},
                          bool keepdim = false) {
  const Tensor<T, B> src = axis ? x : x.reshape({-1});
  detail::reduction_plan<T, B> plan("argmax", src, axis ? Axes{*axis} : Axes{});
  detail::require_nonempty("argmax", plan, x);
  return detail::run_reduction<int64_t>(red::arg_extreme<T, true>{}, plan, keepdim && axis);
}
/// Index of the first minimum along `axis` (flattened when omitted); NaN counts as the minimum.
template <element_type T, class B>
Tensor<int64_t, B> argmin(const Tensor<T, B>& x, std::optional<int64_t> axis = {},
                          bool keepdim = false) {
  const Tensor<T, B> src = axis ? x : x.reshape({-1});
  detail::reduction_plan<T, B> plan("argmin", src, axis ? Axes{*axis} : Axes{});
  detail::require_nonempty("argmin", plan, x);
  return detail::run_reduction<int64_t>(red::arg_extreme<T, false>{}, plan, keepdim && axis);
}
/// Variance over axes with Bessel-style `correction` (1: sample variance, 0: population), in two
/// passes (mean, then squared deviations) for accuracy. NaN when count - correction <= 0.
template <element_type T, class B>
Tensor<detail::real_result_t<T>, B> var(const Tensor<T, B>& x, const Axes& axes = {},
                                        bool keepdim = false, double correction = 1.0) {
  detail::reduction_plan<T, B> plan("var", x, axes);
  using O = detail::real_result_t<T>;
  using C = compute_t<O>;
  const auto m = mean(x, axes, true).template astype<C>();
  const auto dev = map(fn::cast_args<C, fn::sub>{}, x, m);  // x - mean, in compute precision
  detail::reduction_plan<C, B> plan2("var", dev, axes);
  red::sum<C, C, O, 2> r;  // sum(d^2) * scale
  const double denom = static_cast<double>(plan.count) - correction;
  r.scale = denom > 0 ? 1.0 / denom : std::numeric_limits<double>::quiet_NaN();
  return detail::run_reduction<O>(r, plan2, keepdim);
}
/// Standard deviation: sqrt(var(x, axes, keepdim, correction)).
template <element_type T, class B>
Tensor<detail::real_result_t<T>, B> std(const Tensor<T, B>& x, const Axes& axes = {},
                                        bool keepdim = false, double correction = 1.0) {
  return sqrt(var(x, axes, keepdim, correction));
}
/// p-norm over axes: p = 2 (default), 1, infinity, or any p > 0.
template <element_type T, class B>
Tensor<detail::real_result_t<T>, B> norm(const Tensor<T, B>& x, double p = 2.0,
                                         const Axes& axes = {}, bool keepdim = false) {
  detail::reduction_plan<T, B> plan("norm", x, axes);
  using O = detail::real_result_t<T>;
  using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
  if (!(p > 0)) detail::fail<error>("norm", "p = ", p, " must be positive");
  if (std::isinf(p)) {
    if constexpr (std::is_same_v<O, T>)
      return detail::run_reduction<O>(red::extreme<T, true, true>{}, plan, keepdim);
    else
      return detail::run_reduction<T>(red::extreme<T, true, true>{}, plan, keepdim)
          .template astype<O>();
  }
  if (p == 2) return detail::run_reduction<O>(red::sum<T, Acc, O, 2, true>{}, plan, keepdim);
  if (p == 1) return detail::run_reduction<O>(red::sum<T, Acc, O, 1>{}, plan, keepdim);
  return detail::run_reduction<O>(red::pnorm<T, Acc, O>{static_cast<Acc>(p)}, plan, keepdim);
}
/// log(sum(exp(x))) over axes, computed as m + log(sum(exp(x - m))) with m the maximum, so it
/// neither overflows nor underflows; -inf for all -inf inputs, NaN propagates.
template <element_type T, class B>
Tensor<detail::real_result_t<T>, B> logsumexp(const Tensor<T, B>& x, const Axes& axes = {},
                                              bool keepdim = false) {
  using O = detail::real_result_t<T>;
  using C = compute_t<O>;
  detail::reduction_plan<T, B> plan("logsumexp", x, axes);
  const auto xc = x.template astype<C>();
  auto m = max(xc, axes, true);
  // An infinite maximum would give inf - inf; shift by 0 there instead (the sum then is 0 or inf).
  m = map(fn::finite_or_zero{}, m);
  const auto e = map(fn::exp_diff{}, xc, m);
  auto s = sum(e, axes, true);
  auto r = map(fn::add_log{}, m, s);
  if (!keepdim) r = r.reshape(plan.out_shape);
  if constexpr (std::is_same_v<O, C>)
    return r;
  else
    return r.template astype<O>();
}

TESSERA_END_NAMESPACE

// tessera/autograd/conv.hpp - Variable overloads of the convolutions and pooling ops, whose
// backward passes are the tensor-level *_backward functions of ops/conv.hpp and ops/pool.hpp.
#pragma once

#include "../ops/conv.hpp"
#include "../ops/pool.hpp"
#include "elementwise.hpp"

TESSERA_BEGIN_NAMESPACE

namespace autograd::detail {
template <class T, class B>
Tensor<T, B> value_or_none(const Variable<T, B>& v) {
  return v.defined() ? v.value() : Tensor<T, B>();
}

}  // namespace autograd::detail

/// 2-D convolution, as tessera::conv2d (bias may be an undefined Variable; opts.relu fuses a
/// ReLU). The input gradient is computed only when x requires one (a first layer's never does).
template <element_type T, class B>
Variable<T, B> conv2d(const Variable<T, B>& x, const Variable<T, B>& w, const Variable<T, B>& bias,
                      const Conv2dOptions& opts = {}) {
  Tensor<T, B> y = conv2d(x.value(), w.value(), autograd::detail::value_or_none(bias), opts);
  const bool relu = opts.relu;
  return autograd::detail::record(
      "conv2d", y, {&x, &w, &bias}, {x.value(), w.value(), relu ? y : Tensor<T, B>()},
      [xv = x.value(), wv = w.value(), y = relu ? y : Tensor<T, B>(),
       opts](const autograd::backward_context<T, B>& c) {
        const Tensor<T, B> g =
            autograd::detail::relu_and_bias_grad("conv backward", c, c.grad(), y, opts.relu);
        if (c.needs(0)) c.give(0, conv2d_backward_input(g, wv, xv.shape(), opts));
        if (c.needs(1)) c.give(1, conv2d_backward_weight(g, xv, wv.shape(), opts));
      });
}
/// 2-D convolution without bias.
template <element_type T, class B>
Variable<T, B> conv2d(const Variable<T, B>& x, const Variable<T, B>& w,
                      const Conv2dOptions& opts = {}) {
  return conv2d(x, w, Variable<T, B>(), opts);
}

/// 1-D convolution, as tessera::conv1d (bias may be undefined).
template <element_type T, class B>
Variable<T, B> conv1d(const Variable<T, B>& x, const Variable<T, B>& w, const Variable<T, B>& bias,
                      const Conv1dOptions& opts = {}) {
  Tensor<T, B> y = conv1d(x.value(), w.value(), autograd::detail::value_or_none(bias), opts);
  return autograd::detail::record(
      "conv1d", y, {&x, &w, &bias}, {x.value(), w.value(), opts.relu ? y : Tensor<T, B>()},
      [xv = x.value(), wv = w.value(), y = opts.relu ? y : Tensor<T, B>(),
       opts](const autograd::backward_context<T, B>& c) {
        const Tensor<T, B> g =
            autograd::detail::relu_and_bias_grad("conv backward", c, c.grad(), y, opts.relu);
        if (c.needs(0)) c.give(0, conv1d_backward_input(g, wv, xv.shape(), opts));
        if (c.needs(1)) c.give(1, conv1d_backward_weight(g, xv, wv.shape(), opts));
      });
}
template <element_type T, class B>
Variable<T, B> conv1d(const Variable<T, B>& x, const Variable<T, B>& w,
                      const Conv1dOptions& opts = {}) {
  return conv1d(x, w, Variable<T, B>(), opts);
}

/// Transposed 2-D convolution, as tessera::conv_transpose2d (bias may be undefined).
template <element_type T, class B>
Variable<T, B> conv_transpose2d(const Variable<T, B>& x, const Variable<T, B>& w,
                                const Variable<T, B>& bias,
                                const ConvTranspose2dOptions& opts = {}) {
  return autograd::detail::record(
      "conv_transpose2d",
      conv_transpose2d(x.value(), w.value(), autograd::detail::value_or_none(bias), opts),
      {&x, &w, &bias}, {x.value(), w.value()},
      [xv = x.value(), wv = w.value(), opts](const autograd::backward_context<T, B>& c) {
        const Tensor<T, B>& g = c.grad();
        if (c.needs(0)) c.give(0, conv_transpose2d_backward_input(g, wv, xv.shape(), opts));
        if (c.needs(1)) c.give(1, conv_transpose2d_backward_weight(g, xv, wv.shape(), opts));
        if (c.needs(2)) c.give(2, conv2d_backward_bias(g));
      });
}
template <element_type T, class B>
Variable<T, B> conv_transpose2d(const Variable<T, B>& x, const Variable<T, B>& w,
                                const ConvTranspose2dOptions& opts = {}) {
  return conv_transpose2d(x, w, Variable<T, B>(), opts);
}

/// Max pooling, as tessera::max_pool2d; the gradient goes to each window's maximum (indices
/// are computed only when the op is recorded). The backward pass knows the windows its indices came
/// from, which lets a device gather the gradient without checking them
/// (tessera::detail::max_pool2d_backward_of_forward).
template <element_type T, class B>
Variable<T, B> max_pool2d(const Variable<T, B>& x, const Pool2dOptions& opts) {
  if (!autograd::detail::will_record({&x})) return Variable<T, B>(max_pool2d(x.value(), opts));
  const auto plan = tessera::detail::max_pool_plan("max_pool2d_with_indices", x.value(), opts);
  auto r = tessera::detail::max_pool_with_indices(plan, x.value());
  return autograd::detail::record(
      "max_pool2d", r.values, {&x}, {},
      [s = x.shape(), idx = r.indices, plan](const autograd::backward_context<T, B>& c) {
        c.give(0, tessera::detail::max_pool2d_backward_of_forward(plan, c.grad(), idx, s));
      });
}
namespace autograd::detail {
/// max_pool2d(conv2d(x, w, bias, opts with relu), pool) as one node: what nn::Sequential runs
/// for Conv2d, ReLU, MaxPool2d. The result and the input and weight gradients are those of the
/// three ops, bit for bit; the bias gradient adds the same terms in another order.
///
/// Why one node: the gradient reaching the convolution is zero except at each window's
/// maximum, where the ReLU output is the pooled value itself. So the ReLU mask can be applied
/// to the pooled gradient with the pooled output (pooled > 0), and the bias gradient summed
/// there: a quarter of the data for 2 x 2 windows, where the separate ops mask and sum the
/// whole convolution output (its gradient, its output, the masked copy). The convolution's
/// output is not kept for the backward either.
template <class T, class B>
Variable<T, B> conv2d_relu_max_pool(const Variable<T, B>& x, const Variable<T, B>& w,
                                    const Variable<T, B>& bias, Conv2dOptions opts,
                                    const Pool2dOptions& pool) {
  opts.relu = true;
  const Tensor<T, B> y = conv2d(x.value(), w.value(), value_or_none(bias), opts);
  if (!will_record({&x, &w, &bias})) return Variable<T, B>(max_pool2d(y, pool));
  const auto plan = tessera::detail::max_pool_plan("max_pool2d_with_indices", y, pool);
  auto r = tessera::detail::max_pool_with_indices(plan, y);
  return record(
      "conv2d_relu_max_pool2d", r.values, {&x, &w, &bias}, {x.value(), w.value(), r.values},
      [xv = x.value(), wv = w.value(), pooled = r.values, idx = r.indices, plan, ys = y.shape(),
       opts](const backward_context<T, B>& c) {
        const Tensor<T, B> gp = relu_and_bias_grad("conv backward", c, c.grad(), pooled, true);
        if (!c.needs(0) && !c.needs(1)) return;
        const Tensor<T, B> g = tessera::detail::max_pool2d_backward_of_forward(plan, gp, idx, ys);
        if (c.needs(0)) c.give(0, conv2d_backward_input(g, wv, xv.shape(), opts));
        if (c.needs(1)) c.give(1, conv2d_backward_weight(g, xv, wv.shape(), opts));
      });
}
}  // namespace autograd::detail

/// Average pooling, as tessera::avg_pool2d.
template <element_type T, class B>
Variable<T, B> avg_pool2d(const Variable<T, B>& x, const Pool2dOptions& opts) {
  return autograd::detail::record("avg_pool2d", avg_pool2d(x.value(), opts), {&x}, {},
                                  [s = x.shape(), opts](const autograd::backward_context<T, B>& c) {
                                    c.give(0, avg_pool2d_backward(c.grad(), s, opts));
                                  });
}
/// Adaptive average pooling to output_size, as tessera::adaptive_avg_pool2d.
template <element_type T, class B>
Variable<T, B> adaptive_avg_pool2d(const Variable<T, B>& x, std::array<int64_t, 2> output_size) {
  return autograd::detail::record("adaptive_avg_pool2d",
                                  adaptive_avg_pool2d(x.value(), output_size), {&x}, {},
                                  [s = x.shape()](const autograd::backward_context<T, B>& c) {
                                    c.give(0, adaptive_avg_pool2d_backward(c.grad(), s));
                                  });
}
/// Mean over H and W ([N, C, H, W] -> [N, C, 1, 1]), as tessera::global_avg_pool2d.
template <element_type T, class B>
Variable<T, B> global_avg_pool2d(const Variable<T, B>& x) {
  return autograd::detail::record("global_avg_pool2d", global_avg_pool2d(x.value()), {&x}, {},
                                  [s = x.shape()](const autograd::backward_context<T, B>& c) {
                                    const int r = s.rank();
                                    const T scale = T(1) / static_cast<T>(s[r - 1] * s[r - 2]);
                                    c.give(0, c.grad().broadcast_to(s) * scale);
                                  });
}

TESSERA_END_NAMESPACE

// tessera/autograd/loss.hpp - Variable overloads of softmax / log_softmax and of the losses:
// cross_entropy (integer labels or probabilities), nll_loss, mse_loss, l1_loss,
// binary_cross_entropy_with_logits.
#pragma once

#include "../ops/loss.hpp"
#include "grad_fn.hpp"
#include "reduce.hpp"

TESSERA_BEGIN_NAMESPACE

/// softmax along dim; backward: y * (g - sum(g * y, dim)).
template <element_type T, class B>
Variable<T, B> softmax(const Variable<T, B>& x, int64_t dim = -1) {
  Tensor<T, B> y = softmax(x.value(), dim);
  return autograd::detail::record(
      "softmax", y, {&x}, {y}, [y, dim](const autograd::backward_context<T, B>& c) {
        const Tensor<T, B> gy = sum(c.grad() * y, {dim}, true);
        c.give(0, map(autograd::grad_fn::softmax<T>{}, c.grad(), y, gy));
      });
}
/// log_softmax along dim; backward: g - exp(y) * sum(g, dim).
template <element_type T, class B>
Variable<T, B> log_softmax(const Variable<T, B>& x, int64_t dim = -1) {
  Tensor<T, B> y = log_softmax(x.value(), dim);
  return autograd::detail::record(
      "log_softmax", y, {&x}, {y}, [y, dim](const autograd::backward_context<T, B>& c) {
        const Tensor<T, B> gs = sum(c.grad(), {dim}, true);
        c.give(0, map(autograd::grad_fn::log_softmax<T>{}, c.grad(), y, gs));
      });
}

namespace autograd::detail {
template <class T, class B>
Variable<T, B> reduce_loss(const Variable<T, B>& per_element, Reduction r) {
  switch (r) {
    case Reduction::none:
      return per_element;
    case Reduction::sum:
      return sum(per_element);
    default:
      return mean(per_element);
  }
}
template <class T, class B>
void check_same_shape(std::string_view op, const Variable<T, B>& a, const Variable<T, B>& b) {
  if (!(a.shape() == b.shape()))
    tessera::detail::fail<shape_error>(op, "input of shape ", a.shape(), " and target of shape ",
                                       b.shape(), " differ");
}
}  // namespace autograd::detail

/// Cross-entropy of logits [N, C] against integer labels [N], fused (one pass forward, one
/// backward: softmax - target). See tessera::cross_entropy for the options and errors.
template <element_type T, class B>
Variable<T, B> cross_entropy(const Variable<T, B>& logits, const Tensor<int64_t, B>& labels,
                             const CrossEntropyOptions& opts = {}) {
  const Tensor<T, B>& x = logits.value();
  Tensor<T, B> lse;
  tessera::detail::label_count<T, B> counted;
  Tensor<T, B> loss = tessera::detail::cross_entropy_forward(x, labels, opts, lse, counted);
  // The backward pass reuses the forward pass's check and count.
  return autograd::detail::record(
      "cross_entropy", std::move(loss), {&logits}, {x, labels},
      [x, labels, opts, lse, counted](const autograd::backward_context<T, B>& c) {
        c.give(0, tessera::detail::cross_entropy_grad_checked(c.grad(), x, labels, opts, lse,
                                                              counted));
      });
}

/// Cross-entropy against class probabilities [N, C] (soft targets, which may require grad):
/// per sample -sum(target' * log_softmax(x)), target' = (1 - s) * target + s / C.
template <element_type T, class B>
Variable<T, B> cross_entropy(const Variable<T, B>& logits, const Variable<T, B>& target,
                             const CrossEntropyOptions& opts = {}) {
  if (logits.rank() != 2)
    tessera::detail::fail<shape_error>("cross_entropy", "expects logits of shape [N, C], got ",
                                       logits.shape());
  autograd::detail::check_same_shape("cross_entropy", logits, target);
  Variable<T, B> t = target;
  if (opts.label_smoothing != 0) {
    const T s = static_cast<T>(opts.label_smoothing);
    t = target * (T(1) - s) + s / static_cast<T>(logits.shape()[1]);
  }
  Variable<T, B> per_sample = neg(sum(t * log_softmax(logits, 1), {1}));
  return autograd::detail::reduce_loss(per_sample, opts.reduction);
}

/// Negative log-likelihood of log-probabilities [N, C] at integer labels [N].
template <element_type T, class B>
Variable<T, B> nll_loss(const Variable<T, B>& log_probs, const Tensor<int64_t, B>& labels,
                        const NLLLossOptions& opts = {}) {
  static_assert(is_floating_v<T> && !is_low_precision_v<T>, "tessera::nll_loss: float or double");
  const auto counted = tessera::detail::check_class_problem("nll_loss", log_probs.value(), labels,
                                                            opts.ignore_index);
  // As cross_entropy: the backward pass reuses the forward pass's check and count.
  return autograd::detail::record(
      "nll_loss", tessera::detail::nll_loss_checked(log_probs.value(), labels, opts, counted),
      {&log_probs}, {labels},
      [s = log_probs.shape(), labels, opts, counted](const autograd::backward_context<T, B>& c) {
        c.give(0, tessera::detail::nll_loss_grad_checked(c.grad(), s, labels, opts, counted));
      });
}

/// Mean (or sum, or per-element) squared error between input and target of the same shape.
template <element_type T, class B>
Variable<T, B> mse_loss(const Variable<T, B>& input, const Variable<T, B>& target,
                        Reduction reduction = Reduction::mean) {
  autograd::detail::check_same_shape("mse_loss", input, target);
  const Variable<T, B> d = input - target;
  return autograd::detail::reduce_loss(d * d, reduction);
}
/// Mean (or sum, or per-element) absolute error between input and target of the same shape.
template <element_type T, class B>
Variable<T, B> l1_loss(const Variable<T, B>& input, const Variable<T, B>& target,
                       Reduction reduction = Reduction::mean) {
  autograd::detail::check_same_shape("l1_loss", input, target);
  return autograd::detail::reduce_loss(abs(input - target), reduction);
}

/// Binary cross-entropy on logits x against targets y in [0, 1] (same shape), computed stably
/// as max(x, 0) - x y + log(1 + exp(-|x|)). Gradients: sigmoid(x) - y for x, -x for y.
template <element_type T, class B>
Variable<T, B> binary_cross_entropy_with_logits(const Variable<T, B>& logits,
                                                const Variable<T, B>& target,
                                                Reduction reduction = Reduction::mean) {
  autograd::detail::check_same_shape("binary_cross_entropy_with_logits", logits, target);
  Tensor<T, B> per = map(autograd::grad_fn::bce_logits<T>{}, logits.value(), target.value());
  Variable<T, B> v = autograd::detail::record(
      "binary_cross_entropy_with_logits", std::move(per), {&logits, &target},
      {logits.value(), target.value()},
      [x = logits.value(), y = target.value()](const autograd::backward_context<T, B>& c) {
        if (c.needs(0)) c.give(0, map(autograd::grad_fn::bce_logits_grad<T>{}, c.grad(), x, y));
        if (c.needs(1)) c.give(1, map(autograd::grad_fn::neg_mul<T>{}, c.grad(), x));
      });
  return autograd::detail::reduce_loss(v, reduction);
}

TESSERA_END_NAMESPACE

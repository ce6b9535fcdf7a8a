// tessera/ops/loss.hpp - classification losses on tensors: cross_entropy with integer labels
// (fused log-softmax + pick, with label smoothing and an ignored label) and nll_loss, with the
// backward functions the autograd layer calls.
#pragma once

#include <cmath>

#include "activation.hpp"
#include "../backend/cpu/parallel.hpp"

TESSERA_BEGIN_NAMESPACE

/// How a loss combines its per-sample values: none (one per sample), mean, or sum.
enum class Reduction { none, mean, sum };

/// Options of cross_entropy (torch.nn.functional.cross_entropy's).
struct CrossEntropyOptions {
  Reduction reduction = Reduction::mean;
  /// Mixes the target with the uniform distribution: (1 - s) * one_hot + s / C.
  double label_smoothing = 0.0;
  /// Samples with this label contribute nothing and are not counted by the mean.
  int64_t ignore_index = -100;
};

/// Options of nll_loss.
struct NLLLossOptions {
  Reduction reduction = Reduction::mean;
  int64_t ignore_index = -100;
};

namespace detail {

template <class T, class B>
void check_class_problem(std::string_view op, const Tensor<T, B>& scores,
                         const Tensor<int64_t, B>& labels, int64_t ignore_index) {
  static_assert(backend::memory<B>::host_accessible,
                "tessera: cross_entropy / nll_loss run on the CPU backend only in this release");
  scores.check_defined(op), labels.check_defined(op);
  if (scores.rank() != 2)
    fail<shape_error>(op, "expects scores of shape [N, C], got ", scores.shape());
  if (labels.rank() != 1 || labels.shape()[0] != scores.shape()[0])
    fail<shape_error>(op, "labels of shape ", labels.shape(), " for scores of shape ",
                      scores.shape(), " (expected [", scores.shape()[0], "])");
  const int64_t n = scores.shape()[0], c = scores.shape()[1];
  const Tensor<int64_t, B> l = labels.contiguous();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t v = l.data()[i];
    if (v != ignore_index && (v < 0 || v >= c))
      fail<index_error>(op, "label ", v, " of sample ", i, " is outside [0, ", c, ")");
  }
}

/// Number of samples the mean divides by (those whose label is not ignored).
template <class B>
int64_t counted_samples(const Tensor<int64_t, B>& labels, int64_t ignore_index) {
  const Tensor<int64_t, B> l = labels.contiguous();
  int64_t k = 0;
  for (int64_t i = 0; i < l.numel(); ++i) k += l.data()[i] != ignore_index;
  return k;
}

/// Per-sample losses [N] in `loss` and row log-sum-exps [N] in `lse`.
template <class T, class B>
void cross_entropy_rows(const Tensor<T, B>& logits, const Tensor<int64_t, B>& labels,
                        const CrossEntropyOptions& o, const Tensor<T, B>& loss,
                        const Tensor<T, B>& lse) {
  const Tensor<T, B> x = logits.contiguous();
  const Tensor<int64_t, B> l = labels.contiguous();
  const int64_t n = x.shape()[0], c = x.shape()[1];
  const double smooth = o.label_smoothing, keep = 1.0 - smooth;
  const T* px = x.data();
  const int64_t* pl = l.data();
  T *ploss = loss.data(), *plse = lse.data();
  parallel_for(n, 4 * c, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const T* row = px + i * c;
      double m = -std::numeric_limits<double>::infinity(), total = 0;
      for (int64_t j = 0; j < c; ++j) m = std::max(m, static_cast<double>(row[j])), total += row[j];
      double s = 0;
      for (int64_t j = 0; j < c; ++j) s += std::exp(static_cast<double>(row[j]) - m);
      const double lsev = c == 0 ? m : m + std::log(s);
      plse[i] = static_cast<T>(lsev);
      if (pl[i] == o.ignore_index || c == 0) {
        ploss[i] = T(0);
        continue;
      }
      double v = lsev - keep * static_cast<double>(row[pl[i]]);
      if (smooth != 0) v -= smooth / static_cast<double>(c) * total;
      ploss[i] = static_cast<T>(v);
    }
  });
}

/// Combines per-sample losses by the reduction (mean over `count` samples).
template <class T, class B>
Tensor<T, B> reduce_loss(const Tensor<T, B>& per_sample, Reduction r, int64_t count) {
  if (r == Reduction::none) return per_sample;
  Tensor<T, B> total = sum(per_sample);
  if (r == Reduction::sum) return total;
  // PyTorch: the mean over zero counted samples is NaN (0 / 0).
  return total * static_cast<T>(1.0 / static_cast<double>(count));
}

}  // namespace detail

/// Cross-entropy of logits [N, C] against integer labels [N] (values in [0, C), or
/// ignore_index): per sample logsumexp(x) - x[label], with label smoothing mixing in the uniform
/// target. Returns a 0-d tensor (mean, sum) or [N] (none). Floating T; CPU backend.
/// Throws shape_error for other shapes and index_error for a label out of range.
template <element_type T, class B>
Tensor<T, B> cross_entropy(const Tensor<T, B>& logits, const Tensor<int64_t, B>& labels,
                           const CrossEntropyOptions& opts = {}) {
  static_assert(is_floating_v<T> && !is_low_precision_v<T>,
                "tessera::cross_entropy: float or double logits");
  detail::check_class_problem("cross_entropy", logits, labels, opts.ignore_index);
  if (!(opts.label_smoothing >= 0 && opts.label_smoothing <= 1))
    detail::fail<error>("cross_entropy", "label_smoothing = ", opts.label_smoothing,
                        " is outside [0, 1]");
  const int64_t n = logits.shape()[0];
  Tensor<T, B> loss(Shape{n}), lse(Shape{n});
  detail::cross_entropy_rows(logits, labels, opts, loss, lse);
  return detail::reduce_loss(loss, opts.reduction, detail::counted_samples(labels, opts.ignore_index));
}

/// Gradient of cross_entropy with respect to the logits: (softmax(x) - target) times the
/// incoming gradient, where grad_loss is 0-d (mean, sum) or [N] (none) and lse holds the rows'
/// logsumexp from the forward pass (recomputed when undefined).
template <element_type T, class B>
Tensor<T, B> cross_entropy_backward(const Tensor<T, B>& grad_loss, const Tensor<T, B>& logits,
                                    const Tensor<int64_t, B>& labels,
                                    const CrossEntropyOptions& opts = {},
                                    Tensor<T, B> lse = {}) {
  detail::check_class_problem("cross_entropy_backward", logits, labels, opts.ignore_index);
  const int64_t n = logits.shape()[0], c = logits.shape()[1];
  if (!lse.defined()) {
    lse = Tensor<T, B>(Shape{n});
    detail::cross_entropy_rows(logits, labels, opts, Tensor<T, B>(Shape{n}), lse);
  }
  const bool per_sample = opts.reduction == Reduction::none;
  if (per_sample ? !(grad_loss.shape() == Shape{n}) : grad_loss.numel() != 1)
    detail::fail<shape_error>("cross_entropy_backward", "grad_loss of shape ", grad_loss.shape(),
                              " for ", n, " samples");
  double scale = 1;
  if (opts.reduction == Reduction::mean)
    scale = 1.0 / static_cast<double>(detail::counted_samples(labels, opts.ignore_index));
  const Tensor<T, B> x = logits.contiguous(), g = grad_loss.contiguous(), ls = lse.contiguous();
  const Tensor<int64_t, B> l = labels.contiguous();
  Tensor<T, B> dx(logits.shape());
  const double smooth = opts.label_smoothing / static_cast<double>(c ? c : 1);
  const double keep = 1.0 - opts.label_smoothing;
  const T *px = x.data(), *pg = g.data(), *pls = ls.data();
  const int64_t* pl = l.data();
  T* pd = dx.data();
  detail::parallel_for(n, 4 * c, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      T* out = pd + i * c;
      if (pl[i] == opts.ignore_index) {
        std::fill(out, out + c, T(0));
        continue;
      }
      const double gi = static_cast<double>(pg[per_sample ? i : 0]) * scale;
      const T* row = px + i * c;
      const double lsev = pls[i];
      for (int64_t j = 0; j < c; ++j)
        out[j] = static_cast<T>(gi * (std::exp(static_cast<double>(row[j]) - lsev) - smooth));
      out[pl[i]] = static_cast<T>(out[pl[i]] - gi * keep);
    }
  });
  return dx;
}

/// Negative log-likelihood of log-probabilities [N, C] at integer labels [N]: -logp[i, label].
/// Returns a 0-d tensor (mean, sum) or [N] (none). Throws as cross_entropy.
template <element_type T, class B>
Tensor<T, B> nll_loss(const Tensor<T, B>& log_probs, const Tensor<int64_t, B>& labels,
                      const NLLLossOptions& opts = {}) {
  static_assert(is_floating_v<T> && !is_low_precision_v<T>, "tessera::nll_loss: float or double");
  detail::check_class_problem("nll_loss", log_probs, labels, opts.ignore_index);
  const int64_t n = log_probs.shape()[0];
  const Tensor<int64_t, B> l = labels.contiguous();
  Tensor<T, B> loss(Shape{n});
  for (int64_t i = 0; i < n; ++i) {
    const int64_t v = l.data()[i];
    loss.data()[i] = v == opts.ignore_index ? T(0) : static_cast<T>(-log_probs(i, v));
  }
  return detail::reduce_loss(loss, opts.reduction, detail::counted_samples(labels, opts.ignore_index));
}

/// Gradient of nll_loss with respect to log_probs: -grad at each sample's label, 0 elsewhere.
template <element_type T, class B>
Tensor<T, B> nll_loss_backward(const Tensor<T, B>& grad_loss, const Shape& log_probs_shape,
                               const Tensor<int64_t, B>& labels, const NLLLossOptions& opts = {}) {
  const int64_t n = log_probs_shape[0];
  const bool per_sample = opts.reduction == Reduction::none;
  if (per_sample ? !(grad_loss.shape() == Shape{n}) : grad_loss.numel() != 1)
    detail::fail<shape_error>("nll_loss_backward", "grad_loss of shape ", grad_loss.shape(),
                              " for ", n, " samples");
  double scale = 1;
  if (opts.reduction == Reduction::mean)
    scale = 1.0 / static_cast<double>(detail::counted_samples(labels, opts.ignore_index));
  Tensor<T, B> d = zeros<T, B>(log_probs_shape);
  const Tensor<T, B> g = grad_loss.contiguous();
  const Tensor<int64_t, B> l = labels.contiguous();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t v = l.data()[i];
    if (v != opts.ignore_index)
      d(i, v) = static_cast<T>(-static_cast<double>(g.data()[per_sample ? i : 0]) * scale);
  }
  return d;
}

TESSERA_END_NAMESPACE

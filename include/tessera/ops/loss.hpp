// tessera/ops/loss.hpp - classification losses on tensors: cross_entropy with integer labels
// (fused log-softmax + pick, with label smoothing and an ignored label) and nll_loss, with the
// backward functions the autograd layer calls. A backend with row kernels
// (loss_kernel<B>::cross_entropy_rows and cross_entropy_grad: the CPU) runs each row as one
// fused loop; elsewhere (CUDA past its fused kernel's limits, user backends) the same formulas
// are composed from map and reductions, with labels compared against column numbers.
#pragma once

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <string>

#include "../backend/cpu/memory.hpp"  // host copies of labels, to check them on the host
#include "../kernel/loss_problem.hpp"
#include "activation.hpp"

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

/// The labels on the host, contiguous (for a device backend, one copy of N integers).
template <class B>
Tensor<int64_t, cpu> host_labels(const Tensor<int64_t, B>& labels) {
  if constexpr (std::is_same_v<B, cpu>)
    return labels.contiguous();
  else
    return labels.template to<cpu>();
}

/// Checks labels [N] on the host against c classes (every label in [0, c) or ignore_index) and
/// returns how many are not ignore_index.
template <class B>
int64_t count_labels_on_host(std::string_view op, int64_t c, const Tensor<int64_t, B>& labels,
                             int64_t ignore_index) {
  const Tensor<int64_t, cpu> l = host_labels(labels);
  int64_t counted = 0;
  for (int64_t i = 0; i < l.numel(); ++i) {
    const int64_t v = l.data()[i];
    if (v == ignore_index) continue;
    if (v < 0 || v >= c)
      fail<index_error>(op, "label ", v, " of sample ", i, " is outside [0, ", c, ")");
    ++counted;
  }
  return counted;
}

/// How many samples the mean of a class loss divides by (labels that are not ignore_index):
/// counted on the host, or, where the backend checks labels on the device, a 0-d tensor the
/// device counted.
template <class T, class B>
struct label_count {
  int64_t host = 0;
  Tensor<T, B> device;  // defined when the device counted
};

/// Checks that scores are [N, C] and labels [N] (op names the caller in the shape_error).
template <class B>
void check_label_shapes(std::string_view op, const Shape& scores,
                        const Tensor<int64_t, B>& labels) {
  labels.check_defined(op);
  if (scores.rank() != 2) fail<shape_error>(op, "expects scores of shape [N, C], got ", scores);
  if (labels.rank() != 1 || labels.shape()[0] != scores[0])
    fail<shape_error>(op, "labels of shape ", labels.shape(), " for scores of shape ", scores,
                      " (expected [", scores[0], "])");
}

/// Checks labels [N] for scores of shape [N, C] (every label in [0, C) or ignore_index) and
/// counts those the mean divides by. The shapes are checked at once. The values are checked on
/// the host, except where the backend has loss_kernel<B>::check_labels (CUDA): there one launch
/// checks and counts them on the device, without a wait, and a bad label throws the same
/// index_error at the next wait for the device (backend/cuda/deferred_check.hpp).
template <class T, class B>
label_count<T, B> check_labels(std::string_view op, const Shape& scores,
                               const Tensor<int64_t, B>& labels, int64_t ignore_index) {
  check_label_shapes(op, scores, labels);
  const int64_t n = scores[0], c = scores[1];
  if constexpr (requires(const int64_t* l, int64_t v, T* out, std::function<void()> f) {
                  backend::loss_kernel<B>::check_labels(l, v, v, v, out, f);
                }) {
    const Tensor<int64_t, B> l = labels.contiguous();
    Tensor<T, B> counted(Shape{});
    backend::loss_kernel<B>::check_labels(l.data(), n, c, ignore_index, counted.data(),
                                          [op = std::string(op), l, c, ignore_index] {
                                            count_labels_on_host(op, c, l, ignore_index);
                                          });
    return {0, std::move(counted)};
  } else {
    return {count_labels_on_host(op, c, labels, ignore_index), {}};
  }
}

/// check_labels for a scores tensor (which must be defined).
template <class T, class B>
label_count<T, B> check_class_problem(std::string_view op, const Tensor<T, B>& scores,
                                      const Tensor<int64_t, B>& labels, int64_t ignore_index) {
  scores.check_defined(op);
  return check_labels<T>(op, scores.shape(), labels, ignore_index);
}

/// x times 1 / count, as the host scales a mean (so both give the same bits); 0 / 0 is NaN.
template <class T>
struct loss_times_reciprocal {
  TESSERA_HOST_DEVICE T operator()(T x, T count) const { return x * (T(1) / count); }
};

/// 1 / count for a mean on the host (the CPU loops scale by it); count.host is what the host
/// counted there.
template <class T, class B>
double mean_scale(Reduction r, const label_count<T, B>& count) {
  return r == Reduction::mean ? 1.0 / static_cast<double>(count.host) : 1.0;
}

/// Whether backend B has the cross-entropy row kernels (the CPU's).
template <class T, class B>
concept has_cross_entropy_rows = requires(const cross_entropy_rows_problem<T>& p,
                                          const cross_entropy_grad_problem<T>& g) {
  backend::loss_kernel<B>::cross_entropy_rows(p);
  backend::loss_kernel<B>::cross_entropy_grad(g);
};

/// Per-sample losses [N] in `loss` and row log-sum-exps [N] in `lse`, by the backend's row
/// kernel (has_cross_entropy_rows).
template <class T, class B>
void cross_entropy_rows(const Tensor<T, B>& logits, const Tensor<int64_t, B>& labels,
                        const CrossEntropyOptions& o, const Tensor<T, B>& loss,
                        const Tensor<T, B>& lse) {
  const Tensor<T, B> x = logits.contiguous();
  const Tensor<int64_t, B> l = labels.contiguous();
  const int64_t n = x.shape()[0], c = x.shape()[1];
  backend::loss_kernel<B>::cross_entropy_rows(cross_entropy_rows_problem<T>{
      .x = x.data(),
      .labels = l.data(),
      .n = n,
      .c = c,
      .ignore_index = o.ignore_index,
      .keep = 1.0 - o.label_smoothing,
      .smooth_per_class = c ? o.label_smoothing / static_cast<double>(c) : 0.0,
      .loss = loss.data(),
      .lse = lse.data()});
}

// ---- the composed path (backends the host cannot read) -----------------------------------------

/// Column numbers 0 .. c - 1 as a [1, c] tensor of backend B (read-only: callers share it).
/// Built once per class count and kept for the process (a copy from the host twice a training
/// step otherwise); the first build waits for the device once, so that ops on any stream may
/// read it. The cache is never destroyed (device memory must not be freed after the runtime has
/// shut down at exit) and assumes one device per process, as the CUDA GEMM's kernel choices do.
template <class B>
Tensor<int64_t, B> class_columns(int64_t c) {
  static std::mutex mu;
  static auto* cache = new std::map<int64_t, Tensor<int64_t, B>>;
  const std::lock_guard lock(mu);
  auto it = cache->find(c);
  if (it == cache->end()) {
    Tensor<int64_t, cpu> j(Shape{1, c});
    for (int64_t i = 0; i < c; ++i) j.data()[i] = i;
    it = cache->emplace(c, j.template to<B>()).first;
    backend::memory<B>::synchronize();
  }
  return it->second;
}

/// x where the column is the row's label, else 0: summed over a row, x[label] (0 when ignored).
template <class T>
struct loss_pick_label {
  TESSERA_HOST_DEVICE T operator()(T x, int64_t label, int64_t col) const {
    return label == col ? x : T(0);
  }
};

/// x[i, labels[i]] per row of x [N, C] (0 where the label is no column).
template <class T, class B>
Tensor<T, B> picked_scores(const Tensor<T, B>& x, const Tensor<int64_t, B>& labels) {
  const int64_t n = x.shape()[0], c = x.shape()[1];
  return sum(map(loss_pick_label<T>{}, x, labels.reshape({n, 1}), class_columns<B>(c)), {1});
}

/// One sample's cross-entropy from its row's logsumexp, x[label] and sum of x.
template <class T>
struct cross_entropy_sample {
  int64_t ignore_index;
  double keep, smooth_per_class;
  template <class L, class P, class S>
  TESSERA_HOST_DEVICE T operator()(L lse, P picked, S total, int64_t label) const {
    if (label == ignore_index) return T(0);
    T v = static_cast<T>(lse) - static_cast<T>(keep) * static_cast<T>(picked);
    if (smooth_per_class != 0) v -= static_cast<T>(smooth_per_class) * static_cast<T>(total);
    return v;
  }
};

/// d loss / d x[i, j] = g_i (softmax(x)_ij - smooth / C) - g_i keep [j == label_i].
template <class T>
struct cross_entropy_grad {
  int64_t ignore_index;
  double keep, smooth_per_class;
  TESSERA_HOST_DEVICE T operator()(T x, T lse, int64_t label, int64_t col, T g) const {
    using std::exp;
    if (label == ignore_index) return T(0);
    T v = g * (static_cast<T>(exp(x - lse)) - static_cast<T>(smooth_per_class));
    if (col == label) v -= g * static_cast<T>(keep);
    return v;
  }
};

/// One sample's negative log-likelihood from logp[label].
template <class T>
struct nll_sample {
  int64_t ignore_index;
  template <class P>
  TESSERA_HOST_DEVICE T operator()(P picked, int64_t label) const {
    return label == ignore_index ? T(0) : static_cast<T>(-static_cast<T>(picked));
  }
};

/// d nll / d logp[i, j] = -g_i at j == label_i (not ignored), else 0.
template <class T>
struct nll_grad {
  int64_t ignore_index;
  TESSERA_HOST_DEVICE T operator()(int64_t label, int64_t col, T g) const {
    return label == col && label != ignore_index ? static_cast<T>(-g) : T(0);
  }
};

/// F (cross_entropy_grad or nll_grad) with its last argument, the incoming gradient of a mean,
/// first times 1 / count (count a device scalar): the same operations as loss_times_reciprocal
/// followed by F, in one launch instead of two.
template <class T, class F>
struct gradient_over_count {
  F f;
  TESSERA_HOST_DEVICE T operator()(T x, T lse, int64_t label, int64_t col, T g, T count) const {
    return f(x, lse, label, col, g * (T(1) / count));
  }
  TESSERA_HOST_DEVICE T operator()(int64_t label, int64_t col, T g, T count) const {
    return f(label, col, g * (T(1) / count));
  }
};

/// The incoming loss gradient (over the host's count for a mean; a device count goes through
/// gradient_over_count instead), shaped to broadcast over [N, C]: [N, 1] per sample, [1, 1] for
/// a reduced loss.
template <class T, class B>
Tensor<T, B> loss_grad_column(const Tensor<T, B>& grad_loss, Reduction r,
                              const label_count<T, B>& count) {
  const Tensor<T, B> g =
      r == Reduction::mean ? grad_loss * static_cast<T>(mean_scale(r, count)) : grad_loss;
  return r == Reduction::none ? g.reshape({grad_loss.numel(), 1}) : g.reshape({1, 1});
}

/// Per-sample cross-entropy [N] of checked logits and labels, and the rows' logsumexp in lse
/// (kept by autograd for the backward pass): the backend's row kernel where it has one, composed
/// ops elsewhere.
template <class T, class B>
Tensor<T, B> cross_entropy_samples(const Tensor<T, B>& logits, const Tensor<int64_t, B>& labels,
                                   const CrossEntropyOptions& o, Tensor<T, B>& lse) {
  const int64_t n = logits.shape()[0], c = logits.shape()[1];
  Tensor<T, B> loss(Shape{n});
  if constexpr (has_cross_entropy_rows<T, B>) {
    lse = Tensor<T, B>(Shape{n});
    cross_entropy_rows(logits, labels, o, loss, lse);
  } else if (c == 0) {
    loss.fill_(T(0));
    lse = full<T, B>(Shape{n}, -std::numeric_limits<T>::infinity());
  } else {
    lse = logsumexp(logits, {1});
    const cross_entropy_sample<T> f{o.ignore_index, 1.0 - o.label_smoothing,
                                    o.label_smoothing / static_cast<double>(c)};
    loss = map(f, lse, picked_scores(logits, labels), sum(logits, {1}), labels);
  }
  return loss;
}

/// Combines per-sample losses by the reduction (mean over `count` samples).
template <class T, class B>
Tensor<T, B> reduce_loss(const Tensor<T, B>& per_sample, Reduction r,
                         const label_count<T, B>& count) {
  if (r == Reduction::none) return per_sample;
  Tensor<T, B> total = sum(per_sample);
  if (r == Reduction::sum) return total;
  // PyTorch: the mean over zero counted samples is NaN (0 / 0).
  if (count.device.defined()) return map(loss_times_reciprocal<T>{}, total, count.device);
  return total * static_cast<T>(mean_scale(r, count));
}

/// cross_entropy's forward pass, checks included: the reduced loss, with what its backward pass
/// needs left in lse (the rows' logsumexp) and counted (the samples the mean divided by). Where
/// the backend fuses it (loss_kernel<B>::cross_entropy: CUDA, small problems) one launch does it
/// all, labels checked as check_labels does on the device; else the row loop (CPU) or composed
/// ops.
template <class T, class B>
Tensor<T, B> cross_entropy_forward(const Tensor<T, B>& logits, const Tensor<int64_t, B>& labels,
                                   const CrossEntropyOptions& opts, Tensor<T, B>& lse,
                                   label_count<T, B>& counted) {
  constexpr std::string_view op = "cross_entropy";
  logits.check_defined(op);
  check_label_shapes(op, logits.shape(), labels);
  if (!(opts.label_smoothing >= 0 && opts.label_smoothing <= 1))
    fail<error>(op, "label_smoothing = ", opts.label_smoothing, " is outside [0, 1]");
  if constexpr (requires(const cross_entropy_problem<T>& p, std::function<void()> f) {
                  { backend::loss_kernel<B>::cross_entropy(p, f) } -> std::same_as<bool>;
                }) {
    const Tensor<T, B> x = logits.contiguous();
    const Tensor<int64_t, B> l = labels.contiguous();
    const int64_t n = x.shape()[0], c = x.shape()[1];
    const bool reduce = opts.reduction != Reduction::none;
    Tensor<T, B> out(reduce ? Shape{} : Shape{n}), rows_lse(Shape{n}), count(Shape{});
    const double smooth = opts.label_smoothing;
    const cross_entropy_problem<T> p{.x = x.data(),
                                     .labels = l.data(),
                                     .n = n,
                                     .c = c,
                                     .ignore_index = opts.ignore_index,
                                     .keep = 1.0 - smooth,
                                     .smooth_per_class = c ? smooth / static_cast<double>(c) : 0.0,
                                     .reduce = reduce,
                                     .mean = opts.reduction == Reduction::mean,
                                     .out = out.data(),
                                     .lse = rows_lse.data(),
                                     .counted = count.data()};
    const int64_t ignore = opts.ignore_index;
    if (backend::loss_kernel<B>::cross_entropy(
            p, [l, c, ignore] { count_labels_on_host("cross_entropy", c, l, ignore); })) {
      lse = std::move(rows_lse);
      counted = {0, std::move(count)};
      return out;
    }
  }
  counted = check_labels<T>(op, logits.shape(), labels, opts.ignore_index);
  return reduce_loss(cross_entropy_samples(logits, labels, opts, lse), opts.reduction, counted);
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
  Tensor<T, B> lse;
  detail::label_count<T, B> counted;
  return detail::cross_entropy_forward(logits, labels, opts, lse, counted);
}

namespace detail {
/// cross_entropy_backward for labels already checked, `counted` of them not ignored (autograd
/// passes the forward pass's count: no second look at the labels, no second wait on a device).
template <class T, class B>
Tensor<T, B> cross_entropy_grad_checked(const Tensor<T, B>& grad_loss, const Tensor<T, B>& logits,
                                        const Tensor<int64_t, B>& labels,
                                        const CrossEntropyOptions& opts, Tensor<T, B> lse,
                                        const label_count<T, B>& counted) {
  const int64_t n = logits.shape()[0], c = logits.shape()[1];
  const bool per_sample = opts.reduction == Reduction::none;
  if (per_sample ? !(grad_loss.shape() == Shape{n}) : grad_loss.numel() != 1)
    detail::fail<shape_error>("cross_entropy_backward", "grad_loss of shape ", grad_loss.shape(),
                              " for ", n, " samples");
  if constexpr (has_cross_entropy_rows<T, B>) {
    if (!lse.defined()) {
      lse = Tensor<T, B>(Shape{n});
      detail::cross_entropy_rows(logits, labels, opts, Tensor<T, B>(Shape{n}), lse);
    }
    const Tensor<T, B> x = logits.contiguous(), g = grad_loss.contiguous(), ls = lse.contiguous();
    const Tensor<int64_t, B> l = labels.contiguous();
    Tensor<T, B> dx(logits.shape());
    backend::loss_kernel<B>::cross_entropy_grad(cross_entropy_grad_problem<T>{
        .x = x.data(),
        .labels = l.data(),
        .lse = ls.data(),
        .grad = g.data(),
        .n = n,
        .c = c,
        .ignore_index = opts.ignore_index,
        .keep = 1.0 - opts.label_smoothing,
        .smooth_per_class = opts.label_smoothing / static_cast<double>(c ? c : 1),
        .scale = mean_scale(opts.reduction, counted),
        .per_sample = per_sample,
        .dx = dx.data()});
    return dx;
  } else {
    if (!lse.defined()) lse = logsumexp(logits, {1});
    const detail::cross_entropy_grad<T> f{opts.ignore_index, 1.0 - opts.label_smoothing,
                                          opts.label_smoothing / static_cast<double>(c ? c : 1)};
    const Tensor<T, B> l = lse.reshape({n, 1});
    const Tensor<int64_t, B> y = labels.reshape({n, 1}), cols = detail::class_columns<B>(c);
    if (opts.reduction == Reduction::mean && counted.device.defined())
      return map(detail::gradient_over_count<T, detail::cross_entropy_grad<T>>{f}, logits, l, y,
                 cols, grad_loss.reshape({1, 1}), counted.device.reshape({1, 1}));
    return map(f, logits, l, y, cols, detail::loss_grad_column(grad_loss, opts.reduction, counted));
  }
}
}  // namespace detail

/// Gradient of cross_entropy with respect to the logits: (softmax(x) - target) times the
/// incoming gradient, where grad_loss is 0-d (mean, sum) or [N] (none) and lse holds the rows'
/// logsumexp from the forward pass (recomputed when undefined).
template <element_type T, class B>
Tensor<T, B> cross_entropy_backward(const Tensor<T, B>& grad_loss, const Tensor<T, B>& logits,
                                    const Tensor<int64_t, B>& labels,
                                    const CrossEntropyOptions& opts = {}, Tensor<T, B> lse = {}) {
  const auto counted =
      detail::check_class_problem("cross_entropy_backward", logits, labels, opts.ignore_index);
  return detail::cross_entropy_grad_checked(grad_loss, logits, labels, opts, std::move(lse),
                                            counted);
}

namespace detail {
/// nll_loss for labels already checked, `counted` of them not ignored.
template <class T, class B>
Tensor<T, B> nll_loss_checked(const Tensor<T, B>& log_probs, const Tensor<int64_t, B>& labels,
                              const NLLLossOptions& opts, const label_count<T, B>& counted) {
  const int64_t n = log_probs.shape()[0];
  Tensor<T, B> loss(Shape{n});
  if constexpr (backend::memory<B>::host_accessible) {
    const Tensor<int64_t, B> l = labels.contiguous();
    for (int64_t i = 0; i < n; ++i) {
      const int64_t v = l.data()[i];
      loss.data()[i] = v == opts.ignore_index ? T(0) : static_cast<T>(-log_probs(i, v));
    }
  } else {
    loss = map(nll_sample<T>{opts.ignore_index}, picked_scores(log_probs, labels), labels);
  }
  return reduce_loss(loss, opts.reduction, counted);
}

/// nll_loss_backward for labels already checked, `counted` of them not ignored (autograd passes
/// the forward pass's count).
template <class T, class B>
Tensor<T, B> nll_loss_grad_checked(const Tensor<T, B>& grad_loss, const Shape& log_probs_shape,
                                   const Tensor<int64_t, B>& labels, const NLLLossOptions& opts,
                                   const label_count<T, B>& counted) {
  const int64_t n = log_probs_shape[0];
  const bool per_sample = opts.reduction == Reduction::none;
  if (per_sample ? !(grad_loss.shape() == Shape{n}) : grad_loss.numel() != 1)
    fail<shape_error>("nll_loss_backward", "grad_loss of shape ", grad_loss.shape(), " for ", n,
                      " samples");
  if constexpr (!backend::memory<B>::host_accessible) {
    const nll_grad<T> f{opts.ignore_index};
    const Tensor<int64_t, B> y = labels.reshape({n, 1}),
                             cols = class_columns<B>(log_probs_shape[1]);
    if (opts.reduction == Reduction::mean && counted.device.defined())
      return map(gradient_over_count<T, nll_grad<T>>{f}, y, cols, grad_loss.reshape({1, 1}),
                 counted.device.reshape({1, 1}));
    return map(f, y, cols, loss_grad_column(grad_loss, opts.reduction, counted));
  } else {
    const double scale = mean_scale(opts.reduction, counted);
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
}
}  // namespace detail

/// Negative log-likelihood of log-probabilities [N, C] at integer labels [N]: -logp[i, label].
/// Returns a 0-d tensor (mean, sum) or [N] (none). Throws as cross_entropy.
template <element_type T, class B>
Tensor<T, B> nll_loss(const Tensor<T, B>& log_probs, const Tensor<int64_t, B>& labels,
                      const NLLLossOptions& opts = {}) {
  static_assert(is_floating_v<T> && !is_low_precision_v<T>, "tessera::nll_loss: float or double");
  const auto counted =
      detail::check_class_problem("nll_loss", log_probs, labels, opts.ignore_index);
  return detail::nll_loss_checked(log_probs, labels, opts, counted);
}

/// Gradient of nll_loss with respect to log_probs of shape log_probs_shape: -grad at each
/// sample's label, 0 elsewhere. Checks the labels as nll_loss does.
template <element_type T, class B>
Tensor<T, B> nll_loss_backward(const Tensor<T, B>& grad_loss, const Shape& log_probs_shape,
                               const Tensor<int64_t, B>& labels, const NLLLossOptions& opts = {}) {
  const auto counted =
      detail::check_labels<T>("nll_loss_backward", log_probs_shape, labels, opts.ignore_index);
  return detail::nll_loss_grad_checked(grad_loss, log_probs_shape, labels, opts, counted);
}

TESSERA_END_NAMESPACE

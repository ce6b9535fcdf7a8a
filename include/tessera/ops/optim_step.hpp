// tessera/ops/optim_step.hpp - fused optimizer updates as free functions: sgd_step (SGD with
// momentum, dampening, Nesterov, weight decay) and adam_step (Adam, AdamW, AMSGrad), with the
// semantics of torch.optim.SGD and torch.optim.Adam / AdamW. Each call updates one parameter
// tensor and its state, or a list of them (multi-tensor: one launch for many on CUDA), in place
// in one pass over memory. Validation here; the arithmetic is the
// backend's optim_kernel, which works on contiguous arrays (other layouts go through contiguous
// copies that are written back).
#pragma once

#include <cmath>
#include <cstdint>
#include <span>
#include <string_view>
#include <type_traits>
#include <vector>

#include "../core/tensor.hpp"
#include "../kernel/optim_problem.hpp"
#include "map.hpp"
#include "tensor_copy.hpp"

TESSERA_BEGIN_NAMESPACE

/// Options of sgd_step, named as torch.optim.SGD's arguments:
/// `ts::sgd_step(w, g, buf, {.lr = 0.05, .momentum = 0.9}, first)`.
struct SGDStepOptions {
  /// Learning rate, finite and >= 0.
  double lr = 0.01;
  /// Momentum factor, finite and >= 0; 0 disables the momentum buffer.
  double momentum = 0;
  /// Dampening of the gradient's contribution to the momentum buffer, finite.
  double dampening = 0;
  /// L2 penalty added to the gradient (weight_decay * param), finite and >= 0.
  double weight_decay = 0;
  /// Nesterov momentum; needs momentum > 0 and dampening == 0 (as PyTorch).
  bool nesterov = false;
  /// Ascend instead of descend (the gradient's sign is flipped before anything else).
  bool maximize = false;
};

/// Options of adam_step, named as torch.optim.Adam's arguments (betas split in two):
/// `ts::adam_step(w, g, m, v, {}, step, {.lr = 1e-3, .weight_decay = 0.01,
///  .decoupled_weight_decay = true})` is AdamW.
struct AdamStepOptions {
  /// Learning rate, finite and >= 0.
  double lr = 1e-3;
  /// Decay rates of the first and second moment estimates, each in [0, 1).
  double beta1 = 0.9;
  double beta2 = 0.999;
  /// Added to the denominator, finite and >= 0.
  double eps = 1e-8;
  /// Weight decay, finite and >= 0: an L2 term added to the gradient (Adam), or with
  /// decoupled_weight_decay the parameter is first multiplied by 1 - lr * weight_decay (AdamW).
  double weight_decay = 0;
  /// AdamW's decoupled weight decay.
  bool decoupled_weight_decay = false;
  /// AMSGrad: the denominator uses the running maximum of the second moment (max_exp_avg_sq).
  bool amsgrad = false;
  /// Ascend instead of descend (the gradient's sign is flipped before anything else).
  bool maximize = false;
};

/// One parameter's tensors for the multi-tensor sgd_step (see the single-tensor one for each).
template <class T, class B>
struct SGDStepTensors {
  Tensor<T, B> param, grad, momentum_buffer;
  bool first_step = false;
};

/// One parameter's tensors for the multi-tensor adam_step (see the single-tensor one for each).
template <class T, class B>
struct AdamStepTensors {
  Tensor<T, B> param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq;
  int64_t step = 1;
};

template <element_type T, class B>
void sgd_step(std::span<const SGDStepTensors<T, B>> tensors, const SGDStepOptions& opts);
template <element_type T, class B>
void adam_step(std::span<const AdamStepTensors<T, B>> tensors, const AdamStepOptions& opts);

namespace detail {

template <class T>
void optim_require_dtype(std::string_view op) {
  if constexpr (!std::is_same_v<T, float> && !std::is_same_v<T, double>)
    fail<dtype_error>(op, "needs float or double tensors, got ", dtype_name<T>);
}

/// A numeric option that is NaN, infinite or outside its range.
inline void optim_check_option(std::string_view op, const char* name, double v, bool in_range,
                               const char* range) {
  if (!std::isfinite(v) || !in_range) fail<error>(op, name, " = ", v, " must be ", range);
}

/// Whether the memory ranges two views can touch intersect (conservative: interleaved views of
/// one buffer, such as even and odd columns, count as overlapping).
template <class T, class B>
bool optim_may_overlap(const Tensor<T, B>& a, const Tensor<T, B>& b) {
  if (!a.shares_storage_with(b) || a.numel() == 0 || b.numel() == 0) return false;
  auto range = [](const Tensor<T, B>& t, int64_t& lo, int64_t& hi) {
    lo = hi = t.offset();
    for (int d = 0; d < t.rank(); ++d) {
      const int64_t ext = (t.shape()[d] - 1) * t.strides()[d];
      (ext < 0 ? lo : hi) += ext;
    }
  };
  int64_t alo, ahi, blo, bhi;
  range(a, alo, ahi);
  range(b, blo, bhi);
  return alo <= bhi && blo <= ahi;
}

/// A tensor the update writes (param or state), with its name for messages.
template <class T, class B>
struct optim_state {
  const char* name;
  const Tensor<T, B>* t;
};

/// Checks the written tensors (defined by now): writable, param's shape, pairwise disjoint; and
/// grad: defined, param's shape.
template <class T, class B, size_t N>
void optim_check_tensors(std::string_view op, const Tensor<T, B>& grad,
                         const optim_state<T, B> (&w)[N]) {
  const Tensor<T, B>& param = *w[0].t;
  if (!grad.defined()) fail<error>(op, "grad is undefined (default-constructed)");
  for (size_t k = 0; k < N; ++k) {
    check_writable(op, *w[k].t);
    if (!(w[k].t->shape() == param.shape()))
      fail<shape_error>(op, w[k].name, " has shape ", w[k].t->shape(), ", param has shape ",
                        param.shape());
  }
  if (!(grad.shape() == param.shape()))
    fail<shape_error>(op, "grad has shape ", grad.shape(), ", param has shape ", param.shape());
  for (size_t j = 0; j < N; ++j)
    for (size_t k = j + 1; k < N; ++k)
      if (optim_may_overlap(*w[j].t, *w[k].t))
        fail<shape_error>(op, w[j].name, " and ", w[k].name,
                          " share memory (each must be a separate, non-overlapping tensor)");
}

/// Checks that no tensor written for one entry of a multi-tensor update overlaps one written
/// for another (each entry's own tensors are checked by optim_check_tensors); written(entry,
/// each) calls each(tensor) for the entry's written tensors.
template <class Entry, class Written>
void optim_check_disjoint(std::string_view op, std::span<const Entry> entries, Written written) {
  for (size_t i = 0; i < entries.size(); ++i)
    for (size_t j = i + 1; j < entries.size(); ++j)
      written(entries[i], [&](const auto& a) {
        written(entries[j], [&](const auto& b) {
          if (optim_may_overlap(a, b))
            fail<shape_error>(op, "entries ", i, " and ", j,
                              " write overlapping memory (each parameter and state must be a "
                              "separate tensor)");
        });
      });
}

/// The contiguous tensor the kernel updates in place of `user`: user itself when contiguous,
/// else a contiguous copy that write_back stores into user afterwards.
template <class T, class B>
struct optim_work {
  Tensor<T, B> user, work;
  optim_work() = default;
  /// Made once every check passed, for each written tensor: counts the write in its version.
  explicit optim_work(const Tensor<T, B>& t) : user(t), work(t.contiguous()) { t.bump_version(); }
  T* data() const { return work.defined() ? work.data() : nullptr; }
  void write_back() const {
    if (work.defined() && work.data() != user.data()) user.copy_(work);
  }
};

/// grad as a contiguous tensor that no written tensor's memory touches (copied otherwise, so the
/// update reads it as it was before the call).
template <class T, class B, size_t N>
Tensor<T, B> optim_grad(const Tensor<T, B>& grad, const optim_state<T, B> (&w)[N]) {
  bool copy = !grad.is_contiguous();
  for (size_t k = 0; k < N; ++k) copy = copy || grad.shares_storage_with(*w[k].t);
  return copy ? grad.clone() : grad;
}

}  // namespace detail

/// One step of torch.optim.SGD on one parameter tensor, in place, in one fused pass:
///   g = (maximize ? -grad : grad) + weight_decay * param
///   if momentum != 0: buf = first_step ? g : momentum * buf + (1 - dampening) * g
///                     g = nesterov ? g + momentum * buf : buf
///   param -= lr * g
/// param, grad and momentum_buffer have one shape; param and momentum_buffer are written (any
/// strides without stride-0 dims, not overlapping each other), grad may be any view (even of
/// param's memory: it is read as before the call). momentum_buffer may be undefined when
/// momentum == 0, and is then not touched; with first_step its old contents are ignored.
/// Throws dtype_error (T not float or double), shape_error (shapes differ, a written tensor is an
/// expanded view, param and momentum_buffer overlap), error (an undefined tensor, momentum != 0
/// without a momentum_buffer, a negative or non-finite lr, momentum or weight_decay, a non-finite
/// dampening, nesterov without momentum > 0 and dampening == 0). Nothing is written on error.
template <element_type T, class B>
void sgd_step(const Tensor<T, B>& param, const Tensor<T, B>& grad,
              const Tensor<T, B>& momentum_buffer, const SGDStepOptions& opts, bool first_step) {
  const SGDStepTensors<T, B> one{param, grad, momentum_buffer, first_step};
  sgd_step(std::span<const SGDStepTensors<T, B>>(&one, 1), opts);
}

/// The multi-tensor sgd_step: one step of torch.optim.SGD on every entry of `tensors` (each as
/// the single-tensor sgd_step above, with its own first_step), every check made before anything
/// is written, then one fused pass where the backend has one for many tensors
/// (optim_kernel<B>::sgd_many: CUDA launches one kernel for up to 16 tensors), else one per
/// tensor. The written tensors of different entries must not overlap either (shape_error).
template <element_type T, class B>
void sgd_step(std::span<const SGDStepTensors<T, B>> tensors, const SGDStepOptions& opts) {
  constexpr std::string_view op = "sgd_step";
  detail::optim_require_dtype<T>(op);
  detail::optim_check_option(op, "lr", opts.lr, opts.lr >= 0, "finite and >= 0");
  detail::optim_check_option(op, "momentum", opts.momentum, opts.momentum >= 0, "finite and >= 0");
  detail::optim_check_option(op, "dampening", opts.dampening, true, "finite");
  detail::optim_check_option(op, "weight_decay", opts.weight_decay, opts.weight_decay >= 0,
                             "finite and >= 0");
  if (opts.nesterov && (opts.momentum <= 0 || opts.dampening != 0))
    detail::fail<error>(op, "nesterov needs momentum > 0 and dampening == 0, got momentum = ",
                        opts.momentum, ", dampening = ", opts.dampening);
  const bool use_buf = opts.momentum != 0;
  for (const auto& t : tensors) {
    if (!t.param.defined()) detail::fail<error>(op, "param is undefined (default-constructed)");
    if (use_buf && !t.momentum_buffer.defined())
      detail::fail<error>(op, "momentum = ", opts.momentum,
                          " needs a momentum_buffer, got an undefined tensor");
    if (t.momentum_buffer.defined()) {
      const detail::optim_state<T, B> w[] = {{"param", &t.param},
                                             {"momentum_buffer", &t.momentum_buffer}};
      detail::optim_check_tensors(op, t.grad, w);
    } else {
      const detail::optim_state<T, B> w[] = {{"param", &t.param}};
      detail::optim_check_tensors(op, t.grad, w);
    }
  }
  detail::optim_check_disjoint(op, tensors, [&](const SGDStepTensors<T, B>& t, auto&& each) {
    each(t.param);
    if (use_buf) each(t.momentum_buffer);
  });
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    struct job {
      detail::optim_work<T, B> p, buf;
      Tensor<T, B> g;
    };
    std::vector<job> jobs;
    std::vector<detail::sgd_problem<T>> problems;
    for (const auto& t : tensors) {
      if (t.param.numel() == 0) continue;
      const detail::optim_state<T, B> w[] = {{"param", &t.param},
                                             {"momentum_buffer", &t.momentum_buffer}};
      job& j = jobs.emplace_back(
          job{detail::optim_work<T, B>(t.param),
              use_buf ? detail::optim_work<T, B>(t.momentum_buffer) : detail::optim_work<T, B>(),
              detail::optim_grad(t.grad, w)});
      problems.push_back({.param = j.p.data(),
                          .grad = j.g.data(),
                          .momentum_buffer = j.buf.data(),
                          .n = t.param.numel(),
                          .lr = static_cast<T>(opts.lr),
                          .momentum = static_cast<T>(opts.momentum),
                          .one_minus_dampening = static_cast<T>(1 - opts.dampening),
                          .weight_decay = static_cast<T>(opts.weight_decay),
                          .grad_sign = T(opts.maximize ? -1 : 1),
                          .nesterov = opts.nesterov,
                          .first_step = t.first_step});
    }
    if (problems.empty()) return;
    if constexpr (requires {
                    backend::optim_kernel<B>::sgd_many(
                        std::span<const detail::sgd_problem<T>>(problems));
                  })
      backend::optim_kernel<B>::sgd_many(std::span<const detail::sgd_problem<T>>(problems));
    else
      for (const auto& pr : problems) backend::optim_kernel<B>::sgd(pr);
    for (const job& j : jobs) j.p.write_back(), j.buf.write_back();
  }
}

/// One step of torch.optim.Adam (or AdamW) on one parameter tensor, in place, in one fused pass.
/// step is the 1-based count of this step (PyTorch's state['step'] after its increment):
///   g = maximize ? -grad : grad
///   Adam: g += weight_decay * param          AdamW: param *= 1 - lr * weight_decay
///   exp_avg = beta1 * exp_avg + (1 - beta1) * g
///   exp_avg_sq = beta2 * exp_avg_sq + (1 - beta2) * g * g
///   amsgrad: max_exp_avg_sq = max(max_exp_avg_sq, exp_avg_sq), used for v below, else exp_avg_sq
///   param -= lr / (1 - beta1^step) * exp_avg / (sqrt(v) / sqrt(1 - beta2^step) + eps)
/// All tensors have one shape; param and the state tensors are written (any strides without
/// stride-0 dims, pairwise non-overlapping), grad may be any view (read as before the call).
/// max_exp_avg_sq may be undefined unless amsgrad, and is then not touched. Arithmetic is in T.
/// Throws dtype_error (T not float or double), shape_error (shapes differ, a written tensor is an
/// expanded view, written tensors overlap), error (an undefined tensor, amsgrad without
/// max_exp_avg_sq, step < 1, lr / eps / weight_decay negative or non-finite, beta1 or beta2
/// outside [0, 1)). Nothing is written on error.
template <element_type T, class B>
void adam_step(const Tensor<T, B>& param, const Tensor<T, B>& grad, const Tensor<T, B>& exp_avg,
               const Tensor<T, B>& exp_avg_sq, const Tensor<T, B>& max_exp_avg_sq, int64_t step,
               const AdamStepOptions& opts) {
  const AdamStepTensors<T, B> one{param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, step};
  adam_step(std::span<const AdamStepTensors<T, B>>(&one, 1), opts);
}

/// The multi-tensor adam_step: one step of torch.optim.Adam / AdamW on every entry of `tensors`
/// (each as the single-tensor adam_step above, with its own step count), every check made before
/// anything is written, then one fused pass where the backend has one for many tensors
/// (optim_kernel<B>::adam_many: CUDA launches one kernel for up to 16 tensors), else one per
/// tensor. The written tensors of different entries must not overlap either (shape_error).
template <element_type T, class B>
void adam_step(std::span<const AdamStepTensors<T, B>> tensors, const AdamStepOptions& opts) {
  constexpr std::string_view op = "adam_step";
  detail::optim_require_dtype<T>(op);
  detail::optim_check_option(op, "lr", opts.lr, opts.lr >= 0, "finite and >= 0");
  detail::optim_check_option(op, "beta1", opts.beta1, opts.beta1 >= 0 && opts.beta1 < 1,
                             "in [0, 1)");
  detail::optim_check_option(op, "beta2", opts.beta2, opts.beta2 >= 0 && opts.beta2 < 1,
                             "in [0, 1)");
  detail::optim_check_option(op, "eps", opts.eps, opts.eps >= 0, "finite and >= 0");
  detail::optim_check_option(op, "weight_decay", opts.weight_decay, opts.weight_decay >= 0,
                             "finite and >= 0");
  for (const auto& t : tensors) {
    if (t.step < 1)
      detail::fail<error>(op, "step = ", t.step, " must be >= 1 (the count after this step)");
    if (!t.param.defined()) detail::fail<error>(op, "param is undefined (default-constructed)");
    if (!t.exp_avg.defined()) detail::fail<error>(op, "exp_avg is undefined (default-constructed)");
    if (!t.exp_avg_sq.defined())
      detail::fail<error>(op, "exp_avg_sq is undefined (default-constructed)");
    if (opts.amsgrad && !t.max_exp_avg_sq.defined())
      detail::fail<error>(op, "amsgrad needs max_exp_avg_sq, got an undefined tensor");
    const detail::optim_state<T, B> all[] = {{"param", &t.param},
                                             {"exp_avg", &t.exp_avg},
                                             {"exp_avg_sq", &t.exp_avg_sq},
                                             {"max_exp_avg_sq", &t.max_exp_avg_sq}};
    if (t.max_exp_avg_sq.defined()) {
      detail::optim_check_tensors(op, t.grad, all);
    } else {
      const detail::optim_state<T, B> w[] = {all[0], all[1], all[2]};
      detail::optim_check_tensors(op, t.grad, w);
    }
  }
  detail::optim_check_disjoint(op, tensors, [&](const AdamStepTensors<T, B>& t, auto&& each) {
    each(t.param), each(t.exp_avg), each(t.exp_avg_sq);
    if (opts.amsgrad) each(t.max_exp_avg_sq);
  });
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    struct job {
      detail::optim_work<T, B> p, m, v, vmax;
      Tensor<T, B> g;
    };
    std::vector<job> jobs;
    std::vector<detail::adam_problem<T>> problems;
    const bool decoupled = opts.decoupled_weight_decay;
    for (const auto& t : tensors) {
      if (t.param.numel() == 0) continue;
      const detail::optim_state<T, B> all[] = {{"param", &t.param},
                                               {"exp_avg", &t.exp_avg},
                                               {"exp_avg_sq", &t.exp_avg_sq},
                                               {"max_exp_avg_sq", &t.max_exp_avg_sq}};
      job& j = jobs.emplace_back(job{
          detail::optim_work<T, B>(t.param), detail::optim_work<T, B>(t.exp_avg),
          detail::optim_work<T, B>(t.exp_avg_sq),
          opts.amsgrad ? detail::optim_work<T, B>(t.max_exp_avg_sq) : detail::optim_work<T, B>(),
          detail::optim_grad(t.grad, all)});
      const double s = static_cast<double>(t.step);
      const double bc1 = 1 - std::pow(opts.beta1, s), bc2 = 1 - std::pow(opts.beta2, s);
      problems.push_back(
          {.param = j.p.data(),
           .grad = j.g.data(),
           .exp_avg = j.m.data(),
           .exp_avg_sq = j.v.data(),
           .max_exp_avg_sq = j.vmax.data(),
           .n = t.param.numel(),
           .grad_sign = T(opts.maximize ? -1 : 1),
           .weight_decay = static_cast<T>(decoupled ? 0.0 : opts.weight_decay),
           .param_decay = static_cast<T>(decoupled ? 1 - opts.lr * opts.weight_decay : 1.0),
           .beta1 = static_cast<T>(opts.beta1),
           .beta2 = static_cast<T>(opts.beta2),
           .one_minus_beta1 = static_cast<T>(1 - opts.beta1),
           .one_minus_beta2 = static_cast<T>(1 - opts.beta2),
           .eps = static_cast<T>(opts.eps),
           .step_size = static_cast<T>(opts.lr / bc1),
           .inv_sqrt_bias_correction2 = static_cast<T>(1 / std::sqrt(bc2)),
           .amsgrad = opts.amsgrad});
    }
    if (problems.empty()) return;
    if constexpr (requires {
                    backend::optim_kernel<B>::adam_many(
                        std::span<const detail::adam_problem<T>>(problems));
                  })
      backend::optim_kernel<B>::adam_many(std::span<const detail::adam_problem<T>>(problems));
    else
      for (const auto& pr : problems) backend::optim_kernel<B>::adam(pr);
    for (const job& j : jobs)
      j.p.write_back(), j.m.write_back(), j.v.write_back(), j.vmax.write_back();
  }
}

TESSERA_END_NAMESPACE

// tessera/optim/optimizer.hpp - optimizers (SGD, Adam, AdamW) over a model's parameters, and
// gradient clipping. Each step runs one fused kernel per parameter tensor (ts::sgd_step,
// ts::adam_step).
#pragma once

#include <array>
#include <cmath>
#include <vector>

#include "../autograd/variable.hpp"
#include "../ops/optim_step.hpp"

TESSERA_BEGIN_NAMESPACE
namespace optim {

/// Base of the optimizers: the parameters, the learning rate (which schedules change), and
/// zero_grad.
template <class T, class B>
class Optimizer {
 public:
  explicit Optimizer(std::vector<Variable<T, B>> params, double lr) : params_(std::move(params)) {
    set_lr(lr);
    for (const auto& p : params_)
      if (!p.defined() || !p.requires_grad() || !p.is_leaf())
        tessera::detail::fail<error>("Optimizer",
                                     "every parameter must be a leaf Variable that requires grad");
  }
  virtual ~Optimizer() = default;
  /// Applies one update to every parameter that has a gradient (others are skipped).
  virtual void step() = 0;
  /// Forgets every parameter's gradient (the next backward stores fresh ones).
  void zero_grad() const {
    for (const auto& p : params_) p.zero_grad();
  }
  double lr() const { return lr_; }
  /// Sets the learning rate (what the schedules call). Throws error for a negative or NaN lr.
  void set_lr(double lr) {
    if (!(lr >= 0)) tessera::detail::fail<error>("Optimizer", "learning rate ", lr, " is negative");
    lr_ = lr;
  }
  const std::vector<Variable<T, B>>& parameters() const { return params_; }

 protected:
  std::vector<Variable<T, B>> params_;
  double lr_ = 0;
};

/// Options of SGD, as torch.optim.SGD's.
struct SGDOptions {
  double lr = 0.01;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
  bool maximize = false;
};

/// Stochastic gradient descent with optional momentum (heavy ball or Nesterov), dampening and
/// L2 weight decay; the update is torch.optim.SGD's.
template <class T, class B>
class SGD : public Optimizer<T, B> {
 public:
  SGD(std::vector<Variable<T, B>> params, const SGDOptions& opts)
      : Optimizer<T, B>(std::move(params), opts.lr), options_(opts) {
    if (opts.nesterov && (opts.momentum <= 0 || opts.dampening != 0))
      tessera::detail::fail<error>("SGD", "Nesterov momentum needs momentum > 0 and dampening 0");
    buffers_.resize(this->params_.size());
  }
  void step() override {
    SGDStepOptions o{.lr = this->lr_,
                     .momentum = options_.momentum,
                     .dampening = options_.dampening,
                     .weight_decay = options_.weight_decay,
                     .nesterov = options_.nesterov,
                     .maximize = options_.maximize};
    // Every parameter with a gradient in one multi-tensor update (one launch for many on CUDA).
    std::vector<SGDStepTensors<T, B>> tensors;
    for (size_t i = 0; i < this->params_.size(); ++i) {
      const auto& p = this->params_[i];
      if (!p.grad().defined()) continue;
      const bool first = options_.momentum != 0 && !buffers_[i].defined();
      if (first) buffers_[i] = Tensor<T, B>(p.shape());
      tensors.push_back({p.value(), p.grad(), buffers_[i], first});
    }
    sgd_step(std::span<const SGDStepTensors<T, B>>(tensors), o);
  }
  /// The momentum buffer of parameter i (undefined before its first step or without momentum).
  const Tensor<T, B>& momentum_buffer(size_t i) const { return buffers_.at(i); }

 private:
  SGDOptions options_;
  std::vector<Tensor<T, B>> buffers_;
};
template <class T, class B>
SGD(std::vector<Variable<T, B>>, const SGDOptions&) -> SGD<T, B>;

/// Options of Adam and AdamW, as torch.optim's.
struct AdamOptions {
  double lr = 1e-3;
  std::array<double, 2> betas{0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0;
  bool amsgrad = false;
  bool maximize = false;
};

/// Adam (Kingma & Ba); weight decay is L2 added to the gradient. AdamW is the same class with
/// decoupled weight decay.
template <class T, class B>
class Adam : public Optimizer<T, B> {
 public:
  Adam(std::vector<Variable<T, B>> params, const AdamOptions& opts, bool decoupled = false)
      : Optimizer<T, B>(std::move(params), opts.lr), options_(opts), decoupled_(decoupled) {
    state_.resize(this->params_.size());
  }
  void step() override {
    AdamStepOptions o{.lr = this->lr_,
                      .beta1 = options_.betas[0],
                      .beta2 = options_.betas[1],
                      .eps = options_.eps,
                      .weight_decay = options_.weight_decay,
                      .decoupled_weight_decay = decoupled_,
                      .amsgrad = options_.amsgrad,
                      .maximize = options_.maximize};
    // Every parameter with a gradient in one multi-tensor update (one launch for many on CUDA).
    std::vector<AdamStepTensors<T, B>> tensors;
    for (size_t i = 0; i < this->params_.size(); ++i) {
      const auto& p = this->params_[i];
      if (!p.grad().defined()) continue;
      auto& s = state_[i];
      if (!s.exp_avg.defined()) {
        s.exp_avg = zeros<T, B>(p.shape());
        s.exp_avg_sq = zeros<T, B>(p.shape());
        if (options_.amsgrad) s.max_exp_avg_sq = zeros<T, B>(p.shape());
      }
      tensors.push_back(
          {p.value(), p.grad(), s.exp_avg, s.exp_avg_sq, s.max_exp_avg_sq, s.step + 1});
    }
    adam_step(std::span<const AdamStepTensors<T, B>>(tensors), o);
    // The step counts advance only once the update has been made (a throw leaves them as they
    // were, like the tensors).
    for (size_t i = 0; i < this->params_.size(); ++i)
      if (this->params_[i].grad().defined()) ++state_[i].step;
  }
  /// Per-parameter state: step count and moment estimates.
  struct param_state {
    int64_t step = 0;
    Tensor<T, B> exp_avg, exp_avg_sq, max_exp_avg_sq;
  };
  const param_state& state(size_t i) const { return state_.at(i); }

 private:
  AdamOptions options_;
  bool decoupled_;
  std::vector<param_state> state_;
};
template <class T, class B>
Adam(std::vector<Variable<T, B>>, const AdamOptions&) -> Adam<T, B>;

/// Adam with decoupled weight decay (Loshchilov & Hutter), torch.optim.AdamW; its default
/// weight_decay is 0.01.
template <class T, class B>
class AdamW : public Adam<T, B> {
 public:
  AdamW(std::vector<Variable<T, B>> params, AdamOptions opts = with_default_decay())
      : Adam<T, B>(std::move(params), opts, true) {}
  static AdamOptions with_default_decay() {
    AdamOptions o;
    o.weight_decay = 0.01;
    return o;
  }
};
template <class T, class B>
AdamW(std::vector<Variable<T, B>>, const AdamOptions&) -> AdamW<T, B>;
template <class T, class B>
AdamW(std::vector<Variable<T, B>>) -> AdamW<T, B>;

/// Rescales the gradients of params in place so that their joint 2-norm is at most max_norm;
/// returns the norm before clipping. Parameters without a gradient are ignored. On a device the
/// squared norms are added there and read back once (one wait, not one per parameter).
template <class T, class B>
double clip_grad_norm(const std::vector<Variable<T, B>>& params, double max_norm) {
  if (!(max_norm > 0))
    tessera::detail::fail<error>("clip_grad_norm", "max_norm ", max_norm, " must be positive");
  double total = 0;
  if constexpr (backend::memory<B>::host_accessible) {
    for (const auto& p : params)
      if (p.grad().defined()) {
        const double n = static_cast<double>(norm(p.grad()).item());
        total += n * n;
      }
  } else {
    Tensor<T, B> squares;
    for (const auto& p : params)
      if (p.grad().defined()) {
        const Tensor<T, B> n = norm(p.grad());
        squares = squares.defined() ? squares + n * n : n * n;
      }
    if (squares.defined()) total = static_cast<double>(squares.item());
  }
  total = std::sqrt(total);
  if (total > max_norm) {
    const T scale = static_cast<T>(max_norm / (total + 1e-6));
    for (const auto& p : params)
      if (p.grad().defined()) p.grad() *= scale;
  }
  return total;
}

}  // namespace optim
TESSERA_END_NAMESPACE

// tessera/optim/schedule.hpp - learning-rate schedules: step decay, cosine annealing, linear
// warmup. Each holds the optimizer's initial lr and sets a new one on every step().
#pragma once

#include <cmath>
#include <numbers>

#include "optimizer.hpp"

TESSERA_BEGIN_NAMESPACE
namespace optim {

/// Common part: the optimizer, its base lr, and the number of step() calls so far.
template <class T, class B>
class LRScheduler {
 public:
  explicit LRScheduler(Optimizer<T, B>& opt) : opt_(opt), base_lr_(opt.lr()) {}
  virtual ~LRScheduler() = default;
  /// Advances one epoch (or iteration, as the caller counts) and sets the optimizer's lr.
  void step() {
    ++count_;
    opt_.set_lr(lr_at(count_));
  }
  /// The lr after `count` steps.
  virtual double lr_at(int64_t count) const = 0;
  int64_t count() const { return count_; }
  double base_lr() const { return base_lr_; }

 protected:
  Optimizer<T, B>& opt_;
  double base_lr_;
  int64_t count_ = 0;
};

/// lr = base_lr * gamma^(count / step_size) (torch.optim.lr_scheduler.StepLR).
template <class T, class B>
class StepLR : public LRScheduler<T, B> {
 public:
  StepLR(Optimizer<T, B>& opt, int64_t step_size, double gamma = 0.1)
      : LRScheduler<T, B>(opt), step_size_(step_size), gamma_(gamma) {
    if (step_size < 1)
      tessera::detail::fail<error>("StepLR", "step_size ", step_size, " must be at least 1");
  }
  double lr_at(int64_t count) const override {
    return this->base_lr_ * std::pow(gamma_, static_cast<double>(count / step_size_));
  }

 private:
  int64_t step_size_;
  double gamma_;
};

/// Cosine annealing from base_lr to eta_min over t_max steps, then eta_min
/// (torch.optim.lr_scheduler.CosineAnnealingLR without restarts).
template <class T, class B>
class CosineAnnealingLR : public LRScheduler<T, B> {
 public:
  CosineAnnealingLR(Optimizer<T, B>& opt, int64_t t_max, double eta_min = 0)
      : LRScheduler<T, B>(opt), t_max_(t_max), eta_min_(eta_min) {
    if (t_max < 1)
      tessera::detail::fail<error>("CosineAnnealingLR", "t_max ", t_max, " must be at least 1");
  }
  double lr_at(int64_t count) const override {
    const double t = static_cast<double>(std::min(count, t_max_)) / static_cast<double>(t_max_);
    return eta_min_ + (this->base_lr_ - eta_min_) * (1 + std::cos(std::numbers::pi * t)) / 2;
  }

 private:
  int64_t t_max_;
  double eta_min_;
};

/// Linear warmup: lr rises from start_factor * base_lr to base_lr over warmup_steps steps, then
/// stays (torch.optim.lr_scheduler.LinearLR). The optimizer starts at the warmed-down lr.
template <class T, class B>
class LinearWarmup : public LRScheduler<T, B> {
 public:
  LinearWarmup(Optimizer<T, B>& opt, int64_t warmup_steps, double start_factor = 1.0 / 3)
      : LRScheduler<T, B>(opt), warmup_(warmup_steps), start_(start_factor) {
    if (warmup_steps < 1 || !(start_factor > 0 && start_factor <= 1))
      tessera::detail::fail<error>("LinearWarmup", "needs warmup_steps >= 1 (got ", warmup_steps,
                                   ") and start_factor in (0, 1] (got ", start_factor, ")");
    opt.set_lr(lr_at(0));
  }
  double lr_at(int64_t count) const override {
    const double t = static_cast<double>(std::min(count, warmup_)) / static_cast<double>(warmup_);
    return this->base_lr_ * (start_ + (1 - start_) * t);
  }

 private:
  int64_t warmup_;
  double start_;
};

}  // namespace optim
TESSERA_END_NAMESPACE

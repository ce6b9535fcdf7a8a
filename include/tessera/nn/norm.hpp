// tessera/nn/norm.hpp - normalization layers: BatchNorm1d, BatchNorm2d, LayerNorm.
#pragma once

#include "../autograd/embedding.hpp"
#include "../autograd/reduce.hpp"
#include "../autograd/shape.hpp"
#include "module.hpp"

TESSERA_BEGIN_NAMESPACE
namespace nn {

namespace detail {
/// A running statistic's update, (1 - momentum) * running + momentum * batch * scale: a functor
/// rather than a lambda so that map runs it on every backend (CUDA needs a device function).
template <class T>
struct running_update {
  T momentum, scale;
  TESSERA_HOST_DEVICE T operator()(T running, T batch) const {
    return (1 - momentum) * running + momentum * batch * scale;
  }
};

/// Batch normalization over every dim but 1 (channels), shared by BatchNorm1d and BatchNorm2d.
template <class T, class B>
class batch_norm : public Module<T, B> {
 public:
  Variable<T, B> weight, bias;
  Tensor<T, B> running_mean, running_var;
  double eps, momentum;

  batch_norm(const char* name, int64_t features, double eps_, double momentum_, bool affine,
             std::initializer_list<int> ranks)
      : eps(eps_), momentum(momentum_), name_(name), ranks_(ranks) {
    check_positive(name, "num_features", features);
    if (affine) {
      weight = this->register_parameter("weight", ones<T, B>(Shape{features}));
      bias = this->register_parameter("bias", zeros<T, B>(Shape{features}));
    }
    running_mean = this->register_buffer("running_mean", zeros<T, B>(Shape{features}));
    running_var = this->register_buffer("running_var", ones<T, B>(Shape{features}));
  }

  /// Training: normalizes with the batch statistics (biased variance) and updates the running
  /// ones (unbiased variance, exponential average with `momentum`). Evaluation: uses the running
  /// statistics. Throws shape_error for a wrong rank or channel count.
  Variable<T, B> forward(const Variable<T, B>& x) override {
    const int r = x.rank();
    if (std::find(ranks_.begin(), ranks_.end(), r) == ranks_.end() ||
        x.shape()[1] != running_mean.numel())
      tessera::detail::fail<shape_error>(name_, "input of shape ", x.shape(), " for ",
                                         running_mean.numel(), " features");
    Shape per_channel;
    Axes axes;
    for (int d = 0; d < r; ++d) {
      per_channel.push_back(d == 1 ? x.shape()[1] : 1);
      if (d != 1) axes.push_back(d);
    }
    Variable<T, B> y;
    if (this->is_training()) {
      const int64_t count = x.numel() / x.shape()[1];
      if (count < 2)
        tessera::detail::fail<shape_error>(name_,
                                           "needs more than one value per channel in "
                                           "training mode, got input of shape ",
                                           x.shape());
      const Variable<T, B> m = mean(x, axes, true);
      const Variable<T, B> v = var(x, axes, true, 0.0);
      y = (x - m) * rsqrt(v + static_cast<T>(eps));
      no_grad guard;
      const T mom = static_cast<T>(momentum);
      const T unbias = static_cast<T>(static_cast<double>(count) / static_cast<double>(count - 1));
      map_to(running_mean, running_update<T>{mom, T(1)}, running_mean,
             m.value().reshape({x.shape()[1]}));
      map_to(running_var, running_update<T>{mom, unbias}, running_var,
             v.value().reshape({x.shape()[1]}));
    } else {
      const Tensor<T, B> m = running_mean.reshape(per_channel.span());
      const Tensor<T, B> s = rsqrt(running_var + static_cast<T>(eps)).reshape(per_channel.span());
      y = (x - m) * s;
    }
    if (weight.defined())
      y = y * reshape(weight, per_channel.span()) + reshape(bias, per_channel.span());
    return y;
  }

 private:
  const char* name_;
  std::vector<int> ranks_;
};
}  // namespace detail

/// Batch normalization of [N, C] or [N, C, L] inputs per channel C.
template <class T = float, class B = default_backend>
class BatchNorm1d : public detail::batch_norm<T, B> {
 public:
  explicit BatchNorm1d(int64_t num_features, double eps = 1e-5, double momentum = 0.1,
                       bool affine = true)
      : detail::batch_norm<T, B>("BatchNorm1d", num_features, eps, momentum, affine, {2, 3}) {}
};
/// Batch normalization of [N, C, H, W] inputs per channel C.
template <class T = float, class B = default_backend>
class BatchNorm2d : public detail::batch_norm<T, B> {
 public:
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5, double momentum = 0.1,
                       bool affine = true)
      : detail::batch_norm<T, B>("BatchNorm2d", num_features, eps, momentum, affine, {4}) {}
};

/// Layer normalization over the trailing dims given by normalized_shape (e.g. {C} for [N, C]
/// or [N, L, C] inputs), with an elementwise affine transform.
template <class T = float, class B = default_backend>
class LayerNorm : public Module<T, B> {
 public:
  Variable<T, B> weight, bias;
  Shape normalized_shape;
  double eps;

  explicit LayerNorm(const Shape& shape, double eps_ = 1e-5, bool affine = true)
      : normalized_shape(shape), eps(eps_) {
    if (shape.rank() == 0)
      tessera::detail::fail<shape_error>("LayerNorm", "normalized_shape must not be empty");
    if (affine) {
      weight = this->register_parameter("weight", ones<T, B>(shape));
      bias = this->register_parameter("bias", zeros<T, B>(shape));
    }
  }
  Variable<T, B> forward(const Variable<T, B>& x) override {
    const int k = normalized_shape.rank(), r = x.rank();
    bool ok = r >= k;
    for (int i = 0; ok && i < k; ++i) ok = x.shape()[r - k + i] == normalized_shape[i];
    if (!ok)
      tessera::detail::fail<shape_error>("LayerNorm", "input of shape ", x.shape(),
                                         " does not end with ", normalized_shape);
    return tessera::detail::layer_norm_over<T>(x, k, weight, bias, eps);
  }
};

}  // namespace nn
TESSERA_END_NAMESPACE

// tessera/nn/layers.hpp - the layers: Linear, Conv1d, Conv2d, ConvTranspose2d, pooling,
// activations, Dropout, Flatten, and Sequential.
#pragma once

#include <array>
#include <cmath>

#include "../autograd/conv.hpp"
#include "../autograd/embedding.hpp"
#include "../autograd/grad_fn.hpp"
#include "../autograd/linalg.hpp"
#include "../autograd/loss.hpp"
#include "../autograd/shape.hpp"
#include "init.hpp"
#include "module.hpp"

TESSERA_BEGIN_NAMESPACE
namespace nn {

namespace detail {
/// PyTorch's default for Linear and conv layers: weight from kaiming_uniform with a = sqrt(5)
/// (bound 1 / sqrt(fan_in)), bias uniform in +-1 / sqrt(fan_in).
template <class T, class B>
void default_init(const Tensor<T, B>& w, const Tensor<T, B>* bias, int64_t fan_in) {
  init::kaiming_uniform_(w, std::sqrt(5.0));
  if (bias && fan_in > 0) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
    init::uniform_(*bias, -bound, bound);
  }
}
}  // namespace detail

/// y = x · weightᵀ + bias; weight [out, in], bias [out]. Input [..., in].
template <class T = float, class B = default_backend>
class Linear : public Module<T, B> {
 public:
  Variable<T, B> weight, bias;

  Linear(int64_t in_features, int64_t out_features, bool with_bias = true) {
    detail::check_positive("Linear", "in_features", in_features);
    detail::check_positive("Linear", "out_features", out_features);
    weight = this->register_parameter("weight", Tensor<T, B>(Shape{out_features, in_features}));
    if (with_bias) bias = this->register_parameter("bias", Tensor<T, B>(Shape{out_features}));
    const Tensor<T, B> b = with_bias ? bias.value() : Tensor<T, B>();
    detail::default_init(weight.value(), with_bias ? &b : nullptr, in_features);
  }
  Variable<T, B> forward(const Variable<T, B>& x) override { return linear(x, weight, bias); }
  Variable<T, B> forward_relu(const Variable<T, B>& x) override {
    return autograd::detail::linear_op(x, weight, bias, true);
  }
};

/// 2-D convolution layer: weight [out, in / groups, kh, kw], optional bias [out].
/// Input [N, in, H, W].
template <class T = float, class B = default_backend>
class Conv2d : public Module<T, B> {
 public:
  Variable<T, B> weight, bias;
  Conv2dOptions options;

  Conv2d(int64_t in_channels, int64_t out_channels, std::array<int64_t, 2> kernel,
         Conv2dOptions opts = {}, bool with_bias = true)
      : options(opts) {
    detail::check_positive("Conv2d", "in_channels", in_channels);
    detail::check_positive("Conv2d", "out_channels", out_channels);
    detail::check_positive("Conv2d", "groups", opts.groups);
    if (in_channels % opts.groups || out_channels % opts.groups)
      tessera::detail::fail<shape_error>("Conv2d", "channels ", in_channels, " -> ", out_channels,
                                         " are not divisible by groups = ", opts.groups);
    weight = this->register_parameter(
        "weight",
        Tensor<T, B>(Shape{out_channels, in_channels / opts.groups, kernel[0], kernel[1]}));
    if (with_bias) bias = this->register_parameter("bias", Tensor<T, B>(Shape{out_channels}));
    const Tensor<T, B> b = with_bias ? bias.value() : Tensor<T, B>();
    detail::default_init(weight.value(), with_bias ? &b : nullptr,
                         in_channels / opts.groups * kernel[0] * kernel[1]);
  }
  /// A square kernel.
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel, Conv2dOptions opts = {},
         bool with_bias = true)
      : Conv2d(in_channels, out_channels, {kernel, kernel}, opts, with_bias) {}
  Variable<T, B> forward(const Variable<T, B>& x) override {
    return conv2d(x, weight, bias, options);
  }
  Variable<T, B> forward_relu(const Variable<T, B>& x) override {
    Conv2dOptions fused = options;
    fused.relu = true;
    return conv2d(x, weight, bias, fused);
  }
};

/// 1-D convolution layer: weight [out, in / groups, k]. Input [N, in, L].
template <class T = float, class B = default_backend>
class Conv1d : public Module<T, B> {
 public:
  Variable<T, B> weight, bias;
  Conv1dOptions options;

  Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel, Conv1dOptions opts = {},
         bool with_bias = true)
      : options(opts) {
    detail::check_positive("Conv1d", "in_channels", in_channels);
    detail::check_positive("Conv1d", "out_channels", out_channels);
    detail::check_positive("Conv1d", "groups", opts.groups);
    if (in_channels % opts.groups || out_channels % opts.groups)
      tessera::detail::fail<shape_error>("Conv1d", "channels ", in_channels, " -> ", out_channels,
                                         " are not divisible by groups = ", opts.groups);
    weight = this->register_parameter(
        "weight", Tensor<T, B>(Shape{out_channels, in_channels / opts.groups, kernel}));
    if (with_bias) bias = this->register_parameter("bias", Tensor<T, B>(Shape{out_channels}));
    const Tensor<T, B> b = with_bias ? bias.value() : Tensor<T, B>();
    detail::default_init(weight.value(), with_bias ? &b : nullptr,
                         in_channels / opts.groups * kernel);
  }
  Variable<T, B> forward(const Variable<T, B>& x) override {
    return conv1d(x, weight, bias, options);
  }
};

/// Transposed 2-D convolution layer: weight [in, out / groups, kh, kw]. Input [N, in, H, W].
template <class T = float, class B = default_backend>
class ConvTranspose2d : public Module<T, B> {
 public:
  Variable<T, B> weight, bias;
  ConvTranspose2dOptions options;

  ConvTranspose2d(int64_t in_channels, int64_t out_channels, std::array<int64_t, 2> kernel,
                  ConvTranspose2dOptions opts = {}, bool with_bias = true)
      : options(opts) {
    detail::check_positive("ConvTranspose2d", "in_channels", in_channels);
    detail::check_positive("ConvTranspose2d", "out_channels", out_channels);
    detail::check_positive("ConvTranspose2d", "groups", opts.groups);
    if (in_channels % opts.groups || out_channels % opts.groups)
      tessera::detail::fail<shape_error>("ConvTranspose2d", "channels ", in_channels, " -> ",
                                         out_channels,
                                         " are not divisible by groups = ", opts.groups);
    weight = this->register_parameter(
        "weight",
        Tensor<T, B>(Shape{in_channels, out_channels / opts.groups, kernel[0], kernel[1]}));
    if (with_bias) bias = this->register_parameter("bias", Tensor<T, B>(Shape{out_channels}));
    const Tensor<T, B> b = with_bias ? bias.value() : Tensor<T, B>();
    // PyTorch computes the fan from the weight's dim 1 (out / groups) for transposed convs.
    detail::default_init(weight.value(), with_bias ? &b : nullptr,
                         out_channels / opts.groups * kernel[0] * kernel[1]);
  }
  ConvTranspose2d(int64_t in_channels, int64_t out_channels, int64_t kernel,
                  ConvTranspose2dOptions opts = {}, bool with_bias = true)
      : ConvTranspose2d(in_channels, out_channels, {kernel, kernel}, opts, with_bias) {}
  Variable<T, B> forward(const Variable<T, B>& x) override {
    return conv_transpose2d(x, weight, bias, options);
  }
};

/// Max pooling; MaxPool2d(k) is a k x k window with stride k.
template <class T = float, class B = default_backend>
class MaxPool2d : public Module<T, B> {
 public:
  Pool2dOptions options;
  explicit MaxPool2d(Pool2dOptions opts) : options(opts) {}
  explicit MaxPool2d(int64_t kernel) : options{.kernel = {kernel, kernel}} {}
  Variable<T, B> forward(const Variable<T, B>& x) override { return max_pool2d(x, options); }
};
/// Average pooling; AvgPool2d(k) is a k x k window with stride k.
template <class T = float, class B = default_backend>
class AvgPool2d : public Module<T, B> {
 public:
  Pool2dOptions options;
  explicit AvgPool2d(Pool2dOptions opts) : options(opts) {}
  explicit AvgPool2d(int64_t kernel) : options{.kernel = {kernel, kernel}} {}
  Variable<T, B> forward(const Variable<T, B>& x) override { return avg_pool2d(x, options); }
};
/// Average pooling to a fixed output size.
template <class T = float, class B = default_backend>
class AdaptiveAvgPool2d : public Module<T, B> {
 public:
  std::array<int64_t, 2> output_size;
  explicit AdaptiveAvgPool2d(std::array<int64_t, 2> size) : output_size(size) {}
  Variable<T, B> forward(const Variable<T, B>& x) override {
    return adaptive_avg_pool2d(x, output_size);
  }
};

/// A table of `num` vectors of size `dim`, looked up by int64 ids: m(ids) has shape
/// ids.shape + [dim] (torch.nn.Embedding). Weights are N(0, 1) from nn::default_generator();
/// the row padding_idx (when >= 0) starts at zero and gets no gradient. Takes ids, not a
/// Variable: forward(Variable) throws.
template <class T = float, class B = default_backend>
class Embedding : public Module<T, B> {
 public:
  Variable<T, B> weight;
  int64_t padding_idx;

  Embedding(int64_t num, int64_t dim, int64_t padding = -1) : padding_idx(padding) {
    if (num < 1 || dim < 1 || padding >= num)
      tessera::detail::fail<shape_error>("Embedding", "num ", num, " and dim ", dim,
                                         " must be positive and padding_idx ", padding,
                                         " below num");
    Tensor<T, B> w = randn<T, B>({num, dim}, default_generator());
    if (padding >= 0) w.select(0, padding).fill_(T(0));
    weight = this->register_parameter("weight", w);
  }
  using Module<T, B>::operator();
  Variable<T, B> operator()(const Tensor<int64_t, B>& ids) {
    return embedding(weight, ids, padding_idx);
  }
  Variable<T, B> forward(const Variable<T, B>&) override {
    tessera::detail::fail<error>("Embedding", "takes int64 ids: call it with a Tensor<int64_t>");
  }
};

#define TESSERA_ACTIVATION_MODULE(NAME, CALL)                                 \
  template <class T = float, class B = default_backend>                       \
  class NAME : public Module<T, B> {                                          \
   public:                                                                    \
    Variable<T, B> forward(const Variable<T, B>& x) override { return CALL; } \
  };
/// max(x, 0).
TESSERA_ACTIVATION_MODULE(ReLU, relu(x))
/// Exact GELU.
TESSERA_ACTIVATION_MODULE(GELU, gelu(x))
/// GELU's tanh approximation (torch.nn.GELU(approximate="tanh")).
TESSERA_ACTIVATION_MODULE(GELUTanh, gelu_tanh(x))
/// tanh(x).
TESSERA_ACTIVATION_MODULE(Tanh, tanh(x))
/// 1 / (1 + e^-x).
TESSERA_ACTIVATION_MODULE(Sigmoid, sigmoid(x))
#undef TESSERA_ACTIVATION_MODULE

/// softmax along dim (default: the last).
template <class T = float, class B = default_backend>
class Softmax : public Module<T, B> {
 public:
  int64_t dim;
  explicit Softmax(int64_t d = -1) : dim(d) {}
  Variable<T, B> forward(const Variable<T, B>& x) override { return softmax(x, dim); }
};

/// Flattens dims start..end (default: all but the batch dim).
template <class T = float, class B = default_backend>
class Flatten : public Module<T, B> {
 public:
  int64_t start, end;
  explicit Flatten(int64_t s = 1, int64_t e = -1) : start(s), end(e) {}
  Variable<T, B> forward(const Variable<T, B>& x) override { return flatten(x, start, end); }
};

/// In training mode, zeroes each element with probability p and scales the rest by 1 / (1 - p);
/// the identity in evaluation mode. Takes one number from nn::default_generator() per call and
/// derives each element's draw from it and the element's index (hashed_dropout_mask), on the
/// backend itself: the same mask on every backend, and on a device no copy from the host.
template <class T = float, class B = default_backend>
class Dropout : public Module<T, B> {
 public:
  double p;
  explicit Dropout(double prob = 0.5) : p(prob) {
    if (!(p >= 0 && p <= 1))
      tessera::detail::fail<error>("Dropout", "probability ", p, " is outside [0, 1]");
  }
  Variable<T, B> forward(const Variable<T, B>& x) override {
    if (!this->is_training() || p == 0) return x;
    const T scale = p == 1 ? T(0) : static_cast<T>(1 / (1 - p));
    const autograd::grad_fn::hashed_dropout_mask<T> f{default_generator().next(), 1 - p, scale};
    return x * generate<T, B>(x.shape(), f);
  }
};

/// Runs its layers in order. Construct with the layers (`Sequential{Linear(784, 10), ReLU()}`)
/// or add them with push_back; parameters are named by position ("0.weight").
template <class T = float, class B = default_backend>
class Sequential : public Module<T, B> {
 public:
  Sequential() = default;
  template <class M, class... Rest>
  requires(!std::is_same_v<std::remove_cvref_t<M>, Sequential>) explicit Sequential(M first,
                                                                                    Rest... rest) {
    push_back(std::move(first));
    (push_back(std::move(rest)), ...);
  }
  /// Appends a layer (any Module<T, B>; copies share parameters with the argument).
  template <class M>
  Sequential& push_back(M layer) {
    static_assert(std::is_base_of_v<Module<T, B>, M>, "Sequential: layers must be Module<T, B>");
    auto p = std::make_shared<M>(std::move(layer));
    this->register_module(std::to_string(layers_.size()), *p);
    layers_.push_back(std::move(p));
    return *this;
  }
  /// Runs the layers in order; a layer followed by a ReLU runs as one (forward_relu), and a
  /// Conv2d, ReLU, MaxPool2d as one (autograd::detail::conv2d_relu_max_pool: the pooling's
  /// gradient masked and summed for the bias before it is spread back to the windows).
  Variable<T, B> forward(const Variable<T, B>& x) override {
    Variable<T, B> y = x;
    for (size_t i = 0; i < layers_.size(); ++i) {
      const bool relu_next =
          i + 1 < layers_.size() && dynamic_cast<const ReLU<T, B>*>(layers_[i + 1].get());
      if (relu_next && i + 2 < layers_.size()) {
        const auto* conv = dynamic_cast<const Conv2d<T, B>*>(layers_[i].get());
        const auto* pool = dynamic_cast<const MaxPool2d<T, B>*>(layers_[i + 2].get());
        if (conv && pool) {
          y = autograd::detail::conv2d_relu_max_pool(y, conv->weight, conv->bias, conv->options,
                                                     pool->options);
          i += 2;
          continue;
        }
      }
      if (relu_next) {
        y = layers_[i]->forward_relu(y);
        ++i;
      } else {
        y = layers_[i]->forward(y);
      }
    }
    return y;
  }
  size_t size() const { return layers_.size(); }
  /// The i-th layer (index_error when out of range).
  Module<T, B>& operator[](size_t i) const {
    if (i >= layers_.size())
      tessera::detail::fail<index_error>("Sequential", "layer ", i, " of ", layers_.size());
    return *layers_[i];
  }

 private:
  std::vector<std::shared_ptr<Module<T, B>>> layers_;
};
template <class M, class... Rest>
Sequential(M, Rest...) -> Sequential<typename M::value_type, typename M::backend_type>;

/// Loss functions, also reachable as ts::nn::cross_entropy etc.
using tessera::binary_cross_entropy_with_logits;
using tessera::cross_entropy;
using tessera::l1_loss;
using tessera::mse_loss;
using tessera::nll_loss;

}  // namespace nn
TESSERA_END_NAMESPACE
